//! Automatic certificates (ACME, RFC 8555) for a single node.
//!
//! A vserver's `[vserver.tls.acme]` names a certificate that Switchyard
//! orders itself. Each one is a `Managed`: the certificate being served
//! (an `ArcSwapOption` the TLS resolver reads on every handshake), its
//! expiry for /metrics, and a background thread (`order::run`) that
//! orders it when there is none and renews it at two thirds of its
//! lifetime. A new certificate replaces the old one for new handshakes
//! only: connections keep the one they started with, as after a reload.
//!
//! `Managed` outlives snapshots: a reload that keeps the same
//! `[vserver.tls.acme]` (same names, CA and state_dir) gets the same one
//! back from `REGISTRY`, so a reload never orders again. The challenge
//! answers are process-wide (`challenge`): any plain-HTTP vserver answers
//! HTTP-01, any TLS listener TLS-ALPN-01.
//!
//! Until the first certificate is issued (or read back from `state_dir`)
//! handshakes for its names are refused (no certificate: the client gets
//! a handshake failure alert), rather than served a self-signed
//! placeholder that clients would reject anyway; the log says why.

pub mod challenge;
pub mod client;
pub mod cluster;
mod dns;
pub mod on_demand;
mod order;
mod resolver;
mod store;

pub use resolver::Resolver;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwapOption;
use rustls::sign::CertifiedKey;

/// What the CA must check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    Http01,
    TlsAlpn01,
    /// A TXT record put up by the operator's hook (`DnsSpec`).
    Dns01,
}

/// DNS-01: how the TXT record is put up and when it is believed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSpec {
    /// Run as `HOOK present|cleanup _acme-challenge.NAME. VALUE`.
    pub hook: PathBuf,
    pub hook_timeout: std::time::Duration,
    /// Asked for the TXT record until each answers it; empty: `wait` is
    /// waited out instead.
    pub resolvers: Vec<std::net::SocketAddr>,
    pub wait: std::time::Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    EcdsaP256,
    Rsa2048,
}

/// One `[vserver.tls.acme]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Lower-case, in the configured order (the first names the files).
    pub names: Vec<String>,
    pub directory: String,
    pub contact: Vec<String>,
    pub challenge: Challenge,
    pub key_type: KeyType,
    pub state_dir: PathBuf,
    pub ca_roots: Option<PathBuf>,
    /// With `Challenge::Dns01` only.
    pub dns: Option<DnsSpec>,
    /// The CA's certificate profile ("shortlived"), if one is asked for.
    pub profile: Option<String>,
    /// Certificates ordered for unknown SNI names this rule admits.
    pub on_demand: Option<on_demand::Rule>,
    /// Longest time between two renewal-information checks (RFC 9773);
    /// None: the CA's Retry-After, clamped to 1 minute .. 1 day.
    pub renewal_check: Option<std::time::Duration>,
    /// External account binding (RFC 8555 section 7.3.4), for a CA that
    /// creates accounts only for its customers (ZeroSSL).
    pub eab: Option<Eab>,
}

/// The CA's key ID and HMAC key binding a new account to the operator's
/// account at the CA.
#[derive(Clone, PartialEq, Eq)]
pub struct Eab {
    pub kid: String,
    /// Decoded (the CA hands it out base64url).
    pub hmac_key: Vec<u8>,
}

// By hand: a Spec may be printed, the HMAC key never.
impl std::fmt::Debug for Eab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eab")
            .field("kid", &self.kid)
            .field("hmac_key", &"(hidden)")
            .finish()
    }
}

/// A certificate Switchyard orders and renews.
pub struct Managed {
    pub spec: Spec,
    /// The certificate served; None until the first one exists.
    pub current: ArcSwapOption<CertifiedKey>,
    /// Validity of `current` (Unix seconds; 0 when there is none).
    pub not_before: AtomicI64,
    pub not_after: AtomicI64,
    /// Orders or renewals that failed (each attempt once).
    pub failures: AtomicU64,
    /// Certificates issued since the process started.
    pub issued: AtomicU64,
    /// The CA's 429 and 5xx answers, and the Retry-After they asked for.
    pub throttle: Arc<client::Throttle>,
    /// Unix seconds of the next renewal (or retry) the task has planned;
    /// 0 when none.
    pub next_renewal: AtomicI64,
    /// Why the last order failed; None after a success.
    pub last_error: Mutex<Option<String>>,
    /// The vserver (or "admin") whose TLS names it, for the admin API:
    /// the latest snapshot's.
    pub owner: Mutex<String>,
    started: AtomicBool,
}

