//! The hot part of `r` as plain C functions over the Lua state: the
//! header methods (`r:header`, `r:set_header`, `r:remove_header`),
//! `r:log` and the request's plain fields (`r.method`, `r.path`,
//! `r.query`, `r.target`, `r.host`). Everything else `r` offers stays
//! with mlua (`txn.rs`), which these fall back to.
//!
//! Why: through mlua each of these cost about 3,000 instructions
//! (callgrind of the header rewrite, BENCHMARKS.md "Scripting"): the
//! `__index` metamethod is a Lua function of mlua's that looks the name
//! up in two tables, the method borrows the userdata (its type checked
//! through the registry), converts its arguments and, because a memory
//! limit is set (`max_memory`), runs every Lua string it makes and every
//! call in a protected call of its own (`protect_lua_closure`; mlua takes
//! its unprotected paths only when no limit is set,
//! `RawLua::unlikely_memory_error`). Here the lookup is one C function
//! (`fast_index`, a match on the name), the method reads the worker's
//! current transaction from a thread-local cell (`enter`), and a Lua
//! string is made by one `lua_pushlstring`.
//!
//! The memory limit stays a hard bound: mlua's allocator refuses past the
//! limit, and Lua raises its out-of-memory error where the allocation
//! happened, here as anywhere. That error (and any other Lua error) is a
//! `longjmp` to the event call's protected call in mlua, across the
//! frames of these functions. So these functions hold nothing with a
//! destructor while they call a Lua function that may raise (they only
//! hold references and raw pointers then), which makes each frame a
//! "plain old frame" that `longjmp` may skip (RFC 2945): the Rust work
//! (checks, edits, the error's message) runs between those calls, and an
//! error's message is moved to a thread-local before the raise.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::rc::Rc;

use mlua::ffi::{self, lua_State};

use super::txn::Txn;

/// The `r` of the event call in progress on this worker.
#[derive(Clone, Copy)]
struct Current {
    /// The address of `r`'s userdata block (`lua_touserdata`): a method
    /// called on anything else is refused, and a field read of anything
    /// else goes to mlua.
    ud: *const c_void,
    txn: *const RefCell<Txn>,
}

const NONE: Current = Current {
    ud: std::ptr::null(),
    txn: std::ptr::null(),
};

thread_local! {
    static CURRENT: Cell<Current> = const { Cell::new(NONE) };
    /// The message of the error being raised (kept here, not in a frame
    /// the raise skips; replaced by the next error).
    static MESSAGE: Cell<String> = const { Cell::new(String::new()) };
}

/// An event call in progress: `r` is `ud` (its `lua_touserdata`
/// address), its transaction `txn`. Dropped, the previous one is back
/// (a call that waits is entered for each poll, between other calls).
pub(super) struct Entered<'a> {
    prev: Current,
    _txn: PhantomData<&'a RefCell<Txn>>,
}

/// Enters a call. The borrow keeps `txn` alive as long as the pointer in
/// the thread-local can be used.
pub(super) fn enter(ud: *const c_void, txn: &Rc<RefCell<Txn>>) -> Entered<'_> {
    let prev = CURRENT.with(|c| {
        c.replace(Current {
            ud,
            txn: Rc::as_ptr(txn),
        })
    });
    Entered {
        prev,
        _txn: PhantomData,
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let prev = self.prev;
        CURRENT.with(|c| c.set(prev));
    }
}

