//! Access logs per virtual server (`[vserver.access_log]`): one line per
//! request in JSON, the Common or Combined Log Format, or a template of
//! `$variables`; to stdout, stderr, a file (reopened on SIGUSR1) or syslog
//! (RFC 5424 over UDP or a unix socket); sampled; with the request's
//! timings, member, TLS parameters, cache verdict and W3C trace id.
//!
//! - `format.rs` renders a line, straight into the worker's buffer.
//! - `writer.rs` owns the sinks and the writer thread: workers never block
//!   on a log write (see there for bounds, drops and rotation).
//! - `trace.rs` reads or starts the W3C `traceparent`.
//! - `l4.rs` renders the lines of L4 connections and sessions, and
//!   `waf_audit.rs` the WAF's audit lines, through the same writer.
//!
//! Cost when off: a vserver without the table logs nothing and starts no
//! trace; the exchange only keeps a few instants and counters (no
//! allocation) whether logging is on or not. docs/access-logs.md is the
//! operator's side.

pub mod format;
pub mod l4;
pub mod trace;
pub mod waf_audit;
pub mod writer;

use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use toml::Spanned;

pub use format::Format;
use format::{Piece, Var};
pub use writer::{dropped_total, flush, reopen};
use writer::{SinkHandle, Syslog, SyslogAddr, Target};

use crate::http::message::Request;

/// A client connection's TLS parameters, measured once per connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsInfo {
    /// The handshake's duration (µs), from accept to the finished handshake.
    pub handshake_us: u32,
    /// "TLSv1.2", "TLSv1.3".
    pub version: &'static str,
    /// The IANA name of the cipher suite ("TLS_AES_128_GCM_SHA256").
    pub cipher: &'static str,
}

impl TlsInfo {
    pub fn of(conn: &rustls::ServerConnection, handshake_us: u32) -> TlsInfo {
        use rustls::ProtocolVersion as V;
        let version = match conn.protocol_version() {
            Some(V::TLSv1_3) => "TLSv1.3",
            Some(V::TLSv1_2) => "TLSv1.2",
            Some(v) => v.as_str().unwrap_or("-"),
            None => "-",
        };
        let cipher = conn
            .negotiated_cipher_suite()
            .map_or("-", |s| suite_name(s.suite()));
        TlsInfo {
            handshake_us,
            version,
            cipher,
        }
    }
}

/// The IANA name of a cipher suite ("TLS_AES_128_GCM_SHA256").
pub fn suite_name(suite: rustls::CipherSuite) -> &'static str {
    use rustls::CipherSuite as C;
    match suite {
        // rustls names TLS 1.3 suites TLS13_*; IANA's names are TLS_*.
        C::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        C::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        C::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        s => s.as_str().unwrap_or("-"),
    }
}

/// Everything one line may show, borrowed from the finished exchange.
pub struct Entry<'a> {
    /// When the request began (µs since the epoch).
    pub time_us: u64,
    pub client: SocketAddr,
    pub vserver: &'a str,
    /// The request as sent to the member (forwarding fields and header
    /// edits applied).
    pub req: &'a Request,
    pub http2: bool,
    pub http3: bool,
    pub status: u16,
    /// Response body bytes sent to the client, and request body bytes
    /// received from it.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub pool: Option<&'a str>,
    pub member: Option<SocketAddr>,
    pub retries: u32,
    pub tls: Option<TlsInfo>,
    /// Reading the request head (µs); None on HTTP/2 (one HEADERS frame).
    pub head_us: Option<u32>,
    /// Getting a connection to the member (0 when an idle one was reused).
    pub connect_us: Option<u32>,
    /// From the request sent to the member to its response head.
    pub ttfb_us: Option<u32>,
    /// From the first byte of the request head to the end of the response.
    pub total_us: u64,
    pub cache: Option<&'static str>,
    pub trace: Option<trace::Trace>,
    /// What the vserver's script added (`r:log`) or why it failed.
    pub script: Option<&'a ScriptLog>,
}

/// An exchange's script fields (`r:log(name, value)`, in order) and the
/// first error of its events ("FILE:LINE: message").
#[derive(Debug, Default, Clone)]
pub struct ScriptLog {
    pub fields: Vec<(String, String)>,
    pub error: Option<String>,
}

impl ScriptLog {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A vserver's validated `[vserver.access_log]`.
#[derive(Debug)]
pub struct Config {
    pub format: Format,
    pub sink: Arc<SinkHandle>,
    /// Non-5xx requests are logged when a draw is below this (None: all).
    sample_below: Option<u64>,
    pub sample: f64,
    /// Start a traceparent for requests without a valid one.
    pub traceparent: bool,
}

impl Config {
    /// Whether a request that ended with `status` is logged: 5xx always,
    /// others by the sampling rate.
    #[inline]
    pub fn sampled(&self, status: u16) -> bool {
        match self.sample_below {
            None => true,
            Some(_) if status >= 500 || status == 0 => true,
            Some(below) => trace::next_u64() < below,
        }
    }

