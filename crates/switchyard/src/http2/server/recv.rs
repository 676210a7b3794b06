//! Frames from the client: each kind checked as RFC 9113 says, requests
//! decoded and handed out, DATA queued for its stream, windows updated.

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

use super::{conn_err, Conn, ConnError, NewStream, Partial, RequestHead, Stream};
use crate::http::request_fields::Collector;
use crate::http2::frame::{self, code, flag, kind, setting, Head, HEADER_LEN, MAX_WINDOW};
use crate::http2::hpack::DecodeError;

impl Conn {
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
                waited_ms: 0,
                read_expired: None,
                tunnel: false,
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
        let mut c = Collector::new(trailers);
        let r = self.dec.decode(
            block,
            self.cfg.max_header_list_size as usize,
            |name, value| c.field(name, value),
        );
        let too_large = match r {
            Ok(()) => false,
            Err(DecodeError::TooLarge) => true,
            Err(DecodeError::Compression(why)) => {
                return Err(conn_err(code::COMPRESSION_ERROR, why))
            }
        };
        let (head, malformed) = c.finish(too_large, self.cfg.enable_connect_protocol);
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
