//! Which watch events can change a render: not those that change only an
//! object's status (or its resourceVersion and managedFields).
//!
//! Each render has statuses written (status_writer.rs), and each write
//! comes back as a watch event. Rendering again for it finds nothing to
//! publish, but at 10,000 routes that render took 4 to 6 s (release build,
//! loaded 2-core machine; BENCHMARKS.md) and the next route change waited
//! behind one to three of them. The render reads statuses only to decide
//! which stale entries of ours to clear, which the next render of a real
//! change still does.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde_json::Value;

/// The render's inputs of one object, hashed: the object as the typed
/// store holds it (types.rs names only the fields read), without status,
/// resourceVersion and managedFields. None if it cannot be serialized (the
/// caller then treats every event as a change).
pub fn fingerprint<K: serde::Serialize>(o: &K) -> Option<u64> {
    let mut v = serde_json::to_value(o).ok()?;
    if let Value::Object(m) = &mut v {
        m.remove("status");
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    Some(h.finish())
}

/// The fingerprints of a watch's objects, by namespace/name.
#[derive(Default)]
pub struct Seen(HashMap<(Option<String>, String), u64>);

impl Seen {
    /// Records `o` and says whether its render inputs changed (new
    /// objects and unknown fingerprints count as changed).
    pub fn changed<K: kube::Resource + serde::Serialize>(&mut self, o: &K) -> bool {
        let m = o.meta();
        let key = (m.namespace.clone(), m.name.clone().unwrap_or_default());
        match fingerprint(o) {
            Some(f) => self.0.insert(key, f) != Some(f),
            None => {
                self.0.remove(&key);
                true
            }
        }
    }

    pub fn forget<K: kube::Resource>(&mut self, o: &K) {
        let m = o.meta();
        self.0
            .remove(&(m.namespace.clone(), m.name.clone().unwrap_or_default()));
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(v: Value) -> crate::types::HttpRoute {
        serde_json::from_value(v).expect("a route")
    }

    #[test]
    fn a_status_write_is_not_a_change_and_a_spec_edit_is() {
        let base = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "n", "resourceVersion": "1"},
            "spec": {"parentRefs": [{"name": "gw"}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}]}]}});
        let mut seen = Seen::default();
        assert!(
            seen.changed(&route(base.clone())),
            "a new object is a change"
        );
        assert!(
            !seen.changed(&route(base.clone())),
            "the same object again is not"
        );
        let mut status = base.clone();
        status["metadata"]["resourceVersion"] = json!("2");
        status["status"] = json!({"parents": [{"parentRef": {"name": "gw"}, "controllerName": "x", "conditions": []}]});
        assert!(
            !seen.changed(&route(status.clone())),
            "a status write is not a change"
        );
        let mut edit = status;
        edit["metadata"]["resourceVersion"] = json!("3");
        edit["spec"]["rules"][0]["matches"][0]["path"]["value"] = json!("/b");
        assert!(
            seen.changed(&route(edit.clone())),
            "a path edit is a change"
        );
        let mut labelled = edit;
        labelled["metadata"]["labels"] = json!({"team": "a"});
        assert!(
            seen.changed(&route(labelled.clone())),
            "a label is a change"
        );
        seen.forget(&route(labelled.clone()));
        assert!(
            seen.changed(&route(labelled)),
            "after a delete, the same object is new"
        );
    }
}
