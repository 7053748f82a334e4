//! What the server exports: the `BlockExport` backend trait (cairn volumes implement it),
//! the `ExportSource` that names them, and two test backends (`MemoryExport`, `FileExport`).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use crate::wire::{STATE_HOLE, STATE_ZERO};

/// A block device the server can export (a cairn volume, or a test backend).
pub trait BlockExport: Send + Sync {
    fn size(&self) -> u64;
    fn read_only(&self) -> bool;
    /// Preferred block size (the volume's volblocksize); minimum is always 512.
    fn preferred_block_size(&self) -> u32;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Returns once every write completed before the call is durable (a pool txg sync).
    fn flush(&self) -> io::Result<()>;
    fn trim(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Zero a range; `may_punch` = the client allows a hole (no NBD_CMD_FLAG_NO_HOLE).
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> io::Result<()>;
    /// Whether write_zeroes is fast (for NBD_CMD_FLAG_FAST_ZERO).
    fn fast_zero(&self) -> bool {
        false
    }
    /// Extents covering [offset, offset+len) for base:allocation: (length, NBD_STATE_HOLE/NBD_STATE_ZERO flags).
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>>;
}

/// The set of exports a server offers.
pub trait ExportSource: Send + Sync {
    /// Export names (volume names).
    fn list(&self) -> Vec<String>;
    fn open(&self, name: &str) -> Option<Arc<dyn BlockExport>>;
}

/// A fixed table of named exports.
#[derive(Default)]
pub struct ExportTable {
    exports: RwLock<BTreeMap<String, Arc<dyn BlockExport>>>,
}

impl ExportTable {
    pub fn new() -> ExportTable {
        ExportTable::default()
    }
    /// Adds (or replaces) an export.
    pub fn insert(&self, name: &str, export: Arc<dyn BlockExport>) {
        if let Ok(mut map) = self.exports.write() {
            map.insert(name.to_string(), export);
        }
    }
    /// Builder form of `insert`.
    pub fn with(self, name: &str, export: Arc<dyn BlockExport>) -> ExportTable {
        self.insert(name, export);
        self
    }
}

impl ExportSource for ExportTable {
    fn list(&self) -> Vec<String> {
        self.exports
            .read()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }
    fn open(&self, name: &str) -> Option<Arc<dyn BlockExport>> {
        self.exports.read().ok()?.get(name).cloned()
    }
}

/// Error for a range outside the export.
fn out_of_range() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

fn check_range(offset: u64, len: u64, size: u64) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(out_of_range()),
    }
}

/// Merges adjacent extents with the same flags and clamps lengths to u32.
fn push_extent(out: &mut Vec<(u32, u32)>, mut len: u64, flags: u32) {
    if let Some(last) = out.last_mut() {
        if last.1 == flags {
            let room = u64::from(u32::MAX - last.0);
            let add = len.min(room);
            last.0 += add as u32;
            len -= add;
        }
    }
    while len > 0 {
        let piece = len.min(u64::from(u32::MAX) & !0xfff);
        out.push((piece as u32, flags));
        len -= piece;
    }
}

/// Memory chunk granularity of `MemoryExport` (holes are tracked per chunk).
pub const MEMORY_CHUNK: u64 = 64 << 10;

/// A sparse in-memory export: chunks are allocated on first write; trimmed or
/// never-written chunks are holes.
pub struct MemoryExport {
    size: u64,
    block_size: u32,
    read_only: bool,
    chunks: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

impl MemoryExport {
    pub fn new(size: u64) -> MemoryExport {
        MemoryExport {
            size,
            block_size: 4096,
            read_only: false,
            chunks: Mutex::new(BTreeMap::new()),
        }
    }
    pub fn with_block_size(mut self, block_size: u32) -> MemoryExport {
        self.block_size = block_size;
        self
    }
    pub fn read_only(mut self, read_only: bool) -> MemoryExport {
        self.read_only = read_only;
        self
    }
    /// Bytes of allocated (non-hole) chunks.
    pub fn allocated_bytes(&self) -> u64 {
        self.lock().len() as u64 * MEMORY_CHUNK
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Box<[u8]>>> {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f(chunk index, offset in chunk, range in the caller's buffer)` per chunk piece.
    fn for_each_piece(
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0u64;
        while done < len {
            let at = offset + done;
            let index = at / MEMORY_CHUNK;
            let within = at % MEMORY_CHUNK;
            let n = (MEMORY_CHUNK - within).min(len - done);
            f(index, within as usize, done as usize..(done + n) as usize);
            done += n;
        }
    }

    /// Zeroes a range, dropping chunks it covers entirely.
    fn zero_range(&self, offset: u64, len: u64, punch: bool) {
        let mut chunks = self.lock();
        Self::for_each_piece(offset, len, |index, within, range| {
            let whole = within == 0 && range.len() as u64 == MEMORY_CHUNK;
            if whole && punch {
                chunks.remove(&index);
            } else if let Some(chunk) = chunks.get_mut(&index) {
                if let Some(dst) = chunk.get_mut(within..within + range.len()) {
                    dst.fill(0);
                }
            } else if !punch {
                chunks.insert(index, vec![0u8; MEMORY_CHUNK as usize].into_boxed_slice());
            }
        });
    }
}

impl BlockExport for MemoryExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn preferred_block_size(&self) -> u32 {
        self.block_size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len() as u64, self.size)?;
        let chunks = self.lock();
        Self::for_each_piece(offset, buf.len() as u64, |index, within, range| {
            let n = range.len();
            let Some(dst) = buf.get_mut(range) else {
                return;
            };
            match chunks.get(&index).and_then(|c| c.get(within..within + n)) {
                Some(src) => dst.copy_from_slice(src),
                None => dst.fill(0),
            }
        });
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len() as u64, self.size)?;
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let mut chunks = self.lock();
        Self::for_each_piece(offset, buf.len() as u64, |index, within, range| {
            let n = range.len();
            let chunk = chunks
                .entry(index)
                .or_insert_with(|| vec![0u8; MEMORY_CHUNK as usize].into_boxed_slice());
            if let (Some(dst), Some(src)) = (chunk.get_mut(within..within + n), buf.get(range)) {
                dst.copy_from_slice(src);
            }
        });
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(offset, len, self.size)?;
        self.zero_range(offset, len, true);
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> io::Result<()> {
        check_range(offset, len, self.size)?;
        self.zero_range(offset, len, may_punch);
        Ok(())
    }
    fn fast_zero(&self) -> bool {
        true
    }
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>> {
        check_range(offset, len, self.size)?;
        let chunks = self.lock();
        let mut out = Vec::new();
        Self::for_each_piece(offset, len, |index, _, range| {
            let flags = if chunks.contains_key(&index) {
                0
            } else {
                STATE_HOLE | STATE_ZERO
            };
            push_extent(&mut out, range.len() as u64, flags);
        });
        Ok(out)
    }
}

/// A regular file as an export: trim punches holes, block status follows SEEK_DATA/SEEK_HOLE.
pub struct FileExport {
    file: File,
    size: u64,
    block_size: u32,
    read_only: bool,
}

impl FileExport {
    /// Opens an existing file; its current length is the export size.
    pub fn open(path: &Path, read_only: bool) -> io::Result<FileExport> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let size = file.metadata()?.len();
        Ok(FileExport {
            file,
            size,
            block_size: 4096,
            read_only,
        })
    }
    /// Creates (or truncates) a sparse file of `size` bytes.
    pub fn create(path: &Path, size: u64) -> io::Result<FileExport> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(size)?;
        Ok(FileExport {
            file,
            size,
            block_size: 4096,
            read_only: false,
        })
    }
    pub fn with_block_size(mut self, block_size: u32) -> FileExport {
        self.block_size = block_size;
        self
    }

