//! One link of a rule: its values (a shared target list or its own),
//! each through the link's transformations (the cache) to its operator,
//! with the regex work bound; MATCHED_VAR(S) on a match.

use super::cache::{ListSummary, SAME, UNSET};
use super::collect::sel_matches_at;
use super::data::{kv_of, Data, ListId, Src, Val};
use super::{State, Transaction, Which};
use crate::engine::compile::{
    COp, CRule, Exclusion, Link, Program, Sel, NO_SUMMARY_GROUP, NO_TARGETS_ID,
};
use crate::engine::{Engine, Limits};
use crate::operator;
use crate::seclang::Collection;

impl Transaction<'_> {
    /// The target removals (`ctl:ruleRemoveTarget...`) for rule `r`.
    /// The target removals that apply to `r`, into `out` (cleared first).
    fn removals_into(&self, r: &CRule, out: &mut Vec<Exclusion>) {
        out.clear();
        // A plain loop: asked by every link, and most removals apply to
        // none of them.
        for (w, e) in &self.st.removed_targets {
            let applies = match w {
                Which::Ids(g) => g.iter().any(|g| g.contains(r.id)),
                Which::Tag(t) => r.tag_ids.contains(t),
                Which::Msg(m) => r.msg_raw.as_ref().is_some_and(|x| x == m),
            };
            if applies {
                out.push(e.clone());
            }
        }
    }

    pub(super) fn eval_link(&mut self, eng: &Engine, r: &CRule, link: &Link) -> bool {
        if link.unconditional {
            self.on_match(r, link);
            return true;
        }
        if let Some(key) = &link.tx_key {
            // A removal of another collection (CRS 941010 takes
            // REQUEST_FILENAME from the XSS rules of most requests) leaves
            // a TX target as it is.
            if self
                .st
                .removed_targets
                .iter()
                .all(|(_, e)| e.coll != Collection::Tx)
            {
                return self.eval_tx_key(eng, r, link, key);
            }
        }
        // Reused: the rules of most requests run after a ctl removal
        // (CRS 941010), each link asking for its own.
        let mut removals = std::mem::take(&mut self.removals);
        self.removals_into(r, &mut removals);
        // The values of a shared target list, collected once per phase
        // (and again after a ctl). Target removals (`ctl:ruleRemoveTarget*`)
        // are then applied per value (`removed_value`): CRS 941010 removes
        // REQUEST_FILENAME from the 33 XSS rules of almost every request,
        // which would otherwise collect their own lists and lose the list
        // summary. Lists that removals cannot be applied to per value
        // (counted; holding XML or values without a data slot) are the
        // rule's own.
        let by_value = !removals.is_empty() && link.targets.iter().all(|t| !t.count);
        let mut shared = (link.targets_id != NO_TARGETS_ID && (removals.is_empty() || by_value))
            .then_some(link.targets_id as usize);
        let mut vals = match shared {
            Some(id) => self.shared_list(link, id),
            None => std::mem::take(&mut self.vals),
        };
        if let Some(id) = shared.filter(|_| by_value) {
            let per_value = |v: &Val| match v.src {
                Src::List(l, ..) => l != ListId::XmlAttrs,
                Src::Single(_) => true,
                _ => false,
            };
            if !vals.iter().all(per_value) {
                self.lists[id] = (self.lists_gen, vals);
                vals = std::mem::take(&mut self.vals);
                shared = None;
            }
        }
        if shared.is_none() {
            vals.clear();
        }
        for t in link.targets.iter().filter(|_| shared.is_none()) {
            let whole = removals.iter().any(|e| {
                e.coll == t.coll
                    && match (&e.sel, &t.sel) {
                        (Sel::All, _) => true,
                        (Sel::Key(a, _), Sel::Key(b, _)) => a == b,
                        _ => false,
                    }
            });
            if whole {
                continue;
            }
            self.collect(t, &link.exclusions, &mut vals, Some(&removals));
        }
        let filter_removals = by_value && shared.is_some();
        let arg = self.op_arg(link, r);
        let arg = arg.as_deref();
        let limits = &eng.limits;
        let prog = &eng.prog;
        let mut any = false;
        let mut tmp = std::mem::take(&mut self.tmpval);
        let ruled_out = shared.is_some()
            && link.summary_group != NO_SUMMARY_GROUP
            && self.summary_rules_out(prog, limits, link, &vals);
        for v in vals.iter().filter(|_| !ruled_out) {
            if filter_removals && self.removed_value(link, v, &removals) {
                continue;
            }
            let slot = match v.slot(&self.d) {
                Some(s) => s,
                None => self.cache.volatile(),
            };
            if link.multi_match {
                // The value, then each transformation's result that
                // differs from the one before. The value is copied (the
                // actions of a match may change it, if it is a TX
                // variable); the lists are reused.
                tmp.clear();
                tmp.extend_from_slice(v.value(&self.d, &self.st.tx));
                let mut path = std::mem::take(&mut self.mm_path);
                path.clear();
                let mut n = link.tnode;
                while n != 0 {
                    path.push(n);
                    n = prog.tnodes[n as usize].parent;
                }
                let mut results = std::mem::take(&mut self.mm_results);
                results.clear();
                results.push(SAME);
                for &n in path.iter().rev() {
                    let r = self.cache.get(&prog.tnodes, slot, n, &tmp);
                    if Some(&r) != results.last() {
                        results.push(r);
                    }
                }
                for &res in &results {
                    let input = self.cache.slice(res, &tmp);
                    if run_op(&mut self.st, limits, link, input, arg) {
                        any = true;
                        set_matched(&mut self.st, &self.d, v, input);
                        self.on_match(r, link);
                    }
                }
                self.mm_path = path;
                self.mm_results = results;
            } else {
                let orig: &[u8] = if let Src::Tx(i) = v.src {
                    tmp.clear();
                    tmp.extend_from_slice(self.st.tx.at(i).1);
                    &tmp
                } else {
                    v.value_d(&self.d)
                };
                let res = self.cache.get(&prog.tnodes, slot, link.tnode, orig);
                let sig = if link.sig {
                    self.cache.sig(res, slot, orig)
                } else {
                    None
                };
                let sig = sig.map(|i| &self.cache.sigs[i as usize]);
                let input: &[u8] = self.cache.slice(res, orig);
                if run_op_sig(&mut self.st, limits, link, input, arg, sig) {
                    any = true;
                    set_matched(&mut self.st, &self.d, v, input);
                    self.on_match(r, link);
                }
            }
        }
        self.tmpval = tmp;
        if self.cache.next_volatile > 0 {
            // Only this link's: the rows past them are clear already.
            let used = self.cache.next_volatile as usize;
            for v in self.cache.vslots.iter_mut().take(used).flatten() {
                v.fill(UNSET);
            }
            self.cache.next_volatile = 0;
        }
        match shared {
            // `shared_list` made room for it.
            Some(id) => self.lists[id] = (self.lists_gen, vals),
            None => self.vals = vals,
        }
        self.removals = removals;
        any
    }

    /// [`Transaction::eval_link`] of a link reading one TX variable as it
    /// is (`Link::tx_key`), with no removal of a TX target in force: what
    /// collecting its one-value list would do.
    fn eval_tx_key(&mut self, eng: &Engine, r: &CRule, link: &Link, key: &[u8]) -> bool {
        let Some(i) = self.st.tx.index_of(key) else {
            return false;
        };
        let arg = self.op_arg(link, r);
        // A copy: the actions of a match may change the variable.
        let mut value = std::mem::take(&mut self.tmpval);
        value.clear();
        value.extend_from_slice(self.st.tx.at(i as u32).1);
        let m = run_op_sig(
            &mut self.st,
            &eng.limits,
            link,
            &value,
            arg.as_deref(),
            None,
        );
        if m {
            let v = Val {
                coll: Collection::Tx,
                src: Src::Tx(i as u32),
            };
            set_matched(&mut self.st, &self.d, &v, &value);
            self.on_match(r, link);
        }
        self.tmpval = value;
        m
    }

    /// Shared target list `id` of `link` for this phase: taken from the
    /// transaction (its capacity reused), collected again if stale (with
    /// the link's exclusions; never with target removals, which differ
    /// per rule). The caller puts it back.
    fn shared_list(&mut self, link: &Link, id: usize) -> Vec<Val> {
        if self.lists.len() <= id {
            self.lists.resize_with(id + 1, Default::default);
        }
        let (gen, list) = &mut self.lists[id];
        let fresh = *gen != self.lists_gen;
        let mut vals = std::mem::take(list);
        if fresh {
            vals.clear();
            for t in &link.targets {
                self.collect(t, &link.exclusions, &mut vals, None);
            }
        }
        vals
    }

    /// Whether a target removal of the rule takes out `v`, a member of a
    /// shared list: what collecting the rule's own list would have left
    /// out (a removal of the whole collection or of the target's key, or
    /// one matching the member's key).
    fn removed_value(&self, link: &Link, v: &Val, removals: &[Exclusion]) -> bool {
        match v.src {
            Src::List(l, i, _) => {
                let kv = kv_of(&self.d, l, i);
                removals.iter().any(|e| {
                    e.coll == v.coll
                        && sel_matches_at(&self.sel_cache, &e.sel, &kv.key, kv.slot + 1)
                })
            }
            Src::Single(_) => removals.iter().any(|e| {
                e.coll == v.coll
                    && match &e.sel {
                        Sel::All => true,
                        Sel::Key(a, _) => link.targets.iter().any(|t| {
                            t.coll == v.coll && matches!(&t.sel, Sel::Key(b, _) if a == b)
                        }),
                        Sel::Regex(..) => false,
                    }
            }),
            _ => false,
        }
    }

    /// Whether the union of the summaries of a shared list's values rules
    /// out every value for `link` (see `Link::summary_group`); the work
    /// bound then counts the scans as if each value had been looked at.
    fn summary_rules_out(
        &mut self,
        prog: &Program,
        limits: &Limits,
        link: &Link,
        vals: &[Val],
    ) -> bool {
        let s = self.list_summary(prog, link, vals);
        let Some(sig) = self.cache.sigs.get(s.sig as usize) else {
            return false;
        };
        let may = match &link.op {
            COp::Op(operator::Operator::Rx(rx)) => rx.may_match_summary(sig),
            COp::Op(operator::Operator::Pm(pm)) => pm.may_match_summary(sig),
            _ => true,
        };
        !may && count_skipped_scans(&mut self.st, limits, s.values, s.bytes)
    }

    /// The summary of `vals` through `link`'s pipeline, built by the first
    /// link of its group to ask in this generation.
    fn list_summary(&mut self, prog: &Program, link: &Link, vals: &[Val]) -> ListSummary {
        let g = link.summary_group as usize;
        if let Some(s) = self.summaries.get(g).filter(|s| s.gen == self.lists_gen) {
            return *s;
        }
        let mut union = operator::Sig::empty();
        let mut bytes = 0u64;
        let mut known = true;
        for v in vals {
            let Some(slot) = v.slot(&self.d) else {
                known = false;
                break;
            };
            let orig = v.value_d(&self.d);
            let res = self.cache.get(&prog.tnodes, slot, link.tnode, orig);
            let Some(i) = self.cache.sig(res, slot, orig) else {
                known = false;
                break;
            };
            union.add(&self.cache.sigs[i as usize]);
            bytes += self.cache.slice(res, orig).len() as u64;
        }
        let sig = if known {
            self.cache.sigs.push(union);
            (self.cache.sigs.len() - 1) as u32
        } else {
            UNSET
        };
        let s = ListSummary {
            gen: self.lists_gen,
            sig,
            values: vals.len() as u64,
            bytes,
        };
        if let Some(slot) = self.summaries.get_mut(g) {
            *slot = s;
        }
        s
    }

    /// The expanded argument of an operator with macros.
    fn op_arg(&self, link: &Link, r: &CRule) -> Option<Vec<u8>> {
        match &link.op {
            COp::Dynamic(_, m) | COp::DynamicRx(m) => {
                let mut out = Vec::new();
                self.expand(m, Some(r), &mut out);
                Some(out)
            }
            _ => None,
        }
    }
}

