//! A transaction: the request's collections, the TX variables, and the
//! phases run over the compiled rules with ModSecurity v3's semantics.

use std::cell::RefCell;
use std::sync::Arc;

use super::body;
use super::compile::{
    CDisruptive, CMacro, COp, CPart, CRule, CSetOp, CSetVar, Exclusion, Item, Link, Post, Program,
    Sel, TNode, Target, NO_SUMMARY_GROUP, NO_TARGETS_ID,
};
use super::{Engine, Intervention, InterventionKind, MatchedRule, Outcome, Request};
use crate::fasthash::FxHashMap;
use crate::waf::operator::{self, Captures};
use crate::waf::seclang::{
    AllowScope, BodyProcessor, Collection, Ctl, EngineMode, IdRange, LimitAction, Variable,
};
use crate::waf::transform;

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

/// One member of a list collection. The value's transformation cache slot
/// is `slot`, the key's (for the `_NAMES` collections) `slot + 1`.
#[derive(Debug, Clone)]
pub(crate) struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub slot: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct Arg {
    pub kv: Kv,
    pub post: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Single {
    value: Vec<u8>,
    slot: u32,
}

/// [`VarMap::pairs`]: the live entries, as many as the index holds.
struct Pairs<'a> {
    entries: std::slice::Iter<'a, Option<(Vec<u8>, Vec<u8>)>>,
    left: usize,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (k, v) = self.entries.by_ref().flatten().next()?;
        self.left = self.left.saturating_sub(1);
        Some((k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Pairs<'_> {}

/// TX-like collections: keys without regard to case, insertion order kept.
#[derive(Debug, Default, Clone)]
pub(crate) struct VarMap {
    entries: Vec<Option<(Vec<u8>, Vec<u8>)>>,
    /// Lower-case name to entry. Fx (`crate::fasthash`): short keys, and
    /// request-chosen ones are bounded by the argument limits; only the
    /// map's speed depends on the hasher (its order is never read).
    index: FxHashMap<Vec<u8>, usize>,
    /// Emptied buffers of an earlier transaction's variables (names,
    /// values, index keys), for new ones: the setup rules create the same
    /// hundred-odd variables in every transaction.
    spare: Spare,
}

/// Most spare buffers a [`Spare`] keeps, and the largest (a thread's idle
/// transactions hold at most a few hundred KiB).
const MAX_SPARE_BUFS: usize = 1024;
const MAX_SPARE_BUF: usize = 256;

/// Emptied byte buffers of an earlier transaction, for the next one's
/// keys and values (bounded in number and size).
#[derive(Debug, Default, Clone)]
struct Spare(Vec<Vec<u8>>);

impl Spare {
    /// A buffer holding `from`.
    fn buf(&mut self, from: &[u8]) -> Vec<u8> {
        match self.0.pop() {
            Some(mut b) => {
                b.extend_from_slice(from);
                b
            }
            None => from.to_vec(),
        }
    }

    /// Keeps `b` for later, if there is room and it is small.
    fn keep(&mut self, mut b: Vec<u8>) {
        if self.0.len() < MAX_SPARE_BUFS && b.capacity() <= MAX_SPARE_BUF {
            b.clear();
            self.0.push(b);
        }
    }
}

impl VarMap {
    fn buf(&mut self, from: &[u8]) -> Vec<u8> {
        self.spare.buf(from)
    }

    /// Empties the map, keeping its buffers for the next transaction.
    fn recycle(&mut self) {
        for (k, v) in self.entries.drain(..).flatten() {
            self.spare.keep(k);
            self.spare.keep(v);
        }
        for (l, _) in self.index.drain() {
            self.spare.keep(l);
        }
    }

    pub fn get(&self, lower_key: &[u8]) -> Option<&[u8]> {
        let i = *self.index.get(lower_key)?;
        self.entries[i].as_ref().map(|(_, v)| v.as_slice())
    }

    /// The entry of `key` (any case), deleted or not.
    fn find(&self, key: &[u8]) -> Option<usize> {
        let mut small = [0u8; 64];
        if key.len() <= 64 {
            let l = &mut small[..key.len()];
            l.copy_from_slice(key);
            l.make_ascii_lowercase();
            self.index.get(&l[..]).copied()
        } else {
            self.index.get(&key.to_ascii_lowercase()).copied()
        }
    }

    /// [`VarMap::set`] from a slice: an existing value's buffer is reused.
    pub fn set_slice(&mut self, key: &[u8], value: &[u8]) {
        if let Some(i) = self.find(key) {
            if let Some(e) = &mut self.entries[i] {
                e.1.clear();
                e.1.extend_from_slice(value);
                return;
            }
        }
        let k = self.buf(key);
        let v = self.buf(value);
        let mut lower = self.buf(key);
        lower.make_ascii_lowercase();
        self.entries.push(Some((k, v)));
        self.index.insert(lower, self.entries.len() - 1);
    }

    /// The value of `key` in any case.
    fn get_any_case(&self, key: &[u8]) -> Option<&[u8]> {
        let i = self.find(key)?;
        self.entries[i].as_ref().map(|(_, v)| v.as_slice())
    }

    pub fn set(&mut self, key: &[u8], value: Vec<u8>) {
        let found = self.find(key);
        match found {
            Some(i) => {
                if let Some(e) = &mut self.entries[i] {
                    e.1 = value;
                } else {
                    self.entries[i] = Some((key.to_vec(), value));
                }
            }
            None => {
                self.entries.push(Some((key.to_vec(), value)));
                self.index
                    .insert(key.to_ascii_lowercase(), self.entries.len() - 1);
            }
        }
    }

    /// The entry of a variable by its lower-case name.
    fn index_of(&self, lower_key: &[u8]) -> Option<usize> {
        let i = *self.index.get(lower_key)?;
        self.entries.get(i)?.as_ref().map(|_| i)
    }

    /// The variables in order (deleted ones left out).
    fn pairs(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> {
        Pairs {
            entries: self.entries.iter(),
            left: self.index.len(),
        }
    }

    /// Adds a variable known to be absent (`lower`: its name in lower
    /// case), without looking it up.
    fn push_new(&mut self, key: &[u8], value: &[u8], lower: &[u8]) {
        let k = self.buf(key);
        let v = self.buf(value);
        let l = self.buf(lower);
        self.entries.push(Some((k, v)));
        self.index.insert(l, self.entries.len() - 1);
    }

    /// Entry `i` (empty if deleted).
    fn at(&self, i: u32) -> (&[u8], &[u8]) {
        match self.entries.get(i as usize) {
            Some(Some((k, v))) => (k, v),
            _ => (b"", b""),
        }
    }

    pub fn delete(&mut self, key: &[u8]) {
        if let Some(i) = self.index.remove(&key.to_ascii_lowercase()) {
            self.entries[i] = None;
        }
    }
}

/// The request and response data (what rules read, not what they write).
#[derive(Debug, Default)]
pub(crate) struct Data {
    singles: Vec<Option<Single>>,
    pub args: Vec<Arg>,
    pub headers: Vec<Kv>,
    pub cookies: Vec<Kv>,
    /// FILES: part name and file name.
    pub files: Vec<Kv>,
    /// FILES_SIZES: part name and size.
    pub files_sizes: Vec<Kv>,
    /// FILES_TMP_CONTENT: part name and (the start of) the content.
    pub files_content: Vec<Kv>,
    /// MULTIPART_PART_HEADERS: part name and a header line.
    pub part_headers: Vec<Kv>,
    pub resp_headers: Vec<Kv>,
    /// XML:/* (the document's text) and XML://@* (attribute values).
    pub xml_text: Option<Single>,
    pub xml_attrs: Vec<Kv>,
    pub body: Vec<u8>,
    next_slot: u32,
    /// Emptied key and value buffers of an earlier transaction's members.
    spare: Spare,
}

impl Data {
    fn buf(&mut self, from: &[u8]) -> Vec<u8> {
        self.spare.buf(from)
    }

    /// Empties the data for the next transaction on the thread, keeping
    /// the lists' capacity and the members' buffers (bounded).
    fn recycle(&mut self) {
        let spare = &mut self.spare;
        let mut keep = |kv: Kv| {
            spare.keep(kv.key);
            spare.keep(kv.value);
        };
        for a in self.args.drain(..) {
            keep(a.kv);
        }
        for l in [
            &mut self.headers,
            &mut self.cookies,
            &mut self.files,
            &mut self.files_sizes,
            &mut self.files_content,
            &mut self.part_headers,
            &mut self.resp_headers,
            &mut self.xml_attrs,
        ] {
            for kv in l.drain(..) {
                keep(kv);
            }
        }
        for s in &mut self.singles {
            *s = None;
        }
        self.xml_text = None;
        self.body = small(std::mem::take(&mut self.body));
        self.next_slot = 0;
    }

    fn slot2(&mut self) -> u32 {
        let s = self.next_slot;
        self.next_slot += 2;
        s
    }

    pub fn kv(&mut self, key: &[u8], value: &[u8]) -> Kv {
        Kv {
            key: self.buf(key),
            value: self.buf(value),
            slot: self.slot2(),
        }
    }

    pub fn set(&mut self, c: Collection, value: impl Into<Vec<u8>>) {
        let slot = self.slot2();
        let i = c as usize;
        if self.singles.len() <= i {
            self.singles.resize(i + 1, None);
        }
        self.singles[i] = Some(Single {
            value: value.into(),
            slot,
        });
    }

    pub fn get(&self, c: Collection) -> Option<&[u8]> {
        self.singles
            .get(c as usize)
            .and_then(|s| s.as_ref())
            .map(|s| s.value.as_slice())
    }

    fn single(&self, c: Collection) -> Option<&Single> {
        self.singles.get(c as usize).and_then(|s| s.as_ref())
    }

    pub fn set_xml_text(&mut self, text: Vec<u8>) {
        let slot = self.slot2();
        self.xml_text = Some(Single { value: text, slot });
    }

    fn args_combined_size(&self) -> usize {
        self.args
            .iter()
            .map(|a| a.kv.key.len() + a.kv.value.len())
            .sum()
    }
}

/// Where a collected value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListId {
    Args,
    Headers,
    Cookies,
    Files,
    FilesSizes,
    FilesContent,
    PartHeaders,
    RespHeaders,
    XmlAttrs,
}

#[derive(Debug)]
enum Src {
    /// `names`: the key is the value (`ARGS_NAMES`).
    List(ListId, u32, bool),
    Single(Collection),
    XmlText,
    /// A TX variable by its entry (copied before the operator runs).
    Tx(u32),
    Owned(Vec<u8>, Vec<u8>),
    /// A number computed for the rule (`&ARGS`, ARGS_COMBINED_SIZE...): its
    /// decimal digits in place (from the index given), without an
    /// allocation.
    Num([u8; 20], u8),
}

#[derive(Debug)]
struct Val {
    coll: Collection,
    src: Src,
}

#[inline]
fn list(d: &Data, l: ListId) -> &[Kv] {
    match l {
        ListId::Args => &[],
        ListId::Headers => &d.headers,
        ListId::Cookies => &d.cookies,
        ListId::Files => &d.files,
        ListId::FilesSizes => &d.files_sizes,
        ListId::FilesContent => &d.files_content,
        ListId::PartHeaders => &d.part_headers,
        ListId::RespHeaders => &d.resp_headers,
        ListId::XmlAttrs => &d.xml_attrs,
    }
}

#[inline]
fn kv_of(d: &Data, l: ListId, i: u32) -> &Kv {
    match l {
        ListId::Args => &d.args[i as usize].kv,
        _ => &list(d, l)[i as usize],
    }
}

impl Val {
    fn value<'a>(&'a self, d: &'a Data, tx: &'a VarMap) -> &'a [u8] {
        match &self.src {
            Src::Tx(i) => tx.at(*i).1,
            _ => self.value_d(d),
        }
    }

    /// The value of anything but a TX variable.
    #[inline]
    fn value_d<'a>(&'a self, d: &'a Data) -> &'a [u8] {
        match &self.src {
            Src::Tx(_) => b"",
            Src::List(l, i, names) => {
                let kv = kv_of(d, *l, *i);
                if *names {
                    &kv.key
                } else {
                    &kv.value
                }
            }
            Src::Single(c) => d.get(*c).unwrap_or(b""),
            Src::XmlText => d.xml_text.as_ref().map_or(b"", |s| &s.value),
            Src::Owned(_, v) => v,
            Src::Num(digits, start) => &digits[usize::from(*start)..],
        }
    }

    fn key<'a>(&'a self, d: &'a Data, tx: &'a VarMap) -> Option<&'a [u8]> {
        match &self.src {
            Src::Tx(i) => Some(tx.at(*i).0),
            Src::List(l, i, _) => Some(&kv_of(d, *l, *i).key),
            Src::Single(_) => None,
            Src::XmlText => Some(b"/*"),
            Src::Owned(k, _) => (!k.is_empty()).then_some(k.as_slice()),
            Src::Num(..) => None,
        }
    }

    #[inline]
    fn slot(&self, d: &Data) -> Option<u32> {
        match &self.src {
            Src::List(l, i, names) => Some(kv_of(d, *l, *i).slot + u32::from(*names)),
            Src::Single(c) => d.single(*c).map(|s| s.slot),
            Src::XmlText => d.xml_text.as_ref().map(|s| s.slot),
            Src::Owned(..) | Src::Tx(_) | Src::Num(..) => None,
        }
    }

    /// `ARGS:id`, `REQUEST_URI`.
    fn name(&self, d: &Data, tx: &VarMap) -> Vec<u8> {
        let mut n = self.coll.name().as_bytes().to_vec();
        if let Some(k) = self.key(d, tx) {
            n.push(b':');
            n.extend_from_slice(k);
        }
        n
    }
}

