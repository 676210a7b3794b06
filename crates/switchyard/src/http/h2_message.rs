//! HTTP/2 heads to and from the protocol-neutral message, directly:
//! nothing is restated as HTTP/1 text and parsed again. Client requests
//! come from our own decoder (`http2::server`); member requests and
//! responses go through the `http` crate's types, as the h2 crate (which
//! still speaks to h2 members) takes and hands them over.
//!
//! What the HTTP/1 parser refuses for smuggling reasons is refused here
//! too where HTTP/2 can carry it (several Content-Length fields, a bad
//! authority, CONNECT, unsupported expectations, heads over the limits).
//! The decoder has already refused invalid names or values and
//! connection-specific fields, but those are checked again here (RFC 9113
//! 8.2.2): a Transfer-Encoding or Connection reaching an HTTP/1.1 member
//! would be a smuggling vector, so no caller may depend on one check alone.

use bytes::Bytes;

use super::head::{is_token, parse_length, valid_authority, HeadError, Limits};
use super::message::{Fields, Framing, Head, Method, Request, Response};

fn bad(status: u16, reason: &'static str) -> HeadError {
    HeadError { status, reason }
}

/// A client's HTTP/2 or HTTP/3 request head as our own collector hands it
/// over (`http::request_fields::RequestHead`, from HPACK or QPACK, already
/// refused when malformed: unknown or misplaced pseudo-fields, uppercase
/// names, connection fields): the pseudo-fields (shared, not copied: the
/// request keeps them), then the regular fields.
pub fn request_from_wire(
    (method, path, authority): (Bytes, Option<Bytes>, Option<Bytes>),
    fields: &Fields,
    end_stream: bool,
    limits: &Limits,
) -> Result<Request, HeadError> {
    build_request(
        method,
        path,
        authority,
        (fields.iter(), fields.len()),
        end_stream,
        limits,
    )
}

/// An extended CONNECT (RFC 8441 4, RFC 9220 3, `:protocol`) as the request an
/// HTTP/1.1 member understands: a GET of `:path` asking to upgrade to the
/// protocol, with a `Sec-WebSocket-Key` of our own (the client's
/// `sec-websocket-version`, `-protocol` and `-extensions` go as they came).
/// It goes through every stage as any GET does; its stream's DATA is the
/// tunnel, not a body. Only `websocket` is offered (501 for the rest).
pub fn extended_connect_from_wire(
    protocol: &[u8],
    (path, authority): (Option<Bytes>, Option<Bytes>),
    fields: &Fields,
    limits: &Limits,
) -> Result<Request, HeadError> {
    if !protocol.eq_ignore_ascii_case(b"websocket") {
        return Err(bad(
            501,
            "only WebSocket is tunnelled over HTTP/2 and HTTP/3",
        ));
    }
    let mut req = build_request(
        Bytes::from_static(b"GET"),
        path,
        authority,
        (fields.iter(), fields.len()),
        true,
        limits,
    )?;
    if req.head.framing != Framing::None {
        return Err(bad(400, "a body on an extended CONNECT"));
    }
    let h = &mut req.head;
    h.fields.remove(b"sec-websocket-key");
    h.fields.append(b"upgrade", b"websocket");
    h.fields.append(
        b"sec-websocket-key",
        super::upgrade::websocket_key().as_bytes(),
    );
    h.upgrade = true;
    Ok(req)
}

fn build_request<'a>(
    method: Bytes,
    path: Option<Bytes>,
    authority: Option<Bytes>,
    (fields, count): (impl Iterator<Item = (&'a [u8], &'a [u8])>, usize),
    end_stream: bool,
    limits: &Limits,
) -> Result<Request, HeadError> {
    if &method[..] == b"CONNECT" {
        return Err(bad(501, "CONNECT is not supported over HTTP/2 or HTTP/3"));
    }
    // It becomes an HTTP/1.1 request line: a token, nothing else.
    if !is_token(&method) {
        return Err(bad(400, "invalid :method"));
    }
    if count + 1 > limits.max_headers {
        return Err(bad(431, "too many header fields"));
    }
    let target = match path {
        Some(t) if !t.is_empty() => t,
        _ => Bytes::from_static(b"/"),
    };
    if !(target.starts_with(b"/") || &target[..] == b"*")
        || target
            .iter()
            .any(|b| *b <= 0x20 || *b == 0x7f || *b == b'#')
    {
        return Err(bad(400, "invalid character in the request target"));
    }
    let mut c = collect(authority.as_ref(), fields)?;
    if c.size + target.len() > limits.max_header_bytes + limits.max_request_line {
        return Err(bad(431, "request header fields too large"));
    }
    let method_kind = Method::parse(&method);
    let framing = match c.length {
        Some(0) => Framing::None,
        Some(n) => Framing::Length(n),
        None if !end_stream => Framing::Chunked,
        None => {
            // An HTTP/1.1 member must not wait for a body that never comes.
            if matches!(method_kind, Method::Post | Method::Put | Method::Patch) {
                c.fields.append(b"content-length", b"0");
            }
            Framing::None
        }
    };
    let mut head = Head::new(c.fields, framing);
    head.wire_len = (c.size + target.len()) as u32;
    Ok(Request {
        head,
        method: method_kind,
        method_raw: method_bytes(method),
        target,
        received: None,
        host: c.host,
        expect_continue: c.expect_continue,
        te_trailers: c.te_trailers,
    })
}

