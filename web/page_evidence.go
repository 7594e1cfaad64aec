package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

// pager is the data of the "Newest / Older" navigation of a list page.
type pager struct {
	Cursor, Next      string
	FirstURL, NextURL string
}

// newPager builds the pagination links of path with the query q (its
// "cursor" replaced).
func newPager(path string, q url.Values, cursor, next string) pager {
	p := pager{Cursor: cursor, Next: next}
	q2 := url.Values{}
	for k, v := range q {
		if k != "cursor" && len(v) > 0 && v[0] != "" {
			q2[k] = v[:1]
		}
	}
	p.FirstURL = path
	if e := q2.Encode(); e != "" {
		p.FirstURL += "?" + e
	}
	if next != "" {
		q2.Set("cursor", next)
		p.NextURL = path + "?" + q2.Encode()
	}
	return p
}

// evidenceFilterForm is the filter form's values as typed.
type evidenceFilterForm struct {
	Lane, Backend, Status, Repository, Commit, Artifact string
}

type evidenceListPage struct {
	pageBase
	F        evidenceFilterForm
	Filtered bool
	Rows     []ledger.EvidenceEntry
	Pager    pager
	Problem  string // a filter the store rejected, in words
}

// Backends and Statuses are the select options of the filter forms.
func (evidenceListPage) Backends() []ledger.Backend { return ledger.Backends() }

func (evidenceListPage) Statuses() []ledger.Status {
	return []ledger.Status{ledger.StatusPassed, ledger.StatusFailed, ledger.StatusInconclusive, ledger.StatusError}
}

// pageEvidenceList is GET /evidence: the newest evidence, filtered by the
// query (lane, backend, status, repository, commit prefix, artifact digest
// prefix), paginated by cursor. Bad filters answer 400 with the form and the
// problem shown.
func (s *Server) pageEvidenceList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := evidenceFilterForm{
		Lane: strings.TrimSpace(q.Get("lane")), Backend: q.Get("backend"), Status: q.Get("status"),
		Repository: strings.TrimSpace(q.Get("repository")), Commit: strings.TrimSpace(q.Get("commit")), Artifact: strings.TrimSpace(q.Get("artifact")),
	}
	// Normalise the typed values the API expects: trimmed, lower-case hex.
	q.Set("lane", form.Lane)
	q.Set("repository", form.Repository)
	form.Commit = strings.ToLower(form.Commit)
	form.Artifact = strings.ToLower(form.Artifact)
	q.Set("commit", form.Commit)
	q.Set("artifact", form.Artifact)
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = q.Encode()
	data := evidenceListPage{pageBase: pageBase{Title: "Evidence", Nav: "evidence", JSON: "/api/v1/evidence?" + cleanQuery(q).Encode()}, F: form}
	data.JSON = strings.TrimSuffix(data.JSON, "?")
	data.Filtered = form != (evidenceFilterForm{})
	f, err := parseEvidenceFilter(r2)
	if err == nil {
		data.Rows, data.Pager.Next, err = s.store.Evidence(r.Context(), f)
	}
	if err != nil {
		if ledger.ErrorCode(err) != ledger.CodeInvalid {
			s.renderError(w, r, err)
			return
		}
		data.Problem = err.Error()
		s.render(w, r, http.StatusBadRequest, "evidence-list", data)
		return
	}
	data.Pager = newPager("/evidence", q, f.Cursor, data.Pager.Next)
	s.render(w, r, http.StatusOK, "evidence-list", data)
}

func cleanQuery(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		if len(v) > 0 && v[0] != "" {
			out.Set(k, v[0])
		}
	}
	return out
}

// caseRow is one row of an evidence page's case table.
type caseRow struct {
	ID, Result, Expected, Got, Note string
	// Message is a failed case's failure message (details.cases[].message,
	// as the ingest formats keep it), at most pageCaseMessage bytes.
	Message string
	Failing bool
}

