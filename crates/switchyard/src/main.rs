//! The `switchyard` command: run | check | reload | stats | bench | waf.

use std::path::PathBuf;
use std::process::ExitCode;

use switchyard::{config, log, quickstart, runtime, stats};

/// mimalloc instead of glibc's malloc. Requests allocate their futures,
/// frames and fields per request, and glibc served the larger ones from
/// its slow path (`_int_malloc`, `_int_free`, `malloc_consolidate`: about
/// 8,500 of the 55,500 user-space instructions of a 1 KB HTTP/3 request).
/// DUT CPU per 1 KB request, 2 rounds alternating with a glibc build:
/// HTTP/3 16.7-16.9 to 14.6-14.9 µs (oha), HTTP/2 10.6-10.8 to
/// 10.1-10.4 (BENCHMARKS.md, "HTTP/3"); callgrind about 55,500 to
/// 50,600 and 36,300 to 33,100 instructions; HTTP/1
/// keep-alive unchanged (wrk). Memory per idle connection 1.7 KB before,
/// 0.8 KB after (`concurrency`, 1,000 connections). HAProxy and nginx
/// keep pools of their own; Envoy links tcmalloc, Pingora jemalloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "\
switchyard: a software application delivery controller (L7 load balancer)

USAGE:
  switchyard run [-c FILE]        run; with no FILE, the built-in quickstart
  switchyard check -c FILE        validate a configuration file
  switchyard reload [-c FILE | --admin ADDR]
                                  reload the running instance's configuration
                                  (or send it SIGHUP)
  switchyard stats [-c FILE | --admin ADDR] [--json | --prometheus]
                                  print the running instance's counters
  switchyard cluster init -c NODE_FILE CONFIG_FILE
                                  publish a cluster's first configuration to
                                  etcd, before any node runs (checked as a
                                  publish through the admin API is)
  switchyard ctl COMMAND ...      members, drain, enable, weight, top, ...
                                  through the admin API (switchyard ctl --help)
  switchyard bench ...            benchmarks (switchyard bench --help)
  switchyard waf test --tests DIR [--crs DIR] [--overrides FILE] ...
                                  the OWASP CRS regression tests (go-ftw YAML)
                                  through this binary (switchyard waf --help)
  (bench and waf are separate programs, switchyard-bench and switchyard-waf,
  run from beside this binary or from PATH; not part of the proxy)
  switchyard version

Logs go to stderr; SWITCHYARD_LOG=debug adds debug lines.
";

fn main() -> ExitCode {
    let code = command();
    // Log lines still buffered (the last ones of a run after SIGTERM, or
    // before a fatal error) are written before the process exits.
    log::flush();
    code
}

fn command() -> ExitCode {
    log::init_from_env();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args.first().map(String::as_str).unwrap_or("run");
    let rest = if args.is_empty() { &[][..] } else { &args[1..] };
    match cmd {
        "run" => run(rest),
        "check" => check(rest),
        "reload" => admin_call(rest, "POST", "/reload"),
        "stats" => {
            let path = if rest.iter().any(|a| a == "--json") {
                "/stats.json"
            } else if rest.iter().any(|a| a == "--prometheus") {
                "/metrics"
            } else {
                "/stats"
            };
            admin_call(rest, "GET", path)
        }
        "cluster" => cluster(rest),
        "ctl" => ExitCode::from(switchyard::ctl::main(rest).clamp(0, 255) as u8),
        "bench" => external("bench", rest),
        "waf" => external("waf", rest),
        "version" | "--version" | "-V" => {
            println!("switchyard {}", env!("CARGO_PKG_VERSION"));
            // The optional native parts build.rs found (or not).
            let part = |on: bool, what: &str, instead: &str| {
                println!(
                    "  {}",
                    if on {
                        what.to_string()
                    } else {
                        format!("no {what}: {instead}")
                    }
                )
            };
            part(
                switchyard::compress::isal::Igzip::available(),
                "ISA-L gzip (level 1)",
                "libdeflate instead (install libisal-dev and rebuild)",
            );
            part(
                cfg!(switchyard_xdp),
                "XDP shield",
                "accept-time shield only (install clang and libbpf-dev and rebuild)",
            );
            ExitCode::SUCCESS
        }
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("switchyard: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `switchyard bench ...` and `switchyard waf ...` run tools that are not
/// part of the proxy (a load generator, raw-frame flood generators, the CRS
/// runner): as cargo and git run theirs, the `switchyard-NAME` program
/// beside this binary, else on PATH, replaces this process, so signals and
/// the exit code are the tool's own. `SWITCHYARD_BIN` tells it which
/// switchyard called it (the one it measures or tests).
fn external(name: &str, args: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let program = format!("switchyard-{name}");
    let me = std::env::current_exe().ok();
    let beside = me
        .as_deref()
        .and_then(|m| m.parent())
        .map(|d| d.join(&program));
    let found = beside.clone().filter(|p| executable(p)).or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(&program))
                .find(|p| executable(p))
        })
    });
    let Some(found) = found else {
        let build = match name {
            "waf" => "cargo build --release -p switchyard --bin switchyard-waf",
            _ => "cargo build --release -p switchyard-bench",
        };
        return fail(format!(
            "{name}: {program} is not installed (not beside this binary{}, not on PATH); \
             it is built apart from the proxy: `{build}` (or `cargo build --release` for every binary)",
            beside
                .as_deref()
                .and_then(|p| p.parent())
                .map(|d| format!(" in {}", d.display()))
                .unwrap_or_default()
        ));
    };
    let mut cmd = std::process::Command::new(&found);
    cmd.args(args);
    if let Some(me) = &me {
        cmd.env("SWITCHYARD_BIN", me);
    }
    log::flush();
    // Returns only if the exec failed.
    let e = cmd.exec();
    fail(format!("{name}: cannot run {}: {e}", found.display()))
}

