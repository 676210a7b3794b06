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

// ------------------------------------------- WebSocket over HTTP/2 (RFC 8441)

mod over_h2 {
    use super::*;

    use std::sync::Arc;

    use bytes::Bytes;
    use h2::client::SendRequest;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};

    pub struct Front {
        pub sy: Switchyard,
        pub h2c: SocketAddr,
        pub tls: SocketAddr,
        pub ca: std::path::PathBuf,
    }

    /// An h2c vserver and a TLS one (ALPN h2) before `member`, with a
    /// policy refusing /admin, stream windows of 64 KB (messages cross
    /// several) and `extra` at the top.
    pub fn front(member: SocketAddr, extra: &str) -> Front {
        let pki = Pki::new("ws-h2");
        let (cert, key) = pki.issue_cn("site", "localhost", "IP:127.0.0.1,DNS:localhost");
        let (h2c, tls) = (free_addr(), free_addr());
        let policy = "[[vserver.policy]]\nmatch = { path_prefix = \"/admin\" }\n\
                      action = { status = 403, body = \"denied\\n\" }\n";
        let cfg = format!(
            "{extra}\n[global]\nworkers = 1\n[http2]\nstream_window = 65535\n\n\
             [[vserver]]\nname = \"h2c\"\nlisten = [\"{h2c}\"]\ndefault_pool = \"p\"\nh2c = true\n{policy}\n\
             [[vserver]]\nname = \"tls\"\nlisten = [\"{tls}\"]\ndefault_pool = \"p\"\n{policy}\n\
             [vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\nalpn = [\"h2\", \"http/1.1\"]\n\n\
             [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{member}\"\n",
            cert.display(),
            key.display(),
        );
        let sy = Switchyard::start(&cfg, &[h2c, tls]);
        Front {
            sy,
            h2c,
            tls,
            ca: pki.ca(),
        }
    }

    pub fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    pub type H2 = SendRequest<Bytes>;

    /// An HTTP/2 connection, over TLS (ALPN h2, `ca` trusted) or h2c, once
    /// the server's SETTINGS came (h2 sends an extended CONNECT only where
    /// they allowed it).
    pub async fn connect(addr: SocketAddr, ca: Option<&std::path::Path>) -> H2 {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let send = match ca {
            None => {
                let (send, conn) = h2::client::handshake(tcp).await.expect("h2c");
                tokio::spawn(conn);
                send
            }
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(ca).expect("ca") {
                    roots.add(c.expect("cert")).expect("add");
                }
                let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
                let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .expect("versions")
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                cfg.alpn_protocols = vec![b"h2".to_vec()];
                let name = ServerName::try_from("localhost").expect("name");
                let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                    .connect(name, tcp)
                    .await
                    .expect("TLS");
                assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
                let (send, conn) = h2::client::handshake(tls).await.expect("h2");
                tokio::spawn(conn);
                send
            }
        };
        let mut send = send.ready().await.expect("ready");
        // The server's SETTINGS arrive with its first bytes (the policy
        // answers /admin: the member sees nothing of it).
        let ping = http::Request::get("http://ws.test/admin/ping")
            .body(())
            .unwrap();
        let (resp, _) = send.send_request(ping, true).expect("GET");
        let _ = resp.await;
        send
    }

    /// Opens `path` as a WebSocket by extended CONNECT; the response and
    /// the stream to send on.
    pub async fn open(
        send: &mut H2,
        scheme: &str,
        path: &str,
    ) -> (http::Response<h2::RecvStream>, h2::SendStream<Bytes>) {
        let req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(format!("{scheme}://ws.test{path}"))
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .extension(h2::ext::Protocol::from_static("websocket"))
            .body(())
            .expect("request");
        let mut s = send.clone().ready().await.expect("ready");
        let (resp, out) = s.send_request(req, false).expect("extended CONNECT");
        (resp.await.expect("response"), out)
    }

    /// Reads one WebSocket frame from the stream, DATA frames joined as
    /// needed; `pending` keeps what came past it. None at the stream's end.
    pub async fn read_frame(
        recv: &mut h2::RecvStream,
        pending: &mut Vec<u8>,
    ) -> Option<(u8, Vec<u8>)> {
        loop {
            let mut c = std::io::Cursor::new(&pending[..]);
            if let Some(f) = ws_read_frame(&mut c) {
                let used = c.position() as usize;
                pending.drain(..used);
                return Some(f);
            }
            let chunk = recv.data().await?.expect("DATA");
            let _ = recv.flow_control().release_capacity(chunk.len());
            pending.extend_from_slice(&chunk);
        }
    }

    /// Sends a close frame (1000, normal closure) and waits for its echo.
    pub async fn close_and_expect_echo(
        out: &mut h2::SendStream<Bytes>,
        recv: &mut h2::RecvStream,
        pending: &mut Vec<u8>,
    ) {
        send_all(out, &ws_frame(8, &[0x03, 0xe8], Some([1, 2, 3, 4])), false).await;
        assert_eq!(read_frame(recv, pending).await, Some((8, vec![0x03, 0xe8])));
    }

    /// Sends `data`, waiting for the window as h2 asks.
    pub async fn send_all(out: &mut h2::SendStream<Bytes>, data: &[u8], end: bool) {
        let mut rest = Bytes::copy_from_slice(data);
        while !rest.is_empty() {
            out.reserve_capacity(rest.len());
            let n = std::future::poll_fn(|cx| out.poll_capacity(cx))
                .await
                .expect("capacity")
                .expect("capacity");
            let piece = rest.split_to(n.min(rest.len()));
            out.send_data(piece, end && rest.is_empty()).expect("DATA");
        }
        if end && data.is_empty() {
            out.send_data(Bytes::new(), true).expect("END_STREAM");
        }
    }
}

