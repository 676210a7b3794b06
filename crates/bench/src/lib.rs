//! `switchyard bench`: the reports' test methodology as one command.
//!
//! Subcommands: `origin` (origin emulator), `load` (load generator),
//! `compare` (scenarios against several devices under test, with a report),
//! `report` (rebuild a report folder from its report.json), `scenarios`.

pub mod args;
pub mod cli_load;
pub mod client;
pub mod content;
pub mod hist;
pub mod json;
pub mod load;
pub mod origin;
pub mod sys;

const HELP: &str = "usage: switchyard bench <command> [options]
  origin    --listen ADDR [--listen ADDR] [--delay-ms N] [--threads N]
  load      --url URL --connections N --duration 10s [--rate N] ... (load --help)
  compare   --targets switchyard,haproxy,nginx --scenario l7-rps [--runs 3] [--quick] [--out DIR]
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
