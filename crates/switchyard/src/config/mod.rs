//! Configuration: the TOML file model, its validation, and the immutable
//! snapshot the data path reads.
//!
//! Every error names `file:line:column`, says what is wrong and, where the
//! set is closed, what is allowed.

mod build;
pub mod ddos;
pub mod http3;
pub mod l4;
pub mod limits;
pub mod model;
pub mod normalize;
mod parts;
pub mod publish;
mod read;
pub mod script;
pub mod shield;
pub mod snapshot;
mod tls_server;
mod tls_upstream;
pub use tls_upstream::{check_ca_bundle, check_cert_and_key};
pub mod tokens;
pub mod types;
pub mod waf;

use std::fmt;
use std::path::Path;

pub use build::build;
pub use build::swap_cluster_members;
pub use snapshot::Snapshot;
pub use types::is_token;

/// One problem in a configuration file.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 when the problem is the file as a whole (it cannot be
    /// read), which is then shown without a position.
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl ConfigError {
    /// "file:line:col" or, for the file as a whole, "file".
    fn location(&self) -> String {
        if self.line == 0 {
            self.file.clone()
        } else {
            format!("{}:{}:{}", self.file, self.line, self.col)
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location(), self.message)
    }
}

/// All the errors found in one file.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// One error about the whole source, not a line of it.
    pub fn message(file: &str, message: &str) -> ConfigErrors {
        ConfigErrors(vec![ConfigError {
            file: file.to_string(),
            line: 0,
            col: 0,
            message: message.to_string(),
        }])
    }
}

impl ConfigError {
    /// The same position and message, as a warning: "file:line:col: warning: ...".
    pub fn as_warning(&self) -> String {
        format!("{}: warning: {}", self.location(), self.message)
    }
}

/// Maps byte offsets of a source text to 1-based line and column.
pub struct Positions<'a> {
    file: &'a str,
    text: &'a str,
}

impl<'a> Positions<'a> {
    pub fn new(file: &'a str, text: &'a str) -> Self {
        Positions { file, text }
    }

    /// The directory relative paths in the file are resolved against.
    pub fn base_dir(&self) -> std::path::PathBuf {
        std::path::Path::new(self.file)
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default()
    }

    pub fn error(&self, offset: usize, message: impl Into<String>) -> ConfigError {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let col = before[line_start..].chars().count() + 1;
        ConfigError {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        }
    }
}

/// A TOML error at its place: `file:line:col: message`. A syntax error is
/// the file's (whoever read it); any other is prefixed with `what` (the
/// table that was being read), if given. Every reading of a configuration
/// file reports its syntax errors through here, whatever it reads the file
/// for (the configuration, the `[cluster]` table, the admin address).
fn toml_error(pos: &Positions, e: &toml::de::Error, what: Option<&str>) -> ConfigError {
    let at = e.span().map_or(0, |s| s.start);
    let message = e.message().trim();
    match what {
        Some(what) if toml_edit::ImDocument::parse(pos.text).is_ok() => {
            pos.error(at, format!("{what}: {message}"))
        }
        _ => pos.error(at, message),
    }
}

/// Deserializes part of a configuration file (`file` in errors), with its
/// errors placed as `parse` places them (`toml_error`).
pub fn read_part<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
    what: Option<&str>,
) -> Result<T, ConfigErrors> {
    toml::from_str(text)
        .map_err(|e| ConfigErrors(vec![toml_error(&Positions::new(file, text), &e, what)]))
}

/// Parses and validates `text` (named `file` in errors) into a snapshot,
/// reporting every error of the file (see `read` for how).
/// `previous` lends member state and counters to members that persist.
pub fn parse(
    file: &str,
    text: &str,
    previous: Option<&Snapshot>,
) -> Result<Snapshot, ConfigErrors> {
    parse_vetted(file, text, previous, |_| Ok(()))
}

