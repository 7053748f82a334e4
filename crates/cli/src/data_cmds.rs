//! Data commands: put, get, cat, ls, rm, mkdir; datasets, volumes and properties; scrub.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cairn_geometry::format_zfs_size;
use cairn_objset::dataset::validate_dataset_name;
use cairn_objset::{read_error_log, DatasetKind, ErrorLog, Store};
use cairn_pool::status::DataErrors;
use cairn_pool::Pool;
use clap::{Args, Subcommand};

use crate::store_open::{finish, open, pool_of};

/// Bytes moved per read/write call of put/get.
const CHUNK: usize = 1 << 20;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The pool's error log, read from its newest tree without opening the store (for
/// `status` of a pool no process holds).
pub fn load_errors(pool: &Pool) -> DataErrors {
    match read_error_log(pool) {
        Ok(log) => data_errors(log),
        Err(e) => DataErrors {
            unreadable: Some(e.to_string()),
            ..DataErrors::default()
        },
    }
}

pub fn data_errors(log: ErrorLog) -> DataErrors {
    DataErrors {
        files: log.entries,
        unlisted: log.unlisted,
        unreadable: None,
    }
}

fn progress_bar(total: u64, what: &str) -> Option<indicatif::ProgressBar> {
    if !crate::served::stderr_is_terminal() || total < (64 << 20) {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    Some(bar)
}

// ---- put / get / cat / ls / rm / mkdir ---------------------------------------------------

#[derive(Args, Debug)]
pub struct PutArgs {
    /// Overwrite an existing file.
    #[arg(short = 'f')]
    force: bool,
    /// Local file to copy in (`-` = standard input).
    src: PathBuf,
    /// Destination `POOL/DATASET[/PATH]`; a directory gets the source's file name.
    dest: String,
}

impl PutArgs {
    pub fn dest(&self) -> &str {
        &self.dest
    }
}

/// Prefix of the hidden file a `put` writes before it takes the final name.
const PUT_TEMP_PREFIX: &str = ".cairn-put-";

/// `cairn put`: all or nothing. The data goes to a hidden file in the destination's
/// directory, which takes the final name (replacing an old file with `-f`) only when it is
/// complete; a put that fails (ENOSPC, a read error) removes it, and one that was killed
/// leaves at most that hidden file, which the next put into the directory removes.
pub fn put(a: PutArgs) -> Result<(), String> {
    let store = open(pool_of(&a.dest))?;
    let dest = put_destination(&store, &a)?;
    let (mut input, total): (Box<dyn Read>, u64) = if a.src.as_os_str() == "-" {
        (crate::served::stdin(), 0)
    } else {
        let f = std::fs::File::open(&a.src).map_err(|e| format!("{}: {e}", a.src.display()))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(f), len)
    };
    let (dir, name) = dest
        .rsplit_once('/')
        .expect("a destination has a directory");
    remove_stale_put_temps(&store, dir);
    let temp = if crate::served::active() {
        // Puts of several clients run at once in a service: each its own temp name.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{dir}/{PUT_TEMP_PREFIX}{}.{n}-{name}", std::process::id())
    } else {
        format!("{dir}/{PUT_TEMP_PREFIX}{}-{name}", std::process::id())
    };
    let written = store
        .create_file(&temp, true)
        .map_err(err)
        .and_then(|_| copy_in(&store, &temp, &mut input, total, &a.src))
        .and_then(|_| store.replace_with(&temp, &dest).map_err(err));
    if let Err(e) = written {
        // Nothing under the final name changed; the partial copy goes too.
        let _ = store.remove(&temp, false);
        finish(store)?;
        return Err(e);
    }
    finish(store)
}

