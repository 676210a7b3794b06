//! `udp` vservers: datagrams from clients relayed to members and the
//! replies relayed back.
//!
//! Every worker has its own socket on the vserver's address
//! (SO_REUSEPORT): the kernel hashes a client's address and port to one of
//! them, so a client's datagrams all reach the same worker, and each
//! worker keeps its own session table, without locks.
//!
//! - **Sessions** (the default): the first datagram of a client address
//!   opens a session. A member is picked as for TCP, and a socket is
//!   connected to it. Replies on that socket go back to that client from
//!   the vserver's address. The session ends after `idle_timeout` with no
//!   datagram either way. The table is bounded by `max_sessions`: a new
//!   client's datagram is dropped and counted while the table is full.
//! - **Per datagram** (`per_datagram = true`, for stateless protocols such
//!   as DNS): every datagram is balanced on its own. The session then keeps
//!   one socket per member it used, so replies still find their client.
//! - **PROXY protocol v2** (pool `proxy_protocol = "v2"`): each datagram
//!   to a member is prefixed with a header carrying the client address.
//! - **A member that goes down** (session mode): the session's next
//!   datagram moves it to a live member, or ends it, or it stays, as
//!   `on_member_down` says (`OnMemberDown`).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use switchyard_fasthash::FxHashMap;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use super::dgram::{self, register_readable, RecvBatch, SendQueue};
use super::proxy_protocol;
use super::Lease;
use crate::accesslog;
use crate::balance::AdminState;
use crate::balance::Tried;
use crate::clock::now_ms;
use crate::config::snapshot::{Member, Pool, VServer};
use crate::config::snapshot::{OnMemberDown, ProxyVersion};
use crate::health::passive;
use crate::log;
use crate::source;
use crate::stats;
use crate::turn::Hold;

/// One client's session on one worker.
struct Session {
    /// Where replies leave from: the address the client's first datagram
    /// was sent to, on a wildcard listener (None: the socket's address).
    reply_from: Option<IpAddr>,
    /// Sockets connected to the members this client's datagrams went to:
    /// one in session mode, up to one per member per datagram.
    links: RefCell<Vec<Rc<Link>>>,
    last: Cell<u64>,
    closed: Cell<bool>,
    /// Wakes the reply tasks when the session ends (no timer per datagram).
    ended: Notify,
    /// For the access log line: when the session began (µs since the
    /// epoch), the first member it used, the bytes from the client relayed
    /// to members and those of the replies.
    began_us: u64,
    first_member: Cell<Option<SocketAddr>>,
    bytes_up: Cell<u64>,
    bytes_down: Cell<u64>,
}

/// A socket connected to a member, for one client.
struct Link {
    /// The member and its pool as they were when the link opened: a
    /// reload may reorder, shorten or replace the vserver's pool while the
    /// session lasts, so the link never looks its member up by index.
    /// The member's state (health, admin) is the one the running pool
    /// shares while the member stays in it.
    m: Arc<Member>,
    pool: Arc<Pool>,
    sock: AsyncFd<std::net::UdpSocket>,
    /// Set when the session left this member: its reply task ends, so a
    /// member that comes back cannot answer a client that moved on.
    retired: Cell<bool>,
    retire: Notify,
    _lease: Lease,
}

impl Link {
    fn retire(&self) {
        self.retired.set(true);
        // One task waits on it; a permit is kept if it is busy.
        self.retire.notify_one();
    }

    /// Whether a session may stay on this link's member: healthy (or
    /// forced up) and not disabled. A draining member keeps its sessions:
    /// that is what draining means (LVS's weight 0).
    fn member_serves(&self) -> bool {
        let state = &self.m.state;
        state.admin() != AdminState::Disabled && state.healthy_at(now_ms())
    }

    /// Whether `pool` (the vserver's now) still has this link's member: a
    /// reload that took it out is LVS's "no destination".
    /// Checked per burst: the pool the link opened from answers at once;
    /// only after a reload are the members looked through.
    /// A pool of the cluster changes its members in place (the same pool):
    /// it is always looked through.
    fn member_in(&self, pool: &Pool) -> bool {
        (std::ptr::eq(&*self.pool, pool) && !pool.cluster_members)
            || pool
                .members
                .load()
                .iter()
                .any(|m| Arc::ptr_eq(&m.state, &self.m.state))
    }
}

