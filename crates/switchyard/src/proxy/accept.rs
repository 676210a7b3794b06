//! The front door: every TCP connection a listener accepts, from the
//! accept to the protocol that serves it, one way for all of them.
//!
//! 1. Its vserver (by the listening address) and the shield's admission
//!    (`shield::admission`: ACLs, then per-source limits), before any byte
//!    is read: a refused connection is closed at once.
//! 2. The PROXY protocol header, from a source the vserver trusts to send
//!    one: its client address is then the one policies, persistence, logs
//!    and X-Forwarded-For see.
//! 3. The script's connection events on HTTP vservers (`conn_scripting`):
//!    `on_accept`, which may refuse; then, where it terminates TLS,
//!    `on_client_hello` between reading the ClientHello and answering it.
//! 4. The TLS handshake, where the vserver terminates TLS (HTTP and `tcp`
//!    vservers alike, one handshake, one set of counters).
//! 5. The hand-off, exactly once: to the L4 relay (`l4::tcp`), to the
//!    HTTP/2 connection (`client_h2_conn`: ALPN "h2", or an `h2c_only`
//!    listener), or to the HTTP/1 connection (`client_h1_conn`), which
//!    hands a connection whose first request is the HTTP/2 preface (h2c
//!    with prior knowledge) on to `client_h2_conn`: only its first read
//!    can tell.
//!
//! The common case, plain HTTP from a client that speaks for itself, goes
//! from the accept to the session at once, in no task of its own and not
//! yet in tokio's reactor (`PlainTcp`). The others wait for a header or a
//! handshake in a task of the front door, which ends when it hands off,
//! so the handshake's state (large) is freed before the first request and
//! never weighs on an idle connection. The config is the one current at
//! accept: a reload with a new certificate applies to connections
//! accepted after it.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::client_h1_conn;
use super::client_h2_conn;
use super::client_h3_conn;
use super::conn::{private_key_of, ConnGuard};
use super::conn_scripting::{self, Carrier, ConnEvents};
use super::ctx::WorkerCtx;
use super::exchange::micros_since;
use super::quic_hello;
use super::stream::{ClientStream, PlainTcp, TlsConn};
use crate::accesslog::{l4::End as LogEnd, ScriptLog, TlsInfo};
use crate::clock::now_ms;
use crate::config::snapshot::{AcceptProxy, Snapshot, VServer};
use crate::l4::proxy_protocol;
use crate::l4::scripting::{hello_names, BeforeHandshake, ClientHelloEvent, Said};
use crate::log;
use crate::shield::admission::{self, Closing, Rules, Verdict};
use crate::stats;
use crate::tls::TlsServer;

/// Where a connection goes once the front door is done with it.
enum To {
    /// A `tcp` vserver: the L4 relay, on the config of the accept.
    Relay {
        snap: Arc<Snapshot>,
        vs: Arc<VServer>,
        accepted: Instant,
    },
    /// HTTP/1 (or HTTP/2 by ALPN on TLS, or by the preface on h2c).
    Http,
    /// A plain listener that speaks only HTTP/2 (`h2c_only`).
    Http2,
}

/// What the front door knows of an admitted connection.
struct Door {
    guard: ConnGuard,
    /// `[vserver.tls]`: the handshake comes before the hand-off.
    tls: Option<Arc<TlsServer>>,
    /// The source is trusted to send a PROXY header: it comes first.
    proxy: Option<Arc<AcceptProxy>>,
    /// An HTTP vserver whose script has connection events
    /// (`conn_scripting`): they run here, before any request.
    script: Option<Arc<VServer>>,
    to: To,
}

