//! W3C Trace Context (`traceparent`, version 00): a valid incoming header
//! goes to the member unchanged and its trace-id is logged; when it is
//! missing or invalid, a new trace is started (random 16-byte trace-id,
//! 8-byte parent-id, flags 01 "sampled") and sent to the member.
//!
//! Ids are kept as lower-case hex, as they are written on the wire and in
//! the log: no conversion on either side.

/// One request's trace: ids as lower-case hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: [u8; 32],
    /// The parent-id the member sees (the client's, or ours when started).
    pub parent_id: [u8; 16],
    pub flags: [u8; 2],
    /// Started here (no valid traceparent came in).
    pub started: bool,
}

/// Length of a version-00 traceparent value.
pub const LEN: usize = 55;

fn lower_hex(s: &[u8]) -> bool {
    s.iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

fn all_zero(s: &[u8]) -> bool {
    s.iter().all(|&b| b == b'0')
}

/// A traceparent value, when valid (W3C Trace Context, section 3.2): version
/// 00 is exactly 55 characters; a later version may carry more after a
/// '-', which is ignored (and the header is still passed on unchanged).
pub fn parse(v: &[u8]) -> Option<Trace> {
    if v.len() < LEN || (v.len() > LEN && v[LEN] != b'-') {
        return None;
    }
    let (version, trace_id, parent_id, flags) = (&v[0..2], &v[3..35], &v[36..52], &v[53..55]);
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    if !lower_hex(version) || version == b"ff" || (version == b"00" && v.len() != LEN) {
        return None;
    }
    if !lower_hex(trace_id) || !lower_hex(parent_id) || !lower_hex(flags) {
        return None;
    }
    if all_zero(trace_id) || all_zero(parent_id) {
        return None;
    }
    let mut t = Trace {
        trace_id: [0; 32],
        parent_id: [0; 16],
        flags: [0; 2],
        started: false,
    };
    t.trace_id.copy_from_slice(trace_id);
    t.parent_id.copy_from_slice(parent_id);
    t.flags.copy_from_slice(flags);
    Some(t)
}

fn hex(bytes: &[u8], out: &mut [u8]) {
    const H: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = H[(b >> 4) as usize];
        out[2 * i + 1] = H[(b & 15) as usize];
    }
}

/// A new trace: random ids (never all zero), sampled.
pub fn start() -> Trace {
    let mut id = [0u8; 16];
    let mut parent = [0u8; 8];
    loop {
        id[..8].copy_from_slice(&next_u64().to_le_bytes());
        id[8..].copy_from_slice(&next_u64().to_le_bytes());
        parent.copy_from_slice(&next_u64().to_le_bytes());
        if id != [0; 16] && parent != [0; 8] {
            break;
        }
    }
    let mut t = Trace {
        trace_id: [0; 32],
        parent_id: [0; 16],
        flags: *b"01",
        started: true,
    };
    hex(&id, &mut t.trace_id);
    hex(&parent, &mut t.parent_id);
    t
}

impl Trace {
    /// The traceparent value of a trace started here.
    pub fn header(&self) -> [u8; LEN] {
        let mut v = [b'-'; LEN];
        v[0..2].copy_from_slice(b"00");
        v[3..35].copy_from_slice(&self.trace_id);
        v[36..52].copy_from_slice(&self.parent_id);
        v[53..55].copy_from_slice(&self.flags);
        v
    }

    pub fn trace_id_str(&self) -> &str {
        std::str::from_utf8(&self.trace_id).unwrap_or("")
    }

    pub fn parent_id_str(&self) -> &str {
        std::str::from_utf8(&self.parent_id).unwrap_or("")
    }
}

/// A fast per-thread pseudo-random number: sampling and trace ids, not
/// secrets (`crate::random`).
pub use crate::random::next_u64;

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_headers_parse_and_invalid_ones_do_not() {
        let t = parse(GOOD).expect("valid");
        assert_eq!(t.trace_id_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id_str(), "00f067aa0ba902b7");
        assert!(!t.started);
        assert_eq!(&t.header()[..], GOOD);
        // A later version may carry more fields after a dash.
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz").is_some());
        for bad in [
            &b""[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert!(parse(bad).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn started_traces_are_valid_and_differ() {
        let a = start();
        let b = start();
        assert!(a.started);
        assert_ne!(a.trace_id, b.trace_id);
        let parsed = parse(&a.header()).expect("a started trace is valid");
        assert_eq!(parsed.trace_id, a.trace_id);
        assert_eq!(parsed.flags, *b"01");
    }
}
