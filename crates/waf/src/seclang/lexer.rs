//! Lines and arguments, as Apache and ModSecurity read configuration:
//! a backslash at the end of a line (trailing blanks allowed) joins the
//! next line to it; a logical line whose first non-blank character is `#`
//! is a comment; arguments are separated by blanks, and a quoted argument
//! (`"..."` or `'...'`) keeps everything up to its closing quote, with `\"`
//! (or `\'`) standing for the quote and every other backslash kept as is
//! (regexes keep their escapes).

/// A directive: its first physical line and its arguments (the directive
/// name first).
#[derive(Debug, PartialEq, Eq)]
pub struct Directive {
    pub line: u32,
    pub args: Vec<String>,
}

/// Logical lines of `text` (continuations joined, comments and blank
/// lines dropped), with the number of their first physical line.
pub fn logical_lines(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0u32;
    let mut continuing = false;
    for (n, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if !continuing {
            start = u32::try_from(n + 1).unwrap_or(u32::MAX);
        }
        let trimmed = line.trim_end_matches([' ', '\t', '\r']);
        if let Some(body) = trimmed.strip_suffix('\\') {
            cur.push_str(body);
            continuing = true;
            continue;
        }
        cur.push_str(line);
        continuing = false;
        push_line(&mut out, start, &mut cur);
    }
    push_line(&mut out, start, &mut cur);
    out
}

fn push_line(out: &mut Vec<(u32, String)>, start: u32, cur: &mut String) {
    let t = cur.trim();
    if !t.is_empty() && !t.starts_with('#') {
        out.push((start, t.to_string()));
    }
    cur.clear();
}

/// Splits a logical line into arguments.
pub fn split_args(line: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut chars = line.char_indices().peekable();
    while let Some(&(_, c)) = chars.peek() {
        if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
            chars.next();
            continue;
        }
        let mut arg = String::new();
        if c == '"' || c == '\'' {
            let quote = c;
            chars.next();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                if c == '\\' {
                    if let Some(&(_, n)) = chars.peek() {
                        if n == quote {
                            arg.push(n);
                            chars.next();
                            continue;
                        }
                    }
                    arg.push(c);
                } else if c == quote {
                    closed = true;
                    break;
                } else {
                    arg.push(c);
                }
            }
            if !closed {
                return Err(format!(
                    "missing closing {quote} in argument {}",
                    arg_num(&args)
                ));
            }
        } else {
            while let Some(&(_, c)) = chars.peek() {
                if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
                    break;
                }
                arg.push(c);
                chars.next();
            }
        }
        args.push(arg);
    }
    Ok(args)
}

fn arg_num(args: &[String]) -> String {
    match args.first() {
        Some(d) => format!("{} of {d}", args.len()),
        None => "1".into(),
    }
}

/// Splits `text` into directives.
pub fn directives(text: &str) -> Result<Vec<Directive>, (u32, String)> {
    let mut out = Vec::new();
    for (line, l) in logical_lines(text) {
        let args = split_args(&l).map_err(|e| (line, e))?;
        if !args.is_empty() {
            out.push(Directive { line, args });
        }
    }
    Ok(out)
}

/// One action: name and optional value (quotes removed).
#[derive(Debug, PartialEq, Eq)]
pub struct RawAction {
    pub name: String,
    pub value: Option<String>,
}

/// Splits an action list (`id:1,phase:2,msg:'a, b',t:none`) at commas
/// outside single quotes. A value in single quotes has `\'` for a quote.
pub fn split_actions(s: &str) -> Result<Vec<RawAction>, String> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let start = i;
        while i < b.len() && b[i] != b':' && b[i] != b',' {
            i += 1;
        }
        let name = s[start..i].trim().to_string();
        if name.is_empty() {
            return Err(format!("empty action name in {s:?}"));
        }
        let mut value = None;
        if i < b.len() && b[i] == b':' {
            i += 1;
            while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                i += 1;
            }
            if i < b.len() && b[i] == b'\'' {
                i += 1;
                let mut v = String::new();
                let mut closed = false;
                let mut seg = i;
                while i < b.len() {
                    if b[i] == b'\\' && b.get(i + 1) == Some(&b'\'') {
                        v.push_str(&s[seg..i]);
                        v.push('\'');
                        i += 2;
                        seg = i;
                    } else if b[i] == b'\'' {
                        v.push_str(&s[seg..i]);
                        closed = true;
                        i += 1;
                        break;
                    } else {
                        i += 1;
                    }
                }
                if !closed {
                    return Err(format!("missing closing ' in action {name}"));
                }
                while i < b.len() && b[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i < b.len() && b[i] != b',' {
                    return Err(format!(
                        "unexpected text after the quoted value of action {name}"
                    ));
                }
                value = Some(v);
            } else {
                let vs = i;
                while i < b.len() && b[i] != b',' {
                    i += 1;
                }
                value = Some(s[vs..i].trim().to_string());
            }
        }
        out.push(RawAction { name, value });
    }
    Ok(out)
}
