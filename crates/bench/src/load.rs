//! The load generator.
//!
//! Design (after wrk2, Fortio and h2load): one OS thread per `--threads`,
//! each with its own current-thread tokio runtime and its share of the
//! connection slots; no locks on the request path (per-thread histograms and
//! per-second buckets, merged at the end).
//!
//! Closed loop: each slot is a user that sends, waits for the answer, thinks,
//! and sends again. Open loop (`rate`): each slot owns a fixed schedule of
//! due times (rate / slots apart). Latency counts from when a request was
//! *due*, not from when it could be sent, so a stalled server shows up in the
//! percentiles instead of silently slowing the generator down (coordinated
//! omission).
//!
//! Phases: slots start staggered over ramp-up and stop staggered over
//! ramp-down; every KPI comes from requests due in the steady phase, and the
//! per-second figures from whole seconds inside it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{self, ErrKind, Expect, ERR_KINDS};
use crate::hist::Histogram;
use crate::json::{obj, Json};

#[derive(Clone, Debug)]
pub struct PathSpec {
    pub path: String,
    pub expect_size: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Slot i connects to `targets[i % len]` (a 50:50 IPv4/IPv6 mix is two targets).
    pub targets: Vec<SocketAddr>,
    pub host: String,
    /// Request j of slot i asks for `paths[(i + j) % len]`.
    pub paths: Vec<PathSpec>,
    pub connections: usize,
    pub threads: usize,
    pub ramp_up: Duration,
    pub duration: Duration,
    pub ramp_down: Duration,
    /// Open loop: total requests per second. None: closed loop.
    pub rate: Option<f64>,
    /// 0 means unlimited (keep-alive until the end).
    pub requests_per_conn: u64,
    pub think: Duration,
    pub timeout: Duration,
    pub post_ratio: f64,
    pub post_size: usize,
    /// POSTs carry realistic HTML form bodies
    /// (application/x-www-form-urlencoded, a few hundred bytes of benign
    /// fields: `crate::waf::FORM_BODIES`, one per path in turn) instead of
    /// `post_size` bytes of application/octet-stream.
    pub post_form: bool,
    /// Slot i binds to `src_ips[i % len]` before connecting (same family only).
    pub src_ips: Vec<IpAddr>,
    pub expect_status: u16,
    pub verify_body: bool,
    /// Extra request headers, e.g. Accept-Encoding.
    pub headers: Vec<(String, String)>,
    /// Pin generator thread i to `cpus[i % len]`.
    pub cpus: Vec<usize>,
    /// Label for the live progress line on stderr; None: quiet.
    pub progress: Option<String>,
    /// HTTPS: TLS options (None: plain HTTP).
    pub tls: Option<crate::tls::TlsOptions>,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            targets: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            host: "127.0.0.1".into(),
            paths: vec![PathSpec {
                path: "/size/128".into(),
                expect_size: Some(128),
            }],
            connections: 50,
            threads: 1,
            ramp_up: Duration::ZERO,
            duration: Duration::from_secs(10),
            ramp_down: Duration::ZERO,
            rate: None,
            requests_per_conn: 0,
            think: Duration::ZERO,
            timeout: Duration::from_secs(10),
            post_ratio: 0.0,
            post_size: 1024,
            post_form: false,
            src_ips: Vec::new(),
            expect_status: 200,
            verify_body: true,
            headers: Vec::new(),
            cpus: Vec::new(),
            progress: None,
            tls: None,
        }
    }
}

/// min / avg / max of a per-second series over the steady phase.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mam {
    pub min: f64,
    pub avg: f64,
    pub max: f64,
}

impl Mam {
    fn of(v: &[f64]) -> Mam {
        if v.is_empty() {
            return Mam::default();
        }
        Mam {
            min: v.iter().cloned().fold(f64::INFINITY, f64::min),
            max: v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            avg: v.iter().sum::<f64>() / v.len() as f64,
        }
    }
    fn json(&self) -> Json {
        obj()
            .set("min", self.min)
            .set("avg", self.avg)
            .set("max", self.max)
    }
}

