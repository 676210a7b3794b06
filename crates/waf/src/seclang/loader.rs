//! Directives into a [`Ruleset`]: includes, chains, defaults, load-time
//! exclusions.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lexer;
use super::model::*;
use super::parse::{parse_actions, parse_id_ranges, parse_operator_in, parse_variables};
use super::Error;

/// Include nesting limit (also stops include loops).
const MAX_DEPTH: usize = 32;

/// Builds a [`Ruleset`] from files and texts, in order.
#[derive(Default)]
pub struct Loader {
    set: Ruleset,
    /// The entry index of a chain starter whose last link says `chain`.
    open_chain: Option<usize>,
    depth: usize,
    /// `Include` and file operators refused (fuzzing, untrusted text).
    no_files: bool,
}

struct Ctx<'a> {
    file: Arc<str>,
    dir: Option<&'a Path>,
    line: u32,
}

impl Ctx<'_> {
    fn err(&self, message: impl Into<String>) -> Error {
        Error {
            file: self.file.to_string(),
            line: self.line,
            message: message.into(),
        }
    }
}

fn path_error(path: &Path, message: String) -> Error {
    Error {
        file: path.display().to_string(),
        line: 0,
        message,
    }
}

impl Loader {
    pub fn new() -> Loader {
        Loader::default()
    }

    /// A loader that reads no file: `Include`, `@pmFromFile` and
    /// `@ipMatchFromFile` are errors (for text from untrusted sources).
    pub fn sandboxed() -> Loader {
        Loader {
            no_files: true,
            ..Loader::default()
        }
    }

