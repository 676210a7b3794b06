//! The request's way through the phases: the head hooks (routing, local
//! answers), then the pool: a member picked (persistence, balancer), the
//! exchange tried on it through its protocol (`member_h1`, `member_h2`),
//! and retried on another member while the failure allows it.
//!
//! Runs on the worker that owns the client connection.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::buffered::{Buffer, Replay};
use super::exchange::{body_failure, Attempt, ClientSide, Exchange, Failure, Origin, Retry};
use super::hooks::{Hooks, Local, Verdict};
use super::tunnel::MemberEnd;
use super::{member_h1, member_h2};
use super::{mirroring, stages};
use crate::balance::persist::{request_hash, sticky_member};
use crate::balance::{MemberState, Tried};
use crate::config::snapshot::{Pool, UpstreamProtocol};
use crate::http::body::{BodyError, Discard, Sink};
use crate::http::message::{Fields, Framing, Request, Response};
use crate::stats;
use bytes::Bytes;

/// Runs one request through the pipeline to its end.
pub async fn run<C: ClientSide>(x: &mut Exchange<'_>, client: &mut C, mut req: Request) {
    let mut hooks = stages::pipeline();
    stats::inc(&x.vs.counters.local().requests);
    // The front's heads and waits, then the rest's (stages.rs says why).
    let mut verdict = hooks.0.on_request_head(x, &mut req);
    if matches!(verdict, Verdict::Continue) && hooks.0.waits() {
        verdict = hooks.0.on_request_wait(x, &mut req).await;
    }
    if let Verdict::Continue = verdict {
        verdict = hooks.1.on_request_head(x, &mut req);
    }
    if matches!(verdict, Verdict::Continue) && hooks.1.waits() {
        verdict = hooks.1.on_request_wait(x, &mut req).await;
    }
    let mut background = false;
    match verdict {
        Verdict::Continue => {}
        Verdict::Respond(local) => {
            x.body_bytes = local.body.len() as u64;
            x.status = local.response.status;
            client.answer(x, &req, local).await;
            record_latency(x);
            hooks.on_log(x, &req);
            return;
        }
        Verdict::RespondThenForward(local) => {
            x.body_bytes = local.body.len() as u64;
            x.status = local.response.status;
            client.answer(x, &req, local).await;
            record_latency(x);
            background = true;
        }
    }
    let Some(pool) = x.pool.clone() else {
        record_latency(x);
        return;
    };
    let mut buffered = None;
    if let Some(limit) = hooks.request_body_buffer() {
        if !background && req.head.framing != Framing::None {
            match buffer_body(x, &mut hooks, client, &req, limit).await {
                Ok(b) => buffered = Some(b),
                Err(stop) => {
                    match stop {
                        Stop::Answer(local) => {
                            x.body_bytes = local.body.len() as u64;
                            x.status = local.response.status;
                            client.answer(x, &req, local).await;
                        }
                        Stop::Fail(f) => {
                            x.status = f.status.unwrap_or(0);
                            client.fail(x, &req, f).await;
                        }
                    }
                    record_latency(x);
                    hooks.on_log(x, &req);
                    return;
                }
            }
        }
    }
    hooks.before_member_request(x, &mut req);
    if background {
        // The client has its answer (counted); the member's goes to the
        // stages only, and counts on the member, not again on the vserver.
        x.shadow = true;
        let _ = to_pool(x, &mut hooks, &mut Nobody, &req, &pool).await;
        hooks.on_log(x, &req);
        return;
    }
    if let (Some(new), Some((body, _))) = (x.request_body.take(), buffered.as_mut()) {
        // A script's new body: its length restated (a chunked body stays
        // chunked, its chunks made anew).
        *body = new.to_vec();
        if let Framing::Length(_) = req.head.framing {
            req.head.framing = Framing::Length(body.len() as u64);
            req.head
                .fields
                .set(b"content-length", body.len().to_string().as_bytes());
        }
    }
    // The policy's mirrors get their copies: at once when the body is
    // known (none, or buffered), else once it has streamed to the member.
    let mirrors = mirroring::chosen(x);
    match buffered {
        Some((body, trailers)) => {
            let body = Bytes::from(body);
            if !mirrors.is_empty() {
                mirroring::copies(
                    x,
                    &req,
                    Some((body.clone(), trailers.clone())),
                    &mirrors,
                    send_copy,
                );
            }
            let mut replay = Replay {
                client,
                body,
                trailers,
            };
            to_pool_and_answer(x, &mut hooks, &mut replay, &req, &pool).await
        }
        None if mirrors.is_empty() => to_pool_and_answer(x, &mut hooks, client, &req, &pool).await,
        None if req.head.framing == Framing::None => {
            mirroring::copies(x, &req, Some((Bytes::new(), None)), &mirrors, send_copy);
            to_pool_and_answer(x, &mut hooks, client, &req, &pool).await
        }
        None => {
            let limit = mirrors.iter().map(|m| m.max_body).max().unwrap_or(0);
            let mut tee = mirroring::Tee::new(client, limit);
            to_pool_and_answer(x, &mut hooks, &mut tee, &req, &pool).await;
            mirroring::copies(x, &req, tee.body(), &mirrors, send_copy);
        }
    }
    record_latency(x);
    hooks.on_log(x, &req);
}

