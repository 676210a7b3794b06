//! Member connections follow demand: a pool that does not set
//! `idle_per_member` keeps every connection a burst had in use, so the
//! next burst of the same size reuses them instead of opening new ones
//! (a fixed 64 made 200 HTTP/2 streams to one member open and close
//! connections all the time). An explicit `idle_per_member` is a cap that
//! still holds.

mod common;
use common::*;

use std::sync::atomic::Ordering;
use std::time::Duration;

/// `n` clients at once, one request each on a connection of its own,
/// all in flight together (the origin answers after a delay): the
/// member connections the burst needed. Bounded: `n` threads, one
/// request each.
fn burst(listen: std::net::SocketAddr, n: usize) {
    let threads: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || get(listen, "/").status))
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("client thread"), 200);
    }
}

/// Member connections opened by a second burst after a first of the same
/// size, and the idle connections between them.
fn second_burst_connects(pool_extra: &str, n: usize) -> (u64, u64) {
    let origin = Origin::start("o");
    origin.set(|b| b.delay = Duration::from_millis(300));
    let listen = free_addr();
    let sy = Switchyard::start(&simple_config(listen, &[&origin], pool_extra), &[listen]);
    burst(listen, n);
    let after_first = origin.connections.load(Ordering::Relaxed);
    assert!(
        after_first as usize >= n / 2,
        "the burst was not concurrent: {after_first} member connections for {n} requests"
    );
    let idle = sy.member_stats("p", origin.addr)["server_connections_idle"]
        .as_u64()
        .unwrap_or(0);
    burst(listen, n);
    (
        origin.connections.load(Ordering::Relaxed) - after_first,
        idle,
    )
}

#[test]
fn a_burst_finds_the_connections_the_last_one_used() {
    let n = 120;
    let (opened, idle) = second_burst_connects("", n);
    assert!(
        idle >= 100,
        "{idle} idle member connections after the burst"
    );
    assert!(
        opened <= 10,
        "the second burst of {n} opened {opened} member connections"
    );
}

#[test]
fn an_explicit_idle_per_member_is_a_cap() {
    let n = 120;
    let (opened, idle) = second_burst_connects("idle_per_member = 16", n);
    assert!(idle <= 16, "{idle} idle member connections, over the cap");
    assert!(
        opened >= 50,
        "the second burst of {n} opened only {opened} member connections"
    );
}
