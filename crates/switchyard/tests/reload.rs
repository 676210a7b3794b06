//! Hot reload end to end (admin and SIGHUP), reload under load with zero
//! failed requests, rejected configurations, and `switchyard check`.

mod common;
use common::*;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn one_pool(listen: &[SocketAddr], members: &[SocketAddr], extra: &str) -> String {
    let ls: Vec<String> = listen.iter().map(|a| format!("\"{a}\"")).collect();
    let mut s = format!(
        "[global]\nworkers = 2\n[[vserver]]\nname = \"web\"\nlisten = [{}]\ndefault_pool = \"p\"\n{extra}\n[[pool]]\nname = \"p\"\n",
        ls.join(", ")
    );
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

fn generation(sy: &Switchyard) -> u64 {
    sy.stats()["generation"].as_u64().unwrap_or(0)
}

/// `file:line:col` of the first occurrence of `needle` in `text`.
fn position(file: &std::path::Path, text: &str, needle: &str) -> String {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in config"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = at - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    format!("{}:{line}:{col}:", file.display())
}

#[test]
fn new_pool_and_member_take_effect() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let l = free_addr();
    let sy = Switchyard::start(&one_pool(&[l], &[a.addr], ""), &[l]);
    assert_eq!(distribution(l, "/", 6).get("a"), Some(&6));
    assert_eq!(origin_of(&get(l, "/new/x")), "a");
    assert_eq!(generation(&sy), 1);
    let policy =
        "[[vserver.policy]]\nmatch = { path_prefix = \"/new/\" }\naction = { pool = \"q\" }\n";
    let cfg = format!(
        "{}[[pool]]\nname = \"q\"\n[[pool.member]]\naddress = \"{}\"\n",
        one_pool(&[l], &[a.addr, b.addr], policy),
        c.addr
    );
    let (ok, out) = sy.reload_with(&cfg);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "reloaded: configuration generation 2 is live");
    assert_eq!(generation(&sy), 2);
    // A keep-alive connection opened before the reload sees the new config too.
    let d = distribution(l, "/", 10);
    assert_eq!(d.get("a"), Some(&5), "{d:?}");
    assert_eq!(d.get("b"), Some(&5), "{d:?}");
    assert_eq!(origin_of(&get(l, "/new/x")), "c");
    // Counters of a member that persists survive the reload.
    let m = sy.member_stats("p", a.addr);
    assert!(m["requests"].as_u64().unwrap_or(0) >= 12, "{m}");
}

#[test]
fn listen_addresses_follow_the_config() {
    let a = Origin::start("a");
    let (l1, l2) = (free_addr(), free_addr());
    let sy = Switchyard::start(&one_pool(&[l1], &[a.addr], ""), &[l1]);
    assert!(TcpStream::connect(l2).is_err());
    let (ok, out) = sy.reload_with(&one_pool(&[l2], &[a.addr], ""));
    assert!(ok, "{out}");
    // The new address accepts right after the reload returns.
    assert_eq!(get(l2, "/").status, 200);
    assert!(
        eventually(Duration::from_secs(3), || TcpStream::connect(l1).is_err()),
        "removed address still accepts"
    );
    // Both at once, then back to one.
    let (ok, out) = sy.reload_with(&one_pool(&[l1, l2], &[a.addr], ""));
    assert!(ok, "{out}");
    assert_eq!(get(l1, "/").status, 200);
    assert_eq!(get(l2, "/").status, 200);
}

#[test]
fn a_reload_that_cannot_listen_is_rejected_whole() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let sy = Switchyard::start(&one_pool(&[l], &[a.addr], ""), &[l]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let t = taken.local_addr().expect("addr");
    let (ok, out) = sy.reload_with(&one_pool(&[l, t], &[b.addr], ""));
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("cannot listen on {t}")), "{out}");
    // Nothing of the new config applies: still member a.
    assert_eq!(origin_of(&get(l, "/")), "a");
    assert_eq!(generation(&sy), 1);
}

