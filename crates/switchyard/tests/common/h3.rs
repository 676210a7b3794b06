//! A small HTTP/3 client for tests that check what a request does, not
//! how QUIC carries it (quinn and h3, in-process: a request costs
//! milliseconds where the aioquic client of tests/h3/client.py, for
//! interoperability, costs a Python start). One request per connection.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// An answer over HTTP/3.
#[derive(Debug)]
pub struct H3Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Sends one request over a new QUIC connection to `addr` with `sni`
/// (checked against `ca`), `authority` as `:authority`; the answer, or
/// what went wrong.
pub fn h3_request(
    addr: SocketAddr,
    ca: &Path,
    sni: &str,
    (method, authority, path): (&str, &str, &str),
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<H3Answer, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let work = async {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).map_err(|e| e.to_string())? {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic =
            quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
        let bind: SocketAddr = if addr.is_ipv4() {
            "127.0.0.1:0".parse().map_err(|_| "addr")?
        } else {
            "[::1]:0".parse().map_err(|_| "addr")?
        };
        let mut endpoint = quinn::Endpoint::client(bind).map_err(|e| e.to_string())?;
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let conn = endpoint
            .connect(addr, sni)
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| format!("QUIC: {e}"))?;
        let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .map_err(|e| format!("HTTP/3: {e}"))?;
        let drive = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("https://{authority}{path}"));
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = req.body(()).map_err(|e| e.to_string())?;
        let mut stream = send
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        if !body.is_empty() {
            stream
                .send_data(Bytes::copy_from_slice(body))
                .await
                .map_err(|e| format!("body: {e}"))?;
        }
        stream.finish().await.map_err(|e| format!("finish: {e}"))?;
        let resp = stream
            .recv_response()
            .await
            .map_err(|e| format!("response: {e}"))?;
        let mut out = Vec::new();
        while let Some(mut chunk) = stream
            .recv_data()
            .await
            .map_err(|e| format!("response body: {e}"))?
        {
            while chunk.has_remaining() {
                let c = chunk.chunk();
                out.extend_from_slice(c);
                let n = c.len();
                chunk.advance(n);
            }
        }
        let answer = H3Answer {
            status: resp.status().as_u16(),
            headers: resp
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: out,
        };
        conn.close(0u32.into(), b"done");
        drive.abort();
        endpoint.wait_idle().await;
        Ok::<_, String>(answer)
    };
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), work)
            .await
            .map_err(|_| "no answer in 10 s".to_string())?
    })
}

/// A Python that has aioquic: target/pyvenv's (scripts/test.sh makes it),
/// or the system's when it has the module; None skips the HTTP/3 part of a
/// test (said on stderr).
pub fn aioquic_python() -> Option<std::path::PathBuf> {
    super::python_with("aioquic")
}

/// tests/h3/client.py (aioquic, a QUIC stack that is not ours): `requests`
/// (JSON, see client.py) on one connection to `listen` with `sni`, `args`
/// after its four fixed ones, presenting `cert` (and its key) when asked;
/// its JSON output.
pub fn aioquic_client(
    py: &Path,
    to: (SocketAddr, &Path, &str),
    requests: &serde_json::Value,
    args: &[String],
    cert: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> serde_json::Value {
    aioquic_script(py, "client.py", to, requests, args, cert)
}

/// One of the aioquic scripts of tests/h3 (`script`), to `listen` with
/// `sni`: `input` (JSON) on its standard input, `args` after its four
/// fixed ones; its JSON output.
pub fn aioquic_script(
    py: &Path,
    script: &str,
    to: (SocketAddr, &Path, &str),
    input: &serde_json::Value,
    args: &[String],
    cert: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> serde_json::Value {
    let mut env = Vec::new();
    if let Some((cert, key)) = cert {
        env.push(("H3_CLIENT_CERT", cert.as_os_str()));
        env.push(("H3_CLIENT_KEY", key.as_os_str()));
    }
    aioquic_script_env(py, script, to, input, args, &env)
}

/// `aioquic_script` with `env` set for the script (client.py's
/// H3_CLIENT_CERT and H3_CLIENT_KEY, H3_FRAMES).
pub fn aioquic_script_env(
    py: &Path,
    script: &str,
    (listen, ca, sni): (SocketAddr, &Path, &str),
    input: &serde_json::Value,
    args: &[String],
    env: &[(&str, &std::ffi::OsStr)],
) -> serde_json::Value {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/h3")
        .join(script);
    let mut client = Command::new(py);
    client.envs(env.iter().copied());
    let mut child = client
        .arg(script)
        .args([&listen.ip().to_string(), &listen.port().to_string()])
        .arg(ca)
        .arg(sni)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the HTTP/3 client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write the client's input");
    let out = child.wait_with_output().expect("the HTTP/3 client");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client output ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
