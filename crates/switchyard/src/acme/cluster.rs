//! ACME in a cluster (docs/acme.md, "Clusters"): exactly one node orders a
//! given certificate, and every node serves it and answers its challenges.
//!
//! Keys, under the cluster's prefix:
//! - `acme/locks/ID`: held by the node ordering certificate ID, on a lease
//!   it keeps alive while it orders (TTL `LOCK_TTL`): released at the end,
//!   or gone with the lease when that node dies, so another takes over.
//! - `acme/certs/ID`: the newest certificate, `{chain, key, not_after,
//!   node}`, its key sealed with AES-256-GCM under the operator's cluster
//!   key (`[cluster] acme_key_file`), the etcd key name as associated data
//!   (a value copied under another name does not open). etcd holds no
//!   private key in clear.
//! - `acme/http-01/TOKEN` (the key authorization) and
//!   `acme/tls-alpn-01/NAME` (the SHA-256 digest, hex; each node makes its
//!   own validation certificate from it): on the lock's lease, so a dead
//!   node's answers go with it. A load balancer may send the CA's check
//!   to any node; every node answers it.
//!
//! One watcher thread per process follows `acme/` and applies what it
//! sees: a newer certificate is installed (and written to the state_dir,
//! the last known good for a start with etcd down), the challenge
//! answers set and removed. Everything here blocks: it runs on the ACME
//! threads, never on a worker.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use serde_json::{json, Value};

use super::{challenge, Managed};
use crate::cluster::etcd::{Client, WatchEvent};
use crate::cluster::key::ClusterKey;
use crate::cluster::Settings;
use crate::log;

/// The order lock's lease: a node that dies mid-order holds it this long
/// at most.
const LOCK_TTL: u64 = 10;

fn aead(key: &ClusterKey) -> Result<LessSafeKey, String> {
    UnboundKey::new(&AES_256_GCM, key.bytes())
        .map(LessSafeKey::new)
        .map_err(|_| "cluster key rejected".to_string())
}

/// nonce || ciphertext || tag.
fn seal(key: &ClusterKey, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, String> {
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).map_err(|_| "no randomness")?;
    let mut data = plain.to_vec();
    aead(key)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut data,
        )
        .map_err(|_| "sealing failed")?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&data);
    Ok(out)
}

fn open(key: &ClusterKey, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, String> {
    if sealed.len() < NONCE_LEN {
        return Err("sealed key too short".into());
    }
    let (nonce, data) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "bad nonce")?;
    let mut data = data.to_vec();
    let plain = aead(key)?
        .open_in_place(nonce, Aad::from(aad), &mut data)
        .map_err(|_| {
            "the certificate key does not open with this node's acme_key_file (another cluster key?)"
        })?;
    Ok(plain.to_vec())
}

/// A certificate as published: its chain and key, PEM.
type Pems = (Vec<u8>, Vec<u8>);

/// This node's view of the cluster for ACME: None when the process is no
/// cluster node, or has no `acme_key_file` (each node then orders its own).
pub struct Shared {
    settings: Settings,
    key: ClusterKey,
}

pub fn shared() -> Option<Shared> {
    let node = crate::cluster::node()?;
    let key = node.settings.acme_key.clone()?;
    Some(Shared {
        settings: node.settings.clone(),
        key,
    })
}

/// Whether this process is a cluster node without a cluster key (logged
/// once per certificate: its nodes order separately).
pub fn uncoordinated() -> bool {
    crate::cluster::node().is_some_and(|n| n.settings.acme_key.is_none())
}

/// The order lock of one certificate, kept alive on a thread of its own
/// until dropped (which releases it).
pub struct Lock {
    settings: Settings,
    pub lease: i64,
    stop: Arc<AtomicBool>,
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The lock and the challenge answers on its lease go at once.
        let mut c = Client::new(&self.settings.endpoints, self.settings.access.clone());
        let _ = c.revoke(self.lease);
    }
}

impl Shared {
    fn client(&self) -> Client {
        Client::new(&self.settings.endpoints, self.settings.access.clone())
    }

    fn key_of(&self, kind: &str, name: &str) -> String {
        format!("{}/acme/{kind}/{name}", self.settings.prefix)
    }

