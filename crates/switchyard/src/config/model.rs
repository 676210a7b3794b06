//! The configuration file as the operator writes it (TOML).
//!
//! This is the *external* model: it mirrors the file and nothing else. The
//! data path never reads it; `snapshot.rs` validates it into the internal
//! model. Keeping the two apart lets the file format evolve without touching
//! the request path.
//!
//! Values that can be checked on their own (durations, addresses, CIDRs,
//! regexes, enums) are parsed during deserialization so that the TOML parser
//! attaches the exact line and column of the offending value to the error.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::types::{Cidr, Millis, PathRegex};

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub global: Global,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub http2: Http2,
    pub admin: Option<Admin>,
    /// The shared HTTP cache's memory; vservers turn caching on.
    pub cache: Option<CacheStore>,
    /// This node's cluster (cluster/): read by `run` before the rest.
    pub cluster: Option<ClusterFile>,
    /// WAF rule sets (config/waf.rs); vservers turn the WAF on.
    pub waf: Option<super::waf::WafFile>,
    /// Global ACL and address lists (config/shield.rs).
    /// Not `Spanned`: `[shield.xdp]` alone makes `[shield]` an implicit
    /// table, which toml 0.8 cannot deserialize into a `Spanned`.
    pub shield: Option<super::shield::ShieldFile>,
    #[serde(default)]
    pub vserver: Vec<VServer>,
    /// Shared (`Arc`), as `VServer::policy`.
    #[serde(default)]
    pub pool: Vec<Arc<Pool>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Global {
    /// Worker threads; 0 or absent means one per CPU core.
    pub workers: Option<usize>,
    /// Pin worker N to core N (modulo the cores this process may use).
    pub pin_workers: Option<bool>,
    /// How long SIGTERM waits for in-flight requests before exiting anyway.
    pub grace_period: Option<Millis>,
    /// Write one access-log line per request to stderr.
    pub access_log: Option<bool>,
}

/// `[http2]`: the HTTP/2 front end's limits, for every vserver that speaks it.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Http2 {
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: Option<Spanned<usize>>,
    /// Flow-control window per stream and per connection (bytes).
    pub stream_window: Option<Spanned<usize>>,
    pub connection_window: Option<Spanned<usize>>,
    /// Largest frame payload accepted (SETTINGS_MAX_FRAME_SIZE).
    pub max_frame_size: Option<Spanned<usize>>,
    /// Largest decoded header list (SETTINGS_MAX_HEADER_LIST_SIZE); default
    /// `limits.max_header_bytes`. Bounds HPACK bombs and CONTINUATION floods.
    pub max_header_list_size: Option<Spanned<usize>>,
    /// Streams a client may reset within `abuse_window` before the
    /// connection is closed with ENHANCE_YOUR_CALM (rapid reset).
    pub max_client_resets: Option<Spanned<usize>>,
    /// SETTINGS, PING, PRIORITY and empty DATA frames a client may send
    /// within `abuse_window` (control-frame floods).
    pub max_control_frames: Option<Spanned<usize>>,
    pub abuse_window: Option<Millis>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Longest request line accepted (bytes); longer gets 414.
    pub max_request_line: Option<Spanned<usize>>,
    /// Largest request or response header block (bytes); larger gets 431 / 502.
    pub max_header_bytes: Option<Spanned<usize>>,
    /// Most header fields in one message.
    pub max_headers: Option<Spanned<usize>>,
    /// Attempts on other members after a connect failure (idempotent requests).
    pub retries: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// Time allowed to receive a complete request head (slowloris defence).
    pub client_header: Option<Millis>,
    /// Time an idle keep-alive client connection is kept open.
    pub client_idle: Option<Millis>,
    /// Idle this long, a keep-alive client connection leaves its task for
    /// the worker's parking lot (less memory, a few system calls more when
    /// its next request comes).
    pub client_park: Option<Millis>,
    /// Time allowed between two reads of a request body.
    pub client_body: Option<Millis>,
    /// Time a response may wait for a client that stops reading.
    pub client_send: Option<Millis>,
    pub upstream_connect: Option<Millis>,
    /// Time from the request being sent to the response head arriving.
    pub upstream_response: Option<Millis>,
    /// Idle time after which a tunnel (WebSocket, Upgrade) is closed.
    pub tunnel_idle: Option<Millis>,
}

