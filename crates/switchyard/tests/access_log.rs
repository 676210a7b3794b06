//! Access logs end to end through the real binary: every format written
//! and parsed back field by field, templates, sampling, rotation on
//! SIGUSR1 with nothing lost, syslog (RFC 5424) to a local UDP and a unix
//! datagram receiver, W3C traceparent passed through or started, timings,
//! TLS and HTTP/2 clients, config errors with their positions, reloads;
//! the lines of tcp connections and udp sessions.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use regex::Regex;

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The file's lines once it has at least `n` (waits up to 5 s).
fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    eventually(Duration::from_secs(5), || lines(path).len() >= n);
    let l = lines(path);
    assert!(
        l.len() >= n,
        "{} has {} lines, expected {n}: {l:?}",
        path.display(),
        l.len()
    );
    l
}

/// One vserver on `listen` over `origins`, with an access_log table.
fn vserver(name: &str, listen: SocketAddr, pool: &str, log: &str) -> String {
    format!(
        "[[vserver]]\nname = \"{name}\"\nlisten = [\"{listen}\"]\ndefault_pool = \"{pool}\"\n[vserver.access_log]\n{log}\n\n"
    )
}

fn pool(name: &str, members: &[SocketAddr]) -> String {
    let mut s = format!("[[pool]]\nname = \"{name}\"\n");
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn json_lines_carry_every_field() {
    let origin = Origin::start("o1");
    origin.set(|b| b.delay = Duration::from_millis(150));
    let listen = free_addr();
    let dir = temp_dir("al-json");
    let log = dir.join("access.json");
    let cfg = format!(
        "[global]\nworkers = 1\n{}{}",
        vserver(
            "web",
            listen,
            "p",
            &format!("format = \"json\"\nto = \"file:{}\"", log.display())
        ),
        pool("p", &[origin.addr])
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let mut c = Client::connect(listen);
    let client_port = c.w.local_addr().expect("local addr").port();
    let r = c.get_with(
        "/a/b?x=1",
        &format!(
            "User-Agent: probe/1.0\r\nReferer: http://ref.test/\r\ntraceparent: {TRACEPARENT}\r\n"
        ),
    );
    assert_eq!(r.status, 200);
    c.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n\r\nhello world");
    let r2 = c.read_response(false).expect("response");
    assert_eq!(r2.body_text(), "hello world");

    let l = wait_lines(&log, 2);
    let v = json(&l[0]);
    assert_eq!(v["vserver"], "web");
    assert_eq!(v["client_ip"], "127.0.0.1");
    assert_eq!(v["client_port"], client_port);
    assert_eq!(v["method"], "GET");
    assert_eq!(v["target"], "/a/b?x=1");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes_sent"], r.body.len() as u64);
    assert_eq!(v["bytes_received"], 0);
    assert_eq!(v["host"], "test");
    assert_eq!(v["user_agent"], "probe/1.0");
    assert_eq!(v["referer"], "http://ref.test/");
    assert_eq!(v["pool"], "p");
    assert_eq!(v["member"], origin.addr.to_string());
    assert_eq!(v["retries"], 0);
    assert_eq!(v["tls_version"], serde_json::Value::Null);
    assert_eq!(v["cache"], serde_json::Value::Null);
    assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(v["parent_id"], "00f067aa0ba902b7");
    // Timings: the member's 150 ms delay is in ttfb and total.
    let us = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    assert!(us("ttfb_us") >= 150_000, "{v}");
    assert!(us("ttfb_us") < 5_000_000, "{v}");
    assert!(us("total_us") >= us("ttfb_us") + us("connect_us"), "{v}");
    assert!(us("request_head_us") < 1_000_000, "{v}");
    assert!(us("connect_us") < 1_000_000, "{v}");
    // The time is when the request began, as RFC 3339 in UTC.
    let time = v["time"].as_str().expect("time");
    assert!(
        Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            .expect("re")
            .is_match(time),
        "{time}"
    );
    let v2 = json(&l[1]);
    assert_eq!(v2["method"], "POST");
    assert_eq!(v2["bytes_received"], 11);
    assert_eq!(v2["bytes_sent"], 11);
    // The second request reused the member connection.
    assert_eq!(v2["connect_us"], 0);
    // The origin saw the client's traceparent unchanged.
    let seen = origin.seen();
    assert_eq!(seen[0].header("traceparent").as_deref(), Some(TRACEPARENT));
}

#[test]
fn common_and_combined_are_read_by_the_standard_patterns() {
    let origin = Origin::start("o1");
    let (l1, l2) = (free_addr(), free_addr());
    let dir = temp_dir("al-clf");
    let (common, combined) = (dir.join("common.log"), dir.join("combined.log"));
    let cfg = format!(
        "[global]\nworkers = 1\n{}{}{}",
        vserver(
            "clf",
            l1,
            "p",
            &format!("format = \"common\"\nto = \"file:{}\"", common.display())
        ),
        vserver(
            "comb",
            l2,
            "p",
            &format!(
                "format = \"combined\"\nto = \"file:{}\"",
                combined.display()
            )
        ),
        pool("p", &[origin.addr])
    );
    let _sy = Switchyard::start(&cfg, &[l1, l2]);
    let body = get(l1, "/size/1234");
    assert_eq!(body.body.len(), 1234);
    let head = request(l1, "HEAD /x HTTP/1.0\r\nHost: test\r\n\r\n");
    assert_eq!(head.status, 200);
    let ua = "Mozilla/5.0 (X11; \"quoted\")";
    let r = get_with(
        l2,
        "/c?q=%221%22",
        &format!("User-Agent: {ua}\r\nReferer: http://r.test/p\r\n"),
    );
    assert_eq!(r.status, 200);
    let _ = get(l2, "/plain");

    // Apache's CLF: %h %l %u %t "%r" %>s %b
    let clf = Regex::new(
        r#"^(\S+) (\S+) (\S+) \[(\d\d)/(\w{3})/(\d{4}):(\d\d):(\d\d):(\d\d) ([+-]\d{4})\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+|-)$"#,
    )
    .expect("re");
    let l = wait_lines(&common, 2);
    let c = clf
        .captures(&l[0])
        .unwrap_or_else(|| panic!("not CLF: {}", l[0]));
    assert_eq!(&c[1], "127.0.0.1");
    assert_eq!((&c[2], &c[3]), ("-", "-"));
    assert!(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
            .contains(&&c[5])
    );
    assert_eq!(&c[10], "+0000");
    assert_eq!((&c[11], &c[12], &c[13]), ("GET", "/size/1234", "HTTP/1.1"));
    assert_eq!((&c[14], &c[15]), ("200", "1234"));
    let c = clf
        .captures(&l[1])
        .unwrap_or_else(|| panic!("not CLF: {}", l[1]));
    // No body sent: "-", as Apache writes it.
    assert_eq!(
        (&c[11], &c[13], &c[14], &c[15]),
        ("HEAD", "HTTP/1.0", "200", "-")
    );

    // Combined: CLF + "%{Referer}i" "%{User-agent}i"; quotes inside are
    // escaped, so the usual pattern still splits the fields right.
    let comb = Regex::new(&format!(
        r#"{} "([^"]*)" "([^"]*)"$"#,
        clf.as_str().trim_end_matches('$')
    ))
    .expect("re");
    let l = wait_lines(&combined, 2);
    let c = comb
        .captures(&l[0])
        .unwrap_or_else(|| panic!("not combined: {}", l[0]));
    assert_eq!(&c[12], "/c?q=%221%22");
    assert_eq!(&c[16], "http://r.test/p");
    assert_eq!(&c[17], "Mozilla/5.0 (X11; \\x22quoted\\x22)");
    let c = comb
        .captures(&l[1])
        .unwrap_or_else(|| panic!("not combined: {}", l[1]));
    assert_eq!((&c[12], &c[16], &c[17]), ("/plain", "-", "-"));
    assert_eq!(c[15].parse::<usize>().ok(), Some("o1\n".len()));
}

#[test]
fn templates_render_variables_retries_and_cache_verdicts() {
    let origin = Origin::start("o1");
    let cacheable = Origin::start("c1");
    cacheable.set(|b| {
        b.raw_response = Some(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Control: max-age=60\r\nConnection: close\r\n\r\nhello"
                .to_vec(),
        )
    });
    // A member nobody listens on: the first attempt there fails to connect.
    let dead: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let (l1, l2, l3) = (free_addr(), free_addr(), free_addr());
    let dir = temp_dir("al-tpl");
    let (t, r, k) = (dir.join("t.log"), dir.join("r.log"), dir.join("k.log"));
    let tpl = "$remote_addr $request_method $uri [$args] $status $http_x_request_id $vserver $pool $member $retries ${bytes_sent}B $protocol $$";
    let cfg = format!(
        "[global]\nworkers = 1\n{}{}{}{}{}{}",
        vserver(
            "tpl",
            l1,
            "p",
            &format!("format = '{tpl}'\nto = \"file:{}\"", t.display())
        ),
        vserver(
            "retry",
            l2,
            "r",
            &format!("format = \"$status $retries $member\"\nto = \"file:{}\"", r.display())
        ),
        vserver(
            "cached",
            l3,
            "c",
            &format!(
                "format = \"$uri $status $cache $pool\"\nto = \"file:{}\"\n[vserver.cache]\nenabled = true",
                k.display()
            )
        ),
        pool("p", &[origin.addr]),
        pool("r", &[dead, origin.addr]),
        pool("c", &[cacheable.addr]),
    );
    let sy = Switchyard::start(&cfg, &[l1, l2, l3]);
    let resp = get_with(l1, "/t/x?k=v", "X-Request-Id: rid-42\r\n");
    assert_eq!(resp.status, 200);
    let l = wait_lines(&t, 1);
    assert_eq!(
        l[0],
        format!(
            "127.0.0.1 GET /t/x [k=v] 200 rid-42 tpl p {} 0 3B HTTP/1.1 $",
            origin.addr
        )
    );

    for _ in 0..4 {
        assert_eq!(get(l2, "/r").status, 200, "{}", sy.log());
    }
    let l = wait_lines(&r, 4);
    let want_retry = format!("200 1 {}", origin.addr);
    assert!(l.contains(&want_retry), "{l:?}");
    assert!(l.iter().all(|x| x.starts_with("200 ")), "{l:?}");

    for _ in 0..2 {
        assert_eq!(get(l3, "/k").body_text(), "hello");
    }
    let _ = request(
        l3,
        "POST /k HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let l = wait_lines(&k, 3);
    assert_eq!(l[0], "/k 200 miss c");
    assert_eq!(l[1], "/k 200 hit c");
    assert_eq!(l[2], "/k 200 bypass c");
}

#[test]
fn sampling_logs_the_share_asked_and_every_5xx() {
    let origin = Origin::start("o1");
    let failing = Origin::start("f1");
    failing.set(|b| b.status = 503);
    let (l0, l1, lh, lf) = (free_addr(), free_addr(), free_addr(), free_addr());
    let dir = temp_dir("al-sample");
    let f = |n: &str| dir.join(format!("{n}.log"));
    let tpl = "format = \"$uri $status\"";
    let cfg = format!(
        "[global]\nworkers = 1\n{}{}{}{}{}{}",
        vserver(
            "none",
            l0,
            "p",
            &format!("{tpl}\nsample = 0\nto = \"file:{}\"", f("none").display())
        ),
        vserver(
            "all",
            l1,
            "p",
            &format!("{tpl}\nsample = 1.0\nto = \"file:{}\"", f("all").display())
        ),
        vserver(
            "half",
            lh,
            "p",
            &format!("{tpl}\nsample = 0.5\nto = \"file:{}\"", f("half").display())
        ),
        vserver(
            "fail",
            lf,
            "f",
            &format!("{tpl}\nsample = 0\nto = \"file:{}\"", f("fail").display())
        ),
        pool("p", &[origin.addr]),
        pool("f", &[failing.addr]),
    );
    let _sy = Switchyard::start(&cfg, &[l0, l1, lh, lf]);
    let n = 400;
    for (l, count) in [(l0, 50), (l1, 50), (lh, n), (lf, 5)] {
        let mut c = Client::connect(l);
        for i in 0..count {
            let r = c.get(&format!("/{i}"));
            assert!(r.status == 200 || r.status == 503);
        }
    }
    // The marker request's line shows every earlier line was written.
    let mut c = Client::connect(l1);
    c.get("/marker");
    wait_lines(&f("all"), 51);
    assert_eq!(lines(&f("all")).len(), 51);
    // 5xx are logged even at sample = 0.
    let fail = wait_lines(&f("fail"), 5);
    assert!(fail.iter().all(|l| l.ends_with(" 503")), "{fail:?}");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(lines(&f("none")), Vec::<String>::new());
    // Binomial(400, 0.5): mean 200, standard deviation 10.
    let half = lines(&f("half")).len();
    assert!((140..=260).contains(&half), "{half} of {n} logged at 0.5");
}

#[test]
fn sigusr1_reopens_the_file_and_no_line_is_lost() {
    let origin = Origin::start("o1");
    let listen = free_addr();
    let dir = temp_dir("al-rotate");
    let log = dir.join("access.log");
    let rotated = dir.join("access.log.1");
    let cfg = format!(
        "[global]\nworkers = 2\n{}{}",
        vserver(
            "web",
            listen,
            "p",
            &format!("format = \"$uri\"\nto = \"file:{}\"", log.display())
        ),
        pool("p", &[origin.addr])
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    let total = 400;
    let done = Arc::new(AtomicUsize::new(0));
    // Two clients, so both workers log while the file is rotated.
    let mut clients = Vec::new();
    for k in 0..2 {
        let done = done.clone();
        clients.push(std::thread::spawn(move || {
            let mut c = Client::connect(listen);
            for i in 0..total / 2 {
                assert_eq!(c.get(&format!("/{k}/{i}")).status, 200);
                done.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(500));
            }
        }));
    }
    assert!(eventually(Duration::from_secs(10), || done
        .load(Ordering::Relaxed)
        >= total / 3));
    // logrotate: rename, then SIGUSR1.
    std::fs::rename(&log, &rotated).expect("rename");
    sy.signal("USR1");
    for c in clients {
        c.join().expect("client");
    }
    let all = || {
        let mut v = lines(&rotated);
        v.extend(lines(&log));
        v
    };
    eventually(Duration::from_secs(5), || all().len() >= total);
    let (old, new) = (lines(&rotated), lines(&log));
    assert!(
        !old.is_empty() && !new.is_empty(),
        "old {} new {}",
        old.len(),
        new.len()
    );
    assert_eq!(old.len() + new.len(), total, "{}", sy.log());
    let unique: HashSet<String> = old.iter().chain(&new).cloned().collect();
    assert_eq!(unique.len(), total);
    // The first requests went to the old file, the last to the new one.
    assert!(old.contains(&"/0/0".to_string()) && old.contains(&"/1/0".to_string()));
    let last = format!("/0/{}", total / 2 - 1);
    assert!(new.contains(&last), "{last} not in the new file");
    assert!(sy.wait_for_log("SIGUSR1: reopening access log files"));
}

/// `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG`
fn rfc5424(msg: &str) -> regex::Captures<'_> {
    Regex::new(
        r"^<(\d{1,3})>1 (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) (\S+) (\S+) (\d+) (\S+) (-) (.*)$",
    )
    .expect("re")
    .captures(msg)
    .unwrap_or_else(|| panic!("not RFC 5424: {msg}"))
}

#[test]
fn syslog_reaches_udp_and_unix_receivers() {
    let origin = Origin::start("o1");
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let dir = temp_dir("al-syslog");
    let sock_path = dir.join("log.sock");
    let unix = UnixDatagram::bind(&sock_path).expect("unix");
    unix.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let (l1, l2) = (free_addr(), free_addr());
    let cfg = format!(
        "[global]\nworkers = 1\n{}{}{}",
        vserver(
            "udp",
            l1,
            "p",
            &format!(
                "format = \"json\"\nto = \"syslog:udp:{}\"\nfacility = \"local3\"\napp_name = \"edge-proxy\"",
                udp.local_addr().expect("addr")
            )
        ),
        vserver(
            "unix",
            l2,
            "p",
            &format!("format = \"$vserver $uri $status\"\nto = \"syslog:unix:{}\"", sock_path.display())
        ),
        pool("p", &[origin.addr])
    );
    let sy = Switchyard::start(&cfg, &[l1, l2]);
    assert_eq!(get(l1, "/via-udp").status, 200);
    assert_eq!(get(l2, "/via-unix").status, 200);

    let mut buf = [0u8; 65536];
    let n = udp.recv(&mut buf).expect("a UDP syslog message");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    let c = rfc5424(&msg);
    // local3 (19) * 8 + informational (6)
    assert_eq!(&c[1], "158");
    assert_eq!(&c[4], "edge-proxy");
    assert_eq!(c[5].parse::<i32>().ok(), Some(sy.pid()));
    assert_eq!(&c[6], "access");
    let v = json(&c[8]);
    assert_eq!(v["target"], "/via-udp");
    assert_eq!(v["vserver"], "udp");

    let n = unix.recv(&mut buf).expect("a unix syslog message");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    let c = rfc5424(&msg);
    // Defaults: local7 (23) * 8 + 6, app-name switchyard.
    assert_eq!(&c[1], "190");
    assert_eq!(&c[4], "switchyard");
    assert_eq!(&c[8], "unix /via-unix 200");
}

#[test]
fn traceparent_is_passed_through_or_started_and_logged() {
    let origin = Origin::start("o1");
    let (l1, l2) = (free_addr(), free_addr());
    let dir = temp_dir("al-trace");
    let (log, off) = (dir.join("t.log"), dir.join("off.log"));
    let cfg = format!(
        "[global]\nworkers = 1\n{}{}{}",
        vserver(
            "web",
            l1,
            "p",
            &format!(
                "format = \"$uri $trace_id $parent_id\"\nto = \"file:{}\"",
                log.display()
            )
        ),
        vserver(
            "off",
            l2,
            "p",
            &format!(
                "format = \"$uri $trace_id\"\ntraceparent = false\nto = \"file:{}\"",
                off.display()
            )
        ),
        pool("p", &[origin.addr])
    );
    let _sy = Switchyard::start(&cfg, &[l1, l2]);
    let valid = Regex::new(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$").expect("re");

    get_with(
        l1,
        "/given",
        &format!("traceparent: {TRACEPARENT}\r\ntracestate: k=v\r\n"),
    );
    get(l1, "/none");
    get_with(
        l1,
        "/bad",
        "traceparent: 00-XYZ-00f067aa0ba902b7-01\r\ntracestate: k=v\r\n",
    );
    let seen = origin.seen();
    let header = |path: &str| {
        seen.iter()
            .find(|s| s.request_line().contains(path))
            .and_then(|s| s.header("traceparent"))
            .unwrap_or_else(|| panic!("no traceparent on {path}"))
    };
    let by_path = |path: &str| {
        seen.iter()
            .find(|s| s.request_line().contains(path))
            .cloned()
    };
    assert_eq!(header("/given"), TRACEPARENT);
    assert_eq!(
        by_path("/given")
            .and_then(|s| s.header("tracestate"))
            .as_deref(),
        Some("k=v")
    );
    let started = header("/none");
    let c = valid
        .captures(&started)
        .unwrap_or_else(|| panic!("invalid: {started}"));
    let (none_trace, none_parent) = (c[1].to_string(), c[2].to_string());
    assert_ne!(none_trace, "0".repeat(32));
    let replaced = header("/bad");
    let c = valid
        .captures(&replaced)
        .unwrap_or_else(|| panic!("invalid: {replaced}"));
    let bad_trace = c[1].to_string();
    assert_ne!(bad_trace, none_trace);
    // The tracestate of an invalid traceparent does not go on.
    assert_eq!(by_path("/bad").and_then(|s| s.header("tracestate")), None);

    let l = wait_lines(&log, 3);
    assert_eq!(
        l[0],
        format!("/given {} 00f067aa0ba902b7", &TRACEPARENT[3..35])
    );
    assert_eq!(l[1], format!("/none {none_trace} {none_parent}"));
    assert!(l[2].starts_with(&format!("/bad {bad_trace} ")), "{}", l[2]);

    // traceparent = false: nothing is started; a valid one is still logged.
    origin.clear();
    get(l2, "/quiet");
    get_with(l2, "/told", &format!("traceparent: {TRACEPARENT}\r\n"));
    let seen = origin.seen();
    assert_eq!(seen[0].header("traceparent"), None);
    let l = wait_lines(&off, 2);
    assert_eq!(l[0], "/quiet -");
    assert_eq!(l[1], format!("/told {}", &TRACEPARENT[3..35]));
}

type H2 = h2::client::SendRequest<bytes::Bytes>;

async fn h2_get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn): (H2, _) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut s = send.ready().await.expect("ready");
    let req = http::Request::get(format!("http://h2.test{path}"))
        .header("user-agent", "h2-probe")
        .body(())
        .expect("request");
    let (resp, _) = s.send_request(req, true).expect("send");
    let resp = resp.await.expect("response");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    (status, data)
}

#[test]
fn http2_clients_are_logged() {
    let origin = Origin::start("o1");
    let listen = free_addr();
    let dir = temp_dir("al-h2");
    let log = dir.join("h2.json");
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"h2\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\nh2c = true\n[vserver.access_log]\nformat = \"json\"\nto = \"file:{}\"\n\n{}",
        log.display(),
        pool("p", &[origin.addr])
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (status, body) = rt.block_on(h2_get(listen, "/over-h2"));
    assert_eq!(status, 200);
    let l = wait_lines(&log, 1);
    let v = json(&l[0]);
    assert_eq!(v["protocol"], "HTTP/2.0");
    assert_eq!(v["target"], "/over-h2");
    assert_eq!(v["host"], "h2.test");
    assert_eq!(v["user_agent"], "h2-probe");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes_sent"], body.len() as u64);
    assert_eq!(v["member"], origin.addr.to_string());
    // One HEADERS frame: no head-read time of its own.
    assert_eq!(v["request_head_us"], serde_json::Value::Null);
    assert!(v["ttfb_us"].as_u64().is_some(), "{v}");
    assert!(v["trace_id"].as_str().is_some_and(|t| t.len() == 32), "{v}");
}

#[test]
fn tls_clients_show_version_cipher_and_handshake_time() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let origin = Origin::start("o1");
    let pki = Pki::new("al-ca");
    let (cert, key) = pki.issue_cn("site", "localhost", "IP:127.0.0.1,DNS:localhost");
    let listen = free_addr();
    let dir = temp_dir("al-tls");
    let log = dir.join("tls.log");
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"tls\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n[vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n[vserver.access_log]\nformat = \"$tls_version $tls_cipher $tls_handshake_us $protocol $status\"\nto = \"file:{}\"\n\n{}",
        cert.display(),
        key.display(),
        log.display(),
        pool("p", &[origin.addr])
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.ca()).expect("ca") {
        roots.add(c.expect("cert")).expect("add");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).expect("conn");
    let tcp = TcpStream::connect(listen).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(b"GET /secure HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    let l = wait_lines(&log, 1);
    let f: Vec<&str> = l[0].split(' ').collect();
    assert_eq!(f[0], "TLSv1.3");
    assert!(
        f[1].starts_with("TLS_") && !f[1].starts_with("TLS13_"),
        "{}",
        l[0]
    );
    let hs: u64 = f[2].parse().expect("handshake µs");
    assert!(hs > 0 && hs < 5_000_000, "{}", l[0]);
    assert_eq!(&f[3..], ["HTTP/1.1", "200"]);
}

