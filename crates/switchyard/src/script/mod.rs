//! Event scripts in embedded Lua (`[vserver.script]`, docs/scripting.md):
//! the operator's own rule where no declarative setting fits, run as a
//! stage of the pipeline (`proxy/scripting.rs`).
//!
//! Lua 5.4 through mlua, its interpreter vendored (built from source, no
//! system library). Chosen by measurement over LuaJIT and Luau (the
//! figures are in docs/scripting.md): per event call it costs about what
//! Luau does, it counts instructions exactly (LuaJIT's count hook does
//! not fire inside compiled traces, so an endless loop there is never
//! stopped; Luau only offers an interrupt at calls and loop back-edges),
//! mlua enforces its memory limit (not on LuaJIT), and it is plain C that
//! builds in seconds where Luau's C++ takes minutes.
//!
//! - A `Script` is one file of one configuration generation, checked when
//!   the configuration is built (syntax, and its top level run once in a
//!   sandboxed state under the limits): `switchyard check` and a reload
//!   report `FILE:LINE: message` and a broken script keeps the running
//!   configuration.
//! - Each worker runs it in a `State` of its own (`state`): no lock on the
//!   request path, since workers are single-threaded. A state is made on
//!   the first request a worker sees for that script and dropped once the
//!   configuration that had the script is gone (requests in flight keep
//!   theirs: they hold an `Rc`).
//! - The sandbox: the string, table, math and utf8 libraries, the base
//!   library without `load`, `loadfile`, `dofile`, `collectgarbage`,
//!   `print` and `warn`; no `io`, `os` (but `os.time` and `os.clock`),
//!   `require`, `debug`, `coroutine` or `string.dump`; no `__gc`
//!   metamethod (a finalizer runs outside any event's budget). `pcall`
//!   and `xpcall` are the sandbox's own: they cannot catch the instruction
//!   limit or an out-of-memory error.
//! - The limits: `max_instructions` per event call (a count hook every
//!   1000 instructions), `max_memory` per state (mlua's allocator). Over
//!   either the event fails (the request gets 500); a state that ran out
//!   of memory is replaced by a fresh one.
//!
//! `txn.rs` is what an event's `r` offers, `fast.rs` its hot methods and
//! fields as plain C functions (through mlua, under a memory limit, each
//! call cost about 3,000 instructions), `library.rs` the `sy.*` helpers.

pub mod callout;
mod fast;
pub mod library;
mod txn;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use mlua::{AnyUserData, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value};

use crate::http::message::{Request, Response};
pub use txn::{Answer, BodyEvent, Conn, ConnEvent, Effects, Info, Picked};

/// Instructions between two looks at the budget: the hook's cost (a
/// call into Rust) is paid once per this many instructions, and a
/// script may overrun its budget by at most this many.
const HOOK_STEP: u32 = 1000;

/// The limits of one script, from `[vserver.script]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Lua VM instructions one event call may run.
    pub max_instructions: u64,
    /// Bytes one worker's state may allocate.
    pub max_memory: usize,
    /// Bytes a body event may collect (`max_body`).
    pub max_body: usize,
}

/// The events a script defines (global functions of these names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Events {
    pub request: bool,
    pub response: bool,
    pub log: bool,
    pub request_body: bool,
    pub response_body: bool,
    /// A member was picked for the request (each attempt).
    pub member: bool,
    /// The TLS ClientHello of an HTTP vserver that terminates TLS.
    pub client_hello: bool,
    /// The connection is accepted (HTTP and `tcp` vservers).
    pub accept: bool,
    /// The events of `tcp` vservers.
    pub client_data: bool,
    pub server_data: bool,
    pub close: bool,
}

impl Events {
    /// Any event only HTTP vservers run (`on_client_hello` runs on tcp
    /// vservers that terminate TLS too).
    pub fn http(&self) -> bool {
        self.exchange() || self.client_hello
    }

