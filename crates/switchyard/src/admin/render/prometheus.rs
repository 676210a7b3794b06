//! The Prometheus text exposition (format 0.0.4) of `/metrics`.
//!
//! Names follow the Prometheus conventions: `switchyard_<entity>_<what>`,
//! counters end in `_total`, byte counts in `_bytes_total` (gauges in
//! `_bytes`), durations are histograms in seconds; virtual server, pool,
//! member, status class and coding are labels, not parts of a name. Every
//! family has `# HELP` and `# TYPE`, and its samples are written together.
//!
//! The counters are declared in `stats` (the `counters!` blocks); the tables
//! below give each one its Prometheus family, and a test checks that none is
//! left without one. docs/metrics.md lists the families.

use std::collections::HashMap;
use std::fmt::{Display, Write};
use std::sync::atomic::Ordering;

use super::member_state;
use crate::config::snapshot::{Member, Snapshot};
use crate::stats::{BucketValues, STATUS_CLASSES};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One counter of a `counters!` block and the family it is rendered in.
struct Spec {
    field: &'static str,
    name: &'static str,
    kind: Kind,
    /// A label telling this field apart from others of the same family.
    label: Option<(&'static str, &'static str)>,
    help: &'static str,
}

const fn c(field: &'static str, name: &'static str, help: &'static str) -> Spec {
    Spec {
        field,
        name,
        kind: Kind::Counter,
        label: None,
        help,
    }
}

const fn g(field: &'static str, name: &'static str, help: &'static str) -> Spec {
    Spec {
        field,
        name,
        kind: Kind::Gauge,
        label: None,
        help,
    }
}

const fn cl(
    field: &'static str,
    name: &'static str,
    label: (&'static str, &'static str),
    help: &'static str,
) -> Spec {
    Spec {
        field,
        name,
        kind: Kind::Counter,
        label: Some(label),
        help,
    }
}

const COMPRESSED: &str = "Responses compressed, by coding.";
const COMPRESS_IN: &str = "Response payload bytes before compression, by coding.";
const COMPRESS_OUT: &str = "Response payload bytes after compression, by coding.";

