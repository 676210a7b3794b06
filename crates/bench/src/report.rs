//! Turns a report document (report.json: settings, targets, every sample,
//! every skip) into report.md and SVG charts. `switchyard bench report`
//! re-renders a folder from its report.json, so the markdown can be
//! regenerated without re-running anything.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::cli_load::{fmt_bps, fmt_us};
use crate::json::Json;

const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

pub fn write(report: &Json, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let put = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{}/{name}: {e}", dir.display()))
    };
    put("report.json", &report.to_string_pretty())?;
    let (md, svgs) = render(report);
    for (name, svg) in svgs {
        put(&name, &svg)?;
    }
    put("report.md", &md)
}

/// `switchyard bench report --from DIR/report.json [--out DIR]`
pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = crate::args::Args::parse(args, &[])?;
    let from = a.get("from").ok_or("--from FILE is required")?;
    let out = a.get("out");
    a.finish()?;
    let text = std::fs::read_to_string(&from).map_err(|e| format!("{from}: {e}"))?;
    let doc = Json::parse(&text)?;
    let dir = match out {
        Some(d) => std::path::PathBuf::from(d),
        None => Path::new(&from)
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf(),
    };
    write(&doc, &dir)?;
    println!("report written to {}/report.md", dir.display());
    Ok(0)
}

fn s<'a>(j: &'a Json, k: &str) -> &'a str {
    j.get(k).and_then(Json::as_str).unwrap_or("")
}

fn kpi(j: &Json, k: &str) -> Option<f64> {
    j.get("kpi").and_then(|x| x.get(k)).and_then(Json::as_f64)
}

fn valid(j: &Json) -> bool {
    j.get("valid") == Some(&Json::Bool(true))
}

pub fn fmt_kpi(key: &str, v: f64) -> String {
    match key {
        "throughput_bps" | "goodput_bps" => fmt_bps(v),
        k if k.ends_with("_us") => fmt_us(v as u64),
        "dut_cpu_us_per_req" | "dut_cpu_us_per_handshake" => format!("{v:.1} µs"),
        "input_bytes_per_core_sec" => format!("{:.1} MB/s", v / 1e6),
        "mux_ratio" => format!("{v:.1} : 1"),
        "concurrent_max" => format!("{v:.0}"),
        _ => {
            if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        }
    }
}

fn kpi_title(key: &str) -> &'static str {
    match key {
        "rps" => "requests/s",
        "cps" => "connections/s",
        "tps" => "TLS handshakes/s",
        "throughput_bps" => "throughput",
        "goodput_bps" => "goodput",
        "p99_us" => "P99 latency",
        "concurrent_max" => "concurrent connections",
        "mux_ratio" => "client : server connections",
        "dut_cpu_us_per_req" => "DUT CPU per request",
        "rps_per_core" => "requests/s per DUT core",
        "input_bytes_per_core_sec" => "uncompressed MB/s per DUT core",
        _ => "value",
    }
}

#[derive(Default)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n_valid: usize,
    pub n: usize,
}