type Table = Rc<RefCell<FxHashMap<SocketAddr, Rc<Session>>>>;

/// One worker's socket of a udp vserver, and the replies waiting to leave
/// it. Replies are queued by the sessions' tasks and sent together at the
/// end of the worker's turn (one sendmmsg for all the clients served).
struct Listener {
    sock: AsyncFd<std::net::UdpSocket>,
    out: RefCell<SendQueue>,
    /// Wakes the task that sends `out`.
    queued: Rc<Notify>,
}

impl Drop for Listener {
    /// The sender holds the listener weakly (so sessions' replies still go
    /// after a reload removed the vserver, until the sessions end); woken
    /// once it is gone, it ends too.
    fn drop(&mut self) {
        self.queued.notify_one();
    }
}

thread_local! {
    /// Where the reply tasks of this worker read their members' datagrams:
    /// each copies what it read into its listener's queue before it awaits
    /// again, so one batch serves them all.
    static REPLIES: RefCell<RecvBatch> = RefCell::new(RecvBatch::default());
}

/// Serves one worker's socket of the udp vserver on `listen` until the
/// listener is removed (the task is aborted).
pub async fn serve(
    snapshot: Arc<arc_swap::ArcSwap<crate::config::Snapshot>>,
    sock: std::net::UdpSocket,
    listen: SocketAddr,
) {
    // On a wildcard address, each reply must leave from the address its
    // client wrote to: the kernel is asked for it on every datagram.
    let wildcard = listen.ip().is_unspecified();
    if wildcard {
        if let Err(e) = dgram::ask_destinations(&sock, listen.is_ipv6()) {
            log::warn(format_args!(
                "udp {listen}: cannot learn datagrams' destinations, replies leave from the kernel's choice of address: {e}"
            ));
        }
    }
    let sock = match register_readable(sock) {
        Ok(s) => s,
        Err(e) => {
            log::error(format_args!(
                "udp {listen}: cannot register the socket: {e}"
            ));
            return;
        }
    };
    let listener = Rc::new(Listener {
        sock,
        out: RefCell::default(),
        queued: Rc::new(Notify::new()),
    });
    tokio::task::spawn_local(send_replies(
        Rc::downgrade(&listener),
        listener.queued.clone(),
    ));
    let table: Table = Rc::default();
    let mut batch = if wildcard {
        RecvBatch::default().with_destinations()
    } else {
        RecvBatch::default()
    };
    // (client, datagram, the address it was sent to)
    let mut admitted: Vec<(SocketAddr, usize, SocketAddr)> = Vec::with_capacity(batch.capacity());
    // The vserver of the snapshot seen last: looked up again only when a
    // reload published a new one.
    type Cached = (
        u64,
        Option<Arc<VServer>>,
        Option<Arc<crate::shield::AclSet>>,
    );
    let mut cached: Option<Cached> = None;
    loop {
        let mut ready = match listener.sock.readable().await {
            Ok(r) => r,
            Err(e) => {
                log::error(format_args!("udp {listen}: {e}"));
                return;
            }
        };
        let n = match ready.try_io(|s| batch.recv(s.as_raw_fd())) {
            Err(_would_block) => continue,
            Ok(Err(e)) => {
                // ICMP errors of earlier sends surface here: not fatal.
                log::debug(format_args!("udp {listen}: receive: {e}"));
                continue;
            }
            Ok(Ok(n)) => n,
        };
        // A batch not filled emptied the socket's queue: wait for the next
        // datagram's wake-up instead of asking again to hear EAGAIN.
        if n < batch.capacity() {
            ready.clear_ready();
        }
        drop(ready);
        let generation = snapshot.load().generation;
        if cached.as_ref().is_none_or(|(g, _, _)| *g != generation) {
            let snap = snapshot.load();
            cached = Some((
                snap.generation,
                snap.udp_by_listen.get(&listen).cloned(),
                snap.shield.clone(),
            ));
        }
        let Some((_, Some(vs), shield)) = cached.as_ref() else {
            continue;
        };
        admitted.clear();
        for i in 0..n {
            let Some((client, data)) = batch.get(i) else {
                stats::inc(&vs.counters.local().udp_dropped);
                continue;
            };
            let local = SocketAddr::new(batch.destination(i).unwrap_or(listen.ip()), listen.port());
            if shield.is_some() || vs.acl.is_some() {
                let a = crate::shield::admit(
                    shield.as_deref(),
                    vs.acl.as_deref(),
                    client,
                    local,
                    crate::shield::acl::UDP,
                );
                if a != crate::shield::acl::Action::Allow {
                    stats::inc(&vs.counters.local().acl_dropped);
                    continue;
                }
            }
            let vc = vs.counters.local();
            stats::inc(&vc.udp_datagrams_in);
            stats::add(&vc.bytes_in, data.len() as u64);
            admitted.push((client, i, local));
        }
        // Each client's datagrams of the batch together, in their order, so
        // a burst from one client goes to its member in one send.
        admitted.sort_by_key(|&(client, _, _)| client);
        let mut parts: Vec<&[u8]> = Vec::with_capacity(admitted.len());
        for group in admitted.chunk_by(|a, b| a.0 == b.0) {
            parts.clear();
            parts.extend(
                group
                    .iter()
                    .filter_map(|&(_, i, _)| batch.get(i).map(|(_, d)| d)),
            );
            let (client, _, local) = group[0];
            let reply_from = wildcard.then_some(local.ip());
            let relayed = forward(vs, &listener, &table, client, (local, reply_from), &parts);
            let lost = parts.len() - relayed;
            if lost > 0 {
                stats::add(&vs.counters.local().udp_dropped, lost as u64);
            }
        }
    }
}

