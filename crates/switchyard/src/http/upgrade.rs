//! The Upgrade mechanism (RFC 9110 7.8) between a client and a member:
//! which protocols a request may offer a member, and whether a member's
//! 101 switched to one of them.
//!
//! A 101 turns the exchange into a byte tunnel that no stage reads again
//! (policies, the WAF, limits): only a switch the client asked for, to a
//! protocol the proxy lets through, may open one. `h2c` never does: RFC 9113
//! 3.1 deprecates the HTTP/1.1 upgrade to HTTP/2, and a member that accepts
//! it would read every later request on the connection as HTTP/2 frames the
//! proxy does not see ("h2c smuggling"). HAProxy and nginx do not forward
//! it either.

use super::message::Fields;

/// Protocols never offered to a member (compared without a version).
const NEVER_FORWARDED: &[&[u8]] = &[b"h2c"];

fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// "name" of "name/version".
fn protocol_name(t: &[u8]) -> &[u8] {
    t.split(|b| *b == b'/').next().unwrap_or(t)
}

fn forwarded(t: &[u8]) -> bool {
    let name = protocol_name(t);
    !NEVER_FORWARDED.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// Leaves in a request's Upgrade only what may reach a member: the
/// protocols of every Upgrade field, minus `h2c`, in one field (none when
/// nothing is left). Returns whether a protocol remains, that is whether
/// the request still asks for an upgrade. The HTTP2-Settings field goes
/// with `h2c` whatever Connection says (it is `message::is_hop_by_hop`).
pub fn offer(fields: &mut Fields) -> bool {
    let mut count = 0;
    let mut dropped = false;
    let mut kept = 0;
    for v in fields.all("upgrade") {
        count += 1;
        for t in tokens(v) {
            if forwarded(t) {
                kept += 1;
            } else {
                dropped = true;
            }
        }
    }
    // Several fields are joined too: the HTTP/1.1 writer sends one.
    if dropped || count > 1 {
        let mut joined = Vec::with_capacity(32);
        for v in fields.all("upgrade") {
            for t in tokens(v).filter(|t| forwarded(t)) {
                if !joined.is_empty() {
                    joined.extend_from_slice(b", ");
                }
                joined.extend_from_slice(t);
            }
        }
        fields.remove(b"upgrade");
        if !joined.is_empty() {
            fields.append(b"upgrade", &joined);
        }
    }
    kept > 0
}

/// Whether a 101's Upgrade (`switched_to`, every field) names only
/// protocols the request offered (`offered`, after `offer`). A 101 without
/// Upgrade is refused too (RFC 9110 15.2.2: the server MUST send one). A
/// bare name answers an offer of that name with a version.
pub fn agreed(offered: &Fields, switched_to: &Fields) -> bool {
    let mut any = false;
    for v in switched_to.all("upgrade") {
        for t in tokens(v) {
            any = true;
            let asked = offered.all("upgrade").flat_map(tokens).any(|o| {
                o.eq_ignore_ascii_case(t)
                    || (!t.contains(&b'/') && protocol_name(o).eq_ignore_ascii_case(t))
            });
            if !asked || !forwarded(t) {
                return false;
            }
        }
    }
    any
}

/// A fresh `Sec-WebSocket-Key` (RFC 6455 4.1: 16 random bytes in
/// base64), for the upgrade an extended CONNECT becomes: a nonce against
/// caches and confused intermediaries, not a secret.
pub fn websocket_key() -> String {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&crate::random::next_u64().to_le_bytes());
    raw[8..].copy_from_slice(&crate::random::next_u64().to_le_bytes());
    crate::base64::encode(&raw)
}

/// The `Sec-WebSocket-Accept` that answers `key` (RFC 6455 4.2.2): the
/// key and the protocol's GUID, SHA-1, base64. Needed where the proxy
/// answers the handshake itself: an h2 member takes a WebSocket by
/// extended CONNECT, without keys (RFC 8441 5).
pub fn websocket_accept(key: &[u8]) -> String {
    const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.trim_ascii());
    ctx.update(GUID);
    crate::base64::encode(ctx.finish().as_ref())
}

/// Whether a request asks to upgrade to WebSocket (and nothing else).
pub fn asks_websocket(fields: &Fields) -> bool {
    let mut offered = fields.all("upgrade").flat_map(tokens);
    matches!((offered.next(), offered.next()), (Some(t), None) if protocol_name(t).eq_ignore_ascii_case(b"websocket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&str, &str)]) -> Fields {
        let mut f = Fields::default();
        for (n, v) in list {
            f.append(n.as_bytes(), v.as_bytes());
        }
        f
    }

    #[test]
    fn websocket_accept_is_rfc_6455s_example() {
        // RFC 6455 1.3.
        assert_eq!(
            websocket_accept(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn only_a_lone_websocket_offer_is_websocket() {
        assert!(asks_websocket(&fields(&[("upgrade", "WebSocket")])));
        assert!(!asks_websocket(&fields(&[("upgrade", "websocket, foo")])));
        assert!(!asks_websocket(&fields(&[("upgrade", "foo")])));
        assert!(!asks_websocket(&fields(&[])));
    }

    fn upgrade_of(f: &Fields) -> Vec<String> {
        f.all("upgrade")
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    #[test]
    fn h2c_is_never_offered() {
        let mut f = fields(&[("upgrade", "h2c"), ("http2-settings", "AAMAAABkAAQAAP__")]);
        assert!(!offer(&mut f), "nothing left to upgrade to");
        assert!(upgrade_of(&f).is_empty());
        let mut f = fields(&[("upgrade", "H2C/1, websocket")]);
        assert!(offer(&mut f));
        assert_eq!(upgrade_of(&f), ["websocket"]);
        let mut f = fields(&[
            ("upgrade", "h2c"),
            ("x", "1"),
            ("upgrade", "websocket, foo/2"),
        ]);
        assert!(offer(&mut f));
        assert_eq!(upgrade_of(&f), ["websocket, foo/2"]);
    }

    #[test]
    fn websocket_keys_are_16_bytes_in_base64_and_differ() {
        let (a, b) = (websocket_key(), websocket_key());
        assert_eq!(a.len(), 24);
        assert!(a.ends_with("=="), "{a}");
        assert!(!a[..22].contains('='), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn a_plain_offer_is_left_as_it_came() {
        let mut f = fields(&[("upgrade", "websocket")]);
        assert!(offer(&mut f));
        assert_eq!(upgrade_of(&f), ["websocket"]);
        let mut f = fields(&[("upgrade", " , ")]);
        assert!(!offer(&mut f), "an empty list asks for nothing");
    }

    #[test]
    fn a_switch_must_be_to_what_was_offered() {
        let asked = fields(&[("upgrade", "websocket, foo/2")]);
        for ok in ["websocket", "WebSocket", "foo/2", "foo"] {
            assert!(agreed(&asked, &fields(&[("upgrade", ok)])), "{ok}");
        }
        for bad in ["h2c", "foo/3", "websocket, h2c", "", "tls/1.3"] {
            assert!(!agreed(&asked, &fields(&[("upgrade", bad)])), "{bad:?}");
        }
        assert!(!agreed(&asked, &Fields::default()), "101 without Upgrade");
        // Even an h2c the client asked for: it never reaches a member, so
        // a member cannot have been asked.
        assert!(!agreed(
            &fields(&[("upgrade", "h2c")]),
            &fields(&[("upgrade", "h2c")])
        ));
    }
}
