//! `cairn bench parity`: GB/s of *data* (data bytes / time) for RAID-Z parity generation and
//! reconstruction, single thread, per kernel, cache-hot and out-of-cache, next to a memory
//! copy reference and ISA-L (loaded at run time) on the same buffers.

mod isal;
mod measure;
mod report;

use cairn_parity::{reference, Kernel, RaidzParity};
use isal::Isal;
use measure::{fill_pattern, interleaved_medians, AlignedBuffer, Timing};
use report::{BenchReport, Cache, Record};
use std::path::PathBuf;

/// Options of `cairn bench parity`.
#[derive(clap::Args, Debug, Clone)]
pub struct ParityBenchArgs {
    /// Only this kernel (a name as for CAIRN_PARITY_KERNEL); default: every supported kernel.
    #[arg(long, value_name = "NAME")]
    pub kernel: Option<String>,
    /// Small subset for smoke tests: best kernel, 8 data × 128 KiB, cache-hot, short runs.
    #[arg(long)]
    pub quick: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Timed repetitions per figure (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Cache state(s) to measure.
    #[arg(long, value_enum, default_value_t = CacheArg::Both)]
    pub cache: CacheArg,
    /// Out-of-cache buffer ring in MiB (must be ≫ the last-level cache).
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pub ring_mib: usize,
    /// Data column counts, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 8, 10, 20])]
    pub data_cols: Vec<usize>,
    /// Column sizes in KiB, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 128, 1024])]
    pub col_kib: Vec<usize>,
    /// Column length (KiB) from which cairn writes outputs with non-temporal stores
    /// (default: the library's, 512 KiB; a huge value disables them).
    #[arg(long, value_name = "KIB")]
    pub stream_min_kib: Option<usize>,
    /// Do not measure ISA-L even if it is installed.
    #[arg(long)]
    pub no_isal: bool,
}

/// `--cache` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheArg {
    Hot,
    Cold,
    Both,
}

/// The operations measured. Reconstructions use parity 3 (the "8+3" shape of the issue)
/// and rebuild the first 1, 2 or 3 data columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    GenP,
    GenPq,
    GenPqr,
    Rebuild1,
    Rebuild2,
    Rebuild3,
}

const ALL_OPS: [Op; 6] = [
    Op::GenP,
    Op::GenPq,
    Op::GenPqr,
    Op::Rebuild1,
    Op::Rebuild2,
    Op::Rebuild3,
];
/// Every stripe holds room for P, Q and R; ops with less parity leave columns unused.
const STRIPE_PARITY: usize = 3;
/// Gap after each column, so columns do not all start at the same offset modulo 4 KiB and
/// modulo the L2 set span (like separately allocated buffers; with back-to-back power-of-two
/// columns every column maps to the same cache sets and 20+ columns thrash L1/L2 for every
/// implementation alike). Keeps 64-byte alignment (ISA-L `pq_gen` needs 32).
const COLUMN_GAP: usize = 4096 + 64;

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::GenP => "gen P",
            Op::GenPq => "gen PQ",
            Op::GenPqr => "gen PQR",
            Op::Rebuild1 => "rebuild 1 data",
            Op::Rebuild2 => "rebuild 2 data",
            Op::Rebuild3 => "rebuild 3 data",
        }
    }

    fn nparity(self) -> usize {
        match self {
            Op::GenP => 1,
            Op::GenPq => 2,
            _ => 3,
        }
    }

    /// Number of data columns rebuilt (0 for generation).
    fn rebuilt(self) -> usize {
        match self {
            Op::Rebuild1 => 1,
            Op::Rebuild2 => 2,
            Op::Rebuild3 => 3,
            _ => 0,
        }
    }

    /// Stripe column indices this op writes (its result).
    fn outputs(self) -> Vec<usize> {
        match self.rebuilt() {
            0 => (STRIPE_PARITY - self.nparity()..STRIPE_PARITY).collect(),
            m => (STRIPE_PARITY..STRIPE_PARITY + m).collect(),
        }
    }
}

