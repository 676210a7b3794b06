//! The scenarios of METHODOLOGY.md, turned into concrete load cases.

use std::time::Duration;

use crate::args::fmt_size;
use crate::content::IETF_MIX;
use crate::dut::{Cap, Listener};
use crate::load::{LoadConfig, PathSpec};
use crate::tls::{TlsOptions, TlsVersion};

/// The KPI a case is ranked and charted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kpi {
    Rps,
    Cps,
    /// TLS handshakes per second.
    Tps,
    Throughput,
    Goodput,
    P99,
    ConcurrentMax,
    MuxRatio,
    /// Requests per second served at 65 % of the DUT's core.
    EqualCpuRps,
    /// DUT CPU time per request at one offered rate (lower is better): the
    /// comparison that still means something when the generator saturates.
    CpuPerReq,
    /// Requests per second per DUT core (rps / DUT CPU share).
    RpsPerCore,
    /// Uncompressed payload delivered per DUT CPU second (bytes/s per core).
    InputPerCore,
}

impl Kpi {
    pub fn key(self) -> &'static str {
        match self {
            Kpi::Rps => "rps",
            Kpi::Cps => "cps",
            Kpi::Tps => "tps",
            Kpi::Throughput => "throughput_bps",
            Kpi::Goodput => "goodput_bps",
            Kpi::P99 => "p99_us",
            Kpi::ConcurrentMax => "concurrent_max",
            Kpi::MuxRatio => "mux_ratio",
            Kpi::EqualCpuRps => "rps",
            Kpi::CpuPerReq => "dut_cpu_us_per_req",
            Kpi::RpsPerCore => "rps_per_core",
            Kpi::InputPerCore => "input_bytes_per_core_sec",
        }
    }
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Kpi::P99 | Kpi::CpuPerReq)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    /// Find the DUT's max rate, back off 5 %, measure open loop there.
    Stressed,
    /// Find the rate at which the DUT uses 65 % of its core.
    EqualCpu,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub scenario: &'static str,
    pub name: String,
    pub listener: Listener,
    /// A second listener for mixed IPv4/IPv6 runs.
    pub listener2: Option<Listener>,
    pub needs: Vec<Cap>,
    pub load: LoadConfig,
    pub mode: Mode,
    pub kpi: Kpi,
    /// Skipped for every target, with this reason.
    pub skip_all: Option<String>,
    pub note: Option<String>,
    /// Fortio beside the load (report 004's latency tool): its rate and
    /// connections, over the steady phase.
    pub fortio: Option<FortioLoad>,
}

/// Fortio's share of a case: `qps` requests per second over `conns`
/// keep-alive connections, to the case's listener and first path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FortioLoad {
    pub qps: f64,
    pub conns: usize,
}

/// Report 004's published ratios, CPX over Envoy: (test, TLS version,
/// Envoy's stressed P99 over CPX's, CPX's maximum over Envoy's).
pub const REPORT_004_CPX: &[(&str, &str, f64, f64)] = &[
    ("volume", "1.3", 7.7, 2.1),
    ("volume", "1.2", 7.4, 2.3),
    ("transaction", "1.3", 2.2, 3.2),
    ("transaction", "1.2", 1.6, 3.0),
];

/// The case names of report 004's scenario, so that the report finds them.
pub fn report_004_name(version: &str, test: &str, what: &str) -> String {
    let size = if test == "volume" { "9KB" } else { "1B" };
    format!("TLS {version} {test} {size} {what}")
}

pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "l4-cps",
        "L4 virtual server, 1 request per connection, 128 B / 1 KB / 64 KB",
    ),
    (
        "l4-throughput",
        "L4, 64 KB and 512 KB objects, unlimited requests per connection",
    ),
    (
        "l7-rps",
        "L7 URI switching, 1 / 10 / unlimited requests per connection x sizes",
    ),
    (
        "ssl-tps",
        "TLS handshakes/s, 1 request per connection, 1 B / 128 B, TLS 1.2 / 1.3, RSA / ECDSA, full / resumed (9 reuses)",
    ),
    (
        "ssl-throughput",
        "TLS keep-alive volume, 9 KB / 30 KB / 512 KB",
    ),
    (
        "latency",
        "P99 at idle (100 req/s) and stressed (95 % of the measured max)",
    ),
    (
        "report-004",
        "report 004 (CPX vs Envoy): TLS 1.2 ECDHE-RSA-AES256-GCM-SHA384 and TLS 1.3, RSA; 9 KB volume and 1 B transaction tests: maximum, P99 idle (100 req/s) and stressed (95 % of the target's maximum), Fortio beside the load",
    ),
    ("equal-cpu", "rate at which the DUT uses 65 % of its core"),
    (
        "concurrency",
        "idle keep-alive connections up to a target or failure; memory per connection",
    ),
    (
        "multiplexing",
        "many users with think time 3 s and 60 s; client / server connections",
    ),
    (
        "goodput",
        "100 clients fetching 1 MB objects through L7 switching",
    ),
    (
        "mix",
        "IETF object mix, 10 transactions per connection, IPv4 and 50:50 IPv4/IPv6",
    ),
    (
        "compression",
        "gzip level 1 of HTML pages, 128 B / 2 KB / 8 KB / 64 KB / 512 KB; input MB/s per core and compression ratio",
    ),
    (
        "caching",
        "2 KB / 8 KB / 64 KB objects from the DUT's cache, 1 / 10 / unlimited requests per connection; req/s per core",
    ),
    (
        "waf",
        "WAF (OWASP CRS, paranoia 1) inspecting 100 % and 33 % of HTTPS traffic, 80 % GET / 20 % POST forms, 30 KB volume and 1 B transaction tests; req/s per DUT core; an attack set",
    ),
    (
        "syn-flood",
        "SYN flood while valid traffic must keep succeeding",
    ),
];

#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ramp_up: Duration,
    pub steady: Duration,
    pub ramp_down: Duration,
    pub quick: bool,
    /// The user set the phases: scenario-specific report durations
    /// (7 minutes for equal-cpu, 60 s for multiplexing) give way.
    pub custom: bool,
}

impl Timing {
    /// `quick`: a smoke test. Otherwise the reports' phases: EANTC (003)
    /// ramps up 180 s, holds 600 s, ramps down 180 s.
    pub fn new(quick: bool) -> Timing {
        if quick {
            Timing {
                ramp_up: Duration::from_millis(300),
                steady: Duration::from_secs(2),
                ramp_down: Duration::ZERO,
                quick,
                custom: false,
            }
        } else {
            Timing {
                ramp_up: Duration::from_secs(180),
                steady: Duration::from_secs(600),
                ramp_down: Duration::from_secs(180),
                quick,
                custom: false,
            }
        }
    }
}

fn paths(list: &[String]) -> Vec<PathSpec> {
    list.iter()
        .map(|p| PathSpec {
            path: p.clone(),
            expect_size: crate::content::object_size(p),
        })
        .collect()
}

fn base(t: &Timing, urls: &[String]) -> LoadConfig {
    LoadConfig {
        paths: paths(urls),
        connections: 50,
        threads: 1,
        ramp_up: t.ramp_up,
        duration: t.steady,
        ramp_down: t.ramp_down,
        // Spread over source addresses: 1-request connections leave TIME_WAIT
        // sockets behind, and one source address runs out of ports.
        src_ips: crate::cli_load::parse_src_ips("127.0.0.1-127.0.0.250").unwrap_or_default(),
        ..LoadConfig::default()
    }
}

/// The TLS options of a case: the bench certificate's name, no verification.
fn tls(version: TlsVersion, cipher: &str, resume: u32) -> Option<TlsOptions> {
    Some(TlsOptions {
        version: Some(version),
        cipher: Some(cipher.to_string()),
        ca_file: None,
        sni: crate::dut::TLS_NAME.to_string(),
        resume,
        groups: Vec::new(),
    })
}

fn case(
    scenario: &'static str,
    name: String,
    listener: Listener,
    needs: &[Cap],
    load: LoadConfig,
    kpi: Kpi,
) -> Case {
    Case {
        scenario,
        name,
        listener,
        listener2: None,
        needs: needs.to_vec(),
        load,
        mode: Mode::Plain,
        kpi,
        skip_all: None,
        note: None,
        fortio: None,
    }
}

fn rpc_name(r: u64) -> String {
    if r == 0 {
        "unlimited".into()
    } else {
        r.to_string()
    }
}

