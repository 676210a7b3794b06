//! One exchange, written once for every client protocol (HTTP/1.x session,
//! HTTP/2 stream) and every member protocol (pooled HTTP/1.1 connections,
//! multiplexed h2 connections):
//!
//! ```text
//! request head ─► hooks: on_request_head (route, local answers)
//!   ─► before_member_request (forwarding fields, edits)
//!   ─► pick a member (persistence, balancer) ─► connection (idle or new)
//!   ─► head + body (on_request_body) ─► response head (1xx relayed)
//!        └─ failure before a response byte: retry on another member
//!   ─► on_response_head ─► body (on_response_body) ─► client ─► on_log
//! ```
//!
//! The client side is a `ClientSide` (client_h1.rs, client_h2.rs); the
//! member side is chosen by the pool's protocol (`via_h1`, `via_h2`). Member
//! choice, persistence, retries, timeouts and passive health are decided
//! here and nowhere else. Failures are one type, `Failure`, that says where
//! they came from, whether another attempt may follow, and what the client
//! gets.
//!
//! Runs on the worker that owns the client connection.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::{Reason, RecvStream};

use super::hooks::{BodyEdit, Hooks, Local, Verdict};
use super::member::{pump_h2, H2Sink};
use super::stages::{self, Pipeline};
use super::upstream::{self, ConnectError, UpConn};
use super::{read_head, ReadHead, WorkerCtx, UPSTREAM_READ};
use crate::balance::persist::{request_hash, sticky_member};
use crate::balance::{MemberState, Tried};
use crate::clock::now_ms;
use crate::config::snapshot::{HeaderEdits, Member, Pool, Settings, UpstreamProtocol, VServer};
use crate::health::passive;
use crate::http::body::{self, BodyError, Out, Sink};
use crate::http::h2conv;
use crate::http::head;
use crate::http::message::{Fields, Framing, Request, Response};
use crate::http::write_h1;
use crate::log;
use crate::stats::{self, status_class};

/// Everything one request carries through its phases: who asked, where it
/// goes, and what came of it. Hooks read and write it.
pub struct Exchange<'s> {
    pub ctx: &'s WorkerCtx,
    pub vs: &'s VServer,
    pub st: &'s Settings,
    pub peer: SocketAddr,
    pub tls: bool,
    /// The verified client certificate's subject, on vservers that forward it.
    pub client_subject: Option<&'s str>,
    /// When the request head was complete.
    pub started: Instant,
    pub method: Bytes,
    pub target: Bytes,
    /// The pool routing chose.
    pub pool: Option<Arc<Pool>>,
    pub request_edits: Vec<&'s HeaderEdits>,
    pub response_edits: Vec<&'s HeaderEdits>,
    /// The member a persistence cookie pins the request to.
    pub sticky: Option<usize>,
    /// The member serving (or that last tried to).
    pub member: Option<usize>,
    /// The status the client got, and the response body's payload bytes.
    pub status: u16,
    pub body_bytes: u64,
    /// A request-body hook's answer, when one stopped the upload.
    refusal: Option<Local>,
}

impl<'s> Exchange<'s> {
    pub fn new(
        ctx: &'s WorkerCtx,
        vs: &'s VServer,
        st: &'s Settings,
        peer: SocketAddr,
        tls: bool,
        client_subject: Option<&'s str>,
        req: &Request,
    ) -> Exchange<'s> {
        Exchange {
            ctx,
            vs,
            st,
            peer,
            tls,
            client_subject,
            started: Instant::now(),
            method: req.method_raw.clone(),
            target: req.target.clone(),
            pool: None,
            request_edits: Vec::new(),
            response_edits: Vec::new(),
            sticky: None,
            member: None,
            status: 0,
            body_bytes: 0,
            refusal: None,
        }
    }
}

/// Which side a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Client,
    Member,
    Local,
}

/// Whether the request may go out again after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    No,
    /// To another member (this one failed).
    OtherMember,
    /// To any member, this one included (a stale pooled connection says
    /// nothing about the member).
    AnyMember,
}

/// Why an exchange failed, and what the client gets.
#[derive(Debug)]
pub struct Failure {
    pub origin: Origin,
    /// The status of the error answer; None when no answer is possible
    /// (the client went away, or the response head already left).
    pub status: Option<u16>,
    pub why: Cow<'static, str>,
    pub retry: Retry,
    /// The client connection cannot carry another request after this.
    pub close: bool,
}