/// A method's name: the standard ones static, so the request does not
/// keep the received bytes for them.
fn method_bytes(m: Bytes) -> Bytes {
    match &m[..] {
        b"GET" => Bytes::from_static(b"GET"),
        b"HEAD" => Bytes::from_static(b"HEAD"),
        b"POST" => Bytes::from_static(b"POST"),
        b"PUT" => Bytes::from_static(b"PUT"),
        b"DELETE" => Bytes::from_static(b"DELETE"),
        b"OPTIONS" => Bytes::from_static(b"OPTIONS"),
        b"PATCH" => Bytes::from_static(b"PATCH"),
        _ => m,
    }
}

/// What a request's HTTP/2 fields say, checked.
struct Collected {
    fields: Fields,
    host: Option<Bytes>,
    length: Option<u64>,
    expect_continue: bool,
    te_trailers: bool,
    /// The head's size as HTTP/1 would count it.
    size: usize,
}

/// The request's fields in neutral form: `:authority` as Host, split
/// cookies joined (RFC 9113 8.2.3), `te` noted, the framing fields checked.
fn collect<'a>(
    authority: Option<&Bytes>,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Collected, HeadError> {
    let mut c = Collected {
        fields: Fields::default(),
        host: None,
        length: None,
        expect_continue: false,
        te_trailers: false,
        size: 16,
    };
    if let Some(a) = authority {
        if a.is_empty() || !valid_authority(a) {
            return Err(bad(400, "invalid :authority"));
        }
        c.fields.append(b"host", a);
        c.host = Some(a.clone());
    }
    let mut cookie: Option<Vec<u8>> = None;
    for (n, v) in fields {
        c.size += n.len() + v.len() + 4;
        match n {
            b"host" if authority.is_some() => continue,
            b"host" => {
                if c.host.is_some() {
                    return Err(bad(400, "several Host fields"));
                }
                if !valid_authority(v) {
                    return Err(bad(400, "invalid Host"));
                }
                c.host = Some(Bytes::copy_from_slice(v));
            }
            // RFC 9113 8.2.2 (h2 refuses these first; refused here too so
            // the conversion never depends on it).
            b"connection" | b"transfer-encoding" | b"upgrade" | b"keep-alive"
            | b"proxy-connection" => {
                return Err(bad(400, "connection-specific field in an HTTP/2 request"));
            }
            b"te" if v != b"trailers" => {
                return Err(bad(400, "TE other than trailers in an HTTP/2 request"));
            }
            // It means nothing to an HTTP/1.1 member and is restated for an
            // h2 one.
            b"te" => {
                c.te_trailers = true;
                continue;
            }
            b"cookie" => {
                let j = cookie.get_or_insert_with(Vec::new);
                if !j.is_empty() {
                    j.extend_from_slice(b"; ");
                }
                j.extend_from_slice(v);
                continue;
            }
            b"content-length" => {
                if c.length.is_some() {
                    return Err(bad(400, "several Content-Length fields"));
                }
                c.length = Some(parse_length(v).ok_or(bad(400, "invalid Content-Length"))?);
            }
            b"expect" => {
                if !v.eq_ignore_ascii_case(b"100-continue") {
                    return Err(bad(417, "unsupported expectation"));
                }
                c.expect_continue = true;
            }
            _ => {}
        }
        c.fields.append(n, v);
    }
    if let Some(j) = cookie {
        c.fields.append(b"cookie", &j);
    }
    Ok(c)
}

