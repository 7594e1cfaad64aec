//go:build unix

package tlog

import (
	"errors"
	"os"
	"syscall"
)

// flockFile takes flock(2) on f, shared or exclusive, waiting for it.
// Over NFS, Linux emulates flock with fcntl byte-range locks, which NFSv4
// servers honour across hosts.
func flockFile(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// funlockFile releases f's flock.
func funlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
