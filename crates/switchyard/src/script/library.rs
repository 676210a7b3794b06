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
        "hash_pick",
        lua.create_function(|_, (key, choices): (mlua::String, Table)| {
            hash_pick(&key.as_bytes(), &choices)
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
                Ok(claims) => Ok((json_to_lua(lua, &claims)?, Value::Nil)),
                Err(why) => Ok((Value::Nil, Value::String(lua.create_string(why)?))),
            },
        )?,
    )?;
    sy.raw_set(
        "public_key",
        lua.create_function(|_, pem: mlua::String| {
            PublicKey::from_pem(&pem.as_bytes())
                .map_err(|e| mlua::Error::runtime(format!("sy.public_key: {e}")))
        })?,
    )?;
    sy.raw_set(
        "jwt_verify",
        lua.create_function(|lua, (token, key): (mlua::String, Value)| {
            let secret;
            let key = match &key {
                Value::String(s) => {
                    secret = s.as_bytes();
                    JwtKey::Hmac(&secret)
                }
                Value::UserData(u) => match u.borrow::<PublicKey>() {
                    Ok(k) => JwtKey::Public(k.clone()),
                    Err(_) => {
                        return Err(mlua::Error::runtime(
                            "sy.jwt_verify: the key is a secret (string) or sy.public_key(pem)",
                        ))
                    }
                },
                other => {
                    return Err(mlua::Error::runtime(format!(
                    "sy.jwt_verify: the key is a secret (string) or sy.public_key(pem), not a {}",
                    other.type_name()
                )))
                }
            };
            match jwt_verify(&token.as_bytes(), &key, crate::clock::unix_secs()) {
                Ok(claims) => Ok((json_to_lua(lua, &claims)?, Value::Nil)),
                Err(why) => Ok((Value::Nil, Value::String(lua.create_string(why)?))),
            }
        })?,
    )?;
    sy.raw_set(
        "table",
        lua.create_function(|_, (name, size): (mlua::String, Option<i64>)| {
            let name = name.to_str()?;
            if name.is_empty() || name.len() > 64 {
                return Err(mlua::Error::runtime("sy.table: a name of 1 to 64 bytes"));
            }
            let size = match size {
                None => DEFAULT_TABLE_SIZE,
                Some(n) if (1..=MAX_TABLE_SIZE as i64).contains(&n) => n as usize,
                Some(n) => {
                    return Err(mlua::Error::runtime(format!(
                        "sy.table: size {n} is out of range 1 to {MAX_TABLE_SIZE}"
                    )))
                }
            };
            Ok(SharedTable(crate::shield::stick::store(&name, size)))
        })?,
    )?;
    lua.globals().raw_set("sy", sy)
}

/// Entries of a `sy.table` unless its first use says otherwise, and the
/// most any may hold; its keys and text values are bounded too.
const DEFAULT_TABLE_SIZE: usize = 65_536;
const MAX_TABLE_SIZE: usize = 4 << 20;
const MAX_TABLE_KEY: usize = 256;
const MAX_TABLE_VALUE: usize = 1024;

/// `sy.table(name)`: a table shared by every worker (and kept across
/// reloads), on the per-source tables' design (`shield::stick::Store`).
struct SharedTable(std::sync::Arc<crate::shield::stick::Store>);

fn table_key(k: &Value) -> mlua::Result<Vec<u8>> {
    let k = match k {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Integer(i) => i.to_string().into_bytes(),
        Value::Number(n) => n.to_string().into_bytes(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "sy.table: a key is a string or a number, not a {}",
                other.type_name()
            )))
        }
    };
    if k.len() > MAX_TABLE_KEY {
        return Err(mlua::Error::runtime(format!(
            "sy.table: a key of {} bytes (at most {MAX_TABLE_KEY})",
            k.len()
        )));
    }
    Ok(k)
}

/// Seconds (a number, fractions allowed) as milliseconds; nil is no expiry.
fn ttl_ms(t: Option<f64>) -> mlua::Result<u64> {
    match t {
        None => Ok(0),
        Some(t) if t > 0.0 && t <= 365.0 * 86_400.0 => Ok(((t * 1000.0) as u64).max(1)),
        Some(t) => Err(mlua::Error::runtime(format!(
            "sy.table: a lifetime of {t} s (more than 0, at most a year)"
        ))),
    }
}