/// `VsCounters`, labelled `vserver`.
const VSERVER: &[Spec] = &[
    c(
        "client_connections_total",
        "switchyard_vserver_client_connections_total",
        "Client connections accepted.",
    ),
    g(
        "client_connections_active",
        "switchyard_vserver_client_connections_active",
        "Client connections open now.",
    ),
    c(
        "requests",
        "switchyard_vserver_requests_total",
        "Requests received (HTTP/1 requests and HTTP/2 streams).",
    ),
    c(
        "bytes_in",
        "switchyard_vserver_received_bytes_total",
        "Bytes received from clients.",
    ),
    c(
        "bytes_out",
        "switchyard_vserver_sent_bytes_total",
        "Bytes sent to clients.",
    ),
    c(
        "bad_requests",
        "switchyard_vserver_bad_requests_total",
        "Requests refused as malformed.",
    ),
    c(
        "header_timeouts",
        "switchyard_vserver_header_timeouts_total",
        "Client connections closed waiting for a request head.",
    ),
    c(
        "body_timeouts",
        "switchyard_vserver_body_timeouts_total",
        "Requests whose body came too slowly (client_body, request_body.min_rate or deadline): 408.",
    ),
    c(
        "send_timeouts",
        "switchyard_vserver_send_timeouts_total",
        "Responses cut because the client stopped reading for client_send.",
    ),
    c(
        "no_pool",
        "switchyard_vserver_no_pool_requests_total",
        "Requests no policy or default pool routed.",
    ),
    c(
        "local_responses",
        "switchyard_vserver_local_responses_total",
        "Responses Switchyard made itself (errors, redirects, cache hits, fixed answers).",
    ),
    c(
        "tls_handshakes",
        "switchyard_vserver_tls_handshakes_total",
        "Completed TLS handshakes with clients.",
    ),
    c(
        "tls_handshake_failures",
        "switchyard_vserver_tls_handshake_failures_total",
        "TLS handshakes with clients that failed or timed out.",
    ),
    c(
        "tls_resumed",
        "switchyard_vserver_tls_resumed_handshakes_total",
        "Completed TLS handshakes that resumed a session.",
    ),
    c(
        "h2_connections",
        "switchyard_vserver_h2_connections_total",
        "HTTP/2 client connections.",
    ),
    c(
        "h2_streams",
        "switchyard_vserver_h2_streams_total",
        "HTTP/2 streams opened by clients (each also counts as a request).",
    ),
    c(
        "h3_connections",
        "switchyard_vserver_h3_connections_total",
        "HTTP/3 (QUIC) client connections past their handshake.",
    ),
    c(
        "h3_streams",
        "switchyard_vserver_h3_streams_total",
        "HTTP/3 request streams opened by clients (each also counts as a request).",
    ),
    c(
        "quic_retries",
        "switchyard_vserver_quic_retries_total",
        "QUIC connection attempts answered with a Retry (address validation under load).",
    ),
    c(
        "h3_early_requests",
        "switchyard_vserver_h3_early_requests_total",
        "HTTP/3 requests taken in 0-RTT early data and passed on with Early-Data: 1.",
    ),
    c(
        "h3_too_early",
        "switchyard_vserver_h3_too_early_total",
        "HTTP/3 requests in 0-RTT early data answered 425 Too Early (not safe to replay).",
    ),
    c(
        "mirrored",
        "switchyard_vserver_mirrored_total",
        "Copies of requests sent to a policy's mirror pools.",
    ),
    c(
        "mirror_dropped",
        "switchyard_vserver_mirror_dropped_total",
        "Copies of requests not sent to a mirror pool (body over max_body, or max_in_flight reached).",
    ),
    c(
        "h2_abuse_closes",
        "switchyard_vserver_h2_abuse_closes_total",
        "HTTP/2 connections closed with ENHANCE_YOUR_CALM (rapid reset, control-frame floods).",
    ),
    c(
        "upgrades_refused",
        "switchyard_vserver_upgrades_refused_total",
        "101 responses refused with a 502: a switch to a protocol the client did not ask for.",
    ),
    cl(
        "compressed_gzip",
        "switchyard_vserver_compressed_responses_total",
        ("coding", "gzip"),
        COMPRESSED,
    ),
    cl(
        "compressed_br",
        "switchyard_vserver_compressed_responses_total",
        ("coding", "br"),
        COMPRESSED,
    ),
    cl(
        "compressed_zstd",
        "switchyard_vserver_compressed_responses_total",
        ("coding", "zstd"),
        COMPRESSED,
    ),
    cl(
        "compress_bytes_in_gzip",
        "switchyard_vserver_compression_input_bytes_total",
        ("coding", "gzip"),
        COMPRESS_IN,
    ),
    cl(
        "compress_bytes_in_br",
        "switchyard_vserver_compression_input_bytes_total",
        ("coding", "br"),
        COMPRESS_IN,
    ),
    cl(
        "compress_bytes_in_zstd",
        "switchyard_vserver_compression_input_bytes_total",
        ("coding", "zstd"),
        COMPRESS_IN,
    ),
    cl(
        "compress_bytes_out_gzip",
        "switchyard_vserver_compression_output_bytes_total",
        ("coding", "gzip"),
        COMPRESS_OUT,
    ),
    cl(
        "compress_bytes_out_br",
        "switchyard_vserver_compression_output_bytes_total",
        ("coding", "br"),
        COMPRESS_OUT,
    ),
    cl(
        "compress_bytes_out_zstd",
        "switchyard_vserver_compression_output_bytes_total",
        ("coding", "zstd"),
        COMPRESS_OUT,
    ),
    c(
        "cache_hits",
        "switchyard_vserver_cache_hits_total",
        "Requests answered from the cache while fresh.",
    ),
    c(
        "cache_misses",
        "switchyard_vserver_cache_misses_total",
        "Cache lookups that found nothing suitable (coalesced requests included).",
    ),
    c(
        "cache_revalidations",
        "switchyard_vserver_cache_revalidations_total",
        "Stored responses revalidated with the member.",
    ),
    c(
        "cache_stale_served",
        "switchyard_vserver_cache_stale_served_total",
        "Stale responses served (stale-while-revalidate, stale-if-error).",
    ),
    c(
        "cache_coalesced",
        "switchyard_vserver_cache_coalesced_total",
        "Misses answered by another request's fetch of the same object.",
    ),
    c(
        "cache_stored",
        "switchyard_vserver_cache_stores_total",
        "Responses stored in the cache.",
    ),
    c(
        "udp_sessions_total",
        "switchyard_vserver_udp_sessions_total",
        "UDP client sessions opened (udp vservers).",
    ),
    g(
        "udp_sessions_active",
        "switchyard_vserver_udp_sessions",
        "UDP client sessions open now.",
    ),
    c(
        "udp_datagrams_in",
        "switchyard_vserver_udp_datagrams_received_total",
        "Datagrams received from clients.",
    ),
    c(
        "udp_datagrams_out",
        "switchyard_vserver_udp_datagrams_sent_total",
        "Datagrams relayed back to clients.",
    ),
    c(
        "acl_dropped",
        "switchyard_vserver_acl_dropped_total",
        "Connections and UDP datagrams dropped by an ACL rule (global or the vserver's).",
    ),
    c(
        "acl_rejected",
        "switchyard_vserver_acl_rejected_total",
        "Connections refused with a reset by an ACL rule.",
    ),
    c(
        "script_errors",
        "switchyard_vserver_script_errors_total",
        "Events of the vserver's script that failed (Lua error, max_instructions, max_memory): the request got 500.",
    ),
    c(
        "script_timeouts",
        "switchyard_vserver_script_timeouts_total",
        "Events of the vserver's script stopped at max_instructions (also counted in script_errors).",
    ),
    c(
        "script_refusals",
        "switchyard_vserver_script_refusals_total",
        "Connections the vserver's script refused (c:reject() in a connection event).",
    ),
    c(
        "udp_dropped",
        "switchyard_vserver_udp_datagrams_dropped_total",
        "Datagrams dropped: no member available, session table full, or a failed send.",
    ),
    c(
        "udp_sessions_reassigned",
        "switchyard_vserver_udp_sessions_reassigned_total",
        "UDP sessions moved to a live member because theirs went down (on_member_down = reassign).",
    ),
    c(
        "udp_sessions_closed_member_down",
        "switchyard_vserver_udp_sessions_closed_member_down_total",
        "UDP sessions ended because their member went down (on_member_down = close).",
    ),
];

