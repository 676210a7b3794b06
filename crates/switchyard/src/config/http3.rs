//! `[vserver.http3]`: QUIC (RFC 9000) and HTTP/3 (RFC 9114) on the
//! vserver's listen addresses, over UDP, with the TLS of `[vserver.tls]`
//! (TLS 1.3 only: RFC 9001 4.2).

use std::sync::Arc;

use bytes::Bytes;

use super::model;
use super::snapshot::Http3;
use super::types::Problem;
use crate::tls::TlsServer;

/// A day, as Caddy and nginx's examples advertise.
const ALT_SVC_MAX_AGE_MS: u64 = 86_400_000;
/// Chrome closes an idle QUIC connection after 30 s; a server that waited
/// longer would only hold state for clients that have gone.
const IDLE_TIMEOUT_MS: u64 = 30_000;
/// As `http2.max_concurrent_streams`' default (RFC 9113 advises at least 100).
const MAX_STREAMS: u32 = 100;
/// Flow-control windows, as `[http2]`'s defaults: what a client may send
/// ahead on one stream (256 KiB) and on the whole connection (1 MiB)
/// before we read it. quinn's defaults are 1.25 MB per stream and no limit
/// per connection: 100 streams could make one connection hold 125 MB.
/// 1 MiB per round trip is 80 Mbit/s of upload at 100 ms.
const STREAM_WINDOW: usize = 256 * 1024;
const CONNECTION_WINDOW: usize = 1024 * 1024;
/// Response bytes quinn holds per connection, sent or not yet
/// acknowledged (quinn's default is 10 MB): 4 MiB per round trip is 335
/// Mbit/s to one client at 100 ms.
const SEND_WINDOW: usize = 4 * 1024 * 1024;

/// Handshakes in progress on a listener past which new clients must prove
/// their address first (HAProxy's `tune.quic.retry-threshold` is 100):
/// a flood of Initials from spoofed sources then costs one stateless
/// Retry packet each, no handshake state and no certificate signature.
const RETRY_THRESHOLD: usize = 100;

