//! Load balancing end to end: every algorithm's distribution, consistent
//! hashing on each key kind, persistence, backup members, max_connections
//! and slow start.

mod common;
use common::*;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const FAST_HEALTH: &str = "[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\nrise = 1\nfall = 1\n";

fn start3(pool_extra: &str) -> (Vec<Origin>, SocketAddr, Switchyard) {
    let os: Vec<Origin> = ["a", "b", "c"].iter().map(|n| Origin::start(n)).collect();
    let l = free_addr();
    let refs: Vec<&Origin> = os.iter().collect();
    let sy = Switchyard::start(&simple_config(l, &refs, pool_extra), &[l]);
    (os, l, sy)
}

#[test]
fn round_robin_is_even() {
    let (_os, l, _sy) = start3("algorithm = \"round-robin\"");
    let d = distribution(l, "/", 300);
    for n in ["a", "b", "c"] {
        assert_eq!(d.get(n), Some(&100), "{d:?}");
    }
}

#[test]
fn weighted_round_robin_is_exact() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
         [[pool]]\nname = \"p\"\nalgorithm = \"weighted-round-robin\"\n\
         [[pool.member]]\naddress = \"{}\"\nweight = 3\n[[pool.member]]\naddress = \"{}\"\nweight = 1\n",
        a.addr, b.addr
    );
    let _sy = Switchyard::start(&cfg, &[l]);
    let d = distribution(l, "/", 400);
    assert_eq!(d.get("a"), Some(&300), "{d:?}");
    assert_eq!(d.get("b"), Some(&100), "{d:?}");
    // Smooth: over any 8 consecutive requests b is picked twice.
    let mut c = Client::connect(l);
    let picks: Vec<String> = (0..8).map(|_| origin_of(&c.get("/"))).collect();
    assert_eq!(picks.iter().filter(|p| *p == "b").count(), 2, "{picks:?}");
}

/// `threads` clients each sending `per_thread` requests on keep-alive
/// connections; counts by X-Origin.
fn concurrent(l: SocketAddr, threads: usize, per_thread: usize) -> HashMap<String, usize> {
    let hs: Vec<_> = (0..threads)
        .map(|_| std::thread::spawn(move || distribution(l, "/", per_thread)))
        .collect();
    let mut total = HashMap::new();
    for h in hs {
        for (k, v) in h.join().expect("client thread") {
            *total.entry(k).or_insert(0) += v;
        }
    }
    total
}

#[test]
fn least_connections_avoids_the_slow_member() {
    let (os, l, sy) =
        start3("algorithm = \"least-connections\"\npersistence = { type = \"cookie\" }");
    // Slow enough that CPU contention on a shared machine cannot make the
    // fast members look as busy as it.
    os[0].set(|b| b.delay = Duration::from_millis(1000));
    let d = concurrent(l, 4, 20);
    let slow = d.get("a").copied().unwrap_or(0);
    let total: usize = d.values().sum();
    assert_eq!(total, 80);
    // Round robin would give it 26 or 27 (and the run would take ~27 s).
    assert!(slow <= 16, "slow member got {slow} of 80: {d:?}");
    assert!(d.get("b").copied().unwrap_or(0) >= 25, "{d:?}");
    assert!(d.get("c").copied().unwrap_or(0) >= 25, "{d:?}");
    // Deterministic part: with requests held open on a, none go to it.
    loaded_member_is_avoided(&os, l, &sy);
}

fn cookie_of(r: &Response) -> Option<String> {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.split(';').next().unwrap_or("").trim().to_string())
        .find(|c| c.starts_with("SYSRV="))
}

/// Pins 5 slow requests to member a with its persistence cookie, then
/// checks that 40 fresh requests all go to the other members.
fn loaded_member_is_avoided(os: &[Origin], l: SocketAddr, sy: &Switchyard) {
    let mut cookie = None;
    for _ in 0..30 {
        let r = get(l, "/");
        if origin_of(&r) == "a" {
            cookie = cookie_of(&r);
            break;
        }
    }
    let cookie = cookie.expect("a cookie for member a");
    os[0].set(|b| b.delay = Duration::from_secs(2));
    let hogs: Vec<_> = (0..5)
        .map(|_| {
            let c = cookie.clone();
            std::thread::spawn(move || get_with(l, "/hog", &format!("Cookie: {c}\r\n")))
        })
        .collect();
    let a_addr = os[0].addr;
    assert!(
        eventually(Duration::from_secs(2), || sy.member_stats("p", a_addr)
            ["inflight"]
            == 5),
        "{}",
        sy.stats()
    );
    let d = distribution(l, "/", 40);
    assert_eq!(d.get("a"), None, "loaded member still picked: {d:?}");
    assert_eq!(d.values().sum::<usize>(), 40);
    for h in hogs {
        let r = h.join().expect("hog");
        assert_eq!(r.status, 200);
        assert_eq!(origin_of(&r), "a", "the cookie did not pin the request");
    }
}

