//! `switchyard bench compare`: scenarios against several devices under test,
//! interleaved (A B A B ...), the DUT restarted for every run, every sample
//! kept, and a report folder at the end.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::dut::{self, Cap, Listener, Ports, Running, Target};
use crate::json::{obj, Json};
use crate::load::{self, Edge, LoadConfig, LoadResult};
use crate::origin::{self, OriginHandle, OriginOpts, OriginStats};
use crate::scenario::{self, Case, Kpi, Mode, Timing};

pub struct Opts {
    pub targets: Vec<Target>,
    pub scenarios: Vec<&'static str>,
    pub runs: usize,
    pub quick: bool,
    pub out: PathBuf,
    pub dut_cpu: Option<usize>,
    pub load_cpu: Option<usize>,
    pub ports: Ports,
    pub progress: bool,
    /// Error share above which a run is invalid.
    pub max_error_ratio: f64,
    pub timing: Timing,
    /// An unmeasured run per target before the first case (zero: none).
    pub warm_up: std::time::Duration,
}

pub const HELP: &str = "switchyard bench compare --targets switchyard,haproxy,nginx[,varnish,haproxy28,nginx131,envoy,pingora,caddy] --scenario l7-rps[,latency,report-004,...|all]
  (envoy, haproxy28, nginx131, pingora, caddy and Fortio: scripts/install-bench-peers.sh NAME; a missing one is skipped)
  --runs N            runs per target (3; 1 with --quick)
  --warm-up D         one unmeasured run per target before the first case (2s; 0 for none):
                      the first measured round was slow for every target without it
  --quick             short phases: every scenario in a few minutes (a smoke test)
  --duration D        steady phase (the reports': 600s; equal-cpu 7 min)
  --ramp-up D         (180s)   --ramp-down D (180s)
  --out DIR           report folder (bench-report-<time>)
  --dut-cpu N         pin the DUT to this CPU (0 when the machine has 2+)
  --load-cpu N        pin the load generator and origin to this CPU (1)
  --port-base N       listeners at N.. and origins at N+1001.. (26080)
  --switchyard-bin P  the switchyard binary (default: this executable or its sibling)
  --caps T=C,C        override a target's capability list, e.g. switchyard=l7,ipv6,l4
  --crs DIR           the OWASP CRS v4 the WAF targets load (default: $SWITCHYARD_BENCH_CRS, ../shared/crs)
  --quiet             no progress line";

pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = Args::parse(args, &["quick", "quiet", "help"])?;
    if a.flag("help") {
        println!("{HELP}");
        return Ok(0);
    }
    let quick = a.flag("quick");
    let quiet = a.flag("quiet");
    let mut names = a.list("targets");
    names.extend(a.list("target"));
    let names = if names.is_empty() {
        vec!["switchyard".to_string(), "haproxy".into(), "nginx".into()]
    } else {
        names
    };
    let mut sc = a.list("scenario");
    sc.extend(a.list("scenarios"));
    if sc.is_empty() {
        return Err("--scenario is required (a list, or all)".into());
    }
    let scenarios = scenario::expand(&sc)?;
    let runs = a
        .num::<usize>("runs")?
        .unwrap_or(if quick { 1 } else { 3 })
        .max(1);
    let mut timing = Timing::new(quick);
    if let Some(d) = a.duration("duration")? {
        timing.steady = d;
        timing.custom = true;
    }
    if let Some(d) = a.duration("ramp-up")? {
        timing.ramp_up = d;
        timing.custom = true;
    }
    if let Some(d) = a.duration("ramp-down")? {
        timing.ramp_down = d;
        timing.custom = true;
    }
    let out = a
        .get("out")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("bench-report-{}", unix_now())));
    // Absolute: the DUTs run in their own directories and read their
    // configuration (and nginx its prefix) through these paths.
    let out = std::path::absolute(&out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    let cpus = crate::sys::allowed_cpus();
    let dut_cpu = a.num::<usize>("dut-cpu")?.or((cpus >= 2).then_some(0));
    let load_cpu = a.num::<usize>("load-cpu")?.or((cpus >= 2).then_some(1));
    let base = a.num::<u16>("port-base")?.unwrap_or(26080);
    let sy_bin = a.get("switchyard-bin").map(PathBuf::from);
    let caps = a.get_all("caps");
    let crs = a.get("crs").map(PathBuf::from);
    let warm_up = a
        .duration("warm-up")?
        .unwrap_or(std::time::Duration::from_secs(2));
    a.finish()?;
    let mut targets = Vec::new();
    for n in &names {
        let mut t = dut::resolve(n, sy_bin.as_deref())?;
        if let Some(c) = &crs {
            dut::use_crs(&mut t, c)?;
        }
        targets.push(t);
    }
    for c in caps {
        let (t, list) = c.split_once('=').ok_or("--caps wants TARGET=cap,cap")?;
        let caps: Vec<Cap> = list
            .split(',')
            .map(|x| Cap::parse(x.trim()).ok_or_else(|| format!("unknown capability {x}")))
            .collect::<Result<_, _>>()?;
        for tg in targets.iter_mut().filter(|x| x.name == t) {
            tg.caps = caps.clone();
        }
    }
    if runs < 3 {
        eprintln!("note: {runs} run(s) per target: fine for a smoke test, but the methodology asks for at least 3");
    }
    let opts = Opts {
        targets,
        scenarios,
        runs,
        quick,
        out: out.clone(),
        dut_cpu,
        load_cpu,
        ports: Ports::from_base(base),
        progress: !quiet,
        max_error_ratio: 0.01,
        timing,
        warm_up,
    };
    let report = run(&opts)?;
    crate::report::write(&report, &out)?;
    println!("report written to {}/report.md", out.display());
    Ok(0)
}

