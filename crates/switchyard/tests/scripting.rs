//! Event scripts (`[vserver.script]`, docs/scripting.md) end to end: the
//! classic iRules tasks written as Switchyard scripts, each checked over
//! HTTP/1.1, HTTP/2 (h2c) and HTTP/3 against real origins, and the
//! failures a script can have (an endless loop, a memory hog, a runtime
//! error, a syntax error at check and at reload).
//!
//! Every setup runs its script on two vservers over the same pools and
//! access log: a plain one (HTTP/1.1 and h2c) and its HTTP/3 twin (TLS and
//! QUIC, `[vserver.http3]`), so a task is checked over all three client
//! protocols with the same assertions (`ALL`).

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use common::*;

/// A vserver (h2c beside HTTP/1.1, a JSON access log) running `script`,
/// with one pool per origin named after it (the first is the default).
struct Setup {
    sy: Switchyard,
    listen: SocketAddr,
    log: std::path::PathBuf,
    _dir: std::path::PathBuf,
}

/// The HTTP/3 twin's certificate (site.test), made once per test run:
/// (cert, key, CA).
fn twin_pki() -> &'static (PathBuf, PathBuf, PathBuf) {
    static PKI: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    PKI.get_or_init(|| {
        let pki = Pki::new("script-h3-twin");
        let (cert, key) = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
        (cert, key, pki.ca())
    })
}

/// Each plain vserver's HTTP/3 twin (`h3` finds it by the plain address).
fn twins() -> &'static Mutex<HashMap<SocketAddr, SocketAddr>> {
    static TWINS: OnceLock<Mutex<HashMap<SocketAddr, SocketAddr>>> = OnceLock::new();
    TWINS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The configuration of a setup: vserver "web" on `listen` (HTTP/1.1 and
/// h2c) and its twin "web-h3" on `twin` (TLS and QUIC), with the same
/// script, `extra` lines (in `[vserver.script]`, or tables of the
/// vserver) and access log; one pool per origin.
fn config(
    (listen, twin): (SocketAddr, SocketAddr),
    script: &Path,
    log: &Path,
    origins: &[&Origin],
    extra: &str,
) -> String {
    let (cert, key, _) = twin_pki();
    let mut s = "[global]\nworkers = 1\n\n".to_string();
    for (name, addr, tls) in [
        ("web", listen, "h2c = true\n".to_string()),
        (
            "web-h3",
            twin,
            format!(
                "[vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n[vserver.http3]\n",
                cert.display(),
                key.display()
            ),
        ),
    ] {
        s.push_str(&format!(
            "[[vserver]]\nname = \"{name}\"\nlisten = [\"{addr}\"]\ndefault_pool = \"{}\"\n{tls}[vserver.script]\nfile = \"{}\"\n{extra}\n[vserver.access_log]\nformat = \"json\"\nto = \"file:{}\"\n\n",
            origins[0].name,
            script.display(),
            log.display()
        ));
    }
    for o in origins {
        s.push_str(&format!(
            "[[pool]]\nname = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n",
            o.name, o.addr
        ));
    }
    s
}

fn start(tag: &str, script: &str, origins: &[&Origin]) -> Setup {
    start_with(tag, script, origins, "")
}

fn start_with(tag: &str, script: &str, origins: &[&Origin], extra: &str) -> Setup {
    start_workers(tag, script, origins, extra, 1)
}

fn start_workers(tag: &str, script: &str, origins: &[&Origin], extra: &str, workers: u32) -> Setup {
    start_full(tag, script, origins, (extra, ""), workers)
}

/// A setup with `more` appended to its configuration (pools of its own).
fn start_full(
    tag: &str,
    script: &str,
    origins: &[&Origin],
    (extra, more): (&str, &str),
    workers: u32,
) -> Setup {
    let dir = temp_dir(tag);
    let file = dir.join("script.lua");
    std::fs::write(&file, script).expect("write script");
    let log = dir.join("access.json");
    let (listen, twin) = listen_pair();
    let cfg = config((listen, twin), &file, &log, origins, extra).replacen(
        "workers = 1",
        &format!("workers = {workers}"),
        1,
    ) + more;
    let sy = Switchyard::start(&cfg, &[listen, twin]);
    Setup {
        sy,
        listen,
        log,
        _dir: dir,
    }
}

/// Two free addresses: a plain vserver's and its HTTP/3 twin's (UDP too),
/// registered for `h3`.
fn listen_pair() -> (SocketAddr, SocketAddr) {
    let listen = free_addr();
    let twin = loop {
        let a = free_addr();
        if a != listen && std::net::UdpSocket::bind(a).is_ok() {
            break a;
        }
    };
    twins().lock().expect("twins").insert(listen, twin);
    (listen, twin)
}

/// A response, whichever protocol carried it.
#[derive(Debug)]
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// GET over HTTP/1.1 on a new connection.
fn h1(addr: SocketAddr, host: &str, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (n, v) in headers {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    let r = request(addr, &raw);
    Got {
        status: r.status,
        headers: r.headers.clone(),
        body: r.body_text(),
    }
}

/// GET over HTTP/2 (h2c with prior knowledge) on a new connection.
fn h2(addr: SocketAddr, host: &str, path: &str, headers: &[(&str, &str)]) -> Got {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(conn);
        let mut b = http::Request::get(format!("http://{host}{path}"));
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        let req = b.body(()).expect("request");
        let mut s = send.ready().await.expect("ready");
        let (resp, _) = s.send_request(req, true).expect("send");
        let resp = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .expect("in time")
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = resp.into_body();
        let mut text = Vec::new();
        while let Some(c) = body.data().await {
            let c: Bytes = c.expect("data");
            let _ = body.flow_control().release_capacity(c.len());
            text.extend_from_slice(&c);
        }
        Got {
            status,
            headers,
            body: String::from_utf8_lossy(&text).into_owned(),
        }
    })
}

/// GET over HTTP/3 to the twin of the plain vserver on `addr` (a new QUIC
/// connection; SNI site.test, `host` as `:authority`).
fn h3(addr: SocketAddr, host: &str, path: &str, headers: &[(&str, &str)]) -> Got {
    h3_send(addr, ("GET", host, path), headers, b"")
}

fn h3_send(
    addr: SocketAddr,
    (method, host, path): (&str, &str, &str),
    headers: &[(&str, &str)],
    body: &[u8],
) -> Got {
    let twin = *twins()
        .lock()
        .expect("twins")
        .get(&addr)
        .unwrap_or_else(|| panic!("{addr} has no HTTP/3 twin"));
    let a = common::h3::h3_request(
        twin,
        &twin_pki().2,
        "site.test",
        (method, host, path),
        headers,
        body,
    )
    .unwrap_or_else(|e| panic!("HTTP/3 {method} {path}: {e}"));
    Got {
        status: a.status,
        headers: a.headers,
        body: String::from_utf8_lossy(&a.body).into_owned(),
    }
}

/// POST over HTTP/3 (DATA frames, a content-length as browsers send).
fn post_h3(addr: SocketAddr, path: &str, body: &str) -> Got {
    let len = body.len().to_string();
    h3_send(
        addr,
        ("POST", "h", path),
        &[
            ("content-type", "application/json"),
            ("content-length", &len),
        ],
        body.as_bytes(),
    )
}

/// POST over HTTP/1.1 (a Content-Length body).
fn post_h1(addr: SocketAddr, path: &str, body: &str) -> Got {
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = request(addr, &raw);
    Got {
        status: r.status,
        headers: r.headers.clone(),
        body: r.body_text(),
    }
}

/// POST over HTTP/2 (DATA frames, with a content-length as browsers send).
fn post_h2(addr: SocketAddr, path: &str, body: &str) -> Got {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(conn);
        let req = http::Request::post(format!("http://h{path}"))
            .header("content-length", body.len())
            .body(())
            .expect("request");
        let mut s = send.ready().await.expect("ready");
        let (resp, mut stream) = s.send_request(req, false).expect("send");
        stream
            .send_data(Bytes::copy_from_slice(body.as_bytes()), true)
            .expect("data");
        let resp = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .expect("in time")
            .expect("response");
        let status = resp.status().as_u16();
        let mut b = resp.into_body();
        let mut text = Vec::new();
        while let Some(c) = b.data().await {
            let c: Bytes = c.expect("data");
            let _ = b.flow_control().release_capacity(c.len());
            text.extend_from_slice(&c);
        }
        Got {
            status,
            headers: Vec::new(),
            body: String::from_utf8_lossy(&text).into_owned(),
        }
    })
}