/// The cases of one scenario. `max_conns` caps connection counts (file
/// descriptors: ours and the DUT's).
pub fn cases(scenario: &str, t: &Timing, max_conns: usize) -> Result<Vec<Case>, String> {
    let q = t.quick;
    let mut out = Vec::new();
    let size_url = |n: u64| format!("/size/{n}");
    match scenario {
        "l4-cps" => {
            for n in [128u64, 1024, 65536] {
                let mut l = base(t, &[size_url(n)]);
                l.requests_per_conn = 1;
                out.push(case(
                    "l4-cps",
                    format!("{} 1 req/conn", fmt_size(n)),
                    Listener::L4,
                    &[Cap::L4],
                    l,
                    Kpi::Cps,
                ));
            }
        }
        "l4-throughput" => {
            for n in [65536u64, 524288] {
                let l = base(t, &[size_url(n)]);
                out.push(case(
                    "l4-throughput",
                    format!("{} keep-alive", fmt_size(n)),
                    Listener::L4,
                    &[Cap::L4],
                    l,
                    Kpi::Throughput,
                ));
            }
        }
        "l7-rps" => {
            let sizes: &[u64] = if q {
                &[128, 65536]
            } else {
                &[128, 2048, 8192, 65536, 524288]
            };
            for &rpc in &[1u64, 10, 0] {
                for &n in sizes {
                    // Half the requests switch to the images pool.
                    let mut l = base(t, &[size_url(n), format!("/images/size/{n}")]);
                    l.requests_per_conn = rpc;
                    out.push(case(
                        "l7-rps",
                        format!("{} {} req/conn", fmt_size(n), rpc_name(rpc)),
                        Listener::L7,
                        &[Cap::L7],
                        l,
                        Kpi::Rps,
                    ));
                }
            }
        }
        "ssl-tps" => {
            let sizes: &[u64] = if q { &[1] } else { &[1, 128] };
            for (key, listener, suite12) in [
                ("RSA", Listener::TlsRsa, crate::dut::TLS12_RSA_SUITE),
                ("ECDSA", Listener::TlsEcdsa, crate::dut::TLS12_ECDSA_SUITE),
            ] {
                for (v, suite) in [
                    (TlsVersion::V12, suite12),
                    (TlsVersion::V13, crate::dut::TLS13_SUITE),
                ] {
                    for resume in [0u32, 9] {
                        for &n in sizes {
                            let mut l = base(t, &[size_url(n)]);
                            l.requests_per_conn = 1;
                            l.tls = tls(v, suite, resume);
                            let mut c = case(
                                "ssl-tps",
                                format!(
                                    "TLS {} {key} {suite} {} {}",
                                    v.name(),
                                    if resume == 0 { "full" } else { "resume 9" },
                                    fmt_size(n)
                                ),
                                listener,
                                &[Cap::Tls],
                                l,
                                Kpi::Tps,
                            );
                            c.note = Some(if resume == 0 {
                                "a full handshake per connection".into()
                            } else {
                                "one full handshake then 9 resumed, per client session cache".into()
                            });
                            out.push(c);
                        }
                    }
                }
            }
        }
        "ssl-throughput" => {
            let versions: &[(TlsVersion, &str)] = if q {
                &[(TlsVersion::V13, crate::dut::TLS13_SUITE)]
            } else {
                &[
                    (TlsVersion::V12, crate::dut::TLS12_RSA_SUITE),
                    (TlsVersion::V13, crate::dut::TLS13_SUITE),
                ]
            };
            for &(v, suite) in versions {
                for n in [9216u64, 30720, 524288] {
                    let mut l = base(t, &[size_url(n)]);
                    l.tls = tls(v, suite, 0);
                    out.push(case(
                        "ssl-throughput",
                        format!("TLS {} RSA {} keep-alive", v.name(), fmt_size(n)),
                        Listener::TlsRsa,
                        &[Cap::Tls],
                        l,
                        Kpi::Throughput,
                    ));
                }
            }
        }
        "waf" => {
            // Report 001: HTTPS, 80 % GET / 20 % POST, the WAF inspecting
            // every request and 33 % of them. Its WAF runs were volume tests
            // (30 KB); issue 11 adds the transaction test (1 B), here with 10
            // requests per connection so the handshakes do not hide the WAF.
            let versions: &[(TlsVersion, &str)] = if q {
                &[(TlsVersion::V13, crate::dut::TLS13_SUITE)]
            } else {
                &[
                    (TlsVersion::V13, crate::dut::TLS13_SUITE),
                    (TlsVersion::V12, crate::dut::TLS12_RSA_SUITE),
                ]
            };
            for &(v, suite) in versions {
                for (test, n, rpc) in [("volume", 30720u64, 0u64), ("transaction", 1, 10)] {
                    for (listener, pct) in [
                        (Listener::Waf, 100),
                        (Listener::Waf33, crate::dut::WAF_SAMPLE_PERCENT),
                    ] {
                        let mut l = base(t, &crate::waf::paths(&size_url(n)));
                        l.requests_per_conn = rpc;
                        l.tls = tls(v, suite, 0);
                        l.post_ratio = 0.2;
                        l.post_form = true;
                        l.headers = crate::waf::browser_headers();
                        let mut c = case(
                            "waf",
                            format!(
                                "TLS {} {test} {} {} req/conn, WAF {pct}%",
                                v.name(),
                                fmt_size(n),
                                rpc_name(rpc)
                            ),
                            listener,
                            &[Cap::Waf, Cap::Tls],
                            l,
                            Kpi::RpsPerCore,
                        );
                        c.note = Some(format!(
                            "80 % GET with a query string / 20 % POST of a urlencoded form; the WAF inspects {pct} % of requests; any benign request refused makes the run invalid"
                        ));
                        out.push(c);
                    }
                }
            }
        }
        "syn-flood" => {
            let mut c = case(
                "syn-flood",
                "all".into(),
                Listener::L4,
                &[Cap::L4],
                base(t, &[size_url(1)]),
                Kpi::Cps,
            );
            c.skip_all = Some("runs in its own subcommand: `switchyard bench shield --scenario syn-flood` (as root: network namespaces, a raw-frame generator, XDP against the kernel and nftables)".into());
            out.push(c);
        }
        "latency" => {
            let sizes: &[u64] = if q { &[1] } else { &[1, 9216, 30720] };
            for &n in sizes {
                let mut l = base(t, &[size_url(n)]);
                l.rate = Some(100.0);
                l.connections = 10;
                out.push(case(
                    "latency",
                    format!("idle 100 req/s {}", fmt_size(n)),
                    Listener::L7,
                    &[Cap::L7],
                    l,
                    Kpi::P99,
                ));
            }
            for &n in sizes {
                let l = base(t, &[size_url(n)]);
                let mut c = case(
                    "latency",
                    format!("stressed 95% {}", fmt_size(n)),
                    Listener::L7,
                    &[Cap::L7],
                    l,
                    Kpi::P99,
                );
                c.mode = Mode::Stressed;
                out.push(c);
            }
            for (v, suite) in [
                (TlsVersion::V12, crate::dut::TLS12_RSA_SUITE),
                (TlsVersion::V13, crate::dut::TLS13_SUITE),
            ] {
                let mut l = base(t, &[size_url(1)]);
                l.rate = Some(100.0);
                l.connections = 10;
                l.tls = tls(v, suite, 0);
                out.push(case(
                    "latency",
                    format!("idle 100 req/s HTTPS TLS {} 1B", v.name()),
                    Listener::TlsRsa,
                    &[Cap::L7, Cap::Tls],
                    l,
                    Kpi::P99,
                ));
                // Stressed over TLS: keep-alive connections, so the rate is
                // the DUT's record and request work, not its handshakes.
                let mut l = base(t, &[size_url(1)]);
                l.tls = tls(v, suite, 0);
                let mut c = case(
                    "latency",
                    format!("stressed 95% HTTPS TLS {} 1B", v.name()),
                    Listener::TlsRsa,
                    &[Cap::L7, Cap::Tls],
                    l,
                    Kpi::P99,
                );
                c.mode = Mode::Stressed;
                out.push(c);
            }
        }
        "report-004" => {
            // Report 004: one core per proxy, HTTPS only, keep-alive
            // connections (its transactions are HTTP transactions; a
            // handshake per request is ssl-tps). TLS 1.3 on the RSA
            // listener (the load offers only 1.3 and AES-256-GCM; Fortio
            // picks 1.3 there), TLS 1.2 on the listener that offers only
            // 1.2 and ECDHE-RSA-AES256-GCM-SHA384, as the report
            // configured the ADCs.
            for (v, suite, listener) in [
                (TlsVersion::V13, crate::dut::TLS13_SUITE, Listener::TlsRsa),
                (
                    TlsVersion::V12,
                    crate::dut::TLS12_RSA_SUITE,
                    Listener::Tls12,
                ),
            ] {
                for (test, n) in [("volume", 9216u64), ("transaction", 1)] {
                    let vname = v.name();
                    let needs = &[Cap::L7, Cap::Tls];
                    // The maximum: the load raised until the DUT's core (or
                    // the generator's) is saturated.
                    let mut l = base(t, &[size_url(n)]);
                    l.tls = tls(v, suite, 0);
                    let mut c = case(
                        "report-004",
                        report_004_name(vname, test, "max"),
                        listener,
                        needs,
                        l,
                        if test == "volume" {
                            Kpi::Throughput
                        } else {
                            Kpi::Rps
                        },
                    );
                    c.note = Some(
                        "50 keep-alive connections, closed loop: the maximum this load reaches (check DUT CPU %: 100 % means the DUT's core was the limit)".into(),
                    );
                    out.push(c);
                    let mut l = base(t, &[size_url(n)]);
                    l.tls = tls(v, suite, 0);
                    l.rate = Some(100.0);
                    l.connections = 10;
                    let mut c = case(
                        "report-004",
                        report_004_name(vname, test, "idle 100 req/s"),
                        listener,
                        needs,
                        l,
                        Kpi::P99,
                    );
                    c.fortio = Some(FortioLoad {
                        qps: 100.0,
                        conns: 4,
                    });
                    out.push(c);
                    let mut l = base(t, &[size_url(n)]);
                    l.tls = tls(v, suite, 0);
                    let mut c = case(
                        "report-004",
                        report_004_name(vname, test, "stressed 95%"),
                        listener,
                        needs,
                        l,
                        Kpi::P99,
                    );
                    c.mode = Mode::Stressed;
                    c.fortio = Some(FortioLoad {
                        qps: 100.0,
                        conns: 4,
                    });
                    out.push(c);
                }
            }
        }
        "equal-cpu" => {
            let mut l = base(t, &[size_url(1)]);
            if !q && !t.custom {
                // Report 001 runs this for seven minutes.
                l.duration = Duration::from_secs(420);
            }
            let mut c = case(
                "equal-cpu",
                "1B at 65% DUT CPU".into(),
                Listener::L7,
                &[Cap::L7],
                l,
                Kpi::EqualCpuRps,
            );
            c.mode = Mode::EqualCpu;
            c.note = Some("report 001 runs 7 minutes".into());
            out.push(c);
        }
        "concurrency" => {
            let target = if q { 1000.min(max_conns) } else { max_conns };
            let mut l = base(t, &[size_url(1024)]);
            l.connections = target;
            l.think = Duration::from_secs(3600);
            // Connections are built during the ramp-up and held through the
            // steady phase (report 003); quick mode needs a little longer
            // than its usual ramp to open a thousand.
            l.ramp_up = if q { Duration::from_secs(2) } else { t.ramp_up };
            l.duration = if q { Duration::from_secs(1) } else { t.steady };
            l.timeout = Duration::from_secs(5);
            let mut c = case(
                "concurrency",
                format!("{target} idle keep-alive conns, 1KB"),
                Listener::L7,
                &[Cap::L7],
                l,
                Kpi::ConcurrentMax,
            );
            c.note = Some(format!(
                "capped at {max_conns} by this machine's open-file limit (the reports reached millions with dedicated test gear)"
            ));
            out.push(c);
        }
        "multiplexing" => {
            let users = if q { 300 } else { 2000.min(max_conns) };
            let thinks: [(Duration, &str); 2] = if q {
                [
                    (Duration::from_millis(300), "3s"),
                    (Duration::from_secs(3), "60s"),
                ]
            } else {
                [
                    (Duration::from_secs(3), "3s"),
                    (Duration::from_secs(60), "60s"),
                ]
            };
            for (think, label) in thinks {
                let mut l = base(t, &[size_url(1024)]);
                l.connections = users;
                l.think = think;
                l.ramp_up = think.max(t.ramp_up);
                // At least two think cycles, and two whole seconds to average.
                l.duration = if q {
                    (think * 2).max(Duration::from_secs(2))
                } else if t.custom {
                    (think * 2).max(t.steady)
                } else {
                    // Report 002 compared connection counts over 60 s.
                    (think * 2).max(Duration::from_secs(60))
                };
                let mut c = case(
                    "multiplexing",
                    format!(
                        "{users} users think {}",
                        if q {
                            format!("{think:?} (scaled from {label})")
                        } else {
                            label.to_string()
                        }
                    ),
                    Listener::L7,
                    &[Cap::L7],
                    l,
                    Kpi::MuxRatio,
                );
                c.note = Some(format!(
                    "{users} users (100,000 in the report, scaled to this machine)"
                ));
                out.push(c);
            }
        }
        "goodput" => {
            let mut l = base(t, &[size_url(1 << 20), "/images/size/1048576".into()]);
            l.connections = 100;
            out.push(case(
                "goodput",
                "100 clients 1MB".into(),
                Listener::L7,
                &[Cap::L7],
                l,
                Kpi::Goodput,
            ));
        }
        "mix" => {
            let urls: Vec<String> = IETF_MIX.iter().map(|n| size_url(*n)).collect();
            let mut l = base(t, &urls);
            l.requests_per_conn = 10;
            out.push(case(
                "mix",
                "IETF mix IPv4".into(),
                Listener::L7,
                &[Cap::L7],
                l.clone(),
                Kpi::Throughput,
            ));
            let mut c = case(
                "mix",
                "IETF mix 50:50 IPv4/IPv6".into(),
                Listener::L7,
                &[Cap::L7, Cap::Ipv6],
                l,
                Kpi::Throughput,
            );
            c.listener2 = Some(Listener::L7v6);
            out.push(c);
        }
        "compression" => {
            let sizes: &[u64] = if q {
                &[128, 65536]
            } else {
                &[128, 2048, 8192, 65536, 524288]
            };
            for &n in sizes {
                // Realistic HTML (content::html), the only compression
                // scenario figure that resembles a web page.
                let mut l = base(t, &[format!("/html/{n}")]);
                l.headers.push(("Accept-Encoding".into(), "gzip".into()));
                let mut c = case(
                    "compression",
                    format!("gzip {} HTML", fmt_size(n)),
                    Listener::Compress,
                    &[Cap::Compression],
                    l,
                    Kpi::InputPerCore,
                );
                if n < 256 {
                    c.note = Some(
                        "below the 256 B minimum size of every DUT that has one (HAProxy 2.6 has none and compresses it)".into(),
                    );
                }
                out.push(c);
            }
        }
        "caching" => {
            let sizes: &[u64] = if q {
                &[2048, 65536]
            } else {
                &[2048, 8192, 65536]
            };
            for &rpc in &[1u64, 10, 0] {
                for &n in sizes {
                    let mut l = base(t, &[size_url(n)]);
                    l.requests_per_conn = rpc;
                    out.push(case(
                        "caching",
                        format!("{} {} req/conn", fmt_size(n), rpc_name(rpc)),
                        Listener::Cache,
                        &[Cap::Caching],
                        l,
                        Kpi::RpsPerCore,
                    ));
                }
            }
        }
        other => {
            return Err(format!(
                "unknown scenario {other}; `switchyard bench scenarios` lists them"
            ))
        }
    }
    Ok(out)
}

/// Expands "all" and comma lists.
pub fn expand(list: &[String]) -> Result<Vec<&'static str>, String> {
    let mut out = Vec::new();
    for s in list {
        if s == "all" {
            out.extend(SCENARIOS.iter().map(|(n, _)| *n));
        } else {
            let n = SCENARIOS
                .iter()
                .find(|(n, _)| n == s)
                .map(|(n, _)| *n)
                .ok_or_else(|| {
                    format!("unknown scenario {s}; `switchyard bench scenarios` lists them")
                })?;
            out.push(n);
        }
    }
    Ok(out)
}
