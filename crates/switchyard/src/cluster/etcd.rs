//! A small etcd v3 client over etcd's JSON gateway (`/v3/kv/range`,
//! `/v3/kv/txn`, `/v3/watch`, `/v3/lease/...`), which every etcd since 3.4
//! serves on its client port: plain HTTP/1.1 and JSON, no gRPC stack and
//! no protobuf compiler in the build. Blocking, with a timeout on every
//! socket operation; the node runs it on a thread of its own.
//!
//! Endpoints are tried in order until one answers; an answer's header
//! carries the cluster id, which the node pins (another cluster's data is
//! never applied).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::base64::{decode as unb64, encode as b64};

const TIMEOUT: Duration = Duration::from_secs(5);

/// A key's value at a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// What an answer's header says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub cluster_id: u64,
    pub revision: i64,
}

#[derive(Debug)]
pub enum Error {
    /// No endpoint answered (connect, timeout, a broken stream).
    Unreachable(String),
    /// etcd answered with an error.
    Etcd(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unreachable(e) => write!(f, "etcd unreachable: {e}"),
            Error::Etcd(e) => write!(f, "etcd: {e}"),
        }
    }
}

/// How to reach etcd beyond plain HTTP: TLS (with a client certificate
/// when etcd asks for one) and a user's password.
#[derive(Debug, Default)]
pub struct Access {
    /// For `https://` endpoints.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// etcd's auth: a token got with these, sent on every call.
    pub user: Option<(String, String)>,
    /// The token in use (shared by the node's clients).
    token: Mutex<Option<String>>,
}

impl Access {
    pub fn new(tls: Option<Arc<rustls::ClientConfig>>, user: Option<(String, String)>) -> Access {
        Access {
            tls,
            user,
            token: Mutex::new(None),
        }
    }

    fn token(&self) -> Option<String> {
        self.token.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_token(&self, t: Option<String>) {
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = t;
    }
}

/// One endpoint: where, and whether TLS.
#[derive(Clone, Debug)]
struct Endpoint {
    /// "host:port".
    hostport: String,
    host: String,
    tls: bool,
}

/// A connection to an endpoint.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(b),
            Conn::Tls(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(b),
            Conn::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

pub struct Client {
    endpoints: Vec<Endpoint>,
    /// The endpoint that answered last: tried first.
    current: usize,
    access: Arc<Access>,
}

/// The first key after every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn num(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn header(v: &Value) -> Header {
    let h = &v["header"];
    Header {
        cluster_id: match &h["cluster_id"] {
            Value::String(s) => s.parse().unwrap_or(0),
            Value::Number(n) => n.as_u64().unwrap_or(0),
            _ => 0,
        },
        revision: num(&h["revision"]),
    }
}

/// The keys and values of a range answer.
fn kvs(v: &Value) -> Vec<Kv> {
    v["kvs"]
        .as_array()
        .map(|a| a.iter().filter_map(kv).collect())
        .unwrap_or_default()
}

fn kv(v: &Value) -> Option<Kv> {
    Some(Kv {
        key: unb64(v["key"].as_str()?)?,
        value: unb64(v["value"].as_str().unwrap_or(""))?,
        mod_revision: num(&v["mod_revision"]),
    })
}

/// A response head: status and whether the body is chunked / its length.
struct Head {
    status: u16,
    chunked: bool,
    length: Option<usize>,
}

fn read_head(r: &mut impl BufRead) -> std::io::Result<Head> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut h = Head {
        status,
        chunked: false,
        length: None,
    };
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            return Ok(h);
        }
        if let Some((n, v)) = l.split_once(':') {
            let v = v.trim();
            if n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked") {
                h.chunked = true;
            } else if n.eq_ignore_ascii_case("content-length") {
                h.length = v.parse().ok();
            }
        }
    }
}

