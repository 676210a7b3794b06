//! A stage's request as go-ftw puts it on the wire (ftwhttp/request.go,
//! test/data.go, test/defaults.go), byte for byte: the CRS tests are
//! calibrated against exactly these bytes, so every autocompletion quirk
//! is kept.

use super::model::Input;

/// The request bytes of a stage. `cookies`: what earlier stages of the test
/// were given by Set-Cookie, sent when the stage says `save_cookie`.
pub fn build(input: &Input, cookies: &[(String, String)]) -> Result<Vec<u8>, String> {
    // A whole request given: sent as is, no autocompletion.
    if let Some(enc) = &input.encoded_request {
        return base64_decode(enc).map_err(|e| format!("encoded_request: {e}"));
    }
    if let Some(raw) = &input.raw_request {
        return Ok(raw.as_bytes().to_vec());
    }
    let method = input.method.as_deref().unwrap_or("GET");
    let uri = input.uri.as_deref().unwrap_or("/");
    let version = input.version.as_deref().unwrap_or("HTTP/1.1");

    let mut data: Vec<u8> = match (&input.data, &input.encoded_data) {
        (Some(d), _) => render_template(d)?.into_bytes(),
        (None, Some(e)) => base64_decode(e).map_err(|e| format!("encoded_data: {e}"))?,
        (None, None) => Vec::new(),
    };

    // go-ftw builds its headers from the YAML map with the names sorted
    // (NewHeaderFromMap), so the order on the wire is the sorted order.
    let mut headers: Vec<(String, String)> = input.headers.clone();
    headers.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    if input.save_cookie && !cookies.is_empty() && !has(&headers, "Cookie") {
        let jar: Vec<String> = cookies.iter().map(|(n, v)| format!("{n}={v}")).collect();
        headers.push(("Cookie".into(), jar.join("; ")));
    }

    if !data.is_empty() && input.autocomplete {
        if !has(&headers, "Content-Type") {
            headers.push((
                "Content-Type".into(),
                "application/x-www-form-urlencoded".into(),
            ));
        }
        data = encode_form_data(&headers, data);
    }
    // Multipart bodies written with LF in YAML get CRLF line ends, whether
    // or not headers are autocompleted (and an existing CRLF becomes
    // CR CR LF, as go-ftw's plain ReplaceAll does).
    if headers.iter().any(|(n, v)| {
        canonical_eq(n, "Content-Type") && v.to_ascii_lowercase().contains("multipart/form-data;")
    }) {
        let mut out = Vec::with_capacity(data.len() + data.len() / 16);
        for &b in &data {
            if b == b'\n' {
                out.push(b'\r');
            }
            out.push(b);
        }
        data = out;
    }
    if input.autocomplete {
        if !has(&headers, "Connection") {
            headers.push(("Connection".into(), "close".into()));
        }
        // go-ftw's `^POST|PUT|PATCH|DELETE$`: the anchors bind to the
        // first and last alternatives only.
        let body_method = method.starts_with("POST")
            || method.contains("PUT")
            || method.contains("PATCH")
            || method.ends_with("DELETE");
        if !has(&headers, "Content-Length") && (!data.is_empty() || body_method) {
            headers.push(("Content-Length".into(), data.len().to_string()));
        }
    }

    let mut out = Vec::with_capacity(256 + data.len());
    out.extend_from_slice(format!("{method} {uri} {version}\r\n").as_bytes());
    for (n, v) in &headers {
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&data);
    Ok(out)
}

/// Header names compare as Go's textproto.CanonicalMIMEHeaderKey does:
/// case-insensitively, for names made of token characters.
fn canonical_eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn has(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| canonical_eq(n, name))
}

/// go-ftw's encodeDataParameters: with a Content-Type of exactly
/// `application/x-www-form-urlencoded` and data that URL-unescaping would
/// not change (no `%`, no `+`), each key and value is query-escaped.
fn encode_form_data(headers: &[(String, String)], data: Vec<u8>) -> Vec<u8> {
    let form = headers.iter().any(|(n, v)| {
        canonical_eq(n, "Content-Type")
            && v.eq_ignore_ascii_case("application/x-www-form-urlencoded")
    });
    if !form || data.contains(&b'%') || data.contains(&b'+') {
        return data;
    }
    let mut out = Vec::with_capacity(data.len() * 2);
    for (i, token) in data.split(|&b| b == b'&').enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        match token.iter().position(|&b| b == b'=') {
            None => query_escape(token, &mut out),
            Some(eq) => {
                query_escape(&token[..eq], &mut out);
                out.push(b'=');
                query_escape(&token[eq + 1..], &mut out);
            }
        }
    }
    // go-ftw splits on `&` and drops the separator after the last token,
    // which loses one trailing `&`: "a=1&" comes out as "a=1".
    if data.ends_with(b"&") {
        out.pop();
    }
    out
}

