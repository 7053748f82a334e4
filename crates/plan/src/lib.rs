//! `cairn plan`: capacity, data-loss risk, speed and rebuild time of every sensible layout
//! for a set of disks.
//!
//! Capacity comes only from `cairn_geometry::pool_space` (the same code `cairn create` and
//! `cairn list` use); the rest is small pure modules: [`parse`] and [`disks`] read the
//! command line, [`enumerate`] lists the layouts, [`reliability`] and [`perf`] model risk
//! and speed, [`evaluate`] puts a row together, [`output`] prints it and [`plot`] draws it.

pub mod disks;
pub mod enumerate;
pub mod evaluate;
pub mod output;
pub mod parse;
pub mod perf;
pub mod plot;
pub mod reliability;

use std::path::PathBuf;

use cairn_geometry::{ZfsEra, MAX_ASHIFT, MIN_ASHIFT};
use disks::{parse_disk_spec, Disk, DiskKind, MODEL_NAMES};
use evaluate::{evaluate, mark_pareto, Evaluation, PlanContext};

/// Command-line arguments of `cairn plan`.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// Disks: COUNTxSIZE or COUNTxMODEL, e.g. `24x4TB`, `28x1000194703360B`, `12xWD4001FYYG`
    /// (repeatable). Sizes: TB/GB (IDEMA sector count), TiB/GiB, or bytes.
    #[arg(long = "disks", required = true, value_name = "NxSIZE")]
    pub disks: Vec<String>,
    /// Exact size of every disk in bytes (overrides the sizes in --disks).
    #[arg(long, value_name = "BYTES")]
    pub disk_bytes: Option<u64>,
    /// Sector shift (9 = 512 B, 12 = 4 KiB); default from the disks' physical sector.
    #[arg(long)]
    pub ashift: Option<u32>,
    /// Disk kind for disks given by size: sets default speed, AFR and BER.
    #[arg(long, value_enum, default_value_t = DiskKind::Hdd)]
    pub kind: DiskKind,
    /// Record size for the parity/padding overhead column.
    #[arg(long, default_value = "128K")]
    pub recordsize: String,
    /// Annualised failure rate per disk, e.g. `1.5%` (default: the disk's).
    #[arg(long)]
    pub afr: Option<String>,
    /// Unrecoverable read errors per bit read, e.g. `1e-15` (default: the disk's).
    #[arg(long)]
    pub ber: Option<String>,
    /// Resilver speed, e.g. `150MB/s` (default: half the disk's sequential speed).
    #[arg(long)]
    pub rebuild_rate: Option<String>,
    /// Hours until a failed disk is replaced when there is no hot spare.
    #[arg(long, default_value_t = 24.0)]
    pub replace_hours: f64,
    /// How full the pool is (what a resilver must copy), e.g. `80%`.
    #[arg(long, default_value = "100%")]
    pub fill: String,
    /// Risk horizon in years for P(data loss).
    #[arg(long, default_value_t = 5.0)]
    pub years: f64,
    /// Space rules of a ZFS release: cairn, 2.1, 0.8, 0.7, 0.6.3.
    #[arg(long = "zfs", default_value = "cairn", value_name = "ERA")]
    pub zfs: String,
    /// Row order.
    #[arg(long, value_enum, default_value_t = output::SortKey::Layout)]
    pub sort: output::SortKey,
    /// Print JSON (an object with a `layouts` array).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV.
    #[arg(long)]
    pub csv: bool,
    /// Also draw capacity vs speed (colour = integrity) to this .svg or .png file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// Errors of the planner; each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("bad --disks {0:?}: use COUNTxSIZE (24x4TB, 28x1000194703360B, 4x3.5TiB) or COUNTxMODEL (models: {models})", models = MODEL_NAMES.join(", "))]
    BadDiskSpec(String),
    #[error("bad size {0:?}: use e.g. 4TB, 3.5TiB or a byte count")]
    BadSize(String),
    #[error("bad --recordsize {0:?}: use a size from 512 to 16M, e.g. 128K")]
    BadRecordSize(String),
    #[error("bad rate {0:?}: use e.g. 150MB/s")]
    BadRate(String),
    #[error("bad fraction {0:?}: use a percentage (1.5%) or a number between 0 and 1")]
    BadFraction(String),
    #[error("bad --ber {0:?}: use errors per bit read, e.g. 1e-15")]
    BadBer(String),
    #[error("--ashift {0} is out of range: use {MIN_ASHIFT}..={MAX_ASHIFT} (9 for 512 B sectors, 12 for 4 KiB)")]
    BadAshift(u32),
    #[error("unknown --zfs {0:?}: use one of cairn, 2.1, 0.8, 0.7, 0.6.3")]
    UnknownEra(String),
    #[error("--years must be a positive number of years, got {0}")]
    BadYears(f64),
    #[error("--replace-hours must be zero or positive, got {0}")]
    BadReplaceHours(f64),
    #[error("give at least one disk with --disks, e.g. --disks 24x4TB")]
    NoDisks,
    #[error("disk {0:?} is smaller than the 64 MiB ZFS minimum")]
    DiskTooSmall(String),
    #[error("disk size {0} is above the 1 PiB the planner accepts")]
    DiskTooLarge(String),
    #[error("{0} disks is more than the {MAX_DISKS} the planner accepts")]
    TooManyDisks(usize),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--plot {0}: use a file name ending in .svg or .png")]
    PlotFormat(PathBuf),
    #[error("cannot print JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Most disks one plan accepts.
