//! The HTTP cache end to end through the real binary: hits and misses,
//! coalesced misses, purges on the admin listener, the byte limit and its
//! admission filter, a reload keeping the store, revalidation with the
//! member, the client's conditionals, HEAD and ranges answered from the
//! store, Vary variants, what is never stored, unsafe methods
//! invalidating, compression's encoded variants, and h2c clients.

mod common;
use common::*;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- origin

/// Deterministic, compressible filler.
fn filler(n: usize) -> Vec<u8> {
    let words = [
        "<li class=\"item\">",
        "cache ",
        "object ",
        "</li>\n",
        "key=",
        "variant ",
    ];
    let mut out = Vec::with_capacity(n + 32);
    let mut i = 7usize;
    while out.len() < n {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345) % (1 << 31);
        out.extend_from_slice(words[i % words.len()].as_bytes());
        out.extend_from_slice((i % 997).to_string().as_bytes());
    }
    out.truncate(n);
    out
}

/// The body the origin sends for its `count`th request of `target`, `n`
/// bytes long (at least the first line): the first line names the target,
/// the count and the request's X-Lang, so a test can tell which origin
/// answer a client got.
fn body_for(target: &str, count: usize, lang: &str, n: usize) -> Vec<u8> {
    let mut b = format!("{target} #{count} lang={lang}\n").into_bytes();
    if b.len() < n {
        let fill = filler(n - b.len());
        b.extend_from_slice(&fill);
    }
    b
}

/// An origin answering by query parameters (`defaults` fill in the ones a
/// target leaves out):
/// `n` body bytes, `status`, `cc` Cache-Control, `etag` (quoted for you),
/// `lm=1` a fixed Last-Modified, `vary`, `type` Content-Type, `delay` ms,
/// `chunked=1`, `h=Name:Value` extra fields, `notmod=1` answer 304 to a
/// request with a matching If-None-Match or any If-Modified-Since.
/// Counts the requests (and keeps the heads) per target.
struct CacheOrigin {
    addr: SocketAddr,
    seen: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

const LAST_MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

impl CacheOrigin {
    fn start(defaults: &str) -> CacheOrigin {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let seen: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let defaults = Arc::new(Mutex::new(defaults.to_string()));
        let (s, d) = (seen.clone(), defaults.clone());
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (s, d) = (s.clone(), d.clone());
                std::thread::spawn(move || origin_serve(c, &s, &d));
            }
        });
        CacheOrigin { addr, seen }
    }

    /// Requests seen for `target` (path and query as sent).
    fn count(&self, target: &str) -> usize {
        self.seen
            .lock()
            .expect("lock")
            .get(target)
            .map_or(0, Vec::len)
    }

    /// The request heads seen for `target`.
    fn heads(&self, target: &str) -> Vec<String> {
        self.seen
            .lock()
            .expect("lock")
            .get(target)
            .cloned()
            .unwrap_or_default()
    }
}

fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn unescape(v: &str) -> String {
    v.replace("%20", " ")
        .replace("%2C", ",")
        .replace("%22", "\"")
        .replace("%3D", "=")
}