impl Failure {
    pub fn new(origin: Origin, status: u16, why: impl Into<Cow<'static, str>>) -> Failure {
        Failure {
            origin,
            status: Some(status),
            why: why.into(),
            retry: Retry::No,
            close: false,
        }
    }

    fn retry(mut self, r: Retry) -> Failure {
        self.retry = r;
        self
    }

    fn closing(mut self) -> Failure {
        self.close = true;
        self
    }

    /// Nothing can be answered: cut the connection (or the stream).
    fn cut(origin: Origin, why: impl Into<Cow<'static, str>>) -> Failure {
        Failure {
            origin,
            status: None,
            why: why.into(),
            retry: Retry::No,
            close: true,
        }
    }

    /// The answer for the client.
    pub fn answer(&self) -> Option<Local> {
        self.status.map(|s| {
            let (response, body) = crate::http::responses::local_error(s, &self.why);
            Local { response, body }
        })
    }
}

/// What the client side of an exchange offers: an HTTP/1.x session
/// (`client_h1::H1Client`) or an HTTP/2 stream (`client_h2::H2Client`).
#[allow(async_fn_in_trait)] // single-threaded workers: no Send bound wanted
pub trait ClientSide {
    type Out<'a>: Sink
    where
        Self: 'a;

    /// Moves the whole request body, de-framed, into `sink`.
    async fn request_body<S: Sink>(
        &mut self,
        req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError>;

    /// An HTTP/2 client's request body as a stream of its own, so it can
    /// flow while the response comes back (bidirectional streaming).
    fn take_h2_body(&mut self) -> Option<RecvStream> {
        None
    }

    /// The member is ready for the body of a request that expects
    /// 100-continue. False when the client is gone.
    async fn send_continue(&mut self, req: &Request) -> bool;

    /// An interim (1xx) response from the member. False when the client is gone.
    async fn send_interim(&mut self, req: &Request, resp: &Response) -> bool;

    /// Sends (or stages) the response head; the body goes into the sink
    /// returned, with the head's size on the wire. None when the head
    /// cannot be carried to this client (the error is counted and logged).
    async fn start_response(
        &mut self,
        x: &Exchange<'_>,
        req: &Request,
        resp: &Response,
    ) -> Option<(Self::Out<'_>, u64)>;

    /// The member switched protocols (101): relay bytes both ways.
    async fn tunnel(
        &mut self,
        x: &Exchange<'_>,
        resp: &Response,
        up: &mut UpConn,
    ) -> Result<(), Failure>;

    /// Answers with a response the proxy makes itself.
    async fn answer(&mut self, x: &Exchange<'_>, req: &Request, local: Local);

    /// Ends a failed exchange: an error answer when one is possible.
    async fn fail(&mut self, x: &Exchange<'_>, req: &Request, f: Failure);

    /// Resolves when the client gave up on this request (an HTTP/2 reset);
    /// never on HTTP/1, where a gone client shows on the next write.
    async fn cancelled(&mut self);
}

/// Runs one request through the pipeline to its end.
pub async fn run<C: ClientSide>(x: &mut Exchange<'_>, client: &mut C, mut req: Request) {
    let mut hooks = stages::pipeline();
    stats::inc(&x.vs.counters.local().requests);
    if let Verdict::Respond(local) = hooks.on_request_head(x, &mut req) {
        x.status = local.response.status;
        client.answer(x, &req, local).await;
        hooks.on_log(x);
        return;
    }
    let Some(pool) = x.pool.clone() else {
        return;
    };
    hooks.before_member_request(x, &mut req);
    if let Err(f) = to_pool(x, &mut hooks, client, &req, &pool).await {
        x.status = f.status.unwrap_or(0);
        client.fail(x, &req, f).await;
    }
    x.vs.latency
        .local()
        .record(x.started.elapsed().as_micros() as u64);
    hooks.on_log(x);
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

/// Picks members until one answers or the retries are spent.
async fn to_pool<C: ClientSide>(
    x: &mut Exchange<'_>,
    hooks: &mut Pipeline,
    client: &mut C,
    req: &Request,
    pool: &Pool,
) -> Result<(), Failure> {
    let pc = pool.counters.local();
    stats::inc(&pc.requests);
    x.sticky = sticky_member(pool, req);
    let hash = request_hash(pool, req, x.peer.ip());
    let mut tried = Tried::default();
    let mut retries_left = x.st.retries;
    // Why the last attempt failed: the answer when no member is left.
    let mut last: Option<Failure> = None;
    loop {
        let Some(i) = pool.balancer.pick(&pool.members, x.sticky, hash, tried) else {
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
        let m = &pool.members[i];
        // Counted from the pick, not from the connect: requests picking
        // while this one connects must see it (max_connections, least
        // connections, p2c).
        let _inflight = Inflight::new(&m.state);
        let attempt = Attempt {
            pool,
            m,
            may_retry: retries_left > 0,
        };
        let r = match pool.protocol {
            UpstreamProtocol::Http1 => via_h1(x, hooks, client, req, &attempt).await,
            UpstreamProtocol::H2 => via_h2(x, hooks, client, req, &attempt).await,
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

/// One try at one member.
struct Attempt<'a> {
    pool: &'a Pool,
    m: &'a Member,
    /// Another attempt may follow a retryable failure (else it is final
    /// and logged as such).
    may_retry: bool,
}

impl Attempt<'_> {
    fn label(&self) -> String {
        self.m.label(&self.pool.name)
    }

    /// A failed connect: counted, fed to passive health and logged.
    fn connect_failed(&self, x: &Exchange<'_>, e: &ConnectError, what: &str) -> Failure {
        stats::inc(&self.m.counters.local().connect_failures);
        passive::record(self.pool, self.m, true);
        log::warn(format_args!(
            "vserver {}: member {}: {what}connect failed: {e}",
            x.vs.name,
            self.label()
        ));
        let status = if matches!(e, ConnectError::Timeout) {
            504
        } else {
            502
        };
        let why = format!(
            "could not connect to a server of pool \"{}\"",
            self.pool.name
        );
        // Nothing was sent: any method may go to another member.
        Failure::new(Origin::Member, status, why).retry(Retry::OtherMember)
    }

    /// A final member failure is logged with the member's name.
    fn final_failure(&self, x: &Exchange<'_>, f: Failure) -> Failure {
        if f.retry == Retry::No || !self.may_retry {
            log::warn(format_args!(
                "vserver {}: member {}: {}",
                x.vs.name,
                self.label(),
                f.why
            ));
        }
        f
    }
}

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

/// A request body error, as the client sees it.
fn body_failure(x: &mut Exchange<'_>, e: BodyError, member_write: &str) -> Failure {
    match e {
        BodyError::Write(_) => {
            Failure::new(Origin::Member, 502, member_write.to_string()).closing()
        }
        BodyError::Timeout => Failure::new(
            Origin::Client,
            408,
            "the request body was not received in time",
        )
        .closing(),
        BodyError::Framing(why) => {
            stats::inc(&x.vs.counters.local().bad_requests);
            Failure::new(Origin::Client, 400, why).closing()
        }
        BodyError::Refused => match x.refusal.take() {
            Some(l) => Failure::new(Origin::Local, l.response.status, "refused").closing(),
            None => Failure::new(Origin::Local, 403, "refused").closing(),
        },
        // The client went away (or reset its stream) mid-body.
        BodyError::Read(_) | BodyError::Truncated => {
            Failure::cut(Origin::Client, "the client went away")
        }
    }
}

/// The request's way to a pooled HTTP/1.1 connection.
async fn via_h1<C: ClientSide>(
    x: &mut Exchange<'_>,
    hooks: &mut Pipeline,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let mut up = match x.ctx.idle.take(m) {
        Some(u) => {
            stats::inc(&mc.connections_reused);
            u
        }
        None => upstream::connect(
            m,
            pool.tls.as_deref(),
            Duration::from_millis(x.st.upstream_connect_ms),
        )
        .await
        .map_err(|e| a.connect_failed(x, &e, ""))?,
    };
    stats::inc(&mc.requests);
    let has_body = req.head.framing != Framing::None;
    let replayable = !has_body && req.method.idempotent();
    let chunked = req.head.framing == Framing::Chunked;
    let mut stage = Vec::with_capacity(1024);
    let fallback = if req.host.is_none() {
        m.addr.to_string()
    } else {
        String::new()
    };
    write_h1::request(&mut stage, req, chunked, fallback.as_bytes());
    let head_len = stage.len() as u64;
    if req.expect_continue && has_body && !client.send_continue(req).await {
        return Err(Failure::cut(Origin::Client, "the client went away"));
    }
    let sent = {
        let mut sink = Inspect {
            hooks,
            x,
            inner: Out::new(&mut up.stream, &mut stage, chunked),
        };
        match client.request_body(req, &mut sink).await {
            Ok(n) => sink.inner.flush_out().await.map(|_| n),
            Err(e) => Err(e),
        }
    };
    match sent {
        Ok(n) => {
            stats::add(&mc.bytes_out, head_len + n);
            stats::add(&x.vs.counters.local().bytes_in, n);
        }
        Err(e) => {
            if matches!(e, BodyError::Write(_)) {
                stats::inc(&mc.resets);
                if up.reused && replayable {
                    // A stale pooled connection: the others are stale too.
                    x.ctx.idle.forget(m);
                    let f = Failure::new(Origin::Member, 502, SEND_FAILED);
                    return Err(a.final_failure(x, f.retry(Retry::AnyMember)));
                }
                let f = body_failure(x, e, SEND_FAILED);
                return Err(a.final_failure(x, f));
            }
            return Err(body_failure(x, e, SEND_FAILED));
        }
    }

    // Response head; interim 1xx responses are relayed.
    let deadline = now_ms() + x.st.upstream_response_ms;
    // Room for a head and a typical body in one read (HAProxy reads into
    // 16 KB buffers): an 8 KB response costs one recv and one send.
    if up.buf.capacity() < UPSTREAM_READ {
        up.buf.reserve(UPSTREAM_READ);
    }
    let resp = loop {
        let read = read_head(
            &mut up.stream,
            &mut up.buf,
            x.st.max_header_bytes,
            x.st.max_header_bytes,
            &x.ctx.idle_watch,
            deadline,
        );
        // A client that gave up stops the wait: the member connection is
        // closed rather than read to its end.
        let Some(read) = unless_cancelled(client, read).await else {
            return Err(Failure::cut(Origin::Client, "the client reset the stream"));
        };
        let failed = match read {
            Ok(raw) => match head::parse_response(raw, x.st.max_headers, req.method) {
                Ok(r) if (100..200).contains(&r.status) && r.status != 101 => {
                    if !client.send_interim(req, &r).await {
                        return Err(Failure::cut(Origin::Client, "the client went away"));
                    }
                    continue;
                }
                Ok(r) => break r,
                Err(e) => (Failure::new(Origin::Member, 502, e.reason), false),
            },
            Err(e) => head_read_failure(e),
        };
        let (mut f, none_back) = failed;
        let timeout = f.status == Some(504);
        let none_back = none_back && up.buf.is_empty();
        if timeout {
            stats::inc(&mc.response_timeouts);
        } else if none_back {
            stats::inc(&mc.resets);
        } else {
            stats::inc(&mc.bad_responses);
        }
        // A stale reused connection is not the member's fault.
        if !(none_back && up.reused) {
            passive::record(pool, m, true);
        }
        if none_back && replayable {
            f.retry = if up.reused {
                x.ctx.idle.forget(m);
                Retry::AnyMember
            } else {
                Retry::OtherMember
            };
        }
        return Err(a.final_failure(x, f));
    };
    let keep_alive = resp.head.keep_alive;
    respond(x, hooks, client, req, a, resp, MemberBody::H1(&mut up)).await?;
    if keep_alive && up.buf.is_empty() {
        x.ctx.idle.put(
            m,
            up,
            pool.idle_per_member,
            Duration::from_millis(pool.idle_timeout_ms),
        );
    }
    Ok(())
}

/// The request's way to a member of an h2 pool: a stream on the worker's
/// multiplexed connection to it.
async fn via_h2<C: ClientSide>(
    x: &mut Exchange<'_>,
    hooks: &mut Pipeline,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let (mut sender, reused) = x
        .ctx
        .h2_members
        .ready(
            m,
            pool.tls.as_deref(),
            Duration::from_millis(x.st.upstream_connect_ms),
            Duration::from_millis(pool.idle_timeout_ms),
        )
        .await
        .map_err(|e| a.connect_failed(x, &e, "HTTP/2 "))?;
    if reused {
        stats::inc(&mc.connections_reused);
    }
    let Some(head) = h2conv::request_to_h2(req, &m.addr.to_string()) else {
        stats::inc(&x.vs.counters.local().bad_requests);
        return Err(Failure::new(
            Origin::Client,
            400,
            "the request cannot be restated for an HTTP/2 member",
        )
        .closing());
    };
    let end = req.head.framing == Framing::None;
    let (resp_fut, send) = match sender.send_request(head, end) {
        Ok(x) => x,
        Err(e) => {
            // The connection went away between ready() and now.
            x.ctx.h2_members.forget(m);
            stats::inc(&mc.resets);
            let f = Failure::new(
                Origin::Member,
                502,
                format!("the server's HTTP/2 connection failed: {e}"),
            );
            return Err(a.final_failure(x, f.retry(Retry::AnyMember)));
        }
    };
    stats::inc(&mc.requests);
    let mut upload = H2Sink::new(send);
    if let Some(mut body) = (!end).then(|| client.take_h2_body()).flatten() {
        // HTTP/2 on both sides: request DATA and trailers flow while the
        // response comes back (gRPC bidirectional streaming).
        // TODO(waf): this path bypasses on_request_body (the hooks are
        // busy with the response); a body-inspecting stage must buffer.
        let up = async {
            let r = pump_h2(&mut body, &mut upload).await;
            match &r {
                Ok(n) => {
                    stats::add(&x.vs.counters.local().bytes_in, *n);
                    stats::add(&mc.bytes_out, *n);
                }
                Err(e) => {
                    log::debug(format_args!(
                        "vserver {}: member {}: HTTP/2 request body: {e:?}",
                        x.vs.name,
                        a.label()
                    ));
                    if matches!(e, BodyError::Read(_)) {
                        upload.reset(Reason::CANCEL);
                    }
                }
            }
        };
        let mut xc = clone_for_download(x);
        let down = h2_response(&mut xc, hooks, client, req, a, resp_fut, None);
        let ((), r) = tokio::join!(up, down);
        merge_back(x, xc);
        return r;
    }
    if !end {
        if req.expect_continue && !client.send_continue(req).await {
            return Err(Failure::cut(Origin::Client, "the client went away"));
        }
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
                stats::add(&x.vs.counters.local().bytes_in, n);
                stats::add(&mc.bytes_out, n);
            }
            Err(e) => {
                if matches!(e, BodyError::Write(_)) {
                    stats::inc(&mc.resets);
                }
                return Err(body_failure(x, e, "the server reset the stream"));
            }
        }
    }
    let deadline = now_ms() + x.st.upstream_response_ms;
    h2_response(x, hooks, client, req, a, resp_fut, Some(deadline)).await
}

/// The download half of an h2 exchange runs beside the upload, which reads
/// the same exchange only for its names and counters: it gets its own copy
/// of the per-request state, merged back when both are done.
fn clone_for_download<'s>(x: &Exchange<'s>) -> Exchange<'s> {
    Exchange {
        ctx: x.ctx,
        vs: x.vs,
        st: x.st,
        peer: x.peer,
        tls: x.tls,
        client_subject: x.client_subject,
        started: x.started,
        method: x.method.clone(),
        target: x.target.clone(),
        pool: x.pool.clone(),
        request_edits: x.request_edits.clone(),
        response_edits: x.response_edits.clone(),
        sticky: x.sticky,
        member: x.member,
        status: x.status,
        body_bytes: x.body_bytes,
        refusal: None,
    }
}

fn merge_back<'s>(x: &mut Exchange<'s>, from: Exchange<'s>) {
    x.status = from.status;
    x.body_bytes = from.body_bytes;
}

/// Waits for an h2 member's response head (until `deadline`, when the
/// request was sent whole), then relays the response.
async fn h2_response<C: ClientSide>(
    x: &mut Exchange<'_>,
    hooks: &mut Pipeline,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    resp_fut: h2::client::ResponseFuture,
    deadline: Option<u64>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let waited = match deadline {
        Some(d) => x.ctx.idle_watch.within(d, resp_fut).await,
        None => Ok(resp_fut.await),
    };
    let resp = match waited {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            if e.is_go_away() || e.is_io() {
                x.ctx.h2_members.forget(m);
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
    let resp = match h2conv::response_from_h2(&parts, body.is_end_stream(), req.method) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&mc.bad_responses);
            passive::record(pool, m, true);
            return Err(Failure::new(Origin::Member, 502, e.reason));
        }
    };
    respond(x, hooks, client, req, a, resp, MemberBody::H2(&mut body)).await
}

/// Where a member's response body comes from.
enum MemberBody<'a> {
    H1(&'a mut UpConn),
    H2(&'a mut RecvStream),
}

/// The response phase, for every pair of protocols: hooks, head, body.
async fn respond<C: ClientSide>(
    x: &mut Exchange<'_>,
    hooks: &mut Pipeline,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    mut resp: Response,
    body: MemberBody<'_>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let vc = x.vs.counters.local();
    passive::record_status(pool, m, resp.status);
    stats::inc(&mc.responses[status_class(resp.status)]);
    stats::inc(&vc.responses[status_class(resp.status)]);
    stats::add(&mc.bytes_in, resp.head.wire_len as u64);
    // De-framed as the member sent it, whatever a hook makes of it.
    let framing_in = resp.head.framing;
    hooks.on_response_head(x, &mut resp);
    x.status = resp.status;
    if resp.status == 101 {
        return match body {
            MemberBody::H1(up) if req.head.upgrade => client.tunnel(x, &resp, up).await,
            _ => Err(Failure::new(
                Origin::Member,
                502,
                "the server switched protocols unasked",
            )),
        };
    }
    let timeout = Duration::from_millis(x.st.upstream_response_ms);
    let Some((sink, head_len)) = client.start_response(x, req, &resp).await else {
        stats::inc(&mc.bad_responses);
        return Err(Failure::new(
            Origin::Member,
            502,
            "the server sent a field HTTP/2 cannot carry",
        ));
    };
    let mut sink = Transform {
        hooks,
        x,
        inner: sink,
        out: Vec::new(),
    };
    let r = match body {
        MemberBody::H1(up) => {
            body::deliver(&mut up.stream, &mut up.buf, framing_in, &mut sink, timeout)
                .await
                .0
        }
        MemberBody::H2(recv) => match pump_h2(recv, &mut sink).await {
            Ok(n) => sink.flush().await.map(|_| n),
            Err(e) => Err(e),
        },
    };
    let written = sink.inner.written();
    if r.is_err() && written {
        sink.inner.abort();
    }
    drop(sink);
    let vc = x.vs.counters.local();
    match r {
        Ok(n) => {
            stats::add(&vc.bytes_out, head_len + n);
            stats::add(&mc.bytes_in, n);
            x.body_bytes = n;
            Ok(())
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
                    x.vs.name,
                    a.label()
                ));
            }
            if !written && !matches!(e, BodyError::Write(_)) {
                // Nothing reached the client yet: it can still get a clean error.
                let status = if matches!(e, BodyError::Timeout) {
                    504
                } else {
                    502
                };
                return Err(Failure::new(
                    Origin::Member,
                    status,
                    "the server sent an invalid response",
                )
                .closing());
            }
            // The head is gone already: all we can do is cut.
            Err(Failure::cut(Origin::Member, "the response body failed"))
        }
    }
}

