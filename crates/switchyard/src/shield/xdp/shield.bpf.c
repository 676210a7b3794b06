// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// Switchyard's shield in XDP (issue 12): the `[shield]` ACL evaluated on
// the packet before the kernel's stack sees it, with the same rules and
// the same semantics as at accept (shield/acl.rs), a per-source SYN limit,
// and SYN cookies answered here and completed by the tc program at the end
// (shield_tc) with bpf_sk_assign_tcp_reqsk.
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
#define SET_LOG 517
#define PORTS_PER_GEN (2 * 65536)

#define TCP_LISTEN 10

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
#define ST_COOKIE_SENT 8
#define ST_COOKIE_OK 9
#define ST_COOKIE_BAD 10
#define ST_COOKIE_REFUSED 11
#define ST_REJECTED_ICMP 12
#define ST_ICMP_LIMITED 13
#define ST_LOGGED 14
#define ST_LOG_SUPPRESSED 15
#define N_STATS 16

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
	// Answer SYNs with cookies here (XDP), completed by shield_tc.
	__u32 syn_cookies;
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

// ICMP errors sent for rejected datagrams in the current second, as the
// kernel limits its own (net.ipv4.icmp_msgs_per_sec): a flood of spoofed
// datagrams must not make Switchyard a reflector.
#define ICMP_PER_SEC 1000

// A one-second window shared by every CPU (so a budget holds for the
// machine, not per CPU): the ICMP errors', the log lines', and each DDoS
// vector's.
struct window {
	__u64 sec;
	__u64 count;
};
struct map_def SEC("maps") icmp_rate = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct window), 1, 0 };

// `log` rules matched in XDP, for user space (shield/xdp/matches.rs) to write
// as log lines: at most LOG_PER_SEC a second, the rest counted.
#define LOG_PER_SEC 100
struct log_event {
	__u32 rule;
	__u8 v6;
	__u8 proto;
	__u8 flags;
	__u8 pad;
	__u16 sport;
	__u16 dport;
	__u8 src[16];
	__u8 dst[16];
};
struct map_def SEC("maps") log_ring = { BPF_MAP_TYPE_RINGBUF, 0, 0, 64 * 1024, 0 };
struct map_def SEC("maps") log_rate = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct window), 1, 0 };

// The SYN cookie key (SipHash), random per load.
struct map_def SEC("maps") cookie_key = { BPF_MAP_TYPE_ARRAY, 4, 16, 1, 0 };

char LICENSE[] SEC("license") = "GPL";

struct pkt {
	__u8 v6;
	__u8 proto;
	__u8 flags;
	__u16 sport; // host order
	__u16 dport;
	__u16 mss;
	__u8 wscale;
	__u8 sack;
	__u32 isn;
	__u8 src[16];
	__u8 dst[16];
};

static __always_inline void count(void *map, __u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(map, &slot);
	if (v)
		*v += 1;
}

// The current second, from the coarse clock (a tick is plenty here).
static __always_inline __u64 now_sec(void)
{
	return bpf_ktime_get_coarse_ns() / 1000000000ULL;
}

// One more in window `w` in second `sec`; whether it is within `limit`.
// Two CPUs may both start a new second: a few more or less in one
// window, never a lasting error.
static __always_inline int within(struct window *w, __u64 sec, __u64 limit)
{
	if (w->sec != sec) {
		w->sec = sec;
		w->count = 0;
	}
	__sync_fetch_and_add(&w->count, 1);
	return w->count <= limit;
}

#include "ddos.bpf.h"

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

