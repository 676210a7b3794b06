//! The HTTP/1 session: one client connection, from the front door's
//! hand-off (`accept.rs`), its requests in order, each run through the
//! exchange (`pipeline::run`).
//!
//! Runs on the worker that accepted the connection, start to end. Each
//! request takes the config snapshot current when it starts and keeps it
//! until it ends, so a reload never changes a request halfway.
//!
//! The per-request work is boxed and awaited from a small outer loop, so an
//! idle keep-alive connection holds only its socket and a few words, not the
//! state of a whole request (the target is under 1 KB per idle client).

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;

use super::client_h1_exchange::H1Client;
use super::client_h2_conn;
use super::conn::{Client, ConnChoice, ConnGuard};
use super::conn_scripting;
use super::ctx::WorkerCtx;
use super::exchange::{micros_since, Exchange};
use super::head_read::{read_head, ReadHead};
use super::idle::{IdleEnd, Parked};
use super::pipeline;
use super::stream::ClientStream;
use crate::clock::now_ms;
use crate::config::snapshot::VServer;
use crate::http::head;
use crate::http::responses;
use crate::log;
use crate::stats::{self, status_class};

enum Next {
    KeepAlive,
    Close,
    /// The client sent the HTTP/2 preface (h2c with prior knowledge).
    Http2,
}

/// Starts the HTTP/1 session of a connection the front door
/// (`accept.rs`) hands over. A plain connection's first bytes are read at
/// once: a client's request trails its accept by microseconds.
pub fn start(
    ctx: &Rc<WorkerCtx>,
    stream: ClientStream,
    peer: SocketAddr,
    listen: SocketAddr,
    guard: ConnGuard,
) {
    let mut client = Client {
        stream,
        peer,
        listen,
        buf: BytesMut::new(),
    };
    if read_now(ctx, &mut client) {
        tokio::task::spawn_local(session(ctx.clone(), client, guard, Start::New));
    }
}

/// Resumes a parked connection that became readable.
///
/// A plain connection comes back from the lot's own epoll as a descriptor
/// just registered with tokio, whose readiness tokio learns only at the
/// driver's next poll, after every task of the current turn: waiting for
/// it put a turn's work (hundreds of microseconds in a burst) in front of
/// every request on a parked connection. The lot saw it readable, so its
/// request is read here at once; only a spurious wake-up waits.
pub fn resume(ctx: &Rc<WorkerCtx>, mut p: Parked) {
    if read_now(ctx, &mut p.client) {
        // How long it was idle (its deadline was set `client_idle` after
        // the idle time began): a client that thought past `client_park`
        // is likely to again and goes back to the lot after its request;
        // one that comes back sooner (the rest of a burst after a long
        // pause) waits in tokio's epoll as usual.
        let (idle_ms, park_ms) = {
            let snap = ctx.snapshot.load();
            (snap.settings.client_idle_ms, snap.settings.client_park_ms)
        };
        let idled = (now_ms() + idle_ms).saturating_sub(p.deadline_ms);
        let start = if idled >= park_ms {
            Start::LongIdle
        } else {
            Start::Resumed
        };
        tokio::task::spawn_local(session(ctx.clone(), p.client, p.guard, start));
    }
}

/// What a read after tokio's readiness found.
enum Filled {
    Data,
    Closed,
    Nothing,
}

/// Reads a plain connection that tokio says is readable into its buffer
/// (the head reader parses what is there first). When `read_now` took the
/// bytes before tokio learned of them, the readiness tokio reports next
/// has nothing behind it: reading clears it, and the caller goes back to
/// waiting under the idle timeout, not under the request head's. TLS
/// connections are left to the session's own read.
fn read_ready(ctx: &WorkerCtx, client: &mut Client) -> Filled {
    let ClientStream::Plain(plain) = &client.stream else {
        return Filled::Data;
    };
    // Registered: tokio just reported it readable.
    let Some(tcp) = plain.tokio_ref() else {
        return Filled::Data;
    };
    if !client.buf.is_empty() {
        return Filled::Data;
    }
    // A short read clears readiness, so the wait after this request
    // sleeps until the next one instead of asking again for EAGAIN.
    let mut buf = ctx.take_buffer();
    let read = crate::l4::relay::read_draining(tcp, &mut buf);
    settle(ctx, client, buf, read)
}