    /// The events of an HTTP exchange (a tcp vserver has none).
    pub fn exchange(&self) -> bool {
        self.request
            || self.response
            || self.log
            || self.request_body
            || self.response_body
            || self.member
    }

    /// Any event only `tcp` vservers run (`on_accept` is both kinds').
    pub fn l4(&self) -> bool {
        self.client_data || self.server_data || self.close
    }
}

const EVENT_NAMES: [&str; 11] = [
    "on_request",
    "on_response",
    "on_log",
    "on_request_body",
    "on_response_body",
    "on_member",
    "on_accept",
    "on_client_data",
    "on_server_data",
    "on_close",
    "on_client_hello",
];

/// A script of one configuration generation: checked, shared by the
/// workers (each runs it in a `State` of its own).
#[derive(Debug)]
pub struct Script {
    /// Unique per build: a worker's state belongs to one build.
    id: u64,
    /// The file as the configuration names it: the chunk name, so every
    /// error reads FILE:LINE.
    pub name: String,
    source: Vec<u8>,
    pub limits: Limits,
    /// The pools `r:use_pool` may name, in the order the snapshot keeps
    /// their `Arc`s (`VsScript::pools`).
    pub pools: Vec<String>,
    /// How a rewritten path is normalized (the vserver's rules).
    pub normalize: crate::http::normalize::Rules,
    pub vserver: String,
    /// The vserver's configured certificates, which `c:use_cert` chooses
    /// among (set by the configuration after `compile`).
    pub certs: Option<Arc<crate::tls::CertStore>>,
    pub events: Events,
    /// `on_request` may wait (the script calls `r:sideband`): it runs as
    /// a coroutine (`State::on_request_waiting`). Found in the text: a
    /// script without the word pays nothing for coroutines, and one that
    /// reaches the method another way gets a clear error.
    pub waits: bool,
    /// Errors are logged at most once per second per script
    /// (`clock::now_ms` of the last line; errors not logged since).
    last_logged_ms: AtomicU64,
    unlogged: AtomicU64,
}

/// Why an event call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A Lua error (raised, or a bad call of the API): "FILE:LINE: message".
    Error(String),
    /// Over `max_instructions`.
    Timeout(String),
    /// Over `max_memory`.
    Memory(String),
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Error(m) | Failure::Timeout(m) | Failure::Memory(m) => m,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl Script {
    /// Checks `source` (syntax, then its top level run once in a
    /// sandboxed state under `limits`) and finds its events. The error is
    /// "FILE:LINE: message".
    pub fn compile(
        name: &str,
        source: Vec<u8>,
        limits: Limits,
        pools: Vec<String>,
        normalize: crate::http::normalize::Rules,
        vserver: &str,
    ) -> Result<Script, String> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut s = Script {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            source,
            limits,
            pools,
            normalize,
            vserver: vserver.to_string(),
            certs: None,
            events: Events::default(),
            waits: false,
            last_logged_ms: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
        };
        let st = State::new(&s).map_err(|f| f.message().to_string())?;
        s.events = st.events();
        s.waits = s.events.request && memchr::memmem::find(&s.source, b"sideband").is_some();
        if s.events == Events::default() {
            return Err(format!(
                "{name}: defines none of the events {}: it would do nothing",
                EVENT_NAMES.join(", ")
            ));
        }
        Ok(s)
    }

    /// Logs a failed event, at most once per second per script (a script
    /// failing on every request must not flood the log).
    pub fn log_failure(&self, f: &Failure) {
        let now = crate::clock::now_ms();
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < 1000
            || self
                .last_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let more = self.unlogged.swap(0, Ordering::Relaxed);
        let kind = match f {
            Failure::Error(_) => "error",
            Failure::Timeout(_) => "instruction limit",
            Failure::Memory(_) => "memory limit",
        };
        if more > 0 {
            crate::log::warn(format_args!(
                "vserver {}: script {kind}: {} ({more} more failures not logged in the last second)",
                self.vserver,
                f.message()
            ));
        } else {
            crate::log::warn(format_args!(
                "vserver {}: script {kind}: {}",
                self.vserver,
                f.message()
            ));
        }
    }
}

