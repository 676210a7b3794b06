//! How far the watches have read, so that a render can say which view of
//! the cluster it saw and publication never goes back to an older one.
//!
//! Why not "the highest resourceVersion of the objects held" (what the
//! controller logged before): that number falls whenever the object that
//! held it is deleted, and the object that holds it is often one whose
//! status this controller has just written (a status write bumps the
//! resourceVersion). The conformance cases delete their route right after
//! its status shows Accepted, so the log read "render 57 (objects up to
//! resourceVersion 322)" after a render at 325 although nothing older was
//! seen. A watch's position counts every event it applied, deletions
//! included (a DELETED event carries the revision of the deletion), so it
//! never falls: renders are ordered by their views, and a render whose
//! view is behind the published one's in any kind is not published.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The resourceVersion of an object as a number (etcd revisions in
/// practice; 0 when absent or not a number).
pub fn resource_version(m: &ObjectMeta) -> u64 {
    m.resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}

/// One watch's position: the newest resourceVersion of an event its store
/// has applied.
#[derive(Default, Debug)]
pub struct Position {
    applied: AtomicU64,
}

impl Position {
    /// The store has applied an event of this resourceVersion (an update,
    /// a deletion, or the last object of a relist, once swapped in).
    pub fn advance(&self, rv: u64) {
        self.applied.fetch_max(rv, Ordering::SeqCst);
    }

    pub fn get(&self) -> u64 {
        self.applied.load(Ordering::SeqCst)
    }
}

/// What one render saw: each watch's position, read before its store
/// (the store holds at least what the position says).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View(Vec<u64>);

impl View {
    pub fn read(positions: &[&Position]) -> View {
        View(positions.iter().map(|p| p.get()).collect())
    }

    /// The newest change seen, of any kind.
    pub fn newest(&self) -> u64 {
        self.0.iter().copied().max().unwrap_or(0)
    }

    /// Some watch had read less than it had for `other`: this view is
    /// older than `other` in that kind. (An empty `other`, nothing
    /// published yet, is behind nothing.)
    pub fn is_behind(&self, other: &View) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .any(|(mine, theirs)| mine < theirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_moves_the_view_forward_where_the_newest_object_falls_back() {
        // Route "a" written at 320, its status by us at 325, then deleted
        // at 330: the objects held peak at 325 and fall to 322 (a slice).
        let routes = Position::default();
        let slices = Position::default();
        slices.advance(322);
        routes.advance(320);
        routes.advance(325);
        let before = View::read(&[&routes, &slices]);
        routes.advance(330); // the DELETED event's revision
        let after = View::read(&[&routes, &slices]);
        assert_eq!(before.newest(), 325);
        assert_eq!(after.newest(), 330);
        assert!(!after.is_behind(&before));
        assert!(before.is_behind(&after));
    }

    #[test]
    fn a_position_never_falls_and_an_empty_view_is_behind_nothing() {
        let p = Position::default();
        p.advance(10);
        p.advance(7); // a relist whose newest object is older
        assert_eq!(p.get(), 10);
        let v = View::read(&[&p]);
        assert!(!v.is_behind(&View::default()));
        assert!(!v.is_behind(&v.clone()));
    }
}