/// The next chunk of a chunked body (empty at its end).
fn read_chunk(r: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
    if size > 64 << 20 {
        return Err(std::io::Error::other("chunk over 64 MiB"));
    }
    let mut data = vec![0; size + 2];
    r.read_exact(&mut data)?;
    data.truncate(size);
    Ok(data)
}

impl Client {
    /// `endpoints`: "http://host:port" or "https://host:port".
    pub fn new(endpoints: &[String], access: Arc<Access>) -> Client {
        Client {
            endpoints: endpoints
                .iter()
                .map(|e| {
                    let tls = e.starts_with("https://");
                    let hostport = e
                        .trim_start_matches("https://")
                        .trim_start_matches("http://")
                        .trim_end_matches('/')
                        .to_string();
                    let host = match hostport.rsplit_once(':') {
                        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
                        None => hostport.clone(),
                    };
                    Endpoint {
                        hostport,
                        host,
                        tls,
                    }
                })
                .collect(),
            current: 0,
            access,
        }
    }

    fn connect(&mut self, timeout: Duration) -> Result<(Conn, String), Error> {
        let mut why = Vec::new();
        for i in 0..self.endpoints.len() {
            let at = (self.current + i) % self.endpoints.len();
            let ep = self.endpoints[at].clone();
            let addrs: Vec<SocketAddr> = match ep.hostport.to_socket_addrs() {
                Ok(a) => a.collect(),
                Err(e) => {
                    why.push(format!("{}: {e}", ep.hostport));
                    continue;
                }
            };
            for a in addrs {
                let s = match TcpStream::connect_timeout(&a, TIMEOUT) {
                    Ok(s) => s,
                    Err(e) => {
                        why.push(format!("{}: {e}", ep.hostport));
                        continue;
                    }
                };
                let _ = s.set_read_timeout(Some(timeout));
                let _ = s.set_write_timeout(Some(TIMEOUT));
                let _ = s.set_nodelay(true);
                let conn = if ep.tls {
                    let Some(cfg) = self.access.tls.clone() else {
                        why.push(format!(
                            "{}: https endpoint without TLS settings",
                            ep.hostport
                        ));
                        continue;
                    };
                    let name = match rustls_pki_types::ServerName::try_from(ep.host.clone()) {
                        Ok(n) => n,
                        Err(e) => {
                            why.push(format!("{}: {e}", ep.hostport));
                            continue;
                        }
                    };
                    match rustls::ClientConnection::new(cfg, name) {
                        Ok(c) => Conn::Tls(Box::new(rustls::StreamOwned::new(c, s))),
                        Err(e) => {
                            why.push(format!("{}: TLS: {e}", ep.hostport));
                            continue;
                        }
                    }
                } else {
                    Conn::Plain(s)
                };
                self.current = at;
                return Ok((conn, ep.hostport));
            }
        }
        Err(Error::Unreachable(why.join("; ")))
    }

