// Command ingestmem measures what concurrent maximum-size ingest requests
// cost a real `ledger serve` in memory: for each input format it starts
// the built binary on a fresh database with the default settings (plus
// the Sigstore trust setting the bundle format needs), sends -n
// concurrent POST /api/v1/evidence requests whose bodies are each just
// under -max-body bytes, and reads the server's peak resident set
// (VmHWM, /proc/PID/status) after they have all been answered. It then
// reads the largest leaf back (GET /api/v1/log/leaves/N) and reports the
// answer's size against the leaf's. Linux only (VmHWM).
//
//	go build -o bin/ledger ./cmd/ledger
//	go run ./scripts/ingestmem -bin bin/ledger
//
// Every request body is distinct, so none is answered from the
// idempotent-replay path. The formats and their bodies:
//
//	evidence  an array of 32 native evidence objects, ~128 KiB of details each
//	junit     ~9,000 testcases with <system-out> text
//	gotest    ~20,000 tests with output lines
//	in-toto   a test-result Statement: ~9,000 cases, configuration padding
//	dsse      that Statement in a DSSE envelope signed by a registered runner key
//	sigstore  a Sigstore bundle (a corpus bundle's certificate and log entry,
//	          a max-size Statement as its DSSE payload): refused by the
//	          verifier after a full decode
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/verify"
)

func main() {
	bin := flag.String("bin", "bin/ledger", "the ledger binary to measure")
	n := flag.Int("n", 16, "concurrent requests per format")
	maxBody := flag.Int("max-body", 4<<20, "the server's --max-body (bodies are generated just under it); the server gets the flag only when it is not the default")
	only := flag.String("formats", "evidence,junit,gotest,in-toto,dsse,sigstore", "formats to measure, comma-separated")
	corpus := flag.String("corpus", "../shared/corpus", "the shared corpus (Sigstore trusted root and a bundle)")
	extra := flag.String("serve-args", "", "further arguments for ledger serve, space-separated")
	flag.Parse()
	fmt.Printf("%-9s %5s %10s %10s %11s %11s  %s\n", "format", "n", "body_MiB", "base_MiB", "VmHWM_MiB", "per_req_MiB", "statuses")
	for _, f := range strings.Split(*only, ",") {
		if err := measure(*bin, f, *n, *maxBody, *corpus, strings.Fields(*extra)); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

const (
	lane   = "ci-tests/v1"
	commit = "1111111111111111111111111111111111111111"
	tree   = "2222222222222222222222222222222222222222"
)

func measure(bin, format string, n, maxBody int, corpus string, extra []string) error {
	dir, err := os.MkdirTemp("", "ingestmem-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db := filepath.Join(dir, "l.db")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--db", db}, args...)...).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("ledger %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	}
	if _, err := run("migrate"); err != nil {
		return err
	}
	tok, err := run("token", "create", "--name", "ci", "--scope", "record")
	if err != nil {
		return err
	}
	args := []string{"serve", "--addr", "127.0.0.1:0"}
	if maxBody != 4<<20 {
		args = append(args, "--max-body", strconv.Itoa(maxBody))
	}
	var priv ed25519.PrivateKey
	var bundle map[string]any
	switch format {
	case "dsse":
		if _, err := run("token", "create", "--name", "adm", "--scope", "admin"); err != nil {
			return err
		}
		key := filepath.Join(dir, "runner")
		if _, err := run("runner", "keygen", key); err != nil {
			return err
		}
		if _, err := run("runner", "add", "h1", key+".pub", "--as", "adm"); err != nil {
			return err
		}
		if priv, err = loadKey(key); err != nil {
			return err
		}
	case "sigstore":
		sg := filepath.Join(corpus, "x509", "sigstore-go")
		pol := filepath.Join(dir, "policy.yaml")
		os.WriteFile(pol, []byte("rules:\n  - {lane: "+lane+", issuer_regexp: '.*', san_regexp: '.*'}\n"), 0o644)
		args = append(args, "--sigstore-trusted-root", filepath.Join(sg, "trusted-roots", "trusted-root-public-good.json"), "--sigstore-policy", pol)
		b, err := os.ReadFile(filepath.Join(sg, "bundle-provenance.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &bundle); err != nil {
			return err
		}
	}
	cmd := exec.Command(bin, append(append([]string{"--db", db}, args...), extra...)...)
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	url, err := serverURL(stdout)
	if err != nil {
		return fmt.Errorf("%v: %s", err, stderr.String())
	}
	go io.Copy(io.Discard, stdout)

	bodies := make([][]byte, n)
	for i := range bodies {
		if bodies[i], err = body(format, i, maxBody-4096, priv, bundle); err != nil {
			return err
		}
	}
	time.Sleep(500 * time.Millisecond) // the start-up full scan is done
	base, err := status(cmd.Process.Pid, "VmHWM")
	if err != nil {
		return err
	}
	q := "?lane=" + lane + "&backend=cpu&repository=example/r&commit=" + commit + "&tree=" + tree
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", url+"/api/v1/evidence"+q, bytes.NewReader(bodies[i]))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", mediaType(format))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes[i] = -1
				return
			}
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
			if resp.StatusCode >= 300 && i == 0 {
				fmt.Fprintf(os.Stderr, "%s: %d %s\n", format, resp.StatusCode, clip(msg))
			}
		})
	}
	wg.Wait()
	peak, err := status(cmd.Process.Pid, "VmHWM")
	if err != nil {
		return err
	}
	tally := map[int]int{}
	for _, c := range codes {
		tally[c]++
	}
	var st []string
	for c, k := range tally {
		st = append(st, fmt.Sprintf("%dx%d", k, c))
	}
	fmt.Printf("%-9s %5d %10.2f %10.1f %11.1f %11.1f  %s\n", format, n, float64(len(bodies[0]))/(1<<20), kib(base), kib(peak),
		(kib(peak)-kib(base))/float64(n), strings.Join(st, " "))
	return leafRead(url, format)
}

