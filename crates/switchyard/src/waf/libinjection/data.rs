//! libinjection's SQLi tables, kept as data files beside this module:
//! `keywords.tsv` (word, tab, token type: keywords, functions, operators,
//! multi-word phrases) and `fingerprints.txt` (the 8,367 token-type
//! patterns that are SQLi, upper-cased as libinjection stores them). Both
//! come from libinjection 3.9.2's `libinjection_sqli_data.h`
//! (`LICENSE-libinjection`). They are parsed once, at first use, into
//! sorted arrays searched by binary search.

use std::sync::OnceLock;

static KEYWORDS_TSV: &str = include_str!("keywords.tsv");
static FINGERPRINTS_TXT: &str = include_str!("fingerprints.txt");

struct Tables {
    /// Sorted by word (bytes); words are upper case.
    keywords: Vec<(&'static [u8], u8)>,
    /// Packed fingerprints (see `pack`), sorted.
    fingerprints: Vec<u64>,
}

static TABLES: OnceLock<Tables> = OnceLock::new();

fn tables() -> &'static Tables {
    TABLES.get_or_init(|| {
        let mut keywords: Vec<(&'static [u8], u8)> = KEYWORDS_TSV
            .lines()
            .filter_map(|line| {
                let (word, ty) = line.split_once('\t')?;
                Some((word.as_bytes(), *ty.as_bytes().first()?))
            })
            .collect();
        keywords.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut fingerprints: Vec<u64> = FINGERPRINTS_TXT
            .lines()
            .filter(|l| !l.is_empty())
            .filter_map(|l| pack(l.as_bytes()))
            .collect();
        fingerprints.sort_unstable();
        fingerprints.dedup();
        Tables {
            keywords,
            fingerprints,
        }
    })
}

/// Loads the tables now (they load by themselves at first use).
pub fn warm_up() {
    let _ = tables();
}

/// A fingerprint of at most 7 bytes packed into an integer (length in the
/// low byte); `None` when it is too long to be in the table.
fn pack(fp: &[u8]) -> Option<u64> {
    if fp.len() > 7 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in fp {
        v = (v << 8) | u64::from(b);
    }
    Some((v << 8) | fp.len() as u64)
}

/// libinjection's keyword look-up (`bsearch_keyword_type`): the word is
/// compared with its ASCII lower-case letters upper-cased; 0 when absent.
pub fn lookup_word(word: &[u8]) -> u8 {
    // The longest keyword is far shorter than this; longer words can't match.
    const MAX: usize = 40;
    if word.is_empty() || word.len() > MAX {
        return 0;
    }
    let mut buf = [0u8; MAX];
    let key = &mut buf[..word.len()];
    key.copy_from_slice(word);
    key.make_ascii_uppercase();
    let kw = &tables().keywords;
    match kw.binary_search_by(|(w, _)| (*w).cmp(&*key)) {
        Ok(i) => kw[i].1,
        Err(_) => 0,
    }
}

/// Whether the (mixed case) fingerprint is one of libinjection's SQLi
/// patterns (`libinjection_sqli_blacklist`: upper-cased, then looked up).
pub fn is_blacklisted_fingerprint(fp: &[u8]) -> bool {
    if fp.is_empty() || fp.len() > 7 {
        return false;
    }
    let mut buf = [0u8; 7];
    let key = &mut buf[..fp.len()];
    key.copy_from_slice(fp);
    key.make_ascii_uppercase();
    match pack(key) {
        Some(k) => tables().fingerprints.binary_search(&k).is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_load() {
        let t = tables();
        assert_eq!(t.fingerprints.len(), 8367);
        assert_eq!(t.keywords.len(), 985);
        assert_eq!(lookup_word(b"select"), b'E');
        assert_eq!(lookup_word(b"UNION ALL"), b'U');
        assert_eq!(lookup_word(b"nosuchword"), 0);
        assert!(is_blacklisted_fingerprint(b"s&1"));
        assert!(!is_blacklisted_fingerprint(b"nnn"));
    }
}
