//! The shield in XDP: `[shield.xdp]` attaches shield.bpf.c to interfaces
//! and loads the global `[shield]` ACL into its maps.
//!
//! - **Build.** build.rs compiles shield.bpf.c with clang when clang and
//!   the kernel headers are there; otherwise Switchyard is built without
//!   XDP and says so once when `[shield.xdp]` asks for it.
//! - **Loader.** Our own (sys.rs, elf.rs): no crate, see sys.rs for why.
//! - **Attach.** A BPF link per interface, native (driver) mode first,
//!   generic (skb) mode when the driver refuses (`mode = "auto"`). The link
//!   closes, and the program detaches, on exit, on a failure of the maps,
//!   and when a reload no longer names the interface. Where loading or
//!   attaching is refused (no CAP_BPF, no such interface) it is logged
//!   once and the accept-path shield carries on alone.
//! - **Updates.** Reloads and list edits write the inactive generation of
//!   the tables and flip to it: the program stays attached.

pub mod btf;
pub mod ddos;
pub mod elf;
mod matches;
pub mod sys;
pub mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::acl::Acl;
use super::AclSet;
use crate::log;
use tables::{Tables, MAX_RULES, PORTS_PER_GEN, SETS_PER_GEN, WORDS};

/// The compiled program (build.rs), or nothing when clang was missing.
#[cfg(switchyard_xdp)]
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/shield.bpf.o"));
#[cfg(not(switchyard_xdp))]
static OBJECT: &[u8] = &[];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Native, else generic.
    Auto,
    Native,
    Generic,
}

/// `[shield.xdp]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub interfaces: Vec<String>,
    pub mode: Mode,
    /// SYNs per second and source address let through to the kernel; 0:
    /// no limit.
    pub syn_per_source: u32,
    /// Answer SYNs with cookies in XDP, completed by a tc program
    /// (bpf_sk_assign_tcp_reqsk, Linux 6.10).
    pub syn_cookies: bool,
    /// `[shield.ddos]`: the DDoS vectors, detected in this program.
    pub ddos: Option<crate::shield::ddos::Spec>,
}

/// Names of the `stats` slots of shield.bpf.c, in order.
const STATS: [&str; 16] = [
    "evaluated",
    "allowed",
    "dropped",
    "rejected_rst",
    "rejected_dropped",
    "syn",
    "syn_limited",
    "not_for_vservers",
    "syn_cookies_sent",
    "syn_cookies_completed",
    "syn_cookies_bad",
    "syn_cookies_refused",
    "rejected_icmp",
    "icmp_limited",
    "logged",
    "log_suppressed",
];

struct Link {
    _fd: OwnedFd,
    mode: &'static str,
    /// The tc program's link (SYN cookies), when attached.
    tc: Option<OwnedFd>,
}

struct Loaded {
    maps: BTreeMap<String, OwnedFd>,
    _prog: OwnedFd,
    cpus: usize,
    /// The generation the program reads.
    gen: u32,
    /// LPM keys written per generation, to delete before it is rewritten.
    lpm_keys: [Vec<(bool, Vec<u8>)>; 2],
    links: BTreeMap<String, Link>,
    /// The rule set the tables come from (its id), and its rules.
    set: u64,
    /// Which of the set's lists of rules (`AclSet::epoch`).
    epoch: u64,
    rules: usize,
    /// The tc program completing SYN cookies, or why it did not load.
    tc: Result<OwnedFd, String>,
    /// Whether XDP answers SYNs with cookies now.
    cookies: bool,
    /// `log` rules' matches, and the rules' names to say them by.
    ring: Option<matches::Ring>,
    names: Vec<String>,
}

#[derive(Default)]
struct State {
    loaded: Option<Loaded>,
    /// Messages already logged: each is said once.
    said: BTreeSet<String>,
    /// Interface -> why it is not attached.
    refused: BTreeMap<String, String>,
    spec: Option<Spec>,
    /// The DDoS detector, while `[shield.ddos]` runs.
    ddos: Option<ddos::Run>,
}

static STATE: Mutex<State> = Mutex::new(State {
    loaded: None,
    said: BTreeSet::new(),
    refused: BTreeMap::new(),
    spec: None,
    ddos: None,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    // A panic while holding it leaves plain data: carry on with it.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    fn once(&mut self, msg: String) {
        if self.said.insert(msg.clone()) {
            log::warn(format_args!("{msg}"));
        }
    }
}

fn map<'a>(l: &'a Loaded, name: &str) -> Result<&'a OwnedFd, String> {
    l.maps
        .get(name)
        .ok_or_else(|| format!("the XDP object has no map {name:?}"))
}

/// Resolves map and kernel-function references in `obj`'s program.
fn link_program(obj: &elf::Object, maps: &BTreeMap<String, OwnedFd>) -> Result<Vec<u8>, String> {
    use std::os::fd::AsRawFd;
    let mut insns = obj.insns.clone();
    for (off, name) in &obj.relocs {
        let fd = maps
            .get(name)
            .ok_or_else(|| format!("relocation against unknown map {name}"))?
            .as_raw_fd();
        // ld_imm64: src_reg = BPF_PSEUDO_MAP_FD (1), imm = the map's fd.
        insns[off + 1] = (insns[off + 1] & 0x0f) | 0x10;
        insns[off + 4..off + 8].copy_from_slice(&fd.to_le_bytes());
    }
    if !obj.kfuncs.is_empty() {
        let btf = std::fs::read("/sys/kernel/btf/vmlinux")
            .map_err(|e| format!("cannot read the kernel's BTF: {e}"))?;
        for (off, name) in &obj.kfuncs {
            let id = btf::func_id(&btf, name)?;
            // call: src_reg = BPF_PSEUDO_KFUNC_CALL (2), imm = BTF id,
            // off = 0 (vmlinux).
            insns[off + 1] = (insns[off + 1] & 0x0f) | 0x20;
            insns[off + 2..off + 4].copy_from_slice(&[0, 0]);
            insns[off + 4..off + 8].copy_from_slice(&id.to_le_bytes());
        }
    }
    Ok(insns)
}

