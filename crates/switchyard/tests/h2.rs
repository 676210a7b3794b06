//! The HTTP/2 front end end to end: h2spec against TLS (ALPN h2) and h2c
//! listeners, streams proxied onto HTTP/1.1 members, floods answered with
//! GOAWAY(ENHANCE_YOUR_CALM), graceful GOAWAY on shutdown.
//!
//! Needs h2spec (`go install github.com/summerwind/h2spec/cmd/h2spec@latest`,
//! done by scripts/test.sh), curl built with nghttp2 and the openssl CLI.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;

fn free_addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().expect("addr")
}

/// A self-signed certificate for 127.0.0.1 / localhost.
fn cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&k)
        .arg("-out")
        .arg(&c)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(out.status.success(), "openssl: {out:?}");
    (c, k)
}

struct Setup {
    sy: Switchyard,
    origin: Origin,
    /// h2c beside HTTP/1.1, h2c only, TLS with ALPN h2.
    mixed: SocketAddr,
    only: SocketAddr,
    tls: SocketAddr,
}

fn setup(http2: &str) -> Setup {
    let origin = Origin::start("o1");
    let (mixed, only, tls) = (free_addr(), free_addr(), free_addr());
    let dir = temp_dir("h2cert");
    let (c, k) = cert(&dir);
    let cfg = format!(
        r#"
[http2]
{http2}

[[vserver]]
name = "mixed"
listen = ["{mixed}"]
default_pool = "p"
h2c = true

[[vserver]]
name = "only"
listen = ["{only}"]
default_pool = "p"
h2c_only = true

[[vserver]]
name = "tls"
listen = ["{tls}"]
default_pool = "p"
[vserver.tls]
certificates = [{{ cert = "{}", key = "{}" }}]
alpn = ["h2", "http/1.1"]

[[pool]]
name = "p"
persistence = {{ type = "cookie", cookie = "SY" }}
[[pool.member]]
address = "{}"
"#,
        c.display(),
        k.display(),
        origin.addr
    );
    let sy = Switchyard::start(&cfg, &[mixed, only, tls]);
    Setup {
        sy,
        origin,
        mixed,
        only,
        tls,
    }
}

