//! Moving bytes both ways between a client and a member until both sides
//! are done.
//!
//! - **Half-close.** Each direction ends on its own. An EOF from one side
//!   becomes a `shutdown(SHUT_WR)` toward the other, and the opposite
//!   direction goes on: a client that sends its request and closes its
//!   sending half still gets the whole answer. An error (a reset) on
//!   either side ends both.
//! - **Copy or splice.** A plain copy goes through a 16 KiB buffer in user
//!   space. splice(2) moves pages from one socket to a pipe and from the
//!   pipe to the other socket without copying them through user space. The
//!   two system calls a chunk costs pay off only for large chunks (HAProxy
//!   splices "auto" only when its buffer fills, for the same reason).
//!   `ZeroCopy::Auto` copies until a read fills the whole buffer, then
//!   splices that direction, through a pipe the worker keeps for the next
//!   relay. docs/bench-results/history.md has the measurements per size that chose it: with
//!   spare pipes, splice costs what a copy does at 128 B and 1 KB, and is
//!   the cheaper from 64 KB, even on a fresh connection.
//! - **Idle timeout.** The relay ends when neither direction moved a byte
//!   for the idle timeout.
//!
//! Both directions run in the connection's one task (two futures over
//! shared references to the sockets), so nothing is spawned per relay and
//! the activity clock is a `Cell`.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::clock::now_ms;
use crate::config::snapshot::ZeroCopy;

/// Bytes moved each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Client to member.
    pub up: u64,
    /// Member to client.
    pub down: u64,
}

/// How a relay ended.
#[derive(Debug)]
pub enum End {
    /// Both sides closed their sending halves.
    Done(Moved),
    /// No byte either way for the idle timeout.
    Idle(Moved),
    /// A side failed (reset, broken pipe).
    Failed(Moved, io::Error),
}

const BUF: usize = 16 * 1024;
/// Bytes asked of one splice: up to a default pipe's capacity.
const SPLICE_CHUNK: usize = 64 * 1024;

/// Where a direction reports its bytes as they pass (counters).
pub trait Meter {
    fn up(&self, n: u64);
    fn down(&self, n: u64);
}

/// Relays between two TCP sockets, splicing where `mode` says.
/// `refuse_proxy_prefix`: the client's first bytes may not be a PROXY
/// protocol header (it comes from a source not trusted to send one).
pub async fn tcp(
    client: &TcpStream,
    member: &TcpStream,
    mode: ZeroCopy,
    idle: Duration,
    refuse_proxy_prefix: bool,
    meter: &impl Meter,
) -> End {
    let activity = Cell::new(now_ms());
    let up = Cell::new(0u64);
    let down = Cell::new(0u64);
    let moved = || Moved {
        up: up.get(),
        down: down.get(),
    };
    let ended = Cell::new(0u8);
    let a = direction(
        (client, member),
        mode,
        (&activity, &ended),
        &up,
        refuse_proxy_prefix,
        |n| meter.up(n),
    );
    let b = direction(
        (member, client),
        mode,
        (&activity, &ended),
        &down,
        false,
        |n| meter.down(n),
    );
    let both = async { tokio::try_join!(a, b) };
    tokio::select! {
        r = both => match r {
            Ok(_) => End::Done(moved()),
            Err(e) => End::Failed(moved(), e),
        },
        _ = idle_watch(&activity, idle) => End::Idle(moved()),
    }
}

/// Resolves once no byte moved for `idle`.
async fn idle_watch(activity: &Cell<u64>, idle: Duration) {
    let idle_ms = idle.as_millis() as u64;
    loop {
        let since = now_ms().saturating_sub(activity.get());
        if since >= idle_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(idle_ms - since)).await;
    }
}

