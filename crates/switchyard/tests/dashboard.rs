//! The live dashboard in a real browser: Debian's headless Chromium driven by
//! playwright-core (tests/browser/dashboard.js) against the real binary,
//! under load. The page must load with no console error, sign in with a
//! token, show requests/s that change from sample to sample, and drain a
//! member from a button; the API then shows the member draining, and drained
//! once the load stops, with no request failed meanwhile.
//!
//! scripts/test.sh installs chromium and runs `npm ci` in tests/browser;
//! without them this test says why it skips. `UPDATE_SCREENSHOTS=1` writes
//! the screenshots into docs/screenshots/ instead of a temp dir.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ADMIN_TOKEN: &str = "dash-admin-token-0123456789abcdef";
const READ_TOKEN: &str = "dash-read-token-0123456789abcdef";
/// The load runs at most this long after the browser starts, whatever
/// happens to the browser.
const LOAD_MAX: Duration = Duration::from_secs(60);
/// And sends at most this many requests (and as many more a second of
/// warm-up).
const LOAD_MAX_REQUESTS: u64 = 15_000;
/// With UPDATE_SCREENSHOTS=1, the load runs this long before the browser
/// opens, so the committed screenshot's charts show a minute of traffic.
const SCREENSHOT_WARMUP: Duration = Duration::from_secs(50);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What the browser test needs, or why it cannot run here.
fn browser_tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = PathBuf::from(std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into()));
    if !chromium.exists() {
        return Err(format!(
            "{} not found (Debian package chromium; scripts/test.sh installs it)",
            chromium.display()
        ));
    }
    let node_ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !node_ok {
        return Err("node not found (scripts/test.sh installs nodejs)".into());
    }
    let dir = repo_root().join("tests/browser");
    if !dir.join("node_modules/playwright-core").exists() {
        return Err(format!(
            "{}/node_modules/playwright-core missing: run `npm ci` there (scripts/test.sh does)",
            dir.display()
        ));
    }
    Ok((chromium, dir))
}

/// One admin API request with the token; (status, JSON body).
fn api(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let r = request(
        admin,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let v = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, v)
}

fn member_path(pool: &str, m: SocketAddr) -> String {
    format!(
        "/api/v1/pools/{pool}/members/{}",
        m.to_string()
            .replace('[', "%5B")
            .replace(']', "%5D")
            .replace(':', "%3A")
    )
}

#[derive(Default)]
struct LoadTally {
    ok: AtomicU64,
    failed: AtomicU64,
    errors_expected: AtomicU64,
    first_failure: std::sync::Mutex<Option<String>>,
}

