//! One managed certificate's task: order it when there is none, renew it
//! when the CA's renewal information says (RFC 9773; else at two thirds
//! of its lifetime, jittered), retry failures with a jittered backoff
//! that honours the CA's Retry-After; in a cluster, order only under the
//! cluster's lock (`cluster`). Runs on a thread of its own with a small
//! tokio runtime, never on a worker: an order waits seconds on the CA
//! and must not touch requests.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::store::{adopt, certified, store};
use super::{challenge, now, Challenge, KeyType, Managed};
use crate::log;
use crate::tls::x509::{self, CertInfo};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    ExternalAccountKey, Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};

/// First retry after a failure; doubled up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How often a node whose certificate another node is ordering looks
/// again (the watch installs the result sooner).
const LOCK_POLL: Duration = Duration::from_secs(2);
/// In a cluster, the wait between publishing HTTP-01/TLS-ALPN-01 answers
/// and telling the CA to check (any node may get the check).
const ANSWER_SETTLE: Duration = Duration::from_millis(500);
/// A CA's Retry-After is honoured up to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);
/// The CA's Retry-After for renewal information, clamped to this range
/// (RFC 9773 section 4.3.2 leaves the bounds to the client; these are
/// Let's Encrypt's suggestion).
const ARI_MIN_CHECK: Duration = Duration::from_secs(60);
const ARI_MAX_CHECK: Duration = Duration::from_secs(86_400);
/// Asking again after renewal information could not be had.
const ARI_RETRY_CHECK: Duration = Duration::from_secs(3600);

/// Seconds from now until the renewal of a certificate valid from
/// `not_before` to `not_after`: two thirds of its lifetime, give or take
/// a random 1/30 of it (so certificates issued together do not all go
/// back to the CA in the same second).
fn renew_in(not_before: i64, not_after: i64, now: i64, random: u64) -> i64 {
    let life = (not_after - not_before).max(0);
    let jitter_span = (life / 15).max(1);
    let jitter = (random % jitter_span as u64) as i64 - jitter_span / 2;
    (not_before + life * 2 / 3 + jitter - now).max(0)
}

/// What the CA last said about when to renew (RFC 9773): its window,
/// and the point chosen in it (kept while the window stays the same, so
/// that asking again does not pull the renewal ever earlier).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct AriPlan {
    start: i64,
    end: i64,
    at: i64,
}

/// When to renew, from the CA's window when it gives one (a random point
/// in it, as RFC 9773 section 4.2 asks), else at two thirds of the
/// lifetime; and when to ask the CA again.
async fn schedule(
    m: &Managed,
    cluster: Option<&super::cluster::Shared>,
    plan: &mut Option<AriPlan>,
) -> (i64, i64) {
    let nb = m.not_before.load(Ordering::Relaxed);
    let na = m.not_after.load(Ordering::Relaxed);
    let t = now();
    let fallback = t + renew_in(nb, na, t, crate::random::next_u64());
    let check = |suggested: Option<Duration>| {
        let d = match (m.spec.renewal_check, suggested) {
            (Some(d), _) => d,
            (None, Some(d)) => d.clamp(ARI_MIN_CHECK, ARI_MAX_CHECK),
            (None, None) => ARI_RETRY_CHECK,
        };
        t + d.as_secs().max(1) as i64
    };
    match renewal_info(m, cluster).await {
        Ok(Some((start, end, retry_after))) => {
            let p = match *plan {
                Some(p) if p.start == start && p.end == end => p,
                _ => {
                    let span = (end - start).max(0) as u64;
                    let p = AriPlan {
                        start,
                        end,
                        at: start + (crate::random::next_u64() % (span + 1)) as i64,
                    };
                    log::info(format_args!(
                        "acme {}: the CA's renewal window is {} to {}; renewal planned at {}",
                        m.id(),
                        crate::tls::format_time(start),
                        crate::tls::format_time(end),
                        crate::tls::format_time(p.at)
                    ));
                    p
                }
            };
            *plan = Some(p);
            (p.at, check(Some(retry_after)))
        }
        // The CA offers no renewal information.
        Ok(None) => (fallback, check(Some(ARI_MAX_CHECK))),
        Err(e) => {
            log::warn(format_args!(
                "acme {}: renewal information not available ({e}); {}",
                m.id(),
                match plan {
                    Some(_) => "the last window the CA gave holds",
                    None => "renewal at two thirds of the lifetime",
                }
            ));
            match plan {
                Some(p) => (p.at, check(None)),
                None => (fallback, check(None)),
            }
        }
    }
}

