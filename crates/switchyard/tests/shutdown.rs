//! Graceful shutdown: SIGTERM lets requests in flight finish, stops
//! accepting, closes idle connections and exits 0; the grace period bounds
//! how long it waits.

mod common;
use common::*;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn start(grace: &str, delay: Duration) -> (Origin, SocketAddr, Switchyard) {
    let o = Origin::start("a");
    o.set(|b| b.delay = delay);
    let l = free_addr();
    let cfg = simple_config(l, &[&o], "").replace(
        "[global]\n",
        &format!("[global]\ngrace_period = \"{grace}\"\n"),
    );
    let sy = Switchyard::start(&cfg, &[l]);
    (o, l, sy)
}

/// True once the origin has received a request whose line starts with `line`.
fn reached(o: &Origin, line: &str) -> bool {
    o.seen().iter().any(|s| s.request_line().starts_with(line))
}

fn refused(l: SocketAddr) -> bool {
    TcpStream::connect_timeout(&l, Duration::from_millis(200)).is_err()
}

#[test]
fn sigterm_finishes_in_flight_requests_then_exits_0() {
    let (o, l, mut sy) = start("10s", Duration::ZERO);
    // An idle keep-alive client, and a request in flight when SIGTERM comes.
    let mut idle = Client::connect(l);
    assert_eq!(idle.get("/").status, 200);
    o.set(|b| b.delay = Duration::from_secs(1));
    let slow = std::thread::spawn(move || {
        let mut c = Client::connect(l);
        c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.read_response(false);
        (r, c.closed_within(Duration::from_secs(3)))
    });
    // In flight: the member has it (the proxy's in-flight gauge could still
    // show the previous request for an instant, so it is not the signal).
    assert!(
        eventually(Duration::from_secs(2), || reached(&o, "GET /slow ")),
        "{}",
        sy.stats()
    );
    assert_eq!(sy.member_stats("p", o.addr)["inflight"], 1);
    let term = Instant::now();
    sy.signal("TERM");
    // The listener closes: new connections are refused.
    assert!(
        eventually(Duration::from_secs(2), || refused(l)),
        "still accepting after SIGTERM"
    );
    assert!(
        term.elapsed() < Duration::from_millis(900),
        "the listener should close before the slow request ends"
    );
    // The idle connection is closed without waiting for anything.
    assert!(
        idle.closed_within(Duration::from_secs(2)),
        "idle connection kept"
    );
    // The request in flight completes, marked as the last on its connection.
    let (r, closed) = slow.join().expect("slow client");
    let r = r.unwrap_or_else(|| panic!("the request in flight was cut:\n{}", sy.log()));
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "a\n");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed, "connection kept open while draining");
    // Then the process exits 0, well within the grace period.
    assert_eq!(
        sy.wait_exit(Duration::from_secs(8)),
        Some(0),
        "{}",
        sy.log()
    );
    assert!(
        term.elapsed() < Duration::from_secs(5),
        "exit took {:?} with nothing left in flight",
        term.elapsed()
    );
    assert!(sy.log().contains("draining"), "{}", sy.log());
}

#[test]
fn sigterm_with_nothing_in_flight_exits_at_once() {
    let (_o, l, mut sy) = start("10s", Duration::ZERO);
    assert_eq!(get(l, "/").status, 200);
    let term = Instant::now();
    sy.signal("TERM");
    assert_eq!(
        sy.wait_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        sy.log()
    );
    assert!(
        term.elapsed() < Duration::from_secs(3),
        "took {:?}",
        term.elapsed()
    );
    assert!(refused(l));
}

#[test]
fn grace_period_bounds_the_wait() {
    let (o, l, mut sy) = start("500ms", Duration::from_secs(6));
    let slow = std::thread::spawn(move || {
        let mut c = Client::connect(l);
        c.send(b"GET /very-slow HTTP/1.1\r\nHost: t\r\n\r\n");
        c.read_response(false)
    });
    assert!(eventually(Duration::from_secs(2), || reached(
        &o,
        "GET /very-slow "
    )));
    let term = Instant::now();
    sy.signal("TERM");
    assert_eq!(
        sy.wait_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        sy.log()
    );
    let took = term.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(4),
        "exited after {took:?}, grace period 500ms"
    );
    // The request that outlived the grace period is cut, not answered.
    assert!(slow.join().expect("slow client").is_none());
    assert!(sy.log().contains("grace period over"), "{}", sy.log());
}
