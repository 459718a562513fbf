//! `side-by-side peers`: gaffer (at each `--gaffer-flush`) and its peers
//! (`--peers`) back to back on the jobs workloads, for each N, gaffer on
//! local disk; their medians, paired ratios, durability and the targets of
//! issues #13 §3 and #30 §2.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use crate::kinds::{Engine, FlushKind, Group, StoreKind, Workload};
use crate::matrix::tables::{fmt_f, per_rep, status_of};
use crate::matrix::{Cell, med, paired_ratio};
use crate::supervise::{ChildFate, loadavg, run_child, truncate};
use crate::{ChildArgs, PeersArgs};

/// (workload, N, engine, store, flush)
type PeerKey = (Workload, usize, Engine, StoreKind, FlushKind);

/// The engine configurations of a peers run, in their order.
fn peer_configs(p: &PeersArgs) -> Vec<(Engine, StoreKind, FlushKind)> {
    let mut c: Vec<(Engine, StoreKind, FlushKind)> = p
        .gaffer_flush
        .iter()
        .map(|&f| (Engine::Gaffer, StoreKind::Local, f))
        .collect();
    if p.gaffer_fsync {
        c.push((Engine::Gaffer, StoreKind::LocalFsync, FlushKind::Default));
    }
    for &peer in &p.peers {
        if peer.is_peer() && !c.iter().any(|&(e, _, _)| e == peer) {
            c.push((peer, StoreKind::Local, FlushKind::Default));
        }
    }
    c
}

/// What an acknowledged job survives, for gaffer's rows (the peers' own
/// are read from their stores by their children).
fn gaffer_durability(store: StoreKind) -> &'static str {
    match store {
        StoreKind::LocalFsync => "local dir, each object fsynced",
        StoreKind::Local => "local dir, not fsynced (page cache)",
        StoreKind::Memory => "memory",
        StoreKind::S3 => "S3 PUT",
    }
}

pub fn main(p: PeersArgs) {
    // The child runs: per repetition, per N, per group, gaffer at each flush
    // and apalis, back to back (order reversed every other repetition).
    let mut plan: Vec<(usize, ChildArgs)> = Vec::new();
    for rep in 0..p.reps {
        for &n in &p.n {
            for &group in &p.group {
                let mut runs: Vec<(Engine, StoreKind, FlushKind)> = peer_configs(&p)
                    .into_iter()
                    .filter(|&(e, _, _)| !e.is_peer() || n <= p.peer_max_n)
                    // effectum has no idempotency key: no jobs_keyed.
                    .filter(|&(e, _, _)| e != Engine::Effectum || group == Group::JobsPlain)
                    .collect();
                if rep % 2 == 1 {
                    runs.reverse();
                }
                for (engine, store, flush) in runs {
                    plan.push((
                        rep,
                        ChildArgs {
                            engine,
                            group,
                            store,
                            flush,
                            n,
                            conc: p.job_workers,
                            job_workers: p.job_workers,
                            tmp_dir: p.tmp_dir.clone(),
                            telemetry: false,
                        },
                    ));
                }
            }
        }
    }
    println!("# side-by-side peers raw output");
    println!();
    for var in ["SBS_PG_URL", "SBS_REDIS_URL"] {
        match std::env::var(var) {
            Ok(v) => println!("{var}={v}"),
            Err(_) if p.peers.iter().any(|e| e.needs_server()) => println!(
                "{var} not set: the server peers' children will fail (run under servers.sh)"
            ),
            Err(_) => {}
        }
    }
    println!(
        "children: {}, reps {}, N {:?} (peers up to {}), configs {:?}, groups {:?}, job workers {}",
        plan.len(),
        p.reps,
        p.n,
        p.peer_max_n,
        peer_configs(&p),
        p.group,
        p.job_workers
    );
    println!();
    let t0 = Instant::now();
    let mut cells: BTreeMap<PeerKey, Cell> = BTreeMap::new();
    for (i, (rep, ca)) in plan.iter().enumerate() {
        println!(
            "[{:>3}/{}] t+{:.0}s rep {} {} {} {} flush={} n={} load: {}",
            i + 1,
            plan.len(),
            t0.elapsed().as_secs_f64(),
            rep + 1,
            ca.engine.label(),
            ca.group.label(),
            ca.store.label(),
            ca.flush.label(),
            ca.n,
            loadavg()
        );
        let _ = std::io::stdout().flush();
        let (mut results, fate) = run_child(p.hang_secs, ca);
        for r in results.iter_mut() {
            r.rep = rep + 1;
            println!("  raw: {}", serde_json::to_string(r).unwrap());
            cells
                .entry((r.workload, r.n, r.engine, r.store, r.flush))
                .or_default()
                .runs
                .push(r.clone());
        }
        let problem = match &fate {
            ChildFate::Done => None,
            ChildFate::Failed(d) => Some(format!("FAILED (rep {}): {d}", rep + 1)),
            ChildFate::Hung(d) => Some(format!("HUNG (rep {}): {d}", rep + 1)),
        };
        if let Some(text) = problem {
            println!("  !! {text}");
            for &w in ca.group.phases() {
                if !results.iter().any(|r| r.workload == w) {
                    cells
                        .entry((w, ca.n, ca.engine, ca.store, ca.flush))
                        .or_default()
                        .problems
                        .push(text.clone());
                }
            }
        }
    }
    println!();
    println!("total time: {:.0} s", t0.elapsed().as_secs_f64());
    println!();
    print_peer_tables(&p, &cells);
}

