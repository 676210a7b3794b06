//! gzip by ISA-L's igzip (Intel's Intelligent Storage Acceleration
//! Library, Debian's libisal), at gzip level 1: on the bench's HTML it is
//! 1.2x to 2.1x libdeflate's level 1 on whole bodies of 2 KB to 512 KB, and
//! about 3x zlib-rs's streaming, with output 1-6 % larger than libdeflate's
//! and still smaller than zlib's level 1, which is what the peers' level 1
//! produces (docs/bench-results/history.md, "gzip level 1 by ISA-L").
//!
//! Built only when build.rs found libisal-dev (`cfg(switchyard_isal)`);
//! otherwise `Igzip::whole`/`Igzip::stream` say there is none and
//! libdeflate (whole bodies) and zlib-rs (streams) serve level 1. The
//! compressor state lives in C (isal_shim.c: 82 KB, plus a token buffer of
//! 84 KB for a stream, 276 KB for whole bodies) and is reused per thread,
//! like every other compressor state here.

use std::io;

#[cfg(switchyard_isal)]
mod ffi {
    #[repr(C)]
    pub struct SyIsal {
        _opaque: [u8; 0],
    }
    extern "C" {
        pub fn sy_isal_new(level: i32, small: i32) -> *mut SyIsal;
        pub fn sy_isal_free(s: *mut SyIsal);
        pub fn sy_isal_gzip(
            s: *mut SyIsal,
            input: *const u8,
            n: u32,
            out: *mut u8,
            cap: u32,
        ) -> i64;
        pub fn sy_isal_stream_start(s: *mut SyIsal);
        pub fn sy_isal_stream(
            s: *mut SyIsal,
            input: *const u8,
            n: u32,
            mode: i32,
            out: *mut u8,
            cap: u32,
            consumed: *mut u32,
            written: *mut u32,
        ) -> i32;
    }
}

/// ISA-L's level for a gzip level, where its ratio is at least as good as
/// zlib's at that level. Only level 1 qualifies: ISA-L's best level (3) is
/// between zlib's 1 and 2 on HTML, so levels 2-9 stay with libdeflate and
/// zlib-rs.
pub fn level_for(gzip_level: u32) -> Option<i32> {
    (gzip_level == 1).then_some(1)
}

/// What a stream call is to do beyond compressing its input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flush {
    None = 0,
    /// Everything so far becomes decodable (a sync flush).
    Sync = 1,
    /// The gzip member ends (trailer, checksum).
    Finish = 2,
}

/// The header whose presence makes build.rs build ISA-L in (build.rs
/// spells it out too: it cannot import this crate).
pub const HEADER: &str = "/usr/include/isa-l/igzip_lib.h";

/// One ISA-L compressor state: for whole bodies (`whole`, `gzip`) or for a
/// stream (`stream`, `start`, `feed`).
pub struct Igzip {
    #[cfg(switchyard_isal)]
    state: std::ptr::NonNull<ffi::SyIsal>,
}

/// Output room asked for per stream call.
#[cfg(switchyard_isal)]
const STREAM_OUT: usize = 16 * 1024;

impl Igzip {
    /// A compressor at ISA-L `level` (0-3) for whole bodies; None when this
    /// build has no ISA-L or the allocation failed.
    pub fn whole(level: i32) -> Option<Igzip> {
        Igzip::new(level, false)
    }

    /// A compressor at ISA-L `level` for a stream; `start` it first.
    pub fn stream(level: i32) -> Option<Igzip> {
        Igzip::new(level, true)
    }

    fn new(level: i32, small: bool) -> Option<Igzip> {
        #[cfg(switchyard_isal)]
        {
            // SAFETY: plain allocation; NULL is handled.
            let p = unsafe { ffi::sy_isal_new(level, i32::from(small)) };
            std::ptr::NonNull::new(p).map(|state| Igzip { state })
        }
        #[cfg(not(switchyard_isal))]
        {
            let _ = (level, small);
            None
        }
    }

