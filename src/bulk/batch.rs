//! Batches of a pipeline: run, resume, progress, status, forget.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use gaffer_actors::layout::records::from_msgpack;
use gaffer_actors::{
    BatchFinished, BatchOutcome, BatchSpec, EngineMessage, EngineRef, ItemRecord, ItemStatus,
    RecordSink, SinkAttached, SinkError,
};

use crate::bulk::items::{BatchItem, ItemOutcome, ItemPage};
use crate::bulk::pipeline::Pipeline;
use crate::bulk::report::{BatchStatus, BulkReport, ProgressSnapshot};
use crate::error::{Error, Result};
use crate::sink::{
    OutputRecord, OutputSink, STATUS_CANCELLED, STATUS_FAILED, STATUS_OUTPUT_UNAVAILABLE,
    STATUS_SUCCEEDED,
};

type KeyFn<I> = Arc<dyn Fn(&I) -> String + Send + Sync>;

/// A batch of pipeline `P`'s items, by id.
pub struct Batch<P: Pipeline> {
    engine: EngineRef,
    id: String,
    key_fn: Option<KeyFn<P::Input>>,
    headers: HashMap<String, String>,
    sink: Option<Arc<dyn OutputSink>>,
    fail_threshold: Option<f64>,
    retention: Option<Duration>,
    max_rate: Option<u32>,
    on_complete: Option<gaffer_actors::SubmitRequest>,
    _p: PhantomData<fn() -> P>,
}

impl<P: Pipeline> std::fmt::Debug for Batch<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("pipeline", &P::NAME)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<P: Pipeline> Batch<P> {
    pub(crate) fn new(engine: EngineRef, id: String) -> Self {
        Self {
            engine,
            id,
            key_fn: None,
            headers: HashMap::new(),
            sink: None,
            fail_threshold: None,
            retention: None,
            max_rate: None,
            on_complete: None,
            _p: PhantomData,
        }
    }

    /// The batch id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Derive item keys from inputs (default: positional `item-{i}`). Keys must
    /// be unique within a batch, 1-1024 bytes, without NUL.
    pub fn key_fn(mut self, f: impl Fn(&P::Input) -> String + Send + Sync + 'static) -> Self {
        self.key_fn = Some(Arc::new(f));
        self
    }

    /// Headers on every item (visible as `BulkCtx::headers`; `gaffer.` reserved).
    /// Fixed by the batch's first run.
    pub fn headers(mut self, headers: HashMap<String, String>) -> Self {
        self.headers = headers;
        self
    }

