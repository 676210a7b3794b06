//! The configurations `switchyard bench l4` writes are valid for the DUTs
//! themselves (`haproxy -c`, `nginx -t`, `switchyard check`) and carry the
//! settings the comparison depends on. A DUT that is not installed (or not
//! built) is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use switchyard_bench::l4::{self, L4Ports, L4Target};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sy-l4cfg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ports() -> L4Ports {
    L4Ports::from_base(15000 + (std::process::id() % 400) as u16 * 10)
}

fn check(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn written(t: &L4Target, file: &str) -> (PathBuf, String) {
    let dir = tmpdir(&t.name);
    l4::write_config(t, &ports(), &dir).unwrap();
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    (dir, text)
}

#[test]
fn haproxy_l4_config_is_valid_with_the_expert_settings() {
    let t = match l4::resolve("haproxy", None) {
        Ok(t) => t,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    assert!(!t.udp, "HAProxy 2.6 has no UDP proxying");
    let (dir, cfg) = written(&t, "haproxy.cfg");
    for want in [
        "nbthread 1",
        "mode tcp",
        "option splice-auto",
        "tune.bufsize 16384",
        "timeout client",
    ] {
        assert!(cfg.contains(want), "haproxy.cfg lacks {want}:\n{cfg}");
    }
    assert!(!cfg.contains("\n    log "), "no logging:\n{cfg}");
    assert!(!cfg.contains("splice-response"), "{cfg}");
    let forced = l4::resolve("haproxy-splice", None).unwrap();
    let (_, cfg2) = written(&forced, "haproxy.cfg");
    assert!(
        cfg2.contains("option splice-request") && cfg2.contains("option splice-response"),
        "{cfg2}"
    );
    check(
        Command::new(&t.program)
            .arg("-c")
            .arg("-f")
            .arg(dir.join("haproxy.cfg")),
    );
}

#[test]
fn nginx_stream_config_is_valid_with_tcp_and_udp() {
    let t = match l4::resolve("nginx", None) {
        Ok(t) => t,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let (dir, cfg) = written(&t, "nginx.conf");
    for want in [
        "load_module ",
        "worker_processes 1;",
        "proxy_buffer_size 16k;",
        "udp reuseport;",
        "proxy_responses 1;",
    ] {
        assert!(cfg.contains(want), "nginx.conf lacks {want}:\n{cfg}");
    }
    assert!(!cfg.contains("access_log"), "no logging:\n{cfg}");
    check(
        Command::new(&t.program)
            .arg("-t")
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(dir.join("nginx.conf")),
    );
}

#[test]
fn switchyard_l4_config_has_one_zero_copy_mode_per_target_and_checks() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/switchyard");
    for (mode, udp) in [("auto", true), ("splice", false), ("copy", true)] {
        let t = L4Target {
            name: format!("switchyard-{mode}"),
            kind: switchyard_bench::dut::Kind::Switchyard,
            program: bin.clone(),
            zero_copy: Some(mode.into()),
            udp,
            notes: Vec::new(),
            version: String::new(),
        };
        let (dir, cfg) = written(&t, "switchyard.toml");
        assert_eq!(
            cfg.matches(&format!("zero_copy = \"{mode}\"")).count(),
            3,
            "{cfg}"
        );
        assert!(cfg.contains("workers = 1"), "{cfg}");
        assert_eq!(cfg.contains("protocol = \"udp\""), udp, "{cfg}");
        assert_eq!(cfg.contains("per_datagram = true"), udp, "{cfg}");
        if bin.is_file() {
            check(
                Command::new(&bin)
                    .args(["check", "-c"])
                    .arg(dir.join("switchyard.toml")),
            );
        } else {
            eprintln!("{} not built: switchyard check skipped", bin.display());
        }
    }
}

#[test]
fn target_names_pick_the_relay_mode() {
    assert!(l4::resolve("switchyard-zerocopy", Some(Path::new("/bin/true"))).is_err());
    let names: Vec<String> = l4::cases(&["all".into()])
        .unwrap()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names.len(), 9, "{names:?}");
    let req = l4::request(65536, true);
    assert_eq!(req.len(), l4::REQ_LEN);
    assert_eq!(l4::parse_request(&req), (65536, true));
}
