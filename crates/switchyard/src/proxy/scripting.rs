//! The vserver's script (`[vserver.script]`, docs/scripting.md) as a
//! stage: `on_request` after normalization and the per-source limits,
//! before routing (so it reads the one spelling of the path every rule
//! reads, costs nothing for a request the limits refused, and can choose
//! the pool routing then keeps); `on_response` on the member's response
//! head; `on_log` at the end, with fields for the access log.
//!
//! The WAF comes after the script: it judges the request the member will
//! get (the script's rewrites included), and a request the script answers
//! itself (a maintenance page, a redirect) costs no inspection.
//!
//! An event that fails (a Lua error, over `max_instructions` or
//! `max_memory`) never loses the request silently: the client gets 500,
//! the vserver counts it (`script_errors`, and `script_timeouts` for the
//! instruction limit), the access log shows `script_error`, and the log
//! gets a line (at most one per second per script) with FILE:LINE.
//!
//! `on_member` runs when the balancer picked a member (each attempt),
//! before it is connected: read-only (docs/scripting.md says why).
//! The body events are hooks of their own here; the L4 events are in
//! `l4/scripting.rs`.

use std::rc::Rc;

use bytes::Bytes;

use super::exchange::Exchange;
use super::hooks::{BodyEdit, Hooks, Local, Verdict};
use super::normalizing;
use crate::accesslog::ScriptLog;
use crate::config::snapshot::{Pool, VsScript};
use crate::http::message::{Framing, Request, Response};
use crate::http::responses;
use crate::script::{self, BodyEvent, Effects, Failure, Info, State, Vars};
use crate::stats;

/// Boxed: every exchange's future holds this stage, most without a script.
#[derive(Default)]
pub struct Scripting(Option<Box<Run>>);

#[derive(Default)]
struct Run {
    /// This worker's state of the script, once an event ran.
    state: Option<Rc<State>>,
    /// The request's `r.vars`, between its events.
    vars: Vars,
    /// A failed `on_response` replaced the member's response: its body
    /// is swallowed and this one sent.
    replace_body: Option<Bytes>,
    /// The request body goes to `on_request_body` (read whole first, up
    /// to `max_body`).
    collect_request: bool,
    max_body: u64,
    /// `on_request` runs in the wait phase (it may call out).
    waiting: bool,
    /// The script asked for the response body (`r:collect_body()`).
    want_response: bool,
    /// The response body so far, while it is collected for
    /// `on_response_body`.
    response_body: Option<Vec<u8>>,
}

