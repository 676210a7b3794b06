//! Timeouts and upstream failures end to end: slowloris, idle keep-alive,
//! upstream response timeout, connect failures and retries, members that
//! close without answering, and members that answer with broken framing.

mod common;
use common::*;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(listen: SocketAddr, members: &[SocketAddr], timeouts: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n[timeouts]\n{timeouts}\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n"
    );
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

#[test]
fn slowloris_gets_408_while_others_are_served() {
    let o = Origin::start("a");
    let l = free_addr();
    let _sy = Switchyard::start(&config(l, &[o.addr], "client_header = \"1s\""), &[l]);
    // Normal clients, in parallel, the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let normal = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut served = 0;
            let mut worst = Duration::ZERO;
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(10) {
                let t = Instant::now();
                let r = get(l, "/");
                worst = worst.max(t.elapsed());
                assert_eq!(r.status, 200);
                served += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            (served, worst)
        })
    };
    // Several slow clients, one header byte every 100 ms.
    let slow: Vec<_> = (0..5)
        .map(|_| {
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut c = Client::connect(l);
                let mut w = c.w.try_clone().expect("clone");
                let writer = std::thread::spawn(move || {
                    for b in b"GET / HTTP/1.1\r\nHost: slow\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
                        if w.write_all(&[*b]).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
                let r = c.read_response(false);
                let answered = start.elapsed();
                let closed = c.closed_within(Duration::from_secs(2));
                let _ = writer.join();
                (r, answered, closed)
            })
        })
        .collect();
    for s in slow {
        let (r, answered, closed) = s.join().expect("slow client");
        let r = r.expect("a 408 response");
        assert_eq!(r.status, 408, "{}", r.body_text());
        assert!(r.body_text().contains("request head"), "{}", r.body_text());
        assert_eq!(r.header("connection"), Some("close"));
        assert!(
            answered >= Duration::from_millis(900) && answered <= Duration::from_secs(3),
            "answered after {answered:?}"
        );
        assert!(closed, "connection left open after the 408");
    }
    stop.store(true, Ordering::Relaxed);
    let (served, worst) = normal.join().expect("normal client");
    assert!(served >= 20, "only {served} normal requests served");
    assert!(
        worst < Duration::from_millis(900),
        "a normal request took {worst:?}"
    );
}

#[test]
fn idle_keep_alive_connection_is_closed() {
    let o = Origin::start("a");
    let l = free_addr();
    let sy = Switchyard::start(
        &config(
            l,
            &[o.addr],
            "client_idle = \"500ms\"\nclient_header = \"1s\"",
        ),
        &[l],
    );
    // Requests closer together than client_idle keep the connection.
    let mut c = Client::connect(l);
    for _ in 0..6 {
        assert_eq!(c.get("/").status, 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(c.get("/").status, 200);
    let t = Instant::now();
    assert!(
        c.closed_within(Duration::from_secs(3)),
        "idle connection kept"
    );
    let after = t.elapsed();
    assert!(
        after >= Duration::from_millis(400) && after < Duration::from_millis(2500),
        "closed after {after:?}, client_idle is 500ms"
    );
    // A connection that never sends anything is closed silently after client_header.
    let mut silent = Client::connect(l);
    let t = Instant::now();
    let mut buf = Vec::new();
    let _ = silent
        .r
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(4)));
    let _ = std::io::Read::read_to_end(&mut silent.r, &mut buf);
    assert!(buf.is_empty(), "{:?}", String::from_utf8_lossy(&buf));
    let after = t.elapsed();
    assert!(
        after >= Duration::from_millis(800) && after < Duration::from_secs(3),
        "silent connection closed after {after:?}"
    );
    let _ = sy;
}

