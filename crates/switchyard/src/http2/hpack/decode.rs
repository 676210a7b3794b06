//! Header block decoding (RFC 7541 3, 5, 6): integers, strings, the four
//! field representations and dynamic table size updates.

use super::table::{entry_size, DynamicTable, STATIC};
use super::{huffman, DecodeError};

const TRUNCATED_INT: DecodeError = DecodeError::Compression("truncated integer");
const OVERFLOW: DecodeError = DecodeError::Compression("integer overflow");
const TRUNCATED_STR: DecodeError = DecodeError::Compression("truncated string");
const OUT_OF_RANGE: DecodeError = DecodeError::Compression("index out of range");

/// The decoding side of one connection: its dynamic table and scratch
/// buffers.
pub struct Decoder {
    table: DynamicTable,
    max_table: usize,
    /// Huffman-decoded strings: two, so that a name and a value can both be
    /// borrowed by the callback.
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

/// RFC 7541 5.1, with the prefix's `bits` low bits of the first byte.
/// Values past u32 (or with over 5 continuation bytes) are refused: no
/// legitimate length or index comes near, and the bound keeps the
/// arithmetic simple.
fn read_int(block: &[u8], pos: &mut usize, bits: u32) -> Result<usize, DecodeError> {
    let mask = ((1u32 << bits) - 1) as u8;
    let first = block.get(*pos).ok_or(TRUNCATED_INT)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(mask);
    for shift in [0, 7, 14, 21, 28] {
        let b = *block.get(*pos).ok_or(TRUNCATED_INT)?;
        *pos += 1;
        value += u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return u32::try_from(value)
                .map(|v| v as usize)
                .map_err(|_| OVERFLOW);
        }
    }
    Err(OVERFLOW)
}

/// RFC 7541 5.2: a raw string is borrowed from the block, a Huffman one
/// decoded into `buf`.
fn read_string<'a>(
    block: &'a [u8],
    pos: &mut usize,
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], DecodeError> {
    let huffman = block.get(*pos).ok_or(TRUNCATED_STR)? & 0x80 != 0;
    let len = read_int(block, pos, 7)?;
    let end = pos.checked_add(len).ok_or(TRUNCATED_STR)?;
    let raw = block.get(*pos..end).ok_or(TRUNCATED_STR)?;
    *pos = end;
    if !huffman {
        return Ok(raw);
    }
    buf.clear();
    huffman::decode(raw, buf)?;
    Ok(&buf[..])
}

/// The field at HPACK index `idx` (1-based, static then dynamic).
fn lookup(table: &DynamicTable, idx: usize) -> Result<(&[u8], &[u8]), DecodeError> {
    match idx {
        0 => Err(DecodeError::Compression("index 0")),
        1..=61 => Ok(STATIC[idx - 1]),
        _ => table.get(idx - 62).ok_or(OUT_OF_RANGE),
    }
}

