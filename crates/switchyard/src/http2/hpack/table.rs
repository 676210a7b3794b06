//! The two HPACK tables (RFC 7541 2.3): the static table of Appendix A,
//! with the name lookups the encoder needs, and the dynamic table both the
//! decoder and the encoder keep (a FIFO whose size counts name + value + 32
//! per entry, evicting its oldest entries to make room).

use std::collections::VecDeque;

/// Appendix A; index `i` (1-based) is `STATIC[i - 1]`.
#[rustfmt::skip]
pub(crate) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"), // 1-4
    (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"),           // 5-7
    (b":status", b"200"), (b":status", b"204"), (b":status", b"206"),                    // 8-10
    (b":status", b"304"), (b":status", b"400"), (b":status", b"404"),                    // 11-13
    (b":status", b"500"), (b"accept-charset", b""),                                      // 14-15
    (b"accept-encoding", b"gzip, deflate"), (b"accept-language", b""),                   // 16-17
    (b"accept-ranges", b""), (b"accept", b""), (b"access-control-allow-origin", b""),    // 18-20
    (b"age", b""), (b"allow", b""), (b"authorization", b""), (b"cache-control", b""),    // 21-24
    (b"content-disposition", b""), (b"content-encoding", b""),                           // 25-26
    (b"content-language", b""), (b"content-length", b""), (b"content-location", b""),    // 27-29
    (b"content-range", b""),                                                             // 30
    (b"content-type", b""), (b"cookie", b""), (b"date", b""), (b"etag", b""),            // 31-34
    (b"expect", b""), (b"expires", b""), (b"from", b""), (b"host", b""),                 // 35-38
    (b"if-match", b""), (b"if-modified-since", b""), (b"if-none-match", b""),            // 39-41
    (b"if-range", b""), (b"if-unmodified-since", b""), (b"last-modified", b""),          // 42-44
    (b"link", b""), (b"location", b""), (b"max-forwards", b""),                          // 45-47
    (b"proxy-authenticate", b""), (b"proxy-authorization", b""), (b"range", b""),        // 48-50
    (b"referer", b""), (b"refresh", b""), (b"retry-after", b""), (b"server", b""),       // 51-54
    (b"set-cookie", b""), (b"strict-transport-security", b""),                           // 55-56
    (b"transfer-encoding", b""), (b"user-agent", b""), (b"vary", b""), (b"via", b""),    // 57-60
    (b"www-authenticate", b""),                                                          // 61
];

/// The first static index whose name is `name`. Bucketed by length so a
/// lookup compares at most six short strings.
pub(crate) fn static_name(name: &[u8]) -> Option<usize> {
    #[rustfmt::skip]
    let bucket: &[(&[u8], usize)] = match name.len() {
        3 => &[(b"age", 21), (b"via", 60)],
        4 => &[(b"date", 33), (b"etag", 34), (b"vary", 59),
               (b"link", 45), (b"host", 38), (b"from", 37)],
        5 => &[(b":path", 4), (b"allow", 22), (b"range", 50)],
        6 => &[(b"server", 54), (b"cookie", 32), (b"accept", 19), (b"expect", 35)],
        7 => &[(b":status", 8), (b":method", 2), (b":scheme", 6),
               (b"expires", 36), (b"referer", 51), (b"refresh", 52)],
        8 => &[(b"location", 46), (b"if-match", 39), (b"if-range", 42)],
        10 => &[(b"set-cookie", 55), (b":authority", 1), (b"user-agent", 58)],
        11 => &[(b"retry-after", 53)],
        12 => &[(b"content-type", 31), (b"max-forwards", 47)],
        13 => &[(b"cache-control", 24), (b"last-modified", 44), (b"accept-ranges", 18),
                (b"content-range", 30), (b"authorization", 23), (b"if-none-match", 41)],
        14 => &[(b"content-length", 28), (b"accept-charset", 15)],
        15 => &[(b"accept-encoding", 16), (b"accept-language", 17)],
        16 => &[(b"content-encoding", 26), (b"content-language", 27), (b"content-location", 29),
                (b"www-authenticate", 61)],
        17 => &[(b"transfer-encoding", 57), (b"if-modified-since", 40)],
        18 => &[(b"proxy-authenticate", 48)],
        19 => &[(b"content-disposition", 25), (b"if-unmodified-since", 43),
                (b"proxy-authorization", 49)],
        25 => &[(b"strict-transport-security", 56)],
        27 => &[(b"access-control-allow-origin", 20)],
        _ => return None,
    };
    bucket.iter().find(|e| e.0 == name).map(|e| e.1)
}