/// `PoolCounters`, labelled `pool`.
const POOL: &[Spec] = &[
    c(
        "requests",
        "switchyard_pool_requests_total",
        "Requests sent to the pool (retries not counted again).",
    ),
    c(
        "retries",
        "switchyard_pool_retries_total",
        "Requests tried again on a member after a failure.",
    ),
    c(
        "no_member_available",
        "switchyard_pool_no_member_available_total",
        "Requests no member could take (answered 503).",
    ),
];

/// `MemberCounters`, labelled `pool` and `member` (its address).
const MEMBER: &[Spec] = &[
    c(
        "requests",
        "switchyard_member_requests_total",
        "Requests sent to the member (each try counts).",
    ),
    c(
        "bytes_in",
        "switchyard_member_received_bytes_total",
        "Bytes received from the member.",
    ),
    c(
        "bytes_out",
        "switchyard_member_sent_bytes_total",
        "Bytes sent to the member.",
    ),
    c(
        "server_connections_total",
        "switchyard_member_connections_total",
        "Connections opened to the member.",
    ),
    g(
        "server_connections_active",
        "switchyard_member_connections_active",
        "Connections to the member open now (idle ones included).",
    ),
    g(
        "server_connections_idle",
        "switchyard_member_connections_idle",
        "Idle connections to the member parked in the workers' pools.",
    ),
    c(
        "connections_reused",
        "switchyard_member_connections_reused_total",
        "Requests sent on an idle connection taken from a pool.",
    ),
    c(
        "connect_failures",
        "switchyard_member_connect_failures_total",
        "Connections to the member that failed or timed out (TLS handshakes included).",
    ),
    c(
        "tls_handshake_failures",
        "switchyard_member_tls_handshake_failures_total",
        "TLS handshakes with the member that failed or timed out.",
    ),
    c(
        "bad_responses",
        "switchyard_member_bad_responses_total",
        "Responses from the member that were invalid or cut short.",
    ),
    c(
        "response_timeouts",
        "switchyard_member_response_timeouts_total",
        "Responses the member was too slow to send.",
    ),
    c(
        "resets",
        "switchyard_member_resets_total",
        "Connections or streams the member reset.",
    ),
    c(
        "health_transitions",
        "switchyard_member_health_transitions_total",
        "Changes of the member's health (up to down and back).",
    ),
    c(
        "ejections",
        "switchyard_member_ejections_total",
        "Times passive health checks ejected the member.",
    ),
];

