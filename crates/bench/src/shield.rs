//! `switchyard bench shield`: issue 12's figures, the XDP shield against
//! the kernel and nftables, on this machine, in network namespaces.
//!
//! - **Topology** (made for every sample, deleted after it, on error, on
//!   panic and on Ctrl-C): a generator namespace and a DUT namespace
//!   joined by a veth pair. The generator end has the valid clients'
//!   address (10.88.0.2) and sends the flood as raw frames (`pktgen.rs`)
//!   from 10.200.0.0/16 (allowed by the rules: answered) or 10.201.0.0/16
//!   (blocked by the last rule: dropped). The DUT namespace runs Switchyard
//!   (`switchyard run -c CONFIG`, pinned to the DUT core) with an HTTP
//!   vserver on 10.88.0.1:8080 and the bench's origin on its loopback
//!   (pinned to the load core).
//! - **Cores.** RPS sends every frame the DUT's veth receives to the DUT
//!   core, so the DUT's packet work (generic XDP, the stack, nftables, the
//!   SYN+ACKs) is on that core; the generator, the clients, the origin and
//!   the replies' reception in the generator namespace are on the load core.
//! - **Paths** (the same 1,000 rules in each; the deciding rule last):
//!   `xdp-cookies`, `xdp-drop` (Switchyard `[shield.xdp]`, generic mode),
//!   `kernel-cookies` (nftables with the rules, `tcp_syncookies = 2`),
//!   `nft-synproxy` (nftables SYNPROXY), `nft-drop`; for the `acl` scenario
//!   also `none`, `xdp-rules` and `nft-rules` under valid traffic only.
//! - **Per core**: packets the DUT's veth received / busy seconds of the
//!   DUT core (/proc/stat: user + nice + system + irq + softirq), and the
//!   XDP program's own cost from the kernel's BPF statistics.
//!
//! Runs interleave (A B C ... A B C ...), the DUT and its namespaces are
//! new for every sample, and the report gives medians with min and max.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod ddos;
pub mod frames;

use crate::args::Args;
use crate::json::{obj, Json};
use crate::pktgen::{self, Generator, Limits, Pool, Shape};
use crate::sys;

const HELP: &str = "usage: switchyard bench shield [options]   (as root)
  --scenario syn-flood,acl,ddos   what to run (default all three)
  --paths P1,P2              only these paths (xdp-cookies, xdp-drop, kernel-cookies,
                             nft-synproxy, nft-drop, none, xdp-rules, nft-rules, hping3);
                             without --scenario, no ddos
  --runs 3                   samples per path, interleaved
  --duration 3s              measured time of each sample
  --rules 1000               ACL rules (the deciding rule last)
  --valid-rate 1000          valid connections per second during a flood
  --flood-rate N             SYNs per second (default: as fast as the generator goes)
  --flood-packets N          at most N frames per flood (default 50000000)
  --nft-form sets|linear     how nftables expresses the rules (default sets)
  --dut-cpu 0 --load-cpu 1   cores of the DUT and of the load
  --switchyard-bin PATH      the binary to run (default: this one)
  --out DIR                  report folder (default bench-shield-<time>)
  --from DIR/report.json     write DIR/report.md again from report.json, run nothing
 ddos (each vector at rising rates, valid clients meanwhile; about 15 s per vector):
  --vectors V1,V2            vector names, or flood, bad_header, other (default all 28)
  --rates 10k,100k,max       frames per second of each step (max: as fast as it goes)
  --step 2s                  each rate's measured time
  --baseline 3s              valid traffic only before the first rate
  --ddos-runs 1              samples per vector and rate
  --ddos-rules 0             ACL rules beside the vectors";

const GEN_NS: &str = "sysh-gen";
const DUT_NS: &str = "sysh-dut";
const GEN_DEV: &str = "shg0";
const DUT_DEV: &str = "shd0";
const GEN_MAC: &str = "02:5e:00:00:00:02";
const DUT_MAC: &str = "02:5e:00:00:00:01";
const DUT_IP: &str = "10.88.0.1";
const CLIENT_IP: &str = "10.88.0.2";
/// IPv6 on the same link, for the IPv6 vectors.
const DUT_IP6: &str = "fd88::1";
const CLIENT_IP6: &str = "fd88::2";
const PORT: u16 = 8080;
const ADMIN: &str = "127.0.0.1:9000";
const ORIGIN: &str = "127.0.0.1:9001";
/// Flood sources the rules let through (answered by cookies).
const ALLOWED_FLOOD: &str = "10.200.0.0";
/// Flood sources the last rule drops.
const BLOCKED_FLOOD: &str = "10.201.0.0";

/// Set by SIGINT/SIGTERM: every loop stops, the namespaces go.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Relaxed);
}

// ---------------------------------------------------------------- paths

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathKind {
    XdpCookies,
    XdpDrop,
    KernelCookies,
    NftSynproxy,
    NftDrop,
    /// The generator cross-check: hping3 --flood into the XDP drop path.
    Hping3,
    None,
    XdpRules,
    NftRules,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::XdpCookies => "xdp-cookies",
            PathKind::XdpDrop => "xdp-drop",
            PathKind::KernelCookies => "kernel-cookies",
            PathKind::NftSynproxy => "nft-synproxy",
            PathKind::NftDrop => "nft-drop",
            PathKind::Hping3 => "hping3",
            PathKind::None => "none",
            PathKind::XdpRules => "xdp-rules",
            PathKind::NftRules => "nft-rules",
        }
    }
    fn parse(s: &str) -> Option<PathKind> {
        ALL_PATHS.iter().copied().find(|p| p.name() == s)
    }
    fn xdp(self) -> bool {
        matches!(
            self,
            PathKind::XdpCookies | PathKind::XdpDrop | PathKind::Hping3 | PathKind::XdpRules
        )
    }
    fn nft(self) -> bool {
        matches!(
            self,
            PathKind::KernelCookies
                | PathKind::NftSynproxy
                | PathKind::NftDrop
                | PathKind::NftRules
        )
    }
    /// A flood path (else valid traffic only).
    fn flood(self) -> bool {
        !matches!(
            self,
            PathKind::None | PathKind::XdpRules | PathKind::NftRules
        )
    }
    /// The flood's sources: blocked by the last rule, or let through.
    fn blocked_flood(self) -> bool {
        matches!(
            self,
            PathKind::XdpDrop | PathKind::NftDrop | PathKind::Hping3
        )
    }
    fn what(self) -> &'static str {
        match self {
            PathKind::XdpCookies => "Switchyard, [shield.xdp] generic mode, syn_cookies = true, 1,000 rules (the flood passes them)",
            PathKind::XdpDrop => "Switchyard, [shield.xdp] generic mode, 1,000 rules, the last drops the flood's sources",
            PathKind::KernelCookies => "Switchyard without XDP; nftables with the same rules (netdev ingress); net.ipv4.tcp_syncookies = 2",
            PathKind::NftSynproxy => "Switchyard without XDP; nftables with the same rules, then SYNPROXY (notrack + synproxy) on the vserver port",
            PathKind::NftDrop => "Switchyard without XDP; nftables with the same rules, the last drops the flood's sources",
            PathKind::Hping3 => "as xdp-drop, the flood from `hping3 --flood` instead of the bench's generator (cross-check)",
            PathKind::None => "Switchyard, no rules, no XDP",
            PathKind::XdpRules => "Switchyard, [shield.xdp] generic mode, 1,000 rules (none matches the clients)",
            PathKind::NftRules => "Switchyard without XDP; nftables with the same 1,000 rules",
        }
    }
}

const ALL_PATHS: &[PathKind] = &[
    PathKind::XdpCookies,
    PathKind::XdpDrop,
    PathKind::KernelCookies,
    PathKind::NftSynproxy,
    PathKind::NftDrop,
    PathKind::Hping3,
    PathKind::None,
    PathKind::XdpRules,
    PathKind::NftRules,
];

const SYN_FLOOD_PATHS: &[PathKind] = &[
    PathKind::XdpCookies,
    PathKind::XdpDrop,
    PathKind::KernelCookies,
    PathKind::NftSynproxy,
    PathKind::NftDrop,
    PathKind::Hping3,
];