/// Relays `datagrams`, all from `client`, in order; returns how many
/// went (the rest were dropped).
fn forward(
    vs: &Arc<VServer>,
    listener: &Rc<Listener>,
    table: &Table,
    client: SocketAddr,
    (local, reply_from): (SocketAddr, Option<IpAddr>),
    datagrams: &[&[u8]],
) -> usize {
    let Some(l4) = vs.l4.as_ref() else {
        return 0;
    };
    let Some(pool) = vs.default_pool.clone() else {
        return 0;
    };
    let Some(session) = session_for(vs, table, client, reply_from, l4) else {
        return 0;
    };
    session.last.set(now_ms());
    if !l4.per_datagram
        && !member_still_serves(vs, &pool, table, &session, client, l4.on_member_down)
    {
        return 0;
    }
    let proxy_v2 = matches!(pool.proxy_protocol, Some(ProxyVersion::V2));
    if !l4.per_datagram && !proxy_v2 {
        // Session mode: the whole burst to the session's member.
        let Some(link) = link_for(vs, listener, &session, &pool, client, false) else {
            return 0;
        };
        let sent = send_to_member(vs, &link, datagrams);
        session.count_up(&datagrams[..sent]);
        return sent;
    }
    let mut relayed = 0;
    for &d in datagrams {
        let Some(link) = link_for(vs, listener, &session, &pool, client, l4.per_datagram) else {
            continue;
        };
        let with_header;
        let out = if proxy_v2 {
            let mut h =
                proxy_protocol::encode_v2(client, local, proxy_protocol::Transport::Datagram);
            h.extend_from_slice(d);
            with_header = h;
            &with_header[..]
        } else {
            d
        };
        let sent = send_to_member(vs, &link, &[out]);
        session.count_up(&[d][..sent]);
        relayed += sent;
    }
    relayed
}

