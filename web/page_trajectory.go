package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// trajectoryData is one trajectory evidence record as the page and its
// JSON twin show it: the evidence id and its ledger.Trajectory, with
// Backend falling back to the evidence's backend when the details name
// none, and the token ids in decimal.
type trajectoryData struct {
	ID      string   `json:"id"`
	Name    string   `json:"trajectory"`
	Mode    string   `json:"mode,omitempty"`
	Backend string   `json:"backend,omitempty"`
	Tokens  []string `json:"tokens"`
	ids     []int64
}

// Label is "mode/backend" (or the evidence id when both are empty).
func (t trajectoryData) Label() string {
	switch {
	case t.Mode != "" && t.Backend != "":
		return t.Mode + " · " + t.Backend
	case t.Mode != "" || t.Backend != "":
		return t.Mode + t.Backend
	}
	return shortID(t.ID)
}

// trajectoryOf decodes e's details as a trajectory (ledger.DecodeTrajectory);
// the error says why they are not one.
func trajectoryOf(e ledger.EvidenceEntry) (trajectoryData, error) {
	tr, err := ledger.DecodeTrajectory(e.Evidence.Details)
	if err != nil {
		return trajectoryData{}, err
	}
	t := trajectoryData{ID: e.ID, Name: tr.Name, Mode: tr.Mode, Backend: tr.Backend, Tokens: make([]string, len(tr.Tokens)), ids: tr.Tokens}
	if t.Backend == "" {
		t.Backend = string(e.Evidence.Backend)
	}
	for i, v := range tr.Tokens {
		t.Tokens[i] = strconv.FormatInt(v, 10)
	}
	return t, nil
}

// alignRow is one position of two aligned token sequences.
type alignRow struct {
	Pos          int
	A, B         string
	HasA, HasB   bool
	Differs      bool
	IsDivergence bool
}

// alignment is the comparison of two trajectories.
type alignment struct {
	// First is ledger.FirstDivergence of the two sequences: the first
	// zero-based position where a token differs or one sequence has ended;
	// ledger.NoDivergence (-1) when they are identical.
	First int
	Rows  []alignRow
}

// alignTrajectories lines token ids a and b up position by position.
func alignTrajectories(a, b []int64) alignment {
	n := max(len(a), len(b))
	al := alignment{First: ledger.FirstDivergence(a, b), Rows: make([]alignRow, n)}
	for i := 0; i < n; i++ {
		r := alignRow{Pos: i, HasA: i < len(a), HasB: i < len(b), IsDivergence: i == al.First}
		if r.HasA {
			r.A = strconv.FormatInt(a[i], 10)
		}
		if r.HasB {
			r.B = strconv.FormatInt(b[i], 10)
		}
		r.Differs = r.HasA != r.HasB || r.A != r.B
		al.Rows[i] = r
	}
	return al
}

