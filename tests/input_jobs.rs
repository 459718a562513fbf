//! Bad input to the jobs API gets a clear typed error, never a panic, and
//! nothing is lost: the engine keeps serving afterwards. Invalid and unknown
//! job ids, reserved headers, a duplicate job type and invalid configuration,
//! outputs that cannot be encoded, refused effects, values over the KV cap
//! (an output, a memo entry), unregistered types and malformed payloads, a
//! type that is no longer registered, a handle of the wrong type. (The batch
//! API's side is in `input_batches.rs`.)

mod common;

use std::collections::HashMap;
use std::time::Duration;

use gaffer::taquba::object_store::ObjectStore;
use gaffer::taquba::object_store::path::Path;
use gaffer::{
    Engine, EngineEvent, Error, Job, JobContext, SubmitOptions, job::FailureKind,
    protocol::EngineMessage,
};
use serde::{Deserialize, Serialize};

use common::{LIMIT, bad_ids, within};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Echo(String);

impl Job for Echo {
    const NAME: &'static str = "echo";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<String, Self::Error> {
        Ok(self.0.clone())
    }
}

async fn echo_engine() -> Engine {
    common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .start()
        .await
        .unwrap()
}

/// The engine still runs a job end to end.
async fn still_serves(engine: &Engine) {
    let h = engine.submit(Echo("still here".into())).await.unwrap();
    assert_eq!(
        within(h.join()).await.unwrap(),
        Ok("still here".to_string())
    );
}

