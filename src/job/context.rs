//! `JobContext`: what a running job can reach.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use taquba::LeaseHandle;
use tokio_util::sync::CancellationToken;

use gaffer_actors::Delivery;
use gaffer_actors::erased::CompletedBatch;
use gaffer_actors::exec::effects::Effects;
use gaffer_actors::exec::suspend::Pause;
use gaffer_actors::layout::records::from_msgpack;
use gaffer_actors::layout::records::{SleepRecord, WaitRecord};

use crate::error::{Error, Result};
use crate::job::handle::JobHandle;
use crate::job::state::StateMap;
use crate::job::submit::{SubmitOptions, submit_request, submit_typed};
use crate::job::typed::Job;

mod deps;

/// The context of one delivery of a job: its id and attempt, the application
/// state, the lease, the cancel token, the memo, the effects, KV reads and
/// child submissions.
#[derive(Debug)]
pub struct JobContext {
    delivery: Delivery,
    state: Arc<StateMap>,
    /// The sleeps this attempt made: the next one's place in the run's.
    sleeps: AtomicU32,
    /// The steps this workflow step needs, once read (`dep`, `deps`).
    declared: std::sync::OnceLock<std::collections::HashSet<String>>,
}

impl JobContext {
    pub(crate) fn new(delivery: Delivery, state: Arc<StateMap>) -> Self {
        Self {
            delivery,
            state,
            sleeps: AtomicU32::new(0),
            declared: std::sync::OnceLock::new(),
        }
    }

    /// Registered application state of type `T`.
    ///
    /// # Panics
    /// If no state of exactly type `T` was registered on the builder: that is a
    /// wiring mistake in the program, not bad input. Use
    /// [`try_state`](Self::try_state) to handle absence.
    pub fn state<T: Any + Send + Sync>(&self) -> &T {
        match self.try_state::<T>() {
            Some(v) => v,
            None => panic!(
                "no application state of type `{}` registered on the engine builder",
                std::any::type_name::<T>()
            ),
        }
    }