type Post = fn(SocketAddr, &str, &str) -> Got;
const POSTS: [(&str, Post); 3] = [
    ("HTTP/1.1", post_h1),
    ("HTTP/2", post_h2),
    ("HTTP/3", post_h3),
];

type Get = fn(SocketAddr, &str, &str, &[(&str, &str)]) -> Got;
/// The plain vserver's protocols (a task whose answer depends on TLS).
const BOTH: [(&str, Get); 2] = [("HTTP/1.1", h1), ("HTTP/2", h2)];
/// Every client protocol (HTTP/3 to the plain vserver's twin).
const ALL: [(&str, Get); 3] = [("HTTP/1.1", h1), ("HTTP/2", h2), ("HTTP/3", h3)];

/// The request line the origin saw last.
fn last_target(o: &Origin) -> String {
    o.seen()
        .last()
        .map(|s| s.request_line().split(' ').nth(1).unwrap_or("").to_string())
        .unwrap_or_default()
}

/// The vserver counters of a setup: its plain vserver's and its twin's,
/// added up.
fn vserver_stats(sy: &Switchyard) -> serde_json::Value {
    let all = sy.stats()["vservers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut sum = serde_json::Map::new();
    for v in &all {
        for (k, x) in v.as_object().into_iter().flatten() {
            if let Some(n) = x.as_u64() {
                let t = sum.get(k).and_then(|t| t.as_u64()).unwrap_or(0);
                sum.insert(k.clone(), (t + n).into());
            } else if !sum.contains_key(k) {
                sum.insert(k.clone(), x.clone());
            }
        }
    }
    serde_json::Value::Object(sum)
}

/// The access log's JSON lines so far.
fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn redirect_to_https_with_an_exception_list() {
    let o = Origin::start("app");
    let s = start(
        "redirect",
        r#"
local keep = { ["/.well-known/"] = true, ["/health/"] = true }
function on_request(r)
  local first = r.path:match("^(/[^/]*/)")
  if not r.tls and not (first and keep[first]) then
    r:redirect("https://" .. r.host .. r.target, 301)
  end
end
"#,
        &[&o],
    );
    for (proto, get) in BOTH {
        let g = get(s.listen, "shop.example", "/cart?id=7", &[]);
        assert_eq!(g.status, 301, "{proto}: {g:?}");
        assert_eq!(
            g.header("location"),
            Some("https://shop.example/cart?id=7"),
            "{proto}"
        );
        let g = get(
            s.listen,
            "shop.example",
            "/.well-known/acme-challenge/x",
            &[],
        );
        assert_eq!(
            (g.status, g.header("x-origin")),
            (200, Some("app")),
            "{proto}: {g:?}"
        );
    }
    // Over HTTPS (HTTP/3 to the twin): no redirect.
    let g = h3(s.listen, "shop.example", "/cart?id=7", &[]);
    assert_eq!(
        (g.status, g.header("x-origin")),
        (200, Some("app")),
        "{g:?}"
    );
    assert_eq!(o.requests(), 3);
}

#[test]
fn a_maintenance_page_per_host() {
    let o = Origin::start("app");
    let s = start(
        "maint",
        r#"
local down = { ["shop.example"] = true }
function on_request(r)
  if down[r.host] then
    r:respond(503, "<h1>Back soon</h1>", { ["content-type"] = "text/html", ["retry-after"] = "120" })
  end
end
"#,
        &[&o],
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "shop.example", "/", &[]);
        assert_eq!(g.status, 503, "{proto}: {g:?}");
        assert_eq!(g.body, "<h1>Back soon</h1>", "{proto}");
        assert_eq!(g.header("content-type"), Some("text/html"), "{proto}");
        assert_eq!(g.header("retry-after"), Some("120"), "{proto}");
        let g = get(s.listen, "blog.example", "/", &[]);
        assert_eq!(
            (g.status, g.header("x-origin")),
            (200, Some("app")),
            "{proto}: {g:?}"
        );
    }
    assert_eq!(o.requests(), 3);
    // Counted once each, as every answer Switchyard makes itself.
    assert_eq!(vserver_stats(&s.sy)["local_responses"], 3);
}

#[test]
fn a_canary_by_cookie_or_hashed_user_id() {
    let stable = Origin::start("stable");
    let canary = Origin::start("canary");
    let s = start(
        "canary",
        r#"
function on_request(r)
  if r:cookie("canary") == "always" then
    r:use_pool("canary")
    return
  end
  local user = r:header("x-user-id")
  if user and sy.hash(user, 100) < 30 then
    r:use_pool("canary")
  end
end
"#,
        &[&stable, &canary],
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/", &[("cookie", "a=1; canary=always")]);
        assert_eq!(g.header("x-origin"), Some("canary"), "{proto}");
        let g = get(s.listen, "h", "/", &[]);
        assert_eq!(g.header("x-origin"), Some("stable"), "{proto}");
        // A user stays on one side; about 30 % of users are on the canary.
        let mut on_canary = 0;
        for u in 0..40 {
            let id = format!("user-{u}");
            let first = get(s.listen, "h", "/", &[("x-user-id", &id)]);
            let again = get(s.listen, "h", "/", &[("x-user-id", &id)]);
            assert_eq!(
                first.header("x-origin"),
                again.header("x-origin"),
                "{proto} {id}"
            );
            if first.header("x-origin") == Some("canary") {
                on_canary += 1;
            }
        }
        assert!(
            (4..=24).contains(&on_canary),
            "{proto}: {on_canary} of 40 users on the canary"
        );
    }
}

#[test]
fn a_uri_rewrite_to_a_member_prefix() {
    let o = Origin::start("legacy");
    let s = start(
        "rewrite",
        r#"
function on_request(r)
  local rest = r.path:match("^/api(/.*)$")
  if rest then
    r:set_header("x-original-path", r.path)
    r.path = "/legacy/v1" .. rest
  end
end
"#,
        &[&o],
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/api/users/7?full=1", &[]);
        assert_eq!(g.status, 200, "{proto}");
        assert_eq!(last_target(&o), "/legacy/v1/users/7?full=1", "{proto}");
        let seen = o.seen();
        let last = seen.last().expect("a request");
        assert_eq!(
            last.header("x-original-path").as_deref(),
            Some("/api/users/7"),
            "{proto}"
        );
        // A rewrite is normalized like any path.
        get(s.listen, "h", "/api/a/../b", &[]);
        assert_eq!(last_target(&o), "/legacy/v1/b", "{proto}");
    }
}

