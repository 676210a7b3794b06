//! Literal prefilters for `@rx`: from the parsed pattern, a set of literals
//! one of which every match must contain (compared without regard to ASCII
//! case, so one set serves `(?i)` and case-sensitive patterns alike). When
//! the input contains none of them the regex cannot match and is not run.
//!
//! The extraction walks the regex-syntax HIR, tracking for each node the
//! finite set of strings it can match (when small), the strings every match
//! starts and ends with, and a required set; concatenations join the end of
//! one part, exact middle parts and the start of the next into longer
//! literals; alternations take the union of their branches' required sets.
//! The result over-approximates (a hit only means the regex may match).

use regex_syntax::hir::{Class, Hir, HirKind};

/// Most strings kept in one set.
const MAX_SET: usize = 64;
/// Longest literal kept (prefixes keep their start, suffixes their end).
const MAX_LEN: usize = 24;
/// Largest character class turned into a set of single bytes.
const MAX_CLASS: usize = 6;

type Set = Vec<Vec<u8>>;

#[derive(Clone, Debug)]
struct Info {
    /// Every string the node can match, when finite and small.
    exact: Option<Set>,
    /// Every match starts with one of these (`{""}`: nothing known).
    prefix: Set,
    /// Every match ends with one of these.
    suffix: Set,
    /// Every match contains one of these (none empty).
    req: Option<Set>,
}

fn empty_set() -> Set {
    vec![Vec::new()]
}

fn unknown() -> Info {
    Info {
        exact: None,
        prefix: empty_set(),
        suffix: empty_set(),
        req: None,
    }
}

fn dedup(mut s: Set) -> Set {
    s.sort();
    s.dedup();
    s
}

fn product(a: &Set, b: &Set) -> Option<Set> {
    if a.len() * b.len() > MAX_SET {
        return None;
    }
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let mut s = x.clone();
            s.extend_from_slice(y);
            out.push(s);
        }
    }
    Some(dedup(out))
}

fn cap_prefix(s: Set) -> Set {
    dedup(
        s.into_iter()
            .map(|mut x| {
                x.truncate(MAX_LEN);
                x
            })
            .collect(),
    )
}

fn cap_suffix(s: Set) -> Set {
    dedup(
        s.into_iter()
            .map(|x| {
                if x.len() > MAX_LEN {
                    x[x.len() - MAX_LEN..].to_vec()
                } else {
                    x
                }
            })
            .collect(),
    )
}

/// A set usable as a requirement: non-empty and no empty string.
fn usable(s: &Set) -> bool {
    !s.is_empty() && s.iter().all(|x| !x.is_empty())
}

/// Higher is better: the shortest literal (capped), then fewer literals.
fn score(s: &Set) -> (usize, isize) {
    let min = s.iter().map(|x| x.len()).min().unwrap_or(0).min(8);
    (min, -(s.len() as isize))
}

fn better(a: Option<Set>, b: Option<Set>) -> Option<Set> {
    match (a, b) {
        (Some(a), Some(b)) => {
            if score(&b) > score(&a) {
                Some(b)
            } else {
                Some(a)
            }
        }
        (a, None) => a,
        (None, b) => b,
    }
}

/// The best set every match of a node contains: its required set, or the
/// set of its prefixes, suffixes or exact strings.
fn required(i: &Info) -> Option<Set> {
    better(
        better(i.req.clone(), candidate(Some(&i.prefix))),
        better(candidate(Some(&i.suffix)), candidate(i.exact.as_ref())),
    )
}

fn candidate(s: Option<&Set>) -> Option<Set> {
    s.filter(|s| usable(s) && s.len() <= MAX_SET)
        .map(|s| cap_prefix(s.clone()))
}

fn class_bytes(c: &Class) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    match c {
        Class::Bytes(b) => {
            for r in b.ranges() {
                if (r.end() - r.start()) as usize >= 2 * MAX_CLASS + 2 {
                    return None;
                }
                for x in r.start()..=r.end() {
                    bytes.push(x.to_ascii_lowercase());
                }
            }
        }
        Class::Unicode(u) => {
            for r in u.ranges() {
                let (s, e) = (r.start() as u32, r.end() as u32);
                if e > 0x7f || (e - s) as usize >= 2 * MAX_CLASS + 2 {
                    return None;
                }
                for x in s..=e {
                    bytes.push((x as u8).to_ascii_lowercase());
                }
            }
        }
    }
    bytes.sort();
    bytes.dedup();
    if bytes.is_empty() || bytes.len() > MAX_CLASS {
        return None;
    }
    Some(bytes)
}

