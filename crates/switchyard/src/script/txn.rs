//! `r`, what every event gets: the request (or the member's response)
//! to read and edit, and what the script decides (a pool, a local
//! answer, access-log fields, `r.vars` for its later events).
//!
//! One `Txn` per worker state, loaded with one request's parts for the
//! length of a call (`State::call`): no userdata is made per request.
//! Everything a client or a script can get wrong is checked here and
//! refused with a Lua error (the request then gets 500): header names
//! and values that could split a head, the framing fields the proxy
//! owns, paths the vserver's normalization refuses.

use std::net::SocketAddr;

use bytes::Bytes;
use mlua::{Lua, Table, UserData, UserDataFields, UserDataMethods, Value};

use super::Script;
use crate::http::message::{Fields, Framing, Head, Method, Request, Response};

/// What the stage tells an event about the exchange.
#[derive(Debug, Default, Clone)]
pub struct Info {
    pub client: Option<SocketAddr>,
    pub tls: bool,
    /// "HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/3".
    pub protocol: &'static str,
    /// The verified client certificate (vservers that ask for one).
    pub client_cert: Option<std::sync::Arc<crate::tls::ClientCert>>,
    /// The status the client got (`on_log`).
    pub status: u16,
}

/// A local answer made by `r:respond` or `r:redirect`.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
    pub headers: Vec<(String, String)>,
}

/// What an event decided, for the stage to apply.
#[derive(Debug, Default)]
pub struct Effects {
    /// The new target (path and query), normalized by the vserver's rules.
    pub target: Option<Bytes>,
    /// An index into the script's pools.
    pub pool: Option<usize>,
    /// `r:use_member(addr)`: the member to prefer in the request's pool.
    pub member: Option<std::net::SocketAddr>,
    pub answer: Option<Answer>,
    /// Access-log fields (`r:log`), in order.
    pub log: Vec<(String, String)>,
    /// `r:collect_body()`: the response body goes to `on_response_body`.
    pub collect: bool,
    /// A body event's replacement (`r.body = ...`).
    pub body: Option<Bytes>,
    /// `c:reject()`: the connection is closed.
    pub reject: bool,
    /// `c:use_cert(name)` (`on_client_hello`): serve the certificate the
    /// vserver serves for this name (lower-case, covered by one).
    pub cert: Option<String>,
}

/// One call's parts, moved in and out of the state's `Txn`.
#[derive(Default)]
pub(super) struct Parts {
    pub req: Option<Request>,
    pub resp: Option<Response>,
    pub info: Info,
    pub vars: Option<Table>,
    pub out: Effects,
    pub log_event: bool,
    /// The body a body event sees (`r.body`), and which one.
    pub body: Option<Bytes>,
    pub body_event: Option<BodyEvent>,
    /// The event runs as a coroutine that may wait (`r:sideband`), and
    /// what makes its call-outs.
    pub waits: bool,
    pub callout: Option<std::rc::Rc<dyn super::callout::CallOut>>,
    /// A `tcp` vserver's connection (its events).
    pub conn: Option<Box<Conn>>,
    /// The member `on_member` is told of.
    pub picked: Option<Box<Picked>>,
}

/// The member the balancer picked (`on_member`).
#[derive(Debug, Clone)]
pub struct Picked {
    pub pool: String,
    /// "IP:port".
    pub member: String,
    /// 1 for the first member, 2 and more for retries.
    pub attempt: u32,
}

/// Which event of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent {
    Accept,
    /// The TLS ClientHello of an HTTP vserver that terminates TLS.
    ClientHello,
    ClientData,
    /// The member's first bytes (`on_server_data`).
    ServerData,
    Close,
}

