//! switchyard-gateway: a Kubernetes Gateway API controller for Switchyard
//! (docs/kubernetes.md).
//!
//! It watches GatewayClasses, Gateways, HTTPRoutes, GRPCRoutes,
//! TLSRoutes, TCPRoutes, UDPRoutes, ReferenceGrants,
//! Services, EndpointSlices and Namespaces; after each change (changes
//! that come together are taken together; a status alone is not a
//! change: status_echo.rs) it renders the whole
//! configuration (render.rs), checks it exactly as a node will, publishes
//! it to the cluster's etcd key when it differs from what is published
//! (the nodes follow that key and reload without dropping a connection),
//! and has the status of every object whose status changed written
//! (status_writer.rs: off the render loop, so no render waits for them).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod backend_tls;
mod conflicts;
mod events;
mod grpc;
mod ingress;
mod ingress_annotations;
mod progress;
mod render;
mod render_l4;
mod status_echo;
mod status_writer;
mod types;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::Api;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::Notify;

use progress::{resource_version, Position, View};
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

/// A log line, with the time of day (UTC, milliseconds) as the nodes write
/// theirs: a change's way from the controller to a node reads across both.
fn log(msg: impl AsRef<str>) {
    let ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    let day_ms = ms.rem_euclid(86_400_000);
    eprintln!(
        "{:02}:{:02}:{:02}.{:03} switchyard-gateway: {}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000,
        msg.as_ref()
    );
}

/// A store of one kind, kept by a reflector that pokes `changed`, and the
/// watch's position (progress.rs), advanced once the store holds the event.
fn watch<K>(api: Api<K>, changed: Arc<Notify>) -> (reflector::Store<K>, Arc<Position>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let position = Arc::new(Position::default());
    let stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let at = position.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        // A relist's objects are swapped into the store together, at
        // InitDone: the position follows then, not object by object.
        let mut listed = 0u64;
        // An event that changes only a status (our own writes coming
        // back) is not rendered for (status_echo.rs); the position still
        // advances, so a render's view stays exact.
        let mut seen = status_echo::Seen::default();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(o)) => {
                    at.advance(resource_version(kube::Resource::meta(&o)));
                    if seen.changed(&o) {
                        changed.notify_one();
                    }
                }
                Ok(watcher::Event::Delete(o)) => {
                    at.advance(resource_version(kube::Resource::meta(&o)));
                    seen.forget(&o);
                    changed.notify_one();
                }
                Ok(watcher::Event::Init) => {
                    listed = 0;
                    seen.clear();
                }
                Ok(watcher::Event::InitApply(o)) => {
                    seen.changed(&o);
                    listed = listed.max(resource_version(kube::Resource::meta(&o)))
                }
                Ok(watcher::Event::InitDone) => {
                    at.advance(listed);
                    changed.notify_one();
                }
                Err(e) => log(format!("watch {}: {e}", K::plural(&()))),
            }
        }
    });
    (store, position)
}

