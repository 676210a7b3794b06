//! libinjection's XSS detector (libinjection_xss.c), written anew in Rust:
//! the input is tokenized as HTML5 from five starting states, and it is
//! XSS if any of them shows a doctype, a blacklisted tag (script, iframe,
//! svg*, xsl*, ...), an event-handler or other blacklisted attribute, a URL
//! attribute whose value starts (after HTML entity decoding) with
//! javascript:, vbscript:, data: or view-source:, a style attribute, or a
//! comment that IE would run (conditional, `<?import`, "`" inside).

use super::html5::{Flags, TokenType, Tokenizer};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Attr {
    None,
    /// Always XSS.
    Black,
    /// The value is a URL.
    Url,
    Style,
    /// The value names an attribute (SVG's attributeName).
    Indirect,
}

const BLACKATTR: &[(&[u8], Attr)] = &[
    (b"ACTION", Attr::Url),
    (b"ATTRIBUTENAME", Attr::Indirect),
    (b"BY", Attr::Url),
    (b"BACKGROUND", Attr::Url),
    (b"DATAFORMATAS", Attr::Black),
    (b"DATASRC", Attr::Black),
    (b"DYNSRC", Attr::Url),
    (b"FILTER", Attr::Style),
    (b"FORMACTION", Attr::Url),
    (b"FOLDER", Attr::Url),
    (b"FROM", Attr::Url),
    (b"HANDLER", Attr::Url),
    (b"HREF", Attr::Url),
    (b"LOWSRC", Attr::Url),
    (b"POSTER", Attr::Url),
    (b"SRC", Attr::Url),
    (b"STYLE", Attr::Style),
    (b"TO", Attr::Url),
    (b"VALUES", Attr::Url),
    (b"XLINK:HREF", Attr::Url),
];

const BLACKTAG: &[&[u8]] = &[
    b"APPLET",
    b"BASE",
    b"COMMENT",
    b"EMBED",
    b"FRAME",
    b"FRAMESET",
    b"HANDLER",
    b"IFRAME",
    b"IMPORT",
    b"ISINDEX",
    b"LINK",
    b"LISTENER",
    b"META",
    b"NOSCRIPT",
    b"OBJECT",
    b"SCRIPT",
    b"STYLE",
    b"VMLFRAME",
    b"XML",
    b"XSS",
];

const BLACK_ON_ATTR: &[&[u8]] = &[
    b"ONSTART",
    b"ONERROR",
    b"ONCLICK",
    b"ONMOUSEDOWN",
    b"ONMOUSEENTER",
    b"ONMOUSELEAVE",
    b"ONMOUSEMOVE",
    b"ONMOUSEOUT",
    b"ONMOUSEOVER",
    b"ONMOUSEUP",
    b"ONMOUSEWHEEL",
    b"ONPROPERTYCHANGE",
    b"ONFORMCHANGE",
    b"ONFORMINPUT",
    b"ONABORT",
    b"ONREADYSTATECHANGE",
    b"ONACTIVATE",
    b"ONBEFOREACTIVATE",
    b"ONAFTERPRINT",
    b"ONBEFOREPRINT",
    b"ONBEFOREUNLOAD",
    b"ONBLUR",
    b"ONCANPLAY",
    b"ONCANPLAYTHROUGH",
    b"ONCHANGE",
    b"ONCONTEXTMENU",
    b"ONCOPY",
    b"ONCUT",
    b"ONDBLCLICK",
    b"ONDRAG",
    b"ONDRAGEND",
    b"ONDRAGENTER",
    b"ONDRAGLEAVE",
    b"ONDRAGOVER",
    b"ONDRAGSTART",
    b"ONDROP",
    b"ONDURATIONCHANGE",
    b"ONEMPTIED",
    b"ONENDED",
    b"ONFOCUS",
    b"ONFOCUSIN",
    b"ONFOCUSOUT",
    b"ONHASHCHANGE",
    b"ONINPUT",
    b"ONINVALID",
    b"ONKEYDOWN",
    b"ONKEYPRESS",
    b"ONKEYUP",
    b"ONLOAD",
    b"ONLOADEDDATA",
    b"ONLOADEDMETADATA",
    b"ONLOADSTART",
    b"ONMESSAGE",
    b"ONOFFLINE",
    b"ONONLINE",
    b"ONOPEN",
    b"ONPAGEHIDE",
    b"ONPAGESHOW",
    b"ONPASTE",
    b"ONPAUSE",
    b"ONPLAY",
    b"ONPLAYING",
    b"ONPOPSTATE",
    b"ONPROGRESS",
    b"ONRATECHANGE",
    b"ONRESET",
    b"ONRESIZE",
    b"ONSCROLL",
    b"ONSEARCH",
    b"ONSEEKED",
    b"ONSEEKING",
    b"ONSELECT",
    b"ONSHOW",
    b"ONSTALLED",
    b"ONSTORAGE",
    b"ONSUBMIT",
    b"ONSUSPEND",
    b"ONTIMEUPDATE",
    b"ONTOGGLE",
    b"ONTOUCHCANCEL",
    b"ONTOUCHEND",
    b"ONTOUCHMOVE",
    b"ONTOUCHSTART",
    b"ONUNLOAD",
    b"ONVOLUMECHANGE",
    b"ONWAITING",
    b"ONWHEEL",
];

