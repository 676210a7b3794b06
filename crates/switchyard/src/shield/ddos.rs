//! The DDoS vectors of report 003 (Table 3) and how each is detected:
//! the catalogue, `[shield.ddos]` validated (`Spec`), and the detector
//! that turns per-second packet counts into "detected", learned
//! thresholds and the limits XDP enforces.
//!
//! The packet work is in XDP (xdp/ddos.bpf.h): it classifies each frame
//! into the vectors it belongs to, counts it, and drops what passes a
//! vector's limit in the current second. Everything that needs memory of
//! more than one second lives here, in user space, ticked once a second
//! by xdp/ddos.rs:
//! - **rate**: packets of the vector seen in the last second;
//! - **detected**: the rate reached the threshold; it ends after `hold`
//!   seconds below it (so a pulsing flood stays one detection);
//! - **learned threshold** (`threshold = "auto"`): the multiplier times
//!   a baseline, the highest rate seen outside attacks with a decay of
//!   `learn` (half-life), never below the vector's floor. What an attack
//!   sends is not learned: the baseline only moves while undetected;
//! - **limit**: packets per second let through (XDP drops the rest):
//!   configured, the threshold itself (`"auto"`), or none.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Many packets of a legal kind: rate-limited past a threshold.
    Flood,
    /// Packets no legitimate sender makes: dropped from the first.
    BadHeader,
    Other,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Flood => "flood",
            Kind::BadHeader => "bad_header",
            Kind::Other => "other",
        }
    }
}

pub struct Vector {
    pub name: &'static str,
    pub kind: Kind,
    pub what: &'static str,
    /// The lowest learned threshold (packets per second; for half-open
    /// connections, connections).
    pub floor: u64,
}

const fn v(name: &'static str, kind: Kind, floor: u64, what: &'static str) -> Vector {
    Vector {
        name,
        kind,
        what,
        floor,
    }
}

/// Index of the half-open vector: a gauge of connections, read from the
/// kernel, not a packet rate.
pub const HALF_OPEN: usize = 11;
/// Index of the sweep vector: per source, decided in XDP.
pub const SWEEP: usize = 26;

/// Every vector, in the order of xdp/ddos.bpf.h's numbers.
pub const VECTORS: [Vector; 28] = [
    v("ipv4_fragment", Kind::Flood, 1_000, "IPv4 fragments"),
    v("ipv6_fragment", Kind::Flood, 1_000, "IPv6 fragments"),
    v("icmp_fragment", Kind::Flood, 100, "fragments of ICMP or ICMPv6 messages"),
    v("icmpv4_flood", Kind::Flood, 1_000, "ICMPv4 messages"),
    v("icmpv6_flood", Kind::Flood, 1_000, "ICMPv6 messages other than neighbour discovery (133-137)"),
    v("tcp_syn_flood", Kind::Flood, 10_000, "TCP SYNs (without ACK)"),
    v("tcp_synack_flood", Kind::Flood, 1_000, "TCP SYN+ACKs"),
    v("tcp_syn_oversize", Kind::Flood, 100, "SYNs whose IP packet is longer than syn_max_bytes"),
    v("non_tcp_connection", Kind::Flood, 1_000, "UDP to a port only TCP vservers listen on, and IP protocols other than TCP, UDP and ICMP"),
    v("tcp_rst_flood", Kind::Flood, 10_000, "TCP RSTs"),
    v("tcp_push_flood", Kind::Flood, 50_000, "TCP segments with PSH (not SYN or RST)"),
    v("tcp_half_open", Kind::Flood, 1_000, "half-open connections (SYN_RECV sockets); while detected, SYNs past rate_limit are dropped"),
    v("tcp_window_size", Kind::Flood, 1_000, "TCP segments (not SYN or RST) advertising a window of at most window_at_most"),
    v("udp_flood", Kind::Flood, 50_000, "UDP datagrams"),
    v("ttl_at_most", Kind::BadHeader, 1, "IPv4 packets with TTL at most ttl_at_most"),
    v("ip_options", Kind::BadHeader, 1, "IPv4 packets with options"),
    v("ipv6_hop_limit", Kind::BadHeader, 1, "IPv6 packets with a hop limit at most hop_limit_at_most"),
    v("ipv6_ext_hdr_too_large", Kind::BadHeader, 1, "IPv6 extension headers longer than ipv6_ext_max_bytes in all"),
    v("ipv6_ext_hdr_frames", Kind::Flood, 1_000, "IPv6 packets with extension headers"),
    v("ipv6_ext_hdr_too_many", Kind::BadHeader, 1, "more IPv6 extension headers than ipv6_ext_max_headers"),
    v("tcp_option_unknown", Kind::BadHeader, 1, "TCP options of an unknown kind"),
    v("tcp_option_illegal_length", Kind::BadHeader, 1, "TCP options with a length their kind does not have"),
    v("tcp_option_overrun", Kind::BadHeader, 1, "TCP options running past the header or the packet"),
    v("tcp_bad_urg", Kind::BadHeader, 1, "URG with a zero urgent pointer, or on a SYN or RST"),
    v("host_unreachable", Kind::Other, 100, "ICMP host unreachable (ICMPv6 address unreachable)"),
    v("tidcmp", Kind::Other, 1, "ICMP source quench (RFC 6633: hosts discard it)"),
    v("sweep", Kind::Other, 1, "new flows of a source that reached more than sweep_max addresses or ports in a second, for sweep_block"),
    v("ipv6_ext_hdr_malformed", Kind::BadHeader, 1, "IPv6 extension headers past the packet, or hop-by-hop options not first"),
];