/// Median / min / max of a KPI over a target's valid runs of a case.
pub fn stat(samples: &[&Json], key: &str) -> Stat {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|x| valid(x))
        .filter_map(|x| kpi(x, key))
        .filter(|x| x.is_finite())
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let n_valid = v.len();
    if v.is_empty() {
        return Stat {
            n: samples.len(),
            ..Stat::default()
        };
    }
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Stat {
        median,
        min: v[0],
        max: v[v.len() - 1],
        n_valid,
        n: samples.len(),
    }
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// Returns the markdown and the SVG files (name, text).
pub fn render(doc: &Json) -> (String, Vec<(String, String)>) {
    let samples = doc.get("samples").map(Json::as_arr).unwrap_or(&[]);
    let skipped = doc.get("skipped").map(Json::as_arr).unwrap_or(&[]);
    let targets: Vec<String> = doc
        .get("targets")
        .map(Json::as_arr)
        .unwrap_or(&[])
        .iter()
        .map(|t| s(t, "name").to_string())
        .collect();
    let settings = doc.get("settings").cloned().unwrap_or(Json::Null);
    let mut md = String::new();
    let mut svgs = Vec::new();
    let _ = writeln!(md, "# Switchyard bench report\n");
    let _ = writeln!(
        md,
        "Generated by {}. Targets were run interleaved (A B A B ...), each restarted for every run; \
         figures are the median of the valid runs with min and max. A run is invalid when the DUT \
         died or more than {:.0} % of transactions failed. Ratios are this target's median over the \
         peer's: above 1 means more of a higher-is-better KPI (or more of a lower-is-better one, \
         so read the column title).\n",
        s(doc, "generated_by"),
        settings.get("max_error_ratio").and_then(Json::as_f64).unwrap_or(0.01) * 100.0
    );
    let _ = writeln!(md, "| setting | value |\n|---|---|");
    for k in ["runs", "quick", "dut_cpu", "load_cpu", "wall_secs"] {
        let v = settings
            .get(k)
            .map(Json::to_string_compact)
            .unwrap_or_default();
        let _ = writeln!(md, "| {k} | {v} |");
    }
    if let Some(m) = doc.get("machine") {
        let _ = writeln!(
            md,
            "| machine | {} |",
            m.to_string_compact().replace('|', "/")
        );
        if m.get("tcp_congestion_control").and_then(Json::as_str) == Some("bbr") {
            let _ = writeln!(
                md,
                "\n**TCP congestion control is bbr.** On loopback about 1 % of large responses (512 KB) stall for 40-50 ms after 128 KiB, whatever the target, and the P99 of those rows measures that; Debian's default is cubic (docs/bench.md, \"Congestion control\")."
            );
        }
    }
    let runs = settings.get("runs").and_then(Json::as_f64).unwrap_or(0.0);
    if runs < 3.0 {
        let _ = writeln!(
            md,
            "\n**Fewer than 3 runs per target: a smoke test, not a valid comparison.**"
        );
    }
    let _ = writeln!(
        md,
        "\n## Targets\n\n| target | version | capabilities | notes |\n|---|---|---|---|"
    );
    for t in doc.get("targets").map(Json::as_arr).unwrap_or(&[]) {
        let caps: Vec<&str> = t
            .get("caps")
            .map(Json::as_arr)
            .unwrap_or(&[])
            .iter()
            .filter_map(Json::as_str)
            .collect();
        let notes: Vec<&str> = t
            .get("notes")
            .map(Json::as_arr)
            .unwrap_or(&[])
            .iter()
            .filter_map(Json::as_str)
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            s(t, "name"),
            s(t, "version"),
            caps.join(", "),
            notes.join("; ")
        );
    }

    // scenario -> case -> target -> samples, in the order they ran.
    let mut order: Vec<(String, Vec<String>)> = Vec::new();
    let mut by: BTreeMap<(String, String, String), Vec<&Json>> = BTreeMap::new();
    for x in samples {
        let (sc, case, tg) = (
            s(x, "scenario").to_string(),
            s(x, "case").to_string(),
            s(x, "target").to_string(),
        );
        match order.iter_mut().find(|(n, _)| *n == sc) {
            Some((_, cases)) => {
                if !cases.contains(&case) {
                    cases.push(case.clone());
                }
            }
            None => order.push((sc.clone(), vec![case.clone()])),
        }
        by.entry((sc, case, tg)).or_default().push(x);
    }
    for (sc, cases) in &order {
        let _ = writeln!(md, "\n## {sc}\n");
        let mut panels = Vec::new();
        for case in cases {
            let first = by
                .iter()
                .find(|((a, b, _), _)| a == sc && b == case)
                .and_then(|(_, v)| v.first().copied());
            let Some(first) = first else { continue };
            let key = s(first, "primary").to_string();
            let hib = first.get("higher_is_better") != Some(&Json::Bool(false));
            let here: Vec<&String> = targets
                .iter()
                .filter(|t| by.contains_key(&(sc.clone(), case.clone(), (*t).clone())))
                .collect();
            let _ = writeln!(
                md,
                "### {case}\n\nKPI: {} ({})\n",
                kpi_title(&key),
                if hib {
                    "higher is better"
                } else {
                    "lower is better"
                }
            );
            let mut head = format!("| target | median | min | max | valid runs | DUT CPU/req | DUT CPU % | P99 | errors |{}", scenario_extra_title(sc));
            let mut sep = "|---|---|---|---|---|---|---|---|---|".to_string();
            if !scenario_extra_title(sc).is_empty() {
                sep.push_str("---|");
            }
            for p in &here {
                let _ = write!(head, " vs {p} |");
                sep.push_str("---|");
            }
            let _ = writeln!(md, "{head}\n{sep}");
            let mut bars = Vec::new();
            let mut notes = Vec::new();
            let mut shared_notes: Vec<(String, Vec<String>)> = Vec::new();
            for t in &here {
                let v = &by[&(sc.clone(), case.clone(), (*t).clone())];
                let st = stat(v, &key);
                let cpu = stat(v, "dut_cpu_us_per_req");
                let cpup = stat(v, "dut_cpu_pct");
                let p99 = stat(v, "p99_us");
                let err = stat(v, "error_ratio");
                let spread = if st.median > 0.0 {
                    (st.max - st.min) / st.median
                } else {
                    0.0
                };
                let med = if st.n_valid > 0 {
                    fmt_kpi(&key, st.median)
                } else {
                    "—".into()
                };
                let _ = write!(
                    md,
                    "| {t} | {med}{} | {} | {} | {}/{} | {:.1} µs | {:.0} % | {} | {:.2} % |",
                    if spread > 0.1 {
                        format!(" (spread {:.0} %)", spread * 100.0)
                    } else {
                        String::new()
                    },
                    fmt_kpi(&key, st.min),
                    fmt_kpi(&key, st.max),
                    st.n_valid,
                    st.n,
                    cpu.median,
                    cpup.median,
                    fmt_us(p99.median as u64),
                    err.median * 100.0
                );
                if let Some(k) = scenario_extra_key(sc) {
                    let e = stat(v, k);
                    let _ = write!(md, " {} |", fmt_extra(k, e.median));
                }
                for p in &here {
                    let pv = stat(&by[&(sc.clone(), case.clone(), (*p).clone())], &key);
                    if p == t {
                        md.push_str(" — |");
                    } else if pv.n_valid > 0 && st.n_valid > 0 && pv.median > 0.0 {
                        let _ = write!(md, " {:.2}x |", st.median / pv.median);
                    } else {
                        md.push_str(" n/a |");
                    }
                }
                md.push('\n');
                for x in v.iter() {
                    if !valid(x) {
                        notes.push(format!(
                            "- {t} run {}: **invalid**: {}",
                            x.get("run").and_then(Json::as_f64).unwrap_or(0.0) as u64 + 1,
                            s(x, "reason")
                        ));
                    }
                    for n in x.get("notes").map(Json::as_arr).unwrap_or(&[]) {
                        let text = n.as_str().unwrap_or("").to_string();
                        match shared_notes.iter_mut().find(|(n, _)| *n == text) {
                            Some((_, who)) => {
                                if !who.contains(t) {
                                    who.push((*t).clone());
                                }
                            }
                            None => shared_notes.push((text, vec![(*t).clone()])),
                        }
                    }
                }
                bars.push((t.to_string(), st));
            }
            if sc == "waf" {
                if let Some(line) = waf_target_line(&by, sc, case, &key) {
                    let _ = writeln!(md, "\n{line}");
                }
            }
            // EANTC style: min / avg / max per second over the steady phase.
            let series = match key.as_str() {
                "rps" => Some("rps_per_sec"),
                "cps" => Some("cps_per_sec"),
                "throughput_bps" => Some("throughput_per_sec"),
                _ => None,
            };
            if let Some(series) = series {
                let mut parts = Vec::new();
                for t in &here {
                    let v = &by[&(sc.clone(), case.clone(), (*t).clone())];
                    let mut ok: Vec<&&Json> = v.iter().filter(|x| valid(x)).collect();
                    ok.sort_by(|a, b| {
                        kpi(a, &key)
                            .unwrap_or(0.0)
                            .total_cmp(&kpi(b, &key).unwrap_or(0.0))
                    });
                    let mam = ok
                        .get(ok.len() / 2)
                        .and_then(|m| m.get("load"))
                        .and_then(|l| l.get(series));
                    if let Some(m) = mam {
                        let f = |k: &str| m.get(k).and_then(Json::as_f64).unwrap_or(0.0);
                        parts.push(format!(
                            "{t} {} / {} / {}",
                            fmt_kpi(&key, f("min")),
                            fmt_kpi(&key, f("avg")),
                            fmt_kpi(&key, f("max"))
                        ));
                    }
                }
                if !parts.is_empty() {
                    let _ = writeln!(
                        md,
                        "\nPer second in the steady phase, min / avg / max (median run): {}",
                        parts.join("; ")
                    );
                }
            }
            // A note every target got is printed once.
            for (text, who) in shared_notes.drain(..) {
                if who.len() == here.len() && here.len() > 1 {
                    notes.push(format!("- {text}"));
                } else {
                    notes.push(format!("- {}: {text}", who.join(", ")));
                }
            }
            if !notes.is_empty() {
                let _ = writeln!(md, "\n{}", notes.join("\n"));
            }
            md.push('\n');
            panels.push((case.clone(), key.clone(), bars));
            if sc == "latency" || sc == "l7-rps" && case.contains("unlimited") {
                let curves: Vec<(String, Vec<(f64, f64)>)> = here
                    .iter()
                    .filter_map(|t| {
                        median_curve(&by[&(sc.clone(), case.clone(), (*t).clone())])
                            .map(|c| (t.to_string(), c))
                    })
                    .collect();
                if !curves.is_empty() {
                    let name = format!("latency-{}-{}.svg", slug(sc), slug(case));
                    svgs.push((name.clone(), latency_svg(&format!("{sc}: {case}"), &curves)));
                    let _ = writeln!(md, "![latency percentiles]({name})\n");
                }
            }
        }
        if !panels.is_empty() {
            let name = format!("{}.svg", slug(sc));
            svgs.push((name.clone(), bar_svg(sc, &panels, &targets)));
            let _ = writeln!(md, "![{sc}]({name})\n");
        }
    }
    report_004_section(&mut md, &by, &targets);
    waf_attack_section(&mut md, doc);
    if !skipped.is_empty() {
        let _ = writeln!(
            md,
            "\n## Skipped\n\n| scenario | case | target | why |\n|---|---|---|---|"
        );
        for x in skipped {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                s(x, "scenario"),
                s(x, "case"),
                s(x, "target"),
                s(x, "reason")
            );
        }
    }
    let _ = writeln!(
        md,
        "\n---\nEvery sample (per-second series, histograms' percentiles, DUT CPU and RSS, origin counters) is in report.json; \
         `switchyard bench report --from report.json` re-renders this file."
    );
    (md, svgs)
}