/// Puts `fast_index` in front of mlua's `__index` of `r`'s type (one
/// metatable for every `r` of this state, mlua's own kept as the
/// fallback).
///
/// # Safety
/// `state` is a state mlua lends (`Lua::exec_raw`), `r`'s userdata at
/// index 1.
pub(super) unsafe fn install(state: *mut lua_State) {
    // SAFETY: the caller's; four slots are used (exec_raw's call has
    // LUA_MINSTACK = 20), and nothing here allocates but the closure
    // (an out-of-memory error unwinds to exec_raw's protected call; no
    // frame here holds a destructor).
    unsafe {
        if ffi::lua_getmetatable(state, 1) == 0 {
            return;
        }
        ffi::lua_pushstring(state, c"__index".as_ptr());
        ffi::lua_pushvalue(state, -1);
        if ffi::lua_rawget(state, -3) != ffi::LUA_TFUNCTION {
            // Not mlua's generated function (r has fields, so it is one):
            // leave it be, every lookup then goes the slow way.
            ffi::lua_pop(state, 3);
            return;
        }
        ffi::lua_pushcclosure(state, fast_index, 1);
        ffi::lua_rawset(state, -3);
        ffi::lua_pop(state, 1);
    }
}

/// The current call's transaction if `r` (argument 1) is its `r`.
fn current(state: *mut lua_State) -> Option<&'static RefCell<Txn>> {
    let cur = CURRENT.with(Cell::get);
    // SAFETY: reading argument 1's address allocates nothing and raises
    // nothing (lua_touserdata answers NULL for anything but userdata).
    let ud = unsafe { ffi::lua_touserdata(state, 1) }.cast_const();
    if cur.txn.is_null() || ud != cur.ud {
        return None;
    }
    // SAFETY: `Entered` borrows the `Rc` for as long as the pointer is in
    // the thread-local, and these functions run only inside that call (a
    // C function of Lua's runs while Lua runs). The `'static` never
    // leaves these functions' frames.
    Some(unsafe { &*cur.txn })
}

/// Argument `i` as bytes if it is a string or a number (Lua writes a
/// number as a string in place, as mlua's `String` argument does).
///
/// # Safety
/// A C function's state; the slice lives while the argument is on the
/// stack. May raise out of memory (a number's string): nothing with a
/// destructor may be live in the callers.
unsafe fn arg_bytes<'a>(state: *mut lua_State, i: c_int) -> Option<&'a [u8]> {
    // SAFETY: the caller's.
    unsafe {
        match ffi::lua_type(state, i) {
            ffi::LUA_TSTRING | ffi::LUA_TNUMBER => {
                let mut len = 0usize;
                let p = ffi::lua_tolstring(state, i, &mut len);
                (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
            }
            _ => None,
        }
    }
}

/// What a method answers.
enum Out {
    Nothing,
    Nil,
    /// Bytes to copy into a Lua string: they live in the transaction,
    /// which nothing changes before the copy.
    Bytes(*const u8, usize),
    Int(i64),
}

impl Out {
    fn bytes(b: Option<&[u8]>) -> Out {
        match b {
            Some(b) => Out::Bytes(b.as_ptr(), b.len()),
            None => Out::Nil,
        }
    }
}

/// Runs a method's Rust part; a panic (a bug) becomes a Lua error rather
/// than unwinding through Lua's C frames (where panics unwind: the
/// release profile aborts on a panic instead, which is as safe).
fn guarded(what: &str, f: impl FnOnce() -> Result<Out, String>) -> Result<Out, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(format!("{what}: internal error")))
}

/// Pushes a method's answer, or raises its error.
///
/// # Safety
/// A C function's state with a free slot (LUA_MINSTACK). The raise (and
/// an out-of-memory error in the push) skips this frame and the caller's:
/// `outcome` is consumed here and nothing else with a destructor is live
/// in them.
unsafe fn finish(state: *mut lua_State, outcome: Result<Out, String>) -> c_int {
    // SAFETY: the caller's.
    unsafe {
        match outcome {
            Ok(Out::Nothing) => 0,
            Ok(Out::Nil) => {
                ffi::lua_pushnil(state);
                1
            }
            Ok(Out::Bytes(p, n)) => {
                ffi::lua_pushlstring(state, p.cast(), n);
                1
            }
            Ok(Out::Int(i)) => {
                ffi::lua_pushinteger(state, i);
                1
            }
            Err(message) => raise(state, message),
        }
    }
}

