//! Response compression end to end through the real binary: negotiation,
//! the cases that are never compressed, the head edits, byte-for-byte
//! round trips of every coding for bodies from 0 B to 10 MB (chunked and
//! not, HTTP/1.1 and h2 clients), a paused member's stream flowing
//! through the encoder, policies, counters, and config errors.

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Deterministic, compressible text: HTML-ish words and numbers.
fn text(n: usize) -> Vec<u8> {
    let words = [
        "<li class=\"item\">",
        "switchyard ",
        "member ",
        "</li>\n",
        "pool=",
        "weight ",
    ];
    let mut out = Vec::with_capacity(n + 32);
    let mut i = 11usize;
    while out.len() < n {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345) % (1 << 31);
        out.extend_from_slice(words[i % words.len()].as_bytes());
        out.extend_from_slice((i % 997).to_string().as_bytes());
    }
    out.truncate(n);
    out
}

/// An origin answering `GET /t?n=N&chunked=1&status=S&type=T&h=Name:Value`
/// with N bytes of `text`, and `/sse` with one event, a 3 s pause, and a
/// second event.
struct TextOrigin {
    addr: SocketAddr,
}

impl TextOrigin {
    fn start() -> TextOrigin {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || serve(s));
            }
        });
        TextOrigin { addr }
    }
}

fn serve(s: TcpStream) {
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut w = s;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split(' ').nth(1).unwrap_or("/").to_string();
        let head_req = line.starts_with("HEAD ");
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
        }
        if target == "/sse" {
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
            let ev = b"data: first event\n\n";
            let _ = write!(w, "{:x}\r\n", ev.len());
            let _ = w.write_all(ev);
            let _ = w.write_all(b"\r\n");
            let _ = w.flush();
            std::thread::sleep(Duration::from_secs(3));
            let ev = b"data: second event\n\n";
            let _ = write!(w, "{:x}\r\n", ev.len());
            let _ = w.write_all(ev);
            let _ = w.write_all(b"\r\n0\r\n\r\n");
            continue;
        }
        let query = target.split_once('?').map(|(_, q)| q).unwrap_or("");
        let (mut n, mut chunked, mut status, mut ctype) =
            (0usize, false, 200u16, "text/html".to_string());
        let mut extra = String::new();
        for kv in query.split('&') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = v
                .replace("%20", " ")
                .replace("%2C", ",")
                .replace("%22", "\"");
            match k {
                "n" => n = v.parse().unwrap_or(0),
                "chunked" => chunked = v == "1",
                "status" => status = v.parse().unwrap_or(200),
                "type" => ctype = v,
                "h" => {
                    extra.push_str(&v.replacen(':', ": ", 1));
                    extra.push_str("\r\n");
                }
                _ => {}
            }
        }
        let body = text(n);
        let no_body = head_req || status == 204 || status == 304;
        let mut head = format!("HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\n{extra}");
        if status == 204 || status == 304 {
        } else if chunked {
            head.push_str("transfer-encoding: chunked\r\n");
        } else {
            head.push_str(&format!("content-length: {n}\r\n"));
        }
        head.push_str("\r\n");
        let _ = w.write_all(head.as_bytes());
        if no_body {
            continue;
        }
        if chunked {
            for c in body.chunks(100_000) {
                let _ = write!(w, "{:x}\r\n", c.len());
                let _ = w.write_all(c);
                let _ = w.write_all(b"\r\n");
            }
            let _ = w.write_all(b"0\r\n\r\n");
        } else {
            let _ = w.write_all(&body);
        }
        let _ = w.flush();
    }
}

fn decode(coding: Option<&str>, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out = data.to_vec(),
        Some("gzip") => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .expect("gzip decodes");
        }
        Some("br") => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .expect("br decodes");
        }
        Some("zstd") => out = zstd::stream::decode_all(data).expect("zstd decodes"),
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

struct Setup {
    l: SocketAddr,
    sy: Switchyard,
    _o: TextOrigin,
}

fn setup(compression: &str) -> Setup {
    let o = TextOrigin::start();
    let l = free_addr();
    let cfg = format!(
        "[global]\nworkers = 1\n\n[[vserver]]\nname = \"web\"\nlisten = [\"{l}\"]\ndefault_pool = \"p\"\nh2c = true\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/off/\" }}\ncompression = false\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/brotli/\" }}\ncompression = {{ algorithms = [\"br\"], brotli_level = 5, min_size = 0 }}\n\
         [[vserver.policy]]\nmatch = {{ path_prefix = \"/settings-off/\" }}\ncompression = {{ enabled = false, algorithms = [\"gzip\"] }}\n\
         [vserver.compression]\n{compression}\n\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{}\"\n",
        o.addr
    );
    let sy = Switchyard::start(&cfg, &[l]);
    Setup { l, sy, _o: o }
}

