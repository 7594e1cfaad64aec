package ledger

import "testing"

// TestHasMember: a top-level member in any ASCII letter case or spelled
// with an escape is found; the name as a value, a nested member, a longer
// name and a body that is not an object are not.
func TestHasMember(t *testing.T) {
	for body, want := range map[string]bool{
		`{"run":{"id":"x"}}`:            true,
		`{"a":1, "RuN" : 2}`:            true,
		`{"r\u0075n":1}`:                true,
		`{"lane":"run"}`:                false,
		`{"details":{"run":1}}`:         false,
		`{"runs":1,"rerun":2,"run_":3}`: false,
		`["run"]`:                       false,
		`{"run":`:                       false,
		`"run"`:                         false,
		``:                              false,
	} {
		if got := HasMember([]byte(body), RunField); got != want {
			t.Errorf("HasMember(%s) = %v, want %v", body, got, want)
		}
		if err := RefuseRunClaim([]byte(body), "[1]."); (err != nil) != want || (err != nil && err.(*Error).Field != "[1].run") {
			t.Errorf("RefuseRunClaim(%s) = %v", body, err)
		}
	}
}