/// `[cluster]`: where the cluster's configuration lives (docs/cluster.md).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// etcd client URLs, "http://host:port".
    pub endpoints: Vec<String>,
    /// Key prefix; also the cluster's name.
    pub prefix: String,
    /// This node's name (default: the host name).
    pub node: Option<String>,
    /// Lease of the node's status key (default "10s").
    pub status_ttl: Option<Millis>,
    /// A watch silent this long is checked against a read (default "10s").
    pub watch_idle: Option<Millis>,
    /// How long `run` waits for etcd and a published configuration (default "30s").
    pub startup_wait: Option<Millis>,
    /// Where the last applied configuration is kept, to start from when
    /// etcd is away (default: the node file's folder).
    pub state_dir: Option<String>,
    /// TLS to `https://` endpoints: the CA that signed etcd's certificate,
    /// and this node's client certificate and key when etcd asks for one.
    pub ca: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    /// etcd's auth: a user and its password (or a file holding it).
    pub username: Option<String>,
    pub password: Option<String>,
    pub password_file: Option<String>,
    /// ACME in a cluster: a file holding the 32-byte key (64 hex digits)
    /// that encrypts certificate keys published in etcd (docs/acme.md).
    pub acme_key_file: Option<String>,
}

/// `[cache]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheStore {
    /// Memory for every cached object of every vserver (default 256 MiB).
    pub max_bytes: Option<Spanned<u64>>,
    /// Larger responses are not stored (default 8 MiB).
    pub max_object_bytes: Option<Spanned<u64>>,
}

/// `[vserver.cache]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VsCache {
    /// Default true; false keeps the settings for policies that turn it on.
    pub enabled: Option<bool>,
    /// Added to the cache key: "header:NAME" or "cookie:NAME".
    pub key: Option<Vec<Spanned<String>>>,
    /// Percent of (Date - Last-Modified) a response without explicit
    /// freshness stays fresh (default 10).
    pub heuristic_percent: Option<Spanned<u64>>,
    /// Store responses carrying Set-Cookie (default false).
    pub store_set_cookie: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// Default 127.0.0.1:9090: loopback unless the operator says otherwise.
    pub listen: Option<Spanned<SocketAddr>>,
    /// Bearer tokens, one per line: `<name> <role> <token>`, role `read`
    /// or `admin`. Without it the API is open to whoever reaches the
    /// listener, which must then be on loopback.
    pub tokens_file: Option<Spanned<String>>,
    /// TLS on the admin listener, as `[vserver.tls]` (client certificates too).
    pub tls: Option<Tls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VServer {
    pub name: Spanned<String>,
    pub listen: Spanned<Vec<Spanned<SocketAddr>>>,
    #[serde(default)]
    pub protocol: Protocol,
    pub default_pool: Option<Spanned<String>>,
    #[serde(default)]
    pub request_headers: HeaderEdits,
    #[serde(default)]
    pub response_headers: HeaderEdits,
    /// Shared (`Arc`) so that a policy read from an unchanged part of a
    /// text is reused as is by the next read (config/parts.rs).
    #[serde(default)]
    pub policy: Vec<Arc<Policy>>,
    /// TLS termination; absent means plain HTTP.
    pub tls: Option<Tls>,
    /// Cleartext HTTP/2 with prior knowledge (h2c) beside HTTP/1.1 on a
    /// plain vserver. TLS vservers offer h2 through `tls.alpn`.
    pub h2c: Option<Spanned<bool>>,
    /// The listener speaks only h2c (HAProxy's `proto h2`): a connection
    /// that does not open with the HTTP/2 preface is closed unanswered.
    pub h2c_only: Option<Spanned<bool>>,
    /// Response compression; on for every request unless `enabled = false`
    /// or a policy says otherwise.
    pub compression: Option<Compression>,
    /// HTTP caching (RFC 9111) of this vserver's responses.
    pub cache: Option<VsCache>,
    /// The web application firewall (docs/waf.md).
    pub waf: Option<super::waf::VsWafFile>,
    /// An event script in Lua (docs/scripting.md).
    pub script: Option<super::script::ScriptFile>,
    /// Per-source limits (config/limits.rs, docs/shield.md).
    #[serde(default)]
    pub limit: Vec<super::limits::LimitFile>,
    /// One line per request (docs/access-logs.md).
    pub access_log: Option<AccessLog>,
    /// L4 settings of a `tcp` or `udp` vserver.
    pub l4: Option<L4>,
    /// TLS passthrough on a `tcp` vserver: the pool by the server name of
    /// the ClientHello, which is relayed untouched.
    #[serde(default)]
    pub sni_route: Vec<SniRoute>,
    /// Connections from these sources open with a PROXY protocol header.
    pub proxy_protocol: Option<AcceptProxy>,
    /// Listening socket options.
    pub socket: Option<SocketOptions>,
    /// How request paths are normalized before the rules read them.
    pub normalize: Option<super::normalize::NormalizeFile>,
    /// This vserver's ACL rules, after the global ones (`[[vserver.acl]]`).
    #[serde(default)]
    pub acl: Vec<super::shield::AclRule>,
    /// How slowly a request body may come (`[vserver.request_body]`).
    pub request_body: Option<RequestBody>,
    /// HTTP/3 over QUIC on the listen addresses (UDP) too.
    pub http3: Option<Spanned<Http3>>,
}

