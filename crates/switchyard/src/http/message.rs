//! The protocol-neutral message: an editable request or response head.
//!
//! The HTTP/1 parser (`head`) and the HTTP/2 front end (`h2_message`) both
//! build these; the proxy's stages edit them; they are serialised once, at
//! the edge, for the peer's protocol (`write_h1`, `h2_message`). No stage ever
//! sees wire syntax, and no head is parsed twice (HAProxy's HTX plays the
//! same part).
//!
//! Fields keep their order and their duplicates. Parsed fields are spans of
//! the received head (no copy, no allocation per field); a field an edit
//! adds lives in the head's own buffer. Removing a field drops its entry,
//! never the bytes, which live as long as the message.

use bytes::Bytes;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    Length(u64),
    /// Chunked on HTTP/1.1; on HTTP/2, DATA frames without a declared length.
    Chunked,
    /// Body runs until the sender closes (responses only); on HTTP/2, until
    /// the end of the stream.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Trace,
    Connect,
    Patch,
    Other,
}

impl Method {
    pub fn parse(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"CONNECT" => Method::Connect,
            b"PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }

    /// RFC 9110 9.2.2: safe to send again after a failure.
    pub fn idempotent(self) -> bool {
        matches!(
            self,
            Method::Get
                | Method::Head
                | Method::Put
                | Method::Delete
                | Method::Options
                | Method::Trace
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
    /// The spans index `Fields::owned` rather than `Fields::raw`.
    owned: bool,
}

/// Header fields in order, duplicates kept. Names compare case-insensitively.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    raw: Bytes,
    owned: Vec<u8>,
    list: Vec<Field>,
}

impl Fields {
    /// A copy to be edited (a cached head answering a request gets Age
    /// and Cache-Status): room for a few fields comes with it, so the
    /// first edits do not reallocate. A plain clone (a head being stored)
    /// takes no more than it needs.
    pub fn clone_with_room(&self) -> Fields {
        let mut owned = Vec::with_capacity(self.owned.len() + 128);
        owned.extend_from_slice(&self.owned);
        let mut list = Vec::with_capacity(self.list.len() + 4);
        list.extend_from_slice(&self.list);
        Fields {
            raw: self.raw.clone(),
            owned,
            list,
        }
    }

    /// Fields that will be spans of `raw` (see `push_span`).
    pub fn over(raw: Bytes, capacity: usize) -> Fields {
        Fields {
            raw,
            owned: Vec::new(),
            list: Vec::with_capacity(capacity),
        }
    }

    /// Appends a field whose name and value are byte ranges of `raw`.
    pub(crate) fn push_span(&mut self, name: (u32, u32), value: (u32, u32)) {
        self.list.push(Field {
            name,
            value,
            owned: false,
        });
    }

    fn bytes(&self, owned: bool, (a, b): (u32, u32)) -> &[u8] {
        let src: &[u8] = if owned { &self.owned } else { &self.raw };
        &src[a as usize..b as usize]
    }

    fn own(&mut self, bytes: &[u8]) -> (u32, u32) {
        self.reserve_owned(bytes.len());
        let a = self.owned.len() as u32;
        self.owned.extend_from_slice(bytes);
        (a, self.owned.len() as u32)
    }

    /// Edits come in small pieces: the first one takes room for the usual
    /// few (forwarding fields, a cookie) at once, not a doubling per piece.
    fn reserve_owned(&mut self, n: usize) {
        if self.owned.capacity() - self.owned.len() < n {
            self.owned.reserve(n.max(256));
        }
    }

    /// Appends a field whose value `write` produces in place (no buffer
    /// of its own for a value built from pieces).
    pub fn append_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        let name = self.own(name);
        let a = self.owned.len() as u32;
        write(&mut self.owned);
        let value = (a, self.owned.len() as u32);
        self.list.push(Field {
            name,
            value,
            owned: true,
        });
    }

    /// Appends a field at the end.
    pub fn append(&mut self, name: &[u8], value: &[u8]) {
        let name = self.own(name);
        let value = self.own(value);
        self.list.push(Field {
            name,
            value,
            owned: true,
        });
    }

    /// Replaces the first field named `name` in place and removes the
    /// others; appends when there is none.
    pub fn set(&mut self, name: &[u8], value: &[u8]) {
        match self.position(name) {
            Some(i) => {
                let v = self.own(value);
                let n = self.own(name);
                self.list[i] = Field {
                    name: n,
                    value: v,
                    owned: true,
                };
                let mut k = 0;
                self.list.retain(|f| {
                    k += 1;
                    k - 1 <= i || !Self::named(&self.raw, &self.owned, f, name)
                });
            }
            None => self.append(name, value),
        }
    }

    /// Removes every field named `name`; returns how many.
    pub fn remove(&mut self, name: &[u8]) -> usize {
        let before = self.list.len();
        let (raw, owned) = (&self.raw, &self.owned);
        self.list.retain(|f| !Self::named(raw, owned, f, name));
        before - self.list.len()
    }

    /// Keeps the fields for which `keep(name, value)` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        let (raw, owned) = (&self.raw, &self.owned);
        self.list.retain(|f| {
            let src: &[u8] = if f.owned { owned } else { raw };
            keep(
                &src[f.name.0 as usize..f.name.1 as usize],
                &src[f.value.0 as usize..f.value.1 as usize],
            )
        });
    }

