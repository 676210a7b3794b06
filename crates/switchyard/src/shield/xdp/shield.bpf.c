// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// Switchyard's shield in XDP (issue 12): the `[shield]` ACL evaluated on
// the packet before the kernel's stack sees it, with the same rules and
// the same semantics as at accept (shield/acl.rs), and a per-source SYN
// limit in front of the kernel's own SYN cookies.
//
// The ACL is the bit-vector design of acl.rs, loaded into maps by
// shield/xdp/tables.rs:
// - source and destination address: an LPM trie per family whose value is
//   the index of a rule bit set (the longest prefix is the set of rules
//   matching the address);
// - ports: an array over 0..65535 of bit set indexes; protocol, TCP
//   flags and the family: bit sets at fixed indexes;
// - the AND of the seven bit sets, lowest set bit first: the first
//   deciding rule wins, count/log rules before it are counted.
// Every table exists twice (generation 0 and 1): user space fills the
// inactive one and flips `cfg[0].gen`, so a reload or a list edit never
// shows a packet half of an old and half of a new rule set.
//
// What is evaluated: TCP SYNs (without ACK) and UDP datagrams to a port a
// vserver listens on; exactly what the accept path sees (a connection's
// first segment, a datagram to a UDP vserver). Everything else goes to the
// kernel untouched: established connections, replies to Switchyard's own
// connections to members, ARP, ICMP, neighbour discovery.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Keep in step with shield/xdp/tables.rs.
#define MAX_RULES 1024
#define WORDS (MAX_RULES / 64)
#define BITSETS_PER_GEN 32768
#define SET_PROTO 0
#define SET_FLAGS 256
#define SET_FAM4 512
#define SET_FAM6 513
#define SET_ALLOW 514
#define SET_DROP 515
#define SET_REJECT 516
#define PORTS_PER_GEN (2 * 65536)

#define ACT_ALLOW 0
#define ACT_DROP 1
#define ACT_REJECT 2

// Slots of `stats`; shield/xdp/mod.rs names them.
#define ST_SEEN 0
#define ST_ALLOWED 1
#define ST_DROPPED 2
#define ST_REJECTED 3
#define ST_REJECT_DROPPED 4
#define ST_SYN 5
#define ST_SYN_LIMITED 6
#define ST_PASSED 7
#define N_STATS 8

// The loader (shield/xdp/elf.rs) reads these from the "maps" section:
// libbpf's old map definition, which needs no BTF to load.
struct map_def {
	__u32 type;
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries;
	__u32 map_flags;
};

struct bits {
	__u64 w[WORDS];
};

struct cfg {
	// Entry 0: the active generation. Entries 1 and 2: that generation's
	// words in use, default action, and the per-source SYN limit.
	__u32 gen;
	__u32 words;
	__u32 default_action;
	__u32 syn_per_sec;
};

struct syn_state {
	__u64 window_ns;
	__u64 count;
};

struct lpm4_key {
	__u32 prefixlen;
	__u8 tag; // generation * 2 + (0 source, 1 destination)
	__u8 addr[4];
};

struct lpm6_key {
	__u32 prefixlen;
	__u8 tag;
	__u8 addr[16];
};

struct map_def SEC("maps") cfg = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct cfg), 3, 0 };
struct map_def SEC("maps") bitsets = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct bits),
				       2 * BITSETS_PER_GEN, 0 };
struct map_def SEC("maps") ports = { BPF_MAP_TYPE_ARRAY, 4, 4, 2 * PORTS_PER_GEN, 0 };
struct map_def SEC("maps") lpm4 = { BPF_MAP_TYPE_LPM_TRIE, sizeof(struct lpm4_key), 4,
				    2 * BITSETS_PER_GEN, BPF_F_NO_PREALLOC };
struct map_def SEC("maps") lpm6 = { BPF_MAP_TYPE_LPM_TRIE, sizeof(struct lpm6_key), 4,
				    2 * BITSETS_PER_GEN, BPF_F_NO_PREALLOC };
