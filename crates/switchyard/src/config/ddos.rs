//! `[shield.ddos]` as written, and its validation into the DDoS vectors'
//! settings (shield/ddos.rs). The vectors are detected in XDP, so the
//! section needs `[shield.xdp]`.
//!
//! ```toml
//! [shield.ddos]
//! multiplier = 5            # learned threshold = 5 x the baseline
//! learn = "10m"             # the baseline's half-life
//! hold = "5s"               # quiet seconds before a detection ends
//! ttl_at_most = 1           # tunables of the bad-header vectors
//! hop_limit_at_most = 1
//! ipv6_ext_max_bytes = 256
//! ipv6_ext_max_headers = 4
//! syn_max_bytes = 100       # a longer SYN is "oversize"
//! window_at_most = 0        # the window-size vector's window
//! sweep_max = 50            # distinct addresses or ports per source and second
//! sweep_block = "60s"       # how long a sweeping source's new flows drop
//! [shield.ddos.vectors.udp_flood]
//! action = "drop"           # drop (past the limit), count, off; SYN vectors: cookies
//! threshold = 20000         # packets/s that mean an attack, or "auto" (learned)
//! rate_limit = 50000        # packets/s let through, "auto" (the threshold) or "none"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::types::parse_duration;
use super::types::Problem;
use crate::shield::ddos::{self, Action, Limit, Spec, Threshold, VECTORS};

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DdosFile {
    pub multiplier: Option<Spanned<toml::Value>>,
    pub learn: Option<Spanned<String>>,
    pub hold: Option<Spanned<String>>,
    pub ttl_at_most: Option<Spanned<i64>>,
    pub hop_limit_at_most: Option<Spanned<i64>>,
    pub ipv6_ext_max_bytes: Option<Spanned<i64>>,
    pub ipv6_ext_max_headers: Option<Spanned<i64>>,
    pub syn_max_bytes: Option<Spanned<i64>>,
    pub window_at_most: Option<Spanned<i64>>,
    pub sweep_max: Option<Spanned<i64>>,
    pub sweep_block: Option<Spanned<String>>,
    #[serde(default)]
    pub vectors: BTreeMap<String, Spanned<VectorFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorFile {
    pub action: Option<Spanned<String>>,
    pub threshold: Option<Spanned<toml::Value>>,
    pub rate_limit: Option<Spanned<toml::Value>>,
}

impl DdosFile {
    /// Where the section is, for messages about all of it: its first
    /// setting (the table itself has no span, see `ShieldFile::ddos`).
    pub fn span(&self) -> std::ops::Range<usize> {
        let ints = [
            &self.ttl_at_most,
            &self.hop_limit_at_most,
            &self.ipv6_ext_max_bytes,
            &self.ipv6_ext_max_headers,
            &self.syn_max_bytes,
            &self.window_at_most,
            &self.sweep_max,
        ];
        let strings = [&self.learn, &self.hold, &self.sweep_block];
        ints.iter()
            .filter_map(|v| v.as_ref().map(|s| s.span()))
            .chain(strings.iter().filter_map(|v| v.as_ref().map(|s| s.span())))
            .chain(self.multiplier.iter().map(|m| m.span()))
            .chain(self.vectors.values().map(|v| v.span()))
            .min_by_key(|r| r.start)
            .unwrap_or(0..0)
    }
}

/// An integer setting within `lo..=hi`, else a problem and `default`.
fn int(
    v: &Option<Spanned<i64>>,
    what: &str,
    (lo, hi): (i64, i64),
    default: i64,
    problems: &mut Vec<Problem>,
) -> i64 {
    match v {
        None => default,
        Some(n) if (lo..=hi).contains(n.get_ref()) => *n.get_ref(),
        Some(n) => {
            problems.push((
                n.span(),
                format!("shield.ddos.{what}: {} is not {lo} to {hi}", n.get_ref()),
            ));
            default
        }
    }
}

fn duration(
    v: &Option<Spanned<String>>,
    what: &str,
    default: Duration,
    problems: &mut Vec<Problem>,
) -> Duration {
    let Some(s) = v else { return default };
    match parse_duration(s.get_ref()) {
        Ok(m) if m.0 >= 1000 => m.duration(),
        Ok(_) => {
            problems.push((
                s.span(),
                format!("shield.ddos.{what}: at least 1s (the detector ticks once a second)"),
            ));
            default
        }
        Err(e) => {
            problems.push((s.span(), format!("shield.ddos.{what}: {e}")));
            default
        }
    }
}

/// A rate: a non-negative integer (packets per second), or one of `words`.
fn rate(
    v: &Spanned<toml::Value>,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<Result<u64, String>> {
    match v.get_ref() {
        toml::Value::Integer(n) if *n >= 0 => Some(Ok(*n as u64)),
        toml::Value::String(s) => Some(Err(s.clone())),
        other => {
            problems.push((
                v.span(),
                format!(
                    "{what}: {other} is not a number of packets per second (0 or more) or a word"
                ),
            ));
            None
        }
    }
}

/// Validates `[shield.ddos]`.
pub fn build(file: &DdosFile, problems: &mut Vec<Problem>) -> Spec {
    let d = Spec::default();
    let mut spec = Spec {
        ttl_at_most: int(
            &file.ttl_at_most,
            "ttl_at_most",
            (0, 255),
            d.ttl_at_most.into(),
            problems,
        ) as u8,
        hop_limit_at_most: int(
            &file.hop_limit_at_most,
            "hop_limit_at_most",
            (0, 255),
            d.hop_limit_at_most.into(),
            problems,
        ) as u8,
        ext_max_bytes: int(
            &file.ipv6_ext_max_bytes,
            "ipv6_ext_max_bytes",
            (8, 65535),
            d.ext_max_bytes.into(),
            problems,
        ) as u32,
        ext_max_headers: int(
            &file.ipv6_ext_max_headers,
            "ipv6_ext_max_headers",
            (0, 7),
            d.ext_max_headers.into(),
            problems,
        ) as u32,
        syn_max_bytes: int(
            &file.syn_max_bytes,
            "syn_max_bytes",
            (40, 65535),
            d.syn_max_bytes.into(),
            problems,
        ) as u32,
        window_at_most: int(
            &file.window_at_most,
            "window_at_most",
            (0, 65535),
            d.window_at_most.into(),
            problems,
        ) as u16,
        sweep_max: int(
            &file.sweep_max,
            "sweep_max",
            (1, 200),
            d.sweep_max.into(),
            problems,
        ) as u32,
        sweep_block: duration(&file.sweep_block, "sweep_block", d.sweep_block, problems),
        learn: duration(&file.learn, "learn", d.learn, problems),
        hold: duration(&file.hold, "hold", d.hold, problems),
        ..d
    };
    if let Some(m) = &file.multiplier {
        let x = match m.get_ref() {
            toml::Value::Integer(n) => Some(*n as f64),
            toml::Value::Float(f) => Some(*f),
            _ => None,
        };
        match x {
            Some(x) if (1.0..=1000.0).contains(&x) => {
                spec.multiplier_pct = (x * 100.0).round() as u32
            }
            _ => problems.push((
                m.span(),
                format!(
                    "shield.ddos.multiplier: {} is not a number from 1 to 1000",
                    m.get_ref()
                ),
            )),
        }
    }
    for (name, v) in &file.vectors {
        let Some(i) = ddos::index(name) else {
            let known: Vec<&str> = VECTORS.iter().map(|v| v.name).collect();
            problems.push((
                v.span(),
                format!(
                    "shield.ddos.vectors: unknown vector {:?}; the vectors are {}",
                    name,
                    known.join(", ")
                ),
            ));
            continue;
        };
        let at = format!("shield.ddos.vectors.{name}");
        let vs = &mut spec.vectors[i];
        let f = v.get_ref();
        if let Some(a) = &f.action {
            vs.action = match a.get_ref().as_str() {
                "drop" => Action::Drop,
                "count" => Action::Count,
                "off" => Action::Off,
                "cookies" if matches!(name.as_str(), "tcp_syn_flood" | "tcp_half_open") => {
                    Action::Cookies
                }
                "cookies" => {
                    problems.push((
                        a.span(),
                        format!("{at}.action: \"cookies\" mitigates SYN floods: tcp_syn_flood and tcp_half_open only"),
                    ));
                    vs.action
                }
                other => {
                    problems.push((
                        a.span(),
                        format!("{at}.action: unknown action {other:?}; use drop, count, cookies (SYN vectors) or off"),
                    ));
                    vs.action
                }
            };
        }
        if let Some(t) = &f.threshold {
            match rate(t, &format!("{at}.threshold"), problems) {
                Some(Ok(0)) => problems.push((
                    t.span(),
                    format!("{at}.threshold: 0 would detect an attack every second; use 1 or more, or \"auto\""),
                )),
                Some(Ok(n)) => vs.threshold = Threshold::Rate(n),
                Some(Err(w)) if w == "auto" => vs.threshold = Threshold::Auto,
                Some(Err(w)) => problems.push((
                    t.span(),
                    format!("{at}.threshold: {w:?} is neither a number of packets per second nor \"auto\""),
                )),
                None => {}
            }
        }
        if let Some(l) = &f.rate_limit {
            match rate(l, &format!("{at}.rate_limit"), problems) {
                Some(Ok(n)) => vs.limit = Limit::Rate(n),
                Some(Err(w)) if w == "auto" => vs.limit = Limit::Auto,
                Some(Err(w)) if w == "none" => vs.limit = Limit::None,
                Some(Err(w)) => problems.push((
                    l.span(),
                    format!("{at}.rate_limit: {w:?} is not a number of packets per second, \"auto\" or \"none\""),
                )),
                None => {}
            }
        }
    }
    spec
}
