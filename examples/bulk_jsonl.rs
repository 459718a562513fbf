//! A bulk pipeline over a JSONL file, with a live progress bar, a JSONL output
//! file, and resume after a crash.
//!
//! Run: `cargo run --example bulk_jsonl`
//!
//! Without a path it writes a sample input of 2,000 documents
//! (`{"id": .., "text": ..}` per line) into `$TMPDIR/gaffer-bulk-jsonl/` and
//! runs on that. Each document goes through three memoized phases (tokenize,
//! count, score: the last one pretends to be a remote call, 40 ms), with its
//! cost recorded; the result is word statistics per document, written to
//! `<input stem>.out.jsonl` beside the store. The store is a local directory
//! in the same work dir, and the batch id is derived from the input's file
//! name, so running the example again continues the same batch: items that
//! succeeded are not run again.
//!
//! See it resume:
//!
//! ```sh
//! cargo run --example bulk_jsonl -- --crash-after 500   # exits 137 after 500 items
//! cargo run --example bulk_jsonl                        # runs only the rest
//! ```
//!
//! Options: `[INPUT.jsonl] [--out OUT.jsonl] [--crash-after N] [--fresh]
//! [--lines N] [--latency-ms MS] [--workers N]`. `--fresh` forgets the
//! batch first (its markers, manifest and memo entries); Ctrl-C or `kill`
//! mid-run works like `--crash-after`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use gaffer::{
    BulkCtx, Engine, Pipeline, bulk::ItemError, sink::JsonlSink, sink::OutputRecord,
    sink::OutputSink, sink::read_jsonl,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

/// One input line.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Doc {
    id: String,
    text: String,
}

/// One output: statistics of a document's words.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WordStats {
    words: usize,
    distinct: usize,
    sentences: usize,
    avg_word_len: f64,
    top: Vec<(String, u32)>,
    /// Lexical density (distinct / words), from the "remote" scorer.
    density: f64,
}

/// Counts what the pipeline did in this process.
#[derive(Debug, Default)]
struct Counters {
    /// Items the pipeline was called for.
    runs: AtomicU64,
    /// Phases computed (not answered from the memo).
    computed: AtomicU64,
    /// Phases answered from the memo (computed by an earlier, crashed attempt).
    memo_hits: AtomicU64,
}

struct WordStatsPipeline {
    counters: Arc<Counters>,
    latency: Duration,
    /// Closed until `main` has read the batch's status: the engine starts
    /// claiming items left queued by an interrupted run as soon as it starts,
    /// and this keeps them from settling before the "already done" count.
    gate: tokio::sync::watch::Receiver<bool>,
}

impl WordStatsPipeline {
    /// `ctx.memo().memoized(key, f)`, counting computations and memo hits.
    /// A phase answered from the memo records no cost: what it cost was spent
    /// by the interrupted attempt, whose cost was never settled.
    /// (`ctx.memoized_with_cached_cost` memoizes the cost with the value and
    /// records it again on a hit, if the report should count it.)
    async fn phase<T, F, Fut>(&self, ctx: &BulkCtx<Doc>, key: &str, f: F) -> Result<T, ItemError>
    where
        T: Serialize + serde::de::DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, ItemError>>,
    {
        let computed = AtomicBool::new(false);
        let value = ctx
            .memo()
            .memoized(key, || {
                computed.store(true, Ordering::Relaxed);
                f()
            })
            .await?;
        let counter = if computed.load(Ordering::Relaxed) {
            &self.counters.computed
        } else {
            &self.counters.memo_hits
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(value)
    }
}

impl Pipeline for WordStatsPipeline {
    const NAME: &'static str = "word-stats";
    type Input = Doc;
    type Output = WordStats;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<Doc>) -> Result<WordStats, ItemError> {
        let _ = self.gate.clone().wait_for(|open| *open).await;
        self.counters.runs.fetch_add(1, Ordering::Relaxed);
        let text = &ctx.input.text;
        if text.trim().is_empty() {
            return Err(ItemError::permanent("empty text"));
        }
        // Phase 1: tokenize.
        let words: Vec<String> = self
            .phase(ctx, "tokenize", || async {
                let words: Vec<String> = text
                    .split(|c: char| !c.is_alphanumeric() && c != '\'')
                    .filter(|w| !w.is_empty())
                    .map(str::to_lowercase)
                    .collect();
                ctx.record_cost("tokens", words.len() as f64);
                Ok(words)
            })
            .await?;

        // Phase 2: count.
        let (distinct, top): (usize, Vec<(String, u32)>) = self
            .phase(ctx, "count", || async {
                let mut freq: HashMap<&str, u32> = HashMap::new();
                for w in &words {
                    *freq.entry(w).or_default() += 1;
                }
                let mut top: Vec<(String, u32)> =
                    freq.iter().map(|(w, n)| (w.to_string(), *n)).collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                top.truncate(5);
                Ok((freq.len(), top))
            })
            .await?;

        // Phase 3: score, pretending to be a slow, billed remote call.
        let density: f64 = self
            .phase(ctx, "score", || async {
                tokio::time::sleep(self.latency).await;
                ctx.record_cost("api_calls", 1.0);
                ctx.record_cost("usd", 0.000_02 * words.len() as f64);
                Ok(distinct as f64 / words.len().max(1) as f64)
            })
            .await?;

        let letters: usize = words.iter().map(|w| w.chars().count()).sum();
        Ok(WordStats {
            words: words.len(),
            distinct,
            sentences: text.matches(['.', '!', '?']).count().max(1),
            avg_word_len: letters as f64 / words.len().max(1) as f64,
            top,
            density,
        })
    }
}

