//! Automatic certificates (`[vserver.tls.acme]`, docs/acme.md) against a
//! real ACME server: pebble v2.10.3 with pebble-challtestsrv as its DNS
//! (every name resolves to the test's loopback address), both installed
//! by scripts/test.sh with `go install`. Without them the tests that need
//! them skip and say so.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

const NAME: &str = "shop.example.com";
/// A Let's Encrypt lifetime: pebble's renewal window for it (RFC 9773) is
/// around day 60, so no renewal comes during a test unless forced.
const NINETY_DAYS: u64 = 90 * 86_400;

/// The running test's name (for a SKIPPED line).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("acme")
        .rsplit("::")
        .next()
        .unwrap_or("acme")
        .to_string()
}

/// A Go program from PATH or ~/go/bin (where `go install` puts it).
fn go_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join("go/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// A free TCP port on `ip`.
fn port_on(ip: IpAddr) -> u16 {
    let l = TcpListener::bind((ip, 0)).expect("bind");
    l.local_addr().expect("addr").port()
}

fn wait_port(a: SocketAddr, what: &str, log: &Path) {
    assert!(
        eventually(Duration::from_secs(15), || TcpStream::connect_timeout(
            &a,
            Duration::from_millis(200)
        )
        .is_ok()),
        "{what} not listening on {a}:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

struct Pebble {
    pebble: Child,
    dns: Child,
    dir: PathBuf,
    /// Trusts pebble's own HTTPS (the ACME API and management interface).
    api_ca: PathBuf,
    /// The certificate and key of pebble's HTTPS (for a proxy in front).
    api_cert: PathBuf,
    api_key: PathBuf,
    /// pebble's ACME API.
    listen: SocketAddr,
    directory: String,
    management: SocketAddr,
    /// pebble-challtestsrv: its DNS server and its (plain HTTP)
    /// management API (`/set-txt`, `/clear-txt`).
    dns_addr: SocketAddr,
    dns_management: SocketAddr,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.pebble.kill();
        let _ = self.pebble.wait();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}

impl Pebble {
    /// Pebble validating HTTP-01 on `ip:http_port` and TLS-ALPN-01 on
    /// `ip:tls_port`, issuing certificates valid `validity` seconds; None
    /// (with a message) when pebble is not installed.
    fn start(ip: IpAddr, http_port: u16, tls_port: u16, validity: u64) -> Option<Pebble> {
        Self::start_with(ip, http_port, tls_port, validity, serde_json::json!({}))
    }

    /// As `start`, with `extra` merged into pebble's configuration.
    fn start_with(
        ip: IpAddr,
        http_port: u16,
        tls_port: u16,
        validity: u64,
        extra: serde_json::Value,
    ) -> Option<Pebble> {
        let (Some(pebble), Some(challtest)) = (go_tool("pebble"), go_tool("pebble-challtestsrv"))
        else {
            let why = "pebble and pebble-challtestsrv are not installed (scripts/test.sh installs them: go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3 and cmd/pebble-challtestsrv@v2.10.3)";
            println!("SKIPPED {}: {why}", test_name());
            eprintln!("SKIPPED {}: {why}", test_name());
            return None;
        };
        let pki = Pki::new("pebble-api");
        let (cert, key) = pki.issue_cn("api", "localhost", "IP:127.0.0.1,DNS:localhost");
        let dir = pki.dir.clone();
        let lo: IpAddr = [127, 0, 0, 1].into();
        let dns_port = {
            // challtestsrv serves DNS on UDP and TCP: a port free for both.
            loop {
                let p = port_on(lo);
                if std::net::UdpSocket::bind((lo, p)).is_ok() {
                    break p;
                }
            }
        };
        let dns_log = std::fs::File::create(dir.join("challtestsrv.log")).expect("log");
        let dns_management = SocketAddr::new(lo, port_on(lo));
        let dns = Command::new(challtest)
            .args(["-defaultIPv4", &ip.to_string(), "-defaultIPv6", ""])
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .args(["-management", &dns_management.to_string()])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .stdout(dns_log.try_clone().expect("log"))
            .stderr(dns_log)
            .spawn()
            .expect("start pebble-challtestsrv");
        // A port free when asked may be taken by another test's socket
        // before pebble binds it; pebble then exits at once: it is started
        // again on other ports (up to three times).
        let mut attempts = 0;
        let (child, listen, management) = loop {
            let listen = SocketAddr::new(lo, port_on(lo));
            let management = SocketAddr::new(lo, port_on(lo));
            let mut config = serde_json::json!({
                "pebble": {
                    "listenAddress": listen.to_string(),
                    "managementListenAddress": management.to_string(),
                    "certificate": cert,
                    "privateKey": key,
                    "httpPort": http_port,
                    "tlsPort": tls_port,
                    "ocspResponderURL": "",
                    "externalAccountBindingRequired": false,
                    "profiles": { "default": { "description": "test", "validityPeriod": validity } }
                }
            });
            for (k, v) in extra.as_object().into_iter().flatten() {
                config["pebble"][k] = v.clone();
            }
            std::fs::write(dir.join("pebble.json"), config.to_string()).expect("config");
            let log = std::fs::File::create(dir.join("pebble.log")).expect("log");
            let child = Command::new(&pebble)
                .arg("-config")
                .arg(dir.join("pebble.json"))
                .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
                // Validate at once and always for real; no random bad nonces.
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_VA_ALWAYS_VALID", "0")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("start pebble");
            let mut child = child;
            let up =
                |a: SocketAddr| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok();
            let mut exited = false;
            let ready = eventually(Duration::from_secs(15), || {
                exited = matches!(child.try_wait(), Ok(Some(_)));
                exited || (up(listen) && up(management))
            });
            attempts += 1;
            if ready && !exited {
                break (child, listen, management);
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(
                attempts < 3,
                "pebble did not start on {listen} / {management}:\n{}",
                std::fs::read_to_string(dir.join("pebble.log")).unwrap_or_default()
            );
        };
        let p = Pebble {
            pebble: child,
            dns,
            api_ca: pki.ca(),
            api_cert: cert,
            api_key: key,
            listen,
            directory: format!("https://{listen}/dir"),
            management,
            dns_addr: SocketAddr::new(lo, dns_port),
            dns_management,
            dir,
        };
        wait_port(
            dns_management,
            "pebble-challtestsrv",
            &p.dir.join("challtestsrv.log"),
        );
        Some(p)
    }

    /// The CA goes down (its DNS stays).
    fn stop(&mut self) {
        let _ = self.pebble.kill();
        let _ = self.pebble.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default()
    }

    /// Orders placed at pebble so far.
    fn orders(&self) -> usize {
        self.log().matches("Added order").count()
    }

    /// The root pebble issues under (its management interface's
    /// /roots/0), PEM.
    fn root(&self) -> Vec<u8> {
        let (status, body) = https_get(self.management, "/roots/0", &self.api_ca);
        assert_eq!(status, 200, "pebble /roots/0: {body:?}");
        body
    }

    /// Overrides pebble's renewal information (RFC 9773) for the
    /// certificate in `cert_pem` (its management `/set-renewal-info`).
    fn set_renewal_info(&self, cert_pem: &[u8], ari_json: &str) {
        let body = serde_json::json!({
            "Certificate": String::from_utf8_lossy(cert_pem),
            "ARIResponse": ari_json,
        })
        .to_string();
        let (status, out) = https_request(
            self.management,
            "POST",
            "/set-renewal-info/",
            body.as_bytes(),
            &self.api_ca,
        );
        assert_eq!(
            status,
            200,
            "set-renewal-info: {}",
            String::from_utf8_lossy(&out)
        );
    }

    /// The `[vserver.tls.acme]` table for this pebble.
    fn acme_table(&self, challenge: &str, state_dir: &Path) -> String {
        format!(
            "[vserver.tls.acme]\nnames = [\"{NAME}\"]\ndirectory = \"{}\"\ncontact = [\"mailto:ops@example.com\"]\nchallenge = \"{challenge}\"\nstate_dir = \"{}\"\nca_roots = \"{}\"\n",
            self.directory,
            state_dir.display(),
            self.api_ca.display()
        )
    }
}

fn tls_client(roots_pem: &[u8], alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(roots_pem) {
        roots.add(c.expect("PEM")).expect("root");
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Arc::new(cfg)
}

/// GET over HTTPS trusting `ca` (one request, connection closed).
fn https_get(addr: SocketAddr, path: &str, ca: &Path) -> (u16, Vec<u8>) {
    https_request(addr, "GET", path, b"", ca)
}

fn https_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    ca: &Path,
) -> (u16, Vec<u8>) {
    let cfg = tls_client(&std::fs::read(ca).expect("ca"), &[]);
    let name = ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(cfg, name).expect("client");
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\nUser-Agent: switchyard-test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("write");
    s.write_all(body).expect("write");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, raw[split + 4..].to_vec())
}

/// The leaf certificate `addr` serves for `sni` to a client trusting
/// `root` and offering `alpn`, with the protocol chosen; Err(why) when
/// the handshake fails (no certificate yet, or one the root does not
/// sign).
fn served(
    addr: SocketAddr,
    sni: &str,
    root: &[u8],
    alpn: &[&[u8]],
) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let cfg = tls_client(root, alpn);
    let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(cfg, name).map_err(|e| e.to_string())?;
    let mut tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("no certificate")?
        .to_vec();
    Ok((leaf, conn.alpn_protocol().map(|p| p.to_vec())))
}

/// Waits for `addr` to serve a certificate for NAME that chains to
/// pebble's root; returns its DER.
fn wait_served(sy: &Switchyard, p: &Pebble, addr: SocketAddr, within: Duration) -> Vec<u8> {
    let root = p.root();
    let mut last = String::new();
    let mut leaf = None;
    eventually(within, || match served(addr, NAME, &root, &[b"http/1.1"]) {
        Ok((l, _)) => {
            leaf = Some(l);
            true
        }
        Err(e) => {
            last = e;
            false
        }
    });
    leaf.unwrap_or_else(|| {
        panic!(
            "no certificate for {NAME} on {addr} within {within:?} (last: {last})\nswitchyard:\n{}\npebble:\n{}",
            sy.log(),
            p.log()
        )
    })
}

type TlsConn = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn keep_alive(addr: SocketAddr, root: &[u8]) -> TlsConn {
    let cfg = tls_client(root, &[b"http/1.1"]);
    let conn = rustls::ClientConnection::new(cfg, ServerName::try_from(NAME).expect("name"))
        .expect("client");
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    rustls::StreamOwned::new(conn, tcp)
}

/// Sends one GET on `s`; whether a 200 response head comes back (what
/// is left of an earlier response's body is skipped).
fn answers(s: &mut TlsConn) -> bool {
    if write!(s, "GET / HTTP/1.1\r\nHost: {NAME}\r\n\r\n").is_err() {
        return false;
    }
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(12).any(|w| w == b"HTTP/1.1 200") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(k) => seen.extend_from_slice(&buf[..k]),
        }
    }
    true
}

