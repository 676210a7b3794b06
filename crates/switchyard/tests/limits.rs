//! Per-source limits (HAProxy's stick tables) through the real binary:
//! concurrent connections per source given back when a connection ends,
//! request rates per header key, allow lists, deny for a while, tarpit,
//! a reload that keeps the counts, an L4 vserver, and the counters in the
//! admin API and /metrics. Sources are loopback addresses (127.0.0.x).

mod common;
use common::*;

use std::time::{Duration, Instant};

fn config(listen: std::net::SocketAddr, o: &Origin, limits: &str) -> String {
    format!(
        "[global]\nworkers = 2\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n{limits}\n\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        o.addr
    )
}

/// One request from `source`; None when the connection is refused (reset
/// during the connect, a write that fails, or closed before an answer).
fn get_from(listen: std::net::SocketAddr, source: &str, extra: &str) -> Option<Response> {
    use std::io::Write;
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let src: std::net::SocketAddr = format!("{source}:0").parse().ok()?;
    sock.bind(&src.into()).ok()?;
    sock.connect_timeout(&listen.into(), Duration::from_secs(5))
        .ok()?;
    let s: std::net::TcpStream = sock.into();
    let mut c = Client::from_stream(s);
    c.w.write_all(
        format!("GET / HTTP/1.1\r\nHost: h\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    c.read_response(false)
}

/// Whether a connection from `source` is refused: reset during the
/// connect, or closed before an answer.
fn refused(listen: std::net::SocketAddr, source: &str) -> bool {
    use std::io::{Read, Write};
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let src: std::net::SocketAddr = format!("{source}:0").parse().expect("source");
    sock.bind(&src.into()).expect("bind source");
    if sock
        .connect_timeout(&listen.into(), Duration::from_secs(5))
        .is_err()
    {
        return true;
    }
    let mut s: std::net::TcpStream = sock.into();
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return true;
    }
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

fn limit_json(sy: &Switchyard) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/api/v1/shield")).expect("shield json");
    v["limits"]["web"][0].clone()
}

#[test]
fn concurrent_connections_per_source_are_limited_and_given_back() {
    let o = Origin::start("a");
    let listen = addr(free_port());
    let sy = Switchyard::start(
        &config(
            listen,
            &o,
            "[[vserver.limit]]\nname = \"per-source\"\nconn_cur = 2\nallow = [\"127.0.0.9/32\"]",
        ),
        &[listen],
    );
    // Two kept-alive connections from 127.0.0.2 hold both places.
    let mut a = Client::connect_from(listen, "127.0.0.2");
    let mut b = Client::connect_from(listen, "127.0.0.2");
    assert_eq!(a.get("/").status, 200);
    assert_eq!(b.get("/").status, 200);
    // A third is refused at once (its reset can beat the connect's own
    // return, which a plain connect took for a failure of the test).
    assert!(
        refused(listen, "127.0.0.2"),
        "a third connection was served"
    );
    // Another source has its own count; an allowed one is never counted.
    assert_eq!(
        get_from(listen, "127.0.0.3", "").expect("other").status,
        200
    );
    let held: Vec<Client> = (0..4)
        .map(|_| Client::connect_from(listen, "127.0.0.9"))
        .collect();
    for mut h in held {
        assert_eq!(h.get("/").status, 200);
    }
    // Closing one gives its place back.
    drop(a);
    assert!(eventually(Duration::from_secs(3), || {
        get_from(listen, "127.0.0.2", "").is_some_and(|r| r.status == 200)
    }));
    let l = limit_json(&sy);
    assert!(l["refused"]["conn_cur"].as_u64().unwrap_or(0) >= 1, "{l}");
    let m = sy.admin_get("/metrics");
    assert!(
        m.lines().any(|x| x.starts_with(
            "switchyard_limit_refused_total{vserver=\"web\",limit=\"per-source\",reason=\"conn_cur\"}"
        ) && !x.ends_with(" 0")),
        "{m}"
    );
    drop(b);
}

/// `req_cur`: the requests of a source in progress at once: a third while
/// two wait for a slow member is refused (without reaching it), another
/// source is not, and each place comes back when its answer has been sent.
#[test]
fn requests_in_progress_per_source_are_limited_and_given_back() {
    let o = Origin::start("a");
    let listen = addr(free_port());
    let sy = Switchyard::start(
        &config(
            listen,
            &o,
            "h2c = true\n[[vserver.limit]]\nname = \"in-flight\"\nreq_cur = 2",
        ),
        &[listen],
    );
    assert_eq!(
        get_from(listen, "127.0.0.31", "").expect("first").status,
        200
    );
    o.set(|b| b.delay = Duration::from_millis(1500));
    let before = o.requests();
    let slow: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || get_from(listen, "127.0.0.31", "").map(|r| r.status)))
        .collect();
    // Both are at the member (they hold their places).
    assert!(eventually(Duration::from_secs(5), || o.requests() >= before + 2));
    let third = get_from(listen, "127.0.0.31", "").expect("an answer");
    assert_eq!(third.status, 429);
    assert_eq!(third.header("retry-after"), Some("1"));
    assert_eq!(o.requests(), before + 2, "the third reached the member");
    // Another source has places of its own.
    let other = std::thread::spawn(move || get_from(listen, "127.0.0.32", "").map(|r| r.status));
    for t in slow {
        assert_eq!(t.join().expect("thread"), Some(200));
    }
    assert_eq!(other.join().expect("thread"), Some(200));
    // Their answers sent, the places are back.
    o.set(|b| b.delay = Duration::ZERO);
    assert_eq!(
        get_from(listen, "127.0.0.31", "").expect("after").status,
        200
    );
    let l = limit_json(&sy);
    assert_eq!(l["refused"]["req_cur"], 1, "{l}");
    assert_eq!(l["req_cur"], 2, "{l}");
    // HTTP/2: each stream is a request in progress; three at once on one
    // connection, two are served.
    o.set(|b| b.delay = Duration::from_millis(1500));
    let mut statuses = h2_at_once(listen, 3);
    statuses.sort();
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(limit_json(&sy)["refused"]["req_cur"], 2);
}