/// The member's answer, or the failure's.
async fn to_pool_and_answer<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    pool: &Pool,
) {
    if let Err(f) = to_pool(x, hooks, client, req, pool).await {
        // A hook's own answer (a failed `on_member`, a refused body) is
        // not a member failure: no stale copy replaces it.
        let member_failed = f.status.is_some() && f.local.is_none();
        match member_failed.then(|| hooks.on_member_failure(x)).flatten() {
            Some(local) => {
                x.status = local.response.status;
                client.answer(x, req, local).await;
            }
            None => {
                x.status = f.status.unwrap_or(0);
                client.fail(x, req, f).await;
            }
        }
    }
}

/// Why a buffered request stops before any member.
enum Stop {
    /// A stage refused the body with its own answer.
    Answer(Local),
    /// The body could not be read (too long, cut, late).
    Fail(Failure),
}

/// Reads the whole request body for the stages that judge it before a
/// member is picked, and shows it to them.
async fn buffer_body<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    limit: u64,
) -> Result<(Vec<u8>, Option<Fields>), Stop> {
    if req.expect_continue && !client.send_continue(req).await {
        return Err(Stop::Fail(Failure::cut(
            Origin::Client,
            "the client went away",
        )));
    }
    let mut buf = Buffer::new(limit);
    match client.request_body(req, &mut buf).await {
        // Counted when the member takes it (the replay).
        Ok(_) => {}
        Err(BodyError::Refused) if buf.over => {
            // Part of the body is read: the connection cannot go on.
            return Err(Stop::Fail(
                Failure::new(
                    Origin::Client,
                    413,
                    format!(
                        "the request body is longer than the {limit} bytes this vserver inspects"
                    ),
                )
                .closing(),
            ));
        }
        Err(e) => return Err(Stop::Fail(body_failure(x, e, "unused"))),
    }
    let mut verdict = hooks.on_request_body(x, &buf.body);
    if let Verdict::Continue = verdict {
        verdict = hooks.on_request_body_end(x);
    }
    match verdict {
        Verdict::Continue => Ok((buf.body, buf.trailers)),
        Verdict::Respond(l) | Verdict::RespondThenForward(l) => Err(Stop::Answer(l)),
    }
}

/// Sends a mirror's copy from a task of its own (mirroring.rs says why).
fn send_copy(copy: mirroring::Copy) {
    tokio::task::spawn_local(copy_to_pool(copy));
}

/// The copy goes through the pool as a request does (balancer, health,
/// timeouts, retries), with no stage of the vserver's: it was made of the
/// request those stages passed. The settings are the running
/// configuration's; a vserver a reload removed sends no more copies.
async fn copy_to_pool(c: mirroring::Copy) {
    let snap = c.worker.snapshot.load_full();
    let Some(vs) = snap.vservers.iter().find(|v| v.name == c.vserver) else {
        return;
    };
    let mut x = Exchange::new(
        &c.worker,
        vs,
        &snap.settings,
        (c.peer, c.listen),
        c.tls,
        None,
    );
    x.shadow = true;
    let mut replay = Replay {
        client: &mut Nobody,
        body: c.body,
        trailers: c.trailers,
    };
    if let Err(f) = to_pool(&mut x, &mut Untouched, &mut replay, &c.req, &c.pool).await {
        crate::log::debug(format_args!(
            "vserver {}: mirror to pool {}: {}",
            vs.name, c.pool.name, f.why
        ));
    }
    drop(c.slot);
}

/// No stage touches a mirror's copy.
struct Untouched;

impl Hooks for Untouched {}

/// The request's total time, once per request: to the end of the client's
/// answer (not the background fetch after a `RespondThenForward`).
fn record_latency(x: &Exchange<'_>) {
    x.vs.latency
        .local()
        .record(x.started.elapsed().as_micros() as u64);
}

/// The client side of a request answered already (`RespondThenForward`):
/// the member's response is read to the end and dropped.
struct Nobody;

impl ClientSide for Nobody {
    type Out<'a> = Discard;