/// The CA's renewal window for the current certificate (Unix seconds)
/// and when to ask again; None when the CA does not offer ARI.
async fn renewal_info(
    m: &Managed,
    cluster: Option<&super::cluster::Shared>,
) -> Result<Option<(i64, i64, Duration)>, String> {
    let Some(id) = current_id(m) else {
        return Ok(None);
    };
    let account = account(m, cluster, false).await?;
    match account.renewal_info(&id).await {
        Ok((info, retry_after)) => Ok(Some((
            info.suggested_window.start.unix_timestamp(),
            info.suggested_window.end.unix_timestamp(),
            retry_after,
        ))),
        Err(instant_acme::Error::Unsupported(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The current certificate's ARI identifier (authority key ID and serial).
fn current_id(m: &Managed) -> Option<CertificateIdentifier<'static>> {
    let ck = m.current.load_full()?;
    let info = x509::parse(ck.cert.first()?).ok()?;
    let aki = info.authority_key_id?;
    Some(
        CertificateIdentifier::new(
            rustls_pki_types::Der::from_slice(&aki),
            rustls_pki_types::Der::from_slice(&info.serial),
        )
        .into_owned(),
    )
}

pub(super) fn run(m: Arc<Managed>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log::error(format_args!(
                "acme {}: cannot start its runtime: {e}",
                m.id()
            ));
            return;
        }
    };
    let cluster = super::cluster::shared();
    if cluster.is_some() {
        super::cluster::watch();
    } else if super::cluster::uncoordinated() {
        log::warn(format_args!(
            "acme {}: this cluster has no [cluster] acme_key_file: each node orders this certificate on its own",
            m.id()
        ));
    }
    rt.block_on(async move {
        let mut backoff = FIRST_BACKOFF;
        let mut plan = None;
        loop {
            // Another node may have renewed it (its watch installs it too;
            // this covers a start and a broken watch).
            if let Some(c) = &cluster {
                if let Ok(Some((chain, key))) = c.fetch(&m) {
                    if let Ok(true) = adopt(&m, &chain, &key) {
                        plan = None;
                    }
                }
            }
            if m.current.load().is_some() {
                let serving = m.not_after.load(Ordering::Relaxed);
                let (renew_at, check_at) = schedule(&m, cluster.as_ref(), &mut plan).await;
                m.next_renewal.store(renew_at, Ordering::Relaxed);
                let wake = renew_at.min(check_at) - now();
                if wake > 0 {
                    tokio::time::sleep(Duration::from_secs(wake as u64)).await;
                }
                if Arc::strong_count(&m) == 1 {
                    break;
                }
                if now() < renew_at || m.not_after.load(Ordering::Relaxed) != serving {
                    continue; // time to ask the CA again, or renewed meanwhile
                }
            } else if Arc::strong_count(&m) == 1 {
                break;
            }
            // In a cluster, one node orders: the one holding the lock.
            let lock = match &cluster {
                None => None,
                Some(c) => match c.try_lock(&m) {
                    Ok(Some(l)) => Some(l),
                    Ok(None) => {
                        log::debug(format_args!(
                            "acme {}: node {} is ordering it",
                            m.id(),
                            c.holder(&m).unwrap_or_default()
                        ));
                        tokio::time::sleep(LOCK_POLL).await;
                        continue;
                    }
                    Err(e) => {
                        // No lock, no order: ordering without it could
                        // mean one order per node.
                        m.failures.fetch_add(1, Ordering::Relaxed);
                        log::warn(format_args!(
                            "acme {}: cannot take the cluster's order lock ({e}); next try in {}s",
                            m.id(),
                            backoff.as_secs()
                        ));
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                },
            };
            // Under the lock: the node that held it before may just have
            // published a certificate.
            if let Some(c) = &cluster {
                if let Ok(Some((chain, key))) = c.fetch(&m) {
                    if let Ok(true) = adopt(&m, &chain, &key) {
                        plan = None;
                        continue;
                    }
                }
            }
            let result = issue(&m, cluster.as_ref().zip(lock.as_ref())).await;
            drop(lock);
            match result {
                Ok(info) => {
                    backoff = FIRST_BACKOFF;
                    *m.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    plan = None;
                    m.issued.fetch_add(1, Ordering::Relaxed);
                    log::info(format_args!(
                        "acme {}: certificate issued for {}, valid until {}; serving it to new handshakes",
                        m.id(),
                        m.spec.names.join(", "),
                        crate::tls::format_time(info.not_after)
                    ));
                }
                Err(e) => {
                    m.failures.fetch_add(1, Ordering::Relaxed);
                    *m.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                    let still = if m.current.load().is_some() {
                        "the current certificate keeps serving"
                    } else {
                        "handshakes for its names are still refused"
                    };
                    // Jittered by up to a quarter, so that nodes or
                    // certificates that failed together do not retry
                    // together; never sooner than the CA asked.
                    let mut wait = backoff
                        + Duration::from_millis(
                            crate::random::next_u64() % (backoff.as_millis() as u64 / 4 + 1),
                        );
                    let mut asked = String::new();
                    if let Some(ra) = m.throttle.take_retry_after() {
                        let ra = ra.min(MAX_RETRY_AFTER);
                        if ra > wait {
                            wait = ra;
                        }
                        asked = format!(" (the CA asked for {}s with Retry-After)", ra.as_secs());
                    }
                    m.next_renewal.store(now() + wait.as_secs() as i64, Ordering::Relaxed);
                    log::warn(format_args!(
                        "acme {}: order failed: {e}; {still}; next try in {}s{asked}",
                        m.id(),
                        wait.as_secs()
                    ));
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        // Only this task holds it: no snapshot serves it any more.
        log::info(format_args!(
            "acme {}: no longer configured; its task stops",
            m.id()
        ));
    });
}

/// The account: in a cluster the one published in etcd (kept on disk
/// too), else the one on disk, else a new one (then published, when
/// `publish`: only the node holding the order lock makes it).
async fn account(
    m: &Managed,
    cluster: Option<&super::cluster::Shared>,
    publish: bool,
) -> Result<Account, String> {
    let spec = &m.spec;
    let http = super::client::Client::new(spec.ca_roots.as_deref(), m.throttle.clone())
        .map_err(|e| format!("ca_roots: {e}"))?;
    let path = super::store::account_path(spec);
    let mut shared = false;
    if let Some(c) = cluster {
        match c.fetch_account(&spec.directory) {
            Ok(Some(json)) => {
                shared = true;
                if std::fs::read(&path).ok().as_deref() != Some(&json[..]) {
                    crate::private_file::write(&path, &json)?;
                }
            }
            Ok(None) => {}
            Err(e) => log::warn(format_args!("acme {}: the cluster's account: {e}", m.id())),
        }
    }
    if !shared {
        super::store::adopt_old_account(spec, &path);
    }
    let (account, json) = if let Ok(json) = std::fs::read(&path) {
        let creds: AccountCredentials =
            serde_json::from_slice(&json).map_err(|e| format!("{}: {e}", path.display()))?;
        let account = Account::builder_with_http(Box::new(http))
            .from_credentials(creds)
            .await
            .map_err(|e| format!("account from {}: {e}", path.display()))?;
        (account, json)
    } else {
        let contact: Vec<&str> = spec.contact.iter().map(|c| c.as_str()).collect();
        let eab = spec
            .eab
            .as_ref()
            .map(|e| ExternalAccountKey::new(e.kid.clone(), &e.hmac_key));
        // Which binding was sent, for the operator reading a refusal.
        let bound = match &spec.eab {
            Some(e) => format!(" with external account binding (eab_kid {:?})", e.kid),
            None => String::new(),
        };
        let (account, creds) = Account::builder_with_http(Box::new(http))
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                spec.directory.clone(),
                eab.as_ref(),
            )
            .await
            .map_err(|e| format!("new account at {}{bound}: {e}", spec.directory))?;
        let json = serde_json::to_vec(&creds).map_err(|e| e.to_string())?;
        crate::private_file::write(&path, &json)?;
        log::info(format_args!(
            "acme: account {} created{bound}, key kept in {}",
            account.id(),
            path.display()
        ));
        (account, json)
    };
    if let Some(c) = cluster.filter(|_| publish && !shared) {
        c.publish_account(&spec.directory, &json)?;
    }
    Ok(account)
}

/// Removes the challenge answers an order put up, however it ends.
struct Answers<'a> {
    tokens: Vec<String>,
    names: Vec<String>,
    /// DNS-01 records put up: (domain, value), taken down by the hook.
    records: Vec<(String, String)>,
    m: &'a Managed,
}

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        for t in &self.tokens {
            challenge::set_http01(t, None);
        }
        for n in &self.names {
            challenge::set_alpn01(n, None);
        }
        if let Some(dns) = &self.m.spec.dns {
            for (domain, value) in &self.records {
                if let Err(e) = super::dns::hook(dns, "cleanup", domain, value) {
                    log::warn(format_args!("acme {}: {e}", self.m.id()));
                }
            }
        }
    }
}

async fn issue(
    m: &Managed,
    cluster: Option<(&super::cluster::Shared, &super::cluster::Lock)>,
) -> Result<CertInfo, String> {
    let spec = &m.spec;
    let account = account(m, cluster.map(|c| c.0), true).await?;
    let ids: Vec<Identifier> = spec
        .names
        .iter()
        .map(|n| Identifier::Dns(n.clone()))
        .collect();
    let new = || match &spec.profile {
        Some(p) => NewOrder::new(&ids).profile(p),
        None => NewOrder::new(&ids),
    };
    // A renewal names the certificate it replaces (RFC 9773 section 5),
    // when the CA has renewal information: the CA may then let it through
    // its rate limits.
    let replaces = current_id(m);
    let mut order = match replaces {
        Some(id) => match account.new_order(&new().replaces(id)).await {
            Ok(o) => o,
            Err(instant_acme::Error::Unsupported(_)) => account
                .new_order(&new())
                .await
                .map_err(|e| format!("new order: {e}"))?,
            Err(instant_acme::Error::Api(p)) if !matches!(p.status, Some(429) | Some(500..)) => {
                log::info(format_args!(
                    "acme {}: the CA refused the renewal as a replacement ({p}); ordering anew",
                    m.id()
                ));
                account
                    .new_order(&new())
                    .await
                    .map_err(|e| format!("new order: {e}"))?
            }
            Err(e) => return Err(format!("new order: {e}")),
        },
        None => account
            .new_order(&new())
            .await
            .map_err(|e| format!("new order: {e}"))?,
    };
    let mut answers = Answers {
        tokens: Vec::new(),
        names: Vec::new(),
        records: Vec::new(),
        m,
    };
    let (kind, kind_name) = match spec.challenge {
        Challenge::Http01 => (ChallengeType::Http01, "http-01"),
        Challenge::TlsAlpn01 => (ChallengeType::TlsAlpn01, "tls-alpn-01"),
        Challenge::Dns01 => (ChallengeType::Dns01, "dns-01"),
    };
    // First every answer is put up, then (DNS-01) believed, then the CA
    // told to look: the CA may check a name once only.
    {
        let mut authzs = order.authorizations();
        while let Some(a) = authzs.next().await {
            let mut a = a.map_err(|e| format!("authorization: {e}"))?;
            match a.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                s => return Err(format!("authorization is {s:?}")),
            }
            let name = a.identifier().to_string();
            let ch = a
                .challenge(kind.clone())
                .ok_or_else(|| format!("the CA offers no {kind_name} challenge for {name}"))?;
            let key_auth = ch.key_authorization();
            match spec.challenge {
                Challenge::Http01 => {
                    challenge::set_http01(&ch.token, Some(key_auth.as_str()));
                    answers.tokens.push(ch.token.clone());
                    if let Some((shared, lock)) = cluster {
                        shared.put_answer(lock, "http-01", &ch.token, key_auth.as_str())?;
                    }
                }
                Challenge::TlsAlpn01 => {
                    let digest = key_auth.digest();
                    let cert = challenge::alpn_cert(&name, digest.as_ref())?;
                    challenge::set_alpn01(&name, Some(Arc::new(cert)));
                    answers.names.push(name.clone());
                    if let Some((shared, lock)) = cluster {
                        let hex: String =
                            digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
                        shared.put_answer(lock, "tls-alpn-01", &name, &hex)?;
                    }
                }
                Challenge::Dns01 => {
                    let dns = spec.dns.as_ref().ok_or("dns-01 without a dns_hook")?;
                    let value = key_auth.dns_value();
                    super::dns::hook(dns, "present", &name, &value)?;
                    answers.records.push((name.clone(), value));
                }
            }
            log::info(format_args!(
                "acme {}: answering the {kind_name} challenge for {name}",
                m.id()
            ));
        }
    }
    if let Some(dns) = spec.dns.as_ref().filter(|_| !answers.records.is_empty()) {
        let records: Vec<(String, String)> = answers
            .records
            .iter()
            .map(|(d, v)| (super::dns::record_name(d), v.clone()))
            .collect();
        super::dns::propagation(dns, &records)?;
    }
    if cluster.is_some() && answers.records.is_empty() {
        // The other nodes' watches apply the answers within milliseconds
        // of the put; the CA's check comes only after set_ready below.
        // This margin covers a loaded node.
        tokio::time::sleep(ANSWER_SETTLE).await;
    }
    let mut authzs = order.authorizations();
    while let Some(a) = authzs.next().await {
        let mut a = a.map_err(|e| format!("authorization: {e}"))?;
        if !matches!(a.status, AuthorizationStatus::Pending) {
            continue;
        }
        let name = a.identifier().to_string();
        let mut ch = a
            .challenge(kind.clone())
            .ok_or_else(|| format!("the CA offers no {kind_name} challenge for {name}"))?;
        ch.set_ready()
            .await
            .map_err(|e| format!("challenge for {name}: {e}"))?;
    }
    let retry = RetryPolicy::new().timeout(Duration::from_secs(120));
    let status = order
        .poll_ready(&retry)
        .await
        .map_err(|e| format!("waiting for validation: {e}"))?;
    if status != OrderStatus::Ready {
        return Err(format!("order is {status:?} after validation"));
    }
    drop(answers);

    let key = match spec.key_type {
        KeyType::EcdsaP256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
        KeyType::Rsa2048 => rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256),
    }
    .map_err(|e| format!("new key: {e}"))?;
    let mut params =
        rcgen::CertificateParams::new(spec.names.clone()).map_err(|e| e.to_string())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|e| format!("CSR: {e}"))?;
    order
        .finalize_csr(csr.der())
        .await
        .map_err(|e| format!("finalize: {e}"))?;
    let chain = order
        .poll_certificate(&retry)
        .await
        .map_err(|e| format!("certificate: {e}"))?;
    let key_pem = key.serialize_pem();
    let (ck, info) = certified(chain.as_bytes(), key_pem.as_bytes())?;
    store(spec, chain.as_bytes(), key_pem.as_bytes())?;
    m.install(ck, &info);
    if let Some((shared, _)) = cluster {
        // The other nodes serve it within a second of this put (their
        // watch). Should it fail, they order anew once the lock is free:
        // a wasted order, never a missing certificate.
        if let Err(e) = shared.publish(m, &chain, &key_pem, info.not_after) {
            log::warn(format_args!("acme {}: {e}", m.id()));
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_at_two_thirds_with_jitter() {
        // 90 days from 0: two thirds is day 60, give or take 3 days / 2.
        let life = 90 * 86_400;
        for r in [0, 1, 12345, u64::MAX] {
            let t = renew_in(0, life, 0, r);
            assert!((t - 60 * 86_400).abs() <= life / 30, "{t}");
        }
        // Past the point: now.
        assert_eq!(renew_in(0, 90, 80, 0), 0);
    }
}
