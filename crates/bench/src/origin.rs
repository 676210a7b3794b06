//! Origin emulator: a fast HTTP/1.1 keep-alive server that serves the
//! reports' objects by path and counts what it sees, so that a benchmark can
//! check what the proxy forwarded and compute the multiplexing ratio
//! (client connections / server connections).
//!
//! Paths: `/size/<n>`, `/images/...<n>`, `/obj/<n>[k|m][.html]` (an object of
//! that size), `/html/<n>` (a realistic HTML page of that size), `/status/<code>` (that status), `/corrupt/<n>` (a body that
//! does not match its X-Body-Sum, to test the client's checks),
//! `/__origin/stats` (the counters as JSON). `?delay=<ms>` delays one answer.
//! A request carrying `X-Body-Sum` has its body checked; a mismatch is
//! answered 422 and counted.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::content::{self, Sum};
use crate::json::obj;

#[derive(Clone, Debug)]
pub struct OriginOpts {
    /// Added before every response (server think time).
    pub delay: Duration,
    /// Serving threads, each with its own current-thread runtime and its own
    /// SO_REUSEPORT listener per address.
    pub threads: usize,
    /// Pin serving thread i to `cpus[i % len]`.
    pub cpus: Vec<usize>,
}

impl Default for OriginOpts {
    fn default() -> Self {
        OriginOpts {
            delay: Duration::ZERO,
            threads: 1,
            cpus: Vec::new(),
        }
    }
}

/// One thread's counters, padded so two threads never share a cache line.
#[repr(align(128))]
#[derive(Default)]
struct Counters {
    conns_accepted: AtomicU64,
    /// Connections open now, and integrated over time
    /// (`OriginStats::conns_open`, `OriginStats::conn_us`).
    open_time: std::sync::Mutex<OpenTime>,
    requests: AtomicU64,
    bytes_out: AtomicU64,
    xff_seen: AtomicU64,
    posts: AtomicU64,
    body_checked: AtomicU64,
    body_bad: AtomicU64,
    bad_requests: AtomicU64,
}

/// The integral of a thread's open connections over time, brought up to
/// date at every open and close (and at each snapshot).
#[derive(Default)]
struct OpenTime {
    area_us: u64,
    open: u64,
    since_us: u64,
}

impl OpenTime {
    fn at(&mut self, now_us: u64) -> u64 {
        self.area_us += self.open * now_us.saturating_sub(self.since_us);
        self.since_us = self.since_us.max(now_us);
        self.area_us
    }
}

/// A snapshot of the origin's counters, summed over its threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OriginStats {
    pub conns_accepted: u64,
    /// Connections open at the moment of the snapshot.
    pub conns_open: i64,
    /// Open connections integrated over time (connection-microseconds),
    /// and when the snapshot was taken (µs since the origin started):
    /// their differences give the mean open count over a window, however
    /// short-lived the connections (a per-second sample can miss them all).
    pub conn_us: u64,
    pub at_us: u64,
    pub requests: u64,
    pub bytes_out: u64,
    /// Requests that carried X-Forwarded-For (a proxy added it).
    pub xff_seen: u64,
    pub posts: u64,
    /// Requests whose body was checked against X-Body-Sum, and those that failed.
    pub body_checked: u64,
    pub body_bad: u64,
    pub bad_requests: u64,
}

impl OriginStats {
    pub fn to_json(&self) -> crate::json::Json {
        obj()
            .set("conns_accepted", self.conns_accepted)
            .set("conns_open", self.conns_open)
            .set("requests", self.requests)
            .set("bytes_out", self.bytes_out)
            .set("xff_seen", self.xff_seen)
            .set("posts", self.posts)
            .set("body_checked", self.body_checked)
            .set("body_bad", self.body_bad)
            .set("bad_requests", self.bad_requests)
    }
    pub fn since(&self, before: &OriginStats) -> OriginStats {
        OriginStats {
            conns_accepted: self.conns_accepted - before.conns_accepted,
            conns_open: self.conns_open,
            conn_us: self.conn_us.saturating_sub(before.conn_us),
            at_us: self.at_us.saturating_sub(before.at_us),
            requests: self.requests - before.requests,
            bytes_out: self.bytes_out - before.bytes_out,
            xff_seen: self.xff_seen - before.xff_seen,
            posts: self.posts - before.posts,
            body_checked: self.body_checked - before.body_checked,
            body_bad: self.body_bad - before.body_bad,
            bad_requests: self.bad_requests - before.bad_requests,
        }
    }
}