/// `[vserver.http3]`: QUIC (UDP) on the vserver's listen addresses, with
/// its TLS (`[vserver.tls]`, TLS 1.3).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Http3 {
    /// How long clients may remember the Alt-Svc advertisement on HTTP/1.1
    /// and HTTP/2 responses; "0s" advertises nothing.
    pub alt_svc_max_age: Option<Millis>,
    /// A connection with no packet for this long is closed.
    pub idle_timeout: Option<Millis>,
    /// Request streams a client may have open at once per connection.
    pub max_streams: Option<Spanned<u32>>,
    /// Handshakes in progress on the listener past which a new client
    /// must first prove its address (a Retry round trip); 0: always.
    pub retry_threshold: Option<Spanned<u32>>,
    /// Take requests in 0-RTT early data (RFC 8470): off unless set.
    pub early_data: Option<Spanned<bool>>,
    /// Bytes a client may send ahead on one stream and on the connection
    /// (QUIC flow control), and bytes of responses buffered for sending
    /// per connection: what one connection can make us hold.
    pub stream_window: Option<Spanned<usize>>,
    pub connection_window: Option<Spanned<usize>>,
    pub send_window: Option<Spanned<usize>>,
}

/// `[vserver.request_body]`: the slow-body (R.U.D.Y.) defence beside
/// `timeouts.client_body`, the gap between two reads.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestBody {
    /// Waiting this long in all, the body must have averaged `min_rate`.
    pub grace: Option<Millis>,
    /// Bytes per second after `grace`; 0 turns the minimum off.
    pub min_rate: Option<Spanned<u64>>,
    /// The most the whole body may keep the proxy waiting; "0s": no limit.
    pub deadline: Option<Millis>,
}

/// `[vserver.l4]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L4 {
    /// A relay with no byte either way for this long is closed (tcp,
    /// default 10m); a UDP session idle this long ends (default 30s).
    pub idle_timeout: Option<Millis>,
    /// "auto" (default: splice(2) from 16 KiB reads on), "splice", "copy".
    pub zero_copy: Option<Spanned<String>>,
    /// Time allowed for the whole ClientHello on an `sni_route` vserver.
    pub client_hello_timeout: Option<Millis>,
    /// UDP: most client sessions at once per worker (default 65536).
    pub max_sessions: Option<Spanned<usize>>,
    /// UDP: balance every datagram on its own (stateless protocols such as
    /// DNS) instead of keeping a session per client address.
    pub per_datagram: Option<bool>,
    /// UDP: what a session does with its next datagram once its member is
    /// down: "reassign" (default), "close" or "keep".
    pub on_member_down: Option<Spanned<String>>,
}

/// `[[vserver.sni_route]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniRoute {
    /// Exact names and `*.parent` wildcards.
    pub names: Spanned<Vec<Spanned<String>>>,
    pub pool: Spanned<String>,
}

/// `[vserver.proxy_protocol]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptProxy {
    /// Sources that must send a header (and only they may).
    pub trusted: Spanned<Vec<Spanned<Cidr>>>,
    /// Time allowed for the header (default 5s).
    pub timeout: Option<Millis>,
    /// tcp vservers: how long an untrusted source's first bytes are waited
    /// for, before any member is connected, to refuse a PROXY header there
    /// (default 500ms; 0: connect at once).
    pub untrusted_wait: Option<Millis>,
}

