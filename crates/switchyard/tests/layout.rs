//! The architecture's rules, checked on the source itself (docs/internals.md):
//! no module imports one that imports it back (between top-level modules,
//! and between the files of `proxy/`), no file in `proxy/` grows past
//! about 800 lines, the request path is normalized before every stage
//! (no other code rewrites it), no folder's modules import each other back,
//! the proxy links neither the bench nor the CRS runner (they are
//! programs of their own), the WAF (crates/waf) depends on nothing of
//! the proxy, and the script engine (src/script) names neither the proxy
//! nor the configuration. Every rule but proxy/'s reads the WAF's sources too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crates' folder.
fn crates() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().expect("crates/").to_path_buf()
}

/// The WAF's crate (switchyard-waf), beside this one.
fn waf_src() -> PathBuf {
    crates().join("waf/src")
}

/// The library sources the rules read: the proxy's and the WAF's.
fn roots() -> [PathBuf; 2] {
    [src(), waf_src()]
}

fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read src dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rs_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// The code of a file without its `#[cfg(test)]` module (tests may reach
/// anywhere) and without comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read source");
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Names following `prefix` (`crate::` or `super::`), including those in
/// `prefix{a, b::c}` groups.
fn refs(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// A cycle in `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for d in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn top_level_modules_do_not_import_each_other_back() {
    let proxy = top_level_graph(&src());
    assert!(proxy.contains_key("proxy") && proxy.contains_key("config"));
    let waf = top_level_graph(&waf_src());
    assert!(waf.contains_key("engine") && waf.contains_key("seclang"));
    for graph in [proxy, waf] {
        if let Some(c) = cycle(&graph) {
            panic!("import loop between modules: {}", c.join(" -> "));
        }
    }
}

/// The top-level modules of the crate whose sources are `root` and which
/// of them each one names (`crate::X`).
fn top_level_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in rs_files(root) {
        let rel = f.strip_prefix(root).expect("under src");
        let module = match rel.components().next() {
            Some(c) => c
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string(),
            None => continue,
        };
        // bin/: programs of their own, not modules of the library.
        if module == "main" || module == "lib" || module == "bin" {
            continue;
        }
        let deps = graph.entry(module.clone()).or_default();
        for d in refs(&code(&f), "crate::") {
            if d != module && (root.join(&d).is_dir() || root.join(format!("{d}.rs")).is_file()) {
                deps.insert(d);
            }
        }
    }
    graph
}

/// The modules directly inside `dir` (files but `mod.rs` and `tests.rs`,
/// and folders) and which of them each one names: `super::X` from a file
/// of `dir`, `super::super::X` from a file one folder down (and so on),
/// or `crate::PATH::X` from anywhere inside. Test-only files (`tests.rs`)
/// may reach anywhere. `root` is the crate's `src`, which `dir` is in.
fn sibling_graph(root: &Path, dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let rel = dir.strip_prefix(root).expect("under src");
    let mut crate_path = String::from("crate::");
    for c in rel.components() {
        crate_path.push_str(&c.as_os_str().to_string_lossy());
        crate_path.push_str("::");
    }
    let is_child = |name: &str| dir.join(name).is_dir() || dir.join(format!("{name}.rs")).is_file();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return graph;
    };
    for e in entries.flatten() {
        let p = e.path();
        let stem = p.file_stem().expect("name").to_string_lossy().to_string();
        let files = if p.is_dir() {
            rs_files(&p)
        } else if p.extension().is_some_and(|x| x == "rs") && stem != "mod" && stem != "tests" {
            vec![p.clone()]
        } else {
            continue;
        };
        let deps = graph.entry(stem.clone()).or_default();
        for f in files {
            if f.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let c = code(&f);
            // A file of `dir` is one level below it; a folder's mod.rs too.
            let below = f.strip_prefix(dir).expect("inside").components().count();
            let depth = if f.file_name().is_some_and(|n| n == "mod.rs") {
                below - 1
            } else {
                below
            };
            let mut named = refs(&c, &crate_path);
            if crate_path == "crate::" {
                named = refs(&c, "crate::");
            }
            if depth >= 1 {
                named.extend(refs(&c, &"super::".repeat(depth)));
            }
            for d in named {
                if d != stem && is_child(&d) {
                    deps.insert(d);
                }
            }
        }
    }
    graph
}