/// MATCHED_VAR(_NAME) and a MATCHED_VARS member for a match of `v`.
fn set_matched(st: &mut State, d: &Data, v: &Val, value: &[u8]) {
    let State {
        mv,
        has_mv,
        matched_vars,
        mvs_len,
        tx,
        ..
    } = st;
    mv.0.clear();
    mv.0.extend_from_slice(v.coll.name().as_bytes());
    if let Some(k) = v.key(d, tx) {
        mv.0.push(b':');
        mv.0.extend_from_slice(k);
    }
    mv.1.clear();
    mv.1.extend_from_slice(value);
    *has_mv = true;
    if *mvs_len == matched_vars.len() {
        matched_vars.push(Default::default());
    }
    let e = &mut matched_vars[*mvs_len];
    e.0.clear();
    e.0.extend_from_slice(&mv.0);
    e.1.clear();
    e.1.extend_from_slice(value);
    *mvs_len += 1;
}

/// Counts `values` scans over `bytes` that were ruled out without being
/// run, as `run_op_sig` would have counted them one by one; false
/// (nothing counted) when one of them would have reached the work bound,
/// for the caller to run them one by one.
fn count_skipped_scans(st: &mut State, limits: &Limits, values: u64, bytes: u64) -> bool {
    if st.limit_hit {
        // Past the bound, scans neither count nor match.
        return true;
    }
    if st.ops + values > limits.max_operator_evals || st.scanned + bytes > limits.max_scan_bytes {
        return false;
    }
    st.ops += values;
    st.scanned += bytes;
    true
}