#[test]
fn p2c_spreads_and_avoids_a_loaded_member() {
    let (os, l, sy) = start3("algorithm = \"p2c\"\npersistence = { type = \"cookie\" }");
    let d = distribution(l, "/", 300);
    for n in ["a", "b", "c"] {
        let got = d.get(n).copied().unwrap_or(0);
        assert!(got >= 50, "{n} got {got} of 300: {d:?}");
    }
    loaded_member_is_avoided(&os, l, &sy);
}

/// Sends each key `repeat` times; returns key -> member, asserting that a
/// key always lands on the same member.
fn stickiness(
    keys: &[String],
    repeat: usize,
    mut send: impl FnMut(&str) -> Response,
) -> HashMap<String, String> {
    let mut owner = HashMap::new();
    for k in keys {
        for i in 0..repeat {
            let r = send(k);
            assert_eq!(r.status, 200, "{}", r.body_text());
            let o = origin_of(&r);
            let first = owner.entry(k.clone()).or_insert_with(|| o.clone());
            assert_eq!(*first, o, "key {k} moved on request {i}");
        }
    }
    let used: HashSet<&String> = owner.values().collect();
    assert_eq!(
        used.len(),
        3,
        "keys did not spread over every member: {owner:?}"
    );
    owner
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("k{i}")).collect()
}

#[test]
fn consistent_hash_on_uri() {
    let (_os, l, _sy) = start3("algorithm = \"consistent-hash\"\nhash_key = \"uri\"");
    let mut c = Client::connect(l);
    stickiness(&keys(60), 3, |k| c.get(&format!("/obj/{k}")));
    // The query is part of the key.
    let owners: HashSet<String> = (0..60)
        .map(|i| origin_of(&c.get(&format!("/same?v={i}"))))
        .collect();
    assert!(owners.len() > 1, "query ignored: {owners:?}");
}

#[test]
fn consistent_hash_on_header() {
    let (_os, l, _sy) = start3("algorithm = \"consistent-hash\"\nhash_key = \"header:X-User\"");
    let mut c = Client::connect(l);
    stickiness(&keys(60), 3, |k| {
        c.get_with("/", &format!("X-User: {k}\r\n"))
    });
    // No header: still served (spread round robin).
    let d = distribution(l, "/", 30);
    assert_eq!(d.len(), 3, "{d:?}");
}

#[test]
fn consistent_hash_on_cookie() {
    let (_os, l, _sy) = start3("algorithm = \"consistent-hash\"\nhash_key = \"cookie:sid\"");
    let mut c = Client::connect(l);
    // Other cookies around it do not change the key.
    let owner = stickiness(&keys(60), 2, |k| {
        c.get_with("/", &format!("Cookie: a=1; sid={k}\r\n"))
    });
    for k in keys(60).iter().take(10) {
        let r = c.get_with("/", &format!("Cookie: sid={k}; zz={k}x\r\n"));
        assert_eq!(origin_of(&r), owner[k]);
    }
}

#[test]
fn consistent_hash_on_source_ip() {
    let (_os, l, _sy) = start3("algorithm = \"consistent-hash\"\nhash_key = \"source-ip\"");
    let sources: Vec<String> = (2..42).map(|n| format!("127.0.0.{n}")).collect();
    // Each request on a new connection from the given source address.
    stickiness(&sources, 3, |src| {
        let mut c = Client::connect_from(l, src);
        c.get("/")
    });
}

#[test]
fn cookie_persistence_sticks_and_fails_over() {
    let (os, l, sy) = start3(&format!(
        "persistence = {{ type = \"cookie\" }}\n{FAST_HEALTH}"
    ));
    let first = get(l, "/");
    let cookie = cookie_of(&first).unwrap_or_else(|| panic!("no SYSRV cookie: {first:?}"));
    let set = first.header("set-cookie").expect("set-cookie").to_string();
    assert!(set.contains("Path=/"), "{set}");
    let home = origin_of(&first);
    let mut c = Client::connect(l);
    for i in 0..20 {
        let r = c.get_with("/", &format!("Cookie: {cookie}\r\n"));
        assert_eq!(
            origin_of(&r),
            home,
            "request {i} left the persistent member"
        );
        assert_eq!(cookie_of(&r), None, "cookie re-set although it matched");
    }
    // Without the cookie, round robin spreads.
    assert_eq!(distribution(l, "/", 30).len(), 3);
    // The member goes down: the cookie's requests go elsewhere, with a new cookie.
    let o = os.iter().find(|o| o.name == home).expect("home origin");
    o.set(|b| b.health_status = 503);
    let oaddr = o.addr;
    assert!(eventually(Duration::from_secs(3), || sy
        .member_stats("p", oaddr)["state"]
        == "down"));
    let r = c.get_with("/", &format!("Cookie: {cookie}\r\n"));
    assert_eq!(r.status, 200);
    assert_ne!(origin_of(&r), home);
    let new_cookie = cookie_of(&r).expect("a new cookie after failover");
    assert_ne!(new_cookie, cookie);
    for _ in 0..5 {
        let r2 = c.get_with("/", &format!("Cookie: {new_cookie}\r\n"));
        assert_eq!(origin_of(&r2), origin_of(&r));
    }
}

