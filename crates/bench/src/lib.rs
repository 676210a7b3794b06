//! `switchyard bench`: the reports' test methodology as one command.

/// Entry point for `switchyard bench ARGS...`; returns the process exit code.
pub fn main_with_args(args: Vec<String>) -> i32 {
    eprintln!("switchyard bench: not built yet ({args:?})");
    2
}