/// Whether the next renewal of a 90-day certificate is planned around day
/// 60 (pebble's renewal window, RFC 9773).
fn planned_around_day_60(sy: &Switchyard) -> bool {
    metric(sy, "switchyard_acme_next_renewal_seconds")
        .is_some_and(|s| s > 58.0 * 86_400.0 && s < 62.0 * 86_400.0)
}

fn metric(sy: &Switchyard, name: &str) -> Option<f64> {
    let text = sy.admin_get("/metrics");
    let prefix = format!("{name}{{certificate=\"{NAME}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// A loopback address with two free ports: plain HTTP and TLS.
fn addrs() -> (SocketAddr, SocketAddr) {
    let plain = free_addr();
    let tls = SocketAddr::new(plain.ip(), port_on(plain.ip()));
    (plain, tls)
}

fn config(plain: SocketAddr, tls: SocketAddr, origin: &Origin, acme: &str) -> String {
    // The plain vserver sends everything to HTTPS: HTTP-01 must still be
    // answered, before the policy.
    format!(
        "[[vserver]]\nname = \"plain\"\nlisten = [\"{plain}\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/\" }}\naction = {{ redirect_https = true, https_port = {} }}\n\
         [[vserver]]\nname = \"secure\"\nlisten = [\"{tls}\"]\ndefault_pool = \"p\"\n\
         [vserver.tls]\nalpn = [\"h2\", \"http/1.1\"]\n{acme}\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        tls.port(),
        origin.addr
    )
}

/// HTTP-01: the first certificate is ordered and served, the challenge
/// is answered although every plain-HTTP request is redirected, and a
/// restart serves the stored certificate without a new order.
#[test]
fn http01_issues_and_a_restart_reuses_the_stored_certificate() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let cfg = config(plain, tls, &origin, &p.acme_table("http-01", &state));
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    let leaf = wait_served(&sy, &p, tls, Duration::from_secs(60));
    assert_eq!(p.orders(), 1, "one order:\n{}", p.log());
    assert!(sy
        .log()
        .contains(&format!("answering the http-01 challenge for {NAME}")));
    // The policy still redirects everything else.
    let r = get(plain, "/.well-known/acme-challenge/not-a-token");
    assert_eq!(r.status, 301);
    assert!(state.join(NAME).join("cert.pem").is_file());
    let expiry = metric(&sy, "switchyard_acme_certificate_expiry_seconds").expect("gauge");
    let life = NINETY_DAYS as f64;
    assert!(expiry > life - 600.0 && expiry <= life, "expiry {expiry}");
    assert_eq!(
        metric(&sy, "switchyard_acme_certificates_issued_total"),
        Some(1.0)
    );
    // The admin API lists it with its ACME state.
    let row = acme_row(&sy);
    assert_eq!(row["vserver"], "secure");
    assert_eq!(row["names"], serde_json::json!([NAME]));
    assert_eq!(row["acme"]["issued"], true);
    assert_eq!(row["acme"]["challenge"], "http-01");
    assert!(row["days_left"].as_i64().is_some_and(|d| d >= 89), "{row}");
    assert!(row["acme"]["last_error"].is_null(), "{row}");
    // A reload keeps the certificate and its task: no new order.
    let (ok, out) = sy.reload_with(&cfg);
    assert!(ok, "{out}");
    let (after_reload, _) = served(tls, NAME, &p.root(), &[b"http/1.1"]).expect("served");
    assert_eq!(after_reload, leaf);
    // An ordinary client still gets its own protocol.
    let (_, alpn) = served(tls, NAME, &p.root(), &[b"h2", b"http/1.1"]).expect("handshake");
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    drop(sy);

    let sy = Switchyard::start(&cfg, &[plain, tls]);
    let again = wait_served(&sy, &p, tls, Duration::from_secs(5));
    assert_eq!(
        again, leaf,
        "the stored certificate is served after a restart"
    );
    // Its renewal is planned (for day 60): no order was needed.
    assert!(
        eventually(Duration::from_secs(10), || planned_around_day_60(&sy)),
        "{}",
        sy.log()
    );
    assert_eq!(p.orders(), 1, "no new order after a restart:\n{}", p.log());
}

/// TLS-ALPN-01: the CA's validation handshake (ALPN acme-tls/1) is
/// answered in the TLS listener, and the certificate then served.
#[test]
fn tls_alpn01_issues_in_the_tls_listener() {
    let (plain, tls) = addrs();
    // HTTP-01 is pointed at a closed port: only TLS-ALPN-01 can succeed.
    let closed = port_on(plain.ip());
    let Some(p) = Pebble::start(plain.ip(), closed, tls.port(), NINETY_DAYS) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let cfg = config(plain, tls, &origin, &p.acme_table("tls-alpn-01", &state));
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    wait_served(&sy, &p, tls, Duration::from_secs(60));
    assert_eq!(p.orders(), 1);
    assert!(
        sy.log()
            .contains(&format!("answering the tls-alpn-01 challenge for {NAME}")),
        "{}",
        sy.log()
    );
    // With no order in progress, acme-tls/1 gets no certificate at all.
    assert!(served(tls, NAME, &p.root(), &[b"acme-tls/1"]).is_err());
}

/// A certificate of 30 s is renewed at two thirds of its life and the new
/// one served to new handshakes, without a reload.
#[test]
fn a_short_lived_certificate_is_renewed_without_a_reload() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), 30) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let cfg = config(plain, tls, &origin, &p.acme_table("http-01", &state));
    let sy = Switchyard::start(
        &format!("[timeouts]\nclient_idle = \"2m\"\n{cfg}"),
        &[plain, tls],
    );
    wait_served(&sy, &p, tls, Duration::from_secs(60));
    let root = p.root();
    // A connection opened before the renewal, asked again after it. (The
    // CA's renewal window for so short a certificate is its whole life:
    // the renewal may come at any point of it.)
    let mut before = keep_alive(tls, &root);
    assert!(answers(&mut before));
    let first = before
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .expect("certificate");
    let mut renewed = None;
    eventually(Duration::from_secs(40), || {
        match served(tls, NAME, &root, &[b"http/1.1"]) {
            Ok((l, _)) if l != first => {
                renewed = Some(l);
                true
            }
            _ => false,
        }
    });
    assert!(
        renewed.is_some(),
        "no renewal within 40 s:\n{}\n{}",
        sy.log(),
        p.log()
    );
    // The swap left the open connection alone: it still answers, with
    // the certificate it began with.
    assert!(answers(&mut before), "the older connection still answers");
    assert_eq!(
        before
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec()),
        Some(first)
    );
    assert!(p.orders() >= 2);
    assert!(metric(&sy, "switchyard_acme_certificates_issued_total").unwrap_or(0.0) >= 2.0);
    assert_eq!(
        metric(&sy, "switchyard_acme_renewal_failures_total"),
        Some(0.0)
    );
    assert!(!sy.log().contains("reload"), "{}", sy.log());
}

