//! The ingress-nginx annotations of an Ingress (`nginx.ingress.kubernetes.io/*`)
//! read into what Switchyard's data plane does with them, and the ones it
//! does not do, each with what happens to the Ingress (docs/kubernetes.md
//! has the table).
//!
//! Three outcomes per key:
//! - mapped: a Switchyard feature does what ingress-nginx does (or says
//!   how it differs, in the docs);
//! - ignored: the Ingress is served without it and gets a Warning Event
//!   `UnsupportedAnnotation` naming the key (timeouts, body size, buffers:
//!   serving without them changes performance limits, not who gets in);
//! - refused: the whole Ingress is not served and gets a Warning Event
//!   `IngressRefused`, because serving it without the annotation would let
//!   in requests the annotation keeps out (authentication, client
//!   certificates, snippets that may hold `deny` rules, an address list
//!   that does not parse) or send members requests they do not expect
//!   (a path rewrite).

use std::collections::BTreeMap;

pub const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// How the members are spoken to (`backend-protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendProtocol {
    #[default]
    Http,
    /// TLS to the members, not verified (ingress-nginx's default,
    /// `proxy_ssl_verify off`).
    Https,
    /// HTTP/2 in cleartext (gRPC, or h2c).
    Grpc,
    /// HTTP/2 over TLS, not verified.
    Grpcs,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Canary {
    pub by_header: Option<String>,
    pub by_header_value: Option<String>,
    pub by_header_pattern: Option<String>,
    pub by_cookie: Option<String>,
    /// Share of the requests no header or cookie decided, out of `weight_total`.
    pub weight: u32,
    pub weight_total: u32,
}

/// ingress-nginx's limits per client address: requests per second and per
/// minute (its `limit_req` zones), each with a burst of `burst` times as
/// many, and requests in progress at once (its `limit_conn` zone).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: Option<u32>,
    pub per_minute: Option<u32>,
    /// `limit-connections`: nginx's `limit_conn` counts the connections
    /// of an address that have a request in progress (an HTTP/2
    /// connection's streams each count), i.e. its requests in progress.
    pub connections: Option<u32>,
    pub burst: u32,
    /// Sources never limited (`limit-whitelist`, CIDRs).
    pub allow: Vec<String>,
}

impl RateLimit {
    /// The node's `[[vserver.limit]]` tables named `name` (" rps" or
    /// " rpm" appended), scoped to the policies that name them. nginx's
    /// leaky bucket (rate N, burst N x B, nodelay) as a sliding window of
    /// B periods holding N x B requests: the same burst at once, and N
    /// per period on average after it.
    pub fn tables(&self, name: &str) -> Vec<(String, String)> {
        let b = self.burst.max(1);
        let allow: Vec<String> = self.allow.iter().map(|c| crate::render::q(c)).collect();
        let table = |tag: &str, count: String| {
            let limit = format!("{name} {tag}");
            let text = format!(
                "[[vserver.limit]]\nname = {}\nscope = \"policy\"\n{count}\nstatus = 503\nallow = [{}]\n",
                crate::render::q(&limit),
                allow.join(", ")
            );
            (limit, text)
        };
        [(self.per_second, "rps", "s"), (self.per_minute, "rpm", "m")]
            .into_iter()
            .filter_map(|(n, tag, unit)| {
                Some(table(
                    tag,
                    format!("req_rate = \"{}/{b}{unit}\"", n?.saturating_mul(b)),
                ))
            })
            .chain(
                self.connections
                    .map(|n| table("conn", format!("req_cur = {n}"))),
            )
            .collect()
    }
}

/// ingress-nginx's `proxy-ssl-*` annotations (its `proxy_ssl_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberTls {
    /// `proxy-ssl-verify: on`.
    pub verify: bool,
    /// `proxy-ssl-secret` ("namespace/name"): its `ca.crt` verifies the
    /// members, its `tls.crt`/`tls.key` (if any) are presented to them.
    pub secret: Option<(String, String)>,
    /// `proxy-ssl-name`: the name verified (and sent, with
    /// `proxy-ssl-server-name: on`).
    pub name: Option<String>,
    /// `proxy-ssl-server-name: on`: the name is sent as SNI.
    pub server_name: bool,
    /// `proxy-ssl-protocols` as the node's versions ("1.2", "1.3").
    pub versions: Vec<&'static str>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cors {
    /// One origin per entry ("*" for any).
    pub origins: Vec<String>,
    pub methods: String,
    pub headers: String,
    pub expose_headers: Option<String>,
    pub credentials: bool,
    pub max_age: u32,
}

