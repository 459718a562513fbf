//! `side-by-side peers`: gaffer (at each `--gaffer-flush`) and apalis 1.0
//! on SQLite back to back on the jobs workloads, for each N, local disk
//! only; their medians, paired ratios and the targets of issue #13 §3.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use crate::kinds::{Engine, FlushKind, StoreKind, Workload};
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
    c.push((Engine::Apalis, StoreKind::Local, FlushKind::Default));
    c
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
                    .filter(|&(e, _, _)| e != Engine::Apalis || n <= p.apalis_max_n)
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
    println!(
        "children: {}, reps {}, N {:?} (apalis up to {}), configs {:?}, groups {:?}, job workers {}",
        plan.len(),
        p.reps,
        p.n,
        p.apalis_max_n,
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
    println!("## Medians (local disk; medians over the repetitions that reported)");
    println!();
    println!(
        "`÷ apalis` divides items/s medians; `paired` is the median over repetitions of the ratio within one repetition (the engines ran back to back). `ok/reps`: repetitions that reported and passed their checks, of those run."
    );
    println!();
    println!(
        "| workload | N | engine | store | flush | items/s | per rep | ÷ apalis | paired | CPU s/1k | peak RSS MiB | ok/reps | status |"
    );
    println!("|---|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|---|");
    let mut workloads: Vec<Workload> = p.group.iter().flat_map(|g| g.phases().to_vec()).collect();
    workloads.sort();
    workloads.dedup();
    let engines = peer_configs(p);
    let apalis_key = |w, n| (w, n, Engine::Apalis, StoreKind::Local, FlushKind::Default);
    for &w in &workloads {
        for &n in &p.n {
            let apalis = cells.get(&apalis_key(w, n));
            for &(e, st, f) in &engines {
                let Some(cell) = cells.get(&(w, n, e, st, f)) else {
                    continue;
                };
                let m = med(Some(cell));
                let a = med(apalis);
                let ok = cell.runs.iter().filter(|r| r.ok).count();
                let tried = cell.runs.len() + cell.problems.len();
                let ratio = match (&m, &a, e) {
                    (Some(m), Some(a), Engine::Gaffer) => fmt_f(Some(m.items_s / a.items_s), 2),
                    _ => "–".into(),
                };
                let paired = match e {
                    Engine::Gaffer => fmt_f(paired_ratio(Some(cell), apalis), 2),
                    _ => "–".into(),
                };
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} |",
                    w.label(),
                    n,
                    e.label(),
                    st.label(),
                    if e == Engine::Apalis {
                        "–"
                    } else {
                        f.label()
                    },
                    fmt_f(m.as_ref().map(|m| m.items_s), 0),
                    per_rep(Some(cell)),
                    ratio,
                    paired,
                    fmt_f(m.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                    fmt_f(m.as_ref().map(|m| m.rss_mib), 1),
                    ok,
                    tried,
                    truncate(&status_of(Some(cell)), 400),
                );
            }
        }
    }
    println!();
    println!("## Targets (issue #13 §3)");
    println!();
    println!("| target | measured | holds |");
    println!("|---|---|---|");
    let w = Workload::JobsPlain;
    for (n, min) in [(2_000usize, 3.0), (10_000, 20.0)] {
        let g_cell = cells.get(&(w, n, Engine::Gaffer, StoreKind::Local, gaffer_default));
        let a_cell = cells.get(&apalis_key(w, n));
        let (gm, am) = (med(g_cell), med(a_cell));
        let a_clean = a_cell.is_some_and(|c| c.problems.is_empty() && c.runs.iter().all(|r| r.ok));
        let measured = match (&gm, &am) {
            (Some(g), Some(a)) => format!(
                "{:.2}× (paired {}), apalis over {} of {} reps",
                g.items_s / a.items_s,
                fmt_f(paired_ratio(g_cell, a_cell), 2),
                a.reps,
                a.reps + a_cell.map_or(0, |c| c.problems.len())
            ),
            (Some(_), None) => "apalis never finished".into(),
            _ => "–".into(),
        };
        let holds = match (&gm, &am) {
            (Some(g), Some(a)) if g.items_s / a.items_s >= min => {
                if a_clean {
                    "yes"
                } else {
                    "yes (apalis not clean in every rep)"
                }
            }
            (Some(_), Some(_)) => "NO",
            (Some(_), None) => "n/a (no apalis figure)",
            _ => "n/a",
        };
        println!("| jobs_plain gaffer default ≥ {min}× apalis at N = {n} | {measured} | {holds} |");
    }
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
