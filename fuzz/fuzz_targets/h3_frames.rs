//! An HTTP/3 stream's bytes cut into frames (RFC 9114 7.1), as they
//! arrive in pieces. Every request's HEADERS frame is found by
//! Switchyard's `FrameDecoder::decode_bytes` (vendor/h3's seventh patch),
//! which decodes a stream held in one chunk from that chunk itself (the
//! payload a slice of it, not a copy); anything else goes through h3's own
//! decoder over a cursor. Both read the stream's chunks from a `BufList`,
//! which the same patch changed (its first chunk held apart from a deque).
//! Nothing may panic; both ways must give the same frames, payloads and
//! errors however the bytes are cut; and cut or not, the same frames and
//! the same payload bytes must come out.
//!
//! Input: byte 0 is how many cuts (0 to 7), the next bytes where they
//! fall; the rest is the stream.
#![no_main]
use h3::fuzzing::{frames, Piece};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(count % 8).min(rest.len());
    let (cuts, stream) = rest.split_at(count);
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|&c| usize::from(c) * stream.len() / 255)
        .collect();
    at.sort_unstable();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in at {
        chunks.push(&stream[from..cut]);
        from = cut;
    }
    chunks.push(&stream[from..]);
    let fast = frames(&chunks, true);
    let plain = frames(&chunks, false);
    assert_eq!(
        fast, plain,
        "the two frame decoders disagree on {stream:?} cut as {chunks:?}"
    );
    let whole = frames(&[stream], false);
    assert_eq!(
        joined(fast),
        joined(whole),
        "{stream:?} cut as {chunks:?} decodes otherwise than whole"
    );
});

/// The pieces with each run of payload pieces joined into one.
fn joined(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for piece in pieces {
        match (out.last_mut(), piece) {
            (Some(Piece::Payload(run)), Piece::Payload(more)) => run.extend(more),
            (_, piece) => out.push(piece),
        }
    }
    out
}
