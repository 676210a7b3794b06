//! The SecLang evaluation engine: a [`Ruleset`] compiled once into an
//! [`Engine`] (shared by every worker, `Send + Sync`), and a [`Transaction`]
//! per request that runs the phases with ModSecurity v3's semantics.
//!
//! Compilation ([`Engine::new`]):
//! - rules split per phase in file order, `SecMarker`s in every phase (as
//!   ModSecurity v3 inserts them), `skipAfter` resolved to the index of the
//!   next marker of that name in the phase;
//! - chains grouped (the starter and its links evaluated as one unit);
//! - variables resolved to a collection with a selector (all, exact key
//!   folded to lower case, `/regex/`), counting `&` and exclusions `!`;
//! - operators compiled once (`waf::operator`, `@detectSQLi`/`@detectXSS`
//!   on `waf::libinjection`); arguments with macros expanded per
//!   transaction;
//! - transformation pipelines interned in a prefix tree, so that a value
//!   transformed by `t:urlDecodeUni,t:lowercase` in one rule and by
//!   `t:urlDecodeUni` in another is decoded once per transaction;
//! - `SecRuleEngine`, body access and limits from the rule set's
//!   [`Config`]; [`Settings`] adds what SecLang does not say (a mode
//!   override per virtual server, bounds on arguments, parts and regex work).
//!
//! Nothing is specific to the Core Rule Set: its paranoia level and
//! thresholds are TX variables its own setup rules set.
//!
//! ModSecurity v3 behaviours kept on purpose (the CRS tests expect them):
//! setvar, msg and logdata run on every matched value of every link, even
//! when a later link of the chain fails; ctl, initcol, setenv, skip and
//! the disruptive action wait for the whole chain; MATCHED_VAR(S) are
//! cleared only by a rule that does not match; single-valued variables
//! (REQUEST_BODY, REQBODY_PROCESSOR, ...) always yield a value, empty when
//! unset; REQUEST_BODY is always set (`ctl:forceRequestBodyVariable` is a
//! no-op); markers exist in every phase; `block` is the phase default's
//! action and a rule without a disruptive action has none. One deliberate
//! difference: with request body access off, phase 2 still runs (without
//! body variables), where ModSecurity v3 skips it.
//!
//! Bounds: the body limits of the rule set (Reject answers 403 with rule
//! id 0, ProcessPartial inspects the first bytes and sets
//! INBOUND_DATA_ERROR); [`Settings::max_args`], [`Settings::max_parts`],
//! JSON/XML depth; regex work per transaction ([`Settings`]).

mod body;
mod compile;
mod head;
mod keyrx;
mod tx;

#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use compile::CompileError;
pub use tx::Transaction;

use super::seclang::{Config, EngineMode, LimitAction, Ruleset, Severity};

/// Engine settings that are not SecLang directives (the SecLang ones come
/// from the rule set's [`Config`]).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Overrides `SecRuleEngine` (per virtual server: off, detection only,
    /// blocking).
    pub mode: Option<EngineMode>,
    /// The most arguments kept (ARGS from the query string and the body
    /// together); `SecArgumentsLimit` if lower. Further arguments are
    /// dropped and `REQBODY_ERROR` is not set (as ModSecurity does).
    pub max_args: usize,
    /// The most multipart parts; more is a multipart error
    /// (`REQBODY_ERROR`, `MULTIPART_STRICT_ERROR`).
    pub max_parts: usize,
    /// JSON nesting depth (`SecRequestBodyJsonDepthLimit` if set).
    pub json_depth: usize,
    /// XML nesting depth.
    pub xml_depth: usize,
    /// The bound on regex work per transaction: operator evaluations.
    pub max_operator_evals: u64,
    /// The bound on regex work per transaction: bytes given to `@rx`,
    /// `@pm`, `@detectSQLi` and `@detectXSS`. Past either bound, these
    /// operators stop matching and `MSC_PCRE_LIMITS_EXCEEDED` is 1, as
    /// ModSecurity does when PCRE reports its match limit.
    pub max_scan_bytes: u64,
    /// `logdata` is cut to this many bytes in [`MatchedRule`].
    pub logdata_limit: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            mode: None,
            max_args: 1000,
            max_parts: 1000,
            json_depth: 512,
            xml_depth: 256,
            max_operator_evals: 1_000_000,
            max_scan_bytes: 1 << 30,
            logdata_limit: 512,
        }
    }
}

