//! The client side of an exchange on an HTTP/3 request stream: the request
//! body from the stream's DATA frames (`client_h3_body`), the response as a
//! HEADERS frame, DATA frames and trailers, written through the h3 crate
//! onto the QUIC stream (flow control is QUIC's: a write waits for the
//! client's window). The stream is split in its two halves, so that the
//! body can flow while the response comes back (an h2 member's
//! bidirectional streaming) and a tunnel relays both ways at once.
//!
//! Runs on the worker that owns the QUIC connection.

use bytes::Bytes;
use h3::server::RequestStream;

use super::client_body::ClientBody;
use super::client_h3_body::H3Body;
use super::exchange::{ClientSide, Exchange, Failure, Origin};
use super::hooks::Local;
use super::tunnel;
use super::tunnel::MemberEnd;
use crate::config::snapshot::VServer;
use crate::http::body::{BodyError, Sink};
use crate::http::head::{is_field_value, is_token};
use crate::http::message::{Fields, Framing, Head, Request, Response};
use crate::stats::{self, status_class};

/// A request stream of an HTTP/3 connection on quinn.
pub type H3Stream = RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// The sending half of a request stream.
pub type H3Send = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

pub struct H3Client {
    send: H3Send,
    /// The request body still to read, or the tunnel's receiving half:
    /// None once the exchange took it (`take_body_stream`).
    body: Option<H3Body>,
    /// The request had a body still to read.
    body_pending: bool,
    /// The stream is an extended CONNECT (RFC 9220): a member's 101 opens
    /// the tunnel.
    tunnel: bool,
}

impl H3Client {
    /// `first`: the first DATA of a body that came without a length, read
    /// to learn that a body follows the head at all.
    pub fn new(stream: H3Stream, first: Option<Bytes>, body_pending: bool) -> H3Client {
        let (send, recv) = stream.split();
        H3Client {
            send,
            body: Some(H3Body { recv, first }),
            body_pending,
            tunnel: false,
        }
    }

    /// The client side of an extended CONNECT, whose DATA is the tunnel's.
    pub fn tunnel(stream: H3Stream) -> H3Client {
        let mut c = H3Client::new(stream, None, false);
        c.tunnel = true;
        c
    }
}

fn write_err(e: impl std::fmt::Display) -> BodyError {
    BodyError::Write(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        format!("HTTP/3 stream: {e}"),
    ))
}

/// Sends a head as a HEADERS frame: `:status` and the fields but those
/// HTTP/3 forbids (RFC 9114 4.2: connection-specific fields), encoded
/// from our fields as they are (names lowercased by the encoder: vendor/h3,
/// PATCHED.md). An `http::Response` in between cost about 5,000
/// instructions per response (a `HeaderName` and a `HeaderValue` per
/// field). Err(()) when HTTP/3 cannot carry the head: a status that is
/// not three digits.
///
/// The fields are not checked again here: every way into a head checks
/// them where they enter (httparse for HTTP/1 members, the `h2` crate's
/// types for HTTP/2 members, `r:set_header` for scripts, the config's
/// checks for policies), and HTTP/2 sends them on the same trust. The
/// byte-by-byte check this did was 1,390 user-space instructions per
/// response (callgrind, 1 KB HTTP/3 through oha); debug builds keep it.
async fn send_head<S: h3::quic::SendStream<Bytes>>(
    stream: &mut RequestStream<S, Bytes>,
    status: u16,
    head: &Head,
) -> Result<Result<(), h3::error::StreamError>, ()> {
    if !(100..=999).contains(&status) {
        return Err(());
    }
    debug_assert!(
        head.fields
            .iter()
            .all(|(n, v)| is_token(n) && is_field_value(v)),
        "a head field that was not checked where it entered"
    );
    let sent = |(n, _): &(&[u8], &[u8])| !head.is_connection_field(n);
    Ok(stream
        .send_response_fields(status, head.fields.iter().filter(sent))
        .await)
}

/// Roughly what a head costs on the wire, for the byte counters.
fn head_size(head: &Head) -> u64 {
    head.fields
        .iter()
        .map(|(n, v)| (n.len() + v.len() + 2) as u64)
        .sum::<u64>()
        + 4
}

/// Sends a response the proxy answers itself, and counts it.
pub(super) async fn send_local<S: h3::quic::SendStream<Bytes>>(
    stream: &mut RequestStream<S, Bytes>,
    vs: &VServer,
    local: &Local,
) {
    let vc = vs.counters.local();
    stats::inc(&vc.local_responses);
    stats::inc(&vc.responses[status_class(local.response.status)]);
    stats::add(
        &vc.bytes_out,
        head_size(&local.response.head) + local.body.len() as u64,
    );
    match send_head(stream, local.response.status, &local.response.head).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return,
        Err(()) => {
            stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
            return;
        }
    }
    if !local.body.is_empty() && stream.send_data(local.body.clone()).await.is_err() {
        return;
    }
    let _ = stream.finish().await;
}

/// The response body's way to the client: DATA frames, then trailers or
/// the stream's end.
pub struct H3Sink<'a> {
    stream: &'a mut H3Send,
    /// The head could not be sent: every write fails.
    gone: bool,
    ended: bool,
}

impl H3Sink<'_> {
    /// Whether `bytes` go out as a DATA frame: not when empty or after the
    /// end; an error once the head could not be sent.
    fn sends(&self, bytes: &[u8]) -> Result<bool, BodyError> {
        if self.gone {
            return Err(BodyError::Write(std::io::ErrorKind::BrokenPipe.into()));
        }
        Ok(!bytes.is_empty() && !self.ended)
    }
}

