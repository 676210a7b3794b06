//! The HTTP/2 front end: a client connection that chose "h2" by ALPN, or
//! sent the HTTP/2 preface on a vserver with `h2c = true`.
//!
//! The h2 crate does the framing, HPACK and flow control. Each stream runs
//! in a task of its own on the worker, and is proxied onto the same
//! HTTP/1.1 pools, idle connections and balancers as HTTP/1 requests:
//! the stream's head is restated as an HTTP/1.1 head and goes through the
//! same strict parser, router and forwarding code, so a policy, an edit or
//! a check means the same thing whichever protocol the client spoke.
//!
//! Abuse the protocol allows but no client needs (CVE-2023-44487 rapid
//! reset, SETTINGS/PING floods, empty frames) is counted on the wire by
//! `FrameWatch`, which sees every frame header the client sends; past the
//! budget the connection ends with GOAWAY(ENHANCE_YOUR_CALM), like
//! HAProxy's "glitches". Header-size attacks (HPACK bombs, CONTINUATION
//! floods) are bounded by SETTINGS_MAX_HEADER_LIST_SIZE, which h2 enforces
//! while decoding.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::forward::{self, ClientFraming, Forwarding};
use super::h2_upstream;
use super::upstream;
use super::{
    connect_failed, head_read_failure, hsts, https_location, member_response_failed,
    passive_result, persistence_cookie, read_head, request_hash, route, sticky_member,
    ClientStream, ConnGuard, Inflight, WorkerCtx, UPSTREAM_READ,
};
use crate::balance::Tried;
use crate::clock::now_ms;
use crate::config::snapshot::{Action, Http2Settings, Pool, Settings, UpstreamProtocol, VServer};
use crate::http::body::{self, BodyError};
use crate::http::head::{self, Framing, Method, Request};
use crate::http::responses;
use crate::log;
use crate::stats::{self, status_class};

/// The first line of the client preface, as the HTTP/1 head reader sees it
/// ("PRI * HTTP/2.0" and an empty line); "SM\r\n\r\n" follows.
pub const PREFACE_HEAD: &[u8] = b"PRI * HTTP/2.0\r\n\r\n";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PREFACE_LEN: usize = PREFACE.len();

/// What the streams of one connection share.
struct Conn {
    peer: SocketAddr,
    listen: SocketAddr,
    tls: bool,
    client_subject: Option<String>,
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

async fn run(
    ctx: Rc<WorkerCtx>,
    mut stream: ClientStream,
    mut replay: BytesMut,
    conn: Rc<Conn>,
    guard: ConnGuard,
) {
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
        lingering_close(&ctx, stream).await;
        return;
    }
    stats::inc(&guard.counters.local().h2_connections);
    let tripped = Rc::new(Cell::new(None));
    let wire = Wire {
        io: stream,
        replay,
        watch: FrameWatch::new(&limits, tripped.clone()),
        out: Vec::new(),
        out_at: 0,
        deferred: false,
    };
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_window_size(limits.stream_window)
        .initial_connection_window_size(limits.connection_window)
        .max_frame_size(limits.max_frame_size)
        .max_header_list_size(limits.max_header_list_size);
    let mut h2c = match ctx
        .idle_watch
        .within(now_ms() + header_ms, builder.handshake::<_, Bytes>(wire))
        .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            log::debug(format_args!(
                "client {}: HTTP/2 handshake failed: {e}",
                conn.peer
            ));
            return;
        }
        Err(()) => return,
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
                let snap = ctx.snapshot.load();
                let idle = conn.open.get() == 0
                    && now_ms().saturating_sub(conn.last_active.get())
                        >= snap.settings.client_idle_ms;
                let gone = !speaks_h2(&snap, &conn);
                if gone {
                    log::info(format_args!(
                        "client {}: GOAWAY: a reload removed this vserver or its HTTP/2",
                        conn.peer
                    ));
                }
                if idle || gone {
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
                if e.reason() == Some(Reason::ENHANCE_YOUR_CALM) {
                    // h2's own guard: too many streams reset before they
                    // were accepted, or too many streams it had to reset.
                    stats::inc(&guard.counters.local().h2_abuse_closes);
                    log::warn(format_args!(
                        "client {}: HTTP/2 connection closed with ENHANCE_YOUR_CALM: {e}",
                        conn.peer
                    ));
                } else {
                    log::debug(format_args!("client {}: HTTP/2: {e}", conn.peer));
                }
                break;
            }
            Ok(Event::Closed) => break,
        }
    }
    drop(h2c);
    drop(guard);
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
    /// This batch's flush already let the other ready tasks run once.
    deferred: bool,
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

