//! PROXY protocol v1 (text) and v2 (binary), as HAProxy's specification
//! (doc/proxy-protocol.txt) defines them: parsing the header a trusted
//! proxy in front of a listener sends, and writing the one sent to members.
//!
//! The parser is pure and incremental: it is given every byte read so far
//! and answers `Incomplete` while they are a valid prefix of a header, so
//! the caller reads more (under its own timeout) and calls again. The spec
//! asks receivers to abort "as soon as possible" on anything that does not
//! match exactly, so a prefix that can no longer become a header is an
//! error at once rather than after a timeout. Input is untrusted: every
//! read is bounds-checked and nothing here panics.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The 12 bytes every v2 header starts with (a null byte at the 5th
/// position, so never handle it as a C string).
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// "PROXY " and the fixed part of every v1 line.
const V1_PREFIX: &[u8] = b"PROXY ";

/// The longest v1 line the spec allows, CRLF included ("PROXY UNKNOWN"
/// with two full IPv6 addresses and ports).
pub const V1_MAX_LEN: usize = 107;

/// The fixed part of a v2 header: signature, version/command, family/
/// protocol, and the 16-bit length of what follows.
const V2_FIXED_LEN: usize = 16;

/// Cap on a whole v2 header (fixed part, addresses and TLVs) for
/// [`parse`]. The length field allows 16 + 65535 bytes, but the spec
/// designs headers to fit one 536-byte segment and real senders' TLVs
/// (ALPN, authority, unique ID up to 128 bytes, SSL details, cloud
/// endpoint IDs) stay well below this; refusing a larger length at once
/// keeps a peer from making the caller buffer 64 KiB per connection.
pub const DEFAULT_MAX_V2_LEN: usize = 4096;

/// Address-block sizes of the v2 families (source, destination, ports).
const V2_INET_LEN: usize = 4 + 4 + 2 + 2;
const V2_INET6_LEN: usize = 16 + 16 + 2 + 2;
const V2_UNIX_LEN: usize = 108 + 108;

/// The transport a v2 header announces (v1 only carries TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// SOCK_STREAM: TCP.
    Stream,
    /// SOCK_DGRAM: UDP.
    Datagram,
}

/// The original connection's endpoints a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proxied {
    /// The client, as the proxy in front saw it.
    pub source: SocketAddr,
    /// The address the client connected to on that proxy.
    pub destination: SocketAddr,
    pub transport: Transport,
}

/// What [`parse`] made of the bytes so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A valid prefix of a header: read more and call again.
    Incomplete,
    /// A whole header of `header_len` bytes (the connection's own data
    /// starts right after it). `proxied` is `None` for v1 UNKNOWN, v2
    /// LOCAL, and v2 families without IP addresses (UNSPEC, UNIX): the
    /// spec then says to use the connection's real endpoints.
    Done {
        header_len: usize,
        proxied: Option<Proxied>,
    },
}

/// Why the bytes are not a PROXY protocol header. The connection must be
/// closed: nothing after a bad header can be trusted to start anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyError {
    /// Neither "PROXY " (v1) nor the v2 signature.
    BadSignature,
    /// No CRLF in the first [`V1_MAX_LEN`] bytes.
    V1TooLong,
    /// A CR not followed by LF, or an LF not preceded by CR.
    V1BadLineEnd,
    /// The protocol word is not TCP4, TCP6 or UNKNOWN.
    V1BadProtocol(String),
    /// A field of a TCP4/TCP6 line is missing or invalid; `field` names
    /// which ("source address", "destination port", ...).
    V1BadField { field: &'static str, value: String },
    /// Extra or missing fields, or separators other than one space.
    V1BadFieldCount,
    /// The high nibble of the 13th byte is not 2.
    V2BadVersion(u8),
    /// The command nibble is neither LOCAL (0) nor PROXY (1).
    V2BadCommand(u8),
    /// The family/protocol byte is not one the spec assigns.
    V2BadFamily(u8),
    /// The announced header length exceeds the configured cap.
    V2TooLong { len: usize, max: usize },
    /// The length does not cover the family's address block.
    V2ShortAddresses { family: u8, len: usize, need: usize },
    /// A TLV after the addresses runs past the header's end.
    V2BadTlv { offset: usize },
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::BadSignature => {
                f.write_str("not a PROXY protocol header (neither \"PROXY \" nor the v2 signature)")
            }
            ProxyError::V1TooLong => write!(
                f,
                "PROXY v1 line without CRLF in its first {V1_MAX_LEN} bytes"
            ),
            ProxyError::V1BadLineEnd => {
                f.write_str("PROXY v1 line with a lone CR or LF instead of CRLF")
            }
            ProxyError::V1BadProtocol(p) => {
                write!(f, "PROXY v1 protocol {p:?} is not TCP4, TCP6 or UNKNOWN")
            }
            ProxyError::V1BadField { field, value } => {
                write!(f, "PROXY v1 line: invalid {field} {value:?}")
            }
            ProxyError::V1BadFieldCount => f.write_str(
                "PROXY v1 line does not have exactly 6 fields separated by single spaces",
            ),
            ProxyError::V2BadVersion(b) => {
                write!(
                    f,
                    "PROXY v2 version/command byte {b:#04x}: version is not 2"
                )
            }
            ProxyError::V2BadCommand(b) => write!(
                f,
                "PROXY v2 version/command byte {b:#04x}: command is neither LOCAL nor PROXY"
            ),
            ProxyError::V2BadFamily(b) => {
                write!(f, "PROXY v2 family/protocol byte {b:#04x} is not assigned")
            }
            ProxyError::V2TooLong { len, max } => write!(
                f,
                "PROXY v2 header of {len} bytes is longer than the {max}-byte limit"
            ),
            ProxyError::V2ShortAddresses { family, len, need } => write!(
                f,
                "PROXY v2 family/protocol {family:#04x} needs {need} address bytes, length is {len}"
            ),
            ProxyError::V2BadTlv { offset } => write!(
                f,
                "PROXY v2 TLV at header offset {offset} runs past the header's end"
            ),
        }
    }
}

