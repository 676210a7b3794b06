//! `[[vserver.policy]]`: matchers, actions and header edits.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use toml::Spanned;

use super::{pool_list, valid_value, Ctx};
use crate::config::model;
use crate::config::snapshot::*;
use crate::config::types::{is_host, is_normalized_path, is_token};

/// `redirect_scheme`, `redirect_host`, `redirect_port`, `redirect_path`
/// and `redirect_path_prefix`: only what a Location may hold.
fn redirect_parts(
    cx: &mut Ctx,
    a: &model::Action,
    span: Range<usize>,
    what: &str,
) -> Option<Action> {
    let status = a.status.unwrap_or(302);
    if ![301, 302, 303, 307, 308].contains(&status) {
        cx.err(span, format!("{what}: redirect status {status} is not a redirect; allowed: 301, 302, 303, 307, 308"));
        return None;
    }
    if let Some(s) = &a.redirect_scheme {
        if s != "http" && s != "https" {
            cx.err(
                span,
                format!("{what}: redirect_scheme {s:?} must be \"http\" or \"https\""),
            );
            return None;
        }
    }
    if let Some(h) = a.redirect_host.as_ref().filter(|h| !is_host(h)) {
        cx.err(
            span,
            format!("{what}: redirect_host {h:?} is not a host name or address"),
        );
        return None;
    }
    for (name, p) in [
        ("redirect_path", &a.redirect_path),
        ("redirect_path_prefix", &a.redirect_path_prefix),
    ] {
        if let Some(p) = p {
            if !p.starts_with('/') || !valid_value(p) || p.contains([' ', '?', '#']) {
                cx.err(
                    span.clone(),
                    format!("{what}: {name} {p:?} must start with / and hold no space, ?, # or control character"),
                );
                return None;
            }
        }
    }
    if a.redirect_path_prefix.is_some() && a.redirect_path.is_none() {
        cx.err(
            span,
            format!("{what}: redirect_path_prefix needs redirect_path (what replaces it)"),
        );
        return None;
    }
    Some(Action::RedirectTo(RedirectParts {
        scheme: a.redirect_scheme.clone(),
        host: a.redirect_host.clone(),
        port: a.redirect_port,
        path: a.redirect_path.clone(),
        path_prefix: a.redirect_path_prefix.clone(),
        status,
    }))
}

pub(super) fn build_action(
    cx: &mut Ctx,
    a: &Spanned<model::Action>,
    pools: &HashMap<String, Arc<Pool>>,
    what: &str,
) -> Option<Action> {
    let span = a.span();
    let a = a.get_ref();
    let https = a.redirect_https == Some(true);
    let parts = a.redirect_scheme.is_some()
        || a.redirect_host.is_some()
        || a.redirect_port.is_some()
        || a.redirect_path.is_some()
        || a.redirect_path_prefix.is_some();
    let kinds = [
        a.pool.is_some(),
        a.redirect.is_some(),
        https,
        parts,
        a.body.is_some()
            || (a.redirect.is_none() && a.pool.is_none() && !https && !parts && a.status.is_some()),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        cx.err(span, format!("{what}: action needs exactly one of pool = \"NAME\", redirect = \"URL\", redirect_https = true, redirect_scheme/host/port/path (a redirect built from the request), or status + body (a fixed response)"));
        return None;
    }
    if parts {
        return redirect_parts(cx, a, span, what);
    }
    if a.https_port.is_some() && !https {
        cx.err(
            span,
            format!("{what}: https_port only applies to redirect_https = true"),
        );
        return None;
    }
    if https {
        let status = a.status.unwrap_or(301);
        if ![301, 302, 303, 307, 308].contains(&status) {
            cx.err(span, format!("{what}: redirect status {status} is not a redirect; allowed: 301, 302, 303, 307, 308"));
            return None;
        }
        return Some(Action::RedirectHttps {
            status,
            port: a.https_port.unwrap_or(443),
        });
    }
    if let Some(p) = &a.pool {
        return match pools.get(p) {
            Some(pool) => Some(Action::Pool(pool.clone())),
            None => {
                cx.undefined_pool(
                    p,
                    span,
                    format!(
                        "{what}: action pool {p:?} is not defined; defined pools: {}",
                        pool_list(pools)
                    ),
                );
                None
            }
        };
    }
    if let Some(loc) = &a.redirect {
        let status = a.status.unwrap_or(302);
        if ![301, 302, 303, 307, 308].contains(&status) {
            cx.err(span, format!("{what}: redirect status {status} is not a redirect; allowed: 301, 302, 303, 307, 308"));
            return None;
        }
        if !valid_value(loc) || loc.is_empty() {
            cx.err(
                span,
                format!("{what}: redirect location {loc:?} is empty or holds control characters"),
            );
            return None;
        }
        return Some(Action::Redirect {
            location: loc.clone(),
            status,
        });
    }
    let status = a.status.unwrap_or(200);
    if !(200..=599).contains(&status) {
        cx.err(
            span,
            format!("{what}: fixed response status {status} must be between 200 and 599"),
        );
        return None;
    }
    let ct = a
        .content_type
        .clone()
        .unwrap_or_else(|| "text/plain; charset=utf-8".to_string());
    if !valid_value(&ct) {
        cx.err(
            span,
            format!("{what}: content_type holds control characters"),
        );
        return None;
    }
    Some(Action::Respond {
        status,
        body: Bytes::from(a.body.clone().unwrap_or_default()),
        content_type: ct,
    })
}

