//! `on_client_hello` for QUIC connections (docs/scripting.md).
//!
//! quinn runs a connection's TLS handshake itself, and hands the
//! ClientHello to nobody. One place sits between reading it and answering
//! it: rustls asks the configuration's certificate resolver for the
//! certificate, with the ClientHello in hand, before anything is sent. So
//! a connection whose vserver's script defines the event is accepted with
//! a copy of the vserver's QUIC configuration whose resolver runs the
//! event, then serves the certificate the script chose (`c:use_cert`),
//! the one SNI selects, or none: a refusal (`c:reject()`) or a failure
//! ends the handshake there (rustls' access_denied alert, in a QUIC
//! CONNECTION_CLOSE), before any certificate is sent. The pool the script
//! chose serves the connection's requests, as over TCP.
//!
//! rustls wants a resolver it can share between threads, and a Lua state
//! is its worker's own. The resolver runs on the worker: the first Initial
//! packet is read in `Incoming::accept_with` (the front door's call), a
//! ClientHello that spans more packets in quinn's connection task on the
//! worker's runtime. So the connection's events wait in this worker's
//! table under a key the resolver holds; a resolver called on another
//! thread finds nothing there and refuses (never a certificate or a pool
//! the script did not choose).
//!
//! rustls resolves the certificate for every full ClientHello, resumed or
//! not, and again after a HelloRetryRequest: the event runs once, on the
//! first, and what it said holds for the second.
//!
//! Costs only where a script defines the event: a copy of the TLS and
//! QUIC configurations per connection (a few allocations, next to a
//! handshake's signature), as the TCP path copies its configuration when
//! the script chose a certificate.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::conn::ConnChoice;
use super::conn_scripting::ConnEvents;
use crate::config::snapshot::{Http3, VServer};
use crate::l4::scripting::{hello_names, ClientHelloEvent, Said};
use crate::log;
use crate::tls::{CertStore, ForName};

/// A connection's events waiting for its ClientHello, and what
/// `on_client_hello` said once it ran.
struct Waiting {
    key: u64,
    events: ConnEvents,
    said: Option<Said>,
}

thread_local! {
    static WAITING: RefCell<Vec<Waiting>> = const { RefCell::new(Vec::new()) };
    static NEXT_KEY: Cell<u64> = const { Cell::new(0) };
}

/// A connection's place in its worker's table: its events once the
/// handshake has run `on_client_hello` (`finish`); dropped with the
/// connection, it leaves the table.
pub struct Pending(u64);

impl Pending {
    /// What the connection events chose for the connection's requests.
    pub fn finish(self) -> Option<Rc<ConnChoice>> {
        take(self.0).and_then(|w| w.events.finish())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        take(self.0);
    }
}

fn take(key: u64) -> Option<Waiting> {
    WAITING.with(|w| {
        let mut w = w.borrow_mut();
        let i = w.iter().position(|x| x.key == key)?;
        Some(w.swap_remove(i))
    })
}

/// The QUIC configuration for one connection of `vs` whose script defines
/// `on_client_hello` (after its `on_accept`: `events`).
pub fn server_config(
    h3: &Http3,
    vs: &Arc<VServer>,
    events: ConnEvents,
) -> Result<(Arc<quinn::ServerConfig>, Pending), String> {
    let certs = vs
        .tls
        .as_ref()
        .map(|t| t.certs.clone())
        .ok_or("the vserver has no [vserver.tls]")?;
    let key = NEXT_KEY.with(|k| {
        k.set(k.get() + 1);
        k.get()
    });
    WAITING.with(|w| {
        w.borrow_mut().push(Waiting {
            key,
            events,
            said: None,
        })
    });
    let pending = Pending(key);
    let mut tls = (*h3.tls).clone();
    tls.cert_resolver = Arc::new(ScriptResolver {
        key,
        vs: vs.clone(),
        by_sni: h3.tls.cert_resolver.clone(),
        certs,
    });
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
        .map_err(|e| e.to_string())?;
    let mut server = (*h3.server).clone();
    server.crypto = Arc::new(crate::tls::quic_suite::NamesSuite(Arc::new(quic)));
    Ok((Arc::new(server), pending))
}

/// Runs `on_client_hello` for the connection under `key`, then resolves
/// the certificate it said.
struct ScriptResolver {
    key: u64,
    vs: Arc<VServer>,
    /// The vserver's own resolver (SNI's choice).
    by_sni: Arc<dyn ResolvesServerCert>,
    certs: Arc<CertStore>,
}

impl std::fmt::Debug for ScriptResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ScriptResolver(vserver {}, key {})",
            self.vs.name, self.key
        )
    }
}

impl ScriptResolver {
    fn said(&self, hello: &ClientHello<'_>) -> Said {
        WAITING.with(|w| {
            let mut w = w.borrow_mut();
            let Some(waiting) = w.iter_mut().find(|x| x.key == self.key) else {
                log::warn(format_args!(
                    "vserver {}: QUIC handshake resolved off its worker; refused",
                    self.vs.name
                ));
                return Said::Failed;
            };
            if let Some(said) = &waiting.said {
                return said.clone();
            }
            let (sni, alpn) = hello_names(hello);
            let said = waiting.events.client_hello(&self.vs, sni, alpn);
            waiting.said = Some(said.clone());
            said
        })
    }
}

impl ResolvesServerCert for ScriptResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match self.said(&hello) {
            Said::Go(None) => self.by_sni.resolve(hello),
            Said::Go(Some(name)) => ForName {
                store: self.certs.clone(),
                name,
            }
            .resolve(hello),
            Said::Refuse | Said::Failed => {
                log::debug(format_args!(
                    "vserver {}: QUIC handshake refused by the script's on_client_hello",
                    self.vs.name
                ));
                None
            }
        }
    }
}
