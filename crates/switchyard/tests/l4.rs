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
        // More connections through the same worker: spliced ones reuse
        // the worker's spare pipes, and nothing leaks between relays.
        for k in 1..=6u64 {
            let n = k * 100_000;
            let (sent, got, back) = push_through(l, n);
            assert_eq!((sent, back), (got, n), "{mode}: connection {k}");
        }
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

/// A member's last bytes and its FIN, which reach the proxy together, go
/// on to the client in one segment (`MSG_MORE`, then the shutdown), as
/// they would from the member itself: the client of a one-answer
/// connection gets as many segments through the relay as directly.
#[test]
fn the_last_bytes_and_the_fin_reach_the_client_in_one_segment() {
    // A member that speaks first: "hello" and its FIN in one segment.
    let ml = TcpListener::bind("127.0.0.1:0").unwrap();
    let maddr = ml.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in ml.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                let hello = b"hello";
                // SAFETY: a valid socket and a buffer of the length given.
                let n = unsafe {
                    libc::send(
                        s.as_raw_fd(),
                        hello.as_ptr().cast(),
                        hello.len(),
                        libc::MSG_MORE | libc::MSG_NOSIGNAL,
                    )
                };
                assert_eq!(n, hello.len() as isize);
                let _ = s.shutdown(Shutdown::Write);
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest);
            });
        }
    });
    let fetch = |addr: SocketAddr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"hello");
        segments_in(&c)
    };
    let direct = fetch(maddr);
    let l = free_addr();
    let _sy = Switchyard::start(&tcp_config(l, &[maddr], "", ""), &[l]);
    for _ in 0..3 {
        // Before: the bytes, then the FIN in a segment of its own.
        assert_eq!(
            fetch(l),
            direct,
            "segments to the client through the relay (directly: {direct})"
        );
    }
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

/// A TCP member that records what each connection sent (until EOF) and
/// answers nothing.
struct Recorder {
    addr: SocketAddr,
    got: mpsc::Receiver<Vec<u8>>,
    accepted: Arc<AtomicUsize>,
}

fn recorder() -> Recorder {
    recording_member(None)
}

/// A TCP member that counts connections, writes `greeting` on each at
/// once if given, and records what each sent (until EOF).
fn recording_member(greeting: Option<&'static [u8]>) -> Recorder {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            n.fetch_add(1, Ordering::Relaxed);
            let tx = tx.clone();
            std::thread::spawn(move || {
                if let Some(g) = greeting {
                    let _ = s.write_all(g);
                }
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut all = Vec::new();
                let _ = s.read_to_end(&mut all);
                let _ = tx.send(all);
            });
        }
    });
    Recorder {
        addr,
        got: rx,
        accepted,
    }
}

/// Sends `bytes`, half-closes, and reads until the proxy closes.
fn send_and_close(l: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(bytes);
    let _ = c.shutdown(Shutdown::Write);
    let mut back = Vec::new();
    let _ = c.read_to_end(&mut back);
    back
}

/// `openssl s_server` answering with its status page (-www) for `cert`.
struct SServer {
    addr: SocketAddr,
    child: std::process::Child,
}

impl Drop for SServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s_server(cert: &(std::path::PathBuf, std::path::PathBuf)) -> SServer {
    let addr = free_addr();
    let child = std::process::Command::new("openssl")
        .args(["s_server", "-www", "-quiet", "-accept"])
        .arg(addr.to_string())
        .arg("-cert")
        .arg(&cert.0)
        .arg("-key")
        .arg(&cert.1)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "s_server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    SServer { addr, child }
}

