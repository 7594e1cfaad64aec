package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// refCaseIDs is the reference rule for case ids, written the plain way:
// for a taken id, try " #2", " #3"... from 2 every time. It is quadratic
// in the number of duplicates and serves only as the oracle the linear
// caseIDs must agree with, input for input.
type refCaseIDs map[string]int

func (ids refCaseIDs) next(parts ...string) string {
	var keep []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			keep = append(keep, p)
		}
	}
	id := strings.Join(keep, " > ")
	if id == "" {
		id = "(unnamed)"
	}
	if len(id) > 230 {
		sum := sha256.Sum256([]byte(id))
		cut := 216
		for cut > 0 && id[cut]&0xC0 == 0x80 {
			cut--
		}
		id = id[:cut] + "…" + hex.EncodeToString(sum[:4])
	}
	base := id
	for n := 1; ids[id] > 0; {
		n++
		id = fmt.Sprintf("%s #%d", base, n)
	}
	ids[id]++
	return id
}

// TestCaseIDsTable pins the ids of tricky sequences: the literal ids are
// the rule's (README "Formats"), and the reference agrees with each.
func TestCaseIDsTable(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes: cut with a digest suffix
	cases := []struct {
		name string
		in   [][]string
		want []string
	}{
		{"plain duplicates", [][]string{{"s", "a"}, {"s", "a"}, {"s", "a"}}, []string{"s > a", "s > a #2", "s > a #3"}},
		{"own name ending in #2 first", [][]string{{"a #2"}, {"a"}, {"a"}, {"a"}}, []string{"a #2", "a", "a #3", "a #4"}},
		{"own name ending in #2 after", [][]string{{"a"}, {"a"}, {"a #2"}, {"a"}}, []string{"a", "a #2", "a #2 #2", "a #3"}},
		{"own #3 between", [][]string{{"a"}, {"a #3"}, {"a"}, {"a"}, {"a"}}, []string{"a", "a #3", "a #2", "a #4", "a #5"}},
		{"numbered numbered", [][]string{{"a #2"}, {"a #2"}, {"a"}, {"a"}, {"a #2 #2"}}, []string{"a #2", "a #2 #2", "a", "a #3", "a #2 #2 #2"}},
		{"empty names", [][]string{{""}, {"  "}, {}, {"(unnamed)"}}, []string{"(unnamed)", "(unnamed) #2", "(unnamed) #3", "(unnamed) #4"}},
		{"empty parts dropped", [][]string{{"s", "", "a"}, {"s", "a"}, {" s ", " a "}}, []string{"s > a", "s > a #2", "s > a #3"}},
		{"class and name collide with a path", [][]string{{"s", "c", "a"}, {"s", "c > a"}, {"s > c", "a"}}, []string{"s > c > a", "s > c > a #2", "s > c > a #3"}},
		{"no leading zeros", [][]string{{"a"}, {"a #02"}, {"a"}}, []string{"a", "a #02", "a #2"}},
		{"long ids share a digest", [][]string{{long}, {long}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ids, ref := newCaseIDs(), refCaseIDs{}
			for i, parts := range c.in {
				got, want := ids.next(parts...), ref.next(parts...)
				if got != want {
					t.Fatalf("case %d %q: id %q, the reference gives %q", i, parts, got, want)
				}
				if c.want != nil && got != c.want[i] {
					t.Fatalf("case %d %q: id %q, want %q", i, parts, got, c.want[i])
				}
				if len(got) > 256 {
					t.Fatalf("case %d: id of %d bytes, over the ledger's 256", i, len(got))
				}
			}
		})
	}
}