    /// Where item records go (default: nowhere).
    pub fn sink(mut self, sink: Arc<dyn OutputSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Fail the run (with its report) when more than `percent` of the items
    /// failed (strictly more; cancelled items do not count).
    pub fn fail_threshold(mut self, percent: f64) -> Self {
        self.fail_threshold = Some(percent);
        self
    }

    /// Remove the batch (manifest, markers, memo entries) this long after a run
    /// completes, unless it runs again meanwhile.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Enqueue at most `items_per_sec` items a second (default: as fast as
    /// the batch window allows). The store underneath buffers what the engine
    /// writes until its memtables are flushed, so its memory follows the item
    /// rate: a pace is the way to hold a batch's memory below what full speed
    /// takes (measured in benches/README.md, "Memory (#13 §1)"). Not stored:
    /// each run or resume sets its own. A rate of 0 is taken as 1.
    pub fn max_rate(mut self, items_per_sec: u32) -> Self {
        self.max_rate = Some(items_per_sec.max(1));
        self
    }

    /// A job to run when a run of this batch completes (every item counted):
    /// it is created in the run's final transaction, so each run that
    /// completes creates it exactly once, also when the process dies at the
    /// last item (the resume that completes the run creates it). Its
    /// [`JobContext::completed_batch`](crate::JobContext::completed_batch)
    /// holds the run's counts; [`BulkReport::on_complete`] its id. Not
    /// stored: each run or resume sets its own (as its sink). `J` must be
    /// registered; its idempotency key is not used.
    pub fn on_complete<J: crate::Job>(mut self, job: J) -> Result<Self> {
        self.engine.services().job_queue(J::NAME)?;
        self.on_complete = Some(crate::job::submit::submit_request(
            &job,
            crate::SubmitOptions::default(),
        )?);
        Ok(self)
    }

    /// The bytes-level spec of this batch (its sink wrapped to decode outputs
    /// as `P::Output`), for the `RunBatch` messages of the actor protocol.
    pub fn spec(&self) -> BatchSpec {
        BatchSpec {
            batch_id: self.id.clone(),
            pipeline: P::NAME.to_string(),
            headers: self.headers.clone(),
            sink: self.sink.clone().map(record_sink::<P>),
            retention: self.retention,
            window: self.engine.services().settings().batch_window,
            max_rate: self.max_rate,
            parent: tracing::Span::current(),
            on_complete: self.on_complete.clone(),
        }
    }

    /// Encode `inputs` as `(key, bytes)` items (keys from the key function),
    /// for the `RunBatch` messages of the actor protocol.
    pub fn encode_items<I>(&self, inputs: I) -> Result<Vec<(String, Vec<u8>)>>
    where
        I: IntoIterator<Item = P::Input>,
    {
        inputs
            .into_iter()
            .enumerate()
            .map(|(i, input)| {
                let key = match &self.key_fn {
                    Some(f) => f(&input),
                    None => format!("item-{i}"),
                };
                let bytes =
                    rmp_serde::to_vec_named(&input).map_err(|e| Error::encode(P::NAME, e))?;
                Ok((key, bytes))
            })
            .collect()
    }

    /// Run the batch over `inputs` (consumed as an iterator, a chunk at a time).
    /// A batch that ran before skips its succeeded items and re-runs the
    /// failed ones; other inputs than the first run's are `BatchMismatch`.
    pub async fn run<I>(&self, inputs: I) -> Result<BulkReport>
    where
        I: IntoIterator<Item = P::Input>,
    {
        self.run_stream(futures_util::stream::iter(inputs)).await
    }

    /// [`run`](Self::run) over a stream of inputs.
    pub async fn run_stream<S>(&self, inputs: S) -> Result<BulkReport>
    where
        S: Stream<Item = P::Input>,
    {
        let key_fn = self.key_fn.clone();
        let items = inputs.enumerate().map(move |(i, input)| {
            let key = match &key_fn {
                Some(f) => f(&input),
                None => format!("item-{i}"),
            };
            rmp_serde::to_vec_named(&input)
                .map(|bytes| (key, bytes))
                .map_err(|e| gaffer_actors::EngineError::InputEncoding {
                    pipeline: P::NAME.to_string(),
                    index: i as u64,
                    reason: gaffer_actors::layout::error::cause(e),
                })
        });
        let items = Box::pin(items);
        let outcome = self.engine.run_batch(self.spec(), items).await?;
        self.report(outcome)
    }

    /// Drive the batch from its manifest to completion (after a crash, or a
    /// dropped run): items still queued continue, succeeded ones are answered
    /// from their markers, failed ones run again.
    pub async fn resume(&self) -> Result<BulkReport> {
        let outcome = self.engine.resume_batch(self.spec()).await?;
        self.report(outcome)
    }

    fn report(&self, o: BatchOutcome) -> Result<BulkReport> {
        let report = BulkReport {
            batch_id: self.id.clone(),
            total: o.total,
            succeeded: o.succeeded,
            failed: o.failed,
            cancelled: o.cancelled,
            elapsed: o.elapsed,
            cost: o.cost.into(),
            failed_keys: o.failed_keys,
            sink_errors: o.sink_errors,
            sink_error_keys: o.sink_error_keys,
            on_complete: o.on_complete,
        };
        if let Some(threshold) = self.fail_threshold
            && report.total > 0
            && (report.failed as f64 / report.total as f64) * 100.0 > threshold
        {
            return Err(Error::FailureThresholdExceeded {
                failed: report.failed,
                total: report.total,
                threshold,
                report: Box::new(report),
            });
        }
        Ok(report)
    }

    /// Progress of a run of this batch active in this process.
    pub async fn progress(&self) -> Option<ProgressSnapshot> {
        let p = ractor::call!(
            self.engine.actor(),
            EngineMessage::BatchProgress,
            self.id.clone()
        )
        .ok()??;
        Some(ProgressSnapshot::from_progress(p))
    }

    /// What the batch's records say.
    pub async fn status(&self) -> Result<BatchStatus> {
        let s =
            gaffer_actors::batches::status::batch_state(self.engine.services(), &self.id).await?;
        Ok(BatchStatus {
            batch_id: self.id.clone(),
            total: s.total,
            succeeded: s.succeeded,
            failed: s.failed,
            cancelled: s.cancelled,
            pending: s.active,
            cost: s.cost.into(),
            failed_keys: s.failed_keys,
        })
    }

    /// The batch's settled items, a page at a time, in key order (byte order
    /// of the keys): up to `limit` items (1 to 1000: a limit outside is
    /// brought into that range) whose key sorts after `after` (`None`: from
    /// the first). Pass the page's [`next`](ItemPage::next) as `after` to
    /// read on; it is `None` on the last page.
    ///
    /// Each item comes from its record: its key, how it ended, its output
    /// decoded as `P::Output` (a large output is fetched from the object
    /// store), and its cost. Only settled items are listed: items queued,
    /// running or never run yet have no record ([`status`](Self::status)
    /// counts them as pending), and an item running again lists its last
    /// recorded outcome until it settles anew. Works without a run and
    /// after a restart; `BatchNotFound` if the batch does not exist.
    ///
    /// ```no_run
    /// # async fn demo<P: gaffer::Pipeline>(batch: gaffer::Batch<P>) -> gaffer::Result<()> {
    /// let mut after = None;
    /// loop {
    ///     let page = batch.items(after.as_deref(), 100).await?;
    ///     for item in &page.items {
    ///         println!("{}: {}", item.key, item.outcome.is_success());
    ///     }
    ///     match page.next {
    ///         Some(next) => after = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn items(&self, after: Option<&str>, limit: usize) -> Result<ItemPage<P::Output>> {
        let services = self.engine.services();
        let page =
            gaffer_actors::batches::status::item_markers(services, &self.id, after, limit).await?;
        let mut items = Vec::with_capacity(page.items.len());
        for (key, marker) in page.items {
            let outcome = match marker.status {
                ItemStatus::Succeeded => match &marker.output {
                    Some(output) => match services.output_bytes(output).await {
                        Ok(bytes) => match from_msgpack::<P::Output>(&bytes) {
                            Ok(value) => ItemOutcome::Succeeded(value),
                            Err(e) => ItemOutcome::OutputUnavailable(format!(
                                "recorded output no longer decodes as `{}`'s output: {e}",
                                P::NAME
                            )),
                        },
                        Err(e) => ItemOutcome::OutputUnavailable(format!(
                            "the item's output could not be read: {e}"
                        )),
                    },
                    None => {
                        ItemOutcome::OutputUnavailable("the item's record holds no output".into())
                    }
                },
                ItemStatus::Failed => ItemOutcome::Failed(marker.error.unwrap_or_default()),
                ItemStatus::Cancelled => ItemOutcome::Cancelled,
            };
            items.push(BatchItem {
                key,
                outcome,
                cost: marker.cost.into(),
            });
        }
        Ok(ItemPage {
            items,
            next: page.next,
        })
    }

