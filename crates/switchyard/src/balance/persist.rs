//! Persistence: which member a request is pinned to (a cookie naming a
//! member, or the client's address), and the key consistent hashing uses.
//! Read by the exchange before it picks a member.

use std::net::IpAddr;

use super::hash64;
use crate::config::snapshot::{HashKey, Member, Persist, Pool};
use crate::http::message::Request;

/// The member a persistence cookie in the request names.
pub fn sticky_member(pool: &Pool, req: &Request) -> Option<usize> {
    match &pool.persistence {
        Some(Persist::Cookie(name)) => cookie(req, name).and_then(|v| {
            pool.members
                .iter()
                .position(|m| m.cookie_id.as_bytes() == v)
        }),
        _ => None,
    }
}

/// The Set-Cookie value that pins a client to `m`, when the pool persists
/// by cookie and the request was not already pinned there (`set`).
pub fn persistence_cookie(pool: &Pool, m: &Member, set: bool) -> Option<String> {
    match &pool.persistence {
        Some(Persist::Cookie(name)) if set => {
            Some(format!("{name}={}; Path=/; HttpOnly", m.cookie_id))
        }
        _ => None,
    }
}

/// The consistent-hash or source-affinity key of a request, if the pool
/// uses one.
pub fn request_hash(pool: &Pool, req: &Request, peer: IpAddr) -> Option<u64> {
    let ip_hash = || match peer {
        IpAddr::V4(a) => hash64(&a.octets(), 0),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => hash64(&v4.octets(), 0),
            None => hash64(&a.octets(), 0),
        },
    };
    if let Some(k) = &pool.hash_key {
        return match k {
            HashKey::SourceIp => Some(ip_hash()),
            HashKey::Uri => Some(hash64(req.target(), 0)),
            HashKey::Header(n) => req.head.get(n).map(|v| hash64(v, 0)),
            HashKey::Cookie(n) => cookie(req, n).map(|v| hash64(v, 0)),
        };
    }
    if pool.persistence == Some(Persist::SourceIp) {
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