/// Serves one client connection accepted on `listen`.
/// `stream` is non-blocking and not yet in tokio's reactor.
pub fn serve(
    ctx: &Rc<WorkerCtx>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    listen: SocketAddr,
) {
    let door = {
        let snap = ctx.snapshot.load();
        let Some(vs) = snap.vserver_for(&listen) else {
            return;
        };
        match admit(&snap, vs, peer, listen, crate::shield::acl::TCP) {
            Ok(leases) => open(ctx, &snap, vs, peer, leases),
            Err(how) => {
                admission::close_refused(stream, how);
                return;
            }
        }
    };
    // TCP_NODELAY comes from the listening socket (runtime/listen.rs):
    // accepted sockets inherit it, so no setsockopt per connection.
    if door.tls.is_some() || door.proxy.is_some() {
        let Some(tcp) = register(PlainTcp::bare(stream), peer) else {
            return;
        };
        tokio::task::spawn_local(front(ctx.clone(), tcp, peer, listen, door));
        return;
    }
    let Door {
        mut guard,
        to,
        script,
        ..
    } = door;
    if let Some(vs) = &script {
        match accepted_by_script(vs, peer, Carrier::Plain) {
            Ok(events) => guard.script = events.finish(),
            // Closed before a byte is read.
            Err(()) => return,
        }
    }
    match to {
        To::Relay { snap, vs, accepted } => {
            let Some(tcp) = register(PlainTcp::bare(stream), peer) else {
                return;
            };
            let conn = crate::l4::tcp::ClientConn::Plain {
                tcp,
                proxied: false,
            };
            let relay = crate::l4::tcp::serve(conn, peer, listen, (snap, vs), accepted, guard);
            tokio::task::spawn_local(relay);
        }
        To::Http | To::Http2 => {
            let stream = ClientStream::Plain(PlainTcp::bare(stream));
            to_http(ctx, stream, to, peer, listen, guard);
        }
    }
}

/// The shield's decision on a new connection, counted on its vserver:
/// the leases of the per-source limits that count it, or how to close it.
/// `proto`: the ACLs' protocol (TCP, or UDP for QUIC).
fn admit(
    snap: &Snapshot,
    vs: &VServer,
    peer: SocketAddr,
    listen: SocketAddr,
    proto: u8,
) -> Result<Option<Box<[crate::shield::stick::Lease]>>, Closing> {
    let rules = Rules {
        global: snap.shield.as_deref(),
        acl: vs.acl.as_deref(),
        limits: &vs.limits,
    };
    let verdict = admission::connection(&rules, peer, listen, proto);
    let how = verdict.closing();
    match verdict {
        Verdict::Admit(leases) => return Ok(leases),
        Verdict::AclDropped => stats::inc(&vs.counters.local().acl_dropped),
        Verdict::AclRejected => stats::inc(&vs.counters.local().acl_rejected),
        Verdict::Limited { limit, reason } => log::debug(format_args!(
            "vserver {}: limit {:?}: connection from {peer} refused ({})",
            vs.name,
            limit.name,
            reason.name()
        )),
    }
    Err(how.unwrap_or(Closing::Close))
}

/// Counts an admitted connection and says where it goes.
fn open(
    ctx: &WorkerCtx,
    snap: &Arc<Snapshot>,
    vs: &Arc<VServer>,
    peer: SocketAddr,
    leases: Option<Box<[crate::shield::stick::Lease]>>,
) -> Door {
    let c = vs.counters.local();
    stats::inc(&c.client_connections_total);
    stats::inc(&c.client_connections_active);
    ctx.active.set(ctx.active.get() + 1);
    let guard = ConnGuard {
        active: ctx.active.clone(),
        counters: vs.counters.clone(),
        leases,
        // Its key is set once the client is known (`to_http`).
        private: vs.private_member_conns.then(|| (ctx.idle.clone(), 0)),
        // Set once the script's connection events ran (`front`, `serve`).
        script: None,
    };
    let to = if vs.l4.is_some() {
        To::Relay {
            snap: Arc::clone(snap),
            vs: Arc::clone(vs),
            accepted: Instant::now(),
        }
    } else if vs.h2c_only {
        To::Http2
    } else {
        To::Http
    };
    Door {
        guard,
        tls: vs.tls.clone(),
        proxy: vs.accept_proxy.clone().filter(|ap| ap.trusts(peer.ip())),
        script: conn_scripting::wanted(vs).then(|| Arc::clone(vs)),
        to,
    }
}

