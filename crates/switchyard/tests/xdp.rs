//! The shield in XDP (issue 12), end to end, as root: each test makes a
//! client and a Switchyard network namespace joined by a veth pair, runs
//! the real binary in the Switchyard one (`ip netns exec NS switchyard
//! run`) with `[shield.xdp]` on its veth and an origin beside it, and
//! connects from the client namespace (10.77.0.2 allowed, 10.77.0.3 and
//! .4 refused). The namespaces go in Drop, panics included. Without root,
//! `ip netns`, or a Switchyard built with XDP (clang), each test says so
//! and passes.

mod common;
use common::xdp_lab::*;
use common::*;

use std::io::ErrorKind;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The rule file both paths run: allow .2 (after counting everything),
/// drop .3 by a list, reject .4.
const RULES: &str = "[shield]\ndefault = \"allow\"\n[shield.lists]\nbad = [\"10.77.0.3\"]\n\
    [[shield.acl]]\nname = \"count all\"\nproto = [\"tcp\"]\naction = \"count\"\n\
    [[shield.acl]]\nname = \"drop the list\"\nsrc = [\"@bad\"]\naction = \"drop\"\n\
    [[shield.acl]]\nname = \"reject four\"\nsrc = [\"10.77.0.4/32\"]\nproto = [\"tcp\"]\ndst_port = [8080]\naction = \"reject\"\n\
    [[shield.acl]]\nname = \"allow two\"\nsrc = [\"10.77.0.0/24\"]\ntcp_flags = \"syn,!ack\"\naction = \"allow\"\n\
    [[shield.acl]]\nname = \"drop v6 three\"\nsrc = [\"fd77::3/128\"]\naction = \"drop\"\n";

fn hits(shield: &Value, field: &str) -> Vec<u64> {
    shield["rules"]
        .as_array()
        .map(|a| a.iter().map(|r| r[field].as_u64().unwrap_or(0)).collect())
        .unwrap_or_default()
}

/// Whether hping3 is here; says so when it is not.
fn have_hping3() -> bool {
    let here = Command::new("hping3").arg("--version").output().is_ok();
    if !here {
        eprintln!("skipped: no hping3 (apt-get install hping3)");
    }
    here
}

/// A SYN flood from FLOODER to the vserver: 30,000 SYNs at most, 10 s at
/// most.
fn hping3_flood(net: &Net) -> Child {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.client,
            "timeout",
            "10",
            "hping3",
            "-q",
            "-S",
            "-p",
        ])
        .arg(PORT.to_string())
        .args(["-a", FLOODER, "-i", "u100", "-c", "30000", SY])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("hping3")
}

/// Of `n` GETs from the allowed client, how many were answered 200.
fn valid_gets(net: &Net, n: usize) -> usize {
    (0..n)
        .filter(|_| get_from(&net.client, ALLOWED, Duration::from_secs(2)) == Ok(200))
        .count()
}

