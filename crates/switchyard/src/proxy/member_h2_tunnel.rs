//! A WebSocket on a member of an h2 pool (RFC 8441): the extended CONNECT's
//! stream as the byte stream the tunnel relays (`H2Tunnel`), and the 101
//! the client's side of the exchange sees when the member said 2xx
//! (`switched`), so every client protocol opens its tunnel the one way it
//! does for an HTTP/1.1 member.
//!
//! Runs on the worker that owns the client connection.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::message::{Framing, Request, Response};
use crate::http::upgrade;

/// An extended CONNECT's stream to an h2 member as a byte stream: DATA
/// read as it comes (the window given back as the relay takes it, so a
/// client that does not read holds the member back), writes as the
/// member's window allows, shutdown as END_STREAM. Dropped before both
/// ends closed, h2 resets the stream (CANCEL).
pub struct H2Tunnel {
    send: SendStream<Bytes>,
    pub(super) recv: RecvStream,
    /// Received from the member, not read yet.
    pending: Bytes,
    ended: bool,
}

impl H2Tunnel {
    pub fn new(send: SendStream<Bytes>, recv: RecvStream) -> H2Tunnel {
        H2Tunnel {
            send,
            recv,
            pending: Bytes::new(),
            ended: false,
        }
    }
}

impl AsyncRead for H2Tunnel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.pending.is_empty() {
            match ready!(this.recv.poll_data(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                Some(Ok(data)) => this.pending = data,
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..n]);
        this.pending.advance(n);
        let _ = this.recv.flow_control().release_capacity(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Tunnel {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.ended {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        this.send.reserve_capacity(data.len());
        loop {
            let room = this.send.capacity();
            if room > 0 {
                let n = room.min(data.len());
                this.send
                    .send_data(Bytes::copy_from_slice(&data[..n]), false)
                    .map_err(io::Error::other)?;
                return Poll::Ready(Ok(n));
            }
            match ready!(this.send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
    }

    /// h2's connection task writes what was queued.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.ended {
            this.ended = true;
            this.send
                .send_data(Bytes::new(), true)
                .map_err(io::Error::other)?;
        }
        Poll::Ready(Ok(()))
    }
}

/// The 101 an h2 member's 2xx to a WebSocket's extended CONNECT stands
/// for: its fields, `Upgrade: websocket`, and the handshake's answer to
/// the request's key (RFC 6455 4.2.2), which RFC 8441 leaves out on the
/// member's side. An HTTP/1.1 client gets it as it is; an HTTP/2 or
/// HTTP/3 client gets its 200 from it (`tunnel::connect_ok`).
pub fn switched(member: &Response, req: &Request) -> Response {
    let mut r = Response::new(101, Framing::None);
    r.reason = Bytes::from_static(b"Switching Protocols");
    r.head.fields = member.head.fields.clone();
    for name in [&b"content-length"[..], b"upgrade", b"sec-websocket-accept"] {
        r.head.fields.remove(name);
    }
    r.head.fields.append(b"upgrade", b"websocket");
    let key = req.head.get("sec-websocket-key").unwrap_or_default();
    r.head.fields.append(
        b"sec-websocket-accept",
        upgrade::websocket_accept(key).as_bytes(),
    );
    r.head.upgrade = true;
    r.head.keep_alive = false;
    r
}
