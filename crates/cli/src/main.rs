//! The `cairn` binary: a thin clap front end over the library crates.

// The output macros of commands a service may run for a client (`served`); defined before
// the modules that use them.
/// `println!` for commands that may run for a client of the control socket.
macro_rules! outln {
    () => { $crate::served::out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::served::out(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprintln!` for commands that may run for a client of the control socket.
macro_rules! errln {
    ($($t:tt)*) => { $crate::served::err(format_args!("{}\n", format_args!($($t)*))) };
}

mod clock;
mod control;
mod control_server;
mod data_cmds;
mod demo;
mod device_cmds;
mod events_cmd;
mod history_cmd;
mod iostat_classes;
mod iostat_cmd;
mod iostat_format;
mod lab_cmd;
mod mount_cmds;
mod mount_table;
mod pool_cmds;
mod scrub_cmd;
mod serve;
mod serve_access;
mod served;
mod snapshot_cmds;
mod snapshot_export;
mod snapshot_paths;
mod store_open;
mod suspension_watch;
mod tunables;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// cairn: ZFS-style RAID-Z, mirrors and stripes in user space.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about, long_about = None)]
struct Cli {
    /// Set a tunable for this command, NAME=VALUE (repeatable; `cairn tunables` lists them).
    #[arg(long = "tunable", global = true, value_name = "NAME=VALUE")]
    tunables: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a pool: `cairn create [-f] [-n] [-o ashift=N] POOL VDEV…`
    /// (VDEV: DEVICE | mirror DEVICE… | raidz[1|2|3] DEVICE…).
    Create(CreateArgs),
    /// Show the health of pools, like `zpool status`.
    Status(StatusArgs),
    /// List pools with their size and space, like `zpool list` (+ AVAIL as `zfs list`).
    List(ListArgs),
    /// Import a pool by scanning devices; without POOL, list the pools that can be imported.
    Import(ImportArgs),
    /// Export a pool (mark it exported on its devices and forget it here).
    Export(PoolName),
    /// Destroy a pool (mark its devices free for reuse), a dataset (`POOL/DS`), or
    /// snapshots (`POOL/DS@NAME`, `@A%B` a range, `@A,B` several; `-r` in descendants too).
    Destroy(DestroyArgs),
    /// Take snapshots: `cairn snapshot [-r] POOL/DS@NAME…` (all in one txg).
    #[command(alias = "snap")]
    Snapshot(snapshot_cmds::SnapshotArgs),
    /// Roll a dataset back to a snapshot: `cairn rollback [-r] POOL/DS@NAME` (the newest,
    /// or with -r destroying the newer ones).
    Rollback(snapshot_cmds::RollbackArgs),
    /// A writable dataset that starts as a snapshot and shares its blocks:
    /// `cairn clone POOL/DS@SNAP POOL/NEW`.
    Clone(snapshot_cmds::CloneArgs),
    /// `cairn promote POOL/CLONE`: the clone takes its origin's snapshots up to the one it
    /// was cloned from, and the origin becomes its clone (so it can be destroyed).
    Promote(snapshot_cmds::PromoteArgs),
    /// Rename a dataset (with its descendants) or a snapshot: `cairn rename [-p] POOL/DS
    /// POOL/NEW`, `cairn rename [-r] POOL/DS@OLD @NEW`.
    Rename(snapshot_cmds::RenameArgs),
    /// What changed since a snapshot: `cairn diff [-H] POOL/DS@A [POOL/DS@B|POOL/DS]`.
    Diff(snapshot_cmds::DiffArgs),
    /// Hold snapshots (a held one cannot be destroyed): `cairn hold [-r] TAG POOL/DS@SNAP…`.
    Hold(snapshot_cmds::HoldArgs),
    /// Release a hold: `cairn release [-r] TAG POOL/DS@SNAP…`.
    Release(snapshot_cmds::HoldArgs),
    /// List the holds of snapshots: `cairn holds POOL/DS@SNAP…`.
    Holds(HoldsArgs),
    /// Write a snapshot as a stream: `cairn send POOL/DS@SNAP > FILE`.
    Send(snapshot_cmds::SendArgs),
    /// Create a dataset from a stream: `cairn receive POOL/NEWDS < FILE`.
    #[command(alias = "recv")]
    Receive(snapshot_cmds::ReceiveArgs),
    /// Reset error counters and lift faults: `cairn clear POOL [DEVICE]` (resilvers a
    /// device that missed writes).
    Clear(device_cmds::ClearArgs),
    /// Take a device offline: `cairn offline [-t] POOL DEVICE…`.
    Offline(device_cmds::OfflineArgs),
    /// Bring a device back online and resilver what it missed: `cairn online POOL DEVICE…`.
    Online(device_cmds::OnlineArgs),
    /// Replace a device and resilver: `cairn replace POOL OLD [NEW]` (NEW omitted: a new
    /// disk at OLD's path).
    Replace(device_cmds::ReplaceArgs),
    /// Mirror a device: `cairn attach POOL EXISTING NEW` (disk → mirror, mirror → wider).
    Attach(device_cmds::AttachArgs),
    /// Remove a side of a mirror: `cairn detach POOL DEVICE`.
    Detach(device_cmds::DetachArgs),
    /// Add top-level vdevs: `cairn add [-f] POOL VDEV…` (`log [mirror] DEV…` for log
    /// devices).
    Add(device_cmds::AddArgs),
    /// Remove a log device: `cairn remove POOL DEVICE`.
    Remove(device_cmds::RemoveArgs),
    /// Run (or resume) the resilver of devices that miss data.
    Resilver(device_cmds::ResilverArgs),
    /// Dump the four labels of a device, like `zdb -l`.
    Labels(LabelsArgs),
    /// Copy a local file into a dataset: `cairn put SRC POOL/DS[/PATH]`.
    Put(data_cmds::PutArgs),
    /// `cairn get POOL/DS/PATH DEST` copies a file out; `cairn get PROP[,PROP]|all DATASET`
    /// shows properties.
    Get(data_cmds::GetCmdArgs),
    /// Print a file to standard output.
    Cat(data_cmds::CatArgs),
    /// List a directory of a dataset.
    Ls(data_cmds::LsArgs),
    /// Remove a file (or with -r a directory).
    Rm(data_cmds::RmArgs),
    /// Make a directory (and its parents).
    Mkdir(data_cmds::MkdirArgs),
    /// Datasets: create, destroy, list.
    #[command(subcommand)]
    Dataset(data_cmds::DatasetCmd),
    /// Volumes (block devices, served over NBD): create.
    #[command(subcommand)]
    Volume(data_cmds::VolumeCmd),
    /// Set a property: `cairn set PROP=VALUE DATASET`.
    Set(data_cmds::SetArgs),
    /// Scrub a pool: read and verify every copy and parity column, repair what is wrong.
    Scrub(scrub_cmd::ScrubArgs),
    /// Mount a file system over FUSE: `cairn mount [-o ro] POOL/DS [DIR]`; without
    /// arguments, list the mounted ones.
    Mount(mount_cmds::MountArgs),
    /// Unmount a file system: `cairn umount [-f] DIR|POOL/DS`.
    #[command(alias = "unmount")]
    Umount(mount_cmds::UmountArgs),
    /// Hold a pool and export its volumes over NBD (`--nbd ADDR:PORT`, `--nbd-socket PATH`).
    Serve(serve::ServeArgs),
    /// Run the embedded demo: a raidz2 pool over six files in a temp folder, data written,
    /// two disks lost, every byte read back.
    Demo(demo::DemoArgs),
    /// Plan a pool: capacity, data-loss risk, speed and rebuild time of every layout.
    Plan(cairn_plan::PlanArgs),
    /// Benchmarks (parity kernels, …; `lab`: studies on simulated disks).
    #[command(subcommand)]
    Bench(lab_cmd::BenchCli),
    /// Torture: seeded random layouts, workloads and faults within redundancy, checked
    /// against a model (docs/torture.md). Prints the seed; replay with --seed S.
    Torture(cairn_torture::torture::TortureArgs),
    /// Crash loop: kill -9 a writer at random moments, re-import, check every
    /// acknowledged write and scrub.
    Crashloop(cairn_torture::crashloop::CrashLoopArgs),
    /// What happened to the pools (errors, state changes, scrubs, resilvers, spares,
    /// imports): `cairn events [-f] [-v] [-H] [-c] [POOL]`.
    Events(events_cmd::EventsArgs),
    /// I/O statistics like `zpool iostat`: `cairn iostat [-v] [-l] [-q] [-w] [-H] [-p]
    /// [--json] [POOL…] [INTERVAL [COUNT]]`.
    Iostat(iostat_cmd::IostatArgs),
    /// Show every command that changed a pool, kept in the pool: `cairn history [-l] [POOL…]`.
    History(history_cmd::HistoryArgs),
    /// Show the tunables in force and where each came from (--tunable, CAIRN_<NAME>,
    /// $CAIRN_HOME/tunables.conf, default).
    Tunables(TunablesArgs),
    /// The crash loop's writer (run by `cairn crashloop`).
    #[command(name = "__crash-writer", hide = true)]
    CrashWriter(cairn_torture::writer::WriterArgs),
}

#[derive(Args, Debug)]
struct CreateArgs {
    /// Force: allow mismatched replication levels and devices that hold another pool.
    #[arg(short = 'f')]
    force: bool,
    /// Dry run: print the layout and its capacity without writing anything.
    #[arg(short = 'n')]
    dry_run: bool,
    /// Pool property, e.g. `-o ashift=12`.
    #[arg(short = 'o', value_name = "PROP=VALUE")]
    options: Vec<String>,
    /// Open devices with O_DIRECT (bypass the page cache).
    #[arg(long)]
    direct: bool,
    /// Pool name.
    pool: String,
    /// Vdev specification.
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
    vdevs: Vec<String>,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// Verbose: also print space details.
    #[arg(short = 'v')]
    verbose: bool,
    /// Only pools that have errors or are not ONLINE ("all pools are healthy" otherwise).
    #[arg(short = 'x')]
    unhealthy_only: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    pool: Option<String>,
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    scripted: bool,
    /// Exact numbers (bytes).
    #[arg(short = 'p')]
    parsable: bool,
    /// Print JSON: {"pools": [{name, size, alloc, free, avail, health}]}.
    #[arg(long)]
    json: bool,
    /// Columns, comma-separated: name, size, alloc (allocated), free, cap (capacity), health,
    /// avail (available).
    #[arg(short = 'o', value_name = "PROP[,PROP]…")]
    columns: Option<String>,
    /// List datasets instead of pools, as `zfs list -t`: filesystem, volume, snapshot or all.
    #[arg(short = 't', value_name = "TYPE")]
    types: Option<String>,
    pool: Option<String>,
}

#[derive(Args, Debug)]
struct ImportArgs {
    /// Directory to scan for devices (repeatable). Default: /dev/disk/by-id, else /dev.
    #[arg(short = 'd', value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Import even if the pool looks in use by another importer.
    #[arg(short = 'f')]
    force: bool,
    /// Include destroyed pools.
    #[arg(short = 'D')]
    destroyed: bool,
    /// Pool name or numeric GUID.
    pool: Option<String>,
}

#[derive(Args, Debug)]
struct PoolName {
    /// When a `cairn serve` holds the pool: drop its NBD clients and unmount its file
    /// systems even if in use.
    #[arg(short = 'f')]
    force: bool,
    pool: String,
}

#[derive(Args, Debug)]
struct DestroyArgs {
    /// A pool that a `cairn serve` holds: drop its NBD clients and unmount its file
    /// systems even if in use.
    #[arg(short = 'f')]
    force: bool,
    /// Datasets: with their children; snapshots: the same names in every descendant.
    #[arg(short = 'r')]
    recursive: bool,
    /// Snapshots: print what would be destroyed and change nothing.
    #[arg(short = 'n')]
    dry_run: bool,
    /// Snapshots: print each one destroyed and the space it freed.
    #[arg(short = 'v')]
    verbose: bool,
    /// POOL, POOL/DATASET or POOL/DATASET@SNAPSHOT.
    name: String,
}

#[derive(Args, Debug)]
struct HoldsArgs {
    /// POOL/DS@SNAPSHOT…
    #[arg(required = true)]
    names: Vec<String>,
}

#[derive(Args, Debug)]
struct TunablesArgs {
    /// Print JSON: {"tunables": [{name, number, text, source}]}.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct LabelsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    device: PathBuf,
}

/// The state directory: `$CAIRN_HOME`, else `$XDG_STATE_HOME/cairn`, else
/// `~/.local/state/cairn` (else /var/lib/cairn). Only the binary reads the environment.
pub fn home() -> cairn_pool::Home {
    let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let root = var("CAIRN_HOME")
        .or_else(|| var("XDG_STATE_HOME").map(|d| d.join("cairn")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/cairn")))
        .unwrap_or_else(|| PathBuf::from("/var/lib/cairn"));
    cairn_pool::Home::at(root)
}

/// Block buffers (4 KiB–1 MiB) come and go at a high rate: keep them in malloc's arenas
/// instead of fresh mmaps that fault in every page again.
fn tune_malloc() {
    // SAFETY: mallopt only adjusts glibc allocator thresholds.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// `cairn plan | head`: when standard output is a pipe its reader closed, stop as coreutils
/// do — killed by SIGPIPE, nothing on standard error. SIGPIPE itself stays ignored (so a
/// closed NBD or control socket is an error to handle, not death); the failed print's panic
/// is what is caught here, whichever crate printed.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            // SAFETY: restoring the default action and raising a signal have no
            // preconditions; the process ends here.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() {
    tune_malloc();
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    if let Err(msg) = tunables::init(&cli.tunables) {
        eprintln!("cairn: {msg}");
        std::process::exit(1);
    }
    if let Some(pool) = served_pool(&cli.command) {
        // A `cairn serve` holds the pool: it runs the command itself (`served`).
        let argv: Vec<String> = std::env::args().skip(1).collect();
        if let Some(code) = control::exec(&home(), &pool, &argv) {
            exit_with(code);
        }
    }
    if let Some((pool, force)) = released_pool(&cli.command) {
        // `export` and `destroy` of a served pool: the service lets it go first.
        if let Err(msg) = control::release(&home(), &pool, force) {
            eprintln!("cairn: cannot {} '{pool}': {msg}", cli.command.verb());
            std::process::exit(1);
        }
    }
    let changed = changed_pool(&cli.command);
    let command_line = history_cmd::command_line();
    if let Some((pool, Record::Before)) = &changed {
        history_cmd::record(pool, &command_line);
    }
    if let Err(msg) = dispatch(cli.command) {
        eprintln!("cairn: {msg}");
        std::process::exit(1);
    }
    if let Some((pool, Record::After)) = &changed {
        history_cmd::record(pool, &command_line);
    }
}

/// Ends this process with a served command's exit code (141: by SIGPIPE, as the command
/// would have ended in-process when its output was closed).
fn exit_with(code: i32) -> ! {
    if code == 141 {
        // SAFETY: restoring the default action and raising a signal have no preconditions.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    std::process::exit(code)
}

/// The pool whose serving process (if one runs) should run `cmd`: the commands that read
/// or change files, datasets, volumes, dataset and pool properties, scrubs, rollbacks and
/// the device commands (offline, online, clear, replace, attach, detach, add, remove). The
/// others either ask the service for what they need themselves (`status`, `list`,
/// `iostat`, `history`, snapshots) or have it let the pool go (`export`, `destroy POOL`:
/// `released_pool`).
fn served_pool(cmd: &Command) -> Option<String> {
    use data_cmds::{DatasetCmd, VolumeCmd};
    use store_open::pool_of;
    let pool = |name: &str| Some(pool_of(name).to_string());
    match cmd {
        Command::Put(a) => pool(a.dest()),
        Command::Get(a) => pool(a.pool_name()),
        Command::Cat(a) => pool(a.path()),
        Command::Ls(a) => pool(a.path()),
        Command::Rm(a) => pool(a.path()),
        Command::Mkdir(a) => pool(a.path()),
        Command::Dataset(DatasetCmd::Create { name, .. })
        | Command::Dataset(DatasetCmd::Destroy { name, .. })
        | Command::Volume(VolumeCmd::Create { name, .. }) => pool(name),
        Command::Dataset(DatasetCmd::List { pool: p, .. }) => pool(p),
        Command::Destroy(a) if a.name.contains('/') && !a.name.contains('@') => pool(&a.name),
        Command::Set(a) => pool(&a.target),
        Command::Scrub(a) => pool(&a.pool),
        Command::Resilver(a) => pool(&a.pool),
        Command::Offline(a) => pool(&a.pool),
        Command::Online(a) => pool(&a.pool),
        Command::Clear(a) => pool(&a.pool),
        Command::Replace(a) => pool(&a.pool),
        Command::Attach(a) => pool(&a.pool),
        Command::Detach(a) => pool(&a.pool),
        Command::Add(a) => pool(&a.pool),
        Command::Remove(a) => pool(&a.pool),
        Command::Send(a) => a.pool(),
        Command::Receive(a) => pool(&a.target),
        Command::Clone(a) => pool(&a.snapshot),
        Command::Promote(a) => pool(&a.clone),
        Command::Rename(a) => pool(&a.from),
        Command::Rollback(a) => pool(&a.name),
        _ => None,
    }
}

/// The pool an `export` or `destroy` takes from the process serving it (and whether
/// forced: NBD clients are dropped and busy mounts detached).
fn released_pool(cmd: &Command) -> Option<(String, bool)> {
    match cmd {
        Command::Export(a) => Some((a.pool.clone(), a.force)),
        Command::Destroy(a) if !a.name.contains(['/', '@']) => Some((a.name.clone(), a.force)),
        _ => None,
    }
}

impl Command {
    /// The command's name, for messages.
    fn verb(&self) -> &'static str {
        match self {
            Command::Export(_) => "export",
            Command::Destroy(_) => "destroy",
            _ => "run this command on",
        }
    }
}

/// The files a served command changes: (`POOL/DS[/PATH]`, whether everything under it).
fn changes_files_of(cmd: &Command) -> Option<(&str, bool)> {
    use data_cmds::DatasetCmd;
    match cmd {
        Command::Put(a) => Some((a.dest(), false)),
        Command::Rm(a) => Some((a.path(), false)),
        Command::Mkdir(a) => Some((a.path(), false)),
        Command::Dataset(DatasetCmd::Destroy { name, .. }) => Some((name, true)),
        Command::Destroy(a) => Some((&a.name, true)),
        Command::Receive(a) => Some((&a.target, true)),
        Command::Rename(a) if !a.from.contains('@') => Some((&a.from, true)),
        _ => None,
    }
}

/// Runs a command line for a client of the control socket (`control::exec_request`), on
/// the thread `served::with_ctx` prepared; its exit code. What changed the pool goes into
/// its history as it would in-process.
pub(crate) fn run_served(store: &cairn_objset::Store, argv: &[String]) -> i32 {
    let args = std::iter::once("cairn".to_string()).chain(argv.iter().cloned());
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            errln!("{}", e.render());
            return e.exit_code();
        }
    };
    if served_pool(&cli.command).is_none() {
        errln!("cairn: the service does not run this command: run it with the pool not served");
        return 2;
    }
    if let Err(msg) = changes_files_of(&cli.command).map_or(Ok(()), |(target, all)| {
        served::check_not_mounted(target, all)
    }) {
        errln!("cairn: {msg}");
        return 1;
    }
    let changed = changed_pool(&cli.command);
    let command_line = std::iter::once("cairn")
        .chain(argv.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    match dispatch(cli.command) {
        Ok(()) => {
            if changed.is_some() {
                history_cmd::record_served(store, &command_line);
            }
            0
        }
        Err(msg) => {
            errln!("cairn: {msg}");
            1
        }
    }
}

fn dispatch(command: Command) -> Result<(), String> {
    match command {
        Command::Create(a) => pool_cmds::create(a),
        Command::Status(a) => pool_cmds::status(a),
        Command::List(a) => pool_cmds::list(a),
        Command::Import(a) => pool_cmds::import(a),
        Command::Export(a) => pool_cmds::export(a),
        Command::Destroy(a) => destroy(a),
        Command::Snapshot(a) => snapshot_cmds::snapshot(a),
        Command::Rollback(a) => snapshot_cmds::rollback(a),
        Command::Clone(a) => snapshot_cmds::clone(a),
        Command::Promote(a) => snapshot_cmds::promote(a),
        Command::Rename(a) => snapshot_cmds::rename(a),
        Command::Diff(a) => snapshot_cmds::diff(a),
        Command::Send(a) => snapshot_cmds::send(a),
        Command::Hold(a) => snapshot_cmds::hold(a, true),
        Command::Release(a) => snapshot_cmds::hold(a, false),
        Command::Holds(a) => snapshot_cmds::holds(&a.names),
        Command::Receive(a) => snapshot_cmds::receive(a),
        Command::Clear(a) => device_cmds::clear(a),
        Command::Offline(a) => device_cmds::offline(a),
        Command::Online(a) => device_cmds::online(a),
        Command::Replace(a) => device_cmds::replace(a),
        Command::Attach(a) => device_cmds::attach(a),
        Command::Detach(a) => device_cmds::detach(a),
        Command::Add(a) => device_cmds::add(a),
        Command::Remove(a) => device_cmds::remove(a),
        Command::Resilver(a) => device_cmds::resilver(a),
        Command::Labels(a) => pool_cmds::labels(a),
        Command::Put(a) => data_cmds::put(a),
        Command::Get(a) => data_cmds::get(a),
        Command::Cat(a) => data_cmds::cat(a),
        Command::Ls(a) => data_cmds::ls(a),
        Command::Rm(a) => data_cmds::rm(a),
        Command::Mkdir(a) => data_cmds::mkdir(a),
        Command::Dataset(c) => data_cmds::dataset(c),
        Command::Volume(c) => data_cmds::volume(c),
        Command::Set(a) => data_cmds::set(a),
        Command::Scrub(a) => scrub_cmd::scrub(a),
        Command::Serve(a) => serve::serve(a),
        Command::Mount(a) => mount_cmds::mount(a),
        Command::Umount(a) => mount_cmds::umount(a),
        Command::Demo(a) => demo::run(a),
        Command::Plan(args) => cairn_plan::run(&args).map_err(|e| e.to_string()),
        Command::Bench(cmd) => lab_cmd::run_bench(cmd),
        Command::Torture(mut a) => {
            a.dir.get_or_insert_with(std::env::temp_dir);
            torture(&a)
        }
        Command::Crashloop(mut a) => {
            a.dir.get_or_insert_with(std::env::temp_dir);
            crashloop(&a)
        }
        Command::History(a) => history_cmd::history(a),
        Command::Iostat(a) => iostat_cmd::iostat(a),
        Command::Events(a) => events_cmd::events(a),
        Command::Tunables(a) => {
            print!("{}", tunables::get().render(a.json));
            Ok(())
        }
        Command::CrashWriter(a) => cairn_torture::writer::run(&a).map_err(|e| e.to_string()),
    }
}

/// When a command that changes a pool is written into its history.
enum Record {
    /// After it succeeded (most commands).
    After,
    /// Before it runs: `export` and `destroy` take the pool away from this host.
    Before,
}

/// The pool a command changes, if any (for its history), as `zpool history` records them:
/// pool and device management, dataset and property changes, scrubs; not file data.
fn changed_pool(cmd: &Command) -> Option<(String, Record)> {
    use data_cmds::{DatasetCmd, VolumeCmd};
    use store_open::pool_of;
    let after = |name: &str| Some((pool_of(name).to_string(), Record::After));
    match cmd {
        Command::Create(a) if !a.dry_run => after(&a.pool),
        Command::Import(a) => {
            let name = a.pool.as_deref()?;
            let by_guid = name
                .parse::<u64>()
                .ok()
                .and_then(|g| home().name_of_guid(g));
            Some((by_guid.unwrap_or_else(|| name.to_string()), Record::After))
        }
        Command::Export(a) => Some((a.pool.clone(), Record::Before)),
        Command::Destroy(a) if a.dry_run => None,
        Command::Destroy(a) if a.name.contains(['/', '@']) => after(&a.name),
        Command::Destroy(a) => Some((a.name.clone(), Record::Before)),
        Command::Snapshot(a) => after(a.names.first()?),
        Command::Rollback(a) => after(&a.name),
        Command::Clone(a) => after(&a.target),
        Command::Promote(a) => after(&a.clone),
        Command::Rename(a) => after(&a.from),
        Command::Receive(a) => after(&a.target),
        Command::Hold(a) | Command::Release(a) => after(a.names.first()?),
        Command::Clear(a) => after(&a.pool),
        Command::Offline(a) => after(&a.pool),
        Command::Online(a) => after(&a.pool),
        Command::Replace(a) => after(&a.pool),
        Command::Attach(a) => after(&a.pool),
        Command::Detach(a) => after(&a.pool),
        Command::Add(a) => after(&a.pool),
        Command::Remove(a) => after(&a.pool),
        Command::Resilver(a) => after(&a.pool),
        Command::Scrub(a) => after(&a.pool),
        Command::Set(a) => after(&a.target),
        Command::Dataset(DatasetCmd::Create { name, .. })
        | Command::Dataset(DatasetCmd::Destroy { name, .. })
        | Command::Volume(VolumeCmd::Create { name, .. }) => after(name),
        _ => None,
    }
}

/// `cairn destroy`: snapshots (`@`), a dataset (`/`), or a pool.
fn destroy(a: DestroyArgs) -> Result<(), String> {
    if a.name.contains('@') {
        return snapshot_cmds::destroy(&a.name, a.recursive, a.dry_run, a.verbose);
    }
    if a.name.contains('/') {
        return data_cmds::dataset(data_cmds::DatasetCmd::Destroy {
            recursive: a.recursive,
            name: a.name,
        });
    }
    pool_cmds::destroy(PoolName {
        force: a.force,
        pool: a.name,
    })
}

/// `cairn torture`: fails (exit 1) when a violation was found.
fn torture(args: &cairn_torture::torture::TortureArgs) -> Result<(), String> {
    let report = cairn_torture::torture::run(args).map_err(|e| e.to_string())?;
    cairn_torture::torture::print_report(&report, args.json);
    match report.violations.len() {
        0 => Ok(()),
        n => Err(format!("torture found {n} violation(s)")),
    }
}

/// `cairn crashloop`: runs this binary's hidden `__crash-writer` as the writer.
fn crashloop(args: &cairn_torture::crashloop::CrashLoopArgs) -> Result<(), String> {
    let program = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let writer = cairn_torture::crashloop::WriterCommand {
        program,
        args: vec!["__crash-writer".into()],
    };
    let report = cairn_torture::crashloop::run(args, &writer).map_err(|e| e.to_string())?;
    cairn_torture::crashloop::print_report(&report, args.json);
    match report.violations.len() {
        0 => Ok(()),
        n => Err(format!("crash loop found {n} violation(s)")),
    }
}
