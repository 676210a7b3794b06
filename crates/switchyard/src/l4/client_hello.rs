//! The server name (SNI) and ALPN list of a TLS ClientHello, read without
//! terminating TLS, so that a passthrough virtual server can choose a pool
//! by name and then relay the client's bytes untouched.
//!
//! Pure and incremental like the PROXY protocol parser: [`parse`] is given
//! every byte read so far and answers [`Parsed::Incomplete`] while they are
//! a valid prefix of a ClientHello. A ClientHello may be fragmented over
//! several TLS records (RFC 8446 5.1 allows any split of a handshake
//! message, down to one byte per record) and those records over several
//! reads; the handshake message is reassembled from the records' payloads
//! before it is read. The input comes from anyone who can connect: every
//! read is bounds-checked, sizes are capped so that the caller's buffer
//! stays bounded, and nothing here panics.

use std::borrow::Cow;
use std::fmt;

/// Cap on the ClientHello message body. Real ones are a few hundred bytes
/// to a few KiB (post-quantum key shares add about 1.2 KiB each); 16 KiB is
/// also the most one record can carry.
pub const MAX_HELLO_LEN: usize = 16 * 1024;

/// Cap on the record bytes (headers included) a ClientHello may take.
/// Room for a full [`MAX_HELLO_LEN`] message in two records, or a few KiB
/// fragmented into tiny records. While [`parse`] answers `Incomplete`, the
/// buffer is shorter than this: the caller never needs a larger one.
pub const MAX_BUFFERED: usize = MAX_HELLO_LEN + 4 * 1024;

/// TLS record header: content type, version, 16-bit length.
const RECORD_HEADER_LEN: usize = 5;
/// The largest plaintext record payload (RFC 8446 5.1: 2^14).
const MAX_RECORD_LEN: usize = 16 * 1024;
const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// Handshake message header: type and 24-bit length.
const HANDSHAKE_HEADER_LEN: usize = 4;
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const NAME_TYPE_HOST_NAME: u8 = 0;
/// RFC 1035's limit on a domain name's text form.
const MAX_NAME_LEN: usize = 255;

/// What a ClientHello says that routing needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// The host_name of the server_name extension, lower-cased and without
    /// a trailing dot; `None` when the client sent none (connections to an
    /// IP address, old clients).
    pub server_name: Option<String>,
    /// The ALPN protocols offered, in the client's order (empty when the
    /// extension is absent).
    pub alpn: Vec<Vec<u8>>,
}

/// What [`parse`] made of the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A valid prefix of a ClientHello: read more and call again.
    Incomplete,
    /// The whole ClientHello was read. The bytes themselves are left for
    /// the caller to relay (including any that follow it).
    Done(ClientHello),
}

/// Why the bytes are not a usable ClientHello: the connection is to be
/// closed. Offsets are in the caller's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloError {
    /// A record that is not a handshake record before the ClientHello
    /// ended (the first one: not TLS at all, or an alert).
    NotHandshake { offset: usize, content_type: u8 },
    /// An SSL 2.0 style hello (first byte with the high bit set), which
    /// has no extensions and which no supported TLS version accepts.
    SslV2,
    /// A record version other than 3.0 to 3.4 (SSL 3.0 to TLS 1.3).
    RecordVersion { offset: usize, version: u16 },
    /// A record of length 0 (forbidden for handshake records) or over 2^14.
    RecordLength { offset: usize, len: usize },
    /// The first handshake message is not a ClientHello.
    NotClientHello { msg_type: u8 },
    /// The message or its records exceed [`MAX_HELLO_LEN`] or
    /// [`MAX_BUFFERED`].
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    /// A field of the ClientHello is truncated, overruns its container,
    /// or breaks a rule of RFC 8446 4.1.2 / RFC 7301; names the field.
    Malformed(&'static str),
    /// The server_name extension carries something other than one valid
    /// DNS host name; says what.
    ServerName(&'static str),
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HelloError::NotHandshake {
                offset,
                content_type,
            } => write!(
                f,
                "TLS record at byte {offset} has content type {content_type}, not handshake (22), \
                 before the ClientHello ended"
            ),
            HelloError::SslV2 => f.write_str("SSL 2.0 style ClientHello (not supported)"),
            HelloError::RecordVersion { offset, version } => write!(
                f,
                "TLS record at byte {offset} has version {version:#06x}, not 0x0300 to 0x0304"
            ),
            HelloError::RecordLength { offset, len } => write!(
                f,
                "TLS record at byte {offset} has length {len}, not 1 to {MAX_RECORD_LEN}"
            ),
            HelloError::NotClientHello { msg_type } => write!(
                f,
                "first TLS handshake message has type {msg_type}, not ClientHello (1)"
            ),
            HelloError::TooLarge { what, len, max } => write!(
                f,
                "TLS ClientHello {what} of {len} bytes exceeds the {max}-byte limit"
            ),
            HelloError::Malformed(what) => write!(f, "malformed TLS ClientHello: {what}"),
            HelloError::ServerName(what) => write!(f, "invalid TLS server_name: {what}"),
        }
    }
}

