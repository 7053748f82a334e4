//! What a simulated disk looks like to the event loop.
//!
//! ```text
//! virtual time (ms) ──────────────────────────────────────────────────────────►
//! host:    submit(0.0, read A)      submit(0.0, read B)        advance(t1) → [A done]
//! device:  ├─ overhead ─┼─ seek ─┼─ rotation ─┼─ transfer ─┤t1 ├─ B … ─┤t2
//!          next_event() == Some(t1) until A completes, then Some(t2)
//! ```
//!
//! The loop asks every device for `next_event()`, advances virtual time to the earliest and
//! calls `advance(now)` on the devices due; completed commands come back with their time.
//! Nothing here sleeps or reads a clock: the same inputs give the same outputs.

/// Kind of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    /// Completes when every acknowledged write is on the media.
    Flush,
}

/// One command submitted to a device (byte offset and length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cmd {
    pub id: u64,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
}

/// A completed command.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Done {
    pub id: u64,
    /// Virtual time of completion, ms.
    pub time: f64,
}

/// A simulated device driven by a discrete-event loop (times in ms of virtual time).
pub trait Device {
    /// Queues a command at time `now` (never before the last `advance`).
    fn submit(&mut self, now: f64, cmd: Cmd);
    /// Time of the device's next internal event, if any.
    fn next_event(&self) -> Option<f64>;
    /// Processes every event due at or before `now`, appending completions to `out`.
    fn advance(&mut self, now: f64, out: &mut Vec<Done>);
    /// Capacity in bytes.
    fn capacity(&self) -> u64;
    /// True for media without seek or rotation (SSD).
    fn nonrot(&self) -> bool;
    /// Commands accepted and not yet completed.
    fn outstanding(&self) -> usize;
}
