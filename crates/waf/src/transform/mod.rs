//! SecLang transformations (`t:...`) with the semantics of ModSecurity v3.
//!
//! Every transformation works on bytes (never on UTF-8 text) and writes into a
//! caller-owned buffer, so the engine can keep one buffer per cached
//! (variable, transformation chain) and allocate nothing on the hot path:
//!
//! ```text
//! let mut out = Vec::new();
//! if apply(Transform::UrlDecodeUni, input, &mut out) { /* use out */ } else { /* use input */ }
//! ```
//!
//! `apply` returns `true` when the result differs from the input; the result
//! is then in `out`. When it returns `false`, `out` is left empty and the
//! result is the input itself (nothing was copied). Most transformations scan
//! for the first byte they would change before copying anything, so the
//! common case (benign input, nothing to decode) costs one pass and no copy.
//!
//! The behaviour follows ModSecurity v3's `src/actions/transformations/*.cc`,
//! including its quirks (documented per function), so that the Core Rule Set
//! sees the same values it sees under ModSecurity. Character classes are
//! those of the C locale (`isspace`, `isxdigit`, `tolower`: ASCII only).

mod digest;
#[cfg(test)]
mod tests;

/// One transformation. `by_name` maps a SecLang name to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transform {
    None,
    Lowercase,
    Uppercase,
    UrlDecode,
    UrlDecodeUni,
    UrlEncode,
    HtmlEntityDecode,
    JsDecode,
    CssDecode,
    CmdLine,
    CompressWhitespace,
    RemoveWhitespace,
    RemoveNulls,
    ReplaceNulls,
    ReplaceComments,
    RemoveCommentsChar,
    RemoveComments,
    NormalisePath,
    NormalisePathWin,
    Utf8ToUnicode,
    Base64Decode,
    Base64DecodeExt,
    Base64Encode,
    HexDecode,
    HexEncode,
    SqlHexDecode,
    Length,
    Sha1,
    Md5,
    Trim,
    TrimLeft,
    TrimRight,
    EscapeSeqDecode,
    ParityEven7bit,
    ParityOdd7bit,
    ParityZero7bit,
}

impl Transform {
    /// Every transformation, for tests and fuzzing.
    pub const ALL: [Transform; 36] = [
        Transform::None,
        Transform::Lowercase,
        Transform::Uppercase,
        Transform::UrlDecode,
        Transform::UrlDecodeUni,
        Transform::UrlEncode,
        Transform::HtmlEntityDecode,
        Transform::JsDecode,
        Transform::CssDecode,
        Transform::CmdLine,
        Transform::CompressWhitespace,
        Transform::RemoveWhitespace,
        Transform::RemoveNulls,
        Transform::ReplaceNulls,
        Transform::ReplaceComments,
        Transform::RemoveCommentsChar,
        Transform::RemoveComments,
        Transform::NormalisePath,
        Transform::NormalisePathWin,
        Transform::Utf8ToUnicode,
        Transform::Base64Decode,
        Transform::Base64DecodeExt,
        Transform::Base64Encode,
        Transform::HexDecode,
        Transform::HexEncode,
        Transform::SqlHexDecode,
        Transform::Length,
        Transform::Sha1,
        Transform::Md5,
        Transform::Trim,
        Transform::TrimLeft,
        Transform::TrimRight,
        Transform::EscapeSeqDecode,
        Transform::ParityEven7bit,
        Transform::ParityOdd7bit,
        Transform::ParityZero7bit,
    ];

    /// The canonical SecLang name.
    pub fn name(self) -> &'static str {
        match self {
            Transform::None => "none",
            Transform::Lowercase => "lowercase",
            Transform::Uppercase => "uppercase",
            Transform::UrlDecode => "urlDecode",
            Transform::UrlDecodeUni => "urlDecodeUni",
            Transform::UrlEncode => "urlEncode",
            Transform::HtmlEntityDecode => "htmlEntityDecode",
            Transform::JsDecode => "jsDecode",
            Transform::CssDecode => "cssDecode",
            Transform::CmdLine => "cmdLine",
            Transform::CompressWhitespace => "compressWhitespace",
            Transform::RemoveWhitespace => "removeWhitespace",
            Transform::RemoveNulls => "removeNulls",
            Transform::ReplaceNulls => "replaceNulls",
            Transform::ReplaceComments => "replaceComments",
            Transform::RemoveCommentsChar => "removeCommentsChar",
            Transform::RemoveComments => "removeComments",
            Transform::NormalisePath => "normalisePath",
            Transform::NormalisePathWin => "normalisePathWin",
            Transform::Utf8ToUnicode => "utf8toUnicode",
            Transform::Base64Decode => "base64Decode",
            Transform::Base64DecodeExt => "base64DecodeExt",
            Transform::Base64Encode => "base64Encode",
            Transform::HexDecode => "hexDecode",
            Transform::HexEncode => "hexEncode",
            Transform::SqlHexDecode => "sqlHexDecode",
            Transform::Length => "length",
            Transform::Sha1 => "sha1",
            Transform::Md5 => "md5",
            Transform::Trim => "trim",
            Transform::TrimLeft => "trimLeft",
            Transform::TrimRight => "trimRight",
            Transform::EscapeSeqDecode => "escapeSeqDecode",
            Transform::ParityEven7bit => "parityEven7bit",
            Transform::ParityOdd7bit => "parityOdd7bit",
            Transform::ParityZero7bit => "parityZero7bit",
        }
    }
}

