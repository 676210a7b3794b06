//! Framing strictness (request smuggling defences): every ambiguous or
//! invalid message is refused with the right status and the connection is
//! closed, and the origin never sees the bad request. The same strictness
//! applies to responses from members: the client gets a 502 and the bad
//! member connection is closed and counted.

mod common;
use common::*;

use std::time::Duration;

fn setup(extra_global: &str) -> (Origin, std::net::SocketAddr, Switchyard) {
    let o = Origin::start("a");
    let l = free_addr();
    let cfg =
        simple_config(l, &[&o], "").replacen("[global]\n", &format!("[global]\n{extra_global}"), 1);
    let sy = Switchyard::start(&cfg, &[l]);
    (o, l, sy)
}

/// Sends `raw`, expects `status` and a closed connection.
fn refused(l: std::net::SocketAddr, raw: &[u8], status: u16) {
    let mut c = Client::connect(l);
    c.send(raw);
    let r = c
        .read_response(false)
        .unwrap_or_else(|| panic!("no response to {:?}", String::from_utf8_lossy(raw)));
    assert_eq!(
        r.status,
        status,
        "for {:?}: {}",
        String::from_utf8_lossy(raw),
        r.body_text()
    );
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "for {:?}",
        String::from_utf8_lossy(raw)
    );
    assert!(
        c.closed_within(Duration::from_secs(3)),
        "connection left open after {:?}",
        String::from_utf8_lossy(raw)
    );
}

#[test]
fn ambiguous_requests_are_refused_and_never_forwarded() {
    let (o, l, sy) = setup("");
    let cases: &[(&[u8], u16)] = &[
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
        // obs-fold
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n two\r\n\r\n", 400),
        // whitespace before the colon
        (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A\t: b\r\n\r\n", 400),
        // invalid field names and values
        (b"GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x7fc\r\n\r\n", 400),
        // bare CR, bare LF, NUL
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rX-B: c\r\n\r\n", 400),
        (b"GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\nX-B: c\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n", 400),
        // Host rules
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        // request line
        (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        (b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ];
    for (raw, status) in cases {
        refused(l, raw, *status);
    }
    assert_eq!(
        o.requests(),
        0,
        "the origin saw a refused request: {:?}",
        o.seen()
    );
    let stats: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/stats.json")).expect("json");
    assert!(
        stats["vservers"][0]["bad_requests"].as_u64().unwrap_or(0) >= cases.len() as u64 - 1,
        "{stats}"
    );
    // A good request still goes through after all of that.
    assert_eq!(get(l, "/").status, 200);
}

#[test]
fn invalid_chunked_request_bodies_never_reach_the_origin_complete() {
    let (o, l, _sy) = setup("");
    let cases: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n",
    ];
    for raw in cases {
        refused(l, raw, 400);
    }
    assert_eq!(
        o.requests(),
        0,
        "the origin completed a bad request: {:?}",
        o.seen()
    );
}

#[test]
fn size_limits_give_414_and_431() {
    let (o, l, _sy) = setup("");
    let _ = &o;
    let o2 = Origin::start("b");
    let l2 = free_addr();
    let cfg = format!(
        "[limits]\nmax_request_line = 100\nmax_header_bytes = 2048\n{}",
        simple_config(l2, &[&o2], "")
    );
    let _sy2 = Switchyard::start(&cfg, &[l2]);
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(200));
    refused(l2, long_line.as_bytes(), 414);
    let big_head = format!(
        "GET / HTTP/1.1\r\nHost: a\r\n{}\r\n",
        "X-Fill: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(60)
    );
    refused(l2, big_head.as_bytes(), 431);
    // The default limits are larger: the same long line passes there.
    assert_eq!(
        request(
            l,
            &long_line.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
        )
        .status,
        200
    );
    assert_eq!(o2.requests(), 0);
}

fn bad_member(raw: &[u8]) -> (u16, String, serde_json::Value) {
    let o = Origin::start("bad");
    o.set(|b| b.raw_response = Some(raw.to_vec()));
    let l = free_addr();
    let sy = Switchyard::start(&simple_config(l, &[&o], ""), &[l]);
    let r = get(l, "/");
    let stats: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/stats.json")).expect("json");
    (r.status, r.body_text(), stats)
}

#[test]
fn ambiguous_responses_become_502_and_are_counted() {
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello",
        b"HTTP/1.1 200 OK\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nX-A: b\rc\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nX-A : b\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"garbage\r\n\r\n",
    ];
    for raw in cases {
        let (status, body, stats) = bad_member(raw);
        assert_eq!(
            status,
            502,
            "member sent {:?}, client got {status}: {body}",
            String::from_utf8_lossy(raw)
        );
        let m = &stats["pools"][0]["members"][0];
        assert!(
            m["bad_responses"].as_u64().unwrap_or(0) >= 1,
            "not counted for {:?}: {m}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(
            m["server_connections_idle"], 0,
            "bad connection kept for reuse: {m}"
        );
    }
}
