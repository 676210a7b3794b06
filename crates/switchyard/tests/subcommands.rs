//! `switchyard bench ...` and `switchyard waf ...` are external subcommands
//! (issue 31): the proxy runs the `switchyard-bench` / `switchyard-waf`
//! program beside it (else on PATH) in its own place, with the arguments,
//! and the tool's exit code is the command's.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SWITCHYARD: &str = env!("CARGO_BIN_EXE_switchyard");

/// A folder holding (a hard link to) the switchyard binary, alone.
fn lone_switchyard(tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("subcommands-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bin = dir.join("switchyard");
    if std::fs::hard_link(SWITCHYARD, &bin).is_err() {
        std::fs::copy(SWITCHYARD, &bin).expect("copy switchyard");
    }
    dir
}

fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The program beside the binary runs in the proxy's place (same process:
/// signals reach it directly), with the arguments as given and
/// SWITCHYARD_BIN naming the switchyard that ran it; its exit code is the
/// command's.
#[test]
fn bench_runs_the_program_beside_it_in_its_place() {
    let dir = lone_switchyard("beside");
    write_script(
        &dir.join("switchyard-bench"),
        "#!/bin/sh\necho \"pid=$$\"\nprintf '%s|' \"$@\"\necho\necho \"bin=$SWITCHYARD_BIN\"\nexit 7\n",
    );
    let child = Command::new(dir.join("switchyard"))
        .args(["bench", "load", "--url", "http://x/ y"])
        .env("PATH", "/nonexistent")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run switchyard");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "exit code passed through; stdout {stdout} stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!(
            "pid={pid}\nload|--url|http://x/ y|\nbin={}\n",
            dir.join("switchyard").display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without one beside it, the program is looked for on PATH; without
/// either, the error names the program and how to build it.
#[test]
fn a_program_on_path_runs_and_a_missing_one_says_how_to_build_it() {
    let dir = lone_switchyard("path");
    let path_dir = dir.join("on-path");
    std::fs::create_dir_all(&path_dir).expect("dir");
    write_script(
        &path_dir.join("switchyard-waf"),
        "#!/bin/sh\necho \"from PATH: $*\"\nexit 3\n",
    );
    let out = Command::new(dir.join("switchyard"))
        .args(["waf", "test", "--help"])
        .env("PATH", &path_dir)
        .output()
        .expect("run switchyard");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "from PATH: test --help\n"
    );

    for (cmd, build) in [
        ("bench", "cargo build --release -p switchyard-bench"),
        (
            "waf",
            "cargo build --release -p switchyard --bin switchyard-waf",
        ),
    ] {
        let out = Command::new(dir.join("switchyard"))
            .args([cmd, "--help"])
            .env("PATH", "/nonexistent")
            .output()
            .expect("run switchyard");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {stderr}");
        assert!(
            stderr.contains(&format!("switchyard-{cmd} is not installed"))
                && stderr.contains(build),
            "{cmd}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The real switchyard-waf, built beside the proxy with this package:
/// `switchyard waf --help` prints its usage, which the proxy's binary does
/// not contain.
#[test]
fn waf_help_comes_from_switchyard_waf() {
    let waf = Path::new(SWITCHYARD).with_file_name("switchyard-waf");
    assert!(waf.is_file(), "{} is built with the package", waf.display());
    let out = Command::new(SWITCHYARD)
        .args(["waf", "--help"])
        .output()
        .expect("run switchyard");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let usage = "run OWASP CRS regression tests (go-ftw YAML) through Switchyard";
    assert!(stdout.contains(usage), "{stdout}");
    let proxy = std::fs::read(SWITCHYARD).expect("read the switchyard binary");
    assert!(
        memchr::memmem::find(&proxy, usage.as_bytes()).is_none(),
        "the proxy's binary contains the CRS runner's usage"
    );
    // No arguments: usage and exit code 2, from the runner.
    let out = Command::new(SWITCHYARD).arg("waf").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// The real switchyard-bench when it is built (cargo test --workspace
/// builds it; cargo test -p switchyard builds only its library).
#[test]
fn bench_help_comes_from_switchyard_bench_when_built() {
    let bench = Path::new(SWITCHYARD).with_file_name("switchyard-bench");
    if !bench.is_file() {
        eprintln!(
            "skipped: no {} (cargo build -p switchyard-bench)",
            bench.display()
        );
        return;
    }
    let out = Command::new(SWITCHYARD)
        .args(["bench", "--help"])
        .output()
        .expect("run switchyard");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("origin") && stdout.contains("compare"),
        "{stdout}"
    );
}
