//! Shards reached by message, across a `ractor_cluster` (feature
//! `cluster`).
//!
//! Actor services joined in one ractor cluster send jobs to the engine of
//! a job's shard as actor messages, with no bucket in between:
//!
//! - Every process that owns shards runs a **gateway** actor per owned
//!   shard ([`ShardedEngine::serve_cluster`]). Each gateway is a member of
//!   the process group named for its shard ([`shard_group`]).
//!   `ractor_cluster` shares the group's membership with every connected
//!   node.
//! - A sender ([`ClusterRouter`]) routes each job to its shard as
//!   [`ShardSet`] does. It asks the group for a member and calls it:
//!   `Submit`, then `Await` for the outcome.
//! - When the owner moves (killed, fenced, or its shards given to another
//!   process), its gateway leaves the group: the gateway stops with its
//!   engine, or the dead node's members are dropped. The sender then
//!   retries with whichever gateway the group holds next, until its
//!   deadline. A keyed job's resubmission meets its first submission in
//!   the shard's store, so a retry never runs a job twice. For an unkeyed
//!   job, the router picks the id once and reuses it on every retry.
//!
//! The messages are MessagePack bytes in two RPCs, so any process of the
//! cluster can decode them. Enabling `cluster` turns on ractor's `cluster`
//! feature for the whole build. That feature removes ractor's blanket
//! `Message` impl, so every actor message type of the application must
//! then implement `ractor::Message` itself (ractor_cluster's
//! `RactorMessage` derive does it).

use std::collections::HashMap;
use std::time::Duration;

use gaffer_actors::layout::records::{Outcome, OutcomeRecord, OutputRef, from_msgpack};
use gaffer_actors::{EngineEvent, SubmitRequest};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster::RactorClusterMessage;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::error::{Error, JobError, Result};
use crate::job::submit::{SubmitOptions, pin_job_id, submit_request};
use crate::job::typed::Job;
use crate::remote::shards::{ShardSet, ShardedEngine};

/// The process group of shard `shard`'s gateway: `gaffer.shard.{shard}`.
pub fn shard_group(shard: usize) -> String {
    format!("gaffer.shard.{shard}")
}

/// What a shard's gateway answers, across the cluster (each payload is
/// MessagePack).
#[derive(RactorClusterMessage)]
pub enum GatewayMessage {
    /// Submit a job (a `SubmitRequest`, every field); answers a
    /// `WireSubmitted`.
    #[rpc]
    Submit(Vec<u8>, RpcReplyPort<Vec<u8>>),
    /// Wait for the job with this id to end; answers a `WireOutcome`.
    #[rpc]
    Await(String, RpcReplyPort<Vec<u8>>),
    /// Run a batch (a `WireBatch`) to completion; answers a
    /// `WireBatchDone`.
    #[rpc]
    RunBatch(Vec<u8>, RpcReplyPort<Vec<u8>>),
}

impl std::fmt::Debug for GatewayMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Submit(..) => f.write_str("Submit"),
            Self::Await(id, _) => write!(f, "Await({id})"),
            Self::RunBatch(..) => f.write_str("RunBatch"),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum WireSubmitted {
    Id(String),
    Refused(String),
}

#[derive(Debug, Serialize, Deserialize)]
enum WireOutcome {
    /// The record, with a large output inlined.
    Ended(Box<OutcomeRecord>),
    /// No job has this id (never submitted, or past retention).
    NotFound,
    Error(String),
}

#[derive(Debug, Serialize, Deserialize)]
struct WireBatch {
    batch_id: String,
    pipeline: String,
    /// `(item key, MessagePack input)`, in order.
    items: Vec<(String, Vec<u8>)>,
}

#[derive(Debug, Serialize, Deserialize)]
enum WireBatchDone {
    Done(BatchCounts),
    Error(String),
}

/// What a batch run by message came to (see [`ClusterRouter::run_batch`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCounts {
    /// Items in the batch.
    pub total: u64,
    /// Succeeded (in this run or an earlier one).
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Keys of the failed items.
    pub failed_keys: Vec<String>,
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // The wire types hold strings, bytes and maps: encoding cannot fail.
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

