use std::path::Path;
use std::sync::OnceLock;

use super::*;
use crate::seclang::{self, Loader};

const CRS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/crs");

/// The CRS with `extra` directives between the setup file and the rules.
fn crs_engine(extra: &str, settings: Settings) -> Option<Engine> {
    if !Path::new(CRS).join("rules").is_dir() {
        eprintln!("skipped: no CRS at {CRS}");
        return None;
    }
    let mut l = Loader::new();
    l.load_str(
        "SecRuleEngine On\nSecRequestBodyAccess On\nSecResponseBodyAccess On\n",
        "<test-head>",
        None,
    )
    .unwrap();
    l.load_path(&Path::new(CRS).join("crs-setup.conf.example"))
        .unwrap();
    l.load_str(extra, "<test>", None).unwrap();
    l.load_path(&Path::new(CRS).join("rules")).unwrap();
    let set = l.finish().unwrap();
    Some(Engine::new(set, settings).unwrap())
}

fn pl1() -> Option<&'static Engine> {
    static E: OnceLock<Option<Engine>> = OnceLock::new();
    E.get_or_init(|| crs_engine("", Settings::default()))
        .as_ref()
}

fn pl4() -> Option<&'static Engine> {
    static E: OnceLock<Option<Engine>> = OnceLock::new();
    E.get_or_init(|| {
        crs_engine(
            "SecAction \"id:900000,phase:1,pass,t:none,nolog,setvar:tx.blocking_paranoia_level=4\"",
            Settings::default(),
        )
    })
    .as_ref()
}

const UA: &[u8] = b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

fn headers() -> Vec<(&'static [u8], &'static [u8])> {
    vec![
        (b"Host", b"www.example.com"),
        (b"User-Agent", UA),
        (
            b"Accept",
            b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        ),
        (b"Accept-Language", b"en-US,en;q=0.5"),
        (b"Accept-Encoding", b"gzip, deflate, br"),
        (b"Connection", b"keep-alive"),
    ]
}

/// A request from the test client (192.0.2.10:40000 to 192.0.2.1:80).
fn request<'a>(method: &'a str, uri: &'a [u8], headers: &'a [(&'a [u8], &'a [u8])]) -> Request<'a> {
    Request {
        method,
        uri,
        uri_raw: uri,
        protocol: "HTTP/1.1",
        headers,
        remote_addr: "192.0.2.10",
        remote_port: 40000,
        local_addr: "192.0.2.1",
        local_port: 80,
        unique_id: "YnWxAcdDgkBZ0hh0Zv8NKwAAAAE",
    }
}

fn get(e: &Engine, uri: &str, extra: &[(&[u8], &[u8])]) -> Outcome {
    let mut h = headers();
    for (n, v) in extra {
        if let Some(x) = h.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(n)) {
            x.1 = v;
        } else {
            h.push((n, v));
        }
    }
    let req = request("GET", uri.as_bytes(), &h);
    let mut t = e.transaction(req);
    t.process_request_headers();
    t.process_request_body(b"", None);
    t.process_logging();
    t.into_outcome()
}

fn post(e: &Engine, uri: &str, ct: &str, body: &[u8]) -> Outcome {
    let len = body.len().to_string();
    let mut h = headers();
    h.push((b"Content-Type", ct.as_bytes()));
    h.push((b"Content-Length", len.as_bytes()));
    let req = request("POST", uri.as_bytes(), &h);
    let mut t = e.transaction(req);
    t.process_request_headers();
    t.process_request_body(body, None);
    t.process_logging();
    t.into_outcome()
}

fn blocked_by(o: &Outcome, id: u64) -> bool {
    o.interrupted
        .as_ref()
        .is_some_and(|i| i.rule_id == id && i.status == 403)
}

#[test]
fn crs_benign_get_is_allowed_without_matches() {
    let Some(e) = pl1() else { return };
    let o = get(e, "/index.html?page=2&lang=en", &[]);
    assert!(o.interrupted.is_none(), "{:?}", o.interrupted);
    assert!(o.matched.is_empty(), "{:?}", o.ids());
    let o = get(e, "/", &[(b"Cookie", b"session=abc123; theme=dark")]);
    assert!(
        o.interrupted.is_none() && o.matched.is_empty(),
        "{:?}",
        o.ids()
    );
}

#[test]
fn crs_sqli_is_blocked() {
    let Some(e) = pl1() else { return };
    let o = get(e, "/?id=1%27%20or%20%271%27%3D%271", &[]);
    assert!(blocked_by(&o, 949110), "{:?} {:?}", o.interrupted, o.ids());
    assert!(o.has(942100), "{:?}", o.ids());
    let m = o.matched.iter().find(|m| m.id == 942100).unwrap();
    assert!(m.logdata.contains("ARGS:id"), "{}", m.logdata);
}

#[test]
fn crs_xss_is_blocked() {
    let Some(e) = pl1() else { return };
    let o = get(e, "/?q=%3Cscript%3Ealert(1)%3C/script%3E", &[]);
    assert!(blocked_by(&o, 949110), "{:?}", o.ids());
    assert!(o.has(941100) && o.has(941110), "{:?}", o.ids());
}

#[test]
fn crs_lfi_is_blocked() {
    let Some(e) = pl1() else { return };
    let o = get(e, "/?file=/etc/passwd", &[]);
    assert!(blocked_by(&o, 949110), "{:?}", o.ids());
    assert!(o.has(930120), "{:?}", o.ids());
}

#[test]
fn crs_scanner_user_agent() {
    let Some(e) = pl1() else { return };
    let o = get(
        e,
        "/",
        &[(
            b"User-Agent",
            b"Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000003)",
        )],
    );
    assert!(o.has(913100), "{:?}", o.ids());
    assert!(blocked_by(&o, 949110), "{:?}", o.ids());
}

#[test]
fn crs_urlencoded_post() {
    let Some(e) = pl1() else { return };
    let o = post(
        e,
        "/login",
        "application/x-www-form-urlencoded",
        b"user=alice&pass=1%27+OR+%271%27%3D%271",
    );
    assert!(o.has(942100), "{:?}", o.ids());
    assert!(blocked_by(&o, 949110));
    let o = post(
        e,
        "/login",
        "application/x-www-form-urlencoded",
        b"user=alice&pass=secret",
    );
    assert!(
        o.interrupted.is_none() && o.matched.is_empty(),
        "{:?}",
        o.ids()
    );
}

#[test]
fn crs_detection_only_never_interrupts() {
    let Some(e) = crs_engine(
        "",
        Settings {
            mode: Some(seclang::EngineMode::DetectionOnly),
            ..Settings::default()
        },
    ) else {
        return;
    };
    let o = get(&e, "/?id=1%27%20or%20%271%27%3D%271", &[]);
    assert!(o.interrupted.is_none());
    assert!(o.has(942100) && o.has(949110), "{:?}", o.ids());
    assert!(o.matched.iter().all(|m| !m.disruptive));
}

#[test]
fn crs_paranoia_4_loads_and_evaluates() {
    let Some(e) = pl4() else { return };
    let o = get(e, "/?id=1%27%20or%20%271%27%3D%271", &[]);
    assert!(blocked_by(&o, 949110), "{:?}", o.ids());
    // PL2+ rules run.
    assert!(
        o.ids()
            .iter()
            .any(|&id| (942000..943000).contains(&id) && id != 942100),
        "{:?}",
        o.ids()
    );
    let o = get(e, "/index.html", &[]);
    assert!(o.interrupted.is_none(), "{:?}", o.ids());
}

// ---------------------------------------------------------------------------
// semantics, on small rule sets

fn engine(rules: &str) -> Engine {
    let text = format!("SecRuleEngine On\nSecRequestBodyAccess On\n{rules}");
    let set = seclang::parse_str(&text).unwrap();
    Engine::new(set, Settings::default()).unwrap()
}

