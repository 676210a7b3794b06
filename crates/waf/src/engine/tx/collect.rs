//! A target's values: what `ARGS`, `TX:/^x/`, `&REQUEST_HEADERS` or
//! `TIME_HOUR` yield for a link (exclusions and target removals applied),
//! and the key selectors that pick them.

use std::cell::RefCell;
use std::io::Write;

use super::data::{Kv, ListId, Src, Val};
use super::Transaction;
use crate::engine::compile::{Exclusion, Sel, Target};
use crate::engine::keyrx::KeyRegex;
use crate::operator;
use crate::seclang::{Collection, Variable};

fn now_parts() -> [u64; 8] {
    // [epoch, year, mon(1-12), day, hour, min, sec, wday]
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = t / 86400;
    let rem = t % 86400;
    // civil from days (Howard Hinnant)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    let wday = (days + 4) % 7;
    [
        t,
        y as u64,
        m as u64,
        d as u64,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        wday,
    ]
}

fn sel_matches(sel: &Sel, key: &[u8]) -> bool {
    match sel {
        Sel::All => true,
        Sel::Key(k, _) => key.eq_ignore_ascii_case(k),
        Sel::Regex(r, _) => r.is_match(key),
    }
}

/// [`sel_matches`] for a list member, regex results cached per slot.
/// Inlined: every member of a list goes through it, mostly for `All` or a
/// key.
#[inline]
pub(super) fn sel_matches_at(
    cache: &RefCell<Vec<(u64, u64)>>,
    sel: &Sel,
    key: &[u8],
    slot: u32,
) -> bool {
    match sel {
        Sel::All => true,
        Sel::Key(k, _) => key.eq_ignore_ascii_case(k),
        Sel::Regex(..) => sel_regex_matches_at(cache, sel, key, slot),
    }
}

/// [`sel_matches_at`] for a regex selector.
#[inline(never)]
fn sel_regex_matches_at(
    cache: &RefCell<Vec<(u64, u64)>>,
    sel: &Sel,
    key: &[u8],
    slot: u32,
) -> bool {
    match sel {
        Sel::Regex(r, id) if *id < 64 => {
            let bit = 1u64 << id;
            let mut c = cache.borrow_mut();
            let i = slot as usize;
            if c.len() <= i {
                c.resize(i + 1, (0, 0));
            }
            let (known, hit) = c[i];
            if known & bit != 0 {
                return hit & bit != 0;
            }
            let m = r.is_match(key);
            c[i].0 |= bit;
            if m {
                c[i].1 |= bit;
            }
            m
        }
        _ => sel_matches(sel, key),
    }
}

pub(super) fn to_exclusion(v: &Variable) -> Exclusion {
    use crate::seclang::Selector;
    Exclusion {
        coll: v.collection,
        sel: match &v.selector {
            None => Sel::All,
            Some(Selector::Key(k)) => {
                Sel::Key(k.to_ascii_lowercase().into_bytes().into(), k.clone())
            }
            Some(Selector::Regex { regex, source }) => {
                Sel::Regex(KeyRegex::new(regex.clone(), source), u32::MAX)
            }
        },
    }
}

