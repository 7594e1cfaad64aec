package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
)

// MaxAgentLanes is the most lanes an agent may declare.
const MaxAgentLanes = 256

// MaxHealth is the most bytes of a health verdict kept (longer ones are
// cut at a rune boundary).
const MaxHealth = 512

// MaxMessage is the most bytes kept of a finish message (the reason an
// attempt could not run, kept in the run-outcome leaf), cut at a rune
// boundary.
const MaxMessage = 256

// Validate checks every field of a registration except the public key
// (the caller parses it) with the text checks evidence gets
// (ledger.CheckText: valid UTF-8, no control character, length caps
// ledger.MaxIdentifier and ledger.MaxShortText): name a runner name;
// backend a known backend; labels as ValidateLabels; spec.lanes 1 to
// MaxAgentLanes lane names; spec.repository required, the normalized
// repository name (ledger.NormalizeRepository) of the subject its build
// is of, and spec.commit required, that subject's commit id (40 or 64
// lowercase hex): an agent records evidence of that build only, so a
// registration that names none is refused rather than taken as "any";
// spec.device.model, spec.device.driver, spec.device.attrs values and
// spec.host identifiers of at most MaxIdentifier bytes;
// spec.runner.version, spec.runner.commit and attrs keys at most
// MaxShortText, these text fields also free of invisible characters
// (format characters Cf, separators Zl and Zp, spaces other than U+0020),
// so that what an admin approves shows as it is stored; counts not
// negative. Health is free text that is cleaned (CleanHealth), not
// refused. Errors are CodeInvalid naming the first bad field; nothing is
// echoed beyond 64 bytes.
func (r *RegisterRequest) Validate() error {
	if !ledger.ValidRunnerName(r.Name) {
		return ledger.FieldError("name", "must be 1-64 of [a-z0-9._-] starting alphanumeric")
	}
	if !r.Backend.Valid() {
		return ledger.FieldError("backend", "must be one of %s", ledger.BackendList())
	}
	if err := ValidateLabels("labels", r.Labels); err != nil {
		return err
	}
	return r.Spec.Validate()
}

// Validate checks s as RegisterRequest.Validate describes; field names
// start with "spec.".
func (s *AgentSpec) Validate() error {
	if len(s.Lanes) == 0 || len(s.Lanes) > MaxAgentLanes {
		return ledger.FieldError("spec.lanes", "1 to %d lanes: the lanes in the agent's own configuration", MaxAgentLanes)
	}
	for i, l := range s.Lanes {
		if !laneRe.MatchString(l) {
			return ledger.FieldError(fmt.Sprintf("spec.lanes[%d]", i), "must be a lane name (1-96 of [a-z0-9._-], optionally /vN)")
		}
	}
	if s.DeviceCount < 0 || s.CPUs < 0 || s.Device.Cores < 0 {
		return ledger.FieldError("spec", "device_count, cpus and device.cores must not be negative")
	}
	if len(s.Device.Attrs) > 64 {
		return ledger.FieldError("spec.device.attrs", "at most 64 attrs, got %d", len(s.Device.Attrs))
	}
	if err := ValidateRepository("spec.repository", s.Repository); err != nil {
		if le, ok := err.(*ledger.Error); ok {
			c := *le
			c.Message += "; pass the agent --repository"
			return &c
		}
		return err
	}
	if !ledger.ValidObjectID(s.Commit) {
		return ledger.FieldError("spec.commit", "required: the commit id (40 or 64 lowercase hex) of the build this agent runs, got %q", clip(s.Commit))
	}
	for _, f := range []struct {
		field, v string
		max      int
	}{
		{"spec.device.model", s.Device.Model, ledger.MaxIdentifier},
		{"spec.device.driver", s.Device.Driver, ledger.MaxIdentifier},
		{"spec.runner.version", s.Runner.Version, ledger.MaxShortText},
		{"spec.runner.commit", s.Runner.Commit, ledger.MaxShortText},
		{"spec.host", s.Host, ledger.MaxIdentifier},
	} {
		if err := checkShown(f.field, f.v, f.max, false); err != nil {
			return err
		}
	}
	for k, v := range s.Device.Attrs {
		if err := checkShown("spec.device.attrs", k, ledger.MaxShortText, true); err != nil {
			return err
		}
		if err := checkShown("spec.device.attrs."+clip(k), v, ledger.MaxIdentifier, false); err != nil {
			return err
		}
	}
	return nil
}

// checkShown is ledger.CheckText (single line) for a registration's text
// that an admin reads before approving it, which must also show as it is
// stored: an invisible character (invisible) is refused, CodeInvalid
// naming field and the character's code point, never the text.
func checkShown(field, s string, max int, required bool) error {
	if err := ledger.CheckText(field, s, max, required, false); err != nil {
		return err
	}
	if i := strings.IndexFunc(s, invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return ledger.FieldError(field, "must not contain invisible characters (found U+%04X): format characters (zero-width, bidirectional), line and paragraph separators, spaces other than U+0020, fillers, variation selectors, private-use and unassigned code points make the text display otherwise than it is stored", r)
	}
	return nil
}

