//! The admin REST API end to end through the real binary: every route of
//! the OpenAPI document answers as documented (refused without a token,
//! allowed with the right role), drain under load loses nothing, a weight
//! change shows in the distribution, run-time state across reloads, TLS
//! with client certificates, and `switchyard ctl`.

mod common;
use common::*;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const ADMIN_TOKEN: &str = "adm-0123456789abcdef";
const READ_TOKEN: &str = "rd-fedcba9876543210";

/// A tokens file with an admin (alice) and a reader (bob).
fn tokens_file() -> PathBuf {
    let d = temp_dir("tokens");
    let p = d.join("tokens");
    std::fs::write(
        &p,
        format!("# name role token\nalice admin {ADMIN_TOKEN}\nbob read {READ_TOKEN}\n"),
    )
    .expect("tokens");
    p
}

/// `[admin]` keys (they follow the `[admin] listen` the harness writes),
/// then one vserver `web` over pool `app`.
fn config(
    admin_extra: &str,
    listen: SocketAddr,
    members: &[(SocketAddr, u32)],
    pool_extra: &str,
) -> String {
    let mut s = format!(
        "{admin_extra}\n[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"app\"\n\
         [[pool]]\nname = \"app\"\n{pool_extra}\n"
    );
    for (m, w) in members {
        s.push_str(&format!(
            "[[pool.member]]\naddress = \"{m}\"\nweight = {w}\n"
        ));
    }
    s
}

struct Answer {
    status: u16,
    ctype: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    fn header(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    }
}

fn call(
    admin: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    let r = request(admin, &req);
    Answer {
        status: r.status,
        ctype: r.header("content-type").unwrap_or("").to_string(),
        headers: r.headers.clone(),
        body: r.body_text(),
    }
}

fn member_path(m: SocketAddr) -> String {
    format!("/api/v1/pools/app/members/{m}")
}

