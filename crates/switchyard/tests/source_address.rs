//! Where connections to members come from (a pool's `source_address`), end
//! to end through the real binary: a local address for HTTP, tcp and udp
//! vservers on loopback, and the client's own address (IP_TRANSPARENT) for
//! tcp and udp vservers in network namespaces the test makes, where the
//! members' answers are routed back through the proxy's namespace.
//!
//! Every member here answers with the address it saw the connection or
//! datagram come from.

mod common;
use common::netns::{have, in_netns, is_root, Lab};
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Serves `n` TCP connections on `l`, each answered with its peer's IP
/// (as an HTTP response when `http`), then returns; gives up after 20 s.
fn tell_peer_tcp(l: TcpListener, n: usize, http: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        l.set_nonblocking(true).expect("nonblocking");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut served = 0;
        while served < n && Instant::now() < deadline {
            let (mut s, peer) = match l.accept() {
                Ok(x) => x,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            };
            served += 1;
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let ip = peer.ip().to_string();
            if http {
                // The request head, then one answer and the close.
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ip}",
                    ip.len()
                );
            } else {
                let _ = s.write_all(ip.as_bytes());
            }
        }
    })
}

/// Answers up to `n` datagrams on `s` with the sender's IP; gives up after
/// 20 s.
fn tell_peer_udp(s: UdpSocket, n: usize) -> JoinHandle<()> {
    std::thread::spawn(move || {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 1500];
        let mut answered = 0;
        while answered < n && Instant::now() < deadline {
            if let Ok((_, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(from.ip().to_string().as_bytes(), from);
                answered += 1;
            }
        }
    })
}

