//! Sequential read-ahead for pools on rotating disks (ZFS's zfetch, simplified).
//!
//! ```text
//!  reads of one object:   [0, 1M)   [1M, 2M)   [2M, 3M)   [3M, 4M)  …
//!  stream                 new       continues  continues  continues   (starts at `next`)
//!  fetched ahead up to               2M+1M=3M   3M (wait)  4M+2M=6M   (`ahead`)
//!  window                            1 MiB      1 MiB      2 MiB … up to `max` (8 MiB)
//! ```
//! A read that continues a stream and finds less than half a window fetched beyond its
//! end asks for the blocks from `ahead` to its end plus a window; the store reads them
//! into the block cache in one batch after the read's own blocks (one request per disk
//! for the whole window, where a synchronous reader would otherwise wait a rotation per
//! call on every disk). The window doubles at each refill. Only pools with a rotating leaf
//! use it (the store passes `max` 0 otherwise). Best effort: a block that fails to read is
//! left to the read that needs it (which reconstructs and repairs); dirty blocks and holes
//! are skipped.

use std::collections::HashMap;
use std::sync::Mutex;

/// Objects followed at once; past this the table starts afresh.
const MAX_STREAMS: usize = 256;
/// The first window of a stream.
const FIRST_WINDOW: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stream {
    /// Where a read continuing the stream starts.
    next: u64,
    /// Bytes fetched ahead up to here.
    ahead: u64,
    window: u64,
}

/// The streams of a store.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    /// Largest window in bytes; 0 turns read-ahead off.
    max: u64,
    streams: Mutex<HashMap<u64, Stream>>,
}

impl ReadAhead {
    pub(crate) fn new(max: u64) -> ReadAhead {
        ReadAhead {
            max,
            streams: Mutex::new(HashMap::new()),
        }
    }

    /// Records a read of `len` bytes at `offset` of `object` (`size` bytes long); the
    /// byte range to fetch ahead, if any.
    pub(crate) fn note_read(
        &self,
        object: u64,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Option<(u64, u64)> {
        if self.max == 0 || len == 0 {
            return None;
        }
        let end = offset.saturating_add(len);
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut s) = streams.get(&object).copied().filter(|s| s.next == offset) else {
            if streams.len() >= MAX_STREAMS && !streams.contains_key(&object) {
                streams.clear();
            }
            let fresh = Stream {
                next: end,
                ahead: end,
                window: FIRST_WINDOW.min(self.max),
            };
            streams.insert(object, fresh);
            return None;
        };
        s.next = end;
        s.ahead = s.ahead.max(end);
        let mut fetch = None;
        if s.ahead - end < s.window / 2 && s.ahead < size {
            let to = end.saturating_add(s.window).min(size);
            fetch = (to > s.ahead).then_some((s.ahead, to));
            s.ahead = to;
            s.window = s.window.saturating_mul(2).min(self.max);
        }
        streams.insert(object, s);
        fetch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_stream_fetches_ahead_in_growing_windows_up_to_the_max() {
        let ra = ReadAhead::new(4 * MIB);
        let size = 100 * MIB;
        assert_eq!(ra.note_read(7, 0, MIB, size), None, "one read is no stream");
        assert_eq!(ra.note_read(7, MIB, MIB, size), Some((2 * MIB, 3 * MIB)));
        assert_eq!(
            ra.note_read(7, 2 * MIB, MIB, size),
            Some((3 * MIB, 5 * MIB))
        );
        // 1 MiB ahead of 4M is less than half the 4 MiB window: refilled to 4M + 4M.
        assert_eq!(
            ra.note_read(7, 3 * MIB, MIB, size),
            Some((5 * MIB, 8 * MIB))
        );
        assert_eq!(ra.note_read(7, 4 * MIB, MIB, size), None, "3 MiB ahead");
        assert_eq!(ra.note_read(7, 5 * MIB, MIB, size), None, "2 MiB ahead");
        let refill = ra.note_read(7, 6 * MIB, MIB, size);
        assert_eq!(
            refill,
            Some((8 * MIB, 11 * MIB)),
            "the window stays at the max"
        );
        assert_eq!(ra.note_read(7, 7 * MIB, MIB, size), None);
    }

    #[test]
    fn a_jump_starts_a_new_stream_and_nothing_is_fetched_past_the_end() {
        let ra = ReadAhead::new(8 * MIB);
        ra.note_read(1, 0, MIB, 10 * MIB);
        assert_eq!(ra.note_read(1, 5 * MIB, MIB, 10 * MIB), None, "a jump");
        assert_eq!(
            ra.note_read(1, 6 * MIB, MIB, 10 * MIB),
            Some((7 * MIB, 8 * MIB))
        );
        assert_eq!(ra.note_read(1, 7 * MIB, MIB, 8 * MIB), None, "the end");
        let off = ReadAhead::new(0);
        off.note_read(2, 0, MIB, 10 * MIB);
        assert_eq!(off.note_read(2, MIB, MIB, 10 * MIB), None, "max 0 is off");
    }
}