pub fn index(name: &str) -> Option<usize> {
    VECTORS.iter().position(|v| v.name == name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Off,
    /// Detected and counted, never dropped.
    Count,
    Drop,
    /// SYN floods: counted, and while detected XDP answers every SYN
    /// with a cookie (completed by the tc program), keeping no state.
    Cookies,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Off => "off",
            Action::Count => "count",
            Action::Drop => "drop",
            Action::Cookies => "cookies",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// Learned from the baseline.
    Auto,
    Rate(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The threshold in force.
    Auto,
    Rate(u64),
    /// Nothing is dropped (the vector is detected only).
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorSpec {
    pub action: Action,
    pub threshold: Threshold,
    pub limit: Limit,
}

impl VectorSpec {
    /// A vector as it runs when `[shield.ddos]` says nothing about it:
    /// bad headers dropped from the first packet, floods limited at a
    /// learned threshold.
    pub fn default_for(v: &Vector) -> VectorSpec {
        // SYNs and data segments of a flood look like valid clients'
        // ones: a per-vector limit would drop those alike (a measured 24-64
        // % of valid connections failed under 10-100 k SYN/s). SYN floods
        // are mitigated by SYN cookies (the kernel's, or XDP's with
        // `syn_cookies`); these vectors detect and count unless told to
        // drop.
        if matches!(v.name, "tcp_syn_flood" | "tcp_half_open" | "tcp_push_flood") {
            return VectorSpec {
                action: Action::Count,
                threshold: Threshold::Auto,
                limit: Limit::Auto,
            };
        }
        // Source quench: RFC 6633 has hosts discard every one.
        if v.kind == Kind::BadHeader || v.name == "tidcmp" {
            return VectorSpec {
                action: Action::Drop,
                threshold: Threshold::Rate(1),
                limit: Limit::Rate(0),
            };
        }
        VectorSpec {
            action: Action::Drop,
            threshold: Threshold::Auto,
            limit: Limit::Auto,
        }
    }
}

/// `[shield.ddos]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub vectors: Vec<VectorSpec>,
    pub ttl_at_most: u8,
    pub hop_limit_at_most: u8,
    pub ext_max_bytes: u32,
    pub ext_max_headers: u32,
    pub syn_max_bytes: u32,
    pub window_at_most: u16,
    pub sweep_max: u32,
    pub sweep_block: Duration,
    /// Half-life of the learned baseline.
    pub learn: Duration,
    /// Learned threshold = baseline times this, in percent.
    pub multiplier_pct: u32,
    /// Seconds below the threshold before a detection ends.
    pub hold: Duration,
}

impl Spec {
    /// A SYN vector mitigates by cookies: the tc program must be there.
    pub fn uses_cookies(&self) -> bool {
        self.vectors.iter().any(|v| v.action == Action::Cookies)
    }
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            vectors: VECTORS.iter().map(VectorSpec::default_for).collect(),
            ttl_at_most: 1,
            hop_limit_at_most: 1,
            ext_max_bytes: 256,
            ext_max_headers: 4,
            // The longest SYN header: IPv6 (40) and TCP with 40 bytes of
            // options (60).
            syn_max_bytes: 100,
            window_at_most: 0,
            sweep_max: 50,
            sweep_block: Duration::from_secs(60),
            learn: Duration::from_secs(600),
            multiplier_pct: 500,
            hold: Duration::from_secs(5),
        }
    }
}

