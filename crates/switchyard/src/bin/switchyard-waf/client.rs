//! The test client: one request over a fresh connection, its response read
//! with a deadline. A closed connection, a timeout or an unparsable answer
//! is an outcome, not a crash (go-ftw's `expect_error` tests want one).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Connecting to our own loopback listener is immediate or broken.
const CONNECT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Head and body as received (what `response_contains` searches).
    pub raw: Vec<u8>,
    /// `Set-Cookie` name/value pairs (for `save_cookie`).
    pub cookies: Vec<(String, String)>,
}

/// What happened to one request.
pub struct Exchange {
    /// Our end's port: the audit log names the client by it.
    pub local_port: Option<u16>,
    pub response: Result<Response, String>,
}

pub fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> Exchange {
    let s = match TcpStream::connect_timeout(&addr, CONNECT) {
        Ok(s) => s,
        Err(e) => {
            return Exchange {
                local_port: None,
                response: Err(format!("connect {addr}: {e}")),
            }
        }
    };
    let local_port = s.local_addr().ok().map(|a| a.port());
    Exchange {
        local_port,
        response: talk(s, request, timeout),
    }
}

fn talk(mut s: TcpStream, request: &[u8], timeout: Duration) -> Result<Response, String> {
    let deadline = Instant::now() + timeout;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    // The server may answer (400, 413) and close before taking the whole
    // request: a failed write still leaves a response to read.
    let write_err = s.write_all(request).err();
    let head_request = request.starts_with(b"HEAD ");
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16 * 1024];
    loop {
        if let Some(r) = complete(&buf, head_request)? {
            // Done with it: close now rather than at drop, so the proxy
            // sees the end of a kept-alive connection at once.
            let _ = s.shutdown(Shutdown::Both);
            return Ok(r);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(match write_err {
                Some(e) => format!("write: {e}; no response within {timeout:?}"),
                None => format!("no complete response within {timeout:?}"),
            });
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut tmp) {
            Ok(0) => return at_eof(buf, write_err),
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A reset after a complete answer that is framed by the close.
            Err(e) if e.kind() == ErrorKind::ConnectionReset && !buf.is_empty() => {
                return at_eof(buf, write_err)
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// The connection closed: a response framed by the close is complete.
fn at_eof(buf: Vec<u8>, write_err: Option<std::io::Error>) -> Result<Response, String> {
    if buf.is_empty() {
        return Err(match write_err {
            Some(e) => format!("connection closed without a response (write: {e})"),
            None => "connection closed without a response".into(),
        });
    }
    match parse_head(&buf)? {
        Some((status, head_len, cookies)) => {
            let _ = head_len;
            Ok(Response {
                status,
                raw: buf,
                cookies,
            })
        }
        None => Err("connection closed inside the response head".into()),
    }
}

type Head = (u16, usize, Vec<(String, String)>);

/// Status, head length and cookies once the head is complete (interim 1xx
/// responses skipped by the caller).
fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut r = httparse::Response::new(&mut headers);
    match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => {
            let cookies = r
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("set-cookie"))
                .filter_map(|h| {
                    let v = String::from_utf8_lossy(h.value);
                    let pair = v.split(';').next()?.trim().to_string();
                    let (n, v) = pair.split_once('=')?;
                    Some((n.trim().to_string(), v.trim().to_string()))
                })
                .collect();
            Ok(Some((r.code.unwrap_or(0), n, cookies)))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(format!(
            "unparsable response ({e}): {:?}",
            String::from_utf8_lossy(&buf[..buf.len().min(80)])
        )),
    }
}

/// The response, once `buf` holds all of it.
fn complete(buf: &[u8], head_request: bool) -> Result<Option<Response>, String> {
    let mut start = 0;
    loop {
        let Some((status, head_len, cookies)) = parse_head(&buf[start..])? else {
            return Ok(None);
        };
        // 100 Continue and other interim answers precede the real one.
        if (100..200).contains(&status) && status != 101 {
            start += head_len;
            continue;
        }
        let head = &buf[start..start + head_len];
        let body = &buf[start + head_len..];
        let no_body = head_request || status == 204 || status == 304 || status == 101;
        let done = if no_body {
            true
        } else if let Some(n) = header(head, "content-length").and_then(|v| v.trim().parse().ok()) {
            body.len() >= n
        } else if header(head, "transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            chunked_done(body)
        } else {
            // Framed by the close: read to the end.
            false
        };
        return Ok(done.then(|| Response {
            status,
            raw: buf.to_vec(),
            cookies,
        }));
    }
}

fn header(head: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    text.split("\r\n").skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// Whether a chunked body is complete (up to the last chunk and the empty
/// line after any trailers).
fn chunked_done(mut b: &[u8]) -> bool {
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let line = String::from_utf8_lossy(&b[..eol]);
        let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
        else {
            // Malformed: let the deadline or the close end it.
            return false;
        };
        b = &b[eol + 2..];
        if size == 0 {
            // Trailers end with an empty line.
            return b.starts_with(b"\r\n") || b.windows(4).any(|w| w == b"\r\n\r\n");
        }
        if b.len() < size + 2 {
            return false;
        }
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        let r = complete(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false)
            .expect("ok")
            .expect("complete");
        assert_eq!(r.status, 200);
        assert!(
            complete(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhi", false)
                .expect("ok")
                .is_none()
        );
        let r = complete(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .expect("ok")
        .expect("complete");
        assert_eq!(r.status, 403);
        let c = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: s=1; Path=/\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        let r = complete(c, false).expect("ok").expect("complete");
        assert_eq!(r.cookies, vec![("s".to_string(), "1".to_string())]);
        assert!(complete(&c[..c.len() - 2], false).expect("ok").is_none());
        // Framed by the close.
        assert!(complete(b"HTTP/1.0 200 OK\r\n\r\nabc", false)
            .expect("ok")
            .is_none());
        let r = at_eof(b"HTTP/1.0 200 OK\r\n\r\nabc".to_vec(), None).expect("response");
        assert_eq!(r.status, 200);
        assert!(at_eof(Vec::new(), None).is_err());
        assert!(complete(b"garbage\r\n\r\n", false).is_err());
        assert!(
            complete(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
                .expect("ok")
                .is_some()
        );
    }

    #[test]
    fn against_a_server() {
        let o = super::super::origin::Origin::start().expect("origin");
        let x = exchange(
            o.addr,
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            Duration::from_secs(5),
        );
        assert!(x.local_port.is_some());
        assert_eq!(x.response.expect("response").status, 200);
        // Nothing listening: an error, not a panic.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = dead.local_addr().expect("addr");
        drop(dead);
        assert!(
            exchange(addr, b"GET / HTTP/1.1\r\n\r\n", Duration::from_secs(1))
                .response
                .is_err()
        );
    }
}