/// The kernel's default TCP congestion control, which every target's
/// sockets get: it decides the tail of large responses on loopback
/// (docs/bench.md, "Congestion control").
fn congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn skipped(case: &Case, target: &str, reason: &str) -> Json {
    obj()
        .set("scenario", case.scenario)
        .set("case", case.name.clone())
        .set("target", target)
        .set("reason", reason)
}

/// Runs everything and returns the report document (see report.rs).
pub fn run(o: &Opts) -> Result<Json, String> {
    let nofile = crate::sys::raise_nofile();
    let cpus = crate::sys::allowed_cpus();
    if let Some(c) = o.load_cpu {
        // Threads started from here on (origin, generator) inherit this.
        if let Err(e) = crate::sys::pin_current_thread(c) {
            eprintln!("warning: cannot pin to CPU {c}: {e}");
        }
    }
    let origin = origin::spawn_origin(
        &[o.ports.web_origin, o.ports.images_origin],
        OriginOpts {
            threads: 1,
            ..OriginOpts::default()
        },
    )
    .map_err(|e| {
        format!(
            "origin: cannot listen on {} / {}: {e}",
            o.ports.web_origin, o.ports.images_origin
        )
    })?;
    // Our process holds the client sockets (and the origin's): keep headroom.
    let max_conns = ((nofile as usize).saturating_sub(1000) / 2).clamp(100, 18_000);
    let timing = o.timing;
    let mut samples = Vec::new();
    let mut skips = Vec::new();
    let mut waf_attacks = Vec::new();
    let started = Instant::now();
    let mut total = 0;
    let mut estimate = 0.0;
    for sc in &o.scenarios {
        for case in scenario::cases(sc, &timing, max_conns)? {
            if case.skip_all.is_none() {
                let able = o
                    .targets
                    .iter()
                    .filter(|t| case.needs.iter().all(|c| t.caps.contains(c)));
                let n = able.count() * o.runs;
                total += n;
                let l = &case.load;
                let probes = match case.mode {
                    Mode::Plain => 0.0,
                    Mode::Stressed => 1.0,
                    Mode::EqualCpu => 4.0,
                };
                let probe_secs = if o.quick { 1.2 } else { 5.2 };
                estimate += n as f64
                    * ((l.ramp_up + l.duration + l.ramp_down).as_secs_f64()
                        + probes * probe_secs
                        + 0.5);
            }
        }
    }
    if o.progress {
        let e = estimate as u64;
        eprintln!(
            "{total} runs, about {}h{:02}m{}",
            e / 3600,
            e / 60 % 60,
            if !o.quick && !timing.custom {
                " with the reports' phases (180 s / 600 s / 180 s); --quick, or --duration 30s --ramp-up 5s --ramp-down 1s, to shorten"
            } else {
                ""
            }
        );
    }
    let mut prog = Progress {
        done: 0,
        total,
        started,
    };
    warm_up(o, &origin, &timing, max_conns)?;
    for sc in &o.scenarios {
        for case in scenario::cases(sc, &timing, max_conns)? {
            if let Some(r) = &case.skip_all {
                for t in &o.targets {
                    skips.push(skipped(&case, &t.name, r));
                }
                continue;
            }
            let mut able = Vec::new();
            for t in &o.targets {
                let missing: Vec<&str> = case
                    .needs
                    .iter()
                    .filter(|c| !t.caps.contains(c))
                    .map(|c| c.name())
                    .collect();
                if missing.is_empty() {
                    able.push(t);
                } else {
                    let why = format!(
                        "{} cannot do {} ({})",
                        t.name,
                        missing.join(", "),
                        t.notes.join("; ")
                    );
                    skips.push(skipped(&case, &t.name, &why));
                }
            }
            let mut case_samples = Vec::new();
            for run in 0..o.runs {
                for t in &able {
                    let s = run_sample(o, &origin, t, &case, run, &prog.next());
                    case_samples.push(s);
                }
            }
            // The generator saturated: peak rates say nothing about the DUT.
            // Compare CPU time per request at one offered rate instead.
            let saturated = case_samples.iter().any(|s| {
                s.get("kpi").and_then(|k| k.get("generator_saturated")) == Some(&Json::Bool(true))
            });
            if saturated && case.load.rate.is_none() && case.mode == Mode::Plain && able.len() > 1 {
                let min_rps = able
                    .iter()
                    .filter_map(|t| median_kpi(&case_samples, &t.name, "rps"))
                    .fold(f64::INFINITY, f64::min);
                if min_rps.is_finite() && min_rps > 10.0 {
                    let rate = (min_rps * 0.8).round();
                    let mut c2 = case.clone();
                    c2.name = format!("{} @ {rate:.0} req/s (equal offered rate)", case.name);
                    c2.load.rate = Some(rate);
                    c2.kpi = Kpi::CpuPerReq;
                    c2.note = Some("the load generator saturated: DUT CPU per request at the same offered rate".into());
                    for run in 0..o.runs {
                        for t in &able {
                            prog.total += 1;
                            case_samples.push(run_sample(o, &origin, t, &c2, run, &prog.next()));
                        }
                    }
                }
            }
            // Each target was stressed at 95 % of its own maximum: when
            // those differ (or the generator set one of them), P99 is also
            // compared at one offered rate, 95 % of the lowest maximum.
            if case.mode == Mode::Stressed && able.len() > 1 {
                let lowest = able
                    .iter()
                    .filter_map(|t| median_of(&case_samples, &t.name, "extra", "probe_max_rps"))
                    .fold(f64::INFINITY, f64::min);
                if lowest.is_finite() && lowest > 10.0 {
                    let rate = (lowest * 0.95).round();
                    let mut c2 = case.clone();
                    c2.name = format!("{} @ {rate:.0} req/s (equal offered rate)", case.name);
                    c2.mode = Mode::Plain;
                    c2.load.rate = Some(rate);
                    c2.note =
                        Some("every target at 95 % of the lowest target's measured maximum".into());
                    for run in 0..o.runs {
                        for t in &able {
                            prog.total += 1;
                            case_samples.push(run_sample(o, &origin, t, &c2, run, &prog.next()));
                        }
                    }
                }
            }
            samples.extend(case_samples);
        }
        if *sc == "waf" {
            for t in o.targets.iter().filter(|t| t.caps.contains(&Cap::Waf)) {
                waf_attacks.push(attack_set(o, t));
            }
        }
    }
    let machine = obj()
        .set("cpus", cpus)
        .set(
            "kernel",
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim(),
        )
        .set("nofile", nofile)
        .set("tcp_congestion_control", congestion_control());
    Ok(obj()
        .set(
            "generated_by",
            format!("switchyard bench {}", env!("CARGO_PKG_VERSION")),
        )
        .set("unix_time", unix_now())
        .set("machine", machine)
        .set(
            "settings",
            obj()
                .set("runs", o.runs)
                .set("warm_up_secs", o.warm_up.as_secs_f64())
                .set("quick", o.quick)
                .set("dut_cpu", o.dut_cpu)
                .set("load_cpu", o.load_cpu)
                .set("max_error_ratio", o.max_error_ratio)
                .set("wall_secs", started.elapsed().as_secs_f64())
                .set(
                    "scenarios",
                    Json::Arr(o.scenarios.iter().map(|s| (*s).into()).collect()),
                ),
        )
        .set(
            "targets",
            Json::Arr(
                o.targets
                    .iter()
                    .map(|t| {
                        obj()
                            .set("name", t.name.clone())
                            .set("version", t.version.clone())
                            .set("program", t.program.display().to_string())
                            .set(
                                "caps",
                                Json::Arr(t.caps.iter().map(|c| c.name().into()).collect()),
                            )
                            .set(
                                "notes",
                                Json::Arr(t.notes.iter().map(|n| n.clone().into()).collect()),
                            )
                    })
                    .collect(),
            ),
        )
        .set("samples", Json::Arr(samples))
        .set("waf_attacks", Json::Arr(waf_attacks))
        .set("skipped", Json::Arr(skips)))
}

