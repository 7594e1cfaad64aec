// Package adapters holds the adapters shipped with the ledger for external
// implementations (docs/reference/implementations.md): PyTorch
// (pytorch/ledger_torch_adapter.py), MLX (mlx/ledger_mlx_adapter.py) and
// the shared pure-Python protocol side (python/ledger_adapter.py), plus
// implementations.yaml, their configuration for `ledger run --impl`. The
// Go reference adapter is cmd/ledger-ref-adapter.
//
// The package has no Go API: its tests run the Python adapters through the
// real protocol client (runner.RunImpl). They need python3 and skip with a
// message where it is absent; the PyTorch tests also need torch. The MLX
// adapter's layout is tested against an exact stand-in for mlx.core
// (mlx/testdata/fakemlx), and the qmv lanes run against real MLX on the
// CPU (the wheels pinned in mlx/requirements-cpu.txt, `make mlx-deps`),
// where every recorded verdict is checked against an independent exact
// model of MLX's CPU arithmetic (mlxmodel_test.go); that test skips when
// MLX is not installed, unless LEDGER_REQUIRE_MLX=1 (CI).
package adapters
