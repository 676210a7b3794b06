//! `udp` vservers end to end: echo sessions with several clients and
//! members, DNS-style per-datagram balancing, session timeout, the session
//! bound, UDP health probes, and a TCP and a UDP vserver on one port.

mod common;
use common::*;

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::thread::JoinHandle;
use std::time::Duration;

/// A UDP member that answers `<name>:<datagram>`; "ping" gets "pong".
struct UdpEcho {
    addr: SocketAddr,
    _t: JoinHandle<()>,
}

fn udp_echo(name: &'static str) -> UdpEcho {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = s.local_addr().expect("addr");
    let t = std::thread::spawn(move || {
        let mut buf = [0u8; 65_535];
        loop {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                return;
            };
            let reply = if &buf[..n] == b"ping" {
                b"pong".to_vec()
            } else {
                let mut r = format!("{name}:").into_bytes();
                r.extend_from_slice(&buf[..n]);
                r
            };
            let _ = s.send_to(&reply, from);
        }
    });
    UdpEcho { addr, _t: t }
}

fn udp_config(listen: SocketAddr, members: &[SocketAddr], l4: &str, pool_extra: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 2\n[[vserver]]\nname = \"dns\"\nprotocol = \"udp\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\
         [vserver.l4]\n{l4}\n[[pool]]\nname = \"p\"\n{pool_extra}\n"
    );
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").expect("client");
    c.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    c
}

/// Sends `msg` and returns the reply (retrying: the first datagrams may
/// race the workers' sockets coming up).
fn ask(c: &UdpSocket, to: SocketAddr, msg: &str) -> String {
    for _ in 0..5 {
        c.send_to(msg.as_bytes(), to).expect("send");
        let mut buf = [0u8; 2048];
        if let Ok((n, from)) = c.recv_from(&mut buf) {
            assert_eq!(from, to, "the reply comes from the vserver's address");
            return String::from_utf8_lossy(&buf[..n]).into_owned();
        }
    }
    panic!("no reply to {msg:?}");
}

/// The harness waits on TCP; a udp vserver has no TCP listener, so wait on
/// the admin listener and then for the first reply.
fn start(cfg: &str) -> Switchyard {
    Switchyard::start(cfg, &[])
}

#[test]
fn sessions_keep_each_client_on_one_member() {
    let a = udp_echo("a");
    let b = udp_echo("b");
    let l = free_addr();
    let sy = start(&udp_config(l, &[a.addr, b.addr], "", ""));
    let mut by_member: HashMap<String, usize> = HashMap::new();
    for i in 0..6 {
        let c = client();
        let mut members = HashSet::new();
        for j in 0..5 {
            let r = ask(&c, l, &format!("c{i}-{j}"));
            let (m, body) = r.split_once(':').expect("name:body");
            assert_eq!(body, format!("c{i}-{j}"));
            members.insert(m.to_string());
        }
        assert_eq!(
            members.len(),
            1,
            "client {i} moved between members: {members:?}"
        );
        *by_member
            .entry(members.into_iter().next().unwrap())
            .or_default() += 1;
    }
    assert_eq!(by_member.len(), 2, "both members serve: {by_member:?}");
    // Counted once sent: a moment after the client has its reply.
    assert!(eventually(Duration::from_secs(2), || sy.stats()
        ["vservers"][0]["udp_datagrams_out"]
        == 30));
    let v = &sy.stats()["vservers"][0];
    assert_eq!(v["udp_sessions_total"], 6, "{v}");
    assert_eq!(v["udp_datagrams_in"], 30, "{v}");
}

#[test]
fn per_datagram_balancing_spreads_one_client() {
    let a = udp_echo("a");
    let b = udp_echo("b");
    let l = free_addr();
    let _sy = start(&udp_config(l, &[a.addr, b.addr], "per_datagram = true", ""));
    let c = client();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for j in 0..20 {
        let r = ask(&c, l, &format!("q{j}"));
        let (m, body) = r.split_once(':').expect("name:body");
        assert_eq!(
            body,
            format!("q{j}"),
            "each answer reaches the client that asked"
        );
        *seen.entry(m.to_string()).or_default() += 1;
    }
    assert_eq!(seen.get("a"), Some(&10), "{seen:?}");
    assert_eq!(seen.get("b"), Some(&10), "{seen:?}");
}

