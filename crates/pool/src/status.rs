//! `cairn status` and `cairn list` output, in zpool's layout, plus JSON forms.

use std::fmt::Write;

use cairn_geometry::format_zfs_size;
use serde::Serialize;

use crate::pool::{Health, Pool};

/// One row of `cairn list` (sizes in bytes).
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ListRow {
    pub name: String,
    pub size: u64,
    pub alloc: u64,
    pub free: u64,
    /// AVAIL as `zfs list` shows it for the pool's root dataset.
    pub avail: u64,
    pub health: Health,
}

impl ListRow {
    /// A pool with nothing allocated (as `create -n` would show it).
    pub fn of(pool: &Pool) -> ListRow {
        ListRow::with_usage(pool, 0, 0)
    }

    /// `alloc`: raw allocated bytes; `used`: allocated in zfs-list units.
    pub fn with_usage(pool: &Pool, alloc: u64, used: u64) -> ListRow {
        let space = pool.space();
        ListRow {
            name: pool.name().to_string(),
            size: space.size,
            alloc,
            free: space.size.saturating_sub(alloc),
            avail: space.avail.saturating_sub(used),
            health: pool.health(),
        }
    }
    pub fn capacity_percent(&self) -> u64 {
        (self.alloc * 100).checked_div(self.size).unwrap_or(0)
    }
}