    async fn request_body<S: Sink>(&mut self, _: &Request, sink: &mut S) -> Result<u64, BodyError> {
        sink.end(None).await.map(|_| 0)
    }

    async fn send_continue(&mut self, _: &Request) -> bool {
        true
    }

    async fn send_interim(&mut self, _: &Request, _: &Response) -> bool {
        true
    }

    async fn start_response(
        &mut self,
        _: &Exchange<'_>,
        _: &Request,
        _: &Response,
    ) -> Option<(Discard, u64)> {
        Some((Discard, 0))
    }

    async fn tunnel(
        &mut self,
        _: &Exchange<'_>,
        _: &Response,
        _: MemberEnd<'_>,
    ) -> Result<(), Failure> {
        Err(Failure::unasked_switch())
    }

    async fn answer(&mut self, _: &Exchange<'_>, _: &Request, _: Local) {}

    async fn fail(&mut self, _: &Exchange<'_>, _: &Request, _: Failure) {}

    async fn cancelled(&mut self) {
        std::future::pending::<()>().await
    }
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

/// Whether the vserver offers WebSocket over HTTP/2 (RFC 8441) and
/// HTTP/3 (RFC 9220): when it has a pool (default or a policy's) to take
/// it, so a client that sees the setting has somewhere to go. An HTTP/1.1
/// member gets an Upgrade, an h2 member an extended CONNECT again
/// (`member_h2`; 502 from one whose SETTINGS do not allow it).
pub fn tunnels_websocket(vs: &crate::config::snapshot::VServer) -> bool {
    use crate::config::snapshot::Action;
    vs.default_pool.is_some()
        || vs
            .policies
            .iter()
            .any(|p| matches!(p.action, Some(Action::Pool(_))))
}

/// Picks members until one answers or the retries are spent.
async fn to_pool<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    pool: &Pool,
) -> Result<(), Failure> {
    let pc = pool.counters.local();
    stats::inc(&pc.requests);
    let persistence = pool.persistence.as_ref();
    // One list for the whole request (retries and the response's
    // persistence cookie index it).
    let members = pool.members.load_full();
    x.members = Some(members.clone());
    let ids = members.iter().map(|m| m.cookie_id.as_str());
    x.sticky = sticky_member(persistence, ids, req);
    // The script's member wins over a persistence cookie (HAProxy's
    // use-server likewise); one that is down, full or not in this pool
    // leaves the choice to the balancer, and a retry never returns to it.
    let prefer = x
        .script_member
        .and_then(|a| members.iter().position(|m| m.addr == a))
        .or(x.sticky);
    let hash = request_hash(pool.hash_key.as_ref(), persistence, req, x.peer.ip());
    let mut tried = Tried::default();
    let mut retries_left = x.st.retries;
    // Why the last attempt failed: the answer when no member is left.
    let mut last: Option<Failure> = None;
    let mut attempt_no = 0u32;
    loop {
        let Some(i) = members.balancer.pick(&members.list, prefer, hash, tried) else {
            return Err(last.unwrap_or_else(|| {
                stats::inc(&pc.no_member_available);
                Failure::new(
                    Origin::Local,
                    503,
                    format!(
                        "no server is available to handle this request (pool \"{}\")",
                        pool.name
                    ),
                )
            }));
        };
        if last.is_some() {
            // Counted when the request really goes out again.
            stats::inc(&pc.retries);
        }
        tried.add(i);
        x.member = Some(i);
        attempt_no += 1;
        if let Some(local) = hooks.on_member_picked(x, pool, attempt_no) {
            let mut f = Failure::new(
                Origin::Local,
                local.response.status,
                "a member hook answered",
            );
            f.local = Some(Box::new(local));
            return Err(f);
        }
        let m = &members[i];
        // Counted from the pick, not from the connect: requests picking
        // while this one connects must see it (max_connections, least
        // connections, p2c).
        let _inflight = Inflight::new(&m.state);
        let attempt = Attempt {
            pool,
            m,
            may_retry: retries_left > 0,
            started: Instant::now(),
        };
        let r = match pool.protocol {
            UpstreamProtocol::Http1 => member_h1::exchange(x, hooks, client, req, &attempt).await,
            UpstreamProtocol::H2 => member_h2::exchange(x, hooks, client, req, &attempt).await,
        };
        match r {
            Ok(()) => return Ok(()),
            Err(f) if f.retry != Retry::No && retries_left > 0 => {
                retries_left -= 1;
                if f.retry == Retry::AnyMember {
                    tried.remove(i);
                }
                last = Some(f);
            }
            Err(f) => return Err(f),
        }
    }
}