/// What the events of a connection see.
#[derive(Debug, Clone)]
pub struct Conn {
    pub event: ConnEvent,
    /// The client's first bytes (`on_client_data`), or the member's
    /// (`on_server_data`), bounded.
    pub data: Bytes,
    /// The ClientHello's server name and ALPN list (`on_client_hello`, and
    /// `on_client_data` when the first bytes are one).
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    /// Bytes from the client and to it (`on_close`).
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Which body a body event has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEvent {
    Request,
    Response,
}

pub(super) struct Txn {
    p: Parts,
    pools: Vec<String>,
    normalize: crate::http::normalize::Rules,
    vserver: String,
    max_body: usize,
    certs: Option<std::sync::Arc<crate::tls::CertStore>>,
}

/// The request fields read as plain bytes (or nil), by name.
pub(super) const PLAIN_FIELDS: [&str; 5] = ["method", "path", "query", "target", "host"];

/// Access-log fields a script may add per request, and their size.
const MAX_LOG_FIELDS: usize = 32;
const MAX_LOG_VALUE: usize = 1024;

/// Stands in for a request while its script holds it (no allocation).
pub(super) fn placeholder_request() -> Request {
    Request {
        head: Head::new(Fields::default(), Framing::None),
        method: Method::Get,
        method_raw: Bytes::new(),
        target: Bytes::new(),
        received: None,
        host: None,
        expect_continue: false,
        te_trailers: false,
    }
}

fn err<T>(msg: impl Into<String>) -> mlua::Result<T> {
    Err(mlua::Error::runtime(msg.into()))
}

impl Txn {
    pub(super) fn new(s: &Script) -> Txn {
        Txn {
            p: Parts::default(),
            pools: s.pools.clone(),
            normalize: s.normalize,
            vserver: s.vserver.clone(),
            max_body: s.limits.max_body,
            certs: s.certs.clone(),
        }
    }

    /// Another `r` for the same script (a call that may wait has its
    /// own: the state's is loaded with other requests meanwhile).
    pub(super) fn sibling(&self) -> Txn {
        Txn {
            p: Parts::default(),
            pools: self.pools.clone(),
            normalize: self.normalize,
            vserver: self.vserver.clone(),
            max_body: self.max_body,
            certs: self.certs.clone(),
        }
    }

    pub(super) fn load(&mut self, p: Parts) {
        self.p = p;
    }

    pub(super) fn unload(&mut self) -> Parts {
        std::mem::take(&mut self.p)
    }

    /// The parts in place (empty between calls).
    pub(super) fn parts(&mut self) -> &mut Parts {
        &mut self.p
    }

    /// The target as the script sees it now (rewritten or not).
    fn target(&self) -> Option<&[u8]> {
        match (&self.p.out.target, &self.p.req) {
            (Some(t), _) => Some(t),
            (None, Some(r)) => Some(r.target()),
            _ => None,
        }
    }

    fn path(&self) -> Option<&[u8]> {
        let t = self.target()?;
        Some(t.split(|b| *b == b'?').next().unwrap_or(t))
    }

    fn query(&self) -> Option<&[u8]> {
        let t = self.target()?;
        let i = t.iter().position(|b| *b == b'?')?;
        Some(&t[i + 1..])
    }

    /// The head the header methods act on: the response's in
    /// `on_response`, else the request's.
    fn fields(&self) -> Option<&Fields> {
        match (&self.p.resp, &self.p.req) {
            (Some(r), _) => Some(&r.head.fields),
            (None, Some(q)) => Some(&q.head.fields),
            _ => None,
        }
    }

    fn fields_mut(&mut self, what: &str) -> Result<&mut Fields, String> {
        match (&mut self.p.resp, &mut self.p.req) {
            (Some(r), _) => Ok(&mut r.head.fields),
            (None, Some(q)) => Ok(&mut q.head.fields),
            _ => Err(format!(
                "r:{what} is for on_request and on_response (the exchange is over in on_log)"
            )),
        }
    }

