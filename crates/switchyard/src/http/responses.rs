//! Responses Switchyard answers itself: errors with short clear bodies,
//! redirects and fixed responses.

use super::message::{Framing, Response};

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        417 => "Expectation Failed",
        425 => "Too Early",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// A response the proxy answers itself, as a neutral head and its body:
/// serialised for whichever protocol the client speaks.
pub fn local(
    status: u16,
    content_type: &str,
    body: bytes::Bytes,
    extra: &[(&str, &str)],
) -> (Response, bytes::Bytes) {
    let mut r = Response::new(status, Framing::None);
    r.reason = bytes::Bytes::from_static(reason(status).as_bytes());
    let f = &mut r.head.fields;
    f.append(b"content-type", content_type.as_bytes());
    let mut len = [0u8; 20];
    f.append(b"content-length", itoa(body.len() as u64, &mut len));
    for (n, v) in extra {
        f.append(n.as_bytes(), v.as_bytes());
    }
    (r, body)
}

/// A local error answer: the status, and one line saying why.
pub fn local_error(status: u16, why: &str) -> (Response, bytes::Bytes) {
    let body = format!("{status} {}: {why}\n", reason(status));
    local(status, "text/plain; charset=utf-8", body.into(), &[])
}

/// `n` in decimal, written into `buf` (no allocation).
pub fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// A complete response with a body; `close` adds `Connection: close`.
pub fn simple(
    status: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + body.len());
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    out.extend_from_slice(
        format!(
            "content-type: {content_type}\r\ncontent-length: {}\r\n",
            body.len()
        )
        .as_bytes(),
    );
    for (n, v) in extra {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// An error answered by the proxy: the status, and one line saying why.
pub fn error(status: u16, why: &str, close: bool) -> Vec<u8> {
    let body = format!("{status} {}: {why}\n", reason(status));
    simple(
        status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        close,
        &[],
    )
}
