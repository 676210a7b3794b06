//! Lines for the connections of `tcp` vservers and the sessions of `udp`
//! vservers: one line when a relay or a session ends (HAProxy's `tcplog`
//! plays this part), in JSON or a template of the variables that make
//! sense without HTTP. The default line:
//!
//! ```text
//! 10.1.2.3:4567 [10/Oct/2000:13:55:36 +0000] pg tcp pg-pool 10.0.2.1:5432 0.412 1520.004 1200 53000 done
//! ```
//!
//! client, start, vserver, transport, pool, member, connect ms, total ms,
//! bytes from the client, bytes to the client, how it ended (`End`).

use std::io::Write;
use std::net::SocketAddr;

use super::format::{self, Format, Piece, Var};
use super::TlsInfo;

/// How an L4 connection or session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both sides closed their sending halves.
    Done,
    /// No byte either way for the idle timeout (UDP sessions end so, but
    /// for one whose member went down with `on_member_down = "close"`).
    Idle,
    /// A side reset, or a write failed, mid-relay.
    Reset,
    /// No member available, or every connect failed.
    NoMember,
    /// What the client sent first was refused: a malformed or late PROXY
    /// header or ClientHello, or a PROXY header from an untrusted source.
    Refused,
    /// The TLS handshake of a terminating vserver failed.
    TlsFailed,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Done => "done",
            End::Idle => "idle",
            End::Reset => "reset",
            End::NoMember => "no-member",
            End::Refused => "refused",
            End::TlsFailed => "tls-failed",
        }
    }

    /// Ended as the protocol meant it to: these lines may be sampled, the
    /// others always come.
    pub fn clean(self) -> bool {
        matches!(self, End::Done | End::Idle)
    }
}

/// One L4 connection or UDP session, as its line shows it.
pub struct Entry<'a> {
    /// When it began (µs since the epoch).
    pub time_us: u64,
    pub client: SocketAddr,
    pub vserver: &'a str,
    /// "tcp" or "udp".
    pub transport: &'static str,
    pub pool: Option<&'a str>,
    pub member: Option<SocketAddr>,
    /// Connects that failed before the one that held.
    pub retries: u32,
    pub tls: Option<TlsInfo>,
    /// Accept (or the ClientHello read) to the member's connection.
    pub connect_us: Option<u32>,
    pub total_us: u64,
    /// From the client, and to it.
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub end: End,
    /// A `tcp` vserver's script: the fields its events added (`c:log`)
    /// and its first error.
    pub script: Option<&'a super::ScriptLog>,
}

/// The line of an L4 vserver without a `format`.
pub const DEFAULT: &str = "$remote_addr:$remote_port [$time_local] $vserver $transport $pool $member $connect_ms $total_ms $bytes_received $bytes_sent $end";

/// Whether an L4 line can show `v` (the others are about HTTP requests).
fn l4_var(v: Var) -> bool {
    matches!(
        v,
        Var::RemoteAddr
            | Var::RemotePort
            | Var::TimeIso8601
            | Var::TimeLocal
            | Var::Msec
            | Var::VServer
            | Var::BytesSent
            | Var::BytesReceived
            | Var::Pool
            | Var::Member
            | Var::Retries
            | Var::TlsVersion
            | Var::TlsCipher
            | Var::TlsHandshakeUs
            | Var::TlsHandshakeMs
            | Var::ConnectUs
            | Var::ConnectMs
            | Var::TotalUs
            | Var::TotalMs
            | Var::RequestTime
            | Var::Transport
            | Var::End
            | Var::ScriptError
    )
}

