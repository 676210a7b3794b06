//! Key regexes (`TX:/^header_name_920450_/`, `REQUEST_COOKIES:/^_pk_ref/`)
//! that are plain words: tested by comparing bytes instead of running the
//! regex. The CRS's chained rules select TX variables by such prefixes on
//! every transaction, over every TX variable the setup rules made (about a
//! hundred), so the regex engine's per-call setup was most of those rules'
//! cost.

use regex::bytes::Regex;

/// A compiled key regex (case-insensitive, ASCII, multi-line, as
/// `seclang::pcre::compile_selector` builds it) and, when its source is a
/// word with optional anchors, the word.
#[derive(Debug, Clone)]
pub(crate) struct KeyRegex {
    regex: Regex,
    word: Option<Word>,
}

#[derive(Debug, Clone)]
struct Word {
    /// Lower case.
    text: Box<[u8]>,
    start: bool,
    end: bool,
}

impl KeyRegex {
    pub fn new(regex: Regex, source: &str) -> KeyRegex {
        KeyRegex {
            regex,
            word: word_of(source),
        }
    }

    #[inline]
    pub fn is_match(&self, key: &[u8]) -> bool {
        let Some(w) = &self.word else {
            return self.regex.is_match(key);
        };
        if w.matches(key) {
            return true;
        }
        // `^` and `$` are line anchors (multi-line mode): an anchored word
        // may still match after or before a line break in the key.
        if (w.start || w.end) && key.contains(&b'\n') {
            return self.regex.is_match(key);
        }
        false
    }
}

impl Word {
    fn matches(&self, key: &[u8]) -> bool {
        let n = self.text.len();
        if key.len() < n {
            return false;
        }
        let eq = |at: usize| key[at..at + n].eq_ignore_ascii_case(&self.text);
        match (self.start, self.end) {
            (true, true) => key.len() == n && eq(0),
            (true, false) => eq(0),
            (false, true) => eq(key.len() - n),
            (false, false) => (0..=key.len() - n).any(eq),
        }
    }
}

/// The word a key regex source is, if it is one: word characters and `-`,
/// optionally anchored with `^` and `$`; a trailing `.*` or `c*` (the
/// pattern's own tail, which any key satisfies) is dropped when the end
/// is not anchored.
fn word_of(source: &str) -> Option<Word> {
    let (start, rest) = match source.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, source),
    };
    let (end, mut body) = match rest.strip_suffix('$') {
        Some(b) if !b.ends_with('\\') => (true, b),
        _ => (false, rest),
    };
    if !end {
        if let Some(b) = body.strip_suffix(".*") {
            body = b;
        } else if let Some(b) = body.strip_suffix('*') {
            // `x*`: zero or more of the last character.
            body = b.get(..b.len().saturating_sub(1))?;
        }
    }
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
    if body.is_empty() || !body.bytes().all(is_word) {
        return None;
    }
    Some(Word {
        text: body.to_ascii_lowercase().into_bytes().into(),
        start,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seclang::pcre::compile_selector;

    fn key(source: &str) -> KeyRegex {
        KeyRegex::new(compile_selector(source).expect("compiles"), source)
    }

    /// Every word form agrees with the regex it stands for, on keys that
    /// differ in case, position, line breaks and length.
    #[test]
    fn words_agree_with_their_regexes() {
        let sources = [
            "^header_name_920450_",
            "rfi_parameter_.*",
            "paramcounter_.*",
            "MULTIPART_HEADERS_CONTENT_TYPES_*",
            "^_pk_ref",
            "__utm",
            "^session$",
            "id$",
            "a-b",
        ];
        let keys: &[&[u8]] = &[
            b"header_name_920450_host",
            b"HEADER_NAME_920450_User-Agent",
            b"xheader_name_920450_",
            b"x\nheader_name_920450_a",
            b"rfi_parameter_q",
            b"my_RFI_PARAMETER_",
            b"paramcounter_",
            b"multipart_headers_content_types",
            b"MULTIPART_HEADERS_CONTENT_TYPE",
            b"_pk_ref.1.abcd",
            b"__UTMA",
            b"x__utmz",
            b"session",
            b"Session",
            b"session2",
            b"session\n",
            b"sessionid",
            b"ID",
            b"a-b",
            b"",
        ];
        for s in sources {
            let k = key(s);
            assert!(k.word.is_some(), "{s} is a word");
            let rx = compile_selector(s).expect("compiles");
            for &key_bytes in keys {
                assert_eq!(
                    k.is_match(key_bytes),
                    rx.is_match(key_bytes),
                    "/{s}/ on {:?}",
                    String::from_utf8_lossy(key_bytes)
                );
            }
        }
    }

    #[test]
    fn patterns_that_are_not_words_keep_the_regex() {
        for s in [
            "^pbjs-\\w+$",
            "^_ga(?:_\\w+)?$",
            "\\x22?\\x24Version",
            "a.b",
            "^$",
            "*",
            "a\\$",
        ] {
            assert!(word_of(s).is_none(), "{s}");
        }
    }
}
