//! Streaming message bodies from one connection to the other.
//!
//! Bodies never sit whole in memory: bytes move through the reader's buffer
//! and a bounded staging buffer. Small writes (a head, chunk frames, a small
//! body) are gathered in the staging buffer and leave in one write when the
//! transfer must wait for input or finishes. Chunked input is decoded
//! strictly and re-encoded, so what leaves is always well framed.

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::message::{Fields, Framing};

/// Staging is flushed once it holds this much.
const STAGE_MAX: usize = 64 * 1024;
const READ_CHUNK: usize = 32 * 1024;
/// Pieces at least this large go to a sink that keeps bytes as they are
/// (`Sink::keeps_owned`) without a copy. A piece pins the whole read
/// buffer it came from (`READ_CHUNK` and more) until the receiver lets it
/// go (quinn: when the client acknowledges it); at half a read buffer or
/// more, that is at most twice the bytes a copy would hold, and smaller
/// pieces are copied as before. Measured on HTTP/3 at 64 KB (20 x 10
/// streams, oha; BENCHMARKS.md, "HTTP/3"): user-space instructions per
/// request -12 % under callgrind, user CPU -3.7 % and page faults -20 to
/// -40 %, the process's whole CPU per request -0.9 %, inside the spread
/// (the kernel's UDP path is most of the rest).
const OWNED_MIN: usize = READ_CHUNK / 2;
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
    /// A request body came too slowly: under its minimum rate after the
    /// grace period, or not whole within its deadline (`BodyPace`).
    TooSlow,
    /// Writing to the receiver failed.
    Write(io::Error),
    /// The body's framing is invalid (bad chunk size, missing CRLF...).
    Framing(&'static str),
    /// A body hook stopped the transfer (it answers the client itself).
    Refused,
}

/// How a body must keep coming: the longest wait for one read (`gap_ms`:
/// `client_body` for requests, `upstream_response` for responses) and, for
/// request bodies, a minimum rate after a grace period and a whole-body
/// deadline (`[vserver.request_body]`; the role of Apache's mod_reqtimeout
/// `body=20,MinRate=500`). A body that trickles a byte before each gap
/// ends held its connection forever with the gap alone (R.U.D.Y.).
///
/// Only time spent waiting for the sender counts (`waited_ms`), not time
/// the receiver took to accept what came: a member that is slow to take an
/// upload does not make its client too slow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyPace {
    pub gap_ms: u64,
    /// Waiting this long in all, the body must have averaged `min_rate`.
    pub grace_ms: u64,
    /// Bytes per second after the grace period; 0: no minimum.
    pub min_rate: u64,
    /// The most the body may keep us waiting in all; 0: no limit.
    pub deadline_ms: u64,
}

impl BodyPace {
    /// A rate or a deadline applies, beside the gap.
    pub fn paced(&self) -> bool {
        self.min_rate > 0 || self.deadline_ms > 0
    }

    /// Only the gap between reads (response bodies, tests).
    pub fn gap(d: Duration) -> BodyPace {
        BodyPace {
            gap_ms: d.as_millis().try_into().unwrap_or(u64::MAX),
            grace_ms: 0,
            min_rate: 0,
            deadline_ms: 0,
        }
    }

    /// How long the next wait may last for a body that has made us wait
    /// `waited_ms` and brought `bytes`, and whether the rate or the
    /// deadline (not the gap) sets that bound. A body at exactly
    /// `min_rate` after the grace is allowed `grace + bytes / min_rate`
    /// of waiting (mod_reqtimeout's "one more second per MinRate bytes").
    pub fn allowance(&self, waited_ms: u64, bytes: u64) -> (u64, bool) {
        if !self.paced() {
            return (self.gap_ms, false);
        }
        let mut pace = u64::MAX;
        // None when there is no minimum rate.
        if let Some(earned) = bytes.saturating_mul(1000).checked_div(self.min_rate) {
            pace = self.grace_ms.saturating_add(earned);
        }
        if self.deadline_ms > 0 {
            pace = pace.min(self.deadline_ms);
        }
        let left = pace.saturating_sub(waited_ms);
        if left < self.gap_ms {
            (left, true)
        } else {
            (self.gap_ms, false)
        }
    }
}

/// One body's progress against its `BodyPace`.
#[derive(Debug)]
pub struct Pacer {
    pub pace: BodyPace,
    waited_ms: u64,
    bytes: u64,
}

impl Pacer {
    pub fn new(pace: BodyPace) -> Pacer {
        Pacer {
            pace,
            waited_ms: 0,
            bytes: 0,
        }
    }

