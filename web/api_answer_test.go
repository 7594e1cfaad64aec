package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The hand-written batch and single answers must be byte-identical to
// encoding/json's.
func TestAppendBatchJSONMatchesEncodingJSON(t *testing.T) {
	h := func(i int) ledger.Hash { return ledger.Hash(sha256.Sum256([]byte(fmt.Sprint(i)))) }
	cp := ledger.Checkpoint{Origin: "ledger.example <&> \"x\"", Size: 1 << 40, Root: h(1),
		Note: "ledger.example\n3\nroot=\n\n— ledger.host+abc <sig>&\n", CreatedAt: time.Date(2026, 11, 29, 1, 2, 3, 456789, time.UTC)}
	var entries []AppendedJSON
	for i := 0; i < 5; i++ {
		p := ledger.InclusionProof{Index: uint64(i), TreeSize: 1<<40 - uint64(i), LeafHash: h(i + 10), Root: h(1)}
		switch i {
		case 0: // nil hashes
		case 1:
			p.Hashes = []ledger.Hash{}
		default:
			for j := 0; j < i*3; j++ {
				p.Hashes = append(p.Hashes, h(100*i+j))
			}
		}
		entries = append(entries, AppendedJSON{ID: fmt.Sprintf("%032x", i*977), Index: uint64(i) << 33, LeafHash: h(i + 10), Existing: i%2 == 0, InclusionProof: p})
	}
	cpJSON, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	for _, es := range [][]AppendedJSON{entries, entries[:1], {}} {
		got, err := appendBatchJSON(es, cpJSON)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(map[string]any{"entries": es, "checkpoint": cp})
		want = append(want, '\n')
		if !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	}
	if _, err := appendBatchJSON([]AppendedJSON{{ID: `a"b`}}, cpJSON); err == nil {
		t.Fatal("a non-hex id was encoded without escaping")
	}
	for _, e := range entries {
		got, err := appendSingleJSON(e, cpJSON)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(struct {
			AppendedJSON
			Checkpoint ledger.Checkpoint `json:"checkpoint"`
		}{e, cp})
		want = append(want, '\n')
		if !bytes.Equal(got, want) {
			t.Fatalf("single: got  %s\nwant %s", got, want)
		}
	}
	if _, err := appendSingleJSON(AppendedJSON{ID: "x\u2028"}, cpJSON); err == nil {
		t.Fatal("a non-hex id was encoded without escaping (single answer)")
	}
}
