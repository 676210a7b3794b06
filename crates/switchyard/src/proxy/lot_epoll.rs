//! The parking lot's own epoll: idle plain connections wait here as bare
//! descriptors, out of tokio (whose registration costs 256 bytes a socket).
//! The epoll descriptor itself is registered with tokio, so the lot task
//! wakes when any parked connection becomes readable.
//!
//! Runs on the owning worker only.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

pub struct LotEpoll {
    fd: AsyncFd<OwnedFd>,
}

/// Ready descriptors taken per wake-up (more wait for the next poll).
const BATCH: usize = 256;

impl LotEpoll {
    /// Must run inside the worker's runtime.
    pub fn new() -> io::Result<LotEpoll> {
        // SAFETY: epoll_create1 has no memory preconditions; the result is
        // checked before it is owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd keeps the descriptor open and the same for as
        // long as the AsyncFd that owns it lives.
        let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(LotEpoll { fd })
    }

    /// Watches `tcp` for readability (data, EOF or an error), once; `slot`
    /// comes back from `poll_ready`.
    pub fn add(&self, tcp: &std::net::TcpStream, slot: usize) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: slot as u64,
        };
        // SAFETY: both descriptors are open for the call; `ev` outlives it.
        let r = unsafe {
            libc::epoll_ctl(
                self.fd.get_ref().as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                tcp.as_raw_fd(),
                &mut ev,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `tcp` (before it goes back to tokio).
    pub fn remove(&self, tcp: &std::net::TcpStream) {
        // SAFETY: both descriptors are open; DEL ignores the event pointer.
        unsafe {
            libc::epoll_ctl(
                self.fd.get_ref().as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                tcp.as_raw_fd(),
                std::ptr::null_mut(),
            );
        }
    }

    /// The slots of parked descriptors that became ready; registers `cx`
    /// for the next ones when there are none.
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Vec<usize> {
        loop {
            let mut guard = match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(g)) => g,
                Poll::Ready(Err(_)) | Poll::Pending => return Vec::new(),
            };
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
            // SAFETY: `events` has room for BATCH entries; timeout 0 never blocks.
            let n = unsafe {
                libc::epoll_wait(
                    self.fd.get_ref().as_raw_fd(),
                    events.as_mut_ptr(),
                    BATCH as i32,
                    0,
                )
            };
            if n <= 0 {
                // Nothing (or EINTR): re-arm tokio's interest and look again.
                guard.clear_ready();
                continue;
            }
            let n = n as usize;
            if n < BATCH {
                guard.clear_ready();
            }
            return events[..n].iter().map(|e| e.u64 as usize).collect();
        }
    }
}
