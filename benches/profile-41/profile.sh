#!/usr/bin/env bash
# usage: profile.sh BIN OUTDIR [N] : perf record (cpu-clock, dwarf unwinding) of
# jobs_keyed, bulk_items and raw(200), local store, default flush; the
# collapsed stacks (inferno-collapse-perf) and an SVG each (inferno-flamegraph).
set -e
BIN=$1; OUT=$2; N=${3:-20000}
mkdir -p "$OUT"
prof() { # name args...
  local name=$1; shift
  (cd /tmp && SBS_FIRST_PHASE_ONLY=1 perf record -F 499 -e cpu-clock --call-graph dwarf,32768 \
     -o "$OUT/$name.data" -- "$BIN" child "$@" 2>/dev/null | grep '^RESULT' > "$OUT/$name.result")
  perf script --no-inline -i "$OUT/$name.data" 2>/dev/null | inferno-collapse-perf --all > "$OUT/$name.txt"
  inferno-flamegraph --title "$name (#41 §3)" < "$OUT/$name.txt" > "$OUT/$name.svg"
}
prof jobs_keyed --engine gaffer --group jobs-keyed --store local --flush default --n $N --conc 16 --job-workers 16
prof bulk_items --engine gaffer --group bulk --store local --flush default --n $N --conc 16 --job-workers 16
prof raw200 --engine raw --group raw --store local --flush default --n $N --conc 200 --job-workers 16