fn run(
    e: &Engine,
    uri: &str,
    hdrs: &[(&[u8], &[u8])],
    body: Option<(&str, &[u8])>,
) -> (Outcome, Vec<(String, String)>) {
    let mut h: Vec<(&[u8], &[u8])> = hdrs.to_vec();
    if let Some((ct, _)) = body {
        h.push((b"Content-Type", ct.as_bytes()));
    }
    let req = Request {
        method: if body.is_some() { "POST" } else { "GET" },
        uri: uri.as_bytes(),
        uri_raw: uri.as_bytes(),
        protocol: "HTTP/1.1",
        headers: &h,
        remote_addr: "10.0.0.1",
        remote_port: 1234,
        local_addr: "10.0.0.2",
        local_port: 80,
        unique_id: "abc",
    };
    let mut t = e.transaction(req);
    t.process_request_headers();
    t.process_request_body(body.map_or(&b""[..], |b| b.1), None);
    let tx: Vec<(String, String)> = t
        .values("TX")
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    (t.into_outcome(), tx)
}

fn txv(tx: &[(String, String)], k: &str) -> Option<String> {
    tx.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(&format!("TX:{k}")))
        .map(|(_, v)| v.clone())
}

/// The rules a transaction matched, its interruption (rule, status) and its
/// TX variables.
type RunResult = (Vec<u64>, Option<(u64, u16)>, Vec<(String, Vec<u8>)>);

/// One transaction through every phase, with or without the engine's
/// phase 1 head: the rules it matched, its interruption and its TX.
fn full_run(
    e: &Engine,
    presets: &[(&[u8], &[u8])],
    head: bool,
    method: &str,
    uri: &str,
    extra: &[(&[u8], &[u8])],
    body: &[u8],
) -> RunResult {
    let mut h = headers();
    h.extend_from_slice(extra);
    let mut t = e.transaction(request(method, uri.as_bytes(), &h));
    if !head {
        t.without_head();
    }
    for (k, v) in presets {
        t.preset_tx(k, v);
    }
    t.process_request_headers();
    t.process_request_body(body, None);
    t.process_response_headers(200, "HTTP/1.1", &[(b"Content-Type", b"text/html")]);
    t.process_response_body(b"<html>ok</html>");
    t.process_logging();
    let tx = t.values("TX");
    let o = t.into_outcome();
    (o.ids(), o.interrupted.map(|i| (i.rule_id, i.status)), tx)
}

/// Starting phase 1 from the engine's head changes nothing a transaction
/// does, over the CRS at paranoia levels 1 and 4, with and without presets
/// (a second set of presets gets a head of its own).
#[test]
fn crs_head_changes_nothing() {
    let (Some(e1), Some(e4)) = (pl1(), pl4()) else {
        return;
    };
    let presets: [&[(&[u8], &[u8])]; 2] = [
        &[],
        &[
            (b"blocking_paranoia_level", b"2"),
            (b"inbound_anomaly_score_threshold", b"10"),
        ],
    ];
    type Case<'a> = (&'a str, &'a str, &'a [(&'a [u8], &'a [u8])], &'a [u8]);
    let cases: [Case; 5] = [
        ("GET", "/products/list?category=shoes&page=3", &[], b""),
        ("GET", "/?id=1%27%20or%201=1--", &[], b""),
        ("GET", "/../../etc/passwd", &[], b""),
        ("GET", "/", &[(b"User-Agent", b"sqlmap/1.7")], b""),
        (
            "POST",
            "/c?x=1",
            &[(b"Content-Type", b"application/x-www-form-urlencoded")],
            b"q=<script>alert(1)</script>",
        ),
    ];
    for e in [e1, e4] {
        for p in presets {
            for (m, uri, extra, body) in cases {
                let with = full_run(e, p, true, m, uri, extra, body);
                let without = full_run(e, p, false, m, uri, extra, body);
                assert_eq!(with, without, "{m} {uri} presets {p:?}");
            }
        }
        let heads = e.heads.resumes();
        assert!(heads.len() >= 2, "{heads:?}");
        assert!(
            heads.iter().all(|(_, r)| *r > 10),
            "the CRS setup rules are in the head: {heads:?}"
        );
    }
}

/// The head ends at a rule that disrupted when it ran (it is run again by
/// every transaction, which may have other presets or another mode), and
/// at a rule that reads the request.
#[test]
fn head_ends_at_disruption_and_request_data() {
    let e = engine(
        r#"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.a=1"
SecRule &TX:b "@eq 0" "id:2,phase:1,deny,status:403,log"
SecAction "id:3,phase:1,pass,nolog,setvar:tx.c=%{tx.a}"
SecRule REQUEST_HEADERS:X-Y "@streq on" "id:4,phase:1,pass,nolog,setvar:tx.a=2"
SecAction "id:5,phase:1,pass,nolog,setvar:tx.d=%{tx.a}"
"#,
    );
    for _ in 0..2 {
        let (ids, blocked, _) = full_run(&e, &[], true, "GET", "/", &[], b"");
        assert_eq!((ids, blocked), (vec![2], Some((2, 403))));
        let (ids, blocked, tx) = full_run(
            &e,
            &[(b"b", b"1")],
            true,
            "GET",
            "/",
            &[(b"X-Y", b"on")],
            b"",
        );
        assert!(ids.is_empty() && blocked.is_none());
        let v = |k: &str| {
            tx.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
        };
        assert_eq!(v("TX:c"), Some(b"1".to_vec()));
        assert_eq!(v("TX:a"), Some(b"2".to_vec()));
        assert_eq!(v("TX:d"), Some(b"2".to_vec()));
        let (_, _, tx) = full_run(&e, &[(b"b", b"1")], true, "GET", "/", &[], b"");
        let v = |k: &str| {
            tx.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.clone())
        };
        assert_eq!(v("TX:d"), Some(b"1".to_vec()));
    }
    let mut heads = e.heads.resumes();
    heads.sort();
    // No presets: rule 2 denied, so the head is rule 1 only; with b set,
    // rules 1 to 3 (rule 4 reads a header).
    assert_eq!(heads, vec![(vec![], 1), (vec![b"b".to_vec()], 3)]);
}

/// A rule reading one TX variable as it is takes a short path; a target
/// removal, the matched variable and a missing variable behave as on the
/// long one.
#[test]
fn single_tx_variable_rules() {
    let e = engine(
        r#"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.level=2"
SecRule REQUEST_URI "@beginsWith /off" "id:2,phase:1,pass,nolog,ctl:ruleRemoveTargetById=10;TX:level"
SecRule REQUEST_URI "@contains /other" "id:3,phase:1,pass,nolog,ctl:ruleRemoveTargetById=10;ARGS"
SecRule TX:LEVEL "@ge 2" "id:10,phase:1,pass,log,msg:'level %{MATCHED_VAR_NAME}=%{MATCHED_VAR}',setvar:tx.hits=+1"
SecRule TX:missing "!@eq 1" "id:11,phase:1,pass,log,setvar:tx.hits=+10"
SecRule TX:level "@lt 2" "id:12,phase:1,pass,log,setvar:tx.hits=+100"
"#,
    );
    let (o, tx) = run(&e, "/on", &[], None);
    assert_eq!(o.ids(), vec![10]);
    assert_eq!(o.matched[0].msg, "level TX:level=2");
    assert_eq!(txv(&tx, "hits").as_deref(), Some("1"));
    let (o, tx) = run(&e, "/off", &[], None);
    assert!(o.ids().is_empty(), "{:?}", o.ids());
    assert_eq!(txv(&tx, "hits"), None);
    // A removal of another collection leaves the TX target; one of TX
    // after it still applies.
    let (o, tx) = run(&e, "/other", &[], None);
    assert_eq!(o.ids(), vec![10]);
    assert_eq!(txv(&tx, "hits").as_deref(), Some("1"));
    let (o, tx) = run(&e, "/off/other", &[], None);
    assert!(o.ids().is_empty(), "{:?}", o.ids());
    assert_eq!(txv(&tx, "hits"), None);
}

