// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// The DDoS vectors of report 003 (issue 12), included by shield.bpf.c and
// run on every frame before the ACL: each frame is classified into the
// vectors it belongs to; a vector counts what it sees and, when its action
// is "drop", lets `limit` packets per second through and drops the rest.
// User space (shield/xdp/ddos.rs) reads the counters every second, decides
// what is detected, learns baselines and writes the limits back: this
// program keeps no policy of its own beyond "count, then compare with the
// limit".
//
// Keep the vector numbers in step with shield/ddos.rs (VECTORS).

#define V_IPV4_FRAGMENT 0
#define V_IPV6_FRAGMENT 1
#define V_ICMP_FRAGMENT 2
#define V_ICMPV4_FLOOD 3
#define V_ICMPV6_FLOOD 4
#define V_SYN_FLOOD 5
#define V_SYNACK_FLOOD 6
#define V_SYN_OVERSIZE 7
#define V_NON_TCP 8
#define V_RST_FLOOD 9
#define V_PUSH_FLOOD 10
#define V_HALF_OPEN 11
#define V_WINDOW 12
#define V_UDP_FLOOD 13
#define V_TTL 14
#define V_IP_OPTIONS 15
#define V_HOP_LIMIT 16
#define V_EXT_TOO_LARGE 17
#define V_EXT_FRAMES 18
#define V_EXT_TOO_MANY 19
#define V_OPT_UNKNOWN 20
#define V_OPT_ILLEGAL_LEN 21
#define V_OPT_OVERRUN 22
#define V_BAD_URG 23
#define V_HOST_UNREACH 24
#define V_TIDCMP 25
#define V_SWEEP 26
#define V_EXT_MALFORMED 27
#define N_VEC 28

#define VA_OFF 0
#define VA_COUNT 1
#define VA_DROP 2

// The most IPv6 extension headers walked; one more is "too many" whatever
// the configured maximum, and the rest of the packet is not looked at.
#define EXT_WALK 8

struct ddos_cfg {
	__u32 on;
	__u32 ttl_at_most;
	__u32 hop_limit_at_most;
	__u32 ext_max_bytes;
	__u32 ext_max_headers;
	__u32 syn_max_bytes;
	__u32 window_at_most;
	__u32 sweep_max;
	__u32 sweep_block_s;
	__u32 eph_lo;
	__u32 eph_hi;
	// A vector with action "cookies" is configured and the tc program
	// completes cookies on every interface: tc checks cookies.
	__u32 cookies_armed;
	// One of those vectors is detected now: XDP answers SYNs with
	// cookies (as `syn_cookies = true` does all the time).
	__u32 cookies_now;
};

struct vec_cfg {
	__u32 action;
	__u32 pad;
	__u64 limit;
};

// Distinct destination addresses and ports of a source's new flows in
// the current second, estimated with 256-bit sets.
struct sweep_state {
	__u64 sec;
	__u64 until;
	__u64 addr_bits[4];
	__u64 port_bits[4];
	__u32 addrs;
	__u32 ports;
};

struct map_def SEC("maps") ddos_cfg = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct ddos_cfg), 1, 0 };
struct map_def SEC("maps") ddos_vec = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct vec_cfg), N_VEC, 0 };
// Per vector, its current second (struct window of shield.bpf.c).
struct map_def SEC("maps") ddos_win = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct window), N_VEC, 0 };
// Per vector: 2v seen, 2v + 1 dropped.
struct map_def SEC("maps") ddos_cnt = { BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 2 * N_VEC, 0 };
// Per CPU, per frame: what the vectors decided. Kept in a map, not in
// registers: the verifier then sees one unknown value after each vector
// instead of a 0 and a 1 to follow down every later branch (which made it
// walk more than its million instructions).
// The walks over TCP options and IPv6 extension headers keep their
// position and findings here for the same reason.
struct ddos_scratch {
	__u32 drop;
	__u32 opts;
	__u32 i;
	__u32 nh;
	__u32 off;
	__u32 headers;
	__u32 bytes;
	__u32 frag;
	__u32 later;
	__u32 malformed;
	// The ACL's first matching `log` rule, plus one (shield.bpf.c).
	__u32 log_rule;
};
struct map_def SEC("maps") ddos_tmp = { BPF_MAP_TYPE_PERCPU_ARRAY, 4, sizeof(struct ddos_scratch),
					1, 0 };
