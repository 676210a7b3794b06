//! The phase loop and a rule's evaluation: skips, markers, removed rules,
//! the head of phase 1 run once per engine ([`head`]), and what a matched
//! rule leaves (severity, disruption, the logged match).

use crate::engine::compile::{CDisruptive, CRule, Item, Program};
use crate::engine::{head, Engine, Intervention, InterventionKind, MatchedRule, Request};
use crate::seclang::{AllowScope, EngineMode};

use super::Transaction;

impl Transaction<'_> {
    pub(super) fn run_phase(&mut self, phase: u8) {
        if self.st.mode == EngineMode::Off {
            return;
        }
        if phase < 5 && self.outcome.interrupted.is_some() {
            return;
        }
        let eng = self.eng.clone();
        let prog: &Program = &eng.prog;
        let list = &prog.phases[usize::from(phase)];
        // The data changed since the last phase.
        self.lists_gen += 1;
        let mut i = if phase == 1 {
            self.resume_head(&eng)
        } else {
            0
        };
        while i < list.len() {
            let item = list[i];
            i += 1;
            if self.skipped(item) {
                continue;
            }
            if let Some(a) = self.st.allow {
                let skip = match a {
                    AllowScope::All => phase < 5,
                    AllowScope::Request => phase <= 2,
                    AllowScope::Phase => phase == self.st.allow_phase,
                };
                if skip {
                    break;
                }
            }
            let Item::Rule(ri, jump) = item else { continue };
            let r = &prog.rules[ri as usize];
            if self.removed(r) {
                continue;
            }
            if self.eval_rule(&eng, r) {
                self.skip_after_match(r, jump, &mut i);
            }
            if phase < 5 && self.outcome.interrupted.is_some() {
                break;
            }
        }
        // How many TX variables transactions hold, for the next ones' room
        // (read first: no write to the shared line once it settled).
        // Bounded: request data may name TX variables.
        let n = self.st.tx.entries.len().min(1024);
        if n > eng.tx_vars_hint.load(std::sync::atomic::Ordering::Relaxed) {
            eng.tx_vars_hint
                .fetch_max(n, std::sync::atomic::Ordering::Relaxed);
        }
        if self.st.allow == Some(AllowScope::Phase) && self.st.allow_phase == phase {
            self.st.allow = None;
        }
        self.outcome.limits_exceeded = self.st.limit_hit;
    }

    /// Starts phase 1 where its request-independent head left TX and the
    /// loop ([`head`]): the position to go on from (0 when there is
    /// no head for this transaction's presets).
    fn resume_head(&mut self, eng: &Engine) -> usize {
        if !self.use_head {
            return 0;
        }
        // Nothing but the presets ran before phase 1: TX is all there is.
        let tx = &self.st.tx;
        let Some(h) = eng.heads.get_or_make(
            || tx.pairs(),
            || Self::make_head(eng, &tx.pairs().collect::<Vec<_>>()),
        ) else {
            return 0;
        };
        if h.resume == 0 {
            return 0;
        }
        self.st.tx.recycle();
        for (k, v, lower) in &h.tx {
            self.st.tx.push_new(k, v, lower);
        }
        self.st.skip_marker = h.skip_marker;
        self.st.skip_next = h.skip_next;
        self.st.ops = h.ops;
        self.st.scanned = h.scanned;
        self.st.has_mv = h.mv.is_some();
        if let Some((n, v)) = &h.mv {
            self.st.mv.0.clear();
            self.st.mv.0.extend_from_slice(n);
            self.st.mv.1.clear();
            self.st.mv.1.extend_from_slice(v);
        }
        self.st.mvs_len = 0;
        for (n, v) in &h.matched_vars {
            if self.st.mvs_len == self.st.matched_vars.len() {
                self.st.matched_vars.push((Vec::new(), Vec::new()));
            }
            let e = &mut self.st.matched_vars[self.st.mvs_len];
            e.0.clear();
            e.0.extend_from_slice(n);
            e.1.clear();
            e.1.extend_from_slice(v);
            self.st.mvs_len += 1;
        }
        h.resume
    }

    /// Runs the head of phase 1 on a transaction of no request with these
    /// presets: once to find where it ends, again to stop just before (a
    /// rule that left a trace beyond TX ends it after the fact).
    fn make_head(eng: &Engine, presets: &[(&[u8], &[u8])]) -> head::Head {
        let req = Request {
            method: "GET",
            uri: b"/",
            uri_raw: b"/",
            protocol: "HTTP/1.1",
            headers: &[],
            remote_addr: "",
            remote_port: 0,
            local_addr: "",
            local_port: 0,
            unique_id: "",
        };
        let start = |limit: usize| {
            let mut t = Transaction::new(eng, req.clone());
            for (k, v) in presets {
                t.preset_tx(k, v);
            }
            let end = t.run_head(eng, limit);
            (t, end)
        };
        let (t, end) = match start(usize::MAX) {
            (_, Err(e)) => start(e),
            done => done,
        };
        // An error here would mean the second run went otherwise.
        let resume = end.unwrap_or_default();
        let st = &t.st;
        head::Head {
            presets: presets
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
            resume,
            tx: st
                .tx
                .pairs()
                .map(|(k, v)| (k.to_vec(), v.to_vec(), k.to_ascii_lowercase()))
                .collect(),
            skip_marker: st.skip_marker,
            skip_next: st.skip_next,
            ops: st.ops,
            scanned: st.scanned,
            mv: st.has_mv.then(|| st.mv.clone()),
            matched_vars: st.matched_vars[..st.mvs_len].to_vec(),
        }
    }

    /// Runs phase 1 from its start while the rules are pure
    /// ([`head::pure`]) and before `limit`: `Ok` with the position
    /// of the first rule not run, `Err` with the position of a rule that
    /// ran and left a trace beyond TX (the state includes it).
    fn run_head(&mut self, eng: &Engine, limit: usize) -> Result<usize, usize> {
        let prog = &eng.prog;
        let list = &prog.phases[1];
        let mut i = 0usize;
        while i < list.len() && i < limit {
            let at = i;
            let item = list[i];
            i += 1;
            if self.skipped(item) {
                continue;
            }
            let Item::Rule(ri, jump) = item else { continue };
            let r = &prog.rules[ri as usize];
            if !head::pure(r) {
                return Ok(at);
            }
            let matched = self.eval_rule(eng, r);
            // A pure rule has no ctl, initcol or setenv: what else it can
            // leave beyond TX is a disruption (blocking, allowing), a
            // logged match, a severity, the work bound.
            if (matched && head::disrupts(r))
                || !self.outcome.matched.is_empty()
                || self.st.highest_severity.is_some()
                || self.st.limit_hit
            {
                return Err(at);
            }
            if matched {
                self.skip_after_match(r, jump, &mut i);
            }
        }
        // Past `limit` only by a jump, which skipped what lies between.
        Ok(i)
    }

    /// Whether a `skip` or `skipAfter` in force passes over `item` (a
    /// marker ends the `skipAfter` it names).
    fn skipped(&mut self, item: Item) -> bool {
        if let Some(m) = self.st.skip_marker {
            if let Item::Marker(x) = item {
                if x == m {
                    self.st.skip_marker = None;
                }
            }
            return true;
        }
        if self.st.skip_next > 0 {
            self.st.skip_next -= 1;
            return true;
        }
        false
    }

    /// A rule matched: its `skip`, and its `skipAfter` (a jump to after the
    /// marker when it is in this phase, else skipping until it).
    fn skip_after_match(&mut self, r: &CRule, jump: Option<u32>, i: &mut usize) {
        if r.skip > 0 {
            self.st.skip_next = r.skip;
        }
        if let Some(m) = r.skip_after {
            match jump {
                Some(j) => *i = j as usize,
                None => self.st.skip_marker = Some(m),
            }
        }
    }

    fn removed(&self, r: &CRule) -> bool {
        let st = &self.st;
        (!st.removed_ids.is_empty() && st.removed_ids.iter().any(|g| g.contains(r.id)))
            || (!st.removed_tags.is_empty()
                && st.removed_tags.iter().any(|t| r.tag_ids.contains(t)))
            || (!st.removed_msgs.is_empty()
                && r.msg_raw
                    .as_ref()
                    .is_some_and(|m| st.removed_msgs.iter().any(|x| x == m)))
    }

    fn eval_rule(&mut self, eng: &Engine, r: &CRule) -> bool {
        let log = r.log;
        if log {
            self.st.cur_msg.clear();
            self.st.cur_logdata.clear();
        }
        for link in &r.links {
            if !self.eval_link(eng, r, link) {
                self.st.has_mv = false;
                self.st.mvs_len = 0;
                return false;
            }
        }
        // A chain's logdata says what the whole chain matched: expanded
        // again now, with the last link's captures and matched variable
        // (ModSecurity v3 evaluates it after the full match).
        if log && r.links.len() > 1 {
            if let Some(m) = &r.links[0].logdata {
                let mut out = std::mem::take(&mut self.st.cur_logdata);
                out.clear();
                self.expand(m, Some(r), &mut out);
                self.st.cur_logdata = out;
            }
        }
        // The whole chain matched: the actions that wait for it, the
        // last link's first (as ModSecurity unwinds its recursion).
        for link in r.links.iter().rev() {
            for p in &link.post {
                self.run_post(r, p);
            }
        }
        if let Some(s) = r.severity {
            let s = s as u8;
            if self.st.highest_severity.is_none_or(|h| s < h) {
                self.st.highest_severity = Some(s);
            }
        }
        let mut disrupted = false;
        if self.st.mode == EngineMode::On {
            let kind = match &r.disruptive {
                CDisruptive::Pass => None,
                CDisruptive::Deny => Some((InterventionKind::Deny, r.status.unwrap_or(403))),
                CDisruptive::Drop => Some((InterventionKind::Drop, r.status.unwrap_or(403))),
                CDisruptive::Redirect(m) => {
                    let mut url = Vec::new();
                    self.expand(m, Some(r), &mut url);
                    let status = r
                        .status
                        .filter(|s| matches!(s, 301 | 302 | 303 | 307))
                        .unwrap_or(302);
                    Some((
                        InterventionKind::Redirect(String::from_utf8_lossy(&url).into_owned()),
                        status,
                    ))
                }
                CDisruptive::Allow(scope) => {
                    self.st.allow = Some(*scope);
                    self.st.allow_phase = r.phase;
                    None
                }
            };
            if let Some((kind, status)) = kind {
                disrupted = true;
                self.outcome.interrupted = Some(Intervention {
                    kind,
                    status,
                    rule_id: r.id,
                    phase: r.phase,
                    message: String::from_utf8_lossy(&self.st.cur_msg).into_owned(),
                });
            }
        }
        if log {
            let limit = self.eng.limits.logdata_limit;
            let mut logdata = String::from_utf8_lossy(&self.st.cur_logdata).into_owned();
            truncate(&mut logdata, limit);
            let (mut name, mut value) = match self.st.has_mv.then_some(&self.st.mv) {
                Some((n, v)) => (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ),
                None => (String::new(), String::new()),
            };
            truncate(&mut name, limit);
            truncate(&mut value, limit);
            self.outcome.matched.push(MatchedRule {
                id: r.id,
                phase: r.phase,
                msg: String::from_utf8_lossy(&self.st.cur_msg).into_owned(),
                logdata,
                severity: r.severity,
                tags: r.tags.clone(),
                ver: r.ver.clone(),
                matched_var_name: name,
                matched_var: value,
                disruptive: disrupted,
            });
        }
        true
    }
}

fn truncate(s: &mut String, limit: usize) {
    if s.len() > limit {
        let mut n = limit;
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
    }
}
