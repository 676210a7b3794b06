//! The shield: what keeps unwanted traffic from the proxy (issue 12).
//!
//! - `acl`: ordered L3/L4 rules compiled for a lookup in near-constant
//!   time.
//! - `AclSet`: one live rule set (the global `[shield]` one, or a
//!   vserver's). It is evaluated at accept for TCP and per datagram for
//!   UDP. Its address lists can be edited at run time through the admin
//!   API: the rules are compiled again and swapped in, and established
//!   connections are untouched.
//! - `xdp`: the global set also evaluated in XDP on the interfaces
//!   `[shield.xdp]` names, before the kernel's stack (docs/shield.md).
//! - `ddos`: the DDoS vectors of report 003 (`[shield.ddos]`): classified,
//!   counted and limited in XDP, detected and learned in user space.
//! - `admission`: the one decision on a new connection (ACLs, then
//!   per-source limits), which the front door asks at accept, and the
//!   per-request decision of the limits, which the request-rate stage asks.
//! - `stick`: per-source limits (`[[vserver.limit]]`, HAProxy's stick
//!   tables): connections counted at accept, requests by the pipeline's
//!   `limiting` stage.
//! - `h2flood`: HTTP/2 flood accounting per connection (rapid reset,
//!   CONTINUATION, PING and SETTINGS floods).

pub mod acl;
pub mod admission;
pub mod ddos;
pub mod h2flood;
pub mod stick;
pub mod xdp;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use serde_json::{json, Value};

use crate::cidr::Cidr;
use crate::log;
use acl::{Acl, Action, Packet, Rule};

/// A rule with the address lists it names for its sources and destinations.
pub type ListedRule = (Rule, Vec<String>, Vec<String>);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub struct AclSet {
    default: Action,
    lists: Mutex<BTreeMap<String, Vec<Cidr>>>,
    /// The rules, compiled and counted: swapped whole by a list edit
    /// (same rules and counters) or by new rules from the admin API (new
    /// counters), so a lookup never sees half of each.
    live: ArcSwap<Live>,
    /// `[shield.xdp]`: only the global set has it.
    xdp: Option<xdp::Spec>,
    /// Unique per set: XDP tells a reload's new set from a list edit of
    /// the one loaded (an address could be reused).
    id: u64,
}

struct Live {
    rules: Vec<ListedRule>,
    compiled: Arc<Acl>,
    hits: Arc<Hits>,
}

/// Matches per rule, and decisions by the default, for one list of rules.
struct Hits {
    rules: Vec<AtomicU64>,
    default: AtomicU64,
    /// One more each time the admin API replaces the rules: XDP then
    /// starts its counters again too.
    epoch: u64,
}

impl Hits {
    fn new(n: usize, epoch: u64) -> Arc<Hits> {
        Arc::new(Hits {
            rules: (0..n).map(|_| AtomicU64::new(0)).collect(),
            default: AtomicU64::new(0),
            epoch,
        })
    }
}

fn compile(rules: &[ListedRule], lists: &BTreeMap<String, Vec<Cidr>>, default: Action) -> Acl {
    let expanded = rules
        .iter()
        .map(|(r, src, dst)| {
            let mut r = r.clone();
            for l in src {
                r.src.extend(lists.get(l).into_iter().flatten().copied());
            }
            for l in dst {
                r.dst.extend(lists.get(l).into_iter().flatten().copied());
            }
            r
        })
        .collect();
    Acl::new(expanded, default)
}