impl std::error::Error for ProxyError {}

/// Parses a v1 or v2 header at the start of `buf`, with v2 headers capped
/// at [`DEFAULT_MAX_V2_LEN`] bytes.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    parse_with_max(buf, DEFAULT_MAX_V2_LEN)
}

/// [`parse`] with another cap on a whole v2 header (v1 lines are always
/// capped at [`V1_MAX_LEN`] by the spec).
pub fn parse_with_max(buf: &[u8], max_v2_len: usize) -> Result<Parsed, ProxyError> {
    // The two versions differ from the first byte ('P' against CR), so a
    // prefix of either is recognised as soon as it is one byte long.
    if starts_as(buf, &V2_SIGNATURE) {
        return v2::parse(buf, max_v2_len);
    }
    if starts_as(buf, V1_PREFIX) {
        return v1::parse(buf);
    }
    Err(ProxyError::BadSignature)
}

/// Whether `buf` and `prefix` agree on their common length (an empty
/// `buf` agrees with everything: it is a prefix of any header).
fn starts_as(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    buf[..n] == prefix[..n]
}

mod v1 {
    use super::*;

    pub(super) fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
        let window = &buf[..buf.len().min(V1_MAX_LEN)];
        let Some(end) = line_end(window)? else {
            return if buf.len() >= V1_MAX_LEN {
                Err(ProxyError::V1TooLong)
            } else {
                Ok(Parsed::Incomplete)
            };
        };
        // `end` is past "PROXY " (which holds no CR), so this never fails.
        let line = buf
            .get(V1_PREFIX.len()..end)
            .ok_or(ProxyError::V1BadFieldCount)?;
        let proxied = parse_line(line)?;
        Ok(Parsed::Done {
            header_len: end + 2,
            proxied,
        })
    }

    /// The offset of the CRLF ending the line, `None` when it is not there
    /// yet. A lone CR or LF is an error at once: the spec forbids
    /// tolerating either as a line end.
    fn line_end(window: &[u8]) -> Result<Option<usize>, ProxyError> {
        for (i, &b) in window.iter().enumerate() {
            match b {
                b'\r' => {
                    return match window.get(i + 1) {
                        Some(b'\n') => Ok(Some(i)),
                        Some(_) => Err(ProxyError::V1BadLineEnd),
                        None => Ok(None),
                    }
                }
                b'\n' => return Err(ProxyError::V1BadLineEnd),
                _ => {}
            }
        }
        Ok(None)
    }

    /// The part of the line after "PROXY " and before the CRLF.
    fn parse_line(line: &[u8]) -> Result<Option<Proxied>, ProxyError> {
        // UNKNOWN: "the receiver must ignore anything presented before
        // the CRLF", but only after a separator, not "UNKNOWNX".
        if let Some(rest) = line.strip_prefix(b"UNKNOWN") {
            if rest.is_empty() || rest[0] == b' ' {
                return Ok(None);
            }
        }
        let mut fields = line.split(|&b| b == b' ');
        let protocol = fields.next().unwrap_or_default();
        let v6 = match protocol {
            b"TCP4" => false,
            b"TCP6" => true,
            _ => return Err(ProxyError::V1BadProtocol(lossy(protocol))),
        };
        let mut next = || fields.next().ok_or(ProxyError::V1BadFieldCount);
        let (src, dst) = (next()?, next()?);
        let (sport, dport) = (next()?, next()?);
        if fields.next().is_some() {
            return Err(ProxyError::V1BadFieldCount);
        }
        let source = SocketAddr::new(
            address(src, v6, "source address")?,
            port(sport, "source port")?,
        );
        let destination = SocketAddr::new(
            address(dst, v6, "destination address")?,
            port(dport, "destination port")?,
        );
        Ok(Some(Proxied {
            source,
            destination,
            transport: Transport::Stream,
        }))
    }

    /// An address of the line's family. std's parsers are strict enough
    /// for the spec: IPv4 is exactly four decimal octets without leading
    /// zeroes (no octal confusion), IPv6 is the RFC 4291 text form without
    /// a zone. An empty field (two spaces in a row) fails here too.
    fn address(field: &[u8], v6: bool, what: &'static str) -> Result<IpAddr, ProxyError> {
        let bad = || ProxyError::V1BadField {
            field: what,
            value: lossy(field),
        };
        let text = std::str::from_utf8(field).map_err(|_| bad())?;
        if v6 {
            text.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| bad())
        } else {
            text.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| bad())
        }
    }

    /// A port in [0, 65535], decimal, without a sign or leading zeroes
    /// (u16's parser accepts both, so it is done by hand).
    fn port(field: &[u8], what: &'static str) -> Result<u16, ProxyError> {
        let bad = || ProxyError::V1BadField {
            field: what,
            value: lossy(field),
        };
        let leading_zero = field.len() > 1 && field[0] == b'0';
        if field.is_empty() || field.len() > 5 || leading_zero {
            return Err(bad());
        }
        let mut value: u32 = 0;
        for &b in field {
            if !b.is_ascii_digit() {
                return Err(bad());
            }
            value = value * 10 + u32::from(b - b'0');
        }
        u16::try_from(value).map_err(|_| bad())
    }

    /// A field for an error message (short: the line is at most 107 bytes).
    fn lossy(field: &[u8]) -> String {
        String::from_utf8_lossy(field).into_owned()
    }
}

