//! Streaming message bodies from one connection to the other.
//!
//! Bodies never sit whole in memory: bytes move through the reader's buffer
//! and a bounded staging buffer. Small writes (a head, chunk frames, a small
//! body) are gathered in the staging buffer and leave in one write when the
//! transfer must wait for input or finishes. Chunked input is decoded
//! strictly and re-encoded, so what leaves is always well framed.

use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::message::{Fields, Framing};

/// Staging is flushed once it holds this much.
const STAGE_MAX: usize = 64 * 1024;
const READ_CHUNK: usize = 32 * 1024;
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

#[derive(Debug)]
pub enum BodyError {
    /// Reading from the sender failed.
    Read(io::Error),
    /// The sender closed before the body was complete.
    Truncated,
    /// The sender went quiet for longer than the timeout.
    Timeout,
    /// Writing to the receiver failed.
    Write(io::Error),
    /// The body's framing is invalid (bad chunk size, missing CRLF...).
    Framing(&'static str),
    /// A body hook stopped the transfer (it answers the client itself).
    Refused,
}

/// Reads more bytes into `buf`; Ok(0) on EOF.
pub async fn read_more<R: AsyncRead + Unpin>(
    src: &mut R,
    buf: &mut BytesMut,
    timeout: Duration,
) -> Result<usize, BodyError> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(READ_CHUNK);
    }
    match tokio::time::timeout(timeout, src.read_buf(buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(BodyError::Read(e)),
        Err(_) => Err(BodyError::Timeout),
    }
}

/// Reads more bytes, flushing `out` first only if none are ready: output
/// is pushed when the sender pauses, not after every read (a compressor
/// ends a block per flush; the staging buffer writes per flush).
pub async fn read_or_flush<R, S>(
    src: &mut R,
    buf: &mut BytesMut,
    out: &mut S,
    timeout: Duration,
) -> Result<usize, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    flush_if_pending(read_more(src, buf, timeout), out).await?
}

/// Awaits `fut`; if it is not ready at once, flushes `out` while it waits.
pub async fn flush_if_pending<F: std::future::Future, S: Sink>(
    fut: F,
    out: &mut S,
) -> Result<F::Output, BodyError> {
    let mut fut = std::pin::pin!(fut);
    let ready = std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await;
    if let std::task::Poll::Ready(v) = ready {
        return Ok(v);
    }
    out.flush().await?;
    Ok(fut.await)
}

/// Where a de-framed body goes: the framing of the receiving side (HTTP/1
/// raw or chunked, HTTP/2 DATA frames), or a body filter in front of it.
/// Statically dispatched; one per transfer.
#[allow(async_fn_in_trait)] // single-threaded workers: no Send bound wanted
pub trait Sink {
    /// Takes the next piece of the body's payload.
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError>;
    /// The source is about to wait for input: push out what is staged so
    /// the receiver is not kept waiting behind our buffer.
    async fn flush(&mut self) -> Result<(), BodyError>;
    /// The body is complete, with its trailer fields if it had any.
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError>;
    /// Whether anything reached the receiver yet: until then an error can
    /// still be answered cleanly instead of cutting the connection.
    fn written(&self) -> bool;
    /// The body failed after something was written: tell the receiver the
    /// message is cut short, where the protocol can (an HTTP/2 reset).
    fn abort(&mut self) {}
}

impl<S: Sink> Sink for &mut S {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        (**self).data(bytes).await
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        (**self).flush().await
    }
    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        (**self).end(trailers).await
    }
    fn written(&self) -> bool {
        (**self).written()
    }
    fn abort(&mut self) {
        (**self).abort()
    }
}

/// A writer that can keep the last bytes of a connection for its close.
pub trait HoldForClose {
    /// What is written from now on ends the connection's output, and the
    /// connection shuts down right after: a plain TCP socket may keep back
    /// a partial segment so its FIN leaves in the same segment (one
    /// segment fewer per closing response). Nothing, by default.
    fn hold_for_close(&mut self) {}
}

