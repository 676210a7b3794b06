//! HTTP/3 heads to the neutral message: a client's request as the h3
//! crate hands it over (`http::Request`: QPACK decoded, pseudo-fields
//! checked) to `request_from_h3`. Nothing may panic, and whatever is
//! accepted must be unambiguous (one Content-Length, agreeing with the
//! framing), free of connection-specific fields, which HTTP/1.1 would act
//! on, and safe to restate as HTTP/1.1 text.
//!
//! Input: byte 0 picks the method, byte 1 holds flags; the rest is split
//! at '\n' into the path, the authority and then "name:value" fields (a
//! one-byte name picks a well-known one).
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::http::h2_message::{request_from_h3, request_to_h2};
use switchyard::http::head::Limits;

#[path = "heads_common.rs"]
mod heads_common;
use heads_common::{check_request, header_map, lines};

const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "PATCH", "PURGE",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let method = METHODS[data[0] as usize % METHODS.len()];
    let flags = data[1];
    let mut parts = data[2..].splitn(3, |b| *b == b'\n');
    let path = parts.next().unwrap_or_default();
    let authority = parts.next().unwrap_or_default();
    let fields = lines(parts.next().unwrap_or_default());
    // What h3 would build: a URI from the pseudo-fields (http refuses
    // what it cannot parse, and h3 with it).
    let mut uri = http::Uri::builder().scheme("https");
    if flags & 1 != 0 {
        uri = uri.authority(authority);
    }
    let Ok(uri) = uri.path_and_query(path).build() else {
        return;
    };
    let Ok(mut req) = http::Request::builder().method(method).uri(uri).body(()) else {
        return;
    };
    *req.headers_mut() = header_map(&fields);
    let limits = Limits {
        max_request_line: 256,
        max_header_bytes: 1024,
        max_headers: 16,
    };
    match request_from_h3(&req, flags & 2 != 0, &limits) {
        Ok(r) => {
            check_request(&r);
            let _ = request_to_h2(&r, std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
            let _ = (r.target(), r.path_only(), r.query(), r.host_name());
        }
        Err(e) => assert!((400..600).contains(&e.status)),
    }
});
