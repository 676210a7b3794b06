//! The `ddos` scenario of `switchyard bench shield` (issue 12: "each
//! vector at rising rates while 1,000 valid connections per second must
//! succeed").
//!
//! For each vector of `[shield.ddos]` (all 28 by default, `--vectors`):
//! - new namespaces and a new Switchyard with `[shield.xdp]` (generic
//!   mode on the DUT's veth) and `[shield.ddos]` at its defaults: learned
//!   thresholds with the vectors' floors, limits at the threshold, bad
//!   headers dropped from the first packet;
//! - valid clients open `--valid-rate` connections per second (an HTTP
//!   GET each) from the first second to the last, open loop (tokio: a
//!   connection that hangs does not hold back the next);
//! - a baseline of `--baseline` seconds with valid traffic only, so the
//!   learned thresholds have seen normal traffic;
//! - then the vector's frames (`frames.rs`) at each of `--rates` in turn
//!   (default 10 k/s, 100 k/s, and the generator's maximum), each for
//!   `--step` seconds, bounded by `--flood-packets`; after each, a pause of
//!   1.3 s so that the detector's once-a-second tick has counted all of it.
//!
//! Per step: the offered rate (frames the generator sent / its time), the
//! vector's packets and dropped (deltas of GET /api/v1/shield's
//! `global.ddos.vectors[]` across the step and its pause), whether it was
//! detected, the DUT core's busy time and CPU per received frame (as in
//! `syn-flood`), and the valid connections that succeeded among those
//! started during the step.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::frames::{self, Ends};
use super::*;
use crate::pktgen::{Generator, Limits, Pool, Shape};

pub const DEFAULT_RATES: &str = "10k,100k,max";

/// The `ddos` options (the rest comes from the shield's `Opts`).
#[derive(Clone, Debug)]
pub struct DdosOpts {
    pub vectors: Vec<&'static str>,
    /// Frames per second of each step; None: as fast as the generator goes.
    pub rates: Vec<Option<u64>>,
    pub baseline: Duration,
    pub step: Duration,
    pub runs: usize,
    /// ACL rules loaded beside the vectors (0: none).
    pub rules: usize,
    /// Frames in each vector's pool.
    pub pool: usize,
}

