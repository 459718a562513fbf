//! A rekey pass: every value the store keeps sealed (or plain, from before
//! the engine had a keyring) written again under the keyring's newest key,
//! resumably; then, once nothing is left under an older key, the store's
//! encryption record lists the newest key alone, and the older keys may
//! leave the keyring.
//!
//! The pass walks the caller KV namespace in key order (the records that
//! hold user values, the signals, the jobs' own KV writes), then the blob
//! objects (memo entries, large outputs). Each page of rewrites is one
//! transaction that compares every rewritten key with the bytes it read
//! (a value changed meanwhile was written by the engine, under the newest
//! key: it is left) and moves the pass's cursor (`gaffer/v1/rekey`): an
//! interrupted pass goes on from there. Then it counts the queue jobs
//! whose payload is under another key (pending, scheduled, dead: the queue
//! has no rewrite in place; they go as they run, and dead ones with the
//! queue's dead retention), and retires the older keys only when there are
//! none. Every copy the engine makes of a value (a retry, a release, an
//! item fed from its manifest, a record rewritten) is written under the
//! newest key, so nothing behind the cursor goes back to an older one.

use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use taquba::object_store::path::Path;
use taquba::object_store::{ObjectStoreExt, PutPayload};
use taquba::{JobStatus, KvOrder, SettlementEffects};

use crate::error::{EngineError, Result};
use crate::layout::keys;
use crate::layout::records::{self, ItemMarker, ManifestChunk, OutcomeRecord, RunRecord};
use crate::layout::sealed::{EncryptionRecord, Keyring, sealed_under};
use crate::services::Services;
use crate::workflows::layout::HeldJob;

/// Rewrites per transaction.
const PAGE: usize = 256;

/// How long a request's lease is kept ahead of a pass, at every page.
const LEASE_AHEAD: std::time::Duration = std::time::Duration::from_secs(60);

/// What a rekey pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RekeyReport {
    /// The key everything is sealed under now.
    pub key_id: String,
    /// KV values and objects looked at.
    pub scanned: u64,
    /// Of them, written again under the newest key.
    pub renewed: u64,
    /// Queue jobs whose payload is still under an older key (or plain):
    /// they go as they run (dead ones with the queue's dead retention).
    pub queued_behind: u64,
    /// The keys the store's encryption record no longer lists (none while
    /// `queued_behind` is not zero): they may leave the keyring.
    pub retired: Vec<String>,
}

/// Where a pass stands, at `gaffer/v1/rekey`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// The key this pass renews to.
    key_id: String,
    /// The last KV key renewed or passed; `None`: from the first.
    #[serde(default, with = "serde_bytes")]
    after: Option<Vec<u8>>,
    /// Every KV value is done; the objects are next.
    kv_done: bool,
}

impl Services {
    /// Write every value the store keeps under the keyring's newest key,
    /// and retire older keys once nothing is left under them (see the
    /// module's docs). Resumable: a pass interrupted goes on from its
    /// cursor. `InvalidConfig` without a keyring.
    pub async fn rekey(&self) -> Result<RekeyReport> {
        self.rekey_keeping(&taquba::LeaseHandle::detached()).await
    }

