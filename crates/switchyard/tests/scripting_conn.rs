//! The connection events of a script (docs/scripting.md): `on_accept`
//! (refuse by client address) and `on_client_hello` on a vserver that
//! terminates TLS (the certificate and the pool chosen by SNI, over
//! HTTP/1.1, HTTP/2 and HTTP/3, and on a tcp vserver; a refusal; a
//! failure that refuses and is counted), end to end against the real
//! binary with real TLS and QUIC clients (tokio-rustls, openssl s_client,
//! aioquic) and origins.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TLS vserver running `script` (one pool per origin, named after it,
/// the first the default; a JSON access log), with `certs` as its
/// `certificates` and `extra` lines in the vserver table.
struct Setup {
    sy: Switchyard,
    listen: SocketAddr,
    log: std::path::PathBuf,
    _dir: std::path::PathBuf,
}

fn start(
    tag: &str,
    script: &str,
    certs: &[(&Path, &Path)],
    origins: &[&Origin],
    extra: &str,
) -> Setup {
    let dir = temp_dir(tag);
    let file = dir.join("script.lua");
    std::fs::write(&file, script).expect("write script");
    let log = dir.join("access.json");
    let listen = free_addr();
    let certs = certs
        .iter()
        .map(|(c, k)| {
            format!(
                "{{ cert = \"{}\", key = \"{}\" }}",
                c.display(),
                k.display()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut cfg = format!(
        "[global]\nworkers = 1\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"{}\"\n{extra}\n\
         [vserver.tls]\ncertificates = [{certs}]\nalpn = [\"h2\", \"http/1.1\"]\n\
         [vserver.script]\nfile = \"{}\"\n[vserver.access_log]\nformat = \"json\"\nto = \"file:{}\"\n\n",
        origins[0].name,
        file.display(),
        log.display()
    );
    for o in origins {
        cfg.push_str(&format!(
            "[[pool]]\nname = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n",
            o.name, o.addr
        ));
    }
    let sy = Switchyard::start(&cfg, &[listen]);
    Setup {
        sy,
        listen,
        log,
        _dir: dir,
    }
}

fn client_config(ca: &Path, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(c.expect("ca cert")).expect("add ca");
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(cfg)
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection with `sni` offering `alpn`, or the handshake's error.
async fn connect(addr: SocketAddr, ca: &Path, sni: &str, alpn: &[u8]) -> Result<Tls, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    let c = tokio_rustls::TlsConnector::from(client_config(ca, alpn));
    match tokio::time::timeout(Duration::from_secs(10), c.connect(name, tcp)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("handshake timed out".into()),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// GETs `paths` in turn on one HTTP/1.1 connection over TLS with `sni`;
/// the X-Origin of each response.
fn origins_h1(
    addr: SocketAddr,
    ca: &Path,
    sni: &str,
    paths: &[&str],
) -> Result<Vec<String>, String> {
    runtime().block_on(async {
        let mut s = connect(addr, ca, sni, b"http/1.1").await?;
        let mut out = Vec::new();
        for p in paths {
            let req = format!("GET {p} HTTP/1.1\r\nHost: {sni}\r\n\r\n");
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b))
                    .await
                    .map_err(|_| "no response in time".to_string())?
                    .map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err(format!("closed before a response to {p}"));
                }
                head.push(b[0]);
            }
            let head = String::from_utf8_lossy(&head).to_string();
            let field = |name: &str| {
                head.lines().find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            let len: usize = field("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            s.read_exact(&mut body).await.map_err(|e| e.to_string())?;
            out.push(field("x-origin").unwrap_or_default());
        }
        Ok(out)
    })
}

/// The same on one HTTP/2 connection (ALPN "h2"), one stream per path.
fn origins_h2(
    addr: SocketAddr,
    ca: &Path,
    sni: &str,
    paths: &[&str],
) -> Result<Vec<String>, String> {
    runtime().block_on(async {
        let s = connect(addr, ca, sni, b"h2").await?;
        let (send, conn) = h2::client::handshake(s).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut out = Vec::new();
        for p in paths {
            let req = http::Request::get(format!("https://{sni}{p}"))
                .body(())
                .map_err(|e| e.to_string())?;
            let mut ready = send.clone().ready().await.map_err(|e| e.to_string())?;
            let (resp, _) = ready.send_request(req, true).map_err(|e| e.to_string())?;
            let resp = tokio::time::timeout(Duration::from_secs(10), resp)
                .await
                .map_err(|_| "no response in time".to_string())?
                .map_err(|e| e.to_string())?;
            let origin = resp
                .headers()
                .get("x-origin")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            let mut body = resp.into_body();
            while let Some(c) = body.data().await {
                let c: Bytes = c.map_err(|e| e.to_string())?;
                let _ = body.flow_control().release_capacity(c.len());
            }
            out.push(origin);
        }
        Ok(out)
    })
}

/// The subject of the certificate the server sends for `sni` (None: no
/// SNI), as openssl s_client reads it (it does not check the name).
fn served_subject(l: SocketAddr, sni: Option<&str>) -> String {
    let mut args = vec!["s_client".to_string(), "-connect".into(), l.to_string()];
    match sni {
        Some(n) => args.extend(["-servername".into(), n.to_string()]),
        None => args.push("-noservername".into()),
    }
    args.extend(["-nameopt".into(), "RFC2253".into()]);
    let out = Command::new("openssl")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_else(|| panic!("no subject in {text}"))
        .trim()
        .to_string()
}

fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn metric(sy: &Switchyard, name: &str) -> Option<u64> {
    sy.admin_get("/metrics").lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('{')?;
        rest.rsplit(' ').next()?.parse().ok()
    })
}

/// `c:use_cert` serves another certificate than SNI alone would: a
/// renamed site's old name gets the new certificate, the names the
/// certificates carry keep theirs, and a client without SNI the default.
#[test]
fn on_client_hello_chooses_the_certificate_by_sni() {
    let pki = Pki::new("hello-certs");
    let (d_cert, d_key) = pki.issue(
        "default",
        "/CN=default.test",
        &["default.test"],
        Kind::Ecdsa,
        30,
    );
    let (a_cert, a_key) = pki.issue("a", "/CN=a.test", &["a.test"], Kind::Ecdsa, 30);
    let (b_cert, b_key) = pki.issue("b", "/CN=b.test", &["b.test", "*.b.test"], Kind::Rsa, 30);
    let o = Origin::start("o");
    let s = start(
        "hello-certs",
        r#"
local moved = { ["legacy.test"] = "b.test", ["old.a.test"] = "a.test", ["x.legacy.test"] = "www.b.test" }
function on_client_hello(c)
  local to = c.sni and moved[c.sni]
  if to then c:use_cert(to) end
end
"#,
        &[(&d_cert, &d_key), (&a_cert, &a_key), (&b_cert, &b_key)],
        &[&o],
        "",
    );
    assert_eq!(
        served_subject(s.listen, Some("legacy.test")),
        "CN=b.test",
        "{}",
        s.sy.log()
    );
    assert_eq!(served_subject(s.listen, Some("old.a.test")), "CN=a.test");
    // By a wildcard's name.
    assert_eq!(served_subject(s.listen, Some("x.legacy.test")), "CN=b.test");
    // Untouched: SNI's own choice, and the default without a name.
    assert_eq!(served_subject(s.listen, Some("a.test")), "CN=a.test");
    assert_eq!(
        served_subject(s.listen, Some("unknown.test")),
        "CN=default.test"
    );
    assert_eq!(served_subject(s.listen, None), "CN=default.test");
    // A verifying client that asked for the old name accepts nothing but
    // a certificate for it: this one fails on the name, not the chain.
    let err = runtime()
        .block_on(connect(s.listen, &pki.ca(), "legacy.test", b"http/1.1"))
        .err()
        .unwrap_or_default();
    assert!(err.contains("b.test"), "{err}");
}

/// SNI routing by script: the pool chosen in `on_client_hello` serves
/// every request of the connection, over HTTP/1.1 and HTTP/2, unless
/// `on_request` or a policy chooses another; `c:log` fields are on every
/// request's access log line.
#[test]
fn on_client_hello_chooses_the_pool_for_the_connection() {
    let pki = Pki::new("hello-pools");
    let (cert, key) = pki.issue(
        "site",
        "/CN=site",
        &["blue.test", "green.test"],
        Kind::Ecdsa,
        30,
    );
    let blue = Origin::start("blue");
    let green = Origin::start("green");
    let policy = "[[vserver.policy]]\nmatch = { path_prefix = \"/by-policy/\" }\naction = { pool = \"blue\" }\n";
    let s = start(
        "hello-pools",
        r#"
function on_client_hello(c)
  if c.sni == "green.test" then c:use_pool("green") end
  c:log("sni", c.sni)
  c:log("alpn", table.concat(c.alpn, ","))
end
function on_request(r)
  if r.path == "/by-script" then r:use_pool("blue") end
end
"#,
        &[(&cert, &key)],
        &[&blue, &green],
        policy,
    );
    let paths = ["/a", "/by-script", "/b", "/by-policy/x", "/c"];
    let want = ["green", "blue", "green", "blue", "green"];
    for (proto, get) in [("HTTP/1.1", origins_h1 as Got), ("HTTP/2", origins_h2)] {
        let got = get(s.listen, &pki.ca(), "green.test", &paths)
            .unwrap_or_else(|e| panic!("{proto}: {e}\n{}", s.sy.log()));
        assert_eq!(got, want, "{proto}");
        let got = get(s.listen, &pki.ca(), "blue.test", &paths[..1])
            .unwrap_or_else(|e| panic!("{proto}: {e}"));
        assert_eq!(got, ["blue"], "{proto}");
    }
    assert!(
        eventually(Duration::from_secs(60), || {
            let lines = log_lines(&s.log);
            let green_lines = lines.iter().filter(|l| l["script"]["sni"] == "green.test");
            green_lines.clone().count() == 10
                && green_lines.clone().any(|l| l["script"]["alpn"] == "h2")
                && green_lines
                    .clone()
                    .any(|l| l["script"]["alpn"] == "http/1.1")
        }),
        "{:?}",
        log_lines(&s.log)
    );
}

type Got = fn(SocketAddr, &Path, &str, &[&str]) -> Result<Vec<String>, String>;

/// `c:reject()` in `on_client_hello` ends the handshake with a
/// handshake_failure alert before any certificate is sent; other names
/// are served; the refusal is counted.
#[test]
fn on_client_hello_refuses_a_name() {
    let pki = Pki::new("hello-reject");
    let (cert, key) = pki.issue(
        "site",
        "/CN=site",
        &["ok.test", "blocked.test"],
        Kind::Ecdsa,
        30,
    );
    let o = Origin::start("o");
    let s = start(
        "hello-reject",
        "function on_client_hello(c)\n  if c.sni == \"blocked.test\" then c:reject() end\nend\n",
        &[(&cert, &key)],
        &[&o],
        "",
    );
    let err = origins_h1(s.listen, &pki.ca(), "blocked.test", &["/"]).expect_err("refused");
    assert!(err.contains("HandshakeFailure"), "{err}");
    assert_eq!(o.requests(), 0);
    let got = origins_h1(s.listen, &pki.ca(), "ok.test", &["/"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got, ["o"]);
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_refusals_total"),
        Some(1)
    );
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_errors_total"),
        Some(0)
    );
}