/// Raises "FILE:LINE: message" (the script's line, as `error` would).
///
/// # Safety
/// A C function's state; see `finish`.
unsafe fn raise(state: *mut lua_State, message: String) -> ! {
    // The message moves to the thread-local (the previous one is dropped
    // here): this frame then holds only a pointer to it, valid until the
    // next raise replaces it, after Lua has copied it.
    let (p, n) = MESSAGE.with(|m| {
        drop(m.replace(message));
        // SAFETY: only this function touches the cell, and not
        // re-entrantly (it raises before any other raise can run).
        let s = unsafe { &*m.as_ptr() };
        (s.as_ptr(), s.len())
    });
    // SAFETY: the caller's; luaL_where and the string use two slots.
    unsafe {
        ffi::luaL_where(state, 1);
        ffi::lua_pushlstring(state, p.cast(), n);
        ffi::lua_concat(state, 2);
        ffi::lua_error(state)
    }
}

fn not_r(what: &str) -> String {
    format!("{what}: called on something other than this event's r")
}

fn not_string(what: &str, n: u8) -> String {
    format!("{what}: argument {n} must be a string")
}

/// `r`'s `__index`: the hot methods and fields of this call's `r`, and
/// mlua's `__index` (upvalue 1) for every other name and any other `r`.
unsafe extern "C-unwind" fn fast_index(state: *mut lua_State) -> c_int {
    // SAFETY: Lua calls this with (r, key). Reading a string key
    // allocates nothing; the pushes may raise out of memory, when this
    // frame holds only references (see the module's doc).
    unsafe {
        if ffi::lua_type(state, 2) == ffi::LUA_TSTRING {
            if let Some(txn) = current(state) {
                let mut len = 0usize;
                let k = ffi::lua_tolstring(state, 2, &mut len);
                let key = std::slice::from_raw_parts(k.cast::<u8>(), len);
                let method: Option<ffi::lua_CFunction> = match key {
                    b"header" => Some(header),
                    b"set_header" => Some(set_header),
                    b"remove_header" => Some(remove_header),
                    b"log" => Some(log),
                    _ => None,
                };
                if let Some(m) = method {
                    // A light C function: no allocation.
                    ffi::lua_pushcfunction(state, m);
                    return 1;
                }
                // An unguarded borrow: nothing borrows the transaction
                // mutably while Lua runs this function, and the bytes are
                // copied before anything can.
                if let Ok(t) = txn.try_borrow_unguarded() {
                    if let Some(v) = t.plain_field(key) {
                        return finish(state, Ok(Out::bytes(v)));
                    }
                }
            }
        }
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, 2, 1);
        1
    }
}

/// `r:header(name)`.
unsafe extern "C-unwind" fn header(state: *mut lua_State) -> c_int {
    const WHAT: &str = "r:header";
    // SAFETY: a C function of Lua's; see the module's doc.
    unsafe {
        let name = arg_bytes(state, 2);
        let txn = current(state);
        let outcome = guarded(WHAT, || {
            let txn = txn.ok_or_else(|| not_r(WHAT))?;
            let name = name.ok_or_else(|| not_string(WHAT, 1))?;
            let name =
                std::str::from_utf8(name).map_err(|_| format!("{WHAT}: the name is not UTF-8"))?;
            // Unguarded: see fast_index.
            let t = txn
                .try_borrow_unguarded()
                .map_err(|_| format!("{WHAT}: r is busy"))?;
            Ok(Out::bytes(t.header(name)))
        });
        finish(state, outcome)
    }
}

/// `r:set_header(name, value)`.
unsafe extern "C-unwind" fn set_header(state: *mut lua_State) -> c_int {
    const WHAT: &str = "r:set_header";
    // SAFETY: a C function of Lua's; see the module's doc.
    unsafe {
        let name = arg_bytes(state, 2);
        let value = arg_bytes(state, 3);
        let txn = current(state);
        let outcome = guarded(WHAT, || {
            let txn = txn.ok_or_else(|| not_r(WHAT))?;
            let name = name.ok_or_else(|| not_string(WHAT, 1))?;
            let value = value.ok_or_else(|| not_string(WHAT, 2))?;
            let mut t = txn
                .try_borrow_mut()
                .map_err(|_| format!("{WHAT}: r is busy"))?;
            t.set_header(name, value)?;
            Ok(Out::Nothing)
        });
        finish(state, outcome)
    }
}