const ACL_PATHS: &[PathKind] = &[
    PathKind::None,
    PathKind::XdpRules,
    PathKind::NftRules,
    PathKind::XdpDrop,
    PathKind::NftDrop,
];

// ---------------------------------------------------------------- rules

/// One ACL rule of the bench: drop TCP from these sources to these ports.
/// Every rule drops, so their order does not change what is decided, and
/// nftables may hold them in sets (see docs/bench.md).
#[derive(Clone, Debug)]
pub struct Rule {
    pub src4: Vec<String>,
    pub src6: Vec<String>,
    /// Ports and ranges; empty: any port.
    pub dst_ports: Vec<(u16, u16)>,
}

/// `n` rules: n - 1 random ones (as the shield's tests draw them: IPv4
/// and IPv6 CIDRs of random prefixes, single ports and ranges, seeded so
/// every run has the same), then the deciding rule, last: drop anything
/// from 10.201.0.0/16. Rule i's sources lie in its own /24 blocks
/// (10.0.0.0/14 and 10.4.0.0/14) and its own IPv6 /48, and its two port
/// entries in 1000-3999 and 4000-7999: no rule overlaps another, none
/// matches the clients (10.88), the flood (10.200, 10.201) or the vserver
/// port (8080). All drop, so the order decides nothing and nftables may
/// hold them in sets exactly.
pub fn rules(n: usize) -> Vec<Rule> {
    let mut g = 0x2545_f491_4f6c_dd1du64;
    let mut below = |m: u64| {
        g ^= g << 13;
        g ^= g >> 7;
        g ^= g << 17;
        g % m
    };
    let mut out = Vec::with_capacity(n);
    for i in 1..n as u32 {
        let mut r = Rule {
            src4: Vec::new(),
            src6: Vec::new(),
            dst_ports: Vec::new(),
        };
        for k in 0..1 + below(2) as u32 {
            let block = (10u32 << 24) | (k << 18) | (i << 8);
            let prefix = 24 + below(5) as u32;
            let host = (below(256) as u32) & !(u32::MAX >> prefix);
            let net = std::net::Ipv4Addr::from(block | (host & 0xff));
            r.src4.push(format!("{net}/{prefix}"));
        }
        if below(2) == 0 {
            r.src6.push(format!("2001:db8:{i:x}::/48"));
        }
        for (base, span) in [(1000u16, 3000u64), (4000, 4000)]
            .into_iter()
            .take(1 + below(2) as usize)
        {
            let lo = base + below(span - 100) as u16;
            let hi = if below(2) == 0 {
                lo
            } else {
                lo + below(100) as u16
            };
            r.dst_ports.push((lo, hi));
        }
        out.push(r);
    }
    out.push(Rule {
        src4: vec![format!("{BLOCKED_FLOOD}/16")],
        src6: Vec::new(),
        dst_ports: Vec::new(),
    });
    out
}

fn port_toml(p: (u16, u16)) -> String {
    if p.0 == p.1 {
        p.0.to_string()
    } else {
        format!("\"{}-{}\"", p.0, p.1)
    }
}

fn port_nft(p: (u16, u16)) -> String {
    if p.0 == p.1 {
        p.0.to_string()
    } else {
        format!("{}-{}", p.0, p.1)
    }
}

/// The rules as `[shield]` TOML.
pub fn rules_toml(rules: &[Rule]) -> String {
    let mut s = String::from("[shield]\ndefault = \"allow\"\n");
    for (i, r) in rules.iter().enumerate() {
        let srcs: Vec<String> = r
            .src4
            .iter()
            .chain(r.src6.iter())
            .map(|c| format!("\"{c}\""))
            .collect();
        let _ = writeln!(
            s,
            "[[shield.acl]]\nname = \"r{i}\"\nsrc = [{}]",
            srcs.join(", ")
        );
        if !r.dst_ports.is_empty() {
            let ports: Vec<String> = r.dst_ports.iter().map(|p| port_toml(*p)).collect();
            let _ = writeln!(s, "proto = [\"tcp\"]\ndst_port = [{}]", ports.join(", "));
        }
        s.push_str("action = \"drop\"\n");
    }
    s
}

/// How nftables expresses the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NftForm {
    /// Concatenated interval sets (address . port), one lookup per family:
    /// what an expert writes for a same-verdict policy.
    Sets,
    /// One nftables rule per ACL rule and family, in order.
    Linear,
}

/// The rules as an nftables `netdev` table on the DUT's device, at the
/// ingress hook (before the stack, the closest hook to XDP). Like the XDP
/// program, only SYNs (SYN set, ACK clear) and non-TCP packets are
/// evaluated; every drop is counted (the XDP program counts per rule).
pub fn rules_nft(rules: &[Rule], form: NftForm, dev: &str) -> String {
    let mut s = String::from("table netdev sy {\n  counter dropped {\n  }\n");
    let (mut e4, mut e6, mut any4) = (Vec::new(), Vec::new(), Vec::new());
    let mut linear = Vec::new();
    for r in rules {
        let ports: Vec<String> = r.dst_ports.iter().map(|p| port_nft(*p)).collect();
        if ports.is_empty() {
            any4.extend(r.src4.iter().cloned());
            for c in &r.src4 {
                linear.push(format!("ip saddr {c} counter name \"dropped\" drop"));
            }
            continue;
        }
        for c in &r.src4 {
            for p in &ports {
                e4.push(format!("{c} . {p}"));
            }
            linear.push(format!(
                "ip saddr {c} tcp dport {{ {} }} counter name \"dropped\" drop",
                ports.join(", ")
            ));
        }
        for c in &r.src6 {
            for p in &ports {
                e6.push(format!("{c} . {p}"));
            }
            linear.push(format!(
                "ip6 saddr {c} tcp dport {{ {} }} counter name \"dropped\" drop",
                ports.join(", ")
            ));
        }
    }
    if form == NftForm::Sets {
        let set = |s: &mut String, name: &str, ty: &str, el: &[String]| {
            if !el.is_empty() {
                let _ = writeln!(
                    s,
                    "  set {name} {{\n    type {ty}\n    flags interval\n    elements = {{ {} }}\n  }}",
                    el.join(",\n      ")
                );
            }
        };
        set(&mut s, "r4", "ipv4_addr . inet_service", &e4);
        set(&mut s, "r6", "ipv6_addr . inet_service", &e6);
        set(&mut s, "any4", "ipv4_addr", &any4);
    }
    let _ = writeln!(
        s,
        "  chain ingress {{\n    type filter hook ingress device \"{dev}\" priority -500; policy accept;\n    tcp flags & (syn | ack) != syn accept"
    );
    if form == NftForm::Sets {
        if !e4.is_empty() {
            s.push_str("    ip saddr . tcp dport @r4 counter name \"dropped\" drop\n");
        }
        if !e6.is_empty() {
            s.push_str("    ip6 saddr . tcp dport @r6 counter name \"dropped\" drop\n");
        }
        if !any4.is_empty() {
            s.push_str("    ip saddr @any4 counter name \"dropped\" drop\n");
        }
    } else {
        for l in &linear {
            let _ = writeln!(s, "    {l}");
        }
    }
    s.push_str("  }\n}\n");
    s
}

/// nftables SYNPROXY for the vserver port (the netfilter wiki's recipe):
/// SYNs skip conntrack, SYNPROXY answers them with cookies and, when the
/// ACK's cookie is good, opens the connection to the listener.
fn synproxy_nft() -> String {
    format!(
        "table ip syp {{\n  chain pre {{\n    type filter hook prerouting priority raw; policy accept;\n    tcp dport {PORT} tcp flags syn notrack\n  }}\n  chain in {{\n    type filter hook input priority filter; policy accept;\n    tcp dport {PORT} ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm\n    ct state invalid drop\n  }}\n}}\n"
    )
}

// ---------------------------------------------------------------- namespaces

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ns_sh(ns: &str, script: &str) -> Result<String, String> {
    run("ip", &["netns", "exec", ns, "sh", "-c", script])
}

