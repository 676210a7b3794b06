//! `[vserver.tls]` from the file model to the runtime TLS side
//! (`tls::TlsServer`): certificates read and checked, versions, suites and
//! groups resolved, resumption state carried over from the previous
//! snapshot. Every error names the value at fault (file:line:column).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::server::{NoServerSessionStorage, StoresServerSessions, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    Error as TlsError, InconsistentKeys, RootCertStore, ServerConfig, SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use toml::Spanned;

use super::model::{self, ClientAuth};
use super::types::Problem;
use crate::acme::Resolver;
use crate::tls::session_cache::SessionCache;
use crate::tls::{format_time, x509, CertStore, TlsServer};

/// TLS 1.2 sessions remembered for session-ID resumption, and QUIC's
/// single-use tickets for 0-RTT, shared by all workers of a vserver (one
/// entry is a few hundred bytes; `tls::session_cache`).
const SESSION_CACHE: usize = 10_000;

/// The protocol versions by their configuration names.
pub(super) fn version(name: &str) -> Option<&'static SupportedProtocolVersion> {
    match name {
        "1.2" => Some(&rustls::version::TLS12),
        "1.3" => Some(&rustls::version::TLS13),
        _ => None,
    }
}

/// The configured protocol versions (both when none are given).
pub(super) fn versions(
    list: Option<&Spanned<Vec<Spanned<String>>>>,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Vec<&'static SupportedProtocolVersion> {
    let Some(list) = list else {
        return vec![&rustls::version::TLS13, &rustls::version::TLS12];
    };
    let mut out = Vec::new();
    for v in list.get_ref() {
        match version(v.get_ref()) {
            Some(v) => out.push(v),
            None => problems.push((
                v.span(),
                format!(
                    "{what}: unknown TLS version {:?}; allowed: \"1.2\", \"1.3\"",
                    v.get_ref()
                ),
            )),
        }
    }
    if list.get_ref().is_empty() {
        problems.push((list.span(), format!("{what}: versions is empty")));
    }
    out
}

/// rustls names TLS 1.3 suites "TLS13_*"; the IANA names ("TLS_AES_*",
/// "TLS_CHACHA20_*") that OpenSSL and curl use are accepted too.
fn suite_name_matches(configured: &str, rustls_name: &str) -> bool {
    let c = configured.to_ascii_uppercase();
    c == rustls_name
        || rustls_name
            .strip_prefix("TLS13_")
            .is_some_and(|rest| c.strip_prefix("TLS_") == Some(rest))
}

fn group_name_matches(configured: &str, rustls_name: &str) -> bool {
    let c = configured.to_ascii_lowercase();
    let r = rustls_name.to_ascii_lowercase();
    c == r
        || matches!(
            (c.as_str(), r.as_str()),
            ("p-256" | "prime256v1", "secp256r1") | ("p-384", "secp384r1")
        )
}

/// Resolves a path in the config file against the file's directory.
pub fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

pub(super) fn read(base: &Path, p: &Spanned<String>, what: &str) -> Result<Vec<u8>, Problem> {
    let path = resolve(base, p.get_ref());
    std::fs::read(&path).map_err(|e| {
        (
            p.span(),
            format!("{what}: cannot read {}: {e}", path.display()),
        )
    })
}

/// PEM certificates of a file (at least one).
pub(super) fn read_certs(
    base: &Path,
    p: &Spanned<String>,
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, Problem> {
    let bytes = read(base, p, what)?;
    pem_certs(&bytes).map_err(|e| (p.span(), format!("{what}: {:?} {e}", p.get_ref())))
}

/// The PEM certificates in `bytes`, at least one; Err says what is wrong
/// ("is not valid PEM: ...", "holds no PEM certificate ...").
pub(super) fn pem_certs(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err(
            "holds no PEM certificate (expected a \"-----BEGIN CERTIFICATE-----\" block)".into(),
        );
    }
    Ok(certs)
}