/// Every value `member_state` can give: the `state` label of
/// `switchyard_member_state` enumerates them (0 or 1 each). A state missing
/// here is still rendered, after these.
const MEMBER_STATES: &[&str] = &["up", "down", "ejected", "disabled", "draining", "drained"];

/// Latency buckets' family names.
const VS_DURATION: &str = "switchyard_vserver_request_duration_seconds";
const MEMBER_TTFB: &str = "switchyard_member_time_to_first_byte_seconds";

struct Family {
    name: String,
    kind: Kind,
    help: &'static str,
    lines: String,
}

/// Families in first-seen order, each gathering its samples.
#[derive(Default)]
struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

impl Exposition {
    fn lines(&mut self, name: &str, kind: Kind, help: &'static str) -> &mut String {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    kind,
                    help,
                    lines: String::new(),
                });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        &mut self.families[i].lines
    }

    /// One sample; `labels` is the inside of the braces (may be empty).
    fn sample(
        &mut self,
        name: &str,
        kind: Kind,
        help: &'static str,
        labels: &str,
        v: impl Display,
    ) {
        let o = self.lines(name, kind, help);
        if labels.is_empty() {
            let _ = writeln!(o, "{name} {v}");
        } else {
            let _ = writeln!(o, "{name}{{{labels}}} {v}");
        }
    }

    /// A histogram: cumulative `_bucket`s up to `+Inf`, `_sum` (seconds), `_count`.
    fn histogram(&mut self, name: &str, help: &'static str, labels: &str, b: &BucketValues) {
        let o = self.lines(name, Kind::Histogram, help);
        let sep = if labels.is_empty() { "" } else { "," };
        for (le, n) in b.cumulative() {
            match le {
                Some(le) => {
                    let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {n}");
                }
                None => {
                    let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {n}");
                }
            }
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(o, "{name}_sum{braces} {}", b.sum_seconds());
        let _ = writeln!(o, "{name}_count{braces} {}", b.count());
    }

    /// The plain counters of one entity through its table.
    fn fields(&mut self, specs: &[Spec], labels: &str, fields: Vec<(&'static str, u64)>) {
        for (field, v) in fields {
            let Some(s) = specs.iter().find(|s| s.field == field) else {
                continue;
            };
            match s.label {
                Some((k, val)) => {
                    let l = join(labels, &format!("{k}=\"{val}\""));
                    self.sample(s.name, s.kind, s.help, &l, v);
                }
                None => self.sample(s.name, s.kind, s.help, labels, v),
            }
        }
    }

    /// Responses by status class, as `code="2xx"` etc.
    fn responses(&mut self, name: &str, help: &'static str, labels: &str, r: &[u64; 6]) {
        for (class, n) in STATUS_CLASSES.iter().zip(r) {
            let l = join(labels, &format!("code=\"{class}\""));
            self.sample(name, Kind::Counter, help, &l, n);
        }
    }

    fn finish(self) -> String {
        let mut o = String::new();
        for f in self.families {
            let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(o, "# TYPE {} {}", f.name, f.kind.as_str());
            o.push_str(&f.lines);
        }
        o
    }
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a},{b}")
    }
}

