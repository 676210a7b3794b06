//! The chunked decoder must never panic, and what it re-encodes must decode
//! to the same payload.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use switchyard::http::body::{transfer, Out, Pacer};
use switchyard::http::head::Framing;

fn run(input: &[u8], chunked_out: bool) -> Option<Vec<u8>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok()?;
    rt.block_on(async {
        let mut src: &[u8] = input;
        let mut inbuf = bytes::BytesMut::new();
        let mut dst = Vec::new();
        let mut stage = Vec::new();
        let mut out = Out::new(&mut dst, &mut stage, chunked_out);
        let r = transfer(
            &mut src,
            &mut inbuf,
            Framing::Chunked,
            &mut out,
            &mut Pacer::gap(Duration::from_secs(1)),
        )
        .await;
        out.flush_out().await.ok()?;
        r.ok()?;
        Some(dst)
    })
}

fuzz_target!(|data: &[u8]| {
    if let (Some(plain), Some(rechunked)) = (run(data, false), run(data, true)) {
        let again = run(&rechunked, false).expect("re-encoded body must decode");
        assert_eq!(plain, again);
    }
});
