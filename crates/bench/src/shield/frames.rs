//! One frame shape per DDoS vector of `[shield.ddos]` (report 003,
//! Table 3), for the `ddos` scenario: what an attacker of that vector
//! sends, built byte by byte (no socket API sends bad headers, fragments
//! or unknown TCP options). The bench's own builders: the shapes follow
//! what the vectors classify (crates/switchyard/src/shield/xdp/ddos.bpf.h),
//! not the Switchyard test code.
//!
//! Frame `i` of a pool varies the source address (IPv4 10.200.0.0/16,
//! IPv6 fd88:200::/64) and the source port, as a spread attack does;
//! `sweep` instead has 32 sources each reaching many ports. Checksums are
//! right: every frame is a well-formed packet of its kind, so what the
//! DUT does with it is the vector's business, not a checksum error.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::pktgen::{self, fold, sum16, Mac};

/// Every vector, in the order of shield/ddos.rs's VECTORS, with its kind
/// as GET /api/v1/shield reports it.
pub const VECTORS: [(&str, &str); 28] = [
    ("ipv4_fragment", "flood"),
    ("ipv6_fragment", "flood"),
    ("icmp_fragment", "flood"),
    ("icmpv4_flood", "flood"),
    ("icmpv6_flood", "flood"),
    ("tcp_syn_flood", "flood"),
    ("tcp_synack_flood", "flood"),
    ("tcp_syn_oversize", "flood"),
    ("non_tcp_connection", "flood"),
    ("tcp_rst_flood", "flood"),
    ("tcp_push_flood", "flood"),
    ("tcp_half_open", "flood"),
    ("tcp_window_size", "flood"),
    ("udp_flood", "flood"),
    ("ttl_at_most", "bad_header"),
    ("ip_options", "bad_header"),
    ("ipv6_hop_limit", "bad_header"),
    ("ipv6_ext_hdr_too_large", "bad_header"),
    ("ipv6_ext_hdr_frames", "flood"),
    ("ipv6_ext_hdr_too_many", "bad_header"),
    ("tcp_option_unknown", "bad_header"),
    ("tcp_option_illegal_length", "bad_header"),
    ("tcp_option_overrun", "bad_header"),
    ("tcp_bad_urg", "bad_header"),
    ("host_unreachable", "other"),
    ("tidcmp", "other"),
    ("sweep", "other"),
    ("ipv6_ext_hdr_malformed", "bad_header"),
];

pub fn kind(name: &str) -> Option<&'static str> {
    VECTORS.iter().find(|v| v.0 == name).map(|v| v.1)
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMP6: u8 = 58;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;

/// Where the frames go and come from.
#[derive(Clone, Copy, Debug)]
pub struct Ends {
    pub src_mac: Mac,
    pub dst_mac: Mac,
    pub dst4: Ipv4Addr,
    pub dst6: Ipv6Addr,
    /// The vserver's port (TCP vectors aim at a listener, as attacks do).
    pub port: u16,
}

#[derive(Clone, Copy)]
enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

impl Addrs {
    /// The pseudo-header's sum for a transport checksum.
    fn pseudo(self, proto: u8, len: usize) -> u32 {
        match self {
            Addrs::V4(s, d) => {
                let s0 = sum16(&d.octets(), sum16(&s.octets(), 0));
                s0 + u32::from(proto) + len as u32
            }
            Addrs::V6(s, d) => {
                let s0 = sum16(&d.octets(), sum16(&s.octets(), 0));
                s0 + (len as u32 >> 16) + (len as u32 & 0xffff) + u32::from(proto)
            }
        }
    }
}

struct Tcp<'a> {
    sport: u16,
    dport: u16,
    seq: u32,
    flags: u8,
    window: u16,
    urgent: u16,
    /// Padded with zeros (end of options) to 4 bytes.
    options: &'a [u8],
    data: &'a [u8],
}

