//! The compiled ACL (acl.rs's rules, address lists expanded) as the XDP
//! program's maps hold it: one generation's contents, in local indexes
//! (the loader adds the generation's base).
//!
//! - Bit sets of `WORDS` words; identical sets are stored once.
//! - Fixed sets: per protocol (0..256), per TCP flags byte (256..512),
//!   per family (512, 513), and the rules whose action is allow, drop,
//!   reject (514..517).
//! - Ports: per source port, then per destination port, a set index.
//! - Addresses: per family and field, LPM entries whose set is every rule
//!   matching an address with that longest prefix: the rules naming a
//!   prefix of it, and the rules naming no address in that field. CIDRs
//!   nest or are disjoint, so the longest prefix decides.

use std::collections::HashMap;

use crate::shield::acl::{Action, Rule};
#[cfg(test)]
use crate::shield::acl::{Packet, Verdict};

// Keep in step with shield.bpf.c.
pub const MAX_RULES: usize = 1024;
pub const WORDS: usize = MAX_RULES / 64;
pub const SETS_PER_GEN: u32 = 32768;
pub const SET_PROTO: u32 = 0;
pub const SET_FLAGS: u32 = 256;
pub const SET_FAM4: u32 = 512;
pub const SET_FAM6: u32 = 513;
pub const SET_ALLOW: u32 = 514;
pub const SET_DROP: u32 = 515;
pub const SET_REJECT: u32 = 516;
pub const SET_LOG: u32 = 517;
const FIXED: u32 = 518;
pub const PORTS_PER_GEN: u32 = 2 * 65536;

pub const ACT_ALLOW: u32 = 0;
pub const ACT_DROP: u32 = 1;
pub const ACT_REJECT: u32 = 2;

pub type Bits = [u64; WORDS];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LpmEntry {
    pub v6: bool,
    pub dst: bool,
    pub prefix: u8,
    /// The network, in the family's width (low 32 bits for IPv4).
    pub net: u128,
    pub set: u32,
}

pub struct Tables {
    pub words: u32,
    pub default: u32,
    pub sets: Vec<Bits>,
    pub ports: Vec<u32>,
    pub lpm: Vec<LpmEntry>,
}

pub fn action_code(a: Action) -> u32 {
    match a {
        Action::Drop => ACT_DROP,
        Action::Reject => ACT_REJECT,
        _ => ACT_ALLOW,
    }
}

fn mask(net: u128, prefix: u8, width: u8) -> u128 {
    let keep = if prefix == 0 {
        0
    } else {
        (u128::MAX << (128 - prefix as u32)) >> (128 - width as u32)
    };
    net & keep
}

fn set_bit(b: &mut Bits, i: usize) {
    b[i / 64] |= 1 << (i % 64);
}

struct Dedup {
    sets: Vec<Bits>,
    index: HashMap<Bits, u32>,
}

impl Dedup {
    fn add(&mut self, b: Bits) -> Result<u32, String> {
        if let Some(i) = self.index.get(&b) {
            return Ok(*i);
        }
        let i = self.sets.len() as u32;
        if i >= SETS_PER_GEN {
            return Err(format!(
                "the rules need more than {SETS_PER_GEN} distinct rule sets for their addresses and ports; XDP holds {SETS_PER_GEN}"
            ));
        }
        self.sets.push(b);
        self.index.insert(b, i);
        Ok(i)
    }
}

