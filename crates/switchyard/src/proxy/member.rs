//! The member side of an exchange: HTTP/2 connections to members of
//! `protocol = "h2"` pools, and the sources and sinks that move bodies
//! to and from HTTP/2 streams (members and clients alike).
//!
//! Each worker keeps one HTTP/2 connection per member and multiplexes every
//! stream for that member over it (the member's SETTINGS_MAX_CONCURRENT_STREAMS
//! makes streams wait for a slot). HTTP/1.1 members are reached through
//! `upstream` (connect) and `idle` (reuse).
//!
//! Runs on the owning worker only (`RefCell`, no locks).

use std::cell::RefCell;
use std::rc::Rc;

use std::future::poll_fn;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{Reason, RecvStream, SendStream};
use switchyard_fasthash::FxHashMap;

use super::upstream::{self, ConnectError};
use crate::balance::{AdminState, MemberState};
use crate::config::snapshot::Member;
use crate::http::body::{self, BodyError, Sink};
use crate::http::h2_message::{trailers_from_h2, trailers_to_h2};
use crate::http::message::Fields;
use crate::log;
use crate::tls::upstream::UpstreamTls;

/// The worker's HTTP/2 connections to members, by member.
#[derive(Default)]
pub struct H2Conns {
    conns: RefCell<FxHashMap<usize, H2Conn>>,
}

struct H2Conn {
    /// Held so the key (the state's address) cannot be reused by another
    /// member while this entry lives.
    state: Arc<MemberState>,
    send: SendRequest<Bytes>,
    settings: Rc<PeerSettings>,
    last_used: Instant,
    idle_timeout: Duration,
}

/// Whether the member's SETTINGS have been read. A member sends them first
/// (RFC 9113 3.4), so once a PING it answers comes back they are known; h2
/// has no other way to wait for them. Only an extended CONNECT needs them
/// (RFC 8441 4: `:protocol` only after SETTINGS_ENABLE_CONNECT_PROTOCOL),
/// so the PING goes out for the first one only, never for plain requests.
struct PeerSettings {
    known: tokio::sync::OnceCell<()>,
    ping: RefCell<Option<h2::PingPong>>,
}

impl PeerSettings {
    async fn wait(&self) {
        self.known
            .get_or_init(|| async {
                let ping = self.ping.borrow_mut().take();
                if let Some(mut p) = ping {
                    // An error means the connection is gone: the stream
                    // that follows fails with the reason.
                    let _ = p.ping(h2::Ping::opaque()).await;
                }
            })
            .await;
    }
}

fn key(m: &Member) -> usize {
    Arc::as_ptr(&m.state) as usize
}

impl H2Conns {
    /// A connection to `m` ready for a new stream: the open one, or a new
    /// one when there is none or it has failed. The bool says "reused".
    pub async fn ready(
        &self,
        m: &Member,
        dial: (Option<&UpstreamTls>, Option<IpAddr>),
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Result<(SendRequest<Bytes>, bool), ConnectError> {
        let open = self.conns.borrow_mut().get_mut(&key(m)).map(|c| {
            c.last_used = Instant::now();
            c.send.clone()
        });
        if let Some(s) = open {
            match s.ready().await {
                Ok(s) => return Ok((s, true)),
                Err(_) => {
                    self.conns.borrow_mut().remove(&key(m));
                }
            }
        }
        let (s, ping) = connect(m, dial, connect_timeout).await?;
        self.conns.borrow_mut().insert(
            key(m),
            H2Conn {
                state: m.state.clone(),
                send: s.clone(),
                settings: Rc::new(PeerSettings {
                    known: tokio::sync::OnceCell::new(),
                    ping: RefCell::new(ping),
                }),
                last_used: Instant::now(),
                idle_timeout,
            },
        );
        let s = s
            .ready()
            .await
            .map_err(|e| ConnectError::Io(std::io::Error::other(e)))?;
        Ok((s, false))
    }

    /// Whether the member's connection takes an extended CONNECT (RFC
    /// 8441), once its SETTINGS are known (`PeerSettings`), waiting at
    /// most `timeout` for them.
    pub async fn takes_extended_connect(
        &self,
        m: &Member,
        send: &SendRequest<Bytes>,
        timeout: Duration,
    ) -> bool {
        if send.is_extended_connect_protocol_enabled() {
            return true;
        }
        let settings = self.conns.borrow().get(&key(m)).map(|c| c.settings.clone());
        if let Some(settings) = settings {
            let _ = tokio::time::timeout(timeout, settings.wait()).await;
        }
        send.is_extended_connect_protocol_enabled()
    }

    pub fn forget(&self, m: &Member) {
        self.conns.borrow_mut().remove(&key(m));
    }

    /// Lets go of connections unused for their pool's idle timeout (h2
    /// closes a connection once no handle and no stream is left), so a
    /// member removed by a reload is not held forever either.
    pub fn sweep(&self) {
        let now = Instant::now();
        self.conns.borrow_mut().retain(|_, c| {
            now.duration_since(c.last_used) < c.idle_timeout
                && c.state.admin() == AdminState::Enabled
        });
    }
}

/// h2c with prior knowledge, or TLS with ALPN "h2" when the pool has
/// `[pool.tls]` (a member that does not pick h2 is a connect failure).
async fn connect(
    m: &Member,
    (tls, source): (Option<&UpstreamTls>, Option<IpAddr>),
    timeout: Duration,
) -> Result<(SendRequest<Bytes>, Option<h2::PingPong>), ConnectError> {
    let up = upstream::connect_with(m, (tls, source), timeout, true, &[]).await?;
    if tls.is_some() && !up.alpn_h2() {
        return Err(ConnectError::Io(std::io::Error::other(
            "the member did not choose HTTP/2 (ALPN h2) in the TLS handshake",
        )));
    }
    let handshake = h2::client::Builder::new()
        .initial_window_size(256 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .handshake::<_, Bytes>(up);
    let (send, mut conn) = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Err(ConnectError::Io(std::io::Error::other(e))),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let ping = conn.ping_pong();
    let label = m.addr;
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            log::debug(format_args!("member {label}: HTTP/2 connection ended: {e}"));
        }
    });
    Ok((send, ping))
}

