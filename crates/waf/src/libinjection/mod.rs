//! `@detectSQLi` and `@detectXSS`: libinjection (BSD licence,
//! `LICENSE-libinjection`), version 3.9.2 as ModSecurity 3 bundles it,
//! written anew in Rust from its C sources and checked against its own test
//! vectors (`tests/data/libinjection/`, run by `tests.rs`).
//!
//! - [`detect_sqli`]: the SQLi fingerprint (such as `s&1UE`) when the input
//!   is SQL injection; ModSecurity puts it in TX:0 and the matched data.
//! - [`detect_xss`]: whether the input is HTML/JavaScript injection.
//!
//! Both take any bytes, never panic, allocate nothing while scanning, use a
//! bounded stack (fixed token arrays, no recursion) and run in time linear
//! in the input (a handful of passes at most).

mod data;
pub mod html5;
pub mod sqli;
pub mod xss;

#[cfg(test)]
mod tests;

/// An SQLi fingerprint: at most five token-type characters.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fingerprint {
    bytes: [u8; 8],
    len: u8,
}

impl Fingerprint {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn as_str(&self) -> &str {
        // Token types are ASCII characters.
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// libinjection's `libinjection_sqli`, without allocating: the fingerprint
/// when the input is SQLi.
pub fn sqli_fingerprint(input: &[u8]) -> Option<Fingerprint> {
    let mut state = sqli::State::new(input, 0);
    if state.is_sqli() {
        let fp = state.fingerprint_bytes();
        let mut bytes = [0u8; 8];
        bytes[..fp.len()].copy_from_slice(fp);
        Some(Fingerprint {
            bytes,
            len: fp.len() as u8,
        })
    } else {
        None
    }
}

/// `@detectSQLi`: the fingerprint when the input is SQLi (as ModSecurity
/// puts it in TX:0 / MATCHED_VAR), else `None`.
pub fn detect_sqli(input: &[u8]) -> Option<String> {
    sqli_fingerprint(input).map(|fp| fp.as_str().to_string())
}

/// `@detectXSS`: libinjection's `libinjection_xss`.
pub fn detect_xss(input: &[u8]) -> bool {
    xss::is_xss(input)
}

/// Loads the SQLi tables now rather than on the first request.
pub fn warm_up() {
    data::warm_up();
}
