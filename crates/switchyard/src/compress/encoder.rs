//! Streaming encoders with bounded memory: each keeps only its coding's
//! window, whatever the body's size. Input goes in piece by piece; output
//! is drained into the caller's buffer after every call, so nothing
//! accumulates here. `flush` ends a block so that what went in so far can
//! be decoded (server-sent events, long polls); `finish` ends the stream.
//!
//! gzip of a body whose length is known and at most `WHOLE_BODY_MAX` is
//! gathered and compressed in one call, by ISA-L at level 1 when the build
//! has it (`isal.rs`), by libdeflate otherwise: measured on the
//! bench's HTML (examples/codecs.rs, docs/bench-results/history.md) it is faster than
//! zlib's streaming deflate at every size (1.6x at 512 KB) and compresses
//! better. The memory this holds is bounded twice: per response by that
//! limit, and for the process by `WHOLE_BODY_BUDGET` (a response that
//! would exceed it streams instead). Longer or unframed bodies
//! (server-sent events, long polls) stream through ISA-L at level 1 when
//! the build has it, through zlib-rs otherwise.
//!
//! zlib-rs's level 1 is a different algorithm (deflate_quick) whose output
//! is 25 % larger than zlib's level 1 on HTML; without ISA-L, level 1
//! streams at zlib-rs level 2, which matches zlib's level-1 ratio.
//!
//! Compressor states are reused per thread: initialising a deflate state
//! allocates and clears ~300 KB, which would dominate small responses.

use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::{Compress, Compression, FlushCompress, Status};

use super::isal::{self, Flush, Igzip};
use super::{Coding, Settings};

/// Brotli's window: 2^18 = 256 KB (its default of 4 MB per response is
/// too much memory per stream for a proxy).
const BROTLI_LGWIN: u32 = 18;
/// zstd's window, as a power of two (512 KB).
const ZSTD_WINDOW_LOG: u32 = 19;
/// Spare deflate states kept per thread.
const SPARE_DEFLATES: usize = 16;
/// Bodies up to this size (declared by Content-Length) are compressed
/// whole.
pub const WHOLE_BODY_MAX: u64 = 1024 * 1024;
/// Bytes of bodies being gathered for whole compression, at most, in the
/// process: with the output buffers, about twice this is held.
pub const WHOLE_BODY_BUDGET: u64 = 64 * 1024 * 1024;
/// Gathering buffers kept per thread, and the largest kept.
const SPARE_BODIES: usize = 4;
const SPARE_BODY_MAX: usize = 1024 * 1024;

