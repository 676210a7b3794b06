//! The cache stage: a request is answered from the shared store when a
//! stored response may serve it (fresh, or stale where the member and the
//! client allow it), a stale one is revalidated with the member and
//! freshened by its 304, concurrent misses for one key wait for the first
//! (coalescing), and a storable member response is kept while it streams
//! to the client. The RFC's rules are in `cache/`; this file is the
//! pipeline's side of them.
//!
//! Runs after the compression stage: what is stored is what the client
//! got, encoded once, and served to every client that accepts the coding.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::exchange::Exchange;
use super::hooks::{BodyEdit, Hooks, Local, Verdict};
use crate::balance::persist::Persist;
use crate::cache::control::Directives;
use crate::cache::store::{Fill, FillGuard};
use crate::cache::{self, answer::answer, Object};
use crate::http::message::{Framing, Method, Request, Response};
use crate::http::responses;
use crate::stats;

#[derive(Default)]
pub struct Cache {
    /// Set when caching applies to this request.
    key: Option<Vec<u8>>,
    /// The request, kept to answer it from a stored response later.
    /// Boxed, as `capture`: every exchange's future holds this stage, most
    /// without a cache.
    req: Option<Box<Request>>,
    q: Directives,
    /// A stale variant being revalidated (or served if the member fails).
    stale: Option<Arc<Object>>,
    /// This request fetches the object; others wait for it.
    fill: Option<FillGuard>,
    /// Another request is fetching it: wait, then look again.
    wait: Option<watch::Receiver<bool>>,
    request_ms: i64,
    /// The response being stored as it streams, and its body so far.
    capture: Option<Box<(Response, Vec<u8>)>>,
    /// A body to send instead of the member's (a freshened stored object).
    replay: Option<Bytes>,
    /// An unsafe method's target, invalidated when it succeeds.
    invalidate: Option<Vec<u8>>,
}

impl Cache {
    fn hit(&self, x: &Exchange<'_>, o: &Object, req: &Request, status: &str, now: i64) -> Local {
        let (mut response, body) = match x.cache {
            // The common answer's Cache-Status is made once per config.
            Some(c) if status == "hit" => answer(o, req, now, &c.settings.hit_status),
            _ => answer(o, req, now, &self.status(x, status)),
        };
        // Whether the member's connection closed after the stored response
        // says nothing of this client's: a local answer that is not
        // keep-alive closes the client connection (`ClientSide::answer`).
        response.head.keep_alive = true;
        Local { response, body }
    }

    fn status(&self, x: &Exchange<'_>, detail: &str) -> String {
        let name = x.cache.map_or("switchyard", |c| c.settings.name.as_str());
        format!("{name}; {detail}")
    }

    /// Within stale-if-error (the response's, else the request's).
    fn stale_if_error(&self, o: &Object) -> bool {
        let window = o.cc.stale_if_error.or(self.q.stale_if_error);
        o.within_stale_window(window, &self.q, cache::now())
    }

    /// The member's response becomes `o`'s answer to the request; its body
    /// is sent in place of the member's.
    fn answer_instead(&mut self, resp: &mut Response, o: &Object, req: &Request, status: String) {
        let (r, body) = answer(o, req, cache::now(), &status);
        *resp = r;
        self.replay = Some(body);
    }
}

