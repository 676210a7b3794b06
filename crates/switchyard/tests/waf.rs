//! The WAF end to end through the real binary and a real origin: the CRS
//! blocking attacks in the query and in bodies before any member sees
//! them, detection only, the audit log, exclusions per vserver over one
//! shared rule set, a reload that changes the paranoia level, body limits
//! (a declared and a chunked body over the limit), sampling, and bodies
//! replayed to the member intact (Content-Length and chunked).

mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

const CRS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/crs");

fn crs() -> Option<&'static str> {
    if Path::new(CRS).join("rules").is_dir() {
        Some(CRS)
    } else {
        eprintln!("skipped: no CRS at {CRS}");
        None
    }
}

const BROWSER: &str = "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\nAccept: text/html\r\nAccept-Language: en\r\n";

fn config(listen: std::net::SocketAddr, o: &Origin, waf: &str, audit: &Path) -> String {
    format!(
        "[global]\nworkers = 1\n\n[[waf.ruleset]]\nname = \"crs\"\ncrs = \"{CRS}\"\n\n\
         [[vserver]]\nname = \"web\"\nlisten = [\"{listen}\"]\ndefault_pool = \"p\"\n\
         [vserver.waf]\nruleset = \"crs\"\naudit_log = {{ to = \"file:{}\" }}\n{waf}\n\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        audit.display(),
        o.addr
    )
}

