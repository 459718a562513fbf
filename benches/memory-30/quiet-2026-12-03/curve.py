import re,sys
for f in sys.argv[1:]:
    pts={}
    for line in open(f):
        m=re.match(r'\s+([\d.]+)s\s+ran\s+(\d+)\s+counted\s+(\d+)\s+(\d+) items/s\s+VmRSS\s+([\d.]+) MiB\s+VmHWM\s+([\d.]+) MiB',line)
        if m:
            ran=int(m.group(3)); 
            for x in (100000,300000,1000000,2000000):
                if ran>=x and x not in pts: pts[x]=(float(m.group(6)),int(m.group(4)),float(m.group(1)))
        if line.startswith('result'):
            r=dict(kv.split('=',1) for kv in line.split()[1:] if '=' in kv)
            pts['end']=(r['peak_rss(VmHWM)'],r['items/s'],r['wall'])
    print(f.split('/')[-1], ' | '.join(f"{k}: {v[0]} MiB {v[1]}/s" for k,v in pts.items()))
