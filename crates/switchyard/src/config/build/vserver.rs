//! `[[vserver]]`: listeners, TLS, the HTTP and L4 settings of a virtual
//! server, validated into a snapshot `VServer`.

use std::collections::HashMap;
use std::sync::Arc;

use super::offload::{build_cache, build_compression};
use super::policy::{
    build_action, build_matcher, build_mirrors, build_rewrite, build_timeouts, edits,
};
use super::{pool_list, Ctx};
use crate::config::model;
use crate::config::snapshot::*;

pub(super) fn build_vserver(
    cx: &mut Ctx,
    v: &model::VServer,
    pools: &HashMap<String, Arc<Pool>>,
    previous: Option<&Snapshot>,
    store: &Arc<crate::cache::Store>,
    rulesets: &HashMap<String, crate::config::waf::Ruleset>,
) -> VServer {
    let name = v.name.get_ref().clone();
    let span = v.name.span();
    let old = previous.and_then(|s| s.vservers.iter().find(|o| o.name == name));
    let default_pool = v.default_pool.as_ref().and_then(|p| {
        let found = pools.get(p.get_ref()).cloned();
        if found.is_none() {
            cx.undefined_pool(
                p.get_ref(),
                p.span(),
                format!(
                    "vserver {name:?}: default_pool {:?} is not defined; defined pools: {}",
                    p.get_ref(),
                    pool_list(pools)
                ),
            );
        }
        found
    });
    let mut policies = Vec::new();
    for (i, p) in v.policy.iter().enumerate() {
        let pname = p.name.clone().unwrap_or_else(|| format!("#{}", i + 1));
        let what = format!("vserver {name:?} policy {pname:?}");
        let matcher = build_matcher(cx, &p.matches, &what, span.clone());
        let action = p
            .action
            .as_ref()
            .and_then(|a| build_action(cx, a, pools, &what));
        if action.is_none()
            && p.request_headers.set.is_empty()
            && p.request_headers.add.is_empty()
            && p.request_headers.remove.is_empty()
            && p.response_headers.set.is_empty()
            && p.response_headers.add.is_empty()
            && p.response_headers.remove.is_empty()
            && p.action.is_none()
            && p.compression.is_none()
            && p.cache.is_none()
            && p.rewrite.is_none()
            && p.mirror.is_empty()
            && p.limits.is_empty()
            && p.max_body.is_none()
            && p.timeouts.is_none()
        {
            cx.err(
                span.clone(),
                format!("{what}: has neither an action nor header edits, so it does nothing"),
            );
        }
        let pool_action = matches!(action, Some(Action::Pool(_)));
        let max_body = p.max_body.as_ref().map(|m| {
            if action.is_none() {
                cx.err(
                    m.span(),
                    format!("{what}: max_body applies to the requests a policy decides; give it an action"),
                );
            }
            *m.get_ref()
        });
        let timeouts = p
            .timeouts
            .as_ref()
            .map(|t| build_timeouts(cx, t, pool_action, &what))
            .unwrap_or_default();
        policies.push(Policy {
            name: pname,
            matcher,
            action,
            request_headers: edits(cx, &p.request_headers, &what, span.clone()),
            response_headers: edits(cx, &p.response_headers, &what, span.clone()),
            compression: p.compression.as_ref().map(|c| match c {
                model::OnOrSettings::Switch(false) => PolicyCompression::Off,
                model::OnOrSettings::Switch(true) => PolicyCompression::On,
                // A settings table says on, unless it says otherwise.
                model::OnOrSettings::Settings(c) if c.enabled == Some(false) => {
                    PolicyCompression::Off
                }
                model::OnOrSettings::Settings(c) => {
                    PolicyCompression::With(Arc::new(build_compression(cx, c, &what)))
                }
            }),
            cache: p.cache,
            rewrite: p
                .rewrite
                .as_ref()
                .and_then(|r| build_rewrite(cx, r, pool_action, &what)),
            mirrors: build_mirrors(cx, &p.mirror, pools, pool_action, &what),
            // Resolved once the vserver's limits are built (build/mod.rs).
            limits: Vec::new(),
            max_body,
            timeouts,
        });
    }
    let what = format!("vserver {name:?}");
    let tls = v.tls.as_ref().and_then(|t| {
        let old_tls = old.and_then(|o| o.tls.as_deref());
        match crate::config::tls_server::build(t, &cx.pos.base_dir(), &what, span.clone(), old_tls)
        {
            Ok(t) => Some(Arc::new(t)),
            Err(problems) => {
                for (at, msg) in problems {
                    cx.err(at, msg);
                }
                None
            }
        }
    });
    let h2c_only = match &v.h2c_only {
        Some(b) if *b.get_ref() && v.tls.is_some() => {
            cx.err(
                b.span(),
                format!("{what}: h2c_only is for cleartext vservers; on a TLS vserver use tls.alpn = [\"h2\"]"),
            );
            false
        }
        Some(b) => *b.get_ref(),
        None => false,
    };
    let h2c = h2c_only
        || match &v.h2c {
            Some(b) if *b.get_ref() && v.tls.is_some() => {
                cx.err(
                b.span(),
                format!(
                    "{what}: h2c is cleartext HTTP/2; on a TLS vserver offer HTTP/2 with tls.alpn = [\"h2\", \"http/1.1\"]"
                ),
            );
                false
            }
            Some(b) => *b.get_ref(),
            None => false,
        };
    let compression = v
        .compression
        .as_ref()
        .map(|c| build_compression(cx, c, &what));
    let cache = v.cache.as_ref().map(|c| build_cache(cx, c, &what, &name));
    let access_log = v.access_log.as_ref().and_then(|a| {
        let l4 = v.protocol != model::Protocol::Http;
        match crate::accesslog::build(a, &cx.pos.base_dir(), &what, l4) {
            Ok(c) => Some(Arc::new(c)),
            Err(problems) => {
                for (at, msg) in problems {
                    cx.err(at, msg);
                }
                None
            }
        }
    });
    let mut response_headers = edits(cx, &v.response_headers, &what, span.clone());
    if let Some(h) = tls.as_ref().and_then(|t| t.hsts.clone()) {
        // HSTS rides on the vserver's own response edits so every proxied
        // response carries it; a policy can still override it.
        response_headers
            .set
            .push(("strict-transport-security".to_string(), h));
    }
    let mut problems = Vec::new();
    let waf = v.waf.as_ref().and_then(|w| {
        crate::config::waf::build(
            w,
            rulesets,
            &cx.pos.base_dir(),
            &what,
            old.and_then(|o| o.waf.as_deref()),
            &mut problems,
        )
        .map(Arc::new)
    });
    let normalize = crate::config::normalize::build(v.normalize.as_ref(), &what, &mut problems);
    let script = v.script.as_ref().and_then(|s| {
        // Any pool of the file but those whose member connections cannot
        // carry any client's requests (a PROXY header, the client's own
        // source address), which `check_http_pools` refuses for vservers.
        // A tcp vserver's connections carry one client each: any pool.
        let tcp = v.protocol == model::Protocol::Tcp;
        let mut usable: Vec<&Arc<Pool>> = pools
            .values()
            .filter(|p| {
                tcp || (p.proxy_protocol.is_none()
                    && p.source_address != Some(SourceAddress::Client))
            })
            .collect();
        usable.sort_by(|a, b| a.name.cmp(&b.name));
        let names = usable.iter().map(|p| p.name.clone()).collect();
        let kind = crate::config::script::Kind {
            tcp,
            certs: tls.as_ref().map(|t| t.certs.clone()),
        };
        let script = crate::config::script::build(
            s,
            &cx.pos.base_dir(),
            (&what, &name),
            kind,
            names,
            normalize,
            &mut problems,
        )?;
        Some(Arc::new(VsScript {
            script: Arc::new(script),
            pools: usable.into_iter().cloned().collect(),
        }))
    });
    let l4 = crate::config::l4::build(v, &name, pools, span.clone(), &mut problems).map(Arc::new);
    let accept_proxy = crate::config::l4::accept_proxy(v).map(Arc::new);
    let socket = crate::config::l4::socket_opts(v, &name, &mut problems);
    let http3 = crate::config::http3::build(v, tls.as_deref(), &what, &mut problems);
    let http_pools = || {
        default_pool
            .iter()
            .chain(policies.iter().filter_map(|p| match &p.action {
                Some(Action::Pool(pool)) => Some(pool),
                _ => None,
            }))
    };
    let private_member_conns =
        v.protocol == model::Protocol::Http && http_pools().any(|p| p.proxy_protocol.is_some());
    if v.protocol == model::Protocol::Http {
        crate::config::l4::check_http_pools(&name, http_pools(), span.clone(), &mut problems);
    }
    if l4.is_some() {
        let http_only = [
            (!v.policy.is_empty(), "policy"),
            (v.compression.is_some(), "compression"),
            (v.cache.is_some(), "cache"),
            (v.waf.is_some(), "waf"),
            (
                v.script.is_some() && v.protocol == model::Protocol::Udp,
                "script",
            ),
            (v.normalize.is_some(), "normalize"),
            (v.request_body.is_some(), "request_body"),
            (v.h2c.is_some() || v.h2c_only.is_some(), "h2c"),
            (v.http3.is_some(), "http3"),
            (
                !v.request_headers.set.is_empty()
                    || !v.request_headers.add.is_empty()
                    || !v.request_headers.remove.is_empty(),
                "request_headers",
            ),
        ];
        for (set, key) in http_only {
            if set {
                problems.push((
                    span.clone(),
                    format!(
                        "vserver {name:?}: {key} is HTTP; a {} vserver relays bytes",
                        if v.protocol == model::Protocol::Udp {
                            "udp"
                        } else {
                            "tcp"
                        }
                    ),
                ));
            }
        }
        crate::config::l4::check_limits(v, &name, &mut problems);
        if v.default_pool.is_none() && v.sni_route.is_empty() {
            problems.push((
                span.clone(),
                format!("vserver {name:?}: an L4 vserver needs a default_pool (or sni_route)"),
            ));
        }
    }
    for (at, msg) in problems {
        cx.err(at, msg);
    }
    VServer {
        listen: v.listen.get_ref().iter().map(|a| *a.get_ref()).collect(),
        policies,
        default_pool,
        request_headers: edits(cx, &v.request_headers, &what, span.clone()),
        response_headers,
        tls,
        h2c,
        h2c_only,
        compression_on: v
            .compression
            .as_ref()
            .is_some_and(|c| c.enabled.unwrap_or(true)),
        compression: compression
            .or_else(|| {
                // A policy may turn on what the vserver leaves off.
                v.policy
                    .iter()
                    .any(|p| matches!(p.compression, Some(model::OnOrSettings::Switch(true))))
                    .then(crate::compress::Settings::default)
            })
            .map(Arc::new),
        cache_on: v.cache.as_ref().is_some_and(|c| c.enabled.unwrap_or(true)),
        cache: cache
            .or_else(|| {
                v.policy
                    .iter()
                    .any(|p| p.cache == Some(true))
                    .then(crate::cache::Settings::default)
            })
            .map(|settings| {
                Arc::new(crate::config::snapshot::VsCache {
                    settings,
                    store: store.clone(),
                })
            }),
        counters: old.map(|o| o.counters.clone()).unwrap_or_default(),
        latency: old.map(|o| o.latency.clone()).unwrap_or_default(),
        access_log,
        private_member_conns,
        normalize,
        request_body: request_body(cx, v, &what),
        waf,
        script,
        limits: Vec::new(),
        protocol: v.protocol,
        l4,
        accept_proxy,
        http3,
        socket,
        acl: None,
        name,
    }
}

