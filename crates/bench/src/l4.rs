//! `switchyard bench l4`: the layer-4 figures of issue 10, Switchyard's
//! `tcp` and `udp` vservers against HAProxy `mode tcp` and nginx `stream`.
//!
//! - **cps**: a new TCP connection per exchange (connect, send a 64-byte
//!   request, read the answer of 128 B / 1 KB / 64 KB, the origin closes
//!   after answering, the client closes at EOF). A closed-loop probe finds
//!   each DUT's maximum (the higher of two 1 s probes), then every DUT is
//!   run at one offered rate (80 % of the lowest maximum) and compared by
//!   its CPU time per connection (utime + stime of its processes, /proc).
//! - **throughput**: persistent connections, 64 KB and 512 KB answers back
//!   to back; bytes delivered per second of DUT CPU (per core).
//! - **udp**: datagrams echoed through the DUT (a session per client
//!   address, and per-datagram balancing as for DNS). As for cps, a
//!   closed-loop probe finds each DUT's maximum, then every DUT runs open
//!   loop at 80 % of the lowest; datagrams per second of DUT CPU. HAProxy
//!   has no UDP proxying (Debian's 2.6).
//! - **iperf3** and **wrk**: standard tools through the same DUT, in the
//!   same run: `iperf3 -R` through a tcp listener to an `iperf3 -s`, and
//!   `wrk -H "Connection: close"` through a tcp listener to the bench's HTTP
//!   origin (a connection per request).
//!
//! Switchyard runs once per `zero_copy` mode ("auto", "splice", "copy") so
//! the report says which wins per size. Each DUT gets one core and one
//! configuration for every case; the load, the origins and the tools run on
//! the other core; the DUT is restarted for every sample; runs interleave
//! (A B C A B C ...) and the report gives medians, min and max, and ratios.

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::args::{fmt_size, Args};
use crate::dut::{self, Kind, Ports};
use crate::json::{obj, Json};
use crate::sys;

/// Bytes of one request: the answer's size (u64, little endian), a byte
/// saying whether the origin closes after answering (1), then padding.
pub const REQ_LEN: usize = 64;

pub fn request(answer: u64, close: bool) -> [u8; REQ_LEN] {
    let mut b = [b'.'; REQ_LEN];
    b[..8].copy_from_slice(&answer.to_le_bytes());
    b[8] = u8::from(close);
    b
}

pub fn parse_request(b: &[u8; REQ_LEN]) -> (u64, bool) {
    let mut n = [0u8; 8];
    n.copy_from_slice(&b[..8]);
    (u64::from_le_bytes(n), b[8] == 1)
}

static FILL: [u8; 256 * 1024] = [b'x'; 256 * 1024];

/// The raw TCP origin: answers each REQ_LEN-byte request with the number of
/// bytes it asks for; closes after a request marked so, or at the client's
/// EOF.
pub async fn serve_tcp(l: TcpListener) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        tokio::spawn(async move {
            let _ = serve_tcp_conn(s).await;
        });
    }
}

async fn serve_tcp_conn(mut s: TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut req = [0u8; REQ_LEN];
    loop {
        match s.read_exact(&mut req).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let (mut left, close) = parse_request(&req);
        while left > 0 {
            let n = left.min(FILL.len() as u64) as usize;
            s.write_all(&FILL[..n]).await?;
            left -= n as u64;
        }
        if close {
            return Ok(());
        }
    }
}

/// The bench's listeners (on the DUT) and origins (on the load core).
#[derive(Clone, Debug)]
pub struct L4Ports {
    /// tcp listener to the raw origin (cps and throughput).
    pub tcp: u16,
    /// tcp listener to the HTTP origin (wrk).
    pub http: u16,
    /// tcp listener to `iperf3 -s`.
    pub iperf: u16,
    /// udp listener, a session per client address.
    pub udp: u16,
    /// udp listener, every datagram balanced on its own (DNS style).
    pub udp_dns: u16,
    pub origin_tcp: SocketAddr,
    pub origin_http: SocketAddr,
    pub origin_iperf: SocketAddr,
    pub origin_udp: SocketAddr,
}

impl L4Ports {
    pub fn from_base(base: u16) -> L4Ports {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        L4Ports {
            tcp: base,
            http: base + 1,
            iperf: base + 2,
            udp: base + 3,
            udp_dns: base + 4,
            origin_tcp: a(base + 1001),
            origin_http: a(base + 1002),
            origin_iperf: a(base + 1003),
            origin_udp: a(base + 1004),
        }
    }
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }
}

/// The relay modes of Switchyard's tcp vservers.
pub const ZERO_COPY_MODES: &[&str] = &["auto", "splice", "copy"];

#[derive(Clone, Debug)]
pub struct L4Target {
    /// switchyard-auto, switchyard-splice, switchyard-copy, haproxy, nginx.
    pub name: String,
    pub kind: Kind,
    pub program: PathBuf,
    /// Switchyard: `[vserver.l4] zero_copy`; HAProxy: Some("splice") adds
    /// `option splice-request` and `option splice-response` to splice-auto.
    pub zero_copy: Option<String>,
    /// Has UDP vservers (HAProxy: none; Switchyard: when its build has them).
    pub udp: bool,
    pub notes: Vec<String>,
    pub version: String,
}

/// Resolves switchyard[-auto|-splice|-copy], haproxy or nginx.
pub fn resolve(name: &str, switchyard_bin: Option<&Path>) -> Result<L4Target, String> {
    let base = name.split('-').next().unwrap_or(name);
    let t = dut::resolve(base, switchyard_bin)?;
    let mut out = L4Target {
        name: name.to_string(),
        kind: t.kind,
        program: t.program,
        zero_copy: None,
        udp: false,
        notes: Vec::new(),
        version: t.version,
    };
    match t.kind {
        Kind::Switchyard => {
            let mode = name.strip_prefix("switchyard").unwrap_or("");
            let mode = mode.strip_prefix('-').unwrap_or("auto");
            let mode = if mode.is_empty() { "auto" } else { mode };
            if !ZERO_COPY_MODES.contains(&mode) {
                return Err(format!(
                    "{name}: use switchyard-auto, switchyard-splice or switchyard-copy"
                ));
            }
            out.name = format!("switchyard-{mode}");
            out.zero_copy = Some(mode.to_string());
            match switchyard_udp_check(&out.program) {
                Ok(()) => out.udp = true,
                Err(e) => out.notes.push(format!(
                    "switchyard: this build rejects a protocol = \"udp\" vserver ({e}): UDP skipped"
                )),
            }
        }
        Kind::Haproxy => {
            match name {
                "haproxy" => {}
                "haproxy-splice" => out.zero_copy = Some("splice".into()),
                _ => return Err(format!("{name}: use haproxy or haproxy-splice")),
            }
            out.notes
                .push("haproxy: no UDP proxying in Debian's HAProxy 2.6: UDP skipped".into());
        }
        Kind::Nginx => {
            if name != "nginx" {
                return Err(format!("unknown target {name}"));
            }
            if dut::nginx_stream_module().is_none() {
                return Err(
                    "nginx: no stream module: apt-get install -y libnginx-mod-stream".into(),
                );
            }
            out.udp = true;
        }
        _ => {
            return Err(format!(
                "{name}: the l4 bench runs switchyard, haproxy and nginx"
            ))
        }
    }
    Ok(out)
}

