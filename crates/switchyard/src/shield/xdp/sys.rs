//! The few bpf(2) commands the shield needs, through libc.
//!
//! Why not a crate: loading one clang-built object needs map creation, one
//! relocation type, a program load and an XDP link; about 150 lines here
//! against aya's object-file, BTF and async layers (a dozen crates). A
//! BPF link (`BPF_LINK_CREATE`, Linux 5.9) detaches when its last file
//! descriptor closes, so the program goes away with the process even when
//! it is killed: detach on exit needs no cleanup path.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_LINK_CREATE: libc::c_long = 28;
pub const BPF_PROG_TYPE_XDP: u32 = 6;
pub const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
pub const BPF_XDP: u32 = 37;
/// tcx ingress (Linux 6.6): a tc program attached by a link.
pub const BPF_TCX_INGRESS: u32 = 46;

pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `union bpf_attr`, as bytes: each command fills its own fields; the
/// rest must be zero.
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 144])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn bytes(&mut self, at: usize, v: &[u8]) -> &mut Self {
        self.0[at..at + v.len()].copy_from_slice(v);
        self
    }
    fn call(&mut self, cmd: libc::c_long) -> io::Result<i64> {
        // SAFETY: the attribute buffer outlives the call, and every
        // pointer stored in it points at memory the caller keeps alive
        // and sized as the command expects.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self.0.as_mut_ptr(),
                self.0.len() as libc::c_uint,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }
    fn fd(&mut self, cmd: libc::c_long) -> io::Result<OwnedFd> {
        let fd = self.call(cmd)?;
        // SAFETY: the kernel returned a new file descriptor we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }
}

fn name16(name: &str) -> [u8; 16] {
    // The kernel accepts [A-Za-z0-9_.] up to 15 bytes.
    let mut out = [0u8; 16];
    for (o, b) in out
        .iter_mut()
        .zip(
            name.bytes()
                .filter(|b| b.is_ascii_alphanumeric() || *b == b'_'),
        )
        .take(15)
    {
        *o = b;
    }
    out
}

pub fn map_create(
    name: &str,
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, kind)
        .u32(4, key)
        .u32(8, value)
        .u32(12, entries)
        .u32(16, flags)
        .bytes(28, &name16(name))
        .fd(BPF_MAP_CREATE)
}

pub fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64)
        .call(BPF_MAP_UPDATE_ELEM)
        .map(|_| ())
}

pub fn map_delete(map: &OwnedFd, key: &[u8]) -> io::Result<()> {
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .call(BPF_MAP_DELETE_ELEM)
        .map(|_| ())
}

/// Reads the value at `key` into `value`, which must be the map's value
/// size (times the possible CPUs for a per-CPU map).
pub fn map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<()> {
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_mut_ptr() as u64)
        .call(BPF_MAP_LOOKUP_ELEM)
        .map(|_| ())
}

/// Loads a program of type `kind` for `attach`; on a verifier refusal the
/// error carries the end of the verifier's log.
pub fn prog_load(
    kind: u32,
    attach: u32,
    name: &str,
    insns: &[u8],
    license: &str,
) -> io::Result<OwnedFd> {
    match prog_load_logged(kind, attach, name, insns, license, None) {
        Ok(fd) => Ok(fd),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EINVAL | libc::E2BIG | libc::ENOSPC)
            ) =>
        {
            // Again with the verifier's log, to say why.
            let mut log = vec![0u8; 1 << 20];
            let again = prog_load_logged(kind, attach, name, insns, license, Some((&mut log, 1)));
            let text = log_text(&log);
            let tail: String = text
                .lines()
                .rev()
                .take(12)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            match again {
                Ok(fd) => Ok(fd),
                Err(_) => Err(io::Error::new(e.kind(), format!("{e}; verifier:\n{tail}"))),
            }
        }
        Err(e) => Err(e),
    }
}

fn log_text(log: &[u8]) -> String {
    String::from_utf8_lossy(&log[..log.iter().position(|b| *b == 0).unwrap_or(0)]).into_owned()
}

/// What the verifier says of a program it accepts (BPF_LOG_STATS): the
/// "processed N insns" line, to watch the headroom under its limit.
pub fn verifier_stats(
    kind: u32,
    attach: u32,
    name: &str,
    insns: &[u8],
    license: &str,
) -> io::Result<String> {
    let mut log = vec![0u8; 1 << 16];
    prog_load_logged(kind, attach, name, insns, license, Some((&mut log, 4)))?;
    Ok(log_text(&log))
}

