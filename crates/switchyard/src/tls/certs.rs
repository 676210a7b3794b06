//! A vserver's certificates and the choice among them for each handshake:
//! by SNI (exact name, then wildcard), then by the signature schemes the
//! client offers (so RSA and ECDSA certificates for the same names can sit
//! on one listener), falling back to the first usable certificate in the
//! configured order (the first one is the default).

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

#[derive(Debug)]
pub struct CertStore {
    /// In configuration order.
    certs: Vec<Arc<CertifiedKey>>,
    /// Lower-case DNS name -> indexes into `certs`, in order.
    exact: HashMap<String, Vec<usize>>,
    /// "example.com" for "*.example.com" -> indexes.
    wildcard: HashMap<String, Vec<usize>>,
}

impl CertStore {
    /// A store with no certificate yet (the configuration adds them).
    pub(crate) fn empty() -> CertStore {
        CertStore {
            certs: Vec::new(),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }

    /// Adds a certificate for `names` (exact, or "*.parent" wildcards).
    pub(crate) fn add(&mut self, ck: CertifiedKey, names: Vec<String>) {
        let i = self.certs.len();
        self.certs.push(Arc::new(ck));
        for n in names {
            let (map, key) = match n.strip_prefix("*.") {
                Some(rest) => (&mut self.wildcard, rest.to_string()),
                None => (&mut self.exact, n),
            };
            let v = map.entry(key).or_default();
            if !v.contains(&i) {
                v.push(i);
            }
        }
    }

    /// Every certificate, in configuration order (the first is the default).
    pub fn all(&self) -> &[Arc<CertifiedKey>] {
        &self.certs
    }

    /// Whether a certificate names `sni` (exactly or by a wildcard).
    pub fn covers(&self, sni: &str) -> bool {
        !self.candidates(sni).is_empty()
    }

    fn candidates(&self, sni: &str) -> &[usize] {
        let lower;
        let name = if sni.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = sni.to_ascii_lowercase();
            lower.as_str()
        } else {
            sni
        };
        if let Some(v) = self.exact.get(name) {
            return v;
        }
        // A wildcard covers exactly one label (RFC 6125 6.4.3).
        if let Some((_, parent)) = name.split_once('.') {
            if let Some(v) = self.wildcard.get(parent) {
                return v;
            }
        }
        &[]
    }

    /// The certificate served to a client that named `name`, by the
    /// signature schemes it offers; None when no certificate names it.
    pub fn for_name(&self, name: &str, schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.candidates(name)
            .iter()
            .find(|i| self.usable(**i, schemes))
            .map(|i| self.certs[*i].clone())
    }

    fn usable(&self, i: usize, schemes: &[SignatureScheme]) -> bool {
        self.certs[i].key.choose_scheme(schemes).is_some()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let schemes = hello.signature_schemes();
        if let Some(ck) = hello.server_name().and_then(|n| self.for_name(n, schemes)) {
            return Some(ck);
        }
        (0..self.certs.len())
            .find(|i| self.usable(*i, schemes))
            .map(|i| self.certs[i].clone())
    }
}

/// The certificate a script chose for one handshake (`c:use_cert(name)`
/// in `on_client_hello`): the one the store serves for `name`, whatever
/// the client's SNI. A handshake's own resolver, in a copy of the
/// vserver's `ServerConfig` made for it.
#[derive(Debug)]
pub struct ForName {
    pub store: Arc<CertStore>,
    pub name: String,
}

impl ResolvesServerCert for ForName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.store.for_name(&self.name, hello.signature_schemes())
    }
}