/// A label value, quoted and escaped as the exposition format wants.
fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `switchyard_member_state{state=...}`: 1 for the member's state, 0 for
/// the others; and `switchyard_member_up`.
fn member_states(ex: &mut Exposition, labels: &str, m: &Member) {
    const HELP: &str = "The member's state: 1 for the one it is in, 0 for the others.";
    let now = member_state(m);
    for s in MEMBER_STATES {
        let l = join(labels, &format!("state={}", quote(s)));
        ex.sample(
            "switchyard_member_state",
            Kind::Gauge,
            HELP,
            &l,
            (*s == now) as u8,
        );
    }
    if !MEMBER_STATES.contains(&now) {
        let l = join(labels, &format!("state={}", quote(now)));
        ex.sample("switchyard_member_state", Kind::Gauge, HELP, &l, 1);
    }
    ex.sample(
        "switchyard_member_up",
        Kind::Gauge,
        "1 when the member takes new requests (state up), else 0.",
        labels,
        (now == "up") as u8,
    );
}

/// The whole exposition.
pub fn render(snap: &Snapshot) -> String {
    let mut ex = Exposition::default();
    ex.sample(
        "switchyard_build_info",
        Kind::Gauge,
        "The running build: always 1, its version as a label.",
        &format!("version={}", quote(env!("CARGO_PKG_VERSION"))),
        1,
    );
    ex.sample(
        "switchyard_config_generation",
        Kind::Gauge,
        "Generation of the configuration in use (1 at start, one more per reload that took).",
        "",
        snap.generation,
    );
    ex.sample(
        "switchyard_client_connections_parked",
        Kind::Gauge,
        "Idle keep-alive client connections waiting in the workers' parking lots (timeouts.client_park; updated about once a second).",
        "",
        crate::stats::CLIENTS_PARKED.load(std::sync::atomic::Ordering::Relaxed) as u64,
    );
    ex.sample(
        "switchyard_access_log_dropped_lines_total",
        Kind::Counter,
        "Access log lines dropped: a worker's buffer full, or a sink that failed.",
        "",
        crate::accesslog::dropped_total(),
    );
    let cu = snap.cache.usage();
    for (name, kind, help, v) in [
        (
            "switchyard_cache_objects",
            Kind::Gauge,
            "Objects (variants) in the cache.",
            cu.objects,
        ),
        (
            "switchyard_cache_bytes",
            Kind::Gauge,
            "Bytes the cache's objects take.",
            cu.bytes,
        ),
        (
            "switchyard_cache_max_bytes",
            Kind::Gauge,
            "The cache's capacity in bytes.",
            cu.max_bytes,
        ),
        (
            "switchyard_cache_evictions_total",
            Kind::Counter,
            "Objects evicted to make room.",
            cu.evictions,
        ),
        (
            "switchyard_cache_not_admitted_total",
            Kind::Counter,
            "Responses not stored: too large, or less asked for than what they would evict.",
            cu.not_admitted,
        ),
        (
            "switchyard_cache_purged_total",
            Kind::Counter,
            "Cache keys purged or invalidated (each with its variants).",
            cu.purged,
        ),
    ] {
        ex.sample(name, kind, help, "", v);
    }
    for vs in &snap.vservers {
        let labels = format!("vserver={}", quote(&vs.name));
        let v = vs.counters.read();
        ex.fields(VSERVER, &labels, v.fields());
        ex.responses(
            "switchyard_vserver_responses_total",
            "Responses sent to clients, by status class.",
            &labels,
            &v.responses,
        );
        ex.histogram(
            VS_DURATION,
            "Time from a request's head being read to the end of its answer.",
            &labels,
            &vs.latency.read_buckets(),
        );
        if vs.http3.is_some() {
            // Slot 0 is the control thread; worker i counts in slot i + 1.
            for (i, w) in vs.counters.all().skip(1).enumerate() {
                ex.sample(
                    "switchyard_vserver_h3_connections_by_worker_total",
                    Kind::Counter,
                    "HTTP/3 connections by the worker that served them (QUIC's steering by connection ID spreads them).",
                    &format!("{labels},worker=\"{i}\""),
                    w.h3_connections.load(Ordering::Relaxed),
                );
            }
        }
    }
    for vs in &snap.vservers {
        if let Some(w) = &vs.waf {
            waf(&mut ex, &vs.name, w);
        }
        for l in &vs.limits {
            limit(&mut ex, &vs.name, l);
        }
    }
    for pool in &snap.pools {
        let labels = format!("pool={}", quote(&pool.name));
        let p = pool.counters.read();
        ex.fields(POOL, &labels, p.fields());
        for m in pool.members.load().iter() {
            let labels = format!("{labels},member={}", quote(&m.addr.to_string()));
            let c = m.counters.read();
            member_states(&mut ex, &labels, m);
            ex.sample(
                "switchyard_member_weight",
                Kind::Gauge,
                "The member's weight: set at run time (admin API), else configured.",
                &labels,
                m.state.weight_override().unwrap_or(m.weight),
            );
            ex.sample(
                "switchyard_member_inflight_requests",
                Kind::Gauge,
                "Requests the member is serving now (counted from the pick).",
                &labels,
                m.state.inflight.load(Ordering::Relaxed),
            );
            ex.fields(MEMBER, &labels, c.fields());
            ex.responses(
                "switchyard_member_responses_total",
                "Responses received from the member, by status class.",
                &labels,
                &c.responses,
            );
            ex.histogram(
                MEMBER_TTFB,
                "Time from picking the member (connect included) to its response head.",
                &labels,
                &c.time_to_first_byte,
            );
        }
    }
    ddos(&mut ex);
    acme(&mut ex);
    process(&mut ex);
    ex.finish()
}