#[test]
fn chain_needs_every_link() {
    let e = engine(
        r#"
SecRule ARGS:a "@streq x" "id:1,phase:1,pass,log,msg:'chain',setvar:tx.starter=1,chain"
    SecRule ARGS:b "@streq y" "setvar:tx.link=1"
"#,
    );
    let (o, tx) = run(&e, "/?a=x&b=y", &[], None);
    assert_eq!(o.ids(), vec![1]);
    assert_eq!(txv(&tx, "link").as_deref(), Some("1"));
    let (o, tx) = run(&e, "/?a=x&b=n", &[], None);
    assert!(o.matched.is_empty());
    // As in ModSecurity v3, the starter's setvar ran on its own match.
    assert_eq!(txv(&tx, "starter").as_deref(), Some("1"));
    assert_eq!(txv(&tx, "link"), None);
}

#[test]
fn chain_link_reads_matched_var() {
    let e = engine(
        r#"
SecRule ARGS "@rx ^a" "id:1,phase:1,pass,log,chain"
    SecRule MATCHED_VAR "@endsWith z" "setvar:tx.hit=%{MATCHED_VAR}"
"#,
    );
    let (o, tx) = run(&e, "/?q=abz", &[], None);
    assert_eq!(o.ids(), vec![1]);
    assert_eq!(txv(&tx, "hit").as_deref(), Some("abz"));
    assert_eq!(o.matched[0].matched_var_name, "MATCHED_VAR");
}

#[test]
fn skip_after_jumps_to_marker() {
    let e = engine(
        r#"
SecAction "id:1,phase:1,pass,nolog,skipAfter:END"
SecAction "id:2,phase:1,pass,log"
SecMarker END
SecAction "id:3,phase:1,pass,log"
SecAction "id:4,phase:1,pass,log,skip:1"
SecAction "id:5,phase:1,pass,log"
SecAction "id:6,phase:1,pass,log"
"#,
    );
    let (o, _) = run(&e, "/", &[], None);
    assert_eq!(o.ids(), vec![3, 4, 6]);
}

#[test]
fn setvar_arithmetic_and_macros() {
    let e = engine(
        r#"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.score=5,setvar:tx.score=+3,setvar:tx.score=-1,setvar:'tx.name=%{REQUEST_METHOD}-%{tx.score}',setvar:tx.gone=1,setvar:!tx.gone"
SecRule TX:SCORE "@eq 7" "id:2,phase:1,pass,log,msg:'score %{tx.score}'"
SecRule &TX:gone "@eq 0" "id:3,phase:1,pass,log"
"#,
    );
    let (o, tx) = run(&e, "/", &[], None);
    assert_eq!(o.ids(), vec![2, 3]);
    assert_eq!(o.matched[0].msg, "score 7");
    assert_eq!(txv(&tx, "name").as_deref(), Some("GET-7"));
}

#[test]
fn capture_fills_tx_digits() {
    let e = engine(
        r#"
SecRule ARGS:v "@rx (\d+)-(\w+)" "id:1,phase:1,pass,log,capture,logdata:'%{TX.0}|%{TX.1}|%{TX.2}',setvar:tx.got=%{tx.2}"
"#,
    );
    let (o, tx) = run(&e, "/?v=xx12-ab", &[], None);
    assert_eq!(o.matched[0].logdata, "12-ab|12|ab");
    assert_eq!(txv(&tx, "got").as_deref(), Some("ab"));
}

