//! The built-in quickstart: with no config file, `switchyard run` starts two
//! demo origins itself and balances a listener over them, so a newcomer sees
//! load balancing, content switching and health checks with one command.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::http::body;
use crate::http::head::{parse_request, HeadScanner};
use crate::http::responses;

pub const LISTEN: &str = "127.0.0.1:8080";
pub const ADMIN: &str = "127.0.0.1:9090";
pub const ORIGINS: [&str; 2] = ["127.0.0.1:9001", "127.0.0.1:9002"];

pub fn config_text() -> String {
    format!(
        r#"# Built-in quickstart configuration (switchyard run with no -c).
# One worker: round robin is per worker, so with one the demo pool
# alternates between its origins even across separate curl runs (each a new
# connection, which the kernel may hand to any worker).
[global]
workers = 1

[admin]
listen = "{ADMIN}"

[[vserver]]
name = "quickstart"
listen = ["{LISTEN}"]
default_pool = "demo"
response_headers = {{ set = {{ "x-served-by" = "switchyard" }} }}

[[vserver.policy]]
name = "images"
match = {{ path_prefix = "/images/" }}
action = {{ pool = "images" }}

[[vserver.policy]]
name = "old-docs"
match = {{ path_prefix = "/old/" }}
action = {{ redirect = "/", status = 301 }}

[[pool]]
name = "demo"
algorithm = "round-robin"
[pool.health]
type = "http"
path = "/health"
interval = "2s"
[[pool.member]]
address = "{o1}"
[[pool.member]]
address = "{o2}"

[[pool]]
name = "images"
algorithm = "consistent-hash"
hash_key = "uri"
[[pool.member]]
address = "{o1}"
[[pool.member]]
address = "{o2}"
"#,
        o1 = ORIGINS[0],
        o2 = ORIGINS[1]
    )
}

pub fn banner() -> String {
    format!(
        "Switchyard quickstart: vserver on http://{LISTEN}/ balancing over demo origins {} and {}.\n\
         Try:\n  curl -s http://{LISTEN}/            # alternates between the two origins\n  \
         curl -s http://{LISTEN}/images/cat.png  # consistent hashing: always the same origin\n  \
         curl -si http://{LISTEN}/old/page       # a redirect answered by Switchyard\n  \
         curl -s http://{ADMIN}/stats          # counters (or: switchyard stats)\n\
         Ctrl-C drains and stops. Write your own config (see README) and run: switchyard run -c FILE\n",
        ORIGINS[0], ORIGINS[1]
    )
}

/// Starts the demo origins on a thread of their own.
pub fn start_origins() -> Result<(), String> {
    let mut listeners = Vec::new();
    for (i, a) in ORIGINS.iter().enumerate() {
        let addr: SocketAddr = a.parse().map_err(|e| format!("{a}: {e}"))?;
        let l = std::net::TcpListener::bind(addr)
            .map_err(|e| format!("demo origin {}: cannot listen on {addr}: {e}", i + 1))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        listeners.push((i + 1, addr, l));
    }
    std::thread::Builder::new()
        .name("demo-origins".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let mut tasks = Vec::new();
                for (n, addr, l) in listeners {
                    let Ok(l) = TcpListener::from_std(l) else {
                        continue;
                    };
                    tasks.push(tokio::task::spawn_local(origin(n, addr, l)));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

async fn origin(n: usize, addr: SocketAddr, l: TcpListener) {
    loop {
        if let Ok((s, _)) = l.accept().await {
            tokio::task::spawn_local(origin_conn(n, addr, s));
        }
    }
}

async fn origin_conn(n: usize, addr: SocketAddr, mut s: TcpStream) {
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let mut scanner = HeadScanner::default();
        let (start, end) = loop {
            match scanner.scan(&buf, 8192, 65536) {
                Ok(Some(r)) => break r,
                Ok(None) => {}
                Err(_) => return,
            }
            match s.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head = buf.split_to(end).freeze().slice(start..);
        let Ok(req) = parse_request(head, 100) else {
            return;
        };
        if body::transfer(
            &mut s,
            &mut buf,
            req.head.framing,
            &mut body::Discard,
            &mut body::Pacer::gap(Duration::from_secs(30)),
        )
        .await
        .is_err()
        {
            return;
        }
        let text = if req.path_only() == b"/health" {
            "ok\n".to_string()
        } else {
            format!(
                "Hello from demo origin {n} ({addr})\nYou asked for {} {}\n",
                String::from_utf8_lossy(req.method_str()),
                String::from_utf8_lossy(req.target())
            )
        };
        let origin = addr.to_string();
        let resp = responses::simple(
            200,
            "text/plain; charset=utf-8",
            text.as_bytes(),
            !req.head.keep_alive,
            &[("x-origin", &origin)],
        );
        if s.write_all(&resp).await.is_err() || !req.head.keep_alive {
            return;
        }
    }
}
