//! HTTP messages: the protocol-neutral head (`message`), HTTP/1.x head
//! parsing (`head`) and serialising (`write_h1`), HTTP/2 heads to and from
//! the neutral form (`h2_message`), the one normalization of the request
//! path every rule reads (`normalize`), body framing and streaming (`body`), and
//! the messages Switchyard writes itself (`responses`).

pub mod body;
pub mod h2_message;
pub mod head;
pub mod message;
pub mod normalize;
pub mod request_fields;
pub mod responses;
pub mod upgrade;
pub mod write_h1;
