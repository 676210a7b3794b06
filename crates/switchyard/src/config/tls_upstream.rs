//! `[pool.tls]` from the file model to the runtime TLS side
//! (`tls::UpstreamTls`): trust anchors, the client certificate for mutual
//! TLS, versions, and a fingerprint of every input so an unchanged pool
//! keeps its built config (and its session cache) across a reload.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use rustls::client::{ClientSessionMemoryCache, Resumption};
use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

use super::model;
use super::tls_server::{
    certified_key, key_pair, pem_certs, read_certs, read_key, read_leaf, versions, PairError,
};
use super::types::Problem;
use crate::tls::upstream::{AcceptAnyCertificate, SanVerifier, UpstreamTls};

/// Used when a pool verifies members and names no `ca`.
pub const SYSTEM_CA: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Sessions remembered for resumption per pool (per server name rustls
/// keeps a few TLS 1.3 tickets; one entry is a few hundred bytes).
const SESSION_CACHE: usize = 1024;

/// What `build` makes: the TLS side, and warnings to show at load.
pub struct Built {
    pub tls: Arc<UpstreamTls>,
    pub warnings: Vec<Problem>,
}

/// One fingerprint input: what it is, then its bytes.
fn tagged(tag: &[u8], bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(tag.len() + bytes.len());
    v.extend_from_slice(tag);
    v.extend_from_slice(bytes);
    v
}

/// SHA-256 over length-prefixed parts (the provider's own hash).
fn fingerprint(parts: &[&[u8]]) -> Vec<u8> {
    let Some(suite) = aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13() else {
        return Vec::new();
    };
    let mut h = suite.common.hash_provider.start();
    for p in parts {
        h.update(&(p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finish().as_ref().to_vec()
}

/// `san_dns` and `san_uri`: the names the member's certificate may carry
/// instead of `sni` (None: the usual name check). DNS names must be
/// names; URIs need a scheme ("spiffe://..."); neither with verify = false.
fn subject_alt_names(
    t: &model::PoolTls,
    verify: bool,
    what: &str,
    problems: &mut Vec<Problem>,
    inputs: &mut Vec<Vec<u8>>,
) -> Option<(Vec<ServerName<'static>>, Vec<String>)> {
    if t.san_dns.is_none() && t.san_uri.is_none() {
        return None;
    }
    let at = t
        .san_dns
        .as_ref()
        .or(t.san_uri.as_ref())
        .map(|s| s.span())
        .unwrap_or_default();
    if !verify {
        problems.push((
            at,
            format!("{what}: san_dns and san_uri have no effect with verify = false"),
        ));
        return None;
    }
    let mut dns = Vec::new();
    for n in t
        .san_dns
        .as_ref()
        .map(|s| s.get_ref().as_slice())
        .unwrap_or_default()
    {
        match ServerName::try_from(n.as_str()) {
            Ok(name @ ServerName::DnsName(_)) => {
                inputs.push(tagged(b"san-dns:", n.as_bytes()));
                dns.push(name.to_owned());
            }
            _ => problems.push((
                at.clone(),
                format!("{what}: san_dns {n:?} is not a DNS name"),
            )),
        }
    }
    let uris: Vec<String> = t
        .san_uri
        .as_ref()
        .map(|s| s.get_ref().clone())
        .unwrap_or_default();
    for u in &uris {
        let scheme_ok = u.split_once("://").is_some_and(|(scheme, rest)| {
            !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
                && !rest.is_empty()
        });
        if !scheme_ok || u.bytes().any(|b| b <= b' ' || b == 0x7f) {
            problems.push((
                at.clone(),
                format!("{what}: san_uri {u:?} is not a URI (\"scheme://...\")"),
            ));
        }
        inputs.push(tagged(b"san-uri:", u.as_bytes()));
    }
    if dns.is_empty() && uris.is_empty() {
        problems.push((at, format!("{what}: san_dns and san_uri are empty")));
        return None;
    }
    Some((dns, uris))
}

/// Whether `cert` (PEM chain) and `key` (PEM private key) are a client
/// certificate a pool's `cert` and `key` may name: parsed, usable and
/// matching, as `build` requires of the files. The Gateway controller
/// checks an Ingress's `proxy-ssl-secret` with it before it publishes it.
pub fn check_cert_and_key(cert: &[u8], key: &[u8]) -> Result<(), String> {
    let chain = pem_certs(cert).map_err(|e| format!("the certificate {e}"))?;
    let der = rustls_pki_types::PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("no PEM private key: {e}"))?;
    match key_pair(chain, der, &aws_lc_rs::default_provider()) {
        Ok(_) => Ok(()),
        Err(PairError::Unusable(e)) => Err(format!("the private key is not usable: {e}")),
        Err(PairError::Mismatch) => Err("the private key does not match the certificate".into()),
        Err(PairError::Certificate(e)) => Err(format!("the certificate: {e}")),
    }
}

/// Whether `pem` is a CA bundle a pool's `ca` may name: PEM certificates,
/// at least one, each usable as a trust anchor (what `build` requires of
/// the file). Err says why not. The Gateway controller checks a
/// BackendTLSPolicy's CA certificates with it before it publishes them,
/// so a bad one refuses that policy, never the nodes' whole configuration.
pub fn check_ca_bundle(pem: &[u8]) -> Result<usize, String> {
    let certs = pem_certs(pem).map_err(|e| format!("the bundle {e}"))?;
    let n = certs.len();
    trust_anchors(certs)?;
    Ok(n)
}

/// Every certificate of a `ca` as a trust anchor; Err names the problem.
fn trust_anchors(certs: Vec<CertificateDer<'static>>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| format!("a certificate is not usable as a trust anchor: {e}"))?;
    }
    Ok(roots)
}

/// The trust anchors: the pool's `ca` file (every certificate must be
/// usable), or the system bundle (the ones webpki can use).
fn roots(
    t: &model::PoolTls,
    base: &Path,
    what: &str,
    span: &Range<usize>,
    inputs: &mut Vec<Vec<u8>>,
) -> Result<RootCertStore, Problem> {
    let mut roots = RootCertStore::empty();
    match &t.ca {
        Some(ca) => {
            let certs = read_certs(base, ca, &format!("{what} ca"))?;
            inputs.extend(certs.iter().map(|c| tagged(b"ca:", c)));
            roots = trust_anchors(certs)
                .map_err(|e| (ca.span(), format!("{what}: ca {:?}: {e}", ca.get_ref())))?;
        }
        None => {
            let bytes = std::fs::read(SYSTEM_CA).map_err(|e| {
                (
                    span.clone(),
                    format!("{what}: cannot read the system CA bundle {SYSTEM_CA}: {e}; give ca = \"FILE\" (PEM), or install the bundle (ca-certificates)"),
                )
            })?;
            inputs.push(tagged(b"system-ca:", &bytes));
            let certs = CertificateDer::pem_slice_iter(&bytes).filter_map(|c| c.ok());
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err((
                    span.clone(),
                    format!("{what}: the system CA bundle {SYSTEM_CA} holds no usable certificate; give ca = \"FILE\" (PEM)"),
                ));
            }
        }
    }
    Ok(roots)
}

/// The client certificate and key for mutual TLS.
fn client_cert(
    cert: &toml::Spanned<String>,
    key: &toml::Spanned<String>,
    base: &Path,
    what: &str,
    provider: &CryptoProvider,
    inputs: &mut Vec<Vec<u8>>,
) -> Result<CertifiedKey, Problem> {
    let (chain, _) = read_leaf(base, cert, what)?;
    let der = read_key(base, key, what)?;
    inputs.extend(chain.iter().map(|c| tagged(b"cert:", c)));
    inputs.push(tagged(b"key:", der.secret_der()));
    certified_key(chain, der, cert, key, what, provider)
}

/// Builds a pool's TLS side. `what` names the pool ("pool \"app\""),
/// `span` locates errors that belong to the table rather than one value;
/// `old` is the same pool's TLS side in the previous snapshot.
pub fn build(
    t: &model::PoolTls,
    base: &Path,
    what: &str,
    span: Range<usize>,
    old: Option<&Arc<UpstreamTls>>,
) -> Result<Built, Vec<Problem>> {
    let what = format!("{what} tls");
    let what = what.as_str();
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    // Everything the config is made from, for the fingerprint.
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    let provider = Arc::new(aws_lc_rs::default_provider());

    let verify = t.verify.as_ref().map(|v| *v.get_ref()).unwrap_or(true);
    inputs.push(tagged(b"verify:", &[u8::from(verify)]));

    let versions = versions(t.versions.as_ref(), what, &mut problems);
    for v in &versions {
        inputs.push(tagged(b"version:", format!("{:?}", v.version).as_bytes()));
    }

    let sni = match &t.sni {
        None => None,
        Some(s) => match ServerName::try_from(s.get_ref().as_str()) {
            Ok(n) => {
                inputs.push(tagged(b"sni:", s.get_ref().as_bytes()));
                Some(n.to_owned())
            }
            Err(_) => {
                problems.push((
                    s.span(),
                    format!(
                        "{what}: sni {:?} is not a valid DNS name (or IP address)",
                        s.get_ref()
                    ),
                ));
                None
            }
        },
    };
    let sans = subject_alt_names(t, verify, what, &mut problems, &mut inputs);
    let roots = match (verify, &t.ca) {
        (true, _) => match roots(t, base, what, &span, &mut inputs) {
            Ok(r) => Some(r),
            Err(p) => {
                problems.push(p);
                None
            }
        },
        (false, Some(ca)) => {
            problems.push((
                ca.span(),
                format!("{what}: ca has no effect with verify = false; remove one of them"),
            ));
            None
        }
        (false, None) => {
            let at = t.verify.as_ref().map(|v| v.span()).unwrap_or(span.clone());
            warnings.push((
                at,
                format!("{what}: verify = false: members' certificates are not checked (the connection is encrypted, but any server can pose as a member)"),
            ));
            None
        }
    };

    let client = match (&t.cert, &t.key) {
        (None, None) => None,
        (Some(c), None) => {
            problems.push((
                c.span(),
                format!("{what}: cert needs key (the client certificate's private key)"),
            ));
            None
        }
        (None, Some(k)) => {
            problems.push((
                k.span(),
                format!("{what}: key needs cert (the client certificate it belongs to)"),
            ));
            None
        }
        (Some(c), Some(k)) => match client_cert(c, k, base, what, &provider, &mut inputs) {
            Ok(ck) => Some(ck),
            Err(p) => {
                problems.push(p);
                None
            }
        },
    };

    if !problems.is_empty() {
        return Err(problems);
    }
    let parts: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let fingerprint = fingerprint(&parts);
    if let Some(old) = old {
        if !fingerprint.is_empty() && old.fingerprint == fingerprint {
            return Ok(Built {
                tls: old.clone(),
                warnings,
            });
        }
    }

    let builder = match ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
    {
        Ok(b) => b,
        Err(e) => {
            let at = t.versions.as_ref().map(|v| v.span()).unwrap_or(span);
            return Err(vec![(at, format!("{what}: versions: {e}"))]);
        }
    };
    let builder = match (roots, sans) {
        (Some(r), Some((dns, uris))) => {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SanVerifier {
                    roots: Arc::new(r),
                    any: AcceptAnyCertificate(provider.clone()),
                    dns,
                    uris,
                }))
        }
        (Some(r), None) => builder.with_root_certificates(r),
        (None, _) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider.clone()))),
    };
    let mut config = match client {
        Some(ck) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(ck))),
        None => builder.with_no_client_auth(),
    };
    // We speak HTTP/1.1 to members.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = Resumption::store(Arc::new(ClientSessionMemoryCache::new(SESSION_CACHE)));
    let mut config_h2 = config.clone();
    config_h2.alpn_protocols = vec![b"h2".to_vec()];
    // A tcp vserver's relay does not know the protocol inside: no ALPN.
    let mut config_l4 = config.clone();
    config_l4.alpn_protocols = Vec::new();
    Ok(Built {
        tls: Arc::new(UpstreamTls {
            config: Arc::new(config),
            config_h2: Arc::new(config_h2),
            config_l4: Arc::new(config_l4),
            sni,
            verify,
            fingerprint,
        }),
        warnings,
    })
}