#[derive(Clone, Copy, Default, Debug)]
pub struct Sec {
    pub ok: u64,
    pub errors: u64,
    pub conns: u64,
    pub bytes_in: u64,
    pub body_bytes: u64,
    /// Concurrent client connections sampled at the end of the second.
    pub open: i64,
}

#[derive(Clone)]
pub struct LoadResult {
    pub steady_secs: f64,
    pub offered_rate: Option<f64>,
    pub connections: usize,
    pub threads: usize,
    /// Successful transactions due in the steady phase.
    pub ok: u64,
    /// Failed transactions in the steady phase, by kind.
    pub errors: BTreeMap<String, u64>,
    pub errors_all_phases: u64,
    pub conns_established: u64,
    pub reconnects: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub body_bytes: u64,
    /// What the successful responses' bodies weigh unencoded (the objects'
    /// sizes), against `body_bytes` as received: the compression ratio.
    pub orig_body_bytes: u64,
    /// Successful responses that came with a Content-Encoding.
    pub encoded: u64,
    pub rps: f64,
    pub rps_sec: Mam,
    pub cps: f64,
    pub cps_sec: Mam,
    /// Received wire bits per second.
    pub throughput_bps: f64,
    pub throughput_sec: Mam,
    /// Body bits of successful transactions per second (RFC 2647 goodput).
    pub goodput_bps: f64,
    pub concurrent_max: i64,
    pub concurrent_avg: f64,
    pub latency: Histogram,
    pub ttfb: Histogram,
    pub ttlb: Histogram,
    pub connect: Histogram,
    pub per_second: Vec<Sec>,
    pub steady_range: (usize, usize),
    /// CPU seconds used by the generator threads, and the share of their cores.
    pub gen_cpu_secs: f64,
    pub gen_cpu_share: f64,
    pub saturated: bool,
    pub wall_secs: f64,
    /// TLS handshakes completed in the steady phase (full + resumed).
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    /// TLS handshakes per second (TPS).
    pub tps: f64,
}

impl LoadResult {
    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }
    pub fn error_ratio(&self) -> f64 {
        let e = self.errors_total();
        if e + self.ok == 0 {
            0.0
        } else {
            e as f64 / (e + self.ok) as f64
        }
    }

    pub fn to_json(&self) -> Json {
        let pct = |h: &Histogram| {
            obj()
                .set("count", h.count())
                .set("min_us", h.min())
                .set("mean_us", h.mean())
                .set("p50_us", h.percentile(50.0))
                .set("p90_us", h.percentile(90.0))
                .set("p99_us", h.percentile(99.0))
                .set("p99_9_us", h.percentile(99.9))
                .set("max_us", h.max())
        };
        let curve = Json::Arr(
            PERCENTILE_CURVE
                .iter()
                .map(|p| Json::Arr(vec![(*p).into(), self.latency.percentile(*p).into()]))
                .collect(),
        );
        obj()
            .set("steady_secs", self.steady_secs)
            .set("offered_rate", self.offered_rate)
            .set("connections", self.connections)
            .set("threads", self.threads)
            .set("ok", self.ok)
            .set("errors", self.errors.clone())
            .set("errors_all_phases", self.errors_all_phases)
            .set("error_ratio", self.error_ratio())
            .set("conns_established", self.conns_established)
            .set("reconnects", self.reconnects)
            .set("bytes_in", self.bytes_in)
            .set("bytes_out", self.bytes_out)
            .set("body_bytes", self.body_bytes)
            .set("orig_body_bytes", self.orig_body_bytes)
            .set("encoded", self.encoded)
            .set("rps", self.rps)
            .set("rps_per_sec", self.rps_sec.json())
            .set("cps", self.cps)
            .set("cps_per_sec", self.cps_sec.json())
            .set("throughput_bps", self.throughput_bps)
            .set("throughput_per_sec", self.throughput_sec.json())
            .set("goodput_bps", self.goodput_bps)
            .set("concurrent_max", self.concurrent_max)
            .set("concurrent_avg", self.concurrent_avg)
            .set("latency", pct(&self.latency))
            .set("latency_curve", curve)
            .set("ttfb", pct(&self.ttfb))
            .set("ttlb", pct(&self.ttlb))
            .set("connect", pct(&self.connect))
            .set(
                "per_second",
                Json::Arr(
                    self.per_second
                        .iter()
                        .map(|s| {
                            Json::Arr(vec![
                                s.ok.into(),
                                s.errors.into(),
                                s.conns.into(),
                                s.bytes_in.into(),
                                s.open.into(),
                            ])
                        })
                        .collect(),
                ),
            )
            .set("per_second_columns", "ok,errors,conns,bytes_in,open")
            .set(
                "steady_seconds",
                Json::Arr(vec![self.steady_range.0.into(), self.steady_range.1.into()]),
            )
            .set("generator_cpu_secs", self.gen_cpu_secs)
            .set("generator_cpu_share", self.gen_cpu_share)
            .set("generator_saturated", self.saturated)
            .set("wall_secs", self.wall_secs)
            .set("tls_handshakes", self.tls_handshakes)
            .set("tls_resumed", self.tls_resumed)
            .set("tls_full", self.tls_handshakes - self.tls_resumed)
            .set("tps", self.tps)
    }
}

