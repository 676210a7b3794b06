//! A client and a Switchyard network namespace joined by a veth pair,
//! the real binary run in the Switchyard one with XDP on its veth end,
//! and what tests of the shield in XDP (tests/xdp.rs, tests/ddos.rs)
//! ask of it. The namespaces go in Drop, panics included.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{bin, eventually, temp_dir, Origin};

pub const SY: &str = "10.77.0.1";
pub const ALLOWED: &str = "10.77.0.2";
pub const DROPPED: &str = "10.77.0.3";
pub const REJECTED: &str = "10.77.0.4";
/// The SYN flood's source (allowed by the rules).
pub const FLOODER: &str = "10.77.0.5";
pub const SY6: &str = "fd77::1";
pub const ALLOWED6: &str = "fd77::2";
pub const DROPPED6: &str = "fd77::3";
pub const PORT: u16 = 8080;
pub const ADMIN: &str = "127.0.0.1:9000";

pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A Switchyard namespace and a client namespace joined by a veth pair;
/// deleted (with the pair) on drop.
pub struct Net {
    pub sy: String,
    pub client: String,
    /// The veth end in the Switchyard namespace.
    pub dev: String,
    /// The veth end in the client namespace.
    pub peer: String,
}

impl Net {
    /// None (after saying why) where the test cannot run here.
    pub fn new() -> Option<Net> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: the XDP tests run as root (namespaces, veth, BPF)");
            return None;
        }
        static N: AtomicUsize = AtomicUsize::new(0);
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let net = Net {
            sy: format!("syxdp-{id}-s"),
            client: format!("syxdp-{id}-c"),
            dev: format!("xs{id}"),
            peer: format!("xc{id}"),
        };
        let peer = net.peer.clone();
        if let Err(e) = ip(&["netns", "add", &net.sy]) {
            eprintln!("skipped: cannot make a network namespace ({e})");
            return None;
        }
        let setup = || -> Result<(), String> {
            ip(&["netns", "add", &net.client])?;
            ip(&[
                "link",
                "add",
                &net.dev,
                "netns",
                &net.sy,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
                "netns",
                &net.client,
            ])?;
            ip(&[
                "-n",
                &net.sy,
                "addr",
                "add",
                &format!("{SY}/24"),
                "dev",
                &net.dev,
            ])?;
            for a in [ALLOWED, DROPPED, REJECTED, FLOODER] {
                ip(&[
                    "-n",
                    &net.client,
                    "addr",
                    "add",
                    &format!("{a}/24"),
                    "dev",
                    &peer,
                ])?;
            }
            // nodad: usable at once, without duplicate address detection.
            let v6 = format!("{SY6}/64");
            ip(&["-n", &net.sy, "addr", "add", &v6, "dev", &net.dev, "nodad"])?;
            for a in [ALLOWED6, DROPPED6] {
                let a = format!("{a}/64");
                ip(&["-n", &net.client, "addr", "add", &a, "dev", &peer, "nodad"])?;
            }
            for (ns, dev) in [(&net.sy, &net.dev), (&net.client, &peer)] {
                ip(&["-n", ns, "link", "set", dev, "up"])?;
                ip(&["-n", ns, "link", "set", "lo", "up"])?;
            }
            Ok(())
        };
        setup().expect("namespaces and veth pair");
        Some(net)
    }

    /// Runs `f` on a thread inside namespace `ns`; sockets made there stay
    /// there.
    pub fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("namespace file");
            // SAFETY: a namespace file descriptor; this thread alone moves.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("thread in namespace")
    }
}

impl Net {
    /// The MAC address of `dev` in namespace `ns`.
    pub fn mac(ns: &str, dev: &str) -> [u8; 6] {
        let out = Command::new("ip")
            .args(["-n", ns, "-j", "link", "show", "dev", dev])
            .output()
            .expect("ip link show");
        let v: Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
        let text = v[0]["address"].as_str().expect("a MAC address");
        let mut mac = [0u8; 6];
        for (m, part) in mac.iter_mut().zip(text.split(':')) {
            *m = u8::from_str_radix(part, 16).expect("hex");
        }
        mac
    }

    /// `ip link show` of the Switchyard end: says "prog/xdp" while a
    /// program is attached.
    pub fn link_shows_xdp(&self) -> bool {
        Command::new("ip")
            .args(["-n", &self.sy, "link", "show", "dev", &self.dev])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
            .unwrap_or(false)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.client]);
        let _ = ip(&["netns", "del", &self.sy]);
    }
}

pub struct Sy {
    pub child: Child,
    pub dir: std::path::PathBuf,
    pub config: std::path::PathBuf,
    pub ns: String,
}

impl Sy {
    pub fn start(net: &Net, config: &str) -> Sy {
        Sy::start_with(net, config, &[])
    }