fn b64url(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = c.iter().fold(0u32, |a, x| a << 8 | u32::from(*x)) << (8 * (3 - c.len()));
        for i in 0..=c.len() {
            out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn jwt(claims: &str, secret: &[u8]) -> String {
    let mut t = b64url(br#"{"alg":"HS256","typ":"JWT"}"#);
    t.push('.');
    t.push_str(&b64url(claims.as_bytes()));
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    let sig = aws_lc_rs::hmac::sign(&key, t.as_bytes());
    t.push('.');
    t.push_str(&b64url(sig.as_ref()));
    t
}

#[test]
fn a_jwt_check_answers_401_before_the_member() {
    let o = Origin::start("api");
    let s = start(
        "jwt",
        r#"
local secret = "s3cret"
function on_request(r)
  local auth = r:header("authorization") or ""
  local token = auth:match("^Bearer%s+(.+)$")
  local claims, why = nil, "no token"
  if token then claims, why = sy.jwt_hs256(token, secret) end
  if not claims then
    r:log("auth", why)
    r:respond(401, "unauthorized\n", { ["www-authenticate"] = 'Bearer error="invalid_token"' })
    return
  end
  r:set_header("x-user", claims.sub)
  r:remove_header("authorization")
end
"#,
        &[&o],
    );
    let good = jwt(r#"{"sub":"ann","exp":4102444800}"#, b"s3cret");
    let forged = jwt(r#"{"sub":"root","exp":4102444800}"#, b"guess");
    let expired = jwt(r#"{"sub":"ann","exp":1000}"#, b"s3cret");
    for (proto, get) in ALL {
        let g = get(
            s.listen,
            "h",
            "/data",
            &[("authorization", &format!("Bearer {good}"))],
        );
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        let seen = o.seen();
        let last = seen.last().expect("a request");
        assert_eq!(last.header("x-user").as_deref(), Some("ann"), "{proto}");
        assert_eq!(last.header("authorization"), None, "{proto}");
        for bad in [forged.as_str(), expired.as_str()] {
            let g = get(
                s.listen,
                "h",
                "/data",
                &[("authorization", &format!("Bearer {bad}"))],
            );
            assert_eq!(g.status, 401, "{proto}: {g:?}");
            assert!(g.header("www-authenticate").is_some(), "{proto}");
        }
        assert_eq!(get(s.listen, "h", "/data", &[]).status, 401, "{proto}");
    }
    assert_eq!(o.requests(), 3, "only the good token reached the member");
    // Why each refusal happened is in the access log.
    assert!(eventually(Duration::from_secs(5), || {
        let why: Vec<String> = log_lines(&s.log)
            .iter()
            .filter_map(|l| l["script"]["auth"].as_str().map(str::to_string))
            .collect();
        why.iter().filter(|w| *w == "bad signature").count() == 3
            && why.iter().filter(|w| *w == "expired").count() == 3
            && why.iter().filter(|w| *w == "no token").count() == 3
    }));
}

/// A JWT signed with `alg` by `sign` (RS256, ES256).
fn jwt_signed(alg: &str, claims: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let mut t = b64url(format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#).as_bytes());
    t.push('.');
    t.push_str(&b64url(claims.as_bytes()));
    let sig = sign(t.as_bytes());
    t.push('.');
    t.push_str(&b64url(&sig));
    t
}

fn pem_public_key(der: &[u8]) -> String {
    // Standard base64, 64 columns.
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b = String::new();
    for c in der.chunks(3) {
        let n = c.iter().fold(0u32, |a, x| a << 8 | u32::from(*x)) << (8 * (3 - c.len()));
        for i in 0..4 {
            b.push(if i <= c.len() {
                T[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    let lines: Vec<&str> = b
        .as_bytes()
        .chunks(64)
        .map(|l| std::str::from_utf8(l).unwrap_or(""))
        .collect();
    format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        lines.join("\n")
    )
}

/// RS256 and ES256 tokens checked against an identity provider's public
/// keys (`sy.public_key`, `sy.jwt_verify`), each with its own algorithm.
#[test]
fn jwt_rs256_and_es256_checks_with_public_keys() {
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let rsa = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("rsa");
    let ec = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("ec");
    let rsa_pem = pem_public_key(rsa.public_key().as_der().expect("der").as_ref());
    let ec_pem = pem_public_key(ec.public_key().as_der().expect("der").as_ref());
    let o = Origin::start("api");
    let s = start(
        "jwt-pk",
        &format!(
            r#"
local keys = {{ rs = sy.public_key([[{rsa_pem}]]), es = sy.public_key([[{ec_pem}]]) }}
function on_request(r)
  local token = (r:header("authorization") or ""):match("^Bearer%s+(.+)$")
  local key = keys[r:header("x-idp") or ""]
  local claims, why = nil, "no token"
  if token and key then claims, why = sy.jwt_verify(token, key) end
  if not claims then
    r:log("auth", why)
    return r:respond(401, "unauthorized\n")
  end
  r:set_header("x-user", claims.sub)
end
"#
        ),
        &[&o],
    );
    let claims = r#"{"sub":"ann","exp":4102444800}"#;
    let rs = jwt_signed("RS256", claims, |m| {
        let mut sig = vec![0; rsa.public_modulus_len()];
        rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, m, &mut sig)
            .expect("sign");
        sig
    });
    let es = jwt_signed("ES256", claims, |m| {
        ec.sign(&rng, m).expect("sign").as_ref().to_vec()
    });
    for (proto, get) in ALL {
        for (idp, token, status) in [
            ("rs", &rs, 200),
            ("es", &es, 200),
            // A token checked with the other provider's key: refused.
            ("es", &rs, 401),
            ("rs", &es, 401),
        ] {
            let g = get(
                s.listen,
                "h",
                "/",
                &[
                    ("authorization", &format!("Bearer {token}")),
                    ("x-idp", idp),
                ],
            );
            assert_eq!(g.status, status, "{proto} {idp}: {g:?}");
        }
    }
    assert_eq!(o.requests(), 6);
    assert!(o
        .seen()
        .iter()
        .all(|r| r.header("x-user").as_deref() == Some("ann")));
    assert!(eventually(Duration::from_secs(5), || {
        let why: Vec<String> = log_lines(&s.log)
            .iter()
            .filter_map(|l| l["script"]["auth"].as_str().map(str::to_string))
            .collect();
        why.iter().filter(|w| *w == "not an ES256 token").count() == 3
            && why.iter().filter(|w| *w == "not an RS256 token").count() == 3
    }));
}

#[test]
fn an_hmac_signed_link_with_an_expiry() {
    let o = Origin::start("files");
    let s = start(
        "hmac",
        r#"
local key = "link-key"
function on_request(r)
  local q = sy.query_parse(r.query)
  local expires = tonumber(q.expires)
  local want = sy.hex_encode(sy.hmac_sha256(key, r.path .. ":" .. (q.expires or "")))
  if not expires or expires < os.time() or not sy.equal(want, q.sig or "") then
    return r:respond(403, "bad or expired link\n")
  end
  r.query = nil
end
"#,
        &[&o],
    );
    let sign = |path: &str, expires: u64| {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, b"link-key");
        let tag = aws_lc_rs::hmac::sign(&key, format!("{path}:{expires}").as_bytes());
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("{path}?expires={expires}&sig={hex}")
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    for (proto, get) in ALL {
        let g = get(s.listen, "h", &sign("/f/report.pdf", now + 600), &[]);
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        // The member gets the path without the signature.
        assert_eq!(last_target(&o), "/f/report.pdf", "{proto}");
        let other = sign("/f/report.pdf", now + 600).replace("report", "secret");
        assert_eq!(get(s.listen, "h", &other, &[]).status, 403, "{proto}");
        assert_eq!(
            get(s.listen, "h", &sign("/f/report.pdf", now - 1), &[]).status,
            403,
            "{proto}"
        );
    }
    assert_eq!(o.requests(), 3);
}

#[test]
fn an_a_b_pool_choice_by_query_or_header() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let s = start(
        "ab",
        r#"
function on_request(r)
  local q = sy.query_parse(r.query)
  if q.variant == "b" or r:header("x-variant") == "b" then
    r:use_pool("b")
    r.vars.variant = "b"
  else
    r.vars.variant = "a"
  end
end
function on_response(r)
  r:set_header("x-variant", r.vars.variant)
end
function on_log(r)
  r:log("variant", r.vars.variant)
end
"#,
        &[&a, &b],
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/p?variant=b", &[]);
        assert_eq!(
            (g.header("x-origin"), g.header("x-variant")),
            (Some("b"), Some("b")),
            "{proto}"
        );
        let g = get(s.listen, "h", "/p", &[("x-variant", "b")]);
        assert_eq!(g.header("x-origin"), Some("b"), "{proto}");
        let g = get(s.listen, "h", "/p", &[]);
        assert_eq!(
            (g.header("x-origin"), g.header("x-variant")),
            (Some("a"), Some("a")),
            "{proto}"
        );
    }
    assert!(eventually(Duration::from_secs(5), || {
        let l = log_lines(&s.log);
        l.len() == 9
            && l.iter().filter(|v| v["script"]["variant"] == "b").count() == 6
            && l.iter().all(|v| v["pool"] == v["script"]["variant"])
    }));
}

#[test]
fn a_pool_the_script_chose_wins_over_policies_but_a_policy_answer_still_answers() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let dir = temp_dir("precedence");
    let file = dir.join("script.lua");
    std::fs::write(
        &file,
        "function on_request(r)\n  if r:header('x-pin') then r:use_pool('a') end\nend\n",
    )
    .expect("write");
    let log = dir.join("access.json");
    let pair = listen_pair();
    let listen = pair.0;
    let policies = "[[vserver.policy]]\nmatch = { path_prefix = \"/b/\" }\naction = { pool = \"b\" }\n\
                    [[vserver.policy]]\nmatch = { path_prefix = \"/old/\" }\naction = { redirect = \"/new/\" }\n";
    let cfg = config(pair, &file, &log, &[&a, &b], "")
        .replace("[vserver.script]", &format!("{policies}[vserver.script]"));
    let sy = Switchyard::start(&cfg, &[pair.0, pair.1]);
    for (proto, get) in ALL {
        assert_eq!(
            get(listen, "h", "/b/x", &[]).header("x-origin"),
            Some("b"),
            "{proto}"
        );
        assert_eq!(
            get(listen, "h", "/b/x", &[("x-pin", "1")]).header("x-origin"),
            Some("a"),
            "{proto}"
        );
        let g = get(listen, "h", "/old/x", &[("x-pin", "1")]);
        assert_eq!(
            (g.status, g.header("location")),
            (302, Some("/new/")),
            "{proto}: {g:?}"
        );
    }
    drop(sy);
}

/// `r:use_member(addr)` (iRules' `pool p member ip port`, HAProxy's
/// use-server): the member asked for serves, in the pool the script
/// chose; an address that is no member of it leaves the choice to the
/// balancer; a member that cannot answer is retried elsewhere; a
/// malformed address is the script's error (500).
#[test]
fn a_member_chosen_by_the_script() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let c = Origin::start("c");
    // A port nothing listens on: its connections are refused.
    let dead = free_addr();
    let both = format!(
        "[[pool]]\nname = \"ab\"\nalgorithm = \"round-robin\"\n[[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{dead}\"\n",
        a.addr, b.addr
    );
    let s = start_full(
        "use-member",
        r#"
function on_request(r)
  r:use_pool("ab")
  local m = r:header("x-member")
  if m then r:use_member(m) end
end
"#,
        &[&c],
        ("", &both),
        1,
    );
    let (a_addr, b_addr) = (a.addr.to_string(), b.addr.to_string());
    for (proto, get) in ALL {
        for (want, addr) in [("a", &a_addr), ("b", &b_addr)] {
            for _ in 0..4 {
                let g = get(s.listen, "h", "/", &[("x-member", addr)]);
                assert_eq!(g.header("x-origin"), Some(want), "{proto}: {g:?}");
            }
        }
        // Not a member of "ab": the balancer's turn (never "c").
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..6 {
            let g = get(s.listen, "h", "/", &[("x-member", &c.addr.to_string())]);
            seen.insert(g.header("x-origin").unwrap_or_default().to_string());
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "b"], "{proto}");
        let g = get(s.listen, "h", "/", &[("x-member", "nope")]);
        assert_eq!(g.status, 500, "{proto}: {g:?}");
    }
    assert_eq!(c.requests(), 0);
    // A member that refuses: the request asking for it is retried on
    // another.
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/", &[("x-member", &dead.to_string())]);
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        assert!(
            matches!(g.header("x-origin"), Some("a" | "b")),
            "{proto}: {g:?}"
        );
    }
    assert!(
        s.sy.wait_for_log("is not a member address"),
        "{}",
        s.sy.log()
    );
}

#[test]
fn response_header_scrubbing() {
    let o = Origin::start("php");
    o.set(|b| {
        b.raw_response = Some(
            b"HTTP/1.1 200 OK\r\nServer: Apache/2.4.1\r\nX-Powered-By: PHP/5.3\r\nX-AspNet-Version: 4.0\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
        )
    });
    let s = start(
        "scrub",
        r#"
local leaks = { "server", "x-powered-by", "x-aspnet-version" }
function on_response(r)
  for _, h in ipairs(leaks) do r:remove_header(h) end
  r:set_header("x-content-type-options", "nosniff")
end
"#,
        &[&o],
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/", &[]);
        assert_eq!((g.status, g.body.as_str()), (200, "ok"), "{proto}");
        for h in ["server", "x-powered-by", "x-aspnet-version"] {
            assert_eq!(g.header(h), None, "{proto}: {h} leaked: {g:?}");
        }
        assert_eq!(
            g.header("x-content-type-options"),
            Some("nosniff"),
            "{proto}"
        );
    }
}

#[test]
fn a_per_user_rate_limit_on_a_table_shared_by_the_workers() {
    let o = Origin::start("api");
    let s = start_workers(
        "quota",
        r#"
local quota = sy.table("api-quota")
local mine = 0 -- per worker: this state's own count
function on_request(r)
  mine = mine + 1
  local user = r:header("x-user") or r.client_ip
  local n = quota:incr(user, 1, 60)
  local burst = quota:rate("burst:" .. user, 10)
  local h = { ["x-count"] = tostring(n), ["x-mine"] = tostring(mine), ["retry-after"] = "60" }
  if n > 5 then return r:respond(429, "over quota\n", h) end
  r.vars.h = h
  r.vars.burst = burst
end
function on_response(r)
  for k, v in pairs(r.vars.h) do r:set_header(k, v) end
  r:set_header("x-burst", tostring(r.vars.burst))
end
"#,
        &[&o],
        "",
        2,
    );
    let mut spread = false;
    for (proto, get) in ALL {
        let user = format!("user-{proto}");
        let mut statuses = Vec::new();
        for i in 1..=12 {
            // A new connection each: the kernel spreads them over both workers.
            let g = get(s.listen, "h", "/", &[("x-user", &user)]);
            assert_eq!(g.header("x-count"), Some(&*i.to_string()), "{proto}: {g:?}");
            if g.header("x-mine") != g.header("x-count") {
                spread = true;
            }
            if g.status == 200 {
                assert_eq!(g.header("x-burst"), Some(&*i.to_string()), "{proto}");
            }
            statuses.push(g.status);
        }
        assert_eq!(statuses[..5], [200; 5], "{proto}");
        assert_eq!(statuses[5..], [429; 7], "{proto}");
        // Another user has a quota of their own.
        assert_eq!(
            get(s.listen, "h", "/", &[("x-user", "other")]).status,
            200,
            "{proto}"
        );
    }
    assert!(
        spread,
        "every request was served by one worker: the table was not shown to be shared"
    );
    assert_eq!(o.requests(), 18);
}

#[test]
fn a_body_replacement_on_one_path_and_a_request_body_check() {
    let o = Origin::start("shop");
    o.set(|b| b.body = Some("Big Black Friday sale!".to_string()));
    let s = start_with(
        "body",
        r#"
function on_request(r)
  if r.path == "/promo" or r.path:find("^/size/") then r:collect_body() end
end
function on_response_body(r)
  r.body = r.body:gsub("Black Friday", "Cyber Monday") .. "!"
end
function on_request_body(r)
  if r.body:find('"role":%s*"admin"') then
    return r:respond(403, "no admins here\n")
  end
  r.body = r.body:gsub('"card":"%d+"', '"card":"****"')
end
"#,
        &[&o],
        "max_body = 4096\n",
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/promo", &[]);
        assert_eq!(
            (g.status, g.body.as_str()),
            (200, "Big Cyber Monday sale!!"),
            "{proto}"
        );
        // Re-framed: the new length is known at the end only.
        assert_eq!(g.header("content-length"), None, "{proto}: {g:?}");
        let g = get(s.listen, "h", "/other", &[]);
        assert_eq!(g.body, "Big Black Friday sale!", "{proto}");
        assert_eq!(g.header("content-length"), Some("22"), "{proto}: {g:?}");
        // Within max_body the event runs; over it the body passes untouched.
        assert_eq!(
            get(s.listen, "h", "/size/4000", &[]).body.len(),
            4001,
            "{proto}"
        );
        assert_eq!(
            get(s.listen, "h", "/size/100000", &[]).body.len(),
            100_000,
            "{proto}"
        );
    }
    for (proto, post) in POSTS {
        let g = post(
            s.listen,
            "/pay",
            r#"{"card":"4111111111111111","role":"user"}"#,
        );
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        let seen = o.seen();
        let last = seen.last().expect("a request");
        assert_eq!(
            String::from_utf8_lossy(&last.body),
            r#"{"card":"****","role":"user"}"#,
            "{proto}"
        );
        if proto == "HTTP/1.1" {
            assert_eq!(
                last.header("content-length").as_deref(),
                Some("29"),
                "{proto}"
            );
        }
        let n = o.requests();
        let g = post(s.listen, "/pay", r#"{"card":"1","role": "admin"}"#);
        assert_eq!(
            (g.status, g.body.as_str()),
            (403, "no admins here\n"),
            "{proto}"
        );
        assert_eq!(o.requests(), n, "{proto}: refused before the member");
        // A longer body than max_body goes to the member untouched.
        let big = format!(r#"{{"card":"4111","pad":"{}"}}"#, "x".repeat(5000));
        assert_eq!(post(s.listen, "/pay", &big).status, 200, "{proto}");
        let seen = o.seen();
        let last = seen.last().expect("a request");
        assert_eq!(last.body.len(), big.len(), "{proto}");
    }
    // A body of no declared length is read up to max_body: a longer one
    // can no longer pass untouched, and is refused.
    let n = o.requests();
    let chunk = "x".repeat(3000);
    let raw = format!(
        "POST /pay HTTP/1.1\r\nHost: h\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\nbb8\r\n{chunk}\r\nbb8\r\n{chunk}\r\n0\r\n\r\n"
    );
    assert_eq!(request(s.listen, &raw).status, 413);
    assert_eq!(o.requests(), n);
    assert!(
        eventually(Duration::from_secs(5), || {
            let l = log_lines(&s.log);
            l.iter()
                .filter(|v| v["script"]["body_over"] == "response")
                .count()
                == 3
                && l.iter().any(|v| v["script"]["body_over"] == "request")
        }),
        "{:?}",
        log_lines(&s.log)
    );
}

#[test]
fn a_sideband_authorization_call_waits_without_blocking_the_worker() {
    let app = Origin::start("app");
    let auth = Origin::start("auth");
    auth.set(|b| b.body = Some("user=ann".to_string()));
    let s = start(
        "sideband",
        r#"
function on_request(r)
  if r.path == "/public" then return end
  local res, err = r:sideband("auth", {
    path = "/check?uri=" .. sy.url_encode(r.path),
    headers = { ["x-token"] = r:header("x-token") or "" },
    timeout = tonumber(r:header("x-timeout")) or 0.5,
  })
  if not res then
    r:log("auth", err)
    return r:respond(503, "authorization unavailable\n")
  end
  if res.status ~= 200 then return r:respond(401, "denied\n") end
  r:set_header("x-auth", res.body)
  r.vars.yield_late = r.path == "/late"
end
function on_response(r)
  -- A call-out where nothing can wait: a clear error, the request 500.
  if r.vars.yield_late then r:sideband("auth", {}) end
end
"#,
        &[&app, &auth],
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/orders", &[("x-token", "t-1")]);
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        let seen = auth.seen();
        let call = seen.last().expect("a call-out");
        assert_eq!(
            call.request_line(),
            "GET /check?uri=%2Forders HTTP/1.1",
            "{proto}"
        );
        assert_eq!(call.header("x-token").as_deref(), Some("t-1"), "{proto}");
        assert_eq!(
            app.seen()
                .last()
                .and_then(|r| r.header("x-auth"))
                .as_deref(),
            Some("user=ann"),
            "{proto}"
        );
        auth.set(|b| b.status = 403);
        let n = app.requests();
        assert_eq!(get(s.listen, "h", "/orders", &[]).status, 401, "{proto}");
        assert_eq!(app.requests(), n, "{proto}");
        auth.set(|b| b.status = 200);
        // In an event that cannot wait: 500, and the log says why.
        assert_eq!(get(s.listen, "h", "/late", &[]).status, 500, "{proto}");
    }
    assert!(
        s.sy.wait_for_log(
            "script.lua:19: r:sideband waits for its answer: only on_request can wait"
        ),
        "{}",
        s.sy.log()
    );
    // A slow authorizer: the call-out times out (503), and meanwhile the
    // one worker serves other requests.
    auth.set(|b| b.delay = Duration::from_secs(3));
    let listen = s.listen;
    let slow = std::thread::spawn(move || h1(listen, "h", "/orders", &[("x-timeout", "10")]));
    assert!(eventually(Duration::from_secs(5), || auth.requests() == 10));
    let g = h1(s.listen, "h", "/public", &[]);
    assert_eq!(g.status, 200);
    assert!(!slow.is_finished(), "the call-out held the worker");
    let g = slow.join().expect("slow request");
    assert_eq!(g.status, 200, "{g:?}");
    let g = h1(s.listen, "h", "/orders", &[]);
    assert_eq!(g.status, 503, "{g:?}");
    assert!(eventually(Duration::from_secs(5), || {
        log_lines(&s.log)
            .iter()
            .any(|v| v["script"]["auth"] == "no answer within 500 ms")
    }));
}

/// `r:sideband` to a pool that speaks TLS to its members (`[pool.tls]`):
/// the call goes over TLS checked against the pool's CA, and a member
/// whose certificate the CA did not sign is no answer (nil and why, the
/// script's 503), never a plain-text call.
#[test]
fn a_sideband_call_to_a_pool_that_speaks_tls() {
    let pki = Pki::new("sideband-tls");
    let (cert, key) = pki.member("auth");
    let auth = TlsOrigin::start("tls-auth", &cert, &key, None);
    let other = Pki::new("sideband-tls-other");
    let app = Origin::start("app");
    let pools = |ca: &Path| {
        format!(
            "[[pool]]\nname = \"auth\"\n[[pool.member]]\naddress = \"{}\"\n[pool.tls]\nca = \"{}\"\n",
            auth.addr,
            ca.display()
        )
    };
    let script = r#"
function on_request(r)
  local res, err = r:sideband("auth", { path = "/check" .. r.path })
  if not res then return r:respond(503, "no: " .. err .. "\n") end
  r:set_header("x-auth", (res.body:gsub("\n", "")))
end
"#;
    let s = start_full("sideband-tls", script, &[&app], ("", &pools(&pki.ca())), 1);
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/orders", &[]);
        assert_eq!(g.status, 200, "{proto}: {g:?}\n{}", s.sy.log());
        assert_eq!(
            app.seen()
                .last()
                .and_then(|r| r.header("x-auth"))
                .as_deref(),
            Some("tls-auth"),
            "{proto}"
        );
    }
    assert_eq!(auth.requests(), 3);
    assert_eq!(auth.handshakes().len(), 3);
    assert!(
        auth.seen.lock().expect("lock")[0].starts_with("GET /check/orders HTTP/1.1"),
        "{:?}",
        auth.seen
    );
    // A CA that did not sign the member's certificate: no call is made.
    let s = start_full(
        "sideband-tls-bad-ca",
        script,
        &[&app],
        ("", &pools(&other.ca())),
        1,
    );
    let g = h1(s.listen, "h", "/orders", &[]);
    assert_eq!(g.status, 503, "{g:?}");
    assert!(g.body.contains("TLS to"), "{g:?}");
    assert_eq!(auth.requests(), 3);
}

#[test]
fn an_endless_loop_gets_500_is_counted_and_the_worker_serves_on() {
    let o = Origin::start("app");
    let s = start_with(
        "loop",
        "function on_request(r)\n  if r.path == \"/spin\" then\n    while true do end\n  end\nend\n",
        &[&o],
        "max_instructions = 100000\n",
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/spin", &[]);
        assert_eq!(g.status, 500, "{proto}: {g:?}");
        assert!(
            !g.body.contains("script.lua"),
            "no detail to the client: {}",
            g.body
        );
        // One worker: the same one answers the next request.
        let g = get(s.listen, "h", "/ok", &[]);
        assert_eq!(g.status, 200, "{proto}: {g:?}");
    }
    // A burst: the log gets at most one line per second of it.
    let started = std::time::Instant::now();
    for _ in 0..6 {
        assert_eq!(h1(s.listen, "h", "/spin", &[]).status, 500);
    }
    let vs = vserver_stats(&s.sy);
    assert_eq!(vs["script_errors"], 9, "{vs}");
    assert_eq!(vs["script_timeouts"], 9, "{vs}");
    let metrics = s.sy.admin_get("/metrics");
    assert!(
        metrics.lines().any(
            |l| l.starts_with("switchyard_vserver_script_timeouts_total{") && l.ends_with(" 8")
        ),
        "{metrics}"
    );
    assert!(
        s.sy.wait_for_log("script.lua:3: more than 100000 instructions"),
        "{}",
        s.sy.log()
    );
    let lines = s.sy.log().matches("more than 100000 instructions").count();
    let secs = started.elapsed().as_secs() as usize;
    assert!(
        // One line a second per vserver (the twin's script is its own).
        lines <= secs + 4 && lines < 9,
        "{lines} lines in {secs} s:\n{}",
        s.sy.log()
    );
    assert!(eventually(Duration::from_secs(5), || {
        let l = log_lines(&s.log);
        l.iter()
            .filter(|v| {
                v["status"] == 500
                    && v["script_error"]
                        .as_str()
                        .is_some_and(|e| e.contains("script.lua:3"))
            })
            .count()
            == 9
    }));
}

/// A client's input under an operator's backtracking pattern (the usual
/// trim, quadratic in a run of inner spaces) stops at the script's
/// budget inside the match: 500, counted as a timeout, logged with the
/// script's line, and the one worker serves the next request. Without the
/// matcher paying into the budget (vendor/lua-src) the request would hold
/// the worker for the whole match.
#[test]
fn a_backtracking_pattern_on_a_clients_input_stops_at_the_budget() {
    let o = Origin::start("app");
    let s = start_with(
        "backtrack",
        "function on_request(r)\n  local name = r:header(\"x-name\") or \"\"\n  r:set_header(\"x-name\", name:match(\"^%s*(.-)%s*$\"))\nend\n",
        &[&o],
        "max_instructions = 100000\n",
    );
    let evil = format!("a{}b", " ".repeat(6000));
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/", &[("x-name", &evil)]);
        assert_eq!(g.status, 500, "{proto}: {g:?}");
        let g = get(s.listen, "h", "/", &[("x-name", "  ann  ")]);
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        let seen = o.seen();
        assert_eq!(
            seen.last().and_then(|r| r.header("x-name")).as_deref(),
            Some("ann"),
            "{proto}"
        );
    }
    let vs = vserver_stats(&s.sy);
    assert_eq!(vs["script_timeouts"], 3, "{vs}");
    assert!(
        s.sy.wait_for_log("script.lua:3: more than 100000 instructions"),
        "{}",
        s.sy.log()
    );
}

#[test]
fn a_memory_hog_gets_500_and_a_fresh_state() {
    let o = Origin::start("app");
    let s = start_with(
        "hog",
        r#"
hoard = {}
function on_request(r)
  if r.path == "/hog" then
    for i = 1, 1e9 do hoard[#hoard + 1] = string.rep("x", 1000) .. i end
  end
  r:set_header("x-hoard", tostring(#hoard))
end
"#,
        &[&o],
        "max_memory = 2097152\nmax_instructions = 1000000000\n",
    );
    for (proto, get) in ALL {
        let g = get(s.listen, "h", "/hog", &[]);
        assert_eq!(g.status, 500, "{proto}: {g:?}");
        let g = get(s.listen, "h", "/ok", &[]);
        assert_eq!(g.status, 200, "{proto}: {g:?}");
        // The state that filled up is gone: nothing hoarded.
        let seen = o.seen();
        assert_eq!(
            seen.last().and_then(|s| s.header("x-hoard")).as_deref(),
            Some("0"),
            "{proto}"
        );
    }
    let vs = vserver_stats(&s.sy);
    assert_eq!(
        (vs["script_errors"].as_u64(), vs["script_timeouts"].as_u64()),
        (Some(3), Some(0)),
        "{vs}"
    );
    assert!(s.sy.wait_for_log("max_memory"), "{}", s.sy.log());
}

#[test]
fn a_runtime_error_gets_500_with_file_and_line_in_the_logs() {
    let o = Origin::start("app");
    let s = start(
        "rterr",
        "function on_request(r)\n  local t = nil\n  if r.path == \"/bad\" then return t.field end\nend\n",
        &[&o],
    );
    for (proto, get) in ALL {
        assert_eq!(get(s.listen, "h", "/bad", &[]).status, 500, "{proto}");
        assert_eq!(get(s.listen, "h", "/good", &[]).status, 200, "{proto}");
    }
    assert!(
        s.sy.wait_for_log("script.lua:3: attempt to index a nil value"),
        "{}",
        s.sy.log()
    );
    assert!(eventually(Duration::from_secs(5), || {
        log_lines(&s.log)
            .iter()
            .filter(|v| {
                v["status"] == 500
                    && v["script_error"]
                        .as_str()
                        .is_some_and(|e| e.contains("/script.lua:3: attempt to index"))
            })
            .count()
            == 3
    }));
    assert_eq!(vserver_stats(&s.sy)["script_errors"], 3);
    assert_eq!(o.requests(), 3, "a failed script never reaches the member");
}

#[test]
fn check_and_reload_refuse_a_syntax_error_and_a_good_script_swaps_in() {
    let o = Origin::start("app");
    let dir = temp_dir("reload-script");
    let good = dir.join("v1.lua");
    std::fs::write(
        &good,
        "function on_request(r) r:set_header('x-version', '1') end\n",
    )
    .expect("write");
    let bad = dir.join("bad.lua");
    std::fs::write(
        &bad,
        "function on_request(r)\n  if r.path = '/' then end\nend\n",
    )
    .expect("write");
    let v2 = dir.join("v2.lua");
    std::fs::write(
        &v2,
        "function on_request(r) r:set_header('x-version', '2') end\n",
    )
    .expect("write");
    let log = dir.join("access.json");
    let pair = listen_pair();
    let listen = pair.0;
    let sy = Switchyard::start(&config(pair, &good, &log, &[&o], ""), &[pair.0, pair.1]);
    let version = || {
        h1(listen, "h", "/", &[]);
        o.seen().last().and_then(|s| s.header("x-version"))
    };
    assert_eq!(version().as_deref(), Some("1"));

    // `check`: FILE:LINE: message, relative to the configuration's folder.
    let cfg = dir.join("check.toml");
    std::fs::write(&cfg, config(pair, Path::new("bad.lua"), &log, &[&o], "")).expect("write");
    let (code, out, err) = run_cli(&["check", "-c", cfg.to_str().expect("utf-8")]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(format!("{out}{err}").contains("bad.lua:2:"), "{out}{err}");

    // A reload with it is refused; the running script keeps serving.
    let (ok, out) = sy.reload_with(&config(pair, &bad, &log, &[&o], ""));
    assert!(!ok, "{out}");
    assert!(out.contains("bad.lua:2:"), "{out}");
    assert_eq!(version().as_deref(), Some("1"));
    for (proto, get) in ALL {
        get(listen, "h", "/", &[]);
        assert_eq!(
            o.seen()
                .last()
                .and_then(|s| s.header("x-version"))
                .as_deref(),
            Some("1"),
            "{proto}"
        );
    }

    // A good one swaps in.
    let (ok, out) = sy.reload_with(&config(pair, &v2, &log, &[&o], ""));
    assert!(ok, "{out}");
    assert!(eventually(Duration::from_secs(5), || version().as_deref() == Some("2")));
    for (proto, get) in ALL {
        get(listen, "h", "/", &[]);
        assert_eq!(
            o.seen()
                .last()
                .and_then(|s| s.header("x-version"))
                .as_deref(),
            Some("2"),
            "{proto}"
        );
    }
}

#[test]
fn check_refuses_bad_limits_and_missing_files_with_their_position() {
    let dir = temp_dir("script-check");
    let cfg = dir.join("c.toml");
    let base = "[[vserver]]\nname = \"web\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n";
    for (script, want) in [
        (
            "[vserver.script]\nfile = \"nope.lua\"\n",
            "cannot read script",
        ),
        (
            "[vserver.script]\nfile = \"ok.lua\"\nmax_instructions = 10\n",
            "max_instructions 10 is out of range",
        ),
        (
            "[vserver.script]\nfile = \"ok.lua\"\nmemory = 1\n",
            "unknown field",
        ),
        (
            "[vserver.script]\nfile = \"none.lua\"\n",
            "defines none of the events",
        ),
    ] {
        std::fs::write(dir.join("ok.lua"), "function on_request(r) end\n").expect("write");
        std::fs::write(dir.join("none.lua"), "local x = 1\n").expect("write");
        std::fs::write(&cfg, base.replace("[[pool]]", &format!("{script}[[pool]]")))
            .expect("write");
        let (code, out, err) = run_cli(&["check", "-c", cfg.to_str().expect("utf-8")]);
        assert_ne!(code, Some(0), "{script}: {out}{err}");
        assert!(format!("{out}{err}").contains(want), "{script}: {out}{err}");
    }
    std::fs::write(
        &cfg,
        base.replace("[[pool]]", "[vserver.script]\nfile = \"ok.lua\"\n[[pool]]"),
    )
    .expect("write");
    let (code, out, err) = run_cli(&["check", "-c", cfg.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{out}{err}");
}

/// A Python with aioquic (target/pyvenv, made by scripts/test.sh), as
/// tests/http3.rs finds it; None skips the HTTP/3 test.
fn h3_python() -> Option<std::path::PathBuf> {
    common::h3::aioquic_python()
}

/// The script's events over HTTP/3 (tests/h3/client.py, aioquic): a
/// local answer, a pool choice, the member picked, a head edit, a body
/// replacement, and a request-body check, as over HTTP/1.1 and HTTP/2
/// above.
#[test]
fn the_events_run_for_http3_clients_too() {
    use std::io::Write;
    let Some(py) = h3_python() else { return };
    let pki = Pki::new("h3-script");
    let (cert, key) = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let a = Origin::start("a");
    let b = Origin::start("b");
    a.set(|x| x.body = Some("Big Black Friday sale!".to_string()));
    let dir = temp_dir("h3-script");
    let script = dir.join("h3.lua");
    std::fs::write(
        &script,
        r#"
function on_request(r)
  if r.path == "/down" then return r:respond(503, "back soon\n") end
  if r:header("x-variant") == "b" then r:use_pool("b") end
  if r.path == "/promo" then r:collect_body() end
  r.vars.proto = r.protocol
end
function on_member(r)
  r.vars.member = r.pool .. " " .. r.member
end
function on_response(r)
  r:remove_header("x-origin-secret")
  r:set_header("x-seen-as", r.vars.proto)
  r:set_header("x-member", r.vars.member)
end
function on_response_body(r)
  r.body = r.body:gsub("Black Friday", "Cyber Monday")
end
function on_request_body(r)
  if r.body:find("forbidden") then return r:respond(403, "no\n") end
end
"#,
    )
    .expect("script");
    let listen = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"secure\"\nlisten = [\"{listen}\"]\ndefault_pool = \"a\"\n\
         [vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n[vserver.http3]\n\
         [vserver.script]\nfile = \"{}\"\n\
         [[pool]]\nname = \"a\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"b\"\n[[pool.member]]\naddress = \"{}\"\n",
        cert.display(),
        key.display(),
        script.display(),
        a.addr,
        b.addr
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let requests = serde_json::json!([
        {"method": "GET", "path": "/down"},
        {"method": "GET", "path": "/promo"},
        {"method": "GET", "path": "/x", "headers": [["x-variant", "b"]]},
        {"method": "POST", "path": "/form", "body": "this is forbidden"},
    ]);
    let client = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/h3/client.py");
    let mut child = std::process::Command::new(&py)
        .arg(client)
        .args([&listen.ip().to_string(), &listen.port().to_string()])
        .arg(pki.ca())
        .args(["site.test", "20"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the HTTP/3 client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(requests.to_string().as_bytes())
        .expect("requests");
    let out = child.wait_with_output().expect("the HTTP/3 client");
    let out: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client output ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out["alpn"], "h3", "{out}");
    let r = out["responses"].as_array().expect("responses");
    let header = |i: usize, name: &str| -> Option<String> {
        r[i]["headers"].as_array()?.iter().find_map(|h| {
            (h[0].as_str()? == name)
                .then(|| h[1].as_str().map(str::to_string))
                .flatten()
        })
    };
    assert_eq!(
        (r[0]["status"].as_u64(), r[0]["body"].as_str()),
        (Some(503), Some("back soon\n")),
        "{out}"
    );
    assert_eq!(r[1]["body"], "Big Cyber Monday sale!", "{out}");
    assert_eq!(header(1, "x-seen-as").as_deref(), Some("HTTP/3"), "{out}");
    assert_eq!(header(2, "x-origin").as_deref(), Some("b"), "{out}");
    assert_eq!(
        header(2, "x-member"),
        Some(format!("b {}", b.addr)),
        "on_member: {out}"
    );
    assert_eq!(
        (r[3]["status"].as_u64(), r[3]["body"].as_str()),
        (Some(403), Some("no\n")),
        "{out}"
    );
    assert_eq!((a.requests(), b.requests()), (1, 1));
}

/// `on_member` (iRules' LB_SELECTED): the pool, member and attempt the
/// balancer picked, kept in `r.vars` for `on_response` and logged; over
/// HTTP/1.1 and HTTP/2 (HTTP/3: `the_events_run_for_http3_clients_too`).
/// A failed `on_member` answers 500 before the member is connected,
/// counted in the stats and the dashboard's live sample.
#[test]
fn on_member_sees_the_picked_member_and_a_failure_answers_500() {
    let a = Origin::start("a");
    let s = start(
        "on-member",
        r#"
function on_member(r)
  if r.vars.boom then error("no member for you") end
  r.vars.member = r.member
  r:log("picked", r.pool .. " " .. r.member .. " " .. r.attempt)
end
function on_request(r)
  if r.path == "/boom" then r.vars.boom = true end
end
function on_response(r)
  r:set_header("x-member", r.vars.member)
end
"#,
        &[&a],
    );
    for (proto, get) in ALL {
        let r = get(s.listen, "site.test", "/x", &[]);
        assert_eq!(r.status, 200, "{proto}: {r:?}");
        assert_eq!(
            r.header("x-member"),
            Some(a.addr.to_string().as_str()),
            "{proto}: {r:?}"
        );
        let before = a.requests();
        let r = get(s.listen, "site.test", "/boom", &[]);
        assert_eq!(r.status, 500, "{proto}: {r:?}");
        assert_eq!(a.requests(), before, "{proto}: the member was not asked");
    }
    let want = format!("a {} 1", a.addr);
    assert!(
        eventually(Duration::from_secs(60), || {
            let lines = log_lines(&s.log);
            lines
                .iter()
                .filter(|l| l["script"]["picked"] == want.as_str())
                .count()
                == 3
                && lines
                    .iter()
                    .filter(|l| {
                        l["script_error"]
                            .as_str()
                            .is_some_and(|e| e.contains("script.lua:3: no member for you"))
                    })
                    .count()
                    == 3
        }),
        "{:?}",
        log_lines(&s.log)
    );
    assert_eq!(vserver_stats(&s.sy)["script_errors"], 3);
    // The dashboard's live sample has them (its "Script errors" column).
    assert!(
        eventually(Duration::from_secs(60), || {
            let live: serde_json::Value =
                serde_json::from_str(&s.sy.admin_get("/api/v1/live")).unwrap_or_default();
            live.as_array()
                .and_then(|a| a.last())
                .is_some_and(|x| x["vservers"][0]["script_errors_total"] == 2)
        }),
        "{}",
        s.sy.admin_get("/api/v1/live")
    );
}

/// `on_member` runs again for a retry: the first member refuses the
/// connection, the second answers; `r.attempt` counts.
#[test]
fn on_member_runs_for_each_attempt() {
    let live = Origin::start("live");
    // A port nothing listens on: the connect is refused, the retry goes on.
    let dead = free_addr();
    let dir = temp_dir("on-member-retry");
    let file = dir.join("m.lua");
    std::fs::write(
        &file,
        r#"
function on_member(r)
  r.vars.tries = (r.vars.tries or "") .. r.attempt .. "=" .. r.member .. ";"
end
function on_response(r) r:set_header("x-tries", r.vars.tries) end
"#,
    )
    .expect("script");
    let listen = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\nh2c = true\ndefault_pool = \"p\"\n\
         [vserver.script]\nfile = \"{}\"\n\
         [[pool]]\nname = \"p\"\nalgorithm = \"round-robin\"\n[[pool.member]]\naddress = \"{dead}\"\n[[pool.member]]\naddress = \"{}\"\n",
        file.display(),
        live.addr
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    let mut saw_retry = false;
    for (proto, get) in BOTH {
        for _ in 0..2 {
            let r = get(listen, "site.test", "/", &[]);
            assert_eq!(r.status, 200, "{proto}: {r:?} {}", sy.log());
            let tries = r.header("x-tries").unwrap_or_default().to_string();
            assert!(
                tries.ends_with(&format!("={};", live.addr)),
                "{proto}: {tries}"
            );
            if tries == format!("1={dead};2={};", live.addr) {
                saw_retry = true;
            }
        }
    }
    assert!(saw_retry, "the dead member was picked first at least once");
}

/// A member that writes `banner` on each connection, then echoes.
fn banner_member(banner: &'static [u8]) -> SocketAddr {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                if !banner.is_empty() && c.write_all(banner).is_err() {
                    return;
                }
                let mut buf = [0u8; 4096];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A tcp vserver over `member` running `script`, with a JSON access log.
fn tcp_setup(tag: &str, script: &str, member: SocketAddr) -> Setup {
    let dir = temp_dir(tag);
    let file = dir.join("l4.lua");
    std::fs::write(&file, script).expect("script");
    let log = dir.join("access.json");
    let listen = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"tcp\"\nprotocol = \"tcp\"\nlisten = [\"{listen}\"]\ndefault_pool = \"m\"\n\
         [vserver.script]\nfile = \"{}\"\n[vserver.access_log]\nformat = \"json\"\nto = \"file:{}\"\n\
         [[pool]]\nname = \"m\"\n[[pool.member]]\naddress = \"{member}\"\n",
        file.display(),
        log.display()
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    Setup {
        sy,
        listen,
        log,
        _dir: dir,
    }
}

/// Connects, reads what comes within 10 s until `want` bytes or the
/// close, after sending `send` (if any).
fn tcp_exchange(addr: SocketAddr, send: &[u8], want: usize) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    if !send.is_empty() {
        c.write_all(send).expect("send");
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < want {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// `on_server_data` (iRules' SERVER_DATA): the member's banner is seen
/// and passed on (or refused: both sides closed); `c:log` fields of the
/// events, `on_close`'s included, join the L4 access log line.
#[test]
fn on_server_data_sees_the_members_banner_and_fields_join_the_l4_log() {
    let good = banner_member(b"220 mail.test ESMTP\r\n");
    let script = r#"
function on_accept(c) c:log("from", c.client_ip) end
function on_server_data(c)
  c:log("banner", c.data:match("^(%d+)"))
  if c.data:find("EVIL") then c:log("why", "evil banner") return c:reject() end
end
function on_close(c) c:log("bytes_in", c.bytes_in) end
"#;
    let s = tcp_setup("l4-banner", script, good);
    let banner = b"220 mail.test ESMTP\r\n";
    let got = tcp_exchange(s.listen, b"", banner.len());
    assert_eq!(got, banner, "{}", s.sy.log());
    // The banner, then the echo of what the client says after it.
    let got = tcp_exchange(s.listen, b"EHLO me\r\n", banner.len() + 9);
    assert_eq!(&got[..banner.len()], banner);
    assert_eq!(&got[banner.len()..], b"EHLO me\r\n");
    assert!(
        eventually(Duration::from_secs(60), || {
            log_lines(&s.log).iter().any(|l| {
                l["script"]["banner"] == "220"
                    && l["script"]["from"] == "127.0.0.1"
                    && l["script"]["bytes_in"] == "9"
                    && l["end"] == "done"
            })
        }),
        "{:?}",
        log_lines(&s.log)
    );
    let evil = banner_member(b"220 EVIL relay\r\n");
    let e = tcp_setup("l4-evil", script, evil);
    assert!(tcp_exchange(e.listen, b"", 100).is_empty(), "refused");
    assert!(
        eventually(Duration::from_secs(60), || {
            log_lines(&e.log)
                .iter()
                .any(|l| l["script"]["why"] == "evil banner" && l["end"] == "refused")
        }),
        "{:?}",
        log_lines(&e.log)
    );
    assert_eq!(vserver_stats(&e.sy)["script_errors"], 0);
}

/// A member that speaks only when spoken to (HTTP): what the client sends
/// goes on while `on_server_data` waits, which then sees the answer; a
/// failed event closes the connection, counted and in the log line.
#[test]
fn on_server_data_lets_the_client_speak_first_and_a_failure_closes() {
    let echo = banner_member(b"");
    let s = tcp_setup(
        "l4-client-first",
        r#"
function on_server_data(c)
  c:log("first", c.data)
  if c.data:find("boom") then error("bad answer") end
end
"#,
        echo,
    );
    let got = tcp_exchange(s.listen, b"ping", 4);
    assert_eq!(got, b"ping", "{}", s.sy.log());
    assert!(tcp_exchange(s.listen, b"boom", 4).is_empty());
    assert!(
        eventually(Duration::from_secs(60), || {
            let lines = log_lines(&s.log);
            lines.iter().any(|l| l["script"]["first"] == "ping")
                && lines.iter().any(|l| {
                    l["script_error"]
                        .as_str()
                        .is_some_and(|e| e.contains("l4.lua:4: bad answer"))
                })
        }),
        "{:?}",
        log_lines(&s.log)
    );
    assert_eq!(vserver_stats(&s.sy)["script_errors"], 1);
}

/// `on_server_data` on a `tcp` vserver that terminates TLS: the script
/// sees the member's plain banner and the client gets it inside its TLS
/// session, then the relay goes on (openssl s_client as the client).
#[test]
fn on_server_data_on_a_vserver_that_terminates_tls() {
    use std::io::Write;
    let pki = Pki::new("l4-tls-banner");
    let (cert, key) = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let member = banner_member(b"220 tls.test ready\r\n");
    let dir = temp_dir("l4-tls-banner");
    let file = dir.join("l4.lua");
    std::fs::write(
        &file,
        "function on_server_data(c) c:log(\"banner\", c.data:match(\"^(%d+)\")) end\n",
    )
    .expect("script");
    let log = dir.join("access.json");
    let listen = free_addr();
    // s_client -quiet waits for the server's close: the idle timeout ends
    // the relay once the echo is back.
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"tcp\"\nprotocol = \"tcp\"\nlisten = [\"{listen}\"]\ndefault_pool = \"m\"\n\
         [vserver.l4]\nidle_timeout = \"1s\"\n\
         [vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
         [vserver.script]\nfile = \"{}\"\n[vserver.access_log]\nformat = \"json\"\nto = \"file:{}\"\n\
         [[pool]]\nname = \"m\"\n[[pool.member]]\naddress = \"{member}\"\n",
        cert.display(),
        key.display(),
        file.display(),
        log.display()
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    let mut child = std::process::Command::new("openssl")
        .args(["s_client", "-quiet", "-servername", "site.test"])
        .args(["-verify_return_error", "-CAfile"])
        .arg(pki.ca())
        .arg("-connect")
        .arg(listen.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello through TLS\n")
        .expect("write");
    let out = child.wait_with_output().expect("s_client");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "220 tls.test ready\r\nhello through TLS\n",
        "{}",
        sy.log()
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            log_lines(&log)
                .iter()
                .any(|l| l["script"]["banner"] == "220" && l["tls_version"].is_string())
        }),
        "{:?}",
        log_lines(&log)
    );
}
