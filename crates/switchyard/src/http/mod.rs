//! HTTP/1.x: strict head parsing (`head`), body framing and streaming
//! (`body`), and the messages Switchyard writes itself (`responses`).

pub mod body;
pub mod head;
pub mod responses;
