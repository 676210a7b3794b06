//! Pool members published apart from the configuration (issue 37, item 3).
//!
//! A pool that says `cluster_members = true` lists no member in the text:
//! its members are the value of `<prefix>/members/<pool>`,
//! `{"members": [{"address": "10.1.2.3:8080", "weight": 1}, ...]}`. A
//! change of that key is a run-time change: the node swaps that pool's
//! member list in place (`config::swap_cluster_members`: no build of the
//! configuration, no new generation or revision, members that stay keep
//! their state), so a Kubernetes controller that follows EndpointSlices
//! publishes one small key per change and the configuration text, and
//! its revision, stay as they are. A member that goes away drains: it takes no new request, and
//! what it serves (requests, WebSockets, streams) finishes on it.
//!
//! Every build of the configuration (a reload of the same text too) takes
//! the member sets the node holds, so a reload gives what the run-time
//! change gave. A value that is not a valid member list is refused with
//! an error in the log and the pool keeps the members it had.

use super::back_off;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::etcd::{Client, WatchEvent};
use super::{Node, Settings};
use crate::log;

/// One member of a pool whose members come from the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemberSpec {
    pub addr: SocketAddr,
    /// 1 to 1000, as a `[[pool.member]]`'s weight.
    pub weight: u32,
}

/// Member sets by pool name.
pub type MemberSets = BTreeMap<String, Vec<MemberSpec>>;

pub fn members_prefix(settings: &Settings) -> Vec<u8> {
    format!("{}/members/", settings.prefix).into_bytes()
}

/// The key of `pool`'s members.
pub fn members_key(settings: &Settings, pool: &str) -> Vec<u8> {
    format!("{}/members/{pool}", settings.prefix).into_bytes()
}

/// The value published for a member set (sorted: the same set is always
/// the same bytes, so an unchanged set is not written again).
pub fn encode(members: &[MemberSpec]) -> Vec<u8> {
    let mut sorted = members.to_vec();
    sorted.sort();
    let list: Vec<Value> = sorted
        .iter()
        .map(|m| json!({"address": m.addr.to_string(), "weight": m.weight}))
        .collect();
    json!({ "members": list }).to_string().into_bytes()
}

/// A published member set, checked: addresses, weights 1 to 1000, no
/// address twice.
pub fn decode(value: &[u8]) -> Result<Vec<MemberSpec>, String> {
    let v: Value =
        serde_json::from_slice(value).map_err(|e| format!("the member set is not JSON: {e}"))?;
    let list = v["members"]
        .as_array()
        .ok_or("the member set has no \"members\" list")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let addr: SocketAddr = m["address"]
            .as_str()
            .ok_or(format!("member {i} has no \"address\""))?
            .parse()
            .map_err(|e| format!("member {i}: address {}: {e}", m["address"]))?;
        let weight = match &m["weight"] {
            Value::Null => 1,
            w => match w.as_u64() {
                Some(w @ 1..=1000) => w as u32,
                _ => return Err(format!("member {addr}: weight {w} is not from 1 to 1000")),
            },
        };
        if out.iter().any(|o: &MemberSpec| o.addr == addr) {
            return Err(format!("member {addr} is listed twice"));
        }
        out.push(MemberSpec { addr, weight });
    }
    if out.len() > crate::balance::MAX_POOL_MEMBERS {
        return Err(format!(
            "{} members; a pool has at most {}",
            out.len(),
            crate::balance::MAX_POOL_MEMBERS
        ));
    }
    Ok(out)
}