/// Go's url.QueryEscape: unreserved bytes kept, space as `+`, the rest
/// `%XX` in upper case.
fn query_escape(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b),
            b' ' => out.push(b'+'),
            _ => {
                out.push(b'%');
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
        }
    }
}

/// `data` is a Go text/template with sprig's functions. The CRS tests use
/// only `{{ "x" | repeat N }}` (bodies too large to write out); that and
/// `{{ repeat N "x" }}` are evaluated, anything else is an error rather
/// than a silently different body.
pub fn render_template(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        let (before, after) = rest.split_at(open);
        let after = &after[2..];
        let close = after
            .find("}}")
            .ok_or_else(|| "data: unclosed {{ in template".to_string())?;
        let mut action = &after[..close];
        rest = &after[close + 2..];
        let mut before = before;
        // `{{-` and `-}}` trim the white space next to them.
        if let Some(a) = action.strip_prefix('-') {
            action = a;
            before = before.trim_end();
        }
        out.push_str(before);
        if let Some(a) = action.strip_suffix('-') {
            action = a;
            rest = rest.trim_start();
        }
        out.push_str(&eval_action(action.trim())?);
    }
    out.push_str(rest);
    Ok(out)
}

fn eval_action(a: &str) -> Result<String, String> {
    let bad = || format!("data: template action {{{{ {a} }}}} is not supported (only repeat)");
    let toks = tokens(a).ok_or_else(bad)?;
    let toks: Vec<&str> = toks.iter().map(String::as_str).collect();
    let (text, count) = match toks.as_slice() {
        [lit, "|", "repeat", n] => (unquote(lit), n.parse::<usize>().ok()),
        ["repeat", n, lit] => (unquote(lit), n.parse::<usize>().ok()),
        [lit] => (unquote(lit), Some(1)),
        _ => return Err(bad()),
    };
    match (text, count) {
        // Bounded: a typo must not ask for gigabytes.
        (Some(t), Some(n)) if t.len().saturating_mul(n) <= 64 << 20 => Ok(t.repeat(n)),
        _ => Err(bad()),
    }
}