impl std::error::Error for HelloError {}

/// Reads the ClientHello at the start of `buf` (the first bytes a TLS
/// client sends).
pub fn parse(buf: &[u8]) -> Result<Parsed, HelloError> {
    // The handshake bytes gathered so far: borrowed from `buf` while they
    // come from one record (the usual case), copied once they span more.
    let mut handshake: Cow<[u8]> = Cow::Borrowed(&[]);
    let mut offset = 0;
    loop {
        // Refuse a further record there is no room for now, so that
        // `Incomplete` always means the buffer is under MAX_BUFFERED.
        let smallest_end = offset + RECORD_HEADER_LEN + 1;
        if smallest_end > MAX_BUFFERED {
            return Err(HelloError::TooLarge {
                what: "records",
                len: smallest_end,
                max: MAX_BUFFERED,
            });
        }
        let header = buf.get(offset..).unwrap_or_default();
        let Some(len) = record_header(header, offset)? else {
            return Ok(Parsed::Incomplete);
        };
        let start = offset + RECORD_HEADER_LEN;
        let end = start + len;
        if end > MAX_BUFFERED {
            return Err(HelloError::TooLarge {
                what: "records",
                len: end,
                max: MAX_BUFFERED,
            });
        }
        // A record cut by the read still gives its bytes so far: the
        // answer comes as soon as the message itself is whole.
        let payload = buf.get(start..end.min(buf.len())).unwrap_or_default();
        append(&mut handshake, payload);
        if let Some(body) = client_hello_body(&handshake)? {
            return read_hello(body).map(Parsed::Done);
        }
        if buf.len() < end {
            return Ok(Parsed::Incomplete);
        }
        offset = end;
    }
}

fn append<'a>(gathered: &mut Cow<'a, [u8]>, payload: &'a [u8]) {
    if gathered.is_empty() {
        *gathered = Cow::Borrowed(payload);
    } else {
        gathered.to_mut().extend_from_slice(payload);
    }
}

/// Checks the record header at the start of `bytes` (found at `offset` in
/// the buffer), as far as it has arrived, and gives the record's payload
/// length once all of it is there. Each byte is judged as soon as it
/// arrives, so that non-TLS traffic is refused on its first byte rather
/// than after a timeout.
fn record_header(bytes: &[u8], offset: usize) -> Result<Option<usize>, HelloError> {
    if let Some(&content_type) = bytes.first() {
        if content_type != CONTENT_HANDSHAKE {
            // SSL 2.0's two-byte header has the high bit set; TLS content
            // types never do.
            if offset == 0 && content_type & 0x80 != 0 {
                return Err(HelloError::SslV2);
            }
            return Err(HelloError::NotHandshake {
                offset,
                content_type,
            });
        }
    }
    let version_bad = |version: u16| HelloError::RecordVersion { offset, version };
    if let Some(&major) = bytes.get(1) {
        let minor = bytes.get(2).copied().unwrap_or(0);
        let version = u16::from_be_bytes([major, minor]);
        if major != 3 || minor > 4 {
            return Err(version_bad(version));
        }
    }
    let (Some(&hi), Some(&lo)) = (bytes.get(3), bytes.get(4)) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    if len == 0 || len > MAX_RECORD_LEN {
        return Err(HelloError::RecordLength { offset, len });
    }
    Ok(Some(len))
}