/// A member's HTTP/2 response head. `end_stream`: no body follows.
pub fn response_from_h2(
    parts: &http::response::Parts,
    end_stream: bool,
    request_method: Method,
) -> Result<Response, HeadError> {
    let status = parts.status.as_u16();
    let mut fields = Fields::default();
    let mut length: Option<u64> = None;
    let mut size = 16;
    for (name, value) in &parts.headers {
        let (n, v) = (name.as_str().as_bytes(), value.as_bytes());
        size += n.len() + v.len() + 4;
        if n == b"content-length" {
            if length.is_some() {
                return Err(bad(502, "several Content-Length fields"));
            }
            length = Some(parse_length(v).ok_or(bad(502, "invalid Content-Length"))?);
        }
        fields.append(n, v);
    }
    let no_body = request_method == Method::Head
        || (100..200).contains(&status)
        || status == 204
        || status == 304;
    let framing = if no_body {
        Framing::None
    } else {
        match length {
            Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
            None if end_stream => {
                // Said plainly, so an HTTP/1.1 client does not wait for a close.
                fields.append(b"content-length", b"0");
                Framing::None
            }
            // Delimited by the end of the stream.
            None => Framing::Close,
        }
    };
    let mut head = Head::new(fields, framing);
    head.wire_len = size as u32;
    Ok(Response {
        head,
        status,
        reason: Bytes::from_static(super::responses::reason(status).as_bytes()),
    })
}

/// The request for an h2 member. The member's address stands in for the
/// authority when the request has no Host (HTTP/1.0). None when a field
/// cannot be carried.
pub fn request_to_h2(req: &Request, member: std::net::SocketAddr) -> Option<http::Request<()>> {
    if req.method == Method::Connect {
        return None;
    }
    let fallback;
    let host = match req.host() {
        Some(h) => std::str::from_utf8(h).ok()?,
        None => {
            fallback = member.to_string();
            &fallback
        }
    };
    let target = std::str::from_utf8(req.member_target()).ok()?;
    let uri = format!("http://{host}{target}");
    let mut r = http::Request::builder()
        .method(http::Method::from_bytes(req.method_str()).ok()?)
        .uri(uri)
        .body(())
        .ok()?;
    let mut h = h2_fields(&req.head)?;
    h.remove(http::header::HOST);
    if req.te_trailers {
        h.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    }
    *r.headers_mut() = h;
    Some(r)
}

/// A WebSocket handshake (an HTTP/1.1 client's, or what an extended
/// CONNECT became) restated for an h2 member: an extended CONNECT with
/// `:protocol websocket` (RFC 8441 4), the handshake's version, protocols
/// and extensions as they are, without its key (RFC 8441 5: the member
/// answers 200, and the proxy the key). None as for `request_to_h2`.
pub fn websocket_to_h2(req: &Request, member: std::net::SocketAddr) -> Option<http::Request<()>> {
    let mut r = request_to_h2(req, member)?;
    *r.method_mut() = http::Method::CONNECT;
    r.headers_mut().remove("sec-websocket-key");
    r.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    Some(r)
}

/// The response for an HTTP/2 client. None when a field cannot be carried.
pub fn response_to_h2(resp: &Response) -> Option<http::Response<()>> {
    let mut r = http::Response::builder()
        .status(resp.status)
        .body(())
        .ok()?;
    *r.headers_mut() = h2_fields(&resp.head)?;
    Some(r)
}

/// A head's fields as an HTTP/2 header map, minus connection-specific
/// ones. Values are shared with the received head, not copied.
fn h2_fields(head: &Head) -> Option<http::HeaderMap> {
    let mut h = http::HeaderMap::with_capacity(head.fields.len());
    for (name, value) in head.fields.iter_shared() {
        if head.is_connection_field(name) {
            continue;
        }
        h.append(
            http::HeaderName::from_bytes(name).ok()?,
            http::HeaderValue::from_maybe_shared(value).ok()?,
        );
    }
    Some(h)
}

/// Trailer fields for HTTP/2 (those it can carry).
pub fn trailers_to_h2(t: &Fields) -> http::HeaderMap {
    let mut m = http::HeaderMap::new();
    for (n, v) in t.iter() {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n),
            http::HeaderValue::from_bytes(v),
        ) {
            m.append(n, v);
        }
    }
    m
}