#[test]
fn upstream_response_timeout_gives_504() {
    let o = Origin::start("a");
    o.set(|b| b.delay = Duration::from_secs(2));
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], "upstream_response = \"500ms\""), &[l]);
    let t = Instant::now();
    let mut c = Client::connect(l);
    let r = c.get("/slow");
    let took = t.elapsed();
    assert_eq!(r.status, 504);
    assert_eq!(
        r.body_text(),
        "504 Gateway Timeout: the server did not answer in time\n"
    );
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(1800),
        "answered after {took:?}"
    );
    assert_eq!(sy.member_stats("p", o.addr)["response_timeouts"], 1);
    // Not retried, and the client connection is still usable.
    assert_eq!(o.requests(), 1);
    o.set(|b| b.delay = Duration::ZERO);
    assert_eq!(c.get("/").status, 200);
}

#[test]
fn connect_failure_gives_502_or_is_retried_on_another_member() {
    let closed = free_addr();
    let (l1, l2) = (free_addr(), free_addr());
    let b = Origin::start("b");
    let cfg = format!(
        "[global]\nworkers = 1\n\
         [[vserver]]\nname = \"alone\"\nlisten = [\"{l1}\"]\ndefault_pool = \"dead\"\n\
         [[vserver]]\nname = \"pair\"\nlisten = [\"{l2}\"]\ndefault_pool = \"pair\"\n\
         [[pool]]\nname = \"dead\"\n[[pool.member]]\naddress = \"{closed}\"\n\
         [[pool]]\nname = \"pair\"\n[[pool.member]]\naddress = \"{closed}\"\n[[pool.member]]\naddress = \"{}\"\n",
        b.addr
    );
    let sy = Switchyard::start(&cfg, &[l1, l2]);
    let r = get(l1, "/");
    assert_eq!(r.status, 502, "{}", r.body_text());
    assert_eq!(
        r.body_text(),
        "502 Bad Gateway: could not connect to a server of pool \"dead\"\n"
    );
    assert_eq!(sy.member_stats("dead", closed)["connect_failures"], 1);
    // Two members: the failed connect is retried on the other one.
    let d = distribution(l2, "/", 4);
    assert_eq!(d.get("b"), Some(&4), "{d:?}");
    let failures = sy.member_stats("pair", closed)["connect_failures"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        failures >= 2,
        "round robin should have tried it: {failures}"
    );
    assert_eq!(sy.pool_stats("pair")["retries"], failures);
    assert_eq!(b.requests(), 4);
}

#[test]
fn member_closing_without_answer() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    a.set(|x| x.close_without_answer = true);
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[a.addr, b.addr], ""), &[l]);
    // GET is retried on b: every client request succeeds.
    let d = distribution(l, "/get", 4);
    assert_eq!(d.get("b"), Some(&4), "{d:?}");
    let a_gets = a.requests();
    assert!(a_gets >= 2, "a saw {a_gets}");
    assert_eq!(sy.pool_stats("p")["retries"], a_gets as u64);
    // POST with a body is not replayed: the one that lands on a gets 502.
    let mut statuses = Vec::new();
    for i in 0..2 {
        let mut c = Client::connect(l);
        c.send(
            format!("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n\r\npost-{i}")
                .as_bytes(),
        );
        let r = c.read_response(false).expect("response");
        if r.status == 502 {
            assert_eq!(
                r.body_text(),
                "502 Bad Gateway: the server closed the connection without answering\n"
            );
        }
        statuses.push(r.status);
    }
    statuses.sort();
    assert_eq!(statuses, vec![200, 502]);
    let posts = |o: &Origin| {
        o.seen()
            .iter()
            .filter(|s| s.request_line().starts_with("POST"))
            .count()
    };
    assert_eq!(posts(&a), 1);
    assert_eq!(posts(&b), 1, "the POST was replayed on b");
    assert!(sy.member_stats("p", a.addr)["resets"].as_u64().unwrap_or(0) >= 3);
}

#[test]
fn single_member_closing_without_answer_gives_502() {
    let a = Origin::start("a");
    a.set(|x| x.close_without_answer = true);
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[a.addr], ""), &[l]);
    let mut c = Client::connect(l);
    let r = c.get("/");
    assert_eq!(r.status, 502, "{}", r.body_text());
    assert_eq!(
        r.body_text(),
        "502 Bad Gateway: the server closed the connection without answering\n"
    );
    assert_eq!(sy.pool_stats("p")["no_member_available"], 0);
    // The client connection survives.
    a.set(|x| x.close_without_answer = false);
    assert_eq!(c.get("/").status, 200);
}