/// Runs a link's operator on one (transformed) value, counting the regex
/// work; negation applied.
fn run_op(st: &mut State, limits: &Limits, link: &Link, input: &[u8], arg: Option<&[u8]>) -> bool {
    run_op_sig(st, limits, link, input, arg, None)
}

/// [`run_op`] with the value's prefilter summary, if the link has use for
/// one (`Link::sig`).
fn run_op_sig(
    st: &mut State,
    limits: &Limits,
    link: &Link,
    input: &[u8],
    arg: Option<&[u8]>,
    sig: Option<&operator::Sig>,
) -> bool {
    let raw = match &link.op {
        COp::Never => false,
        COp::Dynamic(o, _) => o.matches_arg(arg.unwrap_or(b""), input, None),
        COp::Op(o) if !link.op.is_scanner() => o.matches(input, None),
        _ => {
            if !st.limit_hit
                && (st.ops >= limits.max_operator_evals
                    || st.scanned + input.len() as u64 > limits.max_scan_bytes)
            {
                st.limit_hit = true;
            }
            if st.limit_hit {
                false
            } else {
                st.ops += 1;
                st.scanned += input.len() as u64;
                input.len() >= link.min_len && scan(st, link, input, arg, sig)
            }
        }
    };
    raw != link.negated
}

