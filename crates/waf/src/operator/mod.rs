//! SecLang operators (`@rx`, `@pm`, `@streq`, ...) with ModSecurity v3
//! semantics, except `@detectSQLi`/`@detectXSS` (see `waf::libinjection`).
//!
//! `compile(name, arg)` builds an operator once at load time (the name with
//! or without `@`, without the `!` negation, which is the engine's);
//! `Operator::matches(input, captures)` evaluates it. Arguments that contain
//! a macro (`%{tx.allowed_methods}`) cannot be evaluated before the
//! transaction: `Operator::is_dynamic()` tells, and the engine passes the
//! expanded argument to `Operator::matches_arg`.
//!
//! `@rx` is compiled once with `regex::bytes` (Unicode off, DOTALL and
//! MULTILINE as ModSecurity compiles PCRE; PCRE's `\x{HH}` rewritten to
//! `\xHH`), and guarded by a literal prefilter (`prefilter`): the literals
//! one of which any match contains, found with Aho-Corasick or memchr, so
//! most patterns never run on benign input.

pub mod prefilter;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::path::Path;

use regex::bytes::{Regex, RegexBuilder};

pub use prefilter::{required_literals, Prefilter, PrefilterSet, Sig, SigChecks};

/// TX.0 to TX.9 as set by a matching operator when the rule has `capture`.
/// The buffers are reused from one evaluation to the next.
#[derive(Debug, Default, Clone)]
pub struct Captures {
    slots: [Vec<u8>; 10],
    set: [bool; 10],
}

impl Captures {
    pub fn new() -> Captures {
        Captures::default()
    }

    pub fn clear(&mut self) {
        self.set = [false; 10];
    }

