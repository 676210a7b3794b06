//! A connection to a `tcp` vserver, from accept to the end of its relay:
//!
//! 1. the front door (`proxy/accept.rs`) has read the PROXY protocol
//!    header of a trusted source (its client address replaces the
//!    connection's for persistence and the member's header) and done the
//!    TLS handshake of a vserver that terminates TLS (`[vserver.tls]`);
//! 2. a PROXY header from any other source is refused; TLS not terminated
//!    passes through, with the pool chosen by the ClientHello's server
//!    name (`sni_route`);
//! 3. a member picked as for HTTP (balancer, source-IP persistence, slow
//!    start, backups, max_connections), connected with retries on other
//!    members when the connect fails;
//! 4. a PROXY protocol header to the member if its pool sends one, TLS to
//!    the member if the pool has `[pool.tls]`, then the bytes already read
//!    (a ClientHello), then the relay;
//! 5. its access log line, when the vserver has `[vserver.access_log]`.
//!
//! The connection holds the snapshot it was accepted under: a reload lets
//! it finish on the old configuration.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::relay::{self, End, Meter, Moved};
use super::scripting::{BeforeHandshake, ConnScript, Decision};
use super::Lease;
use super::{client_hello, proxy_protocol};
use crate::accesslog::{self, l4::End as LogEnd, ScriptLog, TlsInfo};
use crate::balance::persist::source_ip_hash;
use crate::balance::Tried;
use crate::config::snapshot::L4Settings;
use crate::config::snapshot::{HashKey, Member, Persist, Pool, Snapshot, VServer};
use crate::health::passive;
use crate::log;
use crate::source;
use crate::stats::{self, MemberCounters, Sharded, VsCounters};
use crate::tls::upstream::{handshake_error, UpStream, UpstreamTls};

/// A `tcp` vserver's client connection as the front door
/// (`proxy/accept.rs`) hands it over.
pub enum ClientConn {
    /// Plain TCP. `proxied`: a trusted source's PROXY header came first
    /// (read by the front door); from any other source a PROXY header is
    /// refused, never relayed.
    Plain { tcp: TcpStream, proxied: bool },
    /// TLS terminated here (`[vserver.tls]`), with its handshake's facts
    /// and the vserver's script, whose `on_accept` (and `on_client_hello`)
    /// the front door ran.
    Tls(
        Box<tokio_rustls::server::TlsStream<TcpStream>>,
        TlsInfo,
        Option<BeforeHandshake>,
    ),
}

/// Runs one connection of a `tcp` vserver, accepted at `accepted` from
/// `client` (a trusted PROXY header's address, or the peer), and writes
/// its access log line when the vserver has one. `guard` is held until
/// the connection ends (the worker's connection gauges).
pub async fn serve<G>(
    conn: ClientConn,
    client: SocketAddr,
    listen: SocketAddr,
    (snap, vs): (Arc<Snapshot>, Arc<VServer>),
    accepted: Instant,
    guard: G,
) {
    let _guard = guard;
    let mut facts = Facts::new(client, accepted);
    relay_connection(conn, listen, &snap, &vs, &mut facts).await;
    if let Some(log) = &vs.access_log {
        log.write_l4(&facts.entry(&vs));
    }
}

/// The access log line of a connection the front door closed before the
/// relay: a bad PROXY header (`Refused`), a failed handshake (`TlsFailed`).
/// `script`: what the script's events said before (`c:log`, its error).
pub fn log_refused(
    vs: &VServer,
    client: SocketAddr,
    accepted: Instant,
    end: LogEnd,
    script: Option<Box<ScriptLog>>,
) {
    if let Some(log) = &vs.access_log {
        let mut facts = Facts::new(client, accepted);
        facts.end = end;
        facts.script = script;
        log.write_l4(&facts.entry(vs));
    }
}

/// What the access log line of a connection shows, gathered on its way.
struct Facts {
    started: Instant,
    /// The client: the peer, or the address its trusted PROXY header gave.
    client: SocketAddr,
    pool: Option<Arc<Pool>>,
    member: Option<SocketAddr>,
    retries: u32,
    tls: Option<TlsInfo>,
    connect_us: Option<u32>,
    moved: Moved,
    end: LogEnd,
    /// What the script's events added (`c:log`), and its first error.
    script: Option<Box<ScriptLog>>,
}

