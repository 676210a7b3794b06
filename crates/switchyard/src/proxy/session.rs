//! The HTTP/1 session: one client connection, its requests in order, each
//! run through the exchange (`pipeline::run`).
//!
//! Runs on the worker that accepted the connection, start to end. Each
//! request takes the config snapshot current when it starts and keeps it
//! until it ends, so a reload never changes a request halfway.
//!
//! The per-request work is boxed and awaited from a small outer loop, so an
//! idle keep-alive connection holds only its socket and a few words, not the
//! state of a whole request (the target is under 1 KB per idle client).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::client_h1::H1Client;
use super::conn::{private_key_of, Client, ConnGuard};
use super::ctx::WorkerCtx;
use super::exchange::{micros_since, Exchange};
use super::h2;
use super::head_read::{read_head, ReadHead};
use super::hooks::Hooks;
use super::idle::{IdleEnd, Parked};
use super::pipeline;
use super::stages;
use super::stream::{ClientStream, PlainTcp, TlsConn};
use crate::clock::now_ms;
use crate::config::snapshot::VServer;
use crate::http::head;
use crate::http::responses;
use crate::log;
use crate::stats::{self, status_class};

enum Next {
    KeepAlive,
    Close,
    /// The client sent the HTTP/2 preface (h2c with prior knowledge).
    Http2,
}

/// Serves one client connection accepted on `listen`.
/// `stream` is non-blocking and not yet in tokio's reactor: a plain HTTP/1
/// connection joins it only if it has to wait (`PlainTcp`).
pub fn serve(
    ctx: &Rc<WorkerCtx>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    listen: SocketAddr,
) {
    let (counters, tls, h2_only, l4, accept_proxy, leases, private) = {
        let snap = ctx.snapshot.load();
        match snap.vserver_for(&listen) {
            Some(vs) => {
                if !admitted(&snap, vs, &stream, peer, listen) {
                    return;
                }
                let leases = match limited(vs, peer) {
                    Admission::Yes(leases) => leases,
                    Admission::No(action) => {
                        refuse(stream, action);
                        return;
                    }
                };
                (
                    vs.counters.clone(),
                    vs.tls.clone(),
                    vs.h2c_only,
                    vs.l4.is_some().then(|| (Arc::clone(&snap), vs.clone())),
                    vs.accept_proxy.clone(),
                    leases,
                    vs.private_member_conns,
                )
            }
            None => return,
        }
    };
    // Connection-level stages (ACLs, per-source limits) decide before any
    // byte is read; a refused connection is closed at once.
    if !stages::pipeline().on_accept(peer, listen) {
        return;
    }
    let c = counters.local();
    stats::inc(&c.client_connections_total);
    stats::inc(&c.client_connections_active);
    ctx.active.set(ctx.active.get() + 1);
    let guard = ConnGuard {
        active: ctx.active.clone(),
        counters,
        leases,
        // Its key is set once the client is known (`start`).
        private: private.then(|| (ctx.idle.clone(), 0)),
    };
    // TCP_NODELAY comes from the listening socket (runtime/listen.rs):
    // accepted sockets inherit it, so no setsockopt per connection.
    if let Some((snap, vs)) = l4 {
        let Some(stream) = register(PlainTcp::bare(stream), peer) else {
            return;
        };
        tokio::task::spawn_local(crate::l4::tcp::serve(stream, peer, listen, snap, vs, guard));
        return;
    }
    // A trusted proxy in front says who the client is: that address is the
    // one policies, persistence, logs and X-Forwarded-For see.
    if let Some(ap) = accept_proxy.filter(|ap| ap.trusts(peer.ip())) {
        let Some(stream) = register(PlainTcp::bare(stream), peer) else {
            return;
        };
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            match crate::l4::tcp::read_proxy_header(&stream, &ap).await {
                Ok(client) => start(
                    &ctx,
                    PlainTcp::registered(stream),
                    client.unwrap_or(peer),
                    listen,
                    tls,
                    h2_only,
                    guard,
                ),
                Err(e) => {
                    stats::inc(&guard.counters.local().bad_requests);
                    log::debug(format_args!(
                        "PROXY header from {peer} on {listen}: {e}; closed"
                    ));
                }
            }
        });
        return;
    }
    start(
        ctx,
        PlainTcp::bare(stream),
        peer,
        listen,
        tls,
        h2_only,
        guard,
    );
}

/// `stream` in tokio's reactor, for the paths that wait on it from the
/// start (L4 relays, PROXY headers, TLS handshakes).
fn register(stream: PlainTcp, peer: SocketAddr) -> Option<TcpStream> {
    match stream.into_tokio() {
        Ok(s) => Some(s),
        Err(e) => {
            log::warn(format_args!(
                "client {peer}: cannot register the connection: {e}"
            ));
            None
        }
    }
}