/// One rule file, both paths: in XDP and at accept. The same rules decide,
/// and each path counts them where it decided. `mode = "auto"` takes
/// generic mode here: a veth peer without XDP of its own drops frames sent
/// back with XDP_TX in native mode, and the RST of `reject` is one.
#[test]
fn xdp_and_accept_decide_alike_on_one_rule_file() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let sy = Sy::start(&net, &config(o.addr, RULES, &xdp(&net.dev, "")));
    if !attached(&sy, &net.dev) {
        return;
    }
    assert!(
        sy.log().contains(&format!(
            "XDP attached to {} in generic mode (a veth",
            net.dev
        )),
        "{}",
        sy.log()
    );
    let t = Duration::from_millis(1500);
    assert_eq!(get_from(&net.client, ALLOWED, t), Ok(200));
    assert_eq!(
        get_from(&net.client, DROPPED, t),
        Err(ErrorKind::TimedOut),
        "a drop in XDP answers nothing"
    );
    assert_eq!(
        get_from(&net.client, REJECTED, t),
        Err(ErrorKind::ConnectionRefused),
        "a reject in XDP is a RST"
    );
    assert_eq!(get_from(&net.client, ALLOWED6, t), Ok(200));
    assert_eq!(get_from(&net.client, DROPPED6, t), Err(ErrorKind::TimedOut));
    let s = sy.shield();
    let x = hits(&s, "xdp_hits");
    // count, drop (the SYN and its retransmissions), reject, allow, drop
    // IPv6; the allowed IPv6 client went by the default.
    assert!(
        x[0] >= 5 && x[1] >= 1 && x[2] == 1 && x[3] == 1 && x[4] >= 1,
        "{s}"
    );
    assert_eq!(s["xdp_default_hits"], 1, "{s}");
    assert_eq!(s["xdp"]["packets"]["rejected_rst"], 1, "{s}");
    assert!(s["xdp"]["packets"]["dropped"].as_u64() >= Some(1), "{s}");
    // Only the allowed connections reached accept, where they are
    // evaluated again.
    assert_eq!(hits(&s, "hits"), vec![2, 0, 0, 1, 0], "{s}");
    assert_eq!(s["default_hits"], 1, "{s}");
    assert_eq!(o.requests(), 2);
    drop(sy);

    // The same file without [shield.xdp]: the decisions at accept.
    let sy = Sy::start(&net, &config(o.addr, RULES, ""));
    assert_eq!(get_from(&net.client, ALLOWED, t), Ok(200));
    let d = get_from(&net.client, DROPPED, t);
    assert!(
        matches!(
            d,
            Err(ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset)
        ),
        "{d:?}"
    );
    assert_eq!(
        get_from(&net.client, REJECTED, t),
        Err(ErrorKind::ConnectionReset)
    );
    assert_eq!(get_from(&net.client, ALLOWED6, t), Ok(200));
    let d = get_from(&net.client, DROPPED6, t);
    assert!(
        matches!(
            d,
            Err(ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset)
        ),
        "{d:?}"
    );
    let s = sy.shield();
    assert_eq!(hits(&s, "hits"), vec![5, 1, 1, 1, 1], "{s}");
    assert_eq!(s["default_hits"], 1, "{s}");
    assert_eq!(s["xdp"], Value::Null);
    assert_eq!(o.requests(), 4);
}

/// 1,000 rules in native mode: the one that decides is the last; the
/// others cost nothing to the allowed client.
#[test]
fn a_thousand_rules_in_native_mode() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let mut rules = String::from("[shield]\n");
    for i in 0..999 {
        rules.push_str(&format!(
            "[[shield.acl]]\nsrc = [\"10.{}.{}.0/24\", \"2001:db8:{i:x}::/48\"]\ndst_port = [{}, \"{}-{}\"]\naction = \"drop\"\n",
            i / 250,
            i % 250,
            1000 + i,
            20000 + i * 10,
            20000 + i * 10 + 5
        ));
    }
    rules.push_str("[[shield.acl]]\nname = \"last\"\nsrc = [\"10.77.0.3\"]\naction = \"drop\"\n");
    let sy = Sy::start(&net, &config(o.addr, &rules, &xdp(&net.dev, "")));
    if !attached(&sy, &net.dev) {
        return;
    }
    let t = Duration::from_millis(1500);
    assert_eq!(get_from(&net.client, ALLOWED, t), Ok(200));
    assert_eq!(get_from(&net.client, DROPPED, t), Err(ErrorKind::TimedOut));
    let s = sy.shield();
    let x = hits(&s, "xdp_hits");
    assert_eq!(x.len(), 1000);
    assert!(x[999] >= 1, "{s}");
    assert_eq!(x[..999].iter().sum::<u64>(), 0);
    assert_eq!(s["xdp_default_hits"], 1, "{s}");
    // Drops only, nothing sent back: native mode on a veth.
    assert_eq!(s["xdp"]["attached"][0]["mode"], "native", "{s}");
    assert!(net.link_shows_xdp());
    // Killed outright: the link closes with the process, the program goes.
    drop(sy);
    assert!(
        eventually(Duration::from_secs(3), || !net.link_shows_xdp()),
        "XDP still attached after the process died"
    );
}