impl Tcp<'_> {
    fn bytes(&self, a: Addrs) -> Vec<u8> {
        let olen = self.options.len().div_ceil(4) * 4;
        let mut t = Vec::with_capacity(20 + olen + self.data.len());
        t.extend_from_slice(&self.sport.to_be_bytes());
        t.extend_from_slice(&self.dport.to_be_bytes());
        t.extend_from_slice(&self.seq.to_be_bytes());
        let ack: u32 = if self.flags & ACK != 0 { 0x1000 } else { 0 };
        t.extend_from_slice(&ack.to_be_bytes());
        t.push((((20 + olen) / 4) as u8) << 4);
        t.push(self.flags);
        t.extend_from_slice(&self.window.to_be_bytes());
        t.extend_from_slice(&[0, 0]);
        t.extend_from_slice(&self.urgent.to_be_bytes());
        t.extend_from_slice(self.options);
        t.resize(20 + olen, 0);
        t.extend_from_slice(self.data);
        let c = fold(a.pseudo(TCP, t.len()) + sum16(&t, 0));
        t[16..18].copy_from_slice(&c.to_be_bytes());
        t
    }
}

fn udp(a: Addrs, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + data.len());
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    let c = fold(a.pseudo(UDP, u.len()) + sum16(&u, 0));
    // 0 means "no checksum" in UDP over IPv4: all ones stands for it.
    let c = if c == 0 { 0xffff } else { c };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

