//! A leaf wrapper that injects faults: failing reads or writes, silently corrupted reads,
//! or vanishing altogether. Tests use it to prove the layers above survive bad disks.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::leaf::Leaf;

/// Switches for the faults a `FaultLeaf` injects; flip them at any time.
#[derive(Debug, Default)]
pub struct FaultSwitches {
    /// Every read returns EIO.
    pub fail_reads: AtomicBool,
    /// Every write returns EIO.
    pub fail_writes: AtomicBool,
    /// Reads succeed but return flipped bits (silent corruption).
    pub corrupt_reads: AtomicBool,
    /// The device is gone: every I/O fails with ENXIO.
    pub vanished: AtomicBool,
    /// Reads that were failed or corrupted.
    pub injected: AtomicU64,
}

/// A leaf that passes I/O through to `inner` unless a fault is switched on.
#[derive(Debug)]
pub struct FaultLeaf {
    inner: Arc<dyn Leaf>,
    pub switches: Arc<FaultSwitches>,
}

impl FaultLeaf {
    pub fn new(inner: Arc<dyn Leaf>) -> FaultLeaf {
        FaultLeaf {
            inner,
            switches: Arc::new(FaultSwitches::default()),
        }
    }

    fn gone(&self) -> Option<io::Error> {
        if self.switches.vanished.load(Ordering::Relaxed) {
            self.switches.injected.fetch_add(1, Ordering::Relaxed);
            return Some(io::Error::from_raw_os_error(libc::ENXIO));
        }
        None
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl Leaf for FaultLeaf {
    fn path(&self) -> &str {
        self.inner.path()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if let Some(e) = self.gone() {
            return Err(e);
        }
        if self.switches.fail_reads.load(Ordering::Relaxed) {
            self.switches.injected.fetch_add(1, Ordering::Relaxed);
            return Err(eio());
        }
        self.inner.read_at(buf, offset)?;
        if self.switches.corrupt_reads.load(Ordering::Relaxed) {
            self.switches.injected.fetch_add(1, Ordering::Relaxed);
            for b in buf.iter_mut().step_by(97) {
                *b ^= 0x5a;
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(e) = self.gone() {
            return Err(e);
        }
        if self.switches.fail_writes.load(Ordering::Relaxed) {
            return Err(eio());
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        if let Some(e) = self.gone() {
            return Err(e);
        }
        self.inner.flush()
    }
}

/// Shared "power" of a set of `CrashLeaf`s: writes are numbered across all of them; from
/// write number `persist_limit` on nothing reaches the disk (writes still report success,
/// as a volatile cache would before a power cut). With `tear`, that one write is persisted
/// only in its first half.
#[derive(Debug)]
pub struct PowerCut {
    pub writes: AtomicU64,
    pub persist_limit: AtomicU64,
    pub tear: AtomicBool,
}

impl PowerCut {
    pub fn new(persist_limit: u64, tear: bool) -> Arc<PowerCut> {
        Arc::new(PowerCut {
            writes: AtomicU64::new(0),
            persist_limit: AtomicU64::new(persist_limit),
            tear: AtomicBool::new(tear),
        })
    }
}

/// A leaf that stops persisting writes after a given write number (crash tests).
#[derive(Debug)]
pub struct CrashLeaf {
    inner: Arc<dyn Leaf>,
    power: Arc<PowerCut>,
}

impl CrashLeaf {
    pub fn new(inner: Arc<dyn Leaf>, power: Arc<PowerCut>) -> CrashLeaf {
        CrashLeaf { inner, power }
    }
}

impl Leaf for CrashLeaf {
    fn path(&self) -> &str {
        self.inner.path()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let n = self.power.writes.fetch_add(1, Ordering::SeqCst);
        let limit = self.power.persist_limit.load(Ordering::SeqCst);
        if n < limit {
            return self.inner.write_at(buf, offset);
        }
        if n == limit && self.power.tear.load(Ordering::SeqCst) {
            let half = (buf.len() / 2) & !511;
            return self.inner.write_at(&buf[..half], offset);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}