/// A failed `on_client_hello` (a Lua error, the instruction limit) refuses
/// the connection with an internal_error alert rather than serving the
/// default certificate and pool; it is counted in /metrics and logged
/// with its FILE:LINE.
#[test]
fn a_failed_on_client_hello_refuses_and_is_counted() {
    let pki = Pki::new("hello-error");
    let (cert, key) = pki.issue(
        "site",
        "/CN=site",
        &["ok.test", "boom.test", "loop.test"],
        Kind::Ecdsa,
        30,
    );
    let o = Origin::start("o");
    let s = start(
        "hello-error",
        "function on_client_hello(c)\n  if c.sni == \"boom.test\" then error(\"no route for \" .. c.sni) end\n  if c.sni == \"loop.test\" then while true do end end\nend\n",
        &[(&cert, &key)],
        &[&o],
        "",
    );
    for (sni, proto) in [("boom.test", origins_h1 as Got), ("loop.test", origins_h2)] {
        let err = proto(s.listen, &pki.ca(), sni, &["/"]).expect_err("refused");
        assert!(err.contains("InternalError"), "{sni}: {err}");
    }
    assert_eq!(o.requests(), 0);
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_errors_total"),
        Some(2),
        "{}",
        s.sy.log()
    );
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_timeouts_total"),
        Some(1)
    );
    assert!(
        s.sy.wait_for_log("script.lua:2: no route for boom.test"),
        "{}",
        s.sy.log()
    );
    // The next connection is served.
    let got = origins_h1(s.listen, &pki.ca(), "ok.test", &["/"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got, ["o"]);
}

