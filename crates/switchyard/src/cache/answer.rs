//! A stored response answering a request: Age and Cache-Status added,
//! the client's own conditions evaluated (304), HEAD without the body,
//! one byte range cut out (206, or 416).

use bytes::Bytes;

use super::{httpdate, Object};
use crate::http::message::{Framing, Method, Request, Response};
use crate::http::responses::itoa;

/// Fields a 304 carries from the stored response (RFC 9110 15.4.5).
const NOT_MODIFIED_FIELDS: [&str; 7] = [
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
    "vary",
    "last-modified",
];

/// The answer to `req` from `o`; `status` is the Cache-Status entry
/// ("hit", "fwd=stale; fwd-status=304"...).
pub fn answer(o: &Object, req: &Request, now_ms: i64, cache_status: &str) -> (Response, Bytes) {
    let mut age_buf = [0u8; 20];
    let age = itoa((o.age_ms(now_ms) / 1000).max(0) as u64, &mut age_buf);
    if not_modified(o, req) {
        let mut r = Response::new(304, Framing::None);
        r.reason = Bytes::from_static(b"Not Modified");
        for name in NOT_MODIFIED_FIELDS {
            for v in o.head.head.all(name) {
                r.head.fields.append(name.as_bytes(), v);
            }
        }
        r.head.fields.append(b"age", age);
        r.head
            .fields
            .append(b"cache-status", cache_status.as_bytes());
        return (r, Bytes::new());
    }
    let mut r = o.head.clone_to_edit();
    r.head.fields.remove(b"age");
    r.head.fields.append(b"age", age);
    r.head
        .fields
        .append(b"cache-status", cache_status.as_bytes());
    let total = o.body.len() as u64;
    let mut body = o.body.clone();
    if req.method == Method::Get && o.head.status == 200 {
        match range(req, o, total) {
            Some(Range::Part(a, b)) => {
                r.status = 206;
                r.reason = Bytes::from_static(b"Partial Content");
                let cr = format!("bytes {a}-{b}/{total}");
                r.head.fields.append(b"content-range", cr.as_bytes());
                body = o.body.slice(a as usize..=b as usize);
            }
            Some(Range::Unsatisfiable) => {
                let mut r = Response::new(416, Framing::Length(0));
                r.reason = Bytes::from_static(b"Range Not Satisfiable");
                r.head
                    .fields
                    .append(b"content-range", format!("bytes */{total}").as_bytes());
                r.head.fields.append(b"content-length", b"0");
                r.head
                    .fields
                    .append(b"cache-status", cache_status.as_bytes());
                return (r, Bytes::new());
            }
            None => {}
        }
    }
    let mut len_buf = [0u8; 20];
    r.head
        .fields
        .append(b"content-length", itoa(body.len() as u64, &mut len_buf));
    r.head.framing = if body.is_empty() {
        Framing::None
    } else {
        Framing::Length(body.len() as u64)
    };
    if req.method == Method::Head {
        body = Bytes::new();
    }
    (r, body)
}

/// Whether the client's validators match (RFC 9110 13.1.2, 13.1.3):
/// If-None-Match decides when present; If-Modified-Since otherwise.
fn not_modified(o: &Object, req: &Request) -> bool {
    if !matches!(req.method, Method::Get | Method::Head) || !(200..300).contains(&o.head.status) {
        return false;
    }
    let f = &req.head.fields;
    if f.contains("if-none-match") {
        let Some(etag) = &o.etag else {
            return f.all("if-none-match").any(|v| v.trim_ascii() == b"*");
        };
        return f.all("if-none-match").any(|v| {
            v.split(|b| *b == b',').any(|t| {
                let t = t.trim_ascii();
                t == b"*" || weak_eq(t, etag)
            })
        });
    }
    match (
        f.get("if-modified-since").and_then(httpdate::parse),
        o.last_modified,
    ) {
        (Some(since), Some(lm)) => lm <= since,
        (Some(since), None) => {
            // No Last-Modified: the stored Date stands in (RFC 9110
            // 13.1.3), or when the response came.
            let date = o.head.head.get("date").and_then(httpdate::parse);
            date.unwrap_or(o.response_ms / 1000) <= since
        }
        _ => false,
    }
}

fn opaque(t: &[u8]) -> &[u8] {
    t.strip_prefix(b"W/").unwrap_or(t)
}

fn weak_eq(a: &[u8], b: &[u8]) -> bool {
    opaque(a) == opaque(b)
}

enum Range {
    Part(u64, u64),
    Unsatisfiable,
}