fn vs_stats(sy: &Switchyard, name: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/stats.json")).expect("stats json");
    v["vservers"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no vserver {name} in {v}"))
}

fn h2spec() -> PathBuf {
    if let Ok(p) = std::env::var("H2SPEC") {
        return p.into();
    }
    let home = std::env::var("HOME").unwrap_or_default();
    for p in [
        format!("{home}/go/bin/h2spec"),
        "/usr/local/bin/h2spec".to_string(),
    ] {
        if Path::new(&p).exists() {
            return p.into();
        }
    }
    "h2spec".into()
}

/// Runs h2spec; returns (tests, passed, failed) and the report.
fn run_h2spec(addr: SocketAddr, tls: bool, sections: &[&str]) -> (u32, u32, u32, String) {
    let mut c = Command::new(h2spec());
    c.args(sections)
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "-o", "5"])
        // Some cases need a body larger than their tiny windows.
        .args(["-P", "/size/2000"]);
    if tls {
        c.args(["-t", "-k"]);
    }
    let out = c
        .output()
        .expect("run h2spec (scripts/test.sh installs it with go install)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains(" tests, "))
        .unwrap_or_else(|| panic!("no h2spec summary:\n{text}"));
    // "145 tests, 145 passed, 0 skipped, 0 failed"
    let nums: Vec<u32> = summary
        .split(|ch: char| !ch.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    assert_eq!(nums.len(), 4, "{summary}");
    (nums[0], nums[1], nums[3], text)
}

#[test]
fn h2spec_passes_every_case_over_tls_and_h2c() {
    let s = setup("");
    for (addr, tls, what) in [(s.tls, true, "TLS h2"), (s.only, false, "h2c only")] {
        let (tests, passed, failed, report) = run_h2spec(addr, tls, &[]);
        assert!(
            tests >= 145,
            "{what}: only {tests} h2spec cases ran:\n{report}"
        );
        assert_eq!(
            (passed, failed),
            (tests, 0),
            "{what}: h2spec failures:\n{report}\n{}",
            s.sy.log()
        );
    }
    // Beside HTTP/1.1 a bad preface is an HTTP/1 request and gets a 400
    // (h2spec 3.5/2 expects a bare close): every other case passes.
    let (tests, passed, failed, report) = run_h2spec(s.mixed, false, &["generic", "hpack"]);
    assert!(tests > 50 && failed == 0 && passed == tests, "{report}");
    let (_, _, failed, report) = run_h2spec(s.mixed, false, &["http2"]);
    assert_eq!(failed, 1, "{report}");
    assert!(
        report.contains("× 2: Sends invalid connection preface"),
        "{report}"
    );
    // The origin served h2spec's requests (it really is proxying).
    assert!(s.origin.requests() > 100);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

type H2 = h2::client::SendRequest<Bytes>;

async fn h2_connect(addr: SocketAddr) -> (H2, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    (send, tokio::spawn(conn))
}

struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn h2_request(
    send: &mut H2,
    req: http::Request<()>,
    body: &[&[u8]],
) -> Result<Reply, h2::Error> {
    let mut s = send.clone().ready().await?;
    let (resp, mut out) = s.send_request(req, body.is_empty())?;
    for (i, part) in body.iter().enumerate() {
        out.send_data(Bytes::copy_from_slice(part), i + 1 == body.len())?;
    }
    let resp = resp.await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut recv = resp.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    Ok(Reply {
        status,
        headers,
        body: data,
    })
}

fn get_req(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://example.test{path}"))
        .body(())
        .expect("request")
}

#[test]
fn streams_are_proxied_to_http1_members_with_the_same_rules() {
    let s = setup("");
    let rt = runtime();
    rt.block_on(async {
        let (mut h2, _conn) = h2_connect(s.mixed).await;
        // Split cookies are joined; :authority becomes Host; te goes.
        let req = http::Request::get("http://example.test/a?x=1")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("te", "trailers")
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &[]).await.expect("GET");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"o1\n");
        assert_eq!(
            r.headers.get("x-origin").map(|v| v.as_bytes()),
            Some(&b"o1"[..])
        );
        // Persistence applies to HTTP/2 clients too.
        let cookie = r.headers.get("set-cookie").expect("persistence cookie");
        assert!(cookie.to_str().expect("ascii").starts_with("SY="));
        let seen = s.origin.seen().pop().expect("origin saw it");
        assert_eq!(seen.request_line(), "GET /a?x=1 HTTP/1.1");
        assert_eq!(seen.header("host").as_deref(), Some("example.test"));
        assert_eq!(seen.header("cookie").as_deref(), Some("a=1; b=2"));
        assert_eq!(seen.header("te"), None);
        assert_eq!(seen.header("x-forwarded-proto").as_deref(), Some("http"));
        assert_eq!(seen.header("x-forwarded-for").as_deref(), Some("127.0.0.1"));

        // A body without a length goes chunked, in several DATA frames.
        let part: Vec<u8> = (0..40_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let req = http::Request::post("http://example.test/echo")
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &[&part, &part, &part])
            .await
            .expect("POST");
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 120_000);
        let seen = s.origin.seen().pop().expect("origin saw it");
        assert_eq!(seen.header("transfer-encoding").as_deref(), Some("chunked"));
        assert_eq!(seen.body.len(), 120_000);
        assert_eq!(&seen.body[40_000..80_000], &part[..]);

        // With a length, the length is kept.
        let req = http::Request::post("http://example.test/echo")
            .header("content-length", "5")
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &[b"hello"]).await.expect("POST");
        assert_eq!(r.body, b"hello");
        let seen = s.origin.seen().pop().expect("origin saw it");
        assert_eq!(seen.header("content-length").as_deref(), Some("5"));
        assert_eq!(seen.header("transfer-encoding"), None);

        // HEAD: the length, no body.
        let req = http::Request::head("http://example.test/size/777")
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &[]).await.expect("HEAD");
        assert_eq!(r.status, 200);
        assert!(r.body.is_empty());
        assert_eq!(
            r.headers.get("content-length").map(|v| v.as_bytes()),
            Some(&b"777"[..])
        );

        // 40 concurrent streams on the one connection, each its own size.
        let mut tasks = Vec::new();
        for i in 0..40usize {
            let mut h = h2.clone();
            tasks.push(tokio::spawn(async move {
                let r = h2_request(&mut h, get_req(&format!("/size/{}", 1000 + i * 997)), &[])
                    .await
                    .expect("concurrent GET");
                (i, r.status, r.body.len())
            }));
        }
        for t in tasks {
            let (i, status, len) = t.await.expect("task");
            assert_eq!((status, len), (200, 1000 + i * 997));
        }
        // A large response crosses many flow-control windows.
        let r = h2_request(&mut h2, get_req("/size/3000000"), &[])
            .await
            .expect("big GET");
        assert_eq!(r.body.len(), 3_000_000);
    });
    let v = vs_stats(&s.sy, "mixed");
    assert_eq!(v["h2_connections"], 1, "{v}");
    assert_eq!(v["h2_streams"], 45, "{v}");
    // Plain HTTP/1.1 still works on the h2c vserver.
    let r = get(s.mixed, "/plain");
    assert_eq!(r.status, 200);
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ])
        .args(args)
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn alpn_picks_h2_or_http11_and_curl_speaks_both() {
    let s = setup("");
    let url = format!("https://127.0.0.1:{}/x", s.tls.port());
    assert_eq!(curl(&["--http2", &url]), "2 200");
    assert_eq!(curl(&["--http1.1", &url]), "1.1 200");
    let url = format!("http://127.0.0.1:{}/x", s.only.port());
    assert_eq!(curl(&["--http2-prior-knowledge", &url]), "2 200");
    let url = format!("http://127.0.0.1:{}/x", s.mixed.port());
    assert_eq!(curl(&["--http2-prior-knowledge", &url]), "2 200");
    assert_eq!(curl(&[&url]), "1.1 200");
    // Members see https from the TLS listener.
    let https = s
        .origin
        .seen()
        .iter()
        .filter(|x| x.header("x-forwarded-proto").as_deref() == Some("https"))
        .count();
    assert_eq!(https, 2);
    // An HTTP/1 request on the h2c-only listener is closed unanswered.
    let mut c = TcpStream::connect(s.only).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .expect("write");
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"HTTP/1.1"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

// ------------------------------------------------------------ raw frames

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// GET / with :authority "a", in HPACK static-table and literal form.
fn get_headers(stream: u32) -> Vec<u8> {
    // :method GET, :path /, :scheme http, :authority (literal, index 1) "a".
    let block = [0x82, 0x84, 0x86, 0x01, 0x01, b'a'];
    frame(0x1, 0x4 | 0x1, stream, &block)
}

/// Reads frames until EOF or `within`; returns the GOAWAY error code seen.
fn goaway_code(c: &mut TcpStream, within: Duration) -> Option<u32> {
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    while start.elapsed() < within {
        match c.read(&mut tmp) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    let mut at = 0;
    let mut code = None;
    while at + 9 <= buf.len() {
        let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
        if buf[at + 3] == 0x7 && at + 9 + 8 <= buf.len() {
            let p = &buf[at + 9..];
            code = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
        }
        at += 9 + len;
    }
    code
}

fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

const ENHANCE_YOUR_CALM: u32 = 0xb;

#[test]
fn rapid_reset_flood_is_cut_and_other_clients_are_served() {
    let s = setup("max_client_resets = 50\nabuse_window = \"10s\"");
    s.origin.set(|b| b.delay = Duration::from_millis(20));
    let victim = {
        let addr = s.mixed;
        std::thread::spawn(move || {
            let mut ok = 0;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                if get(addr, "/victim").status == 200 {
                    ok += 1;
                }
            }
            ok
        })
    };
    let cpu_before = cpu_ticks(s.sy.pid());
    let started = Instant::now();
    let mut connections = 0;
    let mut calm = 0;
    // Each connection: HEADERS then RST_STREAM(CANCEL), 500 times. Half the
    // connections send it all in one write (streams reset before they are
    // accepted), half in small paced batches (streams accepted, proxied,
    // then reset: the rapid reset of CVE-2023-44487).
    while started.elapsed() < Duration::from_secs(3) && connections < 20 {
        let paced = connections % 2 == 1;
        let mut c = TcpStream::connect(s.only).expect("connect");
        connections += 1;
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[]));
        for i in 0..500u32 {
            let id = 1 + 2 * i;
            out.extend(get_headers(id));
            if paced {
                // The stream is accepted and proxied before its reset comes.
                if c.write_all(&out).is_err() {
                    break;
                }
                out.clear();
                std::thread::sleep(Duration::from_millis(1));
            }
            out.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
        }
        let _ = c.write_all(&out);
        if goaway_code(&mut c, Duration::from_secs(2)) == Some(ENHANCE_YOUR_CALM) {
            calm += 1;
        }
    }
    let cpu = cpu_ticks(s.sy.pid()) - cpu_before;
    let wall = started.elapsed();
    let ok = victim.join().expect("victim");
    assert_eq!(
        calm, connections,
        "every flooding connection is told to calm down"
    );
    assert!(ok >= 20, "the other client was served: {ok} requests");
    let v = vs_stats(&s.sy, "only");
    assert_eq!(v["h2_abuse_closes"], connections, "{v}");
    // Streams reset before the budget ran out may reach the member; the
    // rest never do (500 per connection were sent).
    let attacked = s.origin.requests() - ok;
    assert!(
        attacked <= connections * 60,
        "{attacked} flood requests reached the member over {connections} connections"
    );
    // CPU stays bounded: well under one core over the flood.
    let cpu_s = cpu as f64 / 100.0;
    assert!(
        cpu_s < wall.as_secs_f64() * 0.8,
        "switchyard used {cpu_s:.2} s CPU in {wall:?}"
    );
    // The paced floods are caught by Switchyard's own reset budget.
    assert!(s.sy.wait_for_log("rapid reset"), "{}", s.sy.log());
}