/// curl over HTTPS to `name` resolved to the vserver; (exit ok, body).
fn curl_https(l: SocketAddr, name: &str, ca: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{name}:{}:{}", l.port(), l.ip()))
        .arg(format!("https://{name}:{}/", l.port()))
        .output()
        .expect("curl");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// TLS passthrough: the pool by the ClientHello's server name (exact, then
/// wildcard, else the default pool), the bytes untouched (curl verifies
/// each member's own certificate end to end); a ClientHello split over
/// several writes is reassembled; garbage is closed unrelayed.
#[test]
fn sni_passthrough_routes_by_server_name() {
    let pki = Pki::new("sni");
    let a = s_server(&pki.issue("a", "/CN=a.test", &["a.test"], Kind::Ecdsa, 30));
    let w = s_server(&pki.issue("w", "/CN=wild", &["*.wild.test"], Kind::Ecdsa, 30));
    let d = s_server(&pki.issue(
        "d",
        "/CN=default",
        &["default.test", "b.test"],
        Kind::Rsa,
        30,
    ));
    let rec = recorder();
    let l = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"tls\"\nprotocol = \"tcp\"\nlisten = [\"{l}\"]\ndefault_pool = \"d\"\n\
         [vserver.l4]\nclient_hello_timeout = \"1s\"\n\
         [[vserver.sni_route]]\nnames = [\"a.test\"]\npool = \"a\"\n\
         [[vserver.sni_route]]\nnames = [\"*.wild.test\"]\npool = \"w\"\n\
         [[vserver.sni_route]]\nnames = [\"rec.test\"]\npool = \"rec\"\n\
         [[pool]]\nname = \"a\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"w\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"d\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"rec\"\n[[pool.member]]\naddress = \"{}\"\n",
        a.addr, w.addr, d.addr, rec.addr
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let ca = pki.ca();
    for (name, pool_addr) in [
        ("a.test", a.addr),
        ("x.wild.test", w.addr),
        ("b.test", d.addr),
    ] {
        let (ok, body) = curl_https(l, name, &ca);
        assert!(
            ok && body.contains("s_server"),
            "{name}: {body}\n{}",
            sy.log()
        );
        assert!(
            sy.member_stats(pool_by_addr(name), pool_addr)["requests"]
                .as_u64()
                .unwrap()
                >= 1,
            "{name}"
        );
    }
    // A wildcard route covers deeper names too (as HAProxy's `-m end`), though
    // the member's certificate does not: curl refuses it, after the member
    // answered the handshake.
    let before_w = sy.member_stats("w", w.addr)["requests"].as_u64().unwrap();
    assert!(!curl_https(l, "deep.x.wild.test", &ca).0);
    assert_eq!(
        sy.member_stats("w", w.addr)["requests"].as_u64().unwrap(),
        before_w + 1
    );
    // A name with no route and no match: the default pool, whose
    // certificate does not cover it, so curl refuses it.
    assert!(!curl_https(l, "a.wild.test.evil", &ca).0);
    // A ClientHello split over several writes.
    let hello = client_hello_bytes("rec.test");
    let mut c = TcpStream::connect(l).unwrap();
    for part in hello.chunks(hello.len() / 3 + 1) {
        c.write_all(part).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    c.shutdown(Shutdown::Write).unwrap();
    let got = rec
        .got
        .recv_timeout(Duration::from_secs(5))
        .expect("relayed");
    assert_eq!(got, hello, "relayed untouched");
    // Not TLS: closed, never relayed.
    let before = rec.accepted.load(Ordering::Relaxed);
    assert!(send_and_close(l, b"GET / HTTP/1.1\r\nHost: rec.test\r\n\r\n").is_empty());
    // A ClientHello that never completes: closed at the timeout.
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(&hello[..10]).unwrap();
    let start = Instant::now();
    let mut b = Vec::new();
    let _ = c.read_to_end(&mut b);
    assert!(
        start.elapsed() >= Duration::from_millis(800),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(rec.accepted.load(Ordering::Relaxed), before);
    assert!(sy.stats()["vservers"][0]["bad_requests"].as_u64().unwrap() >= 2);
}

fn pool_by_addr(name: &str) -> &'static str {
    match name {
        "a.test" => "a",
        "b.test" => "d",
        _ => "w",
    }
}

/// The bytes of a real ClientHello for `name` (rustls).
fn client_hello_bytes(name: &str) -> Vec<u8> {
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let mut c = rustls::ClientConnection::new(
        Arc::new(cfg),
        rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

/// TLS terminated on a tcp vserver, plain TCP to the member.
#[test]
fn tls_termination_on_a_tcp_vserver() {
    let pki = Pki::new("l4tls");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let e = echo();
    let l = free_addr();
    let cfg = format!(
        "{}[vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n",
        tcp_config(l, &[e.addr], "idle_timeout = \"1s\"", "").replacen(
            "[[pool]]",
            "PLACEHOLDER",
            1
        ),
        site.0.display(),
        site.1.display()
    );
    // The [vserver.tls] table must follow the vserver, before the pool.
    let cfg = {
        let (vs, rest) = cfg.split_once("PLACEHOLDER").unwrap();
        let (pool, tls) = rest.split_once("[vserver.tls]").unwrap();
        format!("{vs}[vserver.tls]{tls}[[pool]]{pool}")
    };
    let sy = Switchyard::start(&cfg, &[l]);
    let mut child = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-servername",
            "site.test",
            "-verify_return_error",
            "-CAfile",
        ])
        .arg(pki.ca())
        .arg("-connect")
        .arg(l.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello through TLS\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello through TLS\n");
    let v = &sy.stats()["vservers"][0];
    assert_eq!(v["tls_handshakes"], 1, "{v}");
    // The harness's probe never finished a handshake: only the client's
    // connection reached the member.
    assert_eq!(e.accepted.load(Ordering::Relaxed), 1);
}

/// PROXY protocol in (trusted sources only, malformed refused) and out
/// (v1 and v2 per pool), on tcp and HTTP vservers.
#[test]
fn proxy_protocol_in_and_out() {
    use switchyard::l4::proxy_protocol::{parse, Parsed};
    let rec = recorder();
    let l = free_addr();
    let cfg = |trusted: &str, version: &str| {
        format!(
            "{}[vserver.proxy_protocol]\ntrusted = [\"{trusted}\"]\ntimeout = \"500ms\"\n",
            tcp_config(
                l,
                &[rec.addr],
                "",
                &format!("proxy_protocol = \"{version}\"")
            )
        )
        .replacen("[[pool]]", "[[pool]]", 1)
    };
    // The proxy_protocol table must belong to the vserver: put it before the pool.
    let fix = |c: String| {
        let (head, tail) = c.split_once("[vserver.proxy_protocol]").unwrap();
        let (vs, pool) = head.split_once("[[pool]]").unwrap();
        format!("{vs}[vserver.proxy_protocol]{tail}[[pool]]{pool}")
    };
    let sy = Switchyard::start(&fix(cfg("127.0.0.1", "v1")), &[l]);
    let _ = rec.got.recv_timeout(Duration::from_secs(5)); // the harness probe
    send_and_close(l, b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\nhello");
    let got = rec.got.recv_timeout(Duration::from_secs(5)).unwrap();
    let want = format!(
        "PROXY TCP4 203.0.113.7 {} 5555 {}\r\nhello",
        l.ip(),
        l.port()
    );
    assert_eq!(String::from_utf8_lossy(&got), want);
    // v2 in, v2 out.
    assert!(sy.reload_with(&fix(cfg("127.0.0.1", "v2"))).0);
    let hdr = switchyard::l4::proxy_protocol::encode_v2(
        "[2001:db8::1]:4000".parse().unwrap(),
        "[2001:db8::2]:443".parse().unwrap(),
        switchyard::l4::proxy_protocol::Transport::Stream,
    );
    let mut msg = hdr.clone();
    msg.extend_from_slice(b"v2 data");
    send_and_close(l, &msg);
    let got = rec.got.recv_timeout(Duration::from_secs(5)).unwrap();
    match parse(&got).unwrap() {
        Parsed::Done {
            header_len,
            proxied,
        } => {
            let p = proxied.expect("addresses");
            assert_eq!(p.source, "[2001:db8::1]:4000".parse().unwrap());
            assert_eq!(&got[header_len..], b"v2 data");
        }
        other => panic!("{other:?}"),
    }
    // Malformed: closed, nothing relayed.
    let before = rec.accepted.load(Ordering::Relaxed);
    send_and_close(l, b"PROXY TCP4 999.0.113.7 127.0.0.1 5555 80\r\nhello");
    send_and_close(l, b"PROXY TCP4 203.0.113.7");
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(rec.accepted.load(Ordering::Relaxed), before);
    // Untrusted source: a header is refused, plain data is relayed.
    assert!(sy.reload_with(&fix(cfg("10.0.0.0/8", "v1"))).0);
    send_and_close(l, b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\nspoof");
    send_and_close(l, b"plain");
    let mut got = Vec::new();
    while let Ok(g) = rec.got.recv_timeout(Duration::from_secs(2)) {
        got.push(String::from_utf8_lossy(&g).into_owned());
    }
    assert!(got.iter().any(|g| g.ends_with("\r\nplain")), "{got:?}");
    assert!(!got.iter().any(|g| g.contains("spoof")), "{got:?}");

    // An HTTP vserver: the carried address reaches X-Forwarded-For.
    let o = Origin::start("o");
    let h = free_addr();
    let http = format!(
        "[[vserver]]\nname = \"web\"\nlisten = [\"{h}\"]\ndefault_pool = \"w\"\n[vserver.proxy_protocol]\ntrusted = [\"127.0.0.0/8\"]\n\
         [[pool]]\nname = \"w\"\n[[pool.member]]\naddress = \"{}\"\n",
        o.addr
    );
    let _sy2 = Switchyard::start(&http, &[]);
    std::thread::sleep(Duration::from_millis(300));
    let r = request(
        h,
        "PROXY TCP4 198.51.100.9 127.0.0.1 40000 80\r\nGET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let seen = o.seen();
    let last = seen.last().expect("the origin saw it");
    assert_eq!(
        last.header("x-forwarded-for").as_deref(),
        Some("198.51.100.9")
    );
}

/// A member whose protocol opens with its greeting (SMTP-like): a
/// `Recorder` that greets each connection at once.
fn greeter() -> Recorder {
    recording_member(Some(b"220 member greeting\r\n"))
}

/// Issue 30: a PROXY header from a source the vserver does not trust was
/// refused only once the relay ran, after a member connection: the member
/// got an empty connection and its greeting reached the refused client.
/// Now the member sees no connection at all; a client that speaks plainly,
/// or not at all (the member speaks first), is relayed as before.
#[test]
fn untrusted_proxy_header_is_refused_before_any_member_connects() {
    let m = greeter();
    let l = free_addr();
    let cfg = |wait: &str| {
        tcp_config(l, &[m.addr], "", "").replacen(
            "[vserver.l4]",
            &format!("[vserver.proxy_protocol]\ntrusted = [\"10.0.0.0/8\"]\n{wait}\n[vserver.l4]"),
            1,
        )
    };
    // Waits on the admin listener only: a probe of the vserver's address
    // would be a connection of its own.
    let sy = Switchyard::start(&cfg(""), &[]);
    let mut v2 = switchyard::l4::proxy_protocol::encode_v2(
        "192.0.2.1:4000".parse().unwrap(),
        "192.0.2.2:25".parse().unwrap(),
        switchyard::l4::proxy_protocol::Transport::Stream,
    );
    v2.extend_from_slice(b"spoof");
    let openings: [&[u8]; 3] = [
        b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 25\r\nspoof",
        &v2,
        // An opening that stops short of a whole signature.
        b"PROXY",
    ];
    for (i, bytes) in openings.iter().enumerate() {
        let mut c = loop {
            if let Ok(c) = TcpStream::connect(l) {
                break c;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(bytes).unwrap();
        let mut back = Vec::new();
        let _ = c.read_to_end(&mut back);
        assert!(back.is_empty(), "opening {i}: the client heard {back:?}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        m.accepted.load(Ordering::Relaxed),
        0,
        "the member saw a connection"
    );
    assert_eq!(stats_vs(&sy)["bad_requests"], 3, "{}", stats_vs(&sy));

    // Plain bytes go through, greeting and all.
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"EHLO client\r\n").unwrap();
    let mut greeting = [0u8; 21];
    c.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"220 member greeting\r\n");
    drop(c);
    let got = m.got.recv_timeout(Duration::from_secs(5)).expect("relayed");
    assert_eq!(got, b"EHLO client\r\n");

    // A client waiting for the member to speak first is connected once
    // untrusted_wait has passed.
    assert!(sy.reload_with(&cfg("untrusted_wait = \"200ms\"")).0);
    let started = Instant::now();
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"220 member greeting\r\n");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(2),
        "greeted after {waited:?}"
    );
}

/// A reload that removes or changes the vserver leaves the relays in flight
/// running on the configuration they started with.
#[test]
fn reload_keeps_relays_in_flight() {
    let e = echo();
    let e2 = echo();
    let l = free_addr();
    let sy = Switchyard::start(&tcp_config(l, &[e.addr], "", ""), &[l]);
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ping = |c: &mut TcpStream, m: &[u8]| {
        c.write_all(m).unwrap();
        let mut b = vec![0u8; m.len()];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b, m);
    };
    ping(&mut c, b"before");
    // Same address, another member.
    assert!(sy.reload_with(&tcp_config(l, &[e2.addr], "", "")).0);
    ping(&mut c, b"after a change");
    let n2 = e2.accepted.load(Ordering::Relaxed);
    let (a, b, _) = push_through(l, 1000);
    assert_eq!(a, b);
    assert_eq!(
        e2.accepted.load(Ordering::Relaxed),
        n2 + 1,
        "new connections use the new member"
    );
    // The vserver removed: the relay goes on, new connections are refused.
    let other = free_addr();
    let o = Origin::start("x");
    let only_http = format!(
        "[[vserver]]\nname = \"web\"\nlisten = [\"{other}\"]\ndefault_pool = \"w\"\n[[pool]]\nname = \"w\"\n[[pool.member]]\naddress = \"{}\"\n",
        o.addr
    );
    assert!(sy.reload_with(&only_http).0);
    assert!(eventually(Duration::from_secs(2), || TcpStream::connect(l).is_err()));
    ping(&mut c, b"after removal");
    c.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

/// A member that dies mid-connection (a reset) ends that relay, and the
/// client sees its connection close; the member's reset is counted.
#[test]
fn member_death_mid_connection_closes_the_relay() {
    let ml = TcpListener::bind("127.0.0.1:0").unwrap();
    let maddr = ml.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in ml.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut b = [0u8; 5];
                if s.read_exact(&mut b).is_ok() && &b == b"crash" {
                    s.write_all(b"bye").unwrap();
                    // SO_LINGER 0: close sends a reset.
                    socket2::SockRef::from(&s)
                        .set_linger(Some(Duration::ZERO))
                        .unwrap();
                    drop(s);
                }
            });
        }
    });
    let l = free_addr();
    let sy = Switchyard::start(&tcp_config(l, &[maddr], "", ""), &[l]);
    let mut c = TcpStream::connect(l).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    c.write_all(b"crash").unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    let _ = c.read_to_end(&mut got);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "the relay outlived its member"
    );
    assert!(got.is_empty() || got == b"bye", "{got:?}");
    assert!(eventually(Duration::from_secs(2), || {
        let v = sy.stats()["vservers"][0].clone();
        v["client_connections_active"] == 0
    }));
    assert!(
        eventually(Duration::from_secs(2), || sy.member_stats("p", maddr)
            ["resets"]
            .as_u64()
            .unwrap_or(0)
            >= 1),
        "{}",
        sy.member_stats("p", maddr)
    );
}

