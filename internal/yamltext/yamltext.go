package yamltext

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// kinds words the YAML tags yaml.v3 names in a type error.
var kinds = map[string]string{
	"!!str": "a string", "!!int": "an integer", "!!float": "a number", "!!bool": "a boolean",
	"!!null": "null", "!!seq": "a list", "!!map": "a mapping", "!!timestamp": "a timestamp",
	"!!binary": "binary data", "!!merge": "a merge key",
}

// Messages returns the messages of err, an error of yaml.v3's Decode or
// Unmarshal, one per problem, with the scalar values they quote left out:
// a type error's "line N: cannot unmarshal !!TAG `VALUE` into TYPE" reads
// "line N: expected WHAT, got a string" (WHAT is what[TYPE]; else "a
// list" or "a mapping" for a slice or map type, "a number", "an integer",
// "a string" or "true or false" for a scalar, or the Go type); other messages (unknown fields, syntax errors, which
// name a line and column and no value) are returned as they are, without
// the "yaml: " prefix. Safe for concurrent use.
func Messages(err error, what map[string]string) []string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		out[i] = typeMessage(m, what)
	}
	return out
}

// typeMessage rewords one message of a yaml.TypeError; a message that is
// not a "cannot unmarshal" one is returned unchanged.
func typeMessage(m string, what map[string]string) string {
	const marker = "cannot unmarshal "
	i := strings.Index(m, marker)
	if i < 0 {
		return m
	}
	prefix, rest := m[:i], m[i+len(marker):]
	tag, _, _ := strings.Cut(rest, " ")
	// The value sits between the tag and the last " into ", and may
	// itself hold anything: only the type after it is kept.
	typ := ""
	if j := strings.LastIndex(rest, " into "); j >= 0 {
		typ = rest[j+len(" into "):]
	}
	got, ok := kinds[tag]
	if !ok {
		got = "a value of another kind"
	}
	want := describe(typ, what)
	if want == "" {
		return fmt.Sprintf("%s%s of the wrong kind", prefix, got)
	}
	return fmt.Sprintf("%sexpected %s, got %s", prefix, want, got)
}

// scalars words the Go scalar types a field may have.
var scalars = map[string]string{
	"string": "a string", "bool": "true or false", "float64": "a number", "float32": "a number",
	"int": "an integer", "int64": "an integer", "int32": "an integer", "uint": "a non-negative integer",
	"uint64": "a non-negative integer", "uint32": "a non-negative integer",
}

// describe words Go type typ as what names it; a slice is "a list" (of
// what its element is), a map "a mapping", other types their Go name.
func describe(typ string, what map[string]string) string {
	if w := what[typ]; w != "" {
		return w
	}
	if w := scalars[typ]; w != "" {
		return w
	}
	switch {
	case strings.HasPrefix(typ, "[]"):
		if w := what[typ[2:]]; w != "" {
			return "a list, each item " + w
		}
		return "a list"
	case strings.HasPrefix(typ, "map["):
		return "a mapping"
	}
	return typ
}
