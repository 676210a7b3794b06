//! TLS termination end to end: real handshakes with rustls, `openssl
//! s_client` and curl; SNI and key-type selection; resumption; client
//! certificates; bad certificate files at `check` and reload; HSTS and the
//! HTTP-to-HTTPS redirect. Certificates are made at test time with the
//! openssl command (scripts/test.sh installs it).

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind};
use rustls::{RootCertStore, SignatureScheme, StreamOwned};

// ------------------------------------------------------------- certificates

// Pki, Kind and openssl come from common/pki.rs.

// ------------------------------------------------------------------ client

static V12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
static V13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// Offers only the given signature schemes (to ask for an ECDSA or an RSA
/// certificate) while verifying with webpki.
#[derive(Debug)]
struct OnlySchemes {
    inner: Arc<dyn ServerCertVerifier>,
    schemes: Vec<SignatureScheme>,
}

impl ServerCertVerifier for OnlySchemes {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

const ECDSA_ONLY: &[SignatureScheme] = &[
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
];
const RSA_ONLY: &[SignatureScheme] = &[
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PKCS1_SHA256,
];

fn roots(ca: &Path) -> Arc<RootCertStore> {
    let mut r = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("ca") {
        r.add(c.expect("ca cert")).expect("add ca");
    }
    Arc::new(r)
}

#[derive(Default)]
struct ClientOpts {
    versions: Option<&'static [&'static rustls::SupportedProtocolVersion]>,
    schemes: Option<&'static [SignatureScheme]>,
    client_cert: Option<(PathBuf, PathBuf)>,
    suites: Option<Vec<rustls::SupportedCipherSuite>>,
    session_ids_only: bool,
}

fn client_config(ca: &Path, o: ClientOpts) -> Arc<ClientConfig> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(s) = o.suites {
        provider.cipher_suites = s;
    }
    let b = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(o.versions.unwrap_or(rustls::DEFAULT_VERSIONS))
        .expect("versions");
    let roots = roots(ca);
    let b = match o.schemes {
        None => b.with_root_certificates(roots),
        Some(s) => {
            let inner = rustls::client::WebPkiServerVerifier::builder(roots)
                .build()
                .expect("verifier");
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(OnlySchemes {
                    inner,
                    schemes: s.to_vec(),
                }))
        }
    };
    let mut cfg = match o.client_cert {
        None => b.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<_> = CertificateDer::pem_file_iter(cert)
                .expect("cert")
                .map(|c| c.expect("cert"))
                .collect();
            let key = PrivateKeyDer::from_pem_file(key).expect("key");
            b.with_client_auth_cert(chain, key).expect("client cert")
        }
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    if o.session_ids_only {
        cfg.resumption = rustls::client::Resumption::in_memory_sessions(64)
            .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly);
    }
    Arc::new(cfg)
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes the handshake with `sni`.
fn connect(cfg: &Arc<ClientConfig>, addr: SocketAddr, sni: &str) -> Result<Tls, String> {
    let tcp =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    let conn = ClientConnection::new(cfg.clone(), name).map_err(|e| e.to_string())?;
    let mut s = StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(s)
}

