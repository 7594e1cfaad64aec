package main

// Backends linked into the ledger binary besides backends/cpu (imported by
// run.go). Each registers itself with runner.RegisterBackend; the CUDA
// backend loads its driver only when opened, so the binary still runs on
// hosts without a GPU.
import _ "github.com/evidence-ledger/ledger/backends/cuda" // registers backend "cuda"
