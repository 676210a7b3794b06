//! `/metrics` end to end: the exposition parsed back (every sample in a
//! family with HELP and TYPE, counters named `_total`, histograms
//! cumulative with `+Inf` equal to `_count`, the labels there), the numbers
//! moving with real traffic, `promtool check metrics` when installed, and
//! every metric the Grafana dashboard in docs/ queries present.

mod common;
use common::*;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
struct Family {
    name: String,
    kind: String,
    help: bool,
    samples: Vec<Sample>,
}

/// `name{k="v",...} value`, with the format's escapes in label values.
fn parse_sample(line: &str) -> Sample {
    let fail = |why: &str| -> ! { panic!("bad sample line ({why}): {line:?}") };
    let end = line.find(['{', ' ']).unwrap_or_else(|| fail("no value"));
    let name = &line[..end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        || name.starts_with(|c: char| c.is_ascii_digit())
    {
        fail("metric name");
    }
    let mut labels = Vec::new();
    let mut rest = &line[end..];
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let mut after = None;
        loop {
            let Some(&(i, c)) = chars.peek() else {
                fail("unterminated labels")
            };
            if c == '}' {
                after = Some(i + 1);
                break;
            }
            let mut key = String::new();
            while let Some(&(_, c)) = chars.peek() {
                if c == '=' {
                    break;
                }
                key.push(c);
                chars.next();
            }
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                fail("label name");
            }
            chars.next(); // '='
            if chars.next().map(|(_, c)| c) != Some('"') {
                fail("label value not quoted");
            }
            let mut val = String::new();
            loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => val.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => val.push(c),
                        _ => fail("escape"),
                    },
                    Some((_, '"')) => break,
                    Some((_, c)) => val.push(c),
                    None => fail("unterminated label value"),
                }
            }
            labels.push((key, val));
            if let Some(&(_, ',')) = chars.peek() {
                chars.next();
            }
            if after.is_some() {
                break;
            }
        }
        rest = &r[after.unwrap_or(r.len())..];
    }
    let value = rest
        .strip_prefix(' ')
        .unwrap_or_else(|| fail("no space before the value"));
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| fail("value")),
    };
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

/// Parses the exposition and checks its structure: HELP and TYPE before
/// every family's samples, each family once and its samples together,
/// sample names matching their family's type.
fn parse(text: &str) -> Vec<Family> {
    let mut fams: Vec<Family> = Vec::new();
    let mut pending_help: Option<String> = None;
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(r) = line.strip_prefix("# HELP ") {
            let (name, help) = r.split_once(' ').unwrap_or((r, ""));
            assert!(!help.trim().is_empty(), "empty HELP: {line}");
            pending_help = Some(name.to_string());
            continue;
        }
        if let Some(r) = line.strip_prefix("# TYPE ") {
            let (name, kind) = r.split_once(' ').unwrap_or_else(|| panic!("{line}"));
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                fams.iter().all(|f| f.name != name),
                "family {name} declared twice"
            );
            fams.push(Family {
                name: name.to_string(),
                kind: kind.to_string(),
                help: pending_help.take().as_deref() == Some(name),
                samples: Vec::new(),
            });
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let s = parse_sample(line);
        let f = fams
            .last_mut()
            .unwrap_or_else(|| panic!("sample before any TYPE: {line}"));
        let ok = match f.kind.as_str() {
            "histogram" => [
                format!("{}_bucket", f.name),
                format!("{}_sum", f.name),
                format!("{}_count", f.name),
            ]
            .contains(&s.name),
            _ => s.name == f.name,
        };
        assert!(
            ok,
            "sample {} outside its family (after {})",
            s.name, f.name
        );
        f.samples.push(s);
    }
    fams
}

