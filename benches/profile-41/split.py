#!/usr/bin/env python3
"""Classify collapsed stacks (inferno-collapse-perf output: `f1;f2;...;leaf N`)
by frame names, for #41 §3's split of the CPU per job.

usage: split.py STACKS.txt [--jobs N] [--cpu-s S] [--markdown]

Each sample goes to one class: walking from the leaf to the root, the
first frame that names a class decides (frames of std, core, alloc,
hashbrown and libc's mem* functions are passed over, so their time is
their caller's). Allocation (malloc, free and their kin) and the kernel
are classes only at the leaf end. A second table says, for every sample,
which of gaffer's operations it was under (the frame nearest the leaf
that is gaffer's): submit, claim, settlement, join (waiters), the actors'
own code, or none (the queue's and the runtime's own tasks: flushes,
compaction).

With --jobs N and --cpu-s S (the child's CPU seconds over the profiled
run), shares are also shown as CPU ms per 1 000 jobs.
"""
import re, sys, collections

# (class, regex on a frame), first match wins; checked leaf to root.
CLASSES = [
    ("kernel/syscalls", re.compile(r"_\[k\]$|^entry_SYSCALL|^__x64_sys|^do_syscall|^\[unknown\]_\[k\]")),
    ("allocation", re.compile(r"^(__libc_)?(malloc|free|calloc|realloc|cfree)\b|^_int_(malloc|free|realloc)|^malloc_consolidate|^tcache_|^__rust_(alloc|dealloc|realloc)|^alloc::alloc::|^<alloc::alloc::Global|^unlink_chunk|^sysmalloc|^__default_morecore")),
    ("encoding (rmp-serde, serde, sha2)", re.compile(r"^(rmp_serde|rmp|serde|serde_json|sha2|digest|hex)::|^<(rmp_serde|rmp|serde|sha2|digest)::|^sha2::|sha256|<&mut rmp_serde|<rmp_serde")),
    ("tracing", re.compile(r"^<?tracing(_core|_subscriber)?::|^<tracing")),
    ("actor messaging (ractor, tokio sync)", re.compile(r"^<?ractor::|^<ractor|^<?tokio::sync::|^<tokio::sync|^futures_channel|^<?tokio_util::sync")),
    ("storage (taquba, SlateDB)", re.compile(r"^<?(taquba|slatedb|object_store|crossbeam_skiplist|crossbeam_epoch|bytes|parking_lot|lz4|zstd|snap|crc32fast|crc32c|fail_parking_lot|foyer|moka|ulid|uuid|flatbuffers|siphasher|bloomfilter|xxhash|twox_hash)[:<]|^<(taquba|slatedb|object_store|crossbeam_skiplist|bytes)|slatedb")),
    ("gaffer: settlement", re.compile(r"gaffer_actors::exec::settle|gaffer_actors::exec::effects|gaffer_actors::exec::memo")),
    ("gaffer: claim", re.compile(r"gaffer_actors::exec::(claimer|attempts|rate|fair|marks)")),
    ("gaffer: records (layout)", re.compile(r"gaffer_actors::layout|gaffer_layout::")),
    ("gaffer: submit", re.compile(r"gaffer_actors::jobs::submit|gaffer_actors::jobs::request|gaffer_actors::jobs::tags")),
    ("gaffer: join (waiters)", re.compile(r"gaffer_actors::jobs::waiters|gaffer_actors::engine::notify")),
    ("gaffer: pool, workers", re.compile(r"gaffer_actors::exec::(pool|worker|parking)")),
    ("gaffer: batches", re.compile(r"gaffer_actors::batches")),
    ("gaffer: other", re.compile(r"^<?gaffer|^<gaffer|gaffer_actors|gaffer::")),
    ("harness", re.compile(r"side_by_side")),
    ("tokio runtime", re.compile(r"^<?tokio::|^<tokio|^tokio|^mio::|^<mio")),
]
# Passed over: their time is the caller's.
SKIP = re.compile(r"^<?(std|core|alloc|hashbrown|futures_util|futures_core|pin_project|__memcpy|__memmove|__memset|memcpy|memmove|memset|__memcmp|memcmp|__strlen|<core|<alloc|<std|<hashbrown|<futures_util)|^__mem|^<\*|^\{\{closure\}\}|^<&")

