//! The WAF's audit log: one JSON line per request (docs/waf.md), written
//! through the access logs' buffered writer, so a slow disk never stalls a
//! worker.
//!
//! Here, not in the WAF, because it is a log line like the others of this
//! folder: the same JSON escaping and time format (`format.rs`), the same
//! sinks (`writer.rs`, which the WAF's `AuditSink` names without knowing).
//! The WAF gives the verdict and the matched rules; the proxy writes them.

use std::io::Write;

use switchyard_waf::engine::{Intervention, MatchedRule};
use switchyard_waf::policy::AuditSink;

use super::format::{iso8601, json_str};
use super::writer::{self, SinkHandle};

impl AuditSink for SinkHandle {
    fn push(&self, time_us: u64, render: &mut dyn FnMut(&mut Vec<u8>)) {
        writer::push(self, time_us, render);
    }
}

/// Strings in the log are cut to this many bytes.
const CUT: usize = 512;

/// What became of the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The client got the WAF's answer.
    Blocked,
    /// A blocking rule matched in detection-only mode.
    Detected,
    /// Rules logged; nothing would block.
    Logged,
    /// Nothing matched (logged with `audit = "all"`).
    Passed,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Blocked => "blocked",
            Action::Detected => "detected",
            Action::Logged => "logged",
            Action::Passed => "passed",
        }
    }
}

/// One audit record.
pub struct Record<'a> {
    pub time_us: u64,
    pub unique_id: &'a str,
    pub vserver: &'a str,
    pub client: std::net::SocketAddr,
    pub method: &'a [u8],
    pub uri: &'a [u8],
    pub protocol: &'a str,
    pub host: Option<&'a [u8]>,
    /// The status the client got (0: none, the connection was cut).
    pub status: u16,
    pub action: Action,
    pub mode: &'a str,
    pub interrupted: Option<&'a Intervention>,
    pub matched: &'a [MatchedRule],
}

fn cut(v: &[u8]) -> &[u8] {
    &v[..v.len().min(CUT)]
}

fn str_field(out: &mut Vec<u8>, name: &str, v: &[u8]) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    json_str(out, cut(v));
}

/// Renders `r` as one line, newline included.
pub fn render(r: &Record<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"time\":\"");
    iso8601(out, r.time_us);
    out.push(b'"');
    str_field(out, "unique_id", r.unique_id.as_bytes());
    str_field(out, "vserver", r.vserver.as_bytes());
    str_field(out, "client", r.client.to_string().as_bytes());
    str_field(out, "method", r.method);
    str_field(out, "uri", r.uri);
    str_field(out, "protocol", r.protocol.as_bytes());
    if let Some(h) = r.host {
        str_field(out, "host", h);
    }
    let _ = write!(out, ",\"status\":{}", r.status);
    str_field(out, "action", r.action.name().as_bytes());
    str_field(out, "mode", r.mode.as_bytes());
    if let Some(i) = r.interrupted {
        let _ = write!(out, ",\"rule_id\":{},\"phase\":{}", i.rule_id, i.phase);
        str_field(out, "message", i.message.as_bytes());
    }
    out.extend_from_slice(b",\"matched\":[");
    for (n, m) in r.matched.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        let _ = write!(out, "{{\"id\":{},\"phase\":{}", m.id, m.phase);
        str_field(out, "msg", m.msg.as_bytes());
        str_field(out, "data", m.logdata.as_bytes());
        str_field(out, "var", m.matched_var_name.as_bytes());
        str_field(out, "value", m.matched_var.as_bytes());
        if let Some(s) = m.severity {
            str_field(out, "severity", s.name().as_bytes());
        }
        out.extend_from_slice(b",\"tags\":[");
        for (k, t) in m.tags.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            json_str(out, cut(t.as_bytes()));
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_waf::engine::InterventionKind;

    #[test]
    fn a_record_is_one_line_of_valid_json() {
        let m = MatchedRule {
            id: 942100,
            phase: 2,
            msg: "SQL Injection Attack Detected via libinjection".into(),
            logdata: "Matched Data: s&1c found within ARGS:id: 1' or \"1\"=\"1\n".into(),
            severity: Some(switchyard_waf::seclang::Severity::Critical),
            tags: vec!["attack-sqli".into()],
            ver: None,
            matched_var_name: "ARGS:id".into(),
            matched_var: "x".repeat(2000),
            disruptive: false,
        };
        let i = Intervention {
            kind: InterventionKind::Deny,
            status: 403,
            rule_id: 949110,
            phase: 2,
            message: "Inbound Anomaly Score Exceeded".into(),
        };
        let mut out = Vec::new();
        render(
            &Record {
                time_us: 1_700_000_000_000_000,
                unique_id: "abc",
                vserver: "web",
                client: "127.0.0.1:5000".parse().unwrap(),
                method: b"GET",
                uri: b"/?id=1%27",
                protocol: "HTTP/1.1",
                host: Some(b"example.com"),
                status: 403,
                action: Action::Blocked,
                mode: "block",
                interrupted: Some(&i),
                matched: std::slice::from_ref(&m),
            },
            &mut out,
        );
        assert_eq!(out.iter().filter(|&&c| c == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["action"], "blocked");
        assert_eq!(v["rule_id"], 949110);
        assert_eq!(v["matched"][0]["id"], 942100);
        assert_eq!(v["matched"][0]["severity"], "CRITICAL");
        assert_eq!(v["matched"][0]["value"].as_str().unwrap().len(), CUT);
        assert_eq!(v["host"], "example.com");
    }
}
