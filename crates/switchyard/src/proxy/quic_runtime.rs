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
//! Timers and the current time stay tokio's (`quinn::TokioRuntime`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
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
