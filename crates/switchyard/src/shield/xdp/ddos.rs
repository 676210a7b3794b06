//! The DDoS vectors' user-space half: writes `[shield.ddos]` into the
//! program's maps, and once a second reads the vectors' counters (and the
//! kernel's half-open connections), ticks the detector (shield/ddos.rs)
//! and writes back the limits that changed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::{map, state, sys, Loaded, State};
use crate::log;
use crate::shield::ddos::{self, Action, Detector, Enforce, Reading, Spec, VECTORS};

/// The detector and what the maps hold now, kept across reloads (and
/// across a reload of the program: the detector sees its counters start
/// again).
pub(super) struct Run {
    detector: Detector,
    last: Instant,
    written: Vec<Option<Enforce>>,
}

fn action_code(a: Action) -> u32 {
    match a {
        Action::Off => 0,
        Action::Count => 1,
        Action::Drop => 2,
        // Counted in XDP; the cookies follow `cookies_now`.
        Action::Cookies => 1,
    }
}

/// Ports the kernel hands out for our own connections: datagrams to
/// them are replies, not new flows of a sweep.
fn ephemeral_ports() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

fn write_vector(l: &Loaded, i: usize, e: Enforce) -> Result<(), String> {
    let mut v = action_code(e.action).to_ne_bytes().to_vec();
    v.extend_from_slice(&0u32.to_ne_bytes());
    v.extend_from_slice(&e.limit.to_ne_bytes());
    sys::map_update(map(l, "ddos_vec")?, &(i as u32).to_ne_bytes(), &v)
        .map_err(|err| format!("cannot write DDoS vector {}: {err}", VECTORS[i].name))
}

/// Writes `spec` (or "off") into the maps: at start and after reloads.
pub(super) fn configure(st: &mut State) -> Result<(), String> {
    let spec = st.spec.as_ref().and_then(|s| s.ddos.clone());
    let Some(l) = st.loaded.as_ref() else {
        return Ok(());
    };
    let Some(spec) = spec else {
        st.ddos = None;
        return sys::map_update(map(l, "ddos_cfg")?, &0u32.to_ne_bytes(), &[0u8; 52])
            .map_err(|e| format!("cannot turn the DDoS vectors off: {e}"));
    };
    if st.ddos.is_none() {
        let (seen, dropped) = read_counters(l);
        let mut detector = Detector::default();
        detector.prime(&seen, &dropped);
        st.ddos = Some(Run {
            detector,
            last: Instant::now(),
            written: vec![None; VECTORS.len()],
        });
    }
    let Some(run) = st.ddos.as_mut() else {
        return Ok(());
    };
    for (i, w) in run.written.iter_mut().enumerate() {
        let e = run.detector.enforce(&spec, i);
        write_vector(l, i, e)?;
        *w = Some(e);
    }
    let now = run.detector.wants_cookies(&spec);
    write_cfg(l, &spec, now)
}

/// Whether the tc program completes cookies on every interface XDP is
/// attached to: only then may a SYN flood switch XDP's cookies on.
fn cookies_armed(l: &Loaded, spec: &Spec) -> bool {
    spec.uses_cookies() && l.tc_everywhere()
}

/// `ddos_cfg`: the tunables, and whether XDP answers SYNs with cookies
/// now (`now`, while a SYN vector with action "cookies" is detected).
fn write_cfg(l: &Loaded, spec: &Spec, now: bool) -> Result<(), String> {
    let armed = cookies_armed(l, spec);
    let (lo, hi) = ephemeral_ports();
    let cfg = super::u32s(&[
        1,
        u32::from(spec.ttl_at_most),
        u32::from(spec.hop_limit_at_most),
        spec.ext_max_bytes,
        spec.ext_max_headers,
        spec.syn_max_bytes,
        u32::from(spec.window_at_most),
        spec.sweep_max,
        spec.sweep_block.as_secs().min(u64::from(u32::MAX)) as u32,
        lo,
        hi,
        u32::from(armed),
        u32::from(armed && now),
    ]);
    sys::map_update(map(l, "ddos_cfg")?, &0u32.to_ne_bytes(), &cfg)
        .map_err(|e| format!("cannot write [shield.ddos]: {e}"))
}

/// Per vector: packets seen and dropped since the program loaded.
fn read_counters(l: &Loaded) -> (Vec<u64>, Vec<u64>) {
    (0..VECTORS.len() as u32)
        .map(|i| {
            (
                l.percpu_sum("ddos_cnt", 2 * i).unwrap_or(0),
                l.percpu_sum("ddos_cnt", 2 * i + 1).unwrap_or(0),
            )
        })
        .unzip()
}

/// One second of the detector: the kernel's half-open connections asked
/// without the state's lock (the admin API and reloads wait for nothing
/// but the counters), then the tick under it.
pub(super) fn second() {
    let half_open_on = state()
        .spec
        .as_ref()
        .and_then(|s| s.ddos.as_ref())
        .is_some_and(|d| d.vectors[ddos::HALF_OPEN].action != Action::Off);
    let half_open = if half_open_on {
        half_open_connections().unwrap_or(0)
    } else {
        0
    };
    tick(&mut state(), half_open);
}