/// An HTTP/2 stream's sending half as a body sink: DATA at the pace of
/// the peer's flow-control window, then trailers or END_STREAM.
pub struct H2Sink {
    send: Option<SendStream<Bytes>>,
    written: bool,
    /// The peer is gone: every write fails.
    gone: bool,
    /// The last chunk, held until the next one, a flush (the source
    /// pauses) or the end: the end then rides on the last DATA frame
    /// instead of an empty frame of its own.
    held: Option<Bytes>,
}

impl H2Sink {
    /// The stream's HEADERS already left: an error now can only reset it.
    pub fn new(send: SendStream<Bytes>) -> H2Sink {
        H2Sink {
            send: Some(send),
            written: true,
            gone: false,
            held: None,
        }
    }

    /// A sink for a stream that already ended with its HEADERS frame.
    pub fn ended() -> H2Sink {
        H2Sink {
            send: None,
            written: true,
            gone: false,
            held: None,
        }
    }

    /// A sink for a stream the peer already reset.
    pub fn gone() -> H2Sink {
        H2Sink {
            send: None,
            written: true,
            gone: true,
            held: None,
        }
    }

    /// Cuts the stream (the body failed after its head was sent).
    pub fn reset(&mut self, reason: Reason) {
        if let Some(s) = &mut self.send {
            s.send_reset(reason);
        }
    }
}

fn h2_err(e: h2::Error) -> BodyError {
    BodyError::Write(std::io::Error::other(e))
}

/// Sends `chunk` as the stream's flow control allows, the last frame
/// ending the stream when `end`.
async fn send_chunk(
    to: &mut SendStream<Bytes>,
    mut chunk: Bytes,
    end: bool,
) -> Result<(), BodyError> {
    if chunk.is_empty() {
        return if end {
            to.send_data(chunk, true).map_err(h2_err)
        } else {
            Ok(())
        };
    }
    while !chunk.is_empty() {
        to.reserve_capacity(chunk.len());
        let mut cap = to.capacity();
        while cap == 0 {
            cap = match poll_fn(|cx| to.poll_capacity(cx)).await {
                Some(r) => r.map_err(h2_err)?,
                None => return Err(h2_err(h2::Error::from(Reason::CANCEL))),
            };
        }
        let part = chunk.split_to(cap.min(chunk.len()));
        to.send_data(part, end && chunk.is_empty())
            .map_err(h2_err)?;
    }
    Ok(())
}

impl Sink for H2Sink {
    async fn data(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if self.gone {
            return Err(BodyError::Write(std::io::ErrorKind::BrokenPipe.into()));
        }
        let Some(to) = &mut self.send else {
            return Ok(());
        };
        self.written = true;
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(before) = self.held.take() {
            send_chunk(to, before, false).await?;
        }
        self.held = Some(Bytes::copy_from_slice(bytes));
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), BodyError> {
        match (self.held.take(), &mut self.send) {
            (Some(chunk), Some(to)) => send_chunk(to, chunk, false).await,
            _ => Ok(()),
        }
    }

    async fn end(&mut self, trailers: Option<&Fields>) -> Result<(), BodyError> {
        let Some(to) = &mut self.send else {
            return Ok(());
        };
        self.written = true;
        let held = self.held.take();
        match trailers {
            Some(t) => {
                if let Some(chunk) = held {
                    send_chunk(to, chunk, false).await?;
                }
                to.send_trailers(trailers_to_h2(t)).map_err(h2_err)
            }
            None => send_chunk(to, held.unwrap_or_default(), true).await,
        }
    }

    fn written(&self) -> bool {
        self.written
    }

    fn abort(&mut self) {
        self.reset(Reason::INTERNAL_ERROR);
    }
}

/// Moves an HTTP/2 stream's body (DATA, then trailers) into `sink`; the
/// window is given back as each piece moves on. Returns payload bytes.
pub async fn pump_h2<S: Sink>(from: &mut RecvStream, sink: &mut S) -> Result<u64, BodyError> {
    let read_err = |e: h2::Error| BodyError::Read(std::io::Error::other(e));
    let mut total = 0u64;
    // Output is flushed when the member pauses (a compressor ends a block).
    while let Some(chunk) = body::flush_if_pending(from.data(), sink).await? {
        let chunk = chunk.map_err(read_err)?;
        let n = chunk.len();
        sink.data(&chunk).await?;
        let _ = from.flow_control().release_capacity(n);
        total += n as u64;
    }
    let trailers = from.trailers().await.map_err(read_err)?;
    sink.end(trailers.map(|t| trailers_from_h2(&t)).as_ref())
        .await?;
    Ok(total)
}
