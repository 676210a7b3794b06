//! The three arguments of a SecRule: variables, operator, actions.

use std::path::Path;

use super::lexer::{split_actions, RawAction};
use super::model::*;
use super::pcre;

/// Parses a variable list: `ARGS|!ARGS:foo|&TX:bar|REQUEST_COOKIES:/^x/`.
/// A `/regex/` key may hold `|`; `'quoted'` keys are unquoted.
pub fn parse_variables(s: &str) -> Result<Vec<Variable>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut exclude = false;
        let mut count = false;
        loop {
            match b.get(i) {
                Some(b'!') if !exclude => exclude = true,
                Some(b'&') if !count => count = true,
                _ => break,
            }
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i] != b':' && b[i] != b'|' {
            i += 1;
        }
        let name = s[start..i].trim();
        if name.is_empty() {
            return Err(format!("empty variable name in {s:?}"));
        }
        let collection =
            Collection::from_name(name).ok_or_else(|| format!("unknown variable {name}"))?;
        let mut selector = None;
        if b.get(i) == Some(&b':') {
            i += 1;
            if b.get(i) == Some(&b'/') && collection != Collection::Xml {
                // A regex up to the next unescaped slash.
                let rs = i + 1;
                let mut j = rs;
                while j < b.len() && b[j] != b'/' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                if j >= b.len() {
                    return Err(format!("missing closing / in the key regex of {name}"));
                }
                let source = &s[rs..j];
                let regex = pcre::compile_selector(source)
                    .map_err(|e| format!("bad key regex /{source}/ of {name}: {e}"))?;
                selector = Some(Selector::Regex {
                    source: source.into(),
                    regex,
                });
                i = j + 1;
            } else if b.get(i) == Some(&b'\'') {
                let ks = i + 1;
                let end = s[ks..]
                    .find('\'')
                    .ok_or_else(|| format!("missing closing ' in the key of {name}"))?;
                selector = Some(Selector::Key(s[ks..ks + end].into()));
                i = ks + end + 1;
            } else {
                let ks = i;
                while i < b.len() && b[i] != b'|' {
                    i += 1;
                }
                let key = s[ks..i].trim();
                if key.is_empty() {
                    return Err(format!("empty key after {name}:"));
                }
                selector = Some(Selector::Key(key.into()));
            }
        }
        out.push(Variable {
            collection,
            selector,
            count,
            exclude,
        });
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        match b.get(i) {
            None => break,
            Some(b'|') => i += 1,
            Some(_) => {
                let near: String = s[i..].chars().take(10).collect();
                return Err(format!("unexpected {near:?} after variable {name}"));
            }
        }
    }
    Ok(out)
}

/// Reads a `.data` list: one entry a line; lines whose first non-blank
/// character is `#` and blank lines skipped (entries keep inner and
/// leading blanks, as ModSecurity reads them).
pub fn read_list(path: &Path) -> Result<Vec<Box<str>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .map(Into::into)
        .collect())
}

/// Parses the operator argument (`@rx foo`, `!@eq 0`, `foo`).
/// `dir` resolves `@pmFromFile` and `@ipMatchFromFile` files.
pub fn parse_operator(s: &str, dir: Option<&Path>) -> Result<Operator, String> {
    parse_operator_in(s, dir, true)
}

/// [`parse_operator`], refusing file-reading operators unless `files`.
pub(crate) fn parse_operator_in(
    s: &str,
    dir: Option<&Path>,
    files: bool,
) -> Result<Operator, String> {
    let (negated, rest) = match s.strip_prefix('!') {
        Some(r) if r.trim_start().starts_with('@') => (true, r.trim_start()),
        Some(r) => (true, r),
        None => (false, s),
    };
    let (name, raw) = match rest.strip_prefix('@') {
        Some(r) => {
            let end = r.find([' ', '\t']).unwrap_or(r.len());
            let name = OperatorName::from_name(&r[..end])
                .ok_or_else(|| format!("unknown operator @{}", &r[..end]))?;
            (name, r[end..].trim_start_matches([' ', '\t']))
        }
        None => (OperatorName::Rx, rest),
    };
    if !files
        && matches!(
            name,
            OperatorName::PmFromFile | OperatorName::IpMatchFromFile
        )
    {
        return Err(format!("@{name}: files are not read here"));
    }
    let param = operator_param(name, raw, dir)?;
    Ok(Operator {
        name,
        negated,
        raw: raw.into(),
        param,
    })
}