/// A TLS member that echoes every byte until its peer's EOF; records, per
/// connection, the ALPN protocol agreed (it offers "http/1.1": a client
/// that asks for none agrees on none).
fn tls_echo(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> (SocketAddr, mpsc::Receiver<Option<Vec<u8>>>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("cert")
        .map(|c| c.expect("cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("cert and key");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let cfg = Arc::new(cfg);
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (cfg, tx) = (cfg.clone(), tx.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let conn = rustls::ServerConnection::new(cfg).expect("conn");
                let mut tls = rustls::StreamOwned::new(conn, s);
                let mut buf = [0u8; 16 * 1024];
                let mut told = false;
                loop {
                    let n = match tls.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if !std::mem::replace(&mut told, true) {
                        let _ = tx.send(tls.conn.alpn_protocol().map(<[u8]>::to_vec));
                    }
                    if tls.write_all(&buf[..n]).and_then(|_| tls.flush()).is_err() {
                        return;
                    }
                }
                tls.conn.send_close_notify();
                let _ = tls.flush();
                let _ = tls.sock.shutdown(Shutdown::Write);
            });
        }
    });
    (addr, rx)
}

/// `[pool.tls]` on a tcp vserver: the relay carries the client's plain
/// bytes inside its own TLS session to the member, verified against the
/// pool's CA and without ALPN; a member whose certificate does not verify
/// is a failed connect, counted, and the next member is tried.
#[test]
fn tls_to_members_of_a_tcp_vserver() {
    let pki = Pki::new("l4up");
    let good = pki.member("good");
    let rogue = pki.self_signed("rogue");
    let (good_addr, alpn) = tls_echo(&good.0, &good.1);
    let (rogue_addr, _) = tls_echo(&rogue.0, &rogue.1);
    let l = free_addr();
    let cfg = tcp_config(
        l,
        &[rogue_addr, good_addr],
        "idle_timeout = \"2s\"",
        &format!(
            "algorithm = \"round-robin\"\n[pool.tls]\nca = \"{}\"",
            pki.ca().display()
        ),
    )
    .replace(
        "[global]\nworkers = 1\n",
        "[global]\nworkers = 1\n[limits]\nretries = 1\n",
    );
    let sy = Switchyard::start(&cfg, &[l]);
    for i in 0..4 {
        let mut s = TcpStream::connect(l).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let msg = format!("hello {i} over TLS to the member\n");
        s.write_all(msg.as_bytes()).expect("write");
        s.shutdown(Shutdown::Write).expect("shutdown");
        let mut back = String::new();
        s.read_to_string(&mut back).expect("read");
        assert_eq!(back, msg, "connection {i}\n{}", sy.log());
        assert_eq!(
            alpn.recv_timeout(Duration::from_secs(2))
                .expect("a handshake"),
            None,
            "the relay offered ALPN"
        );
    }
    let rogue_stats = sy.member_stats("p", rogue_addr);
    assert!(
        rogue_stats["tls_handshake_failures"].as_u64() >= Some(1),
        "{rogue_stats}"
    );
    assert!(
        rogue_stats["connect_failures"].as_u64() >= Some(1),
        "{rogue_stats}"
    );
}