/// Who computes: a cairn kernel or an ISA-L entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Implementation {
    Cairn(Kernel),
    IsalXorGen,
    IsalPqGen,
    IsalEcEncode,
}

impl Implementation {
    pub(crate) fn name(self) -> String {
        match self {
            Implementation::Cairn(k) => k.name().to_string(),
            Implementation::IsalXorGen => "isal xor_gen".into(),
            Implementation::IsalPqGen => "isal pq_gen".into(),
            Implementation::IsalEcEncode => "isal ec_encode_data".into(),
        }
    }

    pub(crate) fn is_isal(self) -> bool {
        !matches!(self, Implementation::Cairn(_))
    }

    /// ISA-L entry points that compute `op` (rebuilding one column is also a plain XOR).
    fn isal_for(op: Op) -> Vec<Implementation> {
        match op {
            Op::GenP | Op::Rebuild1 => {
                vec![Implementation::IsalXorGen, Implementation::IsalEcEncode]
            }
            Op::GenPq => vec![Implementation::IsalPqGen, Implementation::IsalEcEncode],
            _ => vec![Implementation::IsalEcEncode],
        }
    }
}

/// Everything fixed for one run.
struct Plan {
    kernels: Vec<Kernel>,
    data_cols: Vec<usize>,
    col_bytes: Vec<usize>,
    caches: Vec<Cache>,
    timing: Timing,
    ring_bytes: usize,
    stream_min_bytes: usize,
}

impl Plan {
    fn from_args(args: &ParityBenchArgs) -> Result<Plan, String> {
        let kernels = match &args.kernel {
            Some(name) => {
                let kernel = Kernel::from_name(name).ok_or(format!("unknown kernel {name:?}"))?;
                if !kernel.is_supported() {
                    return Err(format!("kernel {name} is not supported by this CPU"));
                }
                vec![kernel]
            }
            None if args.quick => vec![Kernel::best()],
            None => Kernel::available(),
        };
        if args
            .data_cols
            .iter()
            .any(|&n| n == 0 || n + STRIPE_PARITY > isal::MAX_VECTORS)
        {
            return Err(format!(
                "data column counts must be 1..={}",
                isal::MAX_VECTORS - 3
            ));
        }
        if args.col_kib.contains(&0) {
            return Err("column sizes must be at least 1 KiB".into());
        }
        let caches = match (args.quick, args.cache) {
            (true, _) | (false, CacheArg::Hot) => vec![Cache::Hot],
            (false, CacheArg::Cold) => vec![Cache::Cold],
            (false, CacheArg::Both) => vec![Cache::Hot, Cache::Cold],
        };
        let (data_cols, col_bytes) = if args.quick {
            (vec![8], vec![128 << 10])
        } else {
            (
                args.data_cols.clone(),
                args.col_kib.iter().map(|k| k << 10).collect(),
            )
        };
        let timing = if args.quick {
            Timing::quick(args.reps.min(3))
        } else {
            Timing::full(args.reps)
        };
        let stream_min_bytes = args
            .stream_min_kib
            .map_or(cairn_parity::DEFAULT_STREAM_MIN_BYTES, |k| {
                k.saturating_mul(1024)
            });
        Ok(Plan {
            kernels,
            data_cols,
            col_bytes,
            caches,
            timing,
            ring_bytes: args.ring_mib << 20,
            stream_min_bytes,
        })
    }
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(args: &ParityBenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let plan = Plan::from_args(args)?;
    let isal = if args.no_isal {
        Err("disabled with --no-isal".to_string())
    } else {
        Isal::load()
    };
    let mut report = BenchReport::new(
        &plan.kernels,
        plan.timing.reps,
        isal.as_ref().map(|i| i.path()),
    );
    if !args.json {
        report.print_header();
    }
    let mut ring = if plan.caches.contains(&Cache::Cold) {
        let mut ring = AlignedBuffer::new(plan.ring_bytes);
        fill_pattern(ring.bytes_mut(), 1);
        Some(ring)
    } else {
        None
    };
    report.copy_hot_gbps = measure::copy_hot_gbps(&plan.timing);
    if let Some(ring) = ring.as_mut() {
        report.copy_cold_gbps = Some(measure::copy_cold_gbps(ring.bytes_mut(), &plan.timing));
    }
    if !args.json {
        report.print_copy();
    }
    for &cache in &plan.caches {
        for &ndata in &plan.data_cols {
            for &col_bytes in &plan.col_bytes {
                let shape = Shape { ndata, col_bytes };
                let records = match cache {
                    Cache::Hot => bench_hot(&plan, &isal, shape),
                    Cache::Cold => {
                        let ring = ring.as_mut().expect("ring allocated for cold runs");
                        bench_cold(&plan, &isal, shape, ring.bytes_mut())
                    }
                };
                if !args.json {
                    report.print_group(cache, shape.ndata, shape.col_bytes, &records);
                }
                report.results.extend(records);
            }
        }
    }
    let json = serde_json::to_string_pretty(&report)?;
    if args.json {
        println!("{json}");
    } else {
        report.print_footer();
    }
    if let Some(path) = &args.json_out {
        std::fs::write(path, json + "\n")?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) ndata: usize,
    pub(crate) col_bytes: usize,
}

impl Shape {
    fn ncols(self) -> usize {
        STRIPE_PARITY + self.ndata
    }