/// What the `GzipWhole` encoders alive now have reserved of the budget.
static WHOLE_HELD: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static DEFLATES: RefCell<Vec<(u32, Compress)>> = const { RefCell::new(Vec::new()) };
    static WHOLE: RefCell<Vec<(u32, libdeflater::Compressor)>> = const { RefCell::new(Vec::new()) };
    static IGZIP: RefCell<Vec<(u32, Igzip)>> = const { RefCell::new(Vec::new()) };
    static IGZIP_STREAMS: RefCell<Vec<(u32, Igzip)>> = const { RefCell::new(Vec::new()) };
    /// Gathering buffers (one kind: kept under level 0).
    static BODIES: RefCell<Vec<(u32, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
    /// libdeflate's output, at most the bound of `WHOLE_BODY_MAX` bytes.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

pub enum Encoder {
    Gzip {
        z: Option<Compress>,
        level: u32,
    },
    /// gzip streamed by ISA-L (level 1, when the build has it).
    GzipIsal {
        z: Option<Igzip>,
        level: u32,
    },
    /// gzip of a short body, gathered and compressed at the end.
    GzipWhole(Whole),
    Br(Option<Box<brotli::CompressorWriter<Vec<u8>>>>),
    Zstd(Option<zstd::stream::write::Encoder<'static, Vec<u8>>>),
}

impl Encoder {
    /// `size` is the body's length when the member declared one: small
    /// bodies get small tables.
    pub fn new(c: Coding, s: &Settings, size: Option<u64>) -> io::Result<Encoder> {
        if c == Coding::Gzip {
            if let Some(w) = size.and_then(|n| Whole::reserve(n, s.gzip_level)) {
                return Ok(Encoder::GzipWhole(w));
            }
        }
        if c == Coding::Gzip {
            if let Some(l) = isal::level_for(s.gzip_level) {
                let level = s.gzip_level;
                if let Some(mut z) = take_spare(&IGZIP_STREAMS, level).or_else(|| Igzip::stream(l))
                {
                    z.start();
                    return Ok(Encoder::GzipIsal { z: Some(z), level });
                }
            }
        }
        Ok(match c {
            Coding::Gzip => {
                let level = if s.gzip_level == 1 { 2 } else { s.gzip_level };
                let z = take_spare(&DEFLATES, level)
                    .unwrap_or_else(|| Compress::new_gzip(Compression::new(level), 15));
                Encoder::Gzip { z: Some(z), level }
            }
            Coding::Br => {
                let p = brotli::enc::BrotliEncoderParams {
                    quality: s.brotli_level as i32,
                    lgwin: BROTLI_LGWIN as i32,
                    size_hint: size.and_then(|n| usize::try_from(n).ok()).unwrap_or(0),
                    ..Default::default()
                };
                let w = brotli::CompressorWriter::with_params(Vec::new(), 4096, &p);
                Encoder::Br(Some(Box::new(w)))
            }
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), s.zstd_level)?;
                e.set_parameter(zstd::stream::raw::CParameter::WindowLog(ZSTD_WINDOW_LOG))?;
                if let Some(n) = size {
                    e.set_pledged_src_size(Some(n))?;
                }
                Encoder::Zstd(Some(e))
            }
        })
    }

    pub fn write(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Encoder::GzipWhole(w) => {
                if w.done {
                    return Err(spent());
                }
                w.body.extend_from_slice(data);
                Ok(())
            }
            Encoder::Gzip { z, .. } => deflate(live(z)?, data, out, FlushCompress::None),
            Encoder::GzipIsal { z, .. } => live(z)?.feed(data, Flush::None, out),
            Encoder::Br(w) => {
                let w = live(w)?;
                w.write_all(data)?;
                drain(w.get_mut(), out);
                Ok(())
            }
            Encoder::Zstd(e) => {
                let e = live(e)?;
                e.write_all(data)?;
                drain(e.get_mut(), out);
                Ok(())
            }
        }
    }

    /// Everything written so far becomes decodable output.
    pub fn flush(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            // Short and about to end: held until then.
            Encoder::GzipWhole(_) => Ok(()),
            Encoder::Gzip { z, .. } => deflate(live(z)?, &[], out, FlushCompress::Sync),
            Encoder::GzipIsal { z, .. } => live(z)?.feed(&[], Flush::Sync, out),
            Encoder::Br(w) => {
                let w = live(w)?;
                w.flush()?;
                drain(w.get_mut(), out);
                Ok(())
            }
            Encoder::Zstd(e) => {
                let e = live(e)?;
                e.flush()?;
                drain(e.get_mut(), out);
                Ok(())
            }
        }
    }

    /// Ends the stream (trailer, checksum). The encoder is spent.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Encoder::GzipWhole(w) => {
                if std::mem::replace(&mut w.done, true) {
                    return Err(spent());
                }
                whole_gzip(&w.body, w.level, out)
            }
            Encoder::Gzip { z, level } => {
                let mut s = z.take().ok_or_else(spent)?;
                deflate(&mut s, &[], out, FlushCompress::Finish)?;
                s.reset();
                put_spare(&DEFLATES, *level, s, SPARE_DEFLATES);
                Ok(())
            }
            Encoder::GzipIsal { z, level } => {
                let mut s = z.take().ok_or_else(spent)?;
                s.feed(&[], Flush::Finish, out)?;
                put_spare(&IGZIP_STREAMS, *level, s, SPARE_DEFLATES);
                Ok(())
            }
            Encoder::Br(w) => {
                let mut rest = w.take().ok_or_else(spent)?.into_inner();
                drain(&mut rest, out);
                Ok(())
            }
            Encoder::Zstd(e) => {
                let mut rest = e.take().ok_or_else(spent)?.finish()?;
                drain(&mut rest, out);
                Ok(())
            }
        }
    }
}