/// The members the running node holds for `pool` (none when this process
/// is not a cluster node, or nothing is published for the pool).
pub fn of(pool: &str) -> Vec<MemberSpec> {
    super::node()
        .map(|n| {
            n.members
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .sets
                .get(pool)
                .cloned()
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

/// What changed between two member sets, for the log: "+a -b ~c".
pub fn describe(before: &MemberSets, after: &MemberSets) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let pools: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for p in pools {
        let (b, a) = (
            before.get(p).unwrap_or(&empty),
            after.get(p).unwrap_or(&empty),
        );
        let mut parts = Vec::new();
        for m in a {
            match b.iter().find(|o| o.addr == m.addr) {
                None => parts.push(format!("+{}", m.addr)),
                Some(o) if o.weight != m.weight => {
                    parts.push(format!("~{} weight {}", m.addr, m.weight))
                }
                Some(_) => {}
            }
        }
        for m in b {
            if !a.iter().any(|o| o.addr == m.addr) {
                parts.push(format!("-{}", m.addr));
            }
        }
        if !parts.is_empty() {
            out.push(format!("pool {p:?} {}", parts.join(" ")));
        }
    }
    out
}

/// The member sets a node holds, with the etcd revision each came from:
/// the watch thread and the revision path (`sync`) both write them, and
/// neither may put back an older set than the other wrote (before, the
/// watch thread replaced everything with its own older copy: a pool the
/// text had just started to use lost its members until the watch caught
/// up, and every event rebuilt the whole configuration).
#[derive(Debug, Default)]
pub struct Held {
    pub sets: MemberSets,
    /// Revision of each set's value.
    revisions: BTreeMap<String, i64>,
    /// Revision of the last full read: a pool absent from it was deleted
    /// at or before it.
    listed_at: i64,
    /// Every change of the members up to this revision is in `sets`,
    /// deletions too (a full read, or the watch's events in order): a
    /// revision's catch-up read asks only for what came after.
    seen: i64,
}

impl Held {
    /// A full read at `revision`, unless one newer was taken. Answers
    /// the pools whose set changed.
    fn take_listing(
        &mut self,
        revision: i64,
        entries: Vec<(String, i64, Result<Vec<MemberSpec>, String>)>,
        refused_by: &dyn Fn(&str, i64, &str),
    ) -> Vec<String> {
        if revision < self.listed_at {
            return Vec::new();
        }
        let mut sets = MemberSets::new();
        let mut revisions = BTreeMap::new();
        for (pool, rev, set) in entries {
            match set {
                Ok(m) => {
                    sets.insert(pool.clone(), m);
                    revisions.insert(pool, rev);
                }
                Err(e) => {
                    refused_by(&pool, rev, &e);
                    if let Some(old) = self.sets.get(&pool) {
                        sets.insert(pool.clone(), old.clone());
                        revisions.insert(pool.clone(), rev);
                    }
                }
            }
        }
        let changed = self
            .sets
            .keys()
            .chain(sets.keys())
            .filter(|p| self.sets.get(*p) != sets.get(*p))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        self.sets = sets;
        self.revisions = revisions;
        self.listed_at = revision;
        self.seen = self.seen.max(revision);
        changed
    }

    /// The watch delivered every change up to `revision`.
    fn saw(&mut self, revision: i64) {
        self.seen = self.seen.max(revision);
    }

    /// One pool's set written at `revision`, unless a newer value (or a
    /// newer full read) is held. Answers whether it changed the set.
    fn take_put(&mut self, pool: &str, revision: i64, set: Vec<MemberSpec>) -> bool {
        let floor = self.revisions.get(pool).copied().unwrap_or(self.listed_at);
        if revision <= floor {
            return false;
        }
        self.revisions.insert(pool.to_string(), revision);
        if self.sets.get(pool) == Some(&set) {
            return false;
        }
        self.sets.insert(pool.to_string(), set);
        true
    }
}

/// Every member set published now: (the read's revision, each pool's
/// value decoded, with its revision).
#[allow(clippy::type_complexity)]
fn read_all(
    node: &Node,
    client: &mut Client,
) -> Result<(i64, Vec<(String, i64, Result<Vec<MemberSpec>, String>)>), String> {
    let prefix = members_prefix(&node.settings);
    let (h, kvs) = client
        .list(&prefix)
        .map_err(|e| format!("cannot read the published members: {e}"))?;
    Ok((
        h.revision,
        kvs.into_iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned(),
                    kv.mod_revision,
                    decode(&kv.value),
                )
            })
            .collect(),
    ))
}

fn refused(node: &Node, pool: &str, rev: i64, why: &str) {
    log::error(format_args!(
        "cluster {:?}: members of pool {pool:?} (revision {rev}) not applied, the pool keeps its members: {why}",
        node.settings.prefix
    ));
}

/// Reads every published member set into the node before it first builds
/// its configuration, and before each revision is applied (a new pool's
/// members are there when the text naming it runs).
pub fn sync(node: &Node) -> Result<(), String> {
    let mut client = Client::new(&node.settings.endpoints, node.settings.access.clone());
    let seen = node.members.lock().unwrap_or_else(|e| e.into_inner()).seen;
    if seen > 0 {
        return catch_up(node, &mut client, seen);
    }
    let (rev, entries) = read_all(node, &mut client)?;
    node.members
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take_listing(rev, entries, &|p, r, e| refused(node, p, r, e));
    Ok(())
}