    fn named(raw: &[u8], owned: &[u8], f: &Field, name: &[u8]) -> bool {
        let src = if f.owned { owned } else { raw };
        src[f.name.0 as usize..f.name.1 as usize].eq_ignore_ascii_case(name)
    }

    fn position(&self, name: &[u8]) -> Option<usize> {
        self.list
            .iter()
            .position(|f| Self::named(&self.raw, &self.owned, f, name))
    }

    /// Every field, in order: (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.list
            .iter()
            .map(|f| (self.bytes(f.owned, f.name), self.bytes(f.owned, f.value)))
    }

    /// Every field with its value as shared bytes: a slice of the received
    /// head where it came from there (no copy), else a slice of one copy
    /// of the edited fields. For handing values to the `http` crate.
    pub fn iter_shared(&self) -> impl Iterator<Item = (&[u8], Bytes)> + '_ {
        let owned = if self.list.iter().any(|f| f.owned) {
            Bytes::copy_from_slice(&self.owned)
        } else {
            Bytes::new()
        };
        self.list.iter().map(move |f| {
            let src = if f.owned { &owned } else { &self.raw };
            (
                self.bytes(f.owned, f.name),
                src.slice(f.value.0 as usize..f.value.1 as usize),
            )
        })
    }

    /// First value of a field (names are case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.position(name.as_bytes()).is_some()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// What requests and responses share.
#[derive(Debug, Clone)]
pub struct Head {
    pub fields: Fields,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1 and HTTP/2 (the semantics we serve).
    pub minor: u8,
    /// How the body is delimited as received.
    pub framing: Framing,
    /// The sender wants the connection kept open.
    pub keep_alive: bool,
    /// HTTP/1.1 Connection: upgrade with an Upgrade field.
    pub upgrade: bool,
    /// Tokens listed in Connection (lower case), hop-by-hop by definition.
    pub connection_tokens: Vec<String>,
    /// Bytes the head took on the wire (for the byte counters).
    pub wire_len: u32,
}

impl Head {
    pub fn new(fields: Fields, framing: Framing) -> Head {
        Head {
            fields,
            minor: 1,
            framing,
            keep_alive: true,
            upgrade: false,
            connection_tokens: Vec::new(),
            wire_len: 0,
        }
    }

    /// First value of a field, by name.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields.get(name)
    }

    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields.all(name)
    }

    /// A field that describes one connection only and never goes further:
    /// RFC 9110 7.6.1's list and whatever Connection names.
    pub fn is_connection_field(&self, name: &[u8]) -> bool {
        is_hop_by_hop(name)
            || self
                .connection_tokens
                .iter()
                .any(|t| t.as_bytes().eq_ignore_ascii_case(name))
    }
}

#[derive(Debug, Clone)]
pub struct Request {
    pub head: Head,
    pub method: Method,
    pub method_raw: Bytes,
    /// Origin-form target (path and query), or "*": normalized
    /// (`http::normalize`) before any stage reads it.
    pub target: Bytes,
    /// The target as the client sent it, when normalization changed it.
    /// Boxed: a request moves through several futures, and two more
    /// `Bytes` in it cost 90 instructions of memcpy per keep-alive
    /// request (callgrind), paid by every request to save a pointer on
    /// the few whose path was rewritten.
    pub received: Option<Box<Received>>,
    /// Authority: from an absolute-form target or `:authority`, else Host.
    pub host: Option<Bytes>,
    pub expect_continue: bool,
    /// An HTTP/2 client asked for trailers ("te: trailers"); gRPC members insist.
    pub te_trailers: bool,
}

