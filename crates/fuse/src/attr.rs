//! Dnodes as the kernel sees them: `FileAttr`, file types, times, and errno values for the
//! store's errors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_objset::dnode::{Dnode, ObjectKind};
use cairn_objset::StoreError;
use fuser::{Errno, FileAttr, FileType, INodeNo};

/// Block size `stat` reports (st_blksize): the unit the kernel should write in.
pub const REPORTED_BLOCK_SIZE: u32 = 128 << 10;

/// Times are kept as i64 ns since the epoch in the dnode's u64 fields (two's complement):
/// dates before 1970 and up to 2262.
pub fn to_system_time(ns: u64) -> SystemTime {
    let ns = ns as i64;
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub fn from_system_time(t: SystemTime) -> u64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as u64,
        Err(e) => (-(e.duration().as_nanos().min(i64::MAX as u128) as i64)) as u64,
    }
}

pub fn file_type(dn: &Dnode) -> FileType {
    match dn.kind {
        ObjectKind::Directory => FileType::Directory,
        ObjectKind::Symlink => FileType::Symlink,
        ObjectKind::Special => match dn.mode & libc::S_IFMT {
            libc::S_IFIFO => FileType::NamedPipe,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            _ => FileType::RegularFile,
        },
        _ => FileType::RegularFile,
    }
}

pub fn kind_type(kind: ObjectKind) -> FileType {
    match kind {
        ObjectKind::Directory => FileType::Directory,
        ObjectKind::Symlink => FileType::Symlink,
        // (A readdir type; the kernel learns the exact one from getattr.)
        ObjectKind::Special => FileType::NamedPipe,
        _ => FileType::RegularFile,
    }
}

pub fn file_attr(ino: INodeNo, dn: &Dnode) -> FileAttr {
    let atime = if dn.atime_ns == 0 {
        dn.mtime_ns
    } else {
        dn.atime_ns
    };
    FileAttr {
        ino,
        size: dn.size,
        // Space charged, in 512-byte units (du); at least what a written file holds.
        blocks: dn.used.div_ceil(512),
        atime: to_system_time(atime),
        mtime: to_system_time(dn.mtime_ns),
        ctime: to_system_time(dn.ctime_ns),
        crtime: to_system_time(dn.ctime_ns),
        kind: file_type(dn),
        perm: (dn.mode & 0o7777) as u16,
        nlink: dn.nlink,
        uid: dn.uid,
        gid: dn.gid,
        rdev: dn.rdev as u32,
        blksize: REPORTED_BLOCK_SIZE,
        flags: 0,
    }
}

/// The errno a store error stands for.
pub fn errno(e: &StoreError) -> Errno {
    use StoreError as E;
    let code = match e {
        E::NotFound(_) | E::NoSuchDataset(_) => libc::ENOENT,
        E::Exists(_) | E::DatasetExists(_) => libc::EEXIST,
        E::NotEmpty(_) => libc::ENOTEMPTY,
        E::NotADirectory(_) => libc::ENOTDIR,
        E::IsADirectory(_) => libc::EISDIR,
        E::NoSpace(_) | E::DirectoryFull(_) => libc::ENOSPC,
        E::QuotaExceeded { .. } => libc::EDQUOT,
        E::ReadOnly(_) => libc::EROFS,
        E::NameTooLong(_) => libc::ENAMETOOLONG,
        E::NotPermitted(_) => libc::EPERM,
        E::NoAttribute(_) => libc::ENODATA,
        E::AttributesFull(_) => libc::ENOSPC,
        E::TooLarge(_) | E::PastEnd { .. } => libc::EFBIG,
        E::BadName(..) | E::BadProperty(_) | E::WrongKind(..) | E::BadStream(_) => libc::EINVAL,
        E::ReceiveKept { .. } => libc::EIO,
        E::ScrubRunning(_) => libc::EBUSY,
        E::Pool(_) | E::CorruptMetadata(_) | E::DataLost(_) | E::LocalIo { .. } => libc::EIO,
        E::NewerFormat(_) => libc::EOPNOTSUPP,
    };
    Errno::from_i32(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_1970_and_after_2038_round_trip() {
        for ns in [
            0i64,
            1,
            -1,
            -1_000_000_000_123,
            1 << 32,
            (1i64 << 33) * 1_000_000_000 / 4,
        ] {
            let t = to_system_time(ns as u64);
            assert_eq!(from_system_time(t) as i64, ns);
        }
    }
}