/// The ClientHello body once the gathered handshake bytes hold all of it.
/// Bytes after it (none from a real client, which sends nothing more
/// before the server's answer) are not looked at.
fn client_hello_body(handshake: &[u8]) -> Result<Option<&[u8]>, HelloError> {
    let Some(&msg_type) = handshake.first() else {
        return Ok(None);
    };
    if msg_type != HANDSHAKE_CLIENT_HELLO {
        return Err(HelloError::NotClientHello { msg_type });
    }
    let Some(&[a, b, c]) = handshake.get(1..HANDSHAKE_HEADER_LEN) else {
        return Ok(None);
    };
    let len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
    if len > MAX_HELLO_LEN {
        return Err(HelloError::TooLarge {
            what: "message",
            len,
            max: MAX_HELLO_LEN,
        });
    }
    Ok(handshake.get(HANDSHAKE_HEADER_LEN..HANDSHAKE_HEADER_LEN + len))
}

/// The fields of a ClientHello body (RFC 8446 4.1.2, which also reads
/// TLS 1.0 to 1.2 hellos), up to its extensions.
fn read_hello(body: &[u8]) -> Result<ClientHello, HelloError> {
    let mut r = Reader(body);
    let version = r.u16("legacy_version")?;
    if version >> 8 != 3 {
        return Err(HelloError::Malformed("legacy_version is not 3.x"));
    }
    r.take(32, "random")?;
    if r.vec8("legacy_session_id")?.len() > 32 {
        return Err(HelloError::Malformed(
            "legacy_session_id longer than 32 bytes",
        ));
    }
    let suites = r.vec16("cipher_suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(HelloError::Malformed("cipher_suites length"));
    }
    if r.vec8("legacy_compression_methods")?.is_empty() {
        return Err(HelloError::Malformed("no compression method"));
    }
    // Hellos before extensions existed (SSL 3.0) end here.
    if r.0.is_empty() {
        return Ok(ClientHello::default());
    }
    let extensions = r.vec16("extensions")?;
    if !r.0.is_empty() {
        return Err(HelloError::Malformed("bytes after the extensions"));
    }
    read_extensions(extensions)
}

/// Finds server_name and ALPN among the extensions, skipping the others
/// (bounds-checked all the same). Each may appear once (RFC 8446 4.2):
/// two server names could route one way and be served another.
fn read_extensions(extensions: &[u8]) -> Result<ClientHello, HelloError> {
    let mut r = Reader(extensions);
    let mut hello = ClientHello::default();
    let (mut seen_sni, mut seen_alpn) = (false, false);
    while !r.0.is_empty() {
        let kind = r.u16("extension type")?;
        let data = r.vec16("extension data")?;
        match kind {
            EXT_SERVER_NAME => {
                if std::mem::replace(&mut seen_sni, true) {
                    return Err(HelloError::Malformed("two server_name extensions"));
                }
                hello.server_name = Some(server_name(data)?);
            }
            EXT_ALPN => {
                if std::mem::replace(&mut seen_alpn, true) {
                    return Err(HelloError::Malformed("two ALPN extensions"));
                }
                hello.alpn = alpn(data)?;
            }
            _ => {}
        }
    }
    Ok(hello)
}

/// The one host_name of a ServerNameList (RFC 6066 3).
fn server_name(data: &[u8]) -> Result<String, HelloError> {
    let mut outer = Reader(data);
    let mut list = Reader(outer.vec16("server_name list")?);
    if !outer.0.is_empty() {
        return Err(HelloError::Malformed("bytes after the server_name list"));
    }
    let mut name = None;
    while !list.0.is_empty() {
        if list.u8("server_name type")? != NAME_TYPE_HOST_NAME {
            // RFC 6066 defines no other type; the list's framing of an
            // unknown one is unknowable, and routing needs the host name.
            return Err(HelloError::ServerName("name type is not host_name"));
        }
        let host = list.vec16("host_name")?;
        if name.replace(host).is_some() {
            return Err(HelloError::ServerName("more than one host_name"));
        }
    }
    host_name(name.ok_or(HelloError::ServerName("empty server_name list"))?)
}