/// `switchyard check` of a config with a udp vserver.
fn switchyard_udp_check(program: &Path) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("sy-l4-udpcheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let f = dir.join("udp.toml");
    let cfg = "[[vserver]]\nname = \"u\"\nprotocol = \"udp\"\nlisten = [\"127.0.0.1:9\"]\ndefault_pool = \"p\"\n\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:9\"\n";
    std::fs::write(&f, cfg).map_err(|e| e.to_string())?;
    let out = Command::new(program)
        .arg("check")
        .arg("-c")
        .arg(&f)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        let mut s = String::from_utf8_lossy(&out.stderr).to_string();
        s.push_str(&String::from_utf8_lossy(&out.stdout));
        Err(s.lines().next().unwrap_or("").trim().to_string())
    }
}

/// Relay buffer of every DUT: Switchyard's copy buffer is 16 KiB, HAProxy's
/// tune.bufsize and nginx's proxy_buffer_size are set to match.
pub const BUF_BYTES: u64 = 16 * 1024;

/// Writes the target's L4 configuration into `dir`; returns the command line.
pub fn write_config(t: &L4Target, p: &L4Ports, dir: &Path) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let w = |name: &str, text: &str| -> Result<String, String> {
        let f = dir.join(name);
        std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
        Ok(f.display().to_string())
    };
    let tcp = [
        ("raw", p.tcp, p.origin_tcp),
        ("http", p.http, p.origin_http),
        ("iperf", p.iperf, p.origin_iperf),
    ];
    let mut s = String::new();
    match t.kind {
        Kind::Switchyard => {
            let zc = t.zero_copy.as_deref().unwrap_or("auto");
            s.push_str("# Written by switchyard bench l4.\n[global]\nworkers = 1\npin_workers = false      # the harness pins with taskset instead\n");
            for (name, port, _) in tcp {
                let _ = write!(
                    s,
                    "\n[[vserver]]\nname = \"{name}\"\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:{port}\"]\ndefault_pool = \"{name}\"\n[vserver.l4]\nzero_copy = \"{zc}\"\nidle_timeout = \"10m\"\n"
                );
            }
            if t.udp {
                let _ = write!(
                    s,
                    "\n[[vserver]]\nname = \"udp\"\nprotocol = \"udp\"\nlisten = [\"127.0.0.1:{}\"]\ndefault_pool = \"udp\"\n[vserver.l4]\nidle_timeout = \"30s\"\n\n[[vserver]]\nname = \"dns\"\nprotocol = \"udp\"\nlisten = [\"127.0.0.1:{}\"]\ndefault_pool = \"udp\"\n[vserver.l4]\nper_datagram = true\n",
                    p.udp, p.udp_dns
                );
            }
            let mut pools: Vec<(&str, SocketAddr)> = tcp.iter().map(|(n, _, o)| (*n, *o)).collect();
            if t.udp {
                pools.push(("udp", p.origin_udp));
            }
            for (name, addr) in pools {
                let _ = write!(
                    s,
                    "\n[[pool]]\nname = \"{name}\"\n\n[[pool.member]]\naddress = \"{addr}\"\n"
                );
            }
            let f = w("switchyard.toml", &s)?;
            Ok(vec![
                t.program.display().to_string(),
                "run".into(),
                "-c".into(),
                f,
            ])
        }
        Kind::Haproxy => {
            // haproxy-splice: splice every transfer both ways, not only
            // once splice-auto's heuristic says so.
            let force = if t.zero_copy.as_deref() == Some("splice") {
                "\n    option splice-request\n    option splice-response"
            } else {
                ""
            };
            let _ = write!(
                s,
                r#"# Written by switchyard bench l4: expert settings for one core, no logging.
global
    nbthread 1
    maxconn 4096
    tune.bufsize {BUF_BYTES}

defaults
    mode tcp
    # splice(2) once a buffer fills (Switchyard's zero_copy = "auto" is the same idea)
    option splice-auto{force}
    timeout connect 5s
    timeout client 10m
    timeout server 10m
    maxconn 4096
"#
            );
            for (name, port, origin) in tcp {
                let _ = write!(
                    s,
                    "\nfrontend {name}\n    bind 127.0.0.1:{port}\n    default_backend {name}\n\nbackend {name}\n    server s1 {origin}\n"
                );
            }
            let f = w("haproxy.cfg", &s)?;
            Ok(vec![
                t.program.display().to_string(),
                "-db".into(),
                "-f".into(),
                f,
            ])
        }
        Kind::Nginx => {
            let d = dir.display();
            let m = dut::nginx_stream_module()
                .ok_or("nginx: no stream module: apt-get install -y libnginx-mod-stream")?;
            let _ = write!(
                s,
                r#"# Written by switchyard bench l4: one worker, no logging.
load_module {m};
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 20000;
pid {d}/nginx.pid;
error_log {d}/error.log crit;

events {{
    worker_connections 19000;
}}

stream {{
    proxy_buffer_size {buf}k;
    proxy_connect_timeout 5s;
    proxy_timeout 10m;
"#,
                m = m.display(),
                buf = BUF_BYTES / 1024,
            );
            for (_, port, origin) in tcp {
                let _ = write!(
                    s,
                    "\n    server {{\n        listen 127.0.0.1:{port};\n        proxy_pass {origin};\n    }}\n"
                );
            }
            let _ = write!(
                s,
                r#"
    # UDP: reuseport keeps a client's datagrams in one session.
    server {{
        listen 127.0.0.1:{udp} udp reuseport;
        proxy_pass {uo};
        proxy_timeout 30s;
    }}

    # DNS style: the session ends with the one answer.
    server {{
        listen 127.0.0.1:{dns} udp reuseport;
        proxy_pass {uo};
        proxy_responses 1;
        proxy_timeout 30s;
    }}
}}
"#,
                udp = p.udp,
                dns = p.udp_dns,
                uo = p.origin_udp,
            );
            let f = w("nginx.conf", &s)?;
            Ok(vec![
                t.program.display().to_string(),
                "-p".into(),
                d.to_string(),
                "-e".into(),
                format!("{d}/error.log"),
                "-c".into(),
                f,
            ])
        }
        _ => Err(format!("{}: not an L4 target", t.name)),
    }
}

