//! `cairn serve POOL`: hold the pool and export its volumes over NBD.
//!
//! Each volume is an NBD export named after the volume (`POOL/NAME`, or just `NAME`).
//! Writes land in the open txg; FLUSH (and FUA) return once every write before them is on
//! stable storage, through the pool's intent log (`cairn_objset::intent_log`; a txg sync
//! when the log cannot serve), for every connection at once, which is what makes
//! multi-conn safe. The volume's `sync` property applies (`disabled`: FLUSH returns at once). TRIM and WRITE_ZEROES punch holes; `base:allocation` reports them. A txg is also
//! synced every `--sync-interval` seconds when something changed.
//!
//! The pool heals while it serves: a leaf that fails for good gets an available hot spare
//! in its slot (at the next txg sync, or the next tick for a pool that is only read), and a
//! thread resilvers whatever leaf needs it (a spare put in, a resilver left unfinished) with
//! the store lock taken per batch, so clients keep being served meanwhile.

use std::collections::HashSet;
use std::io;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_nbd::{BlockExport, ExportSource, NbdServer, TlsMode, TlsPolicy};
use cairn_objset::dnode::ObjectKind;
use cairn_objset::resilver::{ResilverEnd, ResilverOptions, ResilverProgress};
use cairn_objset::scrub::ScrubControl;
use cairn_objset::{DatasetKind, Resolved, Store, StoreError};

use crate::store_open::{finish_store as finish, open_store as open};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// TCP address to serve NBD on, e.g. 127.0.0.1:10809 (repeatable).
    #[arg(long = "nbd", value_name = "ADDR:PORT")]
    tcp: Vec<String>,
    /// Unix socket to serve NBD on (repeatable).
    #[arg(long = "nbd-socket", value_name = "PATH")]
    sockets: Vec<PathBuf>,
    #[command(flatten)]
    access: crate::serve_access::NbdAccessArgs,
    /// Seconds between txg syncs when data changed.
    #[arg(long, default_value_t = 5.0)]
    sync_interval: f64,
    /// Stop after this many seconds (for scripts and tests); default: until SIGINT/SIGTERM.
    #[arg(long)]
    duration: Option<f64>,
    /// Mount a file system over FUSE: DATASET[=DIR][:ro] (DIR default: its mountpoint;
    /// repeatable).
    #[arg(long = "mount", value_name = "DS[=DIR][:ro]")]
    mounts: Vec<String>,
    /// Mount every file system of the pool with canmount=on at its mountpoint, as
    /// `zfs mount -a`.
    #[arg(long = "mount-all")]
    mount_all: bool,
    /// Exit once every mount is gone (what `cairn mount` starts).
    #[arg(long, hide = true)]
    until_unmounted: bool,
    /// Serve every pool imported here (the pool cache in `$CAIRN_HOME`), one process each.
    #[arg(long, conflicts_with = "pools")]
    all: bool,
    /// The pool (or pools: one process each).
    #[arg(required_unless_present = "all")]
    pools: Vec<String>,
}

/// A volume as an NBD export.
struct VolumeExport {
    store: Arc<Store>,
    volume: Resolved,
    size: u64,
    block_size: u32,
    read_only: bool,
}

fn to_io(e: StoreError) -> io::Error {
    // Operators see what the clients get: one line per failed request.
    eprintln!("cairn serve: request failed: {e}");
    match e {
        StoreError::NoSpace(_) => io::Error::from_raw_os_error(libc::ENOSPC),
        StoreError::ReadOnly(_) => io::Error::from_raw_os_error(libc::EPERM),
        StoreError::PastEnd { .. } => io::Error::from_raw_os_error(libc::EINVAL),
        other => io::Error::other(other.to_string()),
    }
}

