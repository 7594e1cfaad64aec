#!/bin/bash
# Runs alloc-snapshot/v1 and alloc-footprint/v1 against PyTorch's CUDA caching
# allocator on the GPU device machine (README.md beside this file).
# From the repository root: .devbin/alloc/ledger is make device-bin's ledger built with
# -ldflags='-s -w' (smaller, to travel); OUT a directory. COMMIT and TREE: this checkout's.
set -u
export TORCH_LIB=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.git_version, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
  sha256sum .devbin/alloc/ledger
} > "$OUT/environment.txt" 2>&1
LEDGER_ALLOC_DUMP="$OUT/exchanges.jsonl" .devbin/alloc/ledger --db /tmp/alloc.db --json run --impl pytorch-cuda-alloc --impls adapters/implementations.yaml \
  --lane alloc-snapshot/v1 --lane alloc-footprint/v1 \
  --repository github.com/evidence-ledger/ledger --commit "${COMMIT}" --tree "${TREE}" \
  > "$OUT/pytorch-alloc.json" 2> "$OUT/log.txt"
echo "ledger exit $?" >> "$OUT/log.txt"
gzip -kf "$OUT/pytorch-alloc.json" "$OUT/exchanges.jsonl"