/// `on_accept` refuses by client address before a byte is read, on a
/// plain HTTP vserver and before the handshake of a TLS one; other
/// clients are served. A failed `on_accept` refuses too, counted.
#[test]
fn on_accept_refuses_by_client_address() {
    let o = Origin::start("o");
    let dir = temp_dir("accept-http");
    let file = dir.join("accept.lua");
    std::fs::write(
        &file,
        "function on_accept(c)\n  if c.client_ip == \"127.0.0.2\" then c:reject() end\n  if c.client_ip == \"127.0.0.3\" then error(\"boom\") end\nend\n",
    )
    .expect("script");
    let listen = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"o\"\n\
         [vserver.script]\nfile = \"{}\"\n[[pool]]\nname = \"o\"\n[[pool.member]]\naddress = \"{}\"\n",
        file.display(),
        o.addr
    );
    let sy = Switchyard::start(&cfg, &[listen]);
    let mut ok = Client::connect_from(listen, "127.0.0.1");
    assert_eq!(ok.get("/").status, 200);
    for from in ["127.0.0.2", "127.0.0.3"] {
        let mut c = Client::connect_from(listen, from);
        c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(c.read_response(false).is_none(), "{from}: answered");
    }
    assert_eq!(o.requests(), 1);
    assert_eq!(
        metric(&sy, "switchyard_vserver_script_refusals_total"),
        Some(1)
    );
    assert_eq!(
        metric(&sy, "switchyard_vserver_script_errors_total"),
        Some(1)
    );

    // TLS: refused before the handshake; on_client_hello sees what
    // on_accept kept in c.vars.
    let pki = Pki::new("accept-tls");
    let (cert, key) = pki.issue("site", "/CN=site", &["site.test"], Kind::Ecdsa, 30);
    let s = start(
        "accept-tls",
        "function on_accept(c)\n  if c.client_ip == \"127.0.0.2\" then return c:reject() end\n  c.vars.accepted = c.client_ip\nend\nfunction on_client_hello(c)\n  c:log(\"accepted\", c.vars.accepted)\nend\n",
        &[(&cert, &key)],
        &[&o],
        "",
    );
    let from = |source: &str| {
        runtime().block_on(async {
            let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
            sock.bind(format!("{source}:0").parse().expect("addr"))
                .map_err(|e| e.to_string())?;
            let tcp = sock.connect(s.listen).await.map_err(|e| e.to_string())?;
            let name = ServerName::try_from("site.test").map_err(|e| e.to_string())?;
            let c = tokio_rustls::TlsConnector::from(client_config(&pki.ca(), b"http/1.1"));
            c.connect(name, tcp)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
    };
    assert!(from("127.0.0.2").is_err(), "refused before the handshake");
    assert_eq!(from("127.0.0.1"), Ok(()));
    let got =
        origins_h1(s.listen, &pki.ca(), "site.test", &["/"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got, ["o"]);
    assert!(
        eventually(Duration::from_secs(60), || log_lines(&s.log)
            .iter()
            .any(|l| l["script"]["accepted"] == "127.0.0.1")),
        "{:?}",
        log_lines(&s.log)
    );
}

/// `switchyard check` refuses connection events where they cannot run:
/// `on_client_hello` without `[vserver.tls]` (HTTP or tcp), `on_client_data`
/// on a tcp vserver that terminates TLS (it reads no first bytes), and
/// the `tcp` vserver's events on an HTTP vserver; `on_accept` is good on
/// both kinds, `on_client_hello` beside `[vserver.http3]` and on a tcp
/// vserver with `[vserver.tls]`.
#[test]
fn check_refuses_connection_events_where_they_cannot_run() {
    let pki = Pki::new("hello-check");
    let (cert, key) = pki.issue("site", "/CN=site", &["site.test"], Kind::Ecdsa, 30);
    let dir = temp_dir("hello-check");
    let cfg = dir.join("c.toml");
    let tls = format!(
        "[vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n",
        cert.display(),
        key.display()
    );
    let base = "[[vserver]]\nname = \"web\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\nVS[vserver.script]\nfile = \"s.lua\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n";
    let hello = "function on_client_hello(c) end\n";
    let http3 = format!("{tls}[vserver.http3]\n");
    let tcp_tls = format!("protocol = \"tcp\"\n{tls}");
    for (script, vs, want) in [
        (
            hello,
            "",
            Some("on_client_hello runs on vservers that terminate TLS"),
        ),
        (
            hello,
            "protocol = \"tcp\"\n",
            Some("on_client_hello runs on vservers that terminate TLS"),
        ),
        (hello, http3.as_str(), None),
        (hello, tcp_tls.as_str(), None),
        (
            "function on_client_data(c) end\n",
            tcp_tls.as_str(),
            Some("this one terminates TLS ([vserver.tls]): use on_client_hello"),
        ),
        (
            "function on_close(c) end\n",
            "",
            Some("are for tcp vservers"),
        ),
        (
            "function on_client_hello(c) end\nfunction on_request(r) end\n",
            tls.as_str(),
            None,
        ),
        ("function on_accept(c) end\n", "", None),
    ] {
        std::fs::write(dir.join("s.lua"), script).expect("write");
        std::fs::write(&cfg, base.replace("VS", vs)).expect("write");
        let (code, out, err) = run_cli(&["check", "-c", cfg.to_str().expect("utf-8")]);
        match want {
            Some(w) => {
                assert_ne!(code, Some(0), "{script}: {out}{err}");
                assert!(format!("{out}{err}").contains(w), "{script}: {out}{err}");
            }
            None => assert_eq!(code, Some(0), "{script}: {out}{err}"),
        }
    }
}

/// A Python with aioquic (target/pyvenv, made by scripts/test.sh), as
/// tests/scripting.rs finds it; None skips the HTTP/3 part.
fn h3_python() -> Option<std::path::PathBuf> {
    common::h3::aioquic_python()
}

/// GETs `paths` on one HTTP/3 connection with `sni` (tests/h3/client.py,
/// aioquic; `more`: its arguments after the timeout: ticket file, hold,
/// linger, padding); its JSON output.
fn h3_get(
    py: &Path,
    listen: SocketAddr,
    ca: &Path,
    sni: &str,
    paths: &[&str],
    more: &[&str],
) -> serde_json::Value {
    let requests: Vec<serde_json::Value> = paths
        .iter()
        .map(|p| serde_json::json!({ "method": "GET", "path": p }))
        .collect();
    let mut args = vec!["20".to_string()];
    args.extend(more.iter().map(|a| a.to_string()));
    common::h3::aioquic_client(py, (listen, ca, sni), &requests.into(), &args, None)
}

/// The X-Origin of each response in an `h3_get` output.
fn h3_origins(out: &serde_json::Value) -> Vec<String> {
    out["responses"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    r["headers"]
                        .as_array()
                        .and_then(|hs| {
                            hs.iter()
                                .find(|h| h[0] == "x-origin")
                                .and_then(|h| h[1].as_str())
                        })
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `on_client_hello` over QUIC: the script sees the ClientHello in the
/// handshake (the certificate resolver's moment) and chooses the pool of
/// the connection's requests and its certificate, refuses a name, and a
/// failure refuses too (counted, logged); the same with a ClientHello in
/// two Initial packets (as a browser's with a post-quantum key share) and
/// on a resumed connection (no way around the rule by a session ticket).
/// `c.vars` carries what `on_accept` kept.
#[test]
fn on_client_hello_runs_for_quic_connections() {
    let pki = Pki::new("hello-quic");
    let (site_cert, site_key) = pki.issue(
        "site",
        "/CN=site.test",
        &[
            "site.test",
            "green.test",
            "blocked.test",
            "boom.test",
            "shared.test",
        ],
        Kind::Ecdsa,
        30,
    );
    let (b_cert, b_key) = pki.issue(
        "b",
        "/CN=b.test",
        &["b.test", "shared.test"],
        Kind::Ecdsa,
        30,
    );
    let blue = Origin::start("blue");
    let green = Origin::start("green");
    let s = start(
        "hello-quic",
        r#"
function on_accept(c) c.vars.from = c.client_ip end
function on_client_hello(c)
  if c.sni == "blocked.test" then return c:reject() end
  if c.sni == "boom.test" then error("no route for " .. c.sni) end
  if c.sni == "shared.test" then c:use_cert("b.test") end
  if c.sni == "green.test" then c:use_pool("green") end
  c:log("sni", c.sni)
  c:log("from", c.vars.from)
  c:log("h3", tostring(table.concat(c.alpn, ","):find("h3") ~= nil))
  c:log("proto", c.protocol)
end
"#,
        &[(&site_cert, &site_key), (&b_cert, &b_key)],
        &[&blue, &green],
        "[vserver.http3]",
    );
    let Some(py) = h3_python() else { return };
    let ca = pki.ca();
    // The pool, by name; the certificate SNI selects.
    let out = h3_get(&py, s.listen, &ca, "green.test", &["/1", "/2"], &[]);
    assert_eq!(
        h3_origins(&out),
        ["green", "green"],
        "{out}\n{}",
        s.sy.log()
    );
    assert_eq!(out["peer_subject"], "CN=site.test", "{out}");
    let out = h3_get(&py, s.listen, &ca, "site.test", &["/1"], &[]);
    assert_eq!(h3_origins(&out), ["blue"], "{out}");
    // The certificate by script: SNI alone would serve the first that
    // names shared.test (site's).
    let out = h3_get(&py, s.listen, &ca, "shared.test", &["/1"], &[]);
    assert_eq!(out["peer_subject"], "CN=b.test", "{out}");
    assert_eq!(h3_origins(&out), ["blue"], "{out}");
    // A ClientHello in two Initial packets (1,600 bytes of ALPN names):
    // the second reaches the server 150 ms after the first.
    let out = h3_get(
        &py,
        s.listen,
        &ca,
        "green.test",
        &["/split"],
        &["", "0", "0", "1600"],
    );
    assert_eq!(h3_origins(&out), ["green"], "{out}");
    // A resumed connection runs the event too.
    let tickets = temp_dir("hello-quic-tickets").join("ticket");
    let t = tickets.display().to_string();
    let first = h3_get(&py, s.listen, &ca, "green.test", &["/t1"], &[&t]);
    assert_eq!(h3_origins(&first), ["green"], "{first}");
    assert!(tickets.exists(), "no session ticket: {first}");
    let again = h3_get(&py, s.listen, &ca, "green.test", &["/t2"], &[&t]);
    assert_eq!(again["resumed"], true, "{again}");
    assert_eq!(h3_origins(&again), ["green"], "{again}");
    let served = (blue.requests(), green.requests());
    assert_eq!(served, (2, 5));
    // Refused names: no request reaches an origin.
    for sni in ["blocked.test", "boom.test"] {
        let out = h3_get(&py, s.listen, &ca, sni, &["/no"], &[]);
        assert!(out["error"].is_string(), "{sni}: {out}");
    }
    assert_eq!((blue.requests(), green.requests()), served);
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_refusals_total"),
        Some(1)
    );
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_errors_total"),
        Some(1)
    );
    assert!(
        s.sy.wait_for_log("script.lua:5: no route for boom.test"),
        "{}",
        s.sy.log()
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            let lines = log_lines(&s.log);
            let green = lines
                .iter()
                .filter(|l| l["script"]["sni"] == "green.test" && l["protocol"] == "HTTP/3");
            green.clone().count() == 5
                && green.clone().all(|l| {
                    l["script"]["from"] == "127.0.0.1"
                        && l["script"]["h3"] == "true"
                        && l["script"]["proto"] == "QUIC"
                })
        }),
        "{:?}",
        log_lines(&s.log)
    );
}