pub fn median_kpi(samples: &[Json], target: &str, key: &str) -> Option<f64> {
    median_of(samples, target, "kpi", key)
}

/// Median over a target's valid samples of `section.key`.
pub fn median_of(samples: &[Json], target: &str, section: &str, key: &str) -> Option<f64> {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.get("target").and_then(Json::as_str) == Some(target))
        .filter(|s| s.get("valid") == Some(&Json::Bool(true)))
        .filter_map(|s| {
            s.get(section)
                .and_then(|k| k.get(key))
                .and_then(Json::as_f64)
        })
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// During a caching run's measured phase the origin may see a few requests
/// per object (an expiry, a request straddling the counters' snapshot);
/// more means the DUT did not serve from its cache.
pub const MAX_ORIGIN_REQUESTS_PER_OBJECT: f64 = 2.0;

/// None when the origin's count shows the DUT served from its cache; else
/// the "not cached" reason the report gives instead of a ratio.
pub fn cache_verdict(origin_requests: u64, objects: usize) -> Option<String> {
    let objects = objects.max(1);
    (origin_requests as f64 / objects as f64 > MAX_ORIGIN_REQUESTS_PER_OBJECT).then(|| {
        format!(
            "not cached: the origin received {origin_requests} requests for {objects} object(s) during the measured phase (more than {MAX_ORIGIN_REQUESTS_PER_OBJECT:.0} per object)"
        )
    })
}

