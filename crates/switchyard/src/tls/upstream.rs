//! Upstream TLS: re-encryption from Switchyard to a pool's members (what
//! HAProxy calls `ssl` on a server line, `check-ssl` for its checks).
//!
//! A pool's `[pool.tls]` becomes one `rustls::ClientConfig` when the
//! snapshot is built, on the control thread, off the request path. Every
//! worker shares it through the snapshot's `Arc`.
//!
//! Name checked against the member's certificate: the configured `sni`
//! (also sent as SNI), or, without one, the member's IP address (an IP
//! subject alternative name; rustls sends no SNI for an address).
//!
//! Resumption: the config holds a client session cache (TLS 1.3 tickets,
//! TLS 1.2 session IDs and tickets) keyed by that name, so a new connection
//! to a member resumes instead of doing a full handshake. When a reload
//! leaves a pool's TLS settings and files byte-for-byte unchanged, the
//! whole built config (cache included) is handed to the new snapshot; any
//! change builds a new config with an empty cache, so a session made under
//! the old trust settings is never resumed under the new ones.
//!
//! `verify = false` still checks the handshake signatures against the
//! certificate the member presents (the connection is encrypted with the
//! keys of whoever holds that certificate), but accepts any certificate.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, DigitallySignedStruct, Error as TlsError, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The built TLS side of a pool.
pub struct UpstreamTls {
    pub config: Arc<ClientConfig>,
    /// The same, offering only "h2" by ALPN: for pools with `protocol = "h2"`
    /// (the session cache is shared).
    pub config_h2: Arc<ClientConfig>,
    /// The same without ALPN: for the relays of tcp vservers, which do not
    /// know what protocol they carry.
    pub config_l4: Arc<ClientConfig>,
    /// The configured `sni`; `None`: the member's address is the name.
    pub(crate) sni: Option<ServerName<'static>>,
    pub verify: bool,
    /// SHA-256 over every input (settings and file contents): equal means
    /// the previous snapshot's config can be kept as it is.
    pub(crate) fingerprint: Vec<u8>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UpstreamTls(sni {:?}, verify {})", self.sni, self.verify)
    }
}

impl UpstreamTls {
    /// The name sent to, and verified against, the member at `addr`.
    pub fn server_name(&self, addr: SocketAddr) -> ServerName<'static> {
        match &self.sni {
            Some(n) => n.clone(),
            None => ServerName::IpAddress(addr.ip().into()),
        }
    }
}

/// The reason of a failed TLS handshake: rustls' error when there is one
/// (certificate verification, alerts), else the I/O error (the member
/// closed the connection mid-handshake).
pub fn handshake_error(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => describe(tls),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the member closed the connection during the handshake".to_string()
        }
        None => e.to_string(),
    }
}

/// A rustls handshake error as an operator reads it.
pub(crate) fn describe(e: &TlsError) -> String {
    match e {
        TlsError::InvalidCertificate(c) => format!("certificate verification failed: {c}"),
        TlsError::AlertReceived(a) => format!("the member sent the alert {a:?}"),
        other => other.to_string(),
    }
}

/// Accepts any certificate (`verify = false`) but still checks that the
/// handshake is signed by the key of the certificate presented.
#[derive(Debug)]
pub(crate) struct AcceptAnyCertificate(pub(crate) Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Verifies a member's certificate chain against the pool's trust anchors,
/// then its subject alternative names against the pool's `san_dns` and
/// `san_uri` (any one of them) instead of the name sent as SNI: a member
/// whose certificate names its service identity (a SPIFFE URI, the
/// Gateway API's BackendTLSPolicy `subjectAltNames`) rather than the name
/// it is reached by.
#[derive(Debug)]
pub(crate) struct SanVerifier {
    pub(crate) roots: Arc<rustls::RootCertStore>,
    /// The provider, and the handshake signature checks of any
    /// certificate, which are this verifier's too.
    pub(crate) any: AcceptAnyCertificate,
    pub(crate) dns: Vec<ServerName<'static>>,
    pub(crate) uris: Vec<String>,
}

impl ServerCertVerifier for SanVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.any.0.signature_verification_algorithms.all,
        )?;
        if self
            .dns
            .iter()
            .any(|n| rustls::client::verify_server_name(&cert, n).is_ok())
        {
            return Ok(ServerCertVerified::assertion());
        }
        if !self.uris.is_empty() {
            let info = super::x509::parse(end_entity.as_ref())
                .map_err(|_| TlsError::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
            if info.uris.iter().any(|u| self.uris.contains(u)) {
                return Ok(ServerCertVerified::assertion());
            }
        }
        Err(TlsError::InvalidCertificate(
            rustls::CertificateError::NotValidForName,
        ))
    }

    // The handshake's signatures are checked as for any certificate.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.any.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.any.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.any.supported_verify_schemes()
    }
}

/// The member side of a connection: plain TCP or TLS (HTTP member
/// connections, and the relays of tcp vservers). An enum, as on the client
/// side (`proxy::stream::ClientStream`): the proxy code is compiled once,
/// and the TLS state is boxed so a plain connection stays small.
pub enum UpStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for UpStream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpStream::Tls(t) => Pin::new(&mut **t).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpStream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpStream::Tls(t) => Pin::new(&mut **t).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpStream::Tls(t) => Pin::new(&mut **t).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpStream::Plain(s) => s.is_write_vectored(),
            UpStream::Tls(t) => t.is_write_vectored(),
        }
    }

    /// A no-op on TCP; on TLS it pushes records rustls still holds.
    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpStream::Tls(t) => Pin::new(&mut **t).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpStream::Tls(t) => Pin::new(&mut **t).poll_shutdown(cx),
        }
    }
}
