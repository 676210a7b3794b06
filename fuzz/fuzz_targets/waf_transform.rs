//! Every WAF transformation, alone and chained, must never panic on arbitrary
//! bytes, and must report "changed" exactly when its output differs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard_waf::transform::{apply, apply_chain, Transform};

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    for t in Transform::ALL {
        if apply(t, data, &mut out) {
            assert_ne!(out.as_slice(), data, "{t:?} reported a change");
        } else {
            assert!(out.is_empty());
        }
    }
    // The first bytes pick a chain, as CRS rules chain several.
    if data.len() > 4 {
        let chain: Vec<Transform> = data[..4]
            .iter()
            .map(|b| Transform::ALL[*b as usize % Transform::ALL.len()])
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let _ = apply_chain(&chain, &data[4..], &mut a, &mut b);
    }
});
