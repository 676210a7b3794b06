//! Upstream TLS end to end: Switchyard re-encrypts to members that speak
//! TLS (`TlsOrigin`, a rustls server). Verification against a CA (by IP
//! address or by `sni`), verify = false, SNI, connection reuse and stale
//! pooled connections, session resumption across reloads, mutual TLS, HTTP
//! health checks over TLS, and `check` errors. Certificates are made at
//! test time with the openssl command (scripts/test.sh installs it).

mod common;
use common::*;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

// ------------------------------------------------------------- certificates

// Pki and openssl come from common/pki.rs.

// ------------------------------------------------------------------ helpers

/// One vserver "web" on `listen` over pool "p" with `pool_extra` (which may
/// hold a `[pool.tls]` table) and `members`.
fn config(listen: SocketAddr, members: &[SocketAddr], pool_extra: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\n[[pool]]\nname = \"p\"\n{pool_extra}\n"
    );
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

fn tls_table(lines: &str) -> String {
    format!("[pool.tls]\n{lines}\n")
}

fn ca_line(ca: &Path) -> String {
    format!("ca = \"{}\"", ca.display())
}

fn counter(sy: &Switchyard, member: SocketAddr, name: &str) -> u64 {
    sy.member_stats("p", member)[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {}", sy.member_stats("p", member)))
}

fn pool_counter(sy: &Switchyard, name: &str) -> u64 {
    sy.pool_stats("p")[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {}", sy.pool_stats("p")))
}

fn der(pem: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(pem)
        .expect("pem")
        .next()
        .expect("a certificate")
        .expect("certificate")
        .to_vec()
}

// -------------------------------------------------------------------- tests

#[test]
fn verified_against_the_ca_by_member_ip_proxies_to_the_member() {
    let pki = Pki::new("ca-a");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-a", &cert, &key, None);
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table(&ca_line(&pki.ca()))), &[l]);
    let r = get(l, "/hello");
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), sy.log());
    assert_eq!(r.body_text(), "tls-a\n");
    assert_eq!(o.requests(), 1);
    let hs = o.handshakes();
    assert_eq!(hs.len(), 1, "{hs:?}");
    // No sni configured: verified against the IP SAN, and no SNI sent
    // (there is no SNI for an address).
    assert_eq!(hs[0].sni, None, "{hs:?}");
    assert_eq!(counter(&sy, o.addr, "tls_handshake_failures"), 0);
    // The text rendering names the new counter too.
    assert!(
        sy.admin_get("/stats").contains("tls handshake failures 0"),
        "{}",
        sy.admin_get("/stats")
    );
}

#[test]
fn wrong_ca_is_a_502_counted_and_logged_with_the_member_and_reason() {
    let pki = Pki::new("ca-b");
    let other = Pki::new("ca-b-other");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-b", &cert, &key, None);
    let l = free_addr();
    let sy = Switchyard::start(
        &config(l, &[o.addr], &tls_table(&ca_line(&other.ca()))),
        &[l],
    );
    let r = get(l, "/");
    assert_eq!(r.status, 502, "{}", r.body_text());
    assert_eq!(o.requests(), 0);
    assert!(o.handshakes().is_empty());
    assert_eq!(counter(&sy, o.addr, "tls_handshake_failures"), 1);
    assert_eq!(counter(&sy, o.addr, "connect_failures"), 1);
    let want = format!(
        "vserver web: member p/{}: connect failed: TLS handshake failed: certificate verification failed: UnknownIssuer",
        o.addr
    );
    assert!(
        eventually(Duration::from_secs(2), || sy.log().contains(&want)),
        "want {want}\nlog:\n{}",
        sy.log()
    );
    // Prometheus carries the counter with the member's label.
    let prom = sy.admin_get("/metrics");
    let line = format!(
        "switchyard_member_tls_handshake_failures_total{{pool=\"p\",member=\"{}\"}} 1",
        o.addr
    );
    assert!(prom.contains(&line), "want {line} in\n{prom}");
}

