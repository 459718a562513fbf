//! A real S3 API on loopback for the tests: moto's server mode (from PyPI),
//! which supports the conditional writes SlateDB's manifest needs
//! (`If-None-Match: *` and `If-Match`, atomically; s3s-fs checks and writes
//! in two steps, so two racing writers can both win, and s3rver ignores the
//! headers).
//!
//! The server is found at `$GAFFER_MOTO_SERVER`, else in
//! `target/moto-venv/bin/moto_server` (`.ci/run` installs it there), else it
//! is installed there first (`python3 -m venv` + `pip install 'moto[server]'`,
//! about 35 s once). Each test gets a server of its own on a free port, and
//! a bucket; the server is killed when the handle drops.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use crate::{LIMIT, POLL};

/// The bucket every test server has.
pub const BUCKET: &str = "gaffer";

/// A running S3 server.
pub struct S3Server {
    child: Child,
    port: u16,
}

static INSTALL: Mutex<()> = Mutex::new(());

/// `target/moto-venv` of the workspace (the directory holding `Cargo.lock`,
/// above this kit's).
fn venv() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&manifest);
    root.join("target/moto-venv")
}

/// The `moto_server` executable, installed if need be.
fn moto_server() -> PathBuf {
    if let Ok(path) = std::env::var("GAFFER_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let bin = venv().join("bin/moto_server");
    let _installing = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if !bin.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv())
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv().join("bin/pip"))
                .args(["install", "--quiet", "moto[server]"])
                .status()
                .is_ok_and(|s| s.success());
        assert!(
            ok && bin.exists(),
            "could not install moto's S3 server into {}: the S3 tests need python3 with venv \
             and PyPI (or set GAFFER_MOTO_SERVER to a moto_server executable)",
            venv().display()
        );
    }
    bin
}

impl S3Server {
    /// Start a server on a free loopback port and create [`BUCKET`].
    pub fn start() -> Self {
        let mut child = Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("moto_server starts");
        // It says where it listens (werkzeug, on stderr or stdout).
        let (tx, rx) = std::sync::mpsc::channel::<u16>();
        for out in [
            Box::new(child.stderr.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stdout.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                        let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                        if let Ok(port) = port.parse() {
                            let _ = tx.send(port);
                        }
                    }
                }
            });
        }
        let port = match rx.recv_timeout(LIMIT) {
            Ok(port) => port,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("moto_server did not say where it listens within {LIMIT:?}");
            }
        };
        let server = Self { child, port };
        server.create_bucket();
        server
    }

    /// The server's endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The variables that point an S3 client at this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// The URL of `prefix` in [`BUCKET`].
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// `PUT /{BUCKET}`: moto accepts unsigned requests.
    fn create_bucket(&self) {
        let deadline = Instant::now() + LIMIT;
        loop {
            let answer = std::net::TcpStream::connect(("127.0.0.1", self.port)).and_then(|mut s| {
                write!(
                    s,
                    "PUT /{BUCKET} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    self.port
                )?;
                let mut status = String::new();
                BufReader::new(s).read_line(&mut status)?;
                Ok(status)
            });
            match answer {
                Ok(status) if status.contains(" 200") => return,
                _ if Instant::now() < deadline => std::thread::sleep(POLL),
                other => panic!("creating the bucket failed: {other:?}"),
            }
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