/// `on_accept` of an HTTP vserver's script, for `client`: the events' run
/// (for `on_client_hello` and the connection's choice), or Err when the
/// script refused the connection or failed (counted, logged): it closes.
fn accepted_by_script(
    vs: &VServer,
    client: SocketAddr,
    carrier: Carrier,
) -> Result<ConnEvents, ()> {
    let mut events = ConnEvents::start(vs, client, carrier)?;
    match events.accept(vs) {
        Said::Go(_) => Ok(events),
        Said::Refuse | Said::Failed => {
            log::debug(format_args!(
                "vserver {}: client {client}: refused by the script's on_accept",
                vs.name
            ));
            Err(())
        }
    }
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

/// A connection after the front door's waits: plain, or its TLS done.
enum Arrived {
    Plain(TcpStream),
    Tls(Box<Handshaken>),
}

/// The waits of the front door, in a task: the PROXY header, then the
/// TLS handshake; then the hand-off.
async fn front(
    ctx: Rc<WorkerCtx>,
    tcp: TcpStream,
    peer: SocketAddr,
    listen: SocketAddr,
    door: Door,
) {
    let Door {
        mut guard,
        tls,
        proxy,
        script,
        to,
    } = door;
    let mut client = peer;
    if let Some(ap) = &proxy {
        match read_proxy_header(&tcp, ap).await {
            Ok(said) => client = said.unwrap_or(peer),
            Err(e) => {
                stats::inc(&guard.counters.local().bad_requests);
                log::debug(format_args!(
                    "PROXY header from {peer} on {listen}: {e}; closed"
                ));
                return refused(&to, peer, LogEnd::Refused, None);
            }
        }
    }
    // The script's on_accept sees the client a PROXY header named, and
    // refuses before the handshake costs anything.
    let mut events = match &script {
        Some(vs) => match accepted_by_script(
            vs,
            client,
            if tls.is_some() {
                Carrier::Tls
            } else {
                Carrier::Plain
            },
        ) {
            Ok(e) => Some(e),
            Err(()) => return,
        },
        None => None,
    };
    // A tcp vserver that terminates TLS runs its script's on_accept here
    // too, before the handshake, and on_client_hello in it; the relay
    // takes the script on.
    let mut before = None;
    if let (To::Relay { vs, .. }, Some(_)) = (&to, &tls) {
        match BeforeHandshake::accept(vs, client) {
            Ok(b) => before = b,
            Err(said) => {
                log::debug(format_args!(
                    "vserver {}: client {client}: refused by the script's on_accept",
                    vs.name
                ));
                return refused(&to, client, LogEnd::Refused, said);
            }
        }
    }
    let arrived = match tls {
        None => Arrived::Plain(tcp),
        Some(tls) => {
            let hello: Option<(&VServer, &mut dyn ClientHelloEvent)> =
                match (&script, events.as_mut(), &to, before.as_mut()) {
                    (Some(vs), Some(e), _, _) if e.wants_client_hello() => Some((&**vs, e)),
                    (_, _, To::Relay { vs, .. }, Some(b)) if b.wants_client_hello() => {
                        Some((&**vs, b))
                    }
                    _ => None,
                };
            match handshake(&ctx, tcp, &tls, client, &guard, hello).await {
                Some(h) => Arrived::Tls(Box::new(h)),
                None => {
                    let said = before.as_mut().and_then(BeforeHandshake::take_log);
                    return refused(&to, client, LogEnd::TlsFailed, said);
                }
            }
        }
    };
    guard.script = events.and_then(ConnEvents::finish);
    match to {
        To::Relay { snap, vs, accepted } => {
            use crate::l4::tcp::{serve, ClientConn};
            let conn = match arrived {
                Arrived::Plain(tcp) => ClientConn::Plain {
                    tcp,
                    proxied: proxy.is_some(),
                },
                Arrived::Tls(h) => ClientConn::Tls(Box::new(h.stream), h.info, before),
            };
            let relay = serve(conn, client, listen, (snap, vs), accepted, guard);
            tokio::task::spawn_local(relay);
        }
        To::Http | To::Http2 => {
            let (stream, to) = match arrived {
                Arrived::Plain(tcp) => (ClientStream::Plain(PlainTcp::registered(tcp)), to),
                // ALPN decides the codec.
                Arrived::Tls(h) => {
                    let to = if h.alpn_h2 { To::Http2 } else { To::Http };
                    let conn = TlsConn {
                        stream: h.stream,
                        client_cert: h.client_cert,
                        info: h.info,
                    };
                    (ClientStream::Tls(Box::new(conn)), to)
                }
            };
            to_http(&ctx, stream, to, client, listen, guard);
        }
    }
}

/// The access log line of a `tcp` vserver's connection that the front
/// door closed (HTTP vservers log requests, not connections).
/// `said`: what a tcp vserver's script said before (`c:log`).
fn refused(to: &To, client: SocketAddr, end: LogEnd, said: Option<Box<ScriptLog>>) {
    if let To::Relay { vs, accepted, .. } = to {
        crate::l4::tcp::log_refused(vs, client, *accepted, end, said);
    }
}

/// Hands an HTTP connection to its protocol.
fn to_http(
    ctx: &Rc<WorkerCtx>,
    stream: ClientStream,
    to: To,
    client: SocketAddr,
    listen: SocketAddr,
    mut guard: ConnGuard,
) {
    open_private(&mut guard, client, listen);
    match to {
        To::Http2 => {
            client_h2_conn::start(ctx.clone(), stream, BytesMut::new(), client, listen, guard)
        }
        _ => client_h1_conn::start(ctx, stream, client, listen, guard),
    }
}

/// The client as its requests will name it (a PROXY header's address
/// included): the key of its private member connections.
fn open_private(guard: &mut ConnGuard, client: SocketAddr, listen: SocketAddr) {
    if let Some((idle, key)) = &mut guard.private {
        *key = private_key_of(client, listen);
        idle.open_private(*key);
    }
}

/// A finished TLS handshake.
struct Handshaken {
    stream: TlsStream<TcpStream>,
    info: TlsInfo,
    /// The client certificate's subject, when the vserver passes it on.
    client_cert: Option<std::sync::Arc<crate::tls::ClientCert>>,
    alpn_h2: bool,
}

/// A TLS handshake that failed with `error`, or timed out (None): counted
/// and logged. A bare close (a port probe, a client giving up) is not a
/// failed handshake; an alert or a protocol error is.
fn handshake_failed<T>(
    vc: &stats::VsCounters,
    client: SocketAddr,
    error: Option<std::io::Error>,
) -> Option<T> {
    match error {
        Some(e) => {
            if e.kind() != std::io::ErrorKind::UnexpectedEof {
                stats::inc(&vc.tls_handshake_failures);
            }
            log::debug(format_args!("client {client}: TLS handshake failed: {e}"));
        }
        None => {
            stats::inc(&vc.tls_handshake_failures);
            log::debug(format_args!("client {client}: TLS handshake timed out"));
        }
    }
    None
}

/// Runs a TLS handshake, bounded by the client_header timeout, and counts
/// it on the vserver. None when it failed (logged). `hello`: the script's
/// `on_client_hello` runs on the ClientHello first (`client_hello`).
async fn handshake(
    ctx: &WorkerCtx,
    tcp: TcpStream,
    tls: &TlsServer,
    client: SocketAddr,
    guard: &ConnGuard,
    hello: Option<(&VServer, &mut dyn ClientHelloEvent)>,
) -> Option<Handshaken> {
    let deadline = now_ms() + ctx.snapshot.load().settings.client_header_ms;
    let vc = guard.counters.local();
    let began = Instant::now();
    let accept = match hello {
        // The common case: one shared config, no look at the hello first.
        None => tokio_rustls::TlsAcceptor::from(tls.config.clone()).accept(tcp),
        Some((vs, events)) => client_hello(ctx, tcp, tls, client, deadline, (vs, events)).await?,
    };
    let stream = match ctx.idle_watch.within(deadline, accept).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return handshake_failed(vc, client, Some(e)),
        Err(()) => return handshake_failed(vc, client, None),
    };
    let conn = stream.get_ref().1;
    if conn.alpn_protocol() == Some(crate::acme::challenge::ACME_TLS_ALPN) {
        // The CA checked the TLS-ALPN-01 validation certificate: the
        // connection carries nothing more (RFC 8737 section 3).
        log::debug(format_args!(
            "client {client}: TLS-ALPN-01 validation handshake"
        ));
        return None;
    }
    stats::inc(&vc.tls_handshakes);
    if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        stats::inc(&vc.tls_resumed);
    }
    Some(Handshaken {
        info: TlsInfo::of(conn, micros_since(began)),
        client_cert: tls
            .client_subject_header
            .as_ref()
            .and_then(|_| crate::tls::client_cert(conn))
            .map(std::sync::Arc::new),
        alpn_h2: conn.alpn_protocol() == Some(b"h2"),
        stream,
    })
}

