//! Workers, listeners, hot reload and graceful shutdown.
//!
//! One single-threaded tokio runtime per worker thread, pinned to a core. A
//! connection lives and dies on the worker that accepted it: no locks and no
//! cross-thread hand-off on the request path. Every worker has its own
//! listening socket per address (SO_REUSEPORT), so the kernel spreads new
//! connections without a shared accept queue.
//!
//! The main thread runs the control runtime: signals, the admin endpoint,
//! health checks, reloads, and giving freed memory back (`trim.rs`). A reload parses and validates the new file
//! there, binds any new addresses, then publishes the snapshot with one
//! atomic swap; a file that fails is logged and the old snapshot keeps
//! serving.

pub mod fdtable;
mod listen;
mod trim;
pub use trim::give_back_this_threads_memory;
mod worker;

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, watch};

use crate::config::{self, Snapshot};
use crate::health::Checker;
use crate::log;
use listen::Bound;
use worker::WorkerCmd;

/// Where the running configuration comes from.
#[derive(Clone)]
pub enum Source {
    File(PathBuf),
    /// Built-in text (the quickstart), reloaded as-is.
    Text {
        name: String,
        text: String,
    },
    /// A cluster node: its file and the configuration published in etcd
    /// (cluster/).
    Cluster(Arc<crate::cluster::Node>),
}

impl Source {
    pub fn load(&self, previous: Option<&Snapshot>) -> Result<Snapshot, config::ConfigErrors> {
        match self {
            Source::File(p) => config::load(p, previous),
            Source::Text { name, text } => config::parse(name, text, previous),
            Source::Cluster(node) => {
                let published = node
                    .published
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let Some(p) = published else {
                    return Err(config::ConfigErrors::message(
                        &node.local_name,
                        "nothing published in the cluster yet",
                    ));
                };
                let name = format!("{} + etcd revision {}", node.local_name, p.revision);
                config::publish::parse_published(node, &name, &p.text, previous)
            }
        }
    }
}

struct WorkerHandle {
    thread: JoinHandle<()>,
    cmd: mpsc::UnboundedSender<WorkerCmd>,
}

/// The control side of a running instance. Lives on the main thread.
pub struct Control {
    pub source: Source,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    workers: Vec<WorkerHandle>,
    listening: RefCell<HashSet<Bound>>,
    drain: watch::Sender<bool>,
    health: RefCell<Checker>,
}

impl Control {
    /// Re-reads the configuration and publishes it, or explains why not.
    pub fn reload(&self) -> Result<u64, String> {
        let began = std::time::Instant::now();
        let current = self.snapshot.load_full();
        let next = self
            .source
            .load(Some(&current))
            .map_err(|e| e.to_string())?;
        let built = began.elapsed();
        for w in &next.warnings {
            log::warn(format_args!("{}", w.as_warning()));
        }
        if next.settings.workers != current.settings.workers {
            log::warn(format_args!(
                "global.workers changed: takes effect at the next restart"
            ));
        }
        let old: HashSet<Bound> = self.listening.borrow().clone();
        let new: HashSet<Bound> = listen::wanted(&next).into_iter().collect();
        // Bind new addresses before publishing: a reload that cannot listen
        // is rejected whole.
        let mut bound = Vec::new();
        for b in new.difference(&old) {
            let group = listen::bind_group(&next, *b, self.workers.len())
                .map_err(|e| format!("cannot listen on {b}: {e}"))?;
            bound.push((*b, group));
        }
        let generation = next.generation;
        // Run-time weights give way where the file changed the weight.
        for p in &next.pools {
            for m in p.members.load().iter() {
                m.state.reconfigured(m.weight);
            }
        }
        self.snapshot.store(Arc::new(next));
        // XDP follows the new rules and interfaces (shield/xdp).
        apply_xdp(&self.snapshot.load());
        crate::acme::start();
        for (b, listeners) in bound {
            for (id, l) in listeners.into_iter().enumerate() {
                let _ = self.workers[id].cmd.send(WorkerCmd::Listen(b, l));
            }
        }
        for b in old.difference(&new) {
            for w in &self.workers {
                let _ = w.cmd.send(WorkerCmd::Unlisten(*b));
            }
        }
        *self.listening.borrow_mut() = new;
        self.health.borrow_mut().restart(&self.snapshot.load_full());
        if let Source::Cluster(node) = &self.source {
            node.running(generation);
        }
        // The two costs of a reload, for the propagation figures
        // (BENCHMARKS.md): reading and building the text, then the rest
        // (listeners, health checks, the swap).
        log::info(format_args!(
            "configuration generation {generation} is live (built in {} ms, then live in {} ms)",
            built.as_millis(),
            (began.elapsed() - built).as_millis()
        ));
        retire(current);
        Ok(generation)
    }

    /// Starts draining: workers stop accepting and close connections as
    /// their requests finish.
    pub fn begin_shutdown(&self) {
        let _ = self.drain.send(true);
    }
}

impl crate::admin::Control for Control {
    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    fn reload(&self) -> Result<u64, String> {
        Control::reload(self)
    }
}

