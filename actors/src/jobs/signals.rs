//! Signals: a durable wait for an outside event, and the sending of one.
//!
//! A job waits with `JobContext::wait_signal(name, timeout)`. A signal is
//! kept in the job's signals (`gaffer/v1/signals/{run_id}/{name}`) from
//! when it is sent until the job ends, so a wait finds it however the two
//! interleave; taquba's own `signal` moves a waiting job (a scheduled job
//! enqueued with `signal_wait`) to pending, but never holds a signal for a
//! wait that has not committed yet. The order that loses none:
//!
//! 1. the sender writes the signal (durable), then signals the queue job;
//! 2. a wait first reads the job's signals: one already there answers at
//!    once;
//! 3. otherwise the attempt ends and its settlement commits the wait, then
//!    reads the job's signals again and signals the job itself if one is
//!    there now.
//!
//! A signal sent before the wait's read is found by it (2); one sent after
//! the wait committed finds the job waiting (1); one sent between the two
//! found the job not waiting (its `signal` changed nothing) but was written
//! before the settlement's second read, which delivers it (3). A crash
//! between the wait's commit and that read leaves a waiting job with its
//! signal in the store: the next start delivers it
//! (`Services::deliver_held_signals`).

use futures_util::TryStreamExt;
use taquba::{KvOrder, SignalOutcome};

use crate::error::{EngineError, Result};
use crate::jobs::submit::check_id;
use crate::layout::records::{self, RunRecord};
use crate::layout::{inspect, keys};
use crate::services::Services;

/// Writes of one signal tried before it is refused as contended (each
/// lost only to a change of the run's record: a wait, a retry).
const SIGNAL_TRIES: u32 = 16;

/// What a signal came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signalled {
    /// The job was waiting for it: it runs again now.
    Delivered,
    /// The job is queued or running: its wait for the signal will find it
    /// at once.
    Held,
    /// The job already had a signal of this name: the first one stands.
    AlreadySent,
}

/// What a signal came to, in words (what a client's request records).
pub(crate) fn describe(signalled: Signalled, run_id: &str, name: &str) -> String {
    match signalled {
        Signalled::Delivered => format!("signal `{name}` delivered: `{run_id}` runs again"),
        Signalled::Held => {
            format!("signal `{name}` kept for `{run_id}`: its wait for it answers at once")
        }
        Signalled::AlreadySent => {
            format!("`{run_id}` already had a signal `{name}`: the first one stands")
        }
    }
}

/// What a sender is told: `AlreadySent` unless its write of the signal won
/// (the first of its name for the run); the winner `Delivered` if its nudge
/// moved the waiting job, else `Held` (the job is queued, running, or was
/// moved by another sender's nudge: its wait reads this payload).
fn answer(written: bool, outcome: SignalOutcome) -> Signalled {
    match (written, outcome) {
        (false, _) => Signalled::AlreadySent,
        (true, SignalOutcome::Delivered) => Signalled::Delivered,
        (true, SignalOutcome::NotWaiting) => Signalled::Held,
    }
}

impl Services {
    /// Send the signal `name` with `payload` to the job `run_id`.
    ///
    /// Refused with [`EngineError::JobNotFound`] (no such job),
    /// [`EngineError::JobEnded`] (it ended; a signal to it would never be
    /// read) or [`EngineError::WaitingForAnotherSignal`] (it waits for a
    /// signal of another name now).
    pub async fn signal(&self, run_id: &str, name: &str, payload: Vec<u8>) -> Result<Signalled> {
        self.signal_from(run_id, name, payload, None).await
    }