/// The ACLs' decision on a new connection: a drop closes it, a reject
/// closes it with a reset (SO_LINGER 0).
fn admitted(
    snap: &crate::config::Snapshot,
    vs: &crate::config::snapshot::VServer,
    stream: &std::net::TcpStream,
    peer: SocketAddr,
    listen: SocketAddr,
) -> bool {
    if snap.shield.is_none() && vs.acl.is_none() {
        return true;
    }
    use crate::shield::acl::{Action, TCP};
    match crate::shield::admit(snap.shield.as_deref(), vs.acl.as_deref(), peer, listen, TCP) {
        Action::Drop => {
            stats::inc(&vs.counters.local().acl_dropped);
            false
        }
        Action::Reject => {
            stats::inc(&vs.counters.local().acl_rejected);
            let _ = socket2::SockRef::from(stream).set_linger(Some(std::time::Duration::ZERO));
            false
        }
        _ => true,
    }
}

/// A connection's fate under the vserver's per-source limits.
enum Admission {
    Yes(Option<Box<[crate::shield::stick::Lease]>>),
    No(crate::shield::stick::Action),
}

/// The per-source limits' decision on a new connection (by its source
/// address: the only key known at accept).
fn limited(vs: &VServer, peer: SocketAddr) -> Admission {
    if vs.limits.is_empty() {
        return Admission::Yes(None);
    }
    let mut leases = Vec::new();
    for l in &vs.limits {
        match l.on_connection(peer.ip()) {
            Ok(lease) => leases.extend(lease),
            Err(reason) => {
                if let crate::shield::stick::Action::Tarpit(_) = l.action {
                    l.count_tarpit();
                }
                log::debug(format_args!(
                    "vserver {}: limit {:?}: connection from {peer} refused ({})",
                    vs.name,
                    l.name,
                    reason.name()
                ));
                return Admission::No(l.action);
            }
        }
    }
    Admission::Yes((!leases.is_empty()).then(|| leases.into_boxed_slice()))
}

/// Closes a connection a limit refused: with a reset (reject, deny), a
/// plain close, or after holding it (tarpit).
fn refuse(stream: std::net::TcpStream, action: crate::shield::stick::Action) {
    use crate::shield::stick::Action;
    match action {
        Action::Reject | Action::Deny(_) => {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
        }
        Action::Close => {}
        Action::Tarpit(ms) => {
            tokio::task::spawn_local(async move {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                drop(stream);
            });
        }
    }
}

/// Starts the HTTP session of an accepted connection: TLS first if the
/// vserver terminates it, HTTP/2 only, or HTTP/1 (upgradable to h2c).
fn start(
    ctx: &Rc<WorkerCtx>,
    stream: PlainTcp,
    peer: SocketAddr,
    listen: SocketAddr,
    tls: Option<Arc<crate::tls::TlsServer>>,
    h2_only: bool,
    mut guard: ConnGuard,
) {
    // The client as its requests will name it (a PROXY header's address
    // included): the key of its private member connections.
    if let Some((idle, key)) = &mut guard.private {
        *key = private_key_of(peer, listen);
        idle.open_private(*key);
    }
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
            let mut client = Client {
                stream: ClientStream::Plain(stream),
                peer,
                listen,
                buf: BytesMut::new(),
                uncounted: 0,
            };
            if read_now(ctx, &mut client) {
                tokio::task::spawn_local(session(ctx.clone(), client, guard, Start::New));
            }
        }
        Some(tls) => {
            let Some(stream) = register(stream, peer) else {
                return;
            };
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
    let began = Instant::now();
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
    let info = crate::accesslog::TlsInfo::of(conn, micros_since(began));
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
        info,
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
        uncounted: 0,
    };
    tokio::task::spawn_local(session(ctx, client, guard, Start::New));
}

/// Resumes a parked connection that became readable.
///
/// A plain connection comes back from the lot's own epoll as a descriptor
/// just registered with tokio, whose readiness tokio learns only at the
/// driver's next poll, after every task of the current turn: waiting for
/// it put a turn's work (hundreds of microseconds in a burst) in front of
/// every request on a parked connection. The lot saw it readable, so its
/// request is read here at once; only a spurious wake-up waits.
pub fn resume(ctx: &Rc<WorkerCtx>, mut p: Parked) {
    if read_now(ctx, &mut p.client) {
        // How long it was idle (its deadline was set `client_idle` after
        // the idle time began): a client that thought past `client_park`
        // is likely to again and goes back to the lot after its request;
        // one that comes back sooner (the rest of a burst after a long
        // pause) waits in tokio's epoll as usual.
        let (idle_ms, park_ms) = {
            let snap = ctx.snapshot.load();
            (snap.settings.client_idle_ms, snap.settings.client_park_ms)
        };
        let idled = (now_ms() + idle_ms).saturating_sub(p.deadline_ms);
        let start = if idled >= park_ms {
            Start::LongIdle
        } else {
            Start::Resumed
        };
        tokio::task::spawn_local(session(ctx.clone(), p.client, p.guard, start));
    }
}

