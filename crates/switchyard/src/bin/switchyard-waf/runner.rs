//! Runs stages through a real Switchyard: each instance is the switchyard
//! binary under test (`run -c`) with one worker, the CRS and the test setup,
//! in front of the in-process albedo origin; its audit log says which rules
//! matched.
//!
//! Bracketing: before a stage the log has been read up to a marker line
//! (a `GET` carrying `X-CRS-Test: <unique id>`, logged by rule 999999);
//! after the stage's response another marker is sent and the log is read
//! up to its line. The stage's lines are the ones in between whose
//! `client` port is the stage connection's own, so a line logged late for
//! an earlier request (go-ftw's phase-5 race) is never counted for the
//! wrong stage.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::auditlog::{Entry, LogTail};
use super::client::{exchange, Exchange, Response};
use super::model::{Output, Stage};
use super::request;

/// Audit lines that fell in a stage's bracket but came from another
/// connection (see the module doc).
pub static STRAY_LINES: AtomicU64 = AtomicU64::new(0);

/// The test setup rule that logs markers.
pub const MARKER_RULE: u64 = 999_999;
pub const MARKER_HEADER: &str = "X-CRS-Test";

/// Settings of a run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The binary under test.
    pub switchyard: PathBuf,
    pub crs: PathBuf,
    pub paranoia: u8,
    /// A stage's response deadline.
    pub timeout: Duration,
    /// How long to wait for a marker's audit line.
    pub marker_wait: Duration,
}

/// Kills the switchyard child when dropped (normal end, error or panic).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Removes the instance's temporary folder when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The SecLang test setup (what CRS's own test setup adds to
/// crs-setup.conf, docs in tests/README.md) and the marker rule. The body
/// processors and body-error rules of ModSecurity's recommended
/// configuration are not here: the vserver loads them by default
/// (`policy::RECOMMENDED_RULES`), so the suite runs what operators run.
pub fn setup_rules(paranoia: u8) -> String {
    format!(
        r#"# switchyard waf test: the CRS regression test setup.
SecAction "id:900005,phase:1,nolog,pass,t:none,setvar:tx.blocking_paranoia_level={paranoia},setvar:tx.crs_validate_utf8_encoding=1,setvar:tx.arg_name_length=100,setvar:tx.arg_length=400,setvar:tx.total_arg_length=64000,setvar:tx.max_num_args=255,setvar:tx.max_file_size=64100,setvar:tx.combined_file_sizes=65535"
SecRule REQUEST_HEADERS:{MARKER_HEADER} "@rx ^.*$" "id:{MARKER_RULE},phase:1,pass,log,msg:'%{{MATCHED_VAR}}'"
"#
    )
}

/// The instance's configuration. Detection-only at the CRS's default
/// anomaly thresholds, as CRS's own test setup runs ModSecurity
/// (`ctl:ruleEngine=DetectionOnly`, tests/README.md): the tests expect
/// both the origin's status for requests that match rules (so nothing may
/// block) and the blocking evaluation rules 949110 / 959100 to match at
/// the default threshold (so it may not be raised).
pub fn config_text(dir: &Path, crs: &Path, listen: SocketAddr, origin: SocketAddr) -> String {
    let p = |x: PathBuf| toml_str(&x.to_string_lossy());
    format!(
        r#"# Written by switchyard waf test.
[global]
# One worker: the audit lines come in the order the requests were handled.
workers = 1

[[waf.ruleset]]
name = "crs"
files = [{setup}, {crs_setup}, {rules}]

[[vserver]]
name = "ftw"
listen = [{listen}]
default_pool = "albedo"

[vserver.waf]
ruleset = "crs"
mode = "detect"
request_body = true
response_body = true
audit_log = {{ to = {audit}, audit = "relevant" }}

[[pool]]
name = "albedo"
[[pool.member]]
address = {origin}
"#,
        setup = p(dir.join("ftw-setup.conf")),
        crs_setup = p(crs.join("crs-setup.conf.example")),
        rules = p(crs.join("rules").join("*.conf")),
        listen = toml_str(&listen.to_string()),
        audit = toml_str(&format!(
            "file:{}",
            dir.join("audit.jsonl").to_string_lossy()
        )),
        origin = toml_str(&origin.to_string()),
    )
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

/// A marker id unique to this process, instance and moment.
fn marker_id(instance: usize) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "ftw-{:x}-{instance}-{:x}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos & 0xffff_ffff
    )
}

