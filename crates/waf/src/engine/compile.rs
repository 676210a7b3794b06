//! A [`Ruleset`] into the executable form the transaction walks.

use std::collections::HashMap;
use std::fmt;

use super::keyrx::KeyRegex;

use crate::operator::{self, IpSet, Pm};
use crate::seclang::{
    Action, Collection, Ctl, Disruptive, Entry, Macro, MacroPart, OperatorName, OperatorParam,
    Rule, Ruleset, Selector, SetVar, Severity, Variable,
};
use crate::transform::{self, Transform};

/// A rule that cannot be compiled.
#[derive(Clone, Debug)]
pub struct CompileError {
    pub file: String,
    pub line: u32,
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for CompileError {}

/// A string with macros, keys folded for lookups.
#[derive(Debug, Clone)]
pub(crate) struct CMacro {
    pub parts: Vec<CPart>,
}

#[derive(Debug, Clone)]
pub(crate) enum CPart {
    Lit(Box<[u8]>),
    Var {
        coll: Collection,
        /// Lower case.
        key: Option<Box<[u8]>>,
    },
}

impl CMacro {
    pub fn new(m: &Macro) -> CMacro {
        CMacro {
            parts: m
                .parts()
                .iter()
                .map(|p| match p {
                    MacroPart::Literal(s) => CPart::Lit(s.as_bytes().into()),
                    MacroPart::Var { collection, key } => CPart::Var {
                        coll: *collection,
                        key: key
                            .as_ref()
                            .map(|k| k.to_ascii_lowercase().into_bytes().into()),
                    },
                })
                .collect(),
        }
    }

    pub fn literal(s: &[u8]) -> CMacro {
        CMacro {
            parts: vec![CPart::Lit(s.into())],
        }
    }
}

/// How a target picks members.
#[derive(Debug, Clone)]
pub(crate) enum Sel {
    All,
    /// Lower case (also the raw text, for XML paths).
    Key(Box<[u8]>, Box<str>),
    /// With an id shared by every selector of the same source (below 64,
    /// results are cached per value in the transaction), `u32::MAX` none.
    Regex(KeyRegex, u32),
}

#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub coll: Collection,
    pub sel: Sel,
    pub count: bool,
}

/// A `!` exclusion.
#[derive(Debug, Clone)]
pub(crate) struct Exclusion {
    pub coll: Collection,
    pub sel: Sel,
}

#[derive(Debug)]
pub(crate) enum COp {
    Op(operator::Operator),
    /// String or numeric operator whose argument holds macros.
    Dynamic(operator::Operator, CMacro),
    /// `@rx` with macros: compiled per transaction.
    DynamicRx(CMacro),
    Sqli,
    Xss,
    /// Operators this engine does not evaluate (`@rbl`, `@geoLookup`...).
    Never,
}

impl COp {
    /// Counts against the regex work bound.
    pub fn is_scanner(&self) -> bool {
        matches!(
            self,
            COp::Op(operator::Operator::Rx(_))
                | COp::Op(operator::Operator::Pm(_))
                | COp::DynamicRx(_)
                | COp::Sqli
                | COp::Xss
        )
    }
}

/// What a disruptive action does.
#[derive(Debug, Clone)]
pub(crate) enum CDisruptive {
    Pass,
    Deny,
    Drop,
    Allow(crate::seclang::AllowScope),
    Redirect(CMacro),
}

#[derive(Debug, Clone)]
pub(crate) enum CSetOp {
    Set(CMacro),
    Add(CMacro),
    Sub(CMacro),
    Delete,
}

#[derive(Debug, Clone)]
pub(crate) struct CSetVar {
    /// Lower case collection name (`tx`, `ip`...).
    pub coll: Box<str>,
    pub key: CMacro,
    pub op: CSetOp,
}

/// Actions run once the whole chain matched.
#[derive(Debug, Clone)]
pub(crate) enum Post {
    Ctl(Ctl),
    InitCol(Box<str>, CMacro),
    SetEnv(CMacro, Option<CMacro>),
}