/// The static index of exactly (name, value), given `first`, the name's
/// first index: entries of one name are adjacent.
///
/// `#[inline]`, as `DynamicTable::find`: both are the encoder's per-field
/// work, and with the release profile's 4 codegen units they were left
/// out of line once unrelated modules moved the partition (2026-12-06:
/// +850 user-space instructions per 1 KB HTTP/2 request under callgrind,
/// +500 with the hints).
#[inline]
pub(crate) fn static_exact(first: usize, value: &[u8]) -> Option<usize> {
    let name = STATIC[first - 1].0;
    (first..=STATIC.len())
        .take_while(|&i| STATIC[i - 1].0 == name)
        .find(|&i| STATIC[i - 1].1 == value)
}

/// RFC 7541 4.1: an entry's size.
pub(crate) fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 32
}

struct Entry {
    /// Name then value.
    bytes: Vec<u8>,
    name_len: usize,
}

/// The dynamic table; entry 0 is the newest (HPACK index 62).
pub(crate) struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
    /// The largest buffer of an evicted entry, reused by the next insertion:
    /// on a long connection most insertions then allocate nothing.
    spare: Vec<u8>,
}

impl DynamicTable {
    pub(crate) fn new(max: usize) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max,
            spare: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Entry `i`, 0 being the newest.
    pub(crate) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|e| e.bytes.split_at(e.name_len))
    }

    /// Position of an entry equal to (name, value), and of the first one
    /// with that name. (`#[inline]`: see `static_exact`.)
    #[inline]
    pub(crate) fn find(&self, name: &[u8], value: &[u8]) -> (Option<usize>, Option<usize>) {
        let total = name.len() + value.len();
        let mut by_name = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.name_len == name.len() && &e.bytes[..e.name_len] == name {
                if e.bytes.len() == total && &e.bytes[e.name_len..] == value {
                    return (Some(i), by_name.or(Some(i)));
                }
                by_name = by_name.or(Some(i));
            }
        }
        (None, by_name)
    }

    /// A size update (RFC 7541 4.3): evicts down to `max`.
    pub(crate) fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            let Some(e) = self.entries.pop_back() else {
                break;
            };
            self.size -= e.bytes.len() + 32;
            if e.bytes.capacity() > self.spare.capacity() {
                self.spare = e.bytes;
            }
        }
    }

    /// RFC 7541 4.4: an entry larger than the table empties it and is not
    /// added.
    pub(crate) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = entry_size(name, value);
        if size > self.max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max - size);
        let mut bytes = std::mem::take(&mut self.spare);
        bytes.clear();
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        self.entries.push_front(Entry {
            bytes,
            name_len: name.len(),
        });
        self.size += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_name_finds_every_name() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let first = STATIC.iter().position(|e| e.0 == *name).map(|p| p + 1);
            assert_eq!(
                static_name(name),
                first,
                "{}",
                String::from_utf8_lossy(name)
            );
            assert_eq!(static_exact(first.unwrap(), STATIC[i].1), Some(i + 1));
        }
        for name in [
            &b"agf"[..],
            b"x-date",
            b"",
            b"content-lengtH",
            b":statux",
            b"set-cookie2",
        ] {
            assert_eq!(static_name(name), None);
        }
        assert_eq!(static_exact(8, b"302"), None);
        assert_eq!(static_exact(16, b"gzip, deflate"), Some(16));
        assert_eq!(static_exact(54, b"x"), None);
    }

    #[test]
    fn dynamic_evicts_oldest_and_resizes() {
        let mut t = DynamicTable::new(100);
        t.insert(b"a", b"1"); // 34
        t.insert(b"b", b"22"); // 35
        assert_eq!((t.len(), t.size()), (2, 69));
        t.insert(b"c", b"333"); // 36: evicts "a"
        assert_eq!((t.len(), t.size()), (2, 71));
        assert_eq!(t.get(0), Some((&b"c"[..], &b"333"[..])));
        assert_eq!(t.get(1), Some((&b"b"[..], &b"22"[..])));
        assert_eq!(t.find(b"b", b"22"), (Some(1), Some(1)));
        assert_eq!(t.find(b"b", b"2"), (None, Some(1)));
        t.set_max(40);
        assert_eq!((t.len(), t.size()), (1, 36));
        // Too big: empties the table, not added.
        t.insert(b"d", &[b'x'; 8]);
        assert_eq!((t.len(), t.size()), (0, 0));
        t.set_max(0);
        t.insert(b"e", b"");
        assert_eq!(t.len(), 0);
    }
}