    /// Distance between column starts: the column plus [`COLUMN_GAP`].
    fn col_stride(self) -> usize {
        self.col_bytes + COLUMN_GAP
    }

    fn stripe_bytes(self) -> usize {
        self.ncols() * self.col_stride()
    }

    /// Byte range of column `c` inside a stripe buffer.
    fn col_range(self, c: usize) -> std::ops::Range<usize> {
        c * self.col_stride()..c * self.col_stride() + self.col_bytes
    }

    fn data_bytes(self) -> usize {
        self.ndata * self.col_bytes
    }
}

/// Implementations to measure for `op`.
fn implementations(plan: &Plan, isal: &Result<Isal, String>, op: Op) -> Vec<Implementation> {
    let mut list: Vec<Implementation> = plan
        .kernels
        .iter()
        .map(|&k| Implementation::Cairn(k))
        .collect();
    if isal.is_ok() {
        list.extend(Implementation::isal_for(op));
    }
    list
}

/// Cache-hot: one stripe, computed over and over.
fn bench_hot(plan: &Plan, isal: &Result<Isal, String>, shape: Shape) -> Vec<Record> {
    let mut buffer = AlignedBuffer::new(shape.stripe_bytes());
    fill_pattern(buffer.bytes_mut(), shape.ndata as u64);
    let best = RaidzParity::with_kernel(Kernel::best()).expect("best kernel is supported");
    let mut records = Vec::new();
    for op in ALL_OPS {
        // Valid P, Q, R so reconstructions rebuild the original data; then the expected
        // output of `op` (scalar kernel), to check every implementation against.
        best.generate(STRIPE_PARITY, &mut split_columns(buffer.bytes_mut(), shape))
            .expect("valid stripe");
        if op.rebuilt() == 0 {
            let mut reference = Runner::new(
                Implementation::Cairn(Kernel::Scalar),
                op,
                shape,
                None,
                usize::MAX,
            );
            reference.run(&mut split_columns(buffer.bytes_mut(), shape));
        }
        let expected = snapshot(buffer.bytes_mut(), shape, op);
        let implementations = implementations(plan, isal, op);
        let mut runners: Vec<Runner> = implementations
            .iter()
            .map(|&i| Runner::new(i, op, shape, isal.as_ref().ok(), plan.stream_min_bytes))
            .collect();
        let mut cols = split_columns(buffer.bytes_mut(), shape);
        let secs = interleaved_medians(&plan.timing.hot(), runners.len(), |i| {
            runners[i].run(&mut cols)
        });
        drop(cols);
        for ((runner, implementation), secs) in runners.iter_mut().zip(implementations).zip(secs) {
            for &c in &op.outputs() {
                buffer.bytes_mut()[shape.col_range(c)].fill(0xee);
            }
            runner.run(&mut split_columns(buffer.bytes_mut(), shape));
            let verified = snapshot(buffer.bytes_mut(), shape, op) == expected;
            if !verified {
                eprintln!(
                    "warning: {} {} {}x{} B disagrees with the reference",
                    implementation.name(),
                    op.name(),
                    shape.ndata,
                    shape.col_bytes
                );
            }
            let gbps = shape.data_bytes() as f64 / secs;
            records.push(Record::new(
                Cache::Hot,
                op,
                shape,
                implementation,
                gbps,
                Some(verified),
            ));
        }
    }
    records
}

/// Out-of-cache: every call takes the next stripe of a ring much larger than the LLC.
fn bench_cold(
    plan: &Plan,
    isal: &Result<Isal, String>,
    shape: Shape,
    ring: &mut [u8],
) -> Vec<Record> {
    let stripes = ring.len() / shape.stripe_bytes();
    assert!(
        stripes >= 2,
        "ring too small for one stripe of {} bytes",
        shape.stripe_bytes()
    );
    let mut all: Vec<Vec<&mut [u8]>> = ring[..stripes * shape.stripe_bytes()]
        .chunks_mut(shape.stripe_bytes())
        .map(|stripe| split_columns(stripe, shape))
        .collect();
    let mut records = Vec::new();
    for op in ALL_OPS {
        let implementations = implementations(plan, isal, op);
        let mut runners: Vec<Runner> = implementations
            .iter()
            .map(|&i| Runner::new(i, op, shape, isal.as_ref().ok(), plan.stream_min_bytes))
            .collect();
        let mut next = 0;
        let secs = interleaved_medians(&plan.timing.cold(), runners.len(), |i| {
            runners[i].run(&mut all[next]);
            next = (next + 1) % stripes;
        });
        for (implementation, secs) in implementations.into_iter().zip(secs) {
            let gbps = shape.data_bytes() as f64 / secs;
            records.push(Record::new(
                Cache::Cold,
                op,
                shape,
                implementation,
                gbps,
                None,
            ));
        }
    }
    records
}

fn split_columns(stripe: &mut [u8], shape: Shape) -> Vec<&mut [u8]> {
    let columns: Vec<&mut [u8]> = stripe
        .chunks_mut(shape.col_stride())
        .map(|c| &mut c[..shape.col_bytes])
        .collect();
    assert_eq!(columns.len(), shape.ncols());
    columns
}

fn snapshot(stripe: &mut [u8], shape: Shape, op: Op) -> Vec<u8> {
    op.outputs()
        .iter()
        .flat_map(|&c| stripe[shape.col_range(c)].to_vec())
        .collect()
}

/// One implementation of one op, ready to be called on stripes (all setup done here, so
/// the timed call does only the work).
struct Runner<'a> {
    implementation: Implementation,
    op: Op,
    engine: Option<RaidzParity>,
    isal: Option<&'a Isal>,
    isal_tables: Option<isal::EcTables>,
    /// Stripe column order the ISA-L call wants (inputs first, then outputs).
    isal_order: Vec<usize>,
    missing: Vec<usize>,
}