/// Report 004's four ratios (P99 idle and stressed, throughput or
/// transaction rate; TLS 1.3 and 1.2) for every target against Envoy,
/// with CPX's published ratios beside them. P99 ratios are Envoy's over
/// the target's (above 1: the target is faster), as the report wrote
/// them; maxima are the target's over Envoy's.
fn report_004_section(md: &mut String, by: &ByCase, targets: &[String]) {
    let sc = "report-004";
    if !by.keys().any(|(s, _, _)| s == sc) {
        return;
    }
    let med = |case: &str, t: &str, key: &str| -> Option<f64> {
        let v = by.get(&(sc.to_string(), case.to_string(), t.to_string()))?;
        let st = stat(v, key);
        (st.n_valid > 0 && st.median > 0.0).then_some(st.median)
    };
    let _ = writeln!(
        md,
        "\n## Report 004's ratios against Envoy\n\n\
         Report 004 (Tolly, 2021): Citrix ADC CPX against Envoy 1.14, one core each. \
         P99: Envoy's over the target's (above 1: the target answers faster), from Fortio \
         beside the load, the harness's own P99 in brackets; stressed is each target at 95 % \
         of its own maximum. Maximum: the target's over Envoy's (throughput for the volume \
         test, transactions/s for the transaction test), with each one's DUT CPU % at its \
         maximum: well below 100 % something else (the load generator, a neighbour on the \
         DUT's core) set the maximum, and the CPU-per-request ratios (Envoy's over the \
         target's: at each one's maximum, and at one offered rate when the generator \
         saturated) are the figures to read.\n"
    );
    if !targets.iter().any(|t| t == "envoy") {
        let _ = writeln!(md, "No `envoy` target in this run: no ratios.\n");
        return;
    }
    let others: Vec<&String> = targets.iter().filter(|t| *t != "envoy").collect();
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".into(),
    };
    for t in others {
        let _ = writeln!(
            md,
            "### {t} against Envoy\n\n\
             | test | TLS | P99 idle | P99 stressed | CPX (report 004) | maximum | DUT CPU % at max ({t} / envoy) | CPU per request at max | CPU per request at one rate | CPX (report 004) |\n\
             |---|---|---|---|---|---|---|---|---|---|"
        );
        for (test, v, cpx_p99, cpx_max) in crate::scenario::REPORT_004_CPX {
            let name = |w: &str| crate::scenario::report_004_name(v, test, w);
            let p99 =
                |w: &str, key: &str| ratio(med(&name(w), "envoy", key), med(&name(w), t, key));
            let max_key = if *test == "volume" {
                "throughput_bps"
            } else {
                "rps"
            };
            let max = ratio(
                med(&name("max"), t, max_key),
                med(&name("max"), "envoy", max_key),
            );
            let cpu = |who: &str| {
                med(&name("max"), who, "dut_cpu_pct")
                    .map(|c| format!("{c:.0} %"))
                    .unwrap_or_else(|| "n/a".into())
            };
            let cpu_at_max = ratio(
                med(&name("max"), "envoy", "dut_cpu_us_per_req"),
                med(&name("max"), t, "dut_cpu_us_per_req"),
            );
            // The equal-offered-rate rerun of the max case, when the
            // generator saturated.
            let eq = by
                .keys()
                .filter(|(s, c, _)| s == sc && c.starts_with(&format!("{} @ ", name("max"))))
                .map(|(_, c, _)| c.clone())
                .next();
            let cpu_ratio = eq
                .map(|c| {
                    ratio(
                        med(&c, "envoy", "dut_cpu_us_per_req"),
                        med(&c, t, "dut_cpu_us_per_req"),
                    )
                })
                .unwrap_or_else(|| "—".into());
            let _ = writeln!(
                md,
                "| {test} | {v} | {} ({}) | {} ({}) | {cpx_p99:.1}x | {max} | {} / {} | {cpu_at_max} | {cpu_ratio} | {cpx_max:.1}x |",
                p99("idle 100 req/s", "fortio_p99_us"),
                p99("idle 100 req/s", "p99_us"),
                p99("stressed 95%", "fortio_p99_us"),
                p99("stressed 95%", "p99_us"),
                cpu(t),
                cpu("envoy"),
            );
        }
        md.push('\n');
    }
}

