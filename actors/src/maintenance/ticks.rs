//! Periodic jobs at the bytes level: what one is ([`PeriodicSpec`]), its
//! durable record read or created, and a check of it: the ticks due fired,
//! each one's job enqueued with the record's new cursor in **one
//! transaction** (`Services::create_keyed_with`), so a tick is fired iff the
//! record says so.
//!
//! A tick's job is keyed by the periodic job's name and the tick's time
//! ([`keys::periodic_tick_key`]): an engine that fires a tick again (its
//! record was stale, or another engine fired it first) meets the tick's run
//! or outcome record and enqueues nothing; it only moves the record on.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{EngineError, Result, ScheduleError};
use crate::events::EngineEvent;
use crate::jobs::submit::SubmitRequest;
use crate::layout::keys;
use crate::layout::records::{self, PeriodicRecord};
use crate::maintenance::schedule::Schedule;
use crate::services::Services;

/// Makes the job of one tick, as a submission (its idempotency key and run
/// id are the engine's: set by the engine, whatever it returns). It should
/// make the same job for the same tick.
pub type MakeTick =
    Arc<dyn Fn(&Tick) -> std::result::Result<SubmitRequest, String> + Send + Sync + 'static>;

/// A periodic job: a job type submitted on a schedule.
#[derive(Clone)]
pub struct PeriodicSpec {
    /// Its name (1-128 characters of `[A-Za-z0-9_.-]`): the key of its
    /// record and part of each tick's job id.
    pub name: String,
    /// The job type each tick submits (registered on the engine).
    pub job_type: String,
    /// When it ticks, and what happens to missed ticks.
    pub schedule: Schedule,
    /// Makes a tick's job.
    pub make: MakeTick,
}

impl std::fmt::Debug for PeriodicSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeriodicSpec")
            .field("name", &self.name)
            .field("job_type", &self.job_type)
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

impl PeriodicSpec {
    /// Whether the name and the schedule are acceptable.
    pub fn check(&self) -> Result<()> {
        let invalid = |source| EngineError::InvalidSchedule {
            name: self.name.clone(),
            source,
        };
        if !keys::is_valid_periodic_name(&self.name) {
            return Err(invalid(ScheduleError::InvalidName(self.name.clone())));
        }
        self.schedule.check().map_err(invalid)
    }
}

/// One tick of a periodic job, as its `make_job` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// The periodic job's name.
    pub name: String,
    /// The tick's time, epoch ms (queue clock): when it was due, not when it
    /// fired.
    pub at_ms: u64,
    /// The id the tick's job will have ([`keyed_run_id`](keys::keyed_run_id)
    /// of [`periodic_tick_key`](keys::periodic_tick_key)).
    pub job_id: String,
}

impl Tick {
    /// The tick of periodic job `name` at `at_ms`.
    pub fn new(name: &str, at_ms: u64) -> Self {
        Self {
            name: name.to_string(),
            at_ms,
            job_id: keys::keyed_run_id(&keys::periodic_tick_key(name, at_ms)),
        }
    }

    /// The tick's time.
    pub fn at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.at_ms)
    }
}

/// A periodic record as last read or written, with its bytes (the compare
/// of the next write).
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub(crate) raw: Vec<u8>,
    pub(crate) record: PeriodicRecord,
}

/// What one check of a periodic job did.
#[derive(Debug)]
pub(crate) struct Checked {
    /// Its record as it now stands.
    pub(crate) loaded: Loaded,
    /// Ticks fired (jobs enqueued) by this check.
    pub(crate) fired: usize,
}

/// Rounds of a check that keeps finding its record changed under it.
const MAX_ROUNDS: usize = 16;

impl Services {
    /// The record of `spec`, created (its cursor at now: no tick before its
    /// first scheduling is due) if absent, and brought up to date with the
    /// schedule as registered now (its cursor kept).
    pub(crate) async fn load_periodic(&self, spec: &PeriodicSpec) -> Result<Loaded> {
        let queue = self.queue()?;
        let key = keys::periodic_key(&spec.name);
        for _ in 0..MAX_ROUNDS {
            let current = queue.view().kv_get(&key).await?;
            let (expected, record) = match &current {
                None => {
                    let now = self.clock().now_ms();
                    let record = PeriodicRecord {
                        name: spec.name.clone(),
                        job_type: spec.job_type.clone(),
                        schedule: spec.schedule.spec().clone(),
                        missed: spec.schedule.missed(),
                        cursor_ms: now,
                        last_fired_ms: None,
                        last_run_id: None,
                        fired: 0,
                        created_at_ms: now,
                    };
                    (None, record)
                }
                Some(raw) => {
                    let record: PeriodicRecord = records::decode(&key, raw)?;
                    let fresh = record.job_type == spec.job_type
                        && record.schedule == *spec.schedule.spec()
                        && record.missed == spec.schedule.missed();
                    if fresh {
                        return Ok(Loaded {
                            raw: raw.to_vec(),
                            record,
                        });
                    }
                    let record = PeriodicRecord {
                        job_type: spec.job_type.clone(),
                        schedule: spec.schedule.spec().clone(),
                        missed: spec.schedule.missed(),
                        ..record
                    };
                    (Some(raw.as_ref()), record)
                }
            };
            let raw = records::encode(&record)?;
            let effects = taquba::SettlementEffects::default().kv_put(key.clone(), raw.clone());
            if queue
                .kv_compare_commit(&[(&key, expected)], effects)
                .await?
                .is_some()
            {
                return Ok(Loaded { raw, record });
            }
        }
        Err(EngineError::Contended {
            operation: format!("the record of periodic job `{}`", spec.name),
        })
    }

