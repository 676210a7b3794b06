//! The proxy, named by side, protocol and layer:
//!
//! - the front door (`accept`: admission, PROXY, TLS, the protocol);
//! - the client side: a connection (`client_h1_conn`, `client_h2_conn`
//!   with its streams' shared state in `client_h2_stream`) and the client
//!   of one exchange (`client_h1_exchange`, `client_h2_exchange`);
//! - the one exchange every request goes through (`pipeline`, `exchange`,
//!   `respond`, with the phase hooks of `hooks` and the stages of
//!   `stages`);
//! - the member side (`member_h1`, `member_h2`, `upstream`, `member`);
//! - QUIC's steering of datagrams to the worker that owns their
//!   connection (`quic_steer`), its socket (`quic_socket`) and quinn's
//!   tasks on the worker (`quic_runtime`).
//!
//! `http2/` is the HTTP/2 codec (frames, HPACK, the server state machine,
//! no IO); `http/h2_message` maps its header blocks to the neutral
//! message; the `h2` crate is the member side's HTTP/2 client.
//!
//! docs/internals.md draws the phases, who owns what, and the life of one
//! request on each pair of protocols.

mod accept;
mod body_size;
mod buffered;
mod caching;
mod client_body;
mod client_h1_conn;
mod client_h1_exchange;
pub mod client_h2_conn;
mod client_h2_exchange;
pub mod client_h2_stream;
mod client_h3_body;
mod client_h3_conn;
mod client_h3_exchange;
mod compressing;
mod conn;
mod conn_scripting;
mod ctx;
pub mod exchange;
mod head_read;
pub mod hooks;
pub mod idle;
mod inspecting;
mod limiting;
mod lot_epoll;
pub mod member;
mod member_h1;
mod member_h2;
mod member_h2_tunnel;
mod mirroring;
mod normalizing;
mod pipeline;
mod plain;
mod quic_hello;
mod quic_runtime;
mod quic_socket;
pub mod quic_steer;
mod resend;
mod respond;
pub mod route;
mod scripting;
mod sideband;
pub mod stages;
pub mod stream;
mod tunnel;
pub mod upstream;

pub use accept::{serve, serve_quic};
pub use client_h1_conn::resume;
pub use conn::{Client, ConnGuard};
pub use ctx::WorkerCtx;
pub use idle::{IdleEnd, IdleWatch, Parked};
pub use stream::{ClientStream, TlsConn};
pub use upstream::IdlePool;
