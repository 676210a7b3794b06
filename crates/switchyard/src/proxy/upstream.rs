//! Upstream connections: connecting to members and the per-worker idle pool
//! that reuses them across client connections (request multiplexing).
//!
//! Runs on the owning worker only: the pool is a plain `RefCell`, never
//! shared, so taking and returning a connection costs no lock.
//!
//! A pool with `[pool.tls]` talks TLS to its members: the handshake is part
//! of `connect` (within the same connect timeout), and a TLS connection is
//! pooled and reused exactly like a plain one.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use switchyard_fasthash::FxHashMap;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

use crate::balance::{AdminState, MemberState};
use crate::config::snapshot::Member;
use crate::stats::{self, MemberCounters, Sharded};
pub use crate::tls::upstream::UpStream;
use crate::tls::upstream::{handshake_error, UpstreamTls};

/// An open connection to a member. Keeps the member's open-connection gauge
/// right whatever path drops it.
pub struct UpConn {
    pub stream: UpStream,
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
    /// When it was parked: spares idle for a whole purge period go.
    since: Instant,
}

/// Every this often, half of the idle connections (rounded up) that no
/// request took during the whole period are closed, as HAProxy's
/// `pool-purge-delay` does: the pool follows the load down instead of
/// keeping every connection a burst opened until `idle_timeout`.
pub const PURGE_PERIOD: Duration = Duration::from_secs(5);

/// Idle connections of one member (and worker) that keep their read
/// buffer; the others keep none.
const BUFFERED_IDLE: usize = 64;

/// Requests waiting for a connection to one member (oldest first).
type Waiting = VecDeque<oneshot::Sender<UpConn>>;

#[derive(Default)]
pub struct IdlePool {
    /// Keyed by the address of the member's shared state, which survives
    /// reloads, so pooled connections do too. Each entry holds that state
    /// (`MemberConns::state`): while connections are pooled the address
    /// cannot be freed and handed to another member by a later reload.
    ///
    /// The key's second part is 0 for connections any request may take, or
    /// a client connection's `private_key` for connections that carry that
    /// client's PROXY header: only that client's requests take them, and
    /// they go when it closes (`forget_private`).
    idle: RefCell<FxHashMap<(usize, u64), MemberConns>>,
    /// The private keys of client connections still open (`open_private`
    /// to `forget_private`): a connection released for a client that has
    /// gone (a connect that finished after it closed) is closed, not
    /// pooled where nobody may take it.
    live_private: RefCell<std::collections::HashSet<u64, switchyard_fasthash::FxBuild>>,
    last_purge: std::cell::Cell<Option<Instant>>,
    /// Requests that found no idle connection and are connecting: the next
    /// connection released to that member goes to the oldest of them
    /// instead of the pool (`put`), whichever comes first, that or their
    /// own connect. A burst then opens fewer connections than it has
    /// requests, and waits no longer than a connect. A waiter's request
    /// holds its snapshot, hence the member: the address cannot be reused.
    waiters: RefCell<FxHashMap<(usize, u64), Waiting>>,
}

#[derive(Default)]
struct MemberConns {
    state: Option<Arc<MemberState>>,
    q: VecDeque<Idle>,
}

fn key(m: &Member) -> usize {
    Arc::as_ptr(&m.state) as usize
}

impl IdlePool {
    /// A live idle connection to `m` (of the client `private` names, or
    /// shared when 0), most recently used first.
    pub fn take(&self, m: &Member, private: u64) -> Option<UpConn> {
        let mut idle = self.idle.borrow_mut();
        let q = &mut idle.get_mut(&(key(m), private))?.q;
        let now = Instant::now();
        while let Some(Idle {
            mut conn, expires, ..
        }) = q.pop_back()
        {
            stats::dec(&conn.counters.local().server_connections_idle);
            if now >= expires || !still_open(&mut conn.stream) {
                continue;
            }
            conn.reused = true;
            return Some(conn);
        }
        None
    }