pub(super) fn build_matcher(
    cx: &mut Ctx,
    m: &model::Match,
    what: &str,
    span: Range<usize>,
) -> Matcher {
    let methods: Vec<String> = m
        .method
        .as_ref()
        .map(|v| v.to_vec())
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.to_ascii_uppercase())
        .collect();
    for meth in &methods {
        if !is_token(meth) {
            cx.err(
                span.clone(),
                format!("{what}: match method {meth:?} is not a valid method"),
            );
        }
    }
    let paths: Vec<String> = m.path.as_ref().map(|v| v.to_vec()).unwrap_or_default();
    let prefixes: Vec<String> = m
        .path_prefix
        .as_ref()
        .map(|v| v.to_vec())
        .unwrap_or_default();
    for p in paths.iter().chain(&prefixes) {
        if !p.starts_with('/') {
            cx.err(
                span.clone(),
                format!("{what}: match path {p:?} must start with '/'"),
            );
        }
    }
    // Requests are matched on their normalized path: a configured one is
    // written the same way (`/caf%c3%a9` matches `/caf%C3%A9`).
    let paths = normal_paths(cx, paths, what, &span);
    let prefixes = normal_paths(cx, prefixes, what, &span);
    let path_nocase = match m.case.as_deref() {
        None | Some("sensitive") => false,
        Some("insensitive") => true,
        Some(other) => {
            cx.err(
                span.clone(),
                format!("{what}: match case {other:?}: use \"sensitive\" or \"insensitive\""),
            );
            false
        }
    };
    let path_regex = m.path_regex.as_ref().map(|r| {
        if !path_nocase {
            return r.0.clone();
        }
        match regex::RegexBuilder::new(r.0.as_str())
            .case_insensitive(true)
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                cx.err(span.clone(), format!("{what}: match path_regex: {e}"));
                r.0.clone()
            }
        }
    });
    let nv = |cx: &mut Ctx, n: &Option<model::NameValues>, header: bool| {
        let all = n.as_ref().map(|n| n.0.clone()).unwrap_or_default();
        all.iter()
            .map(|n| {
                if header && !is_token(&n.name) {
                    cx.err(
                        span.clone(),
                        format!(
                            "{what}: match header name {:?} is not a valid field name",
                            n.name
                        ),
                    );
                }
                let set = [
                    n.value.is_some(),
                    n.value_prefix.is_some(),
                    n.value_regex.is_some(),
                ]
                .iter()
                .filter(|b| **b)
                .count();
                if set > 1 {
                    cx.err(
                        span.clone(),
                        format!("{what}: use only one of value, value_prefix, value_regex"),
                    );
                }
                NameValueMatch {
                    name: if header {
                        n.name.to_ascii_lowercase()
                    } else {
                        n.name.clone()
                    },
                    value: if let Some(v) = &n.value {
                        ValueMatch::Exact(v.clone())
                    } else if let Some(v) = &n.value_prefix {
                        ValueMatch::Prefix(v.clone())
                    } else if let Some(r) = &n.value_regex {
                        ValueMatch::Regex(r.0.clone())
                    } else {
                        ValueMatch::Present
                    },
                }
            })
            .collect::<Vec<_>>()
    };
    Matcher {
        hosts: m
            .host
            .as_ref()
            .map(|v| v.to_vec())
            .unwrap_or_default()
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        paths,
        path_prefixes: prefixes,
        path_regex,
        path_nocase,
        methods,
        headers: nv(cx, &m.header, true),
        queries: nv(cx, &m.query, false),
        sources: m.source.as_ref().map(|v| v.to_vec()).unwrap_or_default(),
    }
}

