//! Network namespaces for tests that need more than loopback (a VIP, BGP
//! routers): made by the test, with the processes started in them, all
//! torn down on drop (processes killed by PID, namespaces deleted).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `ip ARGS`, true on success.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The namespaces and processes of one test.
pub struct Lab {
    tag: String,
    names: Vec<String>,
    pub children: Vec<Child>,
}

impl Lab {
    /// Namespaces `sy<pid>-<name>` for each name, loopback up.
    pub fn new(names: &[&str]) -> Lab {
        // Unique per lab: tests of one binary run at once.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut lab = Lab {
            tag: format!("{}{n}", std::process::id() % 100_000),
            names: Vec::new(),
            children: Vec::new(),
        };
        for n in names {
            let ns = lab.ns(n);
            assert!(ip(&["netns", "add", &ns]), "ip netns add {ns}");
            lab.names.push(ns.clone());
            assert!(ip(&["-n", &ns, "link", "set", "lo", "up"]));
        }
        lab
    }

    pub fn ns(&self, n: &str) -> String {
        format!("sy{}-{n}", self.tag)
    }

    /// `ip -n <ns> ARGS`.
    pub fn ip(&self, n: &str, args: &[&str]) -> bool {
        let ns = self.ns(n);
        let mut all = vec!["-n", ns.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs a command in namespace `n` and waits for it.
    pub fn run(&self, n: &str, args: &[&str]) -> (bool, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns(n)])
            .args(args)
            .output()
            .expect("ip netns exec");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// Starts a process in namespace `n` (`ip netns exec` execs it: the
    /// child's PID is the program's); its output goes to `log`.
    pub fn spawn(&mut self, n: &str, args: &[&str], log: &Path) -> usize {
        let f = std::fs::File::create(log).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(n)])
            .args(args)
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("spawn in namespace");
        self.children.push(child);
        self.children.len() - 1
    }

    /// Sends `sig` to child `i` and reaps it.
    pub fn kill(&mut self, i: usize, sig: &str) {
        let pid = self.children[i].id();
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status();
        let _ = self.children[i].wait();
    }

    /// A veth pair: `a_if` in `a`, `b_if` in `b`, both up.
    pub fn veth(&self, a: &str, a_if: &str, b: &str, b_if: &str) {
        let bns = self.ns(b);
        assert!(self.ip(
            a,
            &["link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", &bns]
        ));
        assert!(self.ip(a, &["link", "set", a_if, "up"]));
        assert!(self.ip(b, &["link", "set", b_if, "up"]));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `f` on a thread inside network namespace `ns`.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = PathBuf::from("/run/netns").join(ns);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("netns file");
        use std::os::fd::AsRawFd;
        // SAFETY: setns on this thread only, with a valid namespace fd.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {}", path.display());
        f()
    })
}

/// One GET to `vip:80` on a fresh connection (a new flow): the body (the
/// node's name in the VIP and ECMP tests), or None.
pub fn vip_get(vip: &str) -> Option<String> {
    use std::io::{Read, Write};
    let a: std::net::SocketAddr = format!("{vip}:80").parse().ok()?;
    let mut s =
        std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_millis(300)).ok()?;
    let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(500)));
    s.write_all(b"GET / HTTP/1.1\r\nHost: vip\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    if !out.starts_with("HTTP/1.1 200") {
        return None;
    }
    out.split("\r\n\r\n").nth(1).map(|b| b.trim().to_string())
}

/// `vip_get`, tried every 20 ms for up to 5 s: what a client that
/// retries sees, or None when every try failed.
pub fn vip_get_retrying(vip: &str) -> Option<String> {
    let t = std::time::Instant::now();
    loop {
        let got = vip_get(vip);
        if got.is_some() || t.elapsed() >= std::time::Duration::from_secs(5) {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Drains the node of namespace `ns` (`POST /api/v1/node {"ready":
/// false}` on its admin listener, 127.0.0.1:9090 there).
pub fn drain_node(ns: &str) -> bool {
    set_ready(ns, false)
}

/// Sets the readiness of the node of namespace `ns`.
pub fn set_ready(ns: &str, ready: bool) -> bool {
    in_netns(ns, move || {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect("127.0.0.1:9090") else {
            return false;
        };
        let body = format!("{{\"ready\": {ready}}}");
        let _ = s.write_all(
            format!("POST /api/v1/node HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
        );
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.starts_with("HTTP/1.1 200")
    })
    .join()
    .unwrap_or(false)
}