/// A member behind `proxy_protocol` that, like nginx's `listen ...
/// proxy_protocol`, closes any connection not opening with a PROXY header;
/// after one it answers an HTTP request with 200. Sends each header it
/// read (the raw bytes) on the channel.
fn proxy_only_http_member() -> (SocketAddr, mpsc::Receiver<Vec<u8>>) {
    use switchyard::proxy_protocol::{parse, Parsed};
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                let header_len = loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    match parse(&got) {
                        Ok(Parsed::Incomplete) => continue,
                        Ok(Parsed::Done { header_len, .. }) => break header_len,
                        Err(_) => return, // no header: closed, as nginx does
                    }
                };
                let _ = tx.send(got[..header_len].to_vec());
                while !got[header_len..].windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    (addr, rx)
}

/// Health checks of a pool that sends PROXY headers send one too (HAProxy's
/// `check-send-proxy`): v2 says LOCAL, v1 names the check's own endpoints.
/// Without it such a member refuses every check and is marked down.
#[test]
fn health_checks_send_the_pools_proxy_header() {
    for version in ["v2", "v1"] {
        let (member, headers) = proxy_only_http_member();
        let l = free_addr();
        let cfg = tcp_config(
            l,
            &[member],
            "",
            &format!(
                "proxy_protocol = \"{version}\"\n[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"1s\"\nrise = 1\nfall = 1"
            ),
        );
        let sy = Switchyard::start(&cfg, &[l]);
        // The start's own probe of the listener is relayed with the
        // client's header; a check's says it is the proxy's own: v2, the
        // signature then LOCAL (0x20), UNSPEC, no addresses; v1, the
        // check's endpoints, to the member's port.
        let is_check = |h: &[u8]| match version {
            "v2" => h.len() == 16 && h[12..16] == [0x20, 0x00, 0x00, 0x00],
            _ => String::from_utf8_lossy(h).ends_with(&format!(" {}\r\n", member.port())),
        };
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !seen.iter().any(|h: &Vec<u8>| is_check(h)) {
            if let Ok(h) = headers.recv_timeout(Duration::from_millis(200)) {
                seen.push(h);
            }
        }
        assert!(
            seen.iter().any(|h| is_check(h)),
            "{version}: no check header among {seen:?}"
        );
        assert!(
            eventually(Duration::from_secs(3), || {
                sy.member_stats("p", member)["state"] == "up"
            }),
            "{version}: {}\n{}",
            sy.member_stats("p", member),
            sy.log()
        );
        // Requests still carry the client's header.
        let mut c = TcpStream::connect(l).expect("connect");
        c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .expect("write");
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        assert!(answer.ends_with("\r\n\r\nok"), "{version}: {answer:?}");
    }
}