#[test]
fn ping_and_settings_floods_are_cut() {
    let s = setup("max_control_frames = 200");
    for kind in [0x6u8, 0x4] {
        let mut c = TcpStream::connect(s.only).expect("connect");
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[]));
        for _ in 0..1000 {
            if kind == 0x6 {
                out.extend(frame(0x6, 0, 0, &[7; 8]));
            } else {
                out.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
            }
        }
        let _ = c.write_all(&out);
        assert_eq!(
            goaway_code(&mut c, Duration::from_secs(3)),
            Some(ENHANCE_YOUR_CALM),
            "frame type {kind}"
        );
    }
    // A polite client on the same listener is unaffected.
    let rt = runtime();
    rt.block_on(async {
        let (mut h2, _c) = h2_connect(s.only).await;
        let r = h2_request(&mut h2, get_req("/"), &[]).await.expect("GET");
        assert_eq!(r.status, 200);
    });
    assert_eq!(vs_stats(&s.sy, "only")["h2_abuse_closes"], 2);
}

/// (type, stream) of every whole frame in `buf`.
fn frames(buf: &[u8]) -> Vec<(u8, u32)> {
    frame_heads(buf)
        .into_iter()
        .map(|(kind, _, stream, _)| (kind, stream))
        .collect()
}

/// (type, flags, stream, payload length) of every whole frame in `buf`.
fn frame_heads(buf: &[u8]) -> Vec<(u8, u8, u32, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 9 <= buf.len() {
        let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
        if at + 9 + len > buf.len() {
            break;
        }
        let stream = u32::from_be_bytes([buf[at + 5], buf[at + 6], buf[at + 7], buf[at + 8]]);
        out.push((buf[at + 3], buf[at + 4], stream & 0x7fff_ffff, len));
        at += 9 + len;
    }
    out
}

/// (kind, payload) of every whole frame in `buf`.
fn frame_payloads(buf: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    for (kind, _, _, len) in frame_heads(buf) {
        out.push((kind, &buf[at + 9..at + 9 + len]));
        at += 9 + len;
    }
    out
}

/// Reads from `c` until `done` says yes of what came, EOF, or `within`:
/// what came, and when `done` said yes.
fn read_until(
    c: &mut TcpStream,
    within: Duration,
    done: impl Fn(&[u8]) -> bool,
) -> (Vec<u8>, Option<Duration>) {
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let start = Instant::now();
    let mut got = Vec::new();
    let mut tmp = [0u8; 65536];
    while start.elapsed() < within {
        if let Ok(n) = c.read(&mut tmp) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&tmp[..n]);
        }
        if done(&got) {
            return (got, Some(start.elapsed()));
        }
    }
    (got, None)
}

fn rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn hpack_bombs_and_continuation_floods_are_bounded() {
    let s = setup("max_header_list_size = 16384");
    let rss_before = rss_kb(s.sy.pid());
    // HPACK bomb: one 4000-byte field into the dynamic table, then 3000
    // one-byte references to it: 12 MB of headers from a 7 KB frame.
    for round in 0..5u32 {
        let mut c = TcpStream::connect(s.only).expect("connect");
        let mut block = vec![0x82, 0x84, 0x86, 0x01, 0x01, b'a'];
        block.extend_from_slice(&[0x40, 0x05]);
        block.extend_from_slice(b"x-big");
        block.extend_from_slice(&[0x7f, 0xa1, 0x1e]); // 4000 (7-bit prefix)
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, 3000)); // index 62: the field above
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[]));
        out.extend(frame(0x1, 0x4 | 0x1, 1, &block));
        let _ = c.write_all(&out);
        let mut got = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let mut tmp = [0u8; 4096];
        while let Ok(n) = c.read(&mut tmp) {
            if n == 0 || got.len() > 100_000 {
                break;
            }
            got.extend_from_slice(&tmp[..n]);
            if frames(&got).iter().any(|(_, stream)| *stream == 1) {
                break;
            }
        }
        let frames = frames(&got);
        // Refused: a 431 response head, a stream reset or a GOAWAY.
        assert!(
            frames.iter().any(
                |(kind, stream)| (*kind == 0x1 || *kind == 0x3) && *stream == 1 || *kind == 0x7
            ),
            "round {round}: frames {frames:?}"
        );
    }
    // CONTINUATION flood: a header block that never ends, in 1-byte pieces.
    let mut c = TcpStream::connect(s.only).expect("connect");
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x1, 3, &[0x82, 0x84, 0x86]));
    for _ in 0..20_000 {
        out.extend(frame(0x9, 0, 3, &[0x40]));
    }
    let _ = c.write_all(&out);
    assert!(
        goaway_code(&mut c, Duration::from_secs(3)).is_some(),
        "a CONTINUATION flood ends the connection with GOAWAY"
    );
    assert!(
        !s.origin.seen().iter().any(|x| x.header("x-big").is_some()),
        "no bomb reached the member"
    );
    let grown = rss_kb(s.sy.pid()).saturating_sub(rss_before);
    assert!(grown < 20_000, "RSS grew by {grown} kB");
    // Everyone else is still served.
    runtime().block_on(async {
        let (mut h2, _c) = h2_connect(s.only).await;
        let r = h2_request(&mut h2, get_req("/"), &[]).await.expect("GET");
        assert_eq!(r.status, 200);
    });
}