fn check(cfg: &str) -> String {
    let dir = temp_dir("al-check");
    let path = dir.join("bad.toml");
    std::fs::write(&path, cfg).expect("write");
    let (code, out, err) = run_cli(&["check", "-c", &path.to_string_lossy()]);
    assert_ne!(code, Some(0), "check accepted:\n{cfg}");
    format!("{out}{err}")
}

#[test]
fn bad_settings_are_refused_with_their_line_and_column() {
    let base = "[[vserver]]\nname = \"web\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n[vserver.access_log]\n";
    // Line 10 is the first line of the table's body.
    let out = check(&format!("{base}format = \"$status $nope\"\n"));
    assert!(
        out.contains("bad.toml:10:19: vserver \"web\": access_log.format: unknown variable $nope"),
        "{out}"
    );
    let out = check(&format!(
        "{base}format = \"json\"\nto = \"tcp:1.2.3.4:5\"\n"
    ));
    assert!(
        out.contains(
            "bad.toml:11:6: vserver \"web\": access_log.to \"tcp:1.2.3.4:5\" is not one of"
        ),
        "{out}"
    );
    let out = check(&format!("{base}sample = 1.5\n"));
    assert!(
        out.contains("bad.toml:10:10: vserver \"web\": access_log.sample 1.5 is out of range"),
        "{out}"
    );
    let out = check(&format!("{base}to = \"file:/no/such/dir/x.log\"\n"));
    assert!(
        out.contains("bad.toml:10:6:") && out.contains("does not exist"),
        "{out}"
    );
    let out = check(&format!(
        "{base}to = \"syslog:udp:127.0.0.1:514\"\nfacility = \"local9\"\n"
    ));
    assert!(
        out.contains("bad.toml:11:12:") && out.contains("not a syslog facility"),
        "{out}"
    );
    let out = check(&format!("{base}colour = \"blue\"\n"));
    assert!(out.contains("bad.toml:10:"), "{out}");
}