/// `[vserver.socket]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketOptions {
    /// listen(2) backlog (default 4096; the kernel caps it at somaxconn).
    pub backlog: Option<Spanned<u32>>,
    /// TCP keepalive probes on client connections after this idle time.
    pub keepalive: Option<Millis>,
    /// TCP_FASTOPEN queue length (0: off, the default).
    pub fast_open: Option<Spanned<u32>>,
    /// TCP_DEFER_ACCEPT: wake the worker only once data arrived.
    pub defer_accept: Option<Millis>,
    /// Listen on an address this host does not have yet (IP_FREEBIND): a
    /// failover VIP that keepalived moves here later.
    pub freebind: Option<bool>,
    /// TCP_NODELAY on client connections (default true).
    pub nodelay: Option<bool>,
    /// Hold the ACK of a client's first data so the answer carries it
    /// (TCP_QUICKACK off on the listener, HAProxy's `tcp-smart-accept`).
    /// Default: on for HTTP vservers, off for tcp ones.
    pub smart_accept: Option<bool>,
}

/// `[vserver.access_log]`: defined and checked by the access log module.
pub use crate::accesslog::AccessLogFile as AccessLog;

/// `true`, `false`, or a table of settings. Deserialized by hand: serde's
/// untagged enums buffer the value and lose the spans `Spanned` fields
/// need for their error lines.
#[derive(Debug)]
pub enum OnOrSettings<T> {
    Switch(bool),
    Settings(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OnOrSettings<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = OnOrSettings<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or a table of settings")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(OnOrSettings::Switch(b))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(OnOrSettings::Settings)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `[vserver.compression]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compression {
    /// Default true; false keeps the settings for policies that turn it on.
    pub enabled: Option<bool>,
    /// "gzip", "br", "zstd", best first (breaks ties in Accept-Encoding).
    pub algorithms: Option<Spanned<Vec<Spanned<String>>>>,
    /// 1 (fastest) to 9.
    pub gzip_level: Option<Spanned<u32>>,
    /// 0 to 11.
    pub brotli_level: Option<Spanned<u32>>,
    /// 1 to 19 (negative levels are faster still).
    pub zstd_level: Option<Spanned<i32>>,
    /// Media types: "type/subtype" or "type/*".
    pub types: Option<Spanned<Vec<Spanned<String>>>>,
    /// Responses declaring a smaller Content-Length are sent as they are.
    pub min_size: Option<u64>,
}

/// `[vserver.tls]`. File paths are relative to the configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// Chosen by SNI (exact, then wildcard names of each certificate); the
    /// first is the default. Several for the same names (RSA and ECDSA):
    /// chosen by the signature schemes the client offers.
    /// Absent when `acme` provides the certificates.
    pub certificates: Option<Spanned<Vec<Certificate>>>,
    /// Certificates ordered and renewed from an ACME CA (docs/acme.md).
    pub acme: Option<Spanned<Acme>>,
    /// "1.2", "1.3"; default both.
    pub versions: Option<Spanned<Vec<Spanned<String>>>>,
    /// Cipher suite names, in order of preference; default all safe ones.
    pub ciphers: Option<Spanned<Vec<Spanned<String>>>>,
    /// Key-exchange groups, in order of preference.
    pub groups: Option<Spanned<Vec<Spanned<String>>>>,
    /// TLS 1.3 tickets and TLS 1.2 session IDs and tickets (default true).
    pub resumption: Option<bool>,
    /// ALPN protocols offered, in order of preference; default ["http/1.1"].
    pub alpn: Option<Vec<Spanned<String>>>,
    /// CA bundle (PEM) that client certificates must chain to.
    pub client_ca: Option<Spanned<String>>,
    /// "required" (default when client_ca is set) or "optional".
    pub client_auth: Option<Spanned<ClientAuth>>,
    /// Header carrying the verified client certificate's subject to the
    /// member (default "x-client-cert-subject").
    pub client_subject_header: Option<Spanned<String>>,
    /// Strict-Transport-Security on every response of this vserver.
    pub hsts: Option<Hsts>,
}