pub const PERCENTILE_CURVE: &[f64] = &[
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0,
];

/// Phase edges reported to the caller, so that it can sample the DUT's CPU
/// exactly over the steady phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    Tick,
    SteadyStart,
    SteadyEnd,
}

/// Live counters, one padded block per thread, read by the progress line.
#[repr(align(128))]
#[derive(Default)]
struct Live {
    ok: AtomicU64,
    errors: AtomicU64,
    open: AtomicI64,
    conns: AtomicU64,
}

struct ThreadStats {
    latency: Histogram,
    ttfb: Histogram,
    ttlb: Histogram,
    connect: Histogram,
    per_sec: Vec<Sec>,
    errors: [u64; ERR_KINDS.len()],
    errors_all: u64,
    ok: u64,
    conns: u64,
    reconnects: u64,
    bytes_in: u64,
    bytes_out: u64,
    body_bytes: u64,
    orig_bytes: u64,
    encoded: u64,
    tls_handshakes: u64,
    tls_resumed: u64,
}

impl ThreadStats {
    fn new(secs: usize) -> ThreadStats {
        ThreadStats {
            latency: Histogram::new(),
            ttfb: Histogram::new(),
            ttlb: Histogram::new(),
            connect: Histogram::new(),
            per_sec: vec![Sec::default(); secs],
            errors: [0; ERR_KINDS.len()],
            errors_all: 0,
            ok: 0,
            conns: 0,
            reconnects: 0,
            bytes_in: 0,
            bytes_out: 0,
            body_bytes: 0,
            orig_bytes: 0,
            encoded: 0,
            tls_handshakes: 0,
            tls_resumed: 0,
        }
    }
    fn sec(&mut self, t0: Instant, at: Instant) -> &mut Sec {
        let i = at.saturating_duration_since(t0).as_secs() as usize;
        let last = self.per_sec.len() - 1;
        &mut self.per_sec[i.min(last)]
    }
}

struct Plan {
    cfg: LoadConfig,
    t0: Instant,
    /// Origin of the per-second buckets.
    base: Instant,
    steady_start: Instant,
    steady_end: Instant,
    requests: Vec<Vec<u8>>,
    posts: Vec<Vec<u8>>,
    expects: Vec<Expect>,
    stop: AtomicBool,
    /// HTTPS: the client configuration every slot's connector starts from.
    tls: Option<Arc<rustls::ClientConfig>>,
}

