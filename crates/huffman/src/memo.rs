//! A connection's memory of the Huffman strings its client sent.
//!
//! A QPACK decoder without a dynamic table (Switchyard's HTTP/3 server
//! announces a capacity of 0, as h3 does) gets every field of every
//! request as a literal, Huffman-coded by browsers and most clients:
//! the same authority, user agent, accept and cookie values, coded the
//! same way, request after request. Decoding them was 2,800 of the 60,100
//! user-space instructions of a 1 KB HTTP/3 request (BENCHMARKS.md,
//! "HTTP/3"). Comparing the coded bytes with the last ones seen for the
//! same field costs a `memcmp`, and a match hands back what they decoded
//! to last time.
//!
//! Bounded per connection: 32 slots, each keeping one string of at most
//! 256 coded bytes and its decoding (a buffer of at most 411 bytes: the
//! shortest code is 5 bits), about 21 KB when full; a longer string is
//! decoded each time, into the caller's buffer.

use crate::{decode, DecodeError};

/// Slots; a key's home slot is the key modulo this.
const SLOTS: usize = 32;
/// Slots a key may take, from its home slot on. Keys collide: oha's
/// requests carry user-agent (static index 95) and accept-encoding (31),
/// both at home in slot 31, and with one slot each they evicted each other
/// on every request: two decodings per request where none was needed
/// (callgrind, 1 KB HTTP/3 through oha: 8,040 decodings for 4,000
/// requests). Four ways keep any four colliding keys.
const WAYS: usize = 4;
/// The longest coded string a slot keeps.
pub const MAX_KEPT: usize = 256;

#[derive(Default)]
struct Slot {
    /// The field this slot holds a string of; `None` when empty.
    key: Option<u32>,
    encoded: Vec<u8>,
    decoded: Vec<u8>,
}

/// The last Huffman string seen per field (by key), decoded.
#[derive(Default)]
pub struct Memo {
    slots: [Slot; SLOTS],
    /// Strings decoded (not answered from a slot): what the tests count.
    #[cfg(test)]
    decodings: u64,
}

impl Memo {
    pub fn new() -> Self {
        Self::default()
    }

    /// `src` (a Huffman-coded string of the field `key`, for QPACK the
    /// static table index of its name) decoded: from the slot when the
    /// field's last string was the same bytes, else decoded into the slot,
    /// or into `scratch` when longer than a slot keeps.
    pub fn decode<'a>(
        &'a mut self,
        key: u32,
        src: &[u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], DecodeError> {
        if src.len() > MAX_KEPT {
            #[cfg(test)]
            {
                self.decodings += 1;
            }
            scratch.clear();
            decode(src, scratch)?;
            return Ok(scratch);
        }
        let slot = &mut self.slots[self.slot_for(key)];
        if slot.key != Some(key) || slot.encoded != src {
            #[cfg(test)]
            {
                self.decodings += 1;
            }
            slot.key = None;
            slot.decoded.clear();
            decode(src, &mut slot.decoded)?;
            slot.encoded.clear();
            slot.encoded.extend_from_slice(src);
            slot.key = Some(key);
        }
        Ok(&slot.decoded)
    }

    /// The slot holding `key`, else an empty one among its ways, else its
    /// home slot (whose string is then replaced).
    fn slot_for(&self, key: u32) -> usize {
        let home = key as usize % SLOTS;
        let mut empty = None;
        for way in 0..WAYS {
            let i = (home + way) % SLOTS;
            match self.slots[i].key {
                Some(k) if k == key => return i,
                None if empty.is_none() => empty = Some(i),
                _ => {}
            }
        }
        empty.unwrap_or(home)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;

    fn coded(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        encode(s.as_bytes(), &mut v);
        v
    }

    #[test]
    fn a_string_seen_before_is_handed_back_from_its_slot() {
        let mut m = Memo::new();
        let mut scratch = Vec::new();
        let ua = coded("Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/133.0");
        let first = m.decode(95, &ua, &mut scratch).unwrap().as_ptr();
        let again = m.decode(95, &ua, &mut scratch).unwrap();
        assert_eq!(
            again,
            b"Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/133.0"
        );
        assert_eq!(again.as_ptr(), first, "the second lookup decodes nothing");
        assert!(
            scratch.is_empty(),
            "short strings never use the caller's buffer"
        );
    }

    #[test]
    fn another_string_or_another_field_is_decoded_again() {
        let mut m = Memo::new();
        let mut scratch = Vec::new();
        let a = coded("/index.html");
        let b = coded("/style.css");
        assert_eq!(m.decode(1, &a, &mut scratch).unwrap(), b"/index.html");
        assert_eq!(m.decode(1, &b, &mut scratch).unwrap(), b"/style.css");
        // Key 33 shares key 1's slot: it must not answer with key 1's string.
        assert_eq!(m.decode(33, &b, &mut scratch).unwrap(), b"/style.css");
        assert_eq!(m.decode(1, &a, &mut scratch).unwrap(), b"/index.html");
    }

    #[test]
    fn keys_whose_home_slots_collide_are_both_kept() {
        let mut m = Memo::new();
        let mut scratch = Vec::new();
        let ua = coded("oha/1.13.0");
        let enc = coded("gzip, br, deflate");
        // Requests alternate the two fields, as a client sends them.
        for _ in 0..3 {
            assert_eq!(m.decode(95, &ua, &mut scratch).unwrap(), b"oha/1.13.0");
            assert_eq!(
                m.decode(31, &enc, &mut scratch).unwrap(),
                b"gzip, br, deflate"
            );
        }
        assert_eq!(m.decodings, 2, "each string decoded once, then kept");
        // Five keys at home in slot 1: the fifth takes the home slot, and
        // every answer is still the string of its own key.
        let strings: Vec<(u32, Vec<u8>, String)> = (0..5u32)
            .map(|i| {
                (
                    1 + 32 * i,
                    coded(&format!("/path/{i}")),
                    format!("/path/{i}"),
                )
            })
            .collect();
        for _ in 0..2 {
            for (k, c, plain) in &strings {
                assert_eq!(m.decode(*k, c, &mut scratch).unwrap(), plain.as_bytes());
            }
        }
    }

    #[test]
    fn a_long_string_goes_to_the_callers_buffer_and_is_not_kept() {
        let mut m = Memo::new();
        let mut scratch = Vec::new();
        let long = "a=b; ".repeat(100);
        let c = coded(&long);
        assert!(c.len() > MAX_KEPT);
        assert_eq!(m.decode(5, &c, &mut scratch).unwrap(), long.as_bytes());
        assert_eq!(scratch, long.as_bytes());
        assert!(m.slots.iter().all(|s| s.key.is_none()));
    }

    #[test]
    fn a_bad_string_is_refused_and_leaves_no_entry() {
        let mut m = Memo::new();
        let mut scratch = Vec::new();
        // 30 one-bits: EOS, which a string must not contain (RFC 7541 5.2).
        let bad = [0xff, 0xff, 0xff, 0xfc];
        assert!(m.decode(3, &bad, &mut scratch).is_err());
        assert!(
            m.decode(3, &bad, &mut scratch).is_err(),
            "not answered from a slot"
        );
        let ok = coded("gzip");
        assert_eq!(m.decode(3, &ok, &mut scratch).unwrap(), b"gzip");
    }
}