fn scan(
    st: &mut State,
    link: &Link,
    input: &[u8],
    arg: Option<&[u8]>,
    sig: Option<&operator::Sig>,
) -> bool {
    let caps = if link.capture {
        Some(&mut st.captures)
    } else {
        None
    };
    let m = match &link.op {
        COp::Op(operator::Operator::Rx(rx)) if sig.is_some() => match sig {
            Some(sig) => rx.matches_sig(input, sig, caps),
            None => rx.matches(input, caps),
        },
        COp::Op(operator::Operator::Pm(pm)) if sig.is_some() => match sig {
            Some(sig) => pm.matches_sig(input, sig, caps),
            None => pm.matches(input, caps),
        },
        COp::Op(o) => o.matches(input, caps),
        COp::DynamicRx(_) => {
            let pattern = String::from_utf8_lossy(arg.unwrap_or(b""));
            match operator::Rx::new(&pattern) {
                Ok(rx) => rx.matches(input, caps),
                Err(_) => false,
            }
        }
        COp::Sqli => match crate::libinjection::sqli_fingerprint(input) {
            Some(fp) => {
                if link.capture {
                    st.tx.set(b"0", fp.as_bytes().to_vec());
                }
                return true;
            }
            None => false,
        },
        COp::Xss => crate::libinjection::detect_xss(input),
        _ => false,
    };
    if m && link.capture && matches!(link.op, COp::Op(_) | COp::DynamicRx(_)) {
        const KEYS: [&[u8]; 10] = [b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"];
        for (i, k) in KEYS.iter().enumerate() {
            if let Some(v) = st.captures.get(i) {
                st.tx.set_slice(k, v);
            }
        }
    }
    m
}