fn resolve(dir: Option<&Path>, file: &str) -> std::path::PathBuf {
    let p = Path::new(file);
    match dir {
        Some(d) if p.is_relative() => d.join(p),
        _ => p.to_path_buf(),
    }
}

fn check_ip(s: &str) -> Result<(), String> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("@ipMatch: {s:?} is not an address or network"))?;
    if let Some(p) = prefix {
        let max = if ip.is_ipv4() { 32 } else { 128 };
        match p.parse::<u8>() {
            Ok(n) if n <= max => {}
            _ => return Err(format!("@ipMatch: bad prefix length in {s:?}")),
        }
    }
    Ok(())
}

fn operator_param(
    name: OperatorName,
    raw: &str,
    dir: Option<&Path>,
) -> Result<OperatorParam, String> {
    use OperatorName as O;
    Ok(match name {
        O::Rx => {
            if raw.contains("%{") {
                if let Ok(m) = Macro::parse(raw) {
                    if m.has_vars() {
                        return Ok(OperatorParam::DynamicRegex(m));
                    }
                }
            }
            let translated =
                pcre::check_pcre(raw).map_err(|e| format!("@rx pattern does not compile: {e}"))?;
            OperatorParam::Regex {
                translated: translated.into(),
            }
        }
        O::Pm => {
            let list: Vec<Box<str>> = raw.split_ascii_whitespace().map(Into::into).collect();
            if list.is_empty() {
                return Err("@pm needs at least one phrase".into());
            }
            OperatorParam::List(list)
        }
        O::PmFromFile | O::IpMatchFromFile => {
            let mut list = Vec::new();
            let mut files = 0;
            for f in raw.split_ascii_whitespace() {
                if f.starts_with("http://") || f.starts_with("https://") {
                    return Err(format!("@{name}: remote lists are not supported ({f})"));
                }
                list.extend(read_list(&resolve(dir, f))?);
                files += 1;
            }
            if files == 0 {
                return Err(format!("@{name} needs a file name"));
            }
            if name == O::IpMatchFromFile {
                for ip in &list {
                    check_ip(ip.trim())?;
                }
            }
            OperatorParam::List(list)
        }
        O::IpMatch => {
            let list: Vec<Box<str>> = raw
                .split([',', ' ', '\t'])
                .filter(|s| !s.is_empty())
                .map(Into::into)
                .collect();
            if list.is_empty() {
                return Err("@ipMatch needs an address".into());
            }
            for ip in &list {
                check_ip(ip)?;
            }
            OperatorParam::List(list)
        }
        O::ValidateByteRange => {
            let mut ranges = Vec::new();
            for part in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let byte = |s: &str| {
                    s.trim()
                        .parse::<u8>()
                        .map_err(|_| format!("@validateByteRange: bad byte {s:?}"))
                };
                let (a, b) = match part.split_once('-') {
                    Some((a, b)) => (byte(a)?, byte(b)?),
                    None => (byte(part)?, byte(part)?),
                };
                if a > b {
                    return Err(format!("@validateByteRange: empty range {part}"));
                }
                ranges.push((a, b));
            }
            if ranges.is_empty() {
                return Err("@validateByteRange needs a range".into());
            }
            OperatorParam::ByteRanges(ranges)
        }
        O::DetectSqli
        | O::DetectXss
        | O::ValidateUrlEncoding
        | O::ValidateUtf8Encoding
        | O::UnconditionalMatch
        | O::NoMatch => OperatorParam::None,
        _ => OperatorParam::Text(Macro::parse(raw)?),
    })
}