#[test]
fn idle_sessions_end_and_the_table_is_bounded() {
    let a = udp_echo("a");
    let l = free_addr();
    let sy = start(&udp_config(
        l,
        &[a.addr],
        "idle_timeout = \"1500ms\"\nmax_sessions = 2",
        "",
    ));
    let c1 = client();
    ask(&c1, l, "one");
    let v = sy.stats()["vservers"][0].clone();
    assert_eq!(v["udp_sessions_active"], 1, "{v}");
    assert!(eventually(Duration::from_secs(5), || sy.stats()
        ["vservers"][0]["udp_sessions_active"]
        == 0));
    // A bound of 2 per worker: with every client on one worker's socket at
    // most 2 sessions, so some of 8 clients are dropped, and counted.
    let clients: Vec<UdpSocket> = (0..8).map(|_| client()).collect();
    let mut answered = 0;
    for c in &clients {
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        c.send_to(b"x", l).unwrap();
        let mut buf = [0u8; 64];
        if c.recv_from(&mut buf).is_ok() {
            answered += 1;
        }
    }
    assert!(
        answered <= 4,
        "{answered} sessions with max_sessions = 2 and 2 workers"
    );
    assert!(answered >= 1);
    let v = sy.stats()["vservers"][0].clone();
    assert!(v["udp_dropped"].as_u64().unwrap() >= 4, "{v}");
}

#[test]
fn udp_health_probe_takes_a_silent_member_out() {
    let a = udp_echo("a");
    // Bound but never answering: probes time out.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let s_addr = silent.local_addr().unwrap();
    let l = free_addr();
    let sy = start(&udp_config(
        l,
        &[a.addr, s_addr],
        "",
        "[pool.health]\ntype = \"udp\"\nsend = \"ping\"\nexpect = \"pong\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\nfall = 1\nrise = 1\n",
    ));
    assert!(eventually(Duration::from_secs(3), || sy
        .member_stats("p", s_addr)["state"]
        == "down"));
    assert_eq!(sy.member_stats("p", a.addr)["state"], "up");
    for i in 0..6 {
        let c = client();
        assert!(ask(&c, l, &format!("m{i}")).starts_with("a:"));
    }
    drop(silent);
}