impl BlockExport for VolumeExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn preferred_block_size(&self) -> u32 {
        self.block_size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.store.read(&self.volume, offset, buf).map_err(to_io)?;
        buf[n..].fill(0);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.store.write(&self.volume, offset, buf).map_err(to_io)
    }
    fn flush(&self) -> io::Result<()> {
        // Through the intent log (a txg sync only when the log cannot serve), and nothing
        // under sync=disabled.
        self.store.sync_writes(self.volume.dataset).map_err(to_io)
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.store.punch(&self.volume, offset, len).map_err(to_io)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> io::Result<()> {
        if may_punch {
            return self.store.punch(&self.volume, offset, len).map_err(to_io);
        }
        // NO_HOLE: write real zeros (they still compress to almost nothing with lz4/zstd).
        let chunk = vec![0u8; 1 << 20];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            self.store
                .write(&self.volume, offset + done, &chunk[..n])
                .map_err(to_io)?;
            done += n as u64;
        }
        Ok(())
    }
    fn fast_zero(&self) -> bool {
        true
    }
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>> {
        let runs = self
            .store
            .allocation_map(&self.volume, offset, len)
            .map_err(to_io)?;
        let mut out = Vec::new();
        for (mut bytes, hole) in runs {
            let flags = if hole {
                cairn_nbd::wire::STATE_HOLE | cairn_nbd::wire::STATE_ZERO
            } else {
                0
            };
            while bytes > 0 {
                let n = bytes.min(u64::from(u32::MAX) & !0xfff);
                out.push((n as u32, flags));
                bytes -= n;
            }
        }
        Ok(out)
    }
}

/// The pool's volumes, by name.
struct VolumeSource {
    store: Arc<Store>,
    /// Volumes exported read-only whatever their `readonly` property (`--nbd-read-only`).
    read_only: HashSet<String>,
}

impl VolumeSource {
    fn full_name(&self, name: &str) -> String {
        let pool = self.store.pool().name();
        if name.starts_with(&format!("{pool}/")) {
            name.to_string()
        } else {
            format!("{pool}/{}", name.trim_start_matches('/'))
        }
    }
}

