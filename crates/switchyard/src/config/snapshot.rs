//! The validated, immutable configuration the data path reads.
//!
//! Built off the request path from the file model, then published with one
//! atomic swap. Objects that must survive a reload (member health, counters)
//! are carried over from the previous snapshot by name.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use regex::Regex;

use super::model::HealthKind;
pub use super::model::UpstreamProtocol;
use super::types::Cidr;
pub use crate::balance::persist::{HashKey, Persist};
use crate::balance::Algorithm;
use crate::balance::{Balancer, Candidate, MemberState};
pub use crate::source::SourceAddress;
use crate::stats::{Histogram, MemberCounters, PoolCounters, Sharded, VsCounters};

pub struct Snapshot {
    pub generation: u64,
    pub settings: Settings,
    pub admin: Option<AdminSettings>,
    /// The configuration text this snapshot was built from, and its name
    /// (a path, or the quickstart's), for the admin API.
    pub source: Arc<str>,
    pub source_name: String,
    pub vservers: Vec<Arc<VServer>>,
    pub pools: Vec<Arc<Pool>>,
    /// The HTTP cache's objects: one store for every vserver, handed from
    /// snapshot to snapshot (a reload keeps the cache).
    pub cache: Arc<crate::cache::Store>,
    /// The global ACL (`[shield]`), when it has rules.
    pub shield: Option<Arc<crate::shield::AclSet>>,
    /// Listen address -> virtual server (TCP listeners: HTTP and tcp).
    pub by_listen: switchyard_fasthash::FxHashMap<SocketAddr, Arc<VServer>>,
    /// UDP listen address -> udp virtual server.
    pub udp_by_listen: switchyard_fasthash::FxHashMap<SocketAddr, Arc<VServer>>,
    /// Things that work but deserve the operator's attention (shown by
    /// `check`, logged at load and reload).
    pub warnings: Vec<super::ConfigError>,
    /// The pools and policies of `source` by their text, so that the next
    /// read of a text that changed a little parses only what changed
    /// (config/parts.rs).
    pub(crate) parts: Arc<super::parts::Parts>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Snapshot(generation {}, {} vservers, {} pools)",
            self.generation,
            self.vservers.len(),
            self.pools.len()
        )
    }
}

impl Snapshot {
    pub fn vserver_for(&self, listen: &SocketAddr) -> Option<&Arc<VServer>> {
        self.by_listen.get(listen)
    }

    pub fn udp_addrs(&self) -> Vec<SocketAddr> {
        let mut v: Vec<SocketAddr> = self.udp_by_listen.keys().copied().collect();
        v.sort();
        v
    }

    /// The addresses with QUIC (UDP) beside TCP: `[vserver.http3]`.
    pub fn quic_addrs(&self) -> Vec<SocketAddr> {
        let mut v: Vec<SocketAddr> = self
            .by_listen
            .iter()
            .filter(|(_, vs)| vs.http3.is_some())
            .map(|(a, _)| *a)
            .collect();
        v.sort();
        v
    }

    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        let mut v: Vec<SocketAddr> = self.by_listen.keys().copied().collect();
        v.sort();
        v
    }
}

/// `[admin]`, validated.
pub struct AdminSettings {
    pub listen: SocketAddr,
    pub tokens: Option<Arc<super::tokens::Tokens>>,
    pub tls: Option<Arc<crate::tls::TlsServer>>,
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub workers: usize,
    pub pin_workers: bool,
    pub grace_period_ms: u64,
    pub access_log: bool,
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub retries: u32,
    pub client_header_ms: u64,
    pub client_idle_ms: u64,
    pub client_park_ms: u64,
    pub client_body_ms: u64,
    pub client_send_ms: u64,
    pub upstream_connect_ms: u64,
    pub upstream_response_ms: u64,
    pub tunnel_idle_ms: u64,
    pub http2: Http2Settings,
}

/// `[http2]`, validated.
#[derive(Debug, Clone)]
pub struct Http2Settings {
    pub max_concurrent_streams: u32,
    pub stream_window: u32,
    pub connection_window: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    pub max_client_resets: u32,
    pub max_control_frames: u32,
    pub abuse_window_ms: u64,
}

