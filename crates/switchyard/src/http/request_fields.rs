//! A client's request head collected field line by field line, as an
//! HTTP/2 (HPACK, `http2::server`) or HTTP/3 (QPACK, the h3 crate's
//! `resolve_request_with`) decoder hands them over: the pseudo-fields
//! apart, the regular fields straight into our `Fields`, and the first
//! thing that makes the request malformed (RFC 9113 8.1.1, 8.2, 8.3;
//! RFC 9114 4.1.2, 4.2, 4.3, the same rules). One collector for both, so
//! a request HTTP/2 refuses is refused over HTTP/3 too.
//!
//! HTTP/3 requests used to go through the h3 crate's `http::Request`
//! (every field copied into a `HeaderMap`, the URI parsed) and were then
//! copied again into our fields: about 9,000 instructions per request
//! under callgrind (BENCHMARKS.md, "HTTP/3").

use bytes::Bytes;

use super::head::is_lower_token;
use super::message::Fields;

/// A request head as the client sent it: the pseudo-fields apart, the
/// regular fields in order.
#[derive(Default)]
pub struct RequestHead {
    pub method: Option<Bytes>,
    pub scheme: Option<Bytes>,
    pub authority: Option<Bytes>,
    pub path: Option<Bytes>,
    /// `:protocol` of an extended CONNECT (RFC 8441 4), only ever with
    /// `:method` CONNECT, `:scheme`, `:path` and `:authority`.
    pub protocol: Option<Bytes>,
    pub fields: Fields,
    /// The list passed SETTINGS_MAX_HEADER_LIST_SIZE: `fields` is partial
    /// and the request is answered 431.
    pub too_large: bool,
}

/// Collects one head (or trailer section) field line by field line.
pub struct Collector {
    head: RequestHead,
    malformed: Option<&'static str>,
    /// A regular field came: a pseudo-field after it is malformed.
    regular: bool,
    trailers: bool,
    /// The pseudo-fields' values go into one buffer, sliced once the
    /// block is decoded: one allocation for the four of them, shared from
    /// then on by the request they become.
    pseudo_bytes: Vec<u8>,
    pseudo: [Option<(usize, usize)>; 5],
}

impl Collector {
    /// `trailers`: a trailer section, where pseudo-fields are malformed.
    pub fn new(trailers: bool) -> Collector {
        Collector {
            head: RequestHead::default(),
            malformed: None,
            regular: false,
            trailers,
            pseudo_bytes: Vec::new(),
            pseudo: [None; 5],
        }
    }

    /// One field line, in the order the client sent it.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.malformed.is_some() {
            return;
        }
        if name.starts_with(b":") {
            if self.regular || self.trailers {
                self.malformed = Some("pseudo-header field after a regular one, or in trailers");
                return;
            }
            let slot = match name {
                b":method" => &mut self.pseudo[0],
                b":scheme" => &mut self.pseudo[1],
                b":authority" => &mut self.pseudo[2],
                b":path" => &mut self.pseudo[3],
                b":protocol" => &mut self.pseudo[4],
                _ => {
                    self.malformed = Some("unknown pseudo-header field");
                    return;
                }
            };
            if slot.is_some() {
                self.malformed = Some("repeated pseudo-header field");
                return;
            }
            let at = self.pseudo_bytes.len();
            *slot = Some((at, at + value.len()));
            self.pseudo_bytes.extend_from_slice(value);
            return;
        }
        self.regular = true;
        if !is_lower_token(name) {
            self.malformed = Some("invalid field name");
        } else if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
            self.malformed = Some("invalid field value");
        } else if is_connection_specific(name, value) {
            // RFC 9113 8.2.2, RFC 9114 4.2; an HTTP/1.1 member would act
            // on them.
            self.malformed = Some("connection-specific field");
        } else {
            self.head.fields.append(name, value);
        }
    }

    /// The head, and what makes it malformed if anything does.
    /// `too_large`: the decoder stopped at its size limit (`fields` is
    /// partial; the whole-head checks are skipped). `connect_protocol`:
    /// the extended CONNECT (`:protocol`) was announced.
    pub fn finish(
        self,
        too_large: bool,
        connect_protocol: bool,
    ) -> (RequestHead, Option<&'static str>) {
        let Collector {
            mut head,
            mut malformed,
            trailers,
            pseudo_bytes,
            pseudo,
            ..
        } = self;
        let all = Bytes::from(pseudo_bytes);
        let [method, scheme, authority, path, protocol] =
            pseudo.map(|r| r.map(|(a, b)| all.slice(a..b)));
        (head.method, head.scheme, head.authority, head.path) = (method, scheme, authority, path);
        head.protocol = protocol;
        head.too_large = too_large;
        if !trailers && malformed.is_none() && !too_large {
            let connect = head.method.as_deref() == Some(b"CONNECT");
            // RFC 8441 4: an extended CONNECT names its target as other
            // requests do, and only where the setting allowed it.
            let extended = head.protocol.is_some();
            if head.method.is_none()
                || (!connect || extended)
                    && (head.scheme.is_none() || head.path.as_ref().is_none_or(|p| p.is_empty()))
                || extended && head.authority.is_none()
            {
                malformed = Some("a required pseudo-header field is missing or empty");
            } else if extended && !(connect && connect_protocol) {
                malformed = Some(":protocol without CONNECT or SETTINGS_ENABLE_CONNECT_PROTOCOL");
            }
        }
        (head, malformed)
    }

    /// `finish` for an HTTP/3 request, with RFC 9114 4.3.1's rule on the
    /// target's authority, which the h3 crate applied before: an `http` or
    /// `https` request names it in `:authority` or Host, and both, when
    /// present, agree. `connect_protocol`: the connection announced
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220 3), so an extended
    /// CONNECT may come.
    pub fn finish_h3(self, connect_protocol: bool) -> (RequestHead, Option<&'static str>) {
        let (head, malformed) = self.finish(false, connect_protocol);
        if malformed.is_some() || head.method.as_deref() == Some(b"CONNECT") {
            return (head, malformed);
        }
        let host = head.fields.get("host");
        let why = match (&head.authority, host) {
            (None, None) => Some("neither :authority nor Host"),
            (Some(a), Some(h)) if a[..] != *h => Some(":authority and Host differ"),
            _ => None,
        };
        (head, why)
    }
}