/// Takes the sets written after `seen` (the watch may not have delivered
/// them yet): a controller publishes a new pool's members just before the
/// text that names it. A deletion is not seen this way; it is the watch's
/// to apply, and deletes only sets of pools the text no longer names (a
/// controller removes them after publishing that text). Before, each
/// revision read every set: 10,000 keys at 10,000 routes, 110 to 480 ms
/// of a route change on a busy machine for what is usually nothing new.
fn catch_up(node: &Node, client: &mut Client, seen: i64) -> Result<(), String> {
    let prefix = members_prefix(&node.settings);
    let (_, kvs) = client
        .list_since(&prefix, seen)
        .map_err(|e| format!("cannot read the published members: {e}"))?;
    let mut held = node.members.lock().unwrap_or_else(|e| e.into_inner());
    for kv in kvs {
        let pool = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
        match decode(&kv.value) {
            Ok(m) => {
                held.take_put(&pool, kv.mod_revision, m);
            }
            Err(e) => refused(node, &pool, kv.mod_revision, &e),
        }
    }
    Ok(())
}

/// A member change for the control thread to apply: the pools changed,
/// what changed (for the log), answered with the configuration
/// generation now running.
pub type Change = (
    Vec<String>,
    Vec<String>,
    std::sync::mpsc::Sender<Result<u64, String>>,
);

/// Follows `<prefix>/members/` on a thread of its own; each change goes to
/// `apply` (the control thread), which swaps the pools' member lists.
pub fn follow(node: Arc<Node>, apply: tokio::sync::mpsc::UnboundedSender<Change>) {
    let _ = std::thread::Builder::new()
        .name("cluster-members".into())
        .spawn(move || watch_loop(&node, &apply));
}

/// Has the control thread apply the sets of `pools` (changed from
/// `before`) and waits for it.
fn apply_change(
    node: &Node,
    pools: Vec<String>,
    before: &MemberSets,
    apply: &tokio::sync::mpsc::UnboundedSender<Change>,
) {
    if pools.is_empty() {
        return;
    }
    let after: MemberSets = {
        let held = node.members.lock().unwrap_or_else(|e| e.into_inner());
        pools
            .iter()
            .filter_map(|p| held.sets.get(p).map(|s| (p.clone(), s.clone())))
            .collect()
    };
    let what = describe(before, &after);
    if what.is_empty() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    if apply.send((pools, what.clone(), tx)).is_err() {
        return;
    }
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => log::error(format_args!(
            "cluster {:?}: member change ({}) not applied: {e}",
            node.settings.prefix,
            what.join("; ")
        )),
        Err(_) => log::error(format_args!(
            "cluster {:?}: member change ({}): the control thread did not answer",
            node.settings.prefix,
            what.join("; ")
        )),
    }
}

/// The sets of `pools` held now (for `describe`).
fn held_sets(node: &Node, pools: &[String]) -> MemberSets {
    let held = node.members.lock().unwrap_or_else(|e| e.into_inner());
    pools
        .iter()
        .filter_map(|p| held.sets.get(p).map(|s| (p.clone(), s.clone())))
        .collect()
}

