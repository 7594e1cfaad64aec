//go:build !linux

package web

import "testing"

// openWatch has no portable equivalent of inotify; on other systems the
// route walk relies on Config.FileAccess and on answers never quoting the
// sentinel.
func openWatch(t *testing.T, dirs ...string) (events func() int) {
	t.Log("no inotify on this system: file opens are checked through Config.FileAccess only")
	return func() int { return 0 }
}
