//! The HTTP/2 front end: a client connection that chose "h2" by ALPN, or
//! sent the HTTP/2 preface on a vserver with `h2c = true`.
//!
//! The h2 crate does the framing, HPACK and flow control. Each stream runs
//! in a task of its own on the worker: its head becomes the neutral request
//! (`http::h2conv`) and goes through the same exchange, hooks, pools and
//! balancers as an HTTP/1 request (`exchange::run`), so a policy, an edit
//! or a check means the same thing whichever protocol the client spoke.
//!
//! Abuse the protocol allows but no client needs (CVE-2023-44487 rapid
//! reset, SETTINGS/PING floods, empty frames) is counted on the wire by
//! `guard::h2flood::FrameWatch`, which sees every frame header the client
//! sends; past the budget the connection ends with
//! GOAWAY(ENHANCE_YOUR_CALM), like HAProxy's "glitches". Header-size attacks (HPACK bombs, CONTINUATION
//! floods) are bounded by SETTINGS_MAX_HEADER_LIST_SIZE, which h2 enforces
//! while decoding.

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::client_h2::{send_local, H2Client};
use super::conn::ConnGuard;
use super::ctx::WorkerCtx;
use super::exchange::Exchange;
use super::hooks::Local;
use super::pipeline;
use super::stream::ClientStream;
use crate::clock::now_ms;
use crate::guard::h2flood::{self, FrameWatch};
use crate::http::h2conv;
use crate::http::head::Limits;
use crate::http::responses;
use crate::log;
use crate::stats;
use crate::turn::Hold;

/// The first line of the client preface, as the HTTP/1 head reader sees it
/// ("PRI * HTTP/2.0" and an empty line); "SM\r\n\r\n" follows.
pub const PREFACE_HEAD: &[u8] = b"PRI * HTTP/2.0\r\n\r\n";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PREFACE_LEN: usize = PREFACE.len();
// The flood watch skips the same preface before counting frames.
const _: () = assert!(PREFACE_LEN == h2flood::PREFACE_LEN);

/// What the streams of one connection share.
struct Conn {
    peer: SocketAddr,
    listen: SocketAddr,
    tls: bool,
    client_subject: Option<String>,
    tls_info: Option<crate::accesslog::TlsInfo>,
    /// Streams being served (the connection is idle at zero).
    open: Cell<usize>,
    /// When a stream last started or ended (`clock` ms).
    last_active: Cell<u64>,
}

/// Serves an HTTP/2 connection in a task of its own. `replay` holds bytes
/// already read from `stream` (the preface, on h2c).
pub fn start(
    ctx: Rc<WorkerCtx>,
    stream: ClientStream,
    replay: BytesMut,
    peer: SocketAddr,
    listen: SocketAddr,
    guard: ConnGuard,
) {
    let conn = Rc::new(Conn {
        peer,
        listen,
        tls: stream.is_tls(),
        client_subject: stream.client_subject().map(str::to_string),
        tls_info: stream.tls_info(),
        open: Cell::new(0),
        last_active: Cell::new(now_ms()),
    });
    tokio::task::spawn_local(run(ctx, stream, replay, conn, guard));
}

#[allow(clippy::large_enum_variant)] // one lives at a time, on the stack
enum Event {
    Stream(http::Request<RecvStream>, SendResponse<Bytes>),
    Drain,
    Abuse(&'static str),
    Error(h2::Error),
    Closed,
}

/// Checks the preface and completes the HTTP/2 handshake (SETTINGS),
/// within the client_header timeout; None when the client does not speak
/// HTTP/2 or gave up.
async fn handshake(
    ctx: &WorkerCtx,
    mut stream: ClientStream,
    mut replay: BytesMut,
    conn: &Conn,
    guard: &ConnGuard,
    tripped: &Rc<Cell<Option<&'static str>>>,
) -> Option<H2Server> {
    let (limits, header_ms) = {
        let snap = ctx.snapshot.load();
        (snap.settings.http2.clone(), snap.settings.client_header_ms)
    };
    // The preface is checked here rather than by h2, so that a client that
    // does not speak HTTP/2 gets a clean close (FIN after its bytes are
    // read) rather than a reset.
    let preface = ctx
        .idle_watch
        .within(now_ms() + header_ms, read_preface(&mut stream, &mut replay))
        .await;
    if preface != Ok(true) {
        log::debug(format_args!(
            "client {}: no HTTP/2 connection preface",
            conn.peer
        ));
        lingering_close(ctx, stream).await;
        return None;
    }
    stats::inc(&guard.counters.local().h2_connections);
    let wire = Wire {
        io: stream,
        replay,
        watch: FrameWatch::new(
            limits.max_client_resets,
            limits.max_control_frames,
            limits.abuse_window_ms,
            tripped.clone(),
        ),
        out: Vec::new(),
        out_at: 0,
        hold: Hold::default(),
    };
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_window_size(limits.stream_window)
        .initial_connection_window_size(limits.connection_window)
        .max_frame_size(limits.max_frame_size)
        .max_header_list_size(limits.max_header_list_size);
    match ctx
        .idle_watch
        .within(now_ms() + header_ms, builder.handshake::<_, Bytes>(wire))
        .await
    {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            log::debug(format_args!(
                "client {}: HTTP/2 handshake failed: {e}",
                conn.peer
            ));
            None
        }
        Err(()) => None,
    }
}

