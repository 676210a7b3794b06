//! PCRE patterns (as ModSecurity compiles them: no UTF mode, DOTALL and
//! MULTILINE) rewritten for Rust's `regex::bytes` with Unicode off.
//!
//! Rewrites: `\x{HH}` to `\xHH`; non-ASCII pattern bytes to `\xHH` (PCRE
//! without UTF matches bytes); possessive quantifiers and atomic groups to
//! their plain forms (the same matches, save for pathological backtracking
//! cases); PCRE-only escapes (`\e`, `\h`, `\v`, `\R`, `\N`, `\Z`, `\cX`,
//! octal) to equivalents; inside classes, `[`, `&`, `~` and a second `-`
//! escaped (Rust reads them as nested classes and set operations). What
//! Rust cannot express (lookaround, backreferences, recursion, `\G`, `\K`,
//! `\Q...\E`) is an error.

use regex::bytes::{Regex, RegexBuilder};

/// Rewrites a PCRE pattern into Rust regex syntax (see the module docs).
pub fn translate_pcre(pattern: &str) -> Result<String, String> {
    let b = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    let mut in_class = false;
    // In a class: the position just after `[` or `[^` (where `]` is literal).
    let mut class_start = 0;
    // The previous token was a quantifier (so `+` makes it possessive).
    let mut after_quant = false;
    while i < b.len() {
        let c = b[i];
        if in_class {
            match c {
                b']' if i != class_start => {
                    in_class = false;
                    out.push(']');
                    i += 1;
                }
                b'\\' => {
                    i = escape(b, i, true, &mut out)?;
                }
                b'[' => {
                    // POSIX classes `[:alpha:]` are shared; a lone `[` is literal.
                    if b.get(i + 1) == Some(&b':') {
                        if let Some(end) = find(b, i + 2, b":]") {
                            out.push_str(&pattern[i..end + 2]);
                            i = end + 2;
                            continue;
                        }
                    }
                    out.push_str("\\[");
                    i += 1;
                }
                b'&' | b'~' => {
                    out.push('\\');
                    out.push(c as char);
                    i += 1;
                }
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    out.push_str("-\\-");
                    i += 2;
                }
                _ => {
                    push_byte(&mut out, c);
                    i += 1;
                }
            }
            continue;
        }
        let was_quant = after_quant;
        after_quant = false;
        match c {
            b'\\' => {
                i = escape(b, i, false, &mut out)?;
            }
            b'[' => {
                in_class = true;
                out.push('[');
                i += 1;
                if b.get(i) == Some(&b'^') {
                    out.push('^');
                    i += 1;
                }
                class_start = i;
            }
            b'(' => {
                let rest = &b[i + 1..];
                if rest.starts_with(b"?>") {
                    out.push_str("(?:");
                    i += 3;
                } else if rest.starts_with(b"?#") {
                    // A comment group: dropped.
                    let end = find(b, i, b")").ok_or("unterminated (?# comment")?;
                    i = end + 1;
                } else if rest.starts_with(b"?=")
                    || rest.starts_with(b"?!")
                    || rest.starts_with(b"?<=")
                    || rest.starts_with(b"?<!")
                {
                    return Err(format!("lookaround is not supported (at byte {i})"));
                } else if rest.starts_with(b"?|") {
                    return Err("branch reset groups (?| are not supported".into());
                } else if rest.starts_with(b"?'") {
                    let end = find(b, i + 3, b"'").ok_or("unterminated (?'name'")?;
                    out.push_str("(?P<");
                    out.push_str(&pattern[i + 3..end]);
                    out.push('>');
                    i = end + 1;
                } else if rest.starts_with(b"?R")
                    || rest.starts_with(b"?&")
                    || rest.starts_with(b"?P>")
                    || rest.starts_with(b"?P=")
                    || (rest.len() > 1
                        && rest[0] == b'?'
                        && (rest[1].is_ascii_digit() || rest[1] == b'+' || rest[1] == b'-')
                        && rest
                            .get(2)
                            .is_some_and(|c| c.is_ascii_digit() || *c == b')'))
                {
                    return Err("recursion and subroutine calls are not supported".into());
                } else if rest.starts_with(b"*") {
                    return Err("PCRE verbs (*...) are not supported".into());
                } else {
                    out.push('(');
                    i += 1;
                }
            }
            b'*' | b'+' | b'?' => {
                if c == b'+' && was_quant {
                    // Possessive: the plain greedy form.
                    i += 1;
                    continue;
                }
                out.push(c as char);
                i += 1;
                if c == b'?' && was_quant {
                    // Lazy suffix: the quantifier is complete.
                    continue;
                }
                after_quant = true;
            }
            b'{' => match counted(b, i) {
                Some(end) => {
                    out.push_str(&pattern[i..=end]);
                    i = end + 1;
                    after_quant = true;
                }
                None => {
                    out.push_str("\\{");
                    i += 1;
                }
            },
            b'}' => {
                out.push_str("\\}");
                i += 1;
            }
            _ => {
                push_byte(&mut out, c);
                i += 1;
            }
        }
    }
    if in_class {
        return Err("missing terminating ] for character class".into());
    }
    Ok(out)
}

