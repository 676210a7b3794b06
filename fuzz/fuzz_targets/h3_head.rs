//! HTTP/3 heads to the neutral message: a client's field lines as the h3
//! crate hands them over (QPACK decoded, one name and value at a time:
//! `resolve_request_with`) to the collector (`http::request_fields`) and,
//! when it finds nothing malformed, to `request_from_wire`, as
//! `proxy::client_h3_conn` does. Nothing may panic, and whatever is
//! accepted must be unambiguous (one Content-Length, agreeing with the
//! framing), free of connection-specific fields, which HTTP/1.1 would act
//! on, and safe to restate as HTTP/1.1 text.
//!
//! With flag 4 the connection announced the extended CONNECT (RFC 9220),
//! and a head with `:protocol` (flag 8: `websocket`, or with flag 16 the
//! authority's bytes) goes to `extended_connect_from_wire` instead, as a
//! WebSocket's does.
//!
//! Input: byte 0 picks the method, byte 1 holds flags; the rest is split
//! at '\n' into the path, the authority and then "name:value" fields (a
//! one-byte name picks a well-known one), passed on as they are (names
//! and values the collector must refuse included).
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::http::h2_message::{extended_connect_from_wire, request_from_wire, request_to_h2};
use switchyard::http::head::Limits;
use switchyard::http::request_fields::{Collector, RequestHead};

// `header_map` there is h2_head's: HTTP/3 heads no longer go through the
// `http` crate's types.
#[allow(dead_code)]
#[path = "heads_common.rs"]
mod heads_common;
use heads_common::{check_request, check_tunnel_request, lines};

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
    let mut c = Collector::new(false);
    c.field(b":method", method.as_bytes());
    c.field(b":scheme", b"https");
    if flags & 8 != 0 {
        let protocol = if flags & 16 != 0 {
            authority
        } else {
            b"websocket"
        };
        c.field(b":protocol", protocol);
    }
    if flags & 1 != 0 {
        c.field(b":authority", authority);
    }
    c.field(b":path", path);
    for (n, v) in &fields {
        c.field(n, v);
    }
    let (head, malformed) = c.finish_h3(flags & 4 != 0);
    if malformed.is_some() {
        return;
    }
    let RequestHead {
        method,
        path,
        authority,
        protocol,
        fields,
        ..
    } = head;
    let limits = Limits {
        max_request_line: 256,
        max_header_bytes: 1024,
        max_headers: 16,
    };
    let tunnel = protocol.is_some();
    let converted = match protocol {
        Some(p) => extended_connect_from_wire(&p, (path, authority), &fields, &limits),
        None => {
            let pseudo = (method.unwrap_or_default(), path, authority);
            request_from_wire(pseudo, &fields, flags & 2 != 0, &limits)
        }
    };
    match converted {
        Ok(r) => {
            // What the member sees of a tunnel: a GET asking to upgrade.
            if tunnel {
                check_tunnel_request(&r);
            } else {
                check_request(&r);
            }
            let _ = request_to_h2(&r, std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
            let _ = (r.target(), r.path_only(), r.query(), r.host_name());
        }
        Err(e) => assert!((400..600).contains(&e.status)),
    }
});
