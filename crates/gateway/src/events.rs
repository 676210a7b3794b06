//! Kubernetes Events the render asks for (ingress.rs: annotations not
//! applied, Ingresses refused), each written once per controller run: the
//! same render repeats them after every change, and an Event per render
//! would flood the API (ingress-nginx also writes one per sync, which its
//! users filter out).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::Client;

use crate::ingress::EventOf;

pub struct Recorder {
    client: Client,
    written: BTreeSet<EventOf>,
}

impl Recorder {
    pub fn new(client: Client) -> Recorder {
        Recorder {
            client,
            written: BTreeSet::new(),
        }
    }

    /// Writes the events not written before; a failed write is tried
    /// again after the next render.
    pub async fn record(&mut self, events: &[EventOf]) -> Vec<String> {
        let mut errors = Vec::new();
        for e in events {
            if self.written.contains(e) {
                continue;
            }
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let ev = Event {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}.", e.name)),
                    namespace: Some(e.namespace.clone()),
                    ..Default::default()
                },
                involved_object: ObjectReference {
                    api_version: Some("networking.k8s.io/v1".into()),
                    kind: Some("Ingress".into()),
                    name: Some(e.name.clone()),
                    namespace: Some(e.namespace.clone()),
                    uid: Some(e.uid.clone()).filter(|u| !u.is_empty()),
                    ..Default::default()
                },
                reason: Some(e.reason.into()),
                message: Some(e.message.clone()),
                type_: Some(e.kind.into()),
                count: Some(1),
                first_timestamp: Some(now.clone()),
                last_timestamp: Some(now),
                source: Some(EventSource {
                    component: Some("switchyard-gateway".into()),
                    ..Default::default()
                }),
                reporting_component: Some("switchyard-gateway".into()),
                ..Default::default()
            };
            match Api::<Event>::namespaced(self.client.clone(), &e.namespace)
                .create(&PostParams::default(), &ev)
                .await
            {
                Ok(_) => {
                    self.written.insert(e.clone());
                }
                Err(err) => errors.push(format!(
                    "event {} on Ingress {}/{}: {err}",
                    e.reason, e.namespace, e.name
                )),
            }
        }
        errors
    }
}
