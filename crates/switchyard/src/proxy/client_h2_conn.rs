//! The HTTP/2 front end: a client connection that chose "h2" by ALPN, or
//! sent the HTTP/2 preface on a vserver with `h2c = true`.
//!
//! The framing, HPACK and flow control are our own (`http2::server`, a
//! state machine without IO); this file moves its bytes and serves each
//! stream in a task of its own on the worker: its head becomes the neutral
//! request (`http::h2_message`) and goes through the same exchange, hooks,
//! pools and balancers as an HTTP/1 request (`exchange::run`), so a policy,
//! an edit or a check means the same thing whichever protocol the client
//! spoke. Responses are encoded straight into the connection's output,
//! which leaves in one write at the end of the worker's turn (`turn`).
//!
//! WebSocket over HTTP/2 (RFC 8441): where a vserver has an HTTP/1.1 pool,
//! SETTINGS_ENABLE_CONNECT_PROTOCOL is announced, and an extended CONNECT
//! becomes the GET Upgrade an HTTP/1.1 member expects
//! (`h2_message::extended_connect_from_wire`); the same exchange runs it, and
//! a 101 turns its stream into a tunnel (`tunnel::run_h2`).
//!
//! Abuse the protocol allows but no client needs (CVE-2023-44487 rapid
//! reset, SETTINGS/PING floods, empty frames) is counted on the wire by
//! `shield::h2flood::FrameWatch`, which sees every frame header the client
//! sends; past the budget the connection ends with
//! GOAWAY(ENHANCE_YOUR_CALM), like HAProxy's "glitches". Header-size
//! attacks (HPACK bombs, CONTINUATION floods) are bounded by
//! SETTINGS_MAX_HEADER_LIST_SIZE while decoding, and by the size a header
//! block may reach before it is decoded.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::client_h2_exchange::{send_local, H2Client};
use super::client_h2_stream::{Shared, StreamRef};
use super::conn::ConnGuard;
use super::ctx::WorkerCtx;
use super::exchange::Exchange;
use super::hooks::Local;
use super::pipeline;
use super::stream::ClientStream;
use crate::clock::now_ms;
use crate::http::h2_message;
use crate::http::head::{HeadError, Limits};
use crate::http::responses;
use crate::http2::frame::{code, PREFACE};
use crate::http2::server;
use crate::log;
use crate::shield::h2flood::FrameWatch;
use crate::stats;
use crate::turn::Hold;

/// The first line of the client preface, as the HTTP/1 head reader sees it
/// ("PRI * HTTP/2.0" and an empty line); "SM\r\n\r\n" follows.
pub const PREFACE_HEAD: &[u8] = b"PRI * HTTP/2.0\r\n\r\n";
const PREFACE_LEN: usize = PREFACE.len();

/// What the streams of one connection share besides the protocol state.
struct Conn {
    peer: SocketAddr,
    listen: SocketAddr,
    tls: bool,
    client_cert: Option<std::sync::Arc<crate::tls::ClientCert>>,
    tls_info: Option<crate::accesslog::TlsInfo>,
    /// What the script's connection events chose for its requests.
    script: Option<Rc<super::conn::ConnChoice>>,
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
        client_cert: stream.client_cert().cloned(),
        tls_info: stream.tls_info(),
        script: guard.script.clone(),
        last_active: Cell::new(now_ms()),
    });
    tokio::task::spawn_local(run(ctx, stream, replay, conn, guard));
}

/// How a connection's driver stopped.
enum End {
    /// The client closed, or the socket failed.
    Closed,
    /// A protocol error, or abuse the flood watch saw
    /// (ENHANCE_YOUR_CALM): GOAWAY with its code, then close.
    Error(server::ConnError),
    /// The client stopped reading for `client_send`.
    SendTimeout,
}

