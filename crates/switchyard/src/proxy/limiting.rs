//! The per-source limits' request side: each request counts against the
//! vserver's `req_rate` and `req_cur` limits under its key (the source
//! address, a header, a cookie or the path), as the shield decides
//! (`shield::admission::request`), and a key over its limit, or denied for
//! a while, is answered `status` (429) with Retry-After; a tarpit holds
//! the answer first. The connection side (`conn_cur`, `conn_rate`) is
//! decided at accept, by the same shield (`accept.rs`).
//!
//! Runs first in the pipeline: a refused request costs no routing, WAF or
//! cache work.

use std::time::Duration;

use bytes::Bytes;

use super::exchange::Exchange;
use super::hooks::{Hooks, Local, Verdict};
use crate::balance::persist::cookie;
use crate::http::message::Request;
use crate::http::responses;
use crate::shield::admission;
use crate::shield::stick::{self, Action, Key, Limit, Reason};

/// Before routing (the front), the vserver's limits on every request;
/// after routing, the `scope = "policy"` limits the deciding policy names
/// (`Limits::after_routing`).
#[derive(Default)]
pub struct Limits {
    /// A refusal held back for this long (tarpit).
    tarpit: Option<(u64, Local)>,
    after_routing: bool,
    /// The request's places in `req_cur` limits: the pipeline holds its
    /// stages until the exchange ends (`pipeline::run`), so they are given
    /// back when the answer has been sent or the exchange failed.
    leases: Vec<stick::RequestLease>,
}

impl Limits {
    pub fn after_routing() -> Limits {
        Limits {
            after_routing: true,
            ..Limits::default()
        }
    }
}

/// The request's value of a limit's key; None when it has none (no such
/// header or cookie): such requests are not limited by it.
fn key_of<'r>(l: &Limit, req: &'r Request, source: &'r [u8]) -> Option<&'r [u8]> {
    match &l.key {
        Key::Source => Some(source),
        Key::Header(h) => req.head.get(h),
        Key::Cookie(c) => cookie(req, c),
        Key::Path => Some(req.path_only()),
    }
}

fn refusal(l: &Limit, reason: Reason) -> Local {
    let retry_after = match (l.action, reason) {
        (Action::Deny(ms), _) => ms,
        (_, Reason::ReqRate) => l.req_rate.map_or(1000, |r| r.period_ms),
        _ => 1000,
    };
    let secs = retry_after.div_ceil(1000).max(1).to_string();
    let (mut response, body) = responses::local(
        l.status,
        "text/plain; charset=utf-8",
        Bytes::from(format!(
            "Too many requests: limit \"{}\" ({}); retry after {secs} s.\n",
            l.name,
            reason.name()
        )),
        &[("retry-after", &secs)],
    );
    if l.action == Action::Close {
        response.head.fields.set(b"connection", b"close");
        response.head.keep_alive = false;
    }
    Local { response, body }
}

impl Hooks for Limits {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        let limits = &x.vs.limits;
        let at = self.after_routing;
        if limits.is_empty() || (at && x.policy_limits().is_empty()) {
            return Verdict::Continue;
        }
        let ip = x.peer.ip();
        let source = stick::source_key(ip);
        let key = |l: &Limit| key_of(l, req, &source);
        let found = if at {
            admission::request(
                x.policy_limits().iter().filter_map(|i| limits.get(*i)),
                ip,
                key,
                &mut self.leases,
            )
        } else {
            admission::request(
                limits.iter().filter(|l| !l.per_policy),
                ip,
                key,
                &mut self.leases,
            )
        };
        let Some((l, reason)) = found else {
            return Verdict::Continue;
        };
        let local = refusal(l, reason);
        if let Action::Tarpit(ms) = l.action {
            self.tarpit = Some((ms, local));
            return Verdict::Continue;
        }
        Verdict::Respond(local)
    }

    fn waits(&self) -> bool {
        self.tarpit.is_some()
    }

    async fn on_request_wait(&mut self, _x: &mut Exchange<'_>, _req: &mut Request) -> Verdict {
        match self.tarpit.take() {
            Some((ms, local)) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Verdict::Respond(local)
            }
            None => Verdict::Continue,
        }
    }
}
