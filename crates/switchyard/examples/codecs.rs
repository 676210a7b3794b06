//! Input MB/s per core and compression ratio of each coding and level on
//! the bench's realistic HTML (the `/html/<n>` objects), per object size,
//! through the proxy's own streaming encoders (`compress::encoder`), in
//! 16 KB pieces as bodies arrive: with the length known (what the proxy
//! does for a body with Content-Length; gzip up to 1 MiB then goes whole
//! through ISA-L at level 1 when the build has it, libdeflate otherwise)
//! and unknown (chunked: always streamed). The `libdeflate` rows are
//! libdeflate called directly on the whole body, for comparison. Run
//! optimised:
//!
//! ```text
//! cargo run --release -p switchyard --example codecs
//! ```
//!
//! Figures and the choice they led to are in docs/bench-results/history.md.

use std::time::{Duration, Instant};

use switchyard::compress::encoder::Encoder;
use switchyard::compress::{Coding, Settings};

const SIZES: [u64; 6] = [128, 1024, 2048, 8192, 65536, 524_288];

/// Runs `f` over `body` for about `budget`; (MB/s of input, output bytes).
fn measure(body: &[u8], budget: Duration, mut f: impl FnMut(&[u8]) -> usize) -> (f64, usize) {
    let mut out = f(body);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        out = f(body);
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    (n as f64 * body.len() as f64 / secs / 1e6, out)
}

fn encoded(c: Coding, s: &Settings, body: &[u8], known: bool) -> usize {
    let size = known.then_some(body.len() as u64);
    let mut e = Encoder::new(c, s, size).expect("encoder");
    let mut out = Vec::with_capacity(body.len() / 2 + 64);
    for piece in body.chunks(16 * 1024) {
        e.write(piece, &mut out).expect("write");
    }
    e.finish(&mut out).expect("finish");
    out.len()
}

fn main() {
    let budget = Duration::from_millis(
        std::env::var("CODEC_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(400),
    );
    println!("| coding | level | size | length | MB/s in | ratio |");
    println!("|---|---|---|---|---|---|");
    let mut cases: Vec<(Coding, i32)> = Vec::new();
    for l in [1, 2, 3, 6] {
        cases.push((Coding::Gzip, l));
    }
    for l in [0, 1, 2, 4] {
        cases.push((Coding::Br, l));
    }
    for l in [-1, 1, 3] {
        cases.push((Coding::Zstd, l));
    }
    for n in SIZES {
        let body = switchyard_bench::content::html(n);
        for level in [1, 2] {
            let lvl = libdeflater::CompressionLvl::new(level).expect("level");
            let mut z = libdeflater::Compressor::new(lvl);
            let mut out = vec![0u8; z.gzip_compress_bound(body.len())];
            let (mbs, len) = measure(&body, budget, |b| {
                z.gzip_compress(b, &mut out).expect("libdeflate")
            });
            println!(
                "| gzip (libdeflate) | {level} | {n} | known | {mbs:.0} | {:.3} |",
                len as f64 / n as f64
            );
        }
        for &(c, level) in &cases {
            let s = Settings {
                gzip_level: level.max(1) as u32,
                brotli_level: level.max(0) as u32,
                zstd_level: level,
                ..Settings::default()
            };
            for known in [true, false] {
                if c != Coding::Gzip && !known {
                    continue;
                }
                let (mbs, out) = measure(&body, budget, |b| encoded(c, &s, b, known));
                println!(
                    "| {} | {level} | {n} | {} | {mbs:.0} | {:.3} |",
                    c.token(),
                    if known { "known" } else { "chunked" },
                    out as f64 / n as f64
                );
            }
        }
    }
}