/// Issue 11: Switchyard keeps at least this many times nginx+ModSecurity's
/// transactions per core.
pub const WAF_TARGET_RATIO: f64 = 5.0;

type ByCase<'a> = BTreeMap<(String, String, String), Vec<&'a Json>>;

/// "Switchyard / nginx+ModSecurity: 6.1x (issue 11's target: >= 5x, met)".
fn waf_target_line(by: &ByCase, sc: &str, case: &str, key: &str) -> Option<String> {
    let get = |t: &str| by.get(&(sc.to_string(), case.to_string(), t.to_string()));
    let a = stat(get("switchyard")?, key);
    let b = stat(get("nginx")?, key);
    if a.n_valid == 0 || b.n_valid == 0 || b.median <= 0.0 {
        return Some(format!(
            "Issue 11's target (Switchyard >= {WAF_TARGET_RATIO:.0}x nginx+ModSecurity per core): no ratio, a target has no valid run"
        ));
    }
    let r = a.median / b.median;
    Some(format!(
        "Switchyard / nginx+ModSecurity, {}: **{r:.2}x** (issue 11's target: >= {WAF_TARGET_RATIO:.0}x, {})",
        kpi_title(key),
        if r >= WAF_TARGET_RATIO { "met" } else { "missed" }
    ))
}