/// The two namespaces and the veth pair; deleted on drop (panics too).
struct Net {
    /// Whether this process made them (only then are they deleted).
    made: bool,
}

impl Net {
    fn new(dut_cpu: usize, load_cpu: usize) -> Result<Net, String> {
        // Left by a killed earlier run of this bench (the names are ours).
        Net::remove_stale();
        run("ip", &["netns", "add", DUT_NS])?;
        let net = Net { made: true };
        run("ip", &["netns", "add", GEN_NS])?;
        run(
            "ip",
            &[
                "link", "add", DUT_DEV, "netns", DUT_NS, "address", DUT_MAC, "type", "veth",
                "peer", "name", GEN_DEV, "netns", GEN_NS, "address", GEN_MAC,
            ],
        )?;
        let ipn = |ns: &str, a: &[&str]| {
            let mut v = vec!["-n", ns];
            v.extend_from_slice(a);
            run("ip", &v)
        };
        ipn(
            DUT_NS,
            &["addr", "add", &format!("{DUT_IP}/24"), "dev", DUT_DEV],
        )?;
        ipn(
            GEN_NS,
            &["addr", "add", &format!("{CLIENT_IP}/24"), "dev", GEN_DEV],
        )?;
        for (ns, dev) in [(DUT_NS, DUT_DEV), (GEN_NS, GEN_DEV)] {
            ipn(ns, &["link", "set", dev, "up"])?;
            ipn(ns, &["link", "set", "lo", "up"])?;
        }
        // The kernel's SYN+ACKs to the flood's sources go to one neighbour
        // (the generator end), not one ARP entry per source; the generator
        // namespace drops them (not its addresses, no forwarding).
        ipn(DUT_NS, &["route", "add", "10.200.0.0/15", "via", CLIENT_IP])?;
        // RPS: what the DUT receives is handled on the DUT core, what the
        // generator end receives on the load core.
        let mask = |c: usize| format!("{:x}", 1u64 << c.min(63));
        ns_sh(
            DUT_NS,
            &format!(
                "echo {} > /sys/class/net/{DUT_DEV}/queues/rx-0/rps_cpus",
                mask(dut_cpu)
            ),
        )?;
        ns_sh(
            GEN_NS,
            &format!(
                "echo {} > /sys/class/net/{GEN_DEV}/queues/rx-0/rps_cpus",
                mask(load_cpu)
            ),
        )?;
        Ok(net)
    }

    fn remove_stale() {
        if let Ok(list) = run("ip", &["netns", "list"]) {
            for l in list.lines() {
                let name = l.split_whitespace().next().unwrap_or("");
                if name == GEN_NS || name == DUT_NS {
                    let _ = run("ip", &["netns", "del", name]);
                }
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if self.made {
            let _ = run("ip", &["netns", "del", GEN_NS]);
            let _ = run("ip", &["netns", "del", DUT_NS]);
        }
    }
}

/// Runs `f` on a new thread inside namespace `ns` (threads it starts stay
/// there too).
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<Result<T, String>> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: a namespace file descriptor; only this thread moves.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if r != 0 {
            return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
        }
        Ok(f())
    })
}

fn join<T>(h: std::thread::JoinHandle<Result<T, String>>) -> Result<T, String> {
    h.join()
        .map_err(|_| "a bench thread panicked".to_string())?
}

/// A file of /proc/net as seen from namespace `ns`.
fn proc_net(ns: &str, file: &str) -> String {
    let path = format!("/proc/thread-self/net/{file}");
    join(in_ns(ns, move || {
        std::fs::read_to_string(&path).unwrap_or_default()
    }))
    .unwrap_or_default()
}

// ---------------------------------------------------------------- counters

/// Per-CPU times from /proc/stat, in seconds.
#[derive(Clone, Copy, Debug, Default)]
struct CpuTimes {
    user: f64,
    system: f64,
    irq: f64,
    softirq: f64,
    idle: f64,
}

impl CpuTimes {
    fn busy(&self) -> f64 {
        self.user + self.system + self.irq + self.softirq
    }
    fn minus(&self, b: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user - b.user,
            system: self.system - b.system,
            irq: self.irq - b.irq,
            softirq: self.softirq - b.softirq,
            idle: self.idle - b.idle,
        }
    }
}

fn cpu_times(cpu: usize) -> CpuTimes {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let name = format!("cpu{cpu}");
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    for l in s.lines() {
        let mut f = l.split_whitespace();
        if f.next() != Some(name.as_str()) {
            continue;
        }
        let v: Vec<f64> = f.map(|x| x.parse::<f64>().unwrap_or(0.0) / hz).collect();
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        // user nice system idle iowait irq softirq steal ...
        return CpuTimes {
            user: g(0) + g(1),
            system: g(2),
            irq: g(5),
            softirq: g(6),
            idle: g(3) + g(4),
        };
    }
    CpuTimes::default()
}

/// rx_packets, rx_dropped, tx_packets of `dev` from /proc/net/dev text.
fn dev_stats(text: &str, dev: &str) -> (u64, u64, u64) {
    for l in text.lines() {
        let Some((name, rest)) = l.split_once(':') else {
            continue;
        };
        if name.trim() != dev {
            continue;
        }
        let v: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        return (g(1), g(3), g(9));
    }
    (0, 0, 0)
}

/// Named fields of /proc/net/netstat or snmp ("TcpExt" "SyncookiesSent").
fn netstat(text: &str, group: &str, field: &str) -> u64 {
    let lines: Vec<&str> = text.lines().collect();
    for w in lines.windows(2) {
        let (h, v) = (w[0], w[1]);
        let Some(hr) = h.strip_prefix(group).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
        let Some(vr) = v.strip_prefix(group).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
        for (k, x) in hr.split_whitespace().zip(vr.split_whitespace()) {
            if k == field {
                return x.parse().unwrap_or(0);
            }
        }
    }
    0
}

/// /proc/net/stat/synproxy: per CPU, hex: entries syn_received
/// cookie_invalid cookie_valid cookie_retrans conn_reopened. Sums of
/// syn_received and cookie_valid.
fn synproxy_stats(text: &str) -> (u64, u64) {
    let (mut syn, mut valid) = (0, 0);
    for l in text.lines().skip(1) {
        let v: Vec<u64> = l
            .split_whitespace()
            .map(|x| u64::from_str_radix(x, 16).unwrap_or(0))
            .collect();
        syn += v.get(1).copied().unwrap_or(0);
        valid += v.get(3).copied().unwrap_or(0);
    }
    (syn, valid)
}

/// GET on the admin API, from inside the DUT namespace.
fn admin_get(path: &str) -> Option<Json> {
    let path = path.to_string();
    let body = join(in_ns(DUT_NS, move || -> Option<String> {
        let addr: SocketAddr = ADMIN.parse().ok()?;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: admin\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut v = Vec::new();
        s.read_to_end(&mut v).ok()?;
        let t = String::from_utf8_lossy(&v).into_owned();
        let (head, body) = t.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200")
            .then(|| body.to_string())
            .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
    }))
    .ok()??;
    Json::parse(&body).ok()
}

fn jnum(j: Option<&Json>) -> u64 {
    j.and_then(|v| v.as_f64()).unwrap_or(0.0) as u64
}

/// The XDP program's id on the DUT's device (`ip -d -j link show`).
fn xdp_prog_id() -> Option<u64> {
    let out = run(
        "ip",
        &["-n", DUT_NS, "-d", "-j", "link", "show", "dev", DUT_DEV],
    )
    .ok()?;
    let j = Json::parse(&out).ok()?;
    let l = j.as_arr().first()?;
    let x = l.get("xdp")?;
    if let Some(id) = x.get("prog").and_then(|p| p.get("id")) {
        return id.as_f64().map(|v| v as u64);
    }
    x.get("attached")
        .map(|a| a.as_arr())
        .and_then(|a| a.first())
        .and_then(|a| a.get("prog"))
        .and_then(|p| p.get("id"))
        .and_then(|v| v.as_f64())
        .map(|v| v as u64)
}