/// Session mode, before the session's next datagrams: when its member is
/// down, the link to it is retired and the session moves on
/// (`OnMemberDown::Reassign`: `link_for` picks a live member for these
/// datagrams) or ends (`Close`: false, they are dropped). True when the
/// datagrams may go.
fn member_still_serves(
    vs: &Arc<VServer>,
    pool: &Pool,
    table: &Table,
    session: &Rc<Session>,
    client: SocketAddr,
    on_down: OnMemberDown,
) -> bool {
    let Some(link) = session.links.borrow().first().cloned() else {
        return true;
    };
    if on_down == OnMemberDown::Keep || (link.member_serves() && link.member_in(pool)) {
        return true;
    }
    session.links.borrow_mut().clear();
    link.retire();
    let vc = vs.counters.local();
    let moved = on_down == OnMemberDown::Reassign;
    stats::inc(if moved {
        &vc.udp_sessions_reassigned
    } else {
        &vc.udp_sessions_closed_member_down
    });
    log::debug(format_args!(
        "vserver {:?}: client {client}: member {} is down or gone, session {}",
        vs.name,
        link.m.label(&link.pool.name),
        if moved {
            "moved to a live member"
        } else {
            "ended"
        }
    ));
    if !moved {
        // Logged as a reset: the member's side is gone.
        end(table, client, session, vs, accesslog::l4::End::Reset);
    }
    moved
}

/// `client`'s session, opened if it has none (its replies to leave from
/// `reply_from`); None when the table is full.
fn session_for(
    vs: &Arc<VServer>,
    table: &Table,
    client: SocketAddr,
    reply_from: Option<IpAddr>,
    l4: &crate::config::snapshot::L4Settings,
) -> Option<Rc<Session>> {
    if let Some(s) = table.borrow().get(&client) {
        return Some(s.clone());
    }
    if table.borrow().len() >= l4.max_sessions {
        return None;
    }
    let s = Rc::new(Session {
        reply_from,
        links: RefCell::new(Vec::new()),
        last: Cell::new(now_ms()),
        closed: Cell::new(false),
        ended: Notify::new(),
        began_us: crate::clock::unix_us(),
        first_member: Cell::new(None),
        bytes_up: Cell::new(0),
        bytes_down: Cell::new(0),
    });
    table.borrow_mut().insert(client, s.clone());
    let vc = vs.counters.local();
    stats::inc(&vc.udp_sessions_total);
    stats::inc(&vc.udp_sessions_active);
    tokio::task::spawn_local(expire(
        table.clone(),
        client,
        s.clone(),
        vs.clone(),
        l4.idle_timeout_ms,
    ));
    Some(s)
}

/// The member socket for the next datagram of `session`. Session mode: the
/// member of the first datagram; per datagram: a pick each time, reusing
/// the session's socket to the member picked if there is one. A new socket
/// gets a task relaying its replies.
fn link_for(
    vs: &Arc<VServer>,
    listener: &Rc<Listener>,
    session: &Rc<Session>,
    pool: &Arc<Pool>,
    client: SocketAddr,
    per_datagram: bool,
) -> Option<Rc<Link>> {
    let m = if per_datagram {
        let m = pick(pool, client, Tried::default(), true)?;
        if let Some(l) = session.links.borrow().iter().find(|l| l.m.addr == m.addr) {
            return Some(l.clone());
        }
        m
    } else {
        if let Some(l) = session.links.borrow().first() {
            return Some(l.clone());
        }
        pick(pool, client, Tried::default(), false)?
    };
    let l = Rc::new(open(pool, &m, client.ip())?);
    if session.first_member.get().is_none() {
        session.first_member.set(Some(m.addr));
    }
    session.links.borrow_mut().push(l.clone());
    tokio::task::spawn_local(replies(
        listener.clone(),
        l.clone(),
        session.clone(),
        vs.clone(),
        client,
    ));
    Some(l)
}