/// `r:remove_header(name)`: how many fields it removed.
unsafe extern "C-unwind" fn remove_header(state: *mut lua_State) -> c_int {
    const WHAT: &str = "r:remove_header";
    // SAFETY: a C function of Lua's; see the module's doc.
    unsafe {
        let name = arg_bytes(state, 2);
        let txn = current(state);
        let outcome = guarded(WHAT, || {
            let txn = txn.ok_or_else(|| not_r(WHAT))?;
            let name = name.ok_or_else(|| not_string(WHAT, 1))?;
            let mut t = txn
                .try_borrow_mut()
                .map_err(|_| format!("{WHAT}: r is busy"))?;
            let n = t.remove_header(name)?;
            Ok(Out::Int(i64::try_from(n).unwrap_or(i64::MAX)))
        });
        finish(state, outcome)
    }
}

/// A value for the access log as read off the stack (nothing allocated).
enum LogValue<'a> {
    Nil,
    Bytes(&'a [u8]),
    Int(i64),
    Number(f64),
    Bool(bool),
    Other(&'static str),
}

/// `r:log(name, value)`.
unsafe extern "C-unwind" fn log(state: *mut lua_State) -> c_int {
    const WHAT: &str = "r:log";
    // SAFETY: a C function of Lua's; see the module's doc. The value is
    // read without conversions (none allocates).
    unsafe {
        let name = arg_bytes(state, 2);
        let value = match ffi::lua_type(state, 3) {
            ffi::LUA_TNONE | ffi::LUA_TNIL => LogValue::Nil,
            ffi::LUA_TSTRING => {
                let mut len = 0usize;
                let p = ffi::lua_tolstring(state, 3, &mut len);
                LogValue::Bytes(std::slice::from_raw_parts(p.cast::<u8>(), len))
            }
            ffi::LUA_TNUMBER if ffi::lua_isinteger(state, 3) != 0 => {
                LogValue::Int(ffi::lua_tointegerx(state, 3, std::ptr::null_mut()))
            }
            ffi::LUA_TNUMBER => {
                LogValue::Number(ffi::lua_tonumberx(state, 3, std::ptr::null_mut()))
            }
            ffi::LUA_TBOOLEAN => LogValue::Bool(ffi::lua_toboolean(state, 3) != 0),
            ffi::LUA_TTABLE => LogValue::Other("table"),
            ffi::LUA_TFUNCTION => LogValue::Other("function"),
            ffi::LUA_TTHREAD => LogValue::Other("thread"),
            ffi::LUA_TLIGHTUSERDATA => LogValue::Other("lightuserdata"),
            _ => LogValue::Other("userdata"),
        };
        let txn = current(state);
        let outcome = guarded(WHAT, || {
            let txn = txn.ok_or_else(|| not_r(WHAT))?;
            let name = name.ok_or_else(|| not_string(WHAT, 1))?;
            // As `txn::log_text` writes a Lua value.
            let text = match value {
                LogValue::Nil => None,
                LogValue::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
                LogValue::Int(i) => Some(i.to_string()),
                LogValue::Number(n) => Some(n.to_string()),
                LogValue::Bool(b) => Some(b.to_string()),
                LogValue::Other(t) => Some(t.to_string()),
            };
            let mut t = txn
                .try_borrow_mut()
                .map_err(|_| format!("{WHAT}: r is busy"))?;
            t.log(name, text.map(super::txn::bounded_log_value))?;
            Ok(Out::Nothing)
        });
        finish(state, outcome)
    }
}
