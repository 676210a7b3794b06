//! SecLang, the ModSecurity rule language, parsed into a typed model
//! ([`Ruleset`]) that the engine evaluates. It reads the OWASP Core Rule
//! Set unchanged.
//!
//! - Lexing as ModSecurity v3 (and Apache) read configuration: one
//!   directive per logical line, backslash-newline continuations, `#`
//!   comments, `"quoted"` arguments where `\"` is a quote and every other
//!   backslash stays (so regexes keep their escapes) ([`lexer`]).
//! - `Include` (globs, relative to the including file); `@pmFromFile` and
//!   `@ipMatchFromFile` lists read relative to the rule's file (comments
//!   and blank lines skipped).
//! - `SecRule` variables, operators and actions parsed into [`Variable`],
//!   [`Operator`] and [`Action`]; `@rx` patterns translated from PCRE
//!   ([`translate_pcre`]) and compiled once (bytes, Unicode off, DOTALL and
//!   MULTILINE); `%{...}` macros split into [`Macro`] templates.
//! - Per-phase `SecDefaultAction` merged into each rule defined after it
//!   (transformations, disruptive action for `block` or none, log flags,
//!   status, metadata); `SecRuleRemoveBy*`, `SecRuleUpdateTargetBy*` and
//!   `SecRuleUpdateActionById` applied at load to the rules defined before
//!   them (CRS puts them after the rules, in `RESPONSE-999-...` or the
//!   plugins' `-after.conf`).
//!
//! Errors carry `file:line` and a message.

mod lexer;
mod loader;
mod model;
mod parse;
pub(crate) mod pcre;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

pub use lexer::{logical_lines, split_actions, split_args};
pub use loader::Loader;
pub use model::*;
pub use parse::{parse_actions, parse_operator, parse_variables, read_list};
pub use pcre::{check_pcre, compile_pcre, translate_pcre};

/// A load error: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub file: String,
    /// The first physical line of the directive (0 when the file itself
    /// cannot be read).
    pub line: u32,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// Loads files and directories (each directory's `*.conf` in name order),
/// in the order given.
pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<Ruleset, Error> {
    let mut l = Loader::new();
    for p in paths {
        l.load_path(p.as_ref())?;
    }
    l.finish()
}

/// Parses SecLang text (relative paths from the working directory).
pub fn parse_str(text: &str) -> Result<Ruleset, Error> {
    let mut l = Loader::new();
    l.load_str(text, "<string>", None)?;
    l.finish()
}
