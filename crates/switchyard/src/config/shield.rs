//! `[shield]` and `[[vserver.acl]]` as written, and their validation into
//! ACL rule sets.
//!
//! ```toml
//! [shield]
//! default = "allow"                  # what no deciding rule means
//! [shield.lists]
//! blocklist = ["203.0.113.0/24", "2001:db8:bad::/48"]
//! [[shield.acl]]
//! name = "drop the blocklist"
//! src = ["@blocklist"]               # CIDRs, or @list references
//! action = "drop"                    # allow, drop, reject, count, log
//! [[shield.acl]]
//! proto = ["tcp"]
//! dst_port = [22, "8000-8100"]
//! tcp_flags = "syn,!ack"
//! action = "reject"
//! [shield.xdp]                       # the same rules in XDP, on these interfaces
//! interfaces = ["eth0"]
//! mode = "auto"                      # native, else generic; or "native", "generic"
//! syn_per_source = 1000              # SYNs/s per source let through; 0: no limit
//! syn_cookies = true                 # answer SYNs with cookies in XDP (Linux 6.10+)
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::types::Cidr;
use super::types::Problem;
use crate::shield::acl::{self, Action, Rule};
use crate::shield::AclSet;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ShieldFile {
    pub default: Option<Spanned<String>>,
    #[serde(default)]
    pub lists: BTreeMap<String, Vec<Spanned<Cidr>>>,
    #[serde(default)]
    pub acl: Vec<AclRule>,
    pub xdp: Option<Spanned<XdpFile>>,
    /// Not `Spanned`, for the reason of `ConfigFile::shield`.
    pub ddos: Option<super::ddos::DdosFile>,
}

/// `[shield.xdp]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpFile {
    pub interfaces: Spanned<Vec<Spanned<String>>>,
    pub mode: Option<Spanned<String>>,
    pub syn_per_source: Option<Spanned<i64>>,
    pub syn_cookies: Option<bool>,
}

/// Linux's rule for interface names (dev_valid_name): 1 to 15 bytes, not
/// "." or "..", no '/', ':' or white space.
fn interface_name_problem(n: &str) -> Option<String> {
    if n.is_empty() || n.len() > 15 {
        return Some(format!("interface name {n:?} must be 1 to 15 bytes long"));
    }
    if n == "."
        || n == ".."
        || n.bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
    {
        return Some(format!(
            "{n:?} is not an interface name (no '/', ':' or white space)"
        ));
    }
    None
}

/// Validates `[shield.xdp]` into `set` (the global rule set): interface
/// names, the mode, and whether the rules fit the XDP tables.
pub fn build_xdp(file: &ShieldFile, set: &mut AclSet, problems: &mut Vec<Problem>) {
    let ddos = file
        .ddos
        .as_ref()
        .map(|d| (d.span(), super::ddos::build(d, problems)));
    let Some(x) = &file.xdp else {
        if let Some((at, _)) = ddos {
            problems.push((
                at,
                "shield.ddos: the DDoS vectors are detected in XDP; add [shield.xdp] with the interfaces to watch".into(),
            ));
        }
        return;
    };
    let mut ok = true;
    let mut interfaces = Vec::new();
    if x.get_ref().interfaces.get_ref().is_empty() {
        problems.push((
            x.get_ref().interfaces.span(),
            "shield.xdp.interfaces: name at least one interface (or remove [shield.xdp])".into(),
        ));
        ok = false;
    }
    for i in x.get_ref().interfaces.get_ref() {
        if let Some(p) = interface_name_problem(i.get_ref()) {
            problems.push((i.span(), format!("shield.xdp.interfaces: {p}")));
            ok = false;
        } else if interfaces.contains(i.get_ref()) {
            problems.push((
                i.span(),
                format!("shield.xdp.interfaces: {:?} is named twice", i.get_ref()),
            ));
            ok = false;
        } else {
            interfaces.push(i.get_ref().clone());
        }
    }
    let mode = match x
        .get_ref()
        .mode
        .as_ref()
        .map(|m| (m.get_ref().as_str(), m.span()))
    {
        None | Some(("auto", _)) => crate::shield::xdp::Mode::Auto,
        Some(("native", _)) => crate::shield::xdp::Mode::Native,
        Some(("generic", _)) => crate::shield::xdp::Mode::Generic,
        Some((other, at)) => {
            problems.push((
                at,
                format!("shield.xdp.mode: unknown mode {other:?}; use auto (native, else generic), native or generic"),
            ));
            ok = false;
            crate::shield::xdp::Mode::Auto
        }
    };
    let syn_per_source = match &x.get_ref().syn_per_source {
        None => 0,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(v) => v,
            Err(_) => {
                problems.push((
                    n.span(),
                    format!(
                        "shield.xdp.syn_per_source: {} is not 0 to {}",
                        n.get_ref(),
                        u32::MAX
                    ),
                ));
                ok = false;
                0
            }
        },
    };
    if let Err(e) = crate::shield::xdp::tables(&set.compiled()) {
        problems.push((
            x.span(),
            format!("shield.xdp: the [shield] rules do not fit XDP: {e} (remove [shield.xdp] to evaluate them at accept only)"),
        ));
        ok = false;
    }
    if ok {
        set.set_xdp(crate::shield::xdp::Spec {
            interfaces,
            mode,
            syn_per_source,
            syn_cookies: x.get_ref().syn_cookies.unwrap_or(false),
            ddos: ddos.map(|(_, spec)| spec),
        });
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclRule {
    pub name: Option<String>,
    #[serde(default)]
    pub src: Vec<Spanned<String>>,
    #[serde(default)]
    pub dst: Vec<Spanned<String>>,
    #[serde(default)]
    pub proto: Vec<Spanned<toml::Value>>,
    #[serde(default)]
    pub src_port: Vec<Spanned<toml::Value>>,
    #[serde(default)]
    pub dst_port: Vec<Spanned<toml::Value>>,
    /// Comma-separated flags, `!` for "not set": "syn,!ack".
    pub tcp_flags: Option<Spanned<String>>,
    pub action: Spanned<String>,
}

fn action(s: &Spanned<String>, problems: &mut Vec<Problem>) -> Action {
    match s.get_ref().as_str() {
        "allow" => Action::Allow,
        "drop" => Action::Drop,
        "reject" => Action::Reject,
        "count" => Action::Count,
        "log" => Action::Log,
        other => {
            problems.push((
                s.span(),
                format!("unknown action {other:?}; use allow, drop, reject, count or log"),
            ));
            Action::Allow
        }
    }
}

fn proto(v: &Spanned<toml::Value>, problems: &mut Vec<Problem>) -> Option<u8> {
    let p = match v.get_ref() {
        toml::Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(acl::TCP),
            "udp" => Some(acl::UDP),
            "icmp" => Some(acl::ICMP),
            "icmpv6" | "ipv6-icmp" => Some(acl::ICMPV6),
            _ => None,
        },
        toml::Value::Integer(n) => u8::try_from(*n).ok(),
        _ => None,
    };
    if p.is_none() {
        problems.push((
            v.span(),
            "proto: tcp, udp, icmp, icmpv6 or an IP protocol number 0-255".to_string(),
        ));
    }
    p
}

