//! The matrix the parent runs: which engines × workloads × stores ×
//! flushes, in which order (engines alternate between repetitions), one
//! child each; the cells of their results and their medians. The tables are
//! printed by `matrix/tables.rs`.

pub mod tables;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::kinds::{Engine, FlushKind, Group, StoreKind, Workload};
use crate::meter::PhaseResult;
use crate::supervise::{ChildFate, loadavg, run_child};
use crate::{ChildArgs, Cli};
use tables::print_tables;

/// The matrix: every child of [`children`] run in turn, its results
/// printed raw as they come, then the tables.
pub fn main(cli: Cli) {
    let workloads: Vec<Workload> = cli.workload.clone();
    let (plan, engines) = children(&cli);
    println!("# side-by-side raw output");
    println!();
    println!(
        "children: {}, reps {}, stores {:?}, flush {:?}, workloads {:?}, engines {:?}, conc {:?}, N default {} / 1ms {}, job workers {}",
        plan.len(),
        cli.reps,
        cli.store,
        cli.flush,
        cli.workload,
        engines,
        cli.conc,
        cli.n_default,
        cli.n_1ms,
        cli.job_workers
    );
    println!();
    let t0 = Instant::now();
    let mut cells: BTreeMap<Key, Cell> = BTreeMap::new();
    for (i, (rep, ca)) in plan.iter().enumerate() {
        println!(
            "[{:>3}/{}] t+{:.0}s rep {} {} {} {} flush={} n={} conc={} load: {}",
            i + 1,
            plan.len(),
            t0.elapsed().as_secs_f64(),
            rep + 1,
            ca.engine.label(),
            ca.group.label(),
            ca.store.label(),
            ca.flush.label(),
            ca.n,
            ca.conc,
            loadavg()
        );
        let _ = std::io::stdout().flush();
        let (mut results, fate) = run_child(cli.hang_secs, ca);
        for r in results.iter_mut() {
            r.rep = rep + 1;
            println!("  raw: {}", serde_json::to_string(r).unwrap());
        }
        let conc_of = |w: Workload| {
            if w.uses_conc() {
                ca.conc
            } else {
                ca.job_workers
            }
        };
        for r in results.iter() {
            if !workloads.contains(&r.workload) {
                continue;
            }
            let key = (r.workload, r.store, r.flush, r.conc, r.engine);
            cells.entry(key).or_default().runs.push(r.clone());
        }
        let problem = match &fate {
            ChildFate::Done => None,
            ChildFate::Failed(d) => Some(format!("FAILED (rep {}): {d}", rep + 1)),
            ChildFate::Hung(d) => Some(format!("HUNG (rep {}): {d}", rep + 1)),
        };
        if let Some(p) = problem {
            println!("  !! {p}");
            // Charge the problem to every phase of the group that did not report.
            for &w in ca.group.phases() {
                if !workloads.contains(&w) {
                    continue;
                }
                let reported = results.iter().any(|r| r.workload == w);
                let key = (w, ca.store, ca.flush, conc_of(w), ca.engine);
                let text = if reported {
                    format!("after this phase reported: {p}")
                } else {
                    p.clone()
                };
                println!(
                    "  problem: {}",
                    serde_json::to_string(&ProblemLine {
                        workload: w,
                        store: ca.store,
                        flush: ca.flush,
                        conc: conc_of(w),
                        engine: ca.engine,
                        text: text.clone(),
                    })
                    .unwrap()
                );
                cells.entry(key).or_default().problems.push(text);
            }
        }
    }
    println!();
    println!("total matrix time: {:.0} s", t0.elapsed().as_secs_f64());
    println!();
    print_tables(&cli, &cells, &workloads);
}

/// The child runs, in matrix order: per repetition, flush, store, workload
/// group and concurrency, one child per engine (the raw queue for `raw`),
/// the engines' order reversed every other repetition; and the engines of
/// the matrix (the peers run in `side-by-side peers`).
fn children(cli: &Cli) -> (Vec<(usize, ChildArgs)>, Vec<Engine>) {
    let mut groups: Vec<Group> = cli.workload.iter().map(|w| w.group()).collect();
    groups.sort();
    groups.dedup();
    let engines: Vec<Engine> = cli
        .engine
        .iter()
        .copied()
        .filter(|e| *e != Engine::Raw)
        .filter(|e| {
            let peer = e.is_peer();
            if peer {
                println!(
                    "({} runs in `side-by-side peers`, not in this matrix)",
                    e.label()
                );
            }
            !peer
        })
        .collect();
    let n_of = |f: FlushKind| match f {
        FlushKind::Default => cli.n_default,
        FlushKind::OneMs => cli.n_1ms,
    };

    let mut plan: Vec<(usize, ChildArgs)> = Vec::new();
    for rep in 0..cli.reps {
        for &flush in &cli.flush {
            for &store in &cli.store {
                for &group in &groups {
                    let concs: Vec<usize> = match group {
                        Group::Bulk | Group::Raw => cli.conc.clone(),
                        _ => vec![cli.job_workers],
                    };
                    for conc in concs {
                        let mut es: Vec<Engine> = if group == Group::Raw {
                            vec![Engine::Raw]
                        } else {
                            engines.clone()
                        };
                        // Alternate which engine goes first.
                        if rep % 2 == 1 {
                            es.reverse();
                        }
                        for engine in es {
                            plan.push((
                                rep,
                                ChildArgs {
                                    engine,
                                    group,
                                    store,
                                    flush,
                                    n: n_of(flush),
                                    conc,
                                    job_workers: cli.job_workers,
                                    tmp_dir: cli.tmp_dir.clone(),
                                    telemetry: false,
                                },
                            ));
                        }
                    }
                }
            }
        }
    }
    (plan, engines)
}

