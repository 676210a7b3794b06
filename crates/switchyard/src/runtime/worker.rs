//! One worker thread: a current-thread tokio runtime running the accept
//! loops and every session they start.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle as TaskHandle;

use crate::clock::now_ms;
use crate::config::Snapshot;
use crate::log;
use crate::proxy::{self, IdleWatch, WorkerCtx};
use crate::stats;

use super::listen::{Bound, Socket2};
use super::trim::ParkedShare;

/// How often idle member connections and h2 member connections are swept
/// (`IdlePool::sweep`, `H2Members::sweep`).
const SWEEP_MS: u64 = 1000;

pub enum WorkerCmd {
    Listen(Bound, Socket2),
    Unlisten(Bound),
}

/// The CPUs this process may run on (respects taskset and cgroups).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it and we
    // only read it after a successful call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|c| libc::CPU_ISSET(*c, &set))
            .collect()
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: as above; the set is built locally and passed by pointer.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            log::warn(format_args!(
                "cannot pin a worker to cpu {cpu}: {}",
                io::Error::last_os_error()
            ));
        }
    }
}

pub fn spawn(
    id: usize,
    cpu: Option<usize>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    listeners: Vec<(Bound, Socket2)>,
    cmds: mpsc::UnboundedReceiver<WorkerCmd>,
    drain: watch::Receiver<bool>,
    grace_ms: u64,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("worker-{id}"))
        .spawn(move || {
            if let Some(c) = cpu {
                pin_to(c);
            }
            stats::set_thread_slot(id + 1);
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    log::error(format_args!("worker {id}: cannot start its runtime: {e}"));
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            rt.block_on(crate::turn::Turns::new(
                local.run_until(run(snapshot, listeners, cmds, drain, grace_ms)),
            ));
        })
}

async fn run(
    snapshot: Arc<ArcSwap<Snapshot>>,
    listeners: Vec<(Bound, Socket2)>,
    mut cmds: mpsc::UnboundedReceiver<WorkerCmd>,
    mut drain: watch::Receiver<bool>,
    grace_ms: u64,
) {
    let ctx = Rc::new(WorkerCtx {
        buffers: Default::default(),
        idle_watch: IdleWatch::default(),
        active: Default::default(),
        snapshot,
        idle: Default::default(),
        h2_members: Default::default(),
    });
    let mut accepting: HashMap<Bound, TaskHandle<()>> = HashMap::new();
    for (addr, l) in listeners {
        start(&mut accepting, &ctx, addr, l);
    }
    let lot = {
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            loop {
                for p in ctx.idle_watch.unparked().await {
                    proxy::resume(&ctx, p);
                }
            }
        })
    };
    let ticker = {
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            // Dropped with this task when the worker stops.
            let mut share = ParkedShare::default();
            let sleep = tokio::time::sleep(Duration::ZERO);
            tokio::pin!(sleep);
            let mut sweep_at = now_ms() + SWEEP_MS;
            loop {
                // Asleep until the next deadline (`IdleWatch::next_tick`) or
                // the next sweep, whichever comes first; a deadline
                // registered earlier than that wakes the task to sleep less.
                let at = ctx.idle_watch.next_tick().min(sweep_at);
                let now = now_ms();
                if now < at {
                    sleep
                        .as_mut()
                        .reset(tokio::time::Instant::now() + Duration::from_millis(at - now));
                    std::future::poll_fn(|cx| {
                        ctx.idle_watch.set_ticker(cx.waker());
                        if ctx.idle_watch.next_tick() < at {
                            return std::task::Poll::Ready(());
                        }
                        sleep.as_mut().poll(cx)
                    })
                    .await;
                    if ctx.idle_watch.next_tick() < at {
                        continue;
                    }
                }
                if ctx.idle_watch.next_tick() <= at {
                    ctx.idle_watch.tick();
                }
                if sweep_at <= at {
                    sweep_at = now_ms().max(at) + SWEEP_MS;
                    ctx.idle.sweep();
                    ctx.h2_members.sweep();
                    // For malloc_trim on the control thread (trim.rs): it
                    // trims at once after a wave of connections went idle.
                    share.set(ctx.idle_watch.parked());
                }
            }
        })
    };
    loop {
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                Some(WorkerCmd::Listen(addr, l)) => start(&mut accepting, &ctx, addr, l),
                Some(WorkerCmd::Unlisten(addr)) => {
                    if let Some(h) = accepting.remove(&addr) {
                        h.abort();
                    }
                }
                None => break,
            },
            _ = drain.wait_for(|d| *d) => break,
        }
    }
    // Draining: close the listeners and idle connections, let sessions
    // finish the requests they are in.
    ctx.idle_watch.drain();
    for (_, h) in accepting.drain() {
        h.abort();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(grace_ms);
    while ctx.active.get() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if ctx.active.get() > 0 {
        log::warn(format_args!(
            "grace period over: closing {} connection(s)",
            ctx.active.get()
        ));
    }
    lot.abort();
    ticker.abort();
    ctx.idle.clear();
}

fn start(
    accepting: &mut HashMap<Bound, TaskHandle<()>>,
    ctx: &Rc<WorkerCtx>,
    b: Bound,
    l: Socket2,
) {
    let h = match (b, l) {
        // SAFETY: the AsyncFd owns the listener, so the descriptor stays
        // open and the same for as long as it is registered.
        (Bound::Tcp(addr), Socket2::Tcp(l)) => {
            match unsafe { AsyncFd::register_with_interest(l, Interest::READABLE) } {
                Ok(l) => tokio::task::spawn_local(accept_loop(ctx.clone(), l, addr)),
                Err(e) => {
                    log::error(format_args!("cannot register listener {addr}: {e}"));
                    return;
                }
            }
        }
        (Bound::Udp(addr), Socket2::Udp(s)) => {
            tokio::task::spawn_local(crate::l4::udp::serve(ctx.snapshot.clone(), s, addr))
        }
        (Bound::Quic(addr), Socket2::Quic(s, steer)) => {
            tokio::task::spawn_local(proxy::serve_quic(ctx.clone(), s, steer, addr))
        }
        (b, _) => {
            log::error(format_args!("listener {b}: socket of the wrong kind"));
            return;
        }
    };
    if let Some(old) = accepting.insert(b, h) {
        old.abort();
    }
}

/// Accepts connections as bare non-blocking sockets: the proxy registers a
/// socket with tokio only when it has to wait for it (`proxy::PlainTcp`).
async fn accept_loop(
    ctx: Rc<WorkerCtx>,
    listener: AsyncFd<std::net::TcpListener>,
    addr: SocketAddr,
) {
    loop {
        let accepted = match listener.readable().await {
            Ok(mut ready) => match ready.try_io(|l| accept_bare(l.get_ref())) {
                Ok(r) => r,
                // Drained: readiness is cleared, wait for the next one.
                Err(_would_block) => continue,
            },
            Err(e) => Err(e),
        };
        match accepted {
            Ok((stream, peer)) => proxy::serve(&ctx, stream, peer, addr),
            Err(e) => {
                // Out of file descriptors or memory: back off instead of spinning.
                log::warn(format_args!("accept on {addr} failed: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One accept4(2), non-blocking and close-on-exec from the start (no
/// fcntl after it).
fn accept_bare(l: &std::net::TcpListener) -> io::Result<(std::net::TcpStream, SocketAddr)> {
    let (s, a) = socket2::SockRef::from(l).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    let peer = a
        .as_socket()
        .ok_or_else(|| io::Error::other("accepted a socket that is not IP"))?;
    Ok((s.into(), peer))
}
