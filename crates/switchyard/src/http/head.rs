//! HTTP/1.x message heads: finding the end of a head under size limits,
//! parsing it strictly, and deriving the message framing.
//!
//! Strictness is the defence against request smuggling: anything two parsers
//! could read differently (TE with CL, several CL, bare CR/LF, NUL,
//! obs-fold, whitespace before the colon, bad tokens) is refused here, so an
//! ambiguous message is never forwarded.

use bytes::Bytes;

/// Why a head was refused; `status` is what a client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadError {
    pub status: u16,
    pub reason: &'static str,
}

const fn bad(reason: &'static str) -> HeadError {
    HeadError {
        status: 400,
        reason,
    }
}

pub const MAX_HEADERS_CAP: usize = 256;

/// The size limits a request head must keep (`[limits]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
}

/// Incremental scan for the end of a head. Keeps its position between calls
/// so a slow client costs O(n) in total, not O(n^2).
#[derive(Default)]
pub struct HeadScanner {
    pos: usize,
    first_line_end: Option<usize>,
    /// Leading empty lines (tolerated before a request line, RFC 9112 2.2).
    skip: usize,
}

impl HeadScanner {
    /// Returns `Ok(Some((start, end)))` when `buf[start..end]` is a complete
    /// head ending with CRLF CRLF; `Ok(None)` when more bytes are needed.
    pub fn scan(
        &mut self,
        buf: &[u8],
        max_line: usize,
        max_head: usize,
    ) -> Result<Option<(usize, usize)>, HeadError> {
        // Skip empty lines before the start line.
        if self.first_line_end.is_none() && self.pos == self.skip {
            while buf.len() >= self.skip + 2 && &buf[self.skip..self.skip + 2] == b"\r\n" {
                self.skip += 2;
                if self.skip > 8 {
                    return Err(bad("too many empty lines before the request line"));
                }
            }
            self.pos = self.skip;
        }
        let mut i = self.pos;
        while i < buf.len() {
            // Only CR, LF and NUL matter: jump to the next one (SIMD).
            match memchr::memchr3(b'\r', b'\n', 0, &buf[i..]) {
                Some(k) => i += k,
                None => {
                    i = buf.len();
                    break;
                }
            }
            match buf[i] {
                0 => return Err(bad("NUL byte in the message head")),
                b'\r' => {
                    if i + 1 >= buf.len() {
                        break; // need the next byte to judge this CR
                    }
                    if buf[i + 1] != b'\n' {
                        return Err(bad("bare CR in the message head"));
                    }
                    if self.first_line_end.is_none() {
                        if i - self.skip > max_line {
                            return Err(HeadError {
                                status: 414,
                                reason: "request line too long",
                            });
                        }
                        self.first_line_end = Some(i);
                    }
                    // End of head: CRLF CRLF.
                    if i >= self.skip + 2 && &buf[i - 2..i] == b"\r\n" {
                        let end = i + 2;
                        if end - self.skip > max_head {
                            return Err(HeadError {
                                status: 431,
                                reason: "header block too large",
                            });
                        }
                        self.pos = end;
                        return Ok(Some((self.skip, end)));
                    }
                    i += 2;
                    continue;
                }
                b'\n' => return Err(bad("bare LF in the message head")),
                _ => {}
            }
            i += 1;
        }
        self.pos = i;
        let head_len = i - self.skip;
        if self.first_line_end.is_none() && head_len > max_line {
            return Err(HeadError {
                status: 414,
                reason: "request line too long",
            });
        }
        if head_len > max_head {
            return Err(HeadError {
                status: 431,
                reason: "header block too large",
            });
        }
        Ok(None)
    }
}

pub use super::message::{is_hop_by_hop, Fields, Framing, Head, Method, Request, Response};

