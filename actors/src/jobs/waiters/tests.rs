//! Unit tests of the waiters: answers from records, barriers, restarts.
use std::time::Duration;

use taquba::Queue;
use taquba::object_store::{ObjectStore, memory::InMemory};

use super::*;
use crate::layout::records::{Outcome, OutputRef};
use crate::services::SharedQueue;
use crate::settings::Settings;

const LIMIT: Duration = Duration::from_secs(5);

fn record(output: u8) -> OutcomeRecord {
    OutcomeRecord {
        job_id: "job".into(),
        job_type: "t".into(),
        input_hash: [0; 32],
        attempts: 1,
        finished_at_ms: 0,
        outcome: Outcome::Succeeded(OutputRef::Inline(vec![output])),
        history: Vec::new(),
        followups: Vec::new(),
        reason: None,
        tags: None,
    }
}

/// A waiters actor over an empty store: a read of any run finds nothing.
async fn waiters() -> (ActorRef<WaitersMessage>, Arc<SharedQueue>) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (queue, _) = SharedQueue::new(Queue::open(store.clone(), "q").await.unwrap());
    let clock = queue.clock();
    let services = Services::new(
        &queue,
        store,
        Settings::default(),
        clock,
        HashMap::new(),
        crate::events::channel(),
    );
    let args = WaitersArguments {
        services: Arc::new(services),
        restarted: false,
    };
    let (actor, _) = Actor::spawn(None, Waiters, args).await.unwrap();
    (actor, queue)
}

fn await_recorded(
    actor: &ActorRef<WaitersMessage>,
    run_id: &str,
    recorded: Option<OutcomeRecord>,
) -> tokio::task::JoinHandle<Result<OutcomeRecord, WaitError>> {
    let actor = actor.clone();
    let run_id = run_id.to_string();
    tokio::spawn(async move {
        actor
            .call(
                |reply| WaitersMessage::Await {
                    run_id,
                    reply,
                    recorded: recorded.map(Box::new),
                },
                Some(LIMIT),
            )
            .await
            .expect("the waiters actor answers")
            .success_or(WaitError::ShutDown)
            .expect("answered in time")
    })
}

#[tokio::test]
async fn a_record_the_caller_read_answers_without_a_read() {
    let (actor, _queue) = waiters().await;
    // The store holds nothing for this run: a read would answer NotFound.
    let got = await_recorded(&actor, "r", Some(record(7))).await.unwrap();
    assert!(
        matches!(got, Ok(r) if r == record(7)),
        "answered from the record"
    );
    let got = await_recorded(&actor, "r", None).await.unwrap();
    assert!(
        matches!(&got, Err(WaitError::NotFound(id)) if id == "r"),
        "a read finds nothing: {got:?}"
    );
    actor.stop(None);
}

#[tokio::test]
async fn a_record_read_while_its_commit_is_in_flight_waits_for_the_durable_settlement() {
    let (actor, _queue) = waiters().await;
    actor
        .cast(WaitersMessage::End(JobEnd::Settling("r".into())))
        .unwrap();
    let waiting = await_recorded(&actor, "r", Some(record(7)));
    // Messages are handled in order: once the count is 1, the `Await` was
    // handled and did not answer from the record it carried.
    let mut waiting_count = 0;
    for _ in 0..1000 {
        waiting_count = ractor::call!(actor, WaitersMessage::GetWaiting).unwrap();
        if waiting_count == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        waiting_count, 1,
        "the caller waits instead of being answered"
    );
    assert!(!waiting.is_finished());
    actor
        .cast(WaitersMessage::End(JobEnd::Ended {
            run_id: "r".into(),
            record: Box::new(record(8)),
        }))
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Ok(r) if r == record(8)));
    actor.stop(None);
}
