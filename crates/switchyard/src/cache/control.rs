//! Cache-Control (RFC 9111 5.2), request and response directives.

/// Seconds; values past 2^31 are capped there (RFC 9111 1.2.2).
pub type Delta = u64;
const DELTA_MAX: Delta = 1 << 31;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Directives {
    pub no_store: bool,
    /// Unqualified or with field names: either way, revalidate every time.
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub must_understand: bool,
    pub no_transform: bool,
    pub only_if_cached: bool,
    pub immutable: bool,
    /// An invalid value is recorded as 0: the response is stale at once
    /// (RFC 9111 4.2.1 allows treating conflicts that way; never fresher
    /// than the member meant).
    pub max_age: Option<Delta>,
    pub s_maxage: Option<Delta>,
    /// `max-stale` without a value accepts any staleness.
    pub max_stale: Option<Option<Delta>>,
    pub min_fresh: Option<Delta>,
    pub stale_while_revalidate: Option<Delta>,
    pub stale_if_error: Option<Delta>,
    /// Read from CDN-Cache-Control (RFC 9213), not Cache-Control.
    pub targeted: bool,
}

fn delta(v: Option<&[u8]>) -> Option<Delta> {
    let v = v?;
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: Delta = 0;
    for d in v {
        n = n.saturating_mul(10).saturating_add(Delta::from(d - b'0'));
    }
    Some(n.min(DELTA_MAX))
}

/// Every Cache-Control field of a message, as one list.
pub fn parse<'a>(fields: impl Iterator<Item = &'a [u8]>) -> Directives {
    let mut d = Directives::default();
    for field in fields {
        for item in split_list(field) {
            let (name, value) = match item.iter().position(|b| *b == b'=') {
                Some(i) => (
                    item[..i].trim_ascii(),
                    Some(unquote(item[i + 1..].trim_ascii())),
                ),
                None => (item, None),
            };
            let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
            // The first occurrence of a valued directive wins (RFC 9111 4.2.1).
            let set = |slot: &mut Option<Delta>| {
                if slot.is_none() {
                    *slot = Some(delta(value).unwrap_or(0));
                }
            };
            if is("no-store") {
                d.no_store = true;
            } else if is("no-cache") {
                d.no_cache = true;
            } else if is("private") {
                d.private = true;
            } else if is("public") {
                d.public = true;
            } else if is("must-revalidate") {
                d.must_revalidate = true;
            } else if is("proxy-revalidate") {
                d.proxy_revalidate = true;
            } else if is("must-understand") {
                d.must_understand = true;
            } else if is("no-transform") {
                d.no_transform = true;
            } else if is("only-if-cached") {
                d.only_if_cached = true;
            } else if is("immutable") {
                d.immutable = true;
            } else if is("max-age") {
                set(&mut d.max_age);
            } else if is("s-maxage") {
                set(&mut d.s_maxage);
            } else if is("min-fresh") {
                set(&mut d.min_fresh);
            } else if is("stale-while-revalidate") {
                set(&mut d.stale_while_revalidate);
            } else if is("stale-if-error") {
                set(&mut d.stale_if_error);
            } else if is("max-stale") && d.max_stale.is_none() {
                d.max_stale = Some(value.and_then(|v| delta(Some(v))));
            }
        }
    }
    d
}

/// Whether a CDN-Cache-Control value is a valid Structured Field
/// dictionary (RFC 8941) with integer freshness values (RFC 9213 says to
/// ignore the field otherwise).
pub fn valid_sf_dictionary(v: &[u8]) -> bool {
    split_list(v).all(|item| {
        let (key, value) = match item.iter().position(|b| *b == b'=') {
            Some(i) => (&item[..i], Some(&item[i + 1..])),
            None => (item, None),
        };
        let key_ok = key
            .first()
            .is_some_and(|c| c.is_ascii_lowercase() || *c == b'*')
            && key
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(c));
        let numeric = matches!(
            key,
            b"max-age" | b"s-maxage" | b"stale-while-revalidate" | b"stale-if-error" | b"min-fresh"
        );
        let value_ok = match value {
            None => !numeric,
            Some(v) if numeric => {
                !v.is_empty() && v.len() <= 15 && v.iter().all(u8::is_ascii_digit)
            }
            Some(v) => {
                (v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"')
                    || (!v.is_empty()
                        && v.iter().all(|c| {
                            c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/?".contains(c)
                        }))
            }
        };
        key_ok && value_ok
    })
}

/// Splits a list on commas outside quoted strings.
fn split_list(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut items = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, b) in v.iter().enumerate() {
        match (*b, quoted, escaped) {
            (_, true, true) => escaped = false,
            (b'\\', true, false) => escaped = true,
            (b'"', _, false) => quoted = !quoted,
            (b',', false, _) => {
                items.push(v[start..i].trim_ascii());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(v[start..].trim_ascii());
    items.into_iter().filter(|i| !i.is_empty())
}

fn unquote(v: &[u8]) -> &[u8] {
    if v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' {
        &v[1..v.len() - 1]
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Directives {
        parse(std::iter::once(s.as_bytes()))
    }

    #[test]
    fn directives() {
        let d = p("public, max-age=60, s-maxage=\"30\", no-cache=\"set-cookie, foo\"");
        assert!(d.public && d.no_cache);
        assert_eq!(d.max_age, Some(60));
        assert_eq!(d.s_maxage, Some(30));
        assert_eq!(p("MAX-AGE=10, max-age=20").max_age, Some(10));
        assert_eq!(p("max-age=-1").max_age, Some(0));
        assert_eq!(p("max-age=1.5").max_age, Some(0));
        assert_eq!(p("max-age=99999999999").max_age, Some(1 << 31));
        assert_eq!(p("max-stale").max_stale, Some(None));
        assert_eq!(p("max-stale=5").max_stale, Some(Some(5)));
        assert!(p("private").private && p("no-store").no_store);
        let two = [&b"max-age=5"[..], b"must-revalidate"];
        let d = parse(two.into_iter());
        assert!(d.must_revalidate);
        assert_eq!(d.max_age, Some(5));
    }
}
