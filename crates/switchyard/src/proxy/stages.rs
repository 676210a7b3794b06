//! The stages every request goes through today, written as hooks: content
//! switching with its local answers (`Route`), forwarding fields, header
//! edits and the persistence cookie (`Forward`), and the access log
//! (`AccessLog`). `Pipeline` is their order; the path is normalized
//! before all of them (`normalizing`). Later features (WAF, cache,
//! compression) join the tuple in `pipeline()`.

use std::net::IpAddr;

use bytes::Bytes;

use super::body_size::BodySize;
use super::caching::Cache;
use super::compressing::Compress;
use super::exchange::Exchange;
use super::hooks::{Hooks, Local, Verdict};
use super::inspecting::Waf;
use super::limiting::Limits;
use super::normalizing::{self, Normalize};
use super::route;
use super::scripting::Scripting;
use crate::accesslog::{self, trace, trace::Trace};
use crate::balance::persist::persistence_cookie;
use crate::config::snapshot::{Action, HeaderEdits, RedirectParts, VServer};
use crate::http::message::{Fields, Request, Response};
use crate::http::responses;
use crate::log;
use crate::stats;

/// The stages, in the order their hooks run.
///
/// Compression comes before the cache: the response body passes the
/// encoder first, so the cache stores the encoded variant once.
///
/// The path is normalized before anything reads it (`Normalize`): every
/// later stage sees one spelling of the resource.
///
/// Per-source limits come next: a refused request costs nothing else.
/// The limits of policies (`scope = "policy"`) count right after routing,
/// the policy being known then, and so does a policy's `max_body` (before
/// the WAF reads a body it would refuse anyway).
/// The vserver's script comes before routing, so it can choose the pool
/// (`scripting.rs` says why there). The WAF comes right after routing: it judges every request a member
/// or the cache would answer, before the request is edited for the member.
///
/// ACME's HTTP-01 answers come right after it (`AcmeChallenge`): no
/// policy, limit or script of the vserver may redirect or refuse the CA's
/// check.
///
/// Two halves, `(Front, Rest)`: the request-head phases of the front
/// (its heads, then its waits: a tarpit, the script's call-out) finish
/// before the rest's begin, so a script that waits for a call-out
/// (`r:sideband`) still chooses the pool before routing.
pub type Pipeline = (Front, Rest);
pub type Front = (Normalize, (AcmeChallenge, (Limits, Scripting)));
pub type Rest = (
    Route,
    (
        Limits,
        (BodySize, (Waf, (Forward, (Compress, (Cache, AccessLog))))),
    ),
);

pub fn pipeline() -> Pipeline {
    (
        (
            Normalize,
            (AcmeChallenge, (Limits::default(), Scripting::default())),
        ),
        (
            Route,
            (
                Limits::after_routing(),
                (
                    BodySize::default(),
                    (
                        Waf::default(),
                        (
                            Forward,
                            (Compress::default(), (Cache::default(), AccessLog)),
                        ),
                    ),
                ),
            ),
        ),
    )
}

/// HTTP-01 (RFC 8555 8.3): `GET /.well-known/acme-challenge/TOKEN` over
/// plain HTTP answered with the key authorization of an order this node
/// has in progress. A token it does not know goes on like any request
/// (a member may run its own ACME client). Costs one prefix comparison
/// on other requests.
pub struct AcmeChallenge;

impl Hooks for AcmeChallenge {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        use crate::acme::challenge::{http01, HTTP01_PREFIX};
        // The prefix first: the path's end (a scan for '?') only for it.
        if x.tls || !req.target().starts_with(HTTP01_PREFIX) {
            return Verdict::Continue;
        }
        let Some(token) = req.path_only().strip_prefix(HTTP01_PREFIX) else {
            return Verdict::Continue;
        };
        let Some(answer) = std::str::from_utf8(token).ok().and_then(http01) else {
            return Verdict::Continue;
        };
        let (response, body) = responses::local(
            200,
            "application/octet-stream",
            Bytes::from(answer.into_bytes()),
            &[],
        );
        Verdict::Respond(Local { response, body })
    }
}

/// Content switching: the vserver's policies choose the pool, collect the
/// header edits, or answer (redirects, fixed responses).
pub struct Route;