#[test]
fn multimatch_tries_every_stage() {
    let rules = |mm: &str| {
        engine(&format!(
            r#"SecRule ARGS "@rx ^abc$" "id:1,phase:1,pass,log,t:none,t:urlDecode,t:removeWhitespace{mm},setvar:tx.n=+1""#
        ))
    };
    // x matches as it is; y ("%61%20bc") once decoded and without blanks.
    let (o, tx) = run(&rules(",multiMatch"), "/?x=abc&y=%2561%2520bc", &[], None);
    assert_eq!(o.ids(), vec![1]);
    assert_eq!(txv(&tx, "n").as_deref(), Some("2"));
    let e = rules(",multiMatch");
    let (_, tx) = run(&e, "/?y=a%2520bc", &[], None);
    // y = "a%20bc" -> urlDecode "a bc" -> removeWhitespace "abc": matches once.
    assert_eq!(txv(&tx, "n").as_deref(), Some("1"));
    let e = engine(
        r#"SecRule ARGS "@rx ^a%20bc$" "id:1,phase:1,pass,log,t:none,t:urlDecode,multiMatch""#,
    );
    let (o, _) = run(&e, "/?y=a%2520bc", &[], None);
    assert_eq!(o.ids(), vec![1], "the untransformed value is tried");
    let e = engine(r#"SecRule ARGS "@rx ^a%20bc$" "id:1,phase:1,pass,log,t:none,t:urlDecode""#);
    let (o, _) = run(&e, "/?y=a%2520bc", &[], None);
    assert!(o.matched.is_empty());
}

#[test]
fn ctl_rule_remove_target_by_id() {
    let e = engine(
        r#"
SecRule REQUEST_URI "@beginsWith /api" "id:1,phase:1,pass,nolog,ctl:ruleRemoveTargetById=10;ARGS:token"
SecRule ARGS "@contains evil" "id:10,phase:1,pass,log,setvar:tx.n=+1"
SecRule ARGS|!ARGS:skip "@contains evil" "id:11,phase:1,pass,log,setvar:tx.m=+1"
"#,
    );
    let (o, tx) = run(&e, "/api?token=evil&other=evil&skip=evil", &[], None);
    assert_eq!(o.ids(), vec![10, 11]);
    assert_eq!(txv(&tx, "n").as_deref(), Some("2"));
    assert_eq!(txv(&tx, "m").as_deref(), Some("2"));
    let (_, tx) = run(&e, "/web?token=evil&other=evil", &[], None);
    assert_eq!(txv(&tx, "n").as_deref(), Some("2"));
}

/// Rules with the same targets share one list of values; a target removal
/// of one of them (by id, by tag; a key, a key regex, a whole single
/// collection) takes values out of that rule only, and the list summary
/// that rules the others out stays right for it.
#[test]
fn target_removals_apply_per_rule_on_shared_lists() {
    let e = engine(
        r#"
SecAction "id:1,phase:1,pass,nolog,ctl:ruleRemoveTargetById=10;ARGS:skip,ctl:ruleRemoveTargetById=10;REQUEST_FILENAME,ctl:ruleRemoveTargetByTag=t1;ARGS:/^tok/"
SecRule ARGS|REQUEST_FILENAME "@rx evil" "id:10,phase:2,pass,log,t:lowercase,setvar:tx.n10=+1"
SecRule ARGS|REQUEST_FILENAME "@rx evil" "id:11,phase:2,pass,log,t:lowercase,tag:'t1',setvar:tx.n11=+1"
SecRule ARGS|REQUEST_FILENAME "@rx evil" "id:12,phase:2,pass,log,t:lowercase,setvar:tx.n12=+1"
"#,
    );
    let count = |tx: &[(String, String)], k: &str| txv(tx, k).unwrap_or_default();
    let (o, tx) = run(&e, "/EVIL?skip=evil", &[], None);
    assert_eq!(o.ids(), vec![11, 12]);
    assert_eq!(count(&tx, "n11"), "2");
    let (o, tx) = run(&e, "/fine?skip=evil&token=Evil", &[], None);
    assert_eq!(o.ids(), vec![10, 11, 12]);
    assert_eq!(count(&tx, "n10"), "1");
    assert_eq!(count(&tx, "n11"), "1");
    assert_eq!(count(&tx, "n12"), "2");
    let m11 = o.matched.iter().find(|m| m.id == 11).expect("11 matched");
    assert_eq!(m11.matched_var_name, "ARGS:skip");
    let m10 = o.matched.iter().find(|m| m.id == 10).expect("10 matched");
    assert_eq!(m10.matched_var_name, "ARGS:token");
    let (o, _) = run(&e, "/fine?token=evil", &[], None);
    assert_eq!(o.ids(), vec![10, 12]);
    let (o, _) = run(&e, "/fine?a=good", &[], None);
    assert!(o.matched.is_empty(), "{:?}", o.ids());
}

#[test]
fn ctl_rule_remove_by_id_and_tag() {
    let e = engine(
        r#"
SecAction "id:1,phase:1,pass,nolog,ctl:ruleRemoveById=2,ctl:ruleRemoveByTag=gone"
SecAction "id:2,phase:1,pass,log"
SecAction "id:3,phase:1,pass,log,tag:'gone'"
SecAction "id:4,phase:2,pass,log,tag:'kept'"
"#,
    );
    let (o, _) = run(&e, "/", &[], None);
    assert_eq!(o.ids(), vec![4]);
}

#[test]
fn counting_args() {
    let e = engine(
        r#"
SecRule &ARGS "@eq 3" "id:1,phase:1,pass,log"
SecRule &ARGS:a "@eq 2" "id:2,phase:1,pass,log"
SecRule &ARGS_NAMES:/^b/ "@eq 1" "id:3,phase:1,pass,log"
SecRule &REQUEST_HEADERS:X-Missing "@eq 0" "id:4,phase:1,pass,log"
"#,
    );
    let (o, _) = run(&e, "/?a=1&A=2&b=3", &[], None);
    assert_eq!(o.ids(), vec![1, 2, 3, 4]);
}

#[test]
fn deny_status_and_phase_default_block() {
    let e = engine(
        r#"
SecDefaultAction "phase:1,log,auditlog,deny,status:406"
SecRule ARGS:a "@streq 1" "id:1,phase:1,block"
"#,
    );
    let (o, _) = run(&e, "/?a=1", &[], None);
    let i = o.interrupted.unwrap();
    assert_eq!((i.rule_id, i.status, i.phase), (1, 406, 1));
    let e = engine(r#"SecRule ARGS:a "@streq 1" "id:1,phase:2,deny,status:418""#);
    let (o, _) = run(&e, "/?a=1", &[], None);
    assert_eq!(o.interrupted.unwrap().status, 418);
    let e = engine(r#"SecRule ARGS:a "@streq 1" "id:1,phase:1,pass,log""#);
    let (o, _) = run(&e, "/?a=1", &[], None);
    assert!(o.interrupted.is_none());
}

#[test]
fn allow_stops_later_rules() {
    let e = engine(
        r#"
SecRule REMOTE_ADDR "@ipMatch 10.0.0.0/8" "id:1,phase:1,allow,nolog"
SecAction "id:2,phase:1,deny,log"
SecAction "id:3,phase:2,deny,log"
"#,
    );
    let (o, _) = run(&e, "/", &[], None);
    assert!(o.interrupted.is_none(), "{:?}", o.interrupted);
}

#[test]
fn transformation_cache_gives_same_results() {
    let e = engine(
        r#"
SecRule ARGS "@streq <b>" "id:1,phase:1,pass,log,t:urlDecodeUni,t:htmlEntityDecode"
SecRule ARGS "@streq &lt;b&gt;" "id:2,phase:1,pass,log,t:urlDecodeUni,t:lowercase"
SecRule ARGS "@streq <B>" "id:3,phase:1,pass,log,t:urlDecodeUni,t:htmlEntityDecode,t:uppercase"
"#,
    );
    let (o, _) = run(&e, "/?x=%25%33Cb%25%33E&y=%26lt;b%26gt;", &[], None);
    assert_eq!(o.ids(), vec![1, 2, 3]);
}

#[test]
fn cookies_parsed_as_modsecurity() {
    let e = engine(
        r#"
SecRule REQUEST_COOKIES:a "@streq 1=2" "id:1,phase:1,pass,log"
SecRule REQUEST_COOKIES_NAMES "@streq b" "id:2,phase:1,pass,log"
SecRule &REQUEST_COOKIES "@eq 3" "id:3,phase:1,pass,log"
"#,
    );
    let (o, _) = run(&e, "/", &[(b"Cookie", b"a=1=2;  b=; ; =x; c  ")], None);
    assert_eq!(o.ids(), vec![1, 2, 3]);
}

#[test]
fn uri_variables() {
    let e = engine(
        r#"
SecRule REQUEST_FILENAME "@streq /a b/c.php" "id:1,phase:1,pass,log"
SecRule REQUEST_BASENAME "@streq c.php" "id:2,phase:1,pass,log"
SecRule QUERY_STRING "@streq x=%41" "id:3,phase:1,pass,log"
SecRule REQUEST_URI "@streq /a b/c.php?x=A" "id:4,phase:1,pass,log"
SecRule REQUEST_URI_RAW "@streq /a%20b/c.php?x=%41#f" "id:5,phase:1,pass,log"
SecRule REQUEST_LINE "@streq GET /a%20b/c.php?x=%41#f HTTP/1.1" "id:6,phase:1,pass,log"
SecRule ARGS_GET:x "@streq A" "id:7,phase:1,pass,log"
"#,
    );
    let (o, _) = run(&e, "/a%20b/c.php?x=%41#f", &[], None);
    assert_eq!(o.ids(), vec![1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn json_body_args() {
    let e = engine(
        r#"
SecRule REQUEST_HEADERS:Content-Type "@rx ^application/json" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule ARGS_POST:json.a.b "@streq c" "id:2,phase:2,pass,log"
SecRule ARGS_POST:json.list.array_1 "@streq 2" "id:3,phase:2,pass,log"
SecRule ARGS_POST:json.t "@streq true" "id:4,phase:2,pass,log"
SecRule REQBODY_ERROR "@eq 0" "id:5,phase:2,pass,log"
SecRule REQBODY_PROCESSOR "@streq JSON" "id:6,phase:2,pass,log"
"#,
    );
    let (o, _) = run(
        &e,
        "/",
        &[],
        Some((
            "application/json",
            br#"{"a":{"b":"c"},"list":[1,2],"t":true}"#,
        )),
    );
    assert_eq!(o.ids(), vec![2, 3, 4, 5, 6]);
    let e = engine(
        r#"
SecRule REQUEST_HEADERS:Content-Type "@rx ^application/json" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule REQBODY_ERROR "!@eq 0" "id:2,phase:2,deny,log,msg:'%{REQBODY_ERROR_MSG}'"
"#,
    );
    let (o, _) = run(&e, "/", &[], Some(("application/json", br#"{"a":"#)));
    assert_eq!(o.interrupted.unwrap().rule_id, 2);
}

#[test]
fn xml_body() {
    let e = engine(
        r#"
SecRule REQUEST_HEADERS:Content-Type "@rx xml" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=XML"
SecRule XML:/* "@contains hello world" "id:2,phase:2,pass,log"
SecRule XML://@* "@streq v1" "id:3,phase:2,pass,log"
SecRule REQBODY_ERROR "@eq 1" "id:4,phase:2,pass,log"
"#,
    );
    let (o, _) = run(
        &e,
        "/",
        &[],
        Some((
            "text/xml",
            b"<?xml version=\"1.0\"?><a k=\"v1\"><b>hello </b>world</a>",
        )),
    );
    assert_eq!(o.ids(), vec![2, 3]);
    let (o, _) = run(&e, "/", &[], Some(("text/xml", b"<a><b></a>")));
    assert_eq!(o.ids(), vec![4]);
}

const MP_RULES: &str = r#"
SecRule MULTIPART_STRICT_ERROR "!@eq 0" "id:1,phase:2,pass,log,msg:'strict'"
SecRule REQBODY_ERROR "!@eq 0" "id:2,phase:2,pass,log,msg:'%{REQBODY_ERROR_MSG}'"
SecRule ARGS_POST:field "@rx ^hello\r\nworld$" "id:3,phase:2,pass,log"
SecRule FILES:upload "@streq shell.php" "id:4,phase:2,pass,log"
SecRule FILES_SIZES:upload "@eq 11" "id:5,phase:2,pass,log"
SecRule MULTIPART_PART_HEADERS:upload "@rx ^Content-Type: application/x-php$" "id:6,phase:2,pass,log"
SecRule MULTIPART_UNMATCHED_BOUNDARY "@eq 1" "id:7,phase:2,pass,log"
SecRule MULTIPART_LF_LINE "@eq 1" "id:8,phase:2,pass,log"
SecRule MULTIPART_INVALID_QUOTING "@eq 1" "id:9,phase:2,pass,log"
SecRule MULTIPART_DATA_AFTER "@eq 1" "id:10,phase:2,pass,log"
SecRule FILES_NAMES "@streq upload" "id:11,phase:2,pass,log"
"#;

fn mp(body: &str, boundary: &str) -> Vec<u64> {
    let e = engine(MP_RULES);
    let ct = format!("multipart/form-data; boundary={boundary}");
    let (o, _) = run(&e, "/", &[], Some((&ct, body.as_bytes())));
    o.ids()
}

#[test]
fn multipart_fields_and_files() {
    let body = "--XyZ\r\nContent-Disposition: form-data; name=\"field\"\r\n\r\nhello\r\nworld\r\n--XyZ\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"shell.php\"\r\nContent-Type: application/x-php\r\n\r\n<?php x();?>\r\n--XyZ--\r\n";
    // 12 bytes of content minus... "<?php x();?>" is 12: check the size rule fails then.
    let ids = mp(body, "XyZ");
    assert_eq!(ids, vec![3, 4, 6, 11], "{ids:?}");
    let body = body.replace("<?php x();?>", "<?php x()?>");
    assert_eq!(mp(&body, "XyZ"), vec![3, 4, 5, 6, 11]);
}

#[test]
fn multipart_strict_flags() {
    // LF line endings only.
    let body = "--b\nContent-Disposition: form-data; name=\"field\"\n\nhello\n--b--\n";
    assert_eq!(mp(body, "b"), vec![1, 8]);
    // Missing final boundary.
    let body = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n";
    assert_eq!(mp(body, "b"), vec![1, 2]);
    // A line that looks like another boundary.
    let body = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nsee --b here\r\n--b--\r\n";
    assert_eq!(mp(body, "b"), vec![7]);
    let body = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n--bb\r\n--b--\r\n";
    assert_eq!(mp(body, "b"), vec![1, 2], "a boundary with garbage");
    // Single quotes in the disposition.
    let body = "--b\r\nContent-Disposition: form-data; name='a'\r\n\r\nx\r\n--b--\r\n";
    assert_eq!(mp(body, "b"), vec![1, 9]);
    // Data after the last boundary.
    let body = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--b--\r\ntrailing";
    assert_eq!(mp(body, "b"), vec![1, 10]);
    // A part without Content-Disposition.
    let body = "--b\r\nX-A: 1\r\n\r\nx\r\n--b--\r\n";
    assert_eq!(mp(body, "b"), vec![1, 2]);
    // A clean one.
    let body =
        "--b\r\nContent-Disposition: form-data; name=\"field\"\r\n\r\nhello\r\nworld\r\n--b--\r\n";
    assert_eq!(mp(body, "b"), vec![3]);
    // A bad boundary parameter.
    let e = engine(MP_RULES);
    let (o, _) = run(
        &e,
        "/",
        &[],
        Some(("multipart/form-data; boundary=\"a", b"x")),
    );
    assert_eq!(o.ids(), vec![1, 2]);
}

#[test]
fn crs_multipart_attack_is_blocked() {
    let Some(e) = pl1() else { return };
    let body =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\n1' or '1'='1\r\n--XyZ--\r\n";
    let o = post(e, "/upload", "multipart/form-data; boundary=XyZ", body);
    assert!(o.has(942100), "{:?}", o.ids());
    assert!(blocked_by(&o, 949110));
    let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"comment\"\r\n\r\nNice shoes, thanks\r\n--XyZ\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"me.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n\xff\xd8\xff\xe0JFIF\r\n--XyZ--\r\n";
    let o = post(e, "/upload", "multipart/form-data; boundary=XyZ", body);
    assert!(
        o.interrupted.is_none() && o.matched.is_empty(),
        "{:?}",
        o.ids()
    );
}

#[test]
fn body_limit_reject_and_partial() {
    let text = "SecRuleEngine On\nSecRequestBodyAccess On\nSecRequestBodyLimit 10\nSecRequestBodyLimitAction Reject\nSecAction \"id:1,phase:2,pass,log\"";
    let e = Engine::new(seclang::parse_str(text).unwrap(), Settings::default()).unwrap();
    let (o, _) = run(&e, "/", &[], Some(("text/plain", b"0123456789abc")));
    let i = o.interrupted.unwrap();
    assert_eq!((i.status, i.rule_id), (403, 0));
    let text = "SecRuleEngine On\nSecRequestBodyAccess On\nSecRequestBodyLimit 10\nSecRequestBodyLimitAction ProcessPartial\nSecRule REQUEST_BODY \"@streq 0123456789\" \"id:1,phase:2,pass,log\"\nSecRule INBOUND_DATA_ERROR \"@eq 1\" \"id:2,phase:2,pass,log\"";
    let e = Engine::new(seclang::parse_str(text).unwrap(), Settings::default()).unwrap();
    let (o, _) = run(&e, "/", &[], Some(("text/plain", b"0123456789abc")));
    assert_eq!(o.ids(), vec![1, 2]);
}

#[test]
fn regex_work_is_bounded() {
    let text = "SecRuleEngine On\nSecRule ARGS \"@rx zzz\" \"id:1,phase:1,pass,log\"\nSecRule MSC_PCRE_LIMITS_EXCEEDED \"@eq 1\" \"id:2,phase:1,pass,log\"";
    let e = Engine::new(
        seclang::parse_str(text).unwrap(),
        Settings {
            max_operator_evals: 2,
            ..Settings::default()
        },
    )
    .unwrap();
    let (o, _) = run(&e, "/?a=1&b=2&c=zzz", &[], None);
    assert_eq!(o.ids(), vec![2]);
    assert!(o.limits_exceeded);
}

#[test]
fn response_phases() {
    let e = engine(
        r#"
SecResponseBodyAccess On
SecRule RESPONSE_STATUS "@streq 500" "id:1,phase:3,pass,log"
SecRule RESPONSE_HEADERS:X-Powered-By "@contains PHP" "id:2,phase:3,pass,log"
SecRule RESPONSE_BODY "@contains root:x:0:0" "id:3,phase:4,deny,log"
SecAction "id:4,phase:5,pass,log"
"#,
    );
    let req = Request {
        method: "GET",
        uri: b"/",
        uri_raw: b"/",
        protocol: "1.1",
        ..Request::default()
    };
    let mut t = e.transaction(req);
    t.process_request_headers();
    t.process_request_body(b"", None);
    t.process_response_headers(
        500,
        "HTTP/1.1",
        &[(b"Content-Type", b"text/html"), (b"X-Powered-By", b"PHP/8")],
    );
    assert!(t.wants_response_body());
    t.process_response_body(b"<pre>root:x:0:0:root:/root:/bin/bash</pre>");
    t.process_logging();
    let o = t.into_outcome();
    assert_eq!(o.ids(), vec![1, 2, 3, 4]);
    assert_eq!(o.interrupted.unwrap().phase, 4);
}

// ---------------------------------------------------------------------------
// measurement

/// CPU per benign GET at paranoia level 1 and the memory of the loaded
/// engine: `cargo test --release -p switchyard-waf --lib engine::tests::measure -- --ignored --nocapture`
#[test]
#[ignore = "a measurement (CPU and RSS per request), run by hand for docs/waf.md"]
fn measure() {
    fn rss_kb() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    fn trim() {
        // SAFETY: returns freed heap pages to the kernel; no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
    trim();
    let before = rss_kb();
    let Some(e) = crs_engine("", Settings::default()) else {
        return;
    };
    trim();
    let loaded = rss_kb();
    // Warm the lazy regex caches once.
    for _ in 0..10 {
        get(&e, "/index.html?page=2&lang=en", &[]);
        get(&e, "/?id=1%27%20or%20%271%27%3D%271", &[]);
    }
    trim();
    let after = rss_kb();
    let n = 20_000;
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let t0 = cpu();
    for i in 0..n {
        let uri = if i % 2 == 0 {
            "/index.html?page=2&lang=en"
        } else {
            "/products/list?category=shoes&sort=price&page=3"
        };
        let o = get(&e, uri, &[(b"Cookie", b"session=8f3a9c2e1b; theme=dark")]);
        assert!(o.interrupted.is_none());
    }
    let per = (cpu() - t0) / n as f64;
    {
        let h = headers();
        let req = Request {
            method: "GET",
            uri: b"/products/list?category=shoes&sort=price&page=3",
            uri_raw: b"/products/list?category=shoes&sort=price&page=3",
            protocol: "HTTP/1.1",
            headers: &h,
            ..Request::default()
        };
        let mut t = e.transaction(req);
        t.process_request_body(b"", None);
        println!("operator evaluations (scanning): {:?}", t.work());
    }
    println!(
        "benign GET at PL1: {:.1} us CPU; engine RSS +{} KiB loaded, +{} KiB after some requests ({} KiB before loading)",
        per * 1e6,
        loaded.saturating_sub(before),
        after.saturating_sub(before),
        before,
    );
}

/// Where the engine's memory goes (regexes with prefilters, @pm automata).
#[test]
#[ignore = "a measurement (memory per part of the engine), run by hand"]
fn measure_memory_parts() {
    use crate::operator;
    use crate::seclang::{OperatorName, OperatorParam};
    fn rss_kb() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    fn trim() {
        // SAFETY: no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
    if !Path::new(CRS).join("rules").is_dir() {
        return;
    }
    let set = seclang::load(&[
        Path::new(CRS).join("crs-setup.conf.example"),
        Path::new(CRS).join("rules"),
    ])
    .unwrap();
    let mut ops = Vec::new();
    for r in set.rules() {
        ops.push(r.operator.clone());
        for l in &r.chain {
            ops.push(l.operator.clone());
        }
    }
    drop(set);
    trim();
    let r0 = rss_kb();
    let mut rxs = Vec::new();
    let mut plain = Vec::new();
    for o in &ops {
        if o.name == OperatorName::Rx {
            rxs.push(operator::Rx::new(&o.raw).unwrap());
        }
    }
    trim();
    let r1 = rss_kb();
    for o in &ops {
        if o.name == OperatorName::Rx {
            plain.push(regex::bytes::Regex::new(&format!("(?s-u){}", o.raw)).ok());
        }
    }
    trim();
    let r2 = rss_kb();
    let mut pms = Vec::new();
    for o in &ops {
        if let (OperatorName::PmFromFile | OperatorName::Pm, OperatorParam::List(l)) =
            (o.name, &o.param)
        {
            pms.push(operator::Pm::new(l.iter().map(|s| s.as_bytes().to_vec()).collect()).unwrap());
        }
    }
    trim();
    let r3 = rss_kb();
    crate::libinjection::warm_up();
    trim();
    let r4 = rss_kb();
    println!("libinjection tables: {} KiB", r4 - r3);
    println!(
        "{} @rx with prefilters: {} KiB; the same regexes alone: {} KiB; {} @pm: {} KiB",
        rxs.len(),
        r1 - r0,
        r2 - r1,
        pms.len(),
        r3 - r2
    );
}

/// The CRS regression tests run straight against the engine (no HTTP),
/// a development aid; the real runner (`switchyard waf test`) goes through
/// the proxy. Make the input with python3 and PyYAML (one JSON object per
/// stage: file, test, method, uri, version, headers as pairs, data,
/// expect, no_expect; `skip` for encoded_request or no log expectation):
///
/// ```text
/// import yaml, json, glob, os
/// out = open('/tmp/crs_tests.jsonl', 'w')
/// for f in sorted(glob.glob('/work/shared/crs/tests/regression/*/*.yaml')):
///     for t in (yaml.safe_load(open(f)) or {}).get('tests', []):
///         for si, st in enumerate(t.get('stages', [])):
///             st = st.get('stage', st); i = st.get('input', {}); o = st.get('output', {})
///             log = o.get('log') or {}; d = i.get('data'); d = ''.join(d) if isinstance(d, list) else d
///             r = {'file': os.path.basename(f), 'test': t.get('test_id'), 'stage': si,
///                  'method': i.get('method', 'GET'), 'uri': str(i.get('uri', '/')),
///                  'version': str(i.get('version', 'HTTP/1.1')),
///                  'headers': [[str(k), str(v)] for k, v in (i.get('headers') or {}).items()],
///                  'data': d or '', 'expect': log.get('expect_ids') or [],
///                  'no_expect': log.get('no_expect_ids') or []}
///             if 'encoded_request' in i: r['skip'] = 'encoded_request'
///             if not r['expect'] and not r['no_expect']: r['skip'] = 'no log expectation'
///             out.write(json.dumps(r) + '\n')
/// ```
///
/// Then `CRS_TESTS_JSONL=/tmp/crs_tests.jsonl cargo test --release -p
/// switchyard-waf --lib engine::tests::crs_regression_direct -- --exact
/// --ignored --nocapture`.
#[test]
#[ignore = "needs a JSONL export of the CRS tests (CRS_TESTS_JSONL); the suite runs through the binary in scripts/test.sh"]
fn crs_regression_direct() {
    let path = std::env::var("CRS_TESTS_JSONL").unwrap_or("/tmp/crs_tests.jsonl".into());
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipped: no {path}");
        return;
    };
    let setup = r#"
SecAction "id:900005,phase:1,nolog,pass,setvar:tx.blocking_paranoia_level=4,setvar:tx.crs_validate_utf8_encoding=1,setvar:tx.arg_name_length=100,setvar:tx.arg_length=400,setvar:tx.total_arg_length=64000,setvar:tx.max_num_args=255,setvar:tx.max_file_size=64100,setvar:tx.combined_file_sizes=65535,setvar:tx.inbound_anomaly_score_threshold=10000,setvar:tx.outbound_anomaly_score_threshold=10000"
"#
    .to_string()
        + crate::policy::RECOMMENDED_RULES;
    let Some(e) = crs_engine(&setup, Settings::default()) else {
        return;
    };
    let (mut pass, mut fail, mut skip) = (0, 0, 0);
    let mut fails: Vec<String> = Vec::new();
    for line in text.lines() {
        let t: serde_json::Value = serde_json::from_str(line).unwrap();
        if t.get("skip").is_some() {
            skip += 1;
            continue;
        }
        let s = |k: &str| t[k].as_str().unwrap_or("").to_string();
        let (method, uri, version, mut data) = (s("method"), s("uri"), s("version"), s("data"));
        let multipart = t["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[1].as_str().unwrap_or("").starts_with("multipart/"));
        // go-ftw sends YAML block bodies with CRLF line ends.
        if multipart && !data.contains("\r\n") {
            data = data.replace('\n', "\r\n");
        }
        let mut hs: Vec<(Vec<u8>, Vec<u8>)> = t["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap().as_bytes().to_vec(),
                    h[1].as_str().unwrap().as_bytes().to_vec(),
                )
            })
            .collect();
        let has = |hs: &Vec<(Vec<u8>, Vec<u8>)>, n: &str| {
            hs.iter().any(|(k, _)| k.eq_ignore_ascii_case(n.as_bytes()))
        };
        // go-ftw's autocompletion: a body without Content-Length gets one,
        // and a form Content-Type if it has none.
        if !data.is_empty() && !has(&hs, "content-length") {
            if !has(&hs, "content-type") {
                hs.push((
                    b"Content-Type".to_vec(),
                    b"application/x-www-form-urlencoded".to_vec(),
                ));
            }
            hs.push((
                b"Content-Length".to_vec(),
                data.len().to_string().into_bytes(),
            ));
        }
        let href: Vec<(&[u8], &[u8])> = hs.iter().map(|(a, b)| (&a[..], &b[..])).collect();
        let req = Request {
            method: &method,
            uri: uri.as_bytes(),
            uri_raw: uri.as_bytes(),
            protocol: &version,
            headers: &href,
            remote_addr: "127.0.0.1",
            remote_port: 50000,
            local_addr: "127.0.0.1",
            local_port: 80,
            unique_id: "aBcDeFgHiJkLmNoP",
        };
        let mut tx = e.transaction(req);
        tx.process_request_headers();
        tx.process_request_body(data.as_bytes(), None);
        // The test origin (albedo) answers /reflect with the status,
        // headers and body the JSON request names.
        if uri.starts_with("/reflect") {
            if let Ok(j) = serde_json::from_str::<serde_json::Value>(&data) {
                let status = j["status"].as_u64().unwrap_or(200) as u16;
                let mut rh: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                if let Some(h) = j["headers"].as_object() {
                    for (k, v) in h {
                        rh.push((
                            k.as_bytes().to_vec(),
                            v.as_str().unwrap_or("").as_bytes().to_vec(),
                        ));
                    }
                }
                if !rh
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case(b"content-type"))
                {
                    rh.push((
                        b"Content-Type".to_vec(),
                        b"text/plain; charset=utf-8".to_vec(),
                    ));
                }
                let body = j["body"].as_str().unwrap_or("").as_bytes().to_vec();
                let rref: Vec<(&[u8], &[u8])> = rh.iter().map(|(a, b)| (&a[..], &b[..])).collect();
                tx.process_response_headers(status, "HTTP/1.1", &rref);
                tx.process_response_body(&body);
            }
        }
        tx.process_logging();
        let err = tx
            .values("REQBODY_ERROR_MSG")
            .first()
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default();
        let o = tx.into_outcome();
        let ids = |k: &str| -> Vec<u64> {
            t[k].as_array()
                .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
                .unwrap_or_default()
        };
        let missing: Vec<u64> = ids("expect").into_iter().filter(|i| !o.has(*i)).collect();
        let unwanted: Vec<u64> = ids("no_expect").into_iter().filter(|i| o.has(*i)).collect();
        if missing.is_empty() && unwanted.is_empty() {
            pass += 1;
        } else {
            fail += 1;
            fails.push(format!(
                "{} #{}: missing {missing:?} unwanted {unwanted:?} (matched {:?}) {err}",
                s("file"),
                t["test"],
                o.ids()
            ));
        }
    }
    for f in &fails {
        println!("FAIL {f}");
    }
    println!("{pass} passed, {fail} failed, {skip} skipped");
}

// ---------------------------------------------------------------------------
// benchmark

const BENCH_GET_HEADERS: [(&[u8], &[u8]); 8] = [
    (b"Host", b"www.example.com"),
    (b"User-Agent", UA),
    (
        b"Accept",
        b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    ),
    (b"Accept-Language", b"en-US,en;q=0.5"),
    (b"Accept-Encoding", b"gzip, deflate, br"),
    (b"Connection", b"keep-alive"),
    (b"Referer", b"https://www.example.com/products/"),
    (b"Cookie", b"session=8f3a9c2e1b; theme=dark"),
];

const BENCH_HTML: &[u8] = b"<!DOCTYPE html>\n<html><head><title>Shoes</title></head>\n<body><h1>Shoes</h1><ul><li><a href=\"/p/1\">Runner</a></li><li><a href=\"/p/2\">Walker</a></li></ul></body></html>\n";

/// A benign browser GET through all five phases (empty request body,
/// a small text/html response).
fn bench_get(e: &Engine) -> bool {
    let req = Request {
        method: "GET",
        uri: b"/products/list?category=shoes&sort=price&page=3",
        uri_raw: b"/products/list?category=shoes&sort=price&page=3",
        protocol: "HTTP/1.1",
        headers: &BENCH_GET_HEADERS,
        remote_addr: "192.0.2.10",
        remote_port: 40000,
        local_addr: "192.0.2.1",
        local_port: 80,
        unique_id: "YnWxAcdDgkBZ0hh0Zv8NKwAAAAE",
    };
    let len = BENCH_HTML.len().to_string();
    let resp: [(&[u8], &[u8]); 3] = [
        (b"Content-Type", b"text/html; charset=utf-8"),
        (b"Content-Length", len.as_bytes()),
        (b"Cache-Control", b"max-age=60"),
    ];
    let mut t = e.transaction(req);
    t.process_request_headers();
    t.process_request_body(b"", None);
    t.process_response_headers(200, "HTTP/1.1", &resp);
    t.process_response_body(BENCH_HTML);
    t.process_logging();
    let o = t.into_outcome();
    o.interrupted.is_none() && o.matched.is_empty()
}

const BENCH_FORM: &[u8] =
    b"username=alice&email=alice%40example.com&comment=Hello+there%2C+nice+shop%21&remember=on";

/// A benign POST of a small urlencoded form, all five phases.
fn bench_post(e: &Engine) -> bool {
    let len = BENCH_FORM.len().to_string();
    let mut h: Vec<(&[u8], &[u8])> = BENCH_GET_HEADERS.to_vec();
    h.push((b"Content-Type", b"application/x-www-form-urlencoded"));
    h.push((b"Content-Length", len.as_bytes()));
    let req = Request {
        method: "POST",
        uri: b"/account/profile",
        uri_raw: b"/account/profile",
        protocol: "HTTP/1.1",
        headers: &h,
        remote_addr: "192.0.2.10",
        remote_port: 40000,
        local_addr: "192.0.2.1",
        local_port: 80,
        unique_id: "YnWxAcdDgkBZ0hh0Zv8NKwAAAAE",
    };
    let blen = BENCH_HTML.len().to_string();
    let resp: [(&[u8], &[u8]); 2] = [
        (b"Content-Type", b"text/html; charset=utf-8"),
        (b"Content-Length", blen.as_bytes()),
    ];
    let mut t = e.transaction(req);
    t.process_request_headers();
    t.process_request_body(BENCH_FORM, None);
    t.process_response_headers(200, "HTTP/1.1", &resp);
    t.process_response_body(BENCH_HTML);
    t.process_logging();
    let o = t.into_outcome();
    o.interrupted.is_none() && o.matched.is_empty()
}

/// `n` transactions of `f` (a symbol of its own, so that callgrind can
/// count just this: `--collect-atstart=no --toggle-collect='*bench_loop*'`).
#[inline(never)]
fn bench_loop(e: &Engine, n: usize, f: fn(&Engine) -> bool) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(std::hint::black_box(f(std::hint::black_box(e))));
    }
    ok
}

/// CPU per benign transaction at paranoia level 1 with the full CRS
/// (median of rounds, thread CPU time) and the RSS the engine build adds:
/// `cargo test --release -p switchyard-waf --lib engine::tests::bench_crs
/// -- --exact --ignored --nocapture`. `BENCH_N` transactions per round
/// (default 20000), `BENCH_ROUNDS` rounds (default 7). Under callgrind
/// (`BENCH_N=1000 BENCH_ROUNDS=1`), the instructions of `bench_loop` over
/// 2000 are the instructions per transaction (GET and POST averaged).
#[test]
#[ignore = "a benchmark of the CRS engine, run by hand (--release)"]
fn bench_crs() {
    fn rss_kb() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    fn trim() {
        // SAFETY: returns freed heap pages to the kernel; no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
    fn cpu() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("BENCH_N", 20_000);
    let rounds = env("BENCH_ROUNDS", 7);
    // The libinjection tables are process-wide: not the engine's.
    crate::libinjection::warm_up();
    trim();
    let r0 = rss_kb();
    let t0 = std::time::Instant::now();
    let Some(e) = crs_engine("", Settings::default()) else {
        return;
    };
    let build = t0.elapsed();
    let r1 = rss_kb();
    trim();
    let r2 = rss_kb();
    println!(
        "engine build: {:.0} ms, RSS +{} KiB (+{} KiB before malloc_trim)",
        build.as_secs_f64() * 1e3,
        r2.saturating_sub(r0),
        r1.saturating_sub(r0)
    );
    assert!(bench_get(&e), "the benign GET matched a rule");
    assert!(bench_post(&e), "the benign POST matched a rule");
    for (name, f) in [
        ("GET", bench_get as fn(&Engine) -> bool),
        ("POST", bench_post),
    ] {
        // Warm up outside `bench_loop` (regexes behind a prefilter are
        // built on first use, which callgrind should not count).
        for _ in 0..n / 10 + 1 {
            f(&e);
        }
        let mut per: Vec<f64> = (0..rounds)
            .map(|_| {
                let t = cpu();
                assert_eq!(bench_loop(&e, n, f), n);
                (cpu() - t) / n as f64 * 1e6
            })
            .collect();
        per.sort_by(f64::total_cmp);
        println!(
            "benign {name} at PL1, 5 phases: median {:.1} us CPU (min {:.1}, max {:.1}; {rounds} x {n})",
            per[per.len() / 2],
            per[0],
            per[per.len() - 1]
        );
    }
    trim();
    println!("RSS after the runs: +{} KiB", rss_kb().saturating_sub(r0));
}

/// A worker holds a transaction per request in flight: many end together,
/// their buffers go back to the thread's pool (up to its bound), and the
/// transactions that take them start clean.
#[test]
fn many_live_transactions_return_clean_buffers() {
    let a = engine(
        r#"SecAction "id:1,phase:1,pass,nolog,setvar:tx.seen=%{tx.seen}x"
SecRule ARGS "@rx evil" "id:2,phase:2,deny,log,t:lowercase,setvar:tx.hit=1"
SecRule TX:seen "!@streq x" "id:4,phase:2,deny,log""#,
    );
    let h = headers();
    let start = |uri: &'static str| {
        let mut t = a.transaction(request("GET", uri.as_bytes(), &h));
        t.process_request_headers();
        t.process_request_body(b"", None);
        t
    };
    let n = super::tx::POOLED + 8;
    for round in 0..2 {
        let live: Vec<_> = (0..n).map(|_| start("/?q=EVIL")).collect();
        for t in live {
            assert_eq!(t.into_outcome().ids(), vec![2], "round {round}");
        }
        assert_eq!(super::tx::pooled_scratch(), super::tx::POOLED);
        let live: Vec<_> = (0..n).map(|_| start("/?q=fine")).collect();
        for t in live {
            let o = t.into_outcome();
            assert!(o.matched.is_empty(), "round {round}: {:?}", o.ids());
        }
    }
}

/// Transactions on one thread reuse each other's buffers (and engines of
/// different shapes share the thread's pool): nothing of one transaction
/// shows in the next, and shared target lists are collected per phase.
#[test]
fn reused_buffers_carry_nothing_over() {
    let a = engine(
        r#"SecAction "id:1,phase:1,pass,nolog,setvar:tx.seen=%{tx.seen}x"
SecRule ARGS "@rx evil" "id:2,phase:2,deny,log,t:lowercase,setvar:tx.hit=1"
SecRule ARGS "@rx other" "id:3,phase:2,pass,log,t:lowercase"
SecRule TX:seen "!@streq x" "id:4,phase:2,deny,log""#,
    );
    let b = engine(
        r#"SecRule REQUEST_HEADERS:User-Agent "@pm curl wget" "id:10,phase:1,deny,log,t:none,t:urlDecode,t:lowercase,t:compressWhitespace""#,
    );
    for _ in 0..3 {
        let o = get(&a, "/?q=EVIL", &[]);
        assert_eq!(o.ids(), vec![2], "{:?}", o.interrupted);
        let o = get(&b, "/", &[(b"User-Agent", b"Wget/1.0")]);
        assert_eq!(o.ids(), vec![10]);
        let o = get(&a, "/?q=fine", &[]);
        assert!(o.matched.is_empty(), "{:?}", o.ids());
        let o = post(&a, "/", "application/x-www-form-urlencoded", b"x=Other");
        assert_eq!(o.ids(), vec![3]);
        let o = get(&b, "/", &[]);
        assert!(o.matched.is_empty(), "{:?}", o.ids());
    }
}

/// Two multipart parts with the same `name=` are two arguments, each
/// inspected on its own; so is a "file" part that shares its name with a
/// field or has an empty file name (an application may read either as a
/// field: such a part slipped through uninspected). Files that share a
/// name only with files stay out of ARGS.
#[test]
fn multipart_parts_with_the_same_name_are_each_inspected() {
    let e = engine(
        r#"
SecRule &ARGS:q "@eq 2" "id:1,phase:2,pass,log"
SecRule &ARGS_POST "@eq 2" "id:2,phase:2,pass,log"
SecRule ARGS_POST:q "@streq shoes" "id:3,phase:2,pass,log"
SecRule ARGS:q "@detectSQLi" "id:4,phase:2,pass,log"
SecRule ARGS_NAMES "@streq q" "id:5,phase:2,pass,log"
SecRule &FILES "@eq 1" "id:6,phase:2,pass,log"
SecRule MULTIPART_STRICT_ERROR "!@eq 0" "id:7,phase:2,pass,log"
"#,
    );
    let body = |second: &str, third: &str| {
        format!("--b\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\nshoes\r\n--b\r\nContent-Disposition: form-data; {second}\r\n\r\n1' or '1'='1\r\n{third}--b--\r\n")
    };
    let ids = |b: String| {
        run(
            &e,
            "/",
            &[],
            Some(("multipart/form-data; boundary=b", b.as_bytes())),
        )
        .0
        .ids()
    };
    assert_eq!(ids(body("name=\"q\"", "")), vec![1, 2, 3, 4, 5]);
    // A file beside a field of its name, and a file without a file name:
    // in FILES and in ARGS.
    assert_eq!(
        ids(body("name=\"q\"; filename=\"a.txt\"", "")),
        vec![1, 2, 3, 4, 5, 6]
    );
    let lone = "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"\"\r\n\r\n1' or '1'='1\r\n--b--\r\n";
    let (o, _) = run(
        &e,
        "/",
        &[],
        Some(("multipart/form-data; boundary=b", lone.as_bytes())),
    );
    assert_eq!(o.ids(), vec![6], "only FILES: ARGS:f is not q");
    let e2 = engine(r#"SecRule ARGS:f "@detectSQLi" "id:1,phase:2,pass,log""#);
    let (o, _) = run(
        &e2,
        "/",
        &[],
        Some(("multipart/form-data; boundary=b", lone.as_bytes())),
    );
    assert_eq!(
        o.ids(),
        vec![1],
        "a file part without a file name is a field too"
    );
    // Two files of one name (a multiple file input) stay out of ARGS.
    let files = "--b\r\nContent-Disposition: form-data; name=\"p\"; filename=\"a.jpg\"\r\n\r\n1' or '1'='1\r\n--b\r\nContent-Disposition: form-data; name=\"p\"; filename=\"b.jpg\"\r\n\r\nx\r\n--b--\r\n";
    let e3 = engine(r#"SecRule &ARGS "!@eq 0" "id:1,phase:2,pass,log""#);
    let (o, _) = run(
        &e3,
        "/",
        &[],
        Some(("multipart/form-data; boundary=b", files.as_bytes())),
    );
    assert!(o.ids().is_empty(), "{:?}", o.ids());
    // The CRS blocks the attack whichever part carries it.
    let Some(e) = pl1() else { return };
    for second in [
        "name=\"q\"",
        "name=\"q\"; filename=\"a.txt\"",
        "name=\"q\"; filename=\"\"",
    ] {
        let o = post(
            e,
            "/upload",
            "multipart/form-data; boundary=b",
            body(second, "").as_bytes(),
        );
        assert!(o.has(942100), "{second}: {:?}", o.ids());
        assert!(blocked_by(&o, 949110), "{second}: {:?}", o.ids());
    }
}