// 0: TCP, 1: UDP; times 65536 plus the port: nonzero where a vserver
// listens.
struct map_def SEC("maps") served = { BPF_MAP_TYPE_ARRAY, 4, 4, 2 * 65536, 0 };
// Per rule, then the default at MAX_RULES.
struct map_def SEC("maps") hits = { BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, MAX_RULES + 1, 0 };
struct map_def SEC("maps") stats = { BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, N_STATS, 0 };
// Source address (IPv4 mapped into IPv6) -> SYNs in the current second.
struct map_def SEC("maps") syn_rate = { BPF_MAP_TYPE_LRU_HASH, 16, sizeof(struct syn_state),
					65536, 0 };

char LICENSE[] SEC("license") = "GPL";

struct pkt {
	__u8 v6;
	__u8 proto;
	__u8 flags;
	__u16 sport; // host order
	__u16 dport;
	__u8 src[16];
	__u8 dst[16];
};

static __always_inline void count(void *map, __u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(map, &slot);
	if (v)
		*v += 1;
}

static __always_inline __u32 ctz64(__u64 x)
{
	// No count-trailing-zeros instruction in BPF.
	__u32 n = 0;
	if (!(x & 0xffffffffULL)) {
		n += 32;
		x >>= 32;
	}
	if (!(x & 0xffff)) {
		n += 16;
		x >>= 16;
	}
	if (!(x & 0xff)) {
		n += 8;
		x >>= 8;
	}
	if (!(x & 0xf)) {
		n += 4;
		x >>= 4;
	}
	if (!(x & 0x3)) {
		n += 2;
		x >>= 2;
	}
	if (!(x & 0x1))
		n += 1;
	return n;
}

static __always_inline struct bits *bitset(__u32 i)
{
	return bpf_map_lookup_elem(&bitsets, &i);
}

static __always_inline __u32 lpm_index(struct pkt *p, __u32 gen, int dst)
{
	__u32 *v;
	if (p->v6) {
		struct lpm6_key k = { .prefixlen = 8 + 128, .tag = gen * 2 + dst };
		__builtin_memcpy(k.addr, dst ? p->dst : p->src, 16);
		v = bpf_map_lookup_elem(&lpm6, &k);
	} else {
		struct lpm4_key k = { .prefixlen = 8 + 32, .tag = gen * 2 + dst };
		__builtin_memcpy(k.addr, dst ? p->dst + 12 : p->src + 12, 4);
		v = bpf_map_lookup_elem(&lpm4, &k);
	}
	// Every generation holds a /0 entry per field; a miss means the tables
	// are being written, and the fixed empty set (index 0 of nothing)
	// would be wrong: say "no index".
	return v ? *v : 0xffffffff;
}