/// The CA is down when the renewal comes: the failure is counted and
/// logged, and the current certificate keeps serving.
#[test]
fn a_ca_down_at_renewal_leaves_the_current_certificate_serving() {
    let (plain, tls) = addrs();
    let Some(mut p) = Pebble::start(plain.ip(), plain.port(), tls.port(), 30) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let cfg = config(plain, tls, &origin, &p.acme_table("http-01", &state));
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    wait_served(&sy, &p, tls, Duration::from_secs(60));
    let root = p.root();
    p.stop();
    // (Taken once the CA is down: a renewal may have come before.)
    let (first, _) = served(tls, NAME, &root, &[b"http/1.1"]).expect("served");
    assert!(
        eventually(Duration::from_secs(40), || metric(
            &sy,
            "switchyard_acme_renewal_failures_total"
        )
        .unwrap_or(0.0)
            >= 1.0),
        "no failed renewal counted:\n{}",
        sy.log()
    );
    // (The counter moves just before the line is written.)
    assert!(
        eventually(Duration::from_secs(5), || sy
            .log()
            .contains("the current certificate keeps serving")),
        "{}",
        sy.log()
    );
    let (leaf, _) = served(tls, NAME, &root, &[b"http/1.1"]).expect("still served");
    assert_eq!(leaf, first);
    let expiry = metric(&sy, "switchyard_acme_certificate_expiry_seconds").expect("gauge");
    assert!(expiry > 0.0 && expiry < 30.0, "expiry {expiry}");
}

/// `switchyard check` refuses what cannot work, at the value's line.
#[test]
fn check_refuses_bad_acme_settings() {
    let dir = temp_dir("acme-check");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[vserver]]\nname = \"s\"\nlisten = [\"127.0.0.1:8443\"]\ndefault_pool = \"p\"\n\
         [vserver.tls.acme]\n\
         names = [\"*.example.com\", \"10.0.0.1\"]\n\
         directory = \"http://ca.example/dir\"\n\
         contact = [\"ops@example.com\"]\n\
         challenge = \"dns-02\"\n\
         key_type = \"ed25519\"\n\
         state_dir = \"state\"\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n",
    )
    .expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("path")]);
    let all = format!("{out}{err}");
    assert_ne!(code, Some(0), "{all}");
    for (line, what) in [
        (6, "a wildcard needs the DNS-01 challenge"),
        (6, "an IP address is not a DNS name"),
        (7, "is not an https:// URL"),
        (8, "is not a mailto: URL"),
        (9, "unknown challenge \"dns-02\""),
        (10, "unknown key_type \"ed25519\""),
    ] {
        assert!(
            all.lines()
                .any(|l| l.contains(&format!(":{line}:")) && l.contains(what)),
            "line {line}: {what:?} in:\n{all}"
        );
    }
    // DNS-01 without its hook; resolvers that are not addresses; a hook
    // with another challenge.
    std::fs::write(
        &path,
        "[[vserver]]\nname = \"s\"\nlisten = [\"127.0.0.1:8443\"]\ndefault_pool = \"p\"\n\
         [vserver.tls.acme]\n\
         names = [\"*.example.com\"]\n\
         directory = \"https://ca.example/dir\"\n\
         challenge = \"dns-01\"\n\
         dns_resolvers = [\"ns1.example.com\"]\n\
         state_dir = \"state\"\n\
         [[vserver]]\nname = \"t\"\nlisten = [\"127.0.0.1:8444\"]\ndefault_pool = \"p\"\n\
         [vserver.tls.acme]\n\
         names = [\"example.org\"]\n\
         directory = \"https://ca.example/dir\"\n\
         dns_hook = \"/bin/true\"\n\
         state_dir = \"state\"\n\
         [vserver.tls.acme.on_demand]\n\
         ask = \"https://ask.example/\"\n\
         allow = [\"bad name\"]\n\
         per_hour = 0\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n",
    )
    .expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("path")]);
    let all = format!("{out}{err}");
    assert_ne!(code, Some(0), "{all}");
    for (line, what) in [
        (8, "challenge \"dns-01\" needs a dns_hook"),
        (
            9,
            "dns_resolvers entry \"ns1.example.com\" is not an IP address",
        ),
        (18, "dns_hook is only used with challenge = \"dns-01\""),
        (
            21,
            "on_demand ask \"https://ask.example/\" is not an http:// URL",
        ),
        (22, "on_demand allow \"bad name\" is neither a DNS name"),
        (23, "on_demand per_hour is 0"),
    ] {
        assert!(
            all.lines()
                .any(|l| l.contains(&format!(":{line}:")) && l.contains(what)),
            "line {line}: {what:?} in:\n{all}"
        );
    }
    assert!(
        !all.contains("wildcard"),
        "a wildcard is fine with DNS-01:\n{all}"
    );
    // No certificate source at all.
    std::fs::write(
        &path,
        "[[vserver]]\nname = \"s\"\nlisten = [\"127.0.0.1:8443\"]\ndefault_pool = \"p\"\n[vserver.tls]\nversions = [\"1.3\"]\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n",
    )
    .expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("path")]);
    assert_ne!(code, Some(0));
    assert!(
        format!("{out}{err}").contains("no certificate"),
        "{out}{err}"
    );
}

