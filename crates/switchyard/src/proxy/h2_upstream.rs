//! HTTP/2 to members: pools with `protocol = "h2"` (gRPC, or any h2c
//! service).
//!
//! Each worker keeps one HTTP/2 connection per member and multiplexes every
//! stream for that member over it (the member's SETTINGS_MAX_CONCURRENT_STREAMS
//! makes streams wait for a slot). An HTTP/2 client's stream is relayed as
//! it is: DATA both ways at the pace of both flow-control windows, and
//! trailers both ways (gRPC's status travels in the response trailers), so
//! bidirectional streaming works.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};

use super::forward::{self, ClientFraming, Forwarding};
use super::upstream::{self, ConnectError};
use super::{
    connect_failed, passive_result, persistence_cookie, request_hash, route, sticky_member, Client,
    Inflight, Next, WorkerCtx,
};
use crate::balance::Tried;
use crate::clock::now_ms;
use crate::config::snapshot::{Member, Pool, Settings, VServer};
use crate::http::body::{self, BodyError};
use crate::http::head::Framing;
use crate::http::head::{self, Method, Request};
use crate::http::responses;
use crate::log;
use crate::stats::{self, status_class};
use crate::tls::upstream::UpstreamTls;

/// The worker's HTTP/2 connections to members, by member.
#[derive(Default)]
pub struct H2Conns {
    conns: RefCell<HashMap<usize, H2Conn>>,
}

struct H2Conn {
    send: SendRequest<Bytes>,
    last_used: Instant,
    idle_timeout: Duration,
}

fn key(m: &Member) -> usize {
    Arc::as_ptr(&m.state) as usize
}

impl H2Conns {
    /// A connection to `m` ready for a new stream: the open one, or a new
    /// one when there is none or it has failed. The bool says "reused".
    async fn ready(
        &self,
        m: &Member,
        tls: Option<&UpstreamTls>,
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
        let s = connect(m, tls, connect_timeout).await?;
        self.conns.borrow_mut().insert(
            key(m),
            H2Conn {
                send: s.clone(),
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

    fn forget(&self, m: &Member) {
        self.conns.borrow_mut().remove(&key(m));
    }

    /// Lets go of connections unused for their pool's idle timeout (h2
    /// closes a connection once no handle and no stream is left), so a
    /// member removed by a reload is not held forever either.
    pub fn sweep(&self) {
        let now = Instant::now();
        self.conns
            .borrow_mut()
            .retain(|_, c| now.duration_since(c.last_used) < c.idle_timeout);
    }
}

/// h2c with prior knowledge, or TLS with ALPN "h2" when the pool has
/// `[pool.tls]` (a member that does not pick h2 is a connect failure).
async fn connect(
    m: &Member,
    tls: Option<&UpstreamTls>,
    timeout: Duration,
) -> Result<SendRequest<Bytes>, ConnectError> {
    let up = upstream::connect_with(m, tls, timeout, true).await?;
    if tls.is_some() && !up.alpn_h2() {
        return Err(ConnectError::Io(std::io::Error::other(
            "the member did not choose HTTP/2 (ALPN h2) in the TLS handshake",
        )));
    }
    let handshake = h2::client::Builder::new()
        .initial_window_size(256 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .handshake::<_, Bytes>(up);
    let (send, conn) = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Err(ConnectError::Io(std::io::Error::other(e))),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let label = m.addr;
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            log::debug(format_args!("member {label}: HTTP/2 connection ended: {e}"));
        }
    });
    Ok(send)
}

/// What the client side of a relayed exchange offers.
pub struct ClientSide<'a> {
    pub peer: std::net::SocketAddr,
    pub tls: bool,
    pub client_subject: Option<&'a str>,
    /// The client asked for trailers ("te: trailers"); gRPC members insist.
    pub te_trailers: bool,
}

