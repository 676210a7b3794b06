//! The peers' generated configurations are valid for the peers themselves:
//! `haproxy -c`, `nginx -t` and `varnishd -C` check the files `switchyard
//! bench` writes, so a broken compression or caching setting fails here, not
//! in the middle of a benchmark. A peer that is not installed is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use switchyard_bench::dut::{self, Cap, Kind, Ports};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sy-peercfg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ports() -> Ports {
    Ports::from_base(12000 + (std::process::id() % 400) as u16 * 10)
}

/// Writes the target's configuration; None when it is not installed.
fn written(name: &str) -> Option<(dut::Target, PathBuf, Vec<String>)> {
    written_in(name, name)
}

/// As `written`, in a folder of its own (tests run in parallel).
fn written_in(name: &str, folder: &str) -> Option<(dut::Target, PathBuf, Vec<String>)> {
    let t = match dut::resolve(name, None) {
        Ok(t) if !t.caps.is_empty() => t,
        Ok(t) => {
            eprintln!("skipped: {}", t.notes.join("; "));
            return None;
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    let dir = tmpdir(folder).join("work").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let argv = dut::write_config(&t, &ports(), &dir).unwrap();
    Some((t, dir, argv))
}

fn check(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn haproxy_config_is_valid_and_compresses_and_caches() {
    let Some((t, dir, _)) = written("haproxy") else {
        return;
    };
    let cfg = std::fs::read_to_string(dir.join("haproxy.cfg")).unwrap();
    for want in [
        "filter compression",
        "compression algo gzip",
        "total-max-size 256",
        "max-object-size 8388608",
        "http-request cache-use objcache",
        "http-response cache-store objcache",
    ] {
        assert!(cfg.contains(want), "haproxy.cfg lacks {want}");
    }
    check(
        Command::new(&t.program)
            .arg("-c")
            .arg("-f")
            .arg(dir.join("haproxy.cfg")),
    );
}

#[test]
fn nginx_config_is_valid_and_compresses_and_caches() {
    let Some((t, dir, _)) = written("nginx") else {
        return;
    };
    let cfg = std::fs::read_to_string(dir.join("nginx.conf")).unwrap();
    for want in [
        "gzip_comp_level 1;",
        "gzip_min_length 256;",
        "max_size=256m",
        "proxy_cache objcache;",
    ] {
        assert!(cfg.contains(want), "nginx.conf lacks {want}");
    }
    // Freshness comes from the origin's Cache-Control, not an override.
    assert!(!cfg.contains("proxy_cache_valid"));
    check(
        Command::new(&t.program)
            .arg("-t")
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(dir.join("nginx.conf")),
    );
}

#[test]
fn varnish_vcl_compiles_and_caches_with_the_object_limit() {
    let Some((t, dir, argv)) = written("varnish") else {
        return;
    };
    assert_eq!(t.kind, Kind::Varnish);
    assert!(t.caps.contains(&Cap::Caching));
    assert!(argv.iter().any(|a| a == "malloc,256m"), "{argv:?}");
    assert!(argv.iter().any(|a| a == "thread_pools=1"), "{argv:?}");
    let vcl = std::fs::read_to_string(dir.join("varnish.vcl")).unwrap();
    assert!(vcl.contains("> 8388608"));
    let mut cmd = Command::new(&t.program);
    cmd.arg("-C")
        .arg("-n")
        .arg(dir.join("varnish-check"))
        .arg("-f")
        .arg(dir.join("varnish.vcl"));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-j", "none"]);
    }
    check(&mut cmd);
}

#[test]
fn switchyard_config_has_the_compression_and_cache_tables_only_with_the_caps() {
    let p = ports();
    let mut t = dut::Target {
        name: "switchyard".into(),
        kind: Kind::Switchyard,
        program: PathBuf::from("/nonexistent/switchyard"),
        command: String::new(),
        caps: vec![Cap::L7, Cap::Ipv6, Cap::Tls],
        notes: Vec::new(),
        version: String::new(),
        crs: None,
    };
    let dir = tmpdir("switchyard").join("work").join("switchyard");
    std::fs::create_dir_all(&dir).unwrap();
    let read = |t: &dut::Target| {
        dut::write_config(t, &p, &dir).unwrap();
        std::fs::read_to_string(dir.join("switchyard.toml")).unwrap()
    };
    let today = read(&t);
    for absent in [
        "[cache]",
        "[vserver.compression]",
        "[vserver.cache]",
        "[vserver.waf]",
        "[[waf.ruleset]]",
    ] {
        assert!(
            !today.contains(absent),
            "{absent} written without the capability"
        );
    }
    t.caps.extend([Cap::Compression, Cap::Caching]);
    let full = read(&t);
    for want in [
        "[cache]\nmax_bytes = 268435456",
        "max_object_bytes = 8388608",
        &format!(
            "name = \"compress\"\nlisten = [\"127.0.0.1:{}\"]",
            p.compress
        ),
        "[vserver.compression]\nalgorithms = [\"gzip\"]",
        "gzip_level = 1",
        "min_size = 256",
        "types = [\"text/*\", \"application/json\", \"application/javascript\"]",
        &format!("name = \"cache\"\nlisten = [\"127.0.0.1:{}\"]", p.cache),
        "[vserver.cache]\nenabled = true",
    ] {
        assert!(full.contains(want), "switchyard.toml lacks {want}:\n{full}");
    }
    // [cache] is a top-level table: before the first [[vserver]].
    assert!(full.find("[cache]").unwrap() < full.find("[[vserver]]").unwrap());
    assert!(dut::SWITCHYARD_CAPS.contains(&Cap::Compression));
    assert!(dut::SWITCHYARD_CAPS.contains(&Cap::Caching));
    // The proxy itself accepts it, when it is built.
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/switchyard");
    if bin.exists() {
        let out = std::process::Command::new(&bin)
            .args(["check", "-c"])
            .arg(dir.join("switchyard.toml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "switchyard check: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_dut_the_origin_sees_every_request_of_is_not_cached() {
    use switchyard_bench::compare::cache_verdict;
    assert_eq!(cache_verdict(0, 1), None);
    assert_eq!(cache_verdict(2, 1), None);
    assert_eq!(cache_verdict(6, 3), None);
    let why = cache_verdict(5000, 1).unwrap();
    assert!(why.starts_with("not cached"), "{why}");
    assert!(cache_verdict(7, 3).is_some());
}

/// One request through a running DUT, with the load generator's checks.
fn fetch(
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    path: &str,
    gzip: bool,
) -> switchyard_bench::client::Resp {
    use switchyard_bench::client::{self, Expect};
    use switchyard_bench::content;
    let size = content::object_size(path).unwrap();
    let exp = Expect {
        status: 200,
        size: Some(size),
        verify_body: true,
        gzip_trailer: gzip.then(|| (content::crc32(&content::object(path, size)), size as u32)),
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: bench.switchyard.test\r\n{}\r\n",
        if gzip {
            "Accept-Encoding: gzip\r\n"
        } else {
            ""
        }
    );
    rt.block_on(async {
        let mut s = client::connect(addr, None).await.unwrap();
        let mut buf = Vec::with_capacity(8192);
        client::transact(&mut s, req.as_bytes(), &mut buf, &exp)
            .await
            .unwrap_or_else(|e| panic!("{addr}{path}: {e:?}"))
    })
}

/// The peers, started as the harness starts them: each compresses HTML at
/// the ratio its compressor gives (the gzip trailer checked against the
/// object) and serves repeated requests from its cache (the origin sees one).
#[test]
fn peers_compress_and_serve_from_cache() {
    use switchyard_bench::dut::Listener;
    use switchyard_bench::origin::{spawn_origin, OriginOpts};
    let p = Ports::from_base(16100 + (std::process::id() % 300) as u16 * 10);
    let origin = spawn_origin(&[p.web_origin, p.images_origin], OriginOpts::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = tmpdir("run");
    for name in ["haproxy", "nginx", "varnish"] {
        let t = match dut::resolve(name, None) {
            Ok(t) if !t.caps.is_empty() => t,
            _ => {
                eprintln!("skipped: {name} is not installed");
                continue;
            }
        };
        let dir = out.join("work").join(name);
        let probe = p.addr(Listener::Cache);
        let d = dut::start(&t, &p, &dir, None, probe).unwrap_or_else(|e| panic!("{name}: {e}"));
        if t.caps.contains(&Cap::Compression) {
            let r = fetch(&rt, p.addr(Listener::Compress), "/html/65536", true);
            assert!(r.gzip, "{name} did not gzip");
            let ratio = r.body_len as f64 / 65536.0;
            assert!((0.2..0.45).contains(&ratio), "{name}: ratio {ratio}");
            // Without Accept-Encoding: the object as it is.
            let r = fetch(&rt, p.addr(Listener::Compress), "/html/8192", false);
            assert!(!r.encoded && r.body_len == 8192, "{name}");
        }
        let before = origin.stats().requests;
        for _ in 0..4 {
            let r = fetch(&rt, probe, "/size/65536", false);
            assert_eq!(r.body_len, 65536);
        }
        // The origin counts a request once its answer is written, which can
        // trail the client's receipt of it on a busy machine: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while origin.stats().requests == before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let seen = origin.stats().requests - before;
        d.stop();
        assert_eq!(seen, 1, "{name}: the origin saw {seen} of 4 requests");
    }
}

/// `switchyard check` with the debug binary, when it is built.
fn switchyard_check(cfg: &Path) {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/switchyard");
    if !bin.exists() {
        eprintln!("switchyard check skipped: {} is not built", bin.display());
        return;
    }
    check(Command::new(&bin).args(["check", "-c"]).arg(cfg));
}

/// The WAF scenario's Switchyard config: two HTTPS vservers on one CRS rule
/// set, blocking at paranoia 1 with body inspection, one sampling 33 %.
#[test]
fn switchyard_waf_config_loads_the_crs_once_for_two_vservers() {
    let Some(crs) = dut::find_crs() else {
        eprintln!("skipped: no CRS ({})", dut::CRS_MISSING);
        return;
    };
    let p = ports();
    let t = dut::Target {
        name: "switchyard".into(),
        kind: Kind::Switchyard,
        program: PathBuf::from("/nonexistent/switchyard"),
        command: String::new(),
        caps: vec![Cap::L7, Cap::Ipv6, Cap::Tls, Cap::Waf],
        notes: Vec::new(),
        version: String::new(),
        crs: Some(crs.clone()),
    };
    let dir = tmpdir("switchyard-waf").join("work").join("switchyard");
    std::fs::create_dir_all(&dir).unwrap();
    dut::write_config(&t, &p, &dir).unwrap();
    let cfg = std::fs::read_to_string(dir.join("switchyard.toml")).unwrap();
    assert_eq!(cfg.matches("[[waf.ruleset]]").count(), 1, "{cfg}");
    assert!(
        cfg.contains(&format!("crs = \"{}\"", crs.display())),
        "{cfg}"
    );
    assert_eq!(cfg.matches("[vserver.waf]").count(), 2, "{cfg}");
    for want in [
        &format!("name = \"waf\"\nlisten = [\"127.0.0.1:{}\"]", p.waf),
        &format!("name = \"waf33\"\nlisten = [\"127.0.0.1:{}\"]", p.waf33),
        "mode = \"block\"",
        "paranoia = 1",
        "request_body = true",
        "body_limit = 1048576",
        "body_limit_action = \"reject\"",
        "sample_percent = 100",
        "sample_percent = 33",
    ] {
        assert!(cfg.contains(want), "switchyard.toml lacks {want}:\n{cfg}");
    }
    assert!(
        !cfg.contains("audit_log"),
        "no audit log, as nginx's SecAuditEngine Off"
    );
    // Without the capability: none of it.
    let mut t2 = t.clone();
    t2.caps.retain(|c| *c != Cap::Waf);
    dut::write_config(&t2, &p, &dir).unwrap();
    let plain = std::fs::read_to_string(dir.join("switchyard.toml")).unwrap();
    assert!(
        !plain.contains("[vserver.waf]") && !plain.contains("[[waf.ruleset]]"),
        "{plain}"
    );
    dut::write_config(&t, &p, &dir).unwrap();
    switchyard_check(&dir.join("switchyard.toml"));
}

/// nginx with ModSecurity: the same CRS and engine settings, 33 % through
/// split_clients, and `nginx -t` loads the module and every rule.
#[test]
fn nginx_waf_config_is_valid_with_modsecurity_and_the_same_crs() {
    let Some((t, dir, _)) = written_in("nginx", "nginx-waf") else {
        return;
    };
    if !t.caps.contains(&Cap::Waf) {
        eprintln!("skipped: {}", t.notes.join("; "));
        return;
    }
    let crs = t.crs.clone().unwrap();
    let cfg = std::fs::read_to_string(dir.join("nginx.conf")).unwrap();
    let main = dir
        .join("modsecurity")
        .canonicalize()
        .unwrap()
        .join("main.conf");
    for want in [
        "load_module /usr/lib/nginx/modules/ngx_http_modsecurity_module.so;".to_string(),
        format!("modsecurity_rules_file {};", main.display()),
        "modsecurity on;".into(),
        "split_clients \"${request_id}\" $waf_branch".into(),
        "33%    on;".into(),
        "rewrite ^ /.waf-$waf_branch last;".into(),
        "proxy_pass http://web$request_uri;".into(),
        format!("listen 127.0.0.1:{} ssl;", ports().waf),
        format!("listen 127.0.0.1:{} ssl;", ports().waf33),
    ] {
        assert!(cfg.contains(&want), "nginx.conf lacks {want}");
    }
    let m = std::fs::read_to_string(&main).unwrap();
    for want in [
        "SecRuleEngine On".to_string(),
        "SecRequestBodyAccess On".into(),
        "SecRequestBodyLimit 1048576".into(),
        "SecRequestBodyLimitAction Reject".into(),
        "SecResponseBodyAccess Off".into(),
        "SecAuditEngine Off".into(),
        "setvar:tx.blocking_paranoia_level=1".into(),
        format!("Include {}/rules/*.conf", crs.display()),
    ] {
        assert!(m.contains(&want), "main.conf lacks {want}:\n{m}");
    }
    // The project's CRS, not Debian's modsecurity-crs (CRS 3.3).
    assert!(!m.contains("/usr/share/modsecurity-crs"));
    check(
        Command::new(&t.program)
            .arg("-t")
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(dir.join("nginx.conf")),
    );
}

/// The waf scenario end to end, quick: nginx+ModSecurity and Switchyard
/// (when built next to this test) serve the 80/20 benign mix with no
/// refusal on both listeners, and block the attack set.
#[test]
fn waf_scenario_quick_run() {
    use switchyard_bench::compare::{self, Opts};
    use switchyard_bench::json::Json;
    let mut targets = Vec::new();
    match dut::resolve("nginx", None) {
        Ok(t) if t.caps.contains(&Cap::Waf) => targets.push(t),
        Ok(t) => eprintln!("nginx skipped: {}", t.notes.join("; ")),
        Err(e) => eprintln!("nginx skipped: {e}"),
    }
    match dut::resolve("switchyard", None) {
        Ok(t) if t.caps.contains(&Cap::Waf) => targets.push(t),
        Ok(t) => eprintln!("switchyard skipped: {}", t.notes.join("; ")),
        Err(e) => eprintln!("switchyard skipped: {e}"),
    }
    if targets.is_empty() {
        return;
    }
    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let out = tmpdir("waf-run");
    let opts = Opts {
        targets,
        scenarios: vec!["waf"],
        runs: 1,
        quick: true,
        out: out.clone(),
        dut_cpu: None,
        load_cpu: None,
        // Clear of the other tests' ranges (their origins reach 20101).
        ports: Ports::from_base(21000 + (std::process::id() % 300) as u16 * 10),
        progress: false,
        max_error_ratio: 0.01,
        timing: switchyard_bench::scenario::Timing::new(true),
        warm_up: std::time::Duration::ZERO,
    };
    let doc = compare::run(&opts).unwrap();
    switchyard_bench::report::write(&doc, &out).unwrap();
    let samples = doc.get("samples").unwrap().as_arr();
    assert!(!samples.is_empty());
    for s in samples {
        let what = format!(
            "{} {}",
            s.get("target").and_then(Json::as_str).unwrap_or(""),
            s.get("case").and_then(Json::as_str).unwrap_or("")
        );
        assert_eq!(
            s.get("valid"),
            Some(&Json::Bool(true)),
            "{what}: {}",
            s.get("reason").and_then(Json::as_str).unwrap_or("")
        );
        let k = s.get("kpi").unwrap();
        let share = k.get("post_share").and_then(Json::as_f64).unwrap();
        assert!((0.1..0.3).contains(&share), "{what}: POST share {share}");
    }
    let attacks = doc.get("waf_attacks").unwrap().as_arr();
    assert_eq!(attacks.len(), names.len());
    for a in attacks {
        let t = a.get("target").and_then(Json::as_str).unwrap_or("");
        let n = |k: &str| a.get(k).and_then(Json::as_f64).unwrap_or(-1.0);
        assert_eq!(
            n("benign_refused"),
            0.0,
            "{t} refused benign requests: {a:?}"
        );
        assert!(
            n("blocked") >= 30.0,
            "{t} blocked {} of {}",
            n("blocked"),
            n("attacks")
        );
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("WAF attack set"), "{md}");
}

/// Issue 33's peers check the files the bench writes for them (each
/// skipped when not installed: `scripts/install-bench-peers.sh NAME`).
#[test]
fn new_peers_accept_their_configurations() {
    if let Some((t, dir, _)) = written("haproxy28") {
        check(
            Command::new(&t.program)
                .arg("-c")
                .arg("-f")
                .arg(dir.join("haproxy.cfg")),
        );
    }
    if let Some((t, dir, argv)) = written("nginx131") {
        let cfg = std::fs::read_to_string(dir.join("nginx.conf")).unwrap();
        // Its stream module is built in: nothing to load.
        assert!(!cfg.contains("load_module"), "{cfg}");
        assert!(cfg.contains("stream {"), "{cfg}");
        let mut args: Vec<String> = argv[1..].to_vec();
        args.push("-t".into());
        check(Command::new(&t.program).args(&args));
    }
    if let Some((t, dir, _)) = written("envoy") {
        check(
            Command::new(&t.program)
                .arg("--mode")
                .arg("validate")
                .arg("-c")
                .arg(dir.join("envoy.yaml"))
                .arg("--disable-hot-restart")
                .arg("--log-level")
                .arg("error"),
        );
    }
    if let Some((t, dir, _)) = written("caddy") {
        check(
            Command::new(&t.program)
                .arg("validate")
                .arg("--adapter")
                .arg("caddyfile")
                .arg("--config")
                .arg(dir.join("Caddyfile")),
        );
    }
}

/// A peer that is not installed is a target without capabilities whose
/// note names the install command: skipped, never an error.
#[test]
fn a_missing_peer_is_skipped_with_its_install_command() {
    // Pingora: no other test resolves it, so the variable races nothing.
    std::env::set_var("SWITCHYARD_BENCH_PINGORA", "/nonexistent/pingora");
    let t = dut::resolve("pingora", None).unwrap();
    assert!(t.caps.is_empty());
    assert!(
        t.notes[0].contains("scripts/install-bench-peers.sh pingora"),
        "{:?}",
        t.notes
    );
}