    /// Whether this build compresses with ISA-L.
    pub fn available() -> bool {
        cfg!(switchyard_isal)
    }

    /// Appends one gzip member of `body` to `out`. Ok(false) when the
    /// output did not fit the bound (incompressible input): `out` is
    /// unchanged and the caller compresses another way.
    pub fn gzip(&mut self, body: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
        #[cfg(switchyard_isal)]
        {
            let n =
                u32::try_from(body.len()).map_err(|_| io::Error::other("ISA-L: body over 4 GB"))?;
            // Stored blocks cost 5 bytes per 64 KB; the gzip framing 18,
            // a dynamic header at most 328.
            let bound = body.len() + body.len() / 1024 * 5 + 1024;
            let cap = u32::try_from(bound).unwrap_or(u32::MAX);
            out.reserve(bound);
            let len = out.len();
            // SAFETY: `out` has `bound` bytes of spare capacity from `len`;
            // ISA-L writes at most `cap` of them and reports how many, and
            // only those become part of `out`.
            let w = unsafe {
                ffi::sy_isal_gzip(
                    self.state.as_ptr(),
                    body.as_ptr(),
                    n,
                    out.as_mut_ptr().add(len),
                    cap,
                )
            };
            match w {
                0 => Ok(false),
                w if w > 0 && w as usize <= bound => {
                    // SAFETY: ISA-L initialised these `w` bytes.
                    unsafe { out.set_len(len + w as usize) };
                    Ok(true)
                }
                _ => Err(io::Error::other("ISA-L: isal_deflate_stateless failed")),
            }
        }
        #[cfg(not(switchyard_isal))]
        {
            let _ = (body, out);
            Ok(false)
        }
    }

    /// Begins a new gzip member (a fresh state or one reused).
    pub fn start(&mut self) {
        #[cfg(switchyard_isal)]
        // SAFETY: a live state.
        unsafe {
            ffi::sy_isal_stream_start(self.state.as_ptr())
        }
    }

    /// Compresses `data` into `out` (appended), then does what `flush`
    /// says. Input is taken whole: ISA-L keeps the history it needs.
    pub fn feed(&mut self, data: &[u8], flush: Flush, out: &mut Vec<u8>) -> io::Result<()> {
        #[cfg(switchyard_isal)]
        {
            let mut rest = data;
            loop {
                // At most 4 GB per call; the remainder goes round again.
                let n = rest.len().min(u32::MAX as usize);
                let mode = if n < rest.len() { Flush::None } else { flush };
                out.reserve(STREAM_OUT);
                let len = out.len();
                let cap = (out.capacity() - len).min(u32::MAX as usize);
                let (mut consumed, mut written) = (0u32, 0u32);
                // SAFETY: `out` has `cap` bytes of spare capacity from
                // `len`; ISA-L writes at most that many and reports how
                // many (`written`), which alone become part of `out`.
                let r = unsafe {
                    ffi::sy_isal_stream(
                        self.state.as_ptr(),
                        rest.as_ptr(),
                        n as u32,
                        mode as i32,
                        out.as_mut_ptr().add(len),
                        cap as u32,
                        &mut consumed,
                        &mut written,
                    )
                };
                if r < 0 || consumed as usize > n || written as usize > cap {
                    return Err(io::Error::other("ISA-L: isal_deflate failed"));
                }
                // SAFETY: ISA-L initialised these `written` bytes.
                unsafe { out.set_len(len + written as usize) };
                rest = &rest[consumed as usize..];
                if r == 0 && rest.is_empty() {
                    return Ok(());
                }
            }
        }
        #[cfg(not(switchyard_isal))]
        {
            let _ = (data, flush, out);
            Err(io::Error::other("built without ISA-L"))
        }
    }
}

