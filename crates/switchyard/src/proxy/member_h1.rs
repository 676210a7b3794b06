//! An exchange's way to an HTTP/1.1 member: a pooled connection (or a new
//! one), the request head and body in as few writes as possible, the
//! response head read once (1xx relayed), and the connection given back to
//! the idle pool when the exchange ended cleanly.
//!
//! Runs on the worker that owns the client connection.

use std::time::{Duration, Instant};

use super::conn::private_key_of;
use super::exchange::{
    body_failure, micros_since, Attempt, ClientSide, Exchange, Failure, Origin, Retry,
};
use super::head_read::{read_head, ReadHead};
use super::hooks::Hooks;
use super::resend::{Keep, Resend};
use super::respond::{respond, unless_cancelled, Inspect, MemberBody};
use super::upstream::{self, UpConn};
use crate::clock::now_ms;
use crate::config::snapshot::Pool;
use crate::health::passive;
use crate::http::body::{BodyError, Out, Sink};
use crate::http::head;
use crate::http::message::{Framing, Request, Response};
use crate::http::write_h1;
use crate::proxy_protocol;
use crate::stats;

/// Read buffer for responses from members.
const UPSTREAM_READ: usize = 32 * 1024;

const NO_ANSWER: &str = "the server closed the connection without answering";
const SEND_FAILED: &str = "the server closed the connection while receiving the request";

/// What a failed read of a member's response head means: the failure, and
/// whether not a byte came back.
fn head_read_failure(e: ReadHead) -> (Failure, bool) {
    let (status, why, none) = match e {
        ReadHead::Bad(e) => (502, e.reason, false),
        ReadHead::Timeout { .. } => (504, "the server did not answer in time", false),
        ReadHead::Closed { partial: true } => {
            (502, "the server closed the connection mid-response", false)
        }
        ReadHead::Closed { partial: false } => (502, NO_ANSWER, true),
    };
    (Failure::new(Origin::Member, status, why), none)
}

/// The request's way to a pooled HTTP/1.1 connection.
pub(super) async fn exchange<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    x.facts.attempts += 1;
    let connecting = Instant::now();
    let private = private_key(x, pool);
    let mut up = match x.idle.take(m, private) {
        Some(u) => {
            stats::inc(&mc.connections_reused);
            x.facts.connect_us = Some(0);
            u
        }
        None => {
            let u = connect_or_take_released(x, a).await?;
            x.facts.connect_us = Some(micros_since(connecting));
            u
        }
    };
    stats::inc(&mc.requests);
    x.facts.request_sent();
    send_request(x, hooks, client, req, a, &mut up).await?;
    let resp = response_head(x, client, req, a, &mut up).await?;
    x.facts.response_head();
    // A connection that switched protocols (a tunnel, now over) never
    // carries another request.
    let keep_alive = resp.head.keep_alive && resp.status != 101;
    respond(x, hooks, client, req, a, resp, MemberBody::H1(&mut up)).await?;
    if keep_alive && up.buf.is_empty() {
        x.idle.put(
            (m, private),
            up,
            pool.idle_per_member,
            Duration::from_millis(pool.idle_timeout_ms),
        );
    }
    Ok(())
}

/// The pool of idle connections a request may take from: the shared one
/// (0), or, when its pool sends PROXY headers, its client connection's own
/// (`conn::private_key`): a connection that opened with one client's header
/// carries only that client's requests.
fn private_key(x: &Exchange<'_>, pool: &Pool) -> u64 {
    match pool.proxy_protocol {
        None => 0,
        Some(_) => private_key_of(x.peer, x.listen),
    }
}

/// A new connection to the member, unless a connection another request
/// releases first is handed over (HAProxy reaches its multiplexing ratio by
/// not opening a connection per request of a burst). Never slower than the
/// connect alone. A connect that lost the race completes in the background
/// and is released like any other: to a request still waiting for a
/// connection, else into the pool, whose purge (`upstream::PURGE_PERIOD`)
/// takes back what a burst opened. Closing it instead, when nobody waited,
/// made the member accept and close a connection for every lost race: 40
/// to 110 a second at 1,000 requests a second (`bench compare --scenario
/// multiplexing`), each a handshake for a TLS member.
async fn connect_or_take_released(x: &Exchange<'_>, a: &Attempt<'_>) -> Result<UpConn, Failure> {
    let (pool, m) = (a.pool, a.m);
    let private = private_key(x, pool);
    let released = x.idle.wait_release(m, private);
    let connect = {
        let (m, tls, source) = (m.clone(), pool.tls.clone(), pool.local_source());
        let timeout = Duration::from_millis(x.upstream_connect_ms());
        let header = proxy_protocol::stream_header(pool.proxy_protocol, x.peer, x.listen);
        async move { upstream::connect(&m, (tls.as_deref(), source), timeout, &header).await }
    };
    let mut connect = Box::pin(connect);
    tokio::select! {
        biased;
        Ok(mut u) = released => {
            u.reused = true;
            stats::inc(&m.counters.local().connections_reused);
            let (idle, m, max_idle) = (x.idle.clone(), m.clone(), pool.idle_per_member);
            let idle_timeout = Duration::from_millis(pool.idle_timeout_ms);
            tokio::task::spawn_local(async move {
                if let Ok(spare) = connect.await {
                    idle.put((&m, private), spare, max_idle, idle_timeout);
                }
            });
            Ok(u)
        }
        r = &mut connect => r.map_err(|e| a.connect_failed(x, &e, "")),
    }
}

