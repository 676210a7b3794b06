//! The shield's ACLs at accept, through the real binary on loopback
//! sources (127.0.0.0/8 gives many client addresses): each action, first
//! match wins over 1,000 rules, a vserver's rules after the global ones,
//! IPv6, UDP, address lists edited at run time without touching
//! established connections, and what a reload does to those edits.

mod common;
use common::*;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use serde_json::{json, Value};

fn http_config(listen: SocketAddr, origin: SocketAddr, shield: &str, vs_acl: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n{vs_acl}\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{origin}\"\n{shield}\n"
    )
}

/// What happens to a GET from `source`: Ok(status), or how it failed.
fn get_from(l: SocketAddr, source: &str) -> Result<u16, ErrorKind> {
    let from: SocketAddr = format!("{source}:0").parse().expect("source address");
    get_from_source(from, l, Duration::from_secs(2))
}

fn api(sy: &Switchyard, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let r = request(
        sy.admin,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    (
        r.status,
        serde_json::from_str(&r.body_text()).unwrap_or(Value::Null),
    )
}

#[test]
fn each_action_and_first_match() {
    let o = Origin::start("o");
    let l = free_addr();
    let shield = "[shield]\n\
        [[shield.acl]]\nname = \"count all\"\naction = \"count\"\n\
        [[shield.acl]]\nname = \"drop two\"\nsrc = [\"127.0.0.2\"]\naction = \"drop\"\n\
        [[shield.acl]]\nname = \"reject three\"\nsrc = [\"127.0.0.3\"]\nproto = [\"tcp\"]\naction = \"reject\"\n\
        [[shield.acl]]\nname = \"log four\"\nsrc = [\"127.0.0.4\"]\naction = \"log\"\n\
        [[shield.acl]]\nname = \"allow the /24 of five\"\nsrc = [\"127.0.5.0/24\"]\naction = \"allow\"\n\
        [[shield.acl]]\nname = \"never reached for five\"\nsrc = [\"127.0.5.5\"]\naction = \"drop\"\n";
    let sy = Switchyard::start(&http_config(l, o.addr, shield, ""), &[l]);
    assert_eq!(get_from(l, "127.0.0.1"), Ok(200));
    let dropped = get_from(l, "127.0.0.2");
    assert!(
        matches!(
            dropped,
            Err(ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset)
        ),
        "{dropped:?}"
    );
    assert_eq!(get_from(l, "127.0.0.3"), Err(ErrorKind::ConnectionReset));
    assert_eq!(get_from(l, "127.0.0.4"), Ok(200));
    assert!(sy.wait_for_log("shield: rule \"log four\" matched 127.0.0.4"));
    assert_eq!(get_from(l, "127.0.5.5"), Ok(200), "the earlier allow wins");
    let (st, v) = api(&sy, "GET", "/api/v1/shield", None);
    assert_eq!(st, 200);
    let hits: Vec<u64> = v["global"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hits"].as_u64().unwrap())
        .collect();
    // The harness's own probe counts too.
    assert_eq!(&hits[1..], &[1, 1, 1, 1, 0], "{v}");
    assert!(hits[0] >= 5);
    let vs = &sy.stats()["vservers"][0];
    assert_eq!(vs["acl_dropped"], 1, "{vs}");
    assert_eq!(vs["acl_rejected"], 1, "{vs}");
    assert_eq!(o.requests(), 3);
}

/// 1,000 rules: the one that matches sits last; the vserver's own rules
/// run after the global ones.
#[test]
fn a_thousand_rules_and_vserver_rules() {
    let o = Origin::start("o");
    let l = free_addr();
    let mut shield = String::from("[shield]\n");
    for i in 0..999 {
        shield.push_str(&format!(
            "[[shield.acl]]\nsrc = [\"10.{}.{}.0/24\"]\ndst_port = [{}]\naction = \"drop\"\n",
            i / 250,
            i % 250,
            1000 + i
        ));
    }
    shield.push_str("[[shield.acl]]\nname = \"last\"\nsrc = [\"127.0.0.9\"]\naction = \"drop\"\n");
    let vs_acl = "[[vserver.acl]]\nsrc = [\"127.0.0.8\"]\naction = \"reject\"\n";
    let sy = Switchyard::start(&http_config(l, o.addr, &shield, vs_acl), &[l]);
    assert_eq!(get_from(l, "127.0.0.1"), Ok(200));
    assert!(get_from(l, "127.0.0.9").is_err());
    assert_eq!(get_from(l, "127.0.0.8"), Err(ErrorKind::ConnectionReset));
    let (_, v) = api(&sy, "GET", "/api/v1/shield", None);
    assert_eq!(v["global"]["rules"].as_array().unwrap().len(), 1000);
    assert_eq!(v["global"]["rules"][999]["hits"], 1);
    assert_eq!(v["vservers"]["web"]["rules"][0]["hits"], 1);
}

#[test]
fn ipv6_and_udp() {
    // IPv6 on ::1.
    let o = Origin::start("o");
    let port = free_port();
    let l6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let shield = "[shield]\n[[shield.acl]]\nsrc = [\"::1/128\"]\ndst_port = [1]\naction = \"drop\"\n[[shield.acl]]\nsrc = [\"::1/128\"]\nproto = [\"udp\"]\naction = \"drop\"\n";
    let _sy = Switchyard::start(&http_config(l6, o.addr, shield, ""), &[l6]);
    // The first rule wants port 1: this one passes.
    let r = request(l6, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    let shield = format!(
        "[shield]\n[[shield.acl]]\nsrc = [\"::1/128\"]\ndst_port = [{port}]\naction = \"drop\"\n"
    );
    let o2 = Origin::start("o2");
    let _sy2 = {
        let port2 = free_port();
        let l62: SocketAddr = format!("[::1]:{port2}").parse().unwrap();
        let shield = shield.replace(&port.to_string(), &port2.to_string());
        let sy = Switchyard::start(&http_config(l62, o2.addr, &shield, ""), &[]);
        std::thread::sleep(Duration::from_millis(300));
        let mut s = TcpStream::connect(l62).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
        assert!(b.is_empty(), "dropped");
        sy
    };
    // UDP: a datagram from a dropped source gets no answer.
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    let echo_addr = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut b = [0u8; 512];
        while let Ok((n, from)) = echo.recv_from(&mut b) {
            let _ = echo.send_to(&b[..n], from);
        }
    });
    let u = free_addr();
    let cfg = format!(
        "[[vserver]]\nname = \"u\"\nprotocol = \"udp\"\nlisten = [\"{u}\"]\ndefault_pool = \"p\"\n\
         [[vserver.acl]]\nsrc = [\"127.0.0.7\"]\naction = \"drop\"\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{echo_addr}\"\n"
    );
    let sy = Switchyard::start(&cfg, &[]);
    let ask = |from: &str| {
        let c = UdpSocket::bind(format!("{from}:0")).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        for _ in 0..3 {
            c.send_to(b"hi", u).unwrap();
            let mut b = [0u8; 16];
            if c.recv_from(&mut b).is_ok() {
                return true;
            }
        }
        false
    };
    assert!(ask("127.0.0.1"));
    assert!(!ask("127.0.0.7"));
    assert!(sy.stats()["vservers"][0]["acl_dropped"].as_u64().unwrap() >= 3);
}

/// An address list edited through the API: new connections see it at
/// once, an established one is untouched; a reload puts the file's list
/// back.
#[test]
fn lists_edited_at_run_time_and_reset_by_reload() {
    let o = Origin::start("o");
    let l = free_addr();
    let shield = "[shield]\n[shield.lists]\nblocklist = [\"198.51.100.0/24\"]\n[[shield.acl]]\nsrc = [\"@blocklist\"]\naction = \"reject\"\n";
    let cfg = http_config(l, o.addr, shield, "");
    let sy = Switchyard::start(&cfg, &[l]);
    // An established keep-alive connection from .6.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&"127.0.0.6:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    sock.connect(&l.into()).unwrap();
    let mut kept = Client::from_stream(sock.into());
    assert_eq!(kept.get("/").status, 200);
    let (st, v) = api(
        &sy,
        "PATCH",
        "/api/v1/shield/lists/blocklist",
        Some(json!({ "add": ["127.0.0.6", "127.0.0.7/32"] })),
    );
    assert_eq!((st, v["entries"].clone()), (200, json!(3)), "{v}");
    assert_eq!(get_from(l, "127.0.0.6"), Err(ErrorKind::ConnectionReset));
    assert_eq!(get_from(l, "127.0.0.7"), Err(ErrorKind::ConnectionReset));
    assert_eq!(
        kept.get("/").status,
        200,
        "the established connection goes on"
    );
    let (st, _) = api(
        &sy,
        "PATCH",
        "/api/v1/shield/lists/blocklist",
        Some(json!({ "remove": ["127.0.0.7/32"] })),
    );
    assert_eq!(st, 200);
    assert_eq!(get_from(l, "127.0.0.7"), Ok(200));
    // Bad input changes nothing.
    let (st, _) = api(
        &sy,
        "PATCH",
        "/api/v1/shield/lists/blocklist",
        Some(json!({ "add": ["not-an-ip"] })),
    );
    assert_eq!(st, 400);
    let (st, _) = api(
        &sy,
        "PATCH",
        "/api/v1/shield/lists/nolist",
        Some(json!({ "add": ["127.0.0.1"] })),
    );
    assert_eq!(st, 404);
    assert_eq!(get_from(l, "127.0.0.6"), Err(ErrorKind::ConnectionReset));
    // A reload: the file's list again.
    assert!(sy.reload_with(&cfg).0);
    assert_eq!(get_from(l, "127.0.0.6"), Ok(200));
    assert!(sy.wait_for_log("admin: anonymous (admin) from 127.0.0.1"));
}

/// Raw text to the admin API (the rules' TOML form).
fn api_text(sy: &Switchyard, method: &str, path: &str, body: &str) -> (u16, Value) {
    let r = request(
        sy.admin,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Type: application/toml\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    (
        r.status,
        serde_json::from_str(&r.body_text()).unwrap_or(Value::Null),
    )
}

/// The global rules replaced through the admin API, in TOML and in JSON:
/// new connections follow them at once, an established one goes on, the
/// counters start again, bad rules are refused with their positions and
/// change nothing, and a reload puts the file's rules back.
#[test]
fn rules_replaced_at_run_time_and_reset_by_reload() {
    let o = Origin::start("o");
    let l = free_addr();
    let shield = "[shield]\n[shield.lists]\nblocklist = [\"198.51.100.0/24\"]\n[[shield.acl]]\nname = \"file\"\nsrc = [\"@blocklist\"]\naction = \"reject\"\n";
    let cfg = http_config(l, o.addr, shield, "");
    let sy = Switchyard::start(&cfg, &[l]);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&"127.0.0.8:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    sock.connect(&l.into()).unwrap();
    let mut kept = Client::from_stream(sock.into());
    assert_eq!(kept.get("/").status, 200);
    assert_eq!(get_from(l, "127.0.0.8"), Ok(200));

    let rules = "[[acl]]\nname = \"count\"\nproto = [\"tcp\"]\naction = \"count\"\n\
                 [[acl]]\nname = \"eight\"\nsrc = [\"127.0.0.8/32\", \"@blocklist\"]\naction = \"reject\"\n";
    let (st, v) = api_text(&sy, "PUT", "/api/v1/shield/rules", rules);
    assert_eq!((st, v["rules"].clone()), (200, json!(2)), "{v}");
    assert_eq!(get_from(l, "127.0.0.8"), Err(ErrorKind::ConnectionReset));
    assert_eq!(get_from(l, "127.0.0.9"), Ok(200));
    assert_eq!(
        kept.get("/").status,
        200,
        "the established connection goes on"
    );
    let (_, g) = api(&sy, "GET", "/api/v1/shield", None);
    let names: Vec<&str> = g["global"]["rules"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["count", "eight"]);
    // Counted from zero: two connections since the replacement.
    assert_eq!(g["global"]["rules"][0]["hits"], 2, "{g}");
    assert_eq!(g["global"]["rules"][1]["hits"], 1, "{g}");

    // Bad rules: every problem, with where it is; nothing changes.
    let bad = "[[acl]]\nsrc = [\"300.1.1.1\"]\naction = \"drop\"\n[[acl]]\nsrc = [\"@nolist\"]\naction = \"nuke\"\n";
    let (st, v) = api_text(&sy, "PUT", "/api/v1/shield/rules", bad);
    assert_eq!(st, 400, "{v}");
    let e = v["error"].as_str().unwrap_or_default();
    assert!(
        e.contains("body:2:") && e.contains("body:5:") && e.contains("nolist"),
        "{e}"
    );
    assert_eq!(
        get_from(l, "127.0.0.8"),
        Err(ErrorKind::ConnectionReset),
        "unchanged"
    );
    let (st, v) = api(
        &sy,
        "PUT",
        "/api/v1/shield/rules",
        Some(json!({ "acl": [ { "name": "x", "action": "explode" } ] })),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("acl[0]:"),
        "{v}"
    );

    // JSON: the same keys.
    let (st, v) = api(
        &sy,
        "PUT",
        "/api/v1/shield/rules",
        Some(
            json!({ "acl": [ { "name": "nine", "src": ["127.0.0.9/32"], "proto": ["tcp"], "dst_port": [l.port()], "action": "reject" } ] }),
        ),
    );
    assert_eq!((st, v["rules"].clone()), (200, json!(1)), "{v}");
    assert_eq!(get_from(l, "127.0.0.9"), Err(ErrorKind::ConnectionReset));
    assert_eq!(get_from(l, "127.0.0.8"), Ok(200));

    // A reload: the file's rules again.
    assert!(sy.reload_with(&cfg).0);
    assert_eq!(get_from(l, "127.0.0.9"), Ok(200));
    let (_, g) = api(&sy, "GET", "/api/v1/shield", None);
    assert_eq!(g["global"]["rules"][0]["name"], "file", "{g}");
}

#[test]
fn check_reports_bad_rules_with_their_line() {
    let d = temp_dir("shieldcheck");
    let p = d.join("c.toml");
    std::fs::write(
        &p,
        "[[vserver]]\nname = \"w\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n\
         [shield]\n[[shield.acl]]\nsrc = [\"@nolist\"]\naction = \"drop\"\n[[shield.acl]]\ndst_port = [\"90-80\"]\naction = \"explode\"\ntcp_flags = \"syn,fun\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["check", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for want in [
        "c.toml:11:8: shield: no address list \"nolist\"",
        "c.toml:14:13: shield: a port is 0-65535, or a range \"LOW-HIGH\" with LOW <= HIGH",
        "c.toml:15:10: shield: unknown action \"explode\"",
        "c.toml:16:13: shield: tcp_flags: unknown flag \"fun\"",
    ] {
        assert!(err.contains(want), "{want} in:\n{err}");
    }
}