pub struct VServer {
    pub name: String,
    pub listen: Vec<SocketAddr>,
    pub policies: Vec<Policy>,
    pub default_pool: Option<Arc<Pool>>,
    pub request_headers: HeaderEdits,
    pub response_headers: HeaderEdits,
    pub counters: Arc<Sharded<VsCounters>>,
    /// Time from the request head being read to the response head being sent (µs).
    pub latency: Arc<Sharded<Histogram>>,
    /// TLS termination, when configured.
    pub tls: Option<Arc<crate::tls::TlsServer>>,
    /// Cleartext HTTP/2 with prior knowledge is accepted.
    pub h2c: bool,
    /// Only h2c: no HTTP/1 on this vserver.
    pub h2c_only: bool,
    /// Compression settings, and whether they apply to requests no policy
    /// decides for.
    pub compression: Option<Arc<crate::compress::Settings>>,
    pub compression_on: bool,
    /// Caching settings, and whether they apply to requests no policy
    /// decides for.
    pub cache: Option<Arc<VsCache>>,
    pub cache_on: bool,
    /// The web application firewall, when the vserver turns it on.
    pub waf: Option<Arc<switchyard_waf::policy::VsWaf>>,
    /// `[vserver.script]`: its checked script and the pools it may choose.
    pub script: Option<Arc<VsScript>>,
    /// Per-source limits, in order.
    pub limits: Vec<Arc<crate::shield::stick::Limit>>,
    /// HTTP, or L4 (`tcp`, `udp`) with its settings.
    pub protocol: super::model::Protocol,
    pub l4: Option<Arc<L4Settings>>,
    /// Sources that open with a PROXY protocol header.
    pub accept_proxy: Option<Arc<AcceptProxy>>,
    /// `[vserver.http3]`: QUIC on the listen addresses too.
    pub http3: Option<Arc<Http3>>,
    pub socket: SocketOpts,
    /// This vserver's ACL, evaluated after the global one.
    pub acl: Option<Arc<crate::shield::AclSet>>,
    /// `[vserver.access_log]`, when set.
    pub access_log: Option<Arc<crate::accesslog::Config>>,
    /// An HTTP vserver with a pool that sends PROXY headers: its client
    /// connections get member connections of their own (`ConnGuard`).
    pub private_member_conns: bool,
    /// How request paths are normalized before the rules (`[vserver.normalize]`).
    pub normalize: crate::http::normalize::Rules,
    /// `[vserver.request_body]`: minimum rate, grace and deadline of a
    /// request body (its `gap_ms` is `timeouts.client_body`, see `body_pace`).
    pub request_body: crate::http::body::BodyPace,
}

/// A vserver's script (`[vserver.script]`), with the pools `r:use_pool`
/// may name, in the order of `script.pools`.
pub struct VsScript {
    pub script: Arc<crate::script::Script>,
    pub pools: Vec<Arc<Pool>>,
}

impl VServer {
    /// Whether this vserver caches: "off", "on", or "per-policy" when a
    /// policy turns it on or off for the requests it matches.
    pub fn cache_mode(&self) -> &'static str {
        if self.cache.is_none() {
            return "off";
        }
        let flips = self
            .policies
            .iter()
            .any(|p| p.cache.is_some_and(|on| on != self.cache_on));
        match (flips, self.cache_on) {
            (true, _) => "per-policy",
            (false, true) => "on",
            (false, false) => "off",
        }
    }

    /// How this vserver's request bodies must keep coming, `gap_ms`
    /// (`timeouts.client_body`) being the longest pause between reads.
    pub fn body_pace(&self, gap_ms: u64) -> crate::http::body::BodyPace {
        crate::http::body::BodyPace {
            gap_ms,
            ..self.request_body
        }
    }
}

/// A vserver's cache: its settings and the shared store.
pub struct VsCache {
    pub settings: crate::cache::Settings,
    pub store: Arc<crate::cache::Store>,
}