/// What the instruction hook and the sandbox's `pcall` share with the
/// event call in progress.
#[derive(Default)]
struct Guard {
    /// Instructions left to the call in progress (0 between calls: a
    /// finalizer or stray code outside an event has no budget).
    budget: Cell<i64>,
    /// Set once the budget is spent: "FILE:LINE: ..." of where.
    tripped: RefCell<Option<String>>,
}

/// One worker's state for one script.
pub struct State {
    lua: Lua,
    script: Weak<Script>,
    id: u64,
    limits: Limits,
    name: String,
    on_request: Option<Function>,
    on_response: Option<Function>,
    on_log: Option<Function>,
    on_request_body: Option<Function>,
    on_response_body: Option<Function>,
    on_member: Option<Function>,
    on_accept: Option<Function>,
    on_client_data: Option<Function>,
    on_server_data: Option<Function>,
    on_close: Option<Function>,
    on_client_hello: Option<Function>,
    /// The `r` every event gets: one per state, loaded with the request's
    /// parts for each call (no userdata made per request). The userdata
    /// holds `cell`, which the state loads and unloads directly and the
    /// hot methods (`fast.rs`) reach through the worker's current call.
    txn: AnyUserData,
    cell: Rc<RefCell<txn::Txn>>,
    guard: Rc<Guard>,
}

thread_local! {
    /// This worker's states, one per script it has run (a handful).
    static STATES: RefCell<Vec<Rc<State>>> = const { RefCell::new(Vec::new()) };
}

/// This worker's state for `script`, made on first use. States of scripts
/// no configuration holds any more are dropped then.
pub fn state(script: &Arc<Script>) -> Result<Rc<State>, Failure> {
    STATES.with(|all| {
        if let Some(s) = all.borrow().iter().find(|s| s.id == script.id) {
            return Ok(s.clone());
        }
        let mut st = State::new(script)?;
        st.script = Arc::downgrade(script);
        let st = Rc::new(st);
        let mut all = all.borrow_mut();
        all.retain(|s| s.script.strong_count() > 0);
        all.push(st.clone());
        Ok(st)
    })
}

/// Forgets this worker's state for `script` (it ran out of memory: the
/// next request gets a fresh one).
fn discard(id: u64) {
    STATES.with(|all| all.borrow_mut().retain(|s| s.id != id));
}

