//! A managed certificate on disk and in service: read back at start,
//! written after an order (or when another node of the cluster ordered
//! it), installed for new handshakes.
//!
//! Files in `state_dir`: `account.json` (the account key and URL, 0600,
//! shared by every certificate kept there) and `NAME/cert.pem`,
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
    write_private(&dir.join("key.pem.new"), key)?;
    write_private(&dir.join("cert.pem.new"), chain)?;
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

/// Writes `path` through a temporary file and a rename, readable by the
/// owner only (keys).
pub(super) fn write_private(path: &Path, data: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(data)
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}
