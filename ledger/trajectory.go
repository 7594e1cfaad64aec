package ledger

import (
	"encoding/json"
	"errors"
)

// TrajectoryLane is the default lane of trajectory evidence.
const TrajectoryLane = "trajectory/v1"

// Trajectory is the Details object of trajectory evidence (lane
// TrajectoryLane by default, backend external): the generated token id
// sequence of a named trajectory (a fixture prompt) in one decoding mode on
// one runtime backend. Mode and Backend are free-form labels of the
// runtime under test, not ledger Backends; either may be empty.
//
//	{"trajectory": "gemma-qat4-b1", "mode": "automatic", "backend": "paged", "tokens": [2, 651, ...]}
type Trajectory struct {
	Name    string  `json:"trajectory"`
	Mode    string  `json:"mode,omitempty"`
	Backend string  `json:"backend,omitempty"`
	Tokens  []int64 `json:"tokens"`
}

// DecodeTrajectory decodes the Details of trajectory evidence. The details
// must be a JSON object whose "trajectory" is a non-empty string, whose
// "mode" and "backend" are strings when present, and whose "tokens" is an
// array (possibly empty) of integer token ids that fit in 64 bits; other
// members are allowed and ignored. Errors are CodeInvalid *Error values
// naming the field under "details."; they never quote the details.
func DecodeTrajectory(details json.RawMessage) (Trajectory, error) {
	if len(details) == 0 {
		return Trajectory{}, FieldError("details", "absent: trajectory evidence needs {\"trajectory\": NAME, \"tokens\": [...]}")
	}
	var probe struct {
		Name    *string         `json:"trajectory"`
		Mode    *string         `json:"mode"`
		Backend *string         `json:"backend"`
		Tokens  json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(details, &probe); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Trajectory{}, FieldError("details."+te.Field, "must be a string")
		}
		return Trajectory{}, FieldError("details", "not a JSON object of trajectory, mode, backend and tokens")
	}
	if probe.Name == nil || *probe.Name == "" {
		return Trajectory{}, FieldError("details.trajectory", "required: the trajectory's name")
	}
	if len(probe.Tokens) == 0 || string(probe.Tokens) == "null" {
		return Trajectory{}, FieldError("details.tokens", "required: an array of token ids")
	}
	t := Trajectory{Name: *probe.Name}
	if probe.Mode != nil {
		t.Mode = *probe.Mode
	}
	if probe.Backend != nil {
		t.Backend = *probe.Backend
	}
	if err := json.Unmarshal(probe.Tokens, &t.Tokens); err != nil {
		return Trajectory{}, FieldError("details.tokens", "must be an array of integer token ids (64-bit)")
	}
	return t, nil
}

// NoDivergence is what FirstDivergence returns for identical sequences.
const NoDivergence = -1

// FirstDivergence returns the first zero-based position at which the token
// sequences a and b differ: the first index whose tokens differ, or, when
// one sequence is a strict prefix of the other, the length of the shorter
// (the first position where one has a token and the other has ended). It
// returns NoDivergence (-1) when a and b are identical, and only then.
func FirstDivergence(a, b []int64) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return NoDivergence
}

// TokenAt returns a pointer to a copy of tokens[i], or nil when the
// sequence has ended before i (for showing both sides of a divergence).
func TokenAt(tokens []int64, i int) *int64 {
	if i < 0 || i >= len(tokens) {
		return nil
	}
	t := tokens[i]
	return &t
}
