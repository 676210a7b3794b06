//! Layer 4 (TCP and UDP) virtual servers: what a connection carries
//! before its first byte is relayed, read without terminating it (the
//! PROXY protocol header of a trusted proxy, a TLS ClientHello's SNI for
//! passthrough routing).

pub mod client_hello;
pub mod proxy_protocol;
pub mod relay;
pub mod tcp;
pub mod udp;