/// Keeps what a read brought in `buf` (already holding its bytes) as the
/// client's buffer, or gives the buffer back, and says what it was.
fn settle(
    ctx: &WorkerCtx,
    client: &mut Client,
    buf: BytesMut,
    read: std::io::Result<usize>,
) -> Filled {
    match read {
        Ok(0) => {
            ctx.return_buffer(buf);
            Filled::Closed
        }
        Ok(_) => {
            client.buf = buf;
            Filled::Data
        }
        Err(e) => {
            ctx.return_buffer(buf);
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Filled::Nothing
            } else {
                Filled::Data
            }
        }
    }
}

/// Reads what a plain connection already holds into its buffer, without
/// tokio's readiness; false when the client has closed (its guard then
/// closes and counts it). Nothing there yet, or an error: the session's
/// own read waits or meets it.
fn read_now(ctx: &WorkerCtx, client: &mut Client) -> bool {
    let ClientStream::Plain(tcp) = &client.stream else {
        return true;
    };
    if !client.buf.is_empty() {
        return true;
    }
    let mut buf = ctx.take_buffer();
    let read = tcp.recv(buf.spare_capacity_mut());
    if let Ok(n) = read {
        // SAFETY: recv initialised the first n bytes of the spare capacity.
        unsafe { buf.set_len(n) };
    }
    !matches!(settle(ctx, client, buf, read), Filled::Closed)
}

/// How a session starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// A new connection: its first request is due within `client_header`.
    New,
    /// Back from the parking lot after more than `client_park` idle.
    LongIdle,
    /// Back from the parking lot sooner, or readable as it was parked.
    Resumed,
}

/// Runs requests on `client` until it closes, times out, or parks.
async fn session(ctx: Rc<WorkerCtx>, mut client: Client, guard: ConnGuard, start: Start) {
    let mut first = start == Start::New;
    let mut looked_again = false;
    // The client closed first: nothing is held for a FIN, and close(2)
    // sends ours.
    let mut peer_closed = false;
    // A client that thought past `client_park` (a user between clicks) is
    // likely to again: once its request is answered the connection goes
    // back to the lot at once, without a wait in tokio's epoll first (an
    // epoll_ctl ADD and DEL, a second look and a task kept for
    // `client_park`, per request).
    let back_to_lot = start == Start::LongIdle;
    let mut served = false;
    loop {
        if back_to_lot && served && nothing_held(&mut client) {
            ctx.return_buffer(std::mem::take(&mut client.buf));
            let deadline_ms = now_ms() + ctx.snapshot.load().settings.client_idle_ms;
            return park(ctx, client, guard, deadline_ms);
        }
        // A socket not yet in the reactor gets one more look, after the
        // worker's other ready tasks, before it joins: a client's request
        // trails its handshake, and a one-request client's FIN trails the
        // response, by microseconds. Found then, the connection never
        // costs an epoll_ctl ADD and DEL; if not, one recv more.
        if !looked_again && client.buf.is_empty() && client.stream.tcp_registered().is_none() {
            looked_again = true;
            tokio::task::yield_now().await;
            if !read_now(&ctx, &mut client) {
                peer_closed = true;
                break;
            }
            continue;
        }
        if nothing_held(&mut client) {
            match wait_for_request(&ctx, &mut client, first).await {
                Waited::Request => {}
                Waited::Again => continue,
                Waited::Closed => {
                    peer_closed = true;
                    break;
                }
                Waited::Park(deadline_ms) => return park(ctx, client, guard, deadline_ms),
                Waited::Ended => break,
            }
        }
        let was_first = std::mem::replace(&mut first, false);
        // Boxed: the request's state (kilobytes) lives only while a request
        // is in flight, so a connection waiting between requests keeps a
        // small task (one allocation per request, reused by malloc at once).
        match Box::pin(handle_request(
            &ctx,
            &mut client,
            guard.script.as_deref(),
            was_first,
        ))
        .await
        {
            Next::KeepAlive if !ctx.draining() => served = true,
            Next::Http2 => return to_http2(ctx, client, guard),
            _ => break,
        }
    }
    // On TLS this sends close_notify, which a client that stopped reading
    // could hold up forever: bounded.
    if !peer_closed || client.stream.is_tls() {
        let _ = ctx
            .idle_watch
            .within(now_ms() + 1000, client.stream.shutdown())
            .await;
    }
    drop(guard);
}

