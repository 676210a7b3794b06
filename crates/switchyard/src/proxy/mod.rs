//! The HTTP session: one client connection, its requests in order, each
//! routed, balanced and forwarded to a member.
//!
//! Runs on the worker that accepted the connection, start to end. Each
//! request takes the config snapshot current when it starts and keeps it
//! until it ends, so a reload never changes a request halfway.
//!
//! The per-request work is boxed and awaited from a small outer loop, so an
//! idle keep-alive connection holds only its socket and a few words, not the
//! state of a whole request (the target is under 1 KB per idle client).

mod forward;
pub mod h2;
pub mod h2_upstream;
pub mod idle;
pub mod route;
pub mod stream;
mod tunnel;
pub mod upstream;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::balance::{hash64, MemberState, Tried};
use crate::clock::now_ms;
use crate::config::snapshot::{
    Action, HashKey, Member, Persist, Pool, Settings, Snapshot, VServer,
};
use crate::http::body::{self, BodyError, Out};
use crate::http::head::{self, Framing, HeadError, HeadScanner, Request, Response};
use crate::http::responses;
use crate::log;
use crate::stats::{self, status_class, Sharded, VsCounters};
use forward::{ClientFraming, Forwarding};
pub use idle::{IdleEnd, IdleWatch, Parked};
pub use stream::{ClientStream, TlsConn};
use upstream::{ConnectError, IdlePool, UpConn};

/// What one worker gives every session it runs.
pub struct WorkerCtx {
    pub snapshot: Arc<arc_swap::ArcSwap<Snapshot>>,
    pub idle: IdlePool,
    /// Idle keep-alive connections, their deadlines, and the drain signal.
    pub idle_watch: IdleWatch,
    /// Client connections open on this worker (drain waits for zero).
    pub active: std::cell::Cell<usize>,
    /// Read buffers of connections waiting between requests, for the next
    /// request on any connection (HAProxy's buffer pool): no malloc per
    /// request, and no buffer pinned by a waiting connection.
    pub buffers: std::cell::RefCell<Vec<BytesMut>>,
    /// HTTP/2 connections to members of h2 pools.
    pub h2_members: h2_upstream::H2Conns,
}

/// Client read buffer size, and how many the pool keeps per worker.
const CLIENT_BUF: usize = 8 * 1024;
const POOLED_BUFFERS: usize = 64;

impl WorkerCtx {
    fn draining(&self) -> bool {
        self.idle_watch.is_draining()
    }

    fn take_buffer(&self) -> BytesMut {
        self.buffers
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(CLIENT_BUF))
    }

    fn return_buffer(&self, mut buf: BytesMut) {
        // Only an empty buffer holds nothing of the connection's.
        if !buf.is_empty() || buf.capacity() == 0 {
            return;
        }
        buf.clear();
        let mut pool = self.buffers.borrow_mut();
        if pool.len() < POOLED_BUFFERS {
            pool.push(buf);
        }
    }
}

/// A client connection between requests: all a session needs to resume.
pub struct Client {
    stream: ClientStream,
    peer: SocketAddr,
    listen: SocketAddr,
    buf: BytesMut,
}

impl Client {
    /// Writes all of `bytes` and flushes them out of TLS (a no-op on TCP).
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }
}

enum Next {
    KeepAlive,
    Close,
    /// The client sent the HTTP/2 preface (h2c with prior knowledge).
    Http2,
}

/// Keeps the connection gauges right for as long as a client connection
/// lives, in a task or parked.
pub struct ConnGuard {
    ctx: Rc<WorkerCtx>,
    counters: Arc<Sharded<VsCounters>>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        stats::dec(&self.counters.local().client_connections_active);
        self.ctx.active.set(self.ctx.active.get() - 1);
    }
}