impl Hooks for Route {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        let vs = x.vs;
        let d = route::route(vs, req, x.peer.ip());
        x.policy = d.policy;
        x.request_edits = d.request_edits;
        x.response_edits = d.response_edits;
        if d.compression {
            x.compression = d.compression_with.or(vs.compression.as_deref());
        }
        if d.cache {
            x.cache = vs.cache.as_deref();
        }
        let local = |status: u16, extra: &[(&str, &str)], body: &[u8], ctype: &str| {
            let mut fields: Vec<(&str, &str)> = extra.to_vec();
            fields.extend(hsts(vs));
            let (response, body) =
                responses::local(status, ctype, Bytes::copy_from_slice(body), &fields);
            Verdict::Respond(Local { response, body })
        };
        // A redirect whose location is made from the request: without a
        // usable Host there is none to make.
        let redirect = |location: Option<String>, status: u16| match location {
            Some(location) => local(
                status,
                &[("location", &location)],
                b"",
                "text/plain; charset=utf-8",
            ),
            None => {
                stats::inc(&vs.counters.local().bad_requests);
                let (response, body) = responses::local_error(400, "no valid Host to redirect to");
                Verdict::Respond(Local { response, body })
            }
        };
        // A pool the vserver's script chose wins over the policies', the
        // connection's (`on_client_hello`) and the default one; a policy's
        // local answer still answers.
        let chosen = x.pool.is_some();
        match d.policy.and_then(|p| p.action.as_ref()) {
            Some(Action::Pool(p)) => {
                // The policy's rewrite and mirrors go with its pool: a pool
                // the script chose gets the request as it is.
                if let (false, Some(policy)) = (chosen, d.policy) {
                    x.pool = Some(p.clone());
                    if let Some(r) = &policy.rewrite {
                        normalizing::apply_rewrite(req, r, &vs.normalize);
                    }
                    x.mirrors = &policy.mirrors;
                }
                Verdict::Continue
            }
            Some(Action::Redirect { location, status }) => local(
                *status,
                &[("location", location)],
                b"",
                "text/plain; charset=utf-8",
            ),
            Some(Action::RedirectHttps { status, port }) => {
                redirect(https_location(req, *port), *status)
            }
            Some(Action::Respond {
                status,
                body,
                content_type,
            }) => local(*status, &[], body, content_type),
            Some(Action::RedirectTo(parts)) => {
                redirect(built_location(req, x.tls, parts), parts.status)
            }
            None if chosen => Verdict::Continue,
            // The connection's script events chose (SNI routing), before
            // the vserver's default.
            None if x.conn_pool.is_some() => {
                x.pool = x.conn_pool.clone();
                Verdict::Continue
            }
            None => match &vs.default_pool {
                Some(p) => {
                    x.pool = Some(p.clone());
                    Verdict::Continue
                }
                None => {
                    stats::inc(&vs.counters.local().no_pool);
                    let why = format!(
                        "no policy of vserver \"{}\" matched and it has no default_pool",
                        vs.name
                    );
                    let (response, body) = responses::local_error(503, &why);
                    Verdict::Respond(Local { response, body })
                }
            },
        }
    }
}

/// The Strict-Transport-Security field of a TLS vserver that sets one.
fn hsts(vs: &VServer) -> Option<(&'static str, &str)> {
    vs.tls
        .as_ref()
        .and_then(|t| t.hsts.as_deref())
        .map(|h| ("strict-transport-security", h))
}

/// "https://HOST[:PORT]TARGET" for a request, or None when its Host is
/// missing or not a plain host name / address (nothing else may go into a
/// Location we build).
fn https_location(req: &Request, port: u16) -> Option<String> {
    let host = req.host_name()?;
    let ok = !host.is_empty()
        && host
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(b));
    if !ok {
        return None;
    }
    let host = std::str::from_utf8(host).ok()?;
    let target = String::from_utf8_lossy(req.target());
    let target = if target.starts_with('/') {
        target
    } else {
        "/".into()
    };
    Some(if port == 443 {
        format!("https://{host}{target}")
    } else {
        format!("https://{host}:{port}{target}")
    })
}

/// The Location of a redirect built from the request: its scheme, host,
/// path and query with the parts the policy gives replaced; the port is
/// written unless it is the scheme's own. None when the request's Host
/// is needed and is not a plain host name or address.
fn built_location(req: &Request, tls: bool, p: &RedirectParts) -> Option<String> {
    let scheme = p
        .scheme
        .as_deref()
        .unwrap_or(if tls { "https" } else { "http" });
    let host = match &p.host {
        Some(h) => h.clone(),
        None => {
            let h = req.host_name()?;
            let ok = !h.is_empty()
                && h.iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(b));
            if !ok {
                return None;
            }
            std::str::from_utf8(h).ok()?.to_string()
        }
    };
    let path = String::from_utf8_lossy(req.path_only());
    let path = match (&p.path, &p.path_prefix) {
        (None, _) => path.into_owned(),
        (Some(to), None) => to.clone(),
        (Some(to), Some(from)) => {
            // By segments: "/from" on "/from/x" leaves "/x" to append.
            let base = from.trim_end_matches('/');
            let rest = path.strip_prefix(base).unwrap_or(&path);
            let joined = format!("{}{rest}", to.trim_end_matches('/'));
            if joined.is_empty() {
                "/".to_string()
            } else if joined.starts_with('/') {
                joined
            } else {
                format!("/{joined}")
            }
        }
    };
    let port = match p.port {
        Some(80) if scheme == "http" => String::new(),
        Some(443) if scheme == "https" => String::new(),
        Some(n) => format!(":{n}"),
        None => String::new(),
    };
    let query = match req.query() {
        Some(q) => format!("?{}", String::from_utf8_lossy(q)),
        None => String::new(),
    };
    Some(format!("{scheme}://{host}{port}{path}{query}"))
}