/// RFC 8441 end to end, over h2c and over TLS with ALPN h2: the server
/// announces SETTINGS_ENABLE_CONNECT_PROTOCOL, an extended CONNECT reaches
/// the HTTP/1.1 member as a GET Upgrade with a key of ours, the member's
/// 101 is a 200 without its handshake fields, frames go both ways
/// (messages of 60 KB cross the 64 KB windows both ways: WINDOW_UPDATEs
/// as data is consumed), the close handshake ends the stream cleanly and
/// the connection serves requests after it.
#[test]
fn websocket_over_h2c_and_tls_h2_echoes_both_ways_and_closes() {
    use over_h2::*;
    let o = Origin::start("ws");
    let f = front(o.addr, "");
    let rt = runtime();
    for (addr, ca, scheme) in [
        (f.h2c, None, "http"),
        (f.tls, Some(f.ca.as_path()), "https"),
    ] {
        rt.block_on(async {
            let mut h2 = connect(addr, ca).await;
            assert!(h2.is_extended_connect_protocol_enabled(), "{scheme}");
            let (resp, mut out) = open(&mut h2, scheme, "/chat?room=1").await;
            assert_eq!(resp.status(), 200, "{scheme}");
            for name in ["sec-websocket-accept", "upgrade", "connection"] {
                assert!(resp.headers().get(name).is_none(), "{scheme}: {name}");
            }
            let mut recv = resp.into_body();
            let mut pending = Vec::new();
            let big = "y".repeat(60_000);
            let messages = [
                "hello",
                "",
                big.as_str(),
                "x",
                big.as_str(),
                big.as_str(),
                "last",
            ];
            for (i, m) in messages.iter().enumerate() {
                let frame = ws_frame(1, m.as_bytes(), Some([i as u8, 1, 2, 3]));
                send_all(&mut out, &frame, false).await;
                let got = read_frame(&mut recv, &mut pending).await;
                assert_eq!(
                    got,
                    Some((1, m.as_bytes().to_vec())),
                    "{scheme}: message {i}"
                );
            }
            send_all(&mut out, &ws_frame(9, b"ping", Some([4, 4, 4, 4])), false).await;
            assert_eq!(
                read_frame(&mut recv, &mut pending).await,
                Some((9, b"ping".to_vec()))
            );
            // Close: the close frame comes back, the member's FIN is the
            // END_STREAM, and ours ends the stream.
            close_and_expect_echo(&mut out, &mut recv, &mut pending).await;
            let end = tokio::time::timeout(Duration::from_secs(5), async {
                let mut after = Vec::new();
                while let Some(d) = recv.data().await {
                    after.extend_from_slice(&d?);
                }
                Ok::<_, h2::Error>(after)
            })
            .await;
            assert!(
                matches!(&end, Ok(Ok(rest)) if rest.is_empty()),
                "{scheme}: no clean END_STREAM: {end:?}"
            );
            send_all(&mut out, &[], true).await;
            // The connection goes on.
            let mut s = h2.clone().ready().await.expect("ready");
            let get = http::Request::get(format!("{scheme}://ws.test/after"))
                .body(())
                .unwrap();
            let (resp, _) = s.send_request(get, true).expect("GET");
            assert_eq!(resp.await.expect("after").status(), 200);
        });
        // The member saw a GET Upgrade with a key of ours and the client's
        // version and subprotocol.
        let host = assert_websocket_upgrade(&o.seen());
        assert_eq!(host.as_deref(), Some("ws.test"));
        o.clear();
    }
    // The tunnels' bytes are counted on each vserver (three 60 KB
    // messages each way).
    let stats = f.sy.stats();
    for name in ["h2c", "tls"] {
        let v = stats["vservers"]
            .as_array()
            .and_then(|a| a.iter().find(|v| v["name"] == name))
            .expect("vserver");
        for dir in ["bytes_in", "bytes_out"] {
            let n = v[dir].as_u64().unwrap_or(0);
            assert!(n > 180_000, "{name} {dir}: {v}");
        }
    }
}