#[test]
fn bad_configs_are_rejected_and_the_old_one_keeps_serving() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let sy = Switchyard::start(&one_pool(&[l], &[a.addr], ""), &[l]);
    let mut keep = Client::connect(l);
    assert_eq!(origin_of(&keep.get("/")), "a");

    // An unknown pool: located, named, the defined ones listed.
    let bad =
        one_pool(&[l], &[b.addr], "").replace("default_pool = \"p\"", "default_pool = \"nope\"");
    let (ok, out) = sy.reload_with(&bad);
    assert!(!ok, "{out}");
    let full = std::fs::read_to_string(&sy.config).expect("config");
    let at = position(&sy.config, &full, "\"nope\"");
    assert!(
        out.contains(&format!(
            "{at} vserver \"web\": default_pool \"nope\" is not defined; defined pools: p"
        )),
        "expected {at} in:\n{out}"
    );
    assert!(out.contains("the running configuration stays"), "{out}");
    assert_eq!(origin_of(&get(l, "/")), "a");
    assert_eq!(origin_of(&keep.get("/")), "a");

    // Invalid TOML.
    let bad = one_pool(&[l], &[b.addr], "").replace("[[pool]]", "[[pool]");
    let (ok, out) = sy.reload_with(&bad);
    assert!(!ok, "{out}");
    let full = std::fs::read_to_string(&sy.config).expect("config");
    let at = position(&sy.config, &full, "[[pool]\n");
    let line_prefix = at.rsplit_once(':').map(|x| x.0).unwrap_or("");
    let line_prefix = line_prefix.rsplit_once(':').map(|x| x.0).unwrap_or("");
    assert!(
        out.contains(&format!("{line_prefix}:")),
        "expected {line_prefix} in:\n{out}"
    );
    assert!(out.contains("invalid table header"), "{out}");
    assert_eq!(origin_of(&get(l, "/")), "a");
    assert_eq!(generation(&sy), 1);

    // The process is fine: a good config still goes through.
    let (ok, out) = sy.reload_with(&one_pool(&[l], &[b.addr], ""));
    assert!(ok, "{out}");
    assert_eq!(origin_of(&get(l, "/")), "b");
    assert_eq!(origin_of(&keep.get("/")), "b");
    assert_eq!(generation(&sy), 2);
}

#[test]
fn sighup_reloads() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let sy = Switchyard::start(&one_pool(&[l], &[a.addr], ""), &[l]);
    sy.write_config(&one_pool(&[l], &[b.addr], ""));
    sy.signal("HUP");
    assert!(eventually(Duration::from_secs(3), || origin_of(&get(
        l, "/"
    )) == "b"));
    assert_eq!(generation(&sy), 2);
    // A bad file on SIGHUP: logged with its position, the process keeps serving.
    sy.write_config("[[vserver]]\nname = 3\n");
    sy.signal("HUP");
    assert!(
        eventually(Duration::from_secs(3), || sy
            .log()
            .contains("reload rejected")),
        "{}",
        sy.log()
    );
    assert!(
        sy.log().contains(&format!("{}:4:8:", sy.config.display())),
        "{}",
        sy.log()
    );
    assert_eq!(origin_of(&get(l, "/")), "b");
    assert_eq!(generation(&sy), 2);
}

/// One client thread: sends requests until `stop`, records every failure.
fn load_thread(
    l: SocketAddr,
    mode: &'static str,
    stop: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
) -> std::thread::JoinHandle<(usize, Vec<String>)> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut n = 0;
        let mut origins = Vec::new();
        let mut keep: Option<Client> = None;
        while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(10) {
            let body = format!("payload-{n}");
            let raw = match mode {
                "post" => format!(
                    "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                ),
                _ => "GET / HTTP/1.1\r\nHost: t\r\n\r\n".to_string(),
            };
            if mode == "new" || keep.is_none() {
                match TcpStream::connect_timeout(&l, Duration::from_secs(2)) {
                    Ok(s) => keep = Some(Client::from_stream(s)),
                    Err(e) => {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("{mode} #{n}: connect: {e}"));
                        continue;
                    }
                }
            }
            let c = keep.as_mut().expect("client");
            if let Err(e) = c.w.write_all(raw.as_bytes()) {
                errors
                    .lock()
                    .unwrap()
                    .push(format!("{mode} #{n}: write: {e}"));
                keep = None;
                continue;
            }
            match c.read_response(false) {
                Some(r) if r.status == 200 => {
                    if mode == "post" && r.body_text() != body {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("{mode} #{n}: body {:?}", r.body_text()));
                    }
                    origins.push(origin_of(&r));
                }
                Some(r) => {
                    errors.lock().unwrap().push(format!(
                        "{mode} #{n}: {} {}",
                        r.status,
                        r.body_text()
                    ));
                }
                None => {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("{mode} #{n}: connection closed"));
                    keep = None;
                }
            }
            n += 1;
        }
        (n, origins)
    })
}

