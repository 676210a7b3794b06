//! Waiting for the next request on a keep-alive connection, and the coarse
//! deadlines of the request path (`within`).
//!
//! An idle client connection must cost as little as possible (the target is
//! under 1 KB). A tokio `Sleep` plus a drain-channel receiver per
//! connection cost about 300 bytes of every connection's task; instead each
//! worker keeps one registry of idle connections with their deadlines and
//! one coarse ticker that wakes the expired ones, and wakes all of them
//! when the worker drains. An idle connection holds a slot index.
//!
//! The ticker wakes only when a deadline is due, on a 100 ms grid (`TICK`),
//! not every 100 ms: on this VM a wake-up of an idle thread costs about
//! 70 µs, and a ticker that woke ten times a second (twice each, through
//! tokio's timer wheel) cost an idle worker 1.4 ms of CPU a second, about
//! 80 µs a request to clients that come back once a minute. Parked
//! connections' deadlines sit in a heap, so a tick does not walk them all.
//!
//! Runs on the owning worker only (`RefCell`, no locks).

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use super::conn::{Client, ConnGuard};
use super::stream::{ClientStream, PlainTcp};
use crate::clock::now_ms;
use crate::http::body::HoldForClose;

/// The grid deadlines are checked on: idle timeouts are this coarse.
pub const TICK: Duration = Duration::from_millis(100);
const TICK_MS: u64 = TICK.as_millis() as u64;

/// The first grid point at or after `ms`.
fn on_grid(ms: u64) -> u64 {
    ms.div_ceil(TICK_MS) * TICK_MS
}

/// When the ticker has nothing to wait for.
pub const NEVER: u64 = u64::MAX;

struct Entry {
    waker: Waker,
    deadline_ms: u64,
}

pub struct IdleWatch {
    slots: RefCell<Vec<Option<Entry>>>,
    free: RefCell<Vec<usize>>,
    draining: Cell<bool>,
    lot: ParkingLot,
    /// When the ticker is due next (ms on `clock`, on the grid), or `NEVER`.
    next_tick: Cell<u64>,
    /// The ticker's task, woken when a deadline earlier than `next_tick`
    /// is registered.
    ticker: RefCell<Option<Waker>>,
}