/// Writes are gathered in `out` and leave in one write per batch: the first
/// flush after new bytes re-queues the connection task behind the tasks
/// already ready (streams whose responses just arrived) instead of writing,
/// so their frames join the same write. Without it every response costs the
/// client a syscall of its own (HAProxy's mux gathers streams the same way).
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
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.out.is_empty() && !this.deferred && this.out.len() < OUT_MAX / 2 {
            this.deferred = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.write_out(cx))?;
        this.deferred = false;
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

/// Counts the frames a client sends, from their 9-byte headers, and trips
/// when a budget per window is spent.
struct FrameWatch {
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
    window_start: u64,
    resets: u32,
    control: u32,
    max_resets: u32,
    max_control: u32,
    window_ms: u64,
    tripped: Rc<Cell<Option<&'static str>>>,
}

mod frame {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const CONTINUATION: u8 = 0x9;
    pub const END_STREAM: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
}

impl FrameWatch {
    fn new(l: &Http2Settings, tripped: Rc<Cell<Option<&'static str>>>) -> FrameWatch {
        FrameWatch {
            preface_left: PREFACE_LEN,
            head: [0; 9],
            head_len: 0,
            skip: 0,
            window_start: now_ms(),
            resets: 0,
            control: 0,
            max_resets: l.max_client_resets,
            max_control: l.max_control_frames,
            window_ms: l.abuse_window_ms,
            tripped,
        }
    }