/// Counters in, detector ticked, changed limits out.
fn tick(st: &mut State, half_open: u64) {
    let Some(spec) = st.spec.as_ref().and_then(|s| s.ddos.clone()) else {
        return;
    };
    let (Some(l), Some(run)) = (st.loaded.as_ref(), st.ddos.as_mut()) else {
        return;
    };
    let n = VECTORS.len();
    let (seen, dropped) = read_counters(l);
    let now = Instant::now();
    let elapsed = now - run.last;
    run.last = now;
    let before: Vec<bool> = (0..n).map(|i| run.detector.detected(i)).collect();
    let cookies_before = run.detector.wants_cookies(&spec);
    run.detector.tick(
        &spec,
        &Reading {
            seen: &seen,
            dropped: &dropped,
            half_open,
            elapsed,
            now: SystemTime::now(),
        },
    );
    let cookies_now = run.detector.wants_cookies(&spec);
    if cookies_now != cookies_before {
        match write_cfg(l, &spec, cookies_now) {
            Ok(()) if !cookies_armed(l, &spec) => {}
            Ok(()) if cookies_now => log::warn(format_args!(
                "shield: a SYN flood is detected: XDP answers SYNs with cookies"
            )),
            Ok(()) => log::info(format_args!(
                "shield: the SYN flood ended: SYNs go to the kernel again"
            )),
            Err(e) => log::error(format_args!("shield: {e}")),
        }
    }
    for (i, was) in before.into_iter().enumerate() {
        let name = VECTORS[i].name;
        match (was, run.detector.detected(i)) {
            (false, true) => log::warn(format_args!(
                "shield: DDoS vector {name} detected: {} (rate {}, threshold {})",
                VECTORS[i].what,
                run.detector.rate(i),
                run.detector.threshold(&spec, i)
            )),
            (true, false) => log::info(format_args!("shield: DDoS vector {name} ended")),
            _ => {}
        }
        let e = run.detector.enforce(&spec, i);
        if run.written[i] != Some(e) {
            match write_vector(l, i, e) {
                Ok(()) => run.written[i] = Some(e),
                Err(err) => log::error(format_args!("shield: {err}")),
            }
        }
    }
}

/// `GET /api/v1/shield`'s `ddos`: null without `[shield.ddos]`.
pub fn describe() -> Value {
    let st = state();
    let spec = st.spec.as_ref().and_then(|s| s.ddos.as_ref());
    match (spec, st.ddos.as_ref()) {
        (Some(spec), Some(run)) => {
            let mut v = run.detector.describe(spec);
            v["in_xdp"] = Value::Bool(true);
            v
        }
        (Some(spec), None) => {
            let mut v = Detector::default().describe(spec);
            v["in_xdp"] = Value::Bool(false);
            v
        }
        _ => Value::Null,
    }
}

/// Per vector: name, packets, dropped, detected and rate, for /metrics;
/// empty without `[shield.ddos]` in XDP.
pub fn counters() -> Vec<(&'static str, u64, u64, bool, u64)> {
    state()
        .ddos
        .as_ref()
        .map(|r| r.detector.counters())
        .unwrap_or_default()
}

/// Sockets in SYN_RECV (request sockets included) over IPv4 and IPv6,
/// from the kernel's socket diagnostics (what `ss -n state syn-recv`
/// counts), in this process's network namespace.
pub fn half_open_connections() -> io::Result<u64> {
    Ok(syn_recv(libc::AF_INET as u8)? + syn_recv(libc::AF_INET6 as u8)?)
}

fn syn_recv(family: u8) -> io::Result<u64> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    // TCP_SYN_RECV and TCP_NEW_SYN_RECV (request sockets).
    const STATES: u32 = 1 << 3 | 1 << 12;
    // SAFETY: plain socket creation; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: a timeval of the right size for SO_RCVTIMEO.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    // nlmsghdr (16 bytes), then inet_diag_req_v2 (56): family, protocol,
    // extensions, pad, states, and a zero socket id (48).
    let mut req = [0u8; 72];
    req[0..4].copy_from_slice(&72u32.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = family;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&STATES.to_ne_bytes());
    // SAFETY: a zeroed sockaddr_nl is valid; the kernel is pid 0.
    let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    to.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: req and to outlive the call; sizes are theirs.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&to as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut count = 0u64;
    loop {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut at = 0usize;
        let n = n as usize;
        while at + 16 <= n {
            let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            match kind {
                NLMSG_DONE => return Ok(count),
                NLMSG_ERROR => {
                    let errno = buf
                        .get(at + 16..at + 20)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(0);
                    return Err(io::Error::from_raw_os_error(-errno));
                }
                _ => count += 1,
            }
            if len < 16 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a netlink message shorter than its header",
                ));
            }
            at += (len + 3) & !3;
        }
        if n == 0 {
            return Ok(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own count: a listener with a full SYN queue is not
    /// needed, a connection in progress to a black hole is SYN_SENT, so
    /// this checks the dump runs and answers (zero or more).
    #[test]
    fn socket_diagnostics_answer() {
        match half_open_connections() {
            Ok(n) => assert!(n < 1_000_000),
            Err(e) => panic!("sock_diag: {e}"),
        }
    }
}