fn load() -> Result<Loaded, String> {
    let obj = elf::parse(OBJECT, "xdp").map_err(|e| format!("shield.bpf.o: {e}"))?;
    let mut maps = BTreeMap::new();
    for (name, d) in &obj.maps {
        let fd = sys::map_create(name, d.kind, d.key, d.value, d.entries, d.flags)
            .map_err(|e| format!("cannot create BPF map {name}: {e}"))?;
        maps.insert(name.clone(), fd);
    }
    let insns = link_program(&obj, &maps)?;
    let prog = sys::prog_load(
        sys::BPF_PROG_TYPE_XDP,
        sys::BPF_XDP,
        "sy_shield",
        &insns,
        &obj.license,
    )
    .map_err(|e| format!("cannot load the XDP program: {e}"))?;
    let cpus = sys::possible_cpus().map_err(|e| format!("cannot count the CPUs: {e}"))?;
    // The tc half of SYN cookies: it needs a kernel with
    // bpf_sk_assign_tcp_reqsk; without it XDP does not issue cookies.
    let tc = elf::parse(OBJECT, "tc")
        .map_err(|e| format!("shield.bpf.o: {e}"))
        .and_then(|o| {
            let insns = link_program(&o, &maps)?;
            sys::prog_load(
                sys::BPF_PROG_TYPE_SCHED_CLS,
                sys::BPF_TCX_INGRESS,
                "sy_shield_tc",
                &insns,
                &o.license,
            )
            .map_err(|e| format!("cannot load the tc program: {e}"))
        });
    let mut key = [0u8; 16];
    sys::random(&mut key).map_err(|e| format!("no random bytes for the SYN cookie key: {e}"))?;
    let mut l = Loaded {
        maps,
        _prog: prog,
        cpus,
        gen: 0,
        lpm_keys: [Vec::new(), Vec::new()],
        links: BTreeMap::new(),
        set: 0,
        epoch: 0,
        rules: 0,
        tc,
        cookies: false,
        ring: None,
        names: Vec::new(),
    };
    sys::map_update(map(&l, "cookie_key")?, &0u32.to_ne_bytes(), &key)
        .map_err(|e| format!("cannot write the SYN cookie key: {e}"))?;
    l.ring = Some(
        matches::Ring::map(map(&l, "log_ring")?)
            .map_err(|e| format!("cannot map the log ring: {e}"))?,
    );
    Ok(l)
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

impl Loaded {
    /// Writes `t` into the inactive generation, then flips to it.
    fn write(&mut self, t: &Tables, syn_per_source: u32) -> Result<(), String> {
        let cookies = u32::from(self.cookies);
        let next = 1 - self.gen;
        let sets_base = next * SETS_PER_GEN;
        for (v6, key) in std::mem::take(&mut self.lpm_keys[next as usize]) {
            let m = map(self, if v6 { "lpm6" } else { "lpm4" })?;
            // A key that is gone already is what we want.
            let _ = sys::map_delete(m, &key);
        }
        let keys: Vec<u32> = (0..t.sets.len() as u32).map(|i| sets_base + i).collect();
        let values: Vec<u8> = t
            .sets
            .iter()
            .flatten()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        sys::map_update_batch(
            map(self, "bitsets")?,
            &u32s(&keys),
            &values,
            keys.len() as u32,
        )
        .map_err(|e| format!("cannot write the rule sets: {e}"))?;
        let keys: Vec<u32> = (0..PORTS_PER_GEN)
            .map(|i| next * PORTS_PER_GEN + i)
            .collect();
        let values: Vec<u32> = t.ports.iter().map(|s| sets_base + s).collect();
        sys::map_update_batch(
            map(self, "ports")?,
            &u32s(&keys),
            &u32s(&values),
            keys.len() as u32,
        )
        .map_err(|e| format!("cannot write the port table: {e}"))?;
        let mut written = Vec::with_capacity(t.lpm.len());
        for e in &t.lpm {
            let mut key = (8 + e.prefix as u32).to_ne_bytes().to_vec();
            key.push((next * 2 + u32::from(e.dst)) as u8);
            if e.v6 {
                key.extend_from_slice(&e.net.to_be_bytes());
            } else {
                key.extend_from_slice(&(e.net as u32).to_be_bytes());
            }
            let m = map(self, if e.v6 { "lpm6" } else { "lpm4" })?;
            sys::map_update(m, &key, &(sets_base + e.set).to_ne_bytes())
                .map_err(|err| format!("cannot write address entry /{}: {err}", e.prefix))?;
            written.push((e.v6, key));
        }
        self.lpm_keys[next as usize] = written;
        let gen_cfg = u32s(&[0, t.words, t.default, syn_per_source, cookies]);
        sys::map_update(map(self, "cfg")?, &(next + 1).to_ne_bytes(), &gen_cfg)
            .map_err(|e| format!("cannot write the settings: {e}"))?;
        sys::map_update(
            map(self, "cfg")?,
            &0u32.to_ne_bytes(),
            &u32s(&[next, 0, 0, 0, 0]),
        )
        .map_err(|e| format!("cannot switch to the new rules: {e}"))?;
        self.gen = next;
        Ok(())
    }

    /// Whether the tc program completes SYN cookies on every interface
    /// XDP is attached to: only then may XDP issue them.
    fn tc_everywhere(&self) -> bool {
        self.tc.is_ok() && !self.links.is_empty() && self.links.values().all(|k| k.tc.is_some())
    }

    /// A new rule set (a reload) or new rules in it (the admin API):
    /// its counters start at zero, as at accept.
    fn take_rules(&mut self, set: &AclSet) -> Result<(), String> {
        if (set.id(), set.epoch()) != (self.set, self.epoch) {
            self.zero_hits()?;
            self.set = set.id();
            self.epoch = set.epoch();
            self.names = set.names();
            self.rules = self.names.len();
        }
        Ok(())
    }

    fn zero_hits(&self) -> Result<(), String> {
        let zeros = vec![0u8; 8 * self.cpus];
        let m = map(self, "hits")?;
        for i in 0..=MAX_RULES as u32 {
            sys::map_update(m, &i.to_ne_bytes(), &zeros)
                .map_err(|e| format!("cannot reset the rule counters: {e}"))?;
        }
        Ok(())
    }

    fn percpu_sum(&self, name: &str, slot: u32) -> Result<u64, String> {
        let mut buf = vec![0u8; 8 * self.cpus];
        sys::map_lookup(map(self, name)?, &slot.to_ne_bytes(), &mut buf)
            .map_err(|e| format!("cannot read {name}[{slot}]: {e}"))?;
        Ok(buf
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .sum())
    }

    /// The ports the program evaluates: vservers' TCP and UDP ports.
    fn served_ports(&self, tcp: &[u16], udp: &[u16]) -> Result<(), String> {
        let mut on = vec![0u32; 2 * 65536];
        for p in tcp {
            on[*p as usize] = 1;
        }
        for p in udp {
            on[65536 + *p as usize] = 1;
        }
        let keys: Vec<u32> = (0..on.len() as u32).collect();
        sys::map_update_batch(
            map(self, "served")?,
            &u32s(&keys),
            &u32s(&on),
            keys.len() as u32,
        )
        .map_err(|e| format!("cannot write the vserver ports: {e}"))
    }
}

/// The XDP tables for `acl`, or why they cannot be built.
pub fn tables(acl: &Acl) -> Result<Tables, String> {
    tables::build(acl.rules(), acl.default_action())
}

/// The ports vservers listen on: the only traffic the program evaluates.
#[derive(Debug, Default, Clone)]
pub struct Served {
    pub tcp: Vec<u16>,
    pub udp: Vec<u16>,
}

/// Makes the attached state match the configuration (its global rule set
/// and the vservers' ports): at start and after each reload.
pub fn apply(shield: Option<&std::sync::Arc<AclSet>>, served: &Served) {
    let mut st = state();
    let Some((set, spec)) = shield.and_then(|s| s.xdp_spec().cloned().map(|x| (s.clone(), x)))
    else {
        if let Some(l) = st.loaded.take() {
            for name in l.links.keys() {
                log::info(format_args!("shield: XDP detached from {name}"));
            }
        }
        st.spec = None;
        st.refused.clear();
        return;
    };
    st.spec = Some(spec.clone());
    if OBJECT.is_empty() {
        st.once(
            "shield: this Switchyard was built without XDP (no clang at build time); [shield.xdp] is ignored and the shield runs at accept".into(),
        );
        return;
    }
    if st.loaded.is_none() {
        match load() {
            Ok(l) => st.loaded = Some(l),
            Err(e) => {
                st.once(format!(
                    "shield: XDP unavailable ({e}); the shield runs at accept only"
                ));
                return;
            }
        }
    }
    start_ticker();
    let Some(l) = st.loaded.as_mut() else { return };
    // Frames sent back with XDP_TX (a reject's RST, a cookie's SYN+ACK)
    // leave a veth in native mode only if its peer runs XDP too: "auto"
    // takes generic mode on a veth when the rules or cookies send any.
    let ddos_cookies = spec.ddos.as_ref().is_some_and(|d| d.uses_cookies());
    let sends = spec.syn_cookies
        || ddos_cookies
        || set
            .compiled()
            .rules()
            .iter()
            .any(|r| r.action == Some(super::acl::Action::Reject));
    let mode_for = |name: &str| match spec.mode {
        Mode::Auto if sends && sys::driver(name).is_ok_and(|d| d == "veth") => Mode::Generic,
        m => m,
    };
    // Interfaces no longer named, or attached in a mode no longer
    // allowed, are detached (and the latter attached again below).
    l.links.retain(|name, link| {
        let keep = spec.interfaces.contains(name)
            && match mode_for(name) {
                Mode::Auto => true,
                Mode::Native => link.mode == "native",
                Mode::Generic => link.mode == "generic",
            };
        if !keep {
            log::info(format_args!("shield: XDP detached from {name}"));
        }
        keep
    });
    let mut refused = Vec::new();
    for name in &spec.interfaces {
        if !l.links.contains_key(name) {
            match attach(&l._prog, name, mode_for(name)) {
                Ok(link) => {
                    let why = if spec.mode == Mode::Auto && mode_for(name) == Mode::Generic {
                        " (a veth, and XDP sends frames back: native mode would lose them)"
                    } else {
                        ""
                    };
                    log::info(format_args!(
                        "shield: XDP attached to {name} in {} mode{why}",
                        link.mode
                    ));
                    l.links.insert(name.clone(), link);
                }
                Err(e) => {
                    refused.push((name.clone(), e));
                    continue;
                }
            }
        }
        // The tc half of SYN cookies, with the XDP link (and detached
        // with it).
        let (Some(link), Ok(tc)) = (l.links.get_mut(name), &l.tc) else {
            continue;
        };
        if (spec.syn_cookies || ddos_cookies) && link.tc.is_none() {
            match sys::ifindex(name).and_then(|i| sys::link(tc, i, sys::BPF_TCX_INGRESS, 0)) {
                Ok(fd) => link.tc = Some(fd),
                Err(e) => {
                    refused.push((format!("{name} (tc)"), format!("tc ingress refused: {e}")))
                }
            }
        }
    }
    // Cookies only where every interface can complete them; otherwise the
    // kernel's own SYN cookies answer.
    let tc_error = l.tc.as_ref().err().cloned();
    let tc_everywhere = l.tc_everywhere();
    l.cookies = spec.syn_cookies && tc_everywhere;
    let cookies = l.cookies;
    st.refused.retain(|n, _| {
        spec.interfaces
            .iter()
            .any(|i| n == i || *n == format!("{i} (tc)"))
    });
    for (name, e) in refused {
        st.once(format!(
            "shield: XDP not attached to {name}: {e}; the shield runs at accept there"
        ));
        st.refused.insert(name, e);
    }
    if spec.syn_cookies && !cookies {
        st.once(format!(
            "shield: SYN cookies in XDP unavailable ({}); the kernel's own SYN cookies answer",
            tc_error
                .clone()
                .unwrap_or_else(|| "tc ingress is not attached everywhere".into())
        ));
    }
    if let Err(e) = write_set(&mut st, &set, served).and_then(|()| ddos::configure(&mut st)) {
        fail(&mut st, &e);
        return;
    }
    if ddos_cookies && !tc_everywhere {
        st.once(
            "shield: [shield.ddos] action \"cookies\" needs the tc program on every XDP interface (Linux 6.10+); SYN floods are counted only".into(),
        );
    }
    // Cookies are off in the maps now: their tc links may go.
    if !spec.syn_cookies && !ddos_cookies {
        for link in st.loaded.iter_mut().flat_map(|l| l.links.values_mut()) {
            link.tc = None;
        }
    }
}

/// Once a second, while a program is loaded: the DDoS detector's tick,
/// and the log lines of `log` rules matched in XDP.
fn start_ticker() {
    static TICKER: std::sync::Once = std::sync::Once::new();
    TICKER.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("shield-xdp".into())
            .spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                ddos::second();
                if let Some(Loaded {
                    ring: Some(ring),
                    names,
                    ..
                }) = state().loaded.as_mut()
                {
                    ring.drain(names);
                }
            });
        if let Err(e) = spawned {
            log::error(format_args!(
                "shield: no thread for XDP's counters ({e}); DDoS vectors keep their limits but nothing is detected, and XDP `log` rules write no line"
            ));
        }
    });
}