/// The transformation a SecLang name (without `t:`) stands for, compared
/// without regard to case. Both spellings of `normalisePath(Win)` are
/// accepted, as in ModSecurity and Coraza.
pub fn by_name(name: &str) -> Option<Transform> {
    let n = name.trim();
    let eq = |s: &str| n.eq_ignore_ascii_case(s);
    if eq("normalizePath") {
        return Some(Transform::NormalisePath);
    }
    if eq("normalizePathWin") {
        return Some(Transform::NormalisePathWin);
    }
    Transform::ALL.iter().copied().find(|t| eq(t.name()))
}

/// Applies `t` to `input`. Returns `true` when the result differs from the
/// input, the result being in `out` (cleared first); `false` when the result
/// is the input unchanged (then `out` is left empty).
pub fn apply(t: Transform, input: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let wrote = match t {
        Transform::None => false,
        Transform::Lowercase => lowercase(input, out),
        Transform::Uppercase => uppercase(input, out),
        Transform::UrlDecode => url_decode(input, out, false, &mut false),
        Transform::UrlDecodeUni => url_decode(input, out, true, &mut false),
        Transform::UrlEncode => url_encode(input, out),
        Transform::HtmlEntityDecode => html_entity_decode(input, out),
        Transform::JsDecode => js_decode(input, out),
        Transform::CssDecode => css_decode(input, out),
        Transform::CmdLine => cmd_line(input, out),
        Transform::CompressWhitespace => compress_whitespace(input, out),
        Transform::RemoveWhitespace => remove_whitespace(input, out),
        Transform::RemoveNulls => remove_nulls(input, out),
        Transform::ReplaceNulls => replace_nulls(input, out),
        Transform::ReplaceComments => replace_comments(input, out),
        Transform::RemoveCommentsChar => remove_comments_char(input, out),
        Transform::RemoveComments => remove_comments(input, out),
        Transform::NormalisePath => normalise_path(input, out, false),
        Transform::NormalisePathWin => normalise_path(input, out, true),
        Transform::Utf8ToUnicode => utf8_to_unicode(input, out),
        Transform::Base64Decode => base64_decode(input, out),
        Transform::Base64DecodeExt => base64_decode_ext(input, out),
        Transform::Base64Encode => base64_encode(input, out),
        Transform::HexDecode => hex_decode(input, out),
        Transform::HexEncode => hex_encode(input, out),
        Transform::SqlHexDecode => sql_hex_decode(input, out),
        Transform::Length => {
            out.extend_from_slice(input.len().to_string().as_bytes());
            true
        }
        Transform::Sha1 => {
            out.extend_from_slice(&digest::sha1(input));
            true
        }
        Transform::Md5 => {
            out.extend_from_slice(&digest::md5(input));
            true
        }
        Transform::Trim => trim(input, out, true, true),
        Transform::TrimLeft => trim(input, out, true, false),
        Transform::TrimRight => trim(input, out, false, true),
        Transform::EscapeSeqDecode => escape_seq_decode(input, out),
        Transform::ParityEven7bit => parity(input, out, Parity::Even),
        Transform::ParityOdd7bit => parity(input, out, Parity::Odd),
        Transform::ParityZero7bit => parity(input, out, Parity::Zero),
    };
    // Some decoders write before knowing whether anything will differ (and
    // a few, like `length`, always write): settle "changed" exactly here.
    if wrote && out.as_slice() != input {
        true
    } else {
        out.clear();
        false
    }
}

/// Applies `t` and returns the result, borrowed when nothing changed.
pub fn apply_cow(t: Transform, input: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut out = Vec::new();
    if apply(t, input, &mut out) {
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(input)
    }
}

/// Applies a chain of transformations, ping-ponging between two buffers the
/// caller owns. Returns the result: `input` itself when no step changed
/// anything, otherwise one of the buffers.
pub fn apply_chain<'a>(
    chain: &[Transform],
    input: &'a [u8],
    a: &'a mut Vec<u8>,
    b: &'a mut Vec<u8>,
) -> &'a [u8] {
    // 0: input, 1: a, 2: b
    let mut cur = 0u8;
    for &t in chain {
        let changed = match cur {
            0 => apply(t, input, a),
            1 => apply(t, a, b),
            _ => apply(t, b, a),
        };
        if changed {
            cur = match cur {
                0 => 1,
                1 => 2,
                _ => 1,
            };
        }
    }
    match cur {
        0 => input,
        1 => a.as_slice(),
        _ => b.as_slice(),
    }
}

// ---------------------------------------------------------------------------
// which bytes a transformation acts on

/// The classes of the bytes of a value, as bits ([`byte_classes`]). A
/// transformation whose [`triggers`] share no class with a value returns
/// it unchanged: a benign value passes through most of the decoders of a
/// CRS chain untouched (about 93 % of the calls on a browser request), and
/// the engine skips them on a bit test instead of a scan each.
pub type Classes = u32;

const UPPER: Classes = 1 << 0;
const LOWER: Classes = 1 << 1;
/// C-locale `isspace`: space, `\t`, `\n`, `\v`, `\f`, `\r`.
const SPACE: Classes = 1 << 2;
const PERCENT: Classes = 1 << 3;
const PLUS: Classes = 1 << 4;
const AMP: Classes = 1 << 5;
const BACKSLASH: Classes = 1 << 6;
const NUL: Classes = 1 << 7;
const SLASH: Classes = 1 << 8;
const STAR: Classes = 1 << 9;
const DASH: Classes = 1 << 10;
const HASH: Classes = 1 << 11;
const DOT: Classes = 1 << 12;
const HIGH: Classes = 1 << 13;
/// `"`, `'`, `^`, `,`, `;`: what `cmdLine` deletes or turns into a space.
const SHELL: Classes = 1 << 14;
/// In every value's classes (an empty one's too): the trigger of a
/// transformation that may change anything.
const ANY: Classes = 1 << 31;

