#!/usr/bin/env python3
"""Module graph of a crate's src dir, by full module path (`exec::pool`,
`batches::registry`), and its cycles.

Usage: python3 tools/modgraph.py actors/src [--all]

A module is a file (`foo.rs` and the files under `foo/` are modules of their
own: `foo`, `foo::bar`); an edge is a `crate::a::b` path (or `super::x`,
resolved) naming another module. A folder's front door (`exec.rs`) that
only declares its children has no edges. Prints every module's imports
(with --all), the import cycles, and for gaffer-actors the cycles that
ARCHITECTURE.md does not name as kept.
"""
import os, re, sys

root = sys.argv[1]
show_all = '--all' in sys.argv

def mod_of(path):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] == 'mod':
        rel = rel[:-1]
    if rel in (['lib'], ['main']):
        return 'crate'
    return '::'.join(rel)

mods = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(dp, f)
            mods[mod_of(p)] = p
names = set(mods)

def resolve(parts):
    """The longest prefix of `parts` that is a module."""
    for n in range(len(parts), 0, -1):
        cand = '::'.join(parts[:n])
        if cand in names:
            return cand
    return None

edges = {m: set() for m in mods}
for m, p in mods.items():
    src = open(p).read()
    src = re.split(r'#\[cfg\(test\)\]\s*mod tests\b', src)[0]
    # drop comments (doc links are not imports)
    src = re.sub(r'//[^\n]*', '', src)
    here = [] if m == 'crate' else m.split('::')
    for path in re.findall(r'\bcrate((?:::[a-z_][a-z0-9_]*)+)', src):
        t = resolve(path.strip(':').split('::'))
        if t and t != m and not m.startswith(t + '::') and t != 'crate':
            edges[m].add(t)
    for path in re.findall(r'\bsuper((?:::[a-z_][a-z0-9_]*)+)', src):
        t = resolve(here[:-1] + path.strip(':').split('::'))
        if t and t != m and not m.startswith(t + '::'):
            edges[m].add(t)
    # A parent's edge to its child (`mod x;`, `x::Y`) is structure, not an import.
    edges[m] = {t for t in edges[m] if not t.startswith(m + '::')}

# Tarjan's strongly connected components.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in sorted(edges[v]):
        if w not in index:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        sccs.append(sorted(comp))
for v in sorted(edges):
    if v not in index:
        sc(v)

if show_all:
    for k in sorted(edges):
        print(f"{k}: {' '.join(sorted(edges[k]))}")
cycles = sorted(c for c in sccs if len(c) > 1)
print("cycles:", cycles)

# The pairs ARCHITECTURE.md names as kept: an actor and its parent's
# message type, the one message the child sends up.
KEPT = [
    ['batches::coordinator', 'batches::registry'],
    ['exec::pool', 'exec::worker'],
]
if os.path.basename(os.path.normpath(root)) == 'src' and 'engine::supervisor' in names:
    unnamed = [c for c in cycles if c not in KEPT]
    print("cycles not named in ARCHITECTURE.md:", unnamed)
    sys.exit(1 if unnamed else 0)
