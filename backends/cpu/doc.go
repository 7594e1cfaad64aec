// Package cpu is the CPU backend of the hardware lanes: it implements
// runner.Backend with real host memory (anonymous mmap on Unix, so Free
// really returns pages to the system) and a qmv kernel over packed
// quantized weights, promoted and narrow variants, parallel across output
// rows on every core (GOMAXPROCS goroutines), with AVX2/FMA assembly for
// 4- and 8-bit weights on amd64 (qmv_amd64.s) and portable Go elsewhere.
//
// Importing the package registers the backend as "cpu" with
// runner.RegisterBackend.
package cpu
