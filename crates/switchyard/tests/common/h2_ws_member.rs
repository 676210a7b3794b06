//! An h2c member that takes WebSocket by extended CONNECT (RFC 8441), as
//! an HTTP/2 application server does: it announces
//! SETTINGS_ENABLE_CONNECT_PROTOCOL (unless told not to), answers a
//! `:protocol websocket` CONNECT with 200 and echoes each frame unmasked
//! (a close frame, then the end of its side of the stream), refuses
//! `/deny` with 403, and answers any other request 200 "plain".

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{ws_frame, ws_read_frame};

/// A request as the member saw it.
#[derive(Debug, Clone)]
pub struct H2Seen {
    pub method: String,
    pub protocol: Option<String>,
    pub scheme: Option<String>,
    pub path: String,
    pub authority: Option<String>,
    pub headers: Vec<(String, String)>,
}

impl H2Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct H2WsMember {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<H2Seen>>>,
    /// How each tunnel's stream ended on the client's side: "end"
    /// (END_STREAM) or "reset".
    ends: Arc<Mutex<Vec<&'static str>>>,
}

impl H2WsMember {
    /// `connect_protocol`: whether its SETTINGS allow the extended CONNECT.
    pub fn start(connect_protocol: bool) -> H2WsMember {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let ends = Arc::new(Mutex::new(Vec::new()));
        let log = (seen.clone(), ends.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                while let Ok((tcp, _)) = listener.accept().await {
                    tokio::spawn(serve(tcp, connect_protocol, log.clone()));
                }
            });
        });
        H2WsMember { addr, seen, ends }
    }

    pub fn seen(&self) -> Vec<H2Seen> {
        self.seen.lock().expect("seen").clone()
    }

    pub fn ends(&self) -> Vec<&'static str> {
        self.ends.lock().expect("ends").clone()
    }
}

type Log = (Arc<Mutex<Vec<H2Seen>>>, Arc<Mutex<Vec<&'static str>>>);

async fn serve(tcp: tokio::net::TcpStream, connect_protocol: bool, log: Log) {
    let mut b = h2::server::Builder::new();
    if connect_protocol {
        b.enable_connect_protocol();
    }
    let Ok(mut conn) = b.handshake::<_, Bytes>(tcp).await else {
        return;
    };
    while let Some(Ok((req, respond))) = conn.accept().await {
        let seen = H2Seen {
            method: req.method().to_string(),
            protocol: req
                .extensions()
                .get::<h2::ext::Protocol>()
                .map(|p| p.as_str().to_string()),
            scheme: req.uri().scheme_str().map(str::to_string),
            path: req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            authority: req.uri().authority().map(|a| a.to_string()),
            headers: req
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        };
        log.0.lock().expect("seen").push(seen.clone());
        tokio::spawn(answer(seen, req.into_body(), respond, log.1.clone()));
    }
}

async fn answer(
    seen: H2Seen,
    mut recv: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    ends: Arc<Mutex<Vec<&'static str>>>,
) {
    let websocket = seen.method == "CONNECT" && seen.protocol.as_deref() == Some("websocket");
    if !websocket || seen.path.starts_with("/deny") {
        let (status, body) = if websocket {
            (403, "no websocket here\n")
        } else {
            (200, "plain\n")
        };
        let resp = http::Response::builder()
            .status(status)
            .header("content-length", body.len())
            .body(())
            .expect("response");
        if let Ok(mut s) = respond.send_response(resp, false) {
            let _ = s.send_data(Bytes::from_static(body.as_bytes()), true);
        }
        return;
    }
    let mut resp = http::Response::builder().status(200);
    if let Some(p) = seen.header("sec-websocket-protocol") {
        resp = resp.header(
            "sec-websocket-protocol",
            p.split(',').next().unwrap_or(p).trim(),
        );
    }
    let Ok(mut out) = respond.send_response(resp.body(()).expect("response"), false) else {
        return;
    };
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let chunk = match recv.data().await {
            Some(Ok(c)) => c,
            Some(Err(_)) => {
                ends.lock().expect("ends").push("reset");
                return;
            }
            None => {
                ends.lock().expect("ends").push("end");
                break;
            }
        };
        let _ = recv.flow_control().release_capacity(chunk.len());
        pending.extend_from_slice(&chunk);
        loop {
            let mut c = std::io::Cursor::new(&pending[..]);
            let Some((op, payload)) = ws_read_frame(&mut c) else {
                break;
            };
            let used = c.position() as usize;
            pending.drain(..used);
            let mut frame = Bytes::from(ws_frame(op, &payload, None));
            let close = op == 8;
            while !frame.is_empty() {
                out.reserve_capacity(frame.len());
                let Some(Ok(n)) = std::future::poll_fn(|cx| out.poll_capacity(cx)).await else {
                    return;
                };
                let piece = frame.split_to(n.min(frame.len()));
                if out.send_data(piece, close && frame.is_empty()).is_err() {
                    return;
                }
            }
            if close {
                // The client's END_STREAM follows (h2 hands an empty
                // DATA frame that carries it over as a chunk first).
                let ended = loop {
                    match recv.data().await {
                        None => break "end",
                        Some(Ok(c)) if c.is_empty() => {}
                        Some(_) => break "reset",
                    }
                };
                ends.lock().expect("ends").push(ended);
                return;
            }
        }
    }
    let _ = out.send_data(Bytes::new(), true);
}