type H2Server = h2::server::Connection<Wire, Bytes>;

/// Accepts the connection's streams until it ends: each runs in a task of
/// its own; GOAWAY on drain, on idle, on a reload that removed HTTP/2, and
/// (ENHANCE_YOUR_CALM) on abuse.
async fn run(
    ctx: Rc<WorkerCtx>,
    stream: ClientStream,
    replay: BytesMut,
    conn: Rc<Conn>,
    guard: ConnGuard,
) {
    let tripped = Rc::new(Cell::new(None));
    let Some(mut h2c) = handshake(&ctx, stream, replay, &conn, &guard, &tripped).await else {
        return;
    };
    let mut shutting = false;
    loop {
        // Woken at least every second to notice an idle connection, or a
        // reload that removed the vserver or its HTTP/2.
        let event = ctx
            .idle_watch
            .within(
                now_ms() + 1000,
                poll_fn(|cx| {
                    if let Some(why) = tripped.get() {
                        return Poll::Ready(Event::Abuse(why));
                    }
                    if !shutting && ctx.draining() {
                        return Poll::Ready(Event::Drain);
                    }
                    match h2c.poll_accept(cx) {
                        Poll::Ready(Some(Ok((req, resp)))) => Poll::Ready(Event::Stream(req, resp)),
                        Poll::Ready(Some(Err(e))) => Poll::Ready(Event::Error(e)),
                        Poll::Ready(None) => Poll::Ready(Event::Closed),
                        // Frames read during this poll may have tripped the watch.
                        Poll::Pending => match tripped.get() {
                            Some(why) => Poll::Ready(Event::Abuse(why)),
                            None => Poll::Pending,
                        },
                    }
                }),
            )
            .await;
        match event {
            Ok(Event::Stream(req, respond)) => {
                conn.open.set(conn.open.get() + 1);
                conn.last_active.set(now_ms());
                tokio::task::spawn_local(stream_task(ctx.clone(), conn.clone(), req, respond));
            }
            Ok(Event::Drain) => {
                // GOAWAY: streams already open finish, new ones go elsewhere.
                h2c.graceful_shutdown();
                shutting = true;
            }
            Err(()) if shutting => {}
            Err(()) => {
                if should_go_away(&ctx, &conn) {
                    h2c.graceful_shutdown();
                    shutting = true;
                }
            }
            Ok(Event::Abuse(why)) => {
                stats::inc(&guard.counters.local().h2_abuse_closes);
                log::warn(format_args!(
                    "client {}: HTTP/2 connection closed with ENHANCE_YOUR_CALM: {why}",
                    conn.peer
                ));
                h2c.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                let _ = ctx
                    .idle_watch
                    .within(now_ms() + 1000, poll_fn(|cx| h2c.poll_closed(cx)))
                    .await;
                break;
            }
            Ok(Event::Error(e)) => {
                connection_error(&guard, &conn, &e);
                break;
            }
            Ok(Event::Closed) => break,
        }
    }
    drop(h2c);
    drop(guard);
}

fn connection_error(guard: &ConnGuard, conn: &Conn, e: &h2::Error) {
    if e.reason() == Some(Reason::ENHANCE_YOUR_CALM) {
        // h2's own guard: too many streams reset before they were
        // accepted, or too many streams it had to reset.
        stats::inc(&guard.counters.local().h2_abuse_closes);
        log::warn(format_args!(
            "client {}: HTTP/2 connection closed with ENHANCE_YOUR_CALM: {e}",
            conn.peer
        ));
    } else {
        log::debug(format_args!("client {}: HTTP/2: {e}", conn.peer));
    }
}

/// Checked every second: the connection is idle past client_idle, or a
/// reload removed its vserver or its HTTP/2.
fn should_go_away(ctx: &WorkerCtx, conn: &Conn) -> bool {
    let snap = ctx.snapshot.load();
    let idle = conn.open.get() == 0
        && now_ms().saturating_sub(conn.last_active.get()) >= snap.settings.client_idle_ms;
    let gone = !speaks_h2(&snap, conn);
    if gone {
        log::info(format_args!(
            "client {}: GOAWAY: a reload removed this vserver or its HTTP/2",
            conn.peer
        ));
    }
    idle || gone
}

/// Whether the connection's vserver still exists and still offers HTTP/2
/// the way this connection came in.
fn speaks_h2(snap: &crate::config::snapshot::Snapshot, conn: &Conn) -> bool {
    match snap.vserver_for(&conn.listen) {
        None => false,
        Some(vs) => match &vs.tls {
            Some(t) if conn.tls => t.config.alpn_protocols.iter().any(|p| p == b"h2"),
            None if !conn.tls => vs.h2c,
            _ => false,
        },
    }
}