fn distinct_paths(l: &LoadConfig) -> usize {
    let mut v: Vec<&str> = l.paths.iter().map(|p| p.path.as_str()).collect();
    v.sort();
    v.dedup();
    v.len().max(1)
}

/// What the sampling hook collects during one load run.
#[derive(Default)]
struct Samples {
    cpu0: crate::sys::CpuReading,
    cpu1: crate::sys::CpuReading,
    t0: Option<Instant>,
    t1: Option<Instant>,
    rss_max: u64,
    origin0: OriginStats,
    origin1: OriginStats,
    load_side_share: f64,
}

fn run_load(
    cfg: LoadConfig,
    dut: &Running,
    origin: &OriginHandle,
) -> Result<(LoadResult, Samples), String> {
    let mut s = Samples::default();
    let load_cpu0 = crate::sys::process_cpu();
    let wall0 = Instant::now();
    let res = load::run(cfg, &mut |e| match e {
        Edge::SteadyStart => {
            s.cpu0 = dut.sample().cpu;
            s.t0 = Some(Instant::now());
            s.origin0 = origin.stats();
        }
        Edge::SteadyEnd => {
            s.cpu1 = dut.sample().cpu;
            s.t1 = Some(Instant::now());
            s.origin1 = origin.stats();
        }
        Edge::Tick => {
            let d = dut.sample();
            s.rss_max = s.rss_max.max(d.rss_bytes);
        }
    })?;
    // Generator + origin + this thread: everything on the load side's core.
    s.load_side_share =
        (crate::sys::process_cpu() - load_cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64();
    Ok((res, s))
}

fn dut_cpu_share(s: &Samples) -> f64 {
    match (s.t0, s.t1) {
        (Some(a), Some(b)) if b > a => s.cpu1.since(&s.cpu0) / (b - a).as_secs_f64(),
        _ => 0.0,
    }
}

fn targets_for(o: &Opts, case: &Case) -> Vec<SocketAddr> {
    let mut v = vec![o.ports.addr(case.listener)];
    if let Some(l2) = case.listener2 {
        v.push(o.ports.addr(l2));
    }
    v
}

fn probe_config(o: &Opts, case: &Case, label: &str, secs: f64) -> LoadConfig {
    let mut c = case.load.clone();
    c.targets = targets_for(o, case);
    c.host = "bench.switchyard.test".into();
    c.ramp_up = Duration::from_millis(200);
    c.duration = Duration::from_secs_f64(secs);
    c.ramp_down = Duration::ZERO;
    c.rate = None;
    c.progress = o.progress.then(|| format!("{label} probe"));
    c
}

/// One short unmeasured run per target of the first case that runs: the
/// first round after a start (page cache, the origin's and the load's
/// first connections, CPU clocks) measured slow for every target.
fn warm_up(
    o: &Opts,
    origin: &OriginHandle,
    timing: &Timing,
    max_conns: usize,
) -> Result<(), String> {
    if o.warm_up.is_zero() {
        return Ok(());
    }
    for sc in &o.scenarios {
        let Some(mut case) = scenario::cases(sc, timing, max_conns)?
            .into_iter()
            .find(|c| c.skip_all.is_none() && c.mode == Mode::Plain)
        else {
            continue;
        };
        case.load.ramp_up = std::time::Duration::ZERO;
        case.load.ramp_down = std::time::Duration::ZERO;
        case.load.duration = o.warm_up;
        case.name = format!("{} (warm-up, not measured)", case.name);
        for t in o
            .targets
            .iter()
            .filter(|t| case.needs.iter().all(|c| t.caps.contains(c)))
        {
            let _ = run_sample(o, origin, t, &case, 0, "(warm-up)");
        }
        return Ok(());
    }
    Ok(())
}

fn run_sample(
    o: &Opts,
    origin: &OriginHandle,
    t: &Target,
    case: &Case,
    run: usize,
    prefix: &str,
) -> Json {
    let label = format!(
        "{prefix} [{} {}] {} run {}/{}",
        case.scenario,
        case.name,
        t.name,
        run + 1,
        o.runs
    );
    let mut notes: Vec<String> = case.note.iter().cloned().collect();
    let base = obj()
        .set("scenario", case.scenario)
        .set("case", case.name.clone())
        .set("target", t.name.clone())
        .set("run", run)
        .set("primary", case.kpi.key())
        .set("higher_is_better", case.kpi.higher_is_better());
    let dir = o.out.join("work").join(&t.name);
    let probe_addr = o.ports.addr(match case.listener {
        Listener::L7v6 => Listener::L7,
        l => l,
    });
    let dut = match dut::start(t, &o.ports, &dir, o.dut_cpu, probe_addr) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{label}: {e}");
            return base.set("valid", false).set(
                "reason",
                format!("DUT did not start: {}", e.lines().next().unwrap_or("")),
            );
        }
    };
    let idle = dut.sample();
    let quick = o.quick;
    let probe_secs = if quick { 1.0 } else { 5.0 };
    let mut cfg = case.load.clone();
    cfg.targets = targets_for(o, case);
    cfg.host = "bench.switchyard.test".into();
    cfg.progress = o.progress.then(|| label.clone());
    let mut extra = obj();
    match case.mode {
        Mode::Plain => {}
        Mode::Stressed => match run_load(probe_config(o, case, &label, probe_secs), &dut, origin) {
            Ok((r, _)) => {
                let rate = (r.rps * 0.95).max(1.0);
                notes.push(format!("measured max {:.0} req/s; run at 95 %", r.rps));
                if r.saturated {
                    notes.push("the generator saturated while finding the max: the rate is the generator's limit".into());
                }
                cfg.rate = Some(rate.round());
                extra = extra.set("probe_max_rps", r.rps);
            }
            Err(e) => notes.push(format!("probe failed: {e}")),
        },
        Mode::EqualCpu => {
            // Ceiling: what the generator can push with a closed loop.
            let mut ceiling = f64::INFINITY;
            if let Ok((r, s)) = run_load(probe_config(o, case, &label, probe_secs), &dut, origin) {
                ceiling = r.rps;
                extra = extra
                    .set("probe_max_rps", r.rps)
                    .set("probe_max_dut_cpu", dut_cpu_share(&s));
            }
            let mut rate = (ceiling * 0.3).clamp(100.0, 20_000.0);
            let mut last_share = 0.0;
            for _ in 0..3 {
                let mut c = probe_config(o, case, &label, probe_secs);
                c.rate = Some(rate);
                let Ok((_, s)) = run_load(c, &dut, origin) else {
                    break;
                };
                last_share = dut_cpu_share(&s);
                let next = if last_share < 0.01 {
                    rate * 10.0
                } else {
                    rate * 0.65 / last_share
                };
                rate = next.min(ceiling).max(10.0);
            }
            if last_share < 0.6 && rate >= ceiling * 0.99 {
                notes.push(format!(
                    "the generator could not push the DUT to 65 % CPU (reached {:.0} %): rate capped at the generator's limit",
                    last_share * 100.0
                ));
            }
            cfg.rate = Some(rate.round());
        }
    }
    // Fortio beside the load over the steady phase (report 004).
    let fortio = case.fortio.map(|f| {
        let path = cfg
            .paths
            .first()
            .map(|p| p.path.clone())
            .unwrap_or_else(|| "/".into());
        let port = o.ports.addr(case.listener).port();
        let url = if cfg.tls.is_some() {
            format!("https://{}:{port}{path}", dut::TLS_NAME)
        } else {
            format!("http://127.0.0.1:{port}{path}")
        };
        let delay = cfg.ramp_up;
        let secs = cfg.duration.as_secs_f64();
        std::thread::spawn(move || -> Result<crate::peers::FortioResult, String> {
            let bin = crate::peers::fortio_binary().ok_or_else(|| {
                format!(
                    "Fortio is not installed: {}",
                    crate::peers::install_hint("fortio")
                )
            })?;
            std::thread::sleep(delay);
            let argv = crate::peers::fortio_argv(&bin, &url, "127.0.0.1", f.qps, f.conns, secs);
            crate::peers::run_fortio(&argv, Duration::from_secs_f64(secs + 15.0))
        })
    });
    let result = run_load(cfg.clone(), &dut, origin);
    let fortio = fortio.map(|h| {
        h.join()
            .unwrap_or_else(|_| Err("the Fortio thread panicked".into()))
    });
    let mut d = dut;
    let died = d.exited();
    let log_tail = d.log_tail();
    let (r, s) = match result {
        Ok(x) => x,
        Err(e) => {
            d.stop();
            return base
                .set("valid", false)
                .set("reason", format!("load failed: {e}"));
        }
    };
    d.stop();
    let steady = r.steady_secs;
    let cpu = s.cpu1.since(&s.cpu0);
    let share = dut_cpu_share(&s);
    let od = s.origin1.since(&s.origin0);
    // Integrated, not sampled: a proxy that opens and closes a member
    // connection per request has about none open at any sampling instant.
    let origin_open_avg = if od.at_us > 0 {
        od.conn_us as f64 / od.at_us as f64
    } else {
        0.0
    };
    let p = |q: f64| r.latency.percentile(q) as f64;
    let mut not_cached = None;
    let mut kpi = obj()
        .set("rps", r.rps)
        .set("cps", r.cps)
        .set("tps", r.tps)
        .set("tls_handshakes", r.tls_handshakes)
        .set("tls_resumed", r.tls_resumed)
        .set(
            "dut_cpu_us_per_handshake",
            if r.tls_handshakes > 0 {
                cpu * 1e6 / r.tls_handshakes as f64
            } else {
                0.0
            },
        )
        .set("throughput_bps", r.throughput_bps)
        .set("goodput_bps", r.goodput_bps)
        .set("p50_us", p(50.0))
        .set("p90_us", p(90.0))
        .set("p99_us", p(99.0))
        .set("p99_9_us", p(99.9))
        .set("max_us", r.latency.max())
        .set("ttfb_p50_us", r.ttfb.percentile(50.0))
        .set("ttlb_p50_us", r.ttlb.percentile(50.0))
        .set("error_ratio", r.error_ratio())
        .set("concurrent_max", r.concurrent_max)
        .set("dut_cpu_pct", share * 100.0)
        .set(
            "dut_cpu_us_per_req",
            if r.ok > 0 {
                cpu * 1e6 / r.ok as f64
            } else {
                0.0
            },
        )
        .set("dut_rss_bytes", s.rss_max)
        .set("dut_rss_idle_bytes", idle.rss_bytes)
        .set("dut_processes", idle.processes)
        .set("offered_rate", cfg.rate)
        .set(
            "generator_saturated",
            r.saturated || (o.load_cpu.is_some() && s.load_side_share > 0.9),
        )
        .set("load_side_cpu_pct", s.load_side_share * 100.0)
        .set("generator_cpu_pct", r.gen_cpu_share * 100.0)
        .set("origin_requests", od.requests)
        .set("origin_conns", od.conns_accepted)
        .set("origin_xff_seen", od.xff_seen);
    match case.scenario {
        "multiplexing" => {
            let ratio = if origin_open_avg > 0.0 {
                r.concurrent_avg / origin_open_avg
            } else {
                f64::NAN
            };
            kpi = kpi
                .set("client_conns_avg", r.concurrent_avg)
                .set("server_conns_avg", origin_open_avg)
                .set("mux_ratio", ratio);
        }
        "concurrency" => {
            let per = if r.concurrent_max > 0 {
                s.rss_max.saturating_sub(idle.rss_bytes) as f64 / r.concurrent_max as f64
            } else {
                0.0
            };
            kpi = kpi.set("mem_per_conn_bytes", per);
        }
        "compression" => {
            // Compressed body bytes on the wire over the objects' own size
            // (lower is smaller; 1.0: sent as is).
            let ratio = if r.orig_body_bytes > 0 {
                r.body_bytes as f64 / r.orig_body_bytes as f64
            } else {
                f64::NAN
            };
            let per_core = if cpu > 0.0 {
                r.orig_body_bytes as f64 / cpu
            } else {
                f64::NAN
            };
            kpi = kpi
                .set("compression_ratio", ratio)
                .set("input_bytes_per_core_sec", per_core)
                .set("input_bytes_per_sec", r.orig_body_bytes as f64 / steady)
                .set(
                    "encoded_share",
                    if r.ok > 0 {
                        r.encoded as f64 / r.ok as f64
                    } else {
                        0.0
                    },
                );
        }
        "caching" => {
            let hit = if r.ok > 0 {
                1.0 - od.requests as f64 / r.ok as f64
            } else {
                0.0
            };
            let objects = distinct_paths(&case.load);
            let per_object = od.requests as f64 / objects as f64;
            kpi = kpi
                .set("cache_hit_ratio", hit.max(0.0))
                .set("origin_requests_per_object", per_object)
                .set(
                    "rps_per_core",
                    if share > 0.0 { r.rps / share } else { f64::NAN },
                );
            not_cached = cache_verdict(od.requests, objects);
        }
        "waf" => {
            kpi = kpi
                .set(
                    "rps_per_core",
                    if share > 0.0 { r.rps / share } else { f64::NAN },
                )
                .set("origin_posts", od.posts)
                .set(
                    "post_share",
                    if od.requests > 0 {
                        od.posts as f64 / od.requests as f64
                    } else {
                        0.0
                    },
                );
        }
        _ => {}
    }
    match fortio {
        Some(Ok(f)) => {
            kpi = kpi
                .set("fortio_p50_us", f.p50_us)
                .set("fortio_p99_us", f.p99_us)
                .set("fortio_p99_9_us", f.p999_us)
                .set("fortio_qps", f.qps)
                .set("fortio_requests", f.requests);
            if f.ok < f.requests {
                notes.push(format!(
                    "Fortio: {} of {} requests not answered 200",
                    f.requests - f.ok,
                    f.requests
                ));
            }
        }
        Some(Err(e)) => notes.push(format!("no Fortio figure: {e}")),
        None => {}
    }
    // A WAF that refuses benign traffic has not done the scenario's work,
    // whatever its rate: one refused request voids the run.
    let refused_benign = if case.scenario == "waf" {
        r.errors.get("bad_status").copied().unwrap_or(0)
    } else {
        0
    };
    let mut valid = true;
    let mut reason = None;
    if let Some(e) = died {
        valid = false;
        reason = Some(format!(
            "{e}; log: {}",
            log_tail.lines().last().unwrap_or("")
        ));
    } else if case.kpi == Kpi::ConcurrentMax {
        // Building connections until failure is the point: errors end the
        // ramp, they don't void the run.
        if r.errors_all_phases > 0 {
            notes.push(format!(
                "{} failures while building connections",
                r.errors_all_phases
            ));
        }
        if r.concurrent_max == 0 {
            valid = false;
            reason = Some("no connection could be built".into());
        }
    } else if refused_benign > 0 {
        valid = false;
        reason = Some(format!(
            "the DUT refused {refused_benign} benign requests (a status other than 200: blocked by its WAF?)"
        ));
    } else if r.error_ratio() > o.max_error_ratio {
        valid = false;
        reason = Some(format!(
            "errors {:.2} % > {:.0} % ({})",
            r.error_ratio() * 100.0,
            o.max_error_ratio * 100.0,
            r.errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    } else if r.ok == 0 {
        valid = false;
        reason = Some("no successful transaction".into());
    } else if od.body_bad > 0 {
        valid = false;
        reason = Some(format!("the DUT corrupted {} request bodies", od.body_bad));
    } else if let Some(why) = not_cached {
        // Served, but by the origin: no caching figure to compare.
        valid = false;
        reason = Some(why);
    }
    // A few requests straddle the counters' snapshots; more means the DUT
    // does not add the header.
    if case.listener != Listener::L4 && od.requests > 0 && od.xff_seen * 100 < od.requests * 99 {
        notes.push(format!(
            "X-Forwarded-For missing on {} of the {} requests the origin received",
            od.requests.saturating_sub(od.xff_seen),
            od.requests
        ));
    }
    if r.saturated || (o.load_cpu.is_some() && s.load_side_share > 0.9) {
        notes.push(format!(
            "load generator saturated (generator threads {:.0} %, load core {:.0} %)",
            r.gen_cpu_share * 100.0,
            s.load_side_share * 100.0
        ));
    }
    base.set("valid", valid)
        .set("reason", reason)
        .set("kpi", kpi)
        .set("extra", extra)
        .set(
            "notes",
            Json::Arr(notes.into_iter().map(Json::from).collect()),
        )
        .set("origin", od.to_json())
        .set("load", r.to_json())
}

/// The WAF scenario's attack set (and its benign requests) sent once to a
/// freshly started target's 100 % WAF listener.
fn attack_set(o: &Opts, t: &Target) -> Json {
    let dir = o.out.join("work").join(&t.name);
    let addr = o.ports.addr(Listener::Waf);
    if o.progress {
        eprintln!("[waf attack set] {}", t.name);
    }
    let dut = match dut::start(t, &o.ports, &dir, o.dut_cpu, addr) {
        Ok(d) => d,
        Err(e) => {
            return obj().set("target", t.name.clone()).set(
                "error",
                format!("DUT did not start: {}", e.lines().next().unwrap_or("")),
            );
        }
    };
    let attacks = crate::waf::send_all(addr, &crate::waf::attacks());
    let benign = crate::waf::send_all(addr, &crate::waf::benign("/size/1"));
    dut.stop();
    crate::waf::summary(&t.name, &attacks, &benign)
}

/// Overall position for the progress line: sample k of n, time left.
struct Progress {
    done: usize,
    total: usize,
    started: Instant,
}

impl Progress {
    fn next(&mut self) -> String {
        self.done += 1;
        let left = if self.done > 1 {
            let per = self.started.elapsed().as_secs_f64() / (self.done - 1) as f64;
            let secs = per * (self.total + 1 - self.done) as f64;
            format!(", ~{}m{:02}s left", secs as u64 / 60, secs as u64 % 60)
        } else {
            String::new()
        };
        format!("({}/{}{left})", self.done, self.total)
    }
}
