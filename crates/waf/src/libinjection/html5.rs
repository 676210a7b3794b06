//! libinjection's HTML5 tokenizer (libinjection_html5.c), written anew in
//! Rust: a simplified HTML5 state machine that yields tag names, attribute
//! names and values, comments and doctypes, starting either in the data
//! state or inside an attribute value (unquoted, single, double or back
//! quoted), as the XSS detector needs.
//!
//! The C code's states call each other directly; here a state either emits
//! a token or names the state to run next, and `next` loops over them, so
//! hostile input (say "<a/////...") cannot grow the stack.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    DataText,
    TagNameOpen,
    TagNameClose,
    TagNameSelfClose,
    TagData,
    TagClose,
    AttrName,
    AttrValue,
    TagComment,
    Doctype,
}

impl TokenType {
    pub fn name(self) -> &'static str {
        match self {
            TokenType::DataText => "DATA_TEXT",
            TokenType::TagNameOpen => "TAG_NAME_OPEN",
            TokenType::TagNameClose => "TAG_NAME_CLOSE",
            TokenType::TagNameSelfClose => "TAG_NAME_SELFCLOSE",
            TokenType::TagData => "TAG_DATA",
            TokenType::TagClose => "TAG_CLOSE",
            TokenType::AttrName => "ATTR_NAME",
            TokenType::AttrValue => "ATTR_VALUE",
            TokenType::TagComment => "TAG_COMMENT",
            TokenType::Doctype => "DOCTYPE",
        }
    }
}

/// Where tokenizing starts (`enum html5_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flags {
    DataState,
    ValueNoQuote,
    ValueSingleQuote,
    ValueDoubleQuote,
    ValueBackQuote,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Eof,
    Data,
    TagOpen,
    TagName,
    TagNameClose,
    EndTagOpen,
    SelfClosingStartTag,
    AttributeName,
    AfterAttributeName,
    BeforeAttributeName,
    BeforeAttributeValue,
    ValueQuote(u8),
    ValueNoQuote,
    AfterAttributeValueQuoted,
    Comment,
    Cdata,
    BogusComment,
    BogusComment2,
    MarkupDeclarationOpen,
    Doctype,
}

/// What a state did.
enum Step {
    /// A token is ready.
    Emit,
    /// No more tokens.
    Stop,
    /// Run this state now (a direct call in the C code).
    Go(St),
}

const CHAR_EOF: i32 = -1;

pub struct Tokenizer<'a> {
    s: &'a [u8],
    pos: usize,
    is_close: bool,
    state: St,
    pub token_start: usize,
    pub token_len: usize,
    pub token_type: TokenType,
}

/// `h5_is_white`: `strchr(" \t\n\v\f\r", ch)`, which also finds NUL.
fn is_white(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0)
}

impl<'a> Tokenizer<'a> {
    pub fn new(s: &'a [u8], flags: Flags) -> Self {
        let state = match flags {
            Flags::DataState => St::Data,
            Flags::ValueNoQuote => St::BeforeAttributeName,
            Flags::ValueSingleQuote => St::ValueQuote(b'\''),
            Flags::ValueDoubleQuote => St::ValueQuote(b'"'),
            Flags::ValueBackQuote => St::ValueQuote(b'`'),
        };
        Tokenizer {
            s,
            pos: 0,
            is_close: false,
            state,
            token_start: 0,
            token_len: 0,
            token_type: TokenType::DataText,
        }
    }