/// Reads until `buf` holds the 24 preface bytes; false when something else came.
async fn read_preface(stream: &mut ClientStream, buf: &mut BytesMut) -> bool {
    use tokio::io::AsyncReadExt;
    loop {
        let n = buf.len().min(PREFACE_LEN);
        if buf[..n] != PREFACE[..n] {
            return false;
        }
        if n == PREFACE_LEN {
            return true;
        }
        buf.reserve(256);
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
}

/// Closes our side, then reads and drops what the client still sends for
/// a moment: closing with unread bytes would reset the connection.
async fn lingering_close(ctx: &WorkerCtx, mut stream: ClientStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = now_ms() + 1000;
    let _ = ctx.idle_watch.within(deadline, stream.shutdown()).await;
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match ctx
            .idle_watch
            .within(deadline, stream.read(&mut sink))
            .await
        {
            Ok(Ok(n)) if n > 0 => {}
            _ => break,
        }
    }
}

/// The client's side of the wire: bytes read before the switch are served
/// first, and every frame header read is shown to the watch.
struct Wire {
    io: ClientStream,
    replay: BytesMut,
    watch: FrameWatch,
    /// Output gathered for the next write, and how much of it is written.
    out: Vec<u8>,
    out_at: usize,
    /// A flush waits for the end of the worker's turn.
    hold: Hold,
}

impl AsyncRead for Wire {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.watch.tripped.get().is_some() {
            // Nothing more is read from an abusive client; the connection
            // task sees the flag and ends the connection.
            return Poll::Pending;
        }
        let before = buf.filled().len();
        if !this.replay.is_empty() {
            let n = this.replay.len().min(buf.remaining());
            buf.put_slice(&this.replay.split_to(n));
        } else {
            ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        }
        this.watch.scan(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

/// Writes are gathered in `out` and leave in one write per batch: a flush
/// waits for the end of the worker's turn (`crate::turn`), when every
/// stream whose response arrived meanwhile has added its frames. Without it
/// every response costs the client a syscall and a TLS record of its own,
/// and the client answers in as many small reads (HAProxy's mux gathers
/// streams the same way).
impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.out.len() >= OUT_MAX {
            ready!(this.write_out(cx))?;
        }
        let n = buf.len().min(OUT_MAX.saturating_sub(this.out.len()).max(1));
        this.out.extend_from_slice(&buf[..n]);
        crate::turn::grew();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.out.is_empty() && this.out.len() < OUT_MAX / 2 && !this.hold.ready(cx) {
            return Poll::Pending;
        }
        ready!(this.write_out(cx))?;
        this.hold.clear();
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.write_out(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// Gathered output is written once it reaches this, or at the batch's flush.
const OUT_MAX: usize = 64 * 1024;

impl Wire {
    /// Writes everything gathered (Pending until the socket took it all).
    fn write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_at < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.out_at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_at += n;
        }
        self.out.clear();
        self.out_at = 0;
        if self.out.capacity() > OUT_MAX * 2 {
            self.out = Vec::new();
        }
        Poll::Ready(Ok(()))
    }
}

/// Keeps the connection's open-stream count right.
struct OpenStream(Rc<Conn>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get() - 1);
        self.0.last_active.set(now_ms());
    }
}

async fn stream_task(
    ctx: Rc<WorkerCtx>,
    conn: Rc<Conn>,
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let _open = OpenStream(conn.clone());
    let snap = ctx.snapshot.load_full();
    let st = &snap.settings;
    let Some(vs) = snap.vserver_for(&conn.listen).cloned() else {
        // The vserver was removed by a reload: the client may retry elsewhere.
        respond.send_reset(Reason::REFUSED_STREAM);
        return;
    };
    let vc = vs.counters.local();
    stats::inc(&vc.h2_streams);
    let (parts, body) = req.into_parts();
    let limits = Limits {
        max_request_line: st.max_request_line,
        max_header_bytes: st.max_header_bytes,
        max_headers: st.max_headers,
    };
    let req = match h2conv::request_from_h2(&parts, body.is_end_stream(), &limits) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: HTTP/2 request refused: {} ({})",
                vs.name, conn.peer, e.reason, e.status
            ));
            let (response, body) = responses::local_error(e.status, e.reason);
            send_local(&mut respond, &vs, &Local { response, body });
            return;
        }
    };
    let subject = vs
        .tls
        .as_ref()
        .and_then(|t| t.client_subject_header.as_ref())
        .and(conn.client_subject.as_deref());
    let mut x = Exchange::new(&ctx, &vs, st, conn.peer, conn.tls, subject);
    x.facts.http2 = true;
    x.facts.tls = conn.tls_info;
    let mut client = H2Client::new(&mut respond, body);
    // Boxed: the exchange's future is several KB, and a task's future is
    // moved (copied whole) as it is spawned; this one is made in place.
    Box::pin(pipeline::run(&mut x, &mut client, req)).await;
}