    /// [`rekey`](Self::rekey) run for a claimed request whose lease is
    /// `lease`: the lease is extended at every page, so a long pass is not
    /// taken again by the queue while it runs.
    pub async fn rekey_keeping(&self, lease: &taquba::LeaseHandle) -> Result<RekeyReport> {
        let keyring = self.keyring();
        let Some(newest) = keyring.newest_id().map(str::to_string) else {
            return Err(EngineError::InvalidConfig(
                "a rekey needs a keyring (EngineBuilder::encryption)".into(),
            ));
        };
        let queue = self.queue()?;
        let mut cursor = match queue.view().kv_get(keys::REKEY_KEY).await? {
            Some(raw) => match records::decode::<Cursor>(keys::REKEY_KEY, &raw) {
                Ok(c) if c.key_id == newest => c,
                _ => fresh(&newest),
            },
            None => fresh(&newest),
        };
        drop(queue);
        let mut report = RekeyReport {
            key_id: newest.clone(),
            ..Default::default()
        };
        if !cursor.kv_done {
            self.renew_kv(keyring, &newest, &mut cursor, &mut report, lease)
                .await?;
        }
        self.renew_objects(keyring, &newest, &mut report, lease)
            .await?;
        lease.ensure_at_least(LEASE_AHEAD)?;
        report.queued_behind = self.queued_behind(&newest).await?;
        let queue = self.queue()?;
        let mut fx = SettlementEffects::default().kv_delete(keys::REKEY_KEY.to_vec());
        let found = crate::layout::inspect::encryption_record(queue.view()).await?;
        let mut compares: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        if report.queued_behind == 0
            && let Some((record, raw)) = found
            && record.keys.iter().any(|k| k.id != newest)
        {
            report.retired = record
                .ids()
                .into_iter()
                .filter(|id| *id != newest)
                .collect();
            let only = EncryptionRecord::only_newest(keyring)?;
            fx = fx.kv_put(keys::ENCRYPTION_KEY.to_vec(), records::encode(&only)?);
            compares.push((keys::ENCRYPTION_KEY.to_vec(), Some(raw)));
        }
        let compares: Vec<(&[u8], Option<&[u8]>)> = compares
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        if queue.kv_compare_commit(&compares, fx).await?.is_none() {
            report.retired.clear();
        }
        tracing::info!(key_id = %newest, scanned = report.scanned, renewed = report.renewed, queued_behind = report.queued_behind, retired = ?report.retired, "rekey pass done");
        Ok(report)
    }

    async fn renew_kv(
        &self,
        keyring: &Keyring,
        newest: &str,
        cursor: &mut Cursor,
        report: &mut RekeyReport,
        lease: &taquba::LeaseHandle,
    ) -> Result<()> {
        loop {
            lease.ensure_at_least(LEASE_AHEAD)?;
            let queue = self.queue()?;
            let start = match &cursor.after {
                Some(after) => std::ops::Bound::Excluded(after.clone()),
                None => std::ops::Bound::Unbounded,
            };
            let page = queue
                .view()
                .kv_scan(
                    b"",
                    (start, std::ops::Bound::Unbounded),
                    KvOrder::Ascending,
                    PAGE,
                )
                .await?;
            let mut writes: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = Vec::new();
            for (key, stored) in &page.entries {
                report.scanned += 1;
                if let Some(renewed) = renew_value(keyring, newest, key, stored)? {
                    writes.push((key.clone(), stored.to_vec(), renewed));
                }
            }
            cursor.after = page.entries.last().map(|(k, _)| k.clone());
            cursor.kv_done = !page.more;
            report.renewed += writes.len() as u64;
            let mut fx = SettlementEffects::default();
            for (key, _, renewed) in &writes {
                fx = fx.kv_put(key.clone(), renewed.clone());
            }
            fx = fx.kv_put(keys::REKEY_KEY.to_vec(), records::encode(&*cursor)?);
            let compares: Vec<(&[u8], Option<&[u8]>)> = writes
                .iter()
                .map(|(k, old, _)| (k.as_slice(), Some(old.as_slice())))
                .collect();
            if queue.kv_compare_commit(&compares, fx).await?.is_none() {
                // Something changed under the page: each value on its own
                // (one changed meanwhile was written under the newest key).
                for (key, old, renewed) in &writes {
                    let fx = SettlementEffects::default().kv_put(key.clone(), renewed.clone());
                    let one: [(&[u8], Option<&[u8]>); 1] = [(key, Some(old))];
                    if queue.kv_compare_commit(&one, fx).await?.is_none() {
                        report.renewed -= 1;
                    }
                }
                let fx = SettlementEffects::default()
                    .kv_put(keys::REKEY_KEY.to_vec(), records::encode(&*cursor)?);
                queue.commit_effects(fx).await?;
            }
            if cursor.kv_done {
                return Ok(());
            }
        }
    }

