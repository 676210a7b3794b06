//! Path normalization end to end: a `path_prefix = "/admin"` policy holds
//! for every spelling of `/admin` a client can send, over HTTP/1.1 and
//! HTTP/2, and the member gets the path the rule judged (or the original
//! bytes on a vserver that asks for them).
//!
//! Each row of `TABLE` is asserted twice: at the policy (the status the
//! client gets) and at the member (the request line that arrived, or that
//! nothing did).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;

/// (what the client sends, the status, the path the member gets).
/// 403: the policy refused it; 400: normalization refused it.
const TABLE: &[(&str, u16, Option<&str>)] = &[
    ("/admin", 403, None),
    ("/admin/", 403, None),
    ("/admin/x", 403, None),
    ("/admin;x", 403, None),
    ("/admin?x=1", 403, None),
    // dot segments
    ("/x/../admin", 403, None),
    ("/./admin", 403, None),
    ("/x/y/../../admin", 403, None),
    ("/x/./../admin", 403, None),
    ("/x/../../../../admin", 403, None),
    ("/admin/./x", 403, None),
    ("/admin/x/..", 403, None),
    ("/%61dmin/../admin", 403, None),
    // slashes
    ("//admin", 403, None),
    ("///admin", 403, None),
    ("/x//..//admin", 403, None),
    // percent-encoded unreserved characters, any hex case
    ("/%61dmin", 403, None),
    ("/%61%64%6d%69%6e", 403, None),
    ("/%61%64%6D%69%6E", 403, None),
    ("/x/../%61dmin", 403, None),
    // encoded dots
    ("/x/%2e%2e/admin", 403, None),
    ("/x/%2E%2E/admin", 403, None),
    ("/x/.%2e/admin", 403, None),
    ("/x/%2e./admin", 403, None),
    ("/x/.%2E/admin", 403, None),
    ("/%2e/admin", 403, None),
    ("/%2E/admin", 403, None),
    // path parameters on dot segments (Tomcat and Jetty resolve them)
    ("/x/..;/admin", 403, None),
    ("/x/..;a=b/admin", 403, None),
    ("/.;/admin", 403, None),
    // encoded slashes and backslashes: refused by default
    ("/x/..%2fadmin", 400, None),
    ("/x/..%2Fadmin", 400, None),
    ("/x/%2e%2e%2fadmin", 400, None),
    ("/%2fadmin", 400, None),
    ("/admin%2f", 400, None),
    ("/x/..%5cadmin", 400, None),
    ("/x/..%5Cadmin", 400, None),
    ("/x\\..\\admin", 400, None),
    // NUL, malformed escapes, IIS %u, overlong UTF-8
    ("/admin%00", 400, None),
    ("/adm%in", 400, None),
    ("/adm%6Yin", 400, None),
    ("/%%36%31dmin", 400, None),
    ("/%u0061dmin", 400, None),
    ("/x/%c0%af../admin", 400, None),
    ("/x%c0%afadmin", 400, None),
    ("/x/%e0%80%afadmin", 400, None),
    // double encoding is decoded once: not /admin to the rule or a member
    ("/x/%252e%252e/admin", 200, Some("/x/%252e%252e/admin")),
    ("/%2561dmin", 200, Some("/%2561dmin")),
    // what is not /admin reaches the member in its normal form
    ("/admin/..", 200, Some("/")),
    ("/x/..?/admin", 200, Some("/?/admin")),
    ("/ADMIN", 200, Some("/ADMIN")),
    ("/x/../public", 200, Some("/public")),
    ("/a//b/./c", 200, Some("/a/b/c")),
    ("/%7euser/%3b", 200, Some("/~user/%3B")),
];

fn config(listens: &[(SocketAddr, &str)], origin: &Origin) -> String {
    let mut s = String::from("[global]\nworkers = 1\n\n");
    for (i, (listen, extra)) in listens.iter().enumerate() {
        s.push_str(&format!(
            "[[vserver]]\nname = \"v{i}\"\nlisten = [\"{listen}\"]\nh2c = true\ndefault_pool = \"p\"\n{extra}\n\
             [[vserver.policy]]\nmatch = {{ path_prefix = \"/admin\" }}\naction = {{ status = 403, body = \"denied\\n\" }}\n\n"
        ));
    }
    s.push_str(&format!(
        "[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        origin.addr
    ));
    s
}

/// The request line the member got for the last request, if any.
fn arrived(origin: &Origin) -> Option<String> {
    let seen = origin.seen();
    let last = seen.last()?;
    let line = last.request_line();
    Some(line.split(' ').nth(1).unwrap_or("").to_string())
}