    fn send(&self, s: &mut Conn, host: &str, path: &str, body: &Value) -> std::io::Result<()> {
        let body = body.to_string();
        let auth = match self.access.token() {
            Some(t) if path != "/v3/auth/authenticate" => format!("Authorization: {t}\r\n"),
            _ => String::new(),
        };
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes())?;
        s.flush()
    }

    /// Gets a token for the configured user (none without one).
    fn authenticate(&mut self) -> Result<(), Error> {
        let Some((name, password)) = self.access.user.clone() else {
            return Ok(());
        };
        let v = self.call_once(
            "/v3/auth/authenticate",
            &json!({"name": name, "password": password}),
        )?;
        let token = v["token"]
            .as_str()
            .ok_or_else(|| Error::Etcd("authenticate: no token in the answer".into()))?;
        self.access.set_token(Some(token.to_string()));
        Ok(())
    }

    /// One request, one JSON answer; with a user, a missing or expired
    /// token is renewed once.
    fn call(&mut self, path: &str, body: Value) -> Result<Value, Error> {
        if self.access.user.is_some() && self.access.token().is_none() {
            self.authenticate()?;
        }
        match self.call_once(path, &body) {
            Err(Error::Etcd(e)) if self.access.user.is_some() && e.contains("token") => {
                self.access.set_token(None);
                self.authenticate()?;
                self.call_once(path, &body)
            }
            r => r,
        }
    }

    fn call_once(&mut self, path: &str, body: &Value) -> Result<Value, Error> {
        let (mut s, host) = self.connect(TIMEOUT)?;
        let io = |e: std::io::Error| Error::Unreachable(format!("{host}{path}: {e}"));
        self.send(&mut s, &host, path, body).map_err(io)?;
        let mut r = BufReader::new(s);
        let h = read_head(&mut r).map_err(io)?;
        let mut data = Vec::new();
        if h.chunked {
            // A streaming call read as unary: its first message is enough.
            loop {
                let c = read_chunk(&mut r).map_err(io)?;
                if c.is_empty() {
                    break;
                }
                data.extend_from_slice(&c);
                if serde_json::from_slice::<Value>(&data).is_ok() {
                    break;
                }
            }
        } else if let Some(n) = h.length {
            data.resize(n.min(64 << 20), 0);
            r.read_exact(&mut data).map_err(io)?;
        } else {
            r.read_to_end(&mut data).map_err(io)?;
        }
        let v: Value = serde_json::from_slice(&data).map_err(|e| {
            if h.status != 200 {
                // etcd's gateway answers some refusals in plain text.
                let text = String::from_utf8_lossy(&data[..data.len().min(300)])
                    .trim()
                    .to_string();
                Error::Etcd(format!("{path}: {} {text}", h.status))
            } else {
                Error::Etcd(format!("{path}: invalid JSON ({e})"))
            }
        })?;
        if h.status != 200 || v.get("error").is_some() {
            return Err(Error::Etcd(format!(
                "{path}: {} {}",
                h.status,
                v.get("message").or(v.get("error")).unwrap_or(&v)
            )));
        }
        Ok(v.get("result").cloned().unwrap_or(v))
    }

    /// The key's value, if it exists.
    pub fn get(&mut self, key: &[u8]) -> Result<(Header, Option<Kv>), Error> {
        let v = self.call("/v3/kv/range", json!({"key": b64(key)}))?;
        let kv = v["kvs"].as_array().and_then(|a| a.first()).and_then(kv);
        Ok((header(&v), kv))
    }

    /// The key's revision (0: it does not exist), without its value: a
    /// publisher that compares and puts needs only that, and the value
    /// can be megabytes.
    pub fn revision_of(&mut self, key: &[u8]) -> Result<(Header, i64), Error> {
        let v = self.call("/v3/kv/range", json!({"key": b64(key), "keys_only": true}))?;
        let rev = v["kvs"]
            .as_array()
            .and_then(|a| a.first())
            .map_or(0, |kv| num(&kv["mod_revision"]));
        Ok((header(&v), rev))
    }

    /// Every key under `prefix` written after `revision` (that still
    /// exists: a deletion is not seen this way).
    pub fn list_since(&mut self, prefix: &[u8], revision: i64) -> Result<(Header, Vec<Kv>), Error> {
        let v = self.call(
            "/v3/kv/range",
            json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix)),
                   "min_mod_revision": (revision + 1).to_string()}),
        )?;
        Ok((header(&v), kvs(&v)))
    }

    /// Every key under `prefix`.
    pub fn list(&mut self, prefix: &[u8]) -> Result<(Header, Vec<Kv>), Error> {
        let v = self.call(
            "/v3/kv/range",
            json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix))}),
        )?;
        Ok((header(&v), kvs(&v)))
    }

    /// Puts `value` if the key's revision is still `expect` (0: the key
    /// must not exist). Ok(Some(revision)) when written, Ok(None) when the
    /// key moved on (a stale `If-Match`).
    pub fn compare_and_put(
        &mut self,
        key: &[u8],
        value: &[u8],
        expect: i64,
    ) -> Result<Option<i64>, Error> {
        let v = self.call(
            "/v3/kv/txn",
            json!({
                "compare": [{"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": expect.to_string()}],
                "success": [{"request_put": {"key": b64(key), "value": b64(value)}}],
            }),
        )?;
        Ok((v["succeeded"] == true).then(|| header(&v).revision))
    }

    /// Puts `value` under a lease (0: none).
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<Header, Error> {
        let mut body = json!({"key": b64(key), "value": b64(value)});
        if lease != 0 {
            body["lease"] = Value::from(lease.to_string());
        }
        let v = self.call("/v3/kv/put", body)?;
        Ok(header(&v))
    }

    /// Puts `value` under `lease` only if the key does not exist: true
    /// when written (a lock taken).
    pub fn create(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<bool, Error> {
        let mut put = json!({"key": b64(key), "value": b64(value)});
        if lease != 0 {
            put["lease"] = Value::from(lease.to_string());
        }
        let v = self.call(
            "/v3/kv/txn",
            json!({
                "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                "success": [{"request_put": put}],
            }),
        )?;
        Ok(v["succeeded"] == true)
    }

    /// Deletes the key.
    pub fn delete(&mut self, key: &[u8]) -> Result<(), Error> {
        self.call("/v3/kv/deleterange", json!({"key": b64(key)}))
            .map(|_| ())
    }

    /// Ends a lease now: its keys go with it.
    pub fn revoke(&mut self, id: i64) -> Result<(), Error> {
        self.call("/v3/lease/revoke", json!({"ID": id.to_string()}))
            .map(|_| ())
    }

    /// A lease of `ttl` seconds.
    pub fn grant(&mut self, ttl: u64) -> Result<i64, Error> {
        let v = self.call("/v3/lease/grant", json!({"TTL": ttl.to_string()}))?;
        Ok(num(&v["ID"]))
    }

    /// Renews a lease; false when it expired.
    pub fn keep_alive(&mut self, id: i64) -> Result<bool, Error> {
        let v = self.call("/v3/lease/keepalive", json!({"ID": id.to_string()}))?;
        Ok(num(&v["TTL"]) > 0)
    }

    /// Compacts the history up to `revision` (tests, operators).
    pub fn compact(&mut self, revision: i64) -> Result<(), Error> {
        self.call(
            "/v3/kv/compaction",
            json!({"revision": revision.to_string(), "physical": true}),
        )
        .map(|_| ())
    }

    /// Watches `key` from `revision`; `idle` bounds the wait for each read.
    pub fn watch(&mut self, key: &[u8], revision: i64, idle: Duration) -> Result<Watch, Error> {
        self.watch_range(key, None, revision, idle)
    }

    /// Watches every key under `prefix` from `revision`.
    pub fn watch_prefix(
        &mut self,
        prefix: &[u8],
        revision: i64,
        idle: Duration,
    ) -> Result<Watch, Error> {
        self.watch_range(prefix, Some(prefix_end(prefix)), revision, idle)
    }

    fn watch_range(
        &mut self,
        key: &[u8],
        range_end: Option<Vec<u8>>,
        revision: i64,
        idle: Duration,
    ) -> Result<Watch, Error> {
        if self.access.user.is_some() && self.access.token().is_none() {
            self.authenticate()?;
        }
        let (mut s, host) = self.connect(idle)?;
        let mut body = json!({"create_request": {"key": b64(key), "start_revision": revision.to_string(), "progress_notify": true}});
        if let Some(end) = range_end {
            body["create_request"]["range_end"] = Value::from(b64(&end));
        }
        let io = |e: std::io::Error| Error::Unreachable(format!("{host}/v3/watch: {e}"));
        self.send(&mut s, &host, "/v3/watch", &body).map_err(io)?;
        let mut r = BufReader::new(s);
        let h = read_head(&mut r).map_err(io)?;
        if h.status != 200 || !h.chunked {
            // An expired token: the next list authenticates again.
            if h.status == 401 {
                self.access.set_token(None);
            }
            return Err(Error::Etcd(format!("/v3/watch: status {}", h.status)));
        }
        Ok(Watch { r, buf: Vec::new() })
    }
}

