//! What the `gaffer` command and the dashboard show of bytes a job's
//! submitter or handler chose (a payload, an inline output), decoded from
//! MessagePack into JSON whatever they hold: random bytes, valid
//! encodings of any shape, mutated ones (length headers set to claim
//! 4 GiB among them), nested thousands of levels deep. Each shows as JSON
//! or as "not MessagePack": never a panic, a hang, a stack overflow or an
//! allocation as large as a length field claims.
//!
//! Cases per property: `PROPTEST_CASES` (256 unless set), from a fixed
//! seed unless `PROPTEST_RNG_SEED` is set. The large run, by hand
//! (ARCHITECTURE.md, *Testing*):
//! `PROPTEST_CASES=100000 cargo test --release -p gaffer-ops --test hostile_bytes`.

use std::time::Duration;

use gaffer_layout::records::OutputRef;
use gaffer_layout::testing::hostile::{self, Mutation};
use gaffer_ops::queries::output;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde_json::Value;

gaffer_layout::count_allocations!();

/// A decode that has not answered in this long hangs.
const HANG: Duration = Duration::from_secs(10);

/// The largest allocation a decode may make whatever its input claims
/// (serde's 1 MiB cap on what it preallocates for a claimed length;
/// `serde_json::Value` preallocates nothing).
const LARGEST: usize = 2 << 20;

/// The stack of a tokio worker thread, where the dashboard renders a page
/// (the command runs on its main thread's 8 MiB).
const WORKER_STACK: usize = 2 << 20;

fn config() -> ProptestConfig {
    let mut config = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(36);
    }
    config
}

/// What `gaffer job` and the dashboard do with an inline output: decode it
/// as JSON (or say it is not MessagePack), print it, drop it. On a thread
/// with a worker's stack, under the watchdog and the allocation meter.
fn shown(bytes: Vec<u8>) -> Value {
    let what = format!("an output of {} bytes: {bytes:02x?}", bytes.len());
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .stack_size(WORKER_STACK)
        .spawn(move || {
            let ((value, printed), seen) = hostile::measure(|| {
                let (value, blob) = output(&OutputRef::Inline(bytes));
                assert_eq!(blob, None);
                let value = value.expect("an inline output shows as a value");
                let printed = serde_json::to_string_pretty(&value).expect("JSON prints");
                (value, printed)
            });
            let _ = tx.send((value, printed, seen));
        })
        .expect("spawning a test thread");
    let (value, printed, seen) = match rx.recv_timeout(HANG) {
        Ok(out) => out,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: a hang"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().expect_err("it ended without an answer"))
        }
    };
    let _ = worker.join();
    assert!(seen.metered, "the allocation meter is not installed");
    assert!(
        seen.largest <= LARGEST,
        "{what}: an allocation of {} bytes",
        seen.largest
    );
    assert!(!printed.is_empty());
    value
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        2 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        1 => (any::<usize>(), vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => vec(any::<u8>(), 1..8).prop_map(Mutation::Append),
        3 => any::<usize>().prop_map(|n| Mutation::Huge { n }),
    ]
}

/// A JSON value of any shape, as a job's payload or output may be.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map("[a-z]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Random bytes, a MessagePack value of any shape, or one mutated.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    let encoded = json()
        .prop_map(|v| rmp_serde::to_vec(&v).expect("JSON encodes"))
        .boxed();
    prop_oneof![
        1 => vec(any::<u8>(), 0..64),
        1 => encoded.clone(),
        6 => (encoded, vec(mutation(), 1..4)).prop_map(|(b, m)| hostile::mutate(&b, &m)),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_output_shows_as_json_or_as_not_messagepack(bytes in payload()) {
        let value = shown(bytes.clone());
        if rmp_serde::from_slice::<Value>(&bytes).is_err() {
            prop_assert_eq!(
                value,
                Value::String(format!("<{} bytes, not MessagePack>", bytes.len()))
            );
        }
    }
}

/// Arrays, maps and both nested up to the limit (`records::MAX_NESTING`)
/// show as JSON; nested past it (up to rmp-serde's own 1024 levels and
/// beyond, which overflowed a worker's stack in a debug build) they are
/// refused as not MessagePack, on a worker's stack.
#[test]
fn the_deepest_nesting_shows_without_overflowing_a_workers_stack() {
    use gaffer_layout::records::MAX_NESTING;
    // Each opening and the levels it adds; a nil closes the innermost.
    for (open, levels) in [
        (&[0x91][..], 1),
        (&[0x81, 0xa1, b'k'][..], 1),
        (&[0x91, 0x81, 0xa1, b'k'][..], 2),
    ] {
        for depth in [MAX_NESTING - 2, MAX_NESTING, 1000, 1023, 1024, 5000] {
            let mut bytes = open.repeat(depth / levels);
            bytes.push(0xc0);
            let len = bytes.len();
            let value = shown(bytes);
            let refused = Value::String(format!("<{len} bytes, not MessagePack>"));
            if depth < MAX_NESTING {
                assert_ne!(value, refused, "{depth} levels");
            } else {
                assert_eq!(value, refused, "{depth} levels");
            }
        }
    }
}
