//! Giving freed memory back to the system, off the workers.
//!
//! The process has two allocators. Rust's allocations go to mimalloc (the
//! binary's global allocator, main.rs): each thread frees into its own
//! heap, and mimalloc returns a heap's free pages to the kernel itself,
//! from that thread, when the thread next allocates. A worker does that
//! within seconds of a wave of connections ending (one measurement: RSS
//! 143 MB with 4,000 connections, 37 MB 12 s after they closed). The
//! control thread builds each configuration (a reload that changes a rule
//! set compiles the CRS again: about 13 MB of temporaries and the old
//! engine) and then idles, so each tick here calls `mi_collect` on it.
//!
//! The C libraries (aws-lc for TLS, zstd, libdeflate) allocate from
//! glibc, which keeps what they free in its arenas; `malloc_trim(0)`
//! returns the free pages to the kernel, as
//! HAProxy does when it releases its pools. It walks *every* arena (each
//! worker allocates from its own), locking each in turn while it trims it,
//! so it may run on any thread and frees the workers' memory as well from
//! here as from a worker. It used to run on each worker's event loop, which
//! stalled that worker's requests for the whole walk (milliseconds with a
//! large heap). It now runs on the control thread: a worker only waits if it
//! allocates from the one arena being trimmed at that moment, for that
//! arena's turn.
//!
//! When: every 10 s, and at once after a wave of connections went idle,
//! when the idle keep-alive connections parked on all workers grew by more
//! than `WAVE` since the last trim: their tasks' memory is free then.
//! Workers report how many connections they have parked through
//! `ParkedShare`, one atomic add per second each, and the one whose report
//! makes a wave wakes this task (it used to look every second, a wake-up
//! of an idle process).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Idle connections parked on all workers (the sum of every `ParkedShare`),
/// also shown as a gauge.
use crate::stats::CLIENTS_PARKED as PARKED;

/// Parked connections at the last trim (or fewer, when some left since).
static MARK: AtomicUsize = AtomicUsize::new(0);
/// A wave of connections went idle since the last trim.
static WAVE_SEEN: Notify = Notify::const_new();

/// Trim at once when this many more connections are parked than at the last trim.
const WAVE: usize = 1000;
/// Trim at least this often.
const EVERY: Duration = Duration::from_secs(10);

/// A worker's part of `PARKED`; taken back out when dropped (the worker stops).
#[derive(Default)]
pub(super) struct ParkedShare(usize);

impl ParkedShare {
    /// This worker now has `parked` idle connections parked.
    pub(super) fn set(&mut self, parked: usize) {
        let total = if parked > self.0 {
            PARKED.fetch_add(parked - self.0, Ordering::Relaxed) + (parked - self.0)
        } else {
            PARKED.fetch_sub(self.0 - parked, Ordering::Relaxed) - (self.0 - parked)
        };
        self.0 = parked;
        let mark = MARK.fetch_min(total, Ordering::Relaxed).min(total);
        if total > mark + WAVE {
            WAVE_SEEN.notify_one();
        }
    }
}

impl Drop for ParkedShare {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// Runs on the control thread for the life of the process.
pub(super) async fn run() {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = WAVE_SEEN.notified() => {}
        }
        MARK.store(PARKED.load(Ordering::Relaxed), Ordering::Relaxed);
        trim();
    }
}

fn trim() {
    // SAFETY: malloc_trim takes no pointers and is thread-safe: it locks
    // each glibc arena while it trims it.
    unsafe { libc::malloc_trim(0) };
    give_back_this_threads_memory();
}

/// Hands the pages mimalloc keeps free in the calling thread's heap back
/// to the kernel: the control thread's at each tick here, and the main
/// thread's once the configuration is loaded (main.rs).
pub fn give_back_this_threads_memory() {
    // SAFETY: takes no pointers; collects the calling thread's mimalloc
    // heap, which no other thread allocates from.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_leave_with_their_worker() {
        let before = PARKED.load(Ordering::Relaxed);
        let mut a = ParkedShare::default();
        let mut b = ParkedShare::default();
        a.set(700);
        b.set(500);
        assert_eq!(PARKED.load(Ordering::Relaxed), before + 1200);
        a.set(100);
        assert_eq!(PARKED.load(Ordering::Relaxed), before + 600);
        drop(b);
        assert_eq!(PARKED.load(Ordering::Relaxed), before + 100);
        drop(a);
        assert_eq!(PARKED.load(Ordering::Relaxed), before);
    }
}
