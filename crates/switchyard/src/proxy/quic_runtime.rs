//! quinn's runtime on a worker: its drivers (the endpoint's, and one per
//! connection) run as tasks of the worker's `LocalSet`, beside the HTTP/3
//! tasks they wake.
//!
//! With `quinn::TokioRuntime` they were tasks of the current-thread runtime
//! itself, and a worker's own tasks run inside its `LocalSet`, the future
//! the runtime blocks on. That runtime polls its blocked-on future again
//! only after its own queue ran empty and it polled the I/O driver: every
//! request that a connection's driver handed to the request's task paid an
//! `epoll_wait` between the two. Traced on one worker at 1,000 requests/s
//! of 1 KB (oha, 20 connections x 10 streams; `sys_exit_epoll_wait`
//! between the driver's poll and the request task's), a request's head
//! took 31.7 µs at the median from the `recvmmsg` that read it to the
//! `sendto` that forwarded it, against 16.7 µs over HTTP/2, whose tasks
//! are all in the set. In the set, the driver's wake-up of a request's
//! task is a push on the queue being run.
//!
//! The runtime's tasks also ran after the set's whole turn, so each
//! connection's driver sent what all its streams had written in it. In
//! the set a driver runs as soon as it is woken: at saturation (1 KB, 20
//! connections x 10 streams, callgrind) `sendmsg` went from 0.11 to 0.24
//! per response, and user-space instructions per request from 47,016 and
//! 47,257 to 49,095 and 48,691. So a driver sends at once only in a quiet
//! turn, one in which no connection has sent yet since the worker last
//! polled its I/O, and in a busy one at the turn's end, as HTTP/2's
//! writes are held (`turn::quic_may_send`, `turn::quic_wake`; vendor/quinn's
//! eighth change): 0.18 `sendmsg` per response, 47,739 instructions.
//!
//! Timers and the current time stay tokio's (`quinn::TokioRuntime`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Instant;

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};

/// For endpoints made on a worker, inside its `LocalSet`
/// (`accept::serve_quic`): `spawn` is `tokio::task::spawn_local`.
#[derive(Debug)]
pub struct WorkerRuntime;

impl Runtime for WorkerRuntime {
    fn new_timer(&self, t: Instant) -> Pin<Box<dyn AsyncTimer>> {
        TokioRuntime.new_timer(t)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        // quinn spawns from the calls that make an endpoint or accept a
        // connection, which a worker's tasks make: the set is current.
        tokio::task::spawn_local(future);
    }

    fn wrap_udp_socket(&self, t: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        TokioRuntime.wrap_udp_socket(t)
    }

    fn now(&self) -> Instant {
        TokioRuntime.now()
    }

    fn may_send(&self, cx: &Context, hold: &mut Option<u64>) -> bool {
        crate::turn::quic_may_send(cx, hold)
    }

    fn may_send_handshake(&self, cx: &Context, hold: &mut Option<u64>) -> bool {
        crate::turn::at_turn_end(cx, hold)
    }

    fn wake_driver(&self, driver: Waker, hold: &mut Option<u64>) {
        crate::turn::quic_wake(driver, hold);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What quinn spawns runs in the `LocalSet`: a task there can spawn a
    /// local task of its own, which a runtime task cannot (it panics, and
    /// the answer never comes).
    #[test]
    fn spawned_drivers_run_in_the_workers_local_set() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        let ran = local.block_on(&rt, async {
            let (tx, rx) = tokio::sync::oneshot::channel();
            WorkerRuntime.spawn(Box::pin(async move {
                let inner = tokio::task::spawn_local(async { true });
                let _ = tx.send(inner.await.unwrap_or(false));
            }));
            let waited = tokio::time::timeout(std::time::Duration::from_secs(5), rx).await;
            matches!(waited, Ok(Ok(true)))
        });
        assert!(ran, "quinn's task did not run in the LocalSet");
    }
}