/// The file a put writes: DEST itself, or DEST/NAME when DEST is a directory (or ends in
/// `/`, which must then name one). An existing file is refused without `-f`.
fn put_destination(store: &Store, a: &PutArgs) -> Result<String, String> {
    let trimmed = a.dest.trim_end_matches('/').to_string();
    let is_dir = match store.resolve(&trimmed) {
        Ok(r) => r.kind == cairn_objset::dnode::ObjectKind::Directory,
        Err(_) if a.dest.ends_with('/') => {
            return Err(format!(
                "'{trimmed}' is not a dataset or directory; create it first (`cairn dataset create {trimmed}` or `cairn mkdir {trimmed}`)"
            ))
        }
        Err(_) => false,
    };
    let dest = if is_dir {
        let name = a
            .src
            .file_name()
            .ok_or("give a file name for data from stdin")?;
        format!("{trimmed}/{}", name.to_string_lossy())
    } else {
        trimmed
    };
    if !dest.contains('/') {
        return Err(format!(
            "'{dest}': give a path inside a dataset, e.g. {dest}/file"
        ));
    }
    match store.resolve(&dest) {
        Ok(r) if r.kind == cairn_objset::dnode::ObjectKind::Directory => {
            Err(format!("'{dest}' is a directory"))
        }
        Ok(_) if !a.force => Err(format!("'{dest}' exists; use -f to overwrite")),
        _ => Ok(dest),
    }
}

/// Removes what killed puts left in `dir` (this process holds the pool, so no put of
/// another process is running there now; a service's own puts in flight are kept).
fn remove_stale_put_temps(store: &Store, dir: &str) {
    let Ok(entries) = store.list(dir) else { return };
    let ours = format!("{PUT_TEMP_PREFIX}{}.", std::process::id());
    for e in entries {
        if e.name.starts_with(PUT_TEMP_PREFIX) && !e.name.starts_with(&ours) {
            let _ = store.remove(&format!("{dir}/{}", e.name), false);
        }
    }
}

/// Copies `input` into the file at `path`.
fn copy_in(
    store: &Store,
    path: &str,
    input: &mut dyn Read,
    total: u64,
    src: &Path,
) -> Result<(), String> {
    let r = store.resolve(path).map_err(err)?;
    let bar = progress_bar(total, "put");
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = read_full(input, &mut buf).map_err(|e| format!("{}: {e}", src.display()))?;
        if n == 0 {
            break;
        }
        store.write(&r, offset, &buf[..n]).map_err(err)?;
        offset += n as u64;
        if let Some(b) = &bar {
            b.set_position(offset);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(())
}

fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// `POOL/DATASET/PATH` of a file, or a volume.
    src: String,
    /// Local destination (`-` = standard output).
    dest: PathBuf,
}

pub fn get_file(a: GetArgs) -> Result<(), String> {
    let store = open(pool_of(&a.src))?;
    let result = copy_out(&store, &a.src, &a.dest);
    finish(store)?;
    result
}

