//! Active health checks: TCP connect or an HTTP request per member, on an
//! interval, with rise/fall hysteresis. Results land in the member's shared
//! atomics, which the data path reads without locks. Passive checks (connect
//! failures, 5xx) live on the data path itself, in `proxy`.
//!
//! Runs on the control thread. A reload restarts the check tasks; the
//! state they update belongs to the member and survives.
//!
//! In a pool with `[pool.tls]`, TCP checks stay plain connects, and HTTP
//! checks run over TLS with the pool's client config (HAProxy's
//! `check-ssl`): a member whose certificate does not verify is down.

pub mod passive;

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use crate::balance::rand_u64;
use crate::clock::now_ms;
use crate::config::model::HealthKind;
use crate::config::snapshot::ProxyVersion;
use crate::config::snapshot::{HealthCheck, Member, Snapshot};
use crate::log;
use crate::proxy_protocol;
use crate::stats;
use crate::tls::upstream::{handshake_error, UpstreamTls};

#[derive(Default)]
pub struct Checker {
    tasks: Vec<JoinHandle<()>>,
}

impl Checker {
    /// Replaces every check task with ones for `snap`. Must run inside the
    /// control thread's `LocalSet`.
    pub fn restart(&mut self, snap: &Arc<Snapshot>) {
        self.stop();
        for pool in &snap.pools {
            match &pool.health {
                Some(hc) => {
                    for m in pool.members.load().iter() {
                        let label = m.label(&pool.name);
                        self.tasks.push(tokio::task::spawn_local(check_loop(
                            label,
                            m.clone(),
                            hc.clone(),
                            Dial {
                                tls: pool.tls.clone(),
                                source: pool.local_source(),
                                proxy: pool.proxy_protocol,
                            },
                        )));
                    }
                }
                None => {
                    // Checks were removed: nothing will bring a member back
                    // any more, so consider every member healthy.
                    for m in pool.members.load().iter() {
                        m.state.healthy.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

/// How a pool's connections to its members are made; its checks are made
/// the same way, so a member is checked as it is used: from the pool's
/// local source address (a pool whose source is the client's address
/// checks from this host's), with its PROXY header (HAProxy's
/// `check-send-proxy`: a member that requires one refuses a check without
/// it), in TLS when the pool has `[pool.tls]`.
struct Dial {
    tls: Option<Arc<UpstreamTls>>,
    source: Option<IpAddr>,
    proxy: Option<ProxyVersion>,
}

async fn check_loop(label: String, m: Arc<Member>, hc: HealthCheck, dial: Dial) {
    // Spread the first checks over one interval so members are not all
    // probed at the same instant.
    tokio::time::sleep(Duration::from_millis(rand_u64() % hc.interval_ms.max(1))).await;
    loop {
        let result = check_once(&m, &hc, &dial).await;
        record(&label, &m, &hc, result);
        tokio::time::sleep(Duration::from_millis(hc.interval_ms)).await;
    }
}

fn record(label: &str, m: &Member, hc: &HealthCheck, result: Result<(), String>) {
    let s = &m.state;
    let healthy = s.healthy.load(Ordering::Relaxed);
    match result {
        Ok(()) => {
            s.check_fail_streak.store(0, Ordering::Relaxed);
            let ok = s.check_ok_streak.fetch_add(1, Ordering::Relaxed) + 1;
            if !healthy && ok >= hc.rise {
                s.up_since_ms.store(now_ms(), Ordering::Relaxed);
                s.healthy.store(true, Ordering::Relaxed);
                stats::inc(&m.counters.local().health_transitions);
                log::info(format_args!("member {label} is UP ({ok} checks passed)"));
            }
        }
        Err(why) => {
            s.check_ok_streak.store(0, Ordering::Relaxed);
            let fails = s.check_fail_streak.fetch_add(1, Ordering::Relaxed) + 1;
            if healthy && fails >= hc.fall {
                s.healthy.store(false, Ordering::Relaxed);
                stats::inc(&m.counters.local().health_transitions);
                log::warn(format_args!(
                    "member {label} is DOWN: {why} ({fails} checks failed)"
                ));
            }
        }
    }
}

async fn check_once(m: &Member, hc: &HealthCheck, dial: &Dial) -> Result<(), String> {
    let timeout = Duration::from_millis(hc.timeout_ms);
    match tokio::time::timeout(timeout, probe(m, hc, dial)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", hc.timeout_ms)),
    }
}

async fn probe(m: &Member, hc: &HealthCheck, dial: &Dial) -> Result<(), String> {
    let addr = match hc.port {
        Some(p) => std::net::SocketAddr::new(m.addr.ip(), p),
        None => m.addr,
    };
    if hc.kind == HealthKind::Udp {
        return udp_probe(addr, dial, hc).await;
    }
    let mut s = crate::source::connect_tcp(addr, dial.source)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    if hc.kind == HealthKind::Tcp {
        return Ok(());
    }
    if let Some(v) = dial.proxy {
        // The check's own endpoints: v2 says so with LOCAL; v1 has no
        // such command, so it names the connection's real addresses.
        let header = match (v, s.local_addr()) {
            (ProxyVersion::V2, _) => proxy_protocol::encode_v2_local(),
            (ProxyVersion::V1, Ok(local)) => proxy_protocol::encode_v1(local, addr),
            (ProxyVersion::V1, Err(e)) => return Err(format!("local address: {e}")),
        };
        s.write_all(&header)
            .await
            .map_err(|e| format!("send the PROXY header: {e}"))?;
    }
    match dial.tls.as_deref() {
        None => http_check(s, m, hc).await,
        Some(t) => {
            let _ = s.set_nodelay(true);
            let s = TlsConnector::from(t.config.clone())
                .connect(t.server_name(m.addr), s)
                .await
                .map_err(|e| format!("TLS handshake: {}", handshake_error(&e)))?;
            http_check(s, m, hc).await
        }
    }
}

/// A datagram to the member, and a reply that contains `expect` (any reply
/// when `expect` is empty). A closed port answers with ICMP, which the
/// connected socket reports as a refused receive.
async fn udp_probe(
    addr: std::net::SocketAddr,
    dial: &Dial,
    hc: &HealthCheck,
) -> Result<(), String> {
    let local: std::net::SocketAddr = match dial.source {
        Some(ip) => (ip, 0).into(),
        None if addr.is_ipv4() => ([0, 0, 0, 0], 0).into(),
        None => ([0u16; 8], 0).into(),
    };
    let s = tokio::net::UdpSocket::bind(local)
        .await
        .map_err(|e| format!("socket: {e}"))?;
    s.connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    // A pool that sends PROXY v2 in front of every datagram: the probe's
    // says LOCAL (the proxy's own datagram).
    let probe = match dial.proxy {
        Some(ProxyVersion::V2) => [proxy_protocol::encode_v2_local(), hc.send.to_vec()].concat(),
        _ => hc.send.to_vec(),
    };
    s.send(&probe).await.map_err(|e| format!("send: {e}"))?;
    let mut buf = vec![0u8; 65_535];
    let n = s
        .recv(&mut buf)
        .await
        .map_err(|e| format!("receive: {e}"))?;
    let reply = &buf[..n];
    if hc.expect.is_empty() || reply.windows(hc.expect.len()).any(|w| w == &hc.expect[..]) {
        Ok(())
    } else {
        Err(format!(
            "the reply ({n} bytes) does not contain {:?}",
            String::from_utf8_lossy(&hc.expect)
        ))
    }
}

/// One HTTP request (`connection: close`) and its response, judged.
async fn http_check<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    m: &Member,
    hc: &HealthCheck,
) -> Result<(), String> {
    let host = hc.host.clone().unwrap_or_else(|| m.addr.to_string());
    let req = format!(
        "{} {} HTTP/1.1\r\nhost: {host}\r\nuser-agent: switchyard-health\r\nconnection: close\r\n\r\n",
        hc.method, hc.path
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    s.flush().await.map_err(|e| format!("send: {e}"))?;
    // Read to EOF (we asked to close), keeping at most 64 KB.
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match s.read(&mut chunk).await {
            Ok(n) => n,
            // Many TLS servers close without close_notify after a
            // `connection: close` response: what arrived is judged.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => 0,
            Err(e) => return Err(format!("read: {e}")),
        };
        if n == 0 {
            break;
        }
        if buf.len() < 64 * 1024 {
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let body_at = match resp.parse(&buf) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err("invalid HTTP response".to_string()),
    };
    let status = resp.code.unwrap_or(0);
    let status_ok = if hc.expect_status.is_empty() {
        (200..400).contains(&status)
    } else {
        hc.expect_status.contains(&status)
    };
    if !status_ok {
        return Err(format!("status {status}"));
    }
    if let Some(want) = &hc.expect_body {
        let body = &buf[body_at..];
        if !body
            .windows(want.len().max(1))
            .any(|w| w == want.as_bytes())
        {
            return Err(format!("body does not contain {want:?}"));
        }
    }
    Ok(())
}
