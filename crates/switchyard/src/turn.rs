//! A worker's scheduler turn: long ones, and writes held to their end.
//!
//! A `LocalSet` runs at most 61 tasks per poll and then asks to be polled
//! again; tokio's current-thread runtime answers every such request by
//! polling the I/O driver first (an `epoll_wait`). Under load that is one
//! system call per 61 task polls, about 20 proxied requests, and each turn
//! sees only the events of that short window. `Turns` polls the set again
//! while it still has tasks ready (HAProxy handles up to 200 events per
//! poll), and only then lets the driver in.
//!
//! At the end of a turn, when no task is ready any more, it wakes the tasks
//! that held a write back for it (`Hold`): an HTTP/2 connection then
//! sends the responses of every stream that completed during the turn in
//! one write, as HAProxy's mux drains every ready stream before it sends.
//! QUIC connections' drivers do the same in a busy turn, and send at once
//! in a quiet one (`quic_may_send`, `quic_wake`; `proxy/quic_runtime.rs`).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Polls of the inner future (61 tasks each) before the driver is polled.
const TURNS: u32 = 4;

thread_local! {
    /// A `Turns` drives this thread: held writes will be released.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Counts the turns' ends on this thread.
    static TURN: Cell<u64> = const { Cell::new(0) };
    /// Tasks waiting for the end of the turn.
    static HELD: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
    /// Output was added to held writes since the turn last looked.
    static GREW: Cell<bool> = const { Cell::new(false) };
    /// A QUIC connection sent since the worker last polled its I/O: the
    /// turn is busy (`quic_may_send`).
    static QUIC_BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Most times a turn's end is put off because held output keeps growing.
const MAX_HOLD: u32 = 8;

/// Held output grew: the writes may wait for one more round of I/O.
pub fn grew() {
    GREW.with(|g| g.set(true));
}

/// When a write held back at the end of turn `Some(n)` may go out.
#[derive(Default)]
pub struct Hold(Option<u64>);

impl Hold {
    /// Whether the caller should write now; `Pending` means it is woken at
    /// the end of this turn. Where no `Turns` drives the thread, now.
    pub fn ready(&mut self, cx: &Context<'_>) -> bool {
        at_turn_end(cx, &mut self.0)
    }

    /// The write went out for another reason (its buffer filled up).
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

/// Whether a writer whose note is `hold` may write now: once the turn it
/// waits for has ended. Else it waits, its waker held for this turn's end.
fn ready_at_turn_end(hold: &mut Option<u64>, cx: &Context<'_>) -> bool {
    match *hold {
        Some(t) if TURN.with(Cell::get) > t => {
            *hold = None;
            true
        }
        Some(_) => false,
        None => {
            hold_until_turn_end(hold, cx.waker().clone());
            false
        }
    }
}

/// `w` is woken at the end of this turn; `hold` notes which turn.
fn hold_until_turn_end(hold: &mut Option<u64>, w: Waker) {
    *hold = Some(TURN.with(Cell::get));
    HELD.with(|h| h.borrow_mut().push(w));
}

/// Whether a QUIC connection's driver sends what it has now
/// (`proxy/quic_runtime.rs`). In a quiet turn, one in which no connection
/// has sent since the worker last polled its I/O, at once: a lone
/// request's response waits for nothing. In a busy one at the turn's end,
/// as HTTP/2's writes are held (`Hold`), so that one drive carries what
/// every stream of the connection wrote in the turn. `hold` is the
/// connection's note: `Some(turn)` while it waits for that turn's end,
/// its driver's waker then among the held ones.
pub fn quic_may_send(cx: &Context<'_>, hold: &mut Option<u64>) -> bool {
    if !ACTIVE.with(Cell::get) || (hold.is_none() && !QUIC_BUSY.with(|b| b.replace(true))) {
        return true;
    }
    ready_at_turn_end(hold, cx)
}

/// Whether a writer whose note is `hold` writes now: at the turn's end,
/// busy or quiet (`Hold::ready`; a QUIC connection's handshake drives,
/// `proxy/quic_runtime.rs`, whose sends want answers from the turn's other
/// tasks, the endpoint's connection IDs and the first stream data, which
/// then go in the same datagram). Where no `Turns` drives the thread, now.
pub fn at_turn_end(cx: &Context<'_>, hold: &mut Option<u64>) -> bool {
    !ACTIVE.with(Cell::get) || ready_at_turn_end(hold, cx)
}

/// Wakes a QUIC connection's driver for output its streams gave it: in a
/// quiet turn now, in a busy one at the turn's end (`quic_may_send`), where
/// one drive then sends what the turn's streams wrote.
pub fn quic_wake(driver: Waker, hold: &mut Option<u64>) {
    if !ACTIVE.with(Cell::get) || !QUIC_BUSY.with(Cell::get) {
        driver.wake();
    } else if hold.is_none() {
        hold_until_turn_end(hold, driver);
    }
    // Else the driver waits for a turn's end already: its waker is among
    // the held ones, or was woken with them.
}

/// Wraps the future a worker's runtime blocks on.
pub struct Turns<F> {
    inner: Pin<Box<F>>,
    relay: Arc<Relay>,
    waker: Waker,
    /// Turn ends put off so far for the held writes.
    put_off: u32,
}

/// Forwards wakes to the runtime, and notes that one happened.
struct Relay {
    woken: AtomicBool,
    to: Mutex<Option<Waker>>,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Ok(to) = self.to.lock() {
            if let Some(w) = to.as_ref() {
                w.wake_by_ref();
            }
        }
    }
}

impl<F: Future> Turns<F> {
    pub fn new(inner: F) -> Turns<F> {
        let relay = Arc::new(Relay {
            woken: AtomicBool::new(false),
            to: Mutex::new(None),
        });
        Turns {
            inner: Box::pin(inner),
            waker: Waker::from(relay.clone()),
            relay,
            put_off: 0,
        }
    }
}

impl<F: Future> Future for Turns<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        if let Ok(mut to) = this.relay.to.lock() {
            if !to.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *to = Some(cx.waker().clone());
            }
        }
        ACTIVE.with(|a| a.set(true));
        QUIC_BUSY.with(|b| b.set(false));
        let mut inner_cx = Context::from_waker(&this.waker);
        let mut polls = 0;
        loop {
            this.relay.woken.store(false, Ordering::Release);
            if let Poll::Ready(v) = this.inner.as_mut().poll(&mut inner_cx) {
                ACTIVE.with(|a| a.set(false));
                return Poll::Ready(v);
            }
            polls += 1;
            let ready = this.relay.woken.load(Ordering::Acquire);
            if ready && polls < TURNS {
                continue;
            }
            // The turn ends: nothing is ready, or it ran long enough and
            // yields to I/O. While held output still grows, the writes wait
            // for one more round of events (a few rounds at most); then they
            // go out (at the next poll if tasks are still waiting).
            if HELD.with(|h| h.borrow().is_empty()) {
                return Poll::Pending;
            }
            if GREW.with(|g| g.replace(false)) && this.put_off < MAX_HOLD {
                this.put_off += 1;
                if !ready {
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
            let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
            this.put_off = 0;
            TURN.with(|t| t.set(t.get() + 1));
            for w in held {
                w.wake();
            }
            if !ready {
                continue;
            }
            return Poll::Pending;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::rc::Rc;

    fn block_on<F: Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        rt.block_on(Turns::new(local.run_until(f)))
    }

    /// A held write waits until every task ready in the same turn has run,
    /// however many times it is polled meanwhile.
    #[test]
    fn held_write_goes_after_the_turns_ready_tasks() {
        let order = block_on(async {
            let order = Rc::new(RefCell::new(Vec::new()));
            let writer = {
                let order = order.clone();
                tokio::task::spawn_local(async move {
                    let mut hold = Hold::default();
                    grew();
                    poll_fn(|cx| {
                        if hold.ready(cx) {
                            Poll::Ready(())
                        } else {
                            // Woken again before the turn ends (as h2 does).
                            cx.waker().wake_by_ref();
                            Poll::Pending
                        }
                    })
                    .await;
                    order.borrow_mut().push("write");
                })
            };
            let mut others = Vec::new();
            for _ in 0..100 {
                let order = order.clone();
                others.push(tokio::task::spawn_local(async move {
                    tokio::task::yield_now().await;
                    order.borrow_mut().push("stream");
                }));
            }
            writer.await.expect("writer");
            for o in others {
                o.await.expect("stream");
            }
            Rc::try_unwrap(order).expect("one owner").into_inner()
        });
        assert_eq!(order.len(), 101);
        assert_eq!(order.last(), Some(&"write"), "{order:?}");
    }

    type Order = Rc<RefCell<Vec<&'static str>>>;

    /// Streams that become ready now (spawned: at the back of the queue),
    /// each noting itself in `order` when it runs.
    fn streams(order: &Order) {
        for _ in 0..100 {
            let order = order.clone();
            tokio::task::spawn_local(async move { order.borrow_mut().push("stream") });
        }
    }

    /// A QUIC connection's send, polled until `quic_may_send` lets it
    /// through, then `name` noted in `order`. `ready_then`: streams become
    /// ready after it sent.
    async fn quic_send(order: Order, name: &'static str, ready_then: bool) {
        let mut hold = None;
        poll_fn(|cx| {
            if quic_may_send(cx, &mut hold) {
                Poll::Ready(())
            } else {
                // Polled again before the turn ends, as a driver is when a
                // datagram comes: it must still wait.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await;
        order.borrow_mut().push(name);
        if ready_then {
            streams(&order);
        }
    }

    /// The first QUIC connection to send in a turn sends at once (a lone
    /// request's response waits for nothing); once one has, the turn is
    /// busy and the others send after every task that became ready in it.
    #[test]
    fn quic_sends_wait_for_the_end_of_a_busy_turn() {
        let order = block_on(async {
            let order: Order = Rc::default();
            let first = tokio::task::spawn_local(quic_send(order.clone(), "first", true));
            let second = tokio::task::spawn_local(quic_send(order.clone(), "second", false));
            first.await.expect("first");
            second.await.expect("second");
            Rc::try_unwrap(order).expect("one owner").into_inner()
        });
        assert_eq!(order.len(), 102);
        assert_eq!(order.first(), Some(&"first"), "{order:?}");
        assert_eq!(order.last(), Some(&"second"), "{order:?}");
    }

    /// A connection's driver, waiting to be woken, and a stream that wakes
    /// it (`quic_wake`) and then makes other streams ready; the driver notes
    /// `name` when it runs.
    async fn quic_woken(order: Order, name: &'static str) {
        let slot: Rc<RefCell<Option<Waker>>> = Rc::default();
        let driver = {
            let (order, slot) = (order.clone(), slot.clone());
            tokio::task::spawn_local(async move {
                let mut waiting = false;
                poll_fn(|cx| {
                    if waiting {
                        return Poll::Ready(());
                    }
                    waiting = true;
                    *slot.borrow_mut() = Some(cx.waker().clone());
                    Poll::Pending
                })
                .await;
                order.borrow_mut().push(name);
            })
        };
        // Spawned after the driver: it runs once the driver waits.
        let stream = tokio::task::spawn_local(async move {
            let mut hold = None;
            if let Some(w) = slot.borrow_mut().take() {
                quic_wake(w, &mut hold);
            }
            streams(&order);
        });
        stream.await.expect("stream");
        driver.await.expect("driver");
    }

    /// A stream's wake-up of its connection's driver: at once in a quiet
    /// turn (before the streams that became ready after it), at the turn's
    /// end in a busy one (after them).
    #[test]
    fn quic_wakes_wait_for_the_end_of_a_busy_turn() {
        let order = block_on(async {
            let order: Order = Rc::default();
            quic_woken(order.clone(), "quiet").await;
            // A send makes the turn busy.
            let mut hold = None;
            assert!(poll_fn(|cx| Poll::Ready(quic_may_send(cx, &mut hold))).await);
            quic_woken(order.clone(), "busy").await;
            Rc::try_unwrap(order).expect("one owner").into_inner()
        });
        assert_eq!(order.len(), 202);
        assert_eq!(order[0], "quiet", "{order:?}");
        assert_eq!(order.last(), Some(&"busy"), "{order:?}");
    }

    /// Without a `Turns` driving the thread nothing would release a held
    /// write: it goes at once.
    #[test]
    fn without_turns_a_write_goes_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(poll_fn(|cx| {
            let mut hold = Hold::default();
            assert!(hold.ready(cx));
            Poll::Ready(())
        }));
    }
}
