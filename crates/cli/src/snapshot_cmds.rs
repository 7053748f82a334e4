//! Snapshots from the command line, with zfs's grammar: `cairn snapshot [-r] DS@NAME…`,
//! `cairn rollback [-r] DS@NAME`, `cairn destroy [-r] [-n] [-v] DS@NAME[%NAME|,NAME…]`,
//! and `cairn list -t snapshot`. `POOL/DS@NAME/PATH` read by cat, get and ls: `crate::snapshot_paths`.

use cairn_geometry::units::format_zfs_size;
use cairn_objset::receive::ReceiveOptions;
use cairn_objset::send::SendOptions;
use cairn_objset::snapshot_ops::SnapshotInfo;
use cairn_objset::stream::{ResumeToken, StreamStats};
use cairn_objset::Store;
use clap::Args;

use crate::store_open::{finish, open, pool_of};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Also snapshot every descendant dataset (all in one txg).
    #[arg(short = 'r')]
    recursive: bool,
    /// POOL/DATASET@NAME (several: one txg for all).
    #[arg(required = true)]
    pub names: Vec<String>,
}

/// The one pool all of `names` belong to.
fn one_pool(names: &[String]) -> Result<&str, String> {
    let pool = pool_of(&names[0]);
    if let Some(other) = names.iter().find(|n| pool_of(n) != pool) {
        return Err(format!(
            "'{other}' is in another pool than '{}': snapshot one pool per command",
            names[0]
        ));
    }
    Ok(pool)
}

pub fn snapshot(a: SnapshotArgs) -> Result<(), String> {
    let pool = one_pool(&a.names)?;
    let flag = if a.recursive { "-r " } else { "" };
    if let Some(answer) = ask(pool, &format!("snapshot {flag}{}", a.names.join(" "))) {
        return answer.map(|_| ());
    }
    let store = open(pool)?;
    store.snapshot_create(&a.names, a.recursive).map_err(err)?;
    finish(store)
}

/// Asks the process serving `pool`, if there is one: `Some(Ok(answer))` or `Some(Err(why))`.
fn ask(pool: &str, request: &str) -> Option<Result<String, String>> {
    // A service that ended before it answered comes back as an error (`control::ask`):
    // the change may or may not be done, and is never reported as done.
    let answer = crate::control::ask(&crate::home(), pool, request)?;
    Some(match answer.strip_prefix("error: ") {
        Some(why) => Err(why.trim_end().to_string()),
        None => Ok(answer),
    })
}

/// The control socket's snapshot requests, served by the process holding the pool:
/// `snapshot [-r] DS@NAME…` and `destroy-snapshot DS@NAME`.
pub fn serve_request(store: &Store, request: &str) -> String {
    let mut words = request.split_whitespace();
    let verb = words.next().unwrap_or("");
    let rest: Vec<String> = words.map(String::from).collect();
    let result = match verb {
        "snapshot" => {
            let recursive = rest.first().is_some_and(|w| w == "-r");
            let names = &rest[usize::from(recursive)..];
            if names.is_empty() {
                Err("give POOL/DATASET@NAME".to_string())
            } else {
                store
                    .snapshot_create(names, recursive)
                    .map(|_| "ok".to_string())
                    .map_err(err)
            }
        }
        "hold" | "release" if !rest.is_empty() => {
            let recursive = rest[0] == "-r";
            let rest = &rest[usize::from(recursive)..];
            match rest.split_first() {
                Some((tag, names)) if !names.is_empty() => store
                    .snapshot_hold(names, tag, recursive, verb == "hold")
                    .map(|()| "ok".to_string())
                    .map_err(err),
                _ => Err("give TAG POOL/DS@SNAP…".to_string()),
            }
        }
        "diff" if rest.len() == 2 => {
            return match store.diff(&rest[0], &rest[1]) {
                Ok(c) => serde_json::to_string(&c).unwrap_or_default(),
                Err(e) => format!("error: {e}\n"),
            };
        }
        "destroy-snapshot" if rest.len() == 1 => store
            .snapshot_destroy(&rest[0])
            .map(|freed| freed.to_string())
            .map_err(err),
        _ => Err(format!("unknown request '{request}'")),
    };
    if result.is_ok() {
        crate::history_cmd::record_served(store, &format!("cairn {request}"));
    }
    match result {
        Ok(answer) => format!("{answer}\n"),
        Err(why) => format!("error: {why}\n"),
    }
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// Scripted: no alignment, tab-separated (as `zfs diff -H`).
    #[arg(short = 'H')]
    scripted: bool,
    /// Print JSON: {"changes": [{change, path, new_path, kind}]}.
    #[arg(long)]
    json: bool,
    /// POOL/DS@SNAPSHOT.
    from: String,
    /// A later snapshot of the same dataset, or the dataset (default).
    to: Option<String>,
}