/// The extended CONNECT goes through the rules as the GET it becomes: a
/// policy refusing the path refuses it (403) and the member sees nothing;
/// a member that answers 200 instead of 101 gives the client that 200 as
/// a response (its body, then END_STREAM), not a tunnel, and the bytes the
/// client sent never reach the member; a plain CONNECT is still 501.
#[test]
fn websocket_over_h2_is_refused_by_policy_and_a_non_101_is_a_plain_response() {
    use over_h2::*;
    let m = RawMember::start("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nplain\n");
    let f = front(m.addr, "");
    let rt = runtime();
    rt.block_on(async {
        let mut h2 = connect(f.h2c, None).await;
        let (resp, _out) = open(&mut h2, "http", "/admin/ws").await;
        assert_eq!(resp.status(), 403);
        // The same path by another spelling is the same path.
        let (resp, _out) = open(&mut h2, "http", "/x/../admin/ws").await;
        assert_eq!(resp.status(), 403);

        let (resp, mut out) = open(&mut h2, "http", "/chat").await;
        assert_eq!(resp.status(), 200);
        let _ = out.send_data(
            bytes::Bytes::from(ws_frame(1, b"lost", Some([1, 1, 1, 1]))),
            false,
        );
        let mut recv = resp.into_body();
        let mut body = Vec::new();
        while let Some(d) = recv.data().await {
            body.extend_from_slice(&d.expect("DATA"));
        }
        assert_eq!(body, b"plain\n");

        let plain = http::Request::connect("ws.test:443").body(()).unwrap();
        let mut s = h2.clone().ready().await.expect("ready");
        let (resp, _) = s.send_request(plain, false).expect("CONNECT");
        assert_eq!(resp.await.expect("CONNECT").status(), 501);
    });
    std::thread::sleep(Duration::from_millis(300));
    let seen = m.all();
    assert!(!seen.contains("/admin"), "{seen}");
    assert!(seen.starts_with("GET /chat HTTP/1.1\r\n"), "{seen}");
    assert!(!seen.contains("lost"), "{seen}");
    assert_eq!(seen.matches("HTTP/1.1\r\n").count(), 1, "{seen}");
}