    /// `r:respond` and `r:redirect` answer in `on_request` and
    /// `on_request_body` (no member has the request yet).
    fn answerable(&self, what: &str) -> mlua::Result<()> {
        match (&self.p.resp, &self.p.req, self.p.body_event) {
            (None, Some(_), _) | (_, _, Some(BodyEvent::Request)) => Ok(()),
            _ => err(format!("{what} is for on_request and on_request_body")),
        }
    }

    fn request_mut(&mut self, what: &str) -> mlua::Result<&mut Request> {
        match (&self.p.resp, &mut self.p.req) {
            (None, Some(q)) => Ok(q),
            _ => err(format!("{what} is for on_request")),
        }
    }

    /// A request field read as bytes (`PLAIN_FIELDS`): `None` for any
    /// other name, `Some(None)` for nil.
    pub(super) fn plain_field(&self, name: &[u8]) -> Option<Option<&[u8]>> {
        Some(match name {
            b"method" => self.p.req.as_ref().map(|r| r.method_str()),
            b"path" => self.path(),
            b"query" => self.query(),
            b"target" => self.target(),
            b"host" => self.p.req.as_ref().and_then(|r| r.host_name()),
            _ => return None,
        })
    }

    /// `r:header(name)`: the first value of the field.
    pub(super) fn header(&self, name: &str) -> Option<&[u8]> {
        self.fields().and_then(|f| f.get(name))
    }

    /// `r:set_header(name, value)`.
    pub(super) fn set_header(&mut self, name: &[u8], value: &[u8]) -> Result<(), String> {
        let n = header_name(name, "r:set_header")?;
        let v = header_value(value, "r:set_header")?;
        let host = *n == *b"host" && self.p.resp.is_none();
        self.fields_mut("set_header")?.set(&n, v);
        if host {
            // The authority the member is sent (write_h1 prefers it).
            if let Some(q) = self.p.req.as_mut() {
                q.host = Some(Bytes::copy_from_slice(v));
            }
        }
        Ok(())
    }

    /// `r:remove_header(name)`: how many fields it removed.
    pub(super) fn remove_header(&mut self, name: &[u8]) -> Result<usize, String> {
        let n = header_name(name, "r:remove_header")?;
        if *n == *b"host" && self.p.resp.is_none() {
            return Err("r:remove_header: a request keeps its Host".into());
        }
        Ok(self.fields_mut("remove_header")?.remove(&n))
    }

    /// `r:log(name, value)`: `value` as `log_text` writes it (nil removes
    /// the field).
    pub(super) fn log(&mut self, name: &[u8], value: Option<String>) -> Result<(), String> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
        let name = String::from_utf8_lossy(name).into_owned();
        if !ok {
            return Err(format!(
                "r:log: {name:?} is not a field name (a-z, 0-9 and _, up to 64)"
            ));
        }
        let log = &mut self.p.out.log;
        log.retain(|(n, _)| *n != name);
        if let Some(v) = value {
            if log.len() >= MAX_LOG_FIELDS {
                return Err(format!(
                    "r:log: at most {MAX_LOG_FIELDS} fields per request"
                ));
            }
            log.push((name, v));
        }
        Ok(())
    }

    /// Sets the target to `path` + `query`, normalized by the vserver's
    /// rules (the stages after the script see one spelling, as always).
    fn set_target(&mut self, path: &[u8], query: Option<&[u8]>, what: &str) -> mlua::Result<()> {
        self.request_mut(what)?;
        let mut t = Vec::with_capacity(path.len() + query.map_or(0, |q| q.len() + 1));
        t.extend_from_slice(path);
        if let Some(q) = query {
            t.push(b'?');
            t.extend_from_slice(q);
        }
        let t = Bytes::from(t);
        let t = match crate::http::normalize::target(&t, &self.normalize) {
            Ok(None) => t,
            Ok(Some(n)) => n,
            Err(why) => return err(format!("{what}: {}", why.reason())),
        };
        self.p.out.target = Some(t);
        Ok(())
    }
}

