//! A request body read whole before a member is picked (a stage asked for
//! it: `Hooks::request_body_buffer`), then replayed to the member, and to
//! another member when the first fails: a buffered body makes every
//! request retryable.

use bytes::Bytes;

use super::exchange::{ClientSide, Exchange, Failure, Local};
use super::tunnel::MemberEnd;
use crate::http::body::{BodyError, Sink};
use crate::http::message::{Fields, Request, Response};

/// The `ClientSide` methods of a wrapper around `self.client` that only
/// changes how the request body goes (`Replay` here, `mirroring::Tee`):
/// the response side is the client's own.
macro_rules! forward_to_client {
    () => {
        async fn send_interim(&mut self, req: &Request, resp: &Response) -> bool {
            self.client.send_interim(req, resp).await
        }

        async fn start_response(
            &mut self,
            x: &Exchange<'_>,
            req: &Request,
            resp: &Response,
        ) -> Option<(Self::Out<'_>, u64)> {
            self.client.start_response(x, req, resp).await
        }

        async fn tunnel(
            &mut self,
            x: &Exchange<'_>,
            resp: &Response,
            up: MemberEnd<'_>,
        ) -> Result<(), Failure> {
            self.client.tunnel(x, resp, up).await
        }

        async fn answer(&mut self, x: &Exchange<'_>, req: &Request, local: Local) {
            self.client.answer(x, req, local).await
        }

        async fn fail(&mut self, x: &Exchange<'_>, req: &Request, f: Failure) {
            self.client.fail(x, req, f).await
        }

        async fn cancelled(&mut self) {
            self.client.cancelled().await
        }
    };
}
pub(super) use forward_to_client;

/// Keeps the body, refusing it past `limit` bytes.
pub(super) struct Buffer {
    pub(super) body: Vec<u8>,
    pub(super) trailers: Option<Fields>,
    limit: u64,
    pub(super) over: bool,
}

impl Buffer {
    pub(super) fn new(limit: u64) -> Buffer {
        Buffer {
            body: Vec::new(),
            trailers: None,
            limit,
            over: false,
        }
    }
}

impl Sink for Buffer {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if (self.body.len() + bytes.len()) as u64 > self.limit {
            self.over = true;
            return Err(BodyError::Refused);
        }
        self.body.extend_from_slice(bytes);
        Ok(())
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        Ok(())
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        self.trailers = trailers.cloned();
        Ok(())
    }
    fn written(&self) -> bool {
        false
    }
}

/// The client side with its body already read: the body is replayed from
/// memory; everything else is the client's.
pub(super) struct Replay<'c, C> {
    pub(super) client: &'c mut C,
    pub(super) body: Bytes,
    pub(super) trailers: Option<Fields>,
}

impl<C: ClientSide> ClientSide for Replay<'_, C> {
    type Out<'a>
        = C::Out<'a>
    where
        Self: 'a;

    async fn request_body<S: Sink>(
        &mut self,
        _req: &Request,
        sink: &mut S,
    ) -> Result<u64, BodyError> {
        if !self.body.is_empty() {
            sink.data(&self.body).await?;
        }
        sink.end(self.trailers.as_ref()).await?;
        Ok(self.body.len() as u64)
    }

    fn take_body_stream(&mut self) -> Option<super::client_body::ClientBody> {
        None
    }

    /// The client was told to send its body when it was read.
    async fn send_continue(&mut self, _req: &Request) -> bool {
        true
    }

    forward_to_client!();
}
