//! The go-ftw test format (coreruleset/ftw-tests-schema) and its platform
//! overrides file, read leniently: the YAML is walked as a generic value,
//! so a field we do not know (or a scalar where go-yaml would accept one
//! for a string) never stops a run; a field we need that is malformed is an
//! error naming the file and test.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

/// One test file (`meta`, `rule_id`, `tests`): its tests, which carry the rule id.
#[derive(Debug, Clone)]
pub struct TestFile {
    /// Path relative to the tests folder (what FAIL lines print).
    pub name: String,
    pub tests: Vec<Test>,
}

#[derive(Debug, Clone)]
pub struct Test {
    pub rule_id: u64,
    pub test_id: u64,
    pub stages: Vec<Stage>,
}

impl Test {
    /// go-ftw's test name, `<rule_id>-<test_id>`: what `--include` matches.
    pub fn id_string(&self) -> String {
        format!("{}-{}", self.rule_id, self.test_id)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stage {
    pub input: Input,
    pub output: Output,
}

#[derive(Debug, Clone, Default)]
pub struct Input {
    /// None: go-ftw's default (GET, /, HTTP/1.1); Some(""): an empty field,
    /// sent as such (a test of a request line without a version).
    pub method: Option<String>,
    pub uri: Option<String>,
    pub version: Option<String>,
    /// In file order; the request builder sorts them as go-ftw does.
    pub headers: Vec<(String, String)>,
    /// `data`: a Go template (only `repeat` is supported, see request.rs).
    pub data: Option<String>,
    /// `encoded_data`: base64 of the body, sent as is.
    pub encoded_data: Option<String>,
    /// `encoded_request`: base64 of the whole request, sent as is.
    pub encoded_request: Option<String>,
    /// `raw_request` (deprecated): the whole request, as written.
    pub raw_request: Option<String>,
    /// `autocomplete_headers` (default true); `stop_magic: true` turns it off.
    pub autocomplete: bool,
    pub save_cookie: bool,
    pub virtual_host_mode: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Output {
    /// Any of these (empty: not checked).
    pub status: Vec<u16>,
    pub response_contains: Option<String>,
    pub log_contains: Option<String>,
    pub no_log_contains: Option<String>,
    pub expect_ids: Vec<u64>,
    pub no_expect_ids: Vec<u64>,
    pub match_regex: Option<String>,
    pub no_match_regex: Option<String>,
    pub expect_error: bool,
    pub retry_once: bool,
    pub isolated: bool,
}

fn key<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.as_mapping()?.get(Value::String(k.to_string()))
}

/// A scalar as go-yaml would decode it into a Go string: numbers and
/// booleans by their text, null as absent.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Tagged(t) => scalar(&t.value),
        _ => None,
    }
}

fn string_field(v: &Value, k: &str) -> Result<Option<String>, String> {
    match key(v, k) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => scalar(x)
            .map(Some)
            .ok_or_else(|| format!("`{k}` is not a string")),
    }
}

fn bool_field(v: &Value, k: &str) -> Result<Option<bool>, String> {
    match key(v, k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(_) => Err(format!("`{k}` is not a boolean")),
    }
}

fn uint(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An id list: `[1, 2]`, or a single id (older files wrote `expect_id: 1`).
fn ids_field(v: &Value, k: &str) -> Result<Vec<u64>, String> {
    match key(v, k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(s)) => s
            .iter()
            .map(|x| uint(x).ok_or_else(|| format!("`{k}` holds {x:?}, not a rule id")))
            .collect(),
        Some(x) => uint(x)
            .map(|i| vec![i])
            .ok_or_else(|| format!("`{k}` is not a list of rule ids")),
    }
}