/// What a read after tokio's readiness found.
enum Filled {
    Data,
    Closed,
    Nothing,
}

/// Reads a plain connection that tokio says is readable into its buffer
/// (the head reader parses what is there first). When `read_now` took the
/// bytes before tokio learned of them, the readiness tokio reports next
/// has nothing behind it: reading clears it, and the caller goes back to
/// waiting under the idle timeout, not under the request head's. TLS
/// connections are left to the session's own read.
fn read_ready(ctx: &WorkerCtx, client: &mut Client) -> Filled {
    let ClientStream::Plain(plain) = &client.stream else {
        return Filled::Data;
    };
    // Registered: tokio just reported it readable.
    let Some(tcp) = plain.tokio_ref() else {
        return Filled::Data;
    };
    if !client.buf.is_empty() {
        return Filled::Data;
    }
    // A short read clears readiness, so the wait after this request
    // sleeps until the next one instead of asking again for EAGAIN.
    let mut buf = ctx.take_buffer();
    let read = crate::l4::relay::read_draining(tcp, &mut buf);
    settle(ctx, client, buf, read)
}

/// Keeps what a read brought in `buf` (already holding its bytes) as the
/// client's buffer, or gives the buffer back, and says what it was.
fn settle(
    ctx: &WorkerCtx,
    client: &mut Client,
    buf: BytesMut,
    read: std::io::Result<usize>,
) -> Filled {
    match read {
        Ok(0) => {
            ctx.return_buffer(buf);
            Filled::Closed
        }
        Ok(n) => {
            client.buf = buf;
            client.uncounted = n;
            Filled::Data
        }
        Err(e) => {
            ctx.return_buffer(buf);
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Filled::Nothing
            } else {
                Filled::Data
            }
        }
    }
}

/// Reads what a plain connection already holds into its buffer, without
/// tokio's readiness; false when the client has closed (its guard then
/// closes and counts it). Nothing there yet, or an error: the session's
/// own read waits or meets it.
fn read_now(ctx: &WorkerCtx, client: &mut Client) -> bool {
    let ClientStream::Plain(tcp) = &client.stream else {
        return true;
    };
    if !client.buf.is_empty() {
        return true;
    }
    let mut buf = ctx.take_buffer();
    let read = tcp.recv(buf.spare_capacity_mut());
    if let Ok(n) = read {
        // SAFETY: recv initialised the first n bytes of the spare capacity.
        unsafe { buf.set_len(n) };
    }
    !matches!(settle(ctx, client, buf, read), Filled::Closed)
}

/// How a session starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// A new connection: its first request is due within `client_header`.
    New,
    /// Back from the parking lot after more than `client_park` idle.
    LongIdle,
    /// Back from the parking lot sooner, or readable as it was parked.
    Resumed,
}