/// The gateway of one shard: answers `GatewayMessage`s with its engine.
#[derive(Debug)]
pub struct Gateway;

/// A gateway's engine and shard.
#[derive(Debug)]
pub struct GatewayArgs {
    engine: Engine,
    shard: usize,
}

impl Actor for Gateway {
    type Msg = GatewayMessage;
    type State = GatewayArgs;
    type Arguments = GatewayArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<GatewayMessage>,
        args: GatewayArgs,
    ) -> std::result::Result<GatewayArgs, ActorProcessingErr> {
        ractor::pg::join(shard_group(args.shard), vec![myself.get_cell()]);
        // Leave the group when the engine stops (shut down or fenced).
        let mut events = args.engine.subscribe();
        let me = myself.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(EngineEvent::ShutDown { .. } | EngineEvent::StoreClosed { .. })
                    | Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    _ => {}
                }
            }
            me.stop(Some("its engine stopped".into()));
        });
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<GatewayMessage>,
        message: GatewayMessage,
        state: &mut GatewayArgs,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let engine = state.engine.clone();
        // Each request runs in its own task: a submit waits for a commit,
        // an await for the job, and neither holds the gateway.
        match message {
            GatewayMessage::Submit(bytes, reply) => answer(reply, async move {
                match submit(&engine, &bytes).await {
                    Ok(id) => WireSubmitted::Id(id),
                    Err(e) => WireSubmitted::Refused(e.to_string()),
                }
            }),
            GatewayMessage::RunBatch(bytes, reply) => answer(reply, async move {
                match run_batch(&engine, &bytes).await {
                    Ok(counts) => WireBatchDone::Done(counts),
                    Err(e) => WireBatchDone::Error(e.to_string()),
                }
            }),
            GatewayMessage::Await(id, reply) => answer(reply, async move {
                match outcome(&engine, id).await {
                    Ok(record) => WireOutcome::Ended(Box::new(record)),
                    Err(Error::JobNotFound(_)) => WireOutcome::NotFound,
                    Err(e) => WireOutcome::Error(e.to_string()),
                }
            }),
        }
        Ok(())
    }
}

/// Answer `reply` with what `work` comes to, encoded, from a task of its own.
fn answer<T: Serialize>(
    reply: RpcReplyPort<Vec<u8>>,
    work: impl std::future::Future<Output = T> + Send + 'static,
) {
    tokio::spawn(async move {
        let _ = reply.send(encode(&work.await));
    });
}

async fn submit(engine: &Engine, bytes: &[u8]) -> Result<String> {
    let req: SubmitRequest =
        from_msgpack(bytes).map_err(|e| Error::decode("a cluster submission", e))?;
    Ok(engine.jobs.submit(req).await?.run_id)
}

async fn run_batch(engine: &Engine, bytes: &[u8]) -> Result<BatchCounts> {
    let w: WireBatch = from_msgpack(bytes).map_err(|e| Error::decode("a cluster batch", e))?;
    gaffer_actors::layout::keys::check_batch_id(&w.batch_id)?;
    let spec = gaffer_actors::BatchSpec {
        batch_id: w.batch_id,
        pipeline: w.pipeline,
        headers: HashMap::new(),
        sink: None,
        retention: None,
        window: engine.inner.services().settings().batch_window,
        max_rate: None,
        parent: tracing::Span::none(),
        on_complete: None,
    };
    let items = futures_util::stream::iter(w.items.into_iter().map(Ok));
    let o = engine.inner.run_batch(spec, items).await?;
    Ok(BatchCounts {
        total: o.total,
        succeeded: o.succeeded,
        failed: o.failed,
        cancelled: o.cancelled,
        failed_keys: o.failed_keys,
    })
}

async fn outcome(engine: &Engine, id: String) -> Result<OutcomeRecord> {
    let mut record = engine.jobs.await_job(id).await?;
    if let Outcome::Succeeded(output @ OutputRef::Blob(_)) = &record.outcome {
        let bytes = engine.jobs.output_bytes(output.clone()).await?;
        record.outcome = Outcome::Succeeded(OutputRef::Inline(bytes));
    }
    Ok(record)
}

