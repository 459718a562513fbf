//! Periodic: the actor that fires periodic jobs' ticks. It owns, for each
//! periodic job scheduled on this engine, its record as last read or
//! written, when its next tick is due and its failures; the supervisor owns
//! the list of periodic jobs (so a restarted `Periodic` gets them all back)
//! and tells it of ones added or removed at run time.
//!
//! Its timer (re-armed after each check, so ticks never pile up) wakes it
//! when the next tick is due, and at least every poll interval, since the
//! queue's clock can jump (a host that slept, a test's mock clock): due
//! ticks are decided on the queue's clock, never on when the engine
//! started. A check of the periodic jobs due runs in a task (the actor never
//! awaits inside `handle`): each one's ticks are fired by
//! `Services::check_periodic`, which enqueues a tick's job and moves the
//! record in one transaction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::warn;

use crate::error::{EngineError, Result};
use crate::maintenance::ticks::{Checked, Loaded, PeriodicSpec};
use crate::services::Services;

/// A caller waiting for a check: how many ticks it fired.
type CheckReply = RpcReplyPort<Result<usize>>;

/// Messages of the periodic actor.
#[derive(Debug)]
pub(crate) enum PeriodicMessage {
    /// The timer: check the periodic jobs that are due.
    Check,
    /// Check every periodic job now (whatever its timer says) and answer
    /// how many ticks fired.
    CheckNow(CheckReply),
    /// A periodic job added at run time (checked by the supervisor).
    Add(Box<PeriodicSpec>),
    /// A periodic job removed at run time.
    Remove(String),
    /// A check finished: each periodic job it checked, and what came of it.
    Checked(Vec<(String, std::result::Result<Checked, EngineError>)>),
}

/// The typed handle of the periodic actor, for its supervisor.
#[derive(Debug, Clone)]
pub(crate) struct PeriodicRef(pub(crate) ActorRef<PeriodicMessage>);

impl PeriodicRef {
    #[cfg(feature = "testing")]
    /// The actor's cell.
    pub(crate) fn get_cell(&self) -> ractor::ActorCell {
        self.0.get_cell()
    }

    pub(crate) fn check_now(&self, reply: CheckReply) {
        let _ = self.0.cast(PeriodicMessage::CheckNow(reply));
    }

    pub(crate) fn add(&self, spec: PeriodicSpec) {
        let _ = self.0.cast(PeriodicMessage::Add(Box::new(spec)));
    }

    pub(crate) fn remove(&self, name: String) {
        let _ = self.0.cast(PeriodicMessage::Remove(name));
    }
}

/// Arguments of the periodic actor.
#[derive(Debug)]
pub(crate) struct PeriodicArguments {
    /// Engine services.
    pub services: Arc<Services>,
    /// The periodic jobs scheduled on this engine.
    pub schedules: Vec<PeriodicSpec>,
    /// When this engine started (queue clock, epoch ms): ticks due at or
    /// before it were missed.
    pub started_ms: u64,
}

/// The periodic actor.
#[derive(Debug)]
pub(crate) struct Periodic;

/// One periodic job, as the actor knows it.
#[derive(Debug)]
struct Entry {
    spec: PeriodicSpec,
    /// Its record as last read or written (`None`: read it at the next
    /// check).
    known: Option<Loaded>,
    /// When its next tick is due (queue clock, epoch ms); `None`: never.
    next_due: Option<u64>,
    /// Checks in a row that failed, and when to try again.
    failures: u32,
    retry_at: Option<Instant>,
}

impl Entry {
    fn new(spec: PeriodicSpec) -> Self {
        Self {
            spec,
            known: None,
            next_due: None,
            failures: 0,
            retry_at: None,
        }
    }

    /// Whether a check at `now` (queue clock) and `instant` (tokio time)
    /// has anything to do for it.
    fn due(&self, now: u64, instant: Instant) -> bool {
        if self.retry_at.is_some_and(|at| at > instant) {
            return false;
        }
        self.known.is_none() || self.next_due.is_some_and(|due| due <= now)
    }

    /// How long until it is due, from `now` and `instant`.
    fn wait(&self, now: u64, instant: Instant) -> Option<Duration> {
        if let Some(at) = self.retry_at {
            return Some(at.saturating_duration_since(instant));
        }
        if self.known.is_none() {
            return Some(Duration::ZERO);
        }
        self.next_due
            .map(|due| Duration::from_millis(due.saturating_sub(now)))
    }
}

/// State of the periodic actor.
#[derive(Debug)]
pub(crate) struct PeriodicState {
    services: Arc<Services>,
    started_ms: u64,
    entries: BTreeMap<String, Entry>,
    /// A check is in flight.
    in_flight: bool,
    /// A check is owed once the one in flight ends.
    owed: bool,
    /// The armed timer (aborted when re-armed).
    timer: Option<
        tokio::task::JoinHandle<std::result::Result<(), ractor::MessagingErr<PeriodicMessage>>>,
    >,
    /// Callers answered when the check in flight ends.
    current: Vec<CheckReply>,
    /// Callers whose check has not started yet.
    next: Vec<CheckReply>,
}

/// Longest pause before a periodic job whose check failed is tried again.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// First pause before a periodic job whose check failed is tried again.
const RETRY_BASE: Duration = Duration::from_millis(100);