/// Apache's mod_reqtimeout default, `body=20,MinRate=500`: a body may
/// take 20 s, then must average 500 bytes/s (a trickle of one byte every
/// 2 s is cut after 20 s; a phone on a poor link sends far more). A
/// request body that has kept the proxy waiting 10 minutes in all is cut
/// whatever its rate: without that bound a client at exactly 500 bytes/s
/// holds a connection for as long as its (chunked: endless) body lasts; a
/// 300 MB upload over 5 Mbit/s still fits. Uploads larger or slower than
/// that raise `deadline` (or set "0s") on their vserver.
const BODY_GRACE_MS: u64 = 20_000;
const BODY_MIN_RATE: u64 = 500;
const BODY_DEADLINE_MS: u64 = 600_000;

/// `[vserver.request_body]`, with the defaults above.
pub(super) fn request_body(
    cx: &mut Ctx,
    v: &model::VServer,
    what: &str,
) -> crate::http::body::BodyPace {
    let r = v.request_body.as_ref();
    let min_rate = match r.and_then(|r| r.min_rate.as_ref()) {
        None => BODY_MIN_RATE,
        Some(m) if *m.get_ref() <= 1 << 30 => *m.get_ref(),
        Some(m) => {
            cx.err(
                m.span(),
                format!(
                    "{what}: request_body.min_rate {} is out of range 0 to 1073741824 bytes per second",
                    m.get_ref()
                ),
            );
            BODY_MIN_RATE
        }
    };
    crate::http::body::BodyPace {
        gap_ms: 0,
        grace_ms: r.and_then(|r| r.grace).map_or(BODY_GRACE_MS, |m| m.0),
        min_rate,
        deadline_ms: r.and_then(|r| r.deadline).map_or(BODY_DEADLINE_MS, |m| m.0),
    }
}
