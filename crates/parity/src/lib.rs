//! RAID-Z parity: generation and reconstruction of P, Q and R over GF(2^8), with SIMD kernels
//! chosen at run time.
//!
//! # Column layout
//!
//! A RAID-Z row (one block's slice of a stripe) is a list of columns, in RAID-Z order:
//!
//! ```text
//!   col:   0    1    2  |  3      4      5      6      ...   p+n−1
//!          P    Q    R  |  D_0    D_1    D_2    D_3    ...   D_{n−1}
//!          \ nparity p /   \------------- n data columns -------------/
//!
//!   bytes  ###  ###  ###   ###    ###    ###    ###
//!          ###  ###  ###   ###    ###    ###    ###
//!          ###  ###  ###   ###    ###    ...    ...     <- short columns end early and
//!                                                          count as zero-padded
//! ```
//!
//! The first data column is the longest (in RAID-Z the first `bc` columns hold one sector
//! more than the rest). Every parity column has exactly the length of the first data column.
//!
//! # The math
//!
//! Bytes are elements of GF(2^8) with the polynomial x^8+x^4+x^3+x^2+1 (0x11d) and
//! generator 2; addition is XOR. With n data columns:
//!
//! ```text
//!   P = D_0 ⊕ D_1 ⊕ … ⊕ D_{n−1}
//!   Q = Σ 2^(n−1−i) · D_i     = ((D_0·2 ⊕ D_1)·2 ⊕ D_2)·2 …   (Horner)
//!   R = Σ 4^(n−1−i) · D_i     = ((D_0·4 ⊕ D_1)·4 ⊕ D_2)·4 …
//! ```
//!
//! i.e. parity row `j` (P = 0, Q = 1, R = 2) gives data column `i` the coefficient
//! `A[j][i] = (2^j)^(n−1−i)`. These are the formulas of OpenZFS `vdev_raidz_math` and of
//! H. Peter Anvin, "The mathematics of RAID-6"; R extends Q with generator 4. Any ≤ 3 columns of
//! `A` form a Vandermonde-like matrix in the distinct values `2^(n−1−i)` (n ≤ 255), so every
//! pattern of up to `p` erased columns can be solved.
//!
//! Reconstruction of erased data columns `X` from surviving parity rows `J` (|J| = |X|):
//! the syndromes `S_j = parity_j ⊕ Σ_{i∉X} A[j][i]·D_i` equal `Σ_{x∈X} A[j][x]·D_x`, so
//! `D_X = B⁻¹·S` with `B = A[J][X]` (at most 3×3). Erased parity is then regenerated. Fast
//! paths fall out of the same scheme: one data column from P is plain XOR (`B⁻¹ = [1]`),
//! and erased parity alone is just generation of those rows.
//!
//! # Kernels
//!
//! Every operation is one pass of [`kernels`]' linear-combination kernel; see [`Kernel`] for the
//! instruction sets and [`RaidzParity::new`] for run-time selection ([`set_default_kernel`], which the binary calls with `CAIRN_PARITY_KERNEL`).

mod gf;
mod kernels;
pub mod reference;

use kernels::{Combine, InputColumn, MAX_ROWS};
use std::sync::OnceLock;

/// Largest parity level (P, Q, R).
pub const MAX_PARITY: usize = 3;
/// Largest number of columns (parity + data) in a row, as in OpenZFS.
pub const MAX_COLUMNS: usize = 255;
/// Rows up to this many data columns use small scratch arrays (clearing scratch for 255
/// columns costs more than the kernel itself on short columns).
const NARROW_COLUMNS: usize = 24;
/// Environment variable the `cairn` binary reads to force a kernel by name (this crate
/// reads no environment: the binary calls [`set_default_kernel`]).
pub const KERNEL_ENV_VAR: &str = "CAIRN_PARITY_KERNEL";