    /// TX.`i`, if the last match set it.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (i < 10 && self.set[i]).then(|| self.slots[i].as_slice())
    }

    /// How many slots are set (the highest set index + 1).
    pub fn len(&self) -> usize {
        self.set.iter().rposition(|s| *s).map_or(0, |p| p + 1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn put(&mut self, i: usize, v: &[u8]) {
        if i < 10 {
            self.slots[i].clear();
            self.slots[i].extend_from_slice(v);
            self.set[i] = true;
        }
    }
}

/// A compiled `@rx`.
///
/// With a prefilter, the regex is built the first time the prefilter lets
/// a value through: most CRS patterns never get that far on benign
/// traffic, and their automata (up to 700 KiB each, about 12 MiB over the
/// CRS) would otherwise be the bulk of a loaded rule set. The syntax is
/// checked up front, so a bad pattern still fails at load.
#[derive(Debug)]
pub struct Rx {
    pub pattern: String,
    /// The pattern as the regex crate reads it.
    translated: Box<str>,
    regex: std::sync::OnceLock<Regex>,
    /// Literals one of which every match contains (lower-case), if any.
    pub literals: Option<Vec<Vec<u8>>>,
    prefilter: Option<Prefilter>,
    /// A second required set, from another part of the pattern
    /// ([`prefilter::secondary_literals`]): checked on the value's
    /// summary only, where it costs a few bit tests.
    also: Option<SigChecks>,
    /// The pattern is `^.*$`: with DOTALL it matches all of any value,
    /// which is what it captures (CRS 920450 and 920451 capture each
    /// header name with it; a capturing search costs more than the rest
    /// of those rules).
    whole: bool,
}

fn build_rx(pattern: &str, translated: &str) -> Result<Regex, String> {
    RegexBuilder::new(translated)
        .unicode(false)
        .dot_matches_new_line(true)
        .multi_line(true)
        .size_limit(64 << 20)
        .dfa_size_limit(16 << 20)
        .build()
        .map_err(|e| format!("@rx {pattern:?}: {e}"))
}

impl Rx {
    pub fn new(pattern: &str) -> Result<Rx, String> {
        let translated = translate(pattern);
        let literals = required_literals(&translated);
        let prefilter = literals.as_deref().and_then(Prefilter::new);
        let also = match (&prefilter, &literals) {
            (Some(_), Some(l)) => {
                prefilter::secondary_literals(&translated, l).map(|s| SigChecks::new(&s))
            }
            _ => None,
        };
        let regex = std::sync::OnceLock::new();
        if prefilter.is_none() {
            // Run on every value anyway: build it now.
            let _ = regex.set(build_rx(pattern, &translated)?);
        } else {
            // The flags `build_rx` compiles with; what the parser accepts
            // compiles (the size limit is far above any rule's needs).
            regex_syntax::ParserBuilder::new()
                .unicode(false)
                .utf8(false)
                .dot_matches_new_line(true)
                .multi_line(true)
                .build()
                .parse(&translated)
                .map_err(|e| format!("@rx {pattern:?}: {e}"))?;
        }
        Ok(Rx {
            pattern: pattern.to_string(),
            whole: translated == "^.*$",
            translated: translated.into(),
            regex,
            literals,
            prefilter,
            also,
        })
    }

    /// The compiled regex (built on first use). `None` only if the build
    /// fails after the syntax check passed (a size limit): never matches.
    pub fn regex(&self) -> Option<&Regex> {
        if let Some(r) = self.regex.get() {
            return Some(r);
        }
        match build_rx(&self.pattern, &self.translated) {
            Ok(r) => Some(self.regex.get_or_init(|| r)),
            Err(_) => None,
        }
    }

    /// Whether the prefilter lets `input` through (true without one).
    #[inline]
    pub fn may_match(&self, input: &[u8]) -> bool {
        self.prefilter.as_ref().is_none_or(|p| p.may_match(input))
    }

    pub fn has_prefilter(&self) -> bool {
        self.prefilter.is_some()
    }

    /// The regex alone, without the prefilter (for measurements).
    pub fn matches_unfiltered(&self, input: &[u8]) -> bool {
        self.regex().is_some_and(|r| r.is_match(input))
    }

    pub fn matches(&self, input: &[u8], captures: Option<&mut Captures>) -> bool {
        if !self.may_match(input) {
            return false;
        }
        self.matches_past_prefilter(input, captures)
    }

    /// Whether the prefilter lets `input` through, given its [`Sig`] (the
    /// engine keeps one per transformed value).
    #[inline]
    pub fn may_match_sig(&self, input: &[u8], sig: &Sig) -> bool {
        // `may_match_summary` spelled out: one look at the prefilter
        // (through it, 4 k more instructions per benign GET).
        self.prefilter.as_ref().is_none_or(|p| {
            self.also.as_ref().is_none_or(|a| a.may(sig))
                && p.may_match_summary(sig)
                && p.may_match_past_summary(input)
        })
    }

    /// Whether a value summarised by `sig` (or a value of a list whose
    /// summaries' union is `sig`) may pass the prefilter: false means none
    /// matches (true without a prefilter).
    #[inline]
    pub fn may_match_summary(&self, sig: &Sig) -> bool {
        self.prefilter.as_ref().is_none_or(|p| {
            self.also.as_ref().is_none_or(|a| a.may(sig)) && p.may_match_summary(sig)
        })
    }

    /// [`Rx::matches`] with the value's [`Sig`].
    pub fn matches_sig(&self, input: &[u8], sig: &Sig, captures: Option<&mut Captures>) -> bool {
        if !self.may_match_sig(input, sig) {
            return false;
        }
        self.matches_past_prefilter(input, captures)
    }

    fn matches_past_prefilter(&self, input: &[u8], captures: Option<&mut Captures>) -> bool {
        if self.whole {
            if let Some(c) = captures {
                c.clear();
                c.put(0, input);
            }
            return true;
        }
        let Some(regex) = self.regex() else {
            return false;
        };
        match captures {
            None => regex.is_match(input),
            // `is_match` first: it allocates nothing and is the common
            // answer (no match) at a fraction of a capturing search.
            Some(_) if !regex.is_match(input) => false,
            Some(c) => match regex.captures(input) {
                None => false,
                Some(caps) => {
                    c.clear();
                    for i in 0..caps.len().min(10) {
                        if let Some(m) = caps.get(i) {
                            c.put(i, m.as_bytes());
                        }
                    }
                    true
                }
            },
        }
    }
}

/// PCRE spellings the regex crate reads differently: `\x{HH}` (one or two
/// hex digits) becomes `\xHH`, so that with Unicode off it stands for the
/// byte, as in PCRE without UTF mode.
fn translate(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = String::with_capacity(p.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            if b[i + 1] == b'x' && b.get(i + 2) == Some(&b'{') {
                if let Some(close) = p[i + 3..].find('}') {
                    let hex = &p[i + 3..i + 3 + close];
                    if (1..=2).contains(&hex.len()) && hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                        out.push_str("\\x");
                        if hex.len() == 1 {
                            out.push('0');
                        }
                        out.push_str(hex);
                        i += 4 + close;
                        continue;
                    }
                }
            }
            // Keep any other escape (two characters) as it is.
            out.push('\\');
            let ch = p[i + 1..].chars().next().unwrap_or('\\');
            out.push(ch);
            i += 1 + ch.len_utf8();
            continue;
        }
        let ch = p[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// A compiled `@pm` / `@pmFromFile`: phrases matched anywhere, without
/// regard to ASCII case (ModSecurity's acmp with no flags).
#[derive(Debug)]
pub struct Pm {
    pub phrases: Vec<Vec<u8>>,
    ac: Option<aho_corasick::AhoCorasick>,
    /// What a value's [`Sig`] needs to hold a phrase.
    checks: SigChecks,
}

impl Pm {
    pub fn new(phrases: Vec<Vec<u8>>) -> Result<Pm, String> {
        let ac = if phrases.is_empty() {
            None
        } else {
            Some(
                aho_corasick::AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
                    .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                    .build(&phrases)
                    .map_err(|e| format!("@pm: {e}"))?,
            )
        };
        let checks = SigChecks::new(&phrases);
        Ok(Pm {
            phrases,
            ac,
            checks,
        })
    }

    /// Whether a value summarised by `sig` (or a value of a list whose
    /// summaries' union is `sig`) may hold a phrase: false means none does.
    #[inline]
    pub fn may_match_summary(&self, sig: &Sig) -> bool {
        self.checks.may(sig)
    }

    /// [`Pm::matches`] with the value's [`Sig`]: most values are ruled
    /// out without the automaton.
    pub fn matches_sig(&self, input: &[u8], sig: &Sig, captures: Option<&mut Captures>) -> bool {
        self.checks.may(sig) && self.matches(input, captures)
    }

    pub fn matches(&self, input: &[u8], captures: Option<&mut Captures>) -> bool {
        let Some(ac) = &self.ac else {
            return false;
        };
        match captures {
            None => ac.is_match(input),
            Some(c) => match ac.find(input) {
                Some(m) => {
                    // ModSecurity stores the phrase as listed.
                    c.clear();
                    c.put(0, &self.phrases[m.pattern().as_usize()]);
                    true
                }
                None => false,
            },
        }
    }
}

/// `@pm`'s argument: optional surrounding quotes, `|41 42|` hex blocks,
/// phrases separated by whitespace.
pub fn parse_pm_phrases(arg: &str) -> Result<Vec<Vec<u8>>, String> {
    let s = arg.trim_start_matches([' ', '\t']);
    let s = if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        &s[1..s.len() - 1]
    } else {
        s
    };
    if s.is_empty() {
        return Err("@pm: empty argument".into());
    }
    let mut bytes = Vec::with_capacity(s.len());
    let mut bin = false;
    let mut hex: Vec<u8> = Vec::new();
    for &c in s.as_bytes() {
        if c == b'|' {
            bin = !bin;
            hex.clear();
        } else if bin {
            if c.is_ascii_hexdigit() {
                hex.push(c);
                if hex.len() == 2 {
                    let v = u8::from_str_radix(std::str::from_utf8(&hex).unwrap_or("0"), 16)
                        .unwrap_or(0);
                    bytes.push(v);
                    hex.clear();
                }
            }
        } else {
            bytes.push(c);
        }
    }
    Ok(bytes
        .split(|c| c.is_ascii_whitespace())
        .filter(|p| !p.is_empty())
        .map(|p| p.to_vec())
        .collect())
}

/// The phrases of a `@pmFromFile` list: one per line; empty lines and lines
/// whose first non-blank character is `#` are skipped; a CR before the LF
/// is dropped (the rest of the line is kept as it is).
pub fn parse_pm_file(text: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let first = line.iter().position(|c| !c.is_ascii_whitespace());
        match first {
            None => continue,
            Some(p) if line[p] == b'#' => continue,
            _ => out.push(line.to_vec()),
        }
    }
    out
}

