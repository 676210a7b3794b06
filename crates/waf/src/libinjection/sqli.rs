//! libinjection's SQLi detector (libinjection_sqli.c, version 3.9.2, the
//! one ModSecurity 3 bundles), written anew in Rust: a tokenizer for a
//! union of SQL dialects, a folder that reduces the token stream to at most
//! five tokens, and a fingerprint (the string of token types) looked up in
//! libinjection's table of SQLi fingerprints, then filtered by its
//! false-positive rules. The input is tried as-is, as if inside a single
//! quoted string and as if inside a double quoted string, in ANSI and
//! MySQL comment modes, as `libinjection_is_sqli` does.
//!
//! Quirks of the C code are kept where they change results (NUL bytes
//! accepted by its `strspn`-like scans, signed `char` comparisons, token
//! values truncated to 31 bytes, the money-string search window), so the
//! fingerprints match ModSecurity's byte for byte. Memory: one state on the
//! stack with eight fixed-size tokens; no allocation; no recursion; each
//! pass is linear in the input.

// The folding rules mirror the C code's branches one for one, some with the
// same body.
#![allow(clippy::if_same_then_else)]

use super::data;

pub const TOKEN_SIZE: usize = 32;
pub const MAX_TOKENS: usize = 5;

pub const FLAG_QUOTE_NONE: u32 = 1;
pub const FLAG_QUOTE_SINGLE: u32 = 2;
pub const FLAG_QUOTE_DOUBLE: u32 = 4;
pub const FLAG_SQL_ANSI: u32 = 8;
pub const FLAG_SQL_MYSQL: u32 = 16;

const CHAR_SINGLE: u8 = b'\'';
const CHAR_DOUBLE: u8 = b'"';
const CHAR_TICK: u8 = b'`';

pub const TYPE_NONE: u8 = 0;
pub const TYPE_KEYWORD: u8 = b'k';
pub const TYPE_UNION: u8 = b'U';
pub const TYPE_GROUP: u8 = b'B';
pub const TYPE_EXPRESSION: u8 = b'E';
pub const TYPE_SQLTYPE: u8 = b't';
pub const TYPE_FUNCTION: u8 = b'f';
pub const TYPE_BAREWORD: u8 = b'n';
pub const TYPE_NUMBER: u8 = b'1';
pub const TYPE_VARIABLE: u8 = b'v';
pub const TYPE_STRING: u8 = b's';
pub const TYPE_OPERATOR: u8 = b'o';
pub const TYPE_LOGIC_OPERATOR: u8 = b'&';
pub const TYPE_COMMENT: u8 = b'c';
pub const TYPE_COLLATE: u8 = b'A';
pub const TYPE_LEFTPARENS: u8 = b'(';
pub const TYPE_RIGHTPARENS: u8 = b')';
pub const TYPE_LEFTBRACE: u8 = b'{';
pub const TYPE_RIGHTBRACE: u8 = b'}';
pub const TYPE_DOT: u8 = b'.';
pub const TYPE_COMMA: u8 = b',';
pub const TYPE_COLON: u8 = b':';
pub const TYPE_SEMICOLON: u8 = b';';
pub const TYPE_TSQL: u8 = b'T';
pub const TYPE_UNKNOWN: u8 = b'?';
pub const TYPE_EVIL: u8 = b'X';
pub const TYPE_BACKSLASH: u8 = b'\\';

/// One token: where it is in the input, its type, and its value (at most
/// 31 bytes, NUL-terminated as in C).
#[derive(Clone, Copy, Debug)]
pub struct Token {
    pub pos: usize,
    pub len: usize,
    /// For variables: the number of leading '@'.
    pub count: i32,
    pub ttype: u8,
    pub str_open: u8,
    pub str_close: u8,
    pub val: [u8; TOKEN_SIZE],
}

impl Default for Token {
    fn default() -> Self {
        Token {
            pos: 0,
            len: 0,
            count: 0,
            ttype: 0,
            str_open: 0,
            str_close: 0,
            val: [0; TOKEN_SIZE],
        }
    }
}

impl Token {
    /// The value as C sees it: up to its first NUL.
    pub fn cstr(&self) -> &[u8] {
        let v = &self.val[..self.len.min(TOKEN_SIZE)];
        match memchr::memchr(0, v) {
            Some(i) => &v[..i],
            None => v,
        }
    }

    fn value(&self) -> &[u8] {
        &self.val[..self.len]
    }

    fn assign_char(&mut self, ttype: u8, pos: usize, value: u8) {
        self.ttype = ttype;
        self.pos = pos;
        self.len = 1;
        self.val[0] = value;
        self.val[1] = 0;
    }

    fn assign(&mut self, ttype: u8, pos: usize, value: &[u8]) {
        let last = value.len().min(TOKEN_SIZE - 1);
        self.ttype = ttype;
        self.pos = pos;
        self.len = last;
        self.val[..last].copy_from_slice(&value[..last]);
        self.val[last] = 0;
    }

    fn is_arithmetic_op(&self) -> bool {
        let ch = self.val[0];
        self.ttype == TYPE_OPERATOR
            && self.len == 1
            && matches!(ch, b'*' | b'/' | b'-' | b'+' | b'%')
    }

    fn is_unary_op(&self) -> bool {
        if self.ttype != TYPE_OPERATOR {
            return false;
        }
        match self.len {
            1 => matches!(self.val[0], b'+' | b'-' | b'!' | b'~'),
            2 => self.val[0] == b'!' && self.val[1] == b'!',
            3 => ci_eq(b"NOT", self.value()),
            _ => false,
        }
    }
}

/// libinjection's `cstrcasecmp(upper, s, len) == 0`: `s` (ASCII letters
/// upper-cased) equals the upper-case literal.
fn ci_eq(upper: &[u8], s: &[u8]) -> bool {
    upper.len() == s.len()
        && upper
            .iter()
            .zip(s)
            .all(|(&a, &b)| a == b.to_ascii_uppercase())
}

/// `strlenspn`: the length of the prefix made of bytes in `accept`. Like the
/// C code (`strchr` finds a string's terminator), NUL is always accepted.
fn spn(s: &[u8], accept: &[u8]) -> usize {
    s.iter()
        .position(|&c| c != 0 && !accept.contains(&c))
        .unwrap_or(s.len())
}

