//! One HTTP/1.1 request on a fresh loopback connection, for the tests of a
//! served dashboard or endpoint (`gaffer web`, the examples).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::within;

/// `method path` on `addr` naming `host` as its `Host`, with `headers` and
/// an empty body; the connection closes after it. The status and the whole
/// answer (head and body), read within [`crate::LIMIT`]; status 0 if the
/// answer has none.
pub async fn request(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    within(s.read_to_string(&mut out)).await.unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// `GET path` on `addr` (its own `Host`): the status and the whole answer.
pub async fn get(addr: &str, path: &str) -> (u16, String) {
    request(addr, addr, "GET", path, &[]).await
}

/// A loopback port that was free a moment ago (bound, then released, for a
/// child process to listen on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