/// Reloads that change the rules and a list edit, while a client opens
/// connection after connection: XDP stays attached, the new rules apply,
/// and no allowed connection fails.
#[test]
fn reloads_and_list_edits_under_traffic() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let sy = Sy::start(&net, &config(o.addr, RULES, &xdp(&net.dev, "")));
    if !attached(&sy, &net.dev) {
        return;
    }
    let t = Duration::from_millis(1500);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let (stop, client_ns) = (stop.clone(), net.client.clone());
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0, Vec::new());
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
                match get_from(&client_ns, ALLOWED, Duration::from_secs(2)) {
                    Ok(200) => ok += 1,
                    other => failed.push(other),
                }
            }
            (ok, failed)
        })
    };
    // Generation 2: .3 is no longer in the list; .2 gets an extra counter.
    let changed = RULES.replace("bad = [\"10.77.0.3\"]", "bad = [\"10.77.9.9\"]").replace(
        "[[shield.acl]]\nname = \"count all\"",
        "[[shield.acl]]\nname = \"count two\"\nsrc = [\"10.77.0.2\"]\naction = \"count\"\n[[shield.acl]]\nname = \"count all\"",
    );
    std::thread::sleep(Duration::from_millis(300));
    sy.reload(&config(o.addr, &changed, &xdp(&net.dev, "")), 2);
    assert_eq!(
        get_from(&net.client, DROPPED, t),
        Ok(200),
        "the reloaded list lets .3 in"
    );
    // A run-time edit puts .3 back: XDP drops it again.
    let (st, v) = sy
        .api(
            "PATCH",
            "/api/v1/shield/lists/bad",
            "{\"add\": [\"10.77.0.3\"]}",
        )
        .expect("PATCH");
    assert_eq!(st, 200, "{v}");
    assert_eq!(get_from(&net.client, DROPPED, t), Err(ErrorKind::TimedOut));
    sy.reload(&config(o.addr, RULES, &xdp(&net.dev, "")), 3);
    assert_eq!(get_from(&net.client, DROPPED, t), Err(ErrorKind::TimedOut));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = client.join().expect("client");
    assert!(ok >= 5, "{ok} requests");
    assert!(
        failed.is_empty(),
        "allowed requests failed across reloads: {failed:?}"
    );
    let log = sy.log();
    assert_eq!(
        log.matches("XDP attached").count(),
        1,
        "attached once, never detached:\n{log}"
    );
    assert!(!log.contains("XDP detached"), "{log}");
    // A reload without [shield.xdp] detaches; the accept path goes on.
    assert!(net.link_shows_xdp());
    sy.reload(&config(o.addr, RULES, ""), 4);
    assert!(
        sy.log().contains(&format!("XDP detached from {}", net.dev)),
        "{}",
        sy.log()
    );
    assert!(!net.link_shows_xdp());
    let d = get_from(&net.client, DROPPED, t);
    assert!(
        matches!(
            d,
            Err(ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset)
        ),
        "{d:?}"
    );
}

/// Where XDP cannot attach (no such interface), Switchyard says so once
/// and the accept path still applies the rules.
#[test]
fn without_xdp_the_accept_path_shields() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let sy = Sy::start(&net, &config(o.addr, RULES, &xdp("nosuchdev0", "")));
    let t = Duration::from_millis(1500);
    assert_eq!(get_from(&net.client, ALLOWED, t), Ok(200));
    assert!(get_from(&net.client, DROPPED, t).is_err());
    let s = sy.shield();
    if s["xdp"]["built_with_xdp"] == false {
        assert!(sy.log().contains("built without XDP"), "{}", sy.log());
        return;
    }
    assert!(
        s["xdp"]["refused"]["nosuchdev0"]
            .as_str()
            .is_some_and(|e| e.contains("no interface")),
        "{s}"
    );
    assert_eq!(
        sy.log().matches("XDP not attached to nosuchdev0").count(),
        1,
        "{}",
        sy.log()
    );
    // A reload does not say it again.
    sy.reload(&config(o.addr, RULES, &xdp("nosuchdev0", "")), 2);
    assert_eq!(
        sy.log().matches("XDP not attached to nosuchdev0").count(),
        1,
        "{}",
        sy.log()
    );
    assert_eq!(hits(&s, "hits")[1], 1, "{s}");
}

