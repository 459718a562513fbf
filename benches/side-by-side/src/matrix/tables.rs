//! The matrix's tables: medians per engine and workload, the paired
//! ratios, the items/s of each repetition, the raw queue's rows and the
//! issue's targets.

use std::collections::BTreeMap;

use super::{Cell, Key, med, paired_ratio};
use crate::Cli;
use crate::kinds::{Engine, FlushKind, Workload};
use crate::meter::PhaseResult;

pub fn print_tables(cli: &Cli, cells: &BTreeMap<Key, Cell>, workloads: &[Workload]) {
    let get = |w, s, f, c, e| cells.get(&(w, s, f, c, e));
    let raw = |s, f, c| med(get(Workload::RawQueue, s, f, c, Engine::Raw));
    println!("## Medians");
    println!();
    println!(
        "Throughput ratios are items/s ÷ items/s (higher = gaffer faster); `gaffer ÷ ref` divides the two medians, `paired g÷r` is the median over repetitions of the ratio within one repetition (the two engines ran back to back, so load drift between repetitions cancels); CPU and RSS ratios are gaffer ÷ reference (lower = gaffer leaner). ÷raw(c) compares with raw_queue at claim/ack concurrency c on the same store and flush. Jobs run with {} workers in both engines.",
        cli.job_workers
    );
    println!();
    println!(
        "| workload | store | flush | N | gaffer items/s | reference items/s | gaffer ÷ ref | paired g÷r | gaffer ÷ raw(16) | gaffer ÷ raw(200) | gaffer CPU s | ref CPU s | CPU g÷r | gaffer CPU s/1k | gaffer peak RSS MiB | ref peak RSS MiB | RSS g÷r | reps g/r | status gaffer | status reference |"
    );
    println!(
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
    );
    let engine_workloads: Vec<Workload> = workloads
        .iter()
        .copied()
        .filter(|w| *w != Workload::RawQueue)
        .collect();
    for &flush in &cli.flush {
        for &store in &cli.store {
            for &w in &engine_workloads {
                let concs: Vec<usize> = if w.uses_conc() {
                    cli.conc.clone()
                } else {
                    vec![cli.job_workers]
                };
                for c in concs {
                    let g = med(get(w, store, flush, c, Engine::Gaffer));
                    let r = med(get(w, store, flush, c, Engine::Reference));
                    let name = if w.uses_conc() {
                        format!("{}({c})", w.label())
                    } else {
                        w.label().to_string()
                    };
                    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                        _ => None,
                    };
                    let gi = g.as_ref().map(|m| m.items_s);
                    let ri = r.as_ref().map(|m| m.items_s);
                    let r16 = raw(store, flush, 16).map(|m| m.items_s);
                    let r200 = raw(store, flush, 200).map(|m| m.items_s);
                    println!(
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} |",
                        name,
                        store.label(),
                        flush.label(),
                        g.as_ref()
                            .or(r.as_ref())
                            .map(|m| m.n.to_string())
                            .unwrap_or("–".into()),
                        fmt_f(gi, 0),
                        fmt_f(ri, 0),
                        fmt_f(ratio(gi, ri), 2),
                        fmt_f(
                            paired_ratio(
                                get(w, store, flush, c, Engine::Gaffer),
                                get(w, store, flush, c, Engine::Reference)
                            ),
                            2
                        ),
                        fmt_f(ratio(gi, r16), 2),
                        fmt_f(ratio(gi, r200), 2),
                        fmt_f(g.as_ref().map(|m| m.cpu_s), 2),
                        fmt_f(r.as_ref().map(|m| m.cpu_s), 2),
                        fmt_f(
                            ratio(g.as_ref().map(|m| m.cpu_s), r.as_ref().map(|m| m.cpu_s)),
                            2
                        ),
                        fmt_f(g.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                        fmt_f(g.as_ref().map(|m| m.rss_mib), 1),
                        fmt_f(r.as_ref().map(|m| m.rss_mib), 1),
                        fmt_f(
                            ratio(g.as_ref().map(|m| m.rss_mib), r.as_ref().map(|m| m.rss_mib)),
                            2
                        ),
                        g.as_ref().map(|m| m.reps).unwrap_or(0),
                        r.as_ref().map(|m| m.reps).unwrap_or(0),
                        status_of(get(w, store, flush, c, Engine::Gaffer)),
                        status_of(get(w, store, flush, c, Engine::Reference)),
                    );
                }
            }
        }
    }
    println!();
    println!("### items/s per repetition (rep 1 / rep 2 / …)");
    println!();
    println!("| workload | store | flush | gaffer | reference |");
    println!("|---|---|---|---|---|");
    for &flush in &cli.flush {
        for &store in &cli.store {
            for &w in &engine_workloads {
                let concs: Vec<usize> = if w.uses_conc() {
                    cli.conc.clone()
                } else {
                    vec![cli.job_workers]
                };
                for c in concs {
                    let name = if w.uses_conc() {
                        format!("{}({c})", w.label())
                    } else {
                        w.label().to_string()
                    };
                    println!(
                        "| {} | {} | {} | {} | {} |",
                        name,
                        store.label(),
                        flush.label(),
                        per_rep(get(w, store, flush, c, Engine::Gaffer)),
                        per_rep(get(w, store, flush, c, Engine::Reference)),
                    );
                }
            }
        }
    }
    if workloads.contains(&Workload::RawQueue) {
        println!();
        println!(
            "### raw_queue (taquba 0.16: enqueue N × 64 B with 64 in flight, then claim + ack)"
        );
        println!();
        println!(
            "| store | flush | N | conc | items/s (total) | wall s | enqueue s | claim+ack s | CPU s | CPU s/1k | peak RSS MiB | reps | items/s per rep | status |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        for &flush in &cli.flush {
            for &store in &cli.store {
                for &c in &cli.conc {
                    let cell = get(Workload::RawQueue, store, flush, c, Engine::Raw);
                    let m = med(cell);
                    println!(
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        store.label(),
                        flush.label(),
                        m.as_ref().map(|m| m.n.to_string()).unwrap_or("–".into()),
                        c,
                        fmt_f(m.as_ref().map(|m| m.items_s), 0),
                        fmt_f(m.as_ref().map(|m| m.wall_s), 2),
                        fmt_f(m.as_ref().and_then(|m| m.enqueue_s), 2),
                        fmt_f(m.as_ref().and_then(|m| m.drain_s), 2),
                        fmt_f(m.as_ref().map(|m| m.cpu_s), 2),
                        fmt_f(m.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                        fmt_f(m.as_ref().map(|m| m.rss_mib), 1),
                        m.as_ref().map(|m| m.reps).unwrap_or(0),
                        per_rep(cell),
                        status_of(cell),
                    );
                }
            }
        }
    }
    println!();
    print_targets(cli, cells);
}

