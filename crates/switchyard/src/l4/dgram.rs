//! Datagrams in batches: recvmmsg(2) fills several at once, sendmmsg(2)
//! sends a queue of them to several addresses at once.
//!
//! On loopback and fast links the kernel's per-call work (the system call,
//! the file and socket look-ups, one softirq pass per send) is a large
//! share of a relayed datagram. A udp vserver under load finds several
//! datagrams waiting per wake-up; reading and writing them in one call
//! each is what Envoy's UDP listener does (recvmmsg, 16 at a time).

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::Arc;

use socket2::SockAddr;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::stats::{self, Sharded, VsCounters};

/// Largest datagram relayed (the largest a UDP/IPv4 datagram can be).
pub const MAX_DATAGRAM: usize = 65_535;

/// Datagrams one recvmmsg(2) may return.
pub const RECV_BATCH: usize = 16;

/// Datagrams one sendmmsg(2) is given.
const SEND_BATCH: usize = 64;

/// Most datagrams a send queue holds; past it new ones are dropped, as a
/// full socket buffer would drop them.
const QUEUE_DATAGRAMS: usize = 4096;

/// Most bytes a send queue holds.
const QUEUE_BYTES: usize = 16 << 20;

/// Registers `sock` with the worker's reactor for readability only.
///
/// Write interest is left out on purpose: with it, every datagram sent
/// wakes the epoll set again when its buffer is freed (sock_wfree), which
/// costs a few per cent of a relayed datagram. A send that would block is
/// retried after a pause instead (`SendQueue::send` says when).
pub fn register_readable(sock: std::net::UdpSocket) -> io::Result<AsyncFd<std::net::UdpSocket>> {
    sock.set_nonblocking(true)?;
    // SAFETY: the AsyncFd owns the socket, so its descriptor stays open and
    // the same for as long as the registration lives.
    unsafe { AsyncFd::register_with_interest(sock, Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

/// Room for `RECV_BATCH` datagrams of any size and their senders.
///
/// Each slot is `MAX_DATAGRAM` bytes, zeroed by the allocator: the pages of
/// a slot are only backed by memory once a datagram that long wrote them.
pub struct RecvBatch {
    bufs: Vec<Box<[u8]>>,
    names: Vec<libc::sockaddr_storage>,
    lens: Vec<(usize, libc::socklen_t, bool)>,
    held: usize,
    /// Room for each datagram's packet-info control message, when the
    /// socket was asked for destinations (`ask_destinations`).
    controls: Vec<Control>,
    destinations: Vec<Option<IpAddr>>,
    /// The call's vectors and headers, rebuilt for every call (they point
    /// into the fields above) in room kept from the first: no allocation
    /// per read.
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch::new(RECV_BATCH)
    }
}

impl RecvBatch {
    pub fn new(slots: usize) -> RecvBatch {
        // SAFETY: all-zero bytes are a valid sockaddr_storage.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        RecvBatch {
            bufs: (0..slots)
                .map(|_| vec![0u8; MAX_DATAGRAM].into_boxed_slice())
                .collect(),
            names: vec![zero; slots],
            lens: vec![(0, 0, false); slots],
            held: 0,
            controls: Vec::new(),
            destinations: Vec::new(),
            iovs: Vec::with_capacity(slots),
            hdrs: Vec::with_capacity(slots),
        }
    }

    /// Also reads the address each datagram was sent to (for a socket on a
    /// wildcard address that `ask_destinations` was called on).
    pub fn with_destinations(mut self) -> RecvBatch {
        self.controls = vec![[0u64; CONTROL_WORDS]; self.bufs.len()];
        self.destinations = vec![None; self.bufs.len()];
        self
    }

    /// Slots, the most one `recv` returns.
    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Reads the datagrams waiting on `fd` (non-blocking), as many as fit;
    /// `WouldBlock` when none was waiting.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.bufs.len();
        let RecvBatch {
            bufs,
            names,
            lens,
            held,
            controls,
            destinations,
            iovs,
            hdrs,
        } = self;
        iovs.clear();
        iovs.extend(bufs.iter_mut().map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        }));
        hdrs.clear();
        for (k, (iov, name)) in iovs.iter_mut().zip(names.iter_mut()).enumerate() {
            // SAFETY: all-zero bytes are a valid mmsghdr (null pointers,
            // zero lengths); the fields that matter are set below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            if let Some(c) = controls.get_mut(k) {
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = std::mem::size_of::<Control>() as _;
            }
            hdrs.push(h);
        }
        // SAFETY: `hdrs` holds `n` headers whose name, iovec and control
        // pointers point into `names`, `iovs`, `controls` and `bufs`, all
        // alive and unmoved for the duration of the call.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            *held = 0;
            return Err(io::Error::last_os_error());
        }
        let got = r as usize;
        for (slot, h) in lens.iter_mut().zip(hdrs.iter()).take(got) {
            let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            *slot = (h.msg_len as usize, h.msg_hdr.msg_namelen, truncated);
        }
        for (d, h) in destinations.iter_mut().zip(hdrs.iter()).take(got) {
            *d = packet_destination(&h.msg_hdr);
        }
        *held = got;
        Ok(got)
    }

    /// The address datagram `i` was sent to, when asked for
    /// (`with_destinations`) and the kernel said.
    pub fn destination(&self, i: usize) -> Option<IpAddr> {
        if i >= self.held {
            return None;
        }
        self.destinations.get(i).copied().flatten()
    }

    /// Datagram `i` of the last `recv` and its sender; None for one that
    /// was cut short or came from an address that is not IP.
    pub fn get(&self, i: usize) -> Option<(SocketAddr, &[u8])> {
        if i >= self.held {
            return None;
        }
        let (len, namelen, truncated) = self.lens[i];
        if truncated {
            return None;
        }
        // SAFETY: the kernel wrote a sockaddr of `namelen` bytes for this
        // datagram into the storage; a family other than IP gives None.
        let from = unsafe { SockAddr::new(self.names[i], namelen) }.as_socket()?;
        Some((from, &self.bufs[i][..len.min(MAX_DATAGRAM)]))
    }
}

