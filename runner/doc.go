// Package runner runs the hardware validation lanes of WORKLOADS.md on a
// backend and turns each lane run into one ledger.Evidence record.
//
// It defines the two contracts the rest of the program meets:
//
//   - Backend, implemented by backends/cpu (and later backends/cuda,
//     backends/metal): device identity, raw allocate/free of real memory,
//     and the qmv kernel in its promoted and narrow variants over packed
//     weights, with raw bits in and out. Backends register themselves with
//     RegisterBackend; OpenBackend opens one by name.
//   - Lane: a named, versioned validation procedure with a case matrix of
//     stable case ids, an independent reference, a negative control and a
//     verdict. The four lanes (qmv-bias-sum/v1, qmv-bias-sum-paths/v1,
//     alloc-snapshot/v1, alloc-footprint/v1) register in this package.
//
// Everything backend-neutral happens here or in runner/quant and
// runner/alloc: inputs are quantized and packed on the host, references are
// computed with exact arithmetic (math/big) and rounded to the activation
// dtype with round-to-nearest-even, outputs compared bit for bit; the
// caching allocator runs over the backend's raw memory.
//
// External implementations (a runtime's own kernel: MLX, PyTorch, ...)
// run the qmv lanes through an adapter process speaking the adapter
// protocol, ledger-adapter/1 (adapter.go: framing and codec, ServeAdapter
// for the adapter side; adapter_client.go: the pipelined client).
// RunImpl runs a configured Implementation (impl.go, LoadImplConfig) with
// the CPU backend's narrow kernel as the negative control.
//
// Run executes lanes and builds evidence: subject pins (repository, commit,
// tree, dirty, artifact digests of the running binary, of each lane's
// definition and of the backend's kernel sources), device identity, runner
// build, cases exact/total, failing case ids, control outcome, status,
// times and details.
package runner
