#!/usr/bin/env bash
# Interleaved old/new comparison of the write path (bench/write/RESULTS.md):
# ROUNDS rounds of, for each binary in turn, bench/write/cpu.sh at 64 and
# 256 writers (server CPU per ack) and scripts/load.sh (writes mixed /
# alone). OLD and NEW are `ledger` binaries; LOADBIN the ledger-load
# client both are driven with. Prints one line per run.
#   OLD=/tmp/old-ledger NEW=/tmp/new-ledger LOADBIN=/tmp/ledger-load bench/write/compare.sh
set -euo pipefail
ROUNDS=${ROUNDS:-4}
CPU_FOR=${CPU_FOR:-10s}
for r in $(seq 1 "$ROUNDS"); do
  for w in 64 256; do
    for tag in old new; do
      bin=$OLD; [ $tag = new ] && bin=$NEW
      echo "round=$r bin=$tag cpu $(LEDGER_BIN=$bin LEDGER_LOAD_BIN=$LOADBIN bench/write/cpu.sh $w "$CPU_FOR")"
    done
  done
  for tag in old new; do
    bin=$OLD; [ $tag = new ] && bin=$NEW
    out=$(LEDGER_BIN=$bin LEDGER_LOAD_BIN=$LOADBIN LOAD_ALONE=${LOAD_ALONE:-10s} LOAD_DURATION=${LOAD_DURATION:-15s} scripts/load.sh 2>&1)
    echo "round=$r bin=$tag load $(python3 -c '
import json, sys
t = sys.stdin.read(); r = json.loads(t[t.find("{"):t.rfind("}") + 1])
la = [l.split(":")[-1].strip() for l in t.splitlines() if "load average" in l]
rt = r["routes"]
print("alone=%.0f mixed=%.0f ratio=%.3f errors=%d" % (r["writes_alone_per_s"], r["writes_mixed_per_s"], r["write_ratio"], r["errors"]),
      " ".join("%s_p99=%.0f" % (k.split(" ")[1].replace("/api/v1", ""), v["p99_ms"]) for k, v in sorted(rt.items())),
      "loadavg=" + "/".join(la[0].split()) + "->" + "/".join(la[1].split()))
' <<<"$out")"
  done
done
