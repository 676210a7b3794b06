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
//! This file holds the exchange's types; `pipeline.rs` runs it,
//! `respond.rs` is the response phase. The client side is a `ClientSide` (client_h1_exchange.rs, client_h2_exchange.rs); the
//! member side is chosen by the pool's protocol (`via_h1`, `via_h2`). Member
//! choice, persistence, retries, timeouts and passive health are decided
//! here and nowhere else. Failures are one type, `Failure`, that says where
//! they came from, whether another attempt may follow, and what the client
//! gets.
//!
//! Runs on the worker that owns the client connection.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::client_body::ClientBody;
use super::idle::IdleWatch;
use super::member::H2Conns;
use super::tunnel::MemberEnd;
use super::upstream::{ConnectError, IdlePool};
use crate::config::snapshot::{
    HeaderEdits, Member, MemberList, Mirror, Policy, Pool, Settings, VServer,
};
use crate::health::passive;
use crate::http::body::{BodyError, Sink};
use crate::http::message::{Request, Response};
use crate::log;
use crate::stats;

/// A response the proxy answers itself.
#[derive(Debug)]
pub struct Local {
    pub response: Response,
    pub body: Bytes,
}

/// Everything one request carries through its phases: who asked, where it
/// goes, and what came of it. Hooks read and write it.
pub struct Exchange<'s> {
    /// The worker: what a copy of the request (a mirror) runs with once
    /// this exchange is gone.
    pub worker: &'s Rc<super::ctx::WorkerCtx>,
    /// The worker's idle HTTP/1.1 member connections.
    pub idle: &'s Rc<IdlePool>,
    /// The worker's HTTP/2 member connections.
    pub h2_members: &'s H2Conns,
    /// The worker's coarse deadlines (and whether it drains).
    pub timers: &'s IdleWatch,
    pub vs: &'s VServer,
    pub st: &'s Settings,
    pub peer: SocketAddr,
    /// The address the client connected to.
    pub listen: SocketAddr,
    pub tls: bool,
    /// The verified client certificate's subject, on vservers that forward it.
    pub client_subject: Option<&'s str>,
    /// The verified client certificate (for scripts: `r.client_cert`).
    pub client_cert: Option<Arc<crate::tls::ClientCert>>,
    /// When the request head was complete.
    pub started: Instant,
    /// The pool routing chose.
    pub pool: Option<Arc<Pool>>,
    /// The pool the connection's script events chose (`conn_scripting`):
    /// routing's choice when neither `on_request` nor a policy made one.
    pub conn_pool: Option<Arc<Pool>>,
    pub request_edits: Vec<&'s HeaderEdits>,
    pub response_edits: Vec<&'s HeaderEdits>,
    /// Response compression, when routing turned it on for this request.
    pub compression: Option<&'s crate::compress::Settings>,
    /// The cache, when routing turned it on for this request.
    pub cache: Option<&'s crate::config::snapshot::VsCache>,
    /// The member a persistence cookie pins the request to.
    pub sticky: Option<usize>,
    /// The member the script asked for (`r:use_member`), by address: the
    /// balancer's first choice in the pool that serves the request, when
    /// it is one of its members and can take the request.
    pub script_member: Option<SocketAddr>,
    /// The policy that decided where the request goes (routing): its
    /// limits, body size and member timeouts apply.
    pub policy: Option<&'s Policy>,
    /// Where copies of the request go too: the deciding policy's `mirror`,
    /// when the request goes to its pool.
    pub mirrors: &'s [Mirror],
    /// No client waits for this member exchange (a mirror's copy, or the
    /// background revalidation after a stale answer): the vserver's
    /// counters are the client's request's, not this exchange's (the pool
    /// and its member count it).
    pub shadow: bool,
    /// The member serving (or that last tried to): an index into
    /// `members`.
    pub member: Option<usize>,
    /// The pool's member list the request picked from (`sticky` and
    /// `member` index it): a run-time member change swaps the pool's list
    /// in place, and this request keeps the one it started with.
    pub members: Option<Arc<MemberList>>,
    /// The status the client got, and the response body's payload bytes.
    pub status: u16,
    pub body_bytes: u64,
    /// A request-body hook's answer, when one stopped the upload.
    pub(super) refusal: Option<Local>,
    /// A buffered request body's replacement (the script's
    /// `on_request_body`): the member gets this one.
    pub(super) request_body: Option<Bytes>,
    /// The request body as it went to an HTTP/1.1 member, kept to go again
    /// (`resend`).
    pub(super) resend: super::resend::Resend,
    /// What the access log reports beyond the above.
    pub facts: Facts,
}