fn protocol(x: &Exchange<'_>, req: Option<&Request>) -> &'static str {
    if x.facts.http3 {
        "HTTP/3"
    } else if x.facts.http2 {
        "HTTP/2.0"
    } else if req.is_some_and(|r| r.head.minor == 0) {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    }
}

fn info(x: &Exchange<'_>, req: Option<&Request>) -> Info {
    Info {
        client: Some(x.peer),
        tls: x.tls,
        protocol: protocol(x, req),
        client_cert: x.client_cert.clone(),
        status: x.status,
    }
}

impl Run {
    /// The worker's state of the vserver's script, or the failure to make
    /// one (already counted and logged).
    fn state(&mut self, x: &mut Exchange<'_>, s: &VsScript) -> Option<Rc<State>> {
        if let Some(st) = &self.state {
            return Some(st.clone());
        }
        match script::state(&s.script) {
            Ok(st) => {
                self.state = Some(st.clone());
                Some(st)
            }
            Err(f) => {
                failed(x, s, &f);
                None
            }
        }
    }
}

/// Counts, logs (rate-limited) and records a failed event.
fn failed(x: &mut Exchange<'_>, s: &VsScript, f: &Failure) {
    let c = x.vs.counters.local();
    stats::inc(&c.script_errors);
    if matches!(f, Failure::Timeout(_)) {
        stats::inc(&c.script_timeouts);
    }
    s.script.log_failure(f);
    let log = x.facts.script.get_or_insert_with(Box::default);
    log.error.get_or_insert_with(|| f.message().to_string());
}

/// The client's answer to a failed event: no detail of the script.
fn error_answer() -> Local {
    let (response, body) =
        responses::local_error(500, "the virtual server's script failed on this request");
    Local { response, body }
}

/// The access-log fields an event added.
fn record_log(x: &mut Exchange<'_>, e: &mut Effects) {
    if e.log.is_empty() {
        return;
    }
    let log = x.facts.script.get_or_insert_with(Box::<ScriptLog>::default);
    for (n, v) in e.log.drain(..) {
        log.fields.retain(|(k, _)| *k != n);
        log.fields.push((n, v));
    }
}

impl Hooks for Scripting {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        // `vs` outlives the exchange's borrow: no reference count taken.
        let vs = x.vs;
        let Some(s) = vs.script.as_deref() else {
            return Verdict::Continue;
        };
        let run = self.0.get_or_insert_with(Box::default);
        if s.script.events.request_body {
            run.collect_request = collect_request(x, s, req);
            run.max_body = s.script.limits.max_body as u64;
        }
        if !s.script.events.request {
            return Verdict::Continue;
        }
        if s.script.waits {
            // Run as a coroutine in the wait phase (right after this one,
            // before routing: stages.rs).
            run.waiting = true;
            return Verdict::Continue;
        }
        let Some(st) = run.state(x, s) else {
            return Verdict::Respond(error_answer());
        };
        let info = info(x, Some(req));
        let Some(r) = st.on_request(req, info, &mut run.vars) else {
            return Verdict::Continue;
        };
        applied(x, s, run, req, r)
    }

    fn waits(&self) -> bool {
        self.0.as_ref().is_some_and(|run| run.waiting)
    }

    async fn on_request_wait(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        let vs = x.vs;
        let (Some(s), Some(run)) = (vs.script.as_deref(), self.0.as_mut()) else {
            return Verdict::Continue;
        };
        if !std::mem::take(&mut run.waiting) {
            return Verdict::Continue;
        }
        let Some(st) = run.state(x, s) else {
            return Verdict::Respond(error_answer());
        };
        let info = info(x, Some(req));
        let pools = Rc::new(super::sideband::Pools(s.pools.clone()));
        let Some(r) = st.on_request_waiting(req, info, &mut run.vars, pools).await else {
            return Verdict::Continue;
        };
        applied(x, s, run, req, r)
    }

    fn on_response_head(&mut self, x: &mut Exchange<'_>, resp: &mut Response) {
        let vs = x.vs;
        let Some(s) = vs.script.as_deref() else {
            return;
        };
        let run = self.0.get_or_insert_with(Box::default);
        if s.script.events.response {
            let Some(st) = run.state(x, s) else {
                return run.replace(resp);
            };
            let info = info(x, None);
            match st.on_response(resp, info, &mut run.vars) {
                None => {}
                Some(Ok(mut e)) => {
                    record_log(x, &mut e);
                    run.want_response |= e.collect;
                }
                Some(Err(f)) => {
                    failed(x, s, &f);
                    return run.replace(resp);
                }
            }
        }
        if run.want_response && s.script.events.response_body {
            run.response_body = collect_response(x, s, resp).then(Vec::new);
        }
    }

    /// `on_member`: what the balancer picked, to read, keep in `r.vars`
    /// and log. A failed event ends the request with 500 before the
    /// member is connected (no retry: the next pick would fail alike).
    fn on_member_picked(
        &mut self,
        x: &mut Exchange<'_>,
        pool: &Pool,
        attempt: u32,
    ) -> Option<Local> {
        let vs = x.vs;
        let s = vs.script.as_deref()?;
        if !s.script.events.member {
            return None;
        }
        let m = x.picked()?.clone();
        let run = self.0.get_or_insert_with(Box::default);
        let Some(st) = run.state(x, s) else {
            return Some(error_answer());
        };
        let picked = script::Picked {
            pool: pool.name.clone(),
            member: m.addr.to_string(),
            attempt,
        };
        let info = info(x, None);
        match st.on_member(picked, info, &mut run.vars)? {
            Ok(mut e) => {
                record_log(x, &mut e);
                None
            }
            Err(f) => {
                failed(x, s, &f);
                Some(error_answer())
            }
        }
    }

    fn request_body_buffer(&self) -> Option<u64> {
        let run = self.0.as_ref()?;
        run.collect_request.then_some(run.max_body)
    }

    fn on_request_body(&mut self, x: &mut Exchange<'_>, data: &[u8]) -> Verdict {
        let vs = x.vs;
        let (Some(s), Some(run)) = (vs.script.as_deref(), self.0.as_mut()) else {
            return Verdict::Continue;
        };
        if !run.collect_request {
            return Verdict::Continue;
        }
        // Shown once, whole (the buffer reads it all first).
        run.collect_request = false;
        if data.len() > s.script.limits.max_body {
            // A longer buffer of another stage (the WAF's): passed untouched.
            body_over(x, "request");
            return Verdict::Continue;
        }
        let Some(st) = run.state(x, s) else {
            return Verdict::Respond(error_answer());
        };
        let info = info(x, None);
        let body = Bytes::copy_from_slice(data);
        match st.on_body(BodyEvent::Request, body, info, &mut run.vars) {
            None => Verdict::Continue,
            Some(Err(f)) => {
                failed(x, s, &f);
                Verdict::Respond(error_answer())
            }
            Some(Ok(mut e)) => {
                record_log(x, &mut e);
                if let Some(a) = e.answer.take() {
                    return Verdict::Respond(local_answer(vs, a));
                }
                if let Some(b) = e.body.take() {
                    x.request_body = Some(b);
                }
                Verdict::Continue
            }
        }
    }

    fn reads_response_body(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|run| run.replace_body.is_some() || run.response_body.is_some())
    }

    fn on_response_body(
        &mut self,
        x: &mut Exchange<'_>,
        data: &[u8],
        end: bool,
        out: &mut Vec<u8>,
    ) -> BodyEdit {
        let Some(run) = self.0.as_mut() else {
            return BodyEdit::Pass;
        };
        if let Some(b) = &run.replace_body {
            if end {
                out.extend_from_slice(b);
            }
            return BodyEdit::Replaced;
        }
        let Some(buf) = run.response_body.as_mut() else {
            return BodyEdit::Pass;
        };
        let vs = x.vs;
        let Some(s) = vs.script.as_deref() else {
            return BodyEdit::Pass;
        };
        buf.extend_from_slice(data);
        if buf.len() > s.script.limits.max_body {
            // Over the bound: what is held goes on untouched, and the rest
            // after it (iRules' HTTP::collect users expect the response,
            // not an error; its head is gone anyway).
            out.append(buf);
            run.response_body = None;
            body_over(x, "response");
            return BodyEdit::Replaced;
        }
        if !end {
            return BodyEdit::Replaced;
        }
        let body = Bytes::from(std::mem::take(buf));
        run.response_body = None;
        let Some(st) = run.state(x, s) else {
            out.extend_from_slice(&body);
            return BodyEdit::Replaced;
        };
        let info = info(x, None);
        match st.on_body(BodyEvent::Response, body.clone(), info, &mut run.vars) {
            Some(Ok(mut e)) => {
                record_log(x, &mut e);
                out.extend_from_slice(e.body.as_deref().unwrap_or(&body));
            }
            // The head (its status) is gone: the member's body goes on,
            // and the failure is counted, logged and in the access log.
            Some(Err(f)) => {
                failed(x, s, &f);
                out.extend_from_slice(&body);
            }
            None => out.extend_from_slice(&body),
        }
        BodyEdit::Replaced
    }

    fn on_log(&mut self, x: &mut Exchange<'_>, _req: &Request) {
        let vs = x.vs;
        let Some(s) = vs.script.as_deref() else {
            return;
        };
        if !s.script.events.log {
            return;
        }
        let run = self.0.get_or_insert_with(Box::default);
        let Some(st) = run.state(x, s) else {
            return;
        };
        let info = info(x, None);
        match st.on_log(info, &mut run.vars) {
            None => {}
            Some(Ok(mut e)) => record_log(x, &mut e),
            // The client has its answer: the failure is counted and logged.
            Some(Err(f)) => failed(x, s, &f),
        }
    }
}

