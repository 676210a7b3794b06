//! The request into the collections: the head (REQUEST_LINE, REQUEST_URI,
//! ARGS_GET, headers, cookies) and the body's arguments, as the body
//! parsers report them ([`body::Sink`]).

use super::data::Arg;
use super::Transaction;
use crate::engine::{body, Request};
use crate::seclang::{BodyProcessor, Collection};
use crate::transform;

/// What the body parsers find goes into the request's collections.
impl body::Sink for Transaction<'_> {
    fn limits(&self) -> body::Limits {
        let l = &self.eng.limits;
        body::Limits {
            json_depth: l.json_depth,
            xml_depth: l.xml_depth,
            max_parts: l.max_parts,
            no_files: l.request_body_no_files_limit,
        }
    }

    fn arg(&mut self, name: &[u8], value: &[u8]) {
        self.add_arg(name, value, true);
    }

    fn file(&mut self, name: &[u8], filename: &[u8], size: usize) {
        let kv = self.d.kv(name, filename);
        self.d.files.push(kv);
        let kv = self.d.kv(name, size.to_string().as_bytes());
        self.d.files_sizes.push(kv);
    }

    fn part_header(&mut self, name: &[u8], line: &[u8]) {
        let kv = self.d.kv(name, line);
        self.d.part_headers.push(kv);
    }

    fn set(&mut self, var: Collection, value: &[u8]) {
        self.d.set(var, value);
    }

    fn xml_text(&mut self, text: Vec<u8>) {
        self.d.set_xml_text(text);
    }

    fn xml_attr(&mut self, value: &[u8]) {
        let kv = self.d.kv(b"", value);
        self.d.xml_attrs.push(kv);
    }
}

