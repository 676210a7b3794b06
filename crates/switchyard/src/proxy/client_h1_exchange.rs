//! The client side of an exchange on an HTTP/1.x connection: the request
//! body read from the connection, the response written to it (head and
//! first body bytes in one write), and what the connection can do next.
//!
//! Runs on the worker that owns the connection.

use std::time::Duration;

use super::conn::send2;
use super::exchange::{ClientSide, Exchange, Failure};
use super::hooks::Local;
use super::idle::{IdleWatch, SendTimed};
use super::tunnel;
use super::tunnel::MemberEnd;
use super::Client;
use crate::http::body::{self, BodyError, BodyPace, Discard, HoldForClose, Out, Pacer, Sink};
use crate::http::message::{Framing, Request, Response};
use crate::http::responses;
use crate::http::write_h1::{self, ClientFraming};
use crate::stats::{self, status_class};

/// How much of the request body has been read from the connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BodyState {
    Unread,
    Partial,
    Done,
}

pub struct H1Client<'c> {
    c: &'c mut Client,
    stage: Vec<u8>,
    body: BodyState,
    continue_sent: bool,
    /// How the request body must keep coming (`client_body`,
    /// `[vserver.request_body]`).
    body_pace: BodyPace,
    tunnel_idle: Duration,
    /// The worker's coarse deadlines (`client_send` on writes).
    watch: &'c IdleWatch,
    /// The connection must close after this exchange.
    pub close: bool,
}

/// A small request body is read and dropped before an early answer so the
/// connection stays usable; a larger one closes it.
const DRAIN_MAX: u64 = 64 * 1024;

/// After an early answer that closes the connection, what is still read
/// and dropped of a body the client keeps sending, at most: closing with
/// unread bytes makes the kernel send a reset, which can destroy the answer
/// before the client reads it (nginx's `lingering_close`, HAProxy's
/// lingering drain do the same).
const LINGER_BYTES: usize = 1024 * 1024;
const LINGER: Duration = Duration::from_secs(2);

/// What became of the rest of a request body before an early answer.
enum Rest {
    /// Read (or there was none): the connection can carry the next request.
    Read,
    /// Malformed, or it did not arrive in time.
    Invalid,
    /// Too large to read for nothing, or partly read already.
    Left,
}

