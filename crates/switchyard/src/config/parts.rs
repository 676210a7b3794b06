//! Reading a large text again after a small change: the `[[pool]]`s and
//! `[[vserver.policy]]`s whose text is unchanged are taken from the
//! previous read instead of being parsed again.
//!
//! Why: a Kubernetes controller renders 10,000 routes as 3.4 MB of TOML
//! (20,000 policies, 10,000 pools) and one route change republishes all of
//! it. Parsing that text was two thirds of a parse and build (140 ms of
//! 200 ms on a quiet core, `perf record` of `switchyard check`), paid by the
//! controller's check and again by every node; `toml` 0.9's faster parser
//! took 121 ms on the same text, not the several times the change needs.
//! Envoy's incremental xDS and HAProxy's runtime API avoid the reparse by
//! sending only what changed; a text with a stable rendering gets the same
//! from a cache of its parts, with no second protocol.
//!
//! The text is cut into parts at the headers that start a pool or a policy
//! (`[[pool]]`, `[[vserver.policy]]` at the start of a line; their
//! sub-tables stay with them). Each is looked up by its exact text in the
//! previous read's parts and parsed on its own only if it is new. The rest
//! of the text (every other table, the vservers' own keys) is short and
//! parsed as one document. The pieces are then put back in their order.
//!
//! Positions: a part parsed alone has positions within that part, so a
//! model assembled this way cannot place an error. It is only used when its
//! build has no error and no warning; anything else (an error anywhere, a
//! text this cutting cannot be sure of) is read again whole, the way it
//! always was, so every message keeps its `file:line:column`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;

use super::model;

/// The pools and policies of one read, each found by its text (the
/// `[[pool]]` line to the next header that is not its own sub-table).
#[derive(Default)]
pub struct Parts {
    /// The text the ranges below are in.
    source: Arc<str>,
    pools: Known<model::Pool>,
    policies: Known<model::Policy>,
}

/// Models of one kind by a hash of the text each was read from, with
/// where that text is in `Parts::source` (to compare on a hit: a hash
/// that matches another text is a miss, and that text is parsed).
struct Known<T>(HashMap<u64, (Range<usize>, Arc<T>)>);

impl<T> Default for Known<T> {
    fn default() -> Self {
        Known(HashMap::new())
    }
}

impl<T> Known<T> {
    /// The model read from `text` (whose hash is `h`), if `source` (where
    /// the ranges are) held the same text.
    fn get(&self, h: u64, source: &str, text: &str) -> Option<Arc<T>> {
        match self.0.get(&h) {
            Some((r, m)) if source.get(r.clone()) == Some(text) => Some(m.clone()),
            _ => None,
        }
    }

    /// Remembers `model` as read from `source[r]`, whose hash is `h` (the
    /// first of equal texts: the others are the same model).
    fn keep(&mut self, h: u64, r: &Range<usize>, model: &Arc<T>) {
        self.0
            .entry(h)
            .or_insert_with(|| (r.clone(), model.clone()));
    }

    /// The model of `source[r]`: `previous`'s (read from `old`) when it
    /// holds the same text, else `parse`'s; remembered here either way.
    /// The text is hashed once for both.
    fn take(
        &mut self,
        source: &str,
        r: &Range<usize>,
        (previous, old): (&Known<T>, &str),
        parse: impl FnOnce(&str) -> Option<Arc<T>>,
    ) -> Option<Arc<T>> {
        let text = &source[r.clone()];
        let h = hash(text);
        let model = match previous.get(h, old, text) {
            Some(m) => m,
            None => parse(text)?,
        };
        self.keep(h, r, &model);
        Some(model)
    }
}