/// Start a gateway for `engine`, shard `shard`'s, in the shard's group.
pub(crate) async fn spawn_gateway(
    engine: Engine,
    shard: usize,
) -> Result<ActorRef<GatewayMessage>> {
    let (gateway, _) = Actor::spawn(None, Gateway, GatewayArgs { engine, shard })
        .await
        .map_err(|e| gaffer_actors::EngineError::ActorUnavailable {
            actor: "shard gateway",
            reason: e.to_string(),
        })?;
    Ok(gateway)
}

/// Longest wait for a shard's keeper to start its gateway (it spawns the
/// actor, whose start only joins the group).
const SERVE_CALL: Duration = Duration::from_secs(10);

impl ShardedEngine {
    /// Start a gateway for each owned shard that is up, in the shard's
    /// process group, so that senders anywhere in the ractor cluster reach
    /// it ([`ClusterRouter`]); answers them. Each gateway stops when its
    /// engine stops, and a shard that comes back (or is down now and comes
    /// back later) gets a new one from its keeper. Under elastic placement
    /// these are the shards held at the call: a shard gained later is not
    /// served until `serve_cluster` is called again.
    pub async fn serve_cluster(&self) -> Result<Vec<ActorRef<GatewayMessage>>> {
        let mut gateways = Vec::new();
        for (shard, keeper) in self.keepers() {
            match keeper
                .call(
                    crate::remote::shards::KeeperMessage::Serve,
                    Some(SERVE_CALL),
                )
                .await
            {
                Ok(ractor::rpc::CallResult::Success(Ok(Some(gateway)))) => gateways.push(gateway),
                // Down now: its keeper starts the gateway when it is back.
                Ok(ractor::rpc::CallResult::Success(Ok(None))) => {}
                Ok(ractor::rpc::CallResult::Success(Err(e))) => return Err(e),
                other => {
                    return Err(gaffer_actors::EngineError::ActorUnavailable {
                        actor: "shard keeper",
                        reason: format!("shard {shard}'s keeper did not answer: {other:?}"),
                    });
                }
            }
        }
        Ok(gateways)
    }
}

/// Sends jobs to their shards' gateways across a ractor cluster.
#[derive(Debug, Clone)]
pub struct ClusterRouter {
    set: ShardSet,
    /// How long one call may take before the next gateway is tried.
    call_timeout: Duration,
    /// How long a submit or a join keeps looking for a gateway.
    deadline: Duration,
}

impl ClusterRouter {
    /// A router over `set`: a call waits 10 s, and a submit or a join goes
    /// on finding a gateway for 60 s.
    pub fn new(set: ShardSet) -> Self {
        Self {
            set,
            call_timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(60),
        }
    }

    /// How long a submit or a join goes on finding a gateway (for a shard
    /// whose owner is moving).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The gateway of `shard` the group holds now, if any.
    pub fn gateway(&self, shard: usize) -> Option<ActorRef<GatewayMessage>> {
        ractor::pg::get_members(&shard_group(shard))
            .into_iter()
            .next()
            .map(ActorRef::from)
    }