/// A set of IPv4/IPv6 networks for `@ipMatch` / `@ipMatchFromFile`.
#[derive(Debug, Default)]
pub struct IpSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl IpSet {
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<IpSet, String> {
        let mut set = IpSet::default();
        for e in entries {
            let e = e.trim();
            if e.is_empty() {
                continue;
            }
            let (addr, bits) = match e.split_once('/') {
                Some((a, b)) => (
                    a,
                    Some(
                        b.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("@ipMatch: bad prefix in {e:?}"))?,
                    ),
                ),
                None => (e, None),
            };
            match addr
                .trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("@ipMatch: bad address {e:?}"))?
            {
                IpAddr::V4(a) => {
                    let bits = bits.unwrap_or(32);
                    if bits > 32 {
                        return Err(format!("@ipMatch: bad prefix in {e:?}"));
                    }
                    let mask = if bits == 0 {
                        0
                    } else {
                        u32::MAX << (32 - bits)
                    };
                    set.v4.push((u32::from(a) & mask, mask));
                }
                IpAddr::V6(a) => {
                    let bits = bits.unwrap_or(128);
                    if bits > 128 {
                        return Err(format!("@ipMatch: bad prefix in {e:?}"));
                    }
                    let mask = if bits == 0 {
                        0
                    } else {
                        u128::MAX << (128 - bits)
                    };
                    set.v6.push((u128::from(a) & mask, mask));
                }
            }
        }
        Ok(set)
    }

    pub fn contains(&self, input: &[u8]) -> bool {
        let Ok(s) = std::str::from_utf8(input) else {
            return false;
        };
        match s.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => {
                let a = u32::from(a);
                self.v4.iter().any(|(n, m)| a & m == *n)
            }
            Ok(IpAddr::V6(a)) => {
                let a = u128::from(a);
                self.v6.iter().any(|(n, m)| a & m == *n)
            }
            Err(_) => false,
        }
    }
}

