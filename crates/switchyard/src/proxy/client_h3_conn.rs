//! The HTTP/3 front end: a QUIC connection the front door admitted
//! (`accept::serve_quic`), its handshake, and its request streams, each in
//! a task of its own on the worker. A stream's head is decoded field by
//! field into our own fields (`http::request_fields`, the h3 crate's
//! `resolve_request_with`: HTTP/3's pseudo-fields and rules are HTTP/2's),
//! becomes the neutral request as an HTTP/2 one does
//! (`http::h2_message::request_from_wire`) and goes through the same exchange, hooks, pools and
//! balancers as an HTTP/1 or HTTP/2 request (`pipeline::run`), so a policy,
//! a limit, the WAF or the cache means the same thing over QUIC.
//!
//! QUIC and its TLS are quinn's, on rustls with the process's one
//! provider; HTTP/3 framing and QPACK are the h3 crate's. The connection
//! ends on the client's close, on `[vserver.http3] idle_timeout` (QUIC's
//! own idle timer), and on drain (GOAWAY, then the streams in flight
//! finish).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Buf, Bytes};

use super::client_h3_exchange::{send_local, H3Client, H3Stream};
use super::conn::ConnGuard;
use super::ctx::WorkerCtx;
use super::exchange::{micros_since, Exchange};
use super::hooks::Local;
use super::pipeline;
use super::quic_hello;
use crate::accesslog::TlsInfo;
use crate::clock::now_ms;
use crate::http::h2_message;
use crate::http::head::Limits;
use crate::http::request_fields::{Collector, RequestHead};
use crate::log;
use crate::stats;

/// A handshake in progress on a QUIC listener, counted while it lasts
/// (the listener's Retry threshold reads the count).
pub struct Handshaking(Rc<Cell<usize>>);

