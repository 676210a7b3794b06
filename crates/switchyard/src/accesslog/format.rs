//! Line formats: JSON lines, the Common and Combined Log Formats exactly as
//! Apache and nginx write them, and templates of `$variable` / `${variable}`
//! fields (nginx `log_format`).
//!
//! A line is rendered straight into the worker's log buffer: no allocation
//! per line. Values that came from the client are escaped: JSON strings per
//! RFC 8259 (invalid UTF-8 becomes U+FFFD); text formats as nginx does
//! (`"`, `\`, control and non-ASCII bytes as `\xHH`), so a line stays one
//! line and a quoted field cannot be closed early.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};

use super::Entry;
use crate::clock::civil_from_days;

/// A validated line format.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    Json,
    Common,
    Combined,
    Template(Vec<Piece>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Var(Var),
    /// `$http_NAME`: a request field (lower case, '_' read as '-').
    Header(String),
    /// `$script_NAME`: a field the vserver's script added (`r:log`).
    Script(String),
}

/// Every variable a template may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    RemoteAddr,
    RemotePort,
    TimeIso8601,
    TimeLocal,
    Msec,
    VServer,
    Method,
    RequestUri,
    /// The target as the client sent it, before normalization.
    RequestUriRaw,
    Uri,
    Args,
    Protocol,
    Request,
    Status,
    BytesSent,
    BytesReceived,
    Host,
    UserAgent,
    Referer,
    Pool,
    Member,
    Retries,
    TlsVersion,
    TlsCipher,
    TlsHandshakeUs,
    TlsHandshakeMs,
    RequestHeadUs,
    RequestHeadMs,
    ConnectUs,
    ConnectMs,
    TtfbUs,
    TtfbMs,
    TotalUs,
    TotalMs,
    RequestTime,
    Cache,
    TraceId,
    ParentId,
    /// L4 lines only: "tcp" or "udp".
    Transport,
    /// L4 lines only: how the connection or session ended.
    End,
    /// Why the vserver's script failed on the request.
    ScriptError,
}

/// (name, variable); aliases share a variable. docs/access-logs.md lists
/// them with their meaning.
pub const VARS: &[(&str, Var)] = &[
    ("remote_addr", Var::RemoteAddr),
    ("client_ip", Var::RemoteAddr),
    ("remote_port", Var::RemotePort),
    ("client_port", Var::RemotePort),
    ("time_iso8601", Var::TimeIso8601),
    ("time", Var::TimeIso8601),
    ("time_local", Var::TimeLocal),
    ("msec", Var::Msec),
    ("vserver", Var::VServer),
    ("request_method", Var::Method),
    ("method", Var::Method),
    ("request_uri", Var::RequestUri),
    ("target", Var::RequestUri),
    ("request_uri_raw", Var::RequestUriRaw),
    ("target_raw", Var::RequestUriRaw),
    ("uri", Var::Uri),
    ("path", Var::Uri),
    ("args", Var::Args),
    ("query", Var::Args),
    ("server_protocol", Var::Protocol),
    ("protocol", Var::Protocol),
    ("request", Var::Request),
    ("status", Var::Status),
    ("body_bytes_sent", Var::BytesSent),
    ("bytes_sent", Var::BytesSent),
    ("bytes_received", Var::BytesReceived),
    ("host", Var::Host),
    ("http_user_agent", Var::UserAgent),
    ("user_agent", Var::UserAgent),
    ("http_referer", Var::Referer),
    ("referer", Var::Referer),
    ("pool", Var::Pool),
    ("member", Var::Member),
    ("retries", Var::Retries),
    ("tls_version", Var::TlsVersion),
    ("ssl_protocol", Var::TlsVersion),
    ("tls_cipher", Var::TlsCipher),
    ("ssl_cipher", Var::TlsCipher),
    ("tls_handshake_us", Var::TlsHandshakeUs),
    ("tls_handshake_ms", Var::TlsHandshakeMs),
    ("request_head_us", Var::RequestHeadUs),
    ("request_head_ms", Var::RequestHeadMs),
    ("connect_us", Var::ConnectUs),
    ("connect_ms", Var::ConnectMs),
    ("ttfb_us", Var::TtfbUs),
    ("ttfb_ms", Var::TtfbMs),
    ("total_us", Var::TotalUs),
    ("total_ms", Var::TotalMs),
    ("request_time", Var::RequestTime),
    ("cache", Var::Cache),
    ("trace_id", Var::TraceId),
    ("parent_id", Var::ParentId),
    ("transport", Var::Transport),
    ("end", Var::End),
    ("script_error", Var::ScriptError),
];

