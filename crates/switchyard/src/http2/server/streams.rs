//! What the tasks serving the streams do: read a request body, send a
//! response head, DATA and trailers as the windows allow, reset, finish;
//! and the expiry of streams that wait too long on the client.

use std::task::{Context, Poll};

use bytes::Bytes;
use switchyard_fasthash::FxHashMap;

use super::{Conn, RecvError, Reset, Stream, OUT_HIGH};
use crate::http::body::BodyPace;
use crate::http::message::Fields;
use crate::http2::frame::{self, code, flag, HEADER_LEN};

impl Conn {
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
        if let Some(t) = s.read_since.take() {
            let now = crate::clock::now_ms();
            s.waited_ms = s.waited_ms.saturating_add(now.saturating_sub(t));
        }
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
        if let Some(e) = s.read_expired {
            return Poll::Ready(Some(Err(e)));
        }
        s.reader = Some(cx.waker().clone());
        s.read_since = Some(crate::clock::now_ms());
        Poll::Pending
    }

    /// Request bodies whose reader has waited for DATA past what `pace`
    /// allows at `now` (`clock` ms) end: `RecvError::Timeout` after a
    /// pause of `client_body`, `RecvError::TooSlow` under the minimum
    /// rate after the grace or past the deadline (as on HTTP/1: the
    /// client gets 408 if its response has not started). Only the time
    /// the reader waited counts, not time the member took to accept the
    /// body. Returns how many ended.
    pub fn expire_readers(&mut self, now: u64, pace: &BodyPace) -> usize {
        let mut n = 0;
        for s in self.streams.values_mut() {
            let Some(since) = s
                .read_since
                .filter(|_| s.recv_open && s.read_expired.is_none() && !s.tunnel)
            else {
                continue;
            };
            let (allow, paced) = pace.allowance(s.waited_ms, s.received);
            if now.saturating_sub(since) >= allow {
                s.read_expired = Some(if paced {
                    RecvError::TooSlow
                } else {
                    RecvError::Timeout
                });
                if let Some(w) = s.reader.take() {
                    w.wake();
                }
                n += 1;
            }
        }
        n
    }

    /// The stream carries a tunnel from now on: its reader may wait for
    /// DATA as long as the tunnel's idle timeout allows (the owner's), not
    /// as long as a request body's pace does.
    pub fn set_tunnel(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.tunnel = true;
            s.read_since = None;
            s.read_expired = None;
        }
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
        // HTTP/1 members mostly send "Content-Type": lowered on the
        // stack, not in an allocation per response.
        let mut lower = [0u8; 64];
        for (name, value) in fields {
            if name.iter().any(u8::is_ascii_uppercase) {
                let mut long = Vec::new();
                let low: &mut [u8] = match lower.get_mut(..name.len()) {
                    Some(l) => l,
                    None => {
                        long.resize(name.len(), 0);
                        &mut long
                    }
                };
                for (d, s) in low.iter_mut().zip(name) {
                    *d = s.to_ascii_lowercase();
                }
                self.enc.field(low, value, &mut self.out);
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
}