/// One link of a chain (the starter is link 0).
#[derive(Debug)]
pub(crate) struct Link {
    pub targets: Vec<Target>,
    pub exclusions: Vec<Exclusion>,
    pub op: COp,
    pub negated: bool,
    /// The transformation pipeline's node in [`Program::tnodes`].
    pub tnode: u32,
    pub multi_match: bool,
    pub capture: bool,
    /// SecAction or @unconditionalMatch without targets.
    pub unconditional: bool,
    pub setvars: Vec<CSetVar>,
    pub post: Vec<Post>,
    pub msg: Option<CMacro>,
    pub logdata: Option<CMacro>,
    /// `@rx` with a literal prefilter: every match contains one of its
    /// literals, so a value shorter than the shortest cannot match.
    pub min_len: usize,
    /// `@rx` with a literal prefilter, or `@pm`: asks the transaction for
    /// the value's cached [`operator::Sig`].
    pub sig: bool,
    /// Links with the same targets and exclusions, all read from the
    /// request and response data (not TX, MATCHED_VARS, time...), share
    /// an id: the transaction collects their values once per phase.
    /// `NO_TARGETS_ID` otherwise.
    pub targets_id: u32,
    /// Links whose operator only matches a value holding one of its
    /// literals (`@rx` with a prefilter, `@pm`; not negated, not
    /// multiMatch) over a shared target list share an id per list and
    /// transformation pipeline: the transaction keeps the union of those
    /// values' summaries, which rules most such links out at once.
    /// `NO_SUMMARY_GROUP` otherwise.
    pub summary_group: u32,
    /// The lower-case name when the link reads one TX variable as it is
    /// (no transformation, exclusion, count or multiMatch): the paranoia
    /// gates (`SecRule TX:DETECTION_PARANOIA_LEVEL "@lt 2" ...skipAfter`),
    /// about sixty per transaction, look it up without collecting a list.
    pub tx_key: Option<Box<[u8]>>,
}

pub(crate) const NO_TARGETS_ID: u32 = u32::MAX;
pub(crate) const NO_SUMMARY_GROUP: u32 = u32::MAX;

/// Whether a collection's members depend only on the request and response
/// data, which change between phases (and by `ctl`), not while rules run.
fn data_only(c: Collection) -> bool {
    use Collection as C;
    !matches!(
        c,
        C::Tx
            | C::Ip
            | C::Global
            | C::Session
            | C::User
            | C::Resource
            | C::Env
            | C::MatchedVar
            | C::MatchedVarName
            | C::MatchedVars
            | C::MatchedVarsNames
            | C::FullRequest
            | C::FullRequestLength
            | C::HighestSeverity
            | C::Duration
            | C::Time
            | C::TimeDay
            | C::TimeEpoch
            | C::TimeHour
            | C::TimeMin
            | C::TimeMon
            | C::TimeSec
            | C::TimeWday
            | C::TimeYear
            | C::MscPcreLimitsExceeded
            | C::Rule
    )
}

#[derive(Debug)]
pub(crate) struct CRule {
    pub id: u64,
    pub phase: u8,
    pub links: Vec<Link>,
    pub disruptive: CDisruptive,
    pub status: Option<u16>,
    pub log: bool,
    pub msg_raw: Option<Box<str>>,
    pub severity: Option<Severity>,
    pub tags: Vec<Box<str>>,
    /// `tags` as [`Program::tag_ids`] numbers them (what `ctl` removals by
    /// tag compare, per rule, on every rule a transaction runs).
    pub tag_ids: Box<[u32]>,
    pub ver: Option<Box<str>>,
    pub rev: Option<Box<str>>,
    pub skip: u32,
    pub skip_after: Option<u32>,
}

/// A position in a phase's list.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Item {
    /// Index into [`Program::rules`]; where `skipAfter` jumps (the index
    /// after the next marker of that name in this phase), if anywhere.
    Rule(u32, Option<u32>),
    Marker(u32),
}

/// A transformation prefix tree node: `parent`'s pipeline then `t`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TNode {
    pub parent: u32,
    pub t: Transform,
    pub depth: u16,
}

#[derive(Debug)]
pub(crate) struct Program {
    pub rules: Vec<CRule>,
    /// Phases 1 to 5 (index 0 unused).
    pub phases: [Vec<Item>; 6],
    /// Node 0 is the empty pipeline.
    pub tnodes: Vec<TNode>,
    /// How many distinct `Link::targets_id`s.
    pub target_lists: usize,
    /// How many distinct `Link::summary_group`s.
    pub summary_groups: usize,
    /// Every tag a rule carries, numbered.
    pub tag_ids: HashMap<Box<str>, u32>,
    pub notes: Vec<String>,
}