impl Facts {
    fn new(client: SocketAddr, accepted: Instant) -> Facts {
        Facts {
            started: accepted,
            client,
            pool: None,
            member: None,
            retries: 0,
            tls: None,
            connect_us: None,
            moved: Moved::default(),
            end: LogEnd::Refused,
            script: None,
        }
    }

    fn entry<'a>(&'a self, vs: &'a VServer) -> accesslog::l4::Entry<'a> {
        let total_us = self.started.elapsed().as_micros() as u64;
        accesslog::l4::Entry {
            time_us: crate::clock::unix_us().saturating_sub(total_us),
            client: self.client,
            vserver: &vs.name,
            transport: "tcp",
            pool: self.pool.as_deref().map(|p| p.name.as_str()),
            member: self.member,
            retries: self.retries,
            tls: self.tls,
            connect_us: self.connect_us,
            total_us,
            bytes_received: self.moved.up,
            bytes_sent: self.moved.down,
            end: self.end,
            script: self.script.as_deref(),
        }
    }

    /// Records how the relay ended.
    fn relayed(&mut self, end: &End, first: usize) {
        let (moved, how) = match end {
            End::Done(m) => (m, LogEnd::Done),
            End::Idle(m) => (m, LogEnd::Idle),
            End::Failed(m, _) => (m, LogEnd::Reset),
        };
        self.moved = Moved {
            up: moved.up + first as u64,
            down: moved.down,
        };
        self.end = how;
    }
}

async fn relay_connection(
    conn: ClientConn,
    listen: SocketAddr,
    snap: &Snapshot,
    vs: &Arc<VServer>,
    facts: &mut Facts,
) {
    let Some(l4) = vs.l4.clone() else { return };
    let (stream, proxied) = match conn {
        ClientConn::Tls(stream, info, before) => {
            facts.tls = Some(info);
            let (mut script, chosen) = match before {
                Some(b) => (Some(b.script), b.pool),
                None => (None, None),
            };
            relay_terminated(*stream, listen, snap, (vs, chosen, script.as_mut()), facts).await;
            if let Some(s) = &mut script {
                s.close(vs, facts.moved.up, facts.moved.down);
                facts.script = s.take_log();
            }
            return;
        }
        ClientConn::Plain { tcp, proxied } => (tcp, proxied),
    };
    // A PROXY header from a source the vserver does not trust would be
    // relayed to members that may believe it: refuse it.
    let refuse_proxy_prefix = vs.accept_proxy.is_some() && !proxied;
    // Refused before any member is connected: a member would get an
    // empty connection, and what it says first could reach the client.
    // (`sni_route` reads a ClientHello first, which refuses it too.)
    if let Some(ap) = vs.accept_proxy.as_ref().filter(|_| refuse_proxy_prefix) {
        if l4.sni.is_empty() && opens_with_proxy_header(&stream, ap.untrusted_wait_ms).await {
            stats::inc(&vs.counters.local().bad_requests);
            log::debug(format_args!(
                "vserver {:?}: PROXY header from {}, a source not trusted to send one; closed before connecting a member",
                vs.name, facts.client
            ));
            return;
        }
    }
    let Some((mut script, chosen)) = accepted_by_script(vs, facts) else {
        return;
    };
    relay_plain(
        stream,
        listen,
        (snap, vs, &l4),
        (refuse_proxy_prefix, chosen, script.as_mut()),
        facts,
    )
    .await;
    if let Some(s) = &mut script {
        s.close(vs, facts.moved.up, facts.moved.down);
        facts.script = s.take_log();
    }
}

/// The vserver's script for a plain connection (None without one) after
/// its `on_accept`, with the pool it chose; None when the script refused
/// the connection or could not start (counted and logged there). (A
/// TLS-terminating vserver's runs in the front door: `BeforeHandshake`.)
fn accepted_by_script(
    vs: &Arc<VServer>,
    facts: &mut Facts,
) -> Option<(Option<ConnScript>, Option<Arc<Pool>>)> {
    let mut script = ConnScript::start(vs, facts.client, false).ok()?;
    let chosen = match script.as_mut().map(|s| s.accept(vs)) {
        Some(Decision::Close) => {
            // The refusal's line shows what the script said (`c:log`).
            facts.script = script.as_mut().and_then(ConnScript::take_log);
            return None;
        }
        Some(Decision::Go(p)) => p,
        None => None,
    };
    Some((script, chosen))
}

