//! The process's file descriptor table, sized once before any thread starts.
//!
//! Linux grows a process's descriptor table by doubling it (64, 256, 512,
//! 1024, ... entries) when a descriptor past its end is opened. In a
//! process with several threads, each growth waits for an RCU grace period
//! (`expand_fdtable` calls `synchronize_rcu` while the table is shared), and
//! the thread that opened the descriptor stalls for it: 9.8 ms measured here
//! on a worker's `accept4` as its 256th descriptor opened, with every
//! connection of that worker waiting behind it, and again at 512, 1024 and
//! so on. Single-threaded proxies (HAProxy with one thread, nginx's
//! workers) grow theirs for free. Opening one descriptor at the top of the
//! allowed range while the process still has one thread makes the table
//! full-size at once, for the kernel memory of one pointer and two bits per
//! descriptor (about 160 KB for 20,000).

use std::os::fd::AsRawFd;

/// Descriptors reserved at most (8 MB of kernel memory at this size); a
/// larger limit grows past it as before.
const MOST: u64 = 1 << 20;

/// Grows the table to the soft `RLIMIT_NOFILE` (at most `MOST`). Must run
/// before the process starts a second thread; returns the table's size
/// reached, or why it could not (then the kernel grows it as it goes).
pub fn reserve() -> Result<u64, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    let want = lim.rlim_cur.min(MOST);
    if want <= 256 {
        return Ok(want);
    }
    let any = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    let top = libc::c_int::try_from(want - 1).map_err(|_| "limit out of range".to_string())?;
    // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor we own onto the
    // lowest free number at or above `top`; the copy is closed just below.
    let dup = unsafe { libc::fcntl(any.as_raw_fd(), libc::F_DUPFD_CLOEXEC, top) };
    if dup < 0 {
        return Err(format!(
            "descriptor {top}: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `dup` is ours and nothing else refers to it.
    unsafe { libc::close(dup) };
    Ok(want)
}

/// The table's size as the kernel reports it (`FDSize` in
/// /proc/self/status).
#[cfg(test)]
fn size() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_covers_the_soft_limit() {
        let want = reserve().expect("reserve");
        let size = size().expect("FDSize");
        assert!(size >= want, "FDSize {size} below the limit {want}");
    }
}