fn info(h: &Hir) -> Info {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Info {
            exact: Some(empty_set()),
            prefix: empty_set(),
            suffix: empty_set(),
            req: None,
        },
        HirKind::Literal(lit) => {
            let l: Vec<u8> = lit.0.iter().map(|b| b.to_ascii_lowercase()).collect();
            let set = vec![l];
            Info {
                exact: (set[0].len() <= MAX_LEN).then(|| set.clone()),
                prefix: cap_prefix(set.clone()),
                suffix: cap_suffix(set.clone()),
                req: Some(cap_prefix(set)),
            }
        }
        HirKind::Class(c) => match class_bytes(c) {
            Some(bytes) => {
                let set: Set = bytes.into_iter().map(|b| vec![b]).collect();
                Info {
                    exact: Some(set.clone()),
                    prefix: set.clone(),
                    suffix: set.clone(),
                    req: Some(set),
                }
            }
            None => unknown(),
        },
        HirKind::Capture(c) => info(&c.sub),
        HirKind::Repetition(r) => {
            let sub = info(&r.sub);
            if r.min == 0 {
                let exact = if r.max == Some(1) {
                    sub.exact.map(|mut e| {
                        e.push(Vec::new());
                        dedup(e)
                    })
                } else {
                    None
                };
                Info {
                    exact,
                    prefix: empty_set(),
                    suffix: empty_set(),
                    req: None,
                }
            } else {
                let exact = match (r.min, r.max, &sub.exact) {
                    (1, Some(1), Some(e)) => Some(e.clone()),
                    (m, Some(x), Some(e)) if m == x && m <= 3 => {
                        let mut acc = empty_set();
                        let mut ok = true;
                        for _ in 0..m {
                            match product(&acc, e) {
                                Some(p) => acc = p,
                                None => {
                                    ok = false;
                                    break;
                                }
                            }
                        }
                        ok.then_some(acc)
                    }
                    _ => None,
                };
                let req = better(
                    sub.req.clone(),
                    exact.as_ref().and_then(|e| candidate(Some(e))),
                );
                Info {
                    exact,
                    prefix: sub.prefix,
                    suffix: sub.suffix,
                    req,
                }
            }
        }
        HirKind::Concat(children) => {
            let infos: Vec<Info> = children.iter().map(info).collect();
            // exact
            let mut exact = Some(empty_set());
            for i in &infos {
                exact = match (exact, &i.exact) {
                    (Some(a), Some(b)) => product(&a, b),
                    _ => None,
                };
            }
            // prefix: exact parts from the left, then the first inexact
            // part's prefix.
            let mut prefix = empty_set();
            for i in &infos {
                match &i.exact {
                    Some(e) => match product(&prefix, e) {
                        Some(p) => prefix = cap_prefix(p),
                        None => break,
                    },
                    None => {
                        if let Some(p) = product(&prefix, &i.prefix) {
                            prefix = cap_prefix(p);
                        }
                        break;
                    }
                }
            }
            let mut suffix = empty_set();
            for i in infos.iter().rev() {
                match &i.exact {
                    Some(e) => match product(e, &suffix) {
                        Some(p) => suffix = cap_suffix(p),
                        None => break,
                    },
                    None => {
                        if let Some(p) = product(&i.suffix, &suffix) {
                            suffix = cap_suffix(p);
                        }
                        break;
                    }
                }
            }
            // required: the best of each part's, and of every run "end of
            // one part, exact parts, start of the next".
            let mut req: Option<Set> = None;
            for i in &infos {
                req = better(req, i.req.clone());
            }
            for s in 0..infos.len() {
                let mut cur = infos[s].suffix.clone();
                req = better(req, candidate(Some(&cur)));
                for i in &infos[s + 1..] {
                    match &i.exact {
                        Some(e) => match product(&cur, e) {
                            Some(p) => {
                                cur = cap_suffix(p);
                                req = better(req, candidate(Some(&cur)));
                            }
                            None => break,
                        },
                        None => {
                            if let Some(p) = product(&cur, &i.prefix) {
                                req = better(req, candidate(Some(&p)));
                            }
                            break;
                        }
                    }
                }
            }
            req = better(req, candidate(Some(&prefix)));
            req = better(req, candidate(Some(&suffix)));
            req = better(req, candidate(exact.as_ref()));
            Info {
                exact,
                prefix,
                suffix,
                req,
            }
        }
        HirKind::Alternation(children) => {
            let infos: Vec<Info> = children.iter().map(info).collect();
            let mut exact: Option<Set> = Some(Vec::new());
            let mut prefix: Set = Vec::new();
            let mut suffix: Set = Vec::new();
            let mut req: Option<Set> = Some(Vec::new());
            for i in &infos {
                exact = match (exact, &i.exact) {
                    (Some(mut a), Some(b)) if a.len() + b.len() <= MAX_SET => {
                        a.extend(b.iter().cloned());
                        Some(a)
                    }
                    _ => None,
                };
                prefix.extend(i.prefix.iter().cloned());
                suffix.extend(i.suffix.iter().cloned());
                let own = required(i);
                req = match (req, own) {
                    (Some(mut a), Some(b)) if a.len() + b.len() <= 4 * MAX_SET => {
                        a.extend(b);
                        Some(a)
                    }
                    _ => None,
                };
            }
            let prefix = dedup(prefix);
            let suffix = dedup(suffix);
            Info {
                exact: exact.map(dedup),
                prefix: if prefix.len() <= MAX_SET {
                    prefix
                } else {
                    empty_set()
                },
                suffix: if suffix.len() <= MAX_SET {
                    suffix
                } else {
                    empty_set()
                },
                req: req.map(dedup),
            }
        }
    }
}

