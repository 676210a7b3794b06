//! An exchange's way to a member of an h2 pool: a stream on the worker's
//! multiplexed connection to that member (`member::H2Conns`). With an
//! HTTP/2 or HTTP/3 client the request body flows while the response
//! comes back (bidirectional streaming, gRPC).
//!
//! Runs on the worker that owns the client connection.

use std::cell::Cell;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{Reason, SendStream};

use super::client_body::ClientBody;
use super::exchange::{
    body_failure, micros_since, Attempt, ClientSide, Exchange, Failure, Origin, Retry,
};
use super::hooks::Hooks;
use super::member::H2Sink;
use super::member_h2_tunnel::{self, H2Tunnel};
use super::respond::{respond, Inspect, MemberBody};
use crate::clock::now_ms;
use crate::health::passive;
use crate::http::body::BodyError;
use crate::http::h2_message;
use crate::http::message::{Framing, Request};
use crate::http::upgrade;
use crate::log;
use crate::stats;

/// The request's way to a member of an h2 pool: a stream on the worker's
/// multiplexed connection to it.
pub(super) async fn exchange<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
) -> Result<(), Failure> {
    let end = req.head.framing == Framing::None;
    x.facts.attempts += 1;
    // A WebSocket handshake (an HTTP/1.1 client's Upgrade, or what an
    // HTTP/2 or HTTP/3 extended CONNECT became) is an extended CONNECT
    // again (RFC 8441); any other Upgrade is left out (`request_to_h2`),
    // as HTTP/2 has none.
    if req.head.upgrade && upgrade::asks_websocket(&req.head.fields) {
        return websocket(x, hooks, client, req, a).await;
    }
    let (resp_fut, send) = open_stream(x, req, a, Stream::Request { end }).await?;
    x.facts.request_sent();
    let mut upload = H2Sink::new(send);
    // Both directions at once unless a stage inspects request bodies.
    let both_ways = !end && !hooks.wants_request_body();
    if let Some(body) = both_ways.then(|| client.take_body_stream()).flatten() {
        return bidirectional(x, hooks, client, req, a, resp_fut, body, upload).await;
    }
    if !end {
        if req.expect_continue && !client.send_continue(req).await {
            return Err(Failure::cut(Origin::Client, "the client went away"));
        }
        let mc = a.m.counters.local();
        let sent = {
            let mut sink = Inspect {
                hooks,
                x,
                inner: &mut upload,
            };
            client.request_body(req, &mut sink).await
        };
        match sent {
            Ok(n) => {
                if !x.shadow {
                    stats::add(&x.vs.counters.local().bytes_in, n);
                }
                stats::add(&mc.bytes_out, n);
                x.facts.body_in = n;
            }
            Err(e) => {
                if matches!(e, BodyError::Write(_)) {
                    stats::inc(&mc.resets);
                }
                return Err(body_failure(x, e, "the server reset the stream"));
            }
        }
    }
    let deadline = now_ms() + x.upstream_response_ms();
    h2_response(x, hooks, client, req, a, resp_fut, Some(deadline), None).await
}

/// A WebSocket by extended CONNECT: the member's 2xx opens the tunnel
/// (as a 101 to the client's side, `member_h2_tunnel::switched`), any
/// other answer is relayed as a response. A member whose SETTINGS do not
/// allow it gets no such stream: 502, as for any member that cannot
/// serve the request (HAProxy answers alike).
async fn websocket<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
) -> Result<(), Failure> {
    if req.head.get("sec-websocket-key").is_none() {
        stats::inc(&x.vs.counters.local().bad_requests);
        return Err(Failure::new(
            Origin::Client,
            400,
            "a WebSocket handshake without Sec-WebSocket-Key",
        ));
    }
    let (resp_fut, send) = open_stream(x, req, a, Stream::WebSocket).await?;
    x.facts.request_sent();
    let deadline = now_ms() + x.upstream_response_ms();
    h2_response(
        x,
        hooks,
        client,
        req,
        a,
        resp_fut,
        Some(deadline),
        Some(send),
    )
    .await
}

/// What a new stream to the member carries.
#[derive(Clone, Copy)]
enum Stream {
    /// A request; `end`: it has no body (END_STREAM on its HEADERS).
    Request { end: bool },
    /// A WebSocket's extended CONNECT.
    WebSocket,
}