// Hands a `log` rule's match to user space, within the budget.
static __always_inline int log_match(struct pkt *p, __u32 rule)
{
	__u32 zero = 0;
	struct window *w = bpf_map_lookup_elem(&log_rate, &zero);
	if (!w)
		return 0;
	if (!within(w, now_sec(), LOG_PER_SEC)) {
		count(&stats, ST_LOG_SUPPRESSED);
		return 0;
	}
	// Written in place in the ring: no event on the stack, which cost the
	// verifier more than its million instructions.
	struct log_event *ev = bpf_ringbuf_reserve(&log_ring, sizeof(*ev), 0);
	if (!ev) {
		count(&stats, ST_LOG_SUPPRESSED);
		return 0;
	}
	ev->rule = rule;
	ev->v6 = p->v6;
	ev->proto = p->proto;
	ev->flags = p->flags;
	ev->pad = 0;
	ev->sport = p->sport;
	ev->dport = p->dport;
	__builtin_memcpy(ev->src, p->src, 16);
	__builtin_memcpy(ev->dst, p->dst, 16);
	bpf_ringbuf_submit(ev, 0);
	count(&stats, ST_LOGGED);
	return 0;
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
		    *rj = bitset(base + SET_REJECT), *lg = bitset(base + SET_LOG);
	if (!s || !d || !sp || !dp || !fam || !pr || !fl || !al || !dr || !rj || !lg)
		return ACT_ALLOW;
	__u32 words = gc->words;
	int action = -1;
	// In the scratch map, not a register: see struct ddos_scratch.
	struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
	if (!t)
		return ACT_ALLOW;
	t->log_rule = 0;
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
			// The first matching `log` rule is said (the others are
			// counted): one more loop here would cost the verifier
			// more than its million instructions.
			__u64 logged = noted & lg->w[w];
			if (logged && !*(volatile __u32 *)&t->log_rule)
				t->log_rule = w * 64 + ctz64(logged) + 1;
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
	__u32 logged = *(volatile __u32 *)&t->log_rule;
	if (logged)
		log_match(p, logged - 1);
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
	for (int i = 0; i < 16; i++)
		if (i < words)
			s += w[i];
	return s;
}

// SipHash-2-4 of two words: the SYN cookie's MAC.
#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
	do {                                                                   \
		v0 += v1;                                                      \
		v1 = ROTL(v1, 13);                                             \
		v1 ^= v0;                                                      \
		v0 = ROTL(v0, 32);                                             \
		v2 += v3;                                                      \
		v3 = ROTL(v3, 16);                                             \
		v3 ^= v2;                                                      \
		v0 += v3;                                                      \
		v3 = ROTL(v3, 21);                                             \
		v3 ^= v0;                                                      \
		v2 += v1;                                                      \
		v1 = ROTL(v1, 17);                                             \
		v1 ^= v2;                                                      \
		v2 = ROTL(v2, 32);                                             \
	} while (0)