/// `strlencspn`: the length of the prefix free of bytes in `reject`; NUL
/// always stops it.
fn cspn(s: &[u8], reject: &[u8]) -> usize {
    s.iter()
        .position(|&c| c == 0 || reject.contains(&c))
        .unwrap_or(s.len())
}

/// The bytes that end a word (`parse_word`'s `strlencspn` set, and NUL),
/// as a table: every word of every value is measured with it.
const WORD_END: [bool; 256] = {
    let set = b" []{}<>:\\?=@!#~+-*/&|^%(),';\t\n\x0b\x0c\r\"\xa0\0";
    let mut t = [false; 256];
    let mut i = 0;
    while i < set.len() {
        t[set[i] as usize] = true;
        i += 1;
    }
    t
};

fn char_is_white(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0xa0 | 0)
}

/// Index of the first "c0 c1" pair in `s[from..]` (`memchr2` in the C code).
fn find2(s: &[u8], from: usize, c0: u8, c1: u8) -> Option<usize> {
    if from >= s.len() {
        return None;
    }
    let mut i = from;
    while i + 1 < s.len() {
        match memchr::memchr(c0, &s[i..s.len() - 1]) {
            None => return None,
            Some(off) => {
                let j = i + off;
                if s[j + 1] == c1 {
                    return Some(j);
                }
                i = j + 1;
            }
        }
    }
    None
}

fn find_byte(s: &[u8], from: usize, c: u8) -> Option<usize> {
    if from >= s.len() {
        return None;
    }
    memchr::memchr(c, &s[from..]).map(|i| i + from)
}

fn flag2delim(flags: u32) -> u8 {
    if flags & FLAG_QUOTE_SINGLE != 0 {
        CHAR_SINGLE
    } else if flags & FLAG_QUOTE_DOUBLE != 0 {
        CHAR_DOUBLE
    } else {
        0
    }
}

/// What parses a token starting with a given byte (`char_parse_map`).
#[derive(Clone, Copy)]
enum Parser {
    White,
    Operator1,
    Operator2,
    Other,
    Char,
    Hash,
    Dash,
    Slash,
    Backslash,
    String,
    Money,
    Number,
    Var,
    Word,
    Tick,
    BString,
    XString,
    EString,
    NqString,
    QString,
    UString,
    BWord,
}

fn parser_for(ch: u8) -> Parser {
    use Parser::*;
    match ch {
        0..=32 | 127 | 160 => White,
        b'!' | b'&' | b'*' | b':' | b'<' | b'=' | b'>' | b'|' => Operator2,
        b'"' | b'\'' => String,
        b'#' => Hash,
        b'$' => Money,
        b'%' | b'+' | b'^' | b'~' => Operator1,
        b'(' | b')' | b',' | b';' | b'{' | b'}' => Char,
        b'-' => Dash,
        b'.' | b'0'..=b'9' => Number,
        b'/' => Slash,
        b'?' | b']' => Other,
        b'@' => Var,
        b'B' | b'b' => BString,
        b'E' | b'e' => EString,
        b'N' | b'n' => NqString,
        b'Q' | b'q' => QString,
        b'U' | b'u' => UString,
        b'X' | b'x' => XString,
        b'[' => BWord,
        b'\\' => Backslash,
        b'`' => Tick,
        _ => Word,
    }
}

/// The tokenizer and folder state (`struct libinjection_sqli_state`).
pub struct State<'a> {
    pub s: &'a [u8],
    pub flags: u32,
    pub pos: usize,
    pub tokenvec: [Token; 8],
    /// Index in `tokenvec` of the token being filled.
    pub current: usize,
    pub fingerprint: [u8; 8],
    pub stats_comment_ddw: u32,
    pub stats_comment_ddx: u32,
    pub stats_comment_c: u32,
    pub stats_comment_hash: u32,
    pub stats_folds: u32,
    pub stats_tokens: u32,
}

impl<'a> State<'a> {
    pub fn new(s: &'a [u8], flags: u32) -> Self {
        let flags = if flags == 0 {
            FLAG_QUOTE_NONE | FLAG_SQL_ANSI
        } else {
            flags
        };
        State {
            s,
            flags,
            pos: 0,
            tokenvec: [Token::default(); 8],
            current: 0,
            fingerprint: [0; 8],
            stats_comment_ddw: 0,
            stats_comment_ddx: 0,
            stats_comment_c: 0,
            stats_comment_hash: 0,
            stats_folds: 0,
            stats_tokens: 0,
        }
    }

    fn reset(&mut self, flags: u32) {
        *self = State::new(self.s, flags);
    }

    fn cur(&mut self) -> &mut Token {
        &mut self.tokenvec[self.current]
    }

    /// The fingerprint as a byte string (up to its NUL).
    pub fn fingerprint_bytes(&self) -> &[u8] {
        let n = self.fingerprint.iter().position(|&c| c == 0).unwrap_or(8);
        &self.fingerprint[..n]
    }

    // ---- parsers: each returns the position after what it consumed ----

    fn parse_operator1(&mut self) -> usize {
        let pos = self.pos;
        let ch = self.s[pos];
        self.cur().assign_char(TYPE_OPERATOR, pos, ch);
        pos + 1
    }

    fn parse_other(&mut self) -> usize {
        let pos = self.pos;
        let ch = self.s[pos];
        self.cur().assign_char(TYPE_UNKNOWN, pos, ch);
        pos + 1
    }

    fn parse_char(&mut self) -> usize {
        let pos = self.pos;
        let ch = self.s[pos];
        self.cur().assign_char(ch, pos, ch);
        pos + 1
    }

    fn parse_eol_comment(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        match find_byte(s, pos, b'\n') {
            None => {
                self.cur().assign(TYPE_COMMENT, pos, &s[pos..]);
                s.len()
            }
            Some(end) => {
                self.cur().assign(TYPE_COMMENT, pos, &s[pos..end]);
                end + 1
            }
        }
    }

