#!/usr/bin/env python3
"""Module graph of a crate's src dir, by full module path (`exec::pool`,
`batches::registry`): its cycles, and the direction between its folders.

Usage: python3 tools/modgraph.py actors/src [--all] [--arch ARCHITECTURE.md]

A module is a file (`foo.rs` and the files under `foo/` are modules of their
own: `foo`, `foo::bar`); an edge is a `crate::a::b` path (also inside
`use crate::{a::b, c}`, a name the crate root or a folder's front door
re-exports followed to the module it comes from) or a `super::x` path,
resolved, naming another module. A parent's edge to its child (`mod x;`,
`x::Y`) is structure, not an import, and so is a child's to its parent.
Test code is left out: the braces of a `#[cfg(test)] mod NAME { .. }` (the
file is read on after them) and the files of a `#[cfg(test)] mod NAME;`.

A folder is a module's first segment (`exec` for `exec::pool::slots`; the
top files, `services`, `task`, count as folders of their own). ARCHITECTURE.md
has a section per crate whose heading names the crate's src dir in
backquotes (`actors/src`); in it:

- the first fenced block holding `<` is the folder order, lowest first,
  folders of one rank separated by spaces, ranks by `<`;
- a bullet `` - `a` ↔ `b` ↔ .. : why `` names a kept cycle (its modules);
- a bullet `` - `x` → `y`: why `` names a kept backward edge: from folder or
  module `x` (and what is under it) to folder or module `y`.

An edge is backward when its folder's rank is below the rank of the folder
it names. The script fails (exit 1) on a cycle or a backward edge that the
section does not name, on a folder with no rank, and on a named cycle or
edge that no longer exists (so the list stays true). With --all it prints
every module's imports.
"""
import os, re, sys

argv = sys.argv[1:]
arch = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ARCHITECTURE.md')
if '--arch' in argv:
    i = argv.index('--arch')
    arch = argv[i + 1]
    del argv[i:i + 2]
show_all = '--all' in argv
args = [a for a in argv if not a.startswith('--')]
if len(args) != 1:
    sys.exit(__doc__)
root = os.path.normpath(args[0])


RAW = re.compile(r'(?:br|r)(#*)"')
CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'")