struct Shared {
    counters: Vec<Counters>,
    epoch: Instant,
    /// Milliseconds since `epoch` until which no response is sent (0: none).
    stall_until_ms: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn snapshot(&self) -> OriginStats {
        let mut s = OriginStats {
            at_us: self.now_us(),
            ..OriginStats::default()
        };
        for c in &self.counters {
            if let Ok(mut t) = c.open_time.lock() {
                s.conn_us += t.at(s.at_us);
                s.conns_open += t.open as i64;
            }
            s.conns_accepted += c.conns_accepted.load(Relaxed);
            s.requests += c.requests.load(Relaxed);
            s.bytes_out += c.bytes_out.load(Relaxed);
            s.xff_seen += c.xff_seen.load(Relaxed);
            s.posts += c.posts.load(Relaxed);
            s.body_checked += c.body_checked.load(Relaxed);
            s.body_bad += c.body_bad.load(Relaxed);
            s.bad_requests += c.bad_requests.load(Relaxed);
        }
        s
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

/// A running origin; stops (and joins its threads) on drop.
pub struct OriginHandle {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
    wakers: Vec<Arc<tokio::sync::Notify>>,
}

impl OriginHandle {
    /// The bound addresses (with real ports when port 0 was asked for).
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
    pub fn stats(&self) -> OriginStats {
        self.shared.snapshot()
    }
    /// Holds every response for `d` from now: a server-side stall, to test
    /// that open-loop latency accounts for coordinated omission.
    pub fn stall(&self, d: Duration) {
        let until = self.shared.epoch.elapsed() + d;
        self.shared
            .stall_until_ms
            .store(until.as_millis() as u64, Relaxed);
    }
    pub fn stop(self) {}
}

impl Drop for OriginHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        for w in &self.wakers {
            w.notify_one();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn bind_reuseport(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.set_reuseport(true)?;
    sock.bind(addr)?;
    let fd = sock.into_raw_fd();
    // SAFETY: fd is a bound socket we own; ownership passes to the listener.
    unsafe {
        if libc::listen(fd, 8192) != 0 {
            let e = io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        Ok(std::net::TcpListener::from_raw_fd(fd))
    }
}

/// Starts an origin on its own threads. Port 0 picks a free port (shared by
/// all threads); see [`OriginHandle::addrs`].
pub fn spawn_origin(addrs: &[SocketAddr], opts: OriginOpts) -> io::Result<OriginHandle> {
    let threads = opts.threads.max(1);
    // listeners[thread][addr]
    let mut listeners: Vec<Vec<std::net::TcpListener>> = (0..threads).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    for &a in addrs {
        let first = bind_reuseport(a)?;
        let real = first.local_addr()?;
        bound.push(real);
        first.set_nonblocking(true)?;
        listeners[0].push(first);
        for l in listeners.iter_mut().skip(1) {
            let x = bind_reuseport(real)?;
            x.set_nonblocking(true)?;
            l.push(x);
        }
    }
    let shared = Arc::new(Shared {
        counters: (0..threads).map(|_| Counters::default()).collect(),
        epoch: Instant::now(),
        stall_until_ms: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let mut handles = Vec::new();
    let mut wakers = Vec::new();
    for (i, ls) in listeners.into_iter().enumerate() {
        let shared = shared.clone();
        let opts = opts.clone();
        let waker = Arc::new(tokio::sync::Notify::new());
        wakers.push(waker.clone());
        let h = std::thread::Builder::new()
            .name(format!("origin-{i}"))
            .spawn(move || {
                if !opts.cpus.is_empty() {
                    let _ = crate::sys::pin_current_thread(opts.cpus[i % opts.cpus.len()]);
                }
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        eprintln!("origin: runtime: {e}");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    for l in ls {
                        let addr = l.local_addr().ok();
                        let l = match TcpListener::from_std(l) {
                            Ok(l) => l,
                            Err(e) => {
                                eprintln!("origin: listener: {e}");
                                continue;
                            }
                        };
                        let ctx = Rc::new(Ctx {
                            shared: shared.clone(),
                            idx: i,
                            delay: opts.delay,
                            x_origin: addr.map(|a| a.to_string()).unwrap_or_default(),
                            sums: RefCell::new(HashMap::new()),
                        });
                        tokio::task::spawn_local(accept_loop(l, ctx));
                    }
                    while !shared.stop.load(Relaxed) {
                        waker.notified().await;
                    }
                });
            })?;
        handles.push(h);
    }
    Ok(OriginHandle {
        shared,
        addrs: bound,
        threads: handles,
        wakers,
    })
}

struct Ctx {
    shared: Arc<Shared>,
    idx: usize,
    delay: Duration,
    x_origin: String,
    /// Checksums of the objects served so far, by (realistic HTML, size).
    sums: RefCell<HashMap<(bool, u64), u64>>,
}

impl Ctx {
    fn c(&self) -> &Counters {
        &self.shared.counters[self.idx]
    }
    /// A connection opened (or closed): the open-time integral moves on.
    fn open_change(&self, opened: bool) {
        let now = self.shared.now_us();
        if let Ok(mut t) = self.c().open_time.lock() {
            t.at(now);
            t.open = if opened {
                t.open + 1
            } else {
                t.open.saturating_sub(1)
            };
        }
    }
    fn sum_of(&self, path: &str, n: u64) -> u64 {
        *self
            .sums
            .borrow_mut()
            .entry((path.starts_with("/html/"), n))
            .or_insert_with(|| Sum::of(&content::object(path, n)))
    }
}

async fn accept_loop(l: TcpListener, ctx: Rc<Ctx>) {
    loop {
        match l.accept().await {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                ctx.c().conns_accepted.fetch_add(1, Relaxed);
                ctx.open_change(true);
                let ctx = ctx.clone();
                tokio::task::spawn_local(async move {
                    let _ = serve_conn(s, &ctx).await;
                    ctx.open_change(false);
                });
            }
            Err(_) => {
                // Out of file descriptors and the like: back off, don't spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// What the origin needs from one parsed request.
struct Req {
    head_len: usize,
    method_head: bool,
    is_post: bool,
    path: String,
    content_length: Option<usize>,
    chunked: bool,
    close: bool,
    xff: bool,
    body_sum: Option<u64>,
}

const MAX_REQUEST: usize = 64 << 20;

/// The freshness every response carries (`Cache-Control: public,
/// max-age=...`): longer than a whole run with the reports' phases (960 s),
/// so a cache (the caching scenario) stores each object by the response's
/// own freshness and never refreshes it during a run.
pub const MAX_AGE: u64 = 3600;

fn parse_head(buf: &[u8]) -> Result<Option<Req>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut r = httparse::Request::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let method = r.method.unwrap_or("GET");
    let mut req = Req {
        head_len,
        method_head: method == "HEAD",
        is_post: method == "POST" || method == "PUT",
        path: r.path.unwrap_or("/").to_string(),
        content_length: None,
        chunked: false,
        close: r.version == Some(0),
        xff: false,
        body_sum: None,
    };
    for h in r.headers.iter() {
        let n = h.name;
        if n.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).map_err(|_| ())?;
            req.content_length = Some(v.trim().parse().map_err(|_| ())?);
        } else if n.eq_ignore_ascii_case("transfer-encoding") {
            req.chunked = h.value.eq_ignore_ascii_case(b"chunked");
        } else if n.eq_ignore_ascii_case("connection") {
            if h.value.eq_ignore_ascii_case(b"close") {
                req.close = true;
            } else if h.value.eq_ignore_ascii_case(b"keep-alive") {
                req.close = false;
            }
        } else if n.eq_ignore_ascii_case("x-forwarded-for") {
            req.xff = true;
        } else if n.eq_ignore_ascii_case("x-body-sum") {
            req.body_sum = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
        }
    }
    Ok(Some(req))
}

/// Decodes a chunked body starting at `buf[0]`. Ok(None): need more bytes.
/// Returns (bytes consumed, decoded body).
fn dechunk(buf: &[u8]) -> Result<Option<(usize, Vec<u8>)>, ()> {
    let mut pos = 0;
    let mut body = Vec::new();
    loop {
        let Some(eol) = buf[pos..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&buf[pos..pos + eol]).map_err(|_| ())?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(hex, 16).map_err(|_| ())?;
        if n > MAX_REQUEST {
            return Err(());
        }
        pos += eol + 2;
        if n == 0 {
            // Trailers end with an empty line.
            loop {
                let Some(e) = buf[pos..].windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                pos += e + 2;
                if e == 0 {
                    return Ok(Some((pos, body)));
                }
            }
        }
        if buf.len() < pos + n + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[pos..pos + n]);
        pos += n + 2;
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn query_delay(path: &str) -> Option<Duration> {
    let q = path.split_once('?')?.1;
    q.split('&')
        .find_map(|kv| kv.strip_prefix("delay="))
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
}

async fn serve_conn(mut s: TcpStream, ctx: &Ctx) -> io::Result<()> {
    let mut inb: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut start = 0usize;
    loop {
        // Answer every complete request already buffered (pipelining), then
        // flush once: one write per batch keeps the origin cheap.
        loop {
            let req = match parse_head(&inb[start..]) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(()) => {
                    ctx.c().bad_requests.fetch_add(1, Relaxed);
                    out.extend_from_slice(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    s.write_all(&out).await?;
                    return Ok(());
                }
            };
            let body_start = start + req.head_len;
            let (consumed, body): (usize, std::borrow::Cow<[u8]>) = if req.chunked {
                match dechunk(&inb[body_start..]) {
                    Ok(Some((n, b))) => (n, b.into()),
                    Ok(None) => break,
                    Err(()) => {
                        ctx.c().bad_requests.fetch_add(1, Relaxed);
                        s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await?;
                        return Ok(());
                    }
                }
            } else {
                let n = req.content_length.unwrap_or(0);
                if n > MAX_REQUEST {
                    s.write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await?;
                    return Ok(());
                }
                if inb.len() < body_start + n {
                    break;
                }
                (n, (&inb[body_start..body_start + n]).into())
            };
            let keep = !respond(&req, &body, ctx, &mut s, &mut out).await?;
            start = body_start + consumed;
            if !keep {
                s.write_all(&out).await?;
                return Ok(());
            }
        }
        if !out.is_empty() {
            s.write_all(&out).await?;
            out.clear();
        }
        if start > 0 {
            inb.drain(..start);
            start = 0;
        }
        if inb.len() > MAX_REQUEST {
            return Ok(());
        }
        if inb.capacity() - inb.len() < 2048 {
            inb.reserve(inb.capacity().max(4096));
        }
        let n = s.read_buf(&mut inb).await?;
        if n == 0 {
            return Ok(());
        }
    }
}

/// Appends (or writes) the response; returns true when the connection must close.
async fn respond(
    req: &Req,
    body: &[u8],
    ctx: &Ctx,
    s: &mut TcpStream,
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    let c = ctx.c();
    let mut delay = ctx.delay;
    if let Some(d) = query_delay(&req.path) {
        delay += d;
    }
    let stall = ctx.shared.stall_until_ms.load(Relaxed);
    if stall != 0 {
        let now = ctx.shared.epoch.elapsed().as_millis() as u64;
        if now < stall {
            delay += Duration::from_millis(stall - now);
        }
    }
    if !delay.is_zero() {
        // Anything already answered goes out before we sleep.
        if !out.is_empty() {
            s.write_all(out).await?;
            out.clear();
        }
        tokio::time::sleep(delay).await;
    }

    let path = req.path.split('?').next().unwrap_or("/");
    let mut status = 200u16;
    let mut size = None;
    let mut corrupt = false;
    let mut extra: Option<Vec<u8>> = None;
    if let Some(expect) = req.body_sum {
        c.body_checked.fetch_add(1, Relaxed);
        if Sum::of(body) != expect {
            c.body_bad.fetch_add(1, Relaxed);
            status = 422;
        }
    }
    if status == 200 {
        if let Some(code) = path.strip_prefix("/status/") {
            status = code.parse().unwrap_or(400);
            size = Some(0);
        } else if path == "/__origin/stats" {
            extra = Some(
                ctx.shared
                    .snapshot()
                    .to_json()
                    .to_string_compact()
                    .into_bytes(),
            );
        } else if path.starts_with("/corrupt/") {
            size = content::object_size(path);
            corrupt = true;
        } else if path == "/" {
            size = Some(1024);
        } else {
            size = content::object_size(path);
            if size.is_none() {
                status = 404;
                size = Some(0);
            }
        }
    }
    let size = size.unwrap_or(0);
    let obj = if extra.is_none() && status == 200 {
        Some(content::object(path, size))
    } else {
        None
    };
    let (len, sum) = match (&extra, &obj) {
        (Some(e), _) => (e.len(), Sum::of(e)),
        (None, Some(o)) => (o.len(), ctx.sum_of(path, size)),
        (None, None) => (0, Sum::of(b"")),
    };
    use std::io::Write;
    let _ = write!(
        out,
        "HTTP/1.1 {status} {}\r\nServer: switchyard-origin\r\nX-Origin: {}\r\nContent-Type: text/html\r\nCache-Control: public, max-age={MAX_AGE}\r\nX-Body-Sum: {sum:016x}\r\nContent-Length: {len}\r\n{}\r\n",
        reason(status),
        ctx.x_origin,
        if req.close { "Connection: close\r\n" } else { "" }
    );
    let mut sent = out.len() as u64;
    if !req.method_head {
        let b: &[u8] = match (&extra, &obj) {
            (Some(e), _) => e,
            (None, Some(o)) => o,
            (None, None) => b"",
        };
        sent += b.len() as u64;
        if corrupt && !b.is_empty() {
            let mut v = b.to_vec();
            let mid = v.len() / 2;
            v[mid] ^= 0x20;
            out.extend_from_slice(&v);
        } else if b.len() > 16 * 1024 {
            // Large bodies go straight from the shared buffer: no copy.
            s.write_all(out).await?;
            out.clear();
            s.write_all(b).await?;
        } else {
            out.extend_from_slice(b);
        }
    }
    // Counted together at the end so that a snapshot never sees a request's
    // X-Forwarded-For without the request itself.
    if req.xff {
        c.xff_seen.fetch_add(1, Relaxed);
    }
    if req.is_post {
        c.posts.fetch_add(1, Relaxed);
    }
    c.bytes_out.fetch_add(sent, Relaxed);
    c.requests.fetch_add(1, Relaxed);
    Ok(req.close)
}

/// `switchyard bench origin --listen ADDR [--listen ADDR] [--delay-ms N] [--threads N]`
pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = crate::args::Args::parse(args, &[])?;
    let listen = a.list("listen");
    let delay = a.num::<u64>("delay-ms")?.unwrap_or(0);
    let threads = a
        .num::<usize>("threads")?
        .unwrap_or(crate::sys::allowed_cpus());
    let cpus: Vec<usize> = a
        .list("cpus")
        .iter()
        .map(|c| c.parse().map_err(|_| format!("--cpus: bad cpu {c}")))
        .collect::<Result<_, _>>()?;
    a.finish()?;
    let addrs: Vec<SocketAddr> = if listen.is_empty() {
        vec![SocketAddr::from(([127, 0, 0, 1], 9001))]
    } else {
        listen
            .iter()
            .map(|l| l.parse().map_err(|_| format!("--listen: bad address {l}")))
            .collect::<Result<_, _>>()?
    };
    crate::sys::raise_nofile();
    let h = spawn_origin(
        &addrs,
        OriginOpts {
            delay: Duration::from_millis(delay),
            threads,
            cpus,
        },
    )
    .map_err(|e| format!("origin: cannot listen: {e}"))?;
    eprintln!(
        "origin listening on {} ({threads} threads); counters at GET /__origin/stats; Ctrl-C stops",
        h.addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut last = h.stats();
    loop {
        std::thread::sleep(Duration::from_secs(5));
        let s = h.stats();
        let d = s.since(&last);
        if d.requests > 0 || d.conns_accepted > 0 {
            eprintln!(
                "origin: {} req/s, {} conn/s, {} open, {} xff, {} bad bodies",
                d.requests / 5,
                d.conns_accepted / 5,
                s.conns_open,
                s.xff_seen,
                s.body_bad
            );
        }
        last = s;
    }
}