/// `on_client_hello` on a `tcp` vserver that terminates TLS: the
/// certificate and the pool by SNI, a refused name (handshake_failure
/// alert), `on_accept` before the handshake (a refused client costs no
/// handshake) with `c.vars` for the ClientHello's event, and `c:log`
/// fields on the connection's L4 log line, a refused one's included.
#[test]
fn on_client_hello_on_a_tcp_vserver_that_terminates_tls() {
    let pki = Pki::new("hello-tcp");
    let (site_cert, site_key) = pki.issue(
        "site",
        "/CN=site.test",
        &["blue.test", "green.test", "blocked.test"],
        Kind::Ecdsa,
        30,
    );
    let (b_cert, b_key) = pki.issue("b", "/CN=b.test", &["b.test"], Kind::Ecdsa, 30);
    let blue = Origin::start("blue");
    let green = Origin::start("green");
    let s = start(
        "hello-tcp",
        r#"
function on_accept(c)
  if c.client_ip == "127.0.0.2" then c:log("why", "source") return c:reject() end
  c.vars.from = c.client_ip
end
function on_client_hello(c)
  c:log("sni", c.sni)
  if c.sni == "blocked.test" then return c:reject() end
  if c.sni == "legacy.test" then c:use_cert("b.test") end
  if c.sni == "green.test" then c:use_pool("green") end
  c:log("from", c.vars.from)
end
function on_close(c) c:log("bytes_in", c.bytes_in) end
"#,
        &[(&site_cert, &site_key), (&b_cert, &b_key)],
        &[&blue, &green],
        "protocol = \"tcp\"",
    );
    // The relay carries HTTP/1.1 to the origins, which say who they are.
    let got = origins_h1(s.listen, &pki.ca(), "green.test", &["/1", "/2"])
        .unwrap_or_else(|e| panic!("{e}\n{}", s.sy.log()));
    assert_eq!(got, ["green", "green"]);
    let got =
        origins_h1(s.listen, &pki.ca(), "blue.test", &["/1"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got, ["blue"]);
    // The certificate by script: no certificate names legacy.test.
    assert_eq!(served_subject(s.listen, Some("legacy.test")), "CN=b.test");
    assert_eq!(served_subject(s.listen, Some("blue.test")), "CN=site.test");
    let err = origins_h1(s.listen, &pki.ca(), "blocked.test", &["/"]).expect_err("refused");
    assert!(err.contains("HandshakeFailure"), "{err}");
    // Refused before the handshake: the client sees the close, no alert.
    let refused = runtime().block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
        sock.bind("127.0.0.2:0".parse().expect("addr"))
            .map_err(|e| e.to_string())?;
        let tcp = sock.connect(s.listen).await.map_err(|e| e.to_string())?;
        let name = ServerName::try_from("blue.test").map_err(|e| e.to_string())?;
        let c = tokio_rustls::TlsConnector::from(client_config(&pki.ca(), b"http/1.1"));
        c.connect(name, tcp)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    });
    let err = refused.expect_err("refused by on_accept");
    assert!(!err.contains("HandshakeFailure"), "{err}");
    assert_eq!((blue.requests(), green.requests()), (1, 2));
    assert_eq!(
        metric(&s.sy, "switchyard_vserver_script_refusals_total"),
        Some(2)
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            let lines = log_lines(&s.log);
            lines.iter().any(|l| {
                l["script"]["sni"] == "green.test"
                    && l["script"]["from"] == "127.0.0.1"
                    && l["script"]["bytes_in"].as_str().is_some_and(|b| b != "0")
                    && l["pool"] == "green"
            }) && lines
                .iter()
                .any(|l| l["script"]["sni"] == "blocked.test" && l["end"] == "tls-failed")
                && lines
                    .iter()
                    .any(|l| l["script"]["why"] == "source" && l["end"] == "refused")
        }),
        "{:?}",
        log_lines(&s.log)
    );
}