// ---------------------------------------------------------------- cells and medians

#[derive(Serialize, Deserialize)]
pub struct ProblemLine {
    pub workload: Workload,
    pub store: StoreKind,
    pub flush: FlushKind,
    pub conc: usize,
    pub engine: Engine,
    pub text: String,
}

/// `--report`: rebuild the cells from a saved raw output and print the
/// tables again.
pub fn report(cli: Cli, path: &std::path::Path) {
    let text = std::fs::read_to_string(path).expect("read the raw output");
    let mut cells: BTreeMap<Key, Cell> = BTreeMap::new();
    let mut rep = 0usize;
    for line in text.lines() {
        if line.starts_with('[') {
            // "[  1/120] t+0s rep 1 ...": older outputs carry the rep only here.
            if let Some(r) = line
                .split_whitespace()
                .skip_while(|w| *w != "rep")
                .nth(1)
                .and_then(|r| r.parse().ok())
            {
                rep = r;
            }
        } else if let Some(j) = line.strip_prefix("  raw: ") {
            let mut r: PhaseResult = serde_json::from_str(j).expect("a raw line");
            if r.rep == 0 {
                r.rep = rep;
            }
            if cli.workload.contains(&r.workload) {
                cells
                    .entry((r.workload, r.store, r.flush, r.conc, r.engine))
                    .or_default()
                    .runs
                    .push(r);
            }
        } else if let Some(j) = line.strip_prefix("  problem: ") {
            let p: ProblemLine = serde_json::from_str(j).expect("a problem line");
            cells
                .entry((p.workload, p.store, p.flush, p.conc, p.engine))
                .or_default()
                .problems
                .push(p.text);
        }
    }
    println!("(tables re-rendered from {})", path.display());
    println!();
    let workloads = cli.workload.clone();
    print_tables(&cli, &cells, &workloads);
}

/// Median over the repetitions of gaffer's items/s ÷ the reference's in the
/// same repetition (adjacent runs, so load drift between repetitions cancels).
pub fn paired_ratio(g: Option<&Cell>, r: Option<&Cell>) -> Option<f64> {
    let (g, r) = (g?, r?);
    let v: Vec<f64> = g
        .runs
        .iter()
        .filter_map(|gr| {
            r.runs
                .iter()
                .find(|rr| rr.rep == gr.rep)
                .map(|rr| gr.items_per_s / rr.items_per_s)
        })
        .collect();
    median(v)
}

/// (workload, store, flush, conc, engine)
pub type Key = (Workload, StoreKind, FlushKind, usize, Engine);

#[derive(Default)]
pub struct Cell {
    pub runs: Vec<PhaseResult>,
    pub problems: Vec<String>,
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

pub struct Med {
    pub n: usize,
    pub reps: usize,
    pub items_s: f64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub rss_mib: f64,
    pub enqueue_s: Option<f64>,
    pub drain_s: Option<f64>,
}

pub fn med(cell: Option<&Cell>) -> Option<Med> {
    let c = cell?;
    let ok: Vec<&PhaseResult> = c.runs.iter().collect();
    if ok.is_empty() {
        return None;
    }
    Some(Med {
        n: ok[0].n,
        reps: ok.len(),
        items_s: median(ok.iter().map(|r| r.items_per_s).collect())?,
        wall_s: median(ok.iter().map(|r| r.wall_s).collect())?,
        cpu_s: median(ok.iter().map(|r| r.cpu_s).collect())?,
        rss_mib: median(ok.iter().map(|r| r.peak_rss_kib as f64 / 1024.0).collect())?,
        enqueue_s: median(ok.iter().filter_map(|r| r.enqueue_s).collect()),
        drain_s: median(ok.iter().filter_map(|r| r.drain_s).collect()),
    })
}