impl Transaction<'_> {
    /// The values of a variable as rules see them, e.g. `ARGS_POST` or
    /// `MULTIPART_STRICT_ERROR` (names and values).
    pub fn values(&mut self, var: &str) -> Vec<(String, Vec<u8>)> {
        let Ok(vars) = crate::seclang::parse_variables(var) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for v in vars {
            let t = Target {
                coll: v.collection,
                sel: to_exclusion(&v).sel,
                count: v.count,
            };
            let mut vals = Vec::new();
            self.collect(&t, &[], &mut vals, None);
            for v in vals {
                out.push((
                    String::from_utf8_lossy(&v.name(&self.d, &self.st.tx)).into_owned(),
                    v.value(&self.d, &self.st.tx).to_vec(),
                ));
            }
        }
        out
    }

    /// The values of one target, exclusions applied.
    pub(super) fn collect(
        &self,
        t: &Target,
        excl: &[Exclusion],
        out: &mut Vec<Val>,
        removals: Option<&[Exclusion]>,
    ) {
        use Collection as C;
        let f = Filter {
            t,
            excl,
            removals: removals.unwrap_or(&[]),
            sel_cache: &self.sel_cache,
        };
        let start = out.len();
        let d = &self.d;
        let coll = t.coll;
        match coll {
            C::Args
            | C::ArgsGet
            | C::ArgsPost
            | C::ArgsNames
            | C::ArgsGetNames
            | C::ArgsPostNames => self.collect_args(&f, out),
            C::RequestHeaders => f.push_list(ListId::Headers, &d.headers, false, out),
            C::RequestHeadersNames => f.push_list(ListId::Headers, &d.headers, true, out),
            C::RequestCookies => f.push_list(ListId::Cookies, &d.cookies, false, out),
            C::RequestCookiesNames => f.push_list(ListId::Cookies, &d.cookies, true, out),
            C::ResponseHeaders => f.push_list(ListId::RespHeaders, &d.resp_headers, false, out),
            C::ResponseHeadersNames => f.push_list(ListId::RespHeaders, &d.resp_headers, true, out),
            C::Files => f.push_list(ListId::Files, &d.files, false, out),
            C::FilesNames => f.push_list(ListId::Files, &d.files, true, out),
            C::FilesSizes => f.push_list(ListId::FilesSizes, &d.files_sizes, false, out),
            C::FilesTmpContent => f.push_list(ListId::FilesContent, &d.files_content, false, out),
            C::FilesTmpNames => {}
            C::MultipartPartHeaders => {
                f.push_list(ListId::PartHeaders, &d.part_headers, false, out)
            }
            C::Xml => self.collect_xml(&f, out),
            C::Tx | C::Ip | C::Global | C::Session | C::User | C::Resource | C::Env => {
                self.collect_map(&f, out)
            }
            C::MatchedVar | C::MatchedVarName | C::MatchedVars | C::MatchedVarsNames => {
                self.collect_matched(&f, out)
            }
            C::ArgsCombinedSize
            | C::FilesCombinedSize
            | C::FullRequest
            | C::FullRequestLength
            | C::HighestSeverity
            | C::Duration
            | C::MscPcreLimitsExceeded
            | C::ModsecBuild => out.push(self.computed(coll)),
            C::Time
            | C::TimeDay
            | C::TimeEpoch
            | C::TimeHour
            | C::TimeMin
            | C::TimeMon
            | C::TimeSec
            | C::TimeWday
            | C::TimeYear => out.push(time(coll)),
            C::Rule => {}
            C::Geo => {}
            C::WebserverErrorLog => {}
            C::ResponseContentType
            | C::ResponseContentLength
            | C::MultipartFilename
            | C::MultipartName => {
                if let Some(s) = d.single(coll) {
                    let _ = s;
                    out.push(Val {
                        coll,
                        src: Src::Single(coll),
                    });
                }
            }
            _ => out.push(Val {
                coll,
                src: Src::Single(coll),
            }),
        }
        if t.count {
            let n = out.len() - start;
            out.truncate(start);
            out.push(num(coll, n as u64));
        }
    }

    /// ARGS, ARGS_GET, ARGS_POST and their `_NAMES`.
    fn collect_args(&self, f: &Filter<'_>, out: &mut Vec<Val>) {
        use Collection as C;
        let coll = f.t.coll;
        let names = matches!(coll, C::ArgsNames | C::ArgsGetNames | C::ArgsPostNames);
        for (i, a) in self.d.args.iter().enumerate() {
            let keep = match coll {
                C::ArgsGet | C::ArgsGetNames => !a.post,
                C::ArgsPost | C::ArgsPostNames => a.post,
                _ => true,
            };
            if !keep || !f.keeps_at(&a.kv.key, a.kv.slot + 1) {
                continue;
            }
            out.push(Val {
                coll,
                src: Src::List(ListId::Args, i as u32, names),
            });
        }
    }

    /// XML: the document's text, or every attribute value for an
    /// attribute path (`XML://@*`).
    fn collect_xml(&self, f: &Filter<'_>, out: &mut Vec<Val>) {
        let d = &self.d;
        let coll = f.t.coll;
        let start = out.len();
        let raw: &str = match &f.t.sel {
            Sel::Key(_, raw) => raw,
            _ => "/*",
        };
        if raw.contains('@') {
            f.push_list(ListId::XmlAttrs, &d.xml_attrs, false, out);
            // Attribute paths select by XPath, not by key.
            out.truncate(start);
            for i in 0..d.xml_attrs.len() {
                out.push(Val {
                    coll,
                    src: Src::List(ListId::XmlAttrs, i as u32, false),
                });
            }
        } else if d.xml_text.is_some() {
            out.push(Val {
                coll,
                src: Src::XmlText,
            });
        }
    }

    /// TX, ENV and the `initcol` collections (IP, GLOBAL, SESSION, USER,
    /// RESOURCE); ENV:name falls back to the process environment.
    fn collect_map(&self, f: &Filter<'_>, out: &mut Vec<Val>) {
        use Collection as C;
        let coll = f.t.coll;
        let start = out.len();
        let m = match coll {
            C::Tx => Some(&self.st.tx),
            C::Env => Some(&self.st.env),
            _ => self.other(coll),
        };
        if let Some(m) = m {
            let is_tx = coll == C::Tx;
            let mk = |i: usize, k: &[u8], v: &[u8]| Val {
                coll,
                src: if is_tx {
                    Src::Tx(i as u32)
                } else {
                    Src::Owned(k.to_vec(), v.to_vec())
                },
            };
            match &f.t.sel {
                Sel::Key(k, _) => {
                    if let Some(&i) = m.index.get(&**k) {
                        if let Some((key, v)) = &m.entries[i] {
                            if !f.excluded(coll, key) {
                                out.push(mk(i, key, v));
                            }
                        }
                    }
                }
                _ => {
                    for (i, e) in m.entries.iter().enumerate() {
                        if let Some((k, v)) = e {
                            if sel_matches(&f.t.sel, k) && !f.excluded(coll, k) {
                                out.push(mk(i, k, v));
                            }
                        }
                    }
                }
            }
        }
        if coll == C::Env && out.len() == start {
            if let Sel::Key(_, raw) = &f.t.sel {
                if let Some(v) = std::env::var_os(&**raw) {
                    out.push(Val {
                        coll,
                        src: Src::Owned(
                            raw.as_bytes().to_vec(),
                            v.to_string_lossy().as_bytes().to_vec(),
                        ),
                    });
                }
            }
        }
    }

    /// MATCHED_VAR, MATCHED_VAR_NAME, MATCHED_VARS(_NAMES).
    fn collect_matched(&self, f: &Filter<'_>, out: &mut Vec<Val>) {
        use Collection as C;
        let coll = f.t.coll;
        match coll {
            C::MatchedVar | C::MatchedVarName => {
                let v: &[u8] = match (self.st.has_mv, coll) {
                    (false, _) => b"",
                    (true, C::MatchedVar) => &self.st.mv.1,
                    (true, _) => &self.st.mv.0,
                };
                out.push(Val {
                    coll,
                    src: Src::Owned(Vec::new(), v.to_vec()),
                });
            }
            _ => {
                for (n, v) in &self.st.matched_vars[..self.st.mvs_len] {
                    if !sel_matches(&f.t.sel, n) || f.excluded(coll, n) {
                        continue;
                    }
                    let value = if coll == C::MatchedVars { v } else { n };
                    out.push(Val {
                        coll,
                        src: Src::Owned(n.clone(), value.clone()),
                    });
                }
            }
        }
    }

    /// The one value of a variable computed when read (sizes, the full
    /// request, HIGHEST_SEVERITY, DURATION, ...).
    fn computed(&self, coll: Collection) -> Val {
        use Collection as C;
        let d = &self.d;
        match coll {
            C::ArgsCombinedSize => num(coll, d.args_combined_size() as u64),
            C::FilesCombinedSize => {
                let n: u64 = d
                    .files_sizes
                    .iter()
                    .map(|kv| operator::stoi(&kv.value).max(0) as u64)
                    .sum();
                num(coll, n)
            }
            C::FullRequest | C::FullRequestLength => {
                let mut f = Vec::new();
                f.extend_from_slice(d.get(C::RequestLine).unwrap_or(b""));
                f.push(b'\n');
                for h in &d.headers {
                    f.extend_from_slice(&h.key);
                    f.extend_from_slice(b": ");
                    f.extend_from_slice(&h.value);
                    f.push(b'\n');
                }
                f.push(b'\n');
                f.extend_from_slice(&d.body);
                if coll == C::FullRequest {
                    Val {
                        coll,
                        src: Src::Owned(Vec::new(), f),
                    }
                } else {
                    owned(coll, f.len().to_string())
                }
            }
            C::HighestSeverity => owned(
                coll,
                self.st
                    .highest_severity
                    .map_or("255".to_string(), |s| s.to_string()),
            ),
            C::Duration => owned(coll, self.started.elapsed().as_micros().to_string()),
            C::MscPcreLimitsExceeded => {
                owned(coll, if self.st.limit_hit { "1" } else { "0" }.to_string())
            }
            // MODSEC_BUILD.
            _ => owned(coll, "030009".to_string()),
        }
    }
}