/// A DNS-01 hook for pebble-challtestsrv: puts the TXT record up and
/// takes it down through its management API, and logs each call.
fn dns_hook(p: &Pebble, dir: &Path, fail_with: Option<&str>) -> PathBuf {
    let path = dir.join("dns-hook.sh");
    let body = match fail_with {
        Some(msg) => format!("echo \"$@\" >> {log}\necho '{msg}' >&2\nexit 3\n", log = dir.join("hook.log").display()),
        None => format!(
            "echo \"$@\" >> {log}\n\
             case \"$1\" in\n\
             present) curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\",\\\"value\\\":\\\"$3\\\"}}\" http://{m}/set-txt ;;\n\
             cleanup) curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\"}}\" http://{m}/clear-txt ;;\n\
             *) echo \"unknown action $1\" >&2; exit 2 ;;\n\
             esac\n",
            log = dir.join("hook.log").display(),
            m = p.dns_management
        ),
    };
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("hook");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// DNS-01 through the operator's hook: a wildcard and its base name in one
/// certificate, each TXT value put up by the hook, believed once the
/// configured resolver answers it, then taken down. Neither port 80 nor
/// the TLS-ALPN-01 port is reachable for the CA.
#[test]
fn dns01_issues_a_wildcard_through_the_hook() {
    let (plain, tls) = addrs();
    let closed = port_on(plain.ip());
    let Some(p) = Pebble::start(plain.ip(), closed, closed, NINETY_DAYS) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let hook = dns_hook(&p, &state, None);
    let table = p.acme_table("dns-01", &state).replace(
        &format!("names = [\"{NAME}\"]"),
        &format!("names = [\"*.{NAME}\", \"{NAME}\"]"),
    ) + &format!(
        "dns_hook = \"{}\"\ndns_resolvers = [\"{}\"]\ndns_wait = \"20s\"\n",
        hook.display(),
        p.dns_addr
    );
    let cfg = config(plain, tls, &origin, &table);
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    let root = p.root();
    let sub = format!("www.{NAME}");
    let mut got = None;
    eventually(Duration::from_secs(60), || {
        got = served(tls, &sub, &root, &[b"http/1.1"]).ok();
        got.is_some()
    });
    assert!(
        got.is_some(),
        "no certificate for {sub}:\n{}\n{}",
        sy.log(),
        p.log()
    );
    // The base name is in the same certificate.
    let (base, _) = served(tls, NAME, &root, &[b"http/1.1"]).expect("base name");
    assert_eq!(Some(base), got.map(|g| g.0));
    assert_eq!(p.orders(), 1);
    let log = sy.log();
    for n in [format!("*.{NAME}"), NAME.to_string()] {
        assert!(
            log.contains(&format!("answering the dns-01 challenge for {n}")),
            "{log}"
        );
    }
    // Two present calls, then two cleanups, each with the record name.
    let calls = std::fs::read_to_string(state.join("hook.log")).expect("hook log");
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    for (i, c) in calls.iter().enumerate() {
        let action = if i < 2 { "present" } else { "cleanup" };
        assert!(
            c.starts_with(&format!("{action} _acme-challenge.{NAME}. ")),
            "{calls:?}"
        );
    }
    // A name two labels down is not covered by the wildcard.
    assert!(served(tls, &format!("a.b.{NAME}"), &root, &[b"http/1.1"]).is_err());
    assert!(state.join(format!("_.{NAME}")).join("cert.pem").is_file());
}

/// A hook that fails: the order fails with the hook's exit status and
/// stderr in the log, and is counted.
#[test]
fn dns01_hook_failure_is_reported_with_its_stderr() {
    let (plain, tls) = addrs();
    let closed = port_on(plain.ip());
    let Some(p) = Pebble::start(plain.ip(), closed, closed, NINETY_DAYS) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let hook = dns_hook(&p, &state, Some("zone example.com not found"));
    let table = p.acme_table("dns-01", &state)
        + &format!("dns_hook = \"{}\"\ndns_wait = \"1s\"\n", hook.display());
    let cfg = config(plain, tls, &origin, &table);
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    assert!(
        eventually(Duration::from_secs(30), || metric(
            &sy,
            "switchyard_acme_renewal_failures_total"
        )
        .unwrap_or(0.0)
            >= 1.0),
        "{}",
        sy.log()
    );
    // (The counter moves just before the line is written.)
    let line = format!(
        "present _acme-challenge.{NAME}.: exit status: 3; its stderr: zone example.com not found"
    );
    assert!(
        eventually(Duration::from_secs(5), || sy.log().contains(&line)),
        "{}",
        sy.log()
    );
    let log = sy.log();
    assert!(
        log.contains("handshakes for its names are still refused"),
        "{log}"
    );
    let row = acme_row(&sy);
    assert_eq!(row["days_left"], -1, "{row}");
    assert_eq!(row["acme"]["issued"], false, "{row}");
    assert!(
        row["acme"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("zone example.com not found")),
        "{row}"
    );
}

/// The ACME certificate's row of `/api/v1/certificates`.
fn acme_row(sy: &Switchyard) -> serde_json::Value {
    let all: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/api/v1/certificates")).expect("certificates JSON");
    all.as_array()
        .and_then(|a| a.iter().find(|c| !c["acme"].is_null()))
        .cloned()
        .unwrap_or_else(|| panic!("no ACME certificate in {all}"))
}

/// ACME Renewal Information (RFC 9773): the CA moves the renewal window
/// of a 90-day certificate into the past (pebble's /set-renewal-info);
/// the next check renews it, as a replacement of the old one, and a
/// client that validates against pebble's root gets the new certificate
/// without a reload.
#[test]
fn ari_window_in_the_past_triggers_a_renewal() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let table = p.acme_table("http-01", &state) + "renewal_check = \"1s\"\n";
    let cfg = config(plain, tls, &origin, &table);
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    let first = wait_served(&sy, &p, tls, Duration::from_secs(60));
    // Planned from the CA's window: day 60 give or take a day, not now.
    assert!(
        eventually(Duration::from_secs(10), || planned_around_day_60(&sy)),
        "{}",
        sy.log()
    );
    assert_eq!(p.orders(), 1, "{}", sy.log());
    let pem = std::fs::read(state.join(NAME).join("cert.pem")).expect("cert");
    p.set_renewal_info(
        &pem,
        r#"{"suggestedWindow":{"start":"2020-01-01T00:00:00Z","end":"2020-01-02T00:00:00Z"}}"#,
    );
    let root = p.root();
    let mut renewed = None;
    eventually(Duration::from_secs(30), || {
        match served(tls, NAME, &root, &[b"http/1.1"]) {
            Ok((l, _)) if l != first => {
                renewed = Some(l);
                true
            }
            _ => false,
        }
    });
    assert!(
        renewed.is_some(),
        "no renewal after the window moved:\n{}\n{}",
        sy.log(),
        p.log()
    );
    assert_eq!(p.orders(), 2);
    assert!(
        p.log().contains("ARI: order"),
        "a replacement order:\n{}",
        p.log()
    );
    assert!(
        sy.log().contains("the CA's renewal window is"),
        "{}",
        sy.log()
    );
    assert!(!sy.log().contains("reload"), "{}", sy.log());
    // The new certificate's window is around day 60 again: no third order.
    assert!(
        eventually(Duration::from_secs(10), || planned_around_day_60(&sy)),
        "{}",
        sy.log()
    );
    assert_eq!(p.orders(), 2, "{}", sy.log());
}

/// A TLS-terminating proxy in front of pebble that answers the first
/// `refuse` new-order requests with 429 and `Retry-After: retry_after`,
/// and passes everything else through. Records when each new-order
/// request came.
struct Throttler {
    addr: SocketAddr,
    new_orders: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
}

impl Throttler {
    fn start(p: &Pebble, refuse: usize, retry_after: u64) -> Throttler {
        let certs: Vec<_> = CertificateDer::pem_file_iter(&p.api_cert)
            .expect("cert")
            .map(|c| c.expect("cert"))
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&p.api_key).expect("key");
        let server = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config"),
        );
        let upstream = tls_client(&std::fs::read(&p.api_ca).expect("ca"), &[]);
        let pebble = p.listen;
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let new_orders = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = new_orders.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(tcp) = c else { continue };
                let (server, upstream, seen) = (server.clone(), upstream.clone(), seen.clone());
                std::thread::spawn(move || {
                    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
                    let conn = rustls::ServerConnection::new(server).expect("server");
                    let mut s = rustls::StreamOwned::new(conn, tcp);
                    let Some(req) = read_request(&mut s) else {
                        return;
                    };
                    if req.starts_with(b"POST /order-plz ") {
                        let mut seen = seen.lock().unwrap();
                        seen.push(std::time::Instant::now());
                        if seen.len() <= refuse {
                            let body = r#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many new orders, slow down","status":429}"#;
                            let _ = write!(
                                s,
                                "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nRetry-After: {retry_after}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            s.conn.send_close_notify();
                            let _ = s.flush();
                            return;
                        }
                    }
                    let name = ServerName::try_from("localhost").expect("name");
                    let up = rustls::ClientConnection::new(upstream, name).expect("client");
                    let Ok(tcp) = TcpStream::connect(pebble) else {
                        return;
                    };
                    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
                    let mut up = rustls::StreamOwned::new(up, tcp);
                    if up.write_all(&req).is_err() {
                        return;
                    }
                    let mut resp = Vec::new();
                    let _ = up.read_to_end(&mut resp);
                    let _ = s.write_all(&resp);
                    s.conn.send_close_notify();
                    let _ = s.flush();
                });
            }
        });
        Throttler { addr, new_orders }
    }
}

