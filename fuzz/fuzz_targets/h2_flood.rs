//! The HTTP/2 flood watch must never panic on any byte stream in any split,
//! a tripped watch stays tripped, and where the stream is cut does not
//! change what the watch decides.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::cell::Cell;
use std::rc::Rc;
use switchyard::shield::h2flood::FrameWatch;

/// Long enough that the window never rolls over while one input runs, so
/// the outcome depends on the bytes only.
const WINDOW_MS: u64 = 1 << 40;

fuzz_target!(|data: &[u8]| {
    // First byte: where to split; second: the budgets (small, so they trip).
    let split = data
        .first()
        .map(|b| *b as usize % (data.len() + 1))
        .unwrap_or(0);
    let budgets = data.get(1).copied().unwrap_or(0);
    let (max_resets, max_control) = ((budgets & 0x0f) as u32, (budgets >> 4) as u32);

    let tripped = Rc::new(Cell::new(None));
    let mut w = FrameWatch::new(max_resets, max_control, WINDOW_MS, tripped.clone());
    w.scan(&data[..split]);
    let first = tripped.get();
    w.scan(&data[split..]);
    if first.is_some() {
        assert!(tripped.get().is_some(), "a tripped watch must stay tripped");
    }
    assert!(w.tripped.get() == tripped.get());

    // The same bytes in one piece, and one byte at a time, decide the same.
    let whole = Rc::new(Cell::new(None));
    FrameWatch::new(max_resets, max_control, WINDOW_MS, whole.clone()).scan(data);
    assert_eq!(whole.get(), tripped.get());
    let bytewise = Rc::new(Cell::new(None));
    let mut b = FrameWatch::new(max_resets, max_control, WINDOW_MS, bytewise.clone());
    for i in 0..data.len() {
        let was = bytewise.get().is_some();
        b.scan(&data[i..i + 1]);
        assert!(
            !was || bytewise.get().is_some(),
            "a tripped watch must stay tripped"
        );
    }
    assert_eq!(bytewise.get(), tripped.get());

    // A 0 ms window starts afresh at every frame: still no panic, and a
    // trip still sticks.
    let zero = Rc::new(Cell::new(None));
    let mut z = FrameWatch::new(max_resets, max_control, 0, zero.clone());
    z.scan(&data[..split]);
    let first = zero.get();
    z.scan(&data[split..]);
    assert!(first.is_none() || zero.get().is_some());
});
