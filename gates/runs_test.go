package gates

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

func byToken(e ledger.Evidence, id, name string) ledger.Evidence {
	e.RecordedBy = &ledger.Recorder{Token: &ledger.RecorderToken{ID: id, Name: name}}
	return e
}

func baselineReason(g GateResult, id string) string {
	for _, b := range g.Baseline {
		if b.ID == id {
			return b.Reason
		}
	}
	return ""
}

// TestLaneCountsEachRunOnce: the same evidence recorded by two tokens is
// one run (the later record is a duplicate naming the first); a copy of a
// superseded run does not count in its place; a distinct run counts.
func TestLaneCountsEachRunOnce(t *testing.T) {
	s := openStore(t)
	rel := only(testRelease(t), "qmv")
	rel.Gates[0].MinRuns = 2
	apply(t, s, rel)
	run := passing("qmv-bias-sum/v1")
	first := record(t, s, byToken(run, "tok_000000000001", "ci-a"))[0]
	copies := record(t, s, byToken(run, "tok_000000000002", "ci-b"), byToken(run, "tok_000000000003", "ci-c"))
	g := evaluate(t, s, rel).Gates[0]
	if g.State != StateOpen || !strings.HasPrefix(g.Reason, "1 of 2 required") || !strings.Contains(g.Reason, "2 duplicate record(s)") {
		t.Fatalf("one run recorded three times: %s (%s); want open, 1 of 2, 2 duplicates", g.State, g.Reason)
	}
	if len(g.Satisfying) != 1 || g.Satisfying[0].ID != first.ID {
		t.Errorf("satisfying %+v; want only the first record %s", g.Satisfying, first.ID)
	}
	for i, c := range copies {
		if r := baselineReason(g, c.ID); !strings.HasPrefix(r, DuplicatePrefix+first.ID) || !strings.Contains(r, "recorded again by token ci-") {
			t.Errorf("copy %d: baseline reason %q; want a duplicate of %s naming its token", i, r, first.ID)
		}
	}

	second := run
	second.StartedAt, second.FinishedAt = second.StartedAt.Add(time.Second), second.FinishedAt.Add(time.Second)
	record(t, s, byToken(second, "tok_000000000002", "ci-b"))
	if g := evaluate(t, s, rel).Gates[0]; g.State != StatePassed || !strings.HasPrefix(g.Reason, "2 passing run(s)") {
		t.Fatalf("two distinct runs: %s (%s); want passed with 2", g.State, g.Reason)
	}

	// Retracting the first record of the run: its copies stay duplicates
	// (they would otherwise take its place), so one run is left.
	supersede(t, s, rel.Version, first.ID)
	g = evaluate(t, s, rel).Gates[0]
	if g.State != StateOpen || !strings.HasPrefix(g.Reason, "1 of 2 required") {
		t.Fatalf("after superseding the first record: %s (%s); want open, 1 of 2", g.State, g.Reason)
	}
	if r := baselineReason(g, copies[0].ID); !strings.HasPrefix(r, DuplicatePrefix+first.ID) {
		t.Errorf("copy of the superseded run: %q; want a duplicate of %s", r, first.ID)
	}
}

