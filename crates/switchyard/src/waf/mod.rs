//! The web application firewall: a SecLang engine that runs the OWASP Core
//! Rule Set as published (issue 11).
//!
//! - `seclang`: the rule language, parsed from the CRS files unchanged.
//! - `libinjection`: `@detectSQLi` and `@detectXSS`.
//! - `transform`: the transformations (`t:...`), ModSecurity v3 semantics.
//! - `operator`: the other operators (`@rx` with literal prefilters, `@pm`...).
//! - `engine`: the compiled rule set and the transactions that run it.
pub mod engine;
pub mod libinjection;
pub mod operator;
pub mod seclang;
pub mod transform;