/// Splits a template action into words, keeping quoted strings whole.
fn tokens(a: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = a.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' || c == '`' {
            let q = c;
            let mut t = String::from(c);
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                t.push(c);
                if c == '\\' && q == '"' {
                    t.push(chars.next()?);
                } else if c == q {
                    closed = true;
                    break;
                }
            }
            if !closed {
                return None;
            }
            out.push(t);
        } else if c == '|' {
            out.push("|".into());
            chars.next();
        } else {
            let mut t = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '|' {
                    break;
                }
                t.push(c);
                chars.next();
            }
            out.push(t);
        }
    }
    Some(out)
}

/// A Go string literal: "..." with the common escapes, or `...` raw.
fn unquote(t: &str) -> Option<String> {
    if let Some(raw) = t.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        return Some(raw.to_string());
    }
    let inner = t.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut it = inner.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next()? {
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            '\\' => out.push('\\'),
            '"' => out.push('"'),
            _ => return None,
        }
    }
    Some(out)
}

/// Standard base64 (RFC 4648, with padding); line breaks and spaces are
/// skipped, as YAML folds long encoded requests.
pub fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let clean: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let body = clean
        .iter()
        .rposition(|&b| b != b'=')
        .map(|p| &clean[..=p])
        .unwrap_or(&[]);
    if clean.len() - body.len() > 2 {
        return Err("too much padding".into());
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for (i, &c) in body.iter().enumerate() {
        let v = val(c).ok_or_else(|| format!("invalid base64 byte {:?} at {i}", c as char))?;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return Err("truncated base64".into());
    }
    Ok(out)
}

/// Standard base64 with padding (albedo's `encodedBody` in our own tests).
#[cfg(test)]
pub fn base64_encode(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> Input {
        Input {
            autocomplete: true,
            ..Input::default()
        }
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).expect("utf-8")
    }

    #[test]
    fn defaults_and_sorted_headers() {
        let mut i = input();
        i.headers = vec![
            ("User-Agent".into(), "OWASP CRS test agent".into()),
            ("Host".into(), "localhost".into()),
            ("Accept".into(), "*/*".into()),
        ];
        assert_eq!(
            text(build(&i, &[]).expect("builds")),
            "GET / HTTP/1.1\r\nAccept: */*\r\nHost: localhost\r\nUser-Agent: OWASP CRS test agent\r\n\
             Connection: close\r\n\r\n"
        );
    }

    #[test]
    fn form_bodies_get_a_type_a_length_and_query_escaping() {
        let mut i = input();
        i.method = Some("POST".into());
        i.headers = vec![("Host".into(), "localhost".into())];
        i.data = Some("var=1' or 1=1&x=a b".into());
        assert_eq!(
            text(build(&i, &[]).expect("builds")),
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Connection: close\r\nContent-Length: 23\r\n\r\nvar=1%27+or+1%3D1&x=a+b"
        );
        // Already escaped data is sent as written.
        i.data = Some("var=%27".into());
        assert!(text(build(&i, &[]).expect("builds")).ends_with("\r\n\r\nvar=%27"));
        // Another Content-Type: not escaped.
        i.headers
            .push(("Content-Type".into(), "application/json".into()));
        i.data = Some("{\"a\": 1}".into());
        assert!(
            text(build(&i, &[]).expect("builds")).ends_with("Content-Length: 8\r\n\r\n{\"a\": 1}")
        );
    }

    #[test]
    fn a_body_method_without_data_says_length_zero() {
        let mut i = input();
        i.method = Some("POST".into());
        assert!(text(build(&i, &[]).expect("builds")).contains("Content-Length: 0\r\n"));
        i.method = Some("OPTIONS".into());
        assert!(!text(build(&i, &[]).expect("builds")).contains("Content-Length"));
    }

    #[test]
    fn no_autocompletion_sends_exactly_what_is_written() {
        let mut i = input();
        i.autocomplete = false;
        i.method = Some("POST".into());
        i.version = Some(String::new());
        i.data = Some("a=b c".into());
        assert_eq!(
            text(build(&i, &[]).expect("builds")),
            "POST / \r\n\r\na=b c"
        );
    }

    #[test]
    fn multipart_gets_crlf() {
        let mut i = input();
        i.method = Some("POST".into());
        i.headers = vec![(
            "Content-Type".into(),
            "multipart/form-data; boundary=--x".into(),
        )];
        i.data = Some("----x\nContent-Disposition: form-data; name=\"a\"\n\n{{ \"1\" | repeat 3 }}\n----x--\n".into());
        let b = text(build(&i, &[]).expect("builds"));
        assert!(b.ends_with(
            "\r\n\r\n----x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n111\r\n----x--\r\n"
        ));
    }

    #[test]
    fn encoded_requests_are_sent_as_is() {
        let mut i = input();
        i.encoded_request = Some("R0VUIC8gSFRUUC8xLjANCkhv\nc3Q6DQoNCg==".into());
        assert_eq!(
            text(build(&i, &[]).expect("builds")),
            "GET / HTTP/1.0\r\nHost:\r\n\r\n"
        );
        i.encoded_request = Some("R0VU*".into());
        assert!(build(&i, &[]).is_err());
    }

    #[test]
    fn templates() {
        assert_eq!(
            render_template("a{{ \"xy\" | repeat 3 }}b").expect("ok"),
            "axyxyxyb"
        );
        assert_eq!(render_template("{{ repeat 2 `q` }}").expect("ok"), "qq");
        assert_eq!(render_template("a {{- \"z\" -}} b").expect("ok"), "azb");
        assert!(render_template("{{ .Foo }}").is_err());
        assert!(render_template("{{ \"x\" | repeat 999999999999 }}").is_err());
        assert!(render_template("{{ unclosed").is_err());
    }

    #[test]
    fn base64_round_trip() {
        for s in ["", "a", "ab", "abc", "abcd", "\u{0}\u{ff}binary"] {
            let e = base64_encode(s.as_bytes());
            assert_eq!(base64_decode(&e).expect("decodes"), s.as_bytes());
        }
        assert_eq!(base64_encode(b"ab"), "YWI=");
    }

    #[test]
    fn saved_cookies() {
        let mut i = input();
        i.save_cookie = true;
        let c = vec![("s".to_string(), "1".to_string())];
        assert!(text(build(&i, &c).expect("builds")).contains("Cookie: s=1\r\n"));
    }
}