    /// Takes the order lock of `m`; Ok(None) when another node holds it.
    pub fn try_lock(&self, m: &Managed) -> Result<Option<Lock>, String> {
        let mut c = self.client();
        let lease = c.grant(LOCK_TTL).map_err(|e| e.to_string())?;
        let key = self.key_of("locks", m.id());
        let taken = c
            .create(key.as_bytes(), self.settings.node.as_bytes(), lease)
            .map_err(|e| e.to_string())?;
        if !taken {
            let _ = c.revoke(lease);
            return Ok(None);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, settings) = (stop.clone(), self.settings.clone());
        let id = m.id().to_string();
        let _ = std::thread::Builder::new()
            .name("acme-lock".into())
            .spawn(move || {
                let mut c = Client::new(&settings.endpoints, settings.access.clone());
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(LOCK_TTL * 1000 / 4));
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(false) = c.keep_alive(lease) {
                        log::warn(format_args!(
                            "acme {id}: the order lock's lease expired (etcd away too long): another node may order too"
                        ));
                        break;
                    }
                }
            });
        Ok(Some(Lock {
            settings: self.settings.clone(),
            lease,
            stop,
        }))
    }

    /// Who holds the order lock of `m`, if anyone.
    pub fn holder(&self, m: &Managed) -> Option<String> {
        let (_, kv) = self
            .client()
            .get(self.key_of("locks", m.id()).as_bytes())
            .ok()?;
        kv.map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
    }

    /// Publishes an HTTP-01 or TLS-ALPN-01 answer on the lock's lease.
    pub fn put_answer(
        &self,
        lock: &Lock,
        kind: &str,
        name: &str,
        value: &str,
    ) -> Result<(), String> {
        self.client()
            .put(
                self.key_of(kind, name).as_bytes(),
                value.as_bytes(),
                lock.lease,
            )
            .map(|_| ())
            .map_err(|e| format!("publishing the {kind} answer in etcd: {e}"))
    }

    /// The certificate published for `m` (chain PEM, key PEM), if any.
    pub fn fetch(&self, m: &Managed) -> Result<Option<Pems>, String> {
        let key = self.key_of("certs", m.id());
        let (_, kv) = self
            .client()
            .get(key.as_bytes())
            .map_err(|e| e.to_string())?;
        match kv {
            Some(kv) => self.decode(&key, &kv.value).map(Some),
            None => Ok(None),
        }
    }

    fn decode(&self, key: &str, value: &[u8]) -> Result<Pems, String> {
        let v: Value = serde_json::from_slice(value).map_err(|e| format!("{key}: {e}"))?;
        let chain = v["chain"]
            .as_str()
            .ok_or_else(|| format!("{key}: no chain"))?;
        let sealed = v["key"]
            .as_str()
            .and_then(crate::base64::decode)
            .ok_or_else(|| format!("{key}: no key"))?;
        let pem = open(&self.key, key.as_bytes(), &sealed).map_err(|e| format!("{key}: {e}"))?;
        Ok((chain.as_bytes().to_vec(), pem))
    }

    fn account_key(&self, directory: &str) -> String {
        let name: String = directory
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.key_of("accounts", &name)
    }

    /// The cluster's account at `directory` (its credentials JSON), if a
    /// node published one: every node orders with it, so that a renewal
    /// by any node may name the certificate it replaces (a CA accepts
    /// that from the account that ordered it only).
    pub fn fetch_account(&self, directory: &str) -> Result<Option<Vec<u8>>, String> {
        let key = self.account_key(directory);
        let (_, kv) = self
            .client()
            .get(key.as_bytes())
            .map_err(|e| e.to_string())?;
        let Some(kv) = kv else { return Ok(None) };
        let sealed = crate::base64::decode(&String::from_utf8_lossy(&kv.value))
            .ok_or_else(|| format!("{key}: not base64"))?;
        open(&self.key, key.as_bytes(), &sealed)
            .map(Some)
            .map_err(|e| format!("{key}: {e}"))
    }

    /// Publishes the account, unless one is there already (the first
    /// node's stays).
    pub fn publish_account(&self, directory: &str, creds: &[u8]) -> Result<(), String> {
        let key = self.account_key(directory);
        let sealed = seal(&self.key, key.as_bytes(), creds)?;
        self.client()
            .create(key.as_bytes(), crate::base64::encode(&sealed).as_bytes(), 0)
            .map(|_| ())
            .map_err(|e| format!("publishing the account in etcd: {e}"))
    }

    /// Publishes a new certificate for every node.
    pub fn publish(
        &self,
        m: &Managed,
        chain: &str,
        key_pem: &str,
        not_after: i64,
    ) -> Result<(), String> {
        let key = self.key_of("certs", m.id());
        let sealed = seal(&self.key, key.as_bytes(), key_pem.as_bytes())?;
        let value = json!({
            "chain": chain,
            "key": crate::base64::encode(&sealed),
            "not_after": not_after,
            "node": self.settings.node,
        })
        .to_string();
        self.client()
            .put(key.as_bytes(), value.as_bytes(), 0)
            .map(|_| ())
            .map_err(|e| format!("publishing the certificate in etcd: {e}"))
    }
}

