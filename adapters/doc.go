// Package adapters holds the adapters shipped with the ledger for external
// implementations (README: "External implementations"): PyTorch
// (pytorch/ledger_torch_adapter.py), MLX (mlx/ledger_mlx_adapter.py) and
// the shared pure-Python protocol side (python/ledger_adapter.py), plus
// implementations.yaml, their configuration for `ledger run --impl`. The
// Go reference adapter is cmd/ledger-ref-adapter.
//
// The package has no Go API: its tests run the Python adapters through the
// real protocol client (runner.RunImpl). They need python3 and skip with a
// message where it is absent; the PyTorch tests also need torch, and the
// MLX adapter is run with an exact stand-in for mlx.core
// (mlx/testdata/fakemlx) because MLX needs Apple hardware.
package adapters