impl Hooks for Cache {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        let Some(vc) = x.cache else {
            return Verdict::Continue;
        };
        if req.head.upgrade {
            // A switch of protocols (WebSocket, over HTTP/2 an extended
            // CONNECT that a 200 would answer as opened) is never served
            // from the store nor made to wait for another request's fill.
            x.facts.cache_verdict("bypass");
            return Verdict::Continue;
        }
        let key = cache::key(req, x.tls, &vc.settings);
        if !matches!(req.method, Method::Get | Method::Head) {
            x.facts.cache_verdict("bypass");
            // Unsafe methods invalidate the target (RFC 9111 4.4).
            if !matches!(
                req.method,
                Method::Options | Method::Trace | Method::Connect
            ) {
                self.invalidate = Some(key);
            }
            return Verdict::Continue;
        }
        let vcount = x.vs.counters.local();
        self.q = Directives::of(&req.head.fields);
        let now = cache::now();
        if let Some(o) = vc.store.lookup(&key, &req.head.fields) {
            if o.fresh_for(&self.q, now) {
                stats::inc(&vcount.cache_hits);
                x.facts.cache_verdict("hit");
                return Verdict::Respond(self.hit(x, &o, req, "hit", now));
            }
            // Within stale-while-revalidate: served stale at once; the
            // first such request then revalidates it with the member.
            if req.method == Method::Get
                && o.within_stale_window(o.cc.stale_while_revalidate, &self.q, now)
            {
                stats::inc(&vcount.cache_stale_served);
                x.facts.cache_verdict("stale");
                let local = self.hit(x, &o, req, "hit; detail=stale-while-revalidate", now);
                return match vc.store.begin_fill(&key) {
                    Fill::Wait(_) => Verdict::Respond(local),
                    Fill::Leader(g) => {
                        stats::inc(&vcount.cache_revalidations);
                        self.fill = Some(g);
                        self.stale = Some(o);
                        self.key = Some(key);
                        self.req = Some(Box::new(req.clone()));
                        Verdict::RespondThenForward(local)
                    }
                };
            }
            stats::inc(&vcount.cache_revalidations);
            self.stale = Some(o);
        } else {
            stats::inc(&vcount.cache_misses);
            if self.q.only_if_cached {
                x.facts.cache_verdict("miss");
                let (response, body) =
                    responses::local_error(504, "not in the cache (only-if-cached)");
                return Verdict::Respond(Local { response, body });
            }
        }
        // One fetch per key at a time; not for HEAD or ranges, whose
        // responses are not stored.
        if req.method == Method::Get && !req.head.fields.contains("range") {
            match vc.store.begin_fill(&key) {
                Fill::Leader(g) => self.fill = Some(g),
                Fill::Wait(rx) => self.wait = Some(rx),
            }
        }
        self.key = Some(key);
        self.req = Some(Box::new(req.clone()));
        Verdict::Continue
    }

    fn waits(&self) -> bool {
        self.wait.is_some()
    }

    async fn on_request_wait(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        let (Some(mut rx), Some(vc), Some(key)) = (self.wait.take(), x.cache, self.key.as_ref())
        else {
            return Verdict::Continue;
        };
        let limit = Duration::from_millis(x.upstream_response_ms());
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
        if let Some(o) = vc.store.lookup(key, &req.head.fields) {
            let now = cache::now();
            if o.fresh_for(&self.q, now) {
                stats::inc(&x.vs.counters.local().cache_coalesced);
                x.facts.cache_verdict("hit");
                return Verdict::Respond(self.hit(x, &o, req, "hit; detail=collapsed", now));
            }
        }
        Verdict::Continue
    }

    fn before_member_request(&mut self, _x: &mut Exchange<'_>, req: &mut Request) {
        self.request_ms = cache::now();
        let Some(o) = &self.stale else {
            return;
        };
        // Our validators replace the client's: the client's conditions are
        // evaluated against the freshened object afterwards.
        let f = &mut req.head.fields;
        for n in [
            &b"if-none-match"[..],
            b"if-modified-since",
            b"if-match",
            b"if-unmodified-since",
            b"if-range",
            b"range",
        ] {
            f.remove(n);
        }
        if let Some(e) = &o.etag {
            f.append(b"if-none-match", e);
        }
        if let Some(lm) = o.head.head.get("last-modified") {
            let lm = lm.to_vec();
            f.append(b"if-modified-since", &lm);
        }
    }

    fn on_response_head(&mut self, x: &mut Exchange<'_>, resp: &mut Response) {
        let Some(vc) = x.cache else {
            return;
        };
        if let Some(key) = self.invalidate.take() {
            if (200..400).contains(&resp.status) {
                vc.store.invalidate(&key);
            }
            return;
        }
        let (Some(key), Some(req)) = (self.key.take(), self.req.take()) else {
            return;
        };
        if let Some(o) = self.stale.take() {
            if resp.status == 304 {
                x.facts.cache_verdict("revalidated");
                // The persistence cookie Forward added names this client's
                // member: it must not join the stored fields.
                let mut not_modified = resp.clone();
                strip_persistence_cookie(x, &mut not_modified);
                let fresh =
                    Arc::new(o.freshened(&not_modified, &req, self.request_ms, &vc.settings));
                vc.store.replace(&key, &o, fresh.clone());
                let status = self.status(x, "fwd=stale; fwd-status=304");
                self.answer_instead(resp, &fresh, &req, status);
                return;
            }
            if resp.status >= 500 && self.stale_if_error(&o) {
                stats::inc(&x.vs.counters.local().cache_stale_served);
                x.facts.cache_verdict("stale");
                let detail = format!(
                    "fwd=stale; fwd-status={}; detail=stale-if-error",
                    resp.status
                );
                let status = self.status(x, &detail);
                self.answer_instead(resp, &o, &req, status);
                return;
            }
        }
        x.facts.cache_verdict("miss");
        let mut stored = resp.clone();
        strip_persistence_cookie(x, &mut stored);
        let rc = Directives::of_response(&stored.head.fields);
        let too_big = matches!(resp.head.framing, Framing::Length(n) if n > vc.store.max_object());
        let why = if too_big {
            Some("too big")
        } else {
            cache::storable(&req, &self.q, &stored, &rc, &vc.settings)
        };
        let detail = match why {
            None => {
                let len = match resp.head.framing {
                    Framing::Length(n) => n as usize,
                    _ => 0,
                };
                self.capture = Some(Box::new((stored, Vec::with_capacity(len))));
                self.key = Some(key);
                self.req = Some(req);
                "fwd=miss; stored".to_string()
            }
            Some(why) => format!("fwd=miss; detail={}", why.replace(' ', "-")),
        };
        let status = self.status(x, &detail);
        resp.head.fields.append(b"cache-status", status.as_bytes());
    }

    fn on_response_body(
        &mut self,
        x: &mut Exchange<'_>,
        data: &[u8],
        end: bool,
        out: &mut Vec<u8>,
    ) -> BodyEdit {
        if let Some(body) = &self.replay {
            if end {
                out.extend_from_slice(body);
            }
            return BodyEdit::Replaced;
        }
        let Some(captured) = &mut self.capture else {
            return BodyEdit::Pass;
        };
        let body = &mut captured.1;
        let max = x.cache.map_or(0, |c| c.store.max_object()) as usize;
        if body.len() + data.len() > max {
            self.capture = None;
            return BodyEdit::Pass;
        }
        body.extend_from_slice(data);
        if end {
            if let (Some(captured), Some(vc), Some(key), Some(req)) =
                (self.capture.take(), x.cache, &self.key, &self.req)
            {
                let (head, body) = *captured;
                let o = Object::new(req, &head, Bytes::from(body), self.request_ms, &vc.settings);
                if vc.store.insert(key, o) {
                    stats::inc(&x.vs.counters.local().cache_stored);
                }
            }
        }
        BodyEdit::Pass
    }

    fn reads_response_body(&self) -> bool {
        self.replay.is_some() || self.capture.is_some()
    }

    fn on_member_failure(&mut self, x: &mut Exchange<'_>) -> Option<Local> {
        let (o, req) = (self.stale.as_ref()?, self.req.as_ref()?);
        if !self.stale_if_error(o) {
            return None;
        }
        stats::inc(&x.vs.counters.local().cache_stale_served);
        x.facts.cache_verdict("stale");
        let now = cache::now();
        Some(self.hit(x, o, req, "fwd=stale; detail=stale-if-error", now))
    }
}

/// The persistence cookie is ours, per client: never stored.
fn strip_persistence_cookie(x: &Exchange<'_>, resp: &mut Response) {
    if let Some(Persist::Cookie(name)) = x.pool.as_ref().and_then(|p| p.persistence.as_ref()) {
        let prefix = format!("{name}=");
        resp.head.fields.retain(|n, v| {
            !(n.eq_ignore_ascii_case(b"set-cookie") && v.starts_with(prefix.as_bytes()))
        });
    }
}
