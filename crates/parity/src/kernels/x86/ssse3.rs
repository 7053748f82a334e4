//! SSSE3: 16-byte vectors, multiply by a constant with two `pshufb` nibble lookups.

use crate::gf::NIBBLE_TABLES;
use crate::Kernel;
use std::arch::x86_64::*;

const WIDTH: usize = 16;
/// Vectors per column per block: plain XOR, and jobs with multiplications.
const UNROLL_XOR: usize = 4;
const UNROLL_MUL: usize = 2;
type Vector = __m128i;
/// (low-nibble table, high-nibble table).
type Coef = (__m128i, __m128i);

#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn load(ptr: *const u8) -> __m128i {
    // SAFETY: the caller guarantees 16 readable bytes at `ptr`; unaligned load.
    unsafe { _mm_loadu_si128(ptr.cast()) }
}

#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn store(ptr: *mut u8, value: __m128i) {
    // SAFETY: the caller guarantees 16 writable bytes at `ptr`; unaligned store.
    unsafe { _mm_storeu_si128(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn stream(ptr: *mut u8, value: __m128i) {
    // SAFETY: the caller guarantees 16 writable bytes at `ptr`, aligned to 16.
    unsafe { _mm_stream_si128(ptr.cast(), value) }
}

#[inline]
#[target_feature(enable = "ssse3")]
fn zero() -> __m128i {
    _mm_setzero_si128()
}

#[inline]
#[target_feature(enable = "ssse3")]
fn xor(a: __m128i, b: __m128i) -> __m128i {
    _mm_xor_si128(a, b)
}

#[inline]
#[target_feature(enable = "ssse3")]
fn prepare(coef: u8) -> Coef {
    let table = &NIBBLE_TABLES[coef as usize];
    // SAFETY: `table` is 32 bytes, so both 16-byte loads (offsets 0 and 16) are in bounds.
    unsafe {
        (
            _mm_loadu_si128(table.as_ptr().cast()),
            _mm_loadu_si128(table[16..].as_ptr().cast()),
        )
    }
}

#[inline]
#[target_feature(enable = "ssse3")]
fn mul((lo, hi): Coef, data: __m128i) -> __m128i {
    let nibble_mask = _mm_set1_epi8(0x0f);
    let low = _mm_and_si128(data, nibble_mask);
    let high = _mm_and_si128(_mm_srli_epi64::<4>(data), nibble_mask);
    _mm_xor_si128(_mm_shuffle_epi8(lo, low), _mm_shuffle_epi8(hi, high))
}

simd_kernel!("ssse3", Kernel::Ssse3);