fn watch_loop(node: &Node, apply: &tokio::sync::mpsc::UnboundedSender<Change>) {
    let s = &node.settings;
    let prefix = members_prefix(s);
    let mut client = Client::new(&s.endpoints, s.access.clone());
    let mut backoff = Duration::from_millis(200);
    loop {
        if apply.is_closed() {
            return;
        }
        let from = match read_all(node, &mut client) {
            Ok((rev, entries)) => {
                backoff = Duration::from_millis(200);
                let (changed, before) = {
                    let mut held = node.members.lock().unwrap_or_else(|e| e.into_inner());
                    let before = held.sets.clone();
                    let changed =
                        held.take_listing(rev, entries, &|p, r, e| refused(node, p, r, e));
                    (changed, before)
                };
                apply_change(node, changed, &before, apply);
                rev + 1
            }
            Err(e) => {
                log::warn(format_args!(
                    "cluster {:?}: {e}; retrying in {backoff:?}",
                    s.prefix
                ));
                back_off(&mut backoff);
                continue;
            }
        };
        let mut w = match client.watch_prefix(&prefix, from, s.watch_idle) {
            Ok(w) => w,
            Err(e) => {
                log::warn(format_args!("cluster {:?}: members watch: {e}", s.prefix));
                back_off(&mut backoff);
                continue;
            }
        };
        loop {
            match w.next_event() {
                Ok(WatchEvent::Changes(_, changes)) => {
                    // A deletion does not say which key went: read all.
                    if changes.iter().any(|(_, kv)| kv.is_none()) {
                        break;
                    }
                    let changes_last_revision = changes.iter().map(|(r, _)| *r).max().unwrap_or(0);
                    let mut pools = Vec::new();
                    let mut decoded = Vec::new();
                    for (rev, kv) in changes.into_iter().flat_map(|(r, kv)| kv.map(|k| (r, k))) {
                        let pool = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
                        match decode(&kv.value) {
                            Ok(m) => decoded.push((pool, rev, m)),
                            Err(e) => refused(node, &pool, rev, &e),
                        }
                    }
                    let names: Vec<String> = decoded.iter().map(|d| d.0.clone()).collect();
                    let before = held_sets(node, &names);
                    let last = changes_last_revision;
                    {
                        let mut held = node.members.lock().unwrap_or_else(|e| e.into_inner());
                        for (pool, rev, m) in decoded {
                            if held.take_put(&pool, rev, m) && !pools.contains(&pool) {
                                pools.push(pool);
                            }
                        }
                        held.saw(last);
                    }
                    apply_change(node, pools, &before, apply);
                }
                Ok(WatchEvent::Created | WatchEvent::Progress(_)) => {}
                // Compacted, canceled, silent for watch_idle or broken:
                // read everything again and watch anew.
                Ok(WatchEvent::Compacted(_) | WatchEvent::Canceled(_)) | Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_sets_round_trip_sorted_and_bad_ones_are_refused_with_a_reason() {
        let a: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let set = vec![
            MemberSpec { addr: a, weight: 3 },
            MemberSpec { addr: b, weight: 1 },
        ];
        let bytes = encode(&set);
        let mut back = decode(&bytes).unwrap();
        back.sort();
        let mut want = set.clone();
        want.sort();
        assert_eq!(back, want);
        assert_eq!(encode(&want), bytes, "the same set is the same bytes");
        for (bad, why) in [
            (&b"nope"[..], "not JSON"),
            (br#"{"x": 1}"#, "no \"members\""),
            (br#"{"members": [{"address": "host:80"}]}"#, "address"),
            (
                br#"{"members": [{"address": "10.0.0.1:80", "weight": 0}]}"#,
                "weight",
            ),
            (
                br#"{"members": [{"address": "10.0.0.1:80"}, {"address": "10.0.0.1:80"}]}"#,
                "twice",
            ),
        ] {
            let e = decode(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn an_older_value_or_read_never_replaces_a_newer_one() {
        let m = |a: &str| {
            vec![MemberSpec {
                addr: a.parse().unwrap(),
                weight: 1,
            }]
        };
        let mut h = Held::default();
        let none = |_: &str, _: i64, _: &str| {};
        // The revision path read everything at 20.
        let changed = h.take_listing(20, vec![("p".into(), 18, Ok(m("10.0.0.2:80")))], &none);
        assert_eq!(changed, vec!["p".to_string()]);
        // The watch thread then meets the put of 12 (older) and a read at 10.
        assert!(!h.take_put("p", 12, m("10.0.0.1:80")));
        assert!(h.take_listing(10, vec![], &none).is_empty());
        assert_eq!(h.sets["p"], m("10.0.0.2:80"));
        // A pool the read at 20 did not have: a put before it is a set
        // deleted since; one after it is new.
        assert!(!h.take_put("q", 19, m("10.0.0.3:80")));
        assert!(h.take_put("q", 21, m("10.0.0.3:80")));
        assert!(h.take_put("p", 22, m("10.0.0.4:80")));
        assert_eq!(h.sets["p"], m("10.0.0.4:80"));
    }

    #[test]
    fn a_change_is_described_member_by_member() {
        let m = |a: &str, w| MemberSpec {
            addr: a.parse().unwrap(),
            weight: w,
        };
        let before =
            MemberSets::from([("p".into(), vec![m("10.0.0.1:80", 1), m("10.0.0.2:80", 1)])]);
        let after = MemberSets::from([
            ("p".into(), vec![m("10.0.0.2:80", 5), m("10.0.0.3:80", 1)]),
            ("q".into(), vec![m("10.0.0.9:80", 1)]),
        ]);
        assert_eq!(
            describe(&before, &after),
            vec![
                "pool \"p\" ~10.0.0.2:80 weight 5 +10.0.0.3:80 -10.0.0.1:80".to_string(),
                "pool \"q\" +10.0.0.9:80".to_string()
            ]
        );
        assert!(describe(&after, &after).is_empty());
    }
}
