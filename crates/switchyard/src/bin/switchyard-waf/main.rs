//! `switchyard-waf`, run as `switchyard waf test`: the OWASP CRS regression
//! tests (go-ftw's YAML format) through the real Switchyard binary, in front
//! of an albedo-like origin on loopback, judged from the WAF's audit log as
//! go-ftw judges ModSecurity's error log.
//!
//! A program of its own, not part of the proxy: it has its own client,
//! origin and process launcher, which the binary operators run in
//! production has no use for. `switchyard waf ...` runs it (see `external`
//! in ../../main.rs). The Switchyard it tests is `--switchyard PATH`, else
//! the one that ran it (`SWITCHYARD_BIN`), else the `switchyard` beside it.
//!
//! - `model`: the test and overrides files.
//! - `request`: a stage's request bytes, with go-ftw's autocompletion.
//! - `origin`: the echo origin (albedo's `/reflect`).
//! - `client`: one request, one response, with deadlines.
//! - `auditlog`: the audit log, tailed and parsed.
//! - `runner`: the Switchyard instances, marker bracketing and the checks.

mod auditlog;
mod client;
mod model;
mod origin;
mod request;
mod runner;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use model::{Overrides, Test, TestFile, Verdict};
use runner::{Instance, Settings};

const USAGE: &str = "\
switchyard waf test: run OWASP CRS regression tests (go-ftw YAML) through Switchyard

