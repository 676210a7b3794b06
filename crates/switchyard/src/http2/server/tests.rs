//! The server connection's state machine, frame by frame: requests in,
//! errors as RFC 9113 names them, windows both ways, the expiry ticks.

use super::*;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;

use crate::http2::frame::{self, code, flag, kind, Head, PREFACE};
use crate::http2::hpack::{Decoder, Encoder};

fn cfg() -> Config {
    Config {
        max_concurrent_streams: 2,
        stream_window: 65_535,
        connection_window: 1 << 20,
        max_frame_size: 16_384,
        max_header_list_size: 4096,
        enable_connect_protocol: false,
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    frame::put_head(&mut f, payload.len(), kind, flags, stream);
    f.extend_from_slice(payload);
    f
}

fn request_block(enc: &mut Encoder, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    enc.begin(&mut b);
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", path),
        (":authority", "a.test"),
    ]
    .iter()
    .chain(extra)
    {
        enc.field(n.as_bytes(), v.as_bytes(), &mut b);
    }
    b
}

/// A connection past the client's SETTINGS, with its output cleared.
fn started() -> (Conn, Encoder) {
    let mut c = Conn::new(cfg());
    feed(&mut c, &frame(kind::SETTINGS, 0, 0, &[])).unwrap();
    c.out.clear();
    (c, Encoder::new())
}

/// A whole GET of `path` on stream `id`, ending the stream.
fn get(c: &mut Conn, enc: &mut Encoder, id: u32, path: &str) -> Result<(), ConnError> {
    let block = request_block(enc, path, &[]);
    let flags = flag::END_HEADERS | flag::END_STREAM;
    feed(c, &frame(kind::HEADERS, flags, id, &block))
}

fn feed(c: &mut Conn, bytes: &[u8]) -> Result<(), ConnError> {
    let mut buf = BytesMut::from(bytes);
    c.recv(&mut buf)
}

/// (kind, flags, stream, payload) of every frame in `out`.
fn frames(out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut v = Vec::new();
    let mut at = 0;
    while let Some(h) = Head::parse(&out[at..]) {
        v.push((
            h.kind,
            h.flags,
            h.stream,
            out[at + 9..at + 9 + h.len].to_vec(),
        ));
        at += 9 + h.len;
    }
    v
}

struct CountWakes(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl std::task::Wake for CountWakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn noop() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

#[test]
fn settings_first_then_requests_come_out_decoded() {
    let mut c = Conn::new(cfg());
    let hello = frames(&c.out);
    assert_eq!(hello[0].0, kind::SETTINGS);
    assert_eq!((hello[1].0, hello[1].2), (kind::WINDOW_UPDATE, 0));
    assert_eq!(PREFACE.len(), 24);
    let mut enc = Encoder::new();
    let early = frame(
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &request_block(&mut enc, "/", &[]),
    );
    assert_eq!(feed(&mut c, &early).unwrap_err().code, code::PROTOCOL_ERROR);

    let (mut c, mut enc) = started();
    let block = request_block(&mut enc, "/a?b", &[("x-y", "z"), ("cookie", "a=1")]);
    // Split across reads, in two pieces of a header block.
    let mut wire = frame(kind::HEADERS, flag::END_STREAM, 1, &block[..3]);
    wire.extend(frame(kind::CONTINUATION, flag::END_HEADERS, 1, &block[3..]));
    let mut buf = BytesMut::new();
    for piece in wire.chunks(7) {
        buf.extend_from_slice(piece);
        c.recv(&mut buf).unwrap();
    }
    let s = c.accepted.pop_front().expect("a request");
    assert_eq!((s.id, s.end_stream), (1, true));
    assert_eq!(s.head.path.as_deref(), Some(&b"/a?b"[..]));
    assert_eq!(s.head.authority.as_deref(), Some(&b"a.test"[..]));
    assert_eq!(s.head.fields.get("x-y"), Some(&b"z"[..]));
    assert_eq!(c.open_streams(), 1);
}

#[test]
fn malformed_heads_reset_the_stream_and_the_connection_goes_on() {
    let (mut c, mut enc) = started();
    for (id, extra) in [
        (1, vec![("X-Upper", "1")]),
        (3, vec![("connection", "close")]),
        (5, vec![("te", "gzip")]),
        (7, vec![(":status", "200")]),
    ] {
        let extra: Vec<(&str, &str)> = extra;
        let block = request_block(&mut enc, "/", &extra);
        feed(
            &mut c,
            &frame(
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                id,
                &block,
            ),
        )
        .unwrap();
        assert!(c.accepted.is_empty(), "stream {id} accepted");
        let f = frames(&c.out);
        assert_eq!(f.last().map(|f| (f.0, f.2)), Some((kind::RST_STREAM, id)));
        c.out.clear();
    }
    get(&mut c, &mut enc, 9, "").unwrap();
    assert!(c.accepted.is_empty(), "an empty :path is malformed");
    let ok = request_block(&mut enc, "/", &[]);
    feed(
        &mut c,
        &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 11, &ok),
    )
    .unwrap();
    assert_eq!(c.accepted.len(), 1);
}