#[test]
fn verify_false_accepts_a_self_signed_member_and_verification_is_on_by_default() {
    let pki = Pki::new("ca-c");
    let (cert, key) = pki.self_signed("selfsigned");
    let o = TlsOrigin::start("tls-c", &cert, &key, None);

    // Default: verify = true against the system bundle, which does not
    // know this certificate.
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table("")), &[l]);
    let r = get(l, "/");
    assert_eq!(r.status, 502, "{}", r.body_text());
    assert_eq!(counter(&sy, o.addr, "tls_handshake_failures"), 1);
    drop(sy);

    let l = free_addr();
    let text = config(l, &[o.addr], &tls_table("verify = false"));
    let sy = Switchyard::start(&text, &[l]);
    let r = get(l, "/");
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), sy.log());
    assert_eq!(r.body_text(), "tls-c\n");
    assert_eq!(o.handshakes().len(), 1);
    // The warning is logged at load ...
    assert!(
        sy.wait_for_log("warning: pool \"p\" tls: verify = false"),
        "{}",
        sy.log()
    );
    // ... and shown by check, which still succeeds, with its position.
    let f = pki.dir.join("verify-false.toml");
    std::fs::write(&f, &text).expect("write");
    let (code, _, err) = run_cli(&["check", "-c", &f.display().to_string()]);
    assert_eq!(code, Some(0), "{err}");
    let (line, col) = position(&text, "false");
    let want = format!(
        "{}:{line}:{col}: warning: pool \"p\" tls: verify = false",
        f.display()
    );
    assert!(err.contains(&want), "want {want}\ngot {err}");
}

#[test]
fn sni_is_sent_and_verified_and_absent_without_sni() {
    let pki = Pki::new("ca-d");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-d", &cert, &key, None);

    let l = free_addr();
    let tls = tls_table(&format!("{}\nsni = \"api.internal\"", ca_line(&pki.ca())));
    let sy = Switchyard::start(&config(l, &[o.addr], &tls), &[l]);
    let r = get(l, "/");
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), sy.log());
    let hs = o.handshakes();
    assert_eq!(hs.len(), 1);
    assert_eq!(hs[0].sni.as_deref(), Some("api.internal"));
    drop(sy);

    // A name the certificate does not hold: verification fails by name.
    let l = free_addr();
    let tls = tls_table(&format!("{}\nsni = \"other.internal\"", ca_line(&pki.ca())));
    let sy = Switchyard::start(&config(l, &[o.addr], &tls), &[l]);
    let r = get(l, "/");
    assert_eq!(r.status, 502, "{}", r.body_text());
    let want = "certificate verification failed: certificate not valid for name \"other.internal\"";
    assert!(
        eventually(Duration::from_secs(2), || sy.log().contains(want)),
        "{}",
        sy.log()
    );
    drop(sy);

    // No sni: nothing sent, the member's IP address is what is verified.
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table(&ca_line(&pki.ca()))), &[l]);
    let r = get(l, "/");
    assert_eq!(r.status, 200, "{}", r.body_text());
    let hs = o.handshakes();
    assert_eq!(hs.len(), 2, "{hs:?}");
    assert_eq!(hs[1].sni, None);
    drop(sy);

    // ... so a certificate without the member's address in an IP SAN
    // fails verification when no sni is configured.
    let (cert, key) = pki.issue_cn("dns-only", "api.internal", "DNS:api.internal");
    let o = TlsOrigin::start("tls-d2", &cert, &key, None);
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table(&ca_line(&pki.ca()))), &[l]);
    assert_eq!(get(l, "/").status, 502);
    let want = "certificate verification failed: certificate not valid for name \"127.0.0.1\"";
    assert!(
        eventually(Duration::from_secs(2), || sy.log().contains(want)),
        "{}",
        sy.log()
    );
}

