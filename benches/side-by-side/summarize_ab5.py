"""Medians per (workload, flush, who) of ab5.sh output files: items/s, CPU s per 1 000, peak RSS MiB."""
import json,collections,statistics as st,sys
rows=collections.defaultdict(list)
for f in sys.argv[1:]:
  for l in open(f):
    if l.startswith('#'): continue
    who,js=l.split(' ',1); r=json.loads(js)
    rows[(r['workload'],r['flush'],who)].append((r['items_per_s'],r['cpu_s']/r['n']*1000,r['peak_rss_kib']/1024))
for k,v in sorted(rows.items()):
    print(k, len(v), 'items/s', round(st.median(x[0] for x in v)), 'cpu/1k', round(st.median(x[1] for x in v),4), 'rss', round(st.median(x[2] for x in v),1))