    async fn renew_objects(
        &self,
        keyring: &Keyring,
        newest: &str,
        report: &mut RekeyReport,
        lease: &taquba::LeaseHandle,
    ) -> Result<()> {
        let raw = self.raw_store();
        let prefix = Path::from(format!(
            "{}/v1",
            self.settings().blob_prefix.trim_end_matches('/')
        ));
        let listed: Vec<_> = raw.list(Some(&prefix)).try_collect().await?;
        for (n, meta) in listed.into_iter().enumerate() {
            if n % PAGE == 0 {
                lease.ensure_at_least(LEASE_AHEAD)?;
            }
            report.scanned += 1;
            let stored = match raw.get(&meta.location).await {
                Ok(found) => found.bytes().await?,
                // Removed meanwhile (retention).
                Err(taquba::object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            if sealed_under(&stored) == Some(newest) {
                continue;
            }
            let renewed = keyring.renew(&stored)?.unwrap_or_else(|| stored.to_vec());
            raw.put(&meta.location, PutPayload::from(renewed)).await?;
            report.renewed += 1;
        }
        Ok(())
    }

    /// Queue jobs of the engine's queues whose payload is not under
    /// `newest`: pending, scheduled and dead.
    async fn queued_behind(&self, newest: &str) -> Result<u64> {
        let queue = self.queue()?;
        let view = queue.view();
        let ours = [
            format!("{}.", self.settings().queue_name),
            format!("{}.", self.settings().bulk_queue_name),
            crate::engine::intake::intake_queue(&self.settings().queue_name),
        ];
        let mut behind = 0;
        for name in view.list_queues().await? {
            if !ours.iter().any(|p| name.starts_with(p.as_str())) {
                continue;
            }
            for status in [JobStatus::Pending, JobStatus::Scheduled, JobStatus::Dead] {
                let mut jobs = std::pin::pin!(view.jobs(&name, status, 500));
                while let Some(job) = jobs.try_next().await? {
                    let payload = if job.payload_ref.is_some() {
                        match view.get_job(&job.id).await? {
                            Some(full) => full.payload,
                            None => continue,
                        }
                    } else {
                        job.payload
                    };
                    if sealed_under(&payload) != Some(newest) {
                        behind += 1;
                    }
                }
            }
        }
        Ok(behind)
    }
}

fn fresh(newest: &str) -> Cursor {
    Cursor {
        key_id: newest.to_string(),
        after: None,
        kv_done: false,
    }
}

/// The value at `key` written under `newest`, if it holds user values not
/// under it (`None`: nothing to renew, or not a value gaffer seals).
fn renew_value(
    keyring: &Keyring,
    newest: &str,
    key: &[u8],
    stored: &[u8],
) -> Result<Option<Vec<u8>>> {
    let starts = |p: &[u8]| key.starts_with(p);
    let text = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    if starts(b"gaffer/v1/outcomes/") {
        let rec: OutcomeRecord = records::decode(key, stored)?;
        if rec.all_under(newest) {
            return Ok(None);
        }
        return Ok(Some(records::encode(
            &rec.opened(keyring)?.sealed(keyring)?,
        )?));
    }
    if starts(b"gaffer/v1/runs/") {
        let run: RunRecord = records::decode(key, stored)?;
        if run.all_under(newest) {
            return Ok(None);
        }
        return Ok(Some(records::encode(
            &run.opened(keyring)?.sealed(keyring)?,
        )?));
    }
    if starts(b"gaffer/v1/signals/") {
        return Ok(keyring.renew(stored)?);
    }
    if starts(b"gaffer/v1/batches/") {
        let rest = text(&key[b"gaffer/v1/batches/".len()..]);
        if rest.contains("/items/") {
            let marker: ItemMarker = records::decode(key, stored)?;
            if marker.all_under(newest) {
                return Ok(None);
            }
            return Ok(Some(records::encode(
                &marker.opened(keyring)?.sealed(keyring)?,
            )?));
        }
        if rest.contains("/manifest/") {
            let chunk: ManifestChunk = records::decode(key, stored)?;
            if chunk.all_under(newest) {
                return Ok(None);
            }
            return Ok(Some(records::encode(
                &chunk.opened(keyring)?.sealed(keyring)?,
            )?));
        }
        return Ok(None);
    }
    if starts(b"gaffer/v1/wf/") && text(key).contains("/h/") {
        let held: HeldJob = records::decode(key, stored)?;
        if sealed_under(&held.payload) == Some(newest) {
            return Ok(None);
        }
        return Ok(Some(records::encode(
            &held.opened(keyring)?.sealed(keyring)?,
        )?));
    }
    if starts(keys::RESERVED_KV_PREFIX.as_bytes()) {
        return Ok(None);
    }
    // A job's own KV writes (effects).
    Ok(keyring.renew(stored)?)
}