// TestCaseIDsMatchReference feeds random sequences drawn from names built
// to collide (bare names, names already numbered, numbered twice, blank)
// to both implementations: every id must agree.
func TestCaseIDsMatchReference(t *testing.T) {
	atoms := []string{"a", "a #2", "a #3", "a #2 #2", "a #2 #3", "a #10", "b", "b #2", "", " ", "(unnamed)", "(unnamed) #2", "a > b", "a #1", "a #0"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		ids, ref := newCaseIDs(), refCaseIDs{}
		n := 1 + rng.IntN(60)
		for i := range n {
			var parts []string
			for range 1 + rng.IntN(2) {
				parts = append(parts, atoms[rng.IntN(len(atoms))])
			}
			if got, want := ids.next(parts...), ref.next(parts...); got != want {
				t.Fatalf("round %d case %d %q: id %q, the reference gives %q", round, i, parts, got, want)
			}
		}
	}
}

// TestJUnitIDsMatchReference decodes JUnit documents whose names collide
// across classnames, suites and own " #n" names, and checks the ids
// against the reference rule applied to the same parts.
func TestJUnitIDsMatchReference(t *testing.T) {
	doc := `<testsuites>
<testsuite name="s">
  <testcase name="a #2"/>
  <testcase name="a"/>
  <testcase name="a"/>
  <testcase classname="s" name="a"/>
  <testcase classname="c" name="a"/>
  <testcase classname="" name="c &gt; a"/>
  <testcase name=""/>
  <testcase/>
  <testsuite name="c"><testcase name="a"/></testsuite>
</testsuite>
<testsuite name="s"><testcase name="a"/><testcase name="a #3"/></testsuite>
</testsuites>`
	run, err := DecodeJUnit(context.Background(), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"s > a #2", "s > a", "s > a #3", "s > a #4", "s > c > a", "s > c > a #2", "s", "s #2", "s > c > a #3", "s > a #5", "s > a #3 #2"}
	ref := refCaseIDs{}
	refParts := [][]string{{"s", "a #2"}, {"s", "a"}, {"s", "a"}, {"s", "a"}, {"s", "c", "a"}, {"s", "c > a"}, {"s", ""}, {"s", ""}, {"s", "c", "a"}, {"s", "a"}, {"s", "a #3"}}
	if len(run.Cases) != len(want) {
		t.Fatalf("%d cases, want %d", len(run.Cases), len(want))
	}
	for i, c := range run.Cases {
		if r := ref.next(refParts[i]...); c.ID != want[i] || r != want[i] {
			t.Errorf("case %d: id %q, reference %q, want %q", i, c.ID, r, want[i])
		}
	}
}

// duplicateJUnit is a bare <testsuite> with n cases all named "a".
func duplicateJUnit(n int) []byte {
	var b strings.Builder
	b.WriteString(`<testsuite name="s">`)
	for range n {
		b.WriteString(`<testcase name="a"/>`)
	}
	b.WriteString(`</testsuite>`)
	return []byte(b.String())
}

// duplicateInToto is an in-toto test-result Statement whose passedTests
// name "a" n times.
func duplicateInToto(n int) []byte {
	names := make([]string, n)
	for i := range names {
		names[i] = "a"
	}
	pred, _ := json.Marshal(map[string]any{"result": "PASSED", "passedTests": names, "warnedTests": []string{}, "failedTests": []string{}})
	st, _ := json.Marshal(map[string]any{"_type": StatementV1, "predicateType": PredicateTestResult, "predicate": json.RawMessage(pred),
		"subject": []any{map[string]any{"name": "x", "digest": map[string]string{"sha256": strings.Repeat("c", 64)}}}})
	return st
}

// decoders maps each format with cases to its decoder, short of the
// evidence record (whose details are capped at 2 MiB, less than the ids
// of 50,000 cases).
var decoders = map[string]func(ctx context.Context, body []byte) (*Run, error){
	FormatJUnit:  DecodeJUnit,
	FormatGoTest: DecodeGoTest,
	FormatInToto: func(ctx context.Context, body []byte) (*Run, error) { return decodeStatement(ctx, body, testParams()) },
}

