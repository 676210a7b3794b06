//! A transaction: the request's collections, the TX variables, and the
//! phases run over the compiled rules with ModSecurity v3's semantics.
//!
//! Here the transaction, its state and the phase API; the rest by job,
//! each file adding its own `impl Transaction` (imports run one way,
//! from the later files of this list to the earlier):
//! - `data`: what rules read (the request and response collections,
//!   TX-like maps, collected values);
//! - `cache`: transformation results and prefilter summaries per value;
//! - `collect`: the values of a target;
//! - `request`: the request head and body into the collections (the
//!   body parsers' sink);
//! - `actions`: what a match does (setvar, ctl, initcol, setenv, macros);
//! - `link`: a link's values through its transformations to its operator;
//! - `eval`: the phase loop and a rule's evaluation.

mod actions;
mod cache;
mod collect;
mod data;
mod eval;
mod link;
mod request;

use std::cell::RefCell;
use std::sync::Arc;

use self::cache::{Cache, ListSummary};
use self::data::{small, Data, Val, VarMap, KEEP_BYTES};
use crate::engine::compile::Exclusion;
use crate::engine::{body, Engine, Intervention, InterventionKind, Outcome, Request};
use crate::operator::Captures;
use crate::seclang::{AllowScope, BodyProcessor, Collection, EngineMode, IdRange, LimitAction};

/// The engine, borrowed or shared.
#[derive(Clone)]
enum EngineRef<'e> {
    Borrowed(&'e Engine),
    Shared(Arc<Engine>),
}

impl std::ops::Deref for EngineRef<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        match self {
            EngineRef::Borrowed(e) => e,
            EngineRef::Shared(e) => e,
        }
    }
}

/// Most idle scratch sets kept per thread. A worker holds one transaction
/// per request in flight (from the request head until the response is
/// logged, so across the member's answer): with 20 keep-alive clients on
/// one worker about 20 are alive at once, and a pool of 2 made the others
/// allocate their lists and TX table afresh (13 % of the CPU per request
/// in front of the bench's 80/20 GET/POST mix). A set holds about 130 KiB
/// once used, so a worker keeps at most about 4 MiB.
pub(super) const POOLED: usize = 32;

/// How many idle scratch sets this thread keeps.
#[cfg(test)]
pub(super) fn pooled_scratch() -> usize {
    SCRATCH.with(|p| p.borrow().len())
}

/// What a finished transaction leaves for the next one on its thread:
/// the capacity of its lists, buffers and TX table, which a new
/// transaction would otherwise allocate again, hundreds of times.
#[derive(Default)]
struct Scratch {
    cache: Cache,
    vals: Vec<Val>,
    lists: Vec<(u32, Vec<Val>)>,
    matched_vars: Vec<(Vec<u8>, Vec<u8>)>,
    mv: (Vec<u8>, Vec<u8>),
    bufs: [Vec<u8>; 5],
    sel_cache: Vec<(u64, u64)>,
    summaries: Vec<ListSummary>,
    tx: VarMap,
    d: Data,
}

thread_local! {
    static SCRATCH: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        let mut lists = std::mem::take(&mut self.lists);
        for (g, v) in &mut lists {
            *g = 0;
            v.clear();
        }
        let mut vals = std::mem::take(&mut self.vals);
        vals.clear();
        let mut matched_vars = std::mem::take(&mut self.st.matched_vars);
        matched_vars.truncate(64);
        for (n, v) in &mut matched_vars {
            if n.capacity() > KEEP_BYTES || v.capacity() > KEEP_BYTES {
                *n = Vec::new();
                *v = Vec::new();
            }
        }
        let (n, v) = std::mem::take(&mut self.st.mv);
        let mut tx = std::mem::take(&mut self.st.tx);
        tx.recycle();
        let mut d = std::mem::take(&mut self.d);
        d.recycle();
        let mut sel_cache = std::mem::take(self.sel_cache.get_mut());
        sel_cache.clear();
        let summaries = std::mem::take(&mut self.summaries);
        let sc = Scratch {
            cache: std::mem::take(&mut self.cache),
            vals,
            lists,
            matched_vars,
            mv: (small(n), small(v)),
            bufs: [
                small(std::mem::take(&mut self.st.cur_msg)),
                small(std::mem::take(&mut self.st.cur_logdata)),
                small(std::mem::take(&mut self.setbuf)),
                small(std::mem::take(&mut self.scratch)),
                small(std::mem::take(&mut self.tmpval)),
            ],
            sel_cache,
            summaries,
            tx,
            d,
        };
        // Not during the thread's teardown, nor if the pool is busy.
        let _ = SCRATCH.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                if p.len() < POOLED {
                    p.push(sc);
                }
            }
        });
    }
}