/// Starts the workers for `snapshot` and runs the control loop until the
/// process is told to stop. Returns when every worker has finished.
pub fn run(source: Source, snapshot: Snapshot) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the control runtime: {e}"))?;
    let sigs = {
        let _in = rt.enter();
        Signals::install()?
    };
    let settings = snapshot.settings.clone();
    let admin = snapshot.admin.as_ref().map(|a| (a.listen, a.tls.is_some()));
    let snapshot = Arc::new(ArcSwap::from_pointee(snapshot));
    let (drain_tx, drain_rx) = watch::channel(false);
    let addrs = listen::wanted(&snapshot.load());
    let cpus = worker::allowed_cpus();

    // Each address's sockets together, in worker order (QUIC's steering
    // counts on it: runtime/listen.rs), then one list per worker.
    let mut per_worker: Vec<Vec<(Bound, listen::Socket2)>> =
        (0..settings.workers).map(|_| Vec::new()).collect();
    for b in &addrs {
        let vs = vserver_name(&snapshot.load(), b);
        let group = listen::bind_group(&snapshot.load(), *b, settings.workers)
            .map_err(|e| format!("vserver \"{vs}\": cannot listen on {b}: {e}"))?;
        for (id, l) in group.into_iter().enumerate() {
            per_worker[id].push((*b, l));
        }
    }
    let mut workers = Vec::new();
    for (id, listeners) in per_worker.into_iter().enumerate() {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let cpu = if settings.pin_workers && !cpus.is_empty() {
            Some(cpus[id % cpus.len()])
        } else {
            None
        };
        let thread = worker::spawn(
            id,
            cpu,
            snapshot.clone(),
            listeners,
            cmd_rx,
            drain_rx.clone(),
            settings.grace_period_ms,
        )
        .map_err(|e| format!("cannot start worker {id}: {e}"))?;
        workers.push(WorkerHandle {
            thread,
            cmd: cmd_tx,
        });
    }
    for addr in &addrs {
        let vs = vserver_name(&snapshot.load(), addr);
        log::info(format_args!("vserver \"{vs}\" listening on {addr}"));
    }
    log::info(format_args!(
        "{} worker(s) running, configuration generation {}",
        workers.len(),
        snapshot.load().generation
    ));

    apply_xdp(&snapshot.load());
    crate::acme::start();
    let local = tokio::task::LocalSet::new();
    let control = Rc::new(Control {
        source,
        snapshot: snapshot.clone(),
        workers,
        listening: RefCell::new(addrs.into_iter().collect()),
        drain: drain_tx,
        health: RefCell::new(Checker::default()),
    });
    let result = local.block_on(&rt, async {
        control
            .health
            .borrow_mut()
            .restart(&control.snapshot.load_full());
        if let Some((addr, tls)) = admin {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("admin: cannot listen on {addr}: {e}"))?;
            let scheme = if tls { "https" } else { "http" };
            log::info(format_args!(
                "admin endpoint on {scheme}://{addr}/ (API, dashboard, metrics)"
            ));
            let api = Rc::new(crate::admin::Admin::new(control.clone()));
            tokio::task::spawn_local(crate::admin::serve(l, api));
        }
        tokio::task::spawn_local(trim::run());
        if let Source::Cluster(node) = &control.source {
            node.running(control.snapshot.load().generation);
            let (tx, rx) = mpsc::unbounded_channel();
            crate::cluster::follow(node.clone(), tx);
            let (mtx, mrx) = mpsc::unbounded_channel();
            crate::cluster::members::follow(node.clone(), mtx);
            tokio::task::spawn_local(apply_members(control.clone(), node.clone(), mrx));
            let snapshot = control.snapshot.clone();
            crate::cluster::follow_purges(
                node.clone(),
                Box::new(move |how, url| {
                    crate::cache::purge(&snapshot.load().cache, url, how == "prefix")
                }),
            );
            tokio::task::spawn_local(apply_published(control.clone(), node.clone(), rx));
        }
        signals(control.clone(), sigs).await;
        Ok::<(), String>(())
    });
    control.health.borrow_mut().stop();
    control.begin_shutdown();
    // Dropping the control tasks (admin) releases their references.
    drop(local);
    drop(rt);
    match Rc::try_unwrap(control) {
        Ok(c) => {
            for w in c.workers {
                let _ = w.thread.join();
            }
        }
        Err(_) => log::warn(format_args!(
            "control state still referenced; not waiting for workers"
        )),
    }
    // The XDP links close (the program detaches) before we say stopped.
    crate::shield::xdp::shutdown();
    // Every access log line of the drained requests is written.
    crate::accesslog::flush();
    log::info(format_args!("stopped"));
    result
}

/// Applies what the cluster publishes, one revision at a time, through the
/// reload path; a revision that fails leaves the running one (and the text
/// a later reload would read) as it was.
async fn apply_published(
    control: Rc<Control>,
    node: Arc<crate::cluster::Node>,
    mut rx: mpsc::UnboundedReceiver<crate::cluster::Apply>,
) {
    while let Some((p, answer)) = rx.recv().await {
        let before = node
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(p);
        let r = control.reload();
        if r.is_err() {
            *node.published.lock().unwrap_or_else(|e| e.into_inner()) = before;
        }
        let _ = answer.send(r);
    }
}