/// A tunnel over HTTP/2 lives by `tunnel_idle`, not by the request body
/// timeouts: pauses past `client_body` between frames leave it open, and
/// silence past `tunnel_idle` resets the stream (CANCEL) while the
/// connection goes on.
#[test]
fn websocket_over_h2_is_held_by_tunnel_idle_only() {
    use over_h2::*;
    let o = Origin::start("ws");
    let f = front(
        o.addr,
        "[timeouts]\ntunnel_idle = \"1s\"\nclient_body = \"300ms\"",
    );
    let rt = runtime();
    rt.block_on(async {
        let mut h2 = connect(f.h2c, None).await;
        let (resp, mut out) = open(&mut h2, "http", "/chat").await;
        assert_eq!(resp.status(), 200);
        let mut recv = resp.into_body();
        let mut pending = Vec::new();
        for i in 0..3u8 {
            tokio::time::sleep(Duration::from_millis(600)).await;
            send_all(&mut out, &ws_frame(1, b"tick", Some([i, i, i, i])), false).await;
            assert_eq!(
                read_frame(&mut recv, &mut pending).await,
                Some((1, b"tick".to_vec())),
                "tick {i}"
            );
        }
        let t = Instant::now();
        let end = tokio::time::timeout(Duration::from_secs(5), recv.data()).await;
        let after = t.elapsed();
        let reason = match end {
            Ok(Some(Err(e))) => e.reason(),
            other => panic!("no reset: {other:?}"),
        };
        assert_eq!(reason, Some(h2::Reason::CANCEL));
        assert!(
            after >= Duration::from_millis(800) && after < Duration::from_millis(3000),
            "reset after {after:?}, tunnel_idle is 1s"
        );
        let mut s = h2.clone().ready().await.expect("ready");
        let get = http::Request::get("http://ws.test/after").body(()).unwrap();
        let (resp, _) = s.send_request(get, true).expect("GET");
        assert_eq!(resp.await.expect("after").status(), 200);
    });
}

/// A member that switches to websocket, then reports what it read up to
/// its connection's end and answers "bye" before closing. A request that
/// asks for no upgrade gets a 200 any cache may keep for a minute.
fn fin_member() -> (SocketAddr, std::sync::mpsc::Receiver<Vec<u8>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut w = c.try_clone().expect("clone");
                let mut r = BufReader::new(c);
                let mut key = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("sec-websocket-key:") {
                        key = line[line.len() - v.len()..].trim().to_string();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                if key.is_empty() {
                    let _ = w.write_all(
                        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 7\r\n\
                          Connection: close\r\n\r\ncached\n",
                    );
                    return;
                }
                let _ = write!(
                    w,
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                    ws_accept(&key)
                );
                let mut got = Vec::new();
                let _ = r.read_to_end(&mut got);
                let _ = tx.send(got);
                let _ = w.write_all(b"bye");
            });
        }
    });
    (addr, rx)
}

/// END_STREAM and RST_STREAM reach the member's connection: the client's
/// END_STREAM is a FIN after its bytes, and the member may still answer
/// (half-close) before its own FIN ends the stream; a reset closes the
/// member's connection.
#[test]
fn websocket_over_h2_maps_end_stream_and_reset_to_the_members_connection() {
    use over_h2::*;
    let (member, got) = fin_member();
    let f = front(member, "");
    let rt = runtime();
    rt.block_on(async {
        let mut h2 = connect(f.h2c, None).await;
        let (resp, mut out) = open(&mut h2, "http", "/half").await;
        assert_eq!(resp.status(), 200);
        send_all(&mut out, b"hello", true).await;
        let mut recv = resp.into_body();
        let mut back = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(d) = recv.data().await {
                back.extend_from_slice(&d?);
            }
            Ok::<_, h2::Error>(())
        })
        .await;
        assert!(matches!(read, Ok(Ok(()))), "{read:?}");
        assert_eq!(back, b"bye");
        let seen = got
            .recv_timeout(Duration::from_secs(5))
            .expect("member EOF");
        assert_eq!(seen, b"hello");

        let (resp, mut out) = open(&mut h2, "http", "/reset").await;
        assert_eq!(resp.status(), 200);
        send_all(&mut out, b"x", false).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        out.send_reset(h2::Reason::CANCEL);
        let seen = tokio::task::spawn_blocking(move || got.recv_timeout(Duration::from_secs(5)))
            .await
            .expect("join");
        assert_eq!(seen.expect("the member's connection closed"), b"x");
    });
}