/// A borrowed writer (a member connection, a test's buffer) sends as it is.
impl<T: ?Sized> HoldForClose for &mut T {}

/// HTTP/1 output: a staging buffer in front of the writer, raw or chunked.
pub struct Out<'a, W> {
    /// The writer (often `&mut` a stream).
    pub dst: W,
    pub stage: &'a mut Vec<u8>,
    /// Re-frame as chunked (a body without a length going to HTTP/1.1).
    pub chunked: bool,
    pub written: bool,
    /// The connection closes after this message (`HoldForClose`).
    closing: bool,
}

impl<'a, W: AsyncWrite + Unpin + HoldForClose> Out<'a, W> {
    pub fn new(dst: W, stage: &'a mut Vec<u8>, chunked: bool) -> Self {
        Out {
            dst,
            stage,
            chunked,
            written: false,
            closing: false,
        }
    }

    /// The connection shuts down once this message is out.
    pub fn closing(mut self, closing: bool) -> Self {
        self.closing = closing;
        self
    }

    pub async fn flush_out(&mut self) -> Result<(), BodyError> {
        if !self.stage.is_empty() {
            self.written = true;
            self.dst
                .write_all(self.stage)
                .await
                .map_err(BodyError::Write)?;
            self.stage.clear();
        }
        if self.written {
            // TLS may still hold the last record (a no-op on TCP).
            self.dst.flush().await.map_err(BodyError::Write)?;
        }
        Ok(())
    }

    async fn emit(&mut self, data: &[u8]) -> Result<(), BodyError> {
        if self.stage.len() + data.len() <= STAGE_MAX {
            self.stage.extend_from_slice(data);
            return Ok(());
        }
        self.flush_out().await?;
        self.written = true;
        self.dst.write_all(data).await.map_err(BodyError::Write)
    }
}

impl<W: AsyncWrite + Unpin + HoldForClose> Sink for Out<'_, W> {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.chunked {
            let mut line = [0u8; 18];
            let n = hex_line(bytes.len() as u64, &mut line);
            self.emit(&line[..n]).await?;
            self.emit(bytes).await?;
            self.emit(b"\r\n").await
        } else {
            self.emit(bytes).await
        }
    }

    async fn flush(&mut self) -> Result<(), BodyError> {
        self.flush_out().await
    }

    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        if self.chunked {
            self.emit(b"0\r\n").await?;
            for (n, v) in trailers.iter().flat_map(|t| t.iter()) {
                self.emit(n).await?;
                self.emit(b": ").await?;
                self.emit(v).await?;
                self.emit(b"\r\n").await?;
            }
            self.emit(b"\r\n").await?;
        }
        if self.closing {
            // Only the writes after the end: a body that pauses midway
            // must not wait behind a held segment.
            self.dst.hold_for_close();
        }
        Ok(())
    }

    fn written(&self) -> bool {
        self.written
    }
}

/// "HEX\r\n" for a chunk of `n` bytes.
fn hex_line(n: u64, out: &mut [u8; 18]) -> usize {
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, o) in out.iter_mut().take(digits).enumerate() {
        let d = ((n >> (4 * (digits - 1 - i))) & 0xf) as u8;
        *o = if d < 10 { b'0' + d } else { b'a' + d - 10 };
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    digits + 2
}

/// Reads and drops a body (a request answered locally).
pub struct Discard;

impl Sink for Discard {
    async fn data(&mut self, _: &[u8]) -> Result<(), BodyError> {
        Ok(())
    }
    async fn flush(&mut self) -> Result<(), BodyError> {
        Ok(())
    }
    async fn end(&mut self, _: Option<&Fields>) -> Result<(), BodyError> {
        Ok(())
    }
    fn written(&self) -> bool {
        false
    }
}

