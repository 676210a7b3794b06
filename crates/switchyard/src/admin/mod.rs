//! The admin listener (control thread): the REST API (`api.rs`, described
//! by `openapi.json`), the counters as text, JSON and Prometheus, a live
//! event stream and the dashboard.
//!
//! One request per connection (`Connection: close`): the API is for people,
//! scripts and a page polling once a second, never for the data path. The
//! listener is loopback by default, may speak TLS (client certificates
//! too) and, with a tokens file, wants `Authorization: Bearer <token>` on
//! every route but `/healthz`, the OpenAPI document and the dashboard's
//! static files.

pub mod api;
/// Tokens are read with the configuration (a reload rotates them).
pub use crate::config::tokens as auth;
mod dashboard;
mod live;
mod render;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::config::Snapshot;
use crate::http::head::{parse_request, HeadScanner};
use crate::http::message::{Framing, Request};
use crate::http::responses;
use crate::log;
pub use auth::{Caller, Role};
pub use render::member_state;

/// What the admin endpoint needs of the running instance; the runtime's
/// control side provides it (the admin module does not know the runtime).
pub trait Control {
    /// The configuration serving now.
    fn snapshot(&self) -> Arc<Snapshot>;
    /// Re-reads the configuration and publishes it, or explains why not.
    fn reload(&self) -> Result<u64, String>;
}

impl<T: Control> Control for Rc<T> {
    fn snapshot(&self) -> Arc<Snapshot> {
        (**self).snapshot()
    }
    fn reload(&self) -> Result<u64, String> {
        (**self).reload()
    }
}

/// Largest request body the API reads (JSON edits are a few hundred bytes).
const MAX_BODY: u64 = 64 * 1024;
/// Largest configuration an admin may publish through the API (10,000
/// routes rendered by the Kubernetes controller are 3.4 MB).
const MAX_CONFIG_BODY: u64 = 32 << 20;
/// Changes remembered for `GET /api/v1/audit`.
const AUDIT_KEEP: usize = 200;

/// Whether this node should receive new traffic: false once an operator
/// drains it (`POST /api/v1/node`), so a VRRP check or a BGP announcer
/// watching `/readyz` moves the VIP away while every request still gets
/// served.
static DRAINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn ready() -> bool {
    !DRAINED.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn set_ready(ready: bool) {
    DRAINED.store(!ready, std::sync::atomic::Ordering::Relaxed);
}

/// State of the admin endpoint itself, on the control thread.
pub struct Admin<C> {
    pub control: C,
    audit: RefCell<VecDeque<serde_json::Value>>,
    live: RefCell<live::History>,
}

impl<C: Control> Admin<C> {
    pub fn new(control: C) -> Admin<C> {
        Admin {
            control,
            audit: RefCell::new(VecDeque::new()),
            live: RefCell::new(live::History::default()),
        }
    }

    /// Logs a change with who made it, and keeps it for the audit route.
    pub fn record_change(&self, who: &Caller, peer: SocketAddr, what: &str, ok: bool) {
        log::info(format_args!(
            "admin: {who} from {peer}: {what}{}",
            if ok { "" } else { " (refused)" }
        ));
        let mut a = self.audit.borrow_mut();
        if a.len() == AUDIT_KEEP {
            a.pop_front();
        }
        a.push_back(serde_json::json!({
            "time": crate::tls::format_time(crate::clock::unix_secs()),
            "who": who.name,
            "role": who.role.as_str(),
            "from": peer.to_string(),
            "change": what,
            "ok": ok,
        }));
    }

    pub fn audit(&self) -> Vec<serde_json::Value> {
        self.audit.borrow().iter().cloned().collect()
    }

    /// The live samples kept (oldest first), for a page that just opened.
    pub fn history(&self) -> Vec<Arc<str>> {
        self.live.borrow().all(&self.control.snapshot())
    }
}

/// Takes a live sample every `live::PERIOD` (rates need a steady clock,
/// whoever is watching).
async fn sample_forever<C: Control>(admin: Rc<Admin<C>>) {
    let mut tick = tokio::time::interval(live::PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let snap = admin.control.snapshot();
        admin.live.borrow_mut().take(&snap);
    }
}

pub async fn serve<C: Control + 'static>(listener: TcpListener, admin: Rc<Admin<C>>) {
    tokio::task::spawn_local(sample_forever(admin.clone()));
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let admin = admin.clone();
        tokio::task::spawn_local(async move {
            let _ = stream.set_nodelay(true);
            let tls = admin
                .control
                .snapshot()
                .admin
                .as_ref()
                .and_then(|a| a.tls.clone());
            match tls {
                None => connection(stream, peer, &admin).await,
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
                    let accepted =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                            .await;
                    match accepted {
                        Ok(Ok(s)) => connection(s, peer, &admin).await,
                        Ok(Err(e)) => {
                            log::debug(format_args!("admin: TLS handshake from {peer}: {e}"))
                        }
                        Err(_) => {
                            log::debug(format_args!("admin: TLS handshake from {peer} timed out"))
                        }
                    }
                }
            }
        });
    }
}