/// What XDP is told for one vector: the action, and packets per second
/// let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforce {
    pub action: Action,
    pub limit: u64,
}

#[derive(Debug, Clone, Default)]
struct State {
    seen: u64,
    dropped: u64,
    rate: u64,
    peak: u64,
    /// The decaying highest rate outside detections.
    baseline: f64,
    /// Last second's rate, learned only if this second is no attack
    /// either: a flood's first, partial second is never learned.
    pending: Option<u64>,
    detected_since: Option<SystemTime>,
    below: u32,
    detections: u64,
}

/// The per-vector memory between ticks.
#[derive(Debug, Clone)]
pub struct Detector {
    states: Vec<State>,
}

impl Default for Detector {
    fn default() -> Detector {
        Detector {
            states: vec![State::default(); VECTORS.len()],
        }
    }
}

/// One second's readings: per vector, packets seen and dropped since
/// the program loaded, and the half-open connections now.
pub struct Reading<'a> {
    pub seen: &'a [u64],
    pub dropped: &'a [u64],
    pub half_open: u64,
    pub elapsed: Duration,
    pub now: SystemTime,
}

impl Detector {
    pub fn threshold(&self, spec: &Spec, i: usize) -> u64 {
        if i == SWEEP {
            // Decided per source in XDP: distinct addresses or ports.
            return u64::from(spec.sweep_max);
        }
        match spec.vectors[i].threshold {
            Threshold::Rate(n) => n,
            Threshold::Auto => {
                let learned = self.states[i].baseline * f64::from(spec.multiplier_pct) / 100.0;
                VECTORS[i].floor.max(learned.ceil() as u64)
            }
        }
    }

    /// What XDP enforces for vector `i` now.
    pub fn enforce(&self, spec: &Spec, i: usize) -> Enforce {
        let vs = spec.vectors[i];
        let limit = match vs.limit {
            Limit::Rate(n) => n,
            Limit::Auto => self.threshold(spec, i),
            Limit::None => u64::MAX,
        };
        let action = match vs.action {
            Action::Drop if limit == u64::MAX => Action::Count,
            // XDP counts; the cookies are switched by `cookies_now`.
            Action::Cookies => Action::Count,
            a => a,
        };
        // Half-open: SYNs are limited only while too many connections
        // are half open; otherwise they are this vector's business not.
        if i == HALF_OPEN
            && (self.states[i].detected_since.is_none() || vs.action == Action::Cookies)
        {
            return Enforce {
                action: Action::Off,
                limit: u64::MAX,
            };
        }
        Enforce { action, limit }
    }