/// No folder's modules import each other back (the config folder was one
/// circle of ten files, the WAF engine's body parsers and transaction
/// another): every folder reads as layers, whatever its depth, in the
/// proxy's crate and in the WAF's.
#[test]
fn no_folder_has_an_import_loop() {
    let mut loops = Vec::new();
    for root in roots() {
        let mut dirs = vec![root.clone()];
        let mut checked = 0;
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).expect("read dir").flatten() {
                if e.path().is_dir() {
                    dirs.push(e.path());
                }
            }
            let graph = sibling_graph(&root, &d);
            checked += 1;
            if let Some(c) = cycle(&graph) {
                let rel = d.strip_prefix(crates()).unwrap_or(&d);
                loops.push(format!("{}: {}", rel.display(), c.join(" -> ")));
            }
        }
        assert!(
            checked > 5,
            "only {checked} folders checked in {}",
            root.display()
        );
    }
    assert!(loops.is_empty(), "import loops: {}", loops.join("; "));
}

#[test]
fn the_loop_check_sees_super_and_crate_paths() {
    // config/ had build -> limits -> build through `super::build::is_token`.
    let g = sibling_graph(&src(), &src().join("config"));
    assert!(
        g.get("build").is_some_and(|d| d.contains("snapshot")),
        "{g:?}"
    );
    assert!(g.get("l4").is_some_and(|d| d.contains("snapshot")), "{g:?}");
    // In the WAF's crate, `crate::engine::compile` from engine/tx/.
    let g = sibling_graph(&waf_src(), &waf_src().join("engine"));
    assert!(g.get("tx").is_some_and(|d| d.contains("compile")), "{g:?}");
}

#[test]
fn proxy_files_form_a_tree_and_stay_small() {
    let dir = src().join("proxy");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in rs_files(&dir) {
        let name = f
            .file_stem()
            .expect("file name")
            .to_string_lossy()
            .to_string();
        let lines = std::fs::read_to_string(&f).expect("read").lines().count();
        assert!(
            lines <= 800,
            "{} has {lines} lines (at most about 800)",
            f.display()
        );
        if name == "mod" {
            // mod.rs only declares the files and re-exports.
            continue;
        }
        let deps = graph.entry(name.clone()).or_default();
        for d in refs(&code(&f), "super::") {
            if d != name && dir.join(format!("{d}.rs")).is_file() {
                deps.insert(d);
            }
        }
    }
    assert!(graph.len() > 10, "proxy/ files found: {:?}", graph.keys());
    if let Some(c) = cycle(&graph) {
        panic!("import loop between proxy files: {}", c.join(" -> "));
    }
}

/// Every rule reads one normalized path: `Normalize` is the first stage
/// of the pipeline, and outside the parsers that build a request only the
/// normalizing stage assigns `target` (a stage that rewrote it later would
/// let the stages after it judge a path the earlier ones never saw).
#[test]
fn the_path_is_normalized_first_and_only_there() {
    let stages = code(&src().join("proxy/stages.rs"));
    // Pipeline is (Front, Rest): the front's request-head phases finish
    // first, and Normalize leads the front.
    assert!(
        stages.contains("pub type Pipeline = (Front, Rest);"),
        "stages.rs declares Pipeline as (Front, Rest)"
    );
    let pipeline = stages
        .split("pub type Front = (")
        .nth(1)
        .expect("stages.rs declares Front");
    assert!(
        pipeline.trim_start().starts_with("Normalize,"),
        "Pipeline must start with Normalize: {}",
        &pipeline[..pipeline.len().min(80)]
    );
    let allowed = ["proxy/normalizing.rs"];
    for f in roots().iter().flat_map(|r| rs_files(r)) {
        let rel = f
            .strip_prefix(src())
            .or_else(|_| f.strip_prefix(waf_src()))
            .expect("under src")
            .to_string_lossy()
            .to_string();
        if allowed.contains(&rel.as_str()) {
            continue;
        }
        let c = code(&f);
        for needle in [
            "req.target =",
            "request.target =",
            ".target = std::mem",
            "mem::replace(&mut req.target",
        ] {
            assert!(
                !c.contains(needle),
                "{rel} rewrites the request target ({needle}); only proxy/normalizing.rs may"
            );
        }
    }
}