impl Handshaking {
    pub fn new(count: &Rc<Cell<usize>>) -> Handshaking {
        count.set(count.get() + 1);
        Handshaking(count.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// What a connection knows of the listener it came in on.
pub struct Listener {
    /// Its vserver takes requests in 0-RTT (`[vserver.http3] early_data`).
    pub early_data: bool,
    /// The listener stopped (its address left the configuration, or the
    /// worker drains): the connection says GOAWAY and ends once its
    /// requests are done, so that nothing holds the UDP port after.
    pub stopped: Rc<Cell<bool>>,
    /// The connection's script runs `on_client_hello` in the handshake:
    /// what it chose holds for the requests once the handshake is done.
    pub hello: Option<quic_hello::Pending>,
}

/// Serves a QUIC connection in a task of its own, from its handshake.
pub fn start(
    ctx: &Rc<WorkerCtx>,
    connecting: (quinn::Connecting, Handshaking),
    listener: Listener,
    peer: SocketAddr,
    listen: SocketAddr,
    guard: ConnGuard,
) {
    tokio::task::spawn_local(run(
        ctx.clone(),
        connecting,
        listener,
        (peer, listen),
        guard,
    ));
}

async fn run(
    ctx: Rc<WorkerCtx>,
    (connecting, counted): (quinn::Connecting, Handshaking),
    Listener {
        early_data,
        stopped,
        hello,
    }: Listener,
    (peer, listen): (SocketAddr, SocketAddr),
    mut guard: ConnGuard,
) {
    // With early data the connection serves before its handshake is done
    // (quinn's 0.5-RTT; a request in the client's 0-RTT packets is seen
    // then): `confirmed` says when it is.
    let (conn, tls, confirmed) = if early_data {
        // Not before the whole ClientHello is in: quinn takes the client's
        // transport parameters (its stream limits among them) only then,
        // and a control stream opened before waits for a stream credit
        // that nothing announces again (quinn applies the parameters
        // without waking a waiting `open_uni`). A resuming quic-go
        // client's ClientHello spans two Initial packets: 11 of 40 such
        // connections stalled until the client gave up (2026-12-03,
        // `h3load -mode 0rtt -m 1`), none once this waits.
        let mut connecting = connecting;
        let deadline = now_ms() + ctx.snapshot.load().settings.client_header_ms;
        match ctx
            .idle_watch
            .within(deadline, connecting.handshake_data())
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return handshake_failed(guard.counters.local(), peer, format_args!("failed: {e}"))
            }
            Err(()) => {
                return handshake_failed(guard.counters.local(), peer, format_args!("timed out"))
            }
        }
        match connecting.into_0rtt() {
            Ok((conn, done)) => {
                let confirmed = Rc::new(Cell::new(false));
                tokio::task::spawn_local(confirm(
                    ctx.clone(),
                    (conn.clone(), done),
                    counted,
                    confirmed.clone(),
                    guard.counters.clone(),
                    peer,
                ));
                // The handshake goes on: its time is not known here.
                // (Its suite is: the ServerHello went out with the
                // answer to the ClientHello that made the handshake's
                // data ready.)
                let tls = tls_info(&conn, 0);
                (conn, tls, Some(confirmed))
            }
            // Not on a server (quinn: "always Ok" for incoming
            // connections); nothing to serve if it were.
            Err(_) => return,
        }
    } else {
        let handshake = handshake(&ctx, connecting, peer, &guard).await;
        drop(counted);
        let Some((conn, tls)) = handshake else {
            return;
        };
        (conn, tls, None)
    };
    // The ClientHello is in (the handshake's data says so): the script's
    // on_client_hello has run.
    if let Some(hello) = hello {
        guard.script = hello.finish();
    }
    let client_cert = client_cert(&conn);
    let (max_field_section, websocket) = {
        let snap = ctx.snapshot.load();
        let st = &snap.settings;
        let websocket = snap
            .vserver_for(&listen)
            .is_some_and(|vs| pipeline::tunnels_websocket(vs));
        (
            (st.max_header_bytes + st.max_request_line) as u64,
            websocket,
        )
    };
    // For the debug line when it ends (SWITCHYARD_LOG=debug).
    let transport = log::debug_enabled().then(|| conn.clone());
    let mut h3 = match h3::server::builder()
        .max_field_section_size(max_field_section)
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSocket over HTTP/3 (RFC 9220).
        .enable_extended_connect(websocket)
        .build::<_, Bytes>(h3_quinn::Connection::new(conn))
        .await
    {
        Ok(c) => c,
        Err(e) => {
            log::debug(format_args!("client {peer}: HTTP/3: {e}"));
            return;
        }
    };
    stats::inc(&guard.counters.local().h3_connections);
    // Held by every stream's task: the connection is not done (nor its
    // gauges, which a drain waits on) while one of its streams is.
    let open = Rc::new(());
    // The Huffman strings this client sent, decoded (switchyard_huffman::Memo:
    // a client sends the same ones with every request).
    let huffman_memo = Rc::new(RefCell::new(switchyard_huffman::Memo::new()));
    let mut going_away = false;
    loop {
        // Woken at least every second to notice a drain.
        match ctx.idle_watch.within(now_ms() + 1000, h3.accept()).await {
            Ok(Ok(Some(resolver))) => {
                let (ctx, open, memo) = (ctx.clone(), open.clone(), huffman_memo.clone());
                let confirmed = confirmed.clone();
                let shared = Shared {
                    peer,
                    listen,
                    tls,
                    client_cert: client_cert.clone(),
                    choice: guard.script.clone(),
                };
                // Boxed: the task's future is as large as its largest state
                // (the request's head being read, then the exchange's first
                // steps), and spawning moved it whole twice; a box is moved
                // as a pointer. Per 1 KB request, callgrind: 900 fewer
                // instructions of memcpy against one allocation.
                tokio::task::spawn_local(Box::pin(async move {
                    let _open = open;
                    let mut head = Collector::new(false);
                    match resolver
                        .resolve_request_with(&memo, |name, value| head.field(name, value))
                        .await
                    {
                        Ok(mut stream) => {
                            let (head, malformed) = head.finish_h3(websocket);
                            if let Some(why) = malformed {
                                // RFC 9114 4.1.2: a stream error of type
                                // H3_MESSAGE_ERROR, as the h3 crate did.
                                log::debug(format_args!(
                                    "client {peer}: HTTP/3 request malformed: {why}"
                                ));
                                stream.stop_stream(h3::error::Code::H3_MESSAGE_ERROR);
                                stream.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
                                return;
                            }
                            // Its head came before the handshake was done:
                            // it was in 0-RTT early data (RFC 8470).
                            let early = confirmed.is_some_and(|c| !c.get());
                            stream_task(ctx, head, stream, shared, early).await
                        }
                        Err(e) => log::debug(format_args!("client {peer}: HTTP/3 request: {e}")),
                    }
                }));
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                log::debug(format_args!("client {peer}: HTTP/3 connection: {e}"));
                break;
            }
            Err(()) if !going_away && (ctx.draining() || stopped.get()) => {
                // GOAWAY: streams already open finish, new ones go elsewhere.
                going_away = true;
                let _ = h3.shutdown(0).await;
            }
            // Past the GOAWAY with nothing in flight: closed now (RFC 9114
            // 5.2) rather than when the client leaves or goes idle, so a
            // removed listener's port is free again at once (a group of
            // its own: runtime/listen.rs) and a stop need not wait for it.
            Err(()) if going_away && Rc::strong_count(&open) == 1 => break,
            Err(()) => {}
        }
    }
    // After a GOAWAY the streams in flight finish; dropping the HTTP/3
    // connection would close them (dropping it closes the connection with
    // H3_NO_ERROR). (Bounded by the drain's grace period, and by QUIC's
    // idle timeout when the client has gone.)
    while Rc::strong_count(&open) > 1 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(h3);
    drop(guard);
    // The transport's own account (RTT, congestion window and events,
    // losses, frames each way): what to look at when a connection's
    // requests were slow but the server's request window was not.
    // (Only gathered when it is written: the stats are read under the
    // connection's lock.)
    if let Some(transport) = transport {
        log::debug(format_args!(
            "client {peer}: HTTP/3 connection ended: {:?}",
            transport.stats()
        ));
    }
}

/// The QUIC handshake (its TLS 1.3 inside), bounded by `client_header`,
/// counted as a TLS handshake of the vserver.
async fn handshake(
    ctx: &WorkerCtx,
    connecting: quinn::Connecting,
    peer: SocketAddr,
    guard: &ConnGuard,
) -> Option<(quinn::Connection, TlsInfo)> {
    let vc = guard.counters.local();
    let began = Instant::now();
    let deadline = now_ms() + ctx.snapshot.load().settings.client_header_ms;
    match ctx.idle_watch.within(deadline, connecting).await {
        Ok(Ok(conn)) => {
            stats::inc(&vc.tls_handshakes);
            let tls = tls_info(&conn, micros_since(began));
            Some((conn, tls))
        }
        Ok(Err(e)) => {
            handshake_failed(vc, peer, format_args!("failed: {e}"));
            None
        }
        Err(()) => {
            handshake_failed(vc, peer, format_args!("timed out"));
            None
        }
    }
}

/// A QUIC handshake that failed or timed out, counted as a TLS handshake
/// failure of the vserver.
fn handshake_failed(vc: &stats::VsCounters, peer: SocketAddr, why: std::fmt::Arguments<'_>) {
    stats::inc(&vc.tls_handshake_failures);
    log::debug(format_args!("client {peer}: QUIC handshake {why}"));
}

fn tls_info(conn: &quinn::Connection, handshake_us: u32) -> TlsInfo {
    TlsInfo {
        handshake_us,
        version: "TLSv1.3",
        cipher: crate::tls::quic_suite::suite_of(conn),
    }
}

/// The rest of a handshake that let 0-RTT requests in (`into_0rtt`):
/// bounded by `client_header` and counted as any QUIC handshake; once it
/// is done, requests are no longer early (`confirmed`). One that fails
/// or times out closes the connection, its early requests with it.
async fn confirm(
    ctx: Rc<WorkerCtx>,
    (conn, done): (quinn::Connection, quinn::ZeroRttAccepted),
    counted: Handshaking,
    confirmed: Rc<Cell<bool>>,
    counters: std::sync::Arc<stats::Sharded<stats::VsCounters>>,
    peer: SocketAddr,
) {
    let deadline = now_ms() + ctx.snapshot.load().settings.client_header_ms;
    let finished = ctx.idle_watch.within(deadline, done).await;
    drop(counted);
    let vc = counters.local();
    match (finished, conn.close_reason()) {
        // It resolves at the handshake's end, or when the connection is
        // lost before it.
        (Ok(_), None) => {
            confirmed.set(true);
            stats::inc(&vc.tls_handshakes);
        }
        (Ok(_), Some(e)) => handshake_failed(vc, peer, format_args!("failed: {e}")),
        (Err(()), _) => {
            handshake_failed(vc, peer, format_args!("timed out"));
            conn.close(0u32.into(), b"handshake timed out");
        }
    }
}

/// Safe methods (RFC 9110 9.2.1) without a body: what may go on from 0-RTT
/// early data, which an attacker can replay (RFC 8470 3).
fn early_ok(r: &crate::http::message::Request, end_stream: bool) -> bool {
    use crate::http::message::Method;
    end_stream && matches!(r.method, Method::Get | Method::Head | Method::Options)
}

/// The verified client certificate of a QUIC handshake (quinn's peer
/// identity is the chain rustls verified against `client_ca`), read once
/// per connection. None after a 0-RTT start whose resumed session did not
/// carry one: such requests have no subject, so a rule on it fails closed.
fn client_cert(conn: &quinn::Connection) -> Option<std::sync::Arc<crate::tls::ClientCert>> {
    let chain = conn
        .peer_identity()?
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    crate::tls::client_cert_of(chain.first()?).map(std::sync::Arc::new)
}

/// What the request streams of one connection share.
struct Shared {
    peer: SocketAddr,
    listen: SocketAddr,
    tls: TlsInfo,
    client_cert: Option<std::sync::Arc<crate::tls::ClientCert>>,
    /// What the script's connection events chose (`conn_scripting.rs`).
    choice: Option<Rc<super::conn::ConnChoice>>,
}

/// One request stream: its head as the neutral request, then the exchange.
/// `early`: it came in 0-RTT early data.
async fn stream_task(
    ctx: Rc<WorkerCtx>,
    req: RequestHead,
    mut stream: H3Stream,
    shared: Shared,
    early: bool,
) {
    let Shared {
        peer,
        listen,
        tls,
        client_cert,
        choice,
    } = shared;
    let snap = ctx.snapshot.load_full();
    let st = &snap.settings;
    let Some(vs) = snap.vserver_for(&listen).cloned() else {
        // The vserver was removed by a reload: the client may retry elsewhere.
        stream.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
        return;
    };
    stats::inc(&vs.counters.local().h3_streams);
    // An extended CONNECT (RFC 9220): the stream's DATA is the tunnel,
    // sent once the client has our 200, so nothing is read here.
    let tunnel = req.protocol.is_some();
    // Whether a body follows the head: its length says so, or else the
    // first read does (the h3 crate does not tell whether the stream
    // ended with its HEADERS frame).
    let length = req
        .fields
        .get("content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (first, end_stream) = match length {
        _ if tunnel => (None, false),
        Some(n) => (None, n == 0),
        None => match stream.recv_data().await {
            Ok(None) => (None, true),
            Ok(Some(mut b)) => (Some(b.copy_to_bytes(b.remaining())), false),
            Err(e) => {
                log::debug(format_args!("client {peer}: HTTP/3 request body: {e}"));
                return;
            }
        },
    };
    let limits = Limits {
        max_request_line: st.max_request_line,
        max_header_bytes: st.max_header_bytes,
        max_headers: st.max_headers,
    };
    let RequestHead {
        method,
        path,
        authority,
        protocol,
        fields,
        ..
    } = req;
    let converted = match protocol {
        Some(protocol) => {
            h2_message::extended_connect_from_wire(&protocol, (path, authority), &fields, &limits)
        }
        None => {
            let pseudo = (method.unwrap_or_default(), path, authority);
            h2_message::request_from_wire(pseudo, &fields, end_stream, &limits)
        }
    };
    let mut neutral = match converted {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vs.counters.local().bad_requests);
            log::debug(format_args!(
                "vserver {}: client {peer}: HTTP/3 request refused: {} ({})",
                vs.name, e.reason, e.status
            ));
            let (response, body) = crate::http::responses::local_error(e.status, e.reason);
            // Boxed, as below: only a refused request pays for this
            // future, which would otherwise make every request's task (and
            // the copy of it that spawning makes) larger.
            Box::pin(send_local(&mut stream, &vs, &Local { response, body })).await;
            return;
        }
    };
    drop(fields);
    if early {
        // RFC 8470: a request that may be a replay goes on only if it is
        // safe to repeat, and marked so that the member can still say 425
        // (which the client then gets, and repeats after the handshake);
        // others, a tunnel among them (`end_stream` is false for one), are
        // answered 425 here. A client's own Early-Data field stays as it
        // is on requests that are not early (5.1: it may come from an
        // earlier hop).
        if !early_ok(&neutral, end_stream) {
            stats::inc(&vs.counters.local().h3_too_early);
            let (response, body) = crate::http::responses::local_error(
                425,
                "not safe to take in 0-RTT early data; send it again now that the handshake is done",
            );
            Box::pin(send_local(&mut stream, &vs, &Local { response, body })).await;
            return;
        }
        stats::inc(&vs.counters.local().h3_early_requests);
        neutral.head.fields.set(b"early-data", b"1");
    }
    let subject = vs
        .tls
        .as_ref()
        .and_then(|t| t.client_subject_header.as_ref())
        .and(client_cert.as_deref().map(|c| c.subject.as_str()));
    let mut x = Exchange::new(&ctx, &vs, st, (peer, listen), true, subject);
    x.facts.http3 = true;
    x.facts.tls = Some(tls);
    if vs.script.is_some() {
        x.client_cert = client_cert.clone();
    }
    if let Some(choice) = choice.as_deref() {
        super::conn_scripting::apply(&mut x, choice);
    }
    let mut client = if tunnel {
        H3Client::tunnel(stream)
    } else {
        H3Client::new(stream, first, !end_stream)
    };
    // Boxed: the exchange's future is several KB, and a task's future is
    // moved (copied whole) as it is spawned; this one is made in place.
    Box::pin(pipeline::run(&mut x, &mut client, neutral)).await;
}
