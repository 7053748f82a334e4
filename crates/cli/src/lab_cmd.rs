//! `cairn bench lab …`: the studies rerun on simulated disks (crate `cairn-lab`), routed
//! beside the other `cairn bench` subcommands.

use std::path::PathBuf;

use cairn_lab::{raid1, Policy};
use clap::{Args, Subcommand};

/// `cairn bench …`: the bench crate's subcommands plus `lab`.
#[derive(Subcommand, Debug, Clone)]
pub enum BenchCli {
    #[command(flatten)]
    Core(cairn_bench::BenchCommand),
    /// Studies rerun on simulated disks in virtual time (docs/bench/lab.md).
    #[command(subcommand)]
    Lab(LabCommand),
}

/// `cairn bench lab …` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum LabCommand {
    /// The 2015 RAID1 study (md, gflash, gmirror, ZFS mirror): 29 fio jobs on a simulated
    /// mirror of two WD 4 TB disks, every read policy, beside the published figures.
    Raid1(Raid1Args),
    /// dd write then read of one file on a layout of simulated disks (the 28-disk and
    /// MacZFS studies), e.g. --disks 5x2TB,512e --layout raidz2 --ashift 9.
    Dd(DdArgs),
    /// The 24-disk study's 26 layouts (dd of one file on 4 TB 7200 rpm disks) beside the
    /// published bonnie++ figures, with Spearman rank correlations.
    Layouts(LayoutsArgs),
}