/// `pattern` with the flags `@rx` uses (bytes, Unicode off, DOTALL,
/// MULTILINE).
fn parse(pattern: &str) -> Option<Hir> {
    regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .dot_matches_new_line(true)
        .multi_line(true)
        .build()
        .parse(pattern)
        .ok()
}

/// The literals one of which every match of `pattern` contains (lower-case;
/// compare without regard to ASCII case), or `None` when no useful set
/// exists. `pattern` is in the regex crate's syntax; it is parsed with the
/// flags `@rx` uses (bytes, Unicode off, DOTALL, MULTILINE).
pub fn required_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = parse(pattern)?;
    let best = dedup(required(&info(&hir))?);
    // Drop literals that contain another one (the shorter suffices).
    let mut out: Set = Vec::new();
    for l in &best {
        if !best
            .iter()
            .any(|o| o != l && o.len() < l.len() && memchr::memmem::find(l, o).is_some())
        {
            out.push(l.clone());
        }
    }
    usable(&out).then_some(out)
}

/// A second set of literals one of which every match of `pattern` also
/// contains, from one part of its top-level concatenation, that adds to
/// `primary` (none of its literals occurs in a literal of `primary`). A
/// value needs one of each: CRS 941120's primary set is the `on` of event
/// handlers after a separator, which many header values hold; its `=` is
/// the second, which they mostly do not.
pub fn secondary_literals(pattern: &str, primary: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    let hir = parse(pattern)?;
    let mut h = &hir;
    while let HirKind::Capture(c) = h.kind() {
        h = &c.sub;
    }
    let HirKind::Concat(children) = h.kind() else {
        return None;
    };
    let mut best: Option<Set> = None;
    for c in children {
        let Some(own) = required(&info(c)).map(dedup) else {
            continue;
        };
        // Both sets are lower case.
        let adds = own
            .iter()
            .all(|l| !primary.iter().any(|p| memchr::memmem::find(p, l).is_some()));
        if adds && usable(&own) {
            best = better(best, Some(own));
        }
    }
    best
}

/// A summary of a value, computed once per transformed value and shared by
/// every prefilter that looks at it: the set of its bytes and a Bloom
/// filter of its adjacent byte pairs (both lower case). A literal can
/// occur only if all its bytes (one-byte literals) or all its pairs are
/// there, so most values are ruled out without a scan of the value.
#[derive(Clone, Debug)]
pub struct Sig([u64; SIG_WORDS]);

/// 256 bits of bytes, then `PAIR_BITS` bits of pairs.
const PAIR_BITS: u32 = 1024;
const SIG_WORDS: usize = (256 + PAIR_BITS as usize) / 64;

