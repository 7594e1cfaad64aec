package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// durationHelp is the shape every duration flag and LEDGER_* duration
// variable accepts, for messages.
const durationHelp = "a duration such as 90s, 30m, 12h, 14d or 1d12h"

// parseDuration parses s as time.ParseDuration does, with one more unit:
// "d", a day of 24 hours ("30d", "1.5d", "1d12h"). It is the one parser of
// every duration the CLI reads, flags and LEDGER_* variables alike; the
// error names the text and the accepted shape.
func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if strings.ContainsRune(t, 'd') {
		var b strings.Builder
		i := 0
		for i < len(t) {
			j := i
			for j < len(t) && (t[j] >= '0' && t[j] <= '9' || t[j] == '.') {
				j++
			}
			if j < len(t) && t[j] == 'd' {
				if j == i {
					return 0, fmt.Errorf("%q is not %s", s, durationHelp)
				}
				n, err := strconv.ParseFloat(t[i:j], 64)
				if err != nil {
					return 0, fmt.Errorf("%q is not %s", s, durationHelp)
				}
				b.WriteString(strconv.FormatFloat(n*24, 'f', -1, 64))
				b.WriteByte('h')
				i = j + 1
				continue
			}
			if j == i {
				j++
			}
			b.WriteString(t[i:j])
			i = j
		}
		t = b.String()
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not %s", s, durationHelp)
	}
	return d, nil
}

// durationValue is a pflag.Value read by parseDuration; its Type is
// "duration", as pflag's own, so help text reads the same.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) Type() string   { return "duration" }
func (d *durationValue) String() string { return time.Duration(*d).String() }

// durationVar defines a duration flag read by parseDuration (days
// included) on fs, as fs.DurationVar does.
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}
