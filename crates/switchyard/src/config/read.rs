//! Reading the file into the model, reporting every error in one pass.
//!
//! serde stops at the first error it meets, so an unknown key would hide a
//! bad duration further down. To find them all, the file is read again after
//! each error with the offending piece blanked out: its bytes are replaced by
//! spaces (newlines kept), so every offset, line and column of the rest of
//! the file stays where it was. The piece is the smallest one that holds the
//! error: an array element or an inline-table entry (with its comma), a
//! `key = value` line, or a whole table with its sub-tables (a table that
//! lacks a required field). The next read then stops at the next problem.
//!
//! serde checks a table's required fields only after it has read every
//! entry of the table (sub-tables included), so blanking a bad required
//! value does not hide another error in the same table; the "missing field"
//! that blanking causes is not reported (the value's own error was), and the
//! table is then dropped to go on.
//!
//! The model that is left still goes through the cross-reference and value
//! checks (`build`), so an unknown pool or a duplicate listen address shows
//! in the same run as a bad duration. What was dropped is remembered
//! (`Dropped`) so that `build` does not report its consequences: the other
//! problems of a top-level table (a `[[vserver]]`, a `[[pool]]` with its
//! sub-tables) that lost a value are left for the next run, except the
//! cross-references, which do not depend on it; and a reference to a pool
//! that was dropped is not "undefined". Unknown keys are dropped without
//! consequence.

use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

use super::model;
use super::{ConfigError, Positions};

/// More errors than this in one file are not worth listing.
const MAX_ERRORS: usize = 100;

/// What reading the file gave.
pub(super) struct Read {
    /// The model of the file with every erroneous piece dropped; `None`
    /// after a syntax error.
    pub model: Option<model::File>,
    /// Every error, in the order found.
    pub errors: Vec<ConfigError>,
    /// What the model lacks because of an error (not unknown keys).
    pub dropped: Dropped,
}

/// What reading left out of the model because of an error in it.
#[derive(Debug, Default)]
pub(crate) struct Dropped {
    /// The byte ranges of every top-level table (an element of an array of
    /// tables with its sub-tables) from which a value was dropped.
    pub tables: Vec<Range<usize>>,
    /// The file has `[[vserver]]`s, whether or not any was read.
    pub has_vservers: bool,
}

impl Dropped {
    /// Whether `span` is in a top-level table that lost a value.
    pub fn taints(&self, span: &Range<usize>) -> bool {
        *span != (0..0)
            && self
                .tables
                .iter()
                .any(|t| t.start <= span.start && span.start < t.end)
    }
}

pub(super) fn read(pos: &Positions, text: &str) -> Read {
    let mut work = text.to_string();
    let mut errors = Vec::new();
    let mut tainted: Vec<Range<usize>> = Vec::new();
    // Keys blanked because of an error in their value: the key and where
    // its table starts.
    let mut blanked_keys: Vec<(String, usize)> = Vec::new();
    for _ in 0..=MAX_ERRORS {
        let err = match toml::from_str::<model::File>(&work) {
            Ok(model) => {
                let dropped = dropped(text, tainted, &model);
                return Read {
                    model: Some(model),
                    errors,
                    dropped,
                };
            }
            Err(e) => e,
        };
        let span = err.span().unwrap_or(0..0);
        let message = err.message().trim().to_string();
        let doc = match ImDocument::parse(work.as_str()) {
            Ok(doc) => doc,
            Err(_) => {
                // A syntax error: nothing after it can be trusted. (Blanking
                // never makes one, so it is the file's own.)
                if errors.is_empty() {
                    errors.push(super::toml_error(pos, &err, None));
                }
                return Read {
                    model: None,
                    errors,
                    dropped: Dropped::default(),
                };
            }
        };
        // "missing field `x`" in the table where this pass blanked `x`.
        let consequence = missing_field(&message).is_some_and(|field| {
            blanked_keys
                .iter()
                .any(|(k, table)| k == field && *table == span.start)
        });
        if !consequence {
            if errors.len() == MAX_ERRORS {
                errors.push(pos.error(
                    span.start,
                    format!("more than {MAX_ERRORS} errors; stopping here"),
                ));
                break;
            }
            errors.push(pos.error(span.start, message.clone()));
        }
        if !message.starts_with("unknown field") {
            tainted.extend(top_level_at(doc.as_table(), &work, &span));
        }
        let Some(piece) = piece_at(doc.as_table(), &work, &span) else {
            break;
        };
        for r in &piece.ranges {
            blank(&mut work, r.clone());
        }
        if let Some((key, Some(table))) = piece.key {
            blanked_keys.push((key, table));
        }
    }
    Read {
        model: None,
        errors,
        dropped: Dropped::default(),
    }
}