/// A host name as routing compares it: lower-cased, without the trailing
/// dot of a fully qualified name, made only of letters, digits, '-' and
/// '_' (seen in real names) in non-empty dot-separated labels. Anything
/// else (control characters, spaces, '%', raw UTF-8 instead of an IDNA
/// A-label, an IP address literal with ':') cannot match a configured name
/// and could mislead logs, so it is refused rather than routed as default.
fn host_name(raw: &[u8]) -> Result<String, HelloError> {
    if raw.is_empty() {
        return Err(HelloError::ServerName("empty host_name"));
    }
    if raw.len() > MAX_NAME_LEN {
        return Err(HelloError::ServerName("host_name longer than 255 bytes"));
    }
    let name = raw.strip_suffix(b".").unwrap_or(raw);
    let valid_byte = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if !name.iter().all(valid_byte) {
        return Err(HelloError::ServerName(
            "host_name has a character other than a letter, digit, '-', '_' or '.'",
        ));
    }
    if name.split(|&b| b == b'.').any(<[u8]>::is_empty) {
        return Err(HelloError::ServerName("host_name has an empty label"));
    }
    // All ASCII, checked above.
    Ok(name
        .iter()
        .map(|&b| char::from(b.to_ascii_lowercase()))
        .collect())
}

/// A ProtocolNameList (RFC 7301 3.1): at least one name, none empty.
fn alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, HelloError> {
    let mut outer = Reader(data);
    let mut list = Reader(outer.vec16("ALPN list")?);
    if !outer.0.is_empty() {
        return Err(HelloError::Malformed("bytes after the ALPN list"));
    }
    if list.0.is_empty() {
        return Err(HelloError::Malformed("empty ALPN list"));
    }
    let mut protocols = Vec::new();
    while !list.0.is_empty() {
        let name = list.vec8("ALPN protocol name")?;
        if name.is_empty() {
            return Err(HelloError::Malformed("empty ALPN protocol name"));
        }
        protocols.push(name.to_vec());
    }
    Ok(protocols)
}