/// Serves the connection until it ends: reads frames, starts a task per
/// stream, writes what the streams produced; GOAWAY on drain, on idle, on
/// a reload that removed HTTP/2, and (ENHANCE_YOUR_CALM) on abuse.
async fn run(
    ctx: Rc<WorkerCtx>,
    stream: ClientStream,
    replay: BytesMut,
    conn: Rc<Conn>,
    guard: ConnGuard,
) {
    let header_ms = ctx.snapshot.load().settings.client_header_ms;
    let Some((mut wire, shared)) = open(&ctx, stream, replay, &conn, &guard).await else {
        return;
    };
    // Frames that came with the preface.
    if let Err(e) = wire.take_frames(&ctx, &conn, &shared) {
        return finish(&ctx, &guard, &conn, &shared, wire, End::Error(e)).await;
    }
    // The client must say SETTINGS within the header timeout.
    let mut deadline = now_ms() + header_ms;
    let mut shutting = false;
    let end = loop {
        // Woken at least every second to notice an idle connection, or a
        // reload that removed the vserver or its HTTP/2.
        let polled = ctx
            .idle_watch
            .within(
                deadline.min(now_ms() + 1000),
                poll_fn(|cx| {
                    if !shutting && ctx.draining() {
                        return Poll::Ready(None);
                    }
                    wire.drive(cx, &ctx, &conn, &shared).map(Some)
                }),
            )
            .await;
        match polled {
            Ok(Some(end)) => break end,
            Ok(None) => {
                // GOAWAY: streams already open finish, new ones go elsewhere.
                shared.borrow_mut().go_away(code::NO_ERROR);
                shutting = true;
            }
            Err(()) if !shared.borrow().settings_seen() => {
                if now_ms() >= deadline {
                    break End::Closed;
                }
                continue;
            }
            Err(()) => {
                deadline = u64::MAX;
                if let Some(end) = each_second(&ctx, &guard, &conn, &shared, &wire, &mut shutting) {
                    break end;
                }
            }
        }
        if shutting && shared.borrow().open_streams() == 0 && shared.borrow().out.is_empty() {
            break End::Closed;
        }
    };
    finish(&ctx, &guard, &conn, &shared, wire, end).await;
}

/// Checks the client's preface (within the header timeout) and sets the
/// connection up; None when it is not HTTP/2 (closed cleanly).
async fn open(
    ctx: &WorkerCtx,
    mut stream: ClientStream,
    mut replay: BytesMut,
    conn: &Conn,
    guard: &ConnGuard,
) -> Option<(Wire, Shared)> {
    let (limits, header_ms) = {
        let snap = ctx.snapshot.load();
        (snap.settings.http2.clone(), snap.settings.client_header_ms)
    };
    // The preface is checked before anything is sent, so that a client
    // that does not speak HTTP/2 gets a clean close (FIN after its bytes
    // are read) rather than a reset.
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
    let mut watch = FrameWatch::new(
        limits.max_client_resets,
        limits.max_control_frames,
        limits.abuse_window_ms,
        Rc::new(Cell::new(None)),
    );
    watch.scan(&replay);
    let _ = replay.split_to(PREFACE_LEN);
    let websocket = ctx
        .snapshot
        .load()
        .vserver_for(&conn.listen)
        .is_some_and(|vs| pipeline::tunnels_websocket(vs));
    let shared: Shared = Rc::new(RefCell::new(server::Conn::new(server::Config {
        max_concurrent_streams: limits.max_concurrent_streams,
        stream_window: limits.stream_window,
        connection_window: limits.connection_window,
        max_frame_size: limits.max_frame_size,
        max_header_list_size: limits.max_header_list_size,
        enable_connect_protocol: websocket,
    })));
    let wire = Wire {
        io: stream,
        rbuf: replay,
        watch,
        hold: Hold::default(),
        eof: false,
        stalled_since: None,
        unflushed: false,
    };
    Some((wire, shared))
}

