//! A vserver's WAF: the shared compiled rule set it runs, and its own
//! settings over it (mode, paranoia, thresholds, sampling, body limits,
//! the audit log) and counters.
//!
//! Compiled rule sets are shared: every vserver (and every configuration a
//! reload builds) naming the same files with the same contents gets the
//! same `Arc<Engine>`, so a reload that changes a paranoia level does not
//! compile the CRS again, and two vservers on the CRS hold it once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use switchyard_fasthash::FxHashMap;

use super::engine::{Engine, Settings};
use super::seclang::{EngineMode, LimitAction, Loader};

/// What the WAF does with a request it inspects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// Rules run and log; nothing is blocked.
    Detect,
    Block,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Detect => "detect",
            Mode::Block => "block",
        }
    }

    pub fn engine_mode(self) -> EngineMode {
        match self {
            Mode::Off => EngineMode::Off,
            Mode::Detect => EngineMode::DetectionOnly,
            Mode::Block => EngineMode::On,
        }
    }
}

/// Which requests reach the audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audit {
    /// Requests a rule logged (ModSecurity's `RelevantOnly`).
    Relevant,
    All,
}

/// Where a vserver's audit lines go. The WAF keeps the sink with the
/// vserver's settings and never writes to it: the proxy renders each line
/// and queues it on its access-log writer, which implements this (the WAF
/// knows nothing of log files, syslog or the writer thread).
pub trait AuditSink: std::fmt::Debug + Send + Sync {
    /// Queues one line at `time_us`: `render` writes it, newline included.
    fn push(&self, time_us: u64, render: &mut dyn FnMut(&mut Vec<u8>));
}

/// The audit log of a vserver's WAF.
#[derive(Debug)]
pub struct AuditLog {
    pub sink: Arc<dyn AuditSink>,
    pub audit: Audit,
}

/// One vserver's WAF.
#[derive(Debug)]
pub struct VsWaf {
    pub ruleset: String,
    pub engine: Arc<Engine>,
    pub mode: Mode,
    /// TX variables set before phase 1 (paranoia levels, thresholds, the
    /// operator's `tx` table), lower-case keys.
    pub tx: Vec<(Vec<u8>, Vec<u8>)>,
    /// Requests inspected per 2^32: a request is inspected when its hash
    /// falls below this (u64::MAX: all).
    pub sample_below: u64,
    pub sample_percent: f64,
    /// The status of a blocked request when the rule gives none.
    pub status: u16,
    pub request_body: bool,
    pub response_body: bool,
    /// Request body bytes buffered and inspected.
    pub body_limit: u64,
    pub body_limit_action: LimitAction,
    /// Response body bytes kept for phase 4.
    pub response_body_limit: u64,
    pub audit_log: Option<AuditLog>,
    pub counters: Arc<WafCounters>,
}

/// A vserver's WAF counters (they survive reloads).
#[derive(Debug, Default)]
pub struct WafCounters {
    pub inspected: AtomicU64,
    /// Not inspected (`sample_percent` below 100).
    pub sampled_out: AtomicU64,
    pub blocked: AtomicU64,
    /// A blocking rule matched in detection-only mode.
    pub detected: AtomicU64,
    /// Bodies over the limit refused with 413.
    pub body_rejected: AtomicU64,
    /// Transactions that reached the regex work bound.
    pub limits_exceeded: AtomicU64,
    /// Matches per rule id (only rules that matched: attacks are rare, so
    /// one lock taken per matching request costs nothing on benign traffic).
    pub rules: Mutex<FxHashMap<u64, u64>>,
}

impl WafCounters {
    pub fn count_rule(&self, id: u64) {
        let mut m = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(id).or_insert(0) += 1;
    }