fn bad_framing(raw: &[u8], what: &str) {
    let o = Origin::start("a");
    o.set(|b| b.raw_response = Some(raw.to_vec()));
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], ""), &[l]);
    let mut c = Client::connect(l);
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c
        .read_response(false)
        .unwrap_or_else(|| panic!("{what}: no response"));
    assert_eq!(r.status, 502, "{what}: {}", r.body_text());
    assert!(
        r.body_text().starts_with("502 Bad Gateway: "),
        "{what}: {}",
        r.body_text()
    );
    assert!(!r.body_text().contains("smuggled"), "{what}");
    assert_eq!(
        sy.member_stats("p", o.addr)["bad_responses"],
        1,
        "{what}: {}",
        sy.stats()
    );
}

#[test]
fn content_length_with_transfer_encoding_gives_502() {
    bad_framing(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nsmuggled",
        "CL+TE",
    );
}

#[test]
fn invalid_chunk_size_gives_502() {
    bad_framing(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nsmuggled\r\n0\r\n\r\n",
        "chunk size",
    );
}

#[test]
fn two_content_lengths_give_502() {
    bad_framing(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 8\r\n\r\nsmuggled",
        "two CL",
    );
}

/// A client that stops reading a response is cut after `client_send`: the
/// connection closes with most of a 64 MB body never sent (without the
/// timeout it would all arrive once the client reads again), the counter
/// says why, and other clients are served meanwhile.
#[test]
fn a_client_that_stops_reading_is_cut_after_client_send() {
    let o = Origin::start("a");
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], "client_send = \"1s\""), &[l]);
    let total = 64 << 20;
    let mut c = std::net::TcpStream::connect(l).expect("connect");
    c.write_all(format!("GET /size/{total} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .expect("write");
    // Not reading: the socket buffers fill and the proxy's writes stall.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3500) {
        assert_eq!(get(l, "/").status, 200, "others are served meanwhile");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let end = loop {
        match std::io::Read::read(&mut c, &mut buf) {
            Ok(0) => break "eof",
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "reset",
            Err(e) => panic!("the connection was not closed: {e} after {got} bytes"),
        }
    };
    assert!(
        got < total / 2,
        "{got} of {total} bytes arrived ({end}): the response was not cut"
    );
    let v: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/stats.json")).expect("stats json");
    let web = v["vservers"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == "web").cloned())
        .expect("vserver web");
    assert_eq!(web["send_timeouts"], 1, "{web}");
}

