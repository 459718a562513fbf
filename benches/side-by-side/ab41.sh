#!/usr/bin/env bash
# usage: ab41.sh REPS BEFORE AFTER [N]  (#41 §3: two binaries of the harness,
# before and after a change, alternated, the order flipped each rep;
# raw(200) once per rep as the floor). Local store, default flush.
# Lines: `LABEL {RESULT json}`, summarized by summarize_ab5.py.
REPS=$1; A=$2; B=$3; N=${4:-2000}
run() { # label bin args...
  local label=$1 bin=$2; shift 2
  (cd /tmp && env SBS_FIRST_PHASE_ONLY=1 $bin child "$@" 2>&1 | grep -E "^RESULT" | sed "s/^RESULT /$label /")
}
for rep in $(seq 1 $REPS); do
  echo "# rep $rep $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  if (( rep % 2 )); then order="before after"; else order="after before"; fi
  for who in $order; do
    bin=$A; [ $who = after ] && bin=$B
    run "$who" $bin --engine gaffer --group jobs-keyed --store local --flush default --n $N --conc 16 --job-workers 16
    run "$who" $bin --engine gaffer --group bulk --store local --flush default --n $N --conc 16 --job-workers 16
  done
  run raw200 $A --engine raw --group raw --store local --flush default --n $N --conc 200 --job-workers 16
done