/// What `on_request` decided, applied to the request and the exchange.
fn applied(
    x: &mut Exchange<'_>,
    s: &VsScript,
    run: &mut Run,
    req: &mut Request,
    r: Result<Effects, Failure>,
) -> Verdict {
    let mut e = match r {
        Ok(e) => e,
        Err(f) => {
            failed(x, s, &f);
            return Verdict::Respond(error_answer());
        }
    };
    record_log(x, &mut e);
    run.want_response |= e.collect;
    if let Some(t) = e.target.take() {
        normalizing::rewrite(req, t);
    }
    if let Some(i) = e.pool {
        x.pool = s.pools.get(i).cloned();
    }
    if let Some(m) = e.member {
        x.script_member = Some(m);
    }
    match e.answer.take() {
        Some(a) => Verdict::Respond(local_answer(x.vs, a)),
        None => Verdict::Continue,
    }
}

/// A script's own answer (`r:respond`, `r:redirect`).
fn local_answer(vs: &crate::config::snapshot::VServer, a: script::Answer) -> Local {
    let ctype = a
        .headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .map_or("text/plain; charset=utf-8", |(_, v)| v.as_str());
    let mut fields: Vec<(&str, &str)> = a
        .headers
        .iter()
        .filter(|(n, _)| n != "content-type")
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    // As every local answer of a vserver that sets HSTS.
    if let Some(h) = vs.tls.as_ref().and_then(|t| t.hsts.as_deref()) {
        fields.push(("strict-transport-security", h));
    }
    let (response, body) = responses::local(a.status, ctype, a.body, &fields);
    Local { response, body }
}