impl Decoder {
    /// A decoder whose dynamic table may hold at most `max_table` bytes
    /// (what we announce as SETTINGS_HEADER_TABLE_SIZE; 4096 by default).
    /// A size update from the peer above it is an error.
    pub fn new(max_table: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table),
            max_table,
            name_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    /// The dynamic table's current size (RFC 7541 4.1), never above the
    /// `max_table` given to `new`.
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Decodes one complete header block (a HEADERS payload and its
    /// CONTINUATIONs, joined, padding/priority already removed), calling
    /// `field(name, value)` for each field in order, as sent (no
    /// lowercasing, no validation). Size updates are only valid before the
    /// first field (RFC 7541 4.2) and up to `max_table`; index 0 is an error.
    /// Once the list size (name + value + 32 per field) passes `max_list`,
    /// `field` is no longer called but decoding goes on to the end, keeping
    /// the table in sync, and the result is `Err(TooLarge)` unless a
    /// `Compression` error occurs.
    pub fn decode<F: FnMut(&[u8], &[u8])>(
        &mut self,
        block: &[u8],
        max_list: usize,
        mut field: F,
    ) -> Result<(), DecodeError> {
        let Decoder {
            table,
            max_table,
            name_buf,
            value_buf,
        } = self;
        let mut pos = 0;
        let mut list = 0usize;
        let mut emit = |name: &[u8], value: &[u8]| {
            list = list.saturating_add(entry_size(name, value));
            if list <= max_list {
                field(name, value);
            }
        };
        let mut seen_field = false;
        while let Some(&b) = block.get(pos) {
            if b & 0xe0 == 0x20 {
                if seen_field {
                    return Err(DecodeError::Compression("table size update after a field"));
                }
                let size = read_int(block, &mut pos, 5)?;
                if size > *max_table {
                    return Err(DecodeError::Compression("table size update over the limit"));
                }
                table.set_max(size);
                continue;
            }
            seen_field = true;
            if b & 0x80 != 0 {
                let idx = read_int(block, &mut pos, 7)?;
                let (name, value) = lookup(table, idx)?;
                emit(name, value);
            } else if b & 0x40 != 0 {
                // With incremental indexing: a name from the dynamic table is
                // copied, as inserting may evict the entry it came from.
                let idx = read_int(block, &mut pos, 6)?;
                let name: &[u8] = match idx {
                    0 => read_string(block, &mut pos, name_buf)?,
                    1..=61 => STATIC[idx - 1].0,
                    _ => {
                        let (n, _) = table.get(idx - 62).ok_or(OUT_OF_RANGE)?;
                        name_buf.clear();
                        name_buf.extend_from_slice(n);
                        &name_buf[..]
                    }
                };
                let value = read_string(block, &mut pos, value_buf)?;
                emit(name, value);
                table.insert(name, value);
            } else {
                // Without indexing (0000) or never indexed (0001): the same
                // to a decoder that forwards nothing as is.
                let idx = read_int(block, &mut pos, 4)?;
                let name = match idx {
                    0 => read_string(block, &mut pos, name_buf)?,
                    _ => lookup(table, idx)?.0,
                };
                let value = read_string(block, &mut pos, value_buf)?;
                emit(name, value);
            }
        }
        if list > max_list {
            return Err(DecodeError::TooLarge);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::hpack::test_util::hex;

    type Fields = Vec<(String, String)>;

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError> {
        let mut out = Vec::new();
        d.decode(block, usize::MAX, |n, v| out.push((text(n), text(v))))
            .map(|()| out)
    }

    /// "name: value" fields joined by '|'.
    fn pairs(list: &str) -> Fields {
        let split = |f: &str| {
            f.split_once(": ")
                .map(|(n, v)| (n.to_string(), v.to_string()))
        };
        list.split('|').filter_map(split).collect()
    }

    /// Decodes the blocks in turn on one decoder, checking the fields, the
    /// dynamic table after each (newest first) and its size.
    fn sequence(max_table: usize, blocks: [&str; 3], expect: &[(&str, &str, usize); 3]) {
        let mut d = Decoder::new(max_table);
        for (i, (block, (fields, table, size))) in blocks.iter().zip(expect).enumerate() {
            assert_eq!(
                decode(&mut d, &hex(block)).unwrap(),
                pairs(fields),
                "block {i}"
            );
            let entries = (0..d.table.len()).filter_map(|i| d.table.get(i));
            let entries: Fields = entries.map(|(n, v)| (text(n), text(v))).collect();
            assert_eq!(entries, pairs(table), "block {i}");
            assert_eq!(d.table_size(), *size, "block {i}");
        }
    }

    #[test]
    fn integer_examples_c1() {
        let mut pos = 0;
        assert_eq!(read_int(&[0xea], &mut pos, 5), Ok(10));
        pos = 0;
        assert_eq!(read_int(&[0x1f, 0x9a, 0x0a], &mut pos, 5), Ok(1337));
        assert_eq!(pos, 3);
        pos = 0;
        assert_eq!(read_int(&[42], &mut pos, 8), Ok(42));
    }

    const REQUESTS: &[(&str, &str, usize); 3] = &[
        (
            ":method: GET|:scheme: http|:path: /|:authority: www.example.com",
            ":authority: www.example.com",
            57,
        ),
        (
            ":method: GET|:scheme: http|:path: /|:authority: www.example.com|\
             cache-control: no-cache",
            "cache-control: no-cache|:authority: www.example.com",
            110,
        ),
        (
            ":method: GET|:scheme: https|:path: /index.html|:authority: www.example.com|\
             custom-key: custom-value",
            "custom-key: custom-value|cache-control: no-cache|:authority: www.example.com",
            164,
        ),
    ];

    #[test]
    fn rfc_c3_requests() {
        let blocks = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        sequence(4096, blocks, REQUESTS);
    }

    #[test]
    fn rfc_c4_requests_huffman() {
        let blocks = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        sequence(4096, blocks, REQUESTS);
    }

    const RESPONSES: &[(&str, &str, usize); 3] = &[
        (
            ":status: 302|cache-control: private|date: Mon, 21 Oct 2013 20:13:21 GMT|\
             location: https://www.example.com",
            "location: https://www.example.com|date: Mon, 21 Oct 2013 20:13:21 GMT|\
             cache-control: private|:status: 302",
            222,
        ),
        (
            ":status: 307|cache-control: private|date: Mon, 21 Oct 2013 20:13:21 GMT|\
             location: https://www.example.com",
            ":status: 307|location: https://www.example.com|\
             date: Mon, 21 Oct 2013 20:13:21 GMT|cache-control: private",
            222,
        ),
        (
            ":status: 200|cache-control: private|date: Mon, 21 Oct 2013 20:13:22 GMT|\
             location: https://www.example.com|content-encoding: gzip|\
             set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1|\
             content-encoding: gzip|date: Mon, 21 Oct 2013 20:13:22 GMT",
            215,
        ),
    ];

    #[test]
    fn rfc_c5_responses() {
        let blocks = [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
             3d31",
        ];
        sequence(256, blocks, RESPONSES);
    }

    #[test]
    fn rfc_c6_responses_huffman() {
        let blocks = [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ];
        sequence(256, blocks, RESPONSES);
    }

    #[test]
    fn rfc_c2_representations() {
        let mut d = Decoder::new(4096);
        let custom = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        assert_eq!(
            decode(&mut d, &custom).unwrap(),
            pairs("custom-key: custom-header")
        );
        assert_eq!(d.table_size(), 55);
        let path = hex("040c 2f73 616d 706c 652f 7061 7468");
        assert_eq!(decode(&mut d, &path).unwrap(), pairs(":path: /sample/path"));
        let never = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
        assert_eq!(decode(&mut d, &never).unwrap(), pairs("password: secret"));
        assert_eq!(d.table_size(), 55);
    }

    fn err(max_table: usize, block: &[u8]) -> DecodeError {
        decode(&mut Decoder::new(max_table), block).unwrap_err()
    }

    #[test]
    fn rejects_malformed_blocks() {
        let c = DecodeError::Compression;
        assert_eq!(err(4096, &[0x80]), c("index 0"));
        assert_eq!(err(4096, &[0xbe]), c("index out of range"));
        assert_eq!(err(4096, &[0x40 | 62, 0x01, b'x']), c("index out of range"));
        assert_eq!(
            err(4096, &[0x0f, 0x2f, 0x01, b'x']),
            c("index out of range")
        );
        // One entry (62): 63 is past it.
        assert_eq!(
            err(4096, &[0x41, 0x01, b'a', 0xbe, 0xbf]),
            c("index out of range")
        );
        assert_eq!(
            err(100, &[0x3f, 0x46]),
            c("table size update over the limit")
        );
        assert_eq!(
            err(4096, &[0x82, 0x20]),
            c("table size update after a field")
        );
        assert_eq!(err(4096, &[0xff]), c("truncated integer"));
        assert_eq!(err(4096, &[0xff, 0x80]), c("truncated integer"));
        assert_eq!(err(4096, &[0x04, 0x05, b'/', b'a']), c("truncated string"));
        assert_eq!(err(4096, &[0x40]), c("truncated string"));
        assert_eq!(
            err(4096, &[0x04, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            c("integer overflow")
        );
        assert_eq!(
            err(4096, &[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
            c("integer overflow")
        );
        assert_eq!(
            err(4096, &[0x04, 0x81, 0xff]),
            c("huffman padding over 7 bits")
        );
        // Several size updates before the first field are fine.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &[0x20, 0x3f, 0xe1, 0x1f, 0x82]).unwrap(),
            pairs(":method: GET")
        );
        assert_eq!(d.table.max(), 4096);
    }

    #[test]
    fn too_large_keeps_table_in_sync() {
        let mut d = Decoder::new(4096);
        // :method GET (42), then two literals with indexing (a: 1 -> 34,
        // bb: 22 -> 36), then an indexed :path (37).
        let block = [
            0x82, 0x40, 1, b'a', 1, b'1', 0x40, 2, b'b', b'b', 2, b'2', b'2', 0x84,
        ];
        let mut seen = Vec::new();
        let r = d.decode(&block, 80, |n, _| seen.push(n.to_vec()));
        assert_eq!(r, Err(DecodeError::TooLarge));
        assert_eq!(seen, [b":method".to_vec(), b"a".to_vec()]);
        // The entry inserted after the limit is 62, the earlier one 63.
        let next = decode(&mut d, &[0xbe, 0xbf]).unwrap();
        assert_eq!(next, pairs("bb: 22|a: 1"));
        // Exactly at the limit is fine.
        assert_eq!(d.decode(&[0x82], 42, |_, _| {}), Ok(()));
        assert_eq!(d.decode(&[0x82], 41, |_, _| {}), Err(DecodeError::TooLarge));
    }
}