/// `san_dns` / `san_uri`: the member's certificate is verified against
/// these names (any one) instead of the `sni` it is sent, still chained to
/// the CA: a service identity (a SPIFFE URI) or another DNS name. A
/// certificate that carries none of them, or is signed by another CA, is
/// refused; check refuses a URI without a scheme and a DNS name that is
/// not one.
#[test]
fn subject_alt_names_are_verified_instead_of_the_sni() {
    let pki = Pki::new("ca-san");
    let (cert, key) = pki.issue_cn(
        "spiffe",
        "svc",
        "DNS:svc.internal,URI:spiffe://cluster.local/ns/app/sa/api",
    );
    let o = TlsOrigin::start("tls-san", &cert, &key, None);
    let ca = ca_line(&pki.ca());
    let cases = [
        ("san_uri = [\"spiffe://cluster.local/ns/app/sa/api\"]", 200),
        (
            "san_uri = [\"spiffe://cluster.local/ns/app/sa/other\"]",
            502,
        ),
        ("san_dns = [\"svc.internal\"]", 200),
        ("san_dns = [\"other.internal\"]", 502),
        (
            "san_dns = [\"other.internal\"]\nsan_uri = [\"spiffe://cluster.local/ns/app/sa/api\"]",
            200,
        ),
    ];
    for (sans, want) in cases {
        let l = free_addr();
        // The name sent is not one the certificate holds: only the SANs
        // listed decide.
        let tls = tls_table(&format!("{ca}\nsni = \"api.example\"\n{sans}"));
        let sy = Switchyard::start(&config(l, &[o.addr], &tls), &[l]);
        let r = get(l, "/");
        assert_eq!(r.status, want, "{sans}: {}\n{}", r.body_text(), sy.log());
        assert_eq!(
            o.handshakes().last().and_then(|h| h.sni.clone()).as_deref(),
            Some("api.example")
        );
    }
    // The right URI on a certificate of another CA: refused.
    let other = Pki::new("ca-san-other");
    let l = free_addr();
    let tls = tls_table(&format!(
        "{}\nsan_uri = [\"spiffe://cluster.local/ns/app/sa/api\"]",
        ca_line(&other.ca())
    ));
    let sy = Switchyard::start(&config(l, &[o.addr], &tls), &[l]);
    assert_eq!(get(l, "/").status, 502, "{}", sy.log());
    drop(sy);
    for (bad, why) in [
        (
            "san_uri = [\"no-scheme\"]",
            "san_uri \"no-scheme\" is not a URI",
        ),
        (
            "san_dns = [\"not a name\"]",
            "san_dns \"not a name\" is not a DNS name",
        ),
        ("san_dns = []", "san_dns and san_uri are empty"),
    ] {
        let dir = temp_dir("san-bad");
        let path = dir.join("bad.toml");
        let l = free_addr();
        std::fs::write(
            &path,
            config(l, &[o.addr], &tls_table(&format!("{ca}\n{bad}"))),
        )
        .expect("write");
        let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("utf-8")]);
        assert_ne!(code, Some(0), "{bad}");
        assert!(format!("{out}{err}").contains(why), "{bad}: {out}{err}");
    }
}

#[test]
fn keep_alive_requests_reuse_one_tls_connection() {
    let pki = Pki::new("ca-e");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-e", &cert, &key, None);
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table(&ca_line(&pki.ca()))), &[l]);
    let mut c = Client::connect(l);
    for i in 0..20 {
        let r = c.get(&format!("/r{i}"));
        assert_eq!(r.status, 200, "{i}: {}", r.body_text());
        assert_eq!(r.body_text(), "tls-e\n");
    }
    assert_eq!(o.requests(), 20);
    assert_eq!(o.connections.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(o.handshakes().len(), 1);
    assert_eq!(counter(&sy, o.addr, "connections_reused"), 19);
    assert_eq!(counter(&sy, o.addr, "server_connections_total"), 1);
}

#[test]
fn a_pooled_tls_connection_the_member_closed_is_not_reused() {
    let pki = Pki::new("ca-f");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-f", &cert, &key, None);
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table(&ca_line(&pki.ca()))), &[l]);
    let conns = || o.connections.load(std::sync::atomic::Ordering::Relaxed);
    let mut c = Client::connect(l);
    assert_eq!(c.get("/1").status, 200);
    assert_eq!(conns(), 1);

    // close_notify, then FIN.
    o.set_idle_close(Duration::from_millis(200), true);
    std::thread::sleep(Duration::from_millis(700));
    c.send(b"GET /2 HTTP/1.1\r\nHost: test\r\n\r\n");
    let r = c
        .read_response(false)
        .unwrap_or_else(|| panic!("no response\n{}", sy.log()));
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), sy.log());
    assert_eq!(conns(), 2);

    // A bare FIN, no close_notify.
    o.set_idle_close(Duration::from_millis(200), false);
    std::thread::sleep(Duration::from_millis(700));
    c.send(b"GET /3 HTTP/1.1\r\nHost: test\r\n\r\n");
    let r = c
        .read_response(false)
        .unwrap_or_else(|| panic!("no response\n{}", sy.log()));
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), sy.log());
    assert_eq!(conns(), 3);

    // Neither stale connection was tried: no reset, no retry.
    assert_eq!(counter(&sy, o.addr, "resets"), 0, "{}", sy.log());
    assert_eq!(pool_counter(&sy, "retries"), 0, "{}", sy.log());
    assert_eq!(counter(&sy, o.addr, "connections_reused"), 0);
    assert_eq!(o.requests(), 3);
    // The reconnects resumed the TLS session (client session cache).
    let hs = o.handshakes();
    assert_eq!(hs.len(), 3, "{hs:?}");
    assert!(!hs[0].resumed && hs[1].resumed, "{hs:?}");
}

