//! The cipher suite a QUIC handshake settled on, for the access log's
//! `tls_cipher` (`ssl_cipher`), as TCP's TLS shows it.
//!
//! quinn runs the handshake inside its rustls session and tells only the
//! ALPN protocol and the server name (quinn-proto 0.11's `HandshakeData`;
//! upstream added the suite on its unreleased 0.12 branch, quinn-rs/quinn
//! #2001, and issue #2662 asks for it in 0.11). So the vserver's QUIC
//! crypto configuration is quinn's wrapped in `NamesSuite`, whose session
//! reads the suite from the ServerHello as rustls writes it, where it
//! stands in the clear at a fixed place (RFC 8446 4.1.3), and hands it
//! out with the handshake's data. That is what went on the wire, not a
//! guess from the configuration's order. Everything else is quinn's
//! session, called through.

use std::any::Any;
use std::sync::Arc;

use quinn::crypto::{
    ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey, ServerConfig, Session,
    UnsupportedVersion,
};
use quinn::{ConnectionId, Side};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::TransportError;
use rustls::CipherSuite;

/// A QUIC server crypto configuration (quinn's rustls one) whose
/// sessions name their cipher suite (`suite_of`).
pub struct NamesSuite(pub Arc<dyn ServerConfig>);

impl ServerConfig for NamesSuite {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, UnsupportedVersion> {
        self.0.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.0.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn Session> {
        Box::new(SuiteSession {
            inner: self.0.clone().start_session(version, params),
            suite: None,
        })
    }
}

/// What `quinn::Connection::handshake_data` holds for a `NamesSuite`
/// connection, in place of quinn's ALPN and server name, which nothing
/// here reads (the TLS configuration offers only "h3", and SNI picked the
/// certificate).
pub struct Handshake {
    /// None until the ServerHello is written.
    pub suite: Option<CipherSuite>,
}

/// The IANA name of the suite `conn`'s handshake settled on, as TCP's
/// TLS names it (`accesslog::TlsInfo`); "-" while unknown.
pub fn suite_of(conn: &quinn::Connection) -> &'static str {
    conn.handshake_data()
        .and_then(|d| d.downcast::<Handshake>().ok())
        .and_then(|h| h.suite)
        .map_or("-", crate::accesslog::suite_name)
}

struct SuiteSession {
    inner: Box<dyn Session>,
    suite: Option<CipherSuite>,
}

/// The cipher suite of a ServerHello (or HelloRetryRequest, which names
/// the same) at the start of `written`: type 2, a 3-byte length, the
/// legacy version (2), the random (32), the session ID echo (a length
/// byte and at most 32 bytes), then the suite.
fn server_hello_suite(written: &[u8]) -> Option<CipherSuite> {
    if *written.first()? != 2 {
        return None;
    }
    let id_len = *written.get(4 + 2 + 32)? as usize;
    let at = 4 + 2 + 32 + 1 + id_len;
    let suite = written.get(at..at + 2)?;
    Some(CipherSuite::from(u16::from_be_bytes([suite[0], suite[1]])))
}

impl Session for SuiteSession {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }

    /// Ready when quinn's is (the ClientHello is in).
    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        self.inner.handshake_data()?;
        Some(Box::new(Handshake { suite: self.suite }))
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        self.inner.early_crypto()
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    /// rustls writes the ServerHello whole, first thing, at the Initial
    /// level: the first bytes this writes.
    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        let from = buf.len();
        let keys = self.inner.write_handshake(buf);
        if self.suite.is_none() {
            self.suite = server_hello_suite(&buf[from..]);
        }
        keys
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.inner.next_1rtt_keys()
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(id_len: u8, suite: [u8; 2]) -> Vec<u8> {
        let mut h = vec![2, 0, 0, 0, 3, 3];
        h.extend([7u8; 32]);
        h.push(id_len);
        h.extend(std::iter::repeat_n(9u8, id_len as usize));
        h.extend(suite);
        h.push(0);
        h
    }

    #[test]
    fn the_suite_is_read_after_the_session_id_echo() {
        assert_eq!(
            server_hello_suite(&hello(0, [0x13, 0x01])),
            Some(CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
        assert_eq!(
            server_hello_suite(&hello(32, [0x13, 0x03])),
            Some(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256)
        );
        // Not a ServerHello (EncryptedExtensions), or cut short.
        let mut ee = hello(0, [0x13, 0x02]);
        ee[0] = 8;
        assert_eq!(server_hello_suite(&ee), None);
        assert_eq!(server_hello_suite(&hello(32, [0x13, 0x02])[..60]), None);
        assert_eq!(server_hello_suite(&[]), None);
    }
}
