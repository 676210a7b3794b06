//! The test origin: albedo's behaviour (coreruleset/albedo, what the CRS
//! test setup puts behind the WAF), in process on a loopback port.
//!
//! - `POST /reflect` (and `/reflect/...`) with a JSON body
//!   `{status, headers, body, encodedBody}` answers with exactly that
//!   status, those headers and that body (the CRS response-rule tests).
//! - Every other request: 200 with an empty body.
//!
//! Plain threads and blocking sockets: a handful of connections at a time,
//! and no part of the proxy under test is reused to test it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Idle time after which a kept-alive connection is closed.
const IDLE: Duration = Duration::from_secs(30);
/// Bound on a request head and body (the CRS tests send at most ~70 KB).
const MAX_REQUEST: usize = 16 << 20;

pub struct Origin {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Origin {
    pub fn start() -> std::io::Result<Origin> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        std::thread::Builder::new()
            .name("ftw-origin".into())
            .spawn(move || {
                for conn in l.incoming() {
                    if st.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Ok(s) = conn {
                        let _ = std::thread::Builder::new()
                            .name("ftw-origin-conn".into())
                            .spawn(move || serve(s));
                    }
                }
            })?;
        Ok(Origin { addr, stop })
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// A request as the origin needs it.
pub struct Req {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    pub keep_alive: bool,
}

fn serve(mut s: TcpStream) {
    let _ = s.set_read_timeout(Some(IDLE));
    let _ = s.set_write_timeout(Some(IDLE));
    let _ = s.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let req = match read_request(&mut s, &mut buf) {
            Ok(Some(r)) => r,
            // Closed, timed out or unparsable: nothing more on this one.
            Ok(None) | Err(_) => return,
        };
        let resp = answer(&req);
        if s.write_all(&resp).is_err() || !req.keep_alive {
            return;
        }
    }
}

/// Reads one request (head and body, Content-Length or chunked) from `s`;
/// `buf` keeps bytes of the next one. `Ok(None)`: the peer closed first.
pub fn read_request(s: &mut impl Read, buf: &mut Vec<u8>) -> Result<Option<Req>, String> {
    let head_len = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > MAX_REQUEST {
            return Err("request head too large".into());
        }
        if !fill(s, buf)? {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err("closed inside a request head".into())
            };
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(&buf[..head_len]) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err("unparsable request head".into()),
    }
    let method = r.method.unwrap_or("").to_string();
    let path = r.path.unwrap_or("").to_string();
    let http10 = r.version == Some(0);
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut keep_alive = !http10;
    for h in r.headers.iter() {
        let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(v.trim().parse().map_err(|_| "bad Content-Length")?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.contains("chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            if v.contains("close") {
                keep_alive = false;
            } else if v.contains("keep-alive") {
                keep_alive = true;
            }
        }
    }
    buf.drain(..head_len);
    let body = if chunked {
        read_chunked(s, buf)?
    } else {
        let n = length.unwrap_or(0);
        if n > MAX_REQUEST {
            return Err("request body too large".into());
        }
        while buf.len() < n {
            if !fill(s, buf)? {
                return Err("closed inside a request body".into());
            }
        }
        buf.drain(..n).collect()
    };
    Ok(Some(Req {
        method,
        path,
        body,
        keep_alive,
    }))
}

fn read_chunked(s: &mut impl Read, buf: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(p) = find(buf, b"\r\n") {
                break p;
            }
            if !fill(s, buf)? {
                return Err("closed inside a chunk size".into());
            }
        };
        let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                if let Some(p) = find(buf, b"\r\n") {
                    let empty = p == 0;
                    buf.drain(..p + 2);
                    if empty {
                        return Ok(body);
                    }
                    continue;
                }
                if !fill(s, buf)? {
                    return Err("closed inside chunk trailers".into());
                }
            }
        }
        if body.len() + size > MAX_REQUEST {
            return Err("request body too large".into());
        }
        while buf.len() < size + 2 {
            if !fill(s, buf)? {
                return Err("closed inside a chunk".into());
            }
        }
        body.extend(buf.drain(..size));
        buf.drain(..2);
    }
}

