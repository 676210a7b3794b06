//! Switchyard: a software application delivery controller.
//!
//! The request path, in the order data flows:
//! `runtime` (accept, workers) -> `proxy` (session: read, route, balance,
//! forward) -> `http` (framing) -> `balance` (member pick) -> upstream idle
//! pools in `proxy::upstream`; `tls` terminates TLS before the session. `config` builds the immutable snapshot every
//! step reads; `health` and `stats` run beside the data path.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod accesslog;
pub mod acme;
pub mod admin;
pub mod balance;
pub mod base64;
pub mod cache;
pub mod cidr;
pub mod clock;
pub mod cluster;
pub mod compress;
pub mod config;
pub mod ctl;
pub mod health;
pub mod http;
pub mod http2;
pub mod l4;
pub mod log;
pub mod private_file;
pub mod proxy;
pub mod proxy_protocol;
pub mod quickstart;
pub mod random;
pub mod runtime;
pub mod script;
pub mod shield;
pub mod source;
pub mod stats;
pub mod tls;
pub mod turn;
