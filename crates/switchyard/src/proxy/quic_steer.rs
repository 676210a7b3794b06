//! QUIC on several workers: every datagram of a connection reaches the
//! worker that owns it, also after the client's address changed.
//!
//! Each worker has its own UDP socket for a QUIC address, all in one
//! SO_REUSEPORT group. The kernel's default choice of a socket in the
//! group hashes the 4-tuple, which a NAT rebinding or a migrating phone
//! changes: the datagrams would land on a worker that does not know the
//! connection. A QUIC connection is named by connection IDs instead, and
//! after the first flight the server chooses them (RFC 9000 5.1). So:
//!
//! - **The IDs name the worker.** Every ID a worker's endpoint issues
//!   (`WorkerCids`, quinn's `EndpointConfig::cid_generator`) is 8 bytes
//!   whose first 4, read as a big-endian number, are the worker's index
//!   modulo the number of sockets in the group; the rest of the number and
//!   the other 4 bytes are random (from the TLS provider's generator), so
//!   an observer learns no more than which residue a connection has, and
//!   cannot link a connection's IDs by anything else (RFC 9000 9.5).
//! - **A classic BPF program on the group reads them** (`attach`, with
//!   SO_ATTACH_REUSEPORT_CBPF) and returns that residue as the socket's
//!   index: bytes 1 to 4 of a short-header packet (the destination ID
//!   comes right after the first byte), bytes 6 to 9 of a long-header one
//!   (after the version and the ID's length). A client's first Initial
//!   carries an ID the client chose at random: it lands on whichever
//!   worker its residue names, always the same one for the same ID (its
//!   second Initial, 0-RTT packets), and that worker then hands out IDs
//!   that bring the rest to it. A datagram too short to hold an ID gets
//!   an index past the group's end, which makes the kernel fall back to
//!   its hash.
//! - **The index is the order of binding.** The kernel appends a socket to
//!   the group when it binds, so the listener (runtime/listen.rs) binds
//!   one socket per worker, in worker order, into a group of its own: it
//!   first checks that nothing else holds the port (an earlier listener's
//!   sockets still closing, another process), since a stranger in the
//!   group would shift every index. A reload keeps a group as it is while
//!   its address stays; a stop closes all of its sockets together.
//!
//! Others: Envoy does the same (a classic BPF program over the ID's first
//! 4 bytes, modulo its workers). nginx keeps an eBPF map from ID to
//! socket, with a socket for new connections, and needs a client's first
//! flight to fit one datagram before the first answer (large 0-RTT early
//! data breaks that); here every datagram of a first flight carries the
//! same client-chosen ID, so all of them land on one worker, with no map
//! and no privileges. HAProxy opens a connected socket per connection,
//! which a rebinding bypasses (its packets land on the listener's socket,
//! and the interop runner caught the connection not following them);
//! Netty re-dispatches datagrams between its sockets in user space.
//!
//! Stateless resets stay per worker (each endpoint has its own random
//! reset key): a datagram that reached the wrong worker anyway is then
//! answered with a reset the client ignores, where a shared key would let
//! that worker kill a connection it does not own. `WorkerCids::validate`
//! keeps a worker from answering IDs of another worker's residue at all.

use std::io;

use quinn::{ConnectionId, ConnectionIdGenerator};
use rustls::crypto::SecureRandom;

/// Bytes in a connection ID this server issues: 4 that name the worker,
/// 4 more random ones (quinn's own generator uses 8 too).
pub const CID_LEN: usize = 8;

/// Where a worker's socket sits in its SO_REUSEPORT group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steer {
    /// The socket's index in the group (the order it was bound in).
    pub index: u32,
    /// How many sockets the group has (the workers).
    pub of: u32,
}

impl Steer {
    /// Whether the ID's first 4 bytes name this socket (what the BPF
    /// program computes for it).
    pub fn owns(&self, cid: &[u8]) -> bool {
        match cid.get(..4) {
            Some(w) => word(w) % self.of.max(1) == self.index,
            None => false,
        }
    }
}