/// What the annotations ask of Switchyard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// Paths are regular expressions (`use-regex`), matched from the
    /// start, ignoring case (nginx's `location ~*`).
    pub use_regex: bool,
    /// Some(false): no redirect to HTTPS for this Ingress's TLS hosts.
    pub ssl_redirect: Option<bool>,
    pub force_ssl_redirect: bool,
    /// Sources allowed (CIDRs); empty: all.
    pub allow_sources: Vec<String>,
    /// Sources refused (CIDRs).
    pub deny_sources: Vec<String>,
    /// `affinity: cookie`: the cookie's name.
    pub affinity_cookie: Option<String>,
    /// `upstream-hash-by` as a Switchyard `hash_key`.
    pub hash_key: Option<String>,
    /// `load-balance` as a Switchyard algorithm.
    pub algorithm: Option<&'static str>,
    pub canary: Option<Canary>,
    pub backend_protocol: BackendProtocol,
    pub cors: Option<Cors>,
    /// (URL, status) of `permanent-redirect` / `temporal-redirect`.
    pub redirect: Option<(String, u16)>,
    /// `app-root`: where a request for "/" is sent.
    pub app_root: Option<String>,
    /// `proxy-ssl-*`: how an HTTPS (or GRPCS) backend's certificate is
    /// checked and what the node presents; None: not verified (the
    /// default of both).
    pub member_tls: Option<MemberTls>,
    /// The pools' `[pool.tls]` table for it, made by the render (which
    /// reads the Secret).
    pub member_tls_table: Option<String>,
    /// `limit-rps`, `limit-rpm` (with `limit-burst-multiplier`,
    /// `limit-whitelist`): requests per source.
    pub rate_limit: Option<RateLimit>,
    /// `proxy-body-size` in bytes (None: no limit, as "0" says).
    pub max_body: Option<u64>,
    /// `proxy-connect-timeout`, `proxy-read-timeout` in seconds.
    pub connect_timeout_s: Option<u32>,
    pub read_timeout_s: Option<u32>,
    /// `rewrite-target`: what the member gets instead of the path, nginx's
    /// `$1` written `${1}` (the node's regex replacement); the paths are
    /// then regular expressions, as ingress-nginx makes them.
    pub rewrite_target: Option<String>,
}

/// An annotation not applied: its key and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

#[derive(Debug, Default)]
pub struct Parsed {
    pub annotations: Annotations,
    /// Served without these (Event `UnsupportedAnnotation`).
    pub ignored: Vec<Problem>,
    /// The Ingress is not served (Event `IngressRefused`).
    pub refused: Vec<Problem>,
}

