//! `[vserver.script]` as written (docs/scripting.md), and its validation:
//! the file is read and checked here (syntax, and its top level run once
//! under its limits), so `check` reports a Lua error as `FILE:LINE:
//! message` and a reload with a broken script keeps the running
//! configuration.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::types::Problem;

/// `[vserver.script]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFile {
    /// The Lua file, relative to the configuration file.
    pub file: Spanned<String>,
    /// Lua VM instructions one event call may run (default 1,000,000).
    pub max_instructions: Option<Spanned<u64>>,
    /// Bytes one worker's state of the script may hold (default 16 MiB).
    pub max_memory: Option<Spanned<u64>>,
    /// Bytes a body event may collect (default 1 MiB).
    pub max_body: Option<Spanned<u64>>,
}

/// About 2 ms of Lua on this machine's cores: far above a header rule
/// (a few hundred instructions), far below a stuck worker.
pub const DEFAULT_MAX_INSTRUCTIONS: u64 = 1_000_000;
pub const DEFAULT_MAX_MEMORY: u64 = 16 << 20;
/// A body event holds the whole body (and the script a copy of it): a
/// page to edit, a JSON document to check; not a download.
pub const DEFAULT_MAX_BODY: u64 = 1 << 20;

/// Where a script runs: what its events can be.
pub struct Kind {
    /// A `tcp` vserver (else HTTP).
    pub tcp: bool,
    /// `[vserver.tls]`: the vserver terminates TLS (its certificates, for
    /// `c:use_cert`); None without.
    pub certs: Option<std::sync::Arc<crate::tls::CertStore>>,
}

/// The checked script; `pools` are the names `r:use_pool` may use.
pub fn build(
    s: &ScriptFile,
    base: &Path,
    (what, vserver): (&str, &str),
    kind: Kind,
    pools: Vec<String>,
    normalize: crate::http::normalize::Rules,
    problems: &mut Vec<Problem>,
) -> Option<crate::script::Script> {
    let before = problems.len();
    let range = |v: &Option<Spanned<u64>>,
                 key: &str,
                 lo: u64,
                 hi: u64,
                 default: u64,
                 problems: &mut Vec<Problem>| {
        match v {
            None => default,
            Some(n) if (lo..=hi).contains(n.get_ref()) => *n.get_ref(),
            Some(n) => {
                problems.push((
                    n.span(),
                    format!(
                        "{what}: script.{key} {} is out of range {lo} to {hi}",
                        n.get_ref()
                    ),
                ));
                default
            }
        }
    };
    let max_instructions = range(
        &s.max_instructions,
        "max_instructions",
        1000,
        1_000_000_000,
        DEFAULT_MAX_INSTRUCTIONS,
        problems,
    );
    let max_memory = range(
        &s.max_memory,
        "max_memory",
        256 << 10,
        1 << 32,
        DEFAULT_MAX_MEMORY,
        problems,
    );
    let max_body = range(
        &s.max_body,
        "max_body",
        1024,
        64 << 20,
        DEFAULT_MAX_BODY,
        problems,
    );
    let name = s.file.get_ref();
    let path = base.join(name);
    let source = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            problems.push((
                s.file.span(),
                format!("{what}: cannot read script {}: {e}", path.display()),
            ));
            return None;
        }
    };
    if problems.len() > before {
        return None;
    }
    let limits = crate::script::Limits {
        max_instructions,
        max_memory: max_memory as usize,
        max_body: max_body as usize,
    };
    let tcp = kind.tcp;
    match crate::script::Script::compile(name, source, limits, pools, normalize, vserver) {
        // The events of the other kind of vserver would never run.
        Ok(script)
            if tcp
                && !script.events.l4()
                && !script.events.accept
                && !script.events.client_hello =>
        {
            problems.push((
                s.file.span(),
                format!("{what}: script {name}: a tcp vserver runs on_accept, on_client_hello (with [vserver.tls]), on_client_data, on_server_data and on_close; this script defines none of them"),
            ));
            None
        }
        Ok(script) if tcp && script.events.exchange() => {
            problems.push((
                s.file.span(),
                format!("{what}: script {name}: on_request, on_member, on_response, on_log and the body events are for HTTP vservers; a tcp vserver relays bytes (on_client_data sees a ClientHello it passes through)"),
            ));
            None
        }
        // A tcp vserver that terminates TLS reads no first bytes: the
        // handshake's ClientHello is on_client_hello's.
        Ok(script) if tcp && script.events.client_data && kind.certs.is_some() => {
            problems.push((
                s.file.span(),
                format!("{what}: script {name}: on_client_data sees a ClientHello a tcp vserver passes through; this one terminates TLS ([vserver.tls]): use on_client_hello"),
            ));
            None
        }
        Ok(script) if !tcp && script.events.l4() => {
            problems.push((
                s.file.span(),
                format!("{what}: script {name}: on_client_data, on_server_data and on_close are for tcp vservers"),
            ));
            None
        }
        Ok(script) if script.events.client_hello && kind.certs.is_none() => {
            problems.push((
                s.file.span(),
                format!("{what}: script {name}: on_client_hello runs on vservers that terminate TLS; this one has no [vserver.tls]"),
            ));
            None
        }
        Ok(mut script) => {
            script.certs = kind.certs;
            Some(script)
        }
        Err(e) => {
            problems.push((s.file.span(), format!("{what}: script {e}")));
            None
        }
    }
}