/// `n` GETs sent at once on one HTTP/2 (h2c) connection: their statuses.
fn h2_at_once(listen: std::net::SocketAddr, n: usize) -> Vec<u16> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(listen)
            .await
            .expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(conn);
        let mut send = send.ready().await.expect("ready");
        let mut answers = Vec::new();
        for _ in 0..n {
            let req = http::Request::get("http://h/").body(()).expect("request");
            let (resp, _) = send.send_request(req, true).expect("send");
            answers.push(resp);
        }
        let mut out = Vec::new();
        for a in answers {
            out.push(a.await.expect("response").status().as_u16());
        }
        out
    })
}

#[test]
fn request_rates_per_header_key_with_retry_after_and_a_reload_keeps_counts() {
    let o = Origin::start("a");
    let listen = addr(free_port());
    let cfg = config(
        listen,
        &o,
        "[[vserver.limit]]\nname = \"per-key\"\nkey = \"header:X-Api-Key\"\nreq_rate = \"5/1m\"",
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    let key = |k: &str| format!("X-Api-Key: {k}\r\n");
    for _ in 0..5 {
        assert_eq!(
            get_from(listen, "127.0.0.2", &key("alpha"))
                .expect("r")
                .status,
            200
        );
    }
    // From another source too: the key is the header, not the address.
    let r = get_from(listen, "127.0.0.3", &key("alpha")).expect("r");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(
        get_from(listen, "127.0.0.2", &key("beta"))
            .expect("r")
            .status,
        200
    );
    // Requests without the key are not limited by it.
    for _ in 0..8 {
        assert_eq!(get_from(listen, "127.0.0.2", "").expect("r").status, 200);
    }
    // A reload keeps who is over the limit.
    let (ok, out) = sy.reload_with(&cfg);
    assert!(ok, "{out}");
    assert_eq!(
        get_from(listen, "127.0.0.2", &key("alpha"))
            .expect("r")
            .status,
        429
    );
    let l = limit_json(&sy);
    assert_eq!(l["refused"]["req_rate"], 2, "{l}");
    assert_eq!(l["key"], "header:x-api-key");
}

#[test]
fn deny_refuses_a_source_for_a_while_and_tarpit_holds_the_answer() {
    let o = Origin::start("a");
    let listen = addr(free_port());
    let sy = Switchyard::start(
        &config(
            listen,
            &o,
            "[[vserver.limit]]\nname = \"burst\"\nconn_rate = \"3/1m\"\naction = \"deny\"\ndeny_for = \"1m\"",
        ),
        &[listen],
    );
    for _ in 0..3 {
        assert_eq!(get_from(listen, "127.0.0.2", "").expect("r").status, 200);
    }
    assert!(refused(listen, "127.0.0.2"));
    // Denied now: refused although the rate window would not refuse yet.
    assert!(refused(listen, "127.0.0.2"));
    let l = limit_json(&sy);
    assert_eq!(l["refused"]["conn_rate"], 1, "{l}");
    assert_eq!(l["refused"]["denied"], 1, "{l}");
    drop(sy);

    let listen = addr(free_port());
    let _sy = Switchyard::start(
        &config(
            listen,
            &o,
            "[[vserver.limit]]\nname = \"slow\"\nreq_rate = \"1/1m\"\naction = \"tarpit\"\ntarpit = \"400ms\"",
        ),
        &[listen],
    );
    let mut c = Client::connect_from(listen, "127.0.0.4");
    assert_eq!(c.get("/").status, 200);
    let t = Instant::now();
    let r = c.get("/");
    assert_eq!(r.status, 429);
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn an_l4_vserver_limits_connections_and_check_refuses_request_limits_there() {
    let o = Origin::start("a");
    let listen = addr(free_port());
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nprotocol = \"tcp\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\
         [[vserver.limit]]\nname = \"c\"\nconn_cur = 1\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        o.addr
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let mut a = Client::connect_from(listen, "127.0.0.2");
    assert_eq!(a.get("/").status, 200);
    assert!(refused(listen, "127.0.0.2"));

    let dir = temp_dir("limits");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        cfg.replace("conn_cur = 1", "req_rate = \"10/1s\"\nkey = \"path\""),
    )
    .expect("write");
    let out = std::process::Command::new(bin())
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .expect("check");
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.contains("an L4 vserver limits connections"), "{text}");
    assert!(
        text.contains("conn_cur and conn_rate") || text.contains("req_rate"),
        "{text}"
    );
}