/// Convention checks on every family.
fn check_conventions(fams: &[Family]) {
    for f in fams {
        assert!(f.help, "{} has no HELP", f.name);
        assert!(!f.samples.is_empty(), "{} has no samples", f.name);
        assert!(
            f.name.starts_with("switchyard_") || f.name.starts_with("process_"),
            "{}",
            f.name
        );
        match f.kind.as_str() {
            "counter" => assert!(f.name.ends_with("_total"), "counter {}", f.name),
            "gauge" => assert!(!f.name.ends_with("_total"), "gauge {}", f.name),
            "histogram" => assert!(f.name.ends_with("_seconds"), "histogram {}", f.name),
            k => panic!("{} is a {k}", f.name),
        }
        if f.name.contains("bytes") && f.kind == "counter" {
            assert!(f.name.ends_with("_bytes_total"), "{}", f.name);
        }
        for s in &f.samples {
            assert!(s.value.is_finite() && s.value >= 0.0, "{s:?}");
            let need: &[&str] = if f.name.starts_with("switchyard_vserver_") {
                &["vserver"]
            } else if f.name.starts_with("switchyard_pool_") {
                &["pool"]
            } else if f.name.starts_with("switchyard_member_") {
                &["pool", "member"]
            } else {
                &[]
            };
            for l in need {
                assert!(s.label(l).is_some(), "{} lacks label {l}: {s:?}", s.name);
            }
            if [
                "switchyard_vserver_responses_total",
                "switchyard_member_responses_total",
            ]
            .contains(&f.name.as_str())
            {
                let code = s.label("code").unwrap_or("");
                assert!(
                    ["1xx", "2xx", "3xx", "4xx", "5xx", "other"].contains(&code),
                    "{s:?}"
                );
            }
        }
        if f.kind == "histogram" {
            check_histogram(f);
        }
    }
}

/// Per label set: `le` ascending to `+Inf`, counts cumulative, `+Inf`
/// equal to `_count`, a `_sum`.
fn check_histogram(f: &Family) {
    let key = |s: &Sample| -> Vec<(String, String)> {
        s.labels
            .iter()
            .filter(|(k, _)| k != "le")
            .cloned()
            .collect()
    };
    let mut series: HashMap<Vec<(String, String)>, Vec<&Sample>> = HashMap::new();
    for s in &f.samples {
        series.entry(key(s)).or_default().push(s);
    }
    for (labels, ss) in series {
        let buckets: Vec<(f64, f64)> = ss
            .iter()
            .filter(|s| s.name.ends_with("_bucket"))
            .map(|s| {
                let le = s.label("le").unwrap_or_else(|| panic!("no le: {s:?}"));
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or_else(|_| panic!("le {le}"))
                };
                (le, s.value)
            })
            .collect();
        assert!(buckets.len() >= 10, "{} {labels:?}: {buckets:?}", f.name);
        assert!(
            buckets
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
            "{} {labels:?} not cumulative: {buckets:?}",
            f.name
        );
        let inf = buckets.last().map(|b| b.1);
        assert!(buckets.last().is_some_and(|b| b.0.is_infinite()));
        let count = ss
            .iter()
            .find(|s| s.name.ends_with("_count"))
            .map(|s| s.value);
        assert_eq!(inf, count, "{} {labels:?}: +Inf != _count", f.name);
        assert!(
            ss.iter().any(|s| s.name.ends_with("_sum")),
            "{} {labels:?}: no _sum",
            f.name
        );
    }
}

/// The sum of the samples named `name` whose labels include `want`.
fn value(fams: &[Family], name: &str, want: &[(&str, &str)]) -> f64 {
    fams.iter()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == name && want.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// `promtool check metrics` on the exposition, when promtool is installed.
fn promtool(text: &str) {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        eprintln!("NOTE: promtool not installed (Debian package prometheus): its lint skipped");
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes()).expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}",
        out.status
    );
}

/// An origin whose answers can be cached and compressed: 200, text/html,
/// max-age=60, `BODY` bytes of text; keep-alive.
const BODY: usize = 4000;

fn static_origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let Ok(mut w) = s.try_clone() else { return };
                let mut r = BufReader::new(s);
                let body = "<p>switchyard metrics</p>\n".repeat(BODY / 26 + 1);
                let body = &body[..BODY];
                loop {
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if w.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    a
}

/// The dashboard's queries are valid PromQL: with Grafana's variables
/// filled in, `promtool check rules` parses them as recording rules.
fn promql_parses(exprs: &[String]) {
    if Command::new("promtool").arg("--version").output().is_err() {
        eprintln!("NOTE: promtool not installed: the dashboard's PromQL not parsed");
        return;
    }
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$job", ".*")
            .replace("$vserver", ".*")
            .replace("$pool", ".*");
        // label_values() is Grafana's, not PromQL: its first argument is.
        let e = match e.strip_prefix("label_values(") {
            Some(r) => r
                .rsplit_once(',')
                .map(|(m, _)| m.to_string())
                .unwrap_or(e.clone()),
            None => e,
        };
        let quoted = serde_json::to_string(&e).expect("json string");
        rules.push_str(&format!(
            "      - record: dashboard:q{i}\n        expr: {quoted}\n"
        ));
    }
    let dir = temp_dir("promql");
    let path = dir.join("dashboard.rules.yml");
    std::fs::write(&path, &rules).expect("write rules");
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "the dashboard's PromQL does not parse:\n{}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dashboard_exprs() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana/switchyard-dashboard.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        text.contains("${DS_PROMETHEUS}"),
        "the dashboard's datasource is the DS_PROMETHEUS input"
    );
    assert!(doc["__inputs"]
        .as_array()
        .is_some_and(|i| i.iter().any(|i| i["name"] == "DS_PROMETHEUS")));
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        // Template variables query label values.
                        ("query", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&doc, &mut out);
    out
}