/// `[vserver.tls.acme]`: one certificate for `names`, ordered from the CA
/// at `directory` and renewed before it expires (docs/acme.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acme {
    /// DNS names the certificate covers ("*.example.com" with DNS-01 only).
    pub names: Spanned<Vec<Spanned<String>>>,
    /// The CA's ACME directory URL (https).
    pub directory: Spanned<String>,
    /// Contact URLs of the account ("mailto:ops@example.com").
    pub contact: Option<Vec<Spanned<String>>>,
    /// "http-01" (default), "tls-alpn-01" or "dns-01".
    pub challenge: Option<Spanned<String>>,
    /// DNS-01: the program that puts up and takes down the TXT record,
    /// run as `HOOK present|cleanup _acme-challenge.NAME. VALUE`.
    pub dns_hook: Option<Spanned<String>>,
    /// DNS-01: longest a hook run may take (default 60 s).
    pub dns_hook_timeout: Option<Millis>,
    /// DNS-01: resolvers (ip:port) asked for the TXT record until every
    /// one answers it; without them, `dns_wait` is waited out.
    pub dns_resolvers: Option<Vec<Spanned<String>>>,
    /// DNS-01: the propagation wait: how long the resolvers are polled at
    /// most, or the fixed wait without resolvers (default 60 s).
    pub dns_wait: Option<Millis>,
    /// A certificate profile the CA offers ("classic", "shortlived").
    pub profile: Option<Spanned<String>>,
    /// On-demand issuance for names no certificate covers (docs/acme.md).
    pub on_demand: Option<Spanned<AcmeOnDemand>>,
    /// How often at most the CA's renewal information (RFC 9773) is asked
    /// for (default: its Retry-After, between 1 minute and 1 day).
    pub renewal_check: Option<Millis>,
    /// "ecdsa-p256" (default) or "rsa-2048".
    pub key_type: Option<Spanned<String>>,
    /// Where the account key and the issued certificates are kept.
    pub state_dir: Spanned<String>,
    /// PEM roots to trust for the CA's own HTTPS (default: the system's).
    pub ca_roots: Option<Spanned<String>>,
    /// External account binding: the key ID the CA gave (ZeroSSL).
    pub eab_kid: Option<Spanned<String>>,
    /// Its HMAC key, base64url as the CA gives it; or the file holding it.
    pub eab_hmac_key: Option<Spanned<String>>,
    pub eab_hmac_key_file: Option<Spanned<String>>,
}

/// `[vserver.tls.acme.on_demand]`: which unknown SNI names get a
/// certificate ordered, and how many an hour.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeOnDemand {
    /// Names and "*.domain" patterns admitted.
    pub allow: Option<Vec<Spanned<String>>>,
    /// An http:// URL asked with ?domain=NAME; 200 admits.
    pub ask: Option<Spanned<String>>,
    /// New names admitted per hour at most (default 10).
    pub per_hour: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    /// PEM: the certificate, then its chain.
    pub cert: Spanned<String>,
    /// PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key.
    pub key: Spanned<String>,
    /// A DER OCSP response stapled to handshakes using this certificate.
    pub ocsp: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    Required,
    Optional,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hsts {
    /// Seconds.
    pub max_age: u64,
    #[serde(default)]
    pub include_subdomains: bool,
    #[serde(default)]
    pub preload: bool,
}

#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Http,
    /// L4: connections relayed byte for byte (`[vserver.l4]`).
    Tcp,
    /// L4: datagrams relayed per client session or one by one.
    Udp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub name: Option<String>,
    #[serde(rename = "match", default)]
    pub matches: Match,
    pub action: Option<Spanned<Action>>,
    #[serde(default)]
    pub request_headers: HeaderEdits,
    #[serde(default)]
    pub response_headers: HeaderEdits,
    /// Turns the vserver's compression on or off for matching requests,
    /// or gives them settings of their own (a `[vserver.compression]`-like
    /// table).
    pub compression: Option<OnOrSettings<Compression>>,
    /// Turns the vserver's cache on or off for matching requests.
    pub cache: Option<bool>,
    /// Rewrites what the member gets (with `action = { pool = ... }`).
    pub rewrite: Option<Spanned<Rewrite>>,
    /// Copies of the request sent to other pools, their answers dropped
    /// (with `action = { pool = ... }`).
    #[serde(default)]
    pub mirror: Vec<Spanned<Mirror>>,
    /// The vserver's `scope = "policy"` limits the requests this policy
    /// decides count against (with an action).
    #[serde(default)]
    pub limits: Vec<Spanned<String>>,
    /// The longest request body the requests this policy decides may
    /// send (bytes; with an action): longer ones get 413 (nginx's
    /// `client_max_body_size`).
    pub max_body: Option<Spanned<u64>>,
    /// `[timeouts]`' member timeouts for the requests this policy sends
    /// to a pool, in place of the global ones.
    pub timeouts: Option<Spanned<PolicyTimeouts>>,
}

