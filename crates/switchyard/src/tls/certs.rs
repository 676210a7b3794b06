//! A vserver's certificates and the choice among them for each handshake:
//! by SNI (exact name, then wildcard), then by the signature schemes the
//! client offers (so RSA and ECDSA certificates for the same names can sit
//! on one listener), falling back to the first usable certificate in the
//! configured order (the first one is the default).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{Error as TlsError, InconsistentKeys, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use toml::Spanned;

use super::{format_time, read, read_certs, x509, Problem};
use crate::config::model;

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
    pub fn load(
        list: &Spanned<Vec<model::Certificate>>,
        base: &Path,
        what: &str,
        provider: &CryptoProvider,
    ) -> Result<CertStore, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut store = CertStore {
            certs: Vec::new(),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        };
        if list.get_ref().is_empty() {
            problems.push((
                list.span(),
                format!("{what}: certificates is empty; give at least one {{ cert = \"cert.pem\", key = \"key.pem\" }}"),
            ));
        }
        for c in list.get_ref() {
            match load_one(c, base, what, provider) {
                Ok((ck, names)) => {
                    let i = store.certs.len();
                    store.certs.push(Arc::new(ck));
                    for n in names {
                        let (map, key) = match n.strip_prefix("*.") {
                            Some(rest) => (&mut store.wildcard, rest.to_string()),
                            None => (&mut store.exact, n),
                        };
                        let v = map.entry(key).or_default();
                        if !v.contains(&i) {
                            v.push(i);
                        }
                    }
                }
                Err(p) => problems.push(p),
            }
        }
        if problems.is_empty() {
            Ok(store)
        } else {
            Err(problems)
        }
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

    fn usable(&self, i: usize, schemes: &[SignatureScheme]) -> bool {
        self.certs[i].key.choose_scheme(schemes).is_some()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let schemes = hello.signature_schemes();
        if let Some(sni) = hello.server_name() {
            if let Some(i) = self
                .candidates(sni)
                .iter()
                .find(|i| self.usable(**i, schemes))
            {
                return Some(self.certs[*i].clone());
            }
        }
        (0..self.certs.len())
            .find(|i| self.usable(*i, schemes))
            .map(|i| self.certs[i].clone())
    }
}

fn load_one(
    c: &model::Certificate,
    base: &Path,
    what: &str,
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, Vec<String>), Problem> {
    let chain = read_certs(base, &c.cert, &format!("{what} cert"))?;
    let info = x509::parse(&chain[0]).map_err(|e| {
        (
            c.cert.span(),
            format!(
                "{what}: {:?} is not a usable X.509 certificate: {e}",
                c.cert.get_ref()
            ),
        )
    })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if info.not_after < now {
        return Err((
            c.cert.span(),
            format!(
                "{what}: certificate {:?} expired on {}",
                c.cert.get_ref(),
                format_time(info.not_after)
            ),
        ));
    }
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
    let key_bytes = read(base, &c.key, &format!("{what} key"))?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
        (
            c.key.span(),
            format!(
                "{what}: {:?} holds no PEM private key (expected a PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block): {e}",
                c.key.get_ref()
            ),
        )
    })?;
    let signing = provider.key_provider.load_private_key(key).map_err(|e| {
        (
            c.key.span(),
            format!(
                "{what}: private key {:?} is not usable: {e}",
                c.key.get_ref()
            ),
        )
    })?;
    let mut ck = CertifiedKey::new(chain, signing);
    match ck.keys_match() {
        Ok(()) | Err(TlsError::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err((
                c.key.span(),
                format!(
                    "{what}: private key {:?} does not match certificate {:?}",
                    c.key.get_ref(),
                    c.cert.get_ref()
                ),
            ))
        }
        Err(e) => {
            return Err((
                c.cert.span(),
                format!("{what}: certificate {:?}: {e}", c.cert.get_ref()),
            ))
        }
    }
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
