//! The client side of a session: a plain TCP connection or a TLS one.
//!
//! An enum rather than a generic session: the session code is compiled
//! once, a parked connection is one type in the parking lot, and the plain
//! path pays one predictable branch per I/O call. The TLS state is boxed so
//! a plain connection (and the `Client` that holds it) stays as small as it
//! was before TLS existed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

pub use super::plain::PlainTcp;

pub enum ClientStream {
    Plain(PlainTcp),
    Tls(Box<TlsConn>),
}

pub struct TlsConn {
    pub stream: TlsStream<TcpStream>,
    /// The verified client certificate's subject (RFC 4514), when the
    /// vserver asks for client certificates and one was presented.
    pub client_cert: Option<std::sync::Arc<crate::tls::ClientCert>>,
    /// The version, cipher and handshake time, for the access log.
    pub info: crate::accesslog::TlsInfo,
}

impl ClientStream {
    /// The socket underneath, in tokio's reactor (registered now if it was
    /// not): readiness for idle waits and parking.
    pub fn tcp(&mut self) -> io::Result<&TcpStream> {
        match self {
            ClientStream::Plain(s) => s.tokio(),
            ClientStream::Tls(t) => Ok(t.stream.get_ref().0),
        }
    }

    /// The socket underneath if it is in tokio's reactor already.
    pub fn tcp_registered(&self) -> Option<&TcpStream> {
        match self {
            ClientStream::Plain(s) => s.tokio_ref(),
            ClientStream::Tls(t) => Some(t.stream.get_ref().0),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, ClientStream::Tls(_))
    }

    pub fn tls_info(&self) -> Option<crate::accesslog::TlsInfo> {
        match self {
            ClientStream::Plain(_) => None,
            ClientStream::Tls(t) => Some(t.info),
        }
    }

    pub fn client_subject(&self) -> Option<&str> {
        match self {
            ClientStream::Plain(_) => None,
            ClientStream::Tls(t) => t.client_cert.as_deref().map(|c| c.subject.as_str()),
        }
    }

    /// The verified client certificate, when the vserver asks for one.
    pub fn client_cert(&self) -> Option<&std::sync::Arc<crate::tls::ClientCert>> {
        match self {
            ClientStream::Plain(_) => None,
            ClientStream::Tls(t) => t.client_cert.as_ref(),
        }
    }

    /// True when bytes already taken off the socket wait inside TLS
    /// (decrypted plaintext, or whole records not yet decrypted, or the
    /// peer's close_notify). Such a connection must not wait for socket
    /// readiness, nor park: the socket may never become readable again for
    /// a request that is already here.
    pub fn has_buffered(&mut self) -> bool {
        match self {
            ClientStream::Plain(_) => false,
            ClientStream::Tls(t) => {
                let conn = t.stream.get_mut().1;
                match conn.process_new_packets() {
                    Ok(st) => st.plaintext_bytes_to_read() > 0 || st.peer_has_closed(),
                    // The next read reports the error.
                    Err(_) => true,
                }
            }
        }
    }
}

impl ClientStream {
    /// A write whose partial last segment the kernel keeps back
    /// (MSG_MORE) until the next write or the FIN: the connection is about
    /// to shut down, so the FIN leaves in the segment that carries the
    /// data. TLS writes as usual (its close_notify follows anyway).
    pub fn poll_write_held(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            ClientStream::Plain(s) => s.poll_write_held(cx, buf),
            ClientStream::Tls(t) => Pin::new(&mut t.stream).poll_write(cx, buf),
        }
    }
}

impl AsyncRead for ClientStream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(t) => Pin::new(&mut t.stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(t) => Pin::new(&mut t.stream).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Tls(t) => Pin::new(&mut t.stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientStream::Plain(s) => s.is_write_vectored(),
            ClientStream::Tls(t) => t.stream.is_write_vectored(),
        }
    }

    /// A no-op on TCP; on TLS it pushes records rustls still holds (a write
    /// can return with its last record not yet on the socket).
    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(t) => Pin::new(&mut t.stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(t) => Pin::new(&mut t.stream).poll_shutdown(cx),
        }
    }
}
