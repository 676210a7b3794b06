//! The client side of an exchange on an HTTP/2 stream: the request body
//! from the stream's DATA frames, the response as HEADERS, DATA and
//! trailers at the pace of the client's window.
//!
//! Runs on the worker that owns the client connection.

use std::future::poll_fn;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};

use super::exchange::{ClientSide, Exchange, Failure};
use super::hooks::Local;
use super::member::{pump_h2, H2Sink};
use super::upstream::UpConn;
use crate::config::snapshot::VServer;
use crate::http::body::{BodyError, Sink};
use crate::http::h2conv;
use crate::http::message::{Request, Response};
use crate::stats::{self, status_class};

pub struct H2Client<'a> {
    respond: &'a mut SendResponse<Bytes>,
    body: Option<RecvStream>,
}

impl<'a> H2Client<'a> {
    pub fn new(respond: &'a mut SendResponse<Bytes>, body: RecvStream) -> H2Client<'a> {
        H2Client {
            respond,
            body: Some(body),
        }
    }
}

/// Roughly what a head costs on the wire, for the byte counters.
fn head_size(resp: &Response) -> u64 {
    resp.head
        .fields
        .iter()
        .map(|(n, v)| (n.len() + v.len() + 4) as u64)
        .sum::<u64>()
        + 12
}

/// Sends a response the proxy answers itself on the stream, and counts it.
pub fn send_local(respond: &mut SendResponse<Bytes>, vs: &VServer, local: &Local) {
    let Some(head) = h2conv::response_to_h2(&local.response) else {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return;
    };
    let vc = vs.counters.local();
    stats::inc(&vc.local_responses);
    stats::inc(&vc.responses[status_class(local.response.status)]);
    stats::add(
        &vc.bytes_out,
        head_size(&local.response) + local.body.len() as u64,
    );
    match respond.send_response(head, local.body.is_empty()) {
        Ok(mut s) if !local.body.is_empty() => {
            let _ = s.send_data(local.body.clone(), true);
        }
        _ => {}
    }
}

impl ClientSide for H2Client<'_> {
    type Out<'b>
        = H2Sink
    where
        Self: 'b;

    async fn request_body<S: Sink>(
        &mut self,
        _req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError> {
        match self.body.take() {
            Some(mut b) => pump_h2(&mut b, sink).await,
            None => Ok(0),
        }
    }

    fn take_h2_body(&mut self) -> Option<RecvStream> {
        self.body.take()
    }

    async fn send_continue(&mut self, _req: &Request) -> bool {
        true
    }

    /// Interim responses are not relayed over HTTP/2.
    async fn send_interim(&mut self, _req: &Request, _resp: &Response) -> bool {
        true
    }

    async fn start_response(
        &mut self,
        _x: &Exchange<'_>,
        _req: &Request,
        resp: &Response,
    ) -> Option<(Self::Out<'_>, u64)> {
        let head = h2conv::response_to_h2(resp)?;
        let end = resp.head.framing == crate::http::message::Framing::None;
        let sink = match self.respond.send_response(head, end) {
            Ok(s) if !end => H2Sink::new(s),
            Ok(_) => H2Sink::ended(),
            Err(_) => H2Sink::gone(),
        };
        Some((sink, head_size(resp)))
    }

    async fn tunnel(
        &mut self,
        _x: &Exchange<'_>,
        _resp: &Response,
        _up: &mut UpConn,
    ) -> Result<(), Failure> {
        Err(Failure::new(
            super::exchange::Origin::Member,
            502,
            "the server switched protocols unasked",
        ))
    }

    async fn answer(&mut self, x: &Exchange<'_>, _req: &Request, local: Local) {
        send_local(self.respond, x.vs, &local);
    }

    async fn fail(&mut self, x: &Exchange<'_>, _req: &Request, f: Failure) {
        if let Some(local) = f.into_answer() {
            send_local(self.respond, x.vs, &local);
        }
    }

    async fn cancelled(&mut self) {
        let _ = poll_fn(|cx| self.respond.poll_reset(cx)).await;
    }
}
