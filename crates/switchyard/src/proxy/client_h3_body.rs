//! An HTTP/3 request's body, read from the receiving half of its stream:
//! DATA frames, then trailers. Apart from the half that sends the
//! response (`client_h3_exchange`), so that the body can flow to an h2
//! member while the response comes back (bidirectional streaming, gRPC),
//! as an HTTP/2 client's does (`client_h2_stream::BodyStream`).
//!
//! Runs on the worker that owns the QUIC connection.

use bytes::{Buf, Bytes};
use h3::server::RequestStream;

use crate::http::body::{self, BodyError, Sink};
use crate::http::message::Fields;
use crate::http::request_fields::Collector;

/// The receiving half of an HTTP/3 request stream on quinn.
pub type H3Recv = RequestStream<h3_quinn::RecvStream, Bytes>;

/// A request body still to read: the stream's receiving half, and the
/// first DATA if the exchange read it already (to learn that a body
/// follows a head without a length).
pub struct H3Body {
    pub recv: H3Recv,
    pub first: Option<Bytes>,
}

impl H3Body {
    /// Moves the body (DATA, then trailers) into `sink`, flushing it
    /// whenever the client pauses; QUIC's flow control reopens the
    /// client's window as each piece is read. Returns payload bytes.
    pub async fn pump<S: Sink>(&mut self, sink: &mut S) -> Result<u64, BodyError> {
        let mut total = 0u64;
        if let Some(b) = self.first.take() {
            total += b.len() as u64;
            sink.data(&b).await?;
        }
        loop {
            // What the sink staged goes out while the client is quiet.
            let read = body::flush_if_pending(self.recv.recv_data(), sink).await?;
            let mut chunk = match read {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    return Err(BodyError::Read(std::io::Error::other(format!(
                        "HTTP/3 request body: {e}"
                    ))))
                }
            };
            while chunk.has_remaining() {
                let piece = chunk.chunk();
                let n = piece.len();
                total += n as u64;
                sink.data(piece).await?;
                chunk.advance(n);
            }
        }
        let trailers = self.trailers().await?;
        sink.end(trailers.as_ref()).await?;
        Ok(total)
    }

    /// The request's trailers, if it has any, once its DATA is read: each
    /// field through the same checks as HTTP/2's trailers (`Collector`:
    /// no pseudo-field, no connection-specific field), then on to the
    /// member as HTTP/2's go (an HTTP/1.1 member gets them after a chunked
    /// body; a body sent with a length has no room for them). Malformed
    /// ones end the body with an error and make the client stop sending
    /// (RFC 9114 4.1.2: H3_MESSAGE_ERROR; the exchange resets the rest).
    async fn trailers(&mut self) -> Result<Option<Fields>, BodyError> {
        let map = match self.recv.recv_trailers().await {
            Ok(None) => return Ok(None),
            Ok(Some(map)) => map,
            Err(e) => {
                return Err(BodyError::Read(std::io::Error::other(format!(
                    "HTTP/3 request trailers: {e}"
                ))))
            }
        };
        let mut c = Collector::new(true);
        for (n, v) in map.iter() {
            c.field(n.as_str().as_bytes(), v.as_bytes());
        }
        let (head, malformed) = c.finish(false, false);
        if let Some(why) = malformed {
            self.recv.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
            return Err(BodyError::Framing(why));
        }
        Ok(Some(head.fields))
    }
}