# Under which of gaffer's operations (nearest gaffer frame to the leaf).
OPS = [
    ("submit", re.compile(r"gaffer_actors::jobs::(submit|request|tags)|gaffer_actors::engine::supervisor::requests.*submit|gaffer::engine::Engine::submit|JobsEngine>::submit")),
    ("settlement", re.compile(r"gaffer_actors::exec::settle|gaffer_actors::exec::pool::slots::.*start_settlement")),
    ("claim", re.compile(r"gaffer_actors::exec::(claimer|attempts)")),
    ("join (waiters, await)", re.compile(r"gaffer_actors::jobs::waiters|gaffer_actors::engine::notify|JobHandle.*join|await_job|wait_for|gaffer::job::")),
    ("the pool and its workers", re.compile(r"gaffer_actors::exec::(pool|worker|parking)")),
    ("batches (coordinator, feed)", re.compile(r"gaffer_actors::batches")),
    ("other gaffer", re.compile(r"gaffer")),
]

def frames_of(line):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    return stack.split(";"), int(n)

def classify(frames):
    for i, f in enumerate(reversed(frames)):
        for name, rx in CLASSES:
            if rx.search(f):
                return name
        # nothing matched: skip std/core frames and unknown ones alike
    return "unknown (no symbol)"

ALLOC = re.compile(r"malloc|free|realloc|memalign|_int_|tcache|checked_request2size|heap_trim|sysmalloc|unlink_chunk|__rust_alloc|__rust_dealloc|alloc::alloc|malloc_consolidate")
OWN = ("gaffer", "encoding", "tracing", "actor messaging")

def group_of(frames):
    """The coarse owner of a sample: gaffer's own code (gaffer's frames,
    the encodings, tracing and the actor messages, and what they
    allocate), storage (and its allocations), the runtime, the kernel."""
    c = classify(frames)
    if c == "allocation":
        c = classify([f for f in frames if not ALLOC.search(f)])
    if c.startswith(OWN):
        return "gaffer's own (its code, encodings, tracing, actor messages, their allocations)"
    if c.startswith("storage"):
        return "storage, with its allocations"
    if c.startswith(("kernel", "tokio")):
        return "kernel and tokio runtime"
    return "harness, unknown, other"

def op_of(frames):
    for f in reversed(frames):
        for name, rx in OPS:
            if rx.search(f):
                return name
    return "none (queue, store and runtime tasks)"

def main():
    args = sys.argv[1:]
    jobs = cpu = None
    md = "--markdown" in args
    if "--jobs" in args: jobs = int(args[args.index("--jobs") + 1])
    if "--cpu-s" in args: cpu = float(args[args.index("--cpu-s") + 1])
    path = args[0]
    cls = collections.Counter(); ops = collections.Counter(); both = collections.Counter()
    groups = collections.Counter()
    total = 0
    for line in open(path):
        if not line.strip(): continue
        frames, n = frames_of(line)
        c = classify(frames); o = op_of(frames)
        cls[c] += n; ops[o] += n; both[(o, c)] += n; total += n
        groups[group_of(frames)] += n
    def row(name, n):
        share = 100.0 * n / total
        ms = f" | {cpu * 1000 * share / 100 / jobs * 1000:.1f}" if jobs and cpu else ""
        return f"| {name} | {share:.1f} %{ms} |" if md else f"{name:45s} {share:5.1f}%{ms}"
    hdr = "| class | share | CPU ms per 1 000 |\n|---|---:|---:|" if jobs and cpu else "| class | share |\n|---|---:|"
    print(f"# {path}: {total} samples")
    if md: print(hdr)
    for k, n in cls.most_common(): print(row(k, n))
    print()
    if md: print(hdr.replace("class", "owner"))
    for k, n in groups.most_common(): print(row(k, n))
    print()
    if md: print(hdr.replace("class", "under gaffer's"))
    for k, n in ops.most_common(): print(row(k, n))
    if "--cross" in args:
        print()
        for (o, c), n in both.most_common(40): print(f"{o:35s} {c:40s} {100.0*n/total:5.1f}%")

if __name__ == "__main__":
    main()
