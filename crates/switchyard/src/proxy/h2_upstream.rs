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
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};

use super::forward::{self, ClientFraming, Forwarding};
use super::upstream::ConnectError;
use super::{passive_result, request_hash, route, Inflight, WorkerCtx};
use crate::balance::Tried;
use crate::config::snapshot::{Member, Persist, Pool, Settings, VServer};
use crate::http::head::{self, Method, Request};
use crate::http::responses;
use crate::log;
use crate::stats::{self, status_class};

/// The worker's HTTP/2 connections to members, by member.
#[derive(Default)]
pub struct H2Conns {
    conns: RefCell<HashMap<usize, SendRequest<Bytes>>>,
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
        connect_timeout: Duration,
    ) -> Result<(SendRequest<Bytes>, bool), ConnectError> {
        let open = self.conns.borrow().get(&key(m)).cloned();
        if let Some(s) = open {
            match s.ready().await {
                Ok(s) => return Ok((s, true)),
                Err(_) => {
                    self.conns.borrow_mut().remove(&key(m));
                }
            }
        }
        let s = connect(m, connect_timeout).await?;
        self.conns.borrow_mut().insert(key(m), s.clone());
        let s = s
            .ready()
            .await
            .map_err(|e| ConnectError::Io(std::io::Error::other(e)))?;
        Ok((s, false))
    }

    fn forget(&self, m: &Member) {
        self.conns.borrow_mut().remove(&key(m));
    }
}

async fn connect(m: &Member, timeout: Duration) -> Result<SendRequest<Bytes>, ConnectError> {
    let tcp = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(m.addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ConnectError::Io(e)),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let _ = tcp.set_nodelay(true);
    let handshake = h2::client::Builder::new()
        .initial_window_size(256 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .handshake::<_, Bytes>(tcp);
    let (send, conn) = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Err(ConnectError::Io(std::io::Error::other(e))),
        Err(_) => return Err(ConnectError::Timeout),
    };
    let counters = m.counters.clone();
    let c = counters.local();
    stats::inc(&c.server_connections_total);
    stats::inc(&c.server_connections_active);
    let label = m.addr;
    tokio::task::spawn_local(async move {
        if let Err(e) = conn.await {
            log::debug(format_args!("member {label}: HTTP/2 connection ended: {e}"));
        }
        stats::dec(&counters.local().server_connections_active);
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
    let pc = pool.counters.local();
    stats::inc(&pc.requests);
    let hash = request_hash(pool, req, client.peer.ip());
    let sticky = match &pool.persistence {
        Some(Persist::Cookie(name)) => route::cookie(req, name).and_then(|v| {
            pool.members
                .iter()
                .position(|m| m.cookie_id.as_bytes() == v)
        }),
        _ => None,
    };
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
    let mut tried = Tried::default();
    let mut retries_left = st.retries;
    let mut last_failure: Option<(u16, String)> = None;
    // Until the request is sent, a failure may move to another member.
    let (i, _inflight, resp_fut, up_send) = loop {
        let Some(i) = pool.balancer.pick(&pool.members, sticky, hash, tried) else {
            if let Some((status, why)) = &last_failure {
                return fail(respond, *status, why);
            }
            stats::inc(&pc.no_member_available);
            let why = format!(
                "no server is available to handle this request (pool \"{}\")",
                pool.name
            );
            return fail(respond, 503, &why);
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
            .ready(m, Duration::from_millis(st.upstream_connect_ms))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                stats::inc(&mc.connect_failures);
                passive_result(pool, m, true);
                log::warn(format_args!(
                    "vserver {}: member {}: HTTP/2 connect failed: {e}",
                    vs.name,
                    m.label(&pool.name)
                ));
                let status = if matches!(e, ConnectError::Timeout) {
                    504
                } else {
                    502
                };
                let why = format!("could not connect to a server of pool \"{}\"", pool.name);
                if retries_left > 0 {
                    retries_left -= 1;
                    last_failure = Some((status, why));
                    continue;
                }
                return fail(respond, status, &why);
            }
        };
        if reused {
            stats::inc(&mc.connections_reused);
        }
        match sender.send_request(head.clone(), end_of_request) {
            Ok((resp, send)) => {
                stats::inc(&mc.requests);
                break (i, inflight, resp, send);
            }
            Err(e) => {
                // The connection went away between ready() and now.
                ctx.h2_members.forget(m);
                stats::inc(&mc.resets);
                if retries_left > 0 {
                    retries_left -= 1;
                    tried.remove(i);
                    last_failure = Some((502, format!("HTTP/2 member connection failed: {e}")));
                    continue;
                }
                return fail(respond, 502, "the server's HTTP/2 connection failed");
            }
        }
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
        let cookie = match &pool.persistence {
            Some(Persist::Cookie(name)) if sticky != Some(i) => {
                Some(format!("{name}={}; Path=/; HttpOnly", m.cookie_id))
            }
            _ => None,
        };
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
