//! The proxy: the front door (`accept`: admission, PROXY, TLS, the
//! protocol), client sessions (HTTP/1 `session`, HTTP/2 `h2`), the one
//! exchange every request goes through (`pipeline`, `exchange`, `respond`,
//! with the phase hooks of `hooks` and the stages of `stages`), and the
//! member side (`member_h1`, `member_h2`, `upstream`, `member`).
//!
//! docs/internals.md draws the phases, who owns what, and the life of one
//! request on each pair of protocols.

mod accept;
mod buffered;
mod caching;
mod client_h1;
mod client_h2;
mod compressing;
mod conn;
mod ctx;
pub mod exchange;
pub mod h2;
pub mod h2_stream;
mod head_read;
pub mod hooks;
pub mod idle;
mod inspecting;
mod limiting;
mod lot_epoll;
pub mod member;
mod member_h1;
mod member_h2;
mod normalizing;
mod pipeline;
mod plain;
mod respond;
pub mod route;
mod session;
pub mod stages;
pub mod stream;
mod tunnel;
pub mod upstream;

pub use accept::serve;
pub use conn::{Client, ConnGuard};
pub use ctx::WorkerCtx;
pub use idle::{IdleEnd, IdleWatch, Parked};
pub use session::resume;
pub use stream::{ClientStream, TlsConn};
pub use upstream::IdlePool;