/// `[vserver.tls]`: the client's TLS ends here; the bytes go on to the
/// default pool's member, plain or in TLS of their own.
async fn relay_terminated(
    tls_stream: tokio_rustls::server::TlsStream<TcpStream>,
    listen: SocketAddr,
    snap: &Snapshot,
    (vs, chosen, script): (&Arc<VServer>, Option<Arc<Pool>>, Option<&mut ConnScript>),
    facts: &mut Facts,
) {
    let Some(l4) = vs.l4.as_ref() else {
        return;
    };
    let Some(pool) = chosen.or_else(|| vs.default_pool.clone()) else {
        facts.end = LogEnd::NoMember;
        return;
    };
    facts.pool = Some(pool.clone());
    let client = facts.client;
    let Some(mut up) = connect(snap, vs, &pool, (client, listen), &[], facts).await else {
        return;
    };
    let meter = Counters::new(&vs.counters, &up.member.counters);
    let idle = ms(l4.idle_timeout_ms);
    let mut tls_stream = tls_stream;
    let mut early = (0, 0);
    if let Some(s) = script.filter(|s| s.wants_server_data()) {
        let Some(moved) = server_first(s, vs, &mut tls_stream, &mut up.stream, idle, &meter).await
        else {
            facts.end = LogEnd::Refused;
            return;
        };
        early = moved;
    }
    let end = relay::streams(tls_stream, up.stream, idle, false, &meter).await;
    facts.relayed(&end, 0);
    facts.moved.up += early.0;
    facts.moved.down += early.1;
    let member = up.member.clone();
    finish(vs, &pool, &member, end);
}

/// `on_server_data`: the member's first bytes shown to the script, then
/// sent on to the client. The bytes moved meanwhile (up, down); None when
/// the script refused the connection or a side failed (both closed).
async fn server_first<C, M>(
    s: &mut ConnScript,
    vs: &VServer,
    client: &mut C,
    member: &mut M,
    wait: Duration,
    meter: &Counters<'_>,
) -> Option<(u64, u64)>
where
    C: AsyncRead + AsyncWrite + Unpin,
    M: AsyncRead + AsyncWrite + Unpin,
{
    let up = std::cell::Cell::new(0u64);
    let count = |n| {
        meter.up(n);
        up.set(up.get() + n);
    };
    let data = match super::scripting::member_first_bytes(client, member, wait, count).await {
        Ok(d) => d,
        Err(e) => {
            log::debug(format_args!(
                "vserver {:?}: waiting for the member's first bytes: {e}; closed",
                vs.name
            ));
            return None;
        }
    };
    if let Decision::Close = s.server_data(vs, &data) {
        return None;
    }
    if !data.is_empty() {
        if let Err(e) = async {
            client.write_all(&data).await?;
            client.flush().await
        }
        .await
        {
            log::debug(format_args!(
                "vserver {:?}: the member's first bytes to the client: {e}; closed",
                vs.name
            ));
            return None;
        }
        meter.down(data.len() as u64);
    }
    Some((up.get(), data.len() as u64))
}

