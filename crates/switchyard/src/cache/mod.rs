//! A shared HTTP cache as RFC 9111 defines it: what may be stored
//! (`storable`), how fresh a stored response is (`Object::freshness`),
//! which stored variant a request may get (`Object::matches`), and how a
//! stored response answers a request (conditional, HEAD, Range:
//! `answer.rs`). Objects live in memory in one `Store` shared by every
//! worker (`store.rs`). The pipeline stage that drives it is
//! `proxy/caching.rs`.
//!
//! Depends on `http` only: the proxy uses it, never the other way round.

pub mod answer;
pub mod control;
pub mod httpdate;
pub mod store;

use bytes::Bytes;

use crate::compress::{negotiate, Coding};
use crate::http::message::{Fields, Framing, Method, Request, Response};
use control::Directives;

pub use store::Store;

/// `[vserver.cache]`, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Request fields and cookies added to the key: ("header", name) or
    /// ("cookie", name).
    pub key_extras: Vec<(KeyPart, String)>,
    /// Share of (Date - Last-Modified) a response without explicit
    /// freshness stays fresh (RFC 9111 4.2.2), in percent.
    pub heuristic_percent: u64,
    /// Store responses that set cookies (RFC 9111 allows it; off by
    /// default, as in Varnish and nginx: one client's cookie would be
    /// replayed to every other).
    pub store_set_cookie: bool,
    /// Who answers in Cache-Status.
    pub name: String,
    /// "<name>; hit", the most frequent Cache-Status.
    pub hit_status: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPart {
    Header,
    Cookie,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            key_extras: Vec::new(),
            heuristic_percent: 10,
            store_set_cookie: false,
            name: "switchyard".into(),
            hit_status: "switchyard; hit".into(),
        }
    }
}

/// The primary cache key: scheme, authority, target, and the configured
/// extras. The method is not in it: GET fills, HEAD reads.
pub fn key(req: &Request, tls: bool, s: &Settings) -> Vec<u8> {
    let mut k = Vec::with_capacity(64);
    k.extend_from_slice(if tls { b"https://" } else { b"http://" });
    if let Some(h) = req.host() {
        k.extend(h.iter().map(u8::to_ascii_lowercase));
    }
    k.extend_from_slice(req.target());
    for (part, name) in &s.key_extras {
        k.push(0);
        match part {
            KeyPart::Header => {
                for v in req.head.all(name) {
                    k.extend_from_slice(v);
                    k.push(b',');
                }
            }
            KeyPart::Cookie => {
                if let Some(v) = cookie(req, name) {
                    k.extend_from_slice(v);
                }
            }
        }
    }
    k
}

/// Removes `url` (every variant and key extra), or every URL under it when
/// `prefix`; answers how many objects went.
pub fn purge(store: &Store, url: &str, prefix: bool) -> usize {
    let key = url_key(url);
    if prefix {
        store.purge_prefix(&key)
    } else {
        let mut extras = key.clone();
        extras.push(0);
        usize::from(store.invalidate(&key)) + store.purge_prefix(&extras)
    }
}

/// The prefix every key of `url` starts with ("http://host/path...").
pub fn url_key(url: &str) -> Vec<u8> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    format!(
        "{}://{}{}",
        scheme.to_ascii_lowercase(),
        host.to_ascii_lowercase(),
        path
    )
    .into_bytes()
}

fn cookie<'a>(req: &'a Request, name: &str) -> Option<&'a [u8]> {
    req.head.all("cookie").find_map(|c| {
        c.split(|b| *b == b';').find_map(|kv| {
            let kv = kv.trim_ascii();
            let i = kv.iter().position(|b| *b == b'=')?;
            (kv[..i].trim_ascii() == name.as_bytes()).then(|| kv[i + 1..].trim_ascii())
        })
    })
}

