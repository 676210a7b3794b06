//! `build`'s unit tests.
use super::super::parse;

const GOOD: &str = r#"
[[vserver]]
name = "web"
listen = ["127.0.0.1:18080"]
default_pool = "app"

[[vserver.policy]]
match = { path_prefix = "/images/" }
action = { pool = "img" }

[[pool]]
name = "app"
[[pool.member]]
address = "127.0.0.1:9001"

[[pool]]
name = "img"
algorithm = "consistent-hash"
hash_key = "uri"
[[pool.member]]
address = "127.0.0.1:9002"
"#;

#[test]
fn good_file_builds() {
    let s = parse("t.toml", GOOD, None).unwrap();
    assert_eq!(s.vservers.len(), 1);
    assert_eq!(s.pools.len(), 2);
    assert_eq!(s.vservers[0].policies.len(), 1);
}

#[test]
fn unknown_pool_is_located() {
    let bad = GOOD.replace(
        "action = { pool = \"img\" }",
        "action = { pool = \"imgs\" }",
    );
    let e = parse("t.toml", &bad, None).unwrap_err();
    let first = &e.0[0];
    assert_eq!((first.line, first.col), (9, 10), "{e}");
    assert!(first.message.contains("\"imgs\" is not defined"), "{e}");
}

#[test]
fn a_pool_over_the_member_limit_is_refused() {
    let n = crate::balance::MAX_POOL_MEMBERS;
    let members = |count: usize| -> String {
        (0..count)
            .map(|i| {
                format!(
                    "[[pool.member]]\naddress = \"127.0.{}.{}:80\"\n",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect()
    };
    let base = "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n";
    assert!(parse("t.toml", &format!("{base}{}", members(n)), None).is_ok());
    let e = parse("t.toml", &format!("{base}{}", members(n + 1)), None).unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!(
        e.to_string(),
        format!("t.toml:6:8: pool \"p\" has {} members; a pool has at most {n} (split it into several pools)", n + 1)
    );
}

#[test]
fn source_address_is_an_address_or_client_and_client_is_for_l4_only() {
    let pool = |extra: &str| {
        format!("[[pool]]\nname = \"p\"\n{extra}\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n")
    };
    let vs = |proto: &str| {
        format!("[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n")
    };
    let local = parse(
        "t.toml",
        &format!("{}{}", vs("http"), pool("source_address = \"127.0.0.9\"")),
        None,
    )
    .unwrap();
    assert_eq!(
        local.pools[0].source_address,
        Some(super::super::snapshot::SourceAddress::Local(
            "127.0.0.9".parse().unwrap()
        ))
    );
    let tcp = parse(
        "t.toml",
        &format!("{}{}", vs("tcp"), pool("source_address = \"client\"")),
        None,
    )
    .unwrap();
    assert_eq!(
        tcp.pools[0].source_address,
        Some(super::super::snapshot::SourceAddress::Client)
    );
    let e = parse(
        "t.toml",
        &format!("{}{}", vs("tcp"), pool("source_address = \"clients\"")),
        None,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("source_address \"clients\": use an IP address of this host or \"client\""),
        "{e}"
    );
    let e = parse(
        "t.toml",
        &format!("{}{}", vs("http"), pool("source_address = \"client\"")),
        None,
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "t.toml:2:8: vserver \"v\": pool \"p\" connects from the client's address"
        ),
        "{e}"
    );
    // A pool an HTTP vserver reaches only through a policy is checked too.
    let by_policy = format!(
        "{}[[vserver.policy]]\naction = {{ pool = \"pp\" }}\n{}[[pool]]\nname = \"pp\"\nproxy_protocol = \"v1\"\nprotocol = \"h2\"\n[[pool.member]]\naddress = \"127.0.0.1:3\"\n",
        vs("http"),
        pool("")
    );
    let e = parse("t.toml", &by_policy, None).unwrap_err();
    assert!(
        e.to_string()
            .contains("pool \"pp\" sends a PROXY protocol header to h2 members"),
        "{e}"
    );
}

#[test]
fn l4_vservers_refuse_what_only_http_or_the_other_transport_does() {
    let cfg = |proto: &str, vs_extra: &str, pool_extra: &str| {
        format!(
            "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n{vs_extra}\n[[pool]]\nname = \"p\"\n{pool_extra}\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n"
        )
    };
    let refused = [
        cfg("tcp", "[vserver.l4]\nper_datagram = true", ""),
        cfg("tcp", "[vserver.l4]\nmax_sessions = 10", ""),
        cfg("udp", "[vserver.l4]\nzero_copy = \"copy\"", ""),
        cfg("udp", "[vserver.l4]\nclient_hello_timeout = \"1s\"", ""),
        cfg("udp", "[vserver.socket]\nnodelay = true", ""),
        cfg("udp", "", "proxy_protocol = \"v1\""),
        cfg("udp", "", "[pool.tls]\nverify = false"),
        cfg("tcp", "", "protocol = \"h2\""),
        cfg(
            "udp",
            "",
            "persistence = { type = \"cookie\", cookie = \"S\" }",
        ),
        cfg(
            "tcp",
            "",
            "algorithm = \"consistent-hash\"\nhash_key = \"header:x-user\"",
        ),
        cfg(
            "tcp",
            "[[vserver.sni_route]]\nnames = [\"a.test\"]\npool = \"p\"",
            "[pool.tls]\nverify = false",
        ),
    ];
    let says = [
        "[vserver.l4] per_datagram is for udp vservers",
        "[vserver.l4] max_sessions is for udp vservers",
        "[vserver.l4] zero_copy is for tcp vservers",
        "[vserver.l4] client_hello_timeout is for tcp vservers",
        "[vserver.socket] nodelay is a TCP option",
        "sends PROXY v1, a text header for streams",
        "a udp vserver has no TLS (no DTLS)",
        "protocol = \"h2\", which is what HTTP members speak",
        "persists by cookie, which needs HTTP",
        "hashes a part of an HTTP request",
        "TLS inside TLS",
    ];
    for (c, want) in refused.iter().zip(says) {
        let e = parse("t.toml", c, None).unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    for (c, want) in [
        (
            cfg(
                "udp",
                "[[vserver.limit]]\nname = \"l\"\nconn_rate = \"10/1s\"",
                "",
            ),
            "a udp vserver has no connections or requests to limit",
        ),
        (
            cfg(
                "tcp",
                "[[vserver.limit]]\nname = \"l\"\nreq_rate = \"10/1s\"",
                "",
            ),
            "req_rate, req_cur and keys from requests are HTTP",
        ),
        (
            cfg("tcp", "[[vserver.limit]]\nname = \"l\"\nreq_cur = 10", ""),
            "req_rate, req_cur and keys from requests are HTTP",
        ),
    ] {
        let e = parse("t.toml", &c, None).unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    // What they may have.
    for ok in [
        cfg(
            "udp",
            "[vserver.l4]\nper_datagram = true\n[vserver.socket]\nfreebind = true",
            "proxy_protocol = \"v2\"",
        ),
        cfg(
            "tcp",
            "[vserver.l4]\nzero_copy = \"copy\"\n[[vserver.limit]]\nname = \"l\"\nconn_cur = 5",
            "algorithm = \"consistent-hash\"\nhash_key = \"source-ip\"\n[pool.tls]\nverify = false",
        ),
    ] {
        assert!(parse("t.toml", &ok, None).is_ok(), "{ok}");
    }
}

#[test]
fn bad_algorithm_lists_allowed() {
    let bad = GOOD.replace("consistent-hash", "rr");
    let e = parse("t.toml", &bad, None).unwrap_err();
    assert!(e.to_string().starts_with("t.toml:18:13:"), "{e}");
    assert!(e.to_string().contains("round-robin"), "{e}");
}

#[test]
fn bad_duration_is_located() {
    let bad = GOOD.replace(
        "name = \"app\"\n",
        "name = \"app\"\nslow_start = \"10 parsecs\"\n",
    );
    let e = parse("t.toml", &bad, None).unwrap_err();
    assert!(e.to_string().starts_with("t.toml:13:14:"), "{e}");
}

#[test]
fn pool_tls_verify_false_warns_and_unknown_keys_are_refused() {
    let tls = GOOD.replace(
        "name = \"app\"\n",
        "name = \"app\"\n[pool.tls]\nverify = false\nsni = \"api.internal\"\n",
    );
    let s = parse("t.toml", &tls, None).unwrap();
    let t = s.pools[0].tls.as_ref().expect("tls built");
    assert!(!t.verify);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let w = s.warnings[0].as_warning();
    assert!(
        w.starts_with("t.toml:14:10: warning: pool \"app\" tls: verify = false"),
        "{w}"
    );
    // Unchanged settings: the built config is handed to the next snapshot.
    let again = parse("t.toml", &tls, Some(&s)).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        t,
        again.pools[0].tls.as_ref().expect("tls built")
    ));
    let changed = parse(
        "t.toml",
        &tls.replace("api.internal", "b.internal"),
        Some(&s),
    )
    .unwrap();
    assert!(!std::sync::Arc::ptr_eq(
        t,
        changed.pools[0].tls.as_ref().expect("tls built")
    ));

    let bad = tls.replace("verify = false", "verify = false\nciphers = []");
    let e = parse("t.toml", &bad, None).unwrap_err();
    assert!(e.to_string().starts_with("t.toml:15:1:"), "{e}");
    assert!(e.to_string().contains("unknown field `ciphers`"), "{e}");

    let bad = tls.replace("verify = false", "verify = false\nkey = \"k.pem\"");
    let e = parse("t.toml", &bad, None).unwrap_err();
    assert!(e.to_string().starts_with("t.toml:15:7:"), "{e}");
    assert!(e.to_string().contains("key needs cert"), "{e}");
}

#[test]
fn state_survives_reload() {
    let a = parse("t.toml", GOOD, None).unwrap();
    let b = parse("t.toml", GOOD, Some(&a)).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &a.pools[0].members.load()[0].state,
        &b.pools[0].members.load()[0].state
    ));
    assert_eq!(b.generation, 2);
}