    /// Takes one second's readings.
    pub fn tick(&mut self, spec: &Spec, r: &Reading) {
        let secs = r.elapsed.as_secs_f64().max(0.001);
        let decay = 0.5f64.powf(secs / spec.learn.as_secs_f64().max(1.0));
        let hold = spec.hold.as_secs().max(1) as u32;
        for i in 0..VECTORS.len() {
            let seen = r.seen.get(i).copied().unwrap_or(0);
            let dropped = r.dropped.get(i).copied().unwrap_or(0);
            let threshold = self.threshold(spec, i);
            let s = &mut self.states[i];
            let rate = if i == HALF_OPEN {
                r.half_open
            } else if seen < s.seen {
                // The program was loaded again: its counters restarted.
                (seen as f64 / secs).round() as u64
            } else {
                ((seen - s.seen) as f64 / secs).round() as u64
            };
            s.seen = seen;
            s.dropped = dropped;
            s.rate = rate;
            s.peak = s.peak.max(rate);
            if spec.vectors[i].action == Action::Off {
                s.detected_since = None;
                s.below = 0;
                continue;
            }
            // The sweep vector counts only flows of blocked sources.
            let over = if i == SWEEP {
                rate > 0
            } else {
                rate >= threshold.max(1)
            };
            if over {
                s.below = 0;
                if s.detected_since.is_none() {
                    s.detected_since = Some(r.now);
                    s.detections += 1;
                }
            } else if s.detected_since.is_some() {
                s.below += 1;
                if s.below >= hold {
                    s.detected_since = None;
                    s.below = 0;
                }
            }
            if s.detected_since.is_some() || i == SWEEP {
                s.pending = None;
            } else {
                let learned = s.pending.replace(rate).unwrap_or(0);
                s.baseline = (s.baseline * decay).max(learned as f64);
            }
        }
    }

    /// Counters already there when the detector starts (the vectors were
    /// turned on by a reload): what came before is no rate.
    pub fn prime(&mut self, seen: &[u64], dropped: &[u64]) {
        for (i, s) in self.states.iter_mut().enumerate() {
            s.seen = seen.get(i).copied().unwrap_or(0);
            s.dropped = dropped.get(i).copied().unwrap_or(0);
        }
    }

    /// Whether XDP should answer SYNs with cookies now: a vector whose
    /// action is "cookies" is detected.
    pub fn wants_cookies(&self, spec: &Spec) -> bool {
        spec.vectors
            .iter()
            .zip(&self.states)
            .any(|(v, s)| v.action == Action::Cookies && s.detected_since.is_some())
    }

    pub fn rate(&self, i: usize) -> u64 {
        self.states[i].rate
    }

    pub fn detected(&self, i: usize) -> bool {
        self.states[i].detected_since.is_some()
    }

    /// Per vector: name, seen, dropped, detected and rate (for /metrics).
    pub fn counters(&self) -> Vec<(&'static str, u64, u64, bool, u64)> {
        VECTORS
            .iter()
            .zip(&self.states)
            .map(|(v, s)| {
                (
                    v.name,
                    s.seen,
                    s.dropped,
                    s.detected_since.is_some(),
                    s.rate,
                )
            })
            .collect()
    }