/// Keep-alive GETs to `web` (each must answer 200) and, one in 25, to
/// `broken` (a pool with nobody listening: 5xx, for the errors chart).
/// The pace swings between about 60 and 240 requests a second so the
/// numbers move; it stops on `stop`, after `LOAD_MAX` (plus `warmup`), or
/// after `LOAD_MAX_REQUESTS` (plus 250 a second of warm-up).
fn load(
    web: SocketAddr,
    broken: SocketAddr,
    warmup: Duration,
    stop: Arc<AtomicBool>,
    t: Arc<LoadTally>,
) {
    let start = Instant::now();
    let max_time = LOAD_MAX + warmup;
    let max_requests = LOAD_MAX_REQUESTS + 250 * warmup.as_secs();
    let mut conn: Option<Client> = None;
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) && start.elapsed() < max_time && n < max_requests {
        n += 1;
        if n.is_multiple_of(25) {
            let r = get(broken, "/");
            if r.status >= 500 {
                t.errors_expected.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let c = conn.get_or_insert_with(|| Client::connect(web));
        c.send(format!("GET /item/{n} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        match c.read_response(false) {
            Some(r) if r.status == 200 => {
                t.ok.fetch_add(1, Ordering::Relaxed);
                if r.header("connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"))
                {
                    conn = None;
                }
            }
            other => {
                t.failed.fetch_add(1, Ordering::Relaxed);
                let mut f = t.first_failure.lock().expect("lock");
                if f.is_none() {
                    *f = Some(format!(
                        "request {n} at {:?}: {:?}",
                        start.elapsed(),
                        other.map(|r| (r.status, r.body_text()))
                    ));
                }
                conn = None;
            }
        }
        let phase = start.elapsed().as_secs_f64() / 4.0 * std::f64::consts::TAU;
        let per_s = 150.0 + 90.0 * phase.sin();
        std::thread::sleep(Duration::from_secs_f64(1.0 / per_s));
    }
}

#[test]
fn dashboard_in_headless_chromium() {
    let (chromium, browser_dir) = match browser_tools() {
        Ok(x) => x,
        Err(why) => {
            println!("SKIPPED dashboard_in_headless_chromium: {why}");
            eprintln!("SKIPPED dashboard_in_headless_chromium: {why}");
            return;
        }
    };
    let started = Instant::now();
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (web, secure, broken) = (free_addr(), free_addr(), free_addr());
    // Nobody listens there: the "legacy" pool's member is down (a TCP
    // check) and the vserver answers 5xx.
    let dead = free_addr();
    // Nobody listens there either, in a pool without checks: the member
    // stays "up (no check)" and is flagged failing.
    let (stale, refused) = (free_addr(), free_addr());
    let dir = temp_dir("dashboard");
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!("# name role token\nops admin {ADMIN_TOKEN}\nviewer read {READ_TOKEN}\n"),
    )
    .expect("tokens file");
    let pki = Pki::new("dash-ca");
    let (cert, key) = pki.leaf(
        "shop",
        "/CN=shop.example.test",
        "DNS:shop.example.test,DNS:www.shop.example.test",
        Kind::Ecdsa,
        21,
    );
    let config = format!(
        "tokens_file = \"{}\"\n\
         [global]\nworkers = 1\n\
         [[vserver]]\nname = \"web\"\nlisten = [\"{web}\"]\ndefault_pool = \"app\"\n\
         [[vserver]]\nname = \"shop-tls\"\nlisten = [\"{secure}\"]\ndefault_pool = \"app\"\n\
         [vserver.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
         [[vserver]]\nname = \"legacy\"\nlisten = [\"{broken}\"]\ndefault_pool = \"legacy\"\n\
         [[pool]]\nname = \"app\"\n\
         [[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"legacy\"\n\
         [pool.health]\ntype = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"200ms\"\nrise = 1\nfall = 1\n\
         [[pool.member]]\naddress = \"{dead}\"\n\
         [[vserver]]\nname = \"stale\"\nlisten = [\"{stale}\"]\ndefault_pool = \"stale\"\n\
         [[pool]]\nname = \"stale\"\n[[pool.member]]\naddress = \"{refused}\"\n\
         [shield]\n[[shield.acl]]\nname = \"count web\"\nproto = [\"tcp\"]\naction = \"count\"\n",
        tokens.display(),
        cert.display(),
        key.display(),
        a.addr,
        b.addr,
    );
    let sy = Switchyard::start(&config, &[web, secure, broken, stale]);
    for i in 0..3 {
        assert_eq!(
            get(stale, &format!("/{i}")).status,
            502,
            "request {i} to stale"
        );
    }
    // Tokens are in force: no token, no data.
    let r = get(sy.admin, "/api/v1/live");
    assert_eq!(r.status, 401, "{}", r.body_text());
    // The dashboard's own files are public and embedded.
    for (f, ctype) in [
        ("", "text/html"),
        ("app.js", "text/javascript"),
        ("style.css", "text/css"),
    ] {
        let r = get(sy.admin, &format!("/dashboard/{f}"));
        assert_eq!(r.status, 200, "/dashboard/{f}");
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with(ctype)),
            "/dashboard/{f}: {:?}",
            r.header("content-type")
        );
    }

    let update = std::env::var("UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1");
    let warmup = if update {
        SCREENSHOT_WARMUP
    } else {
        Duration::ZERO
    };
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(LoadTally::default());
    let loader = {
        let (stop, tally) = (stop.clone(), tally.clone());
        std::thread::spawn(move || load(web, broken, warmup, stop, tally))
    };
    std::thread::sleep(warmup);
    let shots = if update {
        repo_root().join("docs/screenshots")
    } else {
        dir.join("screenshots")
    };
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let drained = b.addr;
    let url = format!("http://{}/dashboard/", sy.admin);
    let browser_started = Instant::now();
    let mut child = Command::new("node")
        .current_dir(&browser_dir)
        .arg("dashboard.js")
        .args(["--url", &url])
        .args(["--token", ADMIN_TOKEN])
        .args(["--read-token", READ_TOKEN])
        .args(["--pool", "app"])
        .args(["--member", &drained.to_string()])
        .args(["--min-certificates", "1"])
        .args(["--failing-pool", "stale"])
        .args(["--failing-member", &refused.to_string()])
        .arg("--chromium")
        .arg(&chromium)
        .arg("--screenshot")
        .arg(shots.join("dashboard.png"))
        .arg("--login-screenshot")
        .arg(shots.join("dashboard-token.png"))
        .args(["--timeout-ms", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node");
    // Read both pipes in threads (a full pipe would stall the script).
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(110);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait node") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let browser_time = browser_started.elapsed();
    let (out, err) = (
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    );
    let ok = status.is_some_and(|s| s.success());
    if !ok {
        stop.store(true, Ordering::Relaxed);
        let _ = loader.join();
        panic!(
            "the browser script failed ({status:?}):\n--- stdout\n{out}\n--- stderr\n{err}\n--- switchyard log\n{}",
            sy.log()
        );
    }
    eprintln!("{err}");
    let seen: serde_json::Value = serde_json::from_str(out.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the script's result is not JSON ({e}): {out}"));
    assert_eq!(seen["ok"], true, "{seen}");
    assert_eq!(seen["failing"]["label"], "up (no check)", "{seen}");
    assert_eq!(seen["action_msg_height"], 0, "{seen}");
    assert!(
        seen["kiosk_url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/dashboard/")),
        "{seen}"
    );
    eprintln!("browser saw: {seen}");
    // The shield section: the rule and the default, counted at accept.
    assert_eq!(seen["shield_where"], "at accept", "{seen}");
    let rules = seen["shield_rules"].as_array().cloned().unwrap_or_default();
    assert!(
        rules
            .iter()
            .any(|r| r["rule"] == "count web" && r["hits"].as_u64() > Some(0)),
        "{rules:?}"
    );
    assert!(rules.iter().any(|r| r["rule"] == "(default)"), "{rules:?}");

    // The page's drain reached the member: the API says so, with the token.
    let (code, m) = api(sy.admin, "GET", &member_path("app", drained), "");
    assert_eq!(code, 200, "{m}");
    assert_eq!(m["admin_state"], "draining", "{m}");
    let served_when_browser_done = b.requests();
    // The audit names who drained it.
    let (_, audit) = api(sy.admin, "GET", "/api/v1/audit", "");
    assert!(
        audit
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["who"] == "ops"
                && e["change"]
                    .as_str()
                    .is_some_and(|c| c.contains(&drained.to_string()) && c.contains("draining")))),
        "{audit}"
    );
    // Let the load go on a little longer with the member out of rotation,
    // then stop it.
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    loader.join().expect("load thread");
    let (okn, failed) = (
        tally.ok.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    assert_eq!(
        failed,
        0,
        "{failed} requests failed (of {}): first {:?}",
        okn + failed,
        tally.first_failure.lock().expect("lock")
    );
    assert!(okn > 500, "only {okn} requests were served");
    assert!(tally.errors_expected.load(Ordering::Relaxed) > 0);
    // No request went to the draining member after the page drained it.
    assert_eq!(b.requests(), served_when_browser_done);
    assert!(
        eventually(Duration::from_secs(5), || {
            api(sy.admin, "GET", &member_path("app", drained), "").1["state"] == "drained"
        }),
        "{}",
        api(sy.admin, "GET", &member_path("app", drained), "").1
    );
    // The other member took the load; the drained one sits idle.
    assert!(a.requests() > 0);
    // Back in rotation with the API (what the Enable button does).
    let (code, m) = api(
        sy.admin,
        "PATCH",
        &member_path("app", drained),
        r#"{"state":"enabled"}"#,
    );
    assert_eq!((code, m["state"].as_str()), (200, Some("up")), "{m}");
    let mut c = TcpStream::connect(web).expect("connect");
    c.write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    eprintln!(
        "dashboard test: {okn} requests served, 0 failed; browser {:.1}s, whole test {:.1}s; screenshots in {}",
        browser_time.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        shots.display()
    );
}
