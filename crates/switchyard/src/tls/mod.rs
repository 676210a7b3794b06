//! TLS termination: rustls on its aws-lc-rs provider (one TLS stack).
//!
//! A virtual server's `[vserver.tls]` is turned into one
//! `rustls::ServerConfig` when a snapshot is built, on the control thread,
//! off the request path. Every worker shares it through the snapshot's
//! `Arc`; an accepted connection clones that `Arc` and keeps the config it
//! started its handshake with, so a reload with a new certificate applies to
//! new connections and leaves established ones alone.
//!
//! Session resumption state (the ticket keys and the TLS 1.2 session-ID
//! cache) lives in the config too and is handed from one snapshot to the
//! next by vserver name, so a reload does not invalidate the tickets clients
//! hold. The ticket keys come from rustls' `Ticketer`: a rotator that makes
//! a new key every 6 hours and accepts the previous one for 6 more.
//!
//! The other direction, TLS from Switchyard to a pool's members, lives in
//! `upstream`. Building these from the configuration file is config's job
//! (`config/tls_server.rs`, `config/tls_upstream.rs`): this module knows
//! nothing of the file model.
//!
//! ALPN is negotiated here; the session looks at the protocol chosen after
//! the handshake (`proxy::handshake`): "h2" hands the connection to the
//! HTTP/2 front end (`proxy::client_h2_conn`), anything else to the HTTP/1.1 session.

mod certs;
pub mod quic_suite;
pub mod session_cache;
pub mod upstream;
pub mod x509;

use std::sync::Arc;

use rustls::server::{ProducesTickets, StoresServerSessions};
use rustls::ServerConfig;

pub use certs::{CertStore, ForName};
pub use upstream::UpstreamTls;

/// The built TLS side of a virtual server.
pub struct TlsServer {
    pub config: Arc<ServerConfig>,
    /// The same for QUIC (`[vserver.http3]`): TLS 1.3 only, ALPN "h3"; None
    /// when the vserver's versions leave TLS 1.3 out.
    pub quic: Option<Arc<ServerConfig>>,
    /// The certificates served, for the admin API (names, expiry, OCSP).
    pub certs: Arc<CertStore>,
    /// Strict-Transport-Security value, when configured.
    pub hsts: Option<String>,
    /// Where the verified client-certificate subject goes, when client
    /// certificates are asked for. Requests never pass on a client's own
    /// field of that name.
    pub client_subject_header: Option<String>,
    /// Identifies the client-certificate rule (CA bundle and mode; 0 for
    /// none): the next snapshot keeps `tickets` and `sessions` only if its
    /// rule is the same.
    pub(crate) client_auth: u64,
    /// Kept to hand to the next snapshot.
    pub(crate) tickets: Option<Arc<dyn ProducesTickets>>,
    pub(crate) sessions: Option<Arc<dyn StoresServerSessions>>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsServer(alpn {:?})", self.config.alpn_protocols)
    }
}

/// The subject of a verified client certificate, RFC 4514.
/// Which file of a client TLS setup failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFile {
    Ca,
    Cert,
    Key,
    /// The certificate and key together (they do not match).
    Pair,
    /// The TLS versions (never, with the default provider).
    Versions,
}

/// A TLS client configuration from files: the CA that signs the server's
/// certificate, and a client certificate and key when given (the admin
/// CLI, cluster nodes reaching etcd). An error says which file and why;
/// the caller names it as its user wrote it.
pub fn client_config(
    ca: &std::path::Path,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<Arc<rustls::ClientConfig>, (ClientFile, String)> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).map_err(|e| (ClientFile::Ca, e.to_string()))?;
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| (ClientFile::Ca, e.to_string()))?;
        roots.add(c).map_err(|e| (ClientFile::Ca, e.to_string()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| (ClientFile::Versions, e.to_string()))?
    .with_root_certificates(roots);
    let cfg = match client {
        Some((cert, key)) => {
            let pem = std::fs::read(cert).map_err(|e| (ClientFile::Cert, e.to_string()))?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| (ClientFile::Cert, e.to_string()))?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| (ClientFile::Key, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| (ClientFile::Pair, e.to_string()))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

pub fn client_subject(conn: &rustls::ServerConnection) -> Option<String> {
    client_cert(conn).map(|c| c.subject)
}

/// What a verified client certificate says, read once per handshake
/// (the member's subject field, and `r.client_cert` for scripts).
#[derive(Debug, Clone, Default)]
pub struct ClientCert {
    /// RFC 4514 ("CN=client,O=Acme").
    pub subject: String,
    pub issuer: String,
    /// Lower-case hex.
    pub serial: String,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<String>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    /// SHA-256 of the DER certificate, lower-case hex.
    pub sha256: String,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
}

/// The verified client certificate of a finished handshake (rustls has
/// checked its chain against the vserver's `client_ca`: a certificate that
/// does not verify ends the handshake, so one that is here is verified).
pub fn client_cert(conn: &rustls::ServerConnection) -> Option<ClientCert> {
    client_cert_of(conn.peer_certificates()?.first()?)
}

/// What the verified end-entity certificate `end` (DER) says; QUIC's
/// handshake hands it over apart from a rustls connection.
pub fn client_cert_of(end: &[u8]) -> Option<ClientCert> {
    let i = x509::parse(end).ok()?;
    let sha = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, end);
    Some(ClientCert {
        subject: i.subject,
        issuer: i.issuer,
        serial: i.serial_hex,
        dns_names: i.dns_names,
        ip_addresses: i.ip_addresses,
        emails: i.emails,
        uris: i.uris,
        sha256: sha.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
        not_before: i.not_before,
        not_after: i.not_after,
    })
}

/// "YYYY-MM-DD HH:MM:SS UTC" for Unix seconds (for error messages).
pub fn format_time(secs: i64) -> String {
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = crate::clock::civil_from_days(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_time(2_147_483_647), "2038-01-19 03:14:07 UTC");
    }
}