/// A body gathered for whole compression, and its share of the budget.
pub struct Whole {
    body: Vec<u8>,
    level: u32,
    done: bool,
    reserved: u64,
}

impl Whole {
    /// A gathering buffer for a body of `size` bytes, if the size and the
    /// budget allow one.
    fn reserve(size: u64, level: u32) -> Option<Whole> {
        if size > WHOLE_BODY_MAX {
            return None;
        }
        let held = WHOLE_HELD.fetch_add(size, Ordering::Relaxed);
        if held + size > WHOLE_BODY_BUDGET {
            WHOLE_HELD.fetch_sub(size, Ordering::Relaxed);
            return None;
        }
        let mut body = take_spare(&BODIES, 0).unwrap_or_default();
        body.reserve(size as usize);
        Some(Whole {
            body,
            level,
            done: false,
            reserved: size,
        })
    }
}

impl Drop for Whole {
    fn drop(&mut self) {
        WHOLE_HELD.fetch_sub(self.reserved, Ordering::Relaxed);
        let mut body = std::mem::take(&mut self.body);
        if body.capacity() <= SPARE_BODY_MAX {
            body.clear();
            put_spare(&BODIES, 0, body, SPARE_BODIES);
        }
    }
}

/// One gzip member of `body`, appended to `out`, by a per-thread ISA-L
/// compressor where one serves `level`, else by libdeflate.
fn whole_gzip(body: &[u8], level: u32, out: &mut Vec<u8>) -> io::Result<()> {
    if let Some(l) = isal::level_for(level) {
        if let Some(mut z) = take_spare(&IGZIP, level).or_else(|| Igzip::whole(l)) {
            let done = z.gzip(body, out);
            // One call at a time per thread: one state (about 350 KB) is enough.
            put_spare(&IGZIP, level, z, 1);
            // Not done: the output outgrew its bound; libdeflate stores it.
            if done? {
                return Ok(());
            }
        }
    }
    libdeflate_gzip(body, level, out)
}

/// `whole_gzip` by libdeflate.
fn libdeflate_gzip(body: &[u8], level: u32, out: &mut Vec<u8>) -> io::Result<()> {
    let mut z = match take_spare(&WHOLE, level) {
        Some(z) => z,
        None => {
            let lvl = libdeflater::CompressionLvl::new(level as i32)
                .map_err(|e| io::Error::other(format!("{e:?}")))?;
            libdeflater::Compressor::new(lvl)
        }
    };
    // Compressed into this thread's scratch buffer, zeroed only where it
    // grows: zeroing the whole bound per response cost more than copying
    // the output out of it.
    let r = SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let bound = z.gzip_compress_bound(body.len());
        if s.len() < bound {
            s.resize(bound, 0);
        }
        let r = z.gzip_compress(body, &mut s[..bound]);
        if let Ok(n) = r {
            out.extend_from_slice(&s[..n]);
        }
        r
    });
    put_spare(&WHOLE, level, z, SPARE_DEFLATES);
    r.map(|_| ())
        .map_err(|e| io::Error::other(format!("libdeflate: {e:?}")))
}

type Spares<T> = std::thread::LocalKey<RefCell<Vec<(u32, T)>>>;

/// This thread's spare compressor state for `level`, if one is kept.
fn take_spare<T: 'static>(spares: &'static Spares<T>, level: u32) -> Option<T> {
    spares.with(|s| {
        let mut s = s.borrow_mut();
        let i = s.iter().position(|(l, _)| *l == level)?;
        Some(s.swap_remove(i).1)
    })
}

/// Keeps a compressor state (or buffer) for the next response on this
/// thread, up to `max` of them.
fn put_spare<T: 'static>(spares: &'static Spares<T>, level: u32, state: T, max: usize) {
    spares.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < max {
            s.push((level, state));
        }
    });
}