struct map_def SEC("maps") sweeps = { BPF_MAP_TYPE_LRU_HASH, 16, sizeof(struct sweep_state),
				      65536, 0 };

static __always_inline void mark_drop(void)
{
	__u32 zero = 0;
	struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
	if (t)
		t->drop = 1;
}

// Counts a packet of vector `v`, and marks it to be dropped past the
// vector's limit.
static __always_inline int vec_hit(__u32 v, __u64 sec)
{
	struct vec_cfg *c = bpf_map_lookup_elem(&ddos_vec, &v);
	if (!c || c->action == VA_OFF)
		return 0;
	__u32 slot = v * 2;
	count(&ddos_cnt, slot);
	if (c->action != VA_DROP)
		return 0;
	// A frame another vector drops already is no share of this one's
	// limit (it must not crowd out the valid packets the limit lets by),
	// but it is one of its packets dropped.
	__u32 zero = 0;
	struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
	if (!t)
		return 0;
	if (*(volatile __u32 *)&t->drop) {
		slot += 1;
		count(&ddos_cnt, slot);
		return 0;
	}
	struct window *w = bpf_map_lookup_elem(&ddos_win, &v);
	if (!w || within(w, sec, c->limit))
		return 0;
	slot += 1;
	count(&ddos_cnt, slot);
	mark_drop();
	return 0;
}

static __always_inline __u32 mix32(__u32 x)
{
	x ^= x >> 16;
	x *= 0x7feb352d;
	x ^= x >> 15;
	x *= 0x846ca68b;
	x ^= x >> 16;
	return x;
}

// Sets bit `h` of a 256-bit set; 1 when it was clear.
static __always_inline __u32 set_bit256(__u64 *bits, __u32 h)
{
	__u32 w = (h >> 6) & 3;
	__u64 b = 1ULL << (h & 63);
	if (bits[w] & b)
		return 0;
	bits[w] |= b;
	return 1;
}

// A new flow (a SYN, a datagram, an echo request) from `src` to `dst`,
// port `dport`: marks it to be dropped when the source sweeps (more
// distinct addresses or ports in one second than allowed).
static __always_inline int sweep_hit(const __u8 *src, const __u8 *dst, __u32 dport, __u64 sec,
				struct ddos_cfg *d)
{
	struct vec_cfg *c;
	__u32 v = V_SWEEP;
	c = bpf_map_lookup_elem(&ddos_vec, &v);
	if (!c || c->action == VA_OFF || !d->sweep_max)
		return 0;
	struct sweep_state *st = bpf_map_lookup_elem(&sweeps, src);
	if (!st) {
		struct sweep_state fresh = {};
		bpf_map_update_elem(&sweeps, src, &fresh, BPF_ANY);
		st = bpf_map_lookup_elem(&sweeps, src);
		if (!st)
			return 0;
	}
	if (st->until <= sec) {
		if (st->sec != sec) {
			__builtin_memset(st->addr_bits, 0, sizeof(st->addr_bits));
			__builtin_memset(st->port_bits, 0, sizeof(st->port_bits));
			st->addrs = 0;
			st->ports = 0;
			st->sec = sec;
		}
		__u32 ha = mix32(*(__u32 *)(dst + 12) ^ mix32(*(__u32 *)(dst + 8)) ^
				 mix32(*(__u32 *)(dst + 4)) ^ *(__u32 *)dst);
		st->addrs += set_bit256(st->addr_bits, ha);
		st->ports += set_bit256(st->port_bits, mix32(dport));
		if (st->addrs <= d->sweep_max && st->ports <= d->sweep_max)
			return 0;
		st->until = sec + d->sweep_block_s;
	}
	// A blocked source (or one blocked just now): its new flows are the
	// vector's packets.
	count(&ddos_cnt, V_SWEEP * 2);
	if (c->action != VA_DROP)
		return 0;
	count(&ddos_cnt, V_SWEEP * 2 + 1);
	mark_drop();
	return 0;
}