/// Reads more bytes into `buf`; false at end of stream.
fn fill(s: &mut impl Read, buf: &mut Vec<u8>) -> Result<bool, String> {
    let mut tmp = [0u8; 16 * 1024];
    match s.read(&mut tmp) {
        Ok(0) => Ok(false),
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            Ok(true)
        }
        Err(e) => Err(e.to_string()),
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// albedo's answer to `req`, as bytes.
pub fn answer(req: &Req) -> Vec<u8> {
    let path = req.path.split('?').next().unwrap_or("");
    let reflect = req.method == "POST" && (path == "/reflect" || path.starts_with("/reflect/"));
    let (status, headers, body) = if reflect {
        reflect_spec(&req.body)
    } else {
        (200, Vec::new(), Vec::new())
    };
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status)).into_bytes();
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    // Go's net/http sniffs a Content-Type for a body that has none.
    let sniffed = (!body.is_empty() && !has("content-type")).then(|| sniff(&body));
    for (k, v) in &headers {
        // Framing is ours to say: a reflected Content-Length or
        // Transfer-Encoding could desynchronise the connection.
        if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding") {
            continue;
        }
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    if let Some(ct) = sniffed {
        out.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
    }
    let no_body = (100..200).contains(&status) || status == 204 || status == 304;
    if !no_body {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    if !req.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !no_body && req.method != "HEAD" {
        out.extend_from_slice(&body);
    }
    out
}

type Spec = (u16, Vec<(String, String)>, Vec<u8>);

fn bad_request(msg: &str) -> Spec {
    (400, Vec::new(), msg.as_bytes().to_vec())
}

/// albedo's handleReflect: the JSON names the answer. Go's encoding/json
/// matches field names case-insensitively, and so does this.
fn reflect_spec(body: &[u8]) -> Spec {
    let Ok(serde_json::Value::Object(spec)) = serde_json::from_slice::<serde_json::Value>(body)
    else {
        return bad_request("Invalid JSON in request body");
    };
    let field = |name: &str| {
        spec.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let status = match field("status") {
        None | Some(serde_json::Value::Null) => 0,
        Some(v) => match v.as_i64() {
            Some(n) => n,
            None => return bad_request("Invalid JSON in request body"),
        },
    };
    if (1..100).contains(&status) || !(0..600).contains(&status) {
        return bad_request(&format!("Invalid status code: {status}"));
    }
    let status = if status == 0 { 200 } else { status as u16 };
    let mut headers = Vec::new();
    if let Some(serde_json::Value::Object(h)) = field("headers") {
        for (k, v) in h {
            let Some(v) = v.as_str() else {
                return bad_request("Invalid JSON in request body");
            };
            // Go's net/http drops header names and values it cannot send.
            let name_ok = !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
            let value_ok = !v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0);
            if name_ok && value_ok {
                headers.push((k.clone(), v.to_string()));
            }
        }
    }
    let text = field("body").and_then(|v| v.as_str()).unwrap_or("");
    let body = if !text.is_empty() {
        text.as_bytes().to_vec()
    } else {
        match field("encodedBody").and_then(|v| v.as_str()) {
            None | Some("") => Vec::new(),
            Some(e) => match super::request::base64_decode(e) {
                Ok(b) => b,
                Err(_) => return bad_request("invalid base64 encoding of response body"),
            },
        }
    };
    (status, headers, body)
}

