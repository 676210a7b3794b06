//! Listening sockets: one per worker and address, sharing the port through
//! SO_REUSEPORT so the kernel balances new connections (and, for UDP, the
//! datagrams of each client address) across workers.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::snapshot::SocketOpts;
use crate::config::Snapshot;

/// What a worker listens on: a TCP address (HTTP and tcp vservers) or a
/// UDP one (udp vservers); both may share a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bound {
    Tcp(SocketAddr),
    Udp(SocketAddr),
    /// QUIC for an HTTP vserver's `[vserver.http3]`: one socket, on the
    /// first worker only. A QUIC connection is named by its connection
    /// IDs, not its addresses: with a socket per worker, SO_REUSEPORT's
    /// hash of the 4-tuple would send a client that changed address (a
    /// NAT rebinding, a phone changing networks) to a worker that does not
    /// know its connection. Steering by connection ID (a BPF program on
    /// the port group) would lift this; until then one worker serves
    /// QUIC.
    Quic(SocketAddr),
}

impl Bound {
    /// Whether worker `id` listens on it.
    pub fn on_worker(&self, id: usize) -> bool {
        !matches!(self, Bound::Quic(_)) || id == 0
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Tcp(a) => write!(f, "{a}"),
            Bound::Udp(a) => write!(f, "udp {a}"),
            Bound::Quic(a) => write!(f, "quic {a}"),
        }
    }
}

/// One worker's socket for a `Bound`.
pub enum Socket2 {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

/// Everything `snap` listens on.
pub fn wanted(snap: &Snapshot) -> Vec<Bound> {
    let mut v: Vec<Bound> = snap.listen_addrs().into_iter().map(Bound::Tcp).collect();
    v.extend(snap.udp_addrs().into_iter().map(Bound::Udp));
    v.extend(snap.quic_addrs().into_iter().map(Bound::Quic));
    v
}

/// Binds one worker's socket for `b` with the options of its vserver.
pub fn bind_for(snap: &Snapshot, b: Bound) -> io::Result<Socket2> {
    match b {
        Bound::Tcp(a) => {
            let opts = snap
                .vserver_for(&a)
                .map(|v| v.socket.clone())
                .unwrap_or_default();
            bind_with(a, &opts).map(Socket2::Tcp)
        }
        Bound::Udp(a) | Bound::Quic(a) => bind_udp(a).map(Socket2::Udp),
    }
}

pub fn bind_with(addr: SocketAddr, o: &SocketOpts) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    // Accepted sockets inherit these.
    s.set_nodelay(o.nodelay)?;
    if let Some(ms) = o.keepalive_ms {
        let ka = socket2::TcpKeepalive::new()
            .with_time(std::time::Duration::from_millis(ms))
            .with_interval(std::time::Duration::from_millis(ms.div_ceil(3).max(1000)));
        s.set_tcp_keepalive(&ka)?;
    }
    if o.freebind {
        if addr.is_ipv6() {
            s.set_freebind_ipv6(true)?;
        } else {
            s.set_freebind(true)?;
        }
    }
    if o.defer_accept_s > 0 {
        setsockopt_int(
            &s,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            o.defer_accept_s as i32,
        )?;
    }
    s.bind(&addr.into())?;
    if o.fast_open > 0 {
        setsockopt_int(
            &s,
            libc::IPPROTO_TCP,
            libc::TCP_FASTOPEN,
            o.fast_open as i32,
        )?;
    }
    s.listen(o.backlog)?;
    if o.smart_accept {
        // After listen(2): it resets the socket's ACK state. Accepted
        // sockets inherit delayed-ACK mode from here.
        setsockopt_int(&s, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 0)?;
    }
    s.set_nonblocking(true)?;
    Ok(s.into())
}

pub fn bind_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    // Bursts of datagrams wait here while the worker is busy.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn setsockopt_int(s: &Socket, level: i32, name: i32, v: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor and a pointer to an int of the
    // length given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
