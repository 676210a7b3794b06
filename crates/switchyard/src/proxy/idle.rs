//! Waiting for the next request on a keep-alive connection.
//!
//! An idle client connection must cost as little as possible (the target is
//! under 1 KB). A tokio `Sleep` plus a drain-channel receiver per
//! connection cost about 300 bytes of every connection's task; instead each
//! worker keeps one registry of idle connections with their deadlines and
//! one coarse ticker (100 ms) that wakes the expired ones, and wakes all of
//! them when the worker drains. An idle connection holds a slot index.
//!
//! Runs on the owning worker only (`RefCell`, no locks).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::clock::now_ms;

/// How often deadlines are checked: idle timeouts are this coarse.
pub const TICK: Duration = Duration::from_millis(100);

struct Entry {
    waker: Waker,
    deadline_ms: u64,
}

#[derive(Default)]
pub struct IdleWatch {
    slots: RefCell<Vec<Option<Entry>>>,
    free: RefCell<Vec<usize>>,
    draining: Cell<bool>,
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

    /// Wakes connections whose deadline passed. Called by the worker's ticker.
    pub fn tick(&self) {
        let now = now_ms();
        let slots = self.slots.borrow();
        for e in slots.iter().flatten() {
            if e.deadline_ms <= now {
                e.waker.wake_by_ref();
            }
        }
    }

    /// Wakes every idle connection for good: the worker is draining.
    pub fn drain(&self) {
        self.draining.set(true);
        let slots = self.slots.borrow();
        for e in slots.iter().flatten() {
            e.waker.wake_by_ref();
        }
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
            }
        }
    }

    fn release(&self, i: usize) {
        self.slots.borrow_mut()[i] = None;
        self.free.borrow_mut().push(i);
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
        if self.watch.draining.get() {
            return Poll::Ready(IdleEnd::Drain);
        }
        // Errors surface on the read that follows.
        if self.stream.poll_read_ready(cx).is_ready() {
            return Poll::Ready(IdleEnd::Readable);
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
