//! Request body processors: JSON, XML and multipart (urlencoded is in
//! `tx`). Each reports what it finds to a [`Sink`] and returns the error
//! message ModSecurity would put in `REQBODY_ERROR_MSG`.
//!
//! The parsers sit below the transaction: they know the calls of [`Sink`]
//! and nothing of rules or collections; the transaction implements it.

use crate::seclang::Collection;
use crate::transform;

mod multipart;
pub(crate) use multipart::multipart;

/// The bounds a body parser obeys.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// JSON nesting depth.
    pub json_depth: usize,
    /// XML nesting depth.
    pub xml_depth: usize,
    /// The most multipart parts.
    pub max_parts: usize,
    /// `SecRequestBodyNoFilesLimit`: the most bytes of a multipart body
    /// outside its files (0: none).
    pub no_files: u64,
}

/// What a body parser reports, in the order it finds it.
pub(crate) trait Sink {
    /// The bounds in force.
    fn limits(&self) -> Limits;
    /// A form field, JSON scalar or multipart field (ARGS_POST; dropped
    /// past the arguments limit).
    fn arg(&mut self, name: &[u8], value: &[u8]);
    /// A multipart file part: its field name, file name and size (FILES,
    /// FILES_SIZES).
    fn file(&mut self, name: &[u8], filename: &[u8], size: usize);
    /// A header line of a multipart part, under the part's name
    /// (MULTIPART_PART_HEADERS).
    fn part_header(&mut self, name: &[u8], line: &[u8]);
    /// A single-valued variable about the body (the `MULTIPART_*` flags,
    /// MULTIPART_NAME, MULTIPART_FILENAME).
    fn set(&mut self, var: Collection, value: &[u8]);
    /// The text of an XML document (XML:/*).
    fn xml_text(&mut self, text: Vec<u8>);
    /// An attribute value of an XML document (XML://@*).
    fn xml_attr(&mut self, value: &[u8]);
}

// ---------------------------------------------------------------------------
// JSON

/// ModSecurity v3's JSON processor (yajl): every scalar becomes an ARGS_POST
/// member named by its path (`json.a.b`, arrays `json.a.array_0`), `true`/
/// `false` as text, `null` empty. Depth beyond the limit is an error.
pub(crate) fn json(sink: &mut impl Sink, body: &[u8]) -> Result<(), String> {
    let depth = sink.limits().json_depth;
    let mut p = Json {
        s: body,
        i: 0,
        depth_limit: depth,
        containers: Vec::new(),
        key: Vec::new(),
        out: Vec::new(),
    };
    p.ws();
    p.value()?;
    p.ws();
    if p.i < p.s.len() {
        return Err("trailing garbage".into());
    }
    for (k, v) in p.out {
        sink.arg(&k, &v);
    }
    Ok(())
}

struct Container {
    name: Vec<u8>,
    array: bool,
    count: usize,
}

