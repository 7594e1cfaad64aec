#!/usr/bin/env bash
# bench-vs-tessera.sh (make bench-tessera): the ledger and Tessera v1.0.4
# side by side on this machine, interleaved. For each concurrency of
# CLIENTS and each of ROUNDS rounds (the order of the three sides
# alternating between rounds), on a fresh data directory each:
#   ledger      `ledger serve` on SQLite; entries are POST /api/v1/evidence
#               with a record token; an ack carries the leaf's inclusion
#               proof and a signed checkpoint;
#   tessera-seq bench/tessera's POSIX personality, ack on sequencing
#               (10 ms batches; the ack is the index only);
#   tessera-pub the same, ack once a published checkpoint (100 ms
#               interval) covers the entry (index and checkpoint);
# bench/tessera/cmd/bench-load drives it with C closed-loop clients
# sending distinct SIZE-byte entries (evidence records) for WARMUP, then
# DURATION measured, and reads the server's CPU time from /proc. Disk per
# entry is du -sb of the data directory (SQLite database with its WAL and
# the signing key and journal; Tessera's POSIX tree) at the end of the
# run, over the entries acknowledged in the whole run; for Tessera also
# without the partial tiles and bundles (*.p/) that its garbage
# collection removes once they are full (default period 1 min, past the
# end of a run). At the end, with the sqlite3 CLI, the last ledger
# database's bytes per table and index (dbstat).
#
# Prints one line per run and a summary per concurrency: acks/s (median,
# min-max), ratios ledger/tessera (median over rounds of the per-round
# ratio), server CPU per ack, latency p50/p99, disk per entry.
#
# Environment: CLIENTS (default "16 64 256"), ROUNDS (2), DURATION (30s),
# WARMUP (2s), SIZE (600 bytes), LEDGER_BIN (a prebuilt ledger; default:
# built from the working tree), BENCH_KEEP=1 keeps the work directory.
set -euo pipefail
CLIENTS=${CLIENTS:-"16 64 256"}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-30s}
WARMUP=${WARMUP:-2s}
SIZE=${SIZE:-600}
root=$(git rev-parse --show-toplevel)
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11}
work=$(mktemp -d /tmp/bench-vs-tessera.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$work/results"
echo "building (ledger from $root, bench/tessera with tessera v1.0.4)"
if [ -n "${LEDGER_BIN:-}" ]; then cp "$LEDGER_BIN" "$work/ledger"; else (cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/ledger" ./cmd/ledger); fi
(cd "$root/bench/tessera" && CGO_ENABLED=0 go build -trimpath -o "$work/tessera-posix" ./cmd/tessera-posix && CGO_ENABLED=0 go build -trimpath -o "$work/bench-load" ./cmd/bench-load)

# start SIDE DIR: starts the server of SIDE on DIR; sets pid, url, token.
start() {
  local side=$1 d=$2 pat
  mkdir -p "$d"
  # The server's redirections happen in the background child: the files
  # exist before it so that the first read below cannot miss them.
  : >"$d.out"; : >"$d.err"
  token=""
  case $side in
    ledger)
      token=$("$work/ledger" --db "$d/ledger.db" token create --name bench --scope record 2>/dev/null)
      "$work/ledger" --db "$d/ledger.db" serve --addr 127.0.0.1:0 >"$d.out" 2>"$d.err" &
      pat='s|^ledger: serving on \(http://[^/]*\)/$|\1|p' ;;
    tessera-seq|tessera-pub)
      "$work/tessera-posix" --dir "$d" --mode "$([ "$side" = tessera-seq ] && echo sequencing || echo publication)" --addr 127.0.0.1:0 >"$d.out" 2>"$d.err" &
      pat='s|^tessera-posix: serving on \(http://[^/]*\)/$|\1|p' ;;
  esac
  pid=$!
  url=""
  for _ in $(seq 1 400); do
    url=$(sed -n "$pat" "$d.out" 2>/dev/null || true)
    [ -n "$url" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  tail -20 "$d.err"; echo "BENCH FAIL: $side did not start"; exit 1
}

partial_bytes() { find "$1" -path '*.p/*' -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}'; }

last_ledger_db=""
for c in $CLIENTS; do
  for r in $(seq 1 "$ROUNDS"); do
    order="ledger tessera-seq tessera-pub"
    [ $((r % 2)) -eq 0 ] && order="tessera-pub tessera-seq ledger"
    for side in $order; do
      d="$work/data.$side.$c.$r"
      start "$side" "$d"
      out="$work/results/$side.$c.$r.json"
      set +e
      "$work/bench-load" --target "${side%%-*}" --server "$url" --token "$token" --clients "$c" \
        --duration "$DURATION" --warmup "$WARMUP" --size "$SIZE" --pid "$pid" >"$out"
      rc=$?
      set -e
      disk=$(du -sb "$d" | cut -f1)
      part=0; [ "$side" != ledger ] && part=$(partial_bytes "$d")
      kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
      disk_stopped=$(du -sb "$d" | cut -f1)
      python3 - "$out" "$side" "$r" "$disk" "$part" "$disk_stopped" <<'PY'
import json, sys
p, side, r, disk, part, stopped = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
j = json.load(open(p))
j.update(side=side, round=int(r), disk_bytes=disk, disk_partial_bytes=part, disk_bytes_stopped=stopped)
json.dump(j, open(p, "w"))
n = max(j["acks_total"], 1)
print("c=%-4s round %s %-12s %8.0f acks/s  p50 %7.1f ms  p99 %7.1f ms  cpu/ack %6.0f us  disk/entry %6.0f B (no partials %5.0f, stopped %5.0f)  errors %d  load %s"
      % (j["clients"], r, side, j["acks_per_s"], j["p50_ms"], j["p99_ms"], j["server_cpu_per_ack_us"],
         disk / n, (disk - part) / n, stopped / n, j["errors"], j["loadavg"]))
for e in j.get("first_errors") or []:
    print("    error:", e)
PY
      [ $rc -ne 0 ] && echo "  (bench-load exited $rc)"
      if [ "$side" = ledger ]; then
        [ -n "$last_ledger_db" ] && rm -rf "$(dirname "$last_ledger_db")"
        last_ledger_db="$d/ledger.db"
      else
        rm -rf "$d"
      fi
    done
  done
done

echo
echo "summary ($(nproc) cores, DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS SIZE=$SIZE, load average now $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$work/results" <<'PY'
import json, os, statistics as st, sys
runs = [json.load(open(os.path.join(sys.argv[1], f))) for f in sorted(os.listdir(sys.argv[1]))]
by = {}
for j in runs:
    by.setdefault((j["clients"], j["side"]), []).append(j)
def rng(v, fmt="%.0f"):
    return (fmt % st.median(v)) + " (" + (fmt % min(v)) + "-" + (fmt % max(v)) + ")"
sides = ["ledger", "tessera-seq", "tessera-pub"]
print("| clients | side | acks/s median (min-max) | CPU/ack us | p50 ms | p99 ms | disk/entry B (running) | B, no partials | B, stopped | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")
for c in sorted({k[0] for k in by}):
    for s in sides:
        js = by.get((c, s), [])
        if not js:
            continue
        n = lambda j: max(j["acks_total"], 1)
        print("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (c, s,
              rng([j["acks_per_s"] for j in js]), rng([j["server_cpu_per_ack_us"] for j in js]),
              rng([j["p50_ms"] for j in js], "%.1f"), rng([j["p99_ms"] for j in js], "%.1f"),
              rng([j["disk_bytes"] / n(j) for j in js]),
              rng([(j["disk_bytes"] - j["disk_partial_bytes"]) / n(j) for j in js]),
              rng([j["disk_bytes_stopped"] / n(j) for j in js]),
              sum(j["errors"] for j in js)))