impl<'a> Runner<'a> {
    fn new(
        implementation: Implementation,
        op: Op,
        shape: Shape,
        isal: Option<&'a Isal>,
        stream_min_bytes: usize,
    ) -> Runner<'a> {
        let engine = match implementation {
            Implementation::Cairn(k) => {
                let engine = RaidzParity::with_kernel(k).expect("supported kernel");
                Some(engine.with_stream_min_bytes(stream_min_bytes))
            }
            _ => None,
        };
        let p = op.nparity();
        let m = op.rebuilt();
        let data: Vec<usize> = (STRIPE_PARITY..shape.ncols()).collect();
        let parity: Vec<usize> = (STRIPE_PARITY - p..STRIPE_PARITY).collect();
        let (isal_order, matrix) = match (implementation, m) {
            // xor_gen: data…, P.   pq_gen: data in reverse (ISA-L's Q weights D_0 by 1), P, Q.
            (Implementation::IsalXorGen, 0) => ([data.clone(), parity.clone()].concat(), None),
            (Implementation::IsalPqGen, _) => (
                [data.iter().rev().copied().collect(), parity.clone()].concat(),
                None,
            ),
            (Implementation::IsalEcEncode, 0) => (
                [data.clone(), parity.clone()].concat(),
                Some(reference::coefficient_matrix(p, shape.ndata)),
            ),
            // Rebuild one data column from P with xor_gen: other data…, P, then the lost column.
            (Implementation::IsalXorGen, _) => (
                [data[1..].to_vec(), vec![0], vec![STRIPE_PARITY]].concat(),
                None,
            ),
            (Implementation::IsalEcEncode, _) => {
                let missing: Vec<usize> = (0..m).collect();
                let (inputs, rows) = reference::decode_matrix(STRIPE_PARITY, shape.ndata, &missing);
                let outputs: Vec<usize> = (STRIPE_PARITY..STRIPE_PARITY + m).collect();
                ([inputs, outputs].concat(), Some(rows))
            }
            (Implementation::Cairn(_), _) => (Vec::new(), None),
        };
        let isal_tables = match (isal, matrix) {
            (Some(isal), Some(matrix)) => Some(isal.init_tables(matrix[0].len(), &matrix)),
            _ => None,
        };
        Runner {
            implementation,
            op,
            engine,
            isal,
            isal_tables,
            isal_order,
            missing: (STRIPE_PARITY..STRIPE_PARITY + m).collect(),
        }
    }

    fn run(&mut self, cols: &mut [&mut [u8]]) {
        let p = self.op.nparity();
        match self.implementation {
            Implementation::Cairn(_) => {
                let engine = self.engine.as_ref().expect("cairn engine");
                let result = if self.op.rebuilt() == 0 {
                    engine.generate(p, &mut cols[STRIPE_PARITY - p..])
                } else {
                    engine.reconstruct(STRIPE_PARITY, cols, &self.missing)
                };
                result.expect("benchmark shapes are valid");
            }
            _ => self.run_isal(cols),
        }
    }

    fn run_isal(&mut self, cols: &mut [&mut [u8]]) {
        let isal = self.isal.expect("ISA-L loaded");
        let mut ordered: [&mut [u8]; isal::MAX_VECTORS] = Default::default();
        let count = self.isal_order.len();
        for (slot, &c) in ordered.iter_mut().zip(&self.isal_order) {
            *slot = std::mem::take(&mut cols[c]);
        }
        let outputs = match self.isal_tables.as_ref() {
            Some(t) => t.outputs(),
            None => 0,
        };
        match self.implementation {
            Implementation::IsalXorGen => isal.xor_gen(&mut ordered[..count]),
            Implementation::IsalPqGen => isal.pq_gen(&mut ordered[..count]),
            _ => {
                let (inputs, outs) = ordered[..count].split_at_mut(count - outputs);
                isal.ec_encode(self.isal_tables.as_mut().expect("tables"), inputs, outs);
            }
        }
        for (slot, &c) in ordered.iter_mut().zip(&self.isal_order) {
            cols[c] = std::mem::take(slot);
        }
    }
}
