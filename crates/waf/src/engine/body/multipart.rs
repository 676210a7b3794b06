//! multipart/form-data after ModSecurity's `multipart.cc` (v3, itself
//! v2's `msc_multipart.c`): the same line buffer of 4 KiB, the same checks
//! and the same flags (`MULTIPART_*`, `MULTIPART_STRICT_ERROR`).
//!
//! Form fields become ARGS_POST; file parts FILES (name → file name),
//! FILES_NAMES, FILES_SIZES (their content is counted, and inspected as
//! a field only when the part may be read as one: `read_as_field`);
//! every part header line is in MULTIPART_PART_HEADERS under the part's
//! name. Memory: the parts' values (bounded by the body limit) and at most
//! `max_parts` parts.

use super::Sink;
use crate::seclang::Collection as C;

/// A line the parser reads only inside a part came with none open: the
/// parser's own state machine went wrong; refused, never a panic.
const NO_PART: &str = "Multipart: internal error: no part is open.";

const BUF: usize = 4096;
/// `SecUploadFileLimit`'s default.
const FILE_LIMIT: usize = 100;

#[derive(Default)]
struct Part {
    name: Option<Vec<u8>>,
    filename: Option<Vec<u8>>,
    is_file: bool,
    /// Header names (lower case) and values.
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    header_lines: Vec<Vec<u8>>,
    last_header: Option<usize>,
    last_line: Option<Vec<u8>>,
    value: Vec<u8>,
    length: usize,
}

#[derive(Default)]
struct Mp {
    boundary: Vec<u8>,
    buf: Vec<u8>,
    contains_line: bool,
    part: Option<Part>,
    /// 0: headers, 1: data.
    state: u8,
    reserve: Vec<u8>,
    parts: Vec<Part>,
    complete: bool,
    boundaries: usize,
    nfiles: usize,
    no_files_len: usize,
    max_parts: usize,
    // flags
    error: bool,
    boundary_quoted: bool,
    boundary_whitespace: bool,
    missing_semicolon: bool,
    data_before: bool,
    data_after: bool,
    header_folding: bool,
    invalid_header_folding: bool,
    invalid_quoting: bool,
    invalid_part: bool,
    unmatched_boundary: bool,
    lf_line: bool,
    crlf_line: bool,
    file_limit_exceeded: bool,
    last_name: Vec<u8>,
    last_filename: Vec<u8>,
}

/// ModSecurity's `multipart_count_boundary_params`: occurrences of
/// `boundary` (any case) with an `=` somewhere after them.
fn count_boundary(s: &[u8]) -> usize {
    let l = s.to_ascii_lowercase();
    memchr::memmem::find_iter(&l, b"boundary")
        .filter(|&p| memchr::memchr(b'=', &l[p + 8..]).is_some())
        .count()
}

fn boundary_chars_valid(b: &[u8]) -> bool {
    b.iter().all(|&c| {
        (32..=126).contains(&c)
            && !matches!(
                c,
                b'(' | b')'
                    | b'<'
                    | b'>'
                    | b'@'
                    | b','
                    | b';'
                    | b':'
                    | b'\\'
                    | b'"'
                    | b'/'
                    | b'['
                    | b']'
                    | b'?'
                    | b'='
            )
    })
}