static __always_inline __u64 siphash2(__u64 a, __u64 b, __u64 k0, __u64 k1)
{
	__u64 v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
	__u64 v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
	__u64 m = 16ULL << 56;
	v3 ^= a;
	SIPROUND;
	SIPROUND;
	v0 ^= a;
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v3 ^= m;
	SIPROUND;
	SIPROUND;
	v0 ^= m;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

// The cookie (our ISN):
//   | 31 ... 9: MAC | 8: SACK | 7 6: time slot & 3 | 5 4: MSS index |
//   | 3 ... 0: the client's window scale, 15 for none |
// MAC = SipHash(addresses, client ISN and ports; key ^ the low 9 bits,
// key ^ time slot), a slot being 2^36 ns (about 69 s); a cookie is good in
// its slot and the next. Timestamps are not offered: the cookie has no
// room for them.
#define COOKIE_MAC 0xfffffe00
#define NO_WSCALE 15
// The window scale we offer, as Linux picks for its default buffers.
#define OUR_WSCALE 7
// The MSS table, four 16-bit entries packed in an immediate (constant
// arrays would need a .rodata map the loader does not make).
#define MSS_V4 (1460ULL << 48 | 1440ULL << 32 | 1300ULL << 16 | 536ULL)
#define MSS_V6 (8940ULL << 48 | 1440ULL << 32 | 1420ULL << 16 | 1220ULL)

static __always_inline __u16 mss_at(int v6, __u32 i)
{
	return ((v6 ? MSS_V6 : MSS_V4) >> (16 * (i & 3))) & 0xffff;
}

static __always_inline __u32 fold16(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;
	return w[0] ^ w[1] ^ w[2] ^ w[3];
}

static __always_inline __u32 cookie_mac(const __u8 *src, const __u8 *dst, __u32 isn, __u16 sport,
					__u16 dport, __u64 slot, __u32 low)
{
	__u32 zero = 0;
	__u64 *k = bpf_map_lookup_elem(&cookie_key, &zero);
	if (!k)
		return 0;
	__u64 a = (__u64)fold16(src) << 32 | fold16(dst);
	__u64 b = (__u64)isn << 32 | (__u32)sport << 16 | dport;
	return (__u32)siphash2(a, b, k[0] ^ (low & ~COOKIE_MAC), k[1] ^ slot) & COOKIE_MAC;
}

// Turns the SYN in the frame into a reply back to its sender (XDP_TX):
// addresses and ports swapped, the SYN's options and payload cut off.
// `cookie` 0: a RST+ACK; otherwise a SYN+ACK with that ISN, an MSS
// option, and window scaling and SACK where the cookie says the client
// offered them. Returns 0, or -1 where the frame cannot be rewritten (IPv4
// options): the caller drops it then.
static __always_inline int make_reply(struct xdp_md *ctx, int v6, __u32 cookie, __u16 mss)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int l3 = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	int tl = cookie ? 32 : 20;
	if ((void *)(eth + 1) + l3 + sizeof(struct tcphdr) > end)
		return -1;
	if (!v6 && ((struct iphdr *)(eth + 1))->ihl != 5)
		return -1;
	int want = sizeof(*eth) + l3 + tl;
	int delta = want - (int)(end - data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
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
		ip6->payload_len = bpf_htons(tl);
		ip6->hop_limit = 64;
		pseudo = sum16(&ip6->saddr, 8) + sum16(&ip6->daddr, 8) + bpf_htons(IPPROTO_TCP) +
			 bpf_htons(tl);
	} else {
		struct iphdr *ip = (void *)(eth + 1);
		__u32 a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tot_len = bpf_htons(sizeof(struct iphdr) + tl);
		ip->ttl = 64;
		ip->frag_off = bpf_htons(0x4000); // DF
		ip->check = 0;
		ip->check = fold(sum16(ip, 10));
		pseudo = sum16(&ip->saddr, 2) + sum16(&ip->daddr, 2) + bpf_htons(IPPROTO_TCP) +
			 bpf_htons(tl);
	}
	__u16 port = th->source;
	th->source = th->dest;
	th->dest = port;
	// The SYN takes one sequence number.
	th->ack_seq = bpf_htonl(bpf_ntohl(th->seq) + 1);
	th->seq = bpf_htonl(cookie);
	th->urg_ptr = 0;
	th->check = 0;
	if (cookie) {
		__u8 *opt = (__u8 *)(th + 1);
		if ((void *)(opt + 12) > end)
			return -1;
		((__u8 *)th)[12] = 8 << 4; // doff 8: 12 bytes of options
		((__u8 *)th)[13] = 0x12;   // SYN, ACK
		th->window = bpf_htons(65535);
		opt[0] = 2;
		opt[1] = 4;
		opt[2] = mss >> 8;
		opt[3] = mss & 0xff;
		// NOP, window scale; NOP, NOP, SACK permitted; NOPs where not.
		__u32 ws = cookie & 0xf;
		opt[4] = 1;
		opt[5] = ws == NO_WSCALE ? 1 : 3;
		opt[6] = ws == NO_WSCALE ? 1 : 3;
		opt[7] = ws == NO_WSCALE ? 1 : OUR_WSCALE;
		opt[8] = 1;
		opt[9] = 1;
		opt[10] = cookie & 0x100 ? 4 : 1;
		opt[11] = cookie & 0x100 ? 2 : 1;
		th->check = fold(pseudo + sum16(th, 16));
	} else {
		((__u8 *)th)[12] = 5 << 4; // doff 5, no options
		((__u8 *)th)[13] = 0x14;   // RST, ACK
		th->window = 0;
		th->check = fold(pseudo + sum16(th, 10));
	}
	return 0;
}