/// `parse`, with `vet` shown the file as read, before it is built: a
/// refusal (a message about the file as a whole) stops it there. A
/// cluster node vets what the published part of its text sets
/// (`publish::parse_published`) on the one parse of that text: a second
/// parse of a 3.4 MB text to look at its top-level keys took as long as
/// the build of its 10,000 pools.
///
/// With a `previous` snapshot, the pools and policies whose text did not
/// change are not parsed again (`parts`); a text that does not read
/// cleanly that way is read whole, so every error keeps its position.
pub fn parse_vetted(
    file: &str,
    text: &str,
    previous: Option<&Snapshot>,
    vet: impl Fn(&model::File) -> Result<(), String>,
) -> Result<Snapshot, ConfigErrors> {
    let source: std::sync::Arc<str> = std::sync::Arc::from(text);
    if let Some(snapshot) = previous
        .filter(|p| !p.parts.is_empty())
        .and_then(|p| reread(file, &source, p, &vet))
    {
        return Ok(snapshot);
    }
    let pos = Positions::new(file, text);
    let read = read::read(&pos, text);
    let mut errors = read.errors;
    let Some(model) = read.model else {
        return Err(sorted(errors));
    };
    vet(&model).map_err(|e| ConfigErrors::message(file, &e))?;
    let parts = if errors.is_empty() {
        parts::remember(&source, &model)
    } else {
        parts::Parts::default()
    };
    match build::build_read(&pos, model, previous, &read.dropped) {
        Ok(mut snapshot) if errors.is_empty() => {
            snapshot.source = source;
            snapshot.parts = std::sync::Arc::new(parts);
            Ok(snapshot)
        }
        Ok(_) => Err(sorted(errors)),
        Err(more) => {
            errors.extend(more);
            Err(sorted(errors))
        }
    }
}

/// `source` read from `previous`'s unchanged parts and built, when that
/// gives a clean snapshot: no error and no warning, which would need the
/// positions that a part read alone lacks (config/parts.rs). None sends the
/// caller to the whole read.
fn reread(
    file: &str,
    source: &std::sync::Arc<str>,
    previous: &Snapshot,
    vet: &impl Fn(&model::File) -> Result<(), String>,
) -> Option<Snapshot> {
    let (model, parts) = parts::read(source, &previous.parts)?;
    vet(&model).ok()?;
    let pos = Positions::new(file, source);
    let mut snapshot =
        build::build_read(&pos, model, Some(previous), &read::Dropped::default()).ok()?;
    if !snapshot.warnings.is_empty() {
        return None;
    }
    snapshot.source = source.clone();
    snapshot.parts = std::sync::Arc::new(parts);
    Some(snapshot)
}

/// In file order (stable: errors at one position keep the order found).
fn sorted(mut errors: Vec<ConfigError>) -> ConfigErrors {
    errors.sort_by_key(|e| (e.line, e.col));
    ConfigErrors(errors)
}

/// Reads and parses a configuration file.
pub fn load(path: &Path, previous: Option<&Snapshot>) -> Result<Snapshot, ConfigErrors> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        // "No such file or directory", without Rust's " (os error 2)".
        let e = e.to_string();
        let e = e.split(" (os error").next().unwrap_or(&e);
        ConfigErrors(vec![ConfigError {
            file: name.clone(),
            line: 0,
            col: 0,
            message: format!("cannot read the configuration file: {e}"),
        }])
    })?;
    parse(&name, &text, previous)
}

/// The `[cluster]` table of a node's file (named `file` in errors),
/// validated; None without one. `base` is the node file's folder (relative
/// paths, the default state folder). A file with a syntax error is
/// reported as `parse` reports it.
pub fn cluster_settings(
    file: &str,
    text: &str,
    base: &Path,
) -> Result<Option<crate::cluster::Settings>, String> {
    #[derive(serde::Deserialize)]
    struct Only {
        cluster: Option<model::ClusterFile>,
    }
    // Read from the text without its pools and policies when it cuts
    // cleanly: `check` and a node's start read [cluster] before the whole
    // text, and a second parse of 3.4 MB (10,000 routes) for it took a
    // third of `check`. Anything that does not parse that way is read
    // whole, so its errors keep their positions.
    let rest = parts::rest_of(text).and_then(|r| toml::from_str::<Only>(&r).ok());
    let only: Only = match rest {
        Some(only) => only,
        None => read_part(file, text, Some("[cluster]")).map_err(|e| e.to_string())?,
    };
    let Some(c) = only.cluster else {
        return Ok(None);
    };
    cluster_table(c, base).map_err(|e| format!("{file}: {e}"))
}