/// What a watch delivers.
#[derive(Debug)]
pub enum WatchEvent {
    Created,
    /// Puts (Some) and deletes (None) of the key.
    Changes(Header, Vec<(i64, Option<Kv>)>),
    /// The revision asked for is compacted away: list again.
    Compacted(i64),
    /// etcd ended the watch.
    Canceled(String),
    /// Nothing new (progress notification).
    Progress(Header),
}

pub struct Watch {
    r: BufReader<Conn>,
    buf: Vec<u8>,
}

impl Watch {
    /// The next message; an error when the stream broke or stayed silent
    /// past the idle bound.
    pub fn next_event(&mut self) -> Result<WatchEvent, Error> {
        loop {
            if let Some(end) = self.buf.iter().position(|&c| c == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let line = line.trim_ascii();
                if line.is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_slice(line)
                    .map_err(|e| Error::Etcd(format!("watch: invalid JSON ({e})")))?;
                return Ok(event(&v));
            }
            let c = read_chunk(&mut self.r)
                .map_err(|e| Error::Unreachable(format!("watch stream: {e}")))?;
            if c.is_empty() {
                return Err(Error::Unreachable("watch stream ended".into()));
            }
            self.buf.extend_from_slice(&c);
            if !self.buf.contains(&b'\n') && serde_json::from_slice::<Value>(&self.buf).is_ok() {
                self.buf.push(b'\n');
            }
        }
    }
}