const CLASS: [Classes; 256] = {
    let mut t = [0; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = match c {
            b'A'..=b'Z' => UPPER,
            b'a'..=b'z' => LOWER,
            b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' => SPACE,
            b'%' => PERCENT,
            b'+' => PLUS,
            b'&' => AMP,
            b'\\' => BACKSLASH,
            0 => NUL,
            b'/' => SLASH,
            b'*' => STAR,
            b'-' => DASH,
            b'#' => HASH,
            b'.' => DOT,
            b'"' | b'\'' | b'^' | b',' | b';' => SHELL,
            0x80..=0xff => HIGH,
            _ => 0,
        };
        i += 1;
    }
    t
};

/// The byte classes present in `input`.
pub fn byte_classes(input: &[u8]) -> Classes {
    input.iter().fold(ANY, |m, &c| m | CLASS[c as usize])
}

/// The byte classes without which `t` leaves a value as it is (`ANY`: it
/// may change any value). Each set is checked against the transformation
/// itself by `tests::triggers_cover_every_change`.
pub fn triggers(t: Transform) -> Classes {
    match t {
        Transform::None => 0,
        Transform::Lowercase => UPPER,
        Transform::Uppercase => LOWER,
        Transform::UrlDecode | Transform::UrlDecodeUni => PERCENT | PLUS,
        Transform::HtmlEntityDecode => AMP,
        Transform::JsDecode | Transform::CssDecode | Transform::EscapeSeqDecode => BACKSLASH,
        // Deletes quotes, `\` and `^`, makes `,` `;` and whitespace runs one
        // space (and drops it before `/` or `(`), lowercases.
        Transform::CmdLine => UPPER | SPACE | SHELL | BACKSLASH,
        Transform::CompressWhitespace
        | Transform::Trim
        | Transform::TrimLeft
        | Transform::TrimRight => SPACE,
        // NBSP (0xa0) too.
        Transform::RemoveWhitespace => SPACE | HIGH,
        Transform::RemoveNulls | Transform::ReplaceNulls => NUL,
        Transform::ReplaceComments => SLASH,
        // `/*`, `*/`, `<!--`, `-->`, `--`, `#`.
        Transform::RemoveCommentsChar => SLASH | STAR | DASH | HASH,
        Transform::NormalisePath => SLASH | DOT,
        Transform::NormalisePathWin => SLASH | DOT | BACKSLASH,
        Transform::Utf8ToUnicode => HIGH,
        _ => ANY,
    }
}

// ---------------------------------------------------------------------------
// helpers (C locale semantics)

