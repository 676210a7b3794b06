//! Writing the heads that leave the proxy: the request to a member and the
//! response to the client. Hop-by-hop fields are dropped, forwarding fields
//! added, the operator's header edits applied, and framing restated.

use std::net::IpAddr;

use crate::config::snapshot::HeaderEdits;
use crate::http::head::{is_hop_by_hop, Head, Request, Response};

fn dropped(head: &Head, name: &[u8], edits: &[&HeaderEdits]) -> bool {
    is_hop_by_hop(name)
        || head
            .connection_tokens
            .iter()
            .any(|t| t.as_bytes().eq_ignore_ascii_case(name))
        || edits.iter().any(|e| e.drops(name))
}

/// Edits apply in order (virtual server, then matching policies): a field
/// set or added by one is dropped when a later one sets or removes it.
fn put_edits(out: &mut Vec<u8>, edits: &[&HeaderEdits]) {
    for (i, e) in edits.iter().enumerate() {
        for (n, v) in e.set.iter().chain(&e.add) {
            if edits[i + 1..].iter().any(|later| later.drops(n.as_bytes())) {
                continue;
            }
            field(out, n.as_bytes(), v.as_bytes());
        }
    }
}

#[inline]
fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

pub struct Forwarding<'a> {
    pub client_ip: IpAddr,
    /// "http" or "https".
    pub proto: &'static str,
    /// On vservers that ask for client certificates: the field that carries
    /// the verified subject, and the subject when a certificate was
    /// verified. A client's own field of that name never passes.
    pub client_cert: Option<(&'a str, Option<&'a str>)>,
}

/// The request head sent to a member.
pub fn request_head(
    out: &mut Vec<u8>,
    req: &Request,
    fwd: &Forwarding<'_>,
    edits: &[&HeaderEdits],
    chunked: bool,
) {
    let head = &req.head;
    out.extend_from_slice(req.method_str());
    out.push(b' ');
    out.extend_from_slice(req.target());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut xff: Option<&[u8]> = None;
    let mut forwarded: Option<&[u8]> = None;
    let mut has_host = false;
    for h in &head.headers {
        let name = head.name(h);
        let value = head.value(h);
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            // Several fields are one list (RFC 9110 5.3); keep the last
            // non-empty as the chain so far.
            xff = Some(value);
            continue;
        }
        if name.eq_ignore_ascii_case(b"forwarded") {
            forwarded = Some(value);
            continue;
        }
        if name.eq_ignore_ascii_case(b"x-forwarded-proto") || name.eq_ignore_ascii_case(b"expect") {
            continue;
        }
        if let Some((cert_field, _)) = fwd.client_cert {
            if name.eq_ignore_ascii_case(cert_field.as_bytes()) {
                continue;
            }
        }
        if name.eq_ignore_ascii_case(b"host") {
            has_host = true;
            // An absolute-form target's authority replaces Host.
            if let Some(h) = req.host() {
                field(out, b"host", h);
                continue;
            }
        }
        if dropped(head, name, edits) {
            continue;
        }
        field(out, name, value);
    }
    if !has_host {
        if let Some(h) = req.host() {
            field(out, b"host", h);
        }
    }
    let ip = match fwd.client_ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(fwd.client_ip),
        v4 => v4,
    };
    // Formatted on the stack and written straight into the head: no
    // allocation per request for the forwarding fields.
    let mut ip_buf = [0u8; 48];
    let ip_s = {
        use std::io::Write;
        let mut cur = std::io::Cursor::new(&mut ip_buf[..]);
        let _ = write!(cur, "{ip}");
        let n = cur.position() as usize;
        &ip_buf[..n]
    };
    out.extend_from_slice(b"x-forwarded-for: ");
    if let Some(prev) = xff.filter(|p| !p.is_empty()) {
        out.extend_from_slice(prev);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(ip_s);
    out.extend_from_slice(b"\r\n");
    field(out, b"x-forwarded-proto", fwd.proto.as_bytes());
    out.extend_from_slice(b"forwarded: ");
    if let Some(prev) = forwarded.filter(|p| !p.is_empty()) {
        out.extend_from_slice(prev);
        out.extend_from_slice(b", ");
    }
    if ip.is_ipv6() {
        out.extend_from_slice(b"for=\"[");
        out.extend_from_slice(ip_s);
        out.extend_from_slice(b"]\"");
    } else {
        out.extend_from_slice(b"for=");
        out.extend_from_slice(ip_s);
    }
    out.extend_from_slice(b";proto=");
    out.extend_from_slice(fwd.proto.as_bytes());
    if let Some(h) = req.host() {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(h);
        out.push(b'"');
    }
    out.extend_from_slice(b"\r\n");
    if let Some((name, Some(subject))) = fwd.client_cert {
        field(out, name.as_bytes(), subject.as_bytes());
    }
    if req.head.upgrade {
        field(out, b"connection", b"upgrade");
        if let Some(u) = head.get("upgrade") {
            field(out, b"upgrade", u);
        }
    }
    if chunked {
        field(out, b"transfer-encoding", b"chunked");
    }
    put_edits(out, edits);
    out.extend_from_slice(b"\r\n");
}

/// How the response leaves toward the client.
pub struct ClientFraming {
    pub chunked: bool,
    pub close: bool,
    /// An HTTP/1.0 client asked for keep-alive and gets it.
    pub keep_alive_10: bool,
    pub upgrade: bool,
}

/// The response head sent to the client.
pub fn response_head(
    out: &mut Vec<u8>,
    resp: &Response,
    edits: &[&HeaderEdits],
    cf: &ClientFraming,
    set_cookie: Option<&str>,
) {
    let head = &resp.head;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa3(resp.status).as_slice());
    out.push(b' ');
    out.extend_from_slice(head.slice(&resp.reason));
    out.extend_from_slice(b"\r\n");
    for h in &head.headers {
        let name = head.name(h);
        if dropped(head, name, edits) {
            continue;
        }
        field(out, name, head.value(h));
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
    if let Some(c) = set_cookie {
        field(out, b"set-cookie", c.as_bytes());
    }
    put_edits(out, edits);
    out.extend_from_slice(b"\r\n");
}

/// An interim (1xx) response relayed as it came, minus hop-by-hop fields.
pub fn interim_head(out: &mut Vec<u8>, resp: &Response) {
    response_head(
        out,
        resp,
        &[],
        &ClientFraming {
            chunked: false,
            close: false,
            keep_alive_10: false,
            upgrade: false,
        },
        None,
    );
}

fn itoa3(n: u16) -> [u8; 3] {
    [
        b'0' + (n / 100 % 10) as u8,
        b'0' + (n / 10 % 10) as u8,
        b'0' + (n % 10) as u8,
    ]
}