/// Without capabilities (setpriv drops them all, CAP_BPF included) the
/// program cannot load: Switchyard says so once, not again on reload, and
/// the accept path shields.
#[test]
fn without_cap_bpf_the_accept_path_shields() {
    let Some(net) = Net::new() else { return };
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: no setpriv (util-linux)");
        return;
    }
    let o = origin_in(&net);
    let sy = Sy::start_with(
        &net,
        &config(o.addr, RULES, &xdp(&net.dev, "")),
        &["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"],
    );
    let t = Duration::from_millis(1500);
    assert_eq!(get_from(&net.client, ALLOWED, t), Ok(200));
    let d = get_from(&net.client, DROPPED, t);
    assert!(
        matches!(
            d,
            Err(ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset)
        ),
        "{d:?}"
    );
    let s = sy.shield();
    if s["xdp"]["built_with_xdp"] == false {
        return;
    }
    assert_eq!(s["xdp"]["loaded"], false, "{s}");
    assert!(!net.link_shows_xdp());
    let said = |sy: &Sy| sy.log().matches("XDP unavailable").count();
    assert_eq!(said(&sy), 1, "{}", sy.log());
    assert!(sy.log().contains("Operation not permitted"), "{}", sy.log());
    // The drop was decided at accept.
    assert_eq!(hits(&s, "hits")[1], 1, "{s}");
    sy.reload(&config(o.addr, RULES, &xdp(&net.dev, "")), 2);
    assert_eq!(said(&sy), 1, "said once: {}", sy.log());
}

/// A SYN flood from one source (hping3, 30,000 SYNs at most, 10 s at
/// most) while a valid client connects: XDP lets `syn_per_source` SYNs a
/// second of the flooder through to the kernel (whose SYN cookies,
/// net.ipv4.tcp_syncookies=2 in the namespace, answer them without
/// queueing) and drops the rest; every valid connection succeeds.
#[test]
fn a_syn_flood_is_limited_per_source_while_valid_clients_connect() {
    let Some(net) = Net::new() else { return };
    if !have_hping3() {
        return;
    }
    let st = Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.sy,
            "sysctl",
            "-qw",
            "net.ipv4.tcp_syncookies=2",
        ])
        .status();
    assert!(st.is_ok_and(|s| s.success()), "sysctl in the namespace");
    let o = origin_in(&net);
    let sy = Sy::start(
        &net,
        &config(o.addr, RULES, &xdp(&net.dev, "syn_per_source = 50")),
    );
    if !attached(&sy, &net.dev) {
        return;
    }
    let mut flood = hping3_flood(&net);
    // The flood is under way when the limit starts to bite.
    assert!(
        eventually(Duration::from_secs(5), || sy.shield()["xdp"]["packets"]
            ["syn_limited"]
            .as_u64()
            .is_some_and(|n| n > 100)),
        "{}",
        sy.shield()
    );
    let ok = valid_gets(&net, 20);
    let during = sy.shield()["xdp"]["packets"].clone();
    let _ = flood.wait();
    assert_eq!(ok, 20, "valid clients during the flood: {during}");
    let limited = during["syn_limited"].as_u64().unwrap_or(0);
    let syn = during["syn"].as_u64().unwrap_or(0);
    assert!(limited > 100 && limited < syn, "{during}");
}