impl AclSet {
    pub fn new(
        rules: Vec<ListedRule>,
        lists: BTreeMap<String, Vec<Cidr>>,
        default: Action,
    ) -> AclSet {
        let compiled = Arc::new(compile(&rules, &lists, default));
        AclSet {
            live: ArcSwap::from_pointee(Live {
                hits: Hits::new(rules.len(), 0),
                rules,
                compiled,
            }),
            default,
            lists: Mutex::new(lists),
            xdp: None,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Nothing to do: no rules, and no XDP to attach.
    pub fn is_empty(&self) -> bool {
        self.live.load().rules.is_empty() && self.xdp.is_none()
    }

    pub fn set_xdp(&mut self, spec: xdp::Spec) {
        self.xdp = Some(spec);
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Which list of rules is in force: one more per replacement through
    /// the admin API.
    pub fn epoch(&self) -> u64 {
        self.live.load().hits.epoch
    }

    /// The rules as written (lists named, not expanded).
    pub fn rules(&self) -> Vec<ListedRule> {
        self.live.load().rules.clone()
    }

    /// The names of the set's address lists.
    pub fn list_names(&self) -> Vec<String> {
        self.lists
            .lock()
            .map(|l| l.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The rules' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.live
            .load()
            .rules
            .iter()
            .map(|(r, _, _)| r.name.clone())
            .collect()
    }

    pub fn xdp_spec(&self) -> Option<&xdp::Spec> {
        self.xdp.as_ref()
    }

    /// The rules as compiled now (lists expanded).
    pub fn compiled(&self) -> Arc<Acl> {
        self.live.load().compiled.clone()
    }

    pub fn default_action(&self) -> Action {
        self.default
    }

    /// The decision for `p`: counting and logging rules are counted (and
    /// logged) on the way.
    pub fn check(&self, p: &Packet) -> Action {
        let live = self.live.load();
        let v = live.compiled.check(p);
        for i in &v.noted {
            live.hits.rules[*i].fetch_add(1, Ordering::Relaxed);
            if live.rules[*i].0.action == Some(Action::Log) {
                log::info(format_args!(
                    "shield: rule {:?} matched {} -> {} (proto {}, port {})",
                    live.rules[*i].0.name, p.src, p.dst, p.proto, p.dst_port
                ));
            }
        }
        match v.rule {
            Some(i) => live.hits.rules[i].fetch_add(1, Ordering::Relaxed),
            None => live.hits.default.fetch_add(1, Ordering::Relaxed),
        };
        v.action
    }

    /// Adds and removes entries of address list `name`, then swaps in the
    /// recompiled rules. Returns the list's new length.
    pub fn edit_list(&self, name: &str, add: &[Cidr], remove: &[Cidr]) -> Result<usize, String> {
        let mut lists = self
            .lists
            .lock()
            .map_err(|_| "the list lock is poisoned".to_string())?;
        let Some(list) = lists.get(name) else {
            return Err(format!("no address list {name:?}"));
        };
        let mut edited = list.clone();
        edited.retain(|c| !remove.contains(c));
        for c in add {
            if !edited.contains(c) {
                edited.push(*c);
            }
        }
        let n = edited.len();
        let mut lists_after = lists.clone();
        lists_after.insert(name.to_string(), edited);
        let live = self.live.load_full();
        let compiled = compile(&live.rules, &lists_after, self.default);
        if self.xdp.is_some() {
            // Refuse an edit the XDP tables cannot hold, before changing
            // anything.
            xdp::tables(&compiled).map_err(|e| format!("[shield.xdp]: {e}"))?;
        }
        *lists = lists_after;
        self.live.store(Arc::new(Live {
            rules: live.rules.clone(),
            compiled: Arc::new(compiled),
            hits: live.hits.clone(),
        }));
        // Under the list lock: two edits reach the maps in their order.
        if self.xdp.is_some() {
            xdp::refresh(self);
        }
        Ok(n)
    }

    /// Puts `rules` in force instead of the set's rules (the admin API),
    /// with counters from zero; the lists stay. `rules` were validated
    /// against `list_names` (config::shield::rules_from_text), and lists
    /// are edited, never removed, at run time. Refused, changing nothing,
    /// when XDP cannot hold them.
    pub fn replace_rules(&self, rules: Vec<ListedRule>) -> Result<usize, String> {
        let lists = self
            .lists
            .lock()
            .map_err(|_| "the list lock is poisoned".to_string())?;
        let compiled = compile(&rules, &lists, self.default);
        if self.xdp.is_some() {
            xdp::tables(&compiled).map_err(|e| format!("[shield.xdp]: {e}"))?;
        }
        let n = rules.len();
        let epoch = self.epoch() + 1;
        self.live.store(Arc::new(Live {
            hits: Hits::new(n, epoch),
            rules,
            compiled: Arc::new(compiled),
        }));
        // Under the list lock: edits and replacements reach the maps in
        // their order.
        if self.xdp.is_some() {
            xdp::refresh(self);
        }
        Ok(n)
    }

    pub fn has_list(&self, name: &str) -> bool {
        self.lists
            .lock()
            .map(|l| l.contains_key(name))
            .unwrap_or(false)
    }

    /// Rules with their hit counts, and the lists, for the admin API.
    /// `hits` count decisions at accept; `xdp_hits` those in XDP (a
    /// connection XDP allows is evaluated again at accept, and counted in
    /// both).
    pub fn describe(&self) -> Value {
        let xdp_hits = self.xdp.as_ref().and_then(|_| xdp::hits(self));
        let live = self.live.load();
        let rules: Vec<Value> = live
            .rules
            .iter()
            .zip(&live.hits.rules)
            .enumerate()
            .map(|(i, ((r, sl, dl), h))| {
                json!({
                    "name": r.name,
                    "action": format!("{:?}", r.action.unwrap_or(Action::Allow)).to_ascii_lowercase(),
                    "src": r.src.iter().map(cidr_text).chain(sl.iter().map(|l| format!("@{l}"))).collect::<Vec<_>>(),
                    "dst": r.dst.iter().map(cidr_text).chain(dl.iter().map(|l| format!("@{l}"))).collect::<Vec<_>>(),
                    "proto": r.proto,
                    "src_port": ports_text(&r.src_ports),
                    "dst_port": ports_text(&r.dst_ports),
                    "hits": h.load(Ordering::Relaxed),
                    "xdp_hits": xdp_hits.as_ref().and_then(|(x, _)| x.get(i)),
                })
            })
            .collect();
        let lists: BTreeMap<String, Vec<String>> = self
            .lists
            .lock()
            .map(|l| {
                l.iter()
                    .map(|(k, v)| (k.clone(), v.iter().map(cidr_text).collect()))
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "default": format!("{:?}", self.default).to_ascii_lowercase(),
            "default_hits": live.hits.default.load(Ordering::Relaxed),
            "rules": rules,
            "lists": lists,
            "xdp_default_hits": xdp_hits.as_ref().map(|(_, d)| d),
            "xdp": self.xdp.as_ref().map(|_| xdp::describe()),
            "ddos": self.xdp.as_ref().and_then(|x| x.ddos.as_ref()).map(|_| xdp::ddos::describe()),
        })
    }
}

fn ports_text(ranges: &[(u16, u16)]) -> Vec<String> {
    ranges
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect()
}

pub fn cidr_text(c: &Cidr) -> String {
    format!("{}/{}", c.net, c.prefix)
}

/// The decision for a new TCP connection or a UDP datagram from `peer` to
/// `local`: the global rules first, then the vserver's; the first
/// non-allow decision stands.
pub fn admit(
    global: Option<&AclSet>,
    vserver: Option<&AclSet>,
    peer: SocketAddr,
    local: SocketAddr,
    proto: u8,
) -> Action {
    let p = Packet {
        src: peer.ip(),
        dst: local.ip(),
        proto,
        src_port: peer.port(),
        dst_port: local.port(),
        // What the connection's first segment carried.
        tcp_flags: if proto == acl::TCP { 0x02 } else { 0 },
    };
    for set in [global, vserver].into_iter().flatten() {
        match set.check(&p) {
            Action::Allow => {}
            other => return other,
        }
    }
    Action::Allow
}