/// `cstrcasecmp_with_null(upper, s, n) == 0`: `s` with its NULs dropped and
/// ASCII letters upper-cased equals `upper`.
fn eq_ignoring_nuls(upper: &[u8], s: &[u8]) -> bool {
    let mut a = upper.iter();
    for &c in s {
        if c == 0 {
            continue;
        }
        match a.next() {
            Some(&x) if x == c.to_ascii_uppercase() => {}
            _ => return false,
        }
    }
    a.next().is_none()
}

fn hex_value(c: u8) -> Option<u32> {
    match c {
        b'0'..=b'9' => Some(u32::from(c - b'0')),
        b'a'..=b'f' => Some(u32::from(c - b'a' + 10)),
        b'A'..=b'F' => Some(u32::from(c - b'A' + 10)),
        _ => None,
    }
}

/// `html_decode_char_at`: the character at the start of `src` with a
/// numeric entity (&#nn; &#xhh;) decoded; named entities are left alone.
/// Returns the character and the bytes it took. Bytes past `src` read as
/// NUL (in the C code they are the delimiter that ended the token).
fn html_decode_char_at(src: &[u8]) -> (i64, usize) {
    let len = src.len();
    if len == 0 {
        return (-1, 0);
    }
    let at = |i: usize| src.get(i).copied().unwrap_or(0);
    if src[0] != b'&' || len < 2 {
        return (i64::from(src[0]), 1);
    }
    if src[1] != b'#' {
        return (i64::from(b'&'), 1);
    }
    if at(2) == b'x' || at(2) == b'X' {
        let Some(first) = hex_value(at(3)) else {
            return (i64::from(b'&'), 1);
        };
        let mut val = i64::from(first);
        let mut i = 4;
        while i < len {
            let ch = src[i];
            if ch == b';' {
                return (val, i + 1);
            }
            let Some(d) = hex_value(ch) else {
                return (val, i);
            };
            val = val * 16 + i64::from(d);
            if val > 0x1000FF {
                return (i64::from(b'&'), 1);
            }
            i += 1;
        }
        (val, i)
    } else {
        let ch = at(2);
        if !ch.is_ascii_digit() {
            return (i64::from(b'&'), 1);
        }
        let mut val = i64::from(ch - b'0');
        let mut i = 3;
        while i < len {
            let ch = src[i];
            if ch == b';' {
                return (val, i + 1);
            }
            if !ch.is_ascii_digit() {
                return (val, i);
            }
            val = val * 10 + i64::from(ch - b'0');
            if val > 0x1000FF {
                return (i64::from(b'&'), 1);
            }
            i += 1;
        }
        (val, i)
    }
}

