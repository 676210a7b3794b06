//! A managed certificate on disk and in service: read back at start,
//! written after an order (or when another node of the cluster ordered
//! it), installed for new handshakes.
//!
//! Files in `state_dir`: `account-HASH.json` (the account key and URL,
//! 0600, shared by every certificate of that CA kept there; HASH names
//! the CA's directory URL, so two CAs sharing a state_dir get an account
//! each) and `NAME/cert.pem`,
//! `NAME/key.pem` (NAME the first name, `*` written `_`). Each is written
//! to a temporary file and renamed, so a crash never leaves half a
//! certificate.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{now, Managed, Spec};
use crate::log;
use crate::tls::x509::{self, CertInfo};

pub(super) fn cert_dir(spec: &Spec) -> PathBuf {
    // "*.example.com" is kept in "_.example.com".
    spec.state_dir.join(spec.names[0].replace('*', "_"))
}

/// The account file of the CA at `spec.directory`: `account-` and the
/// first 8 bytes of the URL's SHA-256 in hex (an account belongs to one
/// CA; the URL itself would not make a file name).
pub(super) fn account_path(spec: &Spec) -> PathBuf {
    let sha = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, spec.directory.as_bytes());
    let hex: String = sha.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    spec.state_dir.join(format!("account-{hex}.json"))
}

/// Before the file was keyed by the CA it was `state_dir/account.json`:
/// copied once to `path` when it is the same CA's (the credentials name
/// their directory), so an upgrade keeps its account (a renewal naming
/// the certificate it replaces needs the account that ordered it). Left
/// alone otherwise (a new account is made), and left in place either
/// way: an older Switchyard still finds it.
pub(super) fn adopt_old_account(spec: &Spec, path: &Path) {
    let old = spec.state_dir.join("account.json");
    if path.exists() || !old.exists() {
        return;
    }
    let json = match std::fs::read(&old) {
        Ok(j) => j,
        Err(e) => {
            log::warn(format_args!("acme: {}: {e}", old.display()));
            return;
        }
    };
    let directory = serde_json::from_slice::<serde_json::Value>(&json)
        .ok()
        .and_then(|v| v["directory"].as_str().map(str::to_string));
    if directory.as_deref() != Some(spec.directory.as_str()) {
        // Another CA's (or credentials too old to say which CA's).
        return;
    }
    match crate::private_file::write(path, &json) {
        Ok(()) => log::info(format_args!(
            "acme: the account in {} is kept as {} from now on",
            old.display(),
            path.display()
        )),
        Err(e) => log::warn(format_args!("acme: keeping the account: {e}")),
    }
}