fn marker_request(id: &str, host: &str) -> Vec<u8> {
    format!(
        "GET /status/200 HTTP/1.1\r\nAccept: */*\r\nUser-Agent: go-ftw test agent\r\nHost: {host}\r\n\
         {MARKER_HEADER}: {id}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// One Switchyard under test.
pub struct Instance {
    index: usize,
    addr: SocketAddr,
    log: LogTail,
    settings: Settings,
    stderr_path: PathBuf,
    /// Lines read past the last marker, not yet given to a stage.
    pending: Vec<String>,
    /// The last marker's line was not seen: resynchronise first.
    lost: bool,
    // Dropped in this order: the process first, then its folder.
    child: ChildGuard,
    _dir: TempDir,
}

/// What a stage produced.
pub struct StageRun {
    /// What was sent (for --verbose).
    pub request: Vec<u8>,
    pub response: Result<Response, String>,
    pub entries: Vec<Entry>,
    /// Why the log could not be read (the end marker never came).
    pub log_problem: Option<String>,
}

impl Instance {
    pub fn start(
        index: usize,
        origin: SocketAddr,
        settings: &Settings,
    ) -> Result<Instance, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "switchyard-ftw-{}-{index}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let dir = TempDir(dir);
        let crs = settings
            .crs
            .canonicalize()
            .map_err(|e| format!("CRS folder {}: {e}", settings.crs.display()))?;
        let addr: SocketAddr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let write = |name: &str, text: String| {
            std::fs::write(dir.0.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("ftw-setup.conf", setup_rules(settings.paranoia))?;
        let config = dir.0.join("switchyard.toml");
        write("switchyard.toml", config_text(&dir.0, &crs, addr, origin))?;
        let stderr_path = dir.0.join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| format!("stderr.log: {e}"))?;
        let mut cmd = Command::new(&settings.switchyard);
        cmd.arg("run")
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", settings.switchyard.display()))?;
        let mut inst = Instance {
            index,
            addr,
            log: LogTail::new(dir.0.join("audit.jsonl")),
            settings: settings.clone(),
            stderr_path,
            pending: Vec::new(),
            lost: true,
            child: ChildGuard(child),
            _dir: dir,
        };
        inst.wait_ready()?;
        Ok(inst)
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Until the listener answers and the audit log shows a marker (the
    /// CRS takes a while to load in a debug build).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = self.child.0.try_wait() {
                return Err(format!(
                    "switchyard exited ({status}) at start:\n{}",
                    self.stderr_tail()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "switchyard did not answer on {} within 120 s:\n{}",
                    self.addr,
                    self.stderr_tail()
                ));
            }
            let probe = exchange(
                self.addr,
                &marker_request("probe", "localhost"),
                Duration::from_secs(5),
            );
            if probe.response.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.sync("localhost").is_err() {
            return Err(format!(
                "switchyard answers on {} but its WAF audit log shows no marker line \
                 (rule {MARKER_RULE}): is [vserver.waf] supported by this binary?\n{}",
                self.addr,
                self.stderr_tail()
            ));
        }
        Ok(())
    }

    /// Sends a marker and reads the log up to its line: what came before
    /// is returned (and `lost` cleared); Err when the line never came.
    fn sync(&mut self, host: &str) -> Result<Vec<String>, String> {
        let id = marker_id(self.index);
        let x = exchange(self.addr, &marker_request(&id, host), self.settings.timeout);
        if let Err(e) = &x.response {
            self.lost = true;
            return Err(format!("marker request failed: {e}"));
        }
        let deadline = Instant::now() + self.settings.marker_wait;
        let mut before = std::mem::take(&mut self.pending);
        loop {
            let mut lines = self.log.poll().into_iter();
            while let Some(l) = lines.next() {
                let is_marker = l.contains(&id)
                    || (x.local_port.is_some() && Entry::parse(&l).client_port == x.local_port);
                if is_marker {
                    self.pending = lines.collect();
                    self.lost = false;
                    return Ok(before);
                }
                before.push(l);
            }
            if Instant::now() > deadline {
                self.pending = before;
                self.lost = true;
                return Err(format!(
                    "marker {id} not in the audit log after {:?}",
                    self.settings.marker_wait
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Runs one stage: its request, then the marker that closes it.
    pub fn run_stage(&mut self, stage: &Stage, cookies: &[(String, String)]) -> StageRun {
        let host = if stage.input.virtual_host_mode {
            stage
                .input
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| "localhost".into())
        } else {
            "localhost".into()
        };
        if self.lost {
            // Whatever is in the log belongs to no stage we will judge.
            let _ = self.sync(&host);
        }
        let bytes = match request::build(&stage.input, cookies) {
            Ok(b) => b,
            Err(e) => {
                return StageRun {
                    request: Vec::new(),
                    response: Err(format!("cannot build the request: {e}")),
                    entries: Vec::new(),
                    log_problem: Some(e),
                }
            }
        };
        let Exchange {
            local_port,
            response,
        } = exchange(self.addr, &bytes, self.settings.timeout);
        let (lines, log_problem) = match self.sync(&host) {
            Ok(l) => (l, None),
            Err(e) => (std::mem::take(&mut self.pending), Some(e)),
        };
        let (entries, stray): (Vec<Entry>, Vec<Entry>) = lines
            .iter()
            .map(|l| Entry::parse(l))
            .partition(|e| local_port.is_some() && e.client_port == local_port);
        // Lines of no request of this stage: an earlier request's line
        // logged late. Counted, so a run can say how often that happens.
        STRAY_LINES.fetch_add(stray.len() as u64, Ordering::Relaxed);
        StageRun {
            request: bytes,
            response,
            entries,
            log_problem,
        }
    }

    /// Whether the process is still running (a crash fails every later
    /// stage; the caller restarts it).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.0.try_wait(), Ok(None))
    }

    pub fn crash_report(&self) -> String {
        self.stderr_tail()
    }
}

/// The child is killed if this process dies without dropping its guard
/// (a panic with panic=abort, a SIGKILL).
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own
    // process attributes, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Checks a stage's outcome against its expectations, go-ftw's way
/// (runner/run.go checkResult): every reason it fails, or none.
pub fn check(out: &Output, run: &StageRun) -> Vec<String> {
    let mut why = Vec::new();
    if out.expect_error {
        // Expecting an error: the error is the whole check.
        if let Ok(r) = &run.response {
            why.push(format!("expected an error, got status {}", r.status));
        }
        return why;
    }
    let resp = match &run.response {
        Ok(r) => r,
        Err(e) => {
            why.push(format!("no response: {e}"));
            return why;
        }
    };
    if !out.status.is_empty() && !out.status.contains(&resp.status) {
        why.push(format!(
            "status {} (expected {})",
            resp.status,
            out.status
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    if let Some(pat) = &out.response_contains {
        let text = String::from_utf8_lossy(&resp.raw);
        if !matches(pat, &text) {
            why.push(format!("response does not contain {pat:?}"));
        }
    }
    let ids: Vec<u64> = {
        let mut v: Vec<u64> = run
            .entries
            .iter()
            .flat_map(|e| e.ids.iter().copied())
            .filter(|&i| i != MARKER_RULE)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let text: String = run
        .entries
        .iter()
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let log_checks = !out.expect_ids.is_empty()
        || !out.no_expect_ids.is_empty()
        || out.match_regex.is_some()
        || out.no_match_regex.is_some()
        || out.log_contains.is_some()
        || out.no_log_contains.is_some()
        || out.isolated;
    if log_checks {
        if let Some(p) = &run.log_problem {
            why.push(format!("audit log: {p}"));
        }
    }
    let missing: Vec<u64> = out
        .expect_ids
        .iter()
        .copied()
        .filter(|i| !ids.contains(i))
        .collect();
    if !missing.is_empty() {
        why.push(format!("missing ids {missing:?}"));
    }
    let unwanted: Vec<u64> = out
        .no_expect_ids
        .iter()
        .copied()
        .filter(|i| ids.contains(i))
        .collect();
    if !unwanted.is_empty() {
        why.push(format!("unwanted ids {unwanted:?}"));
    }
    if out.isolated && ids.len() != 1 {
        why.push(format!("isolated: {} rules matched", ids.len()));
    }
    for (pat, want, what) in [
        (&out.match_regex, true, "match_regex"),
        (&out.log_contains, true, "log_contains"),
        (&out.no_match_regex, false, "no_match_regex"),
        (&out.no_log_contains, false, "no_log_contains"),
    ] {
        if let Some(p) = pat {
            if matches(p, &text) != want {
                let verb = if want { "does not match" } else { "matches" };
                why.push(format!("{what}: log {verb} {p:?}"));
            }
        }
    }
    if !why.is_empty() {
        why.push(format!("matched {ids:?}"));
    }
    why
}

/// A go-ftw regex (Go's RE2 syntax, which the regex crate shares for what
/// the tests use); an invalid one is searched for literally.
fn matches(pat: &str, text: &str) -> bool {
    match regex::Regex::new(pat) {
        Ok(re) => re.is_match(text),
        Err(_) => text.contains(pat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: u16, lines: &[&str]) -> StageRun {
        StageRun {
            request: Vec::new(),
            response: Ok(Response {
                status,
                raw: b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
                cookies: Vec::new(),
            }),
            entries: lines.iter().map(|l| Entry::parse(l)).collect(),
            log_problem: None,
        }
    }

    const LINE: &str = r#"{"client":"127.0.0.1:4000","uri":"/","matched":[{"id":942100,"msg":"SQLi","data":"Matched Data: s&1c found within ARGS:id: 1' or 1=1"},{"id":949110,"msg":"Inbound Anomaly Score Exceeded (Total Score: 5)"}]}"#;

    #[test]
    fn ids_status_and_regexes() {
        let mut out = Output {
            expect_ids: vec![942100],
            no_expect_ids: vec![942101],
            status: vec![200],
            match_regex: Some(r"Inbound Anomaly Score Exceeded \(Total Score: ".into()),
            ..Output::default()
        };
        assert!(check(&out, &run(200, &[LINE])).is_empty());
        let why = check(&out, &run(403, &[])).join("; ");
        assert!(why.contains("status 403 (expected 200)"), "{why}");
        assert!(why.contains("missing ids [942100]"), "{why}");
        assert!(why.contains("match_regex"), "{why}");
        out.no_expect_ids = vec![949110];
        let why = check(&out, &run(200, &[LINE])).join("; ");
        assert!(why.contains("unwanted ids [949110]"), "{why}");
        let iso = Output {
            expect_ids: vec![942100],
            isolated: true,
            ..Output::default()
        };
        assert!(!check(&iso, &run(200, &[LINE])).is_empty());
    }

    #[test]
    fn expected_errors() {
        let out = Output {
            expect_error: true,
            expect_ids: vec![1],
            ..Output::default()
        };
        let mut r = run(400, &[]);
        assert!(!check(&out, &r).is_empty());
        r.response = Err("connection closed without a response".into());
        assert!(check(&out, &r).is_empty());
        assert!(!check(&Output::default(), &r).is_empty());
    }

    #[test]
    fn the_config_is_valid_toml() {
        let t = config_text(
            Path::new("/tmp/a \"b\""),
            Path::new("/crs"),
            "127.0.0.1:1".parse().expect("addr"),
            "127.0.0.1:2".parse().expect("addr"),
        );
        let v: toml::Value = toml::from_str(&t).expect("valid toml");
        assert_eq!(v["vserver"][0]["waf"]["mode"].as_str(), Some("detect"));
        assert_eq!(
            v["waf"]["ruleset"][0]["files"][2].as_str(),
            Some("/crs/rules/*.conf")
        );
        assert!(setup_rules(2).contains("tx.blocking_paranoia_level=2,"));
    }
}
