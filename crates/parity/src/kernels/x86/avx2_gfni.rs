//! AVX2 + GFNI (VEX-encoded `vgf2p8affineqb` on 32-byte vectors).

use crate::gf::AFFINE_MATRICES;
use crate::Kernel;
use std::arch::x86_64::*;

const WIDTH: usize = 32;
/// Vectors per column per block: plain XOR, and jobs with multiplications.
const UNROLL_XOR: usize = 8;
const UNROLL_MUL: usize = 2;
type Vector = __m256i;
type Coef = __m256i;

#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn load(ptr: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes at `ptr`; unaligned load.
    unsafe { _mm256_loadu_si256(ptr.cast()) }
}

#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn store(ptr: *mut u8, value: __m256i) {
    // SAFETY: the caller guarantees 32 writable bytes at `ptr`; unaligned store.
    unsafe { _mm256_storeu_si256(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn stream(ptr: *mut u8, value: __m256i) {
    // SAFETY: the caller guarantees 32 writable bytes at `ptr`, aligned to 32.
    unsafe { _mm256_stream_si256(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "avx2,gfni")]
fn zero() -> __m256i {
    _mm256_setzero_si256()
}

#[inline]
#[target_feature(enable = "avx2,gfni")]
fn xor(a: __m256i, b: __m256i) -> __m256i {
    _mm256_xor_si256(a, b)
}

#[inline]
#[target_feature(enable = "avx2,gfni")]
fn prepare(coef: u8) -> Coef {
    _mm256_set1_epi64x(AFFINE_MATRICES[coef as usize] as i64)
}

#[inline]
#[target_feature(enable = "avx2,gfni")]
fn mul(matrix: Coef, data: __m256i) -> __m256i {
    _mm256_gf2p8affine_epi64_epi8::<0>(data, matrix)
}

simd_kernel!("avx2,gfni", Kernel::Avx2Gfni);