    /// Registered application state of type `T`, if any.
    pub fn try_state<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.state
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }

    /// The job's id (the same as its handle's).
    pub fn id(&self) -> &str {
        &self.delivery.run_id
    }

    /// This delivery's attempt, 1-based, as gaffer counts them: an attempt
    /// cut short by a process exit is not counted.
    pub fn attempt(&self) -> u32 {
        self.delivery.attempt
    }

    /// The job's attempt limit.
    pub fn max_attempts(&self) -> u32 {
        self.delivery.max_attempts
    }

    /// Whether a transient failure of this attempt ends the job.
    pub fn is_last_attempt(&self) -> bool {
        self.delivery.attempt >= self.delivery.max_attempts
    }

    /// Headers given at submission.
    pub fn headers(&self) -> &HashMap<String, String> {
        &self.delivery.headers
    }

    /// Fires when the job is cancelled (or the engine's store closes), and
    /// when the attempt runs past its timeout ([`JobOptions::timeout`],
    /// [`SubmitOptions::timeout`]). Stop early when it does: whatever a
    /// cancelled job then returns is recorded as cancelled; an attempt past
    /// its timeout is dropped at once (the token is for the tasks it
    /// spawned) and counts as a failed attempt.
    ///
    /// [`JobOptions::timeout`]: crate::JobOptions::timeout
    /// [`SubmitOptions::timeout`]: crate::SubmitOptions::timeout
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.delivery.cancel
    }

    /// The lease of this delivery. The engine keeps it alive while the job
    /// runs (every third of the queue's lease), so a long job needs nothing
    /// here; `lease().ensure_at_least(d)` asks for more than a lease ahead
    /// (say, before a call that may block the runtime), never less.
    pub fn lease(&self) -> &LeaseHandle {
        &self.delivery.lease
    }

    /// The job's memo: results kept across its retries.
    pub fn memo(&self) -> Memo {
        Memo {
            inner: self.delivery.memo.clone(),
        }
    }

    /// KV writes applied atomically with the job's successful settlement, and
    /// never otherwise. Keys under `gaffer/` are reserved.
    pub fn effects(&self) -> &Effects {
        &self.delivery.effects
    }

    /// A committed value of the queue's KV namespace (this job's staged effects
    /// are not visible).
    pub async fn kv_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.delivery.engine.kv_get(key.to_vec()).await
    }

    /// Wait durably for the signal `name` ([`Engine::signal`](crate::Engine::signal),
    /// `Client::signal`, `gaffer signal`), for at most `timeout`, and answer
    /// its payload.
    ///
    /// The wait holds no worker: when the signal has not come, this attempt
    /// ends here (the code after the wait does not run now, and the
    /// attempt is not spent), the job is **waiting** (`JobState::Waiting`),
    /// and it runs again from the top when the signal comes or the timeout
    /// passes, across restarts and crashes. On that run this call answers
    /// at once, so code reads top to bottom; make the steps before it
    /// memoized ([`memo`](Self::memo)) or idempotent, since they run again.
    /// A signal sent while the job still runs (before its wait) is kept and
    /// answers the wait at once. Several waits with different names follow
    /// one another (an approval, then a payment); a name is one signal per
    /// run (the first sent stands).
    ///
    /// Errors: [`Error::SignalTimeout`](crate::Error::SignalTimeout) once
    /// `timeout` passed (measured from the first wait on this name, retries
    /// included) without the signal; `Error::Decode` when the payload is not
    /// an `S`; `Error::InvalidSignalName` for a name not of 1-128
    /// characters of `[A-Za-z0-9_.-]`. In a batch item a wait fails the
    /// item (an item has no id to signal).
    pub async fn wait_signal<S: DeserializeOwned>(
        &self,
        name: &str,
        timeout: std::time::Duration,
    ) -> Result<S> {
        if !gaffer_actors::layout::keys::is_valid_signal_name(name) {
            return Err(crate::Error::InvalidSignalName(name.to_string()));
        }
        let key = gaffer_actors::layout::keys::signal_key(&self.delivery.run_id, name);
        if let Some(bytes) = self.delivery.engine.kv_get(key).await? {
            return from_msgpack(&bytes)
                .map_err(|e| crate::Error::decode(format!("signal `{name}`"), e));
        }
        let now = self.delivery.engine.now_ms();
        let until_ms = match &self.delivery.wait {
            // Its deadline stands across the run's retries.
            Some(wait) if wait.name == name => wait.until_ms,
            _ => now.saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
        };
        if now >= until_ms {
            return Err(crate::Error::SignalTimeout {
                name: name.to_string(),
            });
        }
        let wait = WaitRecord {
            name: name.to_string(),
            until_ms,
            since_ms: now,
        };
        self.delivery.suspend.suspend(Pause::Signal(wait)).await
    }

    /// Sleep durably for `duration`: a reminder an hour on, a grace period,
    /// a slow partner polled again tomorrow.
    ///
    /// The sleep holds no worker and spends no attempt: this attempt ends
    /// here (the code after it does not run now), the job is scheduled for
    /// the sleep's end (`JobState::Scheduled`; `gaffer job` and the
    /// dashboard show "sleeping until"), and it then runs again from the
    /// top, across restarts and crashes, where this call answers at once.
    /// As with [`wait_signal`](Self::wait_signal), make the steps before it
    /// memoized ([`memo`](Self::memo)) or idempotent, since they run again.
    ///
    /// A run's sleeps are told apart by their order: the first `sleep` the
    /// code reaches is the run's sleep 0, the next one sleep 1, and so on,
    /// so a run that reaches its sleep 2 answers sleeps 0 and 1 at once.
    /// Keep the order the same on every run (sleep on every path, or on
    /// none; a loop that sleeps a varying number of times before a sleep
    /// moves the later one). Its end stands across retries: a failure after
    /// a sleep does not sleep again. A zero `duration` answers at once. A
    /// cancel while it sleeps cancels the job. In a batch item a sleep
    /// fails the item (an item has no run record to sleep in).
    ///
    /// For "not now, try again later" (the whole job again, not the code
    /// after a point), [`snooze`](Self::snooze) says it better.
    pub async fn sleep(&self, duration: Duration) {
        let index = self.sleeps.fetch_add(1, Ordering::Relaxed);
        let now = self.delivery.engine.now_ms();
        let sleep = match self.delivery.sleep {
            // An earlier sleep of the run: it ended before this run began.
            Some(latest) if index < latest.index => return,
            // The run's latest sleep: at its end, or not yet (a signal or a
            // retry ran the job early).
            Some(latest) if index == latest.index => latest,
            _ if duration.is_zero() => return,
            _ => SleepRecord {
                index,
                until_ms: now
                    .saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
                since_ms: now,
            },
        };
        if now >= sleep.until_ms {
            return;
        }
        self.delivery.suspend.suspend(Pause::Sleep(sleep)).await
    }

    /// How many times this job's run has snoozed ([`snooze`](Self::snooze))
    /// before this attempt: 0 on its first.
    pub fn snoozes(&self) -> u32 {
        self.delivery.snoozes
    }

    /// Not now: end this attempt and run the job again from the top after
    /// `delay`, without spending an attempt (River's `JobSnooze`, Oban's
    /// `{:snooze, n}`), for a job that finds its resource busy, a partner
    /// not ready, a lock taken.
    ///
    /// It never returns (its type is `!`, which fits any branch):
    /// `if busy { ctx.snooze(Duration::from_secs(30)).await }` ends the
    /// attempt where it stands. The job is put back in the
    /// settlement's own transaction, scheduled `delay` ahead, its run's
    /// snooze count one more (shown by `gaffer job` and the dashboard). A
    /// job may snooze at most its type's
    /// [`JobOptions::max_snoozes`](crate::JobOptions::max_snoozes) times
    /// (default [`Settings::max_snoozes`](crate::Settings::max_snoozes),
    /// 1000): the snooze after that fails it permanently, its error saying
    /// so. A cancel asked during the attempt cancels it instead. Memoized
    /// steps keep their memo across a snooze; sleeps that ended stay
    /// ended. In a batch item a snooze fails the item.
    pub async fn snooze(&self, delay: Duration) -> ! {
        let now = self.delivery.engine.now_ms();
        let pause = Pause::Snooze {
            until_ms: now.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            limit: self.delivery.max_snoozes,
        };
        self.delivery.suspend.suspend(pause).await
    }

    /// Submit another job now. It is independent of this one: it runs even if
    /// this job fails, and a retry of this job submits it again unless it has an
    /// idempotency key.
    ///
    /// This job may await it (`handle.await`): while it waits, its worker slot
    /// is given back to its type (the pool runs one more job meanwhile), so
    /// parents awaiting children complete at any concurrency, even when the
    /// children are of the parent's own type. If the engine shuts down during
    /// the wait, the wait ends with `ShutDown` and this job can fail (it runs
    /// again after the next start). Await in this job's own task: a wait in a
    /// task it spawns does not give the slot back. If this job is cancelled
    /// while it waits, the wait ends with
    /// [`Error::WaiterCancelled`](crate::Error::WaiterCancelled) and the
    /// awaited job is cancelled with it (a queued one at once, a running one
    /// asked to stop); children it submitted and does not await run on.
    pub async fn submit<J: Job>(&self, job: J) -> Result<JobHandle<J>> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options.
    pub async fn submit_with<J: Job>(&self, job: J, opts: SubmitOptions) -> Result<JobHandle<J>> {
        submit_typed(&self.delivery.engine, job, opts).await
    }

    /// A handle on the job with this id (from [`JobHandle::id`]), as
    /// [`Engine::handle`](crate::Engine::handle) gives: its `join`,
    /// `outcome`, `status` and `cancel`, from inside this job (a `join`
    /// gives this job's worker slot back while it waits, as for a child
    /// it submitted). Checks the id's form, not that the job exists.
    pub fn handle<J: Job>(&self, id: &str) -> Result<JobHandle<J>> {
        if !gaffer_actors::layout::keys::is_valid_id(id) {
            return Err(crate::Error::InvalidJobId(id.to_string()));
        }
        Ok(JobHandle::new(
            id.to_string(),
            false,
            self.delivery.engine.clone(),
        ))
    }

    /// The workflow step this job is (its workflow's id and its name), if
    /// it is one.
    pub fn workflow_step(&self) -> Option<(&str, &str)> {
        self.delivery
            .step
            .as_ref()
            .map(|s| (s.workflow.as_str(), s.step.as_str()))
    }

    /// The batch run this job completes, when it is a batch's completion
    /// job ([`Batch::on_complete`](crate::Batch::on_complete)): the batch id,
    /// the run's generation and its counts. `None` for any other job.
    pub fn completed_batch(&self) -> Option<&CompletedBatch> {
        self.delivery.completes.as_ref()
    }

    /// A follow-up: `job` is created if, and only if, this job succeeds, in
    /// the same transaction that records the success (with its run record,
    /// like [`effects`](Self::effects)). A failed attempt's follow-ups are
    /// dropped, a retry stages its own, and a crash after the success
    /// commit cannot lose one: the follow-up exists exactly once.
    ///
    /// Returns the id the follow-up will have (derived from this job's id
    /// and the follow-up's position among this attempt's follow-ups): after
    /// this job succeeds, [`Engine::handle`](crate::Engine::handle) on it
    /// gives its handle; the parent's [`JobHandle::followups`] lists them.
    /// `job`'s idempotency key is not used (the parent's success is what
    /// makes it one job). Fails at once if `J` is not registered or a header
    /// is reserved.
    pub fn then<J: Job>(&self, job: J) -> Result<String> {
        self.then_with(job, SubmitOptions::default())
    }

    /// [`then`](Self::then) with options (`run_at` delays the follow-up).
    pub fn then_with<J: Job>(&self, job: J, opts: SubmitOptions) -> Result<String> {
        self.delivery.engine.check_job_type(J::NAME)?;
        let request = submit_request(&job, opts)?;
        self.delivery.effects.then(&self.delivery.run_id, request)
    }
}