    fn parse_hash(&mut self) -> usize {
        self.stats_comment_hash += 1;
        if self.flags & FLAG_SQL_MYSQL != 0 {
            self.stats_comment_hash += 1;
            self.parse_eol_comment()
        } else {
            let pos = self.pos;
            self.cur().assign_char(TYPE_OPERATOR, pos, b'#');
            pos + 1
        }
    }

    fn parse_dash(&mut self) -> usize {
        let s = self.s;
        let slen = s.len();
        let pos = self.pos;
        if pos + 2 < slen && s[pos + 1] == b'-' && char_is_white(s[pos + 2]) {
            self.parse_eol_comment()
        } else if pos + 2 == slen && s[pos + 1] == b'-' {
            self.parse_eol_comment()
        } else if pos + 1 < slen && s[pos + 1] == b'-' && self.flags & FLAG_SQL_ANSI != 0 {
            self.stats_comment_ddx += 1;
            self.parse_eol_comment()
        } else {
            self.cur().assign_char(TYPE_OPERATOR, pos, b'-');
            pos + 1
        }
    }

    fn parse_slash(&mut self) -> usize {
        let s = self.s;
        let slen = s.len();
        let pos = self.pos;
        if pos + 1 == slen || s[pos + 1] != b'*' {
            return self.parse_operator1();
        }
        let end = find2(s, pos + 2, b'*', b'/');
        let clen = match end {
            None => slen - pos,
            Some(p) => p + 2 - pos,
        };
        let mut ctype = TYPE_COMMENT;
        // A "/*" inside the comment (PostgreSQL nests them) makes it
        // unparsable. As in the C code, the check only runs on a closed
        // comment, over the pairs that start before its "*/".
        if let Some(p) = end {
            if p > pos + 2 && find2(&s[..p + 1], pos + 2, b'/', b'*').is_some() {
                ctype = TYPE_EVIL;
            }
        }
        if ctype != TYPE_EVIL && pos + 2 < slen && s[pos + 2] == b'!' {
            // MySQL's "/*!" conditional comments.
            ctype = TYPE_EVIL;
        }
        self.cur().assign(ctype, pos, &s[pos..pos + clen]);
        pos + clen
    }

    fn parse_backslash(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        if pos + 1 < s.len() && s[pos + 1] == b'N' {
            self.cur().assign(TYPE_NUMBER, pos, &s[pos..pos + 2]);
            pos + 2
        } else {
            self.cur().assign_char(TYPE_BACKSLASH, pos, s[pos]);
            pos + 1
        }
    }

    fn parse_operator2(&mut self) -> usize {
        let s = self.s;
        let slen = s.len();
        let pos = self.pos;
        if pos + 1 >= slen {
            return self.parse_operator1();
        }
        if pos + 2 < slen && &s[pos..pos + 3] == b"<=>" {
            self.cur().assign(TYPE_OPERATOR, pos, &s[pos..pos + 3]);
            return pos + 3;
        }
        let ch = data::lookup_word(&s[pos..pos + 2]);
        if ch != 0 {
            self.cur().assign(ch, pos, &s[pos..pos + 2]);
            return pos + 2;
        }
        if s[pos] == b':' {
            self.cur().assign(TYPE_COLON, pos, &s[pos..pos + 1]);
            pos + 1
        } else {
            self.parse_operator1()
        }
    }

    /// A quoted string from `pos + offset` (offset 0: the opening quote is
    /// only assumed) up to an unescaped `delim`.
    fn parse_string_core(&mut self, pos: usize, delim: u8, offset: usize) -> usize {
        let s = self.s;
        let len = s.len();
        let start = pos + offset;
        let mut qpos = find_byte(s, start, delim);
        let tok = &mut self.tokenvec[self.current];
        tok.str_open = if offset > 0 { delim } else { 0 };
        loop {
            match qpos {
                None => {
                    tok.assign(TYPE_STRING, start, &s[start.min(len)..]);
                    tok.str_close = 0;
                    return len;
                }
                Some(q) => {
                    // Backslashes right before the quote, within the string.
                    let backslashes = s[start..q]
                        .iter()
                        .rev()
                        .take_while(|&&c| c == b'\\')
                        .count();
                    if backslashes & 1 == 1 {
                        qpos = find_byte(s, q + 1, delim);
                    } else if q + 1 < len && s[q + 1] == s[q] {
                        qpos = find_byte(s, q + 2, delim);
                    } else {
                        tok.assign(TYPE_STRING, start, &s[start..q]);
                        tok.str_close = delim;
                        return q + 1;
                    }
                }
            }
        }
    }

    fn parse_string(&mut self) -> usize {
        let pos = self.pos;
        let delim = self.s[pos];
        self.parse_string_core(pos, delim, 1)
    }

    fn parse_estring(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        if pos + 2 >= s.len() || s[pos + 1] != CHAR_SINGLE {
            return self.parse_word();
        }
        self.parse_string_core(pos, CHAR_SINGLE, 2)
    }

    fn parse_ustring(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        if pos + 2 < s.len() && s[pos + 1] == b'&' && s[pos + 2] == b'\'' {
            self.pos += 2;
            let npos = self.parse_string();
            let tok = self.cur();
            tok.str_open = b'u';
            if tok.str_close == b'\'' {
                tok.str_close = b'u';
            }
            npos
        } else {
            self.parse_word()
        }
    }

    fn parse_qstring_core(&mut self, offset: usize) -> usize {
        let s = self.s;
        let slen = s.len();
        let pos = self.pos + offset;
        if pos >= slen
            || (s[pos] != b'q' && s[pos] != b'Q')
            || pos + 2 >= slen
            || s[pos + 1] != b'\''
        {
            return self.parse_word();
        }
        let mut ch = s[pos + 2];
        // A signed char in C: bytes >= 0x80 are negative, so below 33 too.
        if !(33..=127).contains(&ch) {
            return self.parse_word();
        }
        ch = match ch {
            b'(' => b')',
            b'[' => b']',
            b'{' => b'}',
            b'<' => b'>',
            c => c,
        };
        match find2(s, pos + 3, ch, b'\'') {
            None => {
                let tok = self.cur();
                tok.assign(TYPE_STRING, pos + 3, &s[pos + 3..]);
                tok.str_open = b'q';
                tok.str_close = 0;
                slen
            }
            Some(end) => {
                let tok = self.cur();
                tok.assign(TYPE_STRING, pos + 3, &s[pos + 3..end]);
                tok.str_open = b'q';
                tok.str_close = b'q';
                end + 2
            }
        }
    }

