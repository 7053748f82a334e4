//! AVX2 without GFNI: multiply by a constant with two `vpshufb` nibble lookups
//! (`c·b = lo_c[b & 15] ⊕ hi_c[b >> 4]`), the tables broadcast to both 128-bit lanes.

use crate::gf::NIBBLE_TABLES;
use crate::Kernel;
use std::arch::x86_64::*;

const WIDTH: usize = 32;
/// Vectors per column per block: plain XOR, and jobs with multiplications.
const UNROLL_XOR: usize = 8;
const UNROLL_MUL: usize = 2;
type Vector = __m256i;
/// (low-nibble table, high-nibble table).
type Coef = (__m256i, __m256i);

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load(ptr: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes at `ptr`; unaligned load.
    unsafe { _mm256_loadu_si256(ptr.cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store(ptr: *mut u8, value: __m256i) {
    // SAFETY: the caller guarantees 32 writable bytes at `ptr`; unaligned store.
    unsafe { _mm256_storeu_si256(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn stream(ptr: *mut u8, value: __m256i) {
    // SAFETY: the caller guarantees 32 writable bytes at `ptr`, aligned to 32.
    unsafe { _mm256_stream_si256(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn zero() -> __m256i {
    _mm256_setzero_si256()
}

#[inline]
#[target_feature(enable = "avx2")]
fn xor(a: __m256i, b: __m256i) -> __m256i {
    _mm256_xor_si256(a, b)
}

#[inline]
#[target_feature(enable = "avx2")]
fn prepare(coef: u8) -> Coef {
    let table = &NIBBLE_TABLES[coef as usize];
    // SAFETY: `table` is 32 bytes, so both 16-byte loads (offsets 0 and 16) are in bounds.
    let (lo, hi) = unsafe {
        (
            _mm_loadu_si128(table.as_ptr().cast()),
            _mm_loadu_si128(table[16..].as_ptr().cast()),
        )
    };
    (
        _mm256_broadcastsi128_si256(lo),
        _mm256_broadcastsi128_si256(hi),
    )
}

#[inline]
#[target_feature(enable = "avx2")]
fn mul((lo, hi): Coef, data: __m256i) -> __m256i {
    let nibble_mask = _mm256_set1_epi8(0x0f);
    let low = _mm256_and_si256(data, nibble_mask);
    let high = _mm256_and_si256(_mm256_srli_epi64::<4>(data), nibble_mask);
    _mm256_xor_si256(_mm256_shuffle_epi8(lo, low), _mm256_shuffle_epi8(hi, high))
}

simd_kernel!("avx2", Kernel::Avx2);
