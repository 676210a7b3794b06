//! Persistence: which member a request is pinned to (a cookie naming a
//! member, or the client's address), and the key consistent hashing uses.
//! Read by the exchange before it picks a member; knows requests and
//! member identities, not the configuration's types.

use std::net::IpAddr;

use super::hash64;
use crate::http::message::Request;

/// What a pool's consistent hashing hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashKey {
    SourceIp,
    Uri,
    Header(String),
    Cookie(String),
}

/// How a pool pins a client to a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persist {
    /// A cookie naming the member (its `cookie_id`).
    Cookie(String),
    SourceIp,
}

/// The member a persistence cookie in the request names, by position in
/// `cookie_ids` (the pool's members' cookie values, in order).
pub fn sticky_member<'a>(
    persistence: Option<&Persist>,
    mut cookie_ids: impl Iterator<Item = &'a str>,
    req: &Request,
) -> Option<usize> {
    match persistence {
        Some(Persist::Cookie(name)) => {
            let v = cookie(req, name)?;
            cookie_ids.position(|id| id.as_bytes() == v)
        }
        _ => None,
    }
}

/// The Set-Cookie value that pins a client to the member `cookie_id`
/// names, when the pool persists by cookie and the request was not already
/// pinned there (`set`).
pub fn persistence_cookie(
    persistence: Option<&Persist>,
    cookie_id: &str,
    set: bool,
) -> Option<String> {
    match persistence {
        Some(Persist::Cookie(name)) if set => Some(format!("{name}={cookie_id}; Path=/; HttpOnly")),
        _ => None,
    }
}

/// The hash of a client address for source-IP balancing and persistence;
/// an IPv4 client on an IPv6 socket hashes as its IPv4 address.
pub fn source_ip_hash(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(a) => hash64(&a.octets(), 0),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => hash64(&v4.octets(), 0),
            None => hash64(&a.octets(), 0),
        },
    }
}

/// The consistent-hash or source-affinity key of a request, if the pool
/// uses one.
pub fn request_hash(
    hash_key: Option<&HashKey>,
    persistence: Option<&Persist>,
    req: &Request,
    peer: IpAddr,
) -> Option<u64> {
    let ip_hash = || source_ip_hash(peer);
    if let Some(k) = hash_key {
        return match k {
            HashKey::SourceIp => Some(ip_hash()),
            HashKey::Uri => Some(hash64(req.target(), 0)),
            HashKey::Header(n) => req.head.get(n).map(|v| hash64(v, 0)),
            HashKey::Cookie(n) => cookie(req, n).map(|v| hash64(v, 0)),
        };
    }
    if persistence == Some(&Persist::SourceIp) {
        return Some(ip_hash());
    }
    None
}

/// The value of a cookie in the request's Cookie fields.
pub fn cookie<'r>(req: &'r Request, name: &str) -> Option<&'r [u8]> {
    req.head.all("cookie").find_map(|v| {
        v.split(|b| *b == b';').find_map(|kv| {
            let kv = kv.trim_ascii_start();
            let i = kv.iter().position(|b| *b == b'=')?;
            (&kv[..i] == name.as_bytes()).then(|| &kv[i + 1..])
        })
    })
}