/// The attack set's table: blocked per target, then every request's status.
fn waf_attack_section(md: &mut String, doc: &Json) {
    let sets = doc.get("waf_attacks").map(Json::as_arr).unwrap_or(&[]);
    if sets.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## WAF attack set\n\nEach request sent once, on its own TLS 1.3 connection, to the listener \
         where the WAF inspects every request. Blocked: answered 403. Benign: the scenario's own GETs and \
         form POSTs and a few more, which must all get 200.\n\n\
         | target | attacks blocked | benign refused |\n|---|---|---|"
    );
    let num = |j: &Json, k: &str| j.get(k).and_then(Json::as_f64).unwrap_or(0.0) as u64;
    for x in sets {
        if let Some(e) = x.get("error").and_then(Json::as_str) {
            let _ = writeln!(md, "| {} | {e} | |", s(x, "target"));
            continue;
        }
        let _ = writeln!(
            md,
            "| {} | {} / {} | {} / {} |",
            s(x, "target"),
            num(x, "blocked"),
            num(x, "attacks"),
            num(x, "benign_refused"),
            num(x, "benign")
        );
    }
    let ok: Vec<&Json> = sets.iter().filter(|x| x.get("error").is_none()).collect();
    for (title, key) in [("attack", "attack_answers"), ("benign", "benign_answers")] {
        let Some(first) = ok.first() else { return };
        let rows = first.get(key).map(Json::as_arr).unwrap_or(&[]);
        let _ = write!(md, "\n| {title} | request |");
        for x in &ok {
            let _ = write!(md, " {} |", s(x, "target"));
        }
        let _ = write!(md, "\n|---|---|");
        for _ in &ok {
            md.push_str("---|");
        }
        md.push('\n');
        for (i, r) in rows.iter().enumerate() {
            let _ = write!(
                md,
                "| {} | {} |",
                s(r, "category"),
                s(r, "name").replace('|', "\\|")
            );
            for x in &ok {
                let a = x.get(key).map(Json::as_arr).and_then(|v| v.get(i));
                let cell = match a {
                    Some(a) => match a.get("status").and_then(Json::as_f64) {
                        Some(st) => format!("{st:.0}"),
                        None => s(a, "error").to_string(),
                    },
                    None => String::new(),
                };
                let _ = write!(md, " {cell} |");
            }
            md.push('\n');
        }
    }
}

