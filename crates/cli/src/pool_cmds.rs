//! Pool lifecycle commands: create, status, list, import, export, destroy, labels.

use std::path::PathBuf;

use cairn_geometry::format_zfs_size;
use cairn_pool::status::{render_list, render_status_with, status_json, DataErrors, ListRow};
use cairn_pool::{CreateOptions, Home, Pool};
use cairn_vdev::label_io::read_leaf_labels;
use cairn_vdev::{FileLeaf, LeafOptions};

use crate::{CreateArgs, ImportArgs, LabelsArgs, ListArgs, PoolName, StatusArgs};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn parse_create_options(a: &CreateArgs) -> Result<CreateOptions, String> {
    let mut opts = CreateOptions {
        ashift: None,
        force: a.force,
        dry_run: a.dry_run,
        direct: a.direct,
        props: Default::default(),
    };
    for o in &a.options {
        match o.split_once('=') {
            Some(("ashift", v)) => {
                let n: u32 = v
                    .parse()
                    .map_err(|_| format!("ashift must be a number from 9 to 16, got '{v}'"))?;
                opts.ashift = Some(n);
            }
            Some((k, v)) if cairn_vdev::PoolProps::NAMES.contains(&k) => {
                opts.props.set(k, v).map_err(err)?;
            }
            _ => {
                return Err(format!(
                    "unknown pool property '{o}'; supported: -o ashift=9..16, -o readpolicy=auto|round-robin|least-queue|load|md|nearest"
                ))
            }
        }
    }
    Ok(opts)
}

pub fn create(a: CreateArgs) -> Result<(), String> {
    let opts = parse_create_options(&a)?;
    let home = crate::home();
    let outcome = Pool::create(&home, &a.pool, &a.vdevs, opts).map_err(err)?;
    for note in &outcome.notes {
        eprintln!("{note}");
    }
    let sp = &outcome.space;
    if a.dry_run {
        println!("would create '{}' with the following layout:\n", a.pool);
        println!("\t{}", a.pool);
        for top in &outcome.config.vdevs {
            match cairn_vdev::config::top_display_name(top.shape, top.id) {
                Some(name) => {
                    println!(
                        "\t  {}",
                        name.rsplit_once('-').map(|x| x.0).unwrap_or(&name)
                    );
                    for l in &top.leaves {
                        println!("\t    {}", l.path);
                    }
                }
                None => println!("\t  {}", top.leaves[0].path),
            }
        }
        println!();
    }
    println!(
        "ashift {}  size {} ({} B)  avail {} ({} B)",
        outcome.config.vdevs[0].ashift,
        format_zfs_size(sp.size),
        sp.size,
        format_zfs_size(sp.avail),
        sp.avail
    );
    Ok(())
}

fn pool_names(home: &Home, name: Option<&str>) -> Result<Vec<String>, String> {
    match name {
        Some(n) => Ok(vec![n.to_string()]),
        None => home.pool_names().map_err(err),
    }
}

fn pools_to_show(home: &Home, name: Option<&str>) -> Result<Vec<Pool>, String> {
    let names = match name {
        Some(n) => vec![n.to_string()],
        None => home.pool_names().map_err(err)?,
    };
    names
        .iter()
        .map(|n| Pool::open(home, n).map_err(err))
        .collect()
}