/// An operator argument that may hold macros.
#[derive(Debug, Clone)]
pub struct Arg {
    pub text: Vec<u8>,
    /// Contains `%{...}`: to be expanded per transaction by the engine.
    pub dynamic: bool,
}

impl Arg {
    fn new(s: &str) -> Arg {
        Arg {
            text: s.as_bytes().to_vec(),
            dynamic: s.contains("%{"),
        }
    }
}

/// Comparisons of `@eq`, `@ge`, `@gt`, `@le`, `@lt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ge,
    Gt,
    Le,
    Lt,
}

/// One compiled operator.
#[derive(Debug)]
pub enum Operator {
    Rx(Box<Rx>),
    Pm(Box<Pm>),
    StrEq(Arg),
    Contains(Arg),
    ContainsWord(Arg),
    BeginsWith(Arg),
    EndsWith(Arg),
    Within(Arg),
    StrMatch(Arg),
    Num(Cmp, Arg),
    IpMatch(Box<IpSet>),
    ValidateByteRange(Box<[bool; 256]>),
    ValidateUrlEncoding,
    ValidateUtf8Encoding,
    UnconditionalMatch,
    NoMatch,
}

/// Compiles `@name arg`; files (`@pmFromFile`, `@ipMatchFromFile`) are
/// relative to the current directory. See `compile_in`.
pub fn compile(name: &str, arg: &str) -> Result<Operator, String> {
    compile_in(name, arg, Path::new("."))
}

/// Compiles `@name arg`, reading the files of `@pmFromFile` (several may be
/// listed, separated by spaces) and `@ipMatchFromFile` relative to `dir`
/// (the directory of the rule file, as ModSecurity does).
pub fn compile_in(name: &str, arg: &str, dir: &Path) -> Result<Operator, String> {
    let n = name.trim().trim_start_matches('@');
    let is = |s: &str| n.eq_ignore_ascii_case(s);
    let op = if is("rx") {
        Operator::Rx(Box::new(Rx::new(arg)?))
    } else if is("pm") {
        Operator::Pm(Box::new(Pm::new(parse_pm_phrases(arg)?)?))
    } else if is("pmFromFile") || is("pmf") {
        let mut phrases = Vec::new();
        for f in arg.split_ascii_whitespace() {
            let path = dir.join(f);
            let text =
                std::fs::read(&path).map_err(|e| format!("@pmFromFile {}: {e}", path.display()))?;
            phrases.extend(parse_pm_file(&text));
        }
        Operator::Pm(Box::new(Pm::new(phrases)?))
    } else if is("streq") {
        Operator::StrEq(Arg::new(arg))
    } else if is("contains") {
        Operator::Contains(Arg::new(arg))
    } else if is("containsWord") {
        Operator::ContainsWord(Arg::new(arg))
    } else if is("beginsWith") {
        Operator::BeginsWith(Arg::new(arg))
    } else if is("endsWith") {
        Operator::EndsWith(Arg::new(arg))
    } else if is("within") {
        Operator::Within(Arg::new(arg))
    } else if is("strmatch") {
        Operator::StrMatch(Arg::new(arg))
    } else if is("eq") {
        Operator::Num(Cmp::Eq, Arg::new(arg))
    } else if is("ge") {
        Operator::Num(Cmp::Ge, Arg::new(arg))
    } else if is("gt") {
        Operator::Num(Cmp::Gt, Arg::new(arg))
    } else if is("le") {
        Operator::Num(Cmp::Le, Arg::new(arg))
    } else if is("lt") {
        Operator::Num(Cmp::Lt, Arg::new(arg))
    } else if is("ipMatch") {
        Operator::IpMatch(Box::new(IpSet::parse(arg.split(','))?))
    } else if is("ipMatchFromFile") || is("ipMatchF") {
        let path = dir.join(arg.trim());
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("@ipMatchFromFile {}: {e}", path.display()))?;
        let lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        Operator::IpMatch(Box::new(IpSet::parse(lines)?))
    } else if is("validateByteRange") {
        Operator::ValidateByteRange(Box::new(parse_byte_ranges(arg)?))
    } else if is("validateUrlEncoding") {
        Operator::ValidateUrlEncoding
    } else if is("validateUtf8Encoding") {
        Operator::ValidateUtf8Encoding
    } else if is("unconditionalMatch") {
        Operator::UnconditionalMatch
    } else if is("noMatch") {
        Operator::NoMatch
    } else if is("detectSQLi") || is("detectXSS") {
        return Err(format!("@{n} is provided by waf::libinjection"));
    } else {
        return Err(format!("unknown operator @{n}"));
    };
    Ok(op)
}