fn attach(prog: &OwnedFd, name: &str, mode: Mode) -> Result<Link, String> {
    let ifindex = sys::ifindex(name).map_err(|e| format!("no interface {name}: {e}"))?;
    let native = || {
        sys::link(prog, ifindex, sys::BPF_XDP, sys::XDP_FLAGS_DRV_MODE).map(|fd| Link {
            _fd: fd,
            mode: "native",
            tc: None,
        })
    };
    let generic = || {
        sys::link(prog, ifindex, sys::BPF_XDP, sys::XDP_FLAGS_SKB_MODE).map(|fd| Link {
            _fd: fd,
            mode: "generic",
            tc: None,
        })
    };
    match mode {
        Mode::Native => native().map_err(|e| format!("native mode refused: {e}")),
        Mode::Generic => generic().map_err(|e| format!("generic mode refused: {e}")),
        Mode::Auto => native().or_else(|ne| {
            generic()
                .map_err(|ge| format!("native mode refused ({ne}), generic mode refused ({ge})"))
        }),
    }
}

/// Writes `set`'s rules; a new rule set starts its counters at zero.
fn write_set(st: &mut State, set: &std::sync::Arc<AclSet>, served: &Served) -> Result<(), String> {
    let syn = st.spec.as_ref().map(|s| s.syn_per_source).unwrap_or(0);
    let Some(l) = st.loaded.as_mut() else {
        return Ok(());
    };
    let acl = set.compiled();
    let t = tables(&acl)?;
    l.take_rules(set)?;
    l.served_ports(&served.tcp, &served.udp)?;
    l.write(&t, syn)
}

