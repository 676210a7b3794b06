//! A request body that flows on its own, apart from the exchange that
//! writes the response (`ClientSide::take_body_stream`): an HTTP/2 or
//! HTTP/3 client's, to an h2 member while its response comes back
//! (bidirectional streaming, gRPC).

use super::client_h2_stream::BodyStream;
use super::client_h3_body::H3Body;
use crate::http::body::{BodyError, Sink};

/// A request body that flows on its own (`ClientSide::take_body_stream`).
pub enum ClientBody {
    H2(BodyStream),
    /// Boxed: an HTTP/3 stream's receiving half is over 200 bytes, and
    /// only a body streamed to an h2 member comes this way.
    H3(Box<H3Body>),
}

impl ClientBody {
    /// Moves the body (data, then trailers) into `sink`; payload bytes.
    pub async fn pump<S: Sink>(&mut self, sink: &mut S) -> Result<u64, BodyError> {
        match self {
            ClientBody::H2(b) => b.pump(sink).await,
            ClientBody::H3(b) => b.pump(sink).await,
        }
    }
}
