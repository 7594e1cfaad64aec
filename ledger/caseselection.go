package ledger

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// Limits of a case selection (CaseSelection).
const (
	// MinThroughputSamples is the fewest samples per arm a case may be
	// bounded to: fewer give no 95 % order-statistic interval of the
	// median (internal/stats.MinSamples).
	MinThroughputSamples = 6
	// MaxCaseBudget is the longest measuring time of one case a run may
	// ask for.
	MaxCaseBudget = 10 * time.Minute
	// MaxCaseGlobs is the most case globs one selection holds, and
	// MaxCaseGlobLen the longest glob.
	MaxCaseGlobs   = 64
	MaxCaseGlobLen = 256
)

// CaseSelection is what a run asks of the lanes that select cases
// (qmv-throughput/v1): Cases are case-id globs (MatchCaseGlob; a case runs
// when any glob selects it, none: every case), CaseBudget the time limit
// of measuring one case as a Go duration ("90s", "1m30s"; "": the lane's
// 5 s) and MaxSamples the most samples per arm of one case (0: the lane's
// 200). The zero value asks for the lane's defaults. It is a member of a
// queued run (runs.Spec) and of its outcome leaf (RunOutcome), whose JSON
// carries its fields inline ("cases", "case_budget", "max_samples"), each
// left out when unset.
type CaseSelection struct {
	Cases      []string `json:"cases,omitempty"`
	CaseBudget string   `json:"case_budget,omitempty"`
	MaxSamples int      `json:"max_samples,omitempty"`
}

// Empty reports whether s asks for nothing (the lanes' defaults).
func (s CaseSelection) Empty() bool {
	return len(s.Cases) == 0 && s.CaseBudget == "" && s.MaxSamples == 0
}

// Budget returns CaseBudget as a duration (0 when unset or malformed;
// Validate first).
func (s CaseSelection) Budget() time.Duration {
	d, _ := time.ParseDuration(s.CaseBudget)
	return d
}

// Validate checks s on its own, without the lanes' case lists: at most
// MaxCaseGlobs globs, each 1..MaxCaseGlobLen bytes, a well-formed
// path.Match pattern with no empty segment; a budget that parses as a Go
// duration in (0, MaxCaseBudget]; max samples 0 or
// MinThroughputSamples..MaxThroughputSamples. It writes the budget back in
// its canonical form ("1m30s" for "90s"). Errors are CodeInvalid naming
// "cases[i]", "case_budget" or "max_samples".
func (s *CaseSelection) Validate() error {
	if len(s.Cases) > MaxCaseGlobs {
		return FieldError("cases", "at most %d case globs, got %d", MaxCaseGlobs, len(s.Cases))
	}
	for i, g := range s.Cases {
		f := fmt.Sprintf("cases[%d]", i)
		switch {
		case g == "" || len(g) > MaxCaseGlobLen:
			return FieldError(f, "must be a case-id glob of 1-%d bytes", MaxCaseGlobLen)
		case strings.Contains("/"+g+"/", "//"):
			return FieldError(f, "glob %q has an empty segment (a leading, trailing or double /): it selects no case", Clip(g))
		}
		if _, err := path.Match(g, ""); err != nil {
			return FieldError(f, "bad glob %q: %v", Clip(g), err)
		}
	}
	if s.CaseBudget != "" {
		d, err := time.ParseDuration(s.CaseBudget)
		if err != nil || d <= 0 || d > MaxCaseBudget {
			return FieldError("case_budget", "must be a Go duration in (0, %s] (\"5s\", \"1m30s\"), got %q", MaxCaseBudget, Clip(s.CaseBudget))
		}
		s.CaseBudget = d.String()
	}
	if s.MaxSamples != 0 && (s.MaxSamples < MinThroughputSamples || s.MaxSamples > MaxThroughputSamples) {
		return FieldError("max_samples", "must be %d..%d (fewer samples give no 95 %% interval of the median), got %d", MinThroughputSamples, MaxThroughputSamples, s.MaxSamples)
	}
	return nil
}

// Text is s in words for listings: "cases a,b; case budget 1s; max samples
// 50", "" for the zero value.
func (s CaseSelection) Text() string {
	var parts []string
	if len(s.Cases) > 0 {
		parts = append(parts, "cases "+strings.Join(s.Cases, ","))
	}
	if s.CaseBudget != "" {
		parts = append(parts, "case budget "+s.CaseBudget)
	}
	if s.MaxSamples != 0 {
		parts = append(parts, fmt.Sprintf("max samples %d", s.MaxSamples))
	}
	return strings.Join(parts, "; ")
}