/// The ranges of the top-level table (or `key = value` line) holding `span`.
fn top_level_at(root: &Table, text: &str, span: &Range<usize>) -> Vec<Range<usize>> {
    for (_, item) in root.iter() {
        let tables: Vec<&Table> = match item {
            Item::Table(t) => vec![t],
            Item::ArrayOfTables(a) => a.iter().collect(),
            Item::Value(v) => {
                if let Some(r) = v.span().map(|r| line_from(text, r)) {
                    if r.start <= span.start && span.end <= r.end {
                        return vec![r];
                    }
                }
                continue;
            }
            Item::None => continue,
        };
        for t in tables {
            let piece = Piece {
                ranges: table_ranges(t, text),
                key: None,
            };
            if piece.holds(span) {
                return piece.ranges;
            }
        }
    }
    Vec::new()
}

/// What the model lacks of the file `text`. Whether the file has
/// `[[vserver]]`s matters only when the model has none, so the file is
/// parsed again only then: a second parse of every file read was a
/// quarter of a 10,000-route check's time (release build, `perf`).
fn dropped(text: &str, tables: Vec<Range<usize>>, model: &model::File) -> Dropped {
    Dropped {
        tables,
        has_vservers: !model.vserver.is_empty()
            || ImDocument::parse(text).is_ok_and(|d| d.contains_key("vserver")),
    }
}

/// `missing field `name`` -> `name`.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

fn blank(text: &mut String, r: Range<usize>) {
    // As many bytes as before: a multi-byte character becomes as many spaces.
    let blanked: String = text[r.clone()]
        .chars()
        .flat_map(|c| {
            let b = if c == '\n' || c == '\r' { c } else { ' ' };
            std::iter::repeat_n(b, c.len_utf8())
        })
        .collect();
    text.replace_range(r, &blanked);
}

/// A piece of the file that can be blanked on its own.
struct Piece {
    /// Byte ranges; a table's are its header and body and those of its
    /// sub-tables (which need not be adjacent).
    ranges: Vec<Range<usize>>,
    /// For a `key = value` piece or an inline-table entry: the key, and
    /// where the table holding it starts (its header or its `{`).
    key: Option<(String, Option<usize>)>,
}

impl Piece {
    fn holds(&self, span: &Range<usize>) -> bool {
        self.ranges.iter().any(|r| {
            r.start <= span.start && span.end <= r.end && (span.start < r.end || r.is_empty())
        })
    }
}

/// The smallest piece of `table` holding `span`.
fn piece_at(table: &Table, text: &str, span: &Range<usize>) -> Option<Piece> {
    let parent = table.span().map(|r| r.start);
    table
        .iter()
        .find_map(|(key, item)| item_piece_at(key, parent, item, text, span))
}

fn item_piece_at(
    key: &str,
    parent: Option<usize>,
    item: &Item,
    text: &str,
    span: &Range<usize>,
) -> Option<Piece> {
    let table_piece = |t: &Table| {
        piece_at(t, text, span).or_else(|| {
            let piece = Piece {
                ranges: table_ranges(t, text),
                key: None,
            };
            piece.holds(span).then_some(piece)
        })
    };
    match item {
        Item::None => None,
        Item::Value(v) => {
            let piece = Piece {
                ranges: vec![line_from(text, v.span()?)],
                key: Some((key.to_string(), parent)),
            };
            if !piece.holds(span) {
                return None;
            }
            value_piece_at(v, text, span).or(Some(piece))
        }
        Item::Table(t) => table_piece(t),
        Item::ArrayOfTables(a) => a.iter().find_map(table_piece),
    }
}

/// A value starts on its key's line: the piece is that line from its start
/// (dotted keys included) to the value's end.
fn line_from(text: &str, value: Range<usize>) -> Range<usize> {
    let start = text[..value.start].rfind('\n').map(|i| i + 1).unwrap_or(0);
    start..value.end
}

/// Within an array or inline table, the element or entry holding `span`,
/// with its comma (the one after it or, for the last, the one before), so
/// what is left stays valid TOML.
fn value_piece_at(v: &Value, text: &str, span: &Range<usize>) -> Option<Piece> {
    let (open, elements): (usize, Vec<(Option<&str>, &Value)>) = match v {
        Value::Array(a) => (a.span()?.start, a.iter().map(|e| (None, e)).collect()),
        Value::InlineTable(t) => (
            t.span()?.start,
            t.iter().map(|(k, e)| (Some(k), e)).collect(),
        ),
        _ => return None,
    };
    // Each element starts just after the '[' / '{' or the comma before it.
    let mut start = open + 1;
    for (i, (key, e)) in elements.iter().enumerate() {
        let r = e.span()?;
        let next_comma = comma_after(text, r.end);
        if start <= span.start && span.end <= r.end {
            if let Some(inner) = value_piece_at(e, text, span) {
                return Some(inner);
            }
            let range = match next_comma {
                Some(c) => start..c + 1,
                // The last one: take the comma before it, if any.
                None if i > 0 => start - 1..r.end,
                None => start..r.end,
            };
            return Some(Piece {
                ranges: vec![range],
                key: key.map(|k| (k.to_string(), Some(open))),
            });
        }
        start = next_comma? + 1;
    }
    None
}