// trajectoryCandidates lists the evidence (newest first, among the newest
// scanLimit records) carrying trajectory name.
func (s *Server) trajectoryCandidates(r *http.Request, name string) ([]trajectoryData, error) {
	const scanLimit = 2000
	var out []trajectoryData
	cursor := ""
	for scanned := 0; scanned < scanLimit; {
		list, next, err := s.store.Evidence(r.Context(), ledger.EvidenceFilter{Cursor: cursor, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, e := range list {
			if t, err := trajectoryOf(e); err == nil && t.Name == name {
				out = append(out, t)
			}
		}
		scanned += len(list)
		if next == "" {
			break
		}
		cursor = next
	}
	return out, nil
}

// loadTrajectory loads evidence id and checks it is trajectory name.
func (s *Server) loadTrajectory(r *http.Request, name, param, id string) (trajectoryData, error) {
	e, err := s.evidenceByID(r, id)
	if err != nil {
		if ledger.ErrorCode(err) == ledger.CodeNotFound {
			return trajectoryData{}, &ledger.Error{Code: ledger.CodeNotFound, Field: param, Message: "no evidence " + id, Err: ledger.ErrNotFound}
		}
		return trajectoryData{}, err
	}
	t, err := trajectoryOf(e)
	if err != nil {
		return t, ledger.FieldError(param, "evidence %s carries no trajectory (%v)", shortID(id), err)
	}
	if t.Name != name {
		return t, ledger.FieldError(param, "evidence %s is trajectory %q, not %q", shortID(id), t.Name, name)
	}
	return t, nil
}

func trajectoryName(r *http.Request) (string, error) {
	name, err := url.PathUnescape(chi.URLParam(r, "*"))
	if err != nil || strings.TrimSpace(name) == "" {
		return "", ledger.FieldError("trajectory", "the path must name a trajectory: /trajectories/NAME?a=ID&b=ID")
	}
	return name, nil
}

type trajectoryPage struct {
	pageBase
	Name       string
	A, B       *trajectoryData
	SelA, SelB string
	Candidates []trajectoryData
	Align      alignment
	Problem    string
}

// pageTrajectory is GET /trajectories/{name}?a=ID&b=ID: the two token
// sequences side by side with the first divergence highlighted. Without a
// and b it offers the trajectory's evidence to choose from.
func (s *Server) pageTrajectory(w http.ResponseWriter, r *http.Request) {
	name, err := trajectoryName(r)
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	q := r.URL.Query()
	data := trajectoryPage{pageBase: pageBase{Title: "Trajectory " + name}, Name: name, SelA: q.Get("a"), SelB: q.Get("b")}
	data.JSON = "/api/v1/trajectories/" + name
	if data.SelA != "" && data.SelB != "" {
		data.JSON += "?" + url.Values{"a": {data.SelA}, "b": {data.SelB}}.Encode()
	}
	if data.Candidates, err = s.trajectoryCandidates(r, name); err != nil {
		s.renderError(w, r, err)
		return
	}
	status := http.StatusOK
	if data.SelA != "" && data.SelB != "" {
		a, errA := s.loadTrajectory(r, name, "a", data.SelA)
		b, errB := s.loadTrajectory(r, name, "b", data.SelB)
		switch {
		case errA != nil || errB != nil:
			err = errA
			if err == nil {
				err = errB
			}
			st, body := errorBody(err)
			if st >= 500 {
				s.renderError(w, r, err)
				return
			}
			status, data.Problem = st, body.Message
		default:
			data.A, data.B = &a, &b
			data.Align = alignTrajectories(a.ids, b.ids)
		}
	} else if len(data.Candidates) >= 2 && data.SelA == "" && data.SelB == "" {
		data.SelA, data.SelB = data.Candidates[1].ID, data.Candidates[0].ID
	}
	s.render(w, r, status, "trajectory", data)
}

// TrajectoryComparison is the JSON twin of the trajectory page.
type TrajectoryComparison struct {
	Trajectory string         `json:"trajectory"`
	A          trajectoryData `json:"a"`
	B          trajectoryData `json:"b"`
	// FirstDivergence is the first zero-based position where the sequences
	// differ (a token, or one has ended); -1 when they are identical.
	FirstDivergence int     `json:"first_divergence"`
	TokenA          *string `json:"token_a,omitempty"`
	TokenB          *string `json:"token_b,omitempty"`
}

// apiTrajectory is GET /api/v1/trajectories/{name}?a=ID&b=ID; without a
// and b it lists the evidence ids carrying the trajectory.
func (s *Server) apiTrajectory(w http.ResponseWriter, r *http.Request) {
	name, err := trajectoryName(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	if q.Get("a") == "" && q.Get("b") == "" {
		c, err := s.trajectoryCandidates(r, name)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		type item struct {
			ID      string `json:"id"`
			Mode    string `json:"mode,omitempty"`
			Backend string `json:"backend,omitempty"`
			Length  int    `json:"length"`
		}
		out := make([]item, len(c))
		for i, t := range c {
			out[i] = item{t.ID, t.Mode, t.Backend, len(t.Tokens)}
		}
		s.writeJSON(w, http.StatusOK, map[string]any{"trajectory": name, "evidence": out})
		return
	}
	if q.Get("a") == "" || q.Get("b") == "" {
		s.writeError(w, r, ledger.FieldError("b", "give both a and b (evidence ids), or neither to list them"))
		return
	}
	a, err := s.loadTrajectory(r, name, "a", q.Get("a"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, err := s.loadTrajectory(r, name, "b", q.Get("b"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	al := alignTrajectories(a.ids, b.ids)
	out := TrajectoryComparison{Trajectory: name, A: a, B: b, FirstDivergence: al.First}
	if al.First >= 0 {
		row := al.Rows[al.First]
		if row.HasA {
			out.TokenA = &row.A
		}
		if row.HasB {
			out.TokenB = &row.B
		}
	}
	s.writeJSON(w, http.StatusOK, out)
}