impl Default for IdleWatch {
    fn default() -> Self {
        IdleWatch {
            slots: RefCell::default(),
            free: RefCell::default(),
            draining: Cell::default(),
            lot: ParkingLot::default(),
            next_tick: Cell::new(NEVER),
            ticker: RefCell::default(),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum IdleEnd {
    /// Bytes (or EOF) are ready to read.
    Readable,
    Timeout,
    Drain,
}

impl IdleWatch {
    /// Waits until `stream` is readable, `deadline_ms` (see `clock`) passes,
    /// or the worker drains.
    pub fn wait<'a>(&'a self, stream: &'a TcpStream, deadline_ms: u64) -> IdleWait<'a> {
        IdleWait {
            watch: self,
            stream,
            deadline_ms,
            slot: None,
        }
    }

    /// When the ticker is due next (ms on `clock`), or `NEVER`.
    pub fn next_tick(&self) -> u64 {
        self.next_tick.get()
    }

    /// The ticker's task, woken when it is due earlier than it waits for.
    pub fn set_ticker(&self, waker: &Waker) {
        let mut t = self.ticker.borrow_mut();
        if !t.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *t = Some(waker.clone());
        }
    }

    /// Something is due at `deadline_ms`: the ticker must wake by then.
    fn due(&self, deadline_ms: u64) {
        let at = on_grid(deadline_ms);
        if at < self.next_tick.get() {
            self.next_tick.set(at);
            if let Some(w) = self.ticker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// Wakes connections whose deadline passed and closes parked ones past
    /// theirs, then works out when the ticker is due next. Called by the
    /// worker's ticker at `next_tick` or later: what was due then counts as
    /// due even where the coarse clock lags a few milliseconds behind the
    /// timer that woke the ticker.
    pub fn tick(&self) {
        let now = now_ms().max(self.next_tick.get().min(NEVER - 1));
        // A connection woken but not expired yet by its own reading of the
        // clock registers again: it is looked at one grid step later.
        let after = on_grid(now + 1);
        let mut next = NEVER;
        {
            let slots = self.slots.borrow();
            for e in slots.iter().flatten() {
                if e.deadline_ms <= now {
                    e.waker.wake_by_ref();
                }
                next = next.min(on_grid(e.deadline_ms).max(after));
            }
        }
        if let Some(d) = self.expire_parked_until(now) {
            next = next.min(on_grid(d).max(after));
        }
        self.next_tick.set(next);
    }

    /// Wakes every idle connection for good and closes the parked ones:
    /// the worker is draining.
    pub fn drain(&self) {
        self.draining.set(true);
        {
            let slots = self.slots.borrow();
            for e in slots.iter().flatten() {
                e.waker.wake_by_ref();
            }
        }
        self.expire_parked_all();
    }

    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }

    fn register(&self, slot: &mut Option<usize>, waker: &Waker, deadline_ms: u64) {
        let mut slots = self.slots.borrow_mut();
        match *slot {
            Some(i) => {
                if let Some(e) = slots[i].as_mut() {
                    if !e.waker.will_wake(waker) {
                        e.waker = waker.clone();
                    }
                }
            }
            None => {
                let entry = Some(Entry {
                    waker: waker.clone(),
                    deadline_ms,
                });
                let i = match self.free.borrow_mut().pop() {
                    Some(i) => {
                        slots[i] = entry;
                        i
                    }
                    None => {
                        slots.push(entry);
                        slots.len() - 1
                    }
                };
                *slot = Some(i);
                drop(slots);
                self.due(deadline_ms);
            }
        }
    }

    fn release(&self, i: usize) {
        self.slots.borrow_mut()[i] = None;
        self.free.borrow_mut().push(i);
    }
}

/// A future bounded by a coarse deadline: `Err(())` once it passed.
pub struct Within<'a, F> {
    watch: &'a IdleWatch,
    fut: F,
    deadline_ms: u64,
    slot: Option<usize>,
}

impl IdleWatch {
    /// Runs `fut` until `deadline_ms` (see `clock`). Cheaper than a tokio
    /// timer on the request path: no clock read per poll and no timer-wheel
    /// entry, just a slot in the worker's registry; expiry is as coarse as
    /// the ticker (`TICK`).
    pub fn within<F: Future>(&self, deadline_ms: u64, fut: F) -> Within<'_, F> {
        Within {
            watch: self,
            fut,
            deadline_ms,
            slot: None,
        }
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `fut` is never moved out of the pinned struct; the other
        // fields are plain data we only read or replace.
        let this = unsafe { self.get_unchecked_mut() };
        let fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        if let Poll::Ready(v) = fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if this.slot.is_none() {
            this.watch
                .register(&mut this.slot, cx.waker(), this.deadline_ms);
        } else if now_ms() >= this.deadline_ms {
            // Only a registered future can be woken by the ticker, so the
            // clock is read only on polls after the first.
            return Poll::Ready(Err(()));
        } else {
            this.watch
                .register(&mut this.slot, cx.waker(), this.deadline_ms);
        }
        Poll::Pending
    }
}

impl<F> Drop for Within<'_, F> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.watch.release(i);
        }
    }
}

/// A client's writer whose writes wait for the client at most `limit_ms`
/// at a time (`client_send`, like nginx's `send_timeout`): a write that
/// makes no progress for that long fails with `TimedOut`, so a client that
/// stops reading cannot hold its response, and the member behind it,
/// forever. Any progress starts the wait anew.
pub struct SendTimed<'a> {
    pub io: &'a mut ClientStream,
    watch: &'a IdleWatch,
    limit_ms: u64,
    /// When the current stall times out.
    deadline: Option<u64>,
    slot: Option<usize>,
    /// Writes keep a partial segment back for the FIN (`HoldForClose`).
    hold: bool,
}

impl<'a> SendTimed<'a> {
    pub fn new(io: &'a mut ClientStream, watch: &'a IdleWatch, limit_ms: u64) -> SendTimed<'a> {
        SendTimed {
            io,
            watch,
            limit_ms,
            deadline: None,
            slot: None,
            hold: false,
        }
    }

    fn progress(&mut self) {
        self.deadline = None;
        if let Some(i) = self.slot.take() {
            self.watch.release(i);
        }
    }

    /// The write is stuck: Some(error) once it has been for `limit_ms`,
    /// else the ticker will wake the task at the deadline.
    fn stalled(&mut self, cx: &Context<'_>) -> Option<std::io::Error> {
        let now = now_ms();
        let deadline = *self.deadline.get_or_insert(now + self.limit_ms);
        if now >= deadline {
            return Some(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading (client_send)",
            ));
        }
        self.watch.register(&mut self.slot, cx.waker(), deadline);
        None
    }
}

