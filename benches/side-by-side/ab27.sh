#!/usr/bin/env bash
# usage: ab27.sh PAIRS BEFORE_BIN AFTER_BIN
# Issue #27's paired benchmark: the gaffer child of two builds of this
# harness (before: `--features pre-27-api` against the engine at ca81425;
# after: against this tree), alternating, the pair's order flipped each
# pair; jobs-keyed and bulk(16), local disk, 1 ms flush, N 10 000, 16
# workers. One line per child: "who {RESULT json}"; summarize with
# summarize_ab27.py.
PAIRS=$1; BEFORE=$2; AFTER=$3
run() { # who bin group
  (cd /tmp && "$2" child --engine gaffer --group "$3" --store local --flush 1ms \
     --n 10000 --conc 16 --job-workers 16 2>&1 | grep -E "^(RESULT|ERROR)" | sed "s/^RESULT /$1 /")
}
for pair in $(seq 1 "$PAIRS"); do
  echo "# pair $pair $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  if (( pair % 2 )); then order="before after"; else order="after before"; fi
  for group in jobs-keyed bulk; do
    for who in $order; do
      bin=$BEFORE; [ "$who" = after ] && bin=$AFTER
      run "$who" "$bin" "$group" | sed "s/^/$pair /"
    done
  done
done