/// Serves one client connection accepted on `listen`.
pub fn serve(ctx: &Rc<WorkerCtx>, stream: TcpStream, peer: SocketAddr, listen: SocketAddr) {
    let (counters, tls, h2_only) = {
        let snap = ctx.snapshot.load();
        match snap.vserver_for(&listen) {
            Some(vs) => (vs.counters.clone(), vs.tls.clone(), vs.h2c_only),
            None => return,
        }
    };
    let c = counters.local();
    stats::inc(&c.client_connections_total);
    stats::inc(&c.client_connections_active);
    ctx.active.set(ctx.active.get() + 1);
    let guard = ConnGuard {
        ctx: ctx.clone(),
        counters,
    };
    let _ = stream.set_nodelay(true);
    match tls {
        None if h2_only => {
            h2::start(
                ctx.clone(),
                ClientStream::Plain(stream),
                BytesMut::new(),
                peer,
                listen,
                guard,
            );
        }
        None => {
            let client = Client {
                stream: ClientStream::Plain(stream),
                peer,
                listen,
                buf: BytesMut::new(),
            };
            tokio::task::spawn_local(session(ctx.clone(), client, guard, true));
        }
        Some(tls) => {
            tokio::task::spawn_local(handshake(ctx.clone(), stream, peer, listen, tls, guard));
        }
    }
}

/// Runs a TLS handshake (bounded by the client_header timeout), then the
/// session in a task of its own, so the handshake's state (large) is freed
/// before the connection's first request and never weighs on an idle
/// connection. The config is the one current at accept: a reload with a new
/// certificate applies to connections accepted after it.
async fn handshake(
    ctx: Rc<WorkerCtx>,
    tcp: TcpStream,
    peer: SocketAddr,
    listen: SocketAddr,
    tls: Arc<crate::tls::TlsServer>,
    guard: ConnGuard,
) {
    let deadline = now_ms() + ctx.snapshot.load().settings.client_header_ms;
    let vc = guard.counters.clone();
    let vc = vc.local();
    let accept = tokio_rustls::TlsAcceptor::from(tls.config.clone()).accept(tcp);
    let stream = match ctx.idle_watch.within(deadline, accept).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            // A bare close (a port probe, a client giving up) is not a
            // failed handshake; an alert or a protocol error is.
            if e.kind() != std::io::ErrorKind::UnexpectedEof {
                stats::inc(&vc.tls_handshake_failures);
            }
            log::debug(format_args!("client {peer}: TLS handshake failed: {e}"));
            return;
        }
        Err(()) => {
            stats::inc(&vc.tls_handshake_failures);
            log::debug(format_args!("client {peer}: TLS handshake timed out"));
            return;
        }
    };
    let conn = stream.get_ref().1;
    stats::inc(&vc.tls_handshakes);
    if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        stats::inc(&vc.tls_resumed);
    }
    let client_subject = if tls.client_subject_header.is_some() {
        crate::tls::client_subject(conn)
    } else {
        None
    };
    // ALPN decides the codec.
    let h2 = conn.alpn_protocol() == Some(b"h2");
    let stream = ClientStream::Tls(Box::new(TlsConn {
        stream,
        client_subject,
    }));
    if h2 {
        h2::start(ctx, stream, BytesMut::new(), peer, listen, guard);
        return;
    }
    let client = Client {
        stream,
        peer,
        listen,
        buf: BytesMut::new(),
    };
    tokio::task::spawn_local(session(ctx, client, guard, true));
}

/// Resumes a parked connection that became readable.
pub fn resume(ctx: &Rc<WorkerCtx>, p: Parked) {
    tokio::task::spawn_local(session(ctx.clone(), p.client, p.guard, false));
}

/// Read buffer for responses from members.
const UPSTREAM_READ: usize = 32 * 1024;

/// Connections idle this long leave their task and wait in the worker's
/// parking lot, which costs a fraction of a task.
const PARK_AFTER_MS: u64 = 1000;