// TestDuplicateNamesLinear guards against quadratic numbering: 50,000
// cases of one name decode in well under a second on the development
// machine (BENCHMARKS.md); the bound here is 5 s so that only a
// quadratic rule (minutes at this size) can fail it, even under -race.
func TestDuplicateNamesLinear(t *testing.T) {
	const n = 40_000
	for _, c := range []struct {
		format string
		body   func(int) []byte
	}{{FormatJUnit, duplicateJUnit}, {FormatInToto, duplicateInToto}} {
		t.Run(c.format, func(t *testing.T) {
			// The growth from n/8 to n names, each the best of five
			// decodes taken in turn (small, large, small, ...), so that a
			// burst of load or a GC lands on both sizes alike: about 8
			// when the numbering is linear, about 64 when it is
			// quadratic; the bound (32) is half the quadratic growth and
			// four times the linear one, so a loaded machine (-race in CI
			// beside other builds; XML decoding's fresh pages) does not
			// fail it. A ratio, not a time.
			smallBody, largeBody := c.body(n/8), c.body(n)
			decode := func(k int, body []byte) time.Duration {
				start := time.Now()
				d, err := decoders[c.format](context.Background(), body)
				took := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Cases) != k || d.Cases[k-1].ID != fmt.Sprintf("a #%d", k) && d.Cases[k-1].ID != fmt.Sprintf("s > a #%d", k) {
					t.Fatalf("%d cases, last id %q", len(d.Cases), d.Cases[len(d.Cases)-1].ID)
				}
				return took
			}
			// The collector's cost grows with the live heap, not with
			// the numbering: it is off while the decodes are timed.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			small, large := time.Duration(1<<62), time.Duration(1<<62)
			for range 5 {
				runtime.GC()
				small = min(small, decode(n/8, smallBody))
				large = min(large, decode(n, largeBody))
			}
			ratio := float64(large) / float64(small)
			t.Logf("%d duplicate names: %v, %d: %v (growth %.1f for 8x the names)", n/8, small, n, large, ratio)
			if ratio > 32 {
				t.Fatalf("8x the duplicate names took %.1fx the time: numbering is not linear", ratio)
			}
		})
	}
}

// countingCtx is a context that reports itself canceled from the
// after-th call of Err on, so a test sees whether a decoder keeps asking.
type countingCtx struct {
	context.Context
	calls, after int
}

func (c *countingCtx) Err() error {
	c.calls++
	if c.calls >= c.after {
		return context.Canceled
	}
	return nil
}