/// ACME-managed certificates (`[vserver.tls.acme]`), by their first name.
fn acme(ex: &mut Exposition) {
    use std::sync::atomic::Ordering::Relaxed;
    let now = crate::acme::now();
    for m in crate::acme::all() {
        let labels = format!("certificate={}", quote(m.id()));
        let not_after = m.not_after.load(Relaxed);
        // -1 while there is no certificate at all: alert on < 7 days as
        // on an expired one.
        let left = if m.current.load().is_some() {
            not_after - now
        } else {
            -1
        };
        ex.sample(
            "switchyard_acme_certificate_expiry_seconds",
            Kind::Gauge,
            "Seconds until the ACME-managed certificate expires (-1 while none was issued yet).",
            &labels,
            left,
        );
        ex.sample(
            "switchyard_acme_renewal_failures_total",
            Kind::Counter,
            "Orders or renewals of the ACME-managed certificate that failed.",
            &labels,
            m.failures.load(Relaxed),
        );
        ex.sample(
            "switchyard_acme_certificates_issued_total",
            Kind::Counter,
            "Certificates issued by the CA for this name since the process started.",
            &labels,
            m.issued.load(Relaxed),
        );
        ex.sample(
            "switchyard_acme_ca_throttled_total",
            Kind::Counter,
            "Answers 429 or 5xx from the CA to this certificate's requests (each retried, no sooner than its Retry-After).",
            &labels,
            m.throttle.answers.load(Relaxed),
        );
        let next = m.next_renewal.load(Relaxed);
        ex.sample(
            "switchyard_acme_next_renewal_seconds",
            Kind::Gauge,
            "Seconds until the planned renewal or retry of the ACME-managed certificate (0: due or in progress).",
            &labels,
            if next == 0 { 0 } else { (next - now).max(0) },
        );
    }
}