/// Runs requests on `client` until it closes, times out, or parks.
async fn session(ctx: Rc<WorkerCtx>, mut client: Client, guard: ConnGuard, mut first: bool) {
    loop {
        // Bytes TLS already holds are a request here: no readiness to wait for.
        if client.buf.is_empty() && !client.stream.has_buffered() {
            let wait_ms = {
                let snap = ctx.snapshot.load();
                if first {
                    snap.settings.client_header_ms
                } else {
                    snap.settings.client_idle_ms
                }
            };
            // Waiting holds no buffer: malloc hands the same block to the
            // next read at once, and thousands of waiting connections do
            // not pin 8 KB each.
            ctx.return_buffer(std::mem::take(&mut client.buf));
            let now = now_ms();
            let deadline = now + wait_ms;
            let park_at = if first { deadline } else { now + PARK_AFTER_MS };
            match ctx
                .idle_watch
                .wait(client.stream.tcp(), deadline.min(park_at))
                .await
            {
                IdleEnd::Readable => {}
                IdleEnd::Timeout if now_ms() < deadline => {
                    match ctx.idle_watch.park(Parked {
                        client,
                        guard,
                        deadline_ms: deadline,
                    }) {
                        Ok(()) => return,
                        // Readable while we parked it: serve it in a fresh task.
                        Err(p) => {
                            tokio::task::spawn_local(session(ctx, p.client, p.guard, false));
                            return;
                        }
                    }
                }
                _ => break,
            }
        }
        let was_first = std::mem::replace(&mut first, false);
        // Boxed: the request's state (kilobytes) lives only while a request
        // is in flight, so a connection waiting between requests keeps a
        // small task (one allocation per request, reused by malloc at once).
        match Box::pin(handle_request(&ctx, &mut client, was_first)).await {
            Next::KeepAlive if !ctx.draining() => {}
            Next::Http2 => {
                // The preface's first line was read as a head: replay it.
                let mut replay = BytesMut::from(h2::PREFACE_HEAD);
                replay.extend_from_slice(&client.buf);
                h2::start(
                    ctx,
                    client.stream,
                    replay,
                    client.peer,
                    client.listen,
                    guard,
                );
                return;
            }
            _ => break,
        }
    }
    // On TLS this sends close_notify, which a client that stopped reading
    // could hold up forever: bounded.
    let _ = ctx
        .idle_watch
        .within(now_ms() + 1000, client.stream.shutdown())
        .await;
    drop(guard);
}

/// Why reading a head stopped.
enum ReadHead {
    /// The peer closed (or reset) the connection; `partial` if it had sent part of a head.
    Closed {
        partial: bool,
    },
    Timeout {
        partial: bool,
    },
    Bad(HeadError),
}

