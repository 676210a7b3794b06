//! A `tcp` vserver's script (`[vserver.script]`, docs/scripting.md): the
//! connection's events, as iRules' CLIENT_ACCEPTED, CLIENT_DATA and
//! CLIENT_CLOSED.
//!
//! - `on_accept(c)`: the client's address; may refuse (`c:reject()`) or
//!   choose the pool.
//! - `on_client_data(c)`: the client's first bytes (`c.data`, at most
//!   `FIRST_BYTES`, or the whole ClientHello), with the ClientHello's
//!   server name and ALPN list when they are one (`c.sni`, `c.alpn`): SNI
//!   routing by script without terminating TLS. May refuse or choose the
//!   pool. The bytes go on to the member as they came.
//! - `on_server_data(c)`: the member's first bytes (`c.data`, at most
//!   `FIRST_BYTES`: a banner, a ServerHello, a response head); what the
//!   client sends meanwhile goes on to the member (`member_first_bytes`),
//!   so a protocol where the client speaks first is not held up. May
//!   refuse (both sides are closed); the bytes go on to the client as they
//!   came.
//! - `on_close(c)`: the bytes each way (`c.bytes_in`, `c.bytes_out`); may
//!   add fields to the access log line (`c:log`), as `on_log`.
//!
//! A pool the script chose wins over `sni_route` and `default_pool`. A
//! failed event (a Lua error, either limit) closes the connection (before
//! any member is connected at `on_accept` and `on_client_data`); it is
//! counted (`script_errors`, `script_timeouts`), logged with its
//! FILE:LINE as for HTTP, and in the access log line (`script_error`),
//! with the fields the events added (`c:log`).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::client_hello::{self, ClientHello};
use crate::accesslog::ScriptLog;
use crate::config::snapshot::{Pool, VServer, VsScript};
use crate::script::{self, Conn, ConnEvent, Failure, Info, State, Vars};
use crate::stats;

/// The most first bytes `on_client_data` sees of a protocol that is not
/// TLS (a TLS ClientHello is read whole, up to its own bound).
pub const FIRST_BYTES: usize = 16 * 1024;

/// What the script decided so far.
pub enum Decision {
    /// Go on, with the pool the script chose (if it did).
    Go(Option<Arc<Pool>>),
    /// Close the connection now.
    Close,
}

/// What a connection event said (`on_accept`, `on_client_hello`).
#[derive(Clone)]
pub enum Said {
    /// Go on, with the certificate the script chose by name (if it did:
    /// `on_client_hello`).
    Go(Option<String>),
    /// `c:reject()` (a handshake_failure alert in a handshake).
    Refuse,
    /// The event failed (counted, logged; an internal_error alert in a
    /// handshake).
    Failed,
}

/// A ClientHello's server name (lower-case, without a trailing dot) and
/// ALPN list, as `c.sni` and `c.alpn` show them.
pub fn hello_names(hello: &rustls::server::ClientHello<'_>) -> (Option<String>, Vec<String>) {
    let sni = hello
        .server_name()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase());
    let alpn = hello
        .alpn()
        .map(|a| a.map(|p| String::from_utf8_lossy(p).into_owned()).collect())
        .unwrap_or_default();
    (sni, alpn)
}

/// A connection's script as the TLS front door runs it: `on_client_hello`
/// between reading the ClientHello and answering it. The HTTP vservers'
/// connection events (`proxy::conn_scripting`) and a TLS-terminating tcp
/// vserver's script (`BeforeHandshake`) both are.
pub trait ClientHelloEvent {
    fn wants_client_hello(&self) -> bool;
    fn client_hello(&mut self, vs: &VServer, sni: Option<String>, alpn: Vec<String>) -> Said;
}

/// The script of a tcp vserver that terminates TLS, run by the front door
/// before the relay: `on_accept` before the handshake (a refused client
/// costs no handshake, as on HTTP vservers), `on_client_hello` in it;
/// the relay takes it on (`c.vars`, `c:log` fields, the chosen pool).
pub struct BeforeHandshake {
    pub(super) script: ConnScript,
    /// The pool `on_accept` or `on_client_hello` chose (the later wins).
    pub(super) pool: Option<Arc<Pool>>,
}

impl BeforeHandshake {
    /// `on_accept` for `client`: None when `vs` has no script; Err when
    /// the script refused the connection or failed (counted, logged),
    /// with what its events said for the connection's log line.
    pub fn accept(
        vs: &VServer,
        client: SocketAddr,
    ) -> Result<Option<BeforeHandshake>, Option<Box<ScriptLog>>> {
        let Some(mut script) = ConnScript::start(vs, client, true).map_err(|()| None)? else {
            return Ok(None);
        };
        match script.accept(vs) {
            Decision::Go(pool) => Ok(Some(BeforeHandshake { script, pool })),
            Decision::Close => Err(script.take_log()),
        }
    }

