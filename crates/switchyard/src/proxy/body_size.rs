//! A policy's `max_body`: the longest request body the requests it
//! decides may send (nginx's `client_max_body_size`, ingress-nginx's
//! `proxy-body-size`). A declared length over it is answered 413 before
//! any member is asked; a chunked (or HTTP/2, HTTP/3) body is counted as
//! it streams and stopped with 413 once it passes the limit (the member's
//! upload is cut, as when the WAF refuses a body).

use super::exchange::Exchange;
use super::hooks::{Hooks, Local, Verdict};
use crate::http::message::{Framing, Request};
use crate::http::responses;

#[derive(Default)]
pub struct BodySize {
    /// The limit of this request (its deciding policy's), and the bytes
    /// seen so far.
    max: Option<u64>,
    seen: u64,
}

fn too_large(max: u64) -> Verdict {
    let (mut response, body) = responses::local_error(
        413,
        &format!("the request body is longer than the {max} bytes this resource takes"),
    );
    // The rest of the body is not read: the connection cannot go on.
    response.head.fields.set(b"connection", b"close");
    response.head.keep_alive = false;
    Verdict::Respond(Local { response, body })
}

impl Hooks for BodySize {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        self.max = x.max_body();
        match (self.max, req.head.framing) {
            (Some(max), Framing::Length(n)) if n > max => too_large(max),
            _ => Verdict::Continue,
        }
    }

    fn on_request_body(&mut self, _x: &mut Exchange<'_>, data: &[u8]) -> Verdict {
        let Some(max) = self.max else {
            return Verdict::Continue;
        };
        self.seen += data.len() as u64;
        if self.seen > max {
            return too_large(max);
        }
        Verdict::Continue
    }

    fn wants_request_body(&self) -> bool {
        self.max.is_some()
    }
}
