//! The cluster's key for ACME (`[cluster] acme_key_file`): it seals the
//! certificate keys nodes publish in etcd (`acme::cluster`). Here, not
//! in `acme`, because `Settings` carries it.

/// The operator's cluster key. Its Debug never shows it.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    pub fn from_bytes(b: [u8; 32]) -> ClusterKey {
        ClusterKey(b)
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// Reads a key file: 64 hex digits (`openssl rand -hex 32`).
pub fn read_key(path: &std::path::Path) -> Result<ClusterKey, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let hex = text.trim().as_bytes();
    if hex.len() != 64 {
        return Err(format!(
            "expected 64 hex digits (openssl rand -hex 32), found {} characters",
            hex.len()
        ));
    }
    let mut key = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let (Some(h), Some(l)) = (
            crate::http::normalize::hex_value(pair[0]),
            crate::http::normalize::hex_value(pair[1]),
        ) else {
            return Err("not hex digits".into());
        };
        key[i] = h << 4 | l;
    }
    Ok(ClusterKey(key))
}
