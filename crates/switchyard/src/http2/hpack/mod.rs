//! HPACK (RFC 7541), the header compression of HTTP/2: a `Decoder` for the
//! header blocks clients send and an `Encoder` for our response heads.
//!
//! Both sides work on whole blocks and plain byte slices: the decoder hands
//! each field to a callback, borrowed from the block, its own table or a
//! scratch buffer, so decoding allocates nothing per field (a table
//! insertion reuses an evicted entry's buffer when it can); the encoder
//! writes straight into the connection's output buffer. Neither validates
//! names or values (the HTTP/2 layer does).
//!
//! Files: `huffman` (Appendix B: crates/huffman), `table` (the static and dynamic tables),
//! `decode`, `encode`.

mod decode;
mod encode;
/// Appendix B's code, shared with QPACK (crates/huffman).
pub use switchyard_huffman as huffman;
mod table;

pub use decode::Decoder;
pub use encode::Encoder;

use std::fmt;

/// Why a header block cannot be decoded. Every variant is a connection
/// error COMPRESSION_ERROR in HTTP/2 terms, except `TooLarge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Malformed HPACK: what was wrong, for logs.
    Compression(&'static str),
    /// The decoded list passed `max_list` (RFC 9113
    /// SETTINGS_MAX_HEADER_LIST_SIZE measure: name + value + 32 per field).
    /// The whole block WAS still decoded and the dynamic table is in sync,
    /// so the connection can go on (the caller answers 431 / resets the
    /// stream).
    TooLarge,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Compression(why) => write!(f, "HPACK: {why}"),
            DecodeError::TooLarge => f.write_str("header list too large"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<huffman::DecodeError> for DecodeError {
    fn from(e: huffman::DecodeError) -> Self {
        DecodeError::Compression(e.0)
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    /// xorshift64: reproducible randomness without a dependency.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub(crate) fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Hex as the RFC prints it (spaces allowed).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }
}