mod v2 {
    use super::*;

    const CMD_LOCAL: u8 = 0x0;
    const CMD_PROXY: u8 = 0x1;
    const AF_UNSPEC: u8 = 0x0;
    const AF_INET: u8 = 0x1;
    const AF_INET6: u8 = 0x2;
    const AF_UNIX: u8 = 0x3;
    const PROTO_UNSPEC: u8 = 0x0;
    const PROTO_STREAM: u8 = 0x1;
    const PROTO_DGRAM: u8 = 0x2;

    pub(super) fn parse(buf: &[u8], max_len: usize) -> Result<Parsed, ProxyError> {
        // Each fixed byte is checked as soon as it has arrived.
        if let Some(&ver_cmd) = buf.get(12) {
            check_version_command(ver_cmd)?;
        }
        if let Some(&fam) = buf.get(13) {
            check_family(fam)?;
        }
        let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
            return Ok(Parsed::Incomplete);
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        let header_len = V2_FIXED_LEN + len;
        if header_len > max_len {
            return Err(ProxyError::V2TooLong {
                len: header_len,
                max: max_len,
            });
        }
        let Some(header) = buf.get(..header_len) else {
            return Ok(Parsed::Incomplete);
        };
        let proxied = match header[12] & 0x0f {
            // LOCAL: the proxy's own connection (a health check); the
            // spec says to discard the whole block, family included.
            CMD_LOCAL => None,
            _ => addresses(header[13], &header[V2_FIXED_LEN..])?,
        };
        Ok(Parsed::Done {
            header_len,
            proxied,
        })
    }

    fn check_version_command(b: u8) -> Result<(), ProxyError> {
        if b >> 4 != 2 {
            return Err(ProxyError::V2BadVersion(b));
        }
        match b & 0x0f {
            CMD_LOCAL | CMD_PROXY => Ok(()),
            _ => Err(ProxyError::V2BadCommand(b)),
        }
    }

    /// Only the assigned families and protocols: the spec says others
    /// "must be rejected as invalid by receivers" (for LOCAL too, which
    /// is stricter than ignoring the byte but no sender sets it so).
    fn check_family(b: u8) -> Result<(), ProxyError> {
        let family_ok = matches!(b >> 4, AF_UNSPEC | AF_INET | AF_INET6 | AF_UNIX);
        let proto_ok = matches!(b & 0x0f, PROTO_UNSPEC | PROTO_STREAM | PROTO_DGRAM);
        if family_ok && proto_ok {
            Ok(())
        } else {
            Err(ProxyError::V2BadFamily(b))
        }
    }

