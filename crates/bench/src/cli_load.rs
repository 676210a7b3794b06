//! `switchyard bench load`: one load run from the command line.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::args::Args;
use crate::load::{self, LoadConfig, LoadResult, PathSpec};

pub struct Url {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
    pub tls: bool,
}

/// Parses `http://host[:port]/path` or `https://...`.
pub fn parse_url(u: &str) -> Result<Url, String> {
    let (rest, tls) = if let Some(r) = u.strip_prefix("http://") {
        (r, false)
    } else if let Some(r) = u.strip_prefix("https://") {
        (r, true)
    } else {
        return Err(format!("{u}: only http:// and https:// URLs"));
    };
    let dflt = if tls { 443 } else { 80 };
    let (auth, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let bad = || format!("{u}: bad host:port");
    let (host, port) = if let Some(v6) = auth.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| bad())?,
            None if after.is_empty() => dflt,
            None => return Err(bad()),
        };
        (h, port)
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad())?),
            None => (auth, dflt),
        }
    };
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{u}: {e}"))?
        .next()
        .ok_or_else(|| format!("{u}: no address"))?;
    Ok(Url {
        addr,
        host: auth.to_string(),
        path: path.to_string(),
        tls,
    })
}

/// "127.0.0.2-127.0.0.50" or "127.0.0.2,127.0.0.3" or a count "N" meaning
/// 127.0.0.1 .. 127.0.0.N.
pub fn parse_src_ips(spec: &str) -> Result<Vec<IpAddr>, String> {
    if let Ok(n) = spec.parse::<u32>() {
        let n = n.clamp(1, 254 * 250);
        return Ok((0..n)
            .map(|i| {
                IpAddr::from([
                    127,
                    (i / 254 / 250) as u8,
                    (i / 254 % 250) as u8,
                    (1 + i % 254) as u8,
                ])
            })
            .collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        if let Some((a, b)) = part.split_once('-') {
            let a: std::net::Ipv4Addr = a.trim().parse().map_err(|_| format!("bad address {a}"))?;
            let b: std::net::Ipv4Addr = b.trim().parse().map_err(|_| format!("bad address {b}"))?;
            let (a, b) = (u32::from(a), u32::from(b));
            if b < a || b - a > 100_000 {
                return Err(format!("bad range {part}"));
            }
            out.extend((a..=b).map(|x| IpAddr::from(std::net::Ipv4Addr::from(x))));
        } else {
            out.push(
                part.trim()
                    .parse()
                    .map_err(|_| format!("bad address {part}"))?,
            );
        }
    }
    Ok(out)
}

pub const HELP: &str = "switchyard bench load --url URL [options]
  --url URL              http[s]://host:port/path (repeatable; several authorities
                         spread connections over them, e.g. IPv4 and IPv6)
  --urls FILE            one URL per line
  --connections N        concurrent connections / users (50)
  --threads N            generator threads (1)
  --duration D           steady phase (10s); --ramp-up D, --ramp-down D (0s)
  --rate N               open loop at N req/s total (latency from due time)
  --requests-per-conn N  0 = unlimited (0)
  --think D              think time between requests (closed loop)
  --timeout D            per transaction (10s)
  --post-ratio F         share of POSTs (0.0); --post-size SIZE (1k)
  --post-form            POSTs carry urlencoded HTML forms (the waf scenario's)
  --src-ips SPEC         bind to source addresses: N, or A-B, or A,B,...
  --host NAME            Host header (from the URL)
  --header 'K: V'        extra request header (repeatable)
  --expect-status N      (200); --expect-size SIZE (from /size/N paths)
  --no-verify            don't check bodies against X-Body-Sum
  --cpus LIST            pin generator threads
  --json                 print the result as JSON
  --quiet                no progress line
HTTPS (--url https://...):
  --tls-version V        1.2 or 1.3 (both offered)
  --cipher NAME          one suite, IANA or OpenSSL name, e.g. TLS_AES_256_GCM_SHA384,
                         ECDHE-RSA-AES256-GCM-SHA384, ECDHE-ECDSA-AES256-GCM-SHA384
  --resume N             N resumed handshakes after each full one, then a fresh
                         session cache (0: a full handshake per connection)
  --ca-file PEM          verify the server against these CAs (default: NO
                         certificate verification, for benchmarking)
  --sni NAME             server name (from the URL's host)
  --groups LIST          key-exchange groups in order (X25519,secp256r1,secp384r1;
                         X25519MLKEM768 for the post-quantum hybrid)";

pub fn config_from_args(a: &mut Args) -> Result<LoadConfig, String> {
    let mut urls = a.list("url");
    if let Some(f) = a.get("urls") {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{f}: {e}"))?;
        urls.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
    }
    if urls.is_empty() {
        return Err("--url is required".into());
    }
    let mut cfg = LoadConfig::default();
    let expect_size = a.size("expect-size")?;
    let mut targets = Vec::new();
    let mut paths = Vec::new();
    let mut host = None;
    let mut sni = None;
    let mut tls = None;
    for u in &urls {
        let p = parse_url(u)?;
        if *tls.get_or_insert(p.tls) != p.tls {
            return Err("--url: mix of http:// and https://".into());
        }
        if sni.is_none() {
            let h = match p.host.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or(v6).to_string(),
                None => p
                    .host
                    .rsplit_once(':')
                    .map_or(p.host.as_str(), |x| x.0)
                    .to_string(),
            };
            sni = Some(h);
        }
        if !targets.contains(&p.addr) {
            targets.push(p.addr);
        }
        host.get_or_insert(p.host.clone());
        let spec = PathSpec {
            expect_size: expect_size.or_else(|| crate::content::object_size(&p.path)),
            path: p.path,
        };
        if !paths.iter().any(|x: &PathSpec| x.path == spec.path) {
            paths.push(spec);
        }
    }
    cfg.targets = targets;
    cfg.paths = paths;
    cfg.host = a.get("host").or(host).unwrap_or_default();
    if let Some(v) = a.num("connections")? {
        cfg.connections = v;
    }
    if let Some(v) = a.num("threads")? {
        cfg.threads = v;
    }
    if let Some(v) = a.duration("duration")? {
        cfg.duration = v;
    }
    if let Some(v) = a.duration("ramp-up")? {
        cfg.ramp_up = v;
    }
    if let Some(v) = a.duration("ramp-down")? {
        cfg.ramp_down = v;
    }
    cfg.rate = a.num::<f64>("rate")?;
    if let Some(v) = a.num("requests-per-conn")? {
        cfg.requests_per_conn = v;
    }
    if let Some(v) = a.duration("think")? {
        cfg.think = v;
    }
    if let Some(v) = a.duration("timeout")? {
        cfg.timeout = v;
    }
    if let Some(v) = a.num("post-ratio")? {
        cfg.post_ratio = v;
    }
    if let Some(v) = a.size("post-size")? {
        cfg.post_size = v as usize;
    }
    cfg.post_form = a.flag("post-form");
    if let Some(v) = a.get("src-ips") {
        cfg.src_ips = parse_src_ips(&v)?;
    }
    for h in a.get_all("header") {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| format!("--header {h}: want 'Name: value'"))?;
        cfg.headers
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    if let Some(v) = a.num("expect-status")? {
        cfg.expect_status = v;
    }
    if a.flag("no-verify") {
        cfg.verify_body = false;
    }
    let tls_opts = (
        a.get("tls-version"),
        a.get("cipher"),
        a.num::<u32>("resume")?,
        a.get("ca-file"),
        a.get("sni"),
    );
    if tls == Some(true) {
        cfg.tls = Some(crate::tls::TlsOptions {
            version: tls_opts
                .0
                .as_deref()
                .map(crate::tls::TlsVersion::parse)
                .transpose()?,
            cipher: tls_opts.1,
            resume: tls_opts.2.unwrap_or(0),
            ca_file: tls_opts.3,
            sni: tls_opts.4.or(sni).unwrap_or_default(),
            groups: a.list("groups"),
        });
    } else if tls_opts.0.is_some() || tls_opts.1.is_some() || tls_opts.2.is_some() {
        return Err("--tls-version, --cipher and --resume need an https:// URL".into());
    }
    for c in a.list("cpus") {
        cfg.cpus
            .push(c.parse().map_err(|_| format!("--cpus: bad cpu {c}"))?);
    }
    Ok(cfg)
}

pub fn cli(args: &[String]) -> Result<i32, String> {
    let mut a = Args::parse(args, &["json", "quiet", "no-verify", "post-form", "help"])?;
    if a.flag("help") {
        println!("{HELP}");
        return Ok(0);
    }
    let mut cfg = config_from_args(&mut a)?;
    let json = a.flag("json");
    let quiet = a.flag("quiet");
    a.finish()?;
    let nofile = crate::sys::raise_nofile();
    if cfg.connections as u64 + 64 > nofile {
        eprintln!(
            "warning: {} connections but only {nofile} file descriptors allowed",
            cfg.connections
        );
    }
    if !quiet {
        cfg.progress = Some("load".into());
    }
    let res = load::run(cfg.clone(), &mut |_| {})?;
    if json {
        println!("{}", res.to_json().to_string_pretty());
    } else {
        print!("{}", summary(&cfg, &res));
    }
    if res.saturated {
        eprintln!(
            "warning: the load generator used {:.0} % of its threads' CPU: it may be the bottleneck (add --threads or pin it away from the target)",
            res.gen_cpu_share * 100.0
        );
    }
    Ok(if res.ok == 0 { 1 } else { 0 })
}

pub fn fmt_us(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else if us >= 1000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

pub fn fmt_bps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else {
        format!("{:.1} kbit/s", bps / 1e3)
    }
}

pub fn summary(cfg: &LoadConfig, r: &LoadResult) -> String {
    let mode = match cfg.rate {
        Some(x) => format!("open loop at {x} req/s"),
        None => "closed loop".to_string(),
    };
    let rpc = if cfg.requests_per_conn == 0 {
        "unlimited".to_string()
    } else {
        cfg.requests_per_conn.to_string()
    };
    let h = &r.latency;
    let mut s = String::new();
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{} connections, {} threads, {mode}, {rpc} requests/connection, steady {:?} (ramp {:?} / {:?})",
        r.connections, r.threads, cfg.duration, cfg.ramp_up, cfg.ramp_down
    );
    let _ = writeln!(
        s,
        "  transactions  {} ok, {} failed ({:.3} %)",
        r.ok,
        r.errors_total(),
        r.error_ratio() * 100.0
    );
    let _ = writeln!(
        s,
        "  requests/s    {:.0}   per second min {:.0} / avg {:.0} / max {:.0}",
        r.rps, r.rps_sec.min, r.rps_sec.avg, r.rps_sec.max
    );
    let _ = writeln!(
        s,
        "  connections/s {:.0}   per second min {:.0} / avg {:.0} / max {:.0}; concurrent max {} avg {:.0}; reconnects {}",
        r.cps, r.cps_sec.min, r.cps_sec.avg, r.cps_sec.max, r.concurrent_max, r.concurrent_avg, r.reconnects
    );
    let _ = writeln!(
        s,
        "  throughput    {} (wire, received)   goodput {}",
        fmt_bps(r.throughput_bps),
        fmt_bps(r.goodput_bps)
    );
    let _ = writeln!(
        s,
        "  latency       p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {}",
        fmt_us(h.percentile(50.0)),
        fmt_us(h.percentile(90.0)),
        fmt_us(h.percentile(99.0)),
        fmt_us(h.percentile(99.9)),
        fmt_us(h.max()),
        fmt_us(h.mean() as u64)
    );
    let _ = writeln!(
        s,
        "  ttfb          p50 {}  p99 {}     ttlb p50 {}  p99 {}     connect p50 {}  p99 {}",
        fmt_us(r.ttfb.percentile(50.0)),
        fmt_us(r.ttfb.percentile(99.0)),
        fmt_us(r.ttlb.percentile(50.0)),
        fmt_us(r.ttlb.percentile(99.0)),
        fmt_us(r.connect.percentile(50.0)),
        fmt_us(r.connect.percentile(99.0))
    );
    if let Some(t) = &cfg.tls {
        let _ = writeln!(
            s,
            "  tls           {:.0} handshakes/s; {} full, {} resumed (TLS {}, {}, resume {}){}",
            r.tps,
            r.tls_handshakes - r.tls_resumed,
            r.tls_resumed,
            t.version.map_or("1.2/1.3", |v| v.name()),
            t.cipher.as_deref().unwrap_or("default suites"),
            t.resume,
            if t.ca_file.is_none() {
                "; certificates NOT verified"
            } else {
                ""
            }
        );
    }
    if !r.errors.is_empty() {
        let e: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  errors        {}", e.join(", "));
    }
    let _ = writeln!(
        s,
        "  generator cpu {:.1}s = {:.0} % of {} thread(s){}",
        r.gen_cpu_secs,
        r.gen_cpu_share * 100.0,
        r.threads,
        if r.saturated { "  (SATURATED)" } else { "" }
    );
    let _ = Duration::ZERO;
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn urls_and_source_addresses() {
        let u = parse_url("http://127.0.0.1:8080/size/128").unwrap();
        assert_eq!(u.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(u.path, "/size/128");
        assert_eq!(u.host, "127.0.0.1:8080");
        let u = parse_url("http://[::1]:9000/x").unwrap();
        assert_eq!(u.addr, "[::1]:9000".parse().unwrap());
        assert_eq!(parse_url("http://[::1]").unwrap().addr.port(), 80);
        assert_eq!(parse_url("http://127.0.0.1").unwrap().path, "/");
        assert!(parse_url("https://127.0.0.1/").unwrap().tls);
        assert_eq!(parse_url("https://127.0.0.1/").unwrap().addr.port(), 443);
        assert!(parse_url("ftp://127.0.0.1/").is_err());
        assert!(parse_url("http://127.0.0.1:x/").is_err());
        let ips = parse_src_ips("127.0.0.2-127.0.0.4").unwrap();
        assert_eq!(ips.len(), 3);
        assert_eq!(parse_src_ips("300").unwrap().len(), 300);
        assert_eq!(
            parse_src_ips("300").unwrap()[254],
            IpAddr::from([127, 0, 1, 1])
        );
    }
}