/// Compiles `rules` (lists already expanded) for the XDP maps.
pub fn build(rules: &[Rule], default: Action) -> Result<Tables, String> {
    if rules.len() > MAX_RULES {
        return Err(format!(
            "{} rules; XDP evaluates at most {MAX_RULES}",
            rules.len()
        ));
    }
    let words = rules.len().div_ceil(64).max(1) as u32;
    let mut fixed = vec![[0u64; WORDS]; FIXED as usize];
    for (i, r) in rules.iter().enumerate() {
        for p in 0..256usize {
            if r.proto.is_empty() || r.proto.contains(&(p as u8)) {
                set_bit(&mut fixed[SET_PROTO as usize + p], i);
            }
        }
        for f in 0..256usize {
            if r.tcp_flags.is_none_or(|(m, v)| f as u8 & m == v) {
                set_bit(&mut fixed[SET_FLAGS as usize + f], i);
            }
        }
        let fam = |v4: bool| {
            let ok = |l: &Vec<crate::cidr::Cidr>| {
                l.is_empty() || l.iter().any(|c| c.net.is_ipv4() == v4)
            };
            ok(&r.src) && ok(&r.dst)
        };
        if fam(true) {
            set_bit(&mut fixed[SET_FAM4 as usize], i);
        }
        if fam(false) {
            set_bit(&mut fixed[SET_FAM6 as usize], i);
        }
        match r.action.unwrap_or(Action::Allow) {
            Action::Allow => set_bit(&mut fixed[SET_ALLOW as usize], i),
            Action::Drop => set_bit(&mut fixed[SET_DROP as usize], i),
            Action::Reject => set_bit(&mut fixed[SET_REJECT as usize], i),
            Action::Log => set_bit(&mut fixed[SET_LOG as usize], i),
            Action::Count => {}
        }
    }
    // Fixed sets keep their places: no deduplication among them.
    let mut d = Dedup {
        sets: fixed,
        index: HashMap::new(),
    };

    // Ports: cut at every range boundary, one set per interval.
    let mut ports = vec![0u32; PORTS_PER_GEN as usize];
    for (field, dst) in [(0usize, false), (1, true)] {
        fn pick(r: &Rule, dst: bool) -> &Vec<(u16, u16)> {
            if dst {
                &r.dst_ports
            } else {
                &r.src_ports
            }
        }
        let ranges = |r| pick(r, dst);
        let mut cuts = vec![0u32, 65536];
        for r in rules {
            for &(lo, hi) in ranges(r) {
                cuts.push(lo as u32);
                cuts.push(hi as u32 + 1);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        for w in cuts.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let mut b = [0u64; WORDS];
            for (i, r) in rules.iter().enumerate() {
                let rs = ranges(r);
                if rs.is_empty()
                    || rs
                        .iter()
                        .any(|(a, z)| (*a as u32..=*z as u32).contains(&lo))
                {
                    set_bit(&mut b, i);
                }
            }
            let s = d.add(b)?;
            for p in lo..hi {
                ports[field * 65536 + p as usize] = s;
            }
        }
    }

    // Addresses.
    let mut lpm = Vec::new();
    for v6 in [false, true] {
        let width: u8 = if v6 { 128 } else { 32 };
        for dst in [false, true] {
            let mut any = [0u64; WORDS];
            let mut direct: HashMap<(u128, u8), Bits> = HashMap::new();
            for (i, r) in rules.iter().enumerate() {
                let list = if dst { &r.dst } else { &r.src };
                if list.is_empty() {
                    set_bit(&mut any, i);
                }
                for c in list {
                    let net = match (c.net, v6) {
                        (std::net::IpAddr::V4(a), false) => u32::from(a) as u128,
                        (std::net::IpAddr::V6(a), true) => u128::from(a),
                        _ => continue,
                    };
                    let p = c.prefix.min(width);
                    set_bit(direct.entry((mask(net, p, width), p)).or_default(), i);
                }
            }
            let mut keys: Vec<(u128, u8)> = direct.keys().copied().collect();
            keys.push((0, 0));
            keys.sort_unstable();
            keys.dedup();
            for (net, prefix) in keys {
                let mut b = any;
                for p in 0..=prefix {
                    if let Some(x) = direct.get(&(mask(net, p, width), p)) {
                        for (o, v) in b.iter_mut().zip(x) {
                            *o |= v;
                        }
                    }
                }
                lpm.push(LpmEntry {
                    v6,
                    dst,
                    prefix,
                    net,
                    set: d.add(b)?,
                });
            }
        }
    }
    Ok(Tables {
        words,
        default: action_code(default),
        sets: d.sets,
        ports,
        lpm,
    })
}

#[cfg(test)]
impl Tables {
    /// What the XDP program decides for `p`, computed from these tables
    /// the way shield.bpf.c does: the tests hold it against acl.rs.
    pub fn check(&self, rules: &[Rule], p: &Packet) -> Verdict {
        let (v6, src, dst) = match (normalise(p.src), normalise(p.dst)) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                (false, u32::from(s) as u128, u32::from(d) as u128)
            }
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
                (true, u128::from(s), u128::from(d))
            }
            _ => unreachable!("mixed families"),
        };
        let width = if v6 { 128 } else { 32 };
        let lookup = |dst_field: bool, a: u128| {
            self.lpm
                .iter()
                .filter(|e| e.v6 == v6 && e.dst == dst_field && mask(a, e.prefix, width) == e.net)
                .max_by_key(|e| e.prefix)
                .map(|e| e.set)
                .expect("a /0 entry")
        };
        let get = |i: u32| &self.sets[i as usize];
        let s = get(lookup(false, src));
        let d = get(lookup(true, dst));
        let sp = get(self.ports[p.src_port as usize]);
        let dp = get(self.ports[65536 + p.dst_port as usize]);
        let fam = get(if v6 { SET_FAM6 } else { SET_FAM4 });
        let pr = get(SET_PROTO + p.proto as u32);
        let fl = get(SET_FLAGS + p.tcp_flags as u32);
        let (al, dr, rj) = (get(SET_ALLOW), get(SET_DROP), get(SET_REJECT));
        let mut noted = Vec::new();
        for w in 0..self.words as usize {
            let m = s[w] & d[w] & sp[w] & dp[w] & fam[w] & pr[w] & fl[w];
            let decide = m & (al[w] | dr[w] | rj[w]);
            let mut n = m & !decide;
            if decide != 0 {
                n &= (decide & decide.wrapping_neg()) - 1;
            }
            while n != 0 {
                noted.push(w * 64 + n.trailing_zeros() as usize);
                n &= n - 1;
            }
            if decide != 0 {
                let i = w * 64 + decide.trailing_zeros() as usize;
                let b = 1u64 << (i % 64);
                let action = if dr[w] & b != 0 {
                    Action::Drop
                } else if rj[w] & b != 0 {
                    Action::Reject
                } else {
                    Action::Allow
                };
                debug_assert_eq!(rules[i].action.unwrap_or(Action::Allow), action);
                return Verdict {
                    action,
                    rule: Some(i),
                    noted,
                };
            }
        }
        Verdict {
            action: match self.default {
                ACT_DROP => Action::Drop,
                ACT_REJECT => Action::Reject,
                _ => Action::Allow,
            },
            rule: None,
            noted,
        }
    }
}

