//! The client side of one HTTP/1.1 transaction, generic over the stream so
//! that TLS (crate::tls) slots in as another AsyncRead + AsyncWrite.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::content::Sum;

/// Why a transaction failed. A wrong status, size or body is a failure even
/// though bytes flowed: the reports count only correct transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrKind {
    Connect,
    Timeout,
    /// Reset or broken pipe.
    Reset,
    /// The peer closed before the response was complete.
    Closed,
    BadStatus,
    BadSize,
    BadBody,
    /// Not a parsable HTTP response.
    Parse,
    /// The TCP connection opened but the TLS handshake failed.
    Handshake,
}

pub const ERR_KINDS: [ErrKind; 9] = [
    ErrKind::Connect,
    ErrKind::Timeout,
    ErrKind::Reset,
    ErrKind::Closed,
    ErrKind::BadStatus,
    ErrKind::BadSize,
    ErrKind::BadBody,
    ErrKind::Parse,
    ErrKind::Handshake,
];

impl ErrKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrKind::Connect => "connect",
            ErrKind::Timeout => "timeout",
            ErrKind::Reset => "reset",
            ErrKind::Closed => "closed",
            ErrKind::BadStatus => "bad_status",
            ErrKind::BadSize => "bad_size",
            ErrKind::BadBody => "bad_body",
            ErrKind::Parse => "parse",
            ErrKind::Handshake => "tls_handshake",
        }
    }
    pub fn idx(self) -> usize {
        self as usize
    }
}

fn io_kind(e: &io::Error) -> ErrKind {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => ErrKind::Closed,
        io::ErrorKind::TimedOut => ErrKind::Timeout,
        _ => ErrKind::Reset,
    }
}

/// What the client checks a response against.
#[derive(Clone, Debug)]
pub struct Expect {
    pub status: u16,
    pub size: Option<u64>,
    /// Compare the body with the origin's X-Body-Sum when present.
    pub verify_body: bool,
    /// A gzip-encoded body must end with this trailer: the original
    /// object's CRC-32 and its size mod 2^32 (RFC 1952). Checked without
    /// decompressing, so a DUT that mangles the object still fails.
    pub gzip_trailer: Option<(u32, u32)>,
}

/// The running checksum of a body, its length, and its first 2 and last 8
/// bytes (a gzip member's magic and trailer).
struct BodyCheck {
    sum: Sum,
    len: u64,
    head: [u8; 2],
    tail: [u8; 8],
}

impl BodyCheck {
    fn new() -> BodyCheck {
        BodyCheck {
            sum: Sum::new(),
            len: 0,
            head: [0; 2],
            tail: [0; 8],
        }
    }
    fn update(&mut self, d: &[u8]) {
        if d.is_empty() {
            return;
        }
        for (i, b) in d
            .iter()
            .take(2usize.saturating_sub(self.len as usize))
            .enumerate()
        {
            self.head[self.len as usize + i] = *b;
        }
        if d.len() >= 8 {
            self.tail.copy_from_slice(&d[d.len() - 8..]);
        } else {
            self.tail.rotate_left(d.len());
            self.tail[8 - d.len()..].copy_from_slice(d);
        }
        self.sum.update(d);
        self.len += d.len() as u64;
    }
    /// A gzip member with this trailer: magic 1f 8b, CRC-32, ISIZE.
    fn gzip_ok(&self, (crc, isize): (u32, u32)) -> bool {
        let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        self.len >= 18
            && self.head == [0x1f, 0x8b]
            && le(&self.tail[..4]) == crc
            && le(&self.tail[4..]) == isize
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub body_len: u64,
    /// Bytes on the wire (head + body framing).
    pub wire_len: u64,
    pub first_byte: Instant,
    /// The server will close (or closed) the connection after this response.
    pub close: bool,
    pub encoded: bool,
    /// Content-Encoding: gzip.
    pub gzip: bool,
}

/// Connects, optionally from a given source address. IP_BIND_ADDRESS_NO_PORT
/// lets the kernel pick the port at connect time (per destination), so
/// binding to 127.0.0.N does not cap us at one ephemeral range per source.
pub async fn connect(addr: SocketAddr, src: Option<IpAddr>) -> io::Result<TcpStream> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = src {
        if ip.is_ipv4() == addr.is_ipv4() {
            use std::os::fd::AsRawFd;
            let one: libc::c_int = 1;
            // SAFETY: setsockopt reads an int we own; failure is harmless.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_BIND_ADDRESS_NO_PORT,
                    &one as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            sock.bind(SocketAddr::new(ip, 0))?;
        }
    }
    let s = sock.connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// How the load generator opens a connection: plain TCP, or TLS
/// (crate::tls::Tls wraps the TCP stream in a session and hands back a
/// stream `transact` can use unchanged).
pub trait Connector: 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + 'static;
    fn connect(
        &self,
        addr: SocketAddr,
        src: Option<IpAddr>,
    ) -> impl std::future::Future<Output = io::Result<Self::Stream>>;
    /// For TLS: whether the session was resumed (None: not TLS).
    fn resumed(_s: &Self::Stream) -> Option<bool> {
        None
    }
}