fn member(sy: &Switchyard, m: SocketAddr) -> Value {
    let a = call(sy.admin, "GET", &member_path(m), Some(READ_TOKEN), None);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn patch(sy: &Switchyard, m: SocketAddr, body: Value) -> Answer {
    call(
        sy.admin,
        "PATCH",
        &member_path(m),
        Some(ADMIN_TOKEN),
        Some(&body),
    )
}

/// Reads the head of the event stream and its first event, then hangs up.
fn first_event(admin: SocketAddr, token: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET /api/v1/events HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .expect("write");
    let mut got = Vec::new();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(5) {
        let text = String::from_utf8_lossy(&got);
        if let Some((_, rest)) = text.split_once("\r\n\r\n") {
            if rest.contains("\n\n") {
                break;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (status, ctype, rest.to_string())
}

/// Every route the OpenAPI document lists answers as it documents: without
/// a token 401 (and nothing changes), with a read token a GET answers and a
/// change is refused with 403, with an admin token every route answers one
/// of its documented statuses with the documented content type. Routes the
/// document does not list get 404, a listed path with another method 405.
/// Switchyard over one member with the test tokens, `pool_extra` in its pool.
fn start_with_tokens(l: SocketAddr, member: SocketAddr, pool_extra: &str) -> Switchyard {
    let tokens = tokens_file();
    Switchyard::start(
        &config(
            &format!("tokens_file = \"{}\"", tokens.display()),
            l,
            &[(member, 1)],
            pool_extra,
        ),
        &[l],
    )
}

#[test]
fn every_documented_route_answers_as_documented() {
    every_route(&mut Vec::new());
}

/// Issue 32, item 7: every JSON answer of the route walk above (successes,
/// 401, 403, 400, 404, and an event stream's sample) validates against the
/// schema the document gives for its route and status, with a real JSON
/// Schema (2020-12) validator: Python's jsonschema, run by
/// `tests/openapi_validate.py`. Without python3 or jsonschema (scripts/test.sh
/// installs Debian's python3-jsonschema) the test says so on one line and
/// passes.
#[test]
fn every_documented_answer_validates_against_the_document() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_validate.py");
    let has_validator = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_validator {
        println!("SKIPPED every_documented_answer_validates_against_the_document: python3 with jsonschema not found (scripts/test.sh installs python3-jsonschema)");
        return;
    }
    let mut answers = Vec::new();
    every_route(&mut answers);
    assert!(answers.len() >= 40, "{} answers recorded", answers.len());
    let dir = temp_dir("openapi-answers");
    let file = dir.join("answers.json");
    std::fs::write(&file, Value::Array(answers).to_string()).expect("write answers");
    let out = Command::new("python3")
        .arg(&script)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/admin/openapi.json"))
        .arg(&file)
        .output()
        .expect("run python3");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    eprint!("{stdout}");
}

/// Keeps a JSON answer for `every_documented_answer_validates_against_the_document`.
fn keep(answers: &mut Vec<Value>, m: &str, path: &str, a: &Answer) {
    if a.ctype.starts_with("application/json") {
        answers.push(json!({ "method": m, "path": path, "status": a.status, "body": a.json() }));
    }
}

/// Calls every documented route as `every_documented_route_answers_as_documented`
/// says, and keeps each JSON answer as {method, path, status, body} (the
/// path as the document writes it).
fn every_route(answers: &mut Vec<Value>) {
    let o = Origin::start("a");
    let l = free_addr();
    let tokens = tokens_file();
    let shield = "\n[shield]\n[shield.lists]\nblocklist = [\"203.0.113.0/24\"]\n[[shield.acl]]\nsrc = [\"@blocklist\"]\naction = \"drop\"\n";
    let cfg = config(
        &format!("tokens_file = \"{}\"", tokens.display()),
        l,
        &[(o.addr, 1)],
        "",
    );
    let sy = Switchyard::start(&format!("{cfg}{shield}"), &[l]);
    assert_eq!(get(l, "/").status, 200);
    let a = call(sy.admin, "GET", "/api/openapi.json", None, None);
    assert_eq!(a.status, 200);
    let doc = a.json();
    let served: Value =
        serde_json::from_str(include_str!("../src/admin/openapi.json")).expect("openapi in repo");
    assert_eq!(
        doc, served,
        "the served document is the one in the repository"
    );
    let concrete = |p: &str| {
        p.replace("{vserver}", "web")
            .replace("{pool}", "app")
            .replace("{member}", &o.addr.to_string())
            .replace("{file}", "index.html")
            .replace("{list}", "blocklist")
    };
    let body_for = |p: &str| -> Option<Value> {
        match p {
            "/api/v1/pools/{pool}/members/{member}" => Some(json!({ "weight": 2 })),
            "/api/v1/cache/purge" => Some(json!({ "url": format!("http://{l}/x") })),
            "/api/v1/shield/lists/{list}" => Some(json!({ "add": ["198.51.100.0/24"] })),
            "/api/v1/shield/rules" => Some(json!({ "acl": [
                { "name": "drop the list", "src": ["@blocklist"], "action": "drop" }
            ] })),
            // Leaves the node ready (the routes after it still check it).
            "/api/v1/node" => Some(json!({ "ready": true })),
            _ => None,
        }
    };
    let mut checked = 0;
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("ops") {
            let m = method.to_uppercase();
            let url = concrete(path);
            let url = if path == "/cache/purge" {
                format!("{url}?url=http://{l}/x")
            } else {
                url
            };
            let public = op["security"].as_array().is_some_and(|a| a.is_empty());
            let needs_admin = op["x-switchyard-role"] == "admin";
            let documented = |status: u16| op["responses"][status.to_string()].clone();
            let body = body_for(path);
            if path == "/api/v1/events" {
                assert_eq!(call(sy.admin, &m, &url, None, None).status, 401);
                let (st, ctype, ev) = first_event(sy.admin, READ_TOKEN);
                assert_eq!(st, 200);
                assert!(ctype.starts_with("text/event-stream"), "{ctype}");
                assert!(ev.starts_with("event: sample\ndata: {"), "{ev}");
                let data = ev
                    .trim_start_matches("event: sample\ndata: ")
                    .lines()
                    .next()
                    .unwrap_or_default();
                let sample: Value = serde_json::from_str(data)
                    .unwrap_or_else(|e| panic!("an event's data is not JSON ({e}): {ev}"));
                answers.push(
                    json!({ "method": m, "path": path, "status": st, "body": sample,
                                     "schema": "#/components/schemas/Sample" }),
                );
                checked += 1;
                continue;
            }
            if !public {
                let before = member(&sy, o.addr);
                for tok in [None, Some("not-a-valid-token-at-all")] {
                    let a = call(sy.admin, &m, &url, tok, body.as_ref());
                    assert_eq!(a.status, 401, "{m} {url} with {tok:?}: {}", a.body);
                    keep(answers, &m, path, &a);
                    assert!(a
                        .header("www-authenticate")
                        .is_some_and(|v| v.starts_with("Bearer")));
                    assert!(documented(401).is_object());
                }
                if needs_admin {
                    let a = call(sy.admin, &m, &url, Some(READ_TOKEN), body.as_ref());
                    assert_eq!(a.status, 403, "{m} {url} with a read token: {}", a.body);
                    keep(answers, &m, path, &a);
                }
                assert_eq!(
                    member(&sy, o.addr)["weight"],
                    before["weight"],
                    "a refused call changed nothing"
                );
            }
            let tok = if needs_admin { ADMIN_TOKEN } else { READ_TOKEN };
            let a = call(sy.admin, &m, &url, Some(tok), body.as_ref());
            keep(answers, &m, path, &a);
            let doc_resp = documented(a.status);
            assert!(
                doc_resp.is_object(),
                "{m} {url} answered {} which is not documented: {}",
                a.status,
                a.body
            );
            if let Some(content) = doc_resp["content"].as_object() {
                let want = content.keys().next().expect("a media type");
                let have = a.ctype.split(';').next().unwrap_or("");
                assert!(
                    want == "*/*" || want == have,
                    "{m} {url}: {have} but documented {want}"
                );
                if have == "application/json" {
                    a.json();
                }
            }
            // The cluster routes answer 404 on an instance that is not a
            // cluster node (tests/cluster.rs calls them on real nodes).
            let not_a_node = a.status == 404 && url.starts_with("/api/v1/cluster");
            assert!(
                (200..400).contains(&a.status) || not_a_node,
                "{m} {url}: {} {}",
                a.status,
                a.body
            );
            checked += 1;
        }
    }
    assert!(checked >= 28, "{checked} routes checked");
    // The PATCH above (weight 2) took, and the audit says who did it.
    assert_eq!(member(&sy, o.addr)["weight"], 2);
    let audit = call(sy.admin, "GET", "/api/v1/audit", Some(READ_TOKEN), None).json();
    let changes: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["change"].as_str().unwrap_or(""))
        .collect();
    assert!(
        changes.iter().any(|c| c.contains("weight 2")),
        "{changes:?}"
    );
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["who"] == "alice"),
        "{audit}"
    );
    assert!(
        sy.wait_for_log("admin: alice (admin) from 127.0.0.1"),
        "{}",
        sy.log()
    );
    // Undocumented routes and methods.
    assert_eq!(
        call(sy.admin, "GET", "/api/v1/nothing", Some(ADMIN_TOKEN), None).status,
        404
    );
    let a = call(
        sy.admin,
        "GET",
        "/api/v1/pools/none",
        Some(ADMIN_TOKEN),
        None,
    );
    assert_eq!(a.status, 404);
    keep(answers, "GET", "/api/v1/pools/{pool}", &a);
    assert_eq!(
        call(
            sy.admin,
            "GET",
            "/api/v1/pools/app/members/127.0.0.1:1",
            Some(ADMIN_TOKEN),
            None
        )
        .status,
        404
    );
    let a = call(sy.admin, "DELETE", "/api/v1/pools", Some(ADMIN_TOKEN), None);
    assert_eq!(a.status, 405);
    assert_eq!(a.header("allow"), Some("GET"));
    let a = call(sy.admin, "GET", "/reload", Some(ADMIN_TOKEN), None);
    assert_eq!(a.status, 405);
    // A bad change is refused whole: nothing applied.
    let a = patch(&sy, o.addr, json!({ "state": "draining", "weight": 0 }));
    assert_eq!(a.status, 400, "{}", a.body);
    keep(
        answers,
        "PATCH",
        "/api/v1/pools/{pool}/members/{member}",
        &a,
    );
    assert_eq!(member(&sy, o.addr)["admin_state"], "enabled");
    assert_eq!(patch(&sy, o.addr, json!({ "colour": "red" })).status, 400);
    assert_eq!(patch(&sy, o.addr, json!({})).status, 400);
    assert_eq!(
        call(
            sy.admin,
            "PATCH",
            &member_path(o.addr),
            Some(ADMIN_TOKEN),
            None
        )
        .status,
        400
    );
}