/// One HTTP/1.1 request (head and Content-Length body), as sent.
fn read_request(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                return Some(raw);
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
}

/// The CA answers the first new order with 429 and `Retry-After: 8`: the
/// order is tried again no sooner than 8 s later (longer than the
/// backoff's first step), succeeds, and the 429 is in /metrics.
#[test]
fn a_429_with_retry_after_is_honoured_then_the_order_succeeds() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    let proxy = Throttler::start(&p, 1, 8);
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let table = p
        .acme_table("http-01", &state)
        .replace(&p.directory, &format!("https://{}/dir", proxy.addr));
    let cfg = config(plain, tls, &origin, &table);
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    wait_served(&sy, &p, tls, Duration::from_secs(60));
    let times = proxy.new_orders.lock().unwrap().clone();
    assert_eq!(times.len(), 2, "{}", sy.log());
    let gap = times[1] - times[0];
    assert!(
        gap >= Duration::from_secs(8),
        "retried after {gap:?}, before the Retry-After"
    );
    assert_eq!(p.orders(), 1);
    assert_eq!(metric(&sy, "switchyard_acme_ca_throttled_total"), Some(1.0));
    assert_eq!(
        metric(&sy, "switchyard_acme_renewal_failures_total"),
        Some(1.0)
    );
    let log = sy.log();
    assert!(log.contains("the CA asked for"), "{log}");
    assert!(
        log.contains("rateLimited") || log.contains("slow down"),
        "{log}"
    );
}