#[test]
fn untrusted_wait_is_for_tcp_vservers() {
    let cfg = |proto: &str, wait: &str| {
        format!(
            "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n\
             [vserver.proxy_protocol]\ntrusted = [\"10.0.0.0/8\"]\n{wait}\n\
             [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n"
        )
    };
    let b = parse("t.toml", &cfg("tcp", "untrusted_wait = \"2s\""), None).expect("tcp");
    let ap = b.vservers[0].accept_proxy.as_ref().expect("proxy_protocol");
    assert_eq!(ap.untrusted_wait_ms, 2_000);
    let b = parse("t.toml", &cfg("tcp", ""), None).expect("tcp");
    let ap = b.vservers[0].accept_proxy.as_ref().expect("proxy_protocol");
    assert_eq!(ap.untrusted_wait_ms, 500, "the default");
    for proto in ["http", "udp"] {
        let e = parse("t.toml", &cfg(proto, "untrusted_wait = \"1s\""), None).unwrap_err();
        assert!(
            e.to_string().contains("untrusted_wait is for tcp vservers"),
            "{proto}: {e}"
        );
    }
}

#[test]
fn on_member_down_is_a_udp_choice_of_three() {
    use crate::config::snapshot::OnMemberDown;
    let cfg = |proto: &str, l4: &str| {
        format!(
            "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n\
             [vserver.l4]\n{l4}\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n"
        )
    };
    for (l4, want) in [
        ("", OnMemberDown::Reassign),
        ("on_member_down = \"reassign\"", OnMemberDown::Reassign),
        ("on_member_down = \"close\"", OnMemberDown::Close),
        ("on_member_down = \"keep\"", OnMemberDown::Keep),
    ] {
        let b = parse("t.toml", &cfg("udp", l4), None).expect(l4);
        let got = b.vservers[0].l4.as_ref().expect("l4").on_member_down;
        assert_eq!(got, want, "{l4:?}");
    }
    let e = parse("t.toml", &cfg("udp", "on_member_down = \"drop\""), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("on_member_down \"drop\": use \"reassign\", \"close\" or \"keep\""),
        "{e}"
    );
    assert!(e.to_string().contains("t.toml:"), "with its position: {e}");
    let e = parse("t.toml", &cfg("tcp", "on_member_down = \"keep\""), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("[vserver.l4] on_member_down is for udp vservers"),
        "{e}"
    );
}