/// `transfer`, then the sink flushed: the whole body delivered. Also says
/// whether anything reached the receiver (`Sink::written`).
pub async fn deliver<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    framing: Framing,
    sink: &mut S,
    timeout: Duration,
) -> (Result<u64, BodyError>, bool)
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let r = match transfer(src, inbuf, framing, sink, timeout).await {
        Ok(n) => sink.flush().await.map(|_| n),
        Err(e) => Err(e),
    };
    (r, sink.written())
}

/// Moves one HTTP/1 body from `src` (whose already-read bytes are in
/// `inbuf`) into `sink`, de-framed, then ends the sink. Returns payload
/// bytes. Leaves bytes after the body in `inbuf` (a pipelined request) and
/// may leave output staged: the caller flushes.
pub async fn transfer<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    framing: Framing,
    out: &mut S,
    timeout: Duration,
) -> Result<u64, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let n = match framing {
        Framing::None => 0,
        Framing::Length(n) => {
            copy_exact(src, inbuf, n, out, timeout).await?;
            n
        }
        Framing::Close => {
            let mut total = 0u64;
            loop {
                if inbuf.is_empty() && read_or_flush(src, inbuf, out, timeout).await? == 0 {
                    break;
                }
                let data = inbuf.split();
                total += data.len() as u64;
                out.data(&data).await?;
            }
            total
        }
        Framing::Chunked => return copy_chunked(src, inbuf, out, timeout).await,
    };
    out.end(None).await?;
    Ok(n)
}

async fn copy_exact<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    mut remaining: u64,
    out: &mut S,
    timeout: Duration,
) -> Result<(), BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    while remaining > 0 {
        if inbuf.is_empty() && read_or_flush(src, inbuf, out, timeout).await? == 0 {
            return Err(BodyError::Truncated);
        }
        let take = (inbuf.len() as u64).min(remaining) as usize;
        out.data(&inbuf[..take]).await?;
        inbuf.advance(take);
        remaining -= take as u64;
    }
    Ok(())
}

/// Waits until `inbuf` holds a full line; returns its length without CRLF.
async fn line<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    out: &mut S,
    timeout: Duration,
    max: usize,
) -> Result<usize, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let mut from = 0;
    loop {
        if let Some(i) = inbuf[from..].iter().position(|b| *b == b'\n') {
            let i = from + i;
            if i == 0 || inbuf[i - 1] != b'\r' {
                return Err(BodyError::Framing("bare LF in chunked framing"));
            }
            return Ok(i - 1);
        }
        from = inbuf.len().saturating_sub(1);
        if inbuf.len() > max {
            return Err(BodyError::Framing("chunk line too long"));
        }
        if read_or_flush(src, inbuf, out, timeout).await? == 0 {
            return Err(BodyError::Truncated);
        }
    }
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Parses "HEX[ext]" strictly.
fn chunk_size(line: &[u8]) -> Result<u64, BodyError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return Err(BodyError::Framing("invalid chunk size"));
    }
    let rest = &line[digits..];
    let rest_trim: &[u8] = {
        let ws = rest
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        &rest[ws..]
    };
    if !rest_trim.is_empty() && rest_trim[0] != b';' {
        return Err(BodyError::Framing("invalid chunk size"));
    }
    if rest_trim
        .iter()
        .any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f)
    {
        return Err(BodyError::Framing("control character in a chunk extension"));
    }
    let s = std::str::from_utf8(&line[..digits])
        .map_err(|_| BodyError::Framing("invalid chunk size"))?;
    u64::from_str_radix(s, 16).map_err(|_| BodyError::Framing("invalid chunk size"))
}

