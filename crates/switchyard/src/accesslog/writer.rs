//! Where lines go: stdout, stderr, a file, or syslog (RFC 5424 over UDP or
//! a unix datagram socket), written by one dedicated thread.
//!
//! The design is `log.rs`'s: a worker renders its line into a buffer owned
//! by its thread (behind a mutex only that thread and the writer take, each
//! for an append or a swap), and the writer thread takes every buffer and
//! writes them out. A slow disk, a full pipe or a syslog daemon that falls
//! behind stalls the writer, never a worker.
//!
//! - Bounded: past `MAX_BUFFERED` bytes waiting in one thread's buffer,
//!   further lines of that thread are dropped and counted; so are lines a
//!   sink failed to take (a file that cannot be opened, a syslog socket
//!   that refuses). `dropped_total` has the sum; the writer logs a warning
//!   with the count, at most every few seconds.
//! - Rotation: `reopen` (SIGUSR1) bumps a generation every record carries.
//!   The writer writes the records logged before the bump to the file it
//!   has open, then reopens the path, then writes the rest: after
//!   logrotate's rename and SIGUSR1, lines logged before the signal are in
//!   the old file, lines after it in the new one, and none is lost.
//! - Sinks are shared: vservers (and successive configurations) naming the
//!   same target share one sink, so a reload that keeps a path keeps its
//!   file open; a sink no configuration holds any more is closed once its
//!   last lines are written.
//! - `flush` writes everything from the calling thread (at exit).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::log;

/// How long the writer gathers lines after the first one wakes it.
const BATCH: Duration = Duration::from_millis(5);
/// Most bytes waiting in one thread's buffer; lines past it are dropped.
const MAX_BUFFERED: usize = 4 << 20;
/// Least time between two warnings about one sink's failures or drops.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Where a sink writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Stdout,
    Stderr,
    File(PathBuf),
    Syslog(Syslog),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Syslog {
    pub to: SyslogAddr,
    /// 0 (kern) to 23 (local7).
    pub facility: u8,
    /// RFC 5424 APP-NAME: 1 to 48 printable ASCII characters.
    pub app_name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyslogAddr {
    Udp(SocketAddr),
    Unix(PathBuf),
}

/// A sink as configurations hold it. Its lines go to `target`.
#[derive(Debug)]
pub struct SinkHandle {
    id: u32,
    pub target: Target,
}

struct Registered {
    id: u32,
    target: Target,
    handle: Weak<SinkHandle>,
}

/// Every sink a configuration made, alive or not yet closed by the writer.
static SINKS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU32 = AtomicU32::new(1);
/// Bumped by `reopen`; records carry the value current when logged.
static GENERATION: AtomicU32 = AtomicU32::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The sink for `target`: the one already open when a configuration holds
/// it (a reload keeps the file), else a new one (opened at its first line).
pub fn sink(target: Target) -> Arc<SinkHandle> {
    let mut sinks = SINKS.lock().unwrap_or_else(|e| e.into_inner());
    for r in sinks.iter() {
        if r.target == target {
            if let Some(h) = r.handle.upgrade() {
                return h;
            }
        }
    }
    let h = Arc::new(SinkHandle {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        target: target.clone(),
    });
    sinks.push(Registered {
        id: h.id,
        target,
        handle: Arc::downgrade(&h),
    });
    h
}

/// Reopens every file sink (logrotate's SIGUSR1), after the lines logged
/// so far are written to the files open now.
pub fn reopen() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(w) = WRITER.get() {
        w.thread.unpark();
    }
}

/// Lines dropped since start: buffers full, or a sink that failed.
pub fn dropped_total() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Writes every line logged so far, from the calling thread (at exit).
pub fn flush() {
    if let Some(w) = WRITER.get() {
        w.round();
    }
}

struct Rec {
    sink: u32,
    generation: u32,
    /// Wall-clock time of the event (µs since the epoch), for syslog.
    time_us: u64,
    /// Where the line ends in `bytes` (its newline included).
    end: usize,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    records: Vec<Rec>,
    dropped: u64,
}

type Buffer = Arc<Mutex<Pending>>;

struct Writer {
    buffers: Mutex<Vec<Buffer>>,
    /// Open outputs by sink id; held for a whole round (the writer thread
    /// and `flush` serialise on it).
    outputs: Mutex<HashMap<u32, Output>>,
    thread: Thread,
}