#[test]
fn sessions_resume_and_survive_a_reload_that_keeps_the_tls_settings() {
    let pki = Pki::new("ca-r");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-r", &cert, &key, None);
    let l = free_addr();
    // No pooling: every request makes a new connection and handshake.
    let same = config(
        l,
        &[o.addr],
        &format!("idle_per_member = 0\n{}", tls_table(&ca_line(&pki.ca()))),
    );
    let sy = Switchyard::start(&same, &[l]);
    let resumed = |n: usize| -> Vec<bool> {
        let hs = o.handshakes();
        assert_eq!(hs.len(), n, "{hs:?}");
        hs.iter().map(|h| h.resumed).collect()
    };
    assert_eq!(get(l, "/1").status, 200);
    assert_eq!(get(l, "/2").status, 200);
    assert_eq!(resumed(2), [false, true]);

    // Same TLS settings: the session cache is handed over.
    let (ok, out) = sy.reload_with(&same);
    assert!(ok, "{out}");
    assert_eq!(get(l, "/3").status, 200);
    assert_eq!(resumed(3), [false, true, true]);

    // Changed TLS settings: a new config and an empty cache.
    let changed = config(
        l,
        &[o.addr],
        &format!(
            "idle_per_member = 0\n{}",
            tls_table(&format!("{}\nsni = \"api.internal\"", ca_line(&pki.ca())))
        ),
    );
    let (ok, out) = sy.reload_with(&changed);
    assert!(ok, "{out}");
    assert_eq!(get(l, "/4").status, 200);
    assert_eq!(resumed(4), [false, true, true, false]);
    assert_eq!(o.handshakes()[3].sni.as_deref(), Some("api.internal"));
}