/// Translates and compiles as ModSecurity does (DOTALL, MULTILINE), bytes
/// with Unicode off.
pub fn compile_pcre(pattern: &str) -> Result<(String, Regex), String> {
    let translated = translate_pcre(pattern)?;
    let re = build(&translated, false)?;
    Ok((translated, re))
}

/// Translates and checks the syntax with the flags [`compile_pcre`] uses,
/// without building the automata: the loader refuses a bad pattern, and
/// the engine compiles each `@rx` once (with its prefilter), so that a
/// loaded rule set does not hold a second copy of every regex.
pub fn check_pcre(pattern: &str) -> Result<String, String> {
    let translated = translate_pcre(pattern)?;
    regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .dot_matches_new_line(true)
        .multi_line(true)
        .build()
        .parse(&translated)
        .map_err(|e| e.to_string())?;
    Ok(translated)
}

/// A variable selector regex (`ARGS:/^foo/`): case-insensitive.
pub fn compile_selector(pattern: &str) -> Result<Regex, String> {
    build(&translate_pcre(pattern)?, true)
}

fn build(translated: &str, case_insensitive: bool) -> Result<Regex, String> {
    RegexBuilder::new(translated)
        .unicode(false)
        .dot_matches_new_line(true)
        .multi_line(true)
        .case_insensitive(case_insensitive)
        .build()
        .map_err(|e| e.to_string())
}

/// `{n}`, `{n,}`, `{n,m}` starting at `i`: the index of `}`.
fn counted(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let digits = |j: &mut usize| {
        let s = *j;
        while *j < b.len() && b[*j].is_ascii_digit() {
            *j += 1;
        }
        *j > s
    };
    if !digits(&mut j) {
        return None;
    }
    if b.get(j) == Some(&b',') {
        j += 1;
        digits(&mut j);
    }
    (b.get(j) == Some(&b'}')).then_some(j)
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    (from..b.len()).find(|&k| b[k..].starts_with(needle))
}

fn push_byte(out: &mut String, c: u8) {
    if c.is_ascii() {
        out.push(c as char);
    } else {
        out.push_str(&format!("\\x{c:02X}"));
    }
}

fn push_hex(out: &mut String, v: u32) {
    out.push_str(&format!("\\x{v:02X}"));
}