struct Json<'a> {
    s: &'a [u8],
    i: usize,
    depth_limit: usize,
    containers: Vec<Container>,
    key: Vec<u8>,
    out: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Json<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn current_key(&self) -> Vec<u8> {
        if self.containers.is_empty() {
            return b"json".to_vec();
        }
        if self.key.is_empty() {
            if self.containers.last().is_some_and(|c| c.array) {
                return Vec::new();
            }
            return b"empty-key".to_vec();
        }
        self.key.clone()
    }

    fn add(&mut self, value: Vec<u8>) {
        let mut path = Vec::new();
        for c in &self.containers {
            path.extend_from_slice(&c.name);
            if c.array {
                path.extend_from_slice(format!(".array_{}", c.count).as_bytes());
            } else {
                path.push(b'.');
            }
        }
        let last_array = self.containers.last().is_some_and(|c| c.array);
        if last_array {
            if let Some(c) = self.containers.last_mut() {
                c.count += 1;
            }
        } else {
            path.extend_from_slice(&self.current_key());
        }
        self.out.push((path, value));
    }

    fn open(&mut self, array: bool) -> Result<(), String> {
        if self.containers.len() >= self.depth_limit {
            return Err(format!("JSON depth limit of {} exceeded", self.depth_limit));
        }
        let name = self.current_key();
        self.containers.push(Container {
            name,
            array,
            count: 0,
        });
        Ok(())
    }

    fn close(&mut self) {
        self.containers.pop();
        if let Some(c) = self.containers.last_mut() {
            if c.array {
                c.count += 1;
            }
        }
    }

    fn value(&mut self) -> Result<(), String> {
        self.ws();
        let Some(&c) = self.s.get(self.i) else {
            return Err("premature EOF".into());
        };
        match c {
            b'{' => {
                self.i += 1;
                self.open(false)?;
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    self.close();
                    return Ok(());
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err("invalid object key".into());
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b':') {
                        return Err(
                            "object key and value must be separated by a colon (':')".into()
                        );
                    }
                    self.i += 1;
                    self.key = k;
                    self.value()?;
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            self.close();
                            return Ok(());
                        }
                        _ => {
                            return Err(
                                "after key and value, inside map, I expect ',' or '}'".into()
                            )
                        }
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.open(true)?;
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    self.close();
                    return Ok(());
                }
                loop {
                    self.value()?;
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            self.close();
                            return Ok(());
                        }
                        _ => return Err("after array element, I expect ',' or ']'".into()),
                    }
                }
            }
            b'"' => {
                let v = self.string()?;
                self.add(v);
                Ok(())
            }
            b't' | b'f' | b'n' => {
                let words: [&[u8]; 3] = [b"true", b"false", b"null"];
                for w in words {
                    if self.s[self.i..].starts_with(w) {
                        self.i += w.len();
                        self.add(if w == b"null" { Vec::new() } else { w.to_vec() });
                        return Ok(());
                    }
                }
                Err("invalid string in json text".into())
            }
            b'-' | b'0'..=b'9' => {
                let st = self.i;
                self.i += 1;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'
                    )
                {
                    self.i += 1;
                }
                let v = self.s[st..self.i].to_vec();
                self.add(v);
                Ok(())
            }
            _ => Err("invalid char in json text".into()),
        }
    }

    fn string(&mut self) -> Result<Vec<u8>, String> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return Err("premature EOF".into());
            };
            self.i += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err("premature EOF".into());
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xd800..0xdc00).contains(&cp)
                                && self.s.get(self.i) == Some(&b'\\')
                                && self.s.get(self.i + 1) == Some(&b'u')
                            {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xdc00..0xe000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                                }
                            }
                            let ch = char::from_u32(cp).unwrap_or('?');
                            let mut b = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                        }
                        _ => return Err("inside a JSON string, an invalid escape".into()),
                    }
                }
                c if c < 0x20 => return Err("invalid character inside string".into()),
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let mut v = 0u32;
        for _ in 0..4 {
            let Some(h) = self.s.get(self.i).and_then(|&c| transform::hex_value(c)) else {
                return Err("invalid (non-hex) character occurs after '\\u' inside string".into());
            };
            v = v << 4 | u32::from(h);
            self.i += 1;
        }
        Ok(v)
    }
}

// ---------------------------------------------------------------------------
// XML