    /// The endpoints of a PROXY command, `block` being everything after
    /// the fixed 16 bytes.
    fn addresses(fam: u8, block: &[u8]) -> Result<Option<Proxied>, ProxyError> {
        let transport = match fam & 0x0f {
            PROTO_STREAM => Transport::Stream,
            PROTO_DGRAM => Transport::Datagram,
            // UNSPEC protocol: the receiver "should ignore address
            // information", whatever the family; nothing to bound-check.
            _ => return Ok(None),
        };
        let need = match fam >> 4 {
            AF_INET => V2_INET_LEN,
            AF_INET6 => V2_INET6_LEN,
            AF_UNIX => V2_UNIX_LEN,
            _ => return Ok(None),
        };
        let Some((addrs, tlvs)) = block.split_at_checked(need) else {
            return Err(ProxyError::V2ShortAddresses {
                family: fam,
                len: block.len(),
                need,
            });
        };
        check_tlvs(tlvs, V2_FIXED_LEN + need)?;
        Ok(
            ip_endpoints(fam >> 4, addrs).map(|(source, destination)| Proxied {
                source,
                destination,
                transport,
            }),
        )
    }

    /// Source and destination of an INET or INET6 block; `None` for UNIX
    /// (no IP endpoints: handled like an unknown family).
    fn ip_endpoints(family: u8, a: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
        let (src, dst, ports): (IpAddr, IpAddr, &[u8]) = match family {
            AF_INET => {
                let src: [u8; 4] = a.get(0..4)?.try_into().ok()?;
                let dst: [u8; 4] = a.get(4..8)?.try_into().ok()?;
                (src.into(), dst.into(), a.get(8..12)?)
            }
            AF_INET6 => {
                let src: [u8; 16] = a.get(0..16)?.try_into().ok()?;
                let dst: [u8; 16] = a.get(16..32)?.try_into().ok()?;
                (src.into(), dst.into(), a.get(32..36)?)
            }
            _ => return None,
        };
        let sport = u16::from_be_bytes([*ports.first()?, *ports.get(1)?]);
        let dport = u16::from_be_bytes([*ports.get(2)?, *ports.get(3)?]);
        Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
    }

    /// Walks the TLVs after the addresses without interpreting them, so
    /// that a header whose length and TLVs disagree is refused rather
    /// than half-trusted. `base` is the TLVs' offset in the header, for
    /// the error.
    fn check_tlvs(mut tlvs: &[u8], base: usize) -> Result<(), ProxyError> {
        let mut offset = base;
        while !tlvs.is_empty() {
            let bad = ProxyError::V2BadTlv { offset };
            let [_kind, hi, lo, ..] = *tlvs else {
                return Err(bad);
            };
            let end = 3 + usize::from(u16::from_be_bytes([hi, lo]));
            tlvs = tlvs.get(end..).ok_or(bad)?;
            offset += end;
        }
        Ok(())
    }
}

/// The v1 line for a TCP connection from `src` to `dst`. When one is IPv4
/// and the other IPv6, the IPv4 one is written IPv4-mapped under TCP6, so
/// that both addresses still reach the member (rather than "UNKNOWN",
/// which the spec keeps for when the line cannot be filled in, and which
/// some servers refuse).
pub fn encode_v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let line = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => format!("PROXY TCP4 {s} {d}"),
        (s, d) => format!("PROXY TCP6 {} {}", v6_text(to_v6(s)), v6_text(to_v6(d))),
    };
    format!("{line} {} {}\r\n", src.port(), dst.port()).into_bytes()
}

/// The v2 header (PROXY command, no TLVs) for a `transport` connection
/// from `src` to `dst`; mixed families are sent as INET6 with the IPv4
/// address mapped, as for v1.
pub fn encode_v2(src: SocketAddr, dst: SocketAddr, transport: Transport) -> Vec<u8> {
    let proto = match transport {
        Transport::Stream => 0x1,
        Transport::Datagram => 0x2,
    };
    let mut out = Vec::with_capacity(V2_FIXED_LEN + V2_INET6_LEN);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21); // version 2, PROXY
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(0x10 | proto);
            out.extend_from_slice(&(V2_INET_LEN as u16).to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(0x20 | proto);
            out.extend_from_slice(&(V2_INET6_LEN as u16).to_be_bytes());
            out.extend_from_slice(&to_v6(s).octets());
            out.extend_from_slice(&to_v6(d).octets());
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    out
}