/// `scope = "policy"`: a limit counts only the requests of the policies
/// that name it in `limits` (after routing, so the policy's own match
/// decides: ingress-nginx's limit-rps per Ingress); other requests of the
/// vserver, and other sources, are not counted. check refuses a policy
/// that names a vserver-wide or unknown limit, connection limits with
/// that scope, and a policy-scoped limit no policy names.
#[test]
fn a_policy_scoped_limit_counts_only_its_policies_requests() {
    let o = Origin::start("o");
    let l = free_addr();
    let limits = "[[vserver.limit]]\nname = \"api\"\nscope = \"policy\"\nreq_rate = \"3/10s\"\nstatus = 503\n\
                  [[vserver.policy]]\nmatch = { path_prefix = \"/api\" }\naction = { pool = \"p\" }\nlimits = [\"api\"]\n\
                  [[vserver.policy]]\nmatch = { path_prefix = \"/other\" }\naction = { pool = \"p\" }\n";
    let cfg = config(l, &o, limits);
    let _sy = Switchyard::start(&cfg, &[l]);
    let get_path = |source: &str, path: &str| -> u16 {
        use std::io::Write;
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let src: std::net::SocketAddr = format!("{source}:0").parse().expect("source");
        sock.bind(&src.into()).expect("bind");
        sock.connect_timeout(&l.into(), Duration::from_secs(5))
            .expect("connect");
        let mut c = Client::from_stream(sock.into());
        c.w.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .expect("write");
        c.read_response(false).map_or(0, |r| r.status)
    };
    // Requests the policy does not decide are not counted, before or after.
    for _ in 0..5 {
        assert_eq!(get_path("127.0.0.21", "/other"), 200);
        assert_eq!(get_path("127.0.0.21", "/"), 200);
    }
    let api: Vec<u16> = (0..5).map(|_| get_path("127.0.0.21", "/api/x")).collect();
    assert_eq!(api, [200, 200, 200, 503, 503]);
    // Still open to everything else, and to another source.
    assert_eq!(get_path("127.0.0.21", "/other"), 200);
    assert_eq!(get_path("127.0.0.22", "/api/x"), 200);
    for (bad, why) in [
        (
            cfg.replace("limits = [\"api\"]", "limits = [\"nope\"]"),
            "limit \"nope\" is not one of the vserver's",
        ),
        (
            cfg.replace("scope = \"policy\"\n", ""),
            "counts every request of the vserver",
        ),
        (
            cfg.replace("req_rate = \"3/10s\"", "conn_cur = 3"),
            "conn_cur and conn_rate count connections before any request",
        ),
        (
            cfg.replace("limits = [\"api\"]\n", ""),
            "no policy names it",
        ),
    ] {
        let dir = temp_dir("limit-scope");
        let path = dir.join("bad.toml");
        std::fs::write(&path, &bad).expect("write");
        let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("utf-8")]);
        assert_ne!(code, Some(0), "{bad}");
        assert!(format!("{out}{err}").contains(why), "{why}: {out}{err}");
    }
}