/// Where `part` lies inside `base`. httparse may hand back a static empty
/// string (a status line without a reason phrase): anything not inside
/// `base` is the empty range.
fn range_of(base: &[u8], part: &[u8]) -> (u32, u32) {
    let start = (part.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
    if part.is_empty() || start > base.len() || start + part.len() > base.len() {
        return (0, 0);
    }
    (start as u32, (start + part.len()) as u32)
}

/// `raw[start..end]` as a shared slice (no copy).
fn sub(raw: &Bytes, (a, b): (u32, u32)) -> Bytes {
    raw.slice(a as usize..b as usize)
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// A lowercase token (RFC 9110 5.1; RFC 9113 8.2.1 and RFC 9114 4.2
/// refuse uppercase in field names). By table, without a branch per
/// byte: comparisons per byte cost HTTP/3 about 1,000 instructions per
/// request over its request and response field names (callgrind, 1 KB,
/// 20 x 10 streams).
pub fn is_lower_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().fold(true, |ok, &b| ok & (TCHAR[b as usize] == 1))
}

/// Any token, upper case allowed.
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().fold(true, |ok, &b| ok & (TCHAR[b as usize] != 0))
}

/// A field value with no control character but HTAB (RFC 9110 5.5),
/// scanned without a short cut so that it vectorises.
pub fn is_field_value(v: &[u8]) -> bool {
    v.iter().fold(true, |ok, &b| {
        ok & ((b >= 0x20 && b != 0x7f) | (b == b'\t'))
    })
}

/// RFC 9110 5.6.2 token characters, per byte: 0 not a token character,
/// 1 a token character that is not an upper-case letter, 2 an upper-case
/// letter.
static TCHAR: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c.is_ascii_uppercase() {
            2
        } else if c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            )
        {
            1
        } else {
            0
        };
        b += 1;
    }
    t
};

fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',').map(trim).filter(|t| !t.is_empty())
}

/// Parses a Content-Length value strictly: digits only, no list.
pub(crate) fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

struct Common {
    fields: Fields,
    host: Option<(u32, u32)>,
    host_count: u32,
    expect: Option<(u32, u32)>,
    content_length: Option<u64>,
    /// The last transfer coding is chunked.
    te_chunked: bool,
    /// Chunked is last and appears once: the framing is unambiguous.
    te_valid: bool,
    /// Codings other than chunked are applied too.
    te_other_codings: bool,
    /// How many times "chunked" is listed.
    te_chunked_count: u32,
    te_present: bool,
    close: bool,
    keep_alive_token: bool,
    upgrade_token: bool,
    has_upgrade_field: bool,
    connection_tokens: Vec<String>,
}