/// Parses `1`, `1-5`, `1,2 7-9` into ranges.
pub fn parse_id_ranges(s: &str) -> Result<Vec<IdRange>, String> {
    let mut out = Vec::new();
    for part in s.split([',', ' ', '\t']).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("bad rule id {t:?}"))
        };
        let r = match part.split_once('-') {
            Some((a, b)) => IdRange {
                first: num(a)?,
                last: num(b)?,
            },
            None => {
                let n = num(part)?;
                IdRange { first: n, last: n }
            }
        };
        if r.first > r.last {
            return Err(format!("empty id range {part}"));
        }
        out.push(r);
    }
    if out.is_empty() {
        return Err("no rule id given".into());
    }
    Ok(out)
}

fn on_off(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("expected On or Off, not {v:?}")),
    }
}

fn parse_ctl(v: &str) -> Result<Ctl, String> {
    let (name, value) = v
        .split_once('=')
        .ok_or_else(|| format!("ctl:{v}: expected name=value"))?;
    let name = name.trim();
    let value = value.trim();
    let targets = |v: &str| -> Result<(String, Vec<Variable>), String> {
        let (what, vars) = v
            .split_once(';')
            .ok_or_else(|| format!("ctl:{name}: expected ...;TARGET"))?;
        Ok((what.trim().to_string(), parse_variables(vars)?))
    };
    Ok(match name.to_ascii_lowercase().as_str() {
        "ruleengine" => Ctl::RuleEngine(
            EngineMode::parse(value)
                .ok_or_else(|| format!("ctl:ruleEngine: bad mode {value:?}"))?,
        ),
        "ruleremovebyid" => Ctl::RuleRemoveById(parse_id_ranges(value)?),
        "ruleremovebytag" => Ctl::RuleRemoveByTag(value.into()),
        "ruleremovebymsg" => Ctl::RuleRemoveByMsg(value.into()),
        "ruleremovetargetbyid" => {
            let (ids, vars) = targets(value)?;
            Ctl::RuleRemoveTargetById(parse_id_ranges(&ids)?, vars)
        }
        "ruleremovetargetbytag" => {
            let (tag, vars) = targets(value)?;
            Ctl::RuleRemoveTargetByTag(tag.into(), vars)
        }
        "ruleremovetargetbymsg" => {
            let (msg, vars) = targets(value)?;
            Ctl::RuleRemoveTargetByMsg(msg.into(), vars)
        }
        "requestbodyprocessor" => Ctl::RequestBodyProcessor(
            BodyProcessor::parse(value)
                .ok_or_else(|| format!("ctl:requestBodyProcessor: unknown {value:?}"))?,
        ),
        "requestbodyaccess" => Ctl::RequestBodyAccess(on_off(value)?),
        "responsebodyaccess" => Ctl::ResponseBodyAccess(on_off(value)?),
        "forcerequestbodyvariable" => Ctl::ForceRequestBodyVariable(on_off(value)?),
        "requestbodylimit" => Ctl::RequestBodyLimit(
            value
                .parse()
                .map_err(|_| format!("ctl:requestBodyLimit: bad number {value:?}"))?,
        ),
        "auditengine" => Ctl::AuditEngine(
            AuditEngine::parse(value).ok_or_else(|| format!("ctl:auditEngine: bad {value:?}"))?,
        ),
        "auditlogparts" => Ctl::AuditLogParts(value.into()),
        "debugloglevel" => Ctl::DebugLogLevel(
            value
                .parse()
                .map_err(|_| format!("ctl:debugLogLevel: bad number {value:?}"))?,
        ),
        "hashengine" | "hashenforcement" | "parsexmlintoargs" | "responsebodyprocessor" => {
            Ctl::Other(name.into(), value.into())
        }
        _ => return Err(format!("unknown ctl:{name}")),
    })
}

/// `col.key` (or `col:key`) of setvar, expirevar.
fn col_key(s: &str, action: &str) -> Result<(Box<str>, Macro), String> {
    let i = s
        .find(['.', ':'])
        .ok_or_else(|| format!("{action}:{s}: expected collection.name"))?;
    let col = s[..i].trim();
    if col.is_empty() || !col.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return Err(format!("{action}:{s}: bad collection name {col:?}"));
    }
    let key = s[i + 1..].trim();
    if key.is_empty() {
        return Err(format!("{action}:{s}: empty variable name"));
    }
    Ok((col.to_ascii_lowercase().into(), Macro::parse(key)?))
}