#[cfg(test)]
fn normalise(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(a) => a.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cidr::Cidr;
    use crate::shield::acl::{scan, ICMP, TCP, UDP};
    use std::net::IpAddr;

    pub(crate) struct Rng(pub u64);
    impl Rng {
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn cidr(g: &mut Rng, v6: bool) -> Cidr {
        if v6 {
            let a = (0x2001_0db8u128 << 96) | (g.below(16) as u128) << 80;
            Cidr {
                net: IpAddr::V6(a.into()),
                prefix: 32 + g.below(64) as u8,
            }
        } else {
            let a = 0x0a00_0000u32 | (g.below(1 << 16) as u32) << 8;
            Cidr {
                net: IpAddr::V4(a.into()),
                prefix: 8 + g.below(25) as u8,
            }
        }
    }

    pub(crate) fn rule(g: &mut Rng) -> Rule {
        let mut r = Rule::default();
        let v6 = g.below(4) == 0;
        for _ in 0..g.below(3) {
            r.src.push(cidr(g, v6));
        }
        for _ in 0..g.below(2) {
            r.dst.push(cidr(g, v6));
        }
        if g.below(2) == 0 {
            r.proto.push([TCP, UDP, ICMP][g.below(3) as usize]);
        }
        for _ in 0..g.below(3) {
            let lo = g.below(2000) as u16;
            r.dst_ports.push((lo, lo + g.below(50) as u16));
        }
        if g.below(5) == 0 {
            let lo = g.below(65000) as u16;
            r.src_ports
                .push((lo, lo.saturating_add(g.below(500) as u16)));
        }
        if g.below(6) == 0 {
            let m = g.below(256) as u8;
            r.tcp_flags = Some((m, m & g.below(256) as u8));
        }
        r.action = Some(
            [
                Action::Allow,
                Action::Drop,
                Action::Reject,
                Action::Count,
                Action::Log,
            ][g.below(5) as usize],
        );
        r
    }

    pub(crate) fn packet(g: &mut Rng) -> Packet {
        let v6 = g.below(4) == 0;
        let addr = |g: &mut Rng| -> IpAddr {
            if v6 {
                IpAddr::V6(
                    ((0x2001_0db8u128 << 96)
                        | (g.below(16) as u128) << 80
                        | g.below(1 << 20) as u128)
                        .into(),
                )
            } else {
                IpAddr::V4((0x0a00_0000u32 | g.below(1 << 24) as u32).into())
            }
        };
        Packet {
            src: addr(g),
            dst: addr(g),
            proto: [TCP, UDP, ICMP, 47][g.below(4) as usize],
            src_port: g.below(65536) as u16,
            dst_port: g.below(2100) as u16,
            tcp_flags: g.below(256) as u8,
        }
    }

    /// The XDP tables decide like acl.rs's scan: 1,000 random rules,
    /// 5,000 random packets, for each the action, the deciding rule and
    /// the counted rules before it.
    #[test]
    fn xdp_tables_agree_with_the_scan() {
        let mut g = Rng(0x2545_f491_4f6c_dd1d);
        for (n, packets) in [(10usize, 2000), (1000, 3000)] {
            let rules: Vec<Rule> = (0..n).map(|_| rule(&mut g)).collect();
            let t = build(&rules, Action::Drop).unwrap();
            assert!(t.sets.len() < SETS_PER_GEN as usize);
            let mut decided = 0;
            for _ in 0..packets {
                let p = packet(&mut g);
                let want = scan(&rules, Action::Drop, &p);
                assert_eq!(t.check(&rules, &p), want, "{p:?}");
                decided += usize::from(want.rule.is_some());
            }
            assert!(decided > packets / 200, "{n} rules decided {decided}");
        }
    }

    #[test]
    fn too_many_rules_are_refused() {
        let rules = vec![Rule::default(); MAX_RULES + 1];
        let e = build(&rules, Action::Allow).err().unwrap();
        assert!(e.contains("at most 1024"), "{e}");
    }
}