/// Which rules a target removal applies to.
#[derive(Debug, Clone)]
enum Which {
    Ids(Vec<IdRange>),
    /// [`Program::tag_id`].
    Tag(u32),
    Msg(Box<str>),
}

/// What rules write and the flow of control.
struct State {
    mode: EngineMode,
    tx: VarMap,
    /// IP, GLOBAL, SESSION, USER, RESOURCE (per transaction; `initcol`
    /// names them).
    others: Vec<(Box<str>, VarMap)>,
    env: VarMap,
    /// MATCHED_VAR_NAME and MATCHED_VAR (buffers reused).
    mv: (Vec<u8>, Vec<u8>),
    has_mv: bool,
    /// MATCHED_VARS: the first `mvs_len` entries (buffers reused).
    matched_vars: Vec<(Vec<u8>, Vec<u8>)>,
    mvs_len: usize,
    skip_marker: Option<u32>,
    skip_next: u32,
    allow: Option<AllowScope>,
    allow_phase: u8,
    removed_ids: Vec<IdRange>,
    /// [`Program::tag_id`]s.
    removed_tags: Vec<u32>,
    removed_msgs: Vec<Box<str>>,
    removed_targets: Vec<(Which, Exclusion)>,
    body_processor: Option<BodyProcessor>,
    request_body_access: bool,
    response_body_access: bool,
    request_body_limit: u64,
    request_body_limit_action: LimitAction,
    highest_severity: Option<u8>,
    captures: Captures,
    ops: u64,
    scanned: u64,
    limit_hit: bool,
    /// The message and logdata of the rule being evaluated.
    cur_msg: Vec<u8>,
    cur_logdata: Vec<u8>,
}

/// A request going through the phases. Feed it in order:
/// [`Transaction::process_request_headers`] (phase 1),
/// [`Transaction::process_request_body`] (phase 2: call it also when there
/// is no body), [`Transaction::process_response_headers`] (3),
/// [`Transaction::process_response_body`] (4),
/// [`Transaction::process_logging`] (5). Each returns the outcome so far;
/// once interrupted, later phases do nothing (but logging).
pub struct Transaction<'e> {
    eng: EngineRef<'e>,
    d: Data,
    st: State,
    cache: Cache,
    outcome: Outcome,
    /// The last phase run.
    done: u8,
    started: std::time::Instant,
    vals: Vec<Val>,
    /// A setvar's value as it is expanded.
    setbuf: Vec<u8>,
    /// The values of each shared target list (`Link::targets_id`), valid
    /// while their generation is `lists_gen` (bumped at each phase and by
    /// each ctl: what changes the data or the removals).
    lists: Vec<(u32, Vec<Val>)>,
    lists_gen: u32,
    scratch: Vec<u8>,
    tmpval: Vec<u8>,
    /// Key selector regex results per slot (known bits, match bits).
    sel_cache: RefCell<Vec<(u64, u64)>>,
    /// The target removals of the link being evaluated (reused).
    removals: Vec<Exclusion>,
    /// Per `Link::summary_group`, valid while its generation is
    /// `lists_gen`.
    summaries: Vec<ListSummary>,
    /// A multiMatch link's pipeline nodes and distinct results (reused).
    mm_path: Vec<u32>,
    mm_results: Vec<u32>,
    body_type: Option<BodyProcessor>,
    content_type: Vec<u8>,
    /// Whether phase 1 starts from the engine's head (tests compare).
    use_head: bool,
}

