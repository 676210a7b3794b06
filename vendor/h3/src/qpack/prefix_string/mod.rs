mod bitwin;
mod decode;
mod encode;

use std::convert::TryInto;
use std::fmt;
use std::num::TryFromIntError;

use bytes::{Buf, BufMut};

pub use self::bitwin::BitWindow;

// Switchyard's patch: h3's own coder (decode.rs, encode.rs) is no longer
// called; its error types stay in the API.
pub use self::{decode::Error as HuffmanDecodingError, encode::Error as HuffmanEncodingError};
use crate::qpack::prefix_int::{self, Error as IntegerError};

#[derive(Debug, PartialEq)]
pub enum Error {
    UnexpectedEnd,
    Integer(IntegerError),
    HuffmanDecoding(HuffmanDecodingError),
    HuffmanEncoding(HuffmanEncodingError),
    BufSize(TryFromIntError),
    /// Switchyard's patch: what crates/huffman's decoder refused.
    Huffman(&'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnexpectedEnd => write!(f, "unexpected end"),
            Error::Integer(e) => write!(f, "could not parse integer: {}", e),
            Error::HuffmanDecoding(e) => write!(f, "Huffman decode failed: {:?}", e),
            Error::HuffmanEncoding(e) => write!(f, "Huffman encode failed: {:?}", e),
            Error::BufSize(_) => write!(f, "number in buffer wrong size"),
            Error::Huffman(why) => write!(f, "Huffman decode failed: {}", why),
        }
    }
}

// Switchyard's patch (vendor/h3/PATCHED.md): the string is decoded by the
// table decoder of crates/huffman, whole words at a time, and a raw one is
// copied once; h3's own decoder went one bit at a time through a copy of
// the payload.
pub fn decode<B: Buf>(size: u8, buf: &mut B) -> Result<Vec<u8>, Error> {
    let (flags, len) = prefix_int::decode(size - 1, buf)?;
    let len: usize = len.try_into()?;
    if buf.remaining() < len {
        return Err(Error::UnexpectedEnd);
    }

    if flags & 1 == 0 {
        let mut raw = vec![0; len];
        buf.copy_to_slice(&mut raw);
        return Ok(raw);
    }
    let payload = buf.copy_to_bytes(len);
    let mut decoded = Vec::new();
    switchyard_huffman::decode(&payload, &mut decoded)
        .map_err(|e| Error::Huffman(e.0))?;
    Ok(decoded)
}

/// Switchyard's patch (third, vendor/h3/PATCHED.md): the next string
/// literal of a contiguous field section, as sent, and whether it is
/// Huffman-coded.
fn split_literal<'b>(size: u8, buf: &mut &'b [u8]) -> Result<(bool, &'b [u8]), Error> {
    let (flags, len) = prefix_int::decode(size - 1, buf)?;
    let len: usize = len.try_into()?;
    if buf.len() < len {
        return Err(Error::UnexpectedEnd);
    }
    let (string, rest) = buf.split_at(len);
    *buf = rest;
    Ok((flags & 1 == 1, string))
}

/// Switchyard's patch (third): a string of a contiguous field section, as
/// a slice of it when raw (no copy at all), or decoded into `scratch`
/// (kept by the caller from one field to the next, so no allocation per
/// string either).
pub fn decode_slice<'b: 'm, 'm>(
    size: u8,
    buf: &mut &'b [u8],
    scratch: &'m mut Vec<u8>,
) -> Result<&'m [u8], Error> {
    let (huffman, string) = split_literal(size, buf)?;
    if !huffman {
        return Ok(string);
    }
    scratch.clear();
    switchyard_huffman::decode(string, scratch).map_err(|e| Error::Huffman(e.0))?;
    Ok(scratch)
}