// Rewrites a UDP datagram into the ICMP error a closed port answers with
// (IPv4: destination unreachable, port unreachable; IPv6: destination
// unreachable, port unreachable), quoting its IP header and first 8
// bytes, addressed back to its sender. Returns 0, or -1 where the frame
// cannot be rewritten (IPv4 options): the caller drops it then.
static __always_inline int make_unreachable(struct xdp_md *ctx, int v6)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int l3 = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	if ((void *)(eth + 1) + l3 + 8 > end)
		return -1;
	if (!v6 && ((struct iphdr *)(eth + 1))->ihl != 5)
		return -1;
	// New IP and ICMP headers go in front; the datagram's own Ethernet
	// header then sits where the quoted IP header must follow them.
	if (bpf_xdp_adjust_head(ctx, -(l3 + 8)))
		return -1;
	int total = sizeof(struct ethhdr) + 2 * (l3 + 8);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	int delta = total - (int)(end - data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	// The IPv4 frame's length; IPv6's, longer, is checked below.
	if (data + sizeof(struct ethhdr) + 2 * (sizeof(struct iphdr) + 8) > end)
		return -1;
	struct ethhdr *neth = data;
	struct ethhdr *old = data + l3 + 8;
	__builtin_memcpy(neth->h_dest, old->h_source, ETH_ALEN);
	__builtin_memcpy(neth->h_source, old->h_dest, ETH_ALEN);
	neth->h_proto = old->h_proto;
	if (v6) {
		if (data + sizeof(struct ethhdr) + 2 * (sizeof(struct ipv6hdr) + 8) > end)
			return -1;
		struct ipv6hdr *ip6 = (void *)(neth + 1);
		struct ipv6hdr *q = (void *)(old + 1);
		__u8 *icmp = (void *)(ip6 + 1);
		*(__u32 *)ip6 = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons(8 + l3 + 8);
		ip6->nexthdr = 58;
		ip6->hop_limit = 64;
		ip6->saddr = q->daddr;
		ip6->daddr = q->saddr;
		__builtin_memset(icmp, 0, 8);
		icmp[0] = 1; // destination unreachable
		icmp[1] = 4; // port unreachable
		__u64 sum = sum16(&ip6->saddr, 8) + sum16(&ip6->daddr, 8) + bpf_htons(58) +
			    bpf_htons(8 + l3 + 8) + sum16(icmp, 16) + sum16(icmp + 32, 12);
		*(__u16 *)(icmp + 2) = fold(sum);
	} else {
		struct iphdr *ip = (void *)(neth + 1);
		struct iphdr *q = (void *)(old + 1);
		__u8 *icmp = (void *)(ip + 1);
		*(__u8 *)ip = 0x45;
		ip->tos = 0;
		ip->tot_len = bpf_htons(sizeof(struct iphdr) + 8 + l3 + 8);
		ip->id = 0;
		ip->frag_off = 0;
		ip->ttl = 64;
		ip->protocol = IPPROTO_ICMP;
		ip->saddr = q->daddr;
		ip->daddr = q->saddr;
		ip->check = 0;
		ip->check = fold(sum16(ip, 10));
		__builtin_memset(icmp, 0, 8);
		icmp[0] = 3; // destination unreachable
		icmp[1] = 3; // port unreachable
		*(__u16 *)(icmp + 2) = fold(sum16(icmp, 16) + sum16(icmp + 32, 2));
	}
	return 0;
}

// Whether one more ICMP error fits this second's budget.
static __always_inline int icmp_allowed(void)
{
	__u32 zero = 0;
	struct window *w = bpf_map_lookup_elem(&icmp_rate, &zero);
	return w && within(w, now_sec(), ICMP_PER_SEC);
}