impl Program {
    /// The number of a tag, `u32::MAX` if no rule carries it.
    pub fn tag_id(&self, tag: &str) -> u32 {
        self.tag_ids.get(tag).copied().unwrap_or(u32::MAX)
    }
}

struct Builder {
    tnode_ids: HashMap<(u32, Transform), u32>,
    tnodes: Vec<TNode>,
    markers: HashMap<Box<str>, u32>,
    marker_names: Vec<Box<str>>,
    sel_regex: HashMap<Box<str>, u32>,
    targets_ids: HashMap<String, u32>,
    summary_groups: HashMap<(u32, u32), u32>,
    notes: Vec<String>,
}

impl Builder {
    fn marker(&mut self, name: &str) -> u32 {
        if let Some(&m) = self.markers.get(name) {
            return m;
        }
        let m = self.marker_names.len() as u32;
        self.marker_names.push(name.into());
        self.markers.insert(name.into(), m);
        m
    }

    fn tnode(&mut self, ts: &[crate::seclang::Transform]) -> u32 {
        let mut cur = 0u32;
        for t in ts {
            let Some(t) = transform::by_name(t.name()) else {
                continue;
            };
            if t == Transform::None {
                cur = 0;
                continue;
            }
            let depth = self.tnodes[cur as usize].depth + 1;
            let next = self.tnodes.len() as u32;
            cur = *self.tnode_ids.entry((cur, t)).or_insert_with(|| {
                self.tnodes.push(TNode {
                    parent: cur,
                    t,
                    depth,
                });
                next
            });
        }
        cur
    }
}

fn sel_of(b: &mut Builder, v: &Variable) -> Sel {
    match &v.selector {
        None => Sel::All,
        Some(Selector::Key(k)) => Sel::Key(k.to_ascii_lowercase().into_bytes().into(), k.clone()),
        Some(Selector::Regex { regex, source }) => {
            let next = b.sel_regex.len() as u32;
            let id = *b.sel_regex.entry(source.clone()).or_insert(next);
            Sel::Regex(KeyRegex::new(regex.clone(), source), id)
        }
    }
}

fn compile_op(r: &Rule) -> Result<COp, String> {
    use OperatorName as O;
    let op = &r.operator;
    let name = op.name;
    let raw = &*op.raw;
    Ok(match name {
        O::DetectSqli => COp::Sqli,
        O::DetectXss => COp::Xss,
        O::Rx => match &op.param {
            OperatorParam::DynamicRegex(m) => COp::DynamicRx(CMacro::new(m)),
            _ => COp::Op(operator::Operator::Rx(Box::new(operator::Rx::new(raw)?))),
        },
        O::PmFromFile => {
            let OperatorParam::List(list) = &op.param else {
                return Err("@pmFromFile without a list".into());
            };
            let phrases = list.iter().map(|s| s.as_bytes().to_vec()).collect();
            COp::Op(operator::Operator::Pm(Box::new(Pm::new(phrases)?)))
        }
        O::IpMatchFromFile => {
            let OperatorParam::List(list) = &op.param else {
                return Err("@ipMatchFromFile without a list".into());
            };
            COp::Op(operator::Operator::IpMatch(Box::new(IpSet::parse(
                list.iter().map(|s| &**s),
            )?)))
        }
        O::IpMatch => COp::Op(operator::Operator::IpMatch(Box::new(IpSet::parse(
            raw.split([',', ' ', '\t']).filter(|s| !s.is_empty()),
        )?))),
        O::Pm
        | O::BeginsWith
        | O::EndsWith
        | O::Contains
        | O::ContainsWord
        | O::Streq
        | O::Strmatch
        | O::Within
        | O::Eq
        | O::Ge
        | O::Gt
        | O::Le
        | O::Lt
        | O::ValidateByteRange
        | O::ValidateUrlEncoding
        | O::ValidateUtf8Encoding
        | O::UnconditionalMatch
        | O::NoMatch => {
            let compiled = operator::compile(name.name(), raw)?;
            match &op.param {
                OperatorParam::Text(m) if m.has_vars() && compiled.arg().is_some() => {
                    COp::Dynamic(compiled, CMacro::new(m))
                }
                _ => COp::Op(compiled),
            }
        }
        _ => COp::Never,
    })
}