fn word(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The connection IDs of one worker's endpoint: see the module's comment.
pub struct WorkerCids {
    steer: Steer,
    random: &'static dyn SecureRandom,
}

impl WorkerCids {
    pub fn new(steer: Steer) -> WorkerCids {
        WorkerCids {
            steer,
            random: rustls::crypto::aws_lc_rs::default_provider().secure_random,
        }
    }

    /// 8 bytes whose first 4 name `steer`'s socket.
    fn make(&self) -> [u8; CID_LEN] {
        let mut b = [0u8; CID_LEN];
        if self.random.fill(&mut b).is_err() {
            // aws-lc's generator does not fail once seeded; should it, the
            // system's is the next best source (an ID must not be guessable).
            // SAFETY: `b` is a valid writable buffer of b.len() bytes.
            unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        }
        let named = name_worker(word(&b), self.steer);
        b[..4].copy_from_slice(&named.to_be_bytes());
        b
    }
}

/// `r` moved to the nearest number below it (or above, at the top of the
/// range) whose residue modulo `steer.of` is `steer.index`: random but for
/// that residue.
fn name_worker(r: u32, steer: Steer) -> u32 {
    let of = steer.of.max(1);
    let base = r - r % of;
    match base.checked_add(steer.index % of) {
        Some(w) => w,
        None => base - of + steer.index % of,
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        ConnectionId::new(&self.make())
    }

    /// An ID of another worker's residue was not issued here: quinn drops
    /// the packet instead of answering it with a stateless reset.
    fn validate(&self, cid: &ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        if cid.len() == CID_LEN && self.steer.owns(cid) {
            Ok(())
        } else {
            Err(quinn_proto::InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A worker endpoint's configuration: its connection IDs, and its own
/// random stateless reset key (see the module's comment).
pub fn endpoint_config(steer: Steer) -> quinn::EndpointConfig {
    let mut c = quinn::EndpointConfig::default();
    c.cid_generator(move || Box::new(WorkerCids::new(steer)));
    c
}

/// SO_ATTACH_REUSEPORT_CBPF (asm-generic/socket.h; the same on x86 and
/// arm, which are what this builds for).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Shortest datagram the program reads an ID from: a long header's ID
/// starts at byte 6 and the program reads 4 bytes of it.
const MIN_LEN: u32 = 10;

/// The program: the socket index for a datagram (its UDP payload: the
/// kernel has pulled the UDP header before running it).
pub fn program(of: u32) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_A, BPF_ABS, BPF_ALU, BPF_B, BPF_JA, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_LEN,
        BPF_MOD, BPF_RET, BPF_W,
    };
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    vec![
        // 0: A = the datagram's length; shorter than MIN_LEN: to 9.
        op(BPF_LD | BPF_W | BPF_LEN, 0, 0, 0),
        op(BPF_JMP | BPF_JGE | BPF_K, 0, 7, MIN_LEN),
        // 2: the header form bit: long header to 6, short to 4.
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 0),
        op(BPF_JMP | BPF_JSET | BPF_K, 2, 0, 0x80),
        // 4: short header: the ID starts at byte 1.
        op(BPF_LD | BPF_W | BPF_ABS, 0, 0, 1),
        op(BPF_JMP | BPF_JA, 0, 0, 1),
        // 6: long header: the ID starts at byte 6.
        op(BPF_LD | BPF_W | BPF_ABS, 0, 0, 6),
        // 7: its first 4 bytes modulo the group's size: the index.
        op(BPF_ALU | BPF_MOD | BPF_K, 0, 0, of.max(1)),
        op(BPF_RET | BPF_A, 0, 0, 0),
        // 9: past the group's end: the kernel's hash chooses.
        op(BPF_RET | BPF_K, 0, 0, u32::MAX),
    ]
}

/// Attaches `program(of)` to the SO_REUSEPORT group of `socket` (one
/// program per group: the last attached wins).
pub fn attach(socket: &std::net::UdpSocket, of: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut filter = program(of);
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: a valid socket descriptor and a pointer to a sock_fprog of
    // the length given, whose instructions outlive the call (the kernel
    // copies them).
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &prog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A tiny interpreter of the instructions `program` uses, so the tests
/// check the program's answers without a kernel.
#[cfg(test)]
fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    loop {
        let i = &prog[pc];
        let code = u32::from(i.code);
        pc += 1;
        match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_LEN => a = pkt.len() as u32,
            c if c == libc::BPF_LD | libc::BPF_B | libc::BPF_ABS => match pkt.get(i.k as usize) {
                Some(b) => a = u32::from(*b),
                None => return 0,
            },
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                match pkt.get(i.k as usize..i.k as usize + 4) {
                    Some(w) => a = word(w),
                    None => return 0,
                }
            }
            c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => {
                pc += usize::from(if a >= i.k { i.jt } else { i.jf })
            }
            c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => {
                pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf })
            }
            c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
            c if c == libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K => a %= i.k,
            c if c == libc::BPF_RET | libc::BPF_A => return a,
            c if c == libc::BPF_RET | libc::BPF_K => return i.k,
            c => panic!("instruction {c:#x} not interpreted"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short-header packet to `cid`, and a long-header (Handshake) one.
    fn short(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[0u8; 20]);
        p
    }

    fn long(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0xe0, 0, 0, 0, 1, cid.len() as u8];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8]);
        p.extend_from_slice(&[0u8; 20]);
        p
    }

    #[test]
    fn every_id_a_worker_issues_brings_its_packets_back_to_it() {
        for of in [2u32, 3, 4, 7, 64] {
            let prog = program(of);
            for index in 0..of {
                let steer = Steer { index, of };
                let mut g = WorkerCids::new(steer);
                for _ in 0..200 {
                    let cid = g.generate_cid();
                    assert_eq!(cid.len(), CID_LEN);
                    assert!(g.validate(&cid).is_ok());
                    assert_eq!(run(&prog, &short(&cid)), index, "{of} {cid:?}");
                    assert_eq!(run(&prog, &long(&cid)), index, "{of} {cid:?}");
                }
            }
        }
    }

    #[test]
    fn ids_are_random_but_for_the_worker() {
        let steer = Steer { index: 1, of: 2 };
        let mut g = WorkerCids::new(steer);
        let ids: Vec<Vec<u8>> = (0..1000).map(|_| g.generate_cid().to_vec()).collect();
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len());
        // Every byte position takes many values (the first byte too: the
        // residue is in the low bit of the fourth).
        for pos in 0..CID_LEN {
            let mut seen: Vec<u8> = ids.iter().map(|c| c[pos]).collect();
            seen.sort();
            seen.dedup();
            assert!(seen.len() > 100, "byte {pos}: {} values", seen.len());
        }
        // Another worker's IDs are not this one's.
        let other = WorkerCids::new(Steer { index: 0, of: 2 });
        let mut mine = WorkerCids::new(steer);
        for _ in 0..100 {
            assert!(other.validate(&mine.generate_cid()).is_err());
        }
        assert!(other.validate(&ConnectionId::new(&[0; 4])).is_err());
    }

    #[test]
    fn the_worker_residue_holds_at_the_ends_of_the_range() {
        for of in [2u32, 3, 5, 255] {
            for index in 0..of {
                let s = Steer { index, of };
                for r in [0, 1, of - 1, u32::MAX, u32::MAX - 1, u32::MAX - of] {
                    assert_eq!(name_worker(r, s) % of, index, "r {r} of {of}");
                }
            }
        }
    }

    #[test]
    fn packets_too_short_for_an_id_go_to_the_kernels_hash() {
        let prog = program(2);
        for len in 0..MIN_LEN as usize {
            assert_eq!(run(&prog, &vec![0x40; len]), u32::MAX, "{len}");
        }
        // A client's random Initial ID: the same worker for every packet
        // that carries it.
        let initial = long(&[9, 9, 9, 9, 1, 2, 3, 4]);
        assert_eq!(run(&prog, &initial), 0x0909_0909 % 2);
    }
}