/// What a route answers: a whole response, or the event stream.
pub enum Reply {
    Full(Vec<u8>),
    Events,
}

async fn connection<S, C>(mut s: S, peer: SocketAddr, admin: &Admin<C>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: Control,
{
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        read_request(&mut s, |req| api::publishes_configuration(admin, req)),
    )
    .await;
    let (req, body) = match read {
        Ok(Ok(Some(r))) => r,
        Ok(Err(answer)) => {
            let _ = s.write_all(&answer).await;
            let _ = s.shutdown().await;
            return;
        }
        Ok(Ok(None)) | Err(_) => return,
    };
    match api::handle(admin, peer, &req, &body) {
        Reply::Full(out) => {
            let _ = tokio::time::timeout(Duration::from_secs(10), async {
                let _ = s.write_all(&out).await;
                let _ = s.shutdown().await;
            })
            .await;
        }
        Reply::Events => events(&mut s, admin).await,
    }
}

/// Reads one request: its head and a body of at most `MAX_BODY` bytes
/// (`MAX_CONFIG_BODY` for a request `publishes` says is an admin's
/// configuration). Err carries the answer to a request that cannot be
/// served.
async fn read_request<S: AsyncRead + Unpin>(
    s: &mut S,
    publishes: impl Fn(&Request) -> bool,
) -> Result<Option<(Request, Vec<u8>)>, Vec<u8>> {
    let mut buf = BytesMut::with_capacity(4096);
    let mut scanner = HeadScanner::default();
    let (start, end) = loop {
        match scanner.scan(&buf, 8192, 16384) {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => return Err(responses::error(e.status, e.reason, true)),
        }
        match s.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(_) => {}
        }
    };
    let head = buf.split_to(end).freeze().slice(start..);
    let req = parse_request(head, 64).map_err(|e| responses::error(e.status, e.reason, true))?;
    let want = match req.head.framing {
        Framing::None => 0,
        Framing::Length(n) if n <= MAX_BODY => n as usize,
        Framing::Length(n) if n <= MAX_CONFIG_BODY && publishes(&req) => n as usize,
        Framing::Length(_) => {
            return Err(responses::error(
                413,
                "the admin API takes bodies of at most 64 KiB (a configuration published by an admin: 32 MiB)",
                true,
            ))
        }
        Framing::Chunked | Framing::Close => {
            return Err(responses::error(
                411,
                "send the body with a Content-Length",
                true,
            ))
        }
    };
    let mut body = buf.to_vec();
    while body.len() < want {
        let mut more = [0u8; 4096];
        match s.read(&mut more).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => body.extend_from_slice(&more[..n]),
        }
    }
    body.truncate(want);
    Ok(Some((req, body)))
}

/// `GET /api/v1/events`: one server-sent event a second with the live
/// sample (rates, latency, members), until the client goes away.
async fn events<S: AsyncWrite + Unpin, C: Control>(s: &mut S, admin: &Admin<C>) {
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\nconnection: close\r\n\r\n";
    if s.write_all(head).await.is_err() {
        return;
    }
    // Polled four times a period: a new sample goes out soon after it is taken.
    let mut tick = tokio::time::interval(live::PERIOD / 4);
    let mut last = None;
    loop {
        tick.tick().await;
        let Some(sample) = admin.live.borrow().latest(&admin.control.snapshot()) else {
            continue;
        };
        if last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &sample)) {
            continue;
        }
        let frame = format!("event: sample\ndata: {sample}\n\n");
        last = Some(sample);
        let sent =
            tokio::time::timeout(Duration::from_secs(5), s.write_all(frame.as_bytes())).await;
        if !matches!(sent, Ok(Ok(()))) {
            return;
        }
    }
}
