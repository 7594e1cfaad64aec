package web

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// laneHistoryMax caps how many runs (newest) the lane page charts.
const laneHistoryMax = 2000

// LaneRun is one run of a lane in its history (the JSON twin's element and
// a row of the lane page).
type LaneRun struct {
	ID         string            `json:"id"`
	Index      uint64            `json:"index"`
	RecordedAt time.Time         `json:"recorded_at"`
	StartedAt  time.Time         `json:"started_at"`
	FinishedAt time.Time         `json:"finished_at"`
	Backend    ledger.Backend    `json:"backend"`
	Device     string            `json:"device,omitempty"`
	CasesExact int               `json:"cases_exact"`
	CasesTotal int               `json:"cases_total"`
	Control    ledger.Control    `json:"control"`
	Status     ledger.Status     `json:"status"`
	Repository string            `json:"repository"`
	Commit     string            `json:"commit"`
	Dirty      bool              `json:"dirty,omitempty"`
	Artifacts  map[string]string `json:"artifacts,omitempty"`
}

func laneRun(e ledger.EvidenceEntry) LaneRun {
	ev := e.Evidence
	return LaneRun{ID: e.ID, Index: e.Index, RecordedAt: e.RecordedAt, StartedAt: ev.StartedAt, FinishedAt: ev.FinishedAt,
		Backend: ev.Backend, Device: ev.Device.Model, CasesExact: ev.CasesExact, CasesTotal: ev.CasesTotal, Control: ev.Control,
		Status: ev.Status, Repository: ev.Subject.Repository, Commit: ev.Subject.Commit, Dirty: ev.Subject.Dirty, Artifacts: ev.Subject.Artifacts}
}

// When is the time a run is charted at: when it finished.
func (r LaneRun) When() time.Time { return r.FinishedAt }

// laneParam reads and checks the lane name of a /lanes/* route; the name
// may come percent-encoded ("qmv-bias-sum%2Fv1").
func laneParam(r *http.Request) (string, error) {
	lane, err := url.PathUnescape(chi.URLParam(r, "*"))
	if err != nil || !ledger.ValidLane(lane) {
		return "", ledger.FieldError("lane", "the path must name a lane such as qmv-bias-sum/v1 (lowercase name/vN)")
	}
	return lane, nil
}

func laneBackend(r *http.Request) (ledger.Backend, error) {
	b := ledger.Backend(r.URL.Query().Get("backend"))
	if b != "" && !b.Valid() {
		return "", ledger.FieldError("backend", "must be one of %s", ledger.BackendList())
	}
	return b, nil
}

// apiLane is GET /api/v1/lanes/{name}: the lane's runs, newest first,
// filtered by ?backend= and paginated by ?cursor= and ?limit= (1..1000).
func (s *Server) apiLane(w http.ResponseWriter, r *http.Request) {
	lane, err := laneParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f := ledger.EvidenceFilter{Lane: lane, Cursor: r.URL.Query().Get("cursor")}
	if f.Backend, err = laneBackend(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			s.writeError(w, r, ledger.FieldError("limit", "must be an integer in 1..1000"))
			return
		}
		f.Limit = n
	}
	list, next, err := s.store.Evidence(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	runs := make([]LaneRun, len(list))
	for i, e := range list {
		runs[i] = laneRun(e)
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"lane": lane, "runs": runs, "next_cursor": next})
}

// laneHistory loads up to laneHistoryMax newest runs, returned oldest
// first (by finish time, then log index); truncated reports older runs left
// out.
func (s *Server) laneHistory(r *http.Request, lane string, backend ledger.Backend) (runs []LaneRun, truncated bool, err error) {
	cursor := ""
	for len(runs) < laneHistoryMax {
		list, next, err := s.store.Evidence(r.Context(), ledger.EvidenceFilter{Lane: lane, Backend: backend, Cursor: cursor, Limit: min(1000, laneHistoryMax-len(runs))})
		if err != nil {
			return nil, false, err
		}
		for _, e := range list {
			runs = append(runs, laneRun(e))
		}
		if next == "" {
			break
		}
		cursor = next
		truncated = len(runs) >= laneHistoryMax
	}
	sort.SliceStable(runs, func(i, j int) bool {
		if !runs[i].When().Equal(runs[j].When()) {
			return runs[i].When().Before(runs[j].When())
		}
		return runs[i].Index < runs[j].Index
	})
	return runs, truncated, nil
}

type lanePage struct {
	pageBase
	Lane      string
	Backend   string
	Runs      []LaneRun // oldest first
	Newest    []LaneRun // newest first, for the table
	Truncated bool
	Chart     svgChart
}

// Backends are the filter's options.
func (lanePage) Backends() []ledger.Backend { return ledger.Backends() }