/// Reads until `buf` holds a complete head; returns the head's bytes.
async fn read_head<R: AsyncRead + Unpin>(
    src: &mut R,
    buf: &mut BytesMut,
    max_line: usize,
    max_head: usize,
    timer: &IdleWatch,
    deadline_ms: u64,
) -> Result<bytes::Bytes, ReadHead> {
    let mut scanner = HeadScanner::default();
    loop {
        match scanner.scan(buf, max_line, max_head) {
            Ok(Some((start, end))) => {
                let head = buf.split_to(end).freeze();
                return Ok(head.slice(start..));
            }
            Ok(None) => {}
            Err(e) => return Err(ReadHead::Bad(e)),
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(8192);
        }
        let partial = !buf.is_empty();
        match timer.within(deadline_ms, src.read_buf(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(ReadHead::Closed { partial }),
            Ok(Ok(_)) => {}
            Err(_) => return Err(ReadHead::Timeout { partial }),
        }
    }
}

/// Writes a response the proxy answers itself and counts it.
async fn respond(c: &mut Client, vs: &VServer, status: u16, bytes: &[u8]) -> bool {
    let vc = vs.counters.local();
    stats::inc(&vc.local_responses);
    stats::inc(&vc.responses[status_class(status)]);
    stats::add(&vc.bytes_out, bytes.len() as u64);
    c.send(bytes).await.is_ok()
}

async fn error_and_close(c: &mut Client, vs: &VServer, status: u16, why: &str) -> Next {
    respond(c, vs, status, &responses::error(status, why, true)).await;
    Next::Close
}

async fn handle_request(ctx: &WorkerCtx, c: &mut Client, first: bool) -> Next {
    let snap = ctx.snapshot.load_full();
    let st = &snap.settings;
    let Some(vs) = snap.vserver_for(&c.listen).cloned() else {
        // The virtual server was removed by a reload: finish here.
        return Next::Close;
    };
    let vc = vs.counters.local();
    let deadline = now_ms() + st.client_header_ms;
    if c.buf.capacity() == 0 {
        c.buf = ctx.take_buffer();
    }
    let before = c.buf.len();
    let raw = match read_head(
        &mut c.stream,
        &mut c.buf,
        st.max_request_line,
        st.max_header_bytes,
        &ctx.idle_watch,
        deadline,
    )
    .await
    {
        Ok(raw) => raw,
        Err(ReadHead::Closed { .. }) => return Next::Close,
        Err(ReadHead::Timeout { partial }) => {
            stats::inc(&vc.header_timeouts);
            if partial {
                return error_and_close(c, &vs, 408, "the request head was not received in time")
                    .await;
            }
            return Next::Close;
        }
        Err(ReadHead::Bad(e)) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: {} ({})",
                vs.name, c.peer, e.reason, e.status
            ));
            return error_and_close(c, &vs, e.status, e.reason).await;
        }
    };
    if first && vs.h2c && raw[..] == *h2::PREFACE_HEAD {
        return Next::Http2;
    }
    let started = Instant::now();
    stats::add(
        &vc.bytes_in,
        (raw.len() + c.buf.len()).saturating_sub(before) as u64,
    );
    let req = match head::parse_request(raw, st.max_headers) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: {} ({})",
                vs.name, c.peer, e.reason, e.status
            ));
            return error_and_close(c, &vs, e.status, e.reason).await;
        }
    };
    stats::inc(&vc.requests);
    let decision = route::route(&vs, &req, c.peer.ip());
    let pool = match decision.action {
        Some(Action::Pool(p)) => p.clone(),
        Some(Action::Redirect { location, status }) => {
            let close = !req.head.keep_alive || ctx.draining();
            let mut extra = vec![("location", location.as_str())];
            extra.extend(hsts(&vs));
            let bytes = responses::simple(*status, "text/plain; charset=utf-8", b"", close, &extra);
            return local_response(ctx, c, &vs, &req, *status, &bytes, close, st).await;
        }
        Some(Action::RedirectHttps { status, port }) => {
            let Some(location) = https_location(&req, *port) else {
                stats::inc(&vc.bad_requests);
                return error_and_close(c, &vs, 400, "no valid Host to redirect to").await;
            };
            let close = !req.head.keep_alive || ctx.draining();
            let mut extra = vec![("location", location.as_str())];
            extra.extend(hsts(&vs));
            let bytes = responses::simple(*status, "text/plain; charset=utf-8", b"", close, &extra);
            return local_response(ctx, c, &vs, &req, *status, &bytes, close, st).await;
        }
        Some(Action::Respond {
            status,
            body,
            content_type,
        }) => {
            let close = !req.head.keep_alive || ctx.draining();
            let extra: Vec<_> = hsts(&vs).into_iter().collect();
            let bytes = responses::simple(*status, content_type, body, close, &extra);
            return local_response(ctx, c, &vs, &req, *status, &bytes, close, st).await;
        }
        None => match &vs.default_pool {
            Some(p) => p.clone(),
            None => {
                stats::inc(&vc.no_pool);
                let bytes = responses::error(
                    503,
                    &format!(
                        "no policy of vserver \"{}\" matched and it has no default_pool",
                        vs.name
                    ),
                    !req.head.keep_alive,
                );
                return local_response(ctx, c, &vs, &req, 503, &bytes, !req.head.keep_alive, st)
                    .await;
            }
        },
    };
    if pool.protocol == crate::config::snapshot::UpstreamProtocol::H2 {
        let next = h2_upstream::from_http1(ctx, c, &vs, &pool, &req, &decision, st).await;
        vs.latency
            .local()
            .record(started.elapsed().as_micros() as u64);
        return next;
    }
    let next = proxy_request(ctx, c, &vs, &pool, &req, &decision, st, started).await;
    vs.latency
        .local()
        .record(started.elapsed().as_micros() as u64);
    next
}

/// The Strict-Transport-Security field of a TLS vserver that sets one.
fn hsts(vs: &VServer) -> Option<(&'static str, &str)> {
    vs.tls
        .as_ref()
        .and_then(|t| t.hsts.as_deref())
        .map(|h| ("strict-transport-security", h))
}

/// "https://HOST[:PORT]TARGET" for a request, or None when its Host is
/// missing or not a plain host name / address (nothing else may go into a
/// Location we build).
fn https_location(req: &Request, port: u16) -> Option<String> {
    let host = req.host_name()?;
    let ok = !host.is_empty()
        && host
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(b));
    if !ok {
        return None;
    }
    let host = std::str::from_utf8(host).ok()?;
    let target = String::from_utf8_lossy(req.target());
    let target = if target.starts_with('/') {
        target
    } else {
        "/".into()
    };
    Some(if port == 443 {
        format!("https://{host}{target}")
    } else {
        format!("https://{host}:{port}{target}")
    })
}