/// A policy's `timeouts = { upstream_connect, upstream_response }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTimeouts {
    pub upstream_connect: Option<Millis>,
    pub upstream_response: Option<Millis>,
}

/// One `mirror = [{ ... }]` entry: a copy of each matching request (or of
/// `percent` of them) goes to `pool` too (the Gateway API's RequestMirror,
/// Envoy's request_mirror_policies, nginx's `mirror`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    pub pool: String,
    /// The share of matching requests copied (default 100).
    pub percent: Option<f64>,
    /// A request body longer than this is not copied (nor its request).
    pub max_body: Option<usize>,
    /// Copies on their way at once, past which a copy is dropped.
    pub max_in_flight: Option<usize>,
}

/// `rewrite = { ... }` of a policy that sends to a pool: the member gets
/// another path or Host (the Gateway API's URLRewrite, ingress-nginx's
/// rewrite-target, HAProxy's `http-request set-path`/`replace-path`).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Rewrite {
    /// The new path (the query is kept); with `path_prefix`, what replaces
    /// that prefix of the path (by segments); with `path_regex`, the
    /// replacement of its first match (`$1`, `${name}`: its captures), as
    /// nginx's `rewrite`.
    pub path: Option<String>,
    pub path_prefix: Option<String>,
    pub path_regex: Option<crate::config::types::PathRegex>,
    /// The new Host.
    pub host: Option<String>,
}

/// Every field present must match (logical AND). An empty match always matches.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Host header (port stripped), case-insensitive; "*.example.com" matches subdomains.
    pub host: Option<OneOrMany<String>>,
    pub path: Option<OneOrMany<String>>,
    pub path_prefix: Option<OneOrMany<String>>,
    pub path_regex: Option<PathRegex>,
    /// "insensitive": path, path_prefix and path_regex ignore ASCII case
    /// (for members that do, such as IIS); default "sensitive".
    pub case: Option<String>,
    pub method: Option<OneOrMany<String>>,
    /// One table, or an array of them: every one must match (a Gateway
    /// API match with several headers or query parameters).
    pub header: Option<NameValues>,
    pub query: Option<NameValues>,
    pub source: Option<OneOrMany<Cidr>>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// One `{ name, value... }` table or an array of them. Not an untagged
/// enum: that would replace the error of a bad field (with its line and
/// column) by "did not match any variant".
#[derive(Debug, Clone)]
pub struct NameValues(pub Vec<NameValue>);

