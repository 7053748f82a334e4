//! Leaf devices: the disks at the bottom of the vdev tree.
//!
//! A leaf is anything that can read and write bytes at an offset: a regular file, a block
//! device, and (later) an NBD export or a simulated disk. `FileLeaf` covers files and block
//! devices; it takes an exclusive `flock` so two processes can never drive the same disk.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::VdevError;

/// What the vdev layer needs from a disk.
pub trait Leaf: Send + Sync + fmt::Debug {
    /// The path (or URL) the leaf was opened from.
    fn path(&self) -> &str;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Physical sector size in bytes (the smallest write the device does without read-modify-write).
    fn physical_sector_size(&self) -> u32;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `bufs` back to back starting at `offset` (one request where the device can).
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Reads into `bufs` back to back starting at `offset`.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for b in bufs.iter_mut() {
            self.read_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// The I/O counters of a metered leaf (`crate::metered::MeteredLeaf`); `None` otherwise.
    fn io_stats(&self) -> Option<&std::sync::Arc<crate::iostat::IoStats>> {
        None
    }
    /// Whether the device has no moving head (SSD, tmpfs or page-cached file): mirror read
    /// policies then weigh queue length rather than seek distance. Files are taken as
    /// non-rotating unless known otherwise.
    fn nonrot(&self) -> bool {
        true
    }
    /// Gives up the device's lock (a device that left a pool still open in this process,
    /// so another pool or process may take it); I/O is not expected afterwards.
    fn release(&self) {}
    /// Measures the device again and reports the new size from now on when it grew (a LUN
    /// resized, a file made longer: `cairn online -e` and `autoexpand` on a pool in use).
    /// A device never shrinks here.
    fn refresh_size(&self) -> io::Result<u64> {
        Ok(self.size())
    }
}

/// How to open a leaf.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeafOptions {
    /// Bypass the page cache (O_DIRECT); I/O then goes through aligned bounce buffers.
    pub direct: bool,
    /// Open without write access (for `labels`, `import` scans).
    pub read_only: bool,
    /// Take no lock (only for read-only inspection such as `cairn labels`).
    pub no_lock: bool,
}

impl LeafOptions {
    /// Read-only and unlocked: for looking at labels of devices another process may hold
    /// (`cairn labels`, import scans, reading a held pool's config).
    pub fn inspect() -> LeafOptions {
        LeafOptions {
            read_only: true,
            no_lock: true,
            ..LeafOptions::default()
        }
    }
}

/// Sector size assumed for regular files: modern disks and file systems are 4 KiB.
pub const FILE_SECTOR_SIZE: u32 = 4096;

/// A regular file or a block device.
pub struct FileLeaf {
    path: String,
    file: File,
    /// Grows only (`Leaf::refresh_size`).
    size: AtomicU64,
    sector: u32,
    is_block_device: bool,
    direct: bool,
    /// No moving head (see `Leaf::nonrot`).
    nonrot: bool,
}

impl fmt::Debug for FileLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLeaf")
            .field("path", &self.path)
            .field("size", &self.size())
            .field("sector", &self.sector)
            .field("block_device", &self.is_block_device)
            .finish()
    }
}

impl FileLeaf {
    /// Opens and locks a leaf; checks it exists, is a file or block device and is big enough.
    pub fn open(path: &Path, opts: LeafOptions) -> Result<FileLeaf, VdevError> {
        let shown = path.display().to_string();
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(VdevError::Missing { path: shown })
            }
            Err(e) => return Err(VdevError::io(&shown, e)),
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            return Err(VdevError::IsDirectory { path: shown });
        }
        let is_block_device = ft.is_block_device();
        if !ft.is_file() && !is_block_device {
            return Err(VdevError::NotFileOrBlockDevice { path: shown });
        }
        let mut oo = OpenOptions::new();
        oo.read(true).write(!opts.read_only);
        if opts.direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let file = oo.open(path).map_err(|e| VdevError::io(&shown, e))?;
        if !opts.no_lock {
            lock_exclusive(&file, &shown)?;
        }
        let size = if is_block_device {
            block_device_size(&file).map_err(|e| VdevError::io(&shown, e))?
        } else {
            meta.len()
        };
        if size < cairn_geometry::MIN_LEAF_SIZE {
            return Err(VdevError::TooSmall { path: shown, size });
        }
        let sector = if is_block_device {
            block_device_physical_sector(&file).unwrap_or(512)
        } else {
            FILE_SECTOR_SIZE
        };
        let nonrot = !(is_block_device && block_device_rotational(&meta));
        Ok(FileLeaf {
            path: shown,
            file,
            size: AtomicU64::new(size),
            sector,
            is_block_device,
            direct: opts.direct,
            nonrot,
        })
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }
}