fn origin_serve(
    s: TcpStream,
    seen: &Mutex<HashMap<String, Vec<String>>>,
    defaults: &Mutex<String>,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut w = s;
    loop {
        let mut head = String::new();
        loop {
            let mut l = String::new();
            if r.read_line(&mut l).unwrap_or(0) == 0 {
                return;
            }
            let end = l == "\r\n";
            head.push_str(&l);
            if end {
                break;
            }
        }
        let line = head.lines().next().unwrap_or("").to_string();
        let target = line.split(' ').nth(1).unwrap_or("/").to_string();
        let head_req = line.starts_with("HEAD ");
        if let Some(n) = field(&head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
            let mut b = vec![0; n];
            if r.read_exact(&mut b).is_err() {
                return;
            }
        }
        let count = {
            let mut g = seen.lock().expect("lock");
            let v = g.entry(target.clone()).or_default();
            v.push(head.clone());
            v.len()
        };
        let query = format!(
            "{}&{}",
            defaults.lock().expect("lock"),
            target.split_once('?').map(|(_, q)| q).unwrap_or("")
        );
        let (mut n, mut status, mut delay, mut chunked, mut notmod) =
            (0usize, 200u16, 0u64, false, false);
        let (mut cc, mut etag, mut lm, mut vary) = (None, None, false, None);
        let mut ctype = "text/html".to_string();
        let mut extra = String::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = unescape(v);
            match k {
                "n" => n = v.parse().unwrap_or(0),
                "status" => status = v.parse().unwrap_or(200),
                "delay" => delay = v.parse().unwrap_or(0),
                "chunked" => chunked = v == "1",
                "notmod" => notmod = v == "1",
                "cc" => cc = Some(v),
                "etag" => etag = Some(format!("\"{v}\"")),
                "lm" => lm = v == "1",
                "vary" => vary = Some(v),
                "type" => ctype = v,
                "h" => {
                    extra.push_str(&v.replacen(':', ": ", 1));
                    extra.push_str("\r\n");
                }
                _ => {}
            }
        }
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        let mut fields = String::new();
        if let Some(cc) = &cc {
            fields.push_str(&format!("cache-control: {cc}\r\n"));
        }
        if let Some(e) = &etag {
            fields.push_str(&format!("etag: {e}\r\n"));
        }
        if lm {
            fields.push_str(&format!("last-modified: {LAST_MODIFIED}\r\n"));
        }
        if let Some(v) = &vary {
            fields.push_str(&format!("vary: {v}\r\n"));
        }
        fields.push_str(&extra);
        let inm = field(&head, "if-none-match");
        let matched = match (inm, &etag) {
            (Some(i), Some(e)) => i.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.strip_prefix("W/").unwrap_or(t) == e
            }),
            (Some(_), None) => false,
            (None, _) => field(&head, "if-modified-since").is_some() && lm,
        };
        if notmod && matched {
            let out = format!("HTTP/1.1 304 Not Modified\r\n{fields}\r\n");
            if w.write_all(out.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let lang = field(&head, "x-lang").unwrap_or("-");
        let body = body_for(&target, count, lang, n);
        let mut out = format!("HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\n{fields}");
        if chunked {
            out.push_str("transfer-encoding: chunked\r\n\r\n");
        } else {
            out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        }
        let mut out = out.into_bytes();
        if !head_req {
            if chunked {
                for c in body.chunks(100_000) {
                    out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                    out.extend_from_slice(c);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
            } else {
                out.extend_from_slice(&body);
            }
        }
        if w.write_all(&out).is_err() {
            return;
        }
    }
}

// ------------------------------------------------------------- the proxy

struct Setup {
    l: SocketAddr,
    sy: Switchyard,
    o: CacheOrigin,
}

/// The config text: `top` before the vserver ([cache]), `vs_keys` inside
/// [[vserver]] (plain keys), `vs_tables` after [vserver.cache] (policies,
/// [vserver.compression]).
fn config(
    l: SocketAddr,
    origin: SocketAddr,
    top: &str,
    cache_keys: &str,
    vs_keys: &str,
    vs_tables: &str,
) -> String {
    format!(
        "[global]\nworkers = 2\n{top}\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\n\
         default_pool = \"p\"\nh2c = true\n{vs_keys}\n\
         [vserver.cache]\nenabled = true\n{cache_keys}\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/nocache/\" }}\ncache = false\n\
         {vs_tables}\n\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{origin}\"\n"
    )
}

fn setup_with(defaults: &str, top: &str, cache_keys: &str, vs_tables: &str) -> Setup {
    let o = CacheOrigin::start(defaults);
    let l = free_addr();
    let cfg = config(l, o.addr, top, cache_keys, "", vs_tables);
    let sy = Switchyard::start(&cfg, &[l]);
    Setup { l, sy, o }
}

fn setup(defaults: &str) -> Setup {
    setup_with(defaults, "", "", "")
}

/// GET on a new connection, with extra header lines.
fn fetch(l: SocketAddr, target: &str, headers: &str) -> Response {
    let r = get_with(l, target, headers);
    assert!(
        r.status < 500,
        "GET {target}: {} {:?}\n{}",
        r.status,
        r.headers,
        r.body_text()
    );
    r
}

fn cache_status(r: &Response) -> &str {
    r.header("cache-status").unwrap_or("")
}

fn is_hit(r: &Response) -> bool {
    cache_status(r).starts_with("switchyard-web; hit")
}

fn vs(sy: &Switchyard) -> serde_json::Value {
    sy.stats()["vservers"][0].clone()
}

fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {v}"))
}

fn store(sy: &Switchyard) -> serde_json::Value {
    sy.stats()["cache"].clone()
}

/// The vserver's counters once `f` holds of them (counters of a worker
/// may show a moment after the response).
fn counters_when(sy: &Switchyard, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    eventually(Duration::from_secs(3), || {
        last = vs(sy);
        f(&last)
    });
    last
}

