//! What a match does: setvar, msg and logdata per matched value; ctl,
//! initcol and setenv once the chain matched; the macros they expand.

use super::collect::to_exclusion;
use super::data::VarMap;
use super::{Transaction, Which};
use crate::engine::compile::{CMacro, CPart, CRule, CSetOp, CSetVar, Link, Post, Sel, Target};
use crate::operator;
use crate::seclang::{BodyProcessor, Collection, Ctl};

impl Transaction<'_> {
    pub(super) fn run_post(&mut self, r: &CRule, p: &Post) {
        match p {
            Post::Ctl(c) => self.ctl(c),
            Post::InitCol(name, key) => {
                let mut k = Vec::new();
                self.expand(key, Some(r), &mut k);
                if !self.st.others.iter().any(|(n, _)| n == name) {
                    let mut m = VarMap::default();
                    m.set(b"KEY", k);
                    self.st.others.push((name.clone(), m));
                }
            }
            Post::SetEnv(name, value) => {
                let mut n = Vec::new();
                self.expand(name, Some(r), &mut n);
                match value {
                    Some(v) => {
                        let mut val = Vec::new();
                        self.expand(v, Some(r), &mut val);
                        self.st.env.set(&n, val);
                    }
                    None => self.st.env.delete(&n),
                }
            }
        }
    }

    fn ctl(&mut self, c: &Ctl) {
        self.lists_gen += 1;
        let st = &mut self.st;
        match c {
            Ctl::RuleEngine(m) => st.mode = *m,
            Ctl::RuleRemoveById(r) => st.removed_ids.extend_from_slice(r),
            Ctl::RuleRemoveByTag(t) => st.removed_tags.push(self.eng.prog.tag_id(t)),
            Ctl::RuleRemoveByMsg(m) => st.removed_msgs.push(m.clone()),
            Ctl::RuleRemoveTargetById(r, vars) => {
                for v in vars {
                    st.removed_targets
                        .push((Which::Ids(r.clone()), to_exclusion(v)));
                }
            }
            Ctl::RuleRemoveTargetByTag(t, vars) => {
                for v in vars {
                    st.removed_targets
                        .push((Which::Tag(self.eng.prog.tag_id(t)), to_exclusion(v)));
                }
            }
            Ctl::RuleRemoveTargetByMsg(t, vars) => {
                for v in vars {
                    st.removed_targets
                        .push((Which::Msg(t.clone()), to_exclusion(v)));
                }
            }
            Ctl::RequestBodyProcessor(p) => {
                st.body_processor = Some(*p);
                let name = match p {
                    BodyProcessor::UrlEncoded => "URLENCODED",
                    BodyProcessor::Multipart => "MULTIPART",
                    BodyProcessor::Xml => "XML",
                    BodyProcessor::Json => "JSON",
                };
                self.d.set(Collection::ReqbodyProcessor, name);
            }
            Ctl::RequestBodyAccess(b) => st.request_body_access = *b,
            Ctl::ResponseBodyAccess(b) => st.response_body_access = *b,
            Ctl::RequestBodyLimit(n) => st.request_body_limit = *n,
            _ => {}
        }
    }
    /// A value matched: MATCHED_VAR(S), then the actions ModSecurity runs
    /// per match (setvar, severity, msg and logdata).
    pub(super) fn on_match(&mut self, r: &CRule, link: &Link) {
        for s in &link.setvars {
            self.setvar(r, s);
        }
        if r.log {
            if let Some(m) = &link.logdata {
                let mut out = std::mem::take(&mut self.st.cur_logdata);
                out.clear();
                self.expand(m, Some(r), &mut out);
                self.st.cur_logdata = out;
            }
            if let Some(m) = &link.msg {
                let mut out = std::mem::take(&mut self.st.cur_msg);
                out.clear();
                self.expand(m, Some(r), &mut out);
                self.st.cur_msg = out;
            }
        }
    }

    fn setvar(&mut self, r: &CRule, s: &CSetVar) {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        self.expand(&s.key, Some(r), &mut key);
        let new = match &s.op {
            CSetOp::Delete => {
                self.map_mut(&s.coll).delete(&key);
                self.scratch = key;
                return;
            }
            CSetOp::Set(m) => {
                let mut v = std::mem::take(&mut self.setbuf);
                v.clear();
                self.expand(m, Some(r), &mut v);
                v
            }
            CSetOp::Add(m) | CSetOp::Sub(m) => {
                let mut v = std::mem::take(&mut self.setbuf);
                v.clear();
                self.expand(m, Some(r), &mut v);
                let delta = operator::stoi(&v);
                let cur = self
                    .map(&s.coll)
                    .and_then(|m| m.get_any_case(&key))
                    .map(operator::stoi)
                    .unwrap_or(0);
                let n = if matches!(s.op, CSetOp::Add(_)) {
                    cur + delta
                } else {
                    cur - delta
                };
                v.clear();
                use std::io::Write;
                let _ = write!(v, "{n}");
                v
            }
        };
        // Into the existing value's buffer: the setup rules and the
        // anomaly scores rewrite the same variables in every transaction.
        self.map_mut(&s.coll).set_slice(&key, &new);
        self.setbuf = new;
        self.scratch = key;
    }

    fn map(&self, coll: &str) -> Option<&VarMap> {
        if coll == "tx" {
            return Some(&self.st.tx);
        }
        self.st
            .others
            .iter()
            .find(|(n, _)| &**n == coll)
            .map(|(_, m)| m)
    }

    fn map_mut(&mut self, coll: &str) -> &mut VarMap {
        if coll == "tx" {
            return &mut self.st.tx;
        }
        if coll == "env" {
            return &mut self.st.env;
        }
        let i = match self.st.others.iter().position(|(n, _)| &**n == coll) {
            Some(i) => i,
            None => {
                self.st.others.push((coll.into(), VarMap::default()));
                self.st.others.len() - 1
            }
        };
        &mut self.st.others[i].1
    }

    pub(super) fn other(&self, c: Collection) -> Option<&VarMap> {
        let n = match c {
            Collection::Ip => "ip",
            Collection::Global => "global",
            Collection::Session => "session",
            Collection::User => "user",
            Collection::Resource => "resource",
            _ => return None,
        };
        self.map(n)
    }

    /// Expands a macro into `out`.
    pub(super) fn expand(&self, m: &CMacro, r: Option<&CRule>, out: &mut Vec<u8>) {
        for p in &m.parts {
            match p {
                CPart::Lit(s) => out.extend_from_slice(s),
                CPart::Var { coll, key } => self.resolve_first(*coll, key.as_deref(), r, out),
            }
        }
    }

    /// The first value of `coll[:key]` (what a macro expands to).
    fn resolve_first(
        &self,
        coll: Collection,
        key: Option<&[u8]>,
        r: Option<&CRule>,
        out: &mut Vec<u8>,
    ) {
        use Collection as C;
        match (coll, key) {
            (C::Tx, Some(k)) => {
                if let Some(v) = self.st.tx.get(k) {
                    out.extend_from_slice(v);
                }
            }
            (C::MatchedVar, _) => {
                if self.st.has_mv {
                    out.extend_from_slice(&self.st.mv.1);
                }
            }
            (C::MatchedVarName, _) => {
                if self.st.has_mv {
                    out.extend_from_slice(&self.st.mv.0);
                }
            }
            (C::Rule, Some(k)) => {
                let Some(r) = r else { return };
                match k {
                    b"id" => out.extend_from_slice(r.id.to_string().as_bytes()),
                    b"phase" => out.extend_from_slice(r.phase.to_string().as_bytes()),
                    b"msg" => out.extend_from_slice(&self.st.cur_msg),
                    b"logdata" => out.extend_from_slice(&self.st.cur_logdata),
                    b"severity" => {
                        if let Some(s) = r.severity {
                            out.extend_from_slice((s as u8).to_string().as_bytes())
                        }
                    }
                    b"ver" => {
                        if let Some(v) = &r.ver {
                            out.extend_from_slice(v.as_bytes())
                        }
                    }
                    b"rev" => {
                        if let Some(v) = &r.rev {
                            out.extend_from_slice(v.as_bytes())
                        }
                    }
                    _ => {}
                }
            }
            _ => {
                let t = Target {
                    coll,
                    sel: match key {
                        Some(k) => Sel::Key(k.into(), "".into()),
                        None => Sel::All,
                    },
                    count: false,
                };
                let mut vals = Vec::new();
                self.collect(&t, &[], &mut vals, None);
                if let Some(v) = vals.first() {
                    out.extend_from_slice(v.value(&self.d, &self.st.tx));
                }
            }
        }
    }
}