impl Drop for SendTimed<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.watch.release(i);
        }
    }
}

impl SendTimed<'_> {
    /// What the writer answered, with the stall accounted for.
    fn timed<T>(
        &mut self,
        cx: &Context<'_>,
        r: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.progress();
                Poll::Ready(r)
            }
            Poll::Pending => match self.stalled(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl HoldForClose for SendTimed<'_> {
    fn hold_for_close(&mut self) {
        self.hold = true;
    }
}

impl AsyncWrite for SendTimed<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = if this.hold {
            this.io.poll_write_held(cx, buf)
        } else {
            Pin::new(&mut *this.io).poll_write(cx, buf)
        };
        this.timed(cx, r)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut *this.io).poll_flush(cx);
        this.timed(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_shutdown(cx)
    }
}

pub struct IdleWait<'a> {
    watch: &'a IdleWatch,
    stream: &'a TcpStream,
    deadline_ms: u64,
    slot: Option<usize>,
}

impl Future for IdleWait<'_> {
    type Output = IdleEnd;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IdleEnd> {
        // Errors surface on the read that follows. A request already
        // waiting is served even when draining.
        if self.stream.poll_read_ready(cx).is_ready() {
            return Poll::Ready(IdleEnd::Readable);
        }
        if self.watch.draining.get() {
            return Poll::Ready(IdleEnd::Drain);
        }
        if now_ms() >= self.deadline_ms {
            return Poll::Ready(IdleEnd::Timeout);
        }
        let (watch, deadline) = (self.watch, self.deadline_ms);
        watch.register(&mut self.slot, cx.waker(), deadline);
        Poll::Pending
    }
}

impl Drop for IdleWait<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.watch.release(i);
        }
    }
}

// ------------------------------------------------------------ parking lot

/// A connection waiting in the parking lot.
pub struct Parked {
    pub client: Client,
    pub guard: ConnGuard,
    pub deadline_ms: u64,
}

/// What a slot of the lot holds. A plain TCP connection leaves tokio while
/// it waits (`into_std` frees its 256-byte registration) and is watched by
/// the lot's own epoll as a bare descriptor: an idle connection then costs
/// its slot and the kernel's socket, nothing more. A TLS connection keeps
/// its session and waits on tokio's readiness with a slot waker.
enum Stored {
    Tokio(Parked),
    Fd(ParkedFd),
}

struct ParkedFd {
    tcp: std::net::TcpStream,
    peer: std::net::SocketAddr,
    listen: std::net::SocketAddr,
    guard: ConnGuard,
    deadline_ms: u64,
}

impl Stored {
    fn deadline_ms(&self) -> u64 {
        match self {
            Stored::Tokio(p) => p.deadline_ms,
            Stored::Fd(p) => p.deadline_ms,
        }
    }
}

/// Wake-ups from the I/O driver, by slot. Only the owning worker's runtime
/// ever wakes these (current-thread), so the mutexes never contend; they
/// are there because a `Waker` must be `Send + Sync`.
#[derive(Default)]
struct ParkShared {
    ready: std::sync::Mutex<Vec<usize>>,
    lot_task: std::sync::Mutex<Option<Waker>>,
}

struct SlotWake {
    slot: usize,
    shared: std::sync::Arc<ParkShared>,
}

impl std::task::Wake for SlotWake {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        if let Ok(mut r) = self.shared.ready.lock() {
            r.push(self.slot);
        }
        if let Some(w) = self.shared.lot_task.lock().ok().and_then(|mut w| w.take()) {
            w.wake();
        }
    }
}

#[derive(Default)]
pub struct ParkingLot {
    parked: RefCell<Vec<Option<Stored>>>,
    /// A waker per slot a TLS connection used, made once and reused.
    wakers: RefCell<Vec<Option<Waker>>>,
    free: RefCell<Vec<usize>>,
    shared: std::sync::Arc<ParkShared>,
    /// The lot's epoll for parked plain connections (made on first use,
    /// inside the worker's runtime); its own readiness is tokio's.
    epoll: std::cell::OnceCell<Option<super::lot_epoll::LotEpoll>>,
    /// (deadline, slot) of every connection parked, and of some that have
    /// left since (checked against the slot when due).
    deadlines: RefCell<BinaryHeap<Reverse<(u64, usize)>>>,
    /// Connections parked now.
    count: Cell<usize>,
}

