//! The Huffman code of RFC 7541 Appendix B (HPACK's, and QPACK's: RFC 9204
//! 4.1.2): the table, a decoder, and an encoder. The proxy's encoders send
//! raw strings, as HAProxy does (Huffman saves a few bytes per field and
//! costs CPU on every response); the encoder is here for tests and
//! fuzzing, and for whoever wants it later.
//!
//! Decoding reads 64-bit words and needs no tree: a 4096-entry table, built
//! at compile time, resolves the codes of up to 10 bits (the letters,
//! digits and usual punctuation), two at a time when both fit in 12 bits;
//! the rare longer codes use the canonical per-length ranges (the code is
//! canonical: codes of one length are consecutive, in symbol order, and
//! shorter codes sort first). About 2 ns per decoded byte.

mod memo;
pub use memo::Memo;

/// Why a Huffman string does not decode (RFC 7541 5.2): the message says
/// which rule it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for DecodeError {}

/// (code, length in bits) of symbols 0..=255 and of EOS (256), from the RFC.
#[rustfmt::skip]
pub const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28),
    (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24),
    (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28),
    (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28),
    (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10), (0xf9, 8),
    (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5), (0x2, 5),
    (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7),
    (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13), (0x21, 6),
    (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7), (0x63, 7), (0x64, 7),
    (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7), (0x6b, 7), (0x6c, 7),
    (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6), (0x7ffd, 15),
    (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6), (0x6, 5),
    (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
    (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7), (0x79, 7), (0x7a, 7),
    (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22),
    (0x3fffd5, 22), (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24), (0xffffed, 24),
    (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23),
    (0x7fffe7, 23), (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22),
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22),
    (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23), (0x3fffe1, 22),
    (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26),
    (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22),
    (0x1ffffec, 25), (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19),
    (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26),
    (0x7ffffe2, 27), (0xfffff2, 24), (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26),
    (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21),
    (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25),
    (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27),
    (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28),
    (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27),
    (0x3ffffee, 26), (0x3fffffff, 30),
];

const EOS: usize = 256;
const FAST_BITS: u32 = 10;
const PAIR_BITS: u32 = 12;

/// Canonical decoding data: for each code length, the first code of that
/// length, how many codes have it, and where its symbols start in `sorted`;
/// and the `pairs` table.
struct Canonical {
    first: [u32; 31],
    count: [u32; 31],
    start: [u32; 31],
    sorted: [u16; 257],
    /// For each 12-bit prefix that begins with a code of up to 10 bits:
    /// that symbol, and the next one too when it also fits in the 12 bits,
    /// as `len1 << 24 | total_len << 18 | n << 16 | sym2 << 8 | sym1`
    /// (n = 1 or 2 symbols); 0 where the first code is longer. Two symbols a
    /// lookup halve the chain of dependent shifts and loads per byte.
    pairs: [u32; 1 << PAIR_BITS],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; 31],
        count: [0; 31],
        start: [0; 31],
        sorted: [0; 257],
        pairs: [0; 1 << PAIR_BITS],
    };
    // `len << 8 | symbol` for each 10-bit prefix, as `pairs` but one symbol.
    let mut fast = [0u16; 1 << FAST_BITS];
    let mut n = 0;
    let mut len = 1;
    while len <= 30 {
        c.start[len] = n as u32;
        let mut sym = 0;
        while sym < 257 {
            if CODES[sym].1 as usize == len {
                if c.count[len] == 0 {
                    c.first[len] = CODES[sym].0;
                }
                c.count[len] += 1;
                c.sorted[n] = sym as u16;
                n += 1;
                let bits = len as u32;
                if bits <= FAST_BITS {
                    let lo = (CODES[sym].0 << (FAST_BITS - bits)) as usize;
                    let mut i = 0;
                    while i < 1 << (FAST_BITS - bits) {
                        fast[lo + i] = ((bits as u16) << 8) | sym as u16;
                        i += 1;
                    }
                }
            }
            sym += 1;
        }
        len += 1;
    }
    let mut v = 0;
    while v < 1 << PAIR_BITS {
        let e1 = fast[v >> (PAIR_BITS - FAST_BITS)] as u32;
        if e1 != 0 {
            let len1 = e1 >> 8;
            let rest = (v << len1) & ((1 << PAIR_BITS) - 1);
            let e2 = fast[rest >> (PAIR_BITS - FAST_BITS)] as u32;
            let len2 = e2 >> 8;
            c.pairs[v] = if e2 != 0 && len1 + len2 <= PAIR_BITS {
                len1 << 24 | (len1 + len2) << 18 | 2 << 16 | (e2 & 0xff) << 8 | (e1 & 0xff)
            } else {
                len1 << 24 | len1 << 18 | 1 << 16 | (e1 & 0xff)
            };
        }
        v += 1;
    }
    c
}