fn provider(t: &model::Tls, what: &str, problems: &mut Vec<Problem>) -> CryptoProvider {
    let mut p = aws_lc_rs::default_provider();
    if let Some(list) = &t.ciphers {
        let mut suites = Vec::new();
        for c in list.get_ref() {
            match aws_lc_rs::ALL_CIPHER_SUITES.iter().find(|s| {
                s.suite()
                    .as_str()
                    .is_some_and(|n| suite_name_matches(c.get_ref(), n))
            }) {
                Some(s) => suites.push(*s),
                None => problems.push((
                    c.span(),
                    format!(
                        "{what}: unknown cipher suite {:?}; allowed: {}",
                        c.get_ref(),
                        aws_lc_rs::ALL_CIPHER_SUITES
                            .iter()
                            .filter_map(|s| s.suite().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        if list.get_ref().is_empty() {
            problems.push((list.span(), format!("{what}: ciphers is empty")));
        }
        p.cipher_suites = suites;
    }
    if let Some(list) = &t.groups {
        let mut groups = Vec::new();
        for g in list.get_ref() {
            match aws_lc_rs::ALL_KX_GROUPS
                .iter()
                .find(|k| group_name_matches(g.get_ref(), &format!("{:?}", k.name())))
            {
                Some(k) => groups.push(*k),
                None => problems.push((
                    g.span(),
                    format!(
                        "{what}: unknown key-exchange group {:?}; allowed: {}",
                        g.get_ref(),
                        aws_lc_rs::ALL_KX_GROUPS
                            .iter()
                            .map(|k| format!("{:?}", k.name()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        if list.get_ref().is_empty() {
            problems.push((list.span(), format!("{what}: groups is empty")));
        }
        p.kx_groups = groups;
    }
    p
}

/// Builds a vserver's TLS side. `span` locates errors that belong to no
/// single value; `old` lends resumption state from the previous snapshot.
pub fn build(
    t: &model::Tls,
    base: &Path,
    what: &str,
    span: Range<usize>,
    old: Option<&TlsServer>,
) -> Result<TlsServer, Vec<Problem>> {
    let what = format!("{what} tls");
    let what = what.as_str();
    let mut problems = Vec::new();
    let provider = Arc::new(provider(t, what, &mut problems));

    let versions = versions(t.versions.as_ref(), what, &mut problems);

    let acme = t
        .acme
        .as_ref()
        .and_then(|a| acme_spec(a, base, what, &mut problems));
    let store = match (&t.certificates, &t.acme) {
        (Some(list), _) => match load_certs(list, base, what, &provider) {
            Ok(s) => Some(s),
            Err(mut p) => {
                problems.append(&mut p);
                None
            }
        },
        (None, Some(_)) => Some(CertStore::empty()),
        (None, None) => {
            problems.push((
                span.clone(),
                format!("{what}: no certificate: give certificates = [{{ cert = \"cert.pem\", key = \"key.pem\" }}] or an [acme] table"),
            ));
            None
        }
    };

    let mut alpn = Vec::new();
    for a in t.alpn.iter().flatten() {
        match a.get_ref().as_str() {
            // In the order given: the server's preference.
            p @ ("http/1.1" | "h2") => {
                if alpn.iter().any(|x: &Vec<u8>| x == p.as_bytes()) {
                    problems.push((a.span(), format!("{what}: ALPN {p:?} is listed twice")));
                }
                alpn.push(p.as_bytes().to_vec())
            }
            other => problems.push((
                a.span(),
                format!("{what}: unknown ALPN protocol {other:?}; allowed: \"h2\", \"http/1.1\""),
            )),
        }
    }
    if t.alpn.is_none() {
        alpn.push(b"http/1.1".to_vec());
    }

    // What client certificates must chain to and whether they are asked
    // for; 0 without client certificates. Sessions resumed after a change
    // would skip the new rule (a resumed session keeps the certificate of
    // its first handshake, or the lack of one).
    let mut client_auth: u64 = 0;
    let verifier = match (&t.client_ca, &t.client_auth) {
        (None, None) => None,
        (None, Some(a)) => {
            problems.push((
                a.span(),
                format!("{what}: client_auth needs client_ca (the CA bundle client certificates must chain to)"),
            ));
            None
        }
        (Some(ca), auth) => match read_certs(base, ca, &format!("{what} client_ca")) {
            Err(p) => {
                problems.push(p);
                None
            }
            Ok(cas) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                for c in &cas {
                    std::hash::Hash::hash(c.as_ref(), &mut h);
                }
                std::hash::Hash::hash(&auth.as_ref().map(|a| format!("{:?}", a.get_ref())), &mut h);
                client_auth = std::hash::Hasher::finish(&h) | 1;
                let mut roots = RootCertStore::empty();
                for c in cas {
                    if let Err(e) = roots.add(c) {
                        problems.push((
                            ca.span(),
                            format!("{what}: client_ca {:?}: a certificate is not usable as a trust anchor: {e}", ca.get_ref()),
                        ));
                    }
                }
                let mut b =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
                if auth.as_ref().map(|a| *a.get_ref()) == Some(ClientAuth::Optional) {
                    b = b.allow_unauthenticated();
                }
                match b.build() {
                    Ok(v) => Some(v),
                    Err(e) => {
                        problems.push((ca.span(), format!("{what}: client_ca: {e}")));
                        None
                    }
                }
            }
        },
    };
    // A field named in the config is always stripped from clients' requests,
    // with or without `client_ca`: a member told to trust it must never see
    // a client's own (without client certificates nothing is sent in it).
    let client_subject_header = match (&t.client_subject_header, &verifier) {
        (Some(h), _) => Some(h.get_ref().to_ascii_lowercase()),
        (None, Some(_)) => Some("x-client-cert-subject".to_string()),
        (None, None) => None,
    };
    if let Some(h) = &t.client_subject_header {
        if !crate::config::is_token(h.get_ref()) {
            problems.push((
                h.span(),
                format!(
                    "{what}: client_subject_header {:?} is not a valid field name",
                    h.get_ref()
                ),
            ));
        }
    }

    let hsts = t.hsts.as_ref().map(|h| {
        let mut v = format!("max-age={}", h.max_age);
        if h.include_subdomains {
            v.push_str("; includeSubDomains");
        }
        if h.preload {
            v.push_str("; preload");
        }
        v
    });

    let Some(store) = store else {
        return Err(problems);
    };
    if !problems.is_empty() {
        return Err(problems);
    }

    let builder = match ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
    {
        Ok(b) => b,
        Err(e) => {
            let at = t
                .versions
                .as_ref()
                .map(|v| v.span())
                .or_else(|| t.ciphers.as_ref().map(|c| c.span()))
                .unwrap_or(span);
            return Err(vec![(
                at,
                format!("{what}: the versions, ciphers and groups do not fit together ({e}): each version needs at least one of its cipher suites"),
            )]);
        }
    };
    let builder = match verifier.clone() {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let store = Arc::new(store);
    let on_demand = acme.as_ref().and_then(|spec| {
        let rule = spec.on_demand.as_ref()?;
        let owner = what
            .split('"')
            .nth(1)
            .unwrap_or(what.trim_end_matches(" tls"));
        Some(crate::acme::on_demand::get(spec, rule, owner))
    });
    let resolver = Arc::new(Resolver {
        on_demand,
        store: store.clone(),
        acme: acme
            .iter()
            .map(|spec| {
                // `vserver "NAME" tls` (or "admin tls"): the name.
                let owner = what
                    .split('"')
                    .nth(1)
                    .unwrap_or(what.trim_end_matches(" tls"));
                crate::acme::managed(spec.clone(), owner)
            })
            .collect(),
    });
    // QUIC's TLS (`[vserver.http3]`): the same certificates, SNI and client
    // certificate rule, TLS 1.3 only (RFC 9001 4.2), ALPN "h3".
    let mut quic = versions
        .iter()
        .any(|v| v.version == rustls::ProtocolVersion::TLSv1_3)
        .then(|| {
            let b = ServerConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .ok()?;
            let b = match verifier {
                Some(v) => b.with_client_cert_verifier(v),
                None => b.with_no_client_auth(),
            };
            let mut q = b.with_cert_resolver(resolver.clone());
            q.alpn_protocols = vec![b"h3".to_vec()];
            q.ignore_client_order = true;
            // No 0-RTT (replayable) until it is asked for, per method.
            q.max_early_data_size = 0;
            Some(q)
        })
        .flatten();
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = alpn;
    // Last, so no ordinary client is ever offered it: only the CA's
    // validation handshake, which offers nothing else, gets it.
    if acme
        .as_ref()
        .is_some_and(|a| a.challenge == crate::acme::Challenge::TlsAlpn01)
    {
        config
            .alpn_protocols
            .push(crate::acme::challenge::ACME_TLS_ALPN.to_vec());
    }
    // The operator's order of suites and groups wins over the client's.
    config.ignore_client_order = true;
    // Keys and the session cache carry over a reload, so clients keep
    // resuming, unless what client certificates must satisfy changed.
    let old = old.filter(|o| o.client_auth == client_auth);
    let (tickets, sessions) = if t.resumption.unwrap_or(true) {
        let tickets = match old.and_then(|o| o.tickets.clone()) {
            Some(t) => t,
            None => match aws_lc_rs::Ticketer::new() {
                Ok(t) => t,
                Err(e) => {
                    return Err(vec![(
                        span,
                        format!("{what}: cannot make session ticket keys: {e}"),
                    )])
                }
            },
        };
        let sessions = old.and_then(|o| o.sessions.clone()).unwrap_or_else(
            || -> Arc<dyn StoresServerSessions> { Arc::new(SessionCache::new(SESSION_CACHE)) },
        );
        config.ticketer = tickets.clone();
        config.session_storage = sessions.clone();
        if let Some(q) = &mut quic {
            q.ticketer = tickets.clone();
            q.session_storage = sessions.clone();
        }
        (Some(tickets), Some(sessions))
    } else {
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        if let Some(q) = &mut quic {
            q.session_storage = Arc::new(NoServerSessionStorage {});
            q.send_tls13_tickets = 0;
        }
        (None, None)
    };
    Ok(TlsServer {
        quic: quic.map(Arc::new),
        certs: store,
        config: Arc::new(config),
        hsts,
        client_subject_header,
        client_auth,
        tickets,
        sessions,
    })
}

/// `[vserver.tls.acme]` checked and resolved; None after a problem.
fn acme_spec(
    a: &Spanned<model::Acme>,
    base: &Path,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<crate::acme::Spec> {
    use crate::acme::{Challenge, KeyType, Spec};
    let what = format!("{what} acme");
    let before = problems.len();
    let a = a.get_ref();
    let challenge = match a
        .challenge
        .as_ref()
        .map(|c| (c.get_ref().as_str(), c.span()))
    {
        None | Some(("http-01", _)) => Challenge::Http01,
        Some(("tls-alpn-01", _)) => Challenge::TlsAlpn01,
        Some(("dns-01", _)) => Challenge::Dns01,
        Some((other, span)) => {
            problems.push((span, format!("{what}: unknown challenge {other:?}; allowed: \"http-01\", \"tls-alpn-01\", \"dns-01\"")));
            Challenge::Http01
        }
    };
    let mut names = Vec::new();
    for n in a.names.get_ref() {
        let name = n.get_ref().to_ascii_lowercase();
        let why = if let Some(base) = name.strip_prefix("*.") {
            if challenge != Challenge::Dns01 {
                Some(
                    "a wildcard needs the DNS-01 challenge (challenge = \"dns-01\" and a dns_hook)",
                )
            } else if !valid_dns_name(base) {
                Some("not a valid wildcard name (\"*.\" and a DNS name)")
            } else {
                None
            }
        } else if name.parse::<std::net::IpAddr>().is_ok() {
            Some("an IP address is not a DNS name")
        } else if !valid_dns_name(&name) {
            Some("not a valid DNS name")
        } else {
            None
        };
        match why {
            Some(why) => {
                problems.push((n.span(), format!("{what}: name {:?}: {why}", n.get_ref())))
            }
            None if names.contains(&name) => problems.push((
                n.span(),
                format!("{what}: name {:?} is listed twice", n.get_ref()),
            )),
            None => names.push(name),
        }
    }
    if a.names.get_ref().is_empty() {
        problems.push((
            a.names.span(),
            format!("{what}: names is empty; give the DNS names the certificate covers"),
        ));
    }
    let dir = a.directory.get_ref();
    if !dir.starts_with("https://") || dir.len() <= "https://".len() {
        problems.push((
            a.directory.span(),
            format!("{what}: directory {dir:?} is not an https:// URL (Let's Encrypt: \"https://acme-v02.api.letsencrypt.org/directory\")"),
        ));
    }
    let mut contact = Vec::new();
    for c in a.contact.iter().flatten() {
        if !c.get_ref().starts_with("mailto:") || c.get_ref().len() <= "mailto:".len() {
            problems.push((
                c.span(),
                format!("{what}: contact {:?} is not a mailto: URL", c.get_ref()),
            ));
        }
        contact.push(c.get_ref().clone());
    }
    let dns = dns_spec(a, base, &what, challenge, problems);
    let key_type = match a
        .key_type
        .as_ref()
        .map(|c| (c.get_ref().as_str(), c.span()))
    {
        None | Some(("ecdsa-p256", _)) => KeyType::EcdsaP256,
        Some(("rsa-2048", _)) => KeyType::Rsa2048,
        Some((other, span)) => {
            problems.push((
                span,
                format!(
                    "{what}: unknown key_type {other:?}; allowed: \"ecdsa-p256\", \"rsa-2048\""
                ),
            ));
            KeyType::EcdsaP256
        }
    };
    let state_dir = resolve(base, a.state_dir.get_ref());
    if a.state_dir.get_ref().is_empty() {
        problems.push((a.state_dir.span(), format!("{what}: state_dir is empty")));
    } else if state_dir.exists() && !state_dir.is_dir() {
        problems.push((
            a.state_dir.span(),
            format!(
                "{what}: state_dir {} is not a directory",
                state_dir.display()
            ),
        ));
    }
    let ca_roots = a.ca_roots.as_ref().map(|r| {
        if let Err(p) = read_certs(base, r, &format!("{what} ca_roots")) {
            problems.push(p);
        }
        resolve(base, r.get_ref())
    });
    let on_demand = a
        .on_demand
        .as_ref()
        .and_then(|o| on_demand_rule(o, &what, problems));
    let eab = eab(a, base, &what, problems);
    (problems.len() == before).then_some(Spec {
        names,
        directory: dir.clone(),
        contact,
        challenge,
        key_type,
        state_dir,
        ca_roots,
        dns,
        profile: a.profile.as_ref().map(|p| p.get_ref().clone()),
        on_demand,
        renewal_check: a.renewal_check.map(|m| m.duration()),
        eab,
    })
}

/// External account binding: `eab_kid` with `eab_hmac_key` or
/// `eab_hmac_key_file`, both or neither (an account created without the
/// binding would only fail at the CA, at the first order).
fn eab(
    a: &model::Acme,
    base: &Path,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<crate::acme::Eab> {
    let key = match (&a.eab_hmac_key, &a.eab_hmac_key_file) {
        (Some(k), Some(f)) => {
            problems.push((
                f.span(),
                format!("{what}: eab_hmac_key and eab_hmac_key_file are both given; give one"),
            ));
            Some((k.get_ref().clone(), k.span(), "eab_hmac_key".to_string()))
        }
        (Some(k), None) => Some((k.get_ref().clone(), k.span(), "eab_hmac_key".to_string())),
        (None, Some(f)) => {
            let path = resolve(base, f.get_ref());
            match std::fs::read_to_string(&path) {
                Ok(text) => Some((
                    text.trim().to_string(),
                    f.span(),
                    format!("eab_hmac_key_file {}", path.display()),
                )),
                Err(e) => {
                    problems.push((
                        f.span(),
                        format!("{what}: eab_hmac_key_file {}: {e}", path.display()),
                    ));
                    None
                }
            }
        }
        (None, None) => None,
    };
    match (&a.eab_kid, key) {
        (None, None) => None,
        (Some(kid), None) => {
            if a.eab_hmac_key_file.is_none() {
                problems.push((
                    kid.span(),
                    format!("{what}: eab_kid needs its key: eab_hmac_key or eab_hmac_key_file (both or neither)"),
                ));
            }
            None
        }
        (None, Some((_, span, which))) => {
            problems.push((
                span,
                format!("{what}: {which} needs eab_kid, the key ID the CA gave with it (both or neither)"),
            ));
            None
        }
        (Some(kid), Some((text, span, which))) => {
            if kid.get_ref().trim().is_empty() {
                problems.push((kid.span(), format!("{what}: eab_kid is empty")));
                return None;
            }
            match crate::base64::decode(&text) {
                Some(k) if !k.is_empty() => Some(crate::acme::Eab {
                    kid: kid.get_ref().clone(),
                    hmac_key: k,
                }),
                _ => {
                    problems.push((
                        span,
                        format!("{what}: {which}: the HMAC key is empty or not base64url (as the CA gives it)"),
                    ));
                    None
                }
            }
        }
    }
}

/// `[vserver.tls.acme.on_demand]`: a list and/or an ask URL.
fn on_demand_rule(
    o: &Spanned<model::AcmeOnDemand>,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<crate::acme::on_demand::Rule> {
    let r = o.get_ref();
    let mut allow = Vec::new();
    for a in r.allow.iter().flatten() {
        let n = a.get_ref().to_ascii_lowercase();
        if !valid_dns_name(n.strip_prefix("*.").unwrap_or(&n)) {
            problems.push((
                a.span(),
                format!(
                    "{what}: on_demand allow {:?} is neither a DNS name nor \"*.\" and one",
                    a.get_ref()
                ),
            ));
        }
        allow.push(n);
    }
    if let Some(u) = &r.ask {
        let v = u.get_ref();
        let host = v
            .strip_prefix("http://")
            .map(|r| r.split('/').next().unwrap_or(""));
        if host.is_none_or(|h| h.is_empty()) {
            problems.push((
                u.span(),
                format!("{what}: on_demand ask {v:?} is not an http:// URL (a local service that answers 200 for the names to admit)"),
            ));
        }
    }
    if allow.is_empty() && r.ask.is_none() {
        problems.push((
            o.span(),
            format!("{what}: on_demand needs allow (names, \"*.domain\" patterns) or ask (a URL): without a rule any client could have certificates ordered for any name"),
        ));
    }
    let per_hour = r.per_hour.as_ref().map_or(10, |p| *p.get_ref());
    if per_hour == 0 {
        if let Some(p) = &r.per_hour {
            problems.push((p.span(), format!("{what}: on_demand per_hour is 0")));
        }
    }
    Some(crate::acme::on_demand::Rule {
        allow,
        ask: r.ask.as_ref().map(|u| u.get_ref().clone()),
        per_hour,
    })
}

/// The DNS-01 settings: required with `challenge = "dns-01"`, refused
/// without it.
fn dns_spec(
    a: &model::Acme,
    base: &Path,
    what: &str,
    challenge: crate::acme::Challenge,
    problems: &mut Vec<Problem>,
) -> Option<crate::acme::DnsSpec> {
    let dns01 = challenge == crate::acme::Challenge::Dns01;
    if !dns01 {
        if let Some(h) = &a.dns_hook {
            problems.push((
                h.span(),
                format!("{what}: dns_hook is only used with challenge = \"dns-01\""),
            ));
        }
        if let Some(r) = a.dns_resolvers.as_ref().and_then(|r| r.first()) {
            problems.push((
                r.span(),
                format!("{what}: dns_resolvers is only used with challenge = \"dns-01\""),
            ));
        }
        return None;
    }
    let mut resolvers = Vec::new();
    for r in a.dns_resolvers.iter().flatten() {
        let v = r.get_ref();
        let parsed = v
            .parse::<std::net::SocketAddr>()
            .or_else(|_| v.parse::<std::net::IpAddr>().map(|ip| (ip, 53).into()));
        match parsed {
            Ok(addr) => resolvers.push(addr),
            Err(_) => problems.push((
                r.span(),
                format!("{what}: dns_resolvers entry {v:?} is not an IP address (with an optional port)"),
            )),
        }
    }
    let Some(hook) = &a.dns_hook else {
        let span = a.challenge.as_ref().map(|c| c.span()).unwrap_or(0..0);
        problems.push((
            span,
            format!("{what}: challenge \"dns-01\" needs a dns_hook: the program that puts up the TXT record (docs/acme.md)"),
        ));
        return None;
    };
    let path = resolve(base, hook.get_ref());
    let runnable = std::fs::metadata(&path).is_ok_and(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    });
    if !runnable {
        problems.push((
            hook.span(),
            format!(
                "{what}: dns_hook {} is not an executable file",
                path.display()
            ),
        ));
    }
    Some(crate::acme::DnsSpec {
        hook: path,
        hook_timeout: a
            .dns_hook_timeout
            .map(|m| m.duration())
            .unwrap_or(std::time::Duration::from_secs(60)),
        resolvers,
        wait: a
            .dns_wait
            .map(|m| m.duration())
            .unwrap_or(std::time::Duration::from_secs(60)),
    })
}

/// LDH labels of 1 to 63 characters, at least two labels, 253 at most.
fn valid_dns_name(n: &str) -> bool {
    n.len() <= 253
        && n.contains('.')
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A vserver's certificates, each checked (readable, matching key, in its
/// validity period), indexed by the names they cover.
fn load_certs(
    list: &Spanned<Vec<model::Certificate>>,
    base: &Path,
    what: &str,
    provider: &CryptoProvider,
) -> Result<CertStore, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut store = CertStore::empty();
    if list.get_ref().is_empty() {
        problems.push((
            list.span(),
            format!("{what}: certificates is empty; give at least one {{ cert = \"cert.pem\", key = \"key.pem\" }}"),
        ));
    }
    for c in list.get_ref() {
        match load_one(c, base, what, provider) {
            Ok((ck, names)) => store.add(ck, names),
            Err(p) => problems.push(p),
        }
    }
    if problems.is_empty() {
        Ok(store)
    } else {
        Err(problems)
    }
}

fn load_one(
    c: &model::Certificate,
    base: &Path,
    what: &str,
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, Vec<String>), Problem> {
    let (chain, info) = read_leaf(base, &c.cert, what)?;
    let names = info.names();
    if names.is_empty() {
        return Err((
            c.cert.span(),
            format!(
                "{what}: certificate {:?} names no host (no DNS subject alternative name and no common name)",
                c.cert.get_ref()
            ),
        ));
    }
    let key = read_key(base, &c.key, what)?;
    let mut ck = certified_key(chain, key, &c.cert, &c.key, what, provider)?;
    if let Some(o) = &c.ocsp {
        let der = read(base, o, &format!("{what} ocsp"))?;
        // An OCSPResponse is a DER SEQUENCE; anything else (PEM, empty) is
        // a mistake the client would only report as a failed handshake.
        if der.first() != Some(&0x30) {
            return Err((
                o.span(),
                format!("{what}: {:?} is not a DER OCSP response", o.get_ref()),
            ));
        }
        ck.ocsp = Some(der);
    }
    Ok((ck, names))
}

/// A certificate chain from `cert`, its leaf parsed and not expired.
pub(super) fn read_leaf(
    base: &Path,
    cert: &Spanned<String>,
    what: &str,
) -> Result<(Vec<CertificateDer<'static>>, x509::CertInfo), Problem> {
    let chain = read_certs(base, cert, &format!("{what} cert"))?;
    let info = x509::parse(&chain[0]).map_err(|e| {
        (
            cert.span(),
            format!(
                "{what}: {:?} is not a usable X.509 certificate: {e}",
                cert.get_ref()
            ),
        )
    })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if info.not_after < now {
        return Err((
            cert.span(),
            format!(
                "{what}: certificate {:?} expired on {}",
                cert.get_ref(),
                format_time(info.not_after)
            ),
        ));
    }
    Ok((chain, info))
}

/// The PEM private key in `key`.
pub(super) fn read_key(
    base: &Path,
    key: &Spanned<String>,
    what: &str,
) -> Result<PrivateKeyDer<'static>, Problem> {
    let bytes = read(base, key, &format!("{what} key"))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        (
            key.span(),
            format!(
                "{what}: {:?} holds no PEM private key (expected a PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block): {e}",
                key.get_ref()
            ),
        )
    })
}

/// The chain and its private key, loaded and checked to belong together.
pub(super) fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    der: PrivateKeyDer<'static>,
    cert: &Spanned<String>,
    key: &Spanned<String>,
    what: &str,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Problem> {
    key_pair(chain, der, provider).map_err(|e| match e {
        PairError::Unusable(e) => (
            key.span(),
            format!("{what}: private key {:?} is not usable: {e}", key.get_ref()),
        ),
        PairError::Mismatch => (
            key.span(),
            format!(
                "{what}: private key {:?} does not match certificate {:?}",
                key.get_ref(),
                cert.get_ref()
            ),
        ),
        PairError::Certificate(e) => (
            cert.span(),
            format!("{what}: certificate {:?}: {e}", cert.get_ref()),
        ),
    })
}

/// Why a chain and a key are not a usable pair.
pub(super) enum PairError {
    Unusable(TlsError),
    Mismatch,
    Certificate(TlsError),
}

/// The chain and its key as one signing identity, checked to belong
/// together (a key of a kind that cannot say passes, as rustls lets it).
pub(super) fn key_pair(
    chain: Vec<CertificateDer<'static>>,
    der: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, PairError> {
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(PairError::Unusable)?;
    let ck = CertifiedKey::new(chain, signing);
    match ck.keys_match() {
        Ok(()) | Err(TlsError::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(ck),
        Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(PairError::Mismatch),
        Err(e) => Err(PairError::Certificate(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(suite_name_matches(
            "TLS_AES_256_GCM_SHA384",
            "TLS13_AES_256_GCM_SHA384"
        ));
        assert!(suite_name_matches(
            "tls13_aes_256_gcm_sha384",
            "TLS13_AES_256_GCM_SHA384"
        ));
        assert!(!suite_name_matches(
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS13_AES_256_GCM_SHA384"
        ));
        assert!(group_name_matches("x25519", "X25519"));
        assert!(group_name_matches("P-256", "secp256r1"));
        assert!(group_name_matches("X25519MLKEM768", "X25519MLKEM768"));
    }
}