fn h1(addr: SocketAddr, path: &str) -> u16 {
    let mut c = Client::connect(addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes());
    c.read_response(false).map_or(0, |r| r.status)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// One HTTP/2 (h2c prior knowledge) GET per path, on one connection;
/// None for a path the `http` crate will not put in `:path`.
fn h2(addr: SocketAddr, origin: &Origin, paths: &[&str]) -> Vec<Option<(u16, Option<String>)>> {
    runtime().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(conn);
        let mut out = Vec::new();
        for p in paths {
            let Ok(uri) = http::Uri::try_from(format!("http://test{p}")) else {
                out.push(None);
                continue;
            };
            // The http crate keeps the path as given: check it did.
            if uri.path_and_query().map(|pq| pq.as_str()) != Some(p) {
                out.push(None);
                continue;
            }
            origin.clear();
            let req = http::Request::get(uri).body(()).expect("request");
            let mut s = send.clone().ready().await.expect("ready");
            let (resp, _) = s.send_request(req, true).expect("send");
            let resp = resp.await.expect("response");
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            while let Some(c) = body.data().await {
                let c: Bytes = c.expect("data");
                let _ = body.flow_control().release_capacity(c.len());
            }
            out.push(Some((status, arrived(origin))));
        }
        out
    })
}

#[test]
fn every_spelling_of_a_protected_path_meets_the_policy_over_h1_and_h2() {
    let origin = Origin::start("o");
    let listen = free_addr();
    let sy = Switchyard::start(&config(&[(listen, "")], &origin), &[listen]);
    assert!(TABLE.len() >= 50, "the table is the test");
    let before = sy.stats();
    for (path, status, member) in TABLE {
        origin.clear();
        assert_eq!(h1(listen, path), *status, "HTTP/1.1 {path}");
        assert_eq!(
            arrived(&origin).as_deref(),
            *member,
            "HTTP/1.1 {path}: at the member"
        );
    }
    let refused = TABLE.iter().filter(|r| r.1 == 400).count() as u64;
    let bad = |s: &serde_json::Value| s["vservers"][0]["bad_requests"].as_u64().unwrap_or(0);
    assert_eq!(
        bad(&sy.stats()) - bad(&before),
        refused,
        "each 400 is counted"
    );

    let paths: Vec<&str> = TABLE.iter().map(|r| r.0).collect();
    let got = h2(listen, &origin, &paths);
    let mut over_h2 = 0;
    for ((path, status, member), got) in TABLE.iter().zip(got) {
        let Some((s, m)) = got else { continue };
        over_h2 += 1;
        assert_eq!(s, *status, "HTTP/2 {path}");
        assert_eq!(m.as_deref(), *member, "HTTP/2 {path}: at the member");
    }
    assert!(over_h2 >= 45, "only {over_h2} spellings went over HTTP/2");
}

#[test]
fn settings_keep_decode_forward_original_and_case_insensitive_match() {
    let origin = Origin::start("o");
    let (original, decode, keep, nocase, merge_off) = (
        free_addr(),
        free_addr(),
        free_addr(),
        free_addr(),
        free_addr(),
    );
    let cfg = config(
        &[
            (original, "[vserver.normalize]\nforward = \"original\"\n"),
            (decode, "[vserver.normalize]\nescaped_slashes = \"decode\"\n"),
            (
                keep,
                "[vserver.normalize]\nescaped_slashes = \"keep\"\nbad_encoding = \"keep\"\n",
            ),
            (merge_off, "[vserver.normalize]\nmerge_slashes = false\n"),
        ],
        &origin,
    ) + &format!(
        "[[vserver]]\nname = \"nocase\"\nlisten = [\"{nocase}\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/admin\", case = \"insensitive\" }}\naction = {{ status = 403 }}\n"
    );
    let _sy = Switchyard::start(&cfg, &[original, decode, keep, nocase, merge_off]);
    let at = |addr: SocketAddr, path: &str| {
        origin.clear();
        let s = h1(addr, path);
        (s, arrived(&origin))
    };
    // The rule reads the normalized path; the member gets the bytes sent.
    assert_eq!(at(original, "/x/../admin"), (403, None));
    assert_eq!(at(original, "/%61dmin"), (403, None));
    assert_eq!(
        at(original, "/x/../public/%7e"),
        (200, Some("/x/../public/%7e".into()))
    );
    assert_eq!(at(original, "/x/..%2fadmin"), (400, None));
    // decode: %2F, %5C and \ are separators before dot segments go.
    assert_eq!(at(decode, "/x/..%2fadmin"), (403, None));
    assert_eq!(at(decode, "/x\\..\\admin"), (403, None));
    assert_eq!(at(decode, "/x/..%5Cadmin"), (403, None));
    assert_eq!(at(decode, "/x/..%2Fpublic"), (200, Some("/public".into())));
    // keep: they stay, and are not separators.
    assert_eq!(at(keep, "/a%2fb"), (200, Some("/a%2Fb".into())));
    assert_eq!(
        at(keep, "/x/..%2fadmin"),
        (200, Some("/x/..%2Fadmin".into()))
    );
    assert_eq!(at(keep, "/a%zz"), (200, Some("/a%25zz".into())));
    assert_eq!(at(keep, "/a%00"), (200, Some("/a%00".into())));
    // merge_slashes off: `//` stays, dot segments still go.
    assert_eq!(at(merge_off, "//a//b"), (200, Some("//a//b".into())));
    assert_eq!(at(merge_off, "/x/../admin"), (403, None));
    // case = "insensitive" (IIS members).
    for p in ["/ADMIN", "/Admin/x", "/%41dmin", "/x/../aDmIn"] {
        assert_eq!(at(nocase, p), (403, None), "{p}");
    }
    assert_eq!(at(nocase, "/public"), (200, Some("/public".into())));
}

