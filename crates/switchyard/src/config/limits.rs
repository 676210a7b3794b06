//! `[[vserver.limit]]` as written, and its validation into per-source
//! limits (`stick`).
//!
//! ```toml
//! [[vserver.limit]]
//! name = "per-client"
//! key = "src"                 # "src", "header:X-Api-Key", "cookie:session", "path"
//! conn_cur = 50               # connections open at once per source (key "src")
//! conn_rate = "100/10s"       # new connections per source (key "src")
//! req_rate = "200/10s"        # requests per key
//! req_cur = 20                # requests per key in progress at once
//! action = "reject"           # reject | close | tarpit | deny
//! tarpit = "5s"               # how long a tarpit holds (action "tarpit")
//! deny_for = "1m"             # how long a deny lasts (action "deny")
//! status = 429                # a refused request's status
//! allow = ["10.0.0.0/8"]      # sources never limited (CIDRs or @lists of [shield.lists])
//! table_size = 100000         # keys tracked at most
//! scope = "vserver"           # every request; "policy": only the requests of
//!                             # the policies that name it (`limits = [...]`)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::types::Problem;
use super::types::{parse_duration, Cidr};
use crate::shield::stick::{Action, Key, Limit, Rate, Table};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitFile {
    pub name: Spanned<String>,
    pub key: Option<Spanned<String>>,
    pub conn_cur: Option<Spanned<u32>>,
    pub conn_rate: Option<Spanned<String>>,
    pub req_rate: Option<Spanned<String>>,
    pub req_cur: Option<Spanned<u32>>,
    pub action: Option<Spanned<String>>,
    pub tarpit: Option<Spanned<String>>,
    pub deny_for: Option<Spanned<String>>,
    pub status: Option<Spanned<u16>>,
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    pub table_size: Option<Spanned<usize>>,
    /// "vserver" (default): every request; "policy": only the requests of
    /// the policies that name the limit in their `limits`.
    pub scope: Option<Spanned<String>>,
}

/// "100/10s": a count and a window.
fn rate(s: &Spanned<String>, what: &str, problems: &mut Vec<Problem>) -> Option<Rate> {
    let bad = |problems: &mut Vec<Problem>, why: &str| {
        problems.push((
            s.span(),
            format!(
                "{what}: {:?} {why}; write a count and a window such as \"100/10s\"",
                s.get_ref()
            ),
        ));
        None
    };
    let Some((n, period)) = s.get_ref().split_once('/') else {
        return bad(problems, "has no window");
    };
    let Ok(n) = n.trim().parse::<u32>() else {
        return bad(problems, "does not start with a count");
    };
    match parse_duration(period) {
        Ok(p) if p.0 >= 100 && n > 0 => Some(Rate { n, period_ms: p.0 }),
        Ok(_) => bad(
            problems,
            "needs a count above 0 and a window of 100ms or more",
        ),
        Err(e) => bad(problems, &e),
    }
}

fn duration(s: &Option<Spanned<String>>, what: &str, problems: &mut Vec<Problem>) -> Option<u64> {
    let s = s.as_ref()?;
    match parse_duration(s.get_ref()) {
        Ok(m) => Some(m.0),
        Err(e) => {
            problems.push((s.span(), format!("{what}: {e}")));
            None
        }
    }
}