#[tokio::test(start_paused = true)]
async fn an_invalid_job_id_is_rejected() {
    let engine = echo_engine().await;
    for id in bad_ids() {
        let handle = engine.handle::<Echo>(&id);
        assert!(
            matches!(&handle, Err(Error::InvalidJobId(got)) if *got == id),
            "handle({id:?}): {handle:?}"
        );
        let cancel = engine.cancel(&id).await;
        assert!(
            matches!(&cancel, Err(Error::InvalidJobId(got)) if *got == id),
            "cancel({id:?}): {cancel:?}"
        );
        let status = engine.status(&id).await;
        assert!(
            matches!(&status, Err(Error::InvalidJobId(got)) if *got == id),
            "status({id:?}): {status:?}"
        );
        // By message too: a typed error in the reply.
        let by_message =
            gaffer::ractor::call!(engine.actor(), EngineMessage::JobStatus, id.clone());
        assert!(
            matches!(&by_message, Ok(Err(Error::InvalidJobId(got))) if *got == id),
            "JobStatus({id:?}): {by_message:?}"
        );
        // AwaitJob by message answers (no hang) with an error naming the problem.
        let by_message = gaffer::ractor::call!(engine.actor(), EngineMessage::AwaitJob, id.clone());
        assert!(
            matches!(&by_message, Ok(Err(e)) if e.to_string().contains("invalid job id")),
            "AwaitJob({id:?}): {by_message:?}"
        );
        let by_message =
            gaffer::ractor::call!(engine.actor(), EngineMessage::CancelJob, id.clone());
        assert!(
            matches!(&by_message, Ok(Err(Error::InvalidJobId(got))) if *got == id),
            "CancelJob({id:?}): {by_message:?}"
        );
    }
    // The longest valid id is fine (and unknown).
    let longest = "x".repeat(128);
    assert!(engine.handle::<Echo>(&longest).is_ok());
    assert!(matches!(
        engine.status(&longest).await,
        Err(Error::JobNotFound(_))
    ));
    still_serves(&engine).await;
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_job_id_reports_job_not_found() {
    let engine = echo_engine().await;
    let id = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let h = engine.handle::<Echo>(id).unwrap();
    let joined = within(h.join()).await;
    assert!(
        matches!(&joined, Err(Error::JobNotFound(got)) if got == id),
        "{joined:?}"
    );
    let by_message = gaffer::ractor::call!(engine.actor(), EngineMessage::AwaitJob, id.to_string());
    assert!(
        matches!(&by_message, Ok(Err(gaffer::protocol::WaitError::NotFound(got))) if got == id),
        "{by_message:?}"
    );
    assert!(matches!(h.status().await, Err(Error::JobNotFound(_))));
    assert!(matches!(h.outcome().await, Err(Error::JobNotFound(_))));
    let cancel = h.cancel().await;
    assert!(
        matches!(&cancel, Err(Error::JobNotFound(got)) if got == id),
        "{cancel:?}"
    );
    still_serves(&engine).await;
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn reserved_headers_are_rejected() {
    let engine = echo_engine().await;
    for header in ["gaffer.type", "gaffer.run", "gaffer.anything"] {
        let opts = SubmitOptions {
            headers: HashMap::from([
                ("fine".to_string(), "1".to_string()),
                (header.to_string(), "x".to_string()),
            ]),
            ..Default::default()
        };
        let r = engine.submit_with(Echo("h".into()), opts.clone()).await;
        assert!(
            matches!(&r, Err(Error::ReservedHeader(h)) if h == header),
            "{header}: {r:?}"
        );
        // By message too.
        let request = gaffer::protocol::submit_request(&Echo("h".into()), opts).unwrap();
        let by_message = gaffer::ractor::call!(engine.actor(), EngineMessage::SubmitJob, request);
        assert!(
            matches!(&by_message, Ok(Err(Error::ReservedHeader(h))) if h == header),
            "{header}: {by_message:?}"
        );
    }
    // Nothing was enqueued by the refusals: the only job that runs is ours.
    let mut events = engine.subscribe();
    let opts = SubmitOptions {
        headers: HashMap::from([("gaffer_not_reserved".to_string(), "ok".to_string())]),
        ..Default::default()
    };
    let h = engine
        .submit_with(Echo("ok".into()), opts)
        .await
        .expect("a header that merely looks similar is fine");
    assert_eq!(h.clone().await.unwrap(), "ok");
    let started = common::collect_events_until(&mut events, LIMIT, |evs| {
        evs.iter()
            .any(|e| matches!(e, EngineEvent::JobSucceeded { run_id, .. } if run_id == h.id()))
    })
    .await;
    let starts: Vec<_> = started
        .iter()
        .filter_map(|e| match e {
            EngineEvent::JobStarted { run_id, .. } => Some(run_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(starts, vec![h.id()]);
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_job_type_is_an_error_at_start() {
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .register::<Echo>()
        .start()
        .await;
    assert!(
        matches!(&r, Err(Error::DuplicateJobType(name)) if name == "echo"),
        "{r:?}"
    );

    // Two distinct types sharing a NAME are the same mistake.
    #[derive(Serialize, Deserialize)]
    struct Impostor;
    impl Job for Impostor {
        const NAME: &'static str = "echo";
        type Output = ();
        type Error = std::convert::Infallible;
        async fn run(&self, _ctx: JobContext) -> Result<(), Self::Error> {
            Ok(())
        }
    }
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .register_with::<Impostor>(gaffer::JobOptions {
            concurrency: Some(2),
            ..Default::default()
        })
        .start()
        .await;
    assert!(
        matches!(&r, Err(Error::DuplicateJobType(name)) if name == "echo"),
        "{r:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn zero_concurrency_and_tiny_retention_are_config_errors() {
    let invalid = |r: &Result<Engine, Error>| matches!(r, Err(Error::InvalidConfig(_)));
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .max_concurrent_jobs(0)
        .start()
        .await;
    assert!(invalid(&r), "max_concurrent_jobs(0): {r:?}");
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .retention(Duration::from_micros(10))
        .start()
        .await;
    assert!(invalid(&r), "retention(10us): {r:?}");
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .queue_name("bad name!")
        .start()
        .await;
    assert!(invalid(&r), "queue_name(\"bad name!\"): {r:?}");
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .poll_interval(Duration::ZERO)
        .start()
        .await;
    assert!(invalid(&r), "poll_interval(0): {r:?}");
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .blob_prefix("")
        .start()
        .await;
    assert!(invalid(&r), "blob_prefix(\"\"): {r:?}");
    let r = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .queue_path("gaffer-blobs")
        .start()
        .await;
    assert!(invalid(&r), "queue path equal to the blob prefix: {r:?}");

    // The boundary values are accepted.
    let ok = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .max_concurrent_jobs(1)
        .retention(Duration::from_millis(1))
        .queue_name("good.name-1")
        .start()
        .await
        .unwrap();
    still_serves(&ok).await;
    assert!(ok.shutdown().await.unwrap().queue_closed);
}

/// An output whose `Serialize` always fails.
#[derive(Debug)]
struct Unencodable;

impl Serialize for Unencodable {
    fn serialize<S: serde::Serializer>(&self, _s: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "this value refuses to be encoded",
        ))
    }
}

impl<'de> Deserialize<'de> for Unencodable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Unencodable)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct MakesUnencodable;

impl Job for MakesUnencodable {
    const NAME: &'static str = "makes-unencodable";
    type Output = Unencodable;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<Unencodable, Self::Error> {
        Ok(Unencodable)
    }
}

#[tokio::test(start_paused = true)]
async fn an_output_that_fails_to_encode_records_a_permanent_failure() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<MakesUnencodable>()
        .register::<Echo>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(MakesUnencodable).await.unwrap();
    let joined = within(h.join()).await.unwrap();
    let err = joined.expect_err("an unencodable output cannot succeed");
    assert_eq!(err.kind, FailureKind::Permanent, "{err:?}");
    assert!(!err.is_cancelled());
    assert!(err.message.contains("failed to serialize"), "{err:?}");
    assert!(
        err.message.contains("this value refuses to be encoded"),
        "{err:?}"
    );
    assert_eq!(
        h.status().await.unwrap(),
        gaffer::job::JobState::Failed,
        "recorded as failed"
    );
    still_serves(&engine).await;
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[derive(Debug, Serialize, Deserialize)]
struct StagesBadEffects;

impl Job for StagesBadEffects {
    const NAME: &'static str = "stages-bad-effects";
    /// What each staging attempt came to.
    type Output = Vec<String>;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<Vec<String>, Self::Error> {
        let fx = ctx.effects();
        let mut seen = Vec::new();
        let r = fx.put("gaffer/x", "v");
        seen.push(match &r {
            Err(Error::ReservedKvKey(k)) if k == "gaffer/x" => "reserved".to_string(),
            other => format!("{other:?}"),
        });
        let r = fx.delete("gaffer/v1/outcomes/x");
        seen.push(match &r {
            Err(Error::ReservedKvKey(_)) => "reserved-delete".to_string(),
            other => format!("{other:?}"),
        });
        // The KV cap, less the room a value sealed at rest takes.
        let max = gaffer::job::MAX_EFFECT_VALUE;
        assert!(
            max < gaffer::taquba::MAX_KV_VALUE_SIZE
                && max > gaffer::taquba::MAX_KV_VALUE_SIZE - 256
        );
        let r = fx.put("big", vec![7u8; max + 1]);
        seen.push(match &r {
            Err(Error::ValueTooLarge { size, max: m }) if *size == max + 1 && *m == max => {
                "too-large".to_string()
            }
            other => format!("{other:?}"),
        });
        let r = fx.put("k", "kept");
        seen.push(match &r {
            Ok(()) => "put".to_string(),
            other => format!("{other:?}"),
        });
        let r = fx.delete("k");
        seen.push(match &r {
            Err(Error::ConflictingKvEffect(k)) if k == "k" => "conflict".to_string(),
            other => format!("{other:?}"),
        });
        Ok(seen)
    }
}

#[tokio::test(start_paused = true)]
async fn effects_reject_reserved_keys_oversized_values_and_conflicts() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<StagesBadEffects>()
        .register::<Echo>()
        .start()
        .await
        .unwrap();
    let seen = engine
        .submit(StagesBadEffects)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        seen,
        vec![
            "reserved",
            "reserved-delete",
            "too-large",
            "put",
            "conflict"
        ]
    );
    // The valid write committed with the success; the refused ones did not.
    let services = gaffer::testing::services(&engine);
    assert_eq!(services.kv_get(b"k").await.unwrap(), Some(b"kept".to_vec()));
    assert_eq!(services.kv_get(b"big").await.unwrap(), None);
    assert_eq!(services.kv_get(b"gaffer/x").await.unwrap(), None);
    still_serves(&engine).await;
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[derive(Debug, Serialize, Deserialize)]
struct Big(usize);

impl Job for Big {
    const NAME: &'static str = "big";
    type Output = Vec<u8>;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<Vec<u8>, Self::Error> {
        Ok(big_bytes(self.0))
    }
}

fn big_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[tokio::test(start_paused = true)]
async fn a_large_output_over_the_kv_cap_round_trips_through_a_blob() {
    const MIB: usize = 1024 * 1024;
    const { assert!(MIB > gaffer::taquba::MAX_KV_VALUE_SIZE) };
    let store = common::shared_store();
    let engine = common::store_builder(store.clone(), common::mock_clock())
        .register::<Big>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Big(MIB)).await.unwrap();
    let out = within(h.join()).await.unwrap().unwrap();
    assert!(out == big_bytes(MIB), "the output came back changed");
    let fetched = h.outcome().await.unwrap().unwrap().unwrap();
    assert!(fetched == big_bytes(MIB), "outcome came back changed");

    // It went through a blob (the record only points at it).
    let prefix = Path::from(format!("gaffer-blobs/v1/outputs/{}", h.id()));
    let listed = store.list_with_delimiter(Some(&prefix)).await.unwrap();
    assert_eq!(listed.objects.len(), 1, "{listed:?}");
    assert!(listed.objects[0].size as usize > MIB, "{listed:?}");
    let record = gaffer::ractor::call!(engine.actor(), EngineMessage::AwaitJob, h.id().to_string())
        .unwrap()
        .unwrap();
    assert!(
        matches!(&record.outcome, gaffer::protocol::Outcome::Succeeded(gaffer::protocol::OutputRef::Blob(p)) if *p == listed.objects[0].location.to_string()),
        "{record:?}"
    );
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

/// Memoizes a value of `n` bytes.
#[derive(Serialize, Deserialize)]
struct BigMemo(usize);

impl Job for BigMemo {
    const NAME: &'static str = "big-memo";
    type Output = usize;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<usize, Error> {
        let n = self.0;
        let v: Vec<u8> = ctx
            .memo()
            .memoized("big", || async move { Ok::<_, Error>(vec![7u8; n]) })
            .await?;
        Ok(v.len())
    }
}

#[tokio::test(start_paused = true)]
async fn a_memo_value_over_the_kv_cap_round_trips_through_the_object_store() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<BigMemo>()
        .start()
        .await
        .unwrap();
    let n = 2 << 20;
    assert_eq!(engine.submit(BigMemo(n)).await.unwrap().await.unwrap(), n);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_store_configured_is_a_config_error() {
    let r = Engine::builder().register::<Echo>().start().await;
    match r {
        Err(Error::InvalidConfig(msg)) => {
            assert!(msg.contains("store"), "{msg}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_unregistered_type_or_a_malformed_payload_fails_permanently() {
    let engine = echo_engine().await;
    // A type no handler is registered for.
    #[derive(Serialize, Deserialize)]
    struct Stranger;
    impl Job for Stranger {
        const NAME: &'static str = "stranger";
        type Output = ();
        type Error = std::convert::Infallible;
        async fn run(&self, _ctx: JobContext) -> Result<(), Self::Error> {
            Ok(())
        }
    }
    // Refused at the submission: nothing is queued that no handler can run.
    let refused = engine.submit(Stranger).await.unwrap_err();
    assert!(
        matches!(&refused, Error::UnknownJobType(t) if t == "stranger"),
        "{refused:?}"
    );

    // A payload that does not decode as the registered type.
    let request = gaffer::protocol::SubmitRequest {
        job_type: Echo::NAME.into(),
        payload: b"\xc1 definitely not msgpack".to_vec(),
        ..Default::default()
    };
    let submitted = gaffer::testing::services(&engine)
        .submit(request)
        .await
        .unwrap();
    let garbage = engine.handle::<Echo>(&submitted.run_id).unwrap();
    let r = within(garbage.join()).await.unwrap();
    assert!(
        matches!(&r, Err(e) if e.kind == FailureKind::Permanent
            && e.message.contains("invalid input for `echo`")),
        "{r:?}"
    );
    still_serves(&engine).await;
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

/// A job type the next version of the program no longer registers.
#[derive(Serialize, Deserialize)]
struct Retired(u32);

impl Job for Retired {
    const NAME: &'static str = "retired";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u32, Self::Error> {
        Ok(self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn a_queued_job_of_a_type_no_longer_registered_fails_permanently_with_its_record() {
    let store = common::shared_store();
    let clock = common::mock_clock();
    let old = common::shared_memory_builder(store.clone(), clock.clone())
        .register::<Retired>()
        .start()
        .await
        .unwrap();
    // Queued for later, so it is still queued when this version stops.
    let handle = old
        .submit_with(Retired(1), common::a_minute_later())
        .await
        .unwrap();
    let id = handle.id().to_string();
    assert!(old.shutdown().await.unwrap().queue_closed);

    // The next version registers only `Echo`.
    let new = common::shared_memory_builder(store, clock.clone())
        .register::<Echo>()
        .start()
        .await
        .unwrap();
    common::a_minute_passes(&new, &clock).await;
    let r = within(new.handle::<Retired>(&id).unwrap().join())
        .await
        .unwrap();
    assert!(
        matches!(&r, Err(e) if e.kind == FailureKind::Permanent
            && e.message.contains("no handler registered for job type `retired`")),
        "{r:?}"
    );
    still_serves(&new).await;
    assert!(new.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn a_handle_of_the_wrong_type_is_a_typed_error() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Echo>()
        .register::<Big>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Echo("typed".into())).await.unwrap();
    assert_eq!(h.clone().await.unwrap(), "typed");
    let wrong = engine.handle::<Big>(h.id()).unwrap();
    let r = wrong.join().await;
    assert!(
        matches!(&r, Err(Error::WrongJobType { id, expected, actual })
            if id == h.id() && expected == "big" && actual == "echo"),
        "{r:?}"
    );
    let r = wrong.outcome().await;
    assert!(matches!(&r, Err(Error::WrongJobType { .. })), "{r:?}");
    // The right type still reads it.
    assert_eq!(
        engine.handle::<Echo>(h.id()).unwrap().await.unwrap(),
        "typed"
    );
    assert!(engine.shutdown().await.unwrap().queue_closed);
}
