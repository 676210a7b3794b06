//! HTTP/3 client and server
#![deny(missing_docs, clippy::self_named_module_files)]
#![allow(clippy::derive_partial_eq_without_eq)]
// Switchyard's patch (PATCHED.md): warnings of the unchanged code under a
// newer compiler, which crates.io's copy never shows (dependencies' lints
// are capped); the patched file has none.
#![allow(unused, dead_code, mismatched_lifetime_syntaxes)]

pub mod client;

mod config;
//pub mod error;
pub mod ext;
pub mod quic;

pub mod server;

//pub use error::Error;

mod buf;

mod shared_state;

#[cfg(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes")]
pub use shared_state::{ConnectionState, SharedState};

pub mod error;

#[cfg(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes")]
#[allow(missing_docs)]
pub mod connection;
#[cfg(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes")]
#[allow(missing_docs)]
pub mod frame;
#[cfg(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes")]
#[allow(missing_docs)]
pub mod proto;
#[cfg(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes")]
#[allow(missing_docs)]
pub mod stream;
#[cfg(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes")]
#[allow(missing_docs)]
pub mod webtransport;

#[cfg(not(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes"))]
mod connection;
#[cfg(not(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes"))]
mod frame;
#[cfg(not(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes"))]
mod proto;
#[cfg(not(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes"))]
mod stream;
#[cfg(not(feature = "i-implement-a-third-party-backend-and-opt-into-breaking-changes"))]
mod webtransport;

#[allow(dead_code)]
mod qpack;
#[cfg(test)]
mod tests;
#[cfg(test)]
extern crate self as h3;

/// Switchyard's patch (third): a DATA frame in one buffer, for
/// `server::RequestStream::send_framed_data`.
pub use stream::frame_data;

/// Switchyard's patch (sixth, vendor/h3/PATCHED.md): QPACK's decoding of a
/// request's field section, reachable from outside the crate for the fuzz
/// target `qpack_decode` (fuzz/), which compares the two ways in: h3's
/// own `decode_stateless` and the patched `decode_stateless_with`, whose
/// Huffman memory and slices Switchyard's requests go through.
#[doc(hidden)]
pub mod fuzzing {
    /// A field section's (name, value) pairs, or `None` where it is refused.
    pub type Fields = Option<Vec<(Vec<u8>, Vec<u8>)>>;

    /// Through h3's `decode_stateless`, a `HeaderField` per field.
    pub fn decode_plain(block: &[u8], max_size: u64) -> Fields {
        let mut buf = block;
        let decoded = crate::qpack::decode_stateless(&mut buf, max_size).ok()?;
        Some(
            decoded
                .fields
                .into_iter()
                .map(|f| (f.name.to_vec(), f.value.to_vec()))
                .collect(),
        )
    }

    /// Through `decode_stateless_with` and a connection's Huffman memory.
    pub fn decode_memo(block: &[u8], max_size: u64, memo: &mut switchyard_huffman::Memo) -> Fields {
        let mut out = Vec::new();
        crate::qpack::decode_stateless_with(block, max_size, memo, |n, v| {
            out.push((n.to_vec(), v.to_vec()))
        })
        .ok()?;
        Some(out)
    }
}