// evidencePage is the data of /evidence/{id}.
type evidencePage struct {
	pageBase
	E           ledger.EvidenceEntry
	Artifacts   []kv
	DeviceAttrs []kv
	Cases       []caseRow
	CasesFailed int
	// FailingNoRow are failing case ids the details' case table lacks.
	FailingNoRow   []string
	ControlSummary string
	// CasesHidden counts case rows past pageCaseRows, not shown.
	CasesHidden int
	DetailsJSON string
	// DetailsSize is the byte length of the indented details; DetailsJSON
	// holds at most pageDetailsBytes of it.
	DetailsSize      int
	DetailsTruncated bool
	// LeafSize is the leaf's byte length; Leaf is empty when it is over
	// pageLeafBytes (the page links the raw leaf instead, and the browser
	// check fetches it).
	LeafSize    int
	RawLeaf     string
	Proof       *ledger.InclusionProof
	Checkpoint  ledger.Checkpoint
	ProofErr    string
	Leaf        string
	CLI         string
	Trajectory  *trajectoryData
	VerifierKey string
	// CountsFor is how the record stands in each release binding its
	// repository (countsFor); CountsProblem why that is not known.
	CountsFor     []releaseCount
	CountsProblem string
	// OriginalID and OriginalFormat name the original file the record
	// was decoded from ("" when none).
	OriginalID, OriginalFormat string
}

// Caps on what one evidence page shows, so a page stays small whatever
// the record holds (docs/reference/api.md, "Limits"): the details are shown indented
// up to pageDetailsBytes, the case table up to pageCaseRows rows (failing
// first), the leaf bytes inline up to pageLeafBytes; past them the page
// says how much is left out and links the raw leaf.
const (
	pageDetailsBytes = 64 << 10
	pageCaseRows     = 500
	pageLeafBytes    = 256 << 10
	pageCaseMessage  = 4 << 10
)

// pageEvidence is GET /evidence/{id}: pins, device, runner build, cases
// (failing first), control outcome, details and the inclusion proof
// against the current checkpoint.
func (s *Server) pageEvidence(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	e, err := s.evidenceByID(r, id)
	if err != nil {
		// An original (the JUnit file, envelope... an evidence record
		// names) has its own page.
		if ent, eerr := s.store.Entry(r.Context(), id); eerr == nil && ent.Kind == ledger.KindOriginal {
			http.Redirect(w, r, "/originals/"+url.PathEscape(ent.ID), http.StatusSeeOther)
			return
		}
		s.renderError(w, r, err)
		return
	}
	// Recorded text is shown with its bidirectional and invisible
	// characters as escapes (runs.Visible), so the page shows what the
	// record holds, not what those characters make it look like.
	e.Evidence = visibleEvidence(e.Evidence)
	ev := e.Evidence
	data := evidencePage{
		pageBase:    pageBase{Title: "Evidence " + shortID(e.ID), JSON: "/api/v1/evidence/" + url.PathEscape(e.ID)},
		E:           e,
		Artifacts:   sortedKV(ev.Subject.Artifacts),
		DeviceAttrs: sortedKV(ev.Device.Attrs),
		VerifierKey: s.store.VerifierKey(),
		LeafSize:    len(e.Raw),
		RawLeaf:     "/api/v1/log/entries/" + url.PathEscape(e.ID),
	}
	if len(e.Raw) <= pageLeafBytes {
		data.Leaf = runs.Visible(string(e.Raw))
	}
	data.Cases, data.ControlSummary, data.DetailsJSON = parseDetails(ev.Details)
	data.DetailsSize = len(data.DetailsJSON)
	if len(data.DetailsJSON) > pageDetailsBytes {
		data.DetailsJSON, data.DetailsTruncated = strings.ToValidUTF8(data.DetailsJSON[:pageDetailsBytes], ""), true
	}
	data.DetailsJSON = visibleLines(data.DetailsJSON)
	if len(data.Cases) > pageCaseRows {
		data.CasesHidden = len(data.Cases) - pageCaseRows
		data.Cases = data.Cases[:pageCaseRows]
	}
	inTable := make(map[string]bool, len(data.Cases))
	for _, c := range data.Cases {
		inTable[c.ID] = true
		if c.Failing {
			data.CasesFailed++
		}
	}
	for _, id := range ev.FailingCases {
		if !inTable[id] {
			data.FailingNoRow = append(data.FailingNoRow, id)
		}
	}
	if t, err := trajectoryOf(e); err == nil {
		data.Trajectory = &t
	}
	data.OriginalID, data.OriginalFormat = originalOf(ev.Details)
	if data.CountsFor, err = s.countsFor(r.Context(), e); err != nil {
		_, body := errorBody(err)
		s.log.Warn("evidence page: counts for releases", "id", e.ID, "err", err)
		data.CountsProblem = "which releases it counts for is not available right now: " + body.Message
	}
	cp, err := s.store.Checkpoint(r.Context())
	if err == nil {
		data.Checkpoint = cp
		var p ledger.InclusionProof
		p, err = s.store.InclusionProof(r.Context(), e.Index, cp.Size)
		if err == nil {
			data.Proof = &p
		}
	}
	if err != nil {
		s.log.Warn("evidence page: no inclusion proof", "id", e.ID, "err", err)
		data.ProofErr = "the inclusion proof is not available right now; try again or use the CLI command"
	}
	data.CLI = fmt.Sprintf("curl -s '%s/api/v1/evidence/%s/proof?size=%d'", baseURL(r), e.ID, data.Checkpoint.Size)
	s.render(w, r, http.StatusOK, "evidence", data)
}

