//! Timing, buffers and the memory-copy reference.

use std::time::Instant;

/// How long and how often to time one figure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub reps: usize,
    hot_rep_secs: f64,
    cold_rep_secs: f64,
}

/// Repetition count and minimum duration of one repetition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RepSpec {
    reps: usize,
    min_rep_secs: f64,
}

impl Timing {
    pub(crate) fn full(reps: usize) -> Timing {
        Timing {
            reps: reps.max(1),
            hot_rep_secs: 0.02,
            cold_rep_secs: 0.05,
        }
    }

    pub(crate) fn quick(reps: usize) -> Timing {
        Timing {
            reps: reps.max(1),
            hot_rep_secs: 0.004,
            cold_rep_secs: 0.01,
        }
    }

    pub(crate) fn hot(&self) -> RepSpec {
        RepSpec {
            reps: self.reps,
            min_rep_secs: self.hot_rep_secs,
        }
    }

    pub(crate) fn cold(&self) -> RepSpec {
        RepSpec {
            reps: self.reps,
            min_rep_secs: self.cold_rep_secs,
        }
    }
}

/// Median seconds per call of each of `count` competitors (`call(i)` runs competitor `i`
/// once). Repetitions are interleaved — one of each competitor per round — so that noise
/// from other processes on a shared machine hits all of them alike.
pub(crate) fn interleaved_medians(
    spec: &RepSpec,
    count: usize,
    mut call: impl FnMut(usize),
) -> Vec<f64> {
    let iterations: Vec<usize> = (0..count).map(|i| calibrate(spec, || call(i))).collect();
    let mut samples = vec![Vec::with_capacity(spec.reps); count];
    for _ in 0..spec.reps {
        for (i, &n) in iterations.iter().enumerate() {
            let start = Instant::now();
            for _ in 0..n {
                call(i);
            }
            samples[i].push(start.elapsed().as_secs_f64() / n as f64);
        }
    }
    samples.into_iter().map(median).collect()
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Iterations for one repetition of `spec.min_rep_secs` (after a warm-up call).
fn calibrate(spec: &RepSpec, mut call: impl FnMut()) -> usize {
    call();
    let mut iterations = 1usize;
    let per_call = loop {
        let start = Instant::now();
        for _ in 0..iterations {
            call();
        }
        let elapsed = start.elapsed().as_secs_f64();
        if elapsed >= spec.min_rep_secs / 4.0 {
            break elapsed / iterations as f64;
        }
        iterations *= 2;
    };
    ((spec.min_rep_secs / per_call).ceil() as usize).max(1)
}

/// Median seconds per call of a single `call`.
fn median_secs_per_call(spec: &RepSpec, mut call: impl FnMut()) -> f64 {
    interleaved_medians(spec, 1, |_| call())[0]
}

/// A zeroed byte buffer whose start is 4 KiB aligned (ISA-L's `pq_gen` needs 32-byte
/// alignment; page alignment also keeps columns from sharing cache lines).
pub(crate) struct AlignedBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

const ALIGN: usize = 4096;

impl AlignedBuffer {
    pub(crate) fn new(len: usize) -> AlignedBuffer {
        let storage = vec![0u8; len + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        assert!(start < ALIGN);
        AlignedBuffer {
            storage,
            start,
            len,
        }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Fills `bytes` with a cheap pseudo-random pattern (also faults every page in).
pub(crate) fn fill_pattern(bytes: &mut [u8], seed: u64) {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in bytes.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let word = state.to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// Copy bandwidth (bytes copied per second) of a 1 MiB buffer that stays in cache.
pub(crate) fn copy_hot_gbps(timing: &Timing) -> f64 {
    const LEN: usize = 1 << 20;
    let mut source = AlignedBuffer::new(LEN);
    let mut target = AlignedBuffer::new(LEN);
    fill_pattern(source.bytes_mut(), 3);
    let secs = median_secs_per_call(&timing.hot(), || {
        target.bytes_mut().copy_from_slice(source.bytes_mut());
        std::hint::black_box(target.bytes_mut());
    });
    LEN as f64 / secs / 1e9
}

/// Copy bandwidth from DRAM to DRAM: 4 MiB chunks from the first half of the ring to the
/// second, rotating over the whole ring.
pub(crate) fn copy_cold_gbps(ring: &mut [u8], timing: &Timing) -> f64 {
    const CHUNK: usize = 4 << 20;
    let (first, second) = ring.split_at_mut(ring.len() / 2);
    let chunks = first.len() / CHUNK;
    assert!(chunks > 0, "ring too small for the copy reference");
    let mut next = 0;
    let secs = median_secs_per_call(&timing.cold(), || {
        let range = next * CHUNK..(next + 1) * CHUNK;
        second[range.clone()].copy_from_slice(&first[range]);
        std::hint::black_box(&mut second[..1]);
        next = (next + 1) % chunks;
    });
    CHUNK as f64 / secs / 1e9
}