fn compile_disruptive(r: &Rule) -> CDisruptive {
    // ModSecurity v3: a rule without a disruptive action has none (the
    // phase's default applies to `block` only).
    let explicit = r.actions.iter().any(|a| matches!(a, Action::Disruptive(_)));
    if !explicit {
        return CDisruptive::Pass;
    }
    match &r.disruptive {
        Disruptive::Pass | Disruptive::Block | Disruptive::Proxy(_) | Disruptive::Pause(_) => {
            CDisruptive::Pass
        }
        Disruptive::Deny => CDisruptive::Deny,
        Disruptive::Drop => CDisruptive::Drop,
        Disruptive::Allow(s) => CDisruptive::Allow(*s),
        Disruptive::Redirect(m) => CDisruptive::Redirect(CMacro::new(m)),
    }
}

fn compile_setvar(s: &SetVar) -> CSetVar {
    use crate::seclang::SetVarOp;
    CSetVar {
        coll: s.collection.to_ascii_lowercase().into(),
        key: CMacro::new(&s.key),
        op: match &s.op {
            SetVarOp::Set(m) => CSetOp::Set(CMacro::new(m)),
            SetVarOp::Add(m) => CSetOp::Add(CMacro::new(m)),
            SetVarOp::Sub(m) => CSetOp::Sub(CMacro::new(m)),
            SetVarOp::Delete => CSetOp::Delete,
            SetVarOp::Touch => CSetOp::Set(CMacro::literal(b"")),
        },
    }
}

fn compile_link(b: &mut Builder, r: &Rule, starter: bool) -> Result<Link, String> {
    let mut targets = Vec::new();
    let mut exclusions = Vec::new();
    for v in &r.variables {
        if v.exclude {
            exclusions.push(Exclusion {
                coll: v.collection,
                sel: sel_of(b, v),
            });
        } else {
            targets.push(Target {
                coll: v.collection,
                sel: sel_of(b, v),
                count: v.count,
            });
        }
    }
    let op = compile_op(r)?;
    if matches!(op, COp::Never) {
        b.notes.push(format!(
            "{}:{}: @{} is not evaluated (never matches)",
            r.file, r.line, r.operator.name
        ));
    }
    let unconditional = targets.is_empty()
        && matches!(
            r.operator.name,
            OperatorName::UnconditionalMatch | OperatorName::NoMatch
        );
    let mut setvars = Vec::new();
    let mut post = Vec::new();
    for a in &r.actions {
        match a {
            Action::SetVar(s) => setvars.push(compile_setvar(s)),
            Action::Ctl(c) => post.push(Post::Ctl(c.clone())),
            Action::InitCol { collection, key } => post.push(Post::InitCol(
                collection.to_ascii_lowercase().into(),
                CMacro::new(key),
            )),
            Action::SetEnv { name, value } => post.push(Post::SetEnv(
                CMacro::new(name),
                value.as_ref().map(CMacro::new),
            )),
            _ => {}
        }
    }
    // A link's own msg/logdata (the starter's are on the starter).
    let own = |f: &dyn Fn(&Action) -> Option<&Macro>| r.actions.iter().rev().find_map(f);
    let msg = if starter {
        r.msg.as_ref()
    } else {
        own(&|a| match a {
            Action::Msg(m) => Some(m),
            _ => None,
        })
    };
    let logdata = if starter {
        r.logdata.as_ref()
    } else {
        own(&|a| match a {
            Action::LogData(m) => Some(m),
            _ => None,
        })
    };
    let min_len = match &op {
        COp::Op(operator::Operator::Rx(rx)) if rx.has_prefilter() => rx
            .literals
            .as_ref()
            .and_then(|l| l.iter().map(Vec::len).min())
            .unwrap_or(0),
        _ => 0,
    };
    let targets_id = if !targets.is_empty()
        && targets.iter().all(|t| data_only(t.coll))
        && exclusions.iter().all(|e| data_only(e.coll))
    {
        // The variables as written identify the list (a regex selector's
        // Debug form is its pattern).
        let key = format!("{targets:?} {exclusions:?}");
        let next = b.targets_ids.len() as u32;
        *b.targets_ids.entry(key).or_insert(next)
    } else {
        NO_TARGETS_ID
    };
    let sig = matches!(&op, COp::Op(operator::Operator::Rx(rx)) if rx.has_prefilter())
        || matches!(&op, COp::Op(operator::Operator::Pm(_)));
    let tnode = b.tnode(&r.transforms);
    let summary_group =
        if sig && !r.operator.negated && !r.multi_match && targets_id != NO_TARGETS_ID {
            let next = b.summary_groups.len() as u32;
            *b.summary_groups.entry((targets_id, tnode)).or_insert(next)
        } else {
            NO_SUMMARY_GROUP
        };
    let tx_key = match targets.as_slice() {
        [Target {
            coll: Collection::Tx,
            sel: Sel::Key(k, _),
            count: false,
        }] if exclusions.is_empty() && tnode == 0 && !r.multi_match => Some(k.clone()),
        _ => None,
    };
    Ok(Link {
        summary_group,
        min_len,
        sig,
        targets_id,
        targets,
        exclusions,
        op,
        negated: r.operator.negated,
        tnode,
        multi_match: r.multi_match,
        tx_key,
        capture: r.capture,
        unconditional,
        setvars,
        post,
        msg: msg.map(CMacro::new),
        logdata: logdata.map(CMacro::new),
    })
}