pub struct Policy {
    pub name: String,
    pub matcher: Matcher,
    pub action: Option<Action>,
    pub request_headers: HeaderEdits,
    pub response_headers: HeaderEdits,
    /// Compression for matching requests: off, on with the vserver's
    /// settings, or on with the policy's own.
    pub compression: Option<PolicyCompression>,
    /// Caching on or off for matching requests.
    pub cache: Option<bool>,
    /// What the member gets instead (a policy that sends to a pool).
    pub rewrite: Option<Rewrite>,
    /// Where copies of the request go too (a policy that sends to a pool).
    pub mirrors: Vec<Mirror>,
    /// The `scope = "policy"` limits it names: indices into the vserver's
    /// `limits`.
    pub limits: Vec<usize>,
    /// The longest request body it lets through (bytes).
    pub max_body: Option<u64>,
    /// Its member timeouts, where it sets them.
    pub timeouts: MemberTimeouts,
}

/// A policy's member timeouts (ms); None: the global `[timeouts]` one.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemberTimeouts {
    pub connect_ms: Option<u64>,
    pub response_ms: Option<u64>,
}

/// A policy's `mirror` entry, validated.
pub struct Mirror {
    pub pool: Arc<Pool>,
    /// Requests copied per million matching ones (1,000,000: all).
    pub per_million: u32,
    pub max_body: usize,
    pub max_in_flight: usize,
    /// Copies on their way now, on every worker (one configuration
    /// generation's; a reload starts from zero).
    pub in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// A policy's `rewrite`, validated: `path` and `path_prefix` are
/// normalized paths (no dot segments, no empty segments), or with
/// `path_regex` `path` is its replacement (the result is normalized by
/// the vserver's rules); `host` a host name or address with an optional
/// port.
#[derive(Debug, Clone)]
pub struct Rewrite {
    pub path: Option<String>,
    pub path_prefix: Option<String>,
    pub path_regex: Option<regex::Regex>,
    pub host: Option<String>,
}

pub enum PolicyCompression {
    Off,
    On,
    With(Arc<crate::compress::Settings>),
}

pub enum Action {
    Pool(Arc<Pool>),
    Redirect {
        location: String,
        status: u16,
    },
    /// To "https://" + the request's host (+ ":port" unless 443) + target.
    RedirectHttps {
        status: u16,
        port: u16,
    },
    Respond {
        status: u16,
        body: Bytes,
        content_type: String,
    },
    /// A Location built from the request with these parts replaced.
    RedirectTo(RedirectParts),
}

pub struct RedirectParts {
    pub scheme: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub path: Option<String>,
    /// The prefix of the request's path that `path` replaces; None: all.
    pub path_prefix: Option<String>,
    pub status: u16,
}

#[derive(Default)]
pub struct Matcher {
    /// Lower-case host names; a leading "*." matches any subdomain.
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
    pub path_prefixes: Vec<String>,
    pub path_regex: Option<Regex>,
    /// path, path_prefix and path_regex ignore ASCII case.
    pub path_nocase: bool,
    /// Upper-case method names.
    pub methods: Vec<String>,
    /// Every one must match.
    pub headers: Vec<NameValueMatch>,
    pub queries: Vec<NameValueMatch>,
    pub sources: Vec<Cidr>,
}

pub struct NameValueMatch {
    pub name: String,
    pub value: ValueMatch,
}

pub enum ValueMatch {
    Present,
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

impl ValueMatch {
    pub fn matches(&self, v: &[u8]) -> bool {
        match self {
            ValueMatch::Present => true,
            ValueMatch::Exact(s) => v == s.as_bytes(),
            ValueMatch::Prefix(s) => v.starts_with(s.as_bytes()),
            ValueMatch::Regex(r) => std::str::from_utf8(v).is_ok_and(|v| r.is_match(v)),
        }
    }
}

#[derive(Default, Clone, Debug)]
pub struct HeaderEdits {
    /// (name, value) replacing every field of that name.
    pub set: Vec<(String, String)>,
    pub add: Vec<(String, String)>,
    /// Lower-case names.
    pub remove: Vec<String>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// True if a field of this name is removed or replaced by these edits.
    pub fn drops(&self, name: &[u8]) -> bool {
        self.remove
            .iter()
            .any(|r| r.as_bytes().eq_ignore_ascii_case(name))
            || self
                .set
                .iter()
                .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
    }
}

#[derive(Clone, Debug)]
pub struct HealthCheck {
    pub kind: HealthKind,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub rise: u32,
    pub fall: u32,
    pub method: String,
    pub path: String,
    pub host: Option<String>,
    /// Empty: any 2xx or 3xx.
    pub expect_status: Vec<u16>,
    pub expect_body: Option<String>,
    /// UDP probe and the bytes its reply must contain.
    pub send: Vec<u8>,
    pub expect: Vec<u8>,
    /// Port checked instead of the member's.
    pub port: Option<u16>,
}

#[derive(Clone, Debug)]
pub struct PassiveCheck {
    pub consecutive_failures: u32,
    pub ejection_ms: u64,
    pub on_5xx: bool,
}

pub struct Pool {
    pub name: String,
    pub algorithm: Algorithm,
    pub protocol: UpstreamProtocol,
    pub hash_key: Option<HashKey>,
    pub persistence: Option<Persist>,
    pub idle_per_member: usize,
    pub idle_timeout_ms: u64,
    pub health: Option<HealthCheck>,
    pub passive: Option<PassiveCheck>,
    /// TLS to the members (`[pool.tls]`), when configured.
    pub tls: Option<Arc<crate::tls::UpstreamTls>>,
    /// The members and the balancer over them, swapped together in place
    /// by a run-time member change (a pool with `cluster_members`,
    /// cluster/members.rs), so an endpoint change costs one pool, not a
    /// build of the whole configuration. Whoever picks a member keeps the
    /// list it loaded (`load_full`) for as long as it uses the index.
    pub members: ArcSwap<MemberList>,
    /// Its members come from the cluster (`cluster_members = true`).
    pub cluster_members: bool,
    /// A PROXY protocol header sent to members on L4 connections (an HTTP
    /// vserver may not use such a pool).
    pub proxy_protocol: Option<ProxyVersion>,
    /// Where connections to the members come from (default: the
    /// kernel's choice of local address).
    pub source_address: Option<SourceAddress>,
    pub counters: Arc<Sharded<PoolCounters>>,
}

/// A pool's members at one time, with the balancer built over them (its
/// cursors and consistent-hash table are sized by the list).
pub struct MemberList {
    pub list: Vec<Arc<Member>>,
    pub balancer: Balancer,
}

impl std::ops::Deref for MemberList {
    type Target = [Arc<Member>];
    fn deref(&self) -> &[Arc<Member>] {
        &self.list
    }
}

impl Pool {
    /// The local address connections to the members come from, when the
    /// pool names one (HTTP member connections; `check` refuses "client"
    /// for them).
    pub fn local_source(&self) -> Option<std::net::IpAddr> {
        self.source_address.and_then(|s| s.local())
    }
}

impl Candidate for Arc<Member> {
    fn state(&self) -> &MemberState {
        &self.state
    }
    fn weight(&self) -> u32 {
        self.state.weight_override().unwrap_or(self.weight)
    }
    fn max_connections(&self) -> u32 {
        self.max_connections
    }
    fn backup(&self) -> bool {
        self.backup
    }
}

pub struct Member {
    pub addr: SocketAddr,
    pub weight: u32,
    pub max_connections: u32,
    pub backup: bool,
    /// Value of the persistence cookie that selects this member: a hash of
    /// pool name and address, so it survives reloads and restarts.
    pub cookie_id: String,
    pub state: Arc<MemberState>,
    pub counters: Arc<Sharded<MemberCounters>>,
}

impl Member {
    /// The label used in logs, stats and errors: "pool/address".
    pub fn label(&self, pool: &str) -> String {
        format!("{pool}/{}", self.addr)
    }
}

// ---- L4: what `l4.rs` builds for tcp and udp vservers and PROXY pools

/// How a TCP relay moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// splice(2) once reads are large (bulk transfers), copies for small ones.
    Auto,
    Splice,
    Copy,
}

pub struct L4Settings {
    pub idle_timeout_ms: u64,
    pub zero_copy: ZeroCopy,
    pub client_hello_timeout_ms: u64,
    /// TLS passthrough routes; empty: every connection to the default pool.
    pub sni: SniTable,
    pub max_sessions: usize,
    pub per_datagram: bool,
    pub on_member_down: OnMemberDown,
}

/// What a UDP session does when its member is down (failed health checks,
/// ejected, forced down or disabled; a draining member keeps its
/// sessions). Decided on the session's next datagram from the client, as
/// LVS's `expire_nodest_conn` decides on the next packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMemberDown {
    /// The datagram and the rest of the session go to a live member picked
    /// as for a new session; the client keeps its session (the default: a
    /// resolver, VPN or QUIC client that keeps its port is not left
    /// sending into a dead member).
    Reassign,
    /// The session ends and the datagram is dropped (LVS with
    /// `expire_nodest_conn = 1`): the client's next datagram opens a new
    /// session on a live member.
    Close,
    /// The session stays with its member until it goes idle (LVS's
    /// default, `expire_nodest_conn = 0`).
    Keep,
}

