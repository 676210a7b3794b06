//! Byte tunnel for upgraded connections (WebSocket and other Upgrade
//! protocols): both directions copied until both sides close, or until the
//! tunnel has been idle for its timeout. `run` joins two byte streams (an
//! HTTP/1.1 client's Upgrade); `run_h2` joins an HTTP/2 stream (an
//! extended CONNECT, RFC 8441) to a member's connection, and `run_h3` an
//! HTTP/3 one (RFC 9220).

use std::cell::Cell;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use h3::error::Code;
use h3::server::RequestStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::client_h2_stream::StreamRef;
use super::member_h2_tunnel::H2Tunnel;
use super::upstream::{UpConn, UpStream};
use crate::http::message::{Framing, Response};
use crate::http2::frame::code;

/// The head that answers an extended CONNECT (RFC 8441 5, RFC 9220 3)
/// whose member said 101: `:status 200` with the member's fields but the
/// handshake's own (`Sec-WebSocket-Accept`; the hop-by-hop ones stay out
/// as the head is sent).
pub fn connect_ok(member: &Response) -> Response {
    let mut ok = Response::new(200, Framing::Close);
    ok.head.fields = member.head.fields.clone();
    ok.head.connection_tokens = member.head.connection_tokens.clone();
    ok.head.fields.remove(b"sec-websocket-accept");
    ok
}

/// Returns once `idle` has passed since `last` (which the relay moves
/// with every byte).
async fn quiet_for(last: &Cell<Instant>, idle: Duration) {
    loop {
        let until = last.get() + idle;
        if Instant::now() >= until {
            return;
        }
        tokio::time::sleep_until(until.into()).await;
    }
}

/// The member's end of a tunnel, as the relays read and write it.
pub struct MemberEnd<'a> {
    pub io: MemberIo<'a>,
    /// Bytes read from the member past its 101, the tunnel's first.
    pub buf: &'a mut BytesMut,
}

