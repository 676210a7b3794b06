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

/// Slots, chosen by the field's key modulo this.
const SLOTS: usize = 32;
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
            scratch.clear();
            decode(src, scratch)?;
            return Ok(scratch);
        }
        let slot = &mut self.slots[key as usize % SLOTS];
        if slot.key != Some(key) || slot.encoded != src {
            slot.key = None;
            slot.decoded.clear();
            decode(src, &mut slot.decoded)?;
            slot.encoded.clear();
            slot.encoded.extend_from_slice(src);
            slot.key = Some(key);
        }
        Ok(&slot.decoded)
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
