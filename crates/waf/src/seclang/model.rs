//! The typed rule model the engine evaluates: what a SecLang file means,
//! with every string parsed once at load.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Defines a fieldless enum with its SecLang names (matched
/// case-insensitively, as ModSecurity does) and the canonical spelling.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $($text:literal)|+,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant,)* }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The variant for a SecLang name (any case).
            pub fn from_name(s: &str) -> Option<$name> {
                $($(if s.eq_ignore_ascii_case($text) { return Some($name::$variant); })+)*
                None
            }

            /// The canonical SecLang spelling.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => named_enum!(@first $($text)+),)* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
    (@first $first:literal $($rest:literal)*) => { $first };
}

named_enum! {
    /// A ModSecurity variable or collection name (`ARGS`, `TX`, ...).
    Collection {
        Args = "ARGS",
        ArgsCombinedSize = "ARGS_COMBINED_SIZE",
        ArgsGet = "ARGS_GET",
        ArgsGetNames = "ARGS_GET_NAMES",
        ArgsNames = "ARGS_NAMES",
        ArgsPost = "ARGS_POST",
        ArgsPostNames = "ARGS_POST_NAMES",
        AuthType = "AUTH_TYPE",
        Duration = "DURATION",
        Env = "ENV",
        Files = "FILES",
        FilesCombinedSize = "FILES_COMBINED_SIZE",
        FilesNames = "FILES_NAMES",
        FilesSizes = "FILES_SIZES",
        FilesTmpNames = "FILES_TMPNAMES",
        FilesTmpContent = "FILES_TMP_CONTENT",
        FullRequest = "FULL_REQUEST",
        FullRequestLength = "FULL_REQUEST_LENGTH",
        Geo = "GEO",
        Global = "GLOBAL",
        HighestSeverity = "HIGHEST_SEVERITY",
        InboundDataError = "INBOUND_DATA_ERROR",
        Ip = "IP",
        MatchedVar = "MATCHED_VAR",
        MatchedVarName = "MATCHED_VAR_NAME",
        MatchedVars = "MATCHED_VARS",
        MatchedVarsNames = "MATCHED_VARS_NAMES",
        ModsecBuild = "MODSEC_BUILD",
        MscPcreLimitsExceeded = "MSC_PCRE_LIMITS_EXCEEDED",
        MultipartBoundaryQuoted = "MULTIPART_BOUNDARY_QUOTED",
        MultipartBoundaryWhitespace = "MULTIPART_BOUNDARY_WHITESPACE",
        MultipartCrlfLfLines = "MULTIPART_CRLF_LF_LINES",
        MultipartDataAfter = "MULTIPART_DATA_AFTER",
        MultipartDataBefore = "MULTIPART_DATA_BEFORE",
        MultipartFileLimitExceeded = "MULTIPART_FILE_LIMIT_EXCEEDED",
        MultipartFilename = "MULTIPART_FILENAME",
        MultipartHeaderFolding = "MULTIPART_HEADER_FOLDING",
        MultipartInvalidHeaderFolding = "MULTIPART_INVALID_HEADER_FOLDING",
        MultipartInvalidPart = "MULTIPART_INVALID_PART",
        MultipartInvalidQuoting = "MULTIPART_INVALID_QUOTING",
        MultipartLfLine = "MULTIPART_LF_LINE",
        MultipartMissingSemicolon = "MULTIPART_MISSING_SEMICOLON" | "MULTIPART_SEMICOLON_MISSING",
        MultipartName = "MULTIPART_NAME",
        MultipartPartHeaders = "MULTIPART_PART_HEADERS",
        MultipartStrictError = "MULTIPART_STRICT_ERROR",
        MultipartUnmatchedBoundary = "MULTIPART_UNMATCHED_BOUNDARY",
        OutboundDataError = "OUTBOUND_DATA_ERROR",
        PathInfo = "PATH_INFO",
        QueryString = "QUERY_STRING",
        RemoteAddr = "REMOTE_ADDR",
        RemoteHost = "REMOTE_HOST",
        RemotePort = "REMOTE_PORT",
        RemoteUser = "REMOTE_USER",
        ReqbodyError = "REQBODY_ERROR",
        ReqbodyErrorMsg = "REQBODY_ERROR_MSG",
        ReqbodyProcessor = "REQBODY_PROCESSOR",
        ReqbodyProcessorError = "REQBODY_PROCESSOR_ERROR",
        ReqbodyProcessorErrorMsg = "REQBODY_PROCESSOR_ERROR_MSG",
        RequestBasename = "REQUEST_BASENAME",
        RequestBody = "REQUEST_BODY",
        RequestBodyLength = "REQUEST_BODY_LENGTH",
        RequestCookies = "REQUEST_COOKIES",
        RequestCookiesNames = "REQUEST_COOKIES_NAMES",
        RequestFilename = "REQUEST_FILENAME",
        RequestHeaders = "REQUEST_HEADERS",
        RequestHeadersNames = "REQUEST_HEADERS_NAMES",
        RequestLine = "REQUEST_LINE",
        RequestMethod = "REQUEST_METHOD",
        RequestProtocol = "REQUEST_PROTOCOL",
        RequestUri = "REQUEST_URI",
        RequestUriRaw = "REQUEST_URI_RAW",
        Resource = "RESOURCE",
        ResponseBody = "RESPONSE_BODY",
        ResponseContentLength = "RESPONSE_CONTENT_LENGTH",
        ResponseContentType = "RESPONSE_CONTENT_TYPE",
        ResponseHeaders = "RESPONSE_HEADERS",
        ResponseHeadersNames = "RESPONSE_HEADERS_NAMES",
        ResponseProtocol = "RESPONSE_PROTOCOL",
        ResponseStatus = "RESPONSE_STATUS",
        Rule = "RULE",
        ServerAddr = "SERVER_ADDR",
        ServerName = "SERVER_NAME",
        ServerPort = "SERVER_PORT",
        Session = "SESSION",
        SessionId = "SESSIONID",
        StatusLine = "STATUS_LINE",
        Time = "TIME",
        TimeDay = "TIME_DAY",
        TimeEpoch = "TIME_EPOCH",
        TimeHour = "TIME_HOUR",
        TimeMin = "TIME_MIN",
        TimeMon = "TIME_MON",
        TimeSec = "TIME_SEC",
        TimeWday = "TIME_WDAY",
        TimeYear = "TIME_YEAR",
        Tx = "TX",
        UniqueId = "UNIQUE_ID",
        UrlencodedError = "URLENCODED_ERROR",
        User = "USER",
        UserId = "USERID",
        WebAppId = "WEBAPPID",
        WebserverErrorLog = "WEBSERVER_ERROR_LOG",
        Xml = "XML",
    }
}