/// Renders `cairn list`; `scripted` = `-H` (no header, tabs), `parsable` = `-p` (bytes).
pub fn render_list(rows: &[ListRow], scripted: bool, parsable: bool) -> String {
    let size = |b: u64| {
        if parsable {
            b.to_string()
        } else {
            format_zfs_size(b)
        }
    };
    let mut lines: Vec<[String; 7]> = Vec::new();
    if !scripted {
        lines.push(["NAME", "SIZE", "ALLOC", "FREE", "CAP", "HEALTH", "AVAIL"].map(String::from));
    }
    for r in rows {
        let cap = if parsable {
            r.capacity_percent().to_string()
        } else {
            format!("{}%", r.capacity_percent())
        };
        lines.push([
            r.name.clone(),
            size(r.size),
            size(r.alloc),
            size(r.free),
            cap,
            r.health.to_string(),
            size(r.avail),
        ]);
    }
    let mut out = String::new();
    if scripted {
        for l in &lines {
            out.push_str(&l.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    for l in &lines {
        let mut line = String::new();
        for (i, cell) in l.iter().enumerate() {
            if i == 0 {
                let _ = write!(line, "{cell:<w$}", w = widths[0]);
            } else {
                let _ = write!(line, "  {cell:>w$}", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// JSON form of `cairn status` for one pool.
#[derive(Clone, Debug, Serialize)]
pub struct StatusJson {
    pub name: String,
    pub guid: u64,
    pub state: Health,
    pub txg: u64,
    pub vdevs: Vec<TopStatusJson>,
    pub spares: Vec<SpareStatusJson>,
}

/// A hot spare in `status`.
#[derive(Clone, Debug, Serialize)]
pub struct SpareStatusJson {
    pub path: String,
    pub guid: u64,
    /// AVAIL, INUSE or UNAVAIL.
    pub state: String,
    /// Path of the failed leaf it stands in for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacing: Option<String>,
}

fn spares_json(pool: &Pool) -> Vec<SpareStatusJson> {
    pool.live_config()
        .spares
        .iter()
        .map(|s| {
            let open = pool.spare_leaf(s.guid).is_some();
            let state = match (&s.replacing, open) {
                (Some(_), _) => "INUSE",
                (None, true) => "AVAIL",
                (None, false) => "UNAVAIL",
            };
            SpareStatusJson {
                path: s.path.clone(),
                guid: s.guid,
                state: state.into(),
                replacing: s.replacing.as_ref().map(|l| l.path.clone()),
            }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct TopStatusJson {
    pub name: String,
    pub kind: String,
    pub state: Health,
    pub ashift: u32,
    /// A separate intent-log device (listed under `logs`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub log: bool,
    pub leaves: Vec<LeafStatusJson>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LeafStatusJson {
    pub path: String,
    pub guid: u64,
    pub state: Health,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Missing data that a resilver copies (or is copying) to the leaf.
    pub resilvering: bool,
    /// Txg ranges `[start, end)` the leaf missed.
    pub dtl: Vec<(u64, u64)>,
    /// When this leaf is a hot spare in use: the failed leaf it stands in for (the two
    /// form zpool's `spare-N` group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stands_in_for: Option<Box<LeafStatusJson>>,
}

fn leaf_json(pool: &Pool, c: &cairn_vdev::Child, state: Health) -> LeafStatusJson {
    let (r, w, k) = c.stats.snapshot();
    LeafStatusJson {
        path: c.path.clone(),
        guid: c.guid,
        state,
        read_errors: r,
        write_errors: w,
        checksum_errors: k,
        reason: leaf_reason(pool, c),
        resilvering: c.stale.load(std::sync::atomic::Ordering::Relaxed),
        dtl: c.dtl_ranges(),
        stands_in_for: None,
    }
}

/// Health of a failed leaf a hot spare stands in for (known from the config when the pool
/// was opened with the spare already in: the leaf itself is not opened then).
fn replaced_health(c: &cairn_vdev::Child) -> Health {
    if c.faulted.load(std::sync::atomic::Ordering::Relaxed) {
        Health::Faulted
    } else {
        Pool::leaf_health(c)
    }
}

/// Why a leaf is not plainly ONLINE, as `zpool status` puts it after the counters.
fn leaf_reason(pool: &Pool, c: &cairn_vdev::Child) -> Option<String> {
    use std::sync::atomic::Ordering::Relaxed;
    if let Some(why) = &c.unavailable_reason {
        return Some(why.clone());
    }
    if c.offline.load(Relaxed) {
        return None;
    }
    if c.faulted.load(Relaxed) {
        return Some("too many errors".into());
    }
    if c.removed.load(Relaxed) {
        return Some("device removed (I/O returned ENXIO)".into());
    }
    let missed = c.dtl_ranges();
    if !missed.is_empty() {
        let dtl = cairn_vdev::dtl::describe(&missed);
        return Some(if pool.resilver_checkpoint().is_some() {
            format!("(resilvering: missed txg {dtl})")
        } else {
            format!("(needs resilver: missed txg {dtl})")
        });
    }
    None
}

pub fn status_json(pool: &Pool) -> StatusJson {
    StatusJson {
        name: pool.name().to_string(),
        guid: pool.config.guid,
        state: pool.health(),
        txg: pool.config.txg,
        spares: spares_json(pool),
        vdevs: pool
            .tops
            .iter()
            .filter(|t| !t.is_hole())
            .map(|t| TopStatusJson {
                name: t.display_name(),
                kind: shape_kind(t.shape()),
                state: Pool::top_health(t),
                ashift: t.ashift(),
                log: t.is_log(),
                leaves: t
                    .children
                    .iter()
                    .map(|slot| {
                        let mut leaf = leaf_json(pool, slot, Pool::leaf_health(slot));
                        leaf.stands_in_for = slot
                            .replaced()
                            .map(|f| Box::new(leaf_json(pool, f, replaced_health(f))));
                        leaf
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn shape_kind(shape: cairn_geometry::VdevShape) -> String {
    match shape {
        cairn_geometry::VdevShape::Disk => "disk".into(),
        cairn_geometry::VdevShape::Mirror { .. } => "mirror".into(),
        cairn_geometry::VdevShape::Raidz { parity, .. } => format!("raidz{parity}"),
    }
}

/// Renders `cairn status` like `zpool status`.
pub fn render_status(pool: &Pool, verbose: bool) -> String {
    render_status_with(pool, verbose, None, &DataErrors::default())
}

/// What `status` says under "errors:": the pool's error log, by name.
#[derive(Clone, Debug, Default)]
pub struct DataErrors {
    /// Files and volumes with permanent errors.
    pub files: Vec<String>,
    /// Damaged objects the error log counted but had no room to name.
    pub unlisted: u64,
    /// Why the error log could not be read, if it could not.
    pub unreadable: Option<String>,
}

/// `cairn status` with a scan line (scrub state) and the files with permanent errors.
/// zpool's advice for data damaged beyond redundancy (ZPOOL_STATUS_CORRUPT_DATA).
fn corrupt_data_advice() -> (String, String) {
    (
        "One or more devices has experienced an error resulting in data\n\tcorruption.  Applications may be affected."
            .to_string(),
        "Restore the file in question if possible.  Otherwise restore the\n\tentire pool from backup."
            .to_string(),
    )
}

/// One line of `status`'s config table: name, state, READ, WRITE, CKSUM, reason (an empty
/// state marks a class heading such as `logs`, printed alone).
type ConfigRow = (String, String, u64, u64, u64, Option<String>);

/// The config table's lines: the pool, each top-level vdev and its leaves (a `spare-N`
/// group for a hot spare in use), log devices under `logs`.
fn config_rows(s: &StatusJson) -> Vec<ConfigRow> {
    let mut rows: Vec<ConfigRow> = Vec::new();
    // Counters of a spare group count its failed leaf too.
    let group = |l: &LeafStatusJson, f: fn(&LeafStatusJson) -> u64| {
        f(l) + l.stands_in_for.as_deref().map(f).unwrap_or(0)
    };
    let total = |f: fn(&LeafStatusJson) -> u64| {
        s.vdevs
            .iter()
            .flat_map(|t| &t.leaves)
            .map(|l| group(l, f))
            .sum::<u64>()
    };
    rows.push((
        s.name.clone(),
        s.state.to_string(),
        total(|l| l.read_errors),
        total(|l| l.write_errors),
        total(|l| l.checksum_errors),
        None,
    ));
    let first_log = s.vdevs.iter().position(|t| t.log);
    for (k, top) in s.vdevs.iter().enumerate() {
        if Some(k) == first_log {
            // zpool's class heading: a name and no columns (an empty state marks it).
            rows.push(("logs".into(), String::new(), 0, 0, 0, None));
        }
        let indent = if top.kind == "disk" { "  " } else { "    " };
        if top.kind != "disk" {
            let sum =
                |f: fn(&LeafStatusJson) -> u64| top.leaves.iter().map(|l| group(l, f)).sum::<u64>();
            rows.push((
                format!("  {}", top.name),
                top.state.to_string(),
                sum(|l| l.read_errors),
                sum(|l| l.write_errors),
                sum(|l| l.checksum_errors),
                None,
            ));
        }
        let row = |indent: &str, leaf: &LeafStatusJson| {
            (
                format!("{indent}{}", leaf.path),
                leaf.state.to_string(),
                leaf.read_errors,
                leaf.write_errors,
                leaf.checksum_errors,
                leaf.reason.clone(),
            )
        };
        for (i, leaf) in top.leaves.iter().enumerate() {
            let Some(failed) = leaf.stands_in_for.as_deref() else {
                rows.push(row(indent, leaf));
                continue;
            };
            // zpool's spare group: the failed leaf and the spare in use, one level down.
            let state = match leaf.state {
                Health::Online => Health::Degraded,
                other => other,
            };
            rows.push((
                format!("{indent}spare-{i}"),
                state.to_string(),
                group(leaf, |l| l.read_errors),
                group(leaf, |l| l.write_errors),
                group(leaf, |l| l.checksum_errors),
                None,
            ));
            let inner = format!("{indent}  ");
            rows.push(row(&inner, failed));
            rows.push(row(&inner, leaf));
        }
    }
    rows
}

pub fn render_status_with(
    pool: &Pool,
    verbose: bool,
    scan: Option<&str>,
    errors: &DataErrors,
) -> String {
    let s = status_json(pool);
    let mut out = String::new();
    let _ = writeln!(out, "  pool: {}", s.name);
    let _ = writeln!(out, " state: {}", s.state);
    let damaged = errors.files.len() as u64 + errors.unlisted > 0;
    if let Some((status, action)) = advice(pool).or_else(|| damaged.then(corrupt_data_advice)) {
        let _ = writeln!(out, "status: {status}");
        let _ = writeln!(out, "action: {action}");
    }
    if let Some(scan) = scan {
        let _ = writeln!(out, "  scan: {scan}");
    }
    let _ = writeln!(out, "config:\n");
    let rows = config_rows(&s);
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "\t{:<w$}  {:<8}  {:>5} {:>5} {:>5}",
        "NAME", "STATE", "READ", "WRITE", "CKSUM"
    );
    for (name, state, r, wr, c, reason) in rows {
        if state.is_empty() {
            let _ = writeln!(out, "\t{name}");
            continue;
        }
        let mut line = format!("\t{name:<w$}  {state:<8}  {r:>5} {wr:>5} {c:>5}");
        if let Some(reason) = reason {
            let _ = write!(line, "  {reason}");
        }
        let _ = writeln!(out, "{line}");
    }
    if !s.spares.is_empty() {
        let _ = writeln!(out, "\tspares");
        for sp in &s.spares {
            let line = format!("\t  {:<w$}  {:<8}", sp.path, sp.state, w = w - 2);
            match &sp.replacing {
                Some(r) => {
                    let _ = writeln!(out, "{line}  currently in use (standing in for {r})");
                }
                None => {
                    let _ = writeln!(out, "{}", line.trim_end());
                }
            }
        }
    }
    let _ = writeln!(out);
    let count = errors.files.len() as u64 + errors.unlisted;
    if let Some(why) = &errors.unreadable {
        let _ = writeln!(out, "errors: the error log cannot be read: {why}");
    } else if count == 0 {
        let _ = writeln!(out, "errors: No known data errors");
    } else if verbose {
        let _ = writeln!(
            out,
            "errors: Permanent errors have been detected in the following files:\n"
        );
        for d in &errors.files {
            let _ = writeln!(out, "        {d}");
        }
        if errors.unlisted > 0 {
            let _ = writeln!(
                out,
                "        and {} more objects the error log had no room to name (run a scrub to list them)",
                errors.unlisted
            );
        }
    } else {
        let _ = writeln!(out, "errors: {count} data errors, use '-v' for a list");
    }
    out
}

/// zpool-style "status:" and "action:" lines for a pool that is not healthy, or one
/// whose devices wait for (or are in) a resilver.
fn advice(pool: &Pool) -> Option<(String, String)> {
    let leaves: Vec<&cairn_vdev::Child> = pool
        .tops
        .iter()
        .flat_map(|t| t.children.iter())
        .map(|slot| &***slot)
        .collect();
    let any = |h: Health| leaves.iter().any(|c| Pool::leaf_health(c) == h);
    let name = pool.name();
    let health = pool.health();
    if let Some(advice) = suspended_advice(pool) {
        return Some(advice);
    }
    if health != Health::Online && health != Health::Degraded {
        return Some((
            "One or more devices could not be used and there are insufficient replicas\n\
             \tfor the pool to continue functioning."
                .into(),
            format!(
                "Attach the missing devices (or point `cairn import -d DIR` at them) and retry,\n\
                 \tor bring them back with 'cairn online {name} DEVICE' / 'cairn clear {name}'."
            ),
        ));
    }
    let replicas = "Sufficient replicas exist for the pool to continue functioning in a\n\
                    \tdegraded state.";
    if any(Health::Faulted) {
        return Some((
            format!("One or more devices are faulted in response to persistent errors.\n\t{replicas}"),
            format!(
                "Replace the faulted device with 'cairn replace {name} DEVICE [NEW]', or use\n\
                 \t'cairn clear {name} DEVICE' if the errors were transient (it resilvers what was missed)."
            ),
        ));
    }
    if any(Health::Removed) || any(Health::Unavail) {
        return Some((
            format!(
                "One or more devices could not be opened, went missing or have an invalid label.\n\t{replicas}"
            ),
            format!(
                "Attach the missing device and run 'cairn online {name} DEVICE' (it resilvers\n\
                 \twhat the device missed), or replace it with 'cairn replace {name} DEVICE NEW'."
            ),
        ));
    }
    if any(Health::Offline) {
        return Some((
            format!("One or more devices has been taken offline by the administrator.\n\t{replicas}"),
            format!("Online the device using 'cairn online {name} DEVICE' or replace it with 'cairn replace'."),
        ));
    }
    if let Some(advice) = spare_advice(pool) {
        return Some(advice);
    }
    if pool.needs_resilver() {
        return Some(if pool.resilver_checkpoint().is_some() {
            (
                "One or more devices is currently being resilvered.  The pool will\n\
                 \tcontinue to function, possibly in a degraded state."
                    .into(),
                format!(
                    "Wait for the resilver to complete; if it was interrupted, 'cairn resilver {name}'\n\
                     \tresumes it where it stopped."
                ),
            )
        } else {
            (
                "One or more devices missed writes and must be resilvered before they are\n\
                 \tused for reads."
                    .into(),
                format!("Run 'cairn resilver {name}'."),
            )
        });
    }
    None
}

/// The "status:" and "action:" lines of a suspended pool (`crate::suspension`).
fn suspended_advice(pool: &Pool) -> Option<(String, String)> {
    let why = pool.io_suspended()?;
    let name = pool.name();
    let failmode = pool.props().failmode.name();
    Some((
        format!(
            "One or more devices are faulted in response to IO failures: the pool's\n\
             \tI/O is suspended (failmode={failmode}): {why}"
        ),
        format!(
            "Make sure the affected devices are connected, then run 'cairn clear {name}'\n\
             \t(the writes that wait are issued again; nothing is lost)."
        ),
    ))
}

/// The "status:" and "action:" lines when hot spares stand in for failed leaves.
fn spare_advice(pool: &Pool) -> Option<(String, String)> {
    use std::sync::atomic::Ordering::Relaxed;
    let groups: Vec<(&cairn_vdev::Child, &cairn_vdev::Child)> = pool
        .tops
        .iter()
        .flat_map(|t| t.children.iter())
        .filter_map(|slot| Some((slot.replaced()?, slot.spare()?)))
        .collect();
    let (failed, spare) = groups.first()?;
    let name = pool.name();
    let state = replaced_health(failed).to_string().to_lowercase();
    let copying = if !spare.stale.load(Relaxed) {
        "holds all its data"
    } else if pool.resilver_checkpoint().is_some() {
        "is being resilvered"
    } else {
        "waits for its resilver"
    };
    let others = match groups.len() {
        1 => String::new(),
        n => format!(" ({} more spares stand in for other devices)", n - 1),
    };
    let mut action = format!(
        "Replace the failed device with 'cairn replace {name} {} NEW'; the spare then\n\
         \treturns to the list of available spares.",
        failed.path
    );
    if spare.stale.load(Relaxed) && pool.resilver_checkpoint().is_none() {
        action.push_str(&format!(
            "\n\tUntil then, 'cairn resilver {name}' copies the data to the spare."
        ));
    }
    Some((
        format!(
            "The device {} is {state}; the hot spare {}\n\
             \tstands in for it and {copying}{others}.  Sufficient replicas exist for\n\
             \tthe pool to continue functioning in a degraded state.",
            failed.path, spare.path
        ),
        action,
    ))
}