static TABLES: Canonical = canonical();

/// The symbol starting `window` (the next 32 bits, left-justified) and its
/// length in bits.
#[inline]
fn symbol(window: u32) -> (usize, u32) {
    let t = &TABLES;
    let e = t.pairs[(window >> (32 - PAIR_BITS)) as usize];
    if e != 0 {
        return ((e & 0xff) as usize, e >> 24);
    }
    let mut len = FAST_BITS + 1;
    while len <= 30 {
        let l = len as usize;
        let code = window >> (32 - len);
        // Canonical: no shorter code matched, so `code >= first` unless
        // this length has no codes (then count is 0 and the wrap fails).
        if code.wrapping_sub(t.first[l]) < t.count[l] {
            return (
                usize::from(t.sorted[(t.start[l] + code - t.first[l]) as usize]),
                len,
            );
        }
        len += 1;
    }
    // Unreachable: the code is complete (Kraft sum 1), every 30-bit window
    // is some symbol's prefix.
    (EOS, 30)
}

/// Appends the decoding of `src` to `dst`. Errors per RFC 7541 5.2: EOS
/// inside the string, padding over 7 bits, or padding that is not all 1s.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), DecodeError> {
    let start = dst.len();
    // Codes are at least 5 bits; +2 for the pair written past the end.
    dst.resize(start + src.len() * 8 / 5 + 2, 0);
    match decode_into(src, &mut dst[start..]) {
        Ok(n) => {
            dst.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            dst.truncate(start);
            Err(e)
        }
    }
}

/// Decodes `src` into `out` (large enough), returning the length.
fn decode_into(src: &[u8], out: &mut [u8]) -> Result<usize, DecodeError> {
    // The next `nbits` input bits, left-justified. Bits below them are
    // either 0 or, after a word refill, the following input bits, which the
    // next refill ORs in again at the same place.
    let mut acc: u64 = 0;
    let mut nbits: u32 = 0;
    let mut i = 0;
    let mut w = 0;
    loop {
        if let Some(word) = src.get(i..).and_then(|s| s.first_chunk::<8>()) {
            acc |= u64::from_be_bytes(*word) >> nbits;
            let bytes = (63 - nbits) / 8;
            i += bytes as usize;
            nbits += bytes * 8;
        } else {
            while nbits <= 56 {
                let Some(&b) = src.get(i) else { break };
                acc |= u64::from(b) << (56 - nbits);
                nbits += 8;
                i += 1;
            }
        }
        // Every bit a lookup reads is input while 32 are left.
        while nbits >= 32 {
            let e = TABLES.pairs[(acc >> (64 - PAIR_BITS)) as usize];
            let len = if e != 0 {
                out[w] = e as u8;
                out[w + 1] = (e >> 8) as u8;
                w += ((e >> 16) & 3) as usize;
                (e >> 18) & 0x1f
            } else {
                let (sym, len) = symbol((acc >> 32) as u32);
                if sym == EOS {
                    return Err(DecodeError("huffman EOS in string"));
                }
                out[w] = sym as u8;
                w += 1;
                len
            };
            acc <<= len;
            nbits -= len;
        }
        if i < src.len() {
            continue;
        }
        // The last bits: pad with 1s, so that a tail of EOS's prefix
        // decodes as EOS, longer than what is left.
        while nbits > 0 {
            let filled = acc | (u64::MAX >> nbits);
            let e = TABLES.pairs[(filled >> (64 - PAIR_BITS)) as usize];
            let len = (e >> 18) & 0x1f;
            if e != 0 && len <= nbits {
                out[w] = e as u8;
                out[w + 1] = (e >> 8) as u8;
                w += ((e >> 16) & 3) as usize;
                acc <<= len;
                nbits -= len;
                continue;
            }
            let (sym, len) = symbol((filled >> 32) as u32);
            if len > nbits {
                if acc >> (64 - nbits) != (1 << nbits) - 1 {
                    return Err(DecodeError("bad huffman padding"));
                }
                if nbits > 7 {
                    return Err(DecodeError("huffman padding over 7 bits"));
                }
                break;
            }
            if sym == EOS {
                return Err(DecodeError("huffman EOS in string"));
            }
            out[w] = sym as u8;
            w += 1;
            acc <<= len;
            nbits -= len;
        }
        return Ok(w);
    }
}