#[test]
fn source_ip_persistence() {
    let (_os, l, _sy) = start3("persistence = { type = \"source-ip\" }");
    let sources: Vec<String> = (50..90).map(|n| format!("127.0.0.{n}")).collect();
    stickiness(&sources, 3, |src| Client::connect_from(l, src).get("/"));
}

#[test]
fn backup_serves_only_when_every_primary_is_down() {
    let os: Vec<Origin> = ["a", "b", "c"].iter().map(|n| Origin::start(n)).collect();
    let l = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
         [[pool]]\nname = \"p\"\n{FAST_HEALTH}\
         [[pool.member]]\naddress = \"{}\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool.member]]\naddress = \"{}\"\nbackup = true\n",
        os[0].addr, os[1].addr, os[2].addr
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let d = distribution(l, "/", 40);
    assert_eq!(d.get("c"), None, "{d:?}");
    assert_eq!(d.get("a"), Some(&20), "{d:?}");
    // One primary down: the other takes everything, still no backup.
    os[0].set(|b| b.health_status = 503);
    let a_addr = os[0].addr;
    assert!(eventually(Duration::from_secs(3), || sy
        .member_stats("p", a_addr)["state"]
        == "down"));
    assert_eq!(distribution(l, "/", 20).get("b"), Some(&20));
    // Every primary down: the backup serves.
    os[1].set(|b| b.health_status = 503);
    assert!(eventually(Duration::from_secs(3), || distribution(
        l, "/", 1
    )
    .contains_key("c")));
    assert_eq!(distribution(l, "/", 20).get("c"), Some(&20));
    assert_eq!(sy.member_stats("p", os[2].addr)["backup"], true);
    // A primary returns: the backup stops.
    os[0].set(|b| b.health_status = 200);
    assert!(eventually(Duration::from_secs(3), || distribution(
        l, "/", 1
    )
    .contains_key("a")));
    assert_eq!(distribution(l, "/", 20).get("a"), Some(&20));
}

#[test]
fn max_connections_is_honoured() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let l2 = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\n\
         [[vserver]]\nname = \"solo\"\nlisten = [\"{l2}\"]\ndefault_pool = \"q\"\n\
         [[pool]]\nname = \"p\"\n\
         [[pool.member]]\naddress = \"{}\"\nmax_connections = 1\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"q\"\n[[pool.member]]\naddress = \"{}\"\nmax_connections = 1\n",
        a.addr, b.addr, a.addr
    );
    let sy = Switchyard::start(&cfg, &[l, l2]);
    a.set(|x| x.delay = Duration::from_millis(1500));
    // Six concurrent requests: member a takes exactly one, b the rest.
    let hs: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || get(l, "/")))
        .collect();
    let mut d: HashMap<String, usize> = HashMap::new();
    for h in hs {
        let r = h.join().expect("client");
        assert_eq!(r.status, 200);
        *d.entry(origin_of(&r)).or_default() += 1;
    }
    assert_eq!(d.get("a"), Some(&1), "{d:?}");
    assert_eq!(d.get("b"), Some(&5), "{d:?}");
    // A pool whose only member is full answers 503 instead of queueing.
    let busy = std::thread::spawn(move || get(l2, "/"));
    let a_addr = a.addr;
    assert!(eventually(Duration::from_secs(1), || sy
        .member_stats("q", a_addr)["inflight"]
        == 1));
    let r = get(l2, "/second");
    assert_eq!(r.status, 503, "a second concurrent request was let through");
    assert!(r.body_text().contains("pool \"q\""), "{}", r.body_text());
    assert_eq!(busy.join().expect("busy").status, 200);
}

#[test]
fn slow_start_ramps_a_recovered_member() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let cfg = simple_config(
        l,
        &[&a, &b],
        &format!("algorithm = \"weighted-round-robin\"\nslow_start = \"2s\"\n{FAST_HEALTH}"),
    );
    let sy = Switchyard::start(&cfg, &[l]);
    // Both up from the start: no ramp, an even split.
    let d = distribution(l, "/", 40);
    assert_eq!(d.get("b"), Some(&20), "{d:?}");
    b.set(|x| x.health_status = 503);
    let b_addr = b.addr;
    assert!(eventually(Duration::from_secs(3), || sy
        .member_stats("p", b_addr)["state"]
        == "down"));
    b.set(|x| x.health_status = 200);
    assert!(eventually(Duration::from_secs(3), || sy
        .member_stats("p", b_addr)["state"]
        == "up"));
    let back = Instant::now();
    let early = distribution(l, "/", 20);
    let spent = back.elapsed();
    let nb = early.get("b").copied().unwrap_or(0);
    // Without slow start b gets 10 of 20; in the first half of the ramp its
    // share is at most a third.
    assert!(
        nb <= 6,
        "recovering member got {nb} of 20 in {spent:?}: {early:?}"
    );
    assert!(nb >= 1, "recovering member got nothing: {early:?}");
    // After the ramp: even again.
    std::thread::sleep(Duration::from_millis(2100).saturating_sub(back.elapsed()));
    let d = distribution(l, "/", 40);
    assert_eq!(d.get("b"), Some(&20), "{d:?}");
}
