//! A node of a cluster configured from etcd (issue 14).
//!
//! The whole configuration (its vservers, pools, WAF, limits...) is one
//! snapshot under `<prefix>/config`, in an envelope naming the cluster
//! (`{"cluster": "<prefix>", "config": "<TOML>"}`). A node's own file keeps
//! what is node-local: `[cluster]` itself, `[admin]`, `[global]`; the
//! configuration a node runs is its file followed by the published text.
//!
//! - At start the node lists the key (waiting for etcd up to
//!   `startup_wait`), then runs; a watcher thread follows the key from the
//!   next revision. Each new revision is validated and swapped in through
//!   the reload path (`runtime`), on the control thread.
//! - A watch that etcd cancels, or whose revision was compacted away, is
//!   followed by a new list; a broken stream by a back-off and a new list;
//!   a watch silent for `watch_idle` is checked against a read of the key,
//!   so a silently stalled watch is noticed (and replaced) within that time.
//! - Never applied: a deleted or empty key, a revision at or below the one
//!   running, an envelope of another cluster, data from another etcd
//!   cluster than the one first seen (its cluster id is pinned), a text
//!   that sets node-local sections, and anything that fails validation.
//! - Each node writes `{node, applied_revision, generation, error}` under
//!   `<prefix>/status/<node>`, on a lease it keeps alive: a node that dies
//!   disappears from `switchyard ctl cluster status` within the lease's TTL.
//! - Publishing goes through the admin API (`PUT /api/v1/cluster/config`):
//!   validated on the publishing node, written with a compare-and-swap on
//!   the key's revision (`If-Match`), so a stale editor gets 409.

pub mod etcd;
pub mod key;
pub mod members;

use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::log;
use etcd::{Client, WatchEvent};

/// `[cluster]`, validated.
#[derive(Clone, Debug)]
pub struct Settings {
    pub endpoints: Vec<String>,
    /// Key prefix, also the cluster's name in the envelope.
    pub prefix: String,
    pub node: String,
    pub status_ttl_s: u64,
    pub watch_idle: Duration,
    pub startup_wait: Duration,
    /// Where the last applied configuration is kept (last known good).
    pub state_dir: Option<std::path::PathBuf>,
    /// TLS and the user for etcd.
    pub access: Arc<etcd::Access>,
    /// Encrypts the ACME certificate keys published in etcd; without it
    /// each node orders its own (docs/acme.md).
    pub acme_key: Option<key::ClusterKey>,
}

impl Settings {
    pub fn config_key(&self) -> Vec<u8> {
        format!("{}/config", self.prefix).into_bytes()
    }

    pub fn status_prefix(&self) -> Vec<u8> {
        format!("{}/status/", self.prefix).into_bytes()
    }

    fn last_good_path(&self) -> Option<std::path::PathBuf> {
        self.state_dir.as_ref().map(|d| {
            let name: String = self
                .prefix
                .trim_start_matches('/')
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            d.join(format!("last-good-{name}.json"))
        })
    }

    fn status_key(&self) -> Vec<u8> {
        format!("{}/status/{}", self.prefix, self.node).into_bytes()
    }
}

/// A published configuration.
#[derive(Clone, Debug)]
pub struct Published {
    pub revision: i64,
    pub text: String,
}

/// What this node runs and how the last attempt went.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub applied_revision: i64,
    pub generation: u64,
    /// Why the last revision seen was not applied.
    pub error: Option<String>,
    pub error_revision: i64,
}

/// The node: its settings, what it runs, and its state.
pub struct Node {
    pub settings: Settings,
    /// The node's own file (node-local sections).
    pub local_text: String,
    pub local_name: String,
    /// The published configuration running now.
    pub published: Mutex<Option<Published>>,
    pub status: Mutex<Status>,
    /// Members of the pools that take theirs from the cluster
    /// (members.rs), as published under `<prefix>/members/`.
    pub members: Mutex<members::Held>,
    /// The etcd cluster id first seen.
    cluster_id: Mutex<u64>,
}

static NODE: OnceLock<Arc<Node>> = OnceLock::new();

/// The running node, when this process is a cluster node.
pub fn node() -> Option<&'static Arc<Node>> {
    NODE.get()
}

/// A request to apply a revision, answered with the reload's result.
pub type Apply = (Published, mpsc::Sender<Result<u64, String>>);

