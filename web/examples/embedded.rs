//! The dashboard nested in an application's own axum service, under
//! `/admin/jobs`, behind the service's own auth layer (here a fixed
//! `x-admin-key` header; put your session or SSO check there).
//!
//! ```sh
//! cargo run -p gaffer-web --example embedded
//! curl -H 'x-admin-key: demo' http://127.0.0.1:8080/admin/jobs
//! ```
//!
//! A browser needs the header too (a header-injecting extension), or swap
//! the layer for the service's login. `ADDR` overrides the address.

use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl Job for Greet {
    const NAME: &'static str = "greet";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<String, gaffer::Error> {
        Ok(format!("hello {}", self.name))
    }
}

/// The service's own auth: every request under `/admin` needs the key.
async fn require_admin(req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get("x-admin-key")
        .is_some_and(|v| v.as_bytes() == b"demo");
    if ok {
        next.run(req).await
    } else {
        (StatusCode::UNAUTHORIZED, "admins only").into_response()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .flush_interval(Duration::from_millis(5))
        .register::<Greet>()
        .start()
        .await?;
    for name in ["ada", "grace", "linus"] {
        engine.submit(Greet { name: name.into() }).await?;
    }

    // In the engine's own process the dashboard reads through the engine's
    // view (no reader of its own: a tab costs only its pages' reads), and
    // acts through the store's inbox, as `gaffer web` does. From another
    // process, `WebConfig::open(&gaffer::Store::local_dir(..))` opens a
    // reader instead.
    let dashboard = gaffer_web::router(
        gaffer_web::WebConfig::live(&engine.live_store()?)
            .await?
            .base_path("/admin/jobs"),
    );
    let app = Router::new()
        .route("/", get(|| async { "the application" }))
        .nest(
            "/admin/jobs",
            dashboard.layer(middleware::from_fn(require_admin)),
        );

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("the dashboard: http://{addr}/admin/jobs (header x-admin-key: demo)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    engine.shutdown().await?;
    Ok(())
}