impl Parts {
    /// How many pools and policies are remembered.
    pub fn len(&self) -> usize {
        self.pools.0.len() + self.policies.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The parts of `source` (as read whole into `file`), for the next read.
/// Empty when the text does not cut cleanly or its parts do not line up
/// with the model one for one.
pub(super) fn remember(source: &Arc<str>, file: &model::File) -> Parts {
    let Some(cut) = cut(source) else {
        return Parts::default();
    };
    let policies: usize = file.vserver.iter().map(|v| v.policy.len()).sum();
    if cut.pools.len() != file.pool.len() || cut.policies.len() != policies {
        return Parts::default();
    }
    let mut parts = Parts {
        source: source.clone(),
        ..Parts::default()
    };
    for (r, p) in cut.pools.iter().zip(&file.pool) {
        parts.pools.keep(hash(&source[r.clone()]), r, p);
    }
    let all = file.vserver.iter().flat_map(|v| v.policy.iter());
    for ((_, r), p) in cut.policies.iter().zip(all) {
        parts.policies.keep(hash(&source[r.clone()]), r, p);
    }
    parts
}

/// `source` read with the unchanged parts of `previous`: the model and
/// this read's parts. None when the text cannot be read this way (it does
/// not cut cleanly, or a part or the rest does not parse alone): the caller
/// reads it whole.
pub(super) fn read(source: &Arc<str>, previous: &Parts) -> Option<(model::File, Parts)> {
    let cut = cut(source)?;
    let mut parts = Parts {
        source: source.clone(),
        ..Parts::default()
    };
    let old = &*previous.source;
    let mut pools = Vec::with_capacity(cut.pools.len());
    for r in &cut.pools {
        pools.push(parts.pools.take(source, r, (&previous.pools, old), |t| {
            one(toml::from_str::<PoolPart>(t).ok()?.pool)
        })?);
    }
    let mut policies: Vec<(usize, Arc<model::Policy>)> = Vec::with_capacity(cut.policies.len());
    for (vs, r) in &cut.policies {
        let policy = parts
            .policies
            .take(source, r, (&previous.policies, old), |t| {
                one(toml::from_str::<PolicyPart>(t).ok()?.vserver.policy)
            })?;
        policies.push((*vs, policy));
    }
    let mut file: model::File = toml::from_str(&cut.rest).ok()?;
    if file.vserver.len() != cut.vservers
        || (!pools.is_empty() && (!file.pool.is_empty() || assigns(&cut.rest, "pool")))
        || (!policies.is_empty() && assigns(&cut.rest, "policy"))
    {
        return None;
    }
    file.pool = pools;
    // A vserver the rest gave policies of its own (under a header this
    // cutting does not know) cannot take parts too: their order is lost.
    let from_rest: Vec<bool> = file.vserver.iter().map(|v| !v.policy.is_empty()).collect();
    for (vs, policy) in policies {
        if *from_rest.get(vs)? {
            return None;
        }
        file.vserver.get_mut(vs)?.policy.push(policy);
    }
    Some((file, parts))
}

/// `text` without its pools and policies, when it cuts cleanly: what a
/// reader of the other tables (`[cluster]`) needs to parse, a few hundred
/// bytes of a 3.4 MB text.
pub(super) fn rest_of(text: &str) -> Option<String> {
    cut(text).map(|c| c.rest)
}

/// A `[[pool]]` part read alone.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolPart {
    pool: Vec<Arc<model::Pool>>,
}

/// A `[[vserver.policy]]` part read alone: `vserver` is then a table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyPart {
    vserver: PolicyParent,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyParent {
    policy: Vec<Arc<model::Policy>>,
}

/// The only element of `v`.
fn one<T>(mut v: Vec<T>) -> Option<T> {
    (v.len() == 1).then(|| v.pop()).flatten()
}

/// A text cut into parts.
struct Cut {
    /// Each `[[pool]]` with its sub-tables.
    pools: Vec<Range<usize>>,
    /// Each `[[vserver.policy]]` with its sub-tables, and the index of the
    /// `[[vserver]]` it belongs to.
    policies: Vec<(usize, Range<usize>)>,
    /// Everything else, in order.
    rest: String,
    /// The `[[vserver]]` headers seen.
    vservers: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    Rest,
    Pool,
    Policy(usize),
}

/// Cuts `text` at its pool and policy headers; None when it cannot be done
/// safely: a multi-line string (a line in it may look like a header), or a
/// sub-table header that does not follow its own table's header.
fn cut(text: &str) -> Option<Cut> {
    if text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    let mut cut = Cut {
        pools: Vec::new(),
        policies: Vec::new(),
        rest: String::new(),
        vservers: 0,
    };
    let mut part = Part::Rest;
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let here = at;
        at += line.len();
        if !line.starts_with('[') {
            continue;
        }
        let header = line.split('#').next().unwrap_or("").trim_end();
        let next = match header {
            "[[pool]]" => Part::Pool,
            "[[vserver.policy]]" => Part::Policy(cut.vservers.checked_sub(1)?),
            _ if header.starts_with("[pool.") || header.starts_with("[[pool.") => {
                if part != Part::Pool {
                    return None;
                }
                continue;
            }
            _ if header.starts_with("[vserver.policy.")
                || header.starts_with("[[vserver.policy.") =>
            {
                if !matches!(part, Part::Policy(_)) {
                    return None;
                }
                continue;
            }
            "[[vserver]]" => {
                cut.vservers += 1;
                Part::Rest
            }
            _ => Part::Rest,
        };
        close(&mut cut, part, text, start..here);
        part = next;
        start = here;
    }
    close(&mut cut, part, text, start..text.len());
    Some(cut)
}

