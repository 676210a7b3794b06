//! HTTP response compression: which coding a client gets
//! (`negotiate.rs`), whether a response may be compressed (`eligible`),
//! and the streaming encoders (`encoder.rs`). The pipeline stage that
//! drives them is `proxy/stages.rs` `Compress`.
//!
//! Depends on `http` only: the proxy uses it, never the other way round.

pub mod encoder;
pub mod isal;
pub mod negotiate;

use crate::http::message::{Framing, Response};

/// A content coding the proxy can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Br,
    Zstd,
}

impl Coding {
    pub const ALL: [Coding; 3] = [Coding::Gzip, Coding::Br, Coding::Zstd];

    /// The Content-Encoding token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }

    pub fn parse(s: &str) -> Option<Coding> {
        Coding::ALL
            .into_iter()
            .find(|c| c.token().eq_ignore_ascii_case(s))
    }

    /// Index into per-coding counters.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// `[vserver.compression]`, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The codings offered, best first: breaks ties between codings a
    /// client accepts equally.
    pub algorithms: Vec<Coding>,
    pub gzip_level: u32,
    pub brotli_level: u32,
    pub zstd_level: i32,
    /// Media types compressed: "type/subtype" exact, or "type/*".
    pub types: Vec<String>,
    /// Responses declaring a smaller Content-Length are left alone.
    pub min_size: u64,
}

/// What an operator gets without writing the table's keys.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/javascript",
    "application/x-javascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/ld+json",
    "application/manifest+json",
    "application/wasm",
    "image/svg+xml",
    "image/x-icon",
    "font/ttf",
    "font/otf",
];

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            algorithms: vec![Coding::Zstd, Coding::Br, Coding::Gzip],
            gzip_level: 1,
            brotli_level: 1,
            zstd_level: 1,
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
            min_size: 256,
        }
    }
}