// pageLane is GET /lanes/{name}: the history chart (cases exact / total
// over time, one series per backend, control outcome marked) and the runs
// table. The chart is server-rendered SVG; static/lane-chart.js replaces it
// with an interactive uPlot chart built from the table's data attributes.
func (s *Server) pageLane(w http.ResponseWriter, r *http.Request) {
	lane, err := laneParam(r)
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	backend, err := laneBackend(r)
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	data := lanePage{pageBase: pageBase{Title: "Lane " + lane, JSON: "/api/v1/lanes/" + lane}, Lane: lane, Backend: string(backend)}
	if backend != "" {
		data.JSON += "?backend=" + string(backend)
	}
	if data.Runs, data.Truncated, err = s.laneHistory(r, lane, backend); err != nil {
		s.renderError(w, r, err)
		return
	}
	data.Newest = slices.Clone(data.Runs)
	slices.Reverse(data.Newest)
	data.Chart = buildChart(lane, data.Runs)
	s.render(w, r, http.StatusOK, "lane", data)
}

// svgChart is the server-rendered history chart: coordinates in the
// viewBox 0 0 W H.
type svgChart struct {
	W, H, Left, Right, Top, Bottom int
	Series                         []svgSeries
	Total                          string // polyline of cases_total, all backends
	YTicks                         []svgTick
	XTicks                         []svgTick
	Desc                           string
	Empty                          bool
}

type svgSeries struct {
	Backend string
	Points  string
	Dots    []svgDot
}

type svgDot struct {
	X, Y  float64
	Title string
	Miss  bool // control not caught
}

type svgTick struct {
	Pos   float64
	Label string
}

// buildChart lays out runs (oldest first): x is the finish time, y the
// number of exact cases on a 0..max(total) axis.
func buildChart(lane string, runs []LaneRun) svgChart {
	c := svgChart{W: 720, H: 280, Left: 52, Right: 16, Top: 16, Bottom: 40}
	if len(runs) == 0 {
		c.Empty = true
		return c
	}
	maxTotal := 1
	t0, t1 := runs[0].When(), runs[0].When()
	for _, r := range runs {
		maxTotal = max(maxTotal, r.CasesTotal)
		if r.When().Before(t0) {
			t0 = r.When()
		}
		if r.When().After(t1) {
			t1 = r.When()
		}
	}
	pw, ph := float64(c.W-c.Left-c.Right), float64(c.H-c.Top-c.Bottom)
	span := t1.Sub(t0).Seconds()
	x := func(t time.Time) float64 {
		if span <= 0 {
			return float64(c.Left) + pw/2
		}
		return float64(c.Left) + pw*t.Sub(t0).Seconds()/span
	}
	y := func(v int) float64 { return float64(c.Top) + ph*(1-float64(v)/float64(maxTotal)) }
	for i := 0; i <= 4; i++ {
		v := maxTotal * i / 4
		c.YTicks = append(c.YTicks, svgTick{Pos: y(v), Label: strconv.Itoa(v)})
	}
	c.XTicks = append(c.XTicks, svgTick{Pos: x(t0), Label: t0.UTC().Format("2006-01-02 15:04")})
	if span > 0 {
		c.XTicks = append(c.XTicks, svgTick{Pos: x(t1), Label: t1.UTC().Format("2006-01-02 15:04")})
	}
	byBackend := map[ledger.Backend]*svgSeries{}
	var order []ledger.Backend
	var total []string
	desc := map[ledger.Backend][]string{}
	for _, r := range runs {
		sr := byBackend[r.Backend]
		if sr == nil {
			sr = &svgSeries{Backend: string(r.Backend)}
			byBackend[r.Backend] = sr
			order = append(order, r.Backend)
		}
		px, py := x(r.When()), y(r.CasesExact)
		sr.Points += fmt.Sprintf("%.1f,%.1f ", px, py)
		ctl := strings.ReplaceAll(string(r.Control), "_", " ")
		sr.Dots = append(sr.Dots, svgDot{X: px, Y: py, Miss: r.Control == ledger.ControlNotCaught,
			Title: fmt.Sprintf("%s %d/%d exact, control %s, %s, %s", r.Backend, r.CasesExact, r.CasesTotal, ctl, r.Status, fmtTime(r.When()))})
		total = append(total, fmt.Sprintf("%.1f,%.1f", px, y(r.CasesTotal)))
		desc[r.Backend] = append(desc[r.Backend], fmt.Sprintf("%d/%d", r.CasesExact, r.CasesTotal))
	}
	c.Total = strings.Join(total, " ")
	var parts []string
	for _, b := range order {
		c.Series = append(c.Series, *byBackend[b])
		d := desc[b]
		if len(d) > 12 {
			d = append([]string{"…"}, d[len(d)-12:]...)
		}
		parts = append(parts, fmt.Sprintf("%s: %s", b, strings.Join(d, " → ")))
	}
	c.Desc = fmt.Sprintf("Cases exact over time for %s, oldest to newest. %s.", lane, strings.Join(parts, "; "))
	return c
}