// Whether only the listener knows this SYN's four-tuple. A socket of its
// own (TIME_WAIT after a connection Switchyard closed, whose port the
// client reuses) must see the SYN itself: the kernel then recycles the
// TIME_WAIT, where an XDP cookie would be completed by nobody (tc leaves
// tuples with a socket alone) and the client would hang. No listener at
// all: the kernel answers with its reset.
static __always_inline int only_listener(struct xdp_md *ctx, struct pkt *p)
{
	struct bpf_sock_tuple t = {};
	__u32 size;
	if (p->v6) {
		__builtin_memcpy(t.ipv6.saddr, p->src, 16);
		__builtin_memcpy(t.ipv6.daddr, p->dst, 16);
		t.ipv6.sport = bpf_htons(p->sport);
		t.ipv6.dport = bpf_htons(p->dport);
		size = sizeof(t.ipv6);
	} else {
		__builtin_memcpy(&t.ipv4.saddr, p->src + 12, 4);
		__builtin_memcpy(&t.ipv4.daddr, p->dst + 12, 4);
		t.ipv4.sport = bpf_htons(p->sport);
		t.ipv4.dport = bpf_htons(p->dport);
		size = sizeof(t.ipv4);
	}
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	int listener = sk->state == TCP_LISTEN;
	bpf_sk_release(sk);
	return listener;
}

static __always_inline struct cfg *active_cfg(void)
{
	__u32 zero = 0;
	struct cfg *c0 = bpf_map_lookup_elem(&cfg, &zero);
	if (!c0)
		return 0;
	__u32 gslot = (c0->gen & 1) + 1;
	return bpf_map_lookup_elem(&cfg, &gslot);
}