impl Settings {
    /// Whether a Content-Type value names a media type to compress.
    pub fn type_matches(&self, content_type: &[u8]) -> bool {
        let media = content_type
            .split(|b| *b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let Some(slash) = media.iter().position(|b| *b == b'/') else {
            return false;
        };
        self.types.iter().any(|t| match t.strip_suffix("/*") {
            Some(major) => media[..slash].eq_ignore_ascii_case(major.as_bytes()),
            None => media.eq_ignore_ascii_case(t.as_bytes()),
        })
    }
}

/// Whether this response to this request may be compressed at all (the
/// client's Accept-Encoding is decided separately).
pub fn eligible(head_request: bool, resp: &Response, s: &Settings) -> bool {
    let st = resp.status;
    if head_request || st < 200 || matches!(st, 204 | 206 | 304) {
        return false;
    }
    let h = &resp.head;
    match h.framing {
        Framing::None => return false,
        Framing::Length(n) if n < s.min_size => return false,
        _ => {}
    }
    if h.all("content-encoding")
        .any(|v| !v.trim_ascii().eq_ignore_ascii_case(b"identity"))
        || h.fields.contains("content-range")
    {
        return false;
    }
    if h.all("cache-control").any(has_no_transform) {
        return false;
    }
    match h.get("content-type") {
        Some(ct) => s.type_matches(ct),
        None => false,
    }
}

fn has_no_transform(cc: &[u8]) -> bool {
    cc.split(|b| *b == b',')
        .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
}

/// Vary: Accept-Encoding, unless the response varies on it (or on
/// everything) already.
pub fn add_vary(resp: &mut Response) {
    let f = &mut resp.head.fields;
    let varies = f.all("vary").any(|v| {
        v.split(|b| *b == b',').any(|t| {
            let t = t.trim_ascii();
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !varies {
        f.append(b"vary", b"Accept-Encoding");
    }
}

/// The head edits of a response that will be compressed with `c`: the
/// coding declared, the length dropped (the body is re-framed), Vary
/// extended, a strong validator weakened (the bytes differ from the
/// member's).
pub fn rewrite_head(resp: &mut Response, c: Coding) {
    let f = &mut resp.head.fields;
    f.remove(b"content-encoding");
    f.remove(b"content-length");
    f.append(b"content-encoding", c.token().as_bytes());
    add_vary(resp);
    let f = &mut resp.head.fields;
    if let Some(etag) = f.get("etag") {
        if etag.starts_with(b"\"") {
            let weak = [b"W/", etag].concat();
            f.set(b"etag", &weak);
        }
    }
    resp.head.framing = Framing::Chunked;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::message::Fields;

    fn resp(status: u16, framing: Framing, fields: &[(&str, &str)]) -> Response {
        let mut r = Response::new(status, framing);
        for (n, v) in fields {
            r.head.fields.append(n.as_bytes(), v.as_bytes());
        }
        r
    }

    #[test]
    fn types_match_exactly_or_by_major_type() {
        let s = Settings::default();
        assert!(s.type_matches(b"text/html; charset=utf-8"));
        assert!(s.type_matches(b"Application/JSON"));
        assert!(s.type_matches(b"image/svg+xml"));
        assert!(!s.type_matches(b"image/png"));
        assert!(!s.type_matches(b"application/jsonx"));
        assert!(!s.type_matches(b"text"));
    }

    #[test]
    fn never_compressed() {
        let s = Settings::default();
        let html = ("content-type", "text/html");
        let ok = resp(200, Framing::Length(5000), &[html]);
        assert!(eligible(false, &ok, &s));
        assert!(eligible(false, &resp(200, Framing::Chunked, &[html]), &s));
        assert!(!eligible(true, &ok, &s), "HEAD");
        for st in [204, 206, 304, 101, 100] {
            assert!(!eligible(
                false,
                &resp(st, Framing::Length(5000), &[html]),
                &s
            ));
        }
        assert!(!eligible(
            false,
            &resp(200, Framing::Length(100), &[html]),
            &s
        ));
        assert!(!eligible(false, &resp(200, Framing::None, &[html]), &s));
        let enc = resp(
            200,
            Framing::Length(5000),
            &[html, ("content-encoding", "gzip")],
        );
        assert!(!eligible(false, &enc, &s));
        let id = resp(
            200,
            Framing::Length(5000),
            &[html, ("content-encoding", "identity")],
        );
        assert!(eligible(false, &id, &s));
        let nt = resp(
            200,
            Framing::Length(5000),
            &[html, ("cache-control", "public, No-Transform")],
        );
        assert!(!eligible(false, &nt, &s));
        assert!(!eligible(false, &resp(200, Framing::Length(5000), &[]), &s));
        let png = resp(200, Framing::Length(5000), &[("content-type", "image/png")]);
        assert!(!eligible(false, &png, &s));
    }

    #[test]
    fn head_rewritten() {
        let mut r = resp(
            200,
            Framing::Length(5000),
            &[
                ("content-type", "text/html"),
                ("content-length", "5000"),
                ("etag", "\"abc\""),
                ("vary", "Cookie"),
            ],
        );
        rewrite_head(&mut r, Coding::Br);
        let f: &Fields = &r.head.fields;
        assert_eq!(f.get("content-length"), None);
        assert_eq!(f.get("content-encoding"), Some(&b"br"[..]));
        assert_eq!(f.get("etag"), Some(&b"W/\"abc\""[..]));
        let vary: Vec<&[u8]> = f.all("vary").collect();
        assert_eq!(vary, vec![&b"Cookie"[..], &b"Accept-Encoding"[..]]);
        assert_eq!(r.head.framing, Framing::Chunked);
        // Already weak, already varying: left as they are.
        let mut r = resp(
            200,
            Framing::Chunked,
            &[("etag", "W/\"x\""), ("vary", "accept-encoding")],
        );
        rewrite_head(&mut r, Coding::Gzip);
        assert_eq!(r.head.fields.get("etag"), Some(&b"W/\"x\""[..]));
        assert_eq!(r.head.fields.all("vary").count(), 1);
    }
}
