//! Layer 4 (TCP and UDP) virtual servers: what a connection carries
//! before its first byte is relayed, read without terminating it (the
//! PROXY protocol header of a trusted proxy, a TLS ClientHello's SNI for
//! passthrough routing).

pub mod client_hello;
pub mod dgram;
pub use crate::proxy_protocol;
pub mod relay;
pub mod scripting;
pub mod tcp;
pub mod udp;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::balance::MemberState;
use crate::config::snapshot::Member;
use crate::stats::{self, MemberCounters, Sharded};

/// A member connection (TCP) or member socket (UDP) as the balancer and the
/// counters see it: in flight (max_connections, least connections) and
/// active from its opening to its drop, and counted once in the total.
pub struct Lease {
    state: Arc<MemberState>,
    counters: Arc<Sharded<MemberCounters>>,
}

impl Lease {
    pub fn new(m: &Member) -> Lease {
        m.state.inflight.fetch_add(1, Ordering::Relaxed);
        let c = m.counters.local();
        stats::inc(&c.server_connections_total);
        stats::inc(&c.server_connections_active);
        Lease {
            state: m.state.clone(),
            counters: m.counters.clone(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.state.inflight.fetch_sub(1, Ordering::Relaxed);
        stats::dec(&self.counters.local().server_connections_active);
    }
}
