//! Status writes, apart from the render loop (issue 37).
//!
//! A render says which status each object should have; this writer puts
//! them on the objects from a task of its own, so a render and its publish
//! never wait for the API server. Before, the loop wrote each status with
//! one awaited API call: after 9,000 new HTTPRoutes the next render waited
//! for 9,000 calls, and the first route change after a bulk load at
//! 10,000 routes was not served within 120 s.
//!
//! - Coalesced per object: a status still queued when a newer render wants
//!   another is replaced by it (only the newest is written).
//! - Nothing is written that the object already has (conditions compared
//!   without their times), nor what this writer already wrote; a queued
//!   status the object has meanwhile is dropped.
//! - A write that fails is logged and not recorded, so the next render
//!   queues it again.
//! - Up to `IN_FLIGHT` writes at a time.
//! - The comparison itself (each object's status now against the
//!   render's, 10,000 of them at 10,000 routes: seconds in a debug build)
//!   runs on a thread of its own too, for the newest render only: the
//!   render loop hands it over (`offer`) and takes the next change.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::render::Kind;
use crate::types::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, TcpRoute, TlsRoute, UdpRoute,
};
use k8s_openapi::api::networking::v1::Ingress;

/// An object: its kind, namespace and name.
pub type Key = (Kind, Option<String>, String);

/// Writes at a time: enough to drain 10,000 statuses without holding
/// the API server (and this 2-core test machine) with one call each.
const IN_FLIGHT: usize = 8;

#[derive(Default)]
struct Shared {
    /// Statuses to write, newest per object.
    pending: Mutex<BTreeMap<Key, Value>>,
    /// Statuses written, per object.
    written: Mutex<BTreeMap<Key, Value>>,
    wake: Notify,
    /// The newest render's comparison, not run yet.
    job: Mutex<Option<Job>>,
    job_wake: Notify,
}

/// A render's statuses to compare: answers (object, status wanted with
/// its times, status it has now).
pub type Job = Box<dyn FnOnce() -> Vec<(Key, Value, Value)> + Send>;

pub struct StatusWriter {
    shared: Arc<Shared>,
}

impl StatusWriter {
    /// Starts the writing task (on the current tokio runtime).
    /// `render` is poked a second after a write fails, so that a render
    /// queues it again (renders no longer follow our own status writes
    /// coming back as events: status_echo.rs).
    pub fn start(client: Client, log: fn(String), render: Arc<Notify>) -> StatusWriter {
        let shared = Arc::new(Shared::default());
        tokio::spawn(write_loop(shared.clone(), client, log, render));
        tokio::spawn(compare_loop(shared.clone()));
        StatusWriter { shared }
    }

    /// A render's statuses, compared and queued on another thread; a
    /// job not started yet is replaced (only the newest render counts).
    pub fn offer(&self, job: Job) {
        *lock(&self.shared.job) = Some(job);
        self.shared.job_wake.notify_one();
    }
}

/// A render wants `full` (with its condition times) on `key`, whose
/// status is `current` now.
fn want(shared: &Shared, key: Key, full: Value, current: &Value) {
    let has_it = strip_times(&full) == strip_times(current);
    let wrote_it = lock(&shared.written).get(&key) == Some(&full);
    let mut pending = lock(&shared.pending);
    if has_it || wrote_it {
        pending.remove(&key);
        return;
    }
    pending.insert(key, full);
    drop(pending);
    shared.wake.notify_one();
}

async fn compare_loop(shared: Arc<Shared>) {
    loop {
        shared.job_wake.notified().await;
        let Some(job) = lock(&shared.job).take() else {
            continue;
        };
        let s = shared.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for (key, full, current) in job() {
                want(&s, key, full, &current);
            }
        })
        .await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn write_loop(shared: Arc<Shared>, client: Client, log: fn(String), render: Arc<Notify>) {
    loop {
        shared.wake.notified().await;
        loop {
            let batch = std::mem::take(&mut *lock(&shared.pending));
            if batch.is_empty() {
                break;
            }
            let began = std::time::Instant::now();
            let n = batch.len();
            let results: Vec<(Key, Value, Result<(), kube::Error>)> = futures::stream::iter(batch)
                .map(|(key, full)| {
                    let client = client.clone();
                    async move {
                        let r = patch(&client, &key, &full).await;
                        (key, full, r)
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            let mut failed = 0;
            let mut written = lock(&shared.written);
            for (key, full, r) in results {
                match r {
                    Ok(()) => {
                        written.insert(key, full);
                    }
                    Err(e) => {
                        failed += 1;
                        log(format!("status of {:?} {}: {e}", key.0, key.2));
                    }
                }
            }
            drop(written);
            if failed > 0 {
                let render = render.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    render.notify_one();
                });
            }
            if n > 1 {
                log(format!(
                    "statuses: {} written, {failed} failed in {} ms",
                    n - failed,
                    began.elapsed().as_millis()
                ));
            }
        }
    }
}

async fn patch(client: &Client, (kind, ns, name): &Key, full: &Value) -> Result<(), kube::Error> {
    let pp = PatchParams::default();
    let patch = Patch::Merge(json!({ "status": full }));
    let ns = ns.as_deref().unwrap_or_default();
    let c = client.clone();
    match kind {
        Kind::GatewayClass => Api::<GatewayClass>::all(c)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::Gateway => Api::<Gateway>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::HttpRoute => Api::<HttpRoute>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::Ingress => Api::<Ingress>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::GrpcRoute => Api::<GrpcRoute>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::TlsRoute => Api::<TlsRoute>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::TcpRoute => Api::<TcpRoute>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::UdpRoute => Api::<UdpRoute>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
        Kind::BackendTlsPolicy => Api::<BackendTlsPolicy>::namespaced(c, ns)
            .patch_status(name, &pp, &patch)
            .await
            .map(|_| ()),
    }
}

/// A status without its conditions' times (what is compared).
pub fn strip_times(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "lastTransitionTime")
                .map(|(k, v)| (k.clone(), strip_times(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_times).collect()),
        o => o.clone(),
    }
}