#[test]
fn the_access_log_shows_the_normalized_and_the_received_target() {
    let origin = Origin::start("o");
    let listen = free_addr();
    let dir = temp_dir("norm-log");
    let log = dir.join("access.log");
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\
         [vserver.access_log]\nformat = \"$request_uri $request_uri_raw $status\"\nto = \"file:{}\"\n\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        log.display(),
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    assert_eq!(h1(listen, "/a/./b/../%63?q=%2e"), 200);
    assert_eq!(h1(listen, "/plain"), 200);
    let mut text = String::new();
    assert!(
        eventually(Duration::from_secs(5), || {
            text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines().count() >= 2
        }),
        "no access log lines: {text:?}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "/a/c?q=%2e /a/./b/../%63?q=%2e 200");
    assert_eq!(lines[1], "/plain /plain 200");
}

#[test]
fn check_refuses_unknown_normalize_settings_with_their_position() {
    let dir = temp_dir("norm-check");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[vserver]]\nname = \"web\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n\
         [vserver.normalize]\nescaped_slashes = \"allow\"\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n",
    )
    .expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("utf-8")]);
    assert_ne!(code, Some(0), "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains(":6:") && all.contains("escaped_slashes \"allow\""),
        "{all}"
    );
}

#[test]
fn the_cache_key_and_per_path_limits_read_the_normalized_path() {
    let origin = Origin::start("o");
    origin.set(|b| {
        b.raw_response = Some(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 3\r\n\r\nok\n"
                .to_vec(),
        )
    });
    let (cached, limited) = (free_addr(), free_addr());
    let cfg = format!(
        "[global]\nworkers = 1\n\
         [[vserver]]\nname = \"cached\"\nlisten = [\"{cached}\"]\ndefault_pool = \"p\"\n[vserver.cache]\nenabled = true\n\n\
         [[vserver]]\nname = \"limited\"\nlisten = [\"{limited}\"]\ndefault_pool = \"p\"\n\
         [[vserver.limit]]\nname = \"per-path\"\nkey = \"path\"\nreq_rate = \"2/1m\"\naction = \"reject\"\n\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[cached, limited]);
    // One stored object answers every spelling of its path.
    let statuses: Vec<String> = ["/c/x", "/c/./x", "/c/%78", "//c//x", "/c/y/../x"]
        .iter()
        .map(|p| {
            let r = get(cached, p);
            assert_eq!(r.status, 200, "{p}");
            r.header("cache-status").unwrap_or("").to_string()
        })
        .collect();
    assert!(statuses[0].contains("fwd=miss"), "{statuses:?}");
    assert!(
        statuses[1..].iter().all(|s| s.ends_with("; hit")),
        "{statuses:?}"
    );
    assert_eq!(origin.requests(), 1, "{statuses:?}");
    // A per-path limit counts every spelling against one key.
    assert_eq!(get(limited, "/l/a").status, 200);
    assert_eq!(get(limited, "/l/./a").status, 200);
    assert_eq!(get(limited, "/l/%61").status, 429);
    assert_eq!(get(limited, "/l/b").status, 200);
}