fn parse_setvar(v: &str) -> Result<SetVar, String> {
    let v = v.trim();
    if let Some(rest) = v.strip_prefix('!') {
        let (collection, key) = col_key(rest, "setvar")?;
        return Ok(SetVar {
            collection,
            key,
            op: SetVarOp::Delete,
        });
    }
    let Some((target, value)) = v.split_once('=') else {
        let (collection, key) = col_key(v, "setvar")?;
        return Ok(SetVar {
            collection,
            key,
            op: SetVarOp::Touch,
        });
    };
    let (collection, key) = col_key(target, "setvar")?;
    let op = if let Some(n) = value.strip_prefix('+') {
        SetVarOp::Add(Macro::parse(n)?)
    } else if let Some(n) = value.strip_prefix('-') {
        SetVarOp::Sub(Macro::parse(n)?)
    } else {
        SetVarOp::Set(Macro::parse(value)?)
    };
    Ok(SetVar {
        collection,
        key,
        op,
    })
}

fn need(a: &RawAction) -> Result<&str, String> {
    match a.value.as_deref() {
        Some(v) => Ok(v),
        None => Err(format!("action {} needs a value", a.name)),
    }
}

fn number<T: std::str::FromStr>(a: &RawAction) -> Result<T, String> {
    let v = need(a)?;
    v.trim()
        .parse()
        .map_err(|_| format!("action {}: bad number {v:?}", a.name))
}

/// Parses a phase value (`1`-`5`, `request`, `response`, `logging`).
pub fn parse_phase(v: &str) -> Result<u8, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "request" => Ok(2),
        "response" => Ok(4),
        "logging" => Ok(5),
        n => match n.parse::<u8>() {
            Ok(p @ 1..=5) => Ok(p),
            _ => Err(format!(
                "bad phase {v:?} (1 to 5, request, response, logging)"
            )),
        },
    }
}

