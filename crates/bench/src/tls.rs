//! The load generator's TLS client: rustls on aws-lc-rs, TLS 1.2 and 1.3, a
//! chosen cipher suite, certificate verification against a CA file or off
//! (explicitly, for benchmarking), SNI, and either a full handshake per
//! connection or session resumption with a fresh cache every N+1
//! connections (the reports' "9 reuses" is `resume: 9`).

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{aws_lc_rs, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, HandshakeKind, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::client::Connector;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    V12,
    V13,
}

impl TlsVersion {
    pub fn parse(s: &str) -> Result<TlsVersion, String> {
        match s
            .trim()
            .trim_start_matches("TLSv")
            .trim_start_matches("tls")
        {
            "1.2" | "12" => Ok(TlsVersion::V12),
            "1.3" | "13" => Ok(TlsVersion::V13),
            _ => Err(format!("TLS version {s}: want 1.2 or 1.3")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::V12 => "1.2",
            TlsVersion::V13 => "1.3",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// None: both 1.2 and 1.3 offered.
    pub version: Option<TlsVersion>,
    /// IANA or OpenSSL name; None: rustls' defaults.
    pub cipher: Option<String>,
    /// None: certificate verification off (benchmarking only).
    pub ca_file: Option<String>,
    /// Server name for SNI and verification; None: the URL's host.
    pub sni: String,
    /// 0: a full handshake per connection; N: each full handshake is
    /// followed by N resumed ones, then the session cache is dropped.
    pub resume: u32,
    /// Key-exchange groups offered, in order (e.g. X25519, secp256r1,
    /// X25519MLKEM768). Empty: the classical ECDHE groups X25519,
    /// secp256r1 and secp384r1, so every DUT does the same key exchange
    /// (rustls' default would put the post-quantum hybrid first, which
    /// only some peers accept).
    pub groups: Vec<String>,
}

/// OpenSSL and short IANA spellings -> rustls' names.
fn canonical_suite(name: &str) -> String {
    let n = name.trim().to_ascii_uppercase().replace('-', "_");
    match n.as_str() {
        "ECDHE_RSA_AES256_GCM_SHA384" => "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
        "ECDHE_ECDSA_AES256_GCM_SHA384" => "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into(),
        "ECDHE_RSA_AES128_GCM_SHA256" => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
        "ECDHE_ECDSA_AES128_GCM_SHA256" => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into(),
        "ECDHE_RSA_CHACHA20_POLY1305" => "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256".into(),
        "ECDHE_ECDSA_CHACHA20_POLY1305" => "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256".into(),
        _ => {
            if let Some(rest) = n.strip_prefix("TLS_") {
                if rest.starts_with("AES_") || rest.starts_with("CHACHA20") {
                    return format!("TLS13_{rest}");
                }
            }
            n
        }
    }
}

/// Builds the client configuration (without the resumption policy).
pub fn client_config(o: &TlsOptions) -> Result<ClientConfig, String> {
    let base = aws_lc_rs::default_provider();
    let mut suites = base.cipher_suites.clone();
    if let Some(c) = &o.cipher {
        let want = canonical_suite(c);
        suites.retain(|s| format!("{:?}", s.suite()) == want);
        if suites.is_empty() {
            let known: Vec<String> = base
                .cipher_suites
                .iter()
                .map(|s| format!("{:?}", s.suite()))
                .collect();
            return Err(format!("cipher {c}: unknown; known: {}", known.join(", ")));
        }
    }
    let is13 =
        |s: &rustls::SupportedCipherSuite| matches!(s, rustls::SupportedCipherSuite::Tls13(_));
    match o.version {
        Some(TlsVersion::V12) => suites.retain(|s| !is13(s)),
        Some(TlsVersion::V13) => suites.retain(is13),
        None => {}
    }
    if suites.is_empty() {
        return Err(format!(
            "cipher {} is not a TLS {} suite",
            o.cipher.as_deref().unwrap_or("-"),
            o.version.map_or("?", |v| v.name())
        ));
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match o.version {
        Some(TlsVersion::V12) => vec![&rustls::version::TLS12],
        Some(TlsVersion::V13) => vec![&rustls::version::TLS13],
        None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let mut kx = base.kx_groups.clone();
    if o.groups.is_empty() {
        kx.retain(|g| {
            matches!(
                g.name(),
                rustls::NamedGroup::X25519
                    | rustls::NamedGroup::secp256r1
                    | rustls::NamedGroup::secp384r1
            )
        });
    } else {
        let mut chosen = Vec::new();
        for want in &o.groups {
            let g = base
                .kx_groups
                .iter()
                .find(|g| format!("{:?}", g.name()).eq_ignore_ascii_case(want.trim()))
                .ok_or_else(|| {
                    let known: Vec<String> = base
                        .kx_groups
                        .iter()
                        .map(|g| format!("{:?}", g.name()))
                        .collect();
                    format!("group {want}: unknown; known: {}", known.join(", "))
                })?;
            chosen.push(*g);
        }
        kx = chosen;
    }
    let provider = Arc::new(CryptoProvider {
        cipher_suites: suites,
        kx_groups: kx,
        ..base
    });
    let algs = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS: {e}"))?;
    let cfg = match &o.ca_file {
        Some(f) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(f).map_err(|e| format!("{f}: {e}"))?;
            for c in certs {
                let c = c.map_err(|e| format!("{f}: {e}"))?;
                roots.add(c).map_err(|e| format!("{f}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("{f}: no certificate"));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(algs)))
            .with_no_client_auth(),
    };
    Ok(cfg)
}

/// Accepts any certificate but still checks the handshake signatures, so a
/// run costs the client what a verifying client pays for the key exchange.
#[derive(Debug)]
struct NoVerify(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Marks a failed TLS handshake (as opposed to a failed TCP connect).
#[derive(Debug)]
pub struct HandshakeFailed(pub io::Error);

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS handshake failed: {}", self.0)
    }
}
impl std::error::Error for HandshakeFailed {}

pub fn is_handshake_failure(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<HandshakeFailed>())
}

/// One load slot's TLS connector: it owns the slot's session cache, so
/// resumption follows the slot's own sequence of connections.
pub struct Tls {
    base: Arc<ClientConfig>,
    name: ServerName<'static>,
    resume: u32,
    current: RefCell<Option<tokio_rustls::TlsConnector>>,
    made: Cell<u64>,
}

impl Tls {
    pub fn new(base: Arc<ClientConfig>, sni: &str, resume: u32) -> Result<Tls, String> {
        let name = ServerName::try_from(sni.to_string()).map_err(|e| format!("SNI {sni}: {e}"))?;
        Ok(Tls {
            base,
            name,
            resume,
            current: RefCell::new(None),
            made: Cell::new(0),
        })
    }

    fn connector(&self) -> tokio_rustls::TlsConnector {
        let n = self.made.get();
        self.made.set(n + 1);
        let mut cur = self.current.borrow_mut();
        if n.is_multiple_of(self.resume as u64 + 1) || cur.is_none() {
            let mut cfg = (*self.base).clone();
            cfg.resumption = if self.resume == 0 {
                Resumption::disabled()
            } else {
                Resumption::in_memory_sessions(4)
            };
            *cur = Some(tokio_rustls::TlsConnector::from(Arc::new(cfg)));
        }
        match cur.as_ref() {
            Some(c) => c.clone(),
            None => tokio_rustls::TlsConnector::from(self.base.clone()),
        }
    }
}

impl Connector for Tls {
    type Stream = TlsStream<TcpStream>;
    async fn connect(&self, addr: SocketAddr, src: Option<IpAddr>) -> io::Result<Self::Stream> {
        let tcp = crate::client::connect(addr, src).await?;
        let c = self.connector();
        c.connect(self.name.clone(), tcp)
            .await
            .map_err(|e| io::Error::other(HandshakeFailed(e)))
    }
    fn resumed(s: &Self::Stream) -> Option<bool> {
        Some(s.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn suites_and_versions() {
        let o = |v: Option<TlsVersion>, c: &str| TlsOptions {
            version: v,
            cipher: Some(c.to_string()),
            ..Default::default()
        };
        assert!(client_config(&o(Some(TlsVersion::V13), "TLS_AES_256_GCM_SHA384")).is_ok());
        assert!(client_config(&o(Some(TlsVersion::V13), "TLS13_AES_256_GCM_SHA384")).is_ok());
        assert!(client_config(&o(Some(TlsVersion::V12), "ECDHE-RSA-AES256-GCM-SHA384")).is_ok());
        assert!(client_config(&o(
            Some(TlsVersion::V12),
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
        ))
        .is_ok());
        assert!(client_config(&o(Some(TlsVersion::V12), "TLS_AES_256_GCM_SHA384")).is_err());
        assert!(client_config(&o(None, "NOPE")).is_err());
        let mut g = o(None, "TLS_AES_256_GCM_SHA384");
        g.groups = vec!["secp256r1".into(), "X25519MLKEM768".into()];
        assert!(client_config(&g).is_ok());
        g.groups = vec!["nope".into()];
        assert!(client_config(&g).is_err());
        assert_eq!(TlsVersion::parse("1.2"), Ok(TlsVersion::V12));
        assert!(TlsVersion::parse("1.1").is_err());
    }
}