#[cfg(switchyard_isal)]
impl Drop for Igzip {
    fn drop(&mut self) {
        // SAFETY: allocated by sy_isal_new, freed once.
        unsafe { ffi::sy_isal_free(self.state.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};

    fn gunzip(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data)
            .read_to_end(&mut out)
            .expect("a valid gzip member");
        out
    }

    /// Bytes no compressor can shrink (xorshift).
    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// GNU gzip's level 1: the same deflate as zlib's, which the peers'
    /// level 1 (nginx's gzip module) runs.
    fn gzip_1_len(body: &[u8]) -> usize {
        let mut c = Command::new("gzip")
            .args(["-1", "-c", "-n"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gzip (the test command installs it)");
        let mut stdin = c.stdin.take().expect("stdin");
        let input = body.to_vec();
        let feeder = std::thread::spawn(move || stdin.write_all(&input));
        let out = c.wait_with_output().expect("gzip output");
        feeder.join().expect("feeder").expect("write to gzip");
        out.stdout.len()
    }

    /// A machine with libisal-dev must get a build that uses it: build.rs
    /// skips ISA-L silently only where its header is missing.
    #[test]
    fn the_build_has_isal_where_the_header_is() {
        if std::path::Path::new(HEADER).exists() {
            assert!(
                Igzip::available(),
                "libisal-dev is installed but not built in"
            );
            assert!(Igzip::whole(1).is_some());
        } else {
            assert!(Igzip::whole(1).is_none());
        }
    }

    #[test]
    fn output_decodes_to_the_input_at_every_size_and_level() {
        if !Igzip::available() {
            return;
        }
        for level in 0..=3 {
            let mut z = Igzip::whole(level).expect("state");
            for n in [0usize, 1, 100, 2048, 65_536, 70_001, 1 << 20] {
                let body = switchyard_bench::content::html(n as u64);
                // Twice: the second call reuses the state.
                for _ in 0..2 {
                    let mut out = b"kept".to_vec();
                    assert!(z.gzip(&body, &mut out).expect("gzip"), "{level} {n}");
                    assert_eq!(&out[..4], b"kept", "appends");
                    assert_eq!(gunzip(&out[4..]), &body[..], "level {level}, {n} B");
                }
            }
        }
    }

    #[test]
    fn incompressible_input_round_trips_or_is_left_to_the_caller() {
        if !Igzip::available() {
            return;
        }
        let mut z = Igzip::whole(1).expect("state");
        for n in [10usize, 4096, 300_000] {
            let body = noise(n);
            let mut out = Vec::new();
            if z.gzip(&body, &mut out).expect("gzip") {
                assert_eq!(gunzip(&out), &body[..], "{n} B");
                assert!(out.len() <= n + n / 1024 * 5 + 1024);
            } else {
                assert!(out.is_empty(), "untouched when it does not fit");
            }
        }
    }

    /// Level 1 must not trade ratio for speed: on the bench's HTML at the
    /// sizes the compression benchmark sends, ISA-L's output is no larger
    /// than zlib's level 1.
    #[test]
    fn level_1_compresses_html_at_least_as_well_as_zlib_level_1() {
        if !Igzip::available() {
            return;
        }
        let mut z = Igzip::whole(level_for(1).expect("level 1")).expect("state");
        for n in [2048u64, 8192, 65_536, 524_288] {
            let body = switchyard_bench::content::html(n);
            let mut out = Vec::new();
            assert!(z.gzip(&body, &mut out).expect("gzip"));
            let zlib = gzip_1_len(&body);
            assert!(
                out.len() <= zlib,
                "{n} B: ISA-L {} > gzip -1 {zlib}",
                out.len()
            );
        }
    }

    #[test]
    fn only_level_1_goes_to_isal() {
        assert_eq!(level_for(1), Some(1));
        for l in 2..=9 {
            assert_eq!(level_for(l), None, "level {l}");
        }
    }
}
