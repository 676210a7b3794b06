//! Content switching: evaluates a virtual server's policies in order.
//!
//! Every matching policy contributes its header edits; the first matching
//! policy with an action decides where the request goes. With no action the
//! request goes to the virtual server's default pool.

use std::net::IpAddr;

use crate::config::snapshot::{
    HeaderEdits, Matcher, NameValueMatch, Policy, PolicyCompression, VServer,
};
use crate::http::head::Request;

pub struct Decision<'a> {
    /// The first matching policy with an action: its action, rewrite,
    /// mirrors, limits, body size and timeouts apply to the request.
    pub policy: Option<&'a Policy>,
    pub request_edits: Vec<&'a HeaderEdits>,
    pub response_edits: Vec<&'a HeaderEdits>,
    /// Compression for this request, after the matching policies' say,
    /// and a policy's own settings when one gave them.
    pub compression: bool,
    pub compression_with: Option<&'a crate::compress::Settings>,
    /// Caching for this request, likewise.
    pub cache: bool,
}

pub fn route<'a>(vs: &'a VServer, req: &Request, peer: IpAddr) -> Decision<'a> {
    let mut d = Decision {
        policy: None,
        request_edits: Vec::new(),
        response_edits: Vec::new(),
        compression: vs.compression_on,
        compression_with: None,
        cache: vs.cache_on,
    };
    if !vs.request_headers.is_empty() {
        d.request_edits.push(&vs.request_headers);
    }
    if !vs.response_headers.is_empty() {
        d.response_edits.push(&vs.response_headers);
    }
    for p in &vs.policies {
        if !matches(&p.matcher, req, peer) {
            continue;
        }
        if !p.request_headers.is_empty() {
            d.request_edits.push(&p.request_headers);
        }
        if !p.response_headers.is_empty() {
            d.response_edits.push(&p.response_headers);
        }
        match &p.compression {
            Some(PolicyCompression::Off) => d.compression = false,
            Some(PolicyCompression::On) => d.compression = true,
            Some(PolicyCompression::With(s)) => {
                d.compression = true;
                d.compression_with = Some(s);
            }
            None => {}
        }
        if let Some(on) = p.cache {
            d.cache = on;
        }
        if p.action.is_some() {
            d.policy = Some(p);
            break;
        }
    }
    d
}

fn host_matches(pattern: &str, host: &[u8]) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
                && host[host.len() - suffix.len() - 1] == b'.'
        }
        None => host.eq_ignore_ascii_case(pattern.as_bytes()),
    }
}

pub fn matches(m: &Matcher, req: &Request, peer: IpAddr) -> bool {
    if !m.hosts.is_empty() {
        let Some(h) = req.host_name() else {
            return false;
        };
        if !m.hosts.iter().any(|p| host_matches(p, h)) {
            return false;
        }
    }
    let path = req.path_only();
    let same = |a: &[u8], b: &[u8]| {
        if m.path_nocase {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    if !m.paths.is_empty() && !m.paths.iter().any(|p| same(p.as_bytes(), path)) {
        return false;
    }
    if !m.path_prefixes.is_empty()
        && !m.path_prefixes.iter().any(|p| {
            let p = p.as_bytes();
            path.len() >= p.len() && same(p, &path[..p.len()])
        })
    {
        return false;
    }
    if let Some(r) = &m.path_regex {
        if !std::str::from_utf8(path).is_ok_and(|p| r.is_match(p)) {
            return false;
        }
    }
    if !m.methods.is_empty() && !m.methods.iter().any(|x| x.as_bytes() == req.method_str()) {
        return false;
    }
    for h in &m.headers {
        if !req.head.all(&h.name).any(|v| h.value.matches(v)) {
            return false;
        }
    }
    for q in &m.queries {
        if !query_matches(q, req.query().unwrap_or(b"")) {
            return false;
        }
    }
    if !m.sources.is_empty() && !m.sources.iter().any(|c| c.contains(peer)) {
        return false;
    }
    true
}

fn query_matches(q: &NameValueMatch, query: &[u8]) -> bool {
    query.split(|b| *b == b'&').any(|pair| {
        let (n, v) = match pair.iter().position(|b| *b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        n == q.name.as_bytes() && q.value.matches(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_hosts() {
        assert!(host_matches("*.example.com", b"a.example.com"));
        assert!(host_matches("*.example.com", b"A.B.Example.COM"));
        assert!(!host_matches("*.example.com", b"example.com"));
        assert!(!host_matches("*.example.com", b"badexample.com"));
        assert!(host_matches("example.com", b"EXAMPLE.com"));
    }
}