pub fn build(
    v: &model::VServer,
    tls: Option<&TlsServer>,
    what: &str,
    problems: &mut Vec<Problem>,
) -> Option<Arc<Http3>> {
    let h = v.http3.as_ref()?;
    let span = h.span();
    let h = h.get_ref();
    let Some(tls) = tls else {
        problems.push((
            span,
            format!("{what}: http3 needs [vserver.tls]: QUIC is always encrypted"),
        ));
        return None;
    };
    let Some(rustls) = tls.quic.clone() else {
        problems.push((
            span,
            format!("{what}: http3 needs TLS 1.3 among the tls versions (RFC 9001 4.2)"),
        ));
        return None;
    };
    let early_data = match &h.early_data {
        Some(e) if *e.get_ref() => match early_data_tls(&rustls, tls) {
            Ok(r) => Some(r),
            Err(why) => {
                problems.push((e.span(), format!("{what}: http3.early_data: {why}")));
                None
            }
        },
        _ => None,
    };
    let early = early_data.is_some();
    let rustls = early_data.unwrap_or(rustls);
    let quic = match quinn::crypto::rustls::QuicServerConfig::try_from(rustls.clone()) {
        Ok(q) => Arc::new(q),
        Err(e) => {
            problems.push((
                span,
                format!("{what}: http3: the tls ciphers leave QUIC without its initial suite TLS_AES_128_GCM_SHA256 ({e})"),
            ));
            return None;
        }
    };
    let max_streams = match &h.max_streams {
        None => MAX_STREAMS,
        Some(m) if (1..=10_000).contains(m.get_ref()) => *m.get_ref(),
        Some(m) => {
            problems.push((
                m.span(),
                format!(
                    "{what}: http3.max_streams {} is out of range 1 to 10000",
                    m.get_ref()
                ),
            ));
            MAX_STREAMS
        }
    };
    let max_age_s = h.alt_svc_max_age.map_or(ALT_SVC_MAX_AGE_MS, |m| m.0) / 1000;
    let mut ports: Vec<u16> = v
        .listen
        .get_ref()
        .iter()
        .map(|a| a.get_ref().port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    let alt_svc = if max_age_s == 0 {
        Vec::new()
    } else {
        ports
            .into_iter()
            .map(|p| (p, Bytes::from(format!("h3=\":{p}\"; ma={max_age_s}"))))
            .collect()
    };
    let idle_ms = h.idle_timeout.map_or(IDLE_TIMEOUT_MS, |m| m.0).max(1000);
    let mut window = |v: &Option<toml::Spanned<usize>>, default: usize, key: &str| match v {
        None => default,
        Some(w) if (16 * 1024..=64 << 20).contains(w.get_ref()) => *w.get_ref(),
        Some(w) => {
            problems.push((
                w.span(),
                format!(
                    "{what}: http3.{key} {} is out of range 16384 to 67108864 (bytes)",
                    w.get_ref()
                ),
            ));
            default
        }
    };
    let stream_window = window(&h.stream_window, STREAM_WINDOW, "stream_window");
    let connection_window = window(&h.connection_window, CONNECTION_WINDOW, "connection_window");
    let send_window = window(&h.send_window, SEND_WINDOW, "send_window");
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(var_int(stream_window))
        .receive_window(var_int(connection_window))
        .send_window(send_window as u64)
        // HTTP/3 without its datagram extension (RFC 9297): nothing to buffer.
        .datagram_receive_buffer_size(None)
        .max_concurrent_bidi_streams(max_streams.into())
        // The client's control and QPACK streams (3), and room for grease.
        .max_concurrent_uni_streams(8u32.into())
        .max_idle_timeout(
            quinn::IdleTimeout::try_from(std::time::Duration::from_millis(idle_ms)).ok(),
        );
    // Its sessions name the suite they settled on (`tls::quic_suite`).
    let mut server =
        quinn::ServerConfig::with_crypto(Arc::new(crate::tls::quic_suite::NamesSuite(quic)));
    server.transport_config(Arc::new(transport));
    let retry_threshold = match &h.retry_threshold {
        None => RETRY_THRESHOLD,
        Some(t) => *t.get_ref() as usize,
    };
    Some(Arc::new(Http3 {
        server: Arc::new(server),
        tls: rustls,
        retry_threshold,
        early_data: early,
        alt_svc,
    }))
}

/// QUIC's TLS configuration taking 0-RTT: rustls accepts early data only
/// on a session it keeps itself (stateful resumption; RFC 8446 8.1), and
/// its cache hands each session out once (`take`), so a ClientHello and
/// its early data replayed to this process resume nothing: the replay
/// gets a full handshake and its early data is dropped. Tickets are then
/// the cache's keys, not encrypted sessions, so another process (another
/// node) cannot resume them either. What is left is a client's own
/// retransmission and an attacker racing the client with a copy before
/// the real one arrives; RFC 8470's rule covers those: only safe requests
/// go on, marked `Early-Data: 1` (`client_h3_conn`).
fn early_data_tls(
    quic: &Arc<rustls::ServerConfig>,
    tls: &TlsServer,
) -> Result<Arc<rustls::ServerConfig>, &'static str> {
    let Some(sessions) = tls.sessions.clone() else {
        return Err("0-RTT resumes a session: it needs tls.resumption (on by default)");
    };
    let mut c = (**quic).clone();
    c.ticketer = Arc::new(SessionIds);
    c.session_storage = sessions;
    // The only value besides 0 that QUIC allows (RFC 9001 4.6.1): the
    // amount of early data is QUIC's flow control's business.
    c.max_early_data_size = u32::MAX;
    Ok(Arc::new(c))
}

/// No encrypted tickets: rustls then issues the session cache's keys as
/// tickets (see `early_data_tls`).
#[derive(Debug)]
struct SessionIds;

impl rustls::server::ProducesTickets for SessionIds {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// A window in bytes (at most 64 MiB, checked) as QUIC's integer.
fn var_int(n: usize) -> quinn::VarInt {
    quinn::VarInt::from_u32(u32::try_from(n).unwrap_or(u32::MAX))
}