fn scenario_extra_key(sc: &str) -> Option<&'static str> {
    match sc {
        "compression" => Some("compression_ratio"),
        "caching" => Some("cache_hit_ratio"),
        "concurrency" => Some("mem_per_conn_bytes"),
        "multiplexing" => Some("server_conns_avg"),
        "ssl-tps" => Some("dut_cpu_us_per_handshake"),
        "waf" => Some("rps"),
        "report-004" => Some("fortio_p99_us"),
        _ => None,
    }
}

fn scenario_extra_title(sc: &str) -> &'static str {
    match sc {
        "compression" => " compression ratio (wire / original) |",
        "caching" => " cache hit ratio |",
        "concurrency" => " DUT memory per connection |",
        "multiplexing" => " server connections |",
        "ssl-tps" => " DUT CPU per handshake |",
        "waf" => " requests/s |",
        "report-004" => " Fortio P99 |",
        _ => "",
    }
}

fn fmt_extra(k: &str, v: f64) -> String {
    match k {
        "compression_ratio" => format!("{v:.3}"),
        "cache_hit_ratio" => format!("{:.1} %", v * 100.0),
        "mem_per_conn_bytes" => format!("{:.1} KB", v / 1024.0),
        "dut_cpu_us_per_handshake" => format!("{v:.1} µs"),
        "rps" => format!("{v:.0}"),
        "fortio_p99_us" => {
            if v > 0.0 {
                fmt_us(v as u64)
            } else {
                "—".into()
            }
        }
        _ => format!("{v:.1}"),
    }
}

