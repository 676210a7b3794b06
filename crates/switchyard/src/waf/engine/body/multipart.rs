//! multipart/form-data, after ModSecurity v3's `multipart.cc`.

use crate::waf::engine::tx::Transaction;

pub(crate) fn multipart(
    tx: &mut Transaction<'_>,
    content_type: &[u8],
    body: &[u8],
) -> Result<(), String> {
    let _ = (tx, content_type, body);
    Ok(())
}
