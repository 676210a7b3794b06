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
use h2::RecvStream;

use super::hooks::{BodyEdit, Hooks, Local, Verdict};
use super::member::pump_h2;
use super::stages::{self, Pipeline};
use super::upstream::{ConnectError, UpConn};
use super::{member_h1, member_h2, WorkerCtx};
use crate::balance::persist::{request_hash, sticky_member};
use crate::balance::{MemberState, Tried};
use crate::config::snapshot::{HeaderEdits, Member, Pool, Settings, UpstreamProtocol, VServer};
use crate::health::passive;
use crate::http::body::{self, BodyError, Sink};
use crate::http::message::{Fields, Request, Response};
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
    pub(super) refusal: Option<Local>,
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

    pub(super) fn retry(mut self, r: Retry) -> Failure {
        self.retry = r;
        self
    }

    pub(super) fn closing(mut self) -> Failure {
        self.close = true;
        self
    }

    /// Nothing can be answered: cut the connection (or the stream).
    pub(super) fn cut(origin: Origin, why: impl Into<Cow<'static, str>>) -> Failure {
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

/// One try at one member.
pub(super) struct Attempt<'a> {
    pub(super) pool: &'a Pool,
    pub(super) m: &'a Member,
    /// Another attempt may follow a retryable failure (else it is final
    /// and logged as such).
    may_retry: bool,
}

impl Attempt<'_> {
    pub(super) fn label(&self) -> String {
        self.m.label(&self.pool.name)
    }

    /// A failed connect: counted, fed to passive health and logged.
    pub(super) fn connect_failed(&self, x: &Exchange<'_>, e: &ConnectError, what: &str) -> Failure {
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
    pub(super) fn final_failure(&self, x: &Exchange<'_>, f: Failure) -> Failure {
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

/// A request body error, as the client sees it.
pub(super) fn body_failure(x: &mut Exchange<'_>, e: BodyError, member_write: &str) -> Failure {
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

/// Where a member's response body comes from.
pub(super) enum MemberBody<'a> {
    H1(&'a mut UpConn),
    H2(&'a mut RecvStream),
}

/// The response phase, for every pair of protocols: hooks, head, body.
pub(super) async fn respond<C: ClientSide>(
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
    match r {
        Ok(n) => {
            stats::add(&x.vs.counters.local().bytes_out, head_len + n);
            stats::add(&mc.bytes_in, n);
            x.body_bytes = n;
            Ok(())
        }
        Err(e) => Err(response_body_failed(x, a, e, written)),
    }
}

/// A response body that failed: counted and logged; the client gets a
/// clean error only if nothing reached it yet.
fn response_body_failed(x: &Exchange<'_>, a: &Attempt<'_>, e: BodyError, written: bool) -> Failure {
    let mc = a.m.counters.local();
    match &e {
        BodyError::Framing(_) | BodyError::Truncated => stats::inc(&mc.bad_responses),
        BodyError::Timeout => stats::inc(&mc.response_timeouts),
        _ => {}
    }
    let client_gone = matches!(e, BodyError::Write(_));
    if !client_gone {
        log::warn(format_args!(
            "vserver {}: member {}: response body failed: {e:?}",
            x.vs.name,
            a.label()
        ));
    }
    if !written && !client_gone {
        let status = if matches!(e, BodyError::Timeout) {
            504
        } else {
            502
        };
        return Failure::new(
            Origin::Member,
            status,
            "the server sent an invalid response",
        )
        .closing();
    }
    // The head is gone already: all we can do is cut.
    Failure::cut(Origin::Member, "the response body failed")
}

/// Races `fut` against the client giving up: None when it did.
pub(super) async fn unless_cancelled<C: ClientSide, F: Future>(
    client: &mut C,
    fut: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        v = fut => Some(v),
        () = client.cancelled() => None,
    }
}

/// The request body on its way to the member, shown to the hooks.
pub(super) struct Inspect<'h, 'x, 's, S> {
    pub(super) hooks: &'h mut Pipeline,
    pub(super) x: &'x mut Exchange<'s>,
    pub(super) inner: S,
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