/// One front door: every client connection is admitted by the shield, has
/// its PROXY header read and its TLS handshake done, and is handed to its
/// protocol in `proxy/accept.rs`, and nowhere else (the HTTP/1 session's
/// h2c-preface hand-off to HTTP/2 aside: only its first read can tell). A
/// second door would be a second place for a rule to be forgotten.
#[test]
fn connections_enter_through_one_front_door() {
    let door = "proxy/accept.rs";
    // What only the front door may do, and the file it must do it in.
    let only_there = [
        (
            "admission::connection(",
            "the shield's admission of a connection",
        ),
        ("read_proxy_header(", "reading a client's PROXY header"),
        ("TlsAcceptor::from(", "a client TLS handshake"),
        (
            "LazyConfigAcceptor::new(",
            "reading a client's ClientHello before its handshake",
        ),
        ("client_h1_conn::start(", "the hand-off to HTTP/1"),
        ("tcp::serve(", "the hand-off to the L4 relay"),
    ];
    let mut seen = BTreeSet::new();
    for f in rs_files(&src()) {
        let rel = f
            .strip_prefix(src())
            .expect("under src")
            .to_string_lossy()
            .to_string();
        let c = code(&f);
        for (needle, what) in only_there {
            if !c.contains(needle) {
                continue;
            }
            // The admin API's own listener terminates its TLS itself.
            if rel == "admin/mod.rs" && needle == "TlsAcceptor::from(" {
                continue;
            }
            assert_eq!(rel, door, "{rel} does {what} ({needle}); only {door} may");
            seen.insert(needle);
        }
    }
    assert_eq!(
        seen.len(),
        only_there.len(),
        "the front door does: {seen:?}"
    );
    let mut h2_starts: Vec<String> = rs_files(&src())
        .into_iter()
        .filter(|f| code(f).contains("client_h2_conn::start("))
        .map(|f| {
            f.strip_prefix(src())
                .expect("under src")
                .display()
                .to_string()
        })
        .collect();
    h2_starts.sort();
    assert_eq!(
        h2_starts,
        ["proxy/accept.rs", "proxy/client_h1_conn.rs"],
        "HTTP/2 starts at the front door, or from HTTP/1 on the h2c preface"
    );
}

/// QUIC on several workers holds only if every endpoint issues the
/// connection IDs that steer its datagrams back to its worker
/// (proxy/quic_steer.rs) and every QUIC socket is bound into a group of
/// its own, in worker order (runtime/listen.rs `bind_quic`): an endpoint
/// on quinn's default configuration, or made elsewhere, would lose its
/// clients when they change address.
#[test]
fn quic_endpoints_steer_by_connection_id() {
    let mut endpoints = Vec::new();
    for f in rs_files(&src()) {
        let rel = f
            .strip_prefix(src())
            .expect("under src")
            .to_string_lossy()
            .to_string();
        let c = code(&f);
        if c.contains("EndpointConfig::default(") {
            assert_eq!(
                rel, "proxy/quic_steer.rs",
                "{rel} makes a QUIC endpoint configuration of its own"
            );
        }
        if c.contains("Endpoint::new(")
            || c.contains("Endpoint::new_with_abstract_socket(")
            || c.contains("Endpoint::server(")
        {
            assert!(
                c.contains("quic_steer::endpoint_config("),
                "{rel} makes a QUIC endpoint without quic_steer's connection IDs"
            );
            // quinn's own tokio socket is registered for writing too: an
            // EPOLLOUT wake-up with every datagram sent (quic_socket.rs).
            assert!(
                c.contains("quic_socket::QuicSocket::new(")
                    && c.contains("Endpoint::new_with_abstract_socket("),
                "{rel} makes a QUIC endpoint on a socket other than quic_socket's"
            );
            // quinn's drivers on the runtime instead of the worker's
            // LocalSet: an epoll_wait between a connection's driver and
            // each request's task (quic_runtime.rs).
            assert!(
                c.contains("quic_runtime::WorkerRuntime"),
                "{rel} makes a QUIC endpoint whose drivers run outside the worker's LocalSet"
            );
            endpoints.push(rel);
        }
    }
    assert_eq!(
        endpoints,
        ["proxy/accept.rs"],
        "QUIC endpoints: {endpoints:?}"
    );
    let listen = code(&src().join("runtime/listen.rs"));
    assert!(listen.contains("quic_steer::attach("));
}

