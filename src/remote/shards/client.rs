//! `ShardedClient`: a `Client` per shard, from a process that owns none.

use super::*;

/// A [`Client`] per shard: submits each job to its shard's inbox and reads
/// each job in its shard, from a process that owns none.
#[derive(Debug)]
pub struct ShardedClient {
    set: ShardSet,
    clients: Vec<Client>,
}

impl ShardedClient {
    /// Open a client on every shard of `set`; `make(shard, url)` configures
    /// each (`Client::builder().store(Store::url(url))` and the engines' queue
    /// settings). Fails if a shard's store was never opened by an engine,
    /// or if its shard marker names another shard or another count
    /// ([`EngineError::ShardMismatch`](crate::Error::ShardMismatch)).
    pub async fn open<F>(set: ShardSet, mut make: F) -> Result<Self>
    where
        F: FnMut(usize, &str) -> ClientBuilder,
    {
        let mut clients = Vec::with_capacity(set.len());
        for (shard, url) in set.urls.iter().enumerate() {
            let place = gaffer_actors::ShardPlace {
                index: shard,
                count: set.len(),
                url: url.clone(),
                owner: None,
            };
            let error = match make(shard, url).open().await {
                Ok(client) => match client.check_shard(&place).await {
                    Ok(()) => {
                        clients.push(client);
                        continue;
                    }
                    Err(e) => {
                        client.close().await;
                        e
                    }
                },
                Err(e) => e,
            };
            // The shards opened so far are closed, not left to their drop.
            for c in clients {
                c.close().await;
            }
            return Err(error);
        }
        Ok(Self { set, clients })
    }

    /// The shard set.
    pub fn set(&self) -> &ShardSet {
        &self.set
    }

    /// The client of `shard`.
    pub fn client(&self, shard: usize) -> Option<&Client> {
        self.clients.get(shard)
    }

    /// The client of the shard of `id`.
    pub fn client_of(&self, id: &str) -> &Client {
        &self.clients[self.set.shard_of(id)]
    }

    /// Submit a job through its shard's inbox.
    pub async fn submit<J: Job>(&self, job: J) -> Result<ClientHandle<J>> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options.
    pub async fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> Result<ClientHandle<J>> {
        let mut req = submit_request(&job, opts)?;
        crate::job::submit::pin_period_now(&mut req)?;
        crate::job::submit::refuse_debounce(&req, "a shard set")?;
        // An unkeyed job's id is its request's: fresh, and of its value's
        // shard when its type is routed by a header.
        let request_id = self.set.fresh_id(&req)?;
        let id = job_id_of(&req, &request_id);
        self.client_of(&id).send_submit(req, request_id).await
    }

    /// Wait for the job `id` to end, in its shard (see [`Client::join`]).
    pub async fn join<J: Job>(&self, id: &str) -> Result<Result<J::Output, crate::job::JobError>> {
        self.client_of(id).join::<J>(id).await
    }

    /// The state of the job `id`, in its shard (see [`Client::status`]).
    pub async fn status(&self, id: &str) -> Result<crate::job::JobState> {
        self.client_of(id).status(id).await
    }

    /// The job's result if it has ended, without waiting, in its shard
    /// (see [`Client::outcome`]).
    pub async fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> Result<Option<Result<J::Output, crate::job::JobError>>> {
        self.client_of(id).outcome::<J>(id).await
    }

    /// Close every client.
    pub async fn close(self) {
        for c in self.clients {
            c.close().await;
        }
    }
}