/// The maps failed under a running program: detach rather than filter
/// with half-written tables.
fn fail(st: &mut State, e: &str) {
    log::error(format_args!(
        "shield: XDP tables cannot be written ({e}); XDP detached, the shield runs at accept"
    ));
    st.loaded = None;
}

/// After a list edit of `set`: its new rules, if it is the set loaded.
pub fn refresh(set: &AclSet) {
    let mut st = state();
    let syn = st.spec.as_ref().map(|s| s.syn_per_source).unwrap_or(0);
    let Some(l) = st.loaded.as_mut() else { return };
    if l.set != set.id() {
        return;
    }
    let r = l
        .take_rules(set)
        .and_then(|()| tables(&set.compiled()))
        .and_then(|t| l.write(&t, syn));
    if let Err(e) = r {
        fail(&mut st, &e);
    }
}

/// Detaches everything: at exit.
pub fn shutdown() {
    let mut st = state();
    if let Some(l) = st.loaded.take() {
        for name in l.links.keys() {
            log::info(format_args!("shield: XDP detached from {name}"));
        }
    }
}

/// Per rule of `set`, the XDP hits, and the default's; None when `set`
/// is not the one loaded.
pub fn hits(set: &AclSet) -> Option<(Vec<u64>, u64)> {
    let st = state();
    let l = st.loaded.as_ref()?;
    if l.set != set.id() || l.epoch != set.epoch() {
        return None;
    }
    let per: Result<Vec<u64>, String> = (0..l.rules as u32)
        .map(|i| l.percpu_sum("hits", i))
        .collect();
    let def = l.percpu_sum("hits", MAX_RULES as u32);
    per.ok().zip(def.ok())
}