impl ParkingLot {
    fn slot(&self) -> usize {
        if let Some(i) = self.free.borrow_mut().pop() {
            return i;
        }
        let mut parked = self.parked.borrow_mut();
        parked.push(None);
        self.wakers.borrow_mut().push(None);
        parked.len() - 1
    }

    fn waker(&self, slot: usize) -> Waker {
        let mut wakers = self.wakers.borrow_mut();
        wakers[slot]
            .get_or_insert_with(|| {
                Waker::from(std::sync::Arc::new(SlotWake {
                    slot,
                    shared: self.shared.clone(),
                }))
            })
            .clone()
    }

    /// `stored` takes `slot`; the ticker must wake by its deadline.
    fn put(&self, watch: &IdleWatch, slot: usize, stored: Stored) {
        let deadline = stored.deadline_ms();
        self.parked.borrow_mut()[slot] = Some(stored);
        self.deadlines.borrow_mut().push(Reverse((deadline, slot)));
        self.count.set(self.count.get() + 1);
        watch.due(deadline);
    }

    /// Empties `slot` for the next connection.
    fn vacate(&self, slot: usize) {
        self.free.borrow_mut().push(slot);
        self.count.set(self.count.get().saturating_sub(1));
    }

    fn epoll(&self) -> Option<&super::lot_epoll::LotEpoll> {
        self.epoll
            .get_or_init(|| super::lot_epoll::LotEpoll::new().ok())
            .as_ref()
    }
}

impl IdleWatch {
    /// Parks a connection until it is readable, its deadline passes, or the
    /// worker drains. Gives it back if it is readable already.
    #[allow(clippy::result_large_err)] // the connection itself comes back
    pub fn park(&self, p: Parked) -> Result<(), Parked> {
        let lot = &self.lot;
        let slot = lot.slot();
        let mut p = match (p.client.stream.is_tls(), lot.epoll()) {
            (false, Some(ep)) => match park_fd(ep, p, slot) {
                FdPark::Parked(fd) => {
                    lot.put(self, slot, Stored::Fd(fd));
                    return Ok(());
                }
                FdPark::Closed => {
                    lot.free.borrow_mut().push(slot);
                    return Ok(());
                }
                FdPark::Back(p) => p,
            },
            _ => p,
        };
        let waker = lot.waker(slot);
        // A socket tokio cannot take is given back: the session's read
        // meets the error.
        if p.client.stream.tcp().map_or(true, |t| {
            t.poll_read_ready(&mut Context::from_waker(&waker))
                .is_ready()
        }) {
            lot.free.borrow_mut().push(slot);
            return Err(p);
        }
        lot.put(self, slot, Stored::Tokio(p));
        Ok(())
    }

