//! Virtual servers and content switching end to end: six virtual servers
//! side by side in one configuration, every match kind, every action, header
//! edits in both directions, and an IPv6 listener.

mod common;
use common::*;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Pools of the fixture; each has one origin of the same name.
const POOLS: &[&str] = &[
    "api", "www", "ab", "d1", "auth", "static", "users", "d2", "write", "canary", "cli", "ids",
    "debug", "d3", "v2", "beta", "internal", "and", "d4", "app5", "d6",
];

struct Fixture {
    origins: HashMap<&'static str, Origin>,
    /// Listen addresses by vserver name.
    l: HashMap<&'static str, SocketAddr>,
    sy: Switchyard,
}

impl Fixture {
    fn origin(&self, pool: &str) -> &Origin {
        &self.origins[pool]
    }
}

fn fixture() -> Fixture {
    let origins: HashMap<&'static str, Origin> =
        POOLS.iter().map(|p| (*p, Origin::start(p))).collect();
    let names = ["hosts", "paths", "methods", "query", "actions", "headers"];
    let l: HashMap<&'static str, SocketAddr> = names.iter().map(|n| (*n, free_addr())).collect();
    let mut cfg = format!(
        r#"[global]
workers = 2

[[vserver]]
name = "hosts"
listen = ["{hosts}"]
default_pool = "d1"
[[vserver.policy]]
name = "api"
match = {{ host = "api.example.com" }}
action = {{ pool = "api" }}
[[vserver.policy]]
name = "wildcard"
match = {{ host = "*.example.com" }}
action = {{ pool = "www" }}
[[vserver.policy]]
match = {{ host = ["a.test", "b.test"] }}
action = {{ pool = "ab" }}

[[vserver]]
name = "paths"
listen = ["{paths}"]
default_pool = "d2"
[[vserver.policy]]
match = {{ path = "/login" }}
action = {{ pool = "auth" }}
[[vserver.policy]]
match = {{ path_prefix = ["/static/", "/assets/"] }}
action = {{ pool = "static" }}
[[vserver.policy]]
match = {{ path_regex = "^/users/[0-9]+$" }}
action = {{ pool = "users" }}

[[vserver]]
name = "methods"
listen = ["{methods}"]
default_pool = "d3"
[[vserver.policy]]
match = {{ method = ["POST", "PUT"] }}
action = {{ pool = "write" }}
[[vserver.policy]]
match = {{ header = {{ name = "X-Env", value = "canary" }} }}
action = {{ pool = "canary" }}
[[vserver.policy]]
match = {{ header = {{ name = "User-Agent", value_prefix = "curl/" }} }}
action = {{ pool = "cli" }}
[[vserver.policy]]
match = {{ header = {{ name = "X-Id", value_regex = "^[a-f0-9]{{8}}$" }} }}
action = {{ pool = "ids" }}
[[vserver.policy]]
match = {{ header = {{ name = "X-Debug" }} }}
action = {{ pool = "debug" }}

[[vserver]]
name = "query"
listen = ["{query}"]
default_pool = "d4"
[[vserver.policy]]
match = {{ query = {{ name = "version", value = "2" }} }}
action = {{ pool = "v2" }}
[[vserver.policy]]
match = {{ query = {{ name = "beta" }} }}
action = {{ pool = "beta" }}
[[vserver.policy]]
match = {{ source = "127.0.0.2/32" }}
action = {{ pool = "internal" }}
[[vserver.policy]]
match = {{ path_prefix = "/both", method = "GET", query = {{ name = "x" }} }}
action = {{ pool = "and" }}

[[vserver]]
name = "actions"
listen = ["{actions}"]
[[vserver.policy]]
match = {{ path = "/old" }}
action = {{ redirect = "https://new.example.com/", status = 301 }}
[[vserver.policy]]
match = {{ path = "/temp" }}
action = {{ redirect = "/elsewhere" }}
[[vserver.policy]]
match = {{ path = "/maintenance" }}
action = {{ status = 503, body = "down for maintenance", content_type = "text/html" }}
[[vserver.policy]]
match = {{ path_prefix = "/app/" }}
action = {{ pool = "app5" }}

[[vserver]]
name = "headers"
listen = ["{headers}"]
default_pool = "d6"
request_headers = {{ set = {{ X-Env = "prod" }}, add = {{ X-Added = "1" }}, remove = ["X-Secret"] }}
response_headers = {{ add = {{ X-Frame-Options = "DENY" }} }}
[[vserver.policy]]
name = "mask"
match = {{ path_prefix = "/mask" }}
response_headers = {{ set = {{ X-Origin = "masked" }} }}
[[vserver.policy]]
name = "strip"
match = {{ path_prefix = "/mask/strip" }}
request_headers = {{ add = {{ X-Policy = "strip" }}, set = {{ X-Env = "stripped" }} }}
response_headers = {{ remove = ["X-Frame-Options"] }}
"#,
        hosts = l["hosts"],
        paths = l["paths"],
        methods = l["methods"],
        query = l["query"],
        actions = l["actions"],
        headers = l["headers"],
    );
    for p in POOLS {
        cfg.push_str(&format!(
            "\n[[pool]]\nname = \"{p}\"\n[[pool.member]]\naddress = \"{}\"\n",
            origins[p].addr
        ));
    }
    let listen: Vec<SocketAddr> = l.values().copied().collect();
    let sy = Switchyard::start(&cfg, &listen);
    Fixture { origins, l, sy }
}