fn common(raw: &Bytes, parsed: &[httparse::Header]) -> Result<Common, HeadError> {
    let mut c = Common {
        fields: Fields::over(raw.clone(), parsed.len() + 4),
        host: None,
        host_count: 0,
        expect: None,
        content_length: None,
        te_chunked: false,
        te_valid: false,
        te_other_codings: false,
        te_chunked_count: 0,
        te_present: false,
        close: false,
        keep_alive_token: false,
        upgrade_token: false,
        has_upgrade_field: false,
        connection_tokens: Vec::new(),
    };
    let mut te_codings = 0;
    let mut te_chunked_count = 0;
    for h in parsed {
        let name = h.name.as_bytes();
        let value = h.value;
        // No control character can be in `value`: httparse's value scan
        // (its default config, no obsolete line folding) stops at any byte
        // but HTAB, SP-~ and obs-text, and refuses the head when that byte
        // does not end the line (`control_characters_in_values_are_refused`
        // holds it). A second scan here cost about 680 instructions per
        // proxied request (callgrind, keep-alive 128 B: 20,525 to 19,842).
        // Dispatch on the length first: most fields are none of these.
        match name.len() {
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                if c.content_length.is_some() {
                    return Err(bad("several Content-Length fields"));
                }
                c.content_length = Some(parse_length(value).ok_or(bad("invalid Content-Length"))?);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                c.te_present = true;
                for t in tokens(value) {
                    te_codings += 1;
                    c.te_chunked = t.eq_ignore_ascii_case(b"chunked");
                    te_chunked_count += c.te_chunked as u32;
                }
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for t in tokens(value) {
                    if t.eq_ignore_ascii_case(b"close") {
                        c.close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        // Hop-by-hop already: no need to remember it.
                        c.keep_alive_token = true;
                        continue;
                    } else if t.eq_ignore_ascii_case(b"upgrade") {
                        c.upgrade_token = true;
                        continue;
                    }
                    c.connection_tokens
                        .push(String::from_utf8_lossy(t).to_ascii_lowercase());
                }
            }
            7 if name.eq_ignore_ascii_case(b"upgrade") => c.has_upgrade_field = true,
            4 if name.eq_ignore_ascii_case(b"host") => {
                c.host_count += 1;
                c.host = Some(range_of(raw, value));
            }
            // The last one decides; any but 100-continue is refused.
            6 if name.eq_ignore_ascii_case(b"expect")
                && c.expect.is_none_or(|(a, b)| {
                    raw[a as usize..b as usize].eq_ignore_ascii_case(b"100-continue")
                }) =>
            {
                c.expect = Some(range_of(raw, value));
            }
            _ => {}
        }
        c.fields
            .push_span(range_of(raw, name), range_of(raw, value));
    }
    c.te_valid = c.te_chunked && te_chunked_count == 1;
    c.te_chunked_count = te_chunked_count;
    c.te_other_codings = te_codings > 1;
    Ok(c)
}

/// True when the start line is three tokens ending in "HTTP/d.d": only then
/// is an unsupported version a 505 rather than a malformed line.
fn well_formed_version(raw: &[u8]) -> bool {
    let line = raw.split(|b| *b == b'\r').next().unwrap_or(b"");
    let parts: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
    parts.len() == 3
        && parts[2].len() == 8
        && parts[2].starts_with(b"HTTP/")
        && parts[2][5].is_ascii_digit()
        && parts[2][6] == b'.'
        && parts[2][7].is_ascii_digit()
}

/// Header slots for one parse, on the stack: no allocation per message.
type HeaderSlots<'h> = [std::mem::MaybeUninit<httparse::Header<'h>>; MAX_HEADERS_CAP];

fn header_slots<'h>() -> HeaderSlots<'h> {
    [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS_CAP]
}

fn map_parse_error(e: httparse::Error) -> HeadError {
    match e {
        httparse::Error::TooManyHeaders => HeadError {
            status: 431,
            reason: "too many header fields",
        },
        httparse::Error::HeaderName => {
            bad("invalid header field name (or whitespace before the colon)")
        }
        httparse::Error::HeaderValue => bad("invalid header field value"),
        httparse::Error::NewLine => bad("invalid line ending"),
        httparse::Error::Version => HeadError {
            status: 505,
            reason: "unsupported HTTP version",
        },
        httparse::Error::Token => bad("invalid method or token"),
        httparse::Error::Status => bad("invalid status"),
    }
}

