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

/// `prog` pinned to `cpu` by taskset, or as it is without a CPU or taskset.
pub fn taskset(cpu: Option<usize>, prog: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    match cpu {
        Some(c) if which("taskset").is_some() => {
            let mut cmd = std::process::Command::new("taskset");
            cmd.arg("-c").arg(c.to_string()).arg(prog);
            cmd
        }
        _ => std::process::Command::new(prog),
    }
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
    /// The tree's CPU time; `cpu.since(earlier)` is the CPU between two samples.
    pub cpu: CpuReading,
    pub rss_bytes: u64,
    pub processes: usize,
}

/// A process tree's CPU time read two ways. `/proc/PID/stat` counts in
/// clock ticks (10 ms here) and keeps the time of exited threads and
/// children; the scheduler's `/proc/PID/task/TID/schedstat` counts in
/// nanoseconds, for live threads only. At 100 requests/s over a 2 s phase a
/// tick is 50 µs per request, more than a fast proxy's whole cost (the
/// "idle 100 req/s" rows read 200 to 350 µs where the scheduler's clock
/// read 113 to 118, BENCHMARKS.md), so the nanoseconds are used whenever
/// the same threads lived through both samples, and the ticks otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuReading {
    /// utime + stime + cutime + cstime of every process, in seconds.
    pub tick_secs: f64,
    /// The live threads' run time, in seconds (nanosecond resolution).
    pub sched_secs: f64,
    /// Which threads `sched_secs` summed (a hash of their ids): another
    /// set means a thread came or went, and its time is only in the ticks.
    pub threads: u64,
}

impl CpuReading {
    /// CPU seconds from `earlier` to `self`, never negative.
    pub fn since(&self, earlier: &CpuReading) -> f64 {
        let d = if self.threads == earlier.threads && self.threads != 0 {
            self.sched_secs - earlier.sched_secs
        } else {
            self.tick_secs - earlier.tick_secs
        };
        d.max(0.0)
    }
}

/// The run time and ids of a process's live threads, or None when the
/// kernel has no schedstat (CONFIG_SCHED_INFO off).
fn thread_run_times(pid: u32, ids: &mut Vec<u32>) -> Option<f64> {
    let mut secs = 0.0;
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // A thread that exited since the listing changes the id set below.
        let Ok(line) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")) else {
            continue;
        };
        let ns: u64 = line.split_whitespace().next()?.parse().ok()?;
        secs += ns as f64 / 1e9;
        ids.push(tid);
    }
    Some(secs)
}

pub fn sample_tree(pid: u32) -> TreeSample {
    let mut s = TreeSample::default();
    let mut ids = Vec::new();
    let mut sched_ok = true;
    for p in process_tree(pid) {
        if let Some(st) = read_stat(p) {
            s.cpu.tick_secs += st.cpu;
            s.processes += 1;
            match thread_run_times(p, &mut ids) {
                Some(secs) => s.cpu.sched_secs += secs,
                None => sched_ok = false,
            }
        }
        s.rss_bytes += rss(p);
    }
    if sched_ok && !ids.is_empty() {
        ids.sort_unstable();
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&ids, &mut h);
        // Never 0, which says "no schedstat".
        s.cpu.threads = std::hash::Hasher::finish(&h) | 1;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < d {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
    }

    #[test]
    fn a_tree_sample_counts_cpu_finer_than_a_tick() {
        let pid = std::process::id();
        // Other test threads may come and go between two samples; try
        // until one pair saw the same threads.
        for _ in 0..50 {
            let a = sample_tree(pid);
            assert!(a.cpu.threads != 0, "no schedstat for this process: {a:?}");
            // 3 ms of work is under one 10 ms tick: only the scheduler's clock sees it.
            spin(Duration::from_millis(3));
            let b = sample_tree(pid);
            if a.cpu.threads == b.cpu.threads {
                let d = b.cpu.since(&a.cpu);
                assert!((0.0025..0.2).contains(&d), "3 ms of work read as {d} s");
                return;
            }
        }
        panic!("the thread set changed in each of 50 tries");
    }

    #[test]
    fn another_thread_set_falls_back_to_the_ticks() {
        let a = CpuReading {
            tick_secs: 1.0,
            sched_secs: 5.0,
            threads: 7,
        };
        let same = CpuReading {
            tick_secs: 1.01,
            sched_secs: 5.004,
            threads: 7,
        };
        let other = CpuReading { threads: 8, ..same };
        assert!((same.since(&a) - 0.004).abs() < 1e-9);
        assert!((other.since(&a) - 0.01).abs() < 1e-9);
        assert_eq!(a.since(&same), 0.0, "never negative");
    }
}