fn copy_out(store: &Store, src: &str, dest: &Path) -> Result<(), String> {
    if src.contains('@') {
        return crate::snapshot_paths::copy_out(store, src, dest);
    }
    let r = store.resolve(src).map_err(err)?;
    if r.kind == cairn_objset::dnode::ObjectKind::Directory {
        return Err(format!("'{src}' is a directory; `cairn ls {src}` lists it"));
    }
    let size = store.object_dnode(&r).map_err(err)?.size;
    let mut out: Box<dyn Write> = if dest.as_os_str() == "-" {
        crate::served::stdout()
    } else {
        Box::new(std::fs::File::create(dest).map_err(|e| format!("{}: {e}", dest.display()))?)
    };
    let bar = if dest.as_os_str() == "-" {
        None
    } else {
        progress_bar(size, "get")
    };
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    while offset < size {
        let n = store.read(&r, offset, &mut buf).map_err(|e| {
            if e.is_data_loss() {
                format!("{src}: I/O error: data damaged beyond the pool's redundancy at offset {offset} (see `cairn status -v`)")
            } else {
                e.to_string()
            }
        })?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("{}: {e}", dest.display()))?;
        offset += n as u64;
        if let Some(b) = &bar {
            b.set_position(offset);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    out.flush().map_err(err)
}

#[derive(Args, Debug)]
pub struct CatArgs {
    path: String,
}

impl CatArgs {
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl LsArgs {
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl RmArgs {
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl MkdirArgs {
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl GetCmdArgs {
    /// The pool the command reads: of the file (`get POOL/DS/PATH DEST`) or of the dataset
    /// (`get PROP DATASET`).
    pub fn pool_name(&self) -> &str {
        if self.first.contains('/') {
            &self.first
        } else {
            &self.second
        }
    }
}

pub fn cat(a: CatArgs) -> Result<(), String> {
    get_file(GetArgs {
        src: a.path,
        dest: PathBuf::from("-"),
    })
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Exact sizes in bytes.
    #[arg(short = 'p')]
    parsable: bool,
    path: String,
}

pub fn ls(a: LsArgs) -> Result<(), String> {
    let store = open(pool_of(&a.path))?;
    let entries = if a.path.contains('@') {
        crate::snapshot_paths::list_dir(&store, &a.path)?
    } else {
        store.list(&a.path).map_err(err)?
    };
    if a.json {
        outln!("{}", serde_json::json!({ "entries": entries }));
    } else {
        for e in &entries {
            let size = if a.parsable {
                e.size.to_string()
            } else {
                format_zfs_size(e.size)
            };
            let name = if e.kind == "dir" {
                format!("{}/", e.name)
            } else {
                e.name.clone()
            };
            outln!("{:<6} {:>10}  {name}", e.kind, size);
        }
    }
    finish(store)
}

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short = 'r')]
    recursive: bool,
    path: String,
}

pub fn rm(a: RmArgs) -> Result<(), String> {
    let store = open(pool_of(&a.path))?;
    store.remove(&a.path, a.recursive).map_err(err)?;
    finish(store)
}

#[derive(Args, Debug)]
pub struct MkdirArgs {
    path: String,
}

pub fn mkdir(a: MkdirArgs) -> Result<(), String> {
    let store = open(pool_of(&a.path))?;
    store.mkdir(&a.path).map_err(err)?;
    finish(store)
}

// ---- datasets, volumes, properties --------------------------------------------------------

#[derive(Subcommand, Debug)]
pub enum DatasetCmd {
    /// Create a file system dataset: `cairn dataset create [-p] [-o PROP=VAL]… POOL/NAME`.
    Create {
        /// Create missing parents.
        #[arg(short = 'p')]
        parents: bool,
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        name: String,
    },
    /// Destroy a dataset or volume (`-r`: with its children).
    Destroy {
        #[arg(short = 'r')]
        recursive: bool,
        name: String,
    },
    /// List datasets and volumes with USED AVAIL REFER RATIO, like `zfs list`.
    List {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(long)]
        json: bool,
        pool: String,
    },
}

fn parse_props(options: &[String]) -> Result<BTreeMap<String, String>, String> {
    options
        .iter()
        .map(|o| {
            o.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("'{o}': use PROP=VALUE"))
        })
        .collect()
}

pub fn dataset(cmd: DatasetCmd) -> Result<(), String> {
    match cmd {
        DatasetCmd::Create {
            parents,
            options,
            name,
        } => {
            validate_dataset_name(&name).map_err(err)?;
            let store = open(pool_of(&name))?;
            store
                .dataset_create(
                    &name,
                    DatasetKind::Filesystem,
                    parse_props(&options)?,
                    None,
                    parents,
                )
                .map_err(err)?;
            finish(store)
        }
        DatasetCmd::Destroy { recursive, name } => {
            validate_dataset_name(&name).map_err(err)?;
            let store = open(pool_of(&name))?;
            store.dataset_destroy(&name, recursive).map_err(err)?;
            finish(store)
        }
        DatasetCmd::List {
            scripted,
            parsable,
            json,
            pool,
        } => {
            let store = open(&pool)?;
            let table = store.datasets();
            let mut infos = Vec::new();
            for d in &table.datasets {
                infos.push(store.dataset_info(&d.name).map_err(err)?);
            }
            infos.sort_by(|a, b| a.name.cmp(&b.name));
            if json {
                outln!("{}", serde_json::json!({ "datasets": infos }));
            } else {
                print_dataset_table(&infos, scripted, parsable);
            }
            finish(store)
        }
    }
}