fn get(l: SocketAddr, path: &str, ae: Option<&str>) -> Response {
    let mut c = Client::connect(l);
    let h = ae
        .map(|v| format!("Accept-Encoding: {v}\r\n"))
        .unwrap_or_default();
    c.get_with(path, &h)
}

#[test]
fn negotiation_follows_q_values_and_the_server_order() {
    let f = setup("algorithms = [\"gzip\", \"br\", \"zstd\"]");
    let cases: &[(Option<&str>, Option<&str>)] = &[
        (None, None),
        (Some(""), None),
        (Some("gzip"), Some("gzip")),
        (Some("br"), Some("br")),
        (Some("zstd"), Some("zstd")),
        // Equal q: the server's order.
        (Some("zstd, br, gzip"), Some("gzip")),
        (Some("br, zstd"), Some("br")),
        (Some("gzip;q=0.5, br;q=0.9"), Some("br")),
        (Some("gzip;q=0, zstd"), Some("zstd")),
        (Some("*"), Some("gzip")),
        (Some("*;q=0.1, zstd;q=0.2"), Some("zstd")),
        (Some("deflate"), None),
        // Nothing acceptable: identity, never an error.
        (Some("identity;q=0"), None),
        (Some("*;q=0"), None),
        (Some("identity;q=0, *;q=0"), None),
    ];
    // A policy with settings of its own: brotli only, whatever the vserver
    // offers first; level 5 compresses better than the vserver's level 1.
    let r = get(f.l, "/brotli/t?n=5000", Some("gzip, br, zstd"));
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(decode(Some("br"), &r.body), text(5000));
    let vs_br = get(f.l, "/t?n=5000", Some("br"));
    assert_eq!(vs_br.header("content-encoding"), Some("br"));
    assert!(
        r.body.len() < vs_br.body.len(),
        "{} vs {}",
        r.body.len(),
        vs_br.body.len()
    );
    let r = get(f.l, "/brotli/t?n=5000", Some("gzip"));
    assert_eq!(
        r.header("content-encoding"),
        None,
        "the policy offers br only"
    );
    // A policy's settings table with enabled = false turns it off.
    let r = get(f.l, "/settings-off/t?n=5000", Some("gzip, br, zstd"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.body, text(5000));
    let want = text(5000);
    for (ae, expect) in cases {
        let r = get(f.l, "/t?n=5000", *ae);
        assert_eq!(r.status, 200, "{ae:?}");
        assert_eq!(
            r.header("content-encoding"),
            *expect,
            "Accept-Encoding {ae:?}"
        );
        assert_eq!(decode(*expect, &r.body), want, "{ae:?}");
        if expect.is_some() {
            assert_eq!(r.header("content-length"), None);
            assert_eq!(r.header("transfer-encoding"), Some("chunked"));
            assert_eq!(r.header("vary"), Some("Accept-Encoding"));
            assert!(r.body.len() < 2500, "compressed: {}", r.body.len());
        } else {
            assert_eq!(r.header("content-length"), Some("5000"));
        }
    }
}

#[test]
fn never_compressed_cases_pass_untouched() {
    let f = setup("min_size = 1000");
    let gz = Some("gzip, br, zstd");
    let untouched = [
        ("/t?n=5000&h=content-encoding:br", "already encoded"),
        (
            "/t?n=5000&h=cache-control:public,%20no-transform",
            "no-transform",
        ),
        (
            "/t?n=5000&status=206&h=content-range:bytes%200-4999/9999",
            "206",
        ),
        ("/t?n=999", "below min_size"),
        ("/t?n=5000&type=image/png", "type not listed"),
        ("/t?n=5000&type=application/octet-stream", "type not listed"),
        ("/off/t?n=5000", "policy turns it off"),
    ];
    for (path, why) in untouched {
        let r = get(f.l, path, gz);
        assert!(
            r.header("content-encoding").is_none() || path.contains("content-encoding"),
            "{why}: {:?}",
            r.headers
        );
        if path.contains("content-encoding") {
            assert_eq!(r.header("content-encoding"), Some("br"), "{why}");
        }
        assert!(r.header("content-length").is_some(), "{why}: length kept");
        assert_eq!(
            r.body.len() as u64,
            r.header("content-length").unwrap().parse::<u64>().unwrap()
        );
        assert!(r.header("vary").is_none(), "{why}: no Vary added");
    }
    for status in [204, 304] {
        let r = get(f.l, &format!("/t?n=5000&status={status}"), gz);
        assert_eq!(r.status, status);
        assert!(r.header("content-encoding").is_none(), "{status}");
        assert!(r.body.is_empty());
    }
    let mut c = Client::connect(f.l);
    c.send(b"HEAD /t?n=5000 HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n");
    let r = c.read_response(true).expect("HEAD answer");
    assert!(
        r.header("content-encoding").is_none(),
        "HEAD: {:?}",
        r.headers
    );
    assert_eq!(r.header("content-length"), Some("5000"));
    // The connection is still in step: the next answer is whole.
    let r = c.get_with("/t?n=5000", "Accept-Encoding: gzip\r\n");
    assert_eq!(decode(Some("gzip"), &r.body), text(5000));
}

#[test]
fn head_edits_merge_vary_and_weaken_the_etag() {
    let f = setup("");
    let r = get(f.l, "/t?n=5000&h=vary:Cookie&h=etag:%22v1%22", Some("br"));
    assert_eq!(r.header("content-encoding"), Some("br"));
    let vary: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("vary"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(vary, ["Cookie", "Accept-Encoding"]);
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    // A member that already varies on it gets no second Vary.
    let r = get(f.l, "/t?n=5000&h=vary:accept-encoding", Some("br"));
    let n = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("vary"))
        .count();
    assert_eq!(n, 1);
    // An HTTP/1.0 client gets the compressed body delimited by close.
    let r = request(
        f.l,
        "GET /t?n=5000 HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(decode(Some("gzip"), &r.body), text(5000));
}

const SIZES: [usize; 6] = [0, 1, 1000, 65_537, 1_000_000, 10_000_000];

#[test]
fn every_coding_round_trips_byte_for_byte_over_http1() {
    let f = setup("min_size = 0");
    for coding in ["gzip", "br", "zstd"] {
        for n in SIZES {
            let want = text(n);
            for chunked in [false, true] {
                let path = format!("/t?n={n}&chunked={}", chunked as u8);
                let r = get(f.l, &path, Some(coding));
                assert_eq!(r.status, 200);
                // An empty body with a length has nothing to compress.
                let expect = (n > 0 || chunked).then_some(coding);
                assert_eq!(r.header("content-encoding"), expect, "{path}");
                let got = decode(expect, &r.body);
                assert!(
                    got == want,
                    "{coding} {path}: {} bytes back, {} sent",
                    got.len(),
                    n
                );
                if n >= 65_537 {
                    assert!(r.body.len() < n / 2, "{coding} {n}: {} bytes", r.body.len());
                }
            }
        }
    }
    let v = vs_stats(&f.sy);
    for c in ["gzip", "br", "zstd"] {
        assert_eq!(v[format!("compressed_{c}")].as_u64(), Some(11), "{v}");
        let bin = v[format!("compress_bytes_in_{c}")].as_u64().unwrap_or(0);
        let bout = v[format!("compress_bytes_out_{c}")].as_u64().unwrap_or(0);
        assert_eq!(bin, 2 * SIZES.iter().sum::<usize>() as u64, "{c}");
        assert!(bout > 0 && bout < bin / 2, "{c}: {bout} of {bin}");
    }
}

fn vs_stats(sy: &Switchyard) -> serde_json::Value {
    sy.stats()["vservers"][0].clone()
}

async fn h2_get(addr: SocketAddr, path: &str, ae: &str) -> (http::HeaderMap, Vec<u8>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut send = send.ready().await.expect("ready");
    let req = http::Request::get(format!("http://example.test{path}"))
        .header("accept-encoding", ae)
        .body(())
        .expect("request");
    let (resp, _) = send.send_request(req, true).expect("send");
    let resp = resp.await.expect("response");
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    (headers, data)
}

#[test]
fn every_coding_round_trips_byte_for_byte_over_h2() {
    let f = setup("min_size = 0");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for coding in ["gzip", "br", "zstd"] {
        for n in SIZES {
            let want = text(n);
            for chunked in [false, true] {
                let path = format!("/t?n={n}&chunked={}", chunked as u8);
                let (h, body) = rt.block_on(h2_get(f.l, &path, coding));
                let ce = h.get("content-encoding").and_then(|v| v.to_str().ok());
                let expect = (n > 0 || chunked).then_some(coding);
                assert_eq!(ce, expect, "{path}");
                if expect.is_some() {
                    assert!(h.get("content-length").is_none(), "{path}: length dropped");
                }
                let got = decode(expect, &body);
                assert!(
                    got == want,
                    "{coding} {path}: {} bytes back, {n} sent",
                    got.len()
                );
            }
        }
    }
}

#[test]
fn a_paused_member_stream_flows_through_the_encoder() {
    let f = setup("");
    for coding in ["gzip", "br", "zstd"] {
        let mut s = TcpStream::connect(f.l).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(
            s,
            "GET /sse HTTP/1.1\r\nHost: a\r\nAccept-Encoding: {coding}\r\n\r\n"
        )
        .expect("send");
        let start = Instant::now();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        // Decode what has arrived so far, until the first event shows; the
        // member holds the second one back for 3 s.
        let first = loop {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "closed early");
            raw.extend_from_slice(&buf[..n]);
            let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&raw[..i]).to_lowercase();
            assert!(
                head.contains(&format!("content-encoding: {coding}")),
                "{head}"
            );
            let payload = dechunk_partial(&raw[i + 4..]);
            let text = stream_decode(coding, &payload);
            if text.windows(11).any(|w| w == b"first event") {
                break start.elapsed();
            }
        };
        assert!(
            first < Duration::from_millis(2000),
            "{coding}: first event after {first:?}"
        );
    }
}