/// run_time_ns, run_cnt of a BPF program (`bpftool prog show id N`).
fn bpf_stats(id: u64) -> Option<(u64, u64)> {
    let out = run(
        "bpftool",
        &["prog", "show", "id", &id.to_string(), "--json"],
    )
    .ok()?;
    let j = Json::parse(&out).ok()?;
    Some((jnum(j.get("run_time_ns")), jnum(j.get("run_cnt"))))
}

/// Sets kernel.bpf_stats_enabled = 1; the old value is put back on drop.
struct BpfStats {
    old: Option<String>,
}

impl BpfStats {
    fn enable() -> BpfStats {
        let path = "/proc/sys/kernel/bpf_stats_enabled";
        let old = std::fs::read_to_string(path).ok();
        if old.is_some() && std::fs::write(path, "1").is_err() {
            return BpfStats { old: None };
        }
        BpfStats { old }
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Some(v) = &self.old {
            let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", v.trim());
        }
    }
}

/// Counters read at one instant.
#[derive(Clone, Debug, Default)]
struct Snap {
    at: Option<Instant>,
    dut_cpu: CpuTimes,
    load_cpu: CpuTimes,
    dut_rx: u64,
    dut_rx_dropped: u64,
    dut_tx: u64,
    gen_tx: u64,
    /// TcpExt SyncookiesSent, SyncookiesRecv.
    k_cookies_sent: u64,
    k_cookies_recv: u64,
    listen_drops: u64,
    synproxy_syn: u64,
    synproxy_valid: u64,
    xdp: BTreeMap<String, u64>,
    nft_dropped: u64,
    bpf: Option<(u64, u64)>,
}

fn snap(o: &Opts, prog: Option<u64>) -> Snap {
    let dev = proc_net(DUT_NS, "dev");
    let (dut_rx, dut_rx_dropped, dut_tx) = dev_stats(&dev, DUT_DEV);
    let (_, _, gen_tx) = dev_stats(&proc_net(GEN_NS, "dev"), GEN_DEV);
    let ns = proc_net(DUT_NS, "netstat");
    let (synproxy_syn, synproxy_valid) = synproxy_stats(&proc_net(DUT_NS, "stat/synproxy"));
    let mut xdp = BTreeMap::new();
    if prog.is_some() {
        if let Some(j) = admin_get("/api/v1/shield") {
            if let Some(Json::Obj(m)) = j
                .get("global")
                .and_then(|g| g.get("xdp"))
                .and_then(|x| x.get("packets"))
            {
                for (k, v) in m {
                    xdp.insert(k.clone(), jnum(Some(v)));
                }
            }
        }
    }
    let nft_dropped = run(
        "ip",
        &[
            "netns", "exec", DUT_NS, "nft", "list", "counter", "netdev", "sy", "dropped",
        ],
    )
    .ok()
    .and_then(|t| {
        let i = t.find("packets ")?;
        t[i + 8..].split_whitespace().next()?.parse().ok()
    })
    .unwrap_or(0);
    Snap {
        at: Some(Instant::now()),
        dut_cpu: cpu_times(o.dut_cpu),
        load_cpu: cpu_times(o.load_cpu),
        dut_rx,
        dut_rx_dropped,
        dut_tx,
        gen_tx,
        k_cookies_sent: netstat(&ns, "TcpExt", "SyncookiesSent"),
        k_cookies_recv: netstat(&ns, "TcpExt", "SyncookiesRecv"),
        listen_drops: netstat(&ns, "TcpExt", "ListenDrops"),
        synproxy_syn,
        synproxy_valid,
        xdp,
        nft_dropped,
        bpf: prog.and_then(bpf_stats),
    }
}

// ---------------------------------------------------------------- DUT

struct Dut {
    child: Child,
    log: PathBuf,
}