/// The XDP state for `GET /api/v1/shield`.
pub fn describe() -> Value {
    let st = state();
    let Some(spec) = &st.spec else {
        return Value::Null;
    };
    let attached: Vec<Value> = st
        .loaded
        .iter()
        .flat_map(|l| l.links.iter())
        .map(|(n, l)| json!({"interface": n, "mode": l.mode, "tc": l.tc.is_some()}))
        .collect();
    let stats: serde_json::Map<String, Value> = st
        .loaded
        .iter()
        .flat_map(|l| {
            STATS.iter().enumerate().map(move |(i, n)| {
                (
                    n.to_string(),
                    json!(l.percpu_sum("stats", i as u32).unwrap_or(0)),
                )
            })
        })
        .collect();
    json!({
        "interfaces": spec.interfaces,
        "attached": attached,
        "refused": st.refused,
        "built_with_xdp": !OBJECT.is_empty(),
        "loaded": st.loaded.is_some(),
        "max_rules": MAX_RULES,
        "words": WORDS,
        "syn_per_source": spec.syn_per_source,
        "syn_cookies": st.loaded.as_ref().is_some_and(|l| l.cookies),
        "packets": stats,
    })
}

/// The real program in the kernel (BPF_PROG_TEST_RUN), as root: verdicts
/// and counters against acl.rs's scan, and its cost per packet.
#[cfg(test)]
mod tests {
    use super::tables::tests::{packet, rule, Rng};
    use super::*;
    use crate::shield::acl::{scan, Action, Packet, Rule, TCP, UDP};
    use std::net::IpAddr;

    /// The program with maps, or None (said) where it cannot load here.
    fn loaded() -> Option<Loaded> {
        if OBJECT.is_empty() {
            eprintln!("skipped: built without XDP (no clang)");
            return None;
        }
        match load() {
            Ok(l) => Some(l),
            // The verifier's refusal is a bug in the program, not a
            // machine without BPF: as root it fails the test.
            // SAFETY: geteuid has no preconditions.
            Err(e) if e.contains("verifier") && unsafe { libc::geteuid() } == 0 => {
                panic!("the kernel refuses the XDP program: {e}")
            }
            Err(e) => {
                eprintln!("skipped: cannot load the XDP program here ({e}); the test runs as root");
                None
            }
        }
    }

    fn frame(p: &Packet, seq: u32) -> Vec<u8> {
        frame_with(p, seq, &[])
    }

    /// A frame carrying `p`; a TCP segment gets `opts` (whole words).
    fn frame_with(p: &Packet, seq: u32, opts: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        let mut l4 = match p.proto {
            TCP => {
                let mut t = Vec::new();
                t.extend_from_slice(&p.src_port.to_be_bytes());
                t.extend_from_slice(&p.dst_port.to_be_bytes());
                t.extend_from_slice(&seq.to_be_bytes());
                t.extend_from_slice(&0u32.to_be_bytes());
                let doff = 5 + opts.len() as u8 / 4;
                t.extend_from_slice(&[doff << 4, p.tcp_flags, 0xff, 0xff, 0, 0, 0, 0]);
                t.extend_from_slice(opts);
                t
            }
            UDP => {
                let mut u = Vec::new();
                u.extend_from_slice(&p.src_port.to_be_bytes());
                u.extend_from_slice(&p.dst_port.to_be_bytes());
                u.extend_from_slice(&[0, 12, 0, 0]);
                u
            }
            _ => vec![0; 8],
        };
        l4.extend_from_slice(b"data");
        match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
                f.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
                f.extend_from_slice(&[0, 1, 0, 0, 64, p.proto, 0, 0]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
                f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
                f.extend_from_slice(&[p.proto, 64]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
            }
            _ => unreachable!(),
        }
        f.extend_from_slice(&l4);
        f
    }