named_enum! {
    /// A transformation (`t:xxx`). `None` is `t:none`: it resets the list
    /// and never appears in [`Rule::transforms`].
    Transform {
        None = "none",
        Base64Decode = "base64Decode",
        Base64DecodeExt = "base64DecodeExt",
        Base64Encode = "base64Encode",
        CmdLine = "cmdLine",
        CompressWhitespace = "compressWhitespace",
        CssDecode = "cssDecode",
        EscapeSeqDecode = "escapeSeqDecode",
        HexDecode = "hexDecode",
        HexEncode = "hexEncode",
        HtmlEntityDecode = "htmlEntityDecode",
        JsDecode = "jsDecode",
        Length = "length",
        Lowercase = "lowercase",
        Md5 = "md5",
        NormalizePath = "normalizePath" | "normalisePath",
        NormalizePathWin = "normalizePathWin" | "normalisePathWin",
        ParityEven7bit = "parityEven7bit",
        ParityOdd7bit = "parityOdd7bit",
        ParityZero7bit = "parityZero7bit",
        RemoveComments = "removeComments",
        RemoveCommentsChar = "removeCommentsChar",
        RemoveNulls = "removeNulls",
        RemoveWhitespace = "removeWhitespace",
        ReplaceComments = "replaceComments",
        ReplaceNulls = "replaceNulls",
        Sha1 = "sha1",
        SqlHexDecode = "sqlHexDecode",
        Trim = "trim",
        TrimLeft = "trimLeft",
        TrimRight = "trimRight",
        Uppercase = "uppercase",
        UrlDecode = "urlDecode",
        UrlDecodeUni = "urlDecodeUni",
        UrlEncode = "urlEncode",
        Utf8ToUnicode = "utf8toUnicode",
    }
}

