//! The HTTP/3 front end: a QUIC connection the front door admitted
//! (`accept::serve_quic`), its handshake, and its request streams, each in
//! a task of its own on the worker. A stream's head becomes the neutral
//! request (`http::h2_message::request_from_h3`: HTTP/3's pseudo-fields and
//! rules are HTTP/2's) and goes through the same exchange, hooks, pools and
//! balancers as an HTTP/1 or HTTP/2 request (`pipeline::run`), so a policy,
//! a limit, the WAF or the cache means the same thing over QUIC.
//!
//! QUIC and its TLS are quinn's, on rustls with the process's one
//! provider; HTTP/3 framing and QPACK are the h3 crate's. The connection
//! ends on the client's close, on `[vserver.http3] idle_timeout` (QUIC's
//! own idle timer), and on drain (GOAWAY, then the streams in flight
//! finish).

use std::cell::Cell;
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
use crate::accesslog::TlsInfo;
use crate::clock::now_ms;
use crate::http::h2_message;
use crate::http::head::Limits;
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

/// Serves a QUIC connection in a task of its own, from its handshake.
pub fn start(
    ctx: &Rc<WorkerCtx>,
    connecting: (quinn::Connecting, Handshaking),
    peer: SocketAddr,
    listen: SocketAddr,
    guard: ConnGuard,
) {
    tokio::task::spawn_local(run(ctx.clone(), connecting, peer, listen, guard));
}

async fn run(
    ctx: Rc<WorkerCtx>,
    (connecting, counted): (quinn::Connecting, Handshaking),
    peer: SocketAddr,
    listen: SocketAddr,
    guard: ConnGuard,
) {
    let handshake = handshake(&ctx, connecting, peer, &guard).await;
    drop(counted);
    let Some((conn, tls)) = handshake else {
        return;
    };
    let max_field_section = {
        let st = &ctx.snapshot.load().settings;
        (st.max_header_bytes + st.max_request_line) as u64
    };
    let mut h3 = match h3::server::builder()
        .max_field_section_size(max_field_section)
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
    let mut going_away = false;
    loop {
        // Woken at least every second to notice a drain.
        match ctx.idle_watch.within(now_ms() + 1000, h3.accept()).await {
            Ok(Ok(Some(resolver))) => {
                let (ctx, open) = (ctx.clone(), open.clone());
                tokio::task::spawn_local(async move {
                    let _open = open;
                    match resolver.resolve_request().await {
                        Ok((req, stream)) => {
                            stream_task(ctx, req, stream, (peer, listen), tls).await
                        }
                        Err(e) => log::debug(format_args!("client {peer}: HTTP/3 request: {e}")),
                    }
                });
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                log::debug(format_args!("client {peer}: HTTP/3 connection: {e}"));
                break;
            }
            Err(()) if ctx.draining() && !going_away => {
                // GOAWAY: streams already open finish, new ones go elsewhere.
                going_away = true;
                let _ = h3.shutdown(0).await;
            }
            Err(()) => {}
        }
    }
    // After a GOAWAY the streams in flight finish; dropping the HTTP/3
    // connection would close them. (Bounded by the drain's grace period,
    // and by QUIC's idle timeout when the client has gone.)
    while Rc::strong_count(&open) > 1 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(h3);
    drop(guard);
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
            let info = TlsInfo {
                handshake_us: micros_since(began),
                version: "TLSv1.3",
                // quinn does not name the suite it negotiated.
                cipher: "-",
            };
            Some((conn, info))
        }
        Ok(Err(e)) => {
            stats::inc(&vc.tls_handshake_failures);
            log::debug(format_args!("client {peer}: QUIC handshake failed: {e}"));
            None
        }
        Err(()) => {
            stats::inc(&vc.tls_handshake_failures);
            log::debug(format_args!("client {peer}: QUIC handshake timed out"));
            None
        }
    }
}

/// One request stream: its head as the neutral request, then the exchange.
async fn stream_task(
    ctx: Rc<WorkerCtx>,
    req: http::Request<()>,
    mut stream: H3Stream,
    (peer, listen): (SocketAddr, SocketAddr),
    tls: TlsInfo,
) {
    let snap = ctx.snapshot.load_full();
    let st = &snap.settings;
    let Some(vs) = snap.vserver_for(&listen).cloned() else {
        // The vserver was removed by a reload: the client may retry elsewhere.
        stream.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
        return;
    };
    stats::inc(&vs.counters.local().h3_streams);
    // Whether a body follows the head: its length says so, or else the
    // first read does (the h3 crate does not tell whether the stream
    // ended with its HEADERS frame).
    let length = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (first, end_stream) = match length {
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
    let neutral = match h2_message::request_from_h3(&req, end_stream, &limits) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vs.counters.local().bad_requests);
            log::debug(format_args!(
                "vserver {}: client {peer}: HTTP/3 request refused: {} ({})",
                vs.name, e.reason, e.status
            ));
            let (response, body) = crate::http::responses::local_error(e.status, e.reason);
            send_local(&mut stream, &vs, &Local { response, body }).await;
            return;
        }
    };
    drop(req);
    let mut x = Exchange::new(&ctx, &vs, st, (peer, listen), true, None);
    x.facts.http3 = true;
    x.facts.tls = Some(tls);
    let mut client = H3Client::new(&mut stream, first, !end_stream);
    // Boxed: the exchange's future is several KB, and a task's future is
    // moved (copied whole) as it is spawned; this one is made in place.
    Box::pin(pipeline::run(&mut x, &mut client, neutral)).await;
}
