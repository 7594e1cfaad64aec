package ledger

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestLaneAndNameMatchTheirRegexps: ValidLane and validName accept
// exactly what the regular expressions they spell out accept, on edge
// cases (lengths at and past the bounds, every character class, a
// trailing newline, multi-byte runes) and on random strings drawn from
// the characters that matter.
func TestLaneAndNameMatchTheirRegexps(t *testing.T) {
	laneRe := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,95}/v[1-9][0-9]{0,5}$`)
	nameRe := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+@:/-]{0,254}$`)
	cases := []string{"", "a/v1", "a/v0", "a/v01", "a/v1234567", "a/v123456", "A/v1", "-a/v1", ".a/v1", "a.b_c-d/v9",
		"a/b/v1", "a/v1\n", "a/v", "/v1", "a/1", "é/v1", "a/v1x", strings.Repeat("a", 96) + "/v1", strings.Repeat("a", 97) + "/v1",
		"libmlx.so", "a+b@c:d/e-f", strings.Repeat("x", 255), strings.Repeat("x", 256), "_x", "x y", "x\x00", "in-toto", "x\n"}
	alphabet := []byte("az09AZ._-+@:/v1 \n\x00\xc3\xa9")
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := ValidLane(s), laneRe.MatchString(s); got != want {
			t.Errorf("ValidLane(%q) = %v, the regexp says %v", s, got, want)
		}
		if got, want := validName(s), nameRe.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}
