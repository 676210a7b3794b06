//! The client side of an exchange on an HTTP/2 stream: the request body
//! from the stream's DATA frames, the response as HEADERS, DATA and
//! trailers at the pace of the client's window, encoded straight into the
//! connection's output (`http2::server`).
//!
//! Runs on the worker that owns the client connection.

use std::future::poll_fn;

use super::client_body::ClientBody;
use super::client_h2_stream::{BodyStream, Shared, StreamRef};
use super::exchange::{ClientSide, Exchange, Failure};
use super::hooks::Local;
use super::tunnel;
use super::tunnel::MemberEnd;
use crate::config::snapshot::VServer;
use crate::http::body::{BodyError, Sink};
use crate::http::message::{Fields, Framing, Request, Response};
use crate::http2::frame::code;
use crate::http2::server::Reset;
use crate::stats::{self, status_class};

pub struct H2Client<'a> {
    stream: &'a StreamRef,
    body_taken: bool,
    /// The stream is an extended CONNECT (RFC 8441): its DATA is the
    /// tunnel's, never a request body, and a member's 101 opens it.
    tunnel: bool,
}

impl<'a> H2Client<'a> {
    pub fn new(stream: &'a StreamRef) -> H2Client<'a> {
        H2Client {
            stream,
            body_taken: false,
            tunnel: false,
        }
    }

    /// The client side of an extended CONNECT (`h2_message::extended_connect_from_wire`).
    pub fn tunnel(stream: &'a StreamRef) -> H2Client<'a> {
        H2Client {
            tunnel: true,
            ..H2Client::new(stream)
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

/// Sends a response the proxy answers itself on the stream (a cache hit
/// among them: its body waits for the client's window like any other),
/// and counts it.
pub async fn send_local(stream: &StreamRef, vs: &VServer, local: &Local) {
    let vc = vs.counters.local();
    stats::inc(&vc.local_responses);
    stats::inc(&vc.responses[status_class(local.response.status)]);
    stats::add(
        &vc.bytes_out,
        head_size(&local.response) + local.body.len() as u64,
    );
    let end = local.body.is_empty();
    let sent = stream.head(Some(local.response.status), &local.response.head, end);
    let mut sink = ClientSink::new(stream, sent.is_err(), end);
    // The body waits for the client's window like any other (a cache hit
    // may be larger than it); END_STREAM rides on its last frame.
    if sink.data(&local.body).await.is_ok() {
        let _ = sink.end(None).await;
    }
}

/// The response body's way to the client: DATA frames as the windows
/// allow, then trailers or END_STREAM.
pub struct ClientSink {
    shared: Shared,
    id: u32,
    /// The stream was reset: every write fails.
    gone: bool,
    ended: bool,
}

impl ClientSink {
    /// The body's way out once its head was sent (`gone` when that
    /// failed, `ended` when the head ended the stream).
    fn new(stream: &StreamRef, gone: bool, ended: bool) -> ClientSink {
        ClientSink {
            shared: stream.shared.clone(),
            id: stream.id,
            gone,
            ended,
        }
    }
}

fn reset_err(Reset(c): Reset) -> BodyError {
    BodyError::Write(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        format!("the client reset the stream ({c:#x})"),
    ))
}

impl Sink for ClientSink {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if self.gone {
            return Err(BodyError::Write(std::io::ErrorKind::BrokenPipe.into()));
        }
        let mut rest = bytes;
        while !rest.is_empty() && !self.ended {
            let n = poll_fn(|cx| self.shared.borrow_mut().poll_send(self.id, cx, rest, false))
                .await
                .map_err(reset_err)?;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Frames are in the connection's output already; it goes out at the
    /// end of the worker's turn.
    async fn flush(&mut self) -> Result<(), BodyError> {
        Ok(())
    }

    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        if self.ended {
            return Ok(());
        }
        if self.gone {
            return Err(BodyError::Write(std::io::ErrorKind::BrokenPipe.into()));
        }
        self.ended = true;
        let mut c = self.shared.borrow_mut();
        match trailers {
            Some(t) => c.send_head(self.id, None, t.iter(), true),
            None => c.end_stream(self.id),
        }
        .map_err(reset_err)
    }

    fn written(&self) -> bool {
        true
    }

    fn abort(&mut self) {
        self.shared
            .borrow_mut()
            .reset(self.id, code::INTERNAL_ERROR);
    }
}

impl ClientSide for H2Client<'_> {
    type Out<'b>
        = ClientSink
    where
        Self: 'b;

    async fn request_body<S: Sink>(
        &mut self,
        _req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError> {
        match self.take_body_stream() {
            Some(mut b) => b.pump(sink).await,
            None => Ok(0),
        }
    }

    fn take_body_stream(&mut self) -> Option<ClientBody> {
        if std::mem::replace(&mut self.body_taken, true) || self.tunnel {
            return None;
        }
        Some(ClientBody::H2(BodyStream::new(self.stream)))
    }

    async fn send_continue(&mut self, _req: &Request) -> bool {
        true
    }

    /// A member's interim (1xx) response, 103 Early Hints above all, goes
    /// on as a HEADERS frame of its own that does not end the stream (RFC
    /// 9113 8.1); 101 never comes here (member_h1.rs). Chrome uses early
    /// hints only over HTTP/2 and HTTP/3.
    async fn send_interim(&mut self, _req: &Request, resp: &Response) -> bool {
        self.stream
            .head(Some(resp.status), &resp.head, false)
            .is_ok()
    }

    async fn start_response(
        &mut self,
        _x: &Exchange<'_>,
        _req: &Request,
        resp: &Response,
    ) -> Option<(Self::Out<'_>, u64)> {
        let end = resp.head.framing == Framing::None;
        let sent = self.stream.head(Some(resp.status), &resp.head, end);
        let sink = ClientSink::new(self.stream, sent.is_err(), end);
        Some((sink, head_size(resp)))
    }

    /// The member's 101 to an extended CONNECT: `:status 200` without the
    /// handshake's own fields (RFC 8441 5), then the stream's DATA and the
    /// member's bytes relayed until both ends close, either resets, or
    /// `tunnel_idle` passes without a byte.
    async fn tunnel(
        &mut self,
        x: &Exchange<'_>,
        resp: &Response,
        mut up: MemberEnd<'_>,
    ) -> Result<(), Failure> {
        if !self.tunnel {
            return Err(Failure::unasked_switch());
        }
        let ok = tunnel::connect_ok(resp);
        if self.stream.head(Some(200), &ok.head, false).is_err() {
            return Err(Failure::cut(
                super::exchange::Origin::Client,
                "the client reset the stream",
            ));
        }
        let idle = std::time::Duration::from_millis(x.st.tunnel_idle_ms);
        let t = tunnel::run_h2(self.stream, &mut up.io, up.buf, idle).await;
        let vc = x.vs.counters.local();
        stats::add(&vc.bytes_out, head_size(&ok) + t.to_client);
        stats::add(&vc.bytes_in, t.to_server);
        Ok(())
    }

    async fn answer(&mut self, x: &Exchange<'_>, _req: &Request, local: Local) {
        send_local(self.stream, x.vs, &local).await;
    }

    async fn fail(&mut self, x: &Exchange<'_>, _req: &Request, f: Failure) {
        if let Some(local) = f.into_answer() {
            send_local(self.stream, x.vs, &local).await;
        }
    }

    async fn cancelled(&mut self) {
        let id = self.stream.id;
        let _ = poll_fn(|cx| self.stream.shared.borrow_mut().poll_reset(id, cx)).await;
    }
}