/// `--vectors`: names, or a kind (`flood`, `bad_header`, `other`), or
/// `all`.
pub fn parse_vectors(list: &[String]) -> Result<Vec<&'static str>, String> {
    if list.is_empty() {
        return Ok(frames::VECTORS.iter().map(|v| v.0).collect());
    }
    let mut out: Vec<&'static str> = Vec::new();
    for w in list {
        let add: Vec<&'static str> = match w.as_str() {
            "all" => frames::VECTORS.iter().map(|v| v.0).collect(),
            k @ ("flood" | "bad_header" | "other") => frames::VECTORS
                .iter()
                .filter(|v| v.1 == k)
                .map(|v| v.0)
                .collect(),
            n => vec![frames::VECTORS
                .iter()
                .find(|v| v.0 == n)
                .map(|v| v.0)
                .ok_or_else(|| {
                    format!(
                        "unknown vector {n}; the vectors: {}",
                        frames::VECTORS
                            .iter()
                            .map(|v| v.0)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?],
        };
        for a in add {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    Ok(out)
}

/// `--rates 10k,100k,max`.
pub fn parse_rates(list: &[String]) -> Result<Vec<Option<u64>>, String> {
    let mut out = Vec::new();
    for w in list {
        let t = w.trim().to_ascii_lowercase();
        if t == "max" {
            out.push(None);
            continue;
        }
        let (num, mul) = if let Some(n) = t.strip_suffix('k') {
            (n, 1_000.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 1_000_000.0)
        } else {
            (t.as_str(), 1.0)
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("--rates: {w} is not a rate (10k, 250000, 1m, max)"))?;
        if v.is_nan() || v <= 0.0 {
            return Err(format!("--rates: {w} must be above 0"));
        }
        out.push(Some((v * mul).round() as u64));
    }
    if out.is_empty() {
        return Err("--rates: no rate".into());
    }
    Ok(out)
}

fn rate_name(r: Option<u64>) -> String {
    match r {
        None => "max".into(),
        Some(v) if v >= 1_000_000 && v % 1_000_000 == 0 => format!("{}M", v / 1_000_000),
        Some(v) if v >= 1_000 && v % 1_000 == 0 => format!("{}k", v / 1_000),
        Some(v) => v.to_string(),
    }
}

// ---------------------------------------------------------------- vectors

/// One vector's counters from GET /api/v1/shield.
#[derive(Clone, Debug, Default)]
struct Vec1 {
    packets: u64,
    dropped: u64,
    detected: bool,
    detections: u64,
    detected_since: Option<u64>,
    threshold: u64,
    rate_limit: Option<u64>,
    baseline: u64,
    peak_rate: u64,
}

/// Every vector's counters, by name; None when the API did not answer or
/// has no `global.ddos`.
fn vectors_now() -> Option<BTreeMap<String, Vec1>> {
    let j = admin_get("/api/v1/shield")?;
    let arr = j.get("global")?.get("ddos")?.get("vectors")?.as_arr();
    let mut m = BTreeMap::new();
    for v in arr {
        let Some(name) = v.get("name").and_then(|n| n.as_str()) else {
            continue;
        };
        let n = |k: &str| jnum(v.get(k));
        m.insert(
            name.to_string(),
            Vec1 {
                packets: n("packets"),
                dropped: n("dropped"),
                detected: matches!(v.get("detected"), Some(Json::Bool(true))),
                detections: n("detections"),
                detected_since: v
                    .get("detected_since")
                    .and_then(|x| x.as_f64())
                    .map(|x| x as u64),
                threshold: n("threshold"),
                rate_limit: v
                    .get("rate_limit")
                    .and_then(|x| x.as_f64())
                    .map(|x| x as u64),
                baseline: n("baseline"),
                peak_rate: n("peak_rate"),
            },
        );
    }
    (!m.is_empty()).then_some(m)
}

// ---------------------------------------------------------------- clients

/// Open-loop valid clients: connection k is due at start + k / rate,
/// whatever the earlier ones are doing (each is a task on one
/// current-thread tokio runtime in the generator namespace, on the load
/// core). A connection counts in the bucket of the step during which it
/// started (`step`); it has 3 s to connect (a lost SYN is sent again
/// after 1 s) and 3 s for its answer.
struct Clients {
    step: Arc<AtomicUsize>,
    counts: Arc<Vec<ClientCounts>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Result<Result<(), String>, String>>>,
}

impl Clients {
    fn start(rate: u64, buckets: usize, load_cpu: usize) -> Clients {
        let step = Arc::new(AtomicUsize::new(0));
        let counts: Arc<Vec<ClientCounts>> =
            Arc::new((0..buckets).map(|_| ClientCounts::default()).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let (st, c, sp) = (step.clone(), counts.clone(), stop.clone());
        let handle = in_ns(GEN_NS, move || -> Result<(), String> {
            let _ = sys::pin_current_thread(load_cpu);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("tokio: {e}"))?;
            rt.block_on(open_loop(rate.max(1), st, c, sp));
            Ok(())
        });
        Clients {
            step,
            counts,
            stop,
            handle: Some(handle),
        }
    }

    fn set_step(&self, i: usize) {
        self.step
            .store(i.min(self.counts.len().saturating_sub(1)), Relaxed);
    }

    /// (tried, ok, failed) of bucket `i`.
    fn counts(&self, i: usize) -> (u64, u64, u64) {
        self.counts
            .get(i)
            .map(|c| {
                (
                    c.tried.load(Relaxed),
                    c.ok.load(Relaxed),
                    c.failed.load(Relaxed),
                )
            })
            .unwrap_or((0, 0, 0))
    }

    /// Stops starting connections (the ones under way finish).
    fn stop(&self) {
        self.stop.store(true, Relaxed);
    }

    /// Stops, waits for the connections under way, and returns every
    /// bucket's (tried, ok, failed).
    fn finish(mut self) -> Result<Vec<(u64, u64, u64)>, String> {
        self.stop();
        if let Some(h) = self.handle.take() {
            join(h)??;
        }
        Ok((0..self.counts.len()).map(|b| self.counts(b)).collect())
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

async fn open_loop(
    rate: u64,
    step: Arc<AtomicUsize>,
    counts: Arc<Vec<ClientCounts>>,
    stop: Arc<AtomicBool>,
) {
    let Ok(ip) = DUT_IP.parse::<IpAddr>() else {
        return;
    };
    let addr = SocketAddr::new(ip, PORT);
    let start = tokio::time::Instant::now();
    let inflight = Arc::new(AtomicU64::new(0));
    let mut k = 0u64;
    while !stop.load(Relaxed) && !STOP.load(Relaxed) {
        let due = start + Duration::from_secs_f64(k as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        k += 1;
        let i = step.load(Relaxed);
        let Some(c) = counts.get(i) else { continue };
        c.tried.fetch_add(1, Relaxed);
        inflight.fetch_add(1, Relaxed);
        let (counts, inflight) = (counts.clone(), inflight.clone());
        tokio::spawn(async move {
            let ok = one_get(addr).await;
            if let Some(c) = counts.get(i) {
                if ok {
                    c.ok.fetch_add(1, Relaxed);
                } else {
                    c.failed.fetch_add(1, Relaxed);
                }
            }
            inflight.fetch_sub(1, Relaxed);
        });
    }
    // The ones under way: at most 6 s each (connect and answer).
    let t = tokio::time::Instant::now();
    while inflight.load(Relaxed) > 0 && t.elapsed() < Duration::from_secs(7) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One connection, one GET of 128 B with `Connection: close`; true when
/// the whole 200 answer arrived.
async fn one_get(addr: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = Duration::from_secs(3);
    let Ok(Ok(mut s)) = tokio::time::timeout(t, tokio::net::TcpStream::connect(addr)).await else {
        return false;
    };
    let _ = s.set_nodelay(true);
    let exchange = async {
        s.write_all(b"GET /size/128 HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::with_capacity(1024);
        // Connection: close: the answer ends where the stream does.
        s.read_to_end(&mut buf).await.ok()?;
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())?;
        (head.starts_with("http/1.1 200") && buf.len() - end >= len).then_some(())
    };
    matches!(tokio::time::timeout(t, exchange).await, Ok(Some(())))
}

// ---------------------------------------------------------------- DUT

fn ddos_config(rules: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n[admin]\nlisten = \"{ADMIN}\"\n[[vserver]]\nname = \"web\"\nlisten = [\"{DUT_IP}:{PORT}\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{ORIGIN}\"\n"
    );
    s.push_str(rules);
    let _ = writeln!(
        s,
        "[shield.xdp]\ninterfaces = [\"{DUT_DEV}\"]\nmode = \"generic\"\n[shield.ddos]\n# The defaults, written out: thresholds learned (5 x the baseline,\n# never below each vector's floor), limits at the threshold.\nmultiplier = 5\nhold = \"5s\""
    );
    s
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Starts Switchyard in the DUT namespace and waits until the admin API
/// answers with `global.ddos` and XDP attached; returns the DUT and the
/// program's id.
fn start_dut(o: &Opts, cfg: &Path, log: &Path) -> Result<(Dut, Option<u64>), String> {
    let mut dut = Dut::start(o, cfg, log)?;
    let t0 = Instant::now();
    loop {
        if STOP.load(Relaxed) {
            return Err("interrupted".into());
        }
        if let Ok(Some(st)) = dut.child_status() {
            return Err(format!("Switchyard exited ({st}): {}", dut.log_text()));
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(format!("not ready in 20 s: {}", dut.log_text()));
        }
        if let Some(j) = admin_get("/api/v1/shield") {
            let g = j.get("global");
            let x = g.and_then(|g| g.get("xdp"));
            if x.and_then(|x| x.get("built_with_xdp"))
                .map(|v| matches!(v, Json::Bool(false)))
                == Some(true)
            {
                return Err("this Switchyard was built without XDP (no clang)".into());
            }
            let attached = x
                .and_then(|x| x.get("attached"))
                .is_some_and(|a| !a.as_arr().is_empty());
            let ddos = g
                .and_then(|g| g.get("ddos"))
                .and_then(|d| d.get("vectors"))
                .is_some_and(|v| !v.as_arr().is_empty());
            if attached && ddos {
                return Ok((dut, xdp_prog_id()));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------- one vector

/// One vector: the baseline, then each rate. Returns one record per step
/// (the baseline first).
pub fn vector_run(
    o: &Opts,
    d: &DdosOpts,
    name: &'static str,
    run_no: usize,
) -> Result<Vec<Json>, String> {
    let work = o.out.join("work").join("ddos");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let (Some(gm), Some(dm)) = (pktgen::parse_mac(GEN_MAC), pktgen::parse_mac(DUT_MAC)) else {
        return Err("bad MAC constant".into());
    };
    let dst4: Ipv4Addr = DUT_IP.parse().map_err(|_| "address")?;
    let dst6: Ipv6Addr = DUT_IP6.parse().map_err(|_| "address")?;
    let ends = Ends {
        src_mac: gm,
        dst_mac: dm,
        dst4,
        dst6,
        port: PORT,
    };
    // Built once per vector, before the clock starts: sending costs no
    // building.
    let pool = Arc::new(Pool::build(
        &Shape::Template(Box::new(move |i, out| {
            frames::frame(name, i, &ends, out);
        })),
        d.pool,
        gm,
        dm,
    ));
    if pool.frame(0).is_empty() {
        return Err(format!("{name}: no frame shape"));
    }
    let _net = Net::new(o.dut_cpu, o.load_cpu)?;
    // IPv6 on the link (no duplicate detection: usable at once), and the
    // route back to the IPv6 sources, as for IPv4.
    run(
        "ip",
        &[
            "-n",
            DUT_NS,
            "addr",
            "add",
            &format!("{DUT_IP6}/64"),
            "dev",
            DUT_DEV,
            "nodad",
        ],
    )?;
    run(
        "ip",
        &[
            "-n",
            GEN_NS,
            "addr",
            "add",
            &format!("{CLIENT_IP6}/64"),
            "dev",
            GEN_DEV,
            "nodad",
        ],
    )?;
    run(
        "ip",
        &[
            "-n",
            DUT_NS,
            "-6",
            "route",
            "add",
            "fd88:200::/32",
            "via",
            CLIENT_IP6,
        ],
    )?;
    // The kernel's cookies when its SYN queue is full (the default): the
    // vectors, not a sysctl, are what is measured.
    ns_sh(DUT_NS, "sysctl -qw net.ipv4.tcp_syncookies=1")?;
    let load_cpu = o.load_cpu;
    let origin = super::start_origin(load_cpu)?;
    let rules_t = if d.rules > 0 {
        rules_toml(&rules(d.rules))
    } else {
        String::new()
    };
    let cfg = work.join(format!("{name}-{run_no}.toml"));
    std::fs::write(&cfg, ddos_config(&rules_t)).map_err(|e| format!("{}: {e}", cfg.display()))?;
    let log = work.join(format!("{name}-{run_no}.log"));
    let (dut, prog) = start_dut(o, &cfg, &log)?;

    // Buckets: 0 the baseline, 1..=n the rates, n + 1 the pauses.
    let pause = d.rates.len() + 1;
    let clients = Clients::start(o.valid_rate, d.rates.len() + 2, o.load_cpu);
    // (the clients' bucket, the record without the clients' counts: those
    // are added once every connection has ended).
    let mut records: Vec<(usize, Json)> = Vec::new();
    let base = |step: &str| {
        obj()
            .set("vector", name)
            .set("kind", frames::kind(name).unwrap_or("?"))
            .set("run", run_no)
            .set("step", step)
    };

    // Baseline: valid traffic only.
    let v_start = vectors_now().ok_or("GET /api/v1/shield: no global.ddos.vectors")?;
    sleep_unless_stopped(Duration::from_millis(500));
    let q0 = quiet_snap(o, prog);
    sleep_unless_stopped(d.baseline.saturating_sub(Duration::from_millis(500)));
    let q1 = quiet_snap(o, prog);
    let base_own = kernel(&q0, &q1);
    let (s0, s1) = (q0, q1);
    clients.set_step(pause);
    let v_base = vectors_now().ok_or("GET /api/v1/shield: no answer after the baseline")?;
    let me = v_base.get(name).cloned().unwrap_or_default();
    let base_secs = secs(&s0, &s1);
    let base_rx = s1.dut_rx.saturating_sub(s0.dut_rx);
    records.push((
        0,
        figures(base("baseline"), &s0, &s1)
            .set("threshold", me.threshold)
            .set("rate_limit", me.rate_limit)
            .set("baseline_rate", me.baseline)
            .set("dut_kernel_busy", base_own / base_secs)
            .set(
                "packets",
                me.packets
                    .saturating_sub(v_start.get(name).map_or(0, |v| v.packets)),
            )
            .set("detected", me.detected),
    ));

    let mut before = v_base;
    for (k, rate) in d.rates.iter().enumerate() {
        if STOP.load(Relaxed) {
            break;
        }
        let bucket = k + 1;
        let me0 = before.get(name).cloned().unwrap_or_default();
        let stop = Arc::new(AtomicBool::new(false));
        let limits = Limits {
            rate: *rate,
            max_packets: o.flood_packets,
            // The step, its warm-up and a margin: the flood always ends.
            max_duration: d.step + Duration::from_millis(1500),
        };
        clients.set_step(bucket);
        let started = unix_secs();
        let (p, st) = (pool.clone(), stop.clone());
        let flood = in_ns(GEN_NS, move || -> Result<pktgen::Sent, String> {
            let _ = sys::pin_current_thread(load_cpu);
            let g = Generator::open(GEN_DEV).map_err(|e| format!("AF_PACKET on {GEN_DEV}: {e}"))?;
            let both = StopEither(&st);
            Ok(g.flood(&p, limits, both.flag()))
        });
        sleep_unless_stopped(Duration::from_millis(500));
        let q0 = quiet_snap(o, prog);
        sleep_unless_stopped(d.step);
        let q1 = quiet_snap(o, prog);
        let own_s = kernel(&q0, &q1);
        let (s0, s1) = (q0, q1);
        stop.store(true, Relaxed);
        let sent = join(flood)??;
        clients.set_step(pause);
        if k + 1 == d.rates.len() {
            // No new connections after the last step; the ones under way
            // end during the pause.
            clients.stop();
        }
        // A tick of the detector after the flood's last frame.
        sleep_unless_stopped(Duration::from_millis(1300));
        let after = vectors_now().ok_or("GET /api/v1/shield: no answer after a step")?;
        let me1 = after.get(name).cloned().unwrap_or_default();
        let counted = me1.packets.saturating_sub(me0.packets);
        let dropped = me1.dropped.saturating_sub(me0.dropped);
        let new_detection = me1.detections > me0.detections;
        let detected = me1.detected || new_detection;
        // Other vectors that went off during this step (the same frames
        // can belong to several: an oversize SYN is a SYN too).
        let also: Vec<Json> = after
            .iter()
            .filter(|(n, v)| {
                n.as_str() != name
                    && v.detections > before.get(n.as_str()).map_or(0, |b| b.detections)
            })
            .map(|(n, _)| Json::from(n.as_str()))
            .collect();
        let busy = s1.dut_cpu.minus(&s0.dut_cpu).busy();
        let w = secs(&s0, &s1);
        let rx = s1.dut_rx.saturating_sub(s0.dut_rx);
        // The flood's own cost: the DUT core's kernel time above the
        // baseline's, per frame above the baseline's (the valid traffic
        // is then not charged to the flood).
        let extra_busy = own_s / w - base_own / base_secs;
        let extra_rx = rx as f64 / w - base_rx as f64 / base_secs;
        let mut r = figures(base(&rate_name(*rate)), &s0, &s1)
            .set("rate_asked", rate.map(|r| r as f64))
            .set("gen_sent", sent.packets)
            .set("gen_refused", sent.refused)
            .set("gen_rate", sent.rate())
            .set("packets", counted)
            .set("dropped", dropped)
            .set("passed", counted.saturating_sub(dropped))
            .set(
                "counted_of_sent",
                if sent.packets > 0 {
                    counted as f64 / sent.packets as f64
                } else {
                    0.0
                },
            )
            .set("detected", detected)
            .set("new_detection", new_detection)
            .set("detections", me1.detections)
            .set(
                "detected_after_s",
                me1.detected_since
                    .filter(|_| new_detection)
                    .map(|t| t.saturating_sub(started)),
            )
            .set("threshold", me1.threshold)
            .set("rate_limit", me1.rate_limit)
            .set("peak_rate", me1.peak_rate)
            .set("also_detected", Json::Arr(also))
            .set(
                "dut_ns_per_frame",
                if rx > 0 { busy / rx as f64 * 1e9 } else { 0.0 },
            )
            .set("dut_kernel_busy", own_s / w)
            .set(
                "dut_kernel_ns_per_frame",
                if rx > 0 { own_s / rx as f64 * 1e9 } else { 0.0 },
            );
        if extra_rx > 1000.0 && extra_busy > 0.0 {
            r = r.set("flood_ns_per_frame", extra_busy / extra_rx * 1e9);
        }
        records.push((bucket, r));
        before = after;
    }
    // Only once every connection has ended (or given up) are a step's
    // counts whole: a connection whose SYN was lost is still retrying
    // after the step's pause.
    let counts = clients.finish()?;
    let records: Vec<Json> = records
        .into_iter()
        .map(|(b, r)| {
            let (tried, ok, failed) = counts.get(b).copied().unwrap_or((0, 0, 0));
            let r = r
                .set("valid_tried", tried)
                .set("valid_ok", ok)
                .set("valid_failed", failed)
                .set("valid_unfinished", tried.saturating_sub(ok + failed));
            eprintln!("  {}", r.to_string_compact());
            r
        })
        .collect();
    let _ = std::fs::write(work.join(format!("{name}-{run_no}.stderr")), dut.log_text());
    drop(dut);
    drop(origin);
    Ok(records)
}

/// The counters of `snap` without asking the admin API during a flood
/// (the DUT core is busy; the vectors are read after each step instead).
fn quiet_snap(o: &Opts, prog: Option<u64>) -> Snap {
    let mut s = snap(o, None);
    s.bpf = prog.and_then(bpf_stats);
    s
}

/// The DUT core's kernel time between two snapshots: system, irq and
/// softirq (the frames' work: RPS puts it there, generic XDP included).
/// Unlike the core's busy time, it leaves out user time: Switchyard's
/// (small: the valid clients) and whatever else the machine ran on that
/// core (a neighbour's compiler). Switchyard's own process time is not
/// added: the kernel charges a softirq that interrupts a task to that
/// task's system time too, so the sum would count it twice.
fn kernel(a: &Snap, b: &Snap) -> f64 {
    let d = b.dut_cpu.minus(&a.dut_cpu);
    d.system + d.irq + d.softirq
}

fn secs(s0: &Snap, s1: &Snap) -> f64 {
    s1.at
        .zip(s0.at)
        .map(|(a, b)| a.duration_since(b).as_secs_f64())
        .unwrap_or(1.0)
        .max(1e-6)
}

/// Every vector of `d`, `d.runs` times (interleaved: all vectors, then all
/// again).
pub fn run_all(o: &Opts, d: &DdosOpts, failures: &mut Vec<String>) -> Vec<Json> {
    let mut out = Vec::new();
    'outer: for run_no in 1..=d.runs {
        for name in &d.vectors {
            if STOP.load(Relaxed) {
                break 'outer;
            }
            eprintln!("shield: ddos run {run_no}/{} {name}", d.runs);
            match vector_run(o, d, name, run_no) {
                Ok(v) => out.extend(v),
                Err(e) => {
                    eprintln!("  failed: {e}");
                    failures.push(format!("ddos {name} run {run_no}: {e}"));
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------- report

fn med(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    median(v)
}

/// The report's section: per vector and step, medians over the runs.
pub fn render_section(r: &Json) -> String {
    let recs = r.get("ddos").map(|s| s.as_arr()).unwrap_or(&[]);
    if recs.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "## DDoS vectors (each at rising rates, valid clients connecting meanwhile)\n\n",
    );
    if let Some(d) = r.get("ddos_setup").and_then(|v| v.as_str()) {
        let _ = writeln!(s, "{d}\n");
    }
    s.push_str("| vector | kind | step | offered/s | DUT received/s | counted | dropped | detected | threshold, limit | DUT core busy | DUT core ns/frame: busy / kernel / flood only | XDP program ns/frame | valid connections ok |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    // Vectors and steps in the order they ran.
    let mut keys: Vec<(String, String)> = Vec::new();
    for x in recs {
        let k = (
            x.get("vector")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string(),
            x.get("step")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string(),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut summary: Vec<String> = Vec::new();
    for (v, st) in &keys {
        let rows: Vec<&Json> = recs
            .iter()
            .filter(|x| {
                x.get("vector").and_then(|j| j.as_str()) == Some(v.as_str())
                    && x.get("step").and_then(|j| j.as_str()) == Some(st.as_str())
            })
            .collect();
        let m = |k: &str| {
            let mut vals: Vec<f64> = rows.iter().filter_map(|x| x.get(k)?.as_f64()).collect();
            med(&mut vals)
        };
        let mut ok: Vec<f64> = rows
            .iter()
            .filter_map(|x| {
                let t = x.get("valid_tried")?.as_f64()?;
                let o = x.get("valid_ok")?.as_f64()?;
                (t > 0.0).then_some(o / t)
            })
            .collect();
        let okm = med(&mut ok);
        let det = rows
            .iter()
            .filter(|x| matches!(x.get("detected"), Some(Json::Bool(true))))
            .count();
        let det_s = if st == "baseline" {
            if det > 0 {
                format!("yes ({det}/{})", rows.len())
            } else {
                "no".into()
            }
        } else {
            let after = m("detected_after_s")
                .map(|a| format!(", after {:.0} s", a.0))
                .unwrap_or_default();
            // The other vectors that went off during the step, in any run.
            let mut also: Vec<&str> = Vec::new();
            for x in &rows {
                for a in x.get("also_detected").map(|a| a.as_arr()).unwrap_or(&[]) {
                    if let Some(n) = a.as_str() {
                        if !also.contains(&n) {
                            also.push(n);
                        }
                    }
                }
            }
            let also = if also.is_empty() {
                String::new()
            } else {
                format!("; also {}", also.join(", "))
            };
            match det {
                0 => format!("**no**{also}"),
                n if n == rows.len() => format!("yes{after}{also}"),
                n => format!("{n}/{}{after}{also}", rows.len()),
            }
        };
        let kind = rows
            .first()
            .and_then(|x| x.get("kind"))
            .and_then(|k| k.as_str())
            .unwrap_or("");
        let limit = match (m("threshold"), m("rate_limit")) {
            (Some(t), Some(l)) => format!("{}, {}", si(t.0), si(l.0)),
            (Some(t), None) => format!("{}, -", si(t.0)),
            _ => "-".into(),
        };
        let f0 = |x: Option<(f64, f64, f64)>| x.map_or("-".to_string(), |v| format!("{:.0}", v.0));
        let ns = format!(
            "{} / {} / {}",
            f0(m("dut_ns_per_frame")),
            f0(m("dut_kernel_ns_per_frame")),
            f0(m("flood_ns_per_frame"))
        );
        let (offered, counted, dropped) = if st == "baseline" {
            ("-".into(), cell(m("packets"), si), "-".into())
        } else {
            (
                cell(m("gen_rate"), si),
                cell(m("packets"), si),
                cell(m("dropped"), si),
            )
        };
        let busy = format!(
            "{}; kernel {} %",
            cell(m("dut_busy"), pct),
            f0(m("dut_kernel_busy").map(|v| (v.0 * 100.0, 0.0, 0.0)))
        );
        let _ = writeln!(
            s,
            "| {v} | {kind} | {st} | {offered} | {} | {counted} | {dropped} | {det_s} | {limit} | {busy} | {ns} | {} | {} |",
            cell(m("rx_rate"), si),
            cell(m("bpf_ns_per_pkt"), |x| format!("{x:.0}")),
            cell(okm, |x| format!("{:.1} %", x * 100.0)),
        );
        if st != "baseline" {
            if let Some(x) = okm {
                if x.0 < 0.99 {
                    summary.push(format!("{v} at {st}: {:.1} %", x.0 * 100.0));
                }
            }
            if det == 0 {
                summary.push(format!("{v} at {st}: not detected"));
            }
        }
    }
    s.push('\n');
    s.push_str("- counted, dropped: the vector's `packets` and `dropped` in GET /api/v1/shield, deltas over the step and the 1.3 s after it. DUT ns/frame: the DUT core's busy time over the frames its veth received (everything on that core charged, as in syn-flood); the core's kernel time (system, irq and softirq: the frames' work, generic XDP included, without the user time of Switchyard or of anything else on that core) over the same frames; the flood only: kernel time and frames above the baseline's (shown when both rose). XDP program ns/frame: `run_time_ns / run_cnt` of the program (BPF statistics), every frame of the window, valid ones included.\n");
    if summary.is_empty() {
        s.push_str("- Every step: detected, and at least 99 % of valid connections succeeded.\n");
    } else {
        let _ = writeln!(
            s,
            "- Below 99 % of valid connections, or not detected: {}.",
            summary.join("; ")
        );
    }
    s.push('\n');
    s
}

/// What the report says about the setup.
pub fn setup_text(d: &DdosOpts, o: &Opts) -> String {
    format!(
        "Switchyard with `[shield.xdp]` (generic mode on the DUT's veth) and `[shield.ddos]` at its defaults (learned thresholds: 5x the baseline, never below each vector's floor; limit = threshold; bad headers dropped from the first packet), {}; a new DUT per vector; {} s of valid traffic only, then each of {} for {} s ({} frames in the vector's pool); {} valid connections per second throughout.",
        if d.rules > 0 {
            format!("{} ACL rules", d.rules)
        } else {
            "no ACL rules".into()
        },
        d.baseline.as_secs_f64(),
        d.rates
            .iter()
            .map(|r| rate_name(*r))
            .collect::<Vec<_>>()
            .join(", "),
        d.step.as_secs_f64(),
        d.pool,
        o.valid_rate
    )
}

pub fn default_pool() -> usize {
    16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse() {
        let r = parse_rates(&["10k".into(), "250000".into(), "1m".into(), "max".into()]);
        assert_eq!(
            r,
            Ok(vec![Some(10_000), Some(250_000), Some(1_000_000), None])
        );
        assert!(parse_rates(&["fast".into()]).is_err());
        assert!(parse_rates(&["0".into()]).is_err());
        assert_eq!(rate_name(Some(100_000)), "100k");
        assert_eq!(rate_name(None), "max");
        let v = parse_vectors(&["bad_header".into(), "udp_flood".into()]).unwrap_or_default();
        assert_eq!(v.len(), 11);
        assert_eq!(v.last(), Some(&"udp_flood"));
        assert_eq!(parse_vectors(&[]).map(|v| v.len()), Ok(28));
        assert!(parse_vectors(&["udp_flod".into()]).is_err());
    }

    #[test]
    fn the_config_turns_the_vectors_on() {
        let c = ddos_config("");
        assert!(c.contains("[shield.xdp]\ninterfaces = [\"shd0\"]\nmode = \"generic\""));
        assert!(c.contains("[shield.ddos]"));
    }

    #[test]
    fn the_section_renders_medians() {
        let rec = |run: u64, ok: u64| {
            obj()
                .set("vector", "udp_flood")
                .set("kind", "flood")
                .set("step", "100k")
                .set("run", run)
                .set("gen_rate", 100_000.0)
                .set("packets", 300_000u64)
                .set("dropped", 150_000u64)
                .set("detected", true)
                .set("detected_after_s", 1u64)
                .set("threshold", 50_000u64)
                .set("rate_limit", 50_000u64)
                .set("valid_tried", 1000u64)
                .set("valid_ok", ok)
        };
        let r = obj().set(
            "ddos",
            Json::Arr(vec![rec(1, 1000), rec(2, 900), rec(3, 950)]),
        );
        let s = render_section(&r);
        assert!(s.contains("| udp_flood | flood | 100k | 100.0 k |"), "{s}");
        assert!(s.contains("yes, after 1 s"), "{s}");
        assert!(s.contains("95.0 % (90.0 %-100.0 %)"), "{s}");
        assert!(s.contains("udp_flood at 100k: 95.0 %"), "{s}");
    }
}