/// Pools by server name: exact names first, then the longest wildcard.
#[derive(Default)]
pub struct SniTable {
    pub(super) exact: HashMap<String, Arc<Pool>>,
    /// "example.com" for "*.example.com".
    pub(super) wildcard: HashMap<String, Arc<Pool>>,
}

impl SniTable {
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// The pool for `name` (lower case): exact, else `*.parent` for the
    /// nearest parent (a wildcard matches one label or more, as HAProxy's
    /// `req.ssl_sni -m end` rules are usually written).
    pub fn pool_for(&self, name: &str) -> Option<&Arc<Pool>> {
        if let Some(p) = self.exact.get(name) {
            return Some(p);
        }
        let mut rest = name;
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(p) = self.wildcard.get(parent) {
                return Some(p);
            }
            rest = parent;
        }
        None
    }
}

/// Who must (and who alone may) open with a PROXY protocol header.
/// `[vserver.http3]`, validated: QUIC on the vserver's listen addresses.
pub struct Http3 {
    /// QUIC's TLS and transport (streams, idle timeout); a reload makes a
    /// new one, with a new Retry token key.
    pub server: Arc<quinn::ServerConfig>,
    /// The TLS configuration in `server`: a connection whose script runs
    /// `on_client_hello` gets a copy with the script's certificate
    /// resolver (`proxy::quic_hello`).
    pub tls: Arc<rustls::ServerConfig>,
    /// Handshakes in progress past which clients get a Retry first.
    pub retry_threshold: usize,
    /// `early_data`: requests may come in 0-RTT (the TLS configuration in
    /// `server` takes early data); only safe ones go on, marked.
    pub early_data: bool,
    /// The Alt-Svc value advertised on responses of each listen port
    /// (`h3=":443"; ma=86400`); empty: not advertised.
    pub alt_svc: Vec<(u16, bytes::Bytes)>,
}