impl UserData for SharedTable {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        use crate::shield::stick::Stored;
        m.add_method("get", |lua, t, k: Value| {
            Ok(match t.0.get(&table_key(&k)?) {
                None => Value::Nil,
                Some(Stored::Int(n)) => Value::Integer(n),
                Some(Stored::Text(b)) => Value::String(lua.create_string(b)?),
            })
        });
        m.add_method("set", |_, t, (k, v, ttl): (Value, Value, Option<f64>)| {
            let k = table_key(&k)?;
            let v = match v {
                Value::Nil => {
                    t.0.delete(&k);
                    return Ok(());
                }
                Value::Integer(n) => Stored::Int(n),
                Value::Boolean(b) => Stored::Int(i64::from(b)),
                Value::Number(n) if n.fract() == 0.0 && n.abs() < 9e15 => Stored::Int(n as i64),
                Value::Number(n) => Stored::Text(n.to_string().into_bytes()),
                Value::String(s) if s.as_bytes().len() <= MAX_TABLE_VALUE => {
                    Stored::Text(s.as_bytes().to_vec())
                }
                Value::String(_) => {
                    return Err(mlua::Error::runtime(format!(
                        "sy.table: a value of more than {MAX_TABLE_VALUE} bytes"
                    )))
                }
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "sy.table: a value is a string or a number, not a {}",
                        other.type_name()
                    )))
                }
            };
            t.0.set(&k, v, ttl_ms(ttl)?);
            Ok(())
        });
        m.add_method(
            "incr",
            |_, t, (k, by, ttl): (Value, Option<i64>, Option<f64>)| {
                Ok(t.0.incr(&table_key(&k)?, by.unwrap_or(1), ttl_ms(ttl)?))
            },
        );
        m.add_method("rate", |_, t, (k, period): (Value, f64)| {
            let ms = ttl_ms(Some(period))?;
            Ok(t.0.rate(&table_key(&k)?, ms) as i64)
        });
        m.add_method("delete", |_, t, k: Value| Ok(t.0.delete(&table_key(&k)?)));
    }
}

/// A public key for JWT signatures (`sy.public_key(pem)`): RSA (RS256)
/// or EC P-256 (ES256), from a PEM SubjectPublicKeyInfo, parsed once (at
/// the top level of a script).
#[derive(Clone)]
pub struct PublicKey {
    kind: KeyKind,
    /// Parsed once: a verification costs no parse.
    key: std::sync::Arc<aws_lc_rs::signature::ParsedPublicKey>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KeyKind {
    Rsa,
    P256,
}

impl UserData for PublicKey {}

impl PublicKey {
    pub fn from_pem(pem: &[u8]) -> Result<PublicKey, &'static str> {
        use aws_lc_rs::signature::{self, ParsedPublicKey};
        let text = std::str::from_utf8(pem).map_err(|_| "not PEM text")?;
        let body = text
            .split("-----BEGIN PUBLIC KEY-----")
            .nth(1)
            .and_then(|r| r.split("-----END PUBLIC KEY-----").next())
            .ok_or("no -----BEGIN PUBLIC KEY----- block (a SubjectPublicKeyInfo)")?;
        let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let der = crate::base64::decode(&b64).ok_or("bad base64 in the PEM block")?;
        // The algorithm's OID, inside the SPKI's AlgorithmIdentifier.
        const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
        const EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
        const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
        let head = &der[..der.len().min(40)];
        let has = |oid: &[u8]| head.windows(oid.len()).any(|w| w == oid);
        let (kind, alg): (_, &'static dyn signature::VerificationAlgorithm) = if has(RSA) {
            (KeyKind::Rsa, &signature::RSA_PKCS1_2048_8192_SHA256)
        } else if has(EC) && has(P256) {
            (KeyKind::P256, &signature::ECDSA_P256_SHA256_FIXED)
        } else {
            return Err("not an RSA or EC P-256 public key");
        };
        if kind == KeyKind::Rsa {
            let bits = aws_lc_rs::rsa::PublicEncryptingKey::from_der(&der)
                .map_err(|_| "a malformed RSA key")?
                .key_size_bits();
            if !(2048..=8192).contains(&bits) {
                return Err("an RSA key of 2048 to 8192 bits is wanted");
            }
        }
        let key = ParsedPublicKey::new(alg, &der).map_err(|_| "a malformed key")?;
        Ok(PublicKey {
            kind,
            key: std::sync::Arc::new(key),
        })
    }
}

/// What `sy.jwt_verify` checks a signature with.
pub enum JwtKey<'a> {
    Hmac(&'a [u8]),
    Public(PublicKey),
}