#[test]
fn mutual_tls_presents_the_configured_client_certificate() {
    let pki = Pki::new("ca-h");
    let clients = Pki::new("ca-h-clients");
    let (cert, key) = pki.member("m");
    let (ccert, ckey) = clients.issue_cn("switchyard", "switchyard", "");
    let o = TlsOrigin::start("tls-h", &cert, &key, Some(&clients.ca()));

    // Without a client certificate the member refuses. In TLS 1.3 its
    // alert comes after our side finished the handshake (so the request
    // fails, not the connect); in TLS 1.2 the handshake itself fails.
    let l = free_addr();
    let sy = Switchyard::start(&config(l, &[o.addr], &tls_table(&ca_line(&pki.ca()))), &[l]);
    assert_eq!(get(l, "/").status, 502);
    drop(sy);
    let l = free_addr();
    let tls = tls_table(&format!(
        "{}
versions = [\"1.2\"]",
        ca_line(&pki.ca())
    ));
    let sy = Switchyard::start(&config(l, &[o.addr], &tls), &[l]);
    assert_eq!(get(l, "/").status, 502);
    assert_eq!(counter(&sy, o.addr, "tls_handshake_failures"), 1);
    assert!(
        eventually(Duration::from_secs(2), || sy
            .log()
            .contains("TLS handshake failed: the member sent the alert")),
        "{}",
        sy.log()
    );
    drop(sy);

    let l = free_addr();
    let tls = tls_table(&format!(
        "{}\ncert = \"{}\"\nkey = \"{}\"",
        ca_line(&pki.ca()),
        ccert.display(),
        ckey.display()
    ));
    let sy = Switchyard::start(&config(l, &[o.addr], &tls), &[l]);
    let r = get(l, "/");
    assert_eq!(r.status, 200, "{}\n{}", r.body_text(), sy.log());
    let hs = o.handshakes();
    assert_eq!(hs.len(), 1, "{hs:?}");
    assert_eq!(hs[0].client_cert.as_deref(), Some(der(&ccert).as_slice()));
}

#[test]
fn http_health_checks_run_over_tls_and_tcp_checks_stay_tcp() {
    let pki = Pki::new("ca-hc");
    let other = Pki::new("ca-hc-other");
    let (cert, key) = pki.member("m");
    let o = TlsOrigin::start("tls-hc", &cert, &key, None);
    o.health_status
        .store(503, std::sync::atomic::Ordering::Relaxed);
    let l = free_addr();
    let health = |kind: &str| {
        format!(
            "[pool.health]\ntype = \"{kind}\"\n{}interval = \"100ms\"\ntimeout = \"1s\"\nrise = 1\nfall = 1\n",
            if kind == "http" { "path = \"/health\"\n" } else { "" }
        )
    };
    let pool = |name: &str, kind: &str, ca: &Path| {
        format!(
            "[[pool]]\nname = \"{name}\"\n{}{}[[pool.member]]\naddress = \"{}\"\n\n",
            health(kind),
            tls_table(&ca_line(ca)),
            o.addr
        )
    };
    let text = format!(
        "[global]\nworkers = 1\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"good\"\n\n{}{}{}",
        pool("good", "http", &pki.ca()),
        pool("bad", "http", &other.ca()),
        pool("tcp", "tcp", &other.ca()),
    );
    let sy = Switchyard::start(&text, &[l]);
    let state = |p: &str| sy.member_stats(p, o.addr)["state"].clone();
    // 503 over TLS: down. The wrong CA: down.
    assert!(
        eventually(Duration::from_secs(5), || state("good") == "down"
            && state("bad") == "down"),
        "{}\n{}",
        sy.stats(),
        sy.log()
    );
    assert!(o.health_requests() > 0);
    // 200 over TLS: up again; the wrong CA stays down.
    o.health_status
        .store(200, std::sync::atomic::Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(5), || state("good") == "up"),
        "{}\n{}",
        sy.stats(),
        sy.log()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(state("bad"), "down");
    assert_eq!(state("tcp"), "up", "a TCP check does no handshake");
    let want = format!(
        "member bad/{} is DOWN: TLS handshake: certificate verification failed: UnknownIssuer",
        o.addr
    );
    assert!(sy.wait_for_log(&want), "want {want}\n{}", sy.log());
    assert_eq!(get(l, "/").status, 200);
}

// ------------------------------------------------------------------- check

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

#[test]
fn check_locates_pool_tls_mistakes() {
    let pki = Pki::new("ca-g");
    let (_cert, _key) = pki.member("m");
    let (_ccert, _ckey) = pki.issue_cn("client", "client", "");
    let (_other, other_key) = pki.issue_cn("other", "other", "");
    let dir = &pki.dir;
    std::fs::write(dir.join("empty.pem"), "").expect("write");
    std::fs::write(
        dir.join("garbage.pem"),
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let l = free_addr();
    let m: SocketAddr = "127.0.0.1:9".parse().expect("addr");
    let f = dir.join("check.toml");
    let check = |text: &str| {
        std::fs::write(&f, text).expect("write");
        run_cli(&["check", "-c", &f.display().to_string()])
    };

    // Relative paths resolve against the configuration file's directory.
    let ok = config(
        l,
        &[m],
        &tls_table("ca = \"ca-g.pem\"\nsni = \"api.internal\"\ncert = \"client.pem\"\nkey = \"client.key\"\nversions = [\"1.3\"]"),
    );
    let (code, out, err) = check(&ok);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("OK"), "{out}");
    assert!(err.is_empty(), "{err}");

    let cases: Vec<(String, &str, &str)> = vec![
        ("ca = \"missing.pem\"".into(), "\"missing.pem\"", "pool \"p\" tls ca: cannot read"),
        ("ca = \"empty.pem\"".into(), "\"empty.pem\"", "holds no PEM certificate"),
        ("ca = \"garbage.pem\"".into(), "\"garbage.pem\"", "is not valid PEM"),
        (
            format!("ca = \"ca-g.pem\"\ncert = \"client.pem\"\nkey = \"{}\"", other_key.display()),
            "key = \"",
            "does not match certificate \"client.pem\"",
        ),
        ("ca = \"ca-g.pem\"\ncert = \"client.pem\"".into(), "\"client.pem\"", "cert needs key"),
        ("ca = \"ca-g.pem\"\nsni = \"not a name!\"".into(), "\"not a name!\"", "sni \"not a name!\" is not a valid DNS name"),
        ("verify = false\nca = \"ca-g.pem\"".into(), "\"ca-g.pem\"", "ca has no effect with verify = false"),
        ("ca = \"ca-g.pem\"\nversions = [\"1.1\"]".into(), "\"1.1\"", "unknown TLS version \"1.1\"; allowed: \"1.2\", \"1.3\""),
        ("ca = \"ca-g.pem\"\nverfy = true".into(), "verfy", "unknown field `verfy`, expected one of `verify`, `ca`, `sni`, `san_dns`, `san_uri`, `cert`, `key`, `versions`"),
    ];
    for (tls, needle, msg) in cases {
        let text = config(l, &[m], &tls_table(&tls));
        let (code, _, err) = check(&text);
        assert_eq!(code, Some(1), "{tls}: {err}");
        let (line, col) = position(&text, needle);
        // For `key = "`, the error points at the value's opening quote.
        let col = if needle.ends_with('"') && needle.len() > 1 && needle.starts_with("key") {
            col + needle.len() - 1
        } else {
            col
        };
        let prefix = format!("{}:{line}:{col}: ", f.display());
        assert!(err.starts_with(&prefix), "{tls}\nwant {prefix}\ngot  {err}");
        assert!(err.contains(msg), "{tls}\nwant {msg}\ngot  {err}");
    }
}