    fn scan(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let n = if self.preface_left > 0 {
                let n = self.preface_left.min(data.len());
                self.preface_left -= n;
                n
            } else if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                n
            } else {
                let n = (9 - self.head_len).min(data.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&data[..n]);
                self.head_len += n;
                if self.head_len == 9 {
                    self.head_len = 0;
                    let h = self.head;
                    let len = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    self.skip = len;
                    self.frame(h[3], h[4], len);
                }
                n
            };
            data = &data[n..];
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, len: usize) {
        let now = now_ms();
        if now.saturating_sub(self.window_start) >= self.window_ms {
            self.window_start = now;
            self.resets = 0;
            self.control = 0;
        }
        match kind {
            frame::RST_STREAM => self.resets += 1,
            frame::SETTINGS | frame::PING | frame::PRIORITY => self.control += 1,
            // Empty frames that end nothing do nothing but cost work.
            frame::DATA if len == 0 && flags & frame::END_STREAM == 0 => self.control += 1,
            frame::HEADERS | frame::CONTINUATION if len == 0 && flags & frame::END_HEADERS == 0 => {
                self.control += 1
            }
            _ => {}
        }
        if self.resets > self.max_resets {
            self.tripped
                .set(Some("too many streams reset by the client (rapid reset)"));
        } else if self.control > self.max_control {
            self.tripped.set(Some(
                "too many SETTINGS/PING/PRIORITY/empty frames (control-frame flood)",
            ));
        }
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
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let te_trailers = parts.headers.get("te").is_some_and(|v| v == "trailers");
    let req = match restate(&parts, body.is_end_stream(), st) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: HTTP/2 request refused: {} ({})",
                vs.name, conn.peer, e.reason, e.status
            ));
            send_local(
                &mut respond,
                &vs,
                &responses::error(e.status, e.reason, false),
            );
            return;
        }
    };
    stats::inc(&vc.requests);
    let decision = route::route(&vs, &req, conn.peer.ip());
    let pool = match decision.action {
        Some(Action::Pool(p)) => p.clone(),
        Some(Action::Redirect { location, status }) => {
            let mut extra = vec![("location", location.as_str())];
            extra.extend(hsts(&vs));
            let bytes = responses::simple(*status, "text/plain; charset=utf-8", b"", false, &extra);
            send_local(&mut respond, &vs, &bytes);
            return;
        }
        Some(Action::RedirectHttps { status, port }) => {
            let bytes = match https_location(&req, *port) {
                Some(location) => {
                    let mut extra = vec![("location", location.as_str())];
                    extra.extend(hsts(&vs));
                    responses::simple(*status, "text/plain; charset=utf-8", b"", false, &extra)
                }
                None => {
                    stats::inc(&vc.bad_requests);
                    responses::error(400, "no valid Host to redirect to", false)
                }
            };
            send_local(&mut respond, &vs, &bytes);
            return;
        }
        Some(Action::Respond {
            status,
            body,
            content_type,
        }) => {
            let extra: Vec<_> = hsts(&vs).into_iter().collect();
            let bytes = responses::simple(*status, content_type, body, false, &extra);
            send_local(&mut respond, &vs, &bytes);
            return;
        }
        None => match &vs.default_pool {
            Some(p) => p.clone(),
            None => {
                stats::inc(&vc.no_pool);
                let why = format!(
                    "no policy of vserver \"{}\" matched and it has no default_pool",
                    vs.name
                );
                send_local(&mut respond, &vs, &responses::error(503, &why, false));
                return;
            }
        },
    };
    if pool.protocol == UpstreamProtocol::H2 {
        let client = h2_upstream::ClientSide {
            peer: conn.peer,
            tls: conn.tls,
            client_subject: conn.client_subject.as_deref(),
            te_trailers,
        };
        h2_upstream::relay(
            &ctx,
            &client,
            &vs,
            &pool,
            &req,
            &decision,
            body,
            &mut respond,
            st,
        )
        .await;
    } else {
        let body = H2Body::new(body);
        proxy(
            &ctx,
            &conn,
            &vs,
            &pool,
            &req,
            &decision,
            body,
            &mut respond,
            st,
        )
        .await;
    }
    vs.latency
        .local()
        .record(started.elapsed().as_micros() as u64);
}