/// Forwarding fields (X-Forwarded-For, X-Forwarded-Proto, Forwarded), the
/// operator's header edits, and the persistence cookie. (The verified
/// client certificate's field is set with the normalization, before the
/// rules: `normalizing.rs`.)
pub struct Forward;

impl Hooks for Forward {
    fn before_member_request(&mut self, x: &mut Exchange<'_>, req: &mut Request) {
        let f = &mut req.head.fields;
        // One pass over the fields: the forwarding chains so far are kept
        // aside and every field this stage replaces or refuses is removed.
        // (Two lookups and a removal pass cost about 210 instructions more
        // per request, by callgrind, on a 6-field request.) Several fields
        // are one list (RFC 9110 5.3): the last non-empty one is the chain
        // so far.
        let mut xff: Option<Vec<u8>> = None;
        let mut forwarded: Option<Vec<u8>> = None;
        f.retain(|n, v| {
            let is = |name: &[u8]| n.len() == name.len() && n.eq_ignore_ascii_case(name);
            let chain = if is(b"x-forwarded-for") {
                &mut xff
            } else if is(b"forwarded") {
                &mut forwarded
            } else {
                return !(is(b"x-forwarded-proto") || is(b"expect"));
            };
            if !v.is_empty() {
                *chain = Some(v.to_vec());
            }
            false
        });
        let proto = if x.tls { "https" } else { "http" };
        forwarding_fields(
            f,
            x.peer.ip(),
            proto,
            xff.as_deref(),
            forwarded.as_deref(),
            req.host.as_deref(),
        );
        if x.vs.access_log.as_ref().is_some_and(|l| l.traceparent) {
            x.facts.trace = Some(traceparent(f));
        }
        apply_edits(f, &x.request_edits);
    }

    fn on_response_head(&mut self, x: &mut Exchange<'_>, resp: &mut Response) {
        if let (Some(pool), Some(i), Some(m)) = (&x.pool, x.member, x.picked()) {
            let id = &m.cookie_id;
            if let Some(c) = persistence_cookie(pool.persistence.as_ref(), id, x.sticky != Some(i))
            {
                resp.head.fields.append(b"set-cookie", c.as_bytes());
            }
        }
        apply_edits(&mut resp.head.fields, &x.response_edits);
        alt_svc(x, &mut resp.head.fields);
    }
}

/// `[vserver.http3]`: HTTP/1.1 and HTTP/2 responses say where the same
/// service speaks HTTP/3 (RFC 7838), unless the member said otherwise.
fn alt_svc(x: &Exchange<'_>, f: &mut Fields) {
    let Some(h3) = x.vs.http3.as_deref().filter(|_| !x.facts.http3) else {
        return;
    };
    let port = x.listen.port();
    if let Some((_, v)) = h3.alt_svc.iter().find(|(p, _)| *p == port) {
        if f.get("alt-svc").is_none() {
            f.append(b"alt-svc", v);
        }
    }
}

/// The request's W3C trace: one valid `traceparent` goes on unchanged;
/// none, several or an invalid one are replaced by a new trace (and an
/// orphaned `tracestate` is dropped, W3C Trace Context 3.3).
fn traceparent(f: &mut Fields) -> Trace {
    let incoming = {
        let mut all = f.all("traceparent");
        match (all.next(), all.next()) {
            (Some(v), None) => trace::parse(v),
            _ => None,
        }
    };
    if let Some(t) = incoming {
        return t;
    }
    f.retain(|n, _| {
        !(n.eq_ignore_ascii_case(b"traceparent") || n.eq_ignore_ascii_case(b"tracestate"))
    });
    let t = trace::start();
    f.append(b"traceparent", &t.header());
    t
}

