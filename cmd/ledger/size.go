package main

import (
	"fmt"
	"math"
	"strconv"

	"github.com/dustin/go-humanize"
)

// sizeHelp is the shape every byte-size flag and LEDGER_* size variable
// accepts, for messages.
const sizeHelp = "a size in bytes such as 4194304, 8MiB, 64MiB or 1GB"

// parseSize parses s as a number of bytes: plain digits, or a number with
// an IEC (KiB, MiB, GiB) or SI (kB, MB, GB) unit, read by go-humanize's
// ParseBytes (github.com/dustin/go-humanize). The error names the text
// and the accepted shape; sizes over math.MaxInt64 bytes are refused.
func parseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not %s", s, sizeHelp)
	}
	return int64(n), nil
}

// sizeValue is a pflag.Value read by parseSize; it prints as plain bytes.
type sizeValue int64

func (v *sizeValue) String() string { return strconv.FormatInt(int64(*v), 10) }

// Set implements pflag.Value.
func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

// Type implements pflag.Value.
func (v *sizeValue) Type() string { return "bytes" }