/// Sends `datagrams` on `link`; returns how many went. The counters and
/// passive health are those of the link's own member and pool.
fn send_to_member(vs: &VServer, link: &Link, datagrams: &[&[u8]]) -> usize {
    let (m, pool) = (&link.m, &link.pool);
    let mc = m.counters.local();
    match dgram::send_burst(link.sock.get_ref().as_raw_fd(), datagrams) {
        Ok(sent) => {
            stats::add(&mc.requests, sent as u64);
            let bytes: usize = datagrams[..sent].iter().map(|d| d.len()).sum();
            stats::add(&mc.bytes_out, bytes as u64);
            sent
        }
        // The socket's buffer is full: the datagrams are lost, as they would
        // be in a full queue anywhere on the way; the member is not to blame.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => {
            // ECONNREFUSED from an earlier datagram's ICMP: the member's
            // port is closed.
            stats::inc(&mc.connect_failures);
            m.state.connect_failed();
            passive::record(pool, m, true);
            log::debug(format_args!(
                "vserver {:?}: datagram to {}: {e}",
                vs.name,
                m.label(&pool.name)
            ));
            0
        }
    }
}

/// Ends `session` once idle for `idle_ms`, closing its member sockets
/// (unless it was ended before: `OnMemberDown::Close`).
async fn expire(table: Table, client: SocketAddr, s: Rc<Session>, vs: Arc<VServer>, idle_ms: u64) {
    loop {
        if s.closed.get() {
            return;
        }
        let since = now_ms().saturating_sub(s.last.get());
        if since >= idle_ms {
            break;
        }
        tokio::time::sleep(Duration::from_millis(idle_ms - since)).await;
    }
    end(&table, client, &s, &vs, accesslog::l4::End::Idle);
}

/// Ends `s` now: its reply tasks stop, its sockets close, it leaves the
/// table (a new session of the client's that replaced it stays), and its
/// access log line is written.
fn end(
    table: &Table,
    client: SocketAddr,
    s: &Rc<Session>,
    vs: &Arc<VServer>,
    how: accesslog::l4::End,
) {
    if s.closed.replace(true) {
        return;
    }
    s.ended.notify_waiters();
    s.links.borrow_mut().clear();
    let mut t = table.borrow_mut();
    if t.get(&client).is_some_and(|x| Rc::ptr_eq(x, s)) {
        t.remove(&client);
    }
    stats::dec(&vs.counters.local().udp_sessions_active);
    if let Some(log) = &vs.access_log {
        log.write_l4(&s.entry(client, vs, how));
    }
}

impl Session {
    fn count_up(&self, sent: &[&[u8]]) {
        let n: usize = sent.iter().map(|d| d.len()).sum();
        self.bytes_up.set(self.bytes_up.get() + n as u64);
    }

    /// The access log line of the session, which ended now, `how`.
    fn entry<'a>(
        &self,
        client: SocketAddr,
        vs: &'a VServer,
        how: accesslog::l4::End,
    ) -> accesslog::l4::Entry<'a> {
        let now_us = crate::clock::unix_us();
        accesslog::l4::Entry {
            time_us: self.began_us,
            client,
            vserver: &vs.name,
            transport: "udp",
            pool: vs.default_pool.as_deref().map(|p| p.name.as_str()),
            member: self.first_member.get(),
            retries: 0,
            tls: None,
            connect_us: None,
            total_us: now_us.saturating_sub(self.began_us),
            bytes_received: self.bytes_up.get(),
            bytes_sent: self.bytes_down.get(),
            end: how,
            // A udp vserver has no script.
            script: None,
        }
    }
}