/// Relays an HTTP/2 client's stream to a member of an h2 pool.
#[allow(clippy::too_many_arguments)]
pub async fn relay(
    ctx: &WorkerCtx,
    client: &ClientSide<'_>,
    vs: &VServer,
    pool: &Arc<Pool>,
    req: &Request,
    decision: &route::Decision<'_>,
    mut body: RecvStream,
    respond: &mut SendResponse<Bytes>,
    st: &Settings,
) {
    let vc = vs.counters.local();
    stats::inc(&pool.counters.local().requests);
    let sticky = sticky_member(pool, req);
    let fail = |respond: &mut SendResponse<Bytes>, status: u16, why: &str| {
        super::h2::send_local(respond, vs, &responses::error(status, why, false));
    };
    let Some(head) = upstream_head(req, decision, client, vs) else {
        stats::inc(&vc.bad_requests);
        return fail(
            respond,
            400,
            "the request cannot be restated for an HTTP/2 member",
        );
    };
    let end_of_request = body.is_end_stream();
    let (i, _inflight, resp_fut, up_send) = match open_stream(
        ctx,
        vs,
        pool,
        req,
        client.peer.ip(),
        sticky,
        head,
        end_of_request,
        st,
    )
    .await
    {
        Ok(x) => x,
        Err((status, why)) => return fail(respond, status, &why),
    };
    let m = &pool.members[i];
    let mc = m.counters.local();

    // Request DATA and trailers flow while the response comes back
    // (bidirectional streaming): both directions run together.
    let upload = async {
        if end_of_request {
            return Ok(0);
        }
        let mut up_send = up_send;
        pump(&mut body, &mut up_send).await
    };
    let download = async {
        let resp = match resp_fut.await {
            Ok(r) => r,
            Err(e) => return Err(Some(e)),
        };
        let (parts, mut up_body) = resp.into_parts();
        let status = parts.status.as_u16();
        passive_result(
            pool,
            m,
            status >= 500 && pool.passive.as_ref().is_some_and(|p| p.on_5xx),
        );
        let cookie = persistence_cookie(pool, m, sticky != Some(i));
        let Some(head) = client_head(&parts, decision, cookie.as_deref()) else {
            stats::inc(&mc.bad_responses);
            fail(
                respond,
                502,
                "the server sent a response that cannot be relayed",
            );
            return Ok(0);
        };
        stats::inc(&mc.responses[status_class(status)]);
        stats::inc(&vc.responses[status_class(status)]);
        let end = up_body.is_end_stream();
        let mut down = match respond.send_response(head, end) {
            Ok(s) => s,
            Err(_) => return Ok(0),
        };
        if end {
            return Ok(0);
        }
        match pump(&mut up_body, &mut down).await {
            Ok(n) => Ok(n),
            Err(e) => {
                down.send_reset(e.reason().unwrap_or(Reason::INTERNAL_ERROR));
                Err(None)
            }
        }
    };
    let (up, down) = tokio::join!(upload, download);
    match up {
        Ok(n) => {
            stats::add(&vc.bytes_in, n);
            stats::add(&mc.bytes_out, n);
        }
        Err(e) => log::debug(format_args!(
            "vserver {}: member {}: HTTP/2 request body: {e}",
            vs.name,
            m.label(&pool.name)
        )),
    }
    match down {
        Ok(n) => {
            stats::add(&vc.bytes_out, n);
            stats::add(&mc.bytes_in, n);
        }
        Err(Some(e)) => {
            // No response head: the client can still get an answer.
            if e.is_go_away() || e.is_io() {
                ctx.h2_members.forget(m);
            }
            stats::inc(&mc.resets);
            log::warn(format_args!(
                "vserver {}: member {}: HTTP/2 response failed: {e}",
                vs.name,
                m.label(&pool.name)
            ));
            if e.reason() == Some(Reason::REFUSED_STREAM) {
                fail(respond, 503, "the server refused the stream");
            } else {
                fail(respond, 502, "the server reset the stream");
            }
        }
        Err(None) => {}
    }
}

type Opened<'p> = (
    usize,
    Inflight<'p>,
    h2::client::ResponseFuture,
    SendStream<Bytes>,
);

