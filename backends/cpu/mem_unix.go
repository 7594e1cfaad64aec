//go:build unix

package cpu

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawAlloc maps n bytes of anonymous private memory (zeroed by the kernel).
func rawAlloc(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

// rawFree unmaps memory from rawAlloc.
func rawFree(b []byte) error { return unix.Munmap(b) }

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
