//! What the HTTP/2 and HTTP/3 head targets share: the input's field lines,
//! and the checks every accepted request must pass.

use switchyard::http::head::Framing;
use switchyard::http::message::{Fields, Request};

pub const NAMES: [&str; 16] = [
    "content-length",
    "host",
    "cookie",
    "te",
    "expect",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "proxy-connection",
    "trailer",
    "content-type",
    "x-forwarded-for",
    "via",
    "proxy-authenticate",
    "content-length",
];

pub const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "te",
];

/// "name:value" lines as (name, value) pairs; a one-byte name picks a
/// well-known one.
pub fn lines(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    data.split(|b| *b == b'\n')
        .map(|line| {
            let (n, v) = match line.iter().position(|b| *b == b':') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            };
            let name = match n {
                [i] => NAMES[*i as usize % NAMES.len()].as_bytes().to_vec(),
                _ => n.to_vec(),
            };
            (name, v.to_vec())
        })
        .collect()
}

/// The same lines as the h2 crate would hand them over from a member
/// (what `http` refuses is skipped: h2 would never pass it).
pub fn header_map(lines: &[(Vec<u8>, Vec<u8>)]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (n, v) in lines {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n),
            http::HeaderValue::from_bytes(v),
        ) {
            h.append(n, v);
        }
    }
    h
}

/// At most one Content-Length, and a declared length agrees with it.
pub fn check_length(f: &Fields, framing: Framing) {
    let cl: Vec<&[u8]> = f.all("content-length").collect();
    assert!(cl.len() <= 1, "several Content-Length fields accepted");
    if let Framing::Length(n) = framing {
        assert_eq!(cl.len(), 1, "a length without a Content-Length field");
        let s = std::str::from_utf8(cl[0]).expect("Content-Length is not text");
        assert_eq!(
            s.parse::<u64>().ok(),
            Some(n),
            "Content-Length disagrees with the framing"
        );
    }
}

/// What every accepted request must be: unambiguous (one length, agreeing
/// with the framing), free of connection-specific fields, and safe to
/// restate as HTTP/1.1 text (no CR, LF or NUL, no uppercase or empty
/// names, no control byte or space in the target).
pub fn check_request(req: &Request) {
    check_request_head(req, false)
}

/// As `check_request`, for the GET an extended CONNECT becomes: its one
/// `Upgrade: websocket` is the tunnel's own, added by the conversion, and
/// no other connection-specific field may come through with it.
pub fn check_tunnel_request(req: &Request) {
    let upgrades: Vec<&[u8]> = req.head.fields.all("upgrade").collect();
    assert_eq!(upgrades, [&b"websocket"[..]], "a tunnel's Upgrade field");
    assert!(req.head.upgrade && req.method_raw == "GET");
    check_request_head(req, true)
}

fn check_request_head(req: &Request, tunnel: bool) {
    check_length(&req.head.fields, req.head.framing);
    for (name, value) in req.head.fields.iter() {
        if tunnel && name.eq_ignore_ascii_case(b"upgrade") {
            continue;
        }
        assert!(
            !CONNECTION_SPECIFIC
                .iter()
                .any(|c| c.as_bytes().eq_ignore_ascii_case(name)),
            "connection-specific field {:?} accepted",
            String::from_utf8_lossy(name)
        );
        // It becomes HTTP/1.1 text: a field must not split it.
        assert!(
            !name.is_empty() && !name.iter().any(|b| b.is_ascii_uppercase()),
            "field name {:?} accepted",
            String::from_utf8_lossy(name)
        );
        assert!(
            !value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)),
            "CR, LF or NUL in a field value accepted"
        );
    }
    assert!(
        !req.target.iter().any(|b| *b <= 0x20 || *b == 0x7f),
        "request target {:?} accepted",
        String::from_utf8_lossy(&req.target)
    );
}
