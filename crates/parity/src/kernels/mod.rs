//! Kernels: one operation, a linear combination of columns over GF(2^8), in several
//! instruction sets.
//!
//! Every parity operation in this crate is expressed as a [`Combine`] job over `len` bytes:
//!
//! ```text
//!   acc[j]    = seeds[j]  (or 0 when there are no seeds)            j < rows ≤ 3
//!   acc[j]   ^= coefs[i][j] · inputs[i]          for every input column i
//!   output[k] = Σ_j transform[k][j] · acc[j]     (or output[j] = acc[j] without transform)
//! ```
//!
//! * generate: inputs = data columns, rows = parity rows, no seeds, no transform;
//! * reconstruct: seeds = surviving parity columns, inputs = surviving data columns, so the
//!   accumulators are syndromes; `transform` is the inverse of the erased-column submatrix.
//!
//! A kernel walks the columns once per block of `2 × vector width` bytes: each input byte is
//! loaded once, all `rows` accumulators stay in registers, and each output is stored once.
//! Row 0 may be flagged as the P row (all coefficients 1), which is plain XOR.
//!
//! Why not Horner (`Q = Q·2 ⊕ D_i`)? With GFNI a multiply by any constant is one affine
//! instruction, so "multiply the accumulator by 2" and "multiply the input by 2^(n−1−i)" cost
//! the same; the direct form keeps the dependency chains one XOR long (better overlap) and
//! skips zero-padded short columns by simply leaving them out. The scalar reference in
//! [`crate::reference`] uses Horner, so the two formulations check each other.

use crate::Kernel;
use std::marker::PhantomData;

pub(crate) mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Largest number of accumulator rows (P, Q, R).
pub(crate) const MAX_ROWS: usize = 3;

/// A column a kernel reads: a `&'a [u8]` kept as raw parts so that the empty value is
/// all-zero bytes. The driver's fixed arrays of up to 255 of them are then cleared with one
/// `memset`; an array of `&[u8]` (or `Option<&[u8]>`) needs 255 separate stores, which was
/// the largest cost of a small call.
#[derive(Clone, Copy)]
pub(crate) struct InputColumn<'a> {
    ptr: *const u8,
    len: usize,
    _borrow: PhantomData<&'a [u8]>,
}

impl Default for InputColumn<'_> {
    fn default() -> Self {
        InputColumn {
            ptr: std::ptr::null(),
            len: 0,
            _borrow: PhantomData,
        }
    }
}

impl<'a> InputColumn<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        InputColumn {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
            _borrow: PhantomData,
        }
    }

    pub(crate) fn bytes(self) -> &'a [u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: a non-null `ptr` and its `len` were taken from a `&'a [u8]` in `new`, and
        // `_borrow` keeps that shared borrow alive for `'a`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// One kernel pass: see the module comment for the exact formula.
pub(crate) struct Combine<'a> {
    /// Bytes to process; every seed, input and output holds at least this many.
    pub len: usize,
    /// Number of accumulators, 1..=3.
    pub rows: usize,
    /// Row 0 is the P row: every coefficient in it is 1, so it is computed with XOR only.
    pub row0_is_xor: bool,
    /// Empty, or exactly `rows` columns the accumulators start from.
    pub seeds: &'a [InputColumn<'a>],
    /// Input columns.
    pub inputs: &'a [InputColumn<'a>],
    /// `coefs[i][j]`: coefficient of input `i` in accumulator row `j` (entries ≥ rows unused).
    pub coefs: &'a [[u8; MAX_ROWS]],
    /// `Some(t)`: output `k` is `Σ_j t[k][j]·acc[j]`; `None`: output `j` is `acc[j]`.
    pub transform: Option<&'a [[u8; MAX_ROWS]; MAX_ROWS]>,
    /// Prefer non-temporal stores for the outputs (large, out-of-cache stripes); a hint,
    /// used when the outputs are aligned for it.
    pub stream: bool,
}

impl Combine<'_> {
    /// States the invariants every kernel relies on (this is what makes the raw-pointer
    /// loops in the SIMD kernels in bounds).
    fn assert_valid(&self, outputs: &[&mut [u8]]) {
        assert!((1..=MAX_ROWS).contains(&self.rows));
        assert!(self.seeds.is_empty() || self.seeds.len() == self.rows);
        assert_eq!(self.inputs.len(), self.coefs.len());
        assert!(self.seeds.iter().all(|s| s.bytes().len() >= self.len));
        assert!(self.inputs.iter().all(|s| s.bytes().len() >= self.len));
        assert!(outputs.iter().all(|s| s.len() >= self.len));
        let expected_outputs = if self.transform.is_some() {
            1..=MAX_ROWS
        } else {
            self.rows..=self.rows
        };
        assert!(expected_outputs.contains(&outputs.len()));
    }
}

/// Runs `job` with `kernel`, writing `outputs`. The kernel must be supported by this CPU
/// (checked when a [`crate::RaidzParity`] is built).
pub(crate) fn combine(kernel: Kernel, job: &Combine, outputs: &mut [&mut [u8]]) {
    job.assert_valid(outputs);
    if job.len == 0 {
        return;
    }
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Ssse3 => x86::ssse3::combine(job, outputs),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => x86::avx2::combine(job, outputs),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2Gfni => x86::avx2_gfni::combine(job, outputs),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Gfni => x86::avx512_gfni::combine(job, outputs),
        _ => scalar::combine_from(job, outputs, 0),
    }
}
