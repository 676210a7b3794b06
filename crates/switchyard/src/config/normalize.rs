//! `[vserver.normalize]`: how a vserver normalizes request paths before
//! its rules read them (`http::normalize`, README "Path normalization").

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::http::normalize::{BadEncoding, EscapedSlashes, Rules};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NormalizeFile {
    /// Merge runs of `/` (default true).
    pub merge_slashes: Option<bool>,
    /// `%2F`, `%5C` and `\`: "reject" (default, 400), "keep", "decode".
    pub escaped_slashes: Option<Spanned<String>>,
    /// `%00`, malformed escapes, overlong UTF-8: "reject" (default), "keep".
    pub bad_encoding: Option<Spanned<String>>,
    /// What the member gets: "normalized" (default) or "original".
    pub forward: Option<Spanned<String>>,
}

/// The rules, or the problems with their positions.
pub fn build(
    file: Option<&NormalizeFile>,
    what: &str,
    problems: &mut Vec<(Range<usize>, String)>,
) -> Rules {
    let mut rules = Rules::default();
    let Some(f) = file else {
        return rules;
    };
    if let Some(m) = f.merge_slashes {
        rules.merge_slashes = m;
    }
    if let Some(e) = &f.escaped_slashes {
        rules.escaped_slashes = match e.get_ref().as_str() {
            "reject" => EscapedSlashes::Reject,
            "keep" => EscapedSlashes::Keep,
            "decode" => EscapedSlashes::Decode,
            other => {
                problems.push((
                    e.span(),
                    format!("{what}: normalize.escaped_slashes {other:?}: use \"reject\", \"keep\" or \"decode\""),
                ));
                EscapedSlashes::Reject
            }
        };
    }
    if let Some(b) = &f.bad_encoding {
        rules.bad_encoding = match b.get_ref().as_str() {
            "reject" => BadEncoding::Reject,
            "keep" => BadEncoding::Keep,
            other => {
                problems.push((
                    b.span(),
                    format!("{what}: normalize.bad_encoding {other:?}: use \"reject\" or \"keep\""),
                ));
                BadEncoding::Reject
            }
        };
    }
    if let Some(fw) = &f.forward {
        rules.forward_original = match fw.get_ref().as_str() {
            "normalized" => false,
            "original" => true,
            other => {
                problems.push((
                    fw.span(),
                    format!(
                        "{what}: normalize.forward {other:?}: use \"normalized\" or \"original\""
                    ),
                ));
                false
            }
        };
    }
    rules
}
