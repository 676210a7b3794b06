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
//! A crate of its own (issue 31) that names nothing of the proxy, so that
//! a change to the proxy does not compile it again; the proxy renders the
//! audit lines (`accesslog/waf_audit.rs`) into a `policy::AuditSink`.

// The engine is safe Rust throughout (only its measurement tests call
// libc); keep it so.
#![cfg_attr(not(test), forbid(unsafe_code))]
// The proxy's discipline (crates/switchyard/src/lib.rs; its
// tests/layout.rs checks both crates): no unwrap()/expect() outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod engine;
pub mod libinjection;
pub mod operator;
pub mod policy;
pub mod seclang;
pub mod transform;