/// The server's end-entity certificate's subject CN, read back with openssl.
fn peer_cn(s: &Tls) -> String {
    let der = s.conn.peer_certificates().expect("peer certs")[0].to_vec();
    let mut c = Command::new("openssl")
        .args([
            "x509", "-inform", "DER", "-noout", "-subject", "-nameopt", "RFC2253",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(&der)
        .expect("write");
    let out = c.wait_with_output().expect("openssl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("subject=")
        .to_string()
}

/// One request on an open TLS connection; the whole response, or an error
/// text when the connection failed or closed first.
fn tls_request(s: &mut Tls, raw: &str) -> Result<Response, String> {
    s.write_all(raw.as_bytes()).map_err(|e| e.to_string())?;
    s.flush().map_err(|e| e.to_string())?;
    read_tls_response(s)
}

fn read_tls_response(s: &mut Tls) -> Result<Response, String> {
    // Read exactly one response: the head a byte at a time, then its
    // content-length, so bytes of a pipelined response that follows stay
    // in the stream for the next call (one TLS read can hold both).
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut b).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before a response".into());
        }
        buf.push(b[0]);
    }
    let head = String::from_utf8_lossy(&buf[..buf.len() - 4]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("bad status line")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let len: usize = resp
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .ok_or("responses here have a content-length")?;
    resp.body.resize(len, 0);
    s.read_exact(&mut resp.body)
        .map_err(|e| format!("closed mid-body: {e}"))?;
    Ok(resp)
}

fn get_req(host: &str, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")
}

// ------------------------------------------------------------------ config

fn tls_config(listen: SocketAddr, origin: &Origin, tls: &str, extra_vs: &str) -> String {
    format!(
        "[global]\nworkers = 2\n[[vserver]]\nname = \"secure\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n{extra_vs}\n[vserver.tls]\n{tls}\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        origin.addr
    )
}

fn cert_entry(c: &(PathBuf, PathBuf)) -> String {
    format!(
        "{{ cert = \"{}\", key = \"{}\" }}",
        c.0.display(),
        c.1.display()
    )
}

fn vs_stats(sy: &Switchyard) -> serde_json::Value {
    let s = sy.stats();
    s["vservers"][0].clone()
}

// ------------------------------------------------------------------- tests

#[test]
fn rustls_client_gets_a_proxied_response_over_tls_1_2_and_1_3() {
    let pki = Pki::new("ca1");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Rsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let sy = Switchyard::start(
        &tls_config(
            l,
            &o,
            &format!("certificates = [{}]", cert_entry(&site)),
            "",
        ),
        &[l],
    );
    for v in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let versions = if v.version == rustls::ProtocolVersion::TLSv1_2 {
            V12
        } else {
            V13
        };
        let cfg = client_config(
            &pki.ca(),
            ClientOpts {
                versions: Some(versions),
                ..Default::default()
            },
        );
        let mut s = connect(&cfg, l, "site.test").unwrap_or_else(|e| panic!("{e}\n{}", sy.log()));
        assert_eq!(s.conn.protocol_version(), Some(v.version));
        assert_eq!(s.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        // Keep-alive over TLS: two requests on one connection.
        for _ in 0..2 {
            let r = tls_request(&mut s, &get_req("site.test", "/x")).expect("response");
            assert_eq!(r.status, 200);
            assert_eq!(r.body_text(), "a\n");
        }
    }
    let seen = o.seen();
    let last = seen.last().expect("a request reached the origin");
    assert_eq!(last.header("x-forwarded-proto").as_deref(), Some("https"));
    assert!(
        last.header("forwarded")
            .is_some_and(|f| f.contains("proto=https")),
        "{last:?}"
    );
    let v = vs_stats(&sy);
    assert_eq!(v["tls_handshakes"], 2, "{v}");
    assert_eq!(v["tls_handshake_failures"], 0, "{v}");
    // A plain-text client on the TLS port gets no HTTP answer, and counts as a failure.
    let mut raw = TcpStream::connect(l).expect("connect");
    raw.set_read_timeout(Some(Duration::from_secs(5))).ok();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .expect("write");
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(eventually(Duration::from_secs(3), || vs_stats(&sy)
        ["tls_handshake_failures"]
        == 1));
    // Prometheus carries the TLS counters too.
    let m = sy.admin_get("/metrics");
    assert!(
        m.contains("switchyard_vserver_tls_handshakes_total{vserver=\"secure\"} 2"),
        "{m}"
    );
}

#[test]
fn idle_tls_connection_parks_and_serves_again_and_pipelines() {
    let pki = Pki::new("ca-idle");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let sy = Switchyard::start(
        &tls_config(
            l,
            &o,
            &format!("certificates = [{}]", cert_entry(&site)),
            "",
        )
        .replacen(
            "[global]\n",
            "[timeouts]\nclient_park = \"1s\"\n[global]\n",
            1,
        ),
        &[l],
    );
    let cfg = client_config(&pki.ca(), ClientOpts::default());
    let mut s = connect(&cfg, l, "site.test").expect("handshake");
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
    // Idle over a second: the connection leaves its task for the parking lot.
    std::thread::sleep(Duration::from_millis(1600));
    assert!(
        eventually(Duration::from_secs(2), || sy.stats()
            ["client_connections_parked"]
            == 1),
        "{}",
        sy.stats()
    );
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
    // Three pipelined requests in separate TLS records, sent back to back.
    for p in ["/1", "/2", "/3"] {
        s.write_all(get_req("site.test", p).as_bytes())
            .expect("write");
    }
    s.flush().expect("flush");
    for _ in 0..3 {
        assert_eq!(read_tls_response(&mut s).expect("pipelined").status, 200);
    }
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
}

#[test]
fn sni_picks_exact_wildcard_and_default_and_key_type_by_client_schemes() {
    let pki = Pki::new("ca2");
    let default = pki.issue(
        "default",
        "/CN=default.test",
        &["default.test"],
        Kind::Rsa,
        30,
    );
    let exact = pki.issue(
        "exact",
        "/CN=api.example.test",
        &["api.example.test"],
        Kind::Rsa,
        30,
    );
    let wild = pki.issue("wild", "/CN=wild", &["*.example.test"], Kind::Rsa, 30);
    let dual_rsa = pki.issue("dual-rsa", "/CN=dual rsa", &["dual.test"], Kind::Rsa, 30);
    let dual_ec = pki.issue("dual-ec", "/CN=dual ecdsa", &["dual.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let certs = [&default, &exact, &wild, &dual_rsa, &dual_ec]
        .iter()
        .map(|c| cert_entry(c))
        .collect::<Vec<_>>()
        .join(", ");
    let sy = Switchyard::start(
        &tls_config(l, &o, &format!("certificates = [{certs}]"), ""),
        &[l],
    );
    let cfg = client_config(&pki.ca(), ClientOpts::default());
    let cn = |sni: &str, cfg: &Arc<ClientConfig>| {
        let s = connect(cfg, l, sni).unwrap_or_else(|e| panic!("{sni}: {e}\n{}", sy.log()));
        peer_cn(&s)
    };
    assert_eq!(cn("api.example.test", &cfg), "CN=api.example.test");
    assert_eq!(cn("API.Example.test", &cfg), "CN=api.example.test");
    assert_eq!(cn("www.example.test", &cfg), "CN=wild");
    // A wildcard covers one label only: the default answers, and the
    // client refuses it because the name does not match.
    let deep = connect(&cfg, l, "a.b.example.test");
    assert!(
        deep.as_ref()
            .is_err_and(|e| e.contains("only valid for DnsName(\"default.test\")")),
        "{:?}",
        deep.err()
    );
    // An unknown name, or none, gets the default: the first certificate.
    assert!(connect(&cfg, l, "unknown.test").is_err());
    assert_eq!(openssl_subject(l, Some("unknown.test")), "CN=default.test");
    assert_eq!(openssl_subject(l, None), "CN=default.test");
    // Same names, RSA and ECDSA: chosen by what the client can verify.
    let ec = client_config(
        &pki.ca(),
        ClientOpts {
            schemes: Some(ECDSA_ONLY),
            ..Default::default()
        },
    );
    let rsa = client_config(
        &pki.ca(),
        ClientOpts {
            schemes: Some(RSA_ONLY),
            ..Default::default()
        },
    );
    assert_eq!(cn("dual.test", &ec), "CN=dual ecdsa");
    assert_eq!(cn("dual.test", &rsa), "CN=dual rsa");
    // Both offered: the first configured that fits (RSA here).
    assert_eq!(cn("dual.test", &cfg), "CN=dual rsa");
}

/// The subject of the certificate `openssl s_client` receives (no SNI when None).
fn openssl_subject(l: SocketAddr, sni: Option<&str>) -> String {
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

/// Runs `openssl s_client` with `args`, sends one GET, returns stdout.
fn s_client(l: SocketAddr, ca: &Path, args: &[&str]) -> String {
    let mut c = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &l.to_string(),
            "-servername",
            "site.test",
            "-CAfile",
        ])
        .arg(ca)
        .args(["-ign_eof", "-verify_return_error"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(b"GET /via-openssl HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
        .expect("write");
    let out = c.wait_with_output().expect("s_client");
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn curl(l: SocketAddr, ca: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("site.test:{}:{}", l.port(), l.ip())])
        .args(args)
        .arg(format!("https://site.test:{}/via-curl", l.port()))
        .output()
        .expect("curl (apt-get install curl)");
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn openssl_and_curl_handshake_with_the_benchmark_suites() {
    let pki = Pki::new("ca3");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Rsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let sy = Switchyard::start(
        &tls_config(
            l,
            &o,
            &format!("certificates = [{}]", cert_entry(&site)),
            "",
        ),
        &[l],
    );
    let out = s_client(
        l,
        &pki.ca(),
        &["-tls1_2", "-cipher", "ECDHE-RSA-AES256-GCM-SHA384"],
    );
    assert!(out.contains("Protocol  : TLSv1.2"), "{out}\n{}", sy.log());
    assert!(
        out.contains("Cipher    : ECDHE-RSA-AES256-GCM-SHA384"),
        "{out}"
    );
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    let out = s_client(
        l,
        &pki.ca(),
        &["-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384"],
    );
    assert!(
        out.contains("New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384"),
        "{out}"
    );
    assert!(out.contains("HTTP/1.1 200"), "{out}");

    let (body, log) = curl(
        l,
        &pki.ca(),
        &[
            "--tlsv1.2",
            "--tls-max",
            "1.2",
            "--ciphers",
            "ECDHE-RSA-AES256-GCM-SHA384",
        ],
    );
    assert_eq!(body, "a\n", "{log}");
    assert!(
        log.contains("TLSv1.2 / ECDHE-RSA-AES256-GCM-SHA384"),
        "{log}"
    );
    let (body, log) = curl(
        l,
        &pki.ca(),
        &["--tlsv1.3", "--tls13-ciphers", "TLS_AES_256_GCM_SHA384"],
    );
    assert_eq!(body, "a\n", "{log}");
    assert!(log.contains("TLSv1.3 / TLS_AES_256_GCM_SHA384"), "{log}");
    assert!(o
        .seen()
        .iter()
        .any(|s| s.request_line().contains("/via-curl")));
    assert!(o
        .seen()
        .iter()
        .any(|s| s.request_line().contains("/via-openssl")));
}

#[test]
fn configured_versions_ciphers_and_groups_are_enforced() {
    let pki = Pki::new("ca4");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Rsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let tls = format!(
        "certificates = [{}]\nversions = [\"1.2\"]\nciphers = [\"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\"]\ngroups = [\"secp256r1\"]",
        cert_entry(&site)
    );
    let _sy = Switchyard::start(&tls_config(l, &o, &tls, ""), &[l]);
    // TLS 1.3 only: refused.
    let out = s_client(l, &pki.ca(), &["-tls1_3"]);
    assert!(!out.contains("HTTP/1.1 200"), "{out}");
    // TLS 1.2 with another suite: refused.
    let out = s_client(
        l,
        &pki.ca(),
        &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"],
    );
    assert!(!out.contains("HTTP/1.1 200"), "{out}");
    // X25519 only: refused; P-256: accepted, with the configured suite.
    let out = s_client(l, &pki.ca(), &["-tls1_2", "-groups", "X25519"]);
    assert!(!out.contains("HTTP/1.1 200"), "{out}");
    let out = s_client(l, &pki.ca(), &["-tls1_2", "-groups", "P-256"]);
    assert!(
        out.contains("Cipher    : ECDHE-RSA-AES256-GCM-SHA384"),
        "{out}"
    );
    assert!(out.contains("HTTP/1.1 200"), "{out}");
}

#[test]
fn post_quantum_hybrid_group_is_negotiated() {
    let pki = Pki::new("ca-pq");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let tls = format!(
        "certificates = [{}]\ngroups = [\"X25519MLKEM768\"]",
        cert_entry(&site)
    );
    let _sy = Switchyard::start(&tls_config(l, &o, &tls, ""), &[l]);
    let cfg = client_config(&pki.ca(), ClientOpts::default());
    let mut s = connect(&cfg, l, "site.test").expect("handshake");
    assert_eq!(
        s.conn.negotiated_key_exchange_group().map(|g| g.name()),
        Some(rustls::NamedGroup::X25519MLKEM768)
    );
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
}

fn resumed(cfg: &Arc<ClientConfig>, l: SocketAddr) -> Option<HandshakeKind> {
    let mut s = connect(cfg, l, "site.test").expect("handshake");
    // Tickets arrive after the handshake in TLS 1.3: a request reads them.
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
    s.conn.handshake_kind()
}

#[test]
fn resumption_resumes_across_workers_and_reloads_and_can_be_turned_off() {
    let pki = Pki::new("ca5");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let tls = format!("certificates = [{}]", cert_entry(&site));
    let sy = Switchyard::start(&tls_config(l, &o, &tls, ""), &[l]);
    let (v12, v13) = (V12, V13);
    let kinds = |cfg: ClientOpts| {
        let c = client_config(&pki.ca(), cfg);
        (0..6).map(|_| resumed(&c, l)).collect::<Vec<_>>()
    };
    let mut expect = vec![Some(HandshakeKind::Resumed); 6];
    expect[0] = Some(HandshakeKind::Full);
    // Two workers, six connections: every one after the first resumes,
    // whichever worker takes it (keys and cache are shared).
    assert_eq!(
        kinds(ClientOpts {
            versions: Some(v13),
            ..Default::default()
        }),
        expect,
        "TLS 1.3 tickets"
    );
    assert_eq!(
        kinds(ClientOpts {
            versions: Some(v12),
            ..Default::default()
        }),
        expect,
        "TLS 1.2 tickets"
    );
    assert_eq!(
        kinds(ClientOpts {
            versions: Some(v12),
            session_ids_only: true,
            ..Default::default()
        }),
        expect,
        "TLS 1.2 session IDs"
    );
    let v = vs_stats(&sy);
    assert_eq!(v["tls_resumed"], 15, "{v}");
    // A ticket issued before a reload still resumes after it.
    let c13 = client_config(
        &pki.ca(),
        ClientOpts {
            versions: Some(v13),
            ..Default::default()
        },
    );
    assert_eq!(resumed(&c13, l), Some(HandshakeKind::Full));
    let (ok, out) = sy.reload_with(&tls_config(
        l,
        &o,
        &tls,
        "request_headers = { set = { \"x-gen\" = \"2\" } }",
    ));
    assert!(ok, "{out}");
    assert_eq!(resumed(&c13, l), Some(HandshakeKind::Resumed));
    assert!(o
        .seen()
        .last()
        .is_some_and(|s| s.header("x-gen").as_deref() == Some("2")));

    // resumption = false: nothing resumes, on either version.
    let (ok, out) = sy.reload_with(&tls_config(
        l,
        &o,
        &format!("{tls}\nresumption = false"),
        "",
    ));
    assert!(ok, "{out}");
    let full = vec![Some(HandshakeKind::Full); 3];
    for opts in [
        ClientOpts {
            versions: Some(v13),
            ..Default::default()
        },
        ClientOpts {
            versions: Some(v12),
            ..Default::default()
        },
        ClientOpts {
            versions: Some(v12),
            session_ids_only: true,
            ..Default::default()
        },
    ] {
        let c = client_config(&pki.ca(), opts);
        let k: Vec<_> = (0..3).map(|_| resumed(&c, l)).collect();
        assert_eq!(k, full);
    }
}

#[test]
fn client_certificates_required_and_optional() {
    let pki = Pki::new("ca6");
    let other = Pki::new("other-ca");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let alice = pki.issue("alice", "/O=Acme, Inc./CN=alice", &[], Kind::Ecdsa, 30);
    let mallory = other.issue("mallory", "/CN=mallory", &[], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let tls = |mode: &str| {
        format!(
            "certificates = [{}]\nclient_ca = \"{}\"\nclient_auth = \"{mode}\"",
            cert_entry(&site),
            pki.ca().display()
        )
    };
    let sy = Switchyard::start(&tls_config(l, &o, &tls("required"), ""), &[l]);
    let spoof = "GET /who HTTP/1.1\r\nHost: site.test\r\nX-Client-Cert-Subject: CN=admin\r\n\r\n";
    let with = |cert: &(PathBuf, PathBuf)| {
        client_config(
            &pki.ca(),
            ClientOpts {
                client_cert: Some(cert.clone()),
                ..Default::default()
            },
        )
    };
    // A verified certificate: the subject reaches the member, a client's
    // own field of that name does not.
    let mut s = connect(&with(&alice), l, "site.test").expect("handshake");
    assert_eq!(tls_request(&mut s, spoof).expect("r").status, 200);
    let seen = o.seen();
    let last = seen.last().expect("request");
    assert_eq!(
        last.header("x-client-cert-subject").as_deref(),
        Some("CN=alice,O=Acme\\, Inc."),
        "{last:?}"
    );
    assert_eq!(
        last.head.matches("x-client-cert-subject").count()
            + last.head.matches("X-Client-Cert-Subject").count(),
        1,
        "{last:?}"
    );
    // No certificate, or one from another CA: no request gets through.
    let n = o.requests();
    let none = client_config(&pki.ca(), ClientOpts::default());
    // A client without a certificate is served, and its own field of the
    // subject's name never reaches the member.
    let no_certificate_no_field = || {
        let mut s = connect(&none, l, "site.test").expect("handshake");
        assert_eq!(tls_request(&mut s, spoof).expect("r").status, 200);
        let seen = o.seen();
        let last = seen.last().expect("request");
        assert_eq!(last.header("x-client-cert-subject"), None, "{last:?}");
    };
    for cfg in [none.clone(), with(&mallory)] {
        let r = connect(&cfg, l, "site.test").and_then(|mut s| tls_request(&mut s, spoof));
        assert!(r.is_err(), "{r:?}");
    }
    assert_eq!(o.requests(), n);
    assert!(
        eventually(Duration::from_secs(3), || vs_stats(&sy)
            ["tls_handshake_failures"]
            == 2),
        "{}",
        vs_stats(&sy)
    );

    // optional: no certificate passes without the field (and the spoofed
    // one is still removed); a bad certificate is still refused.
    let (ok, out) = sy.reload_with(&tls_config(l, &o, &tls("optional"), ""));
    assert!(ok, "{out}");
    no_certificate_no_field();
    let r = connect(&with(&mallory), l, "site.test").and_then(|mut s| tls_request(&mut s, spoof));
    assert!(r.is_err(), "{r:?}");
    let mut s = connect(&with(&alice), l, "site.test").expect("handshake");
    assert_eq!(tls_request(&mut s, spoof).expect("r").status, 200);
    assert!(o.seen().last().is_some_and(|s| s
        .header("x-client-cert-subject")
        .is_some_and(|v| v.starts_with("CN=alice"))));

    // A session resumed after the rule tightened would skip it: the client
    // without a certificate holds a ticket from "optional" (TLS 1.3 tickets
    // come with the first response), and after the reload to "required" it
    // must fail the handshake rather than resume into a 200.
    let mut s = connect(&none, l, "site.test").expect("handshake");
    assert_eq!(tls_request(&mut s, spoof).expect("r").status, 200);
    drop(s);
    let (ok, out) = sy.reload_with(&tls_config(l, &o, &tls("required"), ""));
    assert!(ok, "{out}");
    let n = o.requests();
    let r = connect(&none, l, "site.test").and_then(|mut s| tls_request(&mut s, spoof));
    assert!(r.is_err(), "resumed past client_auth = \"required\": {r:?}");
    assert_eq!(o.requests(), n);

    // A field named in client_subject_header is stripped even without
    // client certificates to fill it: the member trusts that name.
    let plain = format!(
        "certificates = [{}]\nclient_subject_header = \"x-client-cert-subject\"",
        cert_entry(&site)
    );
    let (ok, out) = sy.reload_with(&tls_config(l, &o, &plain, ""));
    assert!(ok, "{out}");
    no_certificate_no_field();
}

/// A policy on the client certificate's field (`client_auth =
/// "optional"`: /admin for alice only) judges what the handshake proved:
/// a client without a certificate that writes the field itself is
/// refused over HTTP/1.1 and HTTP/2, since the client's copy is removed
/// before the rules run, not only before the member sees the request.
#[test]
fn a_policy_on_the_certificate_field_cannot_be_fooled_by_the_client() {
    let pki = Pki::new("ca-gate");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let alice = pki.issue("alice", "/CN=alice", &[], Kind::Ecdsa, 30);
    let bob = pki.issue("bob", "/CN=bob", &[], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let tls = format!(
        "certificates = [{}]\nclient_ca = \"{}\"\nclient_auth = \"optional\"\nalpn = [\"h2\", \"http/1.1\"]",
        cert_entry(&site),
        pki.ca().display()
    );
    let gate = "[[vserver.policy]]\n\
        match = { path_prefix = \"/admin\", header = { name = \"x-client-cert-subject\", value = \"CN=alice\" } }\n\
        action = { pool = \"p\" }\n\
        [[vserver.policy]]\nmatch = { path_prefix = \"/admin\" }\n\
        action = { status = 403, body = \"alice only\\n\" }";
    let _sy = Switchyard::start(&tls_config(l, &o, &tls, gate), &[l]);
    let cfg = |cert: Option<&(PathBuf, PathBuf)>| {
        client_config(
            &pki.ca(),
            ClientOpts {
                client_cert: cert.cloned(),
                ..Default::default()
            },
        )
    };
    let h1 = |cfg: &Arc<ClientConfig>, spoof: bool| {
        let field = if spoof {
            "X-Client-Cert-Subject: CN=alice\r\n"
        } else {
            ""
        };
        let req = format!("GET /admin/x HTTP/1.1\r\nHost: site.test\r\n{field}\r\n");
        let mut s = connect(cfg, l, "site.test").expect("handshake");
        tls_request(&mut s, &req).expect("response").status
    };
    let h2 = |cfg: &Arc<ClientConfig>, spoof: bool| {
        let fields: &[(&str, &str)] = if spoof {
            &[("x-client-cert-subject", "CN=alice")]
        } else {
            &[]
        };
        h2_tls_get_with(cfg, l, "site.test", "/admin/x", fields).0
    };
    let (none, alice, bob) = (cfg(None), cfg(Some(&alice)), cfg(Some(&bob)));
    for (proto, get) in [("HTTP/1.1", &h1 as &dyn Fn(_, _) -> u16), ("HTTP/2", &h2)] {
        assert_eq!(get(&none, true), 403, "{proto}: no certificate, own field");
        assert_eq!(
            get(&bob, true),
            403,
            "{proto}: bob's certificate, own field"
        );
        assert_eq!(get(&none, false), 403, "{proto}: no certificate");
        assert_eq!(get(&alice, false), 200, "{proto}: alice");
        assert_eq!(get(&alice, true), 200, "{proto}: alice, own field too");
    }
    // The member got alice's four requests, each with the one field the
    // handshake proved.
    let seen = o.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    for r in &seen {
        assert_eq!(
            r.header("x-client-cert-subject").as_deref(),
            Some("CN=alice"),
            "{r:?}"
        );
        assert_eq!(
            r.head
                .to_ascii_lowercase()
                .matches("x-client-cert-subject")
                .count(),
            1,
            "{r:?}"
        );
    }
}

#[test]
fn hsts_and_https_redirect() {
    let pki = Pki::new("ca7");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let (plain, secure) = (free_addr(), free_addr());
    let cfg = format!(
        "[global]\nworkers = 1\n\
         [[vserver]]\nname = \"plain\"\nlisten = [\"{plain}\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/\" }}\naction = {{ redirect_https = true, https_port = {} }}\n\
         [[vserver]]\nname = \"secure\"\nlisten = [\"{secure}\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\nmatch = {{ path = \"/fixed\" }}\naction = {{ status = 200, body = \"fixed\" }}\n\
         [vserver.tls]\ncertificates = [{}]\nhsts = {{ max_age = 31536000, include_subdomains = true }}\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        secure.port(),
        cert_entry(&site),
        o.addr
    );
    let _sy = Switchyard::start(&cfg, &[plain, secure]);
    let r = get_with(plain, "/a/b?c=d", "");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("https://test:{}/a/b?c=d", secure.port()).as_str())
    );
    assert_eq!(r.header("strict-transport-security"), None);
    let r = request(
        plain,
        "GET /x HTTP/1.1\r\nHost: site.test:80\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        r.header("location"),
        Some(format!("https://site.test:{}/x", secure.port()).as_str())
    );
    let r = request(
        plain,
        "GET /x HTTP/1.1\r\nHost: bad/host\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    // HSTS on proxied and local responses of the TLS vserver.
    let c = client_config(&pki.ca(), ClientOpts::default());
    let mut s = connect(&c, secure, "site.test").expect("handshake");
    for path in ["/", "/fixed"] {
        let r = tls_request(&mut s, &get_req("site.test", path)).expect("r");
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("strict-transport-security"),
            Some("max-age=31536000; includeSubDomains"),
            "{path}"
        );
    }
}

// ------------------------------------------------- bad files, check, reload

fn position(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in config"));
    let before = &text[..at];
    (
        before.matches('\n').count() + 1,
        at - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1,
    )
}

fn check_file(dir: &Path, text: &str) -> (Option<i32>, String, String) {
    let f = dir.join("check.toml");
    std::fs::write(&f, text).expect("write");
    let (code, _, err) = run_cli(&["check", "-c", &f.display().to_string()]);
    (code, err, f.display().to_string())
}

#[test]
fn check_locates_bad_certificate_files() {
    let pki = Pki::new("ca8");
    let good = pki.issue("good", "/CN=site.test", &["site.test"], Kind::Rsa, 30);
    let other = pki.issue("other", "/CN=other.test", &["other.test"], Kind::Rsa, 30);
    let expired = pki.issue("expired", "/CN=old.test", &["old.test"], Kind::Rsa, -1);
    let dir = &pki.dir;
    let o = Origin::start("a");
    let l = free_addr();
    let base = |tls: &str| tls_config(l, &o, tls, "");

    // Relative paths resolve against the config file's directory.
    let ok = base("certificates = [{ cert = \"good.pem\", key = \"good.key\" }]");
    let (code, err, _) = check_file(dir, &ok);
    assert_eq!(code, Some(0), "{err}");

    let cases: Vec<(String, &str, String)> = vec![
        (
            "certificates = [{ cert = \"missing.pem\", key = \"good.key\" }]".into(),
            "\"missing.pem\"",
            "cannot read".into(),
        ),
        (
            "certificates = [{ cert = \"good.key\", key = \"good.key\" }]".into(),
            "\"good.key\", key",
            "holds no PEM certificate".into(),
        ),
        (
            "certificates = [{ cert = \"good.pem\", key = \"good.pem\" }]".into(),
            "\"good.pem\" }",
            "holds no PEM private key".into(),
        ),
        (
            format!("certificates = [{{ cert = \"good.pem\", key = \"{}\" }}]", other.1.display()),
            "key = \"",
            "does not match certificate \"good.pem\"".into(),
        ),
        (
            format!("certificates = [{{ cert = \"{}\", key = \"{}\" }}]", expired.0.display(), expired.1.display()),
            "cert = \"",
            "expired on".into(),
        ),
        (
            "certificates = [{ cert = \"good.pem\", key = \"good.key\" }]\nciphers = [\"TLS_RSA_WITH_RC4_128_MD5\"]".into(),
            "\"TLS_RSA_WITH_RC4_128_MD5\"",
            "unknown cipher suite \"TLS_RSA_WITH_RC4_128_MD5\"; allowed: TLS13_AES_256_GCM_SHA384".into(),
        ),
        (
            "certificates = [{ cert = \"good.pem\", key = \"good.key\" }]\ngroups = [\"x448\"]".into(),
            "\"x448\"",
            "unknown key-exchange group \"x448\"; allowed: ".into(),
        ),
        (
            "certificates = [{ cert = \"good.pem\", key = \"good.key\" }]\nversions = [\"1.1\"]".into(),
            "\"1.1\"",
            "unknown TLS version \"1.1\"; allowed: \"1.2\", \"1.3\"".into(),
        ),
    ];
    for (tls, needle, msg) in cases {
        let text = base(&tls);
        let (code, err, f) = check_file(dir, &text);
        assert_eq!(code, Some(1), "{tls}: {err}");
        let (line, col) = position(&text, needle);
        let needle_col = if needle.ends_with("key = \"") || needle.ends_with("cert = \"") {
            // The error points at the value: the opening quote.
            col + needle.len() - 1
        } else {
            col
        };
        let prefix = format!("{f}:{line}:{needle_col}: vserver \"secure\" tls");
        assert!(err.starts_with(&prefix), "{tls}\nwant {prefix}\ngot  {err}");
        assert!(err.contains(&msg), "{tls}\nwant {msg}\ngot  {err}");
    }
    let _ = good;
}

#[test]
fn reload_swaps_certificates_without_dropping_connections_and_rejects_bad_ones() {
    let pki = Pki::new("ca9");
    let one = pki.issue("one", "/CN=one", &["site.test"], Kind::Ecdsa, 30);
    let two = pki.issue("two", "/CN=two", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let cfg_for = |c: &(PathBuf, PathBuf)| {
        tls_config(l, &o, &format!("certificates = [{}]", cert_entry(c)), "")
    };
    let sy = Switchyard::start(&cfg_for(&one), &[l]);
    // A fresh client each time: a resumed session would show the
    // certificate of the session it resumes.
    let c = || client_config(&pki.ca(), ClientOpts::default());
    let mut before = connect(&c(), l, "site.test").expect("handshake");
    assert_eq!(peer_cn(&before), "CN=one");
    assert_eq!(
        tls_request(&mut before, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );

    // A key that does not match: rejected, located, and "one" keeps serving.
    let bad = tls_config(
        l,
        &o,
        &format!(
            "certificates = [{{ cert = \"{}\", key = \"{}\" }}]",
            two.0.display(),
            one.1.display()
        ),
        "",
    );
    let (ok, out) = sy.reload_with(&bad);
    assert!(!ok, "{out}");
    assert!(out.contains("does not match certificate"), "{out}");
    let full = std::fs::read_to_string(&sy.config).expect("config");
    let (line, _) = position(&full, "key = ");
    assert!(
        out.contains(&format!("{}:{line}:", sy.config.display())),
        "{out}"
    );
    assert_eq!(
        peer_cn(&connect(&c(), l, "site.test").expect("handshake")),
        "CN=one"
    );
    assert_eq!(
        tls_request(&mut before, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );

    // A good new certificate: new connections get it, the old connection
    // keeps going on its session.
    let (ok, out) = sy.reload_with(&cfg_for(&two));
    assert!(ok, "{out}");
    assert_eq!(
        peer_cn(&connect(&c(), l, "site.test").expect("handshake")),
        "CN=two"
    );
    assert_eq!(
        tls_request(&mut before, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
    assert_eq!(peer_cn(&before), "CN=one");
}

#[test]
fn ocsp_response_is_stapled() {
    let pki = Pki::new("ca10");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    // A real OCSP response from `openssl ocsp` acting as the responder.
    let serial = {
        let out = Command::new("openssl")
            .args(["x509", "-in"])
            .arg(&site.0)
            .args(["-noout", "-serial"])
            .output()
            .expect("openssl");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .trim_start_matches("serial=")
            .to_string()
    };
    std::fs::write(
        pki.dir.join("index.txt"),
        format!("V\t300101000000Z\t\t{serial}\tunknown\t/CN=site.test\n"),
    )
    .expect("index");
    openssl(
        &pki.dir,
        &[
            "ocsp", "-issuer", "ca10.pem", "-cert", "site.pem", "-reqout", "req.der",
        ],
    );
    openssl(
        &pki.dir,
        &[
            "ocsp",
            "-index",
            "index.txt",
            "-rsigner",
            "ca10.pem",
            "-rkey",
            "ca10.key",
            "-CA",
            "ca10.pem",
            "-reqin",
            "req.der",
            "-respout",
            "resp.der",
            "-ndays",
            "7",
        ],
    );
    let o = Origin::start("a");
    let l = free_addr();
    let tls = format!(
        "certificates = [{{ cert = \"{}\", key = \"{}\", ocsp = \"{}\" }}]",
        site.0.display(),
        site.1.display(),
        pki.dir.join("resp.der").display()
    );
    let sy = Switchyard::start(&tls_config(l, &o, &tls, ""), &[l]);
    let out = s_client(l, &pki.ca(), &["-status"]);
    assert!(out.contains("OCSP Response Status: successful"), "{out}");
    assert!(out.contains("Cert Status: good"), "{out}");
    // The admin API reads the staple: status and validity.
    let certs: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/api/v1/certificates")).expect("json");
    let c = &certs[0];
    assert_eq!(c["names"], serde_json::json!(["site.test"]), "{certs}");
    assert_eq!(c["ocsp"]["stapled"], true, "{c}");
    assert_eq!(c["ocsp"]["response_status"], "successful", "{c}");
    assert_eq!(c["ocsp"]["cert_status"], "good", "{c}");
    assert_eq!(c["ocsp"]["expired"], false, "{c}");
    assert!(c["ocsp"]["next_update"].is_string(), "{c}");
    assert!(
        (28..=30).contains(&c["days_left"].as_i64().unwrap_or(0)),
        "{c}"
    );
}

#[test]
fn websocket_tunnels_over_tls() {
    let pki = Pki::new("ca11");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let _sy = Switchyard::start(
        &tls_config(
            l,
            &o,
            &format!("certificates = [{}]", cert_entry(&site)),
            "",
        ),
        &[l],
    );
    let c = client_config(&pki.ca(), ClientOpts::default());
    let mut s = connect(&c, l, "site.test").expect("handshake");
    s.write_all(
        b"GET /chat HTTP/1.1\r\nHost: site.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .expect("write");
    // The 101 head, byte by byte so no frame byte is consumed with it.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).expect("read 101"),
            1,
            "closed before the 101"
        );
        head.push(b[0]);
        assert!(head.len() < 4096);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for msg in ["hello", "over tls"] {
        s.write_all(&ws_frame(1, msg.as_bytes(), Some([1, 2, 3, 4])))
            .expect("frame");
        let (op, payload) = ws_read_frame(&mut s).expect("echo");
        assert_eq!((op, payload.as_slice()), (1, msg.as_bytes()));
    }
}

#[test]
fn a_silent_handshake_times_out_with_client_header() {
    let pki = Pki::new("ca12");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let o = Origin::start("a");
    let l = free_addr();
    let cfg = tls_config(
        l,
        &o,
        &format!("certificates = [{}]", cert_entry(&site)),
        "",
    )
    .replace(
        "[global]\n",
        "[timeouts]\nclient_header = \"500ms\"\n[global]\n",
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let mut raw = TcpStream::connect(l).expect("connect");
    raw.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let start = std::time::Instant::now();
    let mut b = [0u8; 16];
    let n = raw.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "expected a close");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(eventually(Duration::from_secs(2), || {
        vs_stats(&sy)["tls_handshake_failures"] == 1
    }));
    // A real client still gets through.
    let c = client_config(&pki.ca(), ClientOpts::default());
    let mut s = connect(&c, l, "site.test").expect("handshake");
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
}

/// GET over HTTP/2 in TLS (ALPN h2) with `cfg`'s client certificate.
fn h2_tls_get(
    cfg: &Arc<ClientConfig>,
    addr: SocketAddr,
    sni: &str,
    path: &str,
) -> (u16, Vec<(String, String)>) {
    h2_tls_get_with(cfg, addr, sni, path, &[])
}

/// `h2_tls_get` with the request's own `fields`.
fn h2_tls_get_with(
    cfg: &Arc<ClientConfig>,
    addr: SocketAddr,
    sni: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> (u16, Vec<(String, String)>) {
    let mut cfg = (**cfg).clone();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = ServerName::try_from(sni.to_string()).expect("name");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .expect("handshake");
        let (send, conn) = h2::client::handshake(tls).await.expect("h2");
        tokio::spawn(conn);
        let mut req = http::Request::get(format!("https://{sni}{path}"));
        for (n, v) in fields {
            req = req.header(*n, *v);
        }
        let req = req.body(()).expect("request");
        let mut s = send.ready().await.expect("ready");
        let (resp, _) = s.send_request(req, true).expect("send");
        let resp = resp.await.expect("response");
        let headers = resp
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        (resp.status().as_u16(), headers)
    })
}

/// The classic iRules task "header insertion from the client
/// certificate", as a script (docs/scripting.md): `r.client_cert` over
/// HTTP/1.1 and HTTP/2, and a 403 of the script's own without one.
#[test]
fn a_script_inserts_headers_from_the_client_certificate() {
    let pki = Pki::new("ca-script");
    let site = pki.issue("site", "/CN=site.test", &["site.test"], Kind::Ecdsa, 30);
    let alice = pki.leaf(
        "alice",
        "/O=Acme/CN=alice",
        "DNS:alice.example,email:alice@example.com,IP:192.0.2.7",
        Kind::Ecdsa,
        30,
    );
    let o = Origin::start("a");
    let l = free_addr();
    let dir = temp_dir("script-mtls");
    let script = dir.join("mtls.lua");
    std::fs::write(
        &script,
        r#"
function on_request(r)
  local c = r.client_cert
  if not c then
    return r:respond(403, "a client certificate is required\n")
  end
  r:set_header("x-client-subject", c.subject)
  r:set_header("x-client-issuer", c.issuer)
  r:set_header("x-client-serial", c.serial)
  r:set_header("x-client-san", table.concat(c.san_dns, ",") .. ";" ..
               table.concat(c.san_email, ",") .. ";" .. table.concat(c.san_ip, ","))
  r:set_header("x-client-sha256", c.sha256)
  r:set_header("x-client-verified", tostring(c.verified))
  r:set_header("x-client-days", tostring((c.not_after - c.not_before) // 86400))
end
"#,
    )
    .expect("script");
    let tls = format!(
        "certificates = [{}]\nclient_ca = \"{}\"\nclient_auth = \"optional\"\nalpn = [\"h2\", \"http/1.1\"]",
        cert_entry(&site),
        pki.ca().display()
    );
    let extra = format!("[vserver.script]\nfile = \"{}\"", script.display());
    let sy = Switchyard::start(&tls_config(l, &o, &tls, &extra), &[l]);
    let with = client_config(
        &pki.ca(),
        ClientOpts {
            client_cert: Some(alice.clone()),
            ..Default::default()
        },
    );
    // What openssl says of the certificate.
    let pem = std::fs::read(&alice.0).expect("pem");
    let der = CertificateDer::from_pem_slice(&pem).expect("der");
    let sha: String = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(&alice.0)
        .output()
        .expect("openssl");
    let serial = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("serial=")
        .to_ascii_lowercase();

    let mut s = connect(&with, l, "site.test").expect("handshake");
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        200
    );
    let (status, _) = h2_tls_get(&with, l, "site.test", "/h2");
    assert_eq!(status, 200);
    let seen = o.seen();
    assert_eq!(seen.len(), 2);
    for (proto, last) in ["HTTP/1.1", "HTTP/2"].iter().zip(&seen) {
        let h = |n: &str| last.header(n).unwrap_or_default();
        assert_eq!(h("x-client-subject"), "CN=alice,O=Acme", "{proto}");
        assert_eq!(h("x-client-issuer"), "CN=ca-script", "{proto}");
        assert_eq!(
            h("x-client-serial").trim_start_matches("00"),
            serial.trim_start_matches("00"),
            "{proto}"
        );
        assert_eq!(
            h("x-client-san"),
            "alice.example;alice@example.com;192.0.2.7",
            "{proto}"
        );
        assert_eq!(h("x-client-sha256"), sha, "{proto}");
        assert_eq!(h("x-client-verified"), "true", "{proto}");
        assert_eq!(h("x-client-days"), "30", "{proto}");
    }
    // No certificate: the script's own answer, on both protocols.
    let none = client_config(&pki.ca(), ClientOpts::default());
    let mut s = connect(&none, l, "site.test").expect("handshake");
    assert_eq!(
        tls_request(&mut s, &get_req("site.test", "/"))
            .expect("r")
            .status,
        403
    );
    assert_eq!(h2_tls_get(&none, l, "site.test", "/").0, 403);
    assert_eq!(o.requests(), 2);
    drop(sy);
}