impl Program {
    pub fn new(set: Ruleset) -> Result<Program, CompileError> {
        let mut b = Builder {
            tnode_ids: HashMap::new(),
            tnodes: vec![TNode {
                parent: 0,
                t: Transform::None,
                depth: 0,
            }],
            markers: HashMap::new(),
            marker_names: Vec::new(),
            sel_regex: HashMap::new(),
            targets_ids: HashMap::new(),
            summary_groups: HashMap::new(),
            notes: Vec::new(),
        };
        let mut rules = Vec::new();
        let mut tag_ids: HashMap<Box<str>, u32> = HashMap::new();
        let mut phases: [Vec<Item>; 6] = Default::default();
        for e in set.entries {
            match e {
                Entry::Marker(m) => {
                    let id = b.marker(&m.name);
                    for p in phases.iter_mut().skip(1) {
                        p.push(Item::Marker(id));
                    }
                }
                Entry::Rule(r) => {
                    let err = |message: String| CompileError {
                        file: r.file.to_string(),
                        line: r.line,
                        message,
                    };
                    let mut links = vec![compile_link(&mut b, &r, true).map_err(err)?];
                    for l in &r.chain {
                        let err = |message: String| CompileError {
                            file: l.file.to_string(),
                            line: l.line,
                            message,
                        };
                        links.push(compile_link(&mut b, l, false).map_err(err)?);
                    }
                    let skip_after = r.skip_after.as_deref().map(|m| b.marker(m));
                    let rev = r.actions.iter().find_map(|a| match a {
                        Action::Rev(v) => Some(v.clone()),
                        _ => None,
                    });
                    let phase = r.phase.clamp(1, 5);
                    let idx = rules.len() as u32;
                    rules.push(CRule {
                        id: r.id.unwrap_or(0),
                        phase,
                        links,
                        disruptive: compile_disruptive(&r),
                        status: r.status,
                        log: r.log,
                        msg_raw: r.msg.as_ref().map(|m| m.raw().into()),
                        severity: r.severity,
                        tag_ids: r
                            .tags
                            .iter()
                            .map(|t| {
                                let next = tag_ids.len() as u32;
                                *tag_ids.entry(t.clone()).or_insert(next)
                            })
                            .collect(),
                        tags: r.tags.clone(),
                        ver: r.ver.clone(),
                        rev,
                        skip: r.skip,
                        skip_after,
                    });
                    phases[usize::from(phase)].push(Item::Rule(idx, None));
                }
            }
        }
        // skipAfter: the position after the next marker of that name.
        for list in phases.iter_mut() {
            let n = list.len();
            for i in 0..n {
                if let Item::Rule(r, _) = list[i] {
                    if let Some(m) = rules[r as usize].skip_after {
                        let target = (i + 1..n)
                            .find(|&j| matches!(list[j], Item::Marker(x) if x == m))
                            .map(|j| j as u32 + 1);
                        list[i] = Item::Rule(r, target);
                    }
                }
            }
        }
        Ok(Program {
            rules,
            phases,
            tnodes: b.tnodes,
            target_lists: b.targets_ids.len(),
            tag_ids,
            summary_groups: b.summary_groups.len(),
            notes: b.notes,
        })
    }
}