static WRITER: OnceLock<Writer> = OnceLock::new();

fn writer() -> &'static Writer {
    WRITER.get_or_init(|| {
        // Only when the first line is written, before any client is
        // served: a process that cannot start a thread cannot serve either,
        // and the panic names why.
        #[allow(clippy::expect_used)]
        let handle = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(|| {
                let me = writer();
                loop {
                    std::thread::park_timeout(Duration::from_secs(1));
                    std::thread::sleep(BATCH);
                    me.round();
                }
            })
            .expect("cannot start the access-log thread");
        Writer {
            buffers: Mutex::new(Vec::new()),
            outputs: Mutex::new(HashMap::new()),
            thread: handle.thread().clone(),
        }
    })
}

thread_local! {
    static MINE: Buffer = {
        let b = Buffer::default();
        writer().buffers.lock().unwrap_or_else(|e| e.into_inner()).push(b.clone());
        b
    };
}

/// Queues one line for `sink`: `render` writes it (newline included) into
/// this thread's buffer. Never blocks on I/O; drops (and counts) the line
/// when the buffer is full.
pub fn push(sink: &SinkHandle, time_us: u64, render: impl FnOnce(&mut Vec<u8>)) {
    let queued = MINE.try_with(|b| {
        let mut p = b.lock().unwrap_or_else(|e| e.into_inner());
        if p.bytes.len() >= MAX_BUFFERED {
            p.dropped += 1;
            return;
        }
        let was_empty = p.records.is_empty();
        render(&mut p.bytes);
        let end = p.bytes.len();
        p.records.push(Rec {
            sink: sink.id,
            generation: GENERATION.load(Ordering::Acquire),
            time_us,
            end,
        });
        drop(p);
        if was_empty {
            writer().thread.unpark();
        }
    });
    if queued.is_err() {
        // The thread is exiting: its buffer is gone.
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// One sink's open output, owned by the writer.
struct Output {
    target: Target,
    file: Option<File>,
    udp: Option<UdpSocket>,
    unix: Option<UnixDatagram>,
    /// The generation the file was opened at.
    generation: u32,
    /// Lines lost to failures since the last warning, and when that was.
    failed: u64,
    last_warn: Option<Instant>,
    why: String,
}

/// A line's place in the buffers taken this round.
struct Line<'a> {
    bytes: &'a [u8],
    time_us: u64,
    /// Logged before the current generation (goes to the file open now).
    old: bool,
}

impl Writer {
    /// Takes every thread's lines and writes them to their sinks.
    fn round(&self) {
        let mut outputs = self.outputs.lock().unwrap_or_else(|e| e.into_inner());
        // Sinks no configuration holds, found before the buffers are
        // taken: every line for them is in the buffers already.
        let dead: Vec<(u32, Target)> = SINKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| r.handle.strong_count() == 0)
            .map(|r| (r.id, r.target.clone()))
            .collect();
        let mut taken: Vec<Pending> = Vec::new();
        let mut dropped = 0;
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|b| {
                let mut p = b.lock().unwrap_or_else(|e| e.into_inner());
                dropped += std::mem::take(&mut p.dropped);
                if !p.records.is_empty() {
                    taken.push(std::mem::take(&mut *p));
                }
                Arc::strong_count(b) > 1
            });
        let generation = GENERATION.load(Ordering::Acquire);
        let mut by_sink: HashMap<u32, Vec<Line>> = HashMap::new();
        for p in &taken {
            let mut start = 0;
            for r in &p.records {
                by_sink.entry(r.sink).or_default().push(Line {
                    bytes: &p.bytes[start..r.end],
                    time_us: r.time_us,
                    old: r.generation < generation,
                });
                start = r.end;
            }
        }
        for (id, lines) in by_sink {
            let out = match outputs.get_mut(&id) {
                Some(o) => o,
                None => {
                    let target = SINKS
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .find(|r| r.id == id)
                        .map(|r| r.target.clone());
                    let Some(target) = target else {
                        dropped += lines.len() as u64;
                        continue;
                    };
                    outputs
                        .entry(id)
                        .or_insert_with(|| Output::new(target, generation))
                }
            };
            out.write(&lines, generation);
        }
        for o in outputs.values_mut() {
            // A sink with no line this round still follows a reopen, so
            // its next line goes to the new file.
            if o.generation < generation {
                o.reopen(generation);
            }
            o.warn_failures();
        }
        if !dead.is_empty() {
            for (id, _) in &dead {
                outputs.remove(id);
            }
            SINKS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|r| !dead.iter().any(|(id, _)| *id == r.id));
        }
        if dropped > 0 {
            DROPPED.fetch_add(dropped, Ordering::Relaxed);
            log::warn(format_args!(
                "{dropped} access log lines dropped (the access-log writer could not keep up)"
            ));
        }
    }
}