/// The DDoS vectors (`[shield.ddos]` in XDP), by vector.
fn ddos(ex: &mut Exposition) {
    for (name, seen, dropped, detected, rate) in crate::shield::xdp::ddos::counters() {
        let labels = format!("vector={}", quote(name));
        ex.sample(
            "switchyard_shield_ddos_packets_total",
            Kind::Counter,
            "Packets of the DDoS vector seen in XDP.",
            &labels,
            seen,
        );
        ex.sample(
            "switchyard_shield_ddos_dropped_total",
            Kind::Counter,
            "Packets of the DDoS vector dropped in XDP (past its rate limit, or by a vector checked before it).",
            &labels,
            dropped,
        );
        ex.sample(
            "switchyard_shield_ddos_detected",
            Kind::Gauge,
            "1 while the DDoS vector is detected (its rate reached its threshold).",
            &labels,
            u8::from(detected),
        );
        ex.sample(
            "switchyard_shield_ddos_rate",
            Kind::Gauge,
            "The DDoS vector's packets in the last second (half-open: connections now).",
            &labels,
            rate,
        );
    }
}

/// A vserver's WAF: requests by what the WAF did, and matches per rule.
fn waf(ex: &mut Exposition, vserver: &str, w: &switchyard_waf::policy::VsWaf) {
    use switchyard_waf::policy::WafCounters as C;
    const REQUESTS: &str = "Requests by what the WAF did: inspected, sampled_out (not inspected), blocked, detected (would have blocked in detection-only mode), body_rejected (413), limits_exceeded (regex work bound reached).";
    let labels = format!("vserver={}", quote(vserver));
    let c = &w.counters;
    for (result, v) in [
        ("inspected", &c.inspected),
        ("sampled_out", &c.sampled_out),
        ("blocked", &c.blocked),
        ("detected", &c.detected),
        ("body_rejected", &c.body_rejected),
        ("limits_exceeded", &c.limits_exceeded),
    ] {
        ex.sample(
            "switchyard_waf_requests_total",
            Kind::Counter,
            REQUESTS,
            &join(&labels, &format!("result=\"{result}\"")),
            C::get(v),
        );
    }
    for (id, n) in c.rules_sorted() {
        ex.sample(
            "switchyard_waf_rule_matches_total",
            Kind::Counter,
            "Requests each rule matched (rules that matched at least once).",
            &join(&labels, &format!("rule=\"{id}\"")),
            n,
        );
    }
}

/// A per-source limit: refusals by reason, tarpits, keys tracked.
fn limit(ex: &mut Exposition, vserver: &str, l: &crate::shield::stick::Limit) {
    let labels = format!("vserver={},limit={}", quote(vserver), quote(&l.name));
    let c = l.counters();
    for r in crate::shield::stick::Reason::ALL {
        ex.sample(
            "switchyard_limit_refused_total",
            Kind::Counter,
            "Connections and requests a per-source limit refused, by reason (conn_cur, conn_rate, req_rate, denied, req_cur).",
            &join(&labels, &format!("reason=\"{}\"", r.name())),
            c.refused[r as usize].load(Ordering::Relaxed),
        );
    }
    ex.sample(
        "switchyard_limit_tarpitted_total",
        Kind::Counter,
        "Refusals held before the answer or the close (action tarpit).",
        &labels,
        c.tarpitted.load(Ordering::Relaxed),
    );
    ex.sample(
        "switchyard_limit_untracked_total",
        Kind::Counter,
        "Keys admitted without being counted: the limit's table was full of keys holding connections.",
        &labels,
        c.table_full.load(Ordering::Relaxed),
    );
    ex.sample(
        "switchyard_limit_keys",
        Kind::Gauge,
        "Keys (sources, header or cookie values, paths) the limit's table holds.",
        &labels,
        l.table.len(),
    );
}