impl Managed {
    /// Whether `sni` is one of the names (case-insensitive).
    pub fn covers(&self, sni: &str) -> bool {
        self.spec.names.iter().any(|n| match n.strip_prefix("*.") {
            // One label, as a wildcard certificate covers it.
            Some(base) => sni
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(base)),
            None => n.eq_ignore_ascii_case(sni),
        })
    }

    /// The name used in logs and metrics: the first one.
    pub fn id(&self) -> &str {
        &self.spec.names[0]
    }

    fn install(&self, ck: CertifiedKey, info: &crate::tls::x509::CertInfo) {
        self.not_before.store(info.not_before, Ordering::Relaxed);
        self.not_after.store(info.not_after, Ordering::Relaxed);
        self.current.store(Some(Arc::new(ck)));
    }
}

/// Weak: a `Managed` lives while a snapshot's resolver (or its own task)
/// holds it. A task whose certificate no snapshot names any more stops
/// when it next wakes (`order::run`).
static REGISTRY: Mutex<Vec<Weak<Managed>>> = Mutex::new(Vec::new());

/// The `Managed` for `spec`: the one an earlier snapshot made, or a new
/// one with the certificate last stored in `state_dir`, if any and still
/// valid. Its task starts with `start`.
pub fn managed(spec: Spec, owner: &str) -> Arc<Managed> {
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    reg.retain(|w| w.strong_count() > 0);
    if let Some(m) = reg
        .iter()
        .filter_map(Weak::upgrade)
        .find(|m| m.spec == spec)
    {
        *m.owner.lock().unwrap_or_else(|e| e.into_inner()) = owner.to_string();
        return m;
    }
    let m = Arc::new(Managed {
        spec,
        current: ArcSwapOption::empty(),
        not_before: AtomicI64::new(0),
        not_after: AtomicI64::new(0),
        failures: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        throttle: Arc::new(client::Throttle::default()),
        next_renewal: AtomicI64::new(0),
        last_error: Mutex::new(None),
        owner: Mutex::new(owner.to_string()),
        started: AtomicBool::new(false),
    });
    match store::load_stored(&m.spec) {
        Ok(Some((ck, info))) => m.install(ck, &info),
        Ok(None) => {}
        Err(e) => crate::log::warn(format_args!(
            "acme {}: stored certificate not used: {e}",
            m.id()
        )),
    }
    reg.push(Arc::downgrade(&m));
    m
}

/// Every managed certificate (for /metrics).
pub fn all() -> Vec<Arc<Managed>> {
    REGISTRY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect()
}

/// Starts the ordering task of every managed certificate that has none
/// yet: called by the running proxy after each snapshot is in place (never
/// by `switchyard check`).
pub fn start() {
    for m in all() {
        if m.started.swap(true, Ordering::Relaxed) {
            continue;
        }
        if m.current.load().is_none() {
            crate::log::info(format_args!(
                "acme {}: no certificate yet: handshakes for {} are refused until the first order completes",
                m.id(),
                m.spec.names.join(", ")
            ));
        }
        let name = format!("acme {}", m.id());
        let m2 = m.clone();
        if let Err(e) = std::thread::Builder::new()
            .name("acme".into())
            .spawn(move || order::run(m2))
        {
            crate::log::error(format_args!("{name}: cannot start its task: {e}"));
        }
    }
}

impl Managed {
    /// What the admin API shows of it (`/api/v1/certificates`, `acme`).
    pub fn status_json(&self) -> serde_json::Value {
        let t = now();
        let next = self.next_renewal.load(Ordering::Relaxed);
        let not_after = self.not_after.load(Ordering::Relaxed);
        let has = self.current.load().is_some();
        serde_json::json!({
            "directory": self.spec.directory,
            "challenge": match self.spec.challenge {
                Challenge::Http01 => "http-01",
                Challenge::TlsAlpn01 => "tls-alpn-01",
                Challenge::Dns01 => "dns-01",
            },
            "issued": has,
            "expires_in_seconds": if has { not_after - t } else { -1 },
            "next_renewal": (next != 0).then(|| crate::tls::format_time(next)),
            "orders_failed": self.failures.load(Ordering::Relaxed),
            "certificates_issued": self.issued.load(Ordering::Relaxed),
            "ca_throttled": self.throttle.answers.load(Ordering::Relaxed),
            "last_error": self.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        })
    }
}

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
