//! Heads serialised as HTTP/1.1, once, at the edge: the request for an
//! HTTP/1.1 member and the response for an HTTP/1.x client.
//!
//! Fields that describe one connection (hop-by-hop, or named by
//! Connection) never leave; the framing fields are restated from what the
//! proxy decided (`ClientFraming`, `chunked`), never copied.

use super::message::{Request, Response};

#[inline]
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The request head for a member. `chunked` frames the body as chunked (a
/// body without a length); `default_host` is sent as Host when the request
/// has none (HTTP/1.0 clients need not send one; HTTP/1.1 members require it).
pub fn request(out: &mut Vec<u8>, req: &Request, chunked: bool, default_host: &[u8]) {
    let head = &req.head;
    out.extend_from_slice(req.method_str());
    out.push(b' ');
    out.extend_from_slice(req.member_target());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut has_host = false;
    for (name, value) in head.fields.iter() {
        if head.is_connection_field(name) {
            continue;
        }
        if name.eq_ignore_ascii_case(b"host") {
            // `req.host` is the request's authority (an absolute-form
            // target's wins over the field): stages change it there.
            has_host = true;
            field(out, b"host", req.host().unwrap_or(value));
            continue;
        }
        field(out, name, value);
    }
    if !has_host {
        field(out, b"host", req.host().unwrap_or(default_host));
    }
    if head.upgrade {
        field(out, b"connection", b"upgrade");
        if let Some(u) = head.get("upgrade") {
            field(out, b"upgrade", u);
        }
    }
    if chunked {
        field(out, b"transfer-encoding", b"chunked");
    }
    out.extend_from_slice(b"\r\n");
}

/// How a response leaves toward an HTTP/1.x client.
#[derive(Default, Clone, Copy)]
pub struct ClientFraming {
    pub chunked: bool,
    pub close: bool,
    /// An HTTP/1.0 client asked for keep-alive and gets it.
    pub keep_alive_10: bool,
    pub upgrade: bool,
}

/// The response head for a client.
pub fn response(out: &mut Vec<u8>, resp: &Response, cf: &ClientFraming) {
    let head = &resp.head;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&itoa3(resp.status));
    out.push(b' ');
    out.extend_from_slice(&resp.reason);
    out.extend_from_slice(b"\r\n");
    for (name, value) in head.fields.iter() {
        if head.is_connection_field(name) {
            continue;
        }
        field(out, name, value);
    }
    if cf.upgrade {
        field(out, b"connection", b"upgrade");
        if let Some(u) = head.get("upgrade") {
            field(out, b"upgrade", u);
        }
    } else if cf.close {
        field(out, b"connection", b"close");
    } else if cf.keep_alive_10 {
        field(out, b"connection", b"keep-alive");
    }
    if cf.chunked {
        field(out, b"transfer-encoding", b"chunked");
    }
    out.extend_from_slice(b"\r\n");
}

/// An interim (1xx) response relayed as it came, minus hop-by-hop fields.
pub fn interim(out: &mut Vec<u8>, resp: &Response) {
    response(out, resp, &ClientFraming::default());
}

fn itoa3(n: u16) -> [u8; 3] {
    [
        b'0' + (n / 100 % 10) as u8,
        b'0' + (n / 10 % 10) as u8,
        b'0' + (n % 10) as u8,
    ]
}