/// The standard `process_*` metrics, from /proc (Linux only; whatever cannot
/// be read is left out).
fn process(ex: &mut Exposition) {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if let Some(stat) = proc_stat() {
        if ticks > 0 {
            let ticks = ticks as f64;
            ex.sample(
                "process_cpu_seconds_total",
                Kind::Counter,
                "Total user and system CPU time spent in seconds.",
                "",
                (stat.utime + stat.stime) as f64 / ticks,
            );
            if let Some(btime) = boot_time() {
                ex.sample(
                    "process_start_time_seconds",
                    Kind::Gauge,
                    "Start time of the process since unix epoch in seconds.",
                    "",
                    btime as f64 + stat.starttime as f64 / ticks,
                );
            }
        }
        ex.sample(
            "process_virtual_memory_bytes",
            Kind::Gauge,
            "Virtual memory size in bytes.",
            "",
            stat.vsize,
        );
        if page > 0 {
            ex.sample(
                "process_resident_memory_bytes",
                Kind::Gauge,
                "Resident memory size in bytes.",
                "",
                stat.rss.saturating_mul(page as u64),
            );
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        ex.sample(
            "process_open_fds",
            Kind::Gauge,
            "Number of open file descriptors.",
            "",
            dir.count(),
        );
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        ex.sample(
            "process_max_fds",
            Kind::Gauge,
            "Maximum number of open file descriptors.",
            "",
            lim.rlim_cur,
        );
    }
}

struct ProcStat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss: u64,
}

/// The fields of /proc/self/stat we use (counted after the `comm` field,
/// which may hold spaces and parentheses).
fn proc_stat() -> Option<ProcStat> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = s.get(s.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let n = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        utime: n(14)?,
        stime: n(15)?,
        starttime: n(22)?,
        vsize: n(23)?,
        rss: n(24)?,
    })
}

fn boot_time() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{MemberValues, PoolValues, VsValues};

    fn covers(specs: &[Spec], fields: Vec<(&'static str, u64)>) {
        for (f, _) in &fields {
            assert!(
                specs.iter().any(|s| s.field == *f),
                "counter {f} has no Prometheus family"
            );
        }
        for s in specs {
            assert!(
                fields.iter().any(|(f, _)| *f == s.field),
                "{} names no counter",
                s.field
            );
            match s.kind {
                Kind::Counter => assert!(s.name.ends_with("_total"), "{}", s.name),
                _ => assert!(!s.name.ends_with("_total"), "{}", s.name),
            }
            assert!(s.name.starts_with("switchyard_"), "{}", s.name);
        }
    }

    #[test]
    fn every_counter_has_a_family() {
        covers(VSERVER, VsValues::default().fields());
        covers(POOL, PoolValues::default().fields());
        covers(MEMBER, MemberValues::default().fields());
    }

    #[test]
    fn families_are_grouped_with_help_and_type() {
        let mut ex = Exposition::default();
        ex.sample("a_total", Kind::Counter, "A.", "x=\"1\"", 1);
        ex.sample("b", Kind::Gauge, "B.", "", 2);
        ex.sample("a_total", Kind::Counter, "A.", "x=\"2\"", 3);
        let mut b = BucketValues::default();
        b.counts[0] = 2;
        b.counts[14] = 1;
        b.sum_us = 1_500_000;
        ex.histogram("h_seconds", "H.", "", &b);
        let o = ex.finish();
        assert!(o.starts_with(
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"2\"} 3\n# HELP b B.\n# TYPE b gauge\nb 2\n"
        ), "{o}");
        assert!(o.contains("h_seconds_bucket{le=\"0.0005\"} 2\n"), "{o}");
        assert!(o.contains("h_seconds_bucket{le=\"10\"} 2\n"), "{o}");
        assert!(o.contains("h_seconds_bucket{le=\"+Inf\"} 3\n"), "{o}");
        assert!(o.contains("h_seconds_sum 1.5\nh_seconds_count 3\n"), "{o}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }

    #[test]
    fn proc_stat_parses() {
        let s = proc_stat().expect("/proc/self/stat");
        assert!(s.vsize > 0 && s.rss > 0);
        assert!(boot_time().is_some());
    }
}