/// No request bytes are in hand: none in the buffer, none that TLS holds
/// (those are a request here, with no readiness to wait for).
fn nothing_held(client: &mut Client) -> bool {
    client.buf.is_empty() && !client.stream.has_buffered()
}

/// What waiting for a client's next request came to.
enum Waited {
    /// Bytes came: read the request.
    Request,
    /// A readiness with nothing behind it (see `read_ready`): wait again,
    /// the idle time counted afresh.
    Again,
    /// The client closed.
    Closed,
    /// Idle `client_park`: to the parking lot, until this deadline.
    Park(u64),
    /// Timed out, or the socket failed.
    Ended,
}

/// Waits for the next request's bytes: within `client_header` for the
/// first, `client_idle` for the next; a connection idle `client_park`
/// leaves its task for the worker's parking lot, which costs a fraction
/// of a task.
async fn wait_for_request(ctx: &WorkerCtx, client: &mut Client, first: bool) -> Waited {
    let (wait_ms, park_ms) = {
        let snap = ctx.snapshot.load();
        let s = &snap.settings;
        let wait = if first {
            s.client_header_ms
        } else {
            s.client_idle_ms
        };
        (wait, s.client_park_ms)
    };
    // Waiting holds no buffer: malloc hands the same block to the next
    // read at once, and thousands of waiting connections do not pin 8 KB
    // each.
    ctx.return_buffer(std::mem::take(&mut client.buf));
    let now = now_ms();
    let deadline = now + wait_ms;
    // Parking falls on whole seconds: the ticker parks every connection
    // due in a second in one wake-up.
    let park_at = if first {
        deadline
    } else {
        (now + park_ms).div_ceil(1000) * 1000
    };
    // The first wait registers a bare socket with tokio.
    let Ok(tcp) = client.stream.tcp() else {
        return Waited::Ended;
    };
    match ctx.idle_watch.wait(tcp, deadline.min(park_at)).await {
        IdleEnd::Readable => match read_ready(ctx, client) {
            Filled::Data => Waited::Request,
            Filled::Closed => Waited::Closed,
            Filled::Nothing => Waited::Again,
        },
        IdleEnd::Timeout if now_ms() < deadline => Waited::Park(deadline),
        _ => Waited::Ended,
    }
}

/// Parks an idle connection in the worker's lot until `deadline_ms`.
fn park(ctx: Rc<WorkerCtx>, client: Client, guard: ConnGuard, deadline_ms: u64) {
    if let Err(p) = ctx.idle_watch.park(Parked {
        client,
        guard,
        deadline_ms,
    }) {
        // Readable while we parked it: serve it in a fresh task.
        tokio::task::spawn_local(session(ctx, p.client, p.guard, Start::Resumed));
    }
}

/// The first request was the HTTP/2 preface (h2c with prior knowledge):
/// the connection goes on as HTTP/2, its first line replayed (it was read
/// as a head).
fn to_http2(ctx: Rc<WorkerCtx>, client: Client, guard: ConnGuard) {
    let mut replay = BytesMut::from(client_h2_conn::PREFACE_HEAD);
    replay.extend_from_slice(&client.buf);
    let (peer, listen) = (client.peer, client.listen);
    client_h2_conn::start(ctx, client.stream, replay, peer, listen, guard);
}

/// Writes a response the proxy answers itself and counts it.
async fn respond(c: &mut Client, vs: &VServer, status: u16, bytes: &[u8]) -> bool {
    let vc = vs.counters.local();
    stats::inc(&vc.local_responses);
    stats::inc(&vc.responses[status_class(status)]);
    stats::add(&vc.bytes_out, bytes.len() as u64);
    c.send(bytes).await.is_ok()
}

async fn error_and_close(c: &mut Client, vs: &VServer, status: u16, why: &str) -> Next {
    respond(c, vs, status, &responses::error(status, why, true)).await;
    Next::Close
}