impl State {
    fn new(script: &Script) -> Result<State, Failure> {
        let fail = |e: mlua::Error| {
            Failure::Error(format!("{}: {}", script.name, first_line(&e.to_string())))
        };
        let lua = Lua::new_with(
            StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8,
            LuaOptions::new(),
        )
        .map_err(fail)?;
        let guard = Rc::new(Guard::default());
        sandbox(&lua, &guard).map_err(fail)?;
        library::install(&lua).map_err(fail)?;
        lua.set_memory_limit(script.limits.max_memory)
            .map_err(fail)?;
        let g = guard.clone();
        let max = script.limits.max_instructions;
        let name = script.name.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_STEP),
            move |lua, debug| {
                let left = g.budget.get() - i64::from(HOOK_STEP);
                g.budget.set(left);
                if left >= 0 {
                    return Ok(mlua::VmState::Continue);
                }
                // The pattern matcher charges the budget from inside
                // string.find/match/gmatch/gsub (vendor/lua-src): the line
                // is the nearest Lua caller's (pcall may be between).
                let here = |d: &mlua::Debug| {
                    let line = d.current_line()?;
                    let src = d.source().short_src?.into_owned();
                    Some(format!("{src}:{line}"))
                };
                let at = here(debug)
                    .or_else(|| (1..8).find_map(|l| lua.inspect_stack(l, here).flatten()))
                    .unwrap_or_else(|| "?:0".to_string());
                let at = whole_name(&at, &name);
                let msg = format!("{at}: more than {max} instructions (max_instructions)");
                g.tripped.borrow_mut().get_or_insert_with(|| msg.clone());
                Err(mlua::Error::runtime(msg))
            },
        )
        .map_err(fail)?;
        let cell = Rc::new(RefCell::new(txn::Txn::new(script)));
        let txn = lua.create_userdata(cell.clone()).map_err(fail)?;
        // SAFETY: `install` works on the state exec_raw lends, `r` at
        // index 1, and holds nothing with a destructor (its doc).
        unsafe { lua.exec_raw::<()>(&txn, |state| fast::install(state)) }.map_err(fail)?;
        // mlua opened `coroutine` for `r:sideband` (its poller keeps
        // `coroutine.yield` for itself); scripts do not get it: a yield of
        // their own would stop an event that cannot wait.
        lua.globals()
            .raw_set("coroutine", Value::Nil)
            .map_err(fail)?;
        let mut st = State {
            lua,
            script: Weak::new(),
            id: script.id,
            limits: script.limits,
            name: script.name.clone(),
            on_request: None,
            on_response: None,
            on_log: None,
            on_request_body: None,
            on_response_body: None,
            on_member: None,
            on_accept: None,
            on_client_data: None,
            on_server_data: None,
            on_close: None,
            on_client_hello: None,
            txn,
            cell,
            guard,
        };
        // The top level defines the events (and whatever the script keeps
        // for all its requests), under the same limits as an event.
        let chunk = st
            .lua
            .load(&script.source[..])
            .set_name(format!("@{}", script.name))
            // Never bytecode, whatever the file starts with: Lua does not
            // check binary chunks.
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| st.failure(e))?;
        st.guarded(|| chunk.call::<()>(()))?;
        let globals = st.lua.globals();
        let event = |name: &str| -> Result<Option<Function>, Failure> {
            match globals.raw_get::<Value>(name) {
                Ok(Value::Function(f)) => Ok(Some(f)),
                Ok(Value::Nil) => Ok(None),
                Ok(other) => Err(Failure::Error(format!(
                    "{}: {name} must be a function, not {}",
                    script.name,
                    other.type_name()
                ))),
                Err(e) => Err(Failure::Error(e.to_string())),
            }
        };
        st.on_request = event(EVENT_NAMES[0])?;
        st.on_response = event(EVENT_NAMES[1])?;
        st.on_log = event(EVENT_NAMES[2])?;
        st.on_request_body = event(EVENT_NAMES[3])?;
        st.on_response_body = event(EVENT_NAMES[4])?;
        st.on_member = event(EVENT_NAMES[5])?;
        st.on_accept = event(EVENT_NAMES[6])?;
        st.on_client_data = event(EVENT_NAMES[7])?;
        st.on_server_data = event(EVENT_NAMES[8])?;
        st.on_close = event(EVENT_NAMES[9])?;
        st.on_client_hello = event(EVENT_NAMES[10])?;
        Ok(st)
    }

    fn events(&self) -> Events {
        Events {
            request: self.on_request.is_some(),
            response: self.on_response.is_some(),
            log: self.on_log.is_some(),
            request_body: self.on_request_body.is_some(),
            response_body: self.on_response_body.is_some(),
            member: self.on_member.is_some(),
            accept: self.on_accept.is_some(),
            client_data: self.on_client_data.is_some(),
            server_data: self.on_server_data.is_some(),
            close: self.on_close.is_some(),
            client_hello: self.on_client_hello.is_some(),
        }
    }

    /// Runs `f` with a fresh instruction budget.
    fn guarded<R>(&self, f: impl FnOnce() -> mlua::Result<R>) -> Result<R, Failure> {
        self.guard
            .budget
            .set(i64::try_from(self.limits.max_instructions).unwrap_or(i64::MAX));
        self.guard.tripped.borrow_mut().take();
        let r = f();
        self.guard.budget.set(0);
        r.map_err(|e| self.failure(e))
    }

    /// What went wrong, as "FILE:LINE: message".
    fn failure(&self, e: mlua::Error) -> Failure {
        if let Some(at) = self.guard.tripped.borrow_mut().take() {
            return Failure::Timeout(at);
        }
        if is_memory(&e) {
            // Whatever the script keeps may be what filled it: the next
            // request starts from a fresh state.
            discard(self.id);
            return Failure::Memory(format!(
                "{}: more than {} bytes of memory (max_memory)",
                self.name, self.limits.max_memory
            ));
        }
        Failure::Error(describe(&e, &self.name))
    }

    /// Runs `f(r)` with `parts` loaded into `r`; gives the parts back with
    /// what the script did.
    fn call(&self, f: &Function, parts: txn::Parts) -> (txn::Parts, Result<(), Failure>) {
        match self.cell.try_borrow_mut() {
            Ok(mut t) => t.load(parts),
            // Cannot happen (no call is in progress); the parts go back.
            Err(_) => return (parts, Err(Failure::Error(format!("{}: busy", self.name)))),
        }
        let r = self.run(f);
        let parts = match self.cell.try_borrow_mut() {
            Ok(mut t) => t.unload(),
            Err(_) => txn::Parts::default(),
        };
        (parts, r)
    }

    /// Calls `f(r)` under the limits, `r` this call's (`fast::enter`).
    fn run(&self, f: &Function) -> Result<(), Failure> {
        let _entered = fast::enter(self.txn.to_pointer(), &self.cell);
        self.guarded(|| f.call::<()>(&self.txn))
    }

    /// `on_request(r)`: may edit `req`, choose a pool, answer.
    pub fn on_request(
        &self,
        req: &mut Request,
        info: Info,
        vars: &mut Vars,
    ) -> Option<Result<Effects, Failure>> {
        let f = self.on_request.as_ref()?;
        // The hot path: the parts go into `r` in place and come back out
        // field by field, not through a `Parts` moved in and out (`call`).
        match self.cell.try_borrow_mut() {
            Ok(mut t) => {
                let p = t.parts();
                p.req = Some(std::mem::replace(req, txn::placeholder_request()));
                p.info = info;
                p.vars = vars.0.take();
            }
            Err(_) => return Some(Err(Failure::Error(format!("{}: busy", self.name)))),
        }
        let r = self.run(f);
        let out = match self.cell.try_borrow_mut() {
            Ok(mut t) => {
                let p = t.parts();
                if let Some(q) = p.req.take() {
                    *req = q;
                }
                vars.0 = p.vars.take();
                p.info = Info::default();
                std::mem::take(&mut p.out)
            }
            Err(_) => Effects::default(),
        };
        Some(r.map(|()| out))
    }

    /// `on_request(r)` as a coroutine that may wait for call-outs
    /// (`r:sideband`) without blocking the worker: its own `r`, its
    /// instruction budget kept across its waits (other requests' events
    /// run on this state meanwhile).
    pub async fn on_request_waiting(
        &self,
        req: &mut Request,
        info: Info,
        vars: &mut Vars,
        callout: Rc<dyn callout::CallOut>,
    ) -> Option<Result<Effects, Failure>> {
        let f = self.on_request.clone()?;
        let sibling = match self.cell.try_borrow() {
            Ok(t) => Rc::new(RefCell::new(t.sibling())),
            Err(_) => return Some(Err(Failure::Error(format!("{}: busy", self.name)))),
        };
        let ud = match self.lua.create_userdata(sibling.clone()) {
            Ok(u) => u,
            Err(e) => return Some(Err(self.failure(e))),
        };
        let parts = txn::Parts {
            req: Some(std::mem::replace(req, txn::placeholder_request())),
            info,
            vars: vars.0.take(),
            waits: true,
            callout: Some(callout),
            ..Default::default()
        };
        if let Ok(mut t) = sibling.try_borrow_mut() {
            t.load(parts);
        }
        let mut call = Budgeted {
            fut: Box::pin(f.call_async::<()>(ud.clone())),
            r: ud.to_pointer(),
            txn: &sibling,
            guard: &self.guard,
            left: i64::try_from(self.limits.max_instructions).unwrap_or(i64::MAX),
            tripped: None,
        };
        let r = (&mut call).await;
        let tripped = call.tripped.take();
        drop(call);
        let mut back = match sibling.try_borrow_mut() {
            Ok(mut t) => t.unload(),
            Err(_) => txn::Parts::default(),
        };
        if let Some(q) = back.req.take() {
            *req = q;
        }
        vars.0 = back.vars.take();
        let r = match (r, tripped) {
            (Ok(()), _) => Ok(back.out),
            (Err(_), Some(at)) => Err(Failure::Timeout(at)),
            (Err(e), None) => Err(self.failure(e)),
        };
        Some(r)
    }

    /// `on_response(r)`: may edit the member's response head.
    pub fn on_response(
        &self,
        resp: &mut Response,
        info: Info,
        vars: &mut Vars,
    ) -> Option<Result<Effects, Failure>> {
        let f = self.on_response.as_ref()?;
        let parts = txn::Parts {
            resp: Some(std::mem::replace(
                resp,
                Response::new(0, crate::http::message::Framing::None),
            )),
            info,
            vars: vars.0.take(),
            ..Default::default()
        };
        let (mut back, r) = self.call(f, parts);
        if let Some(p) = back.resp.take() {
            *resp = p;
        }
        vars.0 = back.vars.take();
        Some(r.map(|()| back.out))
    }

    /// `on_log(r)`: may add fields to the access log line.
    pub fn on_log(&self, info: Info, vars: &mut Vars) -> Option<Result<Effects, Failure>> {
        let f = self.on_log.as_ref()?;
        let parts = txn::Parts {
            info,
            vars: vars.0.take(),
            log_event: true,
            ..Default::default()
        };
        let (mut back, r) = self.call(f, parts);
        vars.0 = back.vars.take();
        Some(r.map(|()| back.out))
    }

    /// `on_member(r)`: the balancer picked a member (`r.pool`, `r.member`,
    /// `r.attempt`); the script reads them, keeps them in `r.vars`, logs
    /// them. It decides nothing (docs/scripting.md says why).
    pub fn on_member(
        &self,
        picked: Picked,
        info: Info,
        vars: &mut Vars,
    ) -> Option<Result<Effects, Failure>> {
        let f = self.on_member.as_ref()?;
        let parts = txn::Parts {
            info,
            vars: vars.0.take(),
            picked: Some(Box::new(picked)),
            ..Default::default()
        };
        let (mut back, r) = self.call(f, parts);
        vars.0 = back.vars.take();
        Some(r.map(|()| back.out))
    }

    /// `on_request_body(r)` / `on_response_body(r)`: `r.body` is `body`;
    /// the script may replace it (`r.body = ...`), and the request's may
    /// answer instead.
    pub fn on_body(
        &self,
        which: BodyEvent,
        body: Bytes,
        info: Info,
        vars: &mut Vars,
    ) -> Option<Result<Effects, Failure>> {
        let f = match which {
            BodyEvent::Request => self.on_request_body.as_ref()?,
            BodyEvent::Response => self.on_response_body.as_ref()?,
        };
        let parts = txn::Parts {
            info,
            vars: vars.0.take(),
            body: Some(body),
            body_event: Some(which),
            ..Default::default()
        };
        let (mut back, r) = self.call(f, parts);
        vars.0 = back.vars.take();
        Some(r.map(|()| back.out))
    }

    /// An event of a connection (`on_accept`, `on_client_hello`, and a
    /// `tcp` vserver's `on_client_data`, `on_server_data`, `on_close`):
    /// may choose the pool, the certificate (`on_client_hello`) or refuse
    /// the connection.
    pub fn on_conn(
        &self,
        conn: Conn,
        info: Info,
        vars: &mut Vars,
    ) -> Option<Result<Effects, Failure>> {
        let f = match conn.event {
            ConnEvent::Accept => self.on_accept.as_ref()?,
            ConnEvent::ClientData => self.on_client_data.as_ref()?,
            ConnEvent::ServerData => self.on_server_data.as_ref()?,
            ConnEvent::Close => self.on_close.as_ref()?,
            ConnEvent::ClientHello => self.on_client_hello.as_ref()?,
        };
        let parts = txn::Parts {
            info,
            vars: vars.0.take(),
            conn: Some(Box::new(conn)),
            ..Default::default()
        };
        let (mut back, r) = self.call(f, parts);
        vars.0 = back.vars.take();
        Some(r.map(|()| back.out))
    }

    /// Bytes this state holds now.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }
}

