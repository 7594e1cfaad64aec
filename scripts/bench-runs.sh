#!/usr/bin/env bash
# bench-runs.sh: a run through the service (ledger run --remote: queue,
# an agent on this host takes the lease, runs the lanes, posts signed
# evidence; the CLI follows until done) against `ledger run` of the same
# CPU lanes recording into a local database, interleaved N times (default
# 5), then the lease-expiry detection time after kill -9 of an agent
# mid-run. Prints one line per measurement and a summary. BIN (default
# ./bin/ledger) is the binary; LEASE_TTL (default 2s) the server's lease.
set -euo pipefail
BIN=${BIN:-./bin/ledger}
N=${N:-5}
LEASE_TTL=${LEASE_TTL:-2s}
LANES=(qmv-bias-sum/v1 qmv-bias-sum-paths/v1 alloc-snapshot/v1 alloc-footprint/v1)
SUBJ=(--commit 0123456789012345678901234567890123456789 --tree 0123456789012345678901234567890123456789 --repository github.com/evidence-ledger/ledger --dirty=false)
W=$(mktemp -d)
pids=()
# KEEP=DIR keeps the server's and the agent's logs there.
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$W"/*.log "$KEEP"/; rm -rf "$W"' EXIT
lane_args=(); for l in "${LANES[@]}"; do lane_args+=(--lane "$l"); done

mkdir -p "$W/s"; DB=$W/s/s.db
ADMIN=$("$BIN" --db "$DB" token create --name admin --scope admin 2>/dev/null)
RUN=$("$BIN" --db "$DB" token create --name rel --scope run 2>/dev/null)
REC=$("$BIN" --db "$DB" token create --name ag --scope record 2>/dev/null)
"$BIN" runner keygen "$W/a.key" >/dev/null 2>&1
"$BIN" runner keygen "$W/b.key" >/dev/null 2>&1
"$BIN" --db "$DB" serve --addr 127.0.0.1:0 --lease-ttl "$LEASE_TTL" > "$W/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do URL=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$W/serve.log" | head -1); [ -n "$URL" ] && break; sleep 0.1; done
agent() { "$BIN" --server "$URL" --token "$REC" agent --name "$1" --key "$2" --backend cpu --poll-wait 5s "${SUBJ[@]}" > "$W/$1.log" 2>&1 & pids+=($!); }
agent bench-a "$W/a.key"
# The approval needs the agent's registration: retried until it is there.
for _ in $(seq 1 200); do "$BIN" --server "$URL" --token "$ADMIN" agent approve bench-a > /dev/null 2>&1 && break; sleep 0.1; done
# One untimed run first: the agent, refused until the approval, polls
# again only after its back-off (up to 2 s), which is start-up, not a run.
"$BIN" --server "$URL" --token "$RUN" run --remote --backend cpu --lane alloc-footprint/v1 > /dev/null 2>&1

now() { date +%s.%N; }
local_sum=0; remote_sum=0
for i in $(seq 1 "$N"); do
	t0=$(now); mkdir -p "$W/l$i"; "$BIN" --db "$W/l$i/l.db" run --backend cpu "${lane_args[@]}" "${SUBJ[@]}" > /dev/null 2>&1; t1=$(now)
	"$BIN" --server "$URL" --token "$RUN" run --remote --backend cpu "${lane_args[@]}" > /dev/null 2>&1; t2=$(now)
	l=$(echo "$t1 - $t0" | bc); r=$(echo "$t2 - $t1" | bc)
	echo "pair $i: ledger run ${l}s, through the service ${r}s, ratio $(echo "scale=3; $r / $l" | bc)"
	local_sum=$(echo "$local_sum + $l" | bc); remote_sum=$(echo "$remote_sum + $r" | bc)
done
echo "total: ledger run ${local_sum}s, through the service ${remote_sum}s, ratio $(echo "scale=3; $remote_sum / $local_sum" | bc)"

# Lease expiry: kill -9 the agent while it runs the slow lane; time until
# the run is queued again as attempt 2.
ID=$(curl -fsS -H "Authorization: Bearer $RUN" -H 'Content-Type: application/json' -X POST \
	-d '{"lanes":["qmv-bias-sum-paths/v1"],"backend":"cpu"}' "$URL/api/v1/runs" | sed -n 's/.*"id": "\(run_[0-9a-f]*\)".*/\1/p' | head -1)
st() { curl -fsS "$URL/api/v1/runs/$ID" | sed -n 's/^    "state": "\([a-z]*\)".*/\1/p' | head -1; }
# The state shows running at the agent's first heartbeat (a third of the
# lease); a lane that ends before it leaves nothing to kill.
until s=$(st); [ "$s" = running ] || [ "$s" = done ] || [ "$s" = failed ]; do sleep 0.05; done
if [ "$s" = running ]; then
	kill -9 "${pids[1]}"; tk=$(now)
	until [ "$(st)" = queued ]; do sleep 0.02; done
	echo "lease expiry detected $(echo "$(now) - $tk" | bc)s after kill -9 (lease ttl $LEASE_TTL, sweep ttl/4)"
else
	echo "lease expiry not measured: the run was $s before a heartbeat showed it running"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