fn port_range(v: &Spanned<toml::Value>, problems: &mut Vec<Problem>) -> Option<(u16, u16)> {
    let parse = |s: &str| s.trim().parse::<u16>().ok();
    let r = match v.get_ref() {
        toml::Value::Integer(n) => u16::try_from(*n).ok().map(|p| (p, p)),
        toml::Value::String(s) => match s.split_once('-') {
            Some((a, b)) => parse(a).zip(parse(b)).filter(|(a, b)| a <= b),
            None => parse(s).map(|p| (p, p)),
        },
        _ => None,
    };
    if r.is_none() {
        problems.push((
            v.span(),
            "a port is 0-65535, or a range \"LOW-HIGH\" with LOW <= HIGH".to_string(),
        ));
    }
    r
}

fn tcp_flags(s: &Spanned<String>, problems: &mut Vec<Problem>) -> Option<(u8, u8)> {
    let (mut mask, mut value) = (0u8, 0u8);
    for f in s.get_ref().split(',') {
        let f = f.trim().to_ascii_lowercase();
        let (not, name) = match f.strip_prefix('!') {
            Some(n) => (true, n.to_string()),
            None => (false, f),
        };
        let bit = match name.as_str() {
            "fin" => 0x01,
            "syn" => 0x02,
            "rst" => 0x04,
            "psh" => 0x08,
            "ack" => 0x10,
            "urg" => 0x20,
            "ece" => 0x40,
            "cwr" => 0x80,
            _ => {
                problems.push((
                    s.span(),
                    format!("tcp_flags: unknown flag {name:?}; flags are fin, syn, rst, psh, ack, urg, ece, cwr (! for not set)"),
                ));
                return None;
            }
        };
        mask |= bit;
        if !not {
            value |= bit;
        }
    }
    Some((mask, value))
}

/// An address entry: a CIDR, or `@list`.
enum Addr {
    Net(Cidr),
    List(String),
}