fn parse_input(v: &Value) -> Result<Input, String> {
    let mut headers = Vec::new();
    match key(v, "headers") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(m)) => {
            for (k, val) in m {
                let name = scalar(k).ok_or_else(|| format!("header name {k:?} is not a string"))?;
                // `X-Header:` with nothing after it: an empty value.
                let value = match val {
                    Value::Null => String::new(),
                    other => scalar(other)
                        .ok_or_else(|| format!("header {name:?} has a non-scalar value"))?,
                };
                headers.push((name, value));
            }
        }
        Some(_) => return Err("`headers` is not a map".into()),
    }
    // `data` is a string in the schema; the older Python FTW also took a
    // list of lines, joined with CRLF.
    let data = match key(v, "data") {
        None | Some(Value::Null) => None,
        Some(Value::Sequence(lines)) => Some(
            lines
                .iter()
                .map(|l| scalar(l).ok_or("`data` list holds a non-scalar"))
                .collect::<Result<Vec<_>, _>>()?
                .join("\r\n"),
        ),
        Some(x) => Some(scalar(x).ok_or("`data` is not a string")?),
    };
    let stop_magic = bool_field(v, "stop_magic")?.unwrap_or(false);
    Ok(Input {
        method: string_field(v, "method")?,
        uri: string_field(v, "uri")?,
        version: string_field(v, "version")?,
        headers,
        data,
        encoded_data: string_field(v, "encoded_data")?,
        encoded_request: string_field(v, "encoded_request")?.filter(|s| !s.is_empty()),
        raw_request: string_field(v, "raw_request")?.filter(|s| !s.is_empty()),
        autocomplete: bool_field(v, "autocomplete_headers")?.unwrap_or(!stop_magic),
        save_cookie: bool_field(v, "save_cookie")?.unwrap_or(false),
        virtual_host_mode: bool_field(v, "virtual_host_mode")?.unwrap_or(false),
    })
}

pub fn parse_output(v: &Value) -> Result<Output, String> {
    let status = match key(v, "status") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(s)) => s
            .iter()
            .map(|x| {
                uint(x)
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| format!("`status` holds {x:?}"))
            })
            .collect::<Result<_, _>>()?,
        Some(x) => vec![uint(x)
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| format!("`status` is {x:?}, not a status code"))?],
    };
    let empty = Value::Null;
    let log = key(v, "log").unwrap_or(&empty);
    let mut expect_ids = ids_field(log, "expect_ids")?;
    expect_ids.extend(ids_field(log, "expect_id")?);
    let mut no_expect_ids = ids_field(log, "no_expect_ids")?;
    no_expect_ids.extend(ids_field(log, "no_expect_id")?);
    Ok(Output {
        status,
        response_contains: string_field(v, "response_contains")?,
        log_contains: string_field(v, "log_contains")?,
        no_log_contains: string_field(v, "no_log_contains")?,
        expect_ids,
        no_expect_ids,
        match_regex: string_field(log, "match_regex")?,
        no_match_regex: string_field(log, "no_match_regex")?,
        expect_error: bool_field(v, "expect_error")?.unwrap_or(false),
        retry_once: bool_field(v, "retry_once")?.unwrap_or(false),
        isolated: bool_field(v, "isolated")?.unwrap_or(false),
    })
}

fn parse_stage(v: &Value) -> Result<Stage, String> {
    // Older files wrap each stage in `stage:`.
    let v = key(v, "stage").unwrap_or(v);
    let empty = Value::Null;
    Ok(Stage {
        input: parse_input(key(v, "input").unwrap_or(&empty)).map_err(|e| format!("input: {e}"))?,
        output: parse_output(key(v, "output").unwrap_or(&empty))
            .map_err(|e| format!("output: {e}"))?,
    })
}

/// The rule id a file is about: `rule_id`, else the file name's digits
/// (`942100.yaml`), else 0.
fn file_rule_id(doc: &Value, path: &Path) -> u64 {
    if let Some(id) = key(doc, "rule_id").and_then(uint) {
        return id;
    }
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Parses one test file's text. `Ok(None)`: no tests in it (a file that is
/// all comments, as CRS keeps for rules without tests).
pub fn parse_test_file(name: &str, path: &Path, text: &str) -> Result<Option<TestFile>, String> {
    let doc: Value = serde_yaml::from_str(text).map_err(|e| format!("{name}: {e}"))?;
    if doc.is_null() {
        return Ok(None);
    }
    let rule_id = file_rule_id(&doc, path);
    let tests = match key(&doc, "tests") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Sequence(s)) => s,
        Some(_) => return Err(format!("{name}: `tests` is not a list")),
    };
    let mut out = Vec::new();
    for (i, t) in tests.iter().enumerate() {
        // Without `test_id`, go-ftw numbers tests by position from 1.
        let test_id = key(t, "test_id").and_then(uint).unwrap_or(i as u64 + 1);
        let rid = key(t, "rule_id").and_then(uint).unwrap_or(rule_id);
        let stages = match key(t, "stages") {
            Some(Value::Sequence(s)) => s
                .iter()
                .map(parse_stage)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{name} test {test_id}: {e}"))?,
            _ => return Err(format!("{name} test {test_id}: no `stages` list")),
        };
        out.push(Test {
            rule_id: rid,
            test_id,
            stages,
        });
    }
    Ok(Some(TestFile {
        name: name.to_string(),
        tests: out,
    }))
}