/// `cairn diff POOL/DS@A [POOL/DS@B|POOL/DS]`: `M`, `+`, `-`, `R` lines as zfs prints them.
pub fn diff(a: DiffArgs) -> Result<(), String> {
    let (ds, _) = a.from.split_once('@').ok_or("give POOL/DATASET@SNAPSHOT")?;
    let to = a.to.clone().unwrap_or_else(|| ds.to_string());
    let changes = match ask(pool_of(ds), &format!("diff {} {to}", a.from)) {
        Some(answer) => serde_json::from_str(&answer?).map_err(err)?,
        None => {
            let store = open(pool_of(ds))?;
            let changes = store.diff(&a.from, &to).map_err(err);
            finish(store)?;
            changes?
        }
    };
    print_diff(&changes, a.scripted, a.json);
    Ok(())
}

fn print_diff(changes: &[cairn_objset::diff::DiffEntry], scripted: bool, json: bool) {
    if json {
        println!("{}", serde_json::json!({ "changes": changes }));
        return;
    }
    for c in changes {
        let rest = match &c.new_path {
            Some(n) if scripted => format!("\t{n}"),
            Some(n) => format!(" -> {n}"),
            None => String::new(),
        };
        println!("{}\t{}{rest}", c.change, c.path);
    }
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    /// The same snapshot name in every descendant that has it.
    #[arg(short = 'r')]
    recursive: bool,
    /// The hold's tag.
    tag: String,
    /// POOL/DS@SNAPSHOT…
    #[arg(required = true)]
    pub names: Vec<String>,
}

/// `cairn hold` (`add`) and `cairn release`: a held snapshot cannot be destroyed.
pub fn hold(a: HoldArgs, add: bool) -> Result<(), String> {
    let pool = one_pool(&a.names)?;
    let verb = if add { "hold" } else { "release" };
    let flag = if a.recursive { "-r " } else { "" };
    if a.tag.contains(char::is_whitespace) {
        return Err(format!("tag '{}': no spaces", a.tag));
    }
    let request = format!("{verb} {flag}{} {}", a.tag, a.names.join(" "));
    if let Some(answer) = ask(pool, &request) {
        return answer.map(|_| ());
    }
    let store = open(pool)?;
    store
        .snapshot_hold(&a.names, &a.tag, a.recursive, add)
        .map_err(err)?;
    finish(store)
}