fn audit_lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits for the audit line of the request with this unique id.
fn audit_for(p: &Path, id: &str) -> serde_json::Value {
    let mut found = None;
    eventually(Duration::from_secs(3), || {
        found = audit_lines(p).into_iter().find(|v| v["unique_id"] == id);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no audit line for {id} in {}", p.display()))
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v["matched"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["id"].as_u64()).collect())
        .unwrap_or_default()
}

#[test]
fn attacks_are_blocked_before_the_member_and_audited() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let sy = Switchyard::start(&config(listen, &o, "", &audit), &[listen]);

    // A benign GET reaches the member.
    let r = request(
        listen,
        &format!("GET /index.html?q=shoes HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
    assert_eq!(o.requests(), 1);

    // SQL injection in the query: 403 from the WAF, the member never asked.
    let r = request(
        listen,
        &format!("GET /item?id=1%27%20OR%201=1--%20 HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 403, "{}", r.body_text());
    assert_eq!(o.requests(), 1, "the blocked request reached the member");
    let id = r.header("x-request-id").expect("x-request-id").to_string();
    assert!(r.body_text().contains(&id));
    let line = audit_for(&audit, &id);
    assert_eq!(line["action"], "blocked");
    assert_eq!(line["status"], 403);
    assert_eq!(line["rule_id"], 949110);
    assert_eq!(line["vserver"], "web");
    assert!(ids(&line).contains(&942100), "{line}");

    // XSS in a urlencoded body: the body is judged before any member.
    let body = "comment=%3Cscript%3Ealert(document.cookie)%3C%2Fscript%3E";
    let r = request(
        listen,
        &format!("POST /comments HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
    );
    assert_eq!(r.status, 403, "{}", r.body_text());
    assert_eq!(o.requests(), 1, "the blocked body reached the member");
    let line = audit_for(&audit, r.header("x-request-id").expect("id"));
    assert!(ids(&line).contains(&941100), "{line}");

    // The same attack chunked, on a kept-alive connection: refused, and
    // the connection still serves the next request.
    let mut c = Client::connect(listen);
    c.send(format!("POST /comments HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes());
    assert_eq!(c.read_response(false).expect("answer").status, 403);
    let r = c.get_with("/next", BROWSER);
    assert_eq!(r.status, 200);
    assert_eq!(o.requests(), 2);

    // A benign body is replayed to the member byte for byte, chunked too.
    let form = "name=Ada+Lovelace&city=London&note=".to_string() + &"x".repeat(3000);
    let r = request(
        listen,
        &format!("POST /profile HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}", form.len()),
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
    let mut c = Client::connect(listen);
    c.send(format!("POST /profile HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n", &form[..16], form.len() - 16, &form[16..]).as_bytes());
    assert_eq!(c.read_response(false).expect("answer").status, 200);
    let seen = o.seen();
    let posts: Vec<_> = seen
        .iter()
        .filter(|s| s.request_line().starts_with("POST /profile"))
        .collect();
    assert_eq!(posts.len(), 2);
    for p in posts {
        assert_eq!(p.body, form.as_bytes());
    }

    // Counters: per vserver and per rule.
    let stats = sy.admin_get("/api/v1/waf");
    let v: serde_json::Value = serde_json::from_str(&stats).expect(&stats);
    let web = &v["vservers"][0];
    assert_eq!(web["name"], "web");
    assert_eq!(web["blocked"], 3, "{v}");
    assert!(web["inspected"].as_u64().unwrap_or(0) >= 7, "{v}");
    assert!(
        web["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r["id"] == 949110 && r["matches"] == 3),
        "{v}"
    );
    let m = sy.admin_get("/metrics");
    for line in [
        "switchyard_waf_requests_total{vserver=\"web\",result=\"blocked\"} 3",
        "switchyard_waf_rule_matches_total{vserver=\"web\",rule=\"949110\"} 3",
        "# TYPE switchyard_waf_requests_total counter",
    ] {
        assert!(m.lines().any(|l| l == line), "no {line:?} in\n{m}");
    }
}

#[test]
fn detection_only_logs_and_forwards() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let _sy = Switchyard::start(&config(listen, &o, "mode = \"detect\"", &audit), &[listen]);
    let r = request(
        listen,
        &format!("GET /?file=../../../../etc/passwd HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(o.requests(), 1);
    let mut line = None;
    eventually(Duration::from_secs(3), || {
        line = audit_lines(&audit).pop();
        line.is_some()
    });
    let line = line.expect("an audit line");
    assert_eq!(line["action"], "detected", "{line}");
    assert_eq!(line["mode"], "detect");
    assert!(
        ids(&line).contains(&930100) || ids(&line).contains(&930120),
        "{line}"
    );
}

/// A 413 for a declared body the firewall will not read ends the
/// connection without reading the body; the proxy sends its FIN and reads
/// and drops what the client still sends for a while (nginx's
/// lingering_close). Closing with the body unread would answer the rest
/// of the body with a reset: a client that writes its whole body before it
/// reads (Python's http.client, Java's HttpURLConnection) would fail on a
/// broken pipe and never see the 413.
#[test]
fn an_early_413_reaches_a_client_that_sends_its_whole_body_first() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let _sy = Switchyard::start(&config(listen, &o, "body_limit = 1000", &audit), &[listen]);
    let body_len = 256 * 1024;
    // More of the body comes with the head than the proxy reads with it,
    // so some is still unread in its socket when it answers.
    let (text, end) = send_whole_body_then_read(
        listen,
        &format!("POST /up HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/octet-stream\r\nContent-Length: {body_len}\r\n\r\n"),
        body_len,
    );
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("longer than the 1000 bytes"), "{text}");
    assert!(
        end.is_ok(),
        "the answer ended in {end:?}, not a FIN: {text}"
    );
    assert_eq!(o.requests(), 0);
}

#[test]
fn body_limits_and_sampling() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let _sy = Switchyard::start(&config(listen, &o, "body_limit = 1000", &audit), &[listen]);
    // Declared over the limit: 413 before the body is read.
    let big = "a=".to_string() + &"b".repeat(2000);
    let r = request(
        listen,
        &format!("POST /up HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{big}", big.len()),
    );
    assert_eq!(r.status, 413);
    // Chunked over the limit: 413, and the connection closes (part of the
    // body is read).
    let mut c = Client::connect(listen);
    c.send(format!("POST /up HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n", big.len()).as_bytes());
    assert_eq!(c.read_response(false).expect("answer").status, 413);
    assert!(c.closed_within(Duration::from_secs(2)));
    assert_eq!(o.requests(), 0);

    // partial: the first bytes are inspected, the rest streams.
    let o2 = Origin::start("b");
    let listen2 = addr(free_port());
    let audit2 = dir.join("audit2.jsonl");
    let _sy2 = Switchyard::start(
        &config(
            listen2,
            &o2,
            "body_limit = 1000\nbody_limit_action = \"partial\"\nsample_percent = 100",
            &audit2,
        ),
        &[listen2],
    );
    let r = request(
        listen2,
        &format!("POST /up HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{big}", big.len()),
    );
    assert_eq!(r.status, 200);
    assert_eq!(o2.seen()[0].body, big.as_bytes());
    let evil = "q=%3Cscript%3Ealert(1)%3C%2Fscript%3E&pad=".to_string() + &"c".repeat(3000);
    let r = request(
        listen2,
        &format!("POST /up HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{evil}", evil.len()),
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        o2.seen()
            .iter()
            .filter(|s| s.body == evil.as_bytes())
            .count(),
        0,
        "the member got the whole refused body"
    );

    // sample_percent = 0: nothing is inspected.
    let o3 = Origin::start("c");
    let listen3 = addr(free_port());
    let audit3 = dir.join("audit3.jsonl");
    let sy3 = Switchyard::start(
        &config(listen3, &o3, "sample_percent = 0", &audit3),
        &[listen3],
    );
    let r = request(
        listen3,
        &format!("GET /?id=1%27%20OR%201=1--%20 HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&sy3.admin_get("/api/v1/waf")).expect("json");
    assert_eq!(v["vservers"][0]["sampled_out"], 1, "{v}");
    assert_eq!(v["vservers"][0]["inspected"], 0, "{v}");
}

#[test]
fn exclusions_apply_per_vserver_over_one_rule_set() {
    let o = Origin::start("a");
    let (l1, l2) = (addr(free_port()), addr(free_port()));
    let dir = temp_dir("waf");
    std::fs::write(
        dir.join("rules.conf"),
        "SecRuleEngine On\nSecRequestBodyAccess On\n\
         SecRule ARGS \"@contains forbidden\" \"id:1001,phase:2,deny,status:451,log,msg:'forbidden word'\"\n\
         SecRule REQUEST_HEADERS:User-Agent \"@beginsWith evilbot\" \"id:1002,phase:1,deny,log,msg:'bad bot'\"\n",
    )
    .expect("write");
    std::fs::write(dir.join("after.conf"), "SecRuleRemoveById 1001\n").expect("write");
    std::fs::write(
        dir.join("before.conf"),
        "SecRule REQUEST_URI \"@beginsWith /partner/\" \"id:5001,phase:1,pass,nolog,ctl:ruleRemoveById=1002\"\n",
    )
    .expect("write");
    let cfg = format!(
        "[global]\nworkers = 1\n[[waf.ruleset]]\nname = \"mine\"\nfiles = [\"{r}\"]\n\
         [[vserver]]\nname = \"strict\"\nlisten = [\"{l1}\"]\ndefault_pool = \"p\"\n\
         [vserver.waf]\nruleset = \"mine\"\n\
         [[vserver]]\nname = \"relaxed\"\nlisten = [\"{l2}\"]\ndefault_pool = \"p\"\n\
         [vserver.waf]\nruleset = \"mine\"\nbefore = [\"{b}\"]\nafter = [\"{a}\"]\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        o.addr,
        r = dir.join("rules.conf").display(),
        a = dir.join("after.conf").display(),
        b = dir.join("before.conf").display(),
    );
    let _sy = Switchyard::start(&cfg, &[l1, l2]);
    let get = |l, path: &str, ua: &str| {
        request(
            l,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: h\r\nUser-Agent: {ua}\r\nConnection: close\r\n\r\n"
            ),
        )
        .status
    };
    assert_eq!(
        get(l1, "/?w=forbidden", "curl"),
        451,
        "a rule's status: wins"
    );
    assert_eq!(
        get(l2, "/?w=forbidden", "curl"),
        200,
        "SecRuleRemoveById in after"
    );
    assert_eq!(get(l1, "/partner/x", "evilbot/1"), 403);
    assert_eq!(get(l2, "/partner/x", "evilbot/1"), 200, "ctl in before");
    assert_eq!(get(l2, "/other", "evilbot/1"), 403);
}

#[test]
fn a_reload_changes_the_paranoia_level_and_a_broken_rule_file_keeps_the_old() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    // No User-Agent and no Accept: paranoia level 2 rules (920320, 920300)
    // notice it, level 1 does not.
    let bare = "GET /page HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n";
    let sy = Switchyard::start(
        &config(listen, &o, "paranoia = 1\ninbound_threshold = 2", &audit),
        &[listen],
    );
    assert_eq!(request(listen, bare).status, 200);
    let (ok, out) = sy.reload_with(&config(
        listen,
        &o,
        "paranoia = 2\ninbound_threshold = 2",
        &audit,
    ));
    assert!(ok, "{out}");
    let r = request(listen, bare);
    assert_eq!(r.status, 403, "{}", r.body_text());
    let line = audit_for(&audit, r.header("x-request-id").expect("id"));
    assert!(ids(&line).contains(&920320), "{line}");

    // A rule file that does not parse: the reload is refused with its
    // file and line, and paranoia 2 keeps running.
    let bad = dir.join("bad.conf");
    std::fs::write(
        &bad,
        "# first line\nSecRule ARGS \"@rx (\" \"id:1,phase:1,deny\"\n",
    )
    .expect("write");
    let mut cfg = config(listen, &o, "paranoia = 1", &audit);
    cfg = cfg.replace(
        &format!("crs = \"{CRS}\""),
        &format!("crs = \"{CRS}\"\nfiles = [\"{}\"]", bad.display()),
    );
    let (ok, out) = sy.reload_with(&cfg);
    assert!(!ok);
    assert!(out.contains("bad.conf") && out.contains(":2"), "{out}");
    assert_eq!(request(listen, bare).status, 403);
}

/// HTTP/2 streams go through the same stage: an attack in a stream's body
/// is refused before the member, a benign body reaches it whole, and the
/// connection's other streams go on.
#[test]
fn h2c_streams_are_inspected_like_http1_requests() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let cfg = config(listen, &o, "", &audit).replace(
        "default_pool = \"p\"\n",
        "default_pool = \"p\"\nh2c = true\n",
    );
    let _sy = Switchyard::start(&cfg, &[listen]);
    let results = h2_posts(
        listen,
        &[
            (
                "/search",
                "application/x-www-form-urlencoded",
                "q=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            ),
            (
                "/search",
                "application/x-www-form-urlencoded",
                "q=garden+chairs&page=2",
            ),
        ],
    );
    assert_eq!(results[0].0, 403);
    assert_eq!(results[1].0, 200);
    let line = audit_for(&audit, results[0].1.as_deref().expect("x-request-id"));
    assert_eq!(line["protocol"], "HTTP/2.0");
    assert!(ids(&line).contains(&941100), "{line}");
    let seen = o.seen();
    assert_eq!(seen.len(), 1, "only the benign stream reached the member");
    assert_eq!(seen[0].body, b"q=garden+chairs&page=2");
}

/// `crs = DIR` as docs/waf.md shows inspects JSON and XML bodies (the
/// body-processor rules of ModSecurity's recommended configuration load
/// before the CRS by default), over HTTP/1.1 and HTTP/2; a vserver that
/// turns them off does not (what it gave up, said by the same requests).
#[test]
fn json_and_xml_bodies_are_inspected_with_the_documented_setup() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let cfg = config(listen, &o, "", &audit).replace(
        "default_pool = \"p\"\n",
        "default_pool = \"p\"\nh2c = true\n",
    );
    let mut sy = Switchyard::start(&cfg, &[listen]);
    let attacks: [(&str, &str, &str, u64); 6] = [
        (
            "json sqli",
            "application/json",
            r#"{"user":{"id":"1' or '1'='1"}}"#,
            942100,
        ),
        (
            "json xss",
            "application/json",
            r#"{"comment":"<script>alert(document.cookie)</script>"}"#,
            941100,
        ),
        (
            "json+ sqli",
            "application/vnd.api+json",
            r#"{"data":{"id":"1' or '1'='1"}}"#,
            942100,
        ),
        (
            "xml sqli",
            "application/xml",
            "<?xml version=\"1.0\"?><order><id>1' or '1'='1</id></order>",
            942100,
        ),
        (
            "xml xss",
            "text/xml",
            "<?xml version=\"1.0\"?><c>&lt;script&gt;alert(document.cookie)&lt;/script&gt;</c>",
            941100,
        ),
        (
            "soap sqli",
            "application/soap+xml",
            "<?xml version=\"1.0\"?><Envelope><Body><id>1' or '1'='1</id></Body></Envelope>",
            942100,
        ),
    ];
    let benign: [(&str, &str); 2] = [
        (
            "application/json",
            r#"{"user":{"name":"Ada Lovelace","city":"London"}}"#,
        ),
        (
            "application/xml",
            "<?xml version=\"1.0\"?><order><item>garden chairs</item></order>",
        ),
    ];
    let h1 = |ct: &str, body: &str| {
        request(
            listen,
            &format!("POST /api HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
        )
    };
    for (what, ct, body, rule) in attacks {
        let r = h1(ct, body);
        assert_eq!(r.status, 403, "HTTP/1.1 {what}: {}", r.body_text());
        let line = audit_for(&audit, r.header("x-request-id").expect("x-request-id"));
        assert!(ids(&line).contains(&rule), "HTTP/1.1 {what}: {line}");
    }
    for (ct, body) in benign {
        assert_eq!(h1(ct, body).status, 200, "{ct}");
    }
    assert_eq!(o.requests(), 2, "only the benign bodies reached the member");
    // A malformed JSON body is refused (rule 200002), not passed unparsed.
    let r = h1("application/json", r#"{"id":"1"#);
    assert_eq!(r.status, 400, "{}", r.body_text());

    // HTTP/2 streams, the same bodies.
    let posts: Vec<(&str, &str, &str)> = attacks
        .iter()
        .map(|(_, ct, b, _)| ("/api", *ct, *b))
        .chain(benign.iter().map(|(ct, b)| ("/api", *ct, *b)))
        .collect();
    let statuses: Vec<u16> = h2_posts(listen, &posts).iter().map(|r| r.0).collect();
    assert_eq!(statuses, [403, 403, 403, 403, 403, 403, 200, 200], "HTTP/2");
    assert_eq!(o.requests(), 4);

    // Turned off explicitly: the JSON attack is no longer seen.
    let (ok, msg) = sy.reload_with(&cfg.replace(
        "[vserver.waf]\n",
        "[vserver.waf]\nrecommended_rules = false\n",
    ));
    assert!(ok, "{msg}");
    assert_eq!(h1(attacks[0].1, attacks[0].2).status, 200);
    sy.wait_listening(listen);
}

/// Two multipart parts of the same name are two arguments, each judged:
/// an attack in the second part (a plain field, or one that calls itself
/// a file with an empty file name, which many frameworks read as a field)
/// is refused.
#[test]
fn multipart_parts_of_the_same_name_are_each_inspected() {
    let Some(_) = crs() else { return };
    let o = Origin::start("a");
    let listen = addr(free_port());
    let dir = temp_dir("waf");
    let audit = dir.join("audit.jsonl");
    let _sy = Switchyard::start(&config(listen, &o, "", &audit), &[listen]);
    let post = |second: &str, value: &str| {
        let body = format!("--XyZ\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\nshoes\r\n--XyZ\r\nContent-Disposition: form-data; {second}\r\n\r\n{value}\r\n--XyZ--\r\n");
        request(
            listen,
            &format!("POST /search HTTP/1.1\r\nHost: shop.example\r\n{BROWSER}Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
        )
    };
    for second in ["name=\"q\"", "name=\"q\"; filename=\"\""] {
        let r = post(second, "1' or '1'='1");
        assert_eq!(r.status, 403, "{second}: {}", r.body_text());
        let line = audit_for(&audit, r.header("x-request-id").expect("x-request-id"));
        assert!(ids(&line).contains(&942100), "{second}: {line}");
        assert_eq!(post(second, "hats").status, 200, "{second}");
    }
    assert_eq!(o.requests(), 2);
}

/// POSTs on one h2c connection, in order: (path, content type, body) ->
/// (status, X-Request-Id), each response read to its end.
fn h2_posts(
    listen: std::net::SocketAddr,
    posts: &[(&str, &str, &str)],
) -> Vec<(u16, Option<String>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(listen)
            .await
            .expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
        tokio::spawn(conn);
        let mut results = Vec::new();
        for (path, ct, body) in posts {
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("http://shop.example{path}"))
                .header(
                    "user-agent",
                    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
                )
                .header("accept", "text/html")
                .header("content-type", *ct)
                .header("content-length", body.len().to_string())
                .body(())
                .expect("request");
            let mut s = send.clone().ready().await.expect("ready");
            let (resp, mut out) = s.send_request(req, false).expect("send");
            out.send_data(bytes::Bytes::copy_from_slice(body.as_bytes()), true)
                .expect("data");
            let resp = resp.await.expect("response");
            let status = resp.status().as_u16();
            let id = resp
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().unwrap_or("").to_string());
            let mut recv = resp.into_body();
            while let Some(chunk) = recv.data().await {
                let chunk = chunk.expect("data");
                let _ = recv.flow_control().release_capacity(chunk.len());
            }
            results.push((status, id));
        }
        results
    })
}