#[test]
fn connection_errors_name_their_code() {
    let cases: Vec<(Vec<u8>, u32)> = vec![
        (frame(kind::PING, 0, 0, &[0; 7]), code::FRAME_SIZE_ERROR),
        (frame(kind::PING, 0, 1, &[0; 8]), code::PROTOCOL_ERROR),
        (frame(kind::SETTINGS, 0, 0, &[0; 5]), code::FRAME_SIZE_ERROR),
        (
            frame(kind::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]),
            code::PROTOCOL_ERROR,
        ),
        (
            frame(kind::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]),
            code::FLOW_CONTROL_ERROR,
        ),
        (
            frame(kind::WINDOW_UPDATE, 0, 0, &[0; 4]),
            code::PROTOCOL_ERROR,
        ),
        (frame(kind::DATA, 0, 1, b"x"), code::PROTOCOL_ERROR),
        (frame(kind::RST_STREAM, 0, 3, &[0; 4]), code::PROTOCOL_ERROR),
        (
            frame(kind::CONTINUATION, flag::END_HEADERS, 1, &[0x82]),
            code::PROTOCOL_ERROR,
        ),
        (
            frame(kind::HEADERS, flag::END_HEADERS, 2, &[0x82]),
            code::PROTOCOL_ERROR,
        ),
        (
            frame(kind::PUSH_PROMISE, 0, 1, &[0; 4]),
            code::PROTOCOL_ERROR,
        ),
        (
            frame(kind::HEADERS, flag::END_HEADERS, 1, &[0x80]),
            code::COMPRESSION_ERROR,
        ),
        (
            frame(kind::DATA, 0, 1, &vec![0; 16_385]),
            code::FRAME_SIZE_ERROR,
        ),
    ];
    for (wire, want) in cases {
        let (mut c, _) = started();
        assert_eq!(
            feed(&mut c, &wire).map_err(|e| e.code),
            Err(want),
            "{:?}",
            &wire[..9]
        );
    }
    // Anything but CONTINUATION inside a header block.
    let (mut c, mut enc) = started();
    let mut wire = frame(kind::HEADERS, 0, 1, &request_block(&mut enc, "/", &[]));
    wire.extend(frame(kind::PRIORITY, 0, 1, &[0, 0, 0, 0, 16]));
    assert_eq!(feed(&mut c, &wire).unwrap_err().code, code::PROTOCOL_ERROR);
    // Unknown frame kinds are ignored.
    let (mut c, _) = started();
    feed(&mut c, &frame(0xfa, 0xff, 0, b"whatever")).unwrap();
    assert!(c.out.is_empty());
}

