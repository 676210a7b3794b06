//! Listening sockets: one per worker and address, sharing the port through
//! SO_REUSEPORT so the kernel balances new connections across workers.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Accept backlog; the kernel caps it at net.core.somaxconn.
const BACKLOG: i32 = 4096;

pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nodelay(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}
