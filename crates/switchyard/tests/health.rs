//! Health end to end: active HTTP and TCP checks, passive ejection on 5xx
//! and on connect failures, and the answer when no member is up.

mod common;
use common::*;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

const HTTP_CHECK: &str = "[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\nrise = 2\nfall = 2\n";

/// One vserver on `listen` whose default pool `pool` has `members`.
fn pool_config(listen: SocketAddr, pool: &str, members: &[SocketAddr], extra: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"{pool}\"\n\
         [[pool]]\nname = \"{pool}\"\n{extra}\n"
    );
    for m in members {
        s.push_str(&format!("[[pool.member]]\naddress = \"{m}\"\n"));
    }
    s
}

fn state(sy: &Switchyard, pool: &str, m: SocketAddr) -> String {
    sy.member_stats(pool, m)["state"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn counter(sy: &Switchyard, pool: &str, m: SocketAddr, name: &str) -> u64 {
    sy.member_stats(pool, m)[name].as_u64().unwrap_or(0)
}

#[test]
fn http_check_takes_a_member_out_and_back() {
    let os: Vec<Origin> = ["a", "b", "c"].iter().map(|n| Origin::start(n)).collect();
    let l = free_addr();
    let addrs: Vec<SocketAddr> = os.iter().map(|o| o.addr).collect();
    let sy = Switchyard::start(&pool_config(l, "app", &addrs, HTTP_CHECK), &[l]);
    // The checker really asks for /health.
    assert!(eventually(Duration::from_secs(2), || os[1]
        .seen()
        .iter()
        .any(|s| s.request_line() == "GET /health HTTP/1.1")));
    assert_eq!(distribution(l, "/", 30).len(), 3);
    os[1].set(|b| b.health_status = 503);
    assert!(
        eventually(Duration::from_secs(3), || state(&sy, "app", addrs[1])
            == "down"),
        "{}",
        sy.stats()
    );
    let d = distribution(l, "/", 30);
    assert_eq!(d.get("b"), None, "{d:?}");
    assert_eq!(d.get("a"), Some(&15), "{d:?}");
    assert_eq!(d.get("c"), Some(&15), "{d:?}");
    assert_eq!(counter(&sy, "app", addrs[1], "health_transitions"), 1);
    assert_eq!(counter(&sy, "app", addrs[0], "health_transitions"), 0);
    // Healthy again: back in rotation after `rise` passing checks.
    os[1].set(|b| b.health_status = 200);
    assert!(eventually(Duration::from_secs(3), || state(
        &sy, "app", addrs[1]
    ) == "up"));
    let d = distribution(l, "/", 30);
    assert_eq!(d.get("b"), Some(&10), "{d:?}");
    assert_eq!(counter(&sy, "app", addrs[1], "health_transitions"), 2);
    // The text and Prometheus renderings agree.
    assert!(sy.admin_get("/stats").contains(&format!("{} up", addrs[1])));
    let metrics = sy.admin_get("/metrics");
    assert!(
        metrics.contains(&format!(
            "switchyard_member_up{{pool=\"app\",member=\"{}\"}} 1",
            addrs[1]
        )),
        "{metrics}"
    );
}

#[test]
fn one_failed_check_is_not_enough_with_fall_2() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    // A long interval: between two checks there is time to flip the
    // status back before the second failure.
    let check = "[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"400ms\"\ntimeout = \"300ms\"\nrise = 2\nfall = 2\n";
    let sy = Switchyard::start(&pool_config(l, "app", &[a.addr, b.addr], check), &[l]);
    let checks = |o: &Origin| {
        o.seen()
            .iter()
            .filter(|s| s.request_line().contains("/health"))
            .count()
    };
    assert!(eventually(Duration::from_secs(2), || checks(&b) >= 1));
    let before = checks(&b);
    b.set(|x| x.health_status = 500);
    assert!(eventually(Duration::from_secs(2), || checks(&b) > before));
    b.set(|x| x.health_status = 200);
    let after = checks(&b);
    assert!(eventually(Duration::from_secs(2), || checks(&b) > after + 1));
    assert_eq!(state(&sy, "app", b.addr), "up");
    assert_eq!(counter(&sy, "app", b.addr, "health_transitions"), 0);
}

#[test]
fn expect_status_and_expect_body() {
    let o = Origin::start("a");
    // /health answers 302 "ok\n": fine by default (2xx/3xx), not when 200 is required.
    o.set(|b| b.health_status = 302);
    let (l1, l2, l3, l4) = (free_addr(), free_addr(), free_addr(), free_addr());
    let check = |extra: &str| {
        format!("[pool.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\nrise = 1\nfall = 1\n{extra}")
    };
    let cfg = format!(
        "[global]\nworkers = 1\n\
         [[vserver]]\nname = \"v1\"\nlisten = [\"{l1}\"]\ndefault_pool = \"default\"\n\
         [[vserver]]\nname = \"v2\"\nlisten = [\"{l2}\"]\ndefault_pool = \"strict\"\n\
         [[vserver]]\nname = \"v3\"\nlisten = [\"{l3}\"]\ndefault_pool = \"body-ok\"\n\
         [[vserver]]\nname = \"v4\"\nlisten = [\"{l4}\"]\ndefault_pool = \"body-bad\"\n\
         [[pool]]\nname = \"default\"\n{}\n[[pool.member]]\naddress = \"{a}\"\n\
         [[pool]]\nname = \"strict\"\n{}\n[[pool.member]]\naddress = \"{a}\"\n\
         [[pool]]\nname = \"body-ok\"\n{}\n[[pool.member]]\naddress = \"{a}\"\n\
         [[pool]]\nname = \"body-bad\"\n{}\n[[pool.member]]\naddress = \"{a}\"\n",
        check(""),
        check("expect_status = [200, 204]"),
        check("expect_status = 302\nexpect_body = \"ok\""),
        check("expect_body = \"ready\""),
        a = o.addr
    );
    let sy = Switchyard::start(&cfg, &[l1, l2, l3, l4]);
    assert!(eventually(Duration::from_secs(3), || state(
        &sy, "strict", o.addr
    ) == "down"
        && state(&sy, "body-bad", o.addr) == "down"));
    // Several more rounds of checks: the others stay up.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(state(&sy, "default", o.addr), "up");
    assert_eq!(state(&sy, "body-ok", o.addr), "up");
    assert_eq!(get(l1, "/").status, 200);
    assert_eq!(get(l3, "/").status, 200);
    assert_eq!(get(l2, "/").status, 503);
    assert_eq!(get(l4, "/").status, 503);
    // 200 satisfies "strict" but not "body-ok" (which wants 302).
    o.set(|b| b.health_status = 200);
    assert!(eventually(Duration::from_secs(3), || state(
        &sy, "strict", o.addr
    ) == "up"
        && state(&sy, "body-ok", o.addr) == "down"));
    assert_eq!(get(l2, "/").status, 200);
    assert_eq!(get(l3, "/").status, 503);
}

#[test]
fn tcp_check_notices_a_member_that_stopped_listening() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let (a_addr, b_addr) = (a.addr, b.addr);
    let l = free_addr();
    let check = "[pool.health]\ntype = \"tcp\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\nrise = 2\nfall = 2\n";
    let sy = Switchyard::start(&pool_config(l, "app", &[a_addr, b_addr], check), &[l]);
    assert_eq!(distribution(l, "/", 10).len(), 2);
    drop(a); // stops listening
    assert!(
        eventually(Duration::from_secs(3), || state(&sy, "app", a_addr)
            == "down"),
        "{}",
        sy.stats()
    );
    assert_eq!(state(&sy, "app", b_addr), "up");
    let d = distribution(l, "/", 20);
    assert_eq!(d.get("b"), Some(&20), "{d:?}");
    // Listening again on the same address: back up.
    let a2 = Origin::start_on("a2", &a_addr.to_string());
    assert!(eventually(Duration::from_secs(3), || state(
        &sy, "app", a_addr
    ) == "up"));
    assert!(distribution(l, "/", 10).contains_key("a2"));
    drop(a2);
}

