//! HTTP/2 heads to the neutral message and back: a client's request as our
//! decoder (`http2::server`) hands it to `request_from_wire`, and a
//! member's response as the h2 crate hands it to `response_from_h2`.
//! Nothing may panic, and whatever is accepted must be unambiguous (one
//! Content-Length, agreeing with the framing), free of connection-specific
//! fields, which HTTP/1.1 would act on, and safe to restate as HTTP/1.1
//! text (no CR, LF or NUL, no uppercase or empty names).
//!
//! Input: byte 0 picks the method, byte 1 holds flags, bytes 2-3 the
//! response status; the rest is split at '\n' into the path, the authority
//! and then "name:value" fields (a one-byte name picks a well-known one).
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use switchyard::http::h2_message::{
    request_from_wire, request_to_h2, response_from_h2, response_to_h2,
};
use switchyard::http::head::Limits;
use switchyard::http::message::Method;
use switchyard::http2::frame::{finish_headers, put_settings, HEADER_LEN};
use switchyard::http2::hpack::Encoder;
use switchyard::http2::server::{Config, Conn, NewStream};

// `check_tunnel_request` there is h3_head's: extended CONNECT over h2 is
// converted by the same function and fuzzed there.
#[allow(dead_code)]
#[path = "heads_common.rs"]
mod heads_common;
use heads_common::{check_length, check_request, header_map, lines};

const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "PATCH", "PURGE",
];

/// What the decoder hands over for one HEADERS frame carrying `block`
/// (a whole connection: SETTINGS first), if it opened a stream.
fn decoded(block: &[u8], end_stream: bool) -> Option<NewStream> {
    let mut c = Conn::new(Config {
        max_concurrent_streams: 4,
        stream_window: 65_535,
        connection_window: 65_535,
        max_frame_size: 16_384,
        max_header_list_size: 4096,
        enable_connect_protocol: true,
    });
    let mut wire = Vec::new();
    put_settings(&mut wire, &[]);
    let at = wire.len();
    wire.extend_from_slice(&[0; HEADER_LEN]);
    wire.extend_from_slice(block);
    finish_headers(&mut wire, at, 1, end_stream, 16_384);
    let mut buf = BytesMut::from(&wire[..]);
    c.recv(&mut buf).ok()?;
    c.accepted.pop_front()
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
    let fields = lines(parts.next().unwrap_or_default());

    // The request as a client would encode it; flag 8 repeats :path after
    // the regular fields (a misplaced pseudo-field, to be refused).
    let mut enc = Encoder::new();
    let mut block = Vec::new();
    enc.begin(&mut block);
    enc.field(b":method", method.as_bytes(), &mut block);
    enc.field(b":scheme", b"https", &mut block);
    if flags & 1 != 0 {
        enc.field(b":authority", authority, &mut block);
    }
    enc.field(b":path", path, &mut block);
    for (n, v) in &fields {
        enc.field(n, v, &mut block);
    }
    if flags & 8 != 0 {
        enc.field(b":path", path, &mut block);
    }
    let limits = Limits {
        max_request_line: 256,
        max_header_bytes: 1024,
        max_headers: 16,
    };
    let mut request_method = Method::parse(method.as_bytes());
    if let Some(new) = decoded(&block, flags & 2 != 0).filter(|n| !n.head.too_large) {
        let h = &new.head;
        let pseudo = (
            h.method.clone().unwrap_or_default(),
            h.path.clone(),
            h.authority.clone(),
        );
        match request_from_wire(pseudo, &h.fields, new.end_stream, &limits) {
            Ok(req) => {
                check_request(&req);
                let _ = request_to_h2(&req, std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
                let _ = (req.target(), req.path_only(), req.query(), req.host_name());
                request_method = req.method;
            }
            Err(e) => assert!((400..600).contains(&e.status)),
        }
    }

    let Ok(resp) = http::Response::builder().status(status).body(()) else {
        return;
    };
    let (mut resp_parts, ()) = resp.into_parts();
    resp_parts.headers = header_map(&fields);
    if let Ok(resp) = response_from_h2(&resp_parts, flags & 4 != 0, request_method) {
        check_length(&resp.head.fields, resp.head.framing);
        let _ = response_to_h2(&resp);
    }
});