/// The JSONL sink, plus `--crash-after`: exits the process (status 137, as if
/// killed) once `n` item records were written in this run.
struct CrashingSink {
    inner: JsonlSink<BufWriter<File>>,
    written: AtomicU64,
    crash_after: Option<u64>,
}

impl OutputSink for CrashingSink {
    fn write(&self, record: &OutputRecord) -> gaffer::Result<()> {
        self.inner.write(record)?;
        let n = self.written.fetch_add(1, Ordering::Relaxed) + 1;
        if self.crash_after == Some(n) {
            eprintln!("\n--crash-after {n}: exiting with status 137 now (as if killed)");
            std::process::exit(137);
        }
        Ok(())
    }

    fn flush(&self) -> gaffer::Result<()> {
        self.inner.flush()
    }
}

struct Args {
    input: Option<PathBuf>,
    out: Option<PathBuf>,
    crash_after: Option<u64>,
    fresh: bool,
    lines: usize,
    latency: Duration,
    workers: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        input: None,
        out: None,
        crash_after: None,
        fresh: false,
        lines: 2000,
        latency: Duration::from_millis(40),
        workers: 16,
    };
    let mut it = std::env::args().skip(1);
    let num = |flag: &str, v: Option<String>| -> Result<u64, String> {
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--crash-after" => args.crash_after = Some(num("--crash-after", it.next())?),
            "--out" => args.out = Some(it.next().ok_or("--out needs a path")?.into()),
            "--fresh" => args.fresh = true,
            "--lines" => args.lines = num("--lines", it.next())? as usize,
            "--latency-ms" => args.latency = Duration::from_millis(num("--latency-ms", it.next())?),
            "--workers" => args.workers = num("--workers", it.next())?.max(1) as usize,
            "-h" | "--help" => {
                return Err("usage: bulk_jsonl [INPUT.jsonl] [--out OUT.jsonl] \
                     [--crash-after N] [--fresh] [--lines N] [--latency-ms MS] [--workers N]"
                    .into());
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            path => args.input = Some(path.into()),
        }
    }
    Ok(args)
}