#[derive(Args, Debug, Clone)]
pub struct LayoutsArgs {
    /// File size (the study wrote 16 GiB).
    #[arg(long, default_value = "16G")]
    pub size: String,
    /// Print JSON (rows with write_mbs and read_mbs, Spearman ρ).
    #[arg(long)]
    pub json: bool,
    /// The study's SSD table (24 × 256 GB SATA SSDs, 16 layouts) instead of its HDD one.
    #[arg(long)]
    pub ssd: bool,
    /// Cap writes at this many MB/s, the host's own ceiling (default: the study machine's,
    /// 700 with HDDs, 1650 with SSDs; 0: the disks alone).
    #[arg(long)]
    pub host_write_mbs: Option<f64>,
    /// Also draw the lab's figures beside the published ones to this .svg or .png file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Real devices (or files) instead of simulated disks: each layout that fits on them
    /// is made as a pool over the first devices it needs (destroying what they hold: needs
    /// --yes), written and read with dd, and destroyed; larger layouts are left out.
    #[arg(long = "real", value_name = "DEV", num_args = 1.., conflicts_with = "host_write_mbs")]
    pub real: Vec<String>,
    /// Yes, destroy what the --real devices hold.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug, Clone)]
pub struct Raid1Args {
    /// Print JSON ({results: [{job, policy, iops, kbs}], published: […]}) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Seed of the random offsets (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Virtual seconds per job (the study ran 60).
    #[arg(long, default_value_t = 60.0)]
    pub runtime: f64,
    /// Read policies to run (round-robin, least-queue, load, md, nearest, auto); all when
    /// omitted.
    #[arg(long = "policy", num_args = 1..)]
    pub policies: Vec<String>,
    /// Only these jobs (1–29); all when omitted.
    #[arg(long = "job", num_args = 1..)]
    pub jobs: Vec<u32>,
    /// Also draw every figure as a fraction of the job's best published one to this .svg
    /// or .png file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Two real devices (or files) instead of simulated disks: per policy a mirror is made
    /// over them (destroying what they hold: needs --yes), a file of --size written, and
    /// the jobs run for --runtime wall seconds each; the resync jobs read while the pool's
    /// resilver of the second device is held at the study's progress.
    #[arg(long = "real", value_name = "DEV", num_args = 2)]
    pub real: Vec<String>,
    /// Yes, destroy what the --real devices hold.
    #[arg(long, requires = "real")]
    pub yes: bool,
    /// With --real: the file the jobs read and write (the study's offsets, on a 4 TB disk,
    /// are scaled onto it).
    #[arg(long, default_value = "4G", requires = "real")]
    pub size: String,
}

/// Checks a `--plot` file name before a run (not after minutes of it).
fn plot_format(plot: &Option<PathBuf>) -> Result<Option<cairn_plot::Format>, String> {
    plot.as_ref()
        .map(|p| {
            cairn_plot::Format::of(p).ok_or_else(|| {
                format!(
                    "--plot {}: use a file name ending in .svg or .png",
                    p.display()
                )
            })
        })
        .transpose()
}

/// Writes a chart to the `--plot` file.
fn write_plot(
    plot: &Option<PathBuf>,
    format: Option<cairn_plot::Format>,
    chart: &cairn_plot::bars::BarChart,
) -> Result<(), String> {
    let (Some(path), Some(format)) = (plot, format) else {
        return Ok(());
    };
    let bytes = cairn_plot::render(&cairn_plot::bars::scene(chart), format);
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Runs `cairn bench …`.
pub fn run_bench(cmd: BenchCli) -> Result<(), String> {
    match cmd {
        BenchCli::Core(c) => cairn_bench::run(&c).map_err(|e| e.to_string()),
        BenchCli::Lab(LabCommand::Raid1(a)) => raid1_cmd(&a),
        BenchCli::Lab(LabCommand::Dd(a)) => dd_cmd(&a),
        BenchCli::Lab(LabCommand::Layouts(a)) => layouts_cmd(&a),
    }
}

fn parse_policies(names: &[String]) -> Result<Vec<Policy>, String> {
    if names.is_empty() {
        return Ok(Policy::ALL.to_vec());
    }
    names
        .iter()
        .map(|n| {
            Policy::parse(n).ok_or_else(|| {
                let all: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown read policy `{n}`: use one of {}", all.join(", "))
            })
        })
        .collect()
}

/// cairn's block cache during `bench lab raid1 --real`.
const REAL_STUDY_CACHE_BYTES: u64 = 64 << 20;

fn raid1_cmd(a: &Raid1Args) -> Result<(), String> {
    let policies = parse_policies(&a.policies)?;
    if !(a.runtime.is_finite() && a.runtime > 0.0 && a.runtime <= 86_400.0) {
        return Err(format!(
            "--runtime {}: give the virtual seconds per job, more than 0 and at most 86400",
            a.runtime
        ));
    }
    if let Some(j) = a.jobs.iter().find(|j| !(1..=29).contains(*j)) {
        return Err(format!("--job {j}: the RAID1 study has jobs 1 to 29"));
    }
    let format = plot_format(&a.plot)?;
    let report = match a.real.as_slice() {
        [] => raid1::run(a.seed, a.runtime, &policies, &a.jobs),
        devices => {
            refuse_without_yes(a.yes, devices)?;
            // the study read a 3 TiB span no cache could hold: keep cairn's block cache to
            // what read-ahead needs, so the reads measure the devices
            cairn_pool::io::cache::set_default_capacity(REAL_STUDY_CACHE_BYTES);
            let size =
                cairn_lab::spec::parse_bytes("--size", &a.size).map_err(|e| e.to_string())?;
            let scratch =
                std::env::temp_dir().join(format!("cairn-lab-raid1-{}", std::process::id()));
            cairn_bench::real_mirror::study(&scratch, devices, size, a.runtime, &policies, &a.jobs)?
        }
    };
    write_plot(&a.plot, format, &cairn_lab::charts::raid1_chart(&report))?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    if let Some(path) = &a.out {
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if a.json {
        println!("{json}");
    } else {
        match a.real.as_slice() {
            [] => println!(
                "RAID1 study on 2 simulated WD 4 TB disks, seed {}, {} virtual s per job",
                a.seed, a.runtime
            ),
            devices => println!(
                "RAID1 study on a real mirror of {}, {} wall s per job, a {} file",
                devices.join(" and "),
                a.runtime,
                a.size
            ),
        }
        print!("{}", report.table());
    }
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct DdArgs {
    /// Disks: N x SIZE[,hdd|ssd][,512n|512e|4kn][,RPM], e.g. 28x1TB or 5x2TB,512e
    /// (repeat for mixed sets).
    #[arg(
        long = "disks",
        required_unless_present = "real",
        conflicts_with = "real"
    )]
    pub disks: Vec<String>,
    /// Real devices (or files) instead of simulated disks: a pool is made over them,
    /// destroying what they hold (needs --yes), and destroyed after.
    #[arg(long = "real", value_name = "DEV", num_args = 1..)]
    pub real: Vec<String>,
    /// Yes, destroy what the --real devices hold.
    #[arg(long)]
    pub yes: bool,
    /// Also run the dd through cairn's own pool over the simulated disks (`sim:` leaves:
    /// sparse files in --dir that store the data), timed by the disks' virtual clocks.
    #[arg(long, conflicts_with = "real")]
    pub engine: bool,
    /// How --engine times the run: `real` (each request takes its model time in real time,
    /// `sim:…&pace=real`, and the phases are timed by the clock: honest about what waits
    /// for what, but as slow as the disks) or `busy` (virtual time, fast: a phase lasts
    /// what its busiest disk was busy; leaves idle time and the read-ahead a drive does
    /// meanwhile out).
    #[arg(long, value_enum, default_value = "real", requires = "engine")]
    pub engine_time: EngineTime,
    /// Where --engine keeps its disks' backing files (default: a new temporary folder,
    /// removed after). The run writes the file and its parity there for real.
    #[arg(long, requires = "engine")]
    pub dir: Option<PathBuf>,
    /// [G x]KIND[-W]: raidz2, 2xraidz2-14, 14xmirror-2, 3xraidz2-9, stripe.
    #[arg(long)]
    pub layout: String,
    /// Sector size exponent of the pool (9: 512 B, 12: 4 KiB).
    #[arg(long, default_value_t = 12)]
    pub ashift: u32,
    /// dd's block size (the pool writes 128 KiB records whatever it is).
    #[arg(long, default_value = "1M")]
    pub bs: String,
    /// File size.
    #[arg(long, default_value = "10G")]
    pub size: String,
    /// Print JSON (write_mbs, read_mbs, …).
    #[arg(long)]
    pub json: bool,
    /// Cap writes at this many MB/s, the host's own ceiling (0: no cap).
    #[arg(long, default_value_t = 0.0)]
    pub host_write_mbs: f64,
}

/// How `bench lab dd --engine` times its run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineTime {
    Real,
    Busy,
}

fn host_cap(mbs: f64) -> Result<Option<f64>, String> {
    if !mbs.is_finite() || mbs < 0.0 {
        return Err(format!("--host-write-mbs {mbs}: give MB/s, 0 for no cap"));
    }
    Ok((mbs > 0.0).then_some(mbs))
}

fn dd_cmd(a: &DdArgs) -> Result<(), String> {
    use cairn_lab::spec;
    if !a.real.is_empty() {
        return real_dd_cmd(a);
    }
    let mut disks = Vec::new();
    for d in &a.disks {
        disks.extend(spec::parse_disks(d).map_err(|e| e.to_string())?);
    }
    let layout = spec::parse_layout(&a.layout, disks.len()).map_err(|e| e.to_string())?;
    if !(9..=16).contains(&a.ashift) {
        return Err(format!(
            "--ashift {}: use 9 to 16 (9: 512 B, 12: 4 KiB sectors)",
            a.ashift
        ));
    }
    let bs = spec::parse_bytes("--bs", &a.bs).map_err(|e| e.to_string())?;
    let size = spec::parse_bytes("--size", &a.size).map_err(|e| e.to_string())?;
    if size > 1 << 40 {
        return Err(format!("--size {}: at most 1T in the lab", a.size));
    }
    let host_write_mbs = host_cap(a.host_write_mbs)?;
    let job = cairn_lab::dd::DdJob {
        ashift: a.ashift,
        bs,
        size,
        host_write_mbs,
        host_read_mbs: None,
    };
    let r = cairn_lab::dd::run(&disks, &layout, &a.layout, job);
    let engine = match a.engine {
        true => Some(engine_dd(a, &layout, bs, size)?),
        false => None,
    };
    if a.json {
        let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
        if let Some(e) = &engine {
            let timing = format!("{:?}", a.engine_time).to_lowercase();
            v["engine"] = serde_json::json!({
                "write_mbs": e.write_mbs, "read_mbs": e.read_mbs, "time": timing,
            });
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "dd of {} on {} ({} disks, ashift {}): write {:.1} MB/s, read {:.1} MB/s",
        a.size, a.layout, r.disks, a.ashift, r.write_mbs, r.read_mbs
    );
    if let Some(e) = engine {
        let timing = match a.engine_time {
            EngineTime::Real => "paced in real time",
            EngineTime::Busy => "busiest disk's busy time",
        };
        println!(
            "  through cairn's pool on sim: leaves ({timing}): write {:.1} MB/s, read {:.1} MB/s",
            e.write_mbs, e.read_mbs
        );
    }
    Ok(())
}

/// `bench lab dd --engine`: the dd through a real pool over `sim:` leaves
/// (`cairn_bench::real_dd`), paced in real time or timed by the leaves' busy time.
fn engine_dd(
    a: &DdArgs,
    layout: &cairn_lab::spec::LayoutSpec,
    bs: u64,
    size: u64,
) -> Result<cairn_bench::real_dd::RealDdResult, String> {
    use cairn_lab::sim_leaf;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("cairn-lab-sim-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?;
    let mut leaves = Vec::new();
    for d in &a.disks {
        leaves.extend(sim_leaf::leaf_specs(&dir, d, leaves.len())?);
    }
    if a.engine_time == EngineTime::Real {
        leaves.iter_mut().for_each(|l| l.push_str("&pace=real"));
    }
    let backing: Vec<String> = leaves
        .iter()
        .filter_map(|s| sim_leaf::backing_of(s).map(str::to_string))
        .collect();
    let busy = || backing.iter().map(|p| sim_leaf::busy_ms(p) / 1e3).collect();
    let tokens = layout.vdev_tokens(&leaves);
    let job = cairn_bench::real_dd::DdJob {
        ashift: a.ashift,
        bs,
        size,
    };
    let clock = match a.engine_time {
        EngineTime::Real => cairn_bench::real_dd::PhaseClock::Wall,
        EngineTime::Busy => cairn_bench::real_dd::PhaseClock::Leaves(&busy),
    };
    let r = cairn_bench::real_dd::run(&dir.join("state"), &tokens, job, clock);
    for p in &backing {
        let _ = std::fs::remove_file(p);
    }
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    r
}

/// A `--real` run destroys what the devices hold: only with `--yes`.
fn refuse_without_yes(yes: bool, devices: &[String]) -> Result<(), String> {
    if yes {
        return Ok(());
    }
    Err(format!(
        "--real makes a pool over {} and destroys what they hold; add --yes to go on",
        devices.join(", ")
    ))
}

/// `bench lab dd --real DEV… --yes`: the same dd on real devices (`cairn_bench::real_dd`).
fn real_dd_cmd(a: &DdArgs) -> Result<(), String> {
    use cairn_lab::spec;
    refuse_without_yes(a.yes, &a.real)?;
    let layout = spec::parse_layout(&a.layout, a.real.len()).map_err(|e| e.to_string())?;
    let bs = spec::parse_bytes("--bs", &a.bs).map_err(|e| e.to_string())?;
    let size = spec::parse_bytes("--size", &a.size).map_err(|e| e.to_string())?;
    if bs == 0 || bs > 64 << 20 {
        return Err(format!("--bs {}: give 1 byte to 64M", a.bs));
    }
    let tokens = layout.vdev_tokens(&a.real);
    let scratch = std::env::temp_dir().join(format!("cairn-lab-dd-{}", std::process::id()));
    let job = cairn_bench::real_dd::DdJob {
        ashift: a.ashift,
        bs,
        size,
    };
    let clock = cairn_bench::real_dd::PhaseClock::Wall;
    let r = cairn_bench::real_dd::run(&scratch, &tokens, job, clock)?;
    if a.json {
        let v = serde_json::json!({
            "layout": a.layout, "devices": a.real, "ashift": a.ashift, "bs": bs, "size": size,
            "write_mbs": r.write_mbs, "read_mbs": r.read_mbs, "page_cache": r.page_cache,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "dd of {} on {} over {} devices (ashift {}): write {:.1} MB/s, read {:.1} MB/s (page cache: {})",
            a.size,
            a.layout,
            a.real.len(),
            a.ashift,
            r.write_mbs,
            r.read_mbs,
            r.page_cache
        );
    }
    Ok(())
}

/// `bench lab layouts --real DEV… --yes`: every layout of the study that fits on the
/// devices, dd'd through a pool over the first devices it needs (`cairn_bench::real_dd`).
fn real_layouts(
    a: &LayoutsArgs,
    study: cairn_lab::layouts::Study,
    size: u64,
) -> Result<cairn_lab::layouts::LayoutsReport, String> {
    use cairn_lab::spec::LabError;
    refuse_without_yes(a.yes, &a.real)?;
    let scratch = std::env::temp_dir().join(format!("cairn-lab-layouts-{}", std::process::id()));
    let measure = |n: usize, spec: &cairn_lab::spec::LayoutSpec, name: &str| {
        let Some(devices) = a.real.get(..n) else {
            eprintln!(
                "{name} of {n} disks: left out ({} devices given)",
                a.real.len()
            );
            return Ok(None);
        };
        let job = cairn_bench::real_dd::DdJob {
            ashift: 12,
            bs: 1 << 20,
            size,
        };
        let tokens = spec.vdev_tokens(devices);
        let clock = cairn_bench::real_dd::PhaseClock::Wall;
        let r = cairn_bench::real_dd::run(&scratch, &tokens, job, clock)
            .map_err(|e| LabError::Real(format!("{name} over {}: {e}", devices.join(" "))))?;
        eprintln!(
            "{name} of {n} disks: write {:.1} MB/s, read {:.1} MB/s (page cache: {})",
            r.write_mbs, r.read_mbs, r.page_cache
        );
        Ok::<_, LabError>(Some((r.write_mbs, r.read_mbs)))
    };
    let mut report = cairn_lab::layouts::run_with(study, measure).map_err(|e| e.to_string())?;
    report.size = size;
    report.real_devices = true;
    Ok(report)
}

fn layouts_cmd(a: &LayoutsArgs) -> Result<(), String> {
    let size = cairn_lab::spec::parse_bytes("--size", &a.size).map_err(|e| e.to_string())?;
    if size > 1 << 40 {
        return Err(format!("--size {}: at most 1T in the lab", a.size));
    }
    let study = if a.ssd {
        cairn_lab::layouts::Study::Ssd
    } else {
        cairn_lab::layouts::Study::Hdd
    };
    let format = plot_format(&a.plot)?;
    let r = if a.real.is_empty() {
        let cap = host_cap(a.host_write_mbs.unwrap_or(study.host_write_mbs()))?;
        cairn_lab::layouts::run(study, size, cap).map_err(|e| e.to_string())?
    } else {
        real_layouts(a, study, size)?
    };
    write_plot(&a.plot, format, &cairn_lab::charts::layouts_chart(&r))?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", r.table());
    }
    Ok(())
}