// baseURL is the scheme and host the request reached (for copyable
// commands); it trusts X-Forwarded-Proto only for the scheme word.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// visibleEvidence returns a copy of e for display whose text (lane,
// subject, device and its attrs, runner build, failing cases) is
// runs.Visible; details are escaped where they are parsed.
func visibleEvidence(e ledger.Evidence) ledger.Evidence {
	v := runs.Visible
	e.Lane = v(e.Lane)
	e.Subject.Repository, e.Subject.Commit, e.Subject.Tree = v(e.Subject.Repository), v(e.Subject.Commit), v(e.Subject.Tree)
	e.Subject.Artifacts = runs.VisibleMap(e.Subject.Artifacts)
	e.Device.Model, e.Device.Driver, e.Device.Attrs = v(e.Device.Model), v(e.Device.Driver), runs.VisibleMap(e.Device.Attrs)
	e.Runner.Version, e.Runner.Commit = v(e.Runner.Version), v(e.Runner.Commit)
	e.FailingCases = runs.VisibleAll(e.FailingCases)
	return e
}

// visibleLines is s with each line runs.Visible: the line breaks of
// indented JSON stay, everything else hidden is escaped.
func visibleLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = runs.Visible(l)
	}
	return strings.Join(lines, "\n")
}

// parseDetails reads what the dashboard shows from an evidence's details
// object, tolerating absent or oddly shaped fields: details.cases (an array
// of {id, result, expected, got, note}, or of the ingest formats' {id,
// outcome}; a case neither exact, passed nor skipped is failing, and failing
// cases are sorted first, order otherwise kept), details.control.summary (or details.control_summary),
// and the whole object indented for display.
func parseDetails(raw json.RawMessage) (cases []caseRow, controlSummary, pretty string) {
	if len(raw) == 0 {
		return nil, "", ""
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") == nil {
		pretty = buf.String()
	} else {
		pretty = string(raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return nil, "", pretty
	}
	if list, ok := m["cases"].([]any); ok {
		for _, item := range list {
			o, ok := item.(map[string]any)
			if !ok {
				continue
			}
			c := caseRow{ID: scalar(o["id"]), Result: scalar(o["result"]), Expected: scalar(o["expected"]), Got: scalar(o["got"]), Note: scalar(o["note"]), Message: scalar(o["message"])}
			if len(c.Message) > pageCaseMessage {
				c.Message = strings.ToValidUTF8(c.Message[:pageCaseMessage], "") + "…"
			}
			if c.Result == "" {
				// The ingest formats' cases (ingest.Case) carry an outcome.
				c.Result = scalar(o["outcome"])
			}
			c.Failing = c.Result != "exact" && c.Result != "pass" && c.Result != "passed" && c.Result != "skipped"
			cases = append(cases, c)
		}
		sort.SliceStable(cases, func(i, j int) bool { return cases[i].Failing && !cases[j].Failing })
	}
	switch c := m["control"].(type) {
	case map[string]any:
		controlSummary = scalar(c["summary"])
	case string:
		controlSummary = c
	}
	if controlSummary == "" {
		controlSummary = scalar(m["control_summary"])
	}
	return cases, controlSummary, pretty
}

// scalar renders a decoded JSON value as text: strings as they are, numbers
// as written, other values as compact JSON.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return runs.Visible(x)
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "true"
		}
		return "false"
	}
	b, _ := json.Marshal(v)
	return runs.Visible(string(b))
}