/// The discipline the code has, enforced: no `unwrap()`/`expect()` outside
/// tests (clippy denies them in the libraries, the proxy's and the WAF's),
/// no unsafe operation outside an `unsafe` block, no unsafe code at all in
/// the WAF, and every ignored test says why it is ignored.
#[test]
fn lints_hold_the_discipline_and_ignored_tests_say_why() {
    for root in roots() {
        let lib = std::fs::read_to_string(root.join("lib.rs")).expect("lib.rs");
        for lint in [
            "#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]",
            "#![deny(unsafe_op_in_unsafe_fn)]",
        ] {
            assert!(lib.contains(lint), "{}/lib.rs lacks {lint}", root.display());
        }
    }
    let waf = std::fs::read_to_string(waf_src().join("lib.rs")).expect("lib.rs");
    assert!(
        waf.contains("#![cfg_attr(not(test), forbid(unsafe_code))]"),
        "the WAF's lib.rs lacks forbid(unsafe_code)"
    );
    let mut bare = Vec::new();
    for f in rs_files(&crates()) {
        if f.components().any(|c| c.as_os_str() == "target") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if text.lines().any(|l| l.trim() == "#[ignore]") {
            bare.push(f.display().to_string());
        }
    }
    assert!(
        bare.is_empty(),
        "bare #[ignore] (write #[ignore = \"why\"]) in {bare:?}"
    );
}

/// The lines of `[section]` in a Cargo.toml, up to the next table.
fn toml_section<'a>(text: &'a str, section: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| l.trim() != section)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect()
}

/// The binary operators run is the proxy alone (issue 31): the bench (raw
/// frame and DDoS generators, peer launchers, a load generator) is a
/// dev-dependency, used by tests only, and `switchyard bench` runs the
/// switchyard-bench program; the CRS runner is the switchyard-waf program
/// (src/bin/switchyard-waf), which neither the library nor main.rs pulls
/// back in.
#[test]
fn the_proxy_links_neither_the_bench_nor_the_crs_runner() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let manifest = std::fs::read_to_string(manifest).expect("read Cargo.toml");
    for section in ["[dependencies]", "[build-dependencies]"] {
        let lines = toml_section(&manifest, section);
        assert!(
            !lines.iter().any(|l| l.contains("switchyard-bench")),
            "Cargo.toml {section} has switchyard-bench: the bench is a dev-dependency only"
        );
    }
    assert!(
        toml_section(&manifest, "[dev-dependencies]")
            .iter()
            .any(|l| l.contains("switchyard-bench")),
        "the tests use the bench as a dev-dependency"
    );
    let mut checked = 0;
    for f in roots().iter().flat_map(|r| rs_files(r)) {
        let rel = f
            .strip_prefix(src())
            .or_else(|_| f.strip_prefix(waf_src()))
            .expect("under src")
            .to_string_lossy()
            .to_string();
        if rel.starts_with("bin/") {
            continue;
        }
        checked += 1;
        assert!(
            !rel.split('/').any(|c| c == "ftw" || c == "ftw.rs"),
            "{rel}: the CRS runner (ftw) lives in src/bin/switchyard-waf, not in the library"
        );
        let c = code(&f);
        for needle in [
            "switchyard_bench",
            "mod ftw",
            "ftw::",
            "switchyard-waf/",
            "#[path",
        ] {
            assert!(
                !c.contains(needle),
                "{rel} has `{needle}` outside its tests: the proxy must not link the bench or the CRS runner"
            );
        }
    }
    assert!(checked > 50, "source files checked: {checked}");
}