/// Queues a member's replies on `link` for `client` until the session
/// ends.
async fn replies(
    listener: Rc<Listener>,
    link: Rc<Link>,
    s: Rc<Session>,
    vs: Arc<VServer>,
    client: SocketAddr,
) {
    let (m, pool) = (link.m.clone(), link.pool.clone());
    loop {
        if s.closed.get() {
            return;
        }
        if link.retired.get() {
            return;
        }
        let mut ready = tokio::select! {
            r = link.sock.readable() => match r {
                Ok(r) => r,
                Err(_) => return,
            },
            _ = s.ended.notified() => return,
            _ = link.retire.notified() => return,
        };
        let got = ready.try_io(|sock| REPLIES.with(|b| b.borrow_mut().recv(sock.as_raw_fd())));
        let n = match got {
            Err(_would_block) => continue,
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                stats::inc(&m.counters.local().connect_failures);
                m.state.connect_failed();
                passive::record(&pool, &m, true);
                log::debug(format_args!(
                    "vserver {:?}: from {}: {e}",
                    vs.name,
                    m.label(&pool.name)
                ));
                continue;
            }
        };
        let drained = REPLIES.with(|b| n < b.borrow().capacity());
        if drained {
            ready.clear_ready();
        }
        drop(ready);
        s.last.set(now_ms());
        m.state.connected();
        passive::record(&pool, &m, false);
        let mut bytes = 0;
        REPLIES.with(|b| {
            let b = b.borrow();
            let mut out = listener.out.borrow_mut();
            for i in 0..n {
                match b.get(i) {
                    Some((_, d)) => {
                        bytes += d.len() as u64;
                        out.push(client, s.reply_from, d, &vs.counters);
                    }
                    None => stats::inc(&vs.counters.local().udp_dropped),
                }
            }
        });
        stats::add(&m.counters.local().bytes_in, bytes);
        s.bytes_down.set(s.bytes_down.get() + bytes);
        listener.queued.notify_one();
    }
}

/// Sends the replies queued on `listener`, all those of one turn of the
/// worker in one go, until the listener is gone: its vserver removed by a
/// reload and the last of its sessions ended.
async fn send_replies(listener: std::rc::Weak<Listener>, queued: Rc<Notify>) {
    let mut hold = Hold::default();
    loop {
        queued.notified().await;
        poll_fn(|cx| {
            if hold.ready(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        let Some(listener) = listener.upgrade() else {
            return;
        };
        let fd = listener.sock.get_ref().as_raw_fd();
        // The socket's send buffer is full (rare: loopback and NICs free a
        // datagram's buffer as it leaves): the rest stays queued, bounded,
        // and goes after a pause. The socket has no write interest
        // registered (`register_readable`), so nothing would wake a wait.
        while listener.out.borrow_mut().send(fd).is_err() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// An unconnected socket bound where the pool's `source_address` says.
fn member_socket(
    pool: &Pool,
    member: SocketAddr,
    client: IpAddr,
) -> std::io::Result<std::net::UdpSocket> {
    let domain = socket2::Domain::for_address(member);
    let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    // Unbound for the kernel's choice: connect(2) binds it.
    source::bind_for((&sock).into(), pool.source_address, (client, member), false)?;
    Ok(sock.into())
}

fn pick(pool: &Pool, client: SocketAddr, tried: Tried, per_datagram: bool) -> Option<Arc<Member>> {
    // A session sticks to its member by itself; hashing the source keeps a
    // client on one member across sessions when the pool asks for it.
    let hash = if per_datagram {
        None
    } else {
        super::tcp::source_hash(pool, client.ip())
    };
    let members = pool.members.load();
    let i = members.balancer.pick(&members.list, None, hash, tried);
    if i.is_none() {
        stats::inc(&pool.counters.local().no_member_available);
    }
    i.map(|i| members[i].clone())
}

/// A socket connected to member `m`, from where the pool's
/// `source_address` says.
fn open(pool: &Arc<Pool>, m: &Arc<Member>, client: IpAddr) -> Option<Link> {
    let mc = m.counters.local();
    let sock = match member_socket(pool, m.addr, client) {
        Ok(s) => s,
        Err(e) => {
            log::warn(format_args!(
                "udp: cannot open a socket toward {} for {client}: {e}",
                m.addr
            ));
            return None;
        }
    };
    if let Err(e) = sock.connect(m.addr) {
        stats::inc(&mc.connect_failures);
        m.state.connect_failed();
        log::debug(format_args!("udp: connect to {}: {e}", m.addr));
        return None;
    }
    let sock = match register_readable(sock) {
        Ok(s) => s,
        Err(e) => {
            log::warn(format_args!(
                "udp: cannot register a socket toward {}: {e}",
                m.addr
            ));
            return None;
        }
    };
    stats::inc(&pool.counters.local().requests);
    Some(Link {
        m: m.clone(),
        pool: pool.clone(),
        sock,
        retired: Cell::new(false),
        retire: Notify::new(),
        _lease: Lease::new(m),
    })
}
