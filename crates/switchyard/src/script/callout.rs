//! What a script's call-out (`r:sideband`) asks and gets, and the trait
//! the proxy implements to make it (`proxy/sideband.rs`): the script
//! engine names pools by their index in `Script::pools`, never the
//! configuration's types.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// What the script asks.
pub struct Call {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// For the whole call: member, connect, request and answer.
    pub timeout: Duration,
    /// The most answer body accepted (the script's `max_body`).
    pub max_body: usize,
}

/// What the member answered.
pub struct Answer {
    pub status: u16,
    /// Lower-case names.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// Makes call-outs to the script's pools (by index in `Script::pools`).
/// The error says why in a few words (the script's second return value).
pub trait CallOut {
    fn call(&self, pool: usize, c: Call) -> Pin<Box<dyn Future<Output = Result<Answer, String>>>>;
}
