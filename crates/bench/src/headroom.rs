//! `switchyard bench headroom`: can this load generator push as hard as wrk?
//!
//! Every figure the bench reports assumes the generator is not what limits
//! the rate. This check measures that, as a benchmark and not as a test:
//! the origin emulator answers small bodies at once (so the generators set
//! the pace), and our generator and wrk take turns against it, with the
//! same connections and duration, on the same CPU. The verdict compares the
//! best round of each, since a busy machine only ever makes a round slower.
//! It used to be a test in the suite; a speed bar inside a timed test fails
//! whenever something else shares the machine, which says nothing about
//! the generator (the brief keeps speed goals in benchmarks).

use std::net::SocketAddr;
use std::time::Duration;

use crate::args::Args;
use crate::load::{self, LoadConfig, PathSpec};
use crate::origin::{spawn_origin, OriginOpts};

pub const HELP: &str =
    "switchyard bench headroom [--rounds 3] [--duration 2s] [--connections 50] [--size 128]
                         [--origin-cpu 0] [--load-cpu 1] [--min-ratio 0.9] [--json]
  Our load generator against wrk on the origin emulator, interleaved rounds; exit 1
  when our best round is under --min-ratio of wrk's (the generator would limit a bench).";

/// One comparison's settings.
#[derive(Clone, Debug)]
pub struct Opts {
    pub rounds: usize,
    pub duration: Duration,
    pub connections: usize,
    pub size: u64,
    pub origin_cpu: Option<usize>,
    pub load_cpu: Option<usize>,
    pub min_ratio: f64,
}

impl Default for Opts {
    fn default() -> Opts {
        let two = crate::sys::allowed_cpus() >= 2;
        Opts {
            rounds: 3,
            duration: Duration::from_secs(2),
            connections: 50,
            size: 128,
            origin_cpu: two.then_some(0),
            load_cpu: two.then_some(1),
            min_ratio: 0.9,
        }
    }
}

/// Requests per second of each round, ours and wrk's, in the order run.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub ours: Vec<f64>,
    pub wrk: Vec<f64>,
}

impl Outcome {
    fn best(v: &[f64]) -> f64 {
        v.iter().copied().fold(0.0, f64::max)
    }

    /// Our best round over wrk's best round.
    pub fn ratio(&self) -> f64 {
        let wrk = Outcome::best(&self.wrk);
        if wrk > 0.0 {
            Outcome::best(&self.ours) / wrk
        } else {
            0.0
        }
    }
}

pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = Args::parse(args, &["json", "help"])?;
    if a.flag("help") {
        println!("{HELP}");
        return Ok(0);
    }
    let d = Opts::default();
    let opts = Opts {
        rounds: a.num("rounds")?.unwrap_or(d.rounds).max(1),
        duration: a.duration("duration")?.unwrap_or(d.duration),
        connections: a.num("connections")?.unwrap_or(d.connections).max(1),
        size: a.num("size")?.unwrap_or(d.size),
        origin_cpu: a.num("origin-cpu")?.or(d.origin_cpu),
        load_cpu: a.num("load-cpu")?.or(d.load_cpu),
        min_ratio: a.num("min-ratio")?.unwrap_or(d.min_ratio),
    };
    let json = a.flag("json");
    a.finish()?;
    let out = run(&opts)?;
    let ratio = out.ratio();
    if json {
        println!(
            "{{\"ours_rps\":{:?},\"wrk_rps\":{:?},\"ratio\":{ratio:.3},\"min_ratio\":{}}}",
            out.ours, out.wrk, opts.min_ratio
        );
    } else {
        for (i, (o, w)) in out.ours.iter().zip(&out.wrk).enumerate() {
            println!("round {}: ours {o:.0} req/s, wrk {w:.0} req/s", i + 1);
        }
        println!(
            "best: ours {:.0}, wrk {:.0}: {ratio:.2}x (bar {:.2}x)",
            Outcome::best(&out.ours),
            Outcome::best(&out.wrk),
            opts.min_ratio
        );
    }
    Ok(if ratio >= opts.min_ratio { 0 } else { 1 })
}

/// Runs the rounds: wrk first in each, then ours, against one origin.
pub fn run(opts: &Opts) -> Result<Outcome, String> {
    let wrk = crate::sys::which("wrk").ok_or("no wrk on PATH (apt-get install -y wrk)")?;
    let origin = spawn_origin(
        &["127.0.0.1:0".parse().map_err(|e| format!("{e}"))?],
        OriginOpts {
            delay: Duration::ZERO,
            threads: 1,
            cpus: opts.origin_cpu.into_iter().collect(),
        },
    )
    .map_err(|e| format!("origin: {e}"))?;
    let addr = origin.addrs()[0];
    let path = format!("/size/{}", opts.size);
    let mut out = Outcome::default();
    for _ in 0..opts.rounds {
        out.wrk.push(wrk_rps(&wrk, addr, &path, opts)?);
        out.ours.push(ours_rps(addr, &path, opts)?);
    }
    Ok(out)
}

fn wrk_rps(wrk: &std::path::Path, addr: SocketAddr, path: &str, o: &Opts) -> Result<f64, String> {
    let secs = o.duration.as_secs().max(1);
    let mut cmd = crate::sys::taskset(o.load_cpu, wrk);
    let out = cmd
        .args([
            "-t1",
            &format!("-c{}", o.connections),
            &format!("-d{secs}s"),
            &format!("http://{addr}{path}"),
        ])
        .output()
        .map_err(|e| format!("wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("wrk printed no Requests/sec: {text}"))
}

fn ours_rps(addr: SocketAddr, path: &str, o: &Opts) -> Result<f64, String> {
    let cfg = LoadConfig {
        targets: vec![addr],
        host: "headroom".into(),
        paths: vec![PathSpec {
            path: path.into(),
            expect_size: Some(o.size),
        }],
        connections: o.connections,
        threads: 1,
        duration: Duration::from_secs(o.duration.as_secs().max(1)),
        timeout: Duration::from_secs(2),
        cpus: o.load_cpu.into_iter().collect(),
        ..LoadConfig::default()
    };
    let r = load::run(cfg, &mut |_| {})?;
    if r.errors_total() > 0 {
        return Err(format!("our generator saw errors: {:?}", r.errors));
    }
    Ok(r.rps)
}
