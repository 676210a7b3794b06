//! `r:sideband(pool, {...})`: an HTTP/1.1 call-out from a script to a
//! member of one of the configuration's pools (iRules' `sideband`,
//! HAProxy's `httpclient`): an authorization service asked before the
//! request goes on, a token introspected, a flag looked up.
//!
//! It never blocks the worker: the script's `on_request` runs as a
//! coroutine (`script::State::on_request_waiting`) that yields while the call is
//! on the network, and the worker serves other connections meanwhile.
//! Every step is bounded: the whole call by its `timeout` (default 1 s, at
//! most 30 s), the answer by `max_body` plus 64 KiB of head.
//!
//! A member is picked as for requests (the pool's balancer, health, backups,
//! `max_connections`); a failed connect tries one other member. The call
//! is one request on a connection of its own (`Connection: close`): a
//! call-out is rarer than the requests it guards, and a pooled connection
//! would tie the script to the proxy's member-connection machinery. A pool
//! with `[pool.tls]` is called over TLS as its requests are (its CA, its
//! `sni` or the member's address as the name checked, its client
//! certificate, ALPN "http/1.1"), inside the same `timeout`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::balance::Tried;
use crate::config::snapshot::Pool;
use crate::script::callout::{Answer, Call, CallOut};

const MAX_HEAD: usize = 64 << 10;

/// The call-outs of one request's script: its vserver's script pools.
pub struct Pools(pub Vec<Arc<Pool>>);

impl CallOut for Pools {
    fn call(&self, pool: usize, c: Call) -> Pin<Box<dyn Future<Output = Result<Answer, String>>>> {
        let pool = self.0.get(pool).cloned();
        Box::pin(async move {
            match pool {
                Some(p) => call(&p, c).await,
                None => Err("no such pool".to_string()),
            }
        })
    }
}

/// Makes the call; the error says why in a few words (for the script's
/// second return value).
pub async fn call(pool: &Pool, c: Call) -> Result<Answer, String> {
    let timeout = c.timeout;
    match tokio::time::timeout(timeout, attempt(pool, &c)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn attempt(pool: &Pool, c: &Call) -> Result<Answer, String> {
    let mut tried = Tried::default();
    let mut last = String::new();
    let members = pool.members.load_full();
    for _ in 0..2 {
        let Some(i) = members.balancer.pick(&members.list, None, None, tried) else {
            break;
        };
        tried.add(i);
        let m = &members[i];
        let tcp = match tokio::net::TcpStream::connect(m.addr).await {
            Ok(s) => s,
            Err(e) => {
                last = format!("connect to {}: {e}", m.addr);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &pool.tls else {
            return exchange(tcp, m.addr, c).await;
        };
        let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
        match connector.connect(tls.server_name(m.addr), tcp).await {
            Ok(s) => return exchange(s, m.addr, c).await,
            // The next member may have its certificate right.
            Err(e) => last = format!("TLS to {}: {e}", m.addr),
        }
    }
    if last.is_empty() {
        last = format!("no member of pool {:?} is available", pool.name);
    }
    Err(last)
}

async fn exchange(
    mut s: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    addr: std::net::SocketAddr,
    c: &Call,
) -> Result<Answer, String> {
    let mut head = format!("{} {} HTTP/1.1\r\n", c.method, c.path);
    let mut has_host = false;
    for (n, v) in &c.headers {
        has_host |= n == "host";
        head.push_str(n);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    if !has_host {
        head.push_str(&format!("host: {addr}\r\n"));
    }
    if !c.body.is_empty() || !matches!(c.method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS") {
        head.push_str(&format!("content-length: {}\r\n", c.body.len()));
    }
    head.push_str("connection: close\r\n\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&c.body);
    s.write_all(&out)
        .await
        .map_err(|e| format!("send to {addr}: {e}"))?;
    // Read to the end (the member closes after its answer), bounded.
    let limit = MAX_HEAD + c.max_body + 16;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read from {addr}: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > limit {
            return Err(format!(
                "the answer is longer than {} bytes (max_body)",
                c.max_body
            ));
        }
        if let Some(a) = complete(&buf, c.max_body, c.method == "HEAD")? {
            return Ok(a);
        }
    }
    complete_at_close(&buf, c.max_body)
}

/// The answer in `buf` once it is whole (None: more to read).
fn complete(buf: &[u8], max_body: usize, head_request: bool) -> Result<Option<Answer>, String> {
    let Some((mut a, at)) = parse_head(buf)? else {
        return Ok(None);
    };
    let rest = &buf[at..];
    let field = |n: &str| {
        a.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    if head_request || matches!(a.status, 204 | 304) {
        return Ok(Some(a));
    }
    if field("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case(b"chunked")) {
        return Ok(dechunk(rest, max_body)?.map(|b| {
            a.body = b;
            a
        }));
    }
    if let Some(v) = field("content-length") {
        let n: usize = std::str::from_utf8(&v)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or("a bad content-length in the answer")?;
        if n > max_body {
            return Err(format!(
                "the answer is longer than {max_body} bytes (max_body)"
            ));
        }
        if rest.len() >= n {
            a.body = rest[..n].to_vec();
            return Ok(Some(a));
        }
    }
    Ok(None)
}

/// The member closed: an answer without a length ends here.
fn complete_at_close(buf: &[u8], max_body: usize) -> Result<Answer, String> {
    if let Some(a) = complete(buf, max_body, false)? {
        return Ok(a);
    }
    let Some((mut a, at)) = parse_head(buf)? else {
        return Err("the member closed before its answer's head".into());
    };
    let has = |n: &str| a.headers.iter().any(|(k, _)| k == n);
    if has("content-length") || has("transfer-encoding") {
        return Err("the member closed before its answer's end".into());
    }
    a.body = buf[at..].to_vec();
    Ok(a)
}

fn parse_head(buf: &[u8]) -> Result<Option<(Answer, usize)>, String> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut fields);
    match r.parse(buf) {
        Ok(httparse::Status::Complete(at)) => {
            let status = r.code.unwrap_or(0);
            let headers = r
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                .collect();
            Ok(Some((
                Answer {
                    status,
                    headers,
                    body: Vec::new(),
                },
                at,
            )))
        }
        Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD => Ok(None),
        Ok(httparse::Status::Partial) => Err("the answer's head is too long".into()),
        Err(e) => Err(format!("a malformed answer: {e}")),
    }
}

/// A chunked body, once its last chunk came (None: more to read).
fn dechunk(mut b: &[u8], max_body: usize) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())
            .ok_or("a bad chunk size in the answer")?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if out.len() + size > max_body {
            return Err(format!(
                "the answer is longer than {max_body} bytes (max_body)"
            ));
        }
        if b.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_by_length_chunks_or_close() {
        let a = complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            100,
            false,
        )
        .expect("ok")
        .expect("whole");
        assert_eq!((a.status, &a.body[..]), (200, &b"ok"[..]));
        assert!(complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok",
            100,
            false
        )
        .expect("ok")
        .is_none());
        let c =
            b"HTTP/1.1 403 No\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nno\r\n1\r\n!\r\n0\r\n\r\n";
        let a = complete(c, 100, false).expect("ok").expect("whole");
        assert_eq!((a.status, &a.body[..]), (403, &b"no!"[..]));
        let a = complete_at_close(b"HTTP/1.0 200 OK\r\n\r\nall of it", 100).expect("ok");
        assert_eq!(&a.body[..], b"all of it");
        assert!(complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n",
            100,
            false
        )
        .is_err());
        assert!(complete_at_close(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 100).is_err());
    }
}