#[test]
fn a_tcp_and_a_udp_vserver_share_a_port_but_two_udp_do_not() {
    let d = temp_dir("udpcheck");
    let l = free_addr();
    let base = |second: &str| {
        format!(
            "[[vserver]]\nname = \"t\"\nprotocol = \"tcp\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
             [[vserver]]\nname = \"u\"\nprotocol = \"{second}\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
             [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:9\"\n"
        )
    };
    let check = |text: String| {
        let p = d.join("c.toml");
        std::fs::write(&p, text).unwrap();
        let out = std::process::Command::new(bin())
            .args(["check", "-c"])
            .arg(&p)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = check(base("udp"));
    assert!(ok, "{err}");
    let (ok, err) = check(base("tcp"));
    assert!(!ok);
    assert!(err.contains("already used by vserver \"t\""), "{err}");
    // And it runs: the same port answers TCP and UDP.
    let e = udp_echo("u");
    let cfg = format!(
        "[[vserver]]\nname = \"t\"\nprotocol = \"tcp\"\nlisten = [\"{l}\"]\ndefault_pool = \"tp\"\n\
         [[vserver]]\nname = \"u\"\nprotocol = \"udp\"\nlisten = [\"{l}\"]\ndefault_pool = \"up\"\n\
         [[pool]]\nname = \"tp\"\n[[pool.member]]\naddress = \"127.0.0.1:9\"\n\
         [[pool]]\nname = \"up\"\n[[pool.member]]\naddress = \"{}\"\n",
        e.addr
    );
    let _sy = Switchyard::start(&cfg, &[l]);
    assert_eq!(ask(&client(), l, "hi"), "u:hi");
}

#[test]
fn bursts_from_many_clients_are_relayed_whole_and_counted() {
    // Datagrams queue up while the vserver works: none may be cut, mixed
    // up between clients or lost on loopback, and each is counted once.
    let a = udp_echo("a");
    let l = free_addr();
    let sy = start(&udp_config(l, &[a.addr], "", ""));
    assert_eq!(ask(&client(), l, "warm"), "a:warm");
    let clients: Vec<UdpSocket> = (0..20).map(|_| client()).collect();
    // Rounds of 8 datagrams per client in flight (160 in all: within the
    // sockets' default receive buffers, so the kernel drops none).
    const ROUNDS: usize = 5;
    const WINDOW: usize = 8;
    const EACH: usize = ROUNDS * WINDOW;
    for round in 0..ROUNDS {
        for j in 0..WINDOW {
            for (i, c) in clients.iter().enumerate() {
                let k = round * WINDOW + j;
                c.send_to(format!("c{i}-{k}").as_bytes(), l).expect("send");
            }
        }
        for (i, c) in clients.iter().enumerate() {
            let mut got = HashSet::new();
            let mut buf = [0u8; 2048];
            while got.len() < WINDOW {
                let Ok(n) = c.recv(&mut buf) else {
                    panic!(
                        "client {i}, round {round}: {} of {WINDOW} replies",
                        got.len()
                    );
                };
                let r = String::from_utf8_lossy(&buf[..n]).into_owned();
                let k: usize = r
                    .strip_prefix(&format!("a:c{i}-"))
                    .and_then(|k| k.parse().ok())
                    .unwrap_or_else(|| panic!("client {i} got {r:?}"));
                assert!(k / WINDOW == round, "client {i}: {r:?} in round {round}");
                got.insert(k);
            }
        }
    }
    // The largest datagrams pass whole, in both directions.
    let big: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let c = client();
    c.send_to(&big, l).expect("send big");
    let mut buf = vec![0u8; 65_535];
    let n = c.recv(&mut buf).expect("big reply");
    assert_eq!(&buf[..2], b"a:");
    assert_eq!(&buf[2..n], &big[..], "60,000 bytes back intact");
    let total = 1 + 20 * EACH as u64 + 1;
    assert!(
        eventually(Duration::from_secs(2), || sy.stats()["vservers"][0]
            ["udp_datagrams_out"]
            == total),
        "{}",
        sy.stats()["vservers"][0]
    );
    let v = &sy.stats()["vservers"][0];
    assert_eq!(v["udp_datagrams_in"], total, "{v}");
    assert_eq!(v["udp_dropped"], 0, "{v}");
}

/// A udp vserver on the wildcard address answers each client from the
/// address the client wrote to: replies from another local address would
/// be dropped by clients that check (`ask` asserts the reply's source).
#[test]
fn a_wildcard_vserver_answers_from_the_address_each_client_wrote_to() {
    let a = udp_echo("a");
    let port = free_port();
    let listen: SocketAddr = ([0, 0, 0, 0], port).into();
    let sy = start(&udp_config(listen, &[a.addr], "", ""));
    for last in [2u8, 3, 4] {
        let to: SocketAddr = ([127, 0, 0, last], port).into();
        let c = client();
        for j in 0..3 {
            assert_eq!(ask(&c, to, &format!("q{j}")), format!("a:q{j}"));
        }
    }
    assert!(eventually(Duration::from_secs(2), || sy.stats()
        ["vservers"][0]["udp_datagrams_out"]
        == 9));
}

/// A reload that removes a udp vserver stops it taking new datagrams, but
/// a reply its member sends afterwards still reaches the client: the
/// session ends by its idle timeout, not by the reload.
#[test]
fn replies_in_flight_survive_a_reload_that_removes_the_vserver() {
    let slow = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let member = slow.local_addr().expect("addr");
    let _t = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = slow.recv_from(&mut buf) {
            std::thread::sleep(Duration::from_millis(800));
            let mut reply = b"late:".to_vec();
            reply.extend_from_slice(&buf[..n]);
            let _ = slow.send_to(&reply, from);
        }
    });
    let (l, l2) = (free_addr(), free_addr());
    let sy = start(&udp_config(l, &[member], "", ""));
    let c = client();
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // Wait until the vserver relays (its first datagrams may race the
    // workers' sockets), then send the one whose answer is in flight.
    assert!(eventually(Duration::from_secs(3), || {
        c.send_to(b"warm", l).expect("send");
        sy.stats()["vservers"][0]["udp_datagrams_in"]
            .as_u64()
            .unwrap_or(0)
            > 0
    }));
    let mut buf = [0u8; 64];
    let (n, _) = c.recv_from(&mut buf).expect("the warm-up answer");
    assert!(buf[..n].starts_with(b"late:"));
    while c.set_read_timeout(Some(Duration::from_millis(900))).is_ok()
        && c.recv_from(&mut buf).is_ok()
    {}
    c.send_to(b"q", l).expect("send");
    std::thread::sleep(Duration::from_millis(200));
    let (ok, out) = sy.reload_with(&udp_config(l2, &[member], "", ""));
    assert!(ok, "reload: {out}");
    c.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let (n, from) = c
        .recv_from(&mut buf)
        .expect("the answer sent after the reload");
    assert_eq!((&buf[..n], from), (&b"late:q"[..], l));
}

/// A UDP echo member (as `udp_echo`) that can be killed: its socket is
/// closed, so datagrams to it meet a closed port.
struct KillableEcho {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    t: Option<JoinHandle<()>>,
}

impl KillableEcho {
    fn start(name: &'static str) -> KillableEcho {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        let addr = s.local_addr().expect("addr");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((n, from)) = s.recv_from(&mut buf) else {
                    continue;
                };
                let reply = if &buf[..n] == b"ping" {
                    b"pong".to_vec()
                } else {
                    [format!("{name}:").as_bytes(), &buf[..n]].concat()
                };
                let _ = s.send_to(&reply, from);
            }
        });
        KillableEcho {
            addr,
            stop,
            t: Some(t),
        }
    }

    fn kill(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.t.take() {
            t.join().expect("echo thread");
        }
    }
}

