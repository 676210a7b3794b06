//! Base64 (RFC 4648) for the few places outside the WAF that need it: the
//! etcd gateway's keys and values, the Sec-WebSocket-Key of a WebSocket
//! opened over HTTP/2. (The WAF's `t:base64*` keep ModSecurity's own
//! lenient rules in `waf::transform`.)

/// Standard base64 with padding.
pub fn encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What each byte is worth in either alphabet (standard or URL-safe);
/// `NOT` for a byte outside both (its high bits set, so one test per four
/// characters finds any).
const NOT: u8 = 0xff;
const VALUES: [u8; 256] = {
    let mut t = [NOT; 256];
    let mut i = 0;
    while i < 26 {
        t[b'A' as usize + i] = i as u8;
        t[b'a' as usize + i] = 26 + i as u8;
        i += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = 52 + d as u8;
        d += 1;
    }
    t[b'+' as usize] = 62;
    t[b'-' as usize] = 62;
    t[b'/' as usize] = 63;
    t[b'_' as usize] = 63;
    t
};

/// Standard or URL-safe base64; stops at the first `=`; None on any
/// other byte outside the alphabet. Four characters at a time through a
/// table: a script's JWT check decodes three parts per request, and a
/// character at a time cost about 26 instructions each (callgrind,
/// BENCHMARKS.md "Scripting").
pub fn decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let b = &b[..b.iter().position(|c| *c == b'=').unwrap_or(b.len())];
    let mut out = Vec::with_capacity(b.len() / 4 * 3 + 2);
    let mut quads = b.chunks_exact(4);
    for q in &mut quads {
        let v = [0, 1, 2, 3].map(|i| VALUES[q[i] as usize]);
        if (v[0] | v[1] | v[2] | v[3]) & 0xc0 != 0 {
            return None;
        }
        let n =
            u32::from(v[0]) << 18 | u32::from(v[1]) << 12 | u32::from(v[2]) << 6 | u32::from(v[3]);
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    // The last one to three characters: 6 bits each, whole bytes kept.
    let (mut acc, mut bits) = (0u32, 0);
    for c in quads.remainder() {
        let v = VALUES[*c as usize];
        if v == NOT {
            return None;
        }
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_both_alphabets_padded_or_not() {
        for data in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            &[0xfb, 0xff, 0xfe],
        ] {
            let std = encode(data);
            assert_eq!(decode(&std).as_deref(), Some(data), "{std}");
            let url = std.replace('+', "-").replace('/', "_");
            assert_eq!(
                decode(url.trim_end_matches('=')).as_deref(),
                Some(data),
                "{url}"
            );
        }
        assert_eq!(decode("+/-_").as_deref(), Some(&[0xfb, 0xff, 0xbf][..]));
        // Stops at the first `=`, whatever follows.
        assert_eq!(decode("Zm9v=!!").as_deref(), Some(&b"foo"[..]));
        for bad in ["Zm9v!", "Zm 9v", "Zm9\u{e9}", "*", "Zm9vYmFy\n"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