fn spent() -> io::Error {
    io::Error::other("encoder used after finish")
}

fn live<T>(slot: &mut Option<T>) -> io::Result<&mut T> {
    slot.as_mut().ok_or_else(spent)
}

/// Moves what an encoder produced into `out`, keeping both buffers.
fn drain(produced: &mut Vec<u8>, out: &mut Vec<u8>) {
    if out.is_empty() {
        std::mem::swap(produced, out);
    } else {
        out.append(produced);
    }
}

/// Runs deflate over `input` until it is consumed and, for a flush or
/// finish, until deflate has nothing more to say.
fn deflate(
    z: &mut Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    f: FlushCompress,
) -> io::Result<()> {
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve((input.len() / 2).max(16 * 1024));
        }
        let (in0, out0) = (z.total_in(), z.total_out());
        let room = out.capacity() - out.len();
        let st = z.compress_vec(input, out, f).map_err(io::Error::other)?;
        input = &input[(z.total_in() - in0) as usize..];
        let filled = (z.total_out() - out0) as usize == room;
        match (f, st) {
            (_, Status::StreamEnd) => return Ok(()),
            (FlushCompress::Finish, _) => {}
            (_, Status::BufError) if input.is_empty() => return Ok(()),
            _ if input.is_empty() && !filled => return Ok(()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn text(n: usize) -> Vec<u8> {
        let words = [
            "<div class=\"row\">",
            "switchyard",
            "balance",
            "</div>\n",
            "pool ",
            "member ",
        ];
        let mut out = Vec::with_capacity(n);
        let mut i = 7usize;
        while out.len() < n {
            i = i.wrapping_mul(31).wrapping_add(17);
            out.extend_from_slice(words[i % words.len()].as_bytes());
            out.extend_from_slice(format!("{} ", i % 1000).as_bytes());
        }
        out.truncate(n);
        out
    }

    fn decode(c: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match c {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => {
                out = zstd::stream::decode_all(data).unwrap();
            }
        }
        out
    }

    #[test]
    fn round_trips_in_pieces_with_flushes() {
        let s = Settings::default();
        for c in Coding::ALL {
            for n in [0usize, 1, 100, 70_000, 1_000_000] {
                let body = text(n);
                // Declared (gzip: gathered whole) and unframed (gzip:
                // streamed), each twice: the second run reuses spares.
                for size in [Some(n as u64), Some(n as u64), None, None] {
                    let mut e = Encoder::new(c, &s, size).unwrap();
                    let mut wire = Vec::new();
                    for (i, piece) in body.chunks(8191).enumerate() {
                        let mut out = Vec::new();
                        e.write(piece, &mut out).unwrap();
                        if i % 5 == 4 {
                            e.flush(&mut out).unwrap();
                        }
                        wire.extend_from_slice(&out);
                    }
                    let mut out = Vec::new();
                    e.finish(&mut out).unwrap();
                    wire.extend_from_slice(&out);
                    assert!(e.finish(&mut out).is_err(), "spent");
                    assert_eq!(decode(c, &wire), body, "{c:?} {n}");
                    if n >= 70_000 {
                        assert!(wire.len() < n / 2, "{c:?} compresses text: {}", wire.len());
                    }
                }
            }
        }
    }

    #[test]
    fn whole_bodies_stay_within_the_budget() {
        let s = Settings::default();
        let n = WHOLE_BODY_MAX;
        let held: Vec<Encoder> = (0..WHOLE_BODY_BUDGET / n + 8)
            .map(|_| Encoder::new(Coding::Gzip, &s, Some(n)).unwrap())
            .collect();
        let whole = held
            .iter()
            .filter(|e| matches!(e, Encoder::GzipWhole(_)))
            .count() as u64;
        // Other tests may hold a little of the budget meanwhile.
        assert!(whole <= WHOLE_BODY_BUDGET / n, "{whole}");
        assert!(whole >= WHOLE_BODY_BUDGET / n - 4, "{whole}");
        let streams = |e: &Encoder| matches!(e, Encoder::Gzip { .. } | Encoder::GzipIsal { .. });
        assert!(held.last().is_some_and(streams));
        let over = Encoder::new(Coding::Gzip, &s, Some(n + 1)).unwrap();
        assert!(streams(&over), "over the size limit");
        drop(held);
        assert!(WHOLE_HELD.load(Ordering::Relaxed) < 4 * n, "returned");
    }

    /// Random bytes outgrow ISA-L's output bound or come out stored:
    /// either way the client gets the body back, at every gzip level.
    #[test]
    fn incompressible_bodies_round_trip_whole() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..WHOLE_BODY_MAX as usize)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for level in [1, 6] {
            let s = Settings {
                gzip_level: level,
                ..Settings::default()
            };
            for n in [10usize, 70_000, noise.len()] {
                let mut e = Encoder::new(Coding::Gzip, &s, Some(n as u64)).unwrap();
                assert!(matches!(e, Encoder::GzipWhole(_)));
                let mut wire = Vec::new();
                for piece in noise[..n].chunks(16 * 1024) {
                    e.write(piece, &mut wire).unwrap();
                }
                e.finish(&mut wire).unwrap();
                assert_eq!(
                    decode(Coding::Gzip, &wire),
                    &noise[..n],
                    "level {level}, {n} B"
                );
            }
        }
    }

    /// Streamed gzip, by ISA-L at level 1 (when built in) and zlib-rs at
    /// the others: after every flush a streaming decoder has had all the
    /// input so far, and the finished stream is the body.
    #[test]
    fn streamed_gzip_is_decodable_at_every_flush_at_every_level() {
        let body = text(600_000);
        for level in [1, 2, 6] {
            let s = Settings {
                gzip_level: level,
                ..Settings::default()
            };
            let mut e = Encoder::new(Coding::Gzip, &s, None).unwrap();
            if level == 1 && Igzip::available() {
                assert!(matches!(e, Encoder::GzipIsal { .. }));
            }
            let mut d = flate2::write::GzDecoder::new(Vec::new());
            let mut fed = 0;
            for (i, piece) in body.chunks(40_000).enumerate() {
                let mut out = Vec::new();
                e.write(piece, &mut out).unwrap();
                fed += piece.len();
                if i % 3 == 0 {
                    e.flush(&mut out).unwrap();
                    d.write_all(&out).unwrap();
                    d.flush().unwrap();
                    assert_eq!(d.get_ref().len(), fed, "level {level}, flush {i}");
                } else {
                    d.write_all(&out).unwrap();
                }
            }
            let mut out = Vec::new();
            e.finish(&mut out).unwrap();
            d.write_all(&out).unwrap();
            assert_eq!(d.finish().unwrap(), body, "level {level}");
        }
    }

    #[test]
    fn a_flush_makes_everything_so_far_decodable() {
        let s = Settings::default();
        for c in Coding::ALL {
            let mut e = Encoder::new(c, &s, None).unwrap();
            let mut wire = Vec::new();
            e.write(b"data: first event\n\n", &mut wire).unwrap();
            e.flush(&mut wire).unwrap();
            // A streaming decoder sees the whole event before the end.
            let got = match c {
                Coding::Gzip => {
                    let mut d = flate2::write::GzDecoder::new(Vec::new());
                    d.write_all(&wire).unwrap();
                    d.flush().unwrap();
                    d.get_ref().clone()
                }
                Coding::Br => {
                    let mut d = brotli::DecompressorWriter::new(Vec::new(), 4096);
                    d.write_all(&wire).unwrap();
                    d.flush().unwrap();
                    d.get_ref().clone()
                }
                Coding::Zstd => {
                    let mut d = zstd::stream::write::Decoder::new(Vec::new()).unwrap();
                    d.write_all(&wire).unwrap();
                    d.flush().unwrap();
                    d.get_ref().clone()
                }
            };
            assert_eq!(got, b"data: first event\n\n", "{c:?}");
        }
    }
}