/// No TLS termination: the pool by the ClientHello's name (`sni_route`)
/// or the default one, then the bytes relayed as they are (splice where it
/// pays), or into the member's TLS when the pool has `[pool.tls]`.
async fn relay_plain(
    stream: TcpStream,
    listen: SocketAddr,
    (snap, vs, l4): (&Snapshot, &Arc<VServer>, &L4Settings),
    (refuse_proxy_prefix, chosen, script): (bool, Option<Arc<Pool>>, Option<&mut ConnScript>),
    facts: &mut Facts,
) {
    let client = facts.client;
    let mut script = script;
    let mut stream = stream;
    let mut first = Vec::new();
    let pool = if let Some(s) = script.as_deref_mut().filter(|s| s.wants_data()) {
        // The script sees the first bytes (a ClientHello's name and ALPN
        // when they are one) and may choose: its pool, else sni_route's,
        // else the default.
        let hello =
            match super::scripting::first_bytes(&stream, &mut first, l4.client_hello_timeout_ms)
                .await
            {
                Ok(h) => h,
                Err(e) => {
                    stats::inc(&vs.counters.local().bad_requests);
                    log::debug(format_args!(
                        "vserver {:?}: first bytes from {client}: {e}; closed",
                        vs.name
                    ));
                    return;
                }
            };
        let by_script = match s.client_data(vs, &first, hello.as_ref()) {
            Decision::Close => return,
            Decision::Go(p) => p,
        };
        let by_name = || {
            hello
                .as_ref()
                .and_then(|h| h.server_name.as_deref())
                .and_then(|n| l4.sni.pool_for(n))
                .cloned()
        };
        by_script
            .or(chosen)
            .or_else(by_name)
            .or_else(|| vs.default_pool.clone())
    } else if chosen.is_some() {
        chosen
    } else if l4.sni.is_empty() {
        vs.default_pool.clone()
    } else {
        match read_client_hello(&stream, &mut first, l4.client_hello_timeout_ms).await {
            Ok(hello) => {
                let by_name = hello
                    .server_name
                    .as_deref()
                    .and_then(|n| l4.sni.pool_for(n))
                    .cloned();
                by_name.or_else(|| vs.default_pool.clone())
            }
            Err(e) => {
                stats::inc(&vs.counters.local().bad_requests);
                log::debug(format_args!(
                    "vserver {:?}: ClientHello from {client}: {e}; closed",
                    vs.name
                ));
                return;
            }
        }
    };
    let Some(pool) = pool else {
        stats::inc(&vs.counters.local().no_pool);
        facts.end = LogEnd::NoMember;
        return;
    };
    facts.pool = Some(pool.clone());
    let Some(mut up) = connect(snap, vs, &pool, (client, listen), &first, facts).await else {
        return;
    };
    let m = up.member.clone();
    let meter = Counters::new(&vs.counters, &m.counters);
    if !first.is_empty() {
        meter.up(first.len() as u64);
    }
    let idle = ms(l4.idle_timeout_ms);
    let mut early = (0, 0);
    if let Some(s) = script.filter(|s| s.wants_server_data()) {
        let Some(moved) = server_first(s, vs, &mut stream, &mut up.stream, idle, &meter).await
        else {
            facts.end = LogEnd::Refused;
            return;
        };
        early = moved;
    }
    let end = match up.stream {
        UpStream::Plain(ref member) => {
            relay::tcp(
                &stream,
                member,
                l4.zero_copy,
                idle,
                refuse_proxy_prefix,
                &meter,
            )
            .await
        }
        // TLS to the member: a copy each way through its session.
        tls => relay::streams(stream, tls, idle, refuse_proxy_prefix, &meter).await,
    };
    facts.relayed(&end, first.len());
    facts.moved.up += early.0;
    facts.moved.down += early.1;
    if let End::Failed(_, e) = &end {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            // The untrusted PROXY prefix (the relay's refusal).
            facts.end = LogEnd::Refused;
        }
    }
    finish(vs, &pool, &m, end);
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn finish(vs: &VServer, pool: &Pool, m: &Member, end: End) {
    match end {
        End::Done(_) => {}
        End::Idle(moved) => log::debug(format_args!(
            "vserver {:?}: relay to {} idle, closed after {} bytes up, {} down",
            vs.name,
            m.label(&pool.name),
            moved.up,
            moved.down
        )),
        End::Failed(moved, e) => {
            stats::inc(&m.counters.local().resets);
            log::debug(format_args!(
                "vserver {:?}: relay to {} ended: {e} ({} bytes up, {} down)",
                vs.name,
                m.label(&pool.name),
                moved.up,
                moved.down
            ))
        }
    }
}

/// Byte counters of the vserver and the member, as bytes pass.
struct Counters<'a> {
    vs: &'a VsCounters,
    member: &'a MemberCounters,
}

impl<'a> Counters<'a> {
    fn new(vs: &'a Sharded<VsCounters>, member: &'a Sharded<MemberCounters>) -> Self {
        Counters {
            vs: vs.local(),
            member: member.local(),
        }
    }
}

impl Meter for Counters<'_> {
    fn up(&self, n: u64) {
        stats::add(&self.vs.bytes_in, n);
        stats::add(&self.member.bytes_out, n);
    }
    fn down(&self, n: u64) {
        stats::add(&self.vs.bytes_out, n);
        stats::add(&self.member.bytes_in, n);
    }
}