/// The latency curve of the run with the median P99.
fn median_curve(v: &[&Json]) -> Option<Vec<(f64, f64)>> {
    let mut ok: Vec<&&Json> = v.iter().filter(|x| valid(x)).collect();
    ok.sort_by(|a, b| {
        kpi(a, "p99_us")
            .unwrap_or(0.0)
            .total_cmp(&kpi(b, "p99_us").unwrap_or(0.0))
    });
    let m = ok.get(ok.len() / 2)?;
    let c = m.get("load")?.get("latency_curve")?;
    Some(
        c.as_arr()
            .iter()
            .filter_map(|p| {
                let a = p.as_arr();
                Some((a.first()?.as_f64()?, a.get(1)?.as_f64()?))
            })
            .collect(),
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Small multiples: one panel per case (each with its own scale), one bar per
/// target at the median, a whisker from min to max.
/// (case, KPI key, per-target statistics).
pub type Panel = (String, String, Vec<(String, Stat)>);

pub fn bar_svg(title: &str, panels: &[Panel], targets: &[String]) -> String {
    let pw = 230.0;
    let ph = 220.0;
    let cols = panels.len().min(4);
    let rows = panels.len().div_ceil(4);
    let w = pw * cols as f64 + 20.0;
    let h = ph * rows as f64 + 70.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(
        o,
        r##"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="15" font-weight="bold">{}</text>"##,
        esc(title)
    );
    for (i, t) in targets.iter().enumerate() {
        let x = 10.0 + i as f64 * 120.0;
        let _ = writeln!(
            o,
            r##"<rect x="{x}" y="30" width="12" height="12" fill="{}"/><text x="{}" y="40">{}</text>"##,
            COLORS[i % COLORS.len()],
            x + 16.0,
            esc(t)
        );
    }
    for (pi, (case, key, bars)) in panels.iter().enumerate() {
        let px = 10.0 + (pi % 4) as f64 * pw;
        let py = 60.0 + (pi / 4) as f64 * ph;
        let top = bars
            .iter()
            .map(|(_, s)| s.max.max(s.median))
            .fold(0.0, f64::max)
            .max(1e-9);
        let plot_h = ph - 70.0;
        let base_y = py + 20.0 + plot_h;
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{}" font-weight="bold">{}</text>"##,
            px + 5.0,
            py + 12.0,
            esc(case)
        );
        let _ = writeln!(
            o,
            r##"<line x1="{px}" y1="{base_y}" x2="{}" y2="{base_y}" stroke="#888"/>"##,
            px + pw - 20.0
        );
        let bw = ((pw - 40.0) / bars.len().max(1) as f64).min(50.0);
        for (bi, (t, st)) in bars.iter().enumerate() {
            let ci = targets.iter().position(|x| x == t).unwrap_or(bi);
            let x = px + 10.0 + bi as f64 * (bw + 6.0);
            let bh = st.median / top * plot_h;
            let _ = writeln!(
                o,
                r##"<rect x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{bh:.1}" fill="{}"><title>{} {}</title></rect>"##,
                base_y - bh,
                COLORS[ci % COLORS.len()],
                esc(t),
                esc(&fmt_kpi(key, st.median))
            );
            if st.n_valid > 1 {
                let y1 = base_y - st.min / top * plot_h;
                let y2 = base_y - st.max / top * plot_h;
                let cx = x + bw / 2.0;
                let _ = writeln!(
                    o,
                    r##"<line x1="{cx:.1}" y1="{y1:.1}" x2="{cx:.1}" y2="{y2:.1}" stroke="black"/><line x1="{:.1}" y1="{y2:.1}" x2="{:.1}" y2="{y2:.1}" stroke="black"/><line x1="{:.1}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}" stroke="black"/>"##,
                    cx - 4.0,
                    cx + 4.0,
                    cx - 4.0,
                    cx + 4.0
                );
            }
            let label = if st.n_valid == 0 {
                "invalid".to_string()
            } else {
                fmt_kpi(key, st.median)
            };
            let _ = writeln!(
                o,
                r##"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text>"##,
                x + bw / 2.0,
                base_y + 12.0,
                esc(&label)
            );
        }
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{}" font-size="9" fill="#555">{}</text>"##,
            px + 5.0,
            base_y + 26.0,
            esc(kpi_title(key))
        );
    }
    o.push_str("</svg>\n");
    o
}