/// Drain under load: the member takes no new request, the requests in
/// flight finish, no client request fails, and the member reports drained
/// with no connection left; enable brings it back.
#[test]
fn drain_under_load_fails_nothing_and_ends_idle() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    a.set(|x| x.delay = Duration::from_millis(20));
    b.set(|x| x.delay = Duration::from_millis(20));
    let l = free_addr();
    let sy = Switchyard::start(&config("", l, &[(a.addr, 1), (b.addr, 1)], ""), &[l]);
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (stop, failures, done) = (stop.clone(), failures.clone(), done.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(l);
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(15) {
                    let sent = c.w.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").is_ok();
                    let status = if sent {
                        c.read_response(false).map(|r| r.status)
                    } else {
                        None
                    };
                    match status {
                        Some(200) => done.fetch_add(1, Ordering::Relaxed),
                        _ => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            c = Client::connect(l);
                            0
                        }
                    };
                }
            })
        })
        .collect();
    assert!(eventually(Duration::from_secs(5), || a.requests() > 20
        && b.requests() > 20));
    let r = patch(&sy, a.addr, json!({ "state": "draining" }));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(matches!(
        r.json()["state"].as_str(),
        Some("draining" | "drained")
    ));
    // Drained: nothing in flight, and its idle connections closed.
    assert!(
        eventually(Duration::from_secs(5), || member(&sy, a.addr)["state"]
            == "drained"),
        "{}",
        member(&sy, a.addr)
    );
    assert!(
        eventually(Duration::from_secs(5), || member(&sy, a.addr)
            ["connections"]["active"]
            == 0),
        "{}",
        member(&sy, a.addr)
    );
    let seen_a = a.requests();
    let done_then = done.load(Ordering::Relaxed);
    assert!(eventually(Duration::from_secs(5), || done
        .load(Ordering::Relaxed)
        > done_then + 40));
    assert_eq!(a.requests(), seen_a, "a drained member took new requests");
    // Back: it serves again.
    assert_eq!(
        patch(&sy, a.addr, json!({ "state": "enabled" })).status,
        200
    );
    assert!(eventually(Duration::from_secs(5), || a.requests() > seen_a + 10));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("load thread");
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "requests failed during the drain"
    );
    assert!(done.load(Ordering::Relaxed) > 100);
    // Disabled: out at once.
    assert_eq!(member(&sy, a.addr)["state"], "up");
    assert_eq!(
        patch(&sy, a.addr, json!({ "state": "disabled" })).json()["state"],
        "disabled"
    );
    let d = distribution(l, "/", 20);
    assert_eq!(d.get("a"), None, "{d:?}");
    // Forced down and up over the (absent) checks.
    assert_eq!(
        patch(&sy, a.addr, json!({ "state": "enabled", "health": "down" })).json()["state"],
        "down"
    );
    assert_eq!(distribution(l, "/", 10).get("a"), None);
    assert_eq!(
        patch(&sy, a.addr, json!({ "health": "auto" })).json()["state"],
        "up"
    );
    assert_eq!(distribution(l, "/", 10).get("a"), Some(&5));
}