/// An extended CONNECT is never answered from the cache: a stored 200 for
/// its path would look to the client like a tunnel opened.
#[test]
fn websocket_over_h2_is_never_served_from_the_cache() {
    use over_h2::*;
    let (member, got) = fin_member();
    let l = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"w\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\nh2c = true\n\
         [vserver.cache]\nenabled = true\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{member}\"\n"
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let rt = runtime();
    rt.block_on(async {
        let mut h2 = connect(l, None).await;
        for _ in 0..2 {
            let mut s = h2.clone().ready().await.expect("ready");
            let get = http::Request::get("http://ws.test/chat").body(()).unwrap();
            let (resp, _) = s.send_request(get, true).expect("GET");
            assert_eq!(resp.await.expect("GET").status(), 200);
        }
        assert!(
            sy.stats()["vservers"][0]["cache_hits"].as_u64() >= Some(1),
            "{}",
            sy.stats()
        );
        let (resp, mut out) = open(&mut h2, "http", "/chat").await;
        assert_eq!(resp.status(), 200);
        send_all(&mut out, b"through", true).await;
        let mut recv = resp.into_body();
        let mut back = Vec::new();
        while let Some(d) = recv.data().await {
            back.extend_from_slice(&d.expect("DATA"));
        }
        assert_eq!(back, b"bye");
    });
    assert_eq!(
        got.recv_timeout(Duration::from_secs(5)).expect("tunnel"),
        b"through"
    );
}