fn executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Value of `-c FILE` / `--config FILE`.
fn config_arg(args: &[String]) -> Result<Option<PathBuf>, String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-c" | "--config" => {
                return it
                    .next()
                    .map(|p| Some(PathBuf::from(p)))
                    .ok_or_else(|| format!("{a} needs a file name"))
            }
            s if s.starts_with("--config=") => return Ok(Some(PathBuf::from(&s[9..]))),
            _ => {}
        }
    }
    Ok(None)
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    // After the log lines that led here.
    log::flush();
    eprintln!("switchyard: {msg}");
    ExitCode::from(1)
}

fn run(args: &[String]) -> ExitCode {
    // First, while this is the only thread (see runtime/fdtable.rs).
    if let Err(e) = runtime::fdtable::reserve() {
        log::warn(format_args!(
            "could not size the descriptor table up front ({e}): its growth may stall a worker for milliseconds"
        ));
    }
    let path = match config_arg(args) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let source = match &path {
        Some(p) => match cluster_source(p) {
            Ok(Some(s)) => s,
            Ok(None) => runtime::Source::File(p.clone()),
            Err(e) => return fail(format!("configuration rejected:\n{e}")),
        },
        None => runtime::Source::Text {
            name: "<quickstart>".into(),
            text: quickstart::config_text(),
        },
    };
    // Parse once to learn the worker count, size the counters, then build
    // the snapshot for real.
    let first = match source.load(None) {
        Ok(s) => s,
        Err(e) => return fail(format!("configuration rejected:\n{e}")),
    };
    stats::init_slots(first.settings.workers);
    drop(first);
    let snap = match source.load(None) {
        Ok(s) => s,
        Err(e) => return fail(format!("configuration rejected:\n{e}")),
    };
    for w in &snap.warnings {
        log::warn(format_args!("{}", w.as_warning()));
    }
    if path.is_none() {
        if let Err(e) = quickstart::start_origins() {
            return fail(format!("quickstart: {e}"));
        }
        log::flush();
        eprint!("{}", quickstart::banner());
    }
    // Loading the configuration twice (the CRS rules above all) freed
    // tens of MB that mimalloc keeps for reuse until it purges: hand it
    // back now, before the workers start (an idle process held 45 MB
    // instead of 28).
    runtime::give_back_this_threads_memory();
    match runtime::run(source, snap) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// A file with `[cluster]` makes this process a cluster node: its
/// configuration is the file followed by what is published in etcd.
fn cluster_source(path: &std::path::Path) -> Result<Option<runtime::Source>, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        // config::load reports it.
        return Ok(None);
    };
    let base = path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let Some(settings) = config::cluster_settings(&path.display().to_string(), &text, &base)?
    else {
        return Ok(None);
    };
    let node = switchyard::cluster::start(settings, &path.display().to_string(), &text)?;
    Ok(Some(runtime::Source::Cluster(node)))
}