    /// Parks a connection whose last exchange ended cleanly, for at most `idle_timeout`.
    pub fn put(
        &self,
        (m, private): (&Member, u64),
        conn: UpConn,
        max_idle: usize,
        idle_timeout: Duration,
    ) {
        // No reuse at all with idle_per_member = 0.
        if max_idle == 0 || !conn.buf.is_empty() {
            return;
        }
        let Some(conn) = self.hand_over((m, private), conn) else {
            return;
        };
        if private != 0 && !self.live_private.borrow().contains(&private) {
            return;
        }
        let mut idle = self.idle.borrow_mut();
        let entry = idle.entry((key(m), private)).or_default();
        entry.state.get_or_insert_with(|| m.state.clone());
        let q = &mut entry.q;
        if q.len() >= max_idle {
            if let Some(old) = q.pop_front() {
                stats::dec(&old.conn.counters.local().server_connections_idle);
            }
        }
        let mut conn = conn;
        // Keep a modest read buffer for the next response, drop a big one;
        // past the first `BUFFERED_IDLE` of a member none at all: a pool
        // that follows demand may hold a burst's worth of connections, and
        // each then costs its socket, not a buffer.
        if conn.buf.capacity() > 64 * 1024 || q.len() >= BUFFERED_IDLE {
            conn.buf = BytesMut::new();
        }
        stats::inc(&conn.counters.local().server_connections_idle);
        let now = Instant::now();
        q.push_back(Idle {
            conn,
            expires: now + idle_timeout,
            since: now,
        });
    }

    /// Gives `conn` to the oldest request still waiting for a connection to
    /// `m`; returns it when none is.
    fn hand_over(&self, (m, private): (&Member, u64), mut conn: UpConn) -> Option<UpConn> {
        let mut waiters = self.waiters.borrow_mut();
        let Some(q) = waiters.get_mut(&(key(m), private)) else {
            return Some(conn);
        };
        while let Some(tx) = q.pop_front() {
            match tx.send(conn) {
                Ok(()) => return None,
                // That request connected first and went on.
                Err(c) => conn = c,
            }
        }
        waiters.remove(&(key(m), private));
        Some(conn)
    }

    /// A receiver for the next connection to `m` released on this worker
    /// (see `hand_over`); a request races it against its own connect.
    pub fn wait_release(&self, m: &Member, private: u64) -> oneshot::Receiver<UpConn> {
        let (tx, rx) = oneshot::channel();
        self.waiters
            .borrow_mut()
            .entry((key(m), private))
            .or_default()
            .push_back(tx);
        rx
    }

    /// Drops every idle connection to `m` (one turned out stale: the member
    /// probably restarted, so the others are stale too).
    pub fn forget(&self, m: &Member) {
        let k = key(m);
        self.idle.borrow_mut().retain(|(member, _), e| {
            if *member == k {
                for old in e.q.drain(..) {
                    stats::dec(&old.conn.counters.local().server_connections_idle);
                }
            }
            *member != k
        });
    }

    /// Closes the idle connections that carry the PROXY header of the
    /// client connection `private` names, which just closed: no other
    /// request may use them.
    pub fn forget_private(&self, private: u64) {
        if private == 0 || !self.live_private.borrow_mut().remove(&private) {
            return;
        }
        self.idle.borrow_mut().retain(|(_, p), e| {
            if *p == private {
                for old in e.q.drain(..) {
                    stats::dec(&old.conn.counters.local().server_connections_idle);
                }
            }
            *p != private
        });
        self.waiters.borrow_mut().retain(|(_, p), _| *p != private);
    }

    /// The client connection `private` names uses private member
    /// connections (its pool sends PROXY headers); `forget_private` ends
    /// that when it closes.
    pub fn open_private(&self, private: u64) {
        if private != 0 {
            self.live_private.borrow_mut().insert(private);
        }
    }

    /// Closes connections past their idle timeout, or closed by the member.
    pub fn sweep(&self) {
        self.sweep_at(Instant::now());
    }