// TestRunKeys: the run key of a signed record is its signer key and the
// decoded payload, whatever the envelope's base64 alphabet, padding and
// other signatures; evidence differing in any field but recorded_by and
// signer is another run.
func TestRunKeys(t *testing.T) {
	payload := []byte(`{"lane":"x/v1","pad":"\u00ff\u00fe>>>???"}`)
	sig := func(k string) map[string]string { return map[string]string{"keyid": k, "sig": "AAAA"} }
	envelope := func(p string, sigs ...map[string]string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"payloadType": ledger.PayloadTypeEvidence, "payload": p, "signatures": sigs})
		return b
	}
	std := base64.StdEncoding.EncodeToString(payload)
	variants := []json.RawMessage{
		envelope(std, sig("SHA256:k")),
		envelope(base64.URLEncoding.EncodeToString(payload), sig("SHA256:k")),
		envelope(base64.RawStdEncoding.EncodeToString(payload), sig("SHA256:k")),
		envelope(std, sig("SHA256:k"), sig("SHA256:other")),
		envelope(std, sig("")),
	}
	if std == base64.URLEncoding.EncodeToString(payload) {
		t.Fatal("the fixture payload encodes alike in both alphabets")
	}
	ev := passing("qmv-bias-sum/v1")
	keyOf := func(env json.RawMessage, keyID string) []string {
		e := ev
		e.Signer = &ledger.Signer{Runner: "ci", KeyID: keyID, KeyEntry: strings.Repeat("a", 32), Envelope: env}
		return runKeys(&e)
	}
	want := keyOf(variants[0], "SHA256:k")
	if len(want) != 2 || !strings.HasPrefix(want[0], "dsse:SHA256:k:") {
		t.Fatalf("keys %q; want a dsse and a body key", want)
	}
	for i, v := range variants[1:] {
		if got := keyOf(v, "SHA256:k"); got[0] != want[0] {
			t.Errorf("variant %d: %q; want %q", i+1, got[0], want[0])
		}
	}
	if got := keyOf(variants[0], "SHA256:other"); got[0] == want[0] {
		t.Error("another signer key gives the same run key")
	}
	if got := keyOf(envelope(base64.StdEncoding.EncodeToString(append(payload, ' '))), "SHA256:k"); got[0] == want[0] {
		t.Error("another payload gives the same run key")
	}
	plain := runKeys(&ev)
	if rb := byToken(ev, "tok_000000000009", "x"); runKeys(&rb)[0] != plain[0] {
		t.Error("recorded_by changes the body key")
	}
	if plain[0] != want[1] {
		t.Error("the signer changes the body key")
	}
	for name, change := range map[string]func(*ledger.Evidence){
		"finished_at": func(e *ledger.Evidence) { e.FinishedAt = e.FinishedAt.Add(time.Nanosecond) },
		"device":      func(e *ledger.Evidence) { e.Device.Model = "m2" },
		"details":     func(e *ledger.Evidence) { e.Details = json.RawMessage(`{"a":1}`) },
	} {
		e := ev
		change(&e)
		if runKeys(&e)[0] == plain[0] {
			t.Errorf("another %s gives the same body key", name)
		}
	}
}

// TestFreshnessFromRecordedAt: a run whose finished_at lies after the
// moment the log recorded it (the store's clock is t0; the record was
// appended directly, as an older log may hold it) is fresh from when it
// was recorded, not from its finished_at: it stops counting at
// recorded_at + freshness.
func TestFreshnessFromRecordedAt(t *testing.T) {
	s := openStore(t)
	rel := only(testRelease(t), "qmv")
	rel.Gates[0].Freshness = "1d"
	apply(t, s, rel)
	run := passing("qmv-bias-sum/v1")
	run.StartedAt, run.FinishedAt = t0.Add(30*24*time.Hour), t0.Add(30*24*time.Hour+time.Minute)
	ent := record(t, s, run)[0]
	if !ent.RecordedAt.Equal(t0) {
		t.Fatalf("recorded at %s; want the store clock %s", ent.RecordedAt, t0)
	}
	at := func(now time.Time) GateResult {
		rd, err := Evaluate(context.Background(), s, rel, EvalOptions{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return rd.Gates[0]
	}
	if g := at(t0.Add(23 * time.Hour)); g.State != StatePassed {
		t.Errorf("within a day of recorded_at: %s (%s); want passed", g.State, g.Reason)
	}
	g := at(run.FinishedAt.Add(time.Hour))
	if g.State != StateOpen || !strings.Contains(baselineReason(g, ent.ID), "stale: recorded "+t0.Format(time.RFC3339)) {
		t.Errorf("an hour after its future finished_at, 30 days after it was recorded: %s, baseline %q; want open, stale from recorded_at", g.State, baselineReason(g, ent.ID))
	}
}