print()
# Disk at steady state: the ledger's after shutdown (the WAL checkpointed
# into the database), Tessera's without the partial tiles and bundles.
for j in runs:
    n = max(j["acks_total"], 1)
    j["steady_per_entry"] = (j["disk_bytes_stopped"] if j["side"] == "ledger" else j["disk_bytes"] - j["disk_partial_bytes"]) / n
print("| clients | ledger/tessera-seq acks/s | ledger/tessera-pub acks/s | CPU/ack ledger/tessera-seq | CPU/ack ledger/tessera-pub | disk/entry ledger/tessera-seq (steady) |")
print("|---|---|---|---|---|---|")
for c in sorted({k[0] for k in by}):
    led = {j["round"]: j for j in by.get((c, "ledger"), [])}
    cols = []
    for key, others in (("acks_per_s", ("tessera-seq", "tessera-pub")), ("server_cpu_per_ack_us", ("tessera-seq", "tessera-pub")), ("steady_per_entry", ("tessera-seq",))):
        for s in others:
            oth = {j["round"]: j for j in by.get((c, s), [])}
            rs = [led[r][key] / oth[r][key] for r in led if r in oth and oth[r][key] > 0]
            cols.append(rng(rs, "%.2f") + "x" if rs else "-")
    print("| %d | %s |" % (c, " | ".join(cols)))
PY

if [ -n "$last_ledger_db" ] && command -v sqlite3 >/dev/null; then
  echo
  echo "ledger database of the last ledger run, bytes per table and index (sqlite3 dbstat; after shutdown):"
  leaves=$(sqlite3 "$last_ledger_db" 'SELECT count(*) FROM leaves' 2>/dev/null || echo 0)
  echo "leaves: $leaves; file $(stat -c %s "$last_ledger_db") B; page size $(sqlite3 "$last_ledger_db" 'PRAGMA page_size')"
  sqlite3 -header -column "$last_ledger_db" "SELECT name, count(*) AS pages, sum(pgsize) AS bytes, sum(payload) AS payload, sum(unused) AS unused, sum(ncell) AS cells, round(1.0*sum(pgsize)/max($leaves,1),1) AS bytes_per_leaf FROM dbstat GROUP BY name HAVING count(*) > 1 ORDER BY bytes DESC"
  sqlite3 "$last_ledger_db" "SELECT count(*) || ' more objects of one page each: ' || sum(b) || ' B' FROM (SELECT sum(pgsize) AS b FROM dbstat GROUP BY name HAVING count(*) = 1)"
fi