/// SYN cookies issued in XDP (SYN+ACK by XDP_TX) and completed by the tc
/// program (bpf_sk_assign_tcp_reqsk): valid clients connect through them,
/// during a hping3 SYN flood (30,000 SYNs at most, 10 s at most) that XDP
/// answers without the kernel's SYN queue or its own cookies. `auto`
/// takes generic mode on the veth (a peer without XDP drops frames sent
/// back in native mode).
#[test]
fn syn_cookies_in_xdp_complete_handshakes_under_a_flood() {
    let Some(net) = Net::new() else { return };
    if !have_hping3() {
        return;
    }
    let o = origin_in(&net);
    let sy = Sy::start(
        &net,
        &config(o.addr, RULES, &xdp(&net.dev, "syn_cookies = true")),
    );
    if !attached(&sy, &net.dev) {
        return;
    }
    let x = sy.shield()["xdp"].clone();
    if x["syn_cookies"] != true {
        // A kernel before 6.10 has no bpf_sk_assign_tcp_reqsk.
        assert!(
            sy.log().contains("SYN cookies in XDP unavailable"),
            "{}",
            sy.log()
        );
        eprintln!("skipped: SYN cookies in XDP unavailable here: {}", sy.log());
        return;
    }
    assert_eq!(x["attached"][0]["tc"], true, "{x}");
    assert_eq!(x["attached"][0]["mode"], "generic", "auto on a veth: {x}");
    // Without a flood: a connection through a cookie.
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_secs(2)),
        Ok(200)
    );
    let p = sy.shield()["xdp"]["packets"].clone();
    assert_eq!(
        (
            p["syn_cookies_sent"].as_u64(),
            p["syn_cookies_completed"].as_u64()
        ),
        (Some(1), Some(1)),
        "{p}"
    );

    let mut flood = hping3_flood(&net);
    assert!(
        eventually(Duration::from_secs(5), || sy.shield()["xdp"]["packets"]
            ["syn_cookies_sent"]
            .as_u64()
            .is_some_and(|n| n > 1000)),
        "{}",
        sy.shield()
    );
    let ok = valid_gets(&net, 20);
    let during = sy.shield()["xdp"]["packets"].clone();
    let _ = flood.wait();
    assert_eq!(ok, 20, "valid clients during the flood: {during}");
    assert!(
        during["syn_cookies_completed"].as_u64() >= Some(21),
        "{during}"
    );
    assert_eq!(during["syn_cookies_bad"], 0, "{during}");
    assert_eq!(during["syn_cookies_refused"], 0, "{during}");
    assert_eq!(o.requests(), 21);

    // Reloads turn cookies off (the tc program detaches, the kernel
    // answers) and on again, XDP staying attached.
    let plain = xdp(&net.dev, "");
    sy.reload(&config(o.addr, RULES, &plain), 2);
    let x = sy.shield()["xdp"].clone();
    assert_eq!(
        (&x["syn_cookies"], &x["attached"][0]["tc"]),
        (&Value::Bool(false), &Value::Bool(false)),
        "{x}"
    );
    let sent = x["packets"]["syn_cookies_sent"].as_u64();
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_secs(2)),
        Ok(200)
    );
    assert_eq!(
        sy.shield()["xdp"]["packets"]["syn_cookies_sent"].as_u64(),
        sent
    );
    let cookies = xdp(&net.dev, "syn_cookies = true");
    sy.reload(&config(o.addr, RULES, &cookies), 3);
    assert_eq!(sy.shield()["xdp"]["syn_cookies"], true);
    let done = sy.shield()["xdp"]["packets"]["syn_cookies_completed"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_secs(2)),
        Ok(200)
    );
    assert_eq!(
        sy.shield()["xdp"]["packets"]["syn_cookies_completed"].as_u64(),
        Some(done + 1)
    );
    assert_eq!(sy.log().matches("XDP attached").count(), 1, "{}", sy.log());
}