/// Transformation results per (value slot, pipeline node): a row per
/// slot (allocated when a value is first transformed), a column per node.
#[derive(Default)]
struct Cache {
    nodes: usize,
    slots: Vec<Option<Box<[u32]>>>,
    /// The same for volatile slots (cleared after each rule).
    vslots: Vec<Option<Box<[u32]>>>,
    /// Every transformation result back to back (`spans` index it): one
    /// growing buffer rather than an allocation per result.
    arena: Vec<u8>,
    spans: Vec<(usize, usize)>,
    /// Where a transformation writes before its result joins the arena.
    out: Vec<u8>,
    next_volatile: u32,
    /// Prefilter summaries of values, built when a prefiltered `@rx` first
    /// looks at one and shared by every later one: per span
    /// (`span_sig`) and per untransformed value of a non-volatile slot
    /// (`slot_sig`), indices into `sigs` or `UNSET`.
    sigs: Vec<operator::Sig>,
    span_sig: Vec<u32>,
    slot_sig: Vec<u32>,
    /// The byte classes of each untransformed value of a non-volatile slot
    /// and of each span (0: not known yet): a transformation that cannot
    /// change a value is skipped on them (`transform::triggers`).
    slot_classes: Vec<transform::Classes>,
    span_classes: Vec<transform::Classes>,
    /// Rows of an earlier transaction (on this thread), for new slots.
    spare: Vec<Box<[u32]>>,
}

/// Most cache rows kept for the next transaction.
const MAX_SPARE_ROWS: usize = 256;
/// A buffer larger than this is not kept for the next transaction.
const KEEP_BYTES: usize = 256 << 10;
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

/// What a shared target list holds through one transformation pipeline
/// (`Link::summary_group`), for the current `lists_gen`.
#[derive(Clone, Copy, Default)]
struct ListSummary {
    /// The `lists_gen` it was built in (0: never).
    gen: u32,
    /// The union of the values' [`operator::Sig`]s in `Cache::sigs`, or
    /// `UNSET` when a value has no cache identity (nothing is ruled out).
    sig: u32,
    /// How many values, and their transformed bytes: the work a scan of
    /// each would have counted.
    values: u64,
    bytes: u64,
}

