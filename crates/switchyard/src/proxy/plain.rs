//! A plain client socket that joins tokio's reactor only when the session
//! must wait for it.
//!
//! Registering a socket costs an `epoll_ctl` ADD, and dropping a registered
//! one an `epoll_ctl` DEL. A one-request connection whose request came
//! with the accept and whose response left in one write never waits on its
//! client socket, so it needs neither: every I/O is tried on the bare
//! descriptor first, and only an EAGAIN registers it (HAProxy's speculative
//! I/O does the same). Registering after an EAGAIN loses no wake-up: the
//! ADD reports the socket's state at that moment, edge-triggered.

use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub struct PlainTcp(State);

enum State {
    /// Non-blocking, not known to tokio.
    Bare(std::net::TcpStream),
    Registered(TcpStream),
    /// Registration failed: the descriptor is closed.
    Lost,
}

fn lost() -> io::Error {
    io::Error::other("the connection could not be registered with the reactor")
}

impl PlainTcp {
    /// `s` must be non-blocking.
    pub fn bare(s: std::net::TcpStream) -> PlainTcp {
        PlainTcp(State::Bare(s))
    }

    pub fn registered(s: TcpStream) -> PlainTcp {
        PlainTcp(State::Registered(s))
    }

    /// The tokio socket, registering it now if it is not yet (for a wait
    /// on its readiness). Must run inside the worker's runtime.
    pub fn tokio(&mut self) -> io::Result<&TcpStream> {
        if let State::Bare(_) = self.0 {
            if let State::Bare(s) = std::mem::replace(&mut self.0, State::Lost) {
                self.0 = State::Registered(TcpStream::from_std(s)?);
            }
        }
        match &self.0 {
            State::Registered(s) => Ok(s),
            _ => Err(lost()),
        }
    }

    /// The tokio socket, owned (registered now if it was not).
    pub fn into_tokio(mut self) -> io::Result<TcpStream> {
        self.tokio()?;
        match self.0 {
            State::Registered(s) => Ok(s),
            _ => Err(lost()),
        }
    }

    /// The tokio socket if it is registered already.
    pub fn tokio_ref(&self) -> Option<&TcpStream> {
        match &self.0 {
            State::Registered(s) => Some(s),
            _ => None,
        }
    }

    /// The bare descriptor, out of tokio's reactor if it was in it.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        match self.0 {
            State::Bare(s) => Ok(s),
            State::Registered(s) => s.into_std(),
            State::Lost => Err(lost()),
        }
    }

    /// One recv(2) on the descriptor, registered or not, outside tokio's
    /// readiness.
    pub fn recv(&self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        match &self.0 {
            State::Bare(s) => socket2::SockRef::from(s).recv(buf),
            State::Registered(s) => socket2::SockRef::from(s).recv(buf),
            State::Lost => Err(lost()),
        }
    }

    /// Tries `op` on the bare descriptor; an EAGAIN registers the socket
    /// and hands the call to tokio (`then`), which waits for readiness.
    fn attempt<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(&std::net::TcpStream) -> io::Result<T>,
        then: impl FnOnce(&mut TcpStream, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let State::Bare(s) = &self.0 {
            match op(s) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = self.tokio() {
                        return Poll::Ready(Err(e));
                    }
                }
                r => return Poll::Ready(r),
            }
        }
        match &mut self.0 {
            State::Registered(s) => then(s, cx),
            _ => Poll::Ready(Err(lost())),
        }
    }

    /// A write whose partial last segment the kernel keeps back (MSG_MORE)
    /// until the next write or the FIN (see `ClientStream::poll_write_held`).
    pub fn poll_write_held(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.attempt(
            cx,
            |s| send_more(s, buf),
            |s, cx| loop {
                std::task::ready!(s.poll_write_ready(cx))?;
                match s.try_io(tokio::io::Interest::WRITABLE, || send_more(&*s, buf)) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return Poll::Ready(r),
                }
            },
        )
    }
}

/// send(2) with MSG_MORE (socket2 adds MSG_NOSIGNAL).
fn send_more(s: &impl AsFd, buf: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(s).send_with_flags(buf, libc::MSG_MORE)
}

impl AsyncRead for PlainTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let State::Bare(s) = &this.0 {
            // Into the unfilled part as it is: initialising it first would
            // zero a whole read buffer per call.
            // SAFETY: recv(2) writes bytes only, never reads them, and
            // initialises exactly the `n` it reports.
            match socket2::SockRef::from(s).recv(unsafe { buf.unfilled_mut() }) {
                Ok(n) => {
                    // SAFETY: recv initialised the first n unfilled bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = this.tokio() {
                        return Poll::Ready(Err(e));
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        match &mut this.0 {
            State::Registered(s) => Pin::new(s).poll_read(cx, buf),
            _ => Poll::Ready(Err(lost())),
        }
    }
}

impl AsyncWrite for PlainTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().attempt(
            cx,
            |mut s| s.write(buf),
            |s, cx| Pin::new(s).poll_write(cx, buf),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().attempt(
            cx,
            |mut s| s.write_vectored(bufs),
            |s, cx| Pin::new(s).poll_write_vectored(cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            State::Bare(s) => Poll::Ready(s.shutdown(std::net::Shutdown::Write)),
            State::Registered(s) => Pin::new(s).poll_shutdown(cx),
            State::Lost => Poll::Ready(Err(lost())),
        }
    }
}