fn print_dataset_table(infos: &[cairn_objset::DatasetInfo], scripted: bool, parsable: bool) {
    let size = |b: u64| {
        if parsable {
            b.to_string()
        } else {
            format_zfs_size(b)
        }
    };
    let mut rows: Vec<[String; 6]> = Vec::new();
    if !scripted {
        rows.push(["NAME", "USED", "AVAIL", "REFER", "RATIO", "TYPE"].map(String::from));
    }
    for i in infos {
        rows.push([
            i.name.clone(),
            size(i.used),
            size(i.avail),
            size(i.refer),
            format!("{:.2}x", i.compressratio),
            match i.kind {
                DatasetKind::Filesystem => "filesystem".into(),
                DatasetKind::Volume => "volume".into(),
            },
        ]);
    }
    if scripted {
        for r in rows {
            outln!("{}", r.join("\t"));
        }
        return;
    }
    let w: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        outln!(
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:>w4$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        );
    }
}

#[derive(Subcommand, Debug)]
pub enum VolumeCmd {
    /// Create a volume: `cairn volume create -V SIZE [-b BLOCKSIZE] [-o PROP=VAL]… POOL/NAME`.
    Create {
        /// Size, e.g. 10G.
        #[arg(short = 'V')]
        size: String,
        /// volblocksize (default 16K).
        #[arg(short = 'b')]
        blocksize: Option<String>,
        #[arg(short = 'o', value_name = "PROP=VALUE")]
        options: Vec<String>,
        name: String,
    },
}

pub fn volume(cmd: VolumeCmd) -> Result<(), String> {
    match cmd {
        VolumeCmd::Create {
            size,
            blocksize,
            options,
            name,
        } => {
            validate_dataset_name(&name).map_err(err)?;
            let bytes = cairn_objset::dataset::parse_size(&size)
                .filter(|&b| b > 0)
                .ok_or_else(|| {
                    format!("bad volume size '{size}': give a size above 0 that fits in 64 bits, e.g. 10G")
                })?;
            let mut props = parse_props(&options)?;
            if let Some(b) = blocksize {
                props.insert("volblocksize".into(), b);
            }
            let store = open(pool_of(&name))?;
            store
                .dataset_create(&name, DatasetKind::Volume, props, Some(bytes), false)
                .map_err(err)?;
            finish(store)
        }
    }
}

/// Whether `prop` of `target` is a pool property (`readpolicy` of a pool name, no `/`):
/// the pool's label config holds it, not the root dataset.
fn is_pool_prop(prop: &str, target: &str) -> bool {
    !target.contains(['/', '@'])
        && (cairn_vdev::PoolProps::NAMES.contains(&prop) || POOL_STATS.contains(&prop))
}

/// The read-only pool properties, as `zpool get` names them (measured, not kept).
const POOL_STATS: [&str; 8] = [
    "size",
    "capacity",
    "allocated",
    "free",
    "health",
    "guid",
    "ashift",
    "fragmentation",
];

/// A read-only pool property of an open store: exact numbers with `parsable`, else as
/// `zpool get` prints them.
fn pool_stat(store: &Store, name: &str, parsable: bool) -> Result<String, String> {
    let usage = store.space();
    let row = cairn_pool::status::ListRow::with_usage(store.pool(), usage.alloc, usage.used);
    let size = |b: u64| {
        if parsable {
            b.to_string()
        } else {
            format_zfs_size(b)
        }
    };
    let percent = |p: u64| {
        if parsable {
            p.to_string()
        } else {
            format!("{p}%")
        }
    };
    Ok(match name {
        "size" => size(row.size),
        "capacity" => percent(row.capacity_percent()),
        "allocated" => size(row.alloc),
        "free" => size(row.free),
        "health" => row.health.to_string(),
        "guid" => cairn_pool::status::status_json(store.pool())
            .guid
            .to_string(),
        "ashift" => cairn_pool::status::status_json(store.pool())
            .vdevs
            .iter()
            .map(|t| t.ashift)
            .max()
            .unwrap_or(0)
            .to_string(),
        "fragmentation" => match store.fragmentation_percent() {
            Some(p) => percent(p),
            None => "-".into(),
        },
        other => return Err(format!("unknown pool property '{other}'")),
    })
}