/// Upgrades `path` offering the subprotocols `protocols`: the client
/// after a 101 that answers the key and picked "chat", and that 101.
fn upgrade_offering(l: SocketAddr, path: &str, protocols: &str) -> (Client, Response) {
    let mut c = Client::connect(l);
    c.send(
        format!(
            "GET {path} HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocols}\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = c.read_response(false).expect("101 response");
    assert_eq!(r.status, 101, "{}", r.body_text());
    assert_eq!(
        r.header("sec-websocket-accept"),
        Some(ws_accept(KEY).as_str())
    );
    assert_eq!(r.header("sec-websocket-protocol"), Some("chat"));
    (c, r)
}

/// A vserver over an h2 pool of `member`, for HTTP/1.1 clients (`plain`)
/// and h2c ones (`h2c`), with a policy refusing /admin.
fn over_h2_pool(member: SocketAddr) -> (Switchyard, SocketAddr, SocketAddr) {
    let (plain, h2c) = (free_addr(), free_addr());
    let policy = "[[vserver.policy]]\nmatch = { path_prefix = \"/admin\" }\n\
                  action = { status = 403, body = \"denied\\n\" }\n";
    let cfg = format!(
        "[global]\nworkers = 1\n\
         [[vserver]]\nname = \"plain\"\nlisten = [\"{plain}\"]\ndefault_pool = \"h2\"\n{policy}\n\
         [[vserver]]\nname = \"h2c\"\nlisten = [\"{h2c}\"]\ndefault_pool = \"h2\"\nh2c = true\n{policy}\n\
         [[pool]]\nname = \"h2\"\nprotocol = \"h2\"\n[[pool.member]]\naddress = \"{member}\"\n"
    );
    (Switchyard::start(&cfg, &[plain, h2c]), plain, h2c)
}

/// WebSocket to a member of an h2 pool (RFC 8441 on the member's side):
/// an HTTP/1.1 client's Upgrade and an HTTP/2 client's extended CONNECT
/// both reach the member as an extended CONNECT (`:protocol websocket`,
/// the client's version and subprotocol, no key, no Upgrade or
/// Connection); the member's 200 is a 101 with the accept for the
/// client's key to the HTTP/1.1 client and a 200 to the HTTP/2 one;
/// frames go both ways (60 KB ones across the windows), and the close
/// ends the tunnel cleanly.
#[test]
fn websocket_reaches_an_h2_member_by_extended_connect_from_http1_and_http2() {
    use common::h2_ws_member::H2WsMember;
    use over_h2::*;
    let member = H2WsMember::start(true);
    let (sy, plain, h2c) = over_h2_pool(member.addr);

    let (mut c, r) = upgrade_offering(plain, "/chat?room=1", "chat, superchat");
    assert!(r
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket")));
    assert!(r
        .header("connection")
        .is_some_and(|u| u.eq_ignore_ascii_case("upgrade")));
    assert_eq!(r.header("content-length"), None, "{:?}", r.headers);
    let big = "z".repeat(60_000);
    for (i, m) in ["hello", "", big.as_str(), "last"].iter().enumerate() {
        c.send(&ws_frame(1, m.as_bytes(), Some([i as u8, 7, 7, 7])));
        assert_eq!(
            ws_read_frame(&mut c.r),
            Some((1, m.as_bytes().to_vec())),
            "message {i}"
        );
    }
    c.send(&ws_frame(8, &[0x03, 0xe8], Some([4, 3, 2, 1])));
    assert_eq!(ws_read_frame(&mut c.r), Some((8, vec![0x03, 0xe8])));
    assert!(c.closed_within(Duration::from_secs(3)), "tunnel left open");
    drop(c);

    let seen = member.seen();
    let s = seen.last().expect("the member saw the CONNECT");
    assert_eq!(s.method, "CONNECT", "{s:?}");
    assert_eq!(s.protocol.as_deref(), Some("websocket"), "{s:?}");
    assert_eq!(s.path, "/chat?room=1", "{s:?}");
    assert!(s.scheme.is_some(), "{s:?}");
    assert_eq!(s.authority.as_deref(), Some("ws.test"), "{s:?}");
    assert_eq!(s.header("sec-websocket-version"), Some("13"), "{s:?}");
    assert_eq!(
        s.header("sec-websocket-protocol"),
        Some("chat, superchat"),
        "{s:?}"
    );
    for name in ["sec-websocket-key", "upgrade", "connection"] {
        assert_eq!(s.header(name), None, "{name}: {s:?}");
    }

    let rt = runtime();
    rt.block_on(async {
        let mut h2 = connect(h2c, None).await;
        assert!(h2.is_extended_connect_protocol_enabled());
        let (resp, mut out) = open(&mut h2, "http", "/chat").await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()
                .get("sec-websocket-protocol")
                .map(|v| v.as_bytes()),
            Some(&b"chat"[..])
        );
        assert!(resp.headers().get("sec-websocket-accept").is_none());
        let mut recv = resp.into_body();
        let mut pending = Vec::new();
        for (i, m) in ["one", big.as_str(), big.as_str(), "two"]
            .iter()
            .enumerate()
        {
            send_all(
                &mut out,
                &ws_frame(2, m.as_bytes(), Some([1, 2, 3, i as u8])),
                false,
            )
            .await;
            assert_eq!(
                read_frame(&mut recv, &mut pending).await,
                Some((2, m.as_bytes().to_vec())),
                "message {i}"
            );
        }
        close_and_expect_echo(&mut out, &mut recv, &mut pending).await;
        let end = tokio::time::timeout(Duration::from_secs(5), recv.data()).await;
        assert!(matches!(end, Ok(None)), "no clean END_STREAM: {end:?}");
        send_all(&mut out, &[], true).await;
        // The connection goes on, and so does the member's.
        let mut s = h2.clone().ready().await.expect("ready");
        let get = http::Request::get("http://ws.test/after").body(()).unwrap();
        let (resp, _) = s.send_request(get, true).expect("GET");
        assert_eq!(resp.await.expect("GET").status(), 200);
    });
    let connects = member
        .seen()
        .iter()
        .filter(|s| s.method == "CONNECT")
        .count();
    assert_eq!(connects, 2);
    assert!(
        eventually(Duration::from_secs(3), || member.ends() == ["end", "end"]),
        "{:?}",
        member.ends()
    );
    // Each vserver counts its tunnel's bytes when it ends.
    let counted = || {
        let stats = sy.stats();
        let vs = stats["vservers"].as_array().cloned().unwrap_or_default();
        vs.len() == 2
            && vs.iter().all(|v| {
                v["bytes_in"].as_u64().unwrap_or(0) > 60_000
                    && v["bytes_out"].as_u64().unwrap_or(0) > 60_000
            })
            && stats["pools"][0]["members"][0]["inflight"] == 0
    };
    assert!(
        eventually(Duration::from_secs(3), counted),
        "{}",
        sy.stats()
    );
}

/// What is not a tunnel stays a response: the member's refusal (403) is
/// relayed with its body, a member whose SETTINGS do not allow the
/// extended CONNECT is never sent one (502, and it sees nothing), a
/// handshake without a key is the client's error (400), the rules hold
/// the handshake as any request (403 from the policy, nothing reaches
/// the member), and plain requests on the same pool are untouched.
#[test]
fn websocket_to_an_h2_member_that_refuses_or_cannot_is_a_plain_answer() {
    use common::h2_ws_member::H2WsMember;
    let member = H2WsMember::start(true);
    let (_sy, plain, _) = over_h2_pool(member.addr);
    let ask = |path: &str, key: Option<&str>| {
        let mut c = Client::connect(plain);
        let key = key
            .map(|k| format!("Sec-WebSocket-Key: {k}\r\n"))
            .unwrap_or_default();
        c.send(
            format!(
                "GET {path} HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 {key}Sec-WebSocket-Version: 13\r\n\r\n"
            )
            .as_bytes(),
        );
        c.read_response(false).expect("response")
    };
    let denied = ask("/deny", Some(KEY));
    assert_eq!(denied.status, 403);
    assert_eq!(denied.body_text(), "no websocket here\n");
    assert_eq!(ask("/chat", None).status, 400);
    assert_eq!(ask("/admin/ws", Some(KEY)).status, 403);
    let paths: Vec<String> = member.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(paths, ["/deny"], "{paths:?}");
    let mut c = Client::connect(plain);
    c.send(b"GET /page HTTP/1.1\r\nHost: ws.test\r\n\r\n");
    let r = c.read_response(false).expect("response");
    assert_eq!((r.status, r.body_text().as_str()), (200, "plain\n"));

    let without = H2WsMember::start(false);
    let (sy, plain, _) = over_h2_pool(without.addr);
    let mut c = Client::connect(plain);
    c.send(handshake("/chat", KEY).as_bytes());
    let r = c.read_response(false).expect("response");
    assert_eq!(r.status, 502, "{}", r.body_text());
    assert!(without.seen().is_empty(), "{:?}", without.seen());
    assert_eq!(sy.member_stats("h2", without.addr)["bad_responses"], 1);
}

/// A client that goes away mid-tunnel leaves no stream open on the h2
/// member (its concurrent streams are a budget): its FIN ends the
/// stream, and a tunnel that `tunnel_idle` ends is reset.
#[test]
fn websocket_to_an_h2_member_ends_its_stream_when_the_client_goes_or_idles() {
    use common::h2_ws_member::H2WsMember;
    let member = H2WsMember::start(true);
    let (sy, plain, _) = over_h2_pool(member.addr);
    let mut c = upgrade(plain, KEY);
    c.send(&ws_frame(1, b"hi", Some([1, 2, 3, 4])));
    assert_eq!(ws_read_frame(&mut c.r), Some((1, b"hi".to_vec())));
    drop(c);
    // Its FIN is the stream's END_STREAM, as for an HTTP/1.1 member.
    assert!(
        eventually(Duration::from_secs(3), || member.ends() == ["end"]),
        "{:?}",
        member.ends()
    );
    assert!(eventually(Duration::from_secs(3), || {
        sy.member_stats("h2", member.addr)["inflight"] == 0
    }));
    drop(sy);

    let idle = H2WsMember::start(true);
    let plain = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[timeouts]\ntunnel_idle = \"1s\"\n\
         [[vserver]]\nname = \"plain\"\nlisten = [\"{plain}\"]\ndefault_pool = \"h2\"\n\
         [[pool]]\nname = \"h2\"\nprotocol = \"h2\"\n[[pool.member]]\naddress = \"{}\"\n",
        idle.addr
    );
    let _sy = Switchyard::start(&cfg, &[plain]);
    let started = Instant::now();
    let mut c = upgrade(plain, KEY);
    assert!(
        c.closed_within(Duration::from_secs(6)),
        "idle tunnel left open"
    );
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(900),
        "closed after {after:?}"
    );
    assert!(
        eventually(Duration::from_secs(3), || idle.ends() == ["reset"]),
        "{:?}",
        idle.ends()
    );
}

