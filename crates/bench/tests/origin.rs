//! The origin emulator over real sockets: sizes, counters, body checks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use switchyard_bench::content::{self, Sum};
use switchyard_bench::origin::{spawn_origin, OriginOpts};

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn read_resp(r: &mut BufReader<TcpStream>) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    Resp {
        status,
        headers,
        body,
    }
}

fn conn(a: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

#[test]
fn serves_the_report_sizes_with_checksums_and_counts_connections() {
    let o = spawn_origin(&[any_port()], OriginOpts::default()).unwrap();
    let a = o.addrs()[0];
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(conn(a));
    }
    let sizes = [1u64, 128, 1024, 8192, 65536, 524288, 1048576];
    let mut requests = 0;
    for (i, n) in sizes.iter().enumerate() {
        let (s, r) = &mut conns[i % 3];
        write!(s, "GET /size/{n} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let resp = read_resp(r);
        requests += 1;
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body.len() as u64, *n, "size {n}");
        assert_eq!(resp.header("x-origin"), Some(a.to_string().as_str()));
        let sum = u64::from_str_radix(resp.header("x-body-sum").unwrap(), 16).unwrap();
        assert_eq!(sum, Sum::of(&resp.body), "checksum of {n}");
    }
    // Report 000: the 512 KB object is the 64 KB one repeated.
    let (s, r) = &mut conns[0];
    write!(s, "GET /size/524288 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let big = read_resp(r);
    write!(s, "GET /images/size/65536 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let small = read_resp(r);
    write!(s, "GET /obj/0.2k.html HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let ietf = read_resp(r);
    requests += 3;
    for k in 0..8 {
        assert_eq!(&big.body[k * 65536..(k + 1) * 65536], &small.body[..]);
    }
    assert_eq!(ietf.body.len(), 205);
    write!(s, "GET /status/503 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_resp(r).status, 503);
    write!(s, "GET /nothing-here HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_resp(r).status, 404);
    requests += 2;

    let st = o.stats();
    assert_eq!(st.conns_accepted, 3);
    assert_eq!(st.conns_open, 3);
    assert_eq!(st.requests, requests);
    drop(conns);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while o.stats().conns_open != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(o.stats().conns_open, 0);
}

#[test]
fn checks_post_bodies_and_counts_forwarded_for() {
    let o = spawn_origin(&[any_port()], OriginOpts::default()).unwrap();
    let (mut s, mut r) = conn(o.addrs()[0]);
    let body = content::post_body(3000);
    let sum = Sum::of(&body);
    // Intact body, Content-Length framing, with X-Forwarded-For.
    write!(
        s,
        "POST /size/128 HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.1.1.1\r\nContent-Length: {}\r\nX-Body-Sum: {sum:016x}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    assert_eq!(read_resp(&mut r).status, 200);
    // Intact body, chunked framing.
    write!(
        s,
        "POST /size/128 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Body-Sum: {sum:016x}\r\n\r\n"
    )
    .unwrap();
    for c in body.chunks(1000) {
        write!(s, "{:x}\r\n", c.len()).unwrap();
        s.write_all(c).unwrap();
        s.write_all(b"\r\n").unwrap();
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    assert_eq!(read_resp(&mut r).status, 200);
    // A corrupted body is refused and counted.
    let mut bad = body.clone();
    bad[10] ^= 1;
    write!(
        s,
        "POST /size/128 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nX-Body-Sum: {sum:016x}\r\n\r\n",
        bad.len()
    )
    .unwrap();
    s.write_all(&bad).unwrap();
    assert_eq!(read_resp(&mut r).status, 422);
    let st = o.stats();
    assert_eq!(st.posts, 3);
    assert_eq!(st.body_checked, 3);
    assert_eq!(st.body_bad, 1);
    assert_eq!(st.xff_seen, 1);
}

#[test]
fn objects_are_html_like_and_compress_60_to_80_percent() {
    let Some(gzip) = switchyard_bench::sys::which("gzip") else {
        eprintln!("skipped: gzip is not installed");
        return;
    };
    for n in [65536u64, 1048576] {
        let body = content::body(n);
        assert!(body.starts_with(b"<!DOCTYPE html>"));
        let mut child = std::process::Command::new(&gzip)
            .arg("-c")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let data = body.to_vec();
        let w = std::thread::spawn(move || stdin.write_all(&data));
        let out = child.wait_with_output().unwrap();
        w.join().unwrap().unwrap();
        let saved = 1.0 - out.stdout.len() as f64 / n as f64;
        assert!(
            (0.6..=0.8).contains(&saved),
            "{n} bytes compress by {:.0} %",
            saved * 100.0
        );
    }
}

#[test]
fn stops_on_drop() {
    let o = spawn_origin(
        &[any_port(), any_port()],
        OriginOpts {
            threads: 2,
            ..OriginOpts::default()
        },
    )
    .unwrap();
    let addrs = o.addrs().to_vec();
    assert_eq!(addrs.len(), 2);
    for a in &addrs {
        let (mut s, mut r) = conn(*a);
        write!(s, "GET /size/10 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(read_resp(&mut r).body.len(), 10);
    }
    drop(o);
    for a in &addrs {
        assert!(TcpStream::connect(a).is_err(), "{a} still accepts");
    }
}

/// The mean number of open connections over a window comes from their
/// lifetimes, not from samples: two connections held for the window count
/// as two, and connections opened and closed between samples still count.
#[test]
fn open_connections_are_integrated_over_time() {
    let o = spawn_origin(&[any_port()], OriginOpts::default()).unwrap();
    let before = o.stats();
    let held: Vec<_> = (0..2).map(|_| conn(o.addrs()[0])).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while o.stats().conns_open != 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = o.stats();
    std::thread::sleep(Duration::from_millis(300));
    let window = o.stats().since(&start);
    let mean = window.conn_us as f64 / window.at_us as f64;
    assert!((1.9..=2.1).contains(&mean), "mean open {mean}");
    drop(held);
    while o.stats().conns_open != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Short-lived connections: none is open at any later sample.
    let start = o.stats();
    for _ in 0..20 {
        let (mut s, mut r) = conn(o.addrs()[0]);
        write!(s, "GET /size/1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(read_resp(&mut r).status, 200);
    }
    while o.stats().conns_open != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let window = o.stats().since(&start);
    assert_eq!(window.conns_open, 0);
    assert!(window.conn_us > 0, "{window:?}");
    assert!(o.stats().since(&before).conn_us >= 2 * 300_000);
}
