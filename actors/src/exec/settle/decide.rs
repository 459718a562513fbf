//! What a settlement does, decided from what it knows, with no I/O: give
//! the claim back, refuse a job gaffer does not run, put it back for a
//! retry, or end its run.

use crate::erased::Verdict;
use crate::exec::settle::standing::{Owner, Standing, Target};
use crate::exec::suspend::Pause;
use crate::layout::keys;
use crate::layout::records::{FailureKind, OutputRef};

/// How a delivery ends, as its pool says.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The handler's verdict (or the engine's, for a job it did not run).
    Verdict(Verdict),
    /// Give the claim back without spending an attempt (shutdown grace over,
    /// paused type): the job runs again later.
    Release(String),
    /// A job gaffer does not run ([`Standing::Stray`]): dead-letter it with
    /// this reason, touching no run's records.
    Refuse(String),
}

/// How a run ended, before it is written as a record or marker.
#[derive(Debug, PartialEq)]
pub(crate) enum End {
    Succeeded(OutputRef),
    Failed { kind: FailureKind, message: String },
    Cancelled,
}

/// What a settlement does.
#[derive(Debug)]
pub(crate) enum Decision<'a> {
    /// Give the claim back on purpose (a release): no attempt spent.
    Release(String),
    /// Give the claim back because whether it owns its run could not be
    /// read: it is read again at its next claim.
    ReadAgain(String),
    /// Dead-letter it as a job gaffer does not run, with this reason.
    Refuse(String),
    /// Put the run's job back for a retry after gaffer's backoff.
    Retry {
        owner: &'a Owner,
        kind: FailureKind,
        message: String,
    },
    /// Put the run's job back paused (to wait for a signal or its timeout,
    /// to sleep, snoozed): no attempt spent.
    Pause { owner: &'a Owner, pause: Pause },
    /// End the run.
    End { owner: &'a Owner, end: End },
}

/// Decide what the settlement of a claim with `standing` does, given how
/// its delivery ended, whether a cancel was asked while it ran, and whether
/// this was its last attempt.
pub(crate) fn decide(
    ending: Ending,
    standing: &Standing,
    cancelled: bool,
    last: bool,
) -> Decision<'_> {
    let verdict = match ending {
        Ending::Release(reason) => return Decision::Release(reason),
        Ending::Refuse(reason) => return Decision::Refuse(reason),
        Ending::Verdict(v) => v,
    };
    let owner = match standing {
        Standing::Owner(owner) => owner,
        Standing::Stray(reason) => return Decision::Refuse(reason.clone()),
        Standing::Unread(error) => {
            return Decision::ReadAgain(format!("reading its run's record failed: {error}"));
        }
        Standing::Sealed(reason) => return Decision::ReadAgain(reason.clone()),
    };
    let end = match verdict {
        _ if cancelled => End::Cancelled,
        // A batch item has no run record to pause in and no id to signal.
        Verdict::Pause(pause) if matches!(owner.target, Target::Item { .. }) => End::Failed {
            kind: FailureKind::Permanent,
            message: match pause {
                Pause::Signal(wait) => format!(
                    "a batch item cannot wait for a signal (it waited for `{}`)",
                    wait.name
                ),
                Pause::Sleep(_) => {
                    "a batch item cannot sleep (JobContext::sleep is for jobs)".into()
                }
                Pause::Snooze { .. } => {
                    "a batch item cannot snooze (JobContext::snooze is for jobs)".into()
                }
            },
        },
        // A run that snoozed as often as it may ends instead.
        Verdict::Pause(Pause::Snooze { limit, .. })
            if owner.run.as_ref().map_or(0, |run| run.snoozes) >= limit =>
        {
            End::Failed {
                kind: FailureKind::Permanent,
                message: format!(
                    "snoozed {limit} times, the most a job of `{}` may (JobOptions::max_snoozes, Settings::max_snoozes); it snoozed again and was ended",
                    owner.job_type
                ),
            }
        }
        Verdict::Pause(pause) => return Decision::Pause { owner, pause },
        Verdict::Succeeded(output) => End::Succeeded(OutputRef::Inline(output)),
        Verdict::Failed { kind, message } if kind == FailureKind::Permanent || last => {
            End::Failed { kind, message }
        }
        Verdict::Failed { kind, message } => {
            // A failure message that reads like a release is not one.
            let message = if message.starts_with(keys::RELEASED_PREFIX) {
                format!("error: {message}")
            } else {
                message
            };
            return Decision::Retry {
                owner,
                kind,
                message,
            };
        }
    };
    Decision::End { owner, end }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Standing {
        Standing::Owner(Owner {
            target: Target::Job { run_id: "r".into() },
            job_type: "t".into(),
            run: None,
            payload: std::sync::Arc::from(&[][..]),
        })
    }

    fn failed(kind: FailureKind) -> Ending {
        Ending::Verdict(Verdict::Failed {
            kind,
            message: "boom".into(),
        })
    }

    #[test]
    fn a_transient_failure_with_attempts_left_retries_and_the_last_ends_the_run() {
        let o = owner();
        assert!(matches!(
            decide(failed(FailureKind::Transient), &o, false, false),
            Decision::Retry { kind: FailureKind::Transient, ref message, .. } if message == "boom"
        ));
        assert!(matches!(
            decide(failed(FailureKind::Transient), &o, false, true),
            Decision::End {
                end: End::Failed {
                    kind: FailureKind::Transient,
                    ..
                },
                ..
            }
        ));
        assert!(matches!(
            decide(failed(FailureKind::Permanent), &o, false, false),
            Decision::End {
                end: End::Failed {
                    kind: FailureKind::Permanent,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn a_cancel_asked_while_it_ran_ends_the_run_as_cancelled_whatever_the_verdict() {
        let o = owner();
        for ending in [
            failed(FailureKind::Transient),
            Ending::Verdict(Verdict::Succeeded(b"x".to_vec())),
        ] {
            assert!(matches!(
                decide(ending, &o, true, false),
                Decision::End {
                    end: End::Cancelled,
                    ..
                }
            ));
        }
    }

    #[test]
    fn a_job_that_is_not_its_runs_is_refused_and_an_unread_one_read_again() {
        let stray = Standing::Stray("not ours".into());
        let verdict = || Ending::Verdict(Verdict::Succeeded(Vec::new()));
        assert!(
            matches!(decide(verdict(), &stray, false, false), Decision::Refuse(r) if r == "not ours")
        );
        let unread = Standing::Unread("io".into());
        assert!(
            matches!(decide(verdict(), &unread, false, false), Decision::ReadAgain(r) if r.contains("io"))
        );
        // A release is a release whatever the standing.
        assert!(matches!(
            decide(Ending::Release("paused".into()), &stray, false, false),
            Decision::Release(_)
        ));
    }

    #[test]
    fn a_snooze_puts_a_job_back_until_its_run_snoozed_as_often_as_it_may() {
        let snooze = || {
            Ending::Verdict(Verdict::Pause(Pause::Snooze {
                until_ms: 9,
                limit: 2,
            }))
        };
        let with = |snoozes: u32| {
            Standing::Owner(Owner {
                target: Target::Job { run_id: "r".into() },
                job_type: "t".into(),
                run: Some(Box::new(crate::layout::records::RunRecord {
                    job_id: "j".into(),
                    job_type: "t".into(),
                    input_hash: [0; 32],
                    submitted_at_ms: 0,
                    past: Vec::new(),
                    wait: None,
                    step: None,
                    sleep: None,
                    snoozes,
                    tags: None,
                })),
                payload: std::sync::Arc::from(&[][..]),
            })
        };
        for snoozes in [0, 1] {
            assert!(matches!(
                decide(snooze(), &with(snoozes), false, true),
                Decision::Pause {
                    pause: Pause::Snooze { until_ms: 9, .. },
                    ..
                }
            ));
        }
        assert!(matches!(
            decide(snooze(), &with(2), false, false),
            Decision::End {
                end: End::Failed { kind: FailureKind::Permanent, ref message },
                ..
            } if message.starts_with("snoozed 2 times")
        ));
        // A cancel beats it.
        assert!(matches!(
            decide(snooze(), &with(0), true, false),
            Decision::End {
                end: End::Cancelled,
                ..
            }
        ));
    }

    #[test]
    fn a_wait_puts_a_job_back_to_wait_but_fails_an_item_and_yields_to_a_cancel() {
        let wait = crate::layout::records::WaitRecord {
            name: "approval".into(),
            until_ms: 10,
            since_ms: 1,
        };
        let o = owner();
        assert!(matches!(
            decide(Ending::Verdict(Verdict::Pause(Pause::Signal(wait.clone()))), &o, false, true),
            Decision::Pause { pause: Pause::Signal(ref w), .. } if *w == wait
        ));
        assert!(matches!(
            decide(
                Ending::Verdict(Verdict::Pause(Pause::Signal(wait.clone()))),
                &o,
                true,
                false
            ),
            Decision::End {
                end: End::Cancelled,
                ..
            }
        ));
        let item = Standing::Owner(Owner {
            target: Target::Item {
                batch_id: "b".into(),
                key: "k".into(),
                run_id: "r".into(),
            },
            job_type: "p".into(),
            run: None,
            payload: std::sync::Arc::from(&[][..]),
        });
        assert!(matches!(
            decide(
                Ending::Verdict(Verdict::Pause(Pause::Signal(wait))),
                &item,
                false,
                false
            ),
            Decision::End {
                end: End::Failed {
                    kind: FailureKind::Permanent,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn a_failure_that_reads_like_a_release_is_not_taken_for_one() {
        let o = owner();
        let ending = Ending::Verdict(Verdict::Failed {
            kind: FailureKind::Transient,
            message: format!("{}sneaky", keys::RELEASED_PREFIX),
        });
        match decide(ending, &o, false, false) {
            Decision::Retry { message, .. } => assert!(message.starts_with("error: ")),
            other => panic!("{other:?}"),
        }
    }
}