fn close(cut: &mut Cut, part: Part, text: &str, r: Range<usize>) {
    match part {
        Part::Rest => cut.rest.push_str(&text[r]),
        Part::Pool => cut.pools.push(r),
        Part::Policy(vs) => cut.policies.push((vs, r)),
    }
}

/// Whether a line of `rest` sets `key` itself (`key = ...`, `key.x = ...`,
/// quoted or not): with parts of that kind too, the whole text would be
/// refused for defining it twice, so it is read whole and refused there.
fn assigns(rest: &str, key: &str) -> bool {
    rest.lines().any(|l| {
        let l = l.trim_start();
        let after = [key.to_string(), format!("\"{key}\""), format!("'{key}'")]
            .into_iter()
            .find_map(|k| l.strip_prefix(k.as_str()).map(str::to_string));
        after.is_some_and(|a| {
            let a = a.trim_start();
            a.starts_with('=') || a.starts_with('.')
        })
    })
}

fn hash(text: &str) -> u64 {
    let mut h = switchyard_fasthash::FxHasher::default();
    text.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model's `Debug` without its spans: a part read alone has its own.
    fn shape(file: &model::File) -> String {
        let re = regex::Regex::new(r"span: \d+\.\.\d+, ").unwrap();
        re.replace_all(&format!("{file:?}"), "").into_owned()
    }

    fn whole(text: &str) -> model::File {
        toml::from_str(text).unwrap()
    }

    fn remembered(text: &str) -> Parts {
        let source: Arc<str> = Arc::from(text);
        remember(&source, &whole(text))
    }

    const TEXT: &str = r#"# head
[global]
workers = 1

[[vserver]]
name = "a"
listen = ["127.0.0.1:1"]
default_pool = "p1"
[[vserver.policy]]
name = "one"
match = { path_prefix = "/one" }
action = { pool = "p1" }
[[vserver.policy]]  # a comment
name = "two"
[vserver.policy.match]
path = "/two"
[vserver.policy.action]
pool = "p2"
[vserver.compression]
gzip_level = 3

[[pool]]
name = "p1"
[[pool.member]]
address = "127.0.0.1:2"
[[pool.member]]
address = "127.0.0.1:3"
[pool.health]
type = "http"
path = "/h"

[[vserver]]
name = "b"
listen = ["127.0.0.1:4"]
default_pool = "p2"
[[vserver.policy]]
name = "three"
action = { pool = "p1" }

[[pool]]
name = "p2"
member = [{ address = "127.0.0.1:5" }]
"#;

    #[test]
    fn a_text_read_by_its_parts_is_the_text_read_whole() {
        // The same text, and the text with one policy and one pool changed
        // (the others reused), each as the whole read gives it.
        let changed = TEXT
            .replace("path = \"/two\"", "path = \"/deux\"")
            .replace("127.0.0.1:5", "127.0.0.1:6");
        let before = remembered(TEXT);
        assert_eq!(before.pools.0.len(), 2);
        assert_eq!(before.policies.0.len(), 3);
        for text in [TEXT.to_string(), changed] {
            let source: Arc<str> = Arc::from(text.as_str());
            let (file, parts) = read(&source, &before).expect("it cuts");
            assert_eq!(shape(&file), shape(&whole(&text)));
            assert_eq!(file.vserver[0].policy.len(), 2);
            assert_eq!(file.vserver[1].policy.len(), 1);
            assert_eq!(parts.len(), 5);
        }
    }

    #[test]
    fn only_what_changed_is_parsed_again() {
        let before = remembered(TEXT);
        let changed = TEXT.replace("path = \"/two\"", "path = \"/deux\"");
        let source: Arc<str> = Arc::from(changed.as_str());
        let (file, _) = read(&source, &before).unwrap();
        let reused = |p: &Arc<model::Policy>| {
            before
                .policies
                .0
                .values()
                .any(|(_, old)| Arc::ptr_eq(old, p))
        };
        assert!(reused(&file.vserver[0].policy[0]));
        assert!(!reused(&file.vserver[0].policy[1]), "the changed one");
        assert!(reused(&file.vserver[1].policy[0]));
        assert!(file.pool.iter().all(|p| before
            .pools
            .0
            .values()
            .any(|(_, old)| Arc::ptr_eq(old, p))));
        // Another pool part of its own text: an entry of its own.
        let twice = format!("{TEXT}[[pool]]\nname = \"p1\"\n");
        let parts = remembered(&twice);
        assert_eq!(parts.pools.0.len(), 3);
    }

    #[test]
    fn a_text_that_does_not_cut_cleanly_is_left_to_the_whole_read() {
        let before = remembered(TEXT);
        let refused = |text: &str| {
            let source: Arc<str> = Arc::from(text);
            read(&source, &before).is_none()
        };
        // A multi-line string could hold a line that looks like a header.
        assert!(refused(&TEXT.replace(
            "name = \"three\"",
            "name = \"\"\"\n[[pool]]\nname = \"x\"\n\"\"\""
        )));
        // A pool's sub-table after a policy (TOML gives it to the last pool).
        assert!(refused(&format!(
            "{TEXT}[[vserver.policy]]\nname = \"four\"\n[pool.tls]\nsni = \"x\"\n"
        )));
        // A policy before any vserver.
        assert!(refused(&format!(
            "[[vserver.policy]]\nname = \"x\"\n{TEXT}"
        )));
        // Pools set by a key, or under a header spelled another way, beside
        // pool parts: the whole read refuses or orders them.
        assert!(refused(&TEXT.replace("# head", "pool = []")));
        assert!(refused(&format!("{TEXT}[[ pool ]]\nname = \"p3\"\n")));
        assert!(refused(&format!(
            "{TEXT}[[ vserver ]]\nname = \"c\"\nlisten = [\"127.0.0.1:7\"]\n"
        )));
        // An indented header inside a part makes it two.
        assert!(refused(&TEXT.replace(
            "[pool.health]",
            "  [[pool]]\nname = \"p9\"\n[pool.health]"
        )));
        // A part that is not valid alone.
        assert!(refused(&TEXT.replace("name = \"three\"", "name = 3")));
        // And the text itself reads.
        assert!(!refused(TEXT));
    }

    /// Through `parse`: a change after a clean read is read by its parts,
    /// and an error in it is still placed as the whole read places it.
    #[test]
    fn a_reread_builds_the_change_and_places_its_errors() {
        let text = TEXT.replace("[global]\nworkers = 1\n", "");
        let first = crate::config::parse("t.toml", &text, None).unwrap();
        assert_eq!(first.parts.len(), 5);
        let changed = text.replace("path = \"/two\"", "path = \"/deux\"");
        let second = crate::config::parse("t.toml", &changed, Some(&first)).unwrap();
        assert_eq!(second.generation, 2);
        assert_eq!(&*second.source, changed.as_str());
        let vs = &second.vservers[0];
        assert_eq!(vs.policies[1].matcher.paths, ["/deux"]);
        // The pools were reused by text: the same models.
        assert!(second.parts.pools.0.values().all(|(_, p)| first
            .parts
            .pools
            .0
            .values()
            .any(|(_, o)| Arc::ptr_eq(o, p))));
        for bad in [
            changed.replace("pool = \"p2\"", "pool = \"nowhere\""),
            changed.replace("name = \"three\"", "name = \"three\"\nbogus = 1"),
            changed.replace("127.0.0.1:5", "nowhere"),
        ] {
            let whole = crate::config::parse("t.toml", &bad, None).unwrap_err();
            let reread = crate::config::parse("t.toml", &bad, Some(&second)).unwrap_err();
            assert_eq!(reread.to_string(), whole.to_string());
            assert!(whole.to_string().starts_with("t.toml:"), "{whole}");
        }
    }

    /// `[cluster]` is read from the text without its parts; a problem in it
    /// is still placed in the whole text.
    #[test]
    fn the_cluster_table_is_read_from_the_rest() {
        let cluster =
            "[cluster]\nendpoints = [\"http://127.0.0.1:2379\"]\nprefix = \"/sy\"\nnode = \"n1\"\n";
        let text = format!("{TEXT}{cluster}");
        let base = std::path::Path::new("/tmp");
        assert_eq!(rest_of(&text).map(|r| r.contains("[cluster]")), Some(true));
        assert!(!rest_of(&text).unwrap_or_default().contains("[[pool]]"));
        let s = crate::config::cluster_settings("t.toml", &text, base)
            .expect("valid")
            .expect("a cluster");
        assert_eq!((s.prefix.as_str(), s.node.as_str()), ("/sy", "n1"));
        let bad = text.replace("prefix = \"/sy\"", "prefix = 5");
        let line = bad.lines().position(|l| l == "prefix = 5").unwrap() + 1;
        let e = crate::config::cluster_settings("t.toml", &bad, base).unwrap_err();
        assert!(e.starts_with(&format!("t.toml:{line}:")), "{e}");
        assert!(crate::config::cluster_settings("t.toml", TEXT, base)
            .expect("valid")
            .is_none());
    }

    /// `PARTS_COST=FILE cargo test --release -p switchyard parts_cost --
    /// --ignored --nocapture`: the time to read FILE whole, then again with
    /// one policy changed, by its parts.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn parts_cost() {
        let Ok(path) = std::env::var("PARTS_COST") else {
            return;
        };
        let text = std::fs::read_to_string(path).unwrap();
        let t = std::time::Instant::now();
        let first = crate::config::parse("t.toml", &text, None).unwrap();
        println!("whole: {:?} ({} parts)", t.elapsed(), first.parts.len());
        let at = text.find("[[vserver.policy]]").unwrap();
        let line = text[at..].find("match = ").unwrap() + at;
        let mut previous = first;
        for i in 0..5 {
            let changed = format!(
                "{}match = {{ path = \"/changed{i}\" }}\n#{}",
                &text[..line],
                &text[line..]
            );
            let t = std::time::Instant::now();
            let next = crate::config::parse("t.toml", &changed, Some(&previous)).unwrap();
            println!("by parts: {:?}", t.elapsed());
            let t = std::time::Instant::now();
            drop(std::mem::replace(&mut previous, next));
            println!("the previous one dropped: {:?}", t.elapsed());
        }
    }
}