/// Picks a member and opens the stream to it; until the request is sent a
/// failure may move to another member. Err is what the client gets.
#[allow(clippy::too_many_arguments)]
async fn open_stream<'p>(
    ctx: &WorkerCtx,
    vs: &VServer,
    pool: &'p Pool,
    req: &Request,
    peer: std::net::IpAddr,
    sticky: Option<usize>,
    head: http::Request<()>,
    end_of_request: bool,
    st: &Settings,
) -> Result<Opened<'p>, (u16, String)> {
    let pc = pool.counters.local();
    let hash = request_hash(pool, req, peer);
    let mut tried = Tried::default();
    let mut retries_left = st.retries;
    let mut last_failure: Option<(u16, String)> = None;
    loop {
        let Some(i) = pool.balancer.pick(&pool.members, sticky, hash, tried) else {
            if let Some(f) = last_failure {
                return Err(f);
            }
            stats::inc(&pc.no_member_available);
            return Err((
                503,
                format!(
                    "no server is available to handle this request (pool \"{}\")",
                    pool.name
                ),
            ));
        };
        if last_failure.is_some() {
            stats::inc(&pc.retries);
        }
        tried.add(i);
        let m = &pool.members[i];
        let mc = m.counters.local();
        let inflight = Inflight::new(&m.state);
        let (mut sender, reused) = match ctx
            .h2_members
            .ready(
                m,
                pool.tls.as_deref(),
                Duration::from_millis(st.upstream_connect_ms),
                Duration::from_millis(pool.idle_timeout_ms),
            )
            .await
        {
            Ok(s) => s,
            Err(e) => {
                let (status, why) = connect_failed(vs, pool, m, &e, "HTTP/2 ");
                if retries_left > 0 {
                    retries_left -= 1;
                    last_failure = Some((status, why));
                    continue;
                }
                return Err((status, why));
            }
        };
        if reused {
            stats::inc(&mc.connections_reused);
        }
        match sender.send_request(head.clone(), end_of_request) {
            Ok((resp, send)) => {
                stats::inc(&mc.requests);
                return Ok((i, inflight, resp, send));
            }
            Err(e) => {
                // The connection went away between ready() and now.
                ctx.h2_members.forget(m);
                stats::inc(&mc.resets);
                let why = format!("the server's HTTP/2 connection failed: {e}");
                if retries_left > 0 {
                    retries_left -= 1;
                    tried.remove(i);
                    last_failure = Some((502, why));
                    continue;
                }
                return Err((502, why));
            }
        }
    }
}

/// Moves DATA (at the pace of both windows) and then the trailers or the
/// end of the stream from `from` to `to`. Returns the payload bytes.
async fn pump(from: &mut RecvStream, to: &mut SendStream<Bytes>) -> Result<u64, h2::Error> {
    let mut total = 0u64;
    while let Some(chunk) = from.data().await {
        let mut chunk = chunk?;
        let n = chunk.len();
        while !chunk.is_empty() {
            to.reserve_capacity(chunk.len());
            let mut cap = to.capacity();
            while cap == 0 {
                cap = match poll_fn(|cx| to.poll_capacity(cx)).await {
                    Some(r) => r?,
                    None => return Err(h2::Error::from(Reason::CANCEL)),
                };
            }
            let part = chunk.split_to(cap.min(chunk.len()));
            to.send_data(part, false)?;
        }
        // The window is given back once the bytes have moved on.
        let _ = from.flow_control().release_capacity(n);
        total += n as u64;
    }
    match from.trailers().await? {
        Some(t) => to.send_trailers(t)?,
        None => to.send_data(Bytes::new(), true)?,
    }
    Ok(total)
}