/// Applies member changes of the pools that take their members from the
/// cluster: each changed pool's member list is swapped in place
/// (`config::swap_cluster_members`); the configuration, its generation
/// and every other pool stay as they are, and members that stay keep their
/// state. Members that went away drain (no new request, what they serve
/// finishes: requests, streams and WebSockets hold their member). Before,
/// the running text was built again for each change: 360-450 ms at 1,000
/// routes and 7-8 s at 10,000 (debug build); a swap is one pool's work.
async fn apply_members(
    control: Rc<Control>,
    node: Arc<crate::cluster::Node>,
    mut rx: mpsc::UnboundedReceiver<crate::cluster::members::Change>,
) {
    while let Some((pools, what, answer)) = rx.recv().await {
        let snap = control.snapshot.load_full();
        let began = std::time::Instant::now();
        let mut swapped = 0;
        let mut checked = false;
        for name in &pools {
            // Sets of pools the running text does not name (yet: a
            // controller publishes a new pool's members before the text
            // that names it) wait for the build that takes the text.
            let Some(pool) = snap
                .pools
                .iter()
                .find(|p| p.name == *name && p.cluster_members)
            else {
                continue;
            };
            let set = crate::cluster::members::of(name);
            for gone in config::swap_cluster_members(pool, &set) {
                gone.state.set_admin(crate::balance::AdminState::Draining);
            }
            checked |= pool.health.is_some();
            swapped += 1;
        }
        if swapped > 0 {
            // Health checks follow the members (a check task per member).
            if checked {
                control.health.borrow_mut().restart(&snap);
            }
            let revision = node
                .published
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map_or(0, |p| p.revision);
            log::info(format_args!(
                "cluster {:?}: run-time member change ({}): {swapped} pool(s) swapped in place in {} us; configuration generation {} and revision {revision} unchanged",
                node.settings.prefix,
                what.join("; "),
                began.elapsed().as_micros(),
                snap.generation,
            ));
        }
        let _ = answer.send(Ok(snap.generation));
    }
}

/// Drops a replaced snapshot on a thread of its own when this is its last
/// holder: at 10,000 routes that takes 16 to 21 ms on a quiet core
/// (`config::parts` `parts_cost`), which whoever asked for the reload (a
/// cluster revision on its way to being reported applied, a SIGHUP) need
/// not wait for. A request still running on it drops it itself.
fn retire(old: Arc<Snapshot>) {
    if Arc::strong_count(&old) == 1 {
        // If no thread can be made, the closure (and the snapshot) is
        // dropped here, as before.
        let _ = std::thread::Builder::new()
            .name("snapshot-drop".into())
            .spawn(move || drop(old));
    }
}

/// XDP follows the configuration: its global rules and vservers' ports.
fn apply_xdp(snap: &Snapshot) {
    let served = crate::shield::xdp::Served {
        tcp: snap.listen_addrs().iter().map(|a| a.port()).collect(),
        udp: snap.udp_addrs().iter().map(|a| a.port()).collect(),
    };
    crate::shield::xdp::apply(snap.shield.as_ref(), &served);
}

/// The name of the virtual server listening on `addr`, for messages.
fn vserver_name(snap: &Snapshot, b: &Bound) -> String {
    let vs = match b {
        Bound::Tcp(a) | Bound::Quic(a) => snap.vserver_for(a),
        Bound::Udp(a) => snap.udp_by_listen.get(a),
    };
    vs.map(|v| v.name.clone()).unwrap_or_default()
}

/// Waits for SIGHUP (reload) and SIGUSR1 (reopen access log files, for
/// logrotate) until SIGTERM or SIGINT (drain and stop).
struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; called first thing (inside the control
    /// runtime), so a SIGHUP or SIGUSR1 sent while the workers start is
    /// queued for the loop instead of killing the process (their default).
    fn install() -> Result<Signals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let e = |e: std::io::Error| format!("cannot install signal handlers: {e}");
        Ok(Signals {
            hup: signal(SignalKind::hangup()).map_err(e)?,
            term: signal(SignalKind::terminate()).map_err(e)?,
            int: signal(SignalKind::interrupt()).map_err(e)?,
            usr1: signal(SignalKind::user_defined1()).map_err(e)?,
        })
    }
}

async fn signals(control: Rc<Control>, sig: Signals) {
    let Signals {
        mut hup,
        mut term,
        mut int,
        mut usr1,
    } = sig;
    loop {
        tokio::select! {
            _ = hup.recv() => {
                log::info(format_args!("SIGHUP: reloading the configuration"));
                if let Err(e) = control.reload() {
                    log::error(format_args!("reload rejected, the running configuration stays:\n{e}"));
                }
            }
            _ = usr1.recv() => {
                log::info(format_args!("SIGUSR1: reopening access log files"));
                crate::accesslog::reopen();
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    log::info(format_args!(
        "draining: no new connections, finishing requests in flight"
    ));
    control.begin_shutdown();
}