named_enum! {
    /// An operator name (`@rx`, `@pm`, ...).
    OperatorName {
        Rx = "rx",
        Pm = "pm",
        PmFromFile = "pmFromFile" | "pmf",
        BeginsWith = "beginsWith",
        EndsWith = "endsWith",
        Contains = "contains",
        ContainsWord = "containsWord",
        Streq = "streq",
        Strmatch = "strmatch",
        Within = "within",
        Eq = "eq",
        Ge = "ge",
        Gt = "gt",
        Le = "le",
        Lt = "lt",
        IpMatch = "ipMatch",
        IpMatchFromFile = "ipMatchFromFile" | "ipMatchF",
        DetectSqli = "detectSQLi",
        DetectXss = "detectXSS",
        ValidateByteRange = "validateByteRange",
        ValidateUrlEncoding = "validateUrlEncoding",
        ValidateUtf8Encoding = "validateUtf8Encoding",
        UnconditionalMatch = "unconditionalMatch",
        NoMatch = "noMatch",
        Rbl = "rbl",
        GeoLookup = "geoLookup",
        GsbLookup = "gsbLookup",
        InspectFile = "inspectFile",
        FuzzyHash = "fuzzyHash",
        ValidateDtd = "validateDTD",
        ValidateSchema = "validateSchema",
        ValidateHash = "validateHash",
        VerifyCc = "verifyCC",
        VerifyCpf = "verifyCPF",
        VerifySsn = "verifySSN",
        Rsub = "rsub",
    }
}

/// A string with `%{...}` macros, split once so that the engine expands it
/// without scanning. A string without macros is one literal part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Macro {
    raw: Box<str>,
    parts: Box<[MacroPart]>,
}

/// One piece of a [`Macro`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MacroPart {
    Literal(Box<str>),
    /// `%{TX.foo}` is `Var { collection: Tx, key: Some("foo") }`;
    /// `%{MATCHED_VAR}` has no key. Keys keep their spelling (the engine
    /// folds case where the collection is case-insensitive).
    Var {
        collection: Collection,
        key: Option<Box<str>>,
    },
}

impl Macro {
    /// A string that is all literal (no expansion).
    pub fn literal(s: &str) -> Macro {
        let parts: Box<[MacroPart]> = if s.is_empty() {
            Box::new([])
        } else {
            Box::new([MacroPart::Literal(s.into())])
        };
        Macro {
            raw: s.into(),
            parts,
        }
    }

    /// Parses `text`, ModSecurity-style: `%{NAME}` or `%{NAME.key}` (also
    /// `%{NAME:key}`); an unterminated `%{` is literal text; an unknown
    /// variable name is an error.
    pub fn parse(text: &str) -> Result<Macro, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(pos) = rest.find("%{") {
            let after = &rest[pos + 2..];
            let Some(end) = after.find('}') else { break };
            let inner = after[..end].trim();
            let (name, key) = match inner.find(['.', ':']) {
                Some(i) => (&inner[..i], Some(&inner[i + 1..])),
                None => (inner, None),
            };
            let collection = Collection::from_name(name)
                .ok_or_else(|| format!("unknown variable in macro %{{{inner}}}"))?;
            lit.push_str(&rest[..pos]);
            if !lit.is_empty() {
                parts.push(MacroPart::Literal(std::mem::take(&mut lit).into()));
            }
            parts.push(MacroPart::Var {
                collection,
                key: key.map(Into::into),
            });
            rest = &after[end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(MacroPart::Literal(lit.into()));
        }
        Ok(Macro {
            raw: text.into(),
            parts: parts.into(),
        })
    }

    /// The text as written.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    pub fn parts(&self) -> &[MacroPart] {
        &self.parts
    }

    /// True when expansion is needed (some part is a variable).
    pub fn has_vars(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, MacroPart::Var { .. }))
    }

    /// The text when it has no variables.
    pub fn as_literal(&self) -> Option<&str> {
        (!self.has_vars()).then_some(&*self.raw)
    }

    /// Expands with a lookup for each variable part.
    pub fn expand(&self, mut lookup: impl FnMut(Collection, Option<&str>) -> String) -> String {
        let mut out = String::new();
        for p in self.parts.iter() {
            match p {
                MacroPart::Literal(s) => out.push_str(s),
                MacroPart::Var { collection, key } => {
                    out.push_str(&lookup(*collection, key.as_deref()))
                }
            }
        }
        out
    }
}