/// A run-time weight changes the share of a weighted pool at once, and
/// `null` puts the configured weight back.
#[test]
fn weight_change_shows_in_the_distribution() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let l = free_addr();
    let sy = Switchyard::start(
        &config(
            "",
            l,
            &[(a.addr, 1), (b.addr, 1)],
            "algorithm = \"weighted-round-robin\"",
        ),
        &[l],
    );
    let d = distribution(l, "/", 40);
    assert_eq!((d.get("a"), d.get("b")), (Some(&20), Some(&20)), "{d:?}");
    let r = patch(&sy, a.addr, json!({ "weight": 3 }));
    assert_eq!(r.json()["weight"], 3);
    assert_eq!(r.json()["configured_weight"], 1);
    let d = distribution(l, "/", 40);
    assert_eq!((d.get("a"), d.get("b")), (Some(&30), Some(&10)), "{d:?}");
    patch(&sy, a.addr, json!({ "weight": null }));
    let d = distribution(l, "/", 40);
    assert_eq!((d.get("a"), d.get("b")), (Some(&20), Some(&20)), "{d:?}");
}

/// What a reload does to run-time changes, as the API documents: kept for a
/// member the reload keeps; a run-time weight gives way to a weight changed
/// in the file; a removed and re-added member starts afresh.
#[test]
fn run_time_state_survives_a_reload_as_documented() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let l = free_addr();
    let cfg = |wa: u32, with_a: bool| {
        let mut m = vec![(b.addr, 1)];
        if with_a {
            m.insert(0, (a.addr, wa));
        }
        config("", l, &m, "algorithm = \"weighted-round-robin\"")
    };
    let sy = Switchyard::start(&cfg(1, true), &[l]);
    patch(
        &sy,
        a.addr,
        json!({ "state": "disabled", "health": "up", "weight": 5 }),
    );
    patch(&sy, b.addr, json!({ "weight": 4 }));
    let (ok, out) = sy.reload_with(&cfg(1, true));
    assert!(ok, "{out}");
    let ma = member(&sy, a.addr);
    assert_eq!(ma["admin_state"], "disabled");
    assert_eq!(ma["health"]["forced"], "up");
    assert_eq!(ma["weight"], 5);
    assert_eq!(member(&sy, b.addr)["weight"], 4);
    assert_eq!(distribution(l, "/", 10).get("a"), None);
    // The file changes a's weight: the file wins; the state stays.
    let (ok, out) = sy.reload_with(&cfg(2, true));
    assert!(ok, "{out}");
    let ma = member(&sy, a.addr);
    assert_eq!(ma["weight"], 2);
    assert_eq!(ma["admin_state"], "disabled");
    assert_eq!(
        member(&sy, b.addr)["weight"],
        4,
        "b's weight in the file did not change"
    );
    // Removed, then back: a new member.
    assert!(sy.reload_with(&cfg(2, false)).0);
    assert_eq!(
        call(sy.admin, "GET", &member_path(a.addr), None, None).status,
        404
    );
    assert!(sy.reload_with(&cfg(2, true)).0);
    let ma = member(&sy, a.addr);
    assert_eq!(ma["admin_state"], "enabled");
    assert_eq!(ma["health"]["forced"], "auto");
    // A rejected reload changes nothing either.
    patch(&sy, a.addr, json!({ "state": "draining" }));
    let (ok, _) = sy.reload_with("[[vserver]]\nname = 1\n");
    assert!(!ok);
    assert!(matches!(
        member(&sy, a.addr)["state"].as_str(),
        Some("draining" | "drained")
    ));
}