/// What the access log reports of an exchange: instants turned into
/// microseconds and small counters, recorded whether or not a log is on
/// (no allocation; a few clock reads per request).
#[derive(Default)]
pub struct Facts {
    /// The client speaks HTTP/2.
    pub http2: bool,
    /// The client speaks HTTP/3 (QUIC).
    pub http3: bool,
    /// The client connection's TLS parameters.
    pub tls: Option<crate::accesslog::TlsInfo>,
    /// Reading the request head (HTTP/1; µs).
    pub head_us: Option<u32>,
    /// Getting a member connection, for the last attempt (0: reused).
    pub connect_us: Option<u32>,
    /// The last attempt's request sent, to its response head (µs).
    pub ttfb_us: Option<u32>,
    /// When the last attempt's request went out.
    pub(super) sent_at: Option<Instant>,
    /// Attempts on members (retries are the attempts after the first).
    pub attempts: u32,
    /// Request body bytes sent on to the member.
    pub body_in: u64,
    /// The cache's verdict ("hit", "miss", "stale", "revalidated", "bypass").
    pub cache: Option<&'static str>,
    /// The W3C trace the request belongs to.
    pub trace: Option<crate::accesslog::trace::Trace>,
    /// The vserver's script's access-log fields and error (boxed: most
    /// exchanges have none).
    pub script: Option<Box<crate::accesslog::ScriptLog>>,
}

/// Microseconds since `t`, saturated to u32 (71 minutes).
pub fn micros_since(t: Instant) -> u32 {
    t.elapsed().as_micros().min(u32::MAX as u128) as u32
}

impl Facts {
    /// The request goes out to a member now.
    pub(super) fn request_sent(&mut self) {
        self.sent_at = Some(Instant::now());
    }

    /// The member's response head came in.
    pub(super) fn response_head(&mut self) {
        self.ttfb_us = self.sent_at.map(micros_since);
    }

    /// The cache's verdict, unless one is set already (a stale answer
    /// served while its revalidation runs keeps "stale").
    pub fn cache_verdict(&mut self, v: &'static str) {
        self.cache.get_or_insert(v);
    }
}

impl<'s> Exchange<'s> {
    pub fn new(
        ctx: &'s Rc<super::ctx::WorkerCtx>,
        vs: &'s VServer,
        st: &'s Settings,
        (peer, listen): (SocketAddr, SocketAddr),
        tls: bool,
        client_subject: Option<&'s str>,
    ) -> Exchange<'s> {
        Exchange {
            worker: ctx,
            idle: &ctx.idle,
            h2_members: &ctx.h2_members,
            timers: &ctx.idle_watch,
            vs,
            st,
            peer,
            listen,
            tls,
            client_subject,
            client_cert: None,
            started: Instant::now(),
            pool: None,
            conn_pool: None,
            request_edits: Vec::new(),
            response_edits: Vec::new(),
            compression: None,
            cache: None,
            sticky: None,
            script_member: None,
            policy: None,
            mirrors: &[],
            shadow: false,
            member: None,
            members: None,
            status: 0,
            body_bytes: 0,
            refusal: None,
            request_body: None,
            resend: Default::default(),
            facts: Facts::default(),
        }
    }

    /// How long a member may take to accept a connection: the deciding
    /// policy's `timeouts`, else `[timeouts]`.
    pub fn upstream_connect_ms(&self) -> u64 {
        self.policy
            .and_then(|p| p.timeouts.connect_ms)
            .unwrap_or(self.st.upstream_connect_ms)
    }

    /// How long a member may take to answer, and to go on sending.
    pub fn upstream_response_ms(&self) -> u64 {
        self.policy
            .and_then(|p| p.timeouts.response_ms)
            .unwrap_or(self.st.upstream_response_ms)
    }

    /// The deciding policy's `scope = "policy"` limits (indices into the
    /// vserver's `limits`).
    pub fn policy_limits(&self) -> &'s [usize] {
        self.policy.map_or(&[], |p| &p.limits)
    }

    /// The deciding policy's `max_body`.
    pub fn max_body(&self) -> Option<u64> {
        self.policy.and_then(|p| p.max_body)
    }

    /// The member serving (or that last tried to).
    pub fn picked(&self) -> Option<&Arc<Member>> {
        self.members.as_ref()?.get(self.member?)
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
    /// A hook's own answer (a request-body hook stopped the upload).
    pub local: Option<Box<Local>>,
}