    fn parse_qstring(&mut self) -> usize {
        self.parse_qstring_core(0)
    }

    fn parse_nqstring(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        if pos + 2 < s.len() && s[pos + 1] == CHAR_SINGLE {
            return self.parse_estring();
        }
        self.parse_qstring_core(1)
    }

    fn parse_bxstring(&mut self, digits: &[u8]) -> usize {
        let s = self.s;
        let slen = s.len();
        let pos = self.pos;
        if pos + 2 >= slen || s[pos + 1] != b'\'' {
            return self.parse_word();
        }
        let wlen = spn(&s[pos + 2..], digits);
        if pos + 2 + wlen >= slen || s[pos + 2 + wlen] != b'\'' {
            return self.parse_word();
        }
        self.cur().assign(TYPE_NUMBER, pos, &s[pos..pos + wlen + 3]);
        pos + 2 + wlen + 1
    }

    fn parse_bword(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        match find_byte(s, pos, b']') {
            None => {
                self.cur().assign(TYPE_BAREWORD, pos, &s[pos..]);
                s.len()
            }
            Some(end) => {
                self.cur().assign(TYPE_BAREWORD, pos, &s[pos..end + 1]);
                end + 1
            }
        }
    }

    fn parse_word(&mut self) -> usize {
        let s = self.s;
        let pos = self.pos;
        let wlen = s[pos..]
            .iter()
            .position(|&c| WORD_END[c as usize])
            .unwrap_or(s.len() - pos);
        let idx = self.current;
        self.tokenvec[idx].assign(TYPE_BAREWORD, pos, &s[pos..pos + wlen]);
        // "SELECT.1" or "SELECT`col`": a keyword before a '.' or '`' is a
        // token of its own.
        let tlen = self.tokenvec[idx].len;
        for i in 0..tlen {
            let delim = self.tokenvec[idx].val[i];
            if delim == b'.' || delim == b'`' {
                let ch = data::lookup_word(&self.tokenvec[idx].val[..i]);
                if ch != TYPE_NONE && ch != TYPE_BAREWORD {
                    self.tokenvec[idx] = Token::default();
                    self.tokenvec[idx].assign(ch, pos, &s[pos..pos + i]);
                    return pos + i;
                }
            }
        }
        if wlen < TOKEN_SIZE {
            let mut ch = data::lookup_word(&self.tokenvec[idx].val[..wlen]);
            if ch == 0 {
                ch = TYPE_BAREWORD;
            }
            self.tokenvec[idx].ttype = ch;
        }
        pos + wlen
    }

    fn parse_tick(&mut self) -> usize {
        let pos = self.parse_string_core(self.pos, CHAR_TICK, 1);
        let tok = self.cur();
        let ch = data::lookup_word(tok.value());
        tok.ttype = if ch == TYPE_FUNCTION {
            TYPE_FUNCTION
        } else {
            TYPE_BAREWORD
        };
        pos
    }

    fn parse_var(&mut self) -> usize {
        let s = self.s;
        let slen = s.len();
        let mut pos = self.pos + 1;
        if pos < slen && s[pos] == b'@' {
            pos += 1;
            self.cur().count = 2;
        } else {
            self.cur().count = 1;
        }
        if pos < slen {
            if s[pos] == b'`' {
                self.pos = pos;
                let npos = self.parse_tick();
                self.cur().ttype = TYPE_VARIABLE;
                return npos;
            } else if s[pos] == CHAR_SINGLE || s[pos] == CHAR_DOUBLE {
                self.pos = pos;
                let npos = self.parse_string();
                self.cur().ttype = TYPE_VARIABLE;
                return npos;
            }
        }
        let rest = if pos < slen { &s[pos..] } else { &[][..] };
        let xlen = cspn(rest, b" <>:\\?=@!#~+-*/&|^%(),';\t\n\x0b\x0c\r'`\"");
        self.cur().assign(TYPE_VARIABLE, pos, &rest[..xlen]);
        pos + xlen
    }