// The ACL: returns the action, and counts the deciding rule (or the
// default) and the counting rules before it.
//
// Written for the verifier, which walks every iteration of a bounded loop
// and needs BTF (which this loader does not load) for bpf_loop callbacks:
// - inlined at its one call site;
// - the counting rules are found by testing each bit, not by counting
//   trailing zeros, so each iteration is one branch that rejoins.
static __always_inline int acl(struct pkt *p)
{
	__u32 zero = 0;
	struct cfg *c0 = bpf_map_lookup_elem(&cfg, &zero);
	if (!c0)
		return ACT_ALLOW;
	__u32 gen = c0->gen & 1;
	__u32 gslot = gen + 1;
	struct cfg *gc = bpf_map_lookup_elem(&cfg, &gslot);
	if (!gc)
		return ACT_ALLOW;
	__u32 base = gen * BITSETS_PER_GEN;
	__u32 si = lpm_index(p, gen, 0), di = lpm_index(p, gen, 1);
	if (si == 0xffffffff || di == 0xffffffff)
		return ACT_ALLOW;
	__u32 pi = gen * PORTS_PER_GEN + p->sport;
	__u32 *spi = bpf_map_lookup_elem(&ports, &pi);
	pi = gen * PORTS_PER_GEN + 65536 + p->dport;
	__u32 *dpi = bpf_map_lookup_elem(&ports, &pi);
	if (!spi || !dpi)
		return ACT_ALLOW;
	struct bits *s = bitset(si), *d = bitset(di), *sp = bitset(*spi), *dp = bitset(*dpi);
	struct bits *fam = bitset(base + (p->v6 ? SET_FAM6 : SET_FAM4));
	struct bits *pr = bitset(base + SET_PROTO + p->proto);
	struct bits *fl = bitset(base + SET_FLAGS + p->flags);
	struct bits *al = bitset(base + SET_ALLOW), *dr = bitset(base + SET_DROP),
		    *rj = bitset(base + SET_REJECT);
	if (!s || !d || !sp || !dp || !fam || !pr || !fl || !al || !dr || !rj)
		return ACT_ALLOW;
	__u32 words = gc->words;
	int action = -1;
#pragma clang loop unroll(disable)
	for (__u32 w = 0; w < WORDS; w++) {
		if (w >= words)
			break;
		__u64 m = s->w[w] & d->w[w] & sp->w[w] & dp->w[w] & fam->w[w] & pr->w[w] &
			  fl->w[w];
		if (!m)
			continue;
		__u64 decide = m & (al->w[w] | dr->w[w] | rj->w[w]);
		__u64 noted = m & ~decide;
		__u64 low = decide & -decide;
		if (decide)
			noted &= low - 1;
		if (noted) {
#pragma clang loop unroll(disable)
			for (__u32 k = 0; k < 64; k++)
				if ((noted >> k) & 1)
					count(&hits, w * 64 + k);
		}
		if (decide) {
			count(&hits, w * 64 + ctz64(decide));
			if (dr->w[w] & low)
				action = ACT_DROP;
			else if (rj->w[w] & low)
				action = ACT_REJECT;
			else
				action = ACT_ALLOW;
			break;
		}
	}
	if (action >= 0)
		return action;
	count(&hits, MAX_RULES);
	return gc->default_action;
}

// Per-source SYN limit: more than `limit` SYNs in one second from one
// address are dropped here; the rest reach the kernel, whose SYN cookies
// (net.ipv4.tcp_syncookies) keep its queue from filling.
static __always_inline int syn_limited(struct pkt *p, __u32 limit)
{
	if (!limit)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct syn_state *st = bpf_map_lookup_elem(&syn_rate, p->src);
	if (!st) {
		struct syn_state fresh = { .window_ns = now, .count = 1 };
		bpf_map_update_elem(&syn_rate, p->src, &fresh, BPF_ANY);
		return 0;
	}
	if (now - st->window_ns >= 1000000000ULL) {
		st->window_ns = now;
		st->count = 1;
		return 0;
	}
	st->count += 1;
	return st->count > limit;
}

static __always_inline __u16 fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

static __always_inline __u64 sum16(const void *data, int words)
{
	const __u16 *w = data;
	__u64 s = 0;
#pragma clang loop unroll(full)
	for (int i = 0; i < 10; i++)
		if (i < words)
			s += w[i];
	return s;
}

// Turns the SYN in the frame into a RST+ACK back to its sender (XDP_TX):
// addresses and ports swapped, the SYN's options and payload cut off.
// Returns 0, or -1 where the frame cannot be rewritten (IPv4 options): the
// caller drops it then.
static __always_inline int make_rst(struct xdp_md *ctx, int v6)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int l3 = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	if ((void *)(eth + 1) + l3 + sizeof(struct tcphdr) > end)
		return -1;
	if (!v6 && ((struct iphdr *)(eth + 1))->ihl != 5)
		return -1;
	int want = sizeof(*eth) + l3 + sizeof(struct tcphdr);
	int delta = want - (int)(end - data);
	if (delta < 0 && bpf_xdp_adjust_tail(ctx, delta))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) + l3 + sizeof(struct tcphdr) > end)
		return -1;
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	struct tcphdr *th = (void *)(eth + 1) + l3;
	__u64 pseudo;
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct in6_addr a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->payload_len = bpf_htons(sizeof(struct tcphdr));
		ip6->hop_limit = 64;
		pseudo = sum16(&ip6->saddr, 8) + sum16(&ip6->daddr, 8) +
			 bpf_htons(IPPROTO_TCP) + bpf_htons(sizeof(struct tcphdr));
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		__u32 a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tot_len = bpf_htons(sizeof(struct iphdr) + sizeof(struct tcphdr));
		ip->ttl = 64;
		ip->frag_off = bpf_htons(0x4000); // DF
		ip->check = 0;
		ip->check = fold(sum16(ip, 10));
		pseudo = sum16(&ip->saddr, 2) + sum16(&ip->daddr, 2) + bpf_htons(IPPROTO_TCP) +
			 bpf_htons(sizeof(struct tcphdr));
	}
	__u16 port = th->source;
	th->source = th->dest;
	th->dest = port;
	// The SYN takes one sequence number.
	th->ack_seq = bpf_htonl(bpf_ntohl(th->seq) + 1);
	th->seq = 0;
	((__u8 *)th)[12] = 5 << 4; // doff 5, no options
	((__u8 *)th)[13] = 0x14;   // RST, ACK
	th->window = 0;
	th->urg_ptr = 0;
	th->check = 0;
	th->check = fold(pseudo + sum16(th, 10));
	return 0;
}