USAGE:
  switchyard waf test --tests DIR [--crs DIR] [--overrides FILE] [--paranoia N]
                      [--include REGEX] [--jobs N] [--timeout SECS] [--verbose]

  --tests DIR       every *.yaml under DIR (e.g. <crs>/tests/regression)
  --crs DIR         the CRS: crs-setup.conf.example and rules/*.conf
                    (default: DIR/../.. when it has rules/)
  --overrides FILE  go-ftw platform overrides; every entry needs a reason
  --paranoia N      tx.blocking_paranoia_level, 1 to 4 (default 4)
  --include REGEX   only tests whose <rule_id>-<test_id> matches
  --jobs N          Switchyard instances run side by side (default 2)
  --timeout SECS    a stage's response deadline (default 5)
  --verbose         every test's result and the rules it matched
  --switchyard PATH the binary under test (default: the switchyard that ran
                    this, else the one beside switchyard-waf)

Prints `FAIL <file> <test_id>: <why>` per failing test and last
`N passed, M failed, K skipped`; exits 0 iff nothing failed.
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(cli(&args));
}

/// `switchyard waf ...`; the exit code.
fn cli(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("test") => match parse_args(&args[1..]) {
            Ok(Some(a)) => match run(&a) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("switchyard waf test: {e}");
                    1
                }
            },
            Ok(None) => {
                print!("{USAGE}");
                0
            }
            Err(e) => {
                eprintln!("switchyard waf test: {e}\n\n{USAGE}");
                2
            }
        },
        Some("help" | "--help" | "-h") | None => {
            print!("{USAGE}");
            if args.is_empty() {
                2
            } else {
                0
            }
        }
        Some(other) => {
            eprintln!("switchyard waf: unknown command {other:?}\n\n{USAGE}");
            2
        }
    }
}

#[derive(Debug)]
struct Args {
    tests: PathBuf,
    crs: PathBuf,
    overrides: Option<PathBuf>,
    paranoia: u8,
    include: Option<regex::Regex>,
    jobs: usize,
    timeout: Duration,
    verbose: bool,
    switchyard: Option<PathBuf>,
}

fn parse_args(args: &[String]) -> Result<Option<Args>, String> {
    let mut tests = None;
    let mut crs = None;
    let mut overrides = None;
    let mut paranoia = 4u8;
    let mut include = None;
    let mut jobs = 2usize;
    let mut timeout = Duration::from_secs(5);
    let mut verbose = false;
    let mut switchyard = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag {
            "--tests" => tests = Some(PathBuf::from(value(flag)?)),
            "--crs" => crs = Some(PathBuf::from(value(flag)?)),
            "--overrides" => overrides = Some(PathBuf::from(value(flag)?)),
            "--paranoia" => {
                paranoia = value(flag)?
                    .parse()
                    .ok()
                    .filter(|p| (1..=4).contains(p))
                    .ok_or("--paranoia is 1 to 4")?
            }
            "--include" => {
                let v = value(flag)?;
                include = Some(regex::Regex::new(&v).map_err(|e| format!("--include: {e}"))?)
            }
            "--jobs" => {
                jobs = value(flag)?
                    .parse()
                    .ok()
                    .filter(|j| (1..=64).contains(j))
                    .ok_or("--jobs is 1 to 64")?
            }
            "--timeout" => {
                let s: f64 = value(flag)?
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && *s <= 600.0)
                    .ok_or("--timeout is seconds, up to 600")?;
                timeout = Duration::from_secs_f64(s);
            }
            "--verbose" | "-v" => verbose = true,
            "--switchyard" => switchyard = Some(PathBuf::from(value(flag)?)),
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let tests = tests.ok_or("--tests DIR is required")?;
    let crs = match crs {
        Some(c) => c,
        // The CRS keeps its tests in <crs>/tests/regression.
        None => {
            let guess = tests.join("..").join("..");
            if guess.join("rules").is_dir() {
                guess
            } else {
                return Err("--crs DIR is required (no rules/ two levels above --tests)".into());
            }
        }
    };
    Ok(Some(Args {
        tests,
        crs,
        overrides,
        paranoia,
        include,
        jobs,
        timeout,
        verbose,
        switchyard,
    }))
}

/// The Switchyard binary under test: `--switchyard`, else the one that ran
/// `switchyard waf` (it sets `SWITCHYARD_BIN`), else `switchyard` beside
/// this program (target/debug or target/release).
fn switchyard_binary(flag: Option<&PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = flag {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("SWITCHYARD_BIN").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let beside = me.with_file_name("switchyard");
    if beside.is_file() {
        Ok(beside)
    } else {
        Err(format!(
            "no switchyard to test: none beside {}; give --switchyard PATH",
            me.display()
        ))
    }
}

/// How one test ended.
#[derive(Clone, Debug)]
enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

/// One test to run, with what the overrides say.
struct Job {
    file: usize,
    test: usize,
}

fn run(a: &Args) -> Result<i32, String> {
    let started = Instant::now();
    let files = model::load_tests(&a.tests)?;
    let overrides = match &a.overrides {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Overrides::parse(&p.to_string_lossy(), &text)?
        }
        None => Overrides::default(),
    };
    if !a.crs.join("rules").is_dir() {
        return Err(format!("{}: no rules/ folder: not a CRS", a.crs.display()));
    }
    let mut queue = VecDeque::new();
    let mut excluded = 0usize;
    let mut stage_total = 0usize;
    for (fi, f) in files.iter().enumerate() {
        for (ti, t) in f.tests.iter().enumerate() {
            if a.include
                .as_ref()
                .is_some_and(|re| !re.is_match(&t.id_string()))
            {
                excluded += 1;
                continue;
            }
            stage_total += t.stages.len();
            queue.push_back(Job { file: fi, test: ti });
        }
    }
    let results: Vec<Vec<Mutex<Option<Outcome>>>> = files
        .iter()
        .map(|f| f.tests.iter().map(|_| Mutex::new(None)).collect())
        .collect();
    let origin = origin::Origin::start().map_err(|e| format!("origin: {e}"))?;
    let settings = Settings {
        switchyard: switchyard_binary(a.switchyard.as_ref())?,
        crs: a.crs.clone(),
        paranoia: a.paranoia,
        timeout: a.timeout,
        marker_wait: Duration::from_secs(5),
    };
    let jobs = a.jobs.min(queue.len()).max(1);
    let queue = Mutex::new(queue);
    let stages_done = AtomicUsize::new(0);
    let fatal: Mutex<Option<String>> = Mutex::new(None);
    let finished = AtomicBool::new(false);
    let ctx = Ctx {
        files: &files,
        overrides: &overrides,
        results: &results,
        verbose: a.verbose,
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|i| {
                let (queue, done, fatal, settings, ctx) =
                    (&queue, &stages_done, &fatal, &settings, &ctx);
                let origin = origin.addr;
                scope.spawn(move || {
                    if let Err(e) = worker(i, origin, settings, queue, done, ctx) {
                        // Stops the others: a broken setup fails every test.
                        queue.lock().unwrap_or_else(|p| p.into_inner()).clear();
                        fatal
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                })
            })
            .collect();
        // Progress, at most every 5 s, on stderr (stdout is the report).
        let progress = scope.spawn(|| {
            let mut last = Instant::now();
            while !finished.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if last.elapsed() >= Duration::from_secs(5) {
                    last = Instant::now();
                    eprintln!(
                        "waf test: {}/{} stages, {:.0} s",
                        stages_done.load(Ordering::Relaxed),
                        stage_total,
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        });
        for w in workers {
            if w.join().is_err() {
                fatal
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert("a test worker panicked".into());
            }
        }
        finished.store(true, Ordering::Relaxed);
        let _ = progress.join();
    });
    if let Some(e) = fatal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let (mut passed, mut failed, mut skipped) = (0usize, 0usize, 0usize);
    for (fi, f) in files.iter().enumerate() {
        for (ti, t) in f.tests.iter().enumerate() {
            let r = results[fi][ti]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            match r {
                None => {}
                Some(Outcome::Passed) => passed += 1,
                Some(Outcome::Skipped(why)) => {
                    skipped += 1;
                    if a.verbose {
                        println!("SKIP {} {}: {why}", f.name, t.test_id);
                    }
                }
                Some(Outcome::Failed(why)) => {
                    failed += 1;
                    println!("FAIL {} {}: {why}", f.name, t.test_id);
                }
            }
        }
    }
    eprintln!(
        "waf test: {} stages in {:.1} s ({} Switchyard instance{}, {} late audit lines set aside){}",
        stage_total,
        started.elapsed().as_secs_f64(),
        jobs,
        if jobs == 1 { "" } else { "s" },
        runner::STRAY_LINES.load(Ordering::Relaxed),
        if excluded > 0 {
            format!(", {excluded} tests not selected by --include")
        } else {
            String::new()
        }
    );
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    Ok(if failed == 0 { 0 } else { 1 })
}

struct Ctx<'a> {
    files: &'a [TestFile],
    overrides: &'a Overrides,
    results: &'a [Vec<Mutex<Option<Outcome>>>],
    verbose: bool,
}

/// One Switchyard instance working through the shared queue of tests.
fn worker(
    index: usize,
    origin: std::net::SocketAddr,
    settings: &Settings,
    queue: &Mutex<VecDeque<Job>>,
    done: &AtomicUsize,
    ctx: &Ctx<'_>,
) -> Result<(), String> {
    let mut inst = Instance::start(index, origin, settings)?;
    loop {
        let Some(job) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front() else {
            return Ok(());
        };
        let file = &ctx.files[job.file];
        let test = &file.tests[job.test];
        let outcome = run_test(&mut inst, test, ctx);
        done.fetch_add(test.stages.len(), Ordering::Relaxed);
        if ctx.verbose {
            let tag = match &outcome {
                Outcome::Passed => "pass".to_string(),
                Outcome::Failed(w) => format!("FAIL: {w}"),
                Outcome::Skipped(w) => format!("skip: {w}"),
            };
            eprintln!("{} {}: {tag}", file.name, test.test_id);
        }
        *ctx.results[job.file][job.test]
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(outcome);
        // A crash (an engine panic on some payload) fails that test; the
        // rest run on a new instance.
        if !inst.alive() {
            let report = inst.crash_report();
            let o = Outcome::Failed(format!("switchyard died during this test:\n{report}"));
            *ctx.results[job.file][job.test]
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(o);
            drop(inst);
            inst = Instance::start(index, origin, settings)?;
        }
    }
}

fn run_test(inst: &mut Instance, test: &Test, ctx: &Ctx<'_>) -> Outcome {
    let verdict = ctx.overrides.verdict(test);
    let (replace, expect_failure, retry_all) = match &verdict {
        Verdict::Skip(o) => return Outcome::Skipped(o.reason.clone()),
        Verdict::Run => (None, None, false),
        Verdict::ExpectFailure(o) => (None, Some(*o), o.retry_once),
        Verdict::Replace(o) => (Some(*o), None, o.retry_once),
    };
    let mut cookies: Vec<(String, String)> = Vec::new();
    let mut failure: Option<String> = None;
    for (si, stage) in test.stages.iter().enumerate() {
        let expected = match replace {
            Some(o) if o.stage_ids.is_empty() || o.stage_ids.contains(&(si as u64 + 1)) => {
                o.output.as_ref().unwrap_or(&stage.output)
            }
            _ => &stage.output,
        };
        let retry = retry_all || expected.retry_once;
        let mut attempt = 0;
        let why = loop {
            let run = inst.run_stage(stage, &cookies);
            if let Ok(r) = &run.response {
                for c in &r.cookies {
                    cookies.retain(|(n, _)| n != &c.0);
                    cookies.push(c.clone());
                }
            }
            let why = runner::check(expected, &run);
            if ctx.verbose {
                trace(test, si, &run, &why);
            }
            attempt += 1;
            if why.is_empty() || !retry || attempt > 1 {
                break why;
            }
        };
        if !why.is_empty() {
            let at = if test.stages.len() > 1 {
                format!("stage {}: ", si + 1)
            } else {
                String::new()
            };
            failure = Some(format!("{at}{}", why.join("; ")));
            break;
        }
    }
    match (failure, expect_failure) {
        // A test the overrides name counts as skipped even when it passes
        // its replaced expectations: the figure of passes is the suite's
        // own; a replaced expectation that fails is still a failure.
        (None, None) => match replace.filter(|o| o.output.is_some()) {
            Some(o) => Outcome::Skipped(format!("overridden: {}", o.reason)),
            None => Outcome::Passed,
        },
        (Some(w), None) => Outcome::Failed(match replace.filter(|o| o.output.is_some()) {
            Some(_) => format!("{w} (with the overridden expectations)"),
            None => w,
        }),
        (Some(_), Some(o)) => Outcome::Skipped(format!("expected failure: {}", o.reason)),
        (None, Some(o)) => Outcome::Failed(format!(
            "passes, but the overrides expect it to fail ({}): remove that override",
            o.reason
        )),
    }
}

/// `--verbose`: what a stage sent, got and logged, on stderr.
fn trace(test: &Test, si: usize, run: &runner::StageRun, why: &[String]) {
    const MAX: usize = 2048;
    let req = String::from_utf8_lossy(&run.request[..run.request.len().min(MAX)]);
    let mut out = format!("--- {} stage {}\n>>> {req:?}\n", test.id_string(), si + 1);
    match &run.response {
        Ok(r) => {
            let head = r.raw.split(|&b| b == b'\n').next().unwrap_or(&[]);
            out.push_str(&format!(
                "<<< {}\n",
                String::from_utf8_lossy(head).trim_end()
            ));
        }
        Err(e) => out.push_str(&format!("<<< error: {e}\n")),
    }
    for e in &run.entries {
        out.push_str(&format!("log {}\n", e.line));
    }
    if !why.is_empty() {
        out.push_str(&format!("why {}\n", why.join("; ")));
    }
    eprint!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let a = parse_args(&args(&[
            "--tests",
            "t",
            "--crs=c",
            "--paranoia",
            "1",
            "--include",
            "^942",
            "--verbose",
        ]))
        .expect("valid")
        .expect("not help");
        assert_eq!(a.tests, PathBuf::from("t"));
        assert_eq!(a.crs, PathBuf::from("c"));
        assert_eq!(a.paranoia, 1);
        assert!(a.verbose && a.include.is_some());
        assert_eq!(a.switchyard, None);
        let a = parse_args(&args(&["--tests", "t", "--crs", "c", "--switchyard=/x/sy"]))
            .expect("valid")
            .expect("not help");
        assert_eq!(a.switchyard, Some(PathBuf::from("/x/sy")));
        assert!(parse_args(&args(&["--tests", "t", "--crs", "c", "--paranoia", "5"])).is_err());
        assert!(parse_args(&args(&["--crs", "c"])).is_err());
        assert!(parse_args(&args(&["--tests", "t", "--crs", "c", "--bogus"])).is_err());
        assert!(parse_args(&args(&["--tests"])).is_err());
        assert!(matches!(parse_args(&args(&["--help"])), Ok(None)));
    }
}
