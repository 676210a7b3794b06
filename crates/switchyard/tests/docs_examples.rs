//! The configuration examples of README.md and docs/*.md pass `switchyard
//! check`, so the documentation cannot drift from the code.
//!
//! Every ```toml block is a whole configuration unless its info string
//! says `fragment` (```toml fragment): a table or two shown on their own,
//! a cluster node's file (checked with what etcd holds), a file naming
//! system paths. Whole ones are written beside the placeholder files they
//! name (certificates, keys, CA bundles: `placeholders`) and checked by the
//! real binary; one that names a file the test does not make fails with
//! check's "cannot read" line, and the file goes into `placeholders`.

mod common;
use common::*;

use std::path::{Path, PathBuf};

/// One fenced block of a Markdown file.
struct Block {
    /// "README.md:128": the file and the line of its first body line.
    at: String,
    /// The info string after the fence ("toml", "toml fragment").
    info: String,
    text: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced blocks of `text` (fences may be indented, as in a list; the
/// body loses the fence's indentation).
fn blocks(name: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, usize, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((indent, info.trim().to_string(), i + 2, Vec::new()));
                }
            }
            Some((_, info, first, body)) if trimmed == "```" => {
                out.push(Block {
                    at: format!("{name}:{first}"),
                    info,
                    text: body.join("\n") + "\n",
                });
            }
            Some((ind, info, first, mut body)) => {
                let cut = line
                    .char_indices()
                    .take_while(|(j, c)| *j < ind && *c == ' ')
                    .count();
                body.push(line[cut..].to_string());
                open = Some((ind, info, first, body));
            }
        }
    }
    assert!(open.is_none(), "{name}: a fenced block is not closed");
    out
}

/// Every ```toml block of README.md and docs/*.md.
fn toml_blocks() -> Vec<Block> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read a Markdown file");
        let name = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
        out.extend(
            blocks(&name, &text)
                .into_iter()
                .filter(|b| b.info.split_whitespace().next() == Some("toml")),
        );
    }
    out
}

fn is_fragment(b: &Block) -> bool {
    b.info.split_whitespace().any(|w| w == "fragment")
}

/// The files the whole examples name, made in one folder: a CA bundle and
/// a client certificate with its key.
fn placeholders() -> PathBuf {
    let pki = Pki::new("members-ca");
    pki.issue_cn("switchyard-client", "switchyard", "DNS:switchyard.internal");
    pki.dir.clone()
}

/// Checks every whole example in `dir`; returns the failures, each with
/// the block's place in the docs and check's output.
fn check_all(dir: &Path, examples: &[&Block]) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, b) in examples.iter().enumerate() {
        let file = dir.join(format!("example-{i}.toml"));
        std::fs::write(&file, &b.text).expect("write an example");
        let (code, out, err) = run_cli(&["check", "-c", &file.display().to_string()]);
        if code != Some(0) || !out.contains(": OK (") {
            failures.push(format!(
                "{} (a whole configuration; mark it ```toml fragment if it is not):\n{out}{err}",
                b.at
            ));
        }
    }
    failures
}

#[test]
fn every_whole_configuration_in_the_docs_passes_check() {
    let all = toml_blocks();
    let whole: Vec<&Block> = all.iter().filter(|b| !is_fragment(b)).collect();
    // The README's configuration reference is among them, and so are the
    // L4 ones: the test would prove nothing if it found none.
    assert!(
        whole.iter().any(|b| b.at.starts_with("README.md:")),
        "no whole README example found"
    );
    assert!(
        whole
            .iter()
            .filter(|b| b.at.starts_with("docs/l4.md:"))
            .count()
            >= 2,
        "the L4 examples are not found"
    );
    let dir = placeholders();
    let failures = check_all(&dir, &whole);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_broken_example_fails_the_check() {
    // The README's reference with its "images" pool taken out, as it was
    // when issue 32 found it, and the L4 UDP example without members.
    let all = toml_blocks();
    let readme = all
        .iter()
        .find(|b| b.at.starts_with("README.md:") && !is_fragment(b))
        .expect("the README's configuration reference");
    let broken_readme = Block {
        at: readme.at.clone(),
        info: readme.info.clone(),
        text: readme
            .text
            .replace("name = \"images\"", "name = \"imagez\""),
    };
    assert_ne!(broken_readme.text, readme.text);
    let udp = all
        .iter()
        .find(|b| b.text.contains("name = \"resolvers\"") && !is_fragment(b))
        .expect("docs/l4.md's UDP example");
    let broken_udp = Block {
        at: udp.at.clone(),
        info: udp.info.clone(),
        text: udp
            .text
            .lines()
            .filter(|l| !l.contains("[[pool.member]]") && !l.starts_with("address ="))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let dir = placeholders();
    let failures = check_all(&dir, &[&broken_readme, &broken_udp]);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures[0].contains("action pool \"images\" is not defined"),
        "{}",
        failures[0]
    );
    assert!(failures[1].contains("has no member"), "{}", failures[1]);
}