impl<'c> H1Client<'c> {
    pub fn new(c: &'c mut Client, x: &Exchange<'_>, watch: &'c IdleWatch) -> H1Client<'c> {
        H1Client {
            c,
            stage: Vec::new(),
            body: BodyState::Unread,
            continue_sent: false,
            body_pace: x.vs.body_pace(x.st.client_body_ms),
            tunnel_idle: Duration::from_millis(x.st.tunnel_idle_ms),
            watch,
            close: false,
        }
    }

    /// Reads and drops the request body. False when it was invalid or did
    /// not arrive in time.
    async fn discard(&mut self, framing: Framing) -> bool {
        if framing == Framing::None || self.body == BodyState::Done {
            return true;
        }
        self.body = BodyState::Partial;
        let ok = body::transfer(
            &mut self.c.stream,
            &mut self.c.buf,
            framing,
            &mut Discard,
            &mut Pacer::new(self.body_pace),
        )
        .await
        .is_ok();
        if ok {
            self.body = BodyState::Done;
        }
        ok
    }

    /// Reads and drops what is left of the request body when it is small.
    async fn drop_rest(&mut self, framing: Framing) -> Rest {
        match (self.body, framing) {
            (BodyState::Done, _) | (BodyState::Unread, Framing::None) => Rest::Read,
            (BodyState::Unread, Framing::Length(n)) if n <= DRAIN_MAX => {
                if self.discard(framing).await {
                    Rest::Read
                } else {
                    Rest::Invalid
                }
            }
            _ => Rest::Left,
        }
    }

    /// The answer went out and the connection closes: when the client may
    /// still be sending the body, sends the FIN, then reads and drops what
    /// it still sends, bounded (`LINGER`, `LINGER_BYTES`), so that closing
    /// does not reset the connection under the answer.
    async fn linger_if_unread(&mut self, framing: Framing) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        if self.body == BodyState::Done || framing == Framing::None {
            return;
        }
        let deadline = crate::clock::now_ms() + LINGER.as_millis() as u64;
        let watch = self.watch;
        let stream = &mut self.c.stream;
        let _ = watch
            .within(deadline, async {
                if stream.shutdown().await.is_err() {
                    return;
                }
                // On the heap, and only here: an array would grow every
                // request's future by its size.
                let mut scratch = vec![0u8; 16 * 1024];
                let mut read = 0;
                while read < LINGER_BYTES {
                    match stream.read(&mut scratch).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => read += n,
                    }
                }
            })
            .await;
    }

    /// Writes a response the proxy answers itself and counts it.
    async fn write_local(&mut self, x: &Exchange<'_>, req: &Request, l: &Local, close: bool) {
        // Small bodies ride behind the head in one buffer; large ones (a
        // cache hit) go beside it in one vectored write, uncopied.
        let inline = l.body.len() <= INLINE_MAX;
        let mut out = SPARE_OUT.with(|s| s.take());
        out.reserve(256 + if inline { l.body.len() } else { 0 });
        let cf = ClientFraming {
            close,
            keep_alive_10: req.head.minor == 0 && !close,
            ..Default::default()
        };
        write_h1::response(&mut out, &l.response, &cf);
        if inline {
            out.extend_from_slice(&l.body);
        }
        let vc = x.vs.counters.local();
        stats::inc(&vc.local_responses);
        stats::inc(&vc.responses[status_class(l.response.status)]);
        let body: &[u8] = if inline { &[] } else { &l.body };
        stats::add(&vc.bytes_out, (out.len() + body.len()) as u64);
        self.close |= close;
        let mut w = SendTimed::new(&mut self.c.stream, self.watch, x.st.client_send_ms);
        if close {
            w.hold_for_close();
        }
        if let Err(e) = send2(&mut w, &out, body).await {
            if e.kind() == std::io::ErrorKind::TimedOut {
                stats::inc(&vc.send_timeouts);
            }
            self.close = true;
        }
        give_back(out);
    }
}

impl Drop for H1Client<'_> {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self.stage));
    }
}

/// Keeps a write buffer for this thread's next response (one per thread:
/// at most the staging a streamed body fills, about 128 KiB).
fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() != 0 && buf.capacity() <= SPARE_MAX {
        buf.clear();
        SPARE_OUT.with(|s| s.set(buf));
    }
}

/// Local answers with a body up to this size are written in one buffer.
const INLINE_MAX: usize = 4096;
/// The largest write buffer kept for the next response.
const SPARE_MAX: usize = 128 * 1024;