/// Metric names a PromQL expression mentions (identifiers that start like ours).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut cur = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            cur.push(c);
        } else {
            if cur.starts_with("switchyard_") || cur.starts_with("process_") {
                names.push(cur.clone());
            }
            cur.clear();
        }
    }
    names
}

#[test]
fn metrics_follow_the_conventions_and_move_with_traffic() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let st = static_origin();
    let web = free_addr();
    let site = free_addr();
    let cfg = format!(
        "[global]\nworkers = 2\n\n\
         [[vserver]]\nname = \"web\"\nlisten = [\"{web}\"]\ndefault_pool = \"app\"\n\n\
         [[vserver]]\nname = \"site\"\nlisten = [\"{site}\"]\ndefault_pool = \"static\"\n\
         [vserver.cache]\nenabled = true\n\
         [vserver.compression]\nalgorithms = [\"gzip\"]\n\n\
         [[pool]]\nname = \"app\"\n\
         [[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n\n\
         [[pool]]\nname = \"static\"\n[[pool.member]]\naddress = \"{st}\"\n",
        a.addr, b.addr
    );
    let sy = Switchyard::start(&cfg, &[web, site]);
    let before = parse(&sy.admin_get("/metrics"));
    check_conventions(&before);
    assert_eq!(
        value(&before, "switchyard_vserver_requests_total", &[]),
        0.0
    );

    // 20 answered 200 on one connection, then 4 answered 503.
    let d = distribution(web, "/", 20);
    assert_eq!(d.len(), 2, "{d:?}");
    for o in [&a, &b] {
        o.set(|b| b.status = 503);
    }
    let mut c = Client::connect(web);
    for _ in 0..4 {
        assert_eq!(c.get("/").status, 503);
    }
    drop(c);
    // Cacheable and compressible: a miss (compressed), then hits.
    for _ in 0..3 {
        let r = get_with(site, "/page", "Accept-Encoding: gzip\r\n");
        assert_eq!(r.status, 200);
    }

    // A request's duration is recorded once its answer is out: the client
    // may have it a moment before.
    let timed = |m: &[Family]| {
        value(m, "switchyard_vserver_request_duration_seconds_count", &[])
            == value(m, "switchyard_vserver_requests_total", &[])
    };
    let mut text = sy.admin_get("/metrics");
    eventually(Duration::from_secs(2), || {
        text = sy.admin_get("/metrics");
        timed(&parse(&text))
    });
    let m = parse(&text);
    check_conventions(&m);
    let web_l = [("vserver", "web")];
    assert_eq!(value(&m, "switchyard_vserver_requests_total", &web_l), 24.0);
    assert_eq!(
        value(
            &m,
            "switchyard_vserver_responses_total",
            &[("vserver", "web"), ("code", "2xx")]
        ),
        20.0
    );
    assert_eq!(
        value(
            &m,
            "switchyard_vserver_responses_total",
            &[("vserver", "web"), ("code", "5xx")]
        ),
        4.0
    );
    assert_eq!(
        value(
            &m,
            "switchyard_vserver_request_duration_seconds_count",
            &web_l
        ),
        24.0,
        "one duration per request"
    );
    assert!(
        value(
            &m,
            "switchyard_vserver_request_duration_seconds_sum",
            &web_l
        ) > 0.0
    );
    assert!(value(&m, "switchyard_vserver_received_bytes_total", &web_l) > 24.0 * 16.0);
    assert!(value(&m, "switchyard_vserver_sent_bytes_total", &web_l) > 24.0 * 20.0);
    // Two here, and the start's probe for the listener.
    assert!(value(&m, "switchyard_vserver_client_connections_total", &web_l) >= 2.0);
    let app = [("pool", "app")];
    assert_eq!(value(&m, "switchyard_pool_requests_total", &app), 24.0);
    assert_eq!(value(&m, "switchyard_member_requests_total", &app), 24.0);
    assert_eq!(
        value(
            &m,
            "switchyard_member_responses_total",
            &[("pool", "app"), ("code", "5xx")]
        ),
        4.0
    );
    for (o, name) in [(&a, "a"), (&b, "b")] {
        let addr = o.addr.to_string();
        let ml = [("pool", "app"), ("member", addr.as_str())];
        let n = value(&m, "switchyard_member_requests_total", &ml);
        let seen = o
            .seen()
            .iter()
            .filter(|s| s.request_line().starts_with("GET / "))
            .count();
        assert_eq!(n, seen as f64, "{ml:?}");
        assert!(n >= d[name] as f64, "{ml:?} {d:?}");
        assert_eq!(
            value(
                &m,
                "switchyard_member_time_to_first_byte_seconds_count",
                &ml
            ),
            n,
            "one time to first byte per response"
        );
        assert!(value(&m, "switchyard_member_received_bytes_total", &ml) > n * 30.0);
        assert!(value(&m, "switchyard_member_sent_bytes_total", &ml) > n * 16.0);
        assert_eq!(value(&m, "switchyard_member_up", &ml), 1.0);
        let up = [ml[0], ml[1], ("state", "up")];
        assert_eq!(value(&m, "switchyard_member_state", &up), 1.0);
        assert_eq!(
            value(&m, "switchyard_member_state", &ml),
            1.0,
            "one state at a time"
        );
        assert_eq!(value(&m, "switchyard_member_inflight_requests", &ml), 0.0);
    }
    // The cache and compression, per vserver and coding.
    let site_l = [("vserver", "site")];
    assert_eq!(value(&m, "switchyard_vserver_requests_total", &site_l), 3.0);
    assert_eq!(
        value(
            &m,
            "switchyard_vserver_request_duration_seconds_count",
            &site_l
        ),
        3.0,
        "cache hits are timed too"
    );
    assert_eq!(
        value(&m, "switchyard_vserver_cache_misses_total", &site_l),
        1.0
    );
    assert_eq!(
        value(&m, "switchyard_vserver_cache_hits_total", &site_l),
        2.0
    );
    assert_eq!(
        value(&m, "switchyard_vserver_cache_stores_total", &site_l),
        1.0
    );
    let gz = [("vserver", "site"), ("coding", "gzip")];
    assert!(value(&m, "switchyard_vserver_compressed_responses_total", &gz) >= 1.0);
    let zin = value(&m, "switchyard_vserver_compression_input_bytes_total", &gz);
    let zout = value(&m, "switchyard_vserver_compression_output_bytes_total", &gz);
    assert!(
        zin >= BODY as f64 && zout > 0.0 && zout < zin,
        "{zin} {zout}"
    );
    assert_eq!(
        value(
            &m,
            "switchyard_vserver_compressed_responses_total",
            &[("coding", "br")]
        ),
        0.0
    );
    assert!(value(&m, "switchyard_cache_objects", &[]) >= 1.0);
    assert!(value(&m, "switchyard_cache_bytes", &[]) > 0.0);
    // Process and build.
    assert_eq!(value(&m, "switchyard_build_info", &[]), 1.0);
    assert_eq!(value(&m, "switchyard_config_generation", &[]), 1.0);
    assert_eq!(
        value(&m, "switchyard_access_log_dropped_lines_total", &[]),
        0.0
    );
    assert!(value(&m, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(value(&m, "process_open_fds", &[]) > 3.0);
    assert!(value(&m, "process_start_time_seconds", &[]) > 1.6e9);
    // In clock ticks (10 ms): may still be 0 this early.
    assert!(m.iter().any(|f| f.name == "process_cpu_seconds_total"));

    promtool(&text);

    // Every metric the dashboard queries is exposed.
    let exposed: BTreeSet<&str> = m
        .iter()
        .flat_map(|f| &f.samples)
        .map(|s| s.name.as_str())
        .collect();
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 8, "{exprs:?}");
    let mut used = BTreeSet::new();
    for e in &exprs {
        for n in metric_names(e) {
            assert!(
                exposed.contains(n.as_str()),
                "the dashboard queries {n}, which /metrics does not have (in {e})"
            );
            used.insert(n);
        }
    }
    promql_parses(&exprs);
    for need in [
        "switchyard_vserver_requests_total",
        "switchyard_vserver_request_duration_seconds_bucket",
        "switchyard_member_state",
    ] {
        assert!(used.contains(need), "the dashboard does not use {need}");
    }
}

#[test]
fn metric_names_in_promql() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le) (rate(switchyard_vserver_request_duration_seconds_bucket{vserver=~\"$vserver\"}[$__rate_interval])))"
        ),
        vec!["switchyard_vserver_request_duration_seconds_bucket"]
    );
    let s = parse_sample("a_b{x=\"1\\\"2\",le=\"+Inf\"} 3");
    assert_eq!(s.label("x"), Some("1\"2"));
    assert_eq!(s.label("le"), Some("+Inf"));
    assert_eq!(s.value, 3.0);
}