/// What a member said over TCP through `proxy` (read to its close).
fn tcp_answer(proxy: SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(&proxy, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let _ = s.write_all(b"hello");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// What a member answered to a datagram sent through `proxy` (tried a few
/// times: the first datagram may race the proxy's start).
fn udp_answer(proxy: SocketAddr, bind: &str) -> String {
    let s = UdpSocket::bind(bind).expect("bind client");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut buf = [0u8; 1500];
    for _ in 0..10 {
        let _ = s.send_to(b"hello", proxy);
        if let Ok((k, _)) = s.recv_from(&mut buf) {
            return String::from_utf8_lossy(&buf[..k]).to_string();
        }
    }
    String::new()
}

fn config(proto: &str, listen: SocketAddr, member: SocketAddr, source: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"v\"\nprotocol = \"{proto}\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\
         [[pool]]\nname = \"p\"\nsource_address = \"{source}\"\nidle_per_member = 0\n[[pool.member]]\naddress = \"{member}\"\n"
    )
}

#[test]
fn a_local_source_address_is_what_members_see_on_every_protocol() {
    // HTTP: each request on a new member connection (idle_per_member = 0).
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let member = l.local_addr().expect("addr");
    let t = tell_peer_tcp(l, 2, true);
    let listen = free_addr();
    let sy = Switchyard::start(&config("http", listen, member, "127.0.0.9"), &[listen]);
    for _ in 0..2 {
        let r = get(listen, "/");
        assert_eq!(r.status, 200, "{}", sy.log());
        assert_eq!(r.body_text(), "127.0.0.9", "the member saw another source");
    }
    drop(sy);
    let _ = t.join();

    // tcp
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let member = l.local_addr().expect("addr");
    // Two connections: the start's wait for the listener is relayed too.
    let t = tell_peer_tcp(l, 2, false);
    let listen = free_addr();
    let sy = Switchyard::start(&config("tcp", listen, member, "127.0.0.10"), &[listen]);
    assert_eq!(tcp_answer(listen), "127.0.0.10", "{}", sy.log());
    drop(sy);
    let _ = t.join();

    // udp
    let u = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let member = u.local_addr().expect("addr");
    let t = tell_peer_udp(u, 1);
    let listen = free_addr();
    let sy = Switchyard::start(&config("udp", listen, member, "127.0.0.11"), &[]);
    assert_eq!(
        udp_answer(listen, "127.0.0.1:0"),
        "127.0.0.11",
        "{}",
        sy.log()
    );
    drop(sy);
    let _ = t.join();
}

/// client (10.81.1.2) -- (10.81.1.1) proxy (10.81.2.1) -- (10.81.2.2)
/// member, whose default route is the proxy. In the proxy's namespace,
/// whatever comes from the member's side is delivered locally (policy
/// routing, as a TPROXY setup's rule does for its marked packets), so the
/// member's answers to the client's address reach the proxy's socket bound
/// to that address.
#[test]
fn with_source_client_the_member_sees_the_client_and_answers_through_the_proxy() {
    if !is_root() || !have("ip") {
        eprintln!("skipped: needs root and ip(8)");
        return;
    }
    let mut lab = Lab::new(&["c", "p", "m"]);
    lab.veth("c", "eth0", "p", "pc");
    lab.veth("p", "pm", "m", "eth0");
    assert!(lab.ip("c", &["addr", "add", "10.81.1.2/24", "dev", "eth0"]));
    assert!(lab.ip("p", &["addr", "add", "10.81.1.1/24", "dev", "pc"]));
    assert!(lab.ip("p", &["addr", "add", "10.81.2.1/24", "dev", "pm"]));
    assert!(lab.ip("m", &["addr", "add", "10.81.2.2/24", "dev", "eth0"]));
    assert!(lab.ip("m", &["route", "add", "default", "via", "10.81.2.1"]));
    assert!(lab.ip("p", &["rule", "add", "iif", "pm", "lookup", "100"]));
    assert!(lab.ip(
        "p",
        &[
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            "100"
        ]
    ));

    let members = in_netns(&lab.ns("m"), || {
        let l = TcpListener::bind("10.81.2.2:7000").expect("bind tcp member");
        let u = UdpSocket::bind("10.81.2.2:7001").expect("bind udp member");
        (tell_peer_tcp(l, 2, false), tell_peer_udp(u, 1))
    })
    .join()
    .expect("members");

    let dir = temp_dir("source-client");
    let tcp_listen: SocketAddr = "10.81.1.1:8000".parse().expect("addr");
    let udp_listen: SocketAddr = "10.81.1.1:8001".parse().expect("addr");
    let cfg = format!(
        "{}{}",
        config(
            "tcp",
            tcp_listen,
            "10.81.2.2:7000".parse().expect("addr"),
            "client"
        ),
        config(
            "udp",
            udp_listen,
            "10.81.2.2:7001".parse().expect("addr"),
            "client"
        )
        .replace("[global]\nworkers = 1\n", "")
        .replace("name = \"v\"", "name = \"u\"")
        .replace("name = \"p\"", "name = \"q\"")
        .replace("default_pool = \"p\"", "default_pool = \"q\"")
    );
    let path = dir.join("proxy.toml");
    std::fs::write(&path, &cfg).expect("write config");
    let p = path.display().to_string();
    let log = dir.join("proxy.log");
    lab.spawn("p", &[bin(), "run", "-c", &p], &log);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    let cns = lab.ns("c");
    // The wait for the proxy's start makes a connection of its own, which
    // is relayed and answered too (the member serves two).
    let tcp = in_netns(&cns, move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&tcp_listen, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return String::new();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tcp_answer(tcp_listen)
    })
    .join()
    .expect("tcp client");
    let udp = in_netns(&cns, move || udp_answer(udp_listen, "10.81.1.2:0"))
        .join()
        .expect("udp client");
    assert_eq!(
        tcp,
        "10.81.1.2",
        "tcp: the member saw another source\n{}",
        logs()
    );
    assert_eq!(
        udp,
        "10.81.1.2",
        "udp: the member saw another source\n{}",
        logs()
    );
    drop(lab);
    let _ = members.0.join();
    let _ = members.1.join();
}

#[test]
fn health_checks_come_from_the_pools_source_address() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let member = l.local_addr().expect("addr");
    let listen = free_addr();
    let cfg = config("http", listen, member, "127.0.0.12").replace(
        "[[pool.member]]",
        "[pool.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"1s\"\n[[pool.member]]",
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    l.set_nonblocking(true).expect("nonblocking");
    let mut peers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while peers.len() < 2 && Instant::now() < deadline {
        match l.accept() {
            Ok((_, peer)) => peers.push(peer.ip().to_string()),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    assert_eq!(peers, ["127.0.0.12", "127.0.0.12"], "{}", sy.log());
}