/// One datagram waiting in a `SendQueue`.
struct Queued {
    addr: SocketAddr,
    to: SockAddr,
    /// The source address to send from (a wildcard socket answering from
    /// the address the client wrote to); None: the kernel's choice.
    from: Option<IpAddr>,
    start: usize,
    len: usize,
    counters: Arc<Sharded<VsCounters>>,
}

/// Datagrams waiting to leave one unconnected socket, each to its own
/// address, counted in their vserver's counters once sent (or dropped).
#[derive(Default)]
pub struct SendQueue {
    data: Vec<u8>,
    queued: VecDeque<Queued>,
    /// The kernel refused a segmented send: one datagram per message.
    no_gso: bool,
    scratch: SendScratch,
}

/// One message of a send: `count` queued datagrams from `first`, cut in
/// `segment`-byte datagrams when `count` > 1.
struct Run {
    first: usize,
    count: usize,
    segment: usize,
}

/// A send's messages, vectors, control messages and headers, rebuilt for
/// every sendmmsg (they point into the queue) in room kept from the first:
/// no allocation per send.
#[derive(Default)]
struct SendScratch {
    runs: Vec<Run>,
    iovs: Vec<libc::iovec>,
    controls: Vec<Control>,
    hdrs: Vec<libc::mmsghdr>,
}