SEC("xdp")
int shield(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct pkt p = {};
	void *l4;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return XDP_PASS;
		// Later fragments carry no ports: the kernel reassembles them.
		if (ip->frag_off & bpf_htons(0x1fff))
			return XDP_PASS;
		p.proto = ip->protocol;
		// IPv4 as ::ffff:a.b.c.d, as acl.rs normalises it.
		p.src[10] = p.src[11] = p.dst[10] = p.dst[11] = 0xff;
		__builtin_memcpy(p.src + 12, &ip->saddr, 4);
		__builtin_memcpy(p.dst + 12, &ip->daddr, 4);
		l4 = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		// Extension headers go to the kernel (the accept path sees them).
		p.proto = ip6->nexthdr;
		p.v6 = 1;
		__builtin_memcpy(p.src, &ip6->saddr, 16);
		__builtin_memcpy(p.dst, &ip6->daddr, 16);
		l4 = ip6 + 1;
	} else {
		return XDP_PASS;
	}

	__u32 served_at;
	if (p.proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > end)
			return XDP_PASS;
		p.flags = ((__u8 *)th)[13];
		// Only a connection's first segment, as at accept.
		if ((p.flags & 0x12) != 0x02)
			return XDP_PASS;
		p.sport = bpf_ntohs(th->source);
		p.dport = bpf_ntohs(th->dest);
		served_at = p.dport;
	} else if (p.proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > end)
			return XDP_PASS;
		p.sport = bpf_ntohs(uh->source);
		p.dport = bpf_ntohs(uh->dest);
		served_at = 65536 + p.dport;
	} else {
		return XDP_PASS;
	}
	__u32 *on = bpf_map_lookup_elem(&served, &served_at);
	if (!on || !*on) {
		count(&stats, ST_PASSED);
		return XDP_PASS;
	}
	count(&stats, ST_SEEN);
	int a = acl(&p);
	if (a == ACT_DROP) {
		count(&stats, ST_DROPPED);
		return XDP_DROP;
	}
	if (a == ACT_REJECT) {
		if (p.proto == IPPROTO_TCP && make_rst(ctx, p.v6) == 0) {
			count(&stats, ST_REJECTED);
			return XDP_TX;
		}
		// A UDP datagram is not relayed at accept either.
		count(&stats, ST_REJECT_DROPPED);
		return XDP_DROP;
	}
	if (p.proto == IPPROTO_TCP) {
		count(&stats, ST_SYN);
		__u32 zero = 0;
		struct cfg *c0 = bpf_map_lookup_elem(&cfg, &zero);
		if (c0) {
			__u32 gslot = (c0->gen & 1) + 1;
			struct cfg *gc = bpf_map_lookup_elem(&cfg, &gslot);
			if (gc && syn_limited(&p, gc->syn_per_sec)) {
				count(&stats, ST_SYN_LIMITED);
				return XDP_DROP;
			}
		}
	}
	count(&stats, ST_ALLOWED);
	return XDP_PASS;
}
