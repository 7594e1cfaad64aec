package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// encodingJSON is what appendEvidence must equal: encoding/json with HTML
// escaping off, without the newline.
func encodingJSON(t testing.TB, e *Evidence) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func checkAppendEvidence(t testing.TB, e *Evidence) {
	t.Helper()
	want, err := encodingJSON(t, e)
	got, ok := appendEvidence(nil, e)
	if err != nil {
		if ok {
			t.Fatalf("encoding/json fails (%v) but appendEvidence gave %s", err, got)
		}
		return
	}
	if !ok {
		// Allowed only where the encoder leaves the record to
		// encoding/json on purpose.
		if e.StartedAt.Location() == time.UTC && e.FinishedAt.Location() == time.UTC &&
			json.Valid(e.Details) == (len(e.Details) > 0) && (e.Signer == nil || e.Signer.Envelope == nil || json.Valid(e.Signer.Envelope)) {
			t.Fatalf("appendEvidence declined a record encoding/json encodes:\n%s", want)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("appendEvidence differs from encoding/json\n got %s\nwant %s", got, want)
	}
}

func TestAppendEvidenceMatchesEncodingJSON(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	full := Evidence{
		Lane: "qmv-bias-sum/v1",
		Subject: Subject{Repository: "github.com/ml-explore/mlx", Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40), Dirty: true,
			Artifacts: map[string]string{"libmlx.so": "sha256:" + strings.Repeat("c", 64), "a/b<c>&": "x", "": "empty key", "é": "ü"}},
		Backend: BackendCUDA, Device: Device{Model: "NVIDIA H200", Driver: "570.1", Cores: 132, Attrs: map[string]string{"z": "1", "a": "2"}},
		Runner:     RunnerBuild{Version: "v1.2.3", Commit: "deadbeef"},
		CasesExact: 156, CasesTotal: -216, FailingCases: []string{"case/1", "case\t2", "<html>&"},
		Control: ControlNotCaught, Status: StatusFailed, StartedAt: start, FinishedAt: start.Add(time.Second),
		Details: json.RawMessage(` { "a" : [1, 2.5e3, "x\u00e9<>&\u2028"], "b": {"c": null, "d": true} } `),
		Run:     &RunRef{ID: "run_" + strings.Repeat("d", 32), Attempt: 2},
		Signer:  &Signer{Runner: "h200", KeyID: "k1", KeyEntry: "ev_1", Envelope: json.RawMessage(`{"payload": "YQ==", "signatures": []}`)},
		RecordedBy: &Recorder{Token: &RecorderToken{ID: "tok_0123456789ab", Name: "ci"},
			Runner: &RecorderRunner{Name: "h200", KeyID: "k1"}},
	}
	cases := map[string]Evidence{
		"zero":  {},
		"full":  full,
		"times": {StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), FinishedAt: time.Date(9999, 12, 31, 23, 59, 59, 100, time.UTC)},
	}
	strs := []string{"", "plain", `quote " backslash \ slash /`, "\x00\x01\x07\x08\x0b\x0c\x1f\x7f", "\b\f\n\r\t",
		"<script>&amp;</script>", "\u2028\u2029", "é ü 中文 🎉", "bad \xff\xfe utf8 \xc3", "\xed\xa0\x80 surrogate", "U+FFFD \ufffd"}
	for i, s := range strs {
		e := full
		e.Lane, e.Subject.Repository, e.Device.Model, e.Runner.Commit = s, s, s, s
		e.Subject.Artifacts = map[string]string{s: s, "k": s}
		e.FailingCases = []string{s}
		e.RecordedBy = &Recorder{Runner: &RecorderRunner{Name: s, KeyID: s}}
		e.Signer = &Signer{Runner: s, Envelope: nil}
		e.Run = &RunRef{ID: s, Attempt: -i}
		cases["string "+string(rune('a'+i))] = e
	}
	only := full
	only.Device, only.Runner = Device{Driver: "d"}, RunnerBuild{Commit: "c"}
	only.RecordedBy = &Recorder{}
	cases["later members only"] = only
	for name, e := range cases {
		t.Run(name, func(t *testing.T) { checkAppendEvidence(t, &e) })
	}

	// Where the encoder declines, PrepareEvidence still gives
	// encoding/json's bytes or error.
	for name, e := range map[string]Evidence{
		"local time":     {StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))},
		"year 10000":     {StartedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"invalid detail": {Details: json.RawMessage(`{"a":`)},
	} {
		if _, ok := appendEvidence(nil, &e); ok {
			t.Errorf("%s: appendEvidence did not decline", name)
		}
	}
}