impl SendQueue {
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Queues `payload` for `to`, to leave from `from` (None: the kernel
    /// picks); false (and counted as dropped) when the queue is full.
    pub fn push(
        &mut self,
        to: SocketAddr,
        from: Option<IpAddr>,
        payload: &[u8],
        counters: &Arc<Sharded<VsCounters>>,
    ) -> bool {
        if self.queued.len() >= QUEUE_DATAGRAMS || self.data.len() + payload.len() > QUEUE_BYTES {
            stats::inc(&counters.local().udp_dropped);
            return false;
        }
        let start = self.data.len();
        self.data.extend_from_slice(payload);
        self.queued.push_back(Queued {
            addr: to,
            to: SockAddr::from(to),
            from,
            start,
            len: payload.len(),
            counters: counters.clone(),
        });
        true
    }

    /// Sends what is queued on `fd` (non-blocking) until the queue is empty
    /// or the socket would block (`WouldBlock`, the rest stays queued). A
    /// datagram the kernel refuses for its own reason (no route, too big) is
    /// dropped and counted; the others still go.
    ///
    /// Consecutive datagrams of one size to one address (a burst of replies
    /// to one client) leave as one buffer the kernel cuts into datagrams
    /// (UDP generic segmentation offload, `UDP_SEGMENT`): the IP output
    /// path runs once for the run instead of once per datagram, and a NIC
    /// that segments in hardware takes even that off the CPU. Where the
    /// kernel refuses it, the queue sends one datagram per message from
    /// then on.
    pub fn send(&mut self, fd: RawFd) -> io::Result<()> {
        while !self.queued.is_empty() {
            let SendScratch {
                runs,
                iovs,
                controls,
                hdrs,
            } = &mut self.scratch;
            runs.clear();
            let mut i = 0;
            while i < self.queued.len() && runs.len() < SEND_BATCH {
                let q = &self.queued[i];
                let mut count = 1;
                if !self.no_gso && q.len <= GSO_MAX_SEGMENT && q.len > 0 {
                    while count < GSO_MAX_SEGMENTS
                        && (count + 1) * q.len <= GSO_MAX_BYTES
                        && self.queued.get(i + count).is_some_and(|n| {
                            n.addr == q.addr
                                && n.from == q.from
                                && n.len == q.len
                                && n.start == q.start + count * q.len
                        })
                    {
                        count += 1;
                    }
                }
                runs.push(Run {
                    first: i,
                    count,
                    segment: q.len,
                });
                i += count;
            }
            let n = runs.len();
            iovs.clear();
            iovs.extend(runs.iter().map(|r| {
                let q = &self.queued[r.first];
                libc::iovec {
                    iov_base: self.data[q.start..].as_ptr() as *mut libc::c_void,
                    iov_len: q.len * r.count,
                }
            }));
            // Room for each run's control messages (segment size, source).
            controls.clear();
            controls.resize(n, [0u64; CONTROL_WORDS]);
            hdrs.clear();
            for ((r, iov), control) in runs.iter().zip(iovs.iter_mut()).zip(controls.iter_mut()) {
                let q = &self.queued[r.first];
                // SAFETY: all-zero bytes are a valid mmsghdr.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = q.to.as_ptr() as *mut libc::c_void;
                h.msg_hdr.msg_namelen = q.to.len();
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                let segment = (r.count > 1).then_some(r.segment as u16);
                let len = write_controls(control, segment, q.from);
                if len > 0 {
                    h.msg_hdr.msg_control = control.as_mut_ptr().cast();
                    h.msg_hdr.msg_controllen = len as _;
                }
                hdrs.push(h);
            }
            // SAFETY: `hdrs` holds `n` headers pointing into `self.data`,
            // `iovs`, `controls` and the queued addresses, unchanged during
            // the call; sendmmsg only reads them.
            let r = unsafe {
                libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Err(e),
                    io::ErrorKind::Interrupted => continue,
                    _ if runs[0].count > 1 && e.raw_os_error() == Some(libc::EIO) => {
                        // No segmentation on this path (no checksum
                        // offload, IPsec): one datagram per message from
                        // now on.
                        self.no_gso = true;
                    }
                    _ => {
                        // The first message failed for a reason of its
                        // own (no route, a source address no longer
                        // here): drop its datagrams, go on.
                        for q in self.queued.drain(..runs[0].count) {
                            stats::inc(&q.counters.local().udp_dropped);
                        }
                    }
                }
            } else {
                let sent: usize = runs.iter().take(r as usize).map(|r| r.count).sum();
                for q in self.queued.drain(..sent) {
                    let c = q.counters.local();
                    stats::inc(&c.udp_datagrams_out);
                    stats::add(&c.bytes_out, q.len as u64);
                }
            }
            if self.queued.is_empty() {
                self.data.clear();
            }
        }
        Ok(())
    }
}