    pub fn describe(&self, spec: &Spec) -> Value {
        let vectors: Vec<Value> = VECTORS
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let s = &self.states[i];
                let vs = spec.vectors[i];
                let e = self.enforce(spec, i);
                json!({
                    "name": v.name,
                    "kind": v.kind.as_str(),
                    "what": v.what,
                    "action": vs.action.as_str(),
                    "threshold": self.threshold(spec, i),
                    "threshold_learned": vs.threshold == Threshold::Auto,
                    "baseline": s.baseline.round() as u64,
                    "rate_limit": match (vs.action, e.limit) {
                        _ if i == SWEEP => None,
                        (Action::Drop, l) if l != u64::MAX => Some(l),
                        _ => None,
                    },
                    "packets": s.seen,
                    "dropped": s.dropped,
                    "rate": s.rate,
                    "peak_rate": s.peak,
                    "detected": s.detected_since.is_some(),
                    "detected_since": s.detected_since.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_secs()),
                    "detections": s.detections,
                })
            })
            .collect();
        json!({
            "ttl_at_most": spec.ttl_at_most,
            "hop_limit_at_most": spec.hop_limit_at_most,
            "ipv6_ext_max_bytes": spec.ext_max_bytes,
            "ipv6_ext_max_headers": spec.ext_max_headers,
            "syn_max_bytes": spec.syn_max_bytes,
            "window_at_most": spec.window_at_most,
            "sweep_max": spec.sweep_max,
            "sweep_block_s": spec.sweep_block.as_secs(),
            "learn_s": spec.learn.as_secs(),
            "multiplier": f64::from(spec.multiplier_pct) / 100.0,
            "hold_s": spec.hold.as_secs(),
            "vectors": vectors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading<'a>(seen: &'a [u64], dropped: &'a [u64], at: u64) -> Reading<'a> {
        Reading {
            seen,
            dropped,
            half_open: 0,
            elapsed: Duration::from_secs(1),
            now: UNIX_EPOCH + Duration::from_secs(at),
        }
    }

    /// Feeds vector `i` `rates` (one a second) and returns the detector.
    fn run(spec: &Spec, i: usize, rates: &[u64]) -> (Detector, Vec<bool>) {
        let mut d = Detector::default();
        let mut seen = vec![0u64; VECTORS.len()];
        let dropped = vec![0u64; VECTORS.len()];
        d.tick(spec, &reading(&seen, &dropped, 0));
        let mut states = Vec::new();
        for (t, r) in rates.iter().enumerate() {
            seen[i] += r;
            d.tick(spec, &reading(&seen, &dropped, t as u64 + 1));
            states.push(d.detected(i));
        }
        (d, states)
    }

    #[test]
    fn vector_numbers_match_the_program() {
        let h = include_str!("xdp/ddos.bpf.h");
        for (i, name) in [
            (0, "V_IPV4_FRAGMENT"),
            (5, "V_SYN_FLOOD"),
            (HALF_OPEN, "V_HALF_OPEN"),
            (13, "V_UDP_FLOOD"),
            (23, "V_BAD_URG"),
            (SWEEP, "V_SWEEP"),
            (27, "V_EXT_MALFORMED"),
        ] {
            assert!(
                h.contains(&format!("#define {name} {i}\n")),
                "{name} is {i}"
            );
        }
        assert!(h.contains(&format!("#define N_VEC {}\n", VECTORS.len())));
        let mut names: Vec<_> = VECTORS.iter().map(|v| v.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), VECTORS.len(), "names are unique");
    }

    #[test]
    fn a_configured_threshold_detects_and_holds() {
        let mut spec = Spec::default();
        let udp = index("udp_flood").unwrap_or(0);
        spec.vectors[udp].threshold = Threshold::Rate(1_000);
        spec.vectors[udp].limit = Limit::Rate(2_000);
        spec.hold = Duration::from_secs(3);
        let (d, states) = run(&spec, udp, &[500, 999, 1_000, 5_000, 10, 10, 10, 10]);
        assert_eq!(
            states,
            [false, false, true, true, true, true, false, false],
            "detected at the threshold, ended after 3 quiet seconds"
        );
        assert_eq!(d.states[udp].detections, 1);
        assert_eq!(d.states[udp].peak, 5_000);
        assert_eq!(
            d.enforce(&spec, udp),
            Enforce {
                action: Action::Drop,
                limit: 2_000
            }
        );
    }

    #[test]
    fn a_learned_threshold_follows_the_baseline_but_not_the_attack() {
        let spec = Spec::default();
        let udp = index("udp_flood").unwrap_or(0);
        // Below the floor, the floor holds.
        let (d, _) = run(&spec, udp, &[1_000; 5]);
        assert_eq!(d.threshold(&spec, udp), 50_000);
        // A baseline of 20,000/s: 5x is 100,000.
        let mut rates = vec![20_000u64; 30];
        let (d, states) = run(&spec, udp, &rates);
        assert!(states.iter().all(|s| !s), "normal traffic is no attack");
        assert_eq!(d.threshold(&spec, udp), 100_000);
        assert_eq!(d.enforce(&spec, udp).limit, 100_000, "auto limit");
        // An attack at 500,000/s is detected and not learned.
        rates.extend([500_000; 20]);
        let (d, states) = run(&spec, udp, &rates);
        assert!(states[30..].iter().all(|s| *s), "detected throughout");
        assert_eq!(
            d.threshold(&spec, udp),
            100_000,
            "the attack is not learned"
        );
    }

    #[test]
    fn a_floods_first_partial_second_is_not_learned() {
        let mut spec = Spec::default();
        let rst = index("tcp_rst_flood").unwrap_or(0);
        spec.vectors[rst].action = Action::Drop;
        // Quiet, then a flood whose first tick holds 8,000 (under the
        // 10,000 floor), then 60,000 a second.
        let (d, states) = run(&spec, rst, &[100, 100, 8_000, 60_000, 60_000]);
        assert_eq!(states, [false, false, false, true, true]);
        assert_eq!(d.threshold(&spec, rst), 10_000, "8,000 was not learned");
        // Normal traffic is learned, a second late.
        let (d, _) = run(&spec, rst, &[4_000, 4_000, 4_000]);
        assert_eq!(d.threshold(&spec, rst), 20_000);
    }

    #[test]
    fn cookies_while_a_syn_flood_is_detected() {
        let mut spec = Spec::default();
        let syn = index("tcp_syn_flood").unwrap_or(0);
        spec.vectors[syn].action = Action::Cookies;
        spec.vectors[syn].threshold = Threshold::Rate(1_000);
        spec.hold = Duration::from_secs(2);
        assert!(spec.uses_cookies());
        let (d, states) = run(&spec, syn, &[100, 5_000]);
        assert_eq!(states, [false, true]);
        assert!(d.wants_cookies(&spec));
        assert_eq!(d.enforce(&spec, syn).action, Action::Count, "never drops");
        let (d, _) = run(&spec, syn, &[5_000, 0, 0]);
        assert!(!d.wants_cookies(&spec), "off after the hold");
    }

    #[test]
    fn syn_and_push_floods_count_unless_told_to_drop() {
        let spec = Spec::default();
        for name in ["tcp_syn_flood", "tcp_half_open", "tcp_push_flood"] {
            let i = index(name).unwrap_or(0);
            assert_eq!(spec.vectors[i].action, Action::Count, "{name}");
        }
        let udp = index("udp_flood").unwrap_or(0);
        assert_eq!(spec.vectors[udp].action, Action::Drop);
    }

    #[test]
    fn bad_headers_drop_from_the_first_packet() {
        let spec = Spec::default();
        let urg = index("tcp_bad_urg").unwrap_or(0);
        assert_eq!(
            Detector::default().enforce(&spec, urg),
            Enforce {
                action: Action::Drop,
                limit: 0
            }
        );
        let (_, states) = run(&spec, urg, &[0, 1, 0]);
        assert_eq!(states, [false, true, true]);
    }

    #[test]
    fn half_open_limits_syns_only_while_detected() {
        let mut spec = Spec::default();
        spec.vectors[HALF_OPEN].action = Action::Drop;
        spec.vectors[HALF_OPEN].threshold = Threshold::Rate(100);
        spec.vectors[HALF_OPEN].limit = Limit::Rate(10);
        let mut d = Detector::default();
        let zeros = vec![0u64; VECTORS.len()];
        assert_eq!(d.enforce(&spec, HALF_OPEN).action, Action::Off);
        let mut r = reading(&zeros, &zeros, 1);
        r.half_open = 150;
        d.tick(&spec, &r);
        assert!(d.detected(HALF_OPEN));
        assert_eq!(
            d.enforce(&spec, HALF_OPEN),
            Enforce {
                action: Action::Drop,
                limit: 10
            }
        );
    }

    #[test]
    fn count_never_drops() {
        let mut spec = Spec::default();
        let syn = index("tcp_syn_flood").unwrap_or(0);
        spec.vectors[syn].action = Action::Count;
        assert_eq!(
            Detector::default().enforce(&spec, syn).action,
            Action::Count
        );
        spec.vectors[syn].action = Action::Drop;
        spec.vectors[syn].limit = Limit::None;
        assert_eq!(
            Detector::default().enforce(&spec, syn).action,
            Action::Count
        );
    }
}
