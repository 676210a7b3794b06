//! Where a connection to a member comes from (a pool's `source_address`):
//! the kernel's choice, a local address, or the client's own address.
//!
//! The client's address needs IP_TRANSPARENT (CAP_NET_ADMIN), which lets a
//! socket bind an address that is not this host's. The member's answers,
//! addressed to the client, must then be routed back through this host and
//! delivered locally (policy routing; docs/l4.md, "Transparent source"),
//! where the kernel hands them to the socket bound to that address.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};

use crate::config::l4::SourceAddress;

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

/// Binds `sock` (not yet connected) to `ip`, any port. `stream`: a TCP
/// socket, whose port is then left to connect(2), which picks one free
/// for the whole address pair (IP_BIND_ADDRESS_NO_PORT) instead of one
/// free for every destination, so a source address is not limited to one
/// ephemeral port range across all members.
pub fn bind(sock: SockRef<'_>, ip: IpAddr, transparent: bool, stream: bool) -> io::Result<()> {
    if transparent {
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

/// A TCP connection to `addr` from `source` (a local address), or from
/// the kernel's choice when None.
pub async fn connect_tcp(addr: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let Some(ip) = source else {
        return TcpStream::connect(addr).await;
    };
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    bind(SockRef::from(&sock), ip, false, true)?;
    sock.connect(addr).await
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