/// An event call that may wait: each poll runs on the call's own
/// instruction budget (and trip), put in the state's guard for the poll
/// and taken back after it, since other calls run on the state between.
struct Budgeted<'a, F> {
    fut: std::pin::Pin<Box<F>>,
    /// The call's own `r` (its userdata's address) and transaction, the
    /// current call for each poll (`fast::enter`).
    r: *const std::ffi::c_void,
    txn: &'a Rc<RefCell<txn::Txn>>,
    guard: &'a Guard,
    left: i64,
    tripped: Option<String>,
}

impl<F: std::future::Future> std::future::Future for Budgeted<'_, F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.get_mut();
        let budget = this.guard.budget.replace(this.left);
        let tripped = this.guard.tripped.replace(this.tripped.take());
        let entered = fast::enter(this.r, this.txn);
        let r = this.fut.as_mut().poll(cx);
        drop(entered);
        this.left = this.guard.budget.replace(budget);
        this.tripped = this.guard.tripped.replace(tripped);
        r
    }
}

/// A request's `r.vars`, kept between its events (made on first use).
#[derive(Default)]
pub struct Vars(Option<mlua::Table>);

/// Replaces what the sandbox leaves out or guards.
fn sandbox(lua: &Lua, guard: &Rc<Guard>) -> mlua::Result<()> {
    let g = lua.globals();
    for name in [
        "load",
        "loadfile",
        "dofile",
        "collectgarbage",
        "print",
        "warn",
        "require",
    ] {
        g.raw_set(name, Value::Nil)?;
    }
    if let Ok(mlua::Value::Table(s)) = g.raw_get::<Value>("string") {
        s.raw_set("dump", Value::Nil)?;
    }
    // os: the clock only.
    let os = lua.create_table()?;
    os.raw_set(
        "time",
        lua.create_function(|_, t: Value| match t {
            Value::Nil => Ok(crate::clock::unix_secs()),
            _ => Err(mlua::Error::runtime(
                "os.time takes no argument here (sy.time() gives the time with microseconds)",
            )),
        })?,
    )?;
    let start = std::time::Instant::now();
    os.raw_set(
        "clock",
        lua.create_function(move |_, ()| Ok(start.elapsed().as_secs_f64()))?,
    )?;
    g.raw_set("os", os)?;
    // setmetatable without __gc: a finalizer runs when the collector
    // decides, outside any event and its budget.
    let setmt: Function = g.raw_get("setmetatable")?;
    g.raw_set(
        "setmetatable",
        lua.create_function(move |_, (t, mt): (Value, Value)| {
            if let Value::Table(m) = &mt {
                if m.raw_get::<Value>("__gc")? != Value::Nil {
                    return Err(mlua::Error::runtime(
                        "setmetatable: __gc is not allowed in scripts",
                    ));
                }
            }
            setmt.call::<Value>((t, mt))
        })?,
    )?;
    // pcall and xpcall that let the limits through: a script must not
    // catch its own instruction limit and go on looping.
    let gd = guard.clone();
    g.raw_set(
        "pcall",
        lua.create_function(move |lua, (f, args): (Value, MultiValue)| {
            let r = call_value(lua, f, args);
            protected(lua, &gd, r, None)
        })?,
    )?;
    let gd = guard.clone();
    g.raw_set(
        "xpcall",
        lua.create_function(
            move |lua, (f, handler, args): (Value, Function, MultiValue)| {
                let r = call_value(lua, f, args);
                protected(lua, &gd, r, Some(handler))
            },
        )?,
    )?;
    Ok(())
}