    /// The current token's bytes.
    pub fn token(&self) -> &'a [u8] {
        let end = (self.token_start + self.token_len).min(self.s.len());
        &self.s[self.token_start.min(end)..end]
    }

    /// Advances to the next token (`libinjection_h5_next`); false at the
    /// end.
    pub fn next_token(&mut self) -> bool {
        let mut st = self.state;
        loop {
            match self.run(st) {
                Step::Emit => return true,
                Step::Stop => return false,
                Step::Go(next) => st = next,
            }
        }
    }

    fn len(&self) -> usize {
        self.s.len()
    }

    fn emit(&mut self, start: usize, len: usize, ttype: TokenType) -> Step {
        self.token_start = start;
        self.token_len = len;
        self.token_type = ttype;
        Step::Emit
    }

    /// `h5_skip_white`: the next non-white byte as a C `char` (so bytes
    /// >= 0x80 are negative and 0xff reads as EOF), or EOF.
    fn skip_white(&mut self) -> i32 {
        while self.pos < self.len() {
            let ch = self.s[self.pos];
            match ch {
                0x00 | 0x20 | 0x09 | 0x0a | 0x0b | 0x0c | 0x0d => self.pos += 1,
                _ => return i32::from(ch as i8),
            }
        }
        CHAR_EOF
    }

    fn run(&mut self, st: St) -> Step {
        match st {
            St::Eof => Step::Stop,
            St::Data => self.state_data(),
            St::TagOpen => self.state_tag_open(),
            St::TagName => self.state_tag_name(),
            St::TagNameClose => self.state_tag_name_close(),
            St::EndTagOpen => self.state_end_tag_open(),
            St::SelfClosingStartTag => self.state_self_closing_start_tag(),
            St::AttributeName => self.state_attribute_name(),
            St::AfterAttributeName => self.state_after_attribute_name(),
            St::BeforeAttributeName => self.state_before_attribute_name(),
            St::BeforeAttributeValue => self.state_before_attribute_value(),
            St::ValueQuote(q) => self.state_attribute_value_quote(q),
            St::ValueNoQuote => self.state_attribute_value_no_quote(),
            St::AfterAttributeValueQuoted => self.state_after_attribute_value_quoted(),
            St::Comment => self.state_comment(),
            St::Cdata => self.state_cdata(),
            St::BogusComment => self.state_bogus_comment(),
            St::BogusComment2 => self.state_bogus_comment2(),
            St::MarkupDeclarationOpen => self.state_markup_declaration_open(),
            St::Doctype => self.state_doctype(),
        }
    }

    fn find(&self, from: usize, c: u8) -> Option<usize> {
        if from >= self.len() {
            return None;
        }
        memchr::memchr(c, &self.s[from..]).map(|i| i + from)
    }

    fn state_data(&mut self) -> Step {
        let pos = self.pos;
        match self.find(pos, b'<') {
            None => {
                self.state = St::Eof;
                let len = self.len() - pos;
                if len == 0 {
                    return Step::Stop;
                }
                self.emit(pos, len, TokenType::DataText)
            }
            Some(idx) => {
                let len = idx - pos;
                self.pos = idx + 1;
                self.state = St::TagOpen;
                if len == 0 {
                    return Step::Go(St::TagOpen);
                }
                self.emit(pos, len, TokenType::DataText)
            }
        }
    }

    fn state_tag_open(&mut self) -> Step {
        if self.pos >= self.len() {
            return Step::Stop;
        }
        let ch = self.s[self.pos];
        match ch {
            b'!' => {
                self.pos += 1;
                Step::Go(St::MarkupDeclarationOpen)
            }
            b'/' => {
                self.pos += 1;
                self.is_close = true;
                Step::Go(St::EndTagOpen)
            }
            b'?' => {
                self.pos += 1;
                Step::Go(St::BogusComment)
            }
            b'%' => {
                self.pos += 1;
                Step::Go(St::BogusComment2)
            }
            b'a'..=b'z' | b'A'..=b'Z' | 0 => Step::Go(St::TagName),
            _ => {
                if self.pos == 0 {
                    return Step::Go(St::Data);
                }
                self.state = St::Data;
                let start = self.pos - 1;
                self.emit(start, 1, TokenType::DataText)
            }
        }
    }

    fn state_end_tag_open(&mut self) -> Step {
        if self.pos >= self.len() {
            return Step::Stop;
        }
        let ch = self.s[self.pos];
        if ch == b'>' {
            Step::Go(St::Data)
        } else if ch.is_ascii_alphabetic() {
            Step::Go(St::TagName)
        } else {
            self.is_close = false;
            Step::Go(St::BogusComment)
        }
    }

    fn state_tag_name_close(&mut self) -> Step {
        self.is_close = false;
        let start = self.pos;
        self.pos += 1;
        self.state = if self.pos < self.len() {
            St::Data
        } else {
            St::Eof
        };
        self.emit(start, 1, TokenType::TagNameClose)
    }

    fn state_tag_name(&mut self) -> Step {
        let start = self.pos;
        let mut pos = start;
        while pos < self.len() {
            let ch = self.s[pos];
            if ch == 0 {
                // NULs in tag names are allowed (old browsers ignore them).
                pos += 1;
            } else if is_white(ch) {
                self.pos = pos + 1;
                self.state = St::BeforeAttributeName;
                return self.emit(start, pos - start, TokenType::TagNameOpen);
            } else if ch == b'/' {
                self.pos = pos + 1;
                self.state = St::SelfClosingStartTag;
                return self.emit(start, pos - start, TokenType::TagNameOpen);
            } else if ch == b'>' {
                if self.is_close {
                    self.pos = pos + 1;
                    self.is_close = false;
                    self.state = St::Data;
                    return self.emit(start, pos - start, TokenType::TagClose);
                } else {
                    self.pos = pos;
                    self.state = St::TagNameClose;
                    return self.emit(start, pos - start, TokenType::TagNameOpen);
                }
            } else {
                pos += 1;
            }
        }
        self.state = St::Eof;
        let len = self.len() - start;
        self.emit(start, len, TokenType::TagNameOpen)
    }

    fn state_before_attribute_name(&mut self) -> Step {
        let ch = self.skip_white();
        match ch {
            CHAR_EOF => Step::Stop,
            0x2f => {
                self.pos += 1;
                Step::Go(St::SelfClosingStartTag)
            }
            0x3e => {
                self.state = St::Data;
                let start = self.pos;
                self.pos += 1;
                self.emit(start, 1, TokenType::TagNameClose)
            }
            _ => Step::Go(St::AttributeName),
        }
    }

    fn state_attribute_name(&mut self) -> Step {
        let start = self.pos;
        let mut pos = start + 1;
        while pos < self.len() {
            let ch = self.s[pos];
            if is_white(ch) {
                self.state = St::AfterAttributeName;
                self.pos = pos + 1;
                return self.emit(start, pos - start, TokenType::AttrName);
            } else if ch == b'/' {
                self.state = St::SelfClosingStartTag;
                self.pos = pos + 1;
                return self.emit(start, pos - start, TokenType::AttrName);
            } else if ch == b'=' {
                self.state = St::BeforeAttributeValue;
                self.pos = pos + 1;
                return self.emit(start, pos - start, TokenType::AttrName);
            } else if ch == b'>' {
                self.state = St::TagNameClose;
                self.pos = pos;
                return self.emit(start, pos - start, TokenType::AttrName);
            } else {
                pos += 1;
            }
        }
        self.state = St::Eof;
        self.pos = self.len();
        let len = self.len().saturating_sub(start);
        self.emit(start, len, TokenType::AttrName)
    }

    fn state_after_attribute_name(&mut self) -> Step {
        let c = self.skip_white();
        match c {
            CHAR_EOF => Step::Stop,
            0x2f => {
                self.pos += 1;
                Step::Go(St::SelfClosingStartTag)
            }
            0x3d => {
                self.pos += 1;
                Step::Go(St::BeforeAttributeValue)
            }
            0x3e => Step::Go(St::TagNameClose),
            _ => Step::Go(St::AttributeName),
        }
    }

    fn state_before_attribute_value(&mut self) -> Step {
        let c = self.skip_white();
        if c == CHAR_EOF {
            self.state = St::Eof;
            return Step::Stop;
        }
        match c {
            0x22 => Step::Go(St::ValueQuote(b'"')),
            0x27 => Step::Go(St::ValueQuote(b'\'')),
            0x60 => Step::Go(St::ValueQuote(b'`')),
            _ => Step::Go(St::ValueNoQuote),
        }
    }

    fn state_attribute_value_quote(&mut self, qchar: u8) -> Step {
        // Skip the opening quote, unless tokenizing started inside the
        // value (position 0).
        if self.pos > 0 {
            self.pos += 1;
        }
        let start = self.pos.min(self.len());
        match self.find(start, qchar) {
            None => {
                self.state = St::Eof;
                let len = self.len() - start;
                self.emit(start, len, TokenType::AttrValue)
            }
            Some(idx) => {
                let len = idx - start;
                self.state = St::AfterAttributeValueQuoted;
                self.pos = start + len + 1;
                self.emit(start, len, TokenType::AttrValue)
            }
        }
    }

    fn state_attribute_value_no_quote(&mut self) -> Step {
        let start = self.pos;
        let mut pos = start;
        while pos < self.len() {
            let ch = self.s[pos];
            if is_white(ch) {
                self.pos = pos + 1;
                self.state = St::BeforeAttributeName;
                return self.emit(start, pos - start, TokenType::AttrValue);
            } else if ch == b'>' {
                self.pos = pos;
                self.state = St::TagNameClose;
                return self.emit(start, pos - start, TokenType::AttrValue);
            }
            pos += 1;
        }
        self.state = St::Eof;
        let len = self.len().saturating_sub(start);
        self.emit(start, len, TokenType::AttrValue)
    }

    fn state_after_attribute_value_quoted(&mut self) -> Step {
        if self.pos >= self.len() {
            return Step::Stop;
        }
        let ch = self.s[self.pos];
        if is_white(ch) {
            self.pos += 1;
            Step::Go(St::BeforeAttributeName)
        } else if ch == b'/' {
            self.pos += 1;
            Step::Go(St::SelfClosingStartTag)
        } else if ch == b'>' {
            let start = self.pos;
            self.pos += 1;
            self.state = St::Data;
            self.emit(start, 1, TokenType::TagNameClose)
        } else {
            Step::Go(St::BeforeAttributeName)
        }
    }

    fn state_self_closing_start_tag(&mut self) -> Step {
        if self.pos >= self.len() {
            return Step::Stop;
        }
        let ch = self.s[self.pos];
        if ch == b'>' && self.pos > 0 {
            let start = self.pos - 1;
            self.state = St::Data;
            self.pos += 1;
            self.emit(start, 2, TokenType::TagNameSelfClose)
        } else {
            Step::Go(St::BeforeAttributeName)
        }
    }

    fn state_bogus_comment(&mut self) -> Step {
        let start = self.pos.min(self.len());
        match self.find(start, b'>') {
            None => {
                self.pos = self.len();
                self.state = St::Eof;
                let len = self.len() - start;
                self.emit(start, len, TokenType::TagComment)
            }
            Some(idx) => {
                self.pos = idx + 1;
                self.state = St::Data;
                self.emit(start, idx - start, TokenType::TagComment)
            }
        }
    }

    fn state_bogus_comment2(&mut self) -> Step {
        let start = self.pos.min(self.len());
        let mut pos = start;
        loop {
            match self.find(pos, b'%') {
                Some(idx) if idx + 1 < self.len() => {
                    if self.s[idx + 1] != b'>' {
                        pos = idx + 1;
                        continue;
                    }
                    self.pos = idx + 2;
                    self.state = St::Data;
                    return self.emit(start, idx - start, TokenType::TagComment);
                }
                _ => {
                    self.pos = self.len();
                    self.state = St::Eof;
                    let len = self.len() - start;
                    return self.emit(start, len, TokenType::TagComment);
                }
            }
        }
    }

    fn state_markup_declaration_open(&mut self) -> Step {
        let pos = self.pos;
        let rest = if pos < self.len() {
            &self.s[pos..]
        } else {
            &[][..]
        };
        if rest.len() >= 7 && rest[..7].eq_ignore_ascii_case(b"DOCTYPE") {
            Step::Go(St::Doctype)
        } else if rest.len() >= 7 && &rest[..7] == b"[CDATA[" {
            self.pos += 7;
            Step::Go(St::Cdata)
        } else if rest.len() >= 2 && &rest[..2] == b"--" {
            self.pos += 2;
            Step::Go(St::Comment)
        } else {
            Step::Go(St::BogusComment)
        }
    }

    /// Comments end at EOF, "-->" or "-!>" (NULs between the dashes are
    /// skipped).
    fn state_comment(&mut self) -> Step {
        let start = self.pos.min(self.len());
        let end = self.len();
        let mut pos = start;
        loop {
            let idx = match self.find(pos, b'-') {
                Some(i) if i + 3 <= end => i,
                _ => {
                    self.state = St::Eof;
                    return self.emit(start, end - start, TokenType::TagComment);
                }
            };
            let mut offset = 1;
            while idx + offset < end && self.s[idx + offset] == 0 {
                offset += 1;
            }
            if idx + offset == end {
                self.state = St::Eof;
                return self.emit(start, end - start, TokenType::TagComment);
            }
            let ch = self.s[idx + offset];
            if ch != b'-' && ch != b'!' {
                pos = idx + 1;
                continue;
            }
            offset += 1;
            if idx + offset == end {
                self.state = St::Eof;
                return self.emit(start, end - start, TokenType::TagComment);
            }
            if self.s[idx + offset] != b'>' {
                pos = idx + 1;
                continue;
            }
            offset += 1;
            self.pos = idx + offset;
            self.state = St::Data;
            return self.emit(start, idx - start, TokenType::TagComment);
        }
    }

    fn state_cdata(&mut self) -> Step {
        let start = self.pos.min(self.len());
        let end = self.len();
        let mut pos = start;
        loop {
            match self.find(pos, b']') {
                Some(idx) if idx + 3 <= end => {
                    if self.s[idx + 1] == b']' && self.s[idx + 2] == b'>' {
                        self.state = St::Data;
                        self.pos = idx + 3;
                        return self.emit(start, idx - start, TokenType::DataText);
                    }
                    pos = idx + 1;
                }
                _ => {
                    self.state = St::Eof;
                    return self.emit(start, end - start, TokenType::DataText);
                }
            }
        }
    }

    fn state_doctype(&mut self) -> Step {
        let start = self.pos.min(self.len());
        match self.find(start, b'>') {
            None => {
                self.state = St::Eof;
                let len = self.len() - start;
                self.emit(start, len, TokenType::Doctype)
            }
            Some(idx) => {
                self.state = St::Data;
                self.pos = idx + 1;
                self.emit(start, idx - start, TokenType::Doctype)
            }
        }
    }
}
