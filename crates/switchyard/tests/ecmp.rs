//! Active-active with ECMP: two nodes announce the VIP/32 over BGP (BIRD)
//! to a router namespace that spreads flows over both (L4 multipath hash);
//! each node's announcement follows switchyard's `/readyz` through
//! scripts/bird-announce.sh. A drain withdraws the node's route first, so
//! the node can then be stopped without a failed request.
//!
//! Needs root, ip, bird and curl; skips otherwise. Every process is
//! stopped by PID and every namespace deleted, even on failure.

mod common;
use common::netns::{drain_node, have, in_netns, is_root, vip_get, vip_get_retrying, Lab};
use common::*;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VIP: &str = "10.88.0.100";

fn node_config(name: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[admin]\nlisten = \"127.0.0.1:9090\"\n\
         [[vserver]]\nname = \"vip\"\nlisten = [\"{VIP}:80\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\naction = {{ status = 200, body = \"{name}\" }}\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:9\"\n"
    )
}

const TIMERS: &str = "hold time 3; keepalive time 1; connect delay time 1; connect retry time 1; error wait time 1, 2;";

fn node_bird(me: &str, router: &str) -> String {
    format!(
        "router id {me};\nprotocol device {{ }}\n\
         protocol static vip {{ ipv4; route {VIP}/32 blackhole; }}\n\
         protocol bgp up {{ local {me} as 65001; neighbor {router} as 65000; {TIMERS}\n\
           ipv4 {{ import none; export where proto = \"vip\"; next hop self; }}; }}\n"
    )
}

fn router_bird() -> String {
    format!(
        "router id 10.88.1.1;\nprotocol device {{ }}\n\
         protocol kernel {{ ipv4 {{ import none; export all; }}; merge paths on; }}\n\
         protocol bgp a {{ local 10.88.1.1 as 65000; neighbor 10.88.1.2 as 65001; {TIMERS}\n\
           ipv4 {{ import all; export none; }}; }}\n\
         protocol bgp b {{ local 10.88.2.1 as 65000; neighbor 10.88.2.2 as 65001; {TIMERS}\n\
           ipv4 {{ import all; export none; }}; }}\n"
    )
}

#[derive(Default)]
struct Seen {
    answers: Vec<String>,
    failed: u32,
}

