//! The request head scanner and parser must never panic, and whatever they
//! accept must be self-consistent.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::http::head::{parse_request, Framing, HeadScanner};

fuzz_target!(|data: &[u8]| {
    // Feed in two pieces to exercise the incremental scanner.
    let split = data
        .first()
        .map(|b| *b as usize % (data.len() + 1))
        .unwrap_or(0);
    let mut sc = HeadScanner::default();
    let first = sc.scan(&data[..split], 8192, 32768);
    let r = match first {
        Ok(Some(r)) => Ok(Some(r)),
        Ok(None) => sc.scan(data, 8192, 32768),
        Err(e) => Err(e),
    };
    if let Ok(Some((start, end))) = r {
        assert!(start <= end && end <= data.len());
        let head = bytes::Bytes::copy_from_slice(&data[start..end]);
        if let Ok(req) = parse_request(head, 100) {
            // Accepted framing is never ambiguous.
            let cl = req.head.all("content-length").count();
            let te = req.head.all("transfer-encoding").count();
            assert!(cl <= 1);
            assert!(!(cl > 0 && te > 0));
            if req.head.framing == Framing::Chunked {
                assert!(te > 0);
            }
            let _ = (req.target(), req.host_name(), req.query());
        }
    }
});