/// Starts the watcher (once per process).
pub fn watch() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let Some(shared) = shared() else { return };
        let _ = std::thread::Builder::new()
            .name("acme-cluster".into())
            .spawn(move || watch_loop(&shared));
    });
}

/// What the watcher set from etcd, to take back what etcd no longer has.
#[derive(Default)]
struct Applied {
    http01: HashSet<String>,
    alpn01: HashSet<String>,
}

fn watch_loop(s: &Shared) {
    let prefix = format!("{}/acme/", s.settings.prefix);
    let mut client = s.client();
    let mut applied = Applied::default();
    let mut backoff = Duration::from_millis(200);
    loop {
        let from = match client.list(prefix.as_bytes()) {
            Ok((h, kvs)) => {
                let mut seen = Applied::default();
                for kv in &kvs {
                    apply(s, &prefix, &kv.key, &kv.value, &mut seen);
                }
                for t in applied.http01.difference(&seen.http01) {
                    challenge::set_http01(t, None);
                }
                for n in applied.alpn01.difference(&seen.alpn01) {
                    challenge::set_alpn01(n, None);
                }
                applied = seen;
                backoff = Duration::from_millis(200);
                h.revision + 1
            }
            Err(e) => {
                log::debug(format_args!("acme: cluster watch: {e}"));
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        let mut w = match client.watch_prefix(prefix.as_bytes(), from, s.settings.watch_idle) {
            Ok(w) => w,
            Err(e) => {
                log::debug(format_args!("acme: cluster watch: {e}"));
                std::thread::sleep(backoff);
                continue;
            }
        };
        loop {
            let ev = match w.next_event() {
                Ok(ev) => ev,
                // Silent past watch_idle, or broken: list again.
                Err(e) => {
                    log::debug(format_args!("acme: cluster watch: {e}"));
                    break;
                }
            };
            match ev {
                WatchEvent::Changes(_, changes) => {
                    // A delete names no key: list again, which takes
                    // back what is gone.
                    if changes.iter().any(|(_, kv)| kv.is_none()) {
                        break;
                    }
                    for kv in changes.into_iter().filter_map(|(_, kv)| kv) {
                        apply(s, &prefix, &kv.key, &kv.value, &mut applied);
                    }
                }
                WatchEvent::Compacted(_) | WatchEvent::Canceled(_) => break,
                WatchEvent::Created | WatchEvent::Progress(_) => {}
            }
        }
    }
}

fn apply(s: &Shared, prefix: &str, key: &[u8], value: &[u8], applied: &mut Applied) {
    let Some(rest) = std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.strip_prefix(prefix))
    else {
        return;
    };
    let Some((kind, name)) = rest.split_once('/') else {
        return;
    };
    match kind {
        "certs" => {
            let Some(m) = super::all().into_iter().find(|m| m.id() == name) else {
                return;
            };
            let key = String::from_utf8_lossy(key);
            match s.decode(&key, value) {
                Ok((chain, pem)) => {
                    if let Err(e) = super::store::adopt(&m, &chain, &pem) {
                        log::warn(format_args!(
                            "acme {name}: published certificate not used: {e}"
                        ));
                    }
                }
                Err(e) => log::warn(format_args!("acme {name}: {e}")),
            }
        }
        "http-01" => {
            if let Ok(v) = std::str::from_utf8(value) {
                challenge::set_http01(name, Some(v));
                applied.http01.insert(name.to_string());
            }
        }
        "tls-alpn-01" => {
            let digest: Option<Vec<u8>> = value
                .chunks(2)
                .map(|p| {
                    let h = crate::http::normalize::hex_value(*p.first()?)?;
                    let l = crate::http::normalize::hex_value(*p.get(1)?)?;
                    Some(h << 4 | l)
                })
                .collect();
            let Some(digest) = digest else { return };
            match challenge::alpn_cert(name, &digest) {
                Ok(c) => {
                    challenge::set_alpn01(name, Some(Arc::new(c)));
                    applied.alpn01.insert(name.to_string());
                }
                Err(e) => log::warn(format_args!("acme {name}: tls-alpn-01 certificate: {e}")),
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_keys_open_only_with_the_key_and_name() {
        let k = ClusterKey::from_bytes([7; 32]);
        let s = seal(&k, b"/p/acme/certs/a", b"secret").unwrap();
        assert_eq!(open(&k, b"/p/acme/certs/a", &s).unwrap(), b"secret");
        assert!(open(&k, b"/p/acme/certs/b", &s).is_err());
        assert!(open(&ClusterKey::from_bytes([8; 32]), b"/p/acme/certs/a", &s).is_err());
        assert_eq!(format!("{k:?}"), "ClusterKey(..)");
    }
}