/// The format of an L4 vserver's lines: `parsed` (None: the default)
/// when every part of it has a meaning without HTTP.
pub fn check(parsed: Option<Format>) -> Result<Format, String> {
    let f = match parsed {
        None => return format::parse(DEFAULT).map_err(|(_, m)| m),
        Some(f) => f,
    };
    match &f {
        Format::Json => Ok(f),
        Format::Common | Format::Combined => Err(
            "access_log.format: the Common and Combined formats are lines about HTTP requests; an L4 vserver logs \"json\" or a template (default: the one in docs/access-logs.md, \"L4 vservers\")".into(),
        ),
        Format::Template(pieces) => {
            for p in pieces {
                let name = match p {
                    Piece::Text(_) => continue,
                    Piece::Var(v) if l4_var(*v) => continue,
                    Piece::Script(_) => continue,
                    Piece::Var(v) => format::name_of(*v),
                    Piece::Header(h) => h.as_str(),
                };
                let known: Vec<&str> = format::VARS
                    .iter()
                    .filter(|(_, v)| l4_var(*v))
                    .map(|(n, _)| *n)
                    .collect();
                return Err(format!(
                    "access_log.format: ${name} is about HTTP requests; an L4 vserver's line knows {}",
                    known.join(", ")
                ));
            }
            Ok(f)
        }
    }
}

/// Writes one line (with its newline) for `e`; `f` passed `check`.
pub fn render(f: &Format, e: &Entry, out: &mut Vec<u8>) {
    match f {
        Format::Template(pieces) => {
            for p in pieces {
                match p {
                    Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                    Piece::Var(v) => var(*v, e, out),
                    Piece::Script(f) => format::text_or_dash(
                        out,
                        e.script.and_then(|s| s.field(f)).map(str::as_bytes),
                    ),
                    Piece::Header(_) => out.push(b'-'),
                }
            }
        }
        // `check` lets only JSON and templates through.
        _ => json(e, out),
    }
    out.push(b'\n');
}

fn var(v: Var, e: &Entry, out: &mut Vec<u8>) {
    if format::shared_var(v, (e.client, e.time_us), e.tls.as_ref(), out) {
        return;
    }
    match v {
        Var::VServer => format::text(out, e.vserver.as_bytes()),
        Var::Transport => out.extend_from_slice(e.transport.as_bytes()),
        Var::BytesSent => format::num_or_dash(out, Some(e.bytes_sent)),
        Var::BytesReceived => format::num_or_dash(out, Some(e.bytes_received)),
        Var::Pool => format::text_or_dash(out, e.pool.map(str::as_bytes)),
        Var::Member => match e.member {
            Some(m) => {
                let _ = write!(out, "{m}");
            }
            None => out.push(b'-'),
        },
        Var::Retries => format::num_or_dash(out, Some(e.retries.into())),
        Var::ConnectUs => format::num_or_dash(out, e.connect_us.map(u64::from)),
        Var::ConnectMs => format::ms_or_dash(out, e.connect_us.map(u64::from)),
        Var::TotalUs => format::num_or_dash(out, Some(e.total_us)),
        Var::TotalMs => format::ms_or_dash(out, Some(e.total_us)),
        Var::RequestTime => {
            let ms = e.total_us / 1000;
            let _ = write!(out, "{}.{:03}", ms / 1000, ms % 1000);
        }
        Var::End => out.extend_from_slice(e.end.as_str().as_bytes()),
        Var::ScriptError => format::text_or_dash(
            out,
            e.script.and_then(|s| s.error.as_deref()).map(str::as_bytes),
        ),
        // HTTP's: `check` refused them.
        _ => out.push(b'-'),
    }
}

