//! The load generator against the origin emulator, over real sockets.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use switchyard_bench::load::{self, LoadConfig, PathSpec};
use switchyard_bench::origin::{spawn_origin, OriginOpts};

/// Rates and latencies are measured here: one test at a time, so that two
/// tests don't compete for this machine's two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn origin(delay_ms: u64) -> switchyard_bench::origin::OriginHandle {
    spawn_origin(
        &["127.0.0.1:0".parse().unwrap()],
        OriginOpts {
            delay: Duration::from_millis(delay_ms),
            threads: 1,
            cpus: Vec::new(),
        },
    )
    .unwrap()
}

fn cfg(addr: SocketAddr, path: &str, expect: Option<u64>) -> LoadConfig {
    LoadConfig {
        targets: vec![addr],
        host: "test".into(),
        paths: vec![PathSpec {
            path: path.into(),
            expect_size: expect,
        }],
        connections: 4,
        threads: 1,
        duration: Duration::from_millis(700),
        timeout: Duration::from_secs(2),
        ..LoadConfig::default()
    }
}

#[test]
fn correct_transactions_are_counted_and_agree_with_the_origin() {
    let _serial = serial();
    let o = origin(0);
    let before = o.stats();
    let r = load::run(cfg(o.addrs()[0], "/size/8192", Some(8192)), &mut |_| {}).unwrap();
    let after = o.stats();
    assert!(r.ok > 100, "only {} transactions", r.ok);
    assert_eq!(r.errors_total(), 0, "{:?}", r.errors);
    // Without ramps every request is a steady one: the origin saw them all.
    assert_eq!(after.requests - before.requests, r.ok);
    assert_eq!(r.body_bytes, r.ok * 8192);
    assert_eq!(r.conns_established, 4);
    assert!(r.latency.count() == r.ok && r.latency.percentile(50.0) > 0);
}

#[test]
fn one_request_per_connection_opens_a_connection_each_time() {
    let _serial = serial();
    let o = origin(0);
    let mut c = cfg(o.addrs()[0], "/size/128", Some(128));
    c.requests_per_conn = 1;
    c.src_ips = switchyard_bench::cli_load::parse_src_ips("127.0.0.1-127.0.0.20").unwrap();
    let r = load::run(c, &mut |_| {}).unwrap();
    assert!(r.ok > 50);
    assert_eq!(r.errors_total(), 0, "{:?}", r.errors);
    let st = o.stats();
    assert!(
        st.conns_accepted >= r.ok && st.conns_accepted <= r.ok + 8,
        "{} connections for {} requests",
        st.conns_accepted,
        r.ok
    );
    assert!(r.cps > 0.0 && (r.cps - r.rps).abs() / r.rps < 0.05);
}

#[test]
fn wrong_status_size_or_body_is_a_failed_transaction() {
    let _serial = serial();
    let o = origin(0);
    let a = o.addrs()[0];
    let cases = [
        ("/status/500", None, "bad_status"),
        ("/size/100", Some(128), "bad_size"),
        ("/corrupt/4096", Some(4096), "bad_body"),
    ];
    for (path, expect, kind) in cases {
        let mut c = cfg(a, path, expect);
        c.duration = Duration::from_millis(300);
        let r = load::run(c, &mut |_| {}).unwrap();
        assert_eq!(r.ok, 0, "{path}: counted as success");
        assert!(
            r.errors.get(kind).copied().unwrap_or(0) > 10,
            "{path}: errors {:?}",
            r.errors
        );
        assert!(r.error_ratio() > 0.99);
    }
    // With body checks off, the corrupted body passes (the size is right):
    // proves the bad_body above came from the checksum.
    let mut c = cfg(a, "/corrupt/4096", Some(4096));
    c.duration = Duration::from_millis(300);
    c.verify_body = false;
    let r = load::run(c, &mut |_| {}).unwrap();
    assert!(r.ok > 10 && r.errors_total() == 0);
}

#[test]
fn connection_refused_is_a_connect_error() {
    let _serial = serial();
    // Bind then drop: the port is (almost certainly) closed afterwards.
    let a = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut c = cfg(a, "/size/1", Some(1));
    c.duration = Duration::from_millis(300);
    let r = load::run(c, &mut |_| {}).unwrap();
    assert_eq!(r.ok, 0);
    assert!(
        r.errors.get("connect").copied().unwrap_or(0) > 0,
        "{:?}",
        r.errors
    );
}

#[test]
fn open_loop_latency_counts_from_when_requests_were_due() {
    let _serial = serial();
    // 200 req/s over 4 connections; the origin stalls 500 ms in the middle.
    // A generator that waits for answers before sending (coordinated
    // omission) would see ~4 slow requests out of ~400: p90 unaffected.
    // Counting from the due time, the ~100 requests due during the stall are
    // all late: p90 and p99 must show hundreds of milliseconds.
    let o = origin(0);
    let mut c = cfg(o.addrs()[0], "/size/128", Some(128));
    c.rate = Some(200.0);
    c.duration = Duration::from_secs(2);
    let start = Instant::now();
    let mut stalled = false;
    let r = load::run(c, &mut |_| {
        if !stalled && start.elapsed() >= Duration::from_millis(700) {
            o.stall(Duration::from_millis(500));
            stalled = true;
        }
    })
    .unwrap();
    assert!(stalled);
    assert_eq!(r.errors_total(), 0, "{:?}", r.errors);
    // The schedule holds: about rate x duration requests, stall or not.
    assert!((360..=410).contains(&r.ok), "{} requests", r.ok);
    let p90 = r.latency.percentile(90.0);
    let p99 = r.latency.percentile(99.0);
    assert!(p99 >= 400_000, "p99 {p99} us");
    assert!(p90 >= 100_000, "p90 {p90} us: the stall was omitted");
    assert!(r.latency.percentile(50.0) < 100_000);
}