/// A folder of its own for a test's files.
fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sy-unit-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_script_is_compiled_at_build_and_its_errors_are_located() {
    let dir = scratch("script");
    let cfg = dir.join("t.toml");
    let cfg = cfg.to_str().unwrap();
    let with = |file: &str, extra: &str| {
        GOOD.replace(
            "default_pool = \"app\"\n",
            &format!("default_pool = \"app\"\n[vserver.script]\nfile = \"{file}\"\n{extra}"),
        )
    };
    std::fs::write(dir.join("ok.lua"), "function on_request(r) end\n").unwrap();
    let s = parse(cfg, &with("ok.lua", ""), None).unwrap();
    let vs = s.vservers[0].script.as_ref().expect("a script");
    assert_eq!(vs.script.pools, ["app", "img"]);
    assert_eq!(vs.pools.len(), 2);
    assert_eq!(vs.script.limits.max_instructions, 1_000_000);
    assert!(vs.script.events.request && !vs.script.events.response);

    // A syntax error: at `file`'s line, as FILE:LINE: message.
    std::fs::write(
        dir.join("bad.lua"),
        "function on_request(r)\n  x = = 1\nend\n",
    )
    .unwrap();
    let e = parse(cfg, &with("bad.lua", ""), None).unwrap_err();
    assert_eq!(e.0[0].line, 7, "{e}");
    assert!(e.0[0].message.contains("script bad.lua:2:"), "{e}");

    let e = parse(cfg, &with("ok.lua", "max_memory = 1\n"), None).unwrap_err();
    assert!(
        e.0[0]
            .message
            .contains("script.max_memory 1 is out of range"),
        "{e}"
    );

    // A tcp vserver runs the L4 events only.
    let tcp = with("ok.lua", "").replace(
        "listen = [\"127.0.0.1:18080\"]",
        "listen = [\"127.0.0.1:18080\"]\nprotocol = \"tcp\"",
    );
    let tcp = tcp.replace(
        "[[vserver.policy]]\nmatch = { path_prefix = \"/images/\" }\naction = { pool = \"img\" }\n",
        "",
    );
    let e = parse(cfg, &tcp, None).unwrap_err();
    assert!(
        e.to_string()
            .contains("a tcp vserver runs on_accept, on_client_hello (with [vserver.tls]), on_client_data, on_server_data and on_close"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pool_of_the_cluster_lists_no_member_and_has_none_until_some_are_published() {
    let cluster = GOOD.replace(
        "name = \"app\"\n[[pool.member]]\naddress = \"127.0.0.1:9001\"",
        "name = \"app\"\ncluster_members = true",
    );
    // Not a cluster node here: nothing published, no member (503s).
    let s = parse("t.toml", &cluster, None).unwrap();
    let app = s.pools.iter().find(|p| p.name == "app").unwrap();
    assert!(app.members.load().is_empty());
    let both = GOOD.replace(
        "name = \"app\"\n[[pool.member]]",
        "name = \"app\"\ncluster_members = true\n[[pool.member]]",
    );
    let e = parse("t.toml", &both, None).unwrap_err().to_string();
    assert!(e.contains("takes its members from the cluster"), "{e}");
}
