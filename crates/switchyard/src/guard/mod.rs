//! Connection-level defences: what a client may do to a connection before
//! any request on it is routed. Today that is HTTP/2 flood accounting
//! (`h2flood`); access-control lists and per-source limits belong here later.

pub mod h2flood;