/// Verifies a JSON Web Token (RFC 7519) and returns its claims. The
/// algorithm must be the key's (HS256 for a secret, RS256 for an RSA key,
/// ES256 for a P-256 key: a token cannot choose another, nor "none"), the
/// signature must match, and `exp` / `nbf`, when present, must hold at
/// `now` (seconds).
pub fn jwt_verify(
    token: &[u8],
    key: &JwtKey<'_>,
    now: i64,
) -> Result<serde_json::Value, &'static str> {
    let mut parts = token.split(|b| *b == b'.');
    let (Some(h), Some(p), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed token");
    };
    let header = b64url_decode(h).ok_or("malformed header")?;
    let header: JoseHeader = serde_json::from_slice(&header).map_err(|_| "malformed header")?;
    let alg = header.alg.as_deref();
    let sig = b64url_decode(sig).ok_or("malformed signature")?;
    let signed = &token[..h.len() + 1 + p.len()];
    match key {
        JwtKey::Hmac(secret) => {
            if alg != Some("HS256") {
                return Err("not an HS256 token");
            }
            hmac_verify(secret, signed, &sig).map_err(|()| "bad signature")?;
        }
        JwtKey::Public(k) => {
            let want = match k.kind {
                KeyKind::Rsa => "RS256",
                KeyKind::P256 => "ES256",
            };
            if alg != Some(want) {
                return Err(if want == "RS256" {
                    "not an RS256 token"
                } else {
                    "not an ES256 token"
                });
            }
            k.key
                .verify_sig(signed, &sig)
                .map_err(|_| "bad signature")?;
        }
    }
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

/// The one field of a token's header that is checked: read without a
/// JSON tree (a `serde_json::Value` for the header cost about 1,500
/// instructions per token). An object only; a repeated "alg" is refused.
struct JoseHeader<'a> {
    alg: Option<std::borrow::Cow<'a, str>>,
}

impl<'de> serde::Deserialize<'de> for JoseHeader<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = JoseHeader<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JOSE header object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Self::Value, M::Error> {
                let mut alg = None;
                while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    if k == "alg" {
                        if alg.is_some() {
                            return Err(serde::de::Error::duplicate_field("alg"));
                        }
                        alg = Some(m.next_value::<std::borrow::Cow<'de, str>>()?);
                    } else {
                        m.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(JoseHeader { alg })
            }
        }
        d.deserialize_map(Fields)
    }
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

thread_local! {
    /// This worker's key for the last HMAC secret a JWT was checked with:
    /// a script checks its tokens with one secret, and setting a key up
    /// (both pads hashed) cost about 5,200 instructions per token
    /// (callgrind, BENCHMARKS.md "Scripting").
    static LAST_HMAC_KEY: std::cell::RefCell<Option<(Vec<u8>, hmac::Key)>> =
        const { std::cell::RefCell::new(None) };
}

/// HMAC-SHA256 of `signed` checked against `sig` (in constant time, by
/// aws-lc) with `secret`'s key, made once per secret per worker. The
/// secrets compared here are the script's own, not a client's.
fn hmac_verify(secret: &[u8], signed: &[u8], sig: &[u8]) -> Result<(), ()> {
    LAST_HMAC_KEY.with(|cell| {
        let mut last = cell.borrow_mut();
        let key = match &*last {
            Some((s, k)) if s.as_slice() == secret => k,
            _ => {
                let k = hmac::Key::new(hmac::HMAC_SHA256, secret);
                &last.insert((secret.to_vec(), k)).1
            }
        };
        hmac::verify(key, signed, sig).map_err(|_| ())
    })
}