    fn parse_money(&mut self) -> usize {
        let s = self.s;
        let slen = s.len();
        let pos = self.pos;
        if pos + 1 == slen {
            self.cur().assign_char(TYPE_BAREWORD, pos, b'$');
            return slen;
        }
        let xlen = spn(&s[pos + 1..], b"0123456789.,");
        if xlen == 0 {
            if s[pos + 1] == b'$' {
                // $$ .. $$ (PostgreSQL dollar quoting)
                match find2(s, pos + 2, b'$', b'$') {
                    None => {
                        let tok = self.cur();
                        tok.assign(TYPE_STRING, pos + 2, &s[pos + 2..]);
                        tok.str_open = b'$';
                        tok.str_close = 0;
                        slen
                    }
                    Some(end) => {
                        let tok = self.cur();
                        tok.assign(TYPE_STRING, pos + 2, &s[pos + 2..end]);
                        tok.str_open = b'$';
                        tok.str_close = b'$';
                        end + 2
                    }
                }
            } else {
                // $tag$ .. $tag$
                let xlen = spn(
                    &s[pos + 1..],
                    b"abcdefghjiklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                );
                if xlen == 0 {
                    self.cur().assign_char(TYPE_BAREWORD, pos, b'$');
                    return pos + 1;
                }
                if pos + xlen + 1 == slen || s[pos + xlen + 1] != b'$' {
                    self.cur().assign_char(TYPE_BAREWORD, pos, b'$');
                    return pos + 1;
                }
                // The C code searches for the closing tag from offset
                // xlen + 2 (not pos + xlen + 2) over slen - (pos + xlen + 2)
                // bytes, and takes a match before the opening as none.
                let needle = &s[pos..pos + xlen + 2];
                let hay_start = xlen + 2;
                let hay_len = slen - (pos + xlen + 2);
                let found = if hay_len >= needle.len() {
                    let hay = &s[hay_start..hay_start + hay_len];
                    memchr::memmem::find(hay, needle).map(|i| i + hay_start)
                } else {
                    None
                };
                match found {
                    Some(end) if end >= pos + xlen + 2 => {
                        let tok = self.cur();
                        tok.assign(TYPE_STRING, pos + xlen + 2, &s[pos + xlen + 2..end]);
                        tok.str_open = b'$';
                        tok.str_close = b'$';
                        end + xlen + 2
                    }
                    _ => {
                        let tok = self.cur();
                        tok.assign(TYPE_STRING, pos + xlen + 2, &s[pos + xlen + 2..]);
                        tok.str_open = b'$';
                        tok.str_close = 0;
                        slen
                    }
                }
            }
        } else if xlen == 1 && s[pos + 1] == b'.' {
            self.parse_word()
        } else {
            self.cur().assign(TYPE_NUMBER, pos, &s[pos..pos + 1 + xlen]);
            pos + 1 + xlen
        }
    }

    fn parse_number(&mut self) -> usize {
        let s = self.s;
        let slen = s.len();
        let mut pos = self.pos;
        if s[pos] == b'0' && pos + 1 < slen {
            let digits: Option<&[u8]> = match s[pos + 1] {
                b'X' | b'x' => Some(b"0123456789ABCDEFabcdef"),
                b'B' | b'b' => Some(b"01"),
                _ => None,
            };
            if let Some(digits) = digits {
                let xlen = spn(&s[pos + 2..], digits);
                if xlen == 0 {
                    self.cur().assign(TYPE_BAREWORD, pos, &s[pos..pos + 2]);
                    return pos + 2;
                } else {
                    self.cur().assign(TYPE_NUMBER, pos, &s[pos..pos + 2 + xlen]);
                    return pos + 2 + xlen;
                }
            }
        }
        let start = pos;
        while pos < slen && s[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < slen && s[pos] == b'.' {
            pos += 1;
            while pos < slen && s[pos].is_ascii_digit() {
                pos += 1;
            }
            if pos - start == 1 {
                self.cur().assign_char(TYPE_DOT, start, b'.');
                return pos;
            }
        }
        let mut have_e = false;
        let mut have_exp = false;
        if pos < slen && (s[pos] == b'E' || s[pos] == b'e') {
            have_e = true;
            pos += 1;
            if pos < slen && (s[pos] == b'+' || s[pos] == b'-') {
                pos += 1;
            }
            while pos < slen && s[pos].is_ascii_digit() {
                have_exp = true;
                pos += 1;
            }
        }
        // Oracle's float/double suffix: "1.2f", "1fUNION" (not "123FROM").
        if pos < slen
            && matches!(s[pos], b'd' | b'D' | b'f' | b'F')
            && (pos + 1 == slen
                || char_is_white(s[pos + 1])
                || matches!(s[pos + 1], b';' | b'u' | b'U'))
        {
            pos += 1;
        }
        let ttype = if have_e && !have_exp {
            TYPE_BAREWORD
        } else {
            TYPE_NUMBER
        };
        self.cur().assign(ttype, start, &s[start..pos]);
        pos
    }

    fn dispatch(&mut self, ch: u8) -> usize {
        match parser_for(ch) {
            Parser::White => self.pos + 1,
            Parser::Operator1 => self.parse_operator1(),
            Parser::Operator2 => self.parse_operator2(),
            Parser::Other => self.parse_other(),
            Parser::Char => self.parse_char(),
            Parser::Hash => self.parse_hash(),
            Parser::Dash => self.parse_dash(),
            Parser::Slash => self.parse_slash(),
            Parser::Backslash => self.parse_backslash(),
            Parser::String => self.parse_string(),
            Parser::Money => self.parse_money(),
            Parser::Number => self.parse_number(),
            Parser::Var => self.parse_var(),
            Parser::Word => self.parse_word(),
            Parser::Tick => self.parse_tick(),
            Parser::BString => self.parse_bxstring(b"01"),
            Parser::XString => self.parse_bxstring(b"0123456789ABCDEFabcdef"),
            Parser::EString => self.parse_estring(),
            Parser::NqString => self.parse_nqstring(),
            Parser::QString => self.parse_qstring(),
            Parser::UString => self.parse_ustring(),
            Parser::BWord => self.parse_bword(),
        }
    }

    /// Reads the next token into `tokenvec[current]`
    /// (`libinjection_sqli_tokenize`); false at the end of the input.
    pub fn tokenize(&mut self) -> bool {
        let slen = self.s.len();
        if slen == 0 {
            return false;
        }
        self.tokenvec[self.current] = Token::default();
        if self.pos == 0 && self.flags & (FLAG_QUOTE_SINGLE | FLAG_QUOTE_DOUBLE) != 0 {
            let delim = flag2delim(self.flags);
            self.pos = self.parse_string_core(0, delim, 0);
            self.stats_tokens += 1;
            return true;
        }
        while self.pos < slen {
            let ch = self.s[self.pos];
            self.pos = self.dispatch(ch);
            if self.tokenvec[self.current].ttype != 0 {
                self.stats_tokens += 1;
                return true;
            }
        }
        false
    }

    /// `syntax_merge_words`: "UNION" + "ALL" -> "UNION ALL" when the pair
    /// is a known phrase.
    fn merge_words(&mut self, a: usize, b: usize) -> bool {
        const A_TYPES: &[u8] = &[
            TYPE_KEYWORD,
            TYPE_BAREWORD,
            TYPE_OPERATOR,
            TYPE_UNION,
            TYPE_FUNCTION,
            TYPE_EXPRESSION,
            TYPE_TSQL,
            TYPE_SQLTYPE,
        ];
        let ta = self.tokenvec[a];
        let tb = self.tokenvec[b];
        if !A_TYPES.contains(&ta.ttype) {
            return false;
        }
        if !(A_TYPES.contains(&tb.ttype) || tb.ttype == TYPE_LOGIC_OPERATOR) {
            return false;
        }
        let sz1 = ta.len;
        let sz2 = tb.len;
        let sz3 = sz1 + sz2 + 1;
        if sz3 >= TOKEN_SIZE {
            return false;
        }
        let mut tmp = [0u8; TOKEN_SIZE];
        tmp[..sz1].copy_from_slice(&ta.val[..sz1]);
        tmp[sz1] = b' ';
        tmp[sz1 + 1..sz3].copy_from_slice(&tb.val[..sz2]);
        let ch = data::lookup_word(&tmp[..sz3]);
        if ch != 0 {
            let pos = ta.pos;
            self.tokenvec[a].assign(ch, pos, &tmp[..sz3]);
            true
        } else {
            false
        }
    }

    /// Tokenizes and folds the input into at most five tokens
    /// (`libinjection_sqli_fold`); returns their number.
    pub fn fold(&mut self) -> usize {
        let mut last_comment = Token::default();
        let mut pos: usize = 0;
        let mut left: usize = 0;
        let mut more;

        // Skip leading comments, left parens, SQL types and unary operators.
        self.current = 0;
        loop {
            more = self.tokenize();
            let t = &self.tokenvec[0];
            if !(t.ttype == TYPE_COMMENT
                || t.ttype == TYPE_LEFTPARENS
                || t.ttype == TYPE_SQLTYPE
                || t.is_unary_op())
            {
                break;
            }
            if !more {
                break;
            }
        }
        if !more {
            return 0;
        }
        pos += 1;

        loop {
            if pos >= MAX_TOKENS {
                let tv = &self.tokenvec;
                let t = |i: usize| tv[i].ttype;
                if (t(0) == TYPE_NUMBER
                    && (t(1) == TYPE_OPERATOR || t(1) == TYPE_COMMA)
                    && t(2) == TYPE_LEFTPARENS
                    && t(3) == TYPE_NUMBER
                    && t(4) == TYPE_RIGHTPARENS)
                    || (t(0) == TYPE_BAREWORD
                        && t(1) == TYPE_OPERATOR
                        && t(2) == TYPE_LEFTPARENS
                        && (t(3) == TYPE_BAREWORD || t(3) == TYPE_NUMBER)
                        && t(4) == TYPE_RIGHTPARENS)
                    || (t(0) == TYPE_NUMBER
                        && t(1) == TYPE_RIGHTPARENS
                        && t(2) == TYPE_COMMA
                        && t(3) == TYPE_LEFTPARENS
                        && t(4) == TYPE_NUMBER)
                    || (t(0) == TYPE_BAREWORD
                        && t(1) == TYPE_RIGHTPARENS
                        && t(2) == TYPE_OPERATOR
                        && t(3) == TYPE_LEFTPARENS
                        && t(4) == TYPE_BAREWORD)
                {
                    if pos > MAX_TOKENS {
                        self.tokenvec[1] = self.tokenvec[MAX_TOKENS];
                        pos = 2;
                        left = 0;
                    } else {
                        pos = 1;
                        left = 0;
                    }
                }
            }

            if !more || left >= MAX_TOKENS {
                left = pos;
                break;
            }

            // Get up to two tokens.
            while more && pos <= MAX_TOKENS && (pos - left) < 2 {
                self.current = pos;
                more = self.tokenize();
                if more {
                    if self.tokenvec[pos].ttype == TYPE_COMMENT {
                        last_comment = self.tokenvec[pos];
                    } else {
                        last_comment.ttype = 0;
                        pos += 1;
                    }
                }
            }
            if pos - left < 2 {
                left = pos;
                continue;
            }

            let l0 = self.tokenvec[left];
            let l1 = self.tokenvec[left + 1];
            if l0.ttype == TYPE_STRING && l1.ttype == TYPE_STRING {
                pos -= 1;
                self.stats_folds += 1;
                continue;
            } else if l0.ttype == TYPE_SEMICOLON && l1.ttype == TYPE_SEMICOLON {
                pos -= 1;
                self.stats_folds += 1;
                continue;
            } else if (l0.ttype == TYPE_OPERATOR || l0.ttype == TYPE_LOGIC_OPERATOR)
                && (l1.is_unary_op() || l1.ttype == TYPE_SQLTYPE)
            {
                pos -= 1;
                self.stats_folds += 1;
                left = 0;
                continue;
            } else if l0.ttype == TYPE_LEFTPARENS && l1.is_unary_op() {
                pos -= 1;
                self.stats_folds += 1;
                left = left.saturating_sub(1);
                continue;
            } else if self.merge_words(left, left + 1) {
                pos -= 1;
                self.stats_folds += 1;
                left = left.saturating_sub(1);
                continue;
            } else if l0.ttype == TYPE_SEMICOLON
                && l1.ttype == TYPE_FUNCTION
                && (l1.val[0] == b'I' || l1.val[0] == b'i')
                && (l1.val[1] == b'F' || l1.val[1] == b'f')
            {
                // T-SQL's IF after a semicolon is a statement.
                self.tokenvec[left + 1].ttype = TYPE_TSQL;
                continue;
            } else if (l0.ttype == TYPE_BAREWORD || l0.ttype == TYPE_VARIABLE)
                && l1.ttype == TYPE_LEFTPARENS
                && [
                    &b"USER_ID"[..],
                    b"USER_NAME",
                    b"DATABASE",
                    b"PASSWORD",
                    b"USER",
                    b"CURRENT_USER",
                    b"CURRENT_DATE",
                    b"CURRENT_TIME",
                    b"CURRENT_TIMESTAMP",
                    b"LOCALTIME",
                    b"LOCALTIMESTAMP",
                ]
                .iter()
                .any(|w| ci_eq(w, l0.value()))
            {
                self.tokenvec[left].ttype = TYPE_FUNCTION;
                continue;
            } else if l0.ttype == TYPE_KEYWORD
                && (ci_eq(b"IN", l0.value()) || ci_eq(b"NOT IN", l0.value()))
            {
                self.tokenvec[left].ttype = if l1.ttype == TYPE_LEFTPARENS {
                    TYPE_OPERATOR
                } else {
                    TYPE_BAREWORD
                };
                continue;
            } else if l0.ttype == TYPE_OPERATOR
                && (ci_eq(b"LIKE", l0.value()) || ci_eq(b"NOT LIKE", l0.value()))
            {
                if l1.ttype == TYPE_LEFTPARENS {
                    self.tokenvec[left].ttype = TYPE_FUNCTION;
                }
            } else if l0.ttype == TYPE_SQLTYPE
                && matches!(
                    l1.ttype,
                    TYPE_BAREWORD
                        | TYPE_NUMBER
                        | TYPE_SQLTYPE
                        | TYPE_LEFTPARENS
                        | TYPE_FUNCTION
                        | TYPE_VARIABLE
                        | TYPE_STRING
                )
            {
                self.tokenvec[left] = l1;
                pos -= 1;
                self.stats_folds += 1;
                left = 0;
                continue;
            } else if l0.ttype == TYPE_COLLATE && l1.ttype == TYPE_BAREWORD {
                if l1.cstr().contains(&b'_') {
                    self.tokenvec[left + 1].ttype = TYPE_SQLTYPE;
                    left = 0;
                }
            } else if l0.ttype == TYPE_BACKSLASH {
                if l1.is_arithmetic_op() {
                    self.tokenvec[left].ttype = TYPE_NUMBER;
                } else {
                    self.tokenvec[left] = l1;
                    pos -= 1;
                    self.stats_folds += 1;
                }
                left = 0;
                continue;
            } else if l0.ttype == TYPE_LEFTPARENS && l1.ttype == TYPE_LEFTPARENS {
                pos -= 1;
                left = 0;
                self.stats_folds += 1;
                continue;
            } else if l0.ttype == TYPE_RIGHTPARENS && l1.ttype == TYPE_RIGHTPARENS {
                pos -= 1;
                left = 0;
                self.stats_folds += 1;
                continue;
            } else if l0.ttype == TYPE_LEFTBRACE && l1.ttype == TYPE_BAREWORD {
                // MySQL's "{ ``" degenerate case: blacklisted.
                if l1.len == 0 {
                    self.tokenvec[left + 1].ttype = TYPE_EVIL;
                    return left + 2;
                }
                // ODBC's {foo expr} -> expr
                left = 0;
                pos -= 2;
                self.stats_folds += 2;
                continue;
            } else if l1.ttype == TYPE_RIGHTBRACE {
                pos -= 1;
                left = 0;
                self.stats_folds += 1;
                continue;
            }

            // Nothing folded two tokens: get a third.
            while more && pos <= MAX_TOKENS && pos - left < 3 {
                self.current = pos;
                more = self.tokenize();
                if more {
                    if self.tokenvec[pos].ttype == TYPE_COMMENT {
                        last_comment = self.tokenvec[pos];
                    } else {
                        last_comment.ttype = 0;
                        pos += 1;
                    }
                }
            }
            if pos - left < 3 {
                left = pos;
                continue;
            }

            let a = self.tokenvec[left];
            let b = self.tokenvec[left + 1];
            let c = self.tokenvec[left + 2];
            let (ta, tb, tc) = (a.ttype, b.ttype, c.ttype);
            if ta == TYPE_NUMBER && tb == TYPE_OPERATOR && tc == TYPE_NUMBER {
                pos -= 2;
                left = 0;
                continue;
            } else if ta == TYPE_OPERATOR && tb != TYPE_LEFTPARENS && tc == TYPE_OPERATOR {
                left = 0;
                pos -= 2;
                continue;
            } else if ta == TYPE_LOGIC_OPERATOR && tc == TYPE_LOGIC_OPERATOR {
                pos -= 2;
                left = 0;
                continue;
            } else if ta == TYPE_VARIABLE
                && tb == TYPE_OPERATOR
                && matches!(tc, TYPE_VARIABLE | TYPE_NUMBER | TYPE_BAREWORD)
            {
                pos -= 2;
                left = 0;
                continue;
            } else if matches!(ta, TYPE_BAREWORD | TYPE_NUMBER)
                && tb == TYPE_OPERATOR
                && matches!(tc, TYPE_NUMBER | TYPE_BAREWORD)
            {
                pos -= 2;
                left = 0;
                continue;
            } else if matches!(
                ta,
                TYPE_BAREWORD | TYPE_NUMBER | TYPE_VARIABLE | TYPE_STRING
            ) && tb == TYPE_OPERATOR
                && b.cstr() == b"::"
                && tc == TYPE_SQLTYPE
            {
                pos -= 2;
                left = 0;
                self.stats_folds += 2;
                continue;
            } else if matches!(
                ta,
                TYPE_BAREWORD | TYPE_NUMBER | TYPE_STRING | TYPE_VARIABLE
            ) && tb == TYPE_COMMA
                && matches!(
                    tc,
                    TYPE_NUMBER | TYPE_BAREWORD | TYPE_STRING | TYPE_VARIABLE
                )
            {
                pos -= 2;
                left = 0;
                continue;
            } else if matches!(ta, TYPE_EXPRESSION | TYPE_GROUP | TYPE_COMMA)
                && b.is_unary_op()
                && tc == TYPE_LEFTPARENS
            {
                self.tokenvec[left + 1] = c;
                pos -= 1;
                left = 0;
                continue;
            } else if matches!(ta, TYPE_KEYWORD | TYPE_EXPRESSION | TYPE_GROUP)
                && b.is_unary_op()
                && matches!(
                    tc,
                    TYPE_NUMBER | TYPE_BAREWORD | TYPE_VARIABLE | TYPE_STRING | TYPE_FUNCTION
                )
            {
                self.tokenvec[left + 1] = c;
                pos -= 1;
                left = 0;
                continue;
            } else if ta == TYPE_COMMA
                && b.is_unary_op()
                && matches!(
                    tc,
                    TYPE_NUMBER | TYPE_BAREWORD | TYPE_VARIABLE | TYPE_STRING
                )
            {
                // ", -1" -> ",1", then back up to fold "1,1" too.
                self.tokenvec[left + 1] = c;
                left = 0;
                pos -= 3;
                continue;
            } else if ta == TYPE_COMMA && b.is_unary_op() && tc == TYPE_FUNCTION {
                self.tokenvec[left + 1] = c;
                pos -= 1;
                left = 0;
                continue;
            } else if ta == TYPE_BAREWORD && tb == TYPE_DOT && tc == TYPE_BAREWORD {
                // database.table
                pos -= 2;
                left = 0;
                continue;
            } else if ta == TYPE_EXPRESSION && tb == TYPE_DOT && tc == TYPE_BAREWORD {
                self.tokenvec[left + 1] = c;
                pos -= 1;
                left = 0;
                continue;
            } else if ta == TYPE_FUNCTION && tb == TYPE_LEFTPARENS && tc != TYPE_RIGHTPARENS {
                // USER(foo): USER is not the zero-argument function.
                if ci_eq(b"USER", a.value()) {
                    self.tokenvec[left].ttype = TYPE_BAREWORD;
                }
            }

            left += 1;
        }

        if left < MAX_TOKENS && last_comment.ttype == TYPE_COMMENT {
            self.tokenvec[left] = last_comment;
            left += 1;
        }
        left.min(MAX_TOKENS)
    }

    /// Folds the input under `flags` and sets the fingerprint
    /// (`libinjection_sqli_fingerprint`).
    pub fn fingerprint(&mut self, flags: u32) -> &[u8] {
        self.reset(flags);
        let tlen = self.fold();
        if tlen > 2 {
            let t = &mut self.tokenvec[tlen - 1];
            // PHP's unclosed, empty backtick "comment".
            if t.ttype == TYPE_BAREWORD && t.str_open == CHAR_TICK && t.len == 0 && t.str_close == 0
            {
                t.ttype = TYPE_COMMENT;
            }
        }
        self.fingerprint = [0; 8];
        for i in 0..tlen {
            self.fingerprint[i] = self.tokenvec[i].ttype;
        }
        if self.fingerprint[..tlen].contains(&TYPE_EVIL) {
            self.fingerprint = [0; 8];
            self.tokenvec[0].val = [0; TOKEN_SIZE];
            self.fingerprint[0] = TYPE_EVIL;
            self.tokenvec[0].ttype = TYPE_EVIL;
            self.tokenvec[0].val[0] = TYPE_EVIL;
            self.tokenvec[1].ttype = 0;
        }
        self.fingerprint_bytes()
    }

    /// `libinjection_sqli_blacklist` and `libinjection_sqli_not_whitelist`.
    pub fn check_fingerprint(&self) -> bool {
        let fp = self.fingerprint_bytes();
        if fp.is_empty() || !data::is_blacklisted_fingerprint(fp) {
            return false;
        }
        self.not_whitelist()
    }

    fn not_whitelist(&self) -> bool {
        let fp = self.fingerprint_bytes();
        let tlen = fp.len();
        let tv = &self.tokenvec;
        let s = self.s;
        let byte_at = |i: usize| s.get(i).copied().unwrap_or(0);

        if tlen > 1
            && fp[tlen - 1] == TYPE_COMMENT
            && memchr::memmem::find(s, b"sp_password").is_some()
        {
            return true;
        }

        match tlen {
            2 => {
                if fp[1] == TYPE_UNION {
                    return self.stats_tokens != 2;
                }
                if tv[1].val[0] == b'#' {
                    return false;
                }
                if tv[0].ttype == TYPE_BAREWORD
                    && tv[1].ttype == TYPE_COMMENT
                    && tv[1].val[0] != b'/'
                {
                    return false;
                }
                if tv[0].ttype == TYPE_NUMBER && tv[1].ttype == TYPE_COMMENT && tv[1].val[0] == b'/'
                {
                    return true;
                }
                if tv[0].ttype == TYPE_NUMBER && tv[1].ttype == TYPE_COMMENT {
                    if self.stats_tokens > 2 {
                        return true;
                    }
                    let ch = byte_at(tv[0].len);
                    // A signed char: bytes >= 0x80 compare below 32 too.
                    if ch <= 32 || ch >= 0x80 {
                        return true;
                    }
                    if ch == b'/' && byte_at(tv[0].len + 1) == b'*' {
                        return true;
                    }
                    if ch == b'-' && byte_at(tv[0].len + 1) == b'-' {
                        return true;
                    }
                    return false;
                }
                if tv[1].len > 2 && tv[1].val[0] == b'-' {
                    return false;
                }
            }
            3 => {
                if fp == b"sos" || fp == b"s&s" {
                    return tv[0].str_open == 0
                        && tv[2].str_close == 0
                        && tv[0].str_close == tv[2].str_open;
                } else if fp == b"s&n"
                    || fp == b"n&1"
                    || fp == b"1&1"
                    || fp == b"1&v"
                    || fp == b"1&s"
                {
                    if self.stats_tokens == 3 {
                        return false;
                    }
                } else if tv[1].ttype == TYPE_KEYWORD
                    && (tv[1].len < 5 || !ci_eq(b"INTO", &tv[1].val[..4]))
                {
                    // Only "INTO OUTFILE" / "INTO DUMPFILE" count.
                    return false;
                }
            }
            _ => {}
        }
        true
    }

    fn reparse_as_mysql(&self) -> bool {
        self.stats_comment_ddx != 0 || self.stats_comment_hash != 0
    }

    fn try_flags(&mut self, flags: u32) -> bool {
        self.fingerprint(flags);
        self.check_fingerprint()
    }

    /// `libinjection_is_sqli`: the input as-is, then inside single quotes,
    /// then inside double quotes.
    pub fn is_sqli(&mut self) -> bool {
        let s = self.s;
        if s.is_empty() {
            return false;
        }
        if self.try_flags(FLAG_QUOTE_NONE | FLAG_SQL_ANSI) {
            return true;
        } else if self.reparse_as_mysql() && self.try_flags(FLAG_QUOTE_NONE | FLAG_SQL_MYSQL) {
            return true;
        }
        if memchr::memchr(CHAR_SINGLE, s).is_some() {
            if self.try_flags(FLAG_QUOTE_SINGLE | FLAG_SQL_ANSI) {
                return true;
            } else if self.reparse_as_mysql() && self.try_flags(FLAG_QUOTE_SINGLE | FLAG_SQL_MYSQL)
            {
                return true;
            }
        }
        if memchr::memchr(CHAR_DOUBLE, s).is_some()
            && self.try_flags(FLAG_QUOTE_DOUBLE | FLAG_SQL_MYSQL)
        {
            return true;
        }
        false
    }
}