impl Output {
    fn new(target: Target, generation: u32) -> Output {
        Output {
            target,
            file: None,
            udp: None,
            unix: None,
            generation,
            failed: 0,
            last_warn: None,
            why: String::new(),
        }
    }

    fn reopen(&mut self, generation: u32) {
        // Closed now; opened again (at the configured path) by the next line.
        self.file = None;
        self.unix = None;
        self.generation = generation;
    }

    fn write(&mut self, lines: &[Line], generation: u32) {
        let (old, new): (Vec<&Line>, Vec<&Line>) = lines.iter().partition(|l| l.old);
        if self.generation < generation {
            self.write_all(&old);
            self.reopen(generation);
            self.write_all(&new);
        } else {
            self.write_all(&lines.iter().collect::<Vec<_>>());
        }
    }

    fn fail(&mut self, lines: usize, why: String) {
        self.failed += lines as u64;
        DROPPED.fetch_add(lines as u64, Ordering::Relaxed);
        self.why = why;
    }

    fn warn_failures(&mut self) {
        if self.failed == 0 || self.last_warn.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        log::warn(format_args!(
            "access log {}: {} lines lost: {}",
            describe(&self.target),
            self.failed,
            self.why
        ));
        self.failed = 0;
        self.last_warn = Some(Instant::now());
    }

    fn write_all(&mut self, lines: &[&Line]) {
        if lines.is_empty() {
            return;
        }
        let joined = || {
            let mut v = Vec::with_capacity(lines.iter().map(|l| l.bytes.len()).sum());
            for l in lines {
                v.extend_from_slice(l.bytes);
            }
            v
        };
        match &self.target {
            Target::Stdout => {
                let mut o = std::io::stdout().lock();
                if let Err(e) = o.write_all(&joined()).and_then(|_| o.flush()) {
                    self.fail(lines.len(), format!("stdout: {e}"));
                }
            }
            Target::Stderr => {
                if let Err(e) = std::io::stderr().lock().write_all(&joined()) {
                    self.fail(lines.len(), format!("stderr: {e}"));
                }
            }
            Target::File(path) => {
                if self.file.is_none() {
                    match std::fs::OpenOptions::new()
                        .append(true)
                        .create(true)
                        .open(path)
                    {
                        Ok(f) => self.file = Some(f),
                        Err(e) => {
                            let why = format!("cannot open {}: {e}", path.display());
                            return self.fail(lines.len(), why);
                        }
                    }
                }
                if let Some(f) = &mut self.file {
                    if let Err(e) = f.write_all(&joined()) {
                        let why = format!("cannot write {}: {e}", path.display());
                        self.file = None;
                        self.fail(lines.len(), why);
                    }
                }
            }
            Target::Syslog(s) => {
                let s = s.clone();
                self.syslog(&s, lines);
            }
        }
    }

    fn syslog(&mut self, s: &Syslog, lines: &[&Line]) {
        let mut msg = Vec::with_capacity(512);
        let mut failed = 0;
        let mut why = String::new();
        for l in lines {
            msg.clear();
            rfc5424(&mut msg, s, l);
            let sent = match &s.to {
                SyslogAddr::Udp(addr) => {
                    if self.udp.is_none() {
                        let local: SocketAddr = if addr.is_ipv4() {
                            ([0u8; 4], 0).into()
                        } else {
                            ([0u16; 8], 0).into()
                        };
                        self.udp = UdpSocket::bind(local)
                            .and_then(|u| u.connect(addr).map(|_| u))
                            .map_err(|e| why = format!("UDP socket: {e}"))
                            .ok();
                    }
                    match &self.udp {
                        Some(u) => u.send(&msg).map(|_| ()),
                        None => Err(std::io::ErrorKind::NotConnected.into()),
                    }
                }
                SyslogAddr::Unix(path) => {
                    if self.unix.is_none() {
                        self.unix = UnixDatagram::unbound()
                            .and_then(|u| {
                                u.set_write_timeout(Some(Duration::from_millis(100)))?;
                                Ok(u)
                            })
                            .map_err(|e| why = format!("unix socket: {e}"))
                            .ok();
                    }
                    match &self.unix {
                        Some(u) => u.send_to(&msg, path).map(|_| ()),
                        None => Err(std::io::ErrorKind::NotConnected.into()),
                    }
                }
            };
            if let Err(e) = sent {
                failed += 1;
                if why.is_empty() {
                    why = format!("send: {e}");
                }
            }
        }
        if failed > 0 {
            self.fail(failed, why);
        }
    }
}