impl fmt::Display for Macro {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// How a variable picks members of a collection.
#[derive(Clone, Debug)]
pub enum Selector {
    /// `ARGS:foo`: the key as written (`XML:/*` is an XPath here).
    Key(Box<str>),
    /// `ARGS:/^foo/`: a regex over keys, compiled case-insensitively with
    /// Unicode off (`source` is the text between the slashes).
    Regex {
        source: Box<str>,
        regex: regex::bytes::Regex,
    },
}

impl PartialEq for Selector {
    fn eq(&self, other: &Selector) -> bool {
        match (self, other) {
            (Selector::Key(a), Selector::Key(b)) => a.eq_ignore_ascii_case(b),
            (Selector::Regex { source: a, .. }, Selector::Regex { source: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// One target of a rule: `ARGS`, `&TX:foo`, `!REQUEST_COOKIES:/^__utm/`.
#[derive(Clone, Debug, PartialEq)]
pub struct Variable {
    pub collection: Collection,
    pub selector: Option<Selector>,
    /// `&`: the number of matching members instead of their values.
    pub count: bool,
    /// `!`: an exclusion from the other targets of the rule.
    pub exclude: bool,
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclude {
            f.write_str("!")?;
        }
        if self.count {
            f.write_str("&")?;
        }
        f.write_str(self.collection.name())?;
        match &self.selector {
            None => Ok(()),
            Some(Selector::Key(k)) => write!(f, ":{k}"),
            Some(Selector::Regex { source, .. }) => write!(f, ":/{source}/"),
        }
    }
}

/// The parsed argument of an operator.
#[derive(Clone, Debug)]
pub enum OperatorParam {
    /// Operators without an argument (`@detectSQLi`, `@unconditionalMatch`).
    None,
    /// Text, with macros (`@streq`, `@within %{tx.allowed_methods}`, `@lt 5`).
    Text(Macro),
    /// `@rx`: the pattern translated from PCRE, its syntax checked (bytes,
    /// Unicode off, DOTALL and MULTILINE as ModSecurity compiles). Not
    /// compiled here: the engine compiles it once, with its prefilter
    /// (`compile_pcre` compiles it alone).
    Regex { translated: Box<str> },
    /// `@rx` whose pattern holds macros: compiled per transaction.
    DynamicRegex(Macro),
    /// `@pm` phrases, `@pmFromFile` lines, `@ipMatch(FromFile)` addresses.
    List(Vec<Box<str>>),
    /// `@validateByteRange`: inclusive ranges.
    ByteRanges(Vec<(u8, u8)>),
}

/// `@name arg`, possibly negated (`!@rx`).
#[derive(Clone, Debug)]
pub struct Operator {
    pub name: OperatorName,
    pub negated: bool,
    /// The argument as written (after unquoting).
    pub raw: Box<str>,
    pub param: OperatorParam,
}

/// The disruptive actions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disruptive {
    Pass,
    /// Resolves to the phase's default disruptive action in
    /// [`Rule::disruptive`]; it stays `Block` only in [`Rule::actions`].
    Block,
    Deny,
    Drop,
    Allow(AllowScope),
    Redirect(Macro),
    Proxy(Macro),
    Pause(u64),
}

/// What `allow` lets through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllowScope {
    /// `allow`: the rest of the transaction.
    All,
    /// `allow:phase`: the rest of the current phase.
    Phase,
    /// `allow:request`: the rest of the request phases.
    Request,
}

/// `severity:` names and numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Emergency = 0,
    Alert = 1,
    Critical = 2,
    Error = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
    Debug = 7,
}

impl Severity {
    pub fn parse(s: &str) -> Option<Severity> {
        use Severity::*;
        const ALL: [Severity; 8] = [
            Emergency, Alert, Critical, Error, Warning, Notice, Info, Debug,
        ];
        if let Ok(n) = s.parse::<usize>() {
            return ALL.get(n).copied();
        }
        ALL.into_iter().find(|v| v.name().eq_ignore_ascii_case(s))
    }