#[test]
fn ping_and_settings_are_acknowledged() {
    let (mut c, _) = started();
    feed(&mut c, &frame(kind::PING, 0, 0, b"12345678")).unwrap();
    feed(&mut c, &frame(kind::PING, flag::ACK, 0, b"abcdefgh")).unwrap();
    feed(&mut c, &frame(kind::SETTINGS, 0, 0, &[0, 5, 0, 0, 0x80, 0])).unwrap();
    let f = frames(&c.out);
    assert_eq!(f.len(), 2);
    assert_eq!(
        (f[0].0, f[0].1, &f[0].3[..]),
        (kind::PING, flag::ACK, &b"12345678"[..])
    );
    assert_eq!((f[1].0, f[1].1), (kind::SETTINGS, flag::ACK));
    assert_eq!(c.peer_max_frame, 32_768);
}

#[test]
fn responses_respect_windows_and_end_on_the_last_data_frame() {
    let (mut c, mut enc) = started();
    // The client allows 10 bytes per stream.
    feed(&mut c, &frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 10])).unwrap();
    get(&mut c, &mut enc, 1, "/").unwrap();
    c.out.clear();
    let fields = [(&b"Content-Type"[..], &b"text/plain"[..])];
    c.send_head(1, Some(200), fields.iter().copied(), false)
        .unwrap();
    let cx = noop();
    assert_eq!(
        c.poll_send(1, &cx, b"0123456789abcdef", false),
        Poll::Ready(Ok(10))
    );
    assert!(c.poll_send(1, &cx, b"abcdef", false).is_pending());
    feed(&mut c, &frame(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 100])).unwrap();
    assert_eq!(c.poll_send(1, &cx, b"abcdef", false), Poll::Ready(Ok(6)));
    c.end_stream(1).unwrap();
    let f = frames(&c.out);
    assert_eq!(f.len(), 3);
    let mut dec = Decoder::new(4096);
    let mut seen = Vec::new();
    dec.decode(&f[0].3, 1 << 16, |n, v| seen.push((n.to_vec(), v.to_vec())))
        .unwrap();
    assert_eq!(
        seen,
        vec![
            (b":status".to_vec(), b"200".to_vec()),
            (b"content-type".to_vec(), b"text/plain".to_vec())
        ]
    );
    assert_eq!((f[1].0, f[1].1, f[1].3.len()), (kind::DATA, 0, 10));
    assert_eq!(
        (f[2].0, f[2].1, f[2].3.len()),
        (kind::DATA, flag::END_STREAM, 6)
    );
    // Once the output was written, the end needs a frame of its own.
    get(&mut c, &mut enc, 3, "/").unwrap();
    c.send_head(3, Some(200), std::iter::empty(), false)
        .unwrap();
    assert_eq!(c.poll_send(3, &cx, b"xy", false), Poll::Ready(Ok(2)));
    let n = c.out.len();
    c.consumed(n);
    c.end_stream(3).unwrap();
    assert_eq!(
        frames(&c.out),
        vec![(kind::DATA, flag::END_STREAM, 3, vec![])]
    );
    c.finish(1);
    c.finish(3);
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn request_bodies_flow_and_give_the_window_back() {
    let (mut c, mut enc) = started();
    let block = request_block(&mut enc, "/", &[("content-length", "60000")]);
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block)).unwrap();
    c.accepted.clear();
    c.out.clear();
    let woken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    c.owner = Some(Waker::from(std::sync::Arc::new(CountWakes(woken.clone()))));
    for _ in 0..3 {
        feed(&mut c, &frame(kind::DATA, 0, 1, &[7; 16_000])).unwrap();
    }
    let cx = noop();
    let mut got = 0;
    while let Poll::Ready(Some(Ok(b))) = c.poll_data(1, &cx) {
        got += b.len();
    }
    assert_eq!(got, 48_000);
    // Half the stream window was consumed: it is given back, and the
    // owner is woken to write it (a stream task consumed it, and the
    // client waits for it).
    let f = frames(&c.out);
    assert!(
        f.iter().any(|f| f.0 == kind::WINDOW_UPDATE && f.2 == 1),
        "{f:?}"
    );
    assert!(woken.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    // More than Content-Length said: the stream is reset.
    feed(
        &mut c,
        &frame(kind::DATA, flag::END_STREAM, 1, &[7; 13_000]),
    )
    .unwrap();
    assert_eq!(
        c.poll_data(1, &cx),
        Poll::Ready(Some(Err(RecvError::Reset(code::PROTOCOL_ERROR))))
    );
    // DATA past the stream window is a stream error; the connection goes on.
    let block = request_block(&mut enc, "/", &[]);
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 3, &block)).unwrap();
    c.out.clear();
    for _ in 0..3 {
        feed(&mut c, &frame(kind::DATA, 0, 3, &[1; 16_384])).unwrap();
    }
    assert!(c.out.is_empty());
    feed(&mut c, &frame(kind::DATA, 0, 3, &[1; 16_384])).unwrap();
    let f = frames(&c.out);
    assert_eq!(
        f.last().map(|f| (f.0, f.2, f.3.clone())),
        Some((
            kind::RST_STREAM,
            3,
            code::FLOW_CONTROL_ERROR.to_be_bytes().to_vec()
        ))
    );
}

