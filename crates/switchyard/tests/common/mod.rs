//! Test harness: the real `switchyard` binary, real origins on loopback,
//! and a small HTTP/1.1 client that shows exactly what came back.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod h2_ws_member;
pub mod h3;
pub mod netns;
mod pki;
pub mod xdp_lab;
// Not every test file makes certificates.
#[allow(unused_imports)]
pub use pki::*;

/// A `GET /` from `source` (bound, port 0) to `to`, connection closed
/// after: Ok(status), or how it failed (refused, reset, timed out ...).
pub fn get_from_source(
    source: SocketAddr,
    to: SocketAddr,
    timeout: Duration,
) -> Result<u16, std::io::ErrorKind> {
    let domain = if source.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| e.kind())?;
    sock.bind(&source.into()).map_err(|e| e.kind())?;
    sock.connect_timeout(&to.into(), timeout)
        .map_err(|e| e.kind())?;
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.kind())?;
    let wrote = s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let mut buf = Vec::new();
    match s.read_to_end(&mut buf) {
        // A reset that came before the request was written is reported to
        // the write, once, and the read then sees an end: the reset is what
        // the client met (a reject at accept raced the request that way).
        Ok(_) if buf.is_empty() => Err(wrote
            .err()
            .map_or(std::io::ErrorKind::UnexpectedEof, |e| e.kind())),
        Ok(_) => Ok(String::from_utf8_lossy(&buf)
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)),
        Err(e) => Err(e.kind()),
    }
}

/// A free port on 127.0.0.1, for servers a test starts and then points at
/// it (see `port_below_ephemeral_range` for why not port 0's pick).
pub fn free_port() -> u16 {
    port_below_ephemeral_range()
}

/// A free port on 127.0.0.1 below the kernel's ephemeral range. A port
/// found by binding port 0 is released before the server binds it, and in
/// that gap any client socket of any test may be given it as its local port;
/// ports below the range are never handed out that way. A port is handed
/// out once per test process, so two tests running side by side cannot
/// draw the same one while the first has not bound it yet (an etcd, which
/// takes longest to start, lost its port that way: "bind: address already
/// in use").
fn port_below_ephemeral_range() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (first, span) = (10_000u16, low.saturating_sub(10_000).max(1000));
    for _ in 0..1000 {
        let port = first + (random() % span as u64) as u16;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr").port()
}