    /// Take over the run of this batch in progress here: `to` is told when it
    /// ends (as by [`Engine::watch_batch`](crate::Engine::watch_batch)), and
    /// `sink` gets the records of every item counted from now on. How a
    /// service that was the run's sink (an [`ActorSink`](crate::sink::ActorSink)
    /// to itself) and was restarted by its supervisor gets the rest of the
    /// run's records without running the batch again; records written to
    /// the dead actor meanwhile count in the report's `sink_errors`.
    ///
    /// Answers where the switch fell: the [`SinkAttached::written`] items
    /// counted before it had their records given to the run's earlier sink.
    /// Each item of the run reaches exactly one of the two sinks, so the
    /// records the new sink did not get are read from the item markers: once
    /// `to` is told the run ended, the items listed by
    /// [`items`](Self::items) whose keys `sink` did not receive are exactly
    /// those `written` (an item's marker is written before its record is
    /// given to a sink). If the run's coordinator is replaced after the
    /// switch, the replacement gives every item's record to `sink` again:
    /// dedupe on key, as for every re-run. `BatchNotRunning` if no run of the
    /// batch is in progress here.
    ///
    /// ```no_run
    /// # async fn demo<P: gaffer::Pipeline>(
    /// #     batch: gaffer::Batch<P>,
    /// #     me: gaffer::ractor::ActorRef<gaffer::sink::OutputRecord>,
    /// #     told: gaffer::ractor::DerivedActorRef<gaffer::protocol::BatchFinished>,
    /// # ) -> gaffer::Result<()> {
    /// let sink = std::sync::Arc::new(gaffer::sink::ActorSink::new(me.get_derived()));
    /// let attached = batch.attach(sink, told).await?;
    /// // … once told the run ended: the `attached.written` records not
    /// // received are those of `batch.items(..)` whose keys did not arrive.
    /// # Ok(()) }
    /// ```
    pub async fn attach(
        &self,
        sink: Arc<dyn OutputSink>,
        to: ractor::DerivedActorRef<BatchFinished>,
    ) -> Result<SinkAttached> {
        self.engine
            .attach_batch(&self.id, record_sink::<P>(sink), to)
            .await
    }

