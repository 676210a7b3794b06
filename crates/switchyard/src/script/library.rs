//! `sy.*`: what iRules users reach for, in Rust (a Lua version of each
//! would cost instructions of the script's budget and be slower):
//! base64 (and its URL alphabet), hex, URL encoding, query strings,
//! SHA-256 and HMAC-SHA256 (aws-lc-rs, the TLS stack's), a constant-time
//! comparison, CIDR matching, a stable hash for bucketing (canaries),
//! time, random numbers, and HS256 JWT verification.

use std::net::IpAddr;

use aws_lc_rs::{digest, hmac};
use mlua::{Lua, Table, UserData, UserDataMethods, Value};

use crate::cidr::Cidr;
use crate::http::normalize::hex_value as nibble;

fn bytes(s: &mlua::String) -> Vec<u8> {
    s.as_bytes().to_vec()
}

pub fn install(lua: &Lua) -> mlua::Result<()> {
    let sy = lua.create_table()?;
    sy.raw_set(
        "base64_encode",
        lua.create_function(|lua, s: mlua::String| {
            lua.create_string(crate::base64::encode(&bytes(&s)))
        })?,
    )?;
    sy.raw_set(
        "base64_decode",
        lua.create_function(|lua, s: mlua::String| {
            let s = s.to_str()?;
            match crate::base64::decode(&s) {
                Some(b) => Ok(Value::String(lua.create_string(b)?)),
                None => Ok(Value::Nil),
            }
        })?,
    )?;
    sy.raw_set(
        "base64url_encode",
        lua.create_function(|lua, s: mlua::String| lua.create_string(b64url_encode(&bytes(&s))))?,
    )?;
    sy.raw_set(
        "base64url_decode",
        lua.create_function(|lua, s: mlua::String| match b64url_decode(&s.as_bytes()) {
            Some(b) => Ok(Value::String(lua.create_string(b)?)),
            None => Ok(Value::Nil),
        })?,
    )?;
    sy.raw_set(
        "hex_encode",
        lua.create_function(|lua, s: mlua::String| lua.create_string(hex(&s.as_bytes())))?,
    )?;
    sy.raw_set(
        "hex_decode",
        lua.create_function(|lua, s: mlua::String| match unhex(&s.as_bytes()) {
            Some(b) => Ok(Value::String(lua.create_string(b)?)),
            None => Ok(Value::Nil),
        })?,
    )?;
    sy.raw_set(
        "url_encode",
        lua.create_function(|lua, s: mlua::String| lua.create_string(url_encode(&s.as_bytes())))?,
    )?;
    sy.raw_set(
        "url_decode",
        lua.create_function(|lua, s: mlua::String| {
            lua.create_string(url_decode(&s.as_bytes(), false))
        })?,
    )?;
    sy.raw_set(
        "query_parse",
        lua.create_function(|lua, q: Option<mlua::String>| {
            let t = lua.create_table()?;
            if let Some(q) = q {
                for (k, v) in query_pairs(&q.as_bytes()) {
                    // The first value of a repeated name wins.
                    let k = lua.create_string(k)?;
                    if t.raw_get::<Value>(&k)? == Value::Nil {
                        t.raw_set(k, lua.create_string(v)?)?;
                    }
                }
            }
            Ok(t)
        })?,
    )?;
    sy.raw_set(
        "query_build",
        lua.create_function(|lua, t: Table| {
            let mut pairs = Vec::new();
            for pair in t.pairs::<mlua::String, Value>() {
                let (k, v) = pair?;
                let v = match v {
                    Value::String(s) => bytes(&s),
                    Value::Integer(i) => i.to_string().into_bytes(),
                    Value::Number(n) => n.to_string().into_bytes(),
                    Value::Boolean(b) => b.to_string().into_bytes(),
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "sy.query_build: a {} value",
                            other.type_name()
                        )))
                    }
                };
                pairs.push((bytes(&k), v));
            }
            // Sorted: the same table gives the same string (cache keys).
            pairs.sort();
            let mut out = Vec::new();
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(b'&');
                }
                out.extend_from_slice(url_encode(k).as_bytes());
                out.push(b'=');
                out.extend_from_slice(url_encode(v).as_bytes());
            }
            lua.create_string(out)
        })?,
    )?;
    sy.raw_set(
        "sha256",
        lua.create_function(|lua, s: mlua::String| {
            lua.create_string(digest::digest(&digest::SHA256, &s.as_bytes()).as_ref())
        })?,
    )?;
    sy.raw_set(
        "hmac_sha256",
        lua.create_function(|lua, (key, msg): (mlua::String, mlua::String)| {
            let k = hmac::Key::new(hmac::HMAC_SHA256, &key.as_bytes());
            lua.create_string(hmac::sign(&k, &msg.as_bytes()).as_ref())
        })?,
    )?;
    sy.raw_set(
        "equal",
        lua.create_function(|_, (a, b): (mlua::String, mlua::String)| {
            Ok(constant_time_eq(&a.as_bytes(), &b.as_bytes()))
        })?,
    )?;
    sy.raw_set(
        "cidr",
        lua.create_function(|_, list: Value| Ok(Cidrs(cidrs(&list, "sy.cidr")?)))?,
    )?;
    sy.raw_set(
        "cidr_match",
        lua.create_function(|_, (ip, list): (mlua::String, Value)| {
            let set = cidrs(&list, "sy.cidr_match")?;
            Ok(parse_ip(&ip).is_some_and(|ip| set.iter().any(|c| c.contains(ip))))
        })?,
    )?;
    sy.raw_set(
        "hash",
        lua.create_function(|_, (s, n): (mlua::String, Option<i64>)| {
            let h = (stable_hash(&s.as_bytes()) >> 1) as i64;
            match n {
                Some(n) if n > 0 => Ok(h % n),
                Some(n) => Err(mlua::Error::runtime(format!(
                    "sy.hash: {n} buckets (want 1 or more)"
                ))),
                None => Ok(h),
            }
        })?,
    )?;
    sy.raw_set(
        "time",
        lua.create_function(|_, ()| Ok(crate::clock::unix_us() as f64 / 1e6))?,
    )?;
    sy.raw_set(
        "now_ms",
        lua.create_function(|_, ()| Ok((crate::clock::unix_us() / 1000) as i64))?,
    )?;
    sy.raw_set(
        "random",
        lua.create_function(|_, n: Option<i64>| {
            let r = crate::random::next_u64();
            match n {
                Some(n) if n > 0 => Ok(Value::Integer((r % n as u64) as i64)),
                Some(n) => Err(mlua::Error::runtime(format!(
                    "sy.random: {n} (want 1 or more)"
                ))),
                None => Ok(Value::Number((r >> 11) as f64 / (1u64 << 53) as f64)),
            }
        })?,
    )?;
    sy.raw_set(
        "jwt_hs256",
        lua.create_function(
            |lua, (token, secret): (mlua::String, mlua::String)| match jwt_hs256(
                &token.as_bytes(),
                &secret.as_bytes(),
                crate::clock::unix_secs(),
            ) {
                Ok(claims) => Ok((json_to_lua(lua, &claims, 0)?, Value::Nil)),
                Err(why) => Ok((Value::Nil, Value::String(lua.create_string(why)?))),
            },
        )?,
    )?;
    lua.globals().raw_set("sy", sy)
}

