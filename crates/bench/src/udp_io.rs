//! The UDP load and echo origin of `bench l4`, written to cost the load
//! core as little as possible per datagram (recvmmsg and sendmmsg), so the
//! DUT's core, not the load's, is what saturates.
//!
//! Both run on the load core with the other tools. Sent one system call per
//! datagram, as tokio's `UdpSocket` does, the load core saturated before
//! any DUT's did, and every DUT was measured at the rate the load core
//! allowed. Batching changes nothing the DUT sees: every datagram still
//! reaches it on its own, from the same clients, with the same number in
//! flight.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::l4::Ctr;

/// Datagrams read or written per call.
const BATCH: usize = 32;

/// Largest datagram the echo origin takes whole.
const SLOT: usize = 2048;

/// A socket registered for readability only (sends never wait: a full
/// buffer drops the datagram, and the client counts it lost).
fn register(sock: std::net::UdpSocket) -> io::Result<AsyncFd<std::net::UdpSocket>> {
    sock.set_nonblocking(true)?;
    // SAFETY: the AsyncFd owns the socket, so its descriptor stays open and
    // the same while registered.
    unsafe { AsyncFd::register_with_interest(sock, Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

/// Room for `BATCH` datagrams and their senders.
struct Slots {
    bufs: Vec<[u8; SLOT]>,
    names: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    namelens: Vec<libc::socklen_t>,
}

impl Slots {
    fn new() -> Slots {
        // SAFETY: all-zero bytes are a valid sockaddr_storage.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        Slots {
            bufs: vec![[0u8; SLOT]; BATCH],
            names: vec![zero; BATCH],
            lens: vec![0; BATCH],
            namelens: vec![0; BATCH],
        }
    }

    /// recvmmsg(2), non-blocking; `WouldBlock` when nothing waits.
    fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut iovs: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: SLOT,
            })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .zip(self.names.iter_mut())
            .map(|(iov, name)| {
                // SAFETY: all-zero bytes are a valid mmsghdr.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        // SAFETY: the headers point into `iovs`, `self.names` and
        // `self.bufs`, alive and unmoved during the call.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        for (k, h) in hdrs.iter().take(r as usize).enumerate() {
            self.lens[k] = (h.msg_len as usize).min(SLOT);
            self.namelens[k] = h.msg_hdr.msg_namelen;
        }
        Ok(r as usize)
    }

    /// sendmmsg(2) of the first `n` datagrams, each back to its sender
    /// (`echo`) or on a connected socket; returns how many went.
    fn send(&mut self, fd: RawFd, n: usize, echo: bool) -> usize {
        let mut iovs: Vec<libc::iovec> = (0..n)
            .map(|k| libc::iovec {
                iov_base: self.bufs[k].as_mut_ptr().cast(),
                iov_len: self.lens[k],
            })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .enumerate()
            .map(|(k, iov)| {
                // SAFETY: all-zero bytes are a valid mmsghdr.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                if echo {
                    h.msg_hdr.msg_name = (&mut self.names[k] as *mut libc::sockaddr_storage).cast();
                    h.msg_hdr.msg_namelen = self.namelens[k];
                }
                h.msg_hdr.msg_iov = iov;
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        let mut sent = 0;
        while sent < n {
            // SAFETY: the headers point into `iovs`, `self.names` and
            // `self.bufs`, alive and unchanged during the call.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs[sent..].as_mut_ptr(),
                    (n - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                // A refused or blocked datagram: skip it (the client
                // counts what does not come back as lost).
                sent += 1;
                continue;
            }
            sent += r as usize;
        }
        n
    }
}

/// The UDP echo origin: every datagram goes back to its sender.
pub(crate) async fn serve_echo(s: std::net::UdpSocket) {
    let Ok(s) = register(s) else {
        return;
    };
    let mut slots = Slots::new();
    loop {
        let Ok(mut ready) = s.readable().await else {
            return;
        };
        match ready.try_io(|s| slots.recv(s.as_raw_fd())) {
            Ok(Ok(n)) => {
                if n < BATCH {
                    ready.clear_ready();
                }
                drop(ready);
                slots.send(s.as_raw_fd(), n, true);
            }
            Ok(Err(_)) | Err(_) => continue,
        }
    }
}

/// One client: a socket of its own (so a session of its own on the DUT),
/// datagrams of `size` bytes until `stop`. Closed loop (`rate` None):
/// `window` in flight, each reply answered by a new datagram. Open loop:
/// `rate` datagrams per second, sent when due (in the bursts the 1 ms timer
/// allows), whatever the replies do; at most `OPEN_WINDOW` in flight, so a
/// DUT that falls behind is shown by the rate it reaches.
pub(crate) async fn client(
    addr: SocketAddr,
    size: usize,
    window: usize,
    rate: Option<f64>,
    c: Arc<Ctr>,
    stop: Arc<AtomicBool>,
) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.connect(addr).map(|()| s))
        .and_then(register);
    let Ok(s) = sock else {
        c.errors.fetch_add(1, Relaxed);
        return;
    };
    let fd = s.as_raw_fd();
    let mut out = Slots::new();
    for k in 0..BATCH {
        out.bufs[k][..size.min(SLOT)].fill(b'd');
        out.lens[k] = size.min(SLOT);
    }
    let mut inbox = Slots::new();
    let mut in_flight = 0usize;
    let t0 = tokio::time::Instant::now();
    let mut sent_total = 0u64;
    let mut last_reply = t0;
    while !stop.load(Relaxed) {
        let now = tokio::time::Instant::now();
        let (n, next_due) = match rate {
            None => (window.saturating_sub(in_flight), None),
            Some(r) => {
                let due = ((now - t0).as_secs_f64() * r) as u64;
                let n = due.saturating_sub(sent_total) as usize;
                let next = t0 + Duration::from_secs_f64((sent_total + n as u64 + 1) as f64 / r);
                (n.min(OPEN_WINDOW.saturating_sub(in_flight)), Some(next))
            }
        };
        let mut left = n;
        while left > 0 {
            let k = left.min(BATCH);
            in_flight += out.send(fd, k, false);
            left -= k;
        }
        if rate.is_some() {
            // Slots not sent because too many were in flight are skipped,
            // not made up later.
            sent_total = (((now - t0).as_secs_f64()) * rate.unwrap_or(0.0)) as u64;
        }
        let until = next_due.unwrap_or(now + Duration::from_millis(200));
        let ready = tokio::select! {
            r = s.readable() => Some(r),
            _ = tokio::time::sleep_until(until) => None,
        };
        let mut ready = match ready {
            Some(Ok(r)) => r,
            Some(Err(_)) => return,
            None => {
                // No answer for 200 ms: what is in flight is lost.
                if tokio::time::Instant::now() - last_reply > Duration::from_millis(200) {
                    c.lost.fetch_add(in_flight as u64, Relaxed);
                    in_flight = 0;
                    last_reply = tokio::time::Instant::now();
                }
                continue;
            }
        };
        match ready.try_io(|s| inbox.recv(s.as_raw_fd())) {
            Ok(Ok(n)) => {
                if n < BATCH {
                    ready.clear_ready();
                }
                last_reply = tokio::time::Instant::now();
                c.ops.fetch_add(n as u64, Relaxed);
                let bytes: usize = inbox.lens[..n].iter().sum();
                c.bytes.fetch_add(bytes as u64, Relaxed);
                in_flight = in_flight.saturating_sub(n);
            }
            Ok(Err(_)) => {
                // ICMP port unreachable: nobody listens (yet).
                c.errors.fetch_add(1, Relaxed);
                in_flight = 0;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_would_block) => {}
        }
    }
}

/// Datagrams one open-loop client keeps in flight at most.
const OPEN_WINDOW: usize = 64;