#[test]
fn oversized_header_lists_are_refused_and_limits_are_announced() {
    let s = setup("max_header_list_size = 4096\nmax_concurrent_streams = 7");
    let rt = runtime();
    rt.block_on(async {
        let (mut h2, _c) = h2_connect(s.only).await;
        let r = h2_request(&mut h2, get_req("/"), &[]).await.expect("GET");
        assert_eq!(r.status, 200);
        assert_eq!(h2.clone().ready().await.map(|_| ()).ok(), Some(()));
        let req = http::Request::get("http://example.test/big")
            .header("x-big", "v".repeat(8000))
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &[]).await;
        match r {
            Ok(r) => assert_eq!(r.status, 431),
            Err(e) => assert!(e.is_reset() || e.is_go_away(), "{e}"),
        }
    });
    assert!(
        !s.origin
            .seen()
            .iter()
            .any(|x| x.request_line().contains("/big")),
        "the oversized request must not reach the member"
    );
    // SETTINGS_MAX_CONCURRENT_STREAMS is what was configured: nghttp's
    // verbose output shows the server's SETTINGS.
    let out = Command::new("nghttp")
        .args(["-nv", &format!("http://127.0.0.1:{}/", s.only.port())])
        .output()
        .expect("run nghttp (apt-get install nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):7]"),
        "{text}"
    );
}

#[test]
fn shutdown_sends_goaway_and_finishes_open_streams() {
    let s = setup("");
    s.origin.set(|b| b.delay = Duration::from_millis(800));
    let rt = runtime();
    let mut sy = s.sy;
    rt.block_on(async {
        let (mut h2, conn) = h2_connect(s.only).await;
        let mut h = h2.clone();
        let slow = tokio::spawn(async move { h2_request(&mut h, get_req("/slow"), &[]).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        sy.signal("TERM");
        let r = slow
            .await
            .expect("task")
            .expect("the open stream completes");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"o1\n");
        // GOAWAY: the connection ends cleanly and takes no new streams.
        let ended = tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("connection ends after GOAWAY")
            .expect("task");
        assert!(ended.is_ok(), "{ended:?}");
        assert!(h2_request(&mut h2, get_req("/late"), &[]).await.is_err());
    });
    assert_eq!(sy.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!s
        .origin
        .seen()
        .iter()
        .any(|x| x.request_line().contains("/late")));
}

#[test]
fn check_refuses_h2c_on_tls_and_unknown_alpn() {
    let dir = temp_dir("h2check");
    let (c, k) = cert(&dir);
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        format!(
            r#"[[vserver]]
name = "v"
listen = ["127.0.0.1:1"]
default_pool = "p"
h2c = true
[vserver.tls]
certificates = [{{ cert = "{}", key = "{}" }}]
alpn = ["h2", "spdy/3"]
[[pool]]
name = "p"
[[pool.member]]
address = "127.0.0.1:2"
"#,
            c.display(),
            k.display()
        ),
    )
    .expect("write");
    let out = Command::new(bin())
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .expect("run check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad.toml:5:"), "{err}");
    assert!(err.contains("h2c is cleartext HTTP/2"), "{err}");
    assert!(
        err.contains("bad.toml:8:") && err.contains("\"spdy/3\""),
        "{err}"
    );
}

// ------------------------------------------------------ HTTP/2 members

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A gRPC-like h2c member: answers every stream at once with its head,
/// echoes each DATA frame as it comes, and ends with trailers that carry
/// grpc-status and the request's own trailer back.
struct H2Origin {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// (uri, headers) of every stream.
    seen: Arc<Mutex<Vec<(String, http::HeaderMap)>>>,
}

fn h2_origin() -> H2Origin {
    h2_origin_with(None)
}

/// Over TLS when given a server config (its ALPN decides what it offers).
fn h2_origin_with(tls: Option<Arc<rustls::ServerConfig>>) -> H2Origin {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    l.set_nonblocking(true).expect("nonblocking");
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, s) = (connections.clone(), seen.clone());
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).expect("listener");
            while let Ok((tcp, _)) = l.accept().await {
                c.fetch_add(1, Ordering::Relaxed);
                let s = s.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve_h2(tcp, s).await,
                        Some(cfg) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
                            if let Ok(t) = acceptor.accept(tcp).await {
                                serve_h2(t, s).await;
                            }
                        }
                    }
                });
            }
        })
    });
    H2Origin {
        addr,
        connections,
        seen,
    }
}

async fn serve_h2<T>(io: T, seen: Arc<Mutex<Vec<(String, http::HeaderMap)>>>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((req, respond))) = conn.accept().await {
        tokio::spawn(grpc_echo(req, respond, seen.clone()));
    }
}

async fn grpc_echo(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    seen: Arc<Mutex<Vec<(String, http::HeaderMap)>>>,
) {
    let (parts, mut body) = req.into_parts();
    seen.lock()
        .expect("lock")
        .push((parts.uri.to_string(), parts.headers.clone()));
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("head");
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        if send.send_data(chunk, false).is_err() {
            return;
        }
    }
    let theirs = body.trailers().await.ok().flatten();
    let mut t = http::HeaderMap::new();
    t.insert("grpc-status", http::HeaderValue::from_static("0"));
    if let Some(v) = theirs.and_then(|t| t.get("x-client-trailer").cloned()) {
        t.insert("x-echo-trailer", v);
    }
    let _ = send.send_trailers(t);
}