    /// Started through `wrapper` (a command and its arguments before the
    /// binary), e.g. setpriv.
    pub fn start_with(net: &Net, config: &str, wrapper: &[&str]) -> Sy {
        let dir = temp_dir("xdp");
        let path = dir.join("switchyard.toml");
        std::fs::write(&path, format!("[admin]\nlisten = \"{ADMIN}\"\n{config}")).expect("config");
        let log = std::fs::File::create(dir.join("stderr.log")).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &net.sy])
            .args(wrapper)
            .args([bin(), "run", "-c"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start switchyard");
        let sy = Sy {
            child,
            dir,
            config: path,
            ns: net.sy.clone(),
        };
        let start = Instant::now();
        while sy.api_get("/api/v1/shield").is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "switchyard did not start:\n{}",
                sy.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sy
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    pub fn api(&self, method: &str, path: &str, body: &str) -> Option<(u16, Value)> {
        let raw = format!(
            "{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        Net::within(&self.ns, move || {
            let mut s =
                TcpStream::connect_timeout(&ADMIN.parse().ok()?, Duration::from_secs(1)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            s.write_all(raw.as_bytes()).ok()?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).ok()?;
            let text = String::from_utf8_lossy(&buf).into_owned();
            let status = text.split(' ').nth(1)?.parse().ok()?;
            let body = text.split_once("\r\n\r\n")?.1;
            Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
        })
    }

    pub fn api_get(&self, path: &str) -> Option<Value> {
        self.api("GET", path, "").map(|(_, v)| v)
    }

    pub fn shield(&self) -> Value {
        // A busy two-core machine can miss one answer: try again.
        for _ in 0..5 {
            if let Some(v) = self.api_get("/api/v1/shield") {
                return v["global"].clone();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("GET /api/v1/shield failed 5 times:\n{}", self.log())
    }

    /// Rewrites the config and sends SIGHUP; waits for the generation.
    pub fn reload(&self, config: &str, generation: u64) {
        std::fs::write(
            &self.config,
            format!("[admin]\nlisten = \"{ADMIN}\"\n{config}"),
        )
        .expect("config");
        let _ = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status();
        let want = format!("configuration generation {generation} is live");
        assert!(
            eventually(Duration::from_secs(10), || self.log().contains(&want)),
            "no reload to generation {generation}:\n{}",
            self.log()
        );
    }
}

impl Drop for Sy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET from `source` in the client namespace to Switchyard's vserver:
/// Ok(status), or how it failed.
pub fn get_from(
    client_ns: &str,
    source: &'static str,
    timeout: Duration,
) -> Result<u16, ErrorKind> {
    Net::within(client_ns, move || {
        // A port still held here (after wrapping round) is skipped.
        for _ in 0..100 {
            let port = fresh_port();
            let (from, to) = if source.contains(':') {
                (format!("[{source}]:{port}"), format!("[{SY6}]:{PORT}"))
            } else {
                (format!("{source}:{port}"), format!("{SY}:{PORT}"))
            };
            let from: SocketAddr = from.parse().map_err(|_| ErrorKind::InvalidInput)?;
            let to: SocketAddr = to.parse().map_err(|_| ErrorKind::InvalidInput)?;
            match super::get_from_source(from, to, timeout) {
                Err(ErrorKind::AddrInUse) => continue,
                done => return done,
            }
        }
        Err(ErrorKind::AddrInUse)
    })
}

/// A client port used once per test process, below the kernel's ephemeral
/// range (32768-60999). Switchyard closes first on `Connection: close`, so
/// its side keeps TIME_WAIT for each tuple; a kernel-chosen port may meet
/// one again, and then the kernel (not XDP's cookies) answers the SYN, as
/// designed, and counters that tests expect to move stay still.
fn fresh_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (20_000 + n % 12_000) as u16
}

pub fn origin_in(net: &Net) -> Origin {
    Net::within(&net.sy, || Origin::start_on("o", "127.0.0.1:0"))
}

pub fn config(origin: SocketAddr, rules: &str, xdp: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[[vserver]]\nname = \"web\"\nlisten = [\"{SY}:{PORT}\", \"[{SY6}]:{PORT}\"]\ndefault_pool = \"p\"\n\
         [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"{origin}\"\n{rules}\n{xdp}\n"
    )
}

pub fn xdp(dev: &str, extra: &str) -> String {
    format!("[shield.xdp]\ninterfaces = [\"{dev}\"]\n{extra}\n")
}

/// Whether the running Switchyard attached XDP; if it was built without
/// it, says so (the test then skips).
pub fn attached(sy: &Sy, dev: &str) -> bool {
    let ok = eventually(Duration::from_secs(5), || {
        let x = &sy.shield()["xdp"];
        x["built_with_xdp"] == false
            || x["attached"]
                .as_array()
                .is_some_and(|a| a.iter().any(|i| i["interface"] == dev))
    });
    let x = sy.shield()["xdp"].clone();
    if x["built_with_xdp"] == false {
        eprintln!("skipped: this Switchyard was built without XDP (no clang)");
        return false;
    }
    assert!(ok, "XDP not attached to {dev}: {x}\n{}", sy.log());
    true
}
