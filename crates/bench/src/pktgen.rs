//! A raw-frame generator for the shield bench (`switchyard bench shield`).
//!
//! - Frames are built once into a [`Pool`] (Ethernet + IPv4 or IPv6 + TCP,
//!   IP and TCP checksums computed), with source addresses and ports varied
//!   over the pool, so sending costs no per-packet building.
//! - [`Generator`] sends the pool round and round through an `AF_PACKET`
//!   `SOCK_RAW` socket bound to one interface, with `PACKET_QDISC_BYPASS`
//!   (the frame goes straight to the driver's xmit, no qdisc) and
//!   `sendmmsg` batches of up to [`BATCH`] frames.
//! - A flood is always bounded: a packet count and a duration, and a stop
//!   flag (Ctrl-C).
//! - Other packet shapes (a later `ddos` scenario) come through
//!   [`Shape::Template`]: a function that writes frame `i` of the pool.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Frames per `sendmmsg` call.
pub const BATCH: usize = 64;

pub type Mac = [u8; 6];

/// A function writing frame `i` of a pool into the buffer (cleared before
/// each call). Used for shapes other than SYNs.
pub type Template = Box<dyn Fn(usize, &mut Vec<u8>) + Send + Sync>;

/// What the pool holds.
pub enum Shape {
    /// TCP SYNs to `dst`:`dst_port`, source addresses spread over
    /// `src_base`/`src_prefix` and source ports over 1024..65535, with the
    /// MSS, SACK-permitted and window-scale options of a Linux SYN without
    /// timestamps.
    Syn {
        src_base: IpAddr,
        src_prefix: u8,
        dst: IpAddr,
        dst_port: u16,
    },
    /// Any frames: the hook for other packet shapes.
    Template(Template),
}

/// Frames built once, sent round and round.
pub struct Pool {
    /// One contiguous buffer; frame i is `data[offs[i]..offs[i + 1]]`.
    data: Vec<u8>,
    offs: Vec<usize>,
}

impl Pool {
    /// Builds `n` frames (at least 1) from `src_mac` to `dst_mac`.
    pub fn build(shape: &Shape, n: usize, src_mac: Mac, dst_mac: Mac) -> Pool {
        let n = n.max(1);
        let mut data = Vec::new();
        let mut offs = vec![0];
        let mut rng = Rng(0x5eed_5ca1_ab1e_0001);
        let mut frame = Vec::with_capacity(128);
        for i in 0..n {
            frame.clear();
            match shape {
                Shape::Syn {
                    src_base,
                    src_prefix,
                    dst,
                    dst_port,
                } => {
                    let src = vary(*src_base, *src_prefix, rng.next());
                    let sport = 1024 + (rng.next() % (65535 - 1024)) as u16;
                    let seq = rng.next() as u32;
                    syn_frame(
                        &mut frame, src_mac, dst_mac, src, *dst, sport, *dst_port, seq,
                    );
                }
                Shape::Template(f) => f(i, &mut frame),
            }
            data.extend_from_slice(&frame);
            offs.push(data.len());
        }
        Pool { data, offs }
    }

    pub fn len(&self) -> usize {
        self.offs.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn frame(&self, i: usize) -> &[u8] {
        &self.data[self.offs[i]..self.offs[i + 1]]
    }
}

/// xorshift64: the same addresses every run, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// An address inside base/prefix: the host bits from `r`, avoiding the
/// all-zero and all-one hosts of an IPv4 network.
pub fn vary(base: IpAddr, prefix: u8, r: u64) -> IpAddr {
    match base {
        IpAddr::V4(a) => {
            let host_bits = 32 - u32::from(prefix.min(32));
            let mask = if host_bits >= 32 {
                u32::MAX
            } else {
                (1u32 << host_bits) - 1
            };
            let mut h = (r as u32) & mask;
            if mask >= 3 && (h == 0 || h == mask) {
                h = 1;
            }
            IpAddr::V4((u32::from(a) & !mask | h).into())
        }
        IpAddr::V6(a) => {
            let host_bits = 128 - u32::from(prefix.min(128));
            let mask = if host_bits >= 128 {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            };
            let h = (u128::from(r) | u128::from(r.rotate_left(17)) << 64) & mask;
            IpAddr::V6((u128::from(a) & !mask | h.max(1)).into())
        }
    }
}

/// The one's-complement sum of 16-bit words, not yet folded.
pub(crate) fn sum16(b: &[u8], mut s: u32) -> u32 {
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = it.remainder() {
        s += u32::from(*last) << 8;
    }
    s
}

pub(crate) fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The Internet checksum (RFC 1071) of `b`.
pub fn checksum(b: &[u8]) -> u16 {
    fold(sum16(b, 0))
}

/// TCP's checksum over the pseudo-header and `seg` (whose checksum field
/// must be zero).
pub fn tcp_checksum(src: IpAddr, dst: IpAddr, seg: &[u8]) -> u16 {
    let mut s = 0u32;
    match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            s = sum16(&a.octets(), s);
            s = sum16(&b.octets(), s);
        }
        (a, b) => {
            let v6 = |x: IpAddr| match x {
                IpAddr::V6(x) => x.octets(),
                IpAddr::V4(x) => x.to_ipv6_mapped().octets(),
            };
            s = sum16(&v6(a), s);
            s = sum16(&v6(b), s);
        }
    }
    s += u32::from(libc::IPPROTO_TCP as u16);
    s += seg.len() as u32;
    fold(sum16(seg, s))
}

