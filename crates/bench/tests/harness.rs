//! The compare harness and its report, with real processes as DUTs: our own
//! origin binary stands in for a proxy (a `cmd:` target), so the test needs
//! neither haproxy nor nginx.

use std::path::PathBuf;

use switchyard_bench::compare::{self, Opts};
use switchyard_bench::dut::{self, Ports};
use switchyard_bench::json::{obj, Json};
use switchyard_bench::report;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sy-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cmd_target(name: &str, command: &str) -> dut::Target {
    let mut t = dut::resolve(&format!("cmd:{command}"), None).unwrap();
    t.name = name.into();
    t
}

#[test]
fn a_run_where_the_dut_dies_is_marked_invalid() {
    let bin = env!("CARGO_BIN_EXE_switchyard-bench");
    let out = tmpdir("dies");
    // Ports from the pid so parallel test binaries don't collide.
    // Below the ephemeral range (32768+), where client sockets could hold them.
    let base = 11000 + (std::process::id() % 500) as u16 * 10;
    let opts = Opts {
        targets: vec![
            cmd_target(
                "steady",
                &format!("exec {bin} origin --threads 1 --listen $SY_L7"),
            ),
            cmd_target(
                "dies",
                &format!("exec timeout 0.8 {bin} origin --threads 1 --listen $SY_L7"),
            ),
        ],
        scenarios: vec!["goodput"],
        runs: 1,
        quick: true,
        out: out.clone(),
        dut_cpu: None,
        load_cpu: None,
        ports: Ports::from_base(base),
        progress: false,
        max_error_ratio: 0.01,
        timing: switchyard_bench::scenario::Timing::new(true),
        warm_up: std::time::Duration::from_millis(300),
    };
    let doc = compare::run(&opts).unwrap();
    // The warm-up runs are not samples.
    let all = doc.get("samples").unwrap().as_arr();
    assert!(all.iter().all(|s| !s
        .get("case")
        .and_then(Json::as_str)
        .unwrap_or("")
        .contains("warm-up")));
    assert_eq!(
        all.len(),
        2 * all
            .iter()
            .filter(|s| s.get("target").and_then(Json::as_str) == Some("steady"))
            .count()
    );
    report::write(&doc, &out).unwrap();
    // A saturated generator adds an equal-offered-rate pass: look at the
    // plain case only.
    let samples: Vec<&Json> = doc
        .get("samples")
        .unwrap()
        .as_arr()
        .iter()
        .filter(|s| s.get("case").and_then(Json::as_str) == Some("100 clients 1MB"))
        .collect();
    assert_eq!(samples.len(), 2);
    let by = |t: &str| {
        samples
            .iter()
            .find(|s| s.get("target").and_then(Json::as_str) == Some(t))
            .unwrap()
    };
    assert_eq!(by("steady").get("valid"), Some(&Json::Bool(true)));
    let dies = by("dies");
    assert_eq!(dies.get("valid"), Some(&Json::Bool(false)));
    let reason = dies.get("reason").and_then(Json::as_str).unwrap();
    assert!(
        // Died mid-run (the usual case) or, on a very slow machine, before
        // the load started: invalid either way.
        reason.contains("exited") || reason.contains("errors"),
        "{reason}"
    );
    // The steady DUT's goodput is measured and its CPU was sampled.
    let k = by("steady").get("kpi").unwrap();
    assert!(k.get("goodput_bps").and_then(Json::as_f64).unwrap() > 1e6);
    assert!(k.get("dut_cpu_pct").and_then(Json::as_f64).unwrap() > 0.0);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("**invalid**"), "{md}");
    assert!(out.join("goodput.svg").is_file());
    // Skipped scenarios don't exist for this one; the DUT is stopped.
    assert!(std::net::TcpStream::connect(("127.0.0.1", base)).is_err());
}

fn sample(target: &str, run: u64, rps: f64, p99: f64, valid: bool) -> Json {
    obj()
        .set("scenario", "l7-rps")
        .set("case", "128B unlimited req/conn")
        .set("target", target)
        .set("run", run)
        .set("primary", "rps")
        .set("higher_is_better", true)
        .set("valid", valid)
        .set(
            "reason",
            if valid {
                Json::Null
            } else {
                "DUT exited during the run".into()
            },
        )
        .set(
            "kpi",
            obj()
                .set("rps", rps)
                .set("p99_us", p99)
                .set("dut_cpu_us_per_req", 10.0)
                .set("dut_cpu_pct", 50.0)
                .set("error_ratio", 0.0),
        )
        .set(
            "load",
            obj().set(
                "latency_curve",
                Json::Arr(
                    [(50.0, p99 / 2.0), (99.0, p99), (99.9, p99 * 1.5)]
                        .iter()
                        .map(|(p, v)| Json::Arr(vec![(*p).into(), (*v).into()]))
                        .collect(),
                ),
            ),
        )
}

