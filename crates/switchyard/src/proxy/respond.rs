//! The response phase, for every pair of protocols: the member's head
//! through the hooks, then its body from the member's framing to the
//! client's through the body-transform seam (`Transform`); and the request
//! body's inspection seam on the way to the member (`Inspect`).
//!
//! Runs on the worker that owns the client connection.

use std::future::Future;
use std::time::Duration;

use h2::RecvStream;

use super::exchange::{Attempt, ClientSide, Exchange, Failure, Origin};
use super::hooks::{BodyEdit, Hooks, Verdict};
use super::member::pump_h2;
use super::member_h2_tunnel::H2Tunnel;
use super::tunnel::{MemberEnd, MemberIo};
use super::upstream::UpConn;
use crate::health::passive;
use crate::http::body::{self, BodyError, Sink};
use crate::http::message::{Fields, Request, Response};
use crate::http::upgrade;
use crate::log;
use crate::stats::{self, status_class};

/// Where a member's response body comes from.
pub(super) enum MemberBody<'a> {
    H1(&'a mut UpConn),
    H2(&'a mut RecvStream),
    /// A WebSocket's extended CONNECT to an h2 member, answered 2xx
    /// (`member_h2_tunnel::switched` made the 101).
    H2Tunnel(&'a mut H2Tunnel),
}

/// The response phase, for every pair of protocols: hooks, head, body.
pub(super) async fn respond<C: ClientSide, H: Hooks>(
    x: &mut Exchange<'_>,
    hooks: &mut H,
    client: &mut C,
    req: &Request,
    a: &Attempt<'_>,
    mut resp: Response,
    body: MemberBody<'_>,
) -> Result<(), Failure> {
    let (pool, m) = (a.pool, a.m);
    let mc = m.counters.local();
    let vc = x.vs.counters.local();
    mc.time_to_first_byte
        .record(a.started.elapsed().as_micros() as u64);
    passive::record_status(pool, m, resp.status);
    stats::inc(&mc.responses[status_class(resp.status)]);
    if !x.shadow {
        stats::inc(&vc.responses[status_class(resp.status)]);
    }
    stats::add(&mc.bytes_in, resp.head.wire_len as u64);
    // De-framed as the member sent it, whatever a hook makes of it.
    let framing_in = resp.head.framing;
    hooks.on_response_head(x, &mut resp);
    x.status = resp.status;
    if resp.status == 101 {
        // Only to a protocol the client asked for (after `upgrade::offer`
        // took h2c out): anything else would open a tunnel no stage reads.
        let agreed = req.head.upgrade && upgrade::agreed(&req.head.fields, &resp.head.fields);
        return match body {
            MemberBody::H1(up) if agreed => client.tunnel(x, &resp, MemberEnd::h1(up)).await,
            MemberBody::H2Tunnel(t) if agreed => {
                let mut none = bytes::BytesMut::new();
                let end = MemberEnd {
                    io: MemberIo::H2(t),
                    buf: &mut none,
                };
                client.tunnel(x, &resp, end).await
            }
            _ => Err(switched_unasked(x, a, req, &resp)),
        };
    }
    let timeout = Duration::from_millis(x.upstream_response_ms());
    let Some((sink, head_len)) = client.start_response(x, req, &resp).await else {
        stats::inc(&mc.bad_responses);
        return Err(Failure::new(
            Origin::Member,
            502,
            "the server sent a field HTTP/2 cannot carry",
        ));
    };
    let mut sink = Transform {
        edits: hooks.reads_response_body(),
        hooks,
        x,
        inner: sink,
        out: Vec::new(),
    };
    let r = match body {
        MemberBody::H1(up) => {
            body::deliver(
                &mut up.stream,
                &mut up.buf,
                framing_in,
                &mut sink,
                &mut body::Pacer::gap(timeout),
            )
            .await
            .0
        }
        // (A tunnel's stream carries a body only past a 101, which
        // returned above.)
        MemberBody::H2(recv) | MemberBody::H2Tunnel(H2Tunnel { recv, .. }) => {
            match pump_h2(recv, &mut sink).await {
                Ok(n) => sink.flush().await.map(|_| n),
                Err(e) => Err(e),
            }
        }
    };
    let written = sink.inner.written();
    if r.is_err() && written {
        sink.inner.abort();
    }
    drop(sink);
    match r {
        Ok(n) => {
            if !x.shadow {
                stats::add(&x.vs.counters.local().bytes_out, head_len + n);
            }
            stats::add(&mc.bytes_in, n);
            x.body_bytes = n;
            Ok(())
        }
        Err(e) => Err(response_body_failed(x, a, e, written)),
    }
}

/// A 101 to a protocol the client did not ask for: counted, logged, and a
/// 502 that closes the client's connection (the client may have sent bytes
/// for the new protocol already). The member's connection is dropped with
/// the error, never pooled: it speaks something else now.
fn switched_unasked(x: &Exchange<'_>, a: &Attempt<'_>, req: &Request, resp: &Response) -> Failure {
    stats::inc(&x.vs.counters.local().upgrades_refused);
    stats::inc(&a.m.counters.local().bad_responses);
    let show = |v: Option<&[u8]>| String::from_utf8_lossy(v.unwrap_or(b"(none)")).into_owned();
    log::warn(format_args!(
        "vserver {}: member {}: 101 to {:?} refused, the client asked for {:?}",
        x.vs.name,
        a.label(),
        show(resp.head.get("upgrade")),
        show(req.head.upgrade.then(|| req.head.get("upgrade")).flatten()),
    ));
    Failure::new(
        Origin::Member,
        502,
        "the server switched to a protocol the client did not ask for",
    )
    .closing()
}

/// A response body that failed: counted and logged; the client gets a
/// clean error only if nothing reached it yet.
fn response_body_failed(x: &Exchange<'_>, a: &Attempt<'_>, e: BodyError, written: bool) -> Failure {
    let mc = a.m.counters.local();
    match &e {
        BodyError::Framing(_) | BodyError::Truncated => stats::inc(&mc.bad_responses),
        BodyError::Timeout => stats::inc(&mc.response_timeouts),
        BodyError::Write(w) if w.kind() == std::io::ErrorKind::TimedOut => {
            stats::inc(&x.vs.counters.local().send_timeouts);
            log::debug(format_args!(
                "vserver {}: client {}: response cut: {w}",
                x.vs.name, x.peer
            ));
        }
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
pub(super) struct Inspect<'h, 'x, 's, H, S> {
    pub(super) hooks: &'h mut H,
    pub(super) x: &'x mut Exchange<'s>,
    pub(super) inner: S,
}

impl<H: Hooks, S: Sink> Sink for Inspect<'_, '_, '_, H, S> {
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
        if let Verdict::Respond(l) = self.hooks.on_request_body_end(self.x) {
            self.x.refusal = Some(l);
            return Err(BodyError::Refused);
        }
        self.inner.end(trailers).await
    }
    fn written(&self) -> bool {
        self.inner.written()
    }
}

/// The body-transform seam: the response body between de-framing (the
/// member's framing) and re-framing (the client's), through the hooks
/// when one of them said it reads this body (`edits`).
struct Transform<'h, 'x, 's, H, S> {
    edits: bool,
    hooks: &'h mut H,
    x: &'x mut Exchange<'s>,
    inner: S,
    out: Vec<u8>,
}