    pub fn name(self) -> &'static str {
        match self {
            Severity::Emergency => "EMERGENCY",
            Severity::Alert => "ALERT",
            Severity::Critical => "CRITICAL",
            Severity::Error => "ERROR",
            Severity::Warning => "WARNING",
            Severity::Notice => "NOTICE",
            Severity::Info => "INFO",
            Severity::Debug => "DEBUG",
        }
    }
}

/// `setvar:` operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetVarOp {
    /// `col.key=value`
    Set(Macro),
    /// `col.key=+value`
    Add(Macro),
    /// `col.key=-value`
    Sub(Macro),
    /// `!col.key`
    Delete,
    /// `col.key` without a value (ModSecurity sets it to an empty value).
    Touch,
}

/// `setvar:'tx.anomaly_score_pl1=+%{tx.critical_anomaly_score}'`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetVar {
    /// Lower case (`tx`, `ip`, `global`, ...).
    pub collection: Box<str>,
    /// The key, with macros (`%{rule.id}` in keys is allowed).
    pub key: Macro,
    pub op: SetVarOp,
}

/// `ctl:` engine modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineMode {
    On,
    Off,
    DetectionOnly,
}

impl EngineMode {
    pub fn parse(s: &str) -> Option<EngineMode> {
        match s.to_ascii_lowercase().as_str() {
            "on" => Some(EngineMode::On),
            "off" => Some(EngineMode::Off),
            "detectiononly" => Some(EngineMode::DetectionOnly),
            _ => None,
        }
    }
}

/// `SecAuditEngine` / `ctl:auditEngine` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditEngine {
    On,
    Off,
    RelevantOnly,
}

impl AuditEngine {
    pub fn parse(s: &str) -> Option<AuditEngine> {
        match s.to_ascii_lowercase().as_str() {
            "on" => Some(AuditEngine::On),
            "off" => Some(AuditEngine::Off),
            "relevantonly" => Some(AuditEngine::RelevantOnly),
            _ => None,
        }
    }
}

/// Request body processors (`ctl:requestBodyProcessor=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyProcessor {
    UrlEncoded,
    Multipart,
    Xml,
    Json,
}

impl BodyProcessor {
    pub fn parse(s: &str) -> Option<BodyProcessor> {
        match s.to_ascii_uppercase().as_str() {
            "URLENCODED" => Some(BodyProcessor::UrlEncoded),
            "MULTIPART" => Some(BodyProcessor::Multipart),
            "XML" => Some(BodyProcessor::Xml),
            "JSON" => Some(BodyProcessor::Json),
            _ => None,
        }
    }
}

/// An inclusive range of rule ids (`942100`, `941000-942999`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    pub first: u64,
    pub last: u64,
}

impl IdRange {
    pub fn contains(&self, id: u64) -> bool {
        self.first <= id && id <= self.last
    }
}

/// `ctl:name=value`: per-transaction configuration changes.
#[derive(Clone, Debug, PartialEq)]
pub enum Ctl {
    RuleEngine(EngineMode),
    RuleRemoveById(Vec<IdRange>),
    RuleRemoveByTag(Box<str>),
    RuleRemoveByMsg(Box<str>),
    RuleRemoveTargetById(Vec<IdRange>, Vec<Variable>),
    RuleRemoveTargetByTag(Box<str>, Vec<Variable>),
    RuleRemoveTargetByMsg(Box<str>, Vec<Variable>),
    RequestBodyProcessor(BodyProcessor),
    RequestBodyAccess(bool),
    ResponseBodyAccess(bool),
    RequestBodyLimit(u64),
    ForceRequestBodyVariable(bool),
    AuditEngine(AuditEngine),
    /// `+E`, `-E` or `ABIJ...` as written.
    AuditLogParts(Box<str>),
    DebugLogLevel(u32),
    /// Accepted and recorded, not evaluated (hashEngine, ...).
    Other(Box<str>, Box<str>),
}

