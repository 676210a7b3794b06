//! `log` rules matched in XDP, as log lines: the program writes each
//! match into a BPF ring buffer (`log_ring`, at most 100 a second); this
//! reads the ring (memory-mapped, as libbpf's ring_buffer does) and logs
//! what it finds in the words the accept path uses.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::log;

/// The ring's size: `log_ring`'s max_entries in shield.bpf.c.
const RING: usize = 64 * 1024;
/// A record's header: its length (with the busy and discard bits) and
/// a page offset.
const HDR: usize = 8;
const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
/// `struct log_event` of shield.bpf.c.
const EVENT: usize = 44;

/// The ring mapped into this process: the consumer page (ours to write)
/// and the producer page followed by the data, mapped twice over so that
/// a record wrapping the end reads straight on.
pub(super) struct Ring {
    consumer: *mut u8,
    producer: *const u8,
    page: usize,
}

// SAFETY: the mappings belong to the Ring alone, and it is used under the
// shield state's lock.
unsafe impl Send for Ring {}

impl Ring {
    pub(super) fn map(fd: &OwnedFd) -> io::Result<Ring> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: mapping the map's own pages as the kernel lays them out
        // (consumer page read-write at 0, producer page and data read-only
        // after it); failures are checked.
        let consumer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if consumer == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let producer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page + 2 * RING,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                page as libc::off_t,
            )
        };
        if producer == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: the consumer page mapped just above.
            unsafe { libc::munmap(consumer, page) };
            return Err(e);
        }
        Ok(Ring {
            consumer: consumer.cast(),
            producer: producer.cast::<u8>().cast_const(),
            page,
        })
    }

    /// Logs every record written since the last call, naming rules by
    /// `names` (the global rule set loaded).
    pub(super) fn drain(&mut self, names: &[String]) {
        // SAFETY: the positions are the first u64 of their pages, shared
        // with the kernel, which expects atomic access.
        let (cons_pos, prod_pos) = unsafe {
            (
                &*(self.consumer as *const AtomicU64),
                &*(self.producer as *const AtomicU64),
            )
        };
        let mut cons = cons_pos.load(Ordering::Acquire);
        let prod = prod_pos.load(Ordering::Acquire);
        // SAFETY: the data follows the producer page, 2 * RING long.
        let data = unsafe { self.producer.add(self.page) };
        while cons < prod {
            let at = (cons as usize) & (RING - 1);
            // SAFETY: a header lies within the first copy of the data.
            let len = unsafe { &*(data.add(at) as *const AtomicU32) }.load(Ordering::Acquire);
            if len & BUSY != 0 {
                break;
            }
            let n = (len & !(BUSY | DISCARD)) as usize;
            if len & DISCARD == 0 && n >= EVENT {
                // SAFETY: the record lies within the double mapping.
                let rec = unsafe { std::slice::from_raw_parts(data.add(at + HDR), EVENT) };
                line(rec, names);
            }
            cons += (HDR + n).div_ceil(8) as u64 * 8;
        }
        cons_pos.store(cons, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the two mappings made in `map`.
        unsafe {
            libc::munmap(self.consumer.cast(), self.page);
            libc::munmap(self.producer.cast_mut().cast(), self.page + 2 * RING);
        }
    }
}

/// One record as the accept path would say it.
fn line(rec: &[u8], names: &[String]) {
    let rule = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize;
    let (v6, proto) = (rec[4] != 0, rec[5]);
    let dport = u16::from_ne_bytes([rec[10], rec[11]]);
    let addr = |b: &[u8]| -> IpAddr {
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        if v6 {
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
        }
    };
    let (src, dst) = (addr(&rec[12..28]), addr(&rec[28..44]));
    let name = names.get(rule).map(String::as_str).unwrap_or("?");
    log::info(format_args!(
        "shield: rule {name:?} matched {src} -> {dst} (proto {proto}, port {dport}) in XDP"
    ));
}