/// GET `path` on vserver `vs` with extra headers; the X-Origin that answered.
fn who(f: &Fixture, vs: &str, path: &str, headers: &str) -> String {
    let r = get_with(f.l[vs], path, headers);
    assert_eq!(r.status, 200, "{vs} {path}: {}", r.body_text());
    origin_of(&r)
}

fn get_host(l: SocketAddr, path: &str, h: &str) -> Response {
    request(
        l,
        &format!("GET {path} HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n"),
    )
}

#[test]
fn host_policies() {
    let f = fixture();
    let l = f.l["hosts"];
    let by_host = |h: &str| origin_of(&get_host(l, "/", h));
    assert_eq!(by_host("api.example.com"), "api");
    assert_eq!(by_host("API.Example.COM:8080"), "api");
    assert_eq!(by_host("shop.example.com"), "www");
    assert_eq!(by_host("a.b.example.com"), "www");
    assert_eq!(by_host("example.com"), "d1");
    assert_eq!(by_host("badexample.com"), "d1");
    assert_eq!(by_host("a.test"), "ab");
    assert_eq!(by_host("b.test"), "ab");
    assert_eq!(by_host("c.test"), "d1");
    // An absolute-form target's authority is the host.
    let r = request(
        l,
        "GET http://api.example.com/x HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(origin_of(&r), "api");
}

#[test]
fn path_policies() {
    let f = fixture();
    let p = |path: &str| who(&f, "paths", path, "");
    assert_eq!(p("/login"), "auth");
    assert_eq!(p("/login?next=/home"), "auth");
    assert_eq!(p("/login/"), "d2");
    assert_eq!(p("/loginx"), "d2");
    assert_eq!(p("/static/app.css"), "static");
    assert_eq!(p("/assets/logo.png"), "static");
    assert_eq!(p("/static"), "d2");
    assert_eq!(p("/users/42"), "users");
    assert_eq!(p("/users/42?tab=1"), "users");
    assert_eq!(p("/users/abc"), "d2");
    assert_eq!(p("/users/42/edit"), "d2");
    assert_eq!(p("/"), "d2");
    // The member gets the original target, query included.
    assert_eq!(
        f.origin("users")
            .seen()
            .last()
            .expect("seen")
            .request_line(),
        "GET /users/42?tab=1 HTTP/1.1"
    );
}

#[test]
fn method_and_header_policies() {
    let f = fixture();
    let l = f.l["methods"];
    let post = request(
        l,
        "POST /form HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    assert_eq!(origin_of(&post), "write");
    assert_eq!(f.origin("write").seen().last().expect("seen").body, b"abc");
    let put = request(
        l,
        "PUT /form HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(origin_of(&put), "write");
    let h = |headers: &str| who(&f, "methods", "/", headers);
    assert_eq!(h(""), "d3");
    assert_eq!(h("X-Env: canary\r\n"), "canary");
    assert_eq!(h("x-env: canary\r\n"), "canary");
    assert_eq!(h("X-Env: canary-2\r\n"), "d3");
    assert_eq!(h("User-Agent: curl/8.5.0\r\n"), "cli");
    assert_eq!(h("User-Agent: Mozilla/5.0 curl/8\r\n"), "d3");
    assert_eq!(h("X-Id: deadbeef\r\n"), "ids");
    assert_eq!(h("X-Id: DEADBEEF\r\n"), "d3");
    assert_eq!(h("X-Id: deadbeef0\r\n"), "d3");
    assert_eq!(h("X-Debug: 1\r\n"), "debug");
    assert_eq!(h("X-Debug:\r\n"), "debug");
    // Policy order: the method policy comes first.
    let r = request(
        l,
        "POST / HTTP/1.1\r\nHost: t\r\nX-Env: canary\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(origin_of(&r), "write");
}

#[test]
fn query_and_source_policies() {
    let f = fixture();
    let q = |path: &str| who(&f, "query", path, "");
    assert_eq!(q("/?version=2"), "v2");
    assert_eq!(q("/x?a=1&version=2&b=3"), "v2");
    assert_eq!(q("/?version=20"), "d4");
    assert_eq!(q("/?myversion=2"), "d4");
    assert_eq!(q("/?beta"), "beta");
    assert_eq!(q("/?beta=yes"), "beta");
    assert_eq!(q("/?betamax=1"), "d4");
    // Every field of a match must hold.
    assert_eq!(q("/both?x=1"), "and");
    assert_eq!(q("/both"), "d4");
    let r = request(
        f.l["query"],
        "POST /both?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(origin_of(&r), "d4");
    // Source CIDR.
    let from = |src: &str| {
        let mut c = Client::connect_from(f.l["query"], src);
        origin_of(&c.get("/"))
    };
    assert_eq!(from("127.0.0.2"), "internal");
    assert_eq!(from("127.0.0.3"), "d4");
    assert_eq!(from("127.0.0.1"), "d4");
    let seen = f.origin("internal").seen();
    assert_eq!(
        seen.last()
            .expect("seen")
            .header("x-forwarded-for")
            .as_deref(),
        Some("127.0.0.2")
    );
}

#[test]
fn redirect_fixed_response_and_no_match() {
    let f = fixture();
    let l = f.l["actions"];
    let r = get(l, "/old");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://new.example.com/"));
    let r = get(l, "/temp?q=1");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/elsewhere"));
    let r = get(l, "/maintenance");
    assert_eq!(r.status, 503);
    assert_eq!(r.body_text(), "down for maintenance");
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(get(l, "/app/x").header("x-origin"), Some("app5"));
    // No policy matched and no default pool.
    let r = get(l, "/nothing");
    assert_eq!(r.status, 503);
    assert_eq!(
        r.body_text(),
        "503 Service Unavailable: no policy of vserver \"actions\" matched and it has no default_pool\n"
    );
    // Local answers keep the connection, and a request body is consumed.
    let mut c = Client::connect(l);
    c.send(b"POST /maintenance HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.read_response(false).expect("fixed response");
    assert_eq!(r.status, 503);
    assert_eq!(c.get("/old").status, 301);
    assert_eq!(c.get("/app/y").status, 200);
    let v = f.sy.stats()["vservers"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == "actions").cloned())
        .expect("actions vserver");
    assert!(v["local_responses"].as_u64().unwrap_or(0) >= 6, "{v}");
    assert_eq!(v["no_pool"], 1, "{v}");
}

#[test]
fn request_and_response_header_edits() {
    let f = fixture();
    let l = f.l["headers"];
    let r = get_with(
        l,
        "/plain",
        "X-Env: dev\r\nX-Secret: hunter2\r\nX-Added: 0\r\n",
    );
    assert_eq!(r.status, 200);
    let seen = f.origin("d6").seen();
    let s = seen.last().expect("seen");
    // set replaces, add adds, remove removes.
    assert_eq!(s.header("x-env").as_deref(), Some("prod"));
    assert!(
        !s.head.to_ascii_lowercase().contains("x-env: dev"),
        "{}",
        s.head
    );
    assert_eq!(s.header("x-secret"), None, "{}", s.head);
    let added: Vec<&str> = s
        .head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-added:"))
        .collect();
    assert_eq!(added.len(), 2, "{}", s.head);
    assert_eq!(s.header("x-policy"), None);
    // Client side: the vserver adds a field, the member's fields stay.
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-origin"), Some("d6"));
    // A policy without an action only edits; the default pool still serves.
    let r = get(l, "/mask/a");
    assert_eq!(r.header("x-origin"), Some("masked"));
    let n = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-origin"))
        .count();
    assert_eq!(n, 1, "set must replace: {:?}", r.headers);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    // Every matching policy contributes its edits.
    let r = get(l, "/mask/strip");
    assert_eq!(r.header("x-origin"), Some("masked"));
    assert_eq!(r.header("x-frame-options"), None, "{:?}", r.headers);
    let seen = f.origin("d6").seen();
    let s = seen.last().expect("seen");
    assert_eq!(s.request_line(), "GET /mask/strip HTTP/1.1");
    assert_eq!(s.header("x-policy").as_deref(), Some("strip"));
    // A later set wins over the vserver's set: one field, the policy's value.
    let envs: Vec<&str> = s
        .head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-env:"))
        .collect();
    assert_eq!(envs, vec!["X-Env: stripped"], "{}", s.head);
}

#[test]
fn six_vservers_serve_side_by_side() {
    let f = fixture();
    // (vserver, path, headers, expected origin or status)
    let cases: Vec<(&str, &str, &str, &str)> = vec![
        ("hosts", "/", "X-H: 1\r\n", "d1"),
        ("paths", "/login", "", "auth"),
        ("methods", "/", "X-Env: canary\r\n", "canary"),
        ("query", "/?version=2", "", "v2"),
        ("actions", "/app/1", "", "app5"),
        ("headers", "/", "", "d6"),
    ];
    let hs: Vec<_> = cases
        .into_iter()
        .map(|(vs, path, headers, want)| {
            let l = f.l[vs];
            std::thread::spawn(move || {
                let mut c = Client::connect(l);
                for i in 0..50 {
                    let r = c.get_with(path, headers);
                    assert_eq!(r.status, 200, "{vs} #{i}: {}", r.body_text());
                    assert_eq!(origin_of(&r), want, "{vs} #{i}");
                }
            })
        })
        .collect();
    for h in hs {
        h.join().expect("client");
    }
    let stats = f.sy.stats();
    let vss = stats["vservers"].as_array().expect("vservers");
    assert_eq!(vss.len(), 6);
    for v in vss {
        assert!(v["requests"].as_u64().unwrap_or(0) >= 50, "{v}");
    }
    for p in ["d1", "auth", "canary", "v2", "app5", "d6"] {
        assert_eq!(f.origin(p).requests(), 50, "{p}");
    }
}

#[test]
fn ipv6_listener() {
    let probe = match std::net::TcpListener::bind("[::1]:0") {
        Ok(p) => p,
        Err(e) => {
            println!("skipped: cannot bind [::1] on this machine: {e}");
            return;
        }
    };
    let port6 = probe.local_addr().expect("addr").port();
    drop(probe);
    let (a, v6) = (Origin::start("a"), Origin::start("v6"));
    let l6: SocketAddr = format!("[::1]:{port6}").parse().expect("v6 addr");
    let l4 = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"dual\"\nlisten = [\"{l6}\", \"{l4}\"]\ndefault_pool = \"p\"\n\
         [[vserver.policy]]\nmatch = {{ source = \"::1/128\" }}\naction = {{ pool = \"v6\" }}\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n\
         [[pool]]\nname = \"v6\"\n[[pool.member]]\naddress = \"{}\"\n",
        a.addr, v6.addr
    );
    let _sy = Switchyard::start(&cfg, &[l6, l4]);
    let r = request(
        l6,
        &format!("GET /six HTTP/1.1\r\nHost: [::1]:{port6}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(origin_of(&r), "v6");
    let seen = v6.seen();
    let s = seen.last().expect("seen");
    assert_eq!(s.header("x-forwarded-for").as_deref(), Some("::1"));
    assert_eq!(
        s.header("forwarded").as_deref(),
        Some(format!("for=\"[::1]\";proto=http;host=\"[::1]:{port6}\"").as_str())
    );
    // The IPv4 listener of the same vserver does not match the v6 source.
    assert_eq!(origin_of(&get(l4, "/four")), "a");
}

/// Redirects built from the request (`redirect_scheme`, `redirect_host`,
/// `redirect_port`, `redirect_path`, `redirect_path_prefix`: the Gateway
/// API's RequestRedirect), and matches on several headers and query
/// arguments at once (every one must match).
#[test]
fn redirects_built_from_the_request_and_several_header_matches() {
    let origin = Origin::start("o");
    let l = free_addr();
    let cfg = format!(
        r#"[[vserver]]
name = "r"
listen = ["{l}"]
default_pool = "p"
[[vserver.policy]]
match = {{ path_prefix = "/host" }}
action = {{ redirect_host = "example.org" }}
[[vserver.policy]]
match = {{ path_prefix = "/old/" }}
action = {{ redirect_path = "/new", redirect_path_prefix = "/old", status = 301 }}
[[vserver.policy]]
match = {{ path_prefix = "/full" }}
action = {{ redirect_path = "/replaced" }}
[[vserver.policy]]
match = {{ path_prefix = "/secure" }}
action = {{ redirect_scheme = "https", redirect_port = 8443 }}
[[vserver.policy]]
match = {{ path_prefix = "/default-port" }}
action = {{ redirect_scheme = "https", redirect_port = 443 }}
[[vserver.policy]]
match = {{ header = [{{ name = "version", value = "two" }}, {{ name = "color", value = "blue" }}], query = [{{ name = "a" }}, {{ name = "b", value = "2" }}] }}
action = {{ status = 200, body = "both" }}

[[pool]]
name = "p"
[[pool.member]]
address = "{}"
"#,
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[l]);
    let location = |path: &str| {
        let r = get_host(l, path, "site.test:8080");
        (r.status, r.header("location").unwrap_or("").to_string())
    };
    assert_eq!(
        location("/host/x?q=1"),
        (302, "http://example.org/host/x?q=1".into())
    );
    assert_eq!(
        location("/old/a/b"),
        (301, "http://site.test/new/a/b".into())
    );
    assert_eq!(
        location("/full/a?k=v"),
        (302, "http://site.test/replaced?k=v".into())
    );
    assert_eq!(
        location("/secure"),
        (302, "https://site.test:8443/secure".into())
    );
    assert_eq!(
        location("/default-port"),
        (302, "https://site.test/default-port".into())
    );
    let both = |path: &str, headers: &str| {
        let r = get_with(l, path, headers);
        r.body_text() == "both"
    };
    assert!(both("/x?a&b=2", "version: two\r\ncolor: blue\r\n"));
    assert!(!both("/x?a&b=2", "version: two\r\n"));
    assert!(!both("/x?b=2", "version: two\r\ncolor: blue\r\n"));
    assert!(!both("/x?a&b=3", "version: two\r\ncolor: blue\r\n"));

    // A redirect part a Location cannot hold is refused at load.
    let bad = cfg.replace("redirect_host = \"example.org\"", "redirect_host = \"a b\"");
    let path = temp_dir("redirect-parts").join("bad.toml");
    std::fs::write(&path, bad).expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("path")]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("redirect_host"),
        "{out}{err}"
    );
}

/// A policy's `rewrite` (the Gateway API's URLRewrite, ingress-nginx's
/// rewrite-target): the member gets the new path (whole, or the policy's
/// prefix replaced by segments; the query kept) and the new Host, over
/// HTTP/1.1 and HTTP/2 (h2c), and only when the request goes to the
/// policy's pool; a rewrite without a pool action is refused at load.
#[test]
fn rewrites_change_what_the_member_gets() {
    let origin = Origin::start("o");
    let l = free_addr();
    let cfg = format!(
        r#"[[vserver]]
name = "r"
listen = ["{l}"]
h2c = true
default_pool = "p"
[[vserver.policy]]
match = {{ path_prefix = "/api" }}
action = {{ pool = "p" }}
rewrite = {{ path = "/v2", path_prefix = "/api" }}
[[vserver.policy]]
match = {{ path_prefix = "/strip" }}
action = {{ pool = "p" }}
rewrite = {{ path = "/", path_prefix = "/strip", host = "backend.internal:8080" }}
[[vserver.policy]]
match = {{ path_prefix = "/whole" }}
action = {{ pool = "p" }}
rewrite = {{ path = "/replaced/" }}
[[vserver.policy]]
match = {{ path_regex = "(?i)^/something(/|$)(.*)" }}
action = {{ pool = "p" }}
rewrite = {{ path_regex = "(?i)^/something(/|$)(.*)", path = "/${{2}}" }}

[[pool]]
name = "p"
[[pool.member]]
address = "{}"
"#,
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[l]);
    let cases = [
        ("/api/users/7?x=1", "/v2/users/7?x=1", "site.test"),
        ("/api", "/v2", "site.test"),
        ("/api/", "/v2/", "site.test"),
        // By segments: /apiary is not under /api.
        ("/apiary", "/apiary", "site.test"),
        ("/strip/a/b", "/a/b", "backend.internal:8080"),
        ("/strip", "/", "backend.internal:8080"),
        ("/whole/a?k=v", "/replaced/?k=v", "site.test"),
        // nginx's rewrite with captures (ingress-nginx's rewrite-target).
        ("/something/new/x?q=1", "/new/x?q=1", "site.test"),
        // (?i): the node folds case (regex's unicode-case).
        ("/SomeThing/new/x", "/new/x", "site.test"),
        ("/something", "/", "site.test"),
        ("/other", "/other", "site.test"),
    ];
    for (path, want, host) in cases {
        let r = get_host(l, path, "site.test");
        assert_eq!(r.status, 200, "{path}");
        let seen = origin.seen();
        let last = seen.last().expect("a request");
        assert_eq!(
            last.request_line(),
            format!("GET {want} HTTP/1.1"),
            "{path}"
        );
        assert_eq!(last.header("host").as_deref(), Some(host), "{path}");
    }
    // HTTP/2: the member (HTTP/1.1) gets the same.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(l).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2");
        tokio::spawn(conn);
        for (path, want, host) in cases {
            let req = http::Request::get(format!("http://site.test{path}"))
                .body(())
                .expect("request");
            let mut s = send.clone().ready().await.expect("ready");
            let (resp, _) = s.send_request(req, true).expect("send");
            let resp = resp.await.expect("response");
            assert_eq!(resp.status(), 200, "h2 {path}");
            let seen = origin.seen();
            let last = seen.last().expect("a request");
            assert_eq!(
                last.request_line(),
                format!("GET {want} HTTP/1.1"),
                "h2 {path}"
            );
            assert_eq!(last.header("host").as_deref(), Some(host), "h2 {path}");
        }
    });

    for (bad, why) in [
        (
            cfg.replacen("action = {{ pool = \"p\" }}\nrewrite", "rewrite", 1)
                .replacen("action = { pool = \"p\" }\nrewrite", "rewrite", 1),
            "rewrite needs action = { pool",
        ),
        (
            cfg.replace("path = \"/v2\"", "path = \"/v2/../x\""),
            "must be a normalized path",
        ),
        (
            cfg.replace("host = \"backend.internal:8080\"", "host = \"a b\""),
            "is not a host name",
        ),
    ] {
        refused_by_check(&bad, why);
    }
}

/// A policy's `mirror` (the Gateway API's RequestMirror): the mirror pool
/// gets a copy of each matching request as the member gets it (path,
/// query, Host, forwarding fields, body) over HTTP/1.1 and HTTP/2, and
/// the client gets the member's answer only. A body over `max_body` is
/// not copied, `percent` copies that share, `max_in_flight` bounds the
/// copies a slow mirror holds, and a slow or dead mirror never delays the
/// client. The vserver counts the client's requests and answers once; the
/// copies are counted apart (`mirrored`, `mirror_dropped`).
#[test]
fn mirrors_copy_requests_to_other_pools_and_their_answers_are_dropped() {
    let main = Origin::start("main");
    let shadow = Origin::start("shadow");
    shadow.set(|b| b.status = 500);
    let slow = Origin::start("slow");
    slow.set(|b| b.delay = Duration::from_secs(4));
    let dead = free_addr();
    let l = free_addr();
    let cfg = format!(
        r#"[[vserver]]
name = "m"
listen = ["{l}"]
h2c = true
default_pool = "p"
[[vserver.policy]]
match = {{ path_prefix = "/copied" }}
action = {{ pool = "p" }}
rewrite = {{ path = "/v2", path_prefix = "/copied" }}
mirror = [{{ pool = "shadow" }}]
[[vserver.policy]]
match = {{ path_prefix = "/small" }}
action = {{ pool = "p" }}
mirror = [{{ pool = "shadow", max_body = 16 }}]
[[vserver.policy]]
match = {{ path_prefix = "/half" }}
action = {{ pool = "p" }}
mirror = [{{ pool = "shadow", percent = 50 }}]
[[vserver.policy]]
match = {{ path_prefix = "/slow" }}
action = {{ pool = "p" }}
mirror = [{{ pool = "slow", max_in_flight = 1 }}, {{ pool = "dead" }}]

[[pool]]
name = "p"
[[pool.member]]
address = "{}"
[[pool]]
name = "shadow"
[[pool.member]]
address = "{}"
[[pool]]
name = "slow"
[[pool.member]]
address = "{}"
[[pool]]
name = "dead"
[[pool.member]]
address = "{dead}"
"#,
        main.addr, shadow.addr, slow.addr
    );
    let sy = Switchyard::start(&cfg, &[l]);
    let copies = |path: &str| -> Vec<Seen> {
        shadow
            .seen()
            .into_iter()
            .filter(|s| s.request_line().contains(path))
            .collect()
    };
    // The copy is the request as the member gets it (rewritten, with the
    // forwarding fields); the client gets the member's 200, not the
    // mirror's 500.
    let r = get_host(l, "/copied/a?x=1", "site.test");
    assert_eq!(r.status, 200);
    assert!(eventually(Duration::from_secs(5), || !copies("/v2/a?x=1").is_empty()));
    let c = &copies("/v2/a?x=1")[0];
    assert_eq!(c.request_line(), "GET /v2/a?x=1 HTTP/1.1");
    assert_eq!(c.header("host").as_deref(), Some("site.test"));
    assert_eq!(c.header("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    // Bodies: by length and chunked, copied whole.
    let r = request(
        l,
        "POST /copied/up HTTP/1.1\r\nHost: site.test\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
    );
    assert_eq!(r.status, 200);
    let r = request(
        l,
        "POST /copied/chunked HTTP/1.1\r\nHost: site.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(eventually(Duration::from_secs(5), || {
        copies("/v2/up").len() == 1 && copies("/v2/chunked").len() == 1
    }));
    assert_eq!(copies("/v2/up")[0].body, b"hello world");
    assert_eq!(copies("/v2/chunked")[0].body, b"hello world");
    // Over max_body: the member gets it, the mirror does not.
    let big = "x".repeat(17);
    let r = request(
        l,
        &format!("POST /small HTTP/1.1\r\nHost: site.test\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{big}"),
    );
    assert_eq!(r.status, 200);
    assert!(main.seen().iter().any(|s| s.body == big.as_bytes()));
    // HTTP/2 clients' requests are copied alike.
    assert_eq!(h2_post(l, "http://site.test/copied/h2", b"over h2"), 200);
    assert!(eventually(Duration::from_secs(5), || copies("/v2/h2")
        .len()
        == 1));
    assert_eq!(copies("/v2/h2")[0].body, b"over h2");
    // percent = 50: about half of 200 requests.
    for _ in 0..200 {
        assert_eq!(get_host(l, "/half", "site.test").status, 200);
    }
    std::thread::sleep(Duration::from_millis(300));
    let half = copies("/half").len();
    assert!((60..=140).contains(&half), "{half} of 200 copied");
    // A slow mirror (4 s) and a dead one delay nobody; the slow one holds
    // one copy at a time, so the next two are dropped.
    let began = Instant::now();
    for _ in 0..3 {
        assert_eq!(get_host(l, "/slow", "site.test").status, 200);
    }
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "the client waited for the mirror: {:?}",
        began.elapsed()
    );
    // Copies: /copied x4, /half, /slow 1 of 3 + the dead pool's 3 (sent:
    // it is the pool's to fail them); dropped: /small's, /slow's 2.
    let vs = sy.stats()["vservers"][0].clone();
    assert_eq!(vs["mirrored"], 4 + half as u64 + 1 + 3, "{vs}");
    assert_eq!(vs["mirror_dropped"], 1 + 2, "{vs}");
    // The vserver's answers are the clients' only: 4 + 1 + 200 + 3.
    assert_eq!(vs["requests"], 208, "{vs}");
    assert_eq!(vs["responses"]["2xx"], 208, "{vs}");
    assert_eq!(vs["responses"]["5xx"], 0, "{vs}");
    // The mirror's member counts the copies' answers.
    let answered = || sy.member_stats("shadow", shadow.addr)["responses"]["5xx"].clone();
    assert!(
        eventually(Duration::from_secs(5), || answered() == 4 + half as u64),
        "{}",
        answered()
    );

    // A mirror needs a pool action and a defined pool.
    for (bad, why) in [
        (
            cfg.replace(
                "action = {{ pool = \"p\" }}\nmirror = [{{ pool = \"shadow\", max_body = 16 }}]",
                "mirror = [{ pool = \"shadow\", max_body = 16 }]",
            )
            .replace(
                "action = { pool = \"p\" }\nmirror = [{ pool = \"shadow\", max_body = 16 }]",
                "mirror = [{ pool = \"shadow\", max_body = 16 }]",
            ),
            "mirror needs action = { pool",
        ),
        (
            cfg.replace("pool = \"shadow\", percent = 50", "pool = \"nowhere\""),
            "mirror pool \"nowhere\" is not defined",
        ),
        (
            cfg.replace("percent = 50", "percent = 0"),
            "must be above 0",
        ),
    ] {
        refused_by_check(&bad, why);
    }
}

/// `switchyard check` refuses `cfg`, saying `why`.
fn refused_by_check(cfg: &str, why: &str) {
    let path = temp_dir("check-bad").join("bad.toml");
    std::fs::write(&path, cfg).expect("write");
    let (code, out, err) = run_cli(&["check", "-c", path.to_str().expect("utf-8")]);
    assert_ne!(code, Some(0), "{cfg}");
    assert!(format!("{out}{err}").contains(why), "{out}{err}");
}

/// A policy's `max_body` (ingress-nginx's proxy-body-size): a declared
/// length over it is 413 before any member is asked; a chunked or HTTP/2
/// body is stopped with 413 once it passes it; other policies' requests
/// are not limited; check refuses it on a policy without an action.
#[test]
fn a_policy_max_body_refuses_longer_request_bodies() {
    let origin = Origin::start("o");
    let l = free_addr();
    let cfg = format!(
        r#"[[vserver]]
name = "b"
listen = ["{l}"]
h2c = true
default_pool = "p"
[[vserver.policy]]
match = {{ path_prefix = "/upload" }}
action = {{ pool = "p" }}
max_body = 10

[[pool]]
name = "p"
[[pool.member]]
address = "{}"
"#,
        origin.addr
    );
    let _sy = Switchyard::start(&cfg, &[l]);
    let post = |path: &str, body: &str| {
        request(
            l,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    assert_eq!(post("/upload/a", "0123456789").status, 200);
    let before = origin.requests();
    let r = post("/upload/a", "0123456789X");
    assert_eq!(r.status, 413, "{}", r.body_text());
    assert_eq!(origin.requests(), before, "the member was not asked");
    let r = request(
        l,
        "POST /upload/c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n6\r\n012345\r\n6\r\n678901\r\n0\r\n\r\n",
    );
    assert_eq!(r.status, 413, "{}", r.body_text());
    assert_eq!(post("/other", &"x".repeat(100)).status, 200);
    assert_eq!(h2_post(l, "http://h/upload/h2", &[b'x'; 20]), 413);
    refused_by_check(
        &cfg.replace("action = { pool = \"p\" }\nmax_body", "max_body"),
        "max_body applies to the requests a policy decides",
    );
}

/// The status of a POST of `body` to `url` over HTTP/2 with prior
/// knowledge (h2c).
fn h2_post(l: SocketAddr, url: &str, body: &[u8]) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(l).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2");
        tokio::spawn(conn);
        let req = http::Request::post(url).body(()).expect("request");
        let mut s = send.ready().await.expect("ready");
        let (resp, mut out) = s.send_request(req, false).expect("send");
        out.send_data(bytes::Bytes::copy_from_slice(body), true)
            .expect("body");
        resp.await.expect("response").status().as_u16()
    })
}