fn check(args: &[String]) -> ExitCode {
    let path = match config_arg(args) {
        Ok(Some(p)) => p,
        Ok(None) => return fail("check needs -c FILE"),
        Err(e) => return fail(e),
    };
    // A cluster node's file: checked with what is published now.
    if let Ok(text) = std::fs::read_to_string(&path) {
        let base = path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf();
        match config::cluster_settings(&path.display().to_string(), &text, &base) {
            Err(e) => {
                // As the errors of the file itself, below.
                eprintln!("{e}");
                return ExitCode::from(1);
            }
            Ok(Some(settings)) => {
                return match switchyard::cluster::published(&settings) {
                    Ok((rev, Some(published))) => {
                        let node = switchyard::cluster::Node::detached(
                            settings,
                            &path.display().to_string(),
                            &text,
                        );
                        match config::publish::parse_published(
                            &node,
                            &format!("{} + etcd revision {rev}", path.display()),
                            &published,
                            None,
                        ) {
                            Ok(_) => {
                                println!(
                                    "{}: OK (cluster node; published revision {rev})",
                                    path.display()
                                );
                                ExitCode::SUCCESS
                            }
                            Err(e) => {
                                eprintln!("{e}");
                                ExitCode::from(1)
                            }
                        }
                    }
                    Ok((_, None)) => fail(format!(
                        "{}: cluster {:?} has nothing published",
                        path.display(),
                        settings.prefix
                    )),
                    Err(e) => fail(format!(
                        "{}: cannot read the published configuration: {e}",
                        path.display()
                    )),
                };
            }
            Ok(None) => {}
        }
    }
    match config::load(&path, None) {
        Ok(s) => {
            for w in &s.warnings {
                eprintln!("{}", w.as_warning());
            }
            let members: usize = s.pools.iter().map(|p| p.members.load().len()).sum();
            println!(
                "{}: OK ({}, {}, {})",
                path.display(),
                plural(s.vservers.len(), "virtual server"),
                plural(s.pools.len(), "pool"),
                plural(members, "member")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// `switchyard cluster init -c NODE_FILE CONFIG_FILE`: the first
/// configuration of a cluster, written to etcd with no node running (a
/// node with nothing published has no admin API to publish through). The
/// node's file gives etcd's address, credentials and the prefix; the
/// configuration is checked exactly as the admin API checks a publish,
/// and written only if nothing is published yet (a compare-and-swap on
/// revision 0), so it can never overwrite a running cluster's.
fn cluster(args: &[String]) -> ExitCode {
    const USE: &str = "usage: switchyard cluster init -c NODE_FILE CONFIG_FILE";
    if args.first().map(String::as_str) != Some("init") {
        return fail(USE);
    }
    let args = &args[1..];
    let node_file = match config_arg(args) {
        Ok(Some(p)) => p,
        Ok(None) => return fail(USE),
        Err(e) => return fail(e),
    };
    // The one argument that is neither an option nor -c's file.
    let mut rest = args.iter();
    let mut config_file = None;
    while let Some(a) = rest.next() {
        match a.as_str() {
            "-c" | "--config" => {
                rest.next();
            }
            s if s.starts_with("--config=") => {}
            s if s.starts_with('-') => return fail(format!("unknown option {s:?}; {USE}")),
            s => config_file = Some(PathBuf::from(s)),
        }
    }
    let Some(config_file) = config_file else {
        return fail(USE);
    };
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|e| format!("{}: cannot read: {e}", p.display()))
    };
    let (node_text, text) = match (read(&node_file), read(&config_file)) {
        (Ok(n), Ok(t)) => (n, t),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let base = node_file
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let settings =
        match config::cluster_settings(&node_file.display().to_string(), &node_text, &base) {
            Ok(Some(s)) => s,
            Ok(None) => return fail(format!("{}: no [cluster] table", node_file.display())),
            Err(e) => return fail(e),
        };
    let node =
        switchyard::cluster::Node::detached(settings, &node_file.display().to_string(), &node_text);
    if let Err(e) = config::publish::check(&node, &text) {
        return fail(format!("{}: not published: {e}", config_file.display()));
    }
    let s = &node.settings;
    match switchyard::cluster::publish(s, &text, Some(0)) {
        Ok(Some(rev)) => {
            println!(
                "{}: published to cluster {:?} (etcd revision {rev}); nodes started with {} run it",
                config_file.display(),
                s.prefix,
                node_file.display()
            );
            ExitCode::SUCCESS
        }
        Ok(None) => fail(format!(
            "cluster {:?} already has a configuration: init writes only the first one; publish changes through a node (switchyard ctl cluster publish FILE)",
            s.prefix
        )),
        Err(e) => fail(format!("cluster {:?}: cannot publish: {e}", s.prefix)),
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn admin_call(args: &[String], method: &str, path: &str) -> ExitCode {
    let client = match switchyard::ctl::Client::from_args(args) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    match client.call(method, path, None) {
        Ok(a) if a.status == 200 => {
            print!("{}", a.body);
            ExitCode::SUCCESS
        }
        Ok(a) => {
            eprint!("{}", a.body);
            ExitCode::from(1)
        }
        Err(e) => fail(e),
    }
}
