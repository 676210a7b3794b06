//! Logging to stderr: one line per event, with a UTC timestamp.
//! `SWITCHYARD_LOG=debug` adds debug lines (rejected requests and the like).
//!
//! Why buffered: a worker that wrote its access and warning lines itself
//! took the process-wide stderr lock and made a `write(2)` per line, so a
//! slow terminal or a full pipe (a log shipper that falls behind) stalled
//! request handling, and workers queued on each other's lock. Now a line is
//! formatted into a buffer owned by the thread that logs it (behind a mutex
//! that only that thread and the log thread ever take, each for a memcpy or
//! a swap), and a dedicated log thread writes the buffers to stderr. If the
//! pipe is full it is the log thread that blocks, never a worker.
//!
//! - Latency: the first line into an empty buffer wakes the log thread
//!   (`Thread::unpark`: an atomic, plus a futex wake when it sleeps), which
//!   waits `BATCH` for more lines and writes them all in one `write`. A
//!   steady stream of lines is written every `BATCH` (2 ms); a line reaches
//!   stderr a few milliseconds after its event, which a client may observe
//!   first (tests wait for log lines rather than read them at once).
//! - Order: a thread's lines stay in order; the lines of one batch are
//!   merged from every thread by their timestamps. Lines never interleave:
//!   each record (a multi-line message too) is written whole.
//! - Bounded: past `MAX_BUFFERED` bytes waiting in one thread's buffer (the
//!   log thread cannot write fast enough), further lines of that thread are
//!   dropped and counted, and "N log lines dropped" is logged once the
//!   buffer drains.
//! - Nothing is lost on a clean exit: `flush` writes every buffer from the
//!   calling thread; `main` calls it before returning (after SIGTERM's drain,
//!   after a fatal error) and before writing an error message itself.

use std::cell::Cell;
use std::fmt::Arguments;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static DEBUG: AtomicBool = AtomicBool::new(false);

/// How long the log thread gathers lines after the first one wakes it.
const BATCH: Duration = Duration::from_millis(2);
/// Most bytes waiting in one thread's buffer; lines past it are dropped.
const MAX_BUFFERED: usize = 1 << 20;

pub fn init_from_env() {
    if std::env::var("SWITCHYARD_LOG").is_ok_and(|v| v.eq_ignore_ascii_case("debug")) {
        DEBUG.store(true, Ordering::Relaxed);
    }
}

/// One thread's lines waiting for the log thread.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Per record: its time (ms since the epoch, to merge threads) and where
    /// it ends in `bytes`.
    records: Vec<(u64, usize)>,
    /// Lines dropped because the buffer was full.
    dropped: u64,
}

/// A thread's buffer. Locked by its owner (to append) and the log thread
/// (to take it); never held across I/O.
type Buffer = Arc<Mutex<Pending>>;

struct Logger {
    /// Every thread's buffer, in the order threads first logged.
    buffers: Mutex<Vec<Buffer>>,
    /// The log thread, woken by the first line into an empty buffer.
    thread: Thread,
    /// Serialises writers of stderr output (the log thread and `flush`), so
    /// that a batch is never split by another.
    writing: Mutex<()>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// The logger, and its thread, started by the first line logged.
fn logger() -> &'static Logger {
    LOGGER.get_or_init(|| {
        // Only when the first line is written, before any client is
        // served: a process that cannot start a thread cannot serve either,
        // and the panic names why.
        #[allow(clippy::expect_used)]
        let handle = std::thread::Builder::new()
            .name("log".into())
            .spawn(|| {
                // Blocks until the initialisation that spawned us is done.
                let me = logger();
                loop {
                    // A timeout only as a safety net: every first line wakes
                    // us. Long, because an idle process should not wake.
                    std::thread::park_timeout(Duration::from_secs(60));
                    std::thread::sleep(BATCH);
                    me.write_out();
                }
            })
            .expect("cannot start the log thread");
        Logger {
            buffers: Mutex::new(Vec::new()),
            thread: handle.thread().clone(),
            writing: Mutex::new(()),
        }
    })
}