#[test]
fn passive_ejection_on_5xx_and_return() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let l = free_addr();
    let passive = "[pool.passive]\nconsecutive_failures = 3\nejection = \"1s\"\n";
    let sy = Switchyard::start(&pool_config(l, "app", &[a.addr, b.addr], passive), &[l]);
    a.set(|x| x.status = 500);
    // Round robin: requests 1, 3, 5 reach a and fail; the 5xx is relayed.
    let mut c = Client::connect(l);
    let mut fives = 0;
    for _ in 0..6 {
        let r = c.get("/");
        if r.status == 500 {
            assert_eq!(origin_of(&r), "a");
            fives += 1;
        }
    }
    assert_eq!(fives, 3);
    let ejected_at = Instant::now();
    let m = sy.member_stats("app", a.addr);
    assert_eq!(m["state"], "ejected", "{m}");
    assert_eq!(m["ejections"], 1, "{m}");
    assert_eq!(m["responses"]["5xx"], 3, "{m}");
    // While ejected everything goes to b.
    let d = distribution(l, "/", 20);
    assert_eq!(d.get("b"), Some(&20), "{d:?}");
    a.set(|x| x.status = 200);
    assert!(eventually(Duration::from_secs(4), || state(
        &sy, "app", a.addr
    ) == "up"));
    let out_for = ejected_at.elapsed();
    assert!(
        out_for >= Duration::from_millis(700),
        "back after {out_for:?}, ejection is 1s"
    );
    let d = distribution(l, "/", 20);
    assert_eq!(d.get("a"), Some(&10), "{d:?}");
    assert_eq!(counter(&sy, "app", a.addr, "ejections"), 1);
}

