//! `switchyard ctl`: the admin API from the shell. Every command is one
//! API call (or a few, for `drain --wait` and `top`); `--json` prints the
//! API's answer as it came, for scripts.
//!
//! Where the instance is: `--admin ADDR` (`https://` for a TLS listener),
//! else `[admin]` of `-c FILE`, else the quickstart's. The token:
//! `--token`, `--token-file`, or `SWITCHYARD_TOKEN`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::ServerName;
use serde_json::{json, Value};

pub const USAGE: &str = "\
switchyard ctl: the admin API from the shell

USAGE:
  switchyard ctl [OPTIONS] COMMAND

COMMANDS:
  members [POOL]                    members with state, weight, connections
  disable POOL MEMBER               out of rotation now (maintenance)
  enable POOL MEMBER                back in rotation (slow start if configured)
  drain POOL MEMBER [--wait SECS]   no new requests; --wait until drained
  weight POOL MEMBER N|reset        run-time weight (reset: the configured one)
  health POOL MEMBER auto|up|down   force the health verdict (auto: the checks)
  vservers                          virtual servers and their counters
  certs                             certificates, days to expiry, OCSP
  stats                             every counter (JSON)
  config                            the configuration running now
  audit                             the last changes and who made them
  reload                            re-read the configuration
  purge URL | purge --prefix URL    remove cached objects
  top [--interval SECS] [--count N] live view (Ctrl-C or N refreshes to stop)
  node drain | node ready            /readyz answers 503 (the VIP moves away) or 200
  cluster status                    every node: revision applied, errors
  cluster publish FILE [--if-match REV]
                                    publish FILE to the cluster (etcd)
  cluster file NAME PATH            publish PATH as NAME in every node's
                                    state_dir/files/ (certificates, keys)

OPTIONS:
  --admin ADDR | -c FILE            where the admin listener is
  --token T | --token-file F        bearer token (or SWITCHYARD_TOKEN)
  --cacert F [--cert F --key F]     TLS admin listener: CA, client certificate
  --json                            print the API's JSON
";

/// How to reach the admin API.
pub struct Client {
    addr: SocketAddr,
    host: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<String>,
}

/// An answer: status and body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.body).map_err(|e| format!("the admin API sent no JSON ({e})"))
    }
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Value-taking options, removed from the arguments before the command is read.
const VALUE_OPTIONS: &[&str] = &[
    "--admin",
    "-c",
    "--config",
    "--token",
    "--token-file",
    "--cacert",
    "--cert",
    "--key",
    "--interval",
    "--count",
    "--wait",
    "--if-match",
];

/// The words of the command, options removed.
fn words(args: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if VALUE_OPTIONS.contains(&a) {
            i += 2;
            continue;
        }
        if !a.starts_with("--") {
            out.push(a);
        }
        i += 1;
    }
    out
}