/// `htmlencode_startswith`: does the HTML-encoded `src` start with the
/// upper-case `prefix`, case-insensitively, ignoring leading whitespace
/// and control characters, NULs and newlines?
fn htmlencode_startswith(prefix: &[u8], src: &[u8]) -> bool {
    let mut a = 0;
    let mut b = src;
    let mut first = true;
    while !b.is_empty() {
        if a == prefix.len() {
            return true;
        }
        let (cb, consumed) = html_decode_char_at(b);
        b = &b[consumed.min(b.len())..];
        if first && cb <= 32 {
            continue;
        }
        first = false;
        if cb == 0 || cb == 10 {
            continue;
        }
        let mut cb = cb;
        if (i64::from(b'a')..=i64::from(b'z')).contains(&cb) {
            cb -= 0x20;
        }
        // The C code compares as a `char`: the low byte.
        if prefix[a] != (cb & 0xff) as u8 {
            return false;
        }
        a += 1;
    }
    a == prefix.len()
}

fn is_black_tag(s: &[u8]) -> bool {
    if s.len() < 3 {
        return false;
    }
    if BLACKTAG.iter().any(|t| eq_ignoring_nuls(t, s)) {
        return true;
    }
    // Anything SVG or XSL(T).
    s[..3].eq_ignore_ascii_case(b"svg") || s[..3].eq_ignore_ascii_case(b"xsl")
}

fn is_black_attr(s: &[u8]) -> Attr {
    if s.len() < 2 {
        return Attr::None;
    }
    if s[..2].eq_ignore_ascii_case(b"on") {
        // The C code compares the first strlen(name) bytes: a prefix match
        // (bytes past the token are its delimiter, which never matches).
        for name in BLACK_ON_ATTR {
            if s.len() >= name.len() && eq_ignoring_nuls(name, &s[..name.len()]) {
                return Attr::Black;
            }
        }
    }
    if s.len() >= 5 && (eq_ignoring_nuls(b"XMLNS", &s[..5]) || eq_ignoring_nuls(b"XLINK", &s[..5]))
    {
        return Attr::Black;
    }
    for (name, ty) in BLACKATTR {
        if eq_ignoring_nuls(name, s) {
            return *ty;
        }
    }
    Attr::None
}

fn is_black_url(s: &[u8]) -> bool {
    // Skip whitespace, control and high-bit bytes.
    let skip = s.iter().take_while(|&&c| c <= 32 || c >= 127).count();
    let s = &s[skip..];
    htmlencode_startswith(b"DATA", s)
        || htmlencode_startswith(b"VIEW-SOURCE", s)
        || htmlencode_startswith(b"JAVA", s)
        || htmlencode_startswith(b"VBSCRIPT", s)
}

/// `libinjection_is_xss`: XSS when tokenized from the given state?
pub fn is_xss_with(s: &[u8], flags: Flags) -> bool {
    let mut h5 = Tokenizer::new(s, flags);
    let mut attr = Attr::None;
    while h5.next_token() {
        let tok = h5.token();
        if h5.token_type != TokenType::AttrValue {
            attr = Attr::None;
        }
        match h5.token_type {
            TokenType::Doctype => return true,
            TokenType::TagNameOpen if is_black_tag(tok) => return true,
            TokenType::AttrName => attr = is_black_attr(tok),
            TokenType::AttrValue => {
                match attr {
                    Attr::None => {}
                    Attr::Black | Attr::Style => return true,
                    Attr::Url => {
                        if is_black_url(tok) {
                            return true;
                        }
                    }
                    Attr::Indirect => {
                        if is_black_attr(tok) != Attr::None {
                            return true;
                        }
                    }
                }
                attr = Attr::None;
            }
            TokenType::TagComment => {
                // IE takes "`" as a tag end.
                if memchr::memchr(b'`', tok).is_some() {
                    return true;
                }
                if tok.len() > 3 {
                    if tok[0] == b'[' && tok[1..3].eq_ignore_ascii_case(b"if") {
                        return true;
                    }
                    if tok[..3].eq_ignore_ascii_case(b"xml") {
                        return true;
                    }
                }
                if tok.len() > 5
                    && (eq_ignoring_nuls(b"IMPORT", &tok[..6])
                        || eq_ignoring_nuls(b"ENTITY", &tok[..6]))
                {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// `libinjection_xss`: any of the five starting states.
pub fn is_xss(s: &[u8]) -> bool {
    [
        Flags::DataState,
        Flags::ValueNoQuote,
        Flags::ValueSingleQuote,
        Flags::ValueDoubleQuote,
        Flags::ValueBackQuote,
    ]
    .into_iter()
    .any(|f| is_xss_with(s, f))
}