#[inline]
fn pair_bit(a: u8, b: u8) -> u16 {
    let h = (u32::from(a) << 8 | u32::from(b)).wrapping_mul(0x9E37_79B1);
    (256 + (h >> (32 - PAIR_BITS.trailing_zeros()))) as u16
}

impl Sig {
    pub fn of(input: &[u8]) -> Sig {
        let mut w = [0u64; SIG_WORDS];
        let mut prev: Option<u8> = None;
        for &b in input {
            let b = b.to_ascii_lowercase();
            w[usize::from(b >> 6)] |= 1 << (b & 63);
            if let Some(a) = prev {
                let i = pair_bit(a, b);
                w[usize::from(i >> 6)] |= 1 << (i & 63);
            }
            prev = Some(b);
        }
        Sig(w)
    }

    #[inline]
    fn has(&self, bit: u16) -> bool {
        self.0[usize::from(bit >> 6)] & (1 << (bit & 63)) != 0
    }

    /// The summary of no value: the start of a union.
    pub fn empty() -> Sig {
        Sig([0; SIG_WORDS])
    }

    /// Adds `other`'s bytes and pairs: the union summarises a list of
    /// values. Every check on a [`Sig`] only asks for bits, so a literal
    /// that no value of the list may hold fails on the union too.
    pub fn add(&mut self, other: &Sig) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a |= *b;
        }
    }
}

/// What a set of literals needs in a [`Sig`].
#[derive(Debug)]
pub struct SigChecks {
    /// A literal is empty: every value may hold it.
    always: bool,
    /// One key bit per literal (its byte, or its rarest pair), as the
    /// non-zero words of a [`Sig`]: a value without any of them holds no
    /// literal (a test of a few words, where most values fail).
    any: Box<[(u8, u64)]>,
    /// (key bit, offset in `all`) sorted by key bit: the literals to look
    /// at further when their key bit is in the value.
    keyed: Box<[(u16, u32)]>,
    /// For larger sets, where the literals of each key bit start in
    /// `keyed` (a bit's range without a search; a value holds many keys
    /// of a set of hundreds of phrases).
    index: Option<Box<[u16]>>,
    /// Per literal a count, then the bits it needs (rarest first): its
    /// byte if it has one, else its pairs (deduplicated).
    all: Box<[u16]>,
}

impl SigChecks {
    pub fn new(lits: &[Vec<u8>]) -> SigChecks {
        let mut all = Vec::new();
        let mut keyed = Vec::new();
        let mut any = [0u64; SIG_WORDS];
        let mut always = false;
        for l in lits {
            let l: Vec<u8> = l.iter().map(u8::to_ascii_lowercase).collect();
            let mut bits: Vec<(usize, u16)> = match l.len() {
                0 => {
                    always = true;
                    continue;
                }
                1 => vec![(0, u16::from(l[0]))],
                _ => l
                    .windows(2)
                    .map(|p| (rank(p[0]) + rank(p[1]), pair_bit(p[0], p[1])))
                    .collect(),
            };
            // Rarest first: most values miss it, ending the check.
            bits.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut seen = Vec::new();
            bits.retain(|&(_, b)| {
                let new = !seen.contains(&b);
                seen.push(b);
                new
            });
            let key = bits[0].1;
            any[usize::from(key >> 6)] |= 1 << (key & 63);
            keyed.push((key, all.len() as u32));
            all.push(bits.len() as u16);
            all.extend(bits.iter().map(|&(_, b)| b));
        }
        keyed.sort_unstable();
        let index = (keyed.len() > 16 && keyed.len() < usize::from(u16::MAX)).then(|| {
            (0..=SIG_WORDS * 64)
                .map(|bit| keyed.partition_point(|&(k, _)| usize::from(k) < bit) as u16)
                .collect()
        });
        SigChecks {
            always,
            index,
            any: any
                .iter()
                .enumerate()
                .filter(|(_, &w)| w != 0)
                .map(|(i, &w)| (i as u8, w))
                .collect(),
            keyed: keyed.into_boxed_slice(),
            all: all.into_boxed_slice(),
        }
    }

