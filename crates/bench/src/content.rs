//! The objects the origin serves and the checksum both ends use to prove a
//! body arrived intact.
//!
//! Bodies are HTML-like text that gzip shrinks by 60-80 %, as in the reports;
//! every size is a prefix of one deterministic 1 MB document, except the
//! 512 KB object, which is the 64 KB one repeated (about 90 % compressible,
//! as report 000 describes).
//!
//! `/html/<n>` objects (the compression scenario) are a realistic page
//! instead: markup with repeated structure, English words, links and dates,
//! which gzip level 1 shrinks to about 0.29 of its size at 64 KB and level 6
//! to about 0.25, the figures the compression reports quote for HTML.

use std::sync::OnceLock;

pub const BASE_LEN: usize = 1 << 20;
pub const MAX_OBJECT: u64 = 64 << 20;

/// Sizes from METHODOLOGY.md "Content".
pub const REPORT_SIZES: &[u64] = &[
    1, 128, 1024, 2048, 8192, 9216, 30720, 65536, 524288, 1048576,
];

/// The IETF NGFW mix (equal weights), in bytes: 0.2, 6, 8, 9, 10, 25, 26, 35, 59, 347 KB.
pub const IETF_MIX: &[u64] = &[
    205,
    6 * 1024,
    8 * 1024,
    9 * 1024,
    10 * 1024,
    25 * 1024,
    26 * 1024,
    35 * 1024,
    59 * 1024,
    347 * 1024,
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic across runs and machines.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn generate(len: usize) -> Vec<u8> {
    let mut rng = Rng(0x5157_1c4a_7d00_0001);
    let letters = b"etaoinshrdlcumwfgypbvkjxqz";
    let vocab: Vec<Vec<u8>> = (0..800)
        .map(|_| {
            let n = 2 + rng.below(9) as usize;
            (0..n)
                .map(|_| {
                    // Skewed letter frequencies, like English text.
                    let r = rng.below(26 * 26) as usize;
                    letters[25 - (r as f64).sqrt() as usize % 26]
                })
                .collect()
        })
        .collect();
    let tags = ["p", "li", "td", "span", "div", "h3", "a", "em"];
    let mut out = Vec::with_capacity(len + 4096);
    out.extend_from_slice(
        b"<!DOCTYPE html>\n<html><head><title>Switchyard bench object</title></head>\n<body>\n",
    );
    while out.len() < len {
        let tag = tags[rng.below(tags.len() as u64) as usize];
        out.extend_from_slice(format!("<{tag} class=\"c{}\">", rng.below(40)).as_bytes());
        let words = 4 + rng.below(14);
        for w in 0..words {
            if w > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(&vocab[rng.below(vocab.len() as u64) as usize]);
            if rng.below(11) == 0 {
                out.extend_from_slice(format!(" {}", rng.below(100_000)).as_bytes());
            }
        }
        out.extend_from_slice(format!("</{tag}>\n").as_bytes());
    }
    out.truncate(len);
    out
}

pub fn base() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| generate(BASE_LEN))
}

fn repeated_64k() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| base()[..65536].repeat(8))
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "out",
    "up",
    "into",
    "than",
    "them",
    "only",
    "time",
    "about",
    "new",
    "some",
    "could",
    "these",
    "two",
    "may",
    "first",
    "then",
    "do",
    "any",
    "like",
    "my",
    "now",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "network",
    "server",
    "traffic",
    "release",
    "report",
    "market",
    "policy",
    "service",
    "system",
    "company",
    "data",
    "security",
    "city",
    "government",
    "energy",
    "research",
    "health",
    "school",
    "water",
    "business",
    "support",
    "performance",
    "project",
    "community",
    "development",
    "information",
    "program",
    "question",
    "national",
    "history",
    "family",
    "council",
    "budget",
    "season",
    "football",
    "weather",
    "science",
    "music",
    "travel",
    "climate",
    "election",
    "economy",
    "technology",
];

const TOPICS: &[&str] = &[
    "news",
    "world",
    "business",
    "technology",
    "science",
    "health",
    "sport",
    "culture",
    "travel",
    "opinion",
    "climate",
    "politics",
];

const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A word, the common ones far more often (roughly Zipf).
fn word(rng: &mut Rng) -> &'static str {
    let u = rng.below(1 << 16) as f64 / 65536.0;
    WORDS[((u * u) * WORDS.len() as f64) as usize]
}

fn words(rng: &mut Rng, out: &mut String, n: u64, sep: &str) {
    for i in 0..n {
        if i > 0 {
            out.push_str(sep);
        }
        out.push_str(word(rng));
    }
}