    /// What the events said so far, for the line of a connection that
    /// ends before the relay (a failed or refused handshake).
    pub fn take_log(&mut self) -> Option<Box<ScriptLog>> {
        self.script.take_log()
    }
}

impl ClientHelloEvent for BeforeHandshake {
    fn wants_client_hello(&self) -> bool {
        self.script.vs_script.script.events.client_hello
    }

    fn client_hello(&mut self, vs: &VServer, sni: Option<String>, alpn: Vec<String>) -> Said {
        let mut c = conn(ConnEvent::ClientHello);
        c.sni = sni;
        c.alpn = alpn;
        let (said, pool) = self.script.run_event(vs, c);
        if pool.is_some() {
            self.pool = pool;
        }
        said
    }
}

/// One connection's run of the script.
pub struct ConnScript {
    vs_script: Arc<VsScript>,
    state: Rc<State>,
    vars: Vars,
    client: SocketAddr,
    tls: bool,
    /// The access log line's script fields (`c:log`) and first error.
    log: Option<Box<ScriptLog>>,
}

/// A connection event that failed: counted on the vserver and logged
/// (once a second, with the script's line). Also the HTTP vservers'
/// connection events' (`proxy::conn_scripting`).
pub(crate) fn failed(vs: &VServer, s: &VsScript, f: &Failure) {
    let c = vs.counters.local();
    stats::inc(&c.script_errors);
    if matches!(f, Failure::Timeout(_)) {
        stats::inc(&c.script_timeouts);
    }
    s.script.log_failure(f);
}

impl ConnScript {
    /// The vserver's script for this connection: None without one; Err
    /// when this worker could not make its state (counted and logged: the
    /// connection is closed).
    pub(super) fn start(
        vs: &VServer,
        client: SocketAddr,
        tls: bool,
    ) -> Result<Option<ConnScript>, ()> {
        let Some(s) = vs.script.clone() else {
            return Ok(None);
        };
        match script::state(&s.script) {
            Ok(state) => Ok(Some(ConnScript {
                vs_script: s,
                state,
                vars: Vars::default(),
                client,
                tls,
                log: None,
            })),
            Err(f) => {
                failed(vs, &s, &f);
                Err(())
            }
        }
    }

    pub fn wants_data(&self) -> bool {
        self.vs_script.script.events.client_data
    }

    pub fn wants_server_data(&self) -> bool {
        self.vs_script.script.events.server_data
    }

    fn run(&mut self, vs: &VServer, conn: Conn) -> Decision {
        match self.run_event(vs, conn) {
            (Said::Go(_), pool) => Decision::Go(pool),
            (Said::Refuse | Said::Failed, _) => Decision::Close,
        }
    }

    /// An event's run: what it said (the certificate it chose in
    /// `Said::Go`) and the pool it chose, if it did.
    fn run_event(&mut self, vs: &VServer, conn: Conn) -> (Said, Option<Arc<Pool>>) {
        let info = Info {
            client: Some(self.client),
            tls: self.tls,
            protocol: "TCP",
            ..Info::default()
        };
        match self.state.on_conn(conn, info, &mut self.vars) {
            None => (Said::Go(None), None),
            Some(Err(f)) => {
                failed(vs, &self.vs_script, &f);
                let log = self.log.get_or_insert_with(Box::default);
                log.error.get_or_insert_with(|| f.message().to_string());
                (Said::Failed, None)
            }
            Some(Ok(mut e)) => {
                if !e.log.is_empty() {
                    let log = self.log.get_or_insert_with(Box::default);
                    for (n, v) in e.log.drain(..) {
                        log.fields.retain(|(k, _)| *k != n);
                        log.fields.push((n, v));
                    }
                }
                if e.reject {
                    stats::inc(&vs.counters.local().script_refusals);
                    (Said::Refuse, None)
                } else {
                    let pool = e.pool.and_then(|i| self.vs_script.pools.get(i).cloned());
                    (Said::Go(e.cert), pool)
                }
            }
        }
    }

    /// What the events added to the access log line, for it.
    pub fn take_log(&mut self) -> Option<Box<ScriptLog>> {
        self.log.take()
    }

    pub fn accept(&mut self, vs: &VServer) -> Decision {
        self.run(vs, conn(ConnEvent::Accept))
    }

