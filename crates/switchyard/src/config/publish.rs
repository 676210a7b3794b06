//! What may be published to a cluster: one check for every way a
//! configuration reaches etcd (the admin API's `PUT /api/v1/cluster/config`
//! on a running node, and `switchyard cluster init` before any node runs),
//! so a text refused by one is refused by the other.

use crate::cluster::{self, Node};

/// Why a configuration may not be published.
#[derive(Debug)]
pub enum Unpublishable {
    /// It would not run: not TOML, empty, a node-local section, or invalid
    /// as the nodes would read it.
    Invalid(String),
    /// etcd could not be read (the files published so far).
    Etcd(String),
}

impl std::fmt::Display for Unpublishable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unpublishable::Invalid(e) => write!(f, "{e}"),
            Unpublishable::Etcd(e) => write!(f, "etcd: {e}"),
        }
    }
}

/// Checks `text` as `node`'s cluster will run it: never empty, no
/// node-local section, and valid after the node's own file, with relative
/// paths from the node's folder and the files published so far written
/// there.
pub fn check(node: &Node, text: &str) -> Result<(), Unpublishable> {
    cluster::check_published(text).map_err(Unpublishable::Invalid)?;
    cluster::sync_files(&node.settings).map_err(Unpublishable::Etcd)?;
    let name = format!("{} (to publish)", node.local_name);
    super::parse(&name, &node.combined(text), None)
        .map(|_| ())
        .map_err(|e| Unpublishable::Invalid(format!("the configuration is not valid:\n{e}")))
}