def code_only(src):
    """`src` with comments removed and string and char literals emptied,
    so that braces and paths are the code's own."""
    out, i, n = [], 0, len(src)
    ident = re.compile(r'[A-Za-z0-9_]')
    while i < n:
        c = src[i]
        start = i
        if src.startswith('//', i):
            j = src.find('\n', i)
            i = n if j < 0 else j
        elif src.startswith('/*', i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith('/*', i):
                    depth, i = depth + 1, i + 2
                elif src.startswith('*/', i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c in 'rb' and (i == 0 or not ident.match(src[i - 1])) and RAW.match(src, i):
            m = RAW.match(src, i)
            end = src.find('"' + m.group(1), i + len(m.group(0)))
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == '\\' else 1
            out.append('""')
            i += 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{7f}') or a lifetime ('a).
            m = CHAR.match(src, i)
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
            continue
        out.append('\n' * src.count('\n', start, i))  # lines keep their numbers
    return ''.join(out)


TEST_MOD = re.compile(r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([{;])')


def without_tests(code):
    """`code` without the bodies of its `#[cfg(test)]` modules; and the
    names of those declared as files."""
    files, out, i = set(), [], 0
    while True:
        m = TEST_MOD.search(code, i)
        if not m:
            out.append(code[i:])
            return ''.join(out), files
        out.append(code[i:m.start()])
        if m.group(2) == ';':
            files.add(m.group(1))
            i = m.end()
            continue
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {'{': 1, '}': -1}.get(code[j], 0)
            j += 1
        out.append('\n' * code.count('\n', m.start(), j))  # lines keep their numbers
        i = j


def mod_of(path):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] == 'mod':
        rel = rel[:-1]
    if rel in (['lib'], ['main']):
        return 'crate'
    return '::'.join(rel)


files = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(dp, f)
            files[mod_of(p)] = p
code, test_files = {}, set()
for m, p in files.items():
    code[m], tests = without_tests(code_only(open(p).read()))
    test_files |= {t if m == 'crate' else f'{m}::{t}' for t in tests}
# A test file, and whatever is under it, is test code.
mods = {m: p for m, p in files.items()
        if not any(m == t or m.startswith(t + '::') for t in test_files)}
names = set(mods)


def parent(m):
    return 'crate' if '::' not in m else m.rsplit('::', 1)[0]


def absolute(here, parts):
    """`parts` (a path as written in module `here`) from the crate root, or
    None for a path that is not the crate's (`std::..`, a dependency)."""
    if parts[0] == 'crate':
        return parts[1:]
    if parts[0] in ('super', 'self'):
        at = here
        while parts and parts[0] in ('super', 'self'):
            if parts[0] == 'super':
                at = parent(at)
            parts = parts[1:]
        return ([] if at == 'crate' else at.split('::')) + parts
    if here != 'crate' and f'{here}::{parts[0]}' in names:  # a child: `x::Y`
        return here.split('::') + parts
    if here == 'crate' and parts[0] in names:
        return parts
    return None


def use_paths(text):
    """Every path of a `use` tree (`a::{b, c::d as e}`), each a list of
    segments."""
    text = re.sub(r'\s+', '', re.sub(r'\s+as\s+\w+', '', text))
    def expand(prefix, t):
        depth, parts, cur = 0, [], ''
        for ch in t:
            if ch == ',' and depth == 0:
                parts.append(cur)
                cur = ''
                continue
            depth += {'{': 1, '}': -1}.get(ch, 0)
            cur += ch
        parts.append(cur)
        for part in filter(None, parts):
            m = re.match(r'^((?:\w+::)*)\{(.*)\}$', part)
            if m:
                yield from expand(prefix + [s for s in m.group(1).split('::') if s], m.group(2))
            else:
                yield prefix + part.split('::')
    yield from expand([], text)


# Names a module re-exports (`pub use x::Y;` in a front door or the root):
# (module, name) -> the module the name comes from.
reexports = {}
for m in mods:
    for tree in re.findall(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', code[m]):
        for parts in use_paths(tree):
            full = absolute(m, parts)
            if full and len(full) > 1:
                reexports[(m, full[-1])] = full[:-1]


def resolve(parts, seen=0):
    """The module a path from the crate root names: its longest prefix that
    is a module, or, through a re-export, the module the name comes from."""
    for k in range(len(parts), 0, -1):
        cand = '::'.join(parts[:k])
        if cand in names:
            break
    else:
        cand, k = 'crate', 0
    if k < len(parts) and (cand, parts[k]) in reexports and seen < 8:
        return resolve(reexports[(cand, parts[k])] + parts[k + 1:], seen + 1)
    return cand if cand in names else None


PATH = r'(?:crate|super|self)(?:::(?:super|self))*(?:(?:::[A-Za-z_]\w*)+(?:::\{[^;]*?\}(?=\s*;))?|::\{[^;]*?\}(?=\s*;))'
edges, where = {m: set() for m in mods}, {}
for m in mods:
    src = code[m]
    lines = [0] + [i for i, ch in enumerate(src) if ch == '\n']
    for hit in re.finditer(r'\b' + PATH, src):
        text = hit.group(0)
        paths = use_paths(text) if '{' in text else [text.split('::')]
        for parts in paths:
            full = absolute(m, [p for p in parts if p])
            if full is None:
                continue
            t = resolve(full)
            if t and t != m and not m.startswith(t + '::') and not t.startswith(m + '::') \
                    and t != 'crate':
                edges[m].add(t)
                line = sum(1 for x in lines if x < hit.start())
                where.setdefault((m, t), f'{mods[m]}:{line}')
edges.pop('crate', None)


def under(m, x):
    return m == x or m.startswith(x + '::')


# What ARCHITECTURE.md names for this crate.
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
rel_root = os.path.relpath(os.path.abspath(root), repo)
try:
    doc = open(arch).read()
except OSError:
    sys.exit(f"no {arch}: nothing says what is kept")
sections, fenced = [[]], False
for line in doc.split('\n'):  # headings outside fenced blocks start sections
    fenced ^= line.startswith('```')
    if not fenced and re.match(r'#+ ', line):
        sections.append([])
    sections[-1].append(line)
section = next(('\n'.join(sec) for sec in sections
                if sec and sec[0].startswith('#') and f'`{rel_root}`' in sec[0]), None)
if section is None:
    print(f"{os.path.basename(arch)} has no section whose heading names `{rel_root}`: nothing is kept")
    section = ''
order = next(([r.split() for r in block.split('<')]
              for block in re.findall(r'```[^\n]*\n(.*?)```', section, re.S) if '<' in block), None)
named_cycles, named_edges = [], []
for line in section.split('\n'):
    before = line.split(': ', 1)[0]  # the modules, before the reason
    if re.match(r'\s*- `[\w:]+` ↔ `', line):
        named_cycles.append(sorted(re.findall(r'`([\w:]+)`', before)))
    elif re.match(r'\s*- `[\w:]+` → `[\w:]+`', line):
        named_edges.append(tuple(re.findall(r'`([\w:]+)`', before)[:2]))

if show_all:
    for k in sorted(edges):
        print(f"{k}: {' '.join(sorted(edges[k]))}")
failed = []

# Direction: a folder names its own rank and those below, or a named edge.
kept = set()
if order is not None:
    rank = {f: i for i, r in enumerate(order) for f in r}
    folders = sorted({m.split('::')[0] for m in mods if m != 'crate'})
    missing = [f for f in folders if f not in rank]
    if missing:
        print("folders with no rank in ARCHITECTURE.md's order:", missing)
        failed += missing
    top = lambda m: m.split('::')[0]
    backward = sorted((a, b) for a in edges for b in edges[a]
                      if top(a) in rank and top(b) in rank and rank[top(a)] < rank[top(b)])
    used, bad = set(), []
    for a, b in backward:
        hit = [n for n in named_edges if under(a, n[0]) and under(b, n[1])]
        used.update(hit)
        (kept.add((a, b)) if hit else bad.append((a, b)))
    pairs = sorted({(top(a), top(b)) for a, b in backward})
    print("backward edges:", len(backward), "between folders",
          ', '.join(f'{a} -> {b}' for a, b in pairs))
    if show_all:
        for a, b in backward:
            print(f"  {a} -> {b}  ({where[(a, b)]})")
    print("backward edges not named in ARCHITECTURE.md:", [f'{a} -> {b}' for a, b in bad])
    for a, b in bad:
        print(f"  {a} -> {b}: {where[(a, b)]}")
    gone = [f'{a} -> {b}' for a, b in named_edges if (a, b) not in used]
    if gone:
        print("backward edges ARCHITECTURE.md names that are gone:", gone)
    failed += bad + gone
elif named_edges:
    print("ARCHITECTURE.md names backward edges but no folder order")
    failed.append('order')

# Cycles, once the named backward edges (each with its reason) are left
# out: Tarjan's strongly connected components.
graph = {a: {b for b in bs if (a, b) not in kept} for a, bs in edges.items()}
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)


def sc(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(graph.get(v, ())):
        if w not in index:
            sc(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        sccs.append(sorted(comp))


for v in sorted(graph):
    if v not in index:
        sc(v)
cycles = sorted(c for c in sccs if len(c) > 1)
print("cycles:", cycles)
unnamed = [c for c in cycles if c not in named_cycles]
stale = [c for c in named_cycles if c not in cycles]
print("cycles not named in ARCHITECTURE.md:", unnamed)
for c in unnamed:
    for a in c:
        for b in sorted(graph[a] & set(c)):
            print(f"  {a} -> {b}: {where[(a, b)]}")
if stale:
    print("cycles ARCHITECTURE.md names that are gone:", stale)
failed += unnamed + stale
sys.exit(1 if failed else 0)