/// HTTP/2 trailers as fields.
pub fn trailers_from_h2(m: &http::HeaderMap) -> Fields {
    let mut f = Fields::default();
    for (n, v) in m {
        f.append(n.as_str().as_bytes(), v.as_bytes());
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_request_line: 8192,
            max_header_bytes: 32768,
            max_headers: 100,
        }
    }

    /// A head as the decoder hands it over: method, path, authority, then
    /// the regular fields.
    fn wire(
        method: &'static str,
        path: &'static str,
        authority: Option<&'static str>,
        fields: &[(&str, &str)],
        end_stream: bool,
    ) -> Result<Request, HeadError> {
        let mut f = Fields::default();
        for (n, v) in fields {
            f.append(n.as_bytes(), v.as_bytes());
        }
        request_from_wire(
            (
                Bytes::from_static(method.as_bytes()),
                Some(Bytes::from_static(path.as_bytes())),
                authority.map(|a| Bytes::from_static(a.as_bytes())),
            ),
            &f,
            end_stream,
            &limits(),
        )
    }

    #[test]
    fn request_joins_cookies_and_frames_the_body() {
        let fields = [("cookie", "a=1"), ("cookie", "b=2"), ("te", "trailers")];
        let head = |end| wire("POST", "/a?b=1", Some("example.com"), &fields, end);
        let r = head(false).unwrap();
        assert_eq!(r.target(), b"/a?b=1");
        assert_eq!(r.host(), Some(&b"example.com"[..]));
        assert_eq!(r.head.get("cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(r.head.get("te"), None);
        assert!(r.te_trailers);
        assert_eq!(r.head.framing, Framing::Chunked);
        let r = head(true).unwrap();
        assert_eq!(r.head.framing, Framing::None);
        assert_eq!(r.head.get("content-length"), Some(&b"0"[..]));
        let back = request_to_h2(&r, "127.0.0.1:1".parse().unwrap()).unwrap();
        assert_eq!(back.uri(), "http://example.com/a?b=1");
        assert_eq!(back.headers().get("te").unwrap(), "trailers");
        assert!(back.headers().get("host").is_none());
    }

    #[test]
    fn request_refusals() {
        let status = |method, path, fields: &[(&str, &str)], end| {
            wire(method, path, Some("a"), fields, end)
                .err()
                .map(|e| e.status)
        };
        let cl2 = [("content-length", "1"), ("content-length", "1")];
        assert_eq!(status("POST", "/", &cl2, false), Some(400));
        assert_eq!(status("GET", "/", &[("expect", "fancy")], true), Some(417));
        // The decoder refuses these before us; refused again all the same.
        for f in [
            ("transfer-encoding", "chunked"),
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "websocket"),
            ("proxy-connection", "close"),
            ("te", "gzip"),
        ] {
            assert_eq!(status("GET", "/", &[f], true), Some(400), "{f:?}");
        }
        assert_eq!(status("CONNECT", "/", &[], true), Some(501));
        assert_eq!(status("G T", "/", &[], true), Some(400));
        assert_eq!(status("GET", "/a b", &[], true), Some(400));
        assert_eq!(status("GET", "a", &[], true), Some(400));
        assert_eq!(
            wire("GET", "/", Some("a b"), &[], true)
                .err()
                .map(|e| e.status),
            Some(400)
        );
    }

    #[test]
    fn websocket_over_h2_becomes_an_upgrade() {
        let mut f = Fields::default();
        for (n, v) in [
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", "chat"),
            ("sec-websocket-key", "from-the-client"),
        ] {
            f.append(n.as_bytes(), v.as_bytes());
        }
        let target = || {
            (
                Some(Bytes::from_static(b"/chat?a=1")),
                Some(Bytes::from_static(b"ws.test")),
            )
        };
        let r = extended_connect_from_wire(b"websocket", target(), &f, &limits()).unwrap();
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target(), b"/chat?a=1");
        assert_eq!(r.host(), Some(&b"ws.test"[..]));
        assert!(r.head.upgrade);
        assert_eq!(r.head.framing, Framing::None);
        assert_eq!(r.head.get("upgrade"), Some(&b"websocket"[..]));
        assert_eq!(r.head.get("sec-websocket-protocol"), Some(&b"chat"[..]));
        let keys: Vec<&[u8]> = r.head.all("sec-websocket-key").collect();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].len(), 24, "16 bytes in base64");
        assert_ne!(keys[0], b"from-the-client");
        let err = |p: &[u8], f: &Fields| {
            extended_connect_from_wire(p, target(), f, &limits())
                .err()
                .map(|e| e.status)
        };
        assert_eq!(err(b"connect-udp", &f), Some(501));
        let mut body = Fields::default();
        body.append(b"content-length", b"5");
        assert_eq!(err(b"websocket", &body), Some(400));
    }

    #[test]
    fn response_framing_and_back() {
        let resp = http::Response::builder()
            .status(200)
            .header("x-a", "1")
            .body(())
            .unwrap();
        let (parts, _) = resp.into_parts();
        let r = response_from_h2(&parts, false, Method::Get).unwrap();
        assert_eq!(r.head.framing, Framing::Close);
        let r = response_from_h2(&parts, true, Method::Get).unwrap();
        assert_eq!(r.head.get("content-length"), Some(&b"0"[..]));
        let back = response_to_h2(&r).unwrap();
        assert_eq!(back.status(), 200);
        assert_eq!(back.headers().get("x-a").unwrap(), "1");
    }
}
