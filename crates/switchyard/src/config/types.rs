//! Small value types parsed while the file is read, so their errors carry the
//! position of the value in the file.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration written as "250ms", "10s", "2m" or "1h" (or a bare integer of
/// milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis(pub u64);

impl Millis {
    pub fn duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

pub fn parse_duration(s: &str) -> Result<Millis, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected a number followed by ms, s, m or h")
    })?;
    let mult = match unit {
        "ms" => 1,
        "s" | "" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unknown unit {unit:?}; allowed: ms, s, m, h"
            ))
        }
    };
    n.checked_mul(mult)
        .map(Millis)
        .ok_or_else(|| format!("duration {s:?} is too large"))
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Millis;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"500ms\", \"10s\", \"2m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Millis, E> {
                u64::try_from(v)
                    .map(Millis)
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Millis, E> {
                parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

pub use crate::cidr::Cidr;

/// A regular expression compiled while the file is read.
#[derive(Debug, Clone)]
pub struct PathRegex(pub regex::Regex);

impl<'de> Deserialize<'de> for PathRegex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        regex::Regex::new(&s)
            .map(PathRegex)
            .map_err(|e| de::Error::custom(format!("invalid regex {s:?}: {e}")))
    }
}

/// One configuration error: where, and what.
pub type Problem = (Range<usize>, String);

/// A host name or address, with an optional port: what a Location or a
/// Host may carry (`redirect_host`, `rewrite.host`).
pub fn is_host(h: &str) -> bool {
    !h.is_empty()
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b))
}

/// A path in the one spelling the normalized rules read, as a policy's
/// literal `rewrite.path` must be (it is not normalized again): it starts
/// with /, has no empty (but a trailing one), `.` or `..` segment, and no
/// space, `?`, `#`, `%`, `\`, `"` or control character. The Gateway
/// controller checks a URLRewrite with it before rendering one.
pub fn is_normalized_path(p: &str) -> bool {
    let segments: Vec<&str> = p.split('/').skip(1).collect();
    p.starts_with('/')
        && !p
            .bytes()
            .any(|b| b.is_ascii_control() || b" ?#%\\\"".contains(&b))
        && segments
            .iter()
            .enumerate()
            .all(|(i, s)| !matches!(*s, "." | "..") && (!s.is_empty() || i + 1 == segments.len()))
}

/// An HTTP token (RFC 9110 5.6.2): field names, methods.
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Millis(10_000));
        assert_eq!(parse_duration("2m").unwrap(), Millis(120_000));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.9.9.9".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("banana").is_err());
    }

    #[test]
    fn normalized_paths_and_hosts() {
        assert!(is_normalized_path("/a/b/") && is_normalized_path("/"));
        assert!(!is_normalized_path("/a/./b") && !is_normalized_path("/a//b"));
        assert!(!is_normalized_path("a") && !is_normalized_path("/a%2fb"));
        assert!(is_host("example.org:8080") && is_host("[::1]:80"));
        assert!(!is_host("a b") && !is_host(""));
    }
}
