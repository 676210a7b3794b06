//! One normalization of the request path, before any rule reads it.
//!
//! Policies, limits, stick keys, the cache key, the WAF's URI views and
//! the access log all read `Request::target`; this step rewrites it once,
//! whatever the client protocol, so that `/x/../admin`, `/./admin`,
//! `//admin` and `/%61dmin` are all `/admin` to every rule and (unless the
//! vserver forwards the original bytes) to the member. Without it a
//! `path_prefix = "/admin"` rule was walked around by any of those
//! spellings while the member (nginx, for one) served `/admin`.
//!
//! What it does (RFC 3986 6.2.2, with the choices of Envoy's
//! `normalize_path` / `merge_slashes` / `path_with_escaped_slashes_action`
//! and HAProxy's `normalize-uri`):
//! - percent-encoded unreserved characters (ALPHA DIGIT `-` `.` `_` `~`)
//!   are decoded, the hex of every other escape is upper-cased;
//! - dot segments are removed (RFC 3986 5.2.4); a segment `..;x` or
//!   `.;x` counts as a dot segment, as Tomcat and Jetty strip the
//!   parameter before they resolve the path (`/x/..;/admin` is `/admin`
//!   to them);
//! - runs of `/` are merged (on by default), except the `//` right after
//!   a segment that ends in `:`: an embedded URL (`/fetch/https://host/`)
//!   keeps it, because `https:/host` is still `https://host` to URL
//!   parsers (WHATWG) and merging only hid the scheme from the WAF's RFI
//!   rules (CRS 931131) while the application saw the same URL;
//! - `%2F`, `%5C` and a literal `\` (a separator on IIS and other Windows
//!   members) are refused, kept as they are, or decoded to `/` before dot
//!   segments go;
//! - `%00`, a `%` not followed by two hex digits, and the overlong or
//!   never-valid UTF-8 lead bytes (`%C0`, `%C1`, `%E0%80`-`%E0%9F`,
//!   `%F0%80`-`%F0%8F`, `%F5`-`%FF`: `%c0%af` was `/` to old decoders)
//!   are refused or kept.
//!
//! The query is left as it came: its meaning belongs to the application.
//!
//! Cost: a path with no `%`, no `\` and no `/` followed by `/` or `.` is
//! left untouched after one scan and no allocation (the common case; see
//! docs/bench-results/history.md for the instructions per request).

use bytes::Bytes;

/// What happens to `%2F`, `%5C` and `\` in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EscapedSlashes {
    /// 400 (the default: a member may or may not treat them as `/`).
    #[default]
    Reject,
    /// Left as they are (upper-cased hex), not a separator to the rules.
    Keep,
    /// Decoded to `/` before dot segments are removed.
    Decode,
}

/// What happens to `%00`, malformed escapes and overlong UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadEncoding {
    /// 400 (the default).
    #[default]
    Reject,
    /// Left as they are.
    Keep,
}

/// A vserver's normalization settings (`[vserver.normalize]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub merge_slashes: bool,
    pub escaped_slashes: EscapedSlashes,
    pub bad_encoding: BadEncoding,
    /// The member gets the target as received; the rules still read the
    /// normalized one.
    pub forward_original: bool,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            merge_slashes: true,
            escaped_slashes: EscapedSlashes::Reject,
            bad_encoding: BadEncoding::Reject,
            forward_original: false,
        }
    }
}

/// Why a path was refused (the 400's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    EscapedSlash,
    EscapedNul,
    BadEscape,
    OverlongUtf8,
}

impl Refused {
    pub fn reason(self) -> &'static str {
        match self {
            Refused::EscapedSlash => "an encoded slash or a backslash in the request path",
            Refused::EscapedNul => "an encoded NUL (%00) in the request path",
            Refused::BadEscape => "an invalid percent-encoding in the request path",
            Refused::OverlongUtf8 => "an overlong or invalid UTF-8 escape in the request path",
        }
    }
}

/// The normalized target, or None when it is already normal (the
/// common case: nothing allocated).
#[inline]
pub fn target(target: &[u8], rules: &Rules) -> Result<Option<Bytes>, Refused> {
    // "*" (OPTIONS) and anything not origin-form stay as they are.
    if target.first() != Some(&b'/') || is_normal(target) {
        return Ok(None);
    }
    rewrite(target, rules)
}

/// The slow path: a path with something to normalize.
#[cold]
fn rewrite(target: &[u8], rules: &Rules) -> Result<Option<Bytes>, Refused> {
    let (path, rest) = match memchr::memchr(b'?', target) {
        Some(i) => target.split_at(i),
        None => (target, &b""[..]),
    };
    let decoded = escapes(path, rules)?;
    let mut out = Vec::with_capacity(target.len());
    remove_dot_segments(&decoded, rules.merge_slashes, &mut out);
    out.extend_from_slice(rest);
    if out == target {
        return Ok(None);
    }
    Ok(Some(Bytes::from(out)))
}