/// The WAF is a crate of its own (issue 31) that the proxy depends on,
/// never the other way: its Cargo.toml names no other switchyard crate but
/// the shared hasher, not even as a dev-dependency (cargo allows that
/// loop), and its sources name no `switchyard::` path.
#[test]
fn the_waf_depends_on_nothing_of_the_proxy() {
    let manifest = crates().join("waf/Cargo.toml");
    let manifest = std::fs::read_to_string(manifest).expect("read crates/waf/Cargo.toml");
    for section in [
        "[dependencies]",
        "[dev-dependencies]",
        "[build-dependencies]",
    ] {
        for l in toml_section(&manifest, section) {
            assert!(
                !l.trim_start().starts_with("switchyard") || l.contains("switchyard-fasthash"),
                "crates/waf/Cargo.toml {section}: {l}: the WAF must not depend on the proxy"
            );
        }
    }
    let mut checked = 0;
    for f in rs_files(&waf_src()) {
        checked += 1;
        let text = std::fs::read_to_string(&f).expect("read");
        for needle in ["switchyard::", "switchyard_bench"] {
            assert!(
                !text.contains(needle),
                "{} names `{needle}`: the WAF must not depend on the proxy",
                f.display()
            );
        }
    }
    assert!(checked > 30, "WAF source files checked: {checked}");
}

/// The Kubernetes controller (crates/gateway, issue 37) is a program of
/// its own that uses the proxy's library (its configuration checker and
/// etcd publisher), never the other way: the proxy links no Kubernetes
/// client, so a node outside Kubernetes carries none of it.
#[test]
fn the_proxy_links_no_kubernetes_client() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let manifest = std::fs::read_to_string(manifest).expect("read Cargo.toml");
    for section in ["[dependencies]", "[build-dependencies]"] {
        for l in toml_section(&manifest, section) {
            for name in ["kube", "k8s-openapi", "switchyard-gateway"] {
                assert!(
                    !l.trim_start().starts_with(name),
                    "Cargo.toml {section}: {l}: the proxy must not link the Kubernetes controller or client"
                );
            }
        }
    }
    let gateway = std::fs::read_to_string(crates().join("gateway/Cargo.toml"))
        .expect("read crates/gateway/Cargo.toml");
    assert!(
        toml_section(&gateway, "[dependencies]")
            .iter()
            .any(|l| l.trim_start().starts_with("switchyard =")),
        "the controller checks and publishes with the proxy's own library"
    );
}

/// The script engine (src/script) is a library the proxy and the
/// configuration use: it names neither (the stage that runs it is
/// proxy/scripting.rs, its settings config/script.rs), so a script's
/// sandbox cannot reach the data path's internals.
#[test]
fn the_script_engine_knows_neither_the_proxy_nor_the_configuration() {
    let mut checked = 0;
    for f in rs_files(&src().join("script")) {
        checked += 1;
        let c = code(&f);
        for (needle, what) in [
            ("crate::proxy", "the proxy"),
            ("crate::config", "the configuration"),
            ("crate::runtime", "the runtime"),
            ("crate::admin", "the admin API"),
        ] {
            assert!(
                !c.contains(needle),
                "{}: names {what} ({needle}); the script engine is used by it, not the other way",
                f.display()
            );
        }
    }
    assert!(checked >= 3, "script files checked: {checked}");
}

/// Raw Lua (the C API over a `lua_State`, `mlua::ffi`) is where a Lua
/// error can `longjmp` across Rust frames: it stays in the script
/// engine's files that are written for it (fast.rs, `r`'s hot methods;
/// library.rs, tables made in one protected call), and every `unsafe`
/// block there says why it is sound.
#[test]
fn raw_lua_stays_in_two_files_and_every_unsafe_block_says_why() {
    let allowed = ["fast.rs", "library.rs"];
    let mut blocks = 0;
    for f in rs_files(&src()) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let in_script = f.parent().is_some_and(|d| d.ends_with("script"));
        if text.contains("ffi::lua_") || text.contains("ffi::luaL_") {
            assert!(
                in_script && allowed.contains(&name),
                "{}: raw Lua calls belong in script/fast.rs or script/library.rs",
                f.display()
            );
        }
        if !in_script {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !l.contains("unsafe {") {
                continue;
            }
            blocks += 1;
            let said = lines[i.saturating_sub(6)..=i]
                .iter()
                .any(|p| p.contains("SAFETY"));
            assert!(
                said,
                "{}:{}: an unsafe block without a SAFETY comment just above it",
                f.display(),
                i + 1
            );
        }
    }
    assert!(blocks >= 10, "unsafe blocks checked: {blocks}");
}

