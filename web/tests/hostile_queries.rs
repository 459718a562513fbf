//! Every page of the dashboard fed query strings and ids as anyone may type
//! them (cursors, shards, states, types, times, request lists, ids in the
//! path: random text, near misses of valid forms, huge numbers): each
//! answers a page or an error page (a status below 500), never a panic.
//!
//! Cases: 64 unless `PROPTEST_CASES` is set (each is a request to a live
//! engine's store), from a fixed seed unless `PROPTEST_RNG_SEED` is set.
//! The large run, by hand (ARCHITECTURE.md, *Testing*):
//! `PROPTEST_CASES=100000 cargo test --release -p gaffer-web --test hostile_queries`.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use common::{Fix, LIMIT};
use gaffer_web::WebConfig;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tower::ServiceExt;

/// A live engine's store (a failed job, a succeeded one, a batch), its
/// dashboard, and the runtime both run on: made once, for every case.
struct Site {
    runtime: tokio::runtime::Runtime,
    app: Router,
    ids: Vec<String>,
    _engine: gaffer::Engine,
    _dir: tempfile::TempDir,
}

fn site() -> &'static Site {
    static SITE: OnceLock<Site> = OnceLock::new();
    SITE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (engine, app, ids) = runtime.block_on(async {
            let fix = Arc::new(Fix::default());
            let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
            let failed = engine
                .submit(common::Flaky { text: "x".into() })
                .await
                .expect("a submit");
            assert!(failed.join().await.expect("an end").is_err());
            let ping = engine
                .submit(common::Ping { n: 1 })
                .await
                .expect("a submit");
            assert_eq!(ping.join().await.expect("an end").ok(), Some(1));
            let ids = vec![failed.id().to_string(), ping.id().to_string()];
            let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
                .await
                .expect("the dashboard opens the store");
            (engine, gaffer_web::router(config), ids)
        });
        Site {
            runtime,
            app,
            ids,
            _engine: engine,
            _dir: dir,
        }
    })
}

fn config() -> ProptestConfig {
    let mut config = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 64;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(36);
    }
    config
}

/// A value as someone may type it: anything, or a near miss of what the
/// dashboard prints (cursors, request lists, times, numbers).
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{0,25}",
        "-[0-9]{1,20}",
        "live:[0-9]{0,21}:[a-z.:-]{0,12}:[0-9a-fA-F]{0,12}",
        "ended:[0-9a-f]{0,17}/?[0-9A-Z]{0,27}",
        "[0-9]{0,3}:[0-9A-Za-z_<>-]{0,27}:[0-9A-Za-z_-]{0,27}",
        "[0-9]{4,6}-[0-9]{1,3}-[0-9]{1,3}T[0-9]{1,3}:[0-9]{1,3}(:[0-9]{1,3})?",
        prop_oneof![
            Just("queued"),
            Just("waiting"),
            Just("dead"),
            Just("succeeded"),
            Just("flaky"),
            Just("ping"),
            Just("double"),
            Just("jobs.flaky"),
        ]
        .prop_map(str::to_string),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop_oneof![
            Just("after"),
            Just("before"),
            Just("shard"),
            Just("state"),
            Just("type"),
            Just("since"),
            Just("q"),
            Just("r"),
            Just("limit"),
            Just("items"),
        ]
        .prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

/// Percent-encoded, every byte that is not plain.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The pages that take no id, and those that take one in their path.
const PAGES: &[&str] = &[
    "/",
    "/jobs",
    "/failed",
    "/batches",
    "/workflows",
    "/periodic",
    "/queues",
    "/submit",
    "/requests",
];
const PAGES_OF: &[&str] = &["/jobs/", "/batches/", "/workflows/"];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_query_string_gets_a_page_or_an_error_page(
        page in 0..PAGES.len() + PAGES_OF.len(),
        id in prop_oneof![value(), (0usize..2).prop_map(|i| site().ids[i].clone())],
        pairs in vec((name(), value()), 0..4),
    ) {
        let site = site();
        let path = match page.checked_sub(PAGES.len()) {
            None => PAGES[page].to_string(),
            Some(i) => format!("{}{}", PAGES_OF[i], enc(&id)),
        };
        let query: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect();
        let uri = format!("{path}?{}", query.join("&"));
        let status = site.runtime.block_on(async {
            let request = Request::get(&uri).body(Body::empty()).expect("a request");
            let answer = tokio::time::timeout(LIMIT, site.app.clone().oneshot(request))
                .await
                .unwrap_or_else(|_| panic!("{uri}: no answer within {LIMIT:?}"))
            .expect("the router answers");
            answer.status()
        });
        prop_assert!(status.as_u16() < 500, "{uri}: {status}");
    }
}
