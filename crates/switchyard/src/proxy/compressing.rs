//! The compression stage: the client's Accept-Encoding is read with the
//! request head, the member's response head decides whether its body is
//! encoded, and the body is encoded piece by piece on its way to the
//! client (for every client and member protocol: the framing is restated
//! at the edge). The machinery is in `compress/`.

use super::exchange::Exchange;
use super::hooks::{BodyEdit, Hooks, Verdict};
use crate::compress::encoder::Encoder;
use crate::compress::{self, negotiate, Coding};
use crate::http::message::{Framing, Method, Request, Response};
use crate::log;
use crate::stats;

#[derive(Default)]
pub struct Compress {
    /// What the client accepts of ours (None: identity).
    wanted: Option<Coding>,
    head_request: bool,
    /// Set once the response is being encoded.
    active: Option<(Coding, Encoder)>,
    bytes_in: u64,
    bytes_out: u64,
}

impl Hooks for Compress {
    fn on_request_head(&mut self, x: &mut Exchange<'_>, req: &mut Request) -> Verdict {
        if let Some(s) = x.compression {
            self.wanted = negotiate::choose(req.head.all("accept-encoding"), &s.algorithms);
            self.head_request = req.method == Method::Head;
        }
        Verdict::Continue
    }

    fn on_response_head(&mut self, x: &mut Exchange<'_>, resp: &mut Response) {
        let Some(s) = x.compression else {
            return;
        };
        if !compress::eligible(self.head_request, resp, s) {
            return;
        }
        let Some(coding) = self.wanted else {
            // Sent as it is to this client, but another would get it
            // encoded: caches downstream (and ours) must know.
            compress::add_vary(resp);
            return;
        };
        let size = match resp.head.framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        match Encoder::new(coding, s, size) {
            Ok(e) => {
                compress::rewrite_head(resp, coding);
                self.active = Some((coding, e));
            }
            // Sent as it is: never an error for the client.
            Err(e) => log::warn(format_args!(
                "vserver {}: {} encoder failed to start, response sent uncompressed: {e}",
                x.vs.name,
                coding.token()
            )),
        }
    }

    fn on_response_body(
        &mut self,
        x: &mut Exchange<'_>,
        data: &[u8],
        end: bool,
        out: &mut Vec<u8>,
    ) -> BodyEdit {
        let Some((coding, e)) = &mut self.active else {
            return BodyEdit::Pass;
        };
        let start = out.len();
        let mut r = e.write(data, out);
        if end && r.is_ok() {
            r = e.finish(out);
        }
        self.bytes_in += data.len() as u64;
        self.bytes_out += (out.len() - start) as u64;
        if let Err(err) = r {
            // The head is gone with Content-Encoding set: cutting the body
            // is all that is left, and it cannot happen with valid input.
            log::warn(format_args!(
                "vserver {}: {} encoder failed: {err}",
                x.vs.name,
                coding.token()
            ));
            out.truncate(start);
            self.active = None;
            return BodyEdit::Replaced;
        }
        if end {
            let c = x.vs.counters.local();
            let i = coding.index();
            let [n, bin, bout] = [
                [
                    &c.compressed_gzip,
                    &c.compress_bytes_in_gzip,
                    &c.compress_bytes_out_gzip,
                ],
                [
                    &c.compressed_br,
                    &c.compress_bytes_in_br,
                    &c.compress_bytes_out_br,
                ],
                [
                    &c.compressed_zstd,
                    &c.compress_bytes_in_zstd,
                    &c.compress_bytes_out_zstd,
                ],
            ][i];
            stats::inc(n);
            stats::add(bin, self.bytes_in);
            stats::add(bout, self.bytes_out);
        }
        BodyEdit::Replaced
    }

    fn reads_response_body(&self) -> bool {
        self.active.is_some()
    }

    fn on_response_flush(&mut self, _x: &mut Exchange<'_>, out: &mut Vec<u8>) {
        if let Some((_, e)) = &mut self.active {
            let start = out.len();
            if e.flush(out).is_ok() {
                self.bytes_out += (out.len() - start) as u64;
            }
        }
    }
}
