//! The server side of an HTTP/2 connection as a state machine without IO:
//! bytes from the client go in (`recv`), frames for the client collect in
//! `out`, requests come out as `NewStream`s, and each stream's body and
//! response move through methods keyed by stream id.
//!
//! Errors follow RFC 9113 section 5.4: a connection error returns
//! `ConnError` (the owner sends GOAWAY and closes); a stream error resets
//! that stream here and the connection goes on.
//!
//! The wakers of the tasks that serve the streams are kept here, so the
//! owner (`proxy::h2`) only has to move bytes and start tasks.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};

use super::frame::{self, code, flag, kind, setting, Head, HEADER_LEN, MAX_WINDOW};
use super::hpack::{DecodeError, Decoder, Encoder};
use crate::fasthash::FxHashMap;
use crate::http::head::is_tchar;
use crate::http::message::Fields;

/// What we announce and enforce.
#[derive(Debug, Clone)]
pub struct Config {
    pub max_concurrent_streams: u32,
    pub stream_window: u32,
    pub connection_window: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
}

/// A connection error: GOAWAY with `code`, then close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    pub code: u32,
    pub why: &'static str,
}

fn conn_err(code: u32, why: &'static str) -> ConnError {
    ConnError { code, why }
}

/// A request head as the client sent it: the pseudo-fields apart, the
/// regular fields in order.
#[derive(Default)]
pub struct RequestHead {
    pub method: Option<Bytes>,
    pub scheme: Option<Bytes>,
    pub authority: Option<Bytes>,
    pub path: Option<Bytes>,
    pub fields: Fields,
    /// The list passed SETTINGS_MAX_HEADER_LIST_SIZE: `fields` is partial
    /// and the request is answered 431.
    pub too_large: bool,
}

/// A stream the client opened with a complete, well-formed head.
pub struct NewStream {
    pub id: u32,
    pub head: RequestHead,
    /// The HEADERS frame ended the stream: no body.
    pub end_stream: bool,
}

/// Why a stream can no longer carry anything: the client reset it (its
/// code), or a protocol error reset it here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reset(pub u32);

/// Why a request body stopped short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    Reset(u32),
    /// Nothing came for `client_body` (see `expire_readers`).
    Timeout,
}

struct Stream {
    /// The client may still send DATA or trailers.
    recv_open: bool,
    /// We have not yet ended our side (END_STREAM or RST_STREAM).
    send_open: bool,
    reset: Option<u32>,
    send_window: i64,
    /// What the client may still send before a WINDOW_UPDATE.
    recv_window: i64,
    /// Consumed but not yet given back by WINDOW_UPDATE.
    unreleased: u32,
    inbound: VecDeque<Bytes>,
    /// Payload bytes held in `inbound` (returned to the connection
    /// window if nobody reads them).
    inbound_len: usize,
    trailers: Option<Fields>,
    length: Option<u64>,
    received: u64,
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// A task waiting for the client to reset the stream (`poll_reset`).
    watcher: Option<Waker>,
    /// Where our last DATA frame starts in `out`, and `out_gen` then: the
    /// end of the stream can ride on it while it is still unsent.
    last_data: Option<(usize, u64)>,
    /// Since when (`clock` ms) the response has waited for the client's
    /// window (see `expire_stalled`).
    stalled_since: Option<u64>,
    /// Since when the request body's reader has waited for DATA, and
    /// whether it waited too long (see `expire_readers`).
    read_since: Option<u64>,
    read_timed_out: bool,
}

/// A header block waiting for its CONTINUATION frames.
struct Partial {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
    /// What the block has cost so far (see `continuation`).
    cost: usize,
    /// HEADERS that said the stream depends on itself (a stream error
    /// once the block is decoded).
    self_dependent: bool,
}

