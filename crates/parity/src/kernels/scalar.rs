//! Portable kernel: byte-wise, with the 64 KiB multiplication table. Also finishes the
//! tails (lengths that are not a multiple of the vector block) for the SIMD kernels.

use super::{Combine, MAX_ROWS};
use crate::gf::MUL_TABLE;

/// Bytes processed per chunk; accumulators for a chunk live on the stack.
const CHUNK: usize = 256;

/// Runs `job` over bytes `start..job.len`.
pub(crate) fn combine_from(job: &Combine, outputs: &mut [&mut [u8]], start: usize) {
    let mut chunk_start = start;
    while chunk_start < job.len {
        let chunk_end = (chunk_start + CHUNK).min(job.len);
        combine_chunk(job, outputs, chunk_start..chunk_end);
        chunk_start = chunk_end;
    }
}

fn combine_chunk(job: &Combine, outputs: &mut [&mut [u8]], range: std::ops::Range<usize>) {
    let width = range.len();
    let mut acc = [[0u8; CHUNK]; MAX_ROWS];
    for (row, seed) in acc.iter_mut().zip(job.seeds) {
        row[..width].copy_from_slice(&seed.bytes()[range.clone()]);
    }
    for (input, coefs) in job.inputs.iter().zip(job.coefs) {
        let data = &input.bytes()[range.clone()];
        for (row, acc_row) in acc.iter_mut().enumerate().take(job.rows) {
            if row == 0 && job.row0_is_xor {
                acc_row[..width]
                    .iter_mut()
                    .zip(data)
                    .for_each(|(a, d)| *a ^= d);
            } else {
                let table = &MUL_TABLE[coefs[row] as usize];
                acc_row[..width]
                    .iter_mut()
                    .zip(data)
                    .for_each(|(a, &d)| *a ^= table[d as usize]);
            }
        }
    }
    match job.transform {
        None => {
            for (output, acc_row) in outputs.iter_mut().zip(&acc) {
                output[range.clone()].copy_from_slice(&acc_row[..width]);
            }
        }
        Some(transform) => {
            for (output, t_row) in outputs.iter_mut().zip(transform) {
                let out = &mut output[range.clone()];
                out.fill(0);
                for (acc_row, &coef) in acc.iter().zip(t_row).take(job.rows) {
                    let table = &MUL_TABLE[coef as usize];
                    out.iter_mut()
                        .zip(&acc_row[..width])
                        .for_each(|(o, &a)| *o ^= table[a as usize]);
                }
            }
        }
    }
}