// TestPrepareEvidenceBytesUnchanged: the canonical bytes of a prepared
// record are encoding/json's, so entry ids and leaf hashes of records
// recorded before this encoder are reproduced.
func TestPrepareEvidenceBytesUnchanged(t *testing.T) {
	body := []byte(`{"lane":"qmv-bias-sum/v1","subject":{"repository":"github.com/ml-explore/mlx","commit":"` + strings.Repeat("1", 40) +
		`","tree":"` + strings.Repeat("2", 40) + `","artifacts":{"libmlx.so":"sha256:` + strings.Repeat("3", 64) + `"}},"backend":"cpu",` +
		`"device":{"model":"test cpu","cores":2},"runner":{"version":"test"},"cases_exact":214,"cases_total":216,"failing_cases":["b","a"],` +
		`"control":"caught","status":"failed","started_at":"2026-11-29T11:00:00.5+01:00","finished_at":"2026-11-29T10:00:01Z",` +
		`"details":{"z":1,"a":[true,null]}}`)
	e, got, err := PrepareEvidence(body)
	if err != nil {
		t.Fatal(err)
	}
	want, err := encodingJSON(t, &e)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("prepared bytes\n got %s\nwant %s", got, want)
	}
}

func FuzzAppendEvidence(f *testing.F) {
	f.Add("qmv-bias-sum/v1", "github.com/x/y", "libmlx.so", "sha256:00", "model", 3, true, int64(1764410400123456789), `{"a":1}`, "tok_0123456789ab")
	f.Add("\xff\u2028<&>", "\x00\x1f", "", "\"\\", "", -1, false, int64(-62135596800000000), ` [ ] `, "")
	f.Fuzz(func(t *testing.T, lane, repo, key, val, model string, cores int, dirty bool, nanos int64, details, tok string) {
		ts := time.Unix(0, nanos).UTC()
		e := Evidence{Lane: lane, Subject: Subject{Repository: repo, Commit: val, Tree: key, Dirty: dirty, Artifacts: map[string]string{key: val, val: key}},
			Backend: Backend(model), Device: Device{Model: model, Cores: cores, Attrs: map[string]string{model: lane}},
			Runner: RunnerBuild{Version: key}, CasesExact: cores, CasesTotal: -cores, FailingCases: []string{lane, repo},
			Control: Control(val), Status: Status(key), StartedAt: ts, FinishedAt: ts.Add(time.Duration(cores)), Details: json.RawMessage(details)}
		if tok != "" {
			e.RecordedBy = &Recorder{Token: &RecorderToken{ID: tok, Name: lane}}
			e.Signer = &Signer{Runner: tok, KeyID: key, KeyEntry: val, Envelope: json.RawMessage(details)}
			e.Run = &RunRef{ID: model, Attempt: cores}
		}
		checkAppendEvidence(t, &e)
	})
}

func BenchmarkEvidenceEncode(b *testing.B) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	e := Evidence{Lane: "qmv-bias-sum/v1", Subject: Subject{Repository: "github.com/ml-explore/mlx", Commit: strings.Repeat("1", 40),
		Tree: strings.Repeat("7", 40), Artifacts: map[string]string{"libmlx.so": "sha256:" + strings.Repeat("0", 64)}},
		Backend: BackendCPU, Device: Device{Model: "test cpu", Cores: 2}, Runner: RunnerBuild{Version: "test"},
		CasesExact: 216, CasesTotal: 216, Control: ControlCaught, Status: StatusPassed, StartedAt: start, FinishedAt: start.Add(time.Second),
		RecordedBy: &Recorder{Token: &RecorderToken{ID: "tok_0123456789ab", Name: "ci"}}}
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalNoEscape(&e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendEvidence", func(b *testing.B) {
		for b.Loop() {
			if _, ok := appendEvidence(make([]byte, 0, 640), &e); !ok {
				b.Fatal("declined")
			}
		}
	})
}

// TestRecordRecordedBy: a record prepared with RecordedBy is the record
// whose body carried that recorded_by (same bytes, same id), and a body
// that carries one itself is refused naming the field.
func TestRecordRecordedBy(t *testing.T) {
	body := []byte(`{"lane":"qmv-bias-sum/v1","subject":{"repository":"github.com/x/y","commit":"` + strings.Repeat("1", 40) +
		`","tree":"` + strings.Repeat("2", 40) + `"},"backend":"cpu","device":{},"runner":{},"cases_exact":1,"cases_total":1,` +
		`"control":"caught","status":"passed","started_at":"2026-11-29T10:00:00Z","finished_at":"2026-11-29T10:00:01Z"}`)
	rec := &Recorder{Token: &RecorderToken{ID: "tok_0123456789ab", Name: "ci"}}
	stamped := append([]byte(`{"recorded_by":{"token":{"id":"tok_0123456789ab","name":"ci"}},`), body[1:]...)
	want, err := PrepareOne(Record{Kind: KindEvidence, Body: stamped})
	if err != nil {
		t.Fatal(err)
	}
	got, err := PrepareOne(Record{Kind: KindEvidence, Body: body, RecordedBy: rec})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Body, want.Body) || got.ID != want.ID {
		t.Fatalf("RecordedBy gives\n%s (%s)\nthe stamped body gives\n%s (%s)", got.Body, got.ID, want.Body, want.ID)
	}
	_, err = PrepareOne(Record{Kind: KindEvidence, Body: stamped, RecordedBy: rec})
	var le *Error
	if !errors.As(err, &le) || le.Field != RecordedByField {
		t.Fatalf("a body with recorded_by and RecordedBy set: %v", err)
	}
}