/// One escape sequence at `b[i] == '\\'`; returns the index after it.
fn escape(b: &[u8], i: usize, in_class: bool, out: &mut String) -> Result<usize, String> {
    let Some(&c) = b.get(i + 1) else {
        return Err("pattern ends with a backslash".into());
    };
    let mut j = i + 2;
    match c {
        b'x' => {
            if b.get(j) == Some(&b'{') {
                let end = find(b, j, b"}").ok_or("unterminated \\x{")?;
                let hex = std::str::from_utf8(&b[j + 1..end]).unwrap_or("");
                let v =
                    u32::from_str_radix(hex.trim(), 16).map_err(|_| format!("bad \\x{{{hex}}}"))?;
                if v > 0xff {
                    return Err(format!(
                        "\\x{{{hex}}} is above \\xff (no UTF mode: patterns match bytes)"
                    ));
                }
                push_hex(out, v);
                j = end + 1;
            } else {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && j < b.len() && b[j].is_ascii_hexdigit() {
                    v = v * 16 + (b[j] as char).to_digit(16).unwrap_or(0);
                    j += 1;
                    n += 1;
                }
                push_hex(out, v);
            }
        }
        b'o' if b.get(j) == Some(&b'{') => {
            let end = find(b, j, b"}").ok_or("unterminated \\o{")?;
            let oct = std::str::from_utf8(&b[j + 1..end]).unwrap_or("");
            let v = u32::from_str_radix(oct, 8).map_err(|_| format!("bad \\o{{{oct}}}"))?;
            if v > 0xff {
                return Err(format!("\\o{{{oct}}} is above \\xff"));
            }
            push_hex(out, v);
            j = end + 1;
        }
        b'0' => {
            let mut v = 0u32;
            let mut n = 0;
            while n < 2 && j < b.len() && (b'0'..=b'7').contains(&b[j]) {
                v = v * 8 + u32::from(b[j] - b'0');
                j += 1;
                n += 1;
            }
            push_hex(out, v);
        }
        b'1'..=b'9' if in_class => {
            // Octal inside a class.
            let mut v = 0u32;
            j = i + 1;
            let mut n = 0;
            while n < 3 && j < b.len() && (b'0'..=b'7').contains(&b[j]) {
                v = v * 8 + u32::from(b[j] - b'0');
                j += 1;
                n += 1;
            }
            if n == 0 || v > 0xff {
                return Err(format!("bad escape \\{} in a class", c as char));
            }
            push_hex(out, v);
        }
        b'1'..=b'9' | b'g' | b'k' => return Err("backreferences are not supported".into()),
        b'e' => out.push_str("\\x1B"),
        b'a' => out.push_str("\\x07"),
        b'b' if in_class => out.push_str("\\x08"),
        b'c' => {
            let x = *b.get(j).ok_or("\\c at the end of the pattern")?;
            push_hex(out, u32::from(x.to_ascii_uppercase() ^ 0x40));
            j += 1;
        }
        b'h' => out.push_str(if in_class {
            "\\t\\x20\\xA0"
        } else {
            "[\\t\\x20\\xA0]"
        }),
        b'H' if !in_class => out.push_str("[^\\t\\x20\\xA0]"),
        b'v' => out.push_str(if in_class {
            "\\n\\x0B\\x0C\\r\\x85"
        } else {
            "[\\n\\x0B\\x0C\\r\\x85]"
        }),
        b'V' if !in_class => out.push_str("[^\\n\\x0B\\x0C\\r\\x85]"),
        b'R' if !in_class => out.push_str("(?:\\r\\n|[\\n\\x0B\\x0C\\r\\x85])"),
        b'N' if !in_class => out.push_str("[^\\n]"),
        b'Z' if !in_class => out.push_str("(?:\\n?\\z)"),
        b'G' | b'K' | b'X' | b'C' | b'Q' | b'E' | b'H' | b'V' | b'R' | b'N' | b'Z' => {
            return Err(format!("\\{} is not supported", c as char))
        }
        b'd' | b'D' | b'w' | b'W' | b's' | b'S' | b'b' | b'B' | b'A' | b'z' | b'n' | b'r'
        | b't' | b'f' | b'p' | b'P' => {
            out.push('\\');
            out.push(c as char);
        }
        // PCRE literals; Rust reads `\<` and `\>` as word boundaries.
        b'<' | b'>' => out.push(c as char),
        _ if c.is_ascii_alphanumeric() => {
            return Err(format!("unknown escape \\{}", c as char));
        }
        _ if c.is_ascii() => {
            out.push('\\');
            out.push(c as char);
        }
        _ => {
            // An escaped non-ASCII byte is that byte.
            push_byte(out, c);
        }
    }
    Ok(j)
}