    /// Only the gap between reads.
    pub fn gap(d: Duration) -> Pacer {
        Pacer::new(BodyPace::gap(d))
    }
}

/// Reads more bytes into `buf`; Ok(0) on EOF.
pub async fn read_more<R: AsyncRead + Unpin>(
    src: &mut R,
    buf: &mut BytesMut,
    pacer: &mut Pacer,
) -> Result<usize, BodyError> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(READ_CHUNK);
    }
    let (allow, paced) = pacer.pace.allowance(pacer.waited_ms, pacer.bytes);
    // The (coarse) clock is read only for bodies with a rate or a deadline.
    let start = pacer.pace.paced().then(crate::clock::now_ms);
    let r = tokio::time::timeout(Duration::from_millis(allow), src.read_buf(buf)).await;
    if let Some(t) = start {
        let spent = crate::clock::now_ms().saturating_sub(t);
        pacer.waited_ms = pacer.waited_ms.saturating_add(spent);
    }
    match r {
        Ok(Ok(n)) => {
            pacer.bytes = pacer.bytes.saturating_add(n as u64);
            Ok(n)
        }
        Ok(Err(e)) => Err(BodyError::Read(e)),
        Err(_) if paced => Err(BodyError::TooSlow),
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
    pacer: &mut Pacer,
) -> Result<usize, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    flush_if_pending(read_more(src, buf, pacer), out).await?
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
    /// Whether this sink keeps the bytes it is given as they are (HTTP/3:
    /// quinn holds a DATA frame's payload until the client acknowledges
    /// it), so that `data_owned` saves it a copy.
    fn keeps_owned(&self) -> bool {
        false
    }
    /// Takes the next piece of the payload as an owned buffer; called only
    /// when `keeps_owned` says so (elsewhere a borrowed slice is cheaper).
    async fn data_owned(&mut self, bytes: Bytes) -> Result<(), BodyError> {
        self.data(&bytes).await
    }
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
    fn keeps_owned(&self) -> bool {
        (**self).keeps_owned()
    }
    async fn data_owned(&mut self, bytes: Bytes) -> Result<(), BodyError> {
        (**self).data_owned(bytes).await
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
    pacer: &mut Pacer,
) -> (Result<u64, BodyError>, bool)
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let r = match transfer(src, inbuf, framing, sink, pacer).await {
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
    pacer: &mut Pacer,
) -> Result<u64, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let n = match framing {
        Framing::None => 0,
        Framing::Length(n) => {
            copy_exact(src, inbuf, n, out, pacer).await?;
            n
        }
        Framing::Close => {
            let mut total = 0u64;
            loop {
                if inbuf.is_empty() && read_or_flush(src, inbuf, out, pacer).await? == 0 {
                    break;
                }
                let data = inbuf.split();
                total += data.len() as u64;
                if data.len() >= OWNED_MIN && out.keeps_owned() {
                    out.data_owned(data.freeze()).await?;
                } else {
                    out.data(&data).await?;
                }
            }
            total
        }
        Framing::Chunked => return copy_chunked(src, inbuf, out, pacer).await,
    };
    out.end(None).await?;
    Ok(n)
}

async fn copy_exact<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    mut remaining: u64,
    out: &mut S,
    pacer: &mut Pacer,
) -> Result<(), BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    while remaining > 0 {
        if inbuf.is_empty() && read_or_flush(src, inbuf, out, pacer).await? == 0 {
            return Err(BodyError::Truncated);
        }
        let take = (inbuf.len() as u64).min(remaining) as usize;
        if take >= OWNED_MIN && out.keeps_owned() {
            out.data_owned(inbuf.split_to(take).freeze()).await?;
        } else {
            out.data(&inbuf[..take]).await?;
            inbuf.advance(take);
        }
        remaining -= take as u64;
    }
    Ok(())
}