// invisible reports whether r may show as nothing, as a plain space or as
// a font's choice: any character but U+0020 that is not graphic (format
// characters, Cf: zero-width and bidirectional ones; line and paragraph
// separators; private use; unassigned), a space separator other than
// U+0020 (Zs: no-break, em, ideographic spaces), a default-ignorable one
// (Unicode's Other_Default_Ignorable_Code_Point and Variation_Selector:
// Hangul fillers U+115F, U+3164, U+FFA0, the combining grapheme joiner
// U+034F, Khmer vowels U+17B4, variation selectors U+FE0F, U+E0100), or
// the Braille blank U+2800. Source: Unicode's DerivedCoreProperties.txt
// (Default_Ignorable_Code_Point), as Go's unicode tables carry it.
func invisible(r rune) bool {
	if r == ' ' {
		return false
	}
	return !unicode.IsGraphic(r) || r == '\u2800' ||
		unicode.In(r, unicode.Zs, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

// ValidateRepository checks that repo is a repository name an agent can
// declare and a run can name: required, at most ledger.MaxIdentifier
// bytes of text (ledger.CheckText), already normalized
// (ledger.NormalizeRepository), and host (with a dot) / owner / name...
// in ASCII segments, none "." or ".." (repoNameRe). A local path, a URL
// (query, scheme, .git suffix) or a look-alike character is refused.
// Errors are CodeInvalid naming field; the value is echoed clipped to 64
// bytes.
func ValidateRepository(field, repo string) error {
	if err := ledger.CheckText(field, repo, ledger.MaxIdentifier, true, false); err != nil {
		return err
	}
	if n := ledger.NormalizeRepository(repo); n != repo {
		return ledger.FieldError(field, "must be a normalized repository name (host/owner/name, as evidence names it): %q, not %q", clip(n), clip(repo))
	}
	if !repoNameRe.MatchString(repo) {
		return ledger.FieldError(field, "must be a repository name host/owner/name: segments of ASCII letters, digits and . _ ~ -, none of them . or .., the host with a dot (a local path, a URL query or a look-alike character is not one), got %q", clip(repo))
	}
	return nil
}

// repoNameRe is a repository name as an agent declares it: host (with a
// dot) / owner / name..., ASCII segments, none "." or "..".
var repoNameRe = regexp.MustCompile(`^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(/(?:[A-Za-z0-9_~-][A-Za-z0-9._~-]*|\.[A-Za-z0-9_~-][A-Za-z0-9._~-]*|\.\.[A-Za-z0-9._~-]+)){2,}$`)

// SpecDigestOf is the digest of what agent a declared at registration,
// the registration an approval is of: "sha256:" and 64 lowercase hex, the
// SHA-256 of the JSON of its key id, backend, labels and spec (lanes,
// repository, commit, device, counts, memory, runner build, host; map keys
// sorted, as encoding/json writes them). Health, times and the current
// run are not in it. Safe for concurrent use.
func SpecDigestOf(a Agent) string {
	b, err := json.Marshal(struct {
		KeyID   string            `json:"key_id"`
		Backend ledger.Backend    `json:"backend"`
		Labels  map[string]string `json:"labels"`
		Spec    AgentSpec         `json:"spec"`
	}{a.KeyID, a.Backend, a.Labels, a.Spec})
	if err != nil {
		// Strings, integers and maps of strings always encode.
		panic(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// MatchSpecDigest reports whether d, from an admin, names digest full
// (from SpecDigestOf): all 64 hex digits, with or without the "sha256:"
// prefix, in either case. A prefix does not do: the agent chooses both
// registrations an approval could be confused between, so a cut digest
// is open to a birthday collision (64 bits take about 2^32 hashes).
func MatchSpecDigest(d, full string) bool {
	h := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(d)), "sha256:")
	return len(h) == 64 && h == strings.TrimPrefix(full, "sha256:")
}

// hardwareAttrs are the device attributes that identify the hardware
// (the CUDA backend's and nvidia-smi's memory, the compute capability).
var hardwareAttrs = []string{"memory_bytes", "compute_capability", "smi_memory_mib"}

// HardwareChange returns the first field in which next declares other
// hardware than prev ("" when none): backend, labels, spec.device.model,
// spec.device.cores, the device attrs memory_bytes, compute_capability
// and smi_memory_mib, spec.device_count, spec.memory_bytes, spec.cpus,
// and the repository its builds are of (spec.repository). The lanes, the
// build (commit, runner), driver, host name and health may change
// without it. An approved
// agent's registration may only change where this returns "".
func HardwareChange(prev, next Agent) string {
	switch {
	case prev.Backend != next.Backend:
		return "backend"
	case !maps.Equal(prev.Labels, next.Labels):
		return "labels"
	case prev.Spec.Device.Model != next.Spec.Device.Model:
		return "spec.device.model"
	case prev.Spec.Device.Cores != next.Spec.Device.Cores:
		return "spec.device.cores"
	case prev.Spec.DeviceCount != next.Spec.DeviceCount:
		return "spec.device_count"
	case prev.Spec.MemoryBytes != next.Spec.MemoryBytes:
		return "spec.memory_bytes"
	case prev.Spec.CPUs != next.Spec.CPUs:
		return "spec.cpus"
	case prev.Spec.Repository != next.Spec.Repository:
		return "spec.repository"
	}
	for _, k := range hardwareAttrs {
		if prev.Spec.Device.Attrs[k] != next.Spec.Device.Attrs[k] {
			return "spec.device.attrs." + k
		}
	}
	return ""
}

// DeviceChange returns the member of device ev (a record an agent made)
// that names other hardware than device reg (its registration) declared,
// "" when none: model, cores, or a hardware attr (memory_bytes,
// compute_capability, smi_memory_mib) the record carries with another
// value or spelled otherwise (another letter case, spaces). Driver and
// other attrs may differ, and a record may leave attrs out.
func DeviceChange(reg, ev ledger.Device) string {
	switch {
	case ev.Model != reg.Model:
		return "model"
	case ev.Cores != reg.Cores:
		return "cores"
	}
	for k, v := range ev.Attrs {
		// A key spelled otherwise (case, spaces) is the same attr to a reader.
		if h := strings.ToLower(strings.TrimSpace(k)); slices.Contains(hardwareAttrs, h) && (k != h || v != reg.Attrs[h]) {
			return "attrs." + h
		}
	}
	return ""
}

// CleanHealth returns a health verdict as it is stored: CleanText with
// at most MaxHealth bytes.
func CleanHealth(s string) string { return CleanText(s, MaxHealth) }

// CleanText returns agent-sent free text (a health verdict, a finish
// message) as it is stored: control, bidirectional formatting and other
// invisible characters (hidden; newlines included) replaced by spaces,
// invalid UTF-8 by U+FFFD, cut to at most max bytes at a rune boundary.
func CleanText(s string, max int) string {
	return cut(strings.Map(func(r rune) rune {
		if hidden(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD")), max)
}

// hidden reports whether r is a control character (Cc), a bidirectional
// formatting character (Bidi_Control, e.g. U+202E) or another invisible
// character (invisible: U+200B, U+00A0, U+2028), which make text display
// otherwise than it is stored.
func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || invisible(r)
}

// Visible returns s with every control, bidirectional formatting and
// other invisible character (hidden) written as a Go escape (\x1b,
// \u0085, \u202e, \u200b, \u00a0) and invalid
// UTF-8 as U+FFFD, so that a terminal or a page shows the text and obeys
// none of it. Other text is unchanged.
func Visible(s string) string {
	if !strings.ContainsFunc(s, hidden) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if hidden(r) {
			q := fmt.Sprintf("%+q", string(r))
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// VisibleMap returns a new map (never nil) of m's keys and values made
// Visible.
func VisibleMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, val := range m {
		out[Visible(k)] = Visible(val)
	}
	return out
}

// VisibleAll returns a new slice of l's elements made Visible.
func VisibleAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = Visible(s)
	}
	return out
}

// Visible returns a copy of r whose agent-sent text (progress lane,
// attempt reasons, message) and names (agent, lanes, labels, created by)
// are Visible, for a terminal or a page: a row stored before the text was
// cleaned shows its control characters as escapes.
func (r Run) Visible() Run {
	v := Visible
	r.Agent, r.Message, r.CreatedBy, r.Progress.Lane = v(r.Agent), v(r.Message), v(r.CreatedBy), v(r.Progress.Lane)
	r.Lanes, r.Labels = VisibleAll(r.Lanes), VisibleMap(r.Labels)
	if r.Cases != nil {
		r.Cases = VisibleAll(r.Cases)
	}
	r.Attempts = slices.Clone(r.Attempts)
	for i := range r.Attempts {
		r.Attempts[i].Agent, r.Attempts[i].Reason = v(r.Attempts[i].Agent), v(r.Attempts[i].Reason)
	}
	return r
}

// Visible returns a copy of a whose text fields (name, key id, backend,
// labels, health, current run, spec's repository, commit, lanes, host,
// device and runner) are Visible, for a table or a page.
func (a Agent) Visible() Agent {
	v := Visible
	a.Name, a.KeyID, a.Backend, a.Health, a.CurrentRun = v(a.Name), v(a.KeyID), ledger.Backend(v(string(a.Backend))), v(a.Health), v(a.CurrentRun)
	a.Labels = VisibleMap(a.Labels)
	sp := &a.Spec
	sp.Repository, sp.Commit, sp.Host = v(sp.Repository), v(sp.Commit), v(sp.Host)
	sp.Lanes = VisibleAll(sp.Lanes)
	sp.Device.Model, sp.Device.Driver = v(sp.Device.Model), v(sp.Device.Driver)
	if sp.Device.Attrs != nil {
		sp.Device.Attrs = VisibleMap(sp.Device.Attrs)
	}
	sp.Runner.Version, sp.Runner.Commit = v(sp.Runner.Version), v(sp.Runner.Commit)
	return a
}

// cut returns s cut to at most n bytes at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