/// The first half of a handshake whose vserver's script defines
/// `on_client_hello`: the ClientHello is read (rustls' `Acceptor`, bounded
/// by the handshake's deadline), the script runs on it, and the handshake
/// goes on with the vserver's config, or a copy of it that serves the
/// certificate the script chose. None when the client went away or sent
/// no valid ClientHello (counted as the handshake would), or the script
/// refused (handshake_failure alert) or failed (internal_error alert).
///
/// Only for scripts that define the event: other vservers keep the
/// one-step accept, and a copied config (a few allocations, next to a
/// handshake's signature) only when the script chose a certificate.
async fn client_hello(
    ctx: &WorkerCtx,
    tcp: TcpStream,
    tls: &TlsServer,
    client: SocketAddr,
    deadline: u64,
    (vs, events): (&VServer, &mut dyn ClientHelloEvent),
) -> Option<tokio_rustls::Accept<TcpStream>> {
    let vc = vs.counters.local();
    let lazy = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
    let start = match ctx.idle_watch.within(deadline, lazy).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return handshake_failed(vc, client, Some(e)),
        Err(()) => return handshake_failed(vc, client, None),
    };
    let (sni, alpn) = hello_names(&start.client_hello());
    // An ACME CA's TLS-ALPN-01 validation is the certificate resolver's,
    // never the script's to refuse or answer with another certificate.
    let acme = alpn
        .iter()
        .any(|p| p.as_bytes() == crate::acme::challenge::ACME_TLS_ALPN);
    let said = if acme {
        Said::Go(None)
    } else {
        events.client_hello(vs, sni, alpn)
    };
    let (alert, cert) = match said {
        Said::Go(cert) => (None, cert),
        Said::Refuse => (Some(ALERT_HANDSHAKE_FAILURE), None),
        Said::Failed => (Some(ALERT_INTERNAL_ERROR), None),
    };
    if let Some(description) = alert {
        log::debug(format_args!(
            "vserver {}: client {client}: TLS handshake refused by the script's on_client_hello",
            vs.name
        ));
        let mut tcp = start.io;
        // A plaintext fatal alert, as the first answer to a ClientHello
        // may be (RFC 8446 6; TLS 1.2 likewise): the client says why it
        // failed instead of "connection reset". Bounded: a client that
        // does not read must not hold the task.
        let record = [21, 3, 3, 0, 2, 2, description];
        let _ = ctx
            .idle_watch
            .within(now_ms() + 1000, async {
                use tokio::io::AsyncWriteExt;
                tcp.write_all(&record).await?;
                tcp.shutdown().await
            })
            .await;
        return None;
    }
    let config = match cert {
        None => tls.config.clone(),
        Some(name) => {
            let mut c = (*tls.config).clone();
            c.cert_resolver = Arc::new(crate::tls::ForName {
                store: tls.certs.clone(),
                name,
            });
            Arc::new(c)
        }
    };
    Some(start.into_stream(config))
}