pub struct Conn {
    cfg: Config,
    /// Frames for the client, to be written by the owner.
    pub out: Vec<u8>,
    streams: FxHashMap<u32, Stream>,
    /// The highest stream id the client used.
    last_id: u32,
    peer_max_frame: usize,
    peer_initial_window: i64,
    send_window: i64,
    recv_window: i64,
    unreleased: u32,
    dec: Decoder,
    enc: Encoder,
    partial: Option<Partial>,
    /// Streams opened by the last `recv`, for the owner to serve.
    pub accepted: VecDeque<NewStream>,
    /// GOAWAY sent: later streams are ignored.
    goaway: bool,
    /// Streams waiting for the connection's send window.
    blocked: Vec<u32>,
    /// Tasks waiting for `out` to drain.
    out_waiters: Vec<Waker>,
    /// Wakes the owner when output was added.
    pub owner: Option<Waker>,
    /// The client's first frame must be SETTINGS (RFC 9113 3.4).
    settings_seen: bool,
    /// Bumped whenever the owner takes bytes from `out`: a frame written
    /// in the same generation is still whole in `out`.
    out_gen: u64,
}

/// Output past which senders wait for the owner to write.
pub const OUT_HIGH: usize = 256 * 1024;

impl Conn {
    /// A connection whose preface was read; our SETTINGS go out first.
    pub fn new(cfg: Config) -> Conn {
        let mut out = Vec::with_capacity(256);
        frame::put_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::MAX_CONCURRENT_STREAMS, cfg.max_concurrent_streams),
                (setting::INITIAL_WINDOW_SIZE, cfg.stream_window),
                (setting::MAX_FRAME_SIZE, cfg.max_frame_size),
                (setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list_size),
            ],
        );
        let default = frame::DEFAULT_WINDOW as i64;
        if cfg.connection_window as i64 > default {
            frame::put_window_update(&mut out, 0, cfg.connection_window - frame::DEFAULT_WINDOW);
        }
        Conn {
            recv_window: (cfg.connection_window as i64).max(default),
            cfg,
            out,
            streams: FxHashMap::default(),
            last_id: 0,
            peer_max_frame: frame::MIN_MAX_FRAME as usize,
            peer_initial_window: default,
            send_window: default,
            unreleased: 0,
            dec: Decoder::new(4096),
            enc: Encoder::new(),
            partial: None,
            accepted: VecDeque::new(),
            goaway: false,
            blocked: Vec::new(),
            out_waiters: Vec::new(),
            owner: None,
            settings_seen: false,
            out_gen: 0,
        }
    }

    /// Streams being served.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The client's SETTINGS came (its preface is complete).
    pub fn settings_seen(&self) -> bool {
        self.settings_seen
    }

    pub fn last_stream(&self) -> u32 {
        self.last_id
    }

    /// Takes every complete frame from `buf`.
    pub fn recv(&mut self, buf: &mut BytesMut) -> Result<(), ConnError> {
        while let Some(h) = Head::parse(buf) {
            if h.len > self.cfg.max_frame_size as usize {
                return Err(conn_err(
                    code::FRAME_SIZE_ERROR,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                ));
            }
            if buf.len() < HEADER_LEN + h.len {
                buf.reserve(HEADER_LEN + h.len - buf.len());
                break;
            }
            if !self.settings_seen {
                if h.kind != kind::SETTINGS || h.has(flag::ACK) {
                    return Err(conn_err(
                        code::PROTOCOL_ERROR,
                        "the preface is not followed by SETTINGS",
                    ));
                }
                self.settings_seen = true;
            }
            if let Some(p) = &self.partial {
                if h.kind != kind::CONTINUATION || h.stream != p.stream {
                    return Err(conn_err(
                        code::PROTOCOL_ERROR,
                        "frame inside a header block",
                    ));
                }
            }
            if h.kind == kind::DATA {
                let mut f = buf.split_to(HEADER_LEN + h.len);
                f.advance(HEADER_LEN);
                self.data(h, f.freeze())?;
            } else {
                let r = self.control(h, &buf[HEADER_LEN..HEADER_LEN + h.len]);
                buf.advance(HEADER_LEN + h.len);
                r?;
            }
        }
        Ok(())
    }

    fn control(&mut self, h: Head, p: &[u8]) -> Result<(), ConnError> {
        match h.kind {
            kind::HEADERS => self.headers(h, p),
            kind::CONTINUATION => self.continuation(h, p),
            kind::PRIORITY => {
                if h.stream == 0 {
                    return Err(conn_err(code::PROTOCOL_ERROR, "PRIORITY on stream 0"));
                }
                if p.len() != 5 {
                    self.stream_error(h.stream, code::FRAME_SIZE_ERROR);
                } else if dependency(p) == h.stream {
                    self.stream_error(h.stream, code::PROTOCOL_ERROR);
                }
                Ok(())
            }
            kind::RST_STREAM => self.rst(h, p),
            kind::SETTINGS => self.settings(h, p),
            kind::PUSH_PROMISE => Err(conn_err(code::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            kind::PING => {
                if h.stream != 0 {
                    return Err(conn_err(code::PROTOCOL_ERROR, "PING on a stream"));
                }
                let data: &[u8; 8] = p
                    .try_into()
                    .map_err(|_| conn_err(code::FRAME_SIZE_ERROR, "PING of the wrong size"))?;
                if !h.has(flag::ACK) {
                    frame::put_ping_ack(&mut self.out, data);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if h.stream != 0 {
                    return Err(conn_err(code::PROTOCOL_ERROR, "GOAWAY on a stream"));
                }
                if p.len() < 8 {
                    return Err(conn_err(code::FRAME_SIZE_ERROR, "GOAWAY too short"));
                }
                Ok(())
            }
            kind::WINDOW_UPDATE => self.window_update(h, p),
            // Unknown kinds are ignored (RFC 9113 5.5).
            _ => Ok(()),
        }
    }

    fn data(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(conn_err(code::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let (body, pad) = unpad(h, &payload)?;
        let len = h.len as i64;
        if len > self.recv_window {
            return Err(conn_err(
                code::FLOW_CONTROL_ERROR,
                "DATA past the connection window",
            ));
        }
        self.recv_window -= len;
        if h.stream > self.last_id {
            return Err(conn_err(code::PROTOCOL_ERROR, "DATA on an idle stream"));
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            self.release_conn(h.len);
            frame::put_rst(&mut self.out, h.stream, code::STREAM_CLOSED);
            return Ok(());
        };
        if !s.recv_open {
            self.release_conn(h.len);
            self.stream_error(h.stream, code::STREAM_CLOSED);
            return Ok(());
        }
        if len > s.recv_window {
            self.release_conn(h.len);
            self.stream_error(h.stream, code::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        s.recv_window -= len;
        s.received += body.len() as u64;
        let end = h.has(flag::END_STREAM);
        if s.length
            .is_some_and(|n| s.received > n || end && s.received != n)
        {
            self.release_conn(h.len);
            self.stream_error(h.stream, code::PROTOCOL_ERROR);
            return Ok(());
        }
        // Padding and the pad length byte are nobody's to read.
        let overhead = h.len - body.len();
        if !body.is_empty() {
            s.inbound_len += body.len();
            s.inbound.push_back(payload.slice(pad..pad + body.len()));
        }
        if end {
            s.recv_open = false;
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        if overhead > 0 {
            self.release(h.stream, overhead);
        }
        Ok(())
    }

    fn headers(&mut self, h: Head, p: &[u8]) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(conn_err(code::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        if h.stream.is_multiple_of(2) {
            return Err(conn_err(
                code::PROTOCOL_ERROR,
                "HEADERS on a server stream id",
            ));
        }
        let (mut fragment, _) = unpad(h, p)?;
        let mut self_dependent = false;
        if h.has(flag::PRIORITY) {
            if fragment.len() < 5 {
                return Err(conn_err(
                    code::PROTOCOL_ERROR,
                    "HEADERS too short for its priority",
                ));
            }
            self_dependent = dependency(fragment) == h.stream;
            fragment = &fragment[5..];
        }
        let end_stream = h.has(flag::END_STREAM);
        if !h.has(flag::END_HEADERS) {
            self.partial = Some(Partial {
                stream: h.stream,
                end_stream,
                block: fragment.to_vec(),
                cost: fragment.len(),
                self_dependent,
            });
            return Ok(());
        }
        self.block(h.stream, end_stream, fragment, self_dependent)
    }

    fn continuation(&mut self, h: Head, p: &[u8]) -> Result<(), ConnError> {
        let Some(part) = &mut self.partial else {
            return Err(conn_err(
                code::PROTOCOL_ERROR,
                "CONTINUATION without HEADERS",
            ));
        };
        // A block that never ends (CONTINUATION flood) is cut well before
        // it could decode past the list limit; tiny frames count as 1 KB
        // each, as no client needs them.
        part.cost += p.len().max(1024);
        if part.cost > 2 * self.cfg.max_header_list_size as usize + 16_384 {
            return Err(conn_err(
                code::ENHANCE_YOUR_CALM,
                "header block too large or in too many pieces",
            ));
        }
        part.block.extend_from_slice(p);
        if !h.has(flag::END_HEADERS) {
            return Ok(());
        }
        let Some(part) = self.partial.take() else {
            return Ok(());
        };
        self.block(
            part.stream,
            part.end_stream,
            &part.block,
            part.self_dependent,
        )
    }

    /// A complete header block: a new request, or a stream's trailers.
    fn block(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        self_dependent: bool,
    ) -> Result<(), ConnError> {
        let trailers = id <= self.last_id;
        let (head, malformed) = self.decode(block, trailers)?;
        if trailers {
            let Some(s) = self.streams.get_mut(&id) else {
                return Err(conn_err(code::STREAM_CLOSED, "HEADERS on a closed stream"));
            };
            if !s.recv_open {
                self.stream_error(id, code::STREAM_CLOSED);
                return Ok(());
            }
            if !end_stream
                || malformed.is_some()
                || head.too_large
                || s.length.is_some_and(|n| n != s.received)
            {
                self.stream_error(id, code::PROTOCOL_ERROR);
                return Ok(());
            }
            s.trailers = Some(head.fields);
            s.recv_open = false;
            if let Some(w) = s.reader.take() {
                w.wake();
            }
            return Ok(());
        }
        self.last_id = id;
        if self.goaway {
            return Ok(());
        }
        if self_dependent || malformed.is_some() {
            frame::put_rst(&mut self.out, id, code::PROTOCOL_ERROR);
            return Ok(());
        }
        if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
            frame::put_rst(&mut self.out, id, code::REFUSED_STREAM);
            return Ok(());
        }
        let length = match head.fields.get("content-length") {
            Some(v) => crate::http::head::parse_length(v),
            None => None,
        };
        self.streams.insert(
            id,
            Stream {
                recv_open: !end_stream,
                send_open: true,
                reset: None,
                send_window: self.peer_initial_window,
                recv_window: self.cfg.stream_window as i64,
                unreleased: 0,
                inbound: VecDeque::new(),
                inbound_len: 0,
                trailers: None,
                length,
                received: 0,
                reader: None,
                writer: None,
                watcher: None,
                last_data: None,
                stalled_since: None,
                read_since: None,
                read_timed_out: false,
            },
        );
        if end_stream && length.is_some_and(|n| n != 0) {
            self.stream_error(id, code::PROTOCOL_ERROR);
            self.streams.remove(&id);
            return Ok(());
        }
        self.accepted.push_back(NewStream {
            id,
            head,
            end_stream,
        });
        Ok(())
    }

    /// Decodes a block into a request head (or trailers), with what makes
    /// it malformed (RFC 9113 8.1.1, 8.2, 8.3), if anything does.
    fn decode(
        &mut self,
        block: &[u8],
        trailers: bool,
    ) -> Result<(RequestHead, Option<&'static str>), ConnError> {
        let mut head = RequestHead::default();
        let mut malformed = None;
        let mut regular = false;
        let r = self.dec.decode(
            block,
            self.cfg.max_header_list_size as usize,
            |name, value| {
                if malformed.is_some() {
                    return;
                }
                if let Some(pseudo) = name.strip_prefix(b":") {
                    if regular || trailers {
                        malformed = Some("pseudo-header field after a regular one, or in trailers");
                        return;
                    }
                    let slot = match pseudo {
                        b"method" => &mut head.method,
                        b"scheme" => &mut head.scheme,
                        b"authority" => &mut head.authority,
                        b"path" => &mut head.path,
                        _ => {
                            malformed = Some("unknown pseudo-header field");
                            return;
                        }
                    };
                    if slot.is_some() {
                        malformed = Some("repeated pseudo-header field");
                        return;
                    }
                    *slot = Some(Bytes::copy_from_slice(value));
                    return;
                }
                regular = true;
                if !valid_name(name) {
                    malformed = Some("invalid field name");
                } else if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
                    malformed = Some("invalid field value");
                } else if is_connection_specific(name, value) {
                    // RFC 9113 8.2.2; an HTTP/1.1 member would act on them.
                    malformed = Some("connection-specific field");
                } else {
                    head.fields.append(name, value);
                }
            },
        );
        match r {
            Ok(()) => {}
            Err(DecodeError::TooLarge) => head.too_large = true,
            Err(DecodeError::Compression(why)) => {
                return Err(conn_err(code::COMPRESSION_ERROR, why))
            }
        }
        if !trailers && malformed.is_none() && !head.too_large {
            let connect = head.method.as_deref() == Some(b"CONNECT");
            if head.method.is_none()
                || !connect
                    && (head.scheme.is_none() || head.path.as_ref().is_none_or(|p| p.is_empty()))
            {
                malformed = Some("a required pseudo-header field is missing or empty");
            }
        }
        Ok((head, malformed))
    }

    fn rst(&mut self, h: Head, p: &[u8]) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(conn_err(code::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        let Ok(c) = <[u8; 4]>::try_from(p) else {
            return Err(conn_err(
                code::FRAME_SIZE_ERROR,
                "RST_STREAM of the wrong size",
            ));
        };
        if h.stream > self.last_id {
            return Err(conn_err(
                code::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        self.mark_reset(h.stream, u32::from_be_bytes(c));
        Ok(())
    }

    fn settings(&mut self, h: Head, p: &[u8]) -> Result<(), ConnError> {
        if h.stream != 0 {
            return Err(conn_err(code::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if h.has(flag::ACK) {
            if !p.is_empty() {
                return Err(conn_err(
                    code::FRAME_SIZE_ERROR,
                    "SETTINGS ACK with a payload",
                ));
            }
            return Ok(());
        }
        if !p.len().is_multiple_of(6) {
            return Err(conn_err(
                code::FRAME_SIZE_ERROR,
                "SETTINGS of the wrong size",
            ));
        }
        for s in p.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::HEADER_TABLE_SIZE => self.enc.set_peer_table_size(v as usize),
                setting::ENABLE_PUSH if v > 1 => {
                    return Err(conn_err(
                        code::PROTOCOL_ERROR,
                        "SETTINGS_ENABLE_PUSH not 0 or 1",
                    ));
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if v as i64 > MAX_WINDOW {
                        return Err(conn_err(
                            code::FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE too large",
                        ));
                    }
                    let delta = v as i64 - self.peer_initial_window;
                    self.peer_initial_window = v as i64;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > MAX_WINDOW {
                            return Err(conn_err(
                                code::FLOW_CONTROL_ERROR,
                                "a stream window passed 2^31-1",
                            ));
                        }
                        if delta > 0 {
                            if let Some(w) = s.writer.take() {
                                w.wake();
                            }
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME..=frame::MAX_MAX_FRAME).contains(&v) {
                        return Err(conn_err(
                            code::PROTOCOL_ERROR,
                            "SETTINGS_MAX_FRAME_SIZE out of range",
                        ));
                    }
                    self.peer_max_frame = v as usize;
                }
                _ => {}
            }
        }
        frame::put_settings_ack(&mut self.out);
        Ok(())
    }

    fn window_update(&mut self, h: Head, p: &[u8]) -> Result<(), ConnError> {
        let Ok(b) = <[u8; 4]>::try_from(p) else {
            return Err(conn_err(
                code::FRAME_SIZE_ERROR,
                "WINDOW_UPDATE of the wrong size",
            ));
        };
        let inc = (u32::from_be_bytes(b) & 0x7fff_ffff) as i64;
        if h.stream == 0 {
            if inc == 0 {
                return Err(conn_err(code::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
            }
            self.send_window += inc;
            if self.send_window > MAX_WINDOW {
                return Err(conn_err(
                    code::FLOW_CONTROL_ERROR,
                    "the connection window passed 2^31-1",
                ));
            }
            for id in self.blocked.drain(..) {
                if let Some(w) = self.streams.get_mut(&id).and_then(|s| s.writer.take()) {
                    w.wake();
                }
            }
            return Ok(());
        }
        if h.stream > self.last_id {
            return Err(conn_err(
                code::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            return Ok(());
        };
        if inc == 0 {
            self.stream_error(h.stream, code::PROTOCOL_ERROR);
            return Ok(());
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            self.stream_error(h.stream, code::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        if let Some(w) = s.writer.take() {
            w.wake();
        }
        Ok(())
    }

    /// Resets a stream for a protocol error of its own.
    fn stream_error(&mut self, id: u32, c: u32) {
        frame::put_rst(&mut self.out, id, c);
        if let Some(s) = self.streams.get_mut(&id) {
            s.send_open = false;
        }
        self.mark_reset(id, c);
    }

    /// The stream ends abnormally: its task sees `Reset` on its next
    /// read or write, and what it did not read returns to the window.
    fn mark_reset(&mut self, id: u32, c: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.recv_open = false;
        s.send_open = false;
        s.reset.get_or_insert(c);
        let unread = std::mem::take(&mut s.inbound_len);
        s.inbound.clear();
        for w in [s.reader.take(), s.writer.take(), s.watcher.take()]
            .into_iter()
            .flatten()
        {
            w.wake();
        }
        self.release_conn(unread);
    }

    /// Gives `n` consumed bytes back to the connection window.
    fn release_conn(&mut self, n: usize) {
        self.unreleased += n as u32;
        if self.unreleased >= self.cfg.connection_window / 2 {
            frame::put_window_update(&mut self.out, 0, self.unreleased);
            self.recv_window += self.unreleased as i64;
            self.unreleased = 0;
            // A stream task may be the one consuming: the client waits
            // for this frame, so it must not wait for other output.
            self.wake_owner();
        }
    }

    /// `n` bytes of a stream's DATA were consumed: both windows get them
    /// back, in batches of half a window.
    pub fn release(&mut self, id: u32, n: usize) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.unreleased += n as u32;
            if s.recv_open && s.unreleased >= self.cfg.stream_window / 2 {
                frame::put_window_update(&mut self.out, id, s.unreleased);
                s.recv_window += s.unreleased as i64;
                s.unreleased = 0;
                if let Some(w) = &self.owner {
                    w.wake_by_ref();
                }
            }
        }
        self.release_conn(n);
    }

    /// The next piece of a stream's request body: `None` at its end.
    pub fn poll_data(
        &mut self,
        id: u32,
        cx: &Context<'_>,
    ) -> Poll<Option<Result<Bytes, RecvError>>> {
        let Some(s) = self.streams.get_mut(&id) else {
            return Poll::Ready(Some(Err(RecvError::Reset(code::CANCEL))));
        };
        s.read_since = None;
        if let Some(b) = s.inbound.pop_front() {
            // The window reopens as the body moves on: the stream holds at
            // most what the client may send, its reader one piece more.
            s.inbound_len -= b.len();
            self.release(id, b.len());
            return Poll::Ready(Some(Ok(b)));
        }
        if let Some(c) = s.reset {
            return Poll::Ready(Some(Err(RecvError::Reset(c))));
        }
        if !s.recv_open {
            return Poll::Ready(None);
        }
        if s.read_timed_out {
            return Poll::Ready(Some(Err(RecvError::Timeout)));
        }
        s.reader = Some(cx.waker().clone());
        s.read_since = Some(crate::clock::now_ms());
        Poll::Pending
    }

    /// Request bodies whose reader has waited for DATA since `before`
    /// (`clock` ms) end with `RecvError::Timeout` (`client_body`, as on
    /// HTTP/1: the client gets 408 if its response has not started).
    /// Returns how many.
    pub fn expire_readers(&mut self, before: u64) -> usize {
        let mut n = 0;
        for s in self.streams.values_mut() {
            if s.recv_open && !s.read_timed_out && s.read_since.is_some_and(|t| t <= before) {
                s.read_timed_out = true;
                if let Some(w) = s.reader.take() {
                    w.wake();
                }
                n += 1;
            }
        }
        n
    }

    /// The request's trailer fields, once its body has ended.
    pub fn take_trailers(&mut self, id: u32) -> Option<Fields> {
        self.streams.get_mut(&id)?.trailers.take()
    }

    /// Ready when the client reset the stream (or the connection ended).
    pub fn poll_reset(&mut self, id: u32, cx: &Context<'_>) -> Poll<Reset> {
        match self.streams.get_mut(&id) {
            None => Poll::Ready(Reset(code::CANCEL)),
            Some(s) => match s.reset {
                Some(c) => Poll::Ready(Reset(c)),
                None => {
                    s.watcher = Some(cx.waker().clone());
                    Poll::Pending
                }
            },
        }
    }

    fn sendable(streams: &mut FxHashMap<u32, Stream>, id: u32) -> Result<&mut Stream, Reset> {
        match streams.get_mut(&id) {
            Some(s) if s.send_open => Ok(s),
            Some(s) => Err(Reset(s.reset.unwrap_or(code::STREAM_CLOSED))),
            None => Err(Reset(code::CANCEL)),
        }
    }

    /// Sends a response head (`status`) or trailers (`None`), encoded
    /// straight into the output; `end` ends the stream with it. Field
    /// names are lowercased on the way; the caller leaves out fields HTTP/2
    /// cannot carry.
    pub fn send_head<'a>(
        &mut self,
        id: u32,
        status: Option<u16>,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        end: bool,
    ) -> Result<(), Reset> {
        let s = Self::sendable(&mut self.streams, id)?;
        if end {
            s.send_open = false;
        }
        let at = self.out.len();
        self.out.extend_from_slice(&[0; HEADER_LEN]);
        self.enc.begin(&mut self.out);
        if let Some(st) = status {
            self.enc.status(st, &mut self.out);
        }
        let mut lower = Vec::new();
        for (name, value) in fields {
            if name.iter().any(u8::is_ascii_uppercase) {
                lower.clear();
                lower.extend(name.iter().map(u8::to_ascii_lowercase));
                self.enc.field(&lower, value, &mut self.out);
            } else {
                self.enc.field(name, value, &mut self.out);
            }
        }
        frame::finish_headers(&mut self.out, at, id, end, self.peer_max_frame);
        self.wake_owner();
        Ok(())
    }

    /// Sends as much of `data` as the windows and the output allow, in
    /// DATA frames; the last one ends the stream when `end` and all of
    /// `data` went. Pending (woken later) when nothing could go.
    pub fn poll_send(
        &mut self,
        id: u32,
        cx: &Context<'_>,
        data: &[u8],
        end: bool,
    ) -> Poll<Result<usize, Reset>> {
        if self.out.len() >= OUT_HIGH {
            self.out_waiters.push(cx.waker().clone());
            return Poll::Pending;
        }
        let conn_window = self.send_window;
        let max_frame = self.peer_max_frame;
        let s = match Self::sendable(&mut self.streams, id) {
            Ok(s) => s,
            Err(r) => return Poll::Ready(Err(r)),
        };
        let room = conn_window.min(s.send_window).max(0) as usize;
        let n = data.len().min(room).min(OUT_HIGH);
        if n == 0 && !data.is_empty() {
            s.writer = Some(cx.waker().clone());
            s.stalled_since.get_or_insert_with(crate::clock::now_ms);
            if conn_window <= 0 {
                self.blocked.push(id);
            }
            return Poll::Pending;
        }
        s.send_window -= n as i64;
        s.stalled_since = None;
        let last = end && n == data.len();
        if last {
            s.send_open = false;
        }
        self.send_window -= n as i64;
        if n == 0 {
            frame::put_data(&mut self.out, id, &[], last);
        }
        let mut rest = &data[..n];
        while !rest.is_empty() {
            let k = rest.len().min(max_frame);
            s.last_data = Some((self.out.len(), self.out_gen));
            frame::put_data(&mut self.out, id, &rest[..k], last && k == rest.len());
            rest = &rest[k..];
        }
        self.wake_owner();
        Poll::Ready(Ok(n))
    }

    /// Ends our side of the stream: END_STREAM goes on its last DATA
    /// frame if that is still unsent, else in an empty DATA frame.
    pub fn end_stream(&mut self, id: u32) -> Result<(), Reset> {
        let gen = self.out_gen;
        let s = Self::sendable(&mut self.streams, id)?;
        s.send_open = false;
        match s.last_data {
            Some((at, g)) if g == gen && at + HEADER_LEN <= self.out.len() => {
                self.out[at + 4] |= flag::END_STREAM;
            }
            _ => frame::put_data(&mut self.out, id, &[], true),
        }
        self.wake_owner();
        Ok(())
    }

    /// Resets (CANCEL) the streams whose response has waited for the
    /// client's window since `before` (`clock` ms): a client that never
    /// opens its window cannot hold a response, and the member behind it,
    /// forever. Returns how many.
    pub fn expire_stalled(&mut self, before: u64) -> usize {
        let stale: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| s.send_open && s.stalled_since.is_some_and(|t| t <= before))
            .map(|(id, _)| *id)
            .collect();
        for &id in &stale {
            self.stream_error(id, code::CANCEL);
        }
        if !stale.is_empty() {
            self.wake_owner();
        }
        stale.len()
    }

    /// Resets a stream from our side (its response failed mid-way).
    pub fn reset(&mut self, id: u32, c: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.send_open || s.recv_open)
        {
            self.stream_error(id, c);
            self.wake_owner();
        }
    }

    /// The task serving the stream is done with it: a response it did not
    /// finish is cut (CANCEL); a request body nobody read is refused with
    /// NO_ERROR (RFC 9113 8.1); the stream is forgotten.
    pub fn finish(&mut self, id: u32) {
        let Some(s) = self.streams.remove(&id) else {
            return;
        };
        if s.send_open {
            frame::put_rst(&mut self.out, id, code::CANCEL);
        } else if s.recv_open {
            frame::put_rst(&mut self.out, id, code::NO_ERROR);
        }
        self.release_conn(s.inbound_len);
        self.wake_owner();
    }

    /// Sends GOAWAY: streams up to the last one seen are still served.
    pub fn go_away(&mut self, c: u32) {
        if !self.goaway {
            self.goaway = true;
            frame::put_goaway(&mut self.out, self.last_id, c);
            self.wake_owner();
        }
    }

    /// Every stream sees `Reset` (the connection is over).
    pub fn reset_all(&mut self) {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            self.mark_reset(id, code::CANCEL);
        }
    }

    /// The owner took `n` bytes from the front of `out` (written).
    pub fn consumed(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.out_gen += 1;
        if n >= self.out.len() {
            self.out.clear();
            // An idle connection keeps no buffer; a busy one keeps a
            // moderate one.
            let cap = self.out.capacity();
            if cap > 64 * 1024 || self.streams.is_empty() && cap > 4096 {
                self.out = Vec::new();
            }
        } else {
            self.out.drain(..n);
        }
        if self.out.len() < OUT_HIGH {
            for w in self.out_waiters.drain(..) {
                w.wake();
            }
        }
    }

    fn wake_owner(&mut self) {
        if let Some(w) = &self.owner {
            w.wake_by_ref();
        }
    }
}

/// A frame's payload without its padding (RFC 9113 6.1), and where the
/// payload starts.
fn unpad(h: Head, p: &[u8]) -> Result<(&[u8], usize), ConnError> {
    if !h.has(flag::PADDED) {
        return Ok((p, 0));
    }
    let Some((&pad, rest)) = p.split_first() else {
        return Err(conn_err(
            code::PROTOCOL_ERROR,
            "padded frame without a pad length",
        ));
    };
    if pad as usize > rest.len() {
        return Err(conn_err(
            code::PROTOCOL_ERROR,
            "padding longer than the frame",
        ));
    }
    Ok((&rest[..rest.len() - pad as usize], 1))
}

/// The stream a priority block (HEADERS or PRIORITY) depends on.
fn dependency(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff
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

/// A lowercase token (RFC 9110 5.1; RFC 9113 8.2.1 refuses uppercase).
fn valid_name(n: &[u8]) -> bool {
    !n.is_empty() && n.iter().all(|&b| is_tchar(b) && !b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::frame::PREFACE;

    fn cfg() -> Config {
        Config {
            max_concurrent_streams: 2,
            stream_window: 65_535,
            connection_window: 1 << 20,
            max_frame_size: 16_384,
            max_header_list_size: 4096,
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
        assert_eq!(c.expire_readers(0), 0, "not waiting that long yet");
        let now = crate::clock::now_ms();
        assert_eq!(c.expire_readers(now + 1), 1);
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
}
