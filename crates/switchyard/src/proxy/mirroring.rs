//! A policy's `mirror`: a copy of the request goes to another pool too,
//! and its answer is read and dropped (the Gateway API's RequestMirror,
//! Envoy's request mirror policies, nginx's `mirror`). New code is tried on
//! real traffic without the client ever seeing it.
//!
//! The copy is the request as its member gets it (after the policies'
//! edits, the rewrite and the forwarding fields). It is fire-and-forget, as
//! Envoy's: a task of its own on the worker, so a slow or dead mirror pool
//! never delays the client's answer nor the next request on its
//! connection (nginx's mirror holds the connection until its subrequests
//! end). The copy leaves once the request body is whole: the body is
//! copied while it streams to the member, up to the mirror's `max_body`; a
//! longer body, or a body the member never took (no member answered),
//! drops the copy. Each mirror holds at most `max_in_flight` copies on
//! their way; past that a copy is dropped, so a mirror pool that stops
//! answering costs bounded memory. Dropped copies are counted
//! (`mirror_dropped`), sent ones too (`mirrored`); the mirror pool's own
//! counters and its members' count the copies' answers, never the
//! vserver's (`Exchange::shadow`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::exchange::{ClientSide, Exchange, Failure, Local};
use super::tunnel::MemberEnd;
use crate::config::snapshot::Mirror;
use crate::http::body::{BodyError, Sink};
use crate::http::message::{Fields, Request, Response};
use crate::stats;

/// The mirrors that copy this request: each samples its `percent`.
pub(super) fn chosen<'s>(x: &Exchange<'s>) -> Vec<&'s Mirror> {
    x.mirrors
        .iter()
        .filter(|m| {
            m.per_million >= 1_000_000
                || crate::random::next_u64() % 1_000_000 < m.per_million as u64
        })
        .collect()
}

/// The copies of `req` (its body `body`) for `mirrors`, each within its
/// mirror's `max_in_flight`, handed to `send` (the pipeline's, which runs
/// each in a task of its own).
pub(super) fn copies(
    x: &Exchange<'_>,
    req: &Request,
    body: Option<(Bytes, Option<Fields>)>,
    mirrors: &[&Mirror],
    send: impl Fn(Copy),
) {
    let vc = x.vs.counters.local();
    let Some((body, trailers)) = body else {
        stats::add(&vc.mirror_dropped, mirrors.len() as u64);
        return;
    };
    for m in mirrors {
        if body.len() > m.max_body {
            stats::inc(&vc.mirror_dropped);
            continue;
        }
        let Some(slot) = Slot::take(m) else {
            stats::inc(&vc.mirror_dropped);
            continue;
        };
        stats::inc(&vc.mirrored);
        send(Copy {
            slot,
            worker: x.worker.clone(),
            vserver: x.vs.name.clone(),
            peer: x.peer,
            listen: x.listen,
            tls: x.tls,
            pool: m.pool.clone(),
            req: req.clone(),
            body: body.clone(),
            trailers: trailers.clone(),
        });
    }
}

/// One mirror's place for a copy on its way, given back when it ends.
pub(super) struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Slot {
    fn take(m: &Mirror) -> Option<Slot> {
        if m.in_flight.fetch_add(1, Ordering::Relaxed) < m.max_in_flight {
            return Some(Slot(m.in_flight.clone()));
        }
        m.in_flight.fetch_sub(1, Ordering::Relaxed);
        None
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a copy needs once the client's exchange is gone.
pub(super) struct Copy {
    /// Held until the copy has its answer.
    pub(super) slot: Slot,
    pub(super) worker: std::rc::Rc<super::ctx::WorkerCtx>,
    pub(super) vserver: String,
    pub(super) peer: std::net::SocketAddr,
    pub(super) listen: std::net::SocketAddr,
    pub(super) tls: bool,
    pub(super) pool: Arc<crate::config::snapshot::Pool>,
    pub(super) req: Request,
    pub(super) body: Bytes,
    pub(super) trailers: Option<Fields>,
}

/// The client side while the request body streams to the member: the
/// body is copied on the way, up to `limit` bytes.
pub(super) struct Tee<'c, C> {
    pub(super) client: &'c mut C,
    limit: usize,
    copy: Vec<u8>,
    trailers: Option<Fields>,
    /// The body went through whole, within `limit`.
    whole: bool,
    over: bool,
}

impl<'c, C> Tee<'c, C> {
    pub(super) fn new(client: &'c mut C, limit: usize) -> Self {
        Tee {
            client,
            limit,
            copy: Vec::new(),
            trailers: None,
            whole: false,
            over: false,
        }
    }

    /// The body as copied, when the member took it whole and it fit.
    pub(super) fn body(self) -> Option<(Bytes, Option<Fields>)> {
        (self.whole && !self.over).then(|| (Bytes::from(self.copy), self.trailers))
    }
}

/// Copies what goes into `inner`.
struct TeeSink<'a, S> {
    inner: &'a mut S,
    copy: &'a mut Vec<u8>,
    trailers: &'a mut Option<Fields>,
    limit: usize,
    over: &'a mut bool,
    whole: &'a mut bool,
}

impl<S: Sink> Sink for TeeSink<'_, S> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if !*self.over {
            if self.copy.len() + bytes.len() > self.limit {
                // Too long to copy: what was copied goes at once.
                *self.over = true;
                *self.copy = Vec::new();
            } else {
                self.copy.extend_from_slice(bytes);
            }
        }
        self.inner.data(bytes).await
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        self.inner.flush().await
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        self.inner.end(trailers).await?;
        *self.trailers = trailers.cloned();
        *self.whole = true;
        Ok(())
    }
    fn written(&self) -> bool {
        self.inner.written()
    }
    fn abort(&mut self) {
        self.inner.abort()
    }
}

impl<C: ClientSide> ClientSide for Tee<'_, C> {
    type Out<'a>
        = C::Out<'a>
    where
        Self: 'a;

    async fn request_body<S: Sink>(
        &mut self,
        req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError> {
        // A retry sends the body again from the start.
        self.copy.clear();
        self.whole = false;
        let mut tee = TeeSink {
            inner: sink,
            copy: &mut self.copy,
            trailers: &mut self.trailers,
            limit: self.limit,
            over: &mut self.over,
            whole: &mut self.whole,
        };
        self.client.request_body(req, &mut tee).await
    }

    // No separate body stream: the body goes through `request_body`,
    // where it is copied.

    async fn send_continue(&mut self, req: &Request) -> bool {
        self.client.send_continue(req).await
    }

    super::buffered::forward_to_client!();
}