/// BPF_PROG_LOAD, with the verifier's log at `level` into the buffer.
fn prog_load_logged(
    kind: u32,
    attach: u32,
    name: &str,
    insns: &[u8],
    license: &str,
    log: Option<(&mut Vec<u8>, u32)>,
) -> io::Result<OwnedFd> {
    let license = CString::new(license).map_err(|_| io::Error::other("bad license string"))?;
    let mut a = Attr::new();
    a.u32(0, kind)
        .u32(4, (insns.len() / 8) as u32)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .bytes(48, &name16(name))
        .u32(68, attach);
    if let Some((log, level)) = log {
        a.u32(24, level)
            .u32(28, log.len() as u32)
            .u64(32, log.as_mut_ptr() as u64);
    }
    a.fd(BPF_PROG_LOAD)
}

/// Attaches `prog` to interface `ifindex` at `attach` (BPF_XDP with XDP
/// `flags` for driver or generic mode, or BPF_TCX_INGRESS); the program
/// stays attached while the returned link is open.
pub fn link(prog: &OwnedFd, ifindex: u32, attach: u32, flags: u32) -> io::Result<OwnedFd> {
    Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, attach)
        .u32(12, flags)
        .fd(BPF_LINK_CREATE)
}

/// Random bytes from the kernel (the SYN cookie key).
pub fn random(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: writes at most the rest of `buf`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        done += n as usize;
    }
    Ok(())
}

pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::other("interface name has a NUL"))?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// The number of possible CPUs: a per-CPU map's value has one slot each.
pub fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: usize = a
            .parse()
            .map_err(|_| io::Error::other(format!("bad cpu list {s:?}")))?;
        let b: usize = b
            .parse()
            .map_err(|_| io::Error::other(format!("bad cpu list {s:?}")))?;
        n += b.saturating_sub(a) + 1;
    }
    Ok(n.max(1))
}

/// Writes `count` entries at once (arrays; Linux 5.6): `keys` and `values`
/// hold them back to back.
pub fn map_update_batch(map: &OwnedFd, keys: &[u8], values: &[u8], count: u32) -> io::Result<()> {
    let mut done = Attr::new();
    done.u64(16, keys.as_ptr() as u64)
        .u64(24, values.as_ptr() as u64)
        .u32(32, count)
        .u32(36, map.as_raw_fd() as u32)
        .call(BPF_MAP_UPDATE_BATCH)
        .map(|_| ())
}

/// Runs `prog` on `packet` `repeat` times in the kernel
/// (BPF_PROG_TEST_RUN): the verdict, the packet as the program left it,
/// and the mean time per run in nanoseconds.
pub fn test_run(prog: &OwnedFd, packet: &[u8], repeat: u32) -> io::Result<(u32, Vec<u8>, u32)> {
    let mut out = vec![0u8; packet.len() + 256];
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32)
        .u32(8, packet.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, packet.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, repeat);
    a.call(BPF_PROG_TEST_RUN)?;
    let word = |at: usize| u32::from_ne_bytes([a.0[at], a.0[at + 1], a.0[at + 2], a.0[at + 3]]);
    out.truncate(word(12) as usize);
    Ok((word(4), out, word(36)))
}

/// The driver of interface `name` (SIOCETHTOOL, ETHTOOL_GDRVINFO): "veth"
/// for a veth.
pub fn driver(name: &str) -> io::Result<String> {
    // struct ethtool_drvinfo: cmd, then driver[32], the rest unread.
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&3u32.to_ne_bytes());
    // struct ifreq: the name (16 bytes), then a pointer to the request.
    let mut ifr = [0u8; 40];
    if name.len() >= 16 {
        return Err(io::Error::other("interface name too long"));
    }
    ifr[..name.len()].copy_from_slice(name.as_bytes());
    ifr[16..24].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: a socket we close below; ifreq and drvinfo outlive the call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel writes at most sizeof(ethtool_drvinfo) = 196.
    let r = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, ifr.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(err);
    }
    let d = &info[4..36];
    let end = d.iter().position(|b| *b == 0).unwrap_or(d.len());
    Ok(String::from_utf8_lossy(&d[..end]).into_owned())
}