fn call_value(_lua: &Lua, f: Value, args: MultiValue) -> mlua::Result<MultiValue> {
    match f {
        Value::Function(f) => f.call::<MultiValue>(args),
        other => Err(mlua::Error::runtime(format!(
            "attempt to call a {} value",
            other.type_name()
        ))),
    }
}

/// pcall's result: (true, results...) or (false, message), except for the
/// limits, which go on up.
fn protected(
    lua: &Lua,
    guard: &Guard,
    r: mlua::Result<MultiValue>,
    handler: Option<Function>,
) -> mlua::Result<MultiValue> {
    match r {
        Ok(values) => {
            let mut out = MultiValue::new();
            out.push_back(Value::Boolean(true));
            out.extend(values);
            Ok(out)
        }
        Err(e) if guard.tripped.borrow().is_some() || is_memory(&e) => Err(e),
        Err(e) => {
            let msg = Value::String(lua.create_string(error_text(&e))?);
            let msg = match handler {
                Some(h) => h.call::<Value>(msg)?,
                None => msg,
            };
            let mut out = MultiValue::new();
            out.push_back(Value::Boolean(false));
            out.push_back(msg);
            Ok(out)
        }
    }
}

fn is_memory(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory(cause),
        _ => false,
    }
}

/// The message of an error without mlua's traceback.
fn error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => first_line(m),
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        other => first_line(&other.to_string()),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// Lua shortens a long chunk name to "..." and its last 56 bytes
/// (LUA_IDSIZE): the whole name goes back in front of a message.
fn whole_name(msg: &str, chunk: &str) -> String {
    if let Some(rest) = msg.strip_prefix("...") {
        for (i, _) in chunk.char_indices() {
            if rest.starts_with(&chunk[i..]) && rest[chunk.len() - i..].starts_with(':') {
                return format!("{chunk}{}", &rest[chunk.len() - i..]);
            }
        }
    }
    msg.to_string()
}

/// "FILE:LINE: message" for an error of the script `chunk`: Lua's own
/// errors carry the position; an API call refused from Rust gets the
/// script's innermost line from the traceback.
fn describe(e: &mlua::Error, chunk: &str) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => whole_name(&first_line(message), chunk),
        mlua::Error::RuntimeError(m) => whole_name(&first_line(m), chunk),
        mlua::Error::CallbackError { traceback, cause } => {
            let cause = describe(cause, chunk);
            if cause.starts_with(chunk) {
                return cause;
            }
            match position(traceback, chunk) {
                Some(at) => format!("{at}: {cause}"),
                None => format!("{chunk}: {cause}"),
            }
        }
        other => format!("{chunk}: {}", first_line(&other.to_string())),
    }
}

/// The first "FILE:LINE" of `chunk` in a traceback.
fn position(traceback: &str, chunk: &str) -> Option<String> {
    traceback.lines().find_map(|l| {
        let l = whole_name(l.trim_start(), chunk);
        let rest = l.strip_prefix(chunk)?.strip_prefix(':')?;
        let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (!n.is_empty()).then(|| format!("{chunk}:{n}"))
    })
}

#[cfg(test)]
mod tests;