#[test]
fn ecmp_spreads_over_both_nodes_and_a_drain_withdraws_before_the_stop() {
    if !is_root() || !have("ip") || !have("bird") || !have("birdc") || !have("curl") {
        eprintln!("skipped: needs root, ip, bird2 and curl (apt-get install bird2)");
        return;
    }
    let mut lab = Lab::new(&["r", "a", "b"]);
    lab.veth("r", "ra", "a", "eth0");
    lab.veth("r", "rb", "b", "eth0");
    assert!(lab.ip("r", &["addr", "add", "10.88.1.1/30", "dev", "ra"]));
    assert!(lab.ip("r", &["addr", "add", "10.88.2.1/30", "dev", "rb"]));
    assert!(lab.ip("a", &["addr", "add", "10.88.1.2/30", "dev", "eth0"]));
    assert!(lab.ip("b", &["addr", "add", "10.88.2.2/30", "dev", "eth0"]));
    for (n, gw) in [("a", "10.88.1.1"), ("b", "10.88.2.1")] {
        assert!(lab.ip(n, &["addr", "add", &format!("{VIP}/32"), "dev", "lo"]));
        assert!(lab.ip(n, &["route", "add", "default", "via", gw]));
    }
    // New flows (source ports) spread over the next hops.
    assert!(
        lab.run(
            "r",
            &["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"]
        )
        .0
    );

    let dir = temp_dir("ecmp");
    let announce = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/bird-announce.sh"
    );
    let mut sy = Vec::new();
    let birds = [
        ("r", router_bird()),
        ("a", node_bird("10.88.1.2", "10.88.1.1")),
        ("b", node_bird("10.88.2.2", "10.88.2.1")),
    ];
    for (n, conf) in birds {
        let path = dir.join(format!("{n}-bird.conf"));
        std::fs::write(&path, conf).expect("write");
        let sock = dir.join(format!("{n}-bird.ctl")).display().to_string();
        let pid = dir.join(format!("{n}-bird.pid")).display().to_string();
        let p = path.display().to_string();
        lab.spawn(
            n,
            &["bird", "-f", "-c", &p, "-s", &sock, "-P", &pid],
            &dir.join(format!("{n}-bird.log")),
        );
        if n == "r" {
            continue;
        }
        let cfg = dir.join(format!("{n}.toml"));
        std::fs::write(&cfg, node_config(&format!("node-{n}"))).expect("write");
        let c = cfg.display().to_string();
        sy.push(lab.spawn(
            n,
            &[bin(), "run", "-c", &c],
            &dir.join(format!("{n}-sy.log")),
        ));
        lab.spawn(
            n,
            &["sh", announce, &sock, "vip"],
            &dir.join(format!("{n}-announce.log")),
        );
    }
    let logs = |dir: &Path| {
        [
            "r-bird",
            "a-bird",
            "b-bird",
            "a-sy",
            "b-sy",
            "a-announce",
            "b-announce",
        ]
        .iter()
        .map(|f| {
            format!(
                "== {f}\n{}",
                std::fs::read_to_string(dir.join(format!("{f}.log"))).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    };
    // Both routes arrive and are merged into one multipath route.
    let route = || {
        lab.run("r", &["ip", "route", "show", &format!("{VIP}/32")])
            .1
    };
    let both = eventually(Duration::from_secs(20), || {
        let r = route();
        r.contains("10.88.1.2") && r.contains("10.88.2.2")
    });
    assert!(both, "no ECMP route: {}\n{}", route(), logs(&dir));

    // Flows reach both nodes.
    let r_ns = lab.ns("r");
    let spread = in_netns(&r_ns, || {
        let mut who = std::collections::HashSet::new();
        for _ in 0..200 {
            if let Some(w) = vip_get(VIP) {
                who.insert(w);
            }
            if who.len() == 2 {
                break;
            }
        }
        who
    })
    .join()
    .expect("client");
    assert_eq!(spread.len(), 2, "flows reached only {spread:?}");

    // A client that retries, running through the drain and the stop.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (st, se) = (stop.clone(), seen.clone());
    let client = in_netns(&r_ns, move || {
        let start = Instant::now();
        while !st.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
            let got = vip_get_retrying(VIP);
            let mut s = se.lock().expect("lock");
            match got {
                Some(w) => s.answers.push(w),
                None => s.failed += 1,
            }
            drop(s);
            std::thread::sleep(Duration::from_millis(10));
        }
    });

    // Drain node a: its route is withdrawn first...
    let a_ns = lab.ns("a");
    let drained = drain_node(&a_ns);
    assert!(drained);
    let t = Instant::now();
    let withdrawn = eventually(Duration::from_secs(10), || {
        let r = route();
        !r.contains("10.88.1.2") && r.contains("10.88.2.2")
    });
    let took = t.elapsed();
    assert!(
        withdrawn,
        "the drain did not withdraw a's route: {}\n{}",
        route(),
        logs(&dir)
    );
    // ...then, after a moment for flows in flight, it stops.
    std::thread::sleep(Duration::from_millis(500));
    lab.kill(sy[0], "TERM");
    let before = seen.lock().expect("lock").answers.len();
    assert!(eventually(Duration::from_secs(10), || seen
        .lock()
        .expect("lock")
        .answers
        .len()
        > before + 30));
    stop.store(true, Ordering::Relaxed);
    let _ = client.join();
    let s = seen.lock().expect("lock");
    let tail: Vec<&String> = s.answers.iter().rev().take(20).collect();
    eprintln!(
        "route withdrawn {took:?} after the drain; {} answers, {} failed",
        s.answers.len(),
        s.failed
    );
    assert_eq!(
        s.failed,
        0,
        "requests failed through the drain\n{}",
        logs(&dir)
    );
    assert!(tail.iter().all(|w| *w == "node-b"), "{tail:?}");
}