/// R.U.D.Y.: 200 clients each trickle a request body, a byte every 500 ms
/// (every pause well within `client_body`). Each is cut with 408 once its
/// body falls under `request_body.min_rate` after the grace, and counted;
/// a normal client is served 200s the whole time. A body that keeps its
/// rate but outlasts `deadline` is cut too.
#[test]
fn trickled_request_bodies_are_cut_while_others_are_served() {
    const SLOW: usize = 200;
    let o = Origin::start("a");
    let l = free_addr();
    let d = free_addr();
    let cfg = format!(
        "{}[vserver.request_body]\ngrace = \"2s\"\nmin_rate = 100\ndeadline = \"20s\"\n\n\
         [[vserver]]\nname = \"deadline\"\nlisten = [\"{d}\"]\ndefault_pool = \"p\"\n\
         [vserver.request_body]\nmin_rate = 0\ndeadline = \"2s\"\n",
        config(l, &[o.addr], "client_body = \"30s\"")
    );
    let sy = Switchyard::start(&cfg, &[l, d]);
    let stop = Arc::new(AtomicBool::new(false));
    let normal = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut served = 0;
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
                let r = request(
                    l,
                    "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello=world",
                );
                assert_eq!(r.status, 200, "{}", r.body_text());
                served += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            served
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Each slow client: its head, then a byte every `every` until it is
    // answered or `max` bytes went; what it read and when.
    async fn trickle(
        to: SocketAddr,
        every: Duration,
        piece: usize,
        max: usize,
    ) -> (String, Duration) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let start = Instant::now();
        let mut s = tokio::net::TcpStream::connect(to).await.expect("connect");
        let head = "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n";
        s.write_all(head.as_bytes()).await.expect("head");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..max {
            if s.write_all(&vec![b'x'; piece]).await.is_err() {
                break;
            }
            match tokio::time::timeout(every, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
            if got.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), s.read_to_end(&mut got)).await;
        (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
    }
    let (slow, late) = rt.block_on(async {
        let tasks: Vec<_> = (0..SLOW)
            .map(|_| tokio::spawn(trickle(l, Duration::from_millis(500), 1, 40)))
            .collect();
        // 1 KB every 200 ms (5 KB/s, far above any minimum) to the
        // vserver with only a deadline.
        let late = tokio::spawn(trickle(d, Duration::from_millis(200), 1000, 50));
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("slow client"));
        }
        (out, late.await.expect("late client"))
    });
    stop.store(true, Ordering::Relaxed);
    let served = normal.join().expect("normal client");
    for (text, took) in &slow {
        assert!(text.starts_with("HTTP/1.1 408"), "{text:?} after {took:?}");
        assert!(text.contains("too slowly"), "{text}");
        // grace 2 s; a few bytes earn tens of ms; under 20 s (40 bytes
        // at 500 ms) means the gap did not end it and the cut came.
        assert!(
            *took >= Duration::from_secs(2) && *took < Duration::from_secs(15),
            "cut after {took:?}"
        );
    }
    let (text, took) = late;
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?} after {took:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert!(served > 0, "the normal client was never served");
    let stats = sy.stats();
    let vs = |name: &str| {
        stats["vservers"]
            .as_array()
            .and_then(|a| a.iter().find(|v| v["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no vserver {name}: {stats}"))
    };
    assert_eq!(vs("web")["body_timeouts"], SLOW as u64);
    assert_eq!(vs("deadline")["body_timeouts"], 1);
    let m = sy.admin_get("/metrics");
    assert!(
        m.lines()
            .any(|x| x
                == format!("switchyard_vserver_body_timeouts_total{{vserver=\"web\"}} {SLOW}")),
        "{m}"
    );
}

/// A policy's `timeouts` (ingress-nginx's proxy-read-timeout per
/// Ingress): its requests wait for the member that long, the others the
/// global `[timeouts]`; check refuses them without a pool action, and 0.
#[test]
fn a_policy_upstream_response_timeout_replaces_the_global_one() {
    let o = Origin::start("a");
    o.set(|b| b.delay = Duration::from_millis(1500));
    let l = free_addr();
    let policy = "[[vserver.policy]]\nmatch = { path_prefix = \"/impatient\" }\naction = { pool = \"p\" }\ntimeouts = { upstream_response = \"300ms\", upstream_connect = \"2s\" }\n";
    let cfg = config(l, &[o.addr], "upstream_response = \"10s\"").replace(
        "default_pool = \"p\"\n",
        &format!("default_pool = \"p\"\n{policy}"),
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let r = Client::connect(l).get("/impatient/x");
    assert_eq!(r.status, 504, "{}", r.body_text());
    assert_eq!(sy.member_stats("p", o.addr)["response_timeouts"], 1);
    // The global one for everything else: the slow member is waited for.
    assert_eq!(Client::connect(l).get("/patient").status, 200);
    for (bad, why) in [
        (
            cfg.replace("action = { pool = \"p\" }\ntimeouts", "timeouts"),
            "timeouts are for the member a policy sends to",
        ),
        (
            cfg.replace("\"300ms\"", "\"0s\""),
            "timeouts.upstream_response must be above 0",
        ),
    ] {
        let path = temp_dir("policy-timeouts").join("bad.toml");
        std::fs::write(&path, &bad).expect("write");
        let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("utf-8")]);
        assert_ne!(code, Some(0), "{bad}");
        assert!(format!("{out}{err}").contains(why), "{why}: {out}{err}");
    }
}
