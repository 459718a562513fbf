//! The engine's protocol, for a ractor service that talks to it by message
//! (`call!`/`cast!` on [`Engine::actor`](crate::Engine::actor)): the
//! messages, what they carry and what they answer, and the bytes-level
//! batch sink.

pub use crate::job::submit::submit_request;
pub use gaffer_actors::{
    BatchFinished, BatchOutcome, BatchSpec, EngineMessage, ItemRecord, JobFinished, Outcome,
    OutcomeRecord, OutputRef, PoolStats, RecordSink, ShutdownReport, SinkAttached, SinkError,
    SinkTakeover, SubmitRequest, Submitted, SweepReport, WaitError,
};
