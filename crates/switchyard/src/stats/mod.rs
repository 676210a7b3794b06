//! Counters, kept per worker and summed when read.
//!
//! Every counter block is sharded: one cache-line-aligned copy per worker
//! thread (plus slot 0 for the control thread). A worker only ever touches its
//! own slot, so the `Relaxed` atomic adds on the request path never contend;
//! the admin thread sums the slots when someone asks. This module also holds
//! every counter (the `counters!` blocks below), so the names used where
//! metrics are emitted and where they are rendered cannot drift apart; the
//! Prometheus names and help texts are in `admin/render/prometheus.rs`, whose tests
//! check that every counter here has one.

mod histogram;
pub use histogram::{quantile, BucketValues, Buckets};

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Idle keep-alive client connections parked on all workers
/// (`timeouts.client_park`); each worker updates its part about once a
/// second.
pub static CLIENTS_PARKED: AtomicUsize = AtomicUsize::new(0);

pub use histogram::Histogram;

static SLOTS: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// Sets how many slots every sharded block has: workers + 1. Call once at
/// startup, before the first snapshot is built.
pub fn init_slots(workers: usize) {
    SLOTS.store(workers + 1, Ordering::Relaxed);
}

/// Marks the calling thread as worker `id` (1-based); slot 0 is the control thread.
pub fn set_thread_slot(id: usize) {
    SLOT.with(|s| s.set(id));
}

#[repr(align(64))]
#[derive(Default)]
struct Padded<T>(T);

/// One `T` per worker thread.
pub struct Sharded<T> {
    slots: Box<[Padded<T>]>,
}

impl<T: Default> Default for Sharded<T> {
    fn default() -> Self {
        let n = SLOTS.load(Ordering::Relaxed).max(1);
        Sharded {
            slots: (0..n).map(|_| Padded(T::default())).collect(),
        }
    }
}

impl<T> Sharded<T> {
    /// Builds every slot with `f` (for blocks whose size is only known at runtime).
    pub fn from_fn(f: impl Fn() -> T) -> Self {
        let n = SLOTS.load(Ordering::Relaxed).max(1);
        Sharded {
            slots: (0..n).map(|_| Padded(f())).collect(),
        }
    }

    /// The calling thread's own copy.
    #[inline]
    pub fn local(&self) -> &T {
        let i = SLOT.with(|s| s.get()) % self.slots.len();
        &self.slots[i].0
    }

    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|p| &p.0)
    }
}

#[inline]
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Decrements a gauge. Slots wrap, the sum over slots is what is right.
#[inline]
pub fn dec(c: &AtomicU64) {
    c.fetch_sub(1, Ordering::Relaxed);
}

/// Index into a `responses` array for a status code: 0 = 1xx ... 4 = 5xx, 5 = other.
#[inline]
pub fn status_class(status: u16) -> usize {
    match status {
        100..=599 => (status / 100 - 1) as usize,
        _ => 5,
    }
}

pub const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