/// The SYN's options: MSS 1460, NOP, NOP, SACK permitted, NOP, window
/// scale 7 (Linux without timestamps; a layout the XDP program reads).
pub const SYN_OPTIONS: [u8; 12] = [2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7];

/// Appends an Ethernet frame carrying a TCP SYN to `out`. The families of
/// `src` and `dst` must agree (an IPv4 source with an IPv6 destination is
/// sent as IPv6 with a mapped address).
#[allow(clippy::too_many_arguments)]
pub fn syn_frame(
    out: &mut Vec<u8>,
    src_mac: Mac,
    dst_mac: Mac,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
) {
    let mut tcp = Vec::with_capacity(20 + SYN_OPTIONS.len());
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&dport.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&0u32.to_be_bytes()); // ack
    let words = (20 + SYN_OPTIONS.len()) / 4;
    tcp.push((words as u8) << 4);
    tcp.push(0x02); // SYN
    tcp.extend_from_slice(&64240u16.to_be_bytes()); // window
    tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    tcp.extend_from_slice(&SYN_OPTIONS);
    tcp_frame(out, src_mac, dst_mac, src, dst, &mut tcp);
}

/// Appends Ethernet + IP headers and the TCP segment `tcp` (its checksum
/// field at 16..18 is filled in here).
pub fn tcp_frame(
    out: &mut Vec<u8>,
    src_mac: Mac,
    dst_mac: Mac,
    src: IpAddr,
    dst: IpAddr,
    tcp: &mut [u8],
) {
    tcp[16] = 0;
    tcp[17] = 0;
    let c = tcp_checksum(src, dst, tcp);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    out.extend_from_slice(&dst_mac);
    out.extend_from_slice(&src_mac);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&0x0800u16.to_be_bytes());
            let start = out.len();
            out.push(0x45);
            out.push(0);
            out.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x40, 0]); // id, DF
            out.push(64); // ttl
            out.push(libc::IPPROTO_TCP as u8);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
            let c = checksum(&out[start..start + 20]);
            out[start + 10..start + 12].copy_from_slice(&c.to_be_bytes());
        }
        (s, d) => {
            let v6 = |x: IpAddr| match x {
                IpAddr::V6(x) => x.octets(),
                IpAddr::V4(x) => x.to_ipv6_mapped().octets(),
            };
            out.extend_from_slice(&0x86ddu16.to_be_bytes());
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
            out.push(libc::IPPROTO_TCP as u8);
            out.push(64);
            out.extend_from_slice(&v6(s));
            out.extend_from_slice(&v6(d));
        }
    }
    out.extend_from_slice(tcp);
}

/// Limits of one flood: every flood has a packet count and a duration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Packets per second; None: as fast as the socket takes them.
    pub rate: Option<u64>,
    pub max_packets: u64,
    pub max_duration: Duration,
}

/// What one flood did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    pub packets: u64,
    /// Frames the kernel refused (ENOBUFS and the like: the peer's queue
    /// was full), not counted in `packets`.
    pub refused: u64,
    pub elapsed: Duration,
}