/// Write `lines` sample documents (the same ones every time, so a rerun is the
/// same batch). A few are empty: those items fail, permanently.
fn write_sample(path: &Path, lines: usize) -> std::io::Result<()> {
    const WORDS: &[&str] = &[
        "the", "engine", "queue", "durable", "job", "actor", "batch", "item", "memo", "crash",
        "resume", "store", "disk", "flush", "lease", "retry", "worker", "pipeline", "record",
        "marker", "window", "chunk", "manifest", "sink", "cost", "progress", "a", "of", "and",
        "to", "is", "runs", "again", "once", "every", "fast",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let mut w = BufWriter::new(File::create(path)?);
    for i in 0..lines {
        let mut text = String::new();
        if i % 500 != 499 {
            for s in 0..1 + next(4) {
                if s > 0 {
                    text.push(' ');
                }
                let len = 4 + next(12);
                for j in 0..len {
                    let word = WORDS[next(WORDS.len())];
                    if j == 0 {
                        let mut c = word.chars();
                        let first = c.next().map(|f| f.to_ascii_uppercase()).unwrap_or(' ');
                        text.push(first);
                        text.push_str(c.as_str());
                    } else {
                        text.push(' ');
                        text.push_str(word);
                    }
                }
                text.push(['.', '!', '?'][next(3)]);
            }
        }
        let doc = Doc {
            id: format!("doc-{i:06}"),
            text,
        };
        serde_json::to_writer(&mut w, &doc)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// A batch id from the input's file name: `jsonl-<stem>`, reduced to
/// `[A-Za-z0-9_-]` and 128 characters.
fn batch_id_for(input: &Path) -> String {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("jsonl-{clean}").chars().take(128).collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let work = std::env::temp_dir().join("gaffer-bulk-jsonl");
    std::fs::create_dir_all(&work)?;
    let input = match args.input {
        Some(p) => p,
        None => {
            let p = work.join(format!("sample-{}.jsonl", args.lines));
            if !p.exists() {
                write_sample(&p, args.lines)?;
                println!("wrote sample input: {} ({} lines)", p.display(), args.lines);
            }
            p
        }
    };
    let batch_id = batch_id_for(&input);
    let out_path = args.out.unwrap_or_else(|| {
        let stem = input.file_stem().unwrap_or_default().to_string_lossy();
        work.join(format!("{stem}.out.jsonl"))
    });
    let store = work.join("store");
    println!("input:  {}", input.display());
    println!("store:  {}", store.display());
    println!("batch:  {batch_id}");

    let counters = Arc::new(Counters::default());
    let (open_gate, gate) = tokio::sync::watch::channel(false);
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(&store))
        .pipeline_with(
            WordStatsPipeline {
                counters: counters.clone(),
                latency: args.latency,
                gate,
            },
            gaffer::JobOptions {
                concurrency: Some(args.workers),
                ..Default::default()
            },
        )
        .start()
        .await?;

    let sink = Arc::new(CrashingSink {
        // Truncated each run: every run writes every item, finished ones too.
        inner: JsonlSink::new(BufWriter::new(File::create(&out_path)?)),
        written: AtomicU64::new(0),
        crash_after: args.crash_after,
    });
    let batch = Arc::new(
        engine
            .batch::<WordStatsPipeline>(&batch_id)?
            .key_fn(|doc: &Doc| doc.id.clone())
            .sink(sink),
    );

    if args.fresh {
        match batch.forget().await {
            Ok(()) => println!("--fresh: forgot batch {batch_id}"),
            Err(e) => println!("--fresh: could not forget {batch_id} ({e}); continuing it"),
        }
    }
    // What an earlier run left: a run over the same inputs skips its
    // succeeded items and retries its failed ones.
    let already = match batch.status().await {
        Ok(s) => {
            println!(
                "resuming: {} of {} items already succeeded, {} failed (retried now), \
                 {} still queued from the interrupted run",
                s.succeeded, s.total, s.failed, s.pending
            );
            Some(s)
        }
        Err(gaffer::Error::BatchNotFound(_)) => {
            println!("new batch");
            None
        }
        Err(e) => return Err(e.into()),
    };
    let _ = open_gate.send(true);

    // Inputs are streamed from the file, a manifest chunk at a time; bad
    // lines are reported and left out (the same ones every run).
    let bad_lines = Arc::new(AtomicU64::new(0));
    let docs = {
        let bad_lines = bad_lines.clone();
        read_jsonl::<Doc, _>(BufReader::new(File::open(&input)?)).filter_map(move |r| match r {
            Ok(doc) => Some(doc),
            Err(e) => {
                bad_lines.fetch_add(1, Ordering::Relaxed);
                eprintln!("skipping input: {e}");
                None
            }
        })
    };

    // The progress bar: poll the running batch every 100 ms.
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} eta {eta} {msg}",
        )?
        .progress_chars("=> "),
    );
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let poller = {
        let batch = batch.clone();
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {
                        if let Some(p) = batch.progress().await {
                            bar.set_length(p.total);
                            bar.set_position(p.completed);
                            bar.set_message(format!(
                                "{:.0}/s · failed {} · ${:.4}",
                                p.rate_per_sec,
                                p.failed,
                                p.cost.get("usd")
                            ));
                        }
                    }
                }
            }
        })
    };
    let result = batch.run(docs).await;
    let _ = stop.send(());
    poller.await?;
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(gaffer::Error::BatchMismatch(id)) => {
            eprintln!(
                "batch {id} was started over other inputs (the file changed?): \
                 run with --fresh to start it over"
            );
            engine.shutdown().await?;
            std::process::exit(1);
        }
        Err(e) => return Err(e.into()),
    };

    println!();
    println!("batch {}: {} items", report.batch_id, report.total);
    println!("  succeeded {}", report.succeeded);
    println!("  failed    {} {:?}", report.failed, report.failed_keys);
    println!("  elapsed   {:.2?}", report.elapsed);
    let cost: Vec<String> = report
        .cost
        .entries()
        .map(|(m, v)| format!("{m}={v:.4}"))
        .collect();
    println!("  cost      {}", cost.join(" "));
    if report.sink_errors > 0 {
        println!("  sink errors {}", report.sink_errors);
    }
    let bad = bad_lines.load(Ordering::Relaxed);
    if bad > 0 {
        println!("  bad input lines skipped: {bad}");
    }
    let ran = counters.runs.load(Ordering::Relaxed);
    print!("pipeline ran {ran} items this time");
    if let Some(s) = &already {
        print!(
            " (expected {} = {} total - {} already succeeded)",
            s.total - s.succeeded,
            s.total,
            s.succeeded
        );
    }
    println!();
    println!(
        "  phases computed {}, answered from the memo {}",
        counters.computed.load(Ordering::Relaxed),
        counters.memo_hits.load(Ordering::Relaxed)
    );
    println!("output: {}", out_path.display());
    engine.shutdown().await?;
    Ok(())
}