/// The stream's head restated as an HTTP/1.1 head and parsed by the same
/// strict parser as HTTP/1 requests. `:authority` becomes Host, split
/// cookie fields are joined (RFC 9113 8.2.3), and a body without a length
/// is sent chunked.
fn restate(
    parts: &http::request::Parts,
    end_stream: bool,
    st: &Settings,
) -> Result<Request, head::HeadError> {
    let refuse = |status, reason| head::HeadError { status, reason };
    if parts.method == http::Method::CONNECT {
        return Err(refuse(501, "CONNECT is not supported over HTTP/2"));
    }
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut raw = Vec::with_capacity(256);
    raw.extend_from_slice(parts.method.as_str().as_bytes());
    raw.push(b' ');
    raw.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    raw.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(a) = authority {
        line(&mut raw, b"host", a.as_str().as_bytes());
    }
    let mut cookie: Option<Vec<u8>> = None;
    let mut has_length = false;
    for (name, value) in &parts.headers {
        let n = name.as_str();
        match n {
            "host" if authority.is_some() => continue,
            // h2 has already refused the other connection-specific fields;
            // "te: trailers" means nothing to an HTTP/1.1 member.
            "te" => continue,
            "cookie" => {
                let c = cookie.get_or_insert_with(Vec::new);
                if !c.is_empty() {
                    c.extend_from_slice(b"; ");
                }
                c.extend_from_slice(value.as_bytes());
                continue;
            }
            "content-length" => has_length = true,
            _ => {}
        }
        line(&mut raw, n.as_bytes(), value.as_bytes());
    }
    if let Some(c) = cookie {
        line(&mut raw, b"cookie", &c);
    }
    if !has_length {
        if !end_stream {
            line(&mut raw, b"transfer-encoding", b"chunked");
        } else if matches!(
            parts.method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        ) {
            line(&mut raw, b"content-length", b"0");
        }
    }
    raw.extend_from_slice(b"\r\n");
    if raw.len() > st.max_header_bytes + st.max_request_line {
        return Err(refuse(431, "request header fields too large"));
    }
    let req = head::parse_request(Bytes::from(raw), st.max_headers)?;
    if req.method == Method::Connect {
        return Err(refuse(501, "CONNECT is not supported over HTTP/2"));
    }
    Ok(req)
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// An HTTP/1.1 response head (as `forward` or `responses` write them)
/// turned into an HTTP/2 one: the status and the fields, minus those
/// HTTP/2 forbids. None when a field is not valid HTTP/2.
pub(super) fn h2_head(h1: &[u8]) -> Option<(http::Response<()>, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; head::MAX_HEADERS_CAP];
    let mut r = httparse::Response::new(&mut fields);
    let httparse::Status::Complete(len) = r.parse(h1).ok()? else {
        return None;
    };
    let mut resp = http::Response::builder().status(r.code?);
    for f in r.headers.iter() {
        if head::is_hop_by_hop(f.name.as_bytes()) || f.name.eq_ignore_ascii_case("connection") {
            continue;
        }
        let name = http::HeaderName::from_bytes(f.name.as_bytes()).ok()?;
        let value = http::HeaderValue::from_bytes(f.value).ok()?;
        resp = resp.header(name, value);
    }
    Some((resp.body(()).ok()?, len))
}

/// Sends a response the proxy answers itself (an HTTP/1.1 message from
/// `responses`) on the stream, and counts it.
pub(super) fn send_local(respond: &mut SendResponse<Bytes>, vs: &VServer, h1: &[u8]) {
    let Some((head, len)) = h2_head(h1) else {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return;
    };
    let status = head.status().as_u16();
    let vc = vs.counters.local();
    stats::inc(&vc.local_responses);
    stats::inc(&vc.responses[status_class(status)]);
    stats::add(&vc.bytes_out, h1.len() as u64);
    let body = &h1[len..];
    match respond.send_response(head, body.is_empty()) {
        Ok(mut s) if !body.is_empty() => {
            let _ = s.send_data(Bytes::copy_from_slice(body), true);
        }
        _ => {}
    }
}