/// The length of `src` Huffman-encoded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(CODES[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-encoded to `dst`, padded with the 1s of EOS.
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    dst.reserve(encoded_len(src));
    let mut acc: u64 = 0;
    let mut nbits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        nbits += u32::from(len);
        while nbits >= 8 {
            nbits -= 8;
            dst.push((acc >> nbits) as u8);
        }
    }
    if nbits > 0 {
        dst.push(((acc << (8 - nbits)) as u8) | (0xff >> nbits));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64: reproducible randomness without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Hex as the RFC prints it.
    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn dec(src: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut v = Vec::new();
        decode(src, &mut v).map(|()| v)
    }

    #[test]
    fn rfc_strings() {
        for (text, code) in [
            (&b"www.example.com"[..], "f1e3c2e5f23a6ba0ab90f4ff"),
            (b"no-cache", "a8eb10649cbf"),
            (b"custom-key", "25a849e95ba97d7f"),
            (b"custom-value", "25a849e95bb8e8b4bf"),
            (b"302", "6402"),
            (b"private", "aec3771a4b"),
            (
                b"Mon, 21 Oct 2013 20:13:21 GMT",
                "d07abe941054d444a8200595040b8166e082a62d1bff",
            ),
            (
                b"https://www.example.com",
                "9d29ad171863c78f0b97c8e9ae82ae43d3",
            ),
        ] {
            let mut out = Vec::new();
            encode(text, &mut out);
            assert_eq!(out, hex(code), "{}", String::from_utf8_lossy(text));
            assert_eq!(encoded_len(text), out.len());
            assert_eq!(dec(&out).unwrap(), text);
        }
    }

    #[test]
    fn roundtrip_every_byte() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for b in 0..=255u8 {
            let mut out = Vec::new();
            encode(&[b, b, b], &mut out);
            assert_eq!(dec(&out).unwrap(), [b, b, b]);
        }
        for _ in 0..2000 {
            // Half printable ASCII, half any byte.
            let (base, span) = if rng.below(2) == 0 {
                (b' ', 95)
            } else {
                (0, 256)
            };
            let text: Vec<u8> = (0..rng.below(64))
                .map(|_| base + rng.below(span) as u8)
                .collect();
            let mut out = Vec::new();
            encode(&text, &mut out);
            assert_eq!(dec(&out).unwrap(), text);
        }
    }

    #[test]
    fn rejects_eos_in_string() {
        // 'a' (00011), then EOS's 30 ones, then 5 bits of padding.
        let bits: u64 = (0b00011 << 35) | (0x3fff_ffff << 5) | 0b11111;
        let bytes = bits.to_be_bytes();
        assert_eq!(dec(&bytes[3..]), Err(DecodeError("huffman EOS in string")));
        assert_eq!(
            dec(&[0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError("huffman EOS in string"))
        );
    }

    #[test]
    fn rejects_long_padding() {
        // "a" is 5 bits + 3 of padding; one more byte of 1s is 11 bits.
        assert_eq!(dec(&[0x1f]).unwrap(), b"a");
        assert_eq!(
            dec(&[0x1f, 0xff]),
            Err(DecodeError("huffman padding over 7 bits"))
        );
        assert_eq!(
            dec(&[0xff]),
            Err(DecodeError("huffman padding over 7 bits"))
        );
    }

    #[test]
    fn rejects_padding_with_a_zero() {
        // "a" then padding 101, and then 110.
        assert_eq!(dec(&[0x1d]), Err(DecodeError("bad huffman padding")));
        assert_eq!(dec(&[0x1e]), Err(DecodeError("bad huffman padding")));
        // A code cut short: the first 8 bits of 0x3fb (10 bits).
        assert_eq!(dec(&[0xfe]), Err(DecodeError("bad huffman padding")));
    }
}
