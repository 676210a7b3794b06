//! The head of phase 1 that no request can change, run once per engine and
//! set of preset TX variables instead of once per transaction.
//!
//! The CRS starts every transaction with about forty rules that read and
//! write nothing but TX (crs-setup's `SecAction`s, the 901 defaults such
//! as `SecRule &TX:inbound_anomaly_score_threshold "@eq 0"
//! "setvar:tx.inbound_anomaly_score_threshold=5"`, the 901200 counters):
//! about 6 % of a benign GET. Their outcome depends only on TX as the
//! transaction starts it, which is empty but for the virtual server's
//! presets. So the engine runs them once per preset set on a transaction of
//! its own, up to the first rule that could see the request (a target,
//! operator argument or macro outside TX, a `ctl`, `initcol`, `setenv`) or
//! that left a trace beyond TX when it ran (a match that logs or disrupts,
//! a severity, the regex work bound; CRS 901001 denies only when the setup
//! file is missing); a transaction then starts phase 1 from
//! the TX and the loop state it left ([`Head`]).

use std::sync::{Arc, RwLock};

use super::compile::{CDisruptive, CMacro, COp, CPart, CRule, CSetOp, Link};
use crate::seclang::Collection;

/// Where phase 1 stood after its request-independent head.
#[derive(Debug, Default)]
pub(crate) struct Head {
    /// TX as the transaction started it (the presets), in order.
    pub presets: Vec<(Vec<u8>, Vec<u8>)>,
    /// The position in phase 1's list to go on from (0: nothing to skip).
    pub resume: usize,
    /// TX after the head, in order: name, value, lower-case name.
    pub tx: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>,
    pub skip_marker: Option<u32>,
    pub skip_next: u32,
    /// The regex work bound's counts.
    pub ops: u64,
    pub scanned: u64,
    /// MATCHED_VAR(_NAME) when set, and MATCHED_VARS.
    pub mv: Option<(Vec<u8>, Vec<u8>)>,
    pub matched_vars: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Most preset sets an engine keeps a head for (one per virtual server
/// setting the paranoia level or thresholds differently).
const MAX_HEADS: usize = 16;

/// The heads an engine computed, per preset set.
#[derive(Debug, Default)]
pub(crate) struct Heads(RwLock<Vec<Arc<Head>>>);

impl Heads {
    /// The head for the presets `presets()` yields, computed by `make` the
    /// first time.
    pub fn get_or_make<'p, I>(
        &self,
        presets: impl Fn() -> I,
        make: impl FnOnce() -> Head,
    ) -> Option<Arc<Head>>
    where
        I: ExactSizeIterator<Item = (&'p [u8], &'p [u8])>,
    {
        let same = |h: &Head| {
            let p = presets();
            h.presets.len() == p.len()
                && h.presets
                    .iter()
                    .zip(p)
                    .all(|((a, b), (c, d))| a == c && b == d)
        };
        if let Ok(heads) = self.0.read() {
            if let Some(h) = heads.iter().find(|h| same(h)) {
                return Some(h.clone());
            }
            if heads.len() >= MAX_HEADS {
                return None;
            }
        }
        let h = Arc::new(make());
        let mut heads = self.0.write().ok()?;
        if heads.len() < MAX_HEADS && !heads.iter().any(|h| same(h)) {
            heads.push(h.clone());
        }
        Some(h)
    }
}

#[cfg(test)]
impl Heads {
    /// Each head's presets (names) and resume position.
    pub fn resumes(&self) -> Vec<(Vec<Vec<u8>>, usize)> {
        self.0
            .read()
            .map(|h| {
                h.iter()
                    .map(|h| (h.presets.iter().map(|p| p.0.clone()).collect(), h.resume))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Whether a rule reads and writes nothing but TX (and the matched
/// variable it sets itself). Whether it disrupts, logs or counts is known
/// only once it ran: the head ends with a rule that did.
pub(crate) fn pure(r: &CRule) -> bool {
    r.links.iter().all(pure_link)
}

/// Whether a rule that matched acts beyond TX: it blocks, allows or
/// redirects (in some transactions' mode if not in the head's).
pub(crate) fn disrupts(r: &CRule) -> bool {
    !matches!(r.disruptive, CDisruptive::Pass)
}

fn pure_link(l: &Link) -> bool {
    l.targets.iter().all(|t| t.coll == Collection::Tx)
        && l.exclusions.iter().all(|e| e.coll == Collection::Tx)
        && match &l.op {
            COp::Op(_) | COp::Sqli | COp::Xss | COp::Never => true,
            COp::Dynamic(_, m) | COp::DynamicRx(m) => tx_only(m),
        }
        && l.setvars.iter().all(|s| {
            &*s.coll == "tx"
                && tx_only(&s.key)
                && match &s.op {
                    CSetOp::Set(m) | CSetOp::Add(m) | CSetOp::Sub(m) => tx_only(m),
                    CSetOp::Delete => true,
                }
        })
        && l.post.is_empty()
}

/// A macro that expands to literals, TX variables, the matched variable
/// or the rule's own fields.
fn tx_only(m: &CMacro) -> bool {
    m.parts.iter().all(|p| match p {
        CPart::Lit(_) => true,
        CPart::Var { coll, .. } => matches!(
            coll,
            Collection::Tx | Collection::MatchedVar | Collection::MatchedVarName | Collection::Rule
        ),
    })
}
