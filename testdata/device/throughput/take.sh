#!/usr/bin/env bash
# Takes the committed throughput run on the GPU device machine (README.md beside this file).
# From the repository root, with COMMIT and TREE of the clean checkout that was copied over (the
# device gets the work tree without .git) and OUT a directory for the results:
#   COMMIT=... TREE=... OUT=... testdata/device/throughput/take.sh
# Needs, built on the development machine from that checkout (CGO_ENABLED=0 GOOS=linux
# GOARCH=amd64, -trimpath -ldflags='-s -w', then xz, to fit the device's 64 MiB carry):
#   .devbin/tp/ledger.xz             go build ./cmd/ledger
#   .devbin/tp/ledger-ref-adapter.xz go build ./cmd/ledger-ref-adapter
#   .devbin/tp/cuda.test.xz          go test -c ./backends/cuda
# Steps are ordered by what the record needs most, each under its own time limit, so that the
# whole fits one 10-minute device call.
set -u
(cd .devbin/tp && for f in *.xz; do xz -dc "$f" > "${f%.xz}"; chmod +x "${f%.xz}"; done)
L=.devbin/tp/ledger
mkdir -p bin && cp .devbin/tp/ledger-ref-adapter bin/
DB=/tmp/throughput.db
PIN=(--repository github.com/evidence-ledger/ledger --commit "$COMMIT" --tree "$TREE" --dirty=false)
export TORCH_LIB="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,pstate --format=csv
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
  python3 -c 'import torch, platform; print("python", platform.python_version(), "torch", torch.__version__, "git", torch.version.git_version, "cuda", torch.version.cuda)'
  nproc; sha256sum "$L" .devbin/tp/ledger-ref-adapter .devbin/tp/cuda.test "$TORCH_LIB/libtorch_cuda.so"
} > "$OUT/environment.txt" 2>&1
step() { echo "== $*" >> "$OUT/log.txt"; SECONDS=0; }
ended() { echo "exit $1 after ${SECONDS}s" >> "$OUT/log.txt"; }

# 0. The exactness lanes on the same kernels (every lane not on request: the bias-sum and paths
#    lanes with their narrow negative control, the allocator lanes): the timed build is exact.
step "default lanes on cuda"
timeout 150 "$L" --db "$DB" --json run --backend cuda "${PIN[@]}" > "$OUT/cuda-lanes.json" 2>> "$OUT/log.txt"; ended $?

# 1. The ledger's own CUDA kernel, corrected (promoted) vs original (narrow), interleaved, all
#    162 cases (2 s and 200 samples per arm at most; most converge within 1 % far sooner).
#    LANE_CASES (case globs, default all) and LANE_LIMIT (seconds, default 270) fit it to what is
#    left of a device session.
step "qmv-throughput/v1 on cuda, cases: ${LANE_CASES:-all}"
CASEFLAG=(); [ -n "${LANE_CASES:-}" ] && CASEFLAG=(--cases "$LANE_CASES")
timeout "${LANE_LIMIT:-270}" "$L" --db "$DB" --json run --backend cuda --lane qmv-throughput/v1 --case-budget 2s "${CASEFLAG[@]}" "${PIN[@]}" \
  > "$OUT/cuda-throughput.json" 2>> "$OUT/log.txt"; ended $?

# 2. PyTorch through the adapter protocol's timing frames: its int4 kernel (tinygemm; bf16 4-bit
#    cases) and dequantize + F.linear (cuBLAS) on the 4-bit cases of 4096² and 8192². INT4_CASES
#    and DEQUANT_CASES override the case globs (a first short call to check the steps work).
step "pytorch-int4pack-cuda"
timeout 40 "$L" --db "$DB" --json run --impl pytorch-int4pack-cuda --impls adapters/implementations.yaml \
  --lane qmv-throughput/v1 --cases "${INT4_CASES:-batch*/*/*/bf16/b4/*}" --case-budget 2s "${PIN[@]}" \
  > "$OUT/pytorch-int4pack-cuda-throughput.json" 2>> "$OUT/log.txt"; ended $?
step "pytorch-dequant-cuda"
timeout 50 "$L" --db "$DB" --json run --impl pytorch-dequant-cuda --impls adapters/implementations.yaml \
  --lane qmv-throughput/v1 --cases "${DEQUANT_CASES:-batch*/n4096/k4096/*/b4/*,batch*/n8192/k8192/*/b4/*}" --case-budget 2s "${PIN[@]}" \
  > "$OUT/pytorch-dequant-cuda-throughput.json" 2>> "$OUT/log.txt"; ended $?

# 3. Same session: tinygemm, torch.compile and cuBLAS in one process with CUDA graphs (M = 1, 2, 4;
#    QUICK_BASELINES=1: M = 1 only).
step "qmv-torch-baselines"
[ -z "${SKIP_BASELINES:-}" ] && PYTHONUNBUFFERED=1 timeout 120 python3 scripts/qmv-torch-baselines.py ${QUICK_BASELINES:+--quick} --out "$OUT/torch-baselines.json" \
  > "$OUT/torch-baselines.txt" 2>&1; ended $?

# 4. The backend's GPU tests: batched rows bit-exact with the CPU backend and single-vector QMV,
#    the timer's samples and its twice-launched control.
step "backends/cuda GPU tests"
timeout 50 .devbin/tp/cuda.test -test.v -test.count 1 -test.run 'Throughput|TestMatchesCPU|KernelDefaults' \
  > "$OUT/cuda-tests.txt" 2>&1; ended $?
# 5. The kernels side by side: the timer's median at 8192² and 16384² for B1/B2/B4 with each
#    kernel (nb 1: gridDim.y batching; nb 2, 4: multi-vector), the hot-loop QMV benchmark of the
#    corrected kernel, and the device-to-device copy rate the roofline is computed from.
step "backends/cuda benchmarks"
[ -z "${SKIP_BENCH:-}" ] && timeout 40 .devbin/tp/cuda.test -test.run '^$' -test.bench 'ThroughputQMV' -test.benchtime 1x \
  > "$OUT/cuda-bench.txt" 2>&1; ended $?
[ -z "${SKIP_BENCH:-}" ] && timeout 40 .devbin/tp/cuda.test -test.run '^$' -test.bench 'QMVDevice/(8192x8192|16384x16384)/new$|MemcpyDtoD' -test.benchtime 0.3s \
  >> "$OUT/cuda-bench.txt" 2>&1; ended $?
# 6. What limits the x4 kernel: ncu on two launches at 8192² B4. SKIP_BASELINES, SKIP_BENCH and
#    SKIP_NCU (set to 1) leave steps 3, 5 and 6 out when little device time is left.
step "ncu qmv_f16_b4_x4"
[ -z "${SKIP_NCU:-}" ] && timeout 60 ncu --clock-control none -k regex:qmv_f16_b4_x4 -c 2 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  .devbin/tp/cuda.test -test.run '^$' -test.bench 'ThroughputQMV/8192x8192/batch4/nb4' -test.benchtime 1x \
  > "$OUT/ncu-x4.txt" 2>&1; ended $?
"$L" --db "$DB" audit >> "$OUT/log.txt" 2>&1
cat "$OUT/log.txt"
# The device returns at most 8 files: everything also goes back as one archive.
tar -C "$OUT" -czf /tmp/throughput-run.tgz . && mv /tmp/throughput-run.tgz "$OUT/run.tgz"
