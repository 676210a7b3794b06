//! HTTP/2 frames (RFC 9113 section 4 and 6): the 9-byte header, the kinds,
//! flags, error codes and settings, and writers that append a frame to an
//! output buffer.

pub const HEADER_LEN: usize = 9;

/// The client connection preface, before the first frame.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame kinds.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 section 7).
pub mod code {
    pub const NO_ERROR: u32 = 0x0;
    pub const PROTOCOL_ERROR: u32 = 0x1;
    pub const INTERNAL_ERROR: u32 = 0x2;
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    pub const STREAM_CLOSED: u32 = 0x5;
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    pub const REFUSED_STREAM: u32 = 0x7;
    pub const CANCEL: u32 = 0x8;
    /// The connection a CONNECT stream carries failed (RFC 9113 8.5).
    pub const CONNECT_ERROR: u32 = 0xa;
    pub const COMPRESSION_ERROR: u32 = 0x9;
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// Setting identifiers (RFC 9113 section 6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// RFC 8441 3: the extended CONNECT (`:protocol`) may be used.
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// The smallest SETTINGS_MAX_FRAME_SIZE, and every peer's until it says more.
pub const MIN_MAX_FRAME: u32 = 16_384;
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;
/// Flow-control windows may not pass 2^31-1.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// Every window starts here until SETTINGS say otherwise.
pub const DEFAULT_WINDOW: u32 = 65_535;

/// A frame's 9-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    /// The stream, with the reserved bit dropped (RFC 9113 4.1: ignored).
    pub stream: u32,
}

impl Head {
    /// Reads a header from the first 9 bytes of `b`; None when fewer.
    pub fn parse(b: &[u8]) -> Option<Head> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Head {
            len: (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize,
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Appends a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME as usize);
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]);
}

/// Rewrites the length of the frame header written at `at`.
pub fn patch_len(out: &mut [u8], at: usize, len: usize) {
    let l = (len as u32).to_be_bytes();
    out[at..at + 3].copy_from_slice(&l[1..]);
}

pub fn put_settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    put_head(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn put_ping_ack(out: &mut Vec<u8>, data: &[u8; 8]) {
    put_head(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(data);
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub fn put_rst(out: &mut Vec<u8>, stream: u32, code: u32) {
    put_head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    put_head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
}

pub fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end: bool) {
    let flags = if end { flag::END_STREAM } else { 0 };
    put_head(out, data.len(), kind::DATA, flags, stream);
    out.extend_from_slice(data);
}

/// Frames a header block already encoded at `out[at + 9..]` behind a
/// placeholder header at `at`: one HEADERS frame when it fits in
/// `max_frame`, else HEADERS and CONTINUATION frames (the block is moved
/// to make room for their headers; heads that large are rare).
pub fn finish_headers(
    out: &mut Vec<u8>,
    at: usize,
    stream: u32,
    end_stream: bool,
    max_frame: usize,
) {
    let block_len = out.len() - at - HEADER_LEN;
    let end = if end_stream { flag::END_STREAM } else { 0 };
    if block_len <= max_frame {
        let mut h = Vec::with_capacity(HEADER_LEN);
        put_head(
            &mut h,
            block_len,
            kind::HEADERS,
            end | flag::END_HEADERS,
            stream,
        );
        out[at..at + HEADER_LEN].copy_from_slice(&h);
        return;
    }
    let block = out.split_off(at + HEADER_LEN);
    out.truncate(at);
    let mut pieces = block.chunks(max_frame).peekable();
    let mut first = true;
    while let Some(p) = pieces.next() {
        let last = pieces.peek().is_none();
        let (k, mut f) = if first {
            (kind::HEADERS, end)
        } else {
            (kind::CONTINUATION, 0)
        };
        if last {
            f |= flag::END_HEADERS;
        }
        put_head(out, p.len(), k, f, stream);
        out.extend_from_slice(p);
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trip_drops_the_reserved_bit() {
        let mut out = Vec::new();
        put_head(&mut out, 70_000, kind::HEADERS, flag::END_HEADERS, 7);
        out[5] |= 0x80;
        let h = Head::parse(&out).unwrap();
        assert_eq!(
            h,
            Head {
                len: 70_000,
                kind: kind::HEADERS,
                flags: flag::END_HEADERS,
                stream: 7
            }
        );
        assert!(Head::parse(&out[..8]).is_none());
    }

    #[test]
    fn large_blocks_split_into_continuations() {
        let mut out = vec![0xaa];
        let at = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        out.extend((0..40u8).collect::<Vec<_>>());
        finish_headers(&mut out, at, 3, true, 16);
        let mut pos = 1;
        let mut seen = Vec::new();
        let mut block = Vec::new();
        while pos < out.len() {
            let h = Head::parse(&out[pos..]).unwrap();
            seen.push((h.kind, h.flags, h.len));
            block.extend_from_slice(&out[pos + HEADER_LEN..pos + HEADER_LEN + h.len]);
            pos += HEADER_LEN + h.len;
        }
        assert_eq!(
            seen,
            vec![
                (kind::HEADERS, flag::END_STREAM, 16),
                (kind::CONTINUATION, 0, 16),
                (kind::CONTINUATION, flag::END_HEADERS, 8)
            ]
        );
        assert_eq!(block, (0..40u8).collect::<Vec<_>>());
        let mut small = vec![0; HEADER_LEN];
        small.extend_from_slice(b"abc");
        finish_headers(&mut small, 0, 1, false, 16);
        assert_eq!(
            Head::parse(&small).unwrap(),
            Head {
                len: 3,
                kind: kind::HEADERS,
                flags: flag::END_HEADERS,
                stream: 1
            }
        );
    }
}
