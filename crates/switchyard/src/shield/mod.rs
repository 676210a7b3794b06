//! The shield: what keeps unwanted traffic from the proxy (issue 12).
//!
//! - `acl`: ordered L3/L4 rules compiled for a lookup in near-constant
//!   time, evaluated at accept (and, later, in XDP with the same tables).
pub mod acl;