/// Configured paths in the form requests are matched in
/// (`http::normalize`, with nothing refused: a path written with an
/// escaped slash means it).
pub(super) fn normal_paths(
    cx: &mut Ctx,
    paths: Vec<String>,
    what: &str,
    span: &Range<usize>,
) -> Vec<String> {
    use crate::http::normalize::{self, BadEncoding, EscapedSlashes, Rules};
    let rules = Rules {
        merge_slashes: false,
        escaped_slashes: EscapedSlashes::Keep,
        bad_encoding: BadEncoding::Keep,
        forward_original: false,
    };
    paths
        .into_iter()
        .map(|p| match normalize::target(p.as_bytes(), &rules) {
            Ok(Some(n)) => match String::from_utf8(n.to_vec()) {
                Ok(n) => n,
                Err(_) => {
                    cx.err(
                        span.clone(),
                        format!("{what}: match path {p:?} is not UTF-8 once normalized"),
                    );
                    p
                }
            },
            _ => p,
        })
        .collect()
}

pub(super) fn edits(
    cx: &mut Ctx,
    e: &model::HeaderEdits,
    what: &str,
    span: Range<usize>,
) -> HeaderEdits {
    let mut check = |n: &str, v: Option<&str>| {
        if !is_token(n) {
            cx.err(
                span.clone(),
                format!("{what}: header edit name {n:?} is not a valid field name"),
            );
        }
        if v.is_some_and(|v| !valid_value(v)) {
            cx.err(
                span.clone(),
                format!("{what}: header edit value for {n:?} holds control characters"),
            );
        }
    };
    for (n, v) in e.set.iter().chain(&e.add) {
        check(n, Some(v));
    }
    for n in &e.remove {
        check(n, None);
    }
    HeaderEdits {
        set: e.set.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
        add: e.add.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
        remove: e.remove.iter().map(|n| n.to_ascii_lowercase()).collect(),
    }
}

/// The largest `max_body` of a mirror: a copy of the body is held until
/// the body is whole, for each request copied.
const MIRROR_MAX_BODY: usize = 16 << 20;
const MIRROR_DEFAULT_BODY: usize = 128 << 10;
const MIRROR_DEFAULT_IN_FLIGHT: usize = 256;

/// A policy's `mirror` entries: only beside `action = { pool = ... }`
/// (the request the copy is made of goes to a member), each to a pool
/// that exists.
pub(super) fn build_mirrors(
    cx: &mut Ctx,
    mirrors: &[Spanned<model::Mirror>],
    pools: &HashMap<String, Arc<Pool>>,
    pool_action: bool,
    what: &str,
) -> Vec<Mirror> {
    let mut out = Vec::new();
    for m in mirrors {
        let span = m.span();
        let m = m.get_ref();
        if !pool_action {
            cx.err(
                span,
                format!("{what}: mirror needs action = {{ pool = \"NAME\" }} (the request copied is one sent to a member)"),
            );
            return Vec::new();
        }
        let Some(pool) = pools.get(&m.pool) else {
            cx.undefined_pool(
                &m.pool,
                span,
                format!(
                    "{what}: mirror pool {:?} is not defined; defined pools: {}",
                    m.pool,
                    pool_list(pools)
                ),
            );
            continue;
        };
        let percent = m.percent.unwrap_or(100.0);
        if !(percent > 0.0 && percent <= 100.0) {
            cx.err(
                span,
                format!("{what}: mirror percent {percent} must be above 0 and at most 100"),
            );
            continue;
        }
        let max_body = m.max_body.unwrap_or(MIRROR_DEFAULT_BODY);
        if max_body > MIRROR_MAX_BODY {
            cx.err(
                span,
                format!("{what}: mirror max_body {max_body} is above {MIRROR_MAX_BODY} (each copied request holds its body until it is whole)"),
            );
            continue;
        }
        let max_in_flight = m.max_in_flight.unwrap_or(MIRROR_DEFAULT_IN_FLIGHT);
        if max_in_flight == 0 {
            cx.err(
                span,
                format!("{what}: mirror max_in_flight must be at least 1"),
            );
            continue;
        }
        out.push(Mirror {
            pool: pool.clone(),
            per_million: (percent * 10_000.0).round() as u32,
            max_body,
            max_in_flight,
            in_flight: Default::default(),
        });
    }
    out
}