    /// Remove everything the batch wrote. Refused (`BatchRunning`) while a run
    /// of it is active here, and (`BatchActive`) while items are queued or
    /// running: resume it to completion first.
    pub async fn forget(&self) -> Result<()> {
        ractor::call!(
            self.engine.actor(),
            EngineMessage::ForgetBatch,
            self.id.clone()
        )
        .map_err(|_| Error::ShutDown)??;
        Ok(())
    }
}

/// `sink` as a bytes-level sink, decoding outputs as `P::Output`.
fn record_sink<P: Pipeline>(sink: Arc<dyn OutputSink>) -> Arc<dyn RecordSink> {
    Arc::new(SinkAdapter::<P> {
        sink,
        _p: PhantomData,
    })
}

struct SinkAdapter<P> {
    sink: Arc<dyn OutputSink>,
    _p: PhantomData<fn() -> P>,
}

impl<P: Pipeline> RecordSink for SinkAdapter<P> {
    fn write(&self, key: &str, record: ItemRecord<'_>) -> std::result::Result<(), SinkError> {
        // A succeeded item is written as succeeded only with its output; an
        // output that cannot be read or converted is an error record.
        let (status, output, error) = match record {
            ItemRecord::Succeeded { output } => match from_msgpack::<P::Output>(output) {
                Ok(value) => match serde_json::to_value(&value) {
                    Ok(json) => (STATUS_SUCCEEDED, Some(json), None),
                    Err(e) => (
                        STATUS_OUTPUT_UNAVAILABLE,
                        None,
                        Some(format!("output failed JSON conversion: {e}")),
                    ),
                },
                Err(e) => (
                    STATUS_OUTPUT_UNAVAILABLE,
                    None,
                    Some(format!(
                        "recorded output no longer decodes as `{}`'s output: {e}",
                        P::NAME
                    )),
                ),
            },
            ItemRecord::Failed { error } => (STATUS_FAILED, None, Some(error.to_string())),
            ItemRecord::Cancelled => (STATUS_CANCELLED, None, None),
            ItemRecord::OutputUnavailable { error } => {
                (STATUS_OUTPUT_UNAVAILABLE, None, Some(error.to_string()))
            }
        };
        let unavailable = status == STATUS_OUTPUT_UNAVAILABLE;
        let record = OutputRecord {
            key: key.to_string(),
            status: status.to_string(),
            output,
            error,
        };
        self.sink.write(&record)?;
        match (unavailable, record.error) {
            (true, Some(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn flush(&self) -> std::result::Result<(), SinkError> {
        Ok(self.sink.flush()?)
    }
}