/// The name a variable is written with (its first spelling).
pub fn name_of(v: Var) -> &'static str {
    VARS.iter().find(|(_, x)| *x == v).map_or("?", |(n, _)| n)
}

/// Parses `format`: a named format or a template. The error says which
/// variable is unknown (and the byte offset of its `$` in the string) or
/// where a `${` is not closed.
pub fn parse(format: &str) -> Result<Format, (usize, String)> {
    match format {
        "json" => return Ok(Format::Json),
        "common" | "clf" => return Ok(Format::Common),
        "combined" => return Ok(Format::Combined),
        _ => {}
    }
    if !format.contains('$') {
        return Err((
            0,
            format!(
                "access_log.format {format:?} is neither \"json\", \"common\" nor \"combined\", nor a template with $variables"
            ),
        ));
    }
    let b = format.as_bytes();
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            // Copy up to the next '$' (char boundaries are kept: '$' is ASCII).
            let next = format[i..].find('$').map_or(b.len(), |n| i + n);
            text.push_str(&format[i..next]);
            i = next;
            continue;
        }
        let at = i;
        let (name, after) = if b.get(i + 1) == Some(&b'$') {
            text.push('$');
            i += 2;
            continue;
        } else if b.get(i + 1) == Some(&b'{') {
            match format[i + 2..].find('}') {
                Some(n) => (&format[i + 2..i + 2 + n], i + 3 + n),
                None => {
                    return Err((
                        at,
                        "access_log.format: \"${\" is not closed by \"}\"".to_string(),
                    ))
                }
            }
        } else {
            let n = b[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            (&format[i + 1..i + 1 + n], i + 1 + n)
        };
        let piece = if let Some((_, v)) = VARS.iter().find(|(n, _)| *n == name) {
            Piece::Var(*v)
        } else if let Some(h) = name.strip_prefix("http_").filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        }) {
            Piece::Header(h.replace('_', "-").to_ascii_lowercase())
        } else if let Some(f) = name.strip_prefix("script_").filter(|f| {
            !f.is_empty()
                && f.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        }) {
            Piece::Script(f.to_string())
        } else {
            let known: Vec<&str> = VARS.iter().map(|(n, _)| *n).collect();
            let shown = if name.is_empty() {
                "\"$\" without a name (write \"$$\" for a dollar sign)".to_string()
            } else {
                format!("unknown variable ${name}")
            };
            return Err((
                at,
                format!(
                    "access_log.format: {shown}; known: {}, http_NAME (any request field), script_NAME (a field the script adds)",
                    known.join(", ")
                ),
            ));
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(piece);
        i = after;
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Format::Template(pieces))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// (year, month, day, hour, minute, second, microsecond) in UTC.
fn utc(us: u64) -> (i64, u32, u32, u64, u64, u64, u64) {
    let secs = us / 1_000_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    (y, m, d, s / 3600, s / 60 % 60, s % 60, us % 1_000_000)
}

/// "2024-05-01T12:34:56.789Z" (RFC 3339, milliseconds).
pub fn iso8601(out: &mut Vec<u8>, us: u64) {
    let (y, mo, d, h, mi, s, frac) = utc(us);
    let _ = write!(
        out,
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
        frac / 1000
    );
}