#[test]
fn passive_ejection_on_connect_failures() {
    let b = Origin::start("b");
    let closed = free_addr(); // nothing listens here
    let l = free_addr();
    let passive = "[pool.passive]\nconsecutive_failures = 3\nejection = \"10s\"\n";
    let sy = Switchyard::start(&pool_config(l, "app", &[closed, b.addr], passive), &[l]);
    // Every request succeeds: a failed connect is retried on b.
    let d = distribution(l, "/", 10);
    assert_eq!(d.get("b"), Some(&10), "{d:?}");
    let m = sy.member_stats("app", closed);
    assert_eq!(m["state"], "ejected", "{m}");
    assert_eq!(m["ejections"], 1, "{m}");
    assert_eq!(m["connect_failures"], 3, "{m}");
    // Once ejected it is not tried any more.
    assert_eq!(sy.pool_stats("app")["retries"], 3);
}

#[test]
fn no_member_up_gives_503_naming_the_pool() {
    let a = Origin::start("a");
    a.set(|x| x.health_status = 503);
    let l = free_addr();
    let sy = Switchyard::start(&pool_config(l, "checkout", &[a.addr], HTTP_CHECK), &[l]);
    assert!(eventually(Duration::from_secs(3), || state(
        &sy, "checkout", a.addr
    ) == "down"));
    let r = get(l, "/buy");
    assert_eq!(r.status, 503);
    let body = r.body_text();
    assert!(body.contains("pool \"checkout\""), "{body}");
    assert!(body.starts_with("503 Service Unavailable:"), "{body}");
    assert_eq!(a.requests(), 0);
    assert_eq!(sy.pool_stats("checkout")["no_member_available"], 1);
    // Keep-alive survives a 503 for a request without a body.
    let mut c = Client::connect(l);
    assert_eq!(c.get("/").status, 503);
    a.set(|x| x.health_status = 200);
    assert!(eventually(Duration::from_secs(3), || state(
        &sy, "checkout", a.addr
    ) == "up"));
    assert_eq!(c.get("/").status, 200);
}