    /// Whether some literal may occur in the value `sig` summarises.
    #[inline]
    pub fn may(&self, sig: &Sig) -> bool {
        if self.always {
            return true;
        }
        for &(i, w) in self.any.iter() {
            let mut hits = sig.0[usize::from(i)] & w;
            while hits != 0 {
                let key = u16::from(i) * 64 + hits.trailing_zeros() as u16;
                hits &= hits - 1;
                let from = match &self.index {
                    Some(ix) => usize::from(ix[usize::from(key)]),
                    None => self.keyed.partition_point(|&(k, _)| k < key),
                };
                for &(k, off) in &self.keyed[from..] {
                    if k != key {
                        break;
                    }
                    if self.literal_may(off as usize, sig) {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The literal at `off` in `all`: all its bits after the key.
    fn literal_may(&self, off: usize, sig: &Sig) -> bool {
        let n = usize::from(self.all.get(off).copied().unwrap_or(0));
        self.all
            .get(off + 2..off + 1 + n)
            .is_some_and(|b| b.iter().all(|&b| sig.has(b)))
    }
}

/// A compiled prefilter: `may_match` is false only if no literal occurs.
#[derive(Debug)]
pub enum Prefilter {
    Byte(u8),
    Bytes2(u8, u8),
    Bytes3(u8, u8, u8),
    /// The automaton, the rarest byte of each literal (lower case, a
    /// 256-bit set): a short value holding none of them contains no
    /// literal, which a pass over its bytes tells for a fraction of an
    /// automaton search (most values rules see are short); and the
    /// literals' [`Sig`] bits.
    Literals(aho_corasick::AhoCorasick, [u64; 4], SigChecks),
}

/// Bytes of HTTP text from the most to the least common (lower case); any
/// other byte is rarer than all of them.
const COMMON: &[u8] = b"eatoinsrlcdhupm/.=-0123456789gfbywk&;,:_ vxjqz%+?()'\"*<>[]{}|!@#$^~`";

fn rank(b: u8) -> usize {
    COMMON
        .iter()
        .position(|&c| c == b.to_ascii_lowercase())
        .map_or(0, |p| COMMON.len() - p)
}

/// Values up to this long get the byte-set test before the automaton.
const SHORT: usize = 64;

impl Prefilter {
    pub fn new(lits: &[Vec<u8>]) -> Option<Prefilter> {
        if lits.is_empty() {
            return None;
        }
        // Single bytes without a case: memchr.
        if lits
            .iter()
            .all(|l| l.len() == 1 && !l[0].is_ascii_alphabetic())
            && lits.len() <= 3
        {
            return Some(match lits.len() {
                1 => Prefilter::Byte(lits[0][0]),
                2 => Prefilter::Bytes2(lits[0][0], lits[1][0]),
                _ => Prefilter::Bytes3(lits[0][0], lits[1][0], lits[2][0]),
            });
        }
        // A contiguous NFA: the DFA the builder would pick for a few dozen
        // literals costs tens to hundreds of KiB each (megabytes over the
        // CRS) and is hardly faster on the short values rules see.
        let ac = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
            .match_kind(aho_corasick::MatchKind::Standard)
            .build(lits)
            .ok()?;
        let mut rare = [0u64; 4];
        for l in lits {
            if let Some(&b) = l.iter().min_by_key(|&&b| rank(b)) {
                let b = b.to_ascii_lowercase();
                rare[usize::from(b >> 6)] |= 1 << (b & 63);
            }
        }
        Some(Prefilter::Literals(ac, rare, SigChecks::new(lits)))
    }

    /// What [`Prefilter::may_match`] still asks once the value's [`Sig`]
    /// passed [`Prefilter::may_match_summary`]: the automaton's
    /// confirmation (a byte's bit is exact).
    #[inline]
    pub fn may_match_past_summary(&self, input: &[u8]) -> bool {
        match self {
            Prefilter::Literals(ac, _, _) => ac.is_match(input),
            _ => true,
        }
    }

    /// The part of [`Prefilter::may_match`] that reads only the
    /// [`Sig`]: false when no literal may occur in the value (or in any
    /// value of a list, given the union of their summaries).
    #[inline]
    pub fn may_match_summary(&self, sig: &Sig) -> bool {
        match self {
            Prefilter::Byte(a) => sig.has(u16::from(*a)),
            Prefilter::Bytes2(a, b) => sig.has(u16::from(*a)) || sig.has(u16::from(*b)),
            Prefilter::Bytes3(a, b, c) => {
                sig.has(u16::from(*a)) || sig.has(u16::from(*b)) || sig.has(u16::from(*c))
            }
            Prefilter::Literals(_, _, checks) => checks.may(sig),
        }
    }

    #[inline]
    pub fn may_match(&self, input: &[u8]) -> bool {
        match self {
            Prefilter::Byte(a) => memchr::memchr(*a, input).is_some(),
            Prefilter::Bytes2(a, b) => memchr::memchr2(*a, *b, input).is_some(),
            Prefilter::Bytes3(a, b, c) => memchr::memchr3(*a, *b, *c, input).is_some(),
            Prefilter::Literals(ac, rare, _) => {
                if input.len() <= SHORT {
                    let mut set = [0u64; 4];
                    for &b in input {
                        let b = b.to_ascii_lowercase();
                        set[usize::from(b >> 6)] |= 1 << (b & 63);
                    }
                    if (0..4).all(|i| set[i] & rare[i] == 0) {
                        return false;
                    }
                }
                ac.is_match(input)
            }
        }
    }
}

/// The prefilters of many `@rx` patterns in one automaton: one scan of a
/// value says which patterns may match it (the engine caches the answer per
/// transformed value and runs only those regexes). Patterns without
/// literals always may.
#[derive(Debug)]
pub struct PrefilterSet {
    ac: Option<aho_corasick::AhoCorasick>,
    /// For each literal, the patterns it serves.
    owners: Vec<Vec<u32>>,
    /// Patterns without a prefilter.
    always: Vec<u32>,
    patterns: usize,
}

impl PrefilterSet {
    /// `sets[i]`: the required literals of pattern `i` (`None`: always run).
    pub fn new(sets: &[Option<Vec<Vec<u8>>>]) -> PrefilterSet {
        let mut lits: Vec<Vec<u8>> = Vec::new();
        let mut index: std::collections::HashMap<Vec<u8>, usize> = Default::default();
        let mut owners: Vec<Vec<u32>> = Vec::new();
        let mut always = Vec::new();
        for (i, s) in sets.iter().enumerate() {
            match s {
                Some(s) if !s.is_empty() => {
                    for l in s {
                        let id = *index.entry(l.clone()).or_insert_with(|| {
                            lits.push(l.clone());
                            owners.push(Vec::new());
                            lits.len() - 1
                        });
                        owners[id].push(i as u32);
                    }
                }
                _ => always.push(i as u32),
            }
        }
        let ac = if lits.is_empty() {
            None
        } else {
            match aho_corasick::AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .match_kind(aho_corasick::MatchKind::Standard)
                .build(&lits)
            {
                Ok(ac) => Some(ac),
                Err(_) => {
                    // Too many literals for one automaton (a rule set far
                    // beyond the CRS): no prefilter, every pattern runs,
                    // rather than a load that panics.
                    always.extend(owners.iter().flatten().copied());
                    always.sort_unstable();
                    always.dedup();
                    owners.iter_mut().for_each(Vec::clear);
                    None
                }
            }
        };
        PrefilterSet {
            ac,
            owners,
            always,
            patterns: sets.len(),
        }
    }

    pub fn len(&self) -> usize {
        self.patterns
    }

    pub fn is_empty(&self) -> bool {
        self.patterns == 0
    }

    /// Marks in `out` (one bit per pattern, resized here) the patterns that
    /// may match `input`.
    pub fn scan(&self, input: &[u8], out: &mut Vec<u64>) {
        out.clear();
        out.resize(self.patterns.div_ceil(64), 0);
        for &p in &self.always {
            out[p as usize / 64] |= 1 << (p % 64);
        }
        let Some(ac) = &self.ac else { return };
        let mut seen = 0u64; // literal ids below 64 already handled
        for m in ac.find_overlapping_iter(input) {
            let id = m.pattern().as_usize();
            if id < 64 {
                if seen & (1 << id) != 0 {
                    continue;
                }
                seen |= 1 << id;
            }
            for &p in &self.owners[id] {
                out[p as usize / 64] |= 1 << (p % 64);
            }
        }
    }

    /// Whether pattern `i` may match, given the bits from `scan`.
    #[inline]
    pub fn may(bits: &[u64], i: usize) -> bool {
        bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}