/// What one case does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// A connection per exchange; answer bytes.
    Cps(u64),
    /// Persistent connections; answer bytes.
    Stream(u64),
    /// Datagram bytes; per-datagram balancing (DNS style) or sessions.
    Udp(usize, bool),
    /// `iperf3 -R` through the `iperf` listener.
    Iperf,
    /// `wrk` with Connection: close through the `http` listener; object bytes.
    Wrk(u64),
}

#[derive(Clone, Debug)]
pub struct L4Case {
    pub group: &'static str,
    pub name: String,
    pub work: Work,
}

impl L4Case {
    fn udp(&self) -> bool {
        matches!(self.work, Work::Udp(..))
    }
    /// The figure the case compares: CPU per operation (lower is better) or
    /// bytes / operations per DUT CPU second (higher is better).
    pub fn primary(&self) -> &'static str {
        match self.work {
            Work::Cps(_) | Work::Wrk(_) => "dut_cpu_us_per_op",
            Work::Stream(_) | Work::Iperf => "bytes_per_core_sec",
            Work::Udp(..) => "ops_per_core_sec",
        }
    }
    pub fn higher_is_better(&self) -> bool {
        self.primary() != "dut_cpu_us_per_op"
    }
    /// The peer the issue's target is stated against, and the target ratio.
    pub fn goal(&self) -> (&'static str, f64) {
        match self.work {
            Work::Cps(_) | Work::Wrk(_) => ("haproxy", 0.8),
            Work::Stream(_) | Work::Iperf => ("haproxy", 1.2),
            Work::Udp(..) => ("nginx", 1.5),
        }
    }
}

pub const GROUPS: &[&str] = &["cps", "throughput", "udp", "iperf3", "wrk"];

pub fn cases(groups: &[String]) -> Result<Vec<L4Case>, String> {
    let mut out = Vec::new();
    for g in groups {
        match g.as_str() {
            "cps" => {
                for n in [128u64, 1024, 65536] {
                    out.push(L4Case {
                        group: "cps",
                        name: format!("cps {} 1 conn/exchange", fmt_size(n)),
                        work: Work::Cps(n),
                    });
                }
            }
            "throughput" => {
                for n in [65536u64, 524288] {
                    out.push(L4Case {
                        group: "throughput",
                        name: format!("throughput {} persistent", fmt_size(n)),
                        work: Work::Stream(n),
                    });
                }
            }
            "udp" => {
                out.push(L4Case {
                    group: "udp",
                    name: "udp 64B sessions".into(),
                    work: Work::Udp(64, false),
                });
                out.push(L4Case {
                    group: "udp",
                    name: "udp 64B per datagram (DNS style)".into(),
                    work: Work::Udp(64, true),
                });
            }
            "iperf3" => out.push(L4Case {
                group: "iperf3",
                name: "iperf3 -R (cross-check of throughput)".into(),
                work: Work::Iperf,
            }),
            "wrk" => out.push(L4Case {
                group: "wrk",
                name: "wrk Connection: close 1KB (cross-check of cps)".into(),
                work: Work::Wrk(1024),
            }),
            "all" => out.extend(cases(
                &GROUPS.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )?),
            other => {
                return Err(format!(
                    "unknown l4 case group {other}: {}",
                    GROUPS.join(", ")
                ))
            }
        }
    }
    Ok(out)
}

/// Counters the load tasks share.
#[derive(Default)]
pub(crate) struct Ctr {
    pub(crate) ops: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// UDP datagrams sent and given up on (no answer in 200 ms).
    pub(crate) lost: AtomicU64,
}

/// Hands out start times at a fixed rate (None: as fast as answered).
struct Pacer {
    t0: Instant,
    rate: f64,
    next: AtomicU64,
}

impl Pacer {
    async fn wait(&self) {
        let i = self.next.fetch_add(1, Relaxed);
        let due = self.t0 + Duration::from_secs_f64(i as f64 / self.rate);
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
    }
}

async fn one_exchange(addr: SocketAddr, req: &[u8], buf: &mut [u8]) -> io::Result<u64> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    s.write_all(req).await?;
    let mut got = 0u64;
    loop {
        let n = s.read(buf).await?;
        if n == 0 {
            return Ok(got);
        }
        got += n as u64;
    }
}

async fn cps_worker(
    addr: SocketAddr,
    size: u64,
    c: Arc<Ctr>,
    stop: Arc<AtomicBool>,
    pace: Option<Arc<Pacer>>,
) {
    let req = request(size, true);
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Relaxed) {
        if let Some(p) = &pace {
            p.wait().await;
        }
        match tokio::time::timeout(Duration::from_secs(5), one_exchange(addr, &req, &mut buf)).await
        {
            Ok(Ok(n)) if n == size => {
                c.ops.fetch_add(1, Relaxed);
                c.bytes.fetch_add(n, Relaxed);
            }
            _ => {
                c.errors.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

async fn stream_worker(addr: SocketAddr, size: u64, c: Arc<Ctr>, stop: Arc<AtomicBool>) {
    let req = request(size, false);
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Relaxed) {
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await
        else {
            c.errors.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let _ = s.set_nodelay(true);
        'conn: while !stop.load(Relaxed) {
            if s.write_all(&req).await.is_err() {
                c.errors.fetch_add(1, Relaxed);
                break;
            }
            let mut got = 0u64;
            while got < size {
                let want = ((size - got) as usize).min(buf.len());
                match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf[..want])).await {
                    Ok(Ok(n)) if n > 0 => {
                        got += n as u64;
                        c.bytes.fetch_add(n as u64, Relaxed);
                    }
                    _ => {
                        c.errors.fetch_add(1, Relaxed);
                        break 'conn;
                    }
                }
            }
            c.ops.fetch_add(1, Relaxed);
        }
    }
}

/// Datagrams in flight per client socket.
const UDP_WINDOW: usize = 4;

/// What one sample measured in its steady phase.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub secs: f64,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub lost: u64,
    pub dut_cpu: f64,
    pub load_cpu: f64,
    /// CPU seconds the whole machine was busy (/proc/stat), to show what
    /// other processes took while the sample ran.
    pub machine_cpu: f64,
    pub note: Option<String>,
}

/// Busy CPU seconds of the whole machine since boot (/proc/stat).
pub fn machine_busy_secs() -> f64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = s.lines().next() else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return 0.0;
    }
    // user nice system idle iowait irq softirq steal ...
    let total: f64 = v.iter().take(8).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (total - v[3] - v[4]) / hz
}

pub struct Phases {
    pub warmup: Duration,
    pub steady: Duration,
}

/// Concurrent connections (cps), persistent connections (throughput) and
/// client sockets (udp).
pub struct Shape {
    pub cps_conns: usize,
    pub stream_conns: usize,
    pub udp_clients: usize,
}