impl Sink for H3Sink<'_> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if !self.sends(bytes)? {
            return Ok(());
        }
        // The frame's header and a copy of the bytes in one buffer, which
        // quinn keeps as it is (vendor/h3 and vendor/h3-quinn, PATCHED.md):
        // one allocation and one copy per DATA frame, where `send_data`
        // cost three and two.
        self.stream
            .send_framed_data(h3::frame_data(bytes))
            .await
            .map_err(write_err)
    }

    /// quinn keeps a DATA frame's payload until the client acknowledges
    /// it.
    fn keeps_owned(&self) -> bool {
        true
    }

    /// A large piece of the member's body, owned: h3 writes the frame's
    /// header (a few bytes) and hands the payload to quinn as it is
    /// (vendor/h3 and vendor/h3-quinn, PATCHED.md), without the copy
    /// `data` makes.
    async fn data_owned(&mut self, bytes: Bytes) -> Result<(), BodyError> {
        if !self.sends(&bytes)? {
            return Ok(());
        }
        self.stream.send_data(bytes).await.map_err(write_err)
    }

    /// quinn sends what the stream holds as the windows and pacing allow.
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
        if let Some(t) = trailers {
            let mut map = http::HeaderMap::new();
            for (n, v) in t.iter() {
                if let (Ok(n), Ok(v)) = (
                    http::HeaderName::from_bytes(n),
                    http::HeaderValue::from_bytes(v),
                ) {
                    map.append(n, v);
                }
            }
            return self.stream.send_trailers(map).await.map_err(write_err);
        }
        self.stream.finish().await.map_err(write_err)
    }

    fn written(&self) -> bool {
        true
    }

    fn abort(&mut self) {
        self.stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
    }
}

impl ClientSide for H3Client {
    type Out<'b>
        = H3Sink<'b>
    where
        Self: 'b;

    async fn request_body<S: Sink>(
        &mut self,
        _req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError> {
        if !std::mem::replace(&mut self.body_pending, false) {
            return Ok(0);
        }
        let Some(body) = self.body.as_mut() else {
            return Ok(0);
        };
        let r = body.pump(sink).await;
        if let Err(BodyError::Framing(_)) = r {
            // Malformed (trailers): a stream error both ways (RFC 9114
            // 4.1.2), not a 400.
            self.send.stop_stream(h3::error::Code::H3_MESSAGE_ERROR);
        }
        r
    }

    /// The body as a stream of its own, so that it flows to an h2 member
    /// while the response comes back (bidirectional streaming, gRPC).
    fn take_body_stream(&mut self) -> Option<ClientBody> {
        if !std::mem::replace(&mut self.body_pending, false) || self.tunnel {
            return None;
        }
        self.body.take().map(|body| ClientBody::H3(Box::new(body)))
    }

    /// HTTP/3 has no Expect handshake to answer: the body comes anyway.
    async fn send_continue(&mut self, _req: &Request) -> bool {
        true
    }

    /// A member's interim (1xx) response, 103 Early Hints above all, goes
    /// on as a HEADERS frame of its own before the final one (RFC 9114
    /// 4.1); 101 never comes here (member_h1.rs).
    async fn send_interim(&mut self, _req: &Request, resp: &Response) -> bool {
        matches!(
            send_head(&mut self.send, resp.status, &resp.head).await,
            Ok(Ok(()))
        )
    }

    async fn start_response(
        &mut self,
        x: &Exchange<'_>,
        _req: &Request,
        resp: &Response,
    ) -> Option<(Self::Out<'_>, u64)> {
        let end = resp.head.framing == Framing::None;
        let gone = match send_head(&mut self.send, resp.status, &resp.head).await {
            Ok(sent) => sent.is_err(),
            Err(()) => {
                crate::log::warn(format_args!(
                    "vserver {}: a response head HTTP/3 cannot carry (an invalid field); the stream is reset",
                    x.vs.name
                ));
                self.send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return None;
            }
        };
        let mut sink = H3Sink {
            stream: &mut self.send,
            gone,
            ended: false,
        };
        if end && !gone {
            let _ = sink.end(None).await;
        }
        Some((sink, head_size(&resp.head)))
    }

    /// The member's 101 to an extended CONNECT (RFC 9220): `:status 200`
    /// without the handshake's own fields, then the stream's DATA and the
    /// member's bytes relayed until both ends close, either resets, or
    /// `tunnel_idle` passes without a byte. Any other request's 101 is
    /// the member's error: HTTP/3 has no upgrade (RFC 9114 4.5), and a
    /// request that asked for one never reaches a member as such.
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
        if !matches!(send_head(&mut self.send, 200, &ok.head).await, Ok(Ok(()))) {
            return Err(Failure::cut(Origin::Client, "the client reset the stream"));
        }
        let Some(body) = self.body.as_mut() else {
            return Err(Failure::cut(Origin::Client, "the tunnel's stream is gone"));
        };
        let recv = &mut body.recv;
        let idle = std::time::Duration::from_millis(x.st.tunnel_idle_ms);
        let t = tunnel::run_h3((&mut self.send, recv), (&mut up.io, up.buf), idle).await;
        let vc = x.vs.counters.local();
        stats::add(&vc.bytes_out, head_size(&ok.head) + t.to_client);
        stats::add(&vc.bytes_in, t.to_server);
        Ok(())
    }

    async fn answer(&mut self, x: &Exchange<'_>, _req: &Request, local: Local) {
        send_local(&mut self.send, x.vs, &local).await;
    }

    async fn fail(&mut self, x: &Exchange<'_>, _req: &Request, f: Failure) {
        if let Some(local) = f.into_answer() {
            send_local(&mut self.send, x.vs, &local).await;
        }
    }

    /// A stream the client stops shows on the next write.
    async fn cancelled(&mut self) {
        std::future::pending::<()>().await
    }
}
