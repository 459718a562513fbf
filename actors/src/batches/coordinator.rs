//! Coordinator: one actor per running batch. Owns the run's counters, failed
//! keys, cost rollup, the sink, and the set of outstanding items (enqueued or
//! found running, not yet settled), which it keeps under a window so memory
//! does not grow with the batch.
//!
//! The settlement of each item is pushed to it (settle → Batches →
//! coordinator); it never polls. Items answered by an earlier run's marker are
//! counted and re-emitted from the marker without running.
//!
//! Item records reach the run's sink through a `SinkWriter`: a thread of its
//! own that writes them in order and flushes at the end, so a slow sink never
//! stalls an async worker of the runtime. The coordinator waits
//! for the writer only through a bounded channel (backpressure) and learns of
//! the flush by message. A sink that takes over (`TakeSink`, from a watcher
//! through the run's driver) gets every record counted after it arrives; the
//! writer switches in order, after the records counted before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use crate::batches::budget::Pacer;
use crate::batches::claims::Attach;
use crate::batches::registry::RegistryMessage;
use crate::batches::sink_writer::{SinkReport, SinkWriter};
use crate::batches::spec::{BatchOutcome, BatchProgress, BatchReply, BatchSpec};
use crate::error::Result;
use crate::layout::records::{BatchHead, ItemMarker, ManifestItem};
use crate::services::Services;

mod accounting;
mod completion;
mod feeding;

/// Messages of a coordinator.
#[derive(Debug)]
pub(crate) enum CoordinatorMessage {
    /// The manifest is complete: enqueue and count; answer when every item settled.
    Begin(Box<BatchHead>, BatchReply),
    /// Enqueue the next manifest chunk if the window allows.
    FeedNext,
    /// An item of this batch settled.
    ItemSettled {
        /// Item key.
        key: String,
        /// Job id of the delivery that settled it.
        job_id: String,
        /// Its marker.
        marker: Box<ItemMarker>,
    },
    /// Counters now.
    GetProgress(RpcReplyPort<BatchProgress>),
    /// The sink's writer flushed the run's records.
    SinkFlushed(SinkReport),
    /// A sink takes over the records still to come: the records of the items
    /// counted from now on go to it. Answered with the items counted before.
    TakeSink(Attach),
}

/// The coordinator actor.
#[derive(Debug)]
pub(crate) struct Coordinator;

/// Arguments of a coordinator.
#[derive(Debug)]
pub(crate) struct CoordinatorArguments {
    /// The batch.
    pub spec: BatchSpec,
    /// Engine services.
    pub services: Arc<Services>,
    /// The registry, told before the run's caller is answered.
    pub batches: ActorRef<RegistryMessage>,
}

/// State of a coordinator.
pub(crate) struct CoordinatorState {
    spec: BatchSpec,
    services: Arc<Services>,
    batches: ActorRef<RegistryMessage>,
    head: Option<BatchHead>,
    reply: Option<BatchReply>,
    next_chunk: u32,
    /// Items of the loaded manifest chunk not yet enqueued.
    current: VecDeque<ManifestItem>,
    feeding: bool,
    outstanding: HashMap<String, String>,
    outcome: BatchOutcome,
    started: Instant,
    /// Reads are needed unless this run created the batch.
    fresh: bool,
    /// The sink's writer (`None` without a sink, and once flushing).
    sink: Option<SinkWriter>,
    /// Every item is counted: the run is flushing its sink and ending.
    finishing: bool,
    /// Items counted before the sink of now took over (0: it is the run's).
    before_sink: u64,
    /// Items this run enqueued (paced by `spec.max_rate`) since `paced_since`.
    enqueued: u64,
    paced_since: Instant,
    /// The run's pace under the memory budget (`Settings::memory_budget`).
    pacer: Pacer,
    /// The run's `gaffer.batch` span: its events tell the run's progress.
    span: tracing::Span,
    /// Items counted when progress was last told (an event per tenth).
    told: u64,
}

impl std::fmt::Debug for CoordinatorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorState")
            .field("batch_id", &self.spec.batch_id)
            .field("next_chunk", &self.next_chunk)
            .field("outstanding", &self.outstanding.len())
            .finish_non_exhaustive()
    }
}

impl Actor for Coordinator {
    type Msg = CoordinatorMessage;
    type State = CoordinatorState;
    type Arguments = CoordinatorArguments;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: CoordinatorArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let span = tracing::info_span!(
            parent: &args.spec.parent,
            "gaffer.batch",
            pipeline = %args.spec.pipeline,
            batch_id = %args.spec.batch_id,
            generation = tracing::field::Empty,
            total = tracing::field::Empty,
        );
        let pacer = Pacer::new(args.services.settings().memory_budget);
        Ok(CoordinatorState {
            pacer,
            span,
            told: 0,
            spec: args.spec,
            services: args.services,
            batches: args.batches,
            head: None,
            reply: None,
            next_chunk: 0,
            current: VecDeque::new(),
            feeding: false,
            outstanding: HashMap::new(),
            outcome: BatchOutcome::default(),
            started: Instant::now(),
            fresh: false,
            sink: None,
            finishing: false,
            before_sink: 0,
            enqueued: 0,
            paced_since: Instant::now(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CoordinatorMessage::Begin(head, reply) => {
                // A first generation with no item ever enqueued needs no reads.
                state.fresh = head.generation == 1;
                state.span.record("generation", head.generation);
                state.span.record("total", head.total);
                tracing::debug!(parent: &state.span, total = head.total, generation = head.generation, "batch run started");
                state.sink = state
                    .spec
                    .sink
                    .clone()
                    .map(|sink| SinkWriter::start(sink, state.spec.batch_id.clone()));
                state.head = Some(*head);
                state.reply = Some(reply);
                // The pace counts from the first enqueue's chance.
                state.paced_since = Instant::now();
                if let Err(e) = state.feed(&myself).await {
                    state.fail(&myself, e).await;
                    return Ok(());
                }
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::FeedNext => {
                if let Err(e) = state.feed(&myself).await {
                    state.fail(&myself, e).await;
                    return Ok(());
                }
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::ItemSettled {
                key,
                job_id,
                marker,
            } => {
                state.settled(key, job_id, *marker).await;
                state.tell_progress();
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::GetProgress(reply) => {
                let _ = reply.send(state.progress());
            }
            CoordinatorMessage::SinkFlushed(report) => state.complete(&myself, Some(report)).await,
            CoordinatorMessage::TakeSink(Attach { sink, reply }) => {
                let _ = reply.send(Ok(state.take_sink(sink).await));
            }
        }
        Ok(())
    }
}