/// The selector and exclusions of one target being collected: the link's
/// exclusions (`!ARGS:x`) and the rule's target removals (ctl).
struct Filter<'a> {
    t: &'a Target,
    excl: &'a [Exclusion],
    removals: &'a [Exclusion],
    /// Key selector regex results per slot.
    sel_cache: &'a RefCell<Vec<(u64, u64)>>,
}

impl Filter<'_> {
    /// Whether an exclusion or removal of `coll` takes out `key`.
    fn excluded(&self, coll: Collection, key: &[u8]) -> bool {
        self.excl
            .iter()
            .chain(self.removals.iter())
            .any(|e| e.coll == coll && sel_matches(&e.sel, key))
    }

    /// [`Filter::excluded`] for a list member (regex results cached per
    /// slot).
    fn excluded_at(&self, coll: Collection, key: &[u8], slot: u32) -> bool {
        self.excl
            .iter()
            .chain(self.removals.iter())
            .any(|e| e.coll == coll && sel_matches_at(self.sel_cache, &e.sel, key, slot))
    }

    /// Whether the target's selector takes a list member with this key
    /// (and key slot) and no exclusion takes it out.
    fn keeps_at(&self, key: &[u8], slot: u32) -> bool {
        sel_matches_at(self.sel_cache, &self.t.sel, key, slot)
            && !self.excluded_at(self.t.coll, key, slot)
    }

    /// The members of a list the target keeps.
    fn push_list(&self, l: ListId, items: &[Kv], names: bool, out: &mut Vec<Val>) {
        for (i, kv) in items.iter().enumerate() {
            if !self.keeps_at(&kv.key, kv.slot + 1) {
                continue;
            }
            out.push(Val {
                coll: self.t.coll,
                src: Src::List(l, i as u32, names),
            });
        }
    }
}