impl Request {
    pub fn method_str(&self) -> &[u8] {
        &self.method_raw
    }
    pub fn target(&self) -> &[u8] {
        &self.target
    }
    /// The target as received (before normalization): the WAF's
    /// REQUEST_URI_RAW and the access log's `$request_uri_raw`.
    pub fn received_target(&self) -> &[u8] {
        match &self.received {
            Some(r) => &r.target,
            None => &self.target,
        }
    }
    /// The target written to the member: the normalized one, or the
    /// received one on a vserver that forwards the original bytes.
    pub fn member_target(&self) -> &[u8] {
        match &self.received {
            Some(r) if r.forward => &r.target,
            _ => &self.target,
        }
    }
    /// Path without the query.
    pub fn path_only(&self) -> &[u8] {
        let t = self.target();
        match t.iter().position(|b| *b == b'?') {
            Some(i) => &t[..i],
            None => t,
        }
    }
    pub fn query(&self) -> Option<&[u8]> {
        let t = self.target();
        t.iter().position(|b| *b == b'?').map(|i| &t[i + 1..])
    }
    pub fn host(&self) -> Option<&[u8]> {
        self.host.as_deref()
    }
    /// Host without a port, for matching.
    pub fn host_name(&self) -> Option<&[u8]> {
        let h = self.host()?;
        if h.first() == Some(&b'[') {
            return h.iter().position(|b| *b == b']').map(|i| &h[..=i]);
        }
        Some(match h.iter().rposition(|b| *b == b':') {
            Some(i) => &h[..i],
            None => h,
        })
    }
}

/// A request target as the client sent it, kept when normalization
/// rewrote it (`Request::received`).
#[derive(Debug, Clone)]
pub struct Received {
    pub target: Bytes,
    /// The member gets this target rather than the normalized one.
    pub forward: bool,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub status: u16,
    pub reason: Bytes,
}

impl Response {
    /// A copy whose fields have room for edits (`Fields::clone_with_room`).
    pub fn clone_to_edit(&self) -> Response {
        let h = &self.head;
        Response {
            head: Head {
                fields: h.fields.clone_with_room(),
                minor: h.minor,
                framing: h.framing,
                keep_alive: h.keep_alive,
                upgrade: h.upgrade,
                connection_tokens: h.connection_tokens.clone(),
                wire_len: h.wire_len,
            },
            status: self.status,
            reason: self.reason.clone(),
        }
    }

    /// A response the proxy makes itself (no reason phrase: the writer
    /// uses the standard one).
    pub fn new(status: u16, framing: Framing) -> Response {
        Response {
            head: Head::new(Fields::default(), framing),
            status,
            reason: Bytes::new(),
        }
    }
}

/// Fields that describe one connection, never forwarded (RFC 9110 7.6.1).
/// Checked for every field a head writer copies: the length decides first.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    let is = |h: &[u8]| name.eq_ignore_ascii_case(h);
    match name.len() {
        2 => is(b"te"),
        7 => is(b"trailer") || is(b"upgrade"),
        10 => is(b"connection") || is(b"keep-alive"),
        // The h2c upgrade's settings: never forwarded, whatever Connection
        // lists (`upgrade::offer` drops the h2c they go with).
        14 => is(b"http2-settings"),
        16 => is(b"proxy-connection"),
        17 => is(b"transfer-encoding"),
        18 => is(b"proxy-authenticate"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed() -> Fields {
        let raw = Bytes::from_static(b"A: 1\r\nB: 2\r\na: 3\r\n");
        let mut f = Fields::over(raw, 4);
        f.push_span((0, 1), (3, 4));
        f.push_span((6, 7), (9, 10));
        f.push_span((12, 13), (15, 16));
        f
    }

    #[test]
    fn keeps_order_and_duplicates() {
        let f = parsed();
        let all: Vec<_> = f.iter().collect();
        assert_eq!(
            all,
            vec![(&b"A"[..], &b"1"[..]), (b"B", b"2"), (b"a", b"3")]
        );
        assert_eq!(f.all("a").collect::<Vec<_>>(), vec![&b"1"[..], b"3"]);
        assert_eq!(f.get("b"), Some(&b"2"[..]));
    }

    #[test]
    fn hop_by_hop_names() {
        for n in [
            "Connection",
            "keep-alive",
            "Proxy-Connection",
            "TE",
            "trailer",
            "Transfer-Encoding",
            "upgrade",
            "proxy-authenticate",
            "HTTP2-Settings",
        ] {
            assert!(is_hop_by_hop(n.as_bytes()), "{n}");
        }
        for n in ["host", "trailers", "tee", "content-length", "x-upgrade"] {
            assert!(!is_hop_by_hop(n.as_bytes()), "{n}");
        }
    }

    #[test]
    fn edits() {
        let mut f = parsed();
        f.set(b"a", b"x");
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            vec![(&b"a"[..], &b"x"[..]), (b"B", b"2")]
        );
        f.append(b"c", b"y");
        f.append(b"B", b"z");
        assert_eq!(f.remove(b"b"), 2);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            vec![(&b"a"[..], &b"x"[..]), (b"c", b"y")]
        );
        f.retain(|n, _| n != b"a");
        assert_eq!(f.len(), 1);
        f.set(b"new", b"1");
        assert_eq!(f.get("NEW"), Some(&b"1"[..]));
    }
}
