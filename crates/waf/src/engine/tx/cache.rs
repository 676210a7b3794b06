//! Transformation results per (value, pipeline node), computed once per
//! transaction, and the prefilter summaries of values and of shared lists.

use super::data::KEEP_BYTES;
use crate::engine::compile::TNode;
use crate::operator;
use crate::transform;

/// Transformation results per (value slot, pipeline node): a row per
/// slot (allocated when a value is first transformed), a column per node.
#[derive(Default)]
pub(super) struct Cache {
    nodes: usize,
    slots: Vec<Option<Box<[u32]>>>,
    /// The same for volatile slots (cleared after each rule).
    pub(super) vslots: Vec<Option<Box<[u32]>>>,
    /// Every transformation result back to back (`spans` index it): one
    /// growing buffer rather than an allocation per result.
    arena: Vec<u8>,
    spans: Vec<(usize, usize)>,
    /// Where a transformation writes before its result joins the arena.
    out: Vec<u8>,
    pub(super) next_volatile: u32,
    /// Prefilter summaries of values, built when a prefiltered `@rx` first
    /// looks at one and shared by every later one: per span
    /// (`span_sig`) and per untransformed value of a non-volatile slot
    /// (`slot_sig`), indices into `sigs` or `UNSET`.
    pub(super) sigs: Vec<operator::Sig>,
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
/// What a shared target list holds through one transformation pipeline
/// (`Link::summary_group`), for the current `lists_gen`.
#[derive(Clone, Copy, Default)]
pub(super) struct ListSummary {
    /// The `lists_gen` it was built in (0: never).
    pub(super) gen: u32,
    /// The union of the values' [`operator::Sig`]s in `Cache::sigs`, or
    /// `UNSET` when a value has no cache identity (nothing is ruled out).
    pub(super) sig: u32,
    /// How many values, and their transformed bytes: the work a scan of
    /// each would have counted.
    pub(super) values: u64,
    pub(super) bytes: u64,
}

pub(super) const SAME: u32 = u32::MAX;
pub(super) const UNSET: u32 = u32::MAX - 1;
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
    pub(super) fn reset(&mut self, nodes: usize) {
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
    pub(super) fn get(&mut self, nodes: &[TNode], slot: u32, node: u32, orig: &[u8]) -> u32 {
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

    pub(super) fn slice<'a>(&'a self, r: u32, orig: &'a [u8]) -> &'a [u8] {
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
    pub(super) fn sig(&mut self, r: u32, slot: u32, orig: &[u8]) -> Option<u32> {
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
    pub(super) fn volatile(&mut self) -> u32 {
        // Reuse: volatile slots are cleared after each use.
        let s = VOLATILE + self.next_volatile;
        self.next_volatile += 1;
        s
    }
}