/// `choice`: what the script's connection events chose for its requests.
async fn handle_request(
    ctx: &Rc<WorkerCtx>,
    c: &mut Client,
    choice: Option<&ConnChoice>,
    first: bool,
) -> Next {
    let snap = ctx.snapshot.load_full();
    let st = &snap.settings;
    let Some(vs) = snap.vserver_for(&c.listen).cloned() else {
        // The virtual server was removed by a reload: finish here.
        return Next::Close;
    };
    let vc = vs.counters.local();
    let deadline = now_ms() + st.client_header_ms;
    if c.buf.capacity() == 0 {
        c.buf = ctx.take_buffer();
    }
    let reading = Instant::now();
    let raw = match read_head(
        &mut c.stream,
        &mut c.buf,
        st.max_request_line,
        st.max_header_bytes,
        &ctx.idle_watch,
        deadline,
    )
    .await
    {
        Ok(raw) => raw,
        Err(ReadHead::Closed { .. }) => return Next::Close,
        Err(ReadHead::Timeout { partial }) => {
            stats::inc(&vc.header_timeouts);
            if partial {
                return error_and_close(c, &vs, 408, "the request head was not received in time")
                    .await;
            }
            return Next::Close;
        }
        Err(ReadHead::Bad(e)) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: {} ({})",
                vs.name, c.peer, e.reason, e.status
            ));
            return error_and_close(c, &vs, e.status, e.reason).await;
        }
    };
    if first && vs.h2c && raw[..] == *client_h2_conn::PREFACE_HEAD {
        return Next::Http2;
    }
    // The head's bytes; the body's are counted as they go to the member
    // (the exchange), a tunnel's by the tunnel. Counting every byte read
    // here counted a body's first bytes twice: those that came with the
    // head, then again as the body.
    stats::add(&vc.bytes_in, raw.len() as u64);
    let req = match head::parse_request(raw, st.max_headers) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&vc.bad_requests);
            log::debug(format_args!(
                "vserver {}: client {}: {} ({})",
                vs.name, c.peer, e.reason, e.status
            ));
            return error_and_close(c, &vs, e.status, e.reason).await;
        }
    };
    let subject = vs
        .tls
        .as_ref()
        .and_then(|t| t.client_subject_header.as_ref())
        .and(c.stream.client_subject().map(str::to_owned));
    let (peer, tls, keep_alive) = (c.peer, c.stream.is_tls(), req.head.keep_alive);
    let mut x = Exchange::new(ctx, &vs, st, (peer, c.listen), tls, subject.as_deref());
    x.facts.head_us = Some(micros_since(reading));
    if vs.script.is_some() {
        x.client_cert = c.stream.client_cert().cloned();
    }
    if let Some(choice) = choice {
        conn_scripting::apply(&mut x, choice);
    }
    x.facts.tls = c.stream.tls_info();
    let mut client = H1Client::new(c, &x, &ctx.idle_watch);
    pipeline::run(&mut x, &mut client, req).await;
    if client.close || !keep_alive || ctx.draining() {
        Next::Close
    } else {
        Next::KeepAlive
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;
    use crate::proxy::stream::PlainTcp;
    use tokio::net::TcpStream;

    fn size_of_future<F: std::future::Future>(_: &F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn session_future_sizes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = l.local_addr().unwrap();
            let s = TcpStream::connect(a).await.unwrap();
            let ctx = Rc::new(WorkerCtx::for_tests());
            let counters = ctx.snapshot.load().vservers[0].counters.clone();
            ctx.active.set(1);
            let guard = ConnGuard {
                active: ctx.active.clone(),
                counters,
                leases: None,
                private: None,
                script: None,
            };
            let f = session(
                ctx.clone(),
                Client {
                    stream: ClientStream::Plain(PlainTcp::registered(s)),
                    peer: a,
                    listen: a,
                    buf: BytesMut::new(),
                },
                guard,
                Start::New,
            );
            eprintln!("serve future: {} bytes", size_of_future(&f));
            eprintln!("TcpStream: {} bytes", std::mem::size_of::<TcpStream>());
            eprintln!(
                "ClientStream: {} bytes",
                std::mem::size_of::<ClientStream>()
            );
            eprintln!("Parked: {} bytes", std::mem::size_of::<Parked>());
            eprintln!("Sleep: {} bytes", std::mem::size_of::<tokio::time::Sleep>());
        });
    }
}
