//! The WAF stage: a vserver's SecLang rule set (`waf/`) run on each
//! request it inspects, phase by phase, as ModSecurity does:
//!
//! - phase 1 on the request head (`on_request_head`); a request without a
//!   body runs phase 2 there too;
//! - phase 2 on the whole body, read before any member is picked
//!   (`request_body_buffer`), so a refused body never reaches one. A body
//!   declared longer than `body_limit` is refused with 413 (`reject`), or
//!   streams while its first `body_limit` bytes are inspected (`partial`:
//!   a refusal then cuts the upload, and the member never gets a whole
//!   request);
//! - phase 3 on the response head: a block replaces the member's response;
//! - phase 4 on the response body when the rule set inspects it: the body
//!   (up to `response_body_limit`) is held back, re-framed as chunked, and
//!   replaced by the block message when a rule blocks;
//! - phase 5, the counters and the audit line at the end (`on_log`).
//!
//! A block answers `status` (403 by default; a rule's `status:` wins), with
//! the request's unique id, which the audit log carries too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use switchyard_waf::engine::{self, Intervention, InterventionKind, Transaction};
use switchyard_waf::policy::{Audit, Mode, VsWaf};
use switchyard_waf::seclang::LimitAction;

use super::exchange::Exchange;
use super::hooks::{BodyEdit, Hooks, Local, Verdict};
use crate::accesslog::waf_audit::{self as audit, Action};
use crate::http::message::{Framing, Request, Response};
use crate::http::responses;

#[derive(Default)]
pub struct Waf {
    /// The request's transaction, when the WAF inspects it. Boxed: every
    /// exchange's future holds this stage, most without a WAF.
    tx: Option<Box<Transaction<'static>>>,
    unique_id: String,
    /// Phase 2 has run.
    body_done: bool,
    /// Read the body before the member (phase 2 on all of it).
    buffer: Option<u64>,
    /// The first bytes of a streamed body (`partial`).
    head_of_body: Vec<u8>,
    /// The response body held back for phase 4.
    held: Option<Vec<u8>>,
    /// Phase 4 has run on a prefix; the rest streams.
    response_done: bool,
    /// The member's response was replaced: its body is swallowed and
    /// this one sent at the end.
    replace_body: Option<Bytes>,
    /// The client got the WAF's answer.
    blocked: bool,
}