    fn csum(data: &[u8]) -> u16 {
        let mut s: u32 = data
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// The RST the program wrote over `p`'s SYN: addresses and ports
    /// swapped, ack = seq + 1, RST|ACK, both checksums right.
    fn check_rst(p: &Packet, seq: u32, out: &[u8]) {
        let v6 = p.src.is_ipv6();
        let l3 = if v6 { 40 } else { 20 };
        assert_eq!(out.len(), 14 + l3 + 20, "{p:?}");
        let ip = &out[14..14 + l3];
        let th = &out[14 + l3..];
        let (src, dst, pseudo_len) = if v6 {
            assert_eq!(csum(&[]), 0);
            (&ip[8..24], &ip[24..40], 20u16)
        } else {
            assert_eq!(csum(ip), 0xffff, "IPv4 header checksum");
            (&ip[12..16], &ip[16..20], 20u16)
        };
        let want_src: Vec<u8> = match p.dst {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        assert_eq!(src, &want_src[..]);
        let mut pseudo = src.to_vec();
        pseudo.extend_from_slice(dst);
        pseudo.extend_from_slice(&[0, TCP]);
        pseudo.extend_from_slice(&pseudo_len.to_be_bytes());
        pseudo.extend_from_slice(th);
        assert_eq!(csum(&pseudo), 0xffff, "TCP checksum");
        assert_eq!(u16::from_be_bytes([th[0], th[1]]), p.dst_port);
        assert_eq!(u16::from_be_bytes([th[2], th[3]]), p.src_port);
        assert_eq!(
            u32::from_be_bytes([th[8], th[9], th[10], th[11]]),
            seq.wrapping_add(1)
        );
        assert_eq!(th[13], 0x14);
    }

    /// The ICMP error for a rejected datagram `sent`: back to its sender,
    /// port unreachable, quoting its IP header and first 8 bytes, with
    /// right checksums.
    fn check_unreachable(p: &Packet, sent: &[u8], out: &[u8]) {
        let v6 = p.src.is_ipv6();
        let l3 = if v6 { 40 } else { 20 };
        assert_eq!(out.len(), 14 + 2 * (l3 + 8), "{p:?}");
        assert_eq!(&out[0..6], &sent[6..12], "to the sender's MAC");
        let ip = &out[14..14 + l3];
        let icmp = &out[14 + l3..];
        assert_eq!(&icmp[8..], &sent[14..14 + l3 + 8], "the quote");
        let (src, dst) = if v6 {
            (&ip[8..24], &ip[24..40])
        } else {
            assert_eq!(csum(ip), 0xffff, "IPv4 header checksum");
            (&ip[12..16], &ip[16..20])
        };
        let (sent_src, sent_dst) = if v6 {
            (&sent[14 + 8..14 + 24], &sent[14 + 24..14 + 40])
        } else {
            (&sent[14 + 12..14 + 16], &sent[14 + 16..14 + 20])
        };
        assert_eq!((src, dst), (sent_dst, sent_src), "addresses swapped");
        if v6 {
            let mut pseudo = src.to_vec();
            pseudo.extend_from_slice(dst);
            pseudo.extend_from_slice(&((icmp.len() as u32).to_be_bytes()));
            pseudo.extend_from_slice(&[0, 0, 0, 58]);
            pseudo.extend_from_slice(icmp);
            assert_eq!(csum(&pseudo), 0xffff, "ICMPv6 checksum");
            assert_eq!((icmp[0], icmp[1]), (1, 4));
        } else {
            assert_eq!(csum(icmp), 0xffff, "ICMP checksum");
            assert_eq!((icmp[0], icmp[1]), (3, 3));
        }
    }

    /// 1,000 random rules (both families, protocols, ports, flags, every
    /// action) in the kernel: each packet's verdict, the RSTs and ICMP
    /// errors, and every rule's XDP counter agree with acl.rs's scan.
    #[test]
    fn the_kernel_program_decides_like_the_scan() {
        let Some(mut l) = loaded() else { return };
        let mut g = Rng(0x005e_ed0f_5eed);
        let rules: Vec<Rule> = (0..1000).map(|_| rule(&mut g)).collect();
        let t = tables::build(&rules, Action::Drop).expect("tables");
        let ports: Vec<u16> = (0..2100).collect();
        l.served_ports(&ports, &ports).expect("ports");
        l.write(&t, 0).expect("write");
        let mut want_hits = vec![0u64; MAX_RULES + 1];
        let mut seen = [0usize; 4];
        let mut unreachables = 0;
        for n in 0..4000u32 {
            let mut p = packet(&mut g);
            // Only TCP has flags (admit() says 0 for the others too).
            if p.proto != TCP {
                p.tcp_flags = 0;
            }
            let seq = 0x1000_0000 + n;
            let (verdict, out, _) = sys::test_run(&l._prog, &frame(&p, seq), 1).expect("test run");
            let evaluated = match p.proto {
                TCP => p.tcp_flags & 0x12 == 0x02,
                UDP => true,
                _ => false,
            };
            let want = if evaluated {
                let v = scan(&rules, Action::Drop, &p);
                for i in &v.noted {
                    want_hits[*i] += 1;
                }
                want_hits[v.rule.unwrap_or(MAX_RULES)] += 1;
                match v.action {
                    Action::Drop => 1,
                    Action::Reject => 3,
                    _ => 2,
                }
            } else {
                2
            };
            assert_eq!(verdict, want, "{p:?}");
            if verdict == 3 && p.proto == UDP {
                check_unreachable(&p, &frame(&p, seq), &out);
                unreachables += 1;
            } else if verdict == 3 {
                check_rst(&p, seq, &out);
            }
            seen[verdict as usize] += 1;
        }
        assert!(seen[1] > 100 && seen[2] > 100 && seen[3] > 10, "{seen:?}");
        assert!(unreachables > 10, "{unreachables} ICMP errors checked");
        for (i, w) in want_hits.iter().enumerate() {
            assert_eq!(
                l.percpu_sum("hits", i as u32).expect("hits"),
                *w,
                "rule {i}"
            );
        }
        // A reload's tables replace these without a gap: the other
        // generation, then the same verdicts.
        l.write(&t, 0).expect("rewrite");
        assert_eq!(l.gen, 0);
    }

    /// The verifier walks the program within its limit of a million
    /// instructions with room to spare: a change that nears it fails
    /// here, before a kernel a little stricter refuses the program.
    #[test]
    fn the_verifier_has_headroom() {
        let Some(l) = loaded() else { return };
        let obj = elf::parse(OBJECT, "xdp").expect("object");
        let insns = link_program(&obj, &l.maps).expect("link");
        let stats = sys::verifier_stats(
            sys::BPF_PROG_TYPE_XDP,
            sys::BPF_XDP,
            "sy_shield",
            &insns,
            &obj.license,
        )
        .expect("load with stats");
        let processed: u64 = stats
            .split("processed ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        eprintln!("verifier: {}", stats.trim());
        assert!(processed < 800_000, "{stats}");
    }

    /// A SYN answered with a cookie in XDP, IPv4 and IPv6: a SYN+ACK back
    /// (addresses and ports swapped, ack = ISN + 1, one MSS option, both
    /// checksums right) whose ISN carries the MSS index, and the same SYN
    /// gets the same cookie.
    #[test]
    fn syn_cookies_answer_with_a_right_syn_ack() {
        let Some(l) = loaded() else { return };
        if l.tc.is_err() {
            eprintln!(
                "skipped: no tc program here (bpf_sk_assign_tcp_reqsk): {:?}",
                l.tc.as_ref().err()
            );
            return;
        }
        // XDP answers a SYN only where the listener alone knows its
        // tuple: run in a network namespace of this thread's own, with a
        // listener on the port.
        std::thread::spawn(move || {
            // SAFETY: unshare affects this thread only.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
            let listener = std::net::TcpListener::bind("[::]:8080").expect("listen");
            syn_cookies_in(l);
            drop(listener);
        })
        .join()
        .expect("the test's thread");
    }

    fn syn_cookies_in(mut l: Loaded) {
        l.served_ports(&[8080], &[]).expect("ports");
        l.cookies = true;
        l.write(&tables::build(&[], Action::Allow).expect("tables"), 0)
            .expect("write");
        // The SYN's options as common stacks lay them out, and what the
        // answer must say: MSS, window scale (ours, 7, when the client
        // offers one), SACK.
        let ts = [8, 10, 1, 2, 3, 4, 0, 0, 0, 0];
        let linux_ts = [&[2, 4, 5, 180, 4, 2][..], &ts, &[1, 3, 3, 9]].concat();
        let windows = vec![2, 4, 5, 20, 1, 3, 3, 8, 1, 1, 4, 2];
        let macos = [&[2, 4, 5, 180, 1, 3, 3, 6, 1, 1][..], &ts, &[4, 2, 0, 0]].concat();
        let linux = vec![2, 4, 5, 180, 1, 1, 4, 2, 1, 3, 3, 14];
        for (src, dst, opts, ws, sack, want_mss) in [
            ("10.77.0.2", "10.77.0.1", linux_ts, Some(9u8), true, 1460u16),
            ("10.77.0.2", "10.77.0.1", windows, Some(8), true, 1300),
            ("10.77.0.2", "10.77.0.1", macos, Some(6), true, 1460),
            ("10.77.0.2", "10.77.0.1", vec![], None, false, 536),
            ("fd77::2", "fd77::1", linux, Some(14), true, 1440),
            ("fd77::2", "fd77::1", vec![2, 4, 3, 232], None, false, 1220),
        ] {
            let p = Packet {
                src: src.parse().expect("addr"),
                dst: dst.parse().expect("addr"),
                proto: TCP,
                src_port: 40000,
                dst_port: 8080,
                tcp_flags: 0x02,
            };
            let isn = 0x1234_5678;
            let syn = frame_with(&p, isn, &opts);
            let (v, out, _) = sys::test_run(&l._prog, &syn, 1).expect("run");
            assert_eq!(v, 3, "XDP_TX for {src}");
            let l3 = if p.src.is_ipv6() { 40 } else { 20 };
            assert_eq!(out.len(), 14 + l3 + 32, "{src}");
            let (ip, th) = (&out[14..14 + l3], &out[14 + l3..]);
            let (s, d) = if l3 == 40 {
                (&ip[8..24], &ip[24..40])
            } else {
                assert_eq!(csum(ip), 0xffff, "IPv4 header checksum");
                (&ip[12..16], &ip[16..20])
            };
            let mut pseudo = [s, d].concat();
            pseudo.extend_from_slice(&[0, TCP, 0, 32]);
            pseudo.extend_from_slice(th);
            assert_eq!(csum(&pseudo), 0xffff, "TCP checksum {src}");
            assert_eq!(&out[..6], &syn[6..12], "back to the sender's MAC");
            assert_eq!(u16::from_be_bytes([th[0], th[1]]), 8080);
            assert_eq!(u16::from_be_bytes([th[2], th[3]]), 40000);
            assert_eq!(u32::from_be_bytes([th[8], th[9], th[10], th[11]]), isn + 1);
            assert_eq!((th[12], th[13]), (8 << 4, 0x12), "doff 8, SYN+ACK");
            let mut want = vec![2, 4, (want_mss >> 8) as u8, want_mss as u8];
            want.extend_from_slice(if ws.is_some() {
                &[1, 3, 3, 7]
            } else {
                &[1, 1, 1, 1]
            });
            want.extend_from_slice(if sack { &[1, 1, 4, 2] } else { &[1, 1, 1, 1] });
            assert_eq!(&th[20..32], &want[..], "{src} {ws:?} {sack}");
            let cookie = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
            assert_eq!(cookie & 0xf, u32::from(ws.unwrap_or(15)));
            assert_eq!(cookie >> 8 & 1, u32::from(sack));
            let (again, out2, _) = sys::test_run(&l._prog, &syn, 1).expect("run");
            assert_eq!(
                (again, &out2[18 + l3..22 + l3]),
                (3, &th[4..8]),
                "same SYN, same cookie"
            );
        }
        let sent = l.percpu_sum("stats", 8).expect("stats");
        assert_eq!(sent, 12);
        // A tuple with a socket of its own (an established connection
        // here; a TIME_WAIT left by a closed one alike): the kernel gets
        // the SYN. A port without a listener: the kernel resets it.
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status();
        assert!(up.is_ok_and(|s| s.success()), "lo up");
        let client = std::net::TcpStream::connect("127.0.0.1:8080").expect("connect");
        let local = client.local_addr().expect("local address");
        l.served_ports(&[8080, 8081], &[]).expect("ports");
        for (sport, dport) in [(local.port(), 8080), (40000, 8081)] {
            let p = Packet {
                src: "127.0.0.1".parse().expect("addr"),
                dst: "127.0.0.1".parse().expect("addr"),
                proto: TCP,
                src_port: sport,
                dst_port: dport,
                tcp_flags: 0x02,
            };
            let (v, _, _) =
                sys::test_run(&l._prog, &frame_with(&p, 1, &[2, 4, 5, 180]), 1).expect("run");
            assert_eq!(v, 2, "XDP_PASS for {sport} -> {dport}");
        }
        assert_eq!(l.percpu_sum("stats", 8).expect("stats"), 12, "no cookie");
    }

    /// `n` drop rules for sources and ports the measured packets never
    /// have: the rules a lookup must get past.
    fn other_rules(n: usize) -> Vec<Rule> {
        (0..n)
            .map(|i| Rule {
                src: vec![
                    crate::cidr::Cidr::parse(&format!("10.{}.{}.0/24", i / 250, i % 250))
                        .expect("cidr"),
                ],
                dst_ports: vec![(1000 + i as u16, 1000 + i as u16)],
                action: Some(Action::Drop),
                ..Default::default()
            })
            .collect()
    }

    /// What a packet costs in the kernel, 10 rules against 1,000, the
    /// deciding rule last: printed (not timed: run with --nocapture).
    #[test]
    fn cost_per_packet() {
        let Some(mut l) = loaded() else { return };
        l.served_ports(&[8080], &[]).expect("ports");
        let syn = Packet {
            src: "10.77.0.3".parse().expect("addr"),
            dst: "10.77.0.1".parse().expect("addr"),
            proto: TCP,
            src_port: 40000,
            dst_port: 8080,
            tcp_flags: 0x02,
        };
        for n in [10usize, 1000] {
            let mut rules = other_rules(n - 1);
            rules.push(Rule {
                src: vec![crate::cidr::Cidr::parse("10.77.0.3").expect("cidr")],
                action: Some(Action::Drop),
                ..Default::default()
            });
            l.write(&tables::build(&rules, Action::Allow).expect("tables"), 0)
                .expect("write");
            let (v, _, ns) = sys::test_run(&l._prog, &frame(&syn, 1), 2_000_000).expect("run");
            assert_eq!(v, 1);
            eprintln!("XDP shield: {n} rules, the last decides: {ns} ns per packet");
        }
        // The DDoS vectors on add their classification: a SYN goes through
        // the SYN, half-open and sweep vectors first. Counting only, so
        // that the ACL still runs after them (past a vector's limit, the
        // frame would be dropped before the ACL, which costs less).
        let mut counting = crate::shield::ddos::Spec::default();
        for v in &mut counting.vectors {
            v.action = crate::shield::ddos::Action::Count;
        }
        let mut st = State {
            loaded: Some(l),
            spec: Some(Spec {
                interfaces: Vec::new(),
                mode: Mode::Auto,
                syn_per_source: 0,
                syn_cookies: false,
                ddos: Some(counting),
            }),
            ..State::default()
        };
        ddos::configure(&mut st).expect("DDoS settings");
        let Some(mut l) = st.loaded.take() else {
            return;
        };
        let (v, _, ns) = sys::test_run(&l._prog, &frame(&syn, 1), 2_000_000).expect("run");
        assert_eq!(v, 1, "still dropped by the last rule");
        let syns = l.percpu_sum("ddos_cnt", 2 * 5).expect("counter");
        assert!(syns >= 2_000_000, "the SYN vector counted {syns}");
        eprintln!("XDP shield: 1000 rules and the DDoS vectors: {ns} ns per packet");
        // A SYN answered with a cookie, the 1,000 rules allowing it: in a
        // network namespace of its own with a listener, as XDP answers
        // only where the listener alone knows the tuple.
        std::thread::spawn(move || {
            // SAFETY: unshare affects this thread only.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
            let _listener = std::net::TcpListener::bind("[::]:8080").expect("listen");
            let mut rules = other_rules(999);
            rules.push(Rule {
                action: Some(Action::Allow),
                ..Default::default()
            });
            let tables = tables::build(&rules, Action::Allow).expect("tables");
            l.cookies = true;
            l.write(&tables, 0).expect("write");
            ddos::configure(&mut State::default()).expect("no DDoS settings");
            // One run per call: the program rewrites the frame, and a
            // repeated run would see its own SYN+ACK.
            let syn_frame = frame(&syn, 1);
            let (mut total, n) = (0u64, 20_000u64);
            for _ in 0..n {
                let (v, _, ns) = sys::test_run(&l._prog, &syn_frame, 1).expect("run");
                assert_eq!(v, 3, "a SYN+ACK");
                total += u64::from(ns);
            }
            // The same way, a SYN the last rule drops: what one run per
            // call adds to any path, to compare with.
            let drop = crate::cidr::Cidr::parse("10.77.0.3").expect("cidr");
            rules.insert(999, Rule { src: vec![drop], action: Some(Action::Drop), ..Default::default() });
            l.write(&tables::build(&rules, Action::Allow).expect("tables"), 0)
                .expect("write");
            let mut dropped = 0u64;
            for _ in 0..n {
                let (v, _, ns) = sys::test_run(&l._prog, &syn_frame, 1).expect("run");
                assert_eq!(v, 1, "dropped");
                dropped += u64::from(ns);
            }
            eprintln!(
                "XDP shield: one run per call, 1000 rules: a SYN cookie {} ns, a drop {} ns per packet",
                total / n,
                dropped / n
            );
        })
        .join()
        .expect("the cookie measurement");
    }
}
