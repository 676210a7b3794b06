//! switchyard-gateway: a Kubernetes Gateway API controller for Switchyard
//! (docs/kubernetes.md).
//!
//! It watches GatewayClasses, Gateways, HTTPRoutes, ReferenceGrants,
//! Services, EndpointSlices and Namespaces; after each change (changes
//! that come together are taken together) it renders the whole
//! configuration (render.rs), checks it exactly as a node will, publishes
//! it to the cluster's etcd key when it differs from what is published
//! (the nodes follow that key and reload without dropping a connection),
//! and writes the status of every object whose status changed.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod render;
mod types;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::Notify;

use render::{Kind, Settings, World};
use types::*;

const USAGE: &str = "usage: switchyard-gateway --node-config FILE [--controller-name NAME] [--listen-address IP] [--port-offset N] [--status-address ADDR]

  --node-config FILE      a node's file with its [cluster] table (etcd endpoints,
                          prefix, TLS, auth): where the configuration is published
  --controller-name NAME  GatewayClass spec.controllerName served
                          (default switchyard.dev/gateway-controller)
  --listen-address IP     address the vservers listen on (default 0.0.0.0)
  --port-offset N         added to each listener's port (default 0)
  --status-address ADDR   address written into Gateway status (default: the
                          listen address)

The Kubernetes API is found as kubectl finds it (KUBECONFIG, ~/.kube/config,
or the pod's service account).";

struct Args {
    node_config: PathBuf,
    settings: Settings,
}

fn args() -> Result<Args, String> {
    let mut node_config = None;
    let mut controller_name = "switchyard.dev/gateway-controller".to_string();
    let mut listen_address = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
    let mut port_offset = 0u16;
    let mut status_address = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--node-config" => node_config = Some(PathBuf::from(value(&a)?)),
            "--controller-name" => controller_name = value(&a)?,
            "--listen-address" => {
                listen_address = value(&a)?
                    .parse()
                    .map_err(|e| format!("--listen-address: {e}"))?
            }
            "--port-offset" => {
                port_offset = value(&a)?
                    .parse()
                    .map_err(|e| format!("--port-offset: {e}"))?
            }
            "--status-address" => status_address = Some(value(&a)?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Args {
        node_config: node_config.ok_or(format!("--node-config is required\n{USAGE}"))?,
        settings: Settings {
            controller_name,
            listen_address,
            port_offset,
            status_address: status_address.unwrap_or_else(|| listen_address.to_string()),
        },
    })
}

fn log(msg: impl AsRef<str>) {
    eprintln!("switchyard-gateway: {}", msg.as_ref());
}

/// A store of one kind, kept by a reflector that pokes `changed`.
fn watch<K>(api: Api<K>, changed: Arc<Notify>) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => changed.notify_one(),
                Err(e) => log(format!("watch {}: {e}", K::plural(&()))),
            }
        }
    });
    store
}

fn objects<K: Clone + kube::Resource>(s: &reflector::Store<K>) -> Vec<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    s.state().iter().map(|o| (**o).clone()).collect()
}

