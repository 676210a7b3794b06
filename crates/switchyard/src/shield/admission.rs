//! Admission: the shield's one decision on a new connection, and its
//! decision on each request of the per-source limits.
//!
//! A connection is judged once, at accept, before any byte is read: the
//! global and the vserver's ACLs by its addresses, then the vserver's
//! per-source limits (`[[vserver.limit]]`, connection rate and count) by
//! its source. The front door (`proxy/accept.rs`) asks here and nowhere
//! else, for every protocol a vserver speaks; the request-rate stage
//! (`proxy/limiting.rs`) asks `request` for each request.
//!
//! The verdicts are plain values: the caller counts them on its vserver
//! and closes the socket as `close_refused` says (the shield knows neither
//! vservers nor sessions).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::acl::Action as AclAction;
use super::stick::{Action, Lease, Limit, Reason};
use super::AclSet;

/// The shield's verdict on a new connection.
pub enum Verdict {
    /// Admitted, with its places in the per-source limits that count
    /// connections (held until it ends).
    Admit(Option<Box<[Lease]>>),
    /// An ACL dropped it: closed.
    AclDropped,
    /// An ACL rejected it: closed with a reset.
    AclRejected,
    /// A per-source limit refused it.
    Limited { limit: Arc<Limit>, reason: Reason },
}

/// The rules a connection is judged by: the global ACLs, its vserver's,
/// and its vserver's per-source limits.
pub struct Rules<'a> {
    pub global: Option<&'a AclSet>,
    pub acl: Option<&'a AclSet>,
    pub limits: &'a [Arc<Limit>],
}

/// Judges a connection from `peer` to `listen`: TCP (`acl::TCP`), or
/// QUIC (`acl::UDP`, the ACLs' protocol of its datagrams).
pub fn connection(rules: &Rules<'_>, peer: SocketAddr, listen: SocketAddr, proto: u8) -> Verdict {
    if rules.global.is_some() || rules.acl.is_some() {
        match super::admit(rules.global, rules.acl, peer, listen, proto) {
            AclAction::Drop => return Verdict::AclDropped,
            AclAction::Reject => return Verdict::AclRejected,
            _ => {}
        }
    }
    if rules.limits.is_empty() {
        return Verdict::Admit(None);
    }
    let mut leases = Vec::new();
    for l in rules.limits {
        match l.on_connection(peer.ip()) {
            Ok(lease) => leases.extend(lease),
            Err(reason) => {
                if let Action::Tarpit(_) = l.action {
                    l.count_tarpit();
                }
                return Verdict::Limited {
                    limit: l.clone(),
                    reason,
                };
            }
        }
    }
    Verdict::Admit((!leases.is_empty()).then(|| leases.into_boxed_slice()))
}

/// How a refused connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    /// With a reset (SO_LINGER 0): the client learns at once, and no
    /// TIME_WAIT is left here.
    Reset,
    /// A plain close.
    Close,
    /// An ACL's drop: over TCP a plain close (the connection is already
    /// accepted); over QUIC no packet answers it.
    Drop,
    /// Held this long, then closed (a tarpit).
    HeldMs(u64),
}

impl Verdict {
    /// How the connection is closed, when it is refused.
    pub fn closing(&self) -> Option<Closing> {
        match self {
            Verdict::Admit(_) => None,
            Verdict::AclDropped => Some(Closing::Drop),
            Verdict::AclRejected => Some(Closing::Reset),
            Verdict::Limited { limit, .. } => Some(match limit.action {
                Action::Reject | Action::Deny(_) => Closing::Reset,
                Action::Close => Closing::Close,
                Action::Tarpit(ms) => Closing::HeldMs(ms),
            }),
        }
    }
}

/// Closes a refused connection as `how` says. A held one waits in a task
/// of the worker (needs a tokio `LocalSet`).
pub fn close_refused(stream: std::net::TcpStream, how: Closing) {
    match how {
        Closing::Reset => {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
        }
        Closing::Close | Closing::Drop => {}
        Closing::HeldMs(ms) => {
            tokio::task::spawn_local(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                drop(stream);
            });
        }
    }
}

/// Judges a request from `ip` against the per-source limits that count
/// requests, each under the request's value of its key (`key`; None: the
/// request has none, and that limit does not apply). A limit that only
/// counts connections still refuses the requests of a source it denies.
/// The first refusal wins; a tarpit's is counted here. The places taken
/// in the limits that count requests in progress (`req_cur`) go to
/// `leases`, held until the request ends.
pub fn request<'l, 'r>(
    limits: impl IntoIterator<Item = &'l Arc<Limit>>,
    ip: IpAddr,
    mut key: impl FnMut(&Limit) -> Option<&'r [u8]>,
    leases: &mut Vec<super::stick::RequestLease>,
) -> Option<(&'l Limit, Reason)> {
    for l in limits {
        if l.req_rate.is_none() && l.req_cur.is_none() && !matches!(l.action, Action::Deny(_)) {
            continue;
        }
        let Some(value) = key(l) else {
            continue;
        };
        match l.on_request(ip, value) {
            Ok(lease) => leases.extend(lease),
            Err(reason) => {
                if let Action::Tarpit(_) = l.action {
                    l.count_tarpit();
                }
                return Some((l, reason));
            }
        }
    }
    None
}