    /// Check `spec` at the queue clock's now: load its record (unless
    /// `known`), fire the ticks due (see [`Schedule::due`]; `started_ms`:
    /// when this engine started), and move its cursor on.
    pub(crate) async fn check_periodic(
        &self,
        spec: &PeriodicSpec,
        known: Option<Loaded>,
        started_ms: u64,
    ) -> Result<Checked> {
        let mut loaded = match known {
            Some(known) => known,
            None => self.load_periodic(spec).await?,
        };
        let mut fired = 0;
        'rounds: for _ in 0..MAX_ROUNDS {
            let now = self.clock().now_ms();
            let due = spec.schedule.due(loaded.record.cursor_ms, now, started_ms);
            if due.fire.is_empty() {
                if due.cursor > loaded.record.cursor_ms {
                    let record = PeriodicRecord {
                        cursor_ms: due.cursor,
                        ..loaded.record.clone()
                    };
                    match self.move_periodic(spec, &loaded, record).await? {
                        Some(next) => loaded = next,
                        None => {
                            loaded = self.load_periodic(spec).await?;
                            continue 'rounds;
                        }
                    }
                }
                return Ok(Checked { loaded, fired });
            }
            for tick in due.fire {
                match self.fire_tick(spec, &loaded, tick).await? {
                    Fire::Fired(next) => {
                        fired += 1;
                        loaded = next;
                    }
                    Fire::AlreadyRan(next) => loaded = next,
                    Fire::Moved => {
                        loaded = self.load_periodic(spec).await?;
                        continue 'rounds;
                    }
                }
            }
            return Ok(Checked { loaded, fired });
        }
        Err(EngineError::Contended {
            operation: format!("a check of periodic job `{}`", spec.name),
        })
    }

    /// Fire the tick at `tick`: its job enqueued and the record moved to it,
    /// in one transaction that compares the record with `loaded`.
    async fn fire_tick(&self, spec: &PeriodicSpec, loaded: &Loaded, tick: u64) -> Result<Fire> {
        let info = Tick::new(&spec.name, tick);
        let mut request = make(spec, &info)?;
        request.idempotency_key = Some(keys::periodic_tick_key(&spec.name, tick));
        request.run_id = None;
        let record = PeriodicRecord {
            cursor_ms: tick,
            last_fired_ms: Some(tick),
            last_run_id: Some(info.job_id.clone()),
            ..loaded.record.clone()
        };
        let fired = PeriodicRecord {
            fired: record.fired.saturating_add(1),
            ..record.clone()
        };
        let key = keys::periodic_key(&spec.name);
        let raw = records::encode(&fired)?;
        for _ in 0..MAX_ROUNDS {
            let created = self
                .create_keyed_with(
                    &request,
                    &[(&key, Some(&loaded.raw))],
                    vec![(key.clone(), raw.clone())],
                )
                .await?;
            if created {
                tracing::debug!(name = %spec.name, tick_ms = tick, run_id = %info.job_id, "periodic tick fired");
                self.emit(EngineEvent::PeriodicFired {
                    name: spec.name.clone(),
                    tick_ms: tick,
                    run_id: info.job_id.clone(),
                });
                return Ok(Fire::Fired(Loaded { raw, record: fired }));
            }
            // Which compare failed: the record (someone moved it), or the
            // tick's run (it ran already: fired by an engine whose record
            // this one did not see).
            let current = self.queue()?.view().kv_get(&key).await?;
            if current.as_deref() != Some(loaded.raw.as_slice()) {
                return Ok(Fire::Moved);
            }
            if self.state(&info.job_id).await?.is_some() {
                tracing::info!(name = %spec.name, tick_ms = tick, run_id = %info.job_id, "periodic tick already ran; not run again");
                return Ok(match self.move_periodic(spec, loaded, record).await? {
                    Some(next) => Fire::AlreadyRan(next),
                    None => Fire::Moved,
                });
            }
            // Neither: the run's records went in between (retention); again.
        }
        Err(EngineError::Contended {
            operation: format!("the tick at {tick} of periodic job `{}`", spec.name),
        })
    }

    /// Write `record` over `loaded` (compare on its bytes); `None` if the
    /// record changed meanwhile.
    async fn move_periodic(
        &self,
        spec: &PeriodicSpec,
        loaded: &Loaded,
        record: PeriodicRecord,
    ) -> Result<Option<Loaded>> {
        let key = keys::periodic_key(&spec.name);
        let raw = records::encode(&record)?;
        let effects = taquba::SettlementEffects::default().kv_put(key.clone(), raw.clone());
        let moved = self
            .queue()?
            .kv_compare_commit(&[(&key, Some(&loaded.raw))], effects)
            .await?;
        Ok(moved.map(|_| Loaded { raw, record }))
    }
}

/// What firing one tick came to.
enum Fire {
    /// Its job was enqueued with the record.
    Fired(Loaded),
    /// Its job existed already; the record was moved on.
    AlreadyRan(Loaded),
    /// The record changed under this check: read it again.
    Moved,
}

/// The user's `make_job` for `tick`, a panic in it caught (it runs in an
/// engine task).
fn make(spec: &PeriodicSpec, tick: &Tick) -> Result<SubmitRequest> {
    let failed = |reason: String| EngineError::PeriodicMakeFailed {
        name: spec.name.clone(),
        tick_ms: tick.at_ms,
        reason,
    };
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (spec.make)(tick)))
        .map_err(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            failed(format!("make_job panicked: {what}"))
        })?
        .map_err(failed)?;
    if made.job_type != spec.job_type {
        return Err(failed(format!(
            "it made a `{}` job, not a `{}` job",
            made.job_type, spec.job_type
        )));
    }
    Ok(made)
}