#[derive(Args, Debug)]
pub struct SetArgs {
    /// PROP=VALUE
    assignment: String,
    /// Dataset or volume.
    pub(crate) target: String,
}

pub fn set(a: SetArgs) -> Result<(), String> {
    let (k, v) = a
        .assignment
        .split_once('=')
        .ok_or("use `cairn set PROP=VALUE DATASET` or `cairn set PROP=VALUE POOL`")?;
    if is_pool_prop(k, &a.target) && POOL_STATS.contains(&k) {
        return Err(format!(
            "pool property '{k}' is read-only (settable: {})",
            cairn_vdev::PoolProps::NAMES.join(", ")
        ));
    }
    if is_pool_prop(k, &a.target) {
        // A served pool changes in its service, in force at once.
        if let Some(store) = crate::served::store_for(&a.target)? {
            return store.pool().set_property(k, v).map_err(err);
        }
        let pool = Pool::open(&crate::home(), &a.target).map_err(err)?;
        pool.set_property(k, v).map_err(err)?;
        return pool.save_record().map_err(err);
    }
    let store = open(pool_of(&a.target))?;
    store.set_property(&a.target, k, v).map_err(err)?;
    finish(store)
}

/// `cairn get PROP[,PROP…]|all DATASET` (properties) or `cairn get POOL/DS/PATH DEST` (a file).
#[derive(Args, Debug)]
pub struct GetCmdArgs {
    /// Scripted output: no header, tab separated.
    #[arg(short = 'H')]
    scripted: bool,
    /// Exact numbers (bytes, percent without `%`) for the pool's size properties.
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(long)]
    json: bool,
    /// Property list (or a file path `POOL/DS/PATH`).
    first: String,
    /// Dataset (or the local destination of a file).
    second: String,
}

pub fn get(a: GetCmdArgs) -> Result<(), String> {
    if a.first.contains('/') {
        return get_file(GetArgs {
            src: a.first,
            dest: PathBuf::from(a.second),
        });
    }
    let store = open(pool_of(&a.second))?;
    let keys: Vec<String> = if a.first == "all" {
        [
            "type",
            "used",
            "available",
            "referenced",
            "usedbysnapshots",
            "usedbydataset",
            "usedbychildren",
            "written",
            "compressratio",
            "origin",
            "receive_resume_token",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(
            cairn_objset::dataset::PROPERTIES
                .iter()
                .map(|p| p.0.to_string()),
        )
        .chain(
            POOL_STATS
                .iter()
                .chain(cairn_vdev::PoolProps::NAMES.iter())
                .filter(|p| is_pool_prop(p, &a.second))
                .map(|p| p.to_string()),
        )
        .collect()
    } else {
        a.first.split(',').map(String::from).collect()
    };
    let mut rows = Vec::new();
    for k in &keys {
        let (v, src) = if is_pool_prop(k, &a.second) && POOL_STATS.contains(&k.as_str()) {
            (pool_stat(&store, k, a.parsable)?, "-".to_string())
        } else if is_pool_prop(k, &a.second) {
            let v = store.pool().property(k).map_err(err)?;
            let dflt = cairn_vdev::PoolProps::default().get(k).map_err(err)?;
            (
                v.clone(),
                if v == dflt { "default" } else { "local" }.into(),
            )
        } else {
            store.get_property(&a.second, k).map_err(err)?
        };
        rows.push((k.clone(), v, src));
    }
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(k, v, s)| serde_json::json!({"property": k, "value": v, "source": s}))
            .collect();
        outln!(
            "{}",
            serde_json::json!({ "name": a.second, "properties": v })
        );
    } else {
        if !a.scripted {
            outln!("{:<24} {:<16} {:<14} SOURCE", "NAME", "PROPERTY", "VALUE");
        }
        for (k, v, s) in rows {
            if a.scripted {
                outln!("{}\t{k}\t{v}\t{s}", a.second);
            } else {
                outln!("{:<24} {:<16} {:<14} {s}", a.second, k, v);
            }
        }
    }
    finish(store)
}
