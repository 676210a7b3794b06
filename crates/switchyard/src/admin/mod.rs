//! The local admin endpoint (control thread): counters as text, JSON and
//! Prometheus, and reload. The full admin API and dashboard come later.
//!
//! GET /stats, GET /stats.json, GET /metrics, POST /reload, GET /healthz.

mod render;

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::Snapshot;
use crate::http::head::{parse_request, HeadScanner};
use crate::http::responses;
use crate::log;

/// What the admin endpoint needs of the running instance; the runtime's
/// control side provides it (the admin module does not know the runtime).
pub trait Control {
    /// The configuration serving now.
    fn snapshot(&self) -> Arc<Snapshot>;
    /// Re-reads the configuration and publishes it, or explains why not.
    fn reload(&self) -> Result<u64, String>;
}

pub async fn serve<C: Control + 'static>(listener: TcpListener, control: Rc<C>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let control = control.clone();
        tokio::task::spawn_local(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), handle(stream, &*control)).await;
        });
    }
}

async fn handle<C: Control>(mut s: TcpStream, control: &C) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(4096);
    let mut scanner = HeadScanner::default();
    let (start, end) = loop {
        match scanner.scan(&buf, 8192, 16384) {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                return s
                    .write_all(&responses::error(e.status, e.reason, true))
                    .await
            }
        }
        if s.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    };
    let head = buf.split_to(end).freeze().slice(start..);
    let req = match parse_request(head, 64) {
        Ok(r) => r,
        Err(e) => {
            return s
                .write_all(&responses::error(e.status, e.reason, true))
                .await
        }
    };
    let snap = control.snapshot();
    let path = req.path_only().to_vec();
    let out = match (req.method_str(), path.as_slice()) {
        (b"GET", b"/stats") => responses::simple(200, "text/plain; charset=utf-8", render::text(&snap).as_bytes(), true, &[]),
        (b"GET", b"/stats.json") => responses::simple(200, "application/json", render::json(&snap).as_bytes(), true, &[]),
        (b"GET", b"/metrics") => responses::simple(200, "text/plain; version=0.0.4", render::prometheus(&snap).as_bytes(), true, &[]),
        (b"GET", b"/healthz") => responses::simple(200, "text/plain", b"ok\n", true, &[]),
        (b"GET", b"/") => responses::simple(
            200,
            "text/plain",
            b"switchyard admin: GET /stats, GET /stats.json, GET /metrics, POST /reload, POST /cache/purge?url=URL|prefix=URL, GET /healthz\n",
            true,
            &[],
        ),
        (b"POST", b"/reload") => match control.reload() {
            Ok(g) => responses::simple(200, "text/plain", format!("reloaded: configuration generation {g} is live\n").as_bytes(), true, &[]),
            Err(e) => {
                log::error(format_args!("reload rejected, the running configuration stays:\n{e}"));
                responses::simple(400, "text/plain", format!("reload rejected, the running configuration stays:\n{e}\n").as_bytes(), true, &[])
            }
        },
        (_, b"/reload") => responses::error(405, "use POST /reload", true),
        (b"POST", b"/cache/purge") => purge(&snap, req.query().unwrap_or_default()),
        (_, b"/cache/purge") => responses::error(405, "use POST /cache/purge?url=URL or ?prefix=URL", true),
        _ => responses::error(404, "unknown admin path; try GET /", true),
    };
    s.write_all(&out).await?;
    s.shutdown().await
}

/// `POST /cache/purge?url=http://host/path` removes that URL (every variant
/// and key extra); `?prefix=http://host/dir/` every URL under it.
fn purge(snap: &Snapshot, query: &[u8]) -> Vec<u8> {
    let query = String::from_utf8_lossy(query);
    let (how, url) = query.split_once('=').unwrap_or(("", ""));
    let url = percent_decode(url);
    if url.is_empty() || !matches!(how, "url" | "prefix") {
        return responses::error(
            400,
            "give ?url=http://host/path or ?prefix=http://host/path",
            true,
        );
    }
    let key = crate::cache::url_key(&url);
    let n = if how == "prefix" {
        snap.cache.purge_prefix(&key)
    } else {
        let mut extras = key.clone();
        extras.push(0);
        usize::from(snap.cache.invalidate(&key)) + snap.cache.purge_prefix(&extras)
    };
    log::info(format_args!("admin: cache purge {how} {url}: {n} removed"));
    let body = format!("{{\"purged\":{n}}}\n");
    responses::simple(200, "application/json", body.as_bytes(), true, &[])
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