/// A set of CIDRs made once (`sy.cidr{...}` at the top level) and matched
/// per request (`set:contains(ip)`).
struct Cidrs(Vec<Cidr>);

impl UserData for Cidrs {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("contains", |_, c, ip: mlua::String| {
            Ok(parse_ip(&ip).is_some_and(|ip| c.0.iter().any(|n| n.contains(ip))))
        });
    }
}

fn parse_ip(s: &mlua::String) -> Option<IpAddr> {
    let s = s.to_str().ok()?;
    let s = s.trim_start_matches('[').trim_end_matches(']');
    s.parse().ok()
}

/// A CIDR or a list of them.
fn cidrs(v: &Value, what: &str) -> mlua::Result<Vec<Cidr>> {
    let one = |s: &mlua::String| -> mlua::Result<Cidr> {
        let s = s.to_str()?;
        Cidr::parse(&s).map_err(|e| mlua::Error::runtime(format!("{what}: {e}")))
    };
    match v {
        Value::String(s) => Ok(vec![one(s)?]),
        Value::Table(t) => {
            let mut out = Vec::new();
            for s in t.sequence_values::<mlua::String>() {
                out.push(one(&s?)?);
            }
            Ok(out)
        }
        other => Err(mlua::Error::runtime(format!(
            "{what}: a CIDR or a list of them, not a {}",
            other.type_name()
        ))),
    }
}

pub fn hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for c in b {
        s.push(H[(c >> 4) as usize] as char);
        s.push(H[(c & 15) as usize] as char);
    }
    s
}

pub fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

/// RFC 3986: everything but the unreserved characters as %XX.
pub fn url_encode(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if c.is_ascii_alphanumeric() || b"-._~".contains(&c) {
            s.push(c as char);
        } else {
            s.push('%');
            s.push(H[(c >> 4) as usize] as char);
            s.push(H[(c & 15) as usize] as char);
        }
    }
    s
}