/// The once-a-second checks of a connection past its SETTINGS: request
/// bodies too slow, a client that stopped reading (the connection, or
/// streams whose window it keeps shut), idle or a reload (GOAWAY), and the
/// end of a GOAWAY once its streams are done.
fn each_second(
    ctx: &WorkerCtx,
    guard: &ConnGuard,
    conn: &Conn,
    shared: &Shared,
    wire: &Wire,
    shutting: &mut bool,
) -> Option<End> {
    let (send_ms, pace) = {
        let snap = ctx.snapshot.load();
        let body_ms = snap.settings.client_body_ms;
        let pace = snap.vserver_for(&conn.listen).map_or(
            crate::http::body::BodyPace::gap(std::time::Duration::from_millis(body_ms)),
            |vs| vs.body_pace(body_ms),
        );
        (snap.settings.client_send_ms, pace)
    };
    // Checked once a second, so a slow body ends up to a second after its
    // bound; each stream on its own: the connection's other streams go on.
    let slow = shared.borrow_mut().expire_readers(now_ms(), &pace);
    if slow > 0 {
        log::debug(format_args!(
            "client {}: {slow} HTTP/2 request bod(ies) too slow (client_body, request_body)",
            conn.peer
        ));
    }
    let before = now_ms().saturating_sub(send_ms);
    if wire.stalled_since.is_some_and(|t| t <= before) {
        return Some(End::SendTimeout);
    }
    let cut = shared.borrow_mut().expire_stalled(before);
    if cut > 0 {
        stats::add(&guard.counters.local().send_timeouts, cut as u64);
        log::debug(format_args!(
            "client {}: {cut} HTTP/2 stream(s) reset: the client kept its window shut (client_send)",
            conn.peer
        ));
    }
    if *shutting {
        if shared.borrow().open_streams() == 0 {
            return Some(End::Closed);
        }
    } else if should_go_away(ctx, conn, shared) {
        shared.borrow_mut().go_away(code::NO_ERROR);
        *shutting = true;
    }
    None
}

/// Ends the connection: GOAWAY with the error's code when there is one,
/// what is still to send goes out (within a second), and every stream
/// still open sees a reset.
async fn finish(
    ctx: &WorkerCtx,
    guard: &ConnGuard,
    conn: &Conn,
    shared: &Shared,
    mut wire: Wire,
    end: End,
) {
    match end {
        End::Closed => {}
        End::SendTimeout => {
            stats::inc(&guard.counters.local().send_timeouts);
            log::debug(format_args!(
                "client {}: HTTP/2 connection closed: the client stopped reading (client_send)",
                conn.peer
            ));
            // Nothing more can be written to it.
            shared.borrow_mut().reset_all();
            drop(wire);
            return;
        }
        End::Error(e) => {
            if e.code == code::ENHANCE_YOUR_CALM {
                stats::inc(&guard.counters.local().h2_abuse_closes);
                log::warn(format_args!(
                    "client {}: HTTP/2 connection closed with ENHANCE_YOUR_CALM: {}",
                    conn.peer, e.why
                ));
            } else {
                log::debug(format_args!("client {}: HTTP/2: {}", conn.peer, e.why));
            }
            shared.borrow_mut().go_away(e.code);
        }
    }
    shared.borrow_mut().reset_all();
    let _ = ctx
        .idle_watch
        .within(now_ms() + 1000, poll_fn(|cx| wire.write_all(cx, shared)))
        .await;
    lingering_close(ctx, wire.io).await;
}

/// The flood watch tripped: the connection ends with ENHANCE_YOUR_CALM.
fn abuse(why: &'static str) -> End {
    End::Error(server::ConnError {
        code: code::ENHANCE_YOUR_CALM,
        why,
    })
}

