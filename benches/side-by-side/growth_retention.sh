#!/usr/bin/env bash
# #13 §4: keyed cost as the store grows, joining as it goes (SBS_JOIN_EACH),
# with and without retention (SBS_RETENTION_MS). One child per row; every
# 10 s the child's CPU (utime+stime from /proc) and jobs done are sampled,
# so the CPU per 1 000 jobs of each interval shows how the cost moves.
# Usage: growth_retention.sh BIN OUT_DIR "N:RETENTION_MS ..." (RETENTION_MS 0 = keep forever;
# RETENTION_MS "raw" = the raw queue instead, joining each job the same way;
# "rawkeyed" = the raw queue committing each job as a keyed gaffer submission does)
set -u
bin=$1; out=$2; rows=$3
mkdir -p "$out"
tck=$(getconf CLK_TCK)
i=0
for row in $rows; do
  i=$((i+1))
  n=${row%%:*}; ret=${row##*:}
  f="$out/$(printf %02d $i)-n$n-ret$ret.txt"
  env=(SBS_FIRST_PHASE_ONLY=1 SBS_JOIN_EACH=1)
  engine=(--engine gaffer --group jobs-keyed)
  if [ "$ret" = raw ]; then engine=(--engine raw --group raw)
  elif [ "$ret" = rawkeyed ]; then engine=(--engine raw --group raw); env+=(SBS_RAW_KEYED=1)
  elif [ "$ret" != 0 ]; then env+=(SBS_RETENTION_MS=$ret); fi
  echo "# n=$n retention_ms=$ret start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$f"
  env "${env[@]}" "$bin" child "${engine[@]}" --store local --flush 1ms \
    --n "$n" --conc 16 --job-workers 16 > "$f.child" 2>&1 &
  pid=$!
  last_cpu=0; last_done=0
  while kill -0 $pid 2>/dev/null; do
    sleep 10
    [ -r /proc/$pid/stat ] || break
    read -r ut st < <(awk '{print $14, $15}' /proc/$pid/stat)
    cpu=$(( (ut + st) ))
    done_=$(grep -E '^PROGRESS (jobs_keyed|raw_queue) ' "$f.child" | tail -1 | awk '{print $3}')
    rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status 2>/dev/null)
    done_=${done_:-0}
    d=$(( done_ - last_done )); c=$(( cpu - last_cpu ))
    per=$( [ "$d" -gt 0 ] && echo "scale=3; $c / $tck * 1000 / $d" | bc || echo -)
    echo "t+10s done=$done_ rate=$((d/10))/s cpu_s_per_1k=$per rss_kib=${rss:-?}" >> "$f"
    last_cpu=$cpu; last_done=$done_
  done
  wait $pid
  grep '^RESULT' "$f.child" >> "$f"
  echo "# end $(date -u +%FT%TZ)" >> "$f"
done
