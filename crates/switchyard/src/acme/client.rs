//! The ACME client's HTTPS transport: one HTTP/1.1 request per connection
//! over tokio-rustls, for instant-acme's `HttpClient` trait.
//!
//! Why not instant-acme's default (hyper-rustls): it brings hyper,
//! hyper-util, hyper-rustls and their tower/futures tree (about 40 crates)
//! for a client that sends a handful of small JSON requests a day. The
//! proxy already links rustls, tokio-rustls and httparse; this is the
//! few lines that join them. One connection per request costs a TLS
//! handshake each (a certificate order is about ten requests), which is
//! nothing next to the CA's own validation delays.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Debian's bundle, as for members' TLS (config/tls_upstream.rs).
const SYSTEM_CA: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Longest a request may take, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response accepted (a certificate chain is a few KB).
const MAX_RESPONSE: usize = 1 << 20;

pub struct Client {
    tls: tokio_rustls::TlsConnector,
    throttle: Arc<Throttle>,
}

/// What the CA said about its load: every 429 and 5xx answer is counted,
/// and the latest Retry-After kept for the task's next try (instant-acme
/// turns those answers into errors and forgets the header).
#[derive(Default)]
pub struct Throttle {
    /// 429 and 5xx answers since the process started.
    pub answers: std::sync::atomic::AtomicU64,
    /// The Retry-After of the latest one, as an instant; taken by the task.
    retry_at: std::sync::Mutex<Option<std::time::SystemTime>>,
}

impl Throttle {
    /// How long the CA asked to be left alone, from now (once).
    pub fn take_retry_after(&self) -> Option<Duration> {
        let at = self
            .retry_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        at.duration_since(std::time::SystemTime::now()).ok()
    }

    fn note(&self, retry_after: Option<&[u8]>) {
        self.answers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let at = retry_after
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| {
                let v = v.trim();
                match v.parse::<u64>() {
                    Ok(secs) => Some(std::time::SystemTime::now() + Duration::from_secs(secs)),
                    Err(_) => crate::cache::httpdate::parse(v.as_bytes())
                        .map(|t| std::time::UNIX_EPOCH + Duration::from_secs(t.max(0) as u64)),
                }
            });
        *self.retry_at.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }
}

impl Client {
    /// Trusts the PEM roots in `roots`, or the system bundle; the CA's
    /// 429 and 5xx answers are noted in `throttle`.
    pub fn new(roots: Option<&std::path::Path>, throttle: Arc<Throttle>) -> Result<Client, String> {
        let path = roots.unwrap_or(std::path::Path::new(SYSTEM_CA));
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut store = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&pem) {
            let c = c.map_err(|e| format!("{}: {e}", path.display()))?;
            let _ = store.add(c);
        }
        if store.is_empty() {
            return Err(format!("{} holds no usable certificate", path.display()));
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
        Ok(Client {
            tls: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
            throttle,
        })
    }
}

fn other(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Other(e.into())
}

impl HttpClient for Client {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let tls = self.tls.clone();
        let throttle = self.throttle.clone();
        Box::pin(async move {
            let r = match tokio::time::timeout(TIMEOUT, send(tls, req)).await {
                Ok(r) => r,
                Err(_) => Err(other(format!("no answer within {}s", TIMEOUT.as_secs()))),
            };
            if let Ok(resp) = &r {
                let status = resp.parts.status.as_u16();
                if status == 429 || status >= 500 {
                    throttle.note(resp.parts.headers.get("retry-after").map(|v| v.as_bytes()));
                }
            }
            r
        })
    }
}

async fn send(
    tls: tokio_rustls::TlsConnector,
    req: Request<BodyWrapper<Bytes>>,
) -> Result<BytesResponse, Error> {
    let (parts, body) = req.into_parts();
    let body = http_body_util::BodyExt::collect(body)
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let uri = &parts.uri;
    if uri.scheme_str() != Some("https") {
        return Err(other(format!("{uri}: the CA must be reached over https")));
    }
    let host = uri.host().ok_or_else(|| other(format!("{uri}: no host")))?;
    let port = uri.port_u16().unwrap_or(443);
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| other(format!("{uri}: {e}")))?;
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| other(format!("cannot connect to {host}:{port}: {e}")))?;
    let mut s = tls
        .connect(name, tcp)
        .await
        .map_err(|e| other(format!("TLS with {host}:{port}: {e}")))?;
    let target = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    // The authority with its port: a CA builds its URLs from it.
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or(host);
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nhost: {authority}\r\n",
        parts.method
    );
    for (k, v) in &parts.headers {
        if let Ok(v) = v.to_str() {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\nuser-agent: switchyard\r\n\r\n",
        body.len()
    ));
    s.write_all(head.as_bytes()).await.map_err(other)?;
    s.write_all(&body).await.map_err(other)?;
    s.flush().await.map_err(other)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // Servers that skip close_notify end with an error after the
        // whole response: what was read is judged by its framing below.
        let n = match s.read(&mut buf).await {
            Ok(n) => n,
            Err(_) if !raw.is_empty() => 0,
            Err(e) => return Err(other(e)),
        };
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if raw.len() > MAX_RESPONSE {
            return Err(other("response over 1 MiB"));
        }
    }
    parse(&raw)
}

/// A whole HTTP/1.1 response (read to the connection's end).
fn parse(raw: &[u8]) -> Result<BytesResponse, Error> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut fields);
    let len = match r.parse(raw).map_err(other)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Err(other("truncated response head")),
    };
    let mut b = http::Response::builder().status(r.code.unwrap_or(500));
    let mut chunked = false;
    let mut length = None;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
            continue;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
        }
        b = b.header(h.name, h.value);
    }
    let rest = &raw[len..];
    let body = if chunked {
        dechunk(rest).ok_or_else(|| other("malformed chunked body"))?
    } else {
        match length {
            Some(n) if n <= rest.len() => rest[..n].to_vec(),
            Some(_) => return Err(other("truncated response body")),
            None => rest.to_vec(),
        }
    };
    let resp = b.body(()).map_err(other)?;
    let (parts, ()) = resp.into_parts();
    Ok(BytesResponse {
        parts,
        body: Box::new(Bytes::from(body)),
    })
}

fn dechunk(mut s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = s.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&s[..eol]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        s = &s[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(s.get(..size)?);
        s = s.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_and_sized_bodies() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"5\r\nab").is_none());
        let r =
            parse(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nLocation: /o/1\r\n\r\nokEXTRA")
                .unwrap();
        assert_eq!(r.parts.status, 201);
        assert_eq!(r.parts.headers["location"], "/o/1");
    }
}