/// One action as written in a rule (in order). Metadata and flow actions
/// are also summarised in [`Rule`]'s fields.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Id(u64),
    Phase(u8),
    Msg(Macro),
    LogData(Macro),
    Tag(Box<str>),
    Severity(Severity),
    Ver(Box<str>),
    Rev(Box<str>),
    Maturity(u8),
    Accuracy(u8),
    /// `t:xxx` (`t:none` included, as the reset it is).
    Transform(Transform),
    Chain,
    Skip(u32),
    SkipAfter(Box<str>),
    Disruptive(Disruptive),
    Status(u16),
    Capture,
    MultiMatch,
    Log,
    NoLog,
    AuditLog,
    NoAuditLog,
    SetVar(SetVar),
    /// `expirevar:ip.foo=60`
    ExpireVar {
        collection: Box<str>,
        key: Macro,
        seconds: Macro,
    },
    /// `initcol:ip=%{remote_addr}`
    InitCol {
        collection: Box<str>,
        key: Macro,
    },
    /// `setenv:name=value` (`!name` unsets: value `None`).
    SetEnv {
        name: Macro,
        value: Option<Macro>,
    },
    SetUid(Macro),
    SetSid(Macro),
    SetRsc(Macro),
    Ctl(Ctl),
    SanitiseArg(Box<str>),
    SanitiseMatched,
    SanitiseMatchedBytes(Option<Box<str>>),
    SanitiseRequestHeader(Box<str>),
    SanitiseResponseHeader(Box<str>),
    Exec(Box<str>),
    Append(Macro),
    Prepend(Macro),
    Xmlns(Box<str>),
    DeprecateVar(Box<str>),
}

impl Action {
    /// Actions that may appear only once per rule (a later one replaces an
    /// earlier one in `SecRuleUpdateActionById`).
    pub(crate) fn single_kind(&self) -> Option<u8> {
        Some(match self {
            Action::Id(_) => 0,
            Action::Phase(_) => 1,
            Action::Msg(_) => 2,
            Action::LogData(_) => 3,
            Action::Severity(_) => 4,
            Action::Ver(_) => 5,
            Action::Rev(_) => 6,
            Action::Maturity(_) => 7,
            Action::Accuracy(_) => 8,
            Action::Skip(_) | Action::SkipAfter(_) => 9,
            Action::Disruptive(_) => 10,
            Action::Status(_) => 11,
            Action::Log | Action::NoLog => 12,
            Action::AuditLog | Action::NoAuditLog => 13,
            Action::Capture => 14,
            Action::MultiMatch => 15,
            _ => return None,
        })
    }
}

/// Which directive made the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    SecRule,
    SecAction,
}

/// A rule (a `SecRule` or `SecAction`, or a link of a chain).
#[derive(Clone, Debug)]
pub struct Rule {
    pub kind: RuleKind,
    /// `None` only for chain links after the first.
    pub id: Option<u64>,
    /// 1 to 5 (`request` is 2, `response` 4, `logging` 5); a chain link has
    /// its starter's phase. ModSecurity's default is 2.
    pub phase: u8,
    /// Targets in order; exclusions (`!`) included. Empty for SecAction.
    pub variables: Vec<Variable>,
    /// `@unconditionalMatch` for SecAction.
    pub operator: Operator,
    /// Every action as written (with `SecRuleUpdateActionById` applied).
    pub actions: Vec<Action>,

    // What the actions mean, with the phase's SecDefaultAction applied.
    /// The transformation pipeline: the defaults' then the rule's,
    /// each `t:none` dropping everything before it.
    pub transforms: Vec<Transform>,
    /// The disruptive action (`block` resolved to the default's; no
    /// disruptive action means the default's). Meaningful on a chain starter.
    pub disruptive: Disruptive,
    /// True when the rule itself said `block` (anomaly-scoring CRS rules).
    pub block: bool,
    pub status: Option<u16>,
    pub log: bool,
    pub auditlog: bool,
    pub capture: bool,
    pub multi_match: bool,
    pub msg: Option<Macro>,
    pub logdata: Option<Macro>,
    pub severity: Option<Severity>,
    pub tags: Vec<Box<str>>,
    pub ver: Option<Box<str>>,
    pub skip: u32,
    pub skip_after: Option<Box<str>>,

