//! libinjection's own test vectors (tests/data/libinjection/*.txt, copied
//! from its repository), run the way its `testdriver.c` runs them: each
//! file has `--TEST--`, `--INPUT--` and `--EXPECTED--` sections; the input
//! and the expected output are right-trimmed; the output is the token list
//! (tokens, folding, html5), the fingerprint (sqli) or 0/1 (xss).

use super::html5::{Flags, Tokenizer};
use super::sqli::{self, State, Token};
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/libinjection")
}

fn rtrim(mut v: Vec<u8>) -> Vec<u8> {
    while let Some(&c) = v.last() {
        if matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
            v.pop();
        } else {
            break;
        }
    }
    v
}

/// The (input, expected) of a test file, or None when it is malformed.
fn parse_test(text: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut section = 0;
    let mut input = Vec::new();
    let mut expected = Vec::new();
    for line in text.split_inclusive(|&c| c == b'\n') {
        if section == 0 && line == b"--TEST--\n" {
            section = 1;
        } else if section == 1 && line == b"--INPUT--\n" {
            section = 2;
        } else if section == 2 && line == b"--EXPECTED--\n" {
            section = 3;
        } else {
            match section {
                2 => input.extend_from_slice(line),
                3 => expected.extend_from_slice(line),
                _ => {}
            }
        }
    }
    (section == 3).then(|| (rtrim(input), rtrim(expected)))
}

fn print_string(out: &mut Vec<u8>, t: &Token) {
    if t.str_open != 0 {
        out.push(t.str_open);
    }
    out.extend_from_slice(t.cstr());
    if t.str_close != 0 {
        out.push(t.str_close);
    }
}

fn print_token(out: &mut Vec<u8>, t: &Token) {
    out.push(t.ttype);
    out.push(b' ');
    match t.ttype {
        b's' => print_string(out, t),
        b'v' => {
            if t.count >= 1 {
                out.push(b'@');
            }
            if t.count == 2 {
                out.push(b'@');
            }
            print_string(out, t);
        }
        _ => out.extend_from_slice(t.cstr()),
    }
    out.push(b'\n');
}