/// The envelope's text, checked: this cluster's, not empty, no node-local
/// section.
pub fn open_envelope(settings: &Settings, value: &[u8]) -> Result<String, String> {
    let v: Value = serde_json::from_slice(value)
        .map_err(|e| format!("the published value is not a configuration envelope: {e}"))?;
    let cluster = v["cluster"].as_str().unwrap_or("");
    if cluster != settings.prefix {
        return Err(format!(
            "the published configuration belongs to cluster {cluster:?}, not {:?}",
            settings.prefix
        ));
    }
    let text = match (v["config"].as_str(), v["config_zstd"].as_str()) {
        (Some(t), _) => t.to_string(),
        (None, Some(z)) => unpack(z)?,
        (None, None) => String::new(),
    };
    check_not_empty(&text)?;
    Ok(text)
}

/// Texts longer than this are published compressed (`config_zstd`);
/// shorter ones stay readable with `etcdctl get`.
const PACK_ABOVE: usize = 64 << 10;

/// The longest text a compressed envelope may unpack to (a config of
/// 10,000 routes is 3.4 MB).
const UNPACK_LIMIT: u64 = 256 << 20;

/// Why: a controller's 10,000 routes are 3.4 MB of text, which went to
/// etcd and to every node as JSON in base64 in JSON (4.5 MB), on each
/// route change: etcd's gateway encoding it for the watch, its WAL and
/// database writing it, the publisher reading it back. zstd (level 3)
/// makes it 54 KB in about 10 ms; unpacking takes a few.
fn pack(text: &str) -> String {
    match zstd::bulk::compress(text.as_bytes(), 3) {
        Ok(z) => crate::base64::encode(&z),
        // Not expected (memory); the plain envelope is always valid.
        Err(_) => String::new(),
    }
}

fn unpack(z: &str) -> Result<String, String> {
    use std::io::Read;
    let bad =
        |e: &dyn std::fmt::Display| format!("the published configuration cannot be unpacked: {e}");
    let bytes = crate::base64::decode(z).ok_or_else(|| bad(&"not base64"))?;
    let d = zstd::stream::read::Decoder::new(&bytes[..]).map_err(|e| bad(&e))?;
    let mut text = String::new();
    d.take(UNPACK_LIMIT + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(&e))?;
    if text.len() as u64 > UNPACK_LIMIT {
        return Err(bad(&format!("longer than {UNPACK_LIMIT} bytes")));
    }
    Ok(text)
}

/// A published text is never empty (blank or comments only). What it
/// sets is checked where it is parsed, once
/// (`config::publish::parse_published`).
pub fn check_not_empty(text: &str) -> Result<(), String> {
    let blank = text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#')
    });
    if blank {
        return Err(
            "the published configuration is empty; an empty configuration is never applied".into(),
        );
    }
    Ok(())
}

/// The value published: `{"cluster": PREFIX, "config": TEXT}`, or with
/// `config_zstd` (base64 of the text compressed) for a long text. Nodes
/// read both; a node older than the compressed form refuses it and keeps
/// running what it has (upgrade the nodes before the publishers).
pub fn envelope(settings: &Settings, text: &str) -> Vec<u8> {
    let packed = if text.len() > PACK_ABOVE {
        pack(text)
    } else {
        String::new()
    };
    if packed.is_empty() {
        json!({"cluster": settings.prefix, "config": text})
    } else {
        json!({"cluster": settings.prefix, "config_zstd": packed})
    }
    .to_string()
    .into_bytes()
}

impl Node {
    /// A node that runs nothing (to check a node's file).
    pub fn detached(settings: Settings, local_name: &str, local_text: &str) -> Node {
        Node {
            settings,
            local_text: local_text.to_string(),
            local_name: local_name.to_string(),
            published: Mutex::new(None),
            status: Mutex::new(Status::default()),
            members: Mutex::new(members::Held::default()),
            cluster_id: Mutex::new(0),
        }
    }

    /// The configuration text this node runs: its file, then the
    /// published configuration.
    pub fn combined(&self, published: &str) -> String {
        format!(
            "{}\n# ---- published configuration ({}) ----\n{published}",
            self.local_text,
            String::from_utf8_lossy(&self.settings.config_key())
        )
    }

