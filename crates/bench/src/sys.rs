//! Operating-system helpers: file-descriptor limit, CPU affinity, CPU time
//! of this process and of a device under test (from /proc).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new limit.
/// High connection counts need it, and children (the DUT) inherit it.
pub fn raise_nofile() -> u64 {
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return r.rlim_max;
            }
        }
        r.rlim_cur
    }
}

/// Pins the calling thread to one CPU (sched_setaffinity on tid 0).
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET indexes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut ru) != 0 {
            return Duration::ZERO;
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}

/// CPU time (user + system) of the calling thread.
pub fn thread_cpu() -> Duration {
    rusage(libc::RUSAGE_THREAD)
}

/// CPU time (user + system) of this whole process.
pub fn process_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

struct ProcStat {
    ppid: u32,
    /// utime + stime + cutime + cstime, in seconds.
    cpu: f64,
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: split after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after ')' start at field 3 (state): ppid is 4, utime 14 .. cstime 17.
    let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    let ticks = num(14)? + num(15)? + num(16)? + num(17)?;
    Some(ProcStat {
        ppid: num(4)? as u32,
        cpu: ticks / ticks_per_sec(),
    })
}

/// `pid` and all its descendants (nginx master + workers, and so on).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(st) = read_stat(p) {
                    children.entry(st.ppid).or_default().push(p);
                }
            }
        }
    }
    let mut out = vec![pid];
    let mut seen = HashSet::new();
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        if seen.insert(p) {
            if let Some(c) = children.get(&p) {
                out.extend(c.iter().copied());
            }
        }
        i += 1;
    }
    out
}

/// CPU seconds and RSS bytes of a process tree, read at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct TreeSample {
    pub cpu_secs: f64,
    pub rss_bytes: u64,
    pub processes: usize,
}

pub fn sample_tree(pid: u32) -> TreeSample {
    let mut s = TreeSample::default();
    for p in process_tree(pid) {
        if let Some(st) = read_stat(p) {
            s.cpu_secs += st.cpu;
            s.processes += 1;
        }
        s.rss_bytes += rss(p);
    }
    s
}

fn rss(pid: u32) -> u64 {
    let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    for line in st.lines() {
        if let Some(v) = line.strip_prefix("VmRSS:") {
            let kb: u64 = v
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            return kb * 1024;
        }
    }
    0
}

/// Looks for an executable in PATH and the sbin directories (Debian puts
/// haproxy and nginx in /usr/sbin, which is not always in a user's PATH).
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}