/// Answers locally; a request body is read and discarded first so the
/// connection stays usable.
#[allow(clippy::too_many_arguments)]
async fn local_response(
    ctx: &WorkerCtx,
    c: &mut Client,
    vs: &VServer,
    req: &Request,
    status: u16,
    bytes: &[u8],
    close: bool,
    st: &Settings,
) -> Next {
    if !discard_body(c, req.head.framing, st).await {
        return error_and_close(c, vs, 400, "invalid request body").await;
    }
    if !respond(c, vs, status, bytes).await || close || ctx.draining() {
        return Next::Close;
    }
    Next::KeepAlive
}

/// Reads and drops a request body, so the connection can carry the next
/// request. False when the body was invalid or did not arrive in time.
async fn discard_body(c: &mut Client, framing: Framing, st: &Settings) -> bool {
    if framing == Framing::None {
        return true;
    }
    let mut sink = tokio::io::sink();
    let mut stage = Vec::new();
    let mut out = Out::new(&mut sink, &mut stage);
    let timeout = Duration::from_millis(st.client_body_ms);
    body::transfer(&mut c.stream, &mut c.buf, framing, &mut out, false, timeout)
        .await
        .is_ok()
}

/// The member a persistence cookie in the request names.
fn sticky_member(pool: &Pool, req: &Request) -> Option<usize> {
    match &pool.persistence {
        Some(Persist::Cookie(name)) => route::cookie(req, name).and_then(|v| {
            pool.members
                .iter()
                .position(|m| m.cookie_id.as_bytes() == v)
        }),
        _ => None,
    }
}

/// The Set-Cookie value that pins a client to `m`, when the pool persists
/// by cookie and the request was not already pinned there (`set`).
fn persistence_cookie(pool: &Pool, m: &Member, set: bool) -> Option<String> {
    match &pool.persistence {
        Some(Persist::Cookie(name)) if set => {
            Some(format!("{name}={}; Path=/; HttpOnly", m.cookie_id))
        }
        _ => None,
    }
}

/// A failed connect to a member: counted, fed to passive health and
/// logged; returns what the client gets if no other member takes over.
fn connect_failed(
    vs: &VServer,
    pool: &Pool,
    m: &Member,
    e: &ConnectError,
    what: &str,
) -> (u16, String) {
    stats::inc(&m.counters.local().connect_failures);
    passive_result(pool, m, true);
    log::warn(format_args!(
        "vserver {}: member {}: {what}connect failed: {e}",
        vs.name,
        m.label(&pool.name)
    ));
    let status = if matches!(e, ConnectError::Timeout) {
        504
    } else {
        502
    };
    (
        status,
        format!("could not connect to a server of pool \"{}\"", pool.name),
    )
}

const NO_ANSWER: &str = "the server closed the connection without answering";

/// What a failed read of a member's response head means for the client:
/// (status, why, timed out).
fn head_read_failure(e: ReadHead) -> (u16, &'static str, bool) {
    match e {
        ReadHead::Bad(e) => (502, e.reason, false),
        ReadHead::Timeout { .. } => (504, "the server did not answer in time", true),
        ReadHead::Closed { partial: true } => {
            (502, "the server closed the connection mid-response", false)
        }
        ReadHead::Closed { partial: false } => (502, NO_ANSWER, false),
    }
}

/// Counts a member's failed response and feeds passive health. True when
/// not a byte came back: a request without side effects may go again.
fn member_response_failed(pool: &Pool, m: &Member, up: &UpConn, why: &str, timeout: bool) -> bool {
    let mc = m.counters.local();
    let no_response_byte = up.buf.is_empty() && why == NO_ANSWER;
    if timeout {
        stats::inc(&mc.response_timeouts);
    } else if no_response_byte {
        stats::inc(&mc.resets);
    } else {
        stats::inc(&mc.bad_responses);
    }
    // A stale reused connection is not the member's fault.
    if !(no_response_byte && up.reused) {
        passive_result(pool, m, true);
    }
    no_response_byte
}

/// Counts a request in flight to a member for as long as it lives.
struct Inflight<'a>(&'a MemberState);

