//! A request body kept as it goes to an HTTP/1.1 member, so the request can
//! go again when the connection fails before a byte of the answer: most
//! often a pooled connection the member closed at its keep-alive timeout
//! just as we reused it (Node's 5 s against our 20 s idle timeout). Without
//! it an idempotent request with a body (a PUT) met that race as a 502; a
//! body-less one was already sent again.
//!
//! Kept only for idempotent methods (RFC 9110 9.2.2: a request whose
//! answer never came may have been applied, so only those may go twice)
//! and up to `LIMIT` bytes: Pingora keeps 64 KB for the same purpose;
//! nginx buffers whole bodies and resends every method but POST, LOCK and
//! PATCH. The copy is of what the stages let through, so a resend skips
//! them: they saw the body once, and counting it twice would make a body
//! limit refuse half its size.

use bytes::Bytes;

use crate::http::body::{BodyError, Sink};
use crate::http::message::{Fields, Framing, Request};

/// The longest body kept for a resend.
pub(super) const LIMIT: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(super) enum Resend {
    /// Nothing kept: no body, a method that must not go twice, no retry
    /// left, or longer than `LIMIT`.
    #[default]
    Off,
    /// Being copied as it goes out.
    Keeping(Vec<u8>),
    /// The whole body went out once and may go again.
    Whole {
        body: Bytes,
        trailers: Option<Fields>,
    },
}

impl Resend {
    /// What to keep of a request's body on its way to a member: a copy
    /// when the request may go again (`may_retry`: an attempt is left) and
    /// the body fits.
    pub(super) fn for_request(req: &Request, may_retry: bool) -> Resend {
        if !req.method.idempotent() || !may_retry {
            return Resend::Off;
        }
        match req.head.framing {
            Framing::Length(n) if n > LIMIT as u64 => Resend::Off,
            Framing::Length(n) => Resend::Keeping(Vec::with_capacity(n as usize)),
            Framing::Chunked => Resend::Keeping(Vec::new()),
            Framing::None | Framing::Close => Resend::Off,
        }
    }

    /// The body, when it went out whole and may go again.
    pub(super) fn whole(&self) -> Option<(Bytes, Option<Fields>)> {
        match self {
            Resend::Whole { body, trailers } => Some((body.clone(), trailers.clone())),
            _ => None,
        }
    }

    pub(super) fn is_whole(&self) -> bool {
        matches!(self, Resend::Whole { .. })
    }
}

/// Copies what goes into `inner` while the copy is wanted and fits.
pub(super) struct Keep<'r, S> {
    pub(super) inner: S,
    pub(super) resend: &'r mut Resend,
}

impl<S: Sink> Sink for Keep<'_, S> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if let Resend::Keeping(copy) = self.resend {
            if copy.len() + bytes.len() > LIMIT {
                *self.resend = Resend::Off;
            } else {
                copy.extend_from_slice(bytes);
            }
        }
        self.inner.data(bytes).await
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        self.inner.flush().await
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        // Whole before the last write: a member that closed the connection
        // fails that write, and the body may still go again.
        if let Resend::Keeping(copy) = self.resend {
            *self.resend = Resend::Whole {
                body: Bytes::from(std::mem::take(copy)),
                trailers: trailers.cloned(),
            };
        }
        self.inner.end(trailers).await
    }
    fn written(&self) -> bool {
        self.inner.written()
    }
    fn abort(&mut self) {
        self.inner.abort()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is kept of a PUT with `framing` (a Content-Length or chunked).
    fn put(framing: &str) -> Resend {
        let raw = format!("PUT / HTTP/1.1\r\nHost: h\r\n{framing}\r\n\r\n");
        let req = crate::http::head::parse_request(Bytes::from(raw), 100).expect("a request");
        Resend::for_request(&req, true)
    }

    fn run(resend: &mut Resend, pieces: &[&[u8]], end: bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut k = Keep {
                inner: crate::http::body::Discard,
                resend,
            };
            for p in pieces {
                k.data(p).await.expect("data");
            }
            if end {
                k.end(None).await.expect("end");
            }
        });
    }

    #[test]
    fn a_body_that_fits_is_kept_whole_at_its_end() {
        let mut r = put("Content-Length: 6");
        run(&mut r, &[b"abc", b"def"], false);
        assert!(!r.is_whole(), "not whole before its end");
        run(&mut r, &[], true);
        assert_eq!(
            r.whole().map(|(b, _)| b),
            Some(Bytes::from_static(b"abcdef"))
        );
    }

    #[test]
    fn a_body_past_the_limit_is_not_kept() {
        assert!(matches!(
            put(&format!("Content-Length: {}", LIMIT + 1)),
            Resend::Off
        ));
        let mut r = put("Transfer-Encoding: chunked");
        let piece = vec![b'x'; LIMIT / 2 + 1];
        run(&mut r, &[&piece, &piece], true);
        assert!(!r.is_whole());
        let mut r = put("Transfer-Encoding: chunked");
        let piece = vec![b'x'; LIMIT / 2];
        run(&mut r, &[&piece, &piece], true);
        assert_eq!(r.whole().map(|(b, _)| b.len()), Some(LIMIT));
    }
}