/// One direction: `src` to `dst` until `src`'s EOF, then `dst`'s sending
/// half is shut, unless the other direction is over too: then both
/// sockets are closed at once, and the close sends the FIN (a shutdown
/// first was a system call per connection for nothing).
async fn direction(
    (src, dst): (&TcpStream, &TcpStream),
    mode: ZeroCopy,
    (activity, ended): (&Cell<u64>, &Cell<u8>),
    total: &Cell<u64>,
    mut refuse_proxy_prefix: bool,
    count: impl Fn(u64),
) -> io::Result<()> {
    let note = |n: usize| {
        activity.set(now_ms());
        total.set(total.get() + n as u64);
        count(n as u64);
    };
    // The check reads the first bytes in user space: copy at least once.
    let mut splicing = mode == ZeroCopy::Splice && !refuse_proxy_prefix;
    if !splicing {
        // Read into spare capacity: the buffer is never zeroed, which for a
        // short connection cost more than the bytes it carried.
        let mut buf: Vec<u8> = Vec::with_capacity(BUF);
        loop {
            src.readable().await?;
            buf.clear();
            let n = match read_draining(src, &mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            if refuse_proxy_prefix {
                if looks_like_proxy_header(&buf[..n]) {
                    return Err(untrusted_proxy_header());
                }
                refuse_proxy_prefix = false;
            }
            // The source's FIN came with these bytes: the shutdown that
            // follows sends its FIN in the same segment as them.
            let last = read_closed(src);
            write_all(dst, &buf[..n], last).await?;
            note(n);
            // A bulk transfer (a read filled the buffer) splices from here.
            if mode == ZeroCopy::Splice || (mode == ZeroCopy::Auto && n == BUF) {
                splicing = true;
                break;
            }
        }
    }
    if splicing {
        let pipe = Pipe::take()?;
        splice_until_eof(src, dst, &pipe, &note).await?;
        // Empty again (everything spliced in was spliced out): reusable.
        pipe.give_back();
    }
    if ended.get() == 0 {
        shutdown_write(dst);
    }
    ended.set(ended.get() + 1);
    Ok(())
}

/// Reads what `src` holds into `buf`'s spare capacity. A read that comes
/// back shorter than the room it had emptied the socket's queue, so the
/// socket's readiness is cleared with it: the next read waits for the next
/// wake-up instead of asking again only to hear EAGAIN (a system call per
/// connection and direction; HAProxy does the same). An EOF or reset that
/// arrived with the data is not lost: the reactor never clears a socket's
/// closed state.
pub(crate) fn read_draining(src: &TcpStream, buf: &mut impl bytes::BufMut) -> io::Result<usize> {
    let spare = buf.chunk_mut();
    let room = spare.len();
    // SAFETY: recv only writes into the slice; nothing reads it uninitialised.
    let dst = unsafe { spare.as_uninit_slice_mut() };
    let mut got = None;
    let r = src.try_io(Interest::READABLE, || {
        let n = socket2::SockRef::from(src).recv(dst)?;
        got = Some(n);
        if n > 0 && n < room {
            // Data read, and nothing left: WouldBlock tells the reactor so.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    });
    match (got, r) {
        (Some(n), _) => {
            // SAFETY: recv initialised the first `n` bytes of the spare
            // capacity.
            unsafe { buf.advance_mut(n) };
            Ok(n)
        }
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Err(io::ErrorKind::WouldBlock.into()),
    }
}

fn untrusted_proxy_header() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "a PROXY protocol header from a source not trusted to send one",
    )
}

/// The start of a v1 or v2 PROXY header (as far as `b` goes).
pub(super) fn looks_like_proxy_header(b: &[u8]) -> bool {
    let v1 = b"PROXY ";
    let v2 = &super::proxy_protocol::V2_SIGNATURE;
    let n1 = b.len().min(v1.len());
    let n2 = b.len().min(v2.len());
    (n1 > 0 && b[..n1] == v1[..n1]) || (n2 > 0 && b[..n2] == v2[..n2])
}

/// Writes all of `b`. `last`: the source has nothing more to send, so the
/// bytes go with `MSG_MORE` and the shutdown (or close) that follows
/// pushes them out in one segment with its FIN: a segment, and the
/// peer's ACK of it, fewer per connection. 2,000 one-request connections
/// through the bench's L4 listener (origin answering `Connection: close`)
/// sent 20.0 segments each on loopback before, 18.4 after; HAProxy 2.8,
/// which sends the last bytes with `MSG_MORE` too, 18.3.
async fn write_all(dst: &TcpStream, mut b: &[u8], last: bool) -> io::Result<()> {
    let flags = libc::MSG_NOSIGNAL | if last { libc::MSG_MORE } else { 0 };
    while !b.is_empty() {
        dst.writable().await?;
        let sent = dst.try_io(Interest::WRITABLE, || {
            socket2::SockRef::from(dst).send_with_flags(b, flags)
        });
        match sent {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether `src`'s peer has closed its sending half (its FIN is in, so
/// after the bytes already read a read returns EOF), as the reactor last
/// saw it: no system call. The reactor keeps a socket's closed state
/// once seen, so a drained read does not hide it.
fn read_closed(src: &TcpStream) -> bool {
    let ready = src.ready(Interest::READABLE);
    let mut ready = std::pin::pin!(ready);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    matches!(
        std::future::Future::poll(ready.as_mut(), &mut cx),
        std::task::Poll::Ready(Ok(r)) if r.is_read_closed()
    )
}

/// The peer's EOF or reset is what ends a relay; a failed shutdown (the
/// socket is already gone) changes nothing.
fn shutdown_write(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write);
}

/// A pipe for splice(2); both ends closed on drop.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

/// Pipes a worker keeps for its next relays: creating one (pipe2) and
/// closing both ends cost three system calls, as much as a short splice.
const SPARE_PIPES: usize = 32;

thread_local! {
    static SPARES: std::cell::RefCell<Vec<Pipe>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Pipe {
    /// A spare pipe of this worker, or a new one.
    fn take() -> io::Result<Pipe> {
        match SPARES.with(|s| s.borrow_mut().pop()) {
            Some(p) => Ok(p),
            None => Pipe::new(),
        }
    }

    /// Keeps an empty pipe for the next relay. Only pipes whose relay ran
    /// to its source's EOF come back: an error may leave bytes inside.
    fn give_back(self) {
        SPARES.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_PIPES {
                s.push(self);
            }
        });
    }

    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (r, w) = unsafe {
            (
                <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[0]),
                <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]),
            )
        };
        Ok(Pipe { r, w })
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain descriptors and null offsets (sockets and pipes have
    // no file position); the kernel checks them.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Socket to pipe, pipe to socket, until the source's EOF. The pipe is
/// only filled when empty, so EAGAIN from the first splice means the
/// source socket has nothing, and from the second that the destination is
/// full: each is awaited on the socket's readiness.
async fn splice_until_eof(
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &Pipe,
    note: &impl Fn(usize),
) -> io::Result<()> {
    let (pr, pw) = (pipe.r.as_raw_fd(), pipe.w.as_raw_fd());
    let (sfd, dfd) = (src.as_raw_fd(), dst.as_raw_fd());
    loop {
        src.readable().await?;
        let n = match src.try_io(Interest::READABLE, || splice(sfd, pw, SPLICE_CHUNK)) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || splice(pr, dfd, left)) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        note(n);
    }
}

/// Relays between any two streams (a TLS-terminated client, a TLS
/// member): a copy each way, with the same half-close and idle rules.
/// `refuse_proxy_prefix`: as for `tcp`, on `a`'s first bytes.
pub async fn streams<A, B>(
    a: A,
    b: B,
    idle: Duration,
    refuse_proxy_prefix: bool,
    meter: &impl Meter,
) -> End
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let activity = Cell::new(now_ms());
    let up = Cell::new(0u64);
    let down = Cell::new(0u64);
    let moved = || Moved {
        up: up.get(),
        down: down.get(),
    };
    async fn copy<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
        (r, w): (&mut R, &mut W),
        activity: &Cell<u64>,
        total: &Cell<u64>,
        mut refuse_proxy_prefix: bool,
        count: impl Fn(u64),
    ) -> io::Result<()> {
        let mut buf = vec![0u8; BUF];
        loop {
            let n = r.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            if std::mem::take(&mut refuse_proxy_prefix) && looks_like_proxy_header(&buf[..n]) {
                return Err(untrusted_proxy_header());
            }
            w.write_all(&buf[..n]).await?;
            w.flush().await?;
            activity.set(now_ms());
            total.set(total.get() + n as u64);
            count(n as u64);
        }
        // TLS: close_notify then the TCP half-close.
        let _ = w.shutdown().await;
        Ok(())
    }
    let x = copy(
        (&mut ar, &mut bw),
        &activity,
        &up,
        refuse_proxy_prefix,
        |n| meter.up(n),
    );
    let y = copy((&mut br, &mut aw), &activity, &down, false, |n| {
        meter.down(n)
    });
    let both = async { tokio::try_join!(x, y) };
    tokio::select! {
        r = both => match r {
            Ok(_) => End::Done(moved()),
            Err(e) => End::Failed(moved(), e),
        },
        _ = idle_watch(&activity, idle) => End::Idle(moved()),
    }
}
