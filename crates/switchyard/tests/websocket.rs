//! WebSocket through the proxy: the Upgrade handshake, masked frames echoed
//! both ways, the close handshake, several sessions at once and the tunnel
//! idle timeout.

mod common;
use common::*;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn handshake(path: &str, key: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

fn start(timeouts: &str) -> (Origin, SocketAddr, Switchyard) {
    let o = Origin::start("ws");
    let l = free_addr();
    let cfg = format!("{timeouts}\n{}", simple_config(l, &[&o], ""));
    let sy = Switchyard::start(&cfg, &[l]);
    (o, l, sy)
}

/// Connects and upgrades; returns the client positioned after the 101.
fn upgrade(l: SocketAddr, key: &str) -> Client {
    let mut c = Client::connect(l);
    c.send(handshake("/chat", key).as_bytes());
    let r = c.read_response(false).expect("101 response");
    assert_eq!(r.status, 101, "{}", r.body_text());
    assert_eq!(
        r.header("sec-websocket-accept"),
        Some(ws_accept(key).as_str())
    );
    assert!(
        r.header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket")),
        "{:?}",
        r.headers
    );
    assert!(
        r.header("connection")
            .is_some_and(|u| u.eq_ignore_ascii_case("upgrade")),
        "{:?}",
        r.headers
    );
    c
}

#[test]
fn accept_key_matches_rfc_6455_example() {
    assert_eq!(ws_accept(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

#[test]
fn echo_through_the_proxy_then_close() {
    let (o, l, sy) = start("");
    let mut c = upgrade(l, KEY);
    // The member saw the upgrade request with its key.
    let seen = o.seen();
    let s = seen.last().expect("origin saw the handshake");
    assert_eq!(s.request_line(), "GET /chat HTTP/1.1");
    assert_eq!(s.header("sec-websocket-key").as_deref(), Some(KEY));
    assert!(s
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket")));
    let long = "x".repeat(300); // 16-bit length form
    let messages = ["hello", "second message", "", long.as_str(), "last"];
    for (i, m) in messages.iter().enumerate() {
        let mask = [i as u8, 0x5a, 0xa5, 0x3c];
        c.send(&ws_frame(1, m.as_bytes(), Some(mask)));
        let (op, payload) = ws_read_frame(&mut c.r).expect("echoed frame");
        assert_eq!(op, 1);
        assert_eq!(payload, m.as_bytes(), "message {i}");
    }
    // Binary and ping frames too.
    c.send(&ws_frame(2, &[0, 1, 2, 255], Some([9, 8, 7, 6])));
    assert_eq!(ws_read_frame(&mut c.r), Some((2, vec![0, 1, 2, 255])));
    c.send(&ws_frame(9, b"ping", Some([1, 1, 1, 1])));
    assert_eq!(ws_read_frame(&mut c.r), Some((9, b"ping".to_vec())));
    // Close handshake: the close frame comes back, then the connection ends.
    c.send(&ws_frame(8, &[0x03, 0xe8], Some([4, 3, 2, 1])));
    assert_eq!(ws_read_frame(&mut c.r), Some((8, vec![0x03, 0xe8])));
    assert!(c.closed_within(Duration::from_secs(3)), "tunnel left open");
    // Bytes are counted when the tunnel ends (both sides closed).
    drop(c);
    let counted = || {
        let v = sy.stats()["vservers"][0].clone();
        v["bytes_in"].as_u64().unwrap_or(0) > 300
            && v["bytes_out"].as_u64().unwrap_or(0) > 300
            && v["client_connections_active"] == 0
    };
    assert!(
        eventually(Duration::from_secs(3), counted),
        "{}",
        sy.stats()
    );
    assert_eq!(sy.stats()["vservers"][0]["responses"]["1xx"], 1);
}

#[test]
fn frame_sent_right_behind_the_handshake_is_not_lost() {
    let (_o, l, _sy) = start("");
    let mut c = Client::connect(l);
    let mut bytes = handshake("/", KEY).into_bytes();
    bytes.extend_from_slice(&ws_frame(1, b"eager", Some([1, 2, 3, 4])));
    c.send(&bytes);
    let r = c.read_response(false).expect("101");
    assert_eq!(r.status, 101);
    assert_eq!(ws_read_frame(&mut c.r), Some((1, b"eager".to_vec())));
}

#[test]
fn several_sessions_at_once_do_not_mix() {
    let (_o, l, _sy) = start("");
    let hs: Vec<_> = (0..6)
        .map(|n| {
            std::thread::spawn(move || {
                let key = format!("a2V5LW51bWJlci0{n}AAAA==");
                let mut c = upgrade(l, &key);
                for i in 0..20 {
                    let m = format!("session {n} message {i}");
                    c.send(&ws_frame(1, m.as_bytes(), Some([n as u8, i as u8, 7, 7])));
                    let (op, p) = ws_read_frame(&mut c.r).expect("echo");
                    assert_eq!((op, p), (1, m.into_bytes()));
                }
                c.send(&ws_frame(8, b"", Some([0, 0, 0, 0])));
                assert_eq!(ws_read_frame(&mut c.r).map(|f| f.0), Some(8));
            })
        })
        .collect();
    for h in hs {
        h.join().expect("session");
    }
}

#[test]
fn idle_tunnel_is_closed_after_tunnel_idle() {
    let (_o, l, _sy) = start("[timeouts]\ntunnel_idle = \"500ms\"");
    let mut c = upgrade(l, KEY);
    // Traffic keeps it open past the idle time.
    for i in 0..4 {
        std::thread::sleep(Duration::from_millis(250));
        c.send(&ws_frame(1, b"tick", Some([i, i, i, i])));
        assert_eq!(ws_read_frame(&mut c.r), Some((1, b"tick".to_vec())));
    }
    let t = Instant::now();
    assert!(
        c.closed_within(Duration::from_secs(3)),
        "idle tunnel kept open"
    );
    let after = t.elapsed();
    assert!(
        after >= Duration::from_millis(400) && after < Duration::from_millis(2500),
        "closed after {after:?}, tunnel_idle is 500ms"
    );
}

/// A member connection that switched protocols carries the tunnel and
/// nothing else: once an idle tunnel is closed, the next request gets a
/// connection of its own. Back in the idle pool, it was written into the
/// member's WebSocket session, which read it as a frame and never answered.
#[test]
fn a_member_connection_that_switched_protocols_is_never_reused() {
    let (o, l, _sy) = start("[timeouts]\ntunnel_idle = \"300ms\"\nupstream_response = \"3s\"");
    let mut c = upgrade(l, KEY);
    c.send(&ws_frame(1, b"one", Some([1, 2, 3, 4])));
    assert_eq!(ws_read_frame(&mut c.r), Some((1, b"one".to_vec())));
    assert!(
        c.closed_within(Duration::from_secs(3)),
        "idle tunnel kept open"
    );
    let t = Instant::now();
    let mut g = Client::connect(l);
    g.send(b"GET /after HTTP/1.1\r\nHost: ws.test\r\n\r\n");
    let r = g.read_response(false).expect("a response");
    assert_eq!(r.status, 200, "{}", r.body_text());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(o
        .seen()
        .last()
        .is_some_and(|s| s.request_line() == "GET /after HTTP/1.1"));
}

// ---------------------------------------------------------------- h2c

fn raw_config(l: SocketAddr, m: &RawMember) -> String {
    format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/admin\" }}\n\
         action = {{ status = 403, body = \"no\\n\" }}\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        m.addr
    )
}

/// Issue 30: `Upgrade: h2c` opened a blind tunnel. The member that would
/// switch never hears of h2c (nor HTTP2-Settings), so the request is a
/// plain one; its 101 anyway is a 502, counted, and the connection closes:
/// the `GET /admin` a policy refuses, sent where the tunnel would be, never
/// reaches it.
#[test]
fn h2c_upgrade_never_reaches_a_member_and_its_101_is_refused() {
    let m = RawMember::start(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
    );
    let l = free_addr();
    let sy = Switchyard::start(&raw_config(l, &m), &[l]);
    let mut c = Client::connect(l);
    c.send(
        b"GET /m HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n\
          Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
    );
    let r = c.read_response(false).expect("an answer");
    assert_eq!(r.status, 502, "{}", r.body_text());
    c.send(b"GET /admin HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        c.closed_within(Duration::from_secs(3)),
        "connection kept open"
    );
    std::thread::sleep(Duration::from_millis(200));
    let seen = m.all().to_ascii_lowercase();
    assert!(seen.starts_with("get /m http/1.1\r\n"), "{seen}");
    assert!(!seen.contains("h2c"), "h2c offered to the member: {seen}");
    assert!(!seen.contains("http2-settings"), "{seen}");
    assert!(!seen.contains("upgrade"), "still an upgrade: {seen}");
    assert!(
        !seen.contains("/admin"),
        "the refused request got through: {seen}"
    );
    let v = &sy.stats()["vservers"][0];
    assert_eq!(v["upgrades_refused"], 1, "{v}");
    assert!(sy
        .admin_get("/metrics")
        .contains("switchyard_vserver_upgrades_refused_total{vserver=\"web\"} 1"));
    // The policy still holds on a new connection.
    assert_eq!(get(l, "/admin").status, 403);
}

/// A WebSocket request answered with a switch to h2c (or to nothing) is a
/// 502: a 101 must name what the client asked for.
#[test]
fn a_101_to_another_protocol_than_asked_is_refused() {
    for answer in [
        "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nupgrade: h2c\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n",
    ] {
        let m = RawMember::start(answer);
        let l = free_addr();
        let sy = Switchyard::start(&raw_config(l, &m), &[l]);
        let mut c = Client::connect(l);
        c.send(handshake("/chat", KEY).as_bytes());
        let r = c.read_response(false).expect("an answer");
        assert_eq!(r.status, 502, "{answer:?}: {}", r.body_text());
        c.send(b"GET /admin HTTP/1.1\r\nHost: t\r\n\r\n");
        assert!(c.closed_within(Duration::from_secs(3)), "{answer:?}");
        std::thread::sleep(Duration::from_millis(200));
        let seen = m.all();
        assert!(seen.contains("websocket"), "{seen}");
        assert!(!seen.contains("/admin"), "{answer:?}: tunnelled: {seen}");
        assert_eq!(sy.stats()["vservers"][0]["upgrades_refused"], 1);
    }
}

/// `Upgrade: h2c, websocket`: the member is offered websocket alone (and
/// no HTTP2-Settings), and the WebSocket works.
#[test]
fn websocket_offered_beside_h2c_still_works() {
    let (o, l, sy) = start("");
    let mut c = Client::connect(l);
    c.send(
        format!(
            "GET /chat HTTP/1.1\r\nHost: ws.test\r\nUpgrade: h2c, websocket\r\n\
             Connection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = c.read_response(false).expect("101");
    assert_eq!(r.status, 101, "{}", r.body_text());
    assert_eq!(r.header("upgrade"), Some("websocket"));
    let seen = o.seen();
    let s = seen.last().expect("the member saw the handshake");
    assert_eq!(s.header("upgrade").as_deref(), Some("websocket"));
    assert_eq!(s.header("http2-settings"), None);
    c.send(&ws_frame(1, b"still works", Some([1, 2, 3, 4])));
    assert_eq!(ws_read_frame(&mut c.r), Some((1, b"still works".to_vec())));
    assert_eq!(sy.stats()["vservers"][0]["upgrades_refused"], 0);
}