    /// Loads a file, or every `*.conf` file of a directory in name order.
    pub fn load_path(&mut self, path: &Path) -> Result<(), Error> {
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| path_error(path, format!("cannot read directory: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "conf"))
                .collect();
            files.sort();
            for f in files {
                self.load_file(&f)?;
            }
            return Ok(());
        }
        self.load_file(path)
    }

    fn load_file(&mut self, path: &Path) -> Result<(), Error> {
        let bytes =
            std::fs::read(path).map_err(|e| path_error(path, format!("cannot read: {e}")))?;
        let text =
            String::from_utf8(bytes).map_err(|_| path_error(path, "not UTF-8 text".to_string()))?;
        let name = path.display().to_string();
        self.load_str(&text, &name, path.parent())
    }

    /// Parses `text` as if read from the file `name`; `dir` resolves
    /// relative `Include` and `.data` paths (the working directory if
    /// `None`).
    pub fn load_str(&mut self, text: &str, name: &str, dir: Option<&Path>) -> Result<(), Error> {
        let file: Arc<str> = name.into();
        let dirs = lexer::directives(text).map_err(|(line, message)| Error {
            file: name.to_string(),
            line,
            message,
        })?;
        for d in dirs {
            let ctx = Ctx {
                file: file.clone(),
                dir,
                line: d.line,
            };
            self.directive(&ctx, &d.args)?;
        }
        Ok(())
    }

    /// The rule set, after checking that no chain is left open.
    pub fn finish(mut self) -> Result<Ruleset, Error> {
        if let Some(i) = self.open_chain {
            if let Entry::Rule(r) = &self.set.entries[i] {
                return Err(Error {
                    file: r.file.to_string(),
                    line: r.chain.last().map_or(r.line, |l| l.line),
                    message: "the last rule of a chain says `chain` but no rule follows".into(),
                });
            }
        }
        let markers: HashSet<&str> = self.set.markers().map(|m| &*m.name).collect();
        let mut notes = Vec::new();
        for r in self.set.rules() {
            if let Some(t) = &r.skip_after {
                let id_target = t
                    .parse::<u64>()
                    .ok()
                    .filter(|id| self.set.ids.contains_key(id));
                if !markers.contains(&**t) && id_target.is_none() {
                    notes.push(Note {
                        file: r.file.clone(),
                        line: r.line,
                        message: format!("skipAfter:{t}: no such marker"),
                    });
                }
            }
        }
        self.set.notes.extend(notes);
        self.set.reindex();
        Ok(self.set)
    }

    fn note(&mut self, ctx: &Ctx, message: String) {
        self.set.notes.push(Note {
            file: ctx.file.clone(),
            line: ctx.line,
            message,
        });
    }

    fn directive(&mut self, ctx: &Ctx, args: &[String]) -> Result<(), Error> {
        let name = args[0].to_ascii_lowercase();
        let argc = args.len() - 1;
        let want = |n: std::ops::RangeInclusive<usize>| -> Result<(), Error> {
            if n.contains(&argc) {
                Ok(())
            } else if n.start() == n.end() {
                Err(ctx.err(format!(
                    "{} takes {} argument(s), got {argc}",
                    args[0],
                    n.start()
                )))
            } else {
                Err(ctx.err(format!(
                    "{} takes {} to {} arguments, got {argc}",
                    args[0],
                    n.start(),
                    n.end()
                )))
            }
        };
        if self.open_chain.is_some() && name != "secrule" {
            return Err(ctx.err(format!(
                "{} follows a rule that says `chain`: a SecRule must come next",
                args[0]
            )));
        }
        let num = |s: &str| -> Result<u64, Error> {
            s.parse()
                .map_err(|_| ctx.err(format!("{}: bad number {s:?}", args[0])))
        };
        let on_off = |s: &str| -> Result<bool, Error> {
            match s.to_ascii_lowercase().as_str() {
                "on" => Ok(true),
                "off" => Ok(false),
                _ => Err(ctx.err(format!("{}: expected On or Off, not {s:?}", args[0]))),
            }
        };
        let limit_action = |s: &str| -> Result<LimitAction, Error> {
            match s.to_ascii_lowercase().as_str() {
                "reject" => Ok(LimitAction::Reject),
                "processpartial" => Ok(LimitAction::ProcessPartial),
                _ => Err(ctx.err(format!(
                    "{}: expected Reject or ProcessPartial, not {s:?}",
                    args[0]
                ))),
            }
        };
        let c = &mut self.set.config;
        match name.as_str() {
            "secrule" => {
                want(2..=3)?;
                self.sec_rule(ctx, Some((&args[1], &args[2])), args.get(3).map(|s| &**s))?;
            }
            "secaction" => {
                want(1..=1)?;
                self.sec_rule(ctx, None, Some(&args[1]))?;
            }
            "secmarker" => {
                want(1..=1)?;
                self.set.entries.push(Entry::Marker(Marker {
                    name: args[1].trim().into(),
                    file: ctx.file.clone(),
                    line: ctx.line,
                }));
            }
            "secdefaultaction" => {
                want(1..=1)?;
                let actions = parse_actions(&args[1]).map_err(|e| ctx.err(e))?;
                let mut phase = None;
                for a in &actions {
                    match a {
                        Action::Phase(p) => phase = Some(*p),
                        Action::Id(_) | Action::Chain | Action::Skip(_) | Action::SkipAfter(_) => {
                            return Err(ctx
                                .err("SecDefaultAction cannot hold id, chain, skip or skipAfter"))
                        }
                        _ => {}
                    }
                }
                let phase = phase.ok_or_else(|| ctx.err("SecDefaultAction needs a phase"))?;
                self.set.default_actions[usize::from(phase)] = Some(actions);
            }
            "secruleengine" => {
                want(1..=1)?;
                c.rule_engine = Some(EngineMode::parse(&args[1]).ok_or_else(|| {
                    ctx.err(format!(
                        "SecRuleEngine: expected On, Off or DetectionOnly, not {:?}",
                        args[1]
                    ))
                })?);
            }
            "secrequestbodyaccess" => {
                want(1..=1)?;
                c.request_body_access = Some(on_off(&args[1])?);
            }
            "secresponsebodyaccess" => {
                want(1..=1)?;
                c.response_body_access = Some(on_off(&args[1])?);
            }
            "secrequestbodylimit" => {
                want(1..=1)?;
                c.request_body_limit = Some(num(&args[1])?);
            }
            "secrequestbodynofileslimit" => {
                want(1..=1)?;
                c.request_body_no_files_limit = Some(num(&args[1])?);
            }
            "secrequestbodyinmemorylimit" => {
                want(1..=1)?;
                c.request_body_in_memory_limit = Some(num(&args[1])?);
            }
            "secrequestbodyjsondepthlimit" => {
                want(1..=1)?;
                c.request_body_json_depth_limit = Some(num(&args[1])?);
            }
            "secargumentslimit" => {
                want(1..=1)?;
                c.arguments_limit = Some(num(&args[1])?);
            }
            "secrequestbodylimitaction" => {
                want(1..=1)?;
                c.request_body_limit_action = Some(limit_action(&args[1])?);
            }
            "secresponsebodylimit" => {
                want(1..=1)?;
                c.response_body_limit = Some(num(&args[1])?);
            }
            "secresponsebodylimitaction" => {
                want(1..=1)?;
                c.response_body_limit_action = Some(limit_action(&args[1])?);
            }
            "secresponsebodymimetype" => {
                want(1..=64)?;
                let list = c.response_body_mime_types.get_or_insert_with(Vec::new);
                for a in &args[1..] {
                    list.extend(a.split_ascii_whitespace().map(Into::into));
                }
            }
            "secresponsebodymimetypesclear" => {
                want(0..=0)?;
                c.response_body_mime_types = Some(Vec::new());
            }
            "secargumentseparator" => {
                want(1..=1)?;
                if args[1].chars().count() != 1 {
                    return Err(ctx.err("SecArgumentSeparator takes one character"));
                }
                c.argument_separator = Some(args[1].as_str().into());
            }
            "seccookieformat" => {
                want(1..=1)?;
                match args[1].as_str() {
                    "0" => c.cookie_format = Some(0),
                    "1" => c.cookie_format = Some(1),
                    v => return Err(ctx.err(format!("SecCookieFormat: 0 or 1, not {v:?}"))),
                }
            }
            "seccomponentsignature" => {
                want(1..=1)?;
                c.component_signatures.push(args[1].as_str().into());
            }
            "seccollectiontimeout" => {
                want(1..=1)?;
                c.collection_timeout = Some(num(&args[1])?);
            }
            "secpcrematchlimit" => {
                want(1..=1)?;
                c.pcre_match_limit = Some(num(&args[1])?);
            }
            "secpcrematchlimitrecursion" => {
                want(1..=1)?;
                c.pcre_match_limit_recursion = Some(num(&args[1])?);
            }
            "sectmpdir" => {
                want(1..=1)?;
                c.tmp_dir = Some(args[1].as_str().into());
            }
            "secdatadir" => {
                want(1..=1)?;
                c.data_dir = Some(args[1].as_str().into());
            }
            "secstatusengine" => {
                want(1..=1)?;
                c.status_engine = Some(on_off(&args[1])?);
            }
            "secauditengine" => {
                want(1..=1)?;
                c.audit_engine = Some(AuditEngine::parse(&args[1]).ok_or_else(|| {
                    ctx.err(format!(
                        "SecAuditEngine: expected On, Off or RelevantOnly, not {:?}",
                        args[1]
                    ))
                })?);
                c.log_directives
                    .push((args[0].as_str().into(), vec![args[1].as_str().into()]));
            }
            "secauditlog"
            | "secauditlog2"
            | "secauditlogparts"
            | "secauditlogtype"
            | "secauditlogformat"
            | "secauditlogrelevantstatus"
            | "secauditlogstoragedir"
            | "secauditlogdirmode"
            | "secauditlogfilemode"
            | "secdebuglog"
            | "secdebugloglevel" => {
                want(1..=8)?;
                c.log_directives.push((
                    args[0].as_str().into(),
                    args[1..].iter().map(|a| a.as_str().into()).collect(),
                ));
            }
            "secunicodemapfile" => {
                want(1..=2)?;
                self.note(
                    ctx,
                    "SecUnicodeMapFile ignored: t:urlDecodeUni maps %uXXXX with the built-in table"
                        .into(),
                );
            }
            "secuploaddir"
            | "secuploadkeepfiles"
            | "secuploadfilemode"
            | "secuploadfilelimit"
            | "secxmlexternalentity"
            | "secwebappid"
            | "secserversignature"
            | "secgeolookupdb"
            | "sechttpblkey"
            | "secruleinheritance"
            | "secconnengine"
            | "sechashengine"
            | "sechashkey"
            | "sechashparam"
            | "sechashmethodrx"
            | "sechashmethodpm"
            | "secsensorid"
            | "secinterceptonerror"
            | "secstreaminbodyinspection"
            | "secstreamoutbodyinspection"
            | "secgsblookupdb"
            | "secguardianlog"
            | "secchrootdir"
            | "secreadstatelimit"
            | "secwritestatelimit"
            | "seccachetransformations"
            | "secdisablebackendcompression"
            | "secrulesremoteupdatefailaction"
            | "secremoterulesfailaction" => {
                self.note(ctx, format!("{} accepted and ignored", args[0]));
            }
            "secruleremovebyid" => {
                want(1..=64)?;
                let ranges = parse_id_ranges(&args[1..].join(" ")).map_err(|e| ctx.err(e))?;
                self.set.entries.retain(|e| match e {
                    Entry::Rule(r) => !r.id.is_some_and(|id| ranges.iter().any(|g| g.contains(id))),
                    Entry::Marker(_) => true,
                });
                self.set.reindex();
            }
            "secruleremovebytag" => {
                want(1..=1)?;
                let tag = &args[1];
                self.set.entries.retain(|e| match e {
                    Entry::Rule(r) => !r.has_tag(tag),
                    Entry::Marker(_) => true,
                });
                self.set.reindex();
            }
            "secruleremovebymsg" => {
                want(1..=1)?;
                let msg = &args[1];
                self.set.entries.retain(|e| match e {
                    Entry::Rule(r) => r.msg_raw() != Some(msg),
                    Entry::Marker(_) => true,
                });
                self.set.reindex();
            }
            "secruleupdatetargetbyid" | "secruleupdatetargetbytag" | "secruleupdatetargetbymsg" => {
                want(2..=3)?;
                let vars = parse_variables(&args[2]).map_err(|e| ctx.err(e))?;
                let replaced = match args.get(3) {
                    Some(r) => {
                        let mut v = parse_variables(r).map_err(|e| ctx.err(e))?;
                        if v.len() != 1 || vars.len() != 1 {
                            return Err(ctx.err(
                                "a replacing update names one target and the one it replaces",
                            ));
                        }
                        v.pop()
                    }
                    None => None,
                };
                let which: Box<dyn Fn(&Rule) -> bool> = match name.as_str() {
                    "secruleupdatetargetbyid" => {
                        let ranges = parse_id_ranges(&args[1]).map_err(|e| ctx.err(e))?;
                        Box::new(move |r: &Rule| {
                            r.id.is_some_and(|id| ranges.iter().any(|g| g.contains(id)))
                        })
                    }
                    "secruleupdatetargetbytag" => {
                        let tag = args[1].clone();
                        Box::new(move |r: &Rule| r.has_tag(&tag))
                    }
                    _ => {
                        let msg = args[1].clone();
                        Box::new(move |r: &Rule| r.msg_raw() == Some(&*msg))
                    }
                };
                for e in &mut self.set.entries {
                    let Entry::Rule(r) = e else { continue };
                    if !which(r) {
                        continue;
                    }
                    if let Some(old) = &replaced {
                        let i = r.variables.iter().position(|v| v == old).ok_or_else(|| {
                            ctx.err(format!("rule {:?} has no target {old}", r.id))
                        })?;
                        r.variables[i] = vars[0].clone();
                        continue;
                    }
                    for v in &vars {
                        if !r.variables.contains(v) {
                            r.variables.push(v.clone());
                        }
                    }
                }
            }
            "secruleupdateactionbyid" => {
                want(2..=2)?;
                let id: u64 = args[1]
                    .trim()
                    .parse()
                    .map_err(|_| ctx.err(format!("bad rule id {:?}", args[1])))?;
                let new = parse_actions(&args[2]).map_err(|e| ctx.err(e))?;
                for a in &new {
                    match a {
                        Action::Id(n) if *n != id => {
                            return Err(ctx.err("SecRuleUpdateActionById cannot change the id"))
                        }
                        Action::Chain => {
                            return Err(ctx.err("SecRuleUpdateActionById cannot add chain"))
                        }
                        _ => {}
                    }
                }
                let Some(&pos) = self.set.ids.get(&id) else {
                    return Err(ctx.err(format!(
                        "SecRuleUpdateActionById: no rule {id} defined before this line"
                    )));
                };
                let Entry::Rule(r) = &mut self.set.entries[pos] else {
                    unreachable!("the id index points at rules")
                };
                for a in new {
                    if let Some(k) = a.single_kind() {
                        r.actions.retain(|b| b.single_kind() != Some(k));
                    }
                    r.actions.push(a);
                }
                let defaults = &self.set.default_actions;
                finalize_chain(r, defaults);
            }
            "include" | "includeoptional" => {
                want(1..=1)?;
                let optional = name == "includeoptional";
                self.include(ctx, &args[1], optional)?;
            }
            "secrulescript" | "secremoterules" => {
                return Err(ctx.err(format!("{} is not supported", args[0])));
            }
            _ => return Err(ctx.err(format!("unknown directive {}", args[0]))),
        }
        Ok(())
    }

    fn include(&mut self, ctx: &Ctx, pattern: &str, optional: bool) -> Result<(), Error> {
        if self.no_files {
            return Err(ctx.err("Include: files are not read here"));
        }
        if self.depth >= MAX_DEPTH {
            return Err(ctx.err(format!(
                "Include nested more than {MAX_DEPTH} deep (a loop?)"
            )));
        }
        let p = Path::new(pattern);
        let full = match ctx.dir {
            Some(d) if p.is_relative() => d.join(p),
            _ => p.to_path_buf(),
        };
        let files = if pattern.contains(['*', '?', '[']) {
            glob(&full).map_err(|e| ctx.err(e))?
        } else if full.exists() {
            vec![full]
        } else if optional {
            Vec::new()
        } else {
            return Err(ctx.err(format!("Include {}: no such file", full.display())));
        };
        if files.is_empty() && !optional {
            return Err(ctx.err(format!("Include {pattern}: no file matches")));
        }
        self.depth += 1;
        let r = files.iter().try_for_each(|f| self.load_path(f));
        self.depth -= 1;
        r
    }

    fn sec_rule(
        &mut self,
        ctx: &Ctx,
        target_op: Option<(&str, &str)>,
        actions: Option<&str>,
    ) -> Result<(), Error> {
        let (kind, variables, operator) = match target_op {
            Some((vars, op)) => (
                RuleKind::SecRule,
                parse_variables(vars).map_err(|e| ctx.err(e))?,
                parse_operator_in(op, ctx.dir, !self.no_files).map_err(|e| ctx.err(e))?,
            ),
            None => (
                RuleKind::SecAction,
                Vec::new(),
                Operator {
                    name: OperatorName::UnconditionalMatch,
                    negated: false,
                    raw: "".into(),
                    param: OperatorParam::None,
                },
            ),
        };
        let actions = match actions {
            Some(a) => parse_actions(a).map_err(|e| ctx.err(e))?,
            None => Vec::new(),
        };
        let mut id = None;
        let mut phase = None;
        let mut chain = false;
        for a in &actions {
            match a {
                Action::Id(n) => id = Some(*n),
                Action::Phase(p) => phase = Some(*p),
                Action::Chain => chain = true,
                _ => {}
            }
        }
        let mut rule = Rule {
            kind,
            id,
            phase: phase.unwrap_or(2),
            variables,
            operator,
            actions,
            transforms: Vec::new(),
            disruptive: Disruptive::Pass,
            block: false,
            status: None,
            log: true,
            auditlog: true,
            capture: false,
            multi_match: false,
            msg: None,
            logdata: None,
            severity: None,
            tags: Vec::new(),
            ver: None,
            skip: 0,
            skip_after: None,
            chain: Vec::new(),
            file: ctx.file.clone(),
            line: ctx.line,
        };
        if let Some(head) = self.open_chain {
            if kind == RuleKind::SecAction {
                return Err(ctx.err("SecAction cannot be part of a chain"));
            }
            if id.is_some() {
                return Err(ctx.err("a chained rule cannot have an id (only its starter has)"));
            }
            let Entry::Rule(starter) = &mut self.set.entries[head] else {
                unreachable!("open_chain points at a rule")
            };
            rule.phase = starter.phase;
            let p = usize::from(rule.phase);
            finalize(&mut rule, self.set.default_actions[p].as_deref());
            starter.chain.push(rule);
            if !chain {
                self.open_chain = None;
            }
            return Ok(());
        }
        let Some(id) = id else {
            return Err(ctx.err("a rule needs an id action"));
        };
        if let Some(&pos) = self.set.ids.get(&id) {
            if let Entry::Rule(other) = &self.set.entries[pos] {
                return Err(ctx.err(format!(
                    "rule id {id} is already defined at {}:{}",
                    other.file, other.line
                )));
            }
        }
        if kind == RuleKind::SecAction && chain {
            return Err(ctx.err("SecAction cannot start a chain"));
        }
        let p = usize::from(rule.phase);
        finalize(&mut rule, self.set.default_actions[p].as_deref());
        self.set.ids.insert(id, self.set.entries.len());
        if chain {
            self.open_chain = Some(self.set.entries.len());
        }
        self.set.entries.push(Entry::Rule(Box::new(rule)));
        Ok(())
    }
}

/// Recomputes a chain's summary fields after its actions changed.
fn finalize_chain(r: &mut Rule, defaults: &[Option<Vec<Action>>; 6]) {
    for a in &r.actions {
        if let Action::Phase(p) = a {
            r.phase = *p;
        }
    }
    let d = defaults[usize::from(r.phase)].as_deref();
    finalize(r, d);
    let phase = r.phase;
    for link in &mut r.chain {
        link.phase = phase;
        finalize(link, d);
    }
}

/// Fills a rule's summary fields from its actions and the phase's
/// default actions, as ModSecurity merges them.
fn finalize(r: &mut Rule, defaults: Option<&[Action]>) {
    let defaults = defaults.unwrap_or(&[]);
    let mut transforms = Vec::new();
    for a in defaults.iter().chain(r.actions.iter()) {
        if let Action::Transform(t) = a {
            if *t == Transform::None {
                transforms.clear();
            } else {
                transforms.push(*t);
            }
        }
    }
    r.transforms = transforms;

    let mut default_disruptive = Disruptive::Pass;
    let mut log = true;
    let mut auditlog = true;
    let mut status = None;
    let mut msg = None;
    let mut logdata = None;
    let mut severity = None;
    let mut tags = Vec::new();
    for a in defaults {
        match a {
            Action::Disruptive(d) if *d != Disruptive::Block => default_disruptive = d.clone(),
            Action::Log => log = true,
            Action::NoLog => log = false,
            Action::AuditLog => auditlog = true,
            Action::NoAuditLog => auditlog = false,
            Action::Status(s) => status = Some(*s),
            Action::Msg(m) => msg = Some(m.clone()),
            Action::LogData(m) => logdata = Some(m.clone()),
            Action::Severity(s) => severity = Some(*s),
            Action::Tag(t) => tags.push(t.clone()),
            _ => {}
        }
    }
    let mut disruptive = None;
    let mut explicit_auditlog = false;
    let mut nolog = false;
    r.capture = false;
    r.multi_match = false;
    r.ver = None;
    r.skip = 0;
    r.skip_after = None;
    for a in &r.actions {
        match a {
            Action::Disruptive(d) => disruptive = Some(d.clone()),
            Action::Log => {
                log = true;
                nolog = false;
            }
            Action::NoLog => {
                log = false;
                nolog = true;
            }
            Action::AuditLog => {
                auditlog = true;
                explicit_auditlog = true;
            }
            Action::NoAuditLog => {
                auditlog = false;
                explicit_auditlog = true;
            }
            Action::Status(s) => status = Some(*s),
            Action::Msg(m) => msg = Some(m.clone()),
            Action::LogData(m) => logdata = Some(m.clone()),
            Action::Severity(s) => severity = Some(*s),
            Action::Tag(t) => tags.push(t.clone()),
            Action::Ver(v) => r.ver = Some(v.clone()),
            Action::Capture => r.capture = true,
            Action::MultiMatch => r.multi_match = true,
            Action::Skip(n) => r.skip = *n,
            Action::SkipAfter(m) => r.skip_after = Some(m.clone()),
            _ => {}
        }
    }
    // `nolog` implies `noauditlog` unless the rule says otherwise.
    if nolog && !explicit_auditlog {
        auditlog = false;
    }
    r.block = disruptive == Some(Disruptive::Block);
    r.disruptive = match disruptive {
        None | Some(Disruptive::Block) => default_disruptive,
        Some(d) => d,
    };
    r.status = status;
    r.log = log;
    r.auditlog = auditlog;
    r.msg = msg;
    r.logdata = logdata;
    r.severity = severity;
    r.tags = tags;
}

/// Expands `*`, `?` and `[...]` in any component of `path`; matches in
/// name order.
fn glob(path: &Path) -> Result<Vec<PathBuf>, String> {
    let mut current = vec![PathBuf::new()];
    for comp in path.components() {
        let part = comp.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        if part.contains(['*', '?', '[']) {
            for base in &current {
                let dir = if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    base.as_path()
                };
                let Ok(rd) = std::fs::read_dir(dir) else {
                    continue;
                };
                let mut names: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.') && wildcard(part.as_bytes(), n.as_bytes()))
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| base.join(n)));
            }
        } else {
            next = current.iter().map(|b| b.join(comp.as_os_str())).collect();
        }
        current = next;
    }
    Ok(current.into_iter().filter(|p| p.exists()).collect())
}

/// Shell wildcard match of a file name.
fn wildcard(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, len)) = class(&p[pi..], s[si]) {
                        if ok {
                            pi += len;
                            si += 1;
                            continue;
                        }
                    } else if s[si] == b'[' {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// `[abc]`, `[a-z]`, `[!a]`, `[^a]` at the start of `p`: (matches, length).
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let neg = matches!(p.get(1), Some(b'!' | b'^'));
    if neg {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((hit != neg, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            hit |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    None
}