/// Races `fut` against the client resetting the stream: None on a reset.
async fn unless_reset<F: Future>(respond: &mut SendResponse<Bytes>, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        match respond.poll_reset(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

#[allow(clippy::too_many_arguments)]
async fn proxy(
    ctx: &WorkerCtx,
    conn: &Conn,
    vs: &VServer,
    pool: &Arc<Pool>,
    req: &Request,
    decision: &route::Decision<'_>,
    mut body: H2Body,
    respond: &mut SendResponse<Bytes>,
    st: &Settings,
) {
    let vc = vs.counters.local();
    let pc = pool.counters.local();
    stats::inc(&pc.requests);
    let hash = request_hash(pool, req, conn.peer.ip());
    let sticky = sticky_member(pool, req);
    // The stream's DATA frames carry the body as it is: a length, or (sent
    // chunked to the member) everything until END_STREAM.
    let src_framing = match req.head.framing {
        Framing::Length(n) => Framing::Length(n),
        Framing::Chunked => Framing::Close,
        _ => Framing::None,
    };
    let replayable = src_framing == Framing::None && req.method.idempotent();
    let mut tried = Tried::default();
    let mut retries_left = st.retries;
    let mut stage: Vec<u8> = Vec::with_capacity(1024);
    let mut body_buf = BytesMut::new();
    let mut last_failure: Option<(u16, String)> = None;
    let fail = |respond: &mut SendResponse<Bytes>, status: u16, why: &str| {
        send_local(respond, vs, &responses::error(status, why, false));
    };

    let (idx, mut up, resp, _inflight) = loop {
        let Some(i) = pool.balancer.pick(&pool.members, sticky, hash, tried) else {
            if let Some((status, why)) = &last_failure {
                return fail(respond, *status, why);
            }
            stats::inc(&pc.no_member_available);
            let why = format!(
                "no server is available to handle this request (pool \"{}\")",
                pool.name
            );
            return fail(respond, 503, &why);
        };
        if last_failure.is_some() {
            stats::inc(&pc.retries);
        }
        tried.add(i);
        let m = &pool.members[i];
        let mc = m.counters.local();
        let inflight = Inflight::new(&m.state);
        let mut up = match ctx.idle.take(m) {
            Some(u) => {
                stats::inc(&mc.connections_reused);
                u
            }
            None => match upstream::connect(
                m,
                pool.tls.as_deref(),
                Duration::from_millis(st.upstream_connect_ms),
            )
            .await
            {
                Ok(u) => u,
                Err(e) => {
                    let (status, why) = connect_failed(vs, pool, m, &e, "");
                    if retries_left > 0 {
                        retries_left -= 1;
                        last_failure = Some((status, why));
                        continue;
                    }
                    return fail(respond, status, &why);
                }
            },
        };
        stats::inc(&mc.requests);
        stage.clear();
        {
            let fwd = Forwarding {
                client_ip: conn.peer.ip(),
                proto: if conn.tls { "https" } else { "http" },
                client_cert: vs
                    .tls
                    .as_ref()
                    .and_then(|t| t.client_subject_header.as_deref())
                    .map(|h| (h, conn.client_subject.as_deref())),
            };
            forward::request_head(
                &mut stage,
                req,
                &fwd,
                &decision.request_edits,
                req.head.framing == Framing::Chunked,
            );
        }
        let head_len = stage.len() as u64;
        let sent = body::deliver(
            &mut body,
            &mut body_buf,
            src_framing,
            &mut up.stream,
            &mut stage,
            req.head.framing == Framing::Chunked,
            Duration::from_millis(st.client_body_ms),
        )
        .await
        .0;
        match sent {
            Ok(n) => {
                stats::add(&mc.bytes_out, head_len + n);
                stats::add(&vc.bytes_in, n);
            }
            Err(BodyError::Write(e)) => {
                stats::inc(&mc.resets);
                if up.reused && replayable && retries_left > 0 {
                    retries_left -= 1;
                    tried.remove(i);
                    ctx.idle.forget(m);
                    last_failure = Some((
                        502,
                        "the server closed the connection while receiving the request".into(),
                    ));
                    continue;
                }
                log::warn(format_args!(
                    "vserver {}: member {}: sending the request failed: {e}",
                    vs.name,
                    m.label(&pool.name)
                ));
                return fail(
                    respond,
                    502,
                    "the server closed the connection while receiving the request",
                );
            }
            Err(BodyError::Timeout) => {
                return fail(respond, 408, "the request body was not received in time")
            }
            Err(BodyError::Framing(why)) => {
                stats::inc(&vc.bad_requests);
                return fail(respond, 400, why);
            }
            // The client reset the stream or sent less than its length:
            // h2 has already answered with RST_STREAM.
            Err(BodyError::Read(_) | BodyError::Truncated) => return,
        }

        let deadline = now_ms() + st.upstream_response_ms;
        if up.buf.capacity() < UPSTREAM_READ {
            up.buf.reserve(UPSTREAM_READ);
        }
        let resp = loop {
            let read = read_head(
                &mut up.stream,
                &mut up.buf,
                st.max_header_bytes,
                st.max_header_bytes,
                &ctx.idle_watch,
                deadline,
            );
            // A stream the client gave up on stops here: the member's
            // connection is closed rather than read to its end.
            let Some(read) = unless_reset(respond, read).await else {
                return;
            };
            match read {
                Ok(raw) => match head::parse_response(raw, st.max_headers, req.method) {
                    // Interim responses are not relayed over HTTP/2.
                    Ok(r) if (100..200).contains(&r.status) && r.status != 101 => {}
                    Ok(r) if r.status == 101 => {
                        break Err((502, "the server switched protocols unasked", false))
                    }
                    Ok(r) => break Ok(r),
                    Err(e) => break Err((502, e.reason, false)),
                },
                Err(e) => break Err(head_read_failure(e)),
            }
        };
        match resp {
            Ok(r) => break (i, up, r, inflight),
            Err((status, why, timeout)) => {
                let no_response_byte = member_response_failed(pool, m, &up, why, timeout);
                if no_response_byte && replayable && retries_left > 0 {
                    retries_left -= 1;
                    if up.reused {
                        tried.remove(i);
                        ctx.idle.forget(m);
                    }
                    last_failure = Some((status, why.to_string()));
                    continue;
                }
                log::warn(format_args!(
                    "vserver {}: member {}: {why}",
                    vs.name,
                    m.label(&pool.name)
                ));
                return fail(respond, status, why);
            }
        }
    };
    let m = &pool.members[idx];
    let mc = m.counters.local();
    passive_result(
        pool,
        m,
        resp.status >= 500 && pool.passive.as_ref().is_some_and(|p| p.on_5xx),
    );
    let cookie = persistence_cookie(pool, m, sticky != Some(idx));
    stage.clear();
    forward::response_head(
        &mut stage,
        &resp,
        &decision.response_edits,
        &ClientFraming {
            chunked: false,
            close: false,
            keep_alive_10: false,
            upgrade: false,
        },
        cookie.as_deref(),
    );
    stats::add(&mc.bytes_in, resp.head.raw.len() as u64);
    let Some((head, _)) = h2_head(&stage) else {
        stats::inc(&mc.bad_responses);
        return fail(respond, 502, "the server sent a field HTTP/2 cannot carry");
    };
    stats::inc(&mc.responses[status_class(resp.status)]);
    stats::inc(&vc.responses[status_class(resp.status)]);
    stats::add(&vc.bytes_out, stage.len() as u64);
    let end = resp.head.framing == Framing::None;
    let Ok(send) = respond.send_response(head, end) else {
        return;
    };
    if !end {
        let mut w = H2Writer { send };
        stage.clear();
        let r = body::deliver(
            &mut up.stream,
            &mut up.buf,
            resp.head.framing,
            &mut w,
            &mut stage,
            false,
            Duration::from_millis(st.upstream_response_ms),
        )
        .await
        .0;
        match r {
            Ok(n) => {
                stats::add(&vc.bytes_out, n);
                stats::add(&mc.bytes_in, n);
                if w.send.send_data(Bytes::new(), true).is_err() {
                    return;
                }
            }
            Err(e) => {
                match &e {
                    BodyError::Framing(_) | BodyError::Truncated => stats::inc(&mc.bad_responses),
                    BodyError::Timeout => stats::inc(&mc.response_timeouts),
                    _ => {}
                }
                if !matches!(e, BodyError::Write(_)) {
                    log::warn(format_args!(
                        "vserver {}: member {}: response body failed: {e:?}",
                        vs.name,
                        m.label(&pool.name)
                    ));
                }
                // The head is out: the stream can only be cut.
                w.send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
        }
    }
    if resp.head.keep_alive && up.buf.is_empty() {
        ctx.idle.put(
            m,
            up,
            pool.idle_per_member,
            Duration::from_millis(pool.idle_timeout_ms),
        );
    }
}

/// A stream's request body as a reader: DATA frames in order, the window
/// given back as each is taken (what is buffered here is one frame).
pub(super) struct H2Body {
    recv: RecvStream,
    chunk: Bytes,
}

impl H2Body {
    pub(super) fn new(recv: RecvStream) -> H2Body {
        H2Body {
            recv,
            chunk: Bytes::new(),
        }
    }
}

impl AsyncRead for H2Body {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.chunk.is_empty() {
            match ready!(this.recv.poll_data(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Ok(b)) => {
                    let _ = this.recv.flow_control().release_capacity(b.len());
                    this.chunk = b;
                }
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
        let n = this.chunk.len().min(buf.remaining());
        buf.put_slice(&this.chunk.split_to(n));
        Poll::Ready(Ok(()))
    }
}

/// A stream's response body as a writer: each write waits for flow-control
/// window and sends what fits.
pub(super) struct H2Writer {
    pub(super) send: SendStream<Bytes>,
}

/// Most window asked for at once (one write's worth).
const MAX_RESERVE: usize = 64 * 1024;

impl AsyncWrite for H2Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            let cap = this.send.capacity();
            if cap > 0 {
                let n = cap.min(buf.len());
                this.send
                    .send_data(Bytes::copy_from_slice(&buf[..n]), false)
                    .map_err(io::Error::other)?;
                return Poll::Ready(Ok(n));
            }
            this.send.reserve_capacity(buf.len().min(MAX_RESERVE));
            match ready!(this.send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(resets: u32, control: u32) -> FrameWatch {
        let l = Http2Settings {
            max_concurrent_streams: 100,
            stream_window: 65_535,
            connection_window: 65_535,
            max_frame_size: 16_384,
            max_header_list_size: 16_384,
            max_client_resets: resets,
            max_control_frames: control,
            abuse_window_ms: 60_000,
        };
        FrameWatch::new(&l, Rc::new(Cell::new(None)))
    }

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut f = vec![
            (n >> 16) as u8,
            (n >> 8) as u8,
            n as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn counts_frames_split_across_reads() {
        let mut w = watch(3, 100);
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend(frame(frame::SETTINGS, 0, &[0; 6]));
        // A DATA frame whose payload looks like frame headers must not count.
        wire.extend(frame(frame::DATA, 0, &frame(frame::RST_STREAM, 0, &[0; 4])));
        for _ in 0..3 {
            wire.extend(frame(frame::RST_STREAM, 0, &[0, 0, 0, 8]));
        }
        for b in wire.chunks(5) {
            w.scan(b);
        }
        assert_eq!((w.resets, w.control), (3, 1));
        assert!(w.tripped.get().is_none());
        w.scan(&frame(frame::RST_STREAM, 0, &[0, 0, 0, 8]));
        assert!(w.tripped.get().is_some());
    }

    #[test]
    fn empty_frames_are_control_frames() {
        let mut w = watch(100, 2);
        w.scan(&[0; PREFACE_LEN]);
        w.scan(&frame(frame::DATA, 0, &[]));
        w.scan(&frame(frame::DATA, frame::END_STREAM, &[]));
        w.scan(&frame(frame::PING, 0, &[0; 8]));
        assert_eq!(w.control, 2);
        assert!(w.tripped.get().is_none());
        w.scan(&frame(frame::PRIORITY, 0, &[0; 5]));
        assert!(w.tripped.get().is_some());
    }

    #[test]
    fn restated_head_joins_cookies_and_frames_the_body() {
        let st = crate::config::parse(
            "t",
            "[[vserver]]\nname=\"a\"\nlisten=[\"127.0.0.1:1\"]\ndefault_pool=\"p\"\n[[pool]]\nname=\"p\"\n[[pool.member]]\naddress=\"127.0.0.1:2\"\n",
            None,
        )
        .unwrap()
        .settings;
        let req = http::Request::builder()
            .method("POST")
            .uri("https://example.com/a?b=1")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (parts, _) = req.into_parts();
        let r = restate(&parts, false, &st).unwrap();
        assert_eq!(r.target(), b"/a?b=1");
        assert_eq!(r.host(), Some(&b"example.com"[..]));
        assert_eq!(r.head.get("cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(r.head.get("te"), None);
        assert_eq!(r.head.framing, Framing::Chunked);
        let r = restate(&parts, true, &st).unwrap();
        assert_eq!(r.head.framing, Framing::None);
        assert_eq!(r.head.get("content-length"), Some(&b"0"[..]));
    }
}
