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
//! - `on_close(c)`: the bytes each way (`c.bytes_in`, `c.bytes_out`).
//!
//! A pool the script chose wins over `sni_route` and `default_pool`. A
//! failed event (a Lua error, either limit) closes the connection before
//! any member is connected (at `on_accept` and `on_client_data`); it is
//! counted (`script_errors`, `script_timeouts`) and logged with its
//! FILE:LINE as for HTTP.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;

use super::client_hello::{self, ClientHello};
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

/// One connection's run of the script.
pub struct ConnScript {
    vs_script: Arc<VsScript>,
    state: Rc<State>,
    vars: Vars,
    client: SocketAddr,
    tls: bool,
}

fn failed(vs: &VServer, s: &VsScript, f: &Failure) {
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

    fn run(&mut self, vs: &VServer, conn: Conn) -> Decision {
        let info = Info {
            client: Some(self.client),
            tls: self.tls,
            protocol: "TCP",
            ..Info::default()
        };
        match self.state.on_conn(conn, info, &mut self.vars) {
            None => Decision::Go(None),
            Some(Err(f)) => {
                failed(vs, &self.vs_script, &f);
                Decision::Close
            }
            Some(Ok(e)) if e.reject => Decision::Close,
            Some(Ok(e)) => Decision::Go(e.pool.and_then(|i| self.vs_script.pools.get(i).cloned())),
        }
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
