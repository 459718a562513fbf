//! The servers of the server peers (`servers.sh` starts them on loopback
//! and exports their URLs): a fresh Postgres database per child, a flushed
//! Redis per child, and each one's durability as the server reports it.

use crate::child::BoxErr;

/// The Postgres server's URL (`SBS_PG_URL`, its `postgres` database).
fn pg_admin_url() -> Result<String, BoxErr> {
    std::env::var("SBS_PG_URL").map_err(|_| {
        "the Postgres peers need SBS_PG_URL (run the harness under servers.sh, which starts one)"
            .into()
    })
}

/// A database of its own for one child: created on the server at
/// `SBS_PG_URL`, dropped by [`PgDb::drop_db`].
pub struct PgDb {
    pub url: String,
    name: String,
    admin: String,
}

impl PgDb {
    /// Create `sbs_{pid}_{nanos}` (outside any timing).
    pub async fn create() -> Result<PgDb, BoxErr> {
        use sqlx::Connection;
        let admin = pg_admin_url()?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let name = format!("sbs_{}_{nanos}", std::process::id());
        let mut c = sqlx::PgConnection::connect(&admin).await?;
        // A name of ours (digits and `_`), not input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut c)
            .await?;
        c.close().await?;
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        Ok(PgDb {
            url: format!("{base}/{name}"),
            name,
            admin,
        })
    }

    /// Drop the database (its connections closed first by the caller, or
    /// forced).
    pub async fn drop_db(self) -> Result<(), BoxErr> {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&self.admin).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut c)
        .await?;
        c.close().await?;
        Ok(())
    }
}

/// What a committed job survives on this server, as it reports it.
pub async fn pg_durability(pool: &sqlx::PgPool) -> String {
    let mut parts = Vec::new();
    for setting in ["synchronous_commit", "fsync", "wal_sync_method"] {
        let v: Result<(String,), _> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
                .fetch_one(pool)
                .await;
        parts.push(format!(
            "{setting}={}",
            v.map(|v| v.0).unwrap_or_else(|e| format!("?{e}"))
        ));
    }
    let version: Result<(String,), _> = sqlx::query_as("SHOW server_version").fetch_one(pool).await;
    format!(
        "Postgres {}: {}",
        version.map(|v| v.0).unwrap_or_default(),
        parts.join(", ")
    )
}

/// The Redis server's URL (`SBS_REDIS_URL`).
pub fn redis_url() -> Result<String, BoxErr> {
    std::env::var("SBS_REDIS_URL").map_err(|_| {
        "the Redis peer needs SBS_REDIS_URL (run the harness under servers.sh, which starts one)"
            .into()
    })
}

/// Empty the Redis server (one child at a time uses it) and read its
/// durability settings.
pub async fn redis_fresh() -> Result<String, BoxErr> {
    let client = redis::Client::open(redis_url()?)?;
    let mut c = client.get_multiplexed_async_connection().await?;
    redis::cmd("FLUSHALL").query_async::<()>(&mut c).await?;
    let mut parts = Vec::new();
    for setting in ["appendonly", "appendfsync", "save"] {
        let v: Result<std::collections::HashMap<String, String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(setting)
            .query_async(&mut c)
            .await;
        parts.push(match v {
            Ok(v) => format!(
                "{setting}={:?}",
                v.get(setting).cloned().unwrap_or_default()
            ),
            Err(e) => format!("{setting}=?{e}"),
        });
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_string();
    Ok(format!("Redis {version}: {}", parts.join(", ")))
}
