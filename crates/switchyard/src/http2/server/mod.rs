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
//! owner (`proxy::client_h2_conn`) only has to move bytes and start tasks.

use std::collections::VecDeque;
use std::task::Waker;

use bytes::Bytes;
use switchyard_fasthash::FxHashMap;

use super::frame::{self, setting};
use super::hpack::{Decoder, Encoder};
use crate::http::message::Fields;

/// What we announce and enforce.
#[derive(Debug, Clone)]
pub struct Config {
    pub max_concurrent_streams: u32,
    pub stream_window: u32,
    pub connection_window: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 is announced and the extended
    /// CONNECT of RFC 8441 (`:protocol`) accepted; without it `:protocol`
    /// makes a request malformed.
    pub enable_connect_protocol: bool,
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

pub use crate::http::request_fields::RequestHead;

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
    /// The body came under its minimum rate, or not within its deadline
    /// (`BodyPace`, see `expire_readers`).
    TooSlow,
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
    /// Since when the request body's reader has waited for DATA, how
    /// long it waited before (ms in all), and why it waited too long
    /// (see `expire_readers`).
    read_since: Option<u64>,
    waited_ms: u64,
    read_expired: Option<RecvError>,
    /// The stream carries a tunnel (an extended CONNECT): its DATA may
    /// pause for as long as the tunnel's own idle timeout allows, so the
    /// body pace (`expire_readers`) does not apply.
    tunnel: bool,
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
    /// The largest frame the client takes now (its SETTINGS_MAX_FRAME_SIZE,
    /// 16,384 until it says more): what every frame written after its
    /// SETTINGS must fit.
    pub fn peer_max_frame(&self) -> usize {
        self.peer_max_frame
    }

    /// A connection whose preface was read; our SETTINGS go out first.
    pub fn new(cfg: Config) -> Conn {
        let mut out = Vec::with_capacity(256);
        let settings = [
            (setting::ENABLE_PUSH, 0),
            (setting::MAX_CONCURRENT_STREAMS, cfg.max_concurrent_streams),
            (setting::INITIAL_WINDOW_SIZE, cfg.stream_window),
            (setting::MAX_FRAME_SIZE, cfg.max_frame_size),
            (setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list_size),
            (setting::ENABLE_CONNECT_PROTOCOL, 1),
        ];
        let n = settings.len() - usize::from(!cfg.enable_connect_protocol);
        frame::put_settings(&mut out, &settings[..n]);
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

    fn wake_owner(&mut self) {
        if let Some(w) = &self.owner {
            w.wake_by_ref();
        }
    }
}

mod recv;
mod streams;

#[cfg(test)]
mod tests;
