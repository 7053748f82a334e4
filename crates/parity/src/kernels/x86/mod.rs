//! x86-64 SIMD kernels. Each submodule supplies the same small set of vector primitives
//! (`load`, `store`, `xor`, `zero`, `prepare`, `mul`) compiled for its instruction set, and
//! [`simd_kernel!`] stamps out the shared block loop on top of them with the module's
//! `#[target_feature]` set (a generic function cannot carry per-instantiation features).

/// Generates `combine(job, outputs)` for a kernel module. The module must define
/// `WIDTH` (bytes per vector), `UNROLL_XOR` / `UNROLL_MUL` (vectors per column per block for
/// plain XOR and for jobs with multiplications), `Vector`, `Coef` and the primitives listed above (plus
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
                // Plain XOR has the fewest instructions per load: it is unrolled further.
                (1, true) => run::<1, true, UNROLL_XOR, STREAM>(job, outputs),
                (1, false) => run::<1, false, UNROLL_MUL, STREAM>(job, outputs),
                (2, true) => run::<2, true, UNROLL_MUL, STREAM>(job, outputs),
                (2, false) => run::<2, false, UNROLL_MUL, STREAM>(job, outputs),
                (3, true) => run::<3, true, UNROLL_MUL, STREAM>(job, outputs),
                _ => run::<3, false, UNROLL_MUL, STREAM>(job, outputs),
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
            // The transform stays as coefficient bytes, prepared where used: prepared once
            // up front, its up to 9 (GFNI) or 18 (pshufb) vectors would stay live across the
            // loop and push the accumulators out of the 16 AVX2 registers.
            let transform = job.transform;
            let columns = Columns::new(job, outputs);
            let mut offset = 0;
            while offset + UNROLL * WIDTH <= job.len {
                block::<ROWS, ROW0_XOR, UNROLL, STREAM>(job, &columns, transform, offset);
                offset += UNROLL * WIDTH;
            }
            while offset + WIDTH <= job.len {
                block::<ROWS, ROW0_XOR, 1, STREAM>(job, &columns, transform, offset);
                offset += WIDTH;
            }
            offset
        }

        /// Raw start pointers of the seeds and outputs, taken once per call.
        struct Columns {
            seeds: Option<[*const u8; MAX_ROWS]>,
            outputs: [*mut u8; MAX_ROWS],
            noutputs: usize,
        }

        impl Columns {
            fn new(job: &Combine, outputs: &mut [&mut [u8]]) -> Columns {
                let mut seeds = [std::ptr::null(); MAX_ROWS];
                for (ptr, seed) in seeds.iter_mut().zip(job.seeds) {
                    *ptr = seed.bytes().as_ptr();
                }
                let mut output_ptrs = [std::ptr::null_mut(); MAX_ROWS];
                for (ptr, output) in output_ptrs.iter_mut().zip(outputs.iter_mut()) {
                    *ptr = output.as_mut_ptr();
                }
                Columns {
                    seeds: (!job.seeds.is_empty()).then_some(seeds),
                    outputs: output_ptrs,
                    noutputs: outputs.len(),
                }
            }
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
        #[allow(clippy::needless_range_loop)]
        unsafe fn block<
            const ROWS: usize,
            const ROW0_XOR: bool,
            const UNROLL: usize,
            const STREAM: bool,
        >(
            job: &Combine,
            columns: &Columns,
            transform: Option<&[[u8; MAX_ROWS]; MAX_ROWS]>,
            offset: usize,
        ) {
            // Index loops with constant bounds (ROWS, UNROLL) throughout: they unroll fully,
            // so LLVM keeps every accumulator in a register instead of a stack array.
            let mut acc = [[zero(); UNROLL]; ROWS];
            if let Some(seeds) = columns.seeds {
                for j in 0..ROWS {
                    for u in 0..UNROLL {
                        acc[j][u] = load(seeds[j].add(offset + u * WIDTH));
                    }
                }
            }
            for (input, coefs) in job.inputs.iter().zip(job.coefs) {
                let mut data = [zero(); UNROLL];
                for u in 0..UNROLL {
                    data[u] = load(input.bytes().as_ptr().add(offset + u * WIDTH));
                }
                for j in 0..ROWS {
                    if ROW0_XOR && j == 0 {
                        for u in 0..UNROLL {
                            acc[0][u] = xor(acc[0][u], data[u]);
                        }
                    } else {
                        let coef = prepare(coefs[j]);
                        for u in 0..UNROLL {
                            acc[j][u] = xor(acc[j][u], mul(coef, data[u]));
                        }
                    }
                }
            }
            match transform {
                None => {
                    for j in 0..ROWS {
                        for u in 0..UNROLL {
                            put::<STREAM>(columns.outputs[j].add(offset + u * WIDTH), acc[j][u]);
                        }
                    }
                }
                Some(transform) => {
                    for k in 0..columns.noutputs {
                        for u in 0..UNROLL {
                            let mut value = zero();
                            for j in 0..ROWS {
                                let coef = prepare(transform[k][j]);
                                value = xor(value, mul(coef, acc[j][u]));
                            }
                            put::<STREAM>(columns.outputs[k].add(offset + u * WIDTH), value);
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
