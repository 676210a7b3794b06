//! Reading a complete message head off a connection (client or member),
//! under the size limits and a coarse deadline.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::idle::IdleWatch;
use crate::http::head::{HeadError, HeadScanner};

/// Why reading a head stopped.
pub(super) enum ReadHead {
    /// The peer closed (or reset) the connection; `partial` if it had sent part of a head.
    Closed {
        partial: bool,
    },
    Timeout {
        partial: bool,
    },
    Bad(HeadError),
}

/// Reads until `buf` holds a complete head; returns the head's bytes.
pub(super) async fn read_head<R: AsyncRead + Unpin>(
    src: &mut R,
    buf: &mut BytesMut,
    max_line: usize,
    max_head: usize,
    timer: &IdleWatch,
    deadline_ms: u64,
) -> Result<bytes::Bytes, ReadHead> {
    let mut scanner = HeadScanner::default();
    loop {
        match scanner.scan(buf, max_line, max_head) {
            Ok(Some((start, end))) => {
                let head = buf.split_to(end).freeze();
                return Ok(head.slice(start..));
            }
            Ok(None) => {}
            Err(e) => return Err(ReadHead::Bad(e)),
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(8192);
        }
        let partial = !buf.is_empty();
        match timer.within(deadline_ms, src.read_buf(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(ReadHead::Closed { partial }),
            Ok(Ok(_)) => {}
            Err(_) => return Err(ReadHead::Timeout { partial }),
        }
    }
}
