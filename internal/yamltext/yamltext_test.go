package yamltext

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestMessagesQuoteNoValue: a scalar where a mapping, list or number is
// expected is worded by line, what was expected and what was found; no
// part of the value (yaml.v3 quotes its first 7 characters) is kept,
// whatever it holds.
func TestMessagesQuoteNoValue(t *testing.T) {
	type doc struct {
		N    int      `yaml:"n"`
		List []string `yaml:"list"`
	}
	for _, in := range []string{
		"SECRETLEAKTOKEN=abcd1234\n",
		"n: SECRETLEAK\n",
		"list: SECRETLEAK\n",
		"n: SEC` into x\n",
	} {
		var d doc
		err := yaml.Unmarshal([]byte(in), &d)
		if err == nil {
			t.Fatalf("%q decoded", in)
		}
		msg := strings.Join(Messages(err, map[string]string{"yamltext.doc": "the document (a mapping)"}), "; ")
		if strings.Contains(msg, "SEC") || !strings.Contains(msg, "line 1: expected ") || !strings.Contains(msg, "got a string") {
			t.Errorf("%q: %q; want line, what was expected, no value", in, msg)
		}
	}
	var d doc
	if got := Messages(yaml.Unmarshal([]byte("a: [\n"), &d), nil); len(got) != 1 || strings.HasPrefix(got[0], "yaml: ") {
		t.Errorf("syntax error: %q", got)
	}
}