#[test]
fn a_reload_applies_new_settings_and_moves_to_a_new_path() {
    let origin = Origin::start("o1");
    let listen = free_addr();
    let dir = temp_dir("al-reload");
    let (a, b) = (dir.join("a.log"), dir.join("b.log"));
    let cfg = |path: &PathBuf, fmt: &str| {
        format!(
            "[global]\nworkers = 1\n{}{}",
            vserver(
                "web",
                listen,
                "p",
                &format!("format = \"{fmt}\"\nto = \"file:{}\"", path.display())
            ),
            pool("p", &[origin.addr])
        )
    };
    let sy = Switchyard::start(&cfg(&a, "A $uri"), &[listen]);
    get(listen, "/1");
    wait_lines(&a, 1);
    // Same path, new format: the file stays open and gets the new lines.
    let (ok, out) = sy.reload_with(&cfg(&a, "B $uri"));
    assert!(ok, "{out}");
    get(listen, "/2");
    wait_lines(&a, 2);
    // New path: new lines go there; the old file keeps what it had.
    let (ok, out) = sy.reload_with(&cfg(&b, "C $uri"));
    assert!(ok, "{out}");
    get(listen, "/3");
    assert_eq!(wait_lines(&b, 1), ["C /3"]);
    assert_eq!(lines(&a), ["A /1", "B /2"]);
    // A reload with a bad setting is refused; the running log stays.
    let (ok, out) = sy.reload_with(&cfg(&b, "$bogus"));
    assert!(!ok && out.contains("unknown variable $bogus"), "{out}");
    get(listen, "/4");
    assert_eq!(wait_lines(&b, 2), ["C /3", "C /4"]);
}