// leafRead reads every leaf back and reports the largest leaf's answer.
func leafRead(url, format string) error {
	resp, err := http.Get(url + "/api/v1/log/checkpoint")
	if err != nil {
		return err
	}
	var cp struct{ Size uint64 }
	json.NewDecoder(resp.Body).Decode(&cp)
	resp.Body.Close()
	var bestLeaf, bestAnswer int
	for i := uint64(0); i < cp.Size; i++ {
		resp, err := http.Get(fmt.Sprintf("%s/api/v1/log/leaves/%d", url, i))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Leaf string }
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("leaf %d: %v", i, err)
		}
		if len(e.Leaf) > bestLeaf {
			bestLeaf, bestAnswer = len(e.Leaf), len(b)
		}
	}
	if bestLeaf > 0 {
		fmt.Printf("%-9s largest leaf %.2f MiB, GET /api/v1/log/leaves answer %.2f MiB (%.2fx)\n", format,
			float64(bestLeaf)/(1<<20), float64(bestAnswer)/(1<<20), float64(bestAnswer)/float64(bestLeaf))
	}
	return nil
}

func kib(k int) float64 { return float64(k) / 1024 }

func clip(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

var servingRe = regexp.MustCompile(`serving on (http://[^/]+)/`)

func serverURL(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("server did not start")
}

// status reads a kB field of /proc/PID/status.
func status(pid int, field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func loadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: not PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return priv, nil
}

func mediaType(format string) string {
	switch format {
	case "evidence":
		return ingest.MediaEvidence
	case "junit":
		return ingest.MediaJUnit
	case "gotest":
		return ingest.MediaGoTest
	case "in-toto":
		return ingest.MediaInToto
	case "dsse":
		return ingest.MediaDSSE
	}
	return ingest.MediaSigstoreBundle
}

// body returns request i's body of format, of about size bytes.
func body(format string, i, size int, priv ed25519.PrivateKey, bundle map[string]any) ([]byte, error) {
	var b bytes.Buffer
	switch format {
	case "evidence":
		const recs = 32
		b.WriteByte('[')
		for r := range recs {
			if r > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"lane":%q,"subject":{"repository":"example/r","commit":%q,"tree":%q},"backend":"cpu","cases_exact":1,"cases_total":1,"control":"none","status":"passed","started_at":"2026-12-05T10:00:00Z","finished_at":"2026-12-05T10:00:01Z","details":{"req":%d,"rec":%d,"log":[`, lane, commit, tree, i, r)
			per := size/recs - 400
			for k := 0; per > 0; k++ {
				if k > 0 {
					b.WriteByte(',')
				}
				s := fmt.Sprintf(`"line %d of request %d: some output of a test run"`, k, i)
				b.WriteString(s)
				per -= len(s) + 1
			}
			b.WriteString("]}}")
		}
		b.WriteByte(']')
	case "junit":
		pad := strings.Repeat("padding ", 40)
		fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<testsuites name="r%d">`+"\n"+`<testsuite name="suite" timestamp="2026-12-05T10:00:00" time="12.5">`+"\n", i)
		for k := 0; b.Len() < size-200; k++ {
			if k%50 == 7 {
				fmt.Fprintf(&b, `<testcase classname="pkg.Class%d" name="test_%d_%d" time="0.001"><failure message="boom">expected 1 got 2 &lt;at line %d&gt;</failure><system-out>output of test %d in request %d</system-out></testcase>`+"\n", k%97, i, k, k, k, i)
				continue
			}
			fmt.Fprintf(&b, `<testcase classname="pkg.Class%d" name="test_%d_%d" time="0.001"><system-out>output of test %d in request %d: %s</system-out></testcase>`+"\n", k%97, i, k, k, i, pad)
		}
		b.WriteString("</testsuite>\n</testsuites>\n")
	case "gotest":
		const pkg = "example.com/r/pkg"
		for k := 0; b.Len() < size-1000; k++ {
			t := fmt.Sprintf("TestCase%d_%d", i, k)
			fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:00Z","Action":"run","Package":%q,"Test":%q}`+"\n", pkg, t)
			fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:00Z","Action":"output","Package":%q,"Test":%q,"Output":"=== RUN   %s\n"}`+"\n", pkg, t, t)
			fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:01Z","Action":"pass","Package":%q,"Test":%q,"Elapsed":0.01}`+"\n", pkg, t)
		}
		fmt.Fprintf(&b, `{"Time":"2026-12-05T10:00:02Z","Action":"pass","Package":%q,"Elapsed":2}`+"\n", "example.com/r/pkg")
	case "in-toto":
		return statement(i, size), nil
	case "dsse":
		st := statement(i, size*3/4-1024)
		return verify.SignRunnerEnvelope(context.Background(), priv, ingest.MediaInToto, st)
	case "sigstore":
		st := statement(i, size*3/4-8192)
		env := bundle["dsseEnvelope"].(map[string]any)
		env["payload"] = base64.StdEncoding.EncodeToString(st)
		return json.Marshal(bundle)
	default:
		return nil, fmt.Errorf("unknown format %q", format)
	}
	return b.Bytes(), nil
}

// statement is a test-result Statement of about size bytes: 9,000 case
// names (the cases' details stay under the ledger's 2 MiB), padded to
// size with configuration resource descriptors.
func statement(i, size int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"_type":%q,"subject":[{"name":"example/r","digest":{"gitCommit":%q,"gitTree":%q}}],"predicateType":%q,"predicate":{"result":"PASSED","passedTests":[`,
		ingest.StatementV1, commit, tree, ingest.PredicateTestResult)
	for k := range 9000 {
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"pkg/sub.Test_request_%d_case_%d"`, i, k)
	}
	b.WriteString(`],"warnedTests":[],"failedTests":[],"configuration":[`)
	for k := 0; b.Len() < size-200; k++ {
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"config-%d-%d","uri":"https://example.com/configs/%d/%d/settings.yaml"}`, i, k, i, k)
	}
	b.WriteString("]}}")
	return b.Bytes()
}