/// The payload of a chunked body received so far (incomplete chunks
/// included as far as they go).
fn dechunk_partial(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let Ok(size) =
            usize::from_str_radix(std::str::from_utf8(&b[..i]).unwrap_or("x").trim(), 16)
        else {
            break;
        };
        let data = &b[i + 2..];
        let take = size.min(data.len());
        out.extend_from_slice(&data[..take]);
        if take < size || data.len() < size + 2 {
            break;
        }
        b = &data[size + 2..];
    }
    out
}

/// Decodes as much as a streaming decoder can from an unfinished stream.
fn stream_decode(coding: &str, data: &[u8]) -> Vec<u8> {
    match coding {
        "gzip" => {
            let mut d = flate2::write::GzDecoder::new(Vec::new());
            let _ = d.write_all(data);
            let _ = d.flush();
            d.get_ref().clone()
        }
        "br" => {
            let mut d = brotli::DecompressorWriter::new(Vec::new(), 4096);
            let _ = d.write_all(data);
            let _ = d.flush();
            d.get_ref().clone()
        }
        _ => {
            let mut d = zstd::stream::write::Decoder::new(Vec::new()).expect("zstd");
            let _ = d.write_all(data);
            let _ = d.flush();
            d.get_ref().clone()
        }
    }
}