/// The limits in force (the rule set's `Config` with ModSecurity's
/// defaults, and [`Settings`]).
#[derive(Clone, Debug)]
pub struct Limits {
    pub mode: EngineMode,
    pub request_body_access: bool,
    pub response_body_access: bool,
    /// `SecRequestBodyLimit` (ModSecurity default 13 MiB).
    pub request_body_limit: u64,
    /// `SecRequestBodyNoFilesLimit` (default 1 MiB).
    pub request_body_no_files_limit: u64,
    pub request_body_limit_action: LimitAction,
    pub response_body_limit: u64,
    pub response_body_limit_action: LimitAction,
    pub response_mime_types: Vec<Box<str>>,
    pub argument_separator: u8,
    pub max_args: usize,
    pub max_parts: usize,
    pub json_depth: usize,
    pub xml_depth: usize,
    pub max_operator_evals: u64,
    pub max_scan_bytes: u64,
    pub logdata_limit: usize,
}

impl Limits {
    fn new(c: &Config, s: &Settings) -> Limits {
        let max_args = match c.arguments_limit {
            Some(n) if (n as usize) < s.max_args => n as usize,
            _ => s.max_args,
        };
        Limits {
            mode: s.mode.or(c.rule_engine).unwrap_or(EngineMode::Off),
            request_body_access: c.request_body_access.unwrap_or(false),
            response_body_access: c.response_body_access.unwrap_or(false),
            request_body_limit: c.request_body_limit.unwrap_or(13_107_200),
            request_body_no_files_limit: c.request_body_no_files_limit.unwrap_or(1_048_576),
            request_body_limit_action: c.request_body_limit_action.unwrap_or(LimitAction::Reject),
            response_body_limit: c.response_body_limit.unwrap_or(524_288),
            response_body_limit_action: c
                .response_body_limit_action
                .unwrap_or(LimitAction::ProcessPartial),
            response_mime_types: c
                .response_body_mime_types
                .clone()
                .unwrap_or_else(|| vec!["text/plain".into(), "text/html".into()]),
            argument_separator: c
                .argument_separator
                .as_deref()
                .and_then(|s| s.bytes().next())
                .unwrap_or(b'&'),
            max_args,
            max_parts: s.max_parts,
            json_depth: c
                .request_body_json_depth_limit
                .map(|d| d as usize)
                .unwrap_or(s.json_depth)
                .max(1),
            xml_depth: s.xml_depth.max(1),
            max_operator_evals: s.max_operator_evals,
            max_scan_bytes: s.max_scan_bytes,
            logdata_limit: s.logdata_limit,
        }
    }
}

