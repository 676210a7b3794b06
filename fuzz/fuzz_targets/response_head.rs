//! The response head parser must never panic, for any request method.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::http::head::{parse_response, HeadScanner, Method};

fuzz_target!(|data: &[u8]| {
    let mut sc = HeadScanner::default();
    if let Ok(Some((start, end))) = sc.scan(data, 32768, 32768) {
        let head = bytes::Bytes::copy_from_slice(&data[start..end]);
        for m in [Method::Get, Method::Head] {
            if let Ok(r) = parse_response(head.clone(), 100, m) {
                assert!((100..=599).contains(&r.status));
                assert!(r.head.all("content-length").count() <= 1);
            }
        }
    }
});
