//! `[[waf.ruleset]]` and `[vserver.waf]` as written (docs/waf.md), and
//! their validation: rule sets are loaded and compiled here, so `check`
//! reports a SecLang error with its file and line, and a reload with a
//! broken rule file keeps the running configuration.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use switchyard_waf::policy::{self, Audit, AuditLog, Mode, Sources, VsWaf, WafCounters};
use switchyard_waf::seclang::LimitAction;
use toml::Spanned;

use super::types::Problem;

/// `[waf]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct WafFile {
    #[serde(default)]
    pub ruleset: Vec<RulesetFile>,
}

/// `[[waf.ruleset]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesetFile {
    pub name: Spanned<String>,
    /// A CRS folder: its setup file, then `rules/*.conf`.
    pub crs: Option<Spanned<String>>,
    /// SecLang files in order (after the CRS's, when both are given).
    #[serde(default)]
    pub files: Vec<Spanned<String>>,
}

/// `[vserver.waf]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VsWafFile {
    pub ruleset: Spanned<String>,
    pub mode: Option<Spanned<String>>,
    pub paranoia: Option<Spanned<u8>>,
    pub detection_paranoia: Option<Spanned<u8>>,
    pub inbound_threshold: Option<Spanned<u32>>,
    pub outbound_threshold: Option<Spanned<u32>>,
    #[serde(default)]
    pub tx: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub before: Vec<Spanned<String>>,
    #[serde(default)]
    pub after: Vec<Spanned<String>>,
    pub sample_percent: Option<Spanned<f64>>,
    pub status: Option<Spanned<u16>>,
    pub request_body: Option<bool>,
    pub response_body: Option<bool>,
    pub body_limit: Option<Spanned<u64>>,
    pub body_limit_action: Option<Spanned<String>>,
    pub response_body_limit: Option<Spanned<u64>>,
    pub audit_log: Option<AuditLogFile>,
    /// Load the engine rules of ModSecurity's recommended configuration
    /// (the JSON and XML body processors, body-error refusals) before the
    /// rule set, unless it sets them itself (default true).
    pub recommended_rules: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditLogFile {
    /// As an access log's `to`: "stdout", "stderr", "file:PATH", "syslog:...".
    pub to: Spanned<String>,
    /// "relevant" (default) or "all".
    pub audit: Option<Spanned<String>>,
}

/// A rule set's files, resolved: (setup files, rule files). A vserver's
/// `before` files go between them.
pub struct Ruleset {
    setup: Vec<PathBuf>,
    rules: Vec<PathBuf>,
    span: Range<usize>,
}

fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Resolves `[[waf.ruleset]]` entries (files must exist; globs expanded).
pub fn rulesets(w: &WafFile, base: &Path, problems: &mut Vec<Problem>) -> HashMap<String, Ruleset> {
    let mut out: HashMap<String, Ruleset> = HashMap::new();
    for r in &w.ruleset {
        let name = r.name.get_ref();
        let what = format!("waf ruleset {name:?}");
        if out.contains_key(name) {
            problems.push((r.name.span(), format!("{what} is defined twice")));
            continue;
        }
        let mut setup = Vec::new();
        let mut rules = Vec::new();
        if let Some(c) = &r.crs {
            let dir = resolve(base, c.get_ref());
            let s = ["crs-setup.conf", "crs-setup.conf.example"]
                .iter()
                .map(|n| dir.join(n))
                .find(|p| p.is_file());
            match s {
                Some(s) => setup.push(s),
                None => problems.push((
                    c.span(),
                    format!(
                        "{what}: {} has no crs-setup.conf (nor crs-setup.conf.example)",
                        dir.display()
                    ),
                )),
            }
            match policy::expand_glob(&dir.join("rules").join("*.conf")) {
                Ok(f) => rules.extend(f),
                Err(e) => problems.push((c.span(), format!("{what}: crs: {e}"))),
            }
        }
        for f in &r.files {
            match policy::expand_glob(&resolve(base, f.get_ref())) {
                Ok(list) => {
                    for p in list {
                        if p.is_file() {
                            rules.push(p);
                        } else {
                            problems.push((
                                f.span(),
                                format!("{what}: {} is not a readable file", p.display()),
                            ));
                        }
                    }
                }
                Err(e) => problems.push((f.span(), format!("{what}: {e}"))),
            }
        }
        if r.crs.is_none() && r.files.is_empty() {
            problems.push((
                r.name.span(),
                format!("{what}: give crs = \"DIR\" or files = [...]"),
            ));
        }
        out.insert(
            name.clone(),
            Ruleset {
                setup,
                rules,
                span: r.name.span(),
            },
        );
    }
    out
}