/// "2024-05-01T12:34:56.789012Z": RFC 5424's TIMESTAMP (microseconds).
pub fn rfc5424_time(out: &mut Vec<u8>, us: u64) {
    let (y, mo, d, h, mi, s, frac) = utc(us);
    let _ = write!(
        out,
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:06}Z"
    );
}

/// "01/May/2024:12:34:56 +0000" (Apache's %t without the brackets, UTC).
pub(super) fn clf_time(out: &mut Vec<u8>, us: u64) {
    let (y, mo, d, h, mi, s, _) = utc(us);
    let _ = write!(
        out,
        "{d:02}/{}/{y:04}:{h:02}:{mi:02}:{s:02} +0000",
        MONTHS[(mo as usize).saturating_sub(1) % 12]
    );
}

/// nginx's escaping of a logged value: `"`, `\`, controls and bytes past
/// ASCII as `\xHH`.
pub(super) fn text(out: &mut Vec<u8>, v: &[u8]) {
    const H: &[u8; 16] = b"0123456789ABCDEF";
    for &c in v {
        if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
            out.extend_from_slice(&[b'\\', b'x', H[(c >> 4) as usize], H[(c & 15) as usize]]);
        } else {
            out.push(c);
        }
    }
}

/// A value or "-" when empty or absent.
pub(super) fn text_or_dash(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(v) if !v.is_empty() => text(out, v),
        _ => out.push(b'-'),
    }
}