/// Parses a complete request head (as found by `HeadScanner`).
pub fn parse_request(raw: Bytes, max_headers: usize) -> Result<Request, HeadError> {
    let mut slots = header_slots();
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(&raw, &mut slots[..max_headers.clamp(1, MAX_HEADERS_CAP)]) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("incomplete request head")),
        Err(httparse::Error::Version) if !well_formed_version(&raw) => {
            return Err(bad("invalid request line"))
        }
        Err(e) => return Err(map_parse_error(e)),
    }
    let minor = req.version.unwrap_or(1);
    let method_s = req.method.unwrap_or("");
    let method = Method::parse(method_s.as_bytes());
    let method_raw = sub(&raw, range_of(&raw, method_s.as_bytes()));
    let target = req.path.unwrap_or("").as_bytes();
    let c = common(&raw, req.headers)?;

    if c.host_count > 1 {
        return Err(bad("several Host fields"));
    }
    let mut host = c.host;
    if let Some((a, b)) = host {
        if !valid_authority(&raw[a as usize..b as usize]) {
            return Err(bad("invalid Host"));
        }
    }
    let path = request_target(&raw, target, method, &mut host)?;
    if minor == 1 && host.is_none() {
        return Err(bad("HTTP/1.1 request without Host"));
    }

    let framing = request_framing(&c, minor)?;

    let expect_continue = match c.expect {
        None => false,
        Some((a, b)) if raw[a as usize..b as usize].eq_ignore_ascii_case(b"100-continue") => true,
        Some(_) => {
            return Err(HeadError {
                status: 417,
                reason: "unsupported expectation",
            })
        }
    };
    let keep_alive = if minor == 1 {
        !c.close
    } else {
        c.keep_alive_token && !c.close
    };
    let mut fields = c.fields;
    // Only protocols a member may be offered count (no h2c).
    let upgrade =
        c.has_upgrade_field && super::upgrade::offer(&mut fields) && minor == 1 && c.upgrade_token;
    let wire_len = raw.len() as u32;
    let host = host.map(|r| sub(&raw, r));
    Ok(Request {
        head: Head {
            fields,
            minor,
            framing,
            keep_alive,
            upgrade,
            connection_tokens: c.connection_tokens,
            wire_len,
        },
        method,
        method_raw,
        target: path,
        received: None,
        host,
        expect_continue,
        te_trailers: false,
    })
}

/// The origin-form target of a request (an absolute-form one's authority
/// goes to `host`).
fn request_target(
    raw: &Bytes,
    target: &[u8],
    method: Method,
    host: &mut Option<(u32, u32)>,
) -> Result<Bytes, HeadError> {
    if target
        .iter()
        .any(|b| *b <= 0x20 || *b == 0x7f || *b == b'#')
    {
        return Err(bad("invalid character in the request target"));
    }
    if target.first() == Some(&b'/') || (target == b"*" && method == Method::Options) {
        return Ok(sub(raw, range_of(raw, target)));
    }
    if let Some((auth, path)) = split_absolute(target) {
        if !valid_authority(auth) || auth.is_empty() {
            return Err(bad("invalid authority in the request target"));
        }
        // RFC 9112 3.2.2: the target's authority wins over Host.
        *host = Some(range_of(raw, auth));
        return Ok(if path.is_empty() {
            Bytes::from_static(b"/")
        } else {
            sub(raw, range_of(raw, path))
        });
    }
    if method == Method::Connect {
        return Err(HeadError {
            status: 501,
            reason: "CONNECT is not supported",
        });
    }
    Err(bad("invalid request target"))
}

/// How a request's body is delimited, refusing every ambiguous shape.
fn request_framing(c: &Common, minor: u8) -> Result<Framing, HeadError> {
    if !c.te_present {
        return Ok(match c.content_length {
            Some(0) | None => Framing::None,
            Some(n) => Framing::Length(n),
        });
    }
    if minor == 0 {
        return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
    }
    if c.content_length.is_some() {
        return Err(bad("both Transfer-Encoding and Content-Length"));
    }
    if !c.te_valid {
        // RFC 9112 6.3: chunked must be the final coding, applied once.
        return Err(bad("invalid Transfer-Encoding"));
    }
    if c.te_other_codings {
        return Err(HeadError {
            status: 501,
            reason: "unsupported transfer coding",
        });
    }
    Ok(Framing::Chunked)
}

fn split_absolute(t: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = if t.len() > 7 && t[..7].eq_ignore_ascii_case(b"http://") {
        &t[7..]
    } else if t.len() > 8 && t[..8].eq_ignore_ascii_case(b"https://") {
        &t[8..]
    } else {
        return None;
    };
    let end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b'?'))
        .unwrap_or(rest.len());
    Some((&rest[..end], &rest[end..]))
}