/// A compiled rule set. Build once, share (`Arc<Engine>`) and start a
/// [`Transaction`] per request.
pub struct Engine {
    pub(crate) prog: compile::Program,
    pub(crate) limits: Limits,
    /// The most TX variables a transaction held so far: new transactions
    /// make room for as many up front.
    pub(crate) tx_vars_hint: std::sync::atomic::AtomicUsize,
    /// Phase 1's request-independent head, run once per preset set.
    pub(crate) heads: head::Heads,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("rules", &self.prog.rules.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl Engine {
    /// Compiles `ruleset` (consumed: its compiled regexes are rebuilt with
    /// literal prefilters and the originals dropped).
    pub fn new(ruleset: Ruleset, settings: Settings) -> Result<Engine, CompileError> {
        let limits = Limits::new(&ruleset.config, &settings);
        let prog = compile::Program::new(ruleset)?;
        super::libinjection::warm_up();
        Ok(Engine {
            prog,
            limits,
            tx_vars_hint: std::sync::atomic::AtomicUsize::new(0),
            heads: head::Heads::default(),
        })
    }

    /// The limits and mode in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many rules (chain starters and single rules) per phase 1 to 5.
    pub fn rule_counts(&self) -> [usize; 5] {
        let mut n = [0; 5];
        for r in &self.prog.rules {
            n[usize::from(r.phase.clamp(1, 5)) - 1] += 1;
        }
        n
    }

    /// Whether rule `id` denies, drops or redirects when the engine blocks:
    /// in detection-only mode, a match of such a rule is what would have
    /// blocked.
    pub fn blocks(&self, id: u64) -> bool {
        self.prog.rules.iter().any(|r| {
            r.id == id
                && matches!(
                    r.disruptive,
                    compile::CDisruptive::Deny
                        | compile::CDisruptive::Drop
                        | compile::CDisruptive::Redirect(_)
                )
        })
    }

    /// Remarks from compilation (operators that never match here, ...).
    pub fn notes(&self) -> &[String] {
        &self.prog.notes
    }

    /// Starts a transaction.
    pub fn transaction<'e>(&'e self, req: Request<'_>) -> Transaction<'e> {
        Transaction::new(self, req)
    }

    /// Starts a transaction that owns a reference to the engine.
    pub fn transaction_arc(self: &Arc<Engine>, req: Request<'_>) -> Transaction<'static> {
        // SAFETY-free: the transaction keeps the Arc alive.
        Transaction::new_arc(self.clone(), req)
    }
}

/// What a transaction needs to know about the request head.
#[derive(Clone, Debug, Default)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The request target, normalized (`http::normalize`): REQUEST_URI,
    /// REQUEST_FILENAME, REQUEST_BASENAME, ARGS_GET, QUERY_STRING.
    pub uri: &'a [u8],
    /// The target as received (`/a/./b?x=1`, or absolute form):
    /// REQUEST_URI_RAW and REQUEST_LINE, so rules that look for traversal
    /// and encoding tricks still see them.
    pub uri_raw: &'a [u8],
    /// `HTTP/1.1`, `1.1` or `HTTP/2.0`.
    pub protocol: &'a str,
    /// Header names and values in order, repeated names kept.
    pub headers: &'a [(&'a [u8], &'a [u8])],
    pub remote_addr: &'a str,
    pub remote_port: u16,
    pub local_addr: &'a str,
    pub local_port: u16,
    pub unique_id: &'a str,
}

/// How a transaction was interrupted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterventionKind {
    Deny,
    /// Close the connection without a response.
    Drop,
    Redirect(String),
}

/// A disruptive action that took effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intervention {
    pub kind: InterventionKind,
    /// The HTTP status to answer (403 unless the rule said `status:`;
    /// 302 for a redirect).
    pub status: u16,
    /// The rule that interrupted (0: a body limit).
    pub rule_id: u64,
    pub phase: u8,
    /// Why (the rule's message, or the limit).
    pub message: String,
}

/// A rule that matched (a whole chain), with `log` on.
#[derive(Clone, Debug)]
pub struct MatchedRule {
    pub id: u64,
    pub phase: u8,
    pub msg: String,
    /// Expanded and cut to [`Settings::logdata_limit`] bytes.
    pub logdata: String,
    pub severity: Option<Severity>,
    pub tags: Vec<Box<str>>,
    pub ver: Option<Box<str>>,
    /// The last matched variable's name (`ARGS:id`) and value (truncated).
    pub matched_var_name: String,
    pub matched_var: String,
    /// The rule's action was disruptive and took effect.
    pub disruptive: bool,
}

/// The result of a transaction so far.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub interrupted: Option<Intervention>,
    pub matched: Vec<MatchedRule>,
    /// The regex work bound was reached (some operators stopped matching).
    pub limits_exceeded: bool,
}

impl Outcome {
    /// The ids of the matched rules, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.matched.iter().map(|m| m.id).collect()
    }

    pub fn has(&self, id: u64) -> bool {
        self.matched.iter().any(|m| m.id == id)
    }
}
