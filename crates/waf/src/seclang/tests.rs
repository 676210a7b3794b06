use std::path::{Path, PathBuf};

use super::*;

const CRS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/crs");

fn rule(set: &Ruleset, id: u64) -> &Rule {
    set.rule(id)
        .unwrap_or_else(|| panic!("rule {id} not loaded"))
}

fn err(text: &str) -> Error {
    parse_str(text).expect_err("expected a load error")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("seclang-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---- the whole CRS ----

fn crs_files() -> Vec<PathBuf> {
    let mut files = vec![Path::new(CRS).join("crs-setup.conf.example")];
    let mut rules: Vec<PathBuf> = std::fs::read_dir(Path::new(CRS).join("rules"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
        .collect();
    rules.sort();
    files.extend(rules);
    files
}

/// Counts computed from the text with plain line matching, independently
/// of the parser: (rules with an id, SecMarkers, `chain` actions, @rx).
fn crs_expected(files: &[PathBuf]) -> (usize, usize, usize, usize) {
    let id = regex::Regex::new(r#"(^|[\s",])id:'?\d+"#).unwrap();
    let chain = regex::Regex::new(r#"(^|[",])\s*chain\s*("|,|\\|$)"#).unwrap();
    let marker = regex::Regex::new(r"^\s*SecMarker\s").unwrap();
    let rx = regex::Regex::new(r#""!?@rx "#).unwrap();
    let (mut ids, mut markers, mut chains, mut rxs) = (0, 0, 0, 0);
    for f in files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            ids += id.find_iter(line).count();
            markers += usize::from(marker.is_match(line));
            chains += usize::from(chain.is_match(line));
            rxs += usize::from(rx.is_match(line));
        }
    }
    (ids, markers, chains, rxs)
}

fn all_rules(set: &Ruleset) -> impl Iterator<Item = &Rule> {
    set.rules()
        .flat_map(|r| std::iter::once(r).chain(r.chain.iter()))
}

#[test]
fn loads_the_whole_crs() {
    if !Path::new(CRS).exists() {
        eprintln!("no CRS at {CRS}: skipped");
        return;
    }
    let files = crs_files();
    let set = load(&files).unwrap_or_else(|e| panic!("{e}"));
    let (ids, markers, chains, rxs) = crs_expected(&files);
    eprintln!("CRS: {ids} rules, {markers} markers, {chains} chain links, {rxs} @rx");
    assert!(ids > 400, "{ids}");
    assert_eq!(set.rules().count(), ids, "rules");
    assert_eq!(set.markers().count(), markers, "markers");
    assert_eq!(
        set.rules().map(|r| r.chain.len()).sum::<usize>(),
        chains,
        "chain links"
    );
    // Every @rx compiled (the loader refuses one that does not).
    let compiled = all_rules(&set)
        .filter(|r| {
            r.operator.name == OperatorName::Rx
                && matches!(r.operator.param, OperatorParam::Regex { .. })
        })
        .count();
    assert_eq!(compiled, rxs, "@rx operators");
    assert!(all_rules(&set).all(|r| r.operator.name != OperatorName::Rx
        || matches!(r.operator.param, OperatorParam::Regex { .. })));
    assert_eq!(set.notes.len(), 0, "{:?}", set.notes);

    // Setup and defaults.
    assert_eq!(
        set.config.component_signatures,
        vec!["OWASP_CRS/4.28.0".into()]
    );
    for p in 1..=5 {
        assert!(set.default_actions[p].is_some(), "phase {p} default");
    }
    let r = rule(&set, 942100);
    assert_eq!(r.phase, 2);
    assert!(r.block);
    assert_eq!(
        r.disruptive,
        Disruptive::Pass,
        "block is the default's pass"
    );
    assert!(r.log && r.auditlog);
    assert_eq!(r.operator.name, OperatorName::DetectSqli);
    assert_eq!(r.severity, Some(Severity::Critical));
    assert!(r.has_tag("OWASP_CRS"));
    assert!(r.msg.is_some());
    // RESPONSE-999-COMMON-EXCEPTIONS-AFTER excludes cookies from earlier rules.
    let r = rule(&set, 942290);
    assert!(r
        .variables
        .iter()
        .any(|v| v.exclude && v.to_string() == "!REQUEST_COOKIES:/^_ga(?:_\\w+)?$/"));
    // 901320: a three-link chain with initcol.
    let r = rule(&set, 901320);
    assert_eq!(r.chain.len(), 2);
    assert_eq!(
        r.chain[1].transforms,
        vec![Transform::Sha1, Transform::HexEncode]
    );
    assert!(r.chain[1]
        .actions
        .iter()
        .any(|a| matches!(a, Action::InitCol { collection, .. } if &**collection == "ip")));
    // @pmFromFile lists read, comments skipped.
    let r = rule(&set, 930120);
    match &r.operator.param {
        OperatorParam::List(l) => {
            assert!(l.len() > 500);
            assert!(l
                .iter()
                .all(|p| !p.starts_with('#') && !p.trim().is_empty()));
        }
        p => panic!("{p:?}"),
    }
    // Anomaly scoring setvar with a macro.
    let r = rule(&set, 942100);
    let sv = r
        .actions
        .iter()
        .find_map(|a| match a {
            Action::SetVar(s) => Some(s),
            _ => None,
        })
        .unwrap();
    assert_eq!(&*sv.collection, "tx");
    assert!(matches!(&sv.op, SetVarOp::Add(m) if m.has_vars()));
}

/// The directives CRS ships commented out (setup options, exclusion
/// examples), uncommented: what an operator enables must parse too.
fn uncomment(text: &str) -> String {
    let mut out = String::new();
    let mut cont = false;
    for line in text.lines() {
        let body = line.strip_prefix('#');
        if cont {
            out.push_str(body.unwrap_or(line));
            out.push('\n');
            cont = line.trim_end().ends_with('\\');
            continue;
        }
        let Some(b) = body else { continue };
        let b = b.strip_prefix(' ').unwrap_or(b);
        let t = b.trim_start();
        let word = t.split_whitespace().next().unwrap_or("");
        let directive = word.starts_with("Sec")
            && word.len() > 3
            && word.as_bytes()[3].is_ascii_uppercase()
            && word.bytes().all(|c| c.is_ascii_alphanumeric());
        if directive && word.len() < t.len() && !t.contains("->") {
            out.push_str(b);
            out.push('\n');
            cont = line.trim_end().ends_with('\\');
        }
    }
    out
}

#[test]
fn crs_commented_examples_parse() {
    if !Path::new(CRS).exists() {
        return;
    }
    let crs = Path::new(CRS);
    let rules_dir = crs.join("rules");
    let mut l = Loader::new();
    let setup = uncomment(&std::fs::read_to_string(crs.join("crs-setup.conf.example")).unwrap());
    // Its SecRuleUpdate* examples say "after the inclusion of the CRS".
    let (late, setup): (Vec<&str>, Vec<&str>) =
        setup.lines().partition(|l| l.starts_with("SecRuleUpdate"));
    let setup = setup.join("\n");
    assert!(setup.lines().count() > 100);
    l.load_str(&setup, "crs-setup (uncommented)", Some(crs))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = rules_dir.join("REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf.example");
    let text = uncomment(&std::fs::read_to_string(&before).unwrap());
    l.load_str(&text, "900 (uncommented)", Some(&rules_dir))
        .unwrap_or_else(|e| panic!("{e}"));
    for f in crs_files().iter().skip(1) {
        l.load_path(f).unwrap_or_else(|e| panic!("{e}"));
    }
    let after = rules_dir.join("RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf.example");
    let text = uncomment(&std::fs::read_to_string(&after).unwrap()) + &late.join("\n");
    l.load_str(&text, "999 (uncommented)", Some(&rules_dir))
        .unwrap_or_else(|e| panic!("{e}"));
    let set = l.finish().unwrap();
    assert!(set.rule(900000).is_some(), "the paranoia level SecAction");
    assert!(
        set.rule(942100).is_none(),
        "SecRuleRemoveById 942100 of the 999 example"
    );
}

/// Rough memory of the parsed CRS (resident set growth while loading);
/// `cargo test -p switchyard-waf --lib seclang::tests::crs_memory -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (RSS of the loaded CRS), run by hand"]
fn crs_memory() {
    fn rss_kb() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap()
    }
    let files = crs_files();
    let before = rss_kb();
    let t = std::time::Instant::now();
    let set = load(&files).unwrap();
    let took = t.elapsed();
    let after = rss_kb();
    eprintln!(
        "CRS: {} rules, loaded in {:?}, RSS +{} KB",
        set.rules().count(),
        took,
        after - before
    );
    // The share of compiled regexes: compile them all once more.
    let before = rss_kb();
    let again: Vec<_> = all_rules(&set)
        .filter_map(|r| match &r.operator.param {
            OperatorParam::Regex { translated, .. } => Some(compile_pcre(translated).unwrap()),
            _ => None,
        })
        .collect();
    eprintln!(
        "{} @rx compiled again: RSS +{} KB",
        again.len(),
        rss_kb() - before
    );
}

// ---- lexing ----

#[test]
fn continuations_comments_and_lines() {
    let text = "# a comment \\\n   still the comment\n\nSecRule ARGS \"@rx a\" \\\n    \"id:1,\\\n    phase:1,\\\n    pass\"\n  # indented comment\nSecAction \"id:2,pass\"\n";
    let lines = logical_lines(text);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].0, 4);
    assert_eq!(
        lines[0].1,
        "SecRule ARGS \"@rx a\"     \"id:1,    phase:1,    pass\""
    );
    assert_eq!(lines[1].0, 9);
    let set = parse_str(text).unwrap();
    assert_eq!(rule(&set, 1).phase, 1);
    assert_eq!(rule(&set, 1).line, 4);
    assert_eq!(rule(&set, 2).phase, 2, "ModSecurity's default phase");
    // Trailing blanks after the backslash and CRLF endings.
    let set = parse_str("SecAction \\  \r\n \"id:3,phase:3,pass\"\r\n").unwrap();
    assert_eq!(rule(&set, 3).phase, 3);
}

#[test]
fn quotes_and_escapes() {
    assert_eq!(
        split_args(r#"SecRule ARGS "@contains a\"b" 'x y' plain\arg"#).unwrap(),
        vec!["SecRule", "ARGS", "@contains a\"b", "x y", "plain\\arg"]
    );
    // Backslashes other than before the quote stay (regexes keep escapes).
    assert_eq!(
        split_args(r#"X "\d+\\ \x22""#).unwrap(),
        vec!["X", r"\d+\\ \x22"]
    );
    assert!(split_args(r#"X "open"#)
        .unwrap_err()
        .contains("missing closing"));
    let acts = split_actions("id:1, msg:'it\\'s, here' ,t:none,tag:'a,b',pass").unwrap();
    let v: Vec<_> = acts
        .iter()
        .map(|a| (a.name.as_str(), a.value.as_deref()))
        .collect();
    assert_eq!(
        v,
        vec![
            ("id", Some("1")),
            ("msg", Some("it's, here")),
            ("t", Some("none")),
            ("tag", Some("a,b")),
            ("pass", None)
        ]
    );
    assert!(split_actions("msg:'open").is_err());
    assert!(split_actions("msg:'a'b").is_err());
    let set = parse_str(
        r#"SecRule RESPONSE_BODY "@contains <h1 style=\"margin\">" "id:1,phase:4,msg:'prefix \'UP\', ok',block""#,
    )
    .unwrap();
    let r = rule(&set, 1);
    assert_eq!(&*r.operator.raw, "<h1 style=\"margin\">");
    assert_eq!(r.msg_raw(), Some("prefix 'UP', ok"));
}

// ---- variables ----

#[test]
fn variables() {
    let v = parse_variables(
        "ARGS|ARGS_NAMES|REQUEST_HEADERS:User-Agent|!REQUEST_COOKIES:/^__utm/|&TX:foo|XML:/*|tx:/^(a|b)$/|xml://@*|ARGS:'a|b'",
    )
    .unwrap();
    assert_eq!(v.len(), 9);
    assert_eq!(v[0].collection, Collection::Args);
    assert!(v[0].selector.is_none());
    assert_eq!(v[2].selector, Some(Selector::Key("User-Agent".into())));
    assert!(v[3].exclude && !v[3].count);
    match &v[3].selector {
        Some(Selector::Regex { source, regex }) => {
            assert_eq!(&**source, "^__utm");
            assert!(regex.is_match(b"__UTMA"), "key regexes ignore case");
        }
        s => panic!("{s:?}"),
    }
    assert!(v[4].count && !v[4].exclude);
    assert_eq!(v[5].collection, Collection::Xml);
    assert_eq!(v[5].selector, Some(Selector::Key("/*".into())));
    assert_eq!(
        v[6].collection,
        Collection::Tx,
        "collection names ignore case"
    );
    match &v[6].selector {
        Some(Selector::Regex { regex, .. }) => assert!(regex.is_match(b"b")),
        s => panic!("{s:?}"),
    }
    assert_eq!(v[7].selector, Some(Selector::Key("//@*".into())));
    assert_eq!(v[8].selector, Some(Selector::Key("a|b".into())));
    assert_eq!(v[4].to_string(), "&TX:foo");
    assert!(parse_variables("NOPE")
        .unwrap_err()
        .contains("unknown variable NOPE"));
    assert!(parse_variables("ARGS|").is_err());
    assert!(parse_variables("ARGS:/open").is_err());
    assert!(parse_variables("ARGS:/(/").is_err());
}

// ---- operators ----

#[test]
fn operators() {
    let o = parse_operator("foo|bar", None).unwrap();
    assert_eq!(o.name, OperatorName::Rx);
    assert!(!o.negated);
    let o = parse_operator("!@rx ^a\\x{7f}", None).unwrap();
    assert!(o.negated);
    match &o.param {
        OperatorParam::Regex { translated } => {
            assert_eq!(&**translated, "^a\\x7F");
            let (_, regex) = compile_pcre(translated).unwrap();
            assert!(regex.is_match(b"x\na\x7f"), "MULTILINE");
        }
        p => panic!("{p:?}"),
    }
    let o = parse_operator("@rx a.b", None).unwrap();
    let OperatorParam::Regex { translated } = &o.param else {
        panic!()
    };
    let (_, regex) = compile_pcre(translated).unwrap();
    assert!(regex.is_match(b"a\nb"), "DOTALL");
    assert!(regex.is_match(b"a\xffb"), "bytes");
    let o = parse_operator("@pm ( )", None).unwrap();
    assert!(matches!(&o.param, OperatorParam::List(l) if l.len() == 2));
    let o = parse_operator("!@within %{tx.allowed_methods}", None).unwrap();
    assert!(o.negated);
    assert!(matches!(&o.param, OperatorParam::Text(m) if m.has_vars()));
    let o = parse_operator("@validateByteRange 9,10,13,32-126,128-255", None).unwrap();
    assert!(
        matches!(&o.param, OperatorParam::ByteRanges(r) if r == &vec![(9, 9), (10, 10), (13, 13), (32, 126), (128, 255)])
    );
    let o = parse_operator("@ipMatch 127.0.0.1,::1,10.0.0.0/8", None).unwrap();
    assert!(matches!(&o.param, OperatorParam::List(l) if l.len() == 3));
    assert!(parse_operator("@ipMatch 1.2.3.999", None).is_err());
    assert!(parse_operator("@validateByteRange 5-1", None).is_err());
    assert!(parse_operator("@bogus x", None)
        .unwrap_err()
        .contains("unknown operator @bogus"));
    let o = parse_operator("@detectSQLi", None).unwrap();
    assert!(matches!(o.param, OperatorParam::None));
    let o = parse_operator("@EQ 0", None).unwrap();
    assert_eq!(o.name, OperatorName::Eq, "operator names ignore case");
    let o = parse_operator("@rx ^%{tx.x}$", None).unwrap();
    assert!(matches!(o.param, OperatorParam::DynamicRegex(_)));
    assert!(parse_operator("@rx (?<=a)b", None)
        .unwrap_err()
        .contains("lookaround"));
}

#[test]
fn pcre_translation() {
    let t = |p: &str| translate_pcre(p).unwrap();
    assert_eq!(t(r"\x{0b}[\x{ff}]"), r"\x0B[\xFF]");
    assert_eq!(t(r"a++b*+c?+d{2}+"), "a+b*c?d{2}");
    assert_eq!(
        t(r"\?+\*+"),
        r"\?+\*+",
        "escaped quantifier chars are atoms"
    );
    assert_eq!(t(r"a+?"), "a+?");
    assert_eq!(t(r"(?>ab)"), "(?:ab)");
    assert_eq!(t(r"\<a\>"), "<a>");
    assert_eq!(t(r"[[a]"), r"[\[a]");
    assert_eq!(t(r"[]a]"), "[]a]");
    assert_eq!(t(r"[^]a]"), "[^]a]");
    assert_eq!(t(r"[a&&b~~]"), r"[a\&\&b\~\~]");
    assert_eq!(t(r"[[:alpha:]]"), "[[:alpha:]]");
    assert_eq!(t("é"), r"\xC3\xA9");
    assert_eq!(t(r"a{x}b{"), r"a\{x\}b\{");
    assert_eq!(t(r"\e\0\012"), r"\x1B\x00\x0A");
    assert_eq!(t(r"(?#note)a"), "a");
    assert_eq!(t(r"(?'n'a)"), "(?P<n>a)");
    assert!(translate_pcre(r"(a)\1")
        .unwrap_err()
        .contains("backreference"));
    assert!(translate_pcre(r"a(?=b)").is_err());
    assert!(translate_pcre(r"\x{100}").is_err());
    assert!(translate_pcre(r"[abc").is_err());
    assert!(translate_pcre(r"\Qa\E").is_err());
    assert!(translate_pcre("a\\").is_err());
    // Everything translated compiles.
    for p in [
        r"[\w-]+\.php",
        r"(?i)\bselect\b.{0,40}\bfrom\b",
        r"^[^\s]{5,}$",
        "\\h\\v\\R\\N\\Z",
    ] {
        compile_pcre(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
    let (_, re) = compile_pcre(r"(?i)ABC").unwrap();
    assert!(re.is_match(b"abc"));
}

// ---- actions ----

#[test]
fn actions() {
    let a = parse_actions(
        "id:'7',phase:request,msg:'m %{TX.0}',logdata:'%{MATCHED_VAR}',tag:'x',severity:'CRITICAL',ver:'v',rev:2,maturity:9,accuracy:8,t:none,t:base64decode,t:urlDecodeUni,chain,skip:2,skipAfter:END,capture,multiMatch,log,nolog,auditlog,noauditlog,status:403,redirect:'http://%{request_headers.host}/',allow:phase,allow,allow:REQUEST,drop,deny,pass,block,expirevar:ip.x=60,initcol:global=global,setenv:A=b,setenv:!B,sanitiseArg:password,sanitiseMatched,setuid:%{tx.u},xmlns:a=http://x",
    )
    .unwrap();
    assert_eq!(a[0], Action::Id(7));
    assert_eq!(a[1], Action::Phase(2));
    assert!(matches!(&a[2], Action::Msg(m) if m.raw() == "m %{TX.0}" && m.has_vars()));
    assert_eq!(a[5], Action::Severity(Severity::Critical));
    assert_eq!(a[10], Action::Transform(Transform::None));
    assert_eq!(
        a[11],
        Action::Transform(Transform::Base64Decode),
        "t: names ignore case"
    );
    assert_eq!(a[14], Action::Skip(2));
    assert_eq!(a[15], Action::SkipAfter("END".into()));
    assert_eq!(a[22], Action::Status(403));
    assert!(matches!(&a[23], Action::Disruptive(Disruptive::Redirect(m)) if m.has_vars()));
    assert_eq!(
        a[24],
        Action::Disruptive(Disruptive::Allow(AllowScope::Phase))
    );
    assert_eq!(
        a[25],
        Action::Disruptive(Disruptive::Allow(AllowScope::All))
    );
    assert_eq!(
        a[26],
        Action::Disruptive(Disruptive::Allow(AllowScope::Request))
    );
    assert!(matches!(&a[31], Action::ExpireVar { collection, .. } if &**collection == "ip"));
    assert!(matches!(&a[34], Action::SetEnv { value: None, .. }));
    for (sev, want) in [
        ("2", Severity::Critical),
        ("warning", Severity::Warning),
        ("7", Severity::Debug),
    ] {
        assert_eq!(
            parse_actions(&format!("severity:{sev}")).unwrap(),
            vec![Action::Severity(want)]
        );
    }
    for bad in [
        "severity:8",
        "phase:6",
        "t:bogus",
        "bogus",
        "id:x",
        "status:42",
        "pass:1",
        "skip:0",
        "allow:x",
    ] {
        assert!(parse_actions(bad).is_err(), "{bad}");
    }
    assert!(parse_actions("frobnicate")
        .unwrap_err()
        .contains("unknown action frobnicate"));
}

#[test]
fn setvar_forms() {
    let sv = |s: &str| match parse_actions(s).unwrap().pop() {
        Some(Action::SetVar(v)) => v,
        a => panic!("{a:?}"),
    };
    let v = sv("setvar:'tx.anomaly_score_pl1=+%{tx.critical_anomaly_score}'");
    assert_eq!(&*v.collection, "tx");
    assert_eq!(v.key.raw(), "anomaly_score_pl1");
    assert!(matches!(&v.op, SetVarOp::Add(m) if m.raw() == "%{tx.critical_anomaly_score}"));
    assert!(matches!(sv("setvar:TX.a=-5").op, SetVarOp::Sub(_)));
    assert!(matches!(sv("setvar:tx.a=GET HEAD").op, SetVarOp::Set(m) if m.raw() == "GET HEAD"));
    assert!(matches!(sv("setvar:tx.a=").op, SetVarOp::Set(m) if m.raw().is_empty()));
    assert!(matches!(sv("setvar:!tx.a").op, SetVarOp::Delete));
    assert!(matches!(sv("setvar:tx.a").op, SetVarOp::Touch));
    let v = sv("setvar:'tx.%{rule.id}-ARGS=%{MATCHED_VAR}'");
    assert!(v.key.has_vars());
    assert_eq!(&*sv("setvar:TX.x=1").collection, "tx");
    assert!(parse_actions("setvar:novalue").is_err());
}

#[test]
fn ctl_actions() {
    let ctl = |s: &str| match parse_actions(s).unwrap().pop() {
        Some(Action::Ctl(c)) => c,
        a => panic!("{a:?}"),
    };
    assert_eq!(
        ctl("ctl:ruleRemoveById=941000-942999"),
        Ctl::RuleRemoveById(vec![IdRange {
            first: 941000,
            last: 942999
        }])
    );
    assert_eq!(
        ctl("ctl:ruleRemoveByTag=OWASP_CRS"),
        Ctl::RuleRemoveByTag("OWASP_CRS".into())
    );
    match ctl("ctl:ruleRemoveTargetById=942100;ARGS:password") {
        Ctl::RuleRemoveTargetById(ids, vars) => {
            assert_eq!(
                ids,
                vec![IdRange {
                    first: 942100,
                    last: 942100
                }]
            );
            assert_eq!(vars[0].to_string(), "ARGS:password");
        }
        c => panic!("{c:?}"),
    }
    assert!(
        matches!(ctl("ctl:ruleRemoveTargetByTag=attack-sqli;ARGS:pwd"), Ctl::RuleRemoveTargetByTag(t, _) if &*t == "attack-sqli")
    );
    assert_eq!(
        ctl("ctl:ruleEngine=DetectionOnly"),
        Ctl::RuleEngine(EngineMode::DetectionOnly)
    );
    assert_eq!(
        ctl("ctl:requestBodyProcessor=JSON"),
        Ctl::RequestBodyProcessor(BodyProcessor::Json)
    );
    assert_eq!(
        ctl("ctl:requestBodyAccess=Off"),
        Ctl::RequestBodyAccess(false)
    );
    assert_eq!(
        ctl("ctl:auditEngine=Off"),
        Ctl::AuditEngine(AuditEngine::Off)
    );
    assert_eq!(ctl("ctl:auditLogParts=+E"), Ctl::AuditLogParts("+E".into()));
    assert_eq!(
        ctl("ctl:forceRequestBodyVariable=On"),
        Ctl::ForceRequestBodyVariable(true)
    );
    for bad in [
        "ctl:nope=1",
        "ctl:ruleEngine=maybe",
        "ctl:ruleRemoveTargetById=1",
        "ctl:ruleRemoveById=x",
        "ctl:requestBodyProcessor=YAML",
        "ctl:x",
    ] {
        assert!(parse_actions(bad).is_err(), "{bad}");
    }
}

#[test]
fn macros() {
    let m =
        Macro::parse("a %{TX.foo} b %{MATCHED_VAR}%{tx.0}%{request_headers.User-Agent} %{ open")
            .unwrap();
    assert_eq!(
        m.parts(),
        &[
            MacroPart::Literal("a ".into()),
            MacroPart::Var {
                collection: Collection::Tx,
                key: Some("foo".into())
            },
            MacroPart::Literal(" b ".into()),
            MacroPart::Var {
                collection: Collection::MatchedVar,
                key: None
            },
            MacroPart::Var {
                collection: Collection::Tx,
                key: Some("0".into())
            },
            MacroPart::Var {
                collection: Collection::RequestHeaders,
                key: Some("User-Agent".into())
            },
            MacroPart::Literal(" %{ open".into()),
        ]
    );
    let s = m.expand(|c, k| format!("<{c}.{}>", k.unwrap_or("")));
    assert_eq!(
        s,
        "a <TX.foo> b <MATCHED_VAR.><TX.0><REQUEST_HEADERS.User-Agent> %{ open"
    );
    let lit = Macro::parse("plain").unwrap();
    assert_eq!(lit.as_literal(), Some("plain"));
    assert!(Macro::parse("%{nope.x}")
        .unwrap_err()
        .contains("unknown variable"));
}

// ---- rules, chains, defaults ----

#[test]
fn chains() {
    let set = parse_str(
        "SecRule ARGS \"@rx a\" \"id:1,phase:1,deny,chain\"\n  SecRule ARGS \"@rx b\" \"chain,t:lowercase\"\n    SecRule ARGS \"@rx c\" \"setvar:tx.x=1\"\nSecMarker END\nSecAction \"id:2,phase:2,pass\"",
    )
    .unwrap();
    assert_eq!(set.entries.len(), 3);
    let r = rule(&set, 1);
    assert!(r.is_chain());
    assert_eq!(r.chain.len(), 2);
    assert!(r.chain.iter().all(|l| l.phase == 1 && l.id.is_none()));
    assert_eq!(r.chain[0].transforms, vec![Transform::Lowercase]);
    assert_eq!(r.disruptive, Disruptive::Deny);
    assert_eq!(set.position(2), Some(2));
    assert!(matches!(&set.entries[1], Entry::Marker(m) if &*m.name == "END"));

    let e = err("SecRule ARGS \"@rx a\" \"id:1,chain\"");
    assert!(e.message.contains("no rule follows"), "{e}");
    let e = err("SecRule ARGS \"@rx a\" \"id:1,chain\"\nSecMarker X");
    assert_eq!(e.line, 2);
    let e = err("SecRule ARGS a \"id:1,chain\"\nSecRule ARGS b \"id:2\"");
    assert!(e.message.contains("chained rule cannot have an id"), "{e}");
}

#[test]
fn default_actions() {
    let set = parse_str(
        "SecRule ARGS a \"id:1,phase:2,block\"\n\
         SecDefaultAction \"phase:2,log,auditlog,deny,status:403,t:lowercase,tag:'d'\"\n\
         SecRule ARGS a \"id:2,phase:2,block,t:urlDecodeUni\"\n\
         SecRule ARGS a \"id:3,phase:2,pass,t:none,nolog\"\n\
         SecRule ARGS a \"id:4,phase:2,nolog,auditlog\"\n\
         SecRule ARGS a \"id:5,phase:1,block\"\n\
         SecRule ARGS a \"id:6,phase:2,deny,status:406\"",
    )
    .unwrap();
    let r = rule(&set, 1);
    assert_eq!(r.disruptive, Disruptive::Pass, "before SecDefaultAction");
    assert!(r.log && r.auditlog);
    let r = rule(&set, 2);
    assert!(r.block);
    assert_eq!(r.disruptive, Disruptive::Deny);
    assert_eq!(r.status, Some(403));
    assert_eq!(
        r.transforms,
        vec![Transform::Lowercase, Transform::UrlDecodeUni]
    );
    assert_eq!(r.tags, vec!["d".into()]);
    let r = rule(&set, 3);
    assert_eq!(r.disruptive, Disruptive::Pass);
    assert!(r.transforms.is_empty(), "t:none drops the defaults");
    assert!(!r.log && !r.auditlog, "nolog implies noauditlog");
    let r = rule(&set, 4);
    assert!(!r.log && r.auditlog);
    assert_eq!(
        r.disruptive,
        Disruptive::Deny,
        "no disruptive action: the default's"
    );
    assert_eq!(rule(&set, 5).disruptive, Disruptive::Pass, "other phase");
    assert_eq!(rule(&set, 6).status, Some(406));
    assert!(err("SecDefaultAction \"log,pass\"")
        .message
        .contains("needs a phase"));
    assert!(err("SecDefaultAction \"phase:2,id:4,pass\"")
        .message
        .contains("cannot hold id"));
}

// ---- load-time exclusions ----

const THREE: &str = "SecRule ARGS a \"id:100,phase:2,pass,tag:'attack-sqli',msg:'SQLi'\"\n\
SecRule ARGS b \"id:105,phase:2,pass,tag:'attack-xss',chain\"\n\
  SecRule ARGS c \"t:none\"\n\
SecRule ARGS d \"id:200,phase:2,pass,tag:'attack-sqli'\"\n";

#[test]
fn remove_by_id_tag_msg() {
    let set = parse_str(&format!(
        "{THREE}SecRuleRemoveById 101-105 200\nSecRule ARGS x \"id:103,pass\""
    ))
    .unwrap();
    let ids: Vec<_> = set.rules().map(|r| r.id.unwrap()).collect();
    assert_eq!(
        ids,
        vec![100, 103],
        "acts on earlier rules only; chains go whole"
    );
    assert_eq!(set.position(103), Some(1));
    let set = parse_str(&format!("{THREE}SecRuleRemoveByTag attack-sqli")).unwrap();
    let ids: Vec<_> = set.rules().map(|r| r.id.unwrap()).collect();
    assert_eq!(ids, vec![105]);
    let set = parse_str(&format!("{THREE}SecRuleRemoveByMsg SQLi")).unwrap();
    assert_eq!(set.rules().count(), 2);
    assert!(set.rule(100).is_none());
    assert!(err("SecRuleRemoveById 5-1")
        .message
        .contains("empty id range"));
}

#[test]
fn update_target_and_action() {
    let set = parse_str(&format!(
        "{THREE}SecRuleUpdateTargetById 100 \"!ARGS:foo|!REQUEST_COOKIES:/^_ga/\"\n\
         SecRuleUpdateTargetById 100 \"!ARGS:foo\"\n\
         SecRuleUpdateTargetByTag attack-sqli REQUEST_HEADERS:X\n\
         SecRuleUpdateTargetByMsg SQLi ARGS_GET ARGS\n\
         SecRuleUpdateActionById 105 \"msg:'new',t:lowercase,deny,status:403\"\n\
         SecRuleUpdateActionById 200 \"phase:1\""
    ))
    .unwrap();
    let r = rule(&set, 100);
    let v: Vec<String> = r.variables.iter().map(|v| v.to_string()).collect();
    assert_eq!(
        v,
        vec![
            "ARGS_GET",
            "!ARGS:foo",
            "!REQUEST_COOKIES:/^_ga/",
            "REQUEST_HEADERS:X"
        ],
        "exclusions once; the replacing form swaps ARGS"
    );
    let r = rule(&set, 105);
    assert_eq!(r.msg_raw(), Some("new"));
    assert_eq!(r.disruptive, Disruptive::Deny);
    assert_eq!(r.status, Some(403));
    assert_eq!(r.transforms, vec![Transform::Lowercase]);
    assert_eq!(r.chain.len(), 1, "the chain is kept");
    assert_eq!(rule(&set, 200).phase, 1);
    assert!(err("SecRuleUpdateActionById 9 \"pass\"")
        .message
        .contains("no rule 9"));
    assert!(err(&format!("{THREE}SecRuleUpdateActionById 100 \"id:5\""))
        .message
        .contains("cannot change the id"));
}

// ---- directives, errors ----

#[test]
fn config_directives() {
    let set = parse_str(
        "SecRuleEngine DetectionOnly\nSecRequestBodyAccess On\nSecResponseBodyAccess Off\n\
         SecRequestBodyLimit 13107200\nSecRequestBodyNoFilesLimit 131072\n\
         SecRequestBodyLimitAction ProcessPartial\nSecResponseBodyLimit 524288\n\
         SecResponseBodyLimitAction Reject\nSecResponseBodyMimeType text/plain text/html\n\
         SecResponseBodyMimeType text/xml\nSecArgumentSeparator ;\nSecCookieFormat 0\n\
         SecUnicodeMapFile unicode.mapping 20127\nSecComponentSignature \"X/1\"\n\
         SecCollectionTimeout 600\nSecAuditEngine RelevantOnly\nSecAuditLog /var/log/a.log\n\
         SecAuditLogParts ABIJDEFHZ\nSecAuditLogType Serial\nSecDebugLog /tmp/d\nSecDebugLogLevel 0\n\
         SecStatusEngine Off\nSecTmpDir /tmp/\nSecDataDir /tmp/\nSecPcreMatchLimit 1000\n\
         SecPcreMatchLimitRecursion 1000\nsecruleengine On\n",
    )
    .unwrap();
    let c = &set.config;
    assert_eq!(
        c.rule_engine,
        Some(EngineMode::On),
        "names ignore case; last wins"
    );
    assert_eq!(c.request_body_access, Some(true));
    assert_eq!(c.response_body_access, Some(false));
    assert_eq!(c.request_body_limit, Some(13107200));
    assert_eq!(c.request_body_no_files_limit, Some(131072));
    assert_eq!(
        c.request_body_limit_action,
        Some(LimitAction::ProcessPartial)
    );
    assert_eq!(c.response_body_limit_action, Some(LimitAction::Reject));
    assert_eq!(c.response_body_mime_types.as_ref().unwrap().len(), 3);
    assert_eq!(c.argument_separator.as_deref(), Some(";"));
    assert_eq!(c.audit_engine, Some(AuditEngine::RelevantOnly));
    assert_eq!(c.log_directives.len(), 6);
    assert_eq!(c.pcre_match_limit, Some(1000));
    assert_eq!(set.notes.len(), 1, "SecUnicodeMapFile noted");
}

#[test]
fn errors_carry_file_and_line() {
    let e = err("\n# c\nSecRule ARGS a \"id:1,pass\"\nSecFrobnicate On\n");
    assert_eq!((e.file.as_str(), e.line), ("<string>", 4));
    assert_eq!(e.to_string(), "<string>:4: unknown directive SecFrobnicate");
    let cases = [
        (
            "SecRule ARGS \"@rx (\" \"id:1\"",
            "@rx pattern does not compile",
        ),
        ("SecRule ARGS a \"phase:2,pass\"", "needs an id"),
        (
            "SecRule ARGS a \"id:1\"\nSecAction \"id:1\"",
            "already defined at <string>:1",
        ),
        ("SecRule ARGS a \"id:1,bogus\"", "unknown action bogus"),
        ("SecRule BOGUS a \"id:1\"", "unknown variable BOGUS"),
        ("SecRule ARGS", "takes 2 to 3 arguments"),
        ("SecRuleEngine Maybe", "SecRuleEngine"),
        ("SecRequestBodyLimit lots", "bad number"),
        (
            "SecRule ARGS \"@pmFromFile /nonexistent/x.data\" \"id:1\"",
            "cannot read",
        ),
        ("Include /nonexistent/*.conf", "no file matches"),
        ("SecRule ARGS \"@rx a\" \"id:1", "missing closing"),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.message.contains(want), "{text}: {e}");
        assert!(e.line >= 1, "{text}");
    }
}

#[test]
fn includes_and_data_files() {
    let d = tmpdir("inc");
    std::fs::create_dir_all(d.join("rules")).unwrap();
    std::fs::write(
        d.join("main.conf"),
        "Include rules/*.conf\nIncludeOptional nothing/*.conf\n",
    )
    .unwrap();
    std::fs::write(
        d.join("rules/a.conf"),
        "SecRule ARGS \"@pmFromFile words.data\" \"id:1,pass\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("rules/b.conf"),
        "SecRule REMOTE_ADDR \"@ipMatchFromFile ips.data\" \"id:2,pass\"\nSecRule ARGS x \"id:3,bogus\"\n",
    )
    .unwrap();
    std::fs::write(d.join("rules/c.conf.example"), "garbage\n").unwrap();
    std::fs::write(
        d.join("rules/words.data"),
        "# comment\n\nalpha\n  # indented comment\n beta gamma\r\n",
    )
    .unwrap();
    std::fs::write(d.join("rules/ips.data"), "10.0.0.0/8\n::1\n").unwrap();
    let e = load(&[d.join("main.conf")]).unwrap_err();
    assert!(e.file.ends_with("rules/b.conf"), "{e}");
    assert_eq!(e.line, 2);
    std::fs::write(
        d.join("rules/b.conf"),
        "SecRule REMOTE_ADDR \"@ipMatchFromFile ips.data\" \"id:2,pass\"\n",
    )
    .unwrap();
    let set = load(&[d.join("main.conf")]).unwrap();
    assert_eq!(set.rules().count(), 2);
    match &rule(&set, 1).operator.param {
        OperatorParam::List(l) => assert_eq!(l, &vec!["alpha".into(), " beta gamma".into()]),
        p => panic!("{p:?}"),
    }
    // A directory loads its *.conf files.
    let set = load(&[d.join("rules")]).unwrap();
    assert_eq!(set.rules().count(), 2);
    // Include loops stop.
    std::fs::write(d.join("loop.conf"), "Include loop.conf\n").unwrap();
    assert!(load(&[d.join("loop.conf")])
        .unwrap_err()
        .message
        .contains("nested"));
    let _ = std::fs::remove_dir_all(&d);
}

// ---- robustness (the fuzz target's property, run briefly here) ----

fn sandboxed(text: &str) -> Result<Ruleset, Error> {
    let mut l = Loader::sandboxed();
    l.load_str(text, "fuzz", None)?;
    l.finish()
}

#[test]
fn mangled_text_never_panics() {
    let mut seed = vec![
        "SecRule ARGS|!ARGS:/a|b/|&TX:x \"!@rx (?>a++)[[:alpha:]]\\x{41}é\" \"id:1,phase:2,block,t:none,setvar:'tx.a=+%{tx.b}',ctl:ruleRemoveTargetById=1-2;ARGS:x,msg:'a\\'b',chain\"\n SecRule TX:0 \"@streq %{TX.1}\" \"t:lowercase\"\nSecMarker \"END\"\nSecRuleUpdateTargetById 1 \"!ARGS:y\"\nSecRuleRemoveById 1-5\nSecDefaultAction \"phase:1,log,pass\"\n".to_string(),
        "SecAction \\\n \"id:900990,\\\n phase:1,\\\n pass,\\\n setvar:tx.crs_setup_version=4280\"\nSecRuleUpdateActionById 900990 \"deny,status:403\"\n".to_string(),
    ];
    if let Ok(t) =
        std::fs::read_to_string(Path::new(CRS).join("rules/REQUEST-920-PROTOCOL-ENFORCEMENT.conf"))
    {
        seed.push(t.chars().take(20_000).collect());
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet = b"\\\"' ,:|!&@%{}()[]/*+?\n#-=;\xc3\xa9x0a";
    for round in 0..1500 {
        let base = seed[round % seed.len()].as_bytes();
        let mut b = base.to_vec();
        for _ in 0..1 + next() % 8 {
            let pos = (next() as usize) % (b.len() + 1);
            match next() % 3 {
                0 if pos < b.len() => {
                    b.remove(pos);
                }
                1 => b.insert(pos, alphabet[(next() as usize) % alphabet.len()]),
                _ => {
                    let end = (pos + (next() as usize) % 64).min(b.len());
                    b.drain(pos..end);
                }
            }
        }
        let text = String::from_utf8_lossy(&b);
        if let Err(e) = sandboxed(&text) {
            assert!(e.line >= 1, "{e}");
            assert!(!e.message.is_empty());
        }
        for l in logical_lines(&text).iter().take(50) {
            let _ = translate_pcre(&l.1);
            let _ = parse_variables(&l.1);
            let _ = split_actions(&l.1);
            let _ = Macro::parse(&l.1);
        }
    }
    assert!(sandboxed("Include x.conf")
        .unwrap_err()
        .message
        .contains("not read"));
    assert!(sandboxed("SecRule ARGS \"@pmFromFile x\" \"id:1\"").is_err());
}