fn build_request(
    host: &str,
    path: &str,
    headers: &[(String, String)],
    post: Option<(&str, &[u8])>,
) -> Vec<u8> {
    let mut r = Vec::with_capacity(256);
    let m = if post.is_some() { "POST" } else { "GET" };
    r.extend_from_slice(
        format!("{m} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: switchyard-bench\r\n")
            .as_bytes(),
    );
    for (k, v) in headers {
        r.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    if let Some((ctype, b)) = post {
        r.extend_from_slice(
            format!(
                "Content-Type: {ctype}\r\nContent-Length: {}\r\nX-Body-Sum: {:016x}\r\n",
                b.len(),
                crate::content::Sum::of(b)
            )
            .as_bytes(),
        );
    }
    r.extend_from_slice(b"\r\n");
    if let Some((_, b)) = post {
        r.extend_from_slice(b);
    }
    r
}

/// Cheap deterministic hash: decides GET or POST for request j of slot i.
fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

/// Runs one load; `on_edge` is called from the calling thread about once a
/// second and at the steady phase's edges.
pub fn run(cfg: LoadConfig, on_edge: &mut dyn FnMut(Edge)) -> Result<LoadResult, String> {
    if cfg.targets.is_empty() || cfg.paths.is_empty() {
        return Err("no target or no path".into());
    }
    let threads = cfg.threads.max(1).min(cfg.connections.max(1));
    let conns = cfg.connections.max(1);
    let post_body = crate::content::post_body(cfg.post_size);
    let requests = cfg
        .paths
        .iter()
        .map(|p| build_request(&cfg.host, &p.path, &cfg.headers, None))
        .collect();
    let posts = cfg
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let post = if cfg.post_form {
                let forms = crate::waf::FORM_BODIES;
                (crate::waf::FORM_TYPE, forms[i % forms.len()].as_bytes())
            } else {
                ("application/octet-stream", &post_body[..])
            };
            build_request(&cfg.host, &p.path, &cfg.headers, Some(post))
        })
        .collect();
    let expects = cfg
        .paths
        .iter()
        .map(|p| {
            let asks_gzip = cfg.headers.iter().any(|(k, v)| {
                k.eq_ignore_ascii_case("accept-encoding") && v.to_ascii_lowercase().contains("gzip")
            });
            let path = p.path.split('?').next().unwrap_or(&p.path);
            Expect {
                status: cfg.expect_status,
                size: p.expect_size,
                verify_body: cfg.verify_body,
                gzip_trailer: match p.expect_size {
                    Some(n) if asks_gzip && cfg.verify_body => Some((
                        crate::content::crc32(&crate::content::object(path, n)),
                        n as u32,
                    )),
                    _ => None,
                },
            }
        })
        .collect();
    // A short lead so every thread is up before the clock starts.
    let t0 = Instant::now() + Duration::from_millis(30);
    let steady_start = t0 + cfg.ramp_up;
    let steady_end = steady_start + cfg.duration;
    let end = steady_end + cfg.ramp_down;
    // Per-second buckets start so that the steady phase begins exactly on a
    // bucket boundary: every whole steady second is one bucket.
    let s0 = cfg.ramp_up.as_secs_f64().ceil() as usize;
    let base = steady_start - Duration::from_secs(s0 as u64);
    let secs = (end - base).as_secs() as usize + 2;
    let tls = match &cfg.tls {
        Some(o) => Some(Arc::new(crate::tls::client_config(o)?)),
        None => None,
    };
    if let Some(o) = &cfg.tls {
        // Fail early on a bad server name rather than once per connection.
        crate::tls::Tls::new(Arc::new(crate::tls::client_config(o)?), &o.sni, 0)?;
    }
    let plan = Arc::new(Plan {
        cfg: cfg.clone(),
        t0,
        base,
        steady_start,
        steady_end,
        requests,
        posts,
        expects,
        stop: AtomicBool::new(false),
        tls,
    });
    let live: Arc<Vec<Live>> = Arc::new((0..threads).map(|_| Live::default()).collect());
    let mut handles = Vec::new();
    for t in 0..threads {
        let plan = plan.clone();
        let live = live.clone();
        let slots: Vec<usize> = (t..conns).step_by(threads).collect();
        let h = std::thread::Builder::new()
            .name(format!("load-{t}"))
            .spawn(move || thread_main(plan, live, t, slots, conns, secs))
            .map_err(|e| format!("cannot start thread: {e}"))?;
        handles.push(h);
    }

    // Monitor: progress line, phase edges, concurrency samples.
    let tty = unsafe { libc::isatty(2) } == 1;
    let mut open_samples: Vec<(usize, i64)> = Vec::new();
    let mut last_ok = 0u64;
    let mut last_t = Instant::now();
    let mut edges = vec![
        (steady_start, Edge::SteadyStart),
        (steady_end, Edge::SteadyEnd),
    ];
    // Ticks fall mid-second: the concurrency sample of bucket k is taken at
    // k + 0.5 s, well inside the phase the bucket belongs to.
    let mut next_tick = base + Duration::from_millis(500);
    let mut last_print = Instant::now();
    loop {
        let now = Instant::now();
        if now >= end + cfg.timeout + Duration::from_millis(200) {
            break;
        }
        if handles.iter().all(|h| h.is_finished()) {
            break;
        }
        let next_edge = edges.first().map(|e| e.0);
        let wake = next_edge.map_or(next_tick, |e| e.min(next_tick));
        if wake > now {
            std::thread::sleep((wake - now).min(Duration::from_millis(100)));
            continue;
        }
        if next_edge.is_some_and(|e| e <= now) {
            let (_, edge) = edges.remove(0);
            on_edge(edge);
            continue;
        }
        next_tick += Duration::from_secs(1);
        let sec = now.saturating_duration_since(base).as_secs() as usize;
        let open: i64 = live.iter().map(|l| l.open.load(Relaxed)).sum();
        open_samples.push((sec, open));
        on_edge(Edge::Tick);
        if let Some(label) = &cfg.progress {
            let ok: u64 = live.iter().map(|l| l.ok.load(Relaxed)).sum();
            let err: u64 = live.iter().map(|l| l.errors.load(Relaxed)).sum();
            let rate = (ok - last_ok) as f64 / now.duration_since(last_t).as_secs_f64();
            last_ok = ok;
            last_t = now;
            let phase = if now < steady_start {
                "ramp-up"
            } else if now < steady_end {
                "steady"
            } else {
                "ramp-down"
            };
            let left = end.saturating_duration_since(now).as_secs();
            let line = format!(
                "{label} | {phase} | {rate:.0} req/s | {err} errors | {open} conns | {left}s left"
            );
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else if now.duration_since(last_print) >= Duration::from_secs(5) {
                eprintln!("{line}");
                last_print = now;
            }
        }
    }
    while let Some((_, e)) = edges.first().copied() {
        edges.remove(0);
        on_edge(e);
    }
    if cfg.progress.is_some() && tty {
        eprint!("\r\x1b[2K");
    }
    if let (Some(label), false) = (&cfg.progress, tty) {
        // Logs (CI, nohup) get one line per run instead of a live line.
        let ok: u64 = live.iter().map(|l| l.ok.load(Relaxed)).sum();
        let err: u64 = live.iter().map(|l| l.errors.load(Relaxed)).sum();
        eprintln!("{label} | done | {ok} ok | {err} errors");
    }
    plan.stop.store(true, Relaxed);
    let mut merged = ThreadStats::new(secs);
    let mut cpu = 0.0;
    for h in handles {
        let (st, c) = h.join().map_err(|_| "a load thread panicked".to_string())?;
        cpu += c;
        merged.latency.merge(&st.latency);
        merged.ttfb.merge(&st.ttfb);
        merged.ttlb.merge(&st.ttlb);
        merged.connect.merge(&st.connect);
        for (a, b) in merged.per_sec.iter_mut().zip(&st.per_sec) {
            a.ok += b.ok;
            a.errors += b.errors;
            a.conns += b.conns;
            a.bytes_in += b.bytes_in;
            a.body_bytes += b.body_bytes;
        }
        for (a, b) in merged.errors.iter_mut().zip(&st.errors) {
            *a += b;
        }
        merged.errors_all += st.errors_all;
        merged.ok += st.ok;
        merged.conns += st.conns;
        merged.reconnects += st.reconnects;
        merged.bytes_in += st.bytes_in;
        merged.bytes_out += st.bytes_out;
        merged.body_bytes += st.body_bytes;
        merged.orig_bytes += st.orig_bytes;
        merged.encoded += st.encoded;
        merged.tls_handshakes += st.tls_handshakes;
        merged.tls_resumed += st.tls_resumed;
    }
    for (s, o) in open_samples {
        if let Some(x) = merged.per_sec.get_mut(s) {
            x.open = o;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    // Whole seconds inside the steady phase.
    let s1 = s0 + cfg.duration.as_secs() as usize;
    let steady: &[Sec] = merged.per_sec.get(s0..s1).unwrap_or(&[]);
    let series = |f: &dyn Fn(&Sec) -> f64| Mam::of(&steady.iter().map(f).collect::<Vec<_>>());
    let d = cfg.duration.as_secs_f64().max(1e-9);
    let opens: Vec<i64> = steady.iter().map(|s| s.open).collect();
    let gen_share = cpu / (wall.max(1e-9) * threads as f64);
    let mut errors = BTreeMap::new();
    for k in ERR_KINDS {
        let n = merged.errors[k.idx()];
        if n > 0 {
            errors.insert(k.name().to_string(), n);
        }
    }
    Ok(LoadResult {
        steady_secs: d,
        offered_rate: cfg.rate,
        connections: conns,
        threads,
        ok: merged.ok,
        errors,
        errors_all_phases: merged.errors_all,
        conns_established: merged.conns,
        reconnects: merged.reconnects,
        bytes_in: merged.bytes_in,
        bytes_out: merged.bytes_out,
        body_bytes: merged.body_bytes,
        orig_body_bytes: merged.orig_bytes,
        encoded: merged.encoded,
        rps: merged.ok as f64 / d,
        rps_sec: series(&|s| s.ok as f64),
        cps: merged.conns as f64 / d,
        cps_sec: series(&|s| s.conns as f64),
        throughput_bps: merged.bytes_in as f64 * 8.0 / d,
        throughput_sec: series(&|s| s.bytes_in as f64 * 8.0),
        goodput_bps: merged.body_bytes as f64 * 8.0 / d,
        concurrent_max: merged.per_sec.iter().map(|s| s.open).max().unwrap_or(0),
        concurrent_avg: if opens.is_empty() {
            0.0
        } else {
            opens.iter().sum::<i64>() as f64 / opens.len() as f64
        },
        latency: merged.latency,
        ttfb: merged.ttfb,
        ttlb: merged.ttlb,
        connect: merged.connect,
        per_second: merged.per_sec[..((end - base).as_secs() as usize + 1).min(secs)].to_vec(),
        steady_range: (s0, s1),
        gen_cpu_secs: cpu,
        gen_cpu_share: gen_share,
        saturated: gen_share > 0.9,
        wall_secs: wall,
        tls_handshakes: merged.tls_handshakes,
        tls_resumed: merged.tls_resumed,
        tps: merged.tls_handshakes as f64 / d,
    })
}

fn thread_main(
    plan: Arc<Plan>,
    live: Arc<Vec<Live>>,
    t: usize,
    slots: Vec<usize>,
    total_slots: usize,
    secs: usize,
) -> (ThreadStats, f64) {
    let cpu0 = crate::sys::thread_cpu();
    if !plan.cfg.cpus.is_empty() {
        let _ = crate::sys::pin_current_thread(plan.cfg.cpus[t % plan.cfg.cpus.len()]);
    }
    let stats = Rc::new(RefCell::new(ThreadStats::new(secs)));
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return (ThreadStats::new(secs), 0.0),
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut tasks = Vec::new();
        for s in slots {
            let plan = plan.clone();
            let stats = stats.clone();
            let live = live.clone();
            let tls = match (&plan.tls, &plan.cfg.tls) {
                (Some(c), Some(o)) => match crate::tls::Tls::new(c.clone(), &o.sni, o.resume) {
                    Ok(x) => Some(x),
                    Err(_) => continue,
                },
                _ => None,
            };
            tasks.push(tokio::task::spawn_local(async move {
                match tls {
                    Some(c) => slot(&c, &plan, &stats, &live[t], s, total_slots).await,
                    None => slot(&client::PlainTcp, &plan, &stats, &live[t], s, total_slots).await,
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    drop(local);
    drop(rt);
    let cpu = (crate::sys::thread_cpu() - cpu0).as_secs_f64();
    let st = Rc::try_unwrap(stats)
        .map(|c| c.into_inner())
        .unwrap_or_else(|_| ThreadStats::new(secs));
    (st, cpu)
}

/// One user (closed loop) or one schedule lane (open loop).
async fn slot<C: client::Connector>(
    connector: &C,
    plan: &Plan,
    stats: &RefCell<ThreadStats>,
    live: &Live,
    s: usize,
    total: usize,
) {
    let cfg = &plan.cfg;
    let frac = s as f64 / total as f64;
    let start = plan.t0 + cfg.ramp_up.mul_f64(frac);
    let stop = plan.steady_end + cfg.ramp_down.mul_f64(1.0 - frac);
    let target = cfg.targets[s % cfg.targets.len()];
    let src = if cfg.src_ips.is_empty() {
        None
    } else {
        Some(cfg.src_ips[s % cfg.src_ips.len()])
    };
    // Open loop: this lane's share of the rate; lanes are phase-shifted so
    // the aggregate is evenly spaced rather than bursty.
    // Rates below one request per 100 days per lane are treated as that.
    let lane = |x: f64| Duration::try_from_secs_f64(x.min(1e7)).unwrap_or(Duration::ZERO);
    let interval = cfg
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| lane(total as f64 / r));
    let mut due = match cfg.rate {
        Some(r) if r > 0.0 => start + lane(s as f64 / r),
        _ => start,
    };
    let buf_cap = if cfg.think >= Duration::from_secs(1) {
        4096
    } else {
        32 * 1024
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut conn: Option<C::Stream> = None;
    let mut on_conn = 0u64;
    let mut j = 0u64;
    tokio::time::sleep_until(start.into()).await;
    loop {
        if plan.stop.load(Relaxed) {
            // Open loop, hard stop: requests that were due in the steady
            // phase but never sent are failures (they did not complete in
            // time), not silently dropped from the statistics.
            if let Some(iv) = interval {
                let from = due.max(plan.steady_start);
                let to = stop.min(plan.steady_end);
                if to > from && !iv.is_zero() {
                    let n = ((to - from).as_secs_f64() / iv.as_secs_f64()).ceil() as u64;
                    let mut st = stats.borrow_mut();
                    st.errors[ErrKind::Timeout.idx()] += n;
                    st.errors_all += n;
                }
            }
            break;
        }
        let now = Instant::now();
        let mut started_at = due;
        if interval.is_some() {
            if due >= stop {
                break;
            }
            if due > now {
                tokio::time::sleep_until(due.into()).await;
                // The timer wheel rounds up to the next millisecond: a lane
                // that was idle starts its clock when the timer fired, so
                // the generator's own timer slack is not server latency.
                // A lane still busy at its due time (the server was slow)
                // counts from the due time: no coordinated omission.
                started_at = Instant::now();
            }
        } else {
            if now >= stop {
                break;
            }
            due = now;
            started_at = now;
        }
        if buf.capacity() == 0 {
            buf.reserve(buf_cap);
        }
        let in_steady = due >= plan.steady_start && due < plan.steady_end;
        let pi = ((s as u64 + j) % cfg.paths.len() as u64) as usize;
        let post =
            cfg.post_ratio > 0.0 && (mix(s as u64, j) % 10_000) as f64 / 10_000.0 < cfg.post_ratio;
        let req: &[u8] = if post {
            &plan.posts[pi]
        } else {
            &plan.requests[pi]
        };
        let exp = &plan.expects[pi];
        j += 1;

        let t_start = Instant::now();
        let deadline = t_start + cfg.timeout;
        let mut fresh = false;
        let mut outcome = None;
        // At most one retry: a reused connection the server closed while idle.
        for attempt in 0..2 {
            if conn.is_none() {
                let tc = Instant::now();
                match tokio::time::timeout_at(deadline.into(), connector.connect(target, src)).await
                {
                    Ok(Ok(c)) => {
                        let now = Instant::now();
                        let mut st = stats.borrow_mut();
                        if let Some(resumed) = C::resumed(&c) {
                            if in_steady {
                                st.tls_handshakes += 1;
                                st.tls_resumed += resumed as u64;
                            }
                        }
                        st.conns += in_steady as u64;
                        st.sec(plan.base, now).conns += 1;
                        if in_steady {
                            st.connect.record((now - tc).as_micros() as u64);
                        }
                        live.open.fetch_add(1, Relaxed);
                        live.conns.fetch_add(1, Relaxed);
                        conn = Some(c);
                        on_conn = 0;
                        fresh = true;
                    }
                    Ok(Err(e)) => {
                        outcome = Some(Err(if crate::tls::is_handshake_failure(&e) {
                            ErrKind::Handshake
                        } else {
                            ErrKind::Connect
                        }));
                        break;
                    }
                    Err(_) => {
                        outcome = Some(Err(ErrKind::Timeout));
                        break;
                    }
                }
            }
            let Some(c) = conn.as_mut() else { break };
            let r =
                tokio::time::timeout_at(deadline.into(), client::transact(c, req, &mut buf, exp))
                    .await;
            match r {
                Ok(Ok(resp)) => {
                    outcome = Some(Ok(resp));
                    break;
                }
                Ok(Err((k, got_bytes))) => {
                    conn = None;
                    live.open.fetch_sub(1, Relaxed);
                    if !fresh && !got_bytes && attempt == 0 && !post {
                        stats.borrow_mut().reconnects += 1;
                        continue;
                    }
                    outcome = Some(Err(k));
                    break;
                }
                Err(_) => {
                    conn = None;
                    live.open.fetch_sub(1, Relaxed);
                    outcome = Some(Err(ErrKind::Timeout));
                    break;
                }
            }
        }
        let done = Instant::now();
        let failed_connect = matches!(outcome, Some(Err(ErrKind::Connect | ErrKind::Handshake)));
        {
            // Scoped: the borrow must end before the next await.
            let mut st = stats.borrow_mut();
            match outcome {
                Some(Ok(resp)) => {
                    on_conn += 1;
                    live.ok.fetch_add(1, Relaxed);
                    let sec = st.sec(plan.base, done);
                    sec.ok += 1;
                    sec.bytes_in += resp.wire_len;
                    sec.body_bytes += resp.body_len;
                    if in_steady {
                        st.ok += 1;
                        st.bytes_in += resp.wire_len;
                        st.bytes_out += req.len() as u64;
                        st.body_bytes += resp.body_len;
                        st.orig_bytes += if resp.encoded {
                            exp.size.unwrap_or(resp.body_len)
                        } else {
                            resp.body_len
                        };
                        st.encoded += resp.encoded as u64;
                        st.latency.record((done - started_at).as_micros() as u64);
                        st.ttfb.record(
                            resp.first_byte
                                .saturating_duration_since(t_start)
                                .as_micros() as u64,
                        );
                        st.ttlb.record((done - t_start).as_micros() as u64);
                    }
                    if resp.close || (cfg.requests_per_conn > 0 && on_conn >= cfg.requests_per_conn)
                    {
                        // Client-side close: FIN teardown, as a CPS test requires.
                        conn = None;
                        live.open.fetch_sub(1, Relaxed);
                    }
                }
                Some(Err(k)) => {
                    live.errors.fetch_add(1, Relaxed);
                    st.errors_all += 1;
                    st.sec(plan.base, done).errors += 1;
                    if in_steady {
                        st.errors[k.idx()] += 1;
                    }
                }
                None => {}
            }
        }
        if buf.capacity() > buf_cap * 4 {
            buf = Vec::new();
        }
        match interval {
            Some(iv) => due += iv,
            None => {
                let pause = if failed_connect {
                    // Don't spin on a refusing server.
                    cfg.think.max(Duration::from_millis(10))
                } else {
                    cfg.think
                };
                if !pause.is_zero() {
                    if cfg.think >= Duration::from_secs(1) && conn.is_none() {
                        buf = Vec::new();
                    }
                    let wake = (Instant::now() + pause).min(stop);
                    tokio::time::sleep_until(wake.into()).await;
                }
            }
        }
    }
    if conn.is_some() {
        live.open.fetch_sub(1, Relaxed);
    }
}