impl ExportSource for VolumeSource {
    fn list(&self) -> Vec<String> {
        self.store
            .datasets()
            .datasets
            .iter()
            .filter(|d| d.kind == DatasetKind::Volume)
            .map(|d| d.name.clone())
            .collect()
    }
    fn open(&self, name: &str) -> Option<Arc<dyn BlockExport>> {
        let full = self.full_name(name);
        if full.contains('@') {
            return crate::snapshot_export::open(&self.store, &full);
        }
        let volume = self.store.resolve(&full).ok()?;
        if volume.kind != ObjectKind::Volume {
            return None;
        }
        let dnode = self.store.object_dnode(&volume).ok()?;
        let read_only = self
            .store
            .get_property(&full, "readonly")
            .map(|v| v.0 == "on")
            .unwrap_or(false)
            || self.read_only.contains(&full);
        Some(Arc::new(VolumeExport {
            store: self.store.clone(),
            volume,
            size: dnode.size,
            block_size: dnode.block_size,
            read_only,
        }))
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

type ResilverRun = std::thread::JoinHandle<Result<(ResilverProgress, ResilverEnd), StoreError>>;

/// `autoexpand=on`: a vdev whose devices all grew takes the room (`cairn online -e`).
fn autoexpand(store: &Store) {
    match store.expand_in_use() {
        Ok(grown) => {
            for (t, old, new) in grown {
                eprintln!("cairn serve: autoexpand: vdev {t} grew from {old} to {new} bytes");
                crate::history_cmd::record_served(
                    store,
                    &format!(
                        "cairn online -e {} (autoexpand: vdev {t})",
                        store.pool().name()
                    ),
                );
            }
        }
        Err(e) => eprintln!("cairn serve: autoexpand: {e}"),
    }
}

/// Puts hot spares in for failed leaves and resilvers in a thread of its own whenever a
/// leaf needs it; a resilver that failed is retried after `RETRY`.
struct Healer {
    rate: Option<u64>,
    running: Option<ResilverRun>,
    retry_at: Instant,
    /// Paths autoreplace tried and could not use.
    autoreplace_failed: std::collections::BTreeSet<String>,
}

impl Healer {
    const RETRY: Duration = Duration::from_secs(30);

    fn new() -> Result<Healer, String> {
        Ok(Healer {
            rate: crate::device_cmds::env_rate()?,
            running: None,
            retry_at: Instant::now(),
            autoreplace_failed: Default::default(),
        })
    }

    fn tick(&mut self, store: &Arc<Store>) {
        self.autoreplace(store);
        if store.pool().props().autoexpand {
            autoexpand(store);
        }
        match store.take_over_failed_leaves() {
            Ok(true) => eprintln!("cairn serve: a hot spare took the place of a failed device"),
            Ok(false) => {}
            Err(e) => eprintln!("cairn serve: could not put a hot spare in: {e}"),
        }
        if self.running.as_ref().is_some_and(|r| r.is_finished()) {
            self.join();
        }
        if self.running.is_none()
            && Instant::now() >= self.retry_at
            && store.pool().needs_resilver()
        {
            eprintln!("cairn serve: resilvering in the background");
            let store = store.clone();
            let opts = ResilverOptions {
                rate: self.rate,
                checkpoint_every: Duration::from_secs(1),
                latency_budget: crate::tunables::get().resilver_latency_budget(),
                ..ResilverOptions::default()
            };
            self.running = Some(std::thread::spawn(move || {
                store.resilver(opts, &mut |_| {
                    // Stopping keeps the resume point: the next import or serve goes on.
                    if STOP.load(Ordering::SeqCst) {
                        ScrubControl::Pause
                    } else {
                        ScrubControl::Continue
                    }
                })
            }));
        }
    }

    /// `autoreplace=on`: a blank device at a failed leaf's path takes its place (once per
    /// path: one that cannot is reported and left alone until the service restarts).
    fn autoreplace(&mut self, store: &Store) {
        for path in store.pool().autoreplace_candidates() {
            if !self.autoreplace_failed.insert(path.clone()) {
                continue;
            }
            match store.pool().replace_in_use(&path, None, false) {
                Ok(_) => {
                    self.autoreplace_failed.remove(&path);
                    eprintln!(
                        "cairn serve: autoreplace: a new device at {path} took its leaf's place"
                    );
                    crate::history_cmd::record_served(
                        store,
                        &format!("cairn replace {} {path} (autoreplace)", store.pool().name()),
                    );
                }
                Err(e) => eprintln!("cairn serve: autoreplace of {path}: {e}"),
            }
        }
    }

    /// Waits for the resilver thread (when there is one) and reports how it ended.
    fn join(&mut self) {
        let Some(run) = self.running.take() else {
            return;
        };
        match run.join() {
            Ok(Ok((p, ResilverEnd::Finished))) => {
                eprintln!(
                    "cairn serve: resilvered {} bytes in {:.1} s with {} errors",
                    p.repaired_bytes, p.elapsed_secs, p.errors
                );
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                eprintln!("cairn serve: resilver failed (retrying later): {e}");
                self.retry_at = Instant::now() + Self::RETRY;
            }
            Err(_) => {
                eprintln!("cairn serve: the resilver thread panicked");
                self.retry_at = Instant::now() + Self::RETRY;
            }
        }
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn serve(a: ServeArgs) -> Result<(), String> {
    if a.all || a.pools.len() != 1 {
        return serve_several(&a);
    }
    serve_one(a)
}

/// `cairn serve --all` or `cairn serve POOL POOL…`: a `cairn serve POOL` process per pool,
/// each with its own control socket (so one pool's trouble stays its own); SIGINT/SIGTERM
/// is passed on to them, and this process ends when they all have (failing if one failed).
fn serve_several(a: &ServeArgs) -> Result<(), String> {
    if !a.tcp.is_empty() || !a.sockets.is_empty() || !a.mounts.is_empty() || a.access.any() {
        return Err("--nbd, --nbd-socket, --mount, --tls and --nbd-* name one pool's volumes and file systems: give them to `cairn serve POOL`, one process per pool".into());
    }
    let home = crate::home();
    let pools = if a.all {
        home.pool_names().map_err(|e| e.to_string())?
    } else {
        a.pools.clone()
    };
    if pools.is_empty() {
        return Err(format!(
            "no pools are imported in {} (`cairn import` one first)",
            home.root().display()
        ));
    }
    let program = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let mut children = Vec::new();
    for pool in &pools {
        let mut cmd = std::process::Command::new(&program);
        cmd.arg("serve")
            .arg("--sync-interval")
            .arg(a.sync_interval.to_string());
        if let Some(d) = a.duration {
            cmd.arg("--duration").arg(d.to_string());
        }
        if a.mount_all {
            cmd.arg("--mount-all");
        }
        cmd.arg(pool);
        match cmd.spawn() {
            Ok(child) => {
                eprintln!("cairn: serving pool '{pool}' (PID {})", child.id());
                children.push((pool.clone(), child));
            }
            Err(e) => eprintln!("cairn: cannot start serving pool '{pool}': {e}"),
        }
    }
    let mut failed = pools.len() - children.len();
    let mut signalled = false;
    while !children.is_empty() {
        if STOP.load(Ordering::SeqCst) && !signalled {
            signalled = true;
            for (_, child) in &children {
                // SAFETY: sending SIGTERM to our own child process.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            }
        }
        children.retain_mut(|(pool, child)| match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                if !status.success() {
                    eprintln!("cairn: serving pool '{pool}' ended with {status}");
                    failed += 1;
                }
                false
            }
            Err(_) => false,
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    match failed {
        0 => Ok(()),
        n => Err(format!(
            "{n} of {} pools could not be served (see above)",
            pools.len()
        )),
    }
}

fn serve_one(a: ServeArgs) -> Result<(), String> {
    // First of all: a SIGINT or SIGTERM while the pool opens and the listeners start
    // (clients may already connect) asks for the same clean stop as one later; the loop
    // below sees STOP at once.
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let home = crate::home();
    let pool_name = a.pools[0].clone();
    // Bad TLS files are found before the pool is opened.
    let tls = a.access.tls_policy()?;
    let tls_mode = tls.mode();
    let store = open(&pool_name)?;
    if a.tcp.is_empty() && a.sockets.is_empty() && a.mounts.is_empty() && !a.mount_all {
        // Holding the pool is a service of its own: commands over the control socket,
        // automatic snapshots, hot spares and resilvers.
        eprintln!("cairn: holding pool '{pool_name}' (no exports or mounts; commands go through its control socket)");
    }
    // Writes that lose their devices wait for `cairn clear` (failmode), which this
    // service takes over its control socket.
    store.pool().set_resumable(true);
    let store = Arc::new(store);
    let (source, server) = nbd_server(&a, &store, tls)?;
    let running = listen(&a, &server, tls_mode)?;
    if !running.is_empty() {
        eprintln!("cairn: exports: {}", source.list().join(", "));
    }
    let mounts = Arc::new(crate::mount_table::MountTable::new(store.clone()));
    match mounts.mount_initial(&a.mounts, a.mount_all) {
        Ok(()) => {}
        Err(e) => {
            mounts.stop_all();
            drop(mounts);
            for r in running {
                let _ = r.stop();
            }
            drop(server);
            drop(source);
            if let Ok(store) = Arc::try_unwrap(store) {
                finish(store)?;
            }
            return Err(e);
        }
    }
    let control = crate::control_server::spawn(
        home.clone(),
        store.clone(),
        serving(&a, &mounts, &server),
        &STOP,
    )
    .map_err(|e| format!("cannot open the control socket: {e}"))?;
    let mut healer = Healer::new()?;
    let watch_done = Arc::new(AtomicBool::new(false));
    let watch = crate::suspension_watch::spawn(store.clone(), &STOP, watch_done.clone());
    let sync_error = run_until_stopped(&a, &store, &mounts, &mut healer);
    if sync_error.is_some() {
        crate::suspension_watch::end_if_panic(store.pool());
    }
    for r in running {
        let _ = r.stop();
    }
    mounts.stop_all();
    STOP.store(true, Ordering::SeqCst);
    healer.join();
    let _ = control.join();
    watch_done.store(true, Ordering::SeqCst);
    let _ = watch.join();
    drop(mounts);
    drop(server);
    drop(source);
    let store =
        Arc::try_unwrap(store).map_err(|_| "a connection still holds the pool".to_string())?;
    close_after_serving(store, sync_error)
}

/// Closes the pool at the end of the service; the error says why the service failed: a
/// txg sync, or a stop while the pool was suspended (that gave up the waiting txg, see
/// `crate::suspension_watch`).
fn close_after_serving(store: Store, sync_error: Option<String>) -> Result<(), String> {
    let suspended = store.pool().io_suspended();
    let closed = finish(store);
    match (sync_error, closed) {
        (Some(e), Ok(())) => Err(format!("txg sync failed, stopped serving: {e}")),
        (Some(e), Err(c)) => Err(format!(
            "txg sync failed, stopped serving: {e} (closing the pool failed too: {c})"
        )),
        (None, Err(c)) if suspended.is_some() => Err(format!(
            "txg sync failed, stopped serving while the pool was suspended: {c}"
        )),
        (None, closed) => closed,
    }
}

/// What the control socket offers besides the store.
fn serving(
    a: &ServeArgs,
    mounts: &Arc<crate::mount_table::MountTable>,
    server: &NbdServer,
) -> crate::control_server::Serving {
    let server = server.clone();
    crate::control_server::Serving {
        until_unmounted: a.until_unmounted,
        mounts: mounts.clone(),
        nbd_clients: Box::new(move || server.stats().connections),
        stop: &STOP,
    }
}

/// The NBD server over the pool's volumes, with the access flags of `a` applied.
fn nbd_server(
    a: &ServeArgs,
    store: &Arc<Store>,
    tls: TlsPolicy,
) -> Result<(Arc<VolumeSource>, NbdServer), String> {
    let read_only = a.access.read_only_volumes(store.pool().name());
    check_volumes(store, &read_only)?;
    let source = Arc::new(VolumeSource {
        store: store.clone(),
        read_only,
    });
    let server = a.access.apply(NbdServer::new(source.clone()), tls)?;
    Ok((source, server))
}

/// Every `--nbd-read-only` name is a volume of the pool.
fn check_volumes(store: &Store, names: &HashSet<String>) -> Result<(), String> {
    for name in names {
        let is_volume = store
            .resolve(name)
            .is_ok_and(|r| r.kind == ObjectKind::Volume);
        if !is_volume {
            return Err(format!(
                "--nbd-read-only {name}: no such volume in this pool (give POOL/VOL or VOL of a volume)"
            ));
        }
    }
    Ok(())
}

/// Starts the NBD listeners `a` asks for.
fn listen(
    a: &ServeArgs,
    server: &NbdServer,
    tls: TlsMode,
) -> Result<Vec<cairn_nbd::RunningServer>, String> {
    let mut running = Vec::new();
    for addr in &a.tcp {
        let l = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        match l.local_addr() {
            Ok(bound) => {
                eprintln!("cairn: serving NBD on {bound}");
                crate::serve_access::warn_if_exposed(bound, tls);
            }
            Err(_) => eprintln!("cairn: serving NBD on {addr}"),
        }
        running.push(server.spawn_tcp(l));
    }
    for path in &a.sockets {
        let l =
            listen_unix(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        eprintln!("cairn: serving NBD on unix socket {}", path.display());
        running.push(server.spawn_unix(l));
    }
    Ok(running)
}

/// A Unix socket listening at `path`. The socket is bound under a temporary name in the
/// same directory and renamed once it listens: a client that waits for the file to appear
/// and connects is never refused (between bind and listen it would be).
fn listen_unix(path: &std::path::Path) -> std::io::Result<UnixListener> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let temporary = dir.join(format!(".cairn-nbd-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let listener = UnixListener::bind(&temporary)?;
    std::fs::rename(&temporary, path)?;
    Ok(listener)
}

/// The service's loop until SIGINT/SIGTERM, `--duration`, or (`--until-unmounted`) the
/// last unmount: reaps mounts, heals every second, takes automatic snapshots, syncs the
/// txg every `--sync-interval` when dirty. Returns why a sync failed, if one did.
fn run_until_stopped(
    a: &ServeArgs,
    store: &Arc<Store>,
    mounts: &crate::mount_table::MountTable,
    healer: &mut Healer,
) -> Option<String> {
    let start = Instant::now();
    let interval = Duration::from_secs_f64(a.sync_interval.max(0.1));
    let mut last_sync = Instant::now();
    let mut last_heal = Instant::now();
    let mut last_auto_snapshot: Option<Instant> = None;
    while !STOP.load(Ordering::SeqCst)
        && a.duration.is_none_or(|d| start.elapsed().as_secs_f64() < d)
        && !(a.until_unmounted && mounts.is_empty())
    {
        std::thread::sleep(Duration::from_millis(50));
        mounts.reap();
        if last_heal.elapsed() >= Duration::from_secs(1) {
            last_heal = Instant::now();
            healer.tick(store);
            // What happened in the service reaches `cairn events` within a second (a
            // process that exits writes its events as it ends; this one does not end).
            store.pool().note_leaf_changes();
            store.pool().flush_events();
        }
        if last_auto_snapshot.is_none_or(|t| t.elapsed() >= AUTO_SNAPSHOT_EVERY) {
            last_auto_snapshot = Some(Instant::now());
            auto_snapshots(store);
        }
        if last_sync.elapsed() >= interval {
            last_sync = Instant::now();
            // A suspended pool (failmode=continue) keeps its txg until `cairn clear`.
            if store.is_dirty() && store.pool().io_suspended().is_none() {
                if let Err(e) = store.sync() {
                    if store.pool().io_suspended().is_none() {
                        return Some(e.to_string());
                    }
                }
            }
        }
    }
    None
}

/// How often the service looks for automatic snapshots that are due (`snapshot:schedule`).
const AUTO_SNAPSHOT_EVERY: Duration = Duration::from_secs(60);

/// Takes and prunes the automatic snapshots due now; each action goes into the history.
fn auto_snapshots(store: &Store) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match store.auto_snapshot_tick(now) {
        Ok(done) => {
            for line in done {
                eprintln!("cairn: {line}");
                crate::history_cmd::record_served(store, &format!("cairn {line}"));
            }
        }
        Err(e) => eprintln!("cairn: automatic snapshots: {e}"),
    }
}