thread_local! {
    /// The kernel refused a segmented send on a connected socket of this
    /// thread: `send_burst` sends one datagram per call from then on.
    static NO_GSO: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sends `datagrams`, in order, on connected socket `fd` (non-blocking):
/// runs of one size as one segmented send, as `SendQueue::send` does.
/// Returns how many went before the first failure; the failure itself only
/// when the first datagram failed.
pub fn send_burst(fd: RawFd, datagrams: &[&[u8]]) -> io::Result<usize> {
    let mut control: Control = [0u64; CONTROL_WORDS];
    let mut iovs: Vec<libc::iovec> = Vec::new();
    let mut sent = 0;
    while sent < datagrams.len() {
        let first = datagrams[sent];
        let mut count = 1;
        if datagrams.len() - sent > 1
            && first.len() <= GSO_MAX_SEGMENT
            && !first.is_empty()
            && !NO_GSO.with(std::cell::Cell::get)
        {
            while count < GSO_MAX_SEGMENTS
                && (count + 1) * first.len() <= GSO_MAX_BYTES
                && datagrams
                    .get(sent + count)
                    .is_some_and(|d| d.len() == first.len())
            {
                count += 1;
            }
        }
        let r = if count == 1 {
            // SAFETY: a valid buffer of the length given.
            unsafe { libc::send(fd, first.as_ptr().cast(), first.len(), libc::MSG_DONTWAIT) }
        } else {
            iovs.clear();
            iovs.extend(datagrams[sent..sent + count].iter().map(|d| libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            }));
            // SAFETY: all-zero bytes are a valid msghdr.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = iovs.as_mut_ptr();
            h.msg_iovlen = count as _;
            let len = write_controls(&mut control, Some(first.len() as u16), None);
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = len as _;
            // SAFETY: `h` points to `iovs` and `control`, alive and unchanged
            // during the call, which only reads them.
            unsafe { libc::sendmsg(fd, &h, libc::MSG_DONTWAIT) }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if count > 1 && e.raw_os_error() == Some(libc::EIO) {
                NO_GSO.with(|g| g.set(true));
                continue;
            }
            return if sent > 0 { Ok(sent) } else { Err(e) };
        }
        sent += count;
    }
    Ok(sent)
}

/// `UDP_SEGMENT` (linux/udp.h): the size of the datagrams to cut a send in.
const UDP_SEGMENT: libc::c_int = 103;

/// Datagrams joined in one segmented send at most (the kernel's
/// UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;

/// Largest datagram sent segmented: each segment must fit the path's MTU
/// with its headers, so only datagrams that fit IPv6's minimum MTU are
/// joined; larger ones go one per message.
const GSO_MAX_SEGMENT: usize = 1200;

/// Payload of one segmented send at most (one IP packet's worth).
const GSO_MAX_BYTES: usize = 65_000;

/// Room for a send's or a receive's control messages (a segment size and
/// an IPv6 packet info at most: 24 + 40 bytes), aligned for cmsghdr.
const CONTROL_WORDS: usize = 8;
type Control = [u64; CONTROL_WORDS];

/// `struct in6_pktinfo` (linux/ipv6.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct In6Pktinfo {
    addr: [u8; 16],
    ifindex: u32,
}

