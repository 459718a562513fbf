#!/usr/bin/env python3
"""Module dependency graph of a crate's src dir (crate::X references), and its cycles."""
import os, re, sys, itertools
root=sys.argv[1]
mods={}
for dp,_,fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs'): continue
        p=os.path.join(dp,f)
        rel=os.path.relpath(p,root)[:-3]
        parts=rel.split(os.sep)
        if parts[-1]=='mod': parts=parts[:-1]
        top=parts[0]
        if top in ('lib','main'): top='lib'
        mods.setdefault(top,set())
        src=open(p).read()
        # strip test modules roughly
        src=re.split(r'#\[cfg\(test\)\]\s*mod tests', src)[0]
        for m in re.findall(r'crate::([a-z_]+)', src):
            if m!=top: mods[top].add(m)
        for m in re.findall(r'super::([a-z_]+)', src):
            pass
# drop references to non-module names
names=set(mods)
for k in mods: mods[k]={m for m in mods[k] if m in names and m!='lib'}
# strongly connected components (Tarjan)
index={};low={};st=[];on=set();sccs=[];i=[0]
def sc(v):
    index[v]=low[v]=i[0]; i[0]+=1; st.append(v); on.add(v)
    for w in mods[v]:
        if w not in index: sc(w); low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],index[w])
    if low[v]==index[v]:
        comp=[]
        while True:
            w=st.pop(); on.discard(w); comp.append(w)
            if w==v: break
        sccs.append(comp)
sys.setrecursionlimit(10000)
for v in sorted(mods):
    if v not in index: sc(v)
for k in sorted(mods): print(f"{k}: {' '.join(sorted(mods[k]))}")
print("cycles:", [sorted(c) for c in sccs if len(c)>1])

# Layers of gaffer-actors (ARCHITECTURE.md's codemap): a module may name its
# own layer or lower ones (higher number), never a higher one.
LAYERS = {
    "protocol": 2,
    "supervisor": 3, "startup": 3, "shutdown": 3, "pool": 3, "restarts": 3, "worker": 3,
    "waiters": 3, "registry": 3, "coordinator": 3, "sink_writer": 3, "sweeper": 3, "intake": 3, "driver": 3,
    "periodic": 3, "claims": 3,
    "jobs": 4, "operate": 4, "settle": 4, "attempts": 4, "parking": 4, "erased": 4, "manifest": 4,
    "lookups": 4, "status": 4, "inspect": 4, "batch": 4, "services": 4,
    "ticks": 4,
    "keys": 5, "effects": 5, "records": 5, "store_url": 5, "memo": 5, "events": 5,
    "schedule": 5, "rate": 5, "request": 5,
    "error": 6, "settings": 6, "telemetry": 6,
}
if os.path.basename(os.path.normpath(root)) == "src" and "supervisor" in mods:
    unknown = sorted(m for m in mods if m not in LAYERS and m not in ("lib", "testing"))
    if unknown:
        print("modules without a layer:", unknown)
    for m, deps in sorted(mods.items()):
        for d in sorted(deps):
            if m in LAYERS and d in LAYERS and LAYERS[d] < LAYERS[m]:
                kept = " (a kept pair: the root actor and its message type)" if (m, d) == ("supervisor", "protocol") else ""
                print(f"upward: {m} (layer {LAYERS[m]}) names {d} (layer {LAYERS[d]}){kept}")