impl PeriodicState {
    /// Start a check of the periodic jobs due (all of them when `forced`),
    /// unless one is in flight.
    fn check(&mut self, myself: &ActorRef<PeriodicMessage>, forced: bool) {
        if self.in_flight {
            self.owed = true;
            return;
        }
        let now = self.services.clock().now_ms();
        let instant = Instant::now();
        let due: Vec<(PeriodicSpec, Option<Loaded>)> = self
            .entries
            .values()
            .filter(|e| forced || e.due(now, instant))
            .map(|e| (e.spec.clone(), e.known.clone()))
            .collect();
        if due.is_empty() {
            for reply in std::mem::take(&mut self.next) {
                let _ = reply.send(Ok(0));
            }
            self.arm(myself);
            return;
        }
        self.in_flight = true;
        self.current = std::mem::take(&mut self.next);
        let services = self.services.clone();
        let started_ms = self.started_ms;
        let me = myself.clone();
        // The check runs in a reported task (`crate::task`), so that even a
        // panic in it ends the check (as an error) rather than leave the
        // actor waiting.
        let names: Vec<String> = due.iter().map(|(s, _)| s.name.clone()).collect();
        let check = async move {
            #[cfg(feature = "testing")]
            crate::testing::panics::check(
                crate::testing::panics::PanicPoint::PeriodicCheck,
                &services.settings().queue_name,
            );
            let mut results = Vec::with_capacity(due.len());
            for (spec, known) in due {
                let checked = services.check_periodic(&spec, known, started_ms).await;
                results.push((spec.name, checked));
            }
            results
        };
        crate::task::spawn_reported(check, move |ended| {
            let results = match ended {
                Ok(results) => results,
                Err(e) => names
                    .into_iter()
                    .map(|name| {
                        let failed = EngineError::Internal {
                            doing: "checking periodic jobs",
                            reason: e.to_string(),
                        };
                        (name, Err(failed))
                    })
                    .collect(),
            };
            let _ = me.cast(PeriodicMessage::Checked(results));
        });
    }

    /// A check ended: keep what it found, answer its callers, re-arm.
    fn checked(
        &mut self,
        myself: &ActorRef<PeriodicMessage>,
        results: Vec<(String, std::result::Result<Checked, EngineError>)>,
    ) {
        let mut fired = 0;
        let mut first_error = None;
        let instant = Instant::now();
        for (name, result) in results {
            // Removed meanwhile: nothing to keep.
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            match result {
                Ok(checked) => {
                    fired += checked.fired;
                    entry.next_due = entry
                        .spec
                        .schedule
                        .next_after(checked.loaded.record.cursor_ms);
                    entry.known = Some(checked.loaded);
                    entry.failures = 0;
                    entry.retry_at = None;
                }
                Err(e) => {
                    if !matches!(e, EngineError::ShutDown) {
                        warn!(periodic = %name, error = %e, "a check of a periodic job failed; trying again");
                    }
                    entry.known = None;
                    entry.failures = entry.failures.saturating_add(1);
                    let pause = RETRY_BASE
                        .saturating_mul(1 << entry.failures.min(16))
                        .min(RETRY_MAX);
                    entry.retry_at = Some(instant + pause);
                    first_error.get_or_insert(e);
                }
            }
        }
        let answer = match first_error {
            Some(e) => Err(e),
            None => Ok(fired),
        };
        for reply in self.current.drain(..) {
            let _ = reply.send(answer.clone());
        }
        self.in_flight = false;
        if !self.next.is_empty() {
            self.check(myself, true);
        } else if std::mem::take(&mut self.owed) {
            self.check(myself, false);
        } else {
            self.arm(myself);
        }
    }

    /// Arm the timer for the next periodic job due, at most a poll interval
    /// away (the queue's clock may jump meanwhile). None without periodic
    /// jobs.
    fn arm(&mut self, myself: &ActorRef<PeriodicMessage>) {
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
        let now = self.services.clock().now_ms();
        let instant = Instant::now();
        let Some(wait) = self
            .entries
            .values()
            .filter_map(|e| e.wait(now, instant))
            .min()
        else {
            return;
        };
        let wait = wait.min(self.services.settings().poll_interval);
        self.timer = Some(myself.send_after(wait, || PeriodicMessage::Check));
    }
}

impl Actor for Periodic {
    type Msg = PeriodicMessage;
    type State = PeriodicState;
    type Arguments = PeriodicArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: PeriodicArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let entries = args
            .schedules
            .into_iter()
            .map(|spec| (spec.name.clone(), Entry::new(spec)))
            .collect::<BTreeMap<_, _>>();
        if !entries.is_empty() {
            let _ = myself.cast(PeriodicMessage::Check);
        }
        Ok(PeriodicState {
            services: args.services,
            started_ms: args.started_ms,
            entries,
            in_flight: false,
            owed: false,
            timer: None,
            current: Vec::new(),
            next: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PeriodicMessage::Check => state.check(&myself, false),
            PeriodicMessage::CheckNow(reply) => {
                state.next.push(reply);
                state.check(&myself, true);
            }
            PeriodicMessage::Add(spec) => {
                state.entries.insert(spec.name.clone(), Entry::new(*spec));
                state.check(&myself, false);
            }
            PeriodicMessage::Remove(name) => {
                state.entries.remove(&name);
                if !state.in_flight {
                    state.arm(&myself);
                }
            }
            PeriodicMessage::Checked(results) => state.checked(&myself, results),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        Ok(())
    }
}