impl Dut {
    fn start(o: &Opts, config: &Path, log: &Path) -> Result<Dut, String> {
        let logf = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", DUT_NS, "taskset", "-c"])
            .arg(o.dut_cpu.to_string())
            .arg(&o.switchyard)
            .args(["run", "-c"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .map_err(|e| format!("start {}: {e}", o.switchyard.display()))?;
        Ok(Dut {
            child,
            log: log.to_path_buf(),
        })
    }

    fn child_status(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dut {
    fn drop(&mut self) {
        // SIGTERM for a graceful exit (XDP detached), then SIGKILL.
        // SAFETY: our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sy_config(path: PathKind, rules: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n[admin]\nlisten = \"{ADMIN}\"\n[[vserver]]\nname = \"web\"\nlisten = [\"{DUT_IP}:{PORT}\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{ORIGIN}\"\n"
    );
    if path.xdp() {
        s.push_str(rules);
        let _ = writeln!(
            s,
            "[shield.xdp]\ninterfaces = [\"{DUT_DEV}\"]\nmode = \"generic\"\nsyn_cookies = {}",
            path == PathKind::XdpCookies
        );
    }
    s
}

// ---------------------------------------------------------------- clients

#[derive(Default)]
struct ClientCounts {
    tried: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

/// One HTTP/1.1 exchange on `s`: GET `path`, read the whole answer
/// (Content-Length framed). Returns the body's size when the status is 200.
fn exchange(s: &mut TcpStream, path: &str, close: bool) -> Option<usize> {
    let conn = if close { "close" } else { "keep-alive" };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: {conn}\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return None;
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    let mut have = buf.len() - head_end;
    while have < len {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        have += n;
    }
    Some(len)
}

fn connect(timeout: Duration) -> Option<TcpStream> {
    let addr = SocketAddr::new(DUT_IP.parse().ok()?, PORT);
    let s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let _ = s.set_nodelay(true);
    Some(s)
}

/// Valid clients at `rate` connections per second (a new connection per
/// request, 128 B answers) until `end` or STOP: threads in the generator
/// namespace on the load core, each connection given 3 s (a lost SYN+ACK
/// is retried by the kernel after 1 s).
fn valid_clients(
    rate: u64,
    dur: Duration,
    load_cpu: usize,
    counts: Arc<ClientCounts>,
) -> std::thread::JoinHandle<Result<(), String>> {
    in_ns(GEN_NS, move || {
        let start = Instant::now();
        let total = (rate as f64 * dur.as_secs_f64()) as u64;
        let next = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..48)
            .map(|_| {
                let (next, counts) = (next.clone(), counts.clone());
                std::thread::spawn(move || {
                    let _ = sys::pin_current_thread(load_cpu);
                    loop {
                        let k = next.fetch_add(1, Relaxed);
                        if k >= total || STOP.load(Relaxed) {
                            return;
                        }
                        let due = start + Duration::from_secs_f64(k as f64 / rate.max(1) as f64);
                        if let Some(w) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(w);
                        }
                        counts.tried.fetch_add(1, Relaxed);
                        let ok = connect(Duration::from_secs(3))
                            .and_then(|mut s| exchange(&mut s, "/size/128", true));
                        if ok.is_some() {
                            counts.ok.fetch_add(1, Relaxed);
                        } else {
                            counts.failed.fetch_add(1, Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            let _ = t.join();
        }
    })
}

/// Closed-loop valid load for the `acl` scenario: `conns` threads, either a
/// new connection per 128 B request (`cps`) or one keep-alive connection
/// each asking for 64 KB answers back to back (`throughput`).
fn closed_loop(
    cps: bool,
    conns: usize,
    stop: Arc<AtomicBool>,
    load_cpu: usize,
    counts: Arc<ClientCounts>,
) -> std::thread::JoinHandle<Result<(), String>> {
    in_ns(GEN_NS, move || {
        let threads: Vec<_> = (0..conns)
            .map(|_| {
                let (stop, counts) = (stop.clone(), counts.clone());
                std::thread::spawn(move || {
                    let _ = sys::pin_current_thread(load_cpu);
                    let t = Duration::from_secs(3);
                    let mut conn: Option<TcpStream> = None;
                    while !stop.load(Relaxed) && !STOP.load(Relaxed) {
                        counts.tried.fetch_add(1, Relaxed);
                        let r = if cps {
                            connect(t).and_then(|mut s| exchange(&mut s, "/size/128", true))
                        } else {
                            if conn.is_none() {
                                conn = connect(t);
                            }
                            let r = conn.as_mut().and_then(|s| exchange(s, "/size/64k", false));
                            if r.is_none() {
                                conn = None;
                            }
                            r
                        };
                        match r {
                            Some(n) => {
                                counts.ok.fetch_add(1, Relaxed);
                                counts.bytes.fetch_add(n as u64, Relaxed);
                            }
                            None => {
                                counts.failed.fetch_add(1, Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            let _ = t.join();
        }
    })
}

// ---------------------------------------------------------------- samples

#[derive(Clone, Debug)]
pub struct Opts {
    pub paths: Vec<PathKind>,
    pub runs: usize,
    pub duration: Duration,
    pub rules: usize,
    pub valid_rate: u64,
    pub flood_rate: Option<u64>,
    pub flood_packets: u64,
    pub nft_form: NftForm,
    pub dut_cpu: usize,
    pub load_cpu: usize,
    pub switchyard: PathBuf,
    pub out: PathBuf,
}

/// One sample's figures (every rate per second of the measured window).
fn sample(o: &Opts, path: PathKind, run_no: usize, case: &str) -> Result<Json, String> {
    let work = o.out.join("work").join(path.name());
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let rules = rules(o.rules);
    let _net = Net::new(o.dut_cpu, o.load_cpu)?;
    // The kernel's cookies: always, for every path but the XDP ones (where
    // XDP answers) and SYNPROXY (which answers itself).
    let cookies = if path == PathKind::KernelCookies {
        2
    } else {
        1
    };
    ns_sh(
        DUT_NS,
        &format!("sysctl -qw net.ipv4.tcp_syncookies={cookies}"),
    )?;
    if path.nft() {
        let mut t = rules_nft(&rules, o.nft_form, DUT_DEV);
        if path == PathKind::NftSynproxy {
            t.push_str(&synproxy_nft());
            // SYNPROXY's recipe: conntrack must not pick up connections
            // from a bare ACK.
            ns_sh(DUT_NS, "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0")?;
        }
        let f = work.join("rules.nft");
        std::fs::write(&f, &t).map_err(|e| format!("{}: {e}", f.display()))?;
        run(
            "ip",
            &["netns", "exec", DUT_NS, "nft", "-f", &f.to_string_lossy()],
        )?;
    }
    // The origin, on the DUT namespace's loopback, on the load core.
    let load_cpu = o.load_cpu;
    let origin = start_origin(load_cpu)?;
    let cfg = work.join(format!("switchyard-{case}-{run_no}.toml"));
    let rules_t = rules_toml(&rules);
    std::fs::write(&cfg, sy_config(path, &rules_t))
        .map_err(|e| format!("{}: {e}", cfg.display()))?;
    let mut dut = Dut::start(
        o,
        &cfg,
        &work.join(format!("switchyard-{case}-{run_no}.log")),
    )?;
    // Ready: the admin API answers (and XDP is attached where asked).
    let t0 = Instant::now();
    let mut prog = None;
    loop {
        if STOP.load(Relaxed) {
            return Err("interrupted".into());
        }
        if let Ok(Some(st)) = dut.child_status() {
            return Err(format!(
                "{}: Switchyard exited ({st}): {}",
                path.name(),
                dut.log_text()
            ));
        }
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(format!(
                "{}: not ready in 15 s: {}",
                path.name(),
                dut.log_text()
            ));
        }
        if let Some(j) = admin_get("/api/v1/shield") {
            if !path.xdp() {
                break;
            }
            let x = j.get("global").and_then(|g| g.get("xdp"));
            let attached = x
                .and_then(|x| x.get("attached"))
                .is_some_and(|a| !a.as_arr().is_empty());
            let cookies_ok = path != PathKind::XdpCookies
                || x.and_then(|x| x.get("syn_cookies"))
                    .map(|v| matches!(v, Json::Bool(true)))
                    == Some(true);
            if x.and_then(|x| x.get("built_with_xdp"))
                .map(|v| matches!(v, Json::Bool(false)))
                == Some(true)
            {
                return Err("this Switchyard was built without XDP (no clang)".into());
            }
            if attached && cookies_ok {
                prog = xdp_prog_id();
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A first connection proves the path before any flood.
    let counts0 = Arc::new(ClientCounts::default());
    join(valid_clients(
        10,
        Duration::from_millis(200),
        o.load_cpu,
        counts0.clone(),
    ))?;
    let warm_ok = counts0.ok.load(Relaxed);

    let warmup = Duration::from_millis(500);
    let mut out = obj()
        .set("path", path.name())
        .set("case", case)
        .set("run", run_no)
        .set("warm_ok", warm_ok);
    if case == "flood" {
        let clients = Arc::new(ClientCounts::default());
        let cl = valid_clients(
            o.valid_rate,
            warmup + o.duration,
            o.load_cpu,
            clients.clone(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let src = if path.blocked_flood() {
            BLOCKED_FLOOD
        } else {
            ALLOWED_FLOOD
        };
        let max_duration = warmup + o.duration + Duration::from_secs(1);
        let flood: std::thread::JoinHandle<Result<pktgen::Sent, String>> =
            if path == PathKind::Hping3 {
                let stop = stop.clone();
                let count = o.flood_packets;
                let secs = max_duration.as_secs().max(1) + 1;
                std::thread::spawn(move || {
                    // hping3 --flood, bounded by -c and timeout; one source in
                    // the blocked range.
                    let mut c = Command::new("ip")
                        .args(["netns", "exec", GEN_NS, "taskset", "-c"])
                        .arg(load_cpu.to_string())
                        .args(["timeout", &secs.to_string(), "hping3", "-q", "-S", "-p"])
                        .arg(PORT.to_string())
                        .args(["--flood", "-a", "10.201.0.9", "-c"])
                        .arg(count.to_string())
                        .arg(DUT_IP)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(|e| format!("hping3: {e}"))?;
                    let t = Instant::now();
                    loop {
                        if stop.load(Relaxed) || STOP.load(Relaxed) {
                            // SAFETY: our child's pid.
                            unsafe {
                                libc::kill(c.id() as i32, libc::SIGINT);
                            }
                        }
                        if let Ok(Some(_)) = c.try_wait() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Ok(pktgen::Sent {
                        packets: 0,
                        refused: 0,
                        elapsed: t.elapsed(),
                    })
                })
            } else {
                let stop = stop.clone();
                let limits = Limits {
                    rate: o.flood_rate,
                    max_packets: o.flood_packets,
                    max_duration,
                };
                let dst: IpAddr = DUT_IP.parse().map_err(|_| "address")?;
                let src_base: IpAddr = src.parse().map_err(|_| "address")?;
                let macs = (pktgen::parse_mac(GEN_MAC), pktgen::parse_mac(DUT_MAC));
                let (Some(gm), Some(dm)) = macs else {
                    return Err("bad MAC constant".into());
                };
                let h = in_ns(GEN_NS, move || -> Result<pktgen::Sent, String> {
                    let _ = sys::pin_current_thread(load_cpu);
                    let pool = Pool::build(
                        &Shape::Syn {
                            src_base,
                            src_prefix: 16,
                            dst,
                            dst_port: PORT,
                        },
                        65536,
                        gm,
                        dm,
                    );
                    let g = Generator::open(GEN_DEV)
                        .map_err(|e| format!("AF_PACKET on {GEN_DEV}: {e}"))?;
                    let both = StopEither(&stop);
                    Ok(g.flood(&pool, limits, both.flag()))
                });
                std::thread::spawn(move || join(h)?)
            };
        std::thread::sleep(warmup);
        let s0 = snap(o, prog);
        sleep_unless_stopped(o.duration);
        let s1 = snap(o, prog);
        stop.store(true, Relaxed);
        let sent = flood.join().map_err(|_| "flood thread panicked")??;
        join(cl)?;
        out = figures(out, &s0, &s1);
        out = out
            .set("gen_sent", sent.packets)
            .set("gen_refused", sent.refused)
            .set("gen_rate", sent.rate())
            .set("valid_tried", clients.tried.load(Relaxed))
            .set("valid_ok", clients.ok.load(Relaxed))
            .set("valid_failed", clients.failed.load(Relaxed));
    } else {
        let cps = case == "cps";
        let counts = Arc::new(ClientCounts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let h = closed_loop(
            cps,
            if cps { 16 } else { 8 },
            stop.clone(),
            o.load_cpu,
            counts.clone(),
        );
        std::thread::sleep(warmup);
        let (ok0, b0) = (counts.ok.load(Relaxed), counts.bytes.load(Relaxed));
        let s0 = snap(o, prog);
        sleep_unless_stopped(o.duration);
        let s1 = snap(o, prog);
        let (ok1, b1) = (counts.ok.load(Relaxed), counts.bytes.load(Relaxed));
        stop.store(true, Relaxed);
        join(h)?;
        out = figures(out, &s0, &s1);
        let secs = s1
            .at
            .zip(s0.at)
            .map(|(a, b)| a.duration_since(b).as_secs_f64())
            .unwrap_or(1.0)
            .max(1e-6);
        let busy = s1.dut_cpu.minus(&s0.dut_cpu).busy().max(1e-6);
        out = out
            .set("ops", ok1 - ok0)
            .set("ops_rate", (ok1 - ok0) as f64 / secs)
            .set("bytes_rate", (b1 - b0) as f64 / secs)
            .set("ops_per_core", (ok1 - ok0) as f64 / busy)
            .set("bytes_per_core", (b1 - b0) as f64 / busy)
            .set("valid_failed", counts.failed.load(Relaxed));
    }
    let _ = std::fs::write(
        work.join(format!("switchyard-{case}-{run_no}.stderr")),
        dut.log_text(),
    );
    drop(dut);
    drop(origin);
    Ok(out)
}

/// The generator stops on its own flag or on Ctrl-C: a flag that mirrors
/// both, set by a watcher thread.
struct StopEither<'a>(&'a Arc<AtomicBool>);
impl StopEither<'_> {
    fn flag(&self) -> &AtomicBool {
        let f = self.0.clone();
        std::thread::spawn(move || {
            while !f.load(Relaxed) {
                if STOP.load(Relaxed) {
                    f.store(true, Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        self.0
    }
}

fn sleep_unless_stopped(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d && !STOP.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(20).min(d - t.elapsed().min(d)));
    }
}

/// The window's figures from two snapshots; see docs/bench.md for each.
fn figures(out: Json, s0: &Snap, s1: &Snap) -> Json {
    let secs = s1
        .at
        .zip(s0.at)
        .map(|(a, b)| a.duration_since(b).as_secs_f64())
        .unwrap_or(1.0)
        .max(1e-6);
    let d = s1.dut_cpu.minus(&s0.dut_cpu);
    let l = s1.load_cpu.minus(&s0.load_cpu);
    let rx = s1.dut_rx.saturating_sub(s0.dut_rx);
    let busy = d.busy().max(1e-6);
    let x = |k: &str| {
        s1.xdp
            .get(k)
            .copied()
            .unwrap_or(0)
            .saturating_sub(s0.xdp.get(k).copied().unwrap_or(0))
    };
    let mut out = out
        .set("secs", secs)
        .set("rx_rate", rx as f64 / secs)
        .set(
            "gen_tx_rate",
            s1.gen_tx.saturating_sub(s0.gen_tx) as f64 / secs,
        )
        .set(
            "rx_dropped_rate",
            s1.dut_rx_dropped.saturating_sub(s0.dut_rx_dropped) as f64 / secs,
        )
        .set("tx_rate", s1.dut_tx.saturating_sub(s0.dut_tx) as f64 / secs)
        .set("dut_busy", d.busy() / secs)
        .set("dut_softirq", d.softirq / secs)
        .set("dut_system", d.system / secs)
        .set("dut_user", d.user / secs)
        .set("load_busy", l.busy() / secs)
        .set("pps_per_core", rx as f64 / busy)
        .set(
            "k_cookies_rate",
            s1.k_cookies_sent.saturating_sub(s0.k_cookies_sent) as f64 / secs,
        )
        .set(
            "k_cookies_recv",
            s1.k_cookies_recv.saturating_sub(s0.k_cookies_recv),
        )
        .set(
            "listen_drops",
            s1.listen_drops.saturating_sub(s0.listen_drops),
        )
        .set(
            "synproxy_rate",
            s1.synproxy_syn.saturating_sub(s0.synproxy_syn) as f64 / secs,
        )
        .set(
            "synproxy_valid",
            s1.synproxy_valid.saturating_sub(s0.synproxy_valid),
        )
        .set(
            "nft_drop_rate",
            s1.nft_dropped.saturating_sub(s0.nft_dropped) as f64 / secs,
        )
        .set("xdp_evaluated_rate", x("evaluated") as f64 / secs)
        .set("xdp_dropped_rate", x("dropped") as f64 / secs)
        .set("xdp_cookies_rate", x("syn_cookies_sent") as f64 / secs)
        .set("xdp_cookies_completed", x("syn_cookies_completed"))
        .set("xdp_cookies_bad", x("syn_cookies_bad"));
    if let (Some(a), Some(b)) = (s0.bpf, s1.bpf) {
        let ns = b.0.saturating_sub(a.0);
        let cnt = b.1.saturating_sub(a.1);
        if cnt > 0 && ns > 0 {
            out = out
                .set("bpf_ns_per_pkt", ns as f64 / cnt as f64)
                .set("bpf_pps_per_core", cnt as f64 * 1e9 / ns as f64)
                .set("bpf_runs", cnt);
        }
    }
    out
}

// ---------------------------------------------------------------- report

fn median(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

fn stat(samples: &[Json], path: PathKind, case: &str, key: &str) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.get("path").and_then(|p| p.as_str()) == Some(path.name()))
        .filter(|s| s.get("case").and_then(|p| p.as_str()) == Some(case))
        .filter_map(|s| s.get(key).and_then(|x| x.as_f64()))
        .collect();
    median(&mut v)
}

fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn cell(m: Option<(f64, f64, f64)>, f: impl Fn(f64) -> String) -> String {
    match m {
        Some((med, lo, hi)) if lo != hi => format!("{} ({}-{})", f(med), f(lo), f(hi)),
        Some((med, _, _)) => f(med),
        None => "-".into(),
    }
}

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

fn ratio(a: Option<(f64, f64, f64)>, b: Option<(f64, f64, f64)>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b.0 > 0.0 => Some(a.0 / b.0),
        _ => None,
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "misses"
    }
}

pub fn render(r: &Json) -> String {
    let samples = r.get("samples").map(|s| s.as_arr()).unwrap_or(&[]);
    let paths: Vec<PathKind> = r
        .get("paths")
        .map(|p| p.as_arr())
        .unwrap_or(&[])
        .iter()
        .filter_map(|p| p.as_str().and_then(PathKind::parse))
        .collect();
    let mut s = String::from("# switchyard bench shield\n\n");
    for k in ["date", "kernel", "machine", "command"] {
        if let Some(v) = r.get(k).and_then(|v| v.as_str()) {
            let _ = writeln!(s, "- {k}: {v}");
        }
    }
    s.push('\n');
    let flood: Vec<PathKind> = paths.iter().copied().filter(|p| p.flood()).collect();
    if !flood.is_empty() {
        s.push_str("## SYN flood (valid clients connecting meanwhile)\n\n");
        s.push_str("| path | generator sent/s | DUT received/s | DUT core busy (softirq) | packets/s per DUT core | XDP program: ns/packet, packets/s per core | answered/s | dropped/s | valid connections ok |\n|---|---|---|---|---|---|---|---|---|\n");
        for p in &flood {
            let c = "flood";
            let ans = match p {
                PathKind::XdpCookies => stat(samples, *p, c, "xdp_cookies_rate"),
                PathKind::KernelCookies => stat(samples, *p, c, "k_cookies_rate"),
                PathKind::NftSynproxy => stat(samples, *p, c, "synproxy_rate"),
                _ => None,
            };
            let drop = if p.xdp() {
                stat(samples, *p, c, "xdp_dropped_rate")
            } else {
                stat(samples, *p, c, "nft_drop_rate")
            };
            let valid: Vec<f64> = samples
                .iter()
                .filter(|x| x.get("path").and_then(|v| v.as_str()) == Some(p.name()))
                .filter(|x| x.get("case").and_then(|v| v.as_str()) == Some(c))
                .filter_map(|x| {
                    let t = x.get("valid_tried")?.as_f64()?;
                    let o = x.get("valid_ok")?.as_f64()?;
                    (t > 0.0).then_some(o / t)
                })
                .collect();
            let mut vv = valid.clone();
            let gen = if *p == PathKind::Hping3 {
                stat(samples, *p, c, "gen_tx_rate")
            } else {
                stat(samples, *p, c, "gen_rate")
            };
            let bpf = match (
                stat(samples, *p, c, "bpf_ns_per_pkt"),
                stat(samples, *p, c, "bpf_pps_per_core"),
            ) {
                (Some(a), Some(b)) => format!(
                    "{}, {}",
                    cell(Some(a), |v| format!("{v:.0}")),
                    cell(Some(b), si)
                ),
                _ => "-".into(),
            };
            let busy = stat(samples, *p, c, "dut_busy");
            let soft = stat(samples, *p, c, "dut_softirq");
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
                p.name(),
                cell(gen, si),
                cell(stat(samples, *p, c, "rx_rate"), si),
                cell(busy, pct),
                cell(soft, pct),
                cell(stat(samples, *p, c, "pps_per_core"), si),
                bpf,
                cell(ans, si),
                cell(drop, si),
                cell(median(&mut vv), |v| format!("{:.1} %", v * 100.0)),
            );
        }
        s.push('\n');
        let ppc = |p| stat(samples, p, "flood", "pps_per_core");
        let mut lines = Vec::new();
        if let Some(x) = ppc(PathKind::XdpCookies) {
            lines.push(format!(
                "- XDP SYN cookies: {} packets/s per DUT core (target: at least 5 M): {}; the program alone: {}.",
                si(x.0),
                verdict(x.0 >= 5e6),
                cell(stat(samples, PathKind::XdpCookies, "flood", "bpf_pps_per_core"), si)
            ));
        }
        if let Some(x) = ppc(PathKind::XdpDrop) {
            lines.push(format!(
                "- XDP drop by rule: {} packets/s per DUT core (target: at least 5 M): {}.",
                si(x.0),
                verdict(x.0 >= 5e6)
            ));
        }
        for (a, b) in [
            (PathKind::XdpCookies, PathKind::KernelCookies),
            (PathKind::XdpCookies, PathKind::NftSynproxy),
            (PathKind::XdpDrop, PathKind::NftDrop),
        ] {
            if let Some(r) = ratio(ppc(a), ppc(b)) {
                lines.push(format!(
                    "- {} / {}: {r:.2}x packets/s per core (target: at least 3x): {}.",
                    a.name(),
                    b.name(),
                    verdict(r >= 3.0)
                ));
            }
        }
        for p in &flood {
            let mut v: Vec<f64> = samples
                .iter()
                .filter(|x| x.get("path").and_then(|v| v.as_str()) == Some(p.name()))
                .filter_map(|x| {
                    let t = x.get("valid_tried")?.as_f64()?;
                    let o = x.get("valid_ok")?.as_f64()?;
                    (t > 0.0).then_some(o / t)
                })
                .collect();
            if let Some(m) = median(&mut v) {
                lines.push(format!(
                    "- {}: {:.1} % of valid connections succeeded (target: 99 %): {}.",
                    p.name(),
                    m.0 * 100.0,
                    verdict(m.0 >= 0.99)
                ));
            }
        }
        for l in lines {
            let _ = writeln!(s, "{l}");
        }
        s.push('\n');
    }
    let valid: Vec<PathKind> = paths.iter().copied().filter(|p| !p.flood()).collect();
    if !valid.is_empty() {
        s.push_str("## ACL: valid traffic through Switchyard with 1,000 rules against none\n\n");
        s.push_str("| path | case | rate/s | DUT core busy | per DUT core | cost against none (per core) |\n|---|---|---|---|---|---|\n");
        for c in ["cps", "throughput"] {
            let key = if c == "cps" { "ops" } else { "bytes" };
            let fmt = |v: f64| {
                if c == "cps" {
                    format!("{} conn", si(v))
                } else {
                    format!("{:.0} MB", v / 1e6)
                }
            };
            let base = stat(samples, PathKind::None, c, &format!("{key}_per_core"));
            for p in &valid {
                let per = stat(samples, *p, c, &format!("{key}_per_core"));
                let cost = ratio(per, base).map(|r| format!("{:+.1} %", (1.0 - r) * 100.0));
                let _ = writeln!(
                    s,
                    "| {} | {c} | {} | {} | {} | {} |",
                    p.name(),
                    cell(stat(samples, *p, c, &format!("{key}_rate")), fmt),
                    cell(stat(samples, *p, c, "dut_busy"), pct),
                    cell(per, fmt),
                    cost.unwrap_or_else(|| "-".into())
                );
            }
        }
        s.push('\n');
        for c in ["cps", "throughput"] {
            let key = if c == "cps" { "ops" } else { "bytes" };
            let base = stat(samples, PathKind::None, c, &format!("{key}_per_core"));
            let x = stat(samples, PathKind::XdpRules, c, &format!("{key}_per_core"));
            if let Some(r) = ratio(x, base) {
                let cost = (1.0 - r) * 100.0;
                let _ = writeln!(
                    s,
                    "- {c}: 1,000 XDP rules cost valid traffic {cost:.1} % of its per-core rate (target: under 2 %): {}.",
                    verdict(cost < 2.0)
                );
            }
        }
        s.push('\n');
    }
    s.push_str(&ddos::render_section(r));
    if !paths.is_empty() {
        s.push_str("## Paths\n\n");
        for p in &paths {
            let _ = writeln!(s, "- `{}`: {}", p.name(), p.what());
        }
    }
    if let Some(notes) = r.get("notes") {
        s.push_str("\n## Notes\n\n");
        for n in notes.as_arr() {
            if let Some(n) = n.as_str() {
                let _ = writeln!(s, "- {n}");
            }
        }
    }
    s.push_str("\nHow each figure is derived: docs/bench.md, \"Shield\".\n");
    s
}

// ---------------------------------------------------------------- cli

/// The bench's HTTP origin on the DUT namespace's loopback (ORIGIN), one
/// thread on the load core.
pub(crate) fn start_origin(load_cpu: usize) -> Result<crate::origin::OriginHandle, String> {
    join(in_ns(DUT_NS, move || {
        crate::origin::spawn_origin(
            &[ORIGIN.parse().expect("a constant address")],
            crate::origin::OriginOpts {
                threads: 1,
                cpus: vec![load_cpu],
                ..Default::default()
            },
        )
    }))?
    .map_err(|e| format!("origin: {e}"))
}

pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = Args::parse(args, &["help"])?;
    if a.flag("help") {
        println!("{HELP}");
        return Ok(0);
    }
    if let Some(from) = a.get("from") {
        // Renders a report again from its report.json (after a change to
        // the rendering, or to read an old run).
        a.finish()?;
        let text = std::fs::read_to_string(&from).map_err(|e| format!("{from}: {e}"))?;
        let r = Json::parse(&text).map_err(|e| format!("{from}: {e}"))?;
        let md = render(&r);
        let path = Path::new(&from).with_file_name("report.md");
        std::fs::write(&path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{md}");
        return Ok(0);
    }
    let mut scen = a.list("scenario");
    let scen_given = !scen.is_empty();
    if scen.is_empty() {
        scen = vec!["syn-flood".into(), "acl".into(), "ddos".into()];
    }
    let mut notes = Vec::new();
    let mut paths: Vec<PathKind> = Vec::new();
    let mut run_ddos = false;
    for sc in &scen {
        let list = match sc.as_str() {
            "syn-flood" => SYN_FLOOD_PATHS,
            "acl" => ACL_PATHS,
            "ddos" => {
                run_ddos = true;
                &[][..]
            }
            other => return Err(format!("unknown scenario {other} (syn-flood, acl, ddos)")),
        };
        for p in list {
            if !paths.contains(p) {
                paths.push(*p);
            }
        }
    }
    let only: Vec<String> = a.list("paths");
    if !only.is_empty() && !scen_given {
        // Some paths asked for, no scenario named: those paths only.
        run_ddos = false;
    }
    if !only.is_empty() {
        let mut sel = Vec::new();
        for n in &only {
            sel.push(PathKind::parse(n).ok_or_else(|| format!("unknown path {n}"))?);
        }
        paths = sel;
    }
    let runs = a.num::<usize>("runs")?.unwrap_or(3).max(1);
    let duration = a.duration("duration")?.unwrap_or(Duration::from_secs(3));
    let n_rules = a.num::<usize>("rules")?.unwrap_or(1000).clamp(1, 1024);
    let valid_rate = a.num::<u64>("valid-rate")?.unwrap_or(1000).clamp(1, 20_000);
    let flood_rate = a.num::<u64>("flood-rate")?;
    let flood_packets = a.num::<u64>("flood-packets")?.unwrap_or(50_000_000);
    let nft_form = match a.get("nft-form").as_deref() {
        None | Some("sets") => NftForm::Sets,
        Some("linear") => NftForm::Linear,
        Some(o) => return Err(format!("--nft-form {o}: sets or linear")),
    };
    let dut_cpu = a.num::<usize>("dut-cpu")?.unwrap_or(0);
    let load_cpu = a.num::<usize>("load-cpu")?.unwrap_or(1);
    let sy_bin = a.get("switchyard-bin").map(PathBuf::from);
    let ddos_opts = ddos::DdosOpts {
        vectors: ddos::parse_vectors(&a.list("vectors"))?,
        rates: ddos::parse_rates(&{
            let r = a.list("rates");
            if r.is_empty() {
                ddos::DEFAULT_RATES.split(',').map(String::from).collect()
            } else {
                r
            }
        })?,
        baseline: a
            .duration("baseline")?
            .unwrap_or(Duration::from_secs(3))
            .max(Duration::from_secs(1)),
        step: a
            .duration("step")?
            .unwrap_or(Duration::from_secs(2))
            .max(Duration::from_millis(500)),
        runs: a.num::<usize>("ddos-runs")?.unwrap_or(1).max(1),
        rules: a.num::<usize>("ddos-rules")?.unwrap_or(0).min(1024),
        pool: ddos::default_pool(),
    };
    let out = a
        .get("out")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("bench-shield-{}", unix_now())));
    a.finish()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the shield bench runs as root (namespaces, veth, AF_PACKET, BPF)".into());
    }
    let switchyard = match sy_bin {
        Some(p) => p,
        None => crate::dut::switchyard_binary()
            .ok_or("no switchyard binary next to this one: --switchyard-bin PATH")?,
    };
    let switchyard = std::path::absolute(&switchyard).map_err(|e| e.to_string())?;
    let out = std::path::absolute(&out).map_err(|e| format!("--out: {e}"))?;
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if sys::which("nft").is_none() {
        notes.push("nftables paths skipped: no `nft` (apt-get install nftables)".into());
        paths.retain(|p| !p.nft());
    }
    if sys::which("hping3").is_none() {
        notes.push("hping3 cross-check skipped: no `hping3` (apt-get install hping3)".into());
        paths.retain(|p| *p != PathKind::Hping3);
    }
    if sys::which("bpftool").is_none() {
        notes.push("no bpftool: the XDP program's own cost is not shown".into());
    }
    let o = Opts {
        paths: paths.clone(),
        runs,
        duration,
        rules: n_rules,
        valid_rate,
        flood_rate,
        flood_packets,
        nft_form,
        dut_cpu,
        load_cpu,
        switchyard,
        out: out.clone(),
    };
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_signal as extern "C" fn(libc::c_int) as usize,
        );
        libc::signal(
            libc::SIGTERM,
            on_signal as extern "C" fn(libc::c_int) as usize,
        );
    }
    sys::raise_nofile();
    let _bpf = BpfStats::enable();
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    'outer: for run_no in 1..=runs {
        for p in &paths {
            let cases: &[&str] = if p.flood() {
                &["flood"]
            } else {
                &["cps", "throughput"]
            };
            for c in cases {
                if STOP.load(Relaxed) {
                    break 'outer;
                }
                eprintln!("shield: run {run_no}/{runs} {} {c}", p.name());
                match sample(&o, *p, run_no, c) {
                    Ok(j) => {
                        eprintln!("  {}", j.to_string_compact());
                        samples.push(j);
                    }
                    Err(e) => {
                        eprintln!("  failed: {e}");
                        failures.push(format!("{} {c} run {run_no}: {e}", p.name()));
                    }
                }
            }
        }
    }
    let mut ddos_records = Vec::new();
    if run_ddos && !STOP.load(Relaxed) {
        ddos_records = ddos::run_all(&o, &ddos_opts, &mut failures);
    }
    if o.nft_form == NftForm::Linear {
        notes.push("nftables rules as a linear chain (--nft-form linear)".into());
    }
    notes.push("XDP in generic mode on the veth (docs/shield.md, \"veth\"); RPS sends the DUT's veth traffic to the DUT core".into());
    notes.extend(failures);
    let kernel = run("uname", &["-r"]).unwrap_or_default();
    let report = obj()
        .set("date", unix_now())
        .set("kernel", kernel.trim())
        .set(
            "machine",
            format!(
                "{} CPUs; DUT core {dut_cpu}, load core {load_cpu}",
                sys::allowed_cpus()
            ),
        )
        .set(
            "command",
            format!("switchyard bench shield {}", args.join(" ")),
        )
        .set(
            "paths",
            Json::Arr(paths.iter().map(|p| Json::from(p.name())).collect()),
        )
        .set(
            "notes",
            Json::Arr(notes.into_iter().map(Json::from).collect()),
        )
        .set("samples", Json::Arr(samples));
    let report = if run_ddos {
        report
            .set("ddos_setup", ddos::setup_text(&ddos_opts, &o))
            .set("ddos", Json::Arr(ddos_records))
    } else {
        report
    };
    let md = render(&report);
    let w = |name: &str, t: &str| {
        let f = out.join(name);
        std::fs::write(&f, t).map_err(|e| format!("{}: {e}", f.display()))
    };
    w("report.json", &report.to_string_pretty())?;
    w("report.md", &md)?;
    println!("{md}");
    Ok(if STOP.load(Relaxed) { 130 } else { 0 })
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_end_with_the_deciding_one_and_never_match_the_clients() {
        let r = rules(1000);
        assert_eq!(r.len(), 1000);
        assert_eq!(r[999].src4, vec!["10.201.0.0/16".to_string()]);
        for x in &r[..999] {
            for c in &x.src4 {
                let a: std::net::Ipv4Addr = c.split('/').next().unwrap().parse().unwrap();
                assert!(a.octets()[1] < 8, "{c}");
            }
            for p in &x.dst_ports {
                assert!(p.0 <= p.1 && p.1 < 8080, "{p:?}");
            }
        }
        let t = rules_toml(&r);
        assert_eq!(t.matches("[[shield.acl]]").count(), 1000);
        let n = rules_nft(&r, NftForm::Sets, "shd0");
        assert!(n.contains("ip saddr @any4 counter name \"dropped\" drop"));
        assert!(n.contains("10.201.0.0/16"));
        let l = rules_nft(&r, NftForm::Linear, "shd0");
        assert!(l.lines().filter(|x| x.contains(" drop")).count() >= 1000);
    }

    #[test]
    fn proc_parsers() {
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n  shd0: 100 7 0 2 0 0 0 0 500 9 0 0 0 0 0 0\n";
        assert_eq!(dev_stats(dev, "shd0"), (7, 2, 9));
        let ns = "TcpExt: SyncookiesSent SyncookiesRecv\nTcpExt: 42 3\n";
        assert_eq!(netstat(ns, "TcpExt", "SyncookiesRecv"), 3);
        let sp = "entries\t\tsyn_received\tcookie_invalid\tcookie_valid\n00000000 0000000a 00000000 00000002\n00000000 00000001 00000000 00000000\n";
        assert_eq!(synproxy_stats(sp), (11, 2));
    }
}