pub fn print_targets(cli: &Cli, cells: &BTreeMap<Key, Cell>) {
    let jw = cli.job_workers;
    let get = |w, s, f, c, e| med(cells.get(&(w, s, f, c, e)));
    let clean = |w, s, f, c, e| {
        let st = status_of(cells.get(&(w, s, f, c, e)));
        st.starts_with("ok")
    };
    println!("## Targets (per store; a target holds only where both engines ran clean)");
    println!();
    println!("| target | store | measured | holds |");
    println!("|---|---|---|---|");
    let verdict = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "n/a",
    };
    for &store in &cli.store {
        let speed = |w: Workload, f: FlushKind, c: usize| -> Option<(f64, f64, bool)> {
            let g = get(w, store, f, c, Engine::Gaffer)?;
            let r = get(w, store, f, c, Engine::Reference)?;
            let clean =
                clean(w, store, f, c, Engine::Gaffer) && clean(w, store, f, c, Engine::Reference);
            let paired = paired_ratio(
                cells.get(&(w, store, f, c, Engine::Gaffer)),
                cells.get(&(w, store, f, c, Engine::Reference)),
            )
            .unwrap_or(f64::NAN);
            Some((g.items_s / r.items_s, paired, clean))
        };
        let row = |name: &str, w: Workload, f: FlushKind, c: usize, min: f64| {
            let s = speed(w, f, c);
            let holds = s.map(|(x, _, cl)| x >= min && cl);
            let paired_holds = s.map(|(_, p, cl)| p >= min && cl);
            let mut v = verdict(holds).to_string();
            if paired_holds != holds {
                v.push_str(&format!(" (paired: {})", verdict(paired_holds)));
            }
            println!(
                "| {} | {} | {} | {} |",
                name,
                store.label(),
                s.map(|(x, p, _)| format!("{x:.2}× reference (paired {p:.2}×)"))
                    .unwrap_or("–".into()),
                v
            );
        };
        row(
            "jobs_keyed default flush ≥ 3× reference",
            Workload::JobsKeyed,
            FlushKind::Default,
            jw,
            3.0,
        );
        row(
            "jobs_keyed 1 ms ≥ 2× reference",
            Workload::JobsKeyed,
            FlushKind::OneMs,
            jw,
            2.0,
        );
        {
            let g = get(
                Workload::JobsKeyed,
                store,
                FlushKind::OneMs,
                jw,
                Engine::Gaffer,
            );
            let raw = get(
                Workload::RawQueue,
                store,
                FlushKind::OneMs,
                200,
                Engine::Raw,
            );
            let v = match (&g, &raw) {
                (Some(g), Some(r)) => Some(g.items_s / r.items_s),
                _ => None,
            };
            println!(
                "| jobs_keyed 1 ms ≥ 60% of raw_queue(200) | {} | {} | {} |",
                store.label(),
                v.map(|x| format!("{:.1}% of raw(200)", x * 100.0))
                    .unwrap_or("–".into()),
                verdict(v.map(|x| x >= 0.6
                    && clean(
                        Workload::JobsKeyed,
                        store,
                        FlushKind::OneMs,
                        jw,
                        Engine::Gaffer
                    )))
            );
        }
        row(
            "jobs_resubmit 1 ms ≥ 3×",
            Workload::JobsResubmit,
            FlushKind::OneMs,
            jw,
            3.0,
        );
        row(
            "bulk_items(16) default ≥ 10×",
            Workload::BulkItems,
            FlushKind::Default,
            16,
            10.0,
        );
        row(
            "bulk_items(16) 1 ms ≥ 5×",
            Workload::BulkItems,
            FlushKind::OneMs,
            16,
            5.0,
        );
        row(
            "bulk_rerun 1 ms ≥ 3× (at 16)",
            Workload::BulkRerun,
            FlushKind::OneMs,
            16,
            3.0,
        );
        row(
            "bulk_rerun 1 ms ≥ 3× (at 200)",
            Workload::BulkRerun,
            FlushKind::OneMs,
            200,
            3.0,
        );
        {
            let g = get(
                Workload::JobsKeyed,
                store,
                FlushKind::Default,
                jw,
                Engine::Gaffer,
            );
            for c in [16usize, 200] {
                let raw = get(
                    Workload::RawQueue,
                    store,
                    FlushKind::Default,
                    c,
                    Engine::Raw,
                );
                let v = match (&g, &raw) {
                    (Some(g), Some(r)) => {
                        Some((g.cpu_s / g.n as f64 * 1000.0, r.cpu_s / r.n as f64 * 1000.0))
                    }
                    _ => None,
                };
                println!(
                    "| CPU per 1,000 jobs_keyed default ≤ 2× raw_queue({c})'s | {} | {} | {} |",
                    store.label(),
                    v.map(|(g, r)| format!("{g:.3} s vs raw {r:.3} s = {:.2}×", g / r))
                        .unwrap_or("–".into()),
                    verdict(v.map(|(g, r)| g <= 2.0 * r))
                );
            }
        }
        {
            let g = get(
                Workload::JobsKeyed,
                store,
                FlushKind::OneMs,
                jw,
                Engine::Gaffer,
            );
            let r = get(
                Workload::JobsKeyed,
                store,
                FlushKind::OneMs,
                jw,
                Engine::Reference,
            );
            let v = match (&g, &r) {
                (Some(g), Some(r)) => Some((g.rss_mib, r.rss_mib, g.n)),
                _ => None,
            };
            println!(
                "| peak RSS jobs_keyed {} 1 ms ≤ half the reference's | {} | {} | {} |",
                v.map(|(_, _, n)| n.to_string()).unwrap_or("N".into()),
                store.label(),
                v.map(|(g, r, _)| format!("{g:.1} MiB vs {r:.1} MiB = {:.2}×", g / r))
                    .unwrap_or("–".into()),
                verdict(v.map(|(g, r, _)| g <= 0.5 * r))
            );
        }
    }
}

pub fn per_rep(c: Option<&Cell>) -> String {
    match c {
        Some(c) if !c.runs.is_empty() => {
            let mut runs: Vec<&PhaseResult> = c.runs.iter().collect();
            runs.sort_by_key(|r| r.rep);
            runs.iter()
                .map(|r| format!("{:.0}", r.items_per_s))
                .collect::<Vec<_>>()
                .join(" / ")
        }
        _ => "–".into(),
    }
}

pub fn status_of(cell: Option<&Cell>) -> String {
    let Some(c) = cell else {
        return "not run".into();
    };
    let mut s: Vec<String> = c.problems.clone();
    for r in &c.runs {
        if !r.ok {
            s.push(format!("FAILED CHECK: {}", r.note));
        }
    }
    if s.is_empty() {
        let notes: Vec<&str> = c
            .runs
            .iter()
            .map(|r| r.note.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        let mut notes = notes;
        notes.dedup();
        if notes.is_empty() {
            "ok".into()
        } else {
            format!("ok ({})", notes.join("; "))
        }
    } else {
        s.dedup();
        s.join("; ")
    }
}

pub fn fmt_f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) => format!("{x:.digits$}"),
        None => "–".into(),
    }
}