/// The URL alphabet only ('+' and '/' are the standard one's), padded or
/// not. Decoded in place: a JWT's three parts are decoded per check, and
/// translating them into a padded standard-alphabet copy first cost about
/// 10,000 instructions per token (callgrind, BENCHMARKS.md "Scripting").
fn b64url_decode(s: &[u8]) -> Option<Vec<u8>> {
    if s.iter().any(|c| matches!(c, b'+' | b'/')) {
        return None;
    }
    crate::base64::decode(std::str::from_utf8(s).ok()?)
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

/// `sy.hash_pick(key, choices)`: consistent hashing by rendezvous (highest
/// random weight): every choice gets a score from the key and its own
/// name, the highest wins. Removing a choice moves only the keys it had;
/// adding one takes from each the share it gets; no ring to build or keep
/// in step across workers and nodes. `choices`: a list of names (equal
/// weights), or a table of name = weight (weighted rendezvous: the score
/// is `-w / ln(u)`, `u` the pair's hash in (0, 1), so a choice gets keys
/// in proportion to its weight). nil when no choice has a weight above 0.
/// Cost: one hash per choice, for the handful of pools or variants a
/// script picks among (a balancer's members are the pool's, not this).
fn hash_pick(key: &[u8], choices: &Table) -> mlua::Result<Option<mlua::String>> {
    let k = stable_hash(key);
    let mut best: Option<(f64, mlua::String)> = None;
    for pair in choices.pairs::<Value, Value>() {
        let (name, weight) = match pair? {
            (Value::Integer(_), Value::String(name)) => (name, 1.0),
            (Value::String(name), Value::Integer(w)) => (name, w as f64),
            (Value::String(name), Value::Number(w)) => (name, w),
            (k, v) => {
                return Err(mlua::Error::runtime(format!(
                    "sy.hash_pick: choices are names, or name = weight (got {} = {})",
                    k.type_name(),
                    v.type_name()
                )))
            }
        };
        if !weight.is_finite() || weight < 0.0 {
            return Err(mlua::Error::runtime(format!(
                "sy.hash_pick: the weight of {:?} is {weight} (want 0 or more)",
                name.to_string_lossy()
            )));
        }
        if weight == 0.0 {
            continue;
        }
        let h = mix(k ^ stable_hash(&name.as_bytes()).rotate_left(17));
        // (0, 1): never 0, whose logarithm has no score.
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let score = -weight / u.ln();
        let better = match &best {
            None => true,
            // A tie (a duplicate name, equal weights) goes to the smaller
            // name: the same answer whatever the table's order.
            Some((b, n)) => score > *b || (score == *b && name.as_bytes() < n.as_bytes()),
        };
        if better {
            best = Some((score, name));
        }
    }
    Ok(best.map(|(_, n)| n))
}

/// SplitMix64's finalizer: every input bit moves every output bit.
fn mix(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Verifies an HS256 JSON Web Token (RFC 7519) and returns its claims:
/// the header must say HS256 (no "none", no other algorithm), the
/// signature must match, and `exp` / `nbf`, when present, must hold at
/// `now` (seconds).
pub fn jwt_hs256(token: &[u8], secret: &[u8], now: i64) -> Result<serde_json::Value, &'static str> {
    jwt_verify(token, &JwtKey::Hmac(secret), now)
}

/// How deep the claims' JSON may nest before `sy.jwt_*` refuses it.
const MAX_JSON_DEPTH: u32 = 32;

/// A JSON value as Lua values (null is nil; nesting is bounded), made in
/// one protected call. With a memory limit (`max_memory`), mlua protects
/// each table store and each string it makes on its own (a `lua_pcall`
/// apiece): a token's claims cost about 8,500 instructions that way, most
/// of them in those calls (callgrind, BENCHMARKS.md "Scripting").
fn json_to_lua(lua: &Lua, v: &serde_json::Value) -> mlua::Result<Value> {
    if json_depth(v) > MAX_JSON_DEPTH {
        return Err(mlua::Error::runtime("JSON nested too deep"));
    }
    // SAFETY: `push_json` uses only Lua's C API on the state mlua hands
    // over, on a stack it checks first; a Lua error (out of memory)
    // unwinds through frames that hold references only, nothing to drop,
    // as mlua's own protected closures require.
    unsafe { lua.exec_raw::<Value>((), |state| push_json(state, v)) }
}

fn json_depth(v: &serde_json::Value) -> u32 {
    use serde_json::Value as J;
    match v {
        J::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        J::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Pushes `v` on `state`'s stack (one slot). Nesting is bounded by the
/// caller (`json_depth`).
unsafe fn push_json(state: *mut mlua::ffi::lua_State, v: &serde_json::Value) {
    use mlua::ffi;
    use serde_json::Value as J;
    // SAFETY: the caller's (`json_to_lua`): a state mlua lends for the
    // call, with room checked before each push.
    unsafe {
        // A table, a key and a value per level.
        ffi::luaL_checkstack(state, 3, c"JSON nested too deep".as_ptr());
        match v {
            J::Null => ffi::lua_pushnil(state),
            J::Bool(b) => ffi::lua_pushboolean(state, i32::from(*b)),
            J::Number(n) => match n.as_i64() {
                Some(i) => ffi::lua_pushinteger(state, i),
                None => ffi::lua_pushnumber(state, n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => {
                ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
            }
            J::Array(a) => {
                ffi::lua_createtable(state, a.len().min(i32::MAX as usize) as i32, 0);
                for (i, x) in a.iter().enumerate() {
                    push_json(state, x);
                    ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
                }
            }
            J::Object(o) => {
                ffi::lua_createtable(state, 0, o.len().min(i32::MAX as usize) as i32);
                for (k, x) in o {
                    ffi::lua_pushlstring(state, k.as_ptr().cast(), k.len());
                    push_json(state, x);
                    ffi::lua_rawset(state, -3);
                }
            }
        }
    }
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
        // Padded is fine; the standard alphabet's '+' and '/' and bytes
        // outside ASCII are not.
        assert_eq!(b64url_decode(b"-_8=").as_deref(), Some(&b"\xfb\xff"[..]));
        assert_eq!(b64url_decode(b"+/8"), None);
        assert_eq!(b64url_decode("é_8".as_bytes()), None);
        assert_eq!(b64url_decode(b"\xff_8"), None);
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
        // The header is an object with one "alg".
        let list = token(r#"["HS256"]"#, r#"{"sub":"x"}"#, b"k");
        assert_eq!(jwt_hs256(&list, b"k", 0), Err("malformed header"));
        let twice = token(r#"{"alg":"HS256","alg":"none"}"#, r#"{"sub":"x"}"#, b"k");
        assert_eq!(jwt_hs256(&twice, b"k", 0), Err("malformed header"));
        let kid = token(r#"{"kid":{"a":[1]},"alg":"HS256"}"#, r#"{"sub":"x"}"#, b"k");
        assert_eq!(jwt_hs256(&kid, b"k", 0).expect("valid")["sub"], "x");
    }

    fn pem(der: &[u8]) -> String {
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            crate::base64::encode(der)
        )
    }

    fn signed(header: &str, claims: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
        let mut t = b64url_encode(header.as_bytes());
        t.push('.');
        t.push_str(&b64url_encode(claims.as_bytes()));
        let sig = sign(t.as_bytes());
        t.push('.');
        t.push_str(&b64url_encode(&sig));
        t.into_bytes()
    }

    #[test]
    fn jwt_rs256_and_es256_verify_with_the_keys_own_algorithm() {
        use aws_lc_rs::encoding::AsDer;
        use aws_lc_rs::rand::SystemRandom;
        use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
        let rng = SystemRandom::new();
        let rsa = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("rsa");
        let rsa_pem = pem(rsa.public_key().as_der().expect("der").as_ref());
        let ec = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("ec");
        let ec_pem = pem(ec.public_key().as_der().expect("der").as_ref());
        let rsa_key = JwtKey::Public(PublicKey::from_pem(rsa_pem.as_bytes()).expect("rsa pem"));
        let ec_key = JwtKey::Public(PublicKey::from_pem(ec_pem.as_bytes()).expect("ec pem"));
        let rs = |m: &[u8]| {
            let mut sig = vec![0; rsa.public_modulus_len()];
            rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, m, &mut sig)
                .expect("sign");
            sig
        };
        let es = |m: &[u8]| ec.sign(&rng, m).expect("sign").as_ref().to_vec();
        let claims = r#"{"sub":"ann","exp":2000}"#;
        let t = signed(r#"{"alg":"RS256"}"#, claims, rs);
        assert_eq!(jwt_verify(&t, &rsa_key, 1000).expect("rs256")["sub"], "ann");
        assert_eq!(jwt_verify(&t, &rsa_key, 2000), Err("expired"));
        assert_eq!(jwt_verify(&t, &ec_key, 1000), Err("not an ES256 token"));
        let t = signed(r#"{"alg":"ES256"}"#, claims, es);
        assert_eq!(jwt_verify(&t, &ec_key, 1000).expect("es256")["sub"], "ann");
        // Another key's signature, an algorithm the key is not for, and
        // the HS256-with-the-public-key confusion are refused.
        let other =
            EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("ec");
        let forged = signed(r#"{"alg":"ES256"}"#, claims, |m| {
            other.sign(&rng, m).expect("sign").as_ref().to_vec()
        });
        assert_eq!(jwt_verify(&forged, &ec_key, 1000), Err("bad signature"));
        let confused = token(r#"{"alg":"HS256"}"#, claims, ec_pem.as_bytes());
        assert_eq!(
            jwt_verify(&confused, &ec_key, 1000),
            Err("not an ES256 token")
        );
        assert!(
            PublicKey::from_pem(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
                .is_err()
        );
    }
}
