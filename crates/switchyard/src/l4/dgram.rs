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
use std::net::SocketAddr;
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
        }
    }

    /// Slots, the most one `recv` returns.
    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Reads the datagrams waiting on `fd` (non-blocking), as many as fit;
    /// `WouldBlock` when none was waiting.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.bufs.len();
        let mut iovs: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(n);
        for (iov, name) in iovs.iter_mut().zip(self.names.iter_mut()) {
            // SAFETY: all-zero bytes are a valid mmsghdr (null pointers,
            // zero lengths); the fields that matter are set below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            hdrs.push(h);
        }
        // SAFETY: `hdrs` holds `n` headers whose name and iovec pointers
        // point into `self.names`, `iovs` and `self.bufs`, all alive and
        // unmoved for the duration of the call.
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
            self.held = 0;
            return Err(io::Error::last_os_error());
        }
        let got = r as usize;
        for (slot, h) in self.lens.iter_mut().zip(&hdrs).take(got) {
            let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            *slot = (h.msg_len as usize, h.msg_hdr.msg_namelen, truncated);
        }
        self.held = got;
        Ok(got)
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
}

impl SendQueue {
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Queues `payload` for `to`; false (and counted as dropped) when the
    /// queue is full.
    pub fn push(
        &mut self,
        to: SocketAddr,
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
        // One message: `count` queued datagrams from `first`, cut in
        // `segment`-byte datagrams when `count` > 1.
        struct Run {
            first: usize,
            count: usize,
            segment: usize,
        }
        let space = cmsg_space();
        while !self.queued.is_empty() {
            let mut runs: Vec<Run> = Vec::with_capacity(SEND_BATCH);
            let mut i = 0;
            while i < self.queued.len() && runs.len() < SEND_BATCH {
                let q = &self.queued[i];
                let mut count = 1;
                if !self.no_gso && q.len <= GSO_MAX_SEGMENT && q.len > 0 {
                    while count < GSO_MAX_SEGMENTS
                        && (count + 1) * q.len <= GSO_MAX_BYTES
                        && self.queued.get(i + count).is_some_and(|n| {
                            n.addr == q.addr && n.len == q.len && n.start == q.start + count * q.len
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
            let mut iovs: Vec<libc::iovec> = runs
                .iter()
                .map(|r| {
                    let q = &self.queued[r.first];
                    libc::iovec {
                        iov_base: self.data[q.start..].as_ptr() as *mut libc::c_void,
                        iov_len: q.len * r.count,
                    }
                })
                .collect();
            // Room for one UDP_SEGMENT control message per run, 8-aligned.
            let mut controls: Vec<u64> = vec![0; n * space.div_ceil(8)];
            let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(n);
            for (k, (r, iov)) in runs.iter().zip(iovs.iter_mut()).enumerate() {
                let q = &self.queued[r.first];
                // SAFETY: all-zero bytes are a valid mmsghdr.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = q.to.as_ptr() as *mut libc::c_void;
                h.msg_hdr.msg_namelen = q.to.len();
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                if r.count > 1 {
                    let at = controls[k * space.div_ceil(8)..].as_mut_ptr();
                    // SAFETY: `at` has `space` bytes, 8-aligned, for one
                    // control message carrying a u16.
                    unsafe { write_segment_cmsg(at.cast(), r.segment as u16) };
                    h.msg_hdr.msg_control = at.cast();
                    h.msg_hdr.msg_controllen = space as _;
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
                    _ if runs[0].count > 1 => {
                        // No segmentation here (no checksum offload, an
                        // old kernel): one datagram per message from now.
                        self.no_gso = true;
                    }
                    _ => {
                        // The first datagram failed: drop it, go on.
                        if let Some(q) = self.queued.pop_front() {
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
    let space = cmsg_space();
    let mut control = [0u64; 4];
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
            // SAFETY: `control` has 32 bytes, 8-aligned, more than
            // `cmsg_space()`.
            unsafe { write_segment_cmsg(control.as_mut_ptr().cast(), first.len() as u16) };
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = space as _;
            // SAFETY: `h` points to `iovs` and `control`, alive and unchanged
            // during the call, which only reads them.
            unsafe { libc::sendmsg(fd, &h, libc::MSG_DONTWAIT) }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if count > 1 && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) {
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

/// Bytes of a control message carrying one u16.
fn cmsg_space() -> usize {
    // SAFETY: CMSG_SPACE only computes a size.
    unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as libc::c_uint) as usize }
}

/// Writes a `UDP_SEGMENT` control message for `segment`-byte datagrams.
///
/// # Safety
/// `at` must point to `cmsg_space()` writable bytes aligned for a cmsghdr.
unsafe fn write_segment_cmsg(at: *mut libc::cmsghdr, segment: u16) {
    // SAFETY: upheld by the caller; CMSG_DATA points inside that space.
    unsafe {
        (*at).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as libc::c_uint) as _;
        (*at).cmsg_level = libc::SOL_UDP;
        (*at).cmsg_type = UDP_SEGMENT;
        std::ptr::write_unaligned(libc::CMSG_DATA(at).cast::<u16>(), segment);
    }
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
            assert!(q.push(to.local_addr().expect("addr"), payload, &c));
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
                assert!(q.push(other.local_addr().expect("addr"), b"x", &c));
                continue;
            }
            let d = vec![k as u8; len];
            assert!(q.push(to, &d, &c));
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

    /// A datagram the kernel refuses is dropped and counted; the ones after
    /// it still go.
    #[test]
    fn a_refused_datagram_does_not_stop_the_queue() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let c = counters();
        let mut q = SendQueue::default();
        // An IPv6 destination on an IPv4 socket: EAFNOSUPPORT or EINVAL.
        assert!(q.push("[::1]:9".parse().expect("addr"), b"x", &c));
        assert!(q.push(rx.local_addr().expect("addr"), b"ok", &c));
        q.send(tx.as_raw_fd()).expect("send");
        let sum = c.read();
        assert_eq!((sum.udp_dropped, sum.udp_datagrams_out), (1, 1));
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
            .filter(|_| q.push(to, b"x", &c))
            .count();
        assert_eq!(accepted, QUEUE_DATAGRAMS);
        assert_eq!(c.read().udp_dropped, 10);
    }
}