/// The head, then the body as it arrives, the head and the first body
/// bytes in one write.
async fn send_request<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    up: &mut UpConn,
) -> Result<(), Failure> {
    let m = a.m;
    let mc = m.counters.local();
    let has_body = req.head.framing != Framing::None;
    let chunked = req.head.framing == Framing::Chunked;
    let mut stage = Vec::with_capacity(1024);
    // HTTP/1.0 clients need not send Host; HTTP/1.1 members require one.
    let fallback = if req.host.is_none() {
        m.addr.to_string()
    } else {
        String::new()
    };
    write_h1::request(&mut stage, req, chunked, fallback.as_bytes());
    let head_len = stage.len() as u64;
    let sent = match x.resend.whole() {
        // The body went out once, whole, and is kept: it goes again from
        // memory, past the stages (they saw it).
        Some((body, trailers)) => {
            let mut out = Out::new(&mut up.stream, &mut stage, chunked);
            let sent = async {
                out.data(&body).await?;
                out.end(trailers.as_ref()).await?;
                out.flush_out().await
            };
            sent.await.map(|_| body.len() as u64)
        }
        None => {
            if req.expect_continue && has_body && !client.send_continue(req).await {
                return Err(Failure::cut(Origin::Client, "the client went away"));
            }
            let mut resend = Resend::for_request(req, a.may_retry);
            let sent = {
                let mut sink = Inspect {
                    hooks,
                    x,
                    inner: Keep {
                        inner: Out::new(&mut up.stream, &mut stage, chunked),
                        resend: &mut resend,
                    },
                };
                match client.request_body(req, &mut sink).await {
                    Ok(n) => sink.inner.inner.flush_out().await.map(|_| n),
                    Err(e) => Err(e),
                }
            };
            x.resend = resend;
            sent
        }
    };
    if let Ok(n) = sent {
        // The vserver counts the client's bytes once, whatever the
        // attempts: at the first that sent them whole.
        if x.facts.body_in == 0 {
            if !x.shadow {
                stats::add(&x.vs.counters.local().bytes_in, n);
            }
            x.facts.body_in = n;
        }
    }
    let e = match sent {
        Ok(n) => {
            stats::add(&mc.bytes_out, head_len + n);
            return Ok(());
        }
        Err(e) => e,
    };
    if !matches!(e, BodyError::Write(_)) {
        return Err(body_failure(x, e, SEND_FAILED));
    }
    stats::inc(&mc.resets);
    if up.reused && req.method.idempotent() && (!has_body || x.resend.is_whole()) {
        // A stale pooled connection: the others are stale too.
        x.idle.forget(m);
        let f = Failure::new(Origin::Member, 502, SEND_FAILED);
        return Err(a.final_failure(x, f.retry(Retry::AnyMember)));
    }
    let f = body_failure(x, e, SEND_FAILED);
    Err(a.final_failure(x, f))
}

/// The final response head; interim 1xx responses are relayed. A failure
/// before any response byte may be retried (idempotent, body-less).
async fn response_head<C: ClientSide>(
    x: &mut Exchange<'_>,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    up: &mut UpConn,
) -> Result<Response, Failure> {
    let deadline = now_ms() + x.upstream_response_ms();
    // Room for a head and a typical body in one read (HAProxy reads into
    // 16 KB buffers): an 8 KB response costs one recv and one send.
    if up.buf.capacity() < UPSTREAM_READ {
        up.buf.reserve(UPSTREAM_READ);
    }
    let (f, none_back) = loop {
        let read = read_head(
            &mut up.stream,
            &mut up.buf,
            x.st.max_header_bytes,
            x.st.max_header_bytes,
            x.timers,
            deadline,
        );
        // A client that gave up stops the wait: the member connection is
        // closed rather than read to its end.
        let Some(read) = unless_cancelled(client, read).await else {
            return Err(Failure::cut(Origin::Client, "the client reset the stream"));
        };
        match read {
            Ok(raw) => match head::parse_response(raw, x.st.max_headers, req.method) {
                Ok(r) if (100..200).contains(&r.status) && r.status != 101 => {
                    if !client.send_interim(req, &r).await {
                        return Err(Failure::cut(Origin::Client, "the client went away"));
                    }
                }
                Ok(r) => return Ok(r),
                Err(e) => break (Failure::new(Origin::Member, 502, e.reason), false),
            },
            Err(e) => break head_read_failure(e),
        }
    };
    Err(response_failed(x, req, a, up, f, none_back))
}

/// Counts a member's failed response, feeds passive health, and says
/// whether the request may go again.
fn response_failed(
    x: &mut Exchange<'_>,
    req: &Request,
    a: &Attempt<'_>,
    up: &UpConn,
    mut f: Failure,
    none_back: bool,
) -> Failure {
    let mc = a.m.counters.local();
    let none_back = none_back && up.buf.is_empty();
    if f.status == Some(504) {
        stats::inc(&mc.response_timeouts);
    } else if none_back {
        stats::inc(&mc.resets);
    } else {
        stats::inc(&mc.bad_responses);
    }
    // A stale reused connection is not the member's fault.
    if !(none_back && up.reused) {
        passive::record(a.pool, a.m, true);
    }
    let replayable =
        req.method.idempotent() && (req.head.framing == Framing::None || x.resend.is_whole());
    if none_back && replayable {
        f = f.retry(if up.reused {
            x.idle.forget(a.m);
            Retry::AnyMember
        } else {
            Retry::OtherMember
        });
    }
    a.final_failure(x, f)
}
