//! A tcp vserver's connection to a member: plain TCP, or TLS when the
//! pool has `[pool.tls]` (HAProxy's `server ... ssl` in `mode tcp`): the
//! relay then carries the client's bytes inside a TLS session of its own,
//! verified as an HTTP pool's members are, without ALPN.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::tls::upstream::{handshake_error, UpstreamTls};

pub enum MemberStream {
    Plain(TcpStream),
    /// Boxed: the TLS state is large, and most relays are plain.
    Tls(Box<TlsStream<TcpStream>>),
}

/// The TLS handshake with the member at `addr` over `s`, within
/// `timeout`; the error says why it failed.
pub async fn tls_handshake(
    tls: &UpstreamTls,
    addr: SocketAddr,
    s: TcpStream,
    timeout: Duration,
) -> Result<MemberStream, String> {
    let connector = TlsConnector::from(tls.config_l4.clone());
    let hs = Box::pin(connector.connect(tls.server_name(addr), s));
    match tokio::time::timeout(timeout, hs).await {
        Ok(Ok(t)) => Ok(MemberStream::Tls(Box::new(t))),
        Ok(Err(e)) => Err(format!("TLS handshake failed: {}", handshake_error(&e))),
        Err(_) => Err(format!(
            "TLS handshake not done within {} ms",
            timeout.as_millis()
        )),
    }
}

impl AsyncRead for MemberStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MemberStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MemberStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MemberStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberStream::Plain(s) => Pin::new(s).poll_flush(cx),
            MemberStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MemberStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