    fn sweep_at(&self, now: Instant) {
        let mut idle = self.idle.borrow_mut();
        let last = match self.last_purge.get() {
            Some(last) => last,
            None => {
                self.last_purge.set(Some(now));
                now
            }
        };
        if now.duration_since(last) >= PURGE_PERIOD {
            self.last_purge.set(Some(now));
            for e in idle.values_mut() {
                purge_spares(&mut e.q, last);
            }
        }
        for e in idle.values_mut() {
            // A disabled or draining member's idle connections are closed:
            // it takes nothing new, and a drain ends with none open.
            let out = e
                .state
                .as_ref()
                .is_some_and(|s| s.admin() != AdminState::Enabled);
            e.q.retain_mut(|i| {
                let keep = !out && now < i.expires && still_open(&mut i.conn.stream);
                if !keep {
                    stats::dec(&i.conn.counters.local().server_connections_idle);
                }
                keep
            });
        }
        idle.retain(|_, e| !e.q.is_empty());
        drop(idle);
        // Waiters whose request went on without a handed connection.
        self.waiters.borrow_mut().retain(|_, q| {
            q.retain(|tx| !tx.is_closed());
            !q.is_empty()
        });
    }

    /// Idle connections to `m` on this worker, private ones included.
    pub fn count(&self, m: &Member) -> usize {
        let k = key(m);
        self.idle
            .borrow()
            .iter()
            .filter(|((member, _), _)| *member == k)
            .map(|(_, e)| e.q.len())
            .sum()
    }

    /// Closes every idle connection (shutdown).
    pub fn clear(&self) {
        self.waiters.borrow_mut().clear();
        self.live_private.borrow_mut().clear();
        let mut idle = self.idle.borrow_mut();
        for (_, e) in idle.drain() {
            for old in e.q {
                stats::dec(&old.conn.counters.local().server_connections_idle);
            }
        }
    }
}