/// Validates `[vserver.waf]` and compiles (or reuses) its rule set.
pub fn build(
    w: &VsWafFile,
    rulesets: &HashMap<String, Ruleset>,
    base: &Path,
    what: &str,
    old: Option<&VsWaf>,
    problems: &mut Vec<Problem>,
) -> Option<VsWaf> {
    let before = problems.len();
    let name = w.ruleset.get_ref();
    let Some(rs) = rulesets.get(name) else {
        let mut known: Vec<&str> = rulesets.keys().map(String::as_str).collect();
        known.sort();
        problems.push((
            w.ruleset.span(),
            format!(
                "{what}: waf ruleset {name:?} is not defined; defined: {}",
                if known.is_empty() {
                    "none (add a [[waf.ruleset]])".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ));
        return None;
    };
    let mode = match w.mode.as_ref().map(|m| m.get_ref().as_str()) {
        None | Some("block") => Mode::Block,
        Some("detect") => Mode::Detect,
        Some("off") => Mode::Off,
        Some(other) => {
            problems.push((
                w.mode.as_ref().map_or(0..0, |m| m.span()),
                format!("{what}: waf.mode {other:?} is not one of off, detect, block"),
            ));
            Mode::Block
        }
    };
    let level = |v: &Option<Spanned<u8>>, key: &str, problems: &mut Vec<Problem>| {
        v.as_ref().and_then(|p| {
            if (1..=4).contains(p.get_ref()) {
                Some(*p.get_ref())
            } else {
                problems.push((
                    p.span(),
                    format!("{what}: waf.{key} {} is out of range 1 to 4", p.get_ref()),
                ));
                None
            }
        })
    };
    let paranoia = level(&w.paranoia, "paranoia", problems);
    let detection = level(&w.detection_paranoia, "detection_paranoia", problems);
    if let (Some(p), Some(d)) = (paranoia, detection) {
        if d < p {
            problems.push((
                w.detection_paranoia.as_ref().map_or(0..0, |s| s.span()),
                format!("{what}: waf.detection_paranoia {d} is below paranoia {p}; detection runs at least the blocking level's rules"),
            ));
        }
    }
    let mut extra = HashMap::new();
    for (k, v) in &w.tx {
        if k.is_empty()
            || !k
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            problems.push((
                v.span(),
                format!(
                    "{what}: waf.tx key {k:?} is not a TX variable name (letters, digits, _ and .)"
                ),
            ));
        }
        extra.insert(k.clone(), v.get_ref().clone());
    }
    let tx = policy::tx_presets(
        paranoia,
        detection,
        w.inbound_threshold.as_ref().map(|v| *v.get_ref()),
        w.outbound_threshold.as_ref().map(|v| *v.get_ref()),
        &extra,
    );
    let sample_percent = match &w.sample_percent {
        None => 100.0,
        Some(s) if (0.0..=100.0).contains(s.get_ref()) => *s.get_ref(),
        Some(s) => {
            problems.push((
                s.span(),
                format!(
                    "{what}: waf.sample_percent {} is out of range 0 to 100",
                    s.get_ref()
                ),
            ));
            100.0
        }
    };
    let status = match &w.status {
        None => 403,
        Some(s) if (400..=599).contains(s.get_ref()) => *s.get_ref(),
        Some(s) => {
            problems.push((
                s.span(),
                format!(
                    "{what}: waf.status {} is not an error status (400 to 599)",
                    s.get_ref()
                ),
            ));
            403
        }
    };
    let body_limit_action = match w.body_limit_action.as_ref().map(|a| a.get_ref().as_str()) {
        None | Some("reject") => LimitAction::Reject,
        Some("partial") => LimitAction::ProcessPartial,
        Some(other) => {
            problems.push((
                w.body_limit_action.as_ref().map_or(0..0, |a| a.span()),
                format!("{what}: waf.body_limit_action {other:?} is not \"reject\" or \"partial\""),
            ));
            LimitAction::Reject
        }
    };
    let positive =
        |v: &Option<Spanned<u64>>, key: &str, dflt: u64, problems: &mut Vec<Problem>| match v {
            None => dflt,
            Some(n) if *n.get_ref() > 0 && *n.get_ref() <= 1 << 30 => *n.get_ref(),
            Some(n) => {
                problems.push((
                    n.span(),
                    format!(
                        "{what}: waf.{key} {} is out of range 1 to 1073741824 bytes",
                        n.get_ref()
                    ),
                ));
                dflt
            }
        };
    let body_limit = positive(&w.body_limit, "body_limit", 1 << 20, problems);
    let response_body_limit = positive(
        &w.response_body_limit,
        "response_body_limit",
        512 << 10,
        problems,
    );
    let audit_log = w.audit_log.as_ref().and_then(|a| {
        let audit = match a.audit.as_ref().map(|s| s.get_ref().as_str()) {
            None | Some("relevant") => Audit::Relevant,
            Some("all") => Audit::All,
            Some(other) => {
                problems.push((
                    a.audit.as_ref().map_or(0..0, |s| s.span()),
                    format!("{what}: waf.audit_log.audit {other:?} is not \"relevant\" or \"all\""),
                ));
                Audit::Relevant
            }
        };
        match crate::accesslog::target(a.to.get_ref(), base) {
            Ok(t) => Some(AuditLog {
                sink: crate::accesslog::writer::sink(t),
                audit,
            }),
            Err(msg) => {
                problems.push((a.to.span(), format!("{what}: waf.audit_log: {msg}")));
                None
            }
        }
    });
    let mut files = rs.setup.clone();
    for f in &w.before {
        match policy::expand_glob(&resolve(base, f.get_ref())) {
            Ok(l) => files.extend(l),
            Err(e) => problems.push((f.span(), format!("{what}: waf.before: {e}"))),
        }
    }
    files.extend(rs.rules.iter().cloned());
    for f in &w.after {
        match policy::expand_glob(&resolve(base, f.get_ref())) {
            Ok(l) => files.extend(l),
            Err(e) => problems.push((f.span(), format!("{what}: waf.after: {e}"))),
        }
    }
    if problems.len() > before {
        return None;
    }
    let sources = Sources {
        files,
        recommended: w.recommended_rules.unwrap_or(true),
    };
    let engine = match policy::engine(&sources) {
        Ok(e) => e,
        Err(e) => {
            problems.push((
                rs.span.clone(),
                format!("{what}: waf ruleset {name:?}: {e}"),
            ));
            return None;
        }
    };
    Some(VsWaf {
        ruleset: name.clone(),
        engine,
        mode,
        tx,
        sample_below: if sample_percent >= 100.0 {
            u64::MAX
        } else {
            (sample_percent / 100.0 * u64::MAX as f64) as u64
        },
        sample_percent,
        status,
        request_body: w.request_body.unwrap_or(true),
        response_body: w.response_body.unwrap_or(false),
        body_limit,
        body_limit_action,
        response_body_limit,
        audit_log,
        counters: old
            .map(|o| o.counters.clone())
            .unwrap_or_else(|| Arc::new(WafCounters::default())),
    })
}