/// TIME and its parts, now.
fn time(coll: Collection) -> Val {
    use Collection as C;
    let p = now_parts();
    let s = match coll {
        C::TimeEpoch => p[0].to_string(),
        C::TimeYear => p[1].to_string(),
        C::TimeMon => format!("{:02}", p[2]),
        C::TimeDay => format!("{:02}", p[3]),
        C::TimeHour => format!("{:02}", p[4]),
        C::TimeMin => format!("{:02}", p[5]),
        C::TimeSec => format!("{:02}", p[6]),
        C::TimeWday => p[7].to_string(),
        _ => format!(
            "{:02}{:02}{:02}{:02}{:02}{:02}{:02}",
            p[1] / 100,
            p[1] % 100,
            p[2],
            p[3],
            p[4],
            p[5],
            p[6]
        ),
    };
    owned(coll, s)
}

/// A number as a value (no allocation). Through `write!`, not the
/// proxy's `http::responses::itoa`: the WAF does not depend on the proxy,
/// and these numbers are a few per transaction.
fn num(coll: Collection, n: u64) -> Val {
    let mut digits = [0u8; 20];
    let mut rest = &mut digits[..];
    // u64::MAX has 20 digits: the write always fits.
    let _ = write!(rest, "{n}");
    let len = 20 - rest.len();
    Val {
        coll,
        src: Src::Num(digits, len as u8),
    }
}

fn owned(coll: Collection, v: String) -> Val {
    Val {
        coll,
        src: Src::Owned(Vec::new(), v.into_bytes()),
    }
}