/// Runs requests on `client` until it closes, times out, or parks.
async fn session(ctx: Rc<WorkerCtx>, mut client: Client, guard: ConnGuard, start: Start) {
    let mut first = start == Start::New;
    let mut looked_again = false;
    // The client closed first: nothing is held for a FIN, and close(2)
    // sends ours.
    let mut peer_closed = false;
    // A client that thought past `client_park` (a user between clicks) is
    // likely to again: once its request is answered the connection goes
    // back to the lot at once, without a wait in tokio's epoll first (an
    // epoll_ctl ADD and DEL, a second look and a task kept for
    // `client_park`, per request).
    let back_to_lot = start == Start::LongIdle;
    let mut served = false;
    loop {
        if back_to_lot && served && client.buf.is_empty() && !client.stream.has_buffered() {
            ctx.return_buffer(std::mem::take(&mut client.buf));
            let deadline_ms = now_ms() + ctx.snapshot.load().settings.client_idle_ms;
            if let Err(p) = ctx.idle_watch.park(Parked {
                client,
                guard,
                deadline_ms,
            }) {
                // Readable while we parked it: serve it in a fresh task.
                tokio::task::spawn_local(session(ctx, p.client, p.guard, Start::Resumed));
            }
            return;
        }
        // A socket not yet in the reactor gets one more look, after the
        // worker's other ready tasks, before it joins: a client's request
        // trails its handshake, and a one-request client's FIN trails the
        // response, by microseconds. Found then, the connection never
        // costs an epoll_ctl ADD and DEL; if not, one recv more.
        if !looked_again && client.buf.is_empty() && client.stream.tcp_registered().is_none() {
            looked_again = true;
            tokio::task::yield_now().await;
            if !read_now(&ctx, &mut client) {
                peer_closed = true;
                break;
            }
            continue;
        }
        // Bytes TLS already holds are a request here: no readiness to wait for.
        if client.buf.is_empty() && !client.stream.has_buffered() {
            // Connections idle `client_park` leave their task and wait in
            // the worker's parking lot, which costs a fraction of a task.
            let (wait_ms, park_ms) = {
                let snap = ctx.snapshot.load();
                let s = &snap.settings;
                let wait = if first {
                    s.client_header_ms
                } else {
                    s.client_idle_ms
                };
                (wait, s.client_park_ms)
            };
            // Waiting holds no buffer: malloc hands the same block to the
            // next read at once, and thousands of waiting connections do
            // not pin 8 KB each.
            ctx.return_buffer(std::mem::take(&mut client.buf));
            let now = now_ms();
            let deadline = now + wait_ms;
            // Parking falls on whole seconds: the ticker parks every
            // connection due in a second in one wake-up.
            let park_at = if first {
                deadline
            } else {
                (now + park_ms).div_ceil(1000) * 1000
            };
            // The first wait registers a bare socket with tokio.
            let Ok(tcp) = client.stream.tcp() else {
                break;
            };
            match ctx.idle_watch.wait(tcp, deadline.min(park_at)).await {
                IdleEnd::Readable => match read_ready(&ctx, &mut client) {
                    Filled::Data => {}
                    Filled::Closed => {
                        peer_closed = true;
                        break;
                    }
                    // Nothing behind the readiness (see `read_ready`): wait
                    // again, the idle time counted afresh.
                    Filled::Nothing => continue,
                },
                IdleEnd::Timeout if now_ms() < deadline => {
                    match ctx.idle_watch.park(Parked {
                        client,
                        guard,
                        deadline_ms: deadline,
                    }) {
                        Ok(()) => return,
                        // Readable while we parked it: serve it in a fresh task.
                        Err(p) => {
                            tokio::task::spawn_local(session(
                                ctx,
                                p.client,
                                p.guard,
                                Start::Resumed,
                            ));
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
            Next::KeepAlive if !ctx.draining() => served = true,
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
    if !peer_closed || client.stream.is_tls() {
        let _ = ctx
            .idle_watch
            .within(now_ms() + 1000, client.stream.shutdown())
            .await;
    }
    drop(guard);
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
    // What the buffer held was counted when read, except bytes read
    // before the vserver was known.
    let before = c.buf.len() - std::mem::take(&mut c.uncounted).min(c.buf.len());
    let reading = Instant::now();
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
    let subject = vs
        .tls
        .as_ref()
        .and_then(|t| t.client_subject_header.as_ref())
        .and(c.stream.client_subject().map(str::to_owned));
    let (peer, tls, keep_alive) = (c.peer, c.stream.is_tls(), req.head.keep_alive);
    let mut x = Exchange::new(ctx, &vs, st, (peer, c.listen), tls, subject.as_deref());
    x.facts.head_us = Some(micros_since(reading));
    x.facts.tls = c.stream.tls_info();
    let mut client = H1Client::new(c, &x, &ctx.idle_watch);
    pipeline::run(&mut x, &mut client, req).await;
    if client.close || !keep_alive || ctx.draining() {
        Next::Close
    } else {
        Next::KeepAlive
    }
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
            let ctx = Rc::new(WorkerCtx::for_tests());
            let counters = ctx.snapshot.load().vservers[0].counters.clone();
            ctx.active.set(1);
            let guard = ConnGuard {
                active: ctx.active.clone(),
                counters,
                leases: None,
                private: None,
            };
            let f = session(
                ctx.clone(),
                Client {
                    stream: ClientStream::Plain(PlainTcp::registered(s)),
                    peer: a,
                    listen: a,
                    buf: BytesMut::new(),
                    uncounted: 0,
                },
                guard,
                Start::New,
            );
            eprintln!("serve future: {} bytes", size_of_future(&f));
            eprintln!("TcpStream: {} bytes", std::mem::size_of::<TcpStream>());
            eprintln!(
                "ClientStream: {} bytes",
                std::mem::size_of::<ClientStream>()
            );
            eprintln!("Parked: {} bytes", std::mem::size_of::<Parked>());
            eprintln!("Sleep: {} bytes", std::mem::size_of::<tokio::time::Sleep>());
        });
    }
}
