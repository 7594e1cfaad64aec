//go:build !unix

package cpu

import "unsafe"

// rawAlloc allocates n bytes from the Go heap where mmap is unavailable.
func rawAlloc(n int) ([]byte, error) { return make([]byte, n), nil }

// rawFree drops the reference; the garbage collector reclaims it.
func rawFree(b []byte) error { return nil }

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
