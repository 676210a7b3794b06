//! GRPCRoute as HTTPRoute rules: a gRPC call is an HTTP/2 POST to
//! `/<service>/<method>`, so a method match is a path match and the rest
//! of the render (hosts, precedence, headers, weights, statuses) is
//! HTTPRoute's. Its pools speak HTTP/2 in cleartext (render.rs).
//!
//! Method matches (GRPCRoute spec): `Exact` (core) with both service
//! and method is an exact path; with one of them, the other is any
//! path segment; `RegularExpression` (extended) takes each part as a
//! regular expression of one segment. Without a method match every call
//! matches (`PathPrefix /`).

use crate::render::{Kind, RouteIn};
use crate::types::*;

pub(crate) fn route_in(r: &GrpcRoute) -> RouteIn<'_> {
    RouteIn {
        kind: Kind::GrpcRoute,
        metadata: &r.metadata,
        status: &r.status,
        parent_refs: &r.spec.parent_refs,
        hostnames: &r.spec.hostnames,
        rules: r.spec.rules.iter().map(rule).collect(),
    }
}

fn rule(r: &GrpcRouteRule) -> HttpRouteRule {
    HttpRouteRule {
        matches: (!r.matches.is_empty()).then(|| r.matches.iter().map(method_match).collect()),
        filters: r.filters.clone(),
        backend_refs: r.backend_refs.clone(),
    }
}

/// One segment of a gRPC path: what `[^/]+` matches.
const SEGMENT: &str = "[^/]+";

fn method_match(m: &GrpcRouteMatch) -> HttpRouteMatch {
    let path = m.method.as_ref().map(|mm| {
        let regex = mm.kind.as_deref() == Some("RegularExpression");
        match (&mm.service, &mm.method, regex) {
            (Some(svc), Some(method), false) => PathMatch {
                kind: Some("Exact".into()),
                value: Some(format!("/{svc}/{method}")),
            },
            (svc, method, regex) => {
                let part = |p: &Option<String>| match p {
                    None => SEGMENT.to_string(),
                    Some(v) if regex => format!("(?:{v})"),
                    Some(v) => escape(v),
                };
                PathMatch {
                    kind: Some("RegularExpression".into()),
                    value: Some(format!("/{}/{}", part(svc), part(method))),
                }
            }
        }
    });
    HttpRouteMatch {
        path: path.or(Some(PathMatch {
            kind: Some("PathPrefix".into()),
            value: Some("/".into()),
        })),
        headers: m.headers.clone(),
        query_params: Vec::new(),
        method: None,
    }
}

/// `s` as a regular expression that matches only itself (service names
/// carry dots).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: Option<&str>, svc: Option<&str>, method: Option<&str>) -> HttpRouteMatch {
        method_match(&GrpcRouteMatch {
            method: Some(GrpcMethodMatch {
                kind: kind.map(String::from),
                service: svc.map(String::from),
                method: method.map(String::from),
            }),
            headers: Vec::new(),
        })
    }

    fn path(h: &HttpRouteMatch) -> (String, String) {
        let p = h.path.as_ref().unwrap();
        (p.kind.clone().unwrap(), p.value.clone().unwrap())
    }

    #[test]
    fn method_matches_become_path_matches() {
        assert_eq!(
            path(&m(None, Some("pkg.Svc"), Some("Get"))),
            ("Exact".into(), "/pkg.Svc/Get".into())
        );
        assert_eq!(
            path(&m(Some("Exact"), Some("pkg.Svc"), None)),
            ("RegularExpression".into(), "/pkg\\.Svc/[^/]+".into())
        );
        assert_eq!(
            path(&m(Some("Exact"), None, Some("Get"))),
            ("RegularExpression".into(), "/[^/]+/Get".into())
        );
        assert_eq!(
            path(&m(Some("RegularExpression"), Some("pkg\\..*"), Some("G.t"))),
            ("RegularExpression".into(), "/(?:pkg\\..*)/(?:G.t)".into())
        );
        let all = method_match(&GrpcRouteMatch::default());
        assert_eq!(path(&all), ("PathPrefix".into(), "/".into()));
    }
}