/// Request ids: this process's start time and a counter.
fn unique_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    });
    format!("{start:x}{:08x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A cheap per-thread random number for sampling.
fn sample_roll() -> u64 {
    use std::cell::Cell;
    thread_local!(static S: Cell<u64> = Cell::new({
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        t | 1
    }));
    S.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

fn protocol(x: &Exchange<'_>, req: &Request) -> &'static str {
    if x.facts.http3 {
        "HTTP/3"
    } else if x.facts.http2 {
        "HTTP/2.0"
    } else if req.head.minor == 0 {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    }
}

impl Waf {
    fn policy<'a>(&self, x: &Exchange<'a>) -> Option<&'a Arc<VsWaf>> {
        x.vs.waf.as_ref()
    }

    /// The answer to a request a rule interrupted.
    fn block(&mut self, w: &VsWaf, i: &Intervention) -> Local {
        self.blocked = true;
        stats_inc(&w.counters.blocked);
        let status = if i.status == 403 { w.status } else { i.status };
        match &i.kind {
            InterventionKind::Redirect(to) => {
                let (response, body) = responses::local(
                    if (300..400).contains(&i.status) {
                        i.status
                    } else {
                        302
                    },
                    "text/plain; charset=utf-8",
                    Bytes::new(),
                    &[("location", to)],
                );
                Local { response, body }
            }
            _ => {
                let body = format!(
                    "Request refused by the web application firewall (rule {}, id {}).\n",
                    i.rule_id, self.unique_id
                );
                let (mut response, body) = responses::local(
                    status,
                    "text/plain; charset=utf-8",
                    Bytes::from(body),
                    &[("x-request-id", &self.unique_id)],
                );
                if i.kind == InterventionKind::Drop {
                    response.head.fields.set(b"connection", b"close");
                    response.head.keep_alive = false;
                }
                Local { response, body }
            }
        }
    }

    /// Phase 2 on `body` (all of it, or its first bytes).
    fn inspect_body(&mut self, x: &Exchange<'_>, body: &[u8]) -> Verdict {
        self.body_done = true;
        let Some(w) = self.policy(x).cloned() else {
            return Verdict::Continue;
        };
        let Some(tx) = self.tx.as_mut() else {
            return Verdict::Continue;
        };
        match tx.process_request_body(body, None).interrupted.clone() {
            Some(i) => Verdict::Respond(self.block(&w, &i)),
            None => Verdict::Continue,
        }
    }
}

fn stats_inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Hooks for Waf {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        let Some(w) = x.vs.waf.clone() else {
            return Verdict::Continue;
        };
        if w.mode == Mode::Off {
            return Verdict::Continue;
        }
        if w.sample_below != u64::MAX && sample_roll() >= w.sample_below {
            stats_inc(&w.counters.sampled_out);
            return Verdict::Continue;
        }
        stats_inc(&w.counters.inspected);
        self.unique_id = unique_id();
        let mut headers: Vec<(&[u8], &[u8])> = req.head.fields.iter().collect();
        if !req.head.fields.contains("host") {
            if let Some(h) = req.host.as_deref() {
                headers.insert(0, (b"Host", h));
            }
        }
        let remote = x.peer.ip().to_string();
        let local = x.vs.listen.first().copied();
        let local_ip = local.map(|a| a.ip().to_string()).unwrap_or_default();
        let method = String::from_utf8_lossy(req.method_str());
        let mut tx = w.engine.transaction_arc(engine::Request {
            method: &method,
            uri: req.target(),
            uri_raw: req.received_target(),
            protocol: protocol(x, req),
            headers: &headers,
            remote_addr: &remote,
            remote_port: x.peer.port(),
            local_addr: &local_ip,
            local_port: local.map_or(0, |a| a.port()),
            unique_id: &self.unique_id,
        });
        tx.set_mode(w.mode.engine_mode());
        for (k, v) in &w.tx {
            tx.preset_tx(k, v);
        }
        tx.set_body_access(w.request_body, w.response_body);
        tx.set_request_body_limit(w.body_limit, w.body_limit_action);
        let interrupted = tx.process_request_headers().interrupted.clone();
        self.tx = Some(Box::new(tx));
        if let Some(i) = interrupted {
            return Verdict::Respond(self.block(&w, &i));
        }
        match req.head.framing {
            Framing::None => self.inspect_body(x, b""),
            Framing::Length(n) if n > w.body_limit => match w.body_limit_action {
                LimitAction::Reject if w.request_body => {
                    stats_inc(&w.counters.body_rejected);
                    self.body_done = true;
                    self.blocked = true;
                    let (mut response, body) = responses::local_error(
                        413,
                        &format!(
                            "the request body ({n} bytes) is longer than the {} bytes this vserver's WAF inspects",
                            w.body_limit
                        ),
                    );
                    // The body is not read: the connection cannot go on.
                    response.head.fields.set(b"connection", b"close");
                    response.head.keep_alive = false;
                    Verdict::Respond(Local { response, body })
                }
                // Streams; its first bytes are inspected on the way.
                _ => Verdict::Continue,
            },
            Framing::Chunked | Framing::Close
                if w.body_limit_action == LimitAction::ProcessPartial =>
            {
                Verdict::Continue
            }
            _ => {
                self.buffer = Some(w.body_limit);
                Verdict::Continue
            }
        }
    }

    fn request_body_buffer(&self) -> Option<u64> {
        if self.body_done {
            None
        } else {
            self.buffer
        }
    }

    fn wants_request_body(&self) -> bool {
        self.tx.is_some() && !self.body_done
    }

    fn on_request_body(&mut self, x: &mut Exchange<'_>, data: &[u8]) -> Verdict {
        if self.body_done || self.tx.is_none() {
            return Verdict::Continue;
        }
        let Some(w) = self.policy(x).cloned() else {
            return Verdict::Continue;
        };
        if self.buffer.is_some() {
            // The whole body, read before the member.
            return self.inspect_body(x, data);
        }
        let room = (w.body_limit as usize).saturating_sub(self.head_of_body.len());
        self.head_of_body
            .extend_from_slice(&data[..data.len().min(room)]);
        if data.len() >= room {
            let prefix = std::mem::take(&mut self.head_of_body);
            return self.inspect_body(x, &prefix);
        }
        Verdict::Continue
    }

    fn on_request_body_end(&mut self, x: &mut Exchange<'_>) -> Verdict {
        if self.body_done || self.tx.is_none() {
            return Verdict::Continue;
        }
        let body = std::mem::take(&mut self.head_of_body);
        self.inspect_body(x, &body)
    }

    fn on_response_head(&mut self, x: &mut Exchange<'_>, resp: &mut Response) {
        let Some(w) = self.policy(x).cloned() else {
            return;
        };
        let Some(tx) = self.tx.as_mut() else {
            return;
        };
        let headers: Vec<(&[u8], &[u8])> = resp.head.fields.iter().collect();
        let proto = if x.facts.http3 {
            "HTTP/3"
        } else if x.facts.http2 {
            "HTTP/2.0"
        } else {
            "HTTP/1.1"
        };
        let interrupted = tx
            .process_response_headers(resp.status, proto, &headers)
            .interrupted
            .clone();
        if let Some(i) = interrupted {
            let l = self.block(&w, &i);
            *resp = l.response;
            self.replace_body = Some(l.body);
            return;
        }
        if resp.head.framing != Framing::None && tx.wants_response_body() {
            // Held back until phase 4 has judged it: re-framed, since a
            // block replaces it with a body of another length.
            resp.head.fields.remove(b"content-length");
            if resp.head.framing != Framing::Close {
                resp.head.framing = Framing::Chunked;
            }
            self.held = Some(Vec::new());
        }
    }

    fn reads_response_body(&self) -> bool {
        self.replace_body.is_some() || self.held.is_some()
    }

    fn on_response_body(
        &mut self,
        x: &mut Exchange<'_>,
        data: &[u8],
        end: bool,
        out: &mut Vec<u8>,
    ) -> BodyEdit {
        if let Some(b) = &self.replace_body {
            if end {
                out.extend_from_slice(b);
            }
            return BodyEdit::Replaced;
        }
        let Some(held) = self.held.as_mut() else {
            return BodyEdit::Pass;
        };
        if self.response_done {
            return BodyEdit::Pass;
        }
        let Some(w) = x.vs.waf.clone() else {
            return BodyEdit::Pass;
        };
        held.extend_from_slice(data);
        if !end && (held.len() as u64) < w.response_body_limit {
            return BodyEdit::Replaced;
        }
        let body = std::mem::take(held);
        self.response_done = true;
        let interrupted = self
            .tx
            .as_mut()
            .and_then(|tx| tx.process_response_body(&body).interrupted.clone());
        match interrupted {
            Some(i) => {
                let l = self.block(&w, &i);
                x.status = i.status;
                if end {
                    out.extend_from_slice(&l.body);
                } else {
                    // The rest of the member's body is swallowed.
                    self.replace_body = Some(l.body);
                }
            }
            None => out.extend_from_slice(&body),
        }
        BodyEdit::Replaced
    }

    fn on_log(&mut self, x: &mut Exchange<'_>, req: &Request) {
        let Some(w) = x.vs.waf.as_ref() else {
            return;
        };
        let Some(mut tx) = self.tx.take() else {
            return;
        };
        // Phases the exchange never reached (a local answer, a member
        // that failed) still run: the CRS scores and logs in 4 and 5.
        tx.process_response_body(b"");
        tx.process_logging();
        let o = tx.into_outcome();
        if o.limits_exceeded {
            stats_inc(&w.counters.limits_exceeded);
        }
        for m in &o.matched {
            w.counters.count_rule(m.id);
        }
        let action = if self.blocked {
            Action::Blocked
        } else if o.interrupted.is_some()
            || (w.mode == Mode::Detect && o.matched.iter().any(|m| w.engine.blocks(m.id)))
        {
            stats_inc(&w.counters.detected);
            Action::Detected
        } else if !o.matched.is_empty() {
            Action::Logged
        } else {
            Action::Passed
        };
        let Some(log) = &w.audit_log else {
            return;
        };
        if action == Action::Passed && log.audit != Audit::All {
            return;
        }
        let time_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let rec = audit::Record {
            time_us,
            unique_id: &self.unique_id,
            vserver: &x.vs.name,
            client: x.peer,
            method: req.method_str(),
            uri: req.target(),
            protocol: protocol(x, req),
            host: req.host(),
            status: x.status,
            action,
            mode: w.mode.name(),
            interrupted: o.interrupted.as_ref(),
            matched: &o.matched,
        };
        log.sink.push(time_us, &mut |out| audit::render(&rec, out));
    }
}