fn cluster_table(
    c: model::ClusterFile,
    base: &Path,
) -> Result<Option<crate::cluster::Settings>, String> {
    if c.endpoints.is_empty() {
        return Err("[cluster]: endpoints is empty; give etcd's client URLs".into());
    }
    if let Some(bad) = c
        .endpoints
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
    {
        return Err(format!(
            "[cluster]: endpoint {bad:?} must be a URL: \"http://host:port\" or \"https://host:port\""
        ));
    }
    let resolve = |p: &str| {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let https = c.endpoints.iter().any(|e| e.starts_with("https://"));
    let tls = match (&c.ca, https) {
        (Some(ca), _) => Some(cluster_tls(
            &resolve(ca),
            c.cert.as_deref().map(&resolve).as_deref(),
            c.key.as_deref().map(&resolve).as_deref(),
        )?),
        (None, true) => return Err(
            "[cluster]: https endpoints need ca = \"FILE\" (the CA that signed etcd's certificate)"
                .into(),
        ),
        (None, false) => None,
    };
    if (c.cert.is_some() || c.key.is_some()) && c.ca.is_none() {
        return Err("[cluster]: cert and key are for TLS: give ca too".into());
    }
    let password = match (&c.password, &c.password_file) {
        (Some(_), Some(_)) => {
            return Err("[cluster]: give password or password_file, not both".into())
        }
        (Some(p), None) => Some(p.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(resolve(f))
                .map_err(|e| format!("[cluster]: password_file {f}: {e}"))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
        (None, None) => None,
    };
    let user = match (c.username.clone(), password) {
        (Some(u), Some(p)) => Some((u, p)),
        (None, None) => None,
        _ => return Err("[cluster]: username and password go together".into()),
    };
    if !c.prefix.starts_with('/') || c.prefix.ends_with('/') || c.prefix.len() < 2 {
        return Err(format!(
            "[cluster]: prefix {:?} must start with / and not end with / (\"/switchyard/prod\")",
            c.prefix
        ));
    }
    let node = match c.node {
        Some(n) => n,
        None => std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
    };
    if node.is_empty() || node.contains('/') {
        return Err(format!(
            "[cluster]: node name {node:?} must be non-empty, without /"
        ));
    }
    let acme_key = match &c.acme_key_file {
        Some(f) => Some(
            crate::cluster::key::read_key(&resolve(f))
                .map_err(|e| format!("[cluster]: acme_key_file {f}: {e}"))?,
        ),
        None => None,
    };
    let ms =
        |m: Option<types::Millis>, d: u64| std::time::Duration::from_millis(m.map_or(d, |m| m.0));
    Ok(Some(crate::cluster::Settings {
        acme_key,
        endpoints: c.endpoints,
        prefix: c.prefix,
        node,
        status_ttl_s: ms(c.status_ttl, 10_000).as_secs().max(2),
        watch_idle: ms(c.watch_idle, 10_000).max(std::time::Duration::from_millis(500)),
        startup_wait: ms(c.startup_wait, 30_000),
        access: std::sync::Arc::new(crate::cluster::etcd::Access::new(tls, user)),
        state_dir: Some(match c.state_dir {
            Some(d) if Path::new(&d).is_absolute() => d.into(),
            Some(d) => base.join(d),
            None => base.to_path_buf(),
        }),
    }))
}

/// The TLS client configuration for etcd: its CA, and this node's
/// certificate when given.
fn cluster_tls(
    ca: &Path,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use crate::tls::ClientFile;
    let client = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err("[cluster]: cert and key go together".into()),
    };
    crate::tls::client_config(ca, client).map_err(|(which, e)| match which {
        ClientFile::Ca => format!("[cluster]: ca {}: {e}", ca.display()),
        ClientFile::Cert => format!("[cluster]: cert {}: {e}", cert.unwrap_or(ca).display()),
        ClientFile::Key => format!("[cluster]: key {}: {e}", key.unwrap_or(ca).display()),
        ClientFile::Pair => format!("[cluster]: client certificate: {e}"),
        ClientFile::Versions => format!("[cluster]: TLS: {e}"),
    })
}