#[test]
fn concurrency_limit_refuses_streams_and_trailers_end_the_body() {
    let (mut c, mut enc) = started();
    for id in [1, 3] {
        let block = request_block(&mut enc, "/", &[]);
        feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, id, &block)).unwrap();
    }
    let block = request_block(&mut enc, "/", &[]);
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 5, &block)).unwrap();
    assert_eq!(c.accepted.len(), 2);
    let f = frames(&c.out);
    assert_eq!(
        f.last().map(|f| (f.0, f.2, f.3.clone())),
        Some((
            kind::RST_STREAM,
            5,
            code::REFUSED_STREAM.to_be_bytes().to_vec()
        ))
    );
    let mut t = Vec::new();
    enc.begin(&mut t);
    enc.field(b"grpc-status", b"0", &mut t);
    feed(
        &mut c,
        &frame(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &t),
    )
    .unwrap();
    let cx = noop();
    assert_eq!(c.poll_data(1, &cx), Poll::Ready(None));
    let trailers = c.take_trailers(1).expect("trailers");
    assert_eq!(trailers.get("grpc-status"), Some(&b"0"[..]));
    // Trailers without END_STREAM are malformed.
    c.out.clear();
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 3, &t)).unwrap();
    assert_eq!(
        c.poll_data(3, &cx),
        Poll::Ready(Some(Err(RecvError::Reset(code::PROTOCOL_ERROR))))
    );
    // A finished stream with an unread body says NO_ERROR... or CANCEL
    // when its response was not finished either.
    c.out.clear();
    c.finish(3);
    c.finish(1);
    let f = frames(&c.out);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].0, f[0].2, f[0].3.clone()),
        (kind::RST_STREAM, 1, code::CANCEL.to_be_bytes().to_vec())
    );
}

#[test]
fn waiting_readers_and_shut_windows_expire() {
    let (mut c, mut enc) = started();
    feed(&mut c, &frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0])).unwrap();
    let block = request_block(&mut enc, "/", &[]);
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 1, &block)).unwrap();
    let cx = noop();
    assert!(c.poll_data(1, &cx).is_pending());
    let now = crate::clock::now_ms();
    let gap = crate::http::body::BodyPace::gap(std::time::Duration::from_millis(1000));
    assert_eq!(c.expire_readers(now, &gap), 0, "not waiting that long yet");
    assert_eq!(c.expire_readers(now + 1000, &gap), 1);
    assert_eq!(
        c.poll_data(1, &cx),
        Poll::Ready(Some(Err(RecvError::Timeout)))
    );
    // The response waits for a window that never opens.
    c.send_head(1, Some(200), std::iter::empty(), false)
        .unwrap();
    assert!(c.poll_send(1, &cx, b"body", true).is_pending());
    assert_eq!(c.expire_stalled(0), 0);
    assert_eq!(c.expire_stalled(now + 1), 1);
    assert_eq!(
        c.poll_send(1, &cx, b"body", true),
        Poll::Ready(Err(Reset(code::CANCEL)))
    );
}