#[derive(Debug)]
pub struct AcceptProxy {
    pub trusted: Vec<Cidr>,
    pub timeout_ms: u64,
    /// tcp vservers without TLS termination or `sni_route`: how long the
    /// first bytes of an untrusted source are waited for before a member
    /// is connected, so that a PROXY header among them is refused before
    /// any member hears of the connection. A client still silent then is
    /// connected (the member may speak first: SMTP, MySQL).
    pub untrusted_wait_ms: u64,
}

impl AcceptProxy {
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }
}

/// Listening socket options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOpts {
    pub backlog: i32,
    pub keepalive_ms: Option<u64>,
    pub fast_open: u32,
    pub defer_accept_s: u32,
    pub nodelay: bool,
    /// IP_FREEBIND: bind an address not (yet) on this host.
    pub freebind: bool,
    /// TCP_QUICKACK off on the listener: accepted connections start in
    /// delayed-ACK mode, so the kernel does not acknowledge a request on its
    /// own; the response carries the ACK, one segment fewer per connection.
    /// Worth it only where the client speaks first and is answered at once
    /// (HTTP); a slow answer still gets its ACK after the delayed-ACK timer.
    pub smart_accept: bool,
}

impl Default for SocketOpts {
    fn default() -> Self {
        SocketOpts {
            backlog: 4096,
            keepalive_ms: None,
            fast_open: 0,
            defer_accept_s: 0,
            nodelay: true,
            freebind: false,
            smart_accept: false,
        }
    }
}

/// PROXY protocol version sent to a pool's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    V1,
    V2,
}