fn run_one(kind: &str, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match kind {
        "tokens" => {
            let mut st = State::new(input, sqli::FLAG_QUOTE_NONE | sqli::FLAG_SQL_ANSI);
            while st.tokenize() {
                print_token(&mut out, &st.tokenvec[st.current]);
            }
        }
        "folding" => {
            let mut st = State::new(input, sqli::FLAG_QUOTE_NONE | sqli::FLAG_SQL_ANSI);
            let n = st.fold();
            for t in &st.tokenvec[..n] {
                print_token(&mut out, t);
            }
        }
        "sqli" => {
            if let Some(fp) = super::detect_sqli(input) {
                out.extend_from_slice(fp.as_bytes());
            }
        }
        "html5" => {
            let mut h5 = Tokenizer::new(input, Flags::DataState);
            while h5.next_token() {
                out.extend_from_slice(h5.token_type.name().as_bytes());
                out.extend_from_slice(format!(",{},", h5.token_len).as_bytes());
                let tok = h5.token();
                let tok = match memchr::memchr(0, tok) {
                    Some(i) => &tok[..i],
                    None => tok,
                };
                out.extend_from_slice(tok);
                out.push(b'\n');
            }
        }
        "xss" => out.push(if super::detect_xss(input) { b'1' } else { b'0' }),
        _ => unreachable!(),
    }
    rtrim(out)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// What libinjection 3.9.2's C code outputs for the vectors whose
/// expected output was written for an older libinjection (the stored copies
/// of the vectors come from several points of its history).
fn outputs_3_9_2() -> std::collections::HashMap<String, Vec<u8>> {
    let text = std::fs::read_to_string(data_dir().join("libinjection-3.9.2-outputs.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, hex) = l.split_once('\t')?;
            Some((name.to_string(), unhex(hex)))
        })
        .collect()
}

/// Runs every test file of a kind; returns (as written, as 3.9.2,
/// failures).
fn run_kind(kind: &str) -> (usize, usize, Vec<String>) {
    let prefix = format!("test-{kind}-");
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .expect("tests/data/libinjection")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".txt"))
        })
        .collect();
    files.sort();
    let newer = outputs_3_9_2();
    let (mut as_written, mut as_392) = (0, 0);
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some((input, expected)) = parse_test(&text) else {
            failures.push(format!("{name}: malformed"));
            continue;
        };
        let got = run_one(kind, &input);
        if got == expected {
            as_written += 1;
        } else if newer.get(&name) == Some(&got) {
            as_392 += 1;
        } else {
            failures.push(format!(
                "{name}\n  input:    {:?}\n  expected: {:?}\n  got:      {:?}",
                String::from_utf8_lossy(&input),
                String::from_utf8_lossy(newer.get(&name).unwrap_or(&expected)),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    println!(
        "libinjection test-{kind}-*: {} passed ({as_written} as written, {as_392} as libinjection 3.9.2 outputs them), {} failed",
        as_written + as_392,
        failures.len()
    );
    assert!(
        as_written + as_392 + failures.len() > 0,
        "no test-{kind}-* files"
    );
    (as_written, as_392, failures)
}

fn check_kind(kind: &str) {
    let (_, _, failures) = run_kind(kind);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// 5,000 inputs (SQL and HTML fragments, benign strings, random bytes)
/// with libinjection 3.9.2's C outputs: fingerprint, XSS verdict, and the
/// folded token list.
#[test]
fn differential_3_9_2() {
    let text = std::fs::read_to_string(data_dir().join("differential-3.9.2.tsv")).unwrap();
    let (mut total, mut failures) = (0, Vec::new());
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let input = unhex(cols[0]);
        total += 1;
        let sqli = run_one("sqli", &input);
        let xss = run_one("xss", &input);
        let folding = run_one("folding", &input);
        let want_folding = unhex(cols.get(3).copied().unwrap_or(""));
        if sqli != cols[1].as_bytes() || xss != cols[2].as_bytes() || folding != want_folding {
            failures.push(format!(
                "{:?}: sqli {:?} (want {:?}), xss {:?} (want {:?}), folding {:?} (want {:?})",
                String::from_utf8_lossy(&input),
                String::from_utf8_lossy(&sqli),
                cols[1],
                String::from_utf8_lossy(&xss),
                cols[2],
                String::from_utf8_lossy(&folding),
                String::from_utf8_lossy(&want_folding)
            ));
        }
    }
    println!(
        "libinjection differential-3.9.2: {} passed, {} failed",
        total - failures.len(),
        failures.len()
    );
    failures.truncate(40);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn vectors_tokens() {
    check_kind("tokens");
}

#[test]
fn vectors_folding() {
    check_kind("folding");
}

#[test]
fn vectors_sqli() {
    check_kind("sqli");
}

#[test]
fn vectors_html5() {
    check_kind("html5");
}

#[test]
fn vectors_xss() {
    check_kind("xss");
}

#[test]
fn api_examples() {
    assert_eq!(
        super::detect_sqli(b"1' OR '1'='1").as_deref(),
        Some("s&sos")
    );
    assert_eq!(
        super::detect_sqli(b"1 UNION SELECT * FROM users").as_deref(),
        Some("1UEok")
    );
    assert_eq!(super::detect_sqli(b"hello world"), None);
    assert_eq!(super::detect_sqli(b""), None);
    assert!(super::detect_xss(b"<script>alert(1)</script>"));
    assert!(super::detect_xss(b"<a href=\"javascript:alert(1)\">x</a>"));
    assert!(super::detect_xss(b"<img src=x onerror=alert(1)>"));
    assert!(!super::detect_xss(b"hello <b>world</b>"));
    assert!(!super::detect_xss(b""));
}

/// Hostile shapes: no panic, no stack growth, linear time.
#[test]
fn hostile_inputs() {
    let mut inputs: Vec<Vec<u8>> = vec![
        b"<a"
            .iter()
            .chain([b'/'; 100_000].iter())
            .copied()
            .collect(),
        vec![b'/'; 100_000],
        b"/*".repeat(50_000),
        b"'".repeat(100_000),
        b"\\".repeat(100_000),
        b"$a$".repeat(30_000),
        b"<!--".repeat(30_000),
        b"<a b=".repeat(30_000),
        b"&#x".repeat(30_000),
        (0u8..=255).cycle().take(100_000).collect(),
    ];
    for n in 0..600u32 {
        // Short pseudo-random byte strings from SQL/HTML punctuation.
        let alphabet = b"'\"`$@#-/*!<>=&|%;:()[]{}\\.,01eExXnNqQuUbB \t\n\0\xa0\xffaz";
        let mut x = n.wrapping_mul(2_654_435_761).wrapping_add(12345);
        let len = (n % 40) as usize;
        let mut v = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(alphabet[(x as usize) % alphabet.len()]);
        }
        inputs.push(v);
    }
    let start = std::time::Instant::now();
    for input in &inputs {
        let _ = super::detect_sqli(input);
        let _ = super::detect_xss(input);
    }
    // Generous bound: quadratic behaviour on 100 KB inputs would take far
    // longer.
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
}

/// `cargo test -p switchyard-waf --release --lib libinjection::tests::bench -- --ignored --nocapture`
#[test]
#[ignore = "a benchmark of libinjection, run by hand (--release)"]
fn bench() {
    super::warm_up();
    let benign: [&[u8]; 8] = [
        b"john.smith@example.com",
        b"The quick brown fox jumps over",
        b"2024-05-17T10:22:31Z",
        b"Mozilla/5.0 (X11; Linux x86_64)",
        b"42",
        b"search for red shoes size 9",
        b"O'Brien and sons, Dublin",
        b"en-GB,en;q=0.9,fr;q=0.8",
    ];
    let attacks: [&[u8]; 3] = [
        b"1' OR '1'='1' -- ",
        b"<script>alert(document.cookie)</script>",
        b"1 UNION ALL SELECT NULL,version()--",
    ];
    let time = |label: &str, set: &[&[u8]], f: &dyn Fn(&[u8]) -> bool| {
        let iters = 200_000;
        let mut hits = 0usize;
        let start = std::time::Instant::now();
        for i in 0..iters {
            let s = set[i % set.len()];
            if f(std::hint::black_box(s)) {
                hits += 1;
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / iters as f64;
        println!("{label}: {ns:.0} ns per call ({hits} detections)");
    };
    time("detectSQLi benign", &benign, &|s| {
        super::sqli_fingerprint(s).is_some()
    });
    time("detectXSS  benign", &benign, &|s| super::detect_xss(s));
    time("detectSQLi attack", &attacks, &|s| {
        super::sqli_fingerprint(s).is_some()
    });
    time("detectXSS  attack", &attacks, &|s| super::detect_xss(s));
}