impl Client {
    /// From the command line: see the module comment.
    pub fn from_args(args: &[String]) -> Result<Client, String> {
        let (target, tls_from_config) = match flag(args, "--admin") {
            Some(a) => (a.to_string(), false),
            None => match flag(args, "-c").or_else(|| flag(args, "--config")) {
                Some(file) => admin_from_config(Path::new(file))?,
                None => (crate::quickstart::ADMIN.to_string(), false),
            },
        };
        let (https, hostport) = match target.strip_prefix("https://") {
            Some(rest) => (true, rest.trim_end_matches('/')),
            None => (
                tls_from_config,
                target
                    .strip_prefix("http://")
                    .unwrap_or(&target)
                    .trim_end_matches('/'),
            ),
        };
        let addr = hostport
            .to_socket_addrs()
            .map_err(|e| format!("admin address {hostport}: {e}"))?
            .next()
            .ok_or_else(|| format!("admin address {hostport} resolves to nothing"))?;
        let host = hostport
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or(hostport)
            .to_string();
        let tls = if https { Some(tls_config(args)?) } else { None };
        let token = match (flag(args, "--token"), flag(args, "--token-file")) {
            (Some(t), _) => Some(t.to_string()),
            (None, Some(f)) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| format!("--token-file {f}: {e}"))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => std::env::var("SWITCHYARD_TOKEN").ok(),
        };
        Ok(Client {
            addr,
            host,
            tls,
            token,
        })
    }

    /// One request; the connection closes after the answer.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let ctype: &[(&str, &str)] = if body.is_empty() {
            &[]
        } else {
            &[("content-type", "application/json")]
        };
        self.call_with(method, path, &body, ctype)
    }

    /// One request with a body of any type and extra header fields.
    pub fn call_with(
        &self,
        method: &str,
        path: &str,
        body: &str,
        fields: &[(&str, &str)],
    ) -> Result<Answer, String> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
            self.host,
            body.len()
        );
        for (n, v) in fields {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        if let Some(t) = &self.token {
            req.push_str(&format!("authorization: Bearer {t}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        let tcp = TcpStream::connect_timeout(&self.addr, Duration::from_secs(3)).map_err(|e| {
            format!(
                "cannot reach the admin endpoint at {}: {e} (is switchyard running?)",
                self.addr
            )
        })?;
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(30)));
        let mut raw = Vec::new();
        let io = |e: std::io::Error| format!("admin endpoint {}: {e}", self.addr);
        match &self.tls {
            None => {
                let mut s = tcp;
                s.write_all(req.as_bytes()).map_err(io)?;
                s.read_to_end(&mut raw).map_err(io)?;
            }
            Some(cfg) => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|e| format!("admin host {}: {e}", self.host))?;
                let conn = rustls::ClientConnection::new(cfg.clone(), name)
                    .map_err(|e| format!("TLS: {e}"))?;
                let mut s = rustls::StreamOwned::new(conn, tcp);
                s.write_all(req.as_bytes()).map_err(io)?;
                // A peer that closes without close_notify still sent the
                // whole answer (Content-Length says so).
                if let Err(e) = s.read_to_end(&mut raw) {
                    if raw.is_empty() {
                        return Err(io(e));
                    }
                }
            }
        }
        parse_answer(&raw).ok_or_else(|| format!("admin endpoint {}: no HTTP answer", self.addr))
    }

    fn get(&self, path: &str) -> Result<Value, String> {
        expect_ok(self.call("GET", path, None)?)
    }
}

/// `cluster status` and `cluster publish FILE [--if-match REV]`.
fn cluster(c: &Client, args: &[String], w: &[&str], json_out: bool) -> Result<(), String> {
    match w.get(1).copied() {
        Some("status") => {
            let v = c.get("/api/v1/cluster")?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                return Ok(());
            }
            println!("cluster {}", v["prefix"].as_str().unwrap_or("?"));
            println!(
                "{:<20} {:>9} {:>10}  ERROR",
                "NODE", "REVISION", "GENERATION"
            );
            for n in v["nodes"].as_array().into_iter().flatten() {
                println!(
                    "{:<20} {:>9} {:>10}  {}",
                    n["node"].as_str().unwrap_or("?"),
                    n["applied_revision"],
                    n["generation"],
                    n["error"].as_str().map_or(String::new(), |e| format!(
                        "revision {}: {e}",
                        n["error_revision"]
                    ))
                );
            }
            Ok(())
        }
        Some("publish") => {
            let file = w
                .get(2)
                .ok_or("usage: switchyard ctl cluster publish FILE [--if-match REV]")?;
            let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
            let rev = args
                .iter()
                .position(|a| a == "--if-match")
                .and_then(|i| args.get(i + 1))
                .map(|r| format!("\"{r}\""));
            let mut fields = vec![("content-type", "application/toml")];
            if let Some(r) = &rev {
                fields.push(("if-match", r));
            }
            let a = c.call_with("PUT", "/api/v1/cluster/config", &text, &fields)?;
            let v = expect_ok(a)?;
            println!("published revision {}", v["revision"]);
            Ok(())
        }
        Some("file") => {
            let (Some(name), Some(path)) = (w.get(2), w.get(3)) else {
                return Err("usage: switchyard ctl cluster file NAME PATH".into());
            };
            let data = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let a = c.call_with(
                "PUT",
                &format!("/api/v1/cluster/files/{}", encode(name)),
                &data,
                &[("content-type", "application/octet-stream")],
            )?;
            let v = expect_ok(a)?;
            println!("file {name} published with revision {}", v["revision"]);
            Ok(())
        }
        _ => Err("usage: switchyard ctl cluster status | cluster publish FILE [--if-match REV] | cluster file NAME PATH".into()),
    }
}

fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Answer {
        status,
        body: body.to_string(),
    })
}

/// The JSON of a 2xx answer; the API's error message otherwise.
fn expect_ok(a: Answer) -> Result<Value, String> {
    if (200..300).contains(&a.status) {
        return a.json();
    }
    let why = a
        .json()
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| a.body.trim().to_string());
    Err(format!("{} {why}", a.status))
}

/// `[admin] listen` of a configuration file, and whether it has `[admin.tls]`.
fn admin_from_config(path: &Path) -> Result<(String, bool), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // A syntax error as `switchyard check` reports it: FILE:LINE:COL.
    let v: toml::Value = crate::config::read_part(&path.display().to_string(), &text, None)
        .map_err(|e| {
            format!("{e}\n(the admin address is read from this file: fix it, or give --admin ADDR)")
        })?;
    let admin = v.get("admin").ok_or_else(|| {
        format!(
            "{} has no [admin] table: the instance has no admin listener",
            path.display()
        )
    })?;
    let listen = admin
        .get("listen")
        .and_then(|l| l.as_str())
        .unwrap_or("127.0.0.1:9090");
    Ok((listen.to_string(), admin.get("tls").is_some()))
}

fn tls_config(args: &[String]) -> Result<Arc<rustls::ClientConfig>, String> {
    use crate::tls::ClientFile;
    let ca = flag(args, "--cacert").ok_or(
        "the admin listener speaks TLS: give --cacert FILE (the CA that signed its certificate)",
    )?;
    let (cert, key) = (flag(args, "--cert"), flag(args, "--key"));
    let client = match (cert, key) {
        (Some(c), Some(k)) => Some((Path::new(c), Path::new(k))),
        (None, None) => None,
        _ => return Err("--cert and --key go together".into()),
    };
    crate::tls::client_config(Path::new(ca), client).map_err(|(which, e)| match which {
        ClientFile::Ca => format!("--cacert {ca}: {e}"),
        ClientFile::Cert => format!("--cert {}: {e}", cert.unwrap_or_default()),
        ClientFile::Key => format!("--key {}: {e}", key.unwrap_or_default()),
        ClientFile::Pair => format!("client certificate: {e}"),
        ClientFile::Versions => format!("TLS: {e}"),
    })
}

fn member_path(pool: &str, member: &str) -> String {
    format!("/api/v1/pools/{}/members/{}", encode(pool), encode(member))
}

/// Percent-encodes what cannot go in a path segment as is.
fn encode(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// Runs `switchyard ctl ARGS`; the process exit code.
pub fn main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") || words(args).is_empty() {
        print!("{USAGE}");
        return if words(args).is_empty() && !args.iter().any(|a| a == "--help" || a == "-h") {
            2
        } else {
            0
        };
    }
    let json_out = args.iter().any(|a| a == "--json");
    let client = match Client::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchyard ctl: {e}");
            return 1;
        }
    };
    match run(&client, args, json_out) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("switchyard ctl: {e}");
            1
        }
    }
}