fn lock_exclusive(file: &File, path: &str) -> Result<(), VdevError> {
    // SAFETY: flock on a valid, owned descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(VdevError::Locked {
            path: path.to_string(),
        })
    } else {
        Err(VdevError::io(path, err))
    }
}

fn block_device_size(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

fn block_device_physical_sector(file: &File) -> Option<u32> {
    // BLKPBSZGET = _IO(0x12, 123): physical block size of a block device.
    const BLKPBSZGET: libc::c_ulong = 0x127b;
    let mut size: libc::c_uint = 0;
    // SAFETY: the ioctl writes one c_uint into `size`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKPBSZGET as _, &mut size) };
    (rc == 0 && size.is_power_of_two()).then_some(size)
}

/// `/sys/dev/block/MAJ:MIN/queue/rotational` of a block device (its disk's for a
/// partition); false when sysfs does not say.
fn block_device_rotational(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = meta.rdev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let Ok(dir) = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")) else {
        return false;
    };
    let own = dir.join("queue/rotational");
    let parent = dir.parent().map(|p| p.join("queue/rotational"));
    [Some(own), parent]
        .into_iter()
        .flatten()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .is_some_and(|s| s.trim() == "1")
}

/// Alignment O_DIRECT needs for buffers, offsets and lengths.
const DIRECT_ALIGN: usize = 4096;

impl Leaf for FileLeaf {
    fn path(&self) -> &str {
        &self.path
    }
    fn release(&self) {
        // SAFETY: flock on a valid, owned descriptor. Failure leaves the lock held, which
        // is what the process exiting fixes.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
    fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    fn refresh_size(&self) -> io::Result<u64> {
        let now = if self.is_block_device {
            block_device_size(&self.file)?
        } else {
            self.file.metadata()?.len()
        };
        Ok(self.size.fetch_max(now, Ordering::AcqRel).max(now))
    }
    fn physical_sector_size(&self) -> u32 {
        self.sector
    }
    fn nonrot(&self) -> bool {
        self.nonrot
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.direct && !is_direct_aligned(buf.as_ptr(), buf.len(), offset) {
            let mut bounce = AlignedBuf::new(buf.len());
            self.file.read_exact_at(bounce.as_mut_slice(), offset)?;
            buf.copy_from_slice(bounce.as_slice());
            return Ok(());
        }
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.direct && !is_direct_aligned(buf.as_ptr(), buf.len(), offset) {
            let mut bounce = AlignedBuf::new(buf.len());
            bounce.as_mut_slice().copy_from_slice(buf);
            return self.file.write_all_at(bounce.as_slice(), offset);
        }
        self.file.write_all_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        if self.direct {
            let mut at = offset;
            for b in bufs {
                self.write_at(b, at)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        vectored_io(self.file.as_raw_fd(), iov, offset, true)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        if self.direct {
            let mut at = offset;
            for b in bufs.iter_mut() {
                self.read_at(b, at)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        let iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        vectored_io(self.file.as_raw_fd(), iov, offset, false)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// pwritev/preadv over all of `iov`, resuming after short transfers, IOV_MAX at a time.
fn vectored_io(fd: i32, mut iov: Vec<libc::iovec>, mut offset: u64, write: bool) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut first = 0usize;
    while first < iov.len() {
        let n = (iov.len() - first).min(IOV_MAX);
        let batch = &iov[first..first + n];
        // SAFETY: every iovec points into a live buffer borrowed by the caller for the call;
        // preadv writes only within those buffers.
        let done = unsafe {
            if write {
                libc::pwritev(fd, batch.as_ptr(), n as i32, offset as libc::off_t)
            } else {
                libc::preadv(fd, batch.as_ptr(), n as i32, offset as libc::off_t)
            }
        };
        if done < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if done == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short vectored transfer",
            ));
        }
        offset += done as u64;
        let mut left = done as usize;
        while left > 0 && first < iov.len() {
            let len = iov[first].iov_len;
            if left >= len {
                left -= len;
                first += 1;
            } else {
                // SAFETY: advancing within the same buffer.
                iov[first].iov_base =
                    unsafe { (iov[first].iov_base as *mut u8).add(left) } as *mut libc::c_void;
                iov[first].iov_len = len - left;
                left = 0;
            }
        }
    }
    Ok(())
}

fn is_direct_aligned(ptr: *const u8, len: usize, offset: u64) -> bool {
    (ptr as usize).is_multiple_of(DIRECT_ALIGN)
        && len.is_multiple_of(DIRECT_ALIGN)
        && offset.is_multiple_of(DIRECT_ALIGN as u64)
}

/// A heap buffer aligned for O_DIRECT (length rounded up to the alignment).
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + 2 * DIRECT_ALIGN];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }
    fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}