impl Sent {
    pub fn rate(&self) -> f64 {
        self.packets as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// An AF_PACKET socket bound to one interface of the calling thread's
/// network namespace.
pub struct Generator {
    fd: OwnedFd,
}

impl Generator {
    /// Opens the socket on `ifname` (in the calling thread's namespace).
    pub fn open(ifname: &str) -> io::Result<Generator> {
        let name = std::ffi::CString::new(ifname)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0: the socket sends and receives nothing, so the flood's
        // replies are not copied to us.
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; zeroed is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: the address struct and its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        // PACKET_QDISC_BYPASS: straight to the driver, as pktgen does.
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, one)?;
        // A large send buffer so a batch is not cut by SO_SNDBUF; failure is
        // harmless (the kernel caps it).
        let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        Ok(Generator { fd })
    }

    /// Sends the pool round and round within `limits`, until `stop`.
    pub fn flood(&self, pool: &Pool, limits: Limits, stop: &AtomicBool) -> Sent {
        let start = Instant::now();
        let mut sent = Sent::default();
        if pool.is_empty() {
            return sent;
        }
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(BATCH);
        // SAFETY: mmsghdr is plain data; zeroed is valid (no address).
        let mut msgs: Vec<libc::mmsghdr> =
            (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
        let mut next = 0usize;
        let mut checks = 0u32;
        while sent.packets < limits.max_packets {
            // The clock and the flag every 16 batches: cheap, and at most
            // about 1,000 frames late.
            checks = checks.wrapping_add(1);
            if checks.is_multiple_of(16) || limits.rate.is_some() {
                let el = start.elapsed();
                if el >= limits.max_duration || stop.load(Relaxed) {
                    break;
                }
                if let Some(rate) = limits.rate {
                    let due = (el.as_secs_f64() * rate as f64) as u64;
                    if sent.packets + sent.refused >= due {
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                }
            }
            let want = ((limits.max_packets - sent.packets) as usize).min(BATCH);
            iov.clear();
            for _ in 0..want {
                let f = pool.frame(next);
                next = (next + 1) % pool.len();
                iov.push(libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                });
            }
            for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
                m.msg_hdr.msg_iov = v as *mut libc::iovec;
                m.msg_hdr.msg_iovlen = 1;
                m.msg_len = 0;
            }
            // SAFETY: `want` headers, each pointing at one iovec into the
            // pool, all alive for the call; the kernel only reads them.
            let n =
                unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), want as u32, 0) };
            if n < 0 {
                // The whole batch's first frame was refused (a full queue
                // at the peer): count it and go on with the next.
                sent.refused += 1;
            } else {
                let n = n as u64;
                sent.packets += n;
                if (n as usize) < want {
                    // The frame after the last sent one was refused.
                    sent.refused += 1;
                }
            }
        }
        sent.elapsed = start.elapsed();
        sent
    }
}

