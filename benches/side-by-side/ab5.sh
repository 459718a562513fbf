#!/usr/bin/env bash
# usage: ab5.sh REPS BIN ; one binary, the #13 §5 upper-bound hack off (stock) and on
# (GAFFER_HACK_NORUN=1: no run record), alternating (order flips per rep); raw(200) once per rep
REPS=$1; B=$2
run() { # label env args...
  local label=$1 e=$2; shift 2
  (cd /tmp && env $e $B child "$@" 2>&1 | grep -E "^RESULT" | sed "s/^RESULT /$label /")
}
for rep in $(seq 1 $REPS); do
  echo "# rep $rep $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  if (( rep % 2 )); then order="stock norun"; else order="norun stock"; fi
  for f in default 1ms; do
    n=2000; [ $f = 1ms ] && n=10000
    for who in $order; do
      e=X=1; [ $who = norun ] && e=GAFFER_HACK_NORUN=1
      run "$who" $e --engine gaffer --group jobs-keyed --store local --flush $f --n $n --conc 16 --job-workers 16
    done
    run raw200 X=1 --engine raw --group raw --store local --flush $f --n $n --conc 200 --job-workers 16
  done
done