/// Not a timed test (ignored; run it with `cargo test -p switchyard --test
/// xdp measure -- --ignored --nocapture`): what the shield drops per
/// second from a source a rule drops, in XDP and at accept. A hping3 SYN
/// flood for 5 s against each path, then, at accept, connections opened
/// as fast as two threads can for 3 s (a SYN flood never reaches accept:
/// the kernel answers it before any socket sees it).
#[test]
#[ignore = "a measurement (XDP drop rates), run by hand for docs/bench-results/history.md"]
fn measure_drop_rates() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let rules = "[shield]\n[[shield.acl]]\nname = \"drop three\"\nsrc = [\"10.77.0.3\"]\naction = \"drop\"\n";
    let stat = |sy: &Sy, key: &str| sy.shield()["xdp"]["packets"][key].as_u64().unwrap_or(0);
    let rx = |net: &Net| -> u64 {
        Command::new("ip")
            .args(["netns", "exec", &net.sy, "cat"])
            .arg(format!("/sys/class/net/{}/statistics/rx_packets", net.dev))
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(0)
    };
    let flood = |net: &Net, secs: u32| {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.client,
                "timeout",
                &secs.to_string(),
                "hping3",
                "-q",
                "--flood",
                "-S",
                "-p",
            ])
            .arg(PORT.to_string())
            .args(["-a", DROPPED, SY])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    for (label, x) in [("XDP native", ""), ("XDP generic", "mode = \"generic\"")] {
        let sy = Sy::start(&net, &config(o.addr, rules, &xdp(&net.dev, x)));
        if !attached(&sy, &net.dev) {
            return;
        }
        let (r0, d0) = (rx(&net), stat(&sy, "dropped"));
        flood(&net, 5);
        let (r1, d1) = (rx(&net), stat(&sy, "dropped"));
        eprintln!(
            "{label}: hping3 --flood: {} SYN/s received, {} SYN/s dropped in XDP",
            (r1 - r0) / 5,
            (d1 - d0) / 5
        );
        drop(sy);
    }
    let sy = Sy::start(&net, &config(o.addr, rules, ""));
    let r0 = rx(&net);
    flood(&net, 5);
    let flood_hits = hits(&sy.shield(), "hits")[0];
    eprintln!(
        "accept: hping3 --flood: {} packets/s received (SYNs, and RSTs to the kernel's SYN cookies), {flood_hits} dropped by the ACL",
        (rx(&net) - r0) / 5
    );
    let start = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let ns = net.client.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while start.elapsed() < Duration::from_secs(3) {
                    let _ = get_from(&ns, DROPPED, Duration::from_secs(1));
                    n += 1;
                }
                n
            })
        })
        .collect();
    let tried: u64 = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    let dropped = hits(&sy.shield(), "hits")[0] - flood_hits;
    eprintln!(
        "accept: connections from the dropped source: {} tried/s, {} dropped/s at accept",
        tried / 3,
        dropped / 3
    );
}