impl Logger {
    /// Takes every buffer's lines and writes them to stderr, merged by time.
    /// Blocks on stderr (a full pipe) here, not in the threads that log.
    fn write_out(&self) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let mut taken: Vec<Pending> = Vec::new();
        let mut dropped = 0;
        {
            let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
            // Buffers of threads that have exited (only this list holds
            // them) go once written.
            buffers.retain(|b| {
                let mut p = b.lock().unwrap_or_else(|e| e.into_inner());
                dropped += std::mem::take(&mut p.dropped);
                if !p.records.is_empty() {
                    taken.push(std::mem::take(&mut *p));
                }
                Arc::strong_count(b) > 1
            });
        }
        let mut out = Vec::with_capacity(taken.iter().map(|p| p.bytes.len()).sum());
        merge(&taken, &mut out);
        if dropped > 0 {
            format_record(
                &mut out,
                now_ms(),
                "warn",
                format_args!("{dropped} log lines dropped (stderr could not keep up)"),
            );
        }
        if !out.is_empty() {
            let _ = std::io::stderr().lock().write_all(&out);
        }
    }
}

/// Appends the records of every buffer to `out`, oldest first; a thread's
/// records keep their order.
fn merge(taken: &[Pending], out: &mut Vec<u8>) {
    let mut next = vec![0usize; taken.len()];
    loop {
        let mut best: Option<(u64, usize)> = None;
        for (i, p) in taken.iter().enumerate() {
            if let Some(&(t, _)) = p.records.get(next[i]) {
                if best.is_none_or(|(bt, _)| t < bt) {
                    best = Some((t, i));
                }
            }
        }
        let Some((_, i)) = best else { return };
        let p = &taken[i];
        let start = if next[i] == 0 {
            0
        } else {
            p.records[next[i] - 1].1
        };
        out.extend_from_slice(&p.bytes[start..p.records[next[i]].1]);
        next[i] += 1;
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

fn format_record(out: &mut Vec<u8>, ms: u64, level: &str, args: Arguments) {
    let secs = ms / 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let _ = writeln!(out, "{h:02}:{m:02}:{s:02}.{:03} {level} {args}", ms % 1000);
}

thread_local! {
    /// This thread's buffer, registered with the logger on first use.
    static MINE: Buffer = {
        let b = Buffer::default();
        logger().buffers.lock().unwrap_or_else(|e| e.into_inner()).push(b.clone());
        b
    };
    /// Set while this thread is inside `emit` (a `Display` that logs).
    static EMITTING: Cell<bool> = const { Cell::new(false) };
}

fn emit(level: &str, args: Arguments) {
    let ms = now_ms();
    let reentrant = EMITTING.with(|e| e.replace(true));
    let queued = !reentrant
        && MINE
            .try_with(|b| {
                let mut p = b.lock().unwrap_or_else(|e| e.into_inner());
                if p.bytes.len() >= MAX_BUFFERED {
                    p.dropped += 1;
                    return;
                }
                let was_empty = p.records.is_empty();
                format_record(&mut p.bytes, ms, level, args);
                let end = p.bytes.len();
                p.records.push((ms, end));
                drop(p);
                if was_empty {
                    logger().thread.unpark();
                }
            })
            .is_ok();
    if !reentrant {
        EMITTING.with(|e| e.set(false));
    }
    if !queued {
        // This thread is exiting (its buffer is gone) or logging from inside
        // a log call: write directly.
        let mut line = Vec::new();
        format_record(&mut line, ms, level, args);
        let _ = std::io::stderr().lock().write_all(&line);
    }
}

/// Writes every line logged so far, from the calling thread. Call before the
/// process exits and before writing to stderr directly.
pub fn flush() {
    if let Some(l) = LOGGER.get() {
        l.write_out();
    }
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

/// Whether debug lines are written (`SWITCHYARD_LOG=debug`): for a line
/// whose arguments cost something to gather.
pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

pub fn debug(args: Arguments) {
    if DEBUG.load(Ordering::Relaxed) {
        emit("debug", args);
    }
}

pub fn access(args: Arguments) {
    emit("access", args);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(records: &[(u64, &str)]) -> Pending {
        let mut p = Pending::default();
        for (t, text) in records {
            p.bytes.extend_from_slice(text.as_bytes());
            p.records.push((*t, p.bytes.len()));
        }
        p
    }

    #[test]
    fn threads_are_merged_by_time_and_keep_their_order() {
        let a = pending(&[(1, "a1\n"), (5, "a5\n"), (3, "a3 (clock stepped back)\n")]);
        let b = pending(&[(2, "b2\nsecond line of b2\n"), (4, "b4\n")]);
        let mut out = Vec::new();
        merge(&[a, b], &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a1\nb2\nsecond line of b2\nb4\na5\na3 (clock stepped back)\n"
        );
    }

    #[test]
    fn records_are_whole_lines_with_a_stamp() {
        let mut out = Vec::new();
        format_record(&mut out, 3_723_004, "warn", format_args!("x {}", 1));
        assert_eq!(String::from_utf8(out).unwrap(), "01:02:03.004 warn x 1\n");
    }
}
