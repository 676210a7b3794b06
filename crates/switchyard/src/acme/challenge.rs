//! The challenge answers waiting for the CA, process-wide: HTTP-01 tokens
//! (answered by `proxy::stages::AcmeChallenge` on every plain-HTTP
//! vserver, before policies) and TLS-ALPN-01 validation certificates
//! (answered by `tls::Resolver` when a ClientHello offers only
//! `acme-tls/1`). Read only when a request or handshake asks for one, so
//! the lock costs nothing on ordinary traffic.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::sign::CertifiedKey;
use rustls_pki_types::PrivateKeyDer;

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 section 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// Where HTTP-01 answers live (RFC 8555 section 8.3).
pub const HTTP01_PREFIX: &[u8] = b"/.well-known/acme-challenge/";

static HTTP01: RwLock<Option<HashMap<String, String>>> = RwLock::new(None);
static ALPN01: RwLock<Option<HashMap<String, Arc<CertifiedKey>>>> = RwLock::new(None);

pub fn http01(token: &str) -> Option<String> {
    HTTP01.read().ok()?.as_ref()?.get(token).cloned()
}

pub fn set_http01(token: &str, key_authorization: Option<&str>) {
    let mut g = HTTP01.write().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    match key_authorization {
        Some(k) => map.insert(token.to_string(), k.to_string()),
        None => map.remove(token),
    };
}

pub fn alpn01(name: &str) -> Option<Arc<CertifiedKey>> {
    let lower = name.to_ascii_lowercase();
    ALPN01.read().ok()?.as_ref()?.get(&lower).cloned()
}

pub fn set_alpn01(name: &str, cert: Option<Arc<CertifiedKey>>) {
    let mut g = ALPN01.write().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    match cert {
        Some(c) => map.insert(name.to_ascii_lowercase(), c),
        None => map.remove(&name.to_ascii_lowercase()),
    };
}

/// The TLS-ALPN-01 validation certificate for `name` (RFC 8737 3): self-
/// signed, the name as its only SAN, the key authorization's SHA-256 in
/// the critical acmeIdentifier extension.
pub fn alpn_cert(name: &str, digest: &[u8]) -> Result<CertifiedKey, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    // Not `CertifiedKey::from_der`: its key check parses the certificate
    // with webpki, which refuses the critical acmeIdentifier extension.
    let der = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| e.to_string())?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}