/// A policy's `timeouts`: only beside `action = { pool = ... }` (they are
/// its member's), each above 0.
pub(super) fn build_timeouts(
    cx: &mut Ctx,
    t: &Spanned<model::PolicyTimeouts>,
    pool_action: bool,
    what: &str,
) -> MemberTimeouts {
    let (span, t) = (t.span(), t.get_ref());
    if !pool_action {
        cx.err(
            span.clone(),
            format!("{what}: timeouts are for the member a policy sends to; give it action = {{ pool = \"NAME\" }}"),
        );
    }
    let mut ms = |m: &Option<crate::config::types::Millis>, name: &str| match m {
        Some(m) if m.0 == 0 => {
            cx.err(
                span.clone(),
                format!("{what}: timeouts.{name} must be above 0"),
            );
            None
        }
        m => m.as_ref().map(|m| m.0),
    };
    MemberTimeouts {
        connect_ms: ms(&t.upstream_connect, "upstream_connect"),
        response_ms: ms(&t.upstream_response, "upstream_response"),
    }
}

/// A policy's `rewrite`: only beside `action = { pool = ... }` (the
/// member it goes to is the one that gets the new path or Host), with
/// paths already in the normalized form the rules read (a rewrite is not
/// normalized again: no dot or empty segments, no query or fragment).
pub(super) fn build_rewrite(
    cx: &mut Ctx,
    r: &Spanned<model::Rewrite>,
    pool_action: bool,
    what: &str,
) -> Option<Rewrite> {
    let span = r.span();
    let r = r.get_ref();
    if !pool_action {
        cx.err(
            span,
            format!("{what}: rewrite needs action = {{ pool = \"NAME\" }} (the member that gets the new path or Host)"),
        );
        return None;
    }
    if r.path.is_none() && r.host.is_none() {
        cx.err(span, format!("{what}: rewrite needs path or host"));
        return None;
    }
    if (r.path_prefix.is_some() || r.path_regex.is_some()) && r.path.is_none() {
        cx.err(
            span,
            format!("{what}: rewrite.path_prefix and rewrite.path_regex need rewrite.path (what replaces the match)"),
        );
        return None;
    }
    if r.path_prefix.is_some() && r.path_regex.is_some() {
        cx.err(
            span,
            format!("{what}: rewrite takes path_prefix or path_regex, not both"),
        );
        return None;
    }
    if let (Some(_), Some(p)) = (&r.path_regex, &r.path) {
        // A replacement: `$` names a capture; the result is normalized
        // when the request comes.
        if !p.starts_with('/') || !valid_value(p) || p.contains([' ', '?', '#']) {
            cx.err(
                span,
                format!("{what}: rewrite.path {p:?} must start with / and hold no space, ?, # or control character"),
            );
            return None;
        }
    }
    let literal = [("path", &r.path), ("path_prefix", &r.path_prefix)];
    for (name, p) in literal.iter().filter(|_| r.path_regex.is_none()) {
        if let Some(p) = p.as_ref().filter(|p| !is_normalized_path(p)) {
            cx.err(
                span.clone(),
                format!("{what}: rewrite.{name} {p:?} must be a normalized path: start with /, no empty, . or .. segment, no space, ?, #, %, \\, \" or control character"),
            );
            return None;
        }
    }
    if let Some(h) = r.host.as_ref().filter(|h| !is_host(h)) {
        cx.err(
            span,
            format!("{what}: rewrite.host {h:?} is not a host name or address"),
        );
        return None;
    }
    Some(Rewrite {
        path: r.path.clone(),
        path_prefix: r.path_prefix.clone(),
        path_regex: r.path_regex.as_ref().map(|x| x.0.clone()),
        host: r.host.clone(),
    })
}