/// Races `fut` against the client giving up: None when it did.
async fn unless_cancelled<C: ClientSide, F: Future>(client: &mut C, fut: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        v = fut => Some(v),
        () = client.cancelled() => None,
    }
}

/// The request body on its way to the member, shown to the hooks.
struct Inspect<'h, 'x, 's, S> {
    hooks: &'h mut Pipeline,
    x: &'x mut Exchange<'s>,
    inner: S,
}

impl<S: Sink> Sink for Inspect<'_, '_, '_, S> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if let Verdict::Respond(l) = self.hooks.on_request_body(self.x, bytes) {
            self.x.refusal = Some(l);
            return Err(BodyError::Refused);
        }
        self.inner.data(bytes).await
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        self.inner.flush().await
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        self.inner.end(trailers).await
    }
    fn written(&self) -> bool {
        self.inner.written()
    }
}

/// The body-transform seam: the response body between de-framing (the
/// member's framing) and re-framing (the client's), through the hooks.
struct Transform<'h, 'x, 's, S> {
    hooks: &'h mut Pipeline,
    x: &'x mut Exchange<'s>,
    inner: S,
    out: Vec<u8>,
}

impl<S: Sink> Sink for Transform<'_, '_, '_, S> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        self.out.clear();
        match self
            .hooks
            .on_response_body(self.x, bytes, false, &mut self.out)
        {
            BodyEdit::Pass => self.inner.data(bytes).await,
            BodyEdit::Replaced => self.inner.data(&self.out).await,
        }
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        self.inner.flush().await
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        self.out.clear();
        if let BodyEdit::Replaced = self
            .hooks
            .on_response_body(self.x, &[], true, &mut self.out)
        {
            if !self.out.is_empty() {
                self.inner.data(&self.out).await?;
            }
        }
        self.inner.end(trailers).await
    }
    fn written(&self) -> bool {
        self.inner.written()
    }
}