fn truthy(v: &str) -> Option<bool> {
    match v.trim() {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// A comma-separated list of CIDRs (or plain addresses) in the node's
/// own spelling check.
fn cidrs(v: &str) -> Result<Vec<String>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            switchyard::cidr::Cidr::parse(s)
                .map(|_| s.to_string())
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// A cookie or header name: an RFC 9110 token.
fn token(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether the node compiles `re` as it compiles a configuration's
/// regular expressions (a render the node refuses would keep every other
/// change from being published).
pub fn node_regex(re: &str) -> Result<(), String> {
    serde_json::from_value::<switchyard::config::types::PathRegex>(serde_json::Value::String(
        re.to_string(),
    ))
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// What a Location or a redirect path may hold: no spaces or controls.
fn plain(v: &str) -> bool {
    !v.is_empty() && !v.contains(|c: char| c.is_whitespace() || c.is_control())
}

/// nginx's `upstream-hash-by` variables that Switchyard has a key for.
fn hash_key(v: &str) -> Option<String> {
    let v = v.trim();
    match v {
        "$request_uri" | "$uri" => return Some("uri".into()),
        "$remote_addr" | "$binary_remote_addr" => return Some("source-ip".into()),
        _ => {}
    }
    if let Some(h) = v.strip_prefix("$http_") {
        let name = h.replace('_', "-").to_ascii_lowercase();
        return token(&name).then(|| format!("header:{name}"));
    }
    if let Some(c) = v.strip_prefix("$cookie_") {
        return token(c).then(|| format!("cookie:{c}"));
    }
    None
}

/// Keys whose whole reason to exist is to keep requests out: serving the
/// Ingress without them would let those requests in.
fn guards_access(key: &str) -> bool {
    key.ends_with("-snippet")
        || key.starts_with("auth-")
        || key == "satisfy"
        || key == "enable-global-auth"
}

pub fn parse(all: &BTreeMap<String, String>) -> Parsed {
    let mut p = Parsed::default();
    let a = &mut p.annotations;
    let get = |k: &str| all.get(&format!("{PREFIX}{k}")).map(String::as_str);
    let mut ignored = |key: &str, why: &str| {
        p.ignored.push(Problem {
            key: format!("{PREFIX}{key}"),
            message: why.to_string(),
        })
    };
    let mut refused: Vec<Problem> = Vec::new();
    let mut refuse = |key: &str, why: String| {
        refused.push(Problem {
            key: format!("{PREFIX}{key}"),
            message: why,
        })
    };
    // Canary annotations only mean something together with `canary`.
    let is_canary = get("canary").and_then(truthy) == Some(true);
    for (full, value) in all {
        let Some(key) = full.strip_prefix(PREFIX) else {
            continue;
        };
        match key {
            "use-regex" => a.use_regex = truthy(value) == Some(true),
            "ssl-redirect" => match truthy(value) {
                Some(b) => a.ssl_redirect = Some(b),
                None => ignored(key, "not true or false"),
            },
            "force-ssl-redirect" => match truthy(value) {
                Some(b) => a.force_ssl_redirect = b,
                None => ignored(key, "not true or false"),
            },
            "whitelist-source-range" | "allowlist-source-range" => match cidrs(value) {
                Ok(c) => a.allow_sources.extend(c),
                Err(e) => refuse(key, format!("{e}: the Ingress would be open to every source")),
            },
            "denylist-source-range" => match cidrs(value) {
                Ok(c) => a.deny_sources.extend(c),
                Err(e) => refuse(key, format!("{e}: the Ingress would be open to the sources it denies")),
            },
            "affinity" => match value.trim() {
                "cookie" => {
                    a.affinity_cookie.get_or_insert_with(|| "INGRESSCOOKIE".into());
                }
                other => ignored(key, &format!("affinity {other:?} is not supported (cookie only)")),
            },
            "session-cookie-name" => {
                if token(value.trim()) {
                    a.affinity_cookie = Some(value.trim().to_string());
                } else {
                    ignored(key, "not a cookie name");
                }
            }
            "affinity-mode" if value.trim() == "balanced" => {}
            "session-cookie-path"
            | "session-cookie-expires"
            | "session-cookie-max-age"
            | "session-cookie-samesite"
            | "session-cookie-secure"
            | "session-cookie-domain"
            | "session-cookie-change-on-failure"
            | "session-cookie-conditional-samesite-none"
            | "affinity-mode"
            | "affinity-canary-behavior" => ignored(
                key,
                "Switchyard's persistence cookie has a name only (a session cookie on path /)",
            ),
            "upstream-hash-by" => match hash_key(value) {
                Some(k) => a.hash_key = Some(k),
                None => ignored(
                    key,
                    "only $request_uri, $uri, $remote_addr, $http_NAME and $cookie_NAME have a Switchyard hash key",
                ),
            },
            "load-balance" => match value.trim() {
                "round_robin" => a.algorithm = Some("round-robin"),
                "ewma" => a.algorithm = Some("p2c"),
                other => ignored(key, &format!("load-balance {other:?} is not supported")),
            },
            "canary" => {}
            "canary-by-header" | "canary-by-header-value" | "canary-by-header-pattern"
            | "canary-by-cookie" | "canary-weight" | "canary-weight-total"
                if !is_canary =>
            {
                ignored(key, "only meaningful with canary: \"true\"")
            }
            "canary-by-header" | "canary-by-cookie" if !token(value.trim()) => {
                ignored(key, "not a header or cookie name")
            }
            "canary-by-header" => {
                a.canary.get_or_insert_with(Default::default).by_header =
                    Some(value.trim().to_ascii_lowercase())
            }
            "canary-by-header-value" => {
                a.canary.get_or_insert_with(Default::default).by_header_value = Some(value.clone())
            }
            "canary-by-header-pattern" => match node_regex(value) {
                Ok(()) => {
                    a.canary.get_or_insert_with(Default::default).by_header_pattern =
                        Some(value.clone())
                }
                Err(e) => ignored(key, &e),
            },
            "canary-by-cookie" => {
                a.canary.get_or_insert_with(Default::default).by_cookie =
                    Some(value.trim().to_string())
            }
            "canary-weight" | "canary-weight-total" => match value.trim().parse::<u32>() {
                Ok(n) => {
                    let c = a.canary.get_or_insert_with(Default::default);
                    if key == "canary-weight" {
                        c.weight = n;
                    } else {
                        c.weight_total = n;
                    }
                }
                Err(_) => ignored(key, "not a whole number"),
            },
            "backend-protocol" => match value.trim().to_ascii_uppercase().as_str() {
                "HTTP" => a.backend_protocol = BackendProtocol::Http,
                "HTTPS" => a.backend_protocol = BackendProtocol::Https,
                "GRPC" | "H2C" => a.backend_protocol = BackendProtocol::Grpc,
                "GRPCS" => a.backend_protocol = BackendProtocol::Grpcs,
                other => refuse(
                    key,
                    format!("backend-protocol {other:?} is not supported (HTTP, HTTPS, GRPC, GRPCS, H2C): the members would get requests in a protocol they do not speak"),
                ),
            },
            "enable-cors" => {
                if truthy(value) == Some(true) {
                    a.cors.get_or_insert_with(cors_defaults);
                }
            }
            "cors-allow-origin" | "cors-allow-methods" | "cors-allow-headers"
            | "cors-expose-headers" | "cors-allow-credentials" | "cors-max-age" => {}
            "permanent-redirect" | "temporal-redirect" => {
                let code_key = if key == "permanent-redirect" {
                    "permanent-redirect-code"
                } else {
                    "temporal-redirect-code"
                };
                let default = if key == "permanent-redirect" { 301 } else { 302 };
                let code = get(code_key)
                    .and_then(|c| c.trim().parse::<u16>().ok())
                    .filter(|c| [301, 302, 303, 307, 308].contains(c))
                    .unwrap_or(default);
                let url = value.trim();
                if (url.starts_with("http://") || url.starts_with("https://") || url.starts_with('/'))
                    && plain(url)
                {
                    a.redirect = Some((url.to_string(), code));
                } else {
                    ignored(key, "not an absolute URL or path");
                }
            }
            "permanent-redirect-code" | "temporal-redirect-code" => {}
            "app-root" => {
                if value.starts_with('/') && plain(value) && !value.contains(['?', '#']) {
                    a.app_root = Some(value.clone());
                } else {
                    ignored(key, "not a path");
                }
            }
            "rewrite-target" => match rewrite_template(value) {
                Ok(t) => a.rewrite_target = Some(t),
                // Served without it, the members would get paths they do
                // not expect.
                Err(why) => refuse(key, why),
            },
            "proxy-ssl-verify" | "proxy-ssl-server-name" => match value.trim() {
                "on" | "true" => {
                    let t = a.member_tls.get_or_insert_with(Default::default);
                    if key == "proxy-ssl-verify" {
                        t.verify = true;
                    } else {
                        t.server_name = true;
                    }
                }
                "off" | "false" => {}
                _ => refuse(key, "not on or off: the members' certificates would not be checked as asked".into()),
            },
            "proxy-ssl-secret" => match value.trim().split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    a.member_tls.get_or_insert_with(Default::default).secret =
                        Some((ns.to_string(), name.to_string()));
                }
                _ => refuse(key, "not \"namespace/name\": the members' certificates could not be checked".into()),
            },
            "proxy-ssl-name" => {
                let n = value.trim().to_ascii_lowercase();
                if switchyard::config::types::is_host(&n)
                    && !n.contains(':')
                    && n.parse::<std::net::IpAddr>().is_err()
                {
                    a.member_tls.get_or_insert_with(Default::default).name = Some(n);
                } else {
                    refuse(key, "not a DNS name: the members' certificates could not be checked against it".into());
                }
            }
            "proxy-ssl-protocols" => {
                let mut versions = Vec::new();
                for v in value.split_whitespace() {
                    match v {
                        "TLSv1.2" => versions.push("1.2"),
                        "TLSv1.3" => versions.push("1.3"),
                        // Older ones Switchyard never speaks.
                        "TLSv1" | "TLSv1.1" | "SSLv2" | "SSLv3" => {}
                        _ => {}
                    }
                }
                if versions.is_empty() {
                    refuse(key, format!("{value:?} names neither TLSv1.2 nor TLSv1.3, the versions Switchyard speaks"));
                } else {
                    a.member_tls.get_or_insert_with(Default::default).versions = versions;
                }
            }
            "limit-rps" | "limit-rpm" => match value.trim().parse::<u32>() {
                Ok(n) if n > 0 => {
                    let r = a.rate_limit.get_or_insert_with(Default::default);
                    if key == "limit-rps" {
                        r.per_second = Some(n);
                    } else {
                        r.per_minute = Some(n);
                    }
                }
                // Served without it, the members would get every request
                // the limit keeps away.
                _ => refuse(key, format!("{value:?} is not a count of requests above 0")),
            },
            "limit-connections" => match value.trim().parse::<u32>() {
                Ok(n) if n > 0 => {
                    a.rate_limit.get_or_insert_with(Default::default).connections = Some(n)
                }
                _ => refuse(key, format!("{value:?} is not a count of connections above 0")),
            },
            "limit-burst-multiplier" | "limit-whitelist" => {}
            "proxy-connect-timeout" | "proxy-read-timeout" => {
                match value.trim().trim_end_matches('s').parse::<u32>() {
                    Ok(n) if n > 0 => {
                        if key == "proxy-connect-timeout" {
                            a.connect_timeout_s = Some(n);
                        } else {
                            a.read_timeout_s = Some(n);
                        }
                    }
                    _ => ignored(key, "not a number of seconds above 0"),
                }
            }
            "proxy-send-timeout" => ignored(
                key,
                "Switchyard has no time limit per write to a member (the upload is paced by the client's own timeouts)",
            ),
            "proxy-body-size" => match nginx_size(value) {
                Some(0) => a.max_body = None,
                Some(n) => a.max_body = Some(n),
                // Served without it, the members would get bodies of any
                // length.
                None => refuse(key, format!("{value:?} is not a size (bytes, or with k, m or g)")),
            },
            "proxy-ssl-ciphers" | "proxy-ssl-verify-depth" => ignored(
                key,
                "the node's TLS library chooses its ciphers and bounds the chain itself",
            ),
            "ssl-passthrough" => refuse(
                key,
                "TLS passthrough is not supported for Ingress: the Ingress would be served with Switchyard's certificate instead of the member's".into(),
            ),
            k if guards_access(k) => refuse(
                k,
                if k.ends_with("-snippet") {
                    "snippets are raw nginx configuration; Switchyard never runs them (they may hold access rules, so the Ingress is not served without them)".into()
                } else {
                    "authentication is not supported on Ingress: serving without it would let every client in".into()
                },
            ),
            _ => ignored(key, "not supported by Switchyard"),
        }
    }
    // The CORS details, once enable-cors is known.
    if let Some(c) = a.cors.as_mut() {
        if let Some(o) = get("cors-allow-origin") {
            let origins: Vec<String> = o
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && !s.contains(|ch: char| ch.is_control()))
                .collect();
            if !origins.is_empty() {
                c.origins = origins;
            }
        }
        let text = |v: &str| !v.is_empty() && !v.contains(|ch: char| ch.is_control());
        if let Some(m) = get("cors-allow-methods").filter(|v| text(v)) {
            c.methods = m.to_string();
        }
        if let Some(h) = get("cors-allow-headers").filter(|v| text(v)) {
            c.headers = h.to_string();
        }
        if let Some(h) = get("cors-expose-headers").filter(|v| text(v)) {
            c.expose_headers = Some(h.to_string());
        }
        if let Some(b) = get("cors-allow-credentials").and_then(truthy) {
            c.credentials = b;
        }
        if let Some(n) = get("cors-max-age").and_then(|v| v.trim().parse().ok()) {
            c.max_age = n;
        }
        p.ignored.push(Problem {
            key: format!("{PREFIX}enable-cors"),
            message: "served with a difference: the CORS fields are added to the members' responses, and preflight (OPTIONS) requests go to the members, which must answer them".into(),
        });
    }
    if let Some(c) = a.canary.as_mut() {
        if c.weight_total == 0 {
            c.weight_total = 100;
        }
        c.weight = c.weight.min(c.weight_total);
    }
    if is_canary && a.canary.is_none() {
        a.canary = Some(Canary {
            weight_total: 100,
            ..Default::default()
        });
    }
    if a.member_tls.is_some()
        && matches!(
            a.backend_protocol,
            BackendProtocol::Http | BackendProtocol::Grpc
        )
    {
        p.ignored.push(Problem {
            key: format!("{PREFIX}proxy-ssl-*"),
            message: "the members are spoken to in cleartext (backend-protocol): the proxy-ssl annotations apply to HTTPS and GRPCS backends".into(),
        });
        a.member_tls = None;
    }
    if let Some(r) = a.rate_limit.as_mut() {
        r.burst = match get("limit-burst-multiplier").map(|v| v.trim().parse::<u32>()) {
            None => 5,
            Some(Ok(b)) if (1..=1000).contains(&b) => b,
            Some(_) => {
                refused.push(Problem {
                    key: format!("{PREFIX}limit-burst-multiplier"),
                    message: "not a whole number from 1 to 1000".into(),
                });
                5
            }
        };
        if let Some(w) = get("limit-whitelist") {
            match cidrs(w) {
                Ok(c) => r.allow = c,
                Err(e) => refused.push(Problem {
                    key: format!("{PREFIX}limit-whitelist"),
                    message: format!("{e}: the sources it lists would be limited"),
                }),
            }
        }
    }
    // ingress-nginx: a rewrite-target makes the paths regular expressions.
    if a.rewrite_target.is_some() {
        a.use_regex = true;
    }
    p.refused = refused;
    p
}

/// An nginx size ("100", "512k", "8m", "1g"; either case) in bytes.
fn nginx_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, unit) = match v.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&v[..i], c.to_ascii_lowercase()),
        _ => (v, ' '),
    };
    let n: u64 = digits.parse().ok()?;
    let scale: u64 = match unit {
        ' ' => 1,
        'k' => 1 << 10,
        'm' => 1 << 20,
        'g' => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// nginx's rewrite replacement as the node's: `$1` to `${1}` (in Rust's
/// regex a `$1` followed by a letter would name another group); a path
/// only (no query, no other variable: nginx would expand what the node
/// cannot).
fn rewrite_template(v: &str) -> Result<String, String> {
    if !v.starts_with('/') || !plain(v) || v.contains(['?', '#', '"']) {
        return Err(format!(
            "{v:?} is not a path Switchyard can rewrite to (a path starting with /, no query, spaces or quotes)"
        ));
    }
    let mut out = String::new();
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut n = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            n.push(*d);
            chars.next();
        }
        if n.is_empty() {
            return Err(format!(
                "{v:?} uses an nginx variable; only the path's captures ($1, $2...) are supported"
            ));
        }
        out.push_str(&format!("${{{n}}}"));
    }
    Ok(out)
}

