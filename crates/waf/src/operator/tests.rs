//! Operator tests. Vectors marked "ModSecurity" are from ModSecurity's own
//! suite (owasp-modsecurity/secrules-language-tests, operators/*.json,
//! Apache-2.0), transcribed as bytes.

use super::*;
use std::time::Instant;

fn op(name: &str, arg: &str) -> Operator {
    compile(name, arg).unwrap_or_else(|e| panic!("@{name} {arg:?}: {e}"))
}

/// (operator, argument, input, expected)
fn check(cases: &[(&str, &str, &[u8], bool)]) -> usize {
    let mut failures = Vec::new();
    for &(name, arg, input, want) in cases {
        let o = op(name, arg);
        let got = o.matches(input, None);
        let mut caps = Captures::new();
        let got_c = o.matches(input, Some(&mut caps));
        // The engine's path: the value's signature first.
        let sig = Sig::of(input);
        let got_s = match &o {
            Operator::Rx(rx) => rx.matches_sig(input, &sig, None),
            Operator::Pm(pm) => pm.matches_sig(input, &sig, None),
            _ => got,
        };
        if got != want || got_c != want || got_s != want {
            failures.push(format!(
                "@{name} {arg:?} on {:?}: {got}, want {want}",
                String::from_utf8_lossy(input)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn contains_word_modsecurity() {
    check(&[
        ("containsWord", "", b"", true),
        ("containsWord", "TestCase", b"", false),
        ("containsWord", "", b"TestCase", true),
        ("containsWord", "abc", b"abcdefghi", false),
        ("containsWord", "def", b"abcdefghi", false),
        ("containsWord", "ghi", b"abcdefghi", false),
        ("containsWord", "abc", b"abc def ghi", true),
        ("containsWord", "def", b"abc def ghi", true),
        ("containsWord", "ghi", b"abc def ghi", true),
        ("containsWord", "abc", b"abc\0def ghi", true),
        ("containsWord", "def", b"abc\0def ghi", true),
        ("containsWord", "x", b"x", true),
        ("containsWord", "x", b" x ", true),
        ("containsWord", "y", b"xyz", false),
        (
            "containsWord",
            "hiding",
            b"hidingX<-not on word boundary, but is later on->hiding",
            true,
        ),
        // digits are boundaries in ModSecurity (only letters are not)
        ("containsWord", "abc", b"1abc2", true),
    ]);
}

#[test]
fn ends_begins_contains_streq_within() {
    check(&[
        // ModSecurity endsWith
        ("endsWith", "", b"", true),
        ("endsWith", "TestCase", b"", false),
        ("endsWith", "", b"TestCase", true),
        ("endsWith", "abc", b"abcdefghi", false),
        ("endsWith", "def", b"abcdefghi", false),
        ("endsWith", "ghi", b"abcdefghi", true),
        ("endsWith", "ghi", b"abcdef\0ghi", true),
        ("endsWith", ".pdf", b"/a/b.PDF", false), // case-sensitive
        ("beginsWith", "", b"x", true),
        ("beginsWith", "abc", b"abcdef", true),
        ("beginsWith", "abc", b"ab", false),
        ("beginsWith", "#:~:text=", b"#:~:text=foo", true),
        ("contains", "-->", b"a-->b", true),
        ("contains", "#", b"abc", false),
        ("contains", "", b"abc", true),
        ("strmatch", "WebZIP", b"Mozilla WebZIP/1", true),
        ("streq", "POST", b"POST", true),
        ("streq", "POST", b"post", false),
        ("streq", "GET /", b"GET / HTTP/1.1", false),
        ("streq", "", b"", true),
        ("within", "GET HEAD POST OPTIONS", b"GET", true),
        ("within", "GET HEAD POST OPTIONS", b"PUT", false),
        ("within", "GET HEAD POST OPTIONS", b"", true),
        (
            "within",
            "HTTP/2 HTTP/2.0 HTTP/3 HTTP/3.0",
            b"HTTP/2.0",
            true,
        ),
    ]);
}

#[test]
fn macros_are_dynamic_and_take_the_expanded_arg() {
    let o = op("within", "%{tx.allowed_methods}");
    assert!(o.is_dynamic());
    assert!(o.matches_arg(b"GET HEAD POST", b"HEAD", None));
    assert!(!o.matches_arg(b"GET HEAD POST", b"DELETE", None));
    let o = op("lt", "%{tx.max_num_args}");
    assert!(o.is_dynamic());
    assert!(o.matches_arg(b"255", b"3", None));
    assert!(!o.matches_arg(b"255", b"300", None));
    assert!(!op("streq", "POST").is_dynamic());
    assert!(op("endsWith", ".%{request_headers.host}").matches_arg(
        b".example.com",
        b"a.example.com",
        None
    ));
}

#[test]
fn numeric_with_stoi_semantics() {
    assert_eq!(stoi(b"42"), 42);
    assert_eq!(stoi(b"  -7x"), -7);
    assert_eq!(stoi(b"+3"), 3);
    assert_eq!(stoi(b"abc"), 0);
    assert_eq!(stoi(b""), 0);
    assert_eq!(stoi(b"99999999999"), 0); // out of int range
    assert_eq!(stoi(b"2147483647"), 2147483647);
    check(&[
        ("eq", "0", b"", true),
        ("eq", "0", b"abc", true),
        ("eq", "5", b"5", true),
        ("eq", "5", b"05", true),
        ("eq", "5", b"6", false),
        ("ge", "5", b"5", true),
        ("ge", "5", b"4", false),
        ("gt", "5", b"6", true),
        ("gt", "5", b"5", false),
        ("le", "5", b"5", true),
        ("le", "5", b"6", false),
        ("lt", "1", b"0", true),
        ("lt", "1", b"1", false),
        ("lt", "1", b"x", true),
        ("gt", "0", b"12 apples", true),
    ]);
}

#[test]
fn rx_modsecurity_and_flags() {
    check(&[
        ("rx", "test", b"qqtestqq", true),
        ("rx", "", b"", true),
        ("rx", "TestCase", b"", false),
        ("rx", "", b"TestCase", true),
        ("rx", "abc", b"abcdefghi", true),
        ("rx", "def", b"abcdefghi", true),
        ("rx", "ghi", b"abcdefghi", true),
        ("rx", "ghij", b"abcdefghi", false),
        (
            "rx",
            r"(?i:(sleep\((\s*?)(\d*?)(\s*?)\)|benchmark\((.*?)\,(.*?)\)))",
            b"SELECT pg_sleep(10);",
            true,
        ),
        // DOTALL and MULTILINE
        ("rx", "a.b", b"a\nb", true),
        ("rx", "^b$", b"a\nb\nc", true),
        // bytes, not UTF-8; \x{HH} is the byte
        ("rx", r"\x{ff}", b"a\xffb", true),
        ("rx", r"\x{e2}\x{80}", b"\xe2\x80\x9c", true),
        ("rx", r"[\x{c2}\x{b4}]", b"x\xb4", true),
        ("rx", r"\xa0", b"\xa0", true),
        // case-sensitive unless (?i)
        ("rx", "select", b"SELECT", false),
        ("rx", "(?i)select", b"SeLeCt", true),
    ]);
    assert!(compile("rx", "(unclosed").is_err());
}

#[test]
fn rx_captures_fill_tx_slots() {
    let o = op("rx", r"^(\w+)=(\d+)?(x)?");
    let mut c = Captures::new();
    assert!(o.matches(b"page=2", Some(&mut c)));
    assert_eq!(c.get(0), Some(&b"page=2"[..]));
    assert_eq!(c.get(1), Some(&b"page"[..]));
    assert_eq!(c.get(2), Some(&b"2"[..]));
    assert_eq!(c.get(3), None);
    assert_eq!(c.len(), 3);
    assert!(!o.matches(b"=", Some(&mut c)));
    // more than ten groups: only TX.0-9
    let o = op("rx", "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)");
    assert!(o.matches(b"abcdefghijk", Some(&mut c)));
    assert_eq!(c.get(9), Some(&b"i"[..]));
    assert_eq!(c.len(), 10);
}

/// `^.*$` (CRS 920450, 920451) skips the regex engine: it must answer and
/// capture what the regex does, newlines and empty values included.
#[test]
fn rx_whole_value_pattern_is_the_regex() {
    let Operator::Rx(rx) = op("rx", "^.*$") else {
        panic!("not an @rx");
    };
    let regex = rx.regex().expect("builds");
    for v in [
        &b"user-agent"[..],
        b"",
        b"a\nb",
        b"\r\nx-forwarded-for\n",
        b"\xff\x00ok",
    ] {
        let mut c = Captures::new();
        assert_eq!(rx.matches(v, Some(&mut c)), regex.is_match(v), "{v:?}");
        let want = regex
            .captures(v)
            .and_then(|m| m.get(0))
            .map(|m| m.as_bytes());
        assert_eq!(c.get(0), want, "{v:?}");
        assert_eq!(c.len(), 1);
    }
}

#[test]
fn pm_is_case_insensitive_and_captures_the_phrase() {
    check(&[
        (
            "pm",
            "gzip compress deflate br zstd",
            b"GZIP, deflate",
            true,
        ),
        ("pm", "gzip compress deflate br zstd", b"identity", false),
        ("pm", "AppleWebKit Android", b"mozilla applewebkit", true),
        ("pm", "( )", b"x(", true),
        ("pm", "?>", b"<?php ?>", true),
        ("pm", "|41 42|c", b"xabcx", true),
        ("pm", "\"foo bar\"", b"xBARx", true),
    ]);
    let o = op("pm", "document.cookie window.location");
    let mut c = Captures::new();
    assert!(o.matches(b"x=WINDOW.LOCATION", Some(&mut c)));
    assert_eq!(c.get(0), Some(&b"window.location"[..]));
    assert!(compile("pm", "").is_err());
}

#[test]
fn pm_from_file() {
    let dir = std::env::temp_dir().join(format!("waf-op-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.data"),
        "# comment\n\n  # indented comment\nabc\r\ndef\n/etc/passwd\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.data"), "zzz\n").unwrap();
    let o = compile_in("pmFromFile", "a.data b.data", &dir).unwrap();
    let Operator::Pm(pm) = &o else { panic!() };
    assert_eq!(
        pm.phrases,
        vec![
            b"abc".to_vec(),
            b"def".to_vec(),
            b"/etc/passwd".to_vec(),
            b"zzz".to_vec()
        ]
    );
    assert!(o.matches(b"xxxDEFyyy", None));
    assert!(o.matches(b"cat /ETC/passwd", None));
    assert!(o.matches(b"zzz", None));
    assert!(!o.matches(b"xxxyyy", None));
    assert!(!o.matches(b"# comment", None));
    assert!(compile_in("pmFromFile", "missing.data", &dir).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ip_match() {
    check(&[
        ("ipMatch", "127.0.0.1,::1", b"127.0.0.1", true),
        ("ipMatch", "127.0.0.1,::1", b"::1", true),
        ("ipMatch", "127.0.0.1,::1", b"127.0.0.2", false),
        ("ipMatch", "10.0.0.0/8, 192.168.1.0/24", b"10.200.3.4", true),
        (
            "ipMatch",
            "10.0.0.0/8, 192.168.1.0/24",
            b"192.168.2.1",
            false,
        ),
        ("ipMatch", "2001:db8::/32", b"2001:db8:1::5", true),
        ("ipMatch", "2001:db8::/32", b"2001:db9::5", false),
        ("ipMatch", "0.0.0.0/0", b"8.8.8.8", true),
        ("ipMatch", "10.0.0.0/8", b"not an ip", false),
        ("ipMatch", "10.0.0.0/8", b"::ffff:10.0.0.1", false),
    ]);
    assert!(compile("ipMatch", "10.0.0.0/33").is_err());
    assert!(compile("ipMatch", "banana").is_err());
    let dir = std::env::temp_dir().join(format!("waf-ip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ips.txt"), "# trusted\n10.1.0.0/16\n\nfe80::/10\n").unwrap();
    let o = compile_in("ipMatchFromFile", "ips.txt", &dir).unwrap();
    assert!(o.matches(b"10.1.2.3", None));
    assert!(o.matches(b"fe80::1", None));
    assert!(!o.matches(b"10.2.0.1", None));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn validate_byte_range_modsecurity() {
    check(&[
        ("validateByteRange", "0-255", b"", false),
        ("validateByteRange", "", b"TestCase", true),
        ("validateByteRange", "0-255", b"abcdefghi", false),
        ("validateByteRange", "97-105", b"abcdefghi", false),
        ("validateByteRange", "97-105", b"abcdefghij", true),
        ("validateByteRange", "1-255", b"a\0b", true),
        (
            "validateByteRange",
            "32,34,38,42-59,61,65-90,95,97-122",
            b"q=shoes&page=2",
            false,
        ),
        (
            "validateByteRange",
            "32,34,38,42-59,61,65-90,95,97-122",
            b"a<b",
            true,
        ),
        (
            "validateByteRange",
            "9,10,13,32-126,128-255",
            b"a\x7fb",
            true,
        ),
    ]);
    assert!(compile("validateByteRange", "xxx").is_err());
    assert!(compile("validateByteRange", "10-300").is_err());
}

#[test]
fn validate_url_encoding() {
    check(&[
        ("validateUrlEncoding", "", b"", false),
        ("validateUrlEncoding", "", b"a%20b", false),
        ("validateUrlEncoding", "", b"%41", false),
        ("validateUrlEncoding", "", b"%4", true),
        ("validateUrlEncoding", "", b"%", true),
        ("validateUrlEncoding", "", b"a%zzb", true),
        ("validateUrlEncoding", "", b"a%2", true),
        ("validateUrlEncoding", "", b"100%", true),
        ("validateUrlEncoding", "", b"%41%42%", true),
    ]);
}

#[test]
fn validate_utf8_encoding_modsecurity() {
    let texts = [
        "Ὕαλον ϕαγεῖν δύναμαι· τοῦτο οὔ με βλάπτει.",
        "Je peux manger du verre, ça ne me fait pas de mal.",
        "Mi povas manĝi vitron, ĝi ne damaĝas min.",
        "Я могу есть стекло, оно мне не вредит.",
        "Կրնամ ապակի ուտել և ինծի անհանգիստ չըներ։",
        "أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
        "私はガラスを食べられます。それは私を傷つけません。",
        "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요",
        "∮ E⋅da = Q,  n → ∞, ∑ f(i) = ∏ g(i), ∀x∈ℝ: ⌈x⌉ = −⌊−x⌋",
        "😀 𝄞",
    ];
    let mut cases: Vec<(&str, &str, &[u8], bool)> = texts
        .iter()
        .map(|t| ("validateUtf8Encoding", "", t.as_bytes(), false))
        .collect();
    cases.extend_from_slice(&[
        ("validateUtf8Encoding", "", b"", false),
        ("validateUtf8Encoding", "", b"\0\xe4", true),
        ("validateUtf8Encoding", "", b"\xe4", true),
        ("validateUtf8Encoding", "", b"\x03\xbf", true),
        ("validateUtf8Encoding", "", b"\xc9;", true),
        ("validateUtf8Encoding", "", b"\xff\0", true),
        ("validateUtf8Encoding", "", b"\xc0\xaf", true), // overlong
        ("validateUtf8Encoding", "", b"\xed\xa0\x80", true), // surrogate
        ("validateUtf8Encoding", "", b"\xf5\x80\x80\x80", true),
    ]);
    check(&cases);
}

#[test]
fn unconditional_no_match_and_errors() {
    assert!(op("unconditionalMatch", "").matches(b"", None));
    assert!(!op("noMatch", "").matches(b"x", None));
    assert!(compile("detectSQLi", "")
        .unwrap_err()
        .contains("libinjection"));
    assert!(compile("rbl", "x").is_err());
    // names with or without @, any case
    assert!(compile("@RX", "a").is_ok());
}

#[test]
fn prefilter_literals() {
    let lits = |p: &str| {
        required_literals(p).map(|v| {
            v.into_iter()
                .map(|l| String::from_utf8(l).unwrap())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(lits("foo"), Some(vec!["foo".into()]));
    assert_eq!(lits("(?i)FOO"), Some(vec!["foo".into()]));
    // "select"/"union", possibly extended by the whitespace that follows
    let su = lits("(?i)(?:select|union)\\s+all").unwrap();
    assert!(
        su.iter()
            .all(|l| l.starts_with("select") || l.starts_with("union")),
        "{su:?}"
    );
    assert!(su.iter().any(|l| l.starts_with("union")), "{su:?}");
    assert_eq!(lits("a+bc"), Some(vec!["abc".into()]));
    assert_eq!(lits("x?"), None);
    assert_eq!(lits("\\d+"), None);
    assert_eq!(lits("[a-z]+=\\w"), Some(vec!["=".into()]));
    // every match contains one of the literals
    for (p, hay) in [
        ("(?i)on(?:load|error)\\s*=", "ONLOAD ="),
        ("\\beval\\s*\\(", "x eval (1)"),
        ("[\\x{c2}]", "\u{a0}"),
    ] {
        let rx = Rx::new(p).unwrap();
        assert!(rx.matches(hay.as_bytes(), None), "{p}");
        assert!(rx.has_prefilter(), "{p}");
    }
    let rx = Rx::new("(?i)<script").unwrap();
    assert!(!rx.may_match(b"/index.html"));
    assert!(rx.matches(b"x<SCRIPT>", None));
}

/// A second required set from another part of a concatenation: the `=`
/// of CRS 941120's event handlers (the first set is the `on`); none when it
/// would add nothing. A value the regex matches passes both on its
/// summary, and one without the `=` is ruled out by it.
#[test]
fn prefilter_secondary_literals() {
    let p941120 = "(?i)[\\s\"'`;/0-9=\\x0B\\x09\\x0C\\x3B\\x2C\\x28\\x3B]on[a-zA-Z]{3,25}[\\s\\x0B\\x09\\x0C\\x3B\\x2C\\x28\\x3B]*?=[^=]";
    let primary = required_literals(p941120).unwrap();
    assert_eq!(
        prefilter::secondary_literals(p941120, &primary),
        Some(vec![b"=".to_vec()])
    );
    // One part only, or a second part the first already holds.
    assert_eq!(
        prefilter::secondary_literals("union", &[b"union".to_vec()]),
        None
    );
    let p = "(?i)select\\s+from";
    let primary = required_literals(p).unwrap();
    let second = prefilter::secondary_literals(p, &primary);
    assert!(
        second.iter().flatten().all(|l| primary
            .iter()
            .all(|p| !p.windows(l.len()).any(|w| w == &l[..]))),
        "{second:?} adds nothing to {primary:?}"
    );
    for (p, hits, misses) in [
        (
            p941120,
            &["x onload=alert(1)", "\"ONMOUSEOVER =x"][..],
            &["session", "keep-alive; on the go"][..],
        ),
        (
            "\\beval\\s*\\(.*\\)",
            &["eval (1)", "x eval(a)"],
            &["evaluation", "eval x"],
        ),
    ] {
        let rx = Rx::new(p).unwrap();
        for h in hits {
            let h = h.as_bytes();
            assert!(rx.matches_unfiltered(h), "{p} {h:?}");
            assert!(rx.may_match_sig(h, &Sig::of(h)), "{p} ruled out {h:?}");
            assert!(rx.may_match_summary(&Sig::of(h)), "{p} ruled out {h:?}");
        }
        for m in misses {
            let m = m.as_bytes();
            assert!(!rx.matches_unfiltered(m), "{p} {m:?}");
            assert!(!rx.may_match_sig(m, &Sig::of(m)), "{p} let {m:?} through");
        }
    }
}

/// A value's signature never rules out a literal it holds (any case), for
/// one-byte literals, repeated pairs and bytes past ASCII.
#[test]
fn sig_checks_are_sound() {
    let lits: Vec<Vec<u8>> = [
        &b"<script"[..],
        b"union",
        b"'",
        b"aaaa",
        b"\xc2\xa0",
        b"/etc/passwd",
        b"x",
        b"zz9",
    ]
    .iter()
    .map(|l| l.to_vec())
    .collect();
    let checks = SigChecks::new(&lits);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet = b"aAxXzZ9'<sScCrRiIpPtTuUnNoO/eEwWdD \xc2\xa0";
    for _ in 0..20_000 {
        let len = (next() % 24) as usize;
        let v: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        let lower = v.to_ascii_lowercase();
        let holds = lits
            .iter()
            .any(|l| lower.windows(l.len()).any(|w| w == &l[..]));
        if holds {
            assert!(
                checks.may(&Sig::of(&v)),
                "{:?} ruled out",
                String::from_utf8_lossy(&v)
            );
        }
    }
    assert!(!checks.may(&Sig::of(b"/home.php?page=1")));
    assert!(checks.may(&Sig::of(b"1 UNION select")));
    assert!(SigChecks::new(&[Vec::new()]).may(&Sig::of(b"")));
}

// ---------------------------------------------------------------------------
// The CRS: every operator compiles; the prefilter on all @rx patterns.

const CRS_RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/crs/rules");

/// `(file, operator name, argument)` of every SecRule in the CRS rule files
/// (continuation lines joined; `!` dropped; no `@` means `@rx`).
fn crs_operators() -> Option<Vec<(String, String, String)>> {
    let mut files: Vec<_> = std::fs::read_dir(CRS_RULES)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.retain(|p| p.extension().is_some_and(|x| x == "conf"));
    files.sort();
    let mut out = Vec::new();
    for p in files {
        let text = std::fs::read_to_string(&p).ok()?;
        let mut joined = String::new();
        let mut lines = Vec::new();
        for line in text.lines() {
            if let Some(l) = line.strip_suffix('\\') {
                joined.push_str(l);
                continue;
            }
            joined.push_str(line);
            lines.push(std::mem::take(&mut joined));
        }
        for line in lines {
            let l = line.trim_start();
            let Some(rest) = l.strip_prefix("SecRule") else {
                continue;
            };
            let rest = rest.trim_start();
            // the variables: up to whitespace (or quoted)
            let rest = if let Some(r) = rest.strip_prefix('"') {
                &r[r.find('"').map_or(r.len(), |i| i + 1)..]
            } else {
                &rest[rest.find([' ', '\t']).unwrap_or(rest.len())..]
            };
            let rest = rest.trim_start();
            let Some(body) = rest.strip_prefix('"') else {
                continue;
            };
            // the operator: a quoted string with \" escapes
            let mut s = String::new();
            let mut chars = body.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some('"') => s.push('"'),
                        Some(o) => {
                            s.push('\\');
                            s.push(o);
                        }
                        None => s.push('\\'),
                    },
                    '"' => break,
                    c => s.push(c),
                }
            }
            let s = s.strip_prefix('!').unwrap_or(&s);
            let (name, arg) = match s.strip_prefix('@') {
                Some(r) => match r.split_once([' ', '\t']) {
                    Some((n, a)) => (n.to_string(), a.to_string()),
                    None => (r.to_string(), String::new()),
                },
                None => ("rx".to_string(), s.to_string()),
            };
            out.push((
                p.file_name().unwrap().to_string_lossy().into_owned(),
                name,
                arg,
            ));
        }
    }
    Some(out)
}

#[test]
fn every_crs_operator_compiles() {
    let Some(ops) = crs_operators() else {
        eprintln!("no CRS at {CRS_RULES}: skipped");
        return;
    };
    let mut by_name: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let mut failures = Vec::new();
    let (mut rx, mut rx_filtered) = (0, 0);
    for (file, name, arg) in &ops {
        let e = by_name.entry(name.clone()).or_default();
        e.0 += 1;
        match compile_in(name, arg, Path::new(CRS_RULES)) {
            Ok(o) => {
                e.1 += 1;
                if let Operator::Rx(r) = &o {
                    rx += 1;
                    rx_filtered += r.has_prefilter() as usize;
                }
            }
            Err(err) if err.contains("libinjection") => {}
            Err(err) => failures.push(format!("{file}: @{name} {arg}: {err}")),
        }
    }
    let total: usize = by_name.values().map(|v| v.0).sum();
    let ok: usize = by_name.values().map(|v| v.1).sum();
    println!("CRS operators: {ok} of {total} compile (the rest: @detectSQLi/@detectXSS, in waf::libinjection)");
    for (n, (t, k)) in &by_name {
        println!("  @{n}: {k}/{t}");
    }
    println!("@rx with a literal prefilter: {rx_filtered} of {rx}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(rx >= 300, "{rx} @rx");
    assert_eq!(
        total - ok,
        by_name.get("detectSQLi").map_or(0, |v| v.0) + by_name.get("detectXSS").map_or(0, |v| v.0)
    );
}

/// Benign values of a typical GET, as the CRS sees them.
const BENIGN: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "/index.html",
    "q=shoes&page=2",
    "shoes",
    "2",
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
    "en-US,en;q=0.9",
    "gzip, deflate, br",
    "www.example.com",
    "keep-alive",
    "session=3f2a9c1e0b7d4a6e8f9012ab34cd56ef; theme=dark",
    "https://www.example.com/catalog/shoes?color=blue",
    "GET /catalog/shoes?q=shoes&page=2 HTTP/1.1",
];

#[test]
#[ignore = "micro-benchmark: cargo test --release -p switchyard-waf --lib operator::tests::bench_crs_rx -- --ignored --nocapture"]
fn bench_crs_rx_prefilter() {
    let Some(ops) = crs_operators() else { return };
    let rxs: Vec<Rx> = ops
        .iter()
        .filter(|(_, n, _)| n == "rx")
        .map(|(_, _, a)| Rx::new(a).unwrap())
        .collect();
    let values: Vec<Vec<u8>> = BENIGN.iter().map(|v| v.as_bytes().to_vec()).collect();
    let evals = rxs.len() * values.len();
    let rounds = 200;
    let time = |f: &dyn Fn(&Rx, &[u8]) -> bool| {
        let mut hits = 0usize;
        let t = Instant::now();
        for _ in 0..rounds {
            for r in &rxs {
                for v in &values {
                    hits += f(r, v) as usize;
                }
            }
        }
        (
            t.elapsed().as_nanos() as f64 / (rounds * evals) as f64,
            hits / rounds,
        )
    };
    // warm up the lazy DFAs
    time(&|r, v| r.matches_unfiltered(v));
    let (plain, hits_plain) = time(&|r, v| r.matches_unfiltered(v));
    let (filtered, hits_filtered) = time(&|r, v| r.matches(v, None));
    let (pre_only, passed) = time(&|r, v| r.may_match(v));
    assert_eq!(
        hits_plain, hits_filtered,
        "the prefilter must not change results"
    );
    // One automaton for all patterns: one scan per value, then only the
    // regexes whose literals occur.
    let set = PrefilterSet::new(&rxs.iter().map(|r| r.literals.clone()).collect::<Vec<_>>());
    let mut bits = Vec::new();
    let mut hits_set = 0usize;
    let mut ran = 0usize;
    let t = Instant::now();
    for _ in 0..rounds {
        for v in &values {
            set.scan(v, &mut bits);
            for (i, r) in rxs.iter().enumerate() {
                if PrefilterSet::may(&bits, i) {
                    ran += 1;
                    hits_set += r.matches_unfiltered(v) as usize;
                }
            }
        }
    }
    let shared = t.elapsed().as_nanos() as f64 / (rounds * evals) as f64;
    let t = Instant::now();
    for _ in 0..rounds {
        for v in &values {
            set.scan(v, &mut bits);
        }
    }
    let scan_only = t.elapsed().as_nanos() as f64 / (rounds * values.len()) as f64;
    assert_eq!(
        hits_set / rounds,
        hits_plain,
        "the shared prefilter must not change results"
    );
    println!(
        "shared automaton: {:.0} ns/eval ({:.1}x the regex alone), one scan {:.0} ns per value; {} of {} evaluations run the regex",
        shared,
        plain / shared,
        scan_only,
        ran / rounds,
        evals
    );
    let with_pf = rxs.iter().filter(|r| r.has_prefilter()).count();
    println!(
        "{} CRS @rx x {} benign values ({} evaluations): regex alone {:.0} ns/eval, with prefilter {:.0} ns/eval ({:.1}x); \
         prefilter alone {:.0} ns/eval; {} of {} patterns have a prefilter; {} of {} evaluations pass it and run the regex; {} match",
        rxs.len(),
        values.len(),
        evals,
        plain,
        filtered,
        plain / filtered,
        pre_only,
        with_pf,
        rxs.len(),
        passed,
        evals,
        hits_plain
    );
    println!(
        "per value (all {} patterns): regex alone {:.1} us, with prefilter {:.1} us",
        rxs.len(),
        plain * rxs.len() as f64 / 1000.0,
        filtered * rxs.len() as f64 / 1000.0
    );
}
