//! A failover VIP with keepalived (VRRPv3, 0.1 s adverts) in network
//! namespaces the test makes: two nodes each run switchyard (listening on
//! the VIP with `freebind`) and keepalived (its `vrrp_script` asks
//! switchyard's `/readyz`); a client namespace holds the bridge. A client
//! that retries loses no request when the master's switchyard is killed
//! (SIGKILL) or stopped (SIGTERM), when the old master comes back, when a
//! node is drained and made ready again, or when the master's link goes
//! down.
//!
//! Needs root, ip(8), keepalived and curl; skips otherwise. Every process
//! is stopped by PID and every namespace deleted, even on failure.

mod common;
use common::netns::{
    drain_node, have, in_netns, is_root, set_ready, vip_get, vip_get_retrying, Lab,
};
use common::*;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VIP: &str = "10.77.0.100";

fn node_config(name: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[admin]\nlisten = \"127.0.0.1:9090\"\n\
         [[vserver]]\nname = \"vip\"\nlisten = [\"{VIP}:80\"]\ndefault_pool = \"p\"\n\
         [vserver.socket]\nfreebind = true\n\
         [[vserver.policy]]\naction = {{ status = 200, body = \"{name}\" }}\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:9\"\n"
    )
}

/// keepalived's configuration: VRRPv3 with 0.1 s adverts, or VRRPv2 with
/// its defaults (1 s adverts).
fn keepalived_config(name: &str, priority: u32, v3: bool) -> String {
    let (version, advert) = if v3 { (3, "0.1") } else { (2, "1") };
    format!(
        "global_defs {{\n  router_id {name}\n  vrrp_version {version}\n  enable_script_security\n  script_user root\n}}\n\
         vrrp_script ready {{\n  script \"/usr/bin/curl -fs -m 1 -o /dev/null http://127.0.0.1:9090/readyz\"\n  interval 1\n  fall 1\n  rise 1\n}}\n\
         vrrp_instance vip {{\n  state BACKUP\n  interface eth0\n  virtual_router_id 51\n  priority {priority}\n  advert_int {advert}\n\
           virtual_ipaddress {{\n    {VIP}/24 dev eth0\n  }}\n  track_script {{\n    ready\n  }}\n}}\n"
    )
}

/// What a client that retries saw: (when, who answered) per request,
/// requests that failed every retry, and the longest time without an
/// answer.
#[derive(Default)]
struct Seen {
    answers: Vec<(Duration, String)>,
    failed: u32,
    longest_gap: Duration,
}