/// An implementation of the parity kernels for one instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Portable byte-wise code with a multiplication table.
    Scalar,
    /// 16-byte vectors, `pshufb` nibble tables.
    Ssse3,
    /// 32-byte vectors, `vpshufb` nibble tables.
    Avx2,
    /// 32-byte vectors, GFNI affine multiply.
    Avx2Gfni,
    /// 64-byte vectors, GFNI affine multiply.
    Avx512Gfni,
    /// Arm NEON: reserved name, not implemented yet (never supported).
    Neon,
}

/// Every kernel, slowest first.
const ALL_KERNELS: [Kernel; 6] = [
    Kernel::Scalar,
    Kernel::Neon,
    Kernel::Ssse3,
    Kernel::Avx2,
    Kernel::Avx2Gfni,
    Kernel::Avx512Gfni,
];

impl Kernel {
    /// Stable name, as used by `CAIRN_PARITY_KERNEL` and `cairn bench parity --kernel`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
            Kernel::Avx2Gfni => "avx2-gfni",
            Kernel::Avx512Gfni => "avx512-gfni",
            Kernel::Neon => "neon",
        }
    }

    /// Whether this CPU can run the kernel (run-time feature detection).
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Scalar => true,
            Kernel::Neon => false,
            #[cfg(target_arch = "x86_64")]
            Kernel::Ssse3 => is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Gfni => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("gfni")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Gfni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// All kernels this CPU supports, slowest first.
    pub fn available() -> Vec<Kernel> {
        ALL_KERNELS
            .into_iter()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// The fastest supported kernel.
    pub fn best() -> Kernel {
        ALL_KERNELS
            .into_iter()
            .rev()
            .find(|k| k.is_supported())
            .unwrap_or(Kernel::Scalar)
    }

    /// Parses a name as returned by [`Kernel::name`].
    pub fn from_name(s: &str) -> Option<Kernel> {
        ALL_KERNELS.into_iter().find(|k| k.name() == s)
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a parity operation was refused. Nothing is written when an error is returned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParityError {
    #[error("parity level {0} is not supported (must be 1..=3)")]
    InvalidParity(usize),
    #[error("{columns} columns for parity {nparity}: need at least nparity + 1 and at most 255")]
    BadColumnCount { nparity: usize, columns: usize },
    #[error("column {column} has {len} bytes; {rule}")]
    BadColumnLength {
        column: usize,
        len: usize,
        rule: &'static str,
    },
    #[error("{missing} missing columns, but parity {nparity} can rebuild at most {nparity}")]
    TooManyMissing { missing: usize, nparity: usize },
    #[error("missing column {index} is out of range (row has {columns} columns)")]
    MissingOutOfRange { index: usize, columns: usize },
    #[error("column {0} is listed as missing twice")]
    DuplicateMissing(usize),
    #[error("unknown parity kernel {0:?}")]
    UnknownKernel(String),
    #[error("parity kernel {0} is not supported by this CPU")]
    KernelUnsupported(Kernel),
}

/// RAID-Z parity engine bound to one kernel. Holds no mutable state, so it is `Send + Sync`
/// and one instance serves every thread; no operation allocates.
#[derive(Debug, Clone)]
pub struct RaidzParity {
    kernel: Kernel,
    /// Columns at least this long are written with non-temporal stores.
    stream_min_bytes: usize,
}

/// Default for [`RaidzParity::with_stream_min_bytes`]: columns this long (a stripe of
/// several MiB) are assumed not to be re-read from cache soon, so their outputs bypass it.
pub const DEFAULT_STREAM_MIN_BYTES: usize = 512 << 10;

/// A checked row: parity level, data column count and parity length.
#[derive(Debug, Clone, Copy)]
struct Shape {
    nparity: usize,
    ndata: usize,
    parity_len: usize,
}

impl Shape {
    fn check(nparity: usize, cols: &[&mut [u8]]) -> Result<Shape, ParityError> {
        let lens: Vec<usize> = cols.iter().map(|c| c.len()).collect();
        Shape::check_lens(nparity, lens.into_iter())
    }

    /// `check` for parity and data given separately (`generate_split`).
    fn check_split<D: AsRef<[u8]>>(
        nparity: usize,
        parity: &[&mut [u8]],
        data: &[D],
    ) -> Result<Shape, ParityError> {
        if parity.len() != nparity {
            return Err(ParityError::BadColumnCount {
                nparity,
                columns: parity.len() + data.len(),
            });
        }
        let lens = parity
            .iter()
            .map(|c| c.len())
            .chain(data.iter().map(|d| d.as_ref().len()));
        Shape::check_lens(nparity, lens)
    }

    fn check_lens(
        nparity: usize,
        lens: impl Iterator<Item = usize> + Clone,
    ) -> Result<Shape, ParityError> {
        let ncols = lens.clone().count();
        if !(1..=MAX_PARITY).contains(&nparity) {
            return Err(ParityError::InvalidParity(nparity));
        }
        if ncols <= nparity || ncols > MAX_COLUMNS {
            return Err(ParityError::BadColumnCount {
                nparity,
                columns: ncols,
            });
        }
        let parity_len = lens.clone().nth(nparity).unwrap_or(0);
        for (column, len) in lens.enumerate() {
            if column < nparity && len != parity_len {
                let rule = "parity columns must be as long as the first data column";
                return Err(ParityError::BadColumnLength { column, len, rule });
            }
            if len > parity_len {
                let rule = "data columns must not be longer than the first data column";
                return Err(ParityError::BadColumnLength { column, len, rule });
            }
        }
        Ok(Shape {
            nparity,
            ndata: ncols - nparity,
            parity_len,
        })
    }

    /// `A[row][data_index]`.
    fn coef(&self, row: usize, data_index: usize) -> u8 {
        gf::parity_coef(row, data_index, self.ndata)
    }

    /// Calls `visit(start, end)` for each byte range over which the set of data columns
    /// that are really present (not zero-padding) is constant, from the end backward.
    /// Data column `i` is present in `start..end` exactly when its length is ≥ `end`.
    fn for_each_segment<D: AsRef<[u8]>>(
        &self,
        data_cols: &[D],
        mut visit: impl FnMut(usize, usize),
    ) {
        let mut end = self.parity_len;
        while end > 0 {
            let start = Self::segment_start(data_cols, end);
            visit(start, end);
            end = start;
        }
    }

    /// Start of the segment that ends at `end`: the longest data column shorter than `end`.
    fn segment_start<D: AsRef<[u8]>>(data_cols: &[D], end: usize) -> usize {
        data_cols
            .iter()
            .map(|c| c.as_ref().len())
            .filter(|&l| l < end)
            .max()
            .unwrap_or(0)
    }
}

/// The erased columns of a reconstruct call, split into data and parity.
#[derive(Debug, Default)]
struct Erasures {
    /// Data indices (0-based among data columns), ascending.
    data: [usize; MAX_PARITY],
    ndata: usize,
    /// Erased parity rows, ascending.
    parity: [usize; MAX_PARITY],
    nparity: usize,
    /// Surviving parity rows, ascending.
    surviving: [usize; MAX_PARITY],
    nsurviving: usize,
}

impl Erasures {
    fn parse(shape: &Shape, columns: usize, missing: &[usize]) -> Result<Erasures, ParityError> {
        if let Some(&index) = missing.iter().find(|&&index| index >= columns) {
            return Err(ParityError::MissingOutOfRange { index, columns });
        }
        if missing.len() > shape.nparity {
            return Err(ParityError::TooManyMissing {
                missing: missing.len(),
                nparity: shape.nparity,
            });
        }
        // At most 3 entries from here on: quadratic checks are the cheap ones.
        for (k, &index) in missing.iter().enumerate() {
            if missing[..k].contains(&index) {
                return Err(ParityError::DuplicateMissing(index));
            }
        }
        let mut e = Erasures::default();
        for row in 0..shape.nparity {
            if missing.contains(&row) {
                e.parity[e.nparity] = row;
                e.nparity += 1;
            } else {
                e.surviving[e.nsurviving] = row;
                e.nsurviving += 1;
            }
        }
        for data_index in 0..columns - shape.nparity {
            if missing.contains(&(shape.nparity + data_index)) {
                e.data[e.ndata] = data_index;
                e.ndata += 1;
            }
        }
        Ok(e)
    }
}

impl RaidzParity {
    /// Engine with the kernel chosen for the process ([`set_default_kernel`]), else
    /// [`Kernel::best`].
    pub fn new() -> Result<Self, ParityError> {
        Self::with_kernel(CHOSEN_KERNEL.get().copied().unwrap_or_else(Kernel::best))
    }

    /// Engine with a given kernel; errors if this CPU cannot run it.
    pub fn with_kernel(kernel: Kernel) -> Result<Self, ParityError> {
        if !kernel.is_supported() {
            return Err(ParityError::KernelUnsupported(kernel));
        }
        Ok(RaidzParity {
            kernel,
            stream_min_bytes: DEFAULT_STREAM_MIN_BYTES,
        })
    }

    /// Sets the column length from which outputs are written with non-temporal stores
    /// (faster when the stripe is out of cache, slower when it would have stayed in cache);
    /// `usize::MAX` disables them.
    pub fn with_stream_min_bytes(mut self, bytes: usize) -> Self {
        self.stream_min_bytes = bytes;
        self
    }

    /// See [`RaidzParity::with_stream_min_bytes`].
    pub fn stream_min_bytes(&self) -> usize {
        self.stream_min_bytes
    }

    fn streams(&self, shape: &Shape) -> bool {
        shape.parity_len >= self.stream_min_bytes
    }

    /// The kernel this engine runs.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Computes the parity columns `cols[0..nparity]` from the data columns `cols[nparity..]`.
    pub fn generate(&self, nparity: usize, cols: &mut [&mut [u8]]) -> Result<(), ParityError> {
        let shape = Shape::check(nparity, cols)?;
        let rows = [0, 1, 2];
        self.encode_rows(&shape, cols, &rows[..nparity]);
        Ok(())
    }

    /// `generate` with the parity columns and the (read-only) data columns given apart, so
    /// callers can compute parity straight from shared buffers.
    pub fn generate_split(
        &self,
        nparity: usize,
        parity: &mut [&mut [u8]],
        data: &[&[u8]],
    ) -> Result<(), ParityError> {
        let shape = Shape::check_split(nparity, parity, data)?;
        let rows = [0, 1, 2];
        if shape.ndata <= NARROW_COLUMNS {
            self.encode_split_with::<NARROW_COLUMNS, &[u8]>(&shape, parity, data, &rows[..nparity]);
        } else {
            self.encode_split_with::<MAX_COLUMNS, &[u8]>(&shape, parity, data, &rows[..nparity]);
        }
        Ok(())
    }

    /// Rebuilds `cols[i]` for every `i` in `missing` (parity and/or data, at most `nparity`)
    /// in place from the other columns. A short data column is rebuilt for its own length.
    pub fn reconstruct(
        &self,
        nparity: usize,
        cols: &mut [&mut [u8]],
        missing: &[usize],
    ) -> Result<(), ParityError> {
        let shape = Shape::check(nparity, cols)?;
        let erasures = Erasures::parse(&shape, cols.len(), missing)?;
        if erasures.ndata > 0 {
            self.rebuild_data(&shape, cols, &erasures);
        }
        if erasures.nparity > 0 {
            self.encode_rows(&shape, cols, &erasures.parity[..erasures.nparity]);
        }
        Ok(())
    }

    /// Writes parity rows `rows` (ascending) from all data columns.
    fn encode_rows(&self, shape: &Shape, cols: &mut [&mut [u8]], rows: &[usize]) {
        if shape.ndata <= NARROW_COLUMNS {
            self.encode_rows_with::<NARROW_COLUMNS>(shape, cols, rows)
        } else {
            self.encode_rows_with::<MAX_COLUMNS>(shape, cols, rows)
        }
    }

    /// [`RaidzParity::encode_rows`] with scratch arrays for up to `N` data columns.
    fn encode_rows_with<const N: usize>(
        &self,
        shape: &Shape,
        cols: &mut [&mut [u8]],
        rows: &[usize],
    ) {
        let (parity_cols, data_cols) = cols.split_at_mut(shape.nparity);
        let data_cols: &[&mut [u8]] = data_cols;
        self.encode_split_with::<N, &mut [u8]>(shape, parity_cols, data_cols, rows);
    }

    /// Writes parity rows `rows` into `parity_cols` from `data_cols`.
    fn encode_split_with<const N: usize, D: AsRef<[u8]>>(
        &self,
        shape: &Shape,
        parity_cols: &mut [&mut [u8]],
        data_cols: &[D],
        rows: &[usize],
    ) {
        debug_assert!(!rows.is_empty() && rows.windows(2).all(|w| w[0] < w[1]));
        let mut inputs = [InputColumn::default(); N];
        let mut coefs = [[0u8; MAX_ROWS]; N];
        shape.for_each_segment(data_cols, |start, end| {
            let mut ninputs = 0;
            for (i, col) in data_cols
                .iter()
                .map(|c| c.as_ref())
                .enumerate()
                .filter(|(_, c)| c.len() >= end)
            {
                inputs[ninputs] = InputColumn::new(&col[start..end]);
                for (slot, &row) in coefs[ninputs].iter_mut().zip(rows) {
                    *slot = shape.coef(row, i);
                }
                ninputs += 1;
            }
            let job = Combine {
                len: end - start,
                rows: rows.len(),
                row0_is_xor: rows[0] == 0,
                seeds: &[],
                inputs: &inputs[..ninputs],
                coefs: &coefs[..ninputs],
                transform: None,
                stream: self.streams(shape),
            };
            let mut outputs: [&mut [u8]; MAX_ROWS] = Default::default();
            let mut noutputs = 0;
            for (row, col) in parity_cols.iter_mut().enumerate() {
                if rows.contains(&row) {
                    outputs[noutputs] = &mut col[start..end];
                    noutputs += 1;
                }
            }
            kernels::combine(self.kernel, &job, &mut outputs[..noutputs]);
        });
    }

    /// Solves the erased data columns from the surviving parity, segment by segment (a
    /// short erased column is unknown only where it is present).
    fn rebuild_data(&self, shape: &Shape, cols: &mut [&mut [u8]], erasures: &Erasures) {
        let (parity_cols, data_cols) = cols.split_at_mut(shape.nparity);
        let parity_cols: &[&mut [u8]] = parity_cols;
        let mut end = shape.parity_len;
        while end > 0 {
            let start = Shape::segment_start(data_cols, end);
            let range = start..end;
            if shape.ndata <= NARROW_COLUMNS {
                self.rebuild_segment::<NARROW_COLUMNS>(
                    shape,
                    parity_cols,
                    data_cols,
                    erasures,
                    range,
                );
            } else {
                self.rebuild_segment::<MAX_COLUMNS>(shape, parity_cols, data_cols, erasures, range);
            }
            end = start;
        }
    }

    /// [`RaidzParity::rebuild_data`] for bytes `range`, where the present data columns are
    /// exactly those at least `range.end` long.
    fn rebuild_segment<const N: usize>(
        &self,
        shape: &Shape,
        parity_cols: &[&mut [u8]],
        data_cols: &mut [&mut [u8]],
        erasures: &Erasures,
        range: std::ops::Range<usize>,
    ) {
        let (start, end) = (range.start, range.end);
        let erased_here = |i: usize| erasures.data[..erasures.ndata].contains(&i);
        let mut unknowns = [0usize; MAX_PARITY];
        let mut nunknowns = 0;
        for (i, col) in data_cols.iter().enumerate() {
            if col.len() >= end && erased_here(i) {
                unknowns[nunknowns] = i;
                nunknowns += 1;
            }
        }
        if nunknowns == 0 {
            return;
        }
        let rows = &erasures.surviving[..nunknowns];
        let transform = solve_matrix(shape, rows, &unknowns[..nunknowns]);

        let mut seeds = [InputColumn::default(); MAX_ROWS];
        for (seed, &row) in seeds.iter_mut().zip(rows) {
            *seed = InputColumn::new(&parity_cols[row][start..end]);
        }
        let mut inputs = [InputColumn::default(); N];
        let mut coefs = [[0u8; MAX_ROWS]; N];
        let mut outputs: [&mut [u8]; MAX_ROWS] = Default::default();
        let mut noutputs = 0;
        let mut ninputs = 0;
        for (i, col) in data_cols
            .iter_mut()
            .enumerate()
            .filter(|(_, c)| c.len() >= end)
        {
            if erased_here(i) {
                outputs[noutputs] = &mut col[start..end];
                noutputs += 1;
            } else {
                inputs[ninputs] = InputColumn::new(&col[start..end]);
                for (slot, &row) in coefs[ninputs].iter_mut().zip(rows) {
                    *slot = shape.coef(row, i);
                }
                ninputs += 1;
            }
        }
        assert_eq!(noutputs, nunknowns);
        let job = Combine {
            len: end - start,
            rows: rows.len(),
            row0_is_xor: rows[0] == 0,
            seeds: &seeds[..rows.len()],
            inputs: &inputs[..ninputs],
            coefs: &coefs[..ninputs],
            transform: transform.as_ref(),
            stream: self.streams(shape),
        };
        kernels::combine(self.kernel, &job, &mut outputs[..noutputs]);
    }
}

/// `B⁻¹` for `B = A[rows][unknowns]`, or `None` when it is the identity (one data column
/// from P: plain XOR).
fn solve_matrix(
    shape: &Shape,
    rows: &[usize],
    unknowns: &[usize],
) -> Option<[[u8; MAX_ROWS]; MAX_ROWS]> {
    let size = unknowns.len();
    assert_eq!(rows.len(), size);
    let mut matrix = [[0u8; MAX_ROWS]; MAX_ROWS];
    for (matrix_row, &row) in matrix.iter_mut().zip(rows) {
        for (entry, &unknown) in matrix_row.iter_mut().zip(unknowns) {
            *entry = shape.coef(row, unknown);
        }
    }
    let inverse = gf::invert(&matrix, size)
        .expect("RAID-Z coefficient submatrices are invertible for up to 255 columns");
    let is_identity = (0..size).all(|r| (0..size).all(|c| inverse[r][c] == u8::from(r == c)));
    (!is_identity).then_some(inverse)
}

impl Default for RaidzParity {
    /// Same as [`default_parity`]'s choice.
    fn default() -> Self {
        default_parity().clone()
    }
}

/// Kernel chosen by the binary for the whole process (`None`: the best this CPU runs).
static CHOSEN_KERNEL: OnceLock<Kernel> = OnceLock::new();

/// Chooses the kernel of every engine made from now on, by name (`auto` = the best this
/// CPU runs). An error if the name is unknown or this CPU cannot run it; a second call
/// (or a call after the first engine was made) changes nothing.
pub fn set_default_kernel(name: &str) -> Result<Kernel, ParityError> {
    let kernel = match name {
        "" | "auto" => Kernel::best(),
        _ => Kernel::from_name(name).ok_or_else(|| ParityError::UnknownKernel(name.into()))?,
    };
    if !kernel.is_supported() {
        return Err(ParityError::KernelUnsupported(kernel));
    }
    let _ = CHOSEN_KERNEL.set(kernel);
    Ok(kernel)
}

/// Process-wide engine: [`RaidzParity::new`] (the chosen or the best kernel). Never panics.
pub fn default_parity() -> &'static RaidzParity {
    static DEFAULT: OnceLock<RaidzParity> = OnceLock::new();
    DEFAULT.get_or_init(|| {
        RaidzParity::new().unwrap_or(RaidzParity {
            kernel: Kernel::Scalar,
            stream_min_bytes: DEFAULT_STREAM_MIN_BYTES,
        })
    })
}