async fn copy_chunked<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    out: &mut S,
    timeout: Duration,
) -> Result<u64, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let mut total = 0u64;
    loop {
        let n = line(src, inbuf, out, timeout, MAX_CHUNK_LINE).await?;
        let size = chunk_size(&inbuf[..n])?;
        inbuf.advance(n + 2);
        if size == 0 {
            break;
        }
        total = total
            .checked_add(size)
            .ok_or(BodyError::Framing("body too large"))?;
        copy_exact(src, inbuf, size, out, timeout).await?;
        while inbuf.len() < 2 {
            if read_or_flush(src, inbuf, out, timeout).await? == 0 {
                return Err(BodyError::Truncated);
            }
        }
        if &inbuf[..2] != b"\r\n" {
            return Err(BodyError::Framing("chunk data not followed by CRLF"));
        }
        inbuf.advance(2);
    }
    // Trailer section: header-like lines up to an empty line.
    let mut trailers: Option<Fields> = None;
    let mut trailer_bytes = 0;
    loop {
        let n = line(src, inbuf, out, timeout, MAX_TRAILERS).await?;
        if n == 0 {
            inbuf.advance(2);
            break;
        }
        let l = &inbuf[..n];
        let colon = l
            .iter()
            .position(|b| *b == b':')
            .ok_or(BodyError::Framing("invalid trailer field"))?;
        let name_ok = colon > 0
            && l[..colon]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b));
        if !name_ok
            || l[colon + 1..]
                .iter()
                .any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f)
        {
            return Err(BodyError::Framing("invalid trailer field"));
        }
        trailers
            .get_or_insert_with(Fields::default)
            .append(&l[..colon], trim(&l[colon + 1..]));
        trailer_bytes += n + 2;
        if trailer_bytes > MAX_TRAILERS {
            return Err(BodyError::Framing("trailer section too large"));
        }
        inbuf.advance(n + 2);
    }
    out.end(trailers.as_ref()).await?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(
        input: &[u8],
        framing: Framing,
        chunked_out: bool,
    ) -> (Result<u64, BodyError>, Vec<u8>, BytesMut) {
        let mut src: &[u8] = input;
        let mut inbuf = BytesMut::new();
        let mut dst = Vec::new();
        let mut stage = Vec::new();
        let mut out = Out::new(&mut dst, &mut stage, chunked_out);
        let r = transfer(
            &mut src,
            &mut inbuf,
            framing,
            &mut out,
            Duration::from_secs(1),
        )
        .await;
        let _ = out.flush_out().await;
        (r, dst, inbuf)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn chunked_roundtrip_and_leftover() {
        rt().block_on(async {
            let (r, out, left) = run(
                b"5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-T: 1\r\n\r\nGET",
                Framing::Chunked,
                true,
            )
            .await;
            assert_eq!(r.unwrap(), 6);
            assert_eq!(out, b"5\r\nhello\r\n1\r\n!\r\n0\r\nX-T: 1\r\n\r\n");
            assert_eq!(&left[..], b"GET");
            let (_, plain, _) = run(b"5\r\nhello\r\n0\r\n\r\n", Framing::Chunked, false).await;
            assert_eq!(plain, b"hello");
        });
    }

    #[test]
    fn bad_chunks_are_refused() {
        rt().block_on(async {
            for bad in [
                &b"zz\r\nhello\r\n0\r\n\r\n"[..],
                b"5\r\nhelloXX0\r\n\r\n",
                b"-5\r\nhello\r\n0\r\n\r\n",
                b"5\nhello\r\n0\r\n\r\n",
                b"1111111111111111\r\n",
                b"5\r\nhel",
            ] {
                let (r, _, _) = run(bad, Framing::Chunked, true).await;
                assert!(r.is_err(), "accepted {bad:?}");
            }
        });
    }

    #[test]
    fn length_and_close() {
        rt().block_on(async {
            let (r, out, left) = run(b"abcdefXYZ", Framing::Length(6), false).await;
            assert_eq!(r.unwrap(), 6);
            assert_eq!(out, b"abcdef");
            assert_eq!(&left[..], b"XYZ");
            let (r, _, _) = run(b"abc", Framing::Length(6), false).await;
            assert!(matches!(r, Err(BodyError::Truncated)));
            let (r, out, _) = run(b"abc", Framing::Close, true).await;
            assert_eq!(r.unwrap(), 3);
            assert_eq!(out, b"3\r\nabc\r\n0\r\n\r\n");
        });
    }
}