/// What a PROXY-only keep-alive HTTP member saw on one connection.
#[derive(Default, Clone, Debug)]
struct MemberConn {
    /// The client address its PROXY header named.
    client: String,
    paths: Vec<String>,
    closed: bool,
}

/// A keep-alive HTTP member that requires a PROXY header (any version) on
/// each connection and answers every request with the header's client.
fn proxy_keepalive_member() -> (SocketAddr, Arc<std::sync::Mutex<Vec<MemberConn>>>) {
    use switchyard::proxy_protocol::{parse, Parsed};
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let conns: Arc<std::sync::Mutex<Vec<MemberConn>>> = Arc::default();
    let all = conns.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let all = all.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let (header_len, client) = loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    match parse(&got) {
                        Ok(Parsed::Incomplete) => continue,
                        Ok(Parsed::Done {
                            header_len,
                            proxied,
                        }) => break (header_len, proxied.map(|p| p.source.ip().to_string())),
                        Err(_) => return,
                    }
                };
                let me = {
                    let mut a = all.lock().expect("lock");
                    a.push(MemberConn {
                        client: client.clone().unwrap_or_default(),
                        ..MemberConn::default()
                    });
                    a.len() - 1
                };
                got.drain(..header_len);
                loop {
                    while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_string();
                        got.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("").to_string();
                        all.lock().expect("lock")[me].paths.push(path);
                        let body = client.clone().unwrap_or_default();
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                all.lock().expect("lock")[me].closed = true;
            });
        }
    });
    (addr, conns)
}