impl<'a> Inflight<'a> {
    fn new(s: &'a MemberState) -> Self {
        s.inflight.fetch_add(1, Ordering::Relaxed);
        Inflight(s)
    }
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn request_hash(pool: &Pool, req: &Request, peer: std::net::IpAddr) -> Option<u64> {
    let ip_hash = || match peer {
        std::net::IpAddr::V4(a) => hash64(&a.octets(), 0),
        std::net::IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => hash64(&v4.octets(), 0),
            None => hash64(&a.octets(), 0),
        },
    };
    if let Some(k) = &pool.hash_key {
        return match k {
            HashKey::SourceIp => Some(ip_hash()),
            HashKey::Uri => Some(hash64(req.target(), 0)),
            HashKey::Header(n) => req.head.get(n).map(|v| hash64(v, 0)),
            HashKey::Cookie(n) => route::cookie(req, n).map(|v| hash64(v, 0)),
        };
    }
    if pool.persistence == Some(Persist::SourceIp) {
        return Some(ip_hash());
    }
    None
}

/// Passive health: a connect failure or (when configured) a 5xx.
fn passive_result(pool: &Pool, m: &Member, failed: bool) {
    let Some(p) = &pool.passive else { return };
    let s = &m.state;
    if !failed {
        if s.consecutive_failures.load(Ordering::Relaxed) != 0 {
            s.consecutive_failures.store(0, Ordering::Relaxed);
        }
        return;
    }
    let n = s.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
    if n >= p.consecutive_failures {
        s.consecutive_failures.store(0, Ordering::Relaxed);
        let until = now_ms() + p.ejection_ms;
        s.ejected_until_ms.store(until, Ordering::Relaxed);
        // Slow start runs from the moment the ejection ends.
        s.up_since_ms.store(until, Ordering::Relaxed);
        let mc = m.counters.local();
        stats::inc(&mc.ejections);
        stats::inc(&mc.health_transitions);
        log::warn(format_args!(
            "member {} ejected for {} ms after {n} consecutive failures",
            m.label(&pool.name),
            p.ejection_ms
        ));
    }
}