pub fn status(a: StatusArgs) -> Result<(), String> {
    let home = crate::home();
    if !a.json {
        // Pools held by `cairn serve` answer through its control socket.
        let names = pool_names(&home, a.pool.as_deref())?;
        let request = if a.verbose { "status -v" } else { "status" };
        let served: Vec<String> = names
            .iter()
            .filter_map(|n| crate::control::ask(&home, n, request))
            .collect();
        if let Some(e) = served.iter().find_map(|t| t.strip_prefix("error: ")) {
            return Err(e.trim().to_string());
        }
        if !served.is_empty() {
            let rest: Vec<&String> = names
                .iter()
                .filter(|n| crate::control::ask(&home, n, "list").is_none())
                .collect();
            let mut texts = served;
            for n in rest {
                let p = Pool::open(&home, n).map_err(err)?;
                let scan = crate::scrub_cmd::scan_line(&p);
                let damaged = crate::data_cmds::load_errors(&p);
                texts.push(render_status_with(&p, a.verbose, scan.as_deref(), &damaged));
            }
            print_statuses(&texts, a.unhealthy_only);
            return Ok(());
        }
    }
    if a.json {
        // A served pool's entry comes from its service (`status-json`), the others' from
        // opening them here.
        let mut list = Vec::new();
        for name in pool_names(&home, a.pool.as_deref())? {
            let served = crate::control::ask(&home, &name, "status-json")
                .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok());
            match served {
                Some(v) => list.push(v),
                None => {
                    let p = Pool::open(&home, &name).map_err(err)?;
                    list.push(status_value(&p, &crate::data_cmds::load_errors(&p)));
                }
            }
        }
        println!("{}", serde_json::json!({ "pools": list }));
        return Ok(());
    }
    let pools = pools_to_show(&home, a.pool.as_deref())?;
    if pools.is_empty() {
        println!("no pools available");
        return Ok(());
    }
    let texts: Vec<String> = pools
        .iter()
        .map(|p| {
            let scan = crate::scrub_cmd::scan_line(p);
            let damaged = crate::data_cmds::load_errors(p);
            render_status_with(p, a.verbose, scan.as_deref(), &damaged)
        })
        .collect();
    print_statuses(&texts, a.unhealthy_only);
    Ok(())
}

/// A pool's entry of `status --json`: its health tree and its data errors.
pub fn status_value(p: &Pool, e: &DataErrors) -> serde_json::Value {
    let mut v = serde_json::to_value(status_json(p)).unwrap_or_default();
    v["data_errors"] = serde_json::json!({
        "files": e.files,
        "unlisted": e.unlisted,
        "unreadable": e.unreadable,
    });
    v
}

/// Prints rendered statuses; with `-x` only the unhealthy ones, or "all pools are healthy".
fn print_statuses(texts: &[String], unhealthy_only: bool) {
    let shown: Vec<&String> = texts
        .iter()
        .filter(|t| !unhealthy_only || !is_healthy(t))
        .collect();
    if shown.is_empty() && unhealthy_only {
        println!("all pools are healthy");
        return;
    }
    let joined: Vec<&str> = shown.iter().map(|t| t.as_str()).collect();
    print!("{}", joined.join("\n"));
}

/// What `zpool status -x` calls healthy: state ONLINE, no known data errors, and no device
/// with read, write or checksum errors (judged on the rendered status, which is the same
/// whether a service or this process produced it).
fn is_healthy(status: &str) -> bool {
    let online = status.lines().any(|l| l.trim() == "state: ONLINE");
    let no_data_errors = status.contains("errors: No known data errors");
    let states = [
        "ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED",
    ];
    let device_errors = status.lines().any(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| states.contains(w)) else {
            return false;
        };
        let counters: Vec<u64> = words[at + 1..]
            .iter()
            .take(3)
            .map_while(|w| w.parse().ok())
            .collect();
        counters.len() == 3 && counters.iter().any(|&n| n > 0)
    });
    online && no_data_errors && !device_errors
}

pub fn list(a: ListArgs) -> Result<(), String> {
    if let Some(types) = &a.types {
        return crate::snapshot_cmds::list_typed(
            types,
            a.pool.as_deref(),
            a.scripted,
            a.parsable,
            a.json,
        );
    }
    let home = crate::home();
    let mut rows: Vec<ListRow> = Vec::new();
    for name in pool_names(&home, a.pool.as_deref())? {
        let served =
            crate::control::ask(&home, &name, "list").and_then(|j| serde_json::from_str(&j).ok());
        match served {
            Some(row) => rows.push(row),
            None => rows.push(list_row(Pool::open(&home, &name).map_err(err)?)?),
        }
    }
    if a.json {
        println!("{}", serde_json::json!({ "pools": rows }));
    } else if rows.is_empty() {
        println!("no pools available");
    } else {
        let table = render_list(&rows, true, a.parsable);
        match &a.columns {
            None => print!("{}", render_list(&rows, a.scripted, a.parsable)),
            Some(cols) => print!("{}", select_columns(&table, cols, a.scripted)?),
        }
    }
    Ok(())
}

