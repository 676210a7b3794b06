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
//! Every section both decoders take is then encoded as a response head,
//! as `RequestStream::send_response_fields` encodes one (vendor/h3's
//! seventh patch: the static table asked once per field, the frame made
//! in a buffer the thread keeps): it must be one HEADERS frame whose
//! length is its own, and decode to `:status` and the same fields, names
//! lowercased. The static table's one lookup must agree with its two.
//!
//! Input: byte 0 picks the size limit (64, 512, 4,096 or 65,536 bytes of
//! RFC 9204's field size), byte 1 where the rest splits into the two
//! sections.
#![no_main]
use h3::fuzzing::{decode_memo, decode_plain, response_frame, static_lookups};
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
            if let Some(fields) = plain {
                encodes_back(&fields);
            }
        }
    }
});

/// `fields` as a response head, encoded and decoded again.
fn encodes_back(fields: &[(Vec<u8>, Vec<u8>)]) {
    for (name, value) in fields {
        let (one, pair, name_only) = static_lookups(name, value);
        let two = pair.map(|i| (i, true)).or(name_only.map(|i| (i, false)));
        assert_eq!(one, two, "static lookups of {name:?}: {value:?}");
    }
    let (frame, size) = response_frame(*b"200", fields);
    // HEADERS (type 0x01), then the payload's length as a varint.
    assert_eq!(frame.first(), Some(&1), "not a HEADERS frame: {frame:?}");
    let (len, at) = varint(&frame[1..]);
    assert_eq!(len, frame.len() - 1 - at, "frame length in {frame:?}");
    let mut expected = vec![(b":status".to_vec(), b"200".to_vec())];
    expected.extend(
        fields
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone())),
    );
    let expected_size: u64 = expected.iter().map(|(n, v)| (n.len() + v.len() + 32) as u64).sum();
    assert_eq!(size, expected_size, "field section size of {expected:?}");
    let decoded = decode_plain(&frame[1 + at..], u64::MAX);
    assert_eq!(decoded, Some(expected), "response head {frame:?}");
}

/// A QUIC varint (RFC 9000 16) at the start of `bytes`: its value and length.
fn varint(bytes: &[u8]) -> (usize, usize) {
    let len = 1usize << (bytes[0] >> 6);
    let mut value = u64::from(bytes[0] & 0x3f);
    for b in &bytes[1..len] {
        value = value << 8 | u64::from(*b);
    }
    (value as usize, len)
}
