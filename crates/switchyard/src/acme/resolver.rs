//! The certificate resolver of a TLS vserver that has managed
//! certificates.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// What a vserver's TLS listener asks for each handshake: a TLS-ALPN-01
/// validation certificate when the client offers only `acme-tls/1` (the
/// CA checking a name, RFC 8737), else the ACME-managed certificate
/// covering the SNI, else the configured files (`CertStore`), else the
/// first managed certificate. A managed certificate is read from its
/// `ArcSwapOption` each time, so a renewal reaches the next handshake
/// without a reload.
#[derive(Debug)]
pub struct Resolver {
    pub store: Arc<crate::tls::CertStore>,
    pub acme: Vec<Arc<super::Managed>>,
    /// Certificates ordered for names nothing else covers, when the
    /// operator's rule admits them.
    pub on_demand: Option<Arc<super::on_demand::OnDemand>>,
}

impl std::fmt::Debug for super::Managed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Managed({:?})", self.spec.names)
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        use super::challenge::{alpn01, ACME_TLS_ALPN};
        let acme_alpn = hello
            .alpn()
            .is_some_and(|mut a| a.any(|p| p == ACME_TLS_ALPN));
        if acme_alpn {
            // Only the validation certificate answers acme-tls/1, never a
            // served one (RFC 8737 section 3).
            return hello.server_name().and_then(alpn01);
        }
        if self.acme.is_empty() {
            return self.store.resolve(hello);
        }
        if let Some(sni) = hello.server_name() {
            if let Some(m) = self.acme.iter().find(|m| m.covers(sni)) {
                return m.current.load_full();
            }
            if let Some(od) = self.on_demand.as_ref().filter(|_| !self.store.covers(sni)) {
                if let Some(ck) = od.resolve(sni) {
                    return Some(ck);
                }
            }
        }
        if !self.store.all().is_empty() {
            return self.store.resolve(hello);
        }
        self.acme.iter().find_map(|m| m.current.load_full())
    }
}