/// Asks the kernel for each datagram's destination address (IP_PKTINFO,
/// IPV6_RECVPKTINFO): a socket on a wildcard address must answer from the
/// address each client wrote to, or clients that check (connected
/// sockets, most resolvers) drop the answer.
pub fn ask_destinations(sock: &std::net::UdpSocket, v6: bool) -> io::Result<()> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to an int of the length given.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(sock),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The destination address in a received message's packet info, if any.
fn packet_destination(h: &libc::msghdr) -> Option<IpAddr> {
    if h.msg_control.is_null() || h.msg_controllen == 0 {
        return None;
    }
    // SAFETY: the kernel filled `msg_control` with `msg_controllen` bytes of
    // control messages; CMSG_FIRSTHDR/NXTHDR stay within them, and each
    // payload is read unaligned with its own length checked.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let len = (*c).cmsg_len as usize;
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::IPPROTO_IP
                && kind == libc::IP_PKTINFO
                && len >= libc::CMSG_LEN(std::mem::size_of::<libc::in_pktinfo>() as u32) as usize
            {
                let p = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                return Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr))));
            }
            if level == libc::IPPROTO_IPV6
                && kind == libc::IPV6_PKTINFO
                && len >= libc::CMSG_LEN(std::mem::size_of::<In6Pktinfo>() as u32) as usize
            {
                let p = std::ptr::read_unaligned(data.cast::<In6Pktinfo>());
                return Some(IpAddr::V6(Ipv6Addr::from(p.addr)));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Writes a send's control messages into `buf`: the size to cut the send
/// in (`UDP_SEGMENT`) and the source address (packet info). Returns their
/// length in bytes (0: none).
fn write_controls(buf: &mut Control, segment: Option<u16>, from: Option<IpAddr>) -> usize {
    *buf = [0u64; CONTROL_WORDS];
    let base: *mut u8 = buf.as_mut_ptr().cast();
    let mut at = 0usize;
    // SAFETY: each message is written at an offset CMSG_SPACE-aligned from
    // the 8-aligned start of `buf`, and the two together (24 + 40 bytes at
    // most) fit its 64 bytes.
    unsafe {
        if let Some(segment) = segment {
            let c = base.add(at).cast::<libc::cmsghdr>();
            (*c).cmsg_len = libc::CMSG_LEN(2) as _;
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), segment);
            at += libc::CMSG_SPACE(2) as usize;
        }
        match from {
            Some(IpAddr::V4(ip)) => {
                let c = base.add(at).cast::<libc::cmsghdr>();
                let size = std::mem::size_of::<libc::in_pktinfo>() as u32;
                (*c).cmsg_len = libc::CMSG_LEN(size) as _;
                (*c).cmsg_level = libc::IPPROTO_IP;
                (*c).cmsg_type = libc::IP_PKTINFO;
                let p = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(ip).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>(), p);
                at += libc::CMSG_SPACE(size) as usize;
            }
            Some(IpAddr::V6(ip)) => {
                let c = base.add(at).cast::<libc::cmsghdr>();
                let size = std::mem::size_of::<In6Pktinfo>() as u32;
                (*c).cmsg_len = libc::CMSG_LEN(size) as _;
                (*c).cmsg_level = libc::IPPROTO_IPV6;
                (*c).cmsg_type = libc::IPV6_PKTINFO;
                let p = In6Pktinfo {
                    addr: ip.octets(),
                    ifindex: 0,
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<In6Pktinfo>(), p);
                at += libc::CMSG_SPACE(size) as usize;
            }
            None => {}
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn counters() -> Arc<Sharded<VsCounters>> {
        Arc::new(Sharded::default())
    }

    /// Datagrams from two senders, sent as one queue to two addresses,
    /// arrive whole, in order per sender, with the right sender address.
    #[test]
    fn queue_out_and_batch_in() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_nonblocking(true).expect("nonblocking");
        let rx2 = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx2.set_nonblocking(true).expect("nonblocking");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let c = counters();
        let mut q = SendQueue::default();
        let big = vec![7u8; 60_000];
        for i in 0..20u8 {
            let to = if i % 2 == 0 { &rx } else { &rx2 };
            let payload: &[u8] = if i == 4 { &big } else { &[i; 3] };
            assert!(q.push(to.local_addr().expect("addr"), None, payload, &c));
        }
        q.send(tx.as_raw_fd()).expect("send");
        assert!(q.is_empty());
        let sum = c.read();
        assert_eq!(sum.udp_datagrams_out, 20);
        assert_eq!(sum.bytes_out, 19 * 3 + 60_000);

        let mut b = RecvBatch::new(4);
        let mut seen = Vec::new();
        loop {
            match b.recv(rx.as_raw_fd()) {
                Ok(n) => {
                    assert!(n <= 4);
                    for i in 0..n {
                        let (from, d) = b.get(i).expect("datagram");
                        assert_eq!(from, tx.local_addr().expect("addr"));
                        seen.push(d.to_vec());
                    }
                }
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                    break;
                }
            }
        }
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[2], big);
        for (k, d) in seen.iter().enumerate() {
            if k != 2 {
                assert_eq!(d, &vec![(2 * k) as u8; 3]);
            }
        }
        assert!(b.get(4).is_none());
    }

    /// A burst of same-size datagrams to one address (sent segmented) still
    /// arrives as separate datagrams, in order, between datagrams of other
    /// sizes and to other addresses.
    #[test]
    fn segmented_runs_arrive_as_datagrams() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_nonblocking(true).expect("nonblocking");
        let other = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let to = rx.local_addr().expect("addr");
        let c = counters();
        let mut q = SendQueue::default();
        let mut expect = Vec::new();
        // 100 of 64 bytes (more than one run's 64 segments), one of 10, 3 of
        // 1,000, one elsewhere, 2 of 1,000 again, 3 of 1,300 (too big to
        // join).
        let mut sizes = vec![64usize; 100];
        sizes.extend([10, 1000, 1000, 1000, 0, 1000, 1000, 1300, 1300, 1300]);
        for (k, &len) in sizes.iter().enumerate() {
            if len == 0 {
                assert!(q.push(other.local_addr().expect("addr"), None, b"x", &c));
                continue;
            }
            let d = vec![k as u8; len];
            assert!(q.push(to, None, &d, &c));
            expect.push(d);
        }
        q.send(tx.as_raw_fd()).expect("send");
        assert!(!q.no_gso, "this kernel segments UDP on loopback");
        assert_eq!(c.read().udp_datagrams_out, sizes.len() as u64);
        let mut b = RecvBatch::new(16);
        let mut seen = Vec::new();
        while let Ok(n) = b.recv(rx.as_raw_fd()) {
            for i in 0..n {
                seen.push(b.get(i).expect("datagram").1.to_vec());
            }
        }
        assert_eq!(seen.len(), expect.len());
        assert!(seen == expect, "datagrams differ or are out of order");
    }

    /// A burst on a connected socket arrives as the datagrams it was made
    /// of, in order, whether runs of one size were joined or not.
    #[test]
    fn bursts_arrive_as_datagrams_in_order() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_nonblocking(true).expect("nonblocking");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        tx.connect(rx.local_addr().expect("addr")).expect("connect");
        let owned: Vec<Vec<u8>> = [5usize, 5, 5, 5, 5, 9, 5, 5, 1300, 1300, 5]
            .iter()
            .enumerate()
            .map(|(k, &n)| vec![k as u8; n])
            .chain((0..70).map(|k| vec![k as u8; 64]))
            .collect();
        let burst: Vec<&[u8]> = owned.iter().map(|d| &d[..]).collect();
        assert_eq!(
            send_burst(tx.as_raw_fd(), &burst).expect("send"),
            burst.len()
        );
        assert_eq!(send_burst(tx.as_raw_fd(), &burst[..1]).expect("send"), 1);
        let mut b = RecvBatch::new(16);
        let mut seen = Vec::new();
        while let Ok(n) = b.recv(rx.as_raw_fd()) {
            for i in 0..n {
                seen.push(b.get(i).expect("datagram").1.to_vec());
            }
        }
        assert_eq!(seen.len(), owned.len() + 1);
        assert!(
            seen[..owned.len()] == owned[..],
            "datagrams differ or are out of order"
        );
        assert_eq!(seen[owned.len()], owned[0]);
    }

    /// A socket on a wildcard address learns where each datagram was sent,
    /// and answers from that address: a connected client, which takes
    /// datagrams from the address it wrote to only, gets the answer.
    #[test]
    fn wildcard_socket_answers_from_the_address_written_to() {
        let server = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        server.set_nonblocking(true).expect("nonblocking");
        ask_destinations(&server, false).expect("IP_PKTINFO");
        let port = server.local_addr().expect("addr").port();
        let written_to: SocketAddr = ([127, 0, 0, 3], port).into();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        client.connect(written_to).expect("connect");
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("timeout");
        client.send(b"q1").expect("send");
        client.send(b"q2").expect("send");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut b = RecvBatch::new(4).with_destinations();
        let n = b.recv(server.as_raw_fd()).expect("recv");
        assert_eq!(n, 2);
        let c = counters();
        let mut q = SendQueue::default();
        for i in 0..n {
            assert_eq!(b.destination(i), Some(written_to.ip()));
            let (from, d) = b.get(i).expect("datagram");
            let mut answer = b"a-".to_vec();
            answer.extend_from_slice(d);
            assert!(q.push(from, b.destination(i), &answer, &c));
        }
        q.send(server.as_raw_fd()).expect("send");
        let mut buf = [0u8; 16];
        for want in [&b"a-q1"[..], b"a-q2"] {
            let n = client
                .recv(&mut buf)
                .expect("the answer comes from 127.0.0.3");
            assert_eq!(&buf[..n], want);
        }
    }

    /// The same over IPv6: the destination (::1) is read from
    /// IPV6_PKTINFO, and the answer sent with it reaches a connected client.
    #[test]
    fn wildcard_ipv6_socket_learns_and_answers_from_the_destination() {
        let Ok(server) = std::net::UdpSocket::bind("[::]:0") else {
            return; // no IPv6 on this machine
        };
        server.set_nonblocking(true).expect("nonblocking");
        ask_destinations(&server, true).expect("IPV6_RECVPKTINFO");
        let port = server.local_addr().expect("addr").port();
        let written_to: SocketAddr = (std::net::Ipv6Addr::LOCALHOST, port).into();
        let client = std::net::UdpSocket::bind("[::1]:0").expect("bind");
        client.connect(written_to).expect("connect");
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("timeout");
        client.send(b"q").expect("send");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut b = RecvBatch::new(2).with_destinations();
        assert_eq!(b.recv(server.as_raw_fd()).expect("recv"), 1);
        assert_eq!(b.destination(0), Some(written_to.ip()));
        let (from, _) = b.get(0).expect("datagram");
        let c = counters();
        let mut q = SendQueue::default();
        assert!(q.push(from, b.destination(0), b"a", &c));
        q.send(server.as_raw_fd()).expect("send");
        let mut buf = [0u8; 4];
        assert_eq!(client.recv(&mut buf).expect("answer"), 1);
    }

    /// A datagram the kernel refuses is dropped and counted; the ones after
    /// it still go.
    #[test]
    fn a_refused_datagram_does_not_stop_the_queue() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let c = counters();
        let mut q = SendQueue::default();
        // An IPv6 destination on an IPv4 socket: EAFNOSUPPORT or EINVAL,
        // for one datagram and for a run of three (one segmented message).
        assert!(q.push("[::1]:9".parse().expect("addr"), None, b"x", &c));
        for _ in 0..3 {
            assert!(q.push("[::1]:9".parse().expect("addr"), None, b"yy", &c));
        }
        assert!(q.push(rx.local_addr().expect("addr"), None, b"ok", &c));
        q.send(tx.as_raw_fd()).expect("send");
        let sum = c.read();
        assert_eq!((sum.udp_dropped, sum.udp_datagrams_out), (4, 1));
        assert!(!q.no_gso, "a refused address is not a refusal to segment");
        let mut buf = [0u8; 8];
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("timeout");
        let (n, _) = rx.recv_from(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"ok");
    }

    /// The queue is bounded: past its limit, datagrams are dropped and
    /// counted rather than held.
    #[test]
    fn queue_is_bounded() {
        let c = counters();
        let mut q = SendQueue::default();
        let to: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let accepted = (0..QUEUE_DATAGRAMS + 10)
            .filter(|_| q.push(to, None, b"x", &c))
            .count();
        assert_eq!(accepted, QUEUE_DATAGRAMS);
        assert_eq!(c.read().udp_dropped, 10);
    }
}