thread_local! {
    static SCRATCH: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

fn small(mut b: Vec<u8>) -> Vec<u8> {
    b.clear();
    if b.capacity() > KEEP_BYTES {
        Vec::new()
    } else {
        b
    }
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

const SAME: u32 = u32::MAX;
const UNSET: u32 = u32::MAX - 1;
/// Slots from here are for values that change (TX...): used once.
const VOLATILE: u32 = 1 << 31;

impl Cache {
    #[inline]
    fn lookup(&self, slot: u32, node: u32) -> Option<u32> {
        let v = if slot >= VOLATILE {
            &self.vslots
        } else {
            &self.slots
        };
        let r = v.get((slot & !VOLATILE) as usize)?.as_ref()?[node as usize];
        (r != UNSET).then_some(r)
    }

    fn store(&mut self, slot: u32, node: u32, r: u32) {
        let nodes = self.nodes;
        let Cache {
            slots,
            vslots,
            spare,
            ..
        } = self;
        let v = if slot >= VOLATILE { vslots } else { slots };
        let i = (slot & !VOLATILE) as usize;
        if v.len() <= i {
            v.resize_with(i + 1, || None);
        }
        v[i].get_or_insert_with(|| match spare.pop() {
            Some(mut row) => {
                row.fill(UNSET);
                row
            }
            None => vec![UNSET; nodes].into_boxed_slice(),
        })[node as usize] = r;
    }

    /// Empty for a new transaction over `nodes` pipeline nodes, keeping
    /// what capacity is worth keeping.
    fn reset(&mut self, nodes: usize) {
        if self.nodes == nodes {
            for row in self.slots.drain(..).flatten() {
                if self.spare.len() < MAX_SPARE_ROWS {
                    self.spare.push(row);
                }
            }
            for row in self.vslots.iter_mut().flatten() {
                row.fill(UNSET);
            }
        } else {
            self.slots.clear();
            self.vslots.clear();
            self.spare.clear();
        }
        self.nodes = nodes;
        for b in [&mut self.arena, &mut self.out] {
            b.clear();
            if b.capacity() > KEEP_BYTES {
                *b = Vec::new();
            }
        }
        self.spans.clear();
        self.sigs.clear();
        self.span_sig.clear();
        self.slot_sig.clear();
        self.slot_classes.clear();
        self.span_classes.clear();
        self.next_volatile = 0;
    }

    /// The result of pipeline `node` on `orig` (`SAME` or a buffer).
    /// Inlined: most calls find the result cached.
    #[inline]
    fn get(&mut self, nodes: &[TNode], slot: u32, node: u32, orig: &[u8]) -> u32 {
        if node == 0 {
            return SAME;
        }
        if let Some(r) = self.lookup(slot, node) {
            return r;
        }
        self.transform(nodes, slot, node, orig)
    }

    /// [`Cache::get`] of a result not cached yet: the parent's, then this
    /// node's transformation.
    #[inline(never)]
    fn transform(&mut self, nodes: &[TNode], slot: u32, node: u32, orig: &[u8]) -> u32 {
        let n = nodes[node as usize];
        let parent = self.get(nodes, slot, n.parent, orig);
        let classes = self.classes(parent, slot, orig);
        let input: &[u8] = if parent == SAME {
            orig
        } else {
            let (a, b) = self.spans[parent as usize];
            &self.arena[a..b]
        };
        let r = if classes & transform::triggers(n.t) != 0
            && transform::apply(n.t, input, &mut self.out)
        {
            let a = self.arena.len();
            self.arena.extend_from_slice(&self.out);
            self.spans.push((a, self.arena.len()));
            self.span_classes.push(0);
            (self.spans.len() - 1) as u32
        } else {
            parent
        };
        self.store(slot, node, r);
        r
    }

    /// The byte classes of result `r` of `slot` (`orig` its value), found
    /// once per value and per span (each time for an untransformed
    /// volatile value).
    fn classes(&mut self, r: u32, slot: u32, orig: &[u8]) -> transform::Classes {
        let known = if r != SAME {
            self.span_classes.get(r as usize)
        } else {
            self.slot_classes.get(slot as usize)
        };
        if let Some(&c) = known.filter(|&&c| c != 0) {
            return c;
        }
        let c = transform::byte_classes(self.slice(r, orig));
        if r != SAME {
            self.span_classes[r as usize] = c;
        } else if slot < VOLATILE {
            let i = slot as usize;
            if self.slot_classes.len() <= i {
                self.slot_classes.resize(i + 1, 0);
            }
            self.slot_classes[i] = c;
        }
        c
    }

    fn slice<'a>(&'a self, r: u32, orig: &'a [u8]) -> &'a [u8] {
        if r == SAME {
            orig
        } else {
            let (a, b) = self.spans[r as usize];
            &self.arena[a..b]
        }
    }

    /// The [`operator::Sig`] of result `r` of `slot` (`orig` its value),
    /// built once; `None` for an untransformed volatile value (no identity
    /// to cache it under). Inlined: most calls find it built.
    #[inline]
    fn sig(&mut self, r: u32, slot: u32, orig: &[u8]) -> Option<u32> {
        let (table, i) = if r == SAME {
            if slot >= VOLATILE {
                return None;
            }
            (&self.slot_sig, slot as usize)
        } else {
            (&self.span_sig, r as usize)
        };
        match table.get(i) {
            Some(&n) if n != UNSET => Some(n),
            _ => Some(self.build_sig(r, slot, orig)),
        }
    }

    /// [`Cache::sig`] of a result without one yet (`slot` not volatile
    /// when `r` is `SAME`).
    #[inline(never)]
    fn build_sig(&mut self, r: u32, slot: u32, orig: &[u8]) -> u32 {
        let (table, i) = if r == SAME {
            (&mut self.slot_sig, slot as usize)
        } else {
            (&mut self.span_sig, r as usize)
        };
        if table.len() <= i {
            table.resize(i + 1, UNSET);
        }
        let n = self.sigs.len() as u32;
        table[i] = n;
        let input = if r == SAME {
            orig
        } else {
            let (a, b) = self.spans[r as usize];
            &self.arena[a..b]
        };
        self.sigs.push(operator::Sig::of(input));
        n
    }

    /// A slot for a value that is not cached across rules.
    fn volatile(&mut self) -> u32 {
        // Reuse: volatile slots are cleared after each use.
        let s = VOLATILE + self.next_volatile;
        self.next_volatile += 1;
        s
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

fn now_parts() -> [u64; 8] {
    // [epoch, year, mon(1-12), day, hour, min, sec, wday]
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = t / 86400;
    let rem = t % 86400;
    // civil from days (Howard Hinnant)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    let wday = (days + 4) % 7;
    [
        t,
        y as u64,
        m as u64,
        d as u64,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        wday,
    ]
}

fn sel_matches(sel: &Sel, key: &[u8]) -> bool {
    match sel {
        Sel::All => true,
        Sel::Key(k, _) => key.eq_ignore_ascii_case(k),
        Sel::Regex(r, _) => r.is_match(key),
    }
}

/// [`sel_matches`] for a list member, regex results cached per slot.
/// Inlined: every member of a list goes through it, mostly for `All` or a
/// key.
#[inline]
fn sel_matches_at(cache: &RefCell<Vec<(u64, u64)>>, sel: &Sel, key: &[u8], slot: u32) -> bool {
    match sel {
        Sel::All => true,
        Sel::Key(k, _) => key.eq_ignore_ascii_case(k),
        Sel::Regex(..) => sel_regex_matches_at(cache, sel, key, slot),
    }
}

/// [`sel_matches_at`] for a regex selector.
#[inline(never)]
fn sel_regex_matches_at(
    cache: &RefCell<Vec<(u64, u64)>>,
    sel: &Sel,
    key: &[u8],
    slot: u32,
) -> bool {
    match sel {
        Sel::Regex(r, id) if *id < 64 => {
            let bit = 1u64 << id;
            let mut c = cache.borrow_mut();
            let i = slot as usize;
            if c.len() <= i {
                c.resize(i + 1, (0, 0));
            }
            let (known, hit) = c[i];
            if known & bit != 0 {
                return hit & bit != 0;
            }
            let m = r.is_match(key);
            c[i].0 |= bit;
            if m {
                c[i].1 |= bit;
            }
            m
        }
        _ => sel_matches(sel, key),
    }
}

fn to_exclusion(v: &Variable) -> Exclusion {
    use crate::waf::seclang::Selector;
    Exclusion {
        coll: v.collection,
        sel: match &v.selector {
            None => Sel::All,
            Some(Selector::Key(k)) => {
                Sel::Key(k.to_ascii_lowercase().into_bytes().into(), k.clone())
            }
            Some(Selector::Regex { regex, source }) => {
                Sel::Regex(super::keyrx::KeyRegex::new(regex.clone(), source), u32::MAX)
            }
        },
    }
}

/// What the body parsers find goes into the request's collections.
impl body::Sink for Transaction<'_> {
    fn limits(&self) -> body::Limits {
        let l = &self.eng.limits;
        body::Limits {
            json_depth: l.json_depth,
            xml_depth: l.xml_depth,
            max_parts: l.max_parts,
            no_files: l.request_body_no_files_limit,
        }
    }

    fn arg(&mut self, name: &[u8], value: &[u8]) {
        self.add_arg(name, value, true);
    }

    fn file(&mut self, name: &[u8], filename: &[u8], size: usize) {
        let kv = self.d.kv(name, filename);
        self.d.files.push(kv);
        let kv = self.d.kv(name, size.to_string().as_bytes());
        self.d.files_sizes.push(kv);
    }

    fn part_header(&mut self, name: &[u8], line: &[u8]) {
        let kv = self.d.kv(name, line);
        self.d.part_headers.push(kv);
    }

    fn set(&mut self, var: Collection, value: &[u8]) {
        self.d.set(var, value);
    }

    fn xml_text(&mut self, text: Vec<u8>) {
        self.d.set_xml_text(text);
    }

    fn xml_attr(&mut self, value: &[u8]) {
        let kv = self.d.kv(b"", value);
        self.d.xml_attrs.push(kv);
    }
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

    fn set_request(&mut self, req: Request<'_>) {
        use Collection as C;
        let d = &mut self.d;
        let proto = if req.protocol.len() >= 5 && req.protocol[..5].eq_ignore_ascii_case("HTTP/") {
            req.protocol.to_string()
        } else {
            format!("HTTP/{}", req.protocol)
        };
        let raw = req.uri_raw;
        let mut line = Vec::with_capacity(req.method.len() + raw.len() + proto.len() + 2);
        line.extend_from_slice(req.method.as_bytes());
        line.push(b' ');
        line.extend_from_slice(raw);
        line.push(b' ');
        line.extend_from_slice(proto.as_bytes());
        d.set(C::RequestLine, line);
        d.set(C::RequestMethod, req.method.as_bytes());
        d.set(C::RequestProtocol, proto.as_bytes());
        d.set(C::RequestUriRaw, raw);
        let uri = req.uri;
        let no_frag = match memchr::memchr(b'#', uri) {
            Some(p) => &uri[..p],
            None => uri,
        };
        let decoded = transform::uri_decode(no_frag);
        let qpos = memchr::memchr(b'?', no_frag);
        let query = qpos.map(|p| &no_frag[p + 1..]);
        if let Some(q) = query {
            d.set(C::QueryString, q);
        }
        let path: &[u8] = match memchr::memchr(b'?', &decoded) {
            Some(p) => &decoded[..p],
            None => &decoded,
        };
        if let Some(off) = path.iter().rposition(|&c| c == b'/' || c == b'\\') {
            if path.len() > off + 1 {
                d.set(C::RequestBasename, &path[off + 1..]);
            }
        }
        d.set(C::RequestFilename, path);
        let mut parsed: &[u8] = &decoded;
        if !decoded.is_empty() && decoded[0] != b'/' {
            if let Some(colon) = memchr::memchr(b':', &decoded) {
                let host = colon + 3;
                if decoded.len() >= host && &decoded[colon + 1..host] == b"//" {
                    if let Some(p) = memchr::memchr(b'/', &decoded[host..]) {
                        parsed = &decoded[host + p..];
                    }
                }
            }
        }
        let parsed = parsed.to_vec();
        d.set(C::RequestUri, parsed);
        d.set(C::RemoteAddr, req.remote_addr.as_bytes());
        d.set(C::RemoteHost, req.remote_addr.as_bytes());
        d.set(C::RemotePort, req.remote_port.to_string());
        d.set(C::ServerAddr, req.local_addr.as_bytes());
        d.set(C::ServerPort, req.local_port.to_string());
        d.set(C::UniqueId, req.unique_id.as_bytes());
        if let Some(q) = query {
            let q = q.to_vec();
            self.add_urlencoded(&q, false);
        }
        for (name, value) in req.headers {
            self.add_header(name, value);
        }
    }

    fn add_header(&mut self, name: &[u8], value: &[u8]) {
        let kv = self.d.kv(name, value);
        self.d.headers.push(kv);
        if name.eq_ignore_ascii_case(b"cookie") {
            self.add_cookies(value);
        } else if name.eq_ignore_ascii_case(b"content-type") {
            self.content_type = value.to_vec();
            let l = value.to_ascii_lowercase();
            if l.starts_with(b"multipart/form-data") {
                self.body_type = Some(BodyProcessor::Multipart);
                self.d.set(Collection::ReqbodyProcessor, "MULTIPART");
            } else if l.starts_with(b"application/x-www-form-urlencoded") {
                self.body_type = Some(BodyProcessor::UrlEncoded);
                self.d.set(Collection::ReqbodyProcessor, "URLENCODED");
            }
        } else if name.eq_ignore_ascii_case(b"host") {
            let host = if value.first() == Some(&b'[') {
                match memchr::memchr(b']', value) {
                    Some(p) => &value[..=p],
                    None => value,
                }
            } else {
                match memchr::memchr(b':', value) {
                    Some(p) => &value[..p],
                    None => value,
                }
            };
            self.d.set(Collection::ServerName, host);
        } else if name.eq_ignore_ascii_case(b"authorization") {
            let scheme = value.split(|&c| c == b' ').next().unwrap_or(b"");
            self.d.set(Collection::AuthType, scheme);
        }
    }

    /// ModSecurity v3's cookie parsing: `;`-separated, the last pair's
    /// trailing blanks dropped, split at the first `=`, keys left-trimmed,
    /// empty keys skipped.
    fn add_cookies(&mut self, value: &[u8]) {
        let mut pieces: Vec<&[u8]> = value.split(|&c| c == b';').collect();
        // getline drops a final empty piece.
        if pieces.last().is_some_and(|p| p.is_empty()) {
            pieces.pop();
        }
        if let Some(last) = pieces.last_mut() {
            while let Some((&c, rest)) = last.split_last() {
                if c.is_ascii_whitespace() || c == 0x0b {
                    *last = rest;
                } else {
                    break;
                }
            }
        }
        for c in pieces {
            if c.is_empty() {
                continue;
            }
            let (k, v) = match memchr::memchr(b'=', c) {
                Some(p) => (&c[..p], &c[p + 1..]),
                None => (c, &b""[..]),
            };
            let k = {
                let s = k
                    .iter()
                    .position(|&x| !(x.is_ascii_whitespace() || x == 0x0b))
                    .unwrap_or(k.len());
                &k[s..]
            };
            if k.is_empty() {
                continue;
            }
            let kv = self.d.kv(k, v);
            self.d.cookies.push(kv);
        }
    }

    /// Splits `a=1&b=2` into ARGS_GET or ARGS_POST.
    pub(crate) fn add_urlencoded(&mut self, s: &[u8], post: bool) {
        let sep = self.eng.limits.argument_separator;
        let mut pieces: Vec<&[u8]> = s.split(|&c| c == sep).collect();
        if pieces.last().is_some_and(|p| p.is_empty()) {
            pieces.pop();
        }
        let mut invalid = false;
        for p in pieces {
            let (k, v) = match memchr::memchr(b'=', p) {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &b""[..]),
            };
            let k = transform::url_decode_nonstrict(k, &mut invalid);
            let v = transform::url_decode_nonstrict(v, &mut invalid);
            self.add_arg(&k, &v, post);
        }
        if invalid {
            self.d.set(Collection::UrlencodedError, "1");
        }
    }

    pub(crate) fn add_arg(&mut self, k: &[u8], v: &[u8], post: bool) -> bool {
        if self.d.args.len() >= self.eng.limits.max_args {
            return false;
        }
        let kv = self.d.kv(k, v);
        self.d.args.push(Arg { kv, post });
        true
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

    /// The values of a variable as rules see them, e.g. `ARGS_POST` or
    /// `MULTIPART_STRICT_ERROR` (names and values).
    pub fn values(&mut self, var: &str) -> Vec<(String, Vec<u8>)> {
        let Ok(vars) = crate::waf::seclang::parse_variables(var) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for v in vars {
            let t = Target {
                coll: v.collection,
                sel: to_exclusion(&v).sel,
                count: v.count,
            };
            let mut vals = Vec::new();
            self.collect(&t, &[], &mut vals, None);
            for v in vals {
                out.push((
                    String::from_utf8_lossy(&v.name(&self.d, &self.st.tx)).into_owned(),
                    v.value(&self.d, &self.st.tx).to_vec(),
                ));
            }
        }
        out
    }

    // ------------------------------------------------------------------
    // rule evaluation

    fn run_phase(&mut self, phase: u8) {
        if self.st.mode == EngineMode::Off {
            return;
        }
        if phase < 5 && self.outcome.interrupted.is_some() {
            return;
        }
        let eng = self.eng.clone();
        let prog: &Program = &eng.prog;
        let list = &prog.phases[usize::from(phase)];
        // The data changed since the last phase.
        self.lists_gen += 1;
        let mut i = if phase == 1 {
            self.resume_head(&eng)
        } else {
            0
        };
        while i < list.len() {
            let item = list[i];
            i += 1;
            if self.skipped(item) {
                continue;
            }
            if let Some(a) = self.st.allow {
                let skip = match a {
                    AllowScope::All => phase < 5,
                    AllowScope::Request => phase <= 2,
                    AllowScope::Phase => phase == self.st.allow_phase,
                };
                if skip {
                    break;
                }
            }
            let Item::Rule(ri, jump) = item else { continue };
            let r = &prog.rules[ri as usize];
            if self.removed(r) {
                continue;
            }
            if self.eval_rule(&eng, r) {
                self.skip_after_match(r, jump, &mut i);
            }
            if phase < 5 && self.outcome.interrupted.is_some() {
                break;
            }
        }
        // How many TX variables transactions hold, for the next ones' room
        // (read first: no write to the shared line once it settled).
        // Bounded: request data may name TX variables.
        let n = self.st.tx.entries.len().min(1024);
        if n > eng.tx_vars_hint.load(std::sync::atomic::Ordering::Relaxed) {
            eng.tx_vars_hint
                .fetch_max(n, std::sync::atomic::Ordering::Relaxed);
        }
        if self.st.allow == Some(AllowScope::Phase) && self.st.allow_phase == phase {
            self.st.allow = None;
        }
        self.outcome.limits_exceeded = self.st.limit_hit;
    }

    /// Starts phase 1 where its request-independent head left TX and the
    /// loop ([`super::head`]): the position to go on from (0 when there is
    /// no head for this transaction's presets).
    fn resume_head(&mut self, eng: &Engine) -> usize {
        if !self.use_head {
            return 0;
        }
        // Nothing but the presets ran before phase 1: TX is all there is.
        let tx = &self.st.tx;
        let Some(h) = eng.heads.get_or_make(
            || tx.pairs(),
            || Self::make_head(eng, &tx.pairs().collect::<Vec<_>>()),
        ) else {
            return 0;
        };
        if h.resume == 0 {
            return 0;
        }
        self.st.tx.recycle();
        for (k, v, lower) in &h.tx {
            self.st.tx.push_new(k, v, lower);
        }
        self.st.skip_marker = h.skip_marker;
        self.st.skip_next = h.skip_next;
        self.st.ops = h.ops;
        self.st.scanned = h.scanned;
        self.st.has_mv = h.mv.is_some();
        if let Some((n, v)) = &h.mv {
            self.st.mv.0.clear();
            self.st.mv.0.extend_from_slice(n);
            self.st.mv.1.clear();
            self.st.mv.1.extend_from_slice(v);
        }
        self.st.mvs_len = 0;
        for (n, v) in &h.matched_vars {
            if self.st.mvs_len == self.st.matched_vars.len() {
                self.st.matched_vars.push((Vec::new(), Vec::new()));
            }
            let e = &mut self.st.matched_vars[self.st.mvs_len];
            e.0.clear();
            e.0.extend_from_slice(n);
            e.1.clear();
            e.1.extend_from_slice(v);
            self.st.mvs_len += 1;
        }
        h.resume
    }

    /// Runs the head of phase 1 on a transaction of no request with these
    /// presets: once to find where it ends, again to stop just before (a
    /// rule that left a trace beyond TX ends it after the fact).
    fn make_head(eng: &Engine, presets: &[(&[u8], &[u8])]) -> super::head::Head {
        let req = Request {
            method: "GET",
            uri: b"/",
            uri_raw: b"/",
            protocol: "HTTP/1.1",
            headers: &[],
            remote_addr: "",
            remote_port: 0,
            local_addr: "",
            local_port: 0,
            unique_id: "",
        };
        let start = |limit: usize| {
            let mut t = Transaction::new(eng, req.clone());
            for (k, v) in presets {
                t.preset_tx(k, v);
            }
            let end = t.run_head(eng, limit);
            (t, end)
        };
        let (t, end) = match start(usize::MAX) {
            (_, Err(e)) => start(e),
            done => done,
        };
        // An error here would mean the second run went otherwise.
        let resume = end.unwrap_or_default();
        let st = &t.st;
        super::head::Head {
            presets: presets
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
            resume,
            tx: st
                .tx
                .pairs()
                .map(|(k, v)| (k.to_vec(), v.to_vec(), k.to_ascii_lowercase()))
                .collect(),
            skip_marker: st.skip_marker,
            skip_next: st.skip_next,
            ops: st.ops,
            scanned: st.scanned,
            mv: st.has_mv.then(|| st.mv.clone()),
            matched_vars: st.matched_vars[..st.mvs_len].to_vec(),
        }
    }

    /// Runs phase 1 from its start while the rules are pure
    /// ([`super::head::pure`]) and before `limit`: `Ok` with the position
    /// of the first rule not run, `Err` with the position of a rule that
    /// ran and left a trace beyond TX (the state includes it).
    fn run_head(&mut self, eng: &Engine, limit: usize) -> Result<usize, usize> {
        let prog = &eng.prog;
        let list = &prog.phases[1];
        let mut i = 0usize;
        while i < list.len() && i < limit {
            let at = i;
            let item = list[i];
            i += 1;
            if self.skipped(item) {
                continue;
            }
            let Item::Rule(ri, jump) = item else { continue };
            let r = &prog.rules[ri as usize];
            if !super::head::pure(r) {
                return Ok(at);
            }
            let matched = self.eval_rule(eng, r);
            // A pure rule has no ctl, initcol or setenv: what else it can
            // leave beyond TX is a disruption (blocking, allowing), a
            // logged match, a severity, the work bound.
            if (matched && super::head::disrupts(r))
                || !self.outcome.matched.is_empty()
                || self.st.highest_severity.is_some()
                || self.st.limit_hit
            {
                return Err(at);
            }
            if matched {
                self.skip_after_match(r, jump, &mut i);
            }
        }
        // Past `limit` only by a jump, which skipped what lies between.
        Ok(i)
    }

    /// Whether a `skip` or `skipAfter` in force passes over `item` (a
    /// marker ends the `skipAfter` it names).
    fn skipped(&mut self, item: Item) -> bool {
        if let Some(m) = self.st.skip_marker {
            if let Item::Marker(x) = item {
                if x == m {
                    self.st.skip_marker = None;
                }
            }
            return true;
        }
        if self.st.skip_next > 0 {
            self.st.skip_next -= 1;
            return true;
        }
        false
    }

    /// A rule matched: its `skip`, and its `skipAfter` (a jump to after the
    /// marker when it is in this phase, else skipping until it).
    fn skip_after_match(&mut self, r: &CRule, jump: Option<u32>, i: &mut usize) {
        if r.skip > 0 {
            self.st.skip_next = r.skip;
        }
        if let Some(m) = r.skip_after {
            match jump {
                Some(j) => *i = j as usize,
                None => self.st.skip_marker = Some(m),
            }
        }
    }

    fn removed(&self, r: &CRule) -> bool {
        let st = &self.st;
        (!st.removed_ids.is_empty() && st.removed_ids.iter().any(|g| g.contains(r.id)))
            || (!st.removed_tags.is_empty()
                && st.removed_tags.iter().any(|t| r.tag_ids.contains(t)))
            || (!st.removed_msgs.is_empty()
                && r.msg_raw
                    .as_ref()
                    .is_some_and(|m| st.removed_msgs.iter().any(|x| x == m)))
    }

    fn eval_rule(&mut self, eng: &Engine, r: &CRule) -> bool {
        let log = r.log;
        if log {
            self.st.cur_msg.clear();
            self.st.cur_logdata.clear();
        }
        for link in &r.links {
            if !self.eval_link(eng, r, link) {
                self.st.has_mv = false;
                self.st.mvs_len = 0;
                return false;
            }
        }
        // A chain's logdata says what the whole chain matched: expanded
        // again now, with the last link's captures and matched variable
        // (ModSecurity v3 evaluates it after the full match).
        if log && r.links.len() > 1 {
            if let Some(m) = &r.links[0].logdata {
                let mut out = std::mem::take(&mut self.st.cur_logdata);
                out.clear();
                self.expand(m, Some(r), &mut out);
                self.st.cur_logdata = out;
            }
        }
        // The whole chain matched: the actions that wait for it, the
        // last link's first (as ModSecurity unwinds its recursion).
        for link in r.links.iter().rev() {
            for p in &link.post {
                self.run_post(r, p);
            }
        }
        if let Some(s) = r.severity {
            let s = s as u8;
            if self.st.highest_severity.is_none_or(|h| s < h) {
                self.st.highest_severity = Some(s);
            }
        }
        let mut disrupted = false;
        if self.st.mode == EngineMode::On {
            let kind = match &r.disruptive {
                CDisruptive::Pass => None,
                CDisruptive::Deny => Some((InterventionKind::Deny, r.status.unwrap_or(403))),
                CDisruptive::Drop => Some((InterventionKind::Drop, r.status.unwrap_or(403))),
                CDisruptive::Redirect(m) => {
                    let mut url = Vec::new();
                    self.expand(m, Some(r), &mut url);
                    let status = r
                        .status
                        .filter(|s| matches!(s, 301 | 302 | 303 | 307))
                        .unwrap_or(302);
                    Some((
                        InterventionKind::Redirect(String::from_utf8_lossy(&url).into_owned()),
                        status,
                    ))
                }
                CDisruptive::Allow(scope) => {
                    self.st.allow = Some(*scope);
                    self.st.allow_phase = r.phase;
                    None
                }
            };
            if let Some((kind, status)) = kind {
                disrupted = true;
                self.outcome.interrupted = Some(Intervention {
                    kind,
                    status,
                    rule_id: r.id,
                    phase: r.phase,
                    message: String::from_utf8_lossy(&self.st.cur_msg).into_owned(),
                });
            }
        }
        if log {
            let limit = self.eng.limits.logdata_limit;
            let mut logdata = String::from_utf8_lossy(&self.st.cur_logdata).into_owned();
            truncate(&mut logdata, limit);
            let (mut name, mut value) = match self.st.has_mv.then_some(&self.st.mv) {
                Some((n, v)) => (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ),
                None => (String::new(), String::new()),
            };
            truncate(&mut name, limit);
            truncate(&mut value, limit);
            self.outcome.matched.push(MatchedRule {
                id: r.id,
                phase: r.phase,
                msg: String::from_utf8_lossy(&self.st.cur_msg).into_owned(),
                logdata,
                severity: r.severity,
                tags: r.tags.clone(),
                ver: r.ver.clone(),
                matched_var_name: name,
                matched_var: value,
                disruptive: disrupted,
            });
        }
        true
    }

    fn run_post(&mut self, r: &CRule, p: &Post) {
        match p {
            Post::Ctl(c) => self.ctl(c),
            Post::InitCol(name, key) => {
                let mut k = Vec::new();
                self.expand(key, Some(r), &mut k);
                if !self.st.others.iter().any(|(n, _)| n == name) {
                    let mut m = VarMap::default();
                    m.set(b"KEY", k);
                    self.st.others.push((name.clone(), m));
                }
            }
            Post::SetEnv(name, value) => {
                let mut n = Vec::new();
                self.expand(name, Some(r), &mut n);
                match value {
                    Some(v) => {
                        let mut val = Vec::new();
                        self.expand(v, Some(r), &mut val);
                        self.st.env.set(&n, val);
                    }
                    None => self.st.env.delete(&n),
                }
            }
        }
    }

    fn ctl(&mut self, c: &Ctl) {
        self.lists_gen += 1;
        let st = &mut self.st;
        match c {
            Ctl::RuleEngine(m) => st.mode = *m,
            Ctl::RuleRemoveById(r) => st.removed_ids.extend_from_slice(r),
            Ctl::RuleRemoveByTag(t) => st.removed_tags.push(self.eng.prog.tag_id(t)),
            Ctl::RuleRemoveByMsg(m) => st.removed_msgs.push(m.clone()),
            Ctl::RuleRemoveTargetById(r, vars) => {
                for v in vars {
                    st.removed_targets
                        .push((Which::Ids(r.clone()), to_exclusion(v)));
                }
            }
            Ctl::RuleRemoveTargetByTag(t, vars) => {
                for v in vars {
                    st.removed_targets
                        .push((Which::Tag(self.eng.prog.tag_id(t)), to_exclusion(v)));
                }
            }
            Ctl::RuleRemoveTargetByMsg(t, vars) => {
                for v in vars {
                    st.removed_targets
                        .push((Which::Msg(t.clone()), to_exclusion(v)));
                }
            }
            Ctl::RequestBodyProcessor(p) => {
                st.body_processor = Some(*p);
                let name = match p {
                    BodyProcessor::UrlEncoded => "URLENCODED",
                    BodyProcessor::Multipart => "MULTIPART",
                    BodyProcessor::Xml => "XML",
                    BodyProcessor::Json => "JSON",
                };
                self.d.set(Collection::ReqbodyProcessor, name);
            }
            Ctl::RequestBodyAccess(b) => st.request_body_access = *b,
            Ctl::ResponseBodyAccess(b) => st.response_body_access = *b,
            Ctl::RequestBodyLimit(n) => st.request_body_limit = *n,
            _ => {}
        }
    }

    /// The target removals (`ctl:ruleRemoveTarget...`) for rule `r`.
    /// The target removals that apply to `r`, into `out` (cleared first).
    fn removals_into(&self, r: &CRule, out: &mut Vec<Exclusion>) {
        out.clear();
        // A plain loop: asked by every link, and most removals apply to
        // none of them.
        for (w, e) in &self.st.removed_targets {
            let applies = match w {
                Which::Ids(g) => g.iter().any(|g| g.contains(r.id)),
                Which::Tag(t) => r.tag_ids.contains(t),
                Which::Msg(m) => r.msg_raw.as_ref().is_some_and(|x| x == m),
            };
            if applies {
                out.push(e.clone());
            }
        }
    }

    fn eval_link(&mut self, eng: &Engine, r: &CRule, link: &Link) -> bool {
        if link.unconditional {
            self.on_match(r, link);
            return true;
        }
        if let Some(key) = &link.tx_key {
            // A removal of another collection (CRS 941010 takes
            // REQUEST_FILENAME from the XSS rules of most requests) leaves
            // a TX target as it is.
            if self
                .st
                .removed_targets
                .iter()
                .all(|(_, e)| e.coll != Collection::Tx)
            {
                return self.eval_tx_key(eng, r, link, key);
            }
        }
        // Reused: the rules of most requests run after a ctl removal
        // (CRS 941010), each link asking for its own.
        let mut removals = std::mem::take(&mut self.removals);
        self.removals_into(r, &mut removals);
        // The values of a shared target list, collected once per phase
        // (and again after a ctl). Target removals (`ctl:ruleRemoveTarget*`)
        // are then applied per value (`removed_value`): CRS 941010 removes
        // REQUEST_FILENAME from the 33 XSS rules of almost every request,
        // which would otherwise collect their own lists and lose the list
        // summary. Lists that removals cannot be applied to per value
        // (counted; holding XML or values without a data slot) are the
        // rule's own.
        let by_value = !removals.is_empty() && link.targets.iter().all(|t| !t.count);
        let mut shared = (link.targets_id != NO_TARGETS_ID && (removals.is_empty() || by_value))
            .then_some(link.targets_id as usize);
        let mut vals = match shared {
            Some(id) => self.shared_list(link, id),
            None => std::mem::take(&mut self.vals),
        };
        if let Some(id) = shared.filter(|_| by_value) {
            let per_value = |v: &Val| match v.src {
                Src::List(l, ..) => l != ListId::XmlAttrs,
                Src::Single(_) => true,
                _ => false,
            };
            if !vals.iter().all(per_value) {
                self.lists[id] = (self.lists_gen, vals);
                vals = std::mem::take(&mut self.vals);
                shared = None;
            }
        }
        if shared.is_none() {
            vals.clear();
        }
        for t in link.targets.iter().filter(|_| shared.is_none()) {
            let whole = removals.iter().any(|e| {
                e.coll == t.coll
                    && match (&e.sel, &t.sel) {
                        (Sel::All, _) => true,
                        (Sel::Key(a, _), Sel::Key(b, _)) => a == b,
                        _ => false,
                    }
            });
            if whole {
                continue;
            }
            self.collect(t, &link.exclusions, &mut vals, Some(&removals));
        }
        let filter_removals = by_value && shared.is_some();
        let arg = self.op_arg(link, r);
        let arg = arg.as_deref();
        let limits = &eng.limits;
        let prog = &eng.prog;
        let mut any = false;
        let mut tmp = std::mem::take(&mut self.tmpval);
        let ruled_out = shared.is_some()
            && link.summary_group != NO_SUMMARY_GROUP
            && self.summary_rules_out(prog, limits, link, &vals);
        for v in vals.iter().filter(|_| !ruled_out) {
            if filter_removals && self.removed_value(link, v, &removals) {
                continue;
            }
            let slot = match v.slot(&self.d) {
                Some(s) => s,
                None => self.cache.volatile(),
            };
            if link.multi_match {
                // The value, then each transformation's result that
                // differs from the one before. The value is copied (the
                // actions of a match may change it, if it is a TX
                // variable); the lists are reused.
                tmp.clear();
                tmp.extend_from_slice(v.value(&self.d, &self.st.tx));
                let mut path = std::mem::take(&mut self.mm_path);
                path.clear();
                let mut n = link.tnode;
                while n != 0 {
                    path.push(n);
                    n = prog.tnodes[n as usize].parent;
                }
                let mut results = std::mem::take(&mut self.mm_results);
                results.clear();
                results.push(SAME);
                for &n in path.iter().rev() {
                    let r = self.cache.get(&prog.tnodes, slot, n, &tmp);
                    if Some(&r) != results.last() {
                        results.push(r);
                    }
                }
                for &res in &results {
                    let input = self.cache.slice(res, &tmp);
                    if run_op(&mut self.st, limits, link, input, arg) {
                        any = true;
                        set_matched(&mut self.st, &self.d, v, input);
                        self.on_match(r, link);
                    }
                }
                self.mm_path = path;
                self.mm_results = results;
            } else {
                let orig: &[u8] = if let Src::Tx(i) = v.src {
                    tmp.clear();
                    tmp.extend_from_slice(self.st.tx.at(i).1);
                    &tmp
                } else {
                    v.value_d(&self.d)
                };
                let res = self.cache.get(&prog.tnodes, slot, link.tnode, orig);
                let sig = if link.sig {
                    self.cache.sig(res, slot, orig)
                } else {
                    None
                };
                let sig = sig.map(|i| &self.cache.sigs[i as usize]);
                let input: &[u8] = self.cache.slice(res, orig);
                if run_op_sig(&mut self.st, limits, link, input, arg, sig) {
                    any = true;
                    set_matched(&mut self.st, &self.d, v, input);
                    self.on_match(r, link);
                }
            }
        }
        self.tmpval = tmp;
        if self.cache.next_volatile > 0 {
            // Only this link's: the rows past them are clear already.
            let used = self.cache.next_volatile as usize;
            for v in self.cache.vslots.iter_mut().take(used).flatten() {
                v.fill(UNSET);
            }
            self.cache.next_volatile = 0;
        }
        match shared {
            // `shared_list` made room for it.
            Some(id) => self.lists[id] = (self.lists_gen, vals),
            None => self.vals = vals,
        }
        self.removals = removals;
        any
    }

    /// [`Transaction::eval_link`] of a link reading one TX variable as it
    /// is (`Link::tx_key`), with no removal of a TX target in force: what
    /// collecting its one-value list would do.
    fn eval_tx_key(&mut self, eng: &Engine, r: &CRule, link: &Link, key: &[u8]) -> bool {
        let Some(i) = self.st.tx.index_of(key) else {
            return false;
        };
        let arg = self.op_arg(link, r);
        // A copy: the actions of a match may change the variable.
        let mut value = std::mem::take(&mut self.tmpval);
        value.clear();
        value.extend_from_slice(self.st.tx.at(i as u32).1);
        let m = run_op_sig(
            &mut self.st,
            &eng.limits,
            link,
            &value,
            arg.as_deref(),
            None,
        );
        if m {
            let v = Val {
                coll: Collection::Tx,
                src: Src::Tx(i as u32),
            };
            set_matched(&mut self.st, &self.d, &v, &value);
            self.on_match(r, link);
        }
        self.tmpval = value;
        m
    }

    /// Shared target list `id` of `link` for this phase: taken from the
    /// transaction (its capacity reused), collected again if stale (with
    /// the link's exclusions; never with target removals, which differ
    /// per rule). The caller puts it back.
    fn shared_list(&mut self, link: &Link, id: usize) -> Vec<Val> {
        if self.lists.len() <= id {
            self.lists.resize_with(id + 1, Default::default);
        }
        let (gen, list) = &mut self.lists[id];
        let fresh = *gen != self.lists_gen;
        let mut vals = std::mem::take(list);
        if fresh {
            vals.clear();
            for t in &link.targets {
                self.collect(t, &link.exclusions, &mut vals, None);
            }
        }
        vals
    }

    /// Whether a target removal of the rule takes out `v`, a member of a
    /// shared list: what collecting the rule's own list would have left
    /// out (a removal of the whole collection or of the target's key, or
    /// one matching the member's key).
    fn removed_value(&self, link: &Link, v: &Val, removals: &[Exclusion]) -> bool {
        match v.src {
            Src::List(l, i, _) => {
                let kv = kv_of(&self.d, l, i);
                removals.iter().any(|e| {
                    e.coll == v.coll
                        && sel_matches_at(&self.sel_cache, &e.sel, &kv.key, kv.slot + 1)
                })
            }
            Src::Single(_) => removals.iter().any(|e| {
                e.coll == v.coll
                    && match &e.sel {
                        Sel::All => true,
                        Sel::Key(a, _) => link.targets.iter().any(|t| {
                            t.coll == v.coll && matches!(&t.sel, Sel::Key(b, _) if a == b)
                        }),
                        Sel::Regex(..) => false,
                    }
            }),
            _ => false,
        }
    }

    /// Whether the union of the summaries of a shared list's values rules
    /// out every value for `link` (see `Link::summary_group`); the work
    /// bound then counts the scans as if each value had been looked at.
    fn summary_rules_out(
        &mut self,
        prog: &Program,
        limits: &super::Limits,
        link: &Link,
        vals: &[Val],
    ) -> bool {
        let s = self.list_summary(prog, link, vals);
        let Some(sig) = self.cache.sigs.get(s.sig as usize) else {
            return false;
        };
        let may = match &link.op {
            COp::Op(operator::Operator::Rx(rx)) => rx.may_match_summary(sig),
            COp::Op(operator::Operator::Pm(pm)) => pm.may_match_summary(sig),
            _ => true,
        };
        !may && count_skipped_scans(&mut self.st, limits, s.values, s.bytes)
    }

    /// The summary of `vals` through `link`'s pipeline, built by the first
    /// link of its group to ask in this generation.
    fn list_summary(&mut self, prog: &Program, link: &Link, vals: &[Val]) -> ListSummary {
        let g = link.summary_group as usize;
        if let Some(s) = self.summaries.get(g).filter(|s| s.gen == self.lists_gen) {
            return *s;
        }
        let mut union = operator::Sig::empty();
        let mut bytes = 0u64;
        let mut known = true;
        for v in vals {
            let Some(slot) = v.slot(&self.d) else {
                known = false;
                break;
            };
            let orig = v.value_d(&self.d);
            let res = self.cache.get(&prog.tnodes, slot, link.tnode, orig);
            let Some(i) = self.cache.sig(res, slot, orig) else {
                known = false;
                break;
            };
            union.add(&self.cache.sigs[i as usize]);
            bytes += self.cache.slice(res, orig).len() as u64;
        }
        let sig = if known {
            self.cache.sigs.push(union);
            (self.cache.sigs.len() - 1) as u32
        } else {
            UNSET
        };
        let s = ListSummary {
            gen: self.lists_gen,
            sig,
            values: vals.len() as u64,
            bytes,
        };
        if let Some(slot) = self.summaries.get_mut(g) {
            *slot = s;
        }
        s
    }

    /// The expanded argument of an operator with macros.
    fn op_arg(&self, link: &Link, r: &CRule) -> Option<Vec<u8>> {
        match &link.op {
            COp::Dynamic(_, m) | COp::DynamicRx(m) => {
                let mut out = Vec::new();
                self.expand(m, Some(r), &mut out);
                Some(out)
            }
            _ => None,
        }
    }

    /// A value matched: MATCHED_VAR(S), then the actions ModSecurity runs
    /// per match (setvar, severity, msg and logdata).
    fn on_match(&mut self, r: &CRule, link: &Link) {
        for s in &link.setvars {
            self.setvar(r, s);
        }
        if r.log {
            if let Some(m) = &link.logdata {
                let mut out = std::mem::take(&mut self.st.cur_logdata);
                out.clear();
                self.expand(m, Some(r), &mut out);
                self.st.cur_logdata = out;
            }
            if let Some(m) = &link.msg {
                let mut out = std::mem::take(&mut self.st.cur_msg);
                out.clear();
                self.expand(m, Some(r), &mut out);
                self.st.cur_msg = out;
            }
        }
    }

    fn setvar(&mut self, r: &CRule, s: &CSetVar) {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        self.expand(&s.key, Some(r), &mut key);
        let new = match &s.op {
            CSetOp::Delete => {
                self.map_mut(&s.coll).delete(&key);
                self.scratch = key;
                return;
            }
            CSetOp::Set(m) => {
                let mut v = std::mem::take(&mut self.setbuf);
                v.clear();
                self.expand(m, Some(r), &mut v);
                v
            }
            CSetOp::Add(m) | CSetOp::Sub(m) => {
                let mut v = std::mem::take(&mut self.setbuf);
                v.clear();
                self.expand(m, Some(r), &mut v);
                let delta = operator::stoi(&v);
                let cur = self
                    .map(&s.coll)
                    .and_then(|m| m.get_any_case(&key))
                    .map(operator::stoi)
                    .unwrap_or(0);
                let n = if matches!(s.op, CSetOp::Add(_)) {
                    cur + delta
                } else {
                    cur - delta
                };
                v.clear();
                use std::io::Write;
                let _ = write!(v, "{n}");
                v
            }
        };
        // Into the existing value's buffer: the setup rules and the
        // anomaly scores rewrite the same variables in every transaction.
        self.map_mut(&s.coll).set_slice(&key, &new);
        self.setbuf = new;
        self.scratch = key;
    }

    fn map(&self, coll: &str) -> Option<&VarMap> {
        if coll == "tx" {
            return Some(&self.st.tx);
        }
        self.st
            .others
            .iter()
            .find(|(n, _)| &**n == coll)
            .map(|(_, m)| m)
    }

    fn map_mut(&mut self, coll: &str) -> &mut VarMap {
        if coll == "tx" {
            return &mut self.st.tx;
        }
        if coll == "env" {
            return &mut self.st.env;
        }
        let i = match self.st.others.iter().position(|(n, _)| &**n == coll) {
            Some(i) => i,
            None => {
                self.st.others.push((coll.into(), VarMap::default()));
                self.st.others.len() - 1
            }
        };
        &mut self.st.others[i].1
    }

    fn other(&self, c: Collection) -> Option<&VarMap> {
        let n = match c {
            Collection::Ip => "ip",
            Collection::Global => "global",
            Collection::Session => "session",
            Collection::User => "user",
            Collection::Resource => "resource",
            _ => return None,
        };
        self.map(n)
    }

    /// Expands a macro into `out`.
    fn expand(&self, m: &CMacro, r: Option<&CRule>, out: &mut Vec<u8>) {
        for p in &m.parts {
            match p {
                CPart::Lit(s) => out.extend_from_slice(s),
                CPart::Var { coll, key } => self.resolve_first(*coll, key.as_deref(), r, out),
            }
        }
    }

    /// The first value of `coll[:key]` (what a macro expands to).
    fn resolve_first(
        &self,
        coll: Collection,
        key: Option<&[u8]>,
        r: Option<&CRule>,
        out: &mut Vec<u8>,
    ) {
        use Collection as C;
        match (coll, key) {
            (C::Tx, Some(k)) => {
                if let Some(v) = self.st.tx.get(k) {
                    out.extend_from_slice(v);
                }
            }
            (C::MatchedVar, _) => {
                if self.st.has_mv {
                    out.extend_from_slice(&self.st.mv.1);
                }
            }
            (C::MatchedVarName, _) => {
                if self.st.has_mv {
                    out.extend_from_slice(&self.st.mv.0);
                }
            }
            (C::Rule, Some(k)) => {
                let Some(r) = r else { return };
                match k {
                    b"id" => out.extend_from_slice(r.id.to_string().as_bytes()),
                    b"phase" => out.extend_from_slice(r.phase.to_string().as_bytes()),
                    b"msg" => out.extend_from_slice(&self.st.cur_msg),
                    b"logdata" => out.extend_from_slice(&self.st.cur_logdata),
                    b"severity" => {
                        if let Some(s) = r.severity {
                            out.extend_from_slice((s as u8).to_string().as_bytes())
                        }
                    }
                    b"ver" => {
                        if let Some(v) = &r.ver {
                            out.extend_from_slice(v.as_bytes())
                        }
                    }
                    b"rev" => {
                        if let Some(v) = &r.rev {
                            out.extend_from_slice(v.as_bytes())
                        }
                    }
                    _ => {}
                }
            }
            _ => {
                let t = Target {
                    coll,
                    sel: match key {
                        Some(k) => Sel::Key(k.into(), "".into()),
                        None => Sel::All,
                    },
                    count: false,
                };
                let mut vals = Vec::new();
                self.collect(&t, &[], &mut vals, None);
                if let Some(v) = vals.first() {
                    out.extend_from_slice(v.value(&self.d, &self.st.tx));
                }
            }
        }
    }

    /// The values of one target, exclusions applied.
    fn collect(
        &self,
        t: &Target,
        excl: &[Exclusion],
        out: &mut Vec<Val>,
        removals: Option<&[Exclusion]>,
    ) {
        use Collection as C;
        let removals = removals.unwrap_or(&[]);
        let sc = &self.sel_cache;
        let excluded = |coll: Collection, key: &[u8]| -> bool {
            excl.iter()
                .chain(removals.iter())
                .any(|e| e.coll == coll && sel_matches(&e.sel, key))
        };
        let excluded_at = |coll: Collection, key: &[u8], slot: u32| -> bool {
            excl.iter()
                .chain(removals.iter())
                .any(|e| e.coll == coll && sel_matches_at(sc, &e.sel, key, slot))
        };
        let start = out.len();
        let d = &self.d;
        let coll = t.coll;
        let push_list = |l: ListId, items: &[Kv], names: bool, out: &mut Vec<Val>| {
            for (i, kv) in items.iter().enumerate() {
                if !sel_matches_at(sc, &t.sel, &kv.key, kv.slot + 1)
                    || excluded_at(coll, &kv.key, kv.slot + 1)
                {
                    continue;
                }
                out.push(Val {
                    coll,
                    src: Src::List(l, i as u32, names),
                });
            }
        };
        match coll {
            C::Args
            | C::ArgsGet
            | C::ArgsPost
            | C::ArgsNames
            | C::ArgsGetNames
            | C::ArgsPostNames => {
                let names = matches!(coll, C::ArgsNames | C::ArgsGetNames | C::ArgsPostNames);
                for (i, a) in d.args.iter().enumerate() {
                    let keep = match coll {
                        C::ArgsGet | C::ArgsGetNames => !a.post,
                        C::ArgsPost | C::ArgsPostNames => a.post,
                        _ => true,
                    };
                    if !keep
                        || !sel_matches_at(sc, &t.sel, &a.kv.key, a.kv.slot + 1)
                        || excluded_at(coll, &a.kv.key, a.kv.slot + 1)
                    {
                        continue;
                    }
                    out.push(Val {
                        coll,
                        src: Src::List(ListId::Args, i as u32, names),
                    });
                }
            }
            C::RequestHeaders => push_list(ListId::Headers, &d.headers, false, out),
            C::RequestHeadersNames => push_list(ListId::Headers, &d.headers, true, out),
            C::RequestCookies => push_list(ListId::Cookies, &d.cookies, false, out),
            C::RequestCookiesNames => push_list(ListId::Cookies, &d.cookies, true, out),
            C::ResponseHeaders => push_list(ListId::RespHeaders, &d.resp_headers, false, out),
            C::ResponseHeadersNames => push_list(ListId::RespHeaders, &d.resp_headers, true, out),
            C::Files => push_list(ListId::Files, &d.files, false, out),
            C::FilesNames => push_list(ListId::Files, &d.files, true, out),
            C::FilesSizes => push_list(ListId::FilesSizes, &d.files_sizes, false, out),
            C::FilesTmpContent => push_list(ListId::FilesContent, &d.files_content, false, out),
            C::FilesTmpNames => {}
            C::MultipartPartHeaders => push_list(ListId::PartHeaders, &d.part_headers, false, out),
            C::Xml => {
                let raw: &str = match &t.sel {
                    Sel::Key(_, raw) => raw,
                    _ => "/*",
                };
                if raw.contains('@') {
                    push_list(ListId::XmlAttrs, &d.xml_attrs, false, out);
                    // Attribute paths select by XPath, not by key.
                    out.truncate(start);
                    for i in 0..d.xml_attrs.len() {
                        out.push(Val {
                            coll,
                            src: Src::List(ListId::XmlAttrs, i as u32, false),
                        });
                    }
                } else if d.xml_text.is_some() {
                    out.push(Val {
                        coll,
                        src: Src::XmlText,
                    });
                }
            }
            C::Tx | C::Ip | C::Global | C::Session | C::User | C::Resource | C::Env => {
                let m = match coll {
                    C::Tx => Some(&self.st.tx),
                    C::Env => Some(&self.st.env),
                    _ => self.other(coll),
                };
                if let Some(m) = m {
                    let is_tx = coll == C::Tx;
                    let mk = |i: usize, k: &[u8], v: &[u8]| Val {
                        coll,
                        src: if is_tx {
                            Src::Tx(i as u32)
                        } else {
                            Src::Owned(k.to_vec(), v.to_vec())
                        },
                    };
                    match &t.sel {
                        Sel::Key(k, _) => {
                            if let Some(&i) = m.index.get(&**k) {
                                if let Some((key, v)) = &m.entries[i] {
                                    if !excluded(coll, key) {
                                        out.push(mk(i, key, v));
                                    }
                                }
                            }
                        }
                        _ => {
                            for (i, e) in m.entries.iter().enumerate() {
                                if let Some((k, v)) = e {
                                    if sel_matches(&t.sel, k) && !excluded(coll, k) {
                                        out.push(mk(i, k, v));
                                    }
                                }
                            }
                        }
                    }
                }
                if coll == C::Env && out.len() == start {
                    if let Sel::Key(_, raw) = &t.sel {
                        if let Some(v) = std::env::var_os(&**raw) {
                            out.push(Val {
                                coll,
                                src: Src::Owned(
                                    raw.as_bytes().to_vec(),
                                    v.to_string_lossy().as_bytes().to_vec(),
                                ),
                            });
                        }
                    }
                }
            }
            C::MatchedVar => {
                let v: &[u8] = if self.st.has_mv { &self.st.mv.1 } else { b"" };
                out.push(Val {
                    coll,
                    src: Src::Owned(Vec::new(), v.to_vec()),
                });
            }
            C::MatchedVarName => {
                let v: &[u8] = if self.st.has_mv { &self.st.mv.0 } else { b"" };
                out.push(Val {
                    coll,
                    src: Src::Owned(Vec::new(), v.to_vec()),
                });
            }
            C::MatchedVars | C::MatchedVarsNames => {
                for (n, v) in &self.st.matched_vars[..self.st.mvs_len] {
                    if !sel_matches(&t.sel, n) || excluded(coll, n) {
                        continue;
                    }
                    let value = if coll == C::MatchedVars { v } else { n };
                    out.push(Val {
                        coll,
                        src: Src::Owned(n.clone(), value.clone()),
                    });
                }
            }
            C::ArgsCombinedSize => out.push(num(coll, d.args_combined_size() as u64)),
            C::FilesCombinedSize => {
                let n: u64 = d
                    .files_sizes
                    .iter()
                    .map(|kv| operator::stoi(&kv.value).max(0) as u64)
                    .sum();
                out.push(num(coll, n))
            }
            C::FullRequest | C::FullRequestLength => {
                let mut f = Vec::new();
                f.extend_from_slice(d.get(C::RequestLine).unwrap_or(b""));
                f.push(b'\n');
                for h in &d.headers {
                    f.extend_from_slice(&h.key);
                    f.extend_from_slice(b": ");
                    f.extend_from_slice(&h.value);
                    f.push(b'\n');
                }
                f.push(b'\n');
                f.extend_from_slice(&d.body);
                if coll == C::FullRequest {
                    out.push(Val {
                        coll,
                        src: Src::Owned(Vec::new(), f),
                    });
                } else {
                    out.push(owned(coll, f.len().to_string()));
                }
            }
            C::HighestSeverity => out.push(owned(
                coll,
                self.st
                    .highest_severity
                    .map_or("255".to_string(), |s| s.to_string()),
            )),
            C::Duration => out.push(owned(coll, self.started.elapsed().as_micros().to_string())),
            C::Time
            | C::TimeDay
            | C::TimeEpoch
            | C::TimeHour
            | C::TimeMin
            | C::TimeMon
            | C::TimeSec
            | C::TimeWday
            | C::TimeYear => {
                let p = now_parts();
                let s = match coll {
                    C::TimeEpoch => p[0].to_string(),
                    C::TimeYear => p[1].to_string(),
                    C::TimeMon => format!("{:02}", p[2]),
                    C::TimeDay => format!("{:02}", p[3]),
                    C::TimeHour => format!("{:02}", p[4]),
                    C::TimeMin => format!("{:02}", p[5]),
                    C::TimeSec => format!("{:02}", p[6]),
                    C::TimeWday => p[7].to_string(),
                    _ => format!(
                        "{:02}{:02}{:02}{:02}{:02}{:02}{:02}",
                        p[1] / 100,
                        p[1] % 100,
                        p[2],
                        p[3],
                        p[4],
                        p[5],
                        p[6]
                    ),
                };
                out.push(owned(coll, s));
            }
            C::MscPcreLimitsExceeded => out.push(owned(
                coll,
                if self.st.limit_hit { "1" } else { "0" }.to_string(),
            )),
            C::ModsecBuild => out.push(owned(coll, "030009".to_string())),
            C::Rule => {}
            C::Geo => {}
            C::WebserverErrorLog => {}
            C::ResponseContentType
            | C::ResponseContentLength
            | C::MultipartFilename
            | C::MultipartName => {
                if let Some(s) = d.single(coll) {
                    let _ = s;
                    out.push(Val {
                        coll,
                        src: Src::Single(coll),
                    });
                }
            }
            _ => out.push(Val {
                coll,
                src: Src::Single(coll),
            }),
        }
        if t.count {
            let n = out.len() - start;
            out.truncate(start);
            out.push(num(coll, n as u64));
        }
    }
}

/// MATCHED_VAR(_NAME) and a MATCHED_VARS member for a match of `v`.
fn set_matched(st: &mut State, d: &Data, v: &Val, value: &[u8]) {
    let State {
        mv,
        has_mv,
        matched_vars,
        mvs_len,
        tx,
        ..
    } = st;
    mv.0.clear();
    mv.0.extend_from_slice(v.coll.name().as_bytes());
    if let Some(k) = v.key(d, tx) {
        mv.0.push(b':');
        mv.0.extend_from_slice(k);
    }
    mv.1.clear();
    mv.1.extend_from_slice(value);
    *has_mv = true;
    if *mvs_len == matched_vars.len() {
        matched_vars.push(Default::default());
    }
    let e = &mut matched_vars[*mvs_len];
    e.0.clear();
    e.0.extend_from_slice(&mv.0);
    e.1.clear();
    e.1.extend_from_slice(value);
    *mvs_len += 1;
}

/// A number as a value (no allocation).
fn num(coll: Collection, n: u64) -> Val {
    let mut digits = [0u8; 20];
    let start = digits.len() - crate::http::responses::itoa(n, &mut digits).len();
    Val {
        coll,
        src: Src::Num(digits, start as u8),
    }
}

fn owned(coll: Collection, v: String) -> Val {
    Val {
        coll,
        src: Src::Owned(Vec::new(), v.into_bytes()),
    }
}

fn truncate(s: &mut String, limit: usize) {
    if s.len() > limit {
        let mut n = limit;
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
    }
}

/// Counts `values` scans over `bytes` that were ruled out without being
/// run, as `run_op_sig` would have counted them one by one; false
/// (nothing counted) when one of them would have reached the work bound,
/// for the caller to run them one by one.
fn count_skipped_scans(st: &mut State, limits: &super::Limits, values: u64, bytes: u64) -> bool {
    if st.limit_hit {
        // Past the bound, scans neither count nor match.
        return true;
    }
    if st.ops + values > limits.max_operator_evals || st.scanned + bytes > limits.max_scan_bytes {
        return false;
    }
    st.ops += values;
    st.scanned += bytes;
    true
}

/// Runs a link's operator on one (transformed) value, counting the regex
/// work; negation applied.
fn run_op(
    st: &mut State,
    limits: &super::Limits,
    link: &Link,
    input: &[u8],
    arg: Option<&[u8]>,
) -> bool {
    run_op_sig(st, limits, link, input, arg, None)
}

/// [`run_op`] with the value's prefilter summary, if the link has use for
/// one (`Link::sig`).
fn run_op_sig(
    st: &mut State,
    limits: &super::Limits,
    link: &Link,
    input: &[u8],
    arg: Option<&[u8]>,
    sig: Option<&operator::Sig>,
) -> bool {
    let raw = match &link.op {
        COp::Never => false,
        COp::Dynamic(o, _) => o.matches_arg(arg.unwrap_or(b""), input, None),
        COp::Op(o) if !link.op.is_scanner() => o.matches(input, None),
        _ => {
            if !st.limit_hit
                && (st.ops >= limits.max_operator_evals
                    || st.scanned + input.len() as u64 > limits.max_scan_bytes)
            {
                st.limit_hit = true;
            }
            if st.limit_hit {
                false
            } else {
                st.ops += 1;
                st.scanned += input.len() as u64;
                input.len() >= link.min_len && scan(st, link, input, arg, sig)
            }
        }
    };
    raw != link.negated
}

fn scan(
    st: &mut State,
    link: &Link,
    input: &[u8],
    arg: Option<&[u8]>,
    sig: Option<&operator::Sig>,
) -> bool {
    let caps = if link.capture {
        Some(&mut st.captures)
    } else {
        None
    };
    let m = match &link.op {
        COp::Op(operator::Operator::Rx(rx)) if sig.is_some() => match sig {
            Some(sig) => rx.matches_sig(input, sig, caps),
            None => rx.matches(input, caps),
        },
        COp::Op(operator::Operator::Pm(pm)) if sig.is_some() => match sig {
            Some(sig) => pm.matches_sig(input, sig, caps),
            None => pm.matches(input, caps),
        },
        COp::Op(o) => o.matches(input, caps),
        COp::DynamicRx(_) => {
            let pattern = String::from_utf8_lossy(arg.unwrap_or(b""));
            match operator::Rx::new(&pattern) {
                Ok(rx) => rx.matches(input, caps),
                Err(_) => false,
            }
        }
        COp::Sqli => match crate::waf::libinjection::sqli_fingerprint(input) {
            Some(fp) => {
                if link.capture {
                    st.tx.set(b"0", fp.as_bytes().to_vec());
                }
                return true;
            }
            None => false,
        },
        COp::Xss => crate::waf::libinjection::detect_xss(input),
        _ => false,
    };
    if m && link.capture && matches!(link.op, COp::Op(_) | COp::DynamicRx(_)) {
        const KEYS: [&[u8]; 10] = [b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"];
        for (i, k) in KEYS.iter().enumerate() {
            if let Some(v) = st.captures.get(i) {
                st.tx.set_slice(k, v);
            }
        }
    }
    m
}