/// Validates a vserver's limits; `old` holds the previous configuration's
/// tables by limit name (a reload keeps them).
pub fn build(
    files: &[LimitFile],
    vserver: &str,
    lists: &BTreeMap<String, Vec<Spanned<Cidr>>>,
    old: &HashMap<String, Arc<Table>>,
    at: Range<usize>,
    problems: &mut Vec<Problem>,
) -> Vec<Arc<Limit>> {
    let mut out: Vec<Arc<Limit>> = Vec::new();
    for f in files {
        let name = f.name.get_ref().clone();
        let what = format!("vserver {vserver:?} limit {name:?}");
        if out.iter().any(|l| l.name == name) {
            problems.push((f.name.span(), format!("{what} is defined twice")));
            continue;
        }
        let key = match f.key.as_ref().map(|k| k.get_ref().as_str()) {
            None | Some("src") => Key::Source,
            Some("path") => Key::Path,
            Some(k) => match k.split_once(':') {
                Some(("header", h)) if super::types::is_token(h) => {
                    Key::Header(h.to_ascii_lowercase())
                }
                Some(("cookie", c)) if !c.is_empty() => Key::Cookie(c.to_string()),
                _ => {
                    problems.push((
                        f.key.as_ref().map_or(at.clone(), |k| k.span()),
                        format!("{what}: key {k:?} is not \"src\", \"path\", \"header:NAME\" or \"cookie:NAME\""),
                    ));
                    Key::Source
                }
            },
        };
        let conn_rate = f.conn_rate.as_ref().and_then(|r| rate(r, &what, problems));
        let req_rate = f.req_rate.as_ref().and_then(|r| rate(r, &what, problems));
        let conn_cur = f.conn_cur.as_ref().map(|c| *c.get_ref());
        if (conn_cur.is_some() || conn_rate.is_some()) && !key.at_accept() {
            problems.push((
                f.name.span(),
                format!("{what}: conn_cur and conn_rate count connections, whose only key is the source (key = \"src\"); a {:?} key is known per request: use req_rate", f.key.as_ref().map(|k| k.get_ref().as_str()).unwrap_or("src")),
            ));
        }
        if conn_cur == Some(0) {
            problems.push((
                f.conn_cur.as_ref().map_or(at.clone(), |c| c.span()),
                format!("{what}: conn_cur 0 would refuse every connection"),
            ));
        }
        let req_cur = f.req_cur.as_ref().map(|c| *c.get_ref());
        if req_cur == Some(0) {
            problems.push((
                f.req_cur.as_ref().map_or(at.clone(), |c| c.span()),
                format!("{what}: req_cur 0 would refuse every request"),
            ));
        }
        if conn_cur.is_none() && conn_rate.is_none() && req_rate.is_none() && req_cur.is_none() {
            problems.push((
                f.name.span(),
                format!("{what}: sets no limit; give conn_cur, conn_rate, req_rate or req_cur"),
            ));
        }
        let per_policy = match f.scope.as_ref().map(|s| s.get_ref().as_str()) {
            None | Some("vserver") => false,
            Some("policy") => {
                if conn_cur.is_some() || conn_rate.is_some() {
                    problems.push((
                        f.name.span(),
                        format!("{what}: scope \"policy\" counts requests once a policy has decided; conn_cur and conn_rate count connections before any request: use req_rate or req_cur"),
                    ));
                }
                true
            }
            Some(other) => {
                problems.push((
                    f.scope.as_ref().map_or(at.clone(), |s| s.span()),
                    format!("{what}: scope {other:?} is not \"vserver\" or \"policy\""),
                ));
                false
            }
        };
        let tarpit = duration(&f.tarpit, &what, problems);
        let deny_for = duration(&f.deny_for, &what, problems);
        let action = match f.action.as_ref().map(|a| a.get_ref().as_str()) {
            None | Some("reject") => Action::Reject,
            Some("close") => Action::Close,
            Some("tarpit") => Action::Tarpit(tarpit.unwrap_or(5_000)),
            Some("deny") => Action::Deny(deny_for.unwrap_or(60_000)),
            Some(other) => {
                problems.push((
                    f.action.as_ref().map_or(at.clone(), |a| a.span()),
                    format!("{what}: action {other:?} is not one of reject, close, tarpit, deny"),
                ));
                Action::Reject
            }
        };
        if f.tarpit.is_some() && !matches!(action, Action::Tarpit(_)) {
            problems.push((
                f.name.span(),
                format!("{what}: tarpit is the duration of action \"tarpit\""),
            ));
        }
        if f.deny_for.is_some() && !matches!(action, Action::Deny(_)) {
            problems.push((
                f.name.span(),
                format!("{what}: deny_for is the duration of action \"deny\""),
            ));
        }
        let status = match &f.status {
            None => 429,
            Some(s) if (400..=599).contains(s.get_ref()) => *s.get_ref(),
            Some(s) => {
                problems.push((
                    s.span(),
                    format!(
                        "{what}: status {} is not an error status (400 to 599)",
                        s.get_ref()
                    ),
                ));
                429
            }
        };
        let mut allow = Vec::new();
        for a in &f.allow {
            let v = a.get_ref();
            if let Some(list) = v.strip_prefix('@') {
                match lists.get(list) {
                    Some(l) => allow.extend(l.iter().map(|c| *c.get_ref())),
                    None => problems.push((
                        a.span(),
                        format!("{what}: allow names list {list:?}, which [shield.lists] does not define"),
                    )),
                }
            } else {
                match Cidr::parse(v) {
                    Ok(c) => allow.push(c),
                    Err(e) => problems.push((a.span(), format!("{what}: allow: {e}"))),
                }
            }
        }
        let size = match &f.table_size {
            None => 100_000,
            Some(s) if (1..=10_000_000).contains(s.get_ref()) => *s.get_ref(),
            Some(s) => {
                problems.push((
                    s.span(),
                    format!(
                        "{what}: table_size {} is out of range 1 to 10000000",
                        s.get_ref()
                    ),
                ));
                100_000
            }
        };
        // Entries idle past the longest window (and any deny) count nothing.
        let idle = [conn_rate, req_rate]
            .iter()
            .flatten()
            .map(|r| 2 * r.period_ms)
            .chain(deny_for)
            .max()
            .unwrap_or(10_000);
        let table = old
            .get(&name)
            .cloned()
            .unwrap_or_else(|| Arc::new(Table::new(size, idle)));
        out.push(Arc::new(Limit {
            name,
            key,
            conn_cur,
            conn_rate,
            req_rate,
            req_cur,
            action,
            status,
            allow,
            table,
            per_policy,
        }));
    }
    out
}