    /// Queues the line for `e` (call `sampled` first).
    pub fn write(&self, e: &Entry) {
        writer::push(&self.sink, e.time_us, |out| self.format.render(e, out));
    }

    /// Queues the line of an L4 connection or UDP session, sampled as
    /// requests are: one that did not end cleanly always comes.
    pub fn write_l4(&self, e: &l4::Entry) {
        let logged = match self.sample_below {
            None => true,
            Some(_) if !e.end.clean() => true,
            Some(below) => trace::next_u64() < below,
        };
        if logged {
            writer::push(&self.sink, e.time_us, |out| {
                l4::render(&self.format, e, out)
            });
        }
    }
}

/// A problem at a place in the file.
pub type Problem = (Range<usize>, String);

const FACILITIES: &[&str] = &[
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

/// The position of byte `i` of a string value in the file: past the
/// opening quote, exact when the string has no escapes before it.
fn inside(s: &Spanned<String>, i: usize) -> Range<usize> {
    let start = s.span().start + 1 + i;
    start..start + 1
}

/// Parses `to`: "stdout", "stderr", "file:PATH", "syslog:udp:HOST:PORT",
/// "syslog:unix:PATH".
pub fn target(to: &str, base: &Path) -> Result<Target, String> {
    let syslog = |to| Syslog {
        to,
        facility: 23,
        app_name: "switchyard".into(),
    };
    match to {
        "stdout" => return Ok(Target::Stdout),
        "stderr" => return Ok(Target::Stderr),
        _ => {}
    }
    if let Some(p) = to.strip_prefix("file:") {
        if p.is_empty() {
            return Err(
                "access_log.to \"file:\" needs a path (\"file:/var/log/switchyard/access.log\")"
                    .into(),
            );
        }
        let path = base.join(p);
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(d) = dir {
            if !d.is_dir() {
                return Err(format!(
                    "access_log.to {to:?}: directory {} does not exist",
                    d.display()
                ));
            }
        }
        return Ok(Target::File(path));
    }
    if let Some(a) = to.strip_prefix("syslog:udp:") {
        use std::net::ToSocketAddrs;
        return match a.to_socket_addrs().map(|mut i| i.next()) {
            Ok(Some(addr)) => Ok(Target::Syslog(syslog(SyslogAddr::Udp(addr)))),
            _ => Err(format!(
                "access_log.to {to:?}: {a:?} is not HOST:PORT (\"syslog:udp:127.0.0.1:514\")"
            )),
        };
    }
    if let Some(p) = to.strip_prefix("syslog:unix:") {
        if !p.starts_with('/') {
            return Err(format!(
                "access_log.to {to:?}: the socket path must be absolute (\"syslog:unix:/dev/log\")"
            ));
        }
        return Ok(Target::Syslog(syslog(SyslogAddr::Unix(p.into()))));
    }
    Err(format!("access_log.to {to:?} is not one of \"stdout\", \"stderr\", \"file:PATH\", \"syslog:udp:HOST:PORT\", \"syslog:unix:PATH\""))
}

/// `[vserver.access_log]` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogFile {
    /// "json", "common", "combined" (default), or a template of $variables.
    pub format: Option<Spanned<String>>,
    /// "stdout" (default), "stderr", "file:PATH", "syslog:udp:HOST:PORT",
    /// "syslog:unix:PATH".
    pub to: Option<Spanned<String>>,
    /// Share of requests logged, 0.0 to 1.0 (default 1); 5xx always are.
    pub sample: Option<Spanned<f64>>,
    /// Syslog facility name (default "local7").
    pub facility: Option<Spanned<String>>,
    /// Syslog APP-NAME (default "switchyard").
    pub app_name: Option<Spanned<String>>,
    /// Start a W3C traceparent for requests without a valid one (default true).
    pub traceparent: Option<bool>,
}

/// Validates `[vserver.access_log]` (`what` names the vserver; relative
/// file paths are resolved against `base`; `l4`: the vserver is a tcp or
/// udp one, whose lines are about connections, not requests). Every
/// problem is reported.
pub fn build(a: &AccessLogFile, base: &Path, what: &str, l4: bool) -> Result<Config, Vec<Problem>> {
    let mut problems: Vec<Problem> = Vec::new();
    let parsed = match &a.format {
        None => None,
        Some(f) => match format::parse(f.get_ref()) {
            Ok(f) => Some(f),
            Err((i, msg)) => {
                problems.push((inside(f, i), format!("{what}: {msg}")));
                None
            }
        },
    };
    let at = a.format.as_ref().map_or(0..0, |f| f.span());
    let format = if l4 {
        l4::check(parsed).unwrap_or_else(|msg| {
            problems.push((at, format!("{what}: {msg}")));
            Format::Json
        })
    } else {
        let f = parsed.unwrap_or(Format::Combined);
        if let Format::Template(pieces) = &f {
            let l4_only = pieces.iter().find_map(|p| match p {
                Piece::Var(v @ (Var::Transport | Var::End)) => Some(format::name_of(*v)),
                _ => None,
            });
            if let Some(name) = l4_only {
                problems.push((
                    at,
                    format!("{what}: access_log.format: ${name} is about L4 connections (tcp and udp vservers)"),
                ));
            }
        }
        f
    };
    let mut tgt = match &a.to {
        None => Some(Target::Stdout),
        Some(t) => match target(t.get_ref(), base) {
            Ok(t) => Some(t),
            Err(msg) => {
                problems.push((t.span(), format!("{what}: {msg}")));
                None
            }
        },
    };
    let syslog = matches!(tgt, Some(Target::Syslog(_)));
    if let Some(f) = &a.facility {
        match FACILITIES.iter().position(|n| n == f.get_ref()) {
            Some(_) if !syslog => problems.push((
                f.span(),
                format!("{what}: access_log.facility only applies to a \"syslog:...\" target"),
            )),
            Some(i) => {
                if let Some(Target::Syslog(s)) = &mut tgt {
                    s.facility = i as u8;
                }
            }
            None => problems.push((
                f.span(),
                format!(
                    "{what}: access_log.facility {:?} is not a syslog facility; known: {}",
                    f.get_ref(),
                    FACILITIES.join(", ")
                ),
            )),
        }
    }
    if let Some(n) = &a.app_name {
        let v = n.get_ref();
        if !syslog {
            problems.push((
                n.span(),
                format!("{what}: access_log.app_name only applies to a \"syslog:...\" target"),
            ));
        } else if v.is_empty() || v.len() > 48 || !v.bytes().all(|c| (33..127).contains(&c)) {
            problems.push((
                n.span(),
                format!("{what}: access_log.app_name {v:?} must be 1 to 48 printable ASCII characters without spaces (RFC 5424 APP-NAME)"),
            ));
        } else if let Some(Target::Syslog(s)) = &mut tgt {
            s.app_name = v.clone();
        }
    }
    let sample = match &a.sample {
        None => 1.0,
        Some(s) if (0.0..=1.0).contains(s.get_ref()) => *s.get_ref(),
        Some(s) => {
            problems.push((
                s.span(),
                format!(
                    "{what}: access_log.sample {} is out of range 0.0 to 1.0 (the share of requests logged)",
                    s.get_ref()
                ),
            ));
            1.0
        }
    };
    match tgt {
        Some(t) if problems.is_empty() => Ok(Config {
            format,
            sink: writer::sink(t),
            sample_below: (sample < 1.0).then_some((sample * u64::MAX as f64) as u64),
            sample,
            traceparent: a.traceparent.unwrap_or(true),
        }),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, Vec<Problem>> {
        let m: AccessLogFile = toml::from_str(text).expect("model");
        build(&m, Path::new("/tmp"), "vserver \"v\"", false)
    }

    #[test]
    fn targets_and_options_are_checked() {
        let c = parse("format = \"json\"\nto = \"syslog:udp:127.0.0.1:514\"\nfacility = \"local3\"\napp_name = \"edge\"\nsample = 0.25").expect("valid");
        assert_eq!(c.format, Format::Json);
        assert_eq!(
            c.sink.target,
            Target::Syslog(Syslog {
                to: SyslogAddr::Udp(([127, 0, 0, 1], 514).into()),
                facility: 19,
                app_name: "edge".into()
            })
        );
        assert!(c.traceparent);
        let c = parse("to = \"file:rel.log\"").expect("valid");
        assert_eq!(c.sink.target, Target::File("/tmp/rel.log".into()));
        assert_eq!(c.format, Format::Combined);
        for (bad, says) in [
            ("to = \"tcp:1.2.3.4:5\"", "is not one of"),
            ("to = \"file:/no/such/dir/a.log\"", "does not exist"),
            ("to = \"syslog:udp:nohostport\"", "is not HOST:PORT"),
            ("to = \"syslog:unix:dev/log\"", "must be absolute"),
            ("sample = 1.5", "out of range"),
            ("sample = -0.1", "out of range"),
            ("format = \"$status $bogus\"", "unknown variable $bogus"),
            ("facility = \"local0\"", "only applies"),
            (
                "to = \"syslog:unix:/dev/log\"\nfacility = \"local9\"",
                "not a syslog facility",
            ),
            (
                "to = \"syslog:unix:/dev/log\"\napp_name = \"a b\"",
                "APP-NAME",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.iter().any(|(_, m)| m.contains(says)), "{bad}: {e:?}");
        }
    }

    #[test]
    fn sampling_keeps_about_the_share_and_every_5xx() {
        let none = parse("sample = 0").expect("valid");
        assert!((0..1000).all(|_| !none.sampled(200)));
        assert!(none.sampled(503));
        let all = parse("sample = 1").expect("valid");
        assert!((0..1000).all(|_| all.sampled(200)));
        let half = parse("sample = 0.5").expect("valid");
        let n = (0..10_000).filter(|_| half.sampled(200)).count();
        assert!((4500..5500).contains(&n), "{n}");
    }
}