/// One datagram and its reply within `wait`, if any.
fn try_ask(c: &UdpSocket, to: SocketAddr, msg: &str, wait: Duration) -> Option<String> {
    c.set_read_timeout(Some(wait)).expect("timeout");
    c.send_to(msg.as_bytes(), to).expect("send");
    let mut buf = [0u8; 2048];
    let (n, _) = c.recv_from(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Issue 30: a session stayed on its member after the member was marked
/// down, so a client that keeps its port (a resolver, a VPN or QUIC
/// client) sent into a dead member until it went quiet. A member is
/// killed mid-session and its health check marks it down; the client goes
/// on from the same port, and per `on_member_down`:
/// - "reassign" (the default): its very next datagram is answered by the
///   other member, in the same session;
/// - "close": that datagram ends the session and is dropped, and the next
///   one opens a new session on the other member;
/// - "keep": the session stays with the dead member (LVS's default).
#[test]
fn a_session_leaves_a_member_that_went_down() {
    let health = "[pool.health]\ntype = \"udp\"\nsend = \"ping\"\nexpect = \"pong\"\n\
                  interval = \"100ms\"\ntimeout = \"200ms\"\nfall = 1\nrise = 1\n";
    for mode in [
        "",
        "on_member_down = \"close\"",
        "on_member_down = \"keep\"",
    ] {
        let mut members = [KillableEcho::start("a"), KillableEcho::start("b")];
        let l = free_addr();
        let addrs = [members[0].addr, members[1].addr];
        let sy = start(&udp_config(l, &addrs, mode, health));
        assert!(eventually(Duration::from_secs(3), || addrs
            .iter()
            .all(|m| sy.member_stats("p", *m)["state"] == "up")));
        let c = client();
        let first = ask(&c, l, "before");
        let (name, _) = first.split_once(':').expect("name:body");
        let (dead, other) = if name == "a" { (0, "b") } else { (1, "a") };
        assert_eq!(ask(&c, l, "again"), format!("{name}:again"), "{mode}");
        members[dead].kill();
        assert!(
            eventually(Duration::from_secs(3), || sy.member_stats("p", addrs[dead])
                ["state"]
                == "down"),
            "{mode}: the killed member is not marked down"
        );
        let v = || sy.stats()["vservers"][0].clone();
        let short = Duration::from_millis(500);
        match mode {
            "" => {
                let r = try_ask(&c, l, "after", Duration::from_secs(2));
                assert_eq!(r.as_deref(), Some(&*format!("{other}:after")));
                assert_eq!(ask(&c, l, "later"), format!("{other}:later"));
                assert_eq!(v()["udp_sessions_reassigned"], 1, "{}", v());
                assert_eq!(v()["udp_sessions_total"], 1, "{}", v());
            }
            "on_member_down = \"close\"" => {
                assert_eq!(try_ask(&c, l, "lost", short), None, "dropped");
                let r = try_ask(&c, l, "after", Duration::from_secs(2));
                assert_eq!(r.as_deref(), Some(&*format!("{other}:after")));
                assert_eq!(v()["udp_sessions_closed_member_down"], 1, "{}", v());
                assert_eq!(v()["udp_sessions_total"], 2, "{}", v());
            }
            _ => {
                assert_eq!(try_ask(&c, l, "into the void", short), None);
                assert_eq!(v()["udp_sessions_reassigned"], 0, "{}", v());
                assert_eq!(v()["udp_sessions_total"], 1, "{}", v());
            }
        }
    }
}

/// A reload that takes a session's member out of the pool is the same as
/// the member going down (LVS's "no destination"): the session moves to a
/// member that is still there. The session held its member by its index in
/// the pool, so the next datagram was sent by an index into the new,
/// shorter pool.
#[test]
fn a_session_leaves_a_member_a_reload_removed() {
    let members = [KillableEcho::start("a"), KillableEcho::start("b")];
    let addrs = [members[0].addr, members[1].addr];
    let l = free_addr();
    let sy = start(&udp_config(l, &addrs, "", ""));
    // Clients until one is on the second member (index 1).
    let c = (0..20)
        .map(|_| client())
        .find(|c| ask(c, l, "where").starts_with("b:"))
        .expect("a client on b");
    let (ok, out) = sy.reload_with(&udp_config(l, &addrs[..1], "", ""));
    assert!(ok, "reload: {out}");
    let r = try_ask(&c, l, "after", Duration::from_secs(2));
    assert_eq!(r.as_deref(), Some("a:after"));
    assert_eq!(ask(&client(), l, "new"), "a:new");
    let v = sy.stats()["vservers"][0].clone();
    assert_eq!(v["udp_sessions_reassigned"], 1, "{v}");
    assert!(!sy.log().contains("panicked"), "{}", sy.log());
}
