//! What rules read: the request and response collections ([`Data`]),
//! TX-like maps ([`VarMap`]), and a collected value ([`Val`]) that points
//! into them. Their buffers are kept for the thread's next transaction.

use switchyard_fasthash::FxHashMap;

use crate::seclang::Collection;

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
    pub(super) entries: Vec<Option<(Vec<u8>, Vec<u8>)>>,
    /// Lower-case name to entry. Fx (`switchyard_fasthash`): short keys, and
    /// request-chosen ones are bounded by the argument limits; only the
    /// map's speed depends on the hasher (its order is never read).
    pub(super) index: FxHashMap<Vec<u8>, usize>,
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
    pub(super) fn recycle(&mut self) {
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
    pub(super) fn get_any_case(&self, key: &[u8]) -> Option<&[u8]> {
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
    pub(super) fn index_of(&self, lower_key: &[u8]) -> Option<usize> {
        let i = *self.index.get(lower_key)?;
        self.entries.get(i)?.as_ref().map(|_| i)
    }

    /// The variables in order (deleted ones left out).
    pub(super) fn pairs(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> {
        Pairs {
            entries: self.entries.iter(),
            left: self.index.len(),
        }
    }

    /// Adds a variable known to be absent (`lower`: its name in lower
    /// case), without looking it up.
    pub(super) fn push_new(&mut self, key: &[u8], value: &[u8], lower: &[u8]) {
        let k = self.buf(key);
        let v = self.buf(value);
        let l = self.buf(lower);
        self.entries.push(Some((k, v)));
        self.index.insert(l, self.entries.len() - 1);
    }

    /// Entry `i` (empty if deleted).
    pub(super) fn at(&self, i: u32) -> (&[u8], &[u8]) {
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
    pub(super) fn recycle(&mut self) {
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

    pub(super) fn single(&self, c: Collection) -> Option<&Single> {
        self.singles.get(c as usize).and_then(|s| s.as_ref())
    }

    pub fn set_xml_text(&mut self, text: Vec<u8>) {
        let slot = self.slot2();
        self.xml_text = Some(Single { value: text, slot });
    }

    pub(super) fn args_combined_size(&self) -> usize {
        self.args
            .iter()
            .map(|a| a.kv.key.len() + a.kv.value.len())
            .sum()
    }
}

/// Where a collected value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListId {
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
pub(super) enum Src {
    /// `names`: the key is the value (`ARGS_NAMES`).
    List(ListId, u32, bool),
    Single(Collection),
    XmlText,
    /// A TX variable by its entry (copied before the operator runs).
    Tx(u32),
    Owned(Vec<u8>, Vec<u8>),
    /// A number computed for the rule (`&ARGS`, ARGS_COMBINED_SIZE...): its
    /// decimal digits in place (as many as given), without an allocation.
    Num([u8; 20], u8),
}

#[derive(Debug)]
pub(super) struct Val {
    pub(super) coll: Collection,
    pub(super) src: Src,
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
pub(super) fn kv_of(d: &Data, l: ListId, i: u32) -> &Kv {
    match l {
        ListId::Args => &d.args[i as usize].kv,
        _ => &list(d, l)[i as usize],
    }
}

impl Val {
    pub(super) fn value<'a>(&'a self, d: &'a Data, tx: &'a VarMap) -> &'a [u8] {
        match &self.src {
            Src::Tx(i) => tx.at(*i).1,
            _ => self.value_d(d),
        }
    }

    /// The value of anything but a TX variable.
    #[inline]
    pub(super) fn value_d<'a>(&'a self, d: &'a Data) -> &'a [u8] {
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
            Src::Num(digits, len) => &digits[..usize::from(*len)],
        }
    }

    pub(super) fn key<'a>(&'a self, d: &'a Data, tx: &'a VarMap) -> Option<&'a [u8]> {
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
    pub(super) fn slot(&self, d: &Data) -> Option<u32> {
        match &self.src {
            Src::List(l, i, names) => Some(kv_of(d, *l, *i).slot + u32::from(*names)),
            Src::Single(c) => d.single(*c).map(|s| s.slot),
            Src::XmlText => d.xml_text.as_ref().map(|s| s.slot),
            Src::Owned(..) | Src::Tx(_) | Src::Num(..) => None,
        }
    }

    /// `ARGS:id`, `REQUEST_URI`.
    pub(super) fn name(&self, d: &Data, tx: &VarMap) -> Vec<u8> {
        let mut n = self.coll.name().as_bytes().to_vec();
        if let Some(k) = self.key(d, tx) {
            n.push(b':');
            n.extend_from_slice(k);
        }
        n
    }
}

/// A buffer larger than this is not kept for the next transaction.
pub(super) const KEEP_BYTES: usize = 256 << 10;

/// `b` emptied, or a new buffer if it is larger than [`KEEP_BYTES`].
pub(super) fn small(mut b: Vec<u8>) -> Vec<u8> {
    b.clear();
    if b.capacity() > KEEP_BYTES {
        Vec::new()
    } else {
        b
    }
}