/// Checked every second: the connection is idle past client_idle, or a
/// reload removed its vserver or its HTTP/2.
fn should_go_away(ctx: &WorkerCtx, conn: &Conn, shared: &Shared) -> bool {
    let snap = ctx.snapshot.load();
    let idle = shared.borrow().open_streams() == 0
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

/// The client's side of the wire: bytes read wait in `rbuf` until they
/// make whole frames; every frame header read is shown to the watch.
struct Wire {
    io: ClientStream,
    rbuf: BytesMut,
    watch: FrameWatch,
    /// A write waits for the end of the worker's turn.
    hold: Hold,
    eof: bool,
    /// Since when (`clock` ms) output has waited for the socket.
    stalled_since: Option<u64>,
    /// Written since the last complete flush (TLS may hold records).
    unflushed: bool,
}

/// Reading stops while this much output waits for a client that does not
/// read (PING or SETTINGS answers would pile up otherwise).
const READ_PAUSE: usize = 1 << 20;
/// Gathered output is written at once past this, else at the turn's end.
const WRITE_NOW: usize = 32 * 1024;

impl Wire {
    /// Moves bytes both ways until neither can move; Ready when the
    /// connection is over.
    fn drive(
        &mut self,
        cx: &mut Context<'_>,
        ctx: &Rc<WorkerCtx>,
        conn: &Rc<Conn>,
        shared: &Shared,
    ) -> Poll<End> {
        loop {
            let mut moved = false;
            if let Some(why) = self.watch.tripped.get() {
                return Poll::Ready(abuse(why));
            }
            if !self.eof && shared.borrow().out.len() < READ_PAUSE {
                match self.poll_read(cx) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => self.eof = true,
                    Poll::Ready(Ok(_)) => {
                        moved = true;
                        if let Some(why) = self.watch.tripped.get() {
                            return Poll::Ready(abuse(why));
                        }
                        if let Err(e) = self.take_frames(ctx, conn, shared) {
                            return Poll::Ready(End::Error(e));
                        }
                    }
                    Poll::Pending => {}
                }
            }
            let pending = shared.borrow().out.len();
            if pending > 0 && (pending >= WRITE_NOW || self.hold.ready(cx)) {
                match self.poll_write_some(cx, shared) {
                    Poll::Ready(Ok(n)) => moved |= n > 0,
                    Poll::Ready(Err(_)) => return Poll::Ready(End::Closed),
                    Poll::Pending => {}
                }
            }
            if self.unflushed && shared.borrow().out.is_empty() {
                if let Poll::Ready(Err(_)) = self.poll_flush_io(cx) {
                    return Poll::Ready(End::Closed);
                }
            }
            if self.eof {
                // The client closed: nothing it asked can still reach it.
                return Poll::Ready(End::Closed);
            }
            if !moved {
                break;
            }
        }
        let mut c = shared.borrow_mut();
        if self.rbuf.is_empty() && self.rbuf.capacity() > 0 && c.open_streams() == 0 {
            // Nothing in flight: an idle connection holds no read buffer.
            self.rbuf = BytesMut::new();
        }
        if !c.owner.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            c.owner = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.rbuf.reserve(16 * 1024);
        let before = self.rbuf.len();
        let spare = self.rbuf.spare_capacity_mut();
        let mut rb = ReadBuf::uninit(spare);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        // SAFETY: `poll_read` initialised the first `n` bytes of the spare
        // capacity (ReadBuf tracks it), so they may join the buffer.
        unsafe { self.rbuf.set_len(before + n) };
        self.watch.scan(&self.rbuf[before..]);
        Poll::Ready(Ok(n))
    }

    /// Hands the frames read to the protocol and starts a task for each
    /// stream they opened.
    fn take_frames(
        &mut self,
        ctx: &Rc<WorkerCtx>,
        conn: &Rc<Conn>,
        shared: &Shared,
    ) -> Result<(), server::ConnError> {
        let r = shared.borrow_mut().recv(&mut self.rbuf);
        loop {
            let Some(s) = shared.borrow_mut().accepted.pop_front() else {
                break;
            };
            conn.last_active.set(now_ms());
            // Boxed: spawning moves a task's future whole, twice, and this
            // one is as large as its largest state; a box moves as a
            // pointer (client_h3_conn.rs does the same; callgrind: 760 fewer
            // instructions of memcpy per request, 130 fewer in all with the
            // allocation).
            let task = Box::pin(stream_task(ctx.clone(), conn.clone(), shared.clone(), s));
            tokio::task::spawn_local(task);
        }
        r
    }

    /// One write of what is gathered.
    fn poll_write_some(
        &mut self,
        cx: &mut Context<'_>,
        shared: &Shared,
    ) -> Poll<io::Result<usize>> {
        let written = {
            let c = shared.borrow();
            Pin::new(&mut self.io).poll_write(cx, &c.out)
        };
        let n = match written {
            Poll::Ready(r) => r?,
            Poll::Pending => {
                self.stalled_since.get_or_insert_with(now_ms);
                return Poll::Pending;
            }
        };
        self.stalled_since = None;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        shared.borrow_mut().consumed(n);
        if shared.borrow().out.is_empty() {
            self.hold.clear();
            self.unflushed = true;
        }
        Poll::Ready(Ok(n))
    }

    /// Pushes out what TLS still holds once our output is all written:
    /// a write may leave records behind when the socket is full, and
    /// nothing else would send them (a no-op on TCP).
    fn poll_flush_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.unflushed {
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Ready(r) => {
                self.unflushed = false;
                self.stalled_since = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                self.stalled_since.get_or_insert_with(now_ms);
                Poll::Pending
            }
        }
    }

    /// Writes everything gathered (the connection is ending).
    fn write_all(&mut self, cx: &mut Context<'_>, shared: &Shared) -> Poll<()> {
        while !shared.borrow().out.is_empty() {
            match ready!(self.poll_write_some(cx, shared)) {
                Ok(_) => {}
                Err(_) => return Poll::Ready(()),
            }
        }
        let _ = ready!(self.poll_flush_io(cx));
        Poll::Ready(())
    }
}

