//! x86-64 SIMD kernels. Each submodule supplies the same small set of vector primitives
//! (`load`, `store`, `xor`, `zero`, `prepare`, `mul`) compiled for its instruction set, and
//! [`simd_kernel!`] stamps out the shared block loop on top of them with the module's
//! `#[target_feature]` set (a generic function cannot carry per-instantiation features).

/// Generates `combine(job, outputs)` for a kernel module. The module must define
/// `WIDTH` (bytes per vector), `Vector`, `Coef` and the primitives listed above (plus
/// `stream`, a non-temporal store to a `WIDTH`-aligned address), all enabled
/// for `$features`.
macro_rules! simd_kernel {
    ($features:literal, $kernel:expr) => {
        use std::arch::x86_64::_mm_sfence;
        use $crate::kernels::{scalar, Combine, MAX_ROWS};

        /// Runs `job`: SIMD over whole vectors, the scalar kernel for the tail.
        pub(crate) fn combine(job: &Combine, outputs: &mut [&mut [u8]]) {
            assert!(
                $kernel.is_supported(),
                "kernel {} used on a CPU without it",
                $kernel.name()
            );
            // SAFETY: the CPU supports every feature in `$features` (asserted just above), and
            // `kernels::combine` asserted that every column holds at least `job.len` bytes,
            // which bounds every access the block loop makes.
            let done = unsafe { dispatch(job, outputs) };
            scalar::combine_from(job, outputs, done);
        }

        /// Picks the specialisation for the number of rows and the P flag; returns how many
        /// bytes were processed (a multiple of `WIDTH`).
        #[target_feature(enable = $features)]
        unsafe fn dispatch(job: &Combine, outputs: &mut [&mut [u8]]) -> usize {
            // Non-temporal stores need every output aligned to the vector width.
            let aligned = outputs
                .iter()
                .all(|o| (o.as_ptr() as usize).is_multiple_of(WIDTH));
            if job.stream && aligned {
                let done = dispatch_rows::<true>(job, outputs);
                // Make the streaming stores globally visible before the caller uses the data.
                _mm_sfence();
                done
            } else {
                dispatch_rows::<false>(job, outputs)
            }
        }

        #[target_feature(enable = $features)]
        unsafe fn dispatch_rows<const STREAM: bool>(
            job: &Combine,
            outputs: &mut [&mut [u8]],
        ) -> usize {
            match (job.rows, job.row0_is_xor) {
                // Plain XOR has the fewest instructions per load: unroll it further.
                (1, true) => run::<1, true, 4, STREAM>(job, outputs),
                (1, false) => run::<1, false, 2, STREAM>(job, outputs),
                (2, true) => run::<2, true, 2, STREAM>(job, outputs),
                (2, false) => run::<2, false, 2, STREAM>(job, outputs),
                (3, true) => run::<3, true, 2, STREAM>(job, outputs),
                _ => run::<3, false, 2, STREAM>(job, outputs),
            }
        }

        #[target_feature(enable = $features)]
        unsafe fn run<
            const ROWS: usize,
            const ROW0_XOR: bool,
            const UNROLL: usize,
            const STREAM: bool,
        >(
            job: &Combine,
            outputs: &mut [&mut [u8]],
        ) -> usize {
            let mut transform = [[prepare(0); MAX_ROWS]; MAX_ROWS];
            if let Some(t) = job.transform {
                for (prepared_row, row) in transform.iter_mut().zip(t) {
                    for (prepared, &coef) in prepared_row.iter_mut().zip(row) {
                        *prepared = prepare(coef);
                    }
                }
            }
            let transform = job.transform.map(|_| &transform);
            let mut offset = 0;
            while offset + UNROLL * WIDTH <= job.len {
                block::<ROWS, ROW0_XOR, UNROLL, STREAM>(job, outputs, transform, offset);
                offset += UNROLL * WIDTH;
            }
            while offset + WIDTH <= job.len {
                block::<ROWS, ROW0_XOR, 1, STREAM>(job, outputs, transform, offset);
                offset += WIDTH;
            }
            offset
        }

        /// Stores one vector, non-temporally when `STREAM` (then `ptr` is `WIDTH`-aligned).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn put<const STREAM: bool>(ptr: *mut u8, value: Vector) {
            if STREAM {
                stream(ptr, value)
            } else {
                store(ptr, value)
            }
        }

        /// Processes `UNROLL` vectors at `offset` of every column: loads each input once,
        /// keeps `ROWS × UNROLL` accumulators in registers, stores each output once.
        /// SAFETY (caller): `offset + UNROLL·WIDTH ≤ job.len`, and every column holds `job.len`
        /// bytes.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn block<
            const ROWS: usize,
            const ROW0_XOR: bool,
            const UNROLL: usize,
            const STREAM: bool,
        >(
            job: &Combine,
            outputs: &mut [&mut [u8]],
            transform: Option<&[[Coef; MAX_ROWS]; MAX_ROWS]>,
            offset: usize,
        ) {
            let mut acc = [[zero(); UNROLL]; ROWS];
            if !job.seeds.is_empty() {
                for (acc_row, seed) in acc.iter_mut().zip(job.seeds) {
                    for (u, a) in acc_row.iter_mut().enumerate() {
                        *a = load(seed.as_ptr().add(offset + u * WIDTH));
                    }
                }
            }
            for (input, coefs) in job.inputs.iter().zip(job.coefs) {
                let mut data = [zero(); UNROLL];
                for (u, d) in data.iter_mut().enumerate() {
                    *d = load(input.as_ptr().add(offset + u * WIDTH));
                }
                for (row, acc_row) in acc.iter_mut().enumerate() {
                    if ROW0_XOR && row == 0 {
                        for (a, &d) in acc_row.iter_mut().zip(&data) {
                            *a = xor(*a, d);
                        }
                    } else {
                        let coef = prepare(coefs[row]);
                        for (a, &d) in acc_row.iter_mut().zip(&data) {
                            *a = xor(*a, mul(coef, d));
                        }
                    }
                }
            }
            match transform {
                None => {
                    for (output, acc_row) in outputs.iter_mut().zip(&acc) {
                        for (u, &a) in acc_row.iter().enumerate() {
                            put::<STREAM>(output.as_mut_ptr().add(offset + u * WIDTH), a);
                        }
                    }
                }
                Some(transform) => {
                    for (output, t_row) in outputs.iter_mut().zip(transform) {
                        for u in 0..UNROLL {
                            let mut value = zero();
                            for (acc_row, &coef) in acc.iter().zip(t_row) {
                                value = xor(value, mul(coef, acc_row[u]));
                            }
                            put::<STREAM>(output.as_mut_ptr().add(offset + u * WIDTH), value);
                        }
                    }
                }
            }
        }
    };
}

pub(crate) mod avx2;
pub(crate) mod avx2_gfni;
pub(crate) mod avx512_gfni;
pub(crate) mod ssse3;