    /// [`signal`](Self::signal) from a sender that names itself (`sender`: a
    /// client request's id): the signal and its sender are written in one
    /// transaction, so the same sender sending again (the intake applying
    /// its request twice, after a crash between the signal and its ack) is
    /// answered as the one whose signal stands, and any other as
    /// `AlreadySent`.
    pub async fn signal_from(
        &self,
        run_id: &str,
        name: &str,
        payload: Vec<u8>,
        sender: Option<&str>,
    ) -> Result<Signalled> {
        check_id(run_id)?;
        if !keys::is_valid_signal_name(name) {
            return Err(EngineError::InvalidSignalName(name.to_string()));
        }
        // Kept sealed under the engine's keyring (opened by the wait's read).
        let payload = self.keyring().seal_vec(payload)?;
        if payload.len() > taquba::MAX_KV_VALUE_SIZE {
            return Err(EngineError::ValueTooLarge {
                size: payload.len(),
                max: taquba::MAX_KV_VALUE_SIZE,
            });
        }
        let queue = self.queue()?;
        let view = queue.view();
        let key = keys::signal_key(run_id, name);
        let from = keys::signal_sender_key(run_id, name);
        let run_key = keys::run_key(run_id);
        // The first signal of a name stands: a wait that already read it
        // must not see another payload on its next run. It is written only
        // while the run lives (its record unchanged since read): a signal
        // written after the run ended would stand for nobody, and its
        // sender would be told it stood beside the one the job read.
        let mut tries = 0;
        let (run, written) = loop {
            let Some(raw) = view.kv_get(&run_key).await? else {
                return Err(match inspect::outcome_record(view, run_id).await? {
                    Some(_) => EngineError::JobEnded(run_id.to_string()),
                    None => self.unknown(run_id).await,
                });
            };
            let run: RunRecord = records::decode(&run_key, &raw)?;
            self.check_waiting_for(&run, run_id, name).await?;
            if tries > 0 && view.kv_get(&key).await?.is_some() {
                // Another sender's signal stands, or this sender's own (its
                // request applied twice).
                let own = match sender {
                    Some(sender) => view
                        .kv_get(&from)
                        .await?
                        .is_some_and(|s| s.as_ref() == sender.as_bytes()),
                    None => false,
                };
                break (run, own);
            }
            tries += 1;
            if tries > SIGNAL_TRIES {
                return Err(EngineError::Contended {
                    operation: format!("the signal `{name}` to `{run_id}`"),
                });
            }
            let mut fx = taquba::SettlementEffects::default().kv_put(key.clone(), payload.clone());
            if let Some(sender) = sender {
                fx = fx.kv_put(from.clone(), sender.as_bytes().to_vec());
            }
            let compares: [(&[u8], Option<&[u8]>); 2] = [(&key, None), (&run_key, Some(&raw))];
            if queue.kv_compare_commit(&compares, fx).await?.is_some() {
                break (run, true);
            }
            // A compare failed: the signal is there now, or the run changed
            // (a wait, a retry) or ended; read both again.
        };
        // Every sender nudges the job (a winner that died between its write
        // and its nudge leaves the job waiting with its signal kept: a
        // later sender's nudge delivers it), but only the sender whose write
        // won is told its payload stands. Which sender's nudge moved the job
        // says nothing about whose payload it will read.
        let outcome = queue.signal(&run.job_id, Vec::new()).await?;
        Ok(answer(written, outcome))
    }

    /// Refuse a signal of another name than the one `run` waits for now.
    async fn check_waiting_for(&self, run: &RunRecord, run_id: &str, name: &str) -> Result<()> {
        if let Some(wait) = &run.wait
            && wait.name != name
            && self
                .queue()?
                .view()
                .job_record(&run.job_id)
                .await?
                .is_some_and(|job| job.signal_wait)
        {
            return Err(EngineError::WaitingForAnotherSignal {
                run_id: run_id.to_string(),
                waiting: wait.name.clone(),
                sent: name.to_string(),
            });
        }
        Ok(())
    }

    /// The keys of the signals a run holds (read when a run that waited
    /// ends, to remove them with it).
    pub(crate) async fn signal_keys(&self, run_id: &str) -> Result<Vec<Vec<u8>>> {
        let queue = self.queue()?;
        let prefix = keys::signals_prefix(run_id);
        let mut found = Vec::new();
        let mut entries = std::pin::pin!(queue.view().kv_entries(
            &prefix,
            ..,
            KvOrder::Ascending,
            256
        ));
        while let Some((key, _)) = entries.try_next().await? {
            found.push(key);
        }
        Ok(found)
    }

    /// At the engine's start: deliver every signal a waiting job holds (the
    /// engine died between a wait's commit and its second read of the
    /// job's signals), and remove the signals of runs that ended (a signal
    /// sent to a job that never waited, or a race with its end). Reads the
    /// signals kept, a handful in a normal store.
    pub(crate) async fn deliver_held_signals(&self) -> Result<(usize, usize)> {
        let queue = self.queue()?;
        let mut delivered = 0;
        let mut removed = Vec::new();
        let mut entries = std::pin::pin!(queue.view().kv_entries(
            keys::SIGNALS_PREFIX,
            ..,
            KvOrder::Ascending,
            256
        ));
        while let Some((key, _)) = entries.try_next().await? {
            let Some((run_id, name)) = std::str::from_utf8(&key[keys::SIGNALS_PREFIX.len()..])
                .ok()
                .and_then(|rest| rest.split_once('/'))
            else {
                continue;
            };
            match inspect::run_record(queue.view(), run_id).await? {
                None => removed.push(key.clone()),
                Some(run) if run.wait.as_ref().is_some_and(|w| w.name == name) => {
                    if queue.signal(&run.job_id, Vec::new()).await? == SignalOutcome::Delivered {
                        delivered += 1;
                    }
                }
                Some(_) => {}
            }
        }
        let gone = removed.len();
        if !removed.is_empty() {
            let fx = removed
                .into_iter()
                .fold(taquba::SettlementEffects::default(), |fx, k| {
                    fx.kv_delete(k)
                });
            queue.commit_effects(fx).await?;
        }
        Ok((delivered, gone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sender_whose_write_won_is_told_its_signal_stands() {
        use SignalOutcome::{Delivered, NotWaiting};
        // A losing write is `AlreadySent` even when its nudge moved the job.
        assert_eq!(answer(false, Delivered), Signalled::AlreadySent);
        assert_eq!(answer(false, NotWaiting), Signalled::AlreadySent);
        assert_eq!(answer(true, Delivered), Signalled::Delivered);
        assert_eq!(answer(true, NotWaiting), Signalled::Held);
    }
}