/// A pool that sends PROXY headers on an HTTP vserver: each client
/// connection gets member connections of its own, opened with its header
/// and reused only for its requests, and closed when it closes (HAProxy
/// keys its reuse on the header the same way).
#[test]
fn proxy_headers_to_http_members_keep_connections_per_client() {
    for version in ["v2", "v1"] {
        let (member, conns) = proxy_keepalive_member();
        let l = free_addr();
        let cfg = format!(
            "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
             [[pool]]\nname = \"p\"\nproxy_protocol = \"{version}\"\n[[pool.member]]\naddress = \"{member}\"\n"
        );
        let sy = Switchyard::start(&cfg, &[l]);
        let mut a = Client::connect_from(l, "127.0.0.2");
        let mut b = Client::connect_from(l, "127.0.0.3");
        for i in 0..3 {
            let ra = a.get(&format!("/a{i}"));
            let rb = b.get(&format!("/b{i}"));
            assert_eq!(ra.body_text(), "127.0.0.2", "{version}\n{}", sy.log());
            assert_eq!(rb.body_text(), "127.0.0.3", "{version}");
        }
        let seen = conns.lock().expect("lock").clone();
        assert_eq!(
            seen.len(),
            2,
            "{version}: one member connection per client: {seen:?}"
        );
        for c in &seen {
            let want = if c.client == "127.0.0.2" { "/a" } else { "/b" };
            assert_eq!(c.paths.len(), 3, "{version}: {seen:?}");
            assert!(
                c.paths.iter().all(|p| p.starts_with(want)),
                "{version}: {seen:?}"
            );
        }
        // The client goes: so does the member connection that carries its header.
        drop(a);
        assert!(
            eventually(Duration::from_secs(3), || conns
                .lock()
                .expect("lock")
                .iter()
                .any(|c| c.client == "127.0.0.2" && c.closed)),
            "{version}: {:?}",
            conns.lock().expect("lock")
        );
        assert!(!conns
            .lock()
            .expect("lock")
            .iter()
            .any(|c| c.client == "127.0.0.3" && c.closed));
        assert_eq!(b.get("/b-again").body_text(), "127.0.0.3");
    }
}