fn generate_html(len: usize) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut rng = Rng(0x6874_6d6c_0000_0001);
    let mut s = String::with_capacity(len + 8192);
    s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>Switchyard bench: the news front page</title>\n");
    for f in ["site", "layout", "cards", "print"] {
        let _ = writeln!(
            s,
            "<link rel=\"stylesheet\" href=\"/static/css/{f}.css?v=20261123\" media=\"all\">"
        );
    }
    for f in ["runtime", "vendor", "main"] {
        let _ = writeln!(
            s,
            "<script src=\"/static/js/{f}.js?v=20261123\" defer></script>"
        );
    }
    s.push_str("</head>\n<body class=\"page page-front\">\n<header class=\"site-header\">\n<nav class=\"nav\" aria-label=\"Sections\">\n<ul class=\"nav-list\">\n");
    for t in TOPICS {
        let _ = writeln!(
            s,
            "<li class=\"nav-item\"><a class=\"nav-link\" href=\"/{t}/\">{t}</a></li>"
        );
    }
    s.push_str("</ul>\n</nav>\n</header>\n<main class=\"content\">\n");
    let mut id = 48_210u64;
    while s.len() < len {
        id += 1 + rng.below(40);
        let topic = TOPICS[rng.below(TOPICS.len() as u64) as usize];
        let _ = write!(
            s,
            "<article class=\"card card-{topic}\" id=\"article-{id}\">\n<h2 class=\"card-title\"><a href=\"/{topic}/{id}/"
        );
        let mut title = String::new();
        let n = 3 + rng.below(5);
        words(&mut rng, &mut title, n, " ");
        s.push_str(&title.replace(' ', "-"));
        s.push_str("\">");
        s.push_str(&title);
        let (m, d, h) = (rng.below(12), 1 + rng.below(28), rng.below(24));
        let _ = write!(
            s,
            "</a></h2>\n<p class=\"card-meta\">By <a class=\"author\" href=\"/authors/{a}\">{a}</a> in <a href=\"/{topic}/\">{topic}</a> <time datetime=\"2026-{:02}-{d:02}T{h:02}:00:00Z\">{} {d}, 2026</time></p>\n<div class=\"card-body\">\n",
            m + 1,
            MONTHS[m as usize],
            a = word(&mut rng),
        );
        for _ in 0..1 + rng.below(3) {
            s.push_str("<p>");
            for k in 0..2 + rng.below(3) {
                if k > 0 {
                    s.push(' ');
                }
                let mut sentence = String::new();
                let n = 6 + rng.below(14);
                words(&mut rng, &mut sentence, n, " ");
                let mut c = sentence.chars();
                if let Some(f) = c.next() {
                    s.push(f.to_ascii_uppercase());
                    s.push_str(c.as_str());
                }
                s.push('.');
            }
            s.push_str("</p>\n");
        }
        s.push_str("</div>\n<ul class=\"tags\">");
        for _ in 0..1 + rng.below(4) {
            let w = word(&mut rng);
            let _ = write!(s, "<li class=\"tag\"><a href=\"/tags/{w}\">{w}</a></li>");
        }
        s.push_str("</ul>\n</article>\n");
    }
    let mut v = s.into_bytes();
    v.truncate(len);
    v
}

fn html_base() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| generate_html(BASE_LEN))
}

/// The bytes of the realistic HTML object of `n` bytes (`/html/<n>`).
pub fn html(n: u64) -> std::borrow::Cow<'static, [u8]> {
    if n as usize <= BASE_LEN {
        std::borrow::Cow::Borrowed(&html_base()[..n as usize])
    } else {
        let b = html_base();
        let mut v = Vec::with_capacity(n as usize);
        while (v.len() as u64) < n.min(MAX_OBJECT) {
            let take = (n.min(MAX_OBJECT) as usize - v.len()).min(b.len());
            v.extend_from_slice(&b[..take]);
        }
        std::borrow::Cow::Owned(v)
    }
}

/// The object a path names: `/html/<n>` the realistic page, anything else
/// [`body`].
pub fn object(path: &str, n: u64) -> std::borrow::Cow<'static, [u8]> {
    if path.starts_with("/html/") {
        html(n)
    } else {
        body(n)
    }
}

/// Large objects beyond the base document repeat it.
fn big(n: u64) -> Vec<u8> {
    let b = base();
    let mut v = Vec::with_capacity(n as usize);
    while (v.len() as u64) < n {
        let take = (n as usize - v.len()).min(b.len());
        v.extend_from_slice(&b[..take]);
    }
    v
}