    fn fallocate(&self, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: fallocate on an owned descriptor with plain integer arguments.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn writable(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(offset, len, self.size)?;
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(())
    }

    fn write_zero_bytes(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = vec![0u8; len.min(1 << 20) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.file
                .write_all_at(zeros.get(..n).unwrap_or_default(), offset + done)?;
            done += n as u64;
        }
        Ok(())
    }

    fn seek(&self, offset: u64, whence: libc::c_int) -> Option<u64> {
        // SAFETY: lseek on an owned descriptor. pread/pwrite do not use the file position.
        let at = unsafe { libc::lseek(self.file.as_raw_fd(), offset as libc::off_t, whence) };
        (at >= 0).then_some(at as u64)
    }
}

impl BlockExport for FileExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn preferred_block_size(&self) -> u32 {
        self.block_size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len() as u64, self.size)?;
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.writable(offset, buf.len() as u64)?;
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.writable(offset, len)?;
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match self.fallocate(mode, offset, len) {
            // Trim is advisory: a file system without hole punching just keeps the data.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
            other => other,
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> io::Result<()> {
        self.writable(offset, len)?;
        let mode = if may_punch {
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
        } else {
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
        };
        match self.fallocate(mode, offset, len) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.write_zero_bytes(offset, len)
            }
            other => other,
        }
    }
    fn fast_zero(&self) -> bool {
        true
    }
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>> {
        check_range(offset, len, self.size)?;
        let end = offset + len;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            // SEEK_DATA fails (ENXIO) when only a hole remains up to EOF.
            let data = self.seek(at, libc::SEEK_DATA).unwrap_or(end).min(end);
            if data > at {
                push_extent(&mut out, data - at, STATE_HOLE | STATE_ZERO);
                at = data;
                continue;
            }
            let hole = self.seek(at, libc::SEEK_HOLE).unwrap_or(end).min(end);
            let hole = if hole > at { hole } else { end };
            push_extent(&mut out, hole - at, 0);
            at = hole;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_export_tracks_holes() {
        let m = MemoryExport::new(1 << 20);
        assert_eq!(m.block_status(0, 1 << 20).unwrap(), vec![(1 << 20, 3)]);
        m.write_at(&[7u8; 100], MEMORY_CHUNK + 5).unwrap();
        let ext = m.block_status(0, 1 << 20).unwrap();
        let c = MEMORY_CHUNK as u32;
        assert_eq!(ext, vec![(c, 3), (c, 0), ((1 << 20) - 2 * c, 3)]);
        let mut buf = [1u8; 10];
        m.read_at(&mut buf, MEMORY_CHUNK + 100).unwrap();
        assert_eq!(buf, [7, 7, 7, 7, 7, 0, 0, 0, 0, 0]);
        m.trim(0, 1 << 20).unwrap();
        assert_eq!(m.allocated_bytes(), 0);
        assert!(m.read_at(&mut buf, (1 << 20) - 5).is_err());
    }

    #[test]
    fn file_export_punches_and_maps() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileExport::create(&dir.path().join("f"), 8 << 20).unwrap();
        f.write_at(&[9u8; 1 << 20], 2 << 20).unwrap();
        let ext = f.block_status(0, 8 << 20).unwrap();
        let total: u64 = ext.iter().map(|e| u64::from(e.0)).sum();
        assert_eq!(total, 8 << 20);
        assert!(ext.iter().any(|e| e.1 == 0));
        f.trim(2 << 20, 1 << 20).unwrap();
        let mut buf = vec![1u8; 4096];
        f.read_at(&mut buf, 2 << 20).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }
}