/// Hypercorn serving tests/asgi/ws_echo.py on `addr` (h2c with prior
/// knowledge, or HTTP/1.1), stopped when dropped.
struct Hypercorn(std::process::Child);

impl Hypercorn {
    fn start(py: &std::path::Path, addr: SocketAddr) -> Hypercorn {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/asgi");
        let child = std::process::Command::new(py)
            .args([
                "-m",
                "hypercorn",
                "--bind",
                &addr.to_string(),
                "ws_echo:app",
            ])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("hypercorn");
        let h = Hypercorn(child);
        assert!(
            eventually(Duration::from_secs(15), || std::net::TcpStream::connect(
                addr
            )
            .is_ok()),
            "hypercorn did not listen on {addr}"
        );
        h
    }
}

impl Drop for Hypercorn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// WebSocket through an h2 pool to an application server others wrote:
/// Hypercorn, which takes WebSocket over HTTP/2 (RFC 8441) and says which
/// HTTP version carried it. An HTTP/1.1 client's handshake and an h2c
/// client's extended CONNECT both reach it over HTTP/2, get its
/// subprotocol, and have text and 70 KB messages echoed and the close
/// answered.
#[test]
fn websocket_reaches_hypercorn_over_http2() {
    use over_h2::*;
    let Some(py) = python_with("hypercorn") else {
        return;
    };
    let member = free_addr();
    let _hc = Hypercorn::start(&py, member);
    let (_sy, plain, h2c) = over_h2_pool(member);

    let (mut c, r) = upgrade_offering(plain, "/chat", "chat");
    assert_eq!(r.header("x-http-version"), Some("2"), "{:?}", r.headers);
    let big = "w".repeat(70_000);
    for (i, m) in ["hello", big.as_str(), "last"].iter().enumerate() {
        c.send(&ws_frame(1, m.as_bytes(), Some([i as u8, 9, 9, 9])));
        let echo = ws_read_frame(&mut c.r);
        assert!(
            echo.as_ref()
                .is_some_and(|(op, p)| *op == 1 && p == m.as_bytes()),
            "HTTP/1.1 message {i}: {:?}",
            echo.map(|(op, p)| (op, p.len()))
        );
    }
    c.send(&ws_frame(8, &[0x03, 0xe8], Some([4, 3, 2, 1])));
    assert_eq!(ws_read_frame(&mut c.r), Some((8, vec![0x03, 0xe8])));
    assert!(c.closed_within(Duration::from_secs(5)), "tunnel left open");

    let rt = runtime();
    rt.block_on(async {
        let mut h2 = connect(h2c, None).await;
        let (resp, mut out) = open(&mut h2, "http", "/chat").await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers().get("x-http-version").map(|v| v.as_bytes()),
            Some(&b"2"[..])
        );
        let mut recv = resp.into_body();
        let mut pending = Vec::new();
        for (i, m) in ["one", big.as_str()].iter().enumerate() {
            send_all(
                &mut out,
                &ws_frame(1, m.as_bytes(), Some([1, 2, 3, i as u8])),
                false,
            )
            .await;
            let echo = read_frame(&mut recv, &mut pending).await;
            assert!(
                echo.as_ref()
                    .is_some_and(|(op, p)| *op == 1 && p == m.as_bytes()),
                "HTTP/2 message {i}: {:?}",
                echo.map(|(op, p)| (op, p.len()))
            );
        }
        close_and_expect_echo(&mut out, &mut recv, &mut pending).await;
        send_all(&mut out, &[], true).await;
        // Plain requests share the member's connection.
        let mut s = h2.clone().ready().await.expect("ready");
        let get = http::Request::get("http://ws.test/page").body(()).unwrap();
        let (resp, _) = s.send_request(get, true).expect("GET");
        let resp = resp.await.expect("GET");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut text = Vec::new();
        while let Some(d) = body.data().await {
            text.extend_from_slice(&d.expect("DATA"));
        }
        assert_eq!(text, b"plain 2\n");
    });
}