/// TLS alert descriptions (RFC 8446 6).
const ALERT_HANDSHAKE_FAILURE: u8 = 40;
const ALERT_INTERNAL_ERROR: u8 = 80;

/// Reads a PROXY protocol header without consuming what follows it:
/// peeks until the header is whole, then reads exactly its bytes. Some(the
/// client address it carries); None for LOCAL / UNKNOWN.
pub async fn read_proxy_header(
    s: &TcpStream,
    ap: &AcceptProxy,
) -> Result<Option<SocketAddr>, String> {
    let mut buf = vec![0u8; 536];
    let work = async {
        loop {
            let n = s.peek(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed before the header".to_string());
            }
            match proxy_protocol::parse(&buf[..n]).map_err(|e| e.to_string())? {
                proxy_protocol::Parsed::Incomplete if n == buf.len() => {
                    // A v2 header with TLVs: make room and peek again.
                    if buf.len() >= 16 + 4096 {
                        return Err("header longer than 4 KiB".into());
                    }
                    buf.resize(buf.len() * 2, 0);
                }
                proxy_protocol::Parsed::Incomplete => {
                    // Wait for more bytes than the ones already peeked.
                    s.readable().await.map_err(|e| e.to_string())?;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                proxy_protocol::Parsed::Done {
                    header_len,
                    proxied,
                } => {
                    skip(s, header_len).await?;
                    return Ok(proxied.map(|p| p.source));
                }
            }
        }
    };
    match tokio::time::timeout(Duration::from_millis(ap.timeout_ms), work).await {
        Ok(r) => r,
        Err(_) => Err(format!("no complete header within {} ms", ap.timeout_ms)),
    }
}

/// Reads and drops exactly `n` bytes (a header already peeked whole).
async fn skip(s: &TcpStream, n: usize) -> Result<(), String> {
    let mut discard = vec![0u8; n];
    let mut got = 0;
    while got < n {
        s.readable().await.map_err(|e| e.to_string())?;
        match s.try_read(&mut discard[got..]) {
            Ok(0) => return Err("closed in the header".into()),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// The front door of a QUIC listener (`[vserver.http3]`): every new
/// connection is admitted by the same shield as TCP's (its ACLs by the
/// datagrams' protocol, UDP; the per-source limits), counted, and handed
/// to the HTTP/3 connection (`client_h3_conn`). The handshake runs on the
/// configuration current when the connection arrives: a reload's new
/// certificates apply to connections that arrive after it.
///
/// `steer`: the socket's place in the address's group; the connection IDs
/// this worker issues bring their datagrams back to it (`quic_steer`).
pub async fn serve_quic(
    ctx: Rc<WorkerCtx>,
    socket: std::net::UdpSocket,
    steer: super::quic_steer::Steer,
    listen: SocketAddr,
) {
    let server = {
        let snap = ctx.snapshot.load();
        snap.vserver_for(&listen)
            .and_then(|vs| vs.http3.as_ref())
            .map(|h3| h3.server.clone())
    };
    let Some(server) = server else {
        return;
    };
    let socket = match super::quic_socket::QuicSocket::new(socket) {
        Ok(s) => s,
        Err(e) => {
            log::error(format_args!("QUIC on {listen}: cannot start: {e}"));
            return;
        }
    };
    let endpoint = match quinn::Endpoint::new_with_abstract_socket(
        super::quic_steer::endpoint_config(steer),
        Some((*server).clone()),
        socket,
        Arc::new(super::quic_runtime::WorkerRuntime),
    ) {
        Ok(e) => e,
        Err(e) => {
            log::error(format_args!("QUIC on {listen}: cannot start: {e}"));
            return;
        }
    };
    // Aborted (the address left the configuration, or the worker drains):
    // no new connection is accepted; those open see `stopped`, say GOAWAY,
    // finish their streams and close (`client_h3_conn`).
    struct StopAccepting(quinn::Endpoint, Rc<std::cell::Cell<bool>>);
    impl Drop for StopAccepting {
        fn drop(&mut self) {
            self.0.set_server_config(None);
            self.1.set(true);
        }
    }
    let stopped = Rc::new(std::cell::Cell::new(false));
    let endpoint = StopAccepting(endpoint, stopped.clone());
    let handshaking = Rc::new(std::cell::Cell::new(0));
    let mut current = server;
    while let Some(incoming) = endpoint.0.accept().await {
        // The endpoint's own configuration validates and issues Retry
        // tokens: it follows reloads, so a reload's new token key applies.
        if let Some(h3) = ctx
            .snapshot
            .load()
            .vserver_for(&listen)
            .and_then(|v| v.http3.clone())
        {
            if !Arc::ptr_eq(&h3.server, &current) {
                endpoint.0.set_server_config(Some((*h3.server).clone()));
                current = h3.server.clone();
            }
        }
        admit_quic(&ctx, incoming, listen, (&handshaking, &stopped));
    }
}

/// Admits one QUIC connection attempt, or refuses it (an ACL's drop is
/// ignored: no packet answers it).
fn admit_quic(
    ctx: &Rc<WorkerCtx>,
    incoming: quinn::Incoming,
    listen: SocketAddr,
    (handshaking, stopped): (&Rc<std::cell::Cell<usize>>, &Rc<std::cell::Cell<bool>>),
) {
    let peer = incoming.remote_address();
    let snap = ctx.snapshot.load();
    let Some((vs, h3)) = snap
        .vserver_for(&listen)
        .and_then(|vs| Some((vs, vs.http3.clone()?)))
    else {
        incoming.refuse();
        return;
    };
    // Under load a client proves its address first: a stateless Retry
    // costs one small packet, where a handshake costs state and a
    // signature (RFC 9000 8.1.2). Before the shield's tables too, so that
    // spoofed sources never fill them.
    if handshaking.get() >= h3.retry_threshold
        && !incoming.remote_address_validated()
        && incoming.may_retry()
    {
        stats::inc(&vs.counters.local().quic_retries);
        if let Err(e) = incoming.retry() {
            log::debug(format_args!("client {peer}: QUIC Retry not sent: {e:?}"));
        }
        return;
    }
    // The same shield and counters as TCP's; an ACL's drop answers
    // nothing, any other refusal CONNECTION_REFUSED.
    let leases = match admit(&snap, vs, peer, listen, crate::shield::acl::UDP) {
        Ok(leases) => leases,
        Err(Closing::Drop) => {
            incoming.ignore();
            return;
        }
        Err(_) => {
            incoming.refuse();
            return;
        }
    };
    // on_accept, as for TCP: before the handshake.
    let events = if conn_scripting::wanted(vs) {
        match accepted_by_script(vs, peer, Carrier::Quic) {
            Ok(e) => Some(e),
            Err(()) => {
                incoming.refuse();
                return;
            }
        }
    } else {
        None
    };
    // on_client_hello runs in the handshake, from the certificate
    // resolver of a configuration of the connection's own.
    let (server, events, hello) = match events {
        Some(e) if e.wants_client_hello() => match quic_hello::server_config(&h3, vs, e) {
            Ok((server, pending)) => (server, None, Some(pending)),
            Err(why) => {
                log::warn(format_args!(
                    "vserver {}: client {peer}: QUIC refused: no configuration for on_client_hello: {why}",
                    vs.name
                ));
                incoming.refuse();
                return;
            }
        },
        e => (h3.server.clone(), e, None),
    };
    let connecting = match incoming.accept_with(server) {
        Ok(c) => c,
        Err(e) => {
            log::debug(format_args!("client {peer}: QUIC connection refused: {e}"));
            return;
        }
    };
    let mut guard = open(ctx, &snap, vs, peer, leases).guard;
    guard.script = events.and_then(ConnEvents::finish);
    open_private(&mut guard, peer, listen);
    let counted = client_h3_conn::Handshaking::new(handshaking);
    let listener = client_h3_conn::Listener {
        early_data: h3.early_data,
        stopped: stopped.clone(),
        hello,
    };
    client_h3_conn::start(ctx, (connecting, counted), listener, peer, listen, guard);
}
