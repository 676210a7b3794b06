//! DNS-01 (RFC 8555 section 8.4): the TXT record `_acme-challenge.NAME`
//! is put up and taken down by a program the operator names (`dns_hook`),
//! then believed once the resolvers the operator lists answer it (or
//! after a fixed wait).
//!
//! The hook contract is lego's `exec` provider's, so its scripts work
//! unchanged: `HOOK present _acme-challenge.example.com. VALUE`, then
//! `HOOK cleanup _acme-challenge.example.com. VALUE`; exit status 0 for
//! success; what it writes to stderr is quoted in the error otherwise.
//! The same is in the environment (ACME_ACTION, ACME_NAME, ACME_VALUE,
//! ACME_DOMAIN) for hooks that prefer it.
//!
//! Everything here blocks: it runs on the certificate's own thread.

use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::DnsSpec;

/// Most of the hook's stderr quoted in an error.
const STDERR_QUOTED: usize = 2048;

/// The record name for `domain` ("*.example.com" is validated through
/// the record of "example.com"), fully qualified.
pub fn record_name(domain: &str) -> String {
    let base = domain.strip_prefix("*.").unwrap_or(domain);
    format!("_acme-challenge.{}.", base.trim_end_matches('.'))
}

/// Runs the hook once: `action` is "present" or "cleanup".
pub fn hook(spec: &DnsSpec, action: &str, domain: &str, value: &str) -> Result<(), String> {
    let name = record_name(domain);
    let mut child = Command::new(&spec.hook)
        .args([action, &name, value])
        .env("ACME_ACTION", action)
        .env("ACME_NAME", &name)
        .env("ACME_VALUE", value)
        .env("ACME_DOMAIN", domain)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("dns_hook {}: cannot run it: {e}", spec.hook.display()))?;
    // Read on a thread of its own: a hook that writes more than a pipe
    // holds must not stall waiting for us.
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut all);
        }
        all
    });
    let deadline = Instant::now() + spec.hook_timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "did not finish within {}s and was killed",
                    spec.hook_timeout.as_secs_f64()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Err(e.to_string()),
        }
    };
    let err = reader.join().unwrap_or_default();
    let mut err = String::from_utf8_lossy(&err).trim().to_string();
    if err.len() > STDERR_QUOTED {
        let mut cut = STDERR_QUOTED;
        while !err.is_char_boundary(cut) {
            cut -= 1;
        }
        err.truncate(cut);
        err.push_str("...");
    }
    let said = if err.is_empty() {
        String::new()
    } else {
        format!("; its stderr: {err}")
    };
    let what = format!("dns_hook {} {action} {name}", spec.hook.display());
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{what}: {s}{said}")),
        Err(e) => Err(format!("{what}: {e}{said}")),
    }
}

/// Waits until every resolver answers each (record, value) pair, polling
/// each second, for at most `spec.wait`; without resolvers, waits
/// `spec.wait` out. Err names what was still missing.
pub fn propagation(spec: &DnsSpec, records: &[(String, String)]) -> Result<(), String> {
    if spec.resolvers.is_empty() {
        std::thread::sleep(spec.wait);
        return Ok(());
    }
    let deadline = Instant::now() + spec.wait;
    loop {
        let mut missing = None;
        'all: for r in &spec.resolvers {
            for (name, value) in records {
                match txt(*r, name) {
                    Ok(values) if values.iter().any(|v| v == value) => {}
                    Ok(_) => {
                        missing = Some(format!("{r} does not answer {name} TXT {value:?} yet"));
                        break 'all;
                    }
                    Err(e) => {
                        missing = Some(format!("{r} for {name} TXT: {e}"));
                        break 'all;
                    }
                }
            }
        }
        let Some(missing) = missing else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "DNS propagation: after {}s, {missing}",
                spec.wait.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The TXT strings of `name` (each record's strings joined) as `server`
/// answers them, one UDP query.
pub fn txt(server: SocketAddr, name: &str) -> Result<Vec<String>, String> {
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    let id = crate::random::next_u64() as u16;
    let q = query(id, name)?;
    sock.send_to(&q, server).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4096];
    // Stray datagrams (another id, another sender) are skipped, within
    // the same bound as one answer.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no answer within 2s".into());
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let (n, from) = sock
            .recv_from(&mut buf)
            .map_err(|e| format!("no answer: {e}"))?;
        if from != server || n < 12 || u16::from_be_bytes([buf[0], buf[1]]) != id {
            continue;
        }
        return answers(&buf[..n]).ok_or_else(|| "malformed answer".to_string());
    }
}

fn query(id: u16, name: &str) -> Result<Vec<u8>, String> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; one question
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("{name:?} is not a DNS name"));
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&[0, 16, 0, 1]); // TXT, IN
    Ok(q)
}

/// Skips a (possibly compressed) name at `i`; the offset after it.
fn skip_name(m: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let l = *m.get(i)?;
        match l {
            0 => return Some(i + 1),
            l if l & 0xc0 == 0xc0 => return Some(i + 2),
            l => i += 1 + l as usize,
        }
    }
}

/// The TXT answers of a response; None when it does not parse. An error
/// code (NXDOMAIN) is no answers.
fn answers(m: &[u8]) -> Option<Vec<String>> {
    let qd = u16::from_be_bytes([m[4], m[5]]) as usize;
    let an = u16::from_be_bytes([m[6], m[7]]) as usize;
    let mut i = 12;
    for _ in 0..qd {
        i = skip_name(m, i)? + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        i = skip_name(m, i)?;
        let rtype = u16::from_be_bytes([*m.get(i)?, *m.get(i + 1)?]);
        let len = u16::from_be_bytes([*m.get(i + 8)?, *m.get(i + 9)?]) as usize;
        i += 10;
        let rdata = m.get(i..i + len)?;
        i += len;
        if rtype != 16 {
            continue; // a CNAME on the way
        }
        let mut s = Vec::new();
        let mut j = 0;
        while j < rdata.len() {
            let l = rdata[j] as usize;
            s.extend_from_slice(rdata.get(j + 1..j + 1 + l)?);
            j += 1 + l;
        }
        out.push(String::from_utf8_lossy(&s).into_owned());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names() {
        assert_eq!(record_name("example.com"), "_acme-challenge.example.com.");
        assert_eq!(record_name("*.example.com"), "_acme-challenge.example.com.");
    }

    #[test]
    fn parses_a_txt_answer() {
        let mut m = query(7, "_acme-challenge.a.example.").unwrap();
        m[2] |= 0x80; // response
        m[7] = 2; // two answers: a CNAME then a TXT in two strings
        m.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2, 0xc0, 12]);
        m.extend_from_slice(&[0xc0, 12, 0, 16, 0, 1, 0, 0, 0, 60, 0, 6, 2, b'a', b'b', 2]);
        m.extend_from_slice(b"cd");
        assert_eq!(answers(&m).unwrap(), vec!["abcd".to_string()]);
        assert!(answers(&m[..m.len() - 1]).is_none());
    }
}