fn is_token_char(c: u8) -> bool {
    (33..=126).contains(&c) && !b"()<>@,;:\\\"/[]?=".contains(&c)
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn chomp(mut v: &[u8]) -> &[u8] {
    if v.last() == Some(&b'\n') {
        v = &v[..v.len() - 1];
        if v.last() == Some(&b'\r') {
            v = &v[..v.len() - 1];
        }
    }
    v
}

impl Mp {
    fn init(&mut self, ct: &[u8]) -> Result<(), String> {
        if ct.len() > 1024 {
            return Err("Multipart: Invalid boundary in C-T (length).".into());
        }
        if ct.len() < 19 || !ct[..19].eq_ignore_ascii_case(b"multipart/form-data") {
            return Err("Multipart: Invalid MIME type.".into());
        }
        if count_boundary(ct) > 1 {
            return Err("Multipart: Multiple boundary parameters in C-T.".into());
        }
        let Some(b0) = memchr::memmem::find(ct, b"boundary") else {
            return Err("Multipart: Boundary not found in C-T.".into());
        };
        let mut seen_semicolon = false;
        for &c in &ct[19..b0.max(19)] {
            if !is_space(c) {
                if !seen_semicolon && c == b';' {
                    seen_semicolon = true;
                } else {
                    return Err("Multipart: Invalid boundary in C-T (malformed).".into());
                }
            }
        }
        if !seen_semicolon {
            self.missing_semicolon = true;
        }
        let Some(eq) = memchr::memchr(b'=', &ct[b0 + 8..]).map(|p| b0 + 8 + p) else {
            return Err("Multipart: Invalid boundary in C-T (malformed).".into());
        };
        for &c in &ct[b0 + 8..eq] {
            if is_space(c) {
                self.boundary_whitespace = true;
            } else {
                return Err("Multipart: Invalid boundary in C-T (parameter name).".into());
            }
        }
        let b = &ct[eq + 1..];
        if b.first().is_some_and(|&c| is_space(c)) {
            self.boundary_whitespace = true;
        }
        let len = b.len();
        let boundary = if len >= 2 && b[0] == b'"' && b[len - 1] == b'"' {
            self.boundary_quoted = true;
            &b[1..len - 1]
        } else {
            if b.first() == Some(&b'"') || (len >= 2 && b[len - 1] == b'"') {
                return Err("Multipart: Invalid boundary in C-T (quote).".into());
            }
            b
        };
        if count_boundary(boundary) != 0 {
            return Err("Multipart: Invalid boundary in C-T (content).".into());
        }
        if !boundary_chars_valid(boundary) {
            return Err("Multipart: Invalid boundary in C-T (characters).".into());
        }
        self.boundary = boundary.to_vec();
        Ok(())
    }

    fn process(&mut self, body: &[u8]) -> Result<(), String> {
        self.contains_line = true;
        let mut i = 0;
        let n = body.len();
        while i < n {
            let c = body[i];
            let mut process_buffer = false;
            if c == b'\r' && self.buf.len() == BUF - 1 {
                process_buffer = true;
            } else {
                i += 1;
                self.buf.push(c);
            }
            if c == b'\n' || self.buf.len() == BUF || process_buffer {
                self.line(c, process_buffer)?;
                self.buf.clear();
                self.contains_line = c == b'\n';
            }
            if self.complete && i < n {
                self.data_after = true;
                return Ok(());
            }
        }
        Ok(())
    }

    fn line(&mut self, c: u8, process_buffer: bool) -> Result<(), String> {
        let bl = self.boundary.len();
        let buf = std::mem::take(&mut self.buf);
        let r = self.line_inner(&buf, c, process_buffer, bl);
        self.buf = buf;
        r
    }

    fn line_inner(
        &mut self,
        buf: &[u8],
        c: u8,
        process_buffer: bool,
        bl: usize,
    ) -> Result<(), String> {
        // C strings stop at a NUL.
        let clen = memchr::memchr(0, buf).unwrap_or(buf.len());
        let cbuf = &buf[..clen];
        let mut as_boundary = false;
        if self.contains_line && clen > 3 && cbuf[0] == b'-' && cbuf[1] == b'-' {
            if clen >= bl + 2 && &cbuf[2..2 + bl] == self.boundary.as_slice() {
                let mut end = 2 + bl;
                let mut is_final = false;
                if cbuf.get(end) == Some(&b'-') && cbuf.get(end + 1) == Some(&b'-') {
                    is_final = true;
                    end += 2;
                    if self.complete {
                        return Err("Multipart: Invalid boundary (final duplicate).".into());
                    }
                }
                let rest = &cbuf[end..];
                if rest == b"\r\n" || rest == b"\n" {
                    if rest == b"\n" {
                        self.lf_line = true;
                    } else {
                        self.crlf_line = true;
                    }
                    self.boundary(is_final)?;
                    if is_final {
                        self.complete = true;
                    }
                    as_boundary = true;
                    self.boundaries += 1;
                } else {
                    return Err(format!(
                        "Multipart: Invalid boundary: {}",
                        String::from_utf8_lossy(cbuf)
                    ));
                }
            } else {
                if self.boundary_quoted
                    && clen >= bl + 3
                    && cbuf[2] == b'"'
                    && cbuf[3..].starts_with(&self.boundary)
                {
                    return Err("Multipart: Invalid boundary (quotes).".into());
                }
                let mut p = 2;
                while p < clen && is_space(cbuf[p]) {
                    p += 1;
                }
                if p != 2 && cbuf[p..].starts_with(&self.boundary) {
                    return Err("Multipart: Invalid boundary (whitespace).".into());
                }
                self.unmatched_boundary = true;
            }
        } else if self.contains_line {
            let len = buf.len();
            for i in 0..len {
                if buf[i] == b'-' && i + 1 < len && buf[i + 1] == b'-' {
                    let after = &buf[i + 2..];
                    let after = &after[..memchr::memchr(0, after).unwrap_or(after.len())];
                    if after.starts_with(&self.boundary) {
                        self.unmatched_boundary = true;
                        break;
                    }
                }
            }
        }
        if !as_boundary {
            if self.part.is_none() {
                self.data_before = true;
            } else if self.complete {
                self.data_after = true;
            } else if self.state == 0 {
                if buf.len() == BUF || process_buffer {
                    return Err(format!("Multipart: Part header line over {BUF} bytes long"));
                }
                self.header(buf)?;
            } else {
                self.data(buf);
            }
        }
        let _ = c;
        Ok(())
    }

    fn boundary(&mut self, last: bool) -> Result<(), String> {
        if let Some(mut p) = self.part.take() {
            if p.name.is_some() {
                if p.is_file {
                    self.nfiles += 1;
                    if self.nfiles > FILE_LIMIT {
                        self.file_limit_exceeded = true;
                    }
                }
                p.value.truncate(p.length);
                if self.parts.len() >= self.max_parts {
                    return Err("Multipart: too many parts".into());
                }
                self.parts.push(p);
            } else {
                self.invalid_part = true;
            }
        }
        if !last {
            self.part = Some(Part::default());
            self.state = 0;
            self.reserve.clear();
        }
        Ok(())
    }

    fn header(&mut self, buf: &[u8]) -> Result<(), String> {
        if memchr::memchr(0, buf).is_some() {
            return Err("Multipart: Nul byte in part headers.".into());
        }
        self.no_files_len += buf.len();
        let len = buf.len();
        if len > 1 && buf[len - 2] == b'\r' {
            self.crlf_line = true;
        } else {
            self.lf_line = true;
        }
        let Some(part) = self.part.as_mut() else {
            return Err(NO_PART.into());
        };
        if buf == b"\r\n" || buf == b"\n" {
            let Some(cd) = part
                .headers
                .iter()
                .find(|(n, _)| n == b"content-disposition")
                .map(|(_, v)| v.clone())
            else {
                return Err("Multipart: Part missing Content-Disposition header.".into());
            };
            let mut invalid_quoting = false;
            let r = parse_content_disposition(part, &cd, &mut invalid_quoting);
            if invalid_quoting {
                self.invalid_quoting = true;
            }
            let Some(part) = self.part.as_mut() else {
                return Err(NO_PART.into());
            };
            if let Some(n) = &part.name {
                self.last_name = n.clone();
            }
            if let Some(f) = &part.filename {
                self.last_filename = f.clone();
            }
            if let Err(code) = r {
                return Err(format!(
                    "Multipart: Invalid Content-Disposition header ({code}): {}",
                    String::from_utf8_lossy(&cd)
                ));
            }
            if part.name.is_none() {
                return Err("Multipart: Content-Disposition header missing name field.".into());
            }
            if part.filename.is_some() {
                if memchr::memmem::find(&cd, b"filename=").is_none()
                    && memchr::memmem::find(&cd, b"filename*=").is_none()
                {
                    return Err("Multipart: Invalid Content-Disposition header (filename).".into());
                }
                part.is_file = true;
            }
            self.state = 1;
            part.last_header = None;
            if let Some(l) = part.last_line.take() {
                part.header_lines.push(l);
            }
            return Ok(());
        }
        if is_space(buf[0]) {
            self.header_folding = true;
            if buf[0] != b'\t' && buf[0] != b' ' {
                self.invalid_header_folding = true;
            }
            let Some(h) = part.last_header else {
                return Err("Multipart: Invalid part header (folding error).".into());
            };
            let mut d = 0;
            while d < buf.len() && is_space(buf[d]) {
                if buf[d] != b'\t' && buf[d] != b' ' {
                    self.invalid_header_folding = true;
                }
                d += 1;
            }
            let data = chomp(&buf[d..]);
            let v = &mut part.headers[h].1;
            v.push(b' ');
            v.extend_from_slice(data);
            if let Some(l) = &mut part.last_line {
                l.push(b' ');
                l.extend_from_slice(data);
            }
            if v.len() > BUF {
                return Err("Multipart: Part header too long.".into());
            }
            return Ok(());
        }
        if let Some(l) = part.last_line.take() {
            part.header_lines.push(l);
        }
        let Some(colon) = memchr::memchr(b':', buf) else {
            return Err(format!(
                "Multipart: Invalid part header (colon missing): {}.",
                String::from_utf8_lossy(buf)
            ));
        };
        if colon == 0 {
            return Err("Multipart: Invalid part header (header name missing).".into());
        }
        let name = &buf[..colon];
        let mut d = colon + 1;
        while d < buf.len() && (buf[d] == b'\t' || buf[d] == b' ') {
            d += 1;
        }
        let value = chomp(&buf[d..]).to_vec();
        let lname = name.to_ascii_lowercase();
        if part.headers.iter().any(|(n, _)| *n == lname) {
            return Err(format!(
                "Multipart: Duplicate part header: {}.",
                String::from_utf8_lossy(name)
            ));
        }
        let mut line = name.to_vec();
        line.extend_from_slice(b": ");
        line.extend_from_slice(&value);
        part.headers.push((lname, value));
        part.last_header = Some(part.headers.len() - 1);
        part.last_line = Some(line);
        Ok(())
    }

    fn data(&mut self, buf: &[u8]) {
        let mut body = buf;
        let mut reserved: &[u8] = &[];
        if body.ends_with(b"\r\n") {
            reserved = &body[body.len() - 2..];
            body = &body[..body.len() - 2];
        } else if body.ends_with(b"\n") {
            reserved = &body[body.len() - 1..];
            body = &body[..body.len() - 1];
        }
        let Some(part) = self.part.as_mut() else {
            // Marked as a parse error (MULTIPART_STRICT_ERROR), never
            // dropped unseen.
            self.error = true;
            return;
        };
        let add = self.reserve.len() + body.len();
        if !part.is_file {
            self.no_files_len += add;
        }
        // A file's content is kept too (bounded by the body, which is in
        // memory already): it is inspected when the part may be read as a
        // field (see `read_as_field`).
        part.value.extend_from_slice(&self.reserve);
        part.value.extend_from_slice(body);
        part.length += add;
        self.reserve.clear();
        self.reserve.extend_from_slice(reserved);
    }

    fn complete(&mut self, seen_data: bool) -> Result<(), String> {
        if seen_data && !self.complete {
            if self.boundaries > 0 {
                let bl = self.boundary.len();
                let b = &self.buf;
                if self.contains_line
                    && b.len() == 4 + bl
                    && b.starts_with(b"--")
                    && &b[2..2 + bl] == self.boundary.as_slice()
                    && &b[2 + bl..] == b"--"
                {
                    self.boundary(true)?;
                    self.complete = true;
                }
                if !self.complete {
                    return Err("Multipart: Final boundary missing.".into());
                }
            } else {
                return Err("Multipart: No boundaries found in payload.".into());
            }
        }
        Ok(())
    }
}

/// Whether a file part is also inspected as a field (ARGS_POST), as well
/// as listed in FILES: ModSecurity never looks at a file's content, but
/// the application may read such a part as a field. Its file name is
/// empty (Go's `ParseMultipartForm` and others take a part without a file
/// name as a value), or a plain field has the same name (frameworks that
/// keep one value per name may keep the file's, so an attack sent as a
/// "file" beside a benign field of the same name slipped through). Files
/// that only share a name with other files (`<input type=file multiple>`)
/// stay uninspected, binary content and all.
fn read_as_field(p: &Part, field_names: &[&[u8]]) -> bool {
    p.is_file
        && (p.filename.as_deref().is_none_or(<[u8]>::is_empty)
            || p.name.as_deref().is_some_and(|n| field_names.contains(&n)))
}

/// `Content-Disposition: form-data; name="a"; filename="b"`; the error
/// codes are ModSecurity's.
fn parse_content_disposition(
    part: &mut Part,
    v: &[u8],
    invalid_quoting: &mut bool,
) -> Result<(), i32> {
    let v = &v[..memchr::memchr(0, v).unwrap_or(v.len())];
    if !v.starts_with(b"form-data") {
        return Err(-1);
    }
    let mut p = 9;
    let at = |p: usize| v.get(p).copied().unwrap_or(0);
    while at(p) == b'\t' || at(p) == b' ' {
        p += 1;
    }
    if at(p) == 0 {
        return Ok(());
    }
    if at(p) != b';' {
        return Err(-2);
    }
    p += 1;
    while at(p) != 0 {
        while at(p) == b'\t' || at(p) == b' ' {
            p += 1;
        }
        if at(p) == 0 {
            return Err(-3);
        }
        let start = p;
        while at(p) != 0 && at(p) != b'=' && at(p) != b'\t' && at(p) != b' ' {
            p += 1;
        }
        if at(p) == 0 {
            return Err(-4);
        }
        let name = &v[start..p];
        while at(p) == b'\t' || at(p) == b' ' {
            p += 1;
        }
        if at(p) == 0 {
            return Err(-5);
        }
        if at(p) != b'=' {
            return Err(-13);
        }
        p += 1;
        while at(p) == b'\t' || at(p) == b' ' {
            p += 1;
        }
        if at(p) == 0 {
            return Err(-6);
        }
        let value: Vec<u8>;
        let mut quoted_by = 0u8;
        if at(p) == b'"' || at(p) == b'\'' {
            let quote = at(p);
            quoted_by = quote;
            if quote == b'\'' {
                *invalid_quoting = true;
            }
            p += 1;
            if at(p) == 0 {
                return Err(-7);
            }
            let mut t = Vec::new();
            loop {
                let c = at(p);
                if c == 0 {
                    return Err(-10);
                }
                if c == b'\\' {
                    if at(p + 1) == 0 {
                        return Err(-8);
                    }
                    if at(p + 1) == quote || at(p + 1) == b'\\' {
                        p += 1;
                    }
                } else if c == quote {
                    break;
                }
                t.push(at(p));
                p += 1;
            }
            p += 1;
            value = t;
        } else {
            let s = p;
            while at(p) != 0 && is_token_char(at(p)) {
                p += 1;
            }
            value = v[s..p].to_vec();
        }
        // validate_quotes: a single quote inside a value is suspicious
        // unless the value was in double quotes.
        if quoted_by != b'"' && value.contains(&b'\'') {
            *invalid_quoting = true;
        }
        match name {
            b"name" => {
                if part.name.is_some() {
                    return Err(-14);
                }
                part.name = Some(value);
            }
            b"filename" => {
                if part.filename.is_some() {
                    return Err(-15);
                }
                part.filename = Some(value);
            }
            b"filename*" => {
                // RFC 5987: charset'language'percent-encoded.
                if part.filename.is_some() {
                    return Err(-15);
                }
                let enc = match memchr::memmem::find(&value, b"''") {
                    Some(q) => &value[q + 2..],
                    None => &value[..],
                };
                let mut invalid = false;
                part.filename = Some(crate::transform::url_decode_nonstrict(enc, &mut invalid));
            }
            _ => return Err(-11),
        }
        if at(p) != 0 {
            while at(p) == b'\t' || at(p) == b' ' {
                p += 1;
            }
            if at(p) == 0 {
                return Ok(());
            }
            if at(p) != b';' {
                if p > 0 && (v[p - 1] == b'\'' || v[p - 1] == b'"') {
                    *invalid_quoting = true;
                }
                return Err(-12);
            }
            p += 1;
        }
    }
    Ok(())
}

pub(crate) fn multipart(
    sink: &mut impl Sink,
    content_type: &[u8],
    body: &[u8],
) -> Result<(), String> {
    let limits = sink.limits();
    let mut mp = Mp {
        max_parts: limits.max_parts,
        ..Mp::default()
    };
    let mut result = mp.init(content_type);
    if result.is_ok() {
        result = mp.process(body);
        let done = mp.complete(!body.is_empty());
        if result.is_ok() {
            result = done;
        }
    }
    if result.is_err() {
        mp.error = true;
    }
    // The parts complete before any error are kept (as ModSecurity does).
    let parts = std::mem::take(&mut mp.parts);
    let field_names: Vec<&[u8]> = parts
        .iter()
        .filter(|p| !p.is_file)
        .filter_map(|p| p.name.as_deref())
        .collect();
    let as_field: Vec<bool> = parts
        .iter()
        .map(|p| read_as_field(p, &field_names))
        .collect();
    drop(field_names);
    for (p, as_field) in parts.into_iter().zip(as_field) {
        let name = p.name.clone().unwrap_or_default();
        if p.is_file {
            sink.file(&name, p.filename.as_deref().unwrap_or(b""), p.length);
        }
        if !p.is_file || as_field {
            sink.arg(&name, &p.value);
        }
        for l in &p.header_lines {
            sink.part_header(&name, l);
        }
    }
    let strict = mp.error
        || mp.boundary_quoted
        || mp.boundary_whitespace
        || mp.data_before
        || mp.data_after
        || mp.header_folding
        || mp.lf_line
        || mp.missing_semicolon
        || mp.invalid_quoting
        || mp.invalid_part
        || mp.invalid_header_folding
        || mp.file_limit_exceeded;
    let flag = |b: bool| -> &[u8] {
        if b {
            b"1"
        } else {
            b"0"
        }
    };
    sink.set(C::MultipartStrictError, flag(strict));
    sink.set(C::MultipartBoundaryQuoted, flag(mp.boundary_quoted));
    sink.set(C::MultipartBoundaryWhitespace, flag(mp.boundary_whitespace));
    sink.set(C::MultipartDataBefore, flag(mp.data_before));
    sink.set(C::MultipartDataAfter, flag(mp.data_after));
    sink.set(C::MultipartHeaderFolding, flag(mp.header_folding));
    sink.set(C::MultipartLfLine, flag(mp.lf_line));
    sink.set(C::MultipartCrlfLfLines, flag(mp.lf_line && mp.crlf_line));
    sink.set(C::MultipartMissingSemicolon, flag(mp.missing_semicolon));
    sink.set(C::MultipartInvalidQuoting, flag(mp.invalid_quoting));
    sink.set(C::MultipartInvalidPart, flag(mp.invalid_part));
    sink.set(
        C::MultipartInvalidHeaderFolding,
        flag(mp.invalid_header_folding),
    );
    sink.set(C::MultipartFileLimitExceeded, flag(mp.file_limit_exceeded));
    sink.set(C::MultipartUnmatchedBoundary, flag(mp.unmatched_boundary));
    if !mp.last_name.is_empty() {
        sink.set(C::MultipartName, &mp.last_name);
    }
    if !mp.last_filename.is_empty() {
        sink.set(C::MultipartFilename, &mp.last_filename);
    }
    let limit = limits.no_files;
    if result.is_ok() && limit > 0 && mp.no_files_len as u64 > limit {
        return Err("Request body excluding files is bigger than the maximum expected.".into());
    }
    result
}