/// The pool `on_accept` chooses serves the connection's requests over
/// TCP (HTTP/1.1 and HTTP/2 over TLS) and over QUIC (HTTP/3, whose
/// connections run `on_accept` before their handshake), with its `c:log`
/// fields on each request's line.
#[test]
fn on_accept_chooses_the_pool_over_tcp_and_quic() {
    let pki = Pki::new("accept-pool");
    let (cert, key) = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let a = Origin::start("a");
    let b = Origin::start("b");
    let s = start(
        "accept-pool",
        "function on_accept(c)\n  c:use_pool(\"b\")\n  c:log(\"accepted\", c.tls and \"tls\" or \"plain\")\nend\n",
        &[(&cert, &key)],
        &[&a, &b],
        "[vserver.http3]",
    );
    for (proto, get) in [("HTTP/1.1", origins_h1 as Got), ("HTTP/2", origins_h2)] {
        let got = get(s.listen, &pki.ca(), "site.test", &["/1", "/2"])
            .unwrap_or_else(|e| panic!("{proto}: {e}\n{}", s.sy.log()));
        assert_eq!(got, ["b", "b"], "{proto}");
    }
    assert_eq!((a.requests(), b.requests()), (0, 4));
    let Some(py) = h3_python() else { return };
    let out = h3_get(&py, s.listen, &pki.ca(), "site.test", &["/h3"], &[]);
    assert_eq!(out["alpn"], "h3", "{out}");
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert_eq!((a.requests(), b.requests()), (0, 5), "{out}");
    assert!(
        eventually(Duration::from_secs(60), || log_lines(&s.log)
            .iter()
            .filter(|l| l["script"]["accepted"] == "tls")
            .count()
            == 5),
        "{:?}",
        log_lines(&s.log)
    );
}
