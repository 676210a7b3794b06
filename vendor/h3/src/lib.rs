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

    /// Switchyard's patch (seventh): a response's HEADERS frame as
    /// `RequestStream::send_response_fields` makes it, and the field
    /// section's size as RFC 9114 4.2.2 counts it.
    pub fn response_frame(status: [u8; 3], fields: &[(Vec<u8>, Vec<u8>)]) -> (Vec<u8>, u64) {
        let pairs = fields.iter().map(|(n, v)| (&n[..], &v[..]));
        let encoded = crate::stream::headers_frame_with(|block| {
            crate::qpack::encode_response_fields(block, &status, pairs)
        });
        match encoded {
            Ok((frame, size)) => (frame.to_vec(), size),
            Err(e) => panic!("encoding a response head failed: {e:?}"),
        }
    }

    /// Switchyard's patch (seventh): the static table's answers for a
    /// field, `find_field`'s and then `find_pair`'s and `find_name`'s.
    pub fn static_lookups(
        name: &[u8],
        value: &[u8],
    ) -> (Option<(usize, bool)>, Option<usize>, Option<usize>) {
        use crate::qpack::static_::StaticTable;
        (
            StaticTable::find_field(name, value),
            StaticTable::find_pair(name, value),
            StaticTable::find_name(name),
        )
    }

    /// What cutting a stream into frames gave, step by step.
    #[derive(Debug, PartialEq)]
    pub enum Piece {
        /// A frame's header (and a HEADERS frame's payload), `Debug` form.
        Frame(String),
        /// A piece of a DATA frame's payload.
        Payload(Vec<u8>),
        /// What ended the stream's decoding, `Debug` form.
        Error(String),
    }

    /// Switchyard's patch (seventh): a stream's bytes, arriving as
    /// `chunks`, cut into frames as `FrameStream` does (a DATA frame's
    /// payload taken as it comes): by `FrameDecoder::decode_bytes` when
    /// `single_chunk_path`, else by h3's own `decode` over a cursor.
    pub fn frames(chunks: &[&[u8]], single_chunk_path: bool) -> Vec<Piece> {
        use crate::proto::frame::{Frame, PayloadLen};
        let mut list = crate::buf::BufList::<bytes::Bytes>::new();
        let mut decoder = crate::frame::FrameDecoder::default();
        let mut payload_left = 0usize;
        let mut steps = Vec::new();
        for chunk in chunks {
            if !chunk.is_empty() {
                list.push(bytes::Bytes::copy_from_slice(chunk));
            }
            loop {
                if payload_left > 0 {
                    match list.take_chunk(payload_left) {
                        Some(piece) => {
                            payload_left -= piece.len();
                            steps.push(Piece::Payload(piece.to_vec()));
                            continue;
                        }
                        None => break,
                    }
                }
                let step = if single_chunk_path {
                    decoder.decode_bytes(&mut list)
                } else {
                    decoder.decode(&mut list)
                };
                match step {
                    Ok(Some(frame)) => {
                        payload_left = match frame {
                            Frame::Data(PayloadLen(len)) => len,
                            Frame::WebTransportStream(_) => usize::MAX,
                            _ => 0,
                        };
                        steps.push(Piece::Frame(format!("{frame:?}")));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        steps.push(Piece::Error(format!("{e:?}")));
                        return steps;
                    }
                }
            }
        }
        steps
    }
}
