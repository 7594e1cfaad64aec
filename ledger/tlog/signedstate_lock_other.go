//go:build !unix

package tlog

import "os"

// flockFile is a no-op where flock(2) does not exist: the journal is then
// safe for one process only (servers sharing a journal need a Unix host).
func flockFile(f *os.File, exclusive bool) error { return nil }

// funlockFile is a no-op (see flockFile).
func funlockFile(f *os.File) error { return nil }