fn wrk_rps(url: &str, conns: usize, secs: u32) -> Option<f64> {
    let out = std::process::Command::new("wrk")
        .args(["-t1", &format!("-c{conns}"), &format!("-d{secs}s"), url])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
}

fn ours_rps(addr: SocketAddr, path: &str, conns: usize, secs: u64) -> f64 {
    let mut c = cfg(addr, path, switchyard_bench::content::object_size(path));
    c.connections = conns;
    c.duration = Duration::from_secs(secs);
    let r = load::run(c, &mut |_| {}).unwrap();
    assert_eq!(r.errors_total(), 0, "{:?}", r.errors);
    r.rps
}

#[test]
fn agrees_with_wrk_on_requests_per_second() {
    let _serial = serial();
    if switchyard_bench::sys::which("wrk").is_none() {
        eprintln!("skipped: wrk is not installed (apt-get install -y wrk)");
        return;
    }
    // The origin holds each answer 2 ms, so it sets the rate (about
    // 20 connections / 2 ms) and both generators must count the same thing.
    let o = origin(2);
    let a = o.addrs()[0];
    let url = format!("http://{a}/size/1024");
    let mut last = (0.0, 0.0);
    for _ in 0..3 {
        let wrk = wrk_rps(&url, 20, 2).expect("wrk output");
        let ours = ours_rps(a, "/size/1024", 20, 2);
        last = (ours, wrk);
        if (ours - wrk).abs() / wrk <= 0.10 {
            return;
        }
    }
    panic!(
        "ours {:.0} req/s vs wrk {:.0} req/s: more than 10 % apart",
        last.0, last.1
    );
}

/// The generator's speed against wrk is a benchmark (`switchyard bench
/// headroom`), not a bar here; this checks that the command measures both
/// generators on one origin and that its verdict follows the ratio.
#[test]
fn headroom_measures_both_generators_and_judges_by_the_ratio() {
    let _serial = serial();
    if switchyard_bench::sys::which("wrk").is_none() {
        eprintln!("skipped: wrk is not installed (apt-get install -y wrk)");
        return;
    }
    use switchyard_bench::headroom;
    let opts = headroom::Opts {
        rounds: 2,
        duration: Duration::from_secs(1),
        connections: 8,
        ..headroom::Opts::default()
    };
    let out = headroom::run(&opts).unwrap();
    assert_eq!((out.ours.len(), out.wrk.len()), (2, 2));
    assert!(
        out.ours.iter().chain(&out.wrk).all(|&r| r > 100.0),
        "{out:?}"
    );
    let best_ours = out.ours.iter().copied().fold(0.0, f64::max);
    let best_wrk = out.wrk.iter().copied().fold(0.0, f64::max);
    assert!((out.ratio() - best_ours / best_wrk).abs() < 1e-9);
    // The exit code is the verdict: an impossible bar fails, a trivial one passes.
    let run = |bar: &str| {
        let args = [
            "headroom",
            "--rounds",
            "1",
            "--duration",
            "1s",
            "--connections",
            "4",
            "--min-ratio",
            bar,
            "--json",
        ];
        switchyard_bench::main_with_args(args.iter().map(|s| s.to_string()).collect())
    };
    assert_eq!(run("1000"), 1);
    assert_eq!(run("0.001"), 0);
    assert_eq!(
        switchyard_bench::main_with_args(vec!["headroom".into(), "--rounds".into(), "x".into()]),
        2
    );
}

#[test]
fn overloaded_open_loop_stops_on_time_and_counts_unsent_requests() {
    let _serial = serial();
    // Capacity: 2 connections x 10 answers/s = 20 req/s; offered: 200 req/s.
    let o = origin(100);
    let mut c = cfg(o.addrs()[0], "/size/128", Some(128));
    c.connections = 2;
    c.rate = Some(200.0);
    c.duration = Duration::from_secs(1);
    c.timeout = Duration::from_millis(500);
    let start = Instant::now();
    let r = load::run(c, &mut |_| {}).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "ran {:?}",
        start.elapsed()
    );
    assert!(r.ok > 5 && r.ok < 40, "{} ok", r.ok);
    // About 200 were due; what was neither answered nor sent is a failure.
    let failed = r.errors_total();
    assert!(
        r.ok + failed >= 180,
        "ok {} + failed {failed}: requests vanished",
        r.ok
    );
    assert!(r.error_ratio() > 0.5);
}

#[test]
fn the_load_command_exits_by_outcome() {
    let _serial = serial();
    let o = origin(0);
    let a = o.addrs()[0];
    let run = |path: &str| {
        let args = [
            "load",
            "--url",
            &format!("http://{a}{path}"),
            "--connections",
            "2",
            "--duration",
            "300ms",
            "--quiet",
            "--json",
        ];
        switchyard_bench::main_with_args(args.iter().map(|s| s.to_string()).collect())
    };
    assert_eq!(run("/size/128"), 0);
    // Every transaction failed: a non-zero exit for scripts.
    assert_eq!(run("/status/500"), 1);
    let bad = |args: &[&str]| {
        switchyard_bench::main_with_args(args.iter().map(|s| s.to_string()).collect())
    };
    assert_eq!(
        bad(&["load", "--url", "https://127.0.0.1/", "--cipher", "NOPE"]),
        2
    );
    assert_eq!(
        bad(&["load", "--url", "http://127.0.0.1/", "--resume", "9"]),
        2
    );
    assert_eq!(
        bad(&["load", "--url", "http://127.0.0.1/", "--bogus", "1"]),
        2
    );
    assert_eq!(bad(&["no-such-command"]), 2);
    assert!(o.stats().requests > 10);
}
