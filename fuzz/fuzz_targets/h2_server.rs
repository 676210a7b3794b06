//! The HTTP/2 server connection (`http2::server::Conn`) fed arbitrary
//! client bytes, in arbitrary splits, with the streams it opens answered,
//! read, reset and finished along the way: nothing may panic, and what it
//! writes must always be whole, well-formed frames no larger than the
//! client allows (16,384 bytes, or what its SETTINGS_MAX_FRAME_SIZE says).
//!
//! Input: byte 0 picks the read size and byte 1 the actions per stream
//! (and whether the client's SETTINGS and a first request come first);
//! the rest is the client's side of the wire after the preface.
#![no_main]
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use switchyard::http2::frame::{Head, HEADER_LEN};
use switchyard::http2::server::{Config, Conn};

/// Checks the frames written since `from` (a frame boundary) against the
/// client's frame size limit now (its SETTINGS come before this round's
/// writes); returns where the next check starts.
fn check_frames(out: &[u8], from: usize, limit: usize) -> usize {
    let mut at = from;
    while at < out.len() {
        let h = Head::parse(&out[at..]).expect("a whole frame header");
        assert!(h.len <= limit, "frame larger than the client's limit");
        at += HEADER_LEN + h.len;
    }
    assert_eq!(at, out.len(), "a frame cut short");
    at
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let step = 1 + data[0] as usize % 64;
    let acts = data[1];
    let mut c = Conn::new(Config {
        max_concurrent_streams: 4,
        stream_window: 65_535,
        connection_window: 65_535,
        max_frame_size: 16_384,
        max_header_list_size: 4096,
        enable_connect_protocol: true,
    });
    let cx = Context::from_waker(Waker::noop());
    let mut buf = BytesMut::new();
    if acts & 64 != 0 {
        // Start past the handshake with stream 1 open (GET, a body to
        // come), so every run reaches the states behind them.
        buf.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        buf.extend_from_slice(&[0, 0, 6, 1, 4, 0, 0, 0, 1]);
        buf.extend_from_slice(&[0x82, 0x86, 0x84, 0x41, 0x01, b'a']);
    }
    let mut open = Vec::new();
    let mut checked = 0;
    for piece in data[2..].chunks(step) {
        buf.extend_from_slice(piece);
        if c.recv(&mut buf).is_err() {
            break;
        }
        while let Some(s) = c.accepted.pop_front() {
            open.push(s.id);
        }
        for (i, &id) in open.iter().enumerate() {
            let a = acts.rotate_left(i as u32);
            while let Poll::Ready(Some(Ok(_))) = c.poll_data(id, &cx) {}
            if a & 1 != 0 {
                let f = [(&b"Content-Type"[..], &b"text/plain"[..])];
                let _ = c.send_head(id, Some(200), f.iter().copied(), false);
                let _ = c.poll_send(id, &cx, &[b'x'; 20_000], a & 2 != 0);
            }
            if a & 4 != 0 {
                let _ = c.end_stream(id);
            }
            if a & 8 != 0 {
                c.reset(id, 0x8);
            }
        }
        if acts & 16 != 0 {
            for id in open.drain(..) {
                c.finish(id);
            }
        }
        checked = check_frames(&c.out, checked, c.peer_max_frame());
        // The owner writes everything, or nothing at all this round.
        if acts & 32 != 0 || c.out.len() > 1 << 20 {
            let whole = c.out.len();
            c.consumed(whole);
            checked = 0;
        }
    }
    check_frames(&c.out, checked, c.peer_max_frame());
});