/// A one-member etcd on loopback (Debian's etcd-server), or None (with a
/// message) when it is not installed.
struct Etcd {
    child: Child,
    client: SocketAddr,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    fn start(dir: &Path) -> Option<Etcd> {
        let have = |c: &str| {
            Command::new("sh")
                .args(["-c", &format!("command -v {c}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !have("etcd") || !have("etcdctl") {
            let why = "etcd and etcdctl are not installed (scripts/test.sh installs etcd-server and etcd-client)";
            println!("SKIPPED {}: {why}", test_name());
            eprintln!("SKIPPED {}: {why}", test_name());
            return None;
        }
        let lo: IpAddr = [127, 0, 0, 1].into();
        let client = SocketAddr::new(lo, port_on(lo));
        let peer = SocketAddr::new(lo, port_on(lo));
        let log = std::fs::File::create(dir.join("etcd.log")).expect("log");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("etcd-data"))
            .args(["--name", "e1"])
            .args(["--listen-client-urls", &format!("http://{client}")])
            .args(["--advertise-client-urls", &format!("http://{client}")])
            .args(["--listen-peer-urls", &format!("http://{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://{peer}")])
            .args(["--initial-cluster", &format!("e1=http://{peer}")])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let e = Etcd { child, client };
        assert!(
            eventually(Duration::from_secs(20), || e.ctl(&["endpoint", "health"]).0),
            "etcd did not start: {}",
            std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default()
        );
        Some(e)
    }

    fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=http://{}", self.client))
            .args(args)
            .output()
            .expect("etcdctl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

/// Publishes `text` as the cluster's configuration under `prefix` and
/// starts three nodes (each with the cluster key) serving `listen`
/// (SO_REUSEPORT: the kernel spreads connections, the CA's checks among
/// them, over the three nodes, as a load balancer in front would).
fn acme_cluster(
    etcd: &Etcd,
    dir: &Path,
    prefix: &str,
    text: &str,
    listen: &[SocketAddr],
) -> Vec<Switchyard> {
    let envelope = serde_json::json!({"cluster": prefix, "config": text}).to_string();
    let (ok, out) = etcd.ctl(&["put", &format!("{prefix}/config"), &envelope]);
    assert!(ok, "{out}");
    let key = dir.join("acme.key");
    std::fs::write(&key, format!("{}\n", "5a".repeat(32))).expect("key");
    (0..3)
        .map(|i| Switchyard::start(&node_file(etcd, dir, prefix, i), listen))
        .collect()
}

/// Node `i`'s own file: its last known good configuration kept in
/// `dir/nI`, so that a restart finds it.
fn node_file(etcd: &Etcd, dir: &Path, prefix: &str, i: usize) -> String {
    let state = dir.join(format!("n{i}"));
    std::fs::create_dir_all(&state).expect("state");
    format!(
        "[global]\nworkers = 1\n[cluster]\nendpoints = [\"http://{}\"]\nprefix = \"{prefix}\"\nnode = \"n{i}\"\n\
         status_ttl = \"3s\"\nwatch_idle = \"2s\"\nstartup_wait = \"10s\"\nacme_key_file = \"{}\"\nstate_dir = \"{}\"\n",
        etcd.client,
        dir.join("acme.key").display(),
        state.display()
    )
}

/// Every node has the certificate installed (its expiry gauge).
fn all_serve(nodes: &[Switchyard]) -> bool {
    nodes
        .iter()
        .all(|n| metric(n, "switchyard_acme_certificate_expiry_seconds").is_some_and(|e| e > 0.0))
}

/// Three nodes on one etcd: exactly one order is placed at the CA (one
/// node holds the lock), every node serves the certificate (validated
/// against pebble's root), the CA's HTTP-01 check is answered by
/// whichever node the kernel hands it to, and etcd holds the key only
/// sealed.
#[test]
fn three_cluster_nodes_place_one_order_and_all_serve_it() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    let dir = temp_dir("acme-cluster");
    let Some(etcd) = Etcd::start(&dir) else {
        return;
    };
    let origin = Origin::start("o");
    let cfg = config(
        plain,
        tls,
        &origin,
        &p.acme_table("http-01", &dir.join("state")),
    );
    let nodes = acme_cluster(&etcd, &dir, "/sy/acme", &cfg, &[plain, tls]);
    let logs = || {
        nodes
            .iter()
            .map(|n| n.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        eventually(Duration::from_secs(60), || all_serve(&nodes)),
        "not every node serves the certificate:\n{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 1, "one order for three nodes:\n{}", logs());
    let ordering: Vec<usize> = (0..3)
        .filter(|&i| nodes[i].log().contains("answering the http-01 challenge"))
        .collect();
    assert_eq!(ordering.len(), 1, "one node ordered:\n{}", logs());
    for (i, n) in nodes.iter().enumerate() {
        // (The gauge moves just before the line is written.)
        if i != ordering[0] {
            assert!(
                eventually(Duration::from_secs(5), || n
                    .log()
                    .contains("serving the certificate published in the cluster")),
                "{}",
                n.log()
            );
        }
    }
    // Whichever node a client reaches, it gets the one certificate.
    let root = p.root();
    let mut leaves = std::collections::HashSet::new();
    for _ in 0..9 {
        let (leaf, _) = served(tls, NAME, &root, &[b"http/1.1"]).expect("served");
        leaves.insert(leaf);
    }
    assert_eq!(leaves.len(), 1);
    let (ok, stored) = etcd.ctl(&["get", "--prefix", "/sy/acme/acme/certs/"]);
    assert!(ok, "{stored}");
    assert!(stored.contains("BEGIN CERTIFICATE"), "{stored}");
    assert!(
        !stored.contains("PRIVATE KEY"),
        "the key is sealed in etcd:\n{stored}"
    );
    // The lock and the answers went with the order.
    let (_, locks) = etcd.ctl(&["get", "--prefix", "/sy/acme/acme/locks/", "--keys-only"]);
    assert!(locks.trim().is_empty(), "{locks}");

    // etcd goes away and a node restarts alone: it runs its last known
    // good configuration and serves the last certificate it had.
    let leaf = leaves.into_iter().next().expect("leaf");
    let file = node_file(&etcd, &dir, "/sy/acme", 0);
    drop(etcd);
    drop(nodes);
    let alone = Switchyard::start(&file, &[plain, tls]);
    let (again, _) = served(tls, NAME, &root, &[b"http/1.1"])
        .unwrap_or_else(|e| panic!("{e}:\n{}", alone.log()));
    assert_eq!(again, leaf);
    assert!(alone.log().contains("last known good"), "{}", alone.log());
}

/// The node holding the order lock dies mid-order (its DNS-01 hook hangs,
/// then the node is killed): its lease expires, another node takes the
/// lock, orders, and every surviving node serves the result.
#[test]
fn another_node_finishes_the_order_of_a_node_killed_mid_order() {
    let (plain, tls) = addrs();
    let closed = port_on(plain.ip());
    let Some(p) = Pebble::start(plain.ip(), closed, closed, NINETY_DAYS) else {
        return;
    };
    let dir = temp_dir("acme-cluster-kill");
    let Some(etcd) = Etcd::start(&dir) else {
        return;
    };
    // The first hook run notes its node (the hook's parent) and hangs
    // while that node lives; later runs put the record up.
    let hook = dir.join("hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n\
             if [ \"$1\" = present ] && mkdir {mark} 2>/dev/null; then\n\
               echo $PPID > {holder}\n\
               while kill -0 $PPID 2>/dev/null; do sleep 0.2; done\n\
               exit 1\n\
             fi\n\
             echo \"$PPID $@\" >> {log}\n\
             case \"$1\" in\n\
             present) curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\",\\\"value\\\":\\\"$3\\\"}}\" http://{m}/set-txt ;;\n\
             cleanup) curl -sf -X POST -d \"{{\\\"host\\\":\\\"$2\\\"}}\" http://{m}/clear-txt ;;\n\
             esac\n",
            mark = dir.join("hung").display(),
            holder = dir.join("holder").display(),
            log = dir.join("hook.log").display(),
            m = p.dns_management
        ),
    )
    .expect("hook");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let origin = Origin::start("o");
    let table = p.acme_table("dns-01", &dir.join("state"))
        + &format!(
            "dns_hook = \"{}\"\ndns_resolvers = [\"{}\"]\ndns_wait = \"20s\"\n",
            hook.display(),
            p.dns_addr
        );
    let cfg = config(plain, tls, &origin, &table);
    let mut nodes = acme_cluster(&etcd, &dir, "/sy/acme", &cfg, &[plain, tls]);
    let holder = dir.join("holder");
    let mut pid = 0;
    assert!(
        eventually(Duration::from_secs(30), || {
            pid = std::fs::read_to_string(&holder)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            pid != 0
        }),
        "no hook run"
    );
    let dead = nodes
        .iter()
        .position(|n| n.pid() == pid)
        .expect("the hook's parent is a node");
    assert_eq!(p.orders(), 1);
    nodes[dead].signal("KILL");
    let _ = nodes[dead].wait_exit(Duration::from_secs(5));
    let survivors: Vec<Switchyard> = nodes
        .drain(..)
        .enumerate()
        .filter(|(i, _)| *i != dead)
        .map(|(_, n)| n)
        .collect();
    let logs = || {
        survivors
            .iter()
            .map(|n| n.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        eventually(Duration::from_secs(60), || all_serve(&survivors)),
        "the order was not finished by another node:\n{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 2, "{}", logs());
    let calls = std::fs::read_to_string(dir.join("hook.log")).expect("hook log");
    assert!(
        calls.lines().all(|l| !l.starts_with(&format!("{pid} "))),
        "the dead node ran no more hooks: {calls}"
    );
    let root = p.root();
    served(tls, NAME, &root, &[b"http/1.1"]).expect("served");
}

/// On-demand issuance: a handshake for a name no certificate covers
/// orders one only if the allow list admits it and the ask URL answers
/// 200, and no more than `per_hour` new names an hour; the first
/// handshake fails, a later one gets the certificate.
#[test]
fn on_demand_issues_only_what_the_rule_admits_within_the_hourly_cap() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    // The ask service: 200 for a., b. and c.shop.example.com, 403 else.
    let ask = TcpListener::bind("127.0.0.1:0").expect("bind");
    let ask_addr = ask.local_addr().expect("addr");
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let asked2 = asked.clone();
    std::thread::spawn(move || {
        for c in ask.incoming() {
            let Ok(mut c) = c else { continue };
            c.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let Some(req) = read_request(&mut c) else {
                continue;
            };
            let line = String::from_utf8_lossy(&req)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            let domain = line
                .split("domain=")
                .nth(1)
                .and_then(|d| d.split_whitespace().next())
                .unwrap_or("")
                .to_string();
            let ok = ["a", "b", "c"]
                .iter()
                .any(|l| domain == format!("{l}.{NAME}"));
            asked2.lock().unwrap().push(domain);
            let status = if ok { "200 OK" } else { "403 Forbidden" };
            let _ = write!(
                c,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let table = p.acme_table("http-01", &state)
        + &format!(
            "[vserver.tls.acme.on_demand]\nallow = [\"*.{NAME}\"]\nask = \"http://{ask_addr}/check\"\nper_hour = 2\n"
        );
    let cfg = config(plain, tls, &origin, &table);
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    wait_served(&sy, &p, tls, Duration::from_secs(60));
    let root = p.root();
    let issued_for = |name: &str| {
        let mut leaf = None;
        eventually(Duration::from_secs(60), || {
            leaf = served(tls, name, &root, &[b"http/1.1"]).ok();
            leaf.is_some()
        });
        leaf.unwrap_or_else(|| panic!("no certificate for {name}:\n{}\n{}", sy.log(), p.log()))
    };
    let a = issued_for(&format!("a.{NAME}"));
    // Refused by the ask URL: never ordered.
    let evil = format!("evil.{NAME}");
    assert!(served(tls, &evil, &root, &[b"http/1.1"]).is_err());
    assert!(
        eventually(Duration::from_secs(10), || sy
            .log()
            .contains(&format!("refused {evil}"))),
        "{}",
        sy.log()
    );
    // Not on the list: not even asked.
    assert!(served(tls, "www.example.org", &root, &[b"http/1.1"]).is_err());
    let b = issued_for(&format!("b.{NAME}"));
    assert_ne!(a, b);
    // The hour's two names are used: c waits, though the URL would admit it.
    let c = format!("c.{NAME}");
    assert!(served(tls, &c, &root, &[b"http/1.1"]).is_err());
    assert!(
        eventually(Duration::from_secs(10), || sy.log().contains(&format!(
            "{c} and any other new name wait for the next hour"
        ))),
        "{}",
        sy.log()
    );
    assert!(served(tls, &c, &root, &[b"http/1.1"]).is_err());
    assert_eq!(p.orders(), 3, "the base name, a. and b.:\n{}", sy.log());
    let asked = asked.lock().unwrap().clone();
    assert!(
        !asked.iter().any(|d| d.contains("example.org")),
        "{asked:?}"
    );
    assert!(!asked.contains(&c), "{asked:?}");
}

/// A cluster renews once: pebble moves the certificate's renewal window
/// into the past; one node (whichever takes the lock) orders the renewal
/// as a replacement of the certificate (the account is the cluster's,
/// shared through etcd, though each node keeps its own state_dir), and
/// every node serves the new certificate.
#[test]
fn a_cluster_renews_once_when_the_ca_says_so() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    let dir = temp_dir("acme-cluster-ari");
    let Some(etcd) = Etcd::start(&dir) else {
        return;
    };
    let origin = Origin::start("o");
    // A relative state_dir: each node's own, beside its file.
    let table = p.acme_table("http-01", Path::new("acme-state")).replace(
        "state_dir = \"acme-state\"",
        "state_dir = \"acme-state\"\nrenewal_check = \"1s\"",
    );
    let cfg = config(plain, tls, &origin, &table);
    let nodes = acme_cluster(&etcd, &dir, "/sy/ari", &cfg, &[plain, tls]);
    let logs = || {
        nodes
            .iter()
            .map(|n| n.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        eventually(Duration::from_secs(60), || all_serve(&nodes)),
        "{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 1, "{}", logs());
    assert_eq!(
        p.log().matches("POST /sign-me-up").count(),
        1,
        "one account:\n{}",
        p.log()
    );
    let root = p.root();
    let (first, _) = served(tls, NAME, &root, &[b"http/1.1"]).expect("served");
    let (ok, out) = etcd.ctl(&[
        "get",
        &format!("/sy/ari/acme/certs/{NAME}"),
        "--print-value-only",
    ]);
    assert!(ok, "{out}");
    let published: serde_json::Value = serde_json::from_str(out.trim()).expect("published JSON");
    p.set_renewal_info(
        published["chain"].as_str().expect("chain").as_bytes(),
        r#"{"suggestedWindow":{"start":"2020-01-01T00:00:00Z","end":"2020-01-02T00:00:00Z"}}"#,
    );
    // Every node gets the renewed certificate, from the one renewal.
    assert!(
        eventually(Duration::from_secs(30), || (0..9).all(|_| served(
            tls,
            NAME,
            &root,
            &[b"http/1.1"]
        )
        .is_ok_and(|(l, _)| l != first))
            && nodes
                .iter()
                .all(
                    |n| metric(n, "switchyard_acme_renewal_failures_total") == Some(0.0)
                )
            && nodes.iter().all(planned_around_day_60)),
        "{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 2, "one renewal for the cluster:\n{}", logs());
    // Each node keeps the shared account and the certificate in its own
    // state_dir.
    for n in &nodes {
        let state = n.dir.join("acme-state");
        assert_eq!(account_files(&state).len(), 1, "{}", state.display());
        assert!(
            state.join(NAME).join("cert.pem").is_file(),
            "{}",
            state.display()
        );
    }
    assert!(
        p.log().contains("ARI: order"),
        "a replacement order:\n{}",
        p.log()
    );
    assert_eq!(
        p.log().matches("POST /sign-me-up").count(),
        1,
        "one account:\n{}",
        p.log()
    );
}

/// The account files in `state_dir` (one per CA directory).
fn account_files(state_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(state_dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("account-") && n.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An HMAC key as pebble's own EAB test configuration has it (base64url).
const EAB_KEY: &str = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";

/// External account binding: pebble requires it (as ZeroSSL does). A
/// wrong HMAC key is refused at account creation, which the log and the
/// API's last_error say, while the rest of the configuration serves;
/// after a reload with the right key (from a file) the certificate is
/// issued.
#[test]
fn external_account_binding_is_sent_and_a_wrong_key_is_reported() {
    let (plain, tls) = addrs();
    let extra = serde_json::json!({
        "externalAccountBindingRequired": true,
        "externalAccountMACKeys": { "kid-1": EAB_KEY },
    });
    let Some(p) = Pebble::start_with(plain.ip(), plain.port(), tls.port(), NINETY_DAYS, extra)
    else {
        return;
    };
    let origin = Origin::start("o");
    let state = temp_dir("acme-state");
    let wrong = p.acme_table("http-01", &state)
        + "eab_kid = \"kid-1\"\neab_hmac_key = \"b10lLJs8l1GPIzsLP0s6pMt8O0XVGnfTaCeROxQM0BIt2XrJMDHJZBM5NuQmQJQH\"\n";
    let cfg = config(plain, tls, &origin, &wrong);
    let sy = Switchyard::start(&cfg, &[plain, tls]);
    let mut err = String::new();
    assert!(
        eventually(Duration::from_secs(30), || {
            err = acme_row(&sy)["acme"]["last_error"]
                .as_str()
                .unwrap_or("")
                .to_string();
            !err.is_empty()
        }),
        "no error reported:\n{}",
        sy.log()
    );
    assert!(
        err.contains("external account binding (eab_kid \"kid-1\")"),
        "{err}"
    );
    assert!(err.contains("new account at"), "{err}");
    // (last_error is set just before the line reaches the log.)
    assert!(
        sy.wait_for_log("order failed: new account at"),
        "{}",
        sy.log()
    );
    assert_eq!(p.orders(), 0, "no order without an account");
    assert!(account_files(&state).is_empty(), "no account was kept");
    // Nothing else broke: the plain vserver answers, the admin API too.
    assert_eq!(get(plain, "/").status, 301);
    assert!(served(tls, NAME, &p.root(), &[b"http/1.1"]).is_err());

    // The right key, from a file (as the CA shows it once, with a newline).
    let key_file = state.join("eab.key");
    std::fs::write(&key_file, format!("{EAB_KEY}\n")).expect("key file");
    let right = p.acme_table("http-01", &state)
        + &format!(
            "eab_kid = \"kid-1\"\neab_hmac_key_file = \"{}\"\n",
            key_file.display()
        );
    let (ok, out) = sy.reload_with(&config(plain, tls, &origin, &right));
    assert!(ok, "{out}");
    wait_served(&sy, &p, tls, Duration::from_secs(60));
    assert_eq!(p.orders(), 1, "{}", p.log());
    assert_eq!(account_files(&state).len(), 1, "{}", state.display());
    // The new table's row (the old one's task may not have stopped yet).
    let issued: serde_json::Value =
        serde_json::from_str(&sy.admin_get("/api/v1/certificates")).expect("certificates JSON");
    let row = issued
        .as_array()
        .and_then(|a| a.iter().find(|c| c["acme"]["issued"] == true))
        .cloned()
        .unwrap_or_else(|| panic!("no issued ACME certificate in {issued}"));
    assert!(row["acme"]["last_error"].is_null(), "{row}");
}

/// `switchyard check`: the binding's key ID and key come both or
/// neither, the key is base64url, its file readable.
#[test]
fn check_refuses_bad_eab_settings() {
    let dir = temp_dir("acme-check-eab");
    let path = dir.join("bad.toml");
    let vs = |i: usize, eab: &str| {
        format!(
            "[[vserver]]\nname = \"s{i}\"\nlisten = [\"127.0.0.1:{}\"]\ndefault_pool = \"p\"\n\
             [vserver.tls.acme]\nnames = [\"s{i}.example.com\"]\ndirectory = \"https://ca.example/dir\"\n\
             state_dir = \"state\"\n{eab}",
            8440 + i
        )
    };
    let text = vs(0, "eab_kid = \"kid-1\"\n")
        + &vs(1, "eab_hmac_key = \"abc\"\n")
        + &vs(2, "eab_kid = \"kid-1\"\neab_hmac_key = \"not base64!\"\n")
        + &vs(
            3,
            "eab_kid = \"kid-1\"\neab_hmac_key_file = \"missing.key\"\n",
        )
        + "[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n";
    std::fs::write(&path, text).expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("path")]);
    let all = format!("{out}{err}");
    assert_ne!(code, Some(0), "{all}");
    for (line, what) in [
        (
            9,
            "eab_kid needs its key: eab_hmac_key or eab_hmac_key_file",
        ),
        (18, "eab_hmac_key needs eab_kid"),
        (28, "the HMAC key is empty or not base64url"),
        (38, "eab_hmac_key_file"),
    ] {
        assert!(
            all.lines()
                .any(|l| l.contains(&format!(":{line}:")) && l.contains(what)),
            "line {line}: {what:?} in:\n{all}"
        );
    }
    assert!(all.contains("missing.key"), "{all}");
}

/// "7F000001:1F90"-style address of /proc/net/tcp.
fn proc_net_addr(a: SocketAddr) -> Option<String> {
    match a.ip() {
        IpAddr::V4(ip) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(ip.octets()),
            a.port()
        )),
        IpAddr::V6(_) => None,
    }
}

/// Which of `pids` accepted the connection from `client` to `server`
/// (the socket's inode in /proc/net/tcp, found among each process's
/// descriptors); None until one has accepted it.
fn accepted_by(server: SocketAddr, client: SocketAddr, pids: &[i32]) -> Option<i32> {
    let (s, c) = (proc_net_addr(server)?, proc_net_addr(client)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = table.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 9 && f[1] == s && f[2] == c && f[9] != "0").then(|| f[9].to_string())
    })?;
    let want = format!("socket:[{inode}]");
    pids.iter().copied().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten().any(|e| {
                    std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy() == want)
                })
            })
            .unwrap_or(false)
    })
}

/// TLS-ALPN-01 in a cluster, answered by a node that did not order: the
/// CA's validation connections go through a relay that hands each one
/// to a node other than the one holding the order (the kernel picks
/// among the three listeners; a connection that lands on the ordering
/// node is closed and another opened). The certificate is issued from
/// one order and every node serves it.
#[test]
fn tls_alpn01_in_a_cluster_is_answered_by_a_node_that_did_not_order() {
    let (plain, tls) = addrs();
    let closed = port_on(plain.ip());
    let relay = TcpListener::bind((plain.ip(), 0)).expect("bind relay");
    let relay_port = relay.local_addr().expect("addr").port();
    let Some(p) = Pebble::start(plain.ip(), closed, relay_port, NINETY_DAYS) else {
        return;
    };
    let dir = temp_dir("acme-cluster-alpn");
    let Some(etcd) = Etcd::start(&dir) else {
        return;
    };
    let origin = Origin::start("o");
    let cfg = config(
        plain,
        tls,
        &origin,
        &p.acme_table("tls-alpn-01", Path::new("acme-state")),
    );
    let nodes = acme_cluster(&etcd, &dir, "/sy/alpn", &cfg, &[plain, tls]);
    let who: Vec<(i32, PathBuf)> = nodes
        .iter()
        .map(|n| (n.pid(), n.dir.join("stderr.log")))
        .collect();
    // (pid that answered) for each validation connection relayed.
    let relayed = Arc::new(std::sync::Mutex::new(Vec::<i32>::new()));
    let relayed2 = relayed.clone();
    std::thread::spawn(move || {
        let pids: Vec<i32> = who.iter().map(|w| w.0).collect();
        // The ordering node logs its answers before the CA is told.
        let ordering = || {
            who.iter()
                .find(|(_, log)| {
                    std::fs::read_to_string(log)
                        .is_ok_and(|l| l.contains("answering the tls-alpn-01 challenge"))
                })
                .map(|w| w.0)
        };
        for ca in relay.incoming() {
            let Ok(ca) = ca else { continue };
            let mut orderer = None;
            eventually(Duration::from_secs(10), || {
                orderer = ordering();
                orderer.is_some()
            });
            let Some(orderer) = orderer else { continue };
            let mut chosen = None;
            for _ in 0..60 {
                let Ok(up) = TcpStream::connect(tls) else {
                    continue;
                };
                let Ok(local) = up.local_addr() else { continue };
                let mut owner = None;
                eventually(Duration::from_secs(2), || {
                    owner = accepted_by(tls, local, &pids);
                    owner.is_some()
                });
                match owner {
                    Some(pid) if pid != orderer => {
                        chosen = Some((up, pid));
                        break;
                    }
                    _ => continue,
                }
            }
            let Some((up, pid)) = chosen else { continue };
            relayed2.lock().unwrap().push(pid);
            let (Ok(mut ca2), Ok(mut up2)) = (ca.try_clone(), up.try_clone()) else {
                continue;
            };
            let (mut ca, mut up) = (ca, up);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut ca2, &mut up2);
                let _ = up2.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up, &mut ca);
                let _ = ca.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    let logs = || {
        nodes
            .iter()
            .map(|n| n.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        eventually(Duration::from_secs(60), || all_serve(&nodes)),
        "not every node serves the certificate:\n{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 1, "one order for three nodes:\n{}", logs());
    let ordering: Vec<usize> = (0..3)
        .filter(|&i| {
            nodes[i]
                .log()
                .contains("answering the tls-alpn-01 challenge")
        })
        .collect();
    assert_eq!(ordering.len(), 1, "one node ordered:\n{}", logs());
    let answered = relayed.lock().unwrap().clone();
    assert!(
        !answered.is_empty(),
        "no validation was relayed:\n{}",
        p.log()
    );
    assert!(
        !answered.contains(&nodes[ordering[0]].pid()),
        "{answered:?} includes the ordering node"
    );
    // Whichever node a client reaches, it gets the one certificate.
    let root = p.root();
    let mut leaves = std::collections::HashSet::new();
    for _ in 0..9 {
        let (leaf, _) = served(tls, NAME, &root, &[b"http/1.1"]).expect("served");
        leaves.insert(leaf);
    }
    assert_eq!(leaves.len(), 1);
    for (i, n) in nodes.iter().enumerate() {
        if i != ordering[0] {
            assert!(
                eventually(Duration::from_secs(5), || n
                    .log()
                    .contains("serving the certificate published in the cluster")),
                "{}",
                n.log()
            );
        }
    }
}

/// On-demand names in a cluster: a name every node is asked for (each
/// admits it on its own) is ordered once, by the node holding its lock,
/// and every node then serves the one certificate.
#[test]
fn an_on_demand_name_seen_by_every_cluster_node_is_ordered_once() {
    let (plain, tls) = addrs();
    let Some(p) = Pebble::start(plain.ip(), plain.port(), tls.port(), NINETY_DAYS) else {
        return;
    };
    let dir = temp_dir("acme-cluster-on-demand");
    let Some(etcd) = Etcd::start(&dir) else {
        return;
    };
    let origin = Origin::start("o");
    let table = p.acme_table("http-01", Path::new("acme-state"))
        + &format!("[vserver.tls.acme.on_demand]\nallow = [\"*.{NAME}\"]\n");
    let cfg = config(plain, tls, &origin, &table);
    let nodes = acme_cluster(&etcd, &dir, "/sy/od", &cfg, &[plain, tls]);
    let logs = || {
        nodes
            .iter()
            .map(|n| n.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        eventually(Duration::from_secs(60), || all_serve(&nodes)),
        "{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 1, "{}", logs());
    let root = p.root();
    let name = format!("a.{NAME}");
    let admitted = format!("acme on-demand: {name} admitted");
    // Handshakes for the name (spread over the nodes by the kernel) until
    // every node has admitted it and every handshake gets a certificate.
    let mut leaves = std::collections::HashSet::new();
    assert!(
        eventually(Duration::from_secs(60), || {
            leaves.clear();
            let ok = (0..9).all(|_| match served(tls, &name, &root, &[b"http/1.1"]) {
                Ok((leaf, _)) => {
                    leaves.insert(leaf);
                    true
                }
                Err(_) => false,
            });
            ok && nodes.iter().all(|n| n.log().contains(&admitted))
        }),
        "not every node admitted and serves {name}:\n{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(leaves.len(), 1, "one certificate for {name}");
    assert_eq!(
        p.orders(),
        2,
        "one order for {name} though three nodes admitted it:\n{}",
        logs()
    );
    let ordered = nodes
        .iter()
        .filter(|n| {
            n.log()
                .contains(&format!("answering the http-01 challenge for {name}"))
        })
        .count();
    assert_eq!(ordered, 1, "{}", logs());
}

/// External account binding in a cluster: the one account the nodes
/// share is made once, bound with the key (pebble refuses an account
/// without it), and every node orders and serves with it.
#[test]
fn a_cluster_makes_its_one_account_with_the_binding() {
    let (plain, tls) = addrs();
    let extra = serde_json::json!({
        "externalAccountBindingRequired": true,
        "externalAccountMACKeys": { "kid-1": EAB_KEY },
    });
    let Some(p) = Pebble::start_with(plain.ip(), plain.port(), tls.port(), NINETY_DAYS, extra)
    else {
        return;
    };
    let dir = temp_dir("acme-cluster-eab");
    let Some(etcd) = Etcd::start(&dir) else {
        return;
    };
    let origin = Origin::start("o");
    let table = p.acme_table("http-01", Path::new("acme-state"))
        + &format!("eab_kid = \"kid-1\"\neab_hmac_key = \"{EAB_KEY}\"\n");
    let cfg = config(plain, tls, &origin, &table);
    let nodes = acme_cluster(&etcd, &dir, "/sy/eab", &cfg, &[plain, tls]);
    let logs = || {
        nodes
            .iter()
            .map(|n| n.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        eventually(Duration::from_secs(60), || all_serve(&nodes)),
        "{}\n{}",
        logs(),
        p.log()
    );
    assert_eq!(p.orders(), 1, "{}", logs());
    assert_eq!(
        p.log().matches("POST /sign-me-up").count(),
        1,
        "one account:\n{}",
        p.log()
    );
    let created: Vec<&Switchyard> = nodes
        .iter()
        .filter(|n| n.log().contains("created with external account binding"))
        .collect();
    assert_eq!(created.len(), 1, "{}", logs());
    let (ok, accounts) = etcd.ctl(&["get", "--prefix", "/sy/eab/acme/accounts/", "--keys-only"]);
    assert!(
        ok && accounts.lines().filter(|l| !l.trim().is_empty()).count() == 1,
        "{accounts}"
    );
}