SEC("xdp")
int shield(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct pkt p = {};
	void *l4;

	__u32 zero = 0;
	struct ddos_scratch *verdict = bpf_map_lookup_elem(&ddos_tmp, &zero);
	if (verdict) {
		verdict->drop = 0;
		ddos(ctx);
		if (verdict->drop)
			return XDP_DROP;
	}
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
		p.isn = bpf_ntohl(th->seq);
		// The client's MSS (else the minimum), window scale and SACK:
		// the MSS must come first (as every common stack sends it); the
		// others are read from the layouts of Linux (with and without
		// timestamps), Windows and macOS. A walk over the options would
		// cost the verifier too much (a million instructions); another
		// layout gets no window scaling and no SACK, which is safe.
		p.mss = 536;
		p.wscale = NO_WSCALE;
		__u8 *o = (__u8 *)(th + 1);
		__u32 olen = (((__u8 *)th)[12] >> 4) * 4 - 20;
		if (olen >= 4 && (void *)(o + 4) <= end && o[0] == 2 && o[1] == 4)
			p.mss = (__u16)o[2] << 8 | o[3];
		if (olen >= 20 && (void *)(o + 20) <= end && o[4] == 4 && o[5] == 2 && o[6] == 8 &&
		    o[7] == 10 && o[16] == 1 && o[17] == 3 && o[18] == 3) {
			// Linux: MSS, SACK permitted, timestamps, NOP, window scale.
			p.sack = 1;
			p.wscale = o[19];
		} else if (olen >= 12 && (void *)(o + 12) <= end && o[4] == 1 && o[5] == 1 &&
			   o[6] == 4 && o[7] == 2 && o[8] == 1 && o[9] == 3 && o[10] == 3) {
			// Linux without timestamps: MSS, NOP, NOP, SACK, NOP, WS.
			p.sack = 1;
			p.wscale = o[11];
		} else if (olen >= 12 && (void *)(o + 12) <= end && o[4] == 1 && o[5] == 3 &&
			   o[6] == 3) {
			// Windows: MSS, NOP, WS, NOP, NOP, SACK; macOS: MSS, NOP,
			// WS, NOP, NOP, timestamps, SACK, EOL, EOL.
			p.wscale = o[7];
			if (o[8] == 1 && o[9] == 1 && o[10] == 4 && o[11] == 2)
				p.sack = 1;
			else if (olen >= 24 && (void *)(o + 24) <= end && o[8] == 1 && o[9] == 1 &&
				 o[10] == 8 && o[11] == 10 && o[20] == 4 && o[21] == 2)
				p.sack = 1;
		}
		if (p.wscale > 14 && p.wscale != NO_WSCALE)
			p.wscale = 14;
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
		if (p.proto == IPPROTO_TCP && make_reply(ctx, p.v6, 0, 0) == 0) {
			count(&stats, ST_REJECTED);
			return XDP_TX;
		}
		// A datagram is answered as a closed port would be, within the
		// ICMP budget; past it, or where it cannot be rewritten, dropped.
		if (p.proto == IPPROTO_UDP) {
			if (!icmp_allowed()) {
				count(&stats, ST_ICMP_LIMITED);
			} else if (make_unreachable(ctx, p.v6) == 0) {
				count(&stats, ST_REJECTED_ICMP);
				return XDP_TX;
			}
		}
		count(&stats, ST_REJECT_DROPPED);
		return XDP_DROP;
	}
	if (p.proto == IPPROTO_TCP) {
		count(&stats, ST_SYN);
		struct cfg *gc = active_cfg();
		if (gc && syn_limited(&p, gc->syn_per_sec)) {
			count(&stats, ST_SYN_LIMITED);
			return XDP_DROP;
		}
		__u32 z = 0;
		struct ddos_cfg *dc = bpf_map_lookup_elem(&ddos_cfg, &z);
		int cookies = gc && (gc->syn_cookies || (dc && dc->on && dc->cookies_now));
		if (cookies && only_listener(ctx, &p)) {
			__u32 mi = 0;
			if (p.mss >= mss_at(p.v6, 1))
				mi = 1;
			if (p.mss >= mss_at(p.v6, 2))
				mi = 2;
			if (p.mss >= mss_at(p.v6, 3))
				mi = 3;
			__u64 slot = bpf_ktime_get_ns() >> 36;
			__u32 low = (__u32)p.sack << 8 | (__u32)(slot & 3) << 6 | mi << 4 | p.wscale;
			__u32 c = cookie_mac(p.src, p.dst, p.isn, p.sport, p.dport, slot, low) | low;
			// Our own MSS: the client's class, within the interface's
			// MTU.
			__u32 mtu = 0;
			__u16 ours = mss_at(p.v6, mi);
			if (bpf_check_mtu(ctx, 0, &mtu, 0, 0) >= 0 && mtu > 100 &&
			    mtu - (p.v6 ? 60 : 40) < ours)
				ours = mtu - (p.v6 ? 60 : 40);
			if (make_reply(ctx, p.v6, c, ours) == 0) {
				count(&stats, ST_COOKIE_SENT);
				return XDP_TX;
			}
		}
	}
	count(&stats, ST_ALLOWED);
	return XDP_PASS;
}

// tc ingress: the ACK that completes a handshake XDP answered with a
// cookie. No socket but the listener knows the connection; a good cookie
// becomes a request socket the kernel completes (bpf_sk_assign_tcp_reqsk,
// Linux 6.10), as if it had issued the cookie itself.
struct bpf_tcp_req_attrs {
	__u32 rcv_tsval;
	__u32 rcv_tsecr;
	__u16 mss;
	__u8 rcv_wscale;
	__u8 snd_wscale;
	__u8 ecn_ok;
	__u8 wscale_ok;
	__u8 sack_ok;
	__u8 tstamp_ok;
	__u8 usec_ts_ok;
	__u8 reserved[3];
};

struct sock;
extern int bpf_sk_assign_tcp_reqsk(struct __sk_buff *skb, struct sock *sk,
				   struct bpf_tcp_req_attrs *attrs, int attrs__sz) __ksym;

#define TC_ACT_OK 0

