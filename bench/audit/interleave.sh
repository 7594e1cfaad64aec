#!/usr/bin/env bash
# interleave.sh OLD NEW DB [ROUNDS]: `ledger audit` of the database DB by
# the binaries OLD and NEW, interleaved (OLD NEW, OLD NEW, ...; ROUNDS
# rounds, default 4), one line per run: wall seconds, user and system CPU
# seconds, peak RSS, the 1-minute load average before the run and the
# audit's verdict. The key is ledger.pub beside DB.
set -euo pipefail
old=$1 new=$2 db=$3 rounds=${4:-4}
t=$(mktemp); trap 'rm -f "$t"' EXIT
for r in $(seq 1 "$rounds"); do
  for b in old new; do
    bin=$old; [ "$b" = new ] && bin=$new
    load=$(cut -d' ' -f1 /proc/loadavg)
    verdict=$(/usr/bin/time -o "$t" -f "%e %U %S %M" "$bin" --db "$db" audit 2>/dev/null | cut -c1-12 || true)
    read -r wall user sys rss <"$t"
    printf '%d %s wall=%s user=%s sys=%s cpu=%.2f rss_kb=%s load1=%s verdict="%s"\n' \
      "$r" "$b" "$wall" "$user" "$sys" "$(awk "BEGIN{print $user + $sys}")" "$rss" "$load" "$verdict"
  done
done