// goTestStream is a test2json stream of n passing tests in one package.
func goTestStream(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"Action":"run","Package":"p","Test":"T%d"}`+"\n", i)
		fmt.Fprintf(&b, `{"Action":"pass","Package":"p","Test":"T%d","Elapsed":0}`+"\n", i)
	}
	b.WriteString(`{"Action":"pass","Package":"p","Elapsed":1}` + "\n")
	return []byte(b.String())
}

// TestDecodeStopsOnCancel: a context done before the decode, or one that
// turns done part way (the fifth check), stops every decoder with
// context.Canceled and no run; a context that stays live is asked many
// times over a large input, so a cancellation is seen promptly wherever
// it falls.
func TestDecodeStopsOnCancel(t *testing.T) {
	const n = 50_000
	inputs := []struct {
		format string
		body   []byte
	}{{FormatJUnit, duplicateJUnit(n)}, {FormatGoTest, goTestStream(n)}, {FormatInToto, duplicateInToto(n)}}
	for _, in := range inputs {
		t.Run(in.format, func(t *testing.T) {
			done, cancel := context.WithCancel(context.Background())
			cancel()
			if res, err := DecodeFormat(done, in.format, in.body, testParams()); !errors.Is(err, context.Canceled) || res != nil {
				t.Fatalf("canceled before: err %v, result %v; want context.Canceled and nothing", err, res != nil)
			}
			decode := decoders[in.format]
			live := &countingCtx{Context: context.Background(), after: 1 << 30}
			if _, err := decode(live, in.body); err != nil {
				t.Fatal(err)
			}
			if live.calls < n/cancelStep {
				t.Fatalf("a live context was checked %d times over %d cases: want at least %d", live.calls, n, n/cancelStep)
			}
			mid := &countingCtx{Context: context.Background(), after: 5}
			if res, err := decode(mid, in.body); !errors.Is(err, context.Canceled) || res != nil {
				t.Fatalf("canceled part way: err %v, result %v; want context.Canceled and nothing", err, res != nil)
			}
		})
	}
}

// TestDecodeStopsOnDeadline: a real deadline that passes during the
// decode of 100,000 cases ends it within a fraction of the decode time.
func TestDecodeStopsOnDeadline(t *testing.T) {
	body := duplicateJUnit(100_000)
	start := time.Now()
	if _, err := DecodeJUnit(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), full/10)
	defer cancel()
	start = time.Now()
	_, err := DecodeJUnit(ctx, body)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
	// A decoder that looks at ctx only at the end takes the whole decode;
	// 500 ms of slack keeps a burst of load from failing one that stops.
	if took > full/2+500*time.Millisecond {
		t.Fatalf("stopped after %v; the whole decode takes %v", took, full)
	}
}

func BenchmarkDecodeJUnitDuplicates50k(b *testing.B) {
	benchDecode(b, FormatJUnit, duplicateJUnit(50_000))
}

func BenchmarkDecodeJUnitDistinct50k(b *testing.B) {
	var s strings.Builder
	s.WriteString(`<testsuite name="s">`)
	for i := range 50_000 {
		fmt.Fprintf(&s, `<testcase name="a%d"/>`, i)
	}
	s.WriteString(`</testsuite>`)
	benchDecode(b, FormatJUnit, []byte(s.String()))
}

func BenchmarkDecodeInTotoDuplicates50k(b *testing.B) {
	benchDecode(b, FormatInToto, duplicateInToto(50_000))
}

func benchDecode(b *testing.B, format string, body []byte) {
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decoders[format](context.Background(), body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCaseIDsDuplicates5k compares the numbering alone, 5,000 ids
// of one name, with the reference rule (sub-benchmark "reference").
func BenchmarkCaseIDsDuplicates5k(b *testing.B) {
	b.Run("linear", func(b *testing.B) {
		for b.Loop() {
			ids := newCaseIDs()
			for range 5000 {
				ids.next("s", "a")
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		for b.Loop() {
			ids := refCaseIDs{}
			for range 5000 {
				ids.next("s", "a")
			}
		}
	})
}

// TestIDPrefixMatchesReference splits random part lists (short, long,
// multi-byte, blank) at a random point, the first half kept as an
// idPrefix as a suite's path is: the id must be the reference's for the
// whole list, through every length regime (whole, cut, hashed state).
func TestIDPrefixMatchesReference(t *testing.T) {
	atoms := []string{"a", " b ", "", "  ", "é", strings.Repeat("x", 100), strings.Repeat("é", 60), strings.Repeat("€", 400), strings.Repeat("y", 1500), "s > t"}
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 2000 {
		parts := make([]string, rng.IntN(12))
		for i := range parts {
			parts[i] = atoms[rng.IntN(len(atoms))]
		}
		k := rng.IntN(len(parts) + 1)
		var p idPrefix
		for _, part := range parts[:k] {
			p = p.extend(part)
		}
		ids, ref := newCaseIDs(), refCaseIDs{}
		for rep := range 3 { // and numbered alike
			if got, want := ids.nextUnder(p, parts[k:]...), ref.next(parts...); got != want {
				t.Fatalf("round %d rep %d, %d parts split at %d: id %q, the reference gives %q", round, rep, len(parts), k, got, want)
			}
		}
	}
}

// deepJUnit is n cases named "a" under suites nested depth deep.
func deepJUnit(depth, n int) []byte {
	return []byte(strings.Repeat(`<testsuite name="s">`, depth) + strings.Repeat(`<testcase classname="c" name="a"/>`, n) + strings.Repeat(`</testsuite>`, depth))
}

// TestDeepSuitesLinear: cases under suites nested 5,000 deep (a 4 MiB
// body holds 200,000 of them) get the reference's ids and decode in time
// linear in the input, not in depth times cases: within 5 times the same
// cases under one suite, decoded just before (a rule that joins the
// whole path per case takes about 50 times as long).
func TestDeepSuitesLinear(t *testing.T) {
	const depth, n = 5000, 50_000
	start := time.Now()
	if _, err := DecodeJUnit(context.Background(), deepJUnit(1, n)); err != nil {
		t.Fatal(err)
	}
	shallow := time.Since(start)
	start = time.Now()
	run, err := DecodeJUnit(context.Background(), deepJUnit(depth, n))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	path := make([]string, depth)
	for i := range path {
		path[i] = "s"
	}
	if len(run.Cases) != n {
		t.Fatalf("%d cases, want %d", len(run.Cases), n)
	}
	ref := refCaseIDs{}
	parts := append(path, "c", "a")
	base := ref.next(parts...)
	for i, c := range run.Cases {
		want := base
		if i > 0 {
			want = fmt.Sprintf("%s #%d", base, i+1)
		}
		if i > 0 && i < 3 {
			if r := ref.next(parts...); r != want {
				t.Fatalf("case %d: the reference gives %q, want %q", i, r, want)
			}
		}
		if c.ID != want {
			t.Fatalf("case %d: id %q, the reference gives %q", i, c.ID, want)
		}
	}
	// Ids that cost the depth per case take thousands of times longer;
	// 10x leaves room for a loaded machine (-race in CI).
	if took > 10*shallow+100*time.Millisecond {
		t.Fatalf("%d cases %d suites deep took %v, under one suite %v: ids cost the depth per case", n, depth, took, shallow)
	}
	t.Logf("%d cases %d suites deep: %v; under one suite: %v", n, depth, took, shallow)
}

func BenchmarkDecodeJUnitDeep5000(b *testing.B) {
	benchDecode(b, FormatJUnit, deepJUnit(5000, 50_000))
}

func BenchmarkDecodeJUnitDuplicates2k(b *testing.B) {
	benchDecode(b, FormatJUnit, duplicateJUnit(2000))
}

// BenchmarkDecodeJUnitDeep2000x20k is 20,000 distinct cases under
// suites nested 2,000 deep: the cost of the path alone.
func BenchmarkDecodeJUnitDeep2000x20k(b *testing.B) {
	var c strings.Builder
	for i := range 20_000 {
		fmt.Fprintf(&c, `<testcase classname="c" name="a%d"/>`, i)
	}
	benchDecode(b, FormatJUnit, []byte(strings.Repeat(`<testsuite name="s">`, 2000)+c.String()+strings.Repeat(`</testsuite>`, 2000)))
}

// TestJUnitTimestampKept: a suite timestamp that parses is the run's
// time whatever its year (evidence validation then refuses one before
// 1970 or in the future, naming started_at), never silently replaced by
// the receiving time; only Go's zero time reads as none.
func TestJUnitTimestampKept(t *testing.T) {
	for ts, want := range map[string]time.Time{
		"1960-06-01T00:00:00Z": time.Date(1960, 6, 1, 0, 0, 0, 0, time.UTC),
		"1970-06-01T00:00:00":  time.Date(1970, 6, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-30T10:00:00Z": time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		"0001-01-01T00:00:00":  {},
	} {
		r, err := DecodeJUnit(context.Background(), []byte(`<testsuite name="s" tests="1" timestamp="`+ts+`"><testcase name="a"/></testsuite>`))
		if err != nil {
			t.Fatalf("%s: %v", ts, err)
		}
		if !r.Started.Equal(want) {
			t.Errorf("timestamp %s: started %v, want %v", ts, r.Started, want)
		}
	}
}
