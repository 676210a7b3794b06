//! The request path normalized once, before any rule reads it
//! (`http::normalize`): the first stage, so per-source limits, policies,
//! the WAF, the cache key and the access log all see one spelling of the
//! resource, whatever the client protocol. A path the vserver refuses
//! (an encoded slash, `%00`, a malformed escape) is answered 400 here and
//! counted as a bad request.
//!
//! The verified client certificate's field (`client_subject_header`) is
//! settled here too: a client's own copy is removed and the handshake's
//! subject put in its place, so a policy, a script or the WAF that reads
//! the field reads what the handshake proved, never what the client wrote.

use super::exchange::Exchange;
use super::hooks::{Hooks, Local, Verdict};
use crate::http::message::{Received, Request};
use crate::http::normalize;
use crate::http::responses;
use crate::stats;

pub struct Normalize;

impl Hooks for Normalize {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        if let Some(name) =
            x.vs.tls
                .as_ref()
                .and_then(|t| t.client_subject_header.as_deref())
        {
            let f = &mut req.head.fields;
            f.remove(name.as_bytes());
            if let Some(subject) = x.client_subject {
                f.append(name.as_bytes(), subject.as_bytes());
            }
        }
        let rules = &x.vs.normalize;
        match normalize::target(&req.target, rules) {
            Ok(None) => Verdict::Continue,
            Ok(Some(normal)) => {
                let received = std::mem::replace(&mut req.target, normal);
                req.received = Some(Box::new(Received {
                    target: received,
                    forward: rules.forward_original,
                }));
                Verdict::Continue
            }
            Err(why) => {
                stats::inc(&x.vs.counters.local().bad_requests);
                let (response, body) = responses::local_error(400, why.reason());
                Verdict::Respond(Local { response, body })
            }
        }
    }
}

/// A policy's `rewrite` (the Gateway API's URLRewrite, ingress-nginx's
/// rewrite-target): the path replaced whole, or the policy's prefix of it
/// by segments (`/old/x` with `/old` to `/new` is `/new/x`, to `/` is
/// `/x`), the query kept; the Host replaced. The configuration checked
/// that the new parts are normalized paths and a host name, so the
/// target stays in the one spelling the rules read. A path that does not
/// start with the prefix (a policy whose matcher did not ask for it) is
/// left as it is.
pub fn apply_rewrite(
    req: &mut Request,
    r: &crate::config::snapshot::Rewrite,
    rules: &crate::http::normalize::Rules,
) {
    if let Some(new_path) = &r.path {
        let path = req.path_only();
        let path: Option<Vec<u8>> = match (&r.path_regex, &r.path_prefix) {
            (Some(re), _) => std::str::from_utf8(path)
                .ok()
                .filter(|p| re.is_match(p))
                .map(|p| re.replacen(p, 1, new_path.as_str()).into_owned())
                .and_then(|p| normalized(p, rules))
                .map(String::into_bytes),
            (None, None) => Some(new_path.as_bytes().to_vec()),
            // By segments: `/old` covers `/old` and `/old/...`, not `/older`.
            (None, Some(prefix)) => path
                .strip_prefix(prefix.trim_end_matches('/').as_bytes())
                .filter(|rest| rest.is_empty() || rest[0] == b'/')
                .map(|rest| {
                    let base = new_path.trim_end_matches('/');
                    match (rest.is_empty(), base.is_empty()) {
                        (false, _) => [base.as_bytes(), rest].concat(),
                        (true, true) => b"/".to_vec(),
                        (true, false) => new_path.as_bytes().to_vec(),
                    }
                }),
        };
        if let Some(mut target) = path {
            if let Some(q) = req.query() {
                target.push(b'?');
                target.extend_from_slice(q);
            }
            rewrite(req, bytes::Bytes::from(target));
        }
    }
    if let Some(h) = &r.host {
        req.host = Some(bytes::Bytes::copy_from_slice(h.as_bytes()));
    }
}

/// A regex rewrite's result in the one spelling the rules read (its
/// captures may leave an empty segment or a dot segment); None when the
/// rules refuse it (the request then goes as it came).
fn normalized(path: String, rules: &crate::http::normalize::Rules) -> Option<String> {
    match crate::http::normalize::target(path.as_bytes(), rules) {
        Ok(None) => Some(path),
        Ok(Some(p)) => String::from_utf8(p.to_vec()).ok(),
        Err(_) => None,
    }
}

/// A target the vserver's script wrote (already normalized by the same
/// rules, `script::txn`): the member gets it, and the access log's
/// `$request_uri_raw` keeps what the client sent. Here, beside the
/// normalization, since no other code rewrites the target.
pub fn rewrite(req: &mut Request, target: bytes::Bytes) {
    let old = std::mem::replace(&mut req.target, target);
    match &mut req.received {
        Some(r) => r.forward = false,
        None => {
            req.received = Some(Box::new(Received {
                target: old,
                forward: false,
            }))
        }
    }
}