thread_local! {
    /// The buffer the last response was written from: a response
    /// allocates none of its own (most responses on a worker are written
    /// one after another; one that finds it taken allocates).
    static SPARE_OUT: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl ClientSide for H1Client<'_> {
    type Out<'a>
        = Out<'a, SendTimed<'a>>
    where
        Self: 'a;

    async fn request_body<S: Sink>(
        &mut self,
        req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError> {
        if req.head.framing == Framing::None {
            self.body = BodyState::Done;
            return Ok(0);
        }
        self.body = BodyState::Partial;
        let n = body::transfer(
            &mut self.c.stream,
            &mut self.c.buf,
            req.head.framing,
            sink,
            &mut Pacer::new(self.body_pace),
        )
        .await?;
        self.body = BodyState::Done;
        Ok(n)
    }

    async fn send_continue(&mut self, _req: &Request) -> bool {
        if self.continue_sent {
            return true;
        }
        // We answer the expectation ourselves (as nginx does) once a member
        // is ready to take the body.
        self.continue_sent = true;
        self.c.send(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_ok()
    }

    async fn send_interim(&mut self, req: &Request, resp: &Response) -> bool {
        if req.head.minor == 0 || (resp.status == 100 && self.continue_sent) {
            return true;
        }
        let mut out = Vec::with_capacity(128);
        write_h1::interim(&mut out, resp);
        self.c.send(&out).await.is_ok()
    }

    async fn start_response(
        &mut self,
        x: &Exchange<'_>,
        req: &Request,
        resp: &Response,
    ) -> Option<(Self::Out<'_>, u64)> {
        let client_11 = req.head.minor == 1;
        let reframe = matches!(resp.head.framing, Framing::Chunked | Framing::Close);
        let chunked = reframe && client_11;
        let close = !req.head.keep_alive || (reframe && !client_11) || x.timers.is_draining();
        self.close |= close;
        if self.stage.capacity() == 0 {
            self.stage = SPARE_OUT.with(|s| s.take());
        }
        self.stage.clear();
        // Room for the head and a small body: one allocation, not a
        // doubling per field (none when the thread's spare has it).
        self.stage.reserve(2048);
        let cf = ClientFraming {
            chunked,
            close,
            keep_alive_10: !client_11 && !close,
            upgrade: false,
        };
        write_h1::response(&mut self.stage, resp, &cf);
        let head_len = self.stage.len() as u64;
        Some((
            Out::new(
                SendTimed::new(&mut self.c.stream, self.watch, x.st.client_send_ms),
                &mut self.stage,
                chunked,
            )
            .closing(close),
            head_len,
        ))
    }

    async fn tunnel(
        &mut self,
        x: &Exchange<'_>,
        resp: &Response,
        mut up: MemberEnd<'_>,
    ) -> Result<(), Failure> {
        self.close = true;
        let mut head = Vec::with_capacity(256);
        let cf = ClientFraming {
            upgrade: true,
            ..Default::default()
        };
        write_h1::response(&mut head, resp, &cf);
        let head_len = head.len() as u64;
        let r = tunnel::run(
            &mut self.c.stream,
            &mut self.c.buf,
            &mut up.io,
            up.buf,
            head,
            self.tunnel_idle,
        )
        .await;
        let vc = x.vs.counters.local();
        stats::add(&vc.bytes_out, head_len + r.to_client);
        stats::add(&vc.bytes_in, r.to_server);
        Ok(())
    }

    async fn answer(&mut self, x: &Exchange<'_>, req: &Request, local: Local) {
        // An answer that is not keep-alive (a limit's "close", the
        // WAF's drop or its 413 for a body it will not read) ends the
        // connection, and its body is not read first.
        let mut close =
            !req.head.keep_alive || x.timers.is_draining() || !local.response.head.keep_alive;
        if !close {
            match self.drop_rest(req.head.framing).await {
                Rest::Read => {}
                Rest::Invalid => {
                    let (response, body) = responses::local_error(400, "invalid request body");
                    self.write_local(x, req, &Local { response, body }, true)
                        .await;
                    return;
                }
                Rest::Left => close = true,
            }
        }
        self.write_local(x, req, &local, close).await;
        if close {
            self.linger_if_unread(req.head.framing).await;
        }
    }

    async fn fail(&mut self, x: &Exchange<'_>, req: &Request, f: Failure) {
        // Whatever was staged for the failed response never leaves.
        self.stage.clear();
        let mut close = f.close || !req.head.keep_alive;
        let Some(local) = f.into_answer() else {
            self.close = true;
            return;
        };
        if !close {
            close = !matches!(self.drop_rest(req.head.framing).await, Rest::Read);
        }
        self.write_local(x, req, &local, close).await;
        if close {
            self.linger_if_unread(req.head.framing).await;
        }
    }

    async fn cancelled(&mut self) {
        std::future::pending::<()>().await
    }
}