macro_rules! counters {
    ($(#[$m:meta])* $name:ident / $values:ident {
        $($(#[$fm:meta])* $field:ident),* $(,)?
    } $(histograms { $($(#[$hm:meta])* $hist:ident),* $(,)? })?) => {
        $(#[$m])*
        #[derive(Default)]
        pub struct $name {
            $($(#[$fm])* pub $field: AtomicU64,)*
            /// Responses by status class, see `status_class`.
            pub responses: [AtomicU64; 6],
            $($($(#[$hm])* pub $hist: Buckets,)*)?
        }

        #[derive(Default, Debug, Clone, Copy)]
        pub struct $values {
            $(pub $field: u64,)*
            pub responses: [u64; 6],
            $($(pub $hist: BucketValues,)*)?
        }

        impl $values {
            /// (metric name, value) for every plain counter, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field),)*]
            }
        }

        impl Sharded<$name> {
            pub fn read(&self) -> $values {
                let mut v = $values::default();
                for s in self.all() {
                    $(v.$field = v.$field.wrapping_add(s.$field.load(Ordering::Relaxed));)*
                    for (i, r) in s.responses.iter().enumerate() {
                        v.responses[i] += r.load(Ordering::Relaxed);
                    }
                    $($(s.$hist.merge_into(&mut v.$hist);)*)?
                }
                v
            }
        }
    };
}

counters!(
    /// Client side of a virtual server.
    VsCounters / VsValues {
        client_connections_total,
        /// Gauge.
        client_connections_active,
        requests,
        bytes_in,
        bytes_out,
        bad_requests,
        header_timeouts,
        /// Requests whose body came too slowly: a pause past `client_body`,
        /// under `request_body.min_rate` after its grace, or past its
        /// `deadline` (answered 408, or cut when the response had started;
        /// HTTP/2: the stream).
        body_timeouts,
        /// Responses cut because the client stopped taking them for
        /// `client_send` (HTTP/1: the connection; HTTP/2: the stream, or
        /// the connection when it stopped reading altogether).
        send_timeouts,
        no_pool,
        local_responses,
        /// Completed TLS handshakes, failed ones (including timeouts), and
        /// completed ones that resumed a session.
        tls_handshakes,
        tls_handshake_failures,
        tls_resumed,
        /// HTTP/2 connections and streams (each stream is also a request).
        h2_connections,
        h2_streams,
        /// HTTP/2 connections closed with ENHANCE_YOUR_CALM (rapid reset,
        /// control-frame floods).
        h2_abuse_closes,
        /// HTTP/3 (QUIC) connections past their handshake, and their
        /// request streams (each stream is also a request).
        h3_connections,
        h3_streams,
        /// QUIC connection attempts answered with a Retry (address
        /// validation, past `[vserver.http3] retry_threshold`).
        quic_retries,
        /// HTTP/3 requests that came in 0-RTT early data (`early_data`):
        /// passed on with `Early-Data: 1`, or answered 425 Too Early.
        h3_early_requests,
        h3_too_early,
        /// 101 responses refused with a 502: a switch to a protocol the
        /// client did not ask for (or h2c), or to any when it asked for none.
        upgrades_refused,
        /// Responses compressed, and their payload bytes before and after,
        /// per coding.
        compressed_gzip,
        compressed_br,
        compressed_zstd,
        compress_bytes_in_gzip,
        compress_bytes_in_br,
        compress_bytes_in_zstd,
        compress_bytes_out_gzip,
        compress_bytes_out_br,
        compress_bytes_out_zstd,
        /// Requests answered from the cache while fresh; misses (nothing
        /// stored suits the request); stored responses revalidated with
        /// the member; stale responses served (stale-while-revalidate,
        /// stale-if-error); misses answered by another request's fill
        /// (coalescing); responses stored.
        cache_hits,
        cache_misses,
        cache_revalidations,
        cache_stale_served,
        cache_coalesced,
        cache_stored,
        /// UDP vservers: client sessions opened, and open now (gauge);
        /// datagrams from clients and back to them; datagrams dropped
        /// (no member, session table full, send failed).
        udp_sessions_total,
        udp_sessions_active,
        udp_datagrams_in,
        udp_datagrams_out,
        udp_dropped,
        /// UDP sessions whose member went down: moved to a live member
        /// (`on_member_down = "reassign"`), or ended (`"close"`).
        udp_sessions_reassigned,
        udp_sessions_closed_member_down,
        /// Connections (and UDP datagrams) the ACLs dropped or rejected.
        acl_dropped,
        acl_rejected,
        /// Events of the vserver's script that failed (a Lua error, over
        /// max_instructions or max_memory; the request got 500), and of
        /// those, the ones over max_instructions.
        script_errors,
        script_timeouts,
        /// Connections the script refused (`c:reject()` in `on_accept`,
        /// `on_client_hello`, `on_client_data`, `on_server_data`).
        script_refusals,
        /// Copies of requests sent to a policy's mirror pools, and copies
        /// not sent: a body over the mirror's `max_body` (or one no member
        /// took whole), or `max_in_flight` copies already on their way.
        mirrored,
        mirror_dropped,
    }
);

counters!(
    PoolCounters
        / PoolValues {
            requests,
            retries,
            no_member_available,
        }
);

counters!(
    /// Server side, per member.
    MemberCounters / MemberValues {
        requests,
        bytes_in,
        bytes_out,
        server_connections_total,
        /// Gauge.
        server_connections_active,
        /// Gauge: idle connections parked in the workers' pools.
        server_connections_idle,
        connections_reused,
        connect_failures,
        /// TLS handshakes with the member that failed or timed out (pools
        /// with `[pool.tls]`; also counted in connect_failures). Health
        /// checks are not counted: their failures show in the member's state.
        tls_handshake_failures,
        bad_responses,
        response_timeouts,
        resets,
        health_transitions,
        ejections,
    }
    histograms {
        /// From picking the member (connect included) to its response head.
        time_to_first_byte,
    }
);