pub(crate) fn valid_authority(a: &[u8]) -> bool {
    a.iter()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(b))
        && !a.contains(&b'@')
}

/// Parses a complete response head. `request_method` decides whether a body follows.
pub fn parse_response(
    raw: Bytes,
    max_headers: usize,
    request_method: Method,
) -> Result<Response, HeadError> {
    // Uninitialised slots, as for requests: filling 256 empty headers
    // costs more than parsing a typical head.
    let mut slots = header_slots();
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        &raw,
        &mut slots[..max_headers.clamp(1, MAX_HEADERS_CAP)],
    );
    match parsed {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("incomplete response head")),
        Err(e) => return Err(map_parse_error(e)),
    }
    let minor = resp.version.unwrap_or(1);
    let status = resp.code.unwrap_or(0);
    if !(100..=599).contains(&status) {
        return Err(bad("status code out of range"));
    }
    let reason = sub(&raw, range_of(&raw, resp.reason.unwrap_or("").as_bytes()));
    let c = common(&raw, resp.headers)?;
    let no_body = request_method == Method::Head
        || (100..200).contains(&status)
        || status == 204
        || status == 304;
    let framing = if c.te_present {
        if c.content_length.is_some() {
            return Err(bad("both Transfer-Encoding and Content-Length"));
        }
        let chunked_anywhere = c.te_valid || c.te_chunked_count > 0;
        if !chunked_anywhere && minor == 1 {
            // No chunked coding at all: the body runs until the member
            // closes (RFC 9112 6.3, rule 4); the connection is not reused.
            if no_body {
                Framing::None
            } else {
                Framing::Close
            }
        } else if !c.te_valid || c.te_other_codings || minor == 0 {
            return Err(bad("unsupported Transfer-Encoding"));
        } else if no_body {
            Framing::None
        } else {
            Framing::Chunked
        }
    } else if no_body {
        Framing::None
    } else {
        match c.content_length {
            Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    let keep_alive = framing != Framing::Close
        && if minor == 1 {
            !c.close
        } else {
            c.keep_alive_token && !c.close
        };
    let wire_len = raw.len() as u32;
    Ok(Response {
        head: Head {
            fields: c.fields,
            minor,
            framing,
            keep_alive,
            upgrade: status == 101,
            connection_tokens: c.connection_tokens,
            wire_len,
        },
        status,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(input: &[u8]) -> Result<Option<(usize, usize)>, HeadError> {
        HeadScanner::default().scan(input, 8192, 32768)
    }

    fn req(input: &str) -> Result<Request, HeadError> {
        let raw = input.as_bytes();
        let (s, e) = scan_all(raw)?.expect("complete");
        parse_request(Bytes::copy_from_slice(&raw[s..e]), 100)
    }

    #[test]
    fn simple_get() {
        let r = req("GET /a?b=1 HTTP/1.1\r\nHost: x.example:8080\r\n\r\n").unwrap();
        assert_eq!(r.path_only(), b"/a");
        assert_eq!(r.query(), Some(&b"b=1"[..]));
        assert_eq!(r.host_name(), Some(&b"x.example"[..]));
        assert_eq!(r.head.framing, Framing::None);
        assert!(r.head.keep_alive);
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        let cases = [
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX\x01Y: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ];
        for c in cases {
            let r = req(c);
            assert!(r.is_err(), "accepted: {c:?}");
        }
        assert!(scan_all(b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n").is_err());
        assert!(scan_all(b"GET / HTTP/1.1\nHost: a\r\n\r\n").is_err());
        assert!(scan_all(b"GET / HTTP/1.1\r\nHost: a\0\r\n\r\n").is_err());
    }

    #[test]
    fn token_characters_are_rfc_9110s() {
        let listed = b"!#$%&'*+-.^_`|~";
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || listed.contains(&b);
            assert_eq!(is_token(&[b]), tchar, "byte {b:#04x}");
            assert_eq!(is_token(&[b, b'a']), tchar, "byte {b:#04x}");
            assert_eq!(
                is_lower_token(&[b'a', b]),
                tchar && !b.is_ascii_uppercase(),
                "byte {b:#04x}"
            );
        }
        assert!(!is_token(b"") && !is_lower_token(b""));
        assert!(is_lower_token(b"x-forwarded-for") && !is_lower_token(b"X-Forwarded-For"));
    }

    #[test]
    fn control_characters_in_values_are_refused() {
        for b in (0u8..0x20).filter(|b| *b != b'\t').chain([0x7f]) {
            let mut r = b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b".to_vec();
            r.extend_from_slice(&[b, b'c']);
            r.extend_from_slice(b"\r\n\r\n");
            let parsed = parse_request(Bytes::from(r), 100);
            // A bare LF ends the line; "c" then is no field.
            assert!(parsed.is_err(), "request with byte {b:#04x} in a value");
            let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: b".to_vec();
            r.extend_from_slice(&[b, b'c']);
            r.extend_from_slice(b"\r\n\r\n");
            let parsed = parse_response(Bytes::from(r), 100, Method::Get);
            assert!(parsed.is_err(), "response with byte {b:#04x} in a value");
        }
        // Tab and obs-text stay.
        let r = req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\tc\u{e9}\r\n\r\n").unwrap();
        assert_eq!(r.head.get("x-a"), Some(&b"b\tc\xc3\xa9"[..]));
    }

    #[test]
    fn limits() {
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(9000));
        assert_eq!(scan_all(long.as_bytes()).unwrap_err().status, 414);
        let big = format!("GET / HTTP/1.1\r\n{}", "X-A: b\r\n".repeat(5000));
        assert_eq!(scan_all(big.as_bytes()).unwrap_err().status, 431);
    }

    #[test]
    fn absolute_form_sets_host() {
        let r = req("GET http://example.com/x HTTP/1.1\r\nHost: other\r\n\r\n").unwrap();
        assert_eq!(r.host(), Some(&b"example.com"[..]));
        assert_eq!(r.target(), b"/x");
    }

    #[test]
    fn status_line_without_reason_phrase() {
        // Found by the response_head fuzzer: httparse's empty reason is not
        // inside the buffer.
        let raw = Bytes::from_static(b"HTTP/1.0 310\r\n\r\n");
        let r = parse_response(raw, 100, Method::Get).unwrap();
        assert_eq!(r.status, 310);
        assert!(r.reason.is_empty());
    }

    #[test]
    fn response_framing() {
        let raw = Bytes::from_static(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(
            parse_response(raw, 100, Method::Get).unwrap().head.framing,
            Framing::Length(3)
        );
        let raw = Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n");
        let r = parse_response(raw, 100, Method::Get).unwrap();
        assert_eq!(r.head.framing, Framing::Close);
        assert!(!r.head.keep_alive);
        let raw = Bytes::from_static(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(
            parse_response(raw, 100, Method::Head).unwrap().head.framing,
            Framing::None
        );
        let raw = Bytes::from_static(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert!(parse_response(raw, 100, Method::Get).is_err());
        // No chunked: delimited by close (RFC 9112 6.3 rule 4).
        let raw = Bytes::from_static(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: foo\r\n\r\n");
        let r = parse_response(raw, 100, Method::Get).unwrap();
        assert_eq!(r.head.framing, Framing::Close);
        assert!(!r.head.keep_alive);
        for bad in [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, foo\r\n\r\n"[..],
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: foo\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: foo\r\nContent-Length: 3\r\n\r\n",
        ] {
            assert!(parse_response(Bytes::from_static(bad), 100, Method::Get).is_err());
        }
    }
}