#[test]
fn continuation_floods_end_the_connection() {
    let (mut c, mut enc) = started();
    let block = request_block(&mut enc, "/", &[]);
    feed(&mut c, &frame(kind::HEADERS, 0, 1, &block)).unwrap();
    let mut r = Ok(());
    for _ in 0..100 {
        r = feed(&mut c, &frame(kind::CONTINUATION, 0, 1, &[0x40]));
        if r.is_err() {
            break;
        }
    }
    assert_eq!(r.map_err(|e| e.code), Err(code::ENHANCE_YOUR_CALM));
}

/// A HEADERS block of the given pseudo- and regular fields, in order.
fn block_of(enc: &mut Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    enc.begin(&mut b);
    for (n, v) in fields {
        enc.field(n.as_bytes(), v.as_bytes(), &mut b);
    }
    b
}

#[test]
fn extended_connect_only_where_the_setting_was_announced() {
    let announced = |c: &Conn| {
        let hello = frames(&c.out);
        assert_eq!(hello[0].0, kind::SETTINGS);
        hello[0].3.chunks(6).any(|s| s == [0, 8, 0, 0, 0, 1])
    };
    let ws = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":path", "/chat"),
        (":authority", "a.test"),
        ("sec-websocket-version", "13"),
    ];
    // Without the setting: not announced, and :protocol is malformed
    // (RFC 8441 3), a stream error.
    let c = Conn::new(cfg());
    assert!(!announced(&c));
    let (mut c, mut enc) = started();
    let b = block_of(&mut enc, &ws);
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 1, &b)).unwrap();
    assert!(c.accepted.is_empty());
    assert_eq!(
        frames(&c.out),
        vec![(
            kind::RST_STREAM,
            0,
            1,
            code::PROTOCOL_ERROR.to_be_bytes().to_vec()
        )]
    );

    let on = || Config {
        enable_connect_protocol: true,
        ..cfg()
    };
    assert!(announced(&Conn::new(on())));
    let mut c = Conn::new(on());
    feed(&mut c, &frame(kind::SETTINGS, 0, 0, &[])).unwrap();
    c.out.clear();
    let mut enc = Encoder::new();
    let b = block_of(&mut enc, &ws);
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 1, &b)).unwrap();
    let s = c.accepted.pop_front().expect("the extended CONNECT");
    assert_eq!(s.head.protocol.as_deref(), Some(&b"websocket"[..]));
    assert_eq!(s.head.path.as_deref(), Some(&b"/chat"[..]));
    assert!(!s.end_stream);
    // Malformed even so: :protocol on another method, or without :path,
    // :scheme or :authority.
    let mut id = 3;
    for drop_or_swap in [":method", ":path", ":scheme", ":authority"] {
        let mut enc = Encoder::new();
        let mut c = Conn::new(on());
        feed(&mut c, &frame(kind::SETTINGS, 0, 0, &[])).unwrap();
        c.out.clear();
        let fields: Vec<(&str, &str)> = ws
            .iter()
            .filter_map(|&(n, v)| match (n == drop_or_swap, n) {
                (true, ":method") => Some((n, "GET")),
                (true, _) => None,
                _ => Some((n, v)),
            })
            .collect();
        let b = block_of(&mut enc, &fields);
        feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, id, &b)).unwrap();
        assert!(c.accepted.is_empty(), "{drop_or_swap}");
        assert_eq!(frames(&c.out)[0].0, kind::RST_STREAM, "{drop_or_swap}");
        id += 2;
    }
    // A plain CONNECT is still handed over (and answered 501 above).
    let (mut c, mut enc) = started();
    let b = block_of(
        &mut enc,
        &[(":method", "CONNECT"), (":authority", "a.test:443")],
    );
    feed(&mut c, &frame(kind::HEADERS, flag::END_HEADERS, 1, &b)).unwrap();
    assert!(c.accepted.pop_front().unwrap().head.protocol.is_none());
}
