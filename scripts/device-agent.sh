#!/usr/bin/env bash
# device-agent.sh: on one host, start `ledger serve` and one `ledger agent`
# on BACKEND (default cuda), queue a run of the lanes through the API
# (POST /api/v1/runs with a run token), wait for it, and write what
# happened under $OUT:
#   serve.log       the server's output
#   agent.log       the agent's output
#   run.json        the run as GET /api/v1/runs/{id} answers it at the end
#   evidence.json   the evidence records the run produced (GET /api/v1/evidence/{id} each)
#   approve.txt     what `ledger agent approve --key-id --spec` approved
#   agents.json     GET /api/v1/agents (spec, health, last heartbeat)
#   audit.txt       `ledger audit` of the server's database afterwards
#   command.txt     this command line, the binary's digest and the environment it ran with
# Exit status: 0 when the run is done (every lane passed), 1 otherwise.
#
# Usage (on the GPU host, from the repository root, after `make device-bin`):
#   OUT=/path BACKEND=cuda scripts/device-agent.sh
# On a CPU machine, to check the script: OUT=/tmp/o BACKEND=cpu BIN=./bin/ledger scripts/device-agent.sh
#
# BIN (default .devbin/ledger) is the ledger binary; LANES (default: all
# four) the lanes, space-separated; LABELS agent labels (default
# "host=<hostname>"), the run requires the same; TIMEOUT_S the wait (default
# 900). COMMIT, TREE and REPOSITORY describe the build when the host has a
# copy of the tree without .git (as the device machine has): they are given
# to the agent as --commit/--tree/--repository with --dirty=false, so give
# them only for a committed, clean checkout.
set -euo pipefail

: "${OUT:?set OUT to the directory for the results}"
BACKEND=${BACKEND:-cuda}
BIN=${BIN:-.devbin/ledger}
LANES=${LANES:-qmv-bias-sum/v1 qmv-bias-sum-paths/v1 alloc-snapshot/v1 alloc-footprint/v1}
LABELS=${LABELS:-host=$(hostname | tr -cd 'a-z0-9.-' | cut -c1-60)}
TIMEOUT_S=${TIMEOUT_S:-900}
LEASE_TTL=${LEASE_TTL:-30s}

mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "device-agent: no ledger binary at $BIN (make device-bin)" >&2; exit 2; }
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
W=$(mktemp -d)
DB=$W/ledger.db
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

{
	echo "command: OUT=$OUT BACKEND=$BACKEND BIN=$BIN LANES='$LANES' LABELS='$LABELS' $0"
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "host: $(hostname)"
	echo "binary sha256: $(sha256sum "$BIN" | cut -d' ' -f1)"
	echo "commit: ${COMMIT:-from build info} tree: ${TREE:-from git} repository: ${REPOSITORY:-default}"
	command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
} > "$OUT/command.txt"

tok() { "$BIN" --db "$DB" token create --name "$1" --scope "$2" 2>/dev/null; }
ADMIN=$(tok admin admin)
RUN=$(tok release run)
REC=$(tok agent record)
"$BIN" runner keygen "$W/agent.key" >/dev/null 2>&1

"$BIN" --db "$DB" serve --addr 127.0.0.1:0 --lease-ttl "$LEASE_TTL" > "$OUT/serve.log" 2>&1 &
pids+=($!)
URL=""
for _ in $(seq 1 200); do
	URL=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$OUT/serve.log" | head -1)
	[ -n "$URL" ] && break
	sleep 0.1
done
[ -n "$URL" ] || { echo "device-agent: the server did not start; see $OUT/serve.log" >&2; exit 2; }

NAME=$(echo "${BACKEND}-$(hostname)" | tr 'A-Z' 'a-z' | tr -cd 'a-z0-9.-' | cut -c1-60)
agent_args=(--server "$URL" --token "$REC" agent --name "$NAME" --key "$W/agent.key" --backend "$BACKEND" --poll-wait 5s)
for l in $LABELS; do agent_args+=(--label "$l"); done
for l in $LANES; do agent_args+=(--lane "$l"); done
if [ -n "${COMMIT:-}" ]; then agent_args+=(--commit "$COMMIT" --dirty=false); fi
if [ -n "${TREE:-}" ]; then agent_args+=(--tree "$TREE"); fi
if [ -n "${REPOSITORY:-}" ]; then agent_args+=(--repository "$REPOSITORY"); fi
"$BIN" "${agent_args[@]}" > "$OUT/agent.log" 2>&1 &
pids+=($!)

api() { curl -fsS -H "Authorization: Bearer $1" "${@:2}"; }
for _ in $(seq 1 300); do
	api "$ADMIN" "$URL/api/v1/agents" | grep -q "\"name\": \"$NAME\"" && break
	sleep 0.2
done
# Approve the registration this script saw, and only that one (its key id
# and spec digest, as an admin would from `ledger agent list`).
reg=$(api "$ADMIN" "$URL/api/v1/agents" | tr -d '\n ')
KEY_ID=$(echo "$reg" | grep -o '"key_id":"SHA256:[A-Za-z0-9+/]*"' | head -1 | cut -d'"' -f4)
SPEC=$(echo "$reg" | grep -o '"spec_digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4)
"$BIN" --server "$URL" --token "$ADMIN" agent approve "$NAME" --key-id "$KEY_ID" --spec "$SPEC" > "$OUT/approve.txt" 2>&1

lanes_json=$(printf '"%s",' $LANES); lanes_json="[${lanes_json%,}]"
labels_json=""
for l in $LABELS; do labels_json+="\"${l%%=*}\":\"${l#*=}\","; done
labels_json="{${labels_json%,}}"
ID=$(api "$RUN" -X POST -H 'Content-Type: application/json' \
	-d "{\"lanes\":$lanes_json,\"backend\":\"$BACKEND\",\"labels\":$labels_json}" "$URL/api/v1/runs" |
	sed -n 's/.*"id": "\(run_[0-9a-f]*\)".*/\1/p' | head -1)
[ -n "$ID" ] || { echo "device-agent: the run was not queued" >&2; exit 2; }
echo "queued $ID on $URL" >&2

state=queued
for _ in $(seq 1 "$((TIMEOUT_S * 2))"); do
	state=$(api "$ADMIN" "$URL/api/v1/runs/$ID" | sed -n 's/^    "state": "\([a-z]*\)".*/\1/p' | head -1)
	case "$state" in done|failed|canceled|expired) break ;; esac
	sleep 0.5
done
api "$ADMIN" "$URL/api/v1/runs/$ID" > "$OUT/run.json"
api "$ADMIN" "$URL/api/v1/agents" > "$OUT/agents.json"
{
	echo "["
	first=1
	for ev in $(sed -n '/"evidence": \[/,/\]/p' "$OUT/run.json" | grep -o '[0-9a-f]\{32\}'); do
		[ $first = 1 ] || echo ","
		first=0
		api "$ADMIN" "$URL/api/v1/evidence/$ev"
	done
	echo "]"
} > "$OUT/evidence.json"
cleanup
pids=()
"$BIN" --db "$DB" audit > "$OUT/audit.txt" 2>&1 || true
echo "run $ID: $state" | tee -a "$OUT/command.txt" >&2
[ "$state" = done ]
