//! `switchyard bench`: the reports' test methodology as one command.
//!
//! Subcommands: `origin` (origin emulator), `load` (load generator),
//! `compare` (scenarios against several devices under test, with a report),
//! `headroom` (the load generator against wrk),
//! `l4` (the L4 figures: tcp and udp vservers against HAProxy and nginx),
//! `shield` (the XDP shield's figures against the kernel and nftables),
//! `report` (rebuild a report folder from its report.json), `scenarios`.

pub mod args;
pub mod cli_load;
pub mod client;
pub mod compare;
pub mod content;
pub mod dut;
pub mod headroom;
pub mod hist;
pub mod json;
pub mod l4;
pub mod load;
pub mod origin;
pub mod peers;
pub mod pktgen;
pub mod report;
pub mod scenario;
pub mod shield;
pub mod sys;
pub mod tls;
pub mod udp_io;
pub mod waf;

const HELP: &str = "usage: switchyard bench <command> [options]
  origin    --listen ADDR [--listen ADDR] [--delay-ms N] [--threads N]
  load      --url URL --connections N --duration 10s [--rate N] ... (load --help)
  compare   --targets switchyard,haproxy,nginx[,haproxy28,nginx131,envoy,pingora,caddy] --scenario l7-rps[,report-004] [--runs 3] [--quick] [--out DIR]
  headroom  our load generator against wrk on the origin emulator: is the generator fast enough? (headroom --help)
  l4        L4 tcp/udp vservers against haproxy and nginx stream: cps, throughput, udp, iperf3, wrk (l4 --help)
  shield    the XDP shield against the kernel and nftables: syn-flood, acl, ddos (shield --help; root)
  report    --from DIR/report.json [--out DIR]
  scenarios list the scenarios and what each target can run";

/// Entry point for `switchyard bench ARGS...`; returns the process exit code.
pub fn main_with_args(args: Vec<String>) -> i32 {
    let Some(cmd) = args.first() else {
        eprintln!("{HELP}");
        return 2;
    };
    let rest = &args[1..];
    let r = match cmd.as_str() {
        "origin" => origin::cli(rest),
        "load" => cli_load::cli(rest),
        "compare" => compare::cli(rest),
        "headroom" => headroom::cli(rest),
        "l4" => l4::cli(rest),
        "shield" => shield::cli(rest),
        "report" => report::cli(rest),
        "scenarios" => scenarios_cli(rest),
        "help" | "--help" | "-h" => {
            println!("{HELP}");
            Ok(0)
        }
        other => Err(format!("unknown command {other}\n{HELP}")),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("switchyard bench: {e}");
            2
        }
    }
}

fn scenarios_cli(args: &[String]) -> Result<i32, String> {
    let mut a = args::Args::parse(args, &[])?;
    let names = a.list("targets");
    a.finish()?;
    let names = if names.is_empty() {
        vec!["switchyard".to_string(), "haproxy".into(), "nginx".into()]
    } else {
        names
    };
    let mut targets = Vec::new();
    for n in &names {
        match dut::resolve(n, None) {
            Ok(t) => targets.push(t),
            Err(e) => println!("{n}: {e}"),
        }
    }
    let timing = scenario::Timing::new(true);
    for (name, what) in scenario::SCENARIOS {
        println!("{name:15} {what}");
        let cases = scenario::cases(name, &timing, 1000)?;
        for t in &targets {
            let skip_all = cases.iter().find_map(|c| c.skip_all.clone());
            let mut missing: Vec<&str> = cases
                .iter()
                .flat_map(|c| c.needs.iter())
                .filter(|c| !t.caps.contains(c))
                .map(|c| c.name())
                .collect();
            missing.dedup();
            let verdict = match (skip_all, missing.is_empty()) {
                (Some(r), _) => format!("skipped: {r}"),
                (None, true) => "runs".to_string(),
                (None, false) => format!("partly or not: lacks {}", missing.join(", ")),
            };
            println!("{:15}   {:10} {verdict}", "", t.name);
        }
    }
    Ok(0)
}