fn setsockopt(fd: &OwnedFd, level: i32, name: i32, v: libc::c_int) -> io::Result<()> {
    // SAFETY: an int option and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Parses "02:00:00:00:00:01".
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut m = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const A: Mac = [2, 0, 0, 0, 0, 1];
    const B: Mac = [2, 0, 0, 0, 0, 2];

    /// Verifies a SYN frame as a receiver would: the IPv4 header checksum
    /// sums to zero, the TCP checksum over the pseudo-header sums to zero.
    fn verify(f: &[u8]) -> (IpAddr, IpAddr, u16, u16) {
        assert_eq!(&f[..6], &B);
        assert_eq!(&f[6..12], &A);
        let et = u16::from_be_bytes([f[12], f[13]]);
        let (src, dst, seg) = if et == 0x0800 {
            let ip = &f[14..34];
            assert_eq!(ip[0], 0x45);
            assert_eq!(checksum(ip), 0, "IPv4 header checksum");
            let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            assert_eq!(total, f.len() - 14);
            let s = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let d = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (IpAddr::V4(s), IpAddr::V4(d), &f[34..])
        } else {
            assert_eq!(et, 0x86dd);
            let ip = &f[14..54];
            assert_eq!(ip[0] >> 4, 6);
            assert_eq!(
                u16::from_be_bytes([ip[4], ip[5]]) as usize,
                f.len() - 54,
                "payload length"
            );
            let mut s = [0u8; 16];
            s.copy_from_slice(&ip[8..24]);
            let mut d = [0u8; 16];
            d.copy_from_slice(&ip[24..40]);
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                &f[54..],
            )
        };
        // A correct checksum makes the whole sum (with the field) fold to 0.
        assert_eq!(tcp_checksum(src, dst, seg), 0, "TCP checksum");
        assert_eq!(seg[13], 0x02, "SYN only");
        assert_eq!(usize::from(seg[12] >> 4) * 4, 20 + SYN_OPTIONS.len());
        assert_eq!(&seg[20..], &SYN_OPTIONS);
        (
            src,
            dst,
            u16::from_be_bytes([seg[0], seg[1]]),
            u16::from_be_bytes([seg[2], seg[3]]),
        )
    }

    #[test]
    fn checksum_of_a_known_ipv4_header() {
        // The example of RFC 1071's usual illustration (Wikipedia's IPv4
        // header checksum example): 0xb861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        // An odd length pads with a zero byte.
        assert_eq!(checksum(&[0x01]), !0x0100);
    }

    #[test]
    fn syn_pools_vary_sources_and_check_out() {
        let dst: IpAddr = "10.88.0.1".parse().unwrap();
        let shape = Shape::Syn {
            src_base: "10.200.0.0".parse().unwrap(),
            src_prefix: 16,
            dst,
            dst_port: 8080,
        };
        let pool = Pool::build(&shape, 1000, A, B);
        assert_eq!(pool.len(), 1000);
        let mut srcs = std::collections::HashSet::new();
        for i in 0..pool.len() {
            let (s, d, sport, dport) = verify(pool.frame(i));
            assert_eq!(d, dst);
            assert_eq!(dport, 8080);
            assert!(sport >= 1024);
            let IpAddr::V4(s4) = s else {
                panic!("IPv4 source expected")
            };
            assert_eq!(s4.octets()[..2], [10, 200]);
            srcs.insert(s);
        }
        assert!(srcs.len() > 900, "sources vary: {}", srcs.len());
        // Built the same every time.
        let again = Pool::build(&shape, 1000, A, B);
        assert_eq!(pool.frame(7), again.frame(7));
    }

    #[test]
    fn ipv6_syns_check_out() {
        let shape = Shape::Syn {
            src_base: "fd88:200::".parse().unwrap(),
            src_prefix: 64,
            dst: "fd88::1".parse().unwrap(),
            dst_port: 443,
        };
        let pool = Pool::build(&shape, 50, A, B);
        for i in 0..pool.len() {
            let (s, _, _, dport) = verify(pool.frame(i));
            assert_eq!(dport, 443);
            let IpAddr::V6(s6) = s else {
                panic!("IPv6 source expected")
            };
            assert_eq!(s6.segments()[..4], [0xfd88, 0x200, 0, 0]);
        }
    }

    #[test]
    fn templates_build_any_frame() {
        let t: Template = Box::new(|i, out| {
            // A bare ACK from a fixed source, port i.
            let mut tcp = vec![0u8; 20];
            tcp[..2].copy_from_slice(&(1000 + i as u16).to_be_bytes());
            tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
            tcp[12] = 5 << 4;
            tcp[13] = 0x10;
            tcp_frame(
                out,
                A,
                B,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                &mut tcp,
            );
        });
        let pool = Pool::build(&Shape::Template(t), 3, A, B);
        assert_eq!(pool.len(), 3);
        let f = pool.frame(2);
        assert_eq!(u16::from_be_bytes([f[34], f[35]]), 1002);
        let src = "10.0.0.1".parse().unwrap();
        let dst = "10.0.0.2".parse().unwrap();
        assert_eq!(tcp_checksum(src, dst, &f[34..]), 0);
        assert_eq!(checksum(&f[14..34]), 0);
    }

    #[test]
    fn vary_stays_inside_the_prefix() {
        let base: IpAddr = "10.200.0.0".parse().unwrap();
        for r in [0u64, 1, u64::MAX, 0xffff, 0x1_0000] {
            let IpAddr::V4(a) = vary(base, 16, r) else {
                panic!("v4")
            };
            let o = a.octets();
            assert_eq!(o[..2], [10, 200]);
            assert!(o[2..] != [0, 0] && o[2..] != [255, 255]);
        }
        assert_eq!(
            vary("10.1.2.3".parse().unwrap(), 32, 99),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02:00"), None);
    }
}
