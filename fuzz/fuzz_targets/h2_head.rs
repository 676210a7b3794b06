//! HTTP/2 heads as h2 hands them over, to the neutral message and back:
//! nothing may panic, and whatever `request_from_h2` accepts must be
//! unambiguous (one Content-Length, agreeing with the framing) and free of
//! connection-specific fields, which HTTP/1.1 would act on.
//!
//! Input: byte 0 picks the method, byte 1 holds flags, bytes 2-3 the
//! response status; the rest is split at '\n' into the path, the authority
//! and then "name:value" fields (a one-byte name picks a well-known one).
//! Whatever the `http` crate refuses is skipped, as h2 would never pass it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::http::h2conv::{request_from_h2, request_to_h2, response_from_h2, response_to_h2};
use switchyard::http::head::{Framing, Limits};
use switchyard::http::message::{Fields, Method};

const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "PATCH", "PURGE",
];

const NAMES: [&str; 16] = [
    "content-length",
    "host",
    "cookie",
    "te",
    "expect",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "proxy-connection",
    "trailer",
    "content-type",
    "x-forwarded-for",
    "via",
    "proxy-authenticate",
    "content-length",
];

const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "te",
];

fn fields(data: &[u8]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let (n, v) = match line.iter().position(|b| *b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        let name = match n {
            [i] => http::HeaderName::from_static(NAMES[*i as usize % NAMES.len()]),
            _ => match http::HeaderName::from_bytes(n) {
                Ok(n) => n,
                Err(_) => continue,
            },
        };
        if let Ok(v) = http::HeaderValue::from_bytes(v) {
            h.append(name, v);
        }
    }
    h
}

/// At most one Content-Length, and a declared length agrees with it.
fn check_length(f: &Fields, framing: Framing) {
    let cl: Vec<&[u8]> = f.all("content-length").collect();
    assert!(cl.len() <= 1, "several Content-Length fields accepted");
    if let Framing::Length(n) = framing {
        assert_eq!(cl.len(), 1, "a length without a Content-Length field");
        let s = std::str::from_utf8(cl[0]).expect("Content-Length is not text");
        assert_eq!(
            s.parse::<u64>().ok(),
            Some(n),
            "Content-Length disagrees with the framing"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let method = METHODS[data[0] as usize % METHODS.len()];
    let flags = data[1];
    let status = u16::from_be_bytes([data[2], data[3]]) % 1000;
    let mut parts = data[4..].splitn(3, |b| *b == b'\n');
    let path = parts.next().unwrap_or_default();
    let authority = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default();
    let headers = fields(rest);

    let mut uri = http::Uri::builder();
    if flags & 1 != 0 {
        uri = uri.scheme("https").authority(authority);
    }
    let Ok(uri) = uri.path_and_query(path).build() else {
        return;
    };
    let Ok(req) = http::Request::builder().method(method).uri(uri).body(()) else {
        return;
    };
    let (mut req_parts, ()) = req.into_parts();
    req_parts.headers = headers.clone();
    let limits = Limits {
        max_request_line: 256,
        max_header_bytes: 1024,
        max_headers: 16,
    };
    let request_method = match request_from_h2(&req_parts, flags & 2 != 0, &limits) {
        Ok(req) => {
            check_length(&req.head.fields, req.head.framing);
            for (name, _) in req.head.fields.iter() {
                assert!(
                    !CONNECTION_SPECIFIC
                        .iter()
                        .any(|c| c.as_bytes().eq_ignore_ascii_case(name)),
                    "connection-specific field {:?} accepted",
                    String::from_utf8_lossy(name)
                );
            }
            let _ = request_to_h2(&req, std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
            let _ = (req.target(), req.path_only(), req.query(), req.host_name());
            req.method
        }
        Err(e) => {
            assert!((400..600).contains(&e.status));
            Method::parse(method.as_bytes())
        }
    };

    let Ok(resp) = http::Response::builder().status(status).body(()) else {
        return;
    };
    let (mut resp_parts, ()) = resp.into_parts();
    resp_parts.headers = headers;
    if let Ok(resp) = response_from_h2(&resp_parts, flags & 4 != 0, request_method) {
        check_length(&resp.head.fields, resp.head.framing);
        let _ = response_to_h2(&resp);
    }
});