/// %XX decoded (a malformed escape stays as it is); `plus`: '+' is a
/// space (form encoding, query strings).
pub fn url_decode(b: &[u8], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (nibble(b[i + 1]), nibble(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// name=value pairs of a query string, decoded.
fn query_pairs(q: &[u8]) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> + '_ {
    q.split(|b| *b == b'&').filter(|p| !p.is_empty()).map(|p| {
        let (k, v) = match p.iter().position(|b| *b == b'=') {
            Some(i) => (&p[..i], &p[i + 1..]),
            None => (p, &b""[..]),
        };
        (url_decode(k, true), url_decode(v, true))
    })
}

fn b64url_encode(b: &[u8]) -> String {
    crate::base64::encode(b)
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect()
}

fn b64url_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut t: String = s
        .iter()
        .map(|c| match c {
            b'-' => Some('+'),
            b'_' => Some('/'),
            b'+' | b'/' => None,
            c => Some(*c as char),
        })
        .collect::<Option<String>>()?;
    while !t.len().is_multiple_of(4) {
        t.push('=');
    }
    crate::base64::decode(&t)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// FNV-1a, then a splitmix64 finalizer: the same bucket for the same
/// input on every worker, node and release (a canary keeps its users).
pub fn stable_hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for c in b {
        h ^= u64::from(*c);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Verifies an HS256 JSON Web Token (RFC 7519) and returns its claims:
/// the header must say HS256 (no "none", no other algorithm), the
/// signature must match, and `exp` / `nbf`, when present, must hold at
/// `now` (seconds).
pub fn jwt_hs256(token: &[u8], secret: &[u8], now: i64) -> Result<serde_json::Value, &'static str> {
    let mut parts = token.split(|b| *b == b'.');
    let (Some(h), Some(p), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed token");
    };
    let header = b64url_decode(h).ok_or("malformed header")?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).map_err(|_| "malformed header")?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
        return Err("not an HS256 token");
    }
    let sig = b64url_decode(sig).ok_or("malformed signature")?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let signed = &token[..h.len() + 1 + p.len()];
    hmac::verify(&key, signed, &sig).map_err(|_| "bad signature")?;
    let claims = b64url_decode(p).ok_or("malformed claims")?;
    let claims: serde_json::Value =
        serde_json::from_slice(&claims).map_err(|_| "malformed claims")?;
    if !claims.is_object() {
        return Err("malformed claims");
    }
    if let Some(exp) = claims.get("exp") {
        match exp.as_f64() {
            Some(e) if (now as f64) < e => {}
            Some(_) => return Err("expired"),
            None => return Err("malformed exp"),
        }
    }
    if let Some(nbf) = claims.get("nbf") {
        match nbf.as_f64() {
            Some(n) if (now as f64) >= n => {}
            Some(_) => return Err("not yet valid"),
            None => return Err("malformed nbf"),
        }
    }
    Ok(claims)
}

/// A JSON value as Lua values (null is nil; nesting is bounded).
fn json_to_lua(lua: &Lua, v: &serde_json::Value, depth: u32) -> mlua::Result<Value> {
    use serde_json::Value as J;
    if depth > 32 {
        return Err(mlua::Error::runtime("JSON nested too deep"));
    }
    Ok(match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(a) => {
            let t = lua.create_table()?;
            for (i, x) in a.iter().enumerate() {
                t.raw_set(i + 1, json_to_lua(lua, x, depth + 1)?)?;
            }
            Value::Table(t)
        }
        J::Object(o) => {
            let t = lua.create_table()?;
            for (k, x) in o {
                t.raw_set(k.as_str(), json_to_lua(lua, x, depth + 1)?)?;
            }
            Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip() {
        assert_eq!(hex(b"\x00\xffA"), "00ff41");
        assert_eq!(unhex(b"00ff41").as_deref(), Some(&b"\x00\xffA"[..]));
        assert_eq!(unhex(b"0g"), None);
        assert_eq!(url_encode(b"a b/c~"), "a%20b%2Fc~");
        assert_eq!(url_decode(b"a%20b%2fc+%zz%4", true), b"a b/c %zz%4");
        assert_eq!(url_decode(b"a+b", false), b"a+b");
        assert_eq!(b64url_encode(b"\xfb\xff"), "-_8");
        assert_eq!(b64url_decode(b"-_8").as_deref(), Some(&b"\xfb\xff"[..]));
    }

    #[test]
    fn the_hash_is_stable() {
        // A canary must keep its users across releases: pinned values.
        assert_eq!(stable_hash(b"user-42"), stable_hash(b"user-42"));
        assert_ne!(stable_hash(b"user-42"), stable_hash(b"user-43"));
    }

    fn token(header: &str, claims: &str, secret: &[u8]) -> Vec<u8> {
        let mut t = b64url_encode(header.as_bytes());
        t.push('.');
        t.push_str(&b64url_encode(claims.as_bytes()));
        let k = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let sig = hmac::sign(&k, t.as_bytes());
        t.push('.');
        t.push_str(&b64url_encode(sig.as_ref()));
        t.into_bytes()
    }

    #[test]
    fn jwt_hs256_checks_signature_algorithm_and_time() {
        let h = r#"{"alg":"HS256","typ":"JWT"}"#;
        let good = token(h, r#"{"sub":"ann","exp":2000}"#, b"k");
        let c = jwt_hs256(&good, b"k", 1000).expect("valid");
        assert_eq!(c["sub"], "ann");
        assert_eq!(jwt_hs256(&good, b"other", 1000), Err("bad signature"));
        assert_eq!(jwt_hs256(&good, b"k", 2000), Err("expired"));
        let none = token(r#"{"alg":"none"}"#, r#"{"sub":"x"}"#, b"k");
        assert_eq!(jwt_hs256(&none, b"k", 0), Err("not an HS256 token"));
        let early = token(h, r#"{"nbf":500}"#, b"k");
        assert_eq!(jwt_hs256(&early, b"k", 499), Err("not yet valid"));
        assert_eq!(jwt_hs256(b"a.b", b"k", 0), Err("malformed token"));
    }
}
