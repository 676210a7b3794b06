//! On-demand issuance (`[vserver.tls.acme.on_demand]`): a handshake for
//! a name no certificate covers orders one, if the operator's allow rule
//! admits the name (a list of names and `*.domain` patterns, and/or an
//! "ask" URL that answers 200 for the names to admit, as Caddy's
//! `on_demand_tls ask`), and no more than `per_hour` new names an hour.
//! Without the rule nothing is ordered for an SNI a client made up: a
//! client could otherwise make the node order certificates for any name
//! pointed at it, and spend the CA's rate limits.
//!
//! The handshake that asks first fails (a resolver cannot wait on the
//! CA); the order runs on a thread of its own, and the handshakes after
//! it is issued get the certificate. A name the ask URL refused is not
//! asked about again for `REFUSED_FOR`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{Managed, Spec};
use crate::log;

/// A refused name is not asked about again before this.
const REFUSED_FOR: i64 = 600;
/// Longest the ask URL may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The rule, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Exact names and `*.domain` patterns (one label), lower-case.
    pub allow: Vec<String>,
    /// `http://host:port/path`: GET with `?domain=NAME`; 200 admits.
    pub ask: Option<String>,
    /// New names admitted per hour, at most.
    pub per_hour: u32,
}

impl Rule {
    /// Whether the list admits `name` (always, with an ask URL and no
    /// list: the URL decides).
    fn listed(&self, name: &str) -> bool {
        if self.allow.is_empty() {
            return self.ask.is_some();
        }
        self.allow.iter().any(|a| match a.strip_prefix("*.") {
            Some(base) => name
                .split_once('.')
                .is_some_and(|(l, rest)| !l.is_empty() && rest == base),
            None => a == name,
        })
    }
}

/// The on-demand certificates of one `[acme]` table: kept across reloads
/// (found again by the table's spec).
pub struct OnDemand {
    /// The table's spec: each name's certificate is ordered with it.
    template: Spec,
    rule: Rule,
    owner: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Admitted names (their certificate may still be on its way).
    certs: HashMap<String, Arc<Managed>>,
    /// Names being asked about or refused (Unix seconds, until when).
    pending: HashMap<String, i64>,
    /// This hour (Unix seconds / 3600) and the names admitted in it.
    hour: i64,
    admitted: u32,
    /// Whether the cap was logged this hour.
    capped_logged: bool,
}

static ALL: Mutex<Vec<Weak<OnDemand>>> = Mutex::new(Vec::new());

/// The on-demand set for `template` and `rule`: the one an earlier
/// snapshot made, or a new one.
pub fn get(template: &Spec, rule: &Rule, owner: &str) -> Arc<OnDemand> {
    let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|w| w.strong_count() > 0);
    if let Some(o) = all
        .iter()
        .filter_map(Weak::upgrade)
        .find(|o| o.template == *template && o.rule == *rule)
    {
        return o;
    }
    let o = Arc::new(OnDemand {
        template: template.clone(),
        rule: rule.clone(),
        owner: owner.to_string(),
        state: Mutex::new(State::default()),
    });
    all.push(Arc::downgrade(&o));
    o
}

impl std::fmt::Debug for OnDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OnDemand({:?})", self.rule)
    }
}

impl OnDemand {
    /// The certificate for `sni`, if one was issued; otherwise, when the
    /// rule admits the name and the hour's cap allows, its order starts
    /// (in the background). Called on every handshake no configured
    /// certificate covers: a lock and a map lookup.
    pub fn resolve(self: &Arc<Self>, sni: &str) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let name = sni.to_ascii_lowercase();
        let now = super::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = st.certs.get(&name) {
            return m.current.load_full();
        }
        if st.pending.get(&name).is_some_and(|until| *until > now) || !self.rule.listed(&name) {
            return None;
        }
        if st.hour != now / 3600 {
            st.hour = now / 3600;
            st.admitted = 0;
            st.capped_logged = false;
        }
        if st.admitted >= self.rule.per_hour {
            if !st.capped_logged {
                st.capped_logged = true;
                log::warn(format_args!(
                    "acme on-demand: {} new names this hour already (per_hour); {name} and any other new name wait for the next hour",
                    self.rule.per_hour
                ));
            }
            return None;
        }
        st.admitted += 1;
        st.pending.insert(name.clone(), i64::MAX);
        drop(st);
        let me = self.clone();
        if let Err(e) = std::thread::Builder::new()
            .name("acme-on-demand".into())
            .spawn(move || me.admit(name))
        {
            log::error(format_args!("acme on-demand: cannot start a thread: {e}"));
        }
        None
    }

    /// Asks the URL (if any), then makes and starts the name's task.
    fn admit(&self, name: String) {
        if let Some(url) = &self.rule.ask {
            match ask(url, &name) {
                Ok(true) => {}
                Ok(false) => {
                    log::info(format_args!(
                        "acme on-demand: {url} refused {name}: no certificate is ordered for it"
                    ));
                    self.refuse(&name);
                    return;
                }
                Err(e) => {
                    log::warn(format_args!(
                        "acme on-demand: asking {url} about {name}: {e}; not ordered"
                    ));
                    self.refuse(&name);
                    return;
                }
            }
        }
        let mut spec = self.template.clone();
        spec.names = vec![name.clone()];
        spec.on_demand = None;
        let m = super::managed(spec, &self.owner);
        log::info(format_args!(
            "acme on-demand: {name} admitted; ordering its certificate"
        ));
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pending.remove(&name);
        st.certs.insert(name, m);
        drop(st);
        super::start();
    }

    /// Remembers a refusal; it does not count against the hour's cap
    /// (the CA was not asked).
    fn refuse(&self, name: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pending
            .insert(name.to_string(), super::now() + REFUSED_FOR);
        st.admitted = st.admitted.saturating_sub(1);
    }
}

/// GET `url?domain=NAME` (plain HTTP/1.1): whether the answer is 200.
fn ask(url: &str, name: &str) -> Result<bool, String> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .ok_or("the ask URL must be http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, ASK_TIMEOUT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(ASK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(ASK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path}{sep}domain={name} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nUser-Agent: switchyard\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(e.to_string()),
        }
    }
    let line = String::from_utf8_lossy(&head[..n]);
    let status = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| format!("not an HTTP answer: {line:?}"))?;
    Ok(status == "200")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_admits_names_and_one_label_patterns() {
        let r = Rule {
            allow: vec!["*.shop.example.com".into(), "a.example.org".into()],
            ask: None,
            per_hour: 1,
        };
        assert!(r.listed("x.shop.example.com"));
        assert!(!r.listed("x.y.shop.example.com"));
        assert!(!r.listed("shop.example.com"));
        assert!(r.listed("a.example.org"));
        assert!(!r.listed("b.example.org"));
        let ask_only = Rule {
            allow: vec![],
            ask: Some("http://127.0.0.1:1/".into()),
            per_hour: 1,
        };
        assert!(ask_only.listed("anything.example"));
    }
}