fn addr(
    s: &Spanned<String>,
    lists: &BTreeMap<String, Vec<Spanned<Cidr>>>,
    problems: &mut Vec<Problem>,
) -> Option<Addr> {
    if let Some(name) = s.get_ref().strip_prefix('@') {
        if !lists.contains_key(name) {
            let known: Vec<&str> = lists.keys().map(|k| k.as_str()).collect();
            problems.push((
                s.span(),
                format!(
                    "no address list {name:?}; lists: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
            return None;
        }
        return Some(Addr::List(name.to_string()));
    }
    match Cidr::parse(s.get_ref()) {
        Ok(c) => Some(Addr::Net(c)),
        Err(e) => {
            problems.push((s.span(), e));
            None
        }
    }
}

/// Validates rules (with `what` naming where they are) into a spec.
pub fn build(
    what: &str,
    rules: &[AclRule],
    default: Option<&Spanned<String>>,
    lists: &BTreeMap<String, Vec<Spanned<Cidr>>>,
    problems: &mut Vec<Problem>,
) -> AclSet {
    let mut local = Vec::new();
    let mut default_action = Action::Allow;
    if let Some(d) = default {
        default_action = action(d, &mut local);
        if !default_action.decides() {
            local.push((
                d.span(),
                "default must be allow, drop or reject".to_string(),
            ));
        }
    }
    let default = default_action;
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let mut rule = Rule {
            name: r.name.clone().unwrap_or_else(|| format!("#{}", i + 1)),
            action: Some(action(&r.action, &mut local)),
            ..Default::default()
        };
        let mut src_lists = Vec::new();
        let mut dst_lists = Vec::new();
        for s in &r.src {
            match addr(s, lists, &mut local) {
                Some(Addr::Net(c)) => rule.src.push(c),
                Some(Addr::List(l)) => src_lists.push(l),
                None => {}
            }
        }
        for s in &r.dst {
            match addr(s, lists, &mut local) {
                Some(Addr::Net(c)) => rule.dst.push(c),
                Some(Addr::List(l)) => dst_lists.push(l),
                None => {}
            }
        }
        rule.proto = r
            .proto
            .iter()
            .filter_map(|p| proto(p, &mut local))
            .collect();
        rule.src_ports = r
            .src_port
            .iter()
            .filter_map(|p| port_range(p, &mut local))
            .collect();
        rule.dst_ports = r
            .dst_port
            .iter()
            .filter_map(|p| port_range(p, &mut local))
            .collect();
        rule.tcp_flags = r.tcp_flags.as_ref().and_then(|f| tcp_flags(f, &mut local));
        out.push((rule, src_lists, dst_lists));
    }
    for (at, msg) in local {
        problems.push((at, format!("{what}: {msg}")));
    }
    let lists = lists
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().map(|c| *c.get_ref()).collect()))
        .collect();
    AclSet::new(out, lists, default)
}

/// The body of `PUT /api/v1/shield/rules`: the global rules as the file
/// writes them, `[[acl]]` tables with the keys of `[[shield.acl]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesText {
    #[serde(default)]
    acl: Vec<AclRule>,
}

/// Rules sent as JSON (`{"acl": [{...}, ...]}`, the keys of the file):
/// turned into the file's TOML and validated as it is; a problem names
/// its rule ("acl[2]: ...") since the JSON has no lines to point at.
pub fn rules_from_json(
    v: &serde_json::Value,
    lists: &[String],
) -> Result<Vec<crate::shield::ListedRule>, Vec<String>> {
    let table = toml::Value::try_from(v).map_err(|e| vec![format!("the rules: {e}")])?;
    let text = toml::to_string(&table).map_err(|e| vec![format!("the rules: {e}")])?;
    rules_from_text(&text, lists).map_err(|problems| {
        problems
            .into_iter()
            .map(|p| {
                // "body:LINE:COL: message" of the generated text: say which
                // rule instead.
                let mut parts = p.splitn(4, ':');
                let (_, line, _, msg) = (parts.next(), parts.next(), parts.next(), parts.next());
                let line: usize = line.and_then(|l| l.parse().ok()).unwrap_or(0);
                let rule = text
                    .lines()
                    .take(line)
                    .filter(|l| l.trim() == "[[acl]]")
                    .count();
                match (rule, msg) {
                    (0, Some(m)) => m.trim().to_string(),
                    (n, Some(m)) => format!("acl[{}]: {}", n - 1, m.trim()),
                    (_, None) => p,
                }
            })
            .collect()
    })
}

/// Parses and validates rules sent through the admin API, against the
/// address lists `lists` names; every problem as "body:line:col: ...".
pub fn rules_from_text(
    text: &str,
    lists: &[String],
) -> Result<Vec<crate::shield::ListedRule>, Vec<String>> {
    let pos = super::Positions::new("body", text);
    let file: RulesText = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        vec![pos.error(at, e.message().to_string()).to_string()]
    })?;
    let names: BTreeMap<String, Vec<Spanned<Cidr>>> =
        lists.iter().map(|l| (l.clone(), Vec::new())).collect();
    let mut problems = Vec::new();
    let set = build("acl", &file.acl, None, &names, &mut problems);
    if !problems.is_empty() {
        problems.sort_by_key(|(at, _)| at.start);
        return Err(problems
            .into_iter()
            .map(|(at, m)| pos.error(at.start, m).to_string())
            .collect());
    }
    Ok(set.rules())
}
