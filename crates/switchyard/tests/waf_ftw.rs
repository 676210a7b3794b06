//! `switchyard waf test` end to end: the real binary runs a handful of
//! handwritten go-ftw tests through itself (the CRS beside the checkout)
//! and must tell a pass from a failure from an override.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CRS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/crs");

fn crs() -> Option<PathBuf> {
    let p = PathBuf::from(CRS);
    if p.join("rules").is_dir() {
        Some(p)
    } else {
        eprintln!("skipped: no CRS at {CRS}");
        None
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("switchyard-waf-ftw-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

const HEADERS: &str = r#"
          headers:
            Host: "localhost"
            User-Agent: "OWASP CRS test agent"
            Accept: "text/xml,application/xml,application/xhtml+xml,text/html;q=0.9,text/plain;q=0.8,image/png,*/*;q=0.5""#;

/// 942100-1 passes (libinjection, paranoia level 1), 942100-2 expects an
/// id no rule has (must fail), 942100-3 is named in the overrides, and
/// 953120-1 needs the origin's /reflect answer inspected (response body).
fn write_tests(dir: &Path) {
    let sqli = format!(
        r#"---
meta:
  author: "switchyard"
rule_id: 942100
tests:
  - test_id: 1
    desc: "SQL injection in a query argument"
    stages:
      - input:
          dest_addr: "127.0.0.1"
          port: 80
          method: "GET"
          uri: "/get?var=1%27%20or%201%3D1"
          version: "HTTP/1.1"{HEADERS}
        output:
          status: 200
          log:
            expect_ids: [942100]
  - test_id: 2
    desc: "Expects a rule id that cannot match: must be reported as failed"
    stages:
      - input:
          dest_addr: "127.0.0.1"
          port: 80
          uri: "/get?var=hello"{HEADERS}
        output:
          log:
            expect_ids: [1]
  - test_id: 3
    desc: "Named in the overrides: skipped"
    stages:
      - input:
          uri: "/"{HEADERS}
        output:
          log:
            expect_ids: [2]
"#
    );
    std::fs::create_dir_all(dir.join("REQUEST-942")).expect("dir");
    std::fs::write(dir.join("REQUEST-942/942100.yaml"), sqli).expect("write");
    let php = format!(
        r#"---
rule_id: 953120
tests:
  - test_id: 1
    stages:
      - input:
          method: "POST"
          uri: "/reflect"{HEADERS}
            Content-Type: "application/json"
          data: "{{\"body\": \"<?php echo \\\"Hello World!\\n\\\" ?>\"}}"
        output:
          log:
            expect_ids: [953120]
"#
    );
    std::fs::write(dir.join("953120.yaml"), php).expect("write");
}

fn run(args: &[&str]) -> (Output, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["waf", "test"])
        .args(args)
        .output()
        .expect("run switchyard waf test");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or("")
}

#[test]
fn passes_failures_and_overrides_are_told_apart() {
    let Some(crs) = crs() else { return };
    let dir = temp_dir("suite");
    let tests = dir.join("tests");
    write_tests(&tests);
    let overrides = dir.join("overrides.yaml");
    std::fs::write(
        &overrides,
        r#"version: "v0.0.0"
meta:
  engine: "switchyard"
  platform: "switchyard"
test_overrides:
  - rule_id: 942100
    test_ids: [3]
    reason: "expects a rule id no rule set has (this test's own fixture)"
"#,
    )
    .expect("write");
    let crs = crs.to_string_lossy().into_owned();
    let t = tests.to_string_lossy().into_owned();
    let o = overrides.to_string_lossy().into_owned();

    // Paranoia level 1: 942100 and 953120 are level-1 rules.
    let (out, stdout, stderr) = run(&[
        "--tests",
        &t,
        "--crs",
        &crs,
        "--overrides",
        &o,
        "--paranoia",
        "1",
        "--jobs",
        "1",
    ]);
    assert_eq!(
        last_line(&stdout),
        "2 passed, 1 failed, 1 skipped",
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "a failure exits 1");
    assert!(
        stdout.contains("FAIL REQUEST-942/942100.yaml 2: missing ids [1]"),
        "{stdout}"
    );

    // Paranoia level 4, the SQL injection alone: a clean run exits 0.
    let (out, stdout, stderr) = run(&[
        "--tests",
        &t,
        "--crs",
        &crs,
        "--paranoia",
        "4",
        "--include",
        "^942100-1$",
    ]);
    assert_eq!(
        last_line(&stdout),
        "1 passed, 0 failed, 0 skipped",
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(0));

    // An override without a reason is refused before anything runs.
    std::fs::write(
        &overrides,
        "test_overrides:\n  - rule_id: 942100\n    test_ids: [2]\n",
    )
    .expect("write");
    let (out, _, stderr) = run(&["--tests", &t, "--crs", &crs, "--overrides", &o]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("needs a non-empty reason"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