/// A ready connection to the member and a new stream on it, the head sent.
/// Until then a failure may move to another member.
async fn open_stream(
    x: &mut Exchange<'_>,
    req: &Request,
    a: &Attempt<'_>,
    what: Stream,
) -> Result<(ResponseFuture, SendStream<Bytes>), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let connecting = Instant::now();
    let (mut sender, reused) = x
        .h2_members
        .ready(
            m,
            (pool.tls.as_deref(), pool.local_source()),
            Duration::from_millis(x.upstream_connect_ms()),
            Duration::from_millis(pool.idle_timeout_ms),
        )
        .await
        .map_err(|e| a.connect_failed(x, &e, "HTTP/2 "))?;
    if reused {
        stats::inc(&mc.connections_reused);
    }
    x.facts.connect_us = Some(if reused { 0 } else { micros_since(connecting) });
    let (head, end) = match what {
        Stream::Request { end } => (h2_message::request_to_h2(req, m.addr), end),
        Stream::WebSocket => {
            let wait = Duration::from_millis(x.upstream_connect_ms());
            if !x.h2_members.takes_extended_connect(m, &sender, wait).await {
                stats::inc(&mc.bad_responses);
                log::warn(format_args!(
                    "vserver {}: member {}: a WebSocket needs SETTINGS_ENABLE_CONNECT_PROTOCOL \
                     (RFC 8441) from an HTTP/2 member, and this one did not send it",
                    x.vs.name,
                    a.label()
                ));
                return Err(Failure::new(
                    Origin::Member,
                    502,
                    "the server does not take WebSocket over HTTP/2",
                ));
            }
            (h2_message::websocket_to_h2(req, m.addr), false)
        }
    };
    let Some(head) = head else {
        stats::inc(&x.vs.counters.local().bad_requests);
        return Err(Failure::new(
            Origin::Client,
            400,
            "the request cannot be restated for an HTTP/2 member",
        )
        .closing());
    };
    match sender.send_request(head, end) {
        Ok(opened) => {
            stats::inc(&mc.requests);
            Ok(opened)
        }
        Err(e) => {
            // The connection went away between ready() and now.
            x.h2_members.forget(m);
            stats::inc(&mc.resets);
            let f = Failure::new(
                Origin::Member,
                502,
                format!("the server's HTTP/2 connection failed: {e}"),
            );
            Err(a.final_failure(x, f.retry(Retry::AnyMember)))
        }
    }
}

/// HTTP/2 on both sides: request DATA and trailers flow while the response
/// comes back (gRPC bidirectional streaming). Taken only when no stage
/// inspects request bodies (`Hooks::wants_request_body`): the hooks are
/// busy with the response meanwhile.
#[allow(clippy::too_many_arguments)]
async fn bidirectional<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    resp_fut: ResponseFuture,
    mut body: ClientBody,
    mut upload: H2Sink,
) -> Result<(), Failure> {
    let mc = a.m.counters.local();
    // The upload needs only the vserver (names, counters): the exchange
    // itself stays free for the response.
    let vs = x.vs;
    let body_in = Cell::new(0);
    let up = async {
        match body.pump(&mut upload).await {
            Ok(n) => {
                stats::add(&vs.counters.local().bytes_in, n);
                stats::add(&mc.bytes_out, n);
                body_in.set(n);
            }
            Err(e) => {
                log::debug(format_args!(
                    "vserver {}: member {}: HTTP/2 request body: {e:?}",
                    vs.name,
                    a.label()
                ));
                // The member must not take a cut or malformed body
                // (HTTP/3 trailers) for a whole one.
                if matches!(e, BodyError::Read(_) | BodyError::Framing(_)) {
                    upload.reset(Reason::CANCEL);
                }
            }
        }
    };
    let down = h2_response(x, hooks, client, req, a, resp_fut, None, None);
    let ((), r) = tokio::join!(up, down);
    x.facts.body_in = body_in.get();
    r
}

/// Waits for an h2 member's response head (until `deadline`, when the
/// request was sent whole), then relays the response.
#[allow(clippy::too_many_arguments)]
async fn h2_response<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    resp_fut: h2::client::ResponseFuture,
    deadline: Option<u64>,
    tunnel: Option<SendStream<Bytes>>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let waited = match deadline {
        Some(d) => x.timers.within(d, resp_fut).await,
        None => Ok(resp_fut.await),
    };
    let resp = match waited {
        Ok(Ok(r)) => {
            x.facts.response_head();
            r
        }
        Ok(Err(e)) => {
            if e.is_go_away() || e.is_io() {
                x.h2_members.forget(m);
            }
            stats::inc(&mc.resets);
            let (status, why) = if e.reason() == Some(Reason::REFUSED_STREAM) {
                (503, "the server refused the stream")
            } else {
                (502, "the server reset the stream")
            };
            log::warn(format_args!(
                "vserver {}: member {}: HTTP/2 response failed: {e}",
                x.vs.name,
                a.label()
            ));
            return Err(Failure::new(Origin::Member, status, why));
        }
        Err(()) => {
            stats::inc(&mc.response_timeouts);
            return Err(
                Failure::new(Origin::Member, 504, "the server did not answer in time").closing(),
            );
        }
    };
    let (parts, mut body) = resp.into_parts();
    let resp = match h2_message::response_from_h2(&parts, body.is_end_stream(), req.method) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&mc.bad_responses);
            passive::record(pool, m, true);
            return Err(Failure::new(Origin::Member, 502, e.reason));
        }
    };
    if let Some(send) = tunnel.filter(|_| (200..300).contains(&resp.status)) {
        let switched = member_h2_tunnel::switched(&resp, req);
        let mut t = H2Tunnel::new(send, body);
        return respond(
            x,
            hooks,
            client,
            req,
            a,
            switched,
            MemberBody::H2Tunnel(&mut t),
        )
        .await;
    }
    respond(x, hooks, client, req, a, resp, MemberBody::H2(&mut body)).await
}
