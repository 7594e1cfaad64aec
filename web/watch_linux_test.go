//go:build linux

package web

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openWatch watches dirs with inotify for any open or read of a file in
// them (IN_OPEN, IN_ACCESS) by any process, this test's server included:
// a strace-free proof that nothing opened them. events returns how many
// were seen since the last call.
func openWatch(t *testing.T, dirs ...string) (events func() int) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	for _, d := range dirs {
		if _, err := unix.InotifyAddWatch(fd, d, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
			t.Fatalf("inotify watch %s: %v", d, err)
		}
	}
	return func() int {
		n := 0
		buf := make([]byte, 64<<10)
		for {
			k, err := unix.Read(fd, buf)
			if k <= 0 || err != nil {
				return n
			}
			for off := 0; off+unix.SizeofInotifyEvent <= k; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				n++
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}