impl<'e> Transaction<'e> {
    pub(crate) fn new(eng: &'e Engine, req: Request<'_>) -> Transaction<'e> {
        Transaction::build(EngineRef::Borrowed(eng), req)
    }

    pub(crate) fn new_arc(eng: Arc<Engine>, req: Request<'_>) -> Transaction<'static> {
        Transaction::build(EngineRef::Shared(eng), req)
    }

    fn build(eng: EngineRef<'e>, req: Request<'_>) -> Transaction<'e> {
        let nodes = eng.prog.tnodes.len();
        let target_lists = eng.prog.target_lists;
        let l = &eng.limits;
        let mut sc = SCRATCH
            .try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
            .ok()
            .flatten()
            .unwrap_or_default();
        sc.cache.reset(nodes);
        sc.lists.truncate(target_lists);
        sc.lists.resize_with(target_lists, Default::default);
        sc.summaries.clear();
        sc.summaries
            .resize(eng.prog.summary_groups, ListSummary::default());
        let hint = eng.tx_vars_hint.load(std::sync::atomic::Ordering::Relaxed);
        sc.tx.entries.reserve(hint);
        sc.tx.index.reserve(hint);
        let [cur_msg, cur_logdata, setbuf, scratch, tmpval] = sc.bufs;
        let st = State {
            mode: l.mode,
            tx: sc.tx,
            others: Vec::new(),
            env: VarMap::default(),
            mv: sc.mv,
            has_mv: false,
            matched_vars: sc.matched_vars,
            mvs_len: 0,
            skip_marker: None,
            skip_next: 0,
            allow: None,
            allow_phase: 0,
            removed_ids: Vec::new(),
            removed_tags: Vec::new(),
            removed_msgs: Vec::new(),
            removed_targets: Vec::new(),
            body_processor: None,
            request_body_access: l.request_body_access,
            response_body_access: l.response_body_access,
            request_body_limit: l.request_body_limit,
            request_body_limit_action: l.request_body_limit_action,
            highest_severity: None,
            captures: Captures::new(),
            ops: 0,
            scanned: 0,
            limit_hit: false,
            cur_msg,
            cur_logdata,
        };
        let mut t = Transaction {
            eng,
            d: sc.d,
            st,
            cache: sc.cache,
            outcome: Outcome::default(),
            done: 0,
            started: std::time::Instant::now(),
            vals: sc.vals,
            setbuf,
            lists: sc.lists,
            lists_gen: 1,
            scratch,
            tmpval,
            sel_cache: RefCell::new(sc.sel_cache),
            removals: Vec::new(),
            summaries: sc.summaries,
            mm_path: Vec::new(),
            mm_results: Vec::new(),
            body_type: None,
            content_type: Vec::new(),
            use_head: true,
        };
        t.set_request(req);
        t
    }
    /// Phase 1.
    pub fn process_request_headers(&mut self) -> &Outcome {
        if self.done < 1 {
            self.done = 1;
            self.run_phase(1);
        }
        &self.outcome
    }

    /// Phase 2 with the request body (possibly empty) and its
    /// `Content-Type` (the request header's if `None`).
    pub fn process_request_body(&mut self, body: &[u8], content_type: Option<&[u8]>) -> &Outcome {
        self.process_request_headers();
        if self.done >= 2 {
            return &self.outcome;
        }
        self.done = 2;
        if self.outcome.interrupted.is_some() || self.st.mode == EngineMode::Off {
            return &self.outcome;
        }
        if let Some(ct) = content_type {
            self.content_type = ct.to_vec();
        }
        self.d.set(Collection::InboundDataError, "0");
        let mut body = body;
        let limit = self.st.request_body_limit;
        if limit > 0 && body.len() as u64 > limit {
            self.d.set(Collection::InboundDataError, "1");
            match self.st.request_body_limit_action {
                LimitAction::ProcessPartial => body = &body[..limit as usize],
                LimitAction::Reject => {
                    if self.st.mode == EngineMode::On {
                        self.outcome.interrupted = Some(Intervention {
                            kind: InterventionKind::Deny,
                            status: 403,
                            rule_id: 0,
                            phase: 2,
                            message: "Request body limit is marked to reject the request".into(),
                        });
                        return &self.outcome;
                    }
                    body = &body[..limit as usize];
                }
            }
        }
        if self.st.request_body_access {
            self.process_body(body);
        }
        self.run_phase(2);
        &self.outcome
    }

    fn process_body(&mut self, body: &[u8]) {
        use Collection as C;
        let proc_ = self.st.body_processor.or(self.body_type);
        let nofiles = self.eng.limits.request_body_no_files_limit;
        let mut ok = true;
        match proc_ {
            Some(p @ (BodyProcessor::UrlEncoded | BodyProcessor::Json | BodyProcessor::Xml))
                if nofiles > 0 && body.len() as u64 > nofiles =>
            {
                let _ = p;
                self.d.set(C::ReqbodyError, "1");
                self.d.set(
                    C::ReqbodyErrorMsg,
                    "Request body excluding files is bigger than the maximum expected.",
                );
                self.d.set(C::InboundDataError, "1");
                ok = false;
            }
            _ => {}
        }
        if ok {
            match proc_ {
                Some(BodyProcessor::Xml) => {
                    let r = body::xml(self, body);
                    self.body_result("XML", r);
                }
                Some(BodyProcessor::Json) => {
                    let r = if body.is_empty() {
                        Ok(())
                    } else {
                        body::json(self, body)
                    };
                    self.body_result("JSON", r);
                }
                Some(BodyProcessor::Multipart) => {
                    let ct = std::mem::take(&mut self.content_type);
                    let r = body::multipart(self, &ct, body);
                    self.content_type = ct;
                    self.body_result("Multipart", r);
                }
                Some(BodyProcessor::UrlEncoded) => {
                    self.add_urlencoded(body, true);
                    self.d.set(C::ReqbodyError, "0");
                    self.d.set(C::ReqbodyProcessorError, "0");
                }
                None => {
                    self.d.set(C::ReqbodyError, "0");
                    self.d.set(C::ReqbodyProcessorError, "0");
                }
            }
        }
        if !body.is_empty() {
            self.d.body = body.to_vec();
            self.d.set(C::RequestBody, body);
            self.d.set(C::RequestBodyLength, body.len().to_string());
        }
    }

    fn body_result(&mut self, what: &str, r: Result<(), String>) {
        use Collection as C;
        match r {
            Ok(()) => {
                self.d.set(C::ReqbodyError, "0");
                self.d.set(C::ReqbodyProcessorError, "0");
            }
            Err(e) => {
                let msg = format!("{what} parsing error: {e}");
                self.d.set(C::ReqbodyError, "1");
                self.d.set(C::ReqbodyProcessorError, "1");
                self.d.set(C::ReqbodyErrorMsg, msg.as_bytes());
                self.d.set(C::ReqbodyProcessorErrorMsg, msg);
            }
        }
    }

    /// Phase 3: the response status and headers.
    pub fn process_response_headers(
        &mut self,
        status: u16,
        protocol: &str,
        headers: &[(&[u8], &[u8])],
    ) -> &Outcome {
        self.process_request_body(b"", None);
        if self.done >= 3 {
            return &self.outcome;
        }
        self.done = 3;
        if self.outcome.interrupted.is_some() {
            return &self.outcome;
        }
        use Collection as C;
        self.d.set(C::ResponseStatus, status.to_string());
        let proto = if protocol.is_empty() {
            "HTTP/1.1"
        } else {
            protocol
        };
        self.d.set(C::ResponseProtocol, proto);
        self.d.set(C::StatusLine, format!("{proto} {status}"));
        for (n, v) in headers {
            let kv = self.d.kv(n, v);
            self.d.resp_headers.push(kv);
            if n.eq_ignore_ascii_case(b"content-type") {
                self.d.set(C::ResponseContentType, *v);
            } else if n.eq_ignore_ascii_case(b"content-length") {
                self.d.set(C::ResponseContentLength, *v);
            }
        }
        self.run_phase(3);
        &self.outcome
    }

    /// Whether phase 4 wants the response body (body access on and its
    /// type listed in `SecResponseBodyMimeType`).
    pub fn wants_response_body(&self) -> bool {
        if !self.st.response_body_access {
            return false;
        }
        let ct = self.d.get(Collection::ResponseContentType).unwrap_or(b"");
        let ct = match memchr::memchr(b';', ct) {
            Some(p) => &ct[..p],
            None => ct,
        };
        let ct = ct.trim_ascii();
        self.eng
            .limits
            .response_mime_types
            .iter()
            .any(|m| m.as_bytes().eq_ignore_ascii_case(ct))
    }

    /// Phase 4 with the response body (or the part of it inspected).
    pub fn process_response_body(&mut self, body: &[u8]) -> &Outcome {
        if self.done < 3 {
            self.process_response_headers(200, "", &[]);
        }
        if self.done >= 4 {
            return &self.outcome;
        }
        self.done = 4;
        if self.outcome.interrupted.is_some() {
            return &self.outcome;
        }
        if self.wants_response_body() {
            let limit = self.eng.limits.response_body_limit as usize;
            let b = if limit > 0 && body.len() > limit {
                self.d.set(Collection::OutboundDataError, "1");
                &body[..limit]
            } else {
                self.d.set(Collection::OutboundDataError, "0");
                body
            };
            self.d.set(Collection::ResponseBody, b);
        }
        self.run_phase(4);
        &self.outcome
    }

    /// Phase 5 (logging): runs whatever happened before.
    pub fn process_logging(&mut self) -> &Outcome {
        if self.done >= 5 {
            return &self.outcome;
        }
        self.done = 5;
        let interrupted = self.outcome.interrupted.take();
        self.run_phase(5);
        if interrupted.is_some() {
            self.outcome.interrupted = interrupted;
        }
        &self.outcome
    }

    /// Operator evaluations that count against the regex work bound, and
    /// the bytes they scanned.
    pub fn work(&self) -> (u64, u64) {
        (self.st.ops, self.st.scanned)
    }

    /// The outcome so far.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// Takes the outcome (the transaction is finished).
    pub fn into_outcome(mut self) -> Outcome {
        std::mem::take(&mut self.outcome)
    }

    /// A TX variable (for tests and the audit log).
    pub fn tx(&self, key: &str) -> Option<&[u8]> {
        self.st.tx.get(key.to_ascii_lowercase().as_bytes())
    }

    /// Runs phase 1 from its first rule, without the engine's head.
    #[cfg(test)]
    pub(crate) fn without_head(&mut self) {
        self.use_head = false;
    }

    /// Sets a TX variable before phase 1 runs: per-vserver settings (the
    /// paranoia level, thresholds) on an engine shared by vservers, as a
    /// setup file's `SecAction setvar:` would. The CRS initialisation
    /// rules only set what is still unset, so these win.
    pub fn preset_tx(&mut self, key: &[u8], value: &[u8]) {
        self.st.tx.set(key, value.to_vec());
    }

    /// The engine mode for this transaction (a vserver's off / detection
    /// only / blocking over one shared engine). `ctl:ruleEngine` may still
    /// change it.
    pub fn set_mode(&mut self, mode: EngineMode) {
        self.st.mode = mode;
    }

    /// Request and response body access for this transaction
    /// (`SecRequestBodyAccess` / `SecResponseBodyAccess` per vserver).
    pub fn set_body_access(&mut self, request: bool, response: bool) {
        self.st.request_body_access = request;
        self.st.response_body_access = response;
    }

    /// The request body limit for this transaction (`SecRequestBodyLimit`
    /// per vserver).
    pub fn set_request_body_limit(&mut self, bytes: u64, action: LimitAction) {
        self.st.request_body_limit = bytes;
        self.st.request_body_limit_action = action;
    }
}