// TCP options of a segment, into the scratch's `opts`: bit 0 an unknown
// kind, bit 1 an illegal length for a known kind (or below 2), bit 2 an
// option running past the header.
static __always_inline int tcp_options(struct xdp_md *ctx, __u32 off, __u32 olen)
{
	__u32 zero = 0;
	struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
	__u8 o[64] = {};
	if (!t || olen == 0 || olen > 40)
		return 0;
	if (bpf_xdp_load_bytes(ctx, off, o, olen) < 0) {
		t->opts |= 4;
		return 0;
	}
	t->i = 0;
	for (int n = 0; n < 40; n++) {
		// Read back from the map (volatile): a register would carry a
		// range per path and undo the point of the scratch.
		__u32 i = *(volatile __u32 *)&t->i;
		if (i >= olen)
			break;
		__u8 kind = o[i & 63];
		if (kind == 0)
			break;
		if (kind == 1) {
			t->i = i + 1;
			continue;
		}
		if (i + 1 >= olen) {
			t->opts |= 4;
			break;
		}
		__u32 len = o[(i + 1) & 63];
		if (len < 2) {
			t->opts |= 2;
			break;
		}
		if (i + len > olen) {
			t->opts |= 4;
			break;
		}
		// The length each known kind must have (0: 2 or more will do;
		// SACK: 10, 18, 26 or 34).
		__u32 want = kind == 2 ? 4 : kind == 3 ? 3 : kind == 4 ? 2 : kind == 8 ? 10 :
			     kind == 19 ? 18 : kind == 28 ? 4 : 0;
		int known = want || kind == 5 || kind == 29 || kind == 30 || kind == 34 ||
			    kind == 253 || kind == 254;
		if (!known)
			t->opts |= 1;
		else if ((want && len != want) || (kind == 5 && (len - 2) % 8 != 0) ||
			 (kind == 29 && len < 4))
			t->opts |= 2;
		t->i = i + len;
	}
	return *(volatile __u32 *)&t->opts;
}

static __always_inline int is_ext(__u8 nh)
{
	return nh == 0 || nh == 43 || nh == 44 || nh == 60 || nh == 51 || nh == 135 || nh == 139 ||
	       nh == 140;
}

// The IPv6 extension headers after the fixed header, into the scratch:
// the transport protocol and where it starts, how many headers and bytes,
// a fragment header (and whether it is a later fragment), and whether
// the chain is malformed.
static __always_inline int ext_walk(struct xdp_md *ctx, __u8 first)
{
	__u32 zero = 0;
	struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
	if (!t)
		return 0;
	t->nh = first;
	t->off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
	t->headers = 0;
	t->bytes = 0;
	t->frag = 0;
	t->later = 0;
	t->malformed = 0;
	for (int i = 0; i < EXT_WALK; i++) {
		__u32 nh = *(volatile __u32 *)&t->nh;
		if (!is_ext(nh))
			break;
		__u8 h[4];
		if (bpf_xdp_load_bytes(ctx, t->off, h, 4) < 0) {
			t->malformed = 1;
			break;
		}
		__u32 len = nh == 44 ? 8 : nh == 51 ? ((__u32)h[1] + 2) * 4 : ((__u32)h[1] + 1) * 8;
		// Hop-by-hop options come first or not at all (RFC 8200).
		if (nh == 0 && i != 0)
			t->malformed = 1;
		if (nh == 44) {
			t->frag = 1;
			t->later = ((__u32)h[2] << 8 | h[3]) & 0xfff8;
		}
		t->headers += 1;
		t->bytes += len;
		t->nh = h[0];
		t->off += len;
	}
	return *(volatile __u32 *)&t->headers;
}