/// The certificate kept in `state_dir`, if there is one that is still
/// valid and covers every configured name.
pub(super) fn load_stored(spec: &Spec) -> Result<Option<(CertifiedKey, CertInfo)>, String> {
    let dir = cert_dir(spec);
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if !cert.exists() {
        return Ok(None);
    }
    let chain = std::fs::read(&cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let key = std::fs::read(&key).map_err(|e| format!("{}: {e}", key.display()))?;
    let (ck, info) = certified(&chain, &key)?;
    if info.not_after <= now() {
        return Ok(None);
    }
    let names = info.names();
    if !spec.names.iter().all(|n| names.contains(n)) {
        return Ok(None);
    }
    Ok(Some((ck, info)))
}

/// Installs a certificate another node ordered (published in etcd) if it
/// covers every name and outlives the one served; it is then kept in
/// `state_dir` too, the last known good for a start with etcd down.
/// Ok(true) when installed.
pub(super) fn adopt(m: &Managed, chain: &[u8], key: &[u8]) -> Result<bool, String> {
    let (ck, info) = certified(chain, key)?;
    let names = info.names();
    if let Some(n) = m.spec.names.iter().find(|n| !names.contains(n)) {
        return Err(format!("it does not cover {n}"));
    }
    if info.not_after <= m.not_after.load(Ordering::Relaxed) || info.not_after <= now() {
        return Ok(false);
    }
    store(&m.spec, chain, key)?;
    m.install(ck, &info);
    log::info(format_args!(
        "acme {}: serving the certificate published in the cluster, valid until {}",
        m.id(),
        crate::tls::format_time(info.not_after)
    ));
    Ok(true)
}

/// Writes the chain and key to `state_dir` (the key first: a certificate
/// on disk always has its key beside it).
pub(super) fn store(spec: &Spec, chain: &[u8], key: &[u8]) -> Result<(), String> {
    let dir = cert_dir(spec);
    crate::private_file::write(&dir.join("key.pem.new"), key)?;
    crate::private_file::write(&dir.join("cert.pem.new"), chain)?;
    for f in ["key.pem", "cert.pem"] {
        std::fs::rename(dir.join(format!("{f}.new")), dir.join(f))
            .map_err(|e| format!("{}: {e}", dir.join(f).display()))?;
    }
    Ok(())
}

/// A PEM chain and key, checked to belong together.
pub(super) fn certified(chain: &[u8], key: &[u8]) -> Result<(CertifiedKey, CertInfo), String> {
    let chain = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate PEM: {e}"))?;
    let leaf = chain.first().ok_or("no certificate in the chain")?;
    let info = x509::parse(leaf).map_err(|e| format!("certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("key PEM: {e}"))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let ck = CertifiedKey::from_der(chain, key, &provider).map_err(|e| e.to_string())?;
    Ok((ck, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(directory: &str, state_dir: &Path) -> Spec {
        Spec {
            names: vec!["shop.example.com".into()],
            directory: directory.into(),
            contact: Vec::new(),
            challenge: super::super::Challenge::Http01,
            key_type: super::super::KeyType::EcdsaP256,
            state_dir: state_dir.to_path_buf(),
            ca_roots: None,
            dns: None,
            profile: None,
            on_demand: None,
            renewal_check: None,
            eab: None,
        }
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "switchyard-acme-store-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    /// Two CAs in one state_dir: two account files; one CA: one, whatever
    /// its certificates.
    #[test]
    fn each_directory_has_its_own_account_file() {
        let d = temp("keyed");
        let le = spec("https://acme-v02.api.letsencrypt.org/directory", &d);
        let zs = spec("https://acme.zerossl.com/v2/DV90", &d);
        assert_ne!(account_path(&le), account_path(&zs));
        assert_eq!(account_path(&le).parent(), Some(d.as_path()));
        let mut other_cert = le.clone();
        other_cert.names = vec!["www.example.com".into()];
        assert_eq!(account_path(&le), account_path(&other_cert));
        let name = account_path(&le)
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .expect("name");
        assert!(name.starts_with("account-") && name.ends_with(".json") && name.len() == 29);
    }

    /// The old `account.json` is taken over by its own CA only.
    #[test]
    fn the_old_account_file_goes_to_its_own_directory_only() {
        let d = temp("old");
        let le = spec("https://acme-v02.api.letsencrypt.org/directory", &d);
        let zs = spec("https://acme.zerossl.com/v2/DV90", &d);
        let old = br#"{"id":"https://le/acct/1","key_pkcs8":"AA","directory":"https://acme-v02.api.letsencrypt.org/directory"}"#;
        std::fs::write(d.join("account.json"), old).expect("write");
        adopt_old_account(&zs, &account_path(&zs));
        assert!(!account_path(&zs).exists(), "another CA's account");
        adopt_old_account(&le, &account_path(&le));
        assert_eq!(std::fs::read(account_path(&le)).expect("copied"), old);
        // Once: a newer account file is not overwritten.
        std::fs::write(account_path(&le), b"{}").expect("write");
        adopt_old_account(&le, &account_path(&le));
        assert_eq!(std::fs::read(account_path(&le)).expect("kept"), b"{}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