async fn measure_inproc(
    work: Work,
    addr: SocketAddr,
    dut_pid: u32,
    ph: &Phases,
    shape: &Shape,
    rate: Option<f64>,
) -> Measured {
    let c = Arc::new(Ctr::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let pace = rate.map(|r| {
        Arc::new(Pacer {
            t0: Instant::now(),
            rate: r,
            next: AtomicU64::new(0),
        })
    });
    match work {
        Work::Cps(n) => {
            for _ in 0..shape.cps_conns {
                tasks.push(tokio::spawn(cps_worker(
                    addr,
                    n,
                    c.clone(),
                    stop.clone(),
                    pace.clone(),
                )));
            }
        }
        Work::Stream(n) => {
            for _ in 0..shape.stream_conns {
                tasks.push(tokio::spawn(stream_worker(
                    addr,
                    n,
                    c.clone(),
                    stop.clone(),
                )));
            }
        }
        Work::Udp(n, _) => {
            for _ in 0..shape.udp_clients {
                let per_client = rate.map(|r| r / shape.udp_clients as f64);
                tasks.push(tokio::spawn(crate::udp_io::client(
                    addr,
                    n,
                    UDP_WINDOW,
                    per_client,
                    c.clone(),
                    stop.clone(),
                )));
            }
        }
        Work::Iperf | Work::Wrk(_) => unreachable!("external tools"),
    }
    tokio::time::sleep(ph.warmup).await;
    let snap = |c: &Ctr| {
        (
            c.ops.load(Relaxed),
            c.bytes.load(Relaxed),
            c.errors.load(Relaxed),
            c.lost.load(Relaxed),
        )
    };
    let d0 = sys::sample_tree(dut_pid).cpu;
    let l0 = sys::process_cpu();
    let m0 = machine_busy_secs();
    let t0 = Instant::now();
    let s0 = snap(&c);
    tokio::time::sleep(ph.steady).await;
    let s1 = snap(&c);
    let secs = t0.elapsed().as_secs_f64();
    let d1 = sys::sample_tree(dut_pid).cpu;
    let l1 = sys::process_cpu();
    let m1 = machine_busy_secs();
    stop.store(true, Relaxed);
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    Measured {
        secs,
        ops: s1.0 - s0.0,
        bytes: s1.1 - s0.1,
        errors: s1.2 - s0.2,
        lost: s1.3 - s0.3,
        dut_cpu: d1.since(&d0),
        load_cpu: (l1 - l0).as_secs_f64(),
        machine_cpu: m1 - m0,
        note: None,
    }
}

/// Runs a standard tool against the DUT and reads its figures.
fn measure_tool(
    work: Work,
    p: &L4Ports,
    dut_pid: u32,
    ph: &Phases,
    shape: &Shape,
    load_cpu: Option<usize>,
) -> Result<Measured, String> {
    let secs = ph.steady.as_secs_f64().max(1.0);
    let mut cmd = match work {
        Work::Iperf => {
            let mut c = sys::taskset(load_cpu, "iperf3");
            c.args(["-c", "127.0.0.1", "-p"])
                .arg(p.iperf.to_string())
                .args(["-R", "-J", "-t"])
                .arg(format!("{secs:.0}"));
            c
        }
        Work::Wrk(n) => {
            let mut c = sys::taskset(load_cpu, "wrk");
            c.args(["-t1", "-c"])
                .arg(shape.cps_conns.to_string())
                .arg("-d")
                .arg(format!("{secs:.0}s"))
                .args(["-H", "Connection: close"])
                .arg(format!("http://127.0.0.1:{}/size/{n}", p.http));
            c
        }
        _ => unreachable!("in-process load"),
    };
    let d0 = sys::sample_tree(dut_pid).cpu;
    let m0 = machine_busy_secs();
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the tool: {e}"))?;
    let wall = t0.elapsed().as_secs_f64();
    let d1 = sys::sample_tree(dut_pid).cpu;
    let m1 = machine_busy_secs();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "exit {}: {}{}",
            out.status,
            text.lines().take(3).collect::<Vec<_>>().join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut m = Measured {
        dut_cpu: d1.since(&d0),
        machine_cpu: m1 - m0,
        ..Measured::default()
    };
    match work {
        Work::Iperf => {
            let j = Json::parse(&text)?;
            let r = j
                .get("end")
                .and_then(|e| e.get("sum_received"))
                .ok_or("iperf3: no end.sum_received")?;
            m.bytes = r.get("bytes").and_then(Json::as_f64).unwrap_or(0.0) as u64;
            m.secs = r.get("seconds").and_then(Json::as_f64).unwrap_or(wall);
            m.ops = 1;
            // The DUT's CPU is read around the whole tool run (setup
            // included, a few milliseconds).
            m.note = Some(format!(
                "DUT CPU over the tool's {wall:.2} s (transfer {:.2} s)",
                m.secs
            ));
        }
        Work::Wrk(_) => {
            // "  12345 requests in 2.00s, 1.23MB read"
            let line = text
                .lines()
                .find(|l| l.contains(" requests in "))
                .ok_or("wrk: no summary line")?;
            let mut it = line.split_whitespace();
            m.ops = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            m.secs = it
                .nth(2)
                .map(|x| x.trim_end_matches(',').trim_end_matches('s'))
                .and_then(|x| x.parse().ok())
                .unwrap_or(secs);
            let errs: u64 = text
                .lines()
                .filter(|l| l.contains("Socket errors") || l.contains("Non-2xx"))
                .flat_map(|l| {
                    l.split(|c: char| !c.is_ascii_digit())
                        .filter_map(|x| x.parse::<u64>().ok())
                        .collect::<Vec<_>>()
                })
                .sum();
            m.errors = errs;
            if let Some(n) = crate::content::object_size(&format!("/size/{}", work_size(work))) {
                m.bytes = m.ops * n;
            }
        }
        _ => {}
    }
    Ok(m)
}

fn work_size(w: Work) -> u64 {
    match w {
        Work::Cps(n) | Work::Stream(n) | Work::Wrk(n) => n,
        Work::Udp(n, _) => n as u64,
        Work::Iperf => 0,
    }
}

pub struct Opts {
    pub targets: Vec<L4Target>,
    pub cases: Vec<L4Case>,
    pub runs: usize,
    pub phases: Phases,
    pub shape: Shape,
    pub out: PathBuf,
    pub dut_cpu: Option<usize>,
    pub load_cpu: Option<usize>,
    pub ports: L4Ports,
    pub progress: bool,
}

pub const HELP: &str = "switchyard bench l4 [--targets switchyard-auto,switchyard-splice,switchyard-copy,haproxy,haproxy-splice,nginx]
  haproxy: option splice-auto; haproxy-splice: splice-request and splice-response too
  --cases G,G         cps, throughput, udp, iperf3, wrk (all)
  --runs N            samples per target and case, interleaved (3)
  --duration D        steady phase per sample (2s)   --warmup D (500ms)
  --connections N     concurrent connections of the cps load and wrk (32)
  --out DIR           report folder (bench-l4-<time>)
  --dut-cpu N         the DUT's core (0)   --load-cpu N  load, origins and tools (1)
  --port-base N       DUT listeners at N..N+4, origins at N+1001.. (27080)
  --switchyard-bin P  the switchyard binary
  --quiet             no progress lines
  --from DIR/report.json   only re-render DIR/report.md";

pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = Args::parse(args, &["quiet", "help"])?;
    if a.flag("help") {
        println!("{HELP}");
        return Ok(0);
    }
    if let Some(from) = a.get("from") {
        // Re-render report.md next to a report.json.
        a.finish()?;
        let text = std::fs::read_to_string(&from).map_err(|e| format!("{from}: {e}"))?;
        let md = render(&Json::parse(&text)?);
        let out = Path::new(&from).with_file_name("report.md");
        std::fs::write(&out, &md).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("{md}");
        return Ok(0);
    }
    let quiet = a.flag("quiet");
    let mut names = a.list("targets");
    if names.is_empty() {
        names = [
            "switchyard-auto",
            "switchyard-splice",
            "switchyard-copy",
            "haproxy",
            "haproxy-splice",
            "nginx",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
    }
    let mut groups = a.list("cases");
    if groups.is_empty() {
        groups.push("all".into());
    }
    let runs = a.num::<usize>("runs")?.unwrap_or(3).max(1);
    let steady = a.duration("duration")?.unwrap_or(Duration::from_secs(2));
    let warmup = a.duration("warmup")?.unwrap_or(Duration::from_millis(500));
    let conns = a.num::<usize>("connections")?.unwrap_or(32).max(1);
    let out = a
        .get("out")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("bench-l4-{}", unix_now())));
    let out = std::path::absolute(&out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    let cpus = sys::allowed_cpus();
    let dut_cpu = a.num::<usize>("dut-cpu")?.or((cpus >= 2).then_some(0));
    let load_cpu = a.num::<usize>("load-cpu")?.or((cpus >= 2).then_some(1));
    let base = a.num::<u16>("port-base")?.unwrap_or(27080);
    let sy_bin = a.get("switchyard-bin").map(PathBuf::from);
    a.finish()?;
    let mut targets = Vec::new();
    for n in &names {
        targets.push(resolve(n, sy_bin.as_deref())?);
    }
    let opts = Opts {
        targets,
        cases: cases(&groups)?,
        runs,
        phases: Phases { warmup, steady },
        shape: Shape {
            cps_conns: conns,
            stream_conns: 8,
            udp_clients: 16,
        },
        out: out.clone(),
        dut_cpu,
        load_cpu,
        ports: L4Ports::from_base(base),
        progress: !quiet,
    };
    let doc = run(&opts)?;
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let md = render(&doc);
    std::fs::write(out.join("report.json"), doc.to_string_pretty())
        .map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(out.join("report.md"), &md).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("{md}");
    println!("report written to {}/report.md", out.display());
    Ok(0)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A child process killed (with its process group) on drop.
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_dut(o: &Opts, t: &L4Target) -> Result<dut::Running, String> {
    let dir = o.out.join("work").join(&t.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for port in [o.ports.tcp, o.ports.http, o.ports.iperf] {
        let a = o.ports.addr(port);
        if std::net::TcpListener::bind(a).is_err() {
            return Err(format!(
                "{a} is already in use by another process: stop it or pick other ports with --port-base"
            ));
        }
    }
    let argv = write_config(t, &o.ports, &dir)?;
    // The environment variables of `compare`'s cmd: targets; unused here.
    let env_ports = Ports::from_base(o.ports.tcp);
    dut::spawn(
        &t.name,
        &argv,
        &dir,
        o.dut_cpu,
        o.ports.addr(o.ports.tcp),
        &env_ports,
    )
}

fn sample_json(case: &L4Case, t: &L4Target, run: usize, m: &Measured, rate: Option<f64>) -> Json {
    let secs = m.secs.max(1e-9);
    let share = m.dut_cpu / secs;
    let per_op = if m.ops > 0 {
        m.dut_cpu * 1e6 / m.ops as f64
    } else {
        f64::NAN
    };
    let attempts = m.ops + m.errors + m.lost;
    let err_ratio = if attempts > 0 {
        (m.errors + m.lost) as f64 / attempts as f64
    } else {
        1.0
    };
    let max_err = if case.udp() { 0.05 } else { 0.01 };
    let (valid, reason) = if m.ops == 0 {
        (false, Some("no successful exchange".to_string()))
    } else if err_ratio > max_err {
        (
            false,
            Some(format!(
                "errors {:.2} % (errors {}, lost datagrams {})",
                err_ratio * 100.0,
                m.errors,
                m.lost
            )),
        )
    } else {
        (true, None)
    };
    obj()
        .set("case", case.name.clone())
        .set("group", case.group)
        .set("target", t.name.clone())
        .set("run", run)
        .set("valid", valid)
        .set("reason", reason)
        .set("offered_rate", rate)
        .set("secs", m.secs)
        .set("ops", m.ops)
        .set("errors", m.errors)
        .set("lost", m.lost)
        .set("ops_per_sec", m.ops as f64 / secs)
        .set("bytes_per_sec", m.bytes as f64 / secs)
        .set("dut_cpu_secs", m.dut_cpu)
        .set("dut_cpu_pct", share * 100.0)
        .set("dut_cpu_us_per_op", per_op)
        .set(
            "ops_per_core_sec",
            if m.dut_cpu > 0.0 {
                m.ops as f64 / m.dut_cpu
            } else {
                f64::NAN
            },
        )
        .set(
            "bytes_per_core_sec",
            if m.dut_cpu > 0.0 {
                m.bytes as f64 / m.dut_cpu
            } else {
                f64::NAN
            },
        )
        .set("load_cpu_pct", m.load_cpu / secs * 100.0)
        // Busy CPU of the machine beyond the DUT and this process (the
        // tools' own CPU for iperf3 and wrk): other users of the cores.
        .set(
            "other_cpu_pct",
            (m.machine_cpu - m.dut_cpu - m.load_cpu).max(0.0) / secs * 100.0,
        )
        .set("note", m.note.clone())
}

fn invalid(case: &L4Case, t: &L4Target, run: usize, why: String) -> Json {
    obj()
        .set("case", case.name.clone())
        .set("group", case.group)
        .set("target", t.name.clone())
        .set("run", run)
        .set("valid", false)
        .set("reason", why)
}

/// Starts the DUT, measures one sample, stops it.
fn one_sample(
    o: &Opts,
    rt: &tokio::runtime::Runtime,
    t: &L4Target,
    case: &L4Case,
    run: usize,
    rate: Option<f64>,
    phases: &Phases,
) -> Json {
    let d = match start_dut(o, t) {
        Ok(d) => d,
        Err(e) => return invalid(case, t, run, format!("DUT did not start: {e}")),
    };
    let p = &o.ports;
    let m = match case.work {
        Work::Cps(_) | Work::Stream(_) => Ok(rt.block_on(measure_inproc(
            case.work,
            p.addr(p.tcp),
            d.pid,
            phases,
            &o.shape,
            rate,
        ))),
        Work::Udp(_, dns) => {
            let port = if dns { p.udp_dns } else { p.udp };
            Ok(rt.block_on(measure_inproc(
                case.work,
                p.addr(port),
                d.pid,
                phases,
                &o.shape,
                rate,
            )))
        }
        Work::Iperf | Work::Wrk(_) => {
            measure_tool(case.work, p, d.pid, phases, &o.shape, o.load_cpu)
        }
    };
    let mut d = d;
    let died = d.exited();
    d.stop();
    match (m, died) {
        (_, Some(e)) => invalid(case, t, run, e),
        (Err(e), _) => invalid(case, t, run, e),
        (Ok(m), None) => sample_json(case, t, run, &m, rate),
    }
}

pub fn run(o: &Opts) -> Result<Json, String> {
    sys::raise_nofile();
    if let Some(c) = o.load_cpu {
        if let Err(e) = sys::pin_current_thread(c) {
            eprintln!("warning: cannot pin to CPU {c}: {e}");
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let p = &o.ports;
    // The origins, on the load core: the raw TCP and UDP ones in this
    // thread's runtime (they run while a sample's load runs), the HTTP one
    // (for wrk) on its own thread, and iperf3 -s.
    let (tl, ul) = rt.block_on(async {
        let tl = TcpListener::bind(p.origin_tcp).await;
        let ul = std::net::UdpSocket::bind(p.origin_udp);
        (tl, ul)
    });
    let tl = tl.map_err(|e| format!("raw origin {}: {e}", p.origin_tcp))?;
    let ul = ul.map_err(|e| format!("udp origin {}: {e}", p.origin_udp))?;
    rt.spawn(serve_tcp(tl));
    rt.spawn(crate::udp_io::serve_echo(ul));
    let groups: Vec<&str> = o.cases.iter().map(|c| c.group).collect();
    let mut notes: Vec<String> = Vec::new();
    let _http = if groups.contains(&"wrk") {
        Some(
            crate::origin::spawn_origin(&[p.origin_http], crate::origin::OriginOpts::default())
                .map_err(|e| format!("http origin {}: {e}", p.origin_http))?,
        )
    } else {
        None
    };
    let have = |prog: &str| sys::which(prog).is_some();
    let _iperf = if groups.contains(&"iperf3") && have("iperf3") {
        let mut c = sys::taskset(o.load_cpu, "iperf3");
        c.args(["-s", "-p"])
            .arg(p.origin_iperf.port().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let h = Helper(c.spawn().map_err(|e| format!("iperf3 -s: {e}"))?);
        std::thread::sleep(Duration::from_millis(300));
        Some(h)
    } else {
        None
    };
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut skipped = Vec::new();
    for case in &o.cases {
        let tool = match case.work {
            Work::Iperf => Some("iperf3"),
            Work::Wrk(_) => Some("wrk"),
            _ => None,
        };
        if let Some(tool) = tool {
            if !have(tool) {
                notes.push(format!(
                    "{}: {tool} is not installed (apt-get install -y {tool}): skipped",
                    case.name
                ));
                continue;
            }
        }
        let able: Vec<&L4Target> = o
            .targets
            .iter()
            .filter(|t| {
                if case.udp() && !t.udp {
                    skipped.push(
                        obj()
                            .set("case", case.name.clone())
                            .set("target", t.name.clone())
                            .set("reason", t.notes.join("; ")),
                    );
                    return false;
                }
                // UDP does not depend on the TCP relay mode: one Switchyard.
                !(case.udp()
                    && t.kind == Kind::Switchyard
                    && o.targets
                        .iter()
                        .find(|x| x.kind == Kind::Switchyard && x.udp)
                        .is_some_and(|first| first.name != t.name))
            })
            .collect();
        let mut rate = None;
        if let Work::Cps(_) | Work::Udp(..) = case.work {
            // Each DUT's closed-loop maximum, then one offered rate for all.
            let probe = Phases {
                warmup: Duration::from_millis(300),
                steady: o.phases.steady.min(Duration::from_secs(1)),
            };
            let mut lowest = f64::INFINITY;
            for t in &able {
                // Two probes, the higher kept: one slowed by another
                // process on the machine would set everyone's rate.
                let s1 = one_sample(o, &rt, t, case, 0, None, &probe);
                let s2 = one_sample(o, &rt, t, case, 0, None, &probe);
                let r = |s: &Json| {
                    if s.get("valid") == Some(&Json::Bool(true)) {
                        s.get("ops_per_sec").and_then(Json::as_f64).unwrap_or(0.0)
                    } else {
                        -1.0
                    }
                };
                let s = if r(&s2) > r(&s1) { s2 } else { s1 };
                if o.progress {
                    eprintln!(
                        "[{:>4.0}s] {} {} probe: {}",
                        started.elapsed().as_secs_f64(),
                        case.name,
                        t.name,
                        brief(&s)
                    );
                }
                if s.get("valid") == Some(&Json::Bool(true)) {
                    let r = s.get("ops_per_sec").and_then(Json::as_f64).unwrap_or(0.0);
                    lowest = lowest.min(r);
                }
                samples.push(s.set("probe", true));
            }
            if lowest.is_finite() && lowest > 10.0 {
                rate = Some((lowest * 0.8).round());
            }
        }
        for run in 0..o.runs {
            for t in &able {
                let s = one_sample(o, &rt, t, case, run, rate, &o.phases);
                if o.progress {
                    eprintln!(
                        "[{:>4.0}s] {} {} run {}/{}: {}",
                        started.elapsed().as_secs_f64(),
                        case.name,
                        t.name,
                        run + 1,
                        o.runs,
                        brief(&s)
                    );
                }
                samples.push(s.set("probe", false));
            }
        }
    }
    let targets = Json::Arr(
        o.targets
            .iter()
            .map(|t| {
                obj()
                    .set("name", t.name.clone())
                    .set("version", t.version.clone())
                    .set("program", t.program.display().to_string())
                    .set("zero_copy", t.zero_copy.clone())
                    .set("udp", t.udp)
                    .set(
                        "notes",
                        Json::Arr(t.notes.iter().map(|n| n.clone().into()).collect()),
                    )
            })
            .collect(),
    );
    Ok(obj()
        .set(
            "generated_by",
            format!("switchyard bench l4 {}", env!("CARGO_PKG_VERSION")),
        )
        .set("unix_time", unix_now())
        .set(
            "machine",
            obj().set("cpus", sys::allowed_cpus()).set(
                "kernel",
                std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim(),
            ),
        )
        .set(
            "settings",
            obj()
                .set("runs", o.runs)
                .set("warmup_secs", o.phases.warmup.as_secs_f64())
                .set("steady_secs", o.phases.steady.as_secs_f64())
                .set("cps_connections", o.shape.cps_conns)
                .set("stream_connections", o.shape.stream_conns)
                .set("udp_clients", o.shape.udp_clients)
                .set("udp_window", UDP_WINDOW)
                .set("dut_cpu", o.dut_cpu)
                .set("load_cpu", o.load_cpu)
                .set("wall_secs", started.elapsed().as_secs_f64()),
        )
        .set("targets", targets)
        .set(
            "cases",
            Json::Arr(
                o.cases
                    .iter()
                    .map(|c| {
                        obj()
                            .set("name", c.name.clone())
                            .set("group", c.group)
                            .set("primary", c.primary())
                            .set("higher_is_better", c.higher_is_better())
                            .set("goal_peer", c.goal().0)
                            .set("goal_ratio", c.goal().1)
                    })
                    .collect(),
            ),
        )
        .set(
            "notes",
            Json::Arr(notes.into_iter().map(Json::from).collect()),
        )
        .set("samples", Json::Arr(samples))
        .set("skipped", Json::Arr(skipped)))
}

fn brief(s: &Json) -> String {
    if s.get("valid") != Some(&Json::Bool(true)) {
        return format!(
            "INVALID {}",
            s.get("reason").and_then(Json::as_str).unwrap_or("")
        );
    }
    let f = |k: &str| s.get(k).and_then(Json::as_f64).unwrap_or(f64::NAN);
    format!(
        "{:.0}/s {} DUT {:.0} % {:.1} us/op load {:.0} %",
        f("ops_per_sec"),
        crate::cli_load::fmt_bps(f("bytes_per_sec") * 8.0),
        f("dut_cpu_pct"),
        f("dut_cpu_us_per_op"),
        f("load_cpu_pct")
    )
}

/// Median, min and max of `key` over a target's valid non-probe samples.
pub fn stat(samples: &[Json], case: &str, target: &str, key: &str) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.get("case").and_then(Json::as_str) == Some(case))
        .filter(|s| s.get("target").and_then(Json::as_str) == Some(target))
        .filter(|s| s.get("valid") == Some(&Json::Bool(true)))
        .filter(|s| s.get("probe") != Some(&Json::Bool(true)))
        .filter_map(|s| s.get(key).and_then(Json::as_f64))
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

fn probe_max(samples: &[Json], case: &str, target: &str) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.get("case").and_then(Json::as_str) == Some(case))
        .filter(|s| s.get("target").and_then(Json::as_str) == Some(target))
        .filter(|s| s.get("probe") == Some(&Json::Bool(true)))
        .filter(|s| s.get("valid") == Some(&Json::Bool(true)))
        .find_map(|s| s.get("ops_per_sec").and_then(Json::as_f64))
}

fn fmt_primary(key: &str, v: f64) -> String {
    match key {
        "dut_cpu_us_per_op" => format!("{v:.1} us"),
        "bytes_per_core_sec" => format!("{:.2} GB/s", v / 1e9),
        "ops_per_core_sec" => format!("{:.0}/s", v),
        _ => format!("{v:.2}"),
    }
}

/// report.md from the document `run` returns.
pub fn render(doc: &Json) -> String {
    let samples = doc.get("samples").map(Json::as_arr).unwrap_or(&[]);
    let targets: Vec<&str> = doc
        .get("targets")
        .map(Json::as_arr)
        .unwrap_or(&[])
        .iter()
        .filter_map(|t| t.get("name").and_then(Json::as_str))
        .collect();
    let st = doc.get("settings").cloned().unwrap_or_else(obj);
    let g = |k: &str| st.get(k).and_then(Json::as_f64).unwrap_or(f64::NAN);
    let mut md = String::new();
    let _ = writeln!(md, "# switchyard bench l4\n");
    let _ = writeln!(
        md,
        "{} runs per target and case, interleaved, the DUT restarted for every sample; {:.1} s warm-up then {:.1} s measured; DUT on CPU {}, load + origins + tools on CPU {}; {} concurrent connections for cps and wrk, {} persistent for throughput, {} UDP clients (closed-loop probes: {} datagrams in flight each; measured runs: open loop at the offered rate, sent as the 1 ms timer allows, at most 64 in flight per client). Medians (min-max). Wall time {:.0} s.\n",
        g("runs"),
        g("warmup_secs"),
        g("steady_secs"),
        st.get("dut_cpu").and_then(Json::as_f64).map(|x| x.to_string()).unwrap_or("-".into()),
        st.get("load_cpu").and_then(Json::as_f64).map(|x| x.to_string()).unwrap_or("-".into()),
        g("cps_connections"),
        g("stream_connections"),
        g("udp_clients"),
        g("udp_window"),
        g("wall_secs"),
    );
    for t in doc.get("targets").map(Json::as_arr).unwrap_or(&[]) {
        let _ = writeln!(
            md,
            "- {}: {}",
            t.get("name").and_then(Json::as_str).unwrap_or(""),
            t.get("version").and_then(Json::as_str).unwrap_or("")
        );
    }
    md.push('\n');
    for c in doc.get("cases").map(Json::as_arr).unwrap_or(&[]) {
        let name = c.get("name").and_then(Json::as_str).unwrap_or("");
        let key = c.get("primary").and_then(Json::as_str).unwrap_or("");
        let hib = c.get("higher_is_better") == Some(&Json::Bool(true));
        let peer = c.get("goal_peer").and_then(Json::as_str).unwrap_or("");
        let goal = c
            .get("goal_ratio")
            .and_then(Json::as_f64)
            .unwrap_or(f64::NAN);
        let group = c.get("group").and_then(Json::as_str).unwrap_or("");
        let what = match key {
            "dut_cpu_us_per_op" => "DUT CPU per connection (lower is better)",
            "bytes_per_core_sec" => "bytes per DUT CPU second (higher is better)",
            _ => "datagrams per DUT CPU second (higher is better)",
        };
        let _ = writeln!(
            md,
            "## {name}\n\nCompared by {what}; target: Switchyard {} {goal}x {peer}.\n",
            if hib { ">=" } else { "<=" }
        );
        let offered = samples
            .iter()
            .filter(|s| s.get("case").and_then(Json::as_str) == Some(name))
            .find_map(|s| s.get("offered_rate").and_then(Json::as_f64));
        if let Some(r) = offered {
            let _ = writeln!(
                md,
                "Every DUT at {r:.0} {unit}/s offered (80 % of the lowest closed-loop maximum); max = the higher of the DUT's two 1 s closed-loop probes.\n",
                unit = if name.starts_with("udp") { "datagrams" } else { "connections" }
            );
        }
        // The peer's best configuration (haproxy or haproxy-splice) per case.
        let peer_best = targets
            .iter()
            .filter(|t| **t == peer || t.starts_with(&format!("{peer}-")))
            .filter_map(|t| stat(samples, name, t, key).map(|x| (*t, x.0)))
            .reduce(|a, b| if (b.1 > a.1) == hib { b } else { a });
        let base = peer_best.map(|x| x.1);
        if let Some((pt, _)) = peer_best {
            if pt != peer {
                let _ = writeln!(
                    md,
                    "Ratios against {pt}, {peer}'s better configuration here.\n"
                );
            }
        }
        let _ = writeln!(
            md,
            "| target | rate /s | throughput | DUT CPU % | DUT us/op | {} | vs {peer} | load / other CPU % |{}",
            if key == "dut_cpu_us_per_op" { "ops per core-s" } else { "per core" },
            if group == "cps" { " max /s |" } else { "" }
        );
        let _ = writeln!(
            md,
            "|---|---|---|---|---|---|---|---|{}",
            if group == "cps" { "---|" } else { "" }
        );
        for t in &targets {
            let Some((med, lo, hi)) = stat(samples, name, t, key) else {
                let why = samples
                    .iter()
                    .filter(|s| s.get("case").and_then(Json::as_str) == Some(name))
                    .filter(|s| s.get("target").and_then(Json::as_str) == Some(*t))
                    .find_map(|s| s.get("reason").and_then(Json::as_str).map(String::from));
                if let Some(why) = why {
                    let _ = writeln!(
                        md,
                        "| {t} | no valid sample: {why} |||||||{}",
                        if group == "cps" { "|" } else { "" }
                    );
                }
                continue;
            };
            let m = |k: &str| stat(samples, name, t, k).map(|x| x.0).unwrap_or(f64::NAN);
            let per_core = if key == "dut_cpu_us_per_op" {
                format!("{:.0}", m("ops_per_core_sec"))
            } else {
                format!(
                    "{} ({}-{})",
                    fmt_primary(key, med),
                    fmt_primary(key, lo),
                    fmt_primary(key, hi)
                )
            };
            let us = if key == "dut_cpu_us_per_op" {
                format!("{} ({:.1}-{:.1})", fmt_primary(key, med), lo, hi)
            } else {
                format!("{:.1}", m("dut_cpu_us_per_op"))
            };
            let is_peer = *t == peer || t.starts_with(&format!("{peer}-"));
            let ratio = match base {
                Some(b) if b > 0.0 && t.starts_with("switchyard") => {
                    let r = med / b;
                    let ok = if hib { r >= goal } else { r <= goal };
                    format!("{r:.2}x {}", if ok { "(meets)" } else { "(misses)" })
                }
                Some(b) if b > 0.0 && is_peer => format!("{:.2}x", med / b),
                Some(b) if b > 0.0 => format!("{:.2}x", med / b),
                _ => "-".into(),
            };
            let rate = if group == "iperf3" {
                "-".to_string()
            } else {
                format!("{:.0}", m("ops_per_sec"))
            };
            let us = if group == "iperf3" {
                "-".to_string()
            } else {
                us
            };
            let _ = writeln!(
                md,
                "| {t} | {rate} | {} | {:.0} | {us} | {per_core} | {ratio} | {:.0} / {:.0} |{}",
                crate::cli_load::fmt_bps(m("bytes_per_sec") * 8.0),
                m("dut_cpu_pct"),
                m("load_cpu_pct"),
                m("other_cpu_pct"),
                if group == "cps" {
                    format!(
                        " {} |",
                        probe_max(samples, name, t)
                            .map(|x| format!("{x:.0}"))
                            .unwrap_or("-".into())
                    )
                } else {
                    String::new()
                }
            );
        }
        md.push('\n');
    }
    // Which relay mode wins per size.
    let modes: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| t.starts_with("switchyard-"))
        .collect();
    if modes.len() > 1 {
        let _ = writeln!(md, "## Switchyard zero_copy per size\n\n| case | {} | best | auto vs best |\n|---|{}---|---|", modes.join(" | "), "---|".repeat(modes.len()));
        for c in doc.get("cases").map(Json::as_arr).unwrap_or(&[]) {
            let name = c.get("name").and_then(Json::as_str).unwrap_or("");
            let group = c.get("group").and_then(Json::as_str).unwrap_or("");
            if group == "udp" {
                continue;
            }
            let key = c.get("primary").and_then(Json::as_str).unwrap_or("");
            let hib = c.get("higher_is_better") == Some(&Json::Bool(true));
            let vals: Vec<Option<f64>> = modes
                .iter()
                .map(|t| stat(samples, name, t, key).map(|x| x.0))
                .collect();
            let best = modes
                .iter()
                .zip(&vals)
                .filter_map(|(t, v)| v.map(|v| (*t, v)))
                .reduce(|a, b| if (b.1 > a.1) == hib { b } else { a });
            let Some((bt, bv)) = best else { continue };
            let auto = modes
                .iter()
                .zip(&vals)
                .find(|(t, _)| **t == "switchyard-auto")
                .and_then(|(_, v)| *v);
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} |",
                vals.iter()
                    .map(|v| v.map(|v| fmt_primary(key, v)).unwrap_or("-".into()))
                    .collect::<Vec<_>>()
                    .join(" | "),
                bt.trim_start_matches("switchyard-"),
                match auto {
                    _ if bt == "switchyard-auto" => "auto is the best".to_string(),
                    Some(a) => format!(
                        "{:+.1} %",
                        (a / bv - 1.0) * 100.0 * if hib { 1.0 } else { -1.0 }
                    ),
                    None => "-".into(),
                }
            );
        }
        md.push_str("\n(auto vs best: negative is worse than the best mode.)\n\n");
    }
    let notes: Vec<String> = doc
        .get("notes")
        .map(Json::as_arr)
        .unwrap_or(&[])
        .iter()
        .filter_map(|n| n.as_str().map(String::from))
        .chain(
            doc.get("skipped")
                .map(Json::as_arr)
                .unwrap_or(&[])
                .iter()
                .map(|s| {
                    format!(
                        "{} skipped for {}: {}",
                        s.get("case").and_then(Json::as_str).unwrap_or(""),
                        s.get("target").and_then(Json::as_str).unwrap_or(""),
                        s.get("reason").and_then(Json::as_str).unwrap_or("")
                    )
                }),
        )
        .collect();
    if !notes.is_empty() {
        md.push_str("## Notes\n\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}