    /// Call the gateway of `shard` until one answers or the deadline;
    /// its answer decoded.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        shard: usize,
        what: &str,
        make: impl Fn(RpcReplyPort<Vec<u8>>) -> GatewayMessage,
        call_timeout: Duration,
    ) -> Result<T> {
        let started = tokio::time::Instant::now();
        loop {
            if let Some(gw) = self.gateway(shard)
                && let Ok(ractor::rpc::CallResult::Success(bytes)) =
                    gw.call(&make, Some(call_timeout)).await
            {
                return from_msgpack(&bytes).map_err(|e| Error::decode("a gateway's answer", e));
            }
            if started.elapsed() >= self.deadline {
                return Err(gaffer_actors::EngineError::ActorUnavailable {
                    actor: "shard gateway",
                    reason: format!(
                        "no member of `{}` (shard {shard}) answered {what} within {:?}",
                        shard_group(shard),
                        self.deadline
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Submit a job to its shard's engine, wherever it runs; answers its id.
    pub async fn submit<J: Job>(&self, job: J) -> Result<String> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options (`run_at` is not carried).
    pub async fn submit_with<J: Job>(&self, job: J, opts: SubmitOptions) -> Result<String> {
        let mut req = submit_request(&job, opts)?;
        let fresh = self.set.fresh_id(&req)?;
        crate::job::submit::refuse_debounce(&req, "a cluster router")?;
        let id = pin_job_id(&mut req, fresh)?;
        if req.traceparent.is_none() {
            req.traceparent = gaffer_actors::telemetry::current_traceparent();
        }
        let wire = encode(&req);
        let shard = self.set.shard_of(&id);
        let answer = self
            .call(
                shard,
                "a submit",
                |reply| GatewayMessage::Submit(wire.clone(), reply),
                self.call_timeout,
            )
            .await?;
        match answer {
            WireSubmitted::Id(id) => Ok(id),
            WireSubmitted::Refused(reason) => Err(Error::Refused {
                request: id,
                reason,
            }),
        }
    }

    /// Run the batch `batch_id` of pipeline `P` over `items` (`(key,
    /// input)`, keys unique) on the engine of the batch's shard, wherever
    /// it runs, to completion. The call waits up to the deadline: give a
    /// long batch a long one. A batch run again skips its succeeded items,
    /// as in process. The items travel in one message (ractor_cluster
    /// bounds a frame, `DEFAULT_MAX_INBOUND_FRAME_SIZE`): a batch larger
    /// than that runs in the process that owns its shard
    /// (`ShardedEngine::batch`).
    pub async fn run_batch<P: crate::Pipeline>(
        &self,
        batch_id: &str,
        items: impl IntoIterator<Item = (String, P::Input)>,
    ) -> Result<BatchCounts> {
        let items = items
            .into_iter()
            .map(|(key, input)| {
                rmp_serde::to_vec_named(&input)
                    .map(|bytes| (key, bytes))
                    .map_err(|e| Error::encode(P::NAME, e))
            })
            .collect::<Result<Vec<_>>>()?;
        let wire = encode(&WireBatch {
            batch_id: batch_id.to_string(),
            pipeline: P::NAME.to_string(),
            items,
        });
        let shard = self.set.shard_of(batch_id);
        let answer = self
            .call(
                shard,
                "a batch",
                |reply| GatewayMessage::RunBatch(wire.clone(), reply),
                self.deadline,
            )
            .await?;
        match answer {
            WireBatchDone::Done(counts) => Ok(counts),
            WireBatchDone::Error(reason) => Err(gaffer_actors::EngineError::ActorUnavailable {
                actor: "shard gateway",
                reason: format!("running batch `{batch_id}`: {reason}"),
            }),
        }
    }

    /// Wait for the job `id` to end, from its shard's engine; a job runs
    /// as long as it runs, so each call waits up to the deadline.
    /// [`EngineError::JobNotFound`](gaffer_actors::EngineError::JobNotFound)
    /// if its shard knows no job of that id (never submitted, or past
    /// retention).
    pub async fn join<J: Job>(&self, id: &str) -> Result<std::result::Result<J::Output, JobError>> {
        let shard = self.set.shard_of(id);
        let answer = self
            .call(
                shard,
                "an await",
                |reply| GatewayMessage::Await(id.to_string(), reply),
                self.deadline,
            )
            .await?;
        match answer {
            WireOutcome::Ended(record) => {
                crate::job::handle::decode_outcome_with::<J>(&record, async |_| {
                    Err(Error::decode("an output", "the gateway sent no bytes"))
                })
                .await
            }
            WireOutcome::NotFound => Err(gaffer_actors::EngineError::JobNotFound(id.to_string())),
            WireOutcome::Error(reason) => Err(gaffer_actors::EngineError::ActorUnavailable {
                actor: "shard gateway",
                reason: format!("waiting for `{id}`: {reason}"),
            }),
        }
    }
}

#[cfg(feature = "cluster")]
impl ractor::Message for crate::sink::OutputRecord {}