#[test]
fn reload_under_load_fails_no_request() {
    let os: Vec<Origin> = ["a", "b", "c"].iter().map(|n| Origin::start(n)).collect();
    let l = free_addr();
    let health = "[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\n";
    let cfg_a = format!(
        "[global]\nworkers = 2\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
         [[pool]]\nname = \"p\"\n{health}\
         [[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n",
        os[0].addr, os[1].addr
    );
    // Config B: other members, another algorithm, a policy, header edits.
    let cfg_b = format!(
        "[global]\nworkers = 2\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
         response_headers = {{ set = {{ X-Config = \"b\" }} }}\n\
         [[vserver.policy]]\nmatch = {{ path = \"/nowhere\" }}\naction = {{ status = 404, body = \"no\" }}\n\
         [[pool]]\nname = \"p\"\nalgorithm = \"least-connections\"\n\
         [[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n",
        os[1].addr, os[2].addr
    );
    let sy = Switchyard::start(&cfg_a, &[l]);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = ["keep", "new", "post", "keep"]
        .into_iter()
        .map(|m| load_thread(l, m, stop.clone(), errors.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..5 {
        let (ok, out) = sy.reload_with(if i % 2 == 0 { &cfg_b } else { &cfg_a });
        assert!(ok, "reload {i}: {out}");
        std::thread::sleep(Duration::from_millis(350));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    let mut seen = std::collections::HashSet::new();
    for t in threads {
        let (n, origins) = t.join().expect("load thread");
        assert!(n >= 10, "a load thread only sent {n} requests");
        total += n;
        seen.extend(origins);
    }
    let errors = errors.lock().unwrap();
    eprintln!(
        "reload under load: {total} requests, {} failed",
        errors.len()
    );
    assert!(
        errors.is_empty(),
        "{} of {total} requests failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    // Both configurations served traffic.
    for o in ["a", "b", "c"] {
        assert!(seen.contains(o), "{o} never answered: {seen:?}");
    }
    assert_eq!(generation(&sy), 6);
    // The last config (B) is live.
    assert_eq!(get(l, "/").header("x-config"), Some("b"));
    assert_eq!(get(l, "/nowhere").status, 404);
}

// ------------------------------------------------------- switchyard check

const GOOD: &str = r#"[[vserver]]
name = "web"
listen = ["127.0.0.1:18080"]
default_pool = "app"

[[pool]]
name = "app"
algorithm = "round-robin"
slow_start = "10s"
[[pool.member]]
address = "127.0.0.1:18081"
[[pool.member]]
address = "127.0.0.1:18082"
"#;

fn check(name: &str, text: &str) -> (Option<i32>, String, String, String) {
    let dir = temp_dir("check");
    let f = dir.join(name);
    std::fs::write(&f, text).expect("write");
    let f = f.display().to_string();
    let (code, out, err) = run_cli(&["check", "-c", &f]);
    (code, out, err, f)
}

#[test]
fn check_accepts_a_good_file() {
    let (code, out, err, f) = check("good.toml", GOOD);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        format!("{f}: OK (1 virtual server, 1 pool, 2 members)\n")
    );
}

#[test]
fn check_locates_a_pool_name_typo() {
    let (code, _, err, f) = check(
        "typo.toml",
        &GOOD.replace("default_pool = \"app\"", "default_pool = \"aap\""),
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        format!(
            "{f}:4:16: vserver \"web\": default_pool \"aap\" is not defined; defined pools: app\n"
        )
    );
}

#[test]
fn check_locates_an_invalid_duration() {
    let (code, _, err, f) = check("duration.toml", &GOOD.replace("\"10s\"", "\"10 parsecs\""));
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        format!("{f}:9:14: invalid duration \"10 parsecs\": unknown unit \" parsecs\"; allowed: ms, s, m, h\n")
    );
}

#[test]
fn check_lists_the_allowed_algorithms() {
    let (code, _, err, f) = check(
        "algorithm.toml",
        &GOOD.replace("\"round-robin\"", "\"fastest\""),
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        format!("{f}:8:13: unknown variant `fastest`, expected one of `round-robin`, `weighted-round-robin`, `least-connections`, `p2c`, `consistent-hash`\n")
    );
}

#[test]
fn check_reports_every_error_in_order() {
    let text = GOOD
        .replace("default_pool = \"app\"", "default_pool = \"aap\"")
        .replace(
            "address = \"127.0.0.1:18082\"",
            "address = \"127.0.0.1:18082\"\nweight = 0",
        );
    let (code, _, err, f) = check("two.toml", &text);
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with(&format!("{f}:4:16: ")), "{err}");
    assert_eq!(
        lines[1],
        format!("{f}:14:10: pool \"app\" member 127.0.0.1:18082: weight must be between 1 and 1000, got 0")
    );
}

#[test]
fn check_locates_an_unknown_key_and_a_bad_duration_below_it() {
    // serde stops at the first error; check goes on past it.
    let text = GOOD
        .replace(
            "default_pool = \"app\"",
            "default_pool = \"app\"\ndefault_poul = \"app\"",
        )
        .replace("\"10s\"", "\"10 parsecs\"");
    let (code, _, err, f) = check("both.toml", &text);
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with(&format!(
            "{f}:5:1: unknown field `default_poul`, expected one of "
        )),
        "{err}"
    );
    assert_eq!(
        lines[1],
        format!("{f}:10:14: invalid duration \"10 parsecs\": unknown unit \" parsecs\"; allowed: ms, s, m, h")
    );
}

#[test]
fn check_reports_unknown_keys_with_the_cross_reference_errors() {
    // An unknown key drops nothing the rest of the file depends on, so the
    // pool name typo below it is reported too.
    let text = GOOD
        .replace(
            "name = \"web\"",
            "name = \"web\"\nlisen = [\"127.0.0.1:1\"]",
        )
        .replace("default_pool = \"app\"", "default_pool = \"aap\"");
    let (code, _, err, f) = check("unknown-and-typo.toml", &text);
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with(&format!("{f}:3:1: unknown field `lisen`")),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!("{f}:5:16: vserver \"web\": default_pool \"aap\"")),
        "{err}"
    );
}

#[test]
fn check_names_a_missing_file_without_a_position() {
    let (code, _, err) = run_cli(&["check", "-c", "/nonexistent/switchyard.toml"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "/nonexistent/switchyard.toml: cannot read the configuration file: No such file or directory\n"
    );
    assert!(!err.contains(":0:0"), "{err}");
}

#[test]
fn check_without_a_file_or_with_a_missing_one_fails() {
    let (code, _, err) = run_cli(&["check"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("check needs -c FILE"), "{err}");
    let (code, _, err) = run_cli(&["check", "-c", "/nonexistent/switchyard.toml"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot read the configuration file"), "{err}");
}

#[test]
fn check_reports_every_class_of_error_in_one_run() {
    // The operator's file of issue 32: an unknown key, a bad duration, a
    // wrong type, an undefined pool, an invalid regex and a duplicate
    // listen address. The last two classes (cross-references) used to
    // show only once the others were fixed.
    let text = r#"[global]
workerz = 2

[timeouts]
client_idle = "5 parsecs"

[[pool]]
name = "web"
[[pool.member]]
address = "127.0.0.1:9001"
weight = "heavy"

[[vserver]]
name = "a"
listen = ["127.0.0.1:8080"]
default_pool = "nope"
[[vserver.policy]]
match = { path_regex = "(" }
action = { pool = "web" }

[[vserver]]
name = "b"
listen = ["127.0.0.1:8080"]
default_pool = "web"
"#;
    let (code, _, err, f) = check("six.toml", text);
    assert_eq!(code, Some(1), "{err}");
    let starts: Vec<String> = err
        .lines()
        .filter(|l| l.starts_with(&f))
        .map(|l| l.to_string())
        .collect();
    let want = [
        "2:1: unknown field `workerz`",
        "5:15: invalid duration \"5 parsecs\"",
        "11:10: invalid type: string \"heavy\", expected u32",
        "16:16: vserver \"a\": default_pool \"nope\" is not defined; defined pools: web",
        "18:24: invalid regex \"(\"",
        "23:11: vserver \"b\": address 127.0.0.1:8080 is already used by vserver \"a\"",
    ];
    assert_eq!(starts.len(), want.len(), "{err}");
    for (line, want) in starts.iter().zip(want) {
        assert!(
            line.starts_with(&format!("{f}:{want}")),
            "{want:?} in:\n{err}"
        );
    }
}

#[test]
fn a_value_dropped_for_its_error_draws_no_consequential_error() {
    // The pool's only member has a bad address: "has no member" would be
    // a consequence of dropping it. The vserver that lacks listen is
    // dropped whole: "no virtual server" would be one too.
    let text = "[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"nowhere\"\n[[vserver]]\nname = \"v\"\ndefault_pool = \"p\"\n";
    let (code, _, err, f) = check("consequences.toml", text);
    assert_eq!(code, Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&f)).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with(&format!("{f}:4:11: ")), "{err}");
    assert!(lines[1].contains("missing field `listen`"), "{err}");
}

#[test]
fn a_syntax_error_is_placed_alike_by_check_run_reload_sighup_and_the_api() {
    let a = Origin::start("a");
    let l = free_addr();
    let good = one_pool(&[l], &[a.addr], "");
    let sy = Switchyard::start(&good, &[l]);
    // An unterminated string, in a file without [cluster].
    let bad = good.replace(
        &format!("address = \"{}\"", a.addr),
        &format!("address = \"{}", a.addr),
    );
    sy.write_config(&bad);
    let f = sy.config.display().to_string();
    let text = std::fs::read_to_string(&sy.config).expect("read config");
    let line = text
        .lines()
        .position(|t| t.starts_with("address = \"") && !t.ends_with('"'))
        .expect("the broken line")
        + 1;

    // check: the reference.
    let (code, _, err) = run_cli(&["check", "-c", &f]);
    assert_eq!(code, Some(1), "{err}");
    let expected = err.lines().next().unwrap_or_default().to_string();
    assert!(
        expected.starts_with(&format!("{f}:{line}:"))
            && expected.ends_with(": invalid basic string"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // run: the same line, not "[cluster]: TOML parse error".
    let (code, _, err) = run_cli(&["run", "-c", &f]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.lines().any(|l| l == expected),
        "{expected:?} in:\n{err}"
    );
    assert!(!err.contains("[cluster]"), "{err}");

    // reload -c FILE reads the admin address from the file.
    let (code, _, err) = run_cli(&["reload", "-c", &f]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&expected), "{expected:?} in:\n{err}");

    // The admin API.
    let (code, _, err) = run_cli(&["reload", "--admin", &sy.admin.to_string()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&expected), "{expected:?} in:\n{err}");

    // SIGHUP.
    sy.signal("HUP");
    assert!(
        eventually(Duration::from_secs(3), || sy.log().contains(&expected)),
        "{expected:?} in:\n{}",
        sy.log()
    );
    assert_eq!(origin_of(&get(l, "/")), "a");
}

#[test]
fn a_cluster_file_with_a_syntax_error_is_placed_as_any_other() {
    let dir = temp_dir("cluster-syntax");
    let f = dir.join("node.toml");
    std::fs::write(
        &f,
        "[cluster]\nendpoints = [\"http://127.0.0.1:2379\"]\nprefix = \"/sy\nnode = \"n1\"\n",
    )
    .expect("write");
    let f = f.display().to_string();
    for cmd in ["check", "run"] {
        let (code, _, err) = run_cli(&[cmd, "-c", &f]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("{f}:3:")) && l.ends_with("invalid basic string")),
            "{cmd}: {err}"
        );
    }
    // A wrong type inside [cluster] names the table and its place.
    std::fs::write(&f, "[cluster]\nendpoints = \"http://127.0.0.1:2379\"\n").expect("write");
    let (code, _, err) = run_cli(&["check", "-c", &f]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!("{f}:2:13: [cluster]: invalid type")),
        "{err}"
    );
}