impl<'de> Deserialize<'de> for NameValues {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NameValues;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a table { name = ..., value = ... } or an array of them")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<NameValues, A::Error> {
                NameValue::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|nv| NameValues(vec![nv]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<NameValues, A::Error> {
                let mut all = Vec::new();
                while let Some(nv) = seq.next_element::<NameValue>()? {
                    all.push(nv);
                }
                Ok(NameValues(all))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct NameValue {
    pub name: String,
    /// Absent: the header or argument only has to be present.
    pub value: Option<String>,
    pub value_prefix: Option<String>,
    pub value_regex: Option<PathRegex>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    pub pool: Option<String>,
    pub redirect: Option<String>,
    /// Status for a redirect (301, 302, 303, 307, 308) or a fixed response.
    pub status: Option<u16>,
    /// Redirect to the same host and target over https (301 by default).
    pub redirect_https: Option<bool>,
    /// Port in the https redirect; default 443 (left out of the URL).
    pub https_port: Option<u16>,
    /// Fixed response body; a fixed response needs `status`.
    pub body: Option<String>,
    pub content_type: Option<String>,
    /// A redirect built from the request (the Gateway API's
    /// RequestRedirect): each part given replaces the request's, the
    /// others are kept (302 by default).
    pub redirect_scheme: Option<String>,
    pub redirect_host: Option<String>,
    /// Written into the Location unless it is the scheme's own (80, 443);
    /// absent: no port.
    pub redirect_port: Option<u16>,
    /// Replaces the whole path, or with `redirect_path_prefix` that
    /// prefix of it (by segments); the query is kept.
    pub redirect_path: Option<String>,
    pub redirect_path_prefix: Option<String>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct HeaderEdits {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub name: Spanned<String>,
    #[serde(default)]
    pub algorithm: Algorithm,
    /// What members speak: "http1" (default) or "h2" (h2c with prior
    /// knowledge; gRPC needs it).
    pub protocol: Option<Spanned<UpstreamProtocol>>,
    /// For `consistent-hash`: "source-ip", "uri", "header:NAME", "cookie:NAME".
    pub hash_key: Option<Spanned<String>>,
    pub persistence: Option<Persistence>,
    /// Ramp a recovered member's share of traffic up over this time.
    pub slow_start: Option<Millis>,
    /// Idle upstream connections kept per member and worker.
    pub idle_per_member: Option<usize>,
    pub idle_timeout: Option<Millis>,
    pub health: Option<Health>,
    pub passive: Option<Passive>,
    /// TLS to the members; absent means plain TCP.
    pub tls: Option<Spanned<PoolTls>>,
    /// Send a PROXY protocol header ("v1" or "v2") on each connection to a
    /// member (L4 vservers).
    pub proxy_protocol: Option<Spanned<String>>,
    /// Where connections to the members come from: a local address, or
    /// "client" (the client's own address; tcp and udp vservers).
    pub source_address: Option<Spanned<String>>,
    /// The members are published in the cluster under
    /// `<prefix>/members/<name>` and change at run time (cluster/members.rs);
    /// the text lists none.
    #[serde(default)]
    pub cluster_members: Option<Spanned<bool>>,
    #[serde(default)]
    pub member: Vec<Member>,
}

/// `[pool.tls]`: re-encryption to the members. File paths are relative to
/// the configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolTls {
    /// Verify the members' certificates (default true). `false` must be
    /// written out and draws a warning at load.
    pub verify: Option<Spanned<bool>>,
    /// CA bundle (PEM) members' certificates must chain to; default the
    /// system bundle (`/etc/ssl/certs/ca-certificates.crt`).
    pub ca: Option<Spanned<String>>,
    /// Server name sent (SNI) and verified; absent: no SNI, and the
    /// certificate is verified against the member's IP address.
    pub sni: Option<Spanned<String>>,
    /// Subject alternative names the member's certificate may carry
    /// instead of the `sni` (any one of them): DNS names and URIs (a
    /// SPIFFE ID). With either, the name is checked against these only.
    pub san_dns: Option<Spanned<Vec<String>>>,
    pub san_uri: Option<Spanned<Vec<String>>>,
    /// Client certificate (PEM, then its chain) for mutual TLS.
    pub cert: Option<Spanned<String>>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Option<Spanned<String>>,
    /// "1.2", "1.3"; default both.
    pub versions: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    #[default]
    Http1,
    H2,
}

impl UpstreamProtocol {
    /// As the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamProtocol::Http1 => "http1",
            UpstreamProtocol::H2 => "h2",
        }
    }
}

#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    #[default]
    RoundRobin,
    WeightedRoundRobin,
    LeastConnections,
    /// Power of two random choices, least outstanding requests.
    P2c,
    /// Maglev consistent hashing on `hash_key`.
    ConsistentHash,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Persistence {
    #[serde(rename = "type")]
    pub kind: PersistenceKind,
    /// Cookie name for `cookie` persistence.
    pub cookie: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PersistenceKind {
    Cookie,
    SourceIp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[serde(rename = "type", default)]
    pub kind: HealthKind,
    pub interval: Option<Millis>,
    pub timeout: Option<Millis>,
    pub rise: Option<u32>,
    pub fall: Option<u32>,
    pub method: Option<String>,
    pub path: Option<String>,
    pub host: Option<String>,
    /// Expected statuses; default any 2xx or 3xx.
    pub expect_status: Option<OneOrMany<u16>>,
    /// Substring the response body must contain.
    pub expect_body: Option<String>,
    /// `udp`: the probe datagram, and what the reply must contain.
    pub send: Option<String>,
    pub expect: Option<String>,
    /// Check this port instead of the member's (a TCP check beside a UDP
    /// service).
    pub port: Option<u16>,
}

#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    #[default]
    Tcp,
    Http,
    /// A datagram sent, a reply expected.
    Udp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Passive {
    /// Consecutive connect failures or 5xx responses that eject a member.
    pub consecutive_failures: Option<u32>,
    /// How long an ejected member stays out.
    pub ejection: Option<Millis>,
    /// Count 5xx responses as failures (default true).
    pub on_5xx: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub address: Spanned<SocketAddr>,
    pub weight: Option<Spanned<u32>>,
    /// Most concurrent requests sent to this member; 0 is unlimited.
    pub max_connections: Option<u32>,
    #[serde(default)]
    pub backup: bool,
}
