#!/usr/bin/env bash
# Takes the MLX CUDA evidence of testdata/device/mlx on the GPU host (README.md
# beside this file): from the repository root of a copy of the work tree, with
#   /tmp/mlxpart1  the first 52428800 bytes of mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
#   .mlxb/part2    the rest of it
#   .mlxb/mlx-0.32.4-cp312-cp312-manylinux_2_35_x86_64.whl
#   .mlxb/ledger.xz  the ledger binary (CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'), xz'd
# (the wheel is split because one call carries at most 64 MiB with the work tree).
# OUT=DIR for what it writes. MLX_COMMIT/MLX_TREE: the source pins given to ledger run.
set -u -o pipefail
: "${OUT:?OUT}" "${MLX_COMMIT:?MLX_COMMIT}" "${MLX_TREE:?MLX_TREE}"
W=var/mlx-cuda/wheels S=var/mlx-cuda/site
CUDA_WHL=mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
MLX_WHL=mlx-0.32.4-cp312-cp312-manylinux_2_35_x86_64.whl
I=$OUT/info.txt
log() { echo "== $*" | tee -a "$I"; }
mkdir -p "$W" /tmp/mlxrun
log "date $(date -u +%FT%TZ) host $(hostname) $(uname -srm)"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pci.bus_id --format=csv >>"$I" 2>&1
nvidia-smi >>"$I" 2>&1
cat /tmp/mlxpart1 .mlxb/part2 > "$W/$CUDA_WHL" && cp .mlxb/$MLX_WHL "$W/" || exit 3
# PyPI's sha256 (the simple index's hashes, checked on 2026-12-06).
( cd "$W" && printf '%s  %s\n' \
  94cb48fba73e5ee39467e51c35c51c691123359ca17bafd1a24cf92ad6732bee $CUDA_WHL \
  b517badcb8174f8937699465a0ba5b58c2daeaa9bd13d69b1e6ab13401d24a74 $MLX_WHL | sha256sum -c ) 2>&1 | tee -a "$I" || exit 4
ls -l "$W" >>"$I"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" "$W/$MLX_WHL" "$W/$CUDA_WHL" 2>&1 | tee -a "$I" || exit 5
NV=$(python3 -c 'import os, nvidia; print(os.path.dirname(nvidia.__path__[0]) if not getattr(nvidia, "__file__", None) else os.path.dirname(nvidia.__file__))')/nvidia
ln -sfn "$NV" "$S/nvidia"
log "python $(python3 -V 2>&1) $(command -v python3); nvidia packages at $NV"
python3 -m pip list 2>/dev/null | grep -i -E '^(nvidia|torch|cuda)' >>"$I"
ls "$NV" "$NV"/cu13/lib 2>/dev/null | head -60 >>"$I"
xz -dc .mlxb/ledger.xz > /tmp/mlxrun/ledger && chmod +x /tmp/mlxrun/ledger || exit 6
sha256sum /tmp/mlxrun/ledger .mlxb/ledger.xz "$S/mlx/lib/libmlx.so" "$S/mlx/core.cpython-312-x86_64-linux-gnu.so" | tee -a "$I"
log "smoke"
PYTHONNOUSERSITE=1 python3 - "$S" >>"$I" 2>&1 <<'PY'
import sys; sys.path.insert(0, sys.argv[1])
import mlx.core as mx
print("mlx", mx.__version__, "cuda.is_available", mx.cuda.is_available(), "default", mx.default_device())
print("device_info", mx.device_info())
x = mx.array([[2048.0, 1, 1, 1, 1, 1, 1, 1] + [0.0] * 56], dtype=mx.float16)
w, s, b = mx.quantize(mx.ones((8, 64), dtype=mx.float16), group_size=64, bits=4)
print("qmv smoke", mx.quantized_matmul(x, w, s, b, transpose=True, group_size=64, bits=4).tolist())
PY
log "ledger run --impl mlx-cuda"
LEDGER_MLX_DUMP=$OUT/cases.jsonl /tmp/mlxrun/ledger --db /tmp/mlxrun/mlx.db --json run --impl mlx-cuda \
  --impls adapters/implementations.yaml --repository github.com/ml-explore/mlx \
  --commit "$MLX_COMMIT" --tree "$MLX_TREE" --dirty=true >"$OUT/run-output.json" 2>"$OUT/run-stderr.txt"
log "ledger run exit $? (1: a lane failed)"
/tmp/mlxrun/ledger --db /tmp/mlxrun/mlx.db audit >>"$I" 2>&1; log "audit exit $?"
# The machine code (sm_90) of four qmv kernels as shipped, for their accumulation instructions.
log "sass"
cuobjdump --version >>"$I" 2>&1
for f in \
  _ZN3mlx4core2cu10qmv_kernelILi8ELi16ELi64ELb1ELb0EN7cutlass6half_tENS3_15integer_subbyteILi4ELb0EEES4_EEvPKT4_PKT5_PKT6_S9_PKfPS7_iib \
  _ZN3mlx4core2cu10qmv_kernelILi8ELi8ELi64ELb1ELb0EN7cutlass6half_tENS3_15integer_subbyteILi6ELb0EEES4_EEvPKT4_PKT5_PKT6_S9_PKfPS7_iib \
  _ZN3mlx4core2cu10qmv_kernelILi8ELi8ELi64ELb1ELb0EN7cutlass6half_tEhS4_EEvPKT4_PKT5_PKT6_S7_PKfPS5_iib \
  _ZN3mlx4core2cu10qmv_kernelILi8ELi16ELi64ELb1ELb0EN7cutlass10bfloat16_tENS3_15integer_subbyteILi4ELb0EEES4_EEvPKT4_PKT5_PKT6_S9_PKfPS7_iib; do
  echo "### $f" >>"$OUT/qmv-sass.txt"
  timeout 90 cuobjdump -sass -arch sm_90 -fun "$f" "$S/mlx/lib/libmlx.so" >>"$OUT/qmv-sass.txt" 2>>"$I"
  log "cuobjdump exit $? for ${f:0:80}"
done
gzip -k "$OUT/cases.jsonl" 2>/dev/null
ls -l "$OUT" >>"$I"
