//! Ethernet frames built byte by byte, for tests that must send what no
//! socket API would (bad headers, fragments, unknown TCP options), and a
//! raw AF_PACKET sender on one interface. Checksums are right unless a
//! test breaks them on purpose.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMP6: u8 = 58;

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;

fn sum16(data: &[u8]) -> u32 {
    data.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An IP address pair for the pseudo-header of a transport checksum.
#[derive(Clone, Copy)]
pub enum Addrs {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl Addrs {
    fn pseudo(&self, proto: u8, len: usize) -> u32 {
        let mut p = Vec::new();
        match self {
            Addrs::V4(s, d) => {
                p.extend_from_slice(s);
                p.extend_from_slice(d);
                p.extend_from_slice(&[0, proto]);
                p.extend_from_slice(&(len as u16).to_be_bytes());
            }
            Addrs::V6(s, d) => {
                p.extend_from_slice(s);
                p.extend_from_slice(d);
                p.extend_from_slice(&(len as u32).to_be_bytes());
                p.extend_from_slice(&[0, 0, 0, proto]);
            }
        }
        sum16(&p)
    }
}

/// A TCP segment: header (with `options`, padded to 4 bytes), data and
/// checksum.
pub struct Tcp<'a> {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub flags: u8,
    pub window: u16,
    pub urgent: u16,
    pub options: &'a [u8],
    pub data: &'a [u8],
}

impl Tcp<'_> {
    pub fn bytes(&self, a: Addrs) -> Vec<u8> {
        let olen = self.options.len().div_ceil(4) * 4;
        let mut t = Vec::with_capacity(20 + olen + self.data.len());
        t.extend_from_slice(&self.sport.to_be_bytes());
        t.extend_from_slice(&self.dport.to_be_bytes());
        t.extend_from_slice(&self.seq.to_be_bytes());
        let ack: u32 = if self.flags & ACK != 0 { 1 } else { 0 };
        t.extend_from_slice(&ack.to_be_bytes());
        t.push((((20 + olen) / 4) as u8) << 4);
        t.push(self.flags);
        t.extend_from_slice(&self.window.to_be_bytes());
        t.extend_from_slice(&[0, 0]);
        t.extend_from_slice(&self.urgent.to_be_bytes());
        t.extend_from_slice(self.options);
        t.resize(20 + olen, 0);
        t.extend_from_slice(self.data);
        let c = fold(a.pseudo(TCP, t.len()) + sum16(&t));
        t[16..18].copy_from_slice(&c.to_be_bytes());
        t
    }
}

pub fn udp(a: Addrs, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + data.len());
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    let c = fold(a.pseudo(UDP, u.len()) + sum16(&u));
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

/// An ICMPv4 message (no pseudo-header), or ICMPv6 (with one) for `V6`.
pub fn icmp(a: Addrs, kind: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(body);
    let s = match a {
        Addrs::V4(..) => sum16(&m),
        Addrs::V6(..) => a.pseudo(ICMP6, m.len()) + sum16(&m),
    };
    let c = fold(s);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An IPv4 packet: `frag` is the flags and offset field (0x2000: more
/// fragments), `options` padded to 4 bytes.
pub fn ipv4(
    src: [u8; 4],
    dst: [u8; 4],
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
    p.extend_from_slice(&[0x12, 0x34]);
    p.extend_from_slice(&frag.to_be_bytes());
    p.push(ttl);
    p.push(proto);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(options);
    p.resize(hlen, 0);
    let c = fold(sum16(&p));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 packet whose extension headers `ext` (already chained:
/// `next` names the first) precede `payload`.
pub fn ipv6(
    src: [u8; 16],
    dst: [u8; 16],
    next: u8,
    hop_limit: u8,
    ext: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut p = Vec::with_capacity(40 + ext.len() + payload.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&((ext.len() + payload.len()) as u16).to_be_bytes());
    p.push(next);
    p.push(hop_limit);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(ext);
    p.extend_from_slice(payload);
    p
}

/// An extension header of `len8` 8-octet units (beyond the first 8)
/// naming `next`, filled with padding options; fragment headers (44) are
/// 8 bytes with `more` set.
pub fn ext_header(kind: u8, next: u8, len8: u8) -> Vec<u8> {
    if kind == 44 {
        return vec![next, 0, 0, 1, 0, 0, 0x12, 0x34];
    }
    let total = (len8 as usize + 1) * 8;
    let mut h = vec![next, len8];
    // PadN covering the rest.
    h.push(1);
    h.push((total - 4) as u8);
    h.resize(total, 0);
    h
}

pub fn ethernet(dst: [u8; 6], src: [u8; 6], v6: bool, packet: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + packet.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    f.extend_from_slice(packet);
    f
}

/// A raw packet socket bound to one interface (in the namespace of the
/// calling thread).
pub struct Sender {
    fd: OwnedFd,
}

impl Sender {
    pub fn new(dev: &str) -> std::io::Result<Sender> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket creation; the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = std::ffi::CString::new(dev).map_err(std::io::Error::other)?;
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a zeroed sockaddr_ll is valid; its fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: sll outlives the call; its size is given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Sender { fd })
    }

    pub fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        // SAFETY: frame is readable for its length.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}
