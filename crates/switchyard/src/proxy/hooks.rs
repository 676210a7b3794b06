//! The phases of one exchange, as hooks a stage implements.
//!
//! Every feature that acts on requests (routing, header edits, and later
//! the WAF, the cache, compression) is a stage: a type implementing
//! `Hooks`, overriding only the phases it needs. Stages are composed as a
//! tuple, `(A, (B, C))`, and dispatched statically: a phase nobody
//! overrides compiles to nothing. The exchange (`exchange.rs`) calls the
//! phases in this order, for every client protocol (HTTP/1.x, HTTP/2) and
//! every member protocol (HTTP/1.1, h2):
//!
//! ```text
//! on_request_head ─► before_member_request ─► on_member_picked ─►
//!     [on_request_body]* ─► on_request_body_end ─► (member) ─►
//!     on_response_head ─► [on_response_body]* ─► on_log
//! ```
//!
//! (`on_member_picked` again for each retry, with the member it picks.)
//!
//! A stage that asks for it (`request_body_buffer`) gets the whole body
//! before a member is picked, between `on_request_head` and
//! `before_member_request`:
//!
//! ```text
//! on_request_head ─► on_request_body ─► on_request_body_end ─►
//!     before_member_request ─► (member: the body replayed) ─► ...
//! ```
//!
//! A connection is admitted or refused once, before any byte is read, by
//! the front door (`accept.rs`) asking the shield: not a phase of
//! requests.
//!
//! Runs on the worker that owns the connection: hooks may keep per-request
//! state in `&mut self` without locks.

use super::exchange::Exchange;
pub use super::exchange::Local;
use crate::config::snapshot::Pool;
use crate::http::message::{Request, Response};

/// What a hook decided.
pub enum Verdict {
    /// Go on with the next stage.
    Continue,
    /// Stop here and answer the client with this response (the member is
    /// never contacted, or no longer).
    Respond(Local),
    /// Answer the client with this response, then send the request to the
    /// member anyway and let the stages see its response, which no client
    /// gets (a stale cached copy served while it is revalidated:
    /// stale-while-revalidate). Request-head phases only.
    RespondThenForward(Local),
}

/// What a body hook did with a piece of the body.
pub enum BodyEdit {
    /// The piece goes on unchanged.
    Pass,
    /// The piece is replaced by what the hook wrote to `out` (possibly
    /// nothing: it holds the bytes back, e.g. a compressor's window).
    Replaced,
}

#[allow(async_fn_in_trait)] // single-threaded workers: no Send bound wanted
pub trait Hooks {
    /// The request head is complete and valid. May edit `req`, choose the
    /// pool (`x.pool`), or answer locally (redirects, fixed responses, a
    /// WAF block, a cache hit). Stages run in order; the first `Respond`
    /// wins and the later ones are skipped.
    fn on_request_head(&mut self, _x: &mut Exchange<'_>, _req: &mut Request) -> Verdict {
        Verdict::Continue
    }

    /// After `on_request_head`, for stages that must wait before the member
    /// is asked (request coalescing: a miss waits for the same key's fill
    /// in progress). Same rules as `on_request_head`. Called only when
    /// `waits` says so.
    async fn on_request_wait(&mut self, _x: &mut Exchange<'_>, _req: &mut Request) -> Verdict {
        Verdict::Continue
    }

    /// True when `on_request_head` left this stage something to wait for
    /// (a tarpit, a script's call-out, another request's cache fill). The
    /// wait phase runs only then: awaiting the composed no-op futures of
    /// every stage cost 820 instructions per keep-alive request
    /// (callgrind), 4 % of the whole request.
    fn waits(&self) -> bool {
        false
    }