// Every frame, before the ACL: counts it in its vectors, and marks it in
// `ddos_tmp` when one of them drops it.
static __always_inline int ddos(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	struct ddos_cfg *d = bpf_map_lookup_elem(&ddos_cfg, &zero);
	if (!d || !d->on)
		return 0;
	if ((void *)(eth + 1) > end)
		return 0;
	__u64 sec = now_sec();
	__u8 src[16] = {}, dst[16] = {};
	__u8 proto;
	__u32 l4off, iplen;
	int v6 = 0;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return 0;
		// Multicast to the link (IGMP: TTL 1 and a router alert option)
		// is the network's own traffic, not a bad header.
		int mcast = (ip->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000);
		if (ip->ihl > 5 && !mcast)
			vec_hit(V_IP_OPTIONS, sec);
		if (ip->ttl <= d->ttl_at_most && !mcast)
			vec_hit(V_TTL, sec);
		__u16 frag = bpf_ntohs(ip->frag_off);
		if (frag & 0x3fff) {
			vec_hit(V_IPV4_FRAGMENT, sec);
			if (ip->protocol == IPPROTO_ICMP)
				vec_hit(V_ICMP_FRAGMENT, sec);
			// Later fragments carry no transport header.
			if (frag & 0x1fff)
				return 0;
		}
		proto = ip->protocol;
		src[10] = src[11] = dst[10] = dst[11] = 0xff;
		__builtin_memcpy(src + 12, &ip->saddr, 4);
		__builtin_memcpy(dst + 12, &ip->daddr, 4);
		l4off = sizeof(*eth) + ip->ihl * 4;
		iplen = bpf_ntohs(ip->tot_len);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		v6 = 1;
		// Multicast (MLD: hop limit 1 and a hop-by-hop router alert) is
		// the link's own traffic, as for IPv4.
		int mcast = ip6->daddr.in6_u.u6_addr8[0] == 0xff;
		if (ip6->hop_limit <= d->hop_limit_at_most && !mcast)
			vec_hit(V_HOP_LIMIT, sec);
		__builtin_memcpy(src, &ip6->saddr, 16);
		__builtin_memcpy(dst, &ip6->daddr, 16);
		struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
		if (!t)
			return 0;
		__u32 headers = ext_walk(ctx, ip6->nexthdr);
		__u8 nh = t->nh;
		__u32 off = t->off, bytes = t->bytes;
		__u32 frag = t->frag, later_fragment = t->later;
		int malformed = t->malformed;
		if (off > (__u32)(end - data))
			malformed = 1;
		if (mcast)
			return 0;
		if (headers)
			vec_hit(V_EXT_FRAMES, sec);
		if ((headers > d->ext_max_headers || is_ext(nh)))
			vec_hit(V_EXT_TOO_MANY, sec);
		if (bytes > d->ext_max_bytes)
			vec_hit(V_EXT_TOO_LARGE, sec);
		if (malformed) {
			vec_hit(V_EXT_MALFORMED, sec);
			return 0;
		}
		if (frag) {
			vec_hit(V_IPV6_FRAGMENT, sec);
			if (nh == 58)
				vec_hit(V_ICMP_FRAGMENT, sec);
			if (later_fragment)
				return 0;
		}
		if (is_ext(nh))
			return 0;
		proto = nh;
		l4off = off;
		iplen = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	} else {
		return 0;
	}

	if (proto == IPPROTO_TCP) {
		__u8 th[20];
		if (bpf_xdp_load_bytes(ctx, l4off, th, 20) < 0)
			return 0;
		__u8 flags = th[13];
		__u32 doff = (__u32)(th[12] >> 4) * 4;
		__u16 dport = (__u16)th[2] << 8 | th[3];
		__u16 window = (__u16)th[14] << 8 | th[15];
		__u16 urg_ptr = (__u16)th[18] << 8 | th[19];
		int syn = flags & 0x02, ack = flags & 0x10, rst = flags & 0x04;
		if (syn && !ack) {
			// The SYNs that are dropped whatever the rate (oversize, a
			// sweeping source's) first, so that they use up none of
			// the SYN flood's and half-open's limits.
			if (iplen > d->syn_max_bytes)
				vec_hit(V_SYN_OVERSIZE, sec);
			sweep_hit(src, dst, dport, sec, d);
			vec_hit(V_SYN_FLOOD, sec);
			vec_hit(V_HALF_OPEN, sec);
		}
		if (syn && ack)
			vec_hit(V_SYNACK_FLOOD, sec);
		if (rst)
			vec_hit(V_RST_FLOOD, sec);
		if ((flags & 0x08) && !syn && !rst)
			vec_hit(V_PUSH_FLOOD, sec);
		if (!syn && !rst && window <= d->window_at_most)
			vec_hit(V_WINDOW, sec);
		// URG with no urgent data, or on a segment that cannot carry it.
		if ((flags & 0x20) && (urg_ptr == 0 || syn || rst))
			vec_hit(V_BAD_URG, sec);
		if (doff > 20) {
			// Past the header, or past the packet: the options overrun.
			if (l4off + doff > (__u32)(end - data)) {
				vec_hit(V_OPT_OVERRUN, sec);
			} else {
				struct ddos_scratch *t = bpf_map_lookup_elem(&ddos_tmp, &zero);
				if (!t)
					return 0;
				t->opts = 0;
				__u32 bad = tcp_options(ctx, l4off + 20, doff - 20);
				if ((bad & 1))
					vec_hit(V_OPT_UNKNOWN, sec);
				if ((bad & 2))
					vec_hit(V_OPT_ILLEGAL_LEN, sec);
				if ((bad & 4))
					vec_hit(V_OPT_OVERRUN, sec);
			}
		}
		return 0;
	}
	if (proto == IPPROTO_UDP) {
		__u8 uh[4];
		if (bpf_xdp_load_bytes(ctx, l4off, uh, 4) < 0)
			return 0;
		__u32 dport = (__u32)uh[2] << 8 | uh[3];
		vec_hit(V_UDP_FLOOD, sec);
		__u32 tcp_at = dport, udp_at = 65536 + dport;
		__u32 *tcp_on = bpf_map_lookup_elem(&served, &tcp_at);
		__u32 *udp_on = bpf_map_lookup_elem(&served, &udp_at);
		if (tcp_on && *tcp_on && !(udp_on && *udp_on))
			vec_hit(V_NON_TCP, sec);
		// Replies to our own sockets land on ephemeral ports: not new flows.
		if ((dport < d->eph_lo || dport > d->eph_hi))
			sweep_hit(src, dst, dport, sec, d);
		return 0;
	}
	if (proto == IPPROTO_ICMP && !v6) {
		__u8 ih[2];
		if (bpf_xdp_load_bytes(ctx, l4off, ih, 2) < 0)
			return 0;
		vec_hit(V_ICMPV4_FLOOD, sec);
		if (ih[0] == 3 && ih[1] == 1)
			vec_hit(V_HOST_UNREACH, sec);
		if (ih[0] == 4)
			vec_hit(V_TIDCMP, sec);
		if (ih[0] == 8)
			sweep_hit(src, dst, 0, sec, d);
		return 0;
	}
	if (proto == 58 && v6) {
		__u8 ih[2];
		if (bpf_xdp_load_bytes(ctx, l4off, ih, 2) < 0)
			return 0;
		// Neighbour discovery and router messages (133-137) are the
		// link's own: never counted as a flood.
		if ((ih[0] < 133 || ih[0] > 137))
			vec_hit(V_ICMPV6_FLOOD, sec);
		if (ih[0] == 1 && ih[1] == 3)
			vec_hit(V_HOST_UNREACH, sec);
		if (ih[0] == 128)
			sweep_hit(src, dst, 0, sec, d);
		return 0;
	}
	if (proto != IPPROTO_ICMP && proto != 58)
		vec_hit(V_NON_TCP, sec);
	return 0;
}