/// The comma that follows `from`, skipping whitespace, newlines and comments.
fn comma_after(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b',' => return Some(i),
            _ => return None,
        }
    }
    None
}

/// A table's header and entries, and those of its sub-tables.
fn table_ranges(t: &Table, text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    if let Some(r) = t.span() {
        out.push(r);
    }
    for (_, item) in t.iter() {
        match item {
            Item::None => {}
            Item::Value(v) => out.extend(v.span().map(|r| line_from(text, r))),
            Item::Table(sub) => out.extend(table_ranges(sub, text)),
            Item::ArrayOfTables(a) => {
                for sub in a.iter() {
                    out.extend(table_ranges(sub, text));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error as "line:col: message".
    fn errors(text: &str) -> Vec<String> {
        let pos = Positions::new("f", text);
        read(&pos, text)
            .errors
            .iter()
            .map(|e| format!("{}:{}: {}", e.line, e.col, e.message))
            .collect()
    }

    #[test]
    fn an_unknown_key_does_not_hide_a_bad_duration() {
        let e = errors(
            "[global]\nworkerz = 2\n[timeouts]\nclient_idle = \"5 parsecs\"\nclient_body = \"1x\"\n",
        );
        assert_eq!(e.len(), 3, "{e:#?}");
        assert!(e[0].starts_with("2:1: unknown field `workerz`"), "{e:#?}");
        assert!(e[1].starts_with("4:15: invalid duration"), "{e:#?}");
        assert!(e[2].starts_with("5:15: invalid duration"), "{e:#?}");
    }

    #[test]
    fn a_bad_required_value_is_not_also_missing() {
        let text = "[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"nowhere\"\nweight = \"heavy\"\n[[pool.member]]\nweight = 2\n[[pool]]\nname = \"q\"\nalgorithm = \"fastest\"\n";
        let e = errors(text);
        assert_eq!(e.len(), 4, "{e:#?}");
        assert!(e[0].starts_with("4:11: "), "{e:#?}");
        assert!(e[1].starts_with("5:10: "), "{e:#?}");
        // The second member really lacks its address.
        assert!(e[2].contains("missing field `address`"), "{e:#?}");
        assert!(
            e[3].starts_with("10:13: unknown variant `fastest`"),
            "{e:#?}"
        );
    }

    #[test]
    fn array_elements_and_inline_entries_are_dropped_one_by_one() {
        let text = "[[vserver]]\nname = \"v\"\nlisten = [\"bad\", \"127.0.0.1:1\", \"worse\"]\n[[vserver.policy]]\nmatch = { source = [\"10.0.0.0/99\"], header = { name = 5 }, path_regex = \"(\" }\n";
        let e = errors(text);
        assert_eq!(e.len(), 5, "{e:#?}");
        assert!(e[0].starts_with("3:11: "), "{e:#?}");
        assert!(e[1].starts_with("3:33: "), "{e:#?}");
        assert!(e[2].starts_with("5:20: "), "{e:#?}");
        assert!(e[3].starts_with("5:55: invalid type"), "{e:#?}");
        assert!(e[4].starts_with("5:73: invalid regex"), "{e:#?}");
    }

    #[test]
    fn a_syntax_error_is_reported_alone() {
        let e = errors("[global]\nworkers = \n[timeouts]\nclient_idle = \"5 parsecs\"\n");
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].starts_with("2:"), "{e:#?}");
    }

    #[test]
    fn only_unknown_keys_drop_nothing() {
        let text = "[global]\nworkerz = 2\n";
        let r = read(&Positions::new("f", text), text);
        assert!(r.dropped.tables.is_empty() && r.model.is_some() && r.errors.len() == 1);
        let text = "[global]\nworkers = \"two\"\n";
        let r = read(&Positions::new("f", text), text);
        assert!(r.model.is_some() && r.errors.len() == 1);
        assert!(r.dropped.taints(&(10..11)), "{:?}", r.dropped);
    }

    #[test]
    fn a_vserver_dropped_whole_taints_only_its_table() {
        // The first lacks listen (dropped whole), the second is fine.
        let text = "[[vserver]]\nname = \"a\"\n[[vserver]]\nname = \"b\"\nlisten = []\n";
        let r = read(&Positions::new("f", text), text);
        let model = r.model.expect("a model");
        assert_eq!(model.vserver.len(), 1, "{:?}", r.errors);
        assert!(r.dropped.has_vservers);
        assert!(r.dropped.taints(&(13..14)), "{:?}", r.dropped);
        assert!(!r.dropped.taints(&(36..37)), "{:?}", r.dropped);
    }
}