/// `@validateByteRange` ranges: `a-b` or `a`, separated by commas.
fn parse_byte_ranges(arg: &str) -> Result<[bool; 256], String> {
    let mut table = [false; 256];
    for part in arg.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let num = |s: &str| -> Result<usize, String> {
            let v: usize = s
                .trim()
                .parse()
                .map_err(|_| format!("@validateByteRange: bad range {part:?}"))?;
            if v > 255 {
                return Err(format!("@validateByteRange: {v} out of range"));
            }
            Ok(v)
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(part)?;
                (v, v)
            }
        };
        if a > b {
            return Err(format!("@validateByteRange: bad range {part:?}"));
        }
        for t in &mut table[a..=b] {
            *t = true;
        }
    }
    Ok(table)
}

/// `std::stoi` as ModSecurity's numeric operators use it: leading
/// whitespace, an optional sign, digits up to the first non-digit; no digit
/// or a value outside `int` gives 0.
pub fn stoi(s: &[u8]) -> i64 {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut v: i64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = v.saturating_mul(10).saturating_add((s[i] - b'0') as i64);
        i += 1;
    }
    if i == start {
        return 0;
    }
    let v = if neg { -v } else { v };
    if v < i32::MIN as i64 || v > i32::MAX as i64 {
        return 0;
    }
    v
}

fn contains_word(input: &[u8], word: &[u8]) -> bool {
    if word.is_empty() {
        return true;
    }
    if input.is_empty() {
        return false;
    }
    if input == word {
        return true;
    }
    // A word boundary is anything but an ASCII letter (ModSecurity's
    // acceptableChar); a position outside the input is not one.
    let acc =
        |p: Option<usize>| p.is_some_and(|p| p < input.len() && !input[p].is_ascii_alphabetic());
    let finder = memchr::memmem::Finder::new(word);
    let mut from = 0;
    while let Some(off) = finder.find(&input[from..]) {
        let pos = from + off;
        let after = pos + word.len();
        if (pos == 0 && acc(Some(after)))
            || (after == input.len() && acc(pos.checked_sub(1)))
            || (acc(pos.checked_sub(1)) && acc(Some(after)))
        {
            return true;
        }
        from = pos + 1;
    }
    false
}

fn validate_url_encoding(input: &[u8]) -> bool {
    // true (a match) when a % is not followed by two hex digits.
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'%', &input[i..]) {
        let k = i + p;
        if k + 2 >= input.len()
            || !input[k + 1].is_ascii_hexdigit()
            || !input[k + 2].is_ascii_hexdigit()
        {
            return true;
        }
        i = k + 3;
        if i >= input.len() {
            break;
        }
    }
    false
}

