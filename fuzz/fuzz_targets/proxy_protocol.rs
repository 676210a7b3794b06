//! The PROXY protocol parser reads the first bytes of connections from
//! trusted proxies, but trust is configured by address and a
//! misconfiguration exposes it to anyone: it must never panic, never
//! claim more bytes than it was given, and be incremental (a header's
//! prefix is Incomplete, never an error). The encoders' headers must
//! parse back to the addresses they were given.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use switchyard::l4::proxy_protocol::{
    encode_v1, encode_v2, encode_v2_local, parse, Parsed, Proxied, Transport, DEFAULT_MAX_V2_LEN,
    V1_MAX_LEN,
};

fn check_parse(data: &[u8]) {
    match parse(data) {
        Ok(Parsed::Done {
            header_len,
            proxied: _,
        }) => {
            assert!(header_len <= data.len(), "{header_len} > {}", data.len());
            assert!(header_len <= DEFAULT_MAX_V2_LEN.max(V1_MAX_LEN));
            // The header alone is the same header, and one byte less is
            // a prefix of it.
            let whole = parse(data);
            assert_eq!(parse(&data[..header_len]), whole);
            assert_eq!(parse(&data[..header_len - 1]), Ok(Parsed::Incomplete));
        }
        Ok(Parsed::Incomplete) => {
            assert!(data.len() < DEFAULT_MAX_V2_LEN.max(V1_MAX_LEN));
            // A prefix of a prefix is a prefix.
            assert_eq!(parse(&data[..data.len() / 2]), Ok(Parsed::Incomplete));
        }
        Err(e) => {
            // Every error has a message (and Display never panics).
            assert!(!e.to_string().is_empty());
        }
    }
}

/// Two socket addresses and a transport from 38 bytes of input.
fn endpoints(d: &[u8]) -> Option<(SocketAddr, SocketAddr, Transport)> {
    let d: &[u8; 38] = d.get(..38)?.try_into().ok()?;
    let ip = |v6: bool, b: &[u8]| -> IpAddr {
        let o: [u8; 16] = b.try_into().unwrap();
        if v6 {
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            IpAddr::from([o[0], o[1], o[2], o[3]])
        }
    };
    let flags = d[0];
    let src = SocketAddr::new(
        ip(flags & 1 != 0, &d[2..18]),
        u16::from_be_bytes([d[34], d[35]]),
    );
    let dst = SocketAddr::new(
        ip(flags & 2 != 0, &d[18..34]),
        u16::from_be_bytes([d[36], d[37]]),
    );
    let t = if flags & 4 != 0 {
        Transport::Datagram
    } else {
        Transport::Stream
    };
    Some((src, dst, t))
}

/// What a header for `src`/`dst` parses back to: mixed families travel
/// as IPv6 with the IPv4 address mapped.
fn expected(src: SocketAddr, dst: SocketAddr, transport: Transport) -> Proxied {
    let (mut source, mut destination) = (src, dst);
    if src.is_ipv4() != dst.is_ipv4() {
        for a in [&mut source, &mut destination] {
            if let IpAddr::V4(v4) = a.ip() {
                a.set_ip(IpAddr::V6(v4.to_ipv6_mapped()));
            }
        }
    }
    Proxied {
        source,
        destination,
        transport,
    }
}

fn check_round_trip(data: &[u8]) {
    let Some((src, dst, transport)) = endpoints(data) else {
        return;
    };
    let v2 = encode_v2(src, dst, transport);
    let want = Some(expected(src, dst, transport));
    assert_eq!(
        parse(&v2),
        Ok(Parsed::Done {
            header_len: v2.len(),
            proxied: want
        })
    );
    let v1 = encode_v1(src, dst);
    let want = Some(expected(src, dst, Transport::Stream));
    assert!(v1.len() <= V1_MAX_LEN);
    assert_eq!(
        parse(&v1),
        Ok(Parsed::Done {
            header_len: v1.len(),
            proxied: want
        }),
        "{:?}",
        String::from_utf8_lossy(&v1)
    );
    // Followed by the connection's data, the header still ends where it did.
    let mut with_data = v1.clone();
    with_data.extend_from_slice(data);
    assert_eq!(
        parse(&with_data),
        Ok(Parsed::Done {
            header_len: v1.len(),
            proxied: want
        })
    );
}

fuzz_target!(|data: &[u8]| {
    check_parse(data);
    // The same bytes behind each signature, so that the fuzzer explores
    // both grammars without having to find the signatures first.
    let mut v1 = b"PROXY ".to_vec();
    v1.extend_from_slice(data);
    check_parse(&v1);
    let mut v2 = encode_v2_local()[..12].to_vec();
    v2.extend_from_slice(data);
    check_parse(&v2);
    check_round_trip(data);
});
