//! HTTP/2 flood accounting: abuse the protocol allows but no client needs
//! (CVE-2023-44487 rapid reset, SETTINGS/PING/PRIORITY floods, empty
//! frames) is counted from the frame headers a client sends, before h2
//! decodes them. Past a budget per window the watch trips: it sets a shared
//! flag, and the connection's owner (`proxy::client_h2_conn`) stops reading and ends the
//! connection with GOAWAY(ENHANCE_YOUR_CALM), like HAProxy's "glitches".

use std::cell::Cell;
use std::rc::Rc;

use crate::clock::now_ms;
use crate::http2::frame::{flag, kind, PREFACE};

/// Length of the client connection preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
/// which comes before the first frame and is skipped.
pub const PREFACE_LEN: usize = PREFACE.len();

/// Counts the frames a client sends, from their 9-byte headers, and trips
/// when a budget per window is spent.
pub struct FrameWatch {
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
    window_start: u64,
    resets: u32,
    control: u32,
    max_resets: u32,
    max_control: u32,
    window_ms: u64,
    /// Why the watch tripped, once it has; it never resets.
    pub tripped: Rc<Cell<Option<&'static str>>>,
}

impl FrameWatch {
    /// A watch for a connection whose preface is still to come: at most
    /// `max_resets` RST_STREAM and `max_control` control or empty frames
    /// per `window_ms`; `tripped` is set when either is exceeded.
    pub fn new(
        max_resets: u32,
        max_control: u32,
        window_ms: u64,
        tripped: Rc<Cell<Option<&'static str>>>,
    ) -> FrameWatch {
        FrameWatch {
            preface_left: PREFACE_LEN,
            head: [0; 9],
            head_len: 0,
            skip: 0,
            window_start: now_ms(),
            resets: 0,
            control: 0,
            max_resets,
            max_control,
            window_ms,
            tripped,
        }
    }

    /// Shows the watch the next bytes the client sent, in any split.
    pub fn scan(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let n = if self.preface_left > 0 {
                let n = self.preface_left.min(data.len());
                self.preface_left -= n;
                n
            } else if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                n
            } else {
                let n = (9 - self.head_len).min(data.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&data[..n]);
                self.head_len += n;
                if self.head_len == 9 {
                    self.head_len = 0;
                    let h = self.head;
                    let len = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    self.skip = len;
                    self.frame(h[3], h[4], len);
                }
                n
            };
            data = &data[n..];
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, len: usize) {
        let now = now_ms();
        if now.saturating_sub(self.window_start) >= self.window_ms {
            self.window_start = now;
            self.resets = 0;
            self.control = 0;
        }
        match kind {
            kind::RST_STREAM => self.resets += 1,
            kind::SETTINGS | kind::PING | kind::PRIORITY => self.control += 1,
            // Empty frames that end nothing do nothing but cost work.
            kind::DATA if len == 0 && flags & flag::END_STREAM == 0 => self.control += 1,
            kind::HEADERS | kind::CONTINUATION if len == 0 && flags & flag::END_HEADERS == 0 => {
                self.control += 1
            }
            _ => {}
        }
        if self.resets > self.max_resets {
            self.tripped
                .set(Some("too many streams reset by the client (rapid reset)"));
        } else if self.control > self.max_control {
            self.tripped.set(Some(
                "too many SETTINGS/PING/PRIORITY/empty frames (control-frame flood)",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(resets: u32, control: u32) -> FrameWatch {
        FrameWatch::new(resets, control, 60_000, Rc::new(Cell::new(None)))
    }

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut f = vec![
            (n >> 16) as u8,
            (n >> 8) as u8,
            n as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn counts_frames_split_across_reads() {
        let mut w = watch(3, 100);
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend(frame(kind::SETTINGS, 0, &[0; 6]));
        // A DATA frame whose payload looks like frame headers must not count.
        wire.extend(frame(kind::DATA, 0, &frame(kind::RST_STREAM, 0, &[0; 4])));
        for _ in 0..3 {
            wire.extend(frame(kind::RST_STREAM, 0, &[0, 0, 0, 8]));
        }
        for b in wire.chunks(5) {
            w.scan(b);
        }
        assert_eq!((w.resets, w.control), (3, 1));
        assert!(w.tripped.get().is_none());
        w.scan(&frame(kind::RST_STREAM, 0, &[0, 0, 0, 8]));
        assert!(w.tripped.get().is_some());
    }

    #[test]
    fn empty_frames_are_control_frames() {
        let mut w = watch(100, 2);
        w.scan(&[0; PREFACE_LEN]);
        w.scan(&frame(kind::DATA, 0, &[]));
        w.scan(&frame(kind::DATA, flag::END_STREAM, &[]));
        w.scan(&frame(kind::PING, 0, &[0; 8]));
        assert_eq!(w.control, 2);
        assert!(w.tripped.get().is_none());
        w.scan(&frame(kind::PRIORITY, 0, &[0; 5]));
        assert!(w.tripped.get().is_some());
    }
}