#[test]
fn report_has_medians_ratios_invalid_runs_and_charts() {
    let mut samples = Vec::new();
    for run in 0..3 {
        // a: 200, 210, 190 -> median 200; b: 100, 90, 110 -> median 100;
        // b's fourth run died and must not count.
        samples.push(sample(
            "a",
            run,
            [200.0, 210.0, 190.0][run as usize],
            1000.0,
            true,
        ));
        samples.push(sample(
            "b",
            run,
            [100.0, 90.0, 110.0][run as usize],
            3000.0,
            true,
        ));
    }
    samples.push(sample("b", 3, 5000.0, 1.0, false));
    let doc = obj()
        .set("generated_by", "test")
        .set(
            "settings",
            obj().set("runs", 3u64).set("max_error_ratio", 0.01),
        )
        .set(
            "targets",
            Json::Arr(vec![obj().set("name", "a"), obj().set("name", "b")]),
        )
        .set("samples", Json::Arr(samples))
        .set(
            "skipped",
            Json::Arr(vec![obj()
                .set("scenario", "l4-cps")
                .set("case", "128B")
                .set("target", "a")
                .set("reason", "a cannot do l4")]),
        );
    let out = tmpdir("report");
    report::write(&doc, &out).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let row = |t: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {t} |")) && l.contains("µs"))
            .unwrap()
    };
    let (row_a, row_b) = (row("a"), row("b"));
    assert!(
        row_a.contains("| 200 |") || row_a.contains("| 200 ("),
        "{row_a}"
    );
    assert!(row_a.contains("2.00x"), "{row_a}");
    assert!(row_b.contains("0.50x"), "{row_b}");
    assert!(row_b.contains("3/4"), "valid runs: {row_b}");
    assert!(md.contains("b run 4: **invalid**: DUT exited"), "{md}");
    assert!(md.contains("a cannot do l4"));
    // The JSON round-trips and re-renders to the same markdown.
    let back = Json::parse(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report::render(&back).0, md);
    for svg in ["l7-rps.svg", "latency-l7-rps-128b-unlimited-req-conn.svg"] {
        let s = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(
            s.starts_with("<svg") && s.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert!(
            s.contains(">a<") && s.contains(">b<"),
            "{svg} lacks the legend"
        );
    }
    assert!(md.contains("![l7-rps](l7-rps.svg)"));
}

/// Report 004's section: every target against Envoy, P99 ratios Envoy's
/// over the target's (Fortio's, the harness's in brackets), maxima the
/// target's over Envoy's, CPX's published ratios beside them.
#[test]
fn report_004_section_prints_the_four_ratios_against_envoy() {
    use switchyard_bench::scenario::report_004_name;
    let s = |target: &str, case: String, kpi: Json| {
        obj()
            .set("scenario", "report-004")
            .set("case", case)
            .set("target", target)
            .set("run", 0u64)
            .set("primary", "p99_us")
            .set("higher_is_better", false)
            .set("valid", true)
            .set("kpi", kpi.set("error_ratio", 0.0))
    };
    let mut samples = Vec::new();
    for (t, f) in [("switchyard", 1.0), ("envoy", 4.0)] {
        for v in ["1.3", "1.2"] {
            for test in ["volume", "transaction"] {
                samples.push(s(
                    t,
                    report_004_name(v, test, "max"),
                    obj()
                        .set("throughput_bps", 8e9 / f)
                        .set("rps", 40000.0 / f)
                        .set("dut_cpu_pct", 99.0),
                ));
                for w in ["idle 100 req/s", "stressed 95%"] {
                    samples.push(s(
                        t,
                        report_004_name(v, test, w),
                        obj()
                            .set("p99_us", 500.0 * f)
                            .set("fortio_p99_us", 300.0 * f),
                    ));
                }
            }
        }
    }
    let doc = obj()
        .set("generated_by", "test")
        .set("settings", obj().set("runs", 3u64))
        .set(
            "targets",
            Json::Arr(vec![
                obj().set("name", "switchyard"),
                obj().set("name", "envoy"),
            ]),
        )
        .set("samples", Json::Arr(samples))
        .set("skipped", Json::Arr(vec![]));
    let (md, _) = report::render(&doc);
    let sec = md
        .split("## Report 004's ratios against Envoy")
        .nth(1)
        .expect("the section");
    let line = |test: &str, v: &str| {
        sec.lines()
            .find(|l| l.starts_with(&format!("| {test} | {v} |")))
            .unwrap_or_else(|| panic!("{test} {v} row in {sec}"))
            .to_string()
    };
    let r = line("volume", "1.3");
    assert!(
        r.contains("| 4.00x (4.00x) | 4.00x (4.00x) | 7.7x | 4.00x | 99 % / 99 % |"),
        "{r}"
    );
    assert!(r.ends_with("| — | 2.1x |"), "{r}");
    assert!(line("volume", "1.2").contains("| 7.4x |"));
    let t = line("transaction", "1.2");
    assert!(t.contains("| 1.6x |") && t.ends_with("| 3.0x |"), "{t}");
    assert!(sec.contains("### switchyard against Envoy"));
    assert!(!sec.contains("### envoy against Envoy"));
}