SEC("tc")
int shield_tc(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct bpf_sock_tuple t = {};
	__u8 src[16] = {}, dst[16] = {};
	struct tcphdr *th;
	__u32 tsize;
	int v6 = 0;

	if ((void *)(eth + 1) > end)
		return TC_ACT_OK;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_TCP)
			return TC_ACT_OK;
		th = (void *)(ip + 1);
		if ((void *)(th + 1) > end)
			return TC_ACT_OK;
		t.ipv4.saddr = ip->saddr;
		t.ipv4.daddr = ip->daddr;
		t.ipv4.sport = th->source;
		t.ipv4.dport = th->dest;
		tsize = sizeof(t.ipv4);
		src[10] = src[11] = dst[10] = dst[11] = 0xff;
		__builtin_memcpy(src + 12, &ip->saddr, 4);
		__builtin_memcpy(dst + 12, &ip->daddr, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			return TC_ACT_OK;
		th = (void *)(ip6 + 1);
		if ((void *)(th + 1) > end)
			return TC_ACT_OK;
		__builtin_memcpy(t.ipv6.saddr, &ip6->saddr, 16);
		__builtin_memcpy(t.ipv6.daddr, &ip6->daddr, 16);
		t.ipv6.sport = th->source;
		t.ipv6.dport = th->dest;
		tsize = sizeof(t.ipv6);
		__builtin_memcpy(src, &ip6->saddr, 16);
		__builtin_memcpy(dst, &ip6->daddr, 16);
		v6 = 1;
	} else {
		return TC_ACT_OK;
	}
	// A bare ACK (no SYN, RST or FIN) to a vserver port.
	if ((((__u8 *)th)[13] & 0x17) != 0x10)
		return TC_ACT_OK;
	__u32 served_at = bpf_ntohs(th->dest);
	__u32 *on = bpf_map_lookup_elem(&served, &served_at);
	if (!on || !*on)
		return TC_ACT_OK;
	struct cfg *gc = active_cfg();
	__u32 z = 0;
	struct ddos_cfg *dc = bpf_map_lookup_elem(&ddos_cfg, &z);
	// Checked whenever XDP may have issued cookies: also after a SYN
	// flood's detection ended, for handshakes still in flight.
	if (!gc || !(gc->syn_cookies || (dc && dc->on && dc->cookies_armed)))
		return TC_ACT_OK;
	__u32 cookie = bpf_ntohl(th->ack_seq) - 1;
	__u32 isn = bpf_ntohl(th->seq) - 1;
	__u16 sport = bpf_ntohs(th->source), dport = bpf_ntohs(th->dest);

	struct bpf_sock *skc = bpf_skc_lookup_tcp(skb, &t, tsize, BPF_F_CURRENT_NETNS, 0);
	if (!skc)
		return TC_ACT_OK;
	// Only where no connection exists: the listener answers.
	if (skc->state != TCP_LISTEN)
		goto release;
	__u64 now = bpf_ktime_get_ns() >> 36;
	__u64 slot = (now & 3) == ((cookie >> 6) & 3) ? now : now - 1;
	if (((slot & 3) != ((cookie >> 6) & 3)) ||
	    cookie_mac(src, dst, isn, sport, dport, slot, cookie) != (cookie & COOKIE_MAC)) {
		count(&stats, ST_COOKIE_BAD);
		goto release;
	}
	struct bpf_tcp_req_attrs attrs = {};
	attrs.mss = mss_at(v6, cookie >> 4);
	if ((cookie & 0xf) != NO_WSCALE) {
		attrs.wscale_ok = 1;
		attrs.snd_wscale = cookie & 0xf;
		attrs.rcv_wscale = OUR_WSCALE;
	}
	attrs.sack_ok = (cookie >> 8) & 1;
	struct sock *sk = (struct sock *)bpf_skc_to_tcp_sock(skc);
	if (!sk || bpf_sk_assign_tcp_reqsk(skb, sk, &attrs, sizeof(attrs)) < 0) {
		count(&stats, ST_COOKIE_REFUSED);
		goto release;
	}
	count(&stats, ST_COOKIE_OK);
release:
	bpf_sk_release(skc);
	return TC_ACT_OK;
}