/// Waits until `inbuf` holds a full line; returns its length without CRLF.
async fn line<R, S>(
    src: &mut R,
    inbuf: &mut BytesMut,
    out: &mut S,
    pacer: &mut Pacer,
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
        if read_or_flush(src, inbuf, out, pacer).await? == 0 {
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
    pacer: &mut Pacer,
) -> Result<u64, BodyError>
where
    R: AsyncRead + Unpin,
    S: Sink,
{
    let mut total = 0u64;
    loop {
        let n = line(src, inbuf, out, pacer, MAX_CHUNK_LINE).await?;
        let size = chunk_size(&inbuf[..n])?;
        inbuf.advance(n + 2);
        if size == 0 {
            break;
        }
        total = total
            .checked_add(size)
            .ok_or(BodyError::Framing("body too large"))?;
        copy_exact(src, inbuf, size, out, pacer).await?;
        while inbuf.len() < 2 {
            if read_or_flush(src, inbuf, out, pacer).await? == 0 {
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
        let n = line(src, inbuf, out, pacer, MAX_TRAILERS).await?;
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

    /// `input` through `transfer` into `sink`; what is left of the input.
    async fn feed<S: Sink>(
        input: &[u8],
        framing: Framing,
        sink: &mut S,
    ) -> (Result<u64, BodyError>, BytesMut) {
        let mut src: &[u8] = input;
        let mut inbuf = BytesMut::new();
        let r = transfer(
            &mut src,
            &mut inbuf,
            framing,
            sink,
            &mut Pacer::gap(Duration::from_secs(1)),
        )
        .await;
        (r, inbuf)
    }

    async fn run(
        input: &[u8],
        framing: Framing,
        chunked_out: bool,
    ) -> (Result<u64, BodyError>, Vec<u8>, BytesMut) {
        let mut dst = Vec::new();
        let mut stage = Vec::new();
        let mut out = Out::new(&mut dst, &mut stage, chunked_out);
        let (r, inbuf) = feed(input, framing, &mut out).await;
        let _ = out.flush_out().await;
        (r, dst, inbuf)
    }

    /// A sink that keeps what it is given, and counts how.
    #[derive(Default)]
    struct Keeper {
        got: Vec<u8>,
        owned: usize,
        borrowed: usize,
    }

    impl Sink for Keeper {
        async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
            self.borrowed += 1;
            self.got.extend_from_slice(bytes);
            Ok(())
        }
        async fn flush(&mut self) -> Result<(), BodyError> {
            Ok(())
        }
        async fn end(&mut self, _: Option<&Fields>) -> Result<(), BodyError> {
            Ok(())
        }
        fn written(&self) -> bool {
            !self.got.is_empty()
        }
        fn keeps_owned(&self) -> bool {
            true
        }
        async fn data_owned(&mut self, bytes: Bytes) -> Result<(), BodyError> {
            self.owned += 1;
            self.got.extend_from_slice(&bytes);
            Ok(())
        }
    }

    async fn keep(input: &[u8], framing: Framing) -> (u64, Keeper, BytesMut) {
        let mut k = Keeper::default();
        let (n, inbuf) = feed(input, framing, &mut k).await;
        (n.expect("transfer"), k, inbuf)
    }

    #[test]
    fn read_sized_pieces_go_owned_to_a_sink_that_keeps_them() {
        rt().block_on(async {
            let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
            let mut input = body.clone();
            input.extend_from_slice(b"GET /next");
            let (n, k, left) = keep(&input, Framing::Length(200_000)).await;
            assert_eq!(n, 200_000);
            assert!(k.got == body, "the pieces arrived out of order or changed");
            // Whole reads (32 KB each) owned, the last 3,392 bytes copied.
            assert!(k.owned >= 3, "{} owned", k.owned);
            assert_eq!(k.borrowed, 1);
            assert_eq!(&left[..], b"GET /next", "the next request stays");

            // Until the peer closes: the same.
            let (n, k, _) = keep(&body, Framing::Close).await;
            assert_eq!(n, 200_000);
            assert!(k.got == body);
            assert!(k.owned >= 3, "{} owned", k.owned);

            // A small body is copied, as for every other sink.
            let (_, k, _) = keep(&body[..1000], Framing::Length(1000)).await;
            assert_eq!((k.owned, k.borrowed, k.got.len()), (0, 1, 1000));
        });
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

    #[test]
    fn the_pace_allows_grace_plus_earned_time_up_to_the_deadline() {
        let p = BodyPace {
            gap_ms: 30_000,
            grace_ms: 20_000,
            min_rate: 500,
            deadline_ms: 600_000,
        };
        // Nothing yet: the grace, under the gap.
        assert_eq!(p.allowance(0, 0), (20_000, true));
        // 19 s waited, 10 bytes (a byte every 2 s): 1.02 s left.
        assert_eq!(p.allowance(19_000, 10), (1_020, true));
        // A body at 5 KB/s is bounded by the gap only.
        assert_eq!(p.allowance(10_000, 50_000), (30_000, false));
        // Past the deadline whatever the rate.
        assert_eq!(p.allowance(600_000, 1 << 40), (0, true));
        // Off: the gap alone (response bodies).
        let g = BodyPace::gap(Duration::from_secs(60));
        assert_eq!(g.allowance(u64::MAX, 0), (60_000, false));
    }
}
