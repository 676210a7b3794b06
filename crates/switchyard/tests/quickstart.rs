//! The newcomer's first command: `switchyard run` with no file starts two
//! demo origins and balances a listener over them on fixed ports.

mod common;
use common::*;

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn quickstart_balances_over_its_demo_origins() {
    let ports = [8080u16, 9001, 9002, 9090];
    if let Some(p) = ports
        .iter()
        .find(|p| TcpListener::bind(("127.0.0.1", **p)).is_err())
    {
        eprintln!("SKIPPED: quickstart port {p} is in use on this machine");
        return;
    }
    let log = temp_dir("quickstart").join("stderr.log");
    let child = Command::new(bin())
        .arg("run")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start quickstart");
    let mut sy = Switchyard {
        child: Some(child),
        dir: log.parent().expect("dir").to_path_buf(),
        config: log.clone(),
        admin: "127.0.0.1:9090".parse().expect("addr"),
    };
    let l: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
    sy.wait_listening(l);
    let banner = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        banner.contains("curl -s http://127.0.0.1:8080/"),
        "banner: {banner}"
    );
    let mut c = Client::connect(l);
    let a = c.get("/").body_text();
    let b = c.get("/").body_text();
    assert!(
        a.contains("demo origin") && b.contains("demo origin"),
        "{a} {b}"
    );
    assert_ne!(
        a.lines().next(),
        b.lines().next(),
        "round robin should alternate origins"
    );
    let i1 = c.get("/images/cat.png").body_text();
    for _ in 0..4 {
        assert_eq!(
            c.get("/images/cat.png").body_text().lines().next(),
            i1.lines().next()
        );
    }
    let r = c.get("/old/page");
    assert_eq!(r.status, 301);
    let stats = Command::new(bin()).arg("stats").output().expect("stats");
    assert!(String::from_utf8_lossy(&stats.stdout).contains("vserver quickstart"));
    sy.signal("TERM");
    assert_eq!(sy.wait_exit(Duration::from_secs(10)), Some(0));
}