#[inline]
fn is_space(c: u8) -> bool {
    // isspace() in the C locale: space, \t, \n, \v, \f, \r.
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

#[inline]
fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

#[inline]
fn is_odigit(c: u8) -> bool {
    (b'0'..=b'7').contains(&c)
}

/// ModSecurity's `x2c`: two hex digits to a byte, with its unchecked
/// arithmetic for non-hex input (hexDecode relies on it).
#[inline]
fn x2c(a: u8, b: u8) -> u8 {
    xsingle(a).wrapping_mul(16).wrapping_add(xsingle(b))
}

#[inline]
fn xsingle(c: u8) -> u8 {
    if c >= b'A' {
        (c & 0xdf).wrapping_sub(b'A').wrapping_add(10)
    } else {
        c.wrapping_sub(b'0')
    }
}

#[inline]
fn at(s: &[u8], i: usize) -> u8 {
    // Reading one past the end yields the C string terminator.
    s.get(i).copied().unwrap_or(0)
}

/// Copies `input[..pos]` into `out` and returns; used by the scan-first
/// transformations once they find the first byte to change.
#[inline]
fn start(out: &mut Vec<u8>, input: &[u8], pos: usize) {
    out.reserve(input.len());
    out.extend_from_slice(&input[..pos]);
}

// ---------------------------------------------------------------------------
// case

fn lowercase(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = input.iter().position(|c| c.is_ascii_uppercase()) else {
        return false;
    };
    start(out, input, p);
    out.extend(input[p..].iter().map(|c| c.to_ascii_lowercase()));
    true
}

fn uppercase(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = input.iter().position(|c| c.is_ascii_lowercase()) else {
        return false;
    };
    start(out, input, p);
    out.extend(input[p..].iter().map(|c| c.to_ascii_uppercase()));
    true
}

// ---------------------------------------------------------------------------
// URL

/// ModSecurity's `urldecode_nonstrict_inplace` (`t:urlDecode`), as the
/// engine decodes urlencoded arguments and RFC 5987 file names with it:
/// `+` a space, `%XX` decoded, an invalid `%` kept and `invalid` set.
pub fn url_decode_nonstrict(input: &[u8], invalid: &mut bool) -> Vec<u8> {
    let mut out = Vec::new();
    if url_decode(input, &mut out, false, invalid) {
        out
    } else {
        input.to_vec()
    }
}

/// ModSecurity's `uri_decode` (REQUEST_URI, REQUEST_FILENAME): `%XX`
/// with two hex digits, nothing else (`+` stays).
pub fn uri_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(a), Some(b)) = (hex_value(s[i + 1]), hex_value(s[i + 2])) {
                out.push(a << 4 | b);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// The value of a hex digit (either case).
pub fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `urlDecode` (ModSecurity's `urldecode_nonstrict_inplace`) and
/// `urlDecodeUni` (adds IIS `%uHHHH`: the low byte, plus 0x20 for the
/// full-width ASCII range `%uff01`-`%uff5e`). Invalid escapes are copied;
/// an invalid `%` (not `%u`) sets `invalid`.
fn url_decode(input: &[u8], out: &mut Vec<u8>, uni: bool, invalid: &mut bool) -> bool {
    let Some(p) = memchr::memchr2(b'%', b'+', input) else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    while i < n {
        let c = input[i];
        if c == b'%' {
            if uni && i + 1 < n && (input[i + 1] == b'u' || input[i + 1] == b'U') {
                if i + 5 < n
                    && is_hex(input[i + 2])
                    && is_hex(input[i + 3])
                    && is_hex(input[i + 4])
                    && is_hex(input[i + 5])
                {
                    let mut d = x2c(input[i + 4], input[i + 5]);
                    if d > 0x00
                        && d < 0x5f
                        && (input[i + 2] | 0x20) == b'f'
                        && (input[i + 3] | 0x20) == b'f'
                    {
                        d += 0x20;
                    }
                    out.push(d);
                    i += 6;
                } else {
                    // Invalid or short: skip "%u" as is.
                    out.push(input[i]);
                    out.push(input[i + 1]);
                    i += 2;
                }
            } else if i + 2 < n && is_hex(input[i + 1]) && is_hex(input[i + 2]) {
                out.push(x2c(input[i + 1], input[i + 2]));
                i += 3;
            } else {
                *invalid = true;
                out.push(b'%');
                i += 1;
            }
        } else if c == b'+' {
            out.push(b' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    true
}

/// `urlEncode`: space to `+`; `*`, digits and ASCII letters kept; the rest
/// as `%hh` (lower case).
fn url_encode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let keep = |c: u8| c == b'*' || c.is_ascii_alphanumeric();
    let Some(p) = input.iter().position(|&c| !keep(c)) else {
        return false;
    };
    start(out, input, p);
    for &c in &input[p..] {
        if c == b' ' {
            out.push(b'+');
        } else if keep(c) {
            out.push(c);
        } else {
            out.push(b'%');
            out.push(HEX_LOWER[(c >> 4) as usize]);
            out.push(HEX_LOWER[(c & 15) as usize]);
        }
    }
    true
}

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

// ---------------------------------------------------------------------------
// HTML, JavaScript, CSS

/// Named entities ModSecurity decodes (those that map into ASCII, plus
/// `nbsp`), matched without regard to case and on the whole name.
const NAMED_ENTITIES: &[(&[u8], u8)] = &[
    (b"amp", b'&'),
    (b"apos", b'\''),
    (b"ast", b'*'),
    (b"bsol", b'\\'),
    (b"caret", b'^'),
    (b"colon", b':'),
    (b"comma", b','),
    (b"commat", b'@'),
    (b"dollar", b'$'),
    (b"equals", b'='),
    (b"grave", b'`'),
    (b"gt", b'>'),
    (b"hyphen", b'-'),
    (b"lbrace", b'{'),
    (b"lbrack", b'['),
    (b"lowbar", b'_'),
    (b"lpar", b'('),
    (b"lt", b'<'),
    (b"nbsp", 0xa0),
    (b"num", b'#'),
    (b"percnt", b'%'),
    (b"period", b'.'),
    (b"plus", b'+'),
    (b"quest", b'?'),
    (b"quot", b'"'),
    (b"rbrace", b'}'),
    (b"rbrack", b']'),
    (b"rpar", b')'),
    (b"semi", b';'),
    (b"sol", b'/'),
    (b"tilde", b'~'),
    (b"verbar", b'|'),
];

/// `strtol(digits, NULL, radix)` cast to `unsigned char`: saturates at
/// LONG_MAX (whose low byte is 0xff) on overflow.
fn strtol_byte(digits: &[u8], radix: u32) -> u8 {
    let mut v: u64 = 0;
    for &d in digits {
        let x = (d as char).to_digit(radix).unwrap_or(0) as u64;
        v = v.saturating_mul(radix as u64).saturating_add(x);
        if v > i64::MAX as u64 {
            return 0xff;
        }
    }
    v as u8
}

/// `htmlEntityDecode`: `&#DDD;`, `&#xHH;` (the semicolon optional; the value
/// truncated to one byte) and the named entities above. Unknown entities are
/// copied as they are.
fn html_entity_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memchr(b'&', input) else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    while i < n {
        let mut copy = 1usize;
        if input[i] == b'&' && i + 1 < n {
            let mut j = i + 1;
            if input[j] == b'#' {
                copy += 1;
                if j + 1 < n {
                    j += 1;
                    if input[j] == b'x' || input[j] == b'X' {
                        copy += 1;
                        if j + 1 < n {
                            j += 1;
                            let k = j;
                            while j < n && is_hex(input[j]) {
                                j += 1;
                            }
                            if j > k {
                                out.push(strtol_byte(&input[k..j], 16));
                                i = if j < n && input[j] == b';' { j + 1 } else { j };
                                continue;
                            }
                        }
                    } else {
                        let k = j;
                        while j < n && input[j].is_ascii_digit() {
                            j += 1;
                        }
                        if j > k {
                            out.push(strtol_byte(&input[k..j], 10));
                            i = if j < n && input[j] == b';' { j + 1 } else { j };
                            continue;
                        }
                    }
                }
            } else {
                let k = j;
                while j < n && input[j].is_ascii_alphanumeric() {
                    j += 1;
                }
                if j > k {
                    let name = &input[k..j];
                    if let Some(&(_, ch)) = NAMED_ENTITIES
                        .iter()
                        .find(|(e, _)| e.eq_ignore_ascii_case(name))
                    {
                        out.push(ch);
                        i = if j < n && input[j] == b';' { j + 1 } else { j };
                        continue;
                    }
                    copy = j - k + 1;
                }
            }
        }
        let end = (i + copy).min(n);
        out.extend_from_slice(&input[i..end]);
        i = end;
    }
    true
}

/// `jsDecode`: `\uHHHH` (low byte, full-width ASCII adjusted), `\xHH`,
/// `\OOO` (at most one byte), `\a \b \f \n \r \t \v`, and `\C` to `C`.
fn js_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memchr(b'\\', input) else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    while i < n {
        if input[i] != b'\\' {
            out.push(input[i]);
            i += 1;
            continue;
        }
        if i + 5 < n
            && input[i + 1] == b'u'
            && is_hex(input[i + 2])
            && is_hex(input[i + 3])
            && is_hex(input[i + 4])
            && is_hex(input[i + 5])
        {
            let mut d = x2c(input[i + 4], input[i + 5]);
            if d > 0x00
                && d < 0x5f
                && (input[i + 2] | 0x20) == b'f'
                && (input[i + 3] | 0x20) == b'f'
            {
                d += 0x20;
            }
            out.push(d);
            i += 6;
        } else if i + 3 < n && input[i + 1] == b'x' && is_hex(input[i + 2]) && is_hex(input[i + 3])
        {
            out.push(x2c(input[i + 2], input[i + 3]));
            i += 4;
        } else if i + 1 < n && is_odigit(input[i + 1]) {
            let mut j = 0usize;
            while i + 1 + j < n && j < 3 {
                j += 1;
                if !is_odigit(at(input, i + 1 + j)) {
                    break;
                }
            }
            // Do not use 3 characters if the value would exceed one byte.
            if j == 3 && input[i + 1] > b'3' {
                j = 2;
            }
            out.push(strtol_byte(&input[i + 1..i + 1 + j], 8));
            i += 1 + j;
        } else if i + 1 < n {
            let c = match input[i + 1] {
                b'a' => 0x07,
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'v' => 0x0b,
                other => other,
            };
            out.push(c);
            i += 2;
        } else {
            // A lone backslash at the end is kept.
            out.extend_from_slice(&input[i..]);
            i = n;
        }
    }
    true
}

/// `cssDecode` (CSS 2 escapes): `\` + 1-6 hex digits (the last two used, with
/// the full-width ASCII check for 4-6 digits; one following whitespace
/// swallowed), `\` + newline removed, `\C` to `C`, a trailing `\` removed.
fn css_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memchr(b'\\', input) else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    while i < n {
        if input[i] != b'\\' {
            out.push(input[i]);
            i += 1;
            continue;
        }
        if i + 1 >= n {
            // No characters after the backslash: dropped.
            i += 1;
            continue;
        }
        i += 1;
        let mut j = 0usize;
        while j < 6 && i + j < n && is_hex(input[i + j]) {
            j += 1;
        }
        if j > 0 {
            let mut fullcheck = false;
            let d = match j {
                1 => xsingle(input[i]),
                _ => x2c(input[i + j - 2], input[i + j - 1]),
            };
            match j {
                4 => fullcheck = true,
                5 => fullcheck = input[i] == b'0',
                6 => fullcheck = input[i] == b'0' && input[i + 1] == b'0',
                _ => {}
            }
            let mut d = d;
            if fullcheck
                && d > 0x00
                && d < 0x5f
                && (input[i + j - 3] | 0x20) == b'f'
                && (input[i + j - 4] | 0x20) == b'f'
            {
                d += 0x20;
            }
            out.push(d);
            if i + j < n && is_space(input[i + j]) {
                j += 1;
            }
            i += j;
        } else if input[i] == b'\n' {
            i += 1;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    true
}

// ---------------------------------------------------------------------------
// command line, whitespace, NULs, comments

/// `cmdLine`: deletes `" ' \ ^`; turns runs of space `,` `;` tab CR LF into
/// one space; deletes a space before `/` or `(`; lower-cases the rest.
fn cmd_line(input: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(input.len());
    let mut space = false;
    for &a in input {
        match a {
            b'"' | b'\'' | b'\\' | b'^' => {}
            b' ' | b',' | b';' | b'\t' | b'\r' | b'\n' => {
                if !space {
                    out.push(b' ');
                    space = true;
                }
            }
            b'/' | b'(' => {
                if space {
                    out.pop();
                }
                space = false;
                out.push(a);
            }
            _ => {
                out.push(a.to_ascii_lowercase());
                space = false;
            }
        }
    }
    true
}

fn compress_whitespace(input: &[u8], out: &mut Vec<u8>) -> bool {
    // Only a run of two or more, or a whitespace byte other than ' ', changes
    // anything.
    let first = input.iter().enumerate().position(|(k, &c)| {
        is_space(c) && (c != b' ' || input.get(k + 1).is_some_and(|&d| is_space(d)))
    });
    let Some(p) = first else {
        return false;
    };
    start(out, input, p);
    let mut in_ws = false;
    for &c in &input[p..] {
        if is_space(c) {
            if !in_ws {
                out.push(b' ');
                in_ws = true;
            }
        } else {
            in_ws = false;
            out.push(c);
        }
    }
    true
}

/// `removeWhitespace`: deletes C-locale whitespace and NBSP (0xa0).
fn remove_whitespace(input: &[u8], out: &mut Vec<u8>) -> bool {
    let ws = |c: u8| is_space(c) || c == 0xa0;
    let Some(p) = input.iter().position(|&c| ws(c)) else {
        return false;
    };
    start(out, input, p);
    out.extend(input[p..].iter().copied().filter(|&c| !ws(c)));
    true
}

fn remove_nulls(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memchr(0, input) else {
        return false;
    };
    start(out, input, p);
    out.extend(input[p..].iter().copied().filter(|&c| c != 0));
    true
}

fn replace_nulls(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memchr(0, input) else {
        return false;
    };
    start(out, input, p);
    out.extend(input[p..].iter().map(|&c| if c == 0 { b' ' } else { c }));
    true
}

/// `replaceComments`: each `/* ... */` becomes one space; an unterminated
/// comment runs to the end (and becomes one space). A lone `*/` is kept.
fn replace_comments(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memmem::find(input, b"/*") else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    let mut incomment = false;
    while i < n {
        if !incomment {
            if input[i] == b'/' && i + 1 < n && input[i + 1] == b'*' {
                incomment = true;
                i += 2;
            } else {
                out.push(input[i]);
                i += 1;
            }
        } else if input[i] == b'*' && i + 1 < n && input[i + 1] == b'/' {
            incomment = false;
            i += 2;
            out.push(b' ');
        } else {
            i += 1;
        }
    }
    if incomment {
        out.push(b' ');
    }
    true
}

/// `removeCommentsChar`: deletes the comment markers `/*`, `*/`, `<!--`,
/// `-->`, `--` and `#` (not what they enclose).
fn remove_comments_char(input: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(input.len());
    let n = input.len();
    let mut i = 0;
    while i < n {
        let rest = &input[i..];
        if rest.starts_with(b"/*") || rest.starts_with(b"*/") {
            i += 2;
        } else if rest.starts_with(b"<!--") {
            i += 4;
        } else if rest.starts_with(b"-->") {
            i += 3;
        } else if rest.starts_with(b"--") {
            i += 2;
        } else if rest[0] == b'#' {
            i += 1;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    true
}

/// `removeComments`: deletes `/* ... */` and `<!-- ... -->` with what they
/// enclose (an unterminated one becomes a space); `--` or `#` outside a
/// comment ends the value (SQL and shell line comments).
fn remove_comments(input: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(input.len());
    let n = input.len();
    let mut i = 0;
    let mut incomment = false;
    while i < n {
        let rest = &input[i..];
        if !incomment {
            if rest.starts_with(b"/*") {
                incomment = true;
                i += 2;
            } else if rest.starts_with(b"<!--") {
                incomment = true;
                i += 4;
            } else if rest.starts_with(b"--") || rest[0] == b'#' {
                break;
            } else {
                out.push(rest[0]);
                i += 1;
            }
        } else if rest.starts_with(b"*/") {
            incomment = false;
            i += 2;
        } else if rest.starts_with(b"-->") {
            incomment = false;
            i += 3;
        } else {
            i += 1;
        }
    }
    if incomment {
        out.push(b' ');
    }
    true
}

fn trim(input: &[u8], out: &mut Vec<u8>, left: bool, right: bool) -> bool {
    let mut s = 0;
    let mut e = input.len();
    if right {
        while e > 0 && is_space(input[e - 1]) {
            e -= 1;
        }
    }
    if left {
        while s < e && is_space(input[s]) {
            s += 1;
        }
    }
    if s == 0 && e == input.len() {
        return false;
    }
    out.extend_from_slice(&input[s..e]);
    true
}

// ---------------------------------------------------------------------------
// paths

/// `normalisePath` / `normalisePathWin` (ModSecurity's
/// `normalize_path_inplace`): removes `./` and `dir/../` segments and
/// repeated slashes, never above the root; the Windows form first turns
/// backslashes into slashes. A trailing slash is kept only if there was one.
fn normalise_path(input: &[u8], out: &mut Vec<u8>, win: bool) -> bool {
    if input.is_empty() {
        return false;
    }
    // Nothing to do without a dot, a slash or (Windows) a backslash... except
    // that a lone trailing-slash-free value needs no work either.
    let interesting = |c: &u8| *c == b'.' || *c == b'/' || (win && *c == b'\\');
    if !input.iter().any(interesting) {
        return false;
    }
    let buf = out;
    buf.extend_from_slice(input);
    let end = input.len() - 1;
    let is_sep = |c: u8| c == b'/' || (win && c == b'\\');
    let relative = !is_sep(buf[0]);
    let trailing = is_sep(buf[end]);
    let mut src: usize = 0;
    let mut dst: isize = 0;
    let mut hitroot = false;
    let mut done = false;

    while !done && src <= end && dst as usize <= end {
        if win {
            if buf[src] == b'\\' {
                buf[src] = b'/';
            }
            if src < end && buf[src + 1] == b'\\' {
                buf[src + 1] = b'/';
            }
        }
        // Normalise at the end of each segment (and at the end of input).
        let mut normalize = true;
        if src == end {
            done = true;
        } else if buf[src + 1] != b'/' {
            normalize = false;
        }
        let mut skip_copy = false;
        if normalize {
            if src != end && buf[src] == b'/' {
                // Empty segment: the copy below collapses the slashes.
            } else if buf[src] == b'.' {
                let d = dst as usize;
                if dst > 0 && buf[d - 1] == b'.' {
                    // Back-reference.
                    if relative && (hitroot || dst - 2 <= 0) {
                        hitroot = true;
                    } else {
                        dst -= 3;
                        while dst > 0 && buf[dst as usize] != b'/' {
                            dst -= 1;
                        }
                        if dst <= 0 {
                            hitroot = true;
                            dst = 0;
                            if !relative && src == end {
                                dst += 1;
                            }
                        }
                        if done {
                            skip_copy = true;
                        } else {
                            src += 1;
                        }
                    }
                } else if dst == 0 {
                    // Relative self-reference.
                    if done {
                        skip_copy = true;
                    } else {
                        src += 1;
                    }
                } else if buf[d - 1] == b'/' {
                    // Self-reference.
                    if done {
                        skip_copy = true;
                    } else {
                        dst -= 1;
                        src += 1;
                    }
                }
            } else if dst > 0 {
                hitroot = false;
            }
        }
        if skip_copy {
            continue;
        }
        // Copy the byte, collapsing repeated slashes.
        if buf[src] == b'/' {
            while src < end && (buf[src + 1] == b'/' || (win && buf[src + 1] == b'\\')) {
                src += 1;
            }
            if relative && dst == 0 {
                src += 1;
                continue;
            }
        }
        if src > end {
            break;
        }
        let c = buf[src];
        buf[dst as usize] = c;
        dst += 1;
        src += 1;
    }
    let mut dst = dst.max(0) as usize;
    if !trailing && dst > 0 && buf[dst - 1] == b'/' {
        dst -= 1;
    }
    buf.truncate(dst);
    true
}

// ---------------------------------------------------------------------------
// UTF-8

/// `utf8toUnicode` (ModSecurity v3): each valid multi-byte UTF-8 sequence
/// becomes `%uHHHH` (lower-case hex, at least four digits). ModSecurity's
/// quirks are kept: a lead byte whose sequence is truncated or has a bad
/// continuation byte is dropped (and decoding resumes at the next byte);
/// stray continuation bytes and 0xf8-0xff are copied; a lead byte of 0xf5-0xf7
/// is copied before its decoded form; surrogates and overlong forms are
/// followed by a copy of their lead byte.
fn utf8_to_unicode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = input.iter().position(|&c| c >= 0x80) else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    let cont = |k: usize| k < n && (input[k] & 0xc0) == 0x80;
    while i < n {
        let c = input[i];
        let mut len: usize = 0; // 0: error or single byte
        let mut d: u32 = 0;
        if c & 0x80 == 0 {
            out.push(c);
        } else if c & 0xe0 == 0xc0 {
            if cont(i + 1) {
                len = 2;
                d = ((c as u32 & 0x1f) << 6) | (input[i + 1] as u32 & 0x3f);
            }
        } else if c & 0xf0 == 0xe0 {
            if cont(i + 1) && cont(i + 2) {
                len = 3;
                d = ((c as u32 & 0x0f) << 12)
                    | ((input[i + 1] as u32 & 0x3f) << 6)
                    | (input[i + 2] as u32 & 0x3f);
            }
        } else if c & 0xf8 == 0xf0 {
            if c >= 0xf5 {
                out.push(c);
            }
            if cont(i + 1) && cont(i + 2) && cont(i + 3) {
                len = 4;
                d = ((c as u32 & 0x07) << 18)
                    | ((input[i + 1] as u32 & 0x3f) << 12)
                    | ((input[i + 2] as u32 & 0x3f) << 6)
                    | (input[i + 3] as u32 & 0x3f);
            }
        } else {
            out.push(c);
        }
        if len > 0 {
            out.extend_from_slice(b"%u");
            let digits = if d > 0xfffff {
                6
            } else if d > 0xffff {
                5
            } else {
                4
            };
            for k in (0..digits).rev() {
                out.push(HEX_LOWER[((d >> (4 * k)) & 15) as usize]);
            }
            let surrogate = (0xd800..=0xdfff).contains(&d);
            let overlong =
                (len == 4 && d < 0x10000) || (len == 3 && d < 0x800) || (len == 2 && d < 0x80);
            if surrogate {
                out.push(c);
            }
            if overlong {
                out.push(c);
            }
            i += len;
        } else {
            i += 1;
        }
    }
    true
}

// ---------------------------------------------------------------------------
// base64, hex

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// `base64Decode`: strict RFC 4648 decoding as ModSecurity does it (with
/// mbedtls): the value ends at its first NUL; spaces at line ends and line
/// breaks are skipped; any other invalid character, or more than two `=`, or
/// data after `=`, makes the result empty. A final partial quantum is dropped.
fn base64_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let src = match memchr::memchr(0, input) {
        Some(z) => &input[..z],
        None => input,
    };
    // First pass: validate (mbedtls_base64_decode).
    let slen = src.len();
    let mut i = 0;
    let mut eq = 0;
    let mut n = 0usize;
    while i < slen {
        let mut spaces = 0;
        while i < slen && src[i] == b' ' {
            i += 1;
            spaces += 1;
        }
        if i == slen {
            break;
        }
        if slen - i >= 2 && src[i] == b'\r' && src[i + 1] == b'\n' {
            i += 1;
            continue;
        }
        if src[i] == b'\n' {
            i += 1;
            continue;
        }
        if spaces != 0 {
            return true; // invalid: empty result
        }
        if src[i] == b'=' {
            eq += 1;
            if eq > 2 {
                return true;
            }
        } else if b64_value(src[i]).is_none() || eq != 0 {
            return true;
        }
        n += 1;
        i += 1;
    }
    if n == 0 {
        return true;
    }
    out.reserve(n * 3 / 4);
    let mut j = 3i32;
    let mut cnt = 0;
    let mut x: u32 = 0;
    for &c in src {
        if c == b'\r' || c == b'\n' || c == b' ' {
            continue;
        }
        let v = if c == b'=' {
            j -= 1;
            0
        } else {
            b64_value(c).unwrap_or(0) as u32
        };
        x = (x << 6) | v;
        cnt += 1;
        if cnt == 4 {
            cnt = 0;
            if j > 0 {
                out.push((x >> 16) as u8);
            }
            if j > 1 {
                out.push((x >> 8) as u8);
            }
            if j > 2 {
                out.push(x as u8);
            }
        }
    }
    true
}

/// `base64DecodeExt` (ModSecurity's forgiving decoder): also accepts the
/// URL-safe alphabet (`-`, `_`), skips characters outside the alphabet, and
/// yields nothing when a `=` appears one character into a quantum and is not
/// followed by another `=`.
fn base64_decode_ext(input: &[u8], out: &mut Vec<u8>) -> bool {
    let val = |c: u8| -> Option<u8> {
        match c {
            b'-' => Some(62),
            b'_' => Some(63),
            _ => b64_value(c),
        }
    };
    out.reserve(input.len() * 3 / 4 + 1);
    let mut i = 0usize; // decoded sextets
    let mut cur: u8 = 0;
    for (k, &c) in input.iter().enumerate() {
        if c == b'=' {
            if at(input, k + 1) != b'=' && i % 4 == 1 {
                out.clear();
                return true;
            }
            continue;
        }
        let Some(v) = val(c) else {
            continue;
        };
        match i % 4 {
            0 => cur = v << 2,
            1 => {
                out.push(cur | (v >> 4));
                cur = (v & 0x0f) << 4;
            }
            2 => {
                out.push(cur | (v >> 2));
                cur = (v & 0x03) << 6;
            }
            _ => out.push(cur | v),
        }
        i += 1;
    }
    true
}

fn base64_encode(input: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let x = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        out.push(B64[(x >> 18) as usize & 63]);
        out.push(B64[(x >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 {
            B64[(x >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if chunk.len() > 2 {
            B64[x as usize & 63]
        } else {
            b'='
        });
    }
    true
}

/// `hexDecode`: every pair of characters through `x2c` (not validated, as in
/// ModSecurity); an odd last character is dropped.
fn hex_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(input.len() / 2);
    for pair in input.chunks_exact(2) {
        out.push(x2c(pair[0], pair[1]));
    }
    true
}

fn hex_encode(input: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(input.len() * 2);
    for &c in input {
        out.push(HEX_LOWER[(c >> 4) as usize]);
        out.push(HEX_LOWER[(c & 15) as usize]);
    }
    true
}

/// `sqlHexDecode`: `0xHHHH...` (at least one pair of hex digits) becomes the
/// bytes it spells; everything else is copied.
fn sql_hex_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let n = input.len();
    let mut i = 0;
    out.reserve(n);
    while i < n {
        if input[i] == b'0'
            && i + 3 < n
            && (input[i + 1] | 0x20) == b'x'
            && is_hex(input[i + 2])
            && is_hex(input[i + 3])
        {
            i += 2;
            while i + 1 < n && is_hex(input[i]) && is_hex(input[i + 1]) {
                out.push(x2c(input[i], input[i + 1]));
                i += 2;
            }
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    true
}

// ---------------------------------------------------------------------------
// escape sequences, parity

/// `escapeSeqDecode`: ANSI C escapes `\a \b \f \n \r \t \v \\ \? \' \"`,
/// `\xHH` and `\O` to `\OOO` (the low byte kept); an unrecognised escape
/// yields the character after the backslash.
fn escape_seq_decode(input: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(p) = memchr::memchr(b'\\', input) else {
        return false;
    };
    start(out, input, p);
    let n = input.len();
    let mut i = p;
    while i < n {
        if input[i] == b'\\' && i + 1 < n {
            let simple = match input[i + 1] {
                b'a' => Some(0x07),
                b'b' => Some(0x08),
                b'f' => Some(0x0c),
                b'n' => Some(b'\n'),
                b'r' => Some(b'\r'),
                b't' => Some(b'\t'),
                b'v' => Some(0x0b),
                b'\\' => Some(b'\\'),
                b'?' => Some(b'?'),
                b'\'' => Some(b'\''),
                b'"' => Some(b'"'),
                _ => None,
            };
            if let Some(c) = simple {
                out.push(c);
                i += 2;
                continue;
            }
            if input[i + 1] == b'x' || input[i + 1] == b'X' {
                if i + 3 < n && is_hex(input[i + 2]) && is_hex(input[i + 3]) {
                    out.push(x2c(input[i + 2], input[i + 3]));
                    i += 4;
                    continue;
                }
            } else if is_odigit(input[i + 1]) {
                let mut j = 0usize;
                while i + 1 + j < n && j < 3 {
                    j += 1;
                    if !is_odigit(at(input, i + 1 + j)) {
                        break;
                    }
                }
                // strtol of up to three octal digits (at most 0777): the low
                // byte is kept.
                let mut v: u32 = 0;
                for &d in &input[i + 1..i + 1 + j] {
                    v = v * 8 + (d - b'0') as u32;
                }
                out.push(v as u8);
                i += 1 + j;
                continue;
            }
            // Unrecognised: the character after the backslash.
            out.push(input[i + 1]);
            i += 2;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    true
}

#[derive(Clone, Copy)]
enum Parity {
    Even,
    Odd,
    Zero,
}

/// `parityEven7bit` / `parityOdd7bit` / `parityZero7bit`, computed as
/// ModSecurity does (the parity of all eight bits decides bit 7).
fn parity(input: &[u8], out: &mut Vec<u8>, kind: Parity) -> bool {
    out.reserve(input.len());
    for &x in input {
        let v = match kind {
            Parity::Zero => x & 0x7f,
            _ => {
                let f = (x ^ (x >> 4)) & 0xf;
                let odd = (0x6996u16 >> f) & 1 == 1;
                match (kind, odd) {
                    (Parity::Even, true) | (Parity::Odd, false) => x | 0x80,
                    _ => x & 0x7f,
                }
            }
        };
        out.push(v);
    }
    true
}