/// The access log says a body passed untouched, over `max_body`.
fn body_over(x: &mut Exchange<'_>, which: &str) {
    let log = x.facts.script.get_or_insert_with(Box::<ScriptLog>::default);
    log.fields.retain(|(k, _)| k != "body_over");
    log.fields
        .push(("body_over".to_string(), which.to_string()));
}

/// Whether the request's body goes to `on_request_body`: it has one, and
/// a declared length within `max_body` (a longer one streams to the
/// member untouched: the event does not run). A chunked body is read
/// whole up to `max_body`; a longer one is refused with 413 (part of it
/// is read: it can no longer stream untouched).
fn collect_request(x: &mut Exchange<'_>, s: &VsScript, req: &Request) -> bool {
    match req.head.framing {
        Framing::None => false,
        Framing::Length(n) if n > s.script.limits.max_body as u64 => {
            body_over(x, "request");
            false
        }
        _ => true,
    }
}

/// Whether the response's body can go to `on_response_body`, and its head
/// made ready for a new body: it has one, not content-encoded (the script
/// would get compressed bytes), with a declared length within `max_body`
/// (a longer one passes untouched). The body is then re-framed (chunked
/// on HTTP/1.1, DATA frames without a length on HTTP/2 and 3: the new
/// length is known only at its end) and a strong ETag becomes weak (the
/// bytes may change, the meaning should not).
fn collect_response(x: &mut Exchange<'_>, s: &VsScript, resp: &mut Response) -> bool {
    let max = s.script.limits.max_body as u64;
    let encoded = resp
        .head
        .get("content-encoding")
        .is_some_and(|c| !c.eq_ignore_ascii_case(b"identity"));
    match resp.head.framing {
        Framing::None => return false,
        _ if encoded || matches!(resp.status, 204 | 304) => return false,
        Framing::Length(n) if n > max => {
            body_over(x, "response");
            return false;
        }
        _ => {}
    }
    let f = &mut resp.head.fields;
    f.remove(b"content-length");
    if let Some(etag) = f.get("etag") {
        if etag.starts_with(b"\"") {
            let weak = [b"W/", etag].concat();
            f.set(b"etag", &weak);
        }
    }
    resp.head.framing = Framing::Chunked;
    true
}

impl Run {
    /// The member's response becomes the 500 of a failed event.
    fn replace(&mut self, resp: &mut Response) {
        let l = error_answer();
        *resp = l.response;
        // A local answer's head says no body (its sender writes it whole);
        // this one goes out through the body phase: its length is framed.
        resp.head.framing = Framing::Length(l.body.len() as u64);
        self.replace_body = Some(l.body);
        self.response_body = None;
    }
}