/// Plain HTTP over TCP.
pub struct PlainTcp;

impl Connector for PlainTcp {
    type Stream = TcpStream;
    fn connect(
        &self,
        addr: SocketAddr,
        src: Option<IpAddr>,
    ) -> impl std::future::Future<Output = io::Result<TcpStream>> {
        connect(addr, src)
    }
}

/// Incremental chunked-transfer decoder.
#[derive(Default)]
struct Chunked {
    state: u8, // 0 size line, 1 data, 2 CRLF after data, 3 trailers, 4 done
    remaining: u64,
    line: Vec<u8>,
}

impl Chunked {
    /// Feeds bytes; returns how many were consumed (all, unless done).
    fn feed(&mut self, data: &[u8], body: &mut BodyCheck) -> Result<usize, ErrKind> {
        let mut i = 0;
        while i < data.len() && self.state != 4 {
            match self.state {
                1 => {
                    let take = (self.remaining as usize).min(data.len() - i);
                    body.update(&data[i..i + take]);
                    self.remaining -= take as u64;
                    i += take;
                    if self.remaining == 0 {
                        self.state = 2;
                    }
                }
                _ => {
                    let b = data[i];
                    i += 1;
                    if b != b'\n' {
                        if self.line.len() > 4096 {
                            return Err(ErrKind::Parse);
                        }
                        self.line.push(b);
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    match self.state {
                        0 => {
                            let s = std::str::from_utf8(line).map_err(|_| ErrKind::Parse)?;
                            let hex = s.split(';').next().unwrap_or("").trim();
                            let n = u64::from_str_radix(hex, 16).map_err(|_| ErrKind::Parse)?;
                            if n == 0 {
                                self.state = 3;
                            } else {
                                self.remaining = n;
                                self.state = 1;
                            }
                        }
                        2 => {
                            if !line.is_empty() {
                                return Err(ErrKind::Parse);
                            }
                            self.state = 0;
                        }
                        _ => {
                            if line.is_empty() {
                                self.state = 4;
                            }
                        }
                    }
                }
            }
        }
        Ok(i)
    }
}

enum Framing {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
}

/// Sends `req` and reads one full response into (and through) `buf`.
/// Bodies are checksummed as they stream past, never stored whole.
pub async fn transact<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    req: &[u8],
    buf: &mut Vec<u8>,
    exp: &Expect,
) -> Result<Resp, (ErrKind, bool)> {
    // The bool in the error says whether any response byte arrived: a reused
    // keep-alive connection that fails before that was closed by the server
    // while idle, and the request can be retried on a new connection.
    if let Err(e) = s.write_all(req).await {
        return Err((io_kind(&e), false));
    }
    buf.clear();
    let mut first_byte = None;
    let (status, framing, close, sum_hdr, encoded, gzip, head_len) = loop {
        let n = match s.read_buf(buf).await {
            Ok(n) => n,
            Err(e) => return Err((io_kind(&e), first_byte.is_some())),
        };
        if n == 0 {
            return Err((ErrKind::Closed, first_byte.is_some()));
        }
        if first_byte.is_none() {
            first_byte = Some(Instant::now());
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        match r.parse(buf) {
            Ok(httparse::Status::Complete(hl)) => {
                let status = r.code.unwrap_or(0);
                let mut close = r.version == Some(0);
                let mut len = None;
                let mut chunked = false;
                let mut sum = None;
                let mut encoded = false;
                let mut gzip = false;
                for h in r.headers.iter() {
                    let n = h.name;
                    if n.eq_ignore_ascii_case("content-length") {
                        len = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<u64>().ok());
                        if len.is_none() {
                            return Err((ErrKind::Parse, true));
                        }
                    } else if n.eq_ignore_ascii_case("transfer-encoding") {
                        chunked = h.value.ends_with(b"chunked");
                    } else if n.eq_ignore_ascii_case("connection") {
                        if h.value.eq_ignore_ascii_case(b"close") {
                            close = true;
                        } else if h.value.eq_ignore_ascii_case(b"keep-alive") {
                            close = false;
                        }
                    } else if n.eq_ignore_ascii_case("x-body-sum") {
                        sum = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
                    } else if n.eq_ignore_ascii_case("content-encoding") {
                        encoded = !h.value.eq_ignore_ascii_case(b"identity");
                        gzip = h.value.eq_ignore_ascii_case(b"gzip")
                            || h.value.eq_ignore_ascii_case(b"x-gzip");
                    }
                }
                let framing = if chunked {
                    Framing::Chunked(Chunked::default())
                } else if let Some(l) = len {
                    Framing::Length(l)
                } else if status == 204 || status == 304 || (100..200).contains(&status) {
                    Framing::Length(0)
                } else {
                    close = true;
                    Framing::UntilClose
                };
                break (status, framing, close, sum, encoded, gzip, hl);
            }
            Ok(httparse::Status::Partial) => {
                if buf.len() > 64 * 1024 {
                    return Err((ErrKind::Parse, true));
                }
                if buf.capacity() == buf.len() {
                    buf.reserve(4096);
                }
            }
            Err(_) => return Err((ErrKind::Parse, true)),
        }
    };
    let first_byte = first_byte.unwrap_or_else(Instant::now);
    let mut body = BodyCheck::new();
    let mut wire = buf.len() as u64;
    let mut framing = framing;
    let mut pending: &[u8] = &buf[head_len..];
    // Body bytes that came with the head, then further reads reusing `buf`.
    loop {
        let done = match &mut framing {
            Framing::Length(rem) => {
                let take = (*rem as usize).min(pending.len());
                body.update(&pending[..take]);
                *rem -= take as u64;
                *rem == 0
            }
            Framing::Chunked(c) => {
                c.feed(pending, &mut body).map_err(|k| (k, true))?;
                c.state == 4
            }
            Framing::UntilClose => {
                body.update(pending);
                false
            }
        };
        if done {
            break;
        }
        buf.clear();
        let n = match s.read_buf(buf).await {
            Ok(n) => n,
            Err(e) => return Err((io_kind(&e), true)),
        };
        if n == 0 {
            if matches!(framing, Framing::UntilClose) {
                break;
            }
            return Err((ErrKind::Closed, true));
        }
        wire += n as u64;
        pending = &buf[..];
    }
    if status != exp.status {
        return Err((ErrKind::BadStatus, true));
    }
    let body_len = body.len;
    if gzip {
        if let Some(t) = exp.gzip_trailer {
            if !body.gzip_ok(t) {
                return Err((ErrKind::BadBody, true));
            }
        }
    } else if !encoded {
        if let Some(want) = exp.size {
            if body_len != want {
                return Err((ErrKind::BadSize, true));
            }
        }
        if exp.verify_body {
            if let Some(want) = sum_hdr {
                if body.sum.finish() != want {
                    return Err((ErrKind::BadBody, true));
                }
            }
        }
    }
    Ok(Resp {
        status,
        body_len,
        wire_len: wire,
        first_byte,
        close,
        encoded,
        gzip,
    })
}