/// Switchyard's patch (fourth): as `decode_slice`, a Huffman string
/// decoded through the connection's memory of its client's strings
/// (`memo`, by the field's `key`), where the same bytes sent before are
/// not decoded again.
pub fn decode_slice_memo<'b: 'm, 'm>(
    size: u8,
    buf: &mut &'b [u8],
    memo: &'m mut switchyard_huffman::Memo,
    key: u32,
    scratch: &'m mut Vec<u8>,
) -> Result<&'m [u8], Error> {
    let (huffman, string) = split_literal(size, buf)?;
    if !huffman {
        return Ok(string);
    }
    memo.decode(key, string, scratch)
        .map_err(|e| Error::Huffman(e.0))
}

// Switchyard's patch (vendor/h3/PATCHED.md): literals go out raw (the H
// bit clear, RFC 9204 4.1.2), as Switchyard's HPACK and HAProxy send them:
// Huffman would save about a quarter of each value's bytes at the CPU
// cost of coding it on every response.
pub fn encode<B: BufMut>(size: u8, flags: u8, value: &[u8], buf: &mut B) -> Result<(), Error> {
    prefix_int::encode(size - 1, flags << 1, value.len().try_into()?, buf);
    buf.put_slice(value);
    Ok(())
}

impl From<HuffmanEncodingError> for Error {
    fn from(error: HuffmanEncodingError) -> Self {
        Error::HuffmanEncoding(error)
    }
}

impl From<IntegerError> for Error {
    fn from(error: IntegerError) -> Self {
        match error {
            IntegerError::UnexpectedEnd => Error::UnexpectedEnd,
            e => Error::Integer(e),
        }
    }
}

impl From<HuffmanDecodingError> for Error {
    fn from(error: HuffmanDecodingError) -> Self {
        Error::HuffmanDecoding(error)
    }
}

impl From<TryFromIntError> for Error {
    fn from(error: TryFromIntError) -> Self {
        Error::BufSize(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use assert_matches::assert_matches;
    use std::io::Cursor;

    // Switchyard's patch: literals are written raw; Huffman ones (as
    // clients send them) still decode.
    #[test]
    fn codec_6() {
        let mut buf = Vec::new();
        encode(6, 0b01, b"name without ref", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        let mut want = vec![0b0101_0000];
        want.extend_from_slice(b"name without ref");
        assert_eq!(&buf, &want);
        assert_eq!(decode(6, &mut read).unwrap(), b"name without ref");
        let huffman = [
            0b0110_1100, 168, 116, 149, 79, 6, 76, 231, 181, 42, 88, 89, 127,
        ];
        assert_eq!(
            decode(6, &mut Cursor::new(&huffman)).unwrap(),
            b"name without ref"
        );
    }

    #[test]
    fn codec_8() {
        let mut buf = Vec::new();
        encode(8, 0b01, b"name with ref", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        assert_eq!(&buf[..1], &[0b0000_1101]);
        assert_eq!(decode(8, &mut read).unwrap(), b"name with ref");
        let huffman = [0b1000_1010, 168, 116, 149, 79, 6, 76, 234, 88, 89, 127];
        assert_eq!(
            decode(8, &mut Cursor::new(&huffman)).unwrap(),
            b"name with ref"
        );
    }

    #[test]
    fn codec_8_empty() {
        let mut buf = Vec::new();
        encode(8, 0b01, b"", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        assert_eq!(&buf, &[0b1000_0000]);
        assert_eq!(decode(8, &mut read).unwrap(), b"");
    }

    #[test]
    fn decode_non_huffman() {
        let buf = vec![0b0100_0011, b'b', b'a', b'r'];
        let mut read = Cursor::new(&buf);
        assert_eq!(decode(6, &mut read).unwrap(), b"bar");
    }

    #[test]
    fn decode_too_short() {
        let buf = vec![0b0100_0011, b'b', b'a'];
        let mut read = Cursor::new(&buf);
        assert_matches!(decode(6, &mut read), Err(Error::UnexpectedEnd));
    }
}
