// Package yamltext words the errors of gopkg.in/yaml.v3 decoding without
// the file content they quote: yaml.v3's "cannot unmarshal !!str
// `SECRETL...` into gates.Release" carries the first characters of the
// scalar it could not decode, and a file given to a parser by mistake (a
// credentials file, an environment file) would show them in the error.
// TRUST.md rule 7: no file content in any message.
package yamltext
