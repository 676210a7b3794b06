//! What a stream's task holds on its HTTP/2 connection: the stream itself
//! (`StreamRef`, which finishes the stream when the task lets go of it) and
//! its request body as a source of its own (`BodyStream`).

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;

use crate::http::body::{self, BodyError, Sink};
use crate::http::message::Head;
use crate::http2::server::{self, RecvError, Reset};

/// The protocol state of one connection, shared by its driver (`client_h2_conn.rs`)
/// and the tasks serving its streams (one thread: no lock).
pub type Shared = Rc<RefCell<server::Conn>>;

/// One stream of a connection, held by the task that serves it: when the
/// task ends the stream is finished (`server::Conn::finish`).
pub struct StreamRef {
    pub(super) shared: Shared,
    pub(super) id: u32,
}

impl StreamRef {
    pub fn new(shared: Shared, id: u32) -> StreamRef {
        StreamRef { shared, id }
    }

    pub fn reset(&self, c: u32) {
        self.shared.borrow_mut().reset(self.id, c);
    }

    /// Sends a response head, or trailers when `status` is None.
    pub(super) fn head(&self, status: Option<u16>, head: &Head, end: bool) -> Result<(), Reset> {
        let fields = head
            .fields
            .iter()
            .filter(|(n, _)| !head.is_connection_field(n));
        self.shared
            .borrow_mut()
            .send_head(self.id, status, fields, end)
    }
}

impl Drop for StreamRef {
    fn drop(&mut self) {
        self.shared.borrow_mut().finish(self.id);
    }
}

/// A stream's request body, read apart from the exchange so it can flow
/// while the response comes back (bidirectional streaming).
pub struct BodyStream {
    shared: Shared,
    id: u32,
}

impl BodyStream {
    pub fn new(stream: &StreamRef) -> BodyStream {
        BodyStream {
            shared: stream.shared.clone(),
            id: stream.id,
        }
    }

    /// Moves the body (DATA, then trailers) into `sink`; the window is
    /// given back as each piece moves on. Returns payload bytes.
    pub async fn pump<S: Sink>(&mut self, sink: &mut S) -> Result<u64, BodyError> {
        let mut total = 0u64;
        // Output is flushed when the client pauses.
        let read = || poll_fn(|cx| self.shared.borrow_mut().poll_data(self.id, cx));
        while let Some(chunk) = body::flush_if_pending(read(), sink).await? {
            let chunk = chunk.map_err(|e| match e {
                RecvError::Reset(c) => BodyError::Read(std::io::Error::other(format!(
                    "the client reset the stream ({c:#x})"
                ))),
                RecvError::Timeout => BodyError::Timeout,
                RecvError::TooSlow => BodyError::TooSlow,
            })?;
            total += chunk.len() as u64;
            sink.data(&chunk).await?;
        }
        let trailers = self.shared.borrow_mut().take_trailers(self.id);
        sink.end(trailers.as_ref()).await?;
        Ok(total)
    }
}