    pub fn client_data(
        &mut self,
        vs: &VServer,
        data: &[u8],
        hello: Option<&ClientHello>,
    ) -> Decision {
        let mut c = conn(ConnEvent::ClientData);
        c.data = Bytes::copy_from_slice(data);
        if let Some(h) = hello {
            c.sni = h.server_name.clone();
            c.alpn = h
                .alpn
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
        }
        self.run(vs, c)
    }

    /// `on_server_data`: Close refuses the connection (a pool chosen
    /// here would come too late: the member is connected).
    pub fn server_data(&mut self, vs: &VServer, data: &[u8]) -> Decision {
        let mut c = conn(ConnEvent::ServerData);
        c.data = Bytes::copy_from_slice(data);
        match self.run(vs, c) {
            Decision::Close => Decision::Close,
            Decision::Go(_) => Decision::Go(None),
        }
    }

    pub fn close(&mut self, vs: &VServer, bytes_in: u64, bytes_out: u64) {
        if !self.vs_script.script.events.close {
            return;
        }
        let mut c = conn(ConnEvent::Close);
        c.bytes_in = bytes_in;
        c.bytes_out = bytes_out;
        // Nothing to decide any more: a failure is counted and logged.
        self.run(vs, c);
    }
}

fn conn(event: ConnEvent) -> Conn {
    Conn {
        event,
        data: Bytes::new(),
        sni: None,
        alpn: Vec::new(),
        bytes_in: 0,
        bytes_out: 0,
    }
}

/// The client's first bytes, into `buf`: a whole ClientHello when they
/// open one (then parsed), else what the first read brings (up to
/// `FIRST_BYTES`); nothing when the client says nothing within
/// `timeout_ms` (a protocol whose server speaks first). Err: the client
/// went away, or sent a broken ClientHello.
pub async fn first_bytes(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    timeout_ms: u64,
) -> Result<Option<ClientHello>, String> {
    let work = async {
        let mut chunk = vec![0u8; FIRST_BYTES];
        loop {
            s.readable().await.map_err(|e| e.to_string())?;
            let bound = if buf.first() == Some(&22) {
                client_hello::MAX_BUFFERED
            } else {
                FIRST_BYTES
            };
            let room = bound.saturating_sub(buf.len()).min(chunk.len());
            if room == 0 {
                return Err("a ClientHello longer than its bound".into());
            }
            match s.try_read(&mut chunk[..room]) {
                Ok(0) => return Err("closed before sending anything".to_string()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.to_string()),
            }
            // 22: a TLS handshake record. Anything else is handed over as
            // it came.
            if buf.first() != Some(&22) {
                return Ok(None);
            }
            match client_hello::parse(buf).map_err(|e| e.to_string())? {
                client_hello::Parsed::Incomplete => {}
                client_hello::Parsed::Done(h) => return Ok(Some(h)),
            }
        }
    };
    match tokio::time::timeout(Duration::from_millis(timeout_ms), work).await {
        Ok(r) => r,
        // Silent: nothing to show (or a cut ClientHello: shown as bytes).
        Err(_) => Ok(None),
    }
}

/// The member's first bytes (up to `FIRST_BYTES`) for `on_server_data`,
/// while what the client sends meanwhile goes on to the member (counted
/// by `up`): the client of a protocol where it speaks first (HTTP, TLS)
/// is never held up. Empty when the member said nothing within `wait` or
/// a side closed first (the relay then sees the close again: a read after
/// end of stream gives end of stream).
pub async fn member_first_bytes<C, M>(
    client: &mut C,
    member: &mut M,
    wait: Duration,
    up: impl Fn(u64),
) -> std::io::Result<Vec<u8>>
where
    C: AsyncRead + AsyncWrite + Unpin,
    M: AsyncRead + AsyncWrite + Unpin,
{
    let work = async {
        let mut from_member = vec![0u8; FIRST_BYTES];
        let mut from_client = vec![0u8; FIRST_BYTES];
        loop {
            // Both reads are cancel-safe: the one not chosen lost nothing.
            tokio::select! {
                r = member.read(&mut from_member) => {
                    let n = r?;
                    from_member.truncate(n);
                    return Ok(from_member);
                }
                r = client.read(&mut from_client) => {
                    let n = r?;
                    if n == 0 {
                        return Ok(Vec::new());
                    }
                    member.write_all(&from_client[..n]).await?;
                    member.flush().await?;
                    up(n as u64);
                }
            }
        }
    };
    match tokio::time::timeout(wait, work).await {
        Ok(r) => r,
        Err(_) => Ok(Vec::new()),
    }
}
