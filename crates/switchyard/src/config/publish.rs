//! What may be published to a cluster: one check for every way a
//! configuration reaches etcd (the admin API's `PUT /api/v1/cluster/config`
//! on a running node, and `switchyard cluster init` before any node runs),
//! so a text refused by one is refused by the other.

use super::ConfigErrors;
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
    check_after(node, text, None).map(|_| ())
}

/// `check`, for a publisher that checks text after text (a controller):
/// given the snapshot its previous check built, the parts of `text` that
/// did not change are not parsed again (config/parts.rs). The snapshot
/// built is returned for the next check; it is never run.
pub fn check_after(
    node: &Node,
    text: &str,
    previous: Option<&super::Snapshot>,
) -> Result<super::Snapshot, Unpublishable> {
    cluster::check_not_empty(text).map_err(Unpublishable::Invalid)?;
    cluster::sync_files(&node.settings).map_err(Unpublishable::Etcd)?;
    let name = format!("{} (to publish)", node.local_name);
    parse_published(node, &name, text, previous)
        .map_err(|e| Unpublishable::Invalid(format!("the configuration is not valid:\n{e}")))
}

/// The node-local sections as a file sets them, for comparison.
#[derive(Debug, serde::Deserialize)]
struct NodeLocal {
    #[serde(default)]
    global: super::model::Global,
    admin: Option<super::model::Admin>,
    cluster: Option<super::model::ClusterFile>,
}

/// Parses and builds what `node` runs with `published` (its file, then the
/// published text: `Node::combined`), refusing a published text that sets a
/// node-local section ([cluster], [admin], [global]). The combined text is
/// parsed once: the node-local sections it yields must be exactly those of
/// the node's own file, read alone (small). The model's types have no
/// equality, so they are compared by their `Debug` form, which holds every
/// value and its span; the node's file is the start of the combined text, so
/// its values sit at the same offsets in both. Before, the published text
/// was parsed alone to look at its top-level keys, then again with the
/// node's file: at 10,000 routes (3.4 MB) that first parse took as long as
/// the build of the 10,000 pools.
pub fn parse_published(
    node: &Node,
    name: &str,
    published: &str,
    previous: Option<&super::Snapshot>,
) -> Result<super::Snapshot, ConfigErrors> {
    cluster::check_not_empty(published).map_err(|e| ConfigErrors::message(name, &e))?;
    let own: NodeLocal = super::read_part(&node.local_name, &node.local_text, None)?;
    super::parse_vetted(name, &node.combined(published), previous, |file| {
        let sets = [
            (
                "global",
                format!("{:?}", file.global) != format!("{:?}", own.global),
            ),
            (
                "admin",
                format!("{:?}", file.admin) != format!("{:?}", own.admin),
            ),
            (
                "cluster",
                format!("{:?}", file.cluster) != format!("{:?}", own.cluster),
            ),
        ];
        match sets.iter().find(|(_, differs)| *differs) {
            Some((k, _)) => Err(format!(
                "the published configuration sets [{k}], which is node-local (each node's own file has it)"
            )),
            None => Ok(()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> cluster::Settings {
        cluster::Settings {
            endpoints: vec![],
            prefix: "/sy/prod".into(),
            node: "n1".into(),
            status_ttl_s: 5,
            watch_idle: std::time::Duration::from_secs(5),
            startup_wait: std::time::Duration::from_secs(1),
            state_dir: None,
            access: std::sync::Arc::default(),
            acme_key: None,
        }
    }

    const POOL: &str = "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n";

    fn node(local: &str) -> Node {
        Node::detached(settings(), "node.toml", local)
    }

    #[test]
    fn a_published_text_may_not_set_or_extend_a_node_local_section() {
        fn refusal(n: &Node, text: &str) -> String {
            parse_published(n, "t", text, None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        }
        // A node whose file sets all three, and one that sets only [cluster].
        let full = node("[global]\nworkers = 1\n[admin]\nlisten = \"127.0.0.1:9\"\n[cluster]\nendpoints = [\"http://127.0.0.1:2379\"]\nprefix = \"/sy\"\nnode = \"n1\"\n");
        let bare = node(
            "[cluster]\nendpoints = [\"http://127.0.0.1:2379\"]\nprefix = \"/sy\"\nnode = \"n1\"\n",
        );
        for n in [&full, &bare] {
            assert_eq!(refusal(n, POOL), "", "the plain text is accepted");
            // Comments and blank lines only: empty.
            assert!(refusal(n, "# nothing\n\n").contains("empty"));
            // Extending a section, or making it: a sub-table of [admin].
            let extra = "[admin.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n";
            let e = refusal(n, &format!("{POOL}{extra}"));
            assert!(e.contains("node-local"), "{extra:?}: {e}");
        }
        // Setting a section the node's file lacks.
        for (extra, section) in [
            ("[global]\nworkers = 2\n", "[global]"),
            ("[admin]\nlisten = \"127.0.0.1:1\"\n", "[admin]"),
        ] {
            let e = refusal(&bare, &format!("{POOL}{extra}"));
            assert!(
                e.contains(&format!("sets {section}, which is node-local")),
                "{extra:?}: {e}"
            );
        }
    }
}
