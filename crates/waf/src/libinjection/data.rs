//! libinjection's SQLi tables, kept as data files beside this module:
//! `keywords.tsv` (word, tab, token type: keywords, functions, operators,
//! multi-word phrases) and `fingerprints.txt` (the 8,367 token-type
//! patterns that are SQLi, upper-cased as libinjection stores them). Both
//! come from libinjection 3.9.2's `libinjection_sqli_data.h`
//! (`LICENSE-libinjection`). They are parsed once, at first use: the
//! keywords into an open-addressing hash table (every word of every value
//! is looked up), the fingerprints into a sorted array.

use std::sync::OnceLock;

static KEYWORDS_TSV: &str = include_str!("keywords.tsv");
static FINGERPRINTS_TXT: &str = include_str!("fingerprints.txt");

struct Tables {
    /// Words (upper case) and their token types.
    keywords: Vec<(&'static [u8], u8)>,
    /// `KEYWORD_SLOTS` slots: an index into `keywords` plus one, 0 empty;
    /// linear probing from `word_hash`.
    index: Box<[u16]>,
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
        keywords.dedup_by(|a, b| a.0 == b.0);
        let mut index = vec![0u16; KEYWORD_SLOTS].into_boxed_slice();
        for (i, (w, _)) in keywords.iter().enumerate() {
            let mut h = word_hash(w);
            while index[h] != 0 {
                h = (h + 1) & (KEYWORD_SLOTS - 1);
            }
            index[h] = (i + 1) as u16;
        }
        let mut fingerprints: Vec<u64> = FINGERPRINTS_TXT
            .lines()
            .filter(|l| !l.is_empty())
            .filter_map(|l| pack(l.as_bytes()))
            .collect();
        fingerprints.sort_unstable();
        fingerprints.dedup();
        Tables {
            keywords,
            index,
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

/// Slots of the keyword table: a power of two, about twice the 985 words
/// (short probe runs).
const KEYWORD_SLOTS: usize = 2048;

/// FNV-1a of an upper-case word, to a slot.
fn word_hash(w: &[u8]) -> usize {
    let h = w.iter().fold(0x811c_9dc5u32, |h, &c| {
        (h ^ u32::from(c)).wrapping_mul(0x0100_0193)
    });
    h as usize & (KEYWORD_SLOTS - 1)
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
    let t = tables();
    let mut h = word_hash(key);
    loop {
        let i = t.index[h];
        if i == 0 {
            return 0;
        }
        let (w, ty) = t.keywords[usize::from(i) - 1];
        if w == &*key {
            return ty;
        }
        h = (h + 1) & (KEYWORD_SLOTS - 1);
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

    /// The hash table finds every word of the data file, in any case, with
    /// its type, and nothing else (prefixes, extensions, near misses).
    #[test]
    fn every_keyword_found() {
        for line in KEYWORDS_TSV.lines() {
            let Some((word, ty)) = line.split_once('\t') else {
                continue;
            };
            let ty = ty.as_bytes()[0];
            assert_eq!(lookup_word(word.as_bytes()), ty, "{word}");
            assert_eq!(
                lookup_word(word.to_ascii_lowercase().as_bytes()),
                ty,
                "{word}"
            );
            let mut longer = word.as_bytes().to_vec();
            longer.push(b'Q');
            let known = |w: &[u8]| {
                KEYWORDS_TSV
                    .lines()
                    .any(|l| l.split('\t').next() == Some(std::str::from_utf8(w).unwrap_or("")))
            };
            if !known(&longer) {
                assert_eq!(lookup_word(&longer), 0, "{word}Q");
            }
            let shorter = &word.as_bytes()[..word.len() - 1];
            if !known(shorter) {
                assert_eq!(lookup_word(shorter), 0, "{word} less its last byte");
            }
        }
    }
}