fn forwarding_fields(
    f: &mut Fields,
    client: IpAddr,
    proto: &str,
    xff: Option<&[u8]>,
    forwarded: Option<&[u8]>,
    host: Option<&[u8]>,
) {
    let ip = match client {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(client),
        v4 => v4,
    };
    // Formatted on the stack: no allocation per request for the address.
    let mut ip_buf = [0u8; 48];
    let ip_s = format_ip(ip, &mut ip_buf);
    f.append_with(b"x-forwarded-for", |v| {
        if let Some(prev) = xff {
            v.extend_from_slice(prev);
            v.extend_from_slice(b", ");
        }
        v.extend_from_slice(ip_s);
    });
    f.append(b"x-forwarded-proto", proto.as_bytes());
    f.append_with(b"forwarded", |v| {
        if let Some(prev) = forwarded {
            v.extend_from_slice(prev);
            v.extend_from_slice(b", ");
        }
        if ip.is_ipv6() {
            v.extend_from_slice(b"for=\"[");
            v.extend_from_slice(ip_s);
            v.extend_from_slice(b"]\"");
        } else {
            v.extend_from_slice(b"for=");
            v.extend_from_slice(ip_s);
        }
        v.extend_from_slice(b";proto=");
        v.extend_from_slice(proto.as_bytes());
        if let Some(h) = host {
            v.extend_from_slice(b";host=\"");
            v.extend_from_slice(h);
            v.push(b'"');
        }
    });
}

/// An address as text, IPv4 without the formatting machinery (it is on
/// every request).
fn format_ip(ip: IpAddr, buf: &mut [u8; 48]) -> &[u8] {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, o) in v4.octets().iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if *o >= 100 {
                    buf[n] = b'0' + o / 100;
                    n += 1;
                }
                if *o >= 10 {
                    buf[n] = b'0' + o / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + o % 10;
                n += 1;
            }
            &buf[..n]
        }
        IpAddr::V6(_) => {
            use std::io::Write;
            let mut cur = std::io::Cursor::new(&mut buf[..]);
            let _ = write!(cur, "{ip}");
            let n = cur.position() as usize;
            &buf[..n]
        }
    }
}

/// Edits apply in order (virtual server, then matching policies): each
/// removes the fields it sets or removes, then adds its values.
pub fn apply_edits(f: &mut Fields, edits: &[&HeaderEdits]) {
    for e in edits {
        f.retain(|n, _| !e.drops(n));
        for (n, v) in e.set.iter().chain(&e.add) {
            f.append(n.as_bytes(), v.as_bytes());
        }
    }
}

/// One line per exchange: the vserver's `[vserver.access_log]` when it
/// has one (every exchange, sampled), else the fixed stderr line of
/// `global.access_log` (exchanges a member answered).
pub struct AccessLog;

impl Hooks for AccessLog {
    fn on_log(&mut self, x: &mut Exchange<'_>, req: &Request) {
        if let Some(l) = x.vs.access_log.as_deref() {
            if l.sampled(x.status) {
                l.write(&entry(x, req));
            }
            return;
        }
        if !x.st.access_log {
            return;
        }
        let (Some(pool), Some(m)) = (&x.pool, x.picked()) else {
            return;
        };
        log::access(format_args!(
            "{} {} \"{} {}\" {} {} {} {}us",
            x.peer,
            x.vs.name,
            String::from_utf8_lossy(req.method_str()),
            String::from_utf8_lossy(req.target()),
            x.status,
            x.body_bytes,
            m.label(&pool.name),
            x.started.elapsed().as_micros()
        ));
    }
}

/// What the access log shows of a finished exchange.
fn entry<'a>(x: &'a Exchange<'_>, req: &'a Request) -> accesslog::Entry<'a> {
    let f = &x.facts;
    let since_head = x.started.elapsed().as_micros() as u64;
    let total_us = since_head + u64::from(f.head_us.unwrap_or(0));
    let now_us = crate::clock::unix_us();
    let member = x.picked().map(|m| m.addr);
    accesslog::Entry {
        time_us: now_us.saturating_sub(total_us),
        client: x.peer,
        vserver: &x.vs.name,
        req,
        http2: f.http2,
        http3: f.http3,
        status: x.status,
        bytes_sent: x.body_bytes,
        bytes_received: f.body_in,
        pool: x.pool.as_deref().map(|p| p.name.as_str()),
        member,
        retries: f.attempts.saturating_sub(1),
        tls: f.tls,
        head_us: f.head_us,
        connect_us: f.connect_us,
        ttfb_us: f.ttfb_us,
        total_us,
        cache: f.cache,
        // A request answered here (a cache hit, a redirect) still shows
        // the trace it came with.
        trace: f.trace.or_else(|| {
            let mut all = req.head.all("traceparent");
            match (all.next(), all.next()) {
                (Some(v), None) => trace::parse(v),
                _ => None,
            }
        }),
        script: f.script.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_format_like_display() {
        for a in [
            "0.0.0.0",
            "1.2.3.4",
            "10.20.30.40",
            "127.0.0.1",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            let mut buf = [0u8; 48];
            assert_eq!(format_ip(ip, &mut buf), ip.to_string().as_bytes());
        }
    }
}
