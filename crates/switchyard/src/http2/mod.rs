//! HTTP/2 (RFC 9113) wire protocol of our own: HPACK, frames and the
//! server connection's state machine, without IO.
//!
//! Why not the h2 crate on the client side: a response head there goes
//! through `http::HeaderMap`, a store of streams behind a lock and a frame
//! buffer of its own before it reaches the connection's output; here it is
//! encoded straight into the output buffer, and streams are entries in one
//! map owned by the connection (HAProxy's mux does the same).

pub mod frame;
pub mod hpack;
pub mod server;