/// A short version of Go's http.DetectContentType: the types that decide
/// whether CRS inspects a response body (text/html, text/xml, text/plain).
pub fn sniff(body: &[u8]) -> &'static str {
    let start = body
        .iter()
        .position(|b| !matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' '))
        .unwrap_or(body.len());
    let b = &body[start..];
    const HTML: [&[u8]; 17] = [
        b"<!DOCTYPE HTML",
        b"<HTML",
        b"<HEAD",
        b"<SCRIPT",
        b"<IFRAME",
        b"<H1",
        b"<DIV",
        b"<FONT",
        b"<TABLE",
        b"<A",
        b"<STYLE",
        b"<TITLE",
        b"<B",
        b"<BODY",
        b"<BR",
        b"<P",
        b"<!--",
    ];
    for sig in HTML {
        if b.len() > sig.len()
            && b[..sig.len()].eq_ignore_ascii_case(sig)
            && matches!(b[sig.len()], b' ' | b'>')
        {
            return "text/html; charset=utf-8";
        }
    }
    if b.starts_with(b"<?xml") {
        return "text/xml; charset=utf-8";
    }
    if b.starts_with(b"%PDF-") {
        return "application/pdf";
    }
    let binary = body[..body.len().min(512)]
        .iter()
        .any(|&c| matches!(c, 0..=8 | 0x0b | 0x0e..=0x1a | 0x1c..=0x1f));
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, path: &str, body: &str) -> Req {
        Req {
            method: method.into(),
            path: path.into(),
            body: body.as_bytes().to_vec(),
            keep_alive: true,
        }
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8_lossy(&b).into_owned()
    }

    #[test]
    fn everything_else_is_an_empty_200() {
        let r = text(answer(&req("GET", "/get?x=1", "")));
        assert_eq!(r, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        let r = text(answer(&req("GET", "/reflect", "{\"status\": 500}")));
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    }

    #[test]
    fn reflect_answers_what_it_is_told() {
        let r = text(answer(&req(
            "POST",
            "/reflect",
            r#"{"status": 404, "headers": {"X-A": "b", "Content-Type": "text/html"}, "body": "<?php echo 1 ?>"}"#,
        )));
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        assert!(
            r.contains("X-A: b\r\n") && r.contains("Content-Type: text/html\r\n"),
            "{r}"
        );
        assert!(
            r.ends_with("Content-Length: 15\r\n\r\n<?php echo 1 ?>"),
            "{r}"
        );
        // No Content-Type: sniffed as Go does.
        let r = text(answer(&req(
            "POST",
            "/reflect",
            r#"{"body": "plain words"}"#,
        )));
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("Content-Type: text/plain; charset=utf-8\r\n"),
            "{r}"
        );
        let e = super::super::request::base64_encode(b"<html><body>x");
        let r = text(answer(&req(
            "POST",
            "/reflect",
            &format!("{{\"encodedBody\": \"{e}\"}}"),
        )));
        assert!(
            r.contains("Content-Type: text/html; charset=utf-8\r\n"),
            "{r}"
        );
        assert!(r.ends_with("<html><body>x"), "{r}");
    }

    #[test]
    fn reflect_refuses_what_albedo_refuses() {
        let r = text(answer(&req("POST", "/reflect", "not json")));
        assert!(r.starts_with("HTTP/1.1 400 ") && r.ends_with("Invalid JSON in request body"));
        let r = text(answer(&req("POST", "/reflect", "{\"status\": 700}")));
        assert!(r.ends_with("Invalid status code: 700"), "{r}");
    }

    #[test]
    fn reads_length_and_chunked_bodies_back_to_back() {
        let wire = b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcPOST /b HTTP/1.1\r\n\
                     Transfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n1;ext=1\r\nz\r\n0\r\n\r\n\
                     GET /c HTTP/1.0\r\n\r\n";
        let mut s = &wire[..];
        let mut buf = Vec::new();
        let a = read_request(&mut s, &mut buf)
            .expect("ok")
            .expect("a request");
        assert_eq!((a.path.as_str(), &a.body[..]), ("/a", &b"abc"[..]));
        let b = read_request(&mut s, &mut buf)
            .expect("ok")
            .expect("a request");
        assert_eq!((b.path.as_str(), &b.body[..]), ("/b", &b"xyz"[..]));
        let c = read_request(&mut s, &mut buf)
            .expect("ok")
            .expect("a request");
        assert!(!c.keep_alive);
        assert!(read_request(&mut s, &mut buf).expect("ok").is_none());
    }

    #[test]
    fn serves_over_tcp() {
        let o = Origin::start().expect("origin");
        let mut s = TcpStream::connect(o.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(b"POST /reflect HTTP/1.1\r\nContent-Length: 27\r\nConnection: close\r\n\r\n{\"status\":201,\"body\":\"hi\"}\n")
            .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        assert!(out.starts_with("HTTP/1.1 201 Created\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nhi"), "{out}");
    }
}