/// A cursor over untrusted bytes: every read names the field it reads, so
/// that a truncation says where it is.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        let (head, rest) = self
            .0
            .split_at_checked(n)
            .ok_or(HelloError::Malformed(what))?;
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        match *self.take(1, what)? {
            [b] => Ok(b),
            _ => Err(HelloError::Malformed(what)),
        }
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        match *self.take(2, what)? {
            [hi, lo] => Ok(u16::from_be_bytes([hi, lo])),
            _ => Err(HelloError::Malformed(what)),
        }
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let len = self.u8(what)?;
        self.take(usize::from(len), what)
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let len = self.u16(what)?;
        self.take(usize::from(len), what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use std::sync::Arc;

    /// The first flight of a rustls client: its ClientHello record(s).
    fn rustls_hello(name: &str, alpn: &[&[u8]], tls13: bool) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = if tls13 {
            rustls::DEFAULT_VERSIONS
        } else {
            &[&rustls::version::TLS12]
        };
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    /// The handshake message of a single-record hello, re-framed into
    /// records of at most `size` payload bytes each.
    fn reframe(hello: &[u8], size: usize) -> Vec<u8> {
        let len = usize::from(u16::from_be_bytes([hello[3], hello[4]]));
        let message = &hello[5..5 + len];
        let mut out = Vec::new();
        for chunk in message.chunks(size) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    fn done(buf: &[u8]) -> ClientHello {
        match parse(buf) {
            Ok(Parsed::Done(h)) => h,
            other => panic!("{other:?}"),
        }
    }

    /// Every strict prefix is Incomplete; the whole answers `want`.
    fn assert_incremental(buf: &[u8], want: &ClientHello) {
        for n in 0..buf.len() {
            assert_eq!(
                parse(&buf[..n]),
                Ok(Parsed::Incomplete),
                "prefix of {n} bytes"
            );
        }
        assert_eq!(&done(buf), want);
    }

    fn h2_hello() -> ClientHello {
        ClientHello {
            server_name: Some("www.example.com".into()),
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }

    #[test]
    fn rustls_hellos() {
        for tls13 in [true, false] {
            let buf = rustls_hello("WWW.Example.com", &[b"h2", b"http/1.1"], tls13);
            assert_eq!(buf[0], 22);
            assert_eq!(done(&buf), h2_hello(), "tls13 {tls13}");
            // What follows the hello (here, a second copy) is not read.
            let mut twice = buf.clone();
            twice.extend_from_slice(&buf);
            assert_eq!(done(&twice), h2_hello());
        }
        let plain = rustls_hello("db.internal", &[], true);
        let hello = done(&plain);
        assert_eq!(hello.server_name.as_deref(), Some("db.internal"));
        assert!(hello.alpn.is_empty());
    }

    #[test]
    fn ip_address_sends_no_server_name() {
        for ip in ["192.0.2.7", "2001:db8::1"] {
            let hello = done(&rustls_hello(ip, &[b"h2"], true));
            assert_eq!(hello.server_name, None, "{ip}");
            assert_eq!(hello.alpn, vec![b"h2".to_vec()]);
        }
    }

    #[test]
    fn byte_by_byte_in_one_record() {
        assert_incremental(
            &rustls_hello("www.example.com", &[b"h2", b"http/1.1"], true),
            &h2_hello(),
        );
    }

    #[test]
    fn reassembled_from_many_records() {
        let one = rustls_hello("www.example.com", &[b"h2", b"http/1.1"], true);
        for size in [1, 2, 3, 7, 100] {
            let many = reframe(&one, size);
            assert_eq!(done(&many), h2_hello(), "{size}-byte records");
        }
        // One-byte records fed one byte at a time: the worst case.
        assert_incremental(&reframe(&one, 1), &h2_hello());
    }

    #[test]
    fn non_tls_refused_on_first_byte() {
        assert_eq!(
            parse(b"G"),
            Err(HelloError::NotHandshake {
                offset: 0,
                content_type: b'G'
            })
        );
        assert_eq!(parse(b"\x80\x2e\x01\x03\x01"), Err(HelloError::SslV2));
        assert_eq!(
            parse(b"\x15\x03\x03\x00\x02\x02\x28"),
            Err(HelloError::NotHandshake {
                offset: 0,
                content_type: 21
            })
        );
        assert_eq!(
            parse(b"\x16\x02"),
            Err(HelloError::RecordVersion {
                offset: 0,
                version: 0x0200
            })
        );
        assert_eq!(
            parse(b"\x16\x03\x05"),
            Err(HelloError::RecordVersion {
                offset: 0,
                version: 0x0305
            })
        );
        assert_eq!(parse(b""), Ok(Parsed::Incomplete));
        assert_eq!(parse(b"\x16\x03"), Ok(Parsed::Incomplete));
    }

    #[test]
    fn bad_records() {
        assert_eq!(
            parse(b"\x16\x03\x01\x00\x00"),
            Err(HelloError::RecordLength { offset: 0, len: 0 })
        );
        assert_eq!(
            parse(b"\x16\x03\x01\x40\x01"),
            Err(HelloError::RecordLength {
                offset: 0,
                len: 16385
            })
        );
        // Not a ClientHello (a ServerHello), refused on the type byte.
        assert_eq!(
            parse(b"\x16\x03\x03\x00\x30\x02"),
            Err(HelloError::NotClientHello { msg_type: 2 })
        );
        // Another content type between fragments of the hello.
        let one = rustls_hello("a.example", &[], true);
        let mut split = reframe(&one, 50);
        split[55] = 23;
        assert_eq!(
            parse(&split),
            Err(HelloError::NotHandshake {
                offset: 55,
                content_type: 23
            })
        );
    }

    #[test]
    fn size_caps() {
        // A message length over the cap is refused from its header.
        assert_eq!(
            parse(b"\x16\x03\x01\x00\x04\x01\x00\x40\x01"),
            Err(HelloError::TooLarge {
                what: "message",
                len: 16385,
                max: MAX_HELLO_LEN
            })
        );
        // A legal-sized message in one-byte records outgrows the buffer
        // cap; every answer before that is Incomplete on a short buffer.
        let mut buf = b"\x16\x03\x01\x00\x01\x01".to_vec();
        for b in [0x00, 0x3f, 0xff] {
            buf.extend_from_slice(&[22, 3, 1, 0, 1, b]);
        }
        let mut n = 0;
        let err = loop {
            match parse(&buf) {
                Ok(Parsed::Incomplete) => assert!(buf.len() < MAX_BUFFERED),
                Ok(Parsed::Done(h)) => panic!("{h:?}"),
                Err(e) => break e,
            }
            buf.extend_from_slice(&[22, 3, 1, 0, 1, n as u8]);
            n += 1;
        };
        assert!(
            matches!(
                err,
                HelloError::TooLarge {
                    what: "records",
                    ..
                }
            ),
            "{err}"
        );
    }

    /// A ClientHello record with the given extensions block contents.
    fn hello_with(extensions: &[u8]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]); // random
        body.extend_from_slice(&[0]); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
        body.extend_from_slice(extensions);
        record(&body)
    }

    fn record(body: &[u8]) -> Vec<u8> {
        let mut msg = vec![1, 0];
        msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
        msg.extend_from_slice(body);
        let mut out = vec![22, 3, 1];
        out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        out.extend_from_slice(&msg);
        out
    }

    fn ext(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(data);
        out
    }

    /// server_name extension data with one entry of `name_type`.
    fn sni_data(name_type: u8, name: &[u8]) -> Vec<u8> {
        let mut entry = vec![name_type];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name);
        let mut out = (entry.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&entry);
        out
    }

    fn sni(name: &[u8]) -> Result<Parsed, HelloError> {
        parse(&hello_with(&ext(0, &sni_data(0, name))))
    }

    fn sni_err(name: &[u8]) -> HelloError {
        sni(name).expect_err(&String::from_utf8_lossy(name))
    }

    #[test]
    fn hand_made_hellos() {
        let name = |n: &str| {
            Ok(Parsed::Done(ClientHello {
                server_name: Some(n.into()),
                alpn: vec![],
            }))
        };
        assert_eq!(sni(b"Example.COM"), name("example.com"));
        assert_eq!(sni(b"example.com."), name("example.com"));
        assert_eq!(sni(b"_acme.x-1.example"), name("_acme.x-1.example"));
        assert_eq!(sni(b"localhost"), name("localhost"));
        assert_eq!(
            parse(&hello_with(&[])),
            Ok(Parsed::Done(ClientHello::default()))
        );
        // No extensions block at all (SSL 3.0 era).
        let mut old = hello_with(&[]);
        old.truncate(old.len() - 2);
        let fixed = record(&old[9..]);
        assert_eq!(parse(&fixed), Ok(Parsed::Done(ClientHello::default())));
        // Unknown extensions (GREASE) are skipped.
        let mut exts = ext(0x0a0a, &[]);
        exts.extend(ext(0xfe0d, &[1, 2, 3]));
        exts.extend(ext(0, &sni_data(0, b"a.example")));
        exts.extend(ext(16, b"\x00\x03\x02h2"));
        let hello = done(&hello_with(&exts));
        assert_eq!(hello.server_name.as_deref(), Some("a.example"));
        assert_eq!(hello.alpn, vec![b"h2".to_vec()]);
        assert_incremental(&hello_with(&exts), &hello);
    }

    #[test]
    fn bad_server_names() {
        let long = [b'a'; 256];
        let mut max = [b'a'; 255];
        max[100] = b'.';
        assert!(sni(&max).is_ok());
        for bad in [
            &b""[..],
            &long,
            b"exa mple.com",
            b"example.com\0",
            b"ex\x01ample",
            b"ex\x7fample",
            b"caf\xc3\xa9.example",
            b"*.example.com",
            b"example..com",
            b".example.com",
            b".",
            b"example.com..",
            b"::1",
            b"a/b",
        ] {
            assert!(matches!(sni_err(bad), HelloError::ServerName(_)), "{bad:?}");
        }
        // Another name type, two host names, an empty list.
        let e = |d: Vec<u8>| parse(&hello_with(&ext(0, &d))).unwrap_err();
        assert_eq!(
            e(sni_data(1, b"x")),
            HelloError::ServerName("name type is not host_name")
        );
        let mut two = sni_data(0, b"a.example");
        let second = sni_data(0, b"b.example");
        two.extend_from_slice(&second[2..]);
        let len = (two.len() - 2) as u16;
        two[..2].copy_from_slice(&len.to_be_bytes());
        assert_eq!(e(two), HelloError::ServerName("more than one host_name"));
        assert_eq!(
            e(vec![0, 0]),
            HelloError::ServerName("empty server_name list")
        );
    }

    #[test]
    fn bad_lengths() {
        let m = |buf: Vec<u8>| match parse(&buf) {
            Err(HelloError::Malformed(what)) => what,
            other => panic!("{other:?}"),
        };
        let good = ext(0, &sni_data(0, b"a.example"));
        // Extension data overrunning the block, and the block the message.
        let mut over = good.clone();
        over[3] += 1;
        assert_eq!(m(hello_with(&over)), "extension data");
        let mut block = hello_with(&good);
        let at = 9 + 2 + 32 + 1 + 4 + 2;
        block[at + 1] += 1;
        assert_eq!(m(block.clone()), "extensions");
        block[at + 1] -= 2;
        assert_eq!(m(block), "bytes after the extensions");
        // server_name list length disagreeing with the extension.
        let mut d = sni_data(0, b"a.example");
        d[1] += 1;
        assert_eq!(m(hello_with(&ext(0, &d))), "server_name list");
        d[1] -= 2;
        assert_eq!(
            m(hello_with(&ext(0, &d))),
            "bytes after the server_name list"
        );
        let mut d = sni_data(0, b"a.example");
        d[4] += 1;
        assert_eq!(m(hello_with(&ext(0, &d))), "host_name");
        // Duplicates.
        let mut dup = good.clone();
        dup.extend_from_slice(&good);
        assert_eq!(m(hello_with(&dup)), "two server_name extensions");
        let alpn = ext(16, b"\x00\x03\x02h2");
        let mut dup = alpn.clone();
        dup.extend_from_slice(&alpn);
        assert_eq!(m(hello_with(&dup)), "two ALPN extensions");
        // ALPN lists.
        assert_eq!(m(hello_with(&ext(16, b"\x00\x00"))), "empty ALPN list");
        assert_eq!(
            m(hello_with(&ext(16, b"\x00\x01\x00"))),
            "empty ALPN protocol name"
        );
        assert_eq!(
            m(hello_with(&ext(16, b"\x00\x03\x03h2"))),
            "ALPN protocol name"
        );
        assert_eq!(
            m(hello_with(&ext(16, b"\x00\x03\x02h2x"))),
            "bytes after the ALPN list"
        );
        assert_eq!(m(hello_with(&ext(16, b""))), "ALPN list");
        // The fixed fields.
        let base = hello_with(&[]);
        let body = &base[9..];
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = body.to_vec();
            f(&mut b);
            m(record(&b))
        };
        assert_eq!(with(&|b| b[0] = 2), "legacy_version is not 3.x");
        assert_eq!(with(&|b| b.truncate(20)), "random");
        assert_eq!(with(&|b| b[34] = 33), "legacy_session_id");
        assert_eq!(
            with(&|b| {
                b[34] = 33;
                b.splice(35..35, [0; 33]);
            }),
            "legacy_session_id longer than 32 bytes"
        );
        assert_eq!(with(&|b| b[36] = 3), "cipher_suites length");
        assert_eq!(with(&|b| b[36] = 0), "cipher_suites length");
        assert_eq!(with(&|b| b[36] = 200), "cipher_suites");
        assert_eq!(with(&|b| b[39] = 0), "no compression method");
        assert_eq!(with(&|b| b.truncate(39)), "legacy_compression_methods");
        assert_eq!(with(&|b| b.truncate(42)), "extensions");
    }

    #[test]
    fn errors_say_where() {
        let e = parse(b"\x16\x03\x03\x00\x10\x01\x00\x00\x0c\x03\x03abcdefghij").unwrap_err();
        assert_eq!(e, HelloError::Malformed("random"));
        assert_eq!(e.to_string(), "malformed TLS ClientHello: random");
        let e = parse(b"\x17").unwrap_err();
        assert!(e.to_string().contains("content type 23"), "{e}");
    }
}
