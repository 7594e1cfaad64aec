#!/usr/bin/env bash
# bench-vs-base.sh BASE_COMMIT [ROUNDS]: interleaved benchmark runs of the
# working tree ("new") against BASE_COMMIT ("old").
#
# Both sides are built once as test binaries (go test -c) of web,
# ledger/sqlite and gates; then every round runs each benchmark below with a
# fixed op count in both binaries, old first in odd rounds and new first in
# even ones, and records wall time per op (the benchmark's ns/op) and the
# process's CPU time (user+sys, /usr/bin/time). The table at the end gives,
# per benchmark, the median over rounds of new/old for both: a time ratio
# above 1 is slower, so issue 13's "no figure worse than 5 %" means every
# ratio <= 1.05. On a machine shared with other work the CPU ratio is the
# steadier of the two (wall time includes waiting for the CPU).
#
# Each binary gets its own TMPDIR holding a copy of the cached 1,000,000
# record databases (gates-bench-v1*, ledger-bench-*-1000000; both named by
# schema version since schema 9) when they exist
# under $BENCH_CACHE (default /tmp), so neither side migrates or reads the
# other's schema; when they do not exist the first run of each side fills
# its own (minutes).
#
# Environment: ROUNDS (default 4), BENCH_WORK (work directory, default a new
# one under /tmp, kept so results.tsv and the logs can be read afterwards),
# BENCH_CACHE, BENCH_ONLY (a regular expression over the names below to run
# a subset, e.g. BENCH_ONLY=HTTP).
set -euo pipefail

base=${1:?usage: scripts/bench-vs-base.sh BASE_COMMIT [ROUNDS]}
rounds=${2:-${ROUNDS:-4}}
only=${BENCH_ONLY:-.}
cache=${BENCH_CACHE:-/tmp}
root=$(git rev-parse --show-toplevel)
work=${BENCH_WORK:-$(mktemp -d /tmp/bench-vs-base.XXXXXX)}
mkdir -p "$work"
command -v /usr/bin/time >/dev/null || { echo "bench-vs-base: /usr/bin/time is needed for process CPU time" >&2; exit 2; }

# name | package | -test.bench pattern | -test.benchtime
benches='HTTPAppendConcurrent16|web|^BenchmarkHTTPAppendConcurrent16$|4000x
HTTPAppendBatch100/clients=1|web|^BenchmarkHTTPAppendBatch100$/^clients=1$|200x
HTTPAppendBatch100/clients=4|web|^BenchmarkHTTPAppendBatch100$/^clients=4$|200x
BatchedAppend|ledger/sqlite|^BenchmarkBatchedAppend$|2000x
InclusionProof1M|ledger/sqlite|^BenchmarkInclusionProof1M$|20000x
Audit1M|ledger/sqlite|^BenchmarkAudit1M$|1x
Readiness|gates|^BenchmarkReadiness$|40x
ReadinessSigned|gates|^BenchmarkReadinessSigned$|40x'

echo "bench-vs-base: old=$base new=$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+dirty') rounds=$rounds work=$work"
if [ ! -d "$work/src-old" ]; then
	mkdir -p "$work/src-old"
	git -C "$root" archive "$base" | tar -x -C "$work/src-old"
fi
for pkg in web ledger/sqlite gates; do
	name=${pkg//\//-}
	[ -x "$work/old-$name.test" ] || (cd "$work/src-old" && go test -c -o "$work/old-$name.test" "./$pkg")
	(cd "$root" && go test -c -o "$work/new-$name.test" "./$pkg")
done
for v in old new; do mkdir -p "$work/tmp-$v"; done
# dbcopy v pkg: the cached database of pkg's benchmarks into v's TMPDIR.
dbcopy() {
	local db pat
	case $2 in
	gates) pat='gates-bench-v1*' ;;
	# Named by schema version (ledger-bench-s9-...) or, before that, v8:
	# each side's benchmark picks the one of its own schema.
	ledger/sqlite) pat='ledger-bench-*-1000000' ;;
	*) return 0 ;;
	esac
	for db in "$cache"/$pat; do
		db=${db##*/}
		if [ -d "$cache/$db" ] && [ ! -d "$work/tmp-$1/$db" ]; then
			cp -a --reflink=auto "$cache/$db" "$work/tmp-$1/$db"
		fi
	done
}

results=$work/results.tsv
: >"$results"
run1() { # variant name pkg pattern benchtime round
	local v=$1 name=$2 pkg=${3//\//-} pat=$4 bt=$5 r=$6 log
	dbcopy "$v" "$3"
	log="$work/log-$v-${name//\//-}-$r.txt"
	(cd "$work/tmp-$v" && TMPDIR="$work/tmp-$v" /usr/bin/time -f '%U %S %e' -o "$work/time" \
		"$work/$v-$pkg.test" -test.run '^$' -test.bench "$pat" -test.benchtime "$bt" -test.count 1 >"$log" 2>&1) ||
		{ echo "bench-vs-base: $v $name failed (log: $log)" >&2; tail -20 "$log" >&2; exit 1; }
	local ns cpu
	ns=$(awk '/ns\/op/ { for (i = 2; i <= NF; i++) if ($i == "ns/op") print $(i-1) }' "$log" | tail -1)
	[ -n "$ns" ] || { echo "bench-vs-base: no ns/op in $log" >&2; exit 1; }
	cpu=$(awk '{ print $1 + $2 }' "$work/time")
	printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$r" "$v" "$ns" "$cpu" >>"$results"
	printf '  round %d %-30s %s %14s ns/op  cpu %6.2f s\n' "$r" "$name" "$v" "$ns" "$cpu"
}
for r in $(seq 1 "$rounds"); do
	echo "round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
	while IFS='|' read -r name pkg pat bt; do
		[[ $name =~ $only ]] || continue
		for v in $order; do run1 "$v" "$name" "$pkg" "$pat" "$bt" "$r"; done
	done <<<"$benches"
done

echo
echo "median over $rounds interleaved rounds (new/old; above 1 is slower or more CPU)"
printf '%-30s %12s %12s %10s %10s %s\n' benchmark "old ns/op" "new ns/op" "time" "cpu" "time ratios per round"
awk -F'\t' -v R="$rounds" '
	{ k = $1 SUBSEP $2; if ($3 == "old") { ons[k] = $4; ocpu[k] = $5 } else { nns[k] = $4; ncpu[k] = $5 }
	  if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
	function median(a, m,   i, j, t) { for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	  return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2 }
	END {
	  for (b = 1; b <= n; b++) { name = order[b]; m = 0; list = ""
	    for (r = 1; r <= R; r++) { k = name SUBSEP r; if (!(k in ons) || !(k in nns)) continue
	      m++; tr[m] = nns[k] / ons[k]; cr[m] = ncpu[k] / ocpu[k]; o[m] = ons[k]; nw[m] = nns[k]; list = list sprintf(" %.2f", tr[m]) }
	    if (m == 0) continue
	    printf "%-30s %12.0f %12.0f %10.3f %10.3f%s\n", name, median(o, m), median(nw, m), median(tr, m), median(cr, m), list }
	}' "$results"
echo "(raw figures: $results)"