/// A header name: an RFC 9110 token, lower-cased (HTTP/2 and 3 want it so).
fn header_name<'a>(n: &'a [u8], what: &str) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if n.is_empty() || !n.iter().all(|b| tchar(*b)) {
        return Err(format!(
            "{what}: {:?} is not a header name",
            String::from_utf8_lossy(n)
        ));
    }
    // Lower-case names (the usual spelling in scripts) are not copied:
    // the copy was a fifth of `r:set_header`'s instructions (callgrind).
    let n = if n.iter().any(u8::is_ascii_uppercase) {
        std::borrow::Cow::Owned(n.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(n)
    };
    // The fields that frame the message or describe the connection are
    // the proxy's: a script setting them could make the member read
    // another request than the proxy did.
    const OWNED: [&str; 8] = [
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    ];
    if OWNED.iter().any(|o| o.as_bytes() == &n[..]) {
        return Err(format!(
            "{what}: {} is the proxy's to set",
            String::from_utf8_lossy(&n)
        ));
    }
    Ok(n)
}

fn header_value<'a>(v: &'a [u8], what: &str) -> Result<&'a [u8], String> {
    if v.iter().all(|b| *b == b'\t' || (*b >= 0x20 && *b != 0x7f)) {
        Ok(v)
    } else {
        Err(format!("{what}: the value holds a control character"))
    }
}

/// A status a script may answer with.
fn status(n: i64, what: &str) -> mlua::Result<u16> {
    if (200..=599).contains(&n) {
        Ok(n as u16)
    } else {
        err(format!("{what}: status {n} is not between 200 and 599"))
    }
}

/// A request cookie's value (the first of that name).
fn cookie<'r>(req: &'r Request, name: &str) -> Option<&'r [u8]> {
    req.head.all("cookie").find_map(|v| {
        v.split(|b| *b == b';').find_map(|kv| {
            let kv = kv.trim_ascii_start();
            let i = kv.iter().position(|b| *b == b'=')?;
            (&kv[..i] == name.as_bytes()).then(|| &kv[i + 1..])
        })
    })
}

fn lstr(lua: &Lua, b: Option<&[u8]>) -> mlua::Result<Value> {
    match b {
        Some(b) => Ok(Value::String(lua.create_string(b)?)),
        None => Ok(Value::Nil),
    }
}

/// A value for the access log, as Lua's tostring would write it.
fn log_text(v: &Value) -> Option<String> {
    let s = match v {
        Value::Nil => return None,
        Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Boolean(b) => b.to_string(),
        other => other.type_name().to_string(),
    };
    Some(bounded_log_value(s))
}