fn run(c: &Client, args: &[String], json_out: bool) -> Result<(), String> {
    let w = words(args);
    let need = |n: usize, usage: &str| -> Result<(), String> {
        if w.len() < n {
            Err(format!("usage: switchyard ctl {usage}"))
        } else {
            Ok(())
        }
    };
    let print_json =
        |v: &Value| println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    match w[0] {
        "members" => {
            let pools = c.get("/api/v1/pools")?;
            let pools: Vec<&Value> = pools
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|p| w.get(1).is_none_or(|want| p["name"] == *want))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(want) = w.get(1) {
                if pools.is_empty() {
                    return Err(format!("no pool {want:?}"));
                }
            }
            if json_out {
                print_json(&json!(pools));
            } else {
                // STATE says "up (no check)" when nothing checks the member;
                // FLAG says "failing" when its last connects all failed.
                let mut t = Table::new(&[
                    "POOL",
                    "MEMBER",
                    "STATE",
                    "FLAG",
                    "ADMIN",
                    "+WEIGHT",
                    "+INFLIGHT",
                    "+CONNS",
                    "+REQUESTS",
                    "+CONNFAIL",
                    "+5XX",
                ]);
                let failing = json!("failing");
                for p in pools {
                    for m in p["members"].as_array().into_iter().flatten() {
                        let state = if m["status"].is_string() {
                            &m["status"]
                        } else {
                            &m["state"]
                        };
                        let flag = if m["failing"] == true {
                            &failing
                        } else {
                            &Value::Null
                        };
                        t.row(&[
                            &p["name"],
                            &m["address"],
                            state,
                            flag,
                            &m["admin_state"],
                            &m["weight"],
                            &m["inflight"],
                            &m["connections"]["active"],
                            &m["counters"]["requests"],
                            &m["counters"]["connect_failures"],
                            &m["counters"]["responses"]["5xx"],
                        ]);
                    }
                }
                print!("{t}");
            }
            Ok(())
        }
        "disable" | "enable" | "drain" => {
            need(3, &format!("{} POOL MEMBER", w[0]))?;
            let state = match w[0] {
                "disable" => "disabled",
                "enable" => "enabled",
                _ => "draining",
            };
            let path = member_path(w[1], w[2]);
            let mut m = expect_ok(c.call("PATCH", &path, Some(&json!({ "state": state })))?)?;
            if w[0] == "drain" {
                if let Some(secs) = flag(args, "--wait") {
                    let secs: u64 = secs.parse().map_err(|_| "--wait takes seconds")?;
                    let until = Instant::now() + Duration::from_secs(secs);
                    while m["state"] != "drained" {
                        if Instant::now() >= until {
                            return Err(format!(
                                "{} {} is still {} after {secs} s ({} in flight)",
                                w[1],
                                w[2],
                                s(&m["state"]),
                                m["inflight"]
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(200));
                        m = c.get(&path)?;
                    }
                }
            }
            report_member(&m, json_out);
            Ok(())
        }
        "weight" => {
            need(4, "weight POOL MEMBER N|reset")?;
            let weight = if w[3] == "reset" {
                Value::Null
            } else {
                json!(w[3]
                    .parse::<u64>()
                    .map_err(|_| "the weight is a number from 1 to 1000, or reset")?)
            };
            let m = expect_ok(c.call(
                "PATCH",
                &member_path(w[1], w[2]),
                Some(&json!({ "weight": weight })),
            )?)?;
            report_member(&m, json_out);
            Ok(())
        }
        "health" => {
            need(4, "health POOL MEMBER auto|up|down")?;
            let m = expect_ok(c.call(
                "PATCH",
                &member_path(w[1], w[2]),
                Some(&json!({ "health": w[3] })),
            )?)?;
            report_member(&m, json_out);
            Ok(())
        }
        "vservers" => {
            let v = c.get("/api/v1/vservers")?;
            if json_out {
                print_json(&v);
            } else {
                let mut t = Table::new(&[
                    "VSERVER",
                    "LISTEN",
                    "+REQUESTS",
                    "+ACTIVE",
                    "+5XX",
                    "+P99(us)",
                ]);
                for vs in v.as_array().into_iter().flatten() {
                    let listen: Vec<&str> = vs["listen"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    t.row(&[
                        &vs["name"],
                        &json!(listen.join(",")),
                        &vs["counters"]["requests"],
                        &vs["counters"]["client_connections_active"],
                        &vs["counters"]["responses"]["5xx"],
                        &vs["latency_us"]["p99"],
                    ]);
                }
                print!("{t}");
            }
            Ok(())
        }
        "certs" => {
            let v = c.get("/api/v1/certificates")?;
            if json_out {
                print_json(&v);
            } else {
                let mut t = Table::new(&["VSERVER", "NAMES", "+DAYS LEFT", "NOT AFTER", "OCSP"]);
                for cert in v.as_array().into_iter().flatten() {
                    let names: Vec<&str> = cert["names"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let ocsp = if cert["ocsp"]["stapled"] == true {
                        cert["ocsp"]["cert_status"].as_str().unwrap_or("stapled")
                    } else {
                        "-"
                    };
                    t.row(&[
                        &cert["vserver"],
                        &json!(names.join(",")),
                        &cert["days_left"],
                        &cert["not_after"],
                        &json!(ocsp),
                    ]);
                }
                print!("{t}");
            }
            Ok(())
        }
        "stats" => {
            print_json(&c.get("/api/v1/stats")?);
            Ok(())
        }
        "audit" => {
            let v = c.get("/api/v1/audit")?;
            if json_out {
                print_json(&v);
            } else {
                for e in v.as_array().into_iter().flatten() {
                    println!(
                        "{} {} ({}) from {}: {}{}",
                        s(&e["time"]),
                        s(&e["who"]),
                        s(&e["role"]),
                        s(&e["from"]),
                        s(&e["change"]),
                        if e["ok"] == false { " (refused)" } else { "" }
                    );
                }
            }
            Ok(())
        }
        "config" => {
            let v = c.get("/api/v1/config")?;
            if json_out {
                print_json(&v);
            } else {
                print!("{}", s(&v["text"]));
            }
            Ok(())
        }
        "reload" => {
            let v = expect_ok(c.call("POST", "/api/v1/reload", None)?)?;
            if json_out {
                print_json(&v);
            } else {
                println!(
                    "reloaded: configuration generation {} is live",
                    v["generation"]
                );
            }
            Ok(())
        }
        "purge" => {
            let body = match (flag(args, "--prefix"), w.get(1)) {
                (Some(p), _) => json!({ "prefix": p }),
                (None, Some(u)) => json!({ "url": u }),
                (None, None) => {
                    return Err("usage: switchyard ctl purge URL | purge --prefix URL".into())
                }
            };
            let v = expect_ok(c.call("POST", "/api/v1/cache/purge", Some(&body))?)?;
            if json_out {
                print_json(&v);
            } else {
                println!("purged {} object(s)", v["purged"]);
            }
            Ok(())
        }
        "top" => top(c, args, json_out),
        "cluster" => cluster(c, args, &w, json_out),
        "node" => {
            let ready = match w.get(1).copied() {
                Some("drain") => false,
                Some("ready") => true,
                _ => return Err("usage: switchyard ctl node drain | node ready".into()),
            };
            let v = expect_ok(c.call("POST", "/api/v1/node", Some(&json!({ "ready": ready })))?)?;
            println!("ready: {}", v["ready"]);
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
}

/// A table whose columns are as wide as their widest cell, so every value
/// stands under its header whatever its length. A header written "+NAME"
/// is a column of numbers, aligned right.
struct Table {
    headers: Vec<(String, bool)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| match h.strip_prefix('+') {
                    Some(h) => (h.to_string(), true),
                    None => (h.to_string(), false),
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// One row: strings as they are, null as "-", numbers as JSON writes them.
    fn row(&mut self, cells: &[&Value]) {
        self.rows.push(
            cells
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => "-".to_string(),
                    other => other.to_string(),
                })
                .collect(),
        );
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let widths: Vec<usize> = self
            .headers
            .iter()
            .enumerate()
            .map(|(i, (h, _))| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .chain([h.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let headers: Vec<&str> = self.headers.iter().map(|(h, _)| h.as_str()).collect();
        for cells in std::iter::once(&headers)
            .map(|h| h.iter().map(|c| c.to_string()).collect::<Vec<_>>())
            .chain(self.rows.iter().cloned())
        {
            let mut line = String::new();
            for (i, ((_, right), w)) in self.headers.iter().zip(&widths).enumerate() {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                if *right {
                    line.push_str(&format!("{c:>w$}"));
                } else {
                    line.push_str(&format!("{c:<w$}"));
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

fn report_member(m: &Value, json_out: bool) {
    if json_out {
        println!("{}", serde_json::to_string_pretty(m).unwrap_or_default());
    } else {
        println!(
            "{} {}: {}{} (admin {}, weight {}, health {}, {} in flight)",
            s(&m["pool"]),
            s(&m["address"]),
            s(if m["status"].is_string() {
                &m["status"]
            } else {
                &m["state"]
            }),
            if m["failing"] == true {
                ", failing"
            } else {
                ""
            },
            s(&m["admin_state"]),
            m["weight"],
            s(&m["health"]["forced"]),
            m["inflight"]
        );
    }
}

/// A live view from the one-a-second samples: rates, latency, members.
fn top(c: &Client, args: &[String], json_out: bool) -> Result<(), String> {
    let interval: f64 = flag(args, "--interval")
        .map(|v| v.parse().map_err(|_| "--interval takes seconds"))
        .transpose()?
        .unwrap_or(1.0);
    let count: Option<u64> = flag(args, "--count")
        .map(|v| v.parse().map_err(|_| "--count takes a number"))
        .transpose()?;
    let mut n = 0u64;
    loop {
        let samples = c.get("/api/v1/live")?;
        let Some(last) = samples.as_array().and_then(|a| a.last()) else {
            return Err("no live sample yet; try again in a second".into());
        };
        if json_out {
            println!("{last}");
        } else {
            let mut o = String::from("\x1b[H\x1b[2J");
            let t = &last["totals"];
            o.push_str(&format!(
                "switchyard  generation {}   {} req/s   {} err/s   p50 {} ms   p99 {} ms   in {} B/s   out {} B/s\n\n",
                last["generation"], t["requests_per_s"], t["errors_per_s"], t["p50_ms"], t["p99_ms"],
                t["bytes_in_per_s"], t["bytes_out_per_s"]
            ));
            let mut t = Table::new(&[
                "VSERVER", "+REQ/S", "+ERR/S", "+P50 ms", "+P99 ms", "+ACTIVE",
            ]);
            for v in last["vservers"].as_array().into_iter().flatten() {
                t.row(&[
                    &v["name"],
                    &v["requests_per_s"],
                    &v["errors_per_s"],
                    &v["p50_ms"],
                    &v["p99_ms"],
                    &v["connections_active"],
                ]);
            }
            o.push_str(&format!("{t}\n"));
            let mut t = Table::new(&[
                "POOL",
                "MEMBER",
                "STATE",
                "FLAG",
                "+WEIGHT",
                "+INFLIGHT",
                "+REQ/S",
                "+CONNFAIL",
            ]);
            let failing = json!("failing");
            for p in last["pools"].as_array().into_iter().flatten() {
                for m in p["members"].as_array().into_iter().flatten() {
                    t.row(&[
                        &p["name"],
                        &m["address"],
                        if m["status"].is_string() {
                            &m["status"]
                        } else {
                            &m["state"]
                        },
                        if m["failing"] == true {
                            &failing
                        } else {
                            &Value::Null
                        },
                        &m["weight"],
                        &m["inflight"],
                        &m["requests_per_s"],
                        &m["connect_failures"],
                    ]);
                }
            }
            o.push_str(&t.to_string());
            print!("{o}");
            let _ = std::io::stdout().flush();
        }
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(interval.max(0.1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn words_skip_options_and_their_values() {
        let args = a(&[
            "--admin",
            "127.0.0.1:9",
            "drain",
            "web",
            "127.0.0.1:80",
            "--wait",
            "5",
            "--json",
        ]);
        assert_eq!(words(&args), vec!["drain", "web", "127.0.0.1:80"]);
    }

    #[test]
    fn member_paths_are_encoded() {
        assert_eq!(
            member_path("web pool", "[::1]:80"),
            "/api/v1/pools/web%20pool/members/%5B::1%5D:80"
        );
    }

    #[test]
    fn answers_parse() {
        let a = parse_answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!(a.status, 404);
        assert_eq!(a.body, "{}");
        assert!(expect_ok(a).is_err());
    }
}