/// A sink as an operator names it in messages.
fn describe(t: &Target) -> String {
    match t {
        Target::Stdout => "stdout".into(),
        Target::Stderr => "stderr".into(),
        Target::File(p) => format!("file:{}", p.display()),
        Target::Syslog(Syslog {
            to: SyslogAddr::Udp(a),
            ..
        }) => format!("syslog:udp:{a}"),
        Target::Syslog(Syslog {
            to: SyslogAddr::Unix(p),
            ..
        }) => format!("syslog:unix:{}", p.display()),
    }
}

/// The machine's name for RFC 5424's HOSTNAME ("-" when unknown).
fn hostname() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut b = [0u8; 256];
        // SAFETY: `b` is writable for b.len() bytes; gethostname writes a
        // NUL-terminated name (truncated to the buffer).
        let r = unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len() - 1) };
        let n = b.iter().position(|&c| c == 0).unwrap_or(0);
        match std::str::from_utf8(&b[..n]) {
            Ok(s) if r == 0 && !s.is_empty() && s.bytes().all(|c| (33..127).contains(&c)) => {
                s.to_string()
            }
            _ => "-".to_string(),
        }
    })
}

/// `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID - MSG` (RFC 5424
/// section 6), severity informational, MSGID "access", no structured data.
fn rfc5424(out: &mut Vec<u8>, s: &Syslog, l: &Line) {
    let pri = u32::from(s.facility) * 8 + 6;
    let _ = write!(out, "<{pri}>1 ");
    super::format::rfc5424_time(out, l.time_us);
    let _ = write!(
        out,
        " {} {} {} access - ",
        hostname(),
        s.app_name,
        std::process::id()
    );
    out.extend_from_slice(l.bytes.strip_suffix(b"\n").unwrap_or(l.bytes));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_messages_follow_rfc5424() {
        let s = Syslog {
            to: SyslogAddr::Udp(([127, 0, 0, 1], 514).into()),
            facility: 23,
            app_name: "switchyard".into(),
        };
        let l = Line {
            bytes: b"hello world\n",
            time_us: 971_186_136_000_042,
            old: false,
        };
        let mut out = Vec::new();
        rfc5424(&mut out, &s, &l);
        let text = String::from_utf8(out).expect("utf-8");
        let expect = format!(
            "<190>1 2000-10-10T13:55:36.000042Z {} switchyard {} access - hello world",
            hostname(),
            std::process::id()
        );
        assert_eq!(text, expect);
    }

    #[test]
    fn a_target_has_one_sink_while_it_is_held() {
        let t = Target::File("/nonexistent/a.log".into());
        let a = sink(t.clone());
        let b = sink(t.clone());
        assert!(Arc::ptr_eq(&a, &b));
        let other = sink(Target::File("/nonexistent/b.log".into()));
        assert_ne!(a.id, other.id);
        let id = a.id;
        drop((a, b));
        assert_ne!(sink(t).id, id);
    }

    #[test]
    fn lines_logged_before_a_reopen_go_to_the_old_file() {
        let dir = std::env::temp_dir().join(format!("sy-accesslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("a.log");
        let h = sink(Target::File(path.clone()));
        push(&h, 1, |b| b.extend_from_slice(b"one\n"));
        flush();
        let rotated = dir.join("a.log.1");
        std::fs::rename(&path, &rotated).expect("rename");
        push(&h, 2, |b| b.extend_from_slice(b"two\n"));
        reopen();
        push(&h, 3, |b| b.extend_from_slice(b"three\n"));
        flush();
        assert_eq!(
            std::fs::read_to_string(&rotated).expect("old"),
            "one\ntwo\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "three\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