/// RFC 3339 time of now, as the API writes it.
fn now() -> String {
    let t =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The desired status with each condition's lastTransitionTime: the
/// current one where type, status and reason did not change, now
/// otherwise. Lists of conditions are found anywhere in the value.
fn with_times(desired: &Value, current: &Value, now: &str) -> Value {
    match desired {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                if k == "conditions" {
                    let cur = current
                        .get("conditions")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let conds = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| {
                            let mut c = c.clone();
                            let same = cur.iter().find(|o| {
                                o["type"] == c["type"]
                                    && o["status"] == c["status"]
                                    && o["reason"] == c["reason"]
                            });
                            c["lastTransitionTime"] = same
                                .and_then(|o| o.get("lastTransitionTime").cloned())
                                .unwrap_or_else(|| json!(now));
                            c
                        })
                        .collect();
                    out.insert(k.clone(), Value::Array(conds));
                } else {
                    out.insert(
                        k.clone(),
                        with_times(v, current.get(k).unwrap_or(&Value::Null), now),
                    );
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, v)| {
                    // Entries of listeners/parents pair up by name or parentRef.
                    let cur = current
                        .as_array()
                        .and_then(|cs| {
                            cs.iter()
                                .find(|c| {
                                    (v.get("name").is_some() && c.get("name") == v.get("name"))
                                        || (v.get("parentRef").is_some()
                                            && c.get("parentRef") == v.get("parentRef"))
                                })
                                .or_else(|| {
                                    cs.get(i).filter(|_| {
                                        v.get("name").is_none() && v.get("parentRef").is_none()
                                    })
                                })
                        })
                        .cloned()
                        .unwrap_or(Value::Null);
                    with_times(v, &cur, now)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// An HTTPRoute's status keeps the parents other controllers wrote.
fn merge_foreign(desired: Value, current: &Value, controller: &str) -> Value {
    let mut d = desired;
    if let Some(parents) = d.get_mut("parents").and_then(Value::as_array_mut) {
        for p in current
            .get("parents")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if p.get("controllerName").and_then(Value::as_str) != Some(controller) {
                parents.push(p.clone());
            }
        }
    }
    d
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // The cluster to publish to, as the nodes find it.
    let node_text = match std::fs::read_to_string(&args.node_config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", args.node_config.display());
            std::process::exit(2);
        }
    };
    let base = args
        .node_config
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let name = args.node_config.display().to_string();
    let cluster = match switchyard::config::cluster_settings(&name, &node_text, &base) {
        Ok(Some(s)) => s,
        Ok(None) => {
            eprintln!("{name}: no [cluster] table");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let node = Arc::new(switchyard::cluster::Node::detached(
        cluster, &name, &node_text,
    ));
    let client = match Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("no Kubernetes API: {e}");
            std::process::exit(1);
        }
    };
    let changed = Arc::new(Notify::new());
    let classes = watch(Api::<GatewayClass>::all(client.clone()), changed.clone());
    let gateways = watch(Api::<Gateway>::all(client.clone()), changed.clone());
    let routes = watch(Api::<HttpRoute>::all(client.clone()), changed.clone());
    let grants = watch(Api::<ReferenceGrant>::all(client.clone()), changed.clone());
    let services = watch(Api::<Service>::all(client.clone()), changed.clone());
    let slices = watch(Api::<EndpointSlice>::all(client.clone()), changed.clone());
    let namespaces = watch(Api::<Namespace>::all(client.clone()), changed.clone());
    // HTTPS listeners' certificates.
    let secrets = watch(Api::<Secret>::all(client.clone()), changed.clone());
    for r in [
        classes.wait_until_ready().await,
        gateways.wait_until_ready().await,
        routes.wait_until_ready().await,
        grants.wait_until_ready().await,
        services.wait_until_ready().await,
        slices.wait_until_ready().await,
        namespaces.wait_until_ready().await,
        secrets.wait_until_ready().await,
    ] {
        if let Err(e) = r {
            eprintln!("watch: {e}");
            std::process::exit(1);
        }
    }
    log("watching");
    // What etcd holds now: a restarted controller that renders the same
    // text does not publish it again.
    let mut published: Option<String> = {
        let s = node.settings.clone();
        match tokio::task::spawn_blocking(move || switchyard::cluster::published(&s)).await {
            Ok(Ok((_, text))) => text,
            _ => None,
        }
    };
    let mut publishes = 0u64;
    let mut files_written: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut renders = 0u64;
    // Statuses this controller wrote, by object: not written again while
    // the render asks for the same.
    let mut written: BTreeMap<(Kind, Option<String>, String), Value> = BTreeMap::new();
    let pp = PatchParams::default();
    loop {
        // Changes that come close together are rendered once.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let world = World {
            classes: objects(&classes),
            gateways: objects(&gateways),
            routes: objects(&routes),
            grants: objects(&grants),
            services: objects(&services),
            slices: objects(&slices),
            namespaces: objects(&namespaces),
            secrets: objects(&secrets),
        };
        let out = render::render(&world, &args.settings);
        let newest = world.newest_resource_version();
        renders += 1;
        // Certificates and keys first (nodes write every published file
        // before they apply a revision); a changed file with the same
        // text publishes the text again so that the nodes reload.
        let mut files_changed = false;
        for (name, data) in &out.files {
            if files_written.get(name) == Some(data) {
                continue;
            }
            let (settings, n, d) = (node.settings.clone(), name.clone(), data.clone());
            let r = tokio::task::spawn_blocking(move || put_file(&settings, &n, &d))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match r {
                Ok(written) => {
                    files_written.insert(name.clone(), data.clone());
                    files_changed |= written;
                }
                Err(e) => log(format!("file {name} not published: {e}")),
            }
        }
        if files_changed {
            // Publish again even if the text is the same.
            published = None;
        }
        if let Some(text) = out.config {
            if published.as_deref() == Some(text.as_str()) {
                // Said, so that a test (or an operator) can tell a change
                // that rendered the same text from one not yet rendered.
                log(format!("render {renders} (objects up to resourceVersion {newest}): unchanged, not published"));
            } else {
                let node = node.clone();
                let t = text.clone();
                let r = tokio::task::spawn_blocking(move || {
                    switchyard::config::publish::check(&node, &t).map_err(|e| e.to_string())?;
                    switchyard::cluster::publish(&node.settings, &t, None)
                })
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
                match r {
                    Ok(Some(rev)) => {
                        publishes += 1;
                        log(format!("render {renders} (objects up to resourceVersion {newest}): published revision {rev} (publish {publishes}, {} bytes)", text.len()));
                        published = Some(text);
                    }
                    Ok(None) => log("publish raced another writer; rendering again"),
                    Err(e) => log(format!("not published: {e}")),
                }
            }
        }
        let stamp = now();
        for st in out.statuses {
            let key = (st.kind, st.namespace.clone(), st.name.clone());
            let current = match st.kind {
                Kind::GatewayClass => world
                    .classes
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(&st.name))
                    .map(|o| o.status.clone()),
                Kind::Gateway => world
                    .gateways
                    .iter()
                    .find(|o| {
                        o.metadata.name.as_deref() == Some(&st.name)
                            && o.metadata.namespace == st.namespace
                    })
                    .map(|o| o.status.clone()),
                Kind::HttpRoute => world
                    .routes
                    .iter()
                    .find(|o| {
                        o.metadata.name.as_deref() == Some(&st.name)
                            && o.metadata.namespace == st.namespace
                    })
                    .map(|o| o.status.clone()),
            }
            .unwrap_or(Value::Null);
            let desired = if st.kind == Kind::HttpRoute {
                merge_foreign(st.status.clone(), &current, &args.settings.controller_name)
            } else {
                st.status.clone()
            };
            let full = with_times(&desired, &current, &stamp);
            if strip_times(&full) == strip_times(&current) || written.get(&key) == Some(&full) {
                continue;
            }
            let patch = Patch::Merge(json!({ "status": full }));
            let r = match st.kind {
                Kind::GatewayClass => Api::<GatewayClass>::all(client.clone())
                    .patch_status(&st.name, &pp, &patch)
                    .await
                    .map(|_| ()),
                Kind::Gateway => Api::<Gateway>::namespaced(
                    client.clone(),
                    st.namespace.as_deref().unwrap_or_default(),
                )
                .patch_status(&st.name, &pp, &patch)
                .await
                .map(|_| ()),
                Kind::HttpRoute => Api::<HttpRoute>::namespaced(
                    client.clone(),
                    st.namespace.as_deref().unwrap_or_default(),
                )
                .patch_status(&st.name, &pp, &patch)
                .await
                .map(|_| ()),
            };
            match r {
                Ok(()) => {
                    written.insert(key, full);
                }
                Err(e) => log(format!("status of {:?} {}: {e}", st.kind, st.name)),
            }
        }
        changed.notified().await;
    }
}

/// Writes `<prefix>/files/<name>` (what `switchyard ctl cluster file`
/// does, without publishing the configuration again: the caller does).
fn put_file(
    settings: &switchyard::cluster::Settings,
    name: &str,
    data: &[u8],
) -> Result<bool, String> {
    if !switchyard::cluster::valid_file_name(name) {
        return Err(format!("file name {name:?} is not valid"));
    }
    let mut c =
        switchyard::cluster::etcd::Client::new(&settings.endpoints, settings.access.clone());
    let key = format!("{}/files/{name}", settings.prefix);
    // Already there (a restarted controller): nothing to write.
    let (_, now) = c.get(key.as_bytes()).map_err(|e| e.to_string())?;
    if now.is_some_and(|kv| kv.value == data) {
        return Ok(false);
    }
    c.put(key.as_bytes(), data, 0)
        .map(|_| true)
        .map_err(|e| e.to_string())
}

fn strip_times(v: &Value) -> Value {
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
