//! Minimal logging to stderr: one line per event, with a UTC timestamp.
//! `SWITCHYARD_LOG=debug` adds debug lines (rejected requests and the like).

use std::fmt::Arguments;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static DEBUG: AtomicBool = AtomicBool::new(false);

pub fn init_from_env() {
    if std::env::var("SWITCHYARD_LOG").is_ok_and(|v| v.eq_ignore_ascii_case("debug")) {
        DEBUG.store(true, Ordering::Relaxed);
    }
}

fn stamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    format!("{h:02}:{m:02}:{s:02}.{:03}", d.subsec_millis())
}

fn emit(level: &str, args: Arguments) {
    let line = format!("{} {level} {args}\n", stamp());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

pub fn info(args: Arguments) {
    emit("info", args);
}

pub fn warn(args: Arguments) {
    emit("warn", args);
}

pub fn error(args: Arguments) {
    emit("error", args);
}

pub fn debug(args: Arguments) {
    if DEBUG.load(Ordering::Relaxed) {
        emit("debug", args);
    }
}

pub fn access(args: Arguments) {
    emit("access", args);
}
