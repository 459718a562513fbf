//! `gaffer web`: the dashboard (`gaffer-web`) served on its own, over the
//! store or shard set the command names, until Ctrl-C.

use std::process::ExitCode;

use gaffer_layout::store::Store as NamedStore;
use gaffer_ops::OpsError;
use gaffer_web::{Auth, WebConfig};

use crate::Cli;
use crate::error::CliError;

/// Serve the dashboard on `listen` under `base_path`; credentials from
/// the environment (`GAFFER_WEB_TOKEN`, or `GAFFER_WEB_USER` and
/// `GAFFER_WEB_PASSWORD`) when set. It answers to the address it listens
/// on, `localhost` on a loopback (or every) address, and `allowed_hosts`.
pub async fn serve(
    cli: &Cli,
    listen: &str,
    base_path: &str,
    read_only: bool,
    allowed_hosts: &[String],
) -> Result<ExitCode, CliError> {
    let config = match &cli.shards {
        Some(template) => {
            WebConfig::open_shards(
                template,
                cli.shard_count.unwrap_or(0),
                &cli.queue_path,
                &cli.jobs_queue,
                &cli.bulk_queue,
            )
            .await?
        }
        None => {
            let named = match (&cli.dir, &cli.url) {
                (Some(dir), _) => NamedStore::local_dir(dir),
                (None, Some(url)) => NamedStore::url(url),
                (None, None) => return Err(OpsError::NoStoreGiven.into()),
            };
            WebConfig::open_with(&named, &cli.queue_path, &cli.jobs_queue, &cli.bulk_queue).await?
        }
    };
    let base = base_path.trim_end_matches('/');
    if !base.is_empty() && !base.starts_with('/') {
        return Err(CliError::BadInput("--base-path starts with `/`".into()));
    }
    let config = match crate::keyring(cli)? {
        Some(keyring) => config.encryption(keyring).await?,
        None => config,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError::BadInput(format!("--listen {listen}: {e}")))?;
    let addr = listener.local_addr().map_err(CliError::Serve)?;
    let mut config = config
        .base_path(base)
        .read_only(read_only)
        .listening_on(addr);
    for host in allowed_hosts {
        config = config.allowed_host(host);
    }
    let auth = Auth::from_env();
    if let Some(auth) = auth.clone() {
        config = config.auth(auth);
    }
    let dashboard = gaffer_web::router(config);
    let app = if base.is_empty() {
        dashboard
    } else {
        // The dashboard is at `{base}`; `/` and `{base}/` lead there.
        axum::Router::new()
            .route("/", axum::routing::get(axum::response::Redirect::to(base)))
            .route(
                &format!("{base}/"),
                axum::routing::get(axum::response::Redirect::permanent(base)),
            )
            .nest(base, dashboard)
    };
    crate::report::out(&format!(
        "gaffer web: http://{addr}{} ({}{})",
        if base.is_empty() { "/" } else { base },
        if read_only { "read-only" } else { "actions on" },
        if auth.is_some() {
            ", credentials asked"
        } else {
            ""
        }
    ))?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(CliError::Serve)?;
    Ok(ExitCode::SUCCESS)
}