/// `cairn holds POOL/DS@SNAP…`: NAME TAG lines.
pub fn holds(names: &[String]) -> Result<(), String> {
    let pool = one_pool(names)?;
    let snaps = all_snapshots(pool)?;
    println!("{:<40} TAG", "NAME");
    for n in names {
        let s = snaps
            .iter()
            .find(|s| &s.name == n)
            .ok_or_else(|| format!("could not find snapshot '{n}'"))?;
        for tag in &s.holds {
            println!("{:<40} {tag}", s.name);
        }
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct SendArgs {
    /// POOL/DS@SNAPSHOT: a stream of it goes to standard output.
    #[arg(required_unless_present = "token")]
    snapshot: Option<String>,
    /// Resume a receive that `receive -s` kept: TOKEN is the receiving dataset's
    /// receive_resume_token; the rest of its stream is sent.
    #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["snapshot", "incremental", "intermediates", "replicate"])]
    token: Option<String>,
    /// An incremental from this earlier snapshot (`@a`, `a` or `POOL/DS@a`): only what
    /// changed since it is sent. For a clone, its origin (named in full, `POOL/DS@a`):
    /// what the clone changed since it was made.
    #[arg(short = 'i', value_name = "SNAPSHOT", conflicts_with = "intermediates")]
    incremental: Option<String>,
    /// As -i, with every snapshot in between (a stream each).
    #[arg(short = 'I', value_name = "SNAPSHOT")]
    intermediates: Option<String>,
    /// A replication stream: the dataset, its descendants, and all their snapshots up to
    /// this one (with -i each one's incremental, with -I every snapshot after the origin).
    #[arg(short = 'R')]
    replicate: bool,
    /// Print what was sent on standard error.
    #[arg(short = 'v')]
    verbose: bool,
}

impl SendArgs {
    /// The pool the stream comes from (of the snapshot, or of the token's snapshot).
    pub fn pool(&self) -> Option<String> {
        match (&self.snapshot, &self.token) {
            (Some(s), _) => Some(pool_of(s).to_string()),
            (None, Some(t)) => ResumeToken::decode(t)
                .ok()
                .map(|t| pool_of(&t.to).to_string()),
            (None, None) => None,
        }
    }
}

/// `cairn send POOL/DS@SNAP > FILE` (or `| cairn receive …`, `| ssh host cairn receive …`).
pub fn send(a: SendArgs) -> Result<(), String> {
    use std::io::IsTerminal;
    if !crate::served::active() && std::io::stdout().is_terminal() {
        return Err(
            "the stream is binary: redirect it to a file or a pipe (`cairn send DS@SNAP > FILE`)"
                .into(),
        );
    }
    let opts = SendOptions {
        from: a.incremental.clone().or(a.intermediates.clone()),
        intermediates: a.intermediates.is_some(),
        replicate: a.replicate,
    };
    let (what, pool) = match (&a.snapshot, &a.token) {
        (Some(snapshot), _) => (snapshot.clone(), pool_of(snapshot).to_string()),
        (None, Some(token)) => {
            let t = ResumeToken::decode(token).map_err(err)?;
            (format!("the rest of {}", t.to), pool_of(&t.to).to_string())
        }
        (None, None) => unreachable!("clap requires one"),
    };
    let store = open(&pool)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, crate::served::stdout());
    let stats = match (&a.snapshot, &a.token) {
        (Some(snapshot), _) => store.send(snapshot, &opts, &mut out),
        (None, Some(token)) => store.send_resume(token, &mut out),
        (None, None) => unreachable!("clap requires one"),
    }
    .map_err(err);
    drop(out);
    finish(store)?;
    let stats = stats?;
    if a.verbose {
        errln!("sent {what}: {}", stream_summary(&stats));
    }
    Ok(())
}

/// "N streams, N objects (N freed), SIZE of data, N stream bytes".
fn stream_summary(s: &StreamStats) -> String {
    format!(
        "{} stream{}, {} objects ({} freed), {} of data, {} stream bytes",
        s.streams,
        if s.streams == 1 { "" } else { "s" },
        s.objects,
        s.freed_objects,
        format_zfs_size(s.data_bytes),
        s.stream_bytes
    )
}

#[derive(Args, Debug)]
pub struct ReceiveArgs {
    /// POOL/DS: a full stream creates it; an incremental updates it (it must hold the
    /// stream's origin snapshot). A replication stream's descendants go below it.
    pub target: String,
    /// Roll the target back to the incremental's origin first (destroying newer snapshots
    /// and changes made since).
    #[arg(short = 'F')]
    force: bool,
    /// If the stream stops part-way, keep what arrived: `cairn send -t TOKEN` (TOKEN from
    /// `cairn get receive_resume_token DS`) sends the rest.
    #[arg(short = 's')]
    resumable: bool,
    /// `-o origin=POOL/DS@SNAP`: receive an incremental as a new clone of this snapshot
    /// (the receiver's copy of the stream's origin; a stream from a clone's origin finds
    /// it by its guid without -o).
    #[arg(short = 'o', value_name = "origin=SNAPSHOT")]
    option: Vec<String>,
    /// Discard a partial receive kept by -s (the dataset it was making, or what it applied
    /// since the incremental's origin); reads no stream.
    #[arg(short = 'A', conflicts_with_all = ["force", "resumable", "option"])]
    abort: bool,
    /// Print what was received.
    #[arg(short = 'v')]
    verbose: bool,
}

pub fn receive(a: ReceiveArgs) -> Result<(), String> {
    let store = open(pool_of(&a.target))?;
    if a.abort {
        let done = store.receive_abort(&a.target).map_err(err);
        finish(store)?;
        return done;
    }
    let mut input = std::io::BufReader::with_capacity(1 << 20, crate::served::stdin());
    let opts = ReceiveOptions {
        force: a.force,
        resumable: a.resumable,
        origin: receive_origin(&a.option)?,
    };
    let stats = store.receive(&a.target, &opts, &mut input).map_err(err);
    finish(store)?;
    let stats = stats?;
    if a.verbose {
        outln!("received {}: {}", a.target, stream_summary(&stats));
    }
    Ok(())
}

/// The snapshot of `-o origin=SNAPSHOT` (the one property `receive -o` takes).
fn receive_origin(options: &[String]) -> Result<Option<String>, String> {
    let mut origin = None;
    for o in options {
        match o.split_once('=') {
            Some(("origin", snap)) if snap.contains('@') => origin = Some(snap.to_string()),
            Some(("origin", snap)) => {
                return Err(format!(
                    "-o origin={snap}: the origin is a snapshot, POOL/DS@SNAP"
                ))
            }
            _ => {
                return Err(format!(
                    "-o {o}: receive takes only -o origin=POOL/DS@SNAP (set other properties after with `cairn set`)"
                ))
            }
        }
    }
    Ok(origin)
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// Destroy the snapshots newer than the one rolled back to.
    #[arg(short = 'r')]
    destroy_newer: bool,
    /// POOL/DATASET@NAME.
    pub name: String,
}

/// `cairn rollback [-r] POOL/DS@NAME`. In a service that has the dataset mounted, the mount
/// goes while the dataset rolls back and comes back after (`MountTable::with_unmounted`).
pub fn rollback(a: RollbackArgs) -> Result<(), String> {
    let store = open(pool_of(&a.name))?;
    let dataset = a.name.split('@').next().unwrap_or_default();
    let mut roll = || {
        store
            .snapshot_rollback(&a.name, a.destroy_newer)
            .map_err(err)
    };
    match crate::served::mounts() {
        Some(mounts) => mounts.with_unmounted(dataset, &mut roll)?,
        None => roll()?,
    }
    finish(store)
}

#[derive(Args, Debug)]
pub struct CloneArgs {
    /// POOL/DS@SNAP: what the clone starts as.
    pub snapshot: String,
    /// POOL/NEW: the clone, a writable dataset (or volume) sharing the snapshot's blocks.
    pub target: String,
}

/// `cairn clone POOL/DS@SNAP POOL/NEW`.
pub fn clone(a: CloneArgs) -> Result<(), String> {
    let store = open(pool_of(&a.snapshot))?;
    let made = store.clone_create(&a.snapshot, &a.target).map_err(err);
    finish(store)?;
    made
}

#[derive(Args, Debug)]
pub struct PromoteArgs {
    /// POOL/CLONE: a clone; it takes its origin's snapshots up to its origin snapshot.
    pub clone: String,
    /// Print which snapshots moved and the space that changed hands.
    #[arg(short)]
    pub verbose: bool,
}

/// `cairn promote POOL/CLONE`.
pub fn promote(a: PromoteArgs) -> Result<(), String> {
    let store = open(pool_of(&a.clone))?;
    let done = store.promote(&a.clone).map_err(err);
    finish(store)?;
    let report = done?;
    if a.verbose {
        let names: Vec<String> = report.moved.iter().map(|n| format!("@{n}")).collect();
        outln!("{}: took {} from its origin", a.clone, names.join(" "));
        outln!(
            "  {} of the origin snapshot now on its dead lists; {} left to it by the old origin",
            cairn_objset::dataset::format_size(report.adopted),
            cairn_objset::dataset::format_size(report.released)
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct RenameArgs {
    /// POOL/DS (moves its descendants and snapshots with it) or POOL/DS@SNAP.
    pub from: String,
    /// POOL/NEW, or for a snapshot POOL/DS@NEW or @NEW.
    pub to: String,
    /// Make the missing parents of the new dataset name.
    #[arg(short)]
    pub parents: bool,
    /// Snapshots: the same snapshot of every descendant that has it too.
    #[arg(short)]
    pub recursive: bool,
}

/// `cairn rename`.
pub fn rename(a: RenameArgs) -> Result<(), String> {
    let snapshot = a.from.contains('@');
    if snapshot && a.parents {
        return Err(
            "-p makes parents of a dataset's new name; a snapshot keeps its dataset".into(),
        );
    }
    if !snapshot && a.recursive {
        return Err(
            "-r renames a snapshot in every descendant; a dataset always moves with its descendants"
                .into(),
        );
    }
    let store = open(pool_of(&a.from))?;
    let done = if snapshot {
        store
            .snapshot_rename(&a.from, &a.to, a.recursive)
            .map_err(err)
    } else {
        refuse_exported_volumes(&store, &a.from)
            .and_then(|()| store.dataset_rename(&a.from, &a.to, a.parents).map_err(err))
    };
    finish(store)?;
    done
}

/// A service exports its volumes by name: renaming one under it is refused.
fn refuse_exported_volumes(store: &Store, from: &str) -> Result<(), String> {
    if !crate::served::active() {
        return Ok(());
    }
    let table = store.datasets();
    let under = |n: &str| n == from || n.starts_with(&format!("{from}/"));
    let volume = table
        .datasets
        .iter()
        .find(|d| under(&d.name) && d.kind == cairn_objset::DatasetKind::Volume);
    match volume {
        Some(v) => Err(format!(
            "{} is a volume this service exports by name: stop `cairn serve`, rename, and serve again",
            v.name
        )),
        None => Ok(()),
    }
}

/// `cairn destroy` of snapshots: `DS@A` (one), `DS@A%B` (A to B in txg order; either end
/// may be left out), `DS@A,B,C`; `-r` the same names in every descendant.
pub fn destroy(spec: &str, recursive: bool, dry_run: bool, verbose: bool) -> Result<(), String> {
    let (ds, names) = spec.split_once('@').ok_or("give POOL/DATASET@NAME")?;
    if crate::control::ask(&crate::home(), pool_of(ds), "mode").is_some() {
        return destroy_served(ds, names, recursive, dry_run, verbose);
    }
    let store = open(pool_of(ds))?;
    let result = destroy_in(&store, ds, names, recursive, dry_run, verbose);
    finish(store)?;
    result
}

fn destroy_in(
    store: &Store,
    ds: &str,
    names: &str,
    recursive: bool,
    dry_run: bool,
    verbose: bool,
) -> Result<(), String> {
    let mut datasets = vec![ds.to_string()];
    if recursive {
        let table = store.datasets();
        let prefix = format!("{ds}/");
        datasets.extend(
            table
                .datasets
                .iter()
                .filter(|d| d.name.starts_with(&prefix))
                .map(|d| d.name.clone()),
        );
    }
    let mut victims = Vec::new();
    for (i, d) in datasets.iter().enumerate() {
        let snaps = store.snapshots(Some(d)).map_err(err)?;
        // The named dataset must have them; descendants may lack them (as zfs -r).
        victims.extend(select(&snaps, d, names, i == 0)?);
    }
    for v in victims {
        if dry_run {
            println!("would destroy {v}");
            continue;
        }
        let freed = store.snapshot_destroy(&v).map_err(err)?;
        if verbose {
            println!("destroyed {v}, freed {}", format_zfs_size(freed));
        }
    }
    Ok(())
}

/// `destroy` through the process serving the pool (snapshots of a mounted dataset).
fn destroy_served(
    ds: &str,
    names: &str,
    recursive: bool,
    dry_run: bool,
    verbose: bool,
) -> Result<(), String> {
    let pool = pool_of(ds);
    let all = ask(pool, "snapshots").ok_or("the serving process went away")??;
    let all: Vec<SnapshotInfo> = serde_json::from_str(&all).map_err(err)?;
    let prefix = format!("{ds}/");
    let mut datasets: Vec<&str> = vec![ds];
    for s in &all {
        let d = s.name.split_once('@').map_or("", |p| p.0);
        if recursive && d.starts_with(&prefix) && !datasets.contains(&d) {
            datasets.push(d);
        }
    }
    for (i, d) in datasets.iter().enumerate() {
        let mine: Vec<SnapshotInfo> = all
            .iter()
            .filter(|s| s.name.split_once('@').is_some_and(|p| p.0 == *d))
            .cloned()
            .collect();
        for v in select(&mine, d, names, i == 0)? {
            if dry_run {
                println!("would destroy {v}");
                continue;
            }
            let freed = ask(pool, &format!("destroy-snapshot {v}"))
                .ok_or("the serving process went away")??;
            if verbose {
                let freed: u64 = freed.trim().parse().unwrap_or(0);
                println!("destroyed {v}, freed {}", format_zfs_size(freed));
            }
        }
    }
    Ok(())
}

/// The snapshots of `ds` that `names` (`A`, `A%B`, `A,B`) selects, oldest first.
fn select(
    snaps: &[SnapshotInfo],
    ds: &str,
    names: &str,
    must_exist: bool,
) -> Result<Vec<String>, String> {
    let short: Vec<&str> = snaps
        .iter()
        .map(|s| s.name.split_once('@').map_or("", |p| p.1))
        .collect();
    let position = |n: &str| short.iter().position(|s| *s == n);
    let missing = |n: &str| {
        format!("could not find snapshot '{ds}@{n}'; `cairn list -t snapshot` lists them")
    };
    let picked: Vec<usize> = if let Some((from, to)) = names.split_once('%') {
        let a = if from.is_empty() {
            Some(0)
        } else {
            position(from)
        };
        let b = if to.is_empty() {
            short.len().checked_sub(1)
        } else {
            position(to)
        };
        match (a, b) {
            (Some(a), Some(b)) if a <= b => (a..=b).collect(),
            (Some(_), Some(_)) => return Err(format!("'{from}' is newer than '{to}'")),
            (None, _) if must_exist => return Err(missing(from)),
            (_, None) if must_exist => return Err(missing(to)),
            _ => Vec::new(),
        }
    } else {
        let mut out = Vec::new();
        for n in names.split(',') {
            match position(n) {
                Some(i) => out.push(i),
                None if must_exist => return Err(missing(n)),
                None => {}
            }
        }
        out
    };
    Ok(picked.into_iter().map(|i| snaps[i].name.clone()).collect())
}

/// Every snapshot of `pool`, from the process serving it or from the pool itself.
fn all_snapshots(pool: &str) -> Result<Vec<SnapshotInfo>, String> {
    if let Some(answer) = ask(pool, "snapshots") {
        return serde_json::from_str(&answer?).map_err(err);
    }
    let store = open(pool)?;
    let snaps = store.snapshots(None).map_err(err);
    finish(store)?;
    snaps
}

/// `cairn list -t TYPE[,TYPE] POOL|DS`: datasets (`filesystem`, `volume`, `all`) and/or
/// snapshots (`snapshot`, `all`).
pub fn list_typed(
    types: &str,
    target: Option<&str>,
    scripted: bool,
    parsable: bool,
    json: bool,
) -> Result<(), String> {
    let target = target.ok_or("name the pool or dataset: `cairn list -t snapshot POOL`")?;
    let mut datasets = false;
    let mut snapshots = false;
    for t in types.split(',') {
        match t {
            "filesystem" | "volume" => datasets = true,
            "snapshot" | "snap" => snapshots = true,
            "all" => (datasets, snapshots) = (true, true),
            other => {
                return Err(format!(
                    "unknown type '{other}': use filesystem, volume, snapshot or all"
                ))
            }
        }
    }
    if datasets {
        list_datasets(pool_of(target), scripted, parsable, json)?;
    }
    if snapshots {
        if datasets && !scripted && !json {
            println!();
        }
        list(target, scripted, parsable, json)?;
    }
    Ok(())
}

/// The datasets part of `list -t`: `dataset list`, run by the service when one holds the
/// pool (as `dataset list` itself is), else in-process.
fn list_datasets(pool: &str, scripted: bool, parsable: bool, json: bool) -> Result<(), String> {
    let mut argv: Vec<String> = vec!["dataset".into(), "list".into()];
    for (on, flag) in [(scripted, "-H"), (parsable, "-p"), (json, "--json")] {
        if on {
            argv.push(flag.into());
        }
    }
    argv.push(pool.into());
    match crate::control::exec(&crate::home(), pool, &argv) {
        Some(0) => Ok(()),
        Some(code) => Err(format!(
            "the service holding '{pool}' could not list its datasets (exit code {code})"
        )),
        None => crate::data_cmds::dataset(crate::data_cmds::DatasetCmd::List {
            scripted,
            parsable,
            json,
            pool: pool.to_string(),
        }),
    }
}

/// `cairn list -t snapshot [POOL|DS]`: NAME USED AVAIL REFER MOUNTPOINT, as zfs shows them.
pub fn list(target: &str, scripted: bool, parsable: bool, json: bool) -> Result<(), String> {
    let only = target.contains('/').then_some(target);
    let mut snaps = all_snapshots(pool_of(target))?;
    if let Some(ds) = only {
        snaps.retain(|s| s.name.split_once('@').is_some_and(|p| p.0 == ds));
    }
    if json {
        println!("{}", serde_json::json!({ "snapshots": snaps }));
        return Ok(());
    }
    let size = |b: u64| {
        if parsable {
            b.to_string()
        } else {
            format_zfs_size(b)
        }
    };
    let mut rows = Vec::new();
    if !scripted {
        rows.push(["NAME", "USED", "AVAIL", "REFER", "MOUNTPOINT"].map(String::from));
    }
    for s in &snaps {
        rows.push([
            s.name.clone(),
            size(s.used),
            "-".into(),
            size(s.referenced),
            "-".into(),
        ]);
    }
    print_rows(&rows, scripted);
    Ok(())
}

fn print_rows(rows: &[[String; 5]], scripted: bool) {
    if scripted {
        for r in rows {
            println!("{}", r.join("\t"));
        }
        return;
    }
    let w: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        println!(
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        );
    }
}
