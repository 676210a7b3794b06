//! HPACK decoding of arbitrary header blocks on one connection: it must
//! never panic and the dynamic table must stay within its limit; and what
//! decodes is re-encoded by our `Encoder` (its table size changing between
//! blocks) and decoded again by a fresh decoder, block after block, to the
//! same fields. Every Huffman string that decodes re-encodes to itself
//! (padding is forced, so the code is one-to-one).
//!
//! Input: byte 0 picks the decoder's table limit, byte 1 the header list
//! limit, byte 2 the encoder's table sizes; then blocks, each a length byte
//! and that many bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::http2::hpack::{huffman, DecodeError, Decoder, Encoder};

const TABLE_LIMITS: [usize; 6] = [0, 32, 64, 256, 4096, 65536];
const LIST_LIMITS: [usize; 4] = [usize::MAX, 0, 100, 1000];
const PEER_SIZES: [usize; 8] = [4096, 0, 40, 100, 256, 1000, 4096, 65536];

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fuzz_target!(|data: &[u8]| {
    let Some((&[t, l, s], mut rest)) = data.split_first_chunk::<3>() else {
        return;
    };
    let max_table = TABLE_LIMITS[usize::from(t) % TABLE_LIMITS.len()];
    let max_list = LIST_LIMITS[usize::from(l) % LIST_LIMITS.len()];
    let mut dec = Decoder::new(max_table);
    let mut enc = Encoder::new();
    let mut again = Decoder::new(4096);
    let mut round = 0;
    while let Some((&n, tail)) = rest.split_first() {
        let (block, next) = tail.split_at(usize::from(n).min(tail.len()));
        rest = next;
        round += 1;

        let mut out = Vec::new();
        if huffman::decode(block, &mut out).is_ok() {
            let mut back = Vec::new();
            huffman::encode(&out, &mut back);
            assert_eq!(back, block, "huffman re-encoding differs");
        }

        let mut fields: Fields = Vec::new();
        let r = dec.decode(block, max_list, |n, v| {
            fields.push((n.to_vec(), v.to_vec()))
        });
        assert!(dec.table_size() <= max_table, "table over its limit");
        match r {
            Ok(()) => {}
            Err(DecodeError::TooLarge) => {
                let size: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
                assert!(size <= max_list, "fields passed on past the limit");
                continue;
            }
            // A connection error: nothing follows.
            Err(DecodeError::Compression(_)) => return,
        }

        if (usize::from(s) + round) % 3 == 0 {
            enc.set_peer_table_size(PEER_SIZES[(usize::from(s) + round) % PEER_SIZES.len()]);
        }
        let mut wire = Vec::new();
        enc.begin(&mut wire);
        for (n, v) in &fields {
            enc.field(n, v, &mut wire);
        }
        let mut decoded: Fields = Vec::new();
        let r = again.decode(&wire, usize::MAX, |n, v| {
            decoded.push((n.to_vec(), v.to_vec()))
        });
        assert_eq!(r, Ok(()), "our own encoding does not decode");
        assert_eq!(decoded, fields, "round trip differs");
    }
});