/// TLS on the admin listener with required client certificates: `ctl`
/// with the CA and a client certificate works; without one the handshake
/// fails; certificates show with their expiry.
#[test]
fn admin_over_tls_with_client_certificates_and_ctl() {
    let pki = Pki::new("adminca");
    let server = pki.issue_cn("admin", "localhost", "IP:127.0.0.1,DNS:localhost");
    let client = pki.issue_cn("ops", "ops", "");
    let o = Origin::start("a");
    let l = free_addr();
    let tokens = tokens_file();
    let admin_extra = format!(
        "tokens_file = \"{}\"\n[admin.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\nclient_ca = \"{}\"\nclient_auth = \"required\"",
        tokens.display(),
        server.0.display(),
        server.1.display(),
        pki.ca().display()
    );
    let sy = Switchyard::start(&config(&admin_extra, l, &[(o.addr, 1)], ""), &[l]);
    let ctl = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("ctl")
            .args([
                "--admin",
                &format!("https://{}", sy.admin),
                "--token",
                ADMIN_TOKEN,
            ])
            .args(["--cacert", &pki.ca().display().to_string()])
            .args(args)
            .output()
            .expect("ctl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let cert = client.0.display().to_string();
    let key = client.1.display().to_string();
    let (ok, out, err) = ctl(&["--cert", &cert, "--key", &key, "--json", "members"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["members"][0]["address"], o.addr.to_string());
    let (ok, _, err) = ctl(&["members"]);
    assert!(!ok, "no client certificate, yet it worked");
    assert!(!err.is_empty());
    let (ok, out, err) = ctl(&["--cert", &cert, "--key", &key, "--json", "certs"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let admin_cert = v
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["vserver"] == "admin")
        .expect("admin cert");
    assert!(
        (28..=30).contains(&admin_cert["days_left"].as_i64().unwrap()),
        "{admin_cert}"
    );
    assert!(admin_cert["names"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "localhost"));
    let (ok, out, err) = ctl(&[
        "--cert",
        &cert,
        "--key",
        &key,
        "drain",
        "app",
        &o.addr.to_string(),
        "--wait",
        "5",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("drained"), "{out}");
    let (ok, out, _) = ctl(&["--cert", &cert, "--key", &key, "audit"]);
    assert!(ok);
    assert!(
        out.contains("alice (admin)") && out.contains("state draining"),
        "{out}"
    );
}

/// `switchyard ctl` on a plain listener: members table, weight, enable,
/// health, top (one refresh), a wrong token refused with the API's reason.
#[test]
fn ctl_commands() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let l = free_addr();
    let tokens = tokens_file();
    let sy = Switchyard::start(
        &config(
            &format!("tokens_file = \"{}\"", tokens.display()),
            l,
            &[(a.addr, 1), (b.addr, 1)],
            "",
        ),
        &[l],
    );
    let ctl = |token: &str, args: &[&str]| {
        let out = Command::new(bin())
            .arg("ctl")
            .args(["--admin", &sy.admin.to_string()])
            .env("SWITCHYARD_TOKEN", token)
            .args(args)
            .output()
            .expect("ctl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = ctl(READ_TOKEN, &["members"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("MEMBER") && out.contains(&a.addr.to_string()) && out.contains(" up "),
        "{out}"
    );
    let (ok, _, err) = ctl(READ_TOKEN, &["weight", "app", &a.addr.to_string(), "7"]);
    assert!(!ok);
    assert!(err.contains("403"), "{err}");
    let (ok, _, err) = ctl("wrong-token-0000000000", &["members"]);
    assert!(!ok);
    assert!(err.contains("401"), "{err}");
    let (ok, out, err) = ctl(ADMIN_TOKEN, &["weight", "app", &a.addr.to_string(), "7"]);
    assert!(ok, "{err}");
    assert!(out.contains("weight 7"), "{out}");
    let (ok, out, _) = ctl(ADMIN_TOKEN, &["health", "app", &b.addr.to_string(), "down"]);
    assert!(ok && out.contains(": down"), "{out}");
    assert_eq!(distribution(l, "/", 6).get("b"), None);
    let (ok, out, _) = ctl(
        ADMIN_TOKEN,
        &["weight", "app", &a.addr.to_string(), "reset"],
    );
    assert!(ok && out.contains("weight 1"), "{out}");
    for _ in 0..5 {
        get(l, "/");
    }
    std::thread::sleep(Duration::from_millis(1200));
    let (ok, out, err) = ctl(READ_TOKEN, &["top", "--count", "1"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("VSERVER") && out.contains("web") && out.contains(&b.addr.to_string()),
        "{out}"
    );
    let (ok, out, _) = ctl(READ_TOKEN, &["config"]);
    assert!(ok && out.contains("[[vserver]]"), "{out}");
    let (ok, out, err) = ctl(ADMIN_TOKEN, &["reload"]);
    assert!(ok && out.contains("generation 2"), "{out}{err}");
    // `switchyard stats` and `reload` carry the token too.
    let out = Command::new(bin())
        .args([
            "stats",
            "--json",
            "--admin",
            &sy.admin.to_string(),
            "--token",
            READ_TOKEN,
        ])
        .output()
        .expect("stats");
    assert!(out.status.success());
    let out = Command::new(bin())
        .args(["stats", "--admin", &sy.admin.to_string()])
        .output()
        .expect("stats");
    assert!(!out.status.success(), "stats without a token");
}

/// `check` refuses an admin listener off loopback without tokens, and a
/// tokens file with a bad line, naming file and line.
#[test]
fn check_refuses_unsafe_or_broken_admin_settings() {
    let d = temp_dir("admincheck");
    let base = "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"app\"\n[[pool]]\nname = \"app\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n";
    let check = |admin: &str| {
        let p = d.join("c.toml");
        std::fs::write(&p, format!("{admin}\n{base}")).unwrap();
        let out = Command::new(bin())
            .args(["check", "-c"])
            .arg(&p)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = check("[admin]\nlisten = \"0.0.0.0:9090\"");
    assert!(!ok);
    assert!(
        err.contains("c.toml:2:") && err.contains("tokens_file"),
        "{err}"
    );
    std::fs::write(
        d.join("tokens"),
        "alice admin 0123456789abcdef\nbob superuser 0123456789abcdefgh\n",
    )
    .unwrap();
    let (ok, err) = check("[admin]\nlisten = \"0.0.0.0:9090\"\ntokens_file = \"tokens\"");
    assert!(!ok);
    assert!(err.contains("line 2: unknown role \"superuser\""), "{err}");
    std::fs::write(d.join("tokens"), "alice admin 0123456789abcdef\n").unwrap();
    let (ok, err) = check("[admin]\nlisten = \"0.0.0.0:9090\"\ntokens_file = \"tokens\"");
    assert!(ok, "{err}");
    let (ok, err) = check("[admin]");
    assert!(ok, "the default is loopback: {err}");
}

/// Draining a node: /readyz answers 503 (a VRRP check or a BGP announcer
/// moves the VIP away) while requests are still served; ready again after.
#[test]
fn a_drained_node_is_not_ready_and_still_serves() {
    let o = Origin::start("a");
    let listen = addr(free_port());
    let sy = Switchyard::start(&simple_config(listen, &[&o], ""), &[listen]);
    let readyz = || {
        request(
            sy.admin,
            "GET /readyz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .status
    };
    assert_eq!(readyz(), 200);
    let a = call(
        sy.admin,
        "POST",
        "/api/v1/node",
        None,
        Some(&json!({ "ready": false })),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(readyz(), 503);
    assert_eq!(get(listen, "/").status, 200, "a drained node still serves");
    let out = std::process::Command::new(bin())
        .args(["ctl", "--admin", &sy.admin.to_string(), "node", "ready"])
        .output()
        .expect("ctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(readyz(), 200);
}

/// Runs `switchyard ARGS --admin ADMIN` with the read token.
fn cli(sy: &Switchyard, args: &[&str]) -> String {
    let out = Command::new(bin())
        .args(args)
        .args(["--admin", &sy.admin.to_string()])
        .env("SWITCHYARD_TOKEN", READ_TOKEN)
        .output()
        .expect("run switchyard");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_pool_algorithm_is_spelled_as_in_the_config_everywhere() {
    let o = Origin::start("a");
    let l = free_addr();
    let sy = start_with_tokens(
        l,
        o.addr,
        "algorithm = \"least-connections\"\nprotocol = \"http1\"",
    );
    let pool = call(sy.admin, "GET", "/api/v1/pools/app", Some(READ_TOKEN), None).json();
    assert_eq!(pool["algorithm"], "least-connections", "{pool}");
    assert_eq!(pool["protocol"], "http1", "{pool}");
    let members: Value = serde_json::from_str(&cli(&sy, &["ctl", "--json", "members"]))
        .expect("ctl --json members is JSON");
    assert_eq!(members[0]["algorithm"], "least-connections", "{members}");
    let stats = cli(&sy, &["stats"]);
    assert!(stats.contains("pool app (least-connections)"), "{stats}");
    // The document says which spellings there are.
    let doc: Value =
        serde_json::from_str(include_str!("../src/admin/openapi.json")).expect("openapi in repo");
    let algorithms = &doc["components"]["schemas"]["Pool"]["properties"]["algorithm"]["enum"];
    for a in [
        "round-robin",
        "weighted-round-robin",
        "least-connections",
        "p2c",
        "consistent-hash",
    ] {
        assert!(
            algorithms.as_array().is_some_and(|e| e.contains(&json!(a))),
            "{a} in {algorithms}"
        );
    }
}

#[test]
fn a_vserver_says_whether_it_caches() {
    let o = Origin::start("a");
    let (l1, l2, l3) = (free_addr(), free_addr(), free_addr());
    let tokens = tokens_file();
    let cfg = format!(
        "tokens_file = \"{}\"\n\
         [[vserver]]\nname = \"plain\"\nlisten = [\"{l1}\"]\ndefault_pool = \"app\"\n\
         [[vserver]]\nname = \"cached\"\nlisten = [\"{l2}\"]\ndefault_pool = \"app\"\n[vserver.cache]\n\
         [[vserver]]\nname = \"some\"\nlisten = [\"{l3}\"]\ndefault_pool = \"app\"\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/static/\" }}\ncache = true\n\
         [[pool]]\nname = \"app\"\n[[pool.member]]\naddress = \"{}\"\n",
        tokens.display(),
        o.addr
    );
    let sy = Switchyard::start(&cfg, &[l1, l2, l3]);
    for (vs, want) in [("plain", "off"), ("cached", "on"), ("some", "per-policy")] {
        let v = call(
            sy.admin,
            "GET",
            &format!("/api/v1/vservers/{vs}"),
            Some(READ_TOKEN),
            None,
        )
        .json();
        assert_eq!(v["cache"], want, "{vs}: {v}");
    }
}

/// Runs of `line` separated by `gap` spaces or more: (start, end, text),
/// in characters.
fn runs(line: &str, gap: usize) -> Vec<(usize, usize, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == ' ' {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i;
        while i < chars.len() {
            if chars[i] != ' ' {
                end = i + 1;
                i += 1;
            } else if chars[i..].iter().take(gap).all(|c| *c == ' ') {
                break;
            } else {
                i += 1;
            }
        }
        out.push((start, end, chars[start..end].iter().collect()));
        i = end;
    }
    out
}

/// Whether every cell of `table` stands under its header (the first line;
/// headers are separated by two spaces or more, cells hold no space): a
/// number ends where its header ends, anything else starts where its
/// header starts.
fn aligned(table: &str) -> Result<(), String> {
    let mut lines = table.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or("no header")?;
    let cols = runs(header, 2);
    for line in lines {
        // Cells are apart by two spaces or more; one may hold words
        // ("up (no check)").
        let cells = runs(line, 2);
        if cells.len() != cols.len() {
            return Err(format!(
                "{} cells under {} headers: {line:?}",
                cells.len(),
                cols.len()
            ));
        }
        for ((s, e, h), (cs, ce, c)) in cols.iter().zip(&cells) {
            let ok = if c.parse::<f64>().is_ok() {
                ce == e
            } else {
                cs == s
            };
            if !ok {
                return Err(format!("{c:?} is not under {h:?}"));
            }
        }
    }
    Ok(())
}

#[test]
fn ctl_tables_stand_under_their_headers() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let l = free_addr();
    let tokens = tokens_file();
    // A pool name longer than the old fixed column, a weight of 3 digits.
    let cfg = config(
        &format!("tokens_file = \"{}\"", tokens.display()),
        l,
        &[(a.addr, 100), (b.addr, 1)],
        "",
    )
    .replace("\"app\"", "\"application-servers-west\"");
    let sy = Switchyard::start(&cfg, &[l]);
    for _ in 0..3 {
        assert_eq!(get(l, "/").status, 200);
    }
    std::thread::sleep(Duration::from_millis(1200));
    let members = cli(&sy, &["ctl", "members"]);
    assert!(members.contains("application-servers-west"), "{members}");
    aligned(&members).unwrap_or_else(|e| panic!("{e}\n{members}"));
    let vservers = cli(&sy, &["ctl", "vservers"]);
    aligned(&vservers).unwrap_or_else(|e| panic!("{e}\n{vservers}"));
    let top = cli(&sy, &["ctl", "top", "--count", "1"]);
    let top = top.trim_start_matches("\x1b[H\x1b[2J");
    // Its summary line, then two tables separated by a blank line.
    let tables: Vec<&str> = top
        .split_once("\n\n")
        .map_or("", |(_, rest)| rest)
        .split("\n\n")
        .collect();
    assert_eq!(tables.len(), 2, "{top}");
    for t in tables {
        aligned(t).unwrap_or_else(|e| panic!("{e}\n{top}"));
    }
}

#[test]
fn stats_without_traffic_has_no_empty_responses_line() {
    let o = Origin::start("a");
    let l = free_addr();
    let sy = start_with_tokens(l, o.addr, "");
    let stats = cli(&sy, &["stats"]);
    assert!(
        !stats
            .lines()
            .any(|l| l.trim_end() == "  responses" || l.trim() == "responses"),
        "{stats}"
    );
    assert!(!stats.contains("responses  "), "{stats}");
    assert_eq!(get(l, "/").status, 200);
    let stats = cli(&sy, &["stats"]);
    assert!(stats.contains("  responses 2xx=1\n"), "{stats}");
}

/// `member`'s entry in `switchyard stats --json` (pool app).
fn json_stats(sy: &Switchyard, member: SocketAddr) -> Value {
    let text = cli(sy, &["stats", "--json"]);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    member_of(&v, "app", member)
}

/// The cells of `table`'s row whose MEMBER is `member`, by header.
fn ctl_row(table: &str, member: SocketAddr) -> HashMap<String, String> {
    let mut lines = table.lines();
    let header = runs(lines.next().unwrap_or_default(), 2);
    let row = lines
        .find(|l| l.contains(&format!(" {member} ")))
        .unwrap_or_else(|| panic!("no row for {member}:\n{table}"));
    header
        .into_iter()
        .map(|(_, _, h)| h)
        .zip(runs(row, 2).into_iter().map(|(_, _, c)| c))
        .collect()
}

/// Issue 32, item 6: a member that refuses every connection in a pool
/// without checks stays "up" (nothing takes it out), but the API, `ctl
/// members`, `stats` and `stats --json` say nothing checks it, count its
/// connect failures and flag it `failing`; one connect that succeeds ends
/// the flag, and its 5xx are counted apart.
#[test]
fn a_member_refusing_connections_is_flagged_failing_until_a_connect_succeeds() {
    // Nothing listens on this port: every connect is refused.
    let dead = free_addr();
    let l = free_addr();
    let tokens = tokens_file();
    let sy = Switchyard::start(
        &config(
            &format!("tokens_file = \"{}\"", tokens.display()),
            l,
            &[(dead, 1)],
            "",
        ),
        &[l],
    );
    for i in 0..4 {
        assert_eq!(get(l, &format!("/{i}")).status, 502, "request {i}");
    }

    let m = member(&sy, dead);
    assert_eq!(m["state"], "up", "{m}");
    assert_eq!(m["status"], "up (no check)", "{m}");
    assert_eq!(m["failing"], true, "{m}");
    assert_eq!(m["health"]["connect_fail_streak"], 4, "{m}");
    assert_eq!(m["counters"]["connect_failures"], 4, "{m}");
    assert_eq!(m["counters"]["responses"]["5xx"], 0, "{m}");

    let table = cli(&sy, &["ctl", "members"]);
    aligned(&table).unwrap_or_else(|e| panic!("{e}\n{table}"));
    let row = ctl_row(&table, dead);
    assert_eq!(
        row.get("STATE").map(String::as_str),
        Some("up (no check)"),
        "{table}"
    );
    assert_eq!(
        row.get("FLAG").map(String::as_str),
        Some("failing"),
        "{table}"
    );
    assert_eq!(
        row.get("CONNFAIL").map(String::as_str),
        Some("4"),
        "{table}"
    );
    assert_eq!(row.get("5XX").map(String::as_str), Some("0"), "{table}");

    let stats = cli(&sy, &["stats"]);
    let line = stats
        .lines()
        .find(|x| x.contains(&dead.to_string()))
        .unwrap_or_else(|| panic!("no line for {dead}:\n{stats}"));
    assert!(
        line.contains(&format!("{dead} up (no check) FAILING ")),
        "{line}"
    );
    assert!(line.contains("connect failures 4 "), "{line}");
    let js = json_stats(&sy, dead);
    assert_eq!(
        (&js["status"], &js["failing"], &js["connect_failures"]),
        (&json!("up (no check)"), &json!(true), &json!(4)),
        "{js}"
    );

    // The member comes back: one connect that succeeds ends the flag.
    let o = Origin::start_on("back", &dead.to_string());
    o.set(|b| b.status = 503);
    assert_eq!(get(l, "/back").status, 503);
    let m = member(&sy, dead);
    assert_eq!(m["failing"], false, "{m}");
    assert_eq!(m["health"]["connect_fail_streak"], 0, "{m}");
    assert_eq!(m["counters"]["connect_failures"], 4, "{m}");
    assert_eq!(m["counters"]["responses"]["5xx"], 1, "{m}");
    let table = cli(&sy, &["ctl", "members"]);
    aligned(&table).unwrap_or_else(|e| panic!("{e}\n{table}"));
    let row = ctl_row(&table, dead);
    assert_eq!(row.get("FLAG").map(String::as_str), Some("-"), "{table}");
    assert_eq!(row.get("5XX").map(String::as_str), Some("1"), "{table}");
    let stats = cli(&sy, &["stats"]);
    assert!(!stats.contains("FAILING"), "{stats}");
    assert!(stats.contains("responses 5xx=1 "), "{stats}");
    assert_eq!(json_stats(&sy, dead)["failing"], false);
}

/// A member of a pool with active checks is plain "up": the checks vouch
/// for it.
#[test]
fn a_checked_member_is_plain_up() {
    let o = Origin::start("a");
    let l = free_addr();
    let sy = start_with_tokens(
        l,
        o.addr,
        "[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"",
    );
    assert!(eventually(Duration::from_secs(5), || member(&sy, o.addr)
        ["health"]["check_ok_streak"]
        .as_u64()
        .is_some_and(|n| n > 0)));
    let m = member(&sy, o.addr);
    assert_eq!(
        (&m["state"], &m["status"]),
        (&json!("up"), &json!("up")),
        "{m}"
    );
    let row = ctl_row(&cli(&sy, &["ctl", "members"]), o.addr);
    assert_eq!(row.get("STATE").map(String::as_str), Some("up"));
}

/// Bodies are at most 64 KiB, except a configuration published by an
/// admin (up to 32 MiB): a reader, an anonymous caller or another route
/// cannot make the node read megabytes.
#[test]
fn only_an_admin_publishing_a_configuration_may_send_a_long_body() {
    let o = Origin::start("a");
    let l = free_addr();
    let sy = start_with_tokens(l, o.addr, "");
    let long = Value::String("x".repeat(100 << 10));
    for (method, path, token) in [
        ("PUT", "/api/v1/cluster/config", Some(READ_TOKEN)),
        ("PUT", "/api/v1/cluster/config", None),
        ("PATCH", member_path(o.addr).as_str(), Some(ADMIN_TOKEN)),
    ] {
        let a = call(sy.admin, method, path, token, Some(&long));
        assert_eq!(a.status, 413, "{method} {path} {token:?}: {}", a.body);
        assert!(a.body.contains("64 KiB"), "{}", a.body);
    }
    // The admin's reaches the route, which answers for itself: this node
    // is no cluster node.
    let a = call(
        sy.admin,
        "PUT",
        "/api/v1/cluster/config",
        Some(ADMIN_TOKEN),
        Some(&long),
    );
    assert_ne!(a.status, 413, "{}", a.body);
    assert!(a.status >= 400, "{}: {}", a.status, a.body);
}
