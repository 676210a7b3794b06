//! What one worker gives every exchange it runs: the configuration
//! snapshot, the idle member connections, the idle-client registry and the
//! pooled read buffers.
//!
//! Runs on the owning worker only: plain `Cell`/`RefCell`, no locks.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;

use super::idle::IdleWatch;
use super::member::H2Conns;
use super::upstream::IdlePool;
use crate::config::snapshot::Snapshot;

/// What one worker gives every session it runs.
pub struct WorkerCtx {
    pub snapshot: Arc<arc_swap::ArcSwap<Snapshot>>,
    /// Shared with the connects a request gave up on (`member_h1`), which
    /// offer their connection to a waiting request when they complete.
    pub idle: Rc<IdlePool>,
    /// Idle keep-alive connections, their deadlines, and the drain signal.
    pub idle_watch: IdleWatch,
    /// Client connections open on this worker (drain waits for zero);
    /// shared with each connection's guard.
    pub active: Rc<Cell<usize>>,
    /// Read buffers of connections waiting between requests, for the next
    /// request on any connection (HAProxy's buffer pool): no malloc per
    /// request, and no buffer pinned by a waiting connection.
    pub buffers: RefCell<Vec<BytesMut>>,
    /// HTTP/2 connections to members of h2 pools.
    pub h2_members: H2Conns,
}

/// Client read buffer size, and how many the pool keeps per worker.
const CLIENT_BUF: usize = 8 * 1024;
const POOLED_BUFFERS: usize = 64;

impl WorkerCtx {
    pub fn draining(&self) -> bool {
        self.idle_watch.is_draining()
    }

    pub(super) fn take_buffer(&self) -> BytesMut {
        self.buffers
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(CLIENT_BUF))
    }

    pub(super) fn return_buffer(&self, mut buf: BytesMut) {
        // Only an empty buffer holds nothing of the connection's.
        if !buf.is_empty() || buf.capacity() == 0 {
            return;
        }
        buf.clear();
        let mut pool = self.buffers.borrow_mut();
        if pool.len() < POOLED_BUFFERS {
            pool.push(buf);
        }
    }
}

#[cfg(test)]
impl WorkerCtx {
    /// A worker context on a one-vserver, one-member configuration, for
    /// unit tests of the request path.
    pub(crate) fn for_tests() -> WorkerCtx {
        let text = "[[vserver]]\nname=\"a\"\nlisten=[\"127.0.0.1:1\"]\ndefault_pool=\"p\"\n[[pool]]\nname=\"p\"\n[[pool.member]]\naddress=\"127.0.0.1:2\"\n";
        let snap = crate::config::parse("t", text, None).expect("test configuration");
        WorkerCtx {
            snapshot: Arc::new(arc_swap::ArcSwap::from_pointee(snap)),
            idle: Rc::default(),
            idle_watch: IdleWatch::default(),
            active: Default::default(),
            buffers: Default::default(),
            h2_members: Default::default(),
        }
    }
}