/// Not a test: why valid connections fail during a fast SYN flood
/// answered by XDP cookies (`switchyard bench shield` sees 1-4 % fail).
/// pktgen floods SYNs from 10.78.0.0/16 (addresses nobody answers for)
/// for 4 s while 8 threads connect from 10.77.0.2 and fetch a page; each
/// failure is classified, and the XDP and kernel counters are printed.
/// `cargo test -p switchyard --test xdp measure_cookie_failures --
/// --ignored --nocapture`
#[test]
#[ignore = "a measurement (SYN cookie failures), run by hand for docs/bench-results/history.md"]
fn measure_cookie_failures() {
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::{Arc, Mutex};
    use switchyard_bench::pktgen::{Generator, Limits, Pool, Shape};
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let sy = Sy::start(
        &net,
        &config(o.addr, "", &xdp(&net.dev, "syn_cookies = true")),
    );
    if !attached(&sy, &net.dev) || sy.shield()["xdp"]["syn_cookies"] != true {
        return;
    }
    let (dst, src) = (
        Net::mac(&net.sy, &net.dev),
        Net::mac(&net.client, &net.peer),
    );
    let peer = net.peer.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let flood = std::thread::spawn({
        let ns = net.client.clone();
        move || {
            Net::within(&ns, move || {
                let pool = Pool::build(
                    &Shape::Syn {
                        src_base: "10.78.0.0".parse().expect("ip"),
                        src_prefix: 16,
                        dst: SY.parse().expect("ip"),
                        dst_port: PORT,
                    },
                    4096,
                    src,
                    dst,
                );
                let g = Generator::open(&peer).expect("generator");
                g.flood(
                    &pool,
                    Limits {
                        rate: None,
                        max_packets: 20_000_000,
                        max_duration: Duration::from_secs(4),
                    },
                    &stop2,
                )
            })
        }
    });
    let kinds: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (ns, kinds) = (net.client.clone(), kinds.clone());
            std::thread::spawn(move || {
                Net::within(&ns, move || {
                    let end = Instant::now() + Duration::from_secs(4);
                    while Instant::now() < end {
                        let t0 = Instant::now();
                        let r = (|| -> Result<(), String> {
                            let s = socket2::Socket::new(
                                socket2::Domain::IPV4,
                                socket2::Type::STREAM,
                                None,
                            )
                            .map_err(|e| format!("socket {e}"))?;
                            let from: std::net::SocketAddr =
                                format!("{ALLOWED}:0").parse().map_err(|_| "addr")?;
                            s.bind(&from.into()).map_err(|e| format!("bind {e}"))?;
                            let to: std::net::SocketAddr =
                                format!("{SY}:{PORT}").parse().map_err(|_| "addr")?;
                            s.connect_timeout(&to.into(), Duration::from_secs(3))
                                .map_err(|e| format!("connect {:?}", e.kind()))?;
                            let mut s: TcpStream = s.into();
                            s.set_read_timeout(Some(Duration::from_secs(3)))
                                .map_err(|e| e.to_string())?;
                            s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                                .map_err(|e| format!("write {:?}", e.kind()))?;
                            let mut b = Vec::new();
                            s.read_to_end(&mut b)
                                .map_err(|e| format!("read {:?}", e.kind()))?;
                            if b.starts_with(b"HTTP/1.1 200") {
                                Ok(())
                            } else {
                                Err(format!(
                                    "answer {:?}",
                                    String::from_utf8_lossy(&b[..b.len().min(20)])
                                ))
                            }
                        })();
                        let k = match r {
                            Ok(()) if t0.elapsed() > Duration::from_millis(900) => {
                                "ok, slow".to_string()
                            }
                            Ok(()) => "ok".to_string(),
                            Err(e) => e,
                        };
                        *kinds.lock().expect("lock").entry(k).or_default() += 1;
                        std::thread::sleep(Duration::from_millis(8));
                    }
                })
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    stop.store(true, Ordering::Relaxed);
    let sent = flood.join().expect("flood");
    eprintln!("flood: {:.0} SYN/s, {} refused", sent.rate(), sent.refused);
    eprintln!("valid connections: {:?}", kinds.lock().expect("lock"));
    eprintln!("xdp: {}", sy.shield()["xdp"]["packets"]);
    let nstat = Command::new("ip")
        .args(["netns", "exec", &net.sy, "nstat", "-az"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for l in nstat.lines().filter(|l| {
        let n: Vec<&str> = l.split_whitespace().collect();
        n.len() >= 2
            && n[1] != "0"
            && (l.contains("Listen")
                || l.contains("Cookie")
                || l.contains("Drop")
                || l.contains("Abort")
                || l.contains("Retrans")
                || l.contains("Reset")
                || l.contains("Req"))
    }) {
        eprintln!("  {l}");
    }
}

/// A datagram a rule rejects is answered in XDP as a closed port would
/// be: the client's connected UDP socket gets "connection refused" (the
/// ICMP port unreachable, IPv4 and IPv6), an allowed client's datagram is
/// relayed, and the XDP counters say so.
#[test]
fn a_rejected_datagram_gets_port_unreachable_in_xdp() {
    let Some(net) = Net::new() else { return };
    let echo = Net::within(&net.sy, || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("echo");
        let addr = s.local_addr().expect("addr");
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        });
        addr
    });
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"u\"\nprotocol = \"udp\"\nlisten = [\"{SY}:5300\", \"[{SY6}]:5300\"]\ndefault_pool = \"p\"\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{echo}\"\n\
         [shield]\n[[shield.acl]]\nsrc = [\"{REJECTED}/32\", \"{DROPPED6}/128\"]\nproto = [\"udp\"]\naction = \"reject\"\n{}",
        xdp(&net.dev, "")
    );
    let sy = Sy::start(&net, &cfg);
    if !attached(&sy, &net.dev) {
        return;
    }
    let ask = |from: &'static str, to: String| {
        Net::within(&net.client, move || {
            let s = std::net::UdpSocket::bind(from).expect("bind");
            s.set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            s.connect(&to).expect("connect");
            s.send(b"ping").expect("send");
            let mut b = [0u8; 16];
            s.recv(&mut b)
                .map(|n| b[..n].to_vec())
                .map_err(|e| e.kind())
        })
    };
    assert_eq!(
        ask("10.77.0.2:0", format!("{SY}:5300")),
        Ok(b"ping".to_vec())
    );
    assert_eq!(
        ask("10.77.0.4:0", format!("{SY}:5300")),
        Err(ErrorKind::ConnectionRefused),
        "IPv4: port unreachable"
    );
    assert_eq!(
        ask("[fd77::3]:0", format!("[{SY6}]:5300")),
        Err(ErrorKind::ConnectionRefused),
        "IPv6: port unreachable"
    );
    let p = sy.shield()["xdp"]["packets"].clone();
    assert_eq!(p["rejected_icmp"], 2, "{p}");
    assert_eq!(p["icmp_limited"], 0, "{p}");
}