    /// The links that follow a chain starter (each one's `chain` flag is
    /// implied by its position); empty for every other rule.
    pub chain: Vec<Rule>,
    pub file: Arc<str>,
    pub line: u32,
}

impl Rule {
    /// True for a chain starter with links.
    pub fn is_chain(&self) -> bool {
        !self.chain.is_empty()
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| &**t == tag)
    }

    /// The message text as written.
    pub fn msg_raw(&self) -> Option<&str> {
        self.msg.as_ref().map(Macro::raw)
    }
}

/// `SecMarker NAME`: a target for `skipAfter`.
#[derive(Clone, Debug)]
pub struct Marker {
    pub name: Box<str>,
    pub file: Arc<str>,
    pub line: u32,
}

/// Rules and markers, in file order.
#[derive(Clone, Debug)]
pub enum Entry {
    Rule(Box<Rule>),
    Marker(Marker),
}

/// `SecRequestBodyLimitAction` / `SecResponseBodyLimitAction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitAction {
    Reject,
    ProcessPartial,
}

/// The engine-wide settings the directives set (`None`: not configured;
/// the engine uses ModSecurity's default).
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub rule_engine: Option<EngineMode>,
    pub request_body_access: Option<bool>,
    pub response_body_access: Option<bool>,
    pub request_body_limit: Option<u64>,
    pub request_body_no_files_limit: Option<u64>,
    pub request_body_in_memory_limit: Option<u64>,
    pub request_body_limit_action: Option<LimitAction>,
    pub request_body_json_depth_limit: Option<u64>,
    pub arguments_limit: Option<u64>,
    pub response_body_limit: Option<u64>,
    pub response_body_limit_action: Option<LimitAction>,
    /// `SecResponseBodyMimeType` (accumulates; `...TypesClear` empties).
    pub response_body_mime_types: Option<Vec<Box<str>>>,
    pub argument_separator: Option<Box<str>>,
    pub cookie_format: Option<u8>,
    pub component_signatures: Vec<Box<str>>,
    pub collection_timeout: Option<u64>,
    pub pcre_match_limit: Option<u64>,
    pub pcre_match_limit_recursion: Option<u64>,
    pub tmp_dir: Option<Box<str>>,
    pub data_dir: Option<Box<str>>,
    pub status_engine: Option<bool>,
    pub audit_engine: Option<AuditEngine>,
    /// Audit and debug log directives, recorded as written (the WAF's own
    /// audit log is configured in Switchyard's configuration).
    pub log_directives: Vec<(Box<str>, Vec<Box<str>>)>,
}

/// A directive accepted but ignored, or a remark worth logging at load.
#[derive(Clone, Debug)]
pub struct Note {
    pub file: Arc<str>,
    pub line: u32,
    pub message: String,
}

/// A loaded rule set: rules and markers in file order, with chains linked,
/// defaults applied and load-time exclusions done.
#[derive(Clone, Debug, Default)]
pub struct Ruleset {
    pub entries: Vec<Entry>,
    pub config: Config,
    /// `SecDefaultAction` per phase (index 1 to 5), as last set.
    pub default_actions: [Option<Vec<Action>>; 6],
    pub notes: Vec<Note>,
    pub(crate) ids: HashMap<u64, usize>,
}

impl Ruleset {
    /// Rules (chain starters and single rules) in file order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Rule(r) => Some(&**r),
            Entry::Marker(_) => None,
        })
    }

    pub fn markers(&self) -> impl Iterator<Item = &Marker> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Marker(m) => Some(m),
            Entry::Rule(_) => None,
        })
    }

    /// The rule with this id.
    pub fn rule(&self, id: u64) -> Option<&Rule> {
        match self.entries.get(*self.ids.get(&id)?) {
            Some(Entry::Rule(r)) => Some(r),
            _ => None,
        }
    }

    /// The position in [`Ruleset::entries`] of the rule with this id.
    pub fn position(&self, id: u64) -> Option<usize> {
        self.ids.get(&id).copied()
    }

    pub(crate) fn reindex(&mut self) {
        self.ids.clear();
        for (i, e) in self.entries.iter().enumerate() {
            if let Entry::Rule(r) = e {
                if let Some(id) = r.id {
                    self.ids.insert(id, i);
                }
            }
        }
    }
}