fn parse_action(a: &RawAction) -> Result<Action, String> {
    let name = a.name.to_ascii_lowercase();
    let flag = |act: Action| -> Result<Action, String> {
        match &a.value {
            None => Ok(act),
            Some(_) => Err(format!("action {} takes no value", a.name)),
        }
    };
    Ok(match name.as_str() {
        "id" => {
            let id: u64 = number(a)?;
            if id == 0 {
                return Err("rule id 0 is not allowed".into());
            }
            Action::Id(id)
        }
        "phase" => Action::Phase(parse_phase(need(a)?)?),
        "msg" => Action::Msg(Macro::parse(need(a)?)?),
        "logdata" => Action::LogData(Macro::parse(need(a)?)?),
        "tag" => Action::Tag(need(a)?.into()),
        "severity" => {
            let v = need(a)?;
            Action::Severity(
                Severity::parse(v.trim()).ok_or_else(|| format!("bad severity {v:?}"))?,
            )
        }
        "ver" => Action::Ver(need(a)?.into()),
        "rev" => Action::Rev(need(a)?.into()),
        "maturity" => Action::Maturity(number(a)?),
        "accuracy" => Action::Accuracy(number(a)?),
        "t" => {
            let v = need(a)?;
            Action::Transform(
                Transform::from_name(v.trim())
                    .ok_or_else(|| format!("unknown transformation t:{v}"))?,
            )
        }
        "chain" => flag(Action::Chain)?,
        "skip" => {
            let n: u32 = number(a)?;
            if n == 0 {
                return Err("skip needs a positive number".into());
            }
            Action::Skip(n)
        }
        "skipafter" => Action::SkipAfter(need(a)?.trim().into()),
        "pass" => flag(Action::Disruptive(Disruptive::Pass))?,
        "block" => flag(Action::Disruptive(Disruptive::Block))?,
        "deny" => flag(Action::Disruptive(Disruptive::Deny))?,
        "drop" => flag(Action::Disruptive(Disruptive::Drop))?,
        "allow" => Action::Disruptive(Disruptive::Allow(
            match a.value.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
                None => AllowScope::All,
                Some(v) if v == "phase" => AllowScope::Phase,
                Some(v) if v == "request" => AllowScope::Request,
                Some(v) => return Err(format!("allow:{v}: expected phase or request")),
            },
        )),
        "redirect" => Action::Disruptive(Disruptive::Redirect(Macro::parse(need(a)?)?)),
        "proxy" => Action::Disruptive(Disruptive::Proxy(Macro::parse(need(a)?)?)),
        "pause" => Action::Disruptive(Disruptive::Pause(number(a)?)),
        "status" => {
            let s: u16 = number(a)?;
            if !(100..=999).contains(&s) {
                return Err(format!("status:{s}: not an HTTP status"));
            }
            Action::Status(s)
        }
        "capture" => flag(Action::Capture)?,
        "multimatch" => flag(Action::MultiMatch)?,
        "log" => flag(Action::Log)?,
        "nolog" => flag(Action::NoLog)?,
        "auditlog" => flag(Action::AuditLog)?,
        "noauditlog" => flag(Action::NoAuditLog)?,
        "setvar" => Action::SetVar(parse_setvar(need(a)?)?),
        "expirevar" => {
            let v = need(a)?;
            let (target, secs) = v
                .split_once('=')
                .ok_or_else(|| format!("expirevar:{v}: expected collection.name=seconds"))?;
            let (collection, key) = col_key(target, "expirevar")?;
            Action::ExpireVar {
                collection,
                key,
                seconds: Macro::parse(secs.trim())?,
            }
        }
        "initcol" => {
            let v = need(a)?;
            let (col, key) = v
                .split_once('=')
                .ok_or_else(|| format!("initcol:{v}: expected collection=key"))?;
            Action::InitCol {
                collection: col.trim().to_ascii_lowercase().into(),
                key: Macro::parse(key.trim())?,
            }
        }
        "setenv" => {
            let v = need(a)?;
            match v.strip_prefix('!') {
                Some(n) => Action::SetEnv {
                    name: Macro::parse(n.trim())?,
                    value: None,
                },
                None => {
                    let (n, val) = v.split_once('=').unwrap_or((v, "1"));
                    Action::SetEnv {
                        name: Macro::parse(n.trim())?,
                        value: Some(Macro::parse(val)?),
                    }
                }
            }
        }
        "setuid" => Action::SetUid(Macro::parse(need(a)?)?),
        "setsid" => Action::SetSid(Macro::parse(need(a)?)?),
        "setrsc" => Action::SetRsc(Macro::parse(need(a)?)?),
        "ctl" => Action::Ctl(parse_ctl(need(a)?)?),
        "sanitisearg" | "sanitizearg" => Action::SanitiseArg(need(a)?.into()),
        "sanitisematched" | "sanitizematched" => flag(Action::SanitiseMatched)?,
        "sanitisematchedbytes" | "sanitizematchedbytes" => {
            Action::SanitiseMatchedBytes(a.value.as_deref().map(Into::into))
        }
        "sanitiserequestheader" | "sanitizerequestheader" => {
            Action::SanitiseRequestHeader(need(a)?.into())
        }
        "sanitiseresponseheader" | "sanitizeresponseheader" => {
            Action::SanitiseResponseHeader(need(a)?.into())
        }
        "exec" => Action::Exec(need(a)?.into()),
        "append" => Action::Append(Macro::parse(need(a)?)?),
        "prepend" => Action::Prepend(Macro::parse(need(a)?)?),
        "xmlns" => Action::Xmlns(need(a)?.into()),
        "deprecatevar" => Action::DeprecateVar(need(a)?.into()),
        _ => return Err(format!("unknown action {}", a.name)),
    })
}

/// Parses an action list.
pub fn parse_actions(s: &str) -> Result<Vec<Action>, String> {
    split_actions(s)?.iter().map(parse_action).collect()
}