/// The request for the member: the same head an HTTP/1.1 member would get
/// (forwarding fields, edits), in HTTP/2 form.
fn upstream_head(
    req: &Request,
    decision: &route::Decision<'_>,
    client: &ClientSide<'_>,
    vs: &VServer,
) -> Option<http::Request<()>> {
    let mut stage = Vec::with_capacity(512);
    let fwd = Forwarding {
        client_ip: client.peer.ip(),
        proto: if client.tls { "https" } else { "http" },
        client_cert: vs
            .tls
            .as_ref()
            .and_then(|t| t.client_subject_header.as_deref())
            .map(|h| (h, client.client_subject)),
    };
    forward::request_head(&mut stage, req, &fwd, &decision.request_edits, false);
    let mut fields = [httparse::EMPTY_HEADER; head::MAX_HEADERS_CAP];
    let mut r = httparse::Request::new(&mut fields);
    let httparse::Status::Complete(_) = r.parse(&stage).ok()? else {
        return None;
    };
    let host = req.host().and_then(|h| std::str::from_utf8(h).ok())?;
    let uri = format!("http://{host}{}", std::str::from_utf8(req.target()).ok()?);
    let mut b = http::Request::builder()
        .method(std::str::from_utf8(req.method_str()).ok()?)
        .uri(uri);
    for f in r.headers.iter() {
        if f.name.eq_ignore_ascii_case("host") || head::is_hop_by_hop(f.name.as_bytes()) {
            continue;
        }
        b = b.header(f.name, f.value);
    }
    if client.te_trailers {
        b = b.header("te", "trailers");
    }
    if req.method == Method::Connect {
        return None;
    }
    b.body(()).ok()
}

/// The member's response head for the client, with the vserver's and the
/// policies' response edits and the persistence cookie, as for HTTP/1.1.
fn client_head(
    parts: &http::response::Parts,
    decision: &route::Decision<'_>,
    cookie: Option<&str>,
) -> Option<http::Response<()>> {
    let mut h1 = Vec::with_capacity(512);
    h1.extend_from_slice(format!("HTTP/1.1 {} X\r\n", parts.status.as_u16()).as_bytes());
    for (n, v) in &parts.headers {
        h1.extend_from_slice(n.as_str().as_bytes());
        h1.extend_from_slice(b": ");
        h1.extend_from_slice(v.as_bytes());
        h1.extend_from_slice(b"\r\n");
    }
    h1.extend_from_slice(b"\r\n");
    let resp = head::parse_response(Bytes::from(h1), head::MAX_HEADERS_CAP, Method::Get).ok()?;
    let mut out = Vec::with_capacity(512);
    forward::response_head(
        &mut out,
        &resp,
        &decision.response_edits,
        &ClientFraming {
            chunked: false,
            close: false,
            keep_alive_10: false,
            upgrade: false,
        },
        cookie,
    );
    super::h2::h2_head(&out).map(|(h, _)| h)
}