    /// The request is about to go to the chosen pool: forwarding fields and
    /// header edits. Runs once per request, before the first attempt;
    /// retries send the same head.
    fn before_member_request(&mut self, _x: &mut Exchange<'_>, _req: &mut Request) {}

    /// The balancer picked `x.member` of `pool` for this attempt (1 for
    /// the first, 2 and more for retries), before it is connected. An
    /// answer here ends the request with it (no member is asked, no retry).
    fn on_member_picked(
        &mut self,
        _x: &mut Exchange<'_>,
        _pool: &Pool,
        _attempt: u32,
    ) -> Option<Local> {
        None
    }

    /// A piece of the request body on its way to the member (WAF body
    /// inspection). `Respond` stops the upload: the client gets that
    /// answer and the member connection is closed.
    fn on_request_body(&mut self, _x: &mut Exchange<'_>, _data: &[u8]) -> Verdict {
        Verdict::Continue
    }

    /// The request body (its payload, all of it) is complete: the last
    /// chance to refuse it before the member has the whole request.
    fn on_request_body_end(&mut self, _x: &mut Exchange<'_>) -> Verdict {
        Verdict::Continue
    }

    /// Read the whole request body, up to this many bytes, before a member
    /// is picked (a WAF that must judge the body before any of it leaves,
    /// as HAProxy's `http-buffer-request` and nginx's request buffering
    /// do). The body is then shown to `on_request_body` and
    /// `on_request_body_end` once, and replayed to the member (and to a
    /// retry). A longer body is refused with 413. None: the body streams.
    fn request_body_buffer(&self) -> Option<u64> {
        None
    }

    /// True when this stage overrides `on_request_body`. An HTTP/2 client's
    /// stream to an h2 member then sends its whole body before the
    /// response is read (as a WAF buffers it), instead of both directions
    /// at once: the hooks see every piece of every request body, whatever
    /// the protocols.
    fn wants_request_body(&self) -> bool {
        false
    }

    /// The member's final response head (not 1xx). May edit it (header
    /// edits, persistence cookie), decide to transform the body (then
    /// remove Content-Length: the body is re-framed as chunked or HTTP/2
    /// DATA), or decide to store it (cache).
    fn on_response_head(&mut self, _x: &mut Exchange<'_>, _resp: &mut Response) {}

    /// A piece of the response body, between de-framing and re-framing;
    /// `end` is true once, with the last (possibly empty) piece. A hook
    /// that changes the body writes the new bytes to `out`.
    fn on_response_body(
        &mut self,
        _x: &mut Exchange<'_>,
        _data: &[u8],
        _end: bool,
        _out: &mut Vec<u8>,
    ) -> BodyEdit {
        BodyEdit::Pass
    }

    /// True when `on_response_head` decided that this stage reads or
    /// changes this response's body (`on_response_body`,
    /// `on_response_flush`). When no stage does, the body goes from the
    /// member's framing to the client's without passing the hooks
    /// (about 400 instructions per small response, by callgrind).
    fn reads_response_body(&self) -> bool {
        false
    }

    /// The member paused: a body hook appends to `out` what it holds back
    /// (a compressor's pending block), so streams (server-sent events,
    /// long polls) keep flowing.
    fn on_response_flush(&mut self, _x: &mut Exchange<'_>, _out: &mut Vec<u8>) {}

    /// No member could answer and the client has no response yet: a stage
    /// may answer instead (a stale cached copy, stale-if-error).
    fn on_member_failure(&mut self, _x: &mut Exchange<'_>) -> Option<Local> {
        None
    }

    /// The exchange is over (answered by a member or locally, or failed).
    fn on_log(&mut self, _x: &mut Exchange<'_>, _req: &Request) {}
}

/// Two stages in order: `A`'s phases run before `B`'s.
impl<A: Hooks, B: Hooks> Hooks for (A, B) {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        match self.0.on_request_head(x, req) {
            Verdict::Continue => self.1.on_request_head(x, req),
            answer => answer,
        }
    }

    async fn on_request_wait(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        if self.0.waits() {
            match self.0.on_request_wait(x, req).await {
                Verdict::Continue => {}
                answer => return answer,
            }
        }
        if self.1.waits() {
            return self.1.on_request_wait(x, req).await;
        }
        Verdict::Continue
    }

    fn waits(&self) -> bool {
        self.0.waits() || self.1.waits()
    }

    fn reads_response_body(&self) -> bool {
        self.0.reads_response_body() || self.1.reads_response_body()
    }

    fn on_member_failure(&mut self, x: &mut Exchange<'_>) -> Option<Local> {
        self.0
            .on_member_failure(x)
            .or_else(|| self.1.on_member_failure(x))
    }

    fn before_member_request(&mut self, x: &mut Exchange<'_>, req: &mut Request) {
        self.0.before_member_request(x, req);
        self.1.before_member_request(x, req);
    }

    fn on_member_picked(
        &mut self,
        x: &mut Exchange<'_>,
        pool: &Pool,
        attempt: u32,
    ) -> Option<Local> {
        self.0
            .on_member_picked(x, pool, attempt)
            .or_else(|| self.1.on_member_picked(x, pool, attempt))
    }

    fn on_request_body(&mut self, x: &mut Exchange<'_>, data: &[u8]) -> Verdict {
        match self.0.on_request_body(x, data) {
            Verdict::Continue => self.1.on_request_body(x, data),
            answer => answer,
        }
    }

    fn on_request_body_end(&mut self, x: &mut Exchange<'_>) -> Verdict {
        match self.0.on_request_body_end(x) {
            Verdict::Continue => self.1.on_request_body_end(x),
            answer => answer,
        }
    }

    fn request_body_buffer(&self) -> Option<u64> {
        match (self.0.request_body_buffer(), self.1.request_body_buffer()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    fn wants_request_body(&self) -> bool {
        self.0.wants_request_body() || self.1.wants_request_body()
    }

    fn on_response_head(&mut self, x: &mut Exchange<'_>, resp: &mut Response) {
        self.0.on_response_head(x, resp);
        self.1.on_response_head(x, resp);
    }

    fn on_response_body(
        &mut self,
        x: &mut Exchange<'_>,
        data: &[u8],
        end: bool,
        out: &mut Vec<u8>,
    ) -> BodyEdit {
        match self.0.on_response_body(x, data, end, out) {
            BodyEdit::Pass => self.1.on_response_body(x, data, end, out),
            BodyEdit::Replaced => {
                // B sees what A produced.
                let first = std::mem::take(out);
                match self.1.on_response_body(x, &first, end, out) {
                    BodyEdit::Pass => *out = first,
                    BodyEdit::Replaced => {}
                }
                BodyEdit::Replaced
            }
        }
    }

    fn on_response_flush(&mut self, x: &mut Exchange<'_>, out: &mut Vec<u8>) {
        self.0.on_response_flush(x, out);
        if !out.is_empty() {
            // What A released is body to B.
            let first = std::mem::take(out);
            if let BodyEdit::Pass = self.1.on_response_body(x, &first, false, out) {
                *out = first;
            }
        }
        self.1.on_response_flush(x, out);
    }

    fn on_log(&mut self, x: &mut Exchange<'_>, req: &Request) {
        self.0.on_log(x, req);
        self.1.on_log(x, req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::message::Framing;
    use crate::proxy::WorkerCtx;
    use bytes::Bytes;

    /// Upper-cases the body; answers 403 to requests for /deny.
    struct Upper;
    impl Hooks for Upper {
        fn on_request_head(&mut self, _x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
            if req.target() == b"/deny" {
                return Verdict::Respond(Local {
                    response: Response::new(403, Framing::None),
                    body: Bytes::new(),
                });
            }
            req.head.fields.append(b"x-upper", b"1");
            Verdict::Continue
        }
        fn on_response_body(
            &mut self,
            _x: &mut Exchange<'_>,
            data: &[u8],
            _end: bool,
            out: &mut Vec<u8>,
        ) -> BodyEdit {
            out.extend(data.iter().map(u8::to_ascii_uppercase));
            BodyEdit::Replaced
        }
    }

    /// Appends "!" at the end of the body; counts the heads it saw.
    struct Bang(u32);
    impl Hooks for Bang {
        fn on_request_head(&mut self, _x: &mut Exchange<'_>, _req: &mut Request) -> Verdict {
            self.0 += 1;
            Verdict::Continue
        }
        fn on_response_body(
            &mut self,
            _x: &mut Exchange<'_>,
            data: &[u8],
            end: bool,
            out: &mut Vec<u8>,
        ) -> BodyEdit {
            if !end {
                return BodyEdit::Pass;
            }
            out.extend_from_slice(data);
            out.push(b'!');
            BodyEdit::Replaced
        }
    }

    /// `f` gets an exchange of the test worker's first vserver and its
    /// request, a GET of /a.
    fn with_exchange(f: impl FnOnce(&mut Exchange<'_>, &mut Request)) {
        let ctx = std::rc::Rc::new(WorkerCtx::for_tests());
        let snap = ctx.snapshot.load_full();
        let raw = bytes::Bytes::from_static(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut req = crate::http::head::parse_request(raw, 100).unwrap();
        let peer = "127.0.0.1:9".parse().unwrap();
        let vs = &snap.vservers[0];
        let mut x = Exchange::new(&ctx, vs, &snap.settings, (peer, peer), false, None);
        f(&mut x, &mut req);
    }

    #[test]
    fn stages_chain_in_order_and_the_first_answer_wins() {
        with_exchange(stages_chain);
    }

    fn stages_chain(x: &mut Exchange<'_>, req: &mut Request) {
        let mut hooks = (Upper, Bang(0));
        assert!(matches!(hooks.on_request_head(x, req), Verdict::Continue));
        assert_eq!(req.head.get("x-upper"), Some(&b"1"[..]));
        assert_eq!(hooks.1 .0, 1);
        let mut out = Vec::new();
        assert!(matches!(
            hooks.on_response_body(x, b"ab", false, &mut out),
            BodyEdit::Replaced
        ));
        assert_eq!(out, b"AB");
        out.clear();
        hooks.on_response_body(x, b"c", true, &mut out);
        assert_eq!(out, b"C!");
        // A Respond stops the chain: Bang never sees the request.
        req.target = bytes::Bytes::from_static(b"/deny");
        assert!(matches!(hooks.on_request_head(x, req), Verdict::Respond(_)));
        assert_eq!(hooks.1 .0, 1);
        assert!(!hooks.wants_request_body());
        assert!((Upper, Inspecting).wants_request_body());
    }

    #[test]
    fn a_request_body_hooks_answer_reaches_the_client_as_made() {
        with_exchange(|x, _| body_answer(x));
    }

    fn body_answer(x: &mut Exchange<'_>) {
        x.refusal = Some(Local {
            response: Response::new(406, Framing::None),
            body: Bytes::from_static(b"no thanks"),
        });
        let f = crate::proxy::exchange::body_failure(
            x,
            crate::http::body::BodyError::Refused,
            "unused",
        );
        assert_eq!(f.status, Some(406));
        assert!(f.close);
        let answer = f.into_answer().expect("an answer");
        assert_eq!(answer.response.status, 406);
        assert_eq!(&answer.body[..], b"no thanks");
    }

    /// Waits when told to, and then answers 429.
    struct Tarpit(bool);
    impl Hooks for Tarpit {
        fn waits(&self) -> bool {
            self.0
        }
        async fn on_request_wait(&mut self, _x: &mut Exchange<'_>, _r: &mut Request) -> Verdict {
            self.0 = false;
            Verdict::Respond(Local {
                response: Response::new(429, Framing::None),
                body: Bytes::new(),
            })
        }
    }

    /// A stage with nothing to wait for must not be asked to.
    struct NeverWaits;
    impl Hooks for NeverWaits {
        async fn on_request_wait(&mut self, _x: &mut Exchange<'_>, _r: &mut Request) -> Verdict {
            panic!("waited without saying so");
        }
    }

    #[test]
    fn only_the_stages_that_say_so_wait() {
        with_exchange(waits_asked);
    }

    fn waits_asked(x: &mut Exchange<'_>, req: &mut Request) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut hooks = (NeverWaits, (Tarpit(false), NeverWaits));
        assert!(!hooks.waits());
        assert!(!hooks.reads_response_body());
        hooks.1 .0 .0 = true;
        assert!(hooks.waits());
        let v = rt.block_on(hooks.on_request_wait(x, req));
        assert!(matches!(v, Verdict::Respond(l) if l.response.status == 429));
        assert!(!hooks.waits());
    }

    struct Inspecting;
    impl Hooks for Inspecting {
        fn wants_request_body(&self) -> bool {
            true
        }
    }
}
