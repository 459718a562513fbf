#!/usr/bin/env python3
"""Paired ratios of ab41.sh output: per rep, after ÷ before of CPU per 1 000
and of items/s for each workload, and each side ÷ raw(200)'s CPU per 1 000;
medians over the reps (with the range)."""
import json, sys, statistics as st, collections

reps = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("# rep"):
            reps.append(collections.defaultdict(dict)); reps[-1]["#"] = line.strip(); continue
        if line.startswith("#") or not line.strip(): continue
        who, js = line.split(" ", 1); r = json.loads(js)
        reps[-1][r["workload"]][who] = (r["cpu_s"] / r["n"] * 1000, r["items_per_s"])

def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{st.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f}, {len(xs)})" if xs else "-"

for w in ["jobs_keyed", "bulk_items", "bulk_rerun"]:
    cpu = [r[w]["after"][0] / r[w]["before"][0] for r in reps if "after" in r[w] and "before" in r[w]]
    rate = [r[w]["after"][1] / r[w]["before"][1] for r in reps if "after" in r[w] and "before" in r[w]]
    vs = {who: [r[w][who][0] / r["raw_queue"]["raw200"][0] for r in reps if who in r[w] and "raw200" in r["raw_queue"]] for who in ("before", "after")}
    abs_ = {who: st.median([r[w][who][0] for r in reps if who in r[w]] or [0]) for who in ("before", "after")}
    print(f"{w}: CPU/1k before {abs_['before']:.4f} s, after {abs_['after']:.4f} s; after÷before CPU {med(cpu)}, items/s {med(rate)}; "
          f"÷ raw(200) CPU: before {med(vs['before'])}, after {med(vs['after'])}")
raw = [r["raw_queue"]["raw200"] for r in reps if "raw200" in r["raw_queue"]]
if raw: print(f"raw(200): CPU/1k {st.median(x[0] for x in raw):.4f} s, items/s {st.median(x[1] for x in raw):.0f}")
for r in reps: print(r["#"])