impl Failure {
    /// A member's 101 to a request that asked for no tunnel (or to a
    /// client side that cannot carry one).
    pub fn unasked_switch() -> Failure {
        Failure::new(Origin::Member, 502, "the server switched protocols unasked")
    }

    pub fn new(origin: Origin, status: u16, why: impl Into<Cow<'static, str>>) -> Failure {
        Failure {
            origin,
            status: Some(status),
            why: why.into(),
            retry: Retry::No,
            close: false,
            local: None,
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
            local: None,
        }
    }

    /// The answer for the client: a hook's own, or the error.
    pub fn into_answer(self) -> Option<Local> {
        if let Some(l) = self.local {
            return Some(*l);
        }
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

    /// An HTTP/2 or HTTP/3 client's request body as a stream of its own,
    /// so it can flow while the response comes back (bidirectional
    /// streaming).
    fn take_body_stream(&mut self) -> Option<ClientBody> {
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
        up: MemberEnd<'_>,
    ) -> Result<(), Failure>;

    /// Answers with a response the proxy makes itself.
    async fn answer(&mut self, x: &Exchange<'_>, req: &Request, local: Local);

    /// Ends a failed exchange: an error answer when one is possible.
    async fn fail(&mut self, x: &Exchange<'_>, req: &Request, f: Failure);

    /// Resolves when the client gave up on this request (an HTTP/2 reset);
    /// never on HTTP/1, where a gone client shows on the next write.
    async fn cancelled(&mut self);
}

/// One try at one member.
pub(super) struct Attempt<'a> {
    pub(super) pool: &'a Pool,
    pub(super) m: &'a Arc<Member>,
    /// Another attempt may follow a retryable failure (else it is final
    /// and logged as such).
    pub(super) may_retry: bool,
    /// When the member was picked: its time to first byte counts from here.
    pub(super) started: Instant,
}

impl Attempt<'_> {
    pub(super) fn label(&self) -> String {
        self.m.label(&self.pool.name)
    }

    /// A failed connect: counted, fed to passive health and logged.
    pub(super) fn connect_failed(&self, x: &Exchange<'_>, e: &ConnectError, what: &str) -> Failure {
        stats::inc(&self.m.counters.local().connect_failures);
        self.m.state.connect_failed();
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
pub(super) fn body_failure(
    x: &mut Exchange<'_>,
    e: BodyError,
    member_write: &'static str,
) -> Failure {
    match e {
        BodyError::Write(_) => Failure::new(Origin::Member, 502, member_write).closing(),
        BodyError::Timeout => {
            stats::inc(&x.vs.counters.local().body_timeouts);
            Failure::new(
                Origin::Client,
                408,
                "the request body was not received in time (client_body)",
            )
            .closing()
        }
        BodyError::TooSlow => {
            stats::inc(&x.vs.counters.local().body_timeouts);
            Failure::new(
                Origin::Client,
                408,
                "the request body came too slowly (request_body.min_rate or deadline)",
            )
            .closing()
        }
        BodyError::Framing(why) => {
            stats::inc(&x.vs.counters.local().bad_requests);
            Failure::new(Origin::Client, 400, why).closing()
        }
        // The hook's answer goes to the client as it made it.
        BodyError::Refused => {
            let mut f = Failure::new(Origin::Local, 403, "refused by a request-body hook");
            if let Some(l) = x.refusal.take() {
                f.status = Some(l.response.status);
                f.local = Some(Box::new(l));
            }
            f.closing()
        }
        // The client went away (or reset its stream) mid-body.
        BodyError::Read(_) | BodyError::Truncated => {
            Failure::cut(Origin::Client, "the client went away")
        }
    }
}
