#!/usr/bin/env bash
# The PyTorch adapter runs on the GPU device machine (see README.md beside this file).
# Run from the repository root with COMMIT and TREE of the clean checkout that was copied over
# (the device gets the work tree without .git) and OUT a directory for the results:
#   COMMIT=... TREE=... OUT=... testdata/device/pytorch/run.sh
set -u
L=.devbin/ledger
export TORCH_LIB="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 - <<'PY'
import torch, platform
print("python", platform.python_version(), "torch", torch.__version__, "git", torch.version.git_version, "cuda", torch.version.cuda)
print("cuda available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
for f in ("_weight_int4pack_mm", "_convert_weight_to_int4pack", "_weight_int4pack_mm_for_cpu", "_convert_weight_to_int4pack_for_cpu"):
    print(f, hasattr(torch, f))
PY
  sha256sum "$L" "$TORCH_LIB/libtorch_cuda.so" "$TORCH_LIB/libtorch_cpu.so"
} > "$OUT/environment.txt" 2>&1
for impl in pytorch-dequant-cuda pytorch-int4pack-cuda pytorch-dequant-cpu pytorch-int4pack-cpu; do
  echo "== $impl" >> "$OUT/log.txt"
  SECONDS=0
  "$L" --db /tmp/device.db --json run --impl "$impl" --impls adapters/implementations.yaml \
    --repository github.com/evidence-ledger/ledger --commit "$COMMIT" --tree "$TREE" --dirty=false \
    > "$OUT/$impl.json" 2>> "$OUT/log.txt"
  echo "exit $? after ${SECONDS}s" >> "$OUT/log.txt"
done
"$L" --db /tmp/device.db audit >> "$OUT/log.txt" 2>&1
