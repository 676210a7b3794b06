//! QPACK field sections from clients (RFC 9204), through both of h3's
//! decoders: its own `decode_stateless` (a `HeaderField` per field) and
//! Switchyard's patched `decode_stateless_with` (slices, and Huffman-coded
//! values through the connection's memory, `switchyard_huffman::Memo`),
//! which every HTTP/3 request takes (vendor/h3/PATCHED.md). Nothing may
//! panic, and the two must agree on every section: the same fields in the
//! same order, or both a refusal. Two sections share one memory and are
//! decoded in turn twice, as a connection's requests are, so a value the
//! memory returns must be the one the section holds, not a remembered one.
//!
//! Input: byte 0 picks the size limit (64, 512, 4,096 or 65,536 bytes of
//! RFC 9204's field size), byte 1 where the rest splits into the two
//! sections.
#![no_main]
use h3::fuzzing::{decode_memo, decode_plain};
use libfuzzer_sys::fuzz_target;
use switchyard_huffman::Memo;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max_size = [64u64, 512, 4096, 65536][usize::from(data[0] % 4)];
    let rest = &data[2..];
    let split = usize::from(data[1]) * rest.len() / 255;
    let sections = [&rest[..split], &rest[split..]];
    let mut memo = Memo::new();
    for round in 0..2 {
        for (i, section) in sections.iter().enumerate() {
            let plain = decode_plain(section, max_size);
            let memo_fields = decode_memo(section, max_size, &mut memo);
            assert_eq!(
                plain, memo_fields,
                "section {i} in round {round}: the two decoders disagree on {section:?}"
            );
        }
    }
});