/// A log value cut to `MAX_LOG_VALUE` bytes (at a character's start).
pub(super) fn bounded_log_value(mut s: String) -> String {
    if s.len() > MAX_LOG_VALUE {
        let mut end = MAX_LOG_VALUE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

impl UserData for Txn {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        for name in PLAIN_FIELDS {
            f.add_field_method_get(name, move |lua, t| {
                lstr(lua, t.plain_field(name.as_bytes()).flatten())
            });
        }
        f.add_field_method_get("client_ip", |lua, t| match t.p.info.client {
            Some(a) => {
                let ip = match a.ip() {
                    std::net::IpAddr::V6(v6) => v6
                        .to_ipv4_mapped()
                        .map(std::net::IpAddr::V4)
                        .unwrap_or(a.ip()),
                    v4 => v4,
                };
                Ok(Value::String(lua.create_string(ip.to_string())?))
            }
            None => Ok(Value::Nil),
        });
        f.add_field_method_get("client_port", |_, t| {
            Ok(t.p.info.client.map(|a| i64::from(a.port())))
        });
        f.add_field_method_get("tls", |_, t| Ok(t.p.info.tls));
        f.add_field_method_get("protocol", |lua, t| {
            lstr(lua, Some(t.p.info.protocol.as_bytes()))
        });
        f.add_field_method_get("client_cert_subject", |lua, t| {
            lstr(
                lua,
                t.p.info
                    .client_cert
                    .as_deref()
                    .map(|c| c.subject.as_bytes()),
            )
        });
        f.add_field_method_get("client_cert", |lua, t| {
            let Some(c) = t.p.info.client_cert.as_deref() else {
                return Ok(Value::Nil);
            };
            let out = lua.create_table()?;
            out.raw_set("subject", c.subject.as_str())?;
            out.raw_set("issuer", c.issuer.as_str())?;
            out.raw_set("serial", c.serial.as_str())?;
            out.raw_set("sha256", c.sha256.as_str())?;
            out.raw_set("not_before", c.not_before)?;
            out.raw_set("not_after", c.not_after)?;
            // rustls verified the chain, or the handshake had failed.
            out.raw_set("verified", true)?;
            for (k, list) in [
                ("san_dns", &c.dns_names),
                ("san_ip", &c.ip_addresses),
                ("san_email", &c.emails),
                ("san_uri", &c.uris),
            ] {
                out.raw_set(
                    k,
                    lua.create_sequence_from(list.iter().map(String::as_str))?,
                )?;
            }
            Ok(Value::Table(out))
        });
        f.add_field_method_get("vserver", |lua, t| lstr(lua, Some(t.vserver.as_bytes())));
        f.add_field_method_get("status", |_, t| {
            Ok(match &t.p.resp {
                Some(r) => Some(i64::from(r.status)),
                None if t.p.log_event => Some(i64::from(t.p.info.status)),
                None => None,
            })
        });
        f.add_field_function_get("vars", |lua, ud| {
            // Made on first use: most requests never need one.
            ud.borrow_mut_scoped::<Txn, _>(|t| match &t.p.vars {
                Some(v) => Ok(v.clone()),
                None => {
                    let v = lua.create_table()?;
                    t.p.vars = Some(v.clone());
                    Ok(v)
                }
            })?
        });
        f.add_field_method_set("path", |_, t, p: mlua::String| {
            let p = p.as_bytes();
            let ok = p.first() == Some(&b'/')
                && p.iter().all(|b| (0x21..0x7f).contains(b) && *b != b'?' && *b != b'#');
            if !ok {
                return err(format!(
                    "r.path: {:?} is not a path (it starts with '/'; spaces, '?', '#' and bytes past ASCII are percent-encoded)",
                    String::from_utf8_lossy(&p)
                ));
            }
            let q = t.query().map(<[u8]>::to_vec);
            t.set_target(&p, q.as_deref(), "r.path")
        });
        f.add_field_method_set("query", |_, t, q: Option<mlua::String>| {
            let q = q.map(|q| q.as_bytes().to_vec()).filter(|q| !q.is_empty());
            if let Some(q) = &q {
                if !q.iter().all(|b| (0x21..0x7f).contains(b) && *b != b'#') {
                    return err("r.query: spaces, '#' and bytes past ASCII are percent-encoded");
                }
            }
            let p = t.path().unwrap_or(b"/").to_vec();
            t.set_target(&p, q.as_deref(), "r.query")
        });
        f.add_field_method_get("pool", |lua, t| {
            lstr(lua, t.p.picked.as_ref().map(|p| p.pool.as_bytes()))
        });
        f.add_field_method_get("member", |lua, t| {
            lstr(lua, t.p.picked.as_ref().map(|p| p.member.as_bytes()))
        });
        f.add_field_method_get("attempt", |_, t| {
            Ok(t.p.picked.as_ref().map(|p| i64::from(p.attempt)))
        });
        f.add_field_method_get("sni", |lua, t| {
            lstr(
                lua,
                t.p.conn
                    .as_ref()
                    .and_then(|c| c.sni.as_deref())
                    .map(str::as_bytes),
            )
        });
        f.add_field_method_get("alpn", |lua, t| match &t.p.conn {
            Some(c) => Ok(Value::Table(
                lua.create_sequence_from(c.alpn.iter().map(String::as_str))?,
            )),
            None => Ok(Value::Nil),
        });
        f.add_field_method_get("data", |lua, t| {
            lstr(lua, t.p.conn.as_ref().map(|c| &c.data[..]))
        });
        f.add_field_method_get("bytes_in", |_, t| {
            Ok(t.p.conn.as_ref().map(|c| c.bytes_in as i64))
        });
        f.add_field_method_get("bytes_out", |_, t| {
            Ok(t.p.conn.as_ref().map(|c| c.bytes_out as i64))
        });
        f.add_field_method_get("body", |lua, t| {
            let b = t.p.out.body.as_ref().or(t.p.body.as_ref());
            lstr(lua, b.map(|b| &b[..]))
        });
        f.add_field_method_set("body", |_, t, b: mlua::String| {
            if t.p.body_event.is_none() {
                return err("r.body is for on_request_body and on_response_body");
            }
            t.p.out.body = Some(Bytes::copy_from_slice(&b.as_bytes()));
            Ok(())
        });
        f.add_field_method_set("status", |_, t, n: i64| {
            let s = status(n, "r.status")?;
            match &mut t.p.resp {
                Some(r) => {
                    r.status = s;
                    r.reason = Bytes::new();
                    Ok(())
                }
                None => err("r.status is set in on_response (on_request answers with r:respond)"),
            }
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("header", |lua, t, name: mlua::String| {
            let name = name.to_str()?;
            lstr(lua, t.header(&name))
        });
        m.add_method("header_all", |lua, t, name: mlua::String| {
            let name = name.to_str()?;
            let out = lua.create_table()?;
            if let Some(f) = t.fields() {
                for (i, v) in f.all(&name).enumerate() {
                    out.raw_set(i + 1, lua.create_string(v)?)?;
                }
            }
            Ok(out)
        });
        m.add_method_mut(
            "set_header",
            |_, t, (name, value): (mlua::String, mlua::String)| {
                t.set_header(&name.as_bytes(), &value.as_bytes())
                    .map_err(mlua::Error::runtime)
            },
        );
        m.add_method_mut(
            "add_header",
            |_, t, (name, value): (mlua::String, mlua::String)| {
                let n = header_name(&name.as_bytes(), "r:add_header")
                    .map_err(mlua::Error::runtime)?
                    .into_owned();
                if *n == *b"host" {
                    return err("r:add_header: a request has one Host (use r:set_header)");
                }
                let v = value.as_bytes();
                let v = header_value(&v, "r:add_header").map_err(mlua::Error::runtime)?;
                t.fields_mut("add_header")
                    .map_err(mlua::Error::runtime)?
                    .append(&n, v);
                Ok(())
            },
        );
        m.add_method_mut("remove_header", |_, t, name: mlua::String| {
            t.remove_header(&name.as_bytes())
                .map_err(mlua::Error::runtime)
        });
        m.add_method("cookie", |lua, t, name: mlua::String| {
            let name = name.to_str()?;
            let v = match (&t.p.resp, &t.p.req) {
                (None, Some(q)) => cookie(q, &name),
                _ => None,
            };
            lstr(lua, v)
        });
        m.add_method_mut("use_pool", |_, t, name: mlua::String| {
            // The member of on_server_data is connected already.
            let conn_may = t.p.conn.as_ref().is_some_and(|c| {
                matches!(
                    c.event,
                    ConnEvent::Accept | ConnEvent::ClientData | ConnEvent::ClientHello
                )
            });
            if !conn_may {
                t.request_mut("r:use_pool")?;
            }
            let name = name.to_str()?;
            match t.pools.iter().position(|p| *p == *name) {
                Some(i) => {
                    t.p.out.pool = Some(i);
                    Ok(())
                }
                None => err(format!(
                    "r:use_pool: no pool {:?} a script may use (pools: {})",
                    &*name,
                    if t.pools.is_empty() {
                        "none".to_string()
                    } else {
                        t.pools.join(", ")
                    }
                )),
            }
        });
        m.add_method_mut("use_member", |_, t, addr: mlua::String| {
            t.request_mut("r:use_member")?;
            let text = addr.to_str()?;
            match text.parse::<std::net::SocketAddr>() {
                Ok(a) => {
                    t.p.out.member = Some(a);
                    Ok(())
                }
                Err(_) => err(format!(
                    "r:use_member: {:?} is not a member address (IP:port, [IPv6]:port)",
                    &*text
                )),
            }
        });
        m.add_method_mut(
            "respond",
            |_, t, (code, body, headers): (i64, Option<mlua::String>, Option<Table>)| {
                t.answerable("r:respond")?;
                let status = status(code, "r:respond")?;
                if matches!(status, 204 | 304)
                    && body.as_ref().is_some_and(|b| !b.as_bytes().is_empty())
                {
                    return err(format!("r:respond: a {status} answer has no body"));
                }
                let mut fields = Vec::new();
                if let Some(h) = headers {
                    for pair in h.pairs::<mlua::String, mlua::String>() {
                        let (n, v) = pair?;
                        let n = header_name(&n.as_bytes(), "r:respond")
                            .map_err(mlua::Error::runtime)?
                            .into_owned();
                        let v = v.as_bytes();
                        let v = header_value(&v, "r:respond").map_err(mlua::Error::runtime)?;
                        fields.push((
                            String::from_utf8_lossy(&n).into_owned(),
                            String::from_utf8_lossy(v).into_owned(),
                        ));
                    }
                }
                t.p.out.answer = Some(Answer {
                    status,
                    body: body.map_or_else(Bytes::new, |b| Bytes::copy_from_slice(&b.as_bytes())),
                    headers: fields,
                });
                Ok(())
            },
        );
        m.add_method_mut(
            "redirect",
            |_, t, (location, code): (mlua::String, Option<i64>)| {
                t.answerable("r:redirect")?;
                let code = code.unwrap_or(302);
                if ![301, 302, 303, 307, 308].contains(&code) {
                    return err(format!(
                        "r:redirect: status {code} is not one of 301, 302, 303, 307, 308"
                    ));
                }
                let l = location.as_bytes();
                let l = header_value(&l, "r:redirect").map_err(mlua::Error::runtime)?;
                t.p.out.answer = Some(Answer {
                    status: code as u16,
                    body: Bytes::new(),
                    headers: vec![("location".into(), String::from_utf8_lossy(l).into_owned())],
                });
                Ok(())
            },
        );
        m.add_async_method(
            "sideband",
            |lua, t: mlua::UserDataRef<Txn>, (pool, opts): (mlua::String, Option<Table>)| async move {
                let (pool, call) = sideband_call(&t, &pool, opts)?;
                let Some(callout) = t.p.callout.clone() else {
                    return err("r:sideband: no call-outs here");
                };
                drop(t);
                match callout.call(pool, call).await {
                    Ok(a) => {
                        let out = lua.create_table()?;
                        out.raw_set("status", i64::from(a.status))?;
                        let h = lua.create_table()?;
                        for (n, v) in &a.headers {
                            // The first of a repeated field (as r:header).
                            if h.raw_get::<Value>(n.as_str())? == Value::Nil {
                                h.raw_set(n.as_str(), lua.create_string(v)?)?;
                            }
                        }
                        out.raw_set("headers", h)?;
                        out.raw_set("body", lua.create_string(&a.body)?)?;
                        Ok((Value::Table(out), Value::Nil))
                    }
                    Err(why) => Ok((Value::Nil, Value::String(lua.create_string(why)?))),
                }
            },
        );
        m.add_method_mut("reject", |_, t, ()| match &t.p.conn {
            Some(c) if c.event != ConnEvent::Close => {
                t.p.out.reject = true;
                Ok(())
            }
            _ => err("c:reject is for on_accept, on_client_hello, on_client_data and on_server_data (r:respond answers a request)"),
        });
        m.add_method_mut("use_cert", |_, t, name: mlua::String| {
            if !t
                .p
                .conn
                .as_ref()
                .is_some_and(|c| c.event == ConnEvent::ClientHello)
            {
                return err("c:use_cert is for on_client_hello (the certificate is chosen there)");
            }
            let name = name.to_str()?.to_ascii_lowercase();
            match &t.certs {
                Some(store) if store.covers(&name) => {
                    t.p.out.cert = Some(name);
                    Ok(())
                }
                _ => err(format!(
                    "c:use_cert: no certificate of the vserver's tls.certificates names {name:?}"
                )),
            }
        });
        m.add_method_mut("collect_body", |_, t, ()| {
            if t.p.req.is_none() && t.p.resp.is_none() {
                return err("r:collect_body is for on_request and on_response");
            }
            t.p.out.collect = true;
            Ok(())
        });
        m.add_method_mut("log", |_, t, (name, value): (mlua::String, Value)| {
            t.log(&name.as_bytes(), log_text(&value))
                .map_err(mlua::Error::runtime)
        });
    }
}

/// The pool and the request of `r:sideband(pool, {method, path, headers,
/// body, timeout})`, checked.
fn sideband_call(
    t: &Txn,
    pool: &mlua::String,
    opts: Option<Table>,
) -> mlua::Result<(usize, super::callout::Call)> {
    use super::callout::{Call, DEFAULT_TIMEOUT, MAX_TIMEOUT};
    if !t.p.waits {
        return err(
            "r:sideband waits for its answer: only on_request can wait (this event cannot)",
        );
    }
    let name = pool.to_str()?;
    let Some(p) = t.pools.iter().position(|p| *p == *name) else {
        return err(format!(
            "r:sideband: no pool {:?} a script may use (pools: {})",
            &*name,
            t.pools.join(", ")
        ));
    };
    let mut call = Call {
        method: "GET".into(),
        path: "/".into(),
        headers: Vec::new(),
        body: Bytes::new(),
        timeout: DEFAULT_TIMEOUT,
        max_body: t.max_body,
    };
    if let Some(o) = opts {
        if let Some(m) = o.get::<Option<mlua::String>>("method")? {
            let m = m.to_str()?.to_string();
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                return err(format!("r:sideband: {m:?} is not a method"));
            }
            call.method = m;
        }
        if let Some(p) = o.get::<Option<mlua::String>>("path")? {
            let p = p.as_bytes();
            if p.first() != Some(&b'/') || !p.iter().all(|b| (0x21..0x7f).contains(b)) {
                return err("r:sideband: a path starts with '/' and holds no spaces or controls");
            }
            call.path = String::from_utf8_lossy(&p).into_owned();
        }
        if let Some(h) = o.get::<Option<Table>>("headers")? {
            for pair in h.pairs::<mlua::String, mlua::String>() {
                let (n, v) = pair?;
                let n = header_name(&n.as_bytes(), "r:sideband")
                    .map_err(mlua::Error::runtime)?
                    .into_owned();
                let v = v.as_bytes();
                let v = header_value(&v, "r:sideband").map_err(mlua::Error::runtime)?;
                call.headers.push((
                    String::from_utf8_lossy(&n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ));
            }
        }
        if let Some(b) = o.get::<Option<mlua::String>>("body")? {
            call.body = Bytes::copy_from_slice(&b.as_bytes());
        }
        if let Some(s) = o.get::<Option<f64>>("timeout")? {
            if !(s > 0.0 && s <= MAX_TIMEOUT.as_secs_f64()) {
                return err(format!(
                    "r:sideband: timeout {s} s (more than 0, at most {} s)",
                    MAX_TIMEOUT.as_secs()
                ));
            }
            call.timeout = std::time::Duration::from_secs_f64(s);
        }
    }
    Ok((p, call))
}
