//! The ClientHello reader sees the first bytes of every connection to a
//! TLS passthrough virtual server, from anyone: it must never panic, keep
//! the buffer it asks for under MAX_BUFFERED, give only names that are
//! safe to route and log, and answer the same however the handshake
//! message is cut into records.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::l4::client_hello::{parse, ClientHello, HelloError, Parsed, MAX_BUFFERED};

fn check_hello(h: &ClientHello) {
    if let Some(name) = &h.server_name {
        assert!(!name.is_empty() && name.len() <= 255, "{name:?}");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
            "{name:?}"
        );
        assert!(!name.starts_with('.') && !name.ends_with('.') && !name.contains(".."));
    }
    assert!(h.alpn.iter().all(|p| !p.is_empty() && p.len() < 256));
}

fn check(data: &[u8]) -> Result<Parsed, HelloError> {
    let result = parse(data);
    match &result {
        Ok(Parsed::Done(h)) => check_hello(h),
        Ok(Parsed::Incomplete) => assert!(data.len() < MAX_BUFFERED),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    // A prefix of what is not an error is not an error either.
    if result.is_ok() {
        assert!(parse(&data[..data.len() / 2]).is_ok());
    }
    result
}

/// `message` framed in handshake records of at most `size` bytes.
fn records(message: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in message.chunks(size) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // Any bytes: a verdict, never a panic (the result matters below).
    let _ = check(data);
    // The input as a handshake message (first byte: the record size),
    // in one record (when it fits) and in small ones: same answer.
    let Some((&size, message)) = data.split_first() else {
        return;
    };
    if message.is_empty() || message.len() > 16 * 1024 {
        return;
    }
    let one = check(&records(message, message.len()));
    let small = records(message, usize::from(size.max(1)));
    if small.len() < MAX_BUFFERED {
        let many = check(&small);
        match (&one, &many) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            // Cut into small records the declared message needs more
            // bytes (a header per record): it may pass the buffer bound
            // while one record of it is still merely incomplete.
            (Ok(Parsed::Incomplete), Err(HelloError::TooLarge { .. })) => {}
            (a, b) => assert_eq!(a.is_err(), b.is_err(), "{a:?} {b:?}"),
        }
    }
});