/// A JSON string (quotes included); invalid UTF-8 becomes U+FFFD.
pub fn json_str(out: &mut Vec<u8>, v: &[u8]) {
    out.push(b'"');
    for chunk in v.utf8_chunks() {
        for c in chunk.valid().bytes() {
            match c {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                c if c < 0x20 || c == 0x7f => {
                    let _ = write!(out, "\\u{:04x}", c);
                }
                c => out.push(c),
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
    out.push(b'"');
}

pub(super) fn json_opt_str(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(v) => json_str(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

pub(super) fn json_opt_num(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(n) => {
            let _ = write!(out, "{n}");
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// The client address as logged: an IPv4-mapped IPv6 address as IPv4.
pub(super) fn client_ip(a: SocketAddr) -> IpAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(a.ip()),
        v4 => v4,
    }
}

fn protocol(e: &Entry) -> &'static str {
    if e.http3 {
        "HTTP/3"
    } else if e.http2 {
        "HTTP/2.0"
    } else if e.req.head.minor == 0 {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    }
}

fn request_line(out: &mut Vec<u8>, e: &Entry) {
    text(out, e.req.method_str());
    out.push(b' ');
    text(out, e.req.target());
    out.push(b' ');
    out.extend_from_slice(protocol(e).as_bytes());
}

fn host<'a>(e: &Entry<'a>) -> Option<&'a [u8]> {
    e.req.host.as_deref().or_else(|| e.req.head.get("host"))
}

impl Format {
    /// Writes one line (with its newline) for `e` to `out`.
    pub fn render(&self, e: &Entry, out: &mut Vec<u8>) {
        match self {
            Format::Json => json(e, out),
            Format::Common | Format::Combined => {
                // %h %l %u %t "%r" %>s %b
                let _ = write!(out, "{} - - [", client_ip(e.client));
                clf_time(out, e.time_us);
                out.extend_from_slice(b"] \"");
                request_line(out, e);
                let _ = write!(out, "\" {} ", e.status);
                if e.bytes_sent == 0 {
                    out.push(b'-');
                } else {
                    let _ = write!(out, "{}", e.bytes_sent);
                }
                if *self == Format::Combined {
                    // "%{Referer}i" "%{User-agent}i"
                    out.extend_from_slice(b" \"");
                    text_or_dash(out, e.req.head.get("referer"));
                    out.extend_from_slice(b"\" \"");
                    text_or_dash(out, e.req.head.get("user-agent"));
                    out.push(b'"');
                }
            }
            Format::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                        Piece::Var(v) => var(*v, e, out),
                        Piece::Header(h) => text_or_dash(out, e.req.head.get(h)),
                        Piece::Script(f) => {
                            text_or_dash(out, e.script.and_then(|s| s.field(f)).map(str::as_bytes))
                        }
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

pub(super) fn num_or_dash(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(n) => {
            let _ = write!(out, "{n}");
        }
        None => out.push(b'-'),
    }
}

/// Microseconds as milliseconds with three decimals.
pub(super) fn ms_or_dash(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(us) => {
            let _ = write!(out, "{}.{:03}", us / 1000, us % 1000);
        }
        None => out.push(b'-'),
    }
}

/// Writes the variables requests and L4 connections share (the client,
/// the start time, TLS); false for the others.
pub(super) fn shared_var(
    v: Var,
    (client, time_us): (SocketAddr, u64),
    tls: Option<&super::TlsInfo>,
    out: &mut Vec<u8>,
) -> bool {
    match v {
        Var::RemoteAddr => {
            let _ = write!(out, "{}", client_ip(client));
        }
        Var::RemotePort => num_or_dash(out, Some(client.port().into())),
        Var::TimeIso8601 => iso8601(out, time_us),
        Var::TimeLocal => clf_time(out, time_us),
        Var::Msec => {
            let _ = write!(out, "{}.{:03}", time_us / 1_000_000, time_us / 1000 % 1000);
        }
        Var::TlsVersion => text_or_dash(out, tls.map(|t| t.version.as_bytes())),
        Var::TlsCipher => text_or_dash(out, tls.map(|t| t.cipher.as_bytes())),
        Var::TlsHandshakeUs => num_or_dash(out, tls.map(|t| t.handshake_us.into())),
        Var::TlsHandshakeMs => ms_or_dash(out, tls.map(|t| t.handshake_us.into())),
        _ => return false,
    }
    true
}

fn var(v: Var, e: &Entry, out: &mut Vec<u8>) {
    if shared_var(v, (e.client, e.time_us), e.tls.as_ref(), out) {
        return;
    }
    match v {
        Var::VServer => text(out, e.vserver.as_bytes()),
        Var::Method => text(out, e.req.method_str()),
        Var::RequestUri => text(out, e.req.target()),
        Var::RequestUriRaw => text(out, e.req.received_target()),
        Var::Uri => text(out, e.req.path_only()),
        Var::Args => text_or_dash(out, e.req.query()),
        Var::Protocol => out.extend_from_slice(protocol(e).as_bytes()),
        Var::Request => request_line(out, e),
        Var::Status => num_or_dash(out, Some(e.status.into())),
        Var::BytesSent => num_or_dash(out, Some(e.bytes_sent)),
        Var::BytesReceived => num_or_dash(out, Some(e.bytes_received)),
        Var::Host => text_or_dash(out, host(e)),
        Var::UserAgent => text_or_dash(out, e.req.head.get("user-agent")),
        Var::Referer => text_or_dash(out, e.req.head.get("referer")),
        Var::Pool => text_or_dash(out, e.pool.map(str::as_bytes)),
        Var::Member => match e.member {
            Some(m) => {
                let _ = write!(out, "{m}");
            }
            None => out.push(b'-'),
        },
        Var::Retries => num_or_dash(out, Some(e.retries.into())),
        Var::RequestHeadUs => num_or_dash(out, e.head_us.map(u64::from)),
        Var::RequestHeadMs => ms_or_dash(out, e.head_us.map(u64::from)),
        Var::ConnectUs => num_or_dash(out, e.connect_us.map(u64::from)),
        Var::ConnectMs => ms_or_dash(out, e.connect_us.map(u64::from)),
        Var::TtfbUs => num_or_dash(out, e.ttfb_us.map(u64::from)),
        Var::TtfbMs => ms_or_dash(out, e.ttfb_us.map(u64::from)),
        Var::TotalUs => num_or_dash(out, Some(e.total_us)),
        Var::TotalMs => ms_or_dash(out, Some(e.total_us)),
        Var::RequestTime => {
            // nginx's $request_time: seconds with millisecond resolution.
            let ms = e.total_us / 1000;
            let _ = write!(out, "{}.{:03}", ms / 1000, ms % 1000);
        }
        Var::Cache => text_or_dash(out, e.cache.map(str::as_bytes)),
        Var::TraceId => text_or_dash(out, e.trace.as_ref().map(|t| &t.trace_id[..])),
        Var::ParentId => text_or_dash(out, e.trace.as_ref().map(|t| &t.parent_id[..])),
        Var::ScriptError => text_or_dash(
            out,
            e.script.and_then(|s| s.error.as_deref()).map(str::as_bytes),
        ),
        // L4 lines' own: `super::build` refuses them for HTTP.
        Var::Transport | Var::End => out.push(b'-'),
        // Written by `shared_var`.
        _ => {}
    }
}

/// `,"pool":…,"member":…,"retries":…,"tls_version":…,"tls_cipher":…,
/// "tls_handshake_us":…` of a JSON line (request or L4 connection).
pub(super) fn json_pool_member_tls(
    out: &mut Vec<u8>,
    (pool, member, retries): (Option<&str>, Option<SocketAddr>, u32),
    tls: Option<&super::TlsInfo>,
) {
    out.extend_from_slice(b",\"pool\":");
    json_opt_str(out, pool.map(str::as_bytes));
    out.extend_from_slice(b",\"member\":");
    match member {
        Some(m) => {
            let _ = write!(out, "\"{m}\"");
        }
        None => out.extend_from_slice(b"null"),
    }
    let _ = write!(out, ",\"retries\":{retries},\"tls_version\":");
    json_opt_str(out, tls.map(|t| t.version.as_bytes()));
    out.extend_from_slice(b",\"tls_cipher\":");
    json_opt_str(out, tls.map(|t| t.cipher.as_bytes()));
    out.extend_from_slice(b",\"tls_handshake_us\":");
    json_opt_num(out, tls.map(|t| t.handshake_us.into()));
}

fn json(e: &Entry, out: &mut Vec<u8>) {
    let tls = e.tls.as_ref();
    out.extend_from_slice(b"{\"time\":\"");
    iso8601(out, e.time_us);
    out.extend_from_slice(b"\",\"vserver\":");
    json_str(out, e.vserver.as_bytes());
    let _ = write!(
        out,
        ",\"client_ip\":\"{}\",\"client_port\":{},\"method\":",
        client_ip(e.client),
        e.client.port()
    );
    json_str(out, e.req.method_str());
    out.extend_from_slice(b",\"target\":");
    json_str(out, e.req.target());
    let _ = write!(
        out,
        ",\"protocol\":\"{}\",\"status\":{},\"bytes_sent\":{},\"bytes_received\":{},\"host\":",
        protocol(e),
        e.status,
        e.bytes_sent,
        e.bytes_received
    );
    json_opt_str(out, host(e));
    out.extend_from_slice(b",\"user_agent\":");
    json_opt_str(out, e.req.head.get("user-agent"));
    out.extend_from_slice(b",\"referer\":");
    json_opt_str(out, e.req.head.get("referer"));
    json_pool_member_tls(out, (e.pool, e.member, e.retries), tls);
    out.extend_from_slice(b",\"request_head_us\":");
    json_opt_num(out, e.head_us.map(u64::from));
    out.extend_from_slice(b",\"connect_us\":");
    json_opt_num(out, e.connect_us.map(u64::from));
    out.extend_from_slice(b",\"ttfb_us\":");
    json_opt_num(out, e.ttfb_us.map(u64::from));
    let _ = write!(out, ",\"total_us\":{},\"cache\":", e.total_us);
    json_opt_str(out, e.cache.map(str::as_bytes));
    out.extend_from_slice(b",\"trace_id\":");
    json_opt_str(out, e.trace.as_ref().map(|t| &t.trace_id[..]));
    out.extend_from_slice(b",\"parent_id\":");
    json_opt_str(out, e.trace.as_ref().map(|t| &t.parent_id[..]));
    json_script(out, e.script);
    out.push(b'}');
}

/// A script's fields and error as JSON members (HTTP and L4 lines): only
/// when there is a script's word, so other lines keep their shape.
pub(super) fn json_script(out: &mut Vec<u8>, script: Option<&super::ScriptLog>) {
    let Some(s) = script else {
        return;
    };
    if !s.fields.is_empty() {
        out.extend_from_slice(b",\"script\":{");
        for (i, (n, v)) in s.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_str(out, n.as_bytes());
            out.push(b':');
            json_str(out, v.as_bytes());
        }
        out.push(b'}');
    }
    if let Some(err) = &s.error {
        out.extend_from_slice(b",\"script_error\":");
        json_str(out, err.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accesslog::TlsInfo;
    use crate::http::message::Request;

    fn req(raw: &'static [u8]) -> Request {
        crate::http::head::parse_request(bytes::Bytes::from_static(raw), 100).expect("request")
    }

    fn entry(r: &Request) -> Entry<'_> {
        Entry {
            // 2000-10-10T13:55:36.5Z
            time_us: 971_186_136_500_000,
            client: "[::ffff:10.1.2.3]:4567".parse().expect("addr"),
            vserver: "web",
            req: r,
            http2: false,
            http3: false,
            status: 200,
            bytes_sent: 2326,
            bytes_received: 0,
            pool: Some("p"),
            member: Some("127.0.0.1:8080".parse().expect("addr")),
            retries: 1,
            tls: None,
            head_us: Some(12),
            connect_us: Some(1500),
            ttfb_us: Some(2500),
            total_us: 4321,
            cache: None,
            trace: None,
            script: None,
        }
    }

    fn render(f: &Format, e: &Entry) -> String {
        let mut out = Vec::new();
        f.render(e, &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn common_and_combined_are_apaches() {
        let r = req(b"GET /apache_pb.gif?a=1 HTTP/1.0\r\nHost: h\r\nUser-Agent: Mozilla/4.08 [en] (Win98; I ;Nav)\r\nReferer: http://www.example.com/start.html\r\n\r\n");
        let e = entry(&r);
        assert_eq!(
            render(&Format::Common, &e),
            "10.1.2.3 - - [10/Oct/2000:13:55:36 +0000] \"GET /apache_pb.gif?a=1 HTTP/1.0\" 200 2326\n"
        );
        assert_eq!(
            render(&Format::Combined, &e),
            "10.1.2.3 - - [10/Oct/2000:13:55:36 +0000] \"GET /apache_pb.gif?a=1 HTTP/1.0\" 200 2326 \"http://www.example.com/start.html\" \"Mozilla/4.08 [en] (Win98; I ;Nav)\"\n"
        );
        // No body: "-"; no referer or agent: "-".
        let r = req(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut e = entry(&r);
        e.bytes_sent = 0;
        assert!(render(&Format::Combined, &e).ends_with("\"HEAD / HTTP/1.1\" 200 - \"-\" \"-\"\n"));
    }

    #[test]
    fn client_bytes_cannot_break_a_line_or_a_quote() {
        let r = req(b"GET /a HTTP/1.1\r\nHost: h\r\nUser-Agent: x\" \\ \xff\r\n\r\n");
        let e = entry(&r);
        let line = render(&Format::Combined, &e);
        assert!(line.ends_with("\"x\\x22 \\x5C \\xFF\"\n"), "{line}");
        let json = render(&Format::Json, &e);
        let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(v["user_agent"], "x\" \\ \u{fffd}");
    }

    #[test]
    fn a_scripts_fields_and_error_show_only_when_there_are_some() {
        let r = req(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut e = entry(&r);
        let plain = render(&Format::Json, &e);
        assert!(!plain.contains("script"), "{plain}");
        let t = parse("$status $script_user $script_error").expect("template");
        assert_eq!(render(&t, &e), "200 - -\n");
        let log = super::super::ScriptLog {
            fields: vec![("user".into(), "ann \"a\"".into())],
            error: Some("edge.lua:3: boom".into()),
        };
        e.script = Some(&log);
        assert_eq!(render(&t, &e), "200 ann \\x22a\\x22 edge.lua:3: boom\n");
        let v: serde_json::Value = serde_json::from_str(&render(&Format::Json, &e)).expect("JSON");
        assert_eq!(v["script"]["user"], "ann \"a\"");
        assert_eq!(v["script_error"], "edge.lua:3: boom");
        // $script_ needs a name of a-z, 0-9 and _.
        assert!(parse("$script_").is_err());
    }

    #[test]
    fn controls_are_escaped_in_text_and_json() {
        let mut out = Vec::new();
        text(&mut out, b"a\x01\n\x7fb");
        assert_eq!(out, b"a\\x01\\x0A\\x7Fb");
        out.clear();
        json_str(&mut out, b"a\x01\n\x7f\xc3\xa9");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "\"a\\u0001\\n\\u007f\u{e9}\""
        );
    }

    #[test]
    fn json_has_every_field() {
        let r = req(b"POST /x?y HTTP/1.1\r\nHost: site\r\n\r\n");
        let mut e = entry(&r);
        e.http2 = true;
        e.tls = Some(TlsInfo {
            handshake_us: 900,
            version: "TLSv1.3",
            cipher: "TLS_AES_128_GCM_SHA256",
        });
        e.cache = Some("hit");
        let t = crate::accesslog::trace::start();
        e.trace = Some(t);
        let v: serde_json::Value =
            serde_json::from_str(&render(&Format::Json, &e)).expect("valid JSON");
        assert_eq!(v["time"], "2000-10-10T13:55:36.500Z");
        assert_eq!(v["client_ip"], "10.1.2.3");
        assert_eq!(v["client_port"], 4567);
        assert_eq!(v["method"], "POST");
        assert_eq!(v["target"], "/x?y");
        assert_eq!(v["protocol"], "HTTP/2.0");
        assert_eq!(v["host"], "site");
        assert_eq!(v["user_agent"], serde_json::Value::Null);
        assert_eq!(v["member"], "127.0.0.1:8080");
        assert_eq!(v["retries"], 1);
        assert_eq!(v["tls_version"], "TLSv1.3");
        assert_eq!(v["tls_handshake_us"], 900);
        assert_eq!(v["connect_us"], 1500);
        assert_eq!(v["ttfb_us"], 2500);
        assert_eq!(v["total_us"], 4321);
        assert_eq!(v["cache"], "hit");
        assert_eq!(v["trace_id"], t.trace_id_str());
    }

    #[test]
    fn templates_name_variables_and_fields() {
        let f = parse("$remote_addr:${remote_port} $request_method ${uri}x $args $status $$ ${total_ms}ms $http_x_request_id $http_referer $tls_version").expect("valid");
        let r = req(b"GET /p?q=1 HTTP/1.1\r\nHost: h\r\nX-Request-Id: abc\r\n\r\n");
        assert_eq!(
            render(&f, &entry(&r)),
            "10.1.2.3:4567 GET /px q=1 200 $ 4.321ms abc - -\n"
        );
    }

    #[test]
    fn bad_templates_say_where_and_what() {
        let (at, msg) = parse("$status $nope x").unwrap_err();
        assert_eq!(at, 8);
        assert!(msg.contains("unknown variable $nope"), "{msg}");
        assert!(msg.contains("remote_addr"), "{msg}");
        let (at, msg) = parse("a ${status").unwrap_err();
        assert_eq!(at, 2);
        assert!(msg.contains("not closed"), "{msg}");
        assert!(parse("plain").is_err());
        assert!(parse("cost: $ 5 $status").is_err());
        assert_eq!(parse("json"), Ok(Format::Json));
    }
}
