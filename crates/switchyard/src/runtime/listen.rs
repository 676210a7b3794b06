//! Listening sockets: one per worker and address, sharing the port through
//! SO_REUSEPORT so the kernel balances new connections (and, for UDP, the
//! datagrams of each client address) across workers; QUIC's datagrams go
//! by connection ID instead (`proxy::quic_steer`).

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::snapshot::SocketOpts;
use crate::config::Snapshot;
use crate::proxy::quic_steer::{self, Steer};

/// What a worker listens on: a TCP address (HTTP and tcp vservers) or a
/// UDP one (udp vservers); both may share a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bound {
    Tcp(SocketAddr),
    Udp(SocketAddr),
    /// QUIC for an HTTP vserver's `[vserver.http3]`: a socket per worker,
    /// in a SO_REUSEPORT group of their own whose BPF program steers each
    /// datagram to the worker its connection ID names
    /// (`proxy::quic_steer`).
    Quic(SocketAddr),
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
    /// A QUIC socket and its place in the group.
    Quic(std::net::UdpSocket, Steer),
}

/// Everything `snap` listens on.
pub fn wanted(snap: &Snapshot) -> Vec<Bound> {
    let mut v: Vec<Bound> = snap.listen_addrs().into_iter().map(Bound::Tcp).collect();
    v.extend(snap.udp_addrs().into_iter().map(Bound::Udp));
    v.extend(snap.quic_addrs().into_iter().map(Bound::Quic));
    v
}

/// Binds the sockets of `b` for `workers` workers (one each, in worker
/// order), with the options of its vserver.
pub fn bind_group(snap: &Snapshot, b: Bound, workers: usize) -> io::Result<Vec<Socket2>> {
    match b {
        Bound::Tcp(a) => {
            let opts = snap
                .vserver_for(&a)
                .map(|v| v.socket.clone())
                .unwrap_or_default();
            (0..workers)
                .map(|_| bind_with(a, &opts).map(Socket2::Tcp))
                .collect()
        }
        Bound::Udp(a) => (0..workers)
            .map(|_| bind_udp(a).map(Socket2::Udp))
            .collect(),
        Bound::Quic(a) => bind_quic(a, workers),
    }
}

/// A QUIC address's group: a socket per worker, bound in worker order so
/// that socket i is index i in the kernel's group (it appends each socket
/// as it binds), and the program that steers by connection ID on it.
fn bind_quic(addr: SocketAddr, workers: usize) -> io::Result<Vec<Socket2>> {
    let of = u32::try_from(workers).map_err(|_| io::Error::other("too many workers"))?;
    if workers > 1 {
        // Anything already on the address would sit in the group before
        // our sockets and shift every index: an earlier QUIC listener on
        // it whose connections still finish, or another process. The
        // group's sockets have SO_REUSEPORT only, so a probe with
        // SO_REUSEADDR only binds where no such group is, and where other
        // sockets are that could share the port anyway (a `udp` vserver's
        // on a more specific address of the same port: SO_REUSEADDR on
        // both), which a probe without either flag would take for one.
        let probe = udp_socket(addr)?;
        probe.set_reuse_address(true)?;
        probe.bind(&addr.into()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e}: the port is already bound (by another process, or by the connections of an earlier QUIC listener on it still closing); steering QUIC to its workers needs a port group of its own"),
            )
        })?;
    }
    let mut group: Vec<(std::net::UdpSocket, Steer)> = Vec::with_capacity(workers);
    for index in 0..of {
        let s = udp_socket(addr)?;
        s.set_reuse_port(true)?;
        s.bind(&addr.into())?;
        s.set_nonblocking(true)?;
        group.push((s.into(), Steer { index, of }));
    }
    // On any socket of the group: the program is the group's. Without it
    // (a kernel older than 4.5, a seccomp policy) QUIC still serves, on
    // the kernel's hash: a client that changes address may lose its
    // connection, which is what one worker per port would avoid.
    if let Some((first, _)) = group.first().filter(|_| of > 1) {
        if let Err(e) = quic_steer::attach(first, of) {
            crate::log::warn(format_args!(
                "quic {addr}: cannot attach the program that steers QUIC by connection ID ({e}): clients that change address may lose their connections; workers = 1 avoids it"
            ));
        }
    }
    Ok(group
        .into_iter()
        .map(|(s, steer)| Socket2::Quic(s, steer))
        .collect())
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
    let s = udp_socket(addr)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// A UDP socket for `addr`, not bound yet.
fn udp_socket(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    // Bursts of datagrams wait here while the worker is busy.
    let _ = s.set_recv_buffer_size(4 << 20);
    Ok(s)
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