/// A number that differs between calls, threads and test processes
/// (splitmix64 of the pid, the clock and a counter): no two tests should
/// pick the same port or address.
fn random() -> u64 {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let mut h = (std::process::id() as u64) << 32
        ^ nanos
        ^ (N.fetch_add(1, Ordering::Relaxed) as u64) << 20;
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A fresh directory for one test's files. The first call of a test
/// process also removes what test processes that are gone left behind: a
/// test that fails keeps its files for the one looking into it, and
/// `cargo test` run again and again must not fill the disk (a three-node
/// etcd cluster leaves 370 MB).
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(remove_dirs_of_finished_runs);
    let d = std::env::temp_dir().join(format!(
        "switchyard-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn remove_dirs_of_finished_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("switchyard-test-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

// ---------------------------------------------------------------- origin

/// What an origin does with the next requests; tests change it live.
#[derive(Clone, Debug)]
pub struct Behavior {
    pub status: u16,
    /// Status of GET /health.
    pub health_status: u16,
    pub delay: Duration,
    /// Close the connection without answering.
    pub close_without_answer: bool,
    /// Raw bytes sent instead of a proper response (framing tests).
    pub raw_response: Option<Vec<u8>>,
    /// Body size for GET /size/N is N; otherwise this text.
    pub body: Option<String>,
    /// Close the connection after each response without saying so
    /// (a member whose keep-alive timeout is shorter than ours).
    pub silent_close: bool,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            status: 200,
            health_status: 200,
            delay: Duration::ZERO,
            close_without_answer: false,
            raw_response: None,
            body: None,
            silent_close: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Seen {
    pub head: String,
    pub body: Vec<u8>,
    /// The trailer section of a chunked body, as sent ("name: value\r\n"
    /// lines).
    pub trailers: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }
}

pub struct Origin {
    pub addr: SocketAddr,
    pub name: String,
    pub behavior: Arc<Mutex<Behavior>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Origin {
    pub fn start(name: &str) -> Origin {
        Self::start_on(name, "127.0.0.1:0")
    }

    pub fn start_on(name: &str, bind: &str) -> Origin {
        let l = TcpListener::bind(bind).expect("origin bind");
        let addr = l.local_addr().expect("origin addr");
        let o = Origin {
            addr,
            name: name.to_string(),
            behavior: Arc::new(Mutex::new(Behavior::default())),
            seen: Arc::new(Mutex::new(Vec::new())),
            connections: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (b, s, c, st, n) = (
            o.behavior.clone(),
            o.seen.clone(),
            o.connections.clone(),
            o.stop.clone(),
            o.name.clone(),
        );
        l.set_nonblocking(true).expect("nonblocking");
        std::thread::spawn(move || loop {
            if st.load(Ordering::Relaxed) {
                return;
            }
            match l.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    c.fetch_add(1, Ordering::Relaxed);
                    let (b, s, n, st) = (b.clone(), s.clone(), n.clone(), st.clone());
                    std::thread::spawn(move || origin_conn(stream, &n, &b, &s, &st));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        });
        o
    }

    pub fn set(&self, f: impl FnOnce(&mut Behavior)) {
        f(&mut self.behavior.lock().expect("lock"));
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    /// Requests seen, not counting health checks.
    pub fn requests(&self) -> usize {
        self.seen()
            .iter()
            .filter(|s| !s.request_line().contains(" /health "))
            .count()
    }

    pub fn clear(&self) {
        self.seen.lock().expect("lock").clear();
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn read_line(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut l = String::new();
    match r.read_line(&mut l) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(l),
    }
}

fn origin_conn(
    stream: TcpStream,
    name: &str,
    behavior: &Mutex<Behavior>,
    seen: &Mutex<Vec<Seen>>,
    stop: &AtomicBool,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut w = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut r = BufReader::new(stream);
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let mut head = String::new();
        loop {
            let Some(l) = read_line(&mut r) else { return };
            let end = l == "\r\n";
            head.push_str(&l);
            if end {
                break;
            }
        }
        let seen_now = Seen {
            head: head.clone(),
            body: Vec::new(),
            trailers: String::new(),
        };
        let mut body = Vec::new();
        let mut trailers = String::new();
        if let Some(n) = seen_now
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            body.resize(n, 0);
            if r.read_exact(&mut body).is_err() {
                return;
            }
        } else if seen_now
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let Some(l) = read_line(&mut r) else { return };
                let size = usize::from_str_radix(l.trim().split(';').next().unwrap_or(""), 16)
                    .unwrap_or(0);
                if size == 0 {
                    loop {
                        let Some(t) = read_line(&mut r) else { return };
                        if t == "\r\n" {
                            break;
                        }
                        trailers.push_str(&t);
                    }
                    break;
                }
                let mut chunk = vec![0; size + 2];
                if r.read_exact(&mut chunk).is_err() {
                    return;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        }
        let b = behavior.lock().expect("lock").clone();
        seen.lock().expect("lock").push(Seen {
            head: head.clone(),
            body: body.clone(),
            trailers,
        });
        let req_line = head.lines().next().unwrap_or("").to_string();
        let path = req_line.split(' ').nth(1).unwrap_or("/").to_string();
        let upgrade = seen_now
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        if upgrade {
            let key = seen_now.header("sec-websocket-key").unwrap_or_default();
            let resp = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                ws_accept(&key)
            );
            if w.write_all(resp.as_bytes()).is_err() {
                return;
            }
            ws_echo(&mut r, &mut w);
            return;
        }
        if !b.delay.is_zero() && !path.starts_with("/health") {
            std::thread::sleep(b.delay);
        }
        if b.close_without_answer && !path.starts_with("/health") {
            return;
        }
        if let Some(raw) = &b.raw_response {
            if !path.starts_with("/health") {
                let _ = w.write_all(raw);
                return;
            }
        }
        let (status, text) = if path.starts_with("/health") {
            (b.health_status, "ok\n".to_string())
        } else if let Some(n) = path
            .strip_prefix("/size/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            (b.status, "x".repeat(n))
        } else if path.starts_with("/echo") {
            (b.status, String::from_utf8_lossy(&body).into_owned())
        } else {
            (
                b.status,
                b.body.clone().unwrap_or_else(|| format!("{name}\n")),
            )
        };
        let close = seen_now
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Origin: {name}\r\n{}\r\n",
            text.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        let is_head = req_line.starts_with("HEAD ");
        let mut out = resp.into_bytes();
        if !is_head {
            out.extend_from_slice(text.as_bytes());
        }
        if w.write_all(&out).is_err() || close || b.silent_close {
            return;
        }
    }
}

// ------------------------------------------------------- websocket bits

fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64) * 8;
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, v) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        o.push(T[(n >> 18) as usize & 63] as char);
        o.push(T[(n >> 12) as usize & 63] as char);
        o.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        o.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    o
}

/// Asserts that `seen` holds the GET Upgrade an extended CONNECT for
/// "/chat?room=1" becomes (RFC 8441, RFC 9220): a key of the proxy's and
/// the client's version 13 and subprotocol "chat"; its Host.
pub fn assert_websocket_upgrade(seen: &[Seen]) -> Option<String> {
    let s = seen
        .iter()
        .rev()
        .find(|s| s.request_line().starts_with("GET /chat"))
        .expect("the handshake");
    assert_eq!(s.request_line(), "GET /chat?room=1 HTTP/1.1");
    assert!(s
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket")));
    assert!(s
        .header("connection")
        .is_some_and(|u| u.eq_ignore_ascii_case("upgrade")));
    assert_eq!(s.header("sec-websocket-key").map(|k| k.len()), Some(24));
    assert_eq!(s.header("sec-websocket-version").as_deref(), Some("13"));
    assert_eq!(s.header("sec-websocket-protocol").as_deref(), Some("chat"));
    s.header("host")
}

/// A Python that imports `module` (scripts/test.sh installs aioquic and
/// hypercorn into target/pyvenv), else the system's python3 if it has it;
/// None skips the test, saying so.
pub fn python_with(module: &str) -> Option<std::path::PathBuf> {
    let venv =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pyvenv/bin/python");
    for p in [venv, std::path::PathBuf::from("python3")] {
        let ok = std::process::Command::new(&p)
            .args(["-c", &format!("import {module}")])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(p);
        }
    }
    eprintln!(
        "SKIPPED: no Python with {module} (bash scripts/test.sh installs it into target/pyvenv)"
    );
    None
}

pub fn ws_accept(key: &str) -> String {
    base64(&sha1(
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    ))
}

/// Reads one WebSocket frame: (opcode, unmasked payload).
pub fn ws_read_frame(r: &mut impl Read) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    r.read_exact(&mut h).ok()?;
    let op = h[0] & 0x0f;
    let masked = h[1] & 0x80 != 0;
    let mut len = (h[1] & 0x7f) as u64;
    if len == 126 {
        let mut b = [0u8; 2];
        r.read_exact(&mut b).ok()?;
        len = u16::from_be_bytes(b) as u64;
    } else if len == 127 {
        let mut b = [0u8; 8];
        r.read_exact(&mut b).ok()?;
        len = u64::from_be_bytes(b);
    }
    let mut mask = [0u8; 4];
    if masked {
        r.read_exact(&mut mask).ok()?;
    }
    let mut p = vec![0u8; len as usize];
    r.read_exact(&mut p).ok()?;
    if masked {
        for (i, b) in p.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Some((op, p))
}

pub fn ws_frame(op: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![0x80 | op];
    let m = if mask.is_some() { 0x80 } else { 0 };
    if payload.len() < 126 {
        f.push(m | payload.len() as u8);
    } else if payload.len() < 65_536 {
        f.push(m | 126);
        f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    } else {
        // RFC 6455 5.2: 64-bit length (a 16-bit one would be cut short;
        // Hypercorn's wsproto caught it where our own echo did not).
        f.push(m | 127);
        f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    }
    match mask {
        Some(k) => {
            f.extend_from_slice(&k);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

fn ws_echo(r: &mut BufReader<TcpStream>, w: &mut TcpStream) {
    while let Some((op, p)) = ws_read_frame(r) {
        if op == 8 {
            let _ = w.write_all(&ws_frame(8, &p, None));
            return;
        }
        if w.write_all(&ws_frame(op, &p, None)).is_err() {
            return;
        }
    }
}

// ------------------------------------------------------------- switchyard

pub struct Switchyard {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub admin: SocketAddr,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

impl Switchyard {
    /// Starts `switchyard run -c` on `config` (an `[admin]` section is
    /// added) and waits until `wait_for` accepts connections.
    pub fn start(config: &str, wait_for: &[SocketAddr]) -> Switchyard {
        // A port below the ephemeral range that was free when drawn can be
        // taken by another process on the machine before switchyard binds
        // it (CI lost its admin port that way: "admin: cannot listen on
        // 127.0.0.1:28154: Address already in use"). The admin port is the
        // harness's own choice, so it draws another; a vserver address that
        // is taken is the test's and fails it.
        for attempt in 1.. {
            let mut sy = Self::spawn(config);
            match sy.wait_for_admin() {
                Ok(()) => {
                    for &a in wait_for {
                        sy.wait_listening(a);
                    }
                    return sy;
                }
                Err(e)
                    if attempt < 4
                        && e.contains("admin: cannot listen on")
                        && e.contains("Address already in use") => {}
                Err(e) => panic!("{e}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// Waits until switchyard says its admin endpoint listens: a connection
    /// to the port alone could reach whoever took it. The error holds its
    /// log when it exited first.
    fn wait_for_admin(&mut self) -> Result<(), String> {
        let listening = format!("://{}/", self.admin);
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.contains(&listening) {
                return Ok(());
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                // What it wrote before exiting is in the file by now.
                return Err(format!(
                    "switchyard exited ({st}) before listening on {}:\n{}",
                    self.admin,
                    self.log()
                ));
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "switchyard's admin endpoint not listening on {}:\n{log}",
                self.admin
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts `switchyard run -c` on `config` with an `[admin]` section on
    /// a port of its own, without waiting for it.
    fn spawn(config: &str) -> Switchyard {
        let dir = temp_dir("sy");
        // 127.0.0.1 because the admin TLS test's certificate names it; a
        // port the test's own configuration does not use.
        let admin: SocketAddr = loop {
            let port = free_port();
            if !config.contains(&format!(":{port}\"")) {
                break SocketAddr::from(([127, 0, 0, 1], port));
            }
        };
        let path = dir.join("switchyard.toml");
        std::fs::write(&path, format!("[admin]\nlisten = \"{admin}\"\n{config}"))
            .expect("write config");
        let log = std::fs::File::create(dir.join("stderr.log")).expect("log file");
        let child = Command::new(bin())
            .args(["run", "-c"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start switchyard");
        Switchyard {
            child: Some(child),
            dir,
            config: path,
            admin,
        }
    }

    pub fn wait_listening(&mut self, a: SocketAddr) {
        let start = Instant::now();
        while TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_err() {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "switchyard exited ({st}) before listening on {a}:\n{}",
                    self.log()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "switchyard not listening on {a}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// Whether the log holds `needle`, waiting up to 2 s for it: log lines
    /// reach stderr through the log thread, a few milliseconds after the
    /// event (which a test may observe first).
    pub fn wait_for_log(&self, needle: &str) -> bool {
        eventually(Duration::from_secs(2), || self.log().contains(needle))
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status();
    }

    /// Rewrites the config file (admin section kept) and asks for a reload
    /// through `switchyard reload`; returns (success, output).
    pub fn reload_with(&self, config: &str) -> (bool, String) {
        std::fs::write(
            &self.config,
            format!("[admin]\nlisten = \"{}\"\n{config}", self.admin),
        )
        .expect("write config");
        let out = Command::new(bin())
            .args(["reload", "--admin", &self.admin.to_string()])
            .output()
            .expect("run reload");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    pub fn admin_get(&self, path: &str) -> String {
        let r = request(
            self.admin,
            &format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"),
        );
        r.body_text()
    }

    /// Waits for the process to exit; returns its status code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Switchyard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A failing test keeps its config and log to be looked at.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ----------------------------------------------------------------- client

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A keep-alive client connection.
pub struct Client {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Self::from_stream(s)
    }

    /// Connects from a chosen loopback source address (for source-IP tests).
    pub fn connect_from(addr: SocketAddr, source: &str) -> Client {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let src: SocketAddr = format!("{source}:0").parse().expect("source");
        sock.bind(&src.into()).expect("bind source");
        sock.connect_timeout(&addr.into(), Duration::from_secs(5))
            .expect("connect");
        Self::from_stream(sock.into())
    }

    pub fn from_stream(s: TcpStream) -> Client {
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let _ = s.set_nodelay(true);
        let w = s.try_clone().expect("clone");
        Client {
            r: BufReader::new(s),
            w,
        }
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.w.write_all(raw).expect("write");
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        self.read_response(false).expect("response")
    }

    pub fn get_with(&mut self, path: &str, headers: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n{headers}\r\n").as_bytes());
        self.read_response(false).expect("response")
    }

    /// Reads one response; None if the connection closed first.
    pub fn read_response(&mut self, head_request: bool) -> Option<Response> {
        let status_line = read_line(&mut self.r)?;
        let status: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let l = read_line(&mut self.r)?;
            if l == "\r\n" {
                break;
            }
            let (n, v) = l.split_once(':')?;
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
        let mut resp = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if head_request || status == 204 || status == 304 || (100..200).contains(&status) {
            return Some(resp);
        }
        if let Some(n) = resp
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            resp.body.resize(n, 0);
            self.r.read_exact(&mut resp.body).ok()?;
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let l = read_line(&mut self.r)?;
                let size = usize::from_str_radix(l.trim(), 16).ok()?;
                if size == 0 {
                    while read_line(&mut self.r)? != "\r\n" {}
                    break;
                }
                let mut c = vec![0; size + 2];
                self.r.read_exact(&mut c).ok()?;
                resp.body.extend_from_slice(&c[..size]);
            }
        } else {
            let _ = self.r.read_to_end(&mut resp.body);
        }
        Some(resp)
    }

    /// True if the server closed the connection (EOF within the timeout).
    pub fn closed_within(&mut self, t: Duration) -> bool {
        let _ = self.r.get_ref().set_read_timeout(Some(t));
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }
}

/// One request on a new connection; the whole response.
/// Sends `head` and a body of `body_len` bytes as a client that writes the
/// whole body before it reads (Python's http.client, Java's
/// HttpURLConnection): 64 KB with the head, the rest in 16 KB pieces 20 ms
/// apart. Returns what it read to the end and how the end came (a FIN is
/// `Ok`); panics if a piece of the body could not be written.
pub fn send_whole_body_then_read(
    addr: SocketAddr,
    head: &str,
    body_len: usize,
) -> (String, std::io::Result<usize>) {
    let first = body_len.min(64 * 1024);
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut start = head.as_bytes().to_vec();
    start.resize(start.len() + first, b'b');
    s.write_all(&start).expect("head");
    let mut sent = first;
    while sent < body_len {
        std::thread::sleep(Duration::from_millis(20));
        let n = (body_len - sent).min(16 * 1024);
        if let Err(e) = s.write_all(&vec![b'b'; n]) {
            panic!("the body after byte {sent}: {e}");
        }
        sent += n;
    }
    let mut got = Vec::new();
    let end = s.read_to_end(&mut got);
    (String::from_utf8_lossy(&got).into_owned(), end)
}

pub fn request(addr: SocketAddr, raw: &str) -> Response {
    let mut c = Client::connect(addr);
    c.send(raw.as_bytes());
    c.read_response(raw.starts_with("HEAD "))
        .unwrap_or_else(|| panic!("no response to {raw:?}"))
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
    )
}

/// Counts how many responses of `n` GETs came from each origin (X-Origin).
pub fn distribution(addr: SocketAddr, path: &str, n: usize) -> HashMap<String, usize> {
    let mut c = Client::connect(addr);
    let mut m = HashMap::new();
    for _ in 0..n {
        let r = c.get(path);
        assert_eq!(r.status, 200, "{}", r.body_text());
        *m.entry(r.header("x-origin").unwrap_or("?").to_string())
            .or_insert(0) += 1;
    }
    m
}

/// Polls `f` until it returns true or `within` passes.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A vserver + one pool over `origins`, with extra pool settings.
pub fn simple_config(listen: SocketAddr, origins: &[&Origin], pool_extra: &str) -> String {
    let mut s = format!("[global]\nworkers = 1\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\n[[pool]]\nname = \"p\"\n{pool_extra}\n");
    for o in origins {
        s.push_str(&format!("[[pool.member]]\naddress = \"{}\"\n", o.addr));
    }
    s
}

// ------------------------------------------------ stats and small helpers

impl Switchyard {
    /// The admin `/stats.json` document.
    pub fn stats(&self) -> serde_json::Value {
        let text = self.admin_get("/stats.json");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("stats.json: {e}: {text}"))
    }

    /// One member's entry in `/stats.json` (pool name, member address).
    pub fn member_stats(&self, pool: &str, member: SocketAddr) -> serde_json::Value {
        member_of(&self.stats(), pool, member)
    }

    /// One pool's entry in `/stats.json`.
    pub fn pool_stats(&self, pool: &str) -> serde_json::Value {
        let s = self.stats();
        s["pools"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == pool))
            .cloned()
            .unwrap_or_else(|| panic!("no pool {pool} in {s}"))
    }
}

/// A member's entry in a `/stats.json` document.
pub fn member_of(stats: &serde_json::Value, pool: &str, member: SocketAddr) -> serde_json::Value {
    stats["pools"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == pool))
        .and_then(|p| p["members"].as_array())
        .and_then(|ms| ms.iter().find(|m| m["address"] == member.to_string()))
        .cloned()
        .unwrap_or_else(|| panic!("no member {member} of pool {pool} in {stats}"))
}

/// GET on a new connection with extra header lines ("Name: value\r\n...").
pub fn get_with(addr: SocketAddr, path: &str, headers: &str) -> Response {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{headers}\r\n"),
    )
}

/// The origin name (X-Origin) of a response, or "" when there is none.
pub fn origin_of(r: &Response) -> String {
    r.header("x-origin").unwrap_or("").to_string()
}

impl Switchyard {
    /// Rewrites the config file (admin section kept) without asking for a
    /// reload (for SIGHUP tests).
    pub fn write_config(&self, config: &str) {
        std::fs::write(
            &self.config,
            format!("[admin]\nlisten = \"{}\"\n{config}", self.admin),
        )
        .expect("write config");
    }
}

/// Runs `switchyard ARGS...`; returns (exit code, stdout, stderr).
pub fn run_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin())
        .args(args)
        .output()
        .expect("run switchyard");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A free port on a random loopback address in 127.1.0.0-127.254.255.255,
/// for Switchyard listen addresses. Switchyard listens with SO_REUSEPORT, so
/// two instances (of this test binary or of any other test running on the
/// machine) handed the same port by `free_port()` would silently share it
/// and take each other's connections; a random address makes that
/// practically impossible.
pub fn free_addr() -> SocketAddr {
    let h = random();
    let ip = [
        127,
        1 + (h % 254) as u8,
        (h >> 8) as u8,
        1 + ((h >> 16) % 254) as u8,
    ];
    let l = TcpListener::bind(SocketAddr::from((ip, 0))).expect("bind a loopback address");
    l.local_addr().expect("local addr")
}

// ------------------------------------------------------------- TLS origin

/// What a `TlsOrigin` saw of one completed TLS handshake.
#[derive(Clone, Debug)]
pub struct TlsHandshake {
    /// The SNI the client sent (None: no SNI, as for an IP address).
    pub sni: Option<String>,
    /// The client resumed a session (ticket or session ID).
    pub resumed: bool,
    /// DER of the client certificate presented, if any.
    pub client_cert: Option<Vec<u8>>,
}

/// A TLS HTTP/1.1 origin (rustls, a thread per connection) for upstream
/// TLS tests: answers keep-alive requests with its name (`GET /health`:
/// `health_status`, body "ok"), and records TCP connections, handshakes
/// (SNI, resumption, client certificate) and request heads.
pub struct TlsOrigin {
    pub addr: SocketAddr,
    pub name: String,
    /// TCP connections accepted.
    pub connections: Arc<AtomicU64>,
    pub handshakes: Arc<Mutex<Vec<TlsHandshake>>>,
    pub handshake_failures: Arc<AtomicU64>,
    /// Request heads, in arrival order.
    pub seen: Arc<Mutex<Vec<String>>>,
    pub health_status: Arc<AtomicU64>,
    /// Close a keep-alive connection idle this long: with close_notify
    /// then FIN (true), or a bare FIN (false).
    pub idle_close: Arc<Mutex<Option<(Duration, bool)>>>,
    stop: Arc<AtomicBool>,
}

#[derive(Clone)]
struct TlsOriginShared {
    name: String,
    handshakes: Arc<Mutex<Vec<TlsHandshake>>>,
    handshake_failures: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<String>>>,
    health_status: Arc<AtomicU64>,
    idle_close: Arc<Mutex<Option<(Duration, bool)>>>,
    stop: Arc<AtomicBool>,
}

impl TlsOrigin {
    /// Serves `cert` (PEM chain) with `key`; with `client_ca`, requires a
    /// client certificate chained to it.
    pub fn start(
        name: &str,
        cert: &std::path::Path,
        key: &std::path::Path,
        client_ca: Option<&std::path::Path>,
    ) -> TlsOrigin {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .expect("origin cert")
            .map(|c| c.expect("origin cert"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).expect("origin key");
        let b = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions");
        let b = match client_ca {
            None => b.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(ca).expect("client ca") {
                    roots
                        .add(c.expect("client ca cert"))
                        .expect("add client ca");
                }
                let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("client verifier");
                b.with_client_cert_verifier(v)
            }
        };
        let mut cfg = b.with_single_cert(chain, key).expect("origin cert and key");
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);

        let l = TcpListener::bind("127.0.0.1:0").expect("tls origin bind");
        let addr = l.local_addr().expect("tls origin addr");
        let o = TlsOrigin {
            addr,
            name: name.to_string(),
            connections: Arc::new(AtomicU64::new(0)),
            handshakes: Arc::new(Mutex::new(Vec::new())),
            handshake_failures: Arc::new(AtomicU64::new(0)),
            seen: Arc::new(Mutex::new(Vec::new())),
            health_status: Arc::new(AtomicU64::new(200)),
            idle_close: Arc::new(Mutex::new(None)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let shared = TlsOriginShared {
            name: o.name.clone(),
            handshakes: o.handshakes.clone(),
            handshake_failures: o.handshake_failures.clone(),
            seen: o.seen.clone(),
            health_status: o.health_status.clone(),
            idle_close: o.idle_close.clone(),
            stop: o.stop.clone(),
        };
        let conns = o.connections.clone();
        l.set_nonblocking(true).expect("nonblocking");
        std::thread::spawn(move || loop {
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            match l.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    conns.fetch_add(1, Ordering::Relaxed);
                    let (cfg, shared) = (cfg.clone(), shared.clone());
                    std::thread::spawn(move || tls_origin_conn(stream, cfg, &shared));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        });
        o
    }

    pub fn handshakes(&self) -> Vec<TlsHandshake> {
        self.handshakes.lock().expect("lock").clone()
    }

    /// Request heads seen, not counting health checks.
    pub fn requests(&self) -> usize {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|h| !h.starts_with("GET /health "))
            .count()
    }

    /// Health-check requests seen.
    pub fn health_requests(&self) -> usize {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|h| h.starts_with("GET /health "))
            .count()
    }

    pub fn set_idle_close(&self, after: Duration, close_notify: bool) {
        *self.idle_close.lock().expect("lock") = Some((after, close_notify));
    }
}

impl Drop for TlsOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Writes out what rustls holds.
fn tls_flush(conn: &mut rustls::ServerConnection, sock: &mut TcpStream) -> bool {
    while conn.wants_write() {
        if conn.write_tls(sock).is_err() {
            return false;
        }
    }
    true
}

fn tls_origin_conn(mut sock: TcpStream, cfg: Arc<rustls::ServerConfig>, o: &TlsOriginShared) {
    // Short reads so the connection notices idle time and the stop flag.
    let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
    let Ok(mut conn) = rustls::ServerConnection::new(cfg) else {
        return;
    };
    let started = Instant::now();
    while conn.is_handshaking() {
        match conn.complete_io(&mut sock) {
            Ok(_) => {}
            Err(e) if is_timeout(&e) && started.elapsed() < Duration::from_secs(10) => {}
            Err(_) => {
                o.handshake_failures.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    o.handshakes.lock().expect("lock").push(TlsHandshake {
        sni: conn.server_name().map(str::to_string),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        client_cert: conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec()),
    });
    let mut buf: Vec<u8> = Vec::new();
    let mut last = Instant::now();
    loop {
        // Plaintext rustls already holds (a request that came with the
        // client's Finished, or several in one read).
        let mut chunk = [0u8; 8192];
        while let Ok(n) = conn.reader().read(&mut chunk) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
            let field = |name: &str| {
                head.lines().skip(1).find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
            };
            let len: usize = field("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                let close = field("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
                let (status, body) = if head.starts_with("GET /health ") {
                    (o.health_status.load(Ordering::Relaxed), "ok\n".to_string())
                } else {
                    (200, format!("{}\n", o.name))
                };
                o.seen.lock().expect("lock").push(head);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nX-Origin: {}\r\n{}\r\n{body}",
                    body.len(),
                    o.name,
                    if close { "Connection: close\r\n" } else { "" }
                );
                if conn.writer().write_all(resp.as_bytes()).is_err()
                    || !tls_flush(&mut conn, &mut sock)
                {
                    return;
                }
                if close {
                    conn.send_close_notify();
                    tls_flush(&mut conn, &mut sock);
                    let _ = sock.shutdown(std::net::Shutdown::Write);
                    return;
                }
                last = Instant::now();
                continue;
            }
        }
        if o.stop.load(Ordering::Relaxed) {
            return;
        }
        let idle_close = *o.idle_close.lock().expect("lock");
        if let Some((after, notify)) = idle_close {
            if buf.is_empty() && last.elapsed() >= after {
                if notify {
                    conn.send_close_notify();
                    tls_flush(&mut conn, &mut sock);
                }
                let _ = sock.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
        match conn.read_tls(&mut sock) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => continue,
            Err(_) => return,
        }
        match conn.process_new_packets() {
            Ok(st) if st.peer_has_closed() && st.plaintext_bytes_to_read() == 0 => return,
            Ok(_) => {}
            Err(_) => {
                tls_flush(&mut conn, &mut sock);
                return;
            }
        }
        // A key update or the like may want an answer.
        if !tls_flush(&mut conn, &mut sock) {
            return;
        }
    }
}

// ------------------------------------------------ a member that answers one way

/// A member that answers every connection's first request head with
/// `answer` and records everything each connection sent, to its end.
pub struct RawMember {
    pub addr: SocketAddr,
    /// Bytes per connection, in accept order.
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl RawMember {
    pub fn start(answer: &'static str) -> RawMember {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                let seen = s2.clone();
                std::thread::spawn(move || {
                    let i = {
                        let mut s = seen.lock().expect("lock");
                        s.push(Vec::new());
                        s.len() - 1
                    };
                    let mut answered = false;
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut s = seen.lock().expect("lock");
                        s[i].extend_from_slice(&buf[..n]);
                        if !answered && s[i].windows(4).any(|w| w == b"\r\n\r\n") {
                            answered = true;
                            let _ = c.write_all(answer.as_bytes());
                        }
                    }
                });
            }
        });
        RawMember { addr, seen }
    }

    /// Everything every connection sent, as text.
    pub fn all(&self) -> String {
        let s = self.seen.lock().expect("lock");
        s.iter().map(|c| String::from_utf8_lossy(c)).collect()
    }
}

/// The segments a client socket has received so far (TCP_INFO
/// `tcpi_segs_in`): how many packets a response took on loopback.
pub fn segments_in(s: &std::net::TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed tcp_info is a valid value; getsockopt writes at
    // most `len` bytes into it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: as above; a valid descriptor, the buffer and its length.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    info.tcpi_segs_in
}