async fn stream_task(ctx: Rc<WorkerCtx>, conn: Rc<Conn>, shared: Shared, new: server::NewStream) {
    let stream = StreamRef::new(shared, new.id);
    let snap = ctx.snapshot.load_full();
    let st = &snap.settings;
    let Some(vs) = snap.vserver_for(&conn.listen).cloned() else {
        // The vserver was removed by a reload: the client may retry elsewhere.
        stream.reset(code::REFUSED_STREAM);
        return;
    };
    let vc = vs.counters.local();
    stats::inc(&vc.h2_streams);
    let limits = Limits {
        max_request_line: st.max_request_line,
        max_header_bytes: st.max_header_bytes,
        max_headers: st.max_headers,
    };
    let tunnel = new.head.protocol.is_some();
    let converted = if new.head.too_large {
        Err(HeadError {
            status: 431,
            reason: "request header fields too large",
        })
    } else if let Some(protocol) = &new.head.protocol {
        let h = &new.head;
        let target = (h.path.clone(), h.authority.clone());
        h2_message::extended_connect_from_wire(protocol, target, &h.fields, &limits)
    } else {
        let h = &new.head;
        let pseudo = (
            h.method.clone().unwrap_or_default(),
            h.path.clone(),
            h.authority.clone(),
        );
        h2_message::request_from_wire(pseudo, &h.fields, new.end_stream, &limits)
    };
    let req = match converted {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: HTTP/2 request refused: {} ({})",
                vs.name, conn.peer, e.reason, e.status
            ));
            let (response, body) = responses::local_error(e.status, e.reason);
            send_local(&stream, &vs, &Local { response, body }).await;
            return;
        }
    };
    drop(new);
    let subject = vs
        .tls
        .as_ref()
        .and_then(|t| t.client_subject_header.as_ref())
        .and(conn.client_cert.as_deref().map(|c| c.subject.as_str()));
    let mut x = Exchange::new(&ctx, &vs, st, (conn.peer, conn.listen), conn.tls, subject);
    x.facts.http2 = true;
    x.facts.tls = conn.tls_info;
    if vs.script.is_some() {
        x.client_cert = conn.client_cert.clone();
    }
    if let Some(choice) = conn.script.as_deref() {
        super::conn_scripting::apply(&mut x, choice);
    }
    let mut client = if tunnel {
        H2Client::tunnel(&stream)
    } else {
        H2Client::new(&stream)
    };
    // Boxed: the exchange's future is several KB, and a task's future is
    // moved (copied whole) as it is spawned; this one is made in place.
    Box::pin(pipeline::run(&mut x, &mut client, req)).await;
    conn.last_active.set(now_ms());
}