/// Closes half (rounded up) of the connections idle since before `since`,
/// oldest first (the queue is oldest first; requests take the newest).
fn purge_spares(q: &mut VecDeque<Idle>, since: Instant) {
    let spare = q.iter().filter(|i| i.since <= since).count();
    for _ in 0..spare.div_ceil(2) {
        if let Some(old) = q.pop_front() {
            stats::dec(&old.conn.counters.local().server_connections_idle);
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
///
/// On TLS the socket is what is watched too, but what arrived is judged
/// after decryption: a close_notify, a FIN or application data make the
/// connection unusable; a record that is none of these (a TLS 1.3 session
/// ticket, a key update) is consumed and leaves it usable. Bytes rustls
/// already holds (plaintext, or a close_notify read along with the end of
/// the last response) count as well, since the socket no longer shows them.
fn still_open(s: &mut UpStream) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match s {
        UpStream::Plain(t) => {
            if t.poll_read_ready(&mut cx).is_pending() {
                return true;
            }
            let mut b = [0u8; 1];
            matches!(t.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        }
        UpStream::Tls(t) => {
            let (tcp, conn) = t.get_mut();
            match conn.process_new_packets() {
                Ok(st) if st.plaintext_bytes_to_read() == 0 && !st.peer_has_closed() => {}
                _ => return false,
            }
            if tcp.poll_read_ready(&mut cx).is_pending() {
                return true;
            }
            let mut b = [0u8; 1];
            let mut rb = ReadBuf::new(&mut b);
            // Pending: the records read were not data, nothing else is there.
            Pin::new(&mut **t).poll_read(&mut cx, &mut rb).is_pending()
        }
    }
}

#[derive(Debug)]
pub enum ConnectError {
    /// The TCP connect, or the TCP connect and the TLS handshake together,
    /// took longer than the connect timeout.
    Timeout,
    Io(io::Error),
    /// The TLS handshake failed (rustls' reason, as an operator reads it).
    Tls(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Timeout => f.write_str("connect timed out"),
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Tls(why) => write!(f, "TLS handshake failed: {why}"),
        }
    }
}

/// Opens a connection to `m`: TCP (from `source` when given), then TLS when
/// the pool has `tls`, both within `timeout`. A failed handshake counts in the member's
/// `tls_handshake_failures`.
pub async fn connect(
    m: &Member,
    (tls, source): (Option<&UpstreamTls>, Option<IpAddr>),
    timeout: Duration,
    proxy_header: &[u8],
) -> Result<UpConn, ConnectError> {
    connect_with(m, (tls, source), timeout, false, proxy_header).await
}

/// `connect`, offering HTTP/2 by ALPN on TLS when `h2` (the caller checks
/// `alpn_h2` on the result). `proxy_header`: a PROXY protocol header sent
/// first, before TLS (empty: none).
pub async fn connect_with(
    m: &Member,
    (tls, source): (Option<&UpstreamTls>, Option<IpAddr>),
    timeout: Duration,
    h2: bool,
    proxy_header: &[u8],
) -> Result<UpConn, ConnectError> {
    let addr: SocketAddr = m.addr;
    let deadline = tokio::time::Instant::now() + timeout;
    let open = async {
        let mut s = crate::source::connect_tcp(addr, source).await?;
        if !proxy_header.is_empty() {
            tokio::io::AsyncWriteExt::write_all(&mut s, proxy_header).await?;
        }
        Ok::<_, io::Error>(s)
    };
    let tcp = match tokio::time::timeout_at(deadline, open).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ConnectError::Io(e)),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let _ = tcp.set_nodelay(true);
    let stream = match tls {
        None => UpStream::Plain(tcp),
        Some(t) => {
            let config = if h2 { &t.config_h2 } else { &t.config };
            let connector = TlsConnector::from(config.clone());
            // Boxed: the handshake state is large and must not grow every
            // session's future, plain ones included.
            let hs = Box::pin(connector.connect(t.server_name(addr), tcp));
            match tokio::time::timeout_at(deadline, hs).await {
                Ok(Ok(s)) => UpStream::Tls(Box::new(s)),
                Ok(Err(e)) => {
                    stats::inc(&m.counters.local().tls_handshake_failures);
                    return Err(ConnectError::Tls(handshake_error(&e)));
                }
                Err(_) => {
                    stats::inc(&m.counters.local().tls_handshake_failures);
                    return Err(ConnectError::Timeout);
                }
            }
        }
    };
    m.state.connected();
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

impl UpConn {
    /// The member chose "h2" by ALPN (TLS connections only).
    pub fn alpn_h2(&self) -> bool {
        match &self.stream {
            UpStream::Plain(_) => false,
            UpStream::Tls(t) => t.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }
}

/// An HTTP/2 connection to a member owns its `UpConn` whole, so the
/// connection gauges stay right however it ends.
impl AsyncRead for UpConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for UpConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_connections_serve_only_their_client_and_go_with_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let text = format!("[[vserver]]\nname=\"a\"\nlisten=[\"127.0.0.1:1\"]\ndefault_pool=\"p\"\n[[pool]]\nname=\"p\"\n[[pool.member]]\naddress=\"{addr}\"\n");
            let snap = crate::config::parse("t", &text, None).unwrap();
            let m = snap.pools[0].members.load()[0].clone();
            let pool = IdlePool::default();
            let mut accepted = Vec::new();
            let conn = || async {
                let c = connect(&m, (None, None), Duration::from_secs(1), &[]).await.unwrap();
                (c, l.accept().await.unwrap())
            };
            let (a, b) = (7, 9);
            pool.open_private(a);
            pool.open_private(b);
            let (c, s) = conn().await;
            accepted.push(s);
            pool.put((&m, a), c, 8, Duration::from_secs(60));
            assert!(pool.take(&m, 0).is_none(), "shared requests never take it");
            assert!(pool.take(&m, b).is_none(), "nor another client's");
            let c = pool.take(&m, a).expect("its client takes it");
            pool.put((&m, a), c, 8, Duration::from_secs(60));
            assert_eq!(pool.count(&m), 1);
            // The client closes: its connection goes, and one released for
            // it later (a connect that lost a race) is not pooled.
            pool.forget_private(a);
            assert_eq!(pool.count(&m), 0);
            let (c, s) = conn().await;
            accepted.push(s);
            pool.put((&m, a), c, 8, Duration::from_secs(60));
            assert_eq!(pool.count(&m), 0);
            // The other client's are untouched.
            let (c, s) = conn().await;
            accepted.push(s);
            pool.put((&m, b), c, 8, Duration::from_secs(60));
            assert_eq!(pool.count(&m), 1);
            pool.clear();
        });
    }

    #[test]
    fn spares_idle_a_whole_period_are_halved_and_an_arc_keeps_the_key() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let text = format!("[[vserver]]\nname=\"a\"\nlisten=[\"127.0.0.1:1\"]\ndefault_pool=\"p\"\n[[pool]]\nname=\"p\"\n[[pool.member]]\naddress=\"{addr}\"\n");
            let snap = crate::config::parse("t", &text, None).unwrap();
            let m = snap.pools[0].members.load()[0].clone();
            let pool = IdlePool::default();
            let mut accepted = Vec::new();
            for _ in 0..3 {
                let c = connect(&m, (None, None), Duration::from_secs(1), &[]).await.unwrap();
                accepted.push(l.accept().await.unwrap());
                pool.put((&m, 0), c, 8, Duration::from_secs(60));
            }
            assert_eq!(pool.count(&m), 3);
            // The pool holds the member's state: its address stays taken.
            assert!(Arc::strong_count(&m.state) >= 2);
            let later = Instant::now() + Duration::from_millis(1);
            {
                let mut idle = pool.idle.borrow_mut();
                let q = &mut idle.get_mut(&(key(&m), 0)).unwrap().q;
                // All three were idle through the period: two go (3 / 2 rounded up).
                purge_spares(q, later);
                assert_eq!(q.len(), 1);
                purge_spares(q, later);
                assert_eq!(q.len(), 0);
            }
            // Through sweep: the first call starts a period, one a whole
            // period later halves what stayed idle through it.
            for _ in 0..2 {
                let c = connect(&m, (None, None), Duration::from_secs(1), &[]).await.unwrap();
                accepted.push(l.accept().await.unwrap());
                pool.put((&m, 0), c, 8, Duration::from_secs(60));
            }
            let t0 = Instant::now();
            pool.sweep_at(t0);
            assert_eq!(pool.count(&m), 2);
            pool.sweep_at(t0 + PURGE_PERIOD + Duration::from_millis(1));
            assert_eq!(pool.count(&m), 1);
            pool.clear();
            // A released connection goes to a waiting request, not the pool;
            // a waiter that went on (dropped) is passed over.
            let gone = pool.wait_release(&m, 0);
            let waiting = pool.wait_release(&m, 0);
            drop(gone);
            let c = connect(&m, (None, None), Duration::from_secs(1), &[]).await.unwrap();
            accepted.push(l.accept().await.unwrap());
            pool.put((&m, 0), c, 8, Duration::from_secs(60));
            assert_eq!(pool.count(&m), 0);
            let handed = waiting.await.expect("handed over");
            pool.put((&m, 0), handed, 8, Duration::from_secs(60));
            assert_eq!(pool.count(&m), 1, "no waiter left: pooled");
            pool.clear();
            // A connection parked after the period started is no spare.
            let c = connect(&m, (None, None), Duration::from_secs(1), &[]).await.unwrap();
            accepted.push(l.accept().await.unwrap());
            let before = Instant::now();
            pool.put((&m, 0), c, 8, Duration::from_secs(60));
            let mut idle = pool.idle.borrow_mut();
            let q = &mut idle.get_mut(&(key(&m), 0)).unwrap().q;
            purge_spares(q, before - Duration::from_millis(1));
            assert_eq!(q.len(), 1);
        });
    }
}