#[test]
fn a_loop_is_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert!(cycle(&g).is_none());
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&g).map(|c| c.len()), Some(4));
    assert_eq!(
        refs("use super::{a, b::C};\nuse super::d::E;", "super::"),
        ["a", "b", "d"].iter().map(|s| s.to_string()).collect()
    );
}

/// docs/internals.md's layout table names every folder and file at the
/// top of src/ (a new module goes into the table with it).
#[test]
fn the_layout_table_names_every_module() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/internals.md"),
    )
    .expect("read docs/internals.md");
    let layout = doc
        .split("## Layout")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Layout section");
    // The first cell of each row.
    let named: BTreeSet<String> = layout
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(src()).expect("read src").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let name = if e.path().is_dir() {
            format!("{name}/")
        } else {
            name
        };
        let listed = named.contains(&name)
            || named
                .iter()
                .any(|n| n.starts_with(&name) && name.ends_with('/'));
        if !listed {
            missing.push(name);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "not in docs/internals.md's layout table: {missing:?}"
    );
}

/// A patched dependency (vendor/, `[patch.crates-io]`) is a liability the
/// project carries until upstream has the change: each one says what was
/// changed and why in its PATCHED.md, every patch table entry points at
/// one of them (the workspace's and the fuzz project's alike, so the
/// fuzzers run what the proxy runs), and the Huffman crate it shares with
/// the proxy depends on nothing (vendor/h3 must not pull the proxy in).
#[test]
fn patched_dependencies_are_documented_and_the_same_everywhere() {
    let root = crates().parent().expect("repository root").to_path_buf();
    let mut vendored = Vec::new();
    for e in std::fs::read_dir(root.join("vendor")).expect("read vendor/") {
        let dir = e.expect("vendor entry").path();
        let name = dir.file_name().expect("name").to_string_lossy().to_string();
        let note = std::fs::read_to_string(dir.join("PATCHED.md"))
            .unwrap_or_else(|_| panic!("vendor/{name} has no PATCHED.md"));
        assert!(
            note.contains("Switchyard's patch") || note.contains("patched for Switchyard"),
            "vendor/{name}/PATCHED.md does not say what the patch is"
        );
        vendored.push(name);
    }
    assert!(!vendored.is_empty(), "vendor/ is empty: drop this rule");
    for manifest in ["Cargo.toml", "fuzz/Cargo.toml"] {
        let text = std::fs::read_to_string(root.join(manifest)).expect("read a manifest");
        let patches = toml_section(&text, "[patch.crates-io]");
        for name in &vendored {
            assert!(
                patches
                    .iter()
                    .any(|l| l.trim_start().starts_with(&format!("{name} ="))
                        && l.contains(&format!("vendor/{name}"))),
                "{manifest} [patch.crates-io] does not use vendor/{name}"
            );
        }
    }
    let huffman = std::fs::read_to_string(crates().join("huffman/Cargo.toml"))
        .expect("read crates/huffman/Cargo.toml");
    assert!(
        toml_section(&huffman, "[dependencies]").is_empty(),
        "crates/huffman must depend on nothing"
    );
}

/// The controller's render (crates/gateway: render.rs, and ingress.rs,
/// ingress_annotations.rs, grpc.rs, render_l4.rs and conflicts.rs that it
/// calls) is a pure function of the
/// objects the watches hold: it names no Kubernetes client, no runtime and
/// no clock, so the same objects always render the same text (an
/// unchanged render is not published again) and its unit tests need no
/// API server. main.rs and events.rs do the talking.
#[test]
fn the_gateway_render_talks_to_nothing() {
    let dir = crates().join("gateway/src");
    for f in [
        "render.rs",
        "ingress.rs",
        "ingress_annotations.rs",
        "grpc.rs",
        "render_l4.rs",
        "conflicts.rs",
    ] {
        let c = code(&dir.join(f));
        for word in [
            "kube::",
            "Api<",
            "Client",
            "tokio",
            "reqwest",
            "std::net::TcpStream",
            "Timestamp::now",
            "SystemTime",
        ] {
            assert!(
                !c.contains(word),
                "crates/gateway/src/{f} names {word}: the render must stay pure"
            );
        }
    }
}