impl Transaction<'_> {
    pub(super) fn set_request(&mut self, req: Request<'_>) {
        use Collection as C;
        let d = &mut self.d;
        let proto = if req.protocol.len() >= 5 && req.protocol[..5].eq_ignore_ascii_case("HTTP/") {
            req.protocol.to_string()
        } else {
            format!("HTTP/{}", req.protocol)
        };
        let raw = req.uri_raw;
        let mut line = Vec::with_capacity(req.method.len() + raw.len() + proto.len() + 2);
        line.extend_from_slice(req.method.as_bytes());
        line.push(b' ');
        line.extend_from_slice(raw);
        line.push(b' ');
        line.extend_from_slice(proto.as_bytes());
        d.set(C::RequestLine, line);
        d.set(C::RequestMethod, req.method.as_bytes());
        d.set(C::RequestProtocol, proto.as_bytes());
        d.set(C::RequestUriRaw, raw);
        let uri = req.uri;
        let no_frag = match memchr::memchr(b'#', uri) {
            Some(p) => &uri[..p],
            None => uri,
        };
        let decoded = transform::uri_decode(no_frag);
        let qpos = memchr::memchr(b'?', no_frag);
        let query = qpos.map(|p| &no_frag[p + 1..]);
        if let Some(q) = query {
            d.set(C::QueryString, q);
        }
        let path: &[u8] = match memchr::memchr(b'?', &decoded) {
            Some(p) => &decoded[..p],
            None => &decoded,
        };
        if let Some(off) = path.iter().rposition(|&c| c == b'/' || c == b'\\') {
            if path.len() > off + 1 {
                d.set(C::RequestBasename, &path[off + 1..]);
            }
        }
        d.set(C::RequestFilename, path);
        let mut parsed: &[u8] = &decoded;
        if !decoded.is_empty() && decoded[0] != b'/' {
            if let Some(colon) = memchr::memchr(b':', &decoded) {
                let host = colon + 3;
                if decoded.len() >= host && &decoded[colon + 1..host] == b"//" {
                    if let Some(p) = memchr::memchr(b'/', &decoded[host..]) {
                        parsed = &decoded[host + p..];
                    }
                }
            }
        }
        let parsed = parsed.to_vec();
        d.set(C::RequestUri, parsed);
        d.set(C::RemoteAddr, req.remote_addr.as_bytes());
        d.set(C::RemoteHost, req.remote_addr.as_bytes());
        d.set(C::RemotePort, req.remote_port.to_string());
        d.set(C::ServerAddr, req.local_addr.as_bytes());
        d.set(C::ServerPort, req.local_port.to_string());
        d.set(C::UniqueId, req.unique_id.as_bytes());
        if let Some(q) = query {
            let q = q.to_vec();
            self.add_urlencoded(&q, false);
        }
        for (name, value) in req.headers {
            self.add_header(name, value);
        }
    }

    fn add_header(&mut self, name: &[u8], value: &[u8]) {
        let kv = self.d.kv(name, value);
        self.d.headers.push(kv);
        if name.eq_ignore_ascii_case(b"cookie") {
            self.add_cookies(value);
        } else if name.eq_ignore_ascii_case(b"content-type") {
            self.content_type = value.to_vec();
            let l = value.to_ascii_lowercase();
            if l.starts_with(b"multipart/form-data") {
                self.body_type = Some(BodyProcessor::Multipart);
                self.d.set(Collection::ReqbodyProcessor, "MULTIPART");
            } else if l.starts_with(b"application/x-www-form-urlencoded") {
                self.body_type = Some(BodyProcessor::UrlEncoded);
                self.d.set(Collection::ReqbodyProcessor, "URLENCODED");
            }
        } else if name.eq_ignore_ascii_case(b"host") {
            let host = if value.first() == Some(&b'[') {
                match memchr::memchr(b']', value) {
                    Some(p) => &value[..=p],
                    None => value,
                }
            } else {
                match memchr::memchr(b':', value) {
                    Some(p) => &value[..p],
                    None => value,
                }
            };
            self.d.set(Collection::ServerName, host);
        } else if name.eq_ignore_ascii_case(b"authorization") {
            let scheme = value.split(|&c| c == b' ').next().unwrap_or(b"");
            self.d.set(Collection::AuthType, scheme);
        }
    }

    /// ModSecurity v3's cookie parsing: `;`-separated, the last pair's
    /// trailing blanks dropped, split at the first `=`, keys left-trimmed,
    /// empty keys skipped.
    fn add_cookies(&mut self, value: &[u8]) {
        let mut pieces: Vec<&[u8]> = value.split(|&c| c == b';').collect();
        // getline drops a final empty piece.
        if pieces.last().is_some_and(|p| p.is_empty()) {
            pieces.pop();
        }
        if let Some(last) = pieces.last_mut() {
            while let Some((&c, rest)) = last.split_last() {
                if c.is_ascii_whitespace() || c == 0x0b {
                    *last = rest;
                } else {
                    break;
                }
            }
        }
        for c in pieces {
            if c.is_empty() {
                continue;
            }
            let (k, v) = match memchr::memchr(b'=', c) {
                Some(p) => (&c[..p], &c[p + 1..]),
                None => (c, &b""[..]),
            };
            let k = {
                let s = k
                    .iter()
                    .position(|&x| !(x.is_ascii_whitespace() || x == 0x0b))
                    .unwrap_or(k.len());
                &k[s..]
            };
            if k.is_empty() {
                continue;
            }
            let kv = self.d.kv(k, v);
            self.d.cookies.push(kv);
        }
    }

    /// Splits `a=1&b=2` into ARGS_GET or ARGS_POST.
    pub(crate) fn add_urlencoded(&mut self, s: &[u8], post: bool) {
        let sep = self.eng.limits.argument_separator;
        let mut pieces: Vec<&[u8]> = s.split(|&c| c == sep).collect();
        if pieces.last().is_some_and(|p| p.is_empty()) {
            pieces.pop();
        }
        let mut invalid = false;
        for p in pieces {
            let (k, v) = match memchr::memchr(b'=', p) {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &b""[..]),
            };
            let k = transform::url_decode_nonstrict(k, &mut invalid);
            let v = transform::url_decode_nonstrict(v, &mut invalid);
            self.add_arg(&k, &v, post);
        }
        if invalid {
            self.d.set(Collection::UrlencodedError, "1");
        }
    }

    pub(crate) fn add_arg(&mut self, k: &[u8], v: &[u8], post: bool) -> bool {
        if self.d.args.len() >= self.eng.limits.max_args {
            return false;
        }
        let kv = self.d.kv(k, v);
        self.d.args.push(Arg { kv, post });
        true
    }
}