/// Every `*.yaml` / `*.yml` under `dir`, recursively, in name order (so
/// runs and their output are reproducible).
pub fn find_yaml(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for entry in rd {
            let p = entry.map_err(|e| format!("{}: {e}", d.display()))?.path();
            if p.is_dir() {
                todo.push(p);
            } else if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml") | Some("yml")
            ) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

pub fn load_tests(dir: &Path) -> Result<Vec<TestFile>, String> {
    let mut files = Vec::new();
    for p in find_yaml(dir)? {
        let name = p
            .strip_prefix(dir)
            .unwrap_or(&p)
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        if let Some(f) = parse_test_file(&name, &p, &text)? {
            files.push(f);
        }
    }
    Ok(files)
}

// ------------------------------------------------------------- overrides

/// One `test_overrides` entry.
#[derive(Debug, Clone)]
pub struct Override {
    pub rule_id: u64,
    /// Empty: every test of the rule.
    pub test_ids: Vec<u64>,
    /// Empty: every stage.
    pub stage_ids: Vec<u64>,
    pub reason: String,
    /// Our extension: run the test and count a failure as skipped (a pass
    /// is reported, so the entry is removed once it is not needed).
    pub expect_failure: bool,
    pub retry_once: bool,
    /// go-ftw's: this output replaces the test's.
    pub output: Option<Output>,
}

/// What the overrides say about one test.
pub enum Verdict<'a> {
    Run,
    Skip(&'a Override),
    ExpectFailure(&'a Override),
    /// Replace the expected output of the stages (`stage_ids`) and run.
    Replace(&'a Override),
}

#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub entries: Vec<Override>,
}

impl Overrides {
    pub fn parse(name: &str, text: &str) -> Result<Overrides, String> {
        let doc: Value = serde_yaml::from_str(text).map_err(|e| format!("{name}: {e}"))?;
        let list = match key(&doc, "test_overrides") {
            None | Some(Value::Null) => return Ok(Overrides::default()),
            Some(Value::Sequence(s)) => s,
            Some(_) => return Err(format!("{name}: `test_overrides` is not a list")),
        };
        let mut entries = Vec::new();
        for (i, e) in list.iter().enumerate() {
            let at = format!("{name}: test_overrides[{i}]");
            let rule_id = key(e, "rule_id")
                .and_then(uint)
                .ok_or_else(|| format!("{at}: no rule_id"))?;
            let at = format!("{at} (rule {rule_id})");
            let reason = string_field(e, "reason")
                .map_err(|x| format!("{at}: {x}"))?
                .unwrap_or_default();
            // An override without a reason is a test silently dropped.
            if reason.trim().is_empty() {
                return Err(format!("{at}: every override needs a non-empty reason"));
            }
            let output = match key(e, "output") {
                None | Some(Value::Null) => None,
                Some(o) => Some(parse_output(o).map_err(|x| format!("{at}: output: {x}"))?),
            };
            entries.push(Override {
                rule_id,
                test_ids: ids_field(e, "test_ids").map_err(|x| format!("{at}: {x}"))?,
                stage_ids: ids_field(e, "stage_ids").map_err(|x| format!("{at}: {x}"))?,
                reason,
                expect_failure: bool_field(e, "expect_failure")
                    .map_err(|x| format!("{at}: {x}"))?
                    .unwrap_or(false),
                retry_once: bool_field(e, "retry_once")
                    .map_err(|x| format!("{at}: {x}"))?
                    .unwrap_or(false),
                output,
            });
        }
        Ok(Overrides { entries })
    }

    fn find(&self, t: &Test) -> Option<&Override> {
        self.entries.iter().find(|o| {
            o.rule_id == t.rule_id && (o.test_ids.is_empty() || o.test_ids.contains(&t.test_id))
        })
    }

    pub fn verdict(&self, t: &Test) -> Verdict<'_> {
        match self.find(t) {
            None => Verdict::Run,
            Some(o) if o.expect_failure => Verdict::ExpectFailure(o),
            Some(o) if o.output.is_some() => Verdict::Replace(o),
            // Only a reason (or only retry_once): a retry is still a run.
            Some(o) if o.retry_once => Verdict::Replace(o),
            Some(o) => Verdict::Skip(o),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
---
meta:
  author: "someone"
  unknown_meta_field: [1, 2]
rule_id: 920100
tests:
  - test_id: 3
    desc: "a test"
    stages:
      - input:
          dest_addr: "127.0.0.1"
          port: 80
          method: "POST"
          headers:
            User-Agent: "OWASP CRS test agent"
            Host: localhost
            Content-Length: 0
            X-Empty:
          uri: "/"
          data: |
            line one
            line two
          version: "HTTP/1.1"
          some_future_field: {a: b}
        output:
          status: [200, 403]
          log:
            expect_ids: [920100]
            no_expect_ids: [920101, 920102]
            match_regex: 'id "920100"'
  - stages:
      - stage:
          input:
            encoded_request: "R0VUIC8gSFRUUC8xLjENCg0K"
            stop_magic: true
          output:
            status: 400
            expect_error: true
            retry_once: true
            log_contains: 'id "1"'
"#;

    #[test]
    fn reads_the_fields_the_crs_tests_use() {
        let f = parse_test_file("x/920100.yaml", Path::new("x/920100.yaml"), FILE)
            .expect("parses")
            .expect("has tests");
        assert_eq!(f.tests.len(), 2);
        let t = &f.tests[0];
        assert_eq!(t.id_string(), "920100-3");
        let s = &t.stages[0];
        assert_eq!(s.input.method.as_deref(), Some("POST"));
        assert_eq!(
            s.input.headers,
            vec![
                ("User-Agent".into(), "OWASP CRS test agent".into()),
                ("Host".into(), "localhost".into()),
                ("Content-Length".into(), "0".into()),
                ("X-Empty".into(), "".into()),
            ]
        );
        assert_eq!(s.input.data.as_deref(), Some("line one\nline two\n"));
        assert!(s.input.autocomplete);
        assert_eq!(s.output.status, vec![200, 403]);
        assert_eq!(s.output.expect_ids, vec![920100]);
        assert_eq!(s.output.no_expect_ids, vec![920101, 920102]);
        assert_eq!(s.output.match_regex.as_deref(), Some("id \"920100\""));
        // The second test: numbered by position, `stage:` wrapper.
        let t = &f.tests[1];
        assert_eq!(t.test_id, 2);
        let s = &t.stages[0];
        assert!(s.input.encoded_request.is_some());
        assert!(!s.input.autocomplete);
        assert_eq!(s.output.status, vec![400]);
        assert!(s.output.expect_error && s.output.retry_once);
        assert_eq!(s.output.log_contains.as_deref(), Some("id \"1\""));
    }

    #[test]
    fn a_file_of_comments_has_no_tests() {
        let r = parse_test_file("a.yaml", Path::new("a.yaml"), "# nothing\n# here\n");
        assert!(matches!(r, Ok(None)));
    }

    #[test]
    fn malformed_fields_name_the_file_and_test() {
        let bad = "rule_id: 1\ntests:\n  - test_id: 7\n    stages:\n      - input:\n          headers: [1, 2]\n";
        let e = parse_test_file("bad.yaml", Path::new("bad.yaml"), bad).expect_err("rejected");
        assert!(e.contains("bad.yaml test 7"), "{e}");
        let e =
            parse_test_file("bad.yaml", Path::new("bad.yaml"), "tests: [\n").expect_err("rejected");
        assert!(e.starts_with("bad.yaml"), "{e}");
    }

    #[test]
    fn overrides_need_reasons() {
        let ok = r#"
version: "v0.0.0"
meta: {engine: "switchyard", platform: "switchyard"}
test_overrides:
  - rule_id: 920100
    test_ids: [4]
    reason: "the proxy answers 400 itself"
    output:
      status: 400
  - rule_id: 920101
    reason: "all of them"
  - rule_id: 920102
    test_ids: [1]
    reason: "engine gap: something"
    expect_failure: true
"#;
        let o = Overrides::parse("o.yaml", ok).expect("parses");
        let t = |rule_id, test_id| Test {
            rule_id,
            test_id,
            stages: Vec::new(),
        };
        assert!(matches!(o.verdict(&t(920100, 4)), Verdict::Replace(_)));
        assert!(matches!(o.verdict(&t(920100, 5)), Verdict::Run));
        assert!(matches!(o.verdict(&t(920101, 9)), Verdict::Skip(_)));
        assert!(matches!(
            o.verdict(&t(920102, 1)),
            Verdict::ExpectFailure(_)
        ));
        let bad = "test_overrides:\n  - rule_id: 1\n    test_ids: [1]\n    reason: \"  \"\n";
        let e = Overrides::parse("o.yaml", bad).expect_err("refused");
        assert!(e.contains("reason"), "{e}");
        let bad = "test_overrides:\n  - rule_id: 1\n    test_ids: [1]\n";
        assert!(Overrides::parse("o.yaml", bad).is_err());
    }
}
