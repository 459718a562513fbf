//! The raw-queue child: taquba 0.16 alone (gaffer's queue), no engine:
//! enqueue N × 64-byte payloads (64 in flight), then claim and ack them
//! with `run_worker_concurrent` at concurrency `conc`; the floor the
//! engines are compared with.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::ChildArgs;
use crate::child::{BoxErr, s3_url, temp_dir};
use crate::kinds::{StoreKind, Workload};
use crate::meter::{COUNT, Meter, emit, set_phase};
use crate::plan::IN_FLIGHT;

/// The raw queue's worker: count, then let the loop ack.
struct Acker {
    done: AtomicUsize,
    n: usize,
    all_done: tokio::sync::Notify,
}

impl taquba::Worker for Acker {
    async fn process(
        &self,
        _job: &taquba::JobRecord,
        _lease: &taquba::LeaseHandle,
    ) -> Result<(), taquba::WorkerError> {
        let d = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        COUNT.store(d, Ordering::Relaxed);
        if d == self.n {
            self.all_done.notify_one();
        }
        Ok(())
    }
}

pub async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    use taquba::object_store::{ObjectStore, local::LocalFileSystem, memory::InMemory};
    let dir = temp_dir(a)?;
    let (store, path): (Arc<dyn ObjectStore>, String) = match a.store {
        StoreKind::Local => (
            Arc::new(LocalFileSystem::new_with_prefix(dir.path())?),
            "queue".into(),
        ),
        StoreKind::LocalFsync => (
            Arc::new(LocalFileSystem::new_with_prefix(dir.path())?.with_fsync(true)),
            "queue".into(),
        ),
        StoreKind::Memory => (Arc::new(InMemory::new()), "queue".into()),
        StoreKind::S3 => {
            let (store, path) = taquba::open_url(&s3_url(&dir)?, std::env::vars())?;
            (store, format!("{path}/queue"))
        }
    };
    let mut opts = taquba::OpenOptions::default();
    if let Some(f) = a.flush.interval() {
        opts = opts.flush_interval(f);
    }
    let queue = Arc::new(taquba::Queue::open_with_options(store, &path, opts).await?);
    if std::env::var_os("SBS_JOIN_EACH").is_some() {
        raw_join_each(a, queue).await?;
        set_phase("cleanup");
        drop(dir);
        return Ok(());
    }
    let m = Meter::start("raw_queue");
    // Enqueue N 64-byte payloads, 64 in flight.
    let enq: Vec<Result<String, taquba::Error>> = futures::stream::iter(0..a.n)
        .map(|i| {
            let q = &queue;
            async move {
                let payload = raw_payload(i);
                let r = q.enqueue("bench", payload).await;
                COUNT.fetch_add(1, Ordering::Relaxed);
                r
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for r in enq {
        r?;
    }
    let enqueue_s = m.start.elapsed().as_secs_f64();
    // Claim and ack them, `conc` at a time.
    let drain_start = Instant::now();
    let acker = Arc::new(Acker {
        done: AtomicUsize::new(0),
        n: a.n,
        all_done: tokio::sync::Notify::new(),
    });
    let stop = acker.clone();
    taquba::run_worker_concurrent(
        &queue,
        "bench",
        acker.clone(),
        a.conc,
        Duration::from_millis(100),
        async move { stop.all_done.notified().await },
    )
    .await?;
    let drain_s = drain_start.elapsed().as_secs_f64();
    let stats_ok = acker.done.load(Ordering::SeqCst) == a.n;
    let mut r = m.finish(
        a,
        Workload::RawQueue,
        stats_ok,
        if stats_ok {
            String::new()
        } else {
            format!("{} of {} processed", acker.done.load(Ordering::SeqCst), a.n)
        },
    );
    r.runs = acker.done.load(Ordering::SeqCst);
    r.enqueue_s = Some(enqueue_s);
    r.drain_s = Some(drain_s);
    emit(&r);
    set_phase("shutdown");
    match Arc::try_unwrap(queue) {
        Ok(q) => q.close().await?,
        Err(_) => eprintln!("queue still shared at close; dropped"),
    }
    set_phase("cleanup");
    drop(dir);
    Ok(())
}

/// The raw queue's job `i`: 64 bytes, `i` first.
fn raw_payload(i: usize) -> Vec<u8> {
    let mut payload = vec![0u8; 64];
    payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
    payload
}

/// `SBS_JOIN_EACH=1` on the raw queue: `conc` workers claim and ack while
/// IN_FLIGHT tasks each enqueue a job and wait for its completion before the
/// next (the raw counterpart of gaffer's join-each keyed run, #13 §4).
async fn raw_join_each(a: &ChildArgs, queue: Arc<taquba::Queue>) -> Result<(), BoxErr> {
    let m = Meter::start("raw_queue");
    let acker = Arc::new(Acker {
        done: AtomicUsize::new(0),
        n: a.n,
        all_done: tokio::sync::Notify::new(),
    });
    let stop = acker.clone();
    let worker = {
        let queue = queue.clone();
        let acker = acker.clone();
        let conc = a.conc;
        tokio::spawn(async move {
            taquba::run_worker_concurrent(
                &queue,
                "bench",
                acker,
                conc,
                Duration::from_millis(100),
                async move { stop.all_done.notified().await },
            )
            .await
        })
    };
    let keyed = std::env::var_os("SBS_RAW_KEYED").is_some();
    let waited: Vec<Result<bool, taquba::Error>> = futures::stream::iter(0..a.n)
        .map(|i| {
            let q = &queue;
            async move {
                let payload = raw_payload(i);
                let id = if keyed {
                    // SBS_RAW_KEYED=1: as a keyed gaffer submission commits
                    // (a compare that a fresh key is absent, a record put
                    // there and kept, a caller-chosen job id), with none of
                    // gaffer's other work.
                    let id = q.next_job_id();
                    let key = format!("bench/{i}").into_bytes();
                    let fx = taquba::SettlementEffects::default()
                        .kv_put(key.clone(), vec![0u8; 64])
                        .enqueue(taquba::EnqueueRequest {
                            queue: "bench".into(),
                            payload,
                            options: taquba::EnqueueOptions::default().id_override(id.clone()),
                        });
                    if q.kv_compare_commit(&[(&key, None)], fx).await?.is_none() {
                        return Ok(false);
                    }
                    id
                } else {
                    q.enqueue("bench", payload).await?
                };
                let done = matches!(
                    q.wait_for_completion(&id).await?,
                    taquba::WaitOutcome::Done(_) | taquba::WaitOutcome::NotFound
                );
                Ok(done)
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let all = waited
        .into_iter()
        .try_fold(true, |all, w| w.map(|done| all && done))?;
    worker.await??;
    let ok = all && acker.done.load(Ordering::SeqCst) == a.n;
    let mut r = m.finish(a, Workload::RawQueue, ok, String::new());
    r.runs = acker.done.load(Ordering::SeqCst);
    emit(&r);
    set_phase("shutdown");
    match Arc::try_unwrap(queue) {
        Ok(q) => q.close().await?,
        Err(_) => eprintln!("queue still shared at close; dropped"),
    }
    Ok(())
}