/// ICMPv4 (no pseudo-header) or ICMPv6 (with one).
fn icmp(a: Addrs, kind: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(body);
    let s = match a {
        Addrs::V4(..) => sum16(&m, 0),
        Addrs::V6(..) => a.pseudo(ICMP6, m.len()) + sum16(&m, 0),
    };
    let c = fold(s);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An IPv4 packet; `frag` is the flags-and-offset field (0x2000: more
/// fragments), `options` padded with zeros to 4 bytes.
fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ttl: u8,
    frag: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let olen = options.len().div_ceil(4) * 4;
    let hlen = 20 + olen;
    let mut p = Vec::with_capacity(hlen + payload.len());
    p.push(0x40 | (hlen / 4) as u8);
    p.push(0);
    p.extend_from_slice(&((hlen + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0x5a, 0x5a]);
    p.extend_from_slice(&frag.to_be_bytes());
    p.push(ttl);
    p.push(proto);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(options);
    p.resize(hlen, 0);
    let c = pktgen::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 packet: extension headers `ext` (already chained, `next`
/// naming the first), then `payload`.
fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, hop: u8, ext: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(40 + ext.len() + payload.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&((ext.len() + payload.len()) as u16).to_be_bytes());
    p.push(next);
    p.push(hop);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(ext);
    p.extend_from_slice(payload);
    p
}

/// An extension header of kind `kind` naming `next`: a fragment header
/// (44, 8 bytes, first fragment with more to come), or options headers
/// (0, 60) of `(len8 + 1) * 8` bytes filled with one PadN option.
fn ext_header(kind: u8, next: u8, len8: u8) -> Vec<u8> {
    if kind == 44 {
        return vec![next, 0, 0, 1, 0, 0, 0x5a, 0x5a];
    }
    let total = (usize::from(len8) + 1) * 8;
    let mut h = vec![next, len8, 1, (total - 4) as u8];
    h.resize(total, 0);
    h
}

fn ethernet(e: &Ends, v6: bool, packet: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&e.dst_mac);
    out.extend_from_slice(&e.src_mac);
    out.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    out.extend_from_slice(packet);
}

/// A cheap mix of `i` (splitmix64's finaliser): spread sources.
fn mix(i: usize) -> u64 {
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn src4(i: usize) -> Ipv4Addr {
    match pktgen::vary(IpAddr::V4(Ipv4Addr::new(10, 200, 0, 0)), 16, mix(i)) {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => Ipv4Addr::new(10, 200, 0, 1),
    }
}

fn src6(i: usize) -> Ipv6Addr {
    let base = u128::from(Ipv6Addr::new(0xfd88, 0x200, 0, 0, 0, 0, 0, 0));
    Ipv6Addr::from(base | u128::from(mix(i) | 1))
}

/// Appends frame `i` of vector `name` to `out`; false for an unknown
/// vector (nothing appended).
pub fn frame(name: &str, i: usize, e: &Ends, out: &mut Vec<u8>) -> bool {
    let (s4, s6) = (src4(i), src6(i));
    let a4 = Addrs::V4(s4, e.dst4);
    let a6 = Addrs::V6(s6, e.dst6);
    let sport = 1024 + (mix(i ^ 0x5555) % 60000) as u16;
    let seq = mix(i ^ 0xaaaa) as u32;
    let port = e.port;
    let tcp4 = |flags: u8, window: u16, urgent: u16, options: &[u8], data: &[u8]| {
        Tcp {
            sport,
            dport: port,
            seq,
            flags,
            window,
            urgent,
            options,
            data,
        }
        .bytes(a4)
    };
    let v4 = |proto: u8, ttl: u8, frag: u16, options: &[u8], payload: &[u8]| {
        (false, ipv4(s4, e.dst4, proto, ttl, frag, options, payload))
    };
    let v6 = |next: u8, hop: u8, ext: &[u8], payload: &[u8]| {
        (true, ipv6(s6, e.dst6, next, hop, ext, payload))
    };
    // UDP to the discard port: no service, a plain datagram flood.
    let udp4 = udp(a4, sport, 9, &[0x5a; 32]);
    let udp6 = udp(a6, sport, 9, &[0x5a; 32]);
    // MSS 1460, NOP, NOP, SACK permitted, NOP, window scale 7.
    let syn_opts = pktgen::SYN_OPTIONS;
    let (v6p, packet) = match name {
        "ipv4_fragment" => v4(UDP, 64, 0x2000, &[], &udp4),
        "ipv6_fragment" => v6(44, 64, &ext_header(44, UDP, 0), &udp6),
        "icmp_fragment" => v4(ICMP, 64, 0x2000, &[], &icmp(a4, 8, 0, &[0x12, 0x34, 0, 1])),
        "icmpv4_flood" => {
            let body = [0x12, 0x34, (i >> 8) as u8, i as u8, 0x5a, 0x5a, 0x5a, 0x5a];
            v4(ICMP, 64, 0, &[], &icmp(a4, 8, 0, &body))
        }
        "icmpv6_flood" => {
            let body = [0x12, 0x34, (i >> 8) as u8, i as u8, 0x5a, 0x5a, 0x5a, 0x5a];
            v6(ICMP6, 64, &[], &icmp(a6, 128, 0, &body))
        }
        "tcp_syn_flood" | "tcp_half_open" => {
            v4(TCP, 64, 0, &[], &tcp4(SYN, 64240, 0, &syn_opts, &[]))
        }
        "tcp_synack_flood" => {
            // A reflected SYN+ACK: from a web server's port to ours.
            let t = Tcp {
                sport: 443,
                dport: sport,
                seq,
                flags: SYN | ACK,
                window: 64240,
                urgent: 0,
                options: &[2, 4, 5, 180],
                data: &[],
            }
            .bytes(a4);
            v4(TCP, 64, 0, &[], &t)
        }
        "tcp_syn_oversize" => v4(
            TCP,
            64,
            0,
            &[],
            &tcp4(SYN, 64240, 0, &syn_opts, &[0x5a; 200]),
        ),
        "non_tcp_connection" => v4(UDP, 64, 0, &[], &udp(a4, sport, port, &[0x5a; 32])),
        "tcp_rst_flood" => v4(TCP, 64, 0, &[], &tcp4(RST, 0, 0, &[], &[])),
        "tcp_push_flood" => v4(TCP, 64, 0, &[], &tcp4(PSH | ACK, 502, 0, &[], &[0x5a; 64])),
        "tcp_window_size" => v4(TCP, 64, 0, &[], &tcp4(ACK, 0, 0, &[], &[])),
        "udp_flood" => v4(UDP, 64, 0, &[], &udp4),
        "ttl_at_most" => v4(UDP, 1, 0, &[], &udp4),
        // Four NOPs: a legal option list, still an IPv4 header with options.
        "ip_options" => v4(UDP, 64, 0, &[1, 1, 1, 1], &udp4),
        "ipv6_hop_limit" => v6(UDP, 1, &[], &udp6),
        // 41 eight-octet units: 328 bytes, over the default 256.
        "ipv6_ext_hdr_too_large" => v6(60, 64, &ext_header(60, UDP, 40), &udp6),
        "ipv6_ext_hdr_frames" => v6(60, 64, &ext_header(60, UDP, 0), &udp6),
        "ipv6_ext_hdr_too_many" => {
            let mut ext = Vec::new();
            for k in 0..5 {
                ext.extend(ext_header(60, if k == 4 { UDP } else { 60 }, 0));
            }
            v6(60, 64, &ext, &udp6)
        }
        // Destination options, then hop-by-hop, which must come first.
        "ipv6_ext_hdr_malformed" => {
            let mut ext = ext_header(60, 0, 0);
            ext.extend(ext_header(0, UDP, 0));
            v6(60, 64, &ext, &udp6)
        }
        "tcp_option_unknown" => v4(TCP, 64, 0, &[], &tcp4(ACK, 502, 0, &[99, 4, 0, 0], &[])),
        // An MSS option of length 5.
        "tcp_option_illegal_length" => v4(
            TCP,
            64,
            0,
            &[],
            &tcp4(ACK, 502, 0, &[2, 5, 0, 0, 0, 1, 1, 1], &[]),
        ),
        // Timestamps (10 bytes) starting 4 bytes before the header's end.
        "tcp_option_overrun" => v4(
            TCP,
            64,
            0,
            &[],
            &tcp4(ACK, 502, 0, &[1, 1, 1, 1, 8, 10, 0, 0], &[]),
        ),
        "tcp_bad_urg" => v4(TCP, 64, 0, &[], &tcp4(ACK | URG, 502, 0, &[], &[])),
        // As a router sends it: the original IP header and 8 bytes.
        "host_unreachable" => {
            let orig = ipv4(e.dst4, s4, UDP, 64, 0, &[], &udp(a4, 40000, 53, &[]));
            let mut body = vec![0u8; 4];
            body.extend_from_slice(&orig[..28]);
            v4(ICMP, 64, 0, &[], &icmp(a4, 3, 1, &body))
        }
        "tidcmp" => {
            let orig = ipv4(e.dst4, s4, UDP, 64, 0, &[], &udp(a4, 40000, 53, &[]));
            let mut body = vec![0u8; 4];
            body.extend_from_slice(&orig[..28]);
            v4(ICMP, 64, 0, &[], &icmp(a4, 4, 0, &body))
        }
        // 32 sources (10.202.0.1-32), each SYN to a new port of 1024
        // (1000-2023): each source reaches far more than sweep_max ports
        // in a second at any rate of the bench.
        "sweep" => {
            let src = Ipv4Addr::new(10, 202, 0, 1 + (i % 32) as u8);
            let a = Addrs::V4(src, e.dst4);
            let t = Tcp {
                sport,
                dport: 1000 + ((i / 32) % 1024) as u16,
                seq,
                flags: SYN,
                window: 64240,
                urgent: 0,
                options: &syn_opts,
                data: &[],
            }
            .bytes(a);
            (false, ipv4(src, e.dst4, TCP, 64, 0, &[], &t))
        }
        _ => return false,
    };
    ethernet(e, v6p, &packet, out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> Ends {
        Ends {
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
            dst4: Ipv4Addr::new(10, 88, 0, 1),
            dst6: "fd88::1".parse().unwrap_or(Ipv6Addr::LOCALHOST),
            port: 8080,
        }
    }

    /// Every vector builds, and every frame is well formed: IPv4 header
    /// checksums and transport checksums (over the pseudo-header) sum to
    /// zero, lengths agree with the frame.
    #[test]
    fn every_vector_builds_well_formed_frames() {
        let e = ends();
        for (name, _) in VECTORS {
            for i in [0usize, 1, 77, 65535] {
                let mut f = Vec::new();
                assert!(frame(name, i, &e, &mut f), "{name}");
                assert_eq!(&f[..6], &e.dst_mac);
                let et = u16::from_be_bytes([f[12], f[13]]);
                let ip = &f[14..];
                if et == 0x0800 {
                    let hl = usize::from(ip[0] & 15) * 4;
                    assert_eq!(pktgen::checksum(&ip[..hl]), 0, "{name} IPv4 header");
                    assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), ip.len());
                    let (s, d) = (
                        Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
                        Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
                    );
                    let l4 = &ip[hl..];
                    let a = Addrs::V4(s, d);
                    match ip[9] {
                        TCP | UDP => assert_eq!(
                            fold(a.pseudo(ip[9], l4.len()) + sum16(l4, 0)),
                            0,
                            "{name} transport checksum"
                        ),
                        ICMP => assert_eq!(pktgen::checksum(l4), 0, "{name} ICMP"),
                        p => panic!("{name}: protocol {p}"),
                    }
                } else {
                    assert_eq!(et, 0x86dd, "{name}");
                    assert_eq!(
                        usize::from(u16::from_be_bytes([ip[4], ip[5]])),
                        ip.len() - 40
                    );
                }
            }
        }
        let mut f = Vec::new();
        assert!(!frame("udp_flod", 0, &e, &mut f));
        assert!(f.is_empty());
    }

    #[test]
    fn shapes_carry_what_their_vector_classifies() {
        let e = ends();
        let get = |n: &str, i: usize| {
            let mut f = Vec::new();
            frame(n, i, &e, &mut f);
            f
        };
        // TTL 1; IPv4 options (IHL 6); more-fragments set.
        assert_eq!(get("ttl_at_most", 0)[14 + 8], 1);
        assert_eq!(get("ip_options", 0)[14] & 15, 6);
        assert_eq!(get("ipv4_fragment", 0)[14 + 6] & 0x20, 0x20);
        // SYN flood: SYN only, to the vserver port, sources spread.
        let s = get("tcp_syn_flood", 3);
        assert_eq!(s[14 + 20 + 13], SYN);
        assert_eq!(u16::from_be_bytes([s[36], s[37]]), 8080);
        assert_ne!(&get("tcp_syn_flood", 4)[26..30], &s[26..30]);
        // Oversize: the IP packet is longer than syn_max_bytes (100).
        assert!(get("tcp_syn_oversize", 0).len() - 14 > 100);
        // Bad URG: URG with a zero pointer.
        let u = get("tcp_bad_urg", 0);
        assert_eq!(u[14 + 20 + 13] & URG, URG);
        assert_eq!(&u[14 + 20 + 18..14 + 20 + 20], &[0, 0]);
        // Window 0 on an ACK.
        let w = get("tcp_window_size", 0);
        assert_eq!(&w[14 + 20 + 14..14 + 20 + 16], &[0, 0]);
        // IPv6: hop limit 1; five extension headers; 328 bytes of them.
        assert_eq!(get("ipv6_hop_limit", 0)[14 + 7], 1);
        assert_eq!(
            get("ipv6_ext_hdr_too_many", 0).len(),
            14 + 40 + 5 * 8 + 8 + 32
        );
        assert_eq!(get("ipv6_ext_hdr_too_large", 0)[14 + 40 + 1], 40);
        // Sweep: one of 32 sources, new ports.
        let (a, b) = (get("sweep", 0), get("sweep", 32));
        assert_eq!(&a[26..30], &b[26..30]);
        assert_ne!(&a[36..38], &b[36..38]);
        // ICMP types: host unreachable 3/1, source quench 4.
        assert_eq!(&get("host_unreachable", 0)[34..36], &[3, 1]);
        assert_eq!(get("tidcmp", 0)[34], 4);
    }
}
