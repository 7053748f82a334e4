//! AVX-512 + GFNI: 64-byte vectors; multiply by a constant is one `vgf2p8affineqb` with the
//! coefficient's 8×8 bit matrix (polynomial 0x11d; `vgf2p8mulb` is 0x11b-only, not used).

use crate::gf::AFFINE_MATRICES;
use crate::Kernel;
use std::arch::x86_64::*;

const WIDTH: usize = 64;
/// Vectors per column per block: plain XOR, and jobs with multiplications.
const UNROLL_XOR: usize = 4;
const UNROLL_MUL: usize = 2;
type Vector = __m512i;
type Coef = __m512i;

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn load(ptr: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes at `ptr`; unaligned load.
    unsafe { _mm512_loadu_si512(ptr.cast()) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn store(ptr: *mut u8, value: __m512i) {
    // SAFETY: the caller guarantees 64 writable bytes at `ptr`; unaligned store.
    unsafe { _mm512_storeu_si512(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn stream(ptr: *mut u8, value: __m512i) {
    // SAFETY: the caller guarantees 64 writable bytes at `ptr`, aligned to 64.
    unsafe { _mm512_stream_si512(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
fn zero() -> __m512i {
    _mm512_setzero_si512()
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
fn xor(a: __m512i, b: __m512i) -> __m512i {
    _mm512_xor_si512(a, b)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
fn prepare(coef: u8) -> Coef {
    _mm512_set1_epi64(AFFINE_MATRICES[coef as usize] as i64)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
fn mul(matrix: Coef, data: __m512i) -> __m512i {
    _mm512_gf2p8affine_epi64_epi8::<0>(data, matrix)
}

simd_kernel!("avx512f,avx512bw,gfni", Kernel::Avx512Gfni);