/// A job's memo: values kept across its retries, by key (any string).
///
/// Wrap a step whose result a retry should reuse in
/// [`memoized`](Self::memoized). Within an attempt, a `get` sees that
/// attempt's own `put`s. When entries reach the store is the engine's
/// [`MemoWrites`](crate::job::MemoWrites) setting: by default when the attempt
/// fails (or panics, or is cut off by the shutdown grace period), never when it
/// succeeds, since the outcome then answers; with `MemoWrites::Immediate`, at
/// each `put`.
#[derive(Debug, Clone)]
pub struct Memo {
    inner: gaffer_actors::exec::memo::Memo,
}

impl Memo {
    pub(crate) fn from_inner(inner: gaffer_actors::exec::memo::Memo) -> Self {
        Self { inner }
    }

    /// The raw entry at `key`.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key).await
    }

    /// Write the raw entry at `key`.
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<()> {
        self.inner.put(key, value).await
    }

    /// The value memoized at `key`, or compute it with `f` and memoize it. A
    /// failed computation stores nothing; an entry that no longer decodes is
    /// recomputed and overwritten.
    pub async fn memoized<T, E, F, Fut>(&self, key: &str, f: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if let Some(bytes) = self.get(key).await?
            && let Ok(value) = from_msgpack::<T>(&bytes)
        {
            return Ok(value);
        }
        let value = f().await?;
        let bytes = rmp_serde::to_vec_named(&value)
            .map_err(|e| Error::encode(format!("memo `{key}`"), e))?;
        self.put(key, bytes).await?;
        Ok(value)
    }

    /// [`memoized`](Self::memoized) under [`content_key`](Self::content_key)`(input)`.
    pub async fn memoized_by_content<I, T, E, F, Fut>(&self, input: &I, f: F) -> Result<T, E>
    where
        I: Serialize,
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = Self::content_key(input)?;
        self.memoized(&key, f).await
    }

    /// `"content:" + hex sha256(msgpack(input))`.
    pub fn content_key<I: Serialize>(input: &I) -> Result<String> {
        let bytes =
            rmp_serde::to_vec_named(input).map_err(|e| Error::encode("memo content key", e))?;
        Ok(format!(
            "content:{}",
            gaffer_actors::layout::keys::hex_sha256(&bytes)
        ))
    }
}
