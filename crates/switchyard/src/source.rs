//! Where a connection to a member comes from (a pool's `source_address`):
//! the kernel's choice, a local address, or the client's own address.
//!
//! The client's address needs IP_TRANSPARENT (CAP_NET_ADMIN), which lets a
//! socket bind an address that is not this host's. The member's answers,
//! addressed to the client, must then be routed back through this host and
//! delivered locally (policy routing; docs/l4.md, "Source address toward members"),
//! where the kernel hands them to the socket bound to that address.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};

/// Where a pool's connections to its members come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceAddress {
    /// This local address; the kernel picks the port.
    Local(IpAddr),
    /// The client's own address (IP_TRANSPARENT): the member sees the
    /// client, as if there were no proxy. Its answers must be routed back
    /// through this host (docs/l4.md, "Source address toward members"). tcp and udp
    /// vservers only: an HTTP member connection carries many clients.
    Client,
}

impl SourceAddress {
    /// The local address, for connections that cannot take the client's.
    pub fn local(self) -> Option<IpAddr> {
        match self {
            SourceAddress::Local(ip) => Some(ip),
            SourceAddress::Client => None,
        }
    }
}

/// The address a connection from `client` to `member` is bound to before
/// its connect; None for the kernel's choice. A client of the other
/// address family than the member's cannot lend its address: that
/// connection comes from the kernel's choice.
pub fn address(
    source: Option<SourceAddress>,
    client: IpAddr,
    member: SocketAddr,
) -> Option<IpAddr> {
    match source? {
        SourceAddress::Local(ip) => Some(ip),
        SourceAddress::Client => {
            let client = match client {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, IpAddr::V4),
                v4 => v4,
            };
            (client.is_ipv4() == member.is_ipv4()).then_some(client)
        }
    }
}

/// Binds `sock` (not yet connected) where `source` says for a connection
/// from `client` to `member`; nothing for the kernel's choice. `stream`: a
/// TCP socket, whose port is then left to connect(2), which picks one free
/// for the whole address pair (IP_BIND_ADDRESS_NO_PORT) instead of one
/// free for every destination, so a source address is not limited to one
/// ephemeral port range across all members.
pub fn bind_for(
    sock: SockRef<'_>,
    source: Option<SourceAddress>,
    (client, member): (IpAddr, SocketAddr),
    stream: bool,
) -> io::Result<()> {
    let Some(ip) = address(source, client, member) else {
        return Ok(());
    };
    if source == Some(SourceAddress::Client) {
        set_transparent(&sock, ip.is_ipv6()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("source_address = \"client\" needs IP_TRANSPARENT (CAP_NET_ADMIN): {e}"),
            )
        })?;
    }
    if stream {
        // Best effort: without it the bind picks the port, as before.
        let _ = setsockopt_int(&sock, libc::SOL_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1);
    }
    sock.bind(&SocketAddr::new(ip, 0).into())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot bind source address {ip}: {e}")))
}

/// A TCP socket for a connection from `client` to `member`, bound where
/// `source` says.
pub fn tcp_socket(
    source: Option<SourceAddress>,
    (client, member): (IpAddr, SocketAddr),
) -> io::Result<TcpSocket> {
    let sock = if member.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    bind_for(SockRef::from(&sock), source, (client, member), true)?;
    Ok(sock)
}

/// A TCP connection to `addr` from `source` (a local address), or from
/// the kernel's choice when None.
pub async fn connect_tcp(addr: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    match source {
        None => TcpStream::connect(addr).await,
        Some(ip) => {
            let local = Some(SourceAddress::Local(ip));
            tcp_socket(local, (ip, addr))?.connect(addr).await
        }
    }
}

/// Whether this process may set IP_TRANSPARENT (CAP_NET_ADMIN), which
/// `source_address = "client"` needs: tried on a throwaway socket.
pub fn transparent_allowed() -> bool {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
        .is_ok_and(|s| set_transparent(&SockRef::from(&s), false).is_ok())
}

fn set_transparent(sock: &SockRef<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(sock, libc::SOL_IPV6, libc::IPV6_TRANSPARENT, 1)
    } else {
        setsockopt_int(sock, libc::SOL_IP, libc::IP_TRANSPARENT, 1)
    }
}

fn setsockopt_int(sock: &SockRef<'_>, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: a valid descriptor and an int option of the size given.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_lends_its_address_only_within_its_family() {
        let m4: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let m6: SocketAddr = "[2001:db8::1]:80".parse().unwrap();
        let c4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        let c6: IpAddr = "2001:db8::7".parse().unwrap();
        let client = Some(SourceAddress::Client);
        assert_eq!(address(client, c4, m4), Some(c4));
        assert_eq!(address(client, mapped, m4), Some(c4));
        assert_eq!(address(client, c6, m6), Some(c6));
        assert_eq!(address(client, c6, m4), None);
        assert_eq!(address(client, c4, m6), None);
        let local: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(
            address(Some(SourceAddress::Local(local)), c6, m4),
            Some(local)
        );
        assert_eq!(address(None, c4, m4), None);
    }
}