/// A client in namespace `ns` that retries each request for up to 5 s,
/// until `stop`.
fn client(ns: &str, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) -> std::thread::JoinHandle<()> {
    in_netns(ns, move || {
        let start = Instant::now();
        let mut last_ok = Instant::now();
        while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
            let got = vip_get_retrying(VIP);
            let mut s = seen.lock().expect("lock");
            match got {
                Some(who) => {
                    let gap = last_ok.elapsed();
                    s.longest_gap = s.longest_gap.max(gap);
                    last_ok = Instant::now();
                    s.answers.push((start.elapsed(), who));
                }
                None => s.failed += 1,
            }
            drop(s);
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

fn last_answer(seen: &Mutex<Seen>) -> Option<String> {
    seen.lock()
        .expect("lock")
        .answers
        .last()
        .map(|a| a.1.clone())
}

#[test]
fn a_retrying_client_loses_nothing_through_failover_failback_and_drain() {
    run(true);
}

/// VRRPv2 with keepalived's defaults (1 s adverts): the SIGKILL failover
/// only, slower, still without a failed request for a client that retries.
#[test]
fn vrrp_v2_defaults_fail_over_without_a_failed_request() {
    run(false);
}

fn run(v3: bool) {
    if !is_root() || !have("ip") || !have("keepalived") || !have("curl") {
        eprintln!("skipped: needs root, ip, keepalived and curl (apt-get install keepalived)");
        return;
    }
    let mut lab = Lab::new(&["c", "a", "b"]);
    let c = lab.ns("c");
    let a = lab.ns("a");
    assert!(lab.ip("c", &["link", "add", "br0", "type", "bridge"]));
    assert!(lab.ip("c", &["addr", "add", "10.77.0.10/24", "dev", "br0"]));
    assert!(lab.ip("c", &["link", "set", "br0", "up"]));
    for (n, port, addr4) in [("a", "va", "10.77.0.1/24"), ("b", "vb", "10.77.0.2/24")] {
        lab.veth("c", port, n, "eth0");
        assert!(lab.ip("c", &["link", "set", port, "master", "br0", "up"]));
        assert!(lab.ip(n, &["addr", "add", addr4, "dev", "eth0"]));
    }
    let dir = temp_dir("vip");
    let mut sy = Vec::new();
    for (n, name, prio) in [("a", "node-a", 150), ("b", "node-b", 100)] {
        let cfg = dir.join(format!("{n}.toml"));
        std::fs::write(&cfg, node_config(name)).expect("write");
        let ka = dir.join(format!("{n}-keepalived.conf"));
        std::fs::write(&ka, keepalived_config(name, prio, v3)).expect("write");
        let cfg_s = cfg.display().to_string();
        sy.push(lab.spawn(
            n,
            &[bin(), "run", "-c", &cfg_s],
            &dir.join(format!("{n}-sy.log")),
        ));
        let ka_s = ka.display().to_string();
        let pid = |k: &str| dir.join(format!("{n}-{k}.pid")).display().to_string();
        lab.spawn(
            n,
            &[
                "keepalived",
                "-n",
                "-l",
                "-D",
                "--vrrp",
                "-f",
                &ka_s,
                "-p",
                &pid("ka"),
                "-r",
                &pid("vrrp"),
            ],
            &dir.join(format!("{n}-keepalived.log")),
        );
    }
    // The VIP settles on node a (the higher priority).
    let settled = in_netns(&c, || {
        eventually(Duration::from_secs(20), || {
            vip_get(VIP).as_deref() == Some("node-a")
        })
    })
    .join()
    .expect("client thread");
    let logs = |dir: &Path| {
        ["a-sy", "b-sy", "a-keepalived", "b-keepalived"]
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
    assert!(
        settled,
        "the VIP never answered from node a\n{}",
        logs(&dir)
    );

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let t = client(&c, stop.clone(), seen.clone());
    std::thread::sleep(Duration::from_millis(500));

    // With VRRPv2 defaults only the link cut is measured (below).
    let mut failover = Duration::ZERO;
    if v3 {
        // 1. The master's switchyard dies (SIGKILL): b takes the VIP.
        let killed = Instant::now();
        lab.kill(sy[0], "KILL");
        let moved = eventually(Duration::from_secs(10), || {
            last_answer(&seen).as_deref() == Some("node-b")
        });
        failover = killed.elapsed();
        assert!(moved, "the VIP did not move to b\n{}", logs(&dir));

        // 2. a comes back: it takes the VIP again (preemption), b still serving meanwhile.
        let cfg_a = dir.join("a.toml").display().to_string();
        sy[0] = lab.spawn("a", &[bin(), "run", "-c", &cfg_a], &dir.join("a-sy.log"));
        let back = eventually(Duration::from_secs(10), || {
            last_answer(&seen).as_deref() == Some("node-a")
        });
        assert!(back, "the VIP did not come back to a\n{}", logs(&dir));

        // 3. a is drained: /readyz says 503, the VIP moves to b, a still
        // serves what reaches it meanwhile.
        let drained = drain_node(&a);
        assert!(drained);
        let away = eventually(Duration::from_secs(10), || {
            last_answer(&seen).as_deref() == Some("node-b")
        });
        assert!(away, "draining a did not move the VIP\n{}", logs(&dir));

        // 4. a is ready again: it takes the VIP back.
        assert!(set_ready(&a, true));
        let back = eventually(Duration::from_secs(10), || {
            last_answer(&seen).as_deref() == Some("node-a")
        });
        assert!(
            back,
            "a did not take the VIP back once ready\n{}",
            logs(&dir)
        );

        // 5. a's switchyard is stopped (SIGTERM: it drains, then exits): b.
        lab.kill(sy[0], "TERM");
        let moved = eventually(Duration::from_secs(10), || {
            last_answer(&seen).as_deref() == Some("node-b")
        });
        assert!(
            moved,
            "the VIP did not move to b after a SIGTERM\n{}",
            logs(&dir)
        );
        sy[0] = lab.spawn("a", &[bin(), "run", "-c", &cfg_a], &dir.join("a-sy.log"));
        let back = eventually(Duration::from_secs(10), || {
            last_answer(&seen).as_deref() == Some("node-a")
        });
        assert!(
            back,
            "a did not take the VIP back after its restart\n{}",
            logs(&dir)
        );
    }

    // 6. a's link goes down: b hears no adverts and takes the VIP.
    let cut = Instant::now();
    assert!(lab.ip("a", &["link", "set", "eth0", "down"]));
    let moved = eventually(Duration::from_secs(10), || {
        last_answer(&seen).as_deref() == Some("node-b")
    });
    let link_failover = cut.elapsed();
    assert!(
        moved,
        "the VIP did not move to b after a's link went down\n{}",
        logs(&dir)
    );
    eprintln!(
        "VRRPv{}: failover after a link down seen by the client within {link_failover:?}",
        if v3 { 3 } else { 2 }
    );

    stop.store(true, Ordering::Relaxed);
    let _ = t.join();
    let s = seen.lock().expect("lock");
    if v3 {
        eprintln!("failover after SIGKILL seen by the client within {failover:?}");
    }
    eprintln!(
        "{} answers; longest gap {:?}; {} failed",
        s.answers.len(),
        s.longest_gap,
        s.failed
    );
    assert_eq!(
        s.failed,
        0,
        "a retrying client lost requests\n{}",
        logs(&dir)
    );
    assert!(s.answers.len() > 20);
}