/// gRPC's bidirectional streaming from an HTTP/3 client (aioquic,
/// tests/h3/stream.py) to an h2 member, as from an HTTP/2 one: each piece
/// of the body reaches the member and comes back before the client sends
/// the next (a proxy that read the whole body first would never answer),
/// and trailers go through both ways.
#[test]
fn grpc_streams_from_http3_clients_flow_both_ways_to_h2_members() {
    let Some(py) = common::h3::aioquic_python() else {
        return;
    };
    let origin = h2_origin();
    let pki = Pki::new("h3-grpc");
    let (cert, key) = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let listen = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"grpc\"\nlisten = [\"{listen}\"]\ndefault_pool = \"g\"\n\
         [vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n[vserver.http3]\n\
         [[pool]]\nname = \"g\"\nprotocol = \"h2\"\n[[pool.member]]\naddress = \"{}\"\n",
        cert.display(),
        key.display(),
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let out = common::h3::aioquic_script(
        &py,
        "stream.py",
        (listen, &pki.ca(), "site.test"),
        &serde_json::json!({
            "path": "/echo.Echo/Chat",
            "messages": ["one", "two", "three"],
            "trailers": [["x-client-trailer", "bye"]],
        }),
        &[],
        None,
    );
    assert_eq!(
        out["echoes"],
        serde_json::json!([true, true, true]),
        "{out}"
    );
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["ended"], true, "{out}");
    let trailers = out["trailers"].to_string();
    assert!(trailers.contains(r#"["grpc-status","0"]"#), "{out}");
    assert!(trailers.contains(r#"["x-echo-trailer","bye"]"#), "{out}");
    let seen = origin.seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1["te"], "trailers");
}

#[test]
fn grpc_streams_relay_to_h2_members_with_trailers_both_ways() {
    let origin = h2_origin();
    let listen = free_addr();
    let cfg = format!(
        r#"
[global]
workers = 1   # one worker: one member connection, deterministically

[[vserver]]
name = "grpc"
listen = ["{listen}"]
default_pool = "g"
h2c = true
response_headers = {{ set = {{ "x-via" = "switchyard" }} }}

[[pool]]
name = "g"
protocol = "h2"
idle_timeout = "1500ms"
[[pool.member]]
address = "{}"
"#,
        origin.addr
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    runtime().block_on(async {
        let (h2, _c) = h2_connect(listen).await;
        let req = http::Request::post("http://grpc.test/echo.Echo/Chat")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("req");
        let mut s = h2.clone().ready().await.expect("ready");
        let (resp, mut up) = s.send_request(req, false).expect("send");
        up.send_data(Bytes::from_static(b"one"), false)
            .expect("data");
        // The head and the first echo come back while the request is open.
        let resp = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .expect("head before the request ends")
            .expect("response");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        assert_eq!(resp.headers()["x-via"], "switchyard");
        let mut body = resp.into_body();
        let c1 = body.data().await.expect("chunk").expect("ok");
        assert_eq!(&c1[..], b"one");
        up.send_data(Bytes::from_static(b"two"), false)
            .expect("data");
        let c2 = body.data().await.expect("chunk").expect("ok");
        assert_eq!(&c2[..], b"two");
        let mut t = http::HeaderMap::new();
        t.insert("x-client-trailer", http::HeaderValue::from_static("bye"));
        up.send_trailers(t).expect("trailers");
        assert!(body.data().await.is_none());
        let trailers = body.trailers().await.expect("trailers").expect("some");
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(trailers["x-echo-trailer"], "bye");

        // Unary calls in parallel share the one member connection.
        let mut tasks = Vec::new();
        for i in 0..20u8 {
            let mut h = h2.clone();
            tasks.push(tokio::spawn(async move {
                let req = http::Request::post("http://grpc.test/echo.Echo/Say")
                    .header("te", "trailers")
                    .body(())
                    .expect("req");
                let payload = vec![b'a' + i; 1000 + i as usize * 5000];
                let r = h2_request(&mut h, req, &[&payload]).await.expect("unary");
                (r.status, r.body == payload)
            }));
        }
        for t in tasks {
            assert_eq!(t.await.expect("task"), (200, true));
        }
    });
    assert_eq!(origin.connections.load(Ordering::Relaxed), 1);
    let seen = origin.seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 21);
    let (uri, headers) = &seen[0];
    assert_eq!(uri, "http://grpc.test/echo.Echo/Chat");
    assert_eq!(headers["te"], "trailers");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert!(headers.get("host").is_none());
    // HTTP/1.1 clients reach h2 members too: the body goes as DATA, the
    // answer (no length from the member) comes back chunked.
    let mut c = Client::connect(listen);
    for body in ["hello", "second request, same connection"] {
        c.send(
            format!(
                "POST /echo HTTP/1.1\r\nHost: h1.test\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        let r = c.read_response(false).expect("response");
        assert_eq!(r.status, 200);
        assert_eq!(r.body_text(), body);
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.header("x-via"), Some("switchyard"));
    }
    let seen = origin.seen.lock().expect("lock").clone();
    assert_eq!(seen[21].0, "http://h1.test/echo");
    let m = sy.member_stats("g", origin.addr);
    assert_eq!(m["requests"], 23, "{m}");
    // Unused past the pool's idle timeout, the member connection is closed.
    assert!(eventually(Duration::from_secs(5), || {
        sy.member_stats("g", origin.addr)["server_connections_active"] == 0
    }));
    assert_eq!(m["server_connections_total"], 1, "{m}");
}

fn tls_server_config(dir: &Path, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    let (c, k) = cert(dir);
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(&c)
        .expect("cert")
        .collect::<Result<Vec<_>, _>>()
        .expect("certs");
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&k).expect("key");
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Arc::new(cfg)
}

#[test]
fn h2_pools_reach_members_over_tls_with_alpn_h2() {
    let dir = temp_dir("h2tls");
    let good = h2_origin_with(Some(tls_server_config(&dir, &[b"h2"])));
    // A member that ignores ALPN (picks nothing): it does not speak h2.
    let h1_only = h2_origin_with(Some(tls_server_config(&dir, &[])));
    let listen = free_addr();
    let cfg = format!(
        r#"
[[vserver]]
name = "grpc"
listen = ["{listen}"]
default_pool = "good"
h2c_only = true
  [[vserver.policy]]
  match = {{ path_prefix = "/h1only/" }}
  action = {{ pool = "h1only" }}

[[pool]]
name = "good"
protocol = "h2"
tls = {{ verify = false }}
[[pool.member]]
address = "{}"

[[pool]]
name = "h1only"
protocol = "h2"
tls = {{ verify = false }}
[[pool.member]]
address = "{}"
"#,
        good.addr, h1_only.addr
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    runtime().block_on(async {
        let (mut h2, _c) = h2_connect(listen).await;
        for i in 0..5 {
            let req = http::Request::post(format!("http://grpc.test/svc/M{i}"))
                .header("te", "trailers")
                .body(())
                .expect("req");
            let r = h2_request(&mut h2, req, &[b"ping"]).await.expect("call");
            assert_eq!((r.status, &r.body[..]), (200, &b"ping"[..]));
        }
        let r = h2_request(&mut h2, get_req("/h1only/x"), &[])
            .await
            .expect("answer");
        assert_eq!(r.status, 502);
    });
    assert_eq!(
        good.connections.load(Ordering::Relaxed),
        1,
        "one TLS h2 connection, reused"
    );
    assert_eq!(good.seen.lock().expect("lock").len(), 5);
    assert!(h1_only.seen.lock().expect("lock").is_empty());
    assert!(sy.wait_for_log("did not choose HTTP/2"), "{}", sy.log());
}

#[test]
fn reload_that_turns_off_http2_sends_goaway_and_open_streams_finish() {
    let origin = Origin::start("o1");
    let listen = free_addr();
    let cfg = |h2: bool| {
        format!(
            "[[vserver]]\nname = \"v\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\nh2c = {h2}\n\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
            origin.addr
        )
    };
    let sy = Switchyard::start(&cfg(true), &[listen]);
    origin.set(|b| b.delay = Duration::from_millis(1500));
    runtime().block_on(async {
        let (mut h2, conn) = h2_connect(listen).await;
        let mut h = h2.clone();
        let slow = tokio::spawn(async move { h2_request(&mut h, get_req("/slow"), &[]).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Unchanged HTTP/2 settings: the connection is left alone.
        let (ok, out) = sy.reload_with(&cfg(true));
        assert!(ok, "{out}");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            !conn.is_finished(),
            "a reload that keeps h2c keeps the connection"
        );
        let (ok, out) = sy.reload_with(&cfg(false));
        assert!(ok, "{out}");
        let r = slow
            .await
            .expect("task")
            .expect("the open stream completes");
        assert_eq!(r.status, 200);
        let ended = tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("GOAWAY ends the connection")
            .expect("task");
        assert!(ended.is_ok(), "{ended:?}");
        assert!(h2_request(&mut h2, get_req("/late"), &[]).await.is_err());
    });
    assert!(sy.wait_for_log("GOAWAY: a reload removed"), "{}", sy.log());
    // HTTP/1.1 goes on being served on the same listener.
    origin.set(|b| b.delay = Duration::ZERO);
    assert_eq!(get(listen, "/after").status, 200);
}

/// A compressed stream from an h2 member keeps flowing: each echoed piece
/// reaches the client decodable while the stream is still open (the
/// encoder is flushed when the member pauses).
#[test]
fn compressed_streams_from_h2_members_flow_piece_by_piece() {
    let origin = h2_origin();
    let listen = free_addr();
    let cfg = format!(
        r#"
[global]
workers = 1

[[vserver]]
name = "stream"
listen = ["{listen}"]
default_pool = "g"
h2c = true
[vserver.compression]
algorithms = ["gzip"]
types = ["application/grpc"]
min_size = 0

[[pool]]
name = "g"
protocol = "h2"
[[pool.member]]
address = "{}"
"#,
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    runtime().block_on(async {
        let (h2, _c) = h2_connect(listen).await;
        let req = http::Request::post("http://stream.test/events")
            .header("accept-encoding", "gzip")
            .body(())
            .expect("req");
        let mut s = h2.clone().ready().await.expect("ready");
        let (resp, mut up) = s.send_request(req, false).expect("send");
        up.send_data(Bytes::from_static(b"first piece;"), false)
            .expect("data");
        let resp = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .expect("head before the request ends")
            .expect("response");
        assert_eq!(resp.headers()["content-encoding"], "gzip");
        let mut body = resp.into_body();
        let mut decoder = flate2::write::GzDecoder::new(Vec::new());
        // Until the first piece decodes: the request stays open, so only a
        // flush on the member's pause can get it here.
        for piece in [&b"first piece;"[..], b"second piece;"] {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !decoder.get_ref().windows(piece.len()).any(|w| w == piece) {
                let left = deadline.saturating_duration_since(Instant::now());
                let chunk = tokio::time::timeout(left, body.data())
                    .await
                    .unwrap_or_else(|_| {
                        panic!(
                            "{:?} did not arrive while the stream was open",
                            String::from_utf8_lossy(piece)
                        )
                    })
                    .expect("chunk")
                    .expect("ok");
                let _ = body.flow_control().release_capacity(chunk.len());
                decoder.write_all(&chunk).expect("gzip");
                decoder.flush().expect("gzip");
            }
            if piece == b"first piece;" {
                up.send_data(Bytes::from_static(b"second piece;"), false)
                    .expect("data");
            }
        }
        up.send_data(Bytes::new(), true).expect("end");
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            decoder.write_all(&chunk).expect("gzip");
        }
        let all = decoder.finish().expect("a whole gzip stream");
        assert_eq!(all, b"first piece;second piece;");
    });
}

/// A response body from an HTTP/1.1 member ends on its last DATA frame
/// (END_STREAM set on the data), not on an empty DATA frame of its own.
#[test]
fn response_ends_on_its_last_data_frame() {
    let s = setup("");
    let mut c = TcpStream::connect(s.only).expect("connect");
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    for stream in (1..=9).step_by(2) {
        out.extend(get_headers(stream));
    }
    c.write_all(&out).expect("write");
    c.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut tmp = [0u8; 65536];
    let ended = |seen: &[(u8, u8, u32, usize)]| {
        seen.iter()
            .filter(|(kind, flags, ..)| *kind == 0x0 && flags & 0x1 != 0)
            .count()
    };
    while ended(&frame_heads(&got)) < 5 {
        match c.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
        }
    }
    let seen = frame_heads(&got);
    for stream in (1..=9).step_by(2) {
        let data: Vec<_> = seen
            .iter()
            .filter(|(kind, _, s, _)| *kind == 0x0 && *s == stream)
            .collect();
        let last = data.last().expect("a DATA frame");
        assert!(last.1 & 0x1 != 0, "stream {stream}: {data:?}");
        assert!(
            data.iter().all(|(_, _, _, len)| *len > 0),
            "stream {stream} has an empty DATA frame: {data:?}"
        );
    }
}

/// A client that keeps its window shut gets its stream reset after
/// `client_send` (the response and the member behind it are let go); the
/// connection itself goes on serving.
#[test]
fn a_stream_whose_window_stays_shut_is_reset_after_client_send() {
    let s = setup("[timeouts]\nclient_send = \"1s\"");
    let mut c = TcpStream::connect(s.only).expect("connect");
    let mut out = PREFACE.to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: no DATA may come.
    out.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    let path = b"/size/100000";
    let mut block = vec![0x82, 0x86, 0x01, 0x01, b'a', 0x04, path.len() as u8];
    block.extend_from_slice(path);
    out.extend(frame(0x1, 0x4 | 0x1, 1, &block));
    c.write_all(&out).expect("write");
    let (got, reset_after) = read_until(&mut c, Duration::from_secs(5), |buf| {
        frame_heads(buf)
            .iter()
            .any(|(kind, _, stream, _)| *kind == 0x3 && *stream == 1)
    });
    let heads = frame_heads(&got);
    assert!(
        heads.iter().any(|(k, _, st, _)| *k == 0x1 && *st == 1),
        "the response head went out: {heads:?}"
    );
    assert!(
        !heads.iter().any(|(k, _, _, len)| *k == 0x0 && *len > 0),
        "no DATA past a shut window: {heads:?}"
    );
    let after = reset_after.expect("RST_STREAM on stream 1 within 5 s");
    assert!(after >= Duration::from_millis(900), "reset after {after:?}");
    // The connection still answers.
    c.write_all(&frame(0x6, 0, 0, b"pingpong")).expect("ping");
    let (_, pong) = read_until(&mut c, Duration::from_secs(3), |buf| {
        frame_heads(buf)
            .iter()
            .any(|(k, f, _, _)| *k == 0x6 && *f & 1 == 1)
    });
    assert!(pong.is_some(), "PING answered after the reset");
    assert_eq!(vs_stats(&s.sy, "only")["send_timeouts"], 1);
}

/// A request body that stops coming is cut after `client_body`, as on
/// HTTP/1: the client gets 408 on its stream, the connection goes on.
#[test]
fn a_request_body_that_stops_coming_gets_408_after_client_body() {
    let s = setup("[timeouts]\nclient_body = \"1s\"");
    let mut c = TcpStream::connect(s.only).expect("connect");
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    // POST /echo with content-length 1000, then 10 bytes and nothing more.
    let mut block = vec![0x83, 0x86, 0x01, 0x01, b'a', 0x04, 5];
    block.extend_from_slice(b"/echo");
    block.extend_from_slice(&[0x0f, 0x0d, 4]); // content-length (index 28), literal
    block.extend_from_slice(b"1000");
    out.extend(frame(0x1, 0x4, 1, &block));
    out.extend(frame(0x0, 0, 1, &[b'x'; 10]));
    c.write_all(&out).expect("write");
    // :status 408 is not in the static table: a literal, name index 8.
    let (got, head_at) = read_until(&mut c, Duration::from_secs(6), |buf| {
        frame_payloads(buf)
            .iter()
            .any(|(kind, p)| *kind == 0x1 && p.windows(3).any(|w| w == b"408"))
    });
    let after = head_at.unwrap_or_else(|| panic!("no 408 within 6 s: {:?}", frame_heads(&got)));
    assert!(after >= Duration::from_millis(900), "408 after {after:?}");
    // Everyone else is still served.
    runtime().block_on(async {
        let (mut h2, _c) = h2_connect(s.only).await;
        let r = h2_request(&mut h2, get_req("/"), &[]).await.expect("GET");
        assert_eq!(r.status, 200);
    });
}

/// Uploads of many windows' worth (the stream window is 256 KB) arrive
/// whole: every WINDOW_UPDATE the proxy owes reaches the client.
#[test]
fn uploads_across_many_windows_arrive_whole() {
    let s = setup("");
    runtime().block_on(async {
        let (mut h2, _c) = h2_connect(s.mixed).await;
        // Many windows' worth (the stream window is 256 KB): every
        // WINDOW_UPDATE the proxy owes must reach the client.
        // Printable: the test origin echoes text.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| b'!' + (i % 93) as u8).collect();
        let pieces: Vec<&[u8]> = big.chunks(100_000).collect();
        let req = http::Request::post("http://example.test/echo")
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &pieces).await.expect("POST 3 MB");
        assert_eq!(r.status, 200);
        let first = r.body.iter().zip(&big).position(|(a, b)| a != b);
        assert!(
            r.body == big,
            "the 3 MB echo came back altered: {} bytes, first difference at {first:?}",
            r.body.len()
        );
    });
}

/// A client that reads slowly over TLS still gets the whole response: when
/// the socket is full TLS keeps records back, and they must leave once it
/// drains even if nothing else is written after them.
#[test]
fn a_slow_reader_over_tls_gets_the_whole_response() {
    let s = setup("");
    let url = format!("https://127.0.0.1:{}/size/30000000", s.tls.port());
    let out = Command::new("curl")
        .args(["-sk", "--http2", "--max-time", "20", "--limit-rate", "12M"])
        .args([
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code} %{size_download}",
        ])
        .arg(&url)
        .output()
        .expect("run curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 200 30000000",
        "curl: {:?}",
        out.status
    );
}

/// A request body trickled on one stream (a byte every 300 ms: each pause
/// well within `client_body`) is cut once it falls under
/// `request_body.min_rate` after its grace: 408 on that stream, counted in
/// `body_timeouts`, and a stream opened on the same connection after it
/// is served.
#[test]
fn a_trickled_request_body_gets_408_on_its_stream_and_the_connection_goes_on() {
    let origin = Origin::start("o1");
    let only = free_addr();
    let cfg = format!(
        "[timeouts]\nclient_body = \"30s\"\n\n[[vserver]]\nname = \"only\"\nlisten = [\"{only}\"]\n\
         default_pool = \"p\"\nh2c_only = true\n[vserver.request_body]\ngrace = \"1s\"\nmin_rate = 100\n\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        origin.addr
    );
    let sy = Switchyard::start(&cfg, &[only]);
    let mut c = TcpStream::connect(only).expect("connect");
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    // POST /echo with content-length 100000 on stream 1.
    let mut block = vec![0x83, 0x86, 0x01, 0x01, b'a', 0x04, 5];
    block.extend_from_slice(b"/echo");
    block.extend_from_slice(&[0x0f, 0x0d, 6]);
    block.extend_from_slice(b"100000");
    out.extend(frame(0x1, 0x4, 1, &block));
    c.write_all(&out).expect("write");
    // One byte every 300 ms, 40 at most (12 s), until the writer fails or
    // the reader says stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut w = c.try_clone().expect("clone");
    let trickle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for _ in 0..40 {
                if stop.load(std::sync::atomic::Ordering::Relaxed)
                    || w.write_all(&frame(0x0, 0, 1, b"x")).is_err()
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    let has_408 = |buf: &[u8]| {
        let heads = frame_heads(buf);
        frame_payloads(buf)
            .iter()
            .zip(heads)
            .any(|((kind, p), (_, _, stream, _))| {
                *kind == 0x1 && stream == 1 && p.windows(3).any(|w| w == b"408")
            })
    };
    // grace 1 s + 100 bytes/s: a few bytes earn a few tens of ms; the
    // driver checks once a second.
    let (got, at) = read_until(&mut c, Duration::from_secs(8), has_408);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = trickle.join();
    let at = at.unwrap_or_else(|| panic!("no 408 on stream 1 within 8 s: {:?}", frame_heads(&got)));
    assert!(
        at >= Duration::from_millis(900),
        "408 after {at:?}, before the grace"
    );
    // The same connection serves the next stream.
    c.write_all(&get_headers(3)).expect("GET on stream 3");
    let (got, served) = read_until(&mut c, Duration::from_secs(5), |buf| {
        frame_heads(buf)
            .iter()
            .zip(frame_payloads(buf))
            .any(|((_, _, stream, _), (kind, p))| {
                *stream == 3 && kind == 0x1 && p.first() == Some(&0x88)
            })
    });
    assert!(
        served.is_some(),
        "no 200 on stream 3: {:?}",
        frame_heads(&got)
    );
    assert_eq!(vs_stats(&sy, "only")["body_timeouts"], 1);
}

/// A vserver "h" with `h2c_key = true` (`h2c` or `h2c_only`) over the one
/// member `m`.
fn vserver_over(m: &RawMember, h2c_key: &str) -> (SocketAddr, Switchyard) {
    let l = free_addr();
    let cfg = format!(
        "[[vserver]]\nname = \"h\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n{h2c_key} = true\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        m.addr
    );
    let sy = Switchyard::start(&cfg, &[l]);
    (l, sy)
}

/// Issue 30 from an HTTP/2 client: a request that is not an extended
/// CONNECT (RFC 8441, tests/websocket.rs) cannot ask for an upgrade, so a
/// member's 101 is a 502 and no tunnel, counted in upgrades_refused, and
/// an HTTP2-Settings field never reaches the member.
#[test]
fn an_h2_client_gets_no_tunnel_from_a_members_101() {
    let m = RawMember::start(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    let (l, sy) = vserver_over(&m, "h2c");
    let rt = runtime();
    rt.block_on(async {
        let (mut h2, _conn) = h2_connect(l).await;
        let req = http::Request::get("http://example.test/m")
            .header("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA")
            .body(())
            .expect("req");
        let r = h2_request(&mut h2, req, &[]).await.expect("an answer");
        assert_eq!(r.status, 502);
        // A plain CONNECT (no :protocol) is refused, not relayed.
        let connect = http::Request::connect("http://example.test/chat")
            .body(())
            .expect("req");
        match h2_request(&mut h2, connect, &[]).await {
            Ok(r) => assert_eq!(r.status, 501),
            Err(e) => panic!("CONNECT: {e}"),
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let seen = m.all().to_ascii_lowercase();
    assert!(seen.starts_with("get /m http/1.1\r\n"), "{seen}");
    assert!(!seen.contains("http2-settings"), "{seen}");
    assert!(!seen.contains("/chat"), "{seen}");
    assert_eq!(vs_stats(&sy, "h")["upgrades_refused"], 1);
}

/// A member's 103 Early Hints reaches an HTTP/2 client as a HEADERS frame
/// of its own before the response's (RFC 9113 8.1; browsers act on early
/// hints over HTTP/2 and HTTP/3 only), without its hop-by-hop fields; a
/// client that skips interim responses (the h2 crate's) gets the response
/// as before.
#[test]
fn an_h2_client_gets_a_members_early_hints_before_its_response() {
    let m = RawMember::start(
        "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\nConnection: keep-alive\r\n\r\n\
         HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nhinted\n",
    );
    let (l, _sy) = vserver_over(&m, "h2c_only");
    // nghttp (written by others) prints every frame it receives.
    let out = Command::new("nghttp")
        .args(["-v", &format!("http://127.0.0.1:{}/page", l.port())])
        .output()
        .expect("run nghttp (apt-get install nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    let hints = text.find(":status: 103").expect("the 103 was relayed");
    let link = text
        .find("link: </style.css>; rel=preload; as=style")
        .expect("with its Link field");
    let ok = text.find(":status: 200").expect("then the response");
    assert!(hints < link && link < ok, "{text}");
    assert!(text.contains("hinted"), "{text}");
    assert!(
        !text[hints..ok].contains("connection:"),
        "a hop-by-hop field went on: {text}"
    );
    let rt = runtime();
    rt.block_on(async {
        let (mut h2, _conn) = h2_connect(l).await;
        let r = h2_request(&mut h2, get_req("/again"), &[])
            .await
            .expect("GET");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hinted\n");
    });
}