/// curl over HTTPS with extra arguments (an ALPN choice).
fn curl_https_args(l: SocketAddr, name: &str, ca: &std::path::Path, args: &[&str]) -> bool {
    std::process::Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(ca)
        .args(args)
        .arg("--resolve")
        .arg(format!("{name}:{}:{}", l.port(), l.ip()))
        .arg(format!("https://{name}:{}/", l.port()))
        .output()
        .expect("curl")
        .status
        .success()
}

/// The classic iRules task "SNI routing at L4", as a tcp vserver's script
/// (docs/scripting.md): the pool by the ClientHello's name and ALPN list
/// without terminating TLS, names refused, a plain protocol recognized by
/// its first bytes, and a per-client byte quota kept by `on_close` in a
/// shared table and enforced by `on_accept`.
#[test]
fn a_script_routes_tls_by_sni_and_alpn_and_keeps_a_byte_quota() {
    let pki = Pki::new("sni-script");
    let a = s_server(&pki.issue("a", "/CN=a.test", &["a.test"], Kind::Ecdsa, 30));
    let d = s_server(&pki.issue("d", "/CN=default", &["b.test"], Kind::Ecdsa, 30));
    let rec = recorder();
    let l = free_addr();
    let dir = temp_dir("l4-script");
    let script = dir.join("sni.lua");
    std::fs::write(
        &script,
        r#"
local moved = sy.table("l4-quota")
function on_accept(c)
  if (moved:get(c.client_ip) or 0) > 10000 then c:reject() end
end
function on_client_data(c)
  if not c.sni then
    if c.data:sub(1, 5) == "HELLO" then return c:use_pool("rec") end
    return c:reject()
  end
  if c.sni:match("%.blocked%.test$") then return c:reject() end
  if c.sni == "a.test" then return c:use_pool("a") end
  for _, p in ipairs(c.alpn) do
    if p == "h2" then return c:use_pool("d") end
  end
  c:reject() -- b.test without h2
end
function on_close(c)
  moved:incr(c.client_ip, c.bytes_in)
end
"#,
    )
    .expect("script");
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"tls\"\nprotocol = \"tcp\"\nlisten = [\"{l}\"]\n\
         [vserver.l4]\nclient_hello_timeout = \"1s\"\n[vserver.script]\nfile = \"{}\"\n\
         [[vserver.sni_route]]\nnames = [\"b.test\"]\npool = \"d\"\n\
         [[pool]]\nname = \"a\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"d\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"rec\"\n[[pool.member]]\naddress = \"{}\"\n",
        script.display(),
        a.addr,
        d.addr,
        rec.addr
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let ca = pki.ca();
    let requests = |pool: &str, addr: SocketAddr| {
        sy.member_stats(pool, addr)["requests"]
            .as_u64()
            .unwrap_or(0)
    };
    assert!(
        curl_https_args(l, "a.test", &ca, &["--http1.1"]),
        "{}",
        sy.log()
    );
    assert_eq!(requests("a", a.addr), 1);
    // b.test: only a client offering h2 (an sni_route alone would take both).
    assert!(
        curl_https_args(l, "b.test", &ca, &["--http2"]),
        "{}",
        sy.log()
    );
    assert_eq!(requests("d", d.addr), 1);
    assert!(!curl_https_args(l, "b.test", &ca, &["--http1.1"]));
    assert!(!curl_https_args(l, "x.blocked.test", &ca, &[]));
    assert_eq!((requests("a", a.addr), requests("d", d.addr)), (1, 1));
    // Not TLS: the first bytes decide.
    assert!(send_and_close(l, b"GARBAGE\r\n").is_empty());
    assert_eq!(rec.accepted.load(Ordering::Relaxed), 0);
    let mut big = b"HELLO ".to_vec();
    big.extend(std::iter::repeat_n(b'x', 20_000));
    send_and_close(l, &big);
    let got = rec
        .got
        .recv_timeout(Duration::from_secs(5))
        .expect("relayed");
    assert_eq!(got, big, "relayed untouched");
    // on_close counted the upload: this client is over its quota now.
    // (A probe relayed before on_close ran is counted: the member has seen
    // it by the time the probe's connection ends.)
    assert!(eventually(Duration::from_secs(5), || {
        let before = rec.accepted.load(Ordering::Relaxed);
        send_and_close(l, b"HELLO again");
        rec.accepted.load(Ordering::Relaxed) == before
    }));
    assert!(!curl_https_args(l, "a.test", &ca, &["--http1.1"]));
    assert_eq!(requests("a", a.addr), 1);
    let vs = &sy.stats()["vservers"][0];
    assert_eq!(vs["script_errors"], 0, "{vs}");
}