#[allow(clippy::too_many_arguments)]
async fn proxy_request(
    ctx: &WorkerCtx,
    c: &mut Client,
    vs: &VServer,
    pool: &Arc<Pool>,
    req: &Request,
    decision: &route::Decision<'_>,
    st: &Settings,
    started: Instant,
) -> Next {
    let vc = vs.counters.local();
    let pc = pool.counters.local();
    stats::inc(&pc.requests);
    let hash = request_hash(pool, req, c.peer.ip());
    let sticky = sticky_member(pool, req);
    let has_body = req.head.framing != Framing::None;
    let replayable = !has_body && req.method.idempotent();
    let mut tried = Tried::default();
    let mut retries_left = st.retries;
    let mut continue_sent = false;
    let mut stage: Vec<u8> = Vec::with_capacity(1024);
    // Why the last attempt failed: the answer when a retry finds no member left.
    let mut last_failure: Option<(u16, String)> = None;

    let (idx, up, resp, _inflight) = loop {
        let Some(i) = pool.balancer.pick(&pool.members, sticky, hash, tried) else {
            if let Some((status, why)) = &last_failure {
                return drain_then_error(c, vs, req, *status, why, st).await;
            }
            stats::inc(&pc.no_member_available);
            let why = format!(
                "no server is available to handle this request (pool \"{}\")",
                pool.name
            );
            return drain_then_error(c, vs, req, 503, &why, st).await;
        };
        if last_failure.is_some() {
            // Counted when the request really goes out again.
            stats::inc(&pc.retries);
        }
        tried.add(i);
        let m = &pool.members[i];
        let mc = m.counters.local();
        // Counted from the pick, not from the connect: requests picking
        // while this one connects must see it (max_connections, least
        // connections, p2c).
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
                    // Logs "connect failed: TLS handshake failed: certificate
                    // verification failed: UnknownIssuer" and the like.
                    let (status, why) = connect_failed(vs, pool, m, &e, "");
                    // Nothing was sent: any method may go to another member.
                    if retries_left > 0 {
                        retries_left -= 1;
                        last_failure = Some((status, why));
                        continue;
                    }
                    drop(inflight);
                    return drain_then_error(c, vs, req, status, &why, st).await;
                }
            },
        };
        stats::inc(&mc.requests);

        // Request head, then the body, streamed.
        stage.clear();
        // Built in a block, not held across the awaits: the session future
        // stays as small as it was before TLS.
        {
            let fwd = Forwarding {
                client_ip: c.peer.ip(),
                proto: if c.stream.is_tls() { "https" } else { "http" },
                client_cert: vs
                    .tls
                    .as_ref()
                    .and_then(|t| t.client_subject_header.as_deref())
                    .map(|h| (h, c.stream.client_subject())),
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
        if req.expect_continue && has_body && !continue_sent {
            // We answer the expectation ourselves (as nginx does) once a
            // member is ready to take the body.
            if c.send(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
                return Next::Close;
            }
            continue_sent = true;
        }
        let sent = body::deliver(
            &mut c.stream,
            &mut c.buf,
            req.head.framing,
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
                    // A stale pooled connection says nothing about the
                    // member: it may be picked again, on a new connection.
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
                return error_and_close(
                    c,
                    vs,
                    502,
                    "the server closed the connection while receiving the request",
                )
                .await;
            }
            Err(BodyError::Timeout) => {
                return error_and_close(c, vs, 408, "the request body was not received in time")
                    .await
            }
            Err(BodyError::Framing(why)) => {
                stats::inc(&vc.bad_requests);
                return error_and_close(c, vs, 400, why).await;
            }
            Err(BodyError::Read(_) | BodyError::Truncated) => return Next::Close,
        }

        // Response head; interim 1xx responses are relayed.
        let deadline = now_ms() + st.upstream_response_ms;
        // Room for a head and a typical body in one read (HAProxy reads
        // into 16 KB buffers): an 8 KB response then costs one recv and one
        // send instead of two of each.
        if up.buf.capacity() < UPSTREAM_READ {
            up.buf.reserve(UPSTREAM_READ);
        }
        let resp = loop {
            match read_head(
                &mut up.stream,
                &mut up.buf,
                st.max_header_bytes,
                st.max_header_bytes,
                &ctx.idle_watch,
                deadline,
            )
            .await
            {
                Ok(raw) => match head::parse_response(raw, st.max_headers, req.method) {
                    Ok(r) if (100..200).contains(&r.status) && r.status != 101 => {
                        if req.head.minor == 1 && !(r.status == 100 && continue_sent) {
                            let mut interim = Vec::new();
                            forward::interim_head(&mut interim, &r);
                            if c.send(&interim).await.is_err() {
                                return Next::Close;
                            }
                        }
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
                drop(up);
                let close = !req.head.keep_alive;
                let bytes = responses::error(status, why, close);
                if !respond(c, vs, status, &bytes).await || close {
                    return Next::Close;
                }
                return Next::KeepAlive;
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
    stats::inc(&mc.responses[status_class(resp.status)]);
    stats::inc(&vc.responses[status_class(resp.status)]);
    forward_response(
        ctx,
        c,
        vs,
        pool,
        m,
        req,
        decision,
        st,
        resp,
        up,
        sticky != Some(idx),
        started,
        stage,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn forward_response(
    ctx: &WorkerCtx,
    c: &mut Client,
    vs: &VServer,
    pool: &Pool,
    m: &Member,
    req: &Request,
    decision: &route::Decision<'_>,
    st: &Settings,
    resp: Response,
    mut up: UpConn,
    set_cookie: bool,
    started: Instant,
    mut stage: Vec<u8>,
) -> Next {
    let vc = vs.counters.local();
    let mc = m.counters.local();
    let upgrade = resp.status == 101 && req.head.upgrade;
    let client_11 = req.head.minor == 1;
    let reframe = matches!(resp.head.framing, Framing::Chunked | Framing::Close);
    let chunked_out = reframe && client_11;
    let close = upgrade
        || !req.head.keep_alive
        || (reframe && !client_11)
        || ctx.draining()
        || (resp.status == 101 && !req.head.upgrade);
    let cf = ClientFraming {
        chunked: chunked_out,
        close: close && !upgrade,
        keep_alive_10: !client_11 && !close,
        upgrade,
    };
    let cookie = persistence_cookie(pool, m, set_cookie);
    stage.clear();
    forward::response_head(
        &mut stage,
        &resp,
        &decision.response_edits,
        &cf,
        cookie.as_deref(),
    );
    let head_len = stage.len() as u64;
    stats::add(&mc.bytes_in, resp.head.raw.len() as u64);

    if upgrade {
        let r = tunnel::run(
            &mut c.stream,
            &mut c.buf,
            &mut up.stream,
            &mut up.buf,
            stage,
            Duration::from_millis(st.tunnel_idle_ms),
        )
        .await;
        stats::add(&vc.bytes_out, head_len + r.to_client);
        stats::add(&vc.bytes_in, r.to_server);
        access_log(st, vs, c, req, resp.status, r.to_client, m, pool, started);
        return Next::Close;
    }

    let (r, written) = body::deliver(
        &mut up.stream,
        &mut up.buf,
        resp.head.framing,
        &mut c.stream,
        &mut stage,
        chunked_out,
        Duration::from_millis(st.upstream_response_ms),
    )
    .await;
    match r {
        Ok(n) => {
            stats::add(&vc.bytes_out, head_len + n);
            stats::add(&mc.bytes_in, n);
            access_log(st, vs, c, req, resp.status, n, m, pool, started);
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
            if !written && !matches!(e, BodyError::Write(_)) {
                // Nothing reached the client yet: it can still get a clean 502.
                let status = if matches!(e, BodyError::Timeout) {
                    504
                } else {
                    502
                };
                return error_and_close(c, vs, status, "the server sent an invalid response").await;
            }
            // The head is gone already: all we can do is cut the connection.
            return Next::Close;
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
    if close {
        Next::Close
    } else {
        Next::KeepAlive
    }
}

/// Answers an error before the request body was read: the body is read and
/// dropped when it is small enough to keep the connection, else we close.
async fn drain_then_error(
    c: &mut Client,
    vs: &VServer,
    req: &Request,
    status: u16,
    why: &str,
    st: &Settings,
) -> Next {
    let mut close = !req.head.keep_alive;
    if req.head.framing != Framing::None {
        let small = matches!(req.head.framing, Framing::Length(n) if n <= 64 * 1024);
        if small {
            close |= !discard_body(c, req.head.framing, st).await;
        } else {
            close = true;
        }
    }
    let bytes = responses::error(status, why, close);
    if !respond(c, vs, status, &bytes).await || close {
        return Next::Close;
    }
    Next::KeepAlive
}

#[allow(clippy::too_many_arguments)]
fn access_log(
    st: &Settings,
    vs: &VServer,
    c: &Client,
    req: &Request,
    status: u16,
    bytes: u64,
    m: &Member,
    pool: &Pool,
    started: Instant,
) {
    if !st.access_log {
        return;
    }
    log::access(format_args!(
        "{} {} \"{} {}\" {} {} {} {}us",
        c.peer,
        vs.name,
        String::from_utf8_lossy(req.method_str()),
        String::from_utf8_lossy(req.target()),
        status,
        bytes,
        m.label(&pool.name),
        started.elapsed().as_micros()
    ));
}

#[cfg(test)]
mod size_tests {
    use super::*;

    fn size_of_future<F: std::future::Future>(_: &F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn session_future_sizes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = l.local_addr().unwrap();
            let s = TcpStream::connect(a).await.unwrap();
            let snap = crate::config::parse("t", "[[vserver]]\nname=\"a\"\nlisten=[\"127.0.0.1:1\"]\ndefault_pool=\"p\"\n[[pool]]\nname=\"p\"\n[[pool.member]]\naddress=\"127.0.0.1:2\"\n", None).unwrap();
            let ctx = Rc::new(WorkerCtx { snapshot: Arc::new(arc_swap::ArcSwap::from_pointee(snap)), idle: IdlePool::default(), idle_watch: IdleWatch::default(), active: Default::default(), buffers: Default::default(), h2_members: Default::default() });
            let counters = ctx.snapshot.load().vservers[0].counters.clone();
            ctx.active.set(1);
            let guard = ConnGuard { ctx: ctx.clone(), counters };
            let f = session(ctx.clone(), Client { stream: ClientStream::Plain(s), peer: a, listen: a, buf: BytesMut::new() }, guard, true);
            eprintln!("serve future: {} bytes", size_of_future(&f));
            eprintln!("TcpStream: {} bytes", std::mem::size_of::<TcpStream>());
            eprintln!("ClientStream: {} bytes", std::mem::size_of::<ClientStream>());
            eprintln!("Parked: {} bytes", std::mem::size_of::<Parked>());
            eprintln!("Sleep: {} bytes", std::mem::size_of::<tokio::time::Sleep>());
        });
    }
}