/// A small well-formedness check with the content ModSecurity's rules read:
/// `XML:/*` is the text of the document (every text node, entities
/// decoded, concatenated as libxml2's `xmlNodeGetContent` of the root), and
/// `XML://@*` each attribute value. DTDs and processing instructions are
/// skipped; external entities are never loaded.
pub(crate) fn xml(sink: &mut impl Sink, body: &[u8]) -> Result<(), String> {
    let depth_limit = sink.limits().xml_depth;
    let mut text = Vec::new();
    let mut attrs: Vec<Vec<u8>> = Vec::new();
    let mut stack: Vec<&[u8]> = Vec::new();
    let mut roots = 0;
    let s = body;
    let mut i = 0;
    let n = s.len();
    if n == 0 {
        return Err("Document is empty".into());
    }
    while i < n {
        if s[i] != b'<' {
            let end = memchr::memchr(b'<', &s[i..]).map_or(n, |p| i + p);
            let chunk = &s[i..end];
            if stack.is_empty() {
                if !chunk.iter().all(|c| c.is_ascii_whitespace()) {
                    return Err(if roots == 0 {
                        "Start tag expected, '<' not found".into()
                    } else {
                        "Extra content at the end of the document".into()
                    });
                }
            } else {
                decode_entities(chunk, &mut text)?;
            }
            i = end;
            continue;
        }
        let rest = &s[i..];
        if rest.starts_with(b"<?") {
            let e = find(rest, b"?>").ok_or("Couldn't find end of Start Tag")?;
            i += e + 2;
        } else if rest.starts_with(b"<!--") {
            let e = find(&rest[4..], b"-->").ok_or("Comment not terminated")?;
            i += 4 + e + 3;
        } else if rest.starts_with(b"<![CDATA[") {
            if stack.is_empty() {
                return Err("Start tag expected".into());
            }
            let e = find(&rest[9..], b"]]>").ok_or("CData section not finished")?;
            text.extend_from_slice(&rest[9..9 + e]);
            i += 9 + e + 3;
        } else if rest.starts_with(b"<!") {
            // DOCTYPE (with an internal subset in brackets).
            let mut j = 2;
            let mut depth = 0;
            while j < rest.len() {
                match rest[j] {
                    b'[' => depth += 1,
                    b']' => depth -= 1,
                    b'>' if depth <= 0 => break,
                    _ => {}
                }
                j += 1;
            }
            if j >= rest.len() {
                return Err("DOCTYPE improperly terminated".into());
            }
            i += j + 1;
        } else if rest.starts_with(b"</") {
            let e = memchr::memchr(b'>', rest).ok_or("expected '>'")?;
            let name = rest[2..e].trim_ascii();
            match stack.pop() {
                Some(open) if open == name => {}
                _ => return Err("Opening and ending tag mismatch".into()),
            }
            i += e + 1;
        } else {
            // A start tag: name, attributes, `/>` or `>`.
            let mut j = 1;
            while j < rest.len()
                && !rest[j].is_ascii_whitespace()
                && rest[j] != b'>'
                && rest[j] != b'/'
            {
                j += 1;
            }
            let name = &rest[1..j];
            if name.is_empty() {
                return Err("StartTag: invalid element name".into());
            }
            if stack.is_empty() {
                roots += 1;
                if roots > 1 {
                    return Err("Extra content at the end of the document".into());
                }
            }
            let mut self_close = false;
            loop {
                while j < rest.len() && rest[j].is_ascii_whitespace() {
                    j += 1;
                }
                match rest.get(j) {
                    None => return Err("Couldn't find end of Start Tag".into()),
                    Some(b'>') => {
                        j += 1;
                        break;
                    }
                    Some(b'/') if rest.get(j + 1) == Some(&b'>') => {
                        j += 2;
                        self_close = true;
                        break;
                    }
                    _ => {}
                }
                let an = j;
                while j < rest.len()
                    && rest[j] != b'='
                    && !rest[j].is_ascii_whitespace()
                    && rest[j] != b'>'
                {
                    j += 1;
                }
                if j == an {
                    return Err("attributes construct error".into());
                }
                while j < rest.len() && rest[j].is_ascii_whitespace() {
                    j += 1;
                }
                if rest.get(j) != Some(&b'=') {
                    return Err("Specification mandates value for attribute".into());
                }
                j += 1;
                while j < rest.len() && rest[j].is_ascii_whitespace() {
                    j += 1;
                }
                let q = match rest.get(j) {
                    Some(&q @ (b'"' | b'\'')) => q,
                    _ => return Err("AttValue: \" or ' expected".into()),
                };
                j += 1;
                let vs = j;
                while j < rest.len() && rest[j] != q {
                    j += 1;
                }
                if j >= rest.len() {
                    return Err("AttValue: ' expected".into());
                }
                let mut v = Vec::new();
                decode_entities(&rest[vs..j], &mut v)?;
                attrs.push(v);
                j += 1;
            }
            if !self_close {
                if stack.len() >= depth_limit {
                    return Err("Excessive depth in document".into());
                }
                stack.push(name);
            }
            i += j;
        }
    }
    if !stack.is_empty() {
        return Err("Premature end of data".into());
    }
    if roots == 0 {
        return Err("Start tag expected, '<' not found".into());
    }
    sink.xml_text(text);
    for a in attrs {
        sink.xml_attr(&a);
    }
    Ok(())
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    memchr::memmem::find(h, n)
}

fn decode_entities(s: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'&' {
            let Some(e) = memchr::memchr(b';', &s[i..]) else {
                return Err("EntityRef: expecting ';'".into());
            };
            let name = &s[i + 1..i + e];
            match name {
                b"lt" => out.push(b'<'),
                b"gt" => out.push(b'>'),
                b"amp" => out.push(b'&'),
                b"quot" => out.push(b'"'),
                b"apos" => out.push(b'\''),
                _ if name.first() == Some(&b'#') => {
                    let num = &name[1..];
                    let cp = if num.first().is_some_and(|c| *c == b'x' || *c == b'X') {
                        u32::from_str_radix(std::str::from_utf8(&num[1..]).unwrap_or("x"), 16)
                    } else {
                        std::str::from_utf8(num).unwrap_or("x").parse()
                    }
                    .map_err(|_| "invalid character reference".to_string())?;
                    let ch = char::from_u32(cp).ok_or("invalid xmlChar value")?;
                    let mut b = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                }
                // Entities declared in a DTD are not expanded.
                _ => {}
            }
            i += e + 1;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Ok(())
}
