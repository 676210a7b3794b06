//! Reading the WAF's audit log (docs/waf.md: one JSON object per line) as
//! go-ftw reads ModSecurity's error log: rule ids for `expect_ids`, and a
//! ModSecurity-style text of each match for `match_regex` / `log_contains`
//! (the CRS tests' regexes are written against that text, e.g.
//! `Matched Data: ... found within ARGS:x`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// Follows a file that is appended to; it may not exist yet.
pub struct LogTail {
    path: PathBuf,
    file: Option<File>,
    pos: u64,
    partial: Vec<u8>,
}

impl LogTail {
    pub fn new(path: PathBuf) -> LogTail {
        LogTail {
            path,
            file: None,
            pos: 0,
            partial: Vec::new(),
        }
    }

    /// Complete lines appended since the last call.
    pub fn poll(&mut self) -> Vec<String> {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(f) = self.file.as_mut() else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return Vec::new();
        }
        let mut new = Vec::new();
        if let Ok(n) = f.read_to_end(&mut new) {
            self.pos += n as u64;
        }
        self.partial.extend_from_slice(&new);
        let mut lines = Vec::new();
        while let Some(p) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=p).collect();
            lines.push(String::from_utf8_lossy(&line[..p]).into_owned());
        }
        lines
    }
}

/// One audit line, as far as the tests look at it.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// The client's port (the line's `client`), None when absent.
    pub client_port: Option<u16>,
    /// Every rule id the line names: `matched[].id` and `rule_id`.
    pub ids: Vec<u64>,
    /// The ModSecurity-style text regexes are matched against, followed by
    /// the line itself.
    pub text: String,
    /// The line as logged (for --verbose).
    pub line: String,
}

impl Entry {
    pub fn parse(line: &str) -> Entry {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            // Not JSON: still searchable by regex.
            return Entry {
                text: line.to_string(),
                line: line.to_string(),
                ..Entry::default()
            };
        };
        let client_port = v["client"]
            .as_str()
            .and_then(|c| c.rsplit_once(':'))
            .and_then(|(_, p)| p.parse().ok());
        let s = |x: &serde_json::Value| x.as_str().unwrap_or("").to_string();
        let mut ids = Vec::new();
        let mut text = String::new();
        if let Some(m) = v["matched"].as_array() {
            for r in m {
                let Some(id) = r["id"].as_u64() else { continue };
                ids.push(id);
                // ModSecurity v3's error-log line for a match, as far as
                // the audit line carries its parts.
                text.push_str(&format!(
                    "ModSecurity: Warning. Matched against variable `{}' (Value: `{}' ) \
                     [id \"{id}\"] [msg \"{}\"] [data \"{}\"] [severity \"{}\"]",
                    s(&r["var"]),
                    s(&r["value"]),
                    s(&r["msg"]),
                    s(&r["data"]),
                    s(&r["severity"]),
                ));
                if let Some(tags) = r["tags"].as_array() {
                    for t in tags {
                        text.push_str(&format!(" [tag \"{}\"]", s(t)));
                    }
                }
                text.push_str(&format!(
                    " [uri \"{}\"] [unique_id \"{}\"]\n",
                    s(&v["uri"]),
                    s(&v["unique_id"])
                ));
            }
        }
        if let Some(id) = v["rule_id"].as_u64() {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        text.push_str(line);
        Entry {
            client_port,
            ids,
            text,
            line: line.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_line() {
        let line = r#"{"time":"2026-11-24T01:02:03.456Z","unique_id":"u1","vserver":"web","client":"127.0.0.1:50000","method":"GET","uri":"/?id=1%27%20or%201=1","protocol":"HTTP/1.1","host":"example.com","status":403,"action":"blocked","mode":"block","rule_id":949110,"phase":2,"matched":[{"id":942100,"phase":2,"msg":"SQL Injection Attack Detected via libinjection","data":"Matched Data: s&1c found within ARGS:id: 1' or 1=1","var":"ARGS:id","value":"1' or 1=1","severity":"CRITICAL","tags":["attack-sqli"]}]}"#;
        let e = Entry::parse(line);
        assert_eq!(e.client_port, Some(50000));
        assert_eq!(e.ids, vec![942100, 949110]);
        assert!(e.text.contains("[id \"942100\"]"), "{}", e.text);
        assert!(
            e.text
                .contains("Matched Data: s&1c found within ARGS:id: 1' or 1=1"),
            "{}",
            e.text
        );
        let junk = Entry::parse("not json");
        assert!(junk.ids.is_empty() && junk.client_port.is_none());
    }

    #[test]
    fn tails_a_growing_file() {
        let dir = std::env::temp_dir().join(format!("ftw-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("a.log");
        let mut t = LogTail::new(p.clone());
        assert!(t.poll().is_empty());
        std::fs::write(&p, "one\ntw").expect("write");
        assert_eq!(t.poll(), vec!["one".to_string()]);
        std::fs::write(&p, "one\ntwo\nthree\n").expect("write");
        assert_eq!(t.poll(), vec!["two".to_string(), "three".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