/// A `log` rule matched in XDP writes the same line as at accept, marked
/// "in XDP" (from the program's ring buffer), and counts it.
#[test]
fn a_log_rule_writes_a_line_from_xdp() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let rules = "[shield]\n[[shield.acl]]\nname = \"watch two\"\nsrc = [\"10.77.0.2/32\"]\naction = \"log\"\n";
    let sy = Sy::start(&net, &config(o.addr, rules, &xdp(&net.dev, "")));
    if !attached(&sy, &net.dev) {
        return;
    }
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_secs(5)),
        Ok(200)
    );
    let want =
        "shield: rule \"watch two\" matched 10.77.0.2 -> 10.77.0.1 (proto 6, port 8080) in XDP";
    assert!(
        eventually(Duration::from_secs(5), || sy.log().contains(want)),
        "{want:?} in:\n{}",
        sy.log()
    );
    assert!(
        sy.log().contains(
            "shield: rule \"watch two\" matched 10.77.0.2 -> 10.77.0.1 (proto 6, port 8080)\n"
        ),
        "and at accept:\n{}",
        sy.log()
    );
    let p = sy.shield()["xdp"]["packets"].clone();
    assert_eq!(
        (p["logged"].as_u64(), p["log_suppressed"].as_u64()),
        (Some(1), Some(0)),
        "{p}"
    );
}

/// Rules replaced through the admin API reach XDP at once: the new rule
/// drops in the program (the client's SYN never answered), its XDP
/// counter starts from zero, XDP stays attached, and a reload puts the
/// file's rules back.
#[test]
fn rules_replaced_at_run_time_reach_xdp() {
    let Some(net) = Net::new() else { return };
    let o = origin_in(&net);
    let cfg = config(o.addr, RULES, &xdp(&net.dev, ""));
    let sy = Sy::start(&net, &cfg);
    if !attached(&sy, &net.dev) {
        return;
    }
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_secs(5)),
        Ok(200)
    );
    let rules = "[[acl]]\nname = \"drop two\"\nsrc = [\"10.77.0.2/32\"]\naction = \"drop\"\n";
    let (st, v) = sy
        .api("PUT", "/api/v1/shield/rules", rules)
        .expect("PUT /api/v1/shield/rules");
    assert_eq!((st, v["rules"].clone()), (200, serde_json::json!(1)), "{v}");
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_millis(1500)),
        Err(ErrorKind::TimedOut),
        "dropped in XDP"
    );
    assert_eq!(
        get_from(&net.client, DROPPED, Duration::from_secs(5)),
        Ok(200),
        "the file's drop is gone"
    );
    let g = sy.shield();
    assert_eq!(g["rules"][0]["name"], "drop two", "{g}");
    assert!(g["rules"][0]["xdp_hits"].as_u64() >= Some(1), "{g}");
    assert_eq!(g["rules"][0]["hits"], 0, "never reached accept: {g}");
    assert!(
        sy.log().matches("XDP attached").count() == 1,
        "{}",
        sy.log()
    );
    sy.reload(&cfg, 2);
    assert_eq!(
        get_from(&net.client, ALLOWED, Duration::from_secs(5)),
        Ok(200)
    );
}