impl<H: Hooks, S: Sink> Transform<'_, '_, '_, H, S> {
    /// What the hooks make of the next piece (a replacement lands in `out`);
    /// `Pass` without asking them when none reads this body.
    fn edit(&mut self, bytes: &[u8]) -> BodyEdit {
        if !self.edits {
            return BodyEdit::Pass;
        }
        self.out.clear();
        self.hooks
            .on_response_body(self.x, bytes, false, &mut self.out)
    }
}

impl<H: Hooks, S: Sink> Sink for Transform<'_, '_, '_, H, S> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        match self.edit(bytes) {
            BodyEdit::Pass => self.inner.data(bytes).await,
            BodyEdit::Replaced => self.inner.data(&self.out).await,
        }
    }
    fn keeps_owned(&self) -> bool {
        self.inner.keeps_owned()
    }
    /// The hooks see the bytes as `data` shows them; what they pass goes
    /// on owned.
    async fn data_owned(&mut self, bytes: bytes::Bytes) -> Result<(), BodyError> {
        match self.edit(&bytes) {
            BodyEdit::Pass => self.inner.data_owned(bytes).await,
            BodyEdit::Replaced => self.inner.data(&self.out).await,
        }
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        if !self.edits {
            return self.inner.flush().await;
        }
        self.out.clear();
        self.hooks.on_response_flush(self.x, &mut self.out);
        if !self.out.is_empty() {
            self.inner.data(&self.out).await?;
        }
        self.inner.flush().await
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        if !self.edits {
            return self.inner.end(trailers).await;
        }
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