fn print_peer_tables(p: &PeersArgs, cells: &BTreeMap<PeerKey, Cell>) {
    let gaffer_default = FlushKind::Default;
    let gaffer_key = |w, n| (w, n, Engine::Gaffer, StoreKind::Local, gaffer_default);
    let peer_key = |w, n, e| (w, n, e, StoreKind::Local, FlushKind::Default);
    println!("## Medians (gaffer on local disk; medians over the repetitions that reported)");
    println!();
    println!(
        "`gaffer ÷` divides gaffer's (at its defaults: local dir, default flush) items/s median by this row's; `paired` is the median over repetitions of that ratio within one repetition (the engines ran back to back). `CPU s/1k` and `peak RSS` are the child process's: a server peer's server (Postgres, Redis) is not counted. `ok/reps`: repetitions that reported and passed their checks, of those run. `durability`: what an acknowledged job survives, as each store reported it."
    );
    println!();
    println!(
        "| workload | N | engine | store | flush | items/s | per rep | gaffer ÷ | paired | CPU s/1k | peak RSS MiB | ok/reps | durability | status |"
    );
    println!("|---|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|---|---|");
    let mut workloads: Vec<Workload> = p.group.iter().flat_map(|g| g.phases().to_vec()).collect();
    workloads.sort();
    workloads.dedup();
    let engines = peer_configs(p);
    for &w in &workloads {
        for &n in &p.n {
            let gaffer = cells.get(&gaffer_key(w, n));
            for &(e, st, f) in &engines {
                let Some(cell) = cells.get(&(w, n, e, st, f)) else {
                    continue;
                };
                let m = med(Some(cell));
                let g = med(gaffer);
                let ok = cell.runs.iter().filter(|r| r.ok).count();
                let tried = cell.runs.len() + cell.problems.len();
                let (ratio, paired) = if e.is_peer() {
                    (
                        match (&g, &m) {
                            (Some(g), Some(m)) => fmt_f(Some(g.items_s / m.items_s), 2),
                            _ => "–".into(),
                        },
                        fmt_f(paired_ratio(gaffer, Some(cell)), 2),
                    )
                } else {
                    ("–".into(), "–".into())
                };
                let durability = if e.is_peer() {
                    let mut d: Vec<&str> = cell
                        .runs
                        .iter()
                        .filter_map(|r| r.durability.as_deref())
                        .collect();
                    d.sort();
                    d.dedup();
                    d.join("; ")
                } else {
                    gaffer_durability(st).to_string()
                };
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} |",
                    w.label(),
                    n,
                    e.label(),
                    if e.is_peer() { "–" } else { st.label() },
                    if e.is_peer() { "–" } else { f.label() },
                    fmt_f(m.as_ref().map(|m| m.items_s), 0),
                    per_rep(Some(cell)),
                    ratio,
                    paired,
                    fmt_f(m.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                    fmt_f(m.as_ref().map(|m| m.rss_mib), 1),
                    ok,
                    tried,
                    durability,
                    truncate(&status_of(Some(cell)), 400),
                );
            }
        }
    }
    println!();
    println!("## Targets (issues #13 §3 and #30 §2)");
    println!();
    println!("| target | measured | holds |");
    println!("|---|---|---|");
    // #13 §3: gaffer's lead over apalis-sqlite on plain jobs.
    let mut targets: Vec<(Workload, usize, Engine, f64)> = Vec::new();
    if p.peers.contains(&Engine::Apalis) {
        targets.push((Workload::JobsPlain, 2_000, Engine::Apalis, 3.0));
        targets.push((Workload::JobsPlain, 10_000, Engine::Apalis, 20.0));
    }
    // #30 §2: gaffer at its defaults ahead of every peer at 10,000 jobs.
    for &w in &workloads {
        if w == Workload::JobsResubmit {
            continue;
        }
        for &peer in &p.peers {
            // effectum has no jobs_keyed (no idempotency key).
            if peer == Engine::Effectum && w != Workload::JobsPlain {
                continue;
            }
            if peer != Engine::Apalis || w != Workload::JobsPlain {
                targets.push((w, 10_000, peer, 1.0));
            }
        }
    }
    for (w, n, peer, min) in targets {
        if !p.n.contains(&n) {
            continue;
        }
        let g_cell = cells.get(&gaffer_key(w, n));
        let a_cell = cells.get(&peer_key(w, n, peer));
        let (gm, am) = (med(g_cell), med(a_cell));
        let a_clean = a_cell.is_some_and(|c| c.problems.is_empty() && c.runs.iter().all(|r| r.ok));
        let measured = match (&gm, &am) {
            (Some(g), Some(a)) => format!(
                "{:.2}× (paired {}), {} over {} of {} reps",
                g.items_s / a.items_s,
                fmt_f(paired_ratio(g_cell, a_cell), 2),
                peer.label(),
                a.reps,
                a.reps + a_cell.map_or(0, |c| c.problems.len())
            ),
            (Some(_), None) => format!("{} never finished", peer.label()),
            _ => "–".into(),
        };
        let holds = match (&gm, &am) {
            (Some(g), Some(a)) if g.items_s / a.items_s >= min => {
                if a_clean {
                    "yes".to_string()
                } else {
                    format!("yes ({} not clean in every rep)", peer.label())
                }
            }
            (Some(_), Some(_)) => "NO".into(),
            (Some(_), None) => format!("n/a (no {} figure)", peer.label()),
            _ => "n/a".into(),
        };
        let what = if min > 1.0 {
            format!("≥ {min}×")
        } else {
            "ahead of".into()
        };
        println!(
            "| {} gaffer default {what} {} at N = {n} | {measured} | {holds} |",
            w.label(),
            peer.label()
        );
    }
    let w = Workload::JobsPlain;
    let small = p.n.iter().min().copied();
    let large = p.n.iter().max().copied();
    if let (Some(small), Some(large)) = (small, large)
        && small < large
    {
        for &f in &p.gaffer_flush {
            let per_job = |n| {
                med(cells.get(&(w, n, Engine::Gaffer, StoreKind::Local, f)))
                    .map(|m| (m.cpu_s / m.n as f64 * 1000.0, m.items_s))
            };
            if let (Some((c_s, i_s)), Some((c_l, i_l))) = (per_job(small), per_job(large)) {
                println!(
                    "| gaffer {} cost per job flat, N = {small} → {large} | CPU s/1k {c_s:.3} → {c_l:.3} ({:.2}×); items/s {i_s:.0} → {i_l:.0} ({:.2}×) | {} |",
                    f.label(),
                    c_l / c_s,
                    i_l / i_s,
                    if c_l / c_s <= 1.25 {
                        "yes (within 1.25×)"
                    } else {
                        "NO (over 1.25×)"
                    }
                );
            }
        }
    }
}