/// `switchyard check` on `toml`: it must fail; its output.
fn check_fails(toml: &str) -> String {
    let f = temp_dir("compress-check").join("bad.toml");
    std::fs::write(&f, toml).expect("write");
    let out = std::process::Command::new(bin())
        .args(["check", "-c"])
        .arg(&f)
        .output()
        .expect("run check");
    let err =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{err}");
    err
}

#[test]
fn bad_compression_settings_are_refused_with_their_line() {
    let err = check_fails(
        "[[vserver]]\nname = \"w\"\nlisten = [\"127.0.0.1:1\"]\n[vserver.compression]\nalgorithms = [\"gzip\", \"lz4\"]\ngzip_level = 12\ntypes = [\"html\"]\n",
    );
    assert!(
        err.contains("unknown compression algorithm \"lz4\""),
        "{err}"
    );
    assert!(err.contains(":5:"), "line of the algorithm: {err}");
    assert!(
        err.contains("gzip_level 12 is out of range 1 to 9"),
        "{err}"
    );
    assert!(err.contains(":6:"), "{err}");
    assert!(err.contains("compression type \"html\""), "{err}");
    // A policy's own settings are checked the same way.
    let err = check_fails(
        "[[vserver]]\nname = \"w\"\nlisten = [\"127.0.0.1:1\"]\n[[vserver.policy]]\nmatch = { path_prefix = \"/a/\" }\ncompression = { algorithms = [\"lz4\"] }\n",
    );
    assert!(
        err.contains("policy") && err.contains("unknown compression algorithm \"lz4\""),
        "{err}"
    );
}

/// `switchyard version` tells an operator which gzip engine this build
/// has: ISA-L wherever its header was there to build against.
#[test]
fn version_names_the_gzip_engine_built_in() {
    let out = std::process::Command::new(bin())
        .arg("version")
        .output()
        .expect("run version");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("switchyard "), "{text}");
    if std::path::Path::new(switchyard::compress::isal::HEADER).exists() {
        assert!(text.contains("\n  ISA-L gzip (level 1)"), "{text}");
    } else {
        assert!(text.contains("no ISA-L gzip"), "{text}");
    }
}
