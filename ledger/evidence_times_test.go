package ledger

import (
	"errors"
	"testing"
	"time"
)

// TestValidateTimesAt: started_at and finished_at are bounded by the
// receiving clock (MaxClockSkew ahead at most) and by the Unix epoch, and
// finished_at is not before started_at; each refusal names its field.
func TestValidateTimesAt(t *testing.T) {
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	y2099 := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	y0 := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name            string
		started, finish time.Time
		field           string
	}{
		{"a run that just ended", now.Add(-time.Minute), now, ""},
		{"a runner clock within the skew", now, now.Add(MaxClockSkew), ""},
		{"finished past the skew", now, now.Add(MaxClockSkew + time.Second), "finished_at"},
		{"finished in 2099", now, y2099, "finished_at"},
		{"both in 2099", y2099, y2099, "started_at"},
		{"started in 2099 only", y2099, now, "started_at"},
		{"started in year 0000", y0, now, "started_at"},
		{"finished in year 0000", now, y0, "finished_at"},
		{"finished before started", now, now.Add(-time.Second), "finished_at"},
		{"started unset", time.Time{}, now, "started_at"},
	} {
		e := &Evidence{StartedAt: c.started, FinishedAt: c.finish}
		err := e.ValidateTimesAt(now)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v; want accepted", c.name, err)
			}
			continue
		}
		var le *Error
		if !errors.As(err, &le) || le.Code != CodeInvalid || le.Field != c.field {
			t.Errorf("%s: %v; want invalid naming %s", c.name, err, c.field)
		}
	}
}