pub const MAX_DISKS: usize = 4096;

/// Runs `cairn plan`, printing to stdout.
pub fn run(args: &PlanArgs) -> Result<(), PlanError> {
    let context = context_from_args(args)?;
    let rows = plan(&context);
    let text = if args.json {
        output::json(&context, &rows)?
    } else if args.csv {
        output::csv(&rows)
    } else {
        output::table(&context, &output::sorted(&rows, args.sort))
    };
    print!("{text}");
    if let Some(path) = &args.plot {
        plot::write_plot(path, &context, &rows)?;
        if !args.json && !args.csv {
            println!("plot written to {}", path.display());
        }
    }
    Ok(())
}

/// Evaluates every sensible layout for the context's disks and marks the Pareto front.
pub fn plan(context: &PlanContext) -> Vec<Evaluation> {
    let mut rows: Vec<Evaluation> = enumerate::enumerate_layouts(context.disks.len())
        .iter()
        .map(|layout| evaluate(layout, context))
        .collect();
    mark_pareto(&mut rows);
    rows
}

/// Builds the run's settings from the command line, validating everything.
pub fn context_from_args(args: &PlanArgs) -> Result<PlanContext, PlanError> {
    let disks = disks_from_args(args)?;
    let era =
        ZfsEra::from_name(&args.zfs).ok_or_else(|| PlanError::UnknownEra(args.zfs.clone()))?;
    let ashift = match args.ashift {
        Some(ashift) if (MIN_ASHIFT..=MAX_ASHIFT).contains(&ashift) => ashift,
        Some(ashift) => return Err(PlanError::BadAshift(ashift)),
        None => default_ashift(&disks),
    };
    if !(args.years.is_finite() && args.years > 0.0) {
        return Err(PlanError::BadYears(args.years));
    }
    if !(args.replace_hours.is_finite() && args.replace_hours >= 0.0) {
        return Err(PlanError::BadReplaceHours(args.replace_hours));
    }
    let slowest = disks
        .iter()
        .map(|d| d.seq_mbs)
        .fold(f64::INFINITY, f64::min);
    let rebuild_mbs = match &args.rebuild_rate {
        Some(rate) => parse::parse_rate_mbs(rate)?,
        None => slowest / 2.0,
    };
    let fill = parse::parse_fraction(&args.fill)?.max(0.01);
    Ok(PlanContext {
        disks,
        ashift,
        recordsize: parse::parse_block_size(&args.recordsize)?,
        era,
        years: args.years,
        rebuild_mbs,
        replace_hours: args.replace_hours,
        fill,
    })
}

/// Every disk, one entry per physical disk, largest first, with --disk-bytes, --afr and
/// --ber applied.
fn disks_from_args(args: &PlanArgs) -> Result<Vec<Disk>, PlanError> {
    let afr = args.afr.as_deref().map(parse::parse_fraction).transpose()?;
    let ber = args.ber.as_deref().map(parse_ber).transpose()?;
    let mut disks = Vec::new();
    for spec in &args.disks {
        let (count, mut disk) = parse_disk_spec(spec, args.kind)?;
        if let Some(bytes) = args.disk_bytes {
            if bytes > parse::MAX_DISK_BYTES {
                return Err(PlanError::DiskTooLarge(bytes.to_string()));
            }
            disk.bytes = bytes;
        }
        if disk.bytes < cairn_geometry::MIN_LEAF_SIZE {
            return Err(PlanError::DiskTooSmall(spec.clone()));
        }
        disk.afr = afr.unwrap_or(disk.afr).max(1e-6);
        disk.ber = ber.unwrap_or(disk.ber);
        disks.extend(std::iter::repeat_n(disk, count));
        if disks.len() > MAX_DISKS {
            return Err(PlanError::TooManyDisks(disks.len()));
        }
    }
    if disks.is_empty() {
        return Err(PlanError::NoDisks);
    }
    disks.sort_by_key(|d| std::cmp::Reverse(d.bytes));
    Ok(disks)
}

fn parse_ber(text: &str) -> Result<f64, PlanError> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| PlanError::BadBer(text.to_string()))?;
    if !(value.is_finite() && (0.0..1.0).contains(&value)) {
        return Err(PlanError::BadBer(text.to_string()));
    }
    Ok(value)
}

/// ashift from the largest physical sector among the disks (ZFS's own default).
fn default_ashift(disks: &[Disk]) -> u32 {
    let sector = disks.iter().map(|d| d.sector_bytes).max().unwrap_or(4096);
    cairn_geometry::highbit(sector.max(1))
        .saturating_sub(1)
        .clamp(MIN_ASHIFT, MAX_ASHIFT)
}
