//! Response head encoding, tuned for a proxy that encodes a head per
//! response: fields that repeat across the responses of a connection
//! (server, content-type, cache-control, vary...) go into the dynamic table
//! and cost one byte from the second response on; per-response values
//! (content-length, etag, dates of the resource...) are never inserted, so
//! they do not evict the useful entries; credentials are "never indexed" so
//! that no intermediary compresses them. Strings are sent raw: Huffman
//! would save a few bytes at a CPU cost on every response (HAProxy does the
//! same).

use super::table::{entry_size, static_exact, static_name, DynamicTable};

/// The most table we keep for a peer, whatever it allows: past about 100
/// entries, lookups cost more than the bytes they save.
const CAP: usize = 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    Index,
    NoIndex,
    Never,
}

/// By static name index: credentials are never indexed; values that change
/// with every response are not worth a table entry.
fn policy(static_idx: Option<usize>) -> Policy {
    match static_idx {
        // authorization, cookie, proxy-authorization, set-cookie
        Some(23 | 32 | 49 | 55) => Policy::Never,
        // age, content-length, content-range, etag, expires, last-modified,
        // location
        Some(21 | 28 | 30 | 34 | 36 | 44 | 46) => Policy::NoIndex,
        _ => Policy::Index,
    }
}

/// RFC 7541 5.1: `v` with a `bits`-bit prefix, the first byte's other bits
/// being `flags`.
fn put_int(out: &mut Vec<u8>, flags: u8, bits: u32, mut v: usize) {
    let mask = (1usize << bits) - 1;
    if v < mask {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | mask as u8);
    v -= mask;
    while v >= 0x80 {
        out.push(0x80 | (v & 0x7f) as u8);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// The encoding side of one connection: the dynamic table as the peer's
/// decoder has it.
pub struct Encoder {
    table: DynamicTable,
    /// The table size to use from the next block on.
    target: usize,
    /// The smallest size set since the last block began, if any was set:
    /// RFC 7541 4.2 wants it signalled before the final one.
    low: Option<usize>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder for a peer whose table size is the default 4096.
    pub fn new() -> Encoder {
        Encoder {
            table: DynamicTable::new(CAP),
            target: CAP,
            low: None,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the encoder then uses at most
    /// min(n, 4096) bytes and, when that changes the size in use, emits a
    /// size update at the start of its next block. The table itself changes
    /// only then, so a change in the middle of a block cannot desync it.
    pub fn set_peer_table_size(&mut self, n: usize) {
        let n = n.min(CAP);
        self.low = Some(self.low.map_or(n, |low| low.min(n)));
        self.target = n;
    }

    /// Starts a header block: writes a pending table size update, if any.
    /// Must be called once before the fields of each block.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        let Some(low) = self.low.take() else { return };
        if low < self.target {
            put_int(out, 0x20, 5, low);
            self.table.set_max(low);
        }
        if self.target != self.table.max() {
            put_int(out, 0x20, 5, self.target);
            self.table.set_max(self.target);
        }
    }

    /// `:status`: fully indexed for the seven codes of the static table,
    /// otherwise a literal without indexing on the static name (a status is
    /// not worth evicting anything for). Codes outside 100..=999 are the
    /// caller's bug, written as given.
    pub fn status(&mut self, code: u16, out: &mut Vec<u8>) {
        let idx = match code {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if idx != 0 {
            out.push(0x80 | idx);
            return;
        }
        debug_assert!((100..=999).contains(&code), "status {code}");
        let mut digits = [0u8; 5];
        let mut i = digits.len();
        let mut n = code;
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        out.push(0x08);
        put_string(out, &digits[i..]);
    }

    /// One regular field, `name` already lowercase. Appends its encoding to
    /// `out`.
    pub fn field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        let static_idx = static_name(name);
        if let Some(full) = static_idx.and_then(|i| static_exact(i, value)) {
            put_int(out, 0x80, 7, full);
            return;
        }
        let policy = policy(static_idx);
        let mut name_idx = static_idx.unwrap_or(0);
        if policy == Policy::Index {
            // Only indexable fields are ever in our table: the others skip
            // the search.
            let (exact, by_name) = self.table.find(name, value);
            if let Some(i) = exact {
                put_int(out, 0x80, 7, 62 + i);
                return;
            }
            if name_idx == 0 {
                name_idx = by_name.map_or(0, |i| 62 + i);
            }
            // Small entries only: a big one would evict many small ones.
            if entry_size(name, value) <= self.table.max().min(self.target) / 4 {
                put_int(out, 0x40, 6, name_idx);
                if name_idx == 0 {
                    put_string(out, name);
                }
                put_string(out, value);
                self.table.insert(name, value);
                return;
            }
        }
        put_int(
            out,
            if policy == Policy::Never { 0x10 } else { 0x00 },
            4,
            name_idx,
        );
        if name_idx == 0 {
            put_string(out, name);
        }
        put_string(out, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::hpack::test_util::Rng;
    use crate::http2::hpack::{DecodeError, Decoder};

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError> {
        let mut out = Vec::new();
        d.decode(block, usize::MAX, |n, v| out.push((n.to_vec(), v.to_vec())))
            .map(|()| out)
    }

    fn owned(list: &[(&str, &str)]) -> Fields {
        list.iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn block(e: &mut Encoder, status: u16, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        e.begin(&mut out);
        e.status(status, &mut out);
        for (n, v) in fields {
            e.field(n.as_bytes(), v.as_bytes(), &mut out);
        }
        out
    }

    #[test]
    fn integer_encoding_c1() {
        let mut out = Vec::new();
        put_int(&mut out, 0xe0, 5, 10);
        put_int(&mut out, 0, 5, 1337);
        put_int(&mut out, 0, 8, 42);
        put_int(&mut out, 0, 5, 31);
        assert_eq!(out, [0xea, 0x1f, 0x9a, 0x0a, 0x2a, 0x1f, 0x00]);
    }

    #[test]
    fn status_codes() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for code in [200u16, 204, 206, 304, 400, 404, 500, 100, 302, 503, 999] {
            let mut out = Vec::new();
            e.status(code, &mut out);
            let static_code = matches!(code, 200 | 204 | 206 | 304 | 400 | 404 | 500);
            assert_eq!(out.len(), if static_code { 1 } else { 5 }, "{code}");
            let text = code.to_string();
            assert_eq!(decode(&mut d, &out).unwrap(), owned(&[(":status", &text)]));
        }
        assert_eq!(d.table_size(), 0);
    }

    const HEAD: &[(&str, &str)] = &[
        ("server", "switchyard"),
        ("content-type", "text/html; charset=utf-8"),
        ("cache-control", "max-age=60"),
        ("vary", "accept-encoding"),
        ("x-cache", "HIT"),
    ];

    #[test]
    fn repeated_fields_become_indexed() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let first = block(&mut e, 200, HEAD);
        let second = block(&mut e, 200, HEAD);
        assert_eq!(second.len(), 1 + HEAD.len());
        assert!(second.iter().all(|b| b & 0x80 != 0));
        assert!(second.len() < first.len());
        let mut want = owned(&[(":status", "200")]);
        want.extend(owned(HEAD));
        assert_eq!(decode(&mut d, &first).unwrap(), want);
        assert_eq!(decode(&mut d, &second).unwrap(), want);
        // A new value of a known custom name reuses the name's entry.
        let mut out = Vec::new();
        e.field(b"x-cache", b"MISS", &mut out);
        assert_eq!(out[0], 0x40 | 62);
        assert_eq!(decode(&mut d, &out).unwrap(), owned(&[("x-cache", "MISS")]));
    }

    #[test]
    fn volatile_and_sensitive_fields_are_not_indexed() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for _ in 0..3 {
            let mut out = Vec::new();
            e.field(b"content-length", b"1234", &mut out);
            assert_eq!(out, [0x0f, 28 - 15, 4, b'1', b'2', b'3', b'4']);
            let len = out.len();
            e.field(b"set-cookie", b"a=b", &mut out);
            assert_eq!(out[len..], [0x1f, 55 - 15, 3, b'a', b'=', b'b']);
            let len = out.len();
            e.field(b"x-big", &[b'v'; 1100], &mut out);
            assert_eq!(out[len..len + 7], [0x00, 5, b'x', b'-', b'b', b'i', b'g']);
            assert_eq!(e.table.len(), 0);
            assert_eq!(decode(&mut d, &out).unwrap().len(), 3);
        }
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn size_update_only_at_block_start() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let mut out = Vec::new();
        e.begin(&mut out);
        assert!(out.is_empty());
        // Larger than our cap: nothing changes.
        e.set_peer_table_size(65536);
        e.begin(&mut out);
        assert!(out.is_empty());

        // A change in the middle of a block waits for the next one; the
        // field after it is already held to the new, smaller size.
        e.field(b"server", b"a", &mut out);
        e.set_peer_table_size(100);
        e.field(b"vary", b"b", &mut out);
        assert_eq!(out, [0x40 | 54, 1, b'a', 0x0f, 59 - 15, 1, b'b']);
        assert_eq!(decode(&mut d, &out).unwrap().len(), 2);

        let next = block(&mut e, 200, &[]);
        assert_eq!(next, [0x3f, 100 - 31, 0x88]);
        assert_eq!(block(&mut e, 200, &[]), [0x88]);
        decode(&mut d, &next).unwrap();
        assert_eq!(d.table_size(), e.table.size());

        // Down to 0 and back up between two blocks: both are signalled.
        e.set_peer_table_size(0);
        e.set_peer_table_size(4096);
        let next = block(&mut e, 200, &[]);
        assert_eq!(next, [0x20, 0x3f, 0xe1, 0x1f, 0x88]);
        decode(&mut d, &next).unwrap();

        // At 0 nothing is ever indexed.
        e.set_peer_table_size(0);
        let out = block(&mut e, 200, HEAD);
        assert_eq!(out[0], 0x20);
        assert_eq!(e.table.len(), 0);
        assert_eq!(decode(&mut d, &out).unwrap().len(), 1 + HEAD.len());
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn random_roundtrip_with_table_size_changes() {
        const NAMES: [&str; 14] = [
            "server",
            "content-type",
            "cache-control",
            "date",
            "content-length",
            "etag",
            "set-cookie",
            "vary",
            "x-request-id",
            "x-cache",
            "accept-encoding",
            ":status",
            "location",
            "via",
        ];
        const SIZES: [usize; 8] = [0, 32, 64, 100, 256, 1000, 4096, 8192];
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for round in 0..2000 {
            if rng.below(8) == 0 {
                for _ in 0..1 + rng.below(3) {
                    e.set_peer_table_size(SIZES[rng.below(SIZES.len())]);
                }
            }
            let mut want = Vec::new();
            let mut out = Vec::new();
            e.begin(&mut out);
            for _ in 0..rng.below(12) {
                let name: Vec<u8> = if rng.below(4) == 0 {
                    format!("x-n{}", rng.below(20)).into_bytes()
                } else {
                    NAMES[rng.below(NAMES.len())].as_bytes().to_vec()
                };
                let value: Vec<u8> = match rng.below(6) {
                    0 => (0..rng.below(300)).map(|_| rng.below(256) as u8).collect(),
                    1 => Vec::new(),
                    2 => b"200".to_vec(),
                    _ => format!("v{}", rng.below(10)).into_bytes(),
                };
                e.field(&name, &value, &mut out);
                want.push((name, value));
            }
            assert_eq!(decode(&mut d, &out).unwrap(), want, "round {round}");
            assert_eq!(d.table_size(), e.table.size(), "round {round}");
            assert!(e.table.size() <= e.table.max());
        }
    }
}
