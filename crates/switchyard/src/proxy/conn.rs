//! A client connection as the worker holds it: between requests (`Client`,
//! small enough to park by the thousand) and for its whole life
//! (`ConnGuard`, which keeps the connection gauges right however it ends).

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::stream::ClientStream;
use crate::stats::{self, Sharded, VsCounters};

/// A client connection between requests: all a session needs to resume.
pub struct Client {
    pub(super) stream: ClientStream,
    pub(super) peer: SocketAddr,
    pub(super) listen: SocketAddr,
    pub(super) buf: BytesMut,
}

impl Client {
    /// Writes all of `bytes` and flushes them out of TLS (a no-op on TCP).
    pub(super) async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        send2(&mut self.stream, bytes, &[]).await
    }
}

/// A head and a body in one vectored write where the writer can (a large
/// body is not copied behind the head), flushed out of TLS.
pub(super) async fn send2<W: AsyncWrite + Unpin>(
    w: &mut W,
    head: &[u8],
    body: &[u8],
) -> std::io::Result<()> {
    if body.is_empty() {
        // send(2) costs the kernel less than writev(2) of one buffer.
        w.write_all(head).await?;
        return w.flush().await;
    }
    let (mut head, mut body) = (head, body);
    while !head.is_empty() || !body.is_empty() {
        let bufs = [std::io::IoSlice::new(head), std::io::IoSlice::new(body)];
        let n = w.write_vectored(&bufs).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
    }
    w.flush().await
}

/// Keeps the connection gauges right for as long as a client connection
/// lives, in a task or parked.
pub struct ConnGuard {
    pub(super) active: Rc<Cell<usize>>,
    pub(super) counters: Arc<Sharded<VsCounters>>,
    /// The connection's places in per-source limits (`stick`), given back
    /// when it ends (held for their `Drop`).
    #[allow(dead_code)]
    pub(super) leases: Option<Box<[crate::shield::stick::Lease]>>,
    /// The worker's idle member connections and this client's
    /// `private_key`: the member connections that carry its PROXY header
    /// close with it.
    pub(super) private: Option<(Rc<super::upstream::IdlePool>, u64)>,
    /// What the script's connection events chose for its requests (a
    /// pool, access-log fields): `conn_scripting`. Held here because this
    /// lives exactly as long as the connection, whichever protocol it
    /// goes on in (HTTP/1, parked, HTTP/2).
    pub(super) script: Option<Rc<ConnChoice>>,
}

/// What the script's connection events (`conn_scripting`) decided for
/// the requests of a connection. Here, beside the guard that holds it, so
/// that the connection's files need not know the events.
#[derive(Debug, Default)]
pub struct ConnChoice {
    /// The pool's name (looked up in each request's configuration).
    pub(super) pool: Option<String>,
    /// `c:log` fields, for every request's access log line.
    pub(super) log: Vec<(String, String)>,
}

/// The key of the member connections private to one client connection
/// (its PROXY header names it): its two endpoints, unique among open
/// connections; never 0, which means shared.
pub fn private_key_of(peer: std::net::SocketAddr, listen: std::net::SocketAddr) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = switchyard_fasthash::FxHasher::default();
    (peer, listen).hash(&mut h);
    h.finish() | 1
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Some((idle, key)) = self.private.take() {
            idle.forget_private(key);
        }
        stats::dec(&self.counters.local().client_connections_active);
        self.active.set(self.active.get() - 1);
    }
}