/// The path (up to `?`) has no escape, no backslash, no `//` and no
/// `/.`: nothing to do. One pass and one table lookup per byte: with
/// memchr for the `?` first and a `match` per byte this took 238
/// instructions for `/size/128` (callgrind), 1.2 % of a keep-alive request.
#[inline]
fn is_normal(target: &[u8]) -> bool {
    let mut i = 0;
    while i < target.len() {
        let b = target[i];
        if NOTABLE[usize::from(b)] {
            match b {
                b'?' => return true,
                b'/' => {
                    if matches!(target.get(i + 1), Some(b'/' | b'.')) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        i += 1;
    }
    true
}

/// `%`, `\`, `/` and `?`: the bytes `is_normal` looks at twice.
static NOTABLE: [bool; 256] = {
    let mut t = [false; 256];
    t[b'%' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'/' as usize] = true;
    t[b'?' as usize] = true;
    t
};

/// A hexadecimal digit's value (either case); also the script library's.
pub fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The escape at `p[i..]` decoded, if it is a well-formed one.
fn escape_at(p: &[u8], i: usize) -> Option<u8> {
    if p.get(i) != Some(&b'%') {
        return None;
    }
    let hi = hex_value(*p.get(i + 1)?)?;
    let lo = hex_value(*p.get(i + 2)?)?;
    Some(hi << 4 | lo)
}

/// A lead byte that, with the byte after it, can only start an overlong
/// UTF-8 form: the longer spellings of ASCII (`%c0%af` is `/` to a
/// lenient decoder, as old IIS was), in the 2- to 6-byte forms. Other
/// bytes above 0x7F pass: a legacy member may use Latin-1 paths
/// (`/i%FFndex.html`), and they spell no separator or dot.
fn overlong(lead: u8, next: Option<u8>) -> bool {
    let next_in = |lo: u8, hi: u8| next.is_some_and(|n| (lo..=hi).contains(&n));
    match lead {
        0xC0 | 0xC1 => true,
        0xE0 => next_in(0x80, 0x9F),
        0xF0 => next_in(0x80, 0x8F),
        0xF8 => next_in(0x80, 0x87),
        0xFC => next_in(0x80, 0x83),
        _ => false,
    }
}

/// Percent-encoding normalized: unreserved decoded, the rest upper-cased,
/// slashes and bad escapes as the rules say. In the result, every `/` is
/// a segment separator.
fn escapes(p: &[u8], rules: &Rules) -> Result<Vec<u8>, Refused> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let keep_bad = rules.bad_encoding == BadEncoding::Keep;
    let mut out = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        let b = p[i];
        if b == b'\\' {
            match rules.escaped_slashes {
                EscapedSlashes::Reject => return Err(Refused::EscapedSlash),
                EscapedSlashes::Keep => out.push(b'\\'),
                EscapedSlashes::Decode => out.push(b'/'),
            }
            i += 1;
            continue;
        }
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let Some(c) = escape_at(p, i) else {
            if !keep_bad {
                return Err(Refused::BadEscape);
            }
            // A stray '%' is a literal one: written as its own escape so
            // that it cannot pair with what follows into a new escape
            // (`%%34%31` must not become `%41`).
            out.extend_from_slice(b"%25");
            i += 1;
            continue;
        };
        i += 3;
        match c {
            _ if unreserved(c) => out.push(c),
            b'/' | b'\\' => match rules.escaped_slashes {
                EscapedSlashes::Reject => return Err(Refused::EscapedSlash),
                EscapedSlashes::Keep => out.extend_from_slice(&[
                    b'%',
                    HEX[usize::from(c >> 4)],
                    HEX[usize::from(c & 15)],
                ]),
                EscapedSlashes::Decode => out.push(b'/'),
            },
            0 if !keep_bad => return Err(Refused::EscapedNul),
            _ if !keep_bad && overlong(c, escape_at(p, i)) => return Err(Refused::OverlongUtf8),
            _ => out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]),
        }
    }
    Ok(out)
}

/// `.` and `.;params`.
fn is_dot(seg: &[u8]) -> bool {
    seg == b"." || seg.starts_with(b".;")
}

/// `..` and `..;params`.
fn is_dot_dot(seg: &[u8]) -> bool {
    seg == b".." || seg.starts_with(b"..;")
}