/// Whether the first bytes of a connection, peeked (left for the relay)
/// for up to `wait_ms`, begin a PROXY header, or as much of one as came
/// (as the relay's own check reads them). False once they differ from
/// both headers' openings, when nothing came in time (a client waiting
/// for the server to speak first; the relay checks what it sends later),
/// or when the client closed or failed (the relay sees that too).
async fn opens_with_proxy_header(s: &TcpStream, wait_ms: u64) -> bool {
    // The longer opening, v2's signature, decides every case.
    let mut buf = [0u8; proxy_protocol::V2_SIGNATURE.len()];
    let mut last = 0;
    let look = async {
        loop {
            let n = match s.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            if !relay::looks_like_proxy_header(&buf[..n]) {
                return false;
            }
            last = n;
            if n == buf.len() || buf[..n].starts_with(b"PROXY ") {
                return true;
            }
            // An opening cut short: wait for more than what was peeked
            // (peek finds the same bytes ready at once).
            if s.readable().await.is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    match tokio::time::timeout(ms(wait_ms), look).await {
        Ok(v) => v,
        // The opening of a header that stopped there is refused too.
        Err(_) => last > 0,
    }
}

/// Reads until `buf` holds a whole ClientHello (a split one too).
async fn read_client_hello(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    timeout_ms: u64,
) -> Result<client_hello::ClientHello, String> {
    let work = async {
        let mut chunk = [0u8; 4096];
        loop {
            s.readable().await.map_err(|e| e.to_string())?;
            match s.try_read(&mut chunk) {
                Ok(0) => return Err("closed before the ClientHello ended".to_string()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.to_string()),
            }
            match client_hello::parse(buf).map_err(|e| e.to_string())? {
                client_hello::Parsed::Incomplete => {}
                client_hello::Parsed::Done(h) => return Ok(h),
            }
        }
    };
    match tokio::time::timeout(ms(timeout_ms), work).await {
        Ok(r) => r,
        Err(_) => Err(format!("no complete ClientHello within {timeout_ms} ms")),
    }
}

/// A connection to a member, counted as in flight and active while held.
pub struct Upstream {
    pub stream: UpStream,
    /// The member it goes to (held, not an index: a run-time member
    /// change may swap the pool's list meanwhile).
    pub member: Arc<Member>,
    _lease: Lease,
}

/// The source-IP hash when the pool balances or persists on it.
pub(super) fn source_hash(pool: &Pool, client: IpAddr) -> Option<u64> {
    let by_ip = matches!(pool.hash_key, Some(HashKey::SourceIp))
        || pool.persistence == Some(Persist::SourceIp);
    by_ip.then(|| source_ip_hash(client))
}

/// Picks and connects a member, trying others when a connect fails (up to
/// `limits.retries` more); sends the pool's PROXY header and `first`.
/// The member, the retries and the connect time go into `facts`; a
/// failure leaves `facts.end` saying so.
async fn connect(
    snap: &Snapshot,
    vs: &VServer,
    pool: &Pool,
    (client, listen): (SocketAddr, SocketAddr),
    first: &[u8],
    facts: &mut Facts,
) -> Option<Upstream> {
    facts.end = LogEnd::NoMember;
    let pc = pool.counters.local();
    stats::inc(&pc.requests);
    let hash = source_hash(pool, client.ip());
    let mut tried = Tried::default();
    let mut retries_left = snap.settings.retries;
    let mut attempts = 0;
    let header = proxy_protocol::stream_header(pool.proxy_protocol, client, listen);
    // One list for every attempt: indices are into it.
    let members = pool.members.load_full();
    loop {
        let Some(i) = members.balancer.pick(&members.list, None, hash, tried) else {
            if attempts == 0 {
                stats::inc(&pc.no_member_available);
            }
            log::debug(format_args!(
                "vserver {:?}: no member of pool {:?} available for {client}",
                vs.name, pool.name
            ));
            return None;
        };
        if attempts > 0 {
            stats::inc(&pc.retries);
        }
        facts.retries = attempts;
        attempts += 1;
        tried.add(i);
        let m = &members[i];
        let lease = Lease::new(m);
        let mc = m.counters.local();
        let timeout_ms = snap.settings.upstream_connect_ms;
        match open(m, pool, (client.ip(), &header), timeout_ms).await {
            Ok(mut s) => {
                m.state.connected();
                passive::record(pool, m, false);
                stats::inc(&mc.requests);
                facts.member = Some(m.addr);
                facts.connect_us = Some(facts.started.elapsed().as_micros() as u32);
                if !first.is_empty() && write_first(&mut s, first).await.is_err() {
                    stats::inc(&mc.resets);
                    facts.end = LogEnd::Reset;
                    return None;
                }
                return Some(Upstream {
                    stream: s,
                    member: m.clone(),
                    _lease: lease,
                });
            }
            Err(Failed::Source(e)) => {
                // This host's fault, not the member's: no passive health
                // mark, and no retry that would fail the same way.
                log::warn(format_args!(
                    "vserver {:?}: connection to {} from {client}: {e}",
                    vs.name,
                    m.label(&pool.name)
                ));
                return None;
            }
            Err(Failed::Connect(e)) => {
                stats::inc(&mc.connect_failures);
                m.state.connect_failed();
                passive::record(pool, m, true);
                log::debug(format_args!(
                    "vserver {:?}: connect to {} failed: {e}",
                    vs.name,
                    m.label(&pool.name)
                ));
                drop(lease);
                if retries_left == 0 {
                    return None;
                }
                retries_left -= 1;
            }
        }
    }
}

/// Why `open` failed.
enum Failed {
    /// The source address could not be set up (no IP_TRANSPARENT right).
    Source(std::io::Error),
    /// The connect, the PROXY header's write or the TLS handshake.
    Connect(std::io::Error),
}

/// A connection to `m` from where the pool's `source_address` says, with
/// the pool's PROXY `header` sent first (outside TLS, as HAProxy sends
/// it), then TLS when the pool has `[pool.tls]`; all within `timeout_ms`.
async fn open(
    m: &Member,
    pool: &Pool,
    (client, header): (IpAddr, &[u8]),
    timeout_ms: u64,
) -> Result<UpStream, Failed> {
    let sock = source::tcp_socket(pool.source_address, (client, m.addr)).map_err(Failed::Source)?;
    let _ = sock.set_nodelay(true);
    let deadline = tokio::time::Instant::now() + ms(timeout_ms);
    let late = || {
        Failed::Connect(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {timeout_ms} ms"),
        ))
    };
    let mut s = match tokio::time::timeout_at(deadline, sock.connect(m.addr)).await {
        Ok(r) => r.map_err(Failed::Connect)?,
        Err(_) => return Err(late()),
    };
    if !header.is_empty() {
        s.write_all(header).await.map_err(Failed::Connect)?;
    }
    let Some(tls) = &pool.tls else {
        return Ok(UpStream::Plain(s));
    };
    tls_handshake(tls, m.addr, s, deadline)
        .await
        .map_err(|why| {
            stats::inc(&m.counters.local().tls_handshake_failures);
            Failed::Connect(std::io::Error::other(why))
        })
}

/// `[pool.tls]` on a tcp vserver (HAProxy's `server ... ssl` in `mode
/// tcp`): the member's TLS handshake over `s`, verified as an HTTP pool's
/// members are, without ALPN (the relay does not know the protocol
/// inside), done by `deadline`; the error says why it failed.
async fn tls_handshake(
    tls: &UpstreamTls,
    addr: SocketAddr,
    s: TcpStream,
    deadline: tokio::time::Instant,
) -> Result<UpStream, String> {
    let connector = tokio_rustls::TlsConnector::from(tls.config_l4.clone());
    let hs = Box::pin(connector.connect(tls.server_name(addr), s));
    match tokio::time::timeout_at(deadline, hs).await {
        Ok(Ok(t)) => Ok(UpStream::Tls(Box::new(t))),
        Ok(Err(e)) => Err(format!("TLS handshake failed: {}", handshake_error(&e))),
        Err(_) => Err("TLS handshake not done within the connect timeout".to_string()),
    }
}

/// The bytes read before the member was chosen (a ClientHello).
async fn write_first(s: &mut UpStream, first: &[u8]) -> std::io::Result<()> {
    s.write_all(first).await?;
    s.flush().await
}