fn event(v: &Value) -> WatchEvent {
    let r = v.get("result").unwrap_or(v);
    if let Some(e) = v.get("error") {
        return WatchEvent::Canceled(e.to_string());
    }
    let h = header(r);
    let compact = num(&r["compact_revision"]);
    if compact > 0 {
        return WatchEvent::Compacted(compact);
    }
    if r["canceled"] == true {
        return WatchEvent::Canceled(
            r["cancel_reason"]
                .as_str()
                .unwrap_or("canceled")
                .to_string(),
        );
    }
    if r["created"] == true {
        return WatchEvent::Created;
    }
    match r["events"].as_array() {
        Some(evs) if !evs.is_empty() => WatchEvent::Changes(
            h,
            evs.iter()
                .map(|e| {
                    let rev = num(&e["kv"]["mod_revision"]);
                    let deleted = e["type"] == "DELETE";
                    (rev, if deleted { None } else { kv(&e["kv"]) })
                })
                .collect(),
        ),
        _ => WatchEvent::Progress(h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in ["", "a", "ab", "abc", "abcd", "/switchyard/config"] {
            assert_eq!(unb64(&b64(s.as_bytes())).as_deref(), Some(s.as_bytes()));
        }
        assert_eq!(b64(b"/sy/config"), "L3N5L2NvbmZpZw==");
        assert_eq!(prefix_end(b"/a/"), b"/a0");
    }

    #[test]
    fn watch_messages_are_read() {
        let v: Value = serde_json::from_str(r#"{"result":{"header":{"cluster_id":"12","revision":"3"},"events":[{"kv":{"key":"L3N5L2NvbmZpZw==","mod_revision":"3","value":"d29ybGQ="}}]}}"#).unwrap();
        match event(&v) {
            WatchEvent::Changes(h, c) => {
                assert_eq!(h.cluster_id, 12);
                assert_eq!(c[0].0, 3);
                assert_eq!(c[0].1.as_ref().unwrap().value, b"world");
            }
            e => panic!("{e:?}"),
        }
        let v: Value = serde_json::from_str(
            r#"{"result":{"header":{"revision":"9"},"compact_revision":"5","canceled":true}}"#,
        )
        .unwrap();
        assert!(matches!(event(&v), WatchEvent::Compacted(5)));
    }
}