    fn pin(&self, cluster_id: u64) -> Result<(), String> {
        let mut pinned = self.cluster_id.lock().unwrap_or_else(|e| e.into_inner());
        if *pinned == 0 {
            *pinned = cluster_id;
        } else if cluster_id != 0 && *pinned != cluster_id {
            return Err(format!(
                "etcd answered as cluster {cluster_id:x}, not {:x} as before: another etcd cluster's data is never applied",
                *pinned
            ));
        }
        Ok(())
    }

    /// The configuration generation this node runs now: reported from
    /// its start, and after every reload (a published revision, SIGHUP,
    /// the admin API), so `cluster status` never shows a generation the
    /// node left behind.
    pub fn running(&self, generation: u64) {
        self.report(|s| s.generation = generation);
    }

    fn report(&self, f: impl FnOnce(&mut Status)) {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s);
    }

    fn applied(&self) -> i64 {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |p| p.revision)
    }

    /// This node's status as JSON.
    pub fn status_json(&self) -> Value {
        let s = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        json!({
            "node": self.settings.node,
            "applied_revision": s.applied_revision,
            "generation": s.generation,
            "error": s.error,
            "error_revision": s.error_revision,
        })
    }
}

/// Writes the applied configuration to local disk, atomically (a
/// temporary file renamed over the old one), so a node restarted while
/// etcd is away starts from it.
fn save_last_good(s: &Settings, p: &Published) {
    let Some(path) = s.last_good_path() else {
        return;
    };
    let body = json!({"cluster": s.prefix, "revision": p.revision, "config": p.text}).to_string();
    let tmp = path.with_extension("json.tmp");
    let r = (|| -> std::io::Result<()> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, body.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = r {
        log::warn(format_args!(
            "cluster {:?}: cannot keep the last known good configuration in {}: {e}",
            s.prefix,
            path.display()
        ));
    }
}

/// The last known good configuration, when there is one of this cluster.
fn load_last_good(s: &Settings) -> Option<Published> {
    let path = s.last_good_path()?;
    let v: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    if v["cluster"].as_str() != Some(s.prefix.as_str()) {
        return None;
    }
    let text = v["config"].as_str()?.to_string();
    check_not_empty(&text).ok()?;
    Some(Published {
        revision: v["revision"].as_i64()?,
        text,
    })
}

/// Starts a node for `settings`: waits (up to `startup_wait`) for the
/// published configuration. The node is then `node()`.
pub fn start(settings: Settings, local_name: &str, local_text: &str) -> Result<Arc<Node>, String> {
    let node = Arc::new(Node::detached(settings, local_name, local_text));
    let s = &node.settings;
    let mut client = Client::new(&s.endpoints, s.access.clone());
    let began = Instant::now();
    let last_good = load_last_good(s);
    loop {
        let last_err = match client.get(&s.config_key()) {
            Ok((h, Some(kv))) => {
                node.pin(h.cluster_id)?;
                let text = open_envelope(s, &kv.value)?;
                sync_files(s)?;
                members::sync(&node)?;
                let p = Published {
                    revision: kv.mod_revision,
                    text,
                };
                save_last_good(s, &p);
                *node.published.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
                node.report(|st| st.applied_revision = kv.mod_revision);
                break;
            }
            Ok((_, None)) => format!(
                "nothing is published under {} yet",
                String::from_utf8_lossy(&s.config_key())
            ),
            Err(e) => e.to_string(),
        };
        // etcd away (or empty): the last known good configuration serves
        // at once; the watcher catches up when etcd is back.
        if let Some(p) = &last_good {
            log::warn(format_args!(
                "cluster {:?}: {last_err}; starting from the last known good configuration (revision {})",
                s.prefix, p.revision
            ));
            node.report(|st| {
                st.applied_revision = p.revision;
                st.error = Some(format!(
                    "started from the last known good configuration: {last_err}"
                ));
                st.error_revision = p.revision;
            });
            *node.published.lock().unwrap_or_else(|e| e.into_inner()) = Some(p.clone());
            break;
        }
        if began.elapsed() >= s.startup_wait {
            return Err(format!(
                "cluster {:?}: no configuration to run after {:?}: {last_err}",
                s.prefix, s.startup_wait
            ));
        }
        log::warn(format_args!("cluster {:?}: {last_err}; waiting", s.prefix));
        std::thread::sleep(Duration::from_millis(500));
    }
    NODE.set(node.clone())
        .map_err(|_| "a cluster node is already running".to_string())?;
    Ok(node)
}

/// Follows the key on a thread of its own; every revision to apply goes
/// to `apply` (the control thread), whose answer is reported in etcd.
pub fn follow(node: Arc<Node>, apply: tokio::sync::mpsc::UnboundedSender<Apply>) {
    let n = node.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-watch".into())
        .spawn(move || watch_loop(&n, &apply));
    let _ = std::thread::Builder::new()
        .name("cluster-status".into())
        .spawn(move || status_loop(&node));
}

/// Applies `p` through the control thread; the status follows.
fn apply_revision(node: &Node, p: Published, apply: &tokio::sync::mpsc::UnboundedSender<Apply>) {
    let rev = p.revision;
    if rev <= node.applied() {
        return;
    }
    let began = std::time::Instant::now();
    // The files it names first: a configuration never runs with another
    // revision's certificates.
    if let Err(e) = sync_files(&node.settings) {
        refuse(node, rev, e);
        return;
    }
    // And the members of the pools it names that take them from the
    // cluster (members.rs).
    if let Err(e) = members::sync(node) {
        refuse(node, rev, e);
        return;
    }
    let synced = began.elapsed();
    let (tx, rx) = mpsc::channel();
    if apply.send((p, tx)).is_err() {
        return;
    }
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(generation)) => {
            let live = began.elapsed();
            if let Some(p) = node
                .published
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                save_last_good(&node.settings, p);
            }
            // Where a revision's time goes (BENCHMARKS.md, propagation):
            // the files and member sets read from etcd, then the reload.
            log::info(format_args!(
                "cluster {:?}: revision {rev} applied (configuration generation {generation}; files and members read in {} ms, live {} ms later)",
                node.settings.prefix,
                synced.as_millis(),
                (live - synced).as_millis()
            ));
            node.report(|s| {
                s.applied_revision = rev;
                s.generation = generation;
                s.error = None;
                s.error_revision = 0;
            });
        }
        Ok(Err(e)) => refuse(node, rev, e),
        Err(_) => refuse(node, rev, "the reload did not answer".into()),
    }
}