fn admin_post(sy: &Switchyard, path: &str) -> Response {
    request(
        sy.admin,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
}

fn purged(sy: &Switchyard, query: &str) -> u64 {
    let r = admin_post(sy, &format!("/cache/purge?{query}"));
    assert_eq!(r.status, 200, "purge {query}: {}", r.body_text());
    let v: serde_json::Value =
        serde_json::from_str(&r.body_text()).unwrap_or_else(|e| panic!("{e}: {}", r.body_text()));
    v["purged"]
        .as_u64()
        .unwrap_or_else(|| panic!("purge answer {v}"))
}

// ----------------------------------------------------------------- tests

#[test]
fn a_second_get_is_a_hit_with_the_same_body_and_an_age() {
    let f = setup("");
    let t = "/a?n=3000&cc=max-age=60";
    let r1 = fetch(f.l, t, "");
    assert_eq!(r1.status, 200);
    assert_eq!(r1.body, body_for(t, 1, "-", 3000));
    assert_eq!(
        cache_status(&r1),
        "switchyard-web; fwd=miss; stored",
        "{:?}",
        r1.headers
    );
    assert_eq!(f.o.count(t), 1);

    let r2 = fetch(f.l, t, "");
    assert_eq!(r2.status, 200);
    assert_eq!(cache_status(&r2), "switchyard-web; hit", "{:?}", r2.headers);
    assert_eq!(f.o.count(t), 1, "the hit did not reach the origin");
    assert_eq!(r2.body, r1.body);
    assert_eq!(r2.header("content-length"), Some("3000"));
    assert_eq!(r2.header("cache-control"), Some("max-age=60"));
    let age: u64 = r2
        .header("age")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("Age on a hit: {:?}", r2.headers));
    assert!(age <= 1, "age {age}");

    let v = counters_when(&f.sy, |v| counter(v, "cache_hits") >= 1);
    assert_eq!(counter(&v, "cache_hits"), 1, "{v}");
    assert_eq!(counter(&v, "cache_misses"), 1, "{v}");
    assert_eq!(counter(&v, "cache_stored"), 1, "{v}");
    assert_eq!(counter(&v, "cache_coalesced"), 0, "{v}");
    assert_eq!(counter(&v, "cache_revalidations"), 0, "{v}");
    // The absolute form names the same object.
    let r = request(
        f.l,
        &format!("GET http://TEST{t} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
    );
    assert!(is_hit(&r), "absolute form: {:?}", r.headers);
    assert_eq!(r.body, r1.body);
    assert_eq!(f.o.count(t), 1);
    let c = store(&f.sy);
    assert_eq!(c["objects"], 1, "{c}");
    assert!(c["bytes"].as_u64().unwrap_or(0) >= 3000, "{c}");

    // Age grows while it sits in the store.
    std::thread::sleep(Duration::from_millis(1100));
    let r3 = fetch(f.l, t, "");
    assert!(is_hit(&r3), "{:?}", r3.headers);
    let age: u64 = r3.header("age").and_then(|a| a.parse().ok()).unwrap_or(0);
    assert!((1..=3).contains(&age), "age {age} after 1.1 s");
    assert_eq!(r3.body, r1.body);
    assert_eq!(f.o.count(t), 1);
}

#[test]
fn concurrent_misses_for_one_key_make_one_origin_request() {
    let f = setup("");
    let t = "/slow?n=20000&cc=max-age=60&delay=500";
    let n = 100;
    let started = Instant::now();
    let rs = concurrent_gets(f.l, t, n, Duration::ZERO);
    let took = started.elapsed();
    let want = body_for(t, 1, "-", 20000);
    let mut statuses: HashMap<String, usize> = HashMap::new();
    for r in &rs {
        assert_eq!(r.status, 200, "{:?}", r.headers);
        assert!(r.body == want, "a client got {} bytes", r.body.len());
        *statuses.entry(cache_status(r).to_string()).or_default() += 1;
    }
    assert_eq!(
        f.o.count(t),
        1,
        "origin requests; Cache-Status: {statuses:?}"
    );
    assert_eq!(
        statuses.get("switchyard-web; fwd=miss; stored"),
        Some(&1),
        "{statuses:?}"
    );
    let collapsed = statuses
        .get("switchyard-web; hit; detail=collapsed")
        .copied()
        .unwrap_or(0);
    let hits = statuses.get("switchyard-web; hit").copied().unwrap_or(0);
    assert_eq!(collapsed + hits, n - 1, "{statuses:?}");
    assert!(collapsed >= 90, "{statuses:?}");
    let v = counters_when(&f.sy, |v| {
        counter(v, "cache_coalesced") + counter(v, "cache_hits") >= (n - 1) as u64
    });
    assert_eq!(counter(&v, "cache_coalesced"), collapsed as u64, "{v}");
    assert_eq!(counter(&v, "cache_hits"), hits as u64, "{v}");
    assert_eq!(counter(&v, "cache_stored"), 1, "{v}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// `n` clients sending GET `t` at once (after `after`); their responses.
fn concurrent_gets(l: SocketAddr, t: &str, n: usize, after: Duration) -> Vec<Response> {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (b, t) = (barrier.clone(), t.to_string());
            std::thread::spawn(move || {
                let s = TcpStream::connect_timeout(&l, Duration::from_secs(5)).expect("connect");
                b.wait();
                std::thread::sleep(after);
                let mut c = Client::from_stream(s);
                let _ =
                    c.r.get_ref()
                        .set_read_timeout(Some(Duration::from_secs(10)));
                c.send(
                    format!("GET {t} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
                c.read_response(false)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("client thread").expect("a response"))
        .collect()
}

#[test]
fn waiters_go_to_the_origin_when_the_fill_stores_nothing() {
    let f = setup("");
    // The first answer is not storable: the others, woken, fetch it too.
    let t = "/slow-nostore?n=5000&cc=no-store&delay=400";
    let started = Instant::now();
    let rs = concurrent_gets(f.l, t, 20, Duration::ZERO);
    let took = started.elapsed();
    for r in &rs {
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 5000);
        assert!(!is_hit(r), "{:?}", r.headers);
    }
    assert_eq!(f.o.count(t), 20);
    // Woken together, not one after another.
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // The client of the fill goes away before the answer: the waiters
    // still get the whole object (from the store or the origin).
    let t = "/slow-abandoned?n=50000&cc=max-age=60&delay=600";
    let mut leader = Client::connect(f.l);
    leader.send(format!("GET {t} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let waiters = std::thread::spawn({
        let l = f.l;
        move || concurrent_gets(l, t, 10, Duration::from_millis(100))
    });
    std::thread::sleep(Duration::from_millis(250));
    drop(leader);
    let rs = waiters.join().expect("waiters");
    for r in &rs {
        assert_eq!(r.status, 200, "{:?}", r.headers);
        assert_eq!(r.body.len(), 50000);
        assert!(r.body.starts_with(format!("{t} #").as_bytes()));
    }
    assert!(f.o.count(t) >= 1);
    assert!(is_hit(&fetch(f.l, t, "")), "stored in the end");
}

#[test]
fn purge_by_url_and_by_prefix_on_the_admin_listener() {
    let f = setup("n=200&cc=max-age=60");
    let urls = [
        "/p/one",
        "/p/two",
        "/dir/a",
        "/dir/b",
        "/dir/sub/c",
        "/dirx/d",
        "/other/e",
    ];
    for u in urls {
        let r = fetch(f.l, u, "");
        assert!(cache_status(&r).ends_with("stored"), "{u}: {:?}", r.headers);
        assert!(is_hit(&fetch(f.l, u, "")), "{u} is cached");
    }
    assert_eq!(store(&f.sy)["objects"], 7);

    // Exact URL: the host is matched whatever its case.
    assert_eq!(purged(&f.sy, "url=http://TEST/p/one"), 1);
    assert_eq!(purged(&f.sy, "url=http://test/p/one"), 0, "already gone");
    assert_eq!(purged(&f.sy, "url=http://test/p/nothing"), 0);
    assert_eq!(
        purged(&f.sy, "url=http://test/p/tw"),
        0,
        "a URL purge is exact"
    );
    let r = fetch(f.l, "/p/one", "");
    assert!(cache_status(&r).contains("fwd=miss"), "{:?}", r.headers);
    assert_eq!(f.o.count("/p/one"), 2);
    assert!(is_hit(&fetch(f.l, "/p/one", "")));
    assert!(is_hit(&fetch(f.l, "/p/two", "")), "the other URL stays");

    assert_eq!(purged(&f.sy, "prefix=http://test/dir/"), 3);
    for u in ["/dir/a", "/dir/b", "/dir/sub/c"] {
        let r = fetch(f.l, u, "");
        assert!(
            cache_status(&r).contains("fwd=miss"),
            "{u}: {:?}",
            r.headers
        );
        assert_eq!(f.o.count(u), 2, "{u}");
    }
    for u in ["/dirx/d", "/other/e", "/p/two"] {
        let r = fetch(f.l, u, "");
        assert!(is_hit(&r), "{u} is not under the prefix: {:?}", r.headers);
        assert_eq!(f.o.count(u), 1, "{u}");
    }
    assert_eq!(purged(&f.sy, "prefix=http://other.host/"), 0);
    let c = store(&f.sy);
    assert_eq!(c["purged"], 4, "{c}");
    assert_eq!(c["objects"], 7, "{c}");

    // Only POST purges; a bad query is refused.
    let r = request(
        f.sy.admin,
        "GET /cache/purge?url=http://test/p/two HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 405);
    assert!(is_hit(&fetch(f.l, "/p/two", "")), "a GET purged nothing");
    assert_eq!(admin_post(&f.sy, "/cache/purge?what=1").status, 400);
    assert_eq!(admin_post(&f.sy, "/cache/purge").status, 400);
}

#[test]
fn key_extras_make_separate_entries_and_a_url_purge_takes_them_all() {
    let f = setup_with(
        "n=100&cc=max-age=60",
        "",
        "key = [\"header:x-tenant\", \"cookie:lang\"]",
        "",
    );
    let a = fetch(f.l, "/k", "X-Tenant: a\r\n");
    let b = fetch(f.l, "/k", "X-Tenant: b\r\n");
    let c = fetch(f.l, "/k", "X-Tenant: b\r\nCookie: x=1; lang=fr\r\n");
    assert_eq!(f.o.count("/k"), 3, "three keys");
    assert_ne!(a.body, b.body);
    let a2 = fetch(f.l, "/k", "X-Tenant: a\r\n");
    assert!(is_hit(&a2), "{:?}", a2.headers);
    assert_eq!(a2.body, a.body);
    let c2 = fetch(f.l, "/k", "Cookie: lang=fr; y=2\r\nX-Tenant: b\r\n");
    assert!(is_hit(&c2), "{:?}", c2.headers);
    assert_eq!(c2.body, c.body);
    assert_eq!(f.o.count("/k"), 3);
    assert_eq!(purged(&f.sy, "url=http://test/k"), 3);
    assert!(!is_hit(&fetch(f.l, "/k", "X-Tenant: a\r\n")));
    assert_eq!(f.o.count("/k"), 4);
}

#[test]
fn the_byte_limit_holds_and_a_hot_object_survives_a_scan() {
    let max: u64 = 2 * 1024 * 1024;
    let f = setup_with(
        "cc=max-age=600",
        &format!("[cache]\nmax_bytes = {max}\nmax_object_bytes = 1048576\n"),
        "",
        "",
    );
    let hot = "/hot?n=65536";
    let first = fetch(f.l, hot, "");
    for _ in 0..9 {
        let r = fetch(f.l, hot, "");
        assert!(is_hit(&r), "{:?}", r.headers);
    }
    let mut hot_hits = 0;
    let mut samples = 0;
    for i in 0..300 {
        let t = format!("/cold/{i}?n=65536");
        let r = fetch(f.l, &t, "");
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 65536, "{t}");
        assert_eq!(&r.body[..10], &body_for(&t, 1, "-", 64)[..10]);
        if i % 20 == 19 {
            let c = store(&f.sy);
            samples += 1;
            let bytes = c["bytes"].as_u64().expect("bytes");
            assert!(bytes <= max, "{bytes} bytes held after {} cold: {c}", i + 1);
            assert_eq!(c["max_bytes"], max);
        }
        // The hot object is asked for less often than plain LRU would keep
        // it for (40 x 64 KB is more than the 2 MiB), so it stays only
        // through the admission filter's second chances.
        if i % 40 == 39 {
            let r = fetch(f.l, hot, "");
            assert_eq!(r.body, first.body);
            hot_hits += usize::from(is_hit(&r));
        }
    }
    assert_eq!(samples, 15);
    let c = store(&f.sy);
    assert!(c["evictions"].as_u64().unwrap_or(0) > 0, "{c}");
    assert!(c["bytes"].as_u64().unwrap_or(u64::MAX) <= max, "{c}");
    let objects = c["objects"].as_u64().unwrap_or(0);
    assert!((20..=32).contains(&objects), "{c}");
    let r = fetch(f.l, hot, "");
    assert!(
        is_hit(&r),
        "the hot object survived the scan: {:?}",
        r.headers
    );
    assert_eq!(hot_hits, 7, "every visit of the hot object was a hit");
    assert_eq!(f.o.count(hot), 1);

    // Over max_object_bytes: served whole, never stored.
    for (t, n) in [
        ("/big?n=1200000", 1_200_000usize),
        ("/bigchunked?n=1200000&chunked=1", 1_200_000),
    ] {
        let r1 = fetch(f.l, t, "");
        assert_eq!(r1.body, body_for(t, 1, "-", n), "{t}");
        let r2 = fetch(f.l, t, "");
        assert_eq!(
            r2.body,
            body_for(t, 2, "-", n),
            "{t}: from the origin again"
        );
        assert_eq!(f.o.count(t), 2, "{t}");
        assert!(!is_hit(&r2), "{t}: {:?}", r2.headers);
        if !t.contains("chunked") {
            assert_eq!(
                cache_status(&r1),
                "switchyard-web; fwd=miss; detail=too-big"
            );
            assert_eq!(
                cache_status(&r2),
                "switchyard-web; fwd=miss; detail=too-big"
            );
        }
    }
    let c = store(&f.sy);
    assert!(c["bytes"].as_u64().unwrap_or(u64::MAX) <= max, "{c}");
    assert!(is_hit(&fetch(f.l, hot, "")), "still hot after the big ones");
}

#[test]
fn a_reload_keeps_the_store() {
    let f = setup("");
    let t = "/r?n=500&cc=max-age=60";
    let r1 = fetch(f.l, t, "");
    assert!(is_hit(&fetch(f.l, t, "")));
    let gen = f.sy.stats()["generation"].as_u64().unwrap_or(0);
    let cfg = config(
        f.l,
        f.o.addr,
        "",
        "",
        "response_headers = { set = { \"x-config\" = \"b\" } }",
        "[[vserver.policy]]\nmatch = { path_prefix = \"/other/\" }\ncache = false\n",
    );
    let (ok, out) = f.sy.reload_with(&cfg);
    assert!(ok, "reload: {out}");
    assert!(
        eventually(Duration::from_secs(5), || {
            f.sy.stats()["generation"].as_u64().unwrap_or(0) > gen
        }),
        "the reload took"
    );
    let r2 = fetch(f.l, t, "");
    assert!(is_hit(&r2), "after the reload: {:?}", r2.headers);
    assert_eq!(r2.body, r1.body);
    assert_eq!(f.o.count(t), 1);
    assert_eq!(store(&f.sy)["objects"], 1);
    // The new config is the one answering.
    let r3 = fetch(f.l, "/fresh?n=10&cc=max-age=60", "");
    assert_eq!(r3.header("x-config"), Some("b"), "{:?}", r3.headers);
    // Counters carry over too.
    let v = vs(&f.sy);
    assert!(counter(&v, "cache_hits") >= 2, "{v}");
}

#[test]
fn a_stale_object_is_revalidated_and_freshened_by_a_304() {
    let f = setup("");
    let t = "/rv?n=5000&cc=max-age=1&etag=v1&notmod=1";
    let tl = "/rvlm?n=5000&cc=max-age=1&lm=1&notmod=1";
    let r1 = fetch(f.l, t, "");
    let l1 = fetch(f.l, tl, "");
    assert_eq!(r1.header("etag"), Some("\"v1\""));
    assert!(is_hit(&fetch(f.l, t, "")));
    std::thread::sleep(Duration::from_millis(2100));

    let r2 = fetch(f.l, t, "");
    assert_eq!(f.o.count(t), 2, "a stale object goes to the origin");
    let heads = f.o.heads(t);
    assert_eq!(
        field(&heads[1], "if-none-match"),
        Some("\"v1\""),
        "a conditional request: {}",
        heads[1]
    );
    assert_eq!(r2.status, 200, "{:?}", r2.headers);
    assert_eq!(r2.body, r1.body, "the stored body");
    assert_eq!(r2.header("content-length"), Some("5000"));
    assert!(
        cache_status(&r2).contains("fwd=stale; fwd-status=304"),
        "{:?}",
        r2.headers
    );
    assert_eq!(r2.header("etag"), Some("\"v1\""));
    let age: u64 = r2.header("age").and_then(|a| a.parse().ok()).unwrap_or(99);
    assert!(age <= 1, "freshened: age {age}");
    // Fresh again for its max-age.
    let r3 = fetch(f.l, t, "");
    assert!(is_hit(&r3), "{:?}", r3.headers);
    assert_eq!(r3.body, r1.body);
    assert_eq!(f.o.count(t), 2);

    // Last-Modified alone: If-Modified-Since.
    let l2 = fetch(f.l, tl, "");
    let heads = f.o.heads(tl);
    assert_eq!(heads.len(), 2);
    assert_eq!(
        field(&heads[1], "if-modified-since"),
        Some(LAST_MODIFIED),
        "{}",
        heads[1]
    );
    assert_eq!(l2.status, 200);
    assert_eq!(l2.body, l1.body);
    assert!(cache_status(&l2).contains("fwd=stale; fwd-status=304"));

    let v = counters_when(&f.sy, |v| counter(v, "cache_revalidations") >= 2);
    assert_eq!(counter(&v, "cache_revalidations"), 2, "{v}");
    assert_eq!(counter(&v, "cache_hits"), 2, "{v}");

    // A client's no-cache makes a fresh object revalidate.
    let r4 = fetch(f.l, t, "Cache-Control: no-cache\r\n");
    assert_eq!(f.o.count(t), 3);
    assert_eq!(field(&f.o.heads(t)[2], "if-none-match"), Some("\"v1\""));
    assert_eq!(r4.status, 200);
    assert_eq!(r4.body, r1.body);
    // only-if-cached on a miss: 504, the origin not asked.
    let r = get_with(f.l, "/never?n=10", "Cache-Control: only-if-cached\r\n");
    assert_eq!(r.status, 504);
    assert_eq!(f.o.count("/never?n=10"), 0);

    // Concurrent requests for a stale object: one conditional request.
    let tc = "/rvc?n=1000&cc=max-age=1&etag=c&notmod=1&delay=300";
    let c1 = fetch(f.l, tc, "");
    std::thread::sleep(Duration::from_millis(1100));
    let rs = concurrent_gets(f.l, tc, 20, Duration::ZERO);
    for r in &rs {
        assert_eq!(r.status, 200);
        assert_eq!(r.body, c1.body);
    }
    assert_eq!(f.o.count(tc), 2, "one revalidation for 20 clients");

    // A changed object (200 to the conditional request) replaces it.
    std::thread::sleep(Duration::from_millis(1100));
    let t2 = "/rv2?n=100&cc=max-age=1&etag=v1";
    let a = fetch(f.l, t2, "");
    std::thread::sleep(Duration::from_millis(1100));
    let b = fetch(f.l, t2, "");
    assert_eq!(b.body, body_for(t2, 2, "-", 100), "the new body");
    assert_ne!(a.body, b.body);
    let c = fetch(f.l, t2, "");
    assert!(is_hit(&c));
    assert_eq!(c.body, b.body);
}

#[test]
fn client_conditionals_head_and_ranges_are_answered_from_the_store() {
    let f = setup("");
    let t = "/c?n=100&etag=v7&lm=1&cc=max-age=60";
    let full = fetch(f.l, t, "").body;
    assert_eq!(full.len(), 100);

    let r = fetch(f.l, t, "If-None-Match: \"v7\"\r\n");
    assert_eq!(r.status, 304, "{:?}", r.headers);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some("\"v7\""));
    assert!(is_hit(&r), "{:?}", r.headers);
    let r = fetch(f.l, t, "If-None-Match: \"other\"\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, full);
    let r = fetch(f.l, t, &format!("If-Modified-Since: {LAST_MODIFIED}\r\n"));
    assert_eq!(r.status, 304, "{:?}", r.headers);

    // HEAD, then a GET on the same connection: no body bytes in between.
    let mut c = Client::connect(f.l);
    c.send(format!("HEAD {t} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
    let h = c.read_response(true).expect("HEAD answer");
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-length"), Some("100"));
    assert!(is_hit(&h), "{:?}", h.headers);
    let g = c.get(t);
    assert_eq!(g.body, full, "in step after HEAD");

    let r = fetch(f.l, t, "Range: bytes=10-19\r\n");
    assert_eq!(r.status, 206, "{:?}", r.headers);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100"));
    assert_eq!(r.header("content-length"), Some("10"));
    assert_eq!(r.body, &full[10..20]);
    let r = fetch(f.l, t, "Range: bytes=-5\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &full[95..]);
    let r = fetch(f.l, t, "Range: bytes=500-\r\n");
    assert_eq!(r.status, 416);

    assert_eq!(f.o.count(t), 1, "none of these reached the origin");
}

#[test]
fn vary_keeps_a_variant_per_request_value() {
    let f = setup("n=300&cc=max-age=60&vary=X-Lang");
    let fr = fetch(f.l, "/v", "X-Lang: fr\r\n");
    let de = fetch(f.l, "/v", "X-Lang: de\r\n");
    assert_eq!(f.o.count("/v"), 2);
    assert!(fr.body.starts_with(b"/v #1 lang=fr\n"));
    assert!(de.body.starts_with(b"/v #2 lang=de\n"));
    for _ in 0..2 {
        let r = fetch(f.l, "/v", "X-Lang: fr\r\n");
        assert!(is_hit(&r), "{:?}", r.headers);
        assert_eq!(r.body, fr.body);
        let r = fetch(f.l, "/v", "X-Lang: de\r\n");
        assert!(is_hit(&r), "{:?}", r.headers);
        assert_eq!(r.body, de.body);
    }
    assert_eq!(f.o.count("/v"), 2);
    let none = fetch(f.l, "/v", "");
    assert!(none.body.starts_with(b"/v #3 lang=-\n"));
    assert!(is_hit(&fetch(f.l, "/v", "")));
    assert_eq!(f.o.count("/v"), 3);
    assert_eq!(store(&f.sy)["objects"], 3);
    // One purge takes every variant.
    assert_eq!(purged(&f.sy, "url=http://test/v"), 1);
    assert_eq!(store(&f.sy)["objects"], 0);
}

#[test]
fn what_is_never_stored_and_unsafe_methods_invalidate() {
    let f = setup("n=100");
    let cases = [
        ("/ns?cc=no-store%2C%20max-age=60", "", "no-store"),
        ("/pv?cc=private%2C%20max-age=60", "", "private"),
        (
            "/au?cc=max-age=60",
            "Authorization: Basic dTpw\r\n",
            "authorization",
        ),
        ("/nf", "", "no-freshness"),
    ];
    for (t, h, why) in cases {
        let r1 = fetch(f.l, t, h);
        let r2 = fetch(f.l, t, h);
        assert_eq!(f.o.count(t), 2, "{t}: both reached the origin");
        assert_eq!(r2.body, body_for(t, 2, "-", 100));
        let st = cache_status(&r1);
        assert!(
            st.contains("fwd=miss") && st.contains(why),
            "{t}: {st} ({why})"
        );
    }
    // The policy turns the cache off: no Cache-Status at all.
    let t = "/nocache/x?cc=max-age=60";
    let r = fetch(f.l, t, "");
    fetch(f.l, t, "");
    assert_eq!(f.o.count(t), 2);
    assert_eq!(r.header("cache-status"), None);

    // POST (and DELETE) to a cached URL invalidates it.
    for method in ["POST", "DELETE", "PUT"] {
        let t = format!("/inv{method}?cc=max-age=60");
        fetch(f.l, &t, "");
        assert!(is_hit(&fetch(f.l, &t, "")));
        let r = request(
            f.l,
            &format!("{method} {t} HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"),
        );
        assert_eq!(r.status, 200);
        assert_eq!(f.o.count(&t), 2, "{method} went to the origin");
        let r = fetch(f.l, &t, "");
        assert!(
            cache_status(&r).contains("fwd=miss"),
            "{method}: {:?}",
            r.headers
        );
        assert_eq!(f.o.count(&t), 3);
        assert!(is_hit(&fetch(f.l, &t, "")));
    }
    assert_eq!(store(&f.sy)["objects"], 3);
}

#[test]
fn the_encoded_variant_is_stored_and_served_to_clients_that_accept_it() {
    let f = setup_with("", "", "", "[vserver.compression]\n");
    let t = "/html?n=65536&cc=max-age=60";
    let gzip = "Accept-Encoding: gzip\r\n";
    let gunzip = |b: &[u8]| {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(b)
            .read_to_end(&mut out)
            .expect("gzip decodes");
        out
    };
    let want1 = body_for(t, 1, "-", 65536);
    let g1 = fetch(f.l, t, gzip);
    assert_eq!(
        g1.header("content-encoding"),
        Some("gzip"),
        "{:?}",
        g1.headers
    );
    assert!(cache_status(&g1).ends_with("stored"), "{:?}", g1.headers);
    assert!(g1.body.len() < 65536 / 2);
    assert_eq!(gunzip(&g1.body), want1);

    let g2 = fetch(f.l, t, "Accept-Encoding: br, gzip\r\n");
    assert!(is_hit(&g2), "{:?}", g2.headers);
    assert_eq!(g2.header("content-encoding"), Some("gzip"));
    assert_eq!(g2.header("vary"), Some("Accept-Encoding"));
    assert_eq!(g2.body, g1.body, "the stored encoding, byte for byte");
    assert_eq!(gunzip(&g2.body), want1);
    assert_eq!(f.o.count(t), 1);

    // No Accept-Encoding: the gzip variant does not suit; an identity
    // variant is fetched and stored beside it.
    let i1 = fetch(f.l, t, "");
    assert_eq!(i1.header("content-encoding"), None, "{:?}", i1.headers);
    assert_eq!(i1.body, body_for(t, 2, "-", 65536));
    assert_eq!(f.o.count(t), 2);
    let i2 = fetch(f.l, t, "");
    assert!(is_hit(&i2), "{:?}", i2.headers);
    assert_eq!(i2.header("content-encoding"), None);
    assert_eq!(i2.body, i1.body);
    let refuse = fetch(f.l, t, "Accept-Encoding: gzip;q=0\r\n");
    assert_eq!(refuse.header("content-encoding"), None);
    assert_eq!(refuse.body, i1.body);
    assert_eq!(f.o.count(t), 2);
    assert_eq!(store(&f.sy)["objects"], 2);
}

/// Gzip clients keep getting the gzip variant once an identity variant is
/// stored too, whichever came first (before cbfe77c the identity variant,
/// stored without Vary, suited every client and, being the newest, was
/// served uncompressed to gzip clients for the object's lifetime).
#[test]
fn gzip_clients_keep_the_gzip_variant_after_an_identity_fill() {
    let f = setup_with("", "", "", "[vserver.compression]\n");
    let gzip = "Accept-Encoding: gzip\r\n";
    let gunzip = |b: &[u8]| {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(b)
            .read_to_end(&mut out)
            .expect("gzip decodes");
        out
    };
    // gzip stored first, then identity.
    let t = "/html2?n=65536&cc=max-age=60";
    let g1 = fetch(f.l, t, gzip);
    assert_eq!(g1.header("content-encoding"), Some("gzip"));
    let i1 = fetch(f.l, t, "");
    assert_eq!(i1.header("content-encoding"), None);
    assert_eq!(f.o.count(t), 2);
    let g2 = fetch(f.l, t, gzip);
    assert_eq!(
        g2.header("content-encoding"),
        Some("gzip"),
        "a gzip client got {} bytes uncompressed from the cache: {:?}",
        g2.body.len(),
        g2.headers
    );
    assert_eq!(g2.body, g1.body);
    // Identity stored first: a gzip client still gets gzip (fetched, or
    // encoded from the stored copy).
    let t = "/html3?n=65536&cc=max-age=60";
    let i1 = fetch(f.l, t, "");
    assert_eq!(i1.header("content-encoding"), None);
    let g1 = fetch(f.l, t, gzip);
    assert_eq!(
        g1.header("content-encoding"),
        Some("gzip"),
        "{:?}",
        g1.headers
    );
    assert_eq!(gunzip(&g1.body), body_for(t, f.o.count(t), "-", 65536));
}

async fn h2_get(addr: SocketAddr, path: &str) -> (u16, http::HeaderMap, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut send = send.ready().await.expect("ready");
    let req = http::Request::get(format!("http://test{path}"))
        .body(())
        .expect("request");
    let (resp, _) = send.send_request(req, true).expect("send");
    let resp = resp.await.expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    (status, headers, data)
}

#[test]
fn h2c_clients_share_the_store() {
    let f = setup("");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cs = |h: &http::HeaderMap| {
        h.get("cache-status")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    // Stored by an HTTP/1.1 client, hit over h2.
    let t = "/h2?n=30000&cc=max-age=60";
    let r1 = fetch(f.l, t, "");
    let (st, h, body) = rt.block_on(h2_get(f.l, t));
    assert_eq!(st, 200);
    assert_eq!(cs(&h), "switchyard-web; hit", "{h:?}");
    assert!(h.get("age").is_some());
    assert!(body == r1.body, "{} bytes over h2", body.len());
    // Stored over h2, hit over h2 and HTTP/1.1.
    let t = "/h2b?n=70000&cc=max-age=60";
    let (st, h, b1) = rt.block_on(h2_get(f.l, t));
    assert_eq!(st, 200);
    assert!(cs(&h).ends_with("stored"), "{h:?}");
    assert!(b1 == body_for(t, 1, "-", 70000));
    let (_, h, b2) = rt.block_on(h2_get(f.l, t));
    assert_eq!(cs(&h), "switchyard-web; hit", "{h:?}");
    assert!(b2 == b1);
    let r = fetch(f.l, t, "");
    assert!(is_hit(&r));
    assert_eq!(r.body, b1);
    assert_eq!(f.o.count(t), 1);
    assert_eq!(f.o.count("/h2?n=30000&cc=max-age=60"), 1);
}

/// Cookie persistence sets the member's cookie on responses to clients
/// that lack it; the cache must not keep it, neither from the first answer
/// nor from a 304 that freshens the stored object, or every later hit would
/// pin every client to that member.
#[test]
fn a_revalidation_does_not_store_the_persistence_cookie() {
    let o = CacheOrigin::start("");
    let l = free_addr();
    let cfg = config(l, o.addr, "", "", "", "").replace(
        "[[pool]]\nname = \"p\"\n",
        "[[pool]]\nname = \"p\"\npersistence = { type = \"cookie\", cookie = \"SYSRV\" }\n",
    );
    assert!(cfg.contains("SYSRV"), "{cfg}");
    let sy = Switchyard::start(&cfg, &[l]);
    let t = "/pc?n=100&cc=max-age=1&etag=p1&notmod=1";
    let r1 = fetch(l, t, "");
    assert!(
        r1.header("set-cookie")
            .is_some_and(|c| c.starts_with("SYSRV=")),
        "the client's own cookie: {:?}",
        r1.headers
    );
    let hit = fetch(l, t, "");
    assert!(is_hit(&hit), "{:?}", hit.headers);
    assert_eq!(hit.header("set-cookie"), None, "{:?}", hit.headers);
    std::thread::sleep(Duration::from_millis(2100));
    let r2 = fetch(l, t, "");
    assert!(
        cache_status(&r2).contains("fwd=stale; fwd-status=304"),
        "{:?}",
        r2.headers
    );
    assert_eq!(o.count(t), 2);
    let hit = fetch(l, t, "");
    assert!(is_hit(&hit), "{:?}", hit.headers);
    assert_eq!(
        hit.header("set-cookie"),
        None,
        "a hit after the 304 replays a client's persistence cookie: {:?}",
        hit.headers
    );
    drop(sy);
}

/// A 304 from the member freshens the stored gzip variant; the 304's
/// fields replace the stored ones, but its ETag is the member's strong
/// validator of the identity representation. The compression stage
/// weakened it on the way in (W/"g1"); after the 304 the gzip bytes go
/// out under the strong "g1" that also names the identity bytes, so a
/// client holding one can splice ranges of the other (If-Range compares
/// strongly), and the two variants no longer differ by validator.
#[test]

fn a_revalidated_gzip_variant_keeps_its_weak_etag() {
    let f = setup_with("", "", "", "[vserver.compression]\n");
    let t = "/gz-rv?n=20000&cc=max-age=1&etag=g1&notmod=1";
    let gzip = "Accept-Encoding: gzip\r\n";
    let g1 = fetch(f.l, t, gzip);
    assert_eq!(g1.header("content-encoding"), Some("gzip"));
    assert_eq!(g1.header("etag"), Some("W/\"g1\""), "{:?}", g1.headers);
    std::thread::sleep(Duration::from_millis(1100));
    let g2 = fetch(f.l, t, gzip);
    assert!(
        cache_status(&g2).contains("fwd=stale; fwd-status=304"),
        "{:?}",
        g2.headers
    );
    assert_eq!(f.o.count(t), 2);
    assert_eq!(g2.body, g1.body);
    assert_eq!(g2.header("content-encoding"), Some("gzip"));
    assert_eq!(
        g2.header("etag"),
        Some("W/\"g1\""),
        "gzip bytes under the identity's strong ETag after a 304: {:?}",
        g2.headers
    );
    let g3 = fetch(f.l, t, gzip);
    assert!(is_hit(&g3));
    assert_eq!(g3.header("etag"), Some("W/\"g1\""), "{:?}", g3.headers);
    // If-Range with the identity's strong ETag must not cut a range out
    // of the gzip bytes.
    let r = fetch(
        f.l,
        t,
        "Accept-Encoding: gzip\r\nRange: bytes=0-9\r\nIf-Range: \"g1\"\r\n",
    );
    assert_eq!(r.status, 200, "{:?}", r.headers);
}

/// stale-while-revalidate: the stale copy answers at once and the member
/// is asked in the background; the vserver counts the client's answer
/// once (the background exchange counts on the member only).
#[test]
fn a_stale_while_revalidate_answer_is_counted_once() {
    let f = setup("");
    let t = "/swr?n=100&cc=max-age=1,stale-while-revalidate=30&etag=v1&notmod=1";
    assert_eq!(fetch(f.l, t, "").status, 200);
    std::thread::sleep(Duration::from_millis(2100));
    let r = fetch(f.l, t, "");
    assert_eq!(r.status, 200);
    assert!(
        cache_status(&r).contains("stale-while-revalidate"),
        "{:?}",
        r.headers
    );
    assert!(eventually(Duration::from_secs(5), || f.o.count(t) == 2));
    let v = counters_when(&f.sy, |v| counter(v, "cache_revalidations") >= 1);
    assert_eq!(counter(&v, "requests"), 2, "{v}");
    assert_eq!(v["responses"]["2xx"], 2, "{v}");
    // The member's 304 to the background revalidation is not a client's.
    assert_eq!(v["responses"]["3xx"], 0, "{v}");
}
