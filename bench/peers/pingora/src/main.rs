//! The Pingora peer of `switchyard bench`: the bench's L7 topology on
//! Pingora 0.9, and nothing more.
//!
//! - plain HTTP/1.1 listeners (`--l7 ADDR`, repeatable) and HTTPS ones
//!   (`--tls ADDR,CERT,KEY,VERSIONS`, VERSIONS one of `1.2`, `1.3`, `both`);
//! - `/images/...` to `--images ADDR`, everything else to `--web ADDR`,
//!   HTTP/1.1 to the members;
//! - connection reuse on both sides: Pingora's upstream keep-alive pool
//!   (`--idle-pool N` connections, `--upstream-idle SECS` each) and client
//!   keep-alive (`--client-idle SECS`);
//! - `X-Forwarded-For` appended, as every other DUT does;
//! - one worker thread (`--threads 1`), no access log, no metrics service.
//!
//! The bench writes the arguments (crates/bench/src/dut.rs,
//! `pingora_argv`) and pins the process with taskset.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;
use pingora::tls::ssl::SslVersion;

struct Opts {
    l7: Vec<String>,
    tls: Vec<TlsListener>,
    web: SocketAddr,
    images: SocketAddr,
    threads: usize,
    idle_pool: usize,
    upstream_idle: u64,
    client_idle: u64,
    connect_timeout: u64,
    read_timeout: u64,
    tls12_ciphers: String,
    tls13_ciphers: String,
}

struct TlsListener {
    addr: String,
    cert: String,
    key: String,
    min: SslVersion,
    max: SslVersion,
}

const USAGE: &str = "switchyard-bench-pingora --web ADDR --images ADDR [--l7 ADDR]... \
[--tls ADDR,CERT,KEY,1.2|1.3|both]... [--threads 1] [--idle-pool N] [--upstream-idle SECS] \
[--client-idle SECS] [--connect-timeout SECS] [--read-timeout SECS] \
[--tls12-ciphers LIST] [--tls13-ciphers LIST]";

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut l7 = Vec::new();
    let mut tls = Vec::new();
    let mut web = None;
    let mut images = None;
    let mut o = (1usize, 512usize, 20u64, 60u64, 3u64, 60u64);
    let mut tls12 = "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES256-GCM-SHA384".to_string();
    let mut tls13 = "TLS_AES_256_GCM_SHA384".to_string();
    let mut i = 0;
    while i < args.len() {
        let name = args[i].as_str();
        let v = args
            .get(i + 1)
            .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))?
            .clone();
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: {v}"))
        };
        let addr = |v: &str| -> Result<SocketAddr, String> {
            v.parse::<SocketAddr>()
                .map_err(|_| format!("{name}: not an address: {v}"))
        };
        match name {
            "--l7" => l7.push(v),
            "--tls" => {
                let parts: Vec<&str> = v.split(',').collect();
                let [a, c, k, vers] = parts[..] else {
                    return Err(format!("--tls wants ADDR,CERT,KEY,VERSIONS: {v}"));
                };
                let (min, max) = match vers {
                    "1.2" => (SslVersion::TLS1_2, SslVersion::TLS1_2),
                    "1.3" => (SslVersion::TLS1_3, SslVersion::TLS1_3),
                    "both" => (SslVersion::TLS1_2, SslVersion::TLS1_3),
                    other => return Err(format!("--tls: versions 1.2, 1.3 or both, not {other}")),
                };
                tls.push(TlsListener {
                    addr: a.to_string(),
                    cert: c.to_string(),
                    key: k.to_string(),
                    min,
                    max,
                });
            }
            "--web" => web = Some(addr(&v)?),
            "--images" => images = Some(addr(&v)?),
            "--threads" => o.0 = num(&v)?.max(1) as usize,
            "--idle-pool" => o.1 = num(&v)? as usize,
            "--upstream-idle" => o.2 = num(&v)?,
            "--client-idle" => o.3 = num(&v)?,
            "--connect-timeout" => o.4 = num(&v)?,
            "--read-timeout" => o.5 = num(&v)?,
            "--tls12-ciphers" => tls12 = v,
            "--tls13-ciphers" => tls13 = v,
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
        i += 2;
    }
    Ok(Opts {
        l7,
        tls,
        web: web.ok_or_else(|| format!("--web is required\n{USAGE}"))?,
        images: images.ok_or_else(|| format!("--images is required\n{USAGE}"))?,
        threads: o.0,
        idle_pool: o.1,
        upstream_idle: o.2,
        client_idle: o.3,
        connect_timeout: o.4,
        read_timeout: o.5,
        tls12_ciphers: tls12,
        tls13_ciphers: tls13,
    })
}