/// The bytes of an object of `n` bytes. Borrowed for all sizes up to 1 MB.
pub fn body(n: u64) -> std::borrow::Cow<'static, [u8]> {
    if n == 524288 {
        std::borrow::Cow::Borrowed(repeated_64k())
    } else if n as usize <= BASE_LEN {
        std::borrow::Cow::Borrowed(&base()[..n as usize])
    } else {
        std::borrow::Cow::Owned(big(n.min(MAX_OBJECT)))
    }
}

/// Size of the object a path names, for the paths the origin serves:
/// `/size/<n>`, `/images/...<n>`, `/obj/<n>[k|m][.ext]`, `/corrupt/<n>`.
/// The load generator uses the same function to know what size to expect.
pub fn object_size(path: &str) -> Option<u64> {
    let path = path.split('?').next().unwrap_or(path);
    let last = path.rsplit('/').next()?;
    let mut stem = last;
    for ext in [
        ".html", ".htm", ".bin", ".txt", ".jpg", ".png", ".gif", ".css", ".js",
    ] {
        stem = stem.strip_suffix(ext).unwrap_or(stem);
    }
    let n = crate::args::parse_size(stem)?;
    (n <= MAX_OBJECT).then_some(n)
}

/// Streaming 64-bit checksum: fast (one multiply per 8 bytes) so that the
/// load generator can verify every byte of a 1 MB body without becoming the
/// bottleneck. Not cryptographic; it only has to catch corruption and
/// truncation.
#[derive(Clone, Copy)]
pub struct Sum {
    h: u64,
    len: u64,
    pend: [u8; 8],
    npend: usize,
}

impl Default for Sum {
    fn default() -> Self {
        Self::new()
    }
}

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Sum {
    pub fn new() -> Sum {
        Sum {
            h: 0x1234_5678_9abc_def0,
            len: 0,
            pend: [0; 8],
            npend: 0,
        }
    }
    #[inline]
    fn mix(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(K).rotate_left(29);
    }
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.npend > 0 {
            let take = (8 - self.npend).min(data.len());
            self.pend[self.npend..self.npend + take].copy_from_slice(&data[..take]);
            self.npend += take;
            data = &data[take..];
            if self.npend < 8 {
                return;
            }
            let w = u64::from_le_bytes(self.pend);
            self.mix(w);
            self.npend = 0;
        }
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            self.mix(u64::from_le_bytes(a));
        }
        let rest = chunks.remainder();
        self.pend[..rest.len()].copy_from_slice(rest);
        self.npend = rest.len();
    }
    pub fn finish(mut self) -> u64 {
        if self.npend > 0 {
            let mut a = [0u8; 8];
            a[..self.npend].copy_from_slice(&self.pend[..self.npend]);
            self.mix(u64::from_le_bytes(a));
        }
        let len = self.len;
        self.mix(len);
        self.h
    }
    pub fn of(data: &[u8]) -> u64 {
        let mut s = Sum::new();
        s.update(data);
        s.finish()
    }
}

/// CRC-32 (IEEE, the gzip trailer's), to check a compressed response's
/// trailer against the original object without decompressing it.
pub fn crc32(data: &[u8]) -> u32 {
    static T: OnceLock<[u32; 256]> = OnceLock::new();
    let t = T.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = !0u32;
    for &b in data {
        c = t[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// Deterministic request body for POSTs of `n` bytes.
pub fn post_body(n: usize) -> Vec<u8> {
    let b = base();
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let take = (n - v.len()).min(b.len());
        v.extend_from_slice(&b[b.len() - take..]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_from_paths() {
        assert_eq!(object_size("/size/128"), Some(128));
        assert_eq!(object_size("/images/size/8192"), Some(8192));
        assert_eq!(object_size("/obj/64k.html"), Some(65536));
        assert_eq!(object_size("/obj/0.2k.html"), Some(205));
        assert_eq!(object_size("/obj/1m"), Some(1 << 20));
        assert_eq!(object_size("/size/128?x=1"), Some(128));
        assert_eq!(object_size("/"), None);
    }
    #[test]
    fn crc32_is_gzips() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
    #[test]
    fn checksum_streams() {
        let b = &base()[..100_003];
        let whole = Sum::of(b);
        for split in [1usize, 3, 7, 8, 9, 4096, 99_999] {
            let mut s = Sum::new();
            for c in b.chunks(split) {
                s.update(c);
            }
            assert_eq!(s.finish(), whole, "split {split}");
        }
        let mut bad = b.to_vec();
        bad[500] ^= 1;
        assert_ne!(Sum::of(&bad), whole);
        assert_ne!(Sum::of(&b[..100_002]), whole);
        assert_eq!(body(524288).len(), 524288);
        assert_eq!(&body(524288)[65536..65536 * 2], &body(65536)[..]);
        assert_eq!(body(3 << 20).len(), 3 << 20);
    }
}