/// The columns of `list`, in `render_list`'s order, with the names `-o` accepts.
const LIST_COLUMNS: [(&str, &[&str]); 7] = [
    ("NAME", &["name"]),
    ("SIZE", &["size"]),
    ("ALLOC", &["alloc", "allocated"]),
    ("FREE", &["free"]),
    ("CAP", &["cap", "capacity"]),
    ("HEALTH", &["health"]),
    ("AVAIL", &["avail", "available"]),
];

/// `list -o COLS`: the chosen columns of a scripted (tab-separated) table, aligned as
/// `list` aligns them unless `scripted`.
fn select_columns(table: &str, cols: &str, scripted: bool) -> Result<String, String> {
    let mut picked = Vec::new();
    for c in cols.split(',').map(str::trim) {
        let at = LIST_COLUMNS
            .iter()
            .position(|(_, names)| names.contains(&c.to_ascii_lowercase().as_str()))
            .ok_or_else(|| {
                format!(
                    "unknown column '{c}' for `list -o`; give some of: {}",
                    LIST_COLUMNS.map(|(_, n)| n.join("|")).join(", ")
                )
            })?;
        picked.push(at);
    }
    let mut lines: Vec<Vec<String>> = Vec::new();
    if !scripted {
        lines.push(
            picked
                .iter()
                .map(|&i| LIST_COLUMNS[i].0.to_string())
                .collect(),
        );
    }
    for row in table.lines() {
        let cells: Vec<&str> = row.split('\t').collect();
        lines.push(
            picked
                .iter()
                .map(|&i| cells.get(i).unwrap_or(&"-").to_string())
                .collect(),
        );
    }
    let mut out = String::new();
    if scripted {
        for l in &lines {
            out.push_str(&l.join("\t"));
            out.push('\n');
        }
        return Ok(out);
    }
    let widths: Vec<usize> = (0..picked.len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    for l in &lines {
        let mut line = String::new();
        for (i, cell) in l.iter().enumerate() {
            if i == 0 {
                line.push_str(&format!("{cell:<w$}", w = widths[0]));
            } else {
                line.push_str(&format!("  {cell:>w$}", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// A `list` row: a pool that holds no tree yet has nothing allocated; otherwise the
/// store's allocator says what is in use.
fn list_row(pool: Pool) -> Result<ListRow, String> {
    let has_tree = pool
        .uberblocks()
        .first()
        .is_some_and(|u| u.root.iter().any(|&b| b != 0));
    if !has_tree {
        return Ok(ListRow::of(&pool));
    }
    let store = cairn_objset::Store::open(pool).map_err(err)?;
    let usage = store.space();
    Ok(ListRow::with_usage(store.pool(), usage.alloc, usage.used))
}

fn default_scan_dirs() -> Vec<PathBuf> {
    let by_id = PathBuf::from("/dev/disk/by-id");
    if by_id.is_dir() {
        vec![by_id]
    } else {
        vec![PathBuf::from("/dev")]
    }
}

pub fn import(a: ImportArgs) -> Result<(), String> {
    let home = crate::home();
    let dirs = if a.dirs.is_empty() {
        default_scan_dirs()
    } else {
        a.dirs.clone()
    };
    let Some(name) = a.pool else {
        let found = Pool::scan(&dirs, a.destroyed).map_err(err)?;
        if found.is_empty() {
            println!("no pools available to import");
        }
        for fp in found {
            let state = if fp.importable() { "ONLINE" } else { "UNAVAIL" };
            println!(
                "   pool: {}\n     id: {}\n  state: {state}\n config:\n",
                fp.config.name, fp.config.guid
            );
            for top in &fp.config.vdevs {
                let name = cairn_vdev::config::top_display_name(top.shape, top.id);
                if let Some(n) = &name {
                    println!("\t  {n}");
                }
                for l in &top.leaves {
                    let (path, st) = match fp.found.get(&l.guid) {
                        Some(p) => (p.display().to_string(), "ONLINE"),
                        None => (l.path.clone(), "UNAVAIL"),
                    };
                    let indent = if name.is_some() { "    " } else { "  " };
                    println!("\t{indent}{path}  {st}");
                }
            }
            println!();
        }
        return Ok(());
    };
    let imported = Pool::import(&home, &dirs, &name, a.force, a.destroyed).map_err(err)?;
    // The health printed is the one `status` will show: the pool as a later command opens
    // it (its leaves checked by their labels), not as the scan found them.
    let name = imported.name().to_string();
    drop(imported);
    let pool = Pool::open(&home, &name).map_err(err)?;
    println!("imported pool '{name}' ({})", pool.health());
    if pool.health() != cairn_pool::Health::Online {
        println!("see `cairn status {name}` for what is wrong and what to do");
    }
    if pool.needs_resilver() {
        // As zpool does after import: finish (or resume) the resilver of stale leaves.
        println!("resilvering devices that missed writes");
        crate::device_cmds::run_resilver(pool, &Default::default())?;
    }
    Ok(())
}

pub fn export(a: PoolName) -> Result<(), String> {
    let home = crate::home();
    Pool::open(&home, &a.pool)
        .and_then(|p| p.export())
        .map_err(err)?;
    cairn_objset::scan_state::ScrubRequests::of(&home, &a.pool).forget();
    Ok(())
}

pub fn destroy(a: PoolName) -> Result<(), String> {
    let home = crate::home();
    Pool::open(&home, &a.pool)
        .and_then(|p| p.destroy())
        .map_err(err)?;
    cairn_objset::scan_state::ScrubRequests::of(&home, &a.pool).forget();
    Ok(())
}

pub fn labels(a: LabelsArgs) -> Result<(), String> {
    let leaf = FileLeaf::open(&a.device, LeafOptions::inspect()).map_err(err)?;
    let labels = read_leaf_labels(&leaf);
    if labels.best_config().is_none() && labels.uberblocks.is_empty() {
        let why = labels
            .first_error()
            .map(|e| e.to_string())
            .unwrap_or_default();
        return Err(format!(
            "no valid cairn label on '{}': {why}",
            a.device.display()
        ));
    }
    if a.json {
        let configs: Vec<serde_json::Value> = labels
            .configs
            .iter()
            .map(|c| match c {
                Ok(c) => serde_json::to_value(c).unwrap_or_default(),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            })
            .collect();
        let ubs: Vec<serde_json::Value> = labels
            .uberblocks
            .iter()
            .map(|(i, u)| serde_json::json!({"label": i, "txg": u.txg, "guid_sum": u.guid_sum, "timestamp": u.timestamp}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"labels": configs, "uberblocks": ubs})
        );
        return Ok(());
    }
    for (i, c) in labels.configs.iter().enumerate() {
        println!(
            "------------------------------------\nLABEL {i}\n------------------------------------"
        );
        match c {
            Ok(c) => {
                let text = serde_json::to_string_pretty(c).unwrap_or_default();
                println!("{text}");
            }
            Err(e) => println!("    failed to unpack label {i}: {e}"),
        }
    }
    let mut ubs: Vec<_> = labels.uberblocks.iter().collect();
    ubs.sort_by_key(|(i, u)| (u.txg, *i));
    for (i, u) in ubs {
        println!(
            "    Uberblock[label {i}] txg = {} guid_sum = {} timestamp = {}",
            u.txg, u.guid_sum, u.timestamp
        );
    }
    Ok(())
}
