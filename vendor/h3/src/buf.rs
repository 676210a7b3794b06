use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// Switchyard's patch (seventh): the first buffer is held apart from the
/// deque of the others, so that a stream whose bytes come in one chunk (a
/// request's head, nearly always) allocates no deque: one allocation per
/// request fewer. Invariant: `rest` is empty while `first` is `None`.
#[derive(Debug)]
pub(crate) struct BufList<T> {
    first: Option<T>,
    rest: VecDeque<T>,
}

impl<T> BufList<T> {
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.rest.iter())
    }

    /// The buffer at `index`; panics past the end, as indexing a deque does.
    fn at(&self, index: usize) -> &T {
        match index {
            0 => self.first.as_ref().expect("BufList index out of range"),
            _ => &self.rest[index - 1],
        }
    }

    fn pop_front(&mut self) -> Option<T> {
        let front = self.first.take();
        self.first = self.rest.pop_front();
        front
    }

    fn push_back(&mut self, buf: T) {
        match self.first {
            None => self.first = Some(buf),
            Some(_) => self.rest.push_back(buf),
        }
    }
}

impl<T: Buf> BufList<T> {
    pub(crate) fn new() -> BufList<T> {
        BufList {
            first: None,
            rest: VecDeque::new(),
        }
    }

    #[inline]
    #[allow(dead_code)]
    pub(crate) fn push(&mut self, buf: T) {
        debug_assert!(buf.has_remaining());
        self.push_back(buf);
    }

    pub fn cursor(&self) -> Cursor<T> {
        Cursor {
            buf: self,
            pos_total: 0,
            index: 0,
            pos_front: 0,
        }
    }
}

impl BufList<Bytes> {
    /// Switchyard's patch (seventh): the one chunk held, when there is
    /// exactly one (`FrameDecoder::decode_bytes`).
    pub(crate) fn only_chunk(&self) -> Option<&Bytes> {
        if self.rest.is_empty() {
            self.first.as_ref()
        } else {
            None
        }
    }

    pub fn take_first_chunk(&mut self) -> Option<Bytes> {
        self.pop_front()
    }

    pub fn take_chunk(&mut self, max_len: usize) -> Option<Bytes> {
        let chunk = self
            .first
            .as_mut()
            .map(|chunk| chunk.split_to(usize::min(max_len, chunk.remaining())));

        if let Some(front) = &self.first {
            if front.remaining() == 0 {
                let _ = self.pop_front();
            }
        }
        chunk
    }

    pub fn push_bytes<T>(&mut self, buf: &mut T)
    where
        T: Buf,
    {
        debug_assert!(buf.has_remaining());
        self.push_back(buf.copy_to_bytes(buf.remaining()))
    }
}

#[cfg(test)]
impl<T: Buf> From<T> for BufList<T> {
    fn from(b: T) -> Self {
        let mut buf = Self::new();
        buf.push(b);
        buf
    }
}

impl<T: Buf> Buf for BufList<T> {
    #[inline]
    fn remaining(&self) -> usize {
        self.iter().map(|buf| buf.remaining()).sum()
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.first.as_ref().map(Buf::chunk).unwrap_or_default()
    }

    #[inline]
    fn advance(&mut self, mut cnt: usize) {
        while cnt > 0 {
            {
                let front = self.first.as_mut().expect("advance past the end of a BufList");
                let rem = front.remaining();
                if rem > cnt {
                    front.advance(cnt);
                    return;
                } else {
                    front.advance(rem);
                    cnt -= rem;
                }
            }
            self.pop_front();
        }
    }

    #[inline]
    fn chunks_vectored<'t>(&'t self, dst: &mut [IoSlice<'t>]) -> usize {
        if dst.is_empty() {
            return 0;
        }
        let mut vecs = 0;
        for buf in self.iter() {
            vecs += buf.chunks_vectored(&mut dst[vecs..]);
            if vecs == dst.len() {
                break;
            }
        }
        vecs
    }
}

pub struct Cursor<'a, B> {
    buf: &'a BufList<B>,
    pos_total: usize, // position amongst all bytes
    pos_front: usize, // position in the current front buffer
    index: usize,     // current front buffer index
}

impl<'a, B: Buf> Cursor<'a, B> {
    pub fn position(&self) -> usize {
        self.pos_total
    }
}

impl<'a, B: Buf> Buf for Cursor<'a, B> {
    #[inline]
    fn remaining(&self) -> usize {
        self.buf.remaining() - self.pos_total
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        &self.buf.at(self.index).chunk()[self.pos_front..]
    }

    #[inline]
    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.buf.remaining() - self.pos_total);
        while cnt > 0 {
            {
                let front = self.buf.at(self.index);
                let rem = front.remaining() - self.pos_front;
                if rem > cnt {
                    self.pos_total += cnt;
                    self.pos_front += cnt;
                    return;
                } else {
                    self.pos_total += rem;
                    self.pos_front = 0;
                    cnt -= rem;
                }
            }
            self.index += 1;
        }
    }

    #[inline]
    fn chunks_vectored<'t>(&'t self, dst: &mut [IoSlice<'t>]) -> usize {
        self.buf.chunks_vectored(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn cursor_advance() {
        let buf = BufList::from(Bytes::from_static(&[1u8, 2, 3, 4]));
        let mut cur = buf.cursor();
        cur.advance(2);
        assert_eq!(cur.remaining(), 2);
        cur.advance(2);
        assert_eq!(cur.remaining(), 0);
    }
}