    /// Matches per rule id, most matched first.
    pub fn rules_sorted(&self) -> Vec<(u64, u64)> {
        let m = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(u64, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// The files of one compiled rule set, in load order, and whether the
/// engine rules of ModSecurity's recommended configuration go first
/// ([`RECOMMENDED_RULES`], unless the files set the body processors
/// themselves).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sources {
    pub files: Vec<PathBuf>,
    pub recommended: bool,
}

/// The rules ModSecurity's `modsecurity.conf-recommended` (v3) puts before
/// the CRS: the XML and JSON request body processors by Content-Type, and
/// the refusals of bodies the processors could not parse and of multipart
/// bodies that fail strict validation or hold a possible unmatched
/// boundary. Without them a JSON or XML body is inspected only as one raw
/// string (no ARGS), and the CRS misses most attacks in it. Loaded before
/// every rule set whose files do not turn on a body processor themselves
/// (`sets_body_processors`), unless the vserver says
/// `recommended_rules = false`; `switchyard waf test` runs the CRS
/// regression suite through the same default.
pub const RECOMMENDED_RULES: &str = r#"# Switchyard: modsecurity.conf-recommended's engine rules (docs/waf.md).
SecRule REQUEST_HEADERS:Content-Type "^(?:application(?:/soap\+|/)|text/)xml" "id:200000,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=XML"
SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule REQUEST_HEADERS:Content-Type "^application/[a-z0-9.-]+[+]json" "id:200006,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule REQBODY_ERROR "!@eq 0" "id:200002,phase:2,t:none,log,deny,status:400,msg:'Failed to parse request body.',logdata:'%{reqbody_error_msg}',severity:2"
SecRule MULTIPART_STRICT_ERROR "!@eq 0" "id:200003,phase:2,t:none,log,deny,status:400,msg:'Multipart request body failed strict validation.'"
SecRule MULTIPART_UNMATCHED_BOUNDARY "@eq 1" "id:200004,phase:2,t:none,log,deny,msg:'Multipart parser detected a possible unmatched boundary.'"
"#;

/// The name the recommended rules carry in errors and audit lines.
const RECOMMENDED_NAME: &str = "<switchyard: modsecurity.conf-recommended>";

/// Whether SecLang files turn on the JSON or XML body processor
/// themselves, or define one of the recommended rules' ids (200000 to
/// 200006): a rule set that carries its own modsecurity.conf must not get
/// a second copy (its ids would clash, its choices be overridden). Reads
/// each file's directives (comments and continuations as the loader reads
/// them), not the files they `Include`.
pub fn sets_body_processors(files: &[PathBuf]) -> Result<bool, String> {
    use super::seclang::{logical_lines, parse_actions, split_args, Action, BodyProcessor, Ctl};
    for p in files {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
        for (_, line) in logical_lines(&text) {
            let Ok(args) = split_args(&line) else {
                continue;
            };
            let is_rule = args.first().is_some_and(|d| {
                d.eq_ignore_ascii_case("SecRule") || d.eq_ignore_ascii_case("SecAction")
            });
            let Some(actions) = args.last().filter(|_| is_rule && args.len() >= 2) else {
                continue;
            };
            // A line the loader would refuse is reported by the loader.
            let Ok(actions) = parse_actions(actions) else {
                continue;
            };
            let own = actions.iter().any(|a| match a {
                Action::Id(id) => (200_000..=200_006).contains(id),
                Action::Ctl(Ctl::RequestBodyProcessor(p)) => {
                    matches!(p, BodyProcessor::Json | BodyProcessor::Xml)
                }
                _ => false,
            });
            if own {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

struct Compiled {
    sources: Sources,
    /// The files' contents when compiled: a file edited since is compiled again.
    fingerprint: u64,
    engine: Weak<Engine>,
}

/// Rule sets compiled and still held by a configuration.
static COMPILED: Mutex<Vec<Compiled>> = Mutex::new(Vec::new());

/// The compiled rule set of `sources`: the one a configuration holds
/// already when the files are unchanged, else compiled now. The error names
/// the file and line.
pub fn engine(sources: &Sources) -> Result<Arc<Engine>, String> {
    let fingerprint = fingerprint(sources)?;
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    compiled.retain(|c| c.engine.strong_count() > 0);
    for c in compiled.iter() {
        if c.sources == *sources && c.fingerprint == fingerprint {
            if let Some(e) = c.engine.upgrade() {
                return Ok(e);
            }
        }
    }
    let mut loader = Loader::new();
    if sources.recommended && !sets_body_processors(&sources.files)? {
        loader
            .load_str(RECOMMENDED_RULES, RECOMMENDED_NAME, None)
            .map_err(|e| e.to_string())?;
    }
    for p in &sources.files {
        loader.load_path(p).map_err(|e| e.to_string())?;
    }
    let set = loader.finish().map_err(|e| e.to_string())?;
    let engine = Arc::new(Engine::new(set, Settings::default()).map_err(|e| e.to_string())?);
    compiled.push(Compiled {
        sources: sources.clone(),
        fingerprint,
        engine: Arc::downgrade(&engine),
    });
    Ok(engine)
}

/// A hash of the files' contents (and of the data files next to them, which
/// `@pmFromFile` reads).
fn fingerprint(sources: &Sources) -> Result<u64, String> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in &sources.files {
        let text = std::fs::read(p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
        text.hash(&mut h);
        if let Some(d) = p.parent() {
            if !dirs.iter().any(|x| x == d) {
                dirs.push(d.to_path_buf());
            }
        }
    }
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut data: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "data"))
            .collect();
        data.sort();
        for p in data {
            p.hash(&mut h);
            if let Ok(t) = std::fs::read(&p) {
                t.hash(&mut h);
            }
        }
    }
    Ok(h.finish())
}

/// Expands `dir/*.conf`-style globs (a `*` in the file name part only) in
/// name order; other paths are kept as they are.
pub fn expand_glob(path: &std::path::Path) -> Result<Vec<PathBuf>, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains('*') {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let (prefix, suffix) = name.split_once('*').unwrap_or((&name, ""));
    if suffix.contains('*') {
        return Err(format!(
            "{}: one `*` per file name is supported",
            path.display()
        ));
    }
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().map(|n| n.to_string_lossy()).is_some_and(|n| {
                n.starts_with(prefix)
                    && n.ends_with(suffix)
                    && n.len() >= prefix.len() + suffix.len()
            })
        })
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(format!("{}: matches no file", path.display()));
    }
    Ok(out)
}