fn json(e: &Entry, out: &mut Vec<u8>) {
    let tls = e.tls.as_ref();
    out.extend_from_slice(b"{\"time\":\"");
    format::iso8601(out, e.time_us);
    out.extend_from_slice(b"\",\"vserver\":");
    format::json_str(out, e.vserver.as_bytes());
    let _ = write!(
        out,
        ",\"transport\":\"{}\",\"client_ip\":\"{}\",\"client_port\":{}",
        e.transport,
        format::client_ip(e.client),
        e.client.port()
    );
    format::json_pool_member_tls(out, (e.pool, e.member, e.retries), tls);
    out.extend_from_slice(b",\"connect_us\":");
    format::json_opt_num(out, e.connect_us.map(u64::from));
    let _ = write!(
        out,
        ",\"total_us\":{},\"bytes_received\":{},\"bytes_sent\":{},\"end\":\"{}\"}}",
        e.total_us,
        e.bytes_received,
        e.bytes_sent,
        e.end.as_str()
    );
    // Before the closing brace written above.
    if e.script.is_some() {
        out.pop();
        format::json_script(out, e.script);
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            // 2000-10-10T13:55:36.5Z
            time_us: 971_186_136_500_000,
            client: "[::ffff:10.1.2.3]:4567".parse().expect("addr"),
            vserver: "pg",
            transport: "tcp",
            pool: Some("pg-pool"),
            member: Some("10.0.2.1:5432".parse().expect("addr")),
            retries: 0,
            tls: None,
            connect_us: Some(412),
            total_us: 1_520_004_000,
            bytes_received: 1200,
            bytes_sent: 53_000,
            end: End::Done,
            script: None,
        }
    }

    fn line(f: &Format, e: &Entry) -> String {
        let mut out = Vec::new();
        render(f, e, &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn the_default_line_and_json() {
        let f = check(None).expect("default");
        assert_eq!(
            line(&f, &entry()),
            "10.1.2.3:4567 [10/Oct/2000:13:55:36 +0000] pg tcp pg-pool 10.0.2.1:5432 0.412 1520004.000 1200 53000 done\n"
        );
        let mut e = entry();
        e.member = None;
        e.connect_us = None;
        e.end = End::NoMember;
        assert!(line(&f, &e).ends_with(" pg-pool - - 1520004.000 1200 53000 no-member\n"));
        let j = line(&Format::Json, &entry());
        let v: serde_json::Value = serde_json::from_str(&j).expect("json");
        assert_eq!(v["client_ip"], "10.1.2.3");
        assert_eq!(v["transport"], "tcp");
        assert_eq!(v["member"], "10.0.2.1:5432");
        assert_eq!(v["connect_us"], 412);
        assert_eq!(v["bytes_sent"], 53_000);
        assert_eq!(v["end"], "done");
        assert_eq!(v["tls_version"], serde_json::Value::Null);
    }

    #[test]
    fn a_scripts_fields_and_error_join_the_line() {
        let log = crate::accesslog::ScriptLog {
            fields: vec![("sni".into(), "db.example".into())],
            error: Some("l4.lua:2: boom".into()),
        };
        let mut e = entry();
        e.script = Some(&log);
        let v: serde_json::Value = serde_json::from_str(&line(&Format::Json, &e)).expect("json");
        assert_eq!(v["script"]["sni"], "db.example");
        assert_eq!(v["script_error"], "l4.lua:2: boom");
        assert_eq!(v["end"], "done");
        let t = check(Some(
            format::parse("$end $script_sni $script_error $script_none").expect("parses"),
        ))
        .expect("an L4 template with script fields");
        assert_eq!(line(&t, &e), "done db.example l4.lua:2: boom -\n");
        // Without a script: the line keeps its shape.
        let plain = line(&Format::Json, &entry());
        assert!(!plain.contains("script"), "{plain}");
    }

    #[test]
    fn http_formats_and_variables_are_refused() {
        for f in [
            "common",
            "combined",
            "$remote_addr $status",
            "$http_host",
            "$request",
        ] {
            let parsed = format::parse(f).expect("parses");
            let e = check(Some(parsed)).unwrap_err();
            assert!(e.contains("HTTP requests"), "{f}: {e}");
        }
        let ok = format::parse("$client_ip $end $bytes_sent $tls_version").expect("parses");
        let f = check(Some(ok)).expect("an L4 template");
        assert_eq!(line(&f, &entry()), "10.1.2.3 done 53000 -\n");
    }
}