fn refuse(node: &Node, rev: i64, why: String) {
    log::error(format_args!(
        "cluster {:?}: revision {rev} not applied, the running configuration stays: {why}",
        node.settings.prefix
    ));
    node.report(|s| {
        s.error = Some(why);
        s.error_revision = rev;
    });
}

fn watch_loop(node: &Node, apply: &tokio::sync::mpsc::UnboundedSender<Apply>) {
    let s = &node.settings;
    let key = s.config_key();
    let mut client = Client::new(&s.endpoints, s.access.clone());
    let mut backoff = Duration::from_millis(200);
    loop {
        if apply.is_closed() {
            return;
        }
        // List: the key as it is now.
        let from = match client.get(&key) {
            Ok((h, kv)) => {
                if let Err(e) = node.pin(h.cluster_id) {
                    refuse(node, h.revision, e);
                    back_off(&mut backoff);
                    continue;
                }
                backoff = Duration::from_millis(200);
                match kv {
                    Some(kv) if kv.mod_revision > node.applied() => {
                        match open_envelope(s, &kv.value) {
                            Ok(text) => apply_revision(
                                node,
                                Published {
                                    revision: kv.mod_revision,
                                    text,
                                },
                                apply,
                            ),
                            Err(e) => refuse(node, kv.mod_revision, e),
                        }
                    }
                    Some(_) => {}
                    None => refuse(
                        node,
                        h.revision,
                        "the published configuration was deleted; the running one stays".into(),
                    ),
                }
                h.revision + 1
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
        let mut w = match client.watch(&key, from, s.watch_idle) {
            Ok(w) => w,
            Err(e) => {
                log::warn(format_args!("cluster {:?}: watch: {e}", s.prefix));
                back_off(&mut backoff);
                continue;
            }
        };
        loop {
            match w.next_event() {
                Ok(WatchEvent::Created) | Ok(WatchEvent::Progress(_)) => {}
                Ok(WatchEvent::Changes(h, changes)) => {
                    if let Err(e) = node.pin(h.cluster_id) {
                        refuse(node, h.revision, e);
                        break;
                    }
                    // The last change is the one that counts.
                    match changes.into_iter().last() {
                        Some((rev, Some(kv))) => match open_envelope(s, &kv.value) {
                            Ok(text) => apply_revision(
                                node,
                                Published {
                                    revision: rev,
                                    text,
                                },
                                apply,
                            ),
                            Err(e) => refuse(node, rev, e),
                        },
                        Some((rev, None)) => refuse(
                            node,
                            rev,
                            "the published configuration was deleted; the running one stays".into(),
                        ),
                        None => {}
                    }
                }
                Ok(WatchEvent::Compacted(rev)) => {
                    log::warn(format_args!(
                        "cluster {:?}: watch revision compacted (now {rev}); listing again",
                        s.prefix
                    ));
                    break;
                }
                Ok(WatchEvent::Canceled(why)) => {
                    log::warn(format_args!(
                        "cluster {:?}: watch canceled ({why}); listing again",
                        s.prefix
                    ));
                    break;
                }
                Err(e) => {
                    // Silent for watch_idle, or broken: list again (which
                    // applies what a stalled watch missed) and watch anew.
                    log::debug(format_args!(
                        "cluster {:?}: watch: {e}; listing again",
                        s.prefix
                    ));
                    break;
                }
            }
        }
    }
}

fn status_loop(node: &Node) {
    let s = &node.settings;
    let mut client = Client::new(&s.endpoints, s.access.clone());
    let mut lease = 0i64;
    let mut written = String::new();
    loop {
        let body = node.status_json().to_string();
        let result = (|| -> Result<(), etcd::Error> {
            if lease == 0 || !client.keep_alive(lease)? {
                lease = client.grant(s.status_ttl_s)?;
                written.clear();
            }
            if body != written {
                client.put(&s.status_key(), body.as_bytes(), lease)?;
                written = body.clone();
            }
            Ok(())
        })();
        if let Err(e) = result {
            log::debug(format_args!("cluster {:?}: status: {e}", s.prefix));
            lease = 0;
        }
        std::thread::sleep(Duration::from_millis(
            (s.status_ttl_s * 1000 / 4).clamp(200, 2000),
        ));
    }
}

fn files_prefix(settings: &Settings) -> Vec<u8> {
    format!("{}/files/", settings.prefix).into_bytes()
}

/// A file name the cluster may carry: one path segment, no dot first.
pub fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
}

/// Writes every file published under `<prefix>/files/` into
/// `<state_dir>/files/`, each atomically and readable by the owner only
/// (`private_file`), before a revision that may name them is applied.
pub fn sync_files(s: &Settings) -> Result<(), String> {
    let Some(dir) = s.state_dir.as_ref().map(|d| d.join("files")) else {
        return Ok(());
    };
    let mut c = Client::new(&s.endpoints, s.access.clone());
    let (_, kvs) = c
        .list(&files_prefix(s))
        .map_err(|e| format!("cannot read the published files: {e}"))?;
    if kvs.is_empty() {
        return Ok(());
    }
    let prefix_len = files_prefix(s).len();
    for kv in kvs {
        let name = String::from_utf8_lossy(&kv.key[prefix_len..]).into_owned();
        if !valid_file_name(&name) {
            continue;
        }
        let path = dir.join(&name);
        if std::fs::read(&path).is_ok_and(|old| old == kv.value) {
            continue;
        }
        // Owner-only (keys among them), through a temporary file of this
        // writer's own: the watch and an admin request may both be here.
        crate::private_file::write(&path, &kv.value)?;
    }
    Ok(())
}

/// Publishes a file (a certificate, a key, a rule file) for the nodes, then
/// the configuration again (same text, new revision), so every node writes
/// it and reloads.
pub fn publish_file(settings: &Settings, name: &str, data: &[u8]) -> Result<i64, String> {
    if !valid_file_name(name) {
        return Err(format!(
            "file name {name:?}: letters, digits, '.', '_' and '-' only, not starting with '.'"
        ));
    }
    let mut c = Client::new(&settings.endpoints, settings.access.clone());
    let mut key = files_prefix(settings);
    key.extend_from_slice(name.as_bytes());
    c.put(&key, data, 0).map_err(|e| e.to_string())?;
    let (_, kv) = c.get(&settings.config_key()).map_err(|e| e.to_string())?;
    let Some(kv) = kv else {
        return Err("the file is stored; nothing is published yet to use it".into());
    };
    match c
        .compare_and_put(&settings.config_key(), &kv.value, kv.mod_revision)
        .map_err(|e| e.to_string())?
    {
        Some(rev) => Ok(rev),
        None => Err("the configuration changed meanwhile; the file is stored and the next revision brings it".into()),
    }
}

/// Purges a node applies for the others: `(how, url)` with how "url" or
/// "prefix"; answers how many objects went.
pub type Purger = Box<dyn Fn(&str, &str) -> usize + Send>;

fn purge_prefix_key(settings: &Settings) -> Vec<u8> {
    format!("{}/purge/", settings.prefix).into_bytes()
}

/// Tells the other nodes to purge: a key under `<prefix>/purge/` on a lease
/// of a minute (etcd forgets it by itself).
pub fn publish_purge(settings: &Settings, how: &str, url: &str) -> Result<(), String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut c = Client::new(&settings.endpoints, settings.access.clone());
    let lease = c.grant(60).map_err(|e| e.to_string())?;
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let key = format!("{}/purge/{}-{stamp}-{n}", settings.prefix, settings.node);
    let value = json!({"node": settings.node, "how": how, "url": url}).to_string();
    c.put(key.as_bytes(), value.as_bytes(), lease)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Applies the purges other nodes publish, from start on.
pub fn follow_purges(node: Arc<Node>, purge: Purger) {
    let _ = std::thread::Builder::new()
        .name("cluster-purge".into())
        .spawn(move || purge_loop(&node, &purge));
}

fn purge_loop(node: &Node, purge: &Purger) {
    let s = &node.settings;
    let prefix = purge_prefix_key(s);
    let mut client = Client::new(&s.endpoints, s.access.clone());
    // Keys seen (applied or already there at start): never applied twice.
    let mut seen: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    let mut first = true;
    let mut backoff = Duration::from_millis(200);
    loop {
        let from = match client.list(&prefix) {
            Ok((h, kvs)) => {
                let present: std::collections::HashSet<Vec<u8>> =
                    kvs.iter().map(|kv| kv.key.clone()).collect();
                for kv in kvs {
                    // Purges from before this node started concern a
                    // cache it did not have.
                    if !first && !seen.contains(&kv.key) {
                        apply_purge(node, purge, &kv.value);
                    }
                    seen.insert(kv.key);
                }
                seen.retain(|k| present.contains(k));
                first = false;
                backoff = Duration::from_millis(200);
                h.revision + 1
            }
            Err(e) => {
                log::debug(format_args!("cluster {:?}: purges: {e}", s.prefix));
                back_off(&mut backoff);
                continue;
            }
        };
        let mut w = match client.watch_prefix(&prefix, from, s.watch_idle) {
            Ok(w) => w,
            Err(_) => {
                std::thread::sleep(backoff);
                continue;
            }
        };
        while let Ok(ev) = w.next_event() {
            match ev {
                WatchEvent::Changes(_, changes) => {
                    for (_, kv) in changes {
                        if let Some(kv) = kv {
                            if seen.insert(kv.key.clone()) {
                                apply_purge(node, purge, &kv.value);
                            }
                        }
                    }
                }
                WatchEvent::Compacted(_) | WatchEvent::Canceled(_) => break,
                WatchEvent::Created | WatchEvent::Progress(_) => {}
            }
        }
    }
}

fn apply_purge(node: &Node, purge: &Purger, value: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(value) else {
        return;
    };
    let from = v["node"].as_str().unwrap_or("");
    if from == node.settings.node {
        return;
    }
    let (Some(how), Some(url)) = (v["how"].as_str(), v["url"].as_str()) else {
        return;
    };
    if !matches!(how, "url" | "prefix") {
        return;
    }
    let n = purge(how, url);
    log::info(format_args!(
        "cluster {:?}: cache purge {how} {url} from node {from}: {n} removed",
        node.settings.prefix
    ));
}

/// Every node's status, from etcd.
pub fn statuses(settings: &Settings) -> Result<Vec<Value>, String> {
    let mut c = Client::new(&settings.endpoints, settings.access.clone());
    let (_, kvs) = c
        .list(&settings.status_prefix())
        .map_err(|e| e.to_string())?;
    Ok(kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect())
}

/// The published configuration and its revision (0: none).
pub fn published(settings: &Settings) -> Result<(i64, Option<String>), String> {
    let mut c = Client::new(&settings.endpoints, settings.access.clone());
    let (_, kv) = c.get(&settings.config_key()).map_err(|e| e.to_string())?;
    Ok(match kv {
        Some(kv) => (kv.mod_revision, open_envelope(settings, &kv.value).ok()),
        None => (0, None),
    })
}

/// Writes `text` if the key's revision is still `expect` (None: whatever
/// it is now). Ok(Some(rev)): written; Ok(None): stale. Every caller has
/// checked `text` first (`config::publish::check`: parsed and built as the
/// nodes will); this only refuses an empty one, without parsing it again.
pub fn publish(
    settings: &Settings,
    text: &str,
    expect: Option<i64>,
) -> Result<Option<i64>, String> {
    check_not_empty(text)?;
    let mut c = Client::new(&settings.endpoints, settings.access.clone());
    let expect = match expect {
        Some(r) => r,
        None => {
            c.revision_of(&settings.config_key())
                .map_err(|e| e.to_string())?
                .1
        }
    };
    c.compare_and_put(&settings.config_key(), &envelope(settings, text), expect)
        .map_err(|e| e.to_string())
}

/// Waits `backoff` after a failed etcd call, then doubles it for the next
/// failure, up to 10 s (every watch thread of the node backs off alike).
pub(crate) fn back_off(backoff: &mut Duration) {
    std::thread::sleep(*backoff);
    *backoff = (*backoff * 2).min(Duration::from_secs(10));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            endpoints: vec![],
            prefix: "/sy/prod".into(),
            node: "n1".into(),
            status_ttl_s: 5,
            watch_idle: Duration::from_secs(5),
            startup_wait: Duration::from_secs(1),
            state_dir: None,
            access: Arc::default(),
            acme_key: None,
        }
    }

    #[test]
    fn envelopes_of_other_clusters_empty_or_node_local_texts_are_refused() {
        let s = settings();
        let ok = envelope(&s, "[[pool]]\nname = \"p\"\n");
        assert!(open_envelope(&s, &ok).is_ok());
        let other = Settings {
            prefix: "/sy/staging".into(),
            ..settings()
        };
        let e = open_envelope(&s, &envelope(&other, "[[pool]]\nname = \"p\"\n")).unwrap_err();
        assert!(e.contains("/sy/staging"), "{e}");
        assert!(open_envelope(&s, &envelope(&s, ""))
            .unwrap_err()
            .contains("empty"));
        assert!(open_envelope(&s, &envelope(&s, "# a comment\n\n  \n"))
            .unwrap_err()
            .contains("empty"));
        assert!(open_envelope(&s, b"not json").is_err());
    }

    #[test]
    fn long_texts_are_published_compressed_and_read_back_whole() {
        let s = settings();
        let short = "[[pool]]\nname = \"p\"\n";
        assert!(String::from_utf8_lossy(&envelope(&s, short)).contains("\"config\""));
        let long: String = (0..2_000)
            .map(|i| {
                format!("[[pool]]\nname = \"p{i}\"\n[[pool.member]]\naddress = \"10.0.0.1:80\"\n")
            })
            .collect();
        let packed = envelope(&s, &long);
        let v: Value = serde_json::from_slice(&packed).unwrap();
        assert!(v["config"].is_null() && v["config_zstd"].is_string());
        assert!(packed.len() * 10 < long.len(), "{} bytes", packed.len());
        assert_eq!(open_envelope(&s, &packed).unwrap(), long);
        // Another cluster's, or not zstd: refused with a reason.
        let other = Settings {
            prefix: "/sy/staging".into(),
            ..settings()
        };
        assert!(open_envelope(&s, &envelope(&other, &long)).is_err());
        let bad = json!({"cluster": s.prefix, "config_zstd": "bm90IHpzdGQ="}).to_string();
        let e = open_envelope(&s, bad.as_bytes()).unwrap_err();
        assert!(e.contains("cannot be unpacked"), "{e}");
    }
}
