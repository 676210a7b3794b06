//! Upstream connections: connecting to members and the per-worker idle pool
//! that reuses them across client connections (request multiplexing).
//!
//! Runs on the owning worker only: the pool is a plain `RefCell`, never
//! shared, so taking and returning a connection costs no lock.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::TcpStream;

use crate::config::snapshot::Member;
use crate::stats::{self, MemberCounters, Sharded};

/// An open connection to a member. Keeps the member's open-connection gauge
/// right whatever path drops it.
pub struct UpConn {
    pub stream: TcpStream,
    /// Bytes read from the member and not consumed yet.
    pub buf: BytesMut,
    /// True when the connection came from the idle pool.
    pub reused: bool,
    counters: Arc<Sharded<MemberCounters>>,
}

impl Drop for UpConn {
    fn drop(&mut self) {
        stats::dec(&self.counters.local().server_connections_active);
    }
}

struct Idle {
    conn: UpConn,
    expires: Instant,
}

#[derive(Default)]
pub struct IdlePool {
    /// Keyed by the member's shared state, which survives reloads, so
    /// pooled connections do too.
    idle: RefCell<HashMap<usize, VecDeque<Idle>>>,
}

fn key(m: &Member) -> usize {
    Arc::as_ptr(&m.state) as usize
}

impl IdlePool {
    /// A live idle connection to `m`, most recently used first.
    pub fn take(&self, m: &Member) -> Option<UpConn> {
        let mut idle = self.idle.borrow_mut();
        let q = idle.get_mut(&key(m))?;
        let now = Instant::now();
        while let Some(Idle { conn, expires }) = q.pop_back() {
            stats::dec(&conn.counters.local().server_connections_idle);
            if now >= expires || !still_open(&conn.stream) {
                continue;
            }
            let mut conn = conn;
            conn.reused = true;
            return Some(conn);
        }
        None
    }

    /// Parks a connection whose last exchange ended cleanly, for at most `idle_timeout`.
    pub fn put(&self, m: &Member, conn: UpConn, max_idle: usize, idle_timeout: Duration) {
        if max_idle == 0 || !conn.buf.is_empty() {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        let q = idle.entry(key(m)).or_default();
        if q.len() >= max_idle {
            if let Some(old) = q.pop_front() {
                stats::dec(&old.conn.counters.local().server_connections_idle);
            }
        }
        let mut conn = conn;
        // Idle member connections are few (bounded per member and worker):
        // keep a modest read buffer for the next response, drop a big one.
        if conn.buf.capacity() > 64 * 1024 {
            conn.buf = BytesMut::new();
        }
        stats::inc(&conn.counters.local().server_connections_idle);
        q.push_back(Idle {
            conn,
            expires: Instant::now() + idle_timeout,
        });
    }

    /// Drops every idle connection to `m` (one turned out stale: the member
    /// probably restarted, so the others are stale too).
    pub fn forget(&self, m: &Member) {
        if let Some(q) = self.idle.borrow_mut().remove(&key(m)) {
            for old in q {
                stats::dec(&old.conn.counters.local().server_connections_idle);
            }
        }
    }

    /// Closes connections past their idle timeout, or closed by the member.
    pub fn sweep(&self) {
        let mut idle = self.idle.borrow_mut();
        let now = Instant::now();
        for q in idle.values_mut() {
            q.retain(|i| {
                let keep = now < i.expires && still_open(&i.conn.stream);
                if !keep {
                    stats::dec(&i.conn.counters.local().server_connections_idle);
                }
                keep
            });
        }
        idle.retain(|_, q| !q.is_empty());
    }

    /// Closes every idle connection (shutdown).
    pub fn clear(&self) {
        let mut idle = self.idle.borrow_mut();
        for (_, q) in idle.drain() {
            for old in q {
                stats::dec(&old.conn.counters.local().server_connections_idle);
            }
        }
    }
}

/// An idle HTTP connection must have nothing to read: EOF means the member
/// closed it, data means it is out of step. Either way it is not reusable.
///
/// The I/O driver's readiness answers without a syscall in the common case:
/// the last read of the response was partial, which cleared readiness, so
/// "not ready" means nothing arrived since. Only when the driver saw an
/// event do we ask the socket (one recv).
fn still_open(s: &TcpStream) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if s.poll_read_ready(&mut cx).is_pending() {
        return true;
    }
    let mut b = [0u8; 1];
    matches!(s.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

#[derive(Debug)]
pub enum ConnectError {
    Timeout,
    Io(io::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Timeout => f.write_str("connect timed out"),
            ConnectError::Io(e) => write!(f, "{e}"),
        }
    }
}

pub async fn connect(m: &Member, timeout: Duration) -> Result<UpConn, ConnectError> {
    let addr: SocketAddr = m.addr;
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ConnectError::Io(e)),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let _ = stream.set_nodelay(true);
    let c = m.counters.local();
    stats::inc(&c.server_connections_total);
    stats::inc(&c.server_connections_active);
    Ok(UpConn {
        stream,
        buf: BytesMut::new(),
        reused: false,
        counters: m.counters.clone(),
    })
}