/// An HTTP/1.x client's request to a member of an h2 pool: the body is
/// sent as DATA, the response comes back with the client's framing
/// (chunked for HTTP/1.1 when the member gave no length). Trailers the
/// member sends are not passed to HTTP/1 clients.
#[allow(clippy::too_many_arguments)]
pub(super) async fn from_http1(
    ctx: &WorkerCtx,
    c: &mut Client,
    vs: &VServer,
    pool: &Arc<Pool>,
    req: &Request,
    decision: &route::Decision<'_>,
    st: &Settings,
) -> Next {
    let vc = vs.counters.local();
    stats::inc(&pool.counters.local().requests);
    let sticky = sticky_member(pool, req);
    let side = ClientSide {
        peer: c.peer,
        tls: c.stream.is_tls(),
        client_subject: c.stream.client_subject(),
        te_trailers: false,
    };
    let Some(head) = upstream_head(req, decision, &side, vs) else {
        stats::inc(&vc.bad_requests);
        return super::error_and_close(c, vs, 400, "the request cannot be restated for HTTP/2")
            .await;
    };
    let has_body = req.head.framing != Framing::None;
    let opened = open_stream(ctx, vs, pool, req, c.peer.ip(), sticky, head, !has_body, st).await;
    let (i, _inflight, resp_fut, up_send) = match opened {
        Ok(x) => x,
        Err((status, why)) => return super::drain_then_error(c, vs, req, status, &why, st).await,
    };
    let m = &pool.members[i];
    let mc = m.counters.local();
    if has_body {
        if req.expect_continue && c.send(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
            return Next::Close;
        }
        let mut w = super::h2::H2Writer { send: up_send };
        let mut stage = Vec::new();
        let sent = body::deliver(
            &mut c.stream,
            &mut c.buf,
            req.head.framing,
            &mut w,
            &mut stage,
            false,
            Duration::from_millis(st.client_body_ms),
        )
        .await
        .0;
        match sent {
            Ok(n) => {
                stats::add(&vc.bytes_in, n);
                stats::add(&mc.bytes_out, n);
                let _ = w.send.send_data(Bytes::new(), true);
            }
            Err(BodyError::Framing(why)) => {
                stats::inc(&vc.bad_requests);
                return super::error_and_close(c, vs, 400, why).await;
            }
            Err(BodyError::Timeout) => {
                return super::error_and_close(
                    c,
                    vs,
                    408,
                    "the request body was not received in time",
                )
                .await
            }
            Err(BodyError::Write(_)) => {
                stats::inc(&mc.resets);
                return super::error_and_close(c, vs, 502, "the server reset the stream").await;
            }
            Err(BodyError::Read(_) | BodyError::Truncated) => return Next::Close,
        }
    }
    let deadline = now_ms() + st.upstream_response_ms;
    let resp = match ctx.idle_watch.within(deadline, resp_fut).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            if e.is_go_away() || e.is_io() {
                ctx.h2_members.forget(m);
            }
            stats::inc(&mc.resets);
            log::warn(format_args!(
                "vserver {}: member {}: HTTP/2 response failed: {e}",
                vs.name,
                m.label(&pool.name)
            ));
            return super::error_and_close(c, vs, 502, "the server reset the stream").await;
        }
        Err(()) => {
            stats::inc(&mc.response_timeouts);
            return super::error_and_close(c, vs, 504, "the server did not answer in time").await;
        }
    };
    let (parts, up_body) = resp.into_parts();
    let status = parts.status.as_u16();
    passive_result(
        pool,
        m,
        status >= 500 && pool.passive.as_ref().is_some_and(|p| p.on_5xx),
    );
    // The member's head in HTTP/1.1 form, checked like any member response.
    let mut h1 = Vec::with_capacity(512);
    h1.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", responses::reason(status)).as_bytes());
    for (n, v) in &parts.headers {
        h1.extend_from_slice(n.as_str().as_bytes());
        h1.extend_from_slice(b": ");
        h1.extend_from_slice(v.as_bytes());
        h1.extend_from_slice(b"\r\n");
    }
    h1.extend_from_slice(b"\r\n");
    let resp = match head::parse_response(Bytes::from(h1), head::MAX_HEADERS_CAP, req.method) {
        Ok(r) => r,
        Err(e) => {
            stats::inc(&mc.bad_responses);
            return super::error_and_close(c, vs, 502, e.reason).await;
        }
    };
    stats::inc(&mc.responses[status_class(status)]);
    stats::inc(&vc.responses[status_class(status)]);
    let client_11 = req.head.minor == 1;
    let reframe = resp.head.framing == Framing::Close;
    let chunked_out = reframe && client_11;
    let close = !req.head.keep_alive || (reframe && !client_11) || ctx.draining();
    let cookie = persistence_cookie(pool, m, sticky != Some(i));
    let mut stage = Vec::with_capacity(1024);
    forward::response_head(
        &mut stage,
        &resp,
        &decision.response_edits,
        &ClientFraming {
            chunked: chunked_out,
            close,
            keep_alive_10: !client_11 && !close,
            upgrade: false,
        },
        cookie.as_deref(),
    );
    let head_len = stage.len() as u64;
    let mut src = super::h2::H2Body::new(up_body);
    let mut inbuf = bytes::BytesMut::new();
    let r = body::deliver(
        &mut src,
        &mut inbuf,
        resp.head.framing,
        &mut c.stream,
        &mut stage,
        chunked_out,
        Duration::from_millis(st.upstream_response_ms),
    )
    .await
    .0;
    match r {
        Ok(n) => {
            stats::add(&vc.bytes_out, head_len + n);
            stats::add(&mc.bytes_in, n);
        }
        Err(e) => {
            if !matches!(e, BodyError::Write(_)) {
                stats::inc(&mc.bad_responses);
                log::warn(format_args!(
                    "vserver {}: member {}: HTTP/2 response body failed: {e:?}",
                    vs.name,
                    m.label(&pool.name)
                ));
            }
            return Next::Close;
        }
    }
    if close {
        Next::Close
    } else {
        Next::KeepAlive
    }
}