/// The header a pool of `version` sends first on a TCP connection from
/// `src` to `dst` (empty when it sends none).
pub fn stream_header(
    version: Option<crate::config::snapshot::ProxyVersion>,
    src: SocketAddr,
    dst: SocketAddr,
) -> Vec<u8> {
    use crate::config::snapshot::ProxyVersion;
    match version {
        None => Vec::new(),
        Some(ProxyVersion::V1) => encode_v1(src, dst),
        Some(ProxyVersion::V2) => encode_v2(src, dst, Transport::Stream),
    }
}

/// The v2 LOCAL header, for the proxy's own connections (health checks):
/// the member then uses the connection's real endpoints. v2 only: the
/// spec advises against v1 "UNKNOWN" for this, which servers may refuse.
pub fn encode_v2_local() -> Vec<u8> {
    let mut out = Vec::with_capacity(V2_FIXED_LEN);
    out.extend_from_slice(&V2_SIGNATURE);
    out.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    out
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// RFC 5952 text of an IPv6 address with hexadecimal groups only: std's
/// Display writes IPv4-mapped addresses with a dotted tail, which the
/// spec's "sets of 4 hexadecimal digits" does not cover.
fn v6_text(ip: Ipv6Addr) -> String {
    let groups = ip.segments();
    let (start, len) = longest_zero_run(&groups);
    let hex = |gs: &[u16]| {
        gs.iter()
            .map(|g| format!("{g:x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    if len < 2 {
        return hex(&groups);
    }
    format!("{}::{}", hex(&groups[..start]), hex(&groups[start + len..]))
}

/// Start and length of the first longest run of zero groups (RFC 5952
/// 4.2.3: the first one when two are as long).
fn longest_zero_run(groups: &[u16; 8]) -> (usize, usize) {
    let (mut best, mut run_start, mut run_len) = ((0, 0), 0, 0);
    for (i, &g) in groups.iter().enumerate() {
        if g != 0 {
            run_len = 0;
            continue;
        }
        if run_len == 0 {
            run_start = i;
        }
        run_len += 1;
        if run_len > best.1 {
            best = (run_start, run_len);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn done(buf: &[u8]) -> (usize, Option<Proxied>) {
        match parse(buf) {
            Ok(Parsed::Done {
                header_len,
                proxied,
            }) => (header_len, proxied),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn err(buf: &[u8]) -> ProxyError {
        match parse(buf) {
            Err(e) => e,
            ok => panic!("{:?} accepted: {ok:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn tcp(src: &str, dst: &str) -> Option<Proxied> {
        Some(Proxied {
            source: sa(src),
            destination: sa(dst),
            transport: Transport::Stream,
        })
    }

    /// Every strict prefix of a valid header is Incomplete, and the whole
    /// header then parses the same however it was split.
    fn assert_incremental(header: &[u8]) {
        let whole = parse(header).unwrap();
        for n in 0..header.len() {
            assert_eq!(
                parse(&header[..n]),
                Ok(Parsed::Incomplete),
                "prefix of {n} bytes of {header:?}"
            );
        }
        let mut with_data = header.to_vec();
        with_data.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(parse(&with_data), Ok(whole));
    }

    #[test]
    fn v1_spec_example() {
        let buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
        let (len, p) = done(buf);
        assert_eq!(&buf[len..], b"GET / HTTP/1.1\r\n");
        assert_eq!(p, tcp("192.168.0.1:56324", "192.168.0.11:443"));
    }

    #[test]
    fn v1_longest_lines() {
        let v4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
        assert_eq!(done(v4).0, 56);
        let v6 = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(done(v6).0, 104);
        let unknown = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(unknown.len(), V1_MAX_LEN);
        assert_eq!(done(unknown), (107, None));
        assert_incremental(v4);
        assert_incremental(v6);
        assert_incremental(unknown);
    }

    #[test]
    fn v1_tcp6_and_unknown() {
        let (_, p) = done(b"PROXY TCP6 2001:db8::1 ::1 0 8080\r\n");
        assert_eq!(p, tcp("[2001:db8::1]:0", "[::1]:8080"));
        // Upper-case hex and an IPv4-mapped dotted tail are valid text.
        let (_, p) = done(b"PROXY TCP6 2001:DB8::A ::ffff:10.0.0.1 1 2\r\n");
        assert_eq!(p, tcp("[2001:db8::a]:1", "[::ffff:10.0.0.1]:2"));
        assert_eq!(done(b"PROXY UNKNOWN\r\n"), (15, None));
        // Anything after "UNKNOWN " is ignored, as the spec says.
        assert_eq!(done(b"PROXY UNKNOWN whatever 1 2\r\nx"), (28, None));
        assert_incremental(b"PROXY UNKNOWN\r\n");
    }

    #[test]
    fn v1_malformed() {
        let field = |f: &'static str| move |e: ProxyError| matches!(e, ProxyError::V1BadField { field, .. } if field == f);
        type Check<'a> = &'a dyn Fn(ProxyError) -> bool;
        let cases: &[(&[u8], Check)] = &[
            (
                b"PROXY TCP4 01.2.3.4 1.2.3.4 1 2\r\n",
                &field("source address"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.256 1 2\r\n",
                &field("destination address"),
            ),
            (
                b"PROXY TCP4 1.2.3 1.2.3.4 1 2\r\n",
                &field("source address"),
            ),
            (b"PROXY TCP4 ::1 1.2.3.4 1 2\r\n", &field("source address")),
            (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", &field("source address")),
            (
                b"PROXY TCP6 ::1 fe80::1%eth0 1 2\r\n",
                &field("destination address"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
                &field("source port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 080\r\n",
                &field("destination port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n",
                &field("source port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 -2\r\n",
                &field("destination port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 999999\r\n",
                &field("destination port"),
            ),
            (
                b"PROXY TCP4 1.2.3.4 1.2.3.4 1 \r\n",
                &field("destination port"),
            ),
            (b"PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n", &|e| {
                e == ProxyError::V1BadFieldCount
            }),
            (b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n", &|e| {
                e == ProxyError::V1BadFieldCount
            }),
            (b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n", &|e| {
                e == ProxyError::V1BadFieldCount
            }),
            (b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 \r\n", &|e| {
                e == ProxyError::V1BadFieldCount
            }),
            (b"PROXY TCP4\r\n", &|e| e == ProxyError::V1BadFieldCount),
            (b"PROXY UDP4 1.2.3.4 1.2.3.4 1 2\r\n", &|e| {
                matches!(e, ProxyError::V1BadProtocol(_))
            }),
            (b"PROXY tcp4 1.2.3.4 1.2.3.4 1 2\r\n", &|e| {
                matches!(e, ProxyError::V1BadProtocol(_))
            }),
            (b"PROXY UNKNOWNX\r\n", &|e| {
                matches!(e, ProxyError::V1BadProtocol(_))
            }),
            (b"PROXY \r\n", &|e| {
                matches!(e, ProxyError::V1BadProtocol(_))
            }),
            (b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n", &|e| {
                e == ProxyError::V1BadLineEnd
            }),
            (b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rx\n", &|e| {
                e == ProxyError::V1BadLineEnd
            }),
            (b"PROXY UNKNOWN\n", &|e| e == ProxyError::V1BadLineEnd),
            (b"proxy TCP4", &|e| e == ProxyError::BadSignature),
            (b"PROXYTCP4", &|e| e == ProxyError::BadSignature),
            (b"GET / HTTP/1.1\r\n", &|e| e == ProxyError::BadSignature),
            (b"\x16\x03\x01", &|e| e == ProxyError::BadSignature),
        ];
        for (buf, check) in cases {
            let e = err(buf);
            assert!(check(e.clone()), "{:?}: {e}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn v1_line_too_long() {
        let mut line = b"PROXY UNKNOWN ".to_vec();
        line.resize(V1_MAX_LEN - 2, b'f');
        line.push(b'\r');
        assert_eq!(parse(&line), Ok(Parsed::Incomplete));
        line.push(b'\n');
        assert_eq!(done(&line), (V1_MAX_LEN, None));
        // One more byte before the CRLF: the CR itself is past the limit.
        line.truncate(V1_MAX_LEN - 2);
        line.push(b'f');
        assert_eq!(parse(&line), Ok(Parsed::Incomplete));
        line.push(b'\r');
        assert_eq!(err(&line), ProxyError::V1TooLong);
        line.push(b'\n');
        assert_eq!(err(&line), ProxyError::V1TooLong);
    }

    #[test]
    fn v1_error_messages_name_the_field() {
        let e = err(b"PROXY TCP4 1.2.3.4 1.2.3.4 1 65536\r\n");
        assert_eq!(
            e.to_string(),
            "PROXY v1 line: invalid destination port \"65536\""
        );
    }

    fn v2(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(ver_cmd);
        out.push(fam);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    const INET_BODY: [u8; 12] = [10, 0, 0, 1, 192, 168, 1, 2, 0x30, 0x39, 0x01, 0xbb];

    #[test]
    fn v2_inet_and_inet6() {
        let h = v2(0x21, 0x11, &INET_BODY);
        assert_eq!(done(&h), (28, tcp("10.0.0.1:12345", "192.168.1.2:443")));
        assert_incremental(&h);

        let mut body = [0u8; 36];
        body[15] = 1; // ::1
        body[16..18].copy_from_slice(&[0x20, 0x01]);
        body[31] = 2; // 2001::2
        body[32..36].copy_from_slice(&[0, 80, 0xff, 0xff]);
        let h = v2(0x21, 0x22, &body);
        let p = Proxied {
            source: sa("[::1]:80"),
            destination: sa("[2001::2]:65535"),
            transport: Transport::Datagram,
        };
        assert_eq!(done(&h), (52, Some(p)));
        assert_incremental(&h);
    }

    #[test]
    fn v2_tlvs_are_skipped_but_checked() {
        let mut body = INET_BODY.to_vec();
        body.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']); // ALPN
        body.extend_from_slice(&[0x04, 0x00, 0x00]); // NOOP, empty
        body.extend_from_slice(&[0x20, 0x00, 0x05, 1, 0, 0, 0, 0]); // SSL
        let h = v2(0x21, 0x11, &body);
        assert_eq!(done(&h).0, h.len());
        assert_incremental(&h);

        // A TLV whose length runs past the header, or a partial TLV head.
        let mut long = INET_BODY.to_vec();
        long.extend_from_slice(&[0x01, 0x00, 0x03, b'h', b'2']);
        assert_eq!(
            err(&v2(0x21, 0x11, &long)),
            ProxyError::V2BadTlv { offset: 28 }
        );
        for tail in [&[0x01][..], &[0x01, 0x00]] {
            let mut b = INET_BODY.to_vec();
            b.extend_from_slice(&[0x04, 0x00, 0x00]);
            b.extend_from_slice(tail);
            assert_eq!(
                err(&v2(0x21, 0x11, &b)),
                ProxyError::V2BadTlv { offset: 31 }
            );
        }
    }

    #[test]
    fn v2_local_unspec_and_unix_carry_no_addresses() {
        assert_eq!(done(&encode_v2_local()), (16, None));
        // LOCAL skips whatever block it is given, addresses and all.
        assert_eq!(done(&v2(0x20, 0x11, &INET_BODY)), (28, None));
        assert_eq!(done(&v2(0x20, 0x00, &[1, 2, 3])), (19, None));
        // PROXY with UNSPEC: use the real endpoints; the block is skipped.
        assert_eq!(done(&v2(0x21, 0x00, &[])), (16, None));
        assert_eq!(done(&v2(0x21, 0x10, &[9; 5])), (21, None));
        assert_eq!(done(&v2(0x21, 0x01, &[9; 5])), (21, None));
        // UNIX: no IP endpoints, but the block must be whole.
        assert_eq!(done(&v2(0x21, 0x31, &[0; 216])), (232, None));
        assert_eq!(done(&v2(0x21, 0x32, &[0; 219])).1, None);
        assert!(matches!(
            err(&v2(0x21, 0x31, &[0; 215])),
            ProxyError::V2ShortAddresses { need: 216, .. }
        ));
        assert_incremental(&v2(0x21, 0x31, &[0; 216]));
    }

    #[test]
    fn v2_malformed() {
        assert_eq!(
            err(&v2(0x11, 0x11, &INET_BODY)),
            ProxyError::V2BadVersion(0x11)
        );
        assert_eq!(
            err(&v2(0x31, 0x11, &INET_BODY)),
            ProxyError::V2BadVersion(0x31)
        );
        assert_eq!(
            err(&v2(0x22, 0x11, &INET_BODY)),
            ProxyError::V2BadCommand(0x22)
        );
        assert_eq!(
            err(&v2(0x2f, 0x11, &INET_BODY)),
            ProxyError::V2BadCommand(0x2f)
        );
        for fam in [0x41, 0x13, 0xf1, 0x1f] {
            assert_eq!(
                err(&v2(0x21, fam, &INET_BODY)),
                ProxyError::V2BadFamily(fam)
            );
        }
        assert_eq!(
            err(&v2(0x21, 0x11, &INET_BODY[..11])),
            ProxyError::V2ShortAddresses {
                family: 0x11,
                len: 11,
                need: 12
            }
        );
        assert_eq!(
            err(&v2(0x21, 0x21, &[0; 12])),
            ProxyError::V2ShortAddresses {
                family: 0x21,
                len: 12,
                need: 36
            }
        );
        // A bad signature byte anywhere in the first 12.
        for i in 0..12 {
            let mut h = v2(0x21, 0x11, &INET_BODY);
            h[i] ^= 0x40;
            assert_eq!(err(&h), ProxyError::BadSignature, "byte {i}");
            assert_eq!(err(&h[..=i]), ProxyError::BadSignature, "prefix to {i}");
        }
        // Fixed bytes are refused as soon as they arrive.
        assert_eq!(
            err(&v2(0x31, 0x11, &[])[..13]),
            ProxyError::V2BadVersion(0x31)
        );
        assert_eq!(
            err(&v2(0x21, 0x44, &[])[..14]),
            ProxyError::V2BadFamily(0x44)
        );
    }

    #[test]
    fn v2_length_cap() {
        let mut h = v2(0x21, 0x11, &[0; 5000]);
        // Refused from the fixed part alone, before the body is buffered.
        assert_eq!(
            err(&h[..16]),
            ProxyError::V2TooLong {
                len: 5016,
                max: DEFAULT_MAX_V2_LEN
            }
        );
        h.truncate(16);
        assert_eq!(parse_with_max(&h, 65535 + 16), Ok(Parsed::Incomplete));
        let max = v2(0x21, 0x11, &[0; 65535]);
        assert_eq!(
            parse_with_max(&max, 65535 + 16).map(|p| matches!(
                p,
                Parsed::Done {
                    header_len: 65551,
                    ..
                }
            )),
            Ok(true)
        );
        assert!(parse_with_max(&v2(0x21, 0x11, &INET_BODY), 27).is_err());
        assert!(parse_with_max(&v2(0x21, 0x11, &INET_BODY), 28).is_ok());
    }

    #[test]
    fn encode_round_trips() {
        let pairs = [
            ("1.2.3.4:1", "5.6.7.8:65535"),
            ("0.0.0.0:0", "255.255.255.255:443"),
            ("[2001:db8::1]:5000", "[::]:80"),
            ("[1:0:0:2:0:0:0:3]:1", "[0:0:1::]:2"),
            ("[1:2:3:4:5:6:7:8]:1", "[::ffff:1.2.3.4]:2"),
        ];
        for (s, d) in pairs {
            let (s, d) = (sa(s), sa(d));
            let want = Some(Proxied {
                source: s,
                destination: d,
                transport: Transport::Stream,
            });
            let line = encode_v1(s, d);
            assert_eq!(
                done(&line),
                (line.len(), want),
                "{:?}",
                String::from_utf8_lossy(&line)
            );
            for t in [Transport::Stream, Transport::Datagram] {
                let h = encode_v2(s, d, t);
                let want = want.map(|p| Proxied { transport: t, ..p });
                assert_eq!(done(&h), (h.len(), want));
            }
        }
    }

    #[test]
    fn encode_mixed_families_as_mapped_ipv6() {
        let (s, d) = (sa("10.0.0.1:1000"), sa("[2001:db8::2]:443"));
        let line = encode_v1(s, d);
        assert_eq!(line, b"PROXY TCP6 ::ffff:a00:1 2001:db8::2 1000 443\r\n");
        let mapped = sa("[::ffff:10.0.0.1]:1000");
        assert_eq!(
            done(&line).1,
            tcp("[::ffff:10.0.0.1]:1000", "[2001:db8::2]:443")
        );
        let h = encode_v2(d, s, Transport::Stream);
        assert_eq!(h[13], 0x21);
        assert_eq!(done(&h).1.map(|p| p.destination), Some(mapped));
    }

    #[test]
    fn encode_exact_bytes() {
        let (s, d) = (sa("192.168.0.1:56324"), sa("192.168.0.11:443"));
        assert_eq!(
            encode_v1(s, d),
            b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
        );
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0, 12, 192, 168, 0, 1, 192, 168, 0, 11]);
        want.extend_from_slice(&[0xdc, 0x04, 0x01, 0xbb]);
        assert_eq!(encode_v2(s, d, Transport::Stream), want);
        assert_eq!(
            encode_v2_local(),
            b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec()
        );
    }

    #[test]
    fn ipv6_text_is_rfc5952_hex() {
        let cases = [
            ("::", "::"),
            ("::1", "::1"),
            ("1::", "1::"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:0:2:3:0:0:4", "1::2:3:0:0:4"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
            ("::ffff:1.2.3.4", "::ffff:102:304"),
            ("2001:DB8::ABCD", "2001:db8::abcd"),
        ];
        for (ip, want) in cases {
            assert_eq!(v6_text(ip.parse().unwrap()), want);
        }
    }
}
