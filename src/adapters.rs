//! The only places a user type meets bytes: the erased handlers of a typed
//! job (`TypedHandler<J>`) and of a pipeline (`TypedPipeline<P>`). Each
//! decodes the delivery's input, runs the user's code and encodes its output
//! (or classifies its error) as a verdict.

use std::marker::PhantomData;
use std::sync::Arc;

use gaffer_actors::layout::records::from_msgpack;
use gaffer_actors::{BoxFuture, Delivery, ErasedHandler, Verdict};

use crate::bulk::pipeline::{BulkCtx, ItemError, Pipeline};
use crate::job::context::JobContext;
use crate::job::state::StateMap;
use crate::job::typed::Job;

pub(crate) struct TypedHandler<J> {
    pub(crate) state: Arc<StateMap>,
    pub(crate) _job: PhantomData<fn() -> J>,
}

impl<J: Job> ErasedHandler for TypedHandler<J> {
    fn run(&self, delivery: Delivery) -> BoxFuture<Verdict> {
        let state = self.state.clone();
        Box::pin(async move {
            let job: J = match from_msgpack(&delivery.payload) {
                Ok(job) => job,
                Err(e) => {
                    return Verdict::permanent(format!("invalid input for `{}`: {e}", J::NAME));
                }
            };
            let ctx = JobContext::new(delivery, state);
            match job.run(ctx).await {
                Ok(output) => match rmp_serde::to_vec_named(&output) {
                    Ok(bytes) => Verdict::Succeeded(bytes),
                    Err(e) => Verdict::permanent(format!(
                        "`{}` produced an output that failed to serialize: {e}",
                        J::NAME
                    )),
                },
                Err(e) => Verdict::Failed {
                    kind: job.classify(&e),
                    message: e.to_string(),
                },
            }
        })
    }
}

pub(crate) struct TypedPipeline<P> {
    pub(crate) pipeline: Arc<P>,
    pub(crate) _p: PhantomData<fn() -> P>,
}

impl<P: Pipeline> ErasedHandler for TypedPipeline<P> {
    fn run(&self, delivery: Delivery) -> BoxFuture<Verdict> {
        let pipeline = self.pipeline.clone();
        Box::pin(async move {
            let input: P::Input = match from_msgpack(&delivery.payload) {
                Ok(i) => i,
                Err(e) => {
                    return Verdict::permanent(format!(
                        "invalid input for pipeline `{}`: {e}",
                        P::NAME
                    ));
                }
            };
            let (batch_id, key) = match &delivery.item {
                Some(item) => (item.batch_id.clone(), item.key.clone()),
                None => {
                    return Verdict::permanent(format!(
                        "pipeline `{}` got a job that is not a batch item",
                        P::NAME
                    ));
                }
            };
            let ctx = BulkCtx {
                input,
                batch_id,
                key,
                run_id: delivery.run_id.clone(),
                headers: (*delivery.headers).clone(),
                delivery,
            };
            match pipeline.run(&ctx).await {
                Ok(output) => match rmp_serde::to_vec_named(&output) {
                    Ok(bytes) => Verdict::Succeeded(bytes),
                    Err(e) => Verdict::permanent(format!(
                        "pipeline `{}` produced an output that failed to serialize: {e}",
                        P::NAME
                    )),
                },
                Err(e) => {
                    let e: ItemError = e.into();
                    Verdict::Failed {
                        kind: e.kind,
                        message: e.message,
                    }
                }
            }
        })
    }
}