/// ingress-nginx's defaults for `enable-cors`.
fn cors_defaults() -> Cors {
    Cors {
        origins: vec!["*".into()],
        methods: "GET, PUT, POST, DELETE, PATCH, OPTIONS".into(),
        headers: "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization".into(),
        expose_headers: None,
        credentials: true,
        max_age: 1_728_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Parsed {
        parse(
            &pairs
                .iter()
                .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn booleans_and_redirects() {
        let p = of(&[("ssl-redirect", "false"), ("force-ssl-redirect", "true")]);
        assert_eq!(p.annotations.ssl_redirect, Some(false));
        assert!(p.annotations.force_ssl_redirect);
        assert!(p.ignored.is_empty() && p.refused.is_empty());
        let p = of(&[
            ("permanent-redirect", "https://example.org/x"),
            ("permanent-redirect-code", "308"),
        ]);
        assert_eq!(
            p.annotations.redirect,
            Some(("https://example.org/x".into(), 308))
        );
        let p = of(&[("temporal-redirect", "https://example.org/")]);
        assert_eq!(p.annotations.redirect.unwrap().1, 302);
        // What the node would refuse is refused here, alone.
        let p = of(&[("permanent-redirect", "https://example.org/a b")]);
        assert!(p.annotations.redirect.is_none());
        assert_eq!(p.ignored.len(), 1);
        let p = of(&[("app-root", "/app?x=1")]);
        assert!(p.annotations.app_root.is_none());
        assert_eq!(p.ignored.len(), 1);
        let p = of(&[
            ("canary", "true"),
            ("canary-by-header", "x"),
            ("canary-by-header-pattern", "("),
        ]);
        assert!(p.annotations.canary.unwrap().by_header_pattern.is_none());
        assert_eq!(p.ignored.len(), 1);
    }

    #[test]
    fn source_ranges_parse_or_refuse_the_ingress() {
        let p = of(&[("whitelist-source-range", "10.0.0.0/8, 192.168.1.1")]);
        assert_eq!(
            p.annotations.allow_sources,
            vec!["10.0.0.0/8".to_string(), "192.168.1.1".to_string()]
        );
        let p = of(&[("whitelist-source-range", "10.0.0.0/33")]);
        assert_eq!(p.refused.len(), 1, "{p:?}");
        assert!(p.refused[0].key.ends_with("whitelist-source-range"));
        let p = of(&[("denylist-source-range", "bogus")]);
        assert_eq!(p.refused.len(), 1);
    }

    #[test]
    fn affinity_and_hashing() {
        let p = of(&[("affinity", "cookie"), ("session-cookie-name", "route")]);
        assert_eq!(p.annotations.affinity_cookie.as_deref(), Some("route"));
        let p = of(&[("affinity", "cookie"), ("session-cookie-expires", "172800")]);
        assert_eq!(
            p.annotations.affinity_cookie.as_deref(),
            Some("INGRESSCOOKIE")
        );
        assert_eq!(p.ignored.len(), 1);
        assert_eq!(
            of(&[("upstream-hash-by", "$http_x_user")])
                .annotations
                .hash_key
                .as_deref(),
            Some("header:x-user")
        );
        assert_eq!(
            of(&[("upstream-hash-by", "$request_uri$host")])
                .ignored
                .len(),
            1
        );
        assert_eq!(
            of(&[("load-balance", "ewma")]).annotations.algorithm,
            Some("p2c")
        );
    }

    #[test]
    fn canary_settings() {
        let p = of(&[
            ("canary", "true"),
            ("canary-by-header", "X-Canary"),
            ("canary-weight", "30"),
        ]);
        let c = p.annotations.canary.unwrap();
        assert_eq!(c.by_header.as_deref(), Some("x-canary"));
        assert_eq!((c.weight, c.weight_total), (30, 100));
        // Without canary: "true", the canary keys mean nothing and say so.
        let p = of(&[("canary-by-header", "x")]);
        assert!(p.annotations.canary.is_none());
        assert_eq!(p.ignored.len(), 1);
    }

    #[test]
    fn backend_protocols() {
        assert_eq!(
            of(&[("backend-protocol", "GRPCS")])
                .annotations
                .backend_protocol,
            BackendProtocol::Grpcs
        );
        assert_eq!(
            of(&[("backend-protocol", "https")])
                .annotations
                .backend_protocol,
            BackendProtocol::Https
        );
        assert_eq!(of(&[("backend-protocol", "FCGI")]).refused.len(), 1);
    }

    #[test]
    fn cors_with_its_settings() {
        let p = of(&[
            ("enable-cors", "true"),
            ("cors-allow-origin", "https://a.example, https://b.example"),
            ("cors-allow-credentials", "false"),
        ]);
        let c = p.annotations.cors.unwrap();
        assert_eq!(c.origins.len(), 2);
        assert!(!c.credentials);
        assert!(c.methods.contains("PATCH"));
        // The preflight difference is said.
        assert_eq!(p.ignored.len(), 1);
    }

    #[test]
    fn what_guards_access_refuses_the_ingress_and_the_rest_is_ignored() {
        for key in [
            "configuration-snippet",
            "server-snippet",
            "auth-url",
            "auth-type",
            "auth-tls-secret",
            "auth-tls-verify-client",
            "ssl-passthrough",
        ] {
            let p = of(&[(key, "x")]);
            assert_eq!(p.refused.len(), 1, "{key}");
            assert!(p.ignored.is_empty(), "{key}");
        }
        for key in [
            "proxy-send-timeout",
            "proxy-buffering",
            "custom-http-errors",
            "made-up-key",
        ] {
            let p = of(&[(key, "1")]);
            assert!(p.refused.is_empty(), "{key}");
            assert_eq!(p.ignored.len(), 1, "{key}");
            assert_eq!(p.ignored[0].key, format!("{PREFIX}{key}"));
        }
        // Other prefixes are not ours to judge.
        let mut m = BTreeMap::new();
        m.insert("kubernetes.io/ingress.class".to_string(), "x".to_string());
        let p = parse(&m);
        assert!(p.ignored.is_empty() && p.refused.is_empty());
    }
}
