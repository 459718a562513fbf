"""Summarize ab27.sh output files: per workload, the medians of each build
(items/s, CPU s, peak RSS MiB), the per-pair ratio after ÷ before (median,
quartiles, min–max, pairs faster) and a bootstrap 90 % interval of the
median ratio. Usage: python3 summarize_ab27.py FILE... ; in a file of
several sessions (`## session NAME` lines), SESSIONS=s1,s2 keeps those."""
import collections, json, os, random, statistics as st, sys

keep = set(filter(None, os.environ.get('SESSIONS', '').split(',')))

runs = collections.defaultdict(dict)  # (file, pair, workload) -> who -> result
for f in sys.argv[1:]:
    session = ''
    for line in open(f):
        if line.startswith('## session '):
            session = line.split()[2]
            continue
        if line.startswith('#') or not line.strip() or (keep and session not in keep):
            continue
        pair, who, js = line.split(' ', 2)
        if not js.startswith('{'):
            print('skipped:', line.strip())
            continue
        r = json.loads(js)
        if not r['ok']:
            print('NOT OK:', line.strip())
        runs[(f, session, int(pair), r['workload'])][who] = r

def q(v, p):
    v = sorted(v); i = (len(v) - 1) * p; lo = int(i); hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (i - lo)

def boot(v, n=4000):
    rnd = random.Random(27)
    m = sorted(st.median(rnd.choices(v, k=len(v))) for _ in range(n))
    return m[int(0.05 * n)], m[int(0.95 * n)]

workloads = sorted({k[3] for k in runs}, key=['jobs_keyed', 'jobs_resubmit', 'bulk_items', 'bulk_rerun'].index)
print('| workload | pairs | before items/s | after items/s | paired after ÷ before (median) | quartiles | min–max | pairs faster | 90 % interval | CPU s before → after | CPU ratio | peak RSS MiB before → after | RSS ratio |')
print('|---|---:|---:|---:|---:|---|---|---:|---|---|---:|---|---:|')
for w in workloads:
    ps = [v for k, v in sorted(runs.items()) if k[3] == w and 'before' in v and 'after' in v]
    b = [p['before'] for p in ps]; a = [p['after'] for p in ps]
    ratio = [p['after']['items_per_s'] / p['before']['items_per_s'] for p in ps]
    cpu = [p['after']['cpu_s'] / p['before']['cpu_s'] for p in ps]
    rss = [p['after']['peak_rss_kib'] / p['before']['peak_rss_kib'] for p in ps]
    lo, hi = boot(ratio)
    print(f"| {w} | {len(ps)} | {st.median(r['items_per_s'] for r in b):.0f} | {st.median(r['items_per_s'] for r in a):.0f} "
          f"| **{st.median(ratio):.3f}** | {q(ratio, .25):.3f}–{q(ratio, .75):.3f} | {min(ratio):.3f}–{max(ratio):.3f} "
          f"| {sum(x > 1 for x in ratio)}/{len(ratio)} | {lo:.3f}–{hi:.3f} "
          f"| {st.median(r['cpu_s'] for r in b):.3f} → {st.median(r['cpu_s'] for r in a):.3f} | {st.median(cpu):.3f} "
          f"| {st.median(r['peak_rss_kib'] for r in b) / 1024:.1f} → {st.median(r['peak_rss_kib'] for r in a) / 1024:.1f} | {st.median(rss):.3f} |")
print()
print('items/s ranges (min–max): ' + '; '.join(
    f"{w} before {min(v['before']['items_per_s'] for k, v in runs.items() if k[3] == w and 'before' in v):.0f}–"
    f"{max(v['before']['items_per_s'] for k, v in runs.items() if k[3] == w and 'before' in v):.0f}, after "
    f"{min(v['after']['items_per_s'] for k, v in runs.items() if k[3] == w and 'after' in v):.0f}–"
    f"{max(v['after']['items_per_s'] for k, v in runs.items() if k[3] == w and 'after' in v):.0f}"
    for w in workloads))