/// True (a match) when `input` is not valid UTF-8 as ModSecurity checks it:
/// truncated or invalid sequences, overlong forms, surrogates, and lead
/// bytes beyond U+10FFFF.
fn invalid_utf8(input: &[u8]) -> bool {
    if input.is_ascii() {
        return false;
    }
    let n = input.len();
    let mut i = 0;
    while i < n {
        let c = input[i];
        let cont = |k: usize| k < n && input[k] & 0xc0 == 0x80;
        let (len, d) = if c & 0x80 == 0 {
            (1, c as u32)
        } else if c & 0xe0 == 0xc0 {
            if !cont(i + 1) {
                return true;
            }
            (2, ((c as u32 & 0x1f) << 6) | (input[i + 1] as u32 & 0x3f))
        } else if c & 0xf0 == 0xe0 {
            if !(cont(i + 1) && cont(i + 2)) {
                return true;
            }
            (
                3,
                ((c as u32 & 0x0f) << 12)
                    | ((input[i + 1] as u32 & 0x3f) << 6)
                    | (input[i + 2] as u32 & 0x3f),
            )
        } else if c & 0xf8 == 0xf0 {
            if c >= 0xf5 || !(cont(i + 1) && cont(i + 2) && cont(i + 3)) {
                return true;
            }
            (
                4,
                ((c as u32 & 0x07) << 18)
                    | ((input[i + 1] as u32 & 0x3f) << 12)
                    | ((input[i + 2] as u32 & 0x3f) << 6)
                    | (input[i + 3] as u32 & 0x3f),
            )
        } else {
            return true;
        };
        if (0xd800..=0xdfff).contains(&d)
            || (len == 4 && d < 0x10000)
            || (len == 3 && d < 0x800)
            || (len == 2 && d < 0x80)
        {
            return true;
        }
        i += len;
    }
    false
}

fn eval_str(op: &Operator, arg: &[u8], input: &[u8]) -> bool {
    match op {
        Operator::StrEq(_) => input == arg,
        Operator::Contains(_) | Operator::StrMatch(_) => memchr::memmem::find(input, arg).is_some(),
        Operator::ContainsWord(_) => contains_word(input, arg),
        Operator::BeginsWith(_) => input.starts_with(arg),
        Operator::EndsWith(_) => input.ends_with(arg),
        Operator::Within(_) => input.is_empty() || memchr::memmem::find(arg, input).is_some(),
        Operator::Num(cmp, _) => {
            let (i, p) = (stoi(input), stoi(arg));
            match cmp {
                Cmp::Eq => i == p,
                Cmp::Ge => i >= p,
                Cmp::Gt => i > p,
                Cmp::Le => i <= p,
                Cmp::Lt => i < p,
            }
        }
        _ => false,
    }
}

impl Operator {
    /// The argument holds macros: use `matches_arg` with it expanded.
    pub fn is_dynamic(&self) -> bool {
        self.arg().is_some_and(|a| a.dynamic)
    }

    /// The literal argument of the string and numeric operators.
    pub fn arg(&self) -> Option<&Arg> {
        match self {
            Operator::StrEq(a)
            | Operator::Contains(a)
            | Operator::ContainsWord(a)
            | Operator::BeginsWith(a)
            | Operator::EndsWith(a)
            | Operator::Within(a)
            | Operator::StrMatch(a)
            | Operator::Num(_, a) => Some(a),
            _ => None,
        }
    }

    /// Evaluates the operator on `input` (its argument as written). When
    /// `captures` is given (the rule has `capture`) and the operator
    /// matches, TX.0-9 are filled.
    pub fn matches(&self, input: &[u8], captures: Option<&mut Captures>) -> bool {
        match self {
            Operator::Rx(rx) => rx.matches(input, captures),
            Operator::Pm(pm) => pm.matches(input, captures),
            Operator::IpMatch(set) => set.contains(input),
            Operator::ValidateByteRange(t) => input.iter().any(|&b| !t[b as usize]),
            Operator::ValidateUrlEncoding => validate_url_encoding(input),
            Operator::ValidateUtf8Encoding => invalid_utf8(input),
            Operator::UnconditionalMatch => true,
            Operator::NoMatch => false,
            _ => {
                let arg = self.arg().map(|a| a.text.as_slice()).unwrap_or(b"");
                self.matches_arg(arg, input, captures)
            }
        }
    }

    /// Evaluates a string or numeric operator with `arg` (its argument after
    /// macro expansion) instead of the one it was compiled with; other
    /// operators ignore `arg`.
    pub fn matches_arg(&self, arg: &[u8], input: &[u8], captures: Option<&mut Captures>) -> bool {
        if self.arg().is_none() {
            return self.matches(input, captures);
        }
        // Only @rx and @pm set TX.0-9 (as in ModSecurity).
        let _ = captures;
        eval_str(self, arg, input)
    }
}