/// A TCP member that echoes what it reads until its peer's EOF.
fn tcp_echo() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    a
}

#[test]
fn tcp_connections_and_udp_sessions_get_a_line_each_when_they_end() {
    let dir = temp_dir("al-l4");
    let tcp_log = dir.join("tcp.log");
    let udp_log = dir.join("udp.log");
    let member = tcp_echo();
    let dead = free_addr(); // nothing listens there
    let udp_member = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let udp_member_addr = udp_member.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        let _ = udp_member.set_read_timeout(Some(Duration::from_secs(20)));
        while let Ok((n, from)) = udp_member.recv_from(&mut buf) {
            // Two replies per datagram: the line counts both.
            let _ = udp_member.send_to(&buf[..n], from);
            let _ = udp_member.send_to(&buf[..n], from);
        }
    });
    let (tcp, bad, udp) = (free_addr(), free_addr(), free_addr());
    let cfg = format!(
        "[[vserver]]\nname = \"relay\"\nprotocol = \"tcp\"\nlisten = [\"{tcp}\"]\ndefault_pool = \"t\"\n\
         [vserver.access_log]\nto = \"file:{}\"\n\n\
         [[vserver]]\nname = \"nowhere\"\nprotocol = \"tcp\"\nlisten = [\"{bad}\"]\ndefault_pool = \"d\"\n\
         [vserver.access_log]\nto = \"file:{}\"\nformat = \"json\"\n\n\
         [[vserver]]\nname = \"dgram\"\nprotocol = \"udp\"\nlisten = [\"{udp}\"]\ndefault_pool = \"u\"\n\
         [vserver.l4]\nidle_timeout = \"300ms\"\n\
         [vserver.access_log]\nto = \"file:{}\"\nformat = \"$client_ip $transport $pool $member $bytes_received $bytes_sent $end\"\n\n\
         [[pool]]\nname = \"t\"\n[[pool.member]]\naddress = \"{member}\"\n\
         [[pool]]\nname = \"d\"\n[[pool.member]]\naddress = \"{dead}\"\n\
         [[pool]]\nname = \"u\"\n[[pool.member]]\naddress = \"{udp_member_addr}\"\n",
        tcp_log.display(),
        tcp_log.display(),
        udp_log.display()
    );
    let sy = Switchyard::start(&cfg, &[tcp, bad]);
    // The start's own waits were connections too: count from here.
    let before = lines(&tcp_log).len();

    // 11 bytes up, echoed back, then a clean close from both sides.
    let mut s = TcpStream::connect(tcp).expect("connect");
    s.write_all(b"hello world").expect("write");
    let mut back = [0u8; 11];
    s.read_exact(&mut back).expect("echo");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let client_port = s.local_addr().expect("addr").port();
    drop(s);
    // A connection whose only member refuses.
    let mut s = TcpStream::connect(bad).expect("connect");
    let _ = s.read_to_end(&mut rest);

    // The start's readiness probes are connections too and may be logged
    // after `before` was read (CI saw one land 1 s late): wait for the two
    // lines this test made, not for a count.
    let ours = format!("127.0.0.1:{client_port} ");
    eventually(Duration::from_secs(5), || {
        let l = lines(&tcp_log);
        l.iter().any(|l| l.starts_with(&ours)) && l.iter().any(|l| l.contains("\"nowhere\""))
    });
    let got = wait_lines(&tcp_log, before + 2);
    let line = got
        .iter()
        .find(|l| l.starts_with(&format!("127.0.0.1:{client_port} ")))
        .unwrap_or_else(|| panic!("no line for the relayed connection: {got:?}\n{}", sy.log()));
    let re = Regex::new(&format!(
        r"^127\.0\.0\.1:{client_port} \[\d\d/\w{{3}}/\d{{4}}:\d\d:\d\d:\d\d \+0000\] relay tcp t {member} \d+\.\d{{3}} \d+\.\d{{3}} 11 11 done$"
    ))
    .expect("regex");
    assert!(re.is_match(line), "{line}");
    let failed = got
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| json(l))
        .find(|j| j["vserver"] == "nowhere")
        .unwrap_or_else(|| panic!("no line for the refused connect: {got:?}"));
    assert_eq!(failed["transport"], "tcp");
    assert_eq!(failed["end"], "no-member");
    assert_eq!(failed["member"], serde_json::Value::Null);
    assert_eq!(failed["pool"], "d");

    // A UDP session: one datagram of 4 bytes, answered twice; the line
    // comes when the session ends, 300 ms after the last datagram.
    let c = UdpSocket::bind("127.0.0.1:0").expect("bind");
    c.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    c.send_to(b"ping", udp).expect("send");
    let mut buf = [0u8; 64];
    for _ in 0..2 {
        let (n, _) = c.recv_from(&mut buf).expect("reply");
        assert_eq!(&buf[..n], b"ping");
    }
    let got = wait_lines(&udp_log, 1);
    assert_eq!(
        got,
        [format!("127.0.0.1 udp u {udp_member_addr} 4 8 idle")],
        "{}",
        sy.log()
    );
}

#[test]
fn l4_vservers_refuse_http_formats_and_http_ones_refuse_l4_variables() {
    let tcp = "[[vserver]]\nname = \"relay\"\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n[vserver.access_log]\n";
    let out = check(&format!("{tcp}format = \"combined\"\n"));
    assert!(
        out.contains("bad.toml:11:10: vserver \"relay\": access_log.format: the Common and Combined formats are lines about HTTP requests"),
        "{out}"
    );
    let out = check(&format!("{tcp}format = \"$remote_addr $status\"\n"));
    assert!(
        out.contains("access_log.format: $status is about HTTP requests; an L4 vserver's line knows remote_addr"),
        "{out}"
    );
    let http = tcp.replace("protocol = \"tcp\"\n", "");
    let out = check(&format!("{http}format = \"$remote_addr $end\"\n"));
    assert!(
        out.contains("access_log.format: $end is about L4 connections"),
        "{out}"
    );
}