/// Statuses a cache may give a heuristic lifetime (RFC 9110 15.1).
fn heuristic_status(st: u16) -> bool {
    matches!(
        st,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Statuses this cache may store: final ones it can replay (not 206
/// partial content, not 304).
fn replayable(st: u16) -> bool {
    (200..600).contains(&st) && st != 206 && st != 304
}

/// Status codes this cache knows the meaning of (RFC 9110), for
/// `must-understand`.
fn understood(st: u16) -> bool {
    matches!(st, 200..=205 | 300..=303 | 305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 428 | 429 | 431 | 451 | 500..=505 | 511)
}

/// Why a response is not stored, or None when it may be.
pub fn storable(
    req: &Request,
    q: &Directives,
    resp: &Response,
    rc: &Directives,
    s: &Settings,
) -> Option<&'static str> {
    if req.method != Method::Get {
        return Some("method");
    }
    if !replayable(resp.status) {
        return Some("status");
    }
    if rc.must_understand {
        // Stored only if the status is understood; then the response's
        // no-store is for caches that do not (RFC 9111 5.2.2.3).
        if !understood(resp.status) {
            return Some("must-understand");
        }
    } else if rc.no_store {
        return Some("no-store");
    }
    if q.no_store {
        return Some("no-store");
    }
    if rc.private {
        return Some("private");
    }
    if req.head.fields.contains("authorization")
        && !(rc.must_revalidate || rc.public || rc.s_maxage.is_some())
    {
        return Some("authorization");
    }
    let f = &resp.head.fields;
    if vary_names(f).any(|n| n == b"*") {
        return Some("vary *");
    }
    if !s.store_set_cookie && f.contains("set-cookie") {
        return Some("set-cookie");
    }
    let explicit =
        rc.s_maxage.is_some() || rc.max_age.is_some() || (!rc.targeted && f.contains("expires"));
    let heuristic = heuristic_status(resp.status) || rc.public;
    let validators = f.contains("etag") || f.contains("last-modified");
    if !(explicit || (heuristic && (validators || rc.public))) {
        return Some("no freshness");
    }
    None
}

impl Directives {
    /// A response's directives: CDN-Cache-Control when present (RFC 9213:
    /// a cache that honours a targeted field ignores Cache-Control and
    /// Expires then), else Cache-Control.
    pub fn of_response(f: &Fields) -> Directives {
        if f.contains("cdn-cache-control")
            && f.all("cdn-cache-control").all(control::valid_sf_dictionary)
        {
            let mut d = control::parse(f.all("cdn-cache-control"));
            d.targeted = true;
            return d;
        }
        Directives::of(f)
    }

    /// A request's directives (and a response's without targeted fields).
    pub fn of(f: &Fields) -> Directives {
        let mut d = control::parse(f.all("cache-control"));
        // Pragma: no-cache counts only without Cache-Control (RFC 9111 5.4).
        if !f.contains("cache-control")
            && f.all("pragma")
                .any(|v| v.trim_ascii().eq_ignore_ascii_case(b"no-cache"))
        {
            d.no_cache = true;
        }
        d
    }
}

fn vary_names(f: &Fields) -> impl Iterator<Item = Vec<u8>> + '_ {
    f.all("vary").flat_map(|v| {
        v.split(|b| *b == b',')
            .map(|t| t.trim_ascii().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
    })
}

/// Request field values a variant was chosen by, normalised (whitespace
/// after commas dropped), None when the request had none.
fn vary_value(req: &Fields, name: &[u8]) -> Option<Vec<u8>> {
    let name = std::str::from_utf8(name).ok()?;
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut present = false;
    for v in req.all(name) {
        present = true;
        parts.extend(v.split(|b| *b == b',').map(|p| p.trim_ascii().to_vec()));
    }
    if !present {
        return None;
    }
    // Language lists mean the same in any order and case.
    if name.eq_ignore_ascii_case("accept-language") {
        for p in &mut parts {
            p.make_ascii_lowercase();
            p.retain(|b| *b != b' ');
        }
        parts.sort();
    }
    Some(parts.join(&b","[..]))
}

/// A stored response.
#[derive(Debug)]
pub struct Object {
    /// Status, reason and fields, without hop-by-hop fields and without
    /// Content-Length (restated from the body when served).
    pub head: Response,
    pub body: Bytes,
    pub cc: Directives,
    /// When the request went out and the response came (ms since epoch).
    pub request_ms: i64,
    pub response_ms: i64,
    /// Age the response had on arrival, corrected (RFC 9111 4.2.3), ms.
    pub initial_age_ms: i64,
    /// Freshness lifetime (RFC 9111 4.2.1), ms.
    pub lifetime_ms: i64,
    /// (field name, the request's value) for every field Vary names.
    pub vary: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub etag: Option<Bytes>,
    pub last_modified: Option<i64>,
    /// Its Content-Encoding, which Vary: Accept-Encoding is matched on.
    pub encoding: Option<Vec<u8>>,
    /// Memory it holds, for the store's limit.
    pub size: usize,
}

/// Wall-clock milliseconds: ages and lifetimes are counted in seconds, and
/// a hit reads the clock on every request, so the coarse clock serves.
fn now_ms() -> i64 {
    crate::clock::unix_ms_coarse()
}

impl Object {
    /// Builds the stored form of `resp` (its head as it went to the
    /// client) for `req`.
    pub fn new(
        req: &Request,
        resp: &Response,
        body: Bytes,
        request_ms: i64,
        s: &Settings,
    ) -> Object {
        let response_ms = now_ms();
        let f = &resp.head.fields;
        let cc = Directives::of_response(f);
        let date = f.get("date").and_then(httpdate::parse).map(|d| d * 1000);
        // The first member of the first Age line counts; one that is not
        // a number is ignored (what the cache-tests suite and browsers do).
        let age_value = f
            .all("age")
            .next()
            .and_then(|v| v.split(|b| *b == b',').next())
            .map(<[u8]>::trim_ascii)
            .filter(|v| !v.is_empty() && v.iter().all(u8::is_ascii_digit))
            .map_or(0, |v| {
                v.iter().fold(0i64, |n, d| {
                    n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
                })
            });
        let apparent = date.map_or(0, |d| (response_ms - d).max(0));
        let corrected_age = age_value.saturating_mul(1000) + (response_ms - request_ms).max(0);
        let initial_age_ms = apparent.max(corrected_age);
        let date_or_now = date.unwrap_or(response_ms);
        let last_modified = f.get("last-modified").and_then(httpdate::parse);
        let lifetime_ms = if let Some(s) = cc.s_maxage {
            s as i64 * 1000
        } else if let Some(m) = cc.max_age {
            m as i64 * 1000
        } else if let (Some(e), false) = (f.get("expires"), cc.targeted) {
            // An invalid Expires, or several, means already expired (RFC
            // 9111 5.3).
            let one = f.all("expires").count() == 1;
            httpdate::parse(e)
                .filter(|_| one)
                .map_or(0, |e| (e * 1000 - date_or_now).max(0))
        } else if let (Some(lm), true) = (last_modified, heuristic_status(resp.status) || cc.public)
        {
            ((date_or_now - lm * 1000).max(0)) * s.heuristic_percent as i64 / 100
        } else {
            0
        };
        let vary = vary_names(f)
            .map(|n| {
                let v = vary_value(&req.head.fields, &n);
                (n, v)
            })
            .collect();
        let mut head = Response::new(resp.status, Framing::Length(body.len() as u64));
        head.reason = resp.reason.clone();
        for (n, v) in f.iter() {
            if resp.head.is_connection_field(n) || n.eq_ignore_ascii_case(b"content-length") {
                continue;
            }
            head.head.fields.append(n, v);
        }
        let size = body.len()
            + head
                .head
                .fields
                .iter()
                .map(|(n, v)| n.len() + v.len() + 16)
                .sum::<usize>()
            + 256;
        Object {
            etag: f.get("etag").map(Bytes::copy_from_slice),
            encoding: f
                .get("content-encoding")
                .map(|v| v.trim_ascii().to_ascii_lowercase()),
            head,
            body,
            cc,
            request_ms,
            response_ms,
            initial_age_ms,
            lifetime_ms,
            vary,
            last_modified,
            size,
        }
    }

    /// This object freshened by a member's 304 (RFC 9111 4.3.4): the
    /// 304's fields replace the stored ones of the same name; the body
    /// stays. A 304's Set-Cookie is one client's: it is not taken unless
    /// `store_set_cookie` (a response carrying one is not stored either).
    pub fn freshened(
        &self,
        not_modified: &Response,
        req: &Request,
        request_ms: i64,
        s: &Settings,
    ) -> Object {
        let mut merged = Response::new(self.head.status, Framing::Length(self.body.len() as u64));
        merged.reason = self.head.reason.clone();
        let fresh = &not_modified.head;
        // The ETag stays: the 304 matched it, and a stored compressed copy
        // keeps the weak form its coding gave it (the member's strong tag
        // names the uncompressed bytes).
        let replaced = |n: &[u8]| {
            !n.eq_ignore_ascii_case(b"content-length")
                && !n.eq_ignore_ascii_case(b"etag")
                && (s.store_set_cookie || !n.eq_ignore_ascii_case(b"set-cookie"))
                && !fresh.is_connection_field(n)
                && fresh.fields.iter().any(|(m, _)| m.eq_ignore_ascii_case(n))
        };
        for (n, v) in self.head.head.fields.iter() {
            if !replaced(n) {
                merged.head.fields.append(n, v);
            }
        }
        for (n, v) in fresh.fields.iter() {
            if replaced(n) {
                merged.head.fields.append(n, v);
            }
        }
        let mut o = Object::new(req, &merged, self.body.clone(), request_ms, s);
        // The variant stays the one it was chosen as.
        o.vary = self.vary.clone();
        o
    }

    /// Current age (RFC 9111 4.2.3), ms.
    pub fn age_ms(&self, now: i64) -> i64 {
        self.initial_age_ms + (now - self.response_ms).max(0)
    }

    /// How fresh the object is for `req`: positive while fresh, ms.
    /// The request's max-age and min-fresh narrow it.
    pub fn freshness(&self, q: &Directives, now: i64) -> i64 {
        let age = self.age_ms(now);
        let mut lifetime = self.lifetime_ms;
        if let Some(m) = q.max_age {
            lifetime = lifetime.min(m as i64 * 1000);
        }
        let mut left = lifetime - age;
        if let Some(m) = q.min_fresh {
            left -= m as i64 * 1000;
        }
        left
    }

    /// Whether this stored response may be served to `req` without
    /// contacting the member.
    pub fn fresh_for(&self, q: &Directives, now: i64) -> bool {
        if self.cc.no_cache || q.no_cache {
            return false;
        }
        let left = self.freshness(q, now);
        if left > 0 {
            return true;
        }
        // The client accepts staleness, unless the member forbade it.
        let must =
            self.cc.must_revalidate || self.cc.proxy_revalidate || self.cc.s_maxage.is_some();
        match q.max_stale {
            Some(limit) if !must => limit.is_none_or(|l| -left < l as i64 * 1000),
            _ => false,
        }
    }

    /// Whether this stale object may still be served within `window`
    /// seconds of staleness (stale-while-revalidate, stale-if-error),
    /// unless the member asked for revalidation every time.
    pub fn within_stale_window(&self, window: Option<u64>, q: &Directives, now: i64) -> bool {
        if self.cc.must_revalidate || self.cc.proxy_revalidate || self.cc.no_cache {
            return false;
        }
        window.is_some_and(|w| -self.freshness(q, now) < w as i64 * 1000)
    }

    /// Whether this variant suits the request's fields named by Vary.
    /// Whether `other` is the same variant (it replaces this one when
    /// stored): the same coding and the same Vary values, the request's
    /// Accept-Encoding aside for an encoded variant.
    pub fn same_variant(&self, other: &Object) -> bool {
        self.encoding == other.encoding
            && self.vary.len() == other.vary.len()
            && self.vary.iter().zip(&other.vary).all(|(a, b)| {
                a.0 == b.0 && (a.1 == b.1 || (a.0 == b"accept-encoding" && self.encoding.is_some()))
            })
    }

    pub fn matches(&self, req: &Fields) -> bool {
        self.vary.iter().all(|(name, stored)| {
            if name == b"accept-encoding" {
                // An encoded variant serves every client that accepts its
                // coding (compressed once); the identity one only clients
                // that accept none of the codings a proxy or member would
                // produce, so that one client without gzip does not keep
                // every other from the gzip variant.
                let ae = req.all("accept-encoding");
                return match &self.encoding {
                    Some(e) => negotiate::accepts(ae, e),
                    None => negotiate::choose(ae, &Coding::ALL).is_none(),
                };
            }
            vary_value(req, name) == *stored
        })
    }
}

pub fn now() -> i64 {
    now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(fields: &[(&str, &str)]) -> Request {
        let mut raw = b"GET /a?b HTTP/1.1\r\nHost: Example.COM\r\n".to_vec();
        for (n, v) in fields {
            raw.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        crate::http::head::parse_request(Bytes::from(raw), 100).expect("request")
    }

    fn resp(status: u16, fields: &[(&str, &str)]) -> Response {
        let mut r = Response::new(status, Framing::Length(3));
        for (n, v) in fields {
            r.head.fields.append(n.as_bytes(), v.as_bytes());
        }
        r
    }

    fn why(q: &[(&str, &str)], st: u16, f: &[(&str, &str)]) -> Option<&'static str> {
        let r = resp(st, f);
        let s = Settings::default();
        let req = req(q);
        let q = Directives::of(&req.head.fields);
        storable(&req, &q, &r, &Directives::of_response(&r.head.fields), &s)
    }

    #[test]
    fn what_may_be_stored() {
        assert_eq!(why(&[], 200, &[("cache-control", "max-age=10")]), None);
        assert_eq!(why(&[], 200, &[]), Some("no freshness"));
        assert_eq!(
            why(
                &[],
                200,
                &[("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT")]
            ),
            None
        );
        assert_eq!(why(&[], 302, &[("etag", "\"x\"")]), Some("no freshness"));
        assert_eq!(why(&[], 302, &[("cache-control", "max-age=5")]), None);
        assert_eq!(
            why(&[], 206, &[("cache-control", "max-age=5")]),
            Some("status")
        );
        assert_eq!(
            why(&[], 200, &[("cache-control", "max-age=5, no-store")]),
            Some("no-store")
        );
        assert_eq!(
            why(
                &[("cache-control", "no-store")],
                200,
                &[("cache-control", "max-age=5")]
            ),
            Some("no-store")
        );
        assert_eq!(
            why(&[], 200, &[("cache-control", "private, max-age=5")]),
            Some("private")
        );
        assert_eq!(
            why(
                &[("authorization", "x")],
                200,
                &[("cache-control", "max-age=5")]
            ),
            Some("authorization")
        );
        assert_eq!(
            why(
                &[("authorization", "x")],
                200,
                &[("cache-control", "s-maxage=5")]
            ),
            None
        );
        assert_eq!(
            why(
                &[],
                200,
                &[("cache-control", "max-age=5"), ("vary", "Foo, *")]
            ),
            Some("vary *")
        );
        assert_eq!(
            why(
                &[],
                200,
                &[("cache-control", "max-age=5"), ("set-cookie", "a=b")]
            ),
            Some("set-cookie"),
            "not stored unless store_set_cookie"
        );
        assert_eq!(
            why(
                &[],
                599,
                &[("cache-control", "max-age=5, must-understand, no-store")]
            ),
            Some("must-understand")
        );
        assert_eq!(
            why(
                &[],
                200,
                &[("cache-control", "max-age=5, must-understand, no-store")]
            ),
            None
        );
        assert_eq!(why(&[], 503, &[("cache-control", "max-age=5")]), None);
        assert_eq!(
            why(
                &[],
                200,
                &[
                    ("cdn-cache-control", "no-store"),
                    ("cache-control", "max-age=5")
                ]
            ),
            Some("no-store")
        );
    }

    #[test]
    fn freshness_from_the_fields() {
        let s = Settings::default();
        let now = now_ms();
        let date = httpdate::format(now / 1000);
        let o = |f: &[(&str, &str)]| {
            Object::new(
                &req(&[]),
                &resp(200, f),
                Bytes::from_static(b"abc"),
                now,
                &s,
            )
        };
        let q = Directives::default();
        assert!(o(&[("cache-control", "max-age=100")]).fresh_for(&q, now));
        assert!(!o(&[("cache-control", "max-age=100")]).fresh_for(&q, now + 101_000));
        assert!(!o(&[("cache-control", "max-age=100"), ("age", "100")]).fresh_for(&q, now));
        assert!(!o(&[("cache-control", "max-age=100, s-maxage=0")]).fresh_for(&q, now));
        let exp = httpdate::format(now / 1000 + 50);
        assert!(o(&[("expires", &exp), ("date", &date)]).fresh_for(&q, now));
        assert!(!o(&[("expires", "0"), ("date", &date)]).fresh_for(&q, now));
        assert!(!o(&[("expires", &exp), ("expires", &exp), ("date", &date)]).fresh_for(&q, now));
        assert!(!o(&[("cache-control", "max-age=100"), ("age", "200, 0")]).fresh_for(&q, now));
        assert!(o(&[("cache-control", "max-age=100"), ("age", "0, 200")]).fresh_for(&q, now));
        assert!(o(&[("cache-control", "max-age=100"), ("age", "-200")]).fresh_for(&q, now));
        assert!(!o(&[
            ("cdn-cache-control", "max-age=\"100\""),
            ("cache-control", "no-cache")
        ])
        .fresh_for(&q, now));
        assert!(!o(&[("cdn-cache-control", "max-age=0"), ("expires", &exp)]).fresh_for(&q, now));
        assert!(o(&[
            ("cdn-cache-control", "max-age=100"),
            ("cache-control", "max-age=0")
        ])
        .fresh_for(&q, now));
        let lm = httpdate::format(now / 1000 - 1000);
        let h = o(&[("last-modified", &lm), ("date", &date)]);
        assert!((h.lifetime_ms - 100_000).abs() < 2000, "{}", h.lifetime_ms);
        assert!(!o(&[("cache-control", "max-age=100, no-cache")]).fresh_for(&q, now));
        let q10 = control::parse(std::iter::once(&b"max-age=10"[..]));
        assert!(!o(&[("cache-control", "max-age=100")]).fresh_for(&q10, now + 11_000));
        let stale = control::parse(std::iter::once(&b"max-stale=60"[..]));
        assert!(o(&[("cache-control", "max-age=1")]).fresh_for(&stale, now + 30_000));
        assert!(
            !o(&[("cache-control", "max-age=1, must-revalidate")]).fresh_for(&stale, now + 30_000)
        );
    }

    #[test]
    fn variants_match_on_vary() {
        let s = Settings::default();
        let f = [
            ("cache-control", "max-age=100"),
            ("vary", "Foo, Accept-Encoding"),
            ("content-encoding", "br"),
        ];
        let o = Object::new(
            &req(&[("foo", "1"), ("accept-encoding", "br")]),
            &resp(200, &f),
            Bytes::new(),
            0,
            &s,
        );
        assert!(o.matches(
            &req(&[("foo", "1"), ("accept-encoding", "gzip, br")])
                .head
                .fields
        ));
        assert!(!o.matches(
            &req(&[("foo", "1"), ("accept-encoding", "gzip")])
                .head
                .fields
        ));
        assert!(!o.matches(
            &req(&[("foo", "1"), ("accept-encoding", "br;q=0")])
                .head
                .fields
        ));
        assert!(!o.matches(&req(&[("foo", "2"), ("accept-encoding", "br")]).head.fields));
        assert!(!o.matches(&req(&[("accept-encoding", "br")]).head.fields));
        assert!(o.matches(&req(&[("foo", "1"), ("accept-encoding", "*")]).head.fields));
        let plain = Object::new(
            &req(&[("accept-encoding", "identity")]),
            &resp(
                200,
                &[
                    ("cache-control", "max-age=100"),
                    ("vary", "accept-encoding"),
                ],
            ),
            Bytes::new(),
            0,
            &s,
        );
        assert!(plain.matches(&req(&[("accept-encoding", "identity")]).head.fields));
        assert!(plain.matches(&req(&[("accept-encoding", "gzip;q=0")]).head.fields));
        assert!(plain.matches(&req(&[]).head.fields));
        assert!(!plain.matches(&req(&[("accept-encoding", "gzip")]).head.fields));
    }

    #[test]
    fn keys() {
        let s = Settings {
            key_extras: vec![(KeyPart::Cookie, "lang".into())],
            ..Settings::default()
        };
        let k = key(&req(&[("cookie", "a=1; lang=fr")]), false, &s);
        assert_eq!(k, b"http://example.com/a?b\0fr");
        assert!(k.starts_with(&url_key("HTTP://EXAMPLE.com/a")));
    }
}
