package main

// The backends linked into the ledger binary, each registered with
// runner.RegisterBackend under its ledger.Backend name. The CUDA backend
// loads its driver only when opened, so the binary still runs on hosts
// without a GPU. Only these run in this binary; evidence for the other
// ledger.Backends (metal, external) is recorded through the API or
// `ledger record`.
import (
	_ "github.com/evidence-ledger/ledger/backends/cpu"  // registers backend "cpu"
	_ "github.com/evidence-ledger/ledger/backends/cuda" // registers backend "cuda"
)