fn is_connection_specific(name: &[u8], value: &[u8]) -> bool {
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            true
        }
        b"te" => value != b"trailers",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(lines: &[(&str, &str)]) -> (RequestHead, Option<&'static str>) {
        let mut c = Collector::new(false);
        for (n, v) in lines {
            c.field(n.as_bytes(), v.as_bytes());
        }
        c.finish_h3(false)
    }

    const BASE: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.test"),
        (":path", "/p?q"),
    ];

    #[test]
    fn a_well_formed_head_keeps_its_fields_in_order() {
        let mut lines = BASE.to_vec();
        lines.extend([("accept", "*/*"), ("cookie", "a=1"), ("cookie", "b=2")]);
        let (h, why) = collect(&lines);
        assert_eq!(why, None);
        assert_eq!(h.method.as_deref(), Some(&b"GET"[..]));
        assert_eq!(h.path.as_deref(), Some(&b"/p?q"[..]));
        assert_eq!(h.authority.as_deref(), Some(&b"a.test"[..]));
        let got: Vec<_> = h.fields.iter().collect();
        assert_eq!(
            got,
            [
                (&b"accept"[..], &b"*/*"[..]),
                (&b"cookie"[..], &b"a=1"[..]),
                (&b"cookie"[..], &b"b=2"[..])
            ]
        );
    }

    #[test]
    fn malformed_heads_are_named() {
        let cases: [(&[(&str, &str)], &str); 9] = [
            (&[("Accept", "x")], "invalid field name"),
            (&[("x", "a\nb")], "invalid field value"),
            (&[("connection", "close")], "connection-specific field"),
            (&[("te", "gzip")], "connection-specific field"),
            (&[("x", "1"), (":path", "/")], "pseudo-header field after"),
            (&[(":path", "/")], "repeated pseudo-header field"),
            (&[(":status", "200")], "unknown pseudo-header field"),
            (&[(":protocol", "websocket")], ":protocol without CONNECT"),
            (&[("host", "b.test")], ":authority and Host differ"),
        ];
        for (extra, want) in cases {
            let mut lines = BASE.to_vec();
            lines.extend_from_slice(extra);
            let (_, why) = collect(&lines);
            assert!(
                why.is_some_and(|w| w.starts_with(want)),
                "{extra:?}: {why:?}"
            );
        }
        let (_, why) = collect(&[(":method", "GET"), (":scheme", "https"), (":path", "/")]);
        assert_eq!(why, Some("neither :authority nor Host"));
        let (_, why) = collect(&[(":method", "GET"), (":authority", "a.test")]);
        assert_eq!(
            why,
            Some("a required pseudo-header field is missing or empty")
        );
        // Host alone names the target; the same value in both is fine.
        let (_, why) = collect(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("host", "a.test"),
        ]);
        assert_eq!(why, None);
        let mut lines = BASE.to_vec();
        lines.push(("host", "a.test"));
        assert_eq!(collect(&lines).1, None);
    }

    /// RFC 9220: `:protocol` passes where the connection announced the
    /// extended CONNECT, and only with CONNECT and the whole target.
    #[test]
    fn an_extended_connect_needs_the_setting_and_its_target() {
        let connect = |lines: &[(&str, &str)], announced: bool| {
            let mut c = Collector::new(false);
            for (n, v) in lines {
                c.field(n.as_bytes(), v.as_bytes());
            }
            c.finish_h3(announced)
        };
        let full = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":authority", "a.test"),
            (":path", "/chat"),
            ("sec-websocket-version", "13"),
        ];
        let (h, why) = connect(&full, true);
        assert_eq!(why, None);
        assert_eq!(h.protocol.as_deref(), Some(&b"websocket"[..]));
        assert_eq!(h.path.as_deref(), Some(&b"/chat"[..]));
        let (_, why) = connect(&full, false);
        assert!(why.is_some_and(|w| w.starts_with(":protocol without CONNECT")));
        for missing in [":path", ":authority", ":scheme"] {
            let lines: Vec<_> = full
                .iter()
                .copied()
                .filter(|(n, _)| *n != missing)
                .collect();
            let (_, why) = connect(&lines, true);
            assert_eq!(
                why,
                Some("a required pseudo-header field is missing or empty"),
                "{missing}"
            );
        }
        let mut get = full;
        get[0] = (":method", "GET");
        assert!(connect(&get, true)
            .1
            .is_some_and(|w| w.starts_with(":protocol without CONNECT")));
    }
}