/// One byte range of a `total`-byte body; None serves the whole body (no
/// Range, several ranges, a failed If-Range, anything unparsable).
fn range(req: &Request, o: &Object, total: u64) -> Option<Range> {
    let spec = req.head.get("range")?.trim_ascii();
    if let Some(cond) = req.head.get("if-range") {
        let cond = cond.trim_ascii();
        let ok = if cond.starts_with(b"\"") {
            // Strong comparison only.
            o.etag.as_deref().is_some_and(|e| e == cond)
        } else {
            httpdate::parse(cond).is_some_and(|d| o.last_modified == Some(d))
        };
        if !ok {
            return None;
        }
    }
    let set = spec.strip_prefix(b"bytes=")?;
    if set.contains(&b',') {
        return None;
    }
    let dash = set.iter().position(|b| *b == b'-')?;
    let num = |v: &[u8]| -> Option<u64> {
        let v = v.trim_ascii();
        (!v.is_empty() && v.iter().all(u8::is_ascii_digit))
            .then(|| std::str::from_utf8(v).ok()?.parse().ok())
            .flatten()
    };
    let (first, last) = (&set[..dash], &set[dash + 1..]);
    let (a, b) = if first.trim_ascii().is_empty() {
        let n = num(last)?;
        if n == 0 {
            return Some(Range::Unsatisfiable);
        }
        (total.saturating_sub(n), total.checked_sub(1)?)
    } else {
        let a = num(first)?;
        let b = if last.trim_ascii().is_empty() {
            total.saturating_sub(1)
        } else {
            num(last)?.min(total.saturating_sub(1))
        };
        if a >= total {
            return Some(Range::Unsatisfiable);
        }
        if b < a {
            return None;
        }
        (a, b)
    };
    Some(Range::Part(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Settings;

    fn req(extra: &str) -> Request {
        let raw = format!("GET / HTTP/1.1\r\nHost: a\r\n{extra}\r\n");
        crate::http::head::parse_request(Bytes::from(raw), 100).expect("request")
    }

    fn object() -> Object {
        let mut r = Response::new(200, Framing::Length(10));
        r.head.fields.append(b"etag", b"\"v1\"");
        r.head
            .fields
            .append(b"last-modified", b"Sun, 06 Nov 1994 08:49:37 GMT");
        r.head.fields.append(b"cache-control", b"max-age=60");
        r.head.fields.append(b"content-type", b"text/plain");
        Object::new(
            &req(""),
            &r,
            Bytes::from_static(b"0123456789"),
            super::super::now(),
            &Settings::default(),
        )
    }

    fn status(extra: &str) -> (u16, Vec<u8>) {
        let o = object();
        let (r, b) = answer(&o, &req(extra), super::super::now(), "switchyard; hit");
        (r.status, b.to_vec())
    }

    #[test]
    fn conditions_and_ranges() {
        assert_eq!(status(""), (200, b"0123456789".to_vec()));
        assert_eq!(status("If-None-Match: \"v1\"\r\n").0, 304);
        assert_eq!(status("If-None-Match: W/\"v1\"\r\n").0, 304);
        assert_eq!(status("If-None-Match: \"v0\", \"v1\"\r\n").0, 304);
        assert_eq!(status("If-None-Match: *\r\n").0, 304);
        assert_eq!(status("If-None-Match: \"v2\"\r\n").0, 200);
        // If-None-Match decides alone when present.
        assert_eq!(
            status("If-None-Match: \"v2\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n")
                .0,
            200
        );
        assert_eq!(
            status("If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n").0,
            304
        );
        assert_eq!(
            status("If-Modified-Since: Sat, 05 Nov 1994 08:49:37 GMT\r\n").0,
            200
        );
        assert_eq!(status("Range: bytes=2-4\r\n"), (206, b"234".to_vec()));
        assert_eq!(status("Range: bytes=7-\r\n"), (206, b"789".to_vec()));
        assert_eq!(status("Range: bytes=-2\r\n"), (206, b"89".to_vec()));
        assert_eq!(status("Range: bytes=5-100\r\n"), (206, b"56789".to_vec()));
        assert_eq!(status("Range: bytes=10-\r\n").0, 416);
        assert_eq!(status("Range: bytes=0-1,3-4\r\n").0, 200);
        assert_eq!(status("Range: items=0-1\r\n").0, 200);
        assert_eq!(status("Range: bytes=2-4\r\nIf-Range: \"v1\"\r\n").0, 206);
        assert_eq!(status("Range: bytes=2-4\r\nIf-Range: \"v0\"\r\n").0, 200);
        let o = object();
        let (r, _) = answer(&o, &req("Range: bytes=2-4\r\n"), super::super::now(), "x");
        assert_eq!(r.head.get("content-range"), Some(&b"bytes 2-4/10"[..]));
        assert_eq!(r.head.get("content-length"), Some(&b"3"[..]));
        assert_eq!(r.head.get("age"), Some(&b"0"[..]));
    }
}
