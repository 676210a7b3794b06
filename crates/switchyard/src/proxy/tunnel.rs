//! Byte tunnel for upgraded connections (WebSocket and other Upgrade
//! protocols): both directions copied until both sides close, or until the
//! tunnel has been idle for its timeout.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub struct Totals {
    pub to_client: u64,
    pub to_server: u64,
}

/// `head` is the 101 response to send first; `cbuf` / `ubuf` hold bytes
/// already read from each side that belong to the tunnel. Either side may be
/// TLS, so neither is split: `select!` drops the losing read before a branch
/// writes, and reads on either stream are cancel-safe.
pub async fn run<C: AsyncRead + AsyncWrite + Unpin, S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    cbuf: &mut BytesMut,
    server: &mut S,
    ubuf: &mut BytesMut,
    mut head: Vec<u8>,
    idle: Duration,
) -> Totals {
    let mut t = Totals {
        to_client: ubuf.len() as u64,
        to_server: cbuf.len() as u64,
    };
    head.extend_from_slice(ubuf);
    ubuf.clear();
    if client.write_all(&head).await.is_err() || client.flush().await.is_err() {
        return t;
    }
    if !cbuf.is_empty() {
        if server.write_all(cbuf).await.is_err() || server.flush().await.is_err() {
            return t;
        }
        cbuf.clear();
    }
    let mut a = vec![0u8; 16 * 1024];
    let mut b = vec![0u8; 16 * 1024];
    let (mut c_open, mut s_open) = (true, true);
    while c_open || s_open {
        tokio::select! {
            r = client.read(&mut a), if c_open => match r {
                Ok(0) | Err(_) => {
                    c_open = false;
                    let _ = server.shutdown().await;
                }
                Ok(n) => {
                    if server.write_all(&a[..n]).await.is_err() || server.flush().await.is_err() {
                        break;
                    }
                    t.to_server += n as u64;
                }
            },
            r = server.read(&mut b), if s_open => match r {
                Ok(0) | Err(_) => {
                    s_open = false;
                    let _ = client.shutdown().await;
                }
                Ok(n) => {
                    if client.write_all(&b[..n]).await.is_err()
                        || client.flush().await.is_err()
                    {
                        break;
                    }
                    t.to_client += n as u64;
                }
            },
            _ = tokio::time::sleep(idle) => break,
        }
    }
    t
}