    /// Takes the parked connections that became readable. Waits until
    /// there is at least one.
    pub async fn unparked(&self) -> Vec<Parked> {
        std::future::poll_fn(|cx| {
            let lot = &self.lot;
            if let Ok(mut w) = lot.shared.lot_task.lock() {
                *w = Some(cx.waker().clone());
            }
            let mut out = Vec::new();
            if let Some(ep) = lot.epoll() {
                for slot in ep.poll_ready(cx) {
                    let taken =
                        lot.parked.borrow_mut().get_mut(slot).and_then(|s| {
                            matches!(s, Some(Stored::Fd(_))).then(|| s.take()).flatten()
                        });
                    if let Some(Stored::Fd(fd)) = taken {
                        lot.vacate(slot);
                        if let Some(p) = resume_fd(ep, fd) {
                            out.push(p);
                        }
                    }
                }
            }
            let ready: Vec<usize> = match lot.shared.ready.lock() {
                Ok(mut r) => std::mem::take(&mut *r),
                Err(_) => Vec::new(),
            };
            for slot in ready {
                let mut parked = lot.parked.borrow_mut();
                let Some(Some(Stored::Tokio(p))) = parked.get(slot) else {
                    continue;
                };
                let waker = lot.waker(slot);
                // A wake-up for a slot reused since is spurious: check.
                if p.client.stream.tcp_registered().is_none_or(|t| {
                    t.poll_read_ready(&mut Context::from_waker(&waker))
                        .is_ready()
                }) {
                    if let Some(Stored::Tokio(p)) = parked[slot].take() {
                        out.push(p);
                        lot.vacate(slot);
                    }
                }
            }
            if out.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(out)
            }
        })
        .await
    }

    /// Closes parked connections past `now`; returns the next deadline in
    /// the lot.
    fn expire_parked_until(&self, now: u64) -> Option<u64> {
        let lot = &self.lot;
        // Dropping a connection runs its guard, which must not find the lot
        // borrowed: collect first, drop after. A closed descriptor leaves
        // the lot's epoll by itself.
        let mut closed = Vec::new();
        let next = {
            let mut heap = lot.deadlines.borrow_mut();
            let mut parked = lot.parked.borrow_mut();
            while let Some(&Reverse((d, slot))) = heap.peek() {
                if d > now {
                    break;
                }
                heap.pop();
                // The slot may hold a connection parked since, with a later
                // deadline (and an entry of its own).
                if let Some(p) = parked.get_mut(slot) {
                    if p.as_ref().is_some_and(|p| p.deadline_ms() <= now) {
                        closed.push(p.take());
                        lot.vacate(slot);
                    }
                }
            }
            // Entries of connections that left the lot wait for their
            // deadlines; rebuilt once they outnumber the parked ones.
            if heap.len() > 2 * lot.count.get() + 1024 {
                *heap = parked
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.as_ref().map(|p| Reverse((p.deadline_ms(), i))))
                    .collect();
            }
            heap.peek().map(|Reverse((d, _))| *d)
        };
        drop(closed);
        next
    }

    /// Closes every parked connection: the worker drains.
    fn expire_parked_all(&self) {
        let lot = &self.lot;
        let mut closed = Vec::new();
        {
            let mut parked = lot.parked.borrow_mut();
            for (i, p) in parked.iter_mut().enumerate() {
                if p.is_some() {
                    closed.push(p.take());
                    lot.vacate(i);
                }
            }
            lot.deadlines.borrow_mut().clear();
        }
        drop(closed);
    }

    /// Number of parked connections.
    pub fn parked(&self) -> usize {
        self.lot.count.get()
    }
}

/// What became of a connection offered to the lot's epoll.
enum FdPark {
    Parked(ParkedFd),
    /// Not a plain connection, or the epoll refused it: still in tokio.
    Back(Parked),
    /// It could not leave tokio: closed (its guard keeps the counts right).
    Closed,
}

/// Takes a plain connection out of tokio and into the lot's epoll.
fn park_fd(ep: &super::lot_epoll::LotEpoll, p: Parked, slot: usize) -> FdPark {
    let Parked {
        client,
        guard,
        deadline_ms,
    } = p;
    let Client {
        stream,
        peer,
        listen,
        buf,
        ..
    } = client;
    let back = |stream, guard| {
        FdPark::Back(Parked {
            client: Client {
                stream,
                peer,
                listen,
                buf: bytes::BytesMut::new(),
            },
            guard,
            deadline_ms,
        })
    };
    drop(buf);
    let tcp = match stream {
        ClientStream::Plain(t) => t,
        tls => return back(tls, guard),
    };
    let Ok(tcp) = tcp.into_std() else {
        return FdPark::Closed;
    };
    if ep.add(&tcp, slot).is_err() {
        return back(ClientStream::Plain(PlainTcp::bare(tcp)), guard);
    }
    FdPark::Parked(ParkedFd {
        tcp,
        peer,
        listen,
        guard,
        deadline_ms,
    })
}

/// A readable parked descriptor back into tokio, as a client to serve.
fn resume_fd(ep: &super::lot_epoll::LotEpoll, fd: ParkedFd) -> Option<Parked> {
    ep.remove(&fd.tcp);
    // Back bare: the resumed session reads it at once, and registers it
    // with tokio only if it has to wait (`PlainTcp`).
    Some(Parked {
        client: Client {
            stream: ClientStream::Plain(PlainTcp::bare(fd.tcp)),
            peer: fd.peer,
            listen: fd.listen,
            buf: bytes::BytesMut::new(),
        },
        guard: fd.guard,
        deadline_ms: fd.deadline_ms,
    })
}
