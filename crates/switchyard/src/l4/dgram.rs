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
    pub fn send(&mut self, fd: RawFd) -> io::Result<()> {
        while !self.queued.is_empty() {
            let n = self.queued.len().min(SEND_BATCH);
            let mut iovs: Vec<libc::iovec> = Vec::with_capacity(n);
            for q in self.queued.iter().take(n) {
                iovs.push(libc::iovec {
                    iov_base: self.data[q.start..].as_ptr() as *mut libc::c_void,
                    iov_len: q.len,
                });
            }
            let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(n);
            for (q, iov) in self.queued.iter().zip(iovs.iter_mut()) {
                // SAFETY: all-zero bytes are a valid mmsghdr.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = q.to.as_ptr() as *mut libc::c_void;
                h.msg_hdr.msg_namelen = q.to.len();
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                hdrs.push(h);
            }
            // SAFETY: `hdrs` holds `n` headers pointing into `self.data`,
            // `iovs` and the queued addresses, unchanged during the call;
            // sendmmsg only reads them.
            let r = unsafe {
                libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Err(e),
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        // The first datagram failed: drop it, go on.
                        if let Some(q) = self.queued.pop_front() {
                            stats::inc(&q.counters.local().udp_dropped);
                        }
                    }
                }
            } else {
                for q in self.queued.drain(..r as usize) {
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
