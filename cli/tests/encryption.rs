//! The command and the dashboard on an encrypted store (issue #36 §5):
//! without the keys they show `encrypted (key ID)` in place of each sealed
//! value and everything else as usual; given them (`--key-file`,
//! `GAFFER_KEY_FILE`, `GAFFER_KEYS`) they show the values; a wrong key is
//! refused.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{Explode, Greet, at, first_line, url_in};
use gaffer::Engine;
use gaffer::encryption::Keyring;
use gaffer_testkit::http;
use serde_json::Value;
/// `k1` is 32 bytes of 1, as the key file line says.
const K1_LINE: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
/// Another key under the same id.
const WRONG_LINE: &str = "k1:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=";

/// `gaffer --dir DIR args` with `env` (and none of the command's other
/// variables: no keys but those given).
fn gaffer(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    at(dir).envs(env.iter().copied()).run(args)
}

fn job_json(dir: &Path, id: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = args.to_vec();
    all.extend(["job", id]);
    at(dir).envs(env.iter().copied()).json(&all)
}

async fn start(dir: &Path) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Greet>()
        .register::<Explode>()
        .encryption(Keyring::parse(K1_LINE, "test").unwrap())
        .start()
        .await
        .expect("engine starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_shows_encrypted_without_the_keys_and_the_values_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("keys");
    std::fs::write(&key_file, format!("# test keys\n{K1_LINE}\n")).unwrap();
    let wrong_file = keys.path().join("wrong");
    std::fs::write(&wrong_file, WRONG_LINE).unwrap();
    let key_path = key_file.to_str().unwrap();

    let engine = start(dir.path()).await;
    let greet = engine.submit(Greet { name: "ada".into() }).await.unwrap();
    let greet_id = greet.id().to_string();
    assert_eq!(greet.await.unwrap(), "hello ada");
    let boom = engine.submit(Explode).await.unwrap();
    let boom_id = boom.id().to_string();
    assert!(boom.await.is_err());

    // Without keys: states, types and times, and `encrypted` for values.
    let shown = job_json(dir.path(), &greet_id, &[], &[]);
    assert_eq!(shown["state"], "succeeded");
    assert_eq!(shown["job_type"], "greet");
    assert_eq!(shown["output"], "encrypted (key k1)");
    let shown = job_json(dir.path(), &boom_id, &[], &[]);
    assert_eq!(shown["state"], "failed");
    assert_eq!(shown["error"], "encrypted (key k1)");

    // With them, by option, by file variable, by the keys variable.
    for (args, env) in [
        (vec!["--key-file", key_path], vec![]),
        (vec![], vec![("GAFFER_KEY_FILE", key_path)]),
        (vec![], vec![("GAFFER_KEYS", K1_LINE)]),
    ] {
        let shown = job_json(dir.path(), &greet_id, &args, &env);
        assert_eq!(shown["output"], "hello ada", "{args:?} {env:?}");
        let shown = job_json(dir.path(), &boom_id, &args, &env);
        assert_eq!(shown["error"], "the fuse was lit", "{args:?} {env:?}");
    }

    // A wrong key is refused, naming it.
    let out = gaffer(
        dir.path(),
        &["--key-file", wrong_file.to_str().unwrap(), "job", &greet_id],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`k1`") && stderr.lines().count() == 1,
        "{stderr}"
    );

    // `rekey` goes through the inbox, sealed with the command's key.
    let out = gaffer(dir.path(), &["--key-file", key_path, "rekey"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("rekeyed to `k1`"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `keygen` prints a line a keyring reads.
    let out = gaffer(dir.path(), &["keygen", "k2"], &[]);
    let line = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        Keyring::parse(&line, "keygen").unwrap().newest_id(),
        Some("k2")
    );

    // The dashboard: `encrypted` without the keys, the value with them.
    for (env, expect) in [
        (vec![], "encrypted (key k1)"),
        (vec![("GAFFER_KEY_FILE", key_path)], "hello ada"),
    ] {
        let mut child =
            at(dir.path())
                .envs(env.iter().copied())
                .spawn(&["web", "--listen", "127.0.0.1:0"]);
        let url = url_in(&first_line(&mut child).await);
        let addr = url.split('/').next().expect("an address");
        let (_, page) = http::get(addr, &format!("/jobs/{greet_id}")).await;
        assert!(page.contains(expect), "{env:?}: {page}");
        child.kill().await.unwrap();
    }
    engine.shutdown().await.unwrap();
}
