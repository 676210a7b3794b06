//! The web application firewall: a SecLang engine that runs the OWASP Core
//! Rule Set as published (issue 11).
//!
//! - `seclang`: the rule language, parsed from the CRS files unchanged.
//! - `libinjection`: `@detectSQLi` and `@detectXSS`.
//! - `transform`: the transformations (`t:...`), ModSecurity v3 semantics.
//! - `operator`: the other operators (`@rx` with literal prefilters, `@pm`...).
//! - `engine`: the compiled rule set and the transactions that run it.
//! - `policy`: a vserver's WAF (mode, paranoia, sampling, limits) over a
//!   compiled rule set shared by every vserver and reload that names it.
//!
//! The proxy's stage that runs it on each request is `proxy/inspecting.rs`.

// The engine is safe Rust throughout (only its measurement tests call
// libc); keep it so.
#![cfg_attr(not(test), forbid(unsafe_code))]

pub mod engine;
pub mod libinjection;
pub mod operator;
pub mod policy;
pub mod seclang;
pub mod transform;