/// An HTTP/1.1 member's connection after its 101, or an h2 member's
/// extended CONNECT stream after its 2xx (RFC 8441).
pub enum MemberIo<'a> {
    H1(&'a mut UpStream),
    H2(&'a mut H2Tunnel),
}

impl<'a> MemberEnd<'a> {
    pub fn h1(up: &'a mut UpConn) -> MemberEnd<'a> {
        MemberEnd {
            io: MemberIo::H1(&mut up.stream),
            buf: &mut up.buf,
        }
    }
}

impl AsyncRead for MemberIo<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MemberIo::H1(s) => Pin::new(&mut **s).poll_read(cx, buf),
            MemberIo::H2(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MemberIo<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            MemberIo::H1(s) => Pin::new(&mut **s).poll_write(cx, data),
            MemberIo::H2(s) => Pin::new(&mut **s).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MemberIo::H1(s) => Pin::new(&mut **s).poll_flush(cx),
            MemberIo::H2(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            MemberIo::H1(s) => Pin::new(&mut **s).poll_shutdown(cx),
            MemberIo::H2(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

pub struct Totals {
    pub to_client: u64,
    pub to_server: u64,
}

/// `head` is the 101 response to send first; `cbuf` / `ubuf` hold bytes
/// already read from each side that belong to the tunnel. Either side may be
/// TLS, so neither is split: `select!` drops the losing read before a branch
/// writes, and reads on either stream are cancel-safe.
pub async fn run<C: AsyncRead + AsyncWrite + Unpin, S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    cbuf: &mut BytesMut,
    server: &mut S,
    ubuf: &mut BytesMut,
    mut head: Vec<u8>,
    idle: Duration,
) -> Totals {
    let mut t = Totals {
        to_client: ubuf.len() as u64,
        to_server: cbuf.len() as u64,
    };
    head.extend_from_slice(ubuf);
    ubuf.clear();
    if client.write_all(&head).await.is_err() || client.flush().await.is_err() {
        return t;
    }
    if !cbuf.is_empty() {
        if server.write_all(cbuf).await.is_err() || server.flush().await.is_err() {
            return t;
        }
        cbuf.clear();
    }
    let mut a = vec![0u8; 16 * 1024];
    let mut b = vec![0u8; 16 * 1024];
    let (mut c_open, mut s_open) = (true, true);
    while c_open || s_open {
        tokio::select! {
            r = client.read(&mut a), if c_open => match r {
                Ok(0) | Err(_) => {
                    c_open = false;
                    let _ = server.shutdown().await;
                }
                Ok(n) => {
                    if server.write_all(&a[..n]).await.is_err() || server.flush().await.is_err() {
                        break;
                    }
                    t.to_server += n as u64;
                }
            },
            r = server.read(&mut b), if s_open => match r {
                Ok(0) | Err(_) => {
                    s_open = false;
                    let _ = client.shutdown().await;
                }
                Ok(n) => {
                    if client.write_all(&b[..n]).await.is_err()
                        || client.flush().await.is_err()
                    {
                        break;
                    }
                    t.to_client += n as u64;
                }
            },
            _ = tokio::time::sleep(idle) => break,
        }
    }
    t
}

/// Relays an HTTP/2 stream whose head went out (`:status 200`) and a
/// member connection, both ways at once. `ubuf` holds member bytes read
/// past its 101. The stream's DATA reaches the member as it comes, and the
/// client's window reopens only as it is taken (`poll_data`), so a member
/// that does not read holds the client back; the member's bytes go out as
/// the client's window allows. END_STREAM from the client is a FIN to the
/// member and the member's FIN an END_STREAM; a reset either way ends it
/// all (CONNECT_ERROR towards the client when the member's connection
/// failed), and so does `idle` without a byte either way (CANCEL).
///
/// Runs on the worker that owns the client connection (the stream's
/// protocol state is borrowed, never across an await).
pub async fn run_h2<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &StreamRef,
    server: &mut S,
    ubuf: &mut BytesMut,
    idle: Duration,
) -> Totals {
    let (shared, id) = (&stream.shared, stream.id);
    shared.borrow_mut().set_tunnel(id);
    let last = Cell::new(Instant::now());
    let to_server = Cell::new(0u64);
    let to_client = Cell::new(0u64);
    let (mut rd, mut wr) = tokio::io::split(server);
    let from_client = async {
        loop {
            match poll_fn(|cx| shared.borrow_mut().poll_data(id, cx)).await {
                Some(Ok(b)) => {
                    last.set(Instant::now());
                    if wr.write_all(&b).await.is_err() || wr.flush().await.is_err() {
                        shared.borrow_mut().reset(id, code::CONNECT_ERROR);
                        return Err(());
                    }
                    to_server.set(to_server.get() + b.len() as u64);
                }
                None => {
                    let _ = wr.shutdown().await;
                    return Ok(());
                }
                // Reset by the client (or the connection ended).
                Some(Err(_)) => return Err(()),
            }
        }
    };
    let from_member = async {
        let mut buf = vec![0u8; 16 * 1024];
        let mut early = std::mem::take(ubuf);
        loop {
            let n = if !early.is_empty() {
                let n = early.len().min(buf.len());
                buf[..n].copy_from_slice(&early.split_to(n));
                n
            } else {
                match rd.read(&mut buf).await {
                    Ok(0) => {
                        return shared.borrow_mut().end_stream(id).map_err(|_| ());
                    }
                    Ok(n) => n,
                    Err(_) => {
                        shared.borrow_mut().reset(id, code::CONNECT_ERROR);
                        return Err(());
                    }
                }
            };
            last.set(Instant::now());
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                let sent = poll_fn(|cx| shared.borrow_mut().poll_send(id, cx, rest, false)).await;
                match sent {
                    Ok(k) => rest = &rest[k..],
                    Err(_) => return Err(()),
                }
            }
            to_client.set(to_client.get() + n as u64);
        }
    };
    tokio::select! {
        _ = async { tokio::try_join!(from_client, from_member) } => {}
        () = quiet_for(&last, idle) => shared.borrow_mut().reset(id, code::CANCEL),
    }
    Totals {
        to_client: to_client.get(),
        to_server: to_server.get(),
    }
}

/// Relays an HTTP/3 request stream whose head went out (`:status 200`)
/// and a member connection, both ways at once, on the stream's two halves
/// (`send`, `recv`). `ubuf` holds member bytes read past its 101. The
/// stream's DATA reaches the member as it comes, and QUIC's flow control
/// reopens the client's window as it is taken, so a member that does not
/// read holds the client back; the member's bytes go out as DATA frames
/// as the client's window allows. The client's FIN is a FIN to the member
/// and the member's FIN the stream's; a reset by the client ends it all,
/// a member connection that fails resets the stream with H3_CONNECT_ERROR
/// (RFC 9114 4.4), and `idle` without a byte either way with
/// H3_REQUEST_CANCELLED.
///
/// Generic over the QUIC stream halves (quinn's in practice) so that this
/// file needs nothing of the HTTP/3 client side's.
pub async fn run_h3<Q, R, S>(
    (send, recv): (&mut RequestStream<Q, Bytes>, &mut RequestStream<R, Bytes>),
    (server, ubuf): (&mut S, &mut BytesMut),
    idle: Duration,
) -> Totals
where
    Q: h3::quic::SendStream<Bytes>,
    R: h3::quic::RecvStream,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let last = Cell::new(Instant::now());
    let to_server = Cell::new(0u64);
    let to_client = Cell::new(0u64);
    let (mut rd, mut wr) = tokio::io::split(server);
    // Err(Some(code)): reset the stream with it; Err(None): it is gone.
    let from_client = async {
        loop {
            match recv.recv_data().await {
                Ok(Some(mut chunk)) => {
                    last.set(Instant::now());
                    while chunk.has_remaining() {
                        let n = chunk.chunk().len();
                        if wr.write_all(chunk.chunk()).await.is_err() {
                            return Err(Some(Code::H3_CONNECT_ERROR));
                        }
                        chunk.advance(n);
                        to_server.set(to_server.get() + n as u64);
                    }
                    if wr.flush().await.is_err() {
                        return Err(Some(Code::H3_CONNECT_ERROR));
                    }
                }
                Ok(None) => {
                    let _ = wr.shutdown().await;
                    return Ok(());
                }
                // Reset by the client (or the connection ended).
                Err(_) => return Err(None),
            }
        }
    };
    let from_member = async {
        let early = std::mem::take(ubuf);
        if !early.is_empty() {
            to_client.set(early.len() as u64);
            send.send_data(early.freeze()).await.map_err(|_| None)?;
        }
        let mut b = BytesMut::new();
        loop {
            if b.capacity() < 4096 {
                b.reserve(16 * 1024);
            }
            match rd.read_buf(&mut b).await {
                Ok(0) => return send.finish().await.map_err(|_| None),
                Ok(n) => {
                    last.set(Instant::now());
                    to_client.set(to_client.get() + n as u64);
                    send.send_data(b.split().freeze()).await.map_err(|_| None)?;
                }
                Err(_) => return Err(Some(Code::H3_CONNECT_ERROR)),
            }
        }
    };
    let reset = tokio::select! {
        r = async { tokio::try_join!(from_client, from_member) } => r.err().flatten(),
        () = quiet_for(&last, idle) => Some(Code::H3_REQUEST_CANCELLED),
    };
    if let Some(code) = reset {
        send.stop_stream(code);
        recv.stop_sending(code);
    }
    Totals {
        to_client: to_client.get(),
        to_server: to_server.get(),
    }
}