struct Bench {
    web: SocketAddr,
    images: SocketAddr,
    upstream_idle: Duration,
    client_idle: u64,
    connect_timeout: Duration,
    read_timeout: Duration,
}

#[async_trait]
impl ProxyHttp for Bench {
    type CTX = ();
    fn new_ctx(&self) -> Self::CTX {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        // HTTP/1.1 keep-alive is on with no limit by default; bound an idle
        // client connection as every other DUT does.
        if session.get_keepalive().is_some() {
            session.set_keepalive(Some(self.client_idle));
        }
        Ok(false)
    }

    async fn upstream_peer(&self, session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let addr = if session.req_header().uri.path().starts_with("/images/") {
            self.images
        } else {
            self.web
        };
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.idle_timeout = Some(self.upstream_idle);
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.read_timeout = Some(self.read_timeout);
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        req: &mut RequestHeader,
        _ctx: &mut (),
    ) -> Result<()> {
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_string());
        if let Some(ip) = client {
            let xff = match req.headers.get("x-forwarded-for") {
                Some(prev) => format!("{}, {ip}", String::from_utf8_lossy(prev.as_bytes())),
                None => ip,
            };
            req.insert_header("X-Forwarded-For", xff)?;
        }
        Ok(())
    }

    // No access log: the default logging() does nothing.
}

fn run(o: Opts) -> Result<(), String> {
    let conf = ServerConf {
        threads: o.threads,
        work_stealing: false,
        upstream_keepalive_pool_size: o.idle_pool,
        // The bench stops a DUT with SIGTERM, then SIGKILL after 3 s.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: std::env::temp_dir()
            .join(format!("sy-bench-pingora-{}.pid", std::process::id()))
            .display()
            .to_string(),
        upgrade_sock: std::env::temp_dir()
            .join(format!("sy-bench-pingora-{}.sock", std::process::id()))
            .display()
            .to_string(),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut svc = http_proxy_service(
        &server.configuration,
        Bench {
            web: o.web,
            images: o.images,
            upstream_idle: Duration::from_secs(o.upstream_idle),
            client_idle: o.client_idle,
            connect_timeout: Duration::from_secs(o.connect_timeout),
            read_timeout: Duration::from_secs(o.read_timeout),
        },
    );
    for a in &o.l7 {
        svc.add_tcp(a);
    }
    for t in &o.tls {
        let mut s = pingora::listeners::tls::TlsSettings::intermediate(&t.cert, &t.key)
            .map_err(|e| format!("{}: {e}", t.addr))?;
        s.set_min_proto_version(Some(t.min))
            .map_err(|e| format!("{}: {e}", t.addr))?;
        s.set_max_proto_version(Some(t.max))
            .map_err(|e| format!("{}: {e}", t.addr))?;
        s.set_cipher_list(&o.tls12_ciphers)
            .map_err(|e| format!("--tls12-ciphers: {e}"))?;
        s.set_ciphersuites(&o.tls13_ciphers)
            .map_err(|e| format!("--tls13-ciphers: {e}"))?;
        svc.add_tls_with_settings(&t.addr, None, s);
    }
    server.add_service(svc);
    server.run_forever();
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--version") {
        println!("switchyard-bench-pingora (pingora 0.9)");
        return ExitCode::SUCCESS;
    }
    match parse(&args).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard-bench-pingora: {e}");
            ExitCode::from(2)
        }
    }
}
