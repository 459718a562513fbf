#!/usr/bin/env python3
"""Summarize telemetry_reps.py rows (benches/README.md, "Telemetry at the
recommended filter (#30 §4)").

    telemetry_summary.py ROWS

For each configuration (label) and workload: the reps paired (the run with
telemetry over the run without, within one rep), the median of that
throughput ratio with a bootstrap 90 % interval of the median (2 000
resamples, seeded), the median ratio of CPU per 1 000 items, the medians of
items/s each way, and the 1-minute load average over the rows (median,
range). Rows whose `ok` is not True are left out and counted.
"""
import random
import statistics
import sys
from collections import defaultdict


def parse(path):
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) < 7 or f[1] not in ('none', 'tel'):
            continue
        extra = dict(x.split('=', 1) for x in f[7:] if '=' in x)
        rows.append({
            'label': f[0], 'mode': f[1], 'rep': int(f[2]), 'workload': f[3],
            'items': float(f[4]), 'cpu': float(f[5]), 'ok': f[6] == 'True',
            'load': float(extra['load'].split(',')[0]) if 'load' in extra else None,
        })
    return rows


def boot(v, n=2000, seed=30):
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(v, k=len(v))) for _ in range(n))
    return meds[int(0.05 * n)], meds[int(0.95 * n) - 1]


def main():
    rows = parse(sys.argv[1])
    by = defaultdict(dict)
    bad = defaultdict(int)
    loads = defaultdict(list)
    order = []
    for r in rows:
        key = (r['label'], r['workload'])
        if key not in order:
            order.append(key)
        if not r['ok']:
            bad[key] += 1
            continue
        by[key][(r['rep'], r['mode'])] = r
        if r['load'] is not None:
            loads[key].append(r['load'])
    print('| config | workload | reps | tel ÷ none (median) | 90 % interval | overhead | CPU/1k ratio | items/s none | items/s tel | load 1 min (median, range) | failed rows |')
    print('|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|')
    for key in order:
        d = by[key]
        reps = sorted({rep for rep, _ in d})
        pairs = [(d[(rep, 'tel')], d[(rep, 'none')]) for rep in reps
                 if (rep, 'tel') in d and (rep, 'none') in d]
        if not pairs:
            continue
        ratios = [t['items'] / n['items'] for t, n in pairs]
        cpu = [t['cpu'] / n['cpu'] for t, n in pairs]
        med = statistics.median(ratios)
        lo, hi = boot(ratios)
        ld = loads[key]
        print(f"| {key[0]} | {key[1]} | {len(pairs)} | {med:.3f} | {lo:.3f}–{hi:.3f} | "
              f"{(1 - med) * 100:.1f} % | {statistics.median(cpu):.3f} | "
              f"{statistics.median(n['items'] for _, n in pairs):.0f} | "
              f"{statistics.median(t['items'] for t, _ in pairs):.0f} | "
              f"{statistics.median(ld):.2f} ({min(ld):.2f}–{max(ld):.2f}) | {bad[key]} |")


if __name__ == '__main__':
    main()
