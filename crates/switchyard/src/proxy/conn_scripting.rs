//! The connection events of an HTTP vserver's script (`[vserver.script]`,
//! docs/scripting.md), run by the front door (`accept.rs`) before any
//! request: iRules' CLIENT_ACCEPTED and CLIENTSSL_CLIENTHELLO.
//!
//! - `on_accept(c)`: the client's address (a trusted PROXY header's), before
//!   the TLS handshake and the first request; may refuse (`c:reject()`)
//!   or choose the connection's pool.
//! - `on_client_hello(c)`: a vserver that terminates TLS has read the
//!   client's ClientHello (`c.sni`, `c.alpn`) and not answered it yet; may
//!   refuse (the client gets a handshake_failure alert), choose the
//!   certificate (`c:use_cert(name)`: the one the vserver serves for that
//!   name) and the connection's pool (`c:use_pool`).
//!
//! The connection's pool is the default of its requests: a pool chosen by
//! `on_request` (`r:use_pool`) or by a policy's action wins over it, and it
//! wins over `default_pool`. It is kept by name and looked up in the
//! configuration of each request, so a reload's pool serves the requests
//! after it. `c:log` fields go to the access log line of every request of
//! the connection.
//!
//! A failed event (a Lua error, either limit) refuses the connection (a
//! failed `on_client_hello` with an internal_error alert): never a
//! certificate or a pool the script did not choose. It is counted
//! (`script_errors`, `script_timeouts`) and logged with its FILE:LINE as
//! any event; a refusal is counted in `script_refusals`.
//!
//! Runs on the worker that accepted the connection.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use super::conn::ConnChoice;
use super::exchange::Exchange;
use crate::accesslog::ScriptLog;
use crate::config::snapshot::{VServer, VsScript};
use crate::l4::scripting::{failed, ClientHelloEvent, Said};
use crate::script::{self, Conn, ConnEvent, Info, State, Vars};
use crate::stats;

/// What a connection came over: `c.tls`, and `c.protocol` ("TCP" or
/// "QUIC").
#[derive(Clone, Copy)]
pub enum Carrier {
    Plain,
    Tls,
    Quic,
}

/// One connection's run of the connection events, from `on_accept` to
/// `on_client_hello` (`c.vars` is kept between them).
pub struct ConnEvents {
    vs_script: Arc<VsScript>,
    state: Rc<State>,
    vars: Vars,
    client: SocketAddr,
    carrier: Carrier,
    choice: ConnChoice,
}

/// Whether `vs` runs connection events (an HTTP vserver whose script
/// defines `on_accept` or `on_client_hello`).
pub fn wanted(vs: &VServer) -> bool {
    vs.l4.is_none()
        && vs
            .script
            .as_ref()
            .is_some_and(|s| s.script.events.accept || s.script.events.client_hello)
}

impl ConnEvents {
    /// The events' run for a connection of `vs` (see `wanted`); Err when
    /// this worker could not make the script's state (counted, logged:
    /// the connection is refused).
    pub fn start(vs: &VServer, client: SocketAddr, carrier: Carrier) -> Result<ConnEvents, ()> {
        let Some(s) = vs.script.clone() else {
            return Err(());
        };
        match script::state(&s.script) {
            Ok(state) => Ok(ConnEvents {
                vs_script: s,
                state,
                vars: Vars::default(),
                client,
                carrier,
                choice: ConnChoice::default(),
            }),
            Err(f) => {
                failed(vs, &s, &f);
                Err(())
            }
        }
    }

    fn run(&mut self, vs: &VServer, conn: Conn) -> Said {
        let info = Info {
            client: Some(self.client),
            tls: !matches!(self.carrier, Carrier::Plain),
            protocol: match self.carrier {
                Carrier::Quic => "QUIC",
                Carrier::Plain | Carrier::Tls => "TCP",
            },
            ..Info::default()
        };
        let e = match self.state.on_conn(conn, info, &mut self.vars) {
            None => return Said::Go(None),
            Some(Err(f)) => {
                failed(vs, &self.vs_script, &f);
                return Said::Failed;
            }
            Some(Ok(e)) => e,
        };
        for (n, v) in e.log {
            self.choice.log.retain(|(k, _)| *k != n);
            self.choice.log.push((n, v));
        }
        if e.reject {
            stats::inc(&vs.counters.local().script_refusals);
            return Said::Refuse;
        }
        if let Some(p) = e.pool.and_then(|i| self.vs_script.script.pools.get(i)) {
            self.choice.pool = Some(p.clone());
        }
        Said::Go(e.cert)
    }

    /// `on_accept(c)`.
    pub fn accept(&mut self, vs: &VServer) -> Said {
        self.run(vs, conn(ConnEvent::Accept, None, Vec::new()))
    }

    /// What the events decided for the connection's requests (None when
    /// nothing: most connections).
    pub fn finish(self) -> Option<Rc<ConnChoice>> {
        let c = self.choice;
        (c.pool.is_some() || !c.log.is_empty()).then(|| Rc::new(c))
    }
}

/// `on_client_hello(c)`: what it said, with the name of the certificate
/// to serve when the script chose one.
impl ClientHelloEvent for ConnEvents {
    fn wants_client_hello(&self) -> bool {
        self.vs_script.script.events.client_hello
    }

    fn client_hello(&mut self, vs: &VServer, sni: Option<String>, alpn: Vec<String>) -> Said {
        self.run(vs, conn(ConnEvent::ClientHello, sni, alpn))
    }
}

fn conn(event: ConnEvent, sni: Option<String>, alpn: Vec<String>) -> Conn {
    Conn {
        event,
        data: Bytes::new(),
        sni,
        alpn,
        bytes_in: 0,
        bytes_out: 0,
    }
}

/// A request of a connection whose events chose: its default pool (from
/// this request's configuration, by name) and its access-log fields.
pub fn apply(x: &mut Exchange<'_>, choice: &ConnChoice) {
    if let (Some(name), Some(s)) = (&choice.pool, x.vs.script.as_deref()) {
        x.conn_pool = s.pools.iter().find(|p| p.name == *name).cloned();
    }
    if !choice.log.is_empty() {
        let log = x.facts.script.get_or_insert_with(Box::<ScriptLog>::default);
        log.fields.extend(choice.log.iter().cloned());
    }
}