/// RFC 3986 5.2.4 on a path that starts with `/`, merging empty segments
/// but the last (a trailing `/` stays) and the one after a `scheme:`
/// segment when asked. `..` above the root stays at the root, as every
/// server resolves it.
fn remove_dot_segments(path: &[u8], merge_slashes: bool, out: &mut Vec<u8>) {
    // Segment starts in `out` (each segment written with its leading '/'),
    // so `..` pops by truncating.
    let mut starts: Vec<usize> = Vec::with_capacity(8);
    let segs = path[1..].split(|b| *b == b'/');
    let n = path[1..].iter().filter(|b| **b == b'/').count() + 1;
    let mut after_scheme = false;
    for (k, seg) in segs.enumerate() {
        let last = k + 1 == n;
        let follows_scheme = std::mem::replace(&mut after_scheme, seg.ends_with(b":"));
        if is_dot(seg) || is_dot_dot(seg) {
            if is_dot_dot(seg) {
                if let Some(s) = starts.pop() {
                    out.truncate(s);
                }
            }
            if last {
                out.push(b'/');
            }
            continue;
        }
        if seg.is_empty() && merge_slashes && !last && !follows_scheme {
            continue;
        }
        starts.push(out.len());
        out.push(b'/');
        out.extend_from_slice(seg);
    }
    if out.is_empty() {
        out.push(b'/');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(t: &str) -> Result<String, Refused> {
        norm_with(t, &Rules::default())
    }

    fn norm_with(t: &str, rules: &Rules) -> Result<String, Refused> {
        Ok(match target(t.as_bytes(), rules)? {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => t.to_string(),
        })
    }

    #[test]
    fn normal_paths_are_left_alone() {
        for t in [
            "/",
            "/admin",
            "/a/b.c/d?x=/../y",
            "*",
            "/a.b/c..d/.e",
            "/a/",
        ] {
            assert_eq!(target(t.as_bytes(), &Rules::default()), Ok(None), "{t}");
        }
    }

    #[test]
    fn dot_segments_slashes_and_unreserved_escapes() {
        for (t, want) in [
            ("/x/../admin", "/admin"),
            ("/./admin", "/admin"),
            ("//admin", "/admin"),
            ("/%61dmin", "/admin"),
            ("/x/%2e%2e/admin", "/admin"),
            ("/x/%2E./admin", "/admin"),
            ("/x/..;/admin", "/admin"),
            ("/x/..;jsessionid=1/admin", "/admin"),
            ("/admin/x/..", "/admin/"),
            ("/x/..", "/"),
            ("/..", "/"),
            ("/../../admin", "/admin"),
            ("/a//b///c/", "/a/b/c/"),
            ("/a/./b/.", "/a/b/"),
            ("/a/%7euser?q=%2f..", "/a/~user?q=%2f.."),
            ("/a%3bb", "/a%3Bb"),
            ("/%252e%252e/admin", "/%252e%252e/admin"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/get/https://example.com//x", "/get/https://example.com/x"),
            ("/https:///admin", "/https://admin"),
            ("/x://../admin", "/x:/admin"),
        ] {
            assert_eq!(norm(t).as_deref(), Ok(want), "{t}");
        }
    }

    #[test]
    fn merge_slashes_can_be_turned_off() {
        let rules = Rules {
            merge_slashes: false,
            ..Rules::default()
        };
        assert_eq!(norm_with("//a//b", &rules).as_deref(), Ok("//a//b"));
        assert_eq!(norm_with("/a//../b", &rules).as_deref(), Ok("/a/b"));
    }

    #[test]
    fn escaped_slashes() {
        for t in ["/x/..%2fadmin", "/a%2Fb", "/a%5cb", "/x\\..\\admin"] {
            assert_eq!(norm(t), Err(Refused::EscapedSlash), "{t}");
        }
        let keep = Rules {
            escaped_slashes: EscapedSlashes::Keep,
            ..Rules::default()
        };
        assert_eq!(
            norm_with("/x/..%2fadmin", &keep).as_deref(),
            Ok("/x/..%2Fadmin")
        );
        assert_eq!(norm_with("/a\\b", &keep).as_deref(), Ok("/a\\b"));
        let decode = Rules {
            escaped_slashes: EscapedSlashes::Decode,
            ..Rules::default()
        };
        assert_eq!(norm_with("/x/..%2fadmin", &decode).as_deref(), Ok("/admin"));
        assert_eq!(norm_with("/x\\..\\admin", &decode).as_deref(), Ok("/admin"));
        assert_eq!(norm_with("/x/..%5Cadmin", &decode).as_deref(), Ok("/admin"));
    }

    #[test]
    fn bad_encodings() {
        assert_eq!(norm("/a%00b"), Err(Refused::EscapedNul));
        for t in ["/a%", "/a%4", "/a%zz", "/a%%41"] {
            assert_eq!(norm(t), Err(Refused::BadEscape), "{t}");
        }
        for t in [
            "/x%c0%afadmin",
            "/%C1%9C",
            "/%e0%80%af",
            "/%f0%80%80%af",
            "/%f8%80%80%80%af",
            "/%fc%80%80%80%80%af",
        ] {
            assert_eq!(norm(t), Err(Refused::OverlongUtf8), "{t}");
        }
        // Valid multi-byte sequences and Latin-1 bytes pass.
        assert_eq!(norm("/%e2%82%ac").as_deref(), Ok("/%E2%82%AC"));
        assert_eq!(norm("/i%ffndex").as_deref(), Ok("/i%FFndex"));
        let keep = Rules {
            bad_encoding: BadEncoding::Keep,
            ..Rules::default()
        };
        assert_eq!(norm_with("/a%zz/./b", &keep).as_deref(), Ok("/a%25zz/b"));
        assert_eq!(norm_with("/a%%34%31", &keep).as_deref(), Ok("/a%2541"));
        assert_eq!(norm_with("/a%00", &keep).as_deref(), Ok("/a%00"));
        assert_eq!(norm_with("/%c0%af", &keep).as_deref(), Ok("/%C0%AF"));
    }
}