/// Latency against percentile on a "nines" axis (50, 90, 99, 99.9, 99.99).
pub fn latency_svg(title: &str, curves: &[(String, Vec<(f64, f64)>)]) -> String {
    let (w, h) = (640.0, 360.0);
    let (l, r, t, b) = (70.0, 20.0, 40.0, 50.0);
    let nines = |p: f64| -((1.0 - p.min(99.99) / 100.0).max(1e-4)).log10();
    let xmax = 4.0;
    let ymax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().filter(|(p, _)| *p <= 99.99).map(|(_, v)| *v))
        .fold(1.0, f64::max)
        * 1.1;
    let x = |p: f64| l + nines(p) / xmax * (w - l - r);
    let y = |v: f64| h - b - v / ymax * (h - t - b);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(
        o,
        r##"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="14" font-weight="bold">{}</text>"##,
        esc(title)
    );
    let _ = writeln!(
        o,
        r##"<line x1="{l}" y1="{}" x2="{}" y2="{}" stroke="#888"/><line x1="{l}" y1="{t}" x2="{l}" y2="{}" stroke="#888"/>"##,
        h - b,
        w - r,
        h - b,
        h - b
    );
    for p in [0.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
        let xx = x(p);
        let _ = writeln!(
            o,
            r##"<line x1="{xx:.1}" y1="{t}" x2="{xx:.1}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">p{p}</text>"##,
            h - b,
            h - b + 15.0
        );
    }
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            l - 5.0,
            y(v) + 4.0,
            fmt_us(v as u64)
        );
    }
    let _ = writeln!(
        o,
        r##"<text x="{}" y="{}" text-anchor="middle">percentile</text>"##,
        (l + w - r) / 2.0,
        h - 10.0
    );
    for (i, (name, c)) in curves.iter().enumerate() {
        let pts: Vec<String> = c
            .iter()
            .filter(|(p, _)| *p <= 99.99)
            .map(|(p, v)| format!("{:.1},{:.1}", x(*p), y(*v)))
            .collect();
        let col = COLORS[i % COLORS.len()];
        let _ = writeln!(
            o,
            r##"<polyline fill="none" stroke="{col}" stroke-width="2" points="{}"/>"##,
            pts.join(" ")
        );
        let _ = writeln!(
            o,
            r##"<rect x="{}" y="{}" width="12" height="12" fill="{col}"/><text x="{}" y="{}">{}</text>"##,
            l + 10.0,
            t + i as f64 * 16.0,
            l + 26.0,
            t + 10.0 + i as f64 * 16.0,
            esc(name)
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(cc: &str) -> Json {
        Json::parse(&format!(
            r#"{{"settings": {{"runs": 3}}, "machine": {{"cpus": 2, "tcp_congestion_control": "{cc}"}}, "targets": [], "samples": []}}"#
        ))
        .expect("a valid document")
    }

    #[test]
    fn the_report_warns_when_the_machine_runs_bbr() {
        let (bbr, _) = render(&doc("bbr"));
        assert!(bbr.contains("TCP congestion control is bbr"), "{bbr}");
        assert!(bbr.contains("\"tcp_congestion_control\":\"bbr\""), "{bbr}");
        let (cubic, _) = render(&doc("cubic"));
        assert!(!cubic.contains("congestion control is"), "{cubic}");
    }
}