fn objects<K: Clone + kube::Resource>(s: &reflector::Store<K>) -> Vec<Arc<K>>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    s.state()
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
                                        || (v.get("ancestorRef").is_some()
                                            && c.get("ancestorRef") == v.get("ancestorRef"))
                                })
                                .or_else(|| {
                                    cs.get(i).filter(|_| {
                                        v.get("name").is_none()
                                            && v.get("parentRef").is_none()
                                            && v.get("ancestorRef").is_none()
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

/// The status each object has now, by object: one pass, so that looking
/// up 10,000 routes' statuses is not 10,000 scans of every route.
fn current_statuses(world: &World) -> BTreeMap<status_writer::Key, Value> {
    fn key<K: kube::Resource>(kind: Kind, o: &Arc<K>) -> status_writer::Key {
        let m = o.meta();
        (
            kind,
            m.namespace.clone(),
            m.name.clone().unwrap_or_default(),
        )
    }
    let mut out = BTreeMap::new();
    for o in &world.classes {
        out.insert(key(Kind::GatewayClass, o), o.status.clone());
    }
    for o in &world.gateways {
        out.insert(key(Kind::Gateway, o), o.status.clone());
    }
    for o in &world.routes {
        out.insert(key(Kind::HttpRoute, o), o.status.clone());
    }
    for o in &world.grpc_routes {
        out.insert(key(Kind::GrpcRoute, o), o.status.clone());
    }
    for o in &world.tls_routes {
        out.insert(key(Kind::TlsRoute, o), o.status.clone());
    }
    for o in &world.tcp_routes {
        out.insert(key(Kind::TcpRoute, o), o.status.clone());
    }
    for o in &world.udp_routes {
        out.insert(key(Kind::UdpRoute, o), o.status.clone());
    }
    for o in &world.backend_tls {
        out.insert(key(Kind::BackendTlsPolicy, o), o.status.clone());
    }
    for o in &world.ingresses {
        if let Ok(v) = serde_json::to_value(&o.status) {
            out.insert(key(Kind::Ingress, o), v);
        }
    }
    out
}

/// A route's status keeps the parents other controllers wrote.
fn merge_foreign(desired: Value, current: &Value, controller: &str) -> Value {
    let mut d = desired;
    // A route's parents, a policy's ancestors.
    let list = if d.get("ancestors").is_some() {
        "ancestors"
    } else {
        "parents"
    };
    if let Some(parents) = d.get_mut(list).and_then(Value::as_array_mut) {
        for p in current
            .get(list)
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
    let (classes, at_classes) = watch(Api::<GatewayClass>::all(client.clone()), changed.clone());
    let (gateways, at_gateways) = watch(Api::<Gateway>::all(client.clone()), changed.clone());
    let (routes, at_routes) = watch(Api::<HttpRoute>::all(client.clone()), changed.clone());
    let (grpc_routes, at_grpc_routes) =
        watch(Api::<GrpcRoute>::all(client.clone()), changed.clone());
    let (tls_routes, at_tls_routes) = watch(Api::<TlsRoute>::all(client.clone()), changed.clone());
    let (tcp_routes, at_tcp_routes) = watch(Api::<TcpRoute>::all(client.clone()), changed.clone());
    let (udp_routes, at_udp_routes) = watch(Api::<UdpRoute>::all(client.clone()), changed.clone());
    let (grants, at_grants) = watch(Api::<ReferenceGrant>::all(client.clone()), changed.clone());
    let (services, at_services) = watch(Api::<Service>::all(client.clone()), changed.clone());
    let (slices, at_slices) = watch(Api::<EndpointSlice>::all(client.clone()), changed.clone());
    let (namespaces, at_namespaces) = watch(Api::<Namespace>::all(client.clone()), changed.clone());
    // HTTPS listeners' certificates.
    let (secrets, at_secrets) = watch(Api::<Secret>::all(client.clone()), changed.clone());
    // Ingresses of our IngressClasses (ingress.rs).
    let (ingresses, at_ingresses) = watch(Api::<Ingress>::all(client.clone()), changed.clone());
    let (ingress_classes, at_ingress_classes) =
        watch(Api::<IngressClass>::all(client.clone()), changed.clone());
    // BackendTLSPolicies and the ConfigMaps of their CA certificates,
    // where the API serves BackendTLSPolicy (its CRD came with the
    // standard channel in v1.4; a cluster with older CRDs has no policy
    // to follow, and the ConfigMaps are not needed then).
    let tls_policies = match Api::<BackendTlsPolicy>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Some((
            watch(
                Api::<BackendTlsPolicy>::all(client.clone()),
                changed.clone(),
            ),
            watch(Api::<ConfigMap>::all(client.clone()), changed.clone()),
        )),
        Err(e) => {
            log(format!("BackendTLSPolicy is not served ({e}): no backend TLS policy is followed; install the Gateway API v1.7 standard CRDs to have them"));
            None
        }
    };
    let mut positions = vec![
        &*at_classes,
        &*at_gateways,
        &*at_routes,
        &*at_grpc_routes,
        &*at_tls_routes,
        &*at_tcp_routes,
        &*at_udp_routes,
        &*at_grants,
        &*at_services,
        &*at_slices,
        &*at_namespaces,
        &*at_secrets,
        &*at_ingresses,
        &*at_ingress_classes,
    ];
    if let Some(((_, at_policies), (_, at_config_maps))) = &tls_policies {
        positions.extend([&**at_policies, &**at_config_maps]);
    }
    for r in [
        classes.wait_until_ready().await,
        gateways.wait_until_ready().await,
        routes.wait_until_ready().await,
        grpc_routes.wait_until_ready().await,
        tls_routes.wait_until_ready().await,
        tcp_routes.wait_until_ready().await,
        udp_routes.wait_until_ready().await,
        grants.wait_until_ready().await,
        services.wait_until_ready().await,
        slices.wait_until_ready().await,
        namespaces.wait_until_ready().await,
        secrets.wait_until_ready().await,
        ingresses.wait_until_ready().await,
        ingress_classes.wait_until_ready().await,
    ]
    .into_iter()
    .chain(match &tls_policies {
        Some(((policies, _), (config_maps, _))) => vec![
            policies.wait_until_ready().await,
            config_maps.wait_until_ready().await,
        ],
        None => Vec::new(),
    }) {
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
    // The snapshot the last check built: the next check parses only the
    // pools and policies whose text changed (a route change at 10,000
    // routes: 240 ms to read 3.4 MB whole, 60 to 70 ms by its parts).
    let mut last_check: Option<Arc<switchyard::config::Snapshot>> = None;
    // The member sets in etcd now, by pool (a restarted controller writes
    // only those that differ, and removes those of pools gone meanwhile).
    let mut members_written: BTreeMap<String, Vec<u8>> = {
        let s = node.settings.clone();
        tokio::task::spawn_blocking(move || published_members(&s))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let mut files_written: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut renders = 0u64;
    let statuses = status_writer::StatusWriter::start(client.clone(), log, changed.clone());
    let mut recorder = events::Recorder::new(client.clone());
    // The view of the last render published: none older is published.
    let mut published_view = View::default();
    // A render not published for a reason that passes (etcd unreachable,
    // another writer in between) is tried again after this long even if
    // nothing changes in the cluster; doubled up to 5 s while it fails.
    let mut retry: Option<Duration> = None;
    loop {
        // Changes that come close together are rendered once.
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The positions first: each store holds at least what they say.
        let view = View::read(&positions);
        let world = World {
            classes: objects(&classes),
            gateways: objects(&gateways),
            routes: objects(&routes),
            grpc_routes: objects(&grpc_routes),
            tls_routes: objects(&tls_routes),
            tcp_routes: objects(&tcp_routes),
            udp_routes: objects(&udp_routes),
            grants: objects(&grants),
            services: objects(&services),
            slices: objects(&slices),
            namespaces: objects(&namespaces),
            secrets: objects(&secrets),
            ingresses: objects(&ingresses),
            ingress_classes: objects(&ingress_classes),
            backend_tls: tls_policies
                .as_ref()
                .map(|((p, _), _)| objects(p))
                .unwrap_or_default(),
            config_maps: tls_policies
                .as_ref()
                .map(|(_, (c, _))| objects(c))
                .unwrap_or_default(),
        };
        let began = std::time::Instant::now();
        let out = render::render(&world, &args.settings);
        let render_ms = began.elapsed().as_millis();
        let newest = view.newest();
        renders += 1;
        let mut failed = false;
        if view.is_behind(&published_view) {
            // Cannot happen while each watch only moves forward; said and
            // refused rather than publishing an older world.
            log(format!("render {renders} (changes up to resourceVersion {newest}) saw an older view than the published one: not published"));
            failed = true;
        }
        // Certificates and keys first (nodes write every published file
        // before they apply a revision); a changed file with the same
        // text publishes the text again so that the nodes reload.
        let mut files_changed = false;
        for (name, data) in &out.files {
            if failed {
                break;
            }
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
                Err(e) => {
                    log(format!("file {name} not published: {e}"));
                    failed = true;
                }
            }
        }
        if files_changed {
            // Publish again even if the text is the same.
            published = None;
        }
        // Member sets before the text that may name their pools: a node
        // applying it finds them there. A changed set alone is a run-time
        // change on the nodes, the text stays.
        let want_members: BTreeMap<String, Vec<u8>> = out
            .members
            .iter()
            .map(|(pool, m)| (pool.clone(), switchyard::cluster::members::encode(m)))
            .collect();
        let changed_members: Vec<(String, Vec<u8>)> = want_members
            .iter()
            .filter(|(pool, v)| members_written.get(*pool) != Some(*v))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect();
        let mut members_note = String::new();
        if !failed && !changed_members.is_empty() {
            let settings = node.settings.clone();
            let batch = changed_members.clone();
            let r = tokio::task::spawn_blocking(move || put_members(&settings, &batch))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match r {
                Ok(()) => {
                    members_note =
                        format!("; members of {} pools published", changed_members.len());
                    members_written.extend(changed_members);
                }
                Err(e) => {
                    log(format!(
                        "render {renders}: members not published: {e}; trying again"
                    ));
                    failed = true;
                }
            }
        }
        let rendered = out.config.clone();
        match out.config {
            _ if failed => {}
            Some(text) if published.as_deref() == Some(text.as_str()) => {
                // Said, so that a test (or an operator) can tell a change
                // that rendered the same text from one not yet rendered.
                log(format!("render {renders} (changes up to resourceVersion {newest}): unchanged, not published{members_note}"));
                published_view = view.clone();
            }
            Some(text) => {
                let node = node.clone();
                let t = text.clone();
                let began = std::time::Instant::now();
                let previous = last_check.take();
                let r = tokio::task::spawn_blocking(move || {
                    let checked = match switchyard::config::publish::check_after(
                        &node,
                        &t,
                        previous.as_deref(),
                    ) {
                        Err(switchyard::config::publish::Unpublishable::Invalid(e)) => {
                            return (previous, Ok(Err(e)))
                        }
                        Err(e) => return (previous, Err(e.to_string())),
                        Ok(s) => Arc::new(s),
                    };
                    (
                        Some(checked),
                        switchyard::cluster::publish(&node.settings, &t, None).map(Ok),
                    )
                })
                .await
                .unwrap_or_else(|e| (None, Err(e.to_string())));
                let (checked, r) = r;
                last_check = checked;
                match r {
                    Ok(Ok(Some(rev))) => {
                        publishes += 1;
                        log(format!("render {renders} (changes up to resourceVersion {newest}): published revision {rev} (publish {publishes}, {} bytes; render {render_ms} ms, check and publish {} ms){members_note}", text.len(), began.elapsed().as_millis()));
                        published = Some(text);
                        published_view = view.clone();
                    }
                    // Invalid: rendering the same objects again gives the
                    // same text; the next change is waited for.
                    Ok(Err(e)) => log(format!("render {renders}: not published: {e}")),
                    Ok(Ok(None)) => {
                        log(format!(
                            "render {renders}: publish raced another writer; rendering again"
                        ));
                        failed = true;
                    }
                    Err(e) => {
                        log(format!(
                            "render {renders}: not published: {e}; trying again"
                        ));
                        failed = true;
                    }
                }
            }
            None => {}
        }
        // Sets of pools the published text no longer names go once it is
        // published (a node running the previous text keeps its members
        // until then).
        let stale: Vec<String> = members_written
            .keys()
            .filter(|p| !want_members.contains_key(*p))
            .cloned()
            .collect();
        if !failed && !stale.is_empty() && rendered.is_some() && published == rendered {
            let settings = node.settings.clone();
            let batch = stale.clone();
            let r = tokio::task::spawn_blocking(move || delete_members(&settings, &batch))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match r {
                Ok(()) => {
                    for p in &stale {
                        members_written.remove(p);
                    }
                }
                Err(e) => {
                    log(format!(
                        "render {renders}: old member sets not removed: {e}; trying again"
                    ));
                    failed = true;
                }
            }
        }
        retry = failed.then(|| {
            retry.map_or(Duration::from_millis(200), |d| {
                (d * 2).min(Duration::from_secs(5))
            })
        });
        // Statuses go to the writer (status_writer.rs), compared there:
        // neither this render nor the next publish waits for them.
        let stamp = now();
        let controller_name = args.settings.controller_name.clone();
        let wanted = out.statuses;
        statuses.offer(Box::new(move || {
            let current = current_statuses(&world);
            wanted
                .into_iter()
                .map(|st| {
                    let key = (st.kind, st.namespace.clone(), st.name.clone());
                    let now = current.get(&key).cloned().unwrap_or(Value::Null);
                    let desired = if st.kind.is_route() || st.kind == Kind::BackendTlsPolicy {
                        merge_foreign(st.status, &now, &controller_name)
                    } else {
                        st.status
                    };
                    let full = with_times(&desired, &now, &stamp);
                    (key, full, now)
                })
                .collect()
        }));
        for e in recorder.record(&out.events).await {
            log(e);
        }
        match retry {
            // A render that failed for a passing reason is tried again
            // even if nothing changes: before, it waited for the next
            // change in the cluster, which may never come.
            Some(after) => {
                tokio::select! {
                    _ = changed.notified() => {}
                    _ = tokio::time::sleep(after) => {}
                }
            }
            None => changed.notified().await,
        }
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

/// The member sets published under `<prefix>/members/`, by pool.
fn published_members(
    settings: &switchyard::cluster::Settings,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut c =
        switchyard::cluster::etcd::Client::new(&settings.endpoints, settings.access.clone());
    let prefix = switchyard::cluster::members::members_prefix(settings);
    let (_, kvs) = c.list(&prefix).map_err(|e| e.to_string())?;
    Ok(kvs
        .into_iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned(),
                kv.value,
            )
        })
        .collect())
}

/// Writes `<prefix>/members/<pool>` for each set (one key each: a node
/// applies each change as it comes).
fn put_members(
    settings: &switchyard::cluster::Settings,
    sets: &[(String, Vec<u8>)],
) -> Result<(), String> {
    let mut c =
        switchyard::cluster::etcd::Client::new(&settings.endpoints, settings.access.clone());
    for (pool, value) in sets {
        c.put(
            &switchyard::cluster::members::members_key(settings, pool),
            value,
            0,
        )
        .map_err(|e| format!("members of {pool}: {e}"))?;
    }
    Ok(())
}

fn delete_members(
    settings: &switchyard::cluster::Settings,
    pools: &[String],
) -> Result<(), String> {
    let mut c =
        switchyard::cluster::etcd::Client::new(&settings.endpoints, settings.access.clone());
    for pool in pools {
        c.delete(&switchyard::cluster::members::members_key(settings, pool))
            .map_err(|e| format!("members of {pool}: {e}"))?;
    }
    Ok(())
}