/// Per-vserver TX presets from the settings an operator writes.
pub fn tx_presets(
    paranoia: Option<u8>,
    detection_paranoia: Option<u8>,
    inbound: Option<u32>,
    outbound: Option<u32>,
    extra: &HashMap<String, String>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut tx: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut put = |k: &str, v: String| {
        let k = k.to_ascii_lowercase().into_bytes();
        tx.retain(|(x, _)| *x != k);
        tx.push((k, v.into_bytes()));
    };
    if let Some(p) = paranoia {
        put("blocking_paranoia_level", p.to_string());
        put(
            "detection_paranoia_level",
            detection_paranoia.unwrap_or(p).max(p).to_string(),
        );
    } else if let Some(d) = detection_paranoia {
        put("detection_paranoia_level", d.to_string());
    }
    if let Some(n) = inbound {
        put("inbound_anomaly_score_threshold", n.to_string());
    }
    if let Some(n) = outbound {
        put("outbound_anomaly_score_threshold", n.to_string());
    }
    let mut keys: Vec<&String> = extra.keys().collect();
    keys.sort();
    for k in keys {
        put(k, extra[k].clone());
    }
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_follow_the_paranoia_level() {
        let tx = tx_presets(Some(3), None, Some(10), None, &HashMap::new());
        let get = |k: &str| {
            tx.iter()
                .find(|(x, _)| x == k.as_bytes())
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(get("blocking_paranoia_level").as_deref(), Some("3"));
        // Detection never below blocking (as the CRS requires).
        assert_eq!(get("detection_paranoia_level").as_deref(), Some("3"));
        assert_eq!(
            get("inbound_anomaly_score_threshold").as_deref(),
            Some("10")
        );
        let mut extra = HashMap::new();
        extra.insert("Arg_Length".to_string(), "400".to_string());
        let tx = tx_presets(Some(1), Some(2), None, None, &extra);
        assert!(tx.iter().any(|(k, v)| k == b"arg_length" && v == b"400"));
        assert!(tx
            .iter()
            .any(|(k, v)| k == b"detection_paranoia_level" && v == b"2"));
    }

    #[test]
    fn globs_expand_in_name_order_and_report_no_match() {
        let dir = std::env::temp_dir().join(format!("sy-waf-glob-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in ["b.conf", "a.conf", "c.data"] {
            std::fs::write(dir.join(n), "").unwrap();
        }
        let got = expand_glob(&dir.join("*.conf")).unwrap();
        let names: Vec<String> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.conf", "b.conf"]);
        assert!(expand_glob(&dir.join("*.nothing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unchanged_rule_set_is_compiled_once() {
        let dir = std::env::temp_dir().join(format!("sy-waf-share-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("r.conf");
        std::fs::write(&f, "SecRule ARGS \"@rx evil\" \"id:1,phase:1,deny,log\"\n").unwrap();
        let s = Sources {
            files: vec![f.clone()],
            recommended: true,
        };
        let a = engine(&s).unwrap();
        let b = engine(&s).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        std::fs::write(&f, "SecRule ARGS \"@rx worse\" \"id:1,phase:1,deny,log\"\n").unwrap();
        let c = engine(&s).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        std::fs::write(&f, "SecRule ARGS \"@rx (\" \"id:1,phase:1,deny,log\"\n").unwrap();
        let e = engine(&s).unwrap_err();
        assert!(e.contains("r.conf") && e.contains(":1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rule_set_that_sets_its_body_processors_gets_no_second_copy() {
        let dir = std::env::temp_dir().join(format!("sy-waf-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let case = |name: &str, text: &str| {
            let f = dir.join(name);
            std::fs::write(&f, text).unwrap();
            sets_body_processors(&[f]).unwrap()
        };
        // Commented out (as crs-setup.conf.example has it), or URLENCODED
        // only (as the CRS's 901340): not its own.
        assert!(!case(
            "a.conf",
            "#SecRule REQUEST_HEADERS:Content-Type \"^application/json\" \\\n#  \"id:1,phase:1,pass,ctl:requestBodyProcessor=JSON\"\n\
             SecRule TX:x \"@eq 1\" \"id:901340,phase:1,pass,ctl:requestBodyProcessor=URLENCODED\"\n"
        ));
        assert!(case(
            "b.conf",
            "SecRule REQUEST_HEADERS:Content-Type \"xml\" \\\n  \"id:7,phase:1,pass,ctl:requestBodyProcessor=XML\"\n"
        ));
        assert!(case(
            "c.conf",
            "SecRule REQBODY_ERROR \"!@eq 0\" \"id:200002,phase:2,deny\"\n"
        ));
        // The recommended rules load before the files, once: a rule set
        // with its own copy compiles (no clash of ids), one without gets
        // them.
        let own = dir.join("own.conf");
        std::fs::write(&own, RECOMMENDED_RULES).unwrap();
        let e = engine(&Sources {
            files: vec![own],
            recommended: true,
        });
        assert!(e.is_ok(), "{:?}", e.err());
        assert!(
            RECOMMENDED_RULES
                .lines()
                .filter(|l| l.contains("id:2000"))
                .count()
                == 6
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
