//! The FUSE operations: each request becomes one store call on the objects it names.
//!
//! Inode numbers are object ids, except the dataset's root directory, which the kernel
//! knows as inode 1 (object 1 is the dataset table, never a file, so nothing collides).
//! The kernel checks permissions itself (`default_permissions`); what it leaves to a file
//! system is done here: owners and modes of new nodes (set-group-ID directories pass on
//! their group), link counts, times, and durability (`fsync` commits the txg).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cairn_objset::dnode::{Dnode, ObjectKind};
use cairn_objset::posix::{NewNode, RenameMode, SetAttr, Unlinked};
use cairn_objset::xattr::SetMode;
use cairn_objset::{Resolved, Store, StoreError};
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};

use crate::attr::{errno, file_attr, from_system_time, kind_type};
use crate::nodes::Nodes;
use crate::snapdir::{self, Node, SnapDir};
use crate::{AtimeMode, FsOptions};

/// How long the kernel may trust attributes and names it was given. Every change to a
/// mounted dataset goes through this mount (the pool has one serving process, and its
/// control socket changes no file), and the kernel learns of each change from the reply
/// to its own request, so nothing it caches goes stale: the timeout only bounds memory.
/// (At 1 s, `rm -r` of a tree untarred a minute earlier paid a LOOKUP and a GETATTR per
/// file to revalidate what the kernel already knew.)
const TTL: Duration = Duration::from_secs(3600);
/// Largest write the kernel sends (FUSE's max_write).
pub const MAX_WRITE: u32 = 1 << 20;
const RELATIME_AGE_NS: u64 = 24 * 3600 * 1_000_000_000;
/// Clears set-user-ID and set-group-ID as Linux does (see `SetAttr::kill_suidgid`).
const KILL_SUIDGID: SetAttr = SetAttr {
    mode: None,
    uid: None,
    gid: None,
    size: None,
    atime: None,
    mtime: None,
    ctime: None,
    kill_suidgid: true,
};

pub struct CairnFs {
    store: Arc<Store>,
    dataset: u32,
    root: u64,
    options: FsOptions,
    nodes: Nodes,
    /// `.zfs/snapshot`: the dataset's snapshots, read-only.
    snaps: SnapDir,
}

type Result<T> = std::result::Result<T, Errno>;

fn err(e: StoreError) -> Errno {
    errno(&e)
}

fn name_of(name: &OsStr) -> Result<&str> {
    std::str::from_utf8(name.as_bytes()).map_err(|_| Errno::EINVAL)
}

impl CairnFs {
    pub fn new(
        store: Arc<Store>,
        dataset: &str,
        options: FsOptions,
    ) -> std::result::Result<CairnFs, StoreError> {
        let snaps = SnapDir::new(store.clone(), dataset);
        let (dataset, root) = store.fs_root(dataset)?;
        Ok(CairnFs {
            store,
            dataset,
            root,
            options,
            nodes: Nodes::default(),
            snaps,
        })
    }

    fn object(&self, ino: INodeNo) -> u64 {
        if ino == INodeNo::ROOT {
            self.root
        } else {
            ino.0
        }
    }

    fn ino(&self, object: u64) -> INodeNo {
        if object == self.root {
            INodeNo::ROOT
        } else {
            INodeNo(object)
        }
    }

    fn resolved(&self, obj: u64, dn: &Dnode) -> Resolved {
        Resolved {
            dataset: self.dataset,
            object: obj,
            kind: dn.kind,
        }
    }

    /// An object of this dataset (a number from the kernel of another one is not ours).
    fn dnode(&self, obj: u64) -> Result<Dnode> {
        if snapdir::is_read_only(obj) {
            return Err(Errno::EROFS);
        }
        let dn = self.store.dnode(obj).map_err(err)?;
        if dn.dataset != self.dataset || matches!(dn.kind, ObjectKind::Free | ObjectKind::Table) {
            return Err(Errno::ENOENT);
        }
        Ok(dn)
    }

    /// Replies with a new entry, counting the kernel's lookup first.
    fn entry(&self, obj: u64, dn: &Dnode, reply: ReplyEntry) {
        self.nodes.looked_up(obj);
        reply.entry(&TTL, &file_attr(self.ino(obj), dn), Generation(0));
    }

    /// An object that lost its last name is freed once the kernel holds it no more; while
    /// the kernel only remembers it (no open handle) its data goes back already, as its
    /// space must not wait for the kernel's forget (which comes later, in batches).
    /// Called after unlink, rename over it, release and forget; a no-op for an object that
    /// still has a name.
    fn settle(&self, obj: u64) {
        if !self.nodes.is_held(obj) {
            let _ = self.store.free_orphan(obj);
        } else if !self.nodes.is_open(obj) {
            let _ = self.store.drop_orphan_data(obj);
        }
    }

    /// Replies to a lookup under `.zfs` (not counted: nothing there is ever freed). Names in
    /// `.zfs/snapshot` come and go with snapshots: the kernel must ask again each time.
    fn snap_entry(parent: Option<Node>, r: Result<fuser::FileAttr>, reply: ReplyEntry) {
        let ttl = match parent {
            Some(Node::Snapshots) => Duration::ZERO,
            _ => snapdir::TTL,
        };
        match r {
            Ok(attr) => reply.entry(&ttl, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Refuses to change anything under `.zfs`.
    fn writable(inos: &[INodeNo]) -> Result<()> {
        if inos.iter().any(|i| snapdir::is_read_only(i.0)) {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    fn unlinked(&self, u: Unlinked) {
        if u.nlink == 0 {
            self.settle(u.object);
        }
    }

    fn new_node(
        &self,
        req: &Request,
        parent: u64,
        kind: ObjectKind,
        mode: u32,
        rdev: u64,
    ) -> Result<NewNode> {
        let p = self.dnode(parent)?;
        let mut node = NewNode {
            kind,
            mode,
            uid: req.uid(),
            gid: req.gid(),
            rdev,
        };
        if p.mode & libc::S_ISGID != 0 {
            // BSD group semantics in a set-group-ID directory (as every Linux file system).
            node.gid = p.gid;
            if kind == ObjectKind::Directory {
                node.mode |= libc::S_ISGID;
            }
        }
        Ok(node)
    }

    /// Creates `name` in `parent`: `(kind, mode, rdev)`, and a symlink's target.
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        (kind, mode, rdev): (ObjectKind, u32, u64),
        target: Option<&[u8]>,
    ) -> Result<(u64, Dnode)> {
        if parent == INodeNo::ROOT && name == snapdir::CTL_NAME {
            return Err(Errno::EEXIST);
        }
        let parent = self.object(parent);
        let node = self.new_node(req, parent, kind, mode, rdev)?;
        self.store
            .make_node(parent, name_of(name)?, node, target)
            .map_err(err)
    }

    fn set_attr(&self, ino: INodeNo, set: SetAttr) -> Result<Dnode> {
        let obj = self.object(ino);
        self.dnode(obj)?;
        self.store.set_attr(obj, set).map_err(err)
    }

    /// Reads into `buf` (a buffer kept by the serving thread: a fresh zeroed megabyte per
    /// request costs page faults); returns the bytes read.
    fn read_at(&self, obj: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<usize> {
        let dn = self.dnode(obj)?;
        let len = dn.size.saturating_sub(offset).min(u64::from(size)) as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let n = self
            .store
            .read(&self.resolved(obj, &dn), offset, &mut buf[..len])
            .map_err(err)?;
        self.note_access(obj, &dn);
        Ok(n)
    }

    /// atime=on: every read sets it; relatime: only when it is older than the last change
    /// or a day old (Linux's relatime rule); off: never.
    fn note_access(&self, obj: u64, dn: &Dnode) {
        let now = from_system_time(SystemTime::now());
        let due = match self.options.atime {
            AtimeMode::Off => false,
            AtimeMode::On => true,
            AtimeMode::Relatime => {
                dn.atime_ns <= dn.mtime_ns
                    || dn.atime_ns <= dn.ctime_ns
                    || now.saturating_sub(dn.atime_ns) >= RELATIME_AGE_NS
            }
        };
        if due && !self.options.readonly {
            let _ = self.store.touch_atime(obj, now);
        }
    }

    /// Writes `data`; `kill_privs`: the kernel asks (FUSE_WRITE_KILL_SUIDGID, the writer
    /// lacks CAP_FSETID) that set-user-ID and set-group-ID go first.
    fn write_at(&self, obj: u64, offset: u64, data: &[u8], kill_privs: bool) -> Result<u32> {
        let dn = self.dnode(obj)?;
        if dn.kind != ObjectKind::File {
            return Err(Errno::EINVAL);
        }
        offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if kill_privs && dn.mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            self.set_attr(self.ino(obj), KILL_SUIDGID)?;
        }
        self.store
            .write(&self.resolved(obj, &dn), offset, data)
            .map_err(err)?;
        Ok(data.len() as u32)
    }

    /// Makes everything written so far durable (fsync, fsyncdir): through the intent log,
    /// or a txg sync when the open txg holds a change the log cannot record; nothing under
    /// `sync=disabled`.
    fn commit(&self) -> Result<()> {
        self.store.sync_writes(self.dataset).map_err(err)
    }

    fn xattr_reply(data: Vec<u8>, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(data.len() as u32);
        } else if data.len() > size as usize {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(&data);
        }
    }

    fn seek(&self, obj: u64, offset: i64, whence: i32) -> Result<i64> {
        let dn = self.dnode(obj)?;
        let offset = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        if offset >= dn.size {
            return Err(Errno::ENXIO);
        }
        let want_hole = match whence {
            libc::SEEK_DATA => false,
            libc::SEEK_HOLE => true,
            _ => return Err(Errno::EINVAL),
        };
        let r = self.resolved(obj, &dn);
        let mut pos = offset;
        while pos < dn.size {
            let runs = self
                .store
                .allocation_map(&r, pos, dn.size - pos)
                .map_err(err)?;
            if runs.is_empty() {
                break;
            }
            for (len, hole) in runs {
                if hole == want_hole {
                    return Ok(pos as i64);
                }
                pos += len;
            }
        }
        // Past the last data there is the implicit hole at the end of the file.
        if want_hole {
            Ok(dn.size as i64)
        } else {
            Err(Errno::ENXIO)
        }
    }
}

fn time_of(t: Option<TimeOrNow>) -> Option<u64> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => from_system_time(t),
        TimeOrNow::Now => from_system_time(SystemTime::now()),
    })
}

impl Filesystem for CairnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        // Lookups and creates in one directory run in parallel (the store serializes what
        // must be).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Direct I/O (O_DIRECT) is sent as it is submitted, not one request at a time: an
        // aio reader's queue depth reaches the store and its devices.
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        // Set-user-ID and set-group-ID are cleared here (chown, writes and truncates by a
        // caller without CAP_FSETID), so the kernel need not fetch the mode first: one
        // GETATTR fewer per chown (tar sets the owner of every file it writes).
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // The kernel's writeback cache gathers small writes into large ones, but it
        // acknowledges write() from its page cache: a refusal comes later, at fsync or
        // close. So it is on only where no quota can refuse a write (decided at mount):
        // under a quota or refquota, writes reach the store at write() time and fail there
        // with EDQUOT (quota_is_edquot_through_the_mount). A full pool, without a quota,
        // is reported as ENOSPC by fsync, or by close (README, limits).
        if !self.options.readonly && !self.store.is_quota_limited(self.dataset) {
            let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // Objects unlinked while the kernel held them go now.
        for obj in self.nodes.held() {
            let _ = self.store.free_orphan(obj);
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some(p) = Node::of(parent.0) {
            let r = name_of(name).and_then(|n| self.snaps.lookup(p, n));
            return Self::snap_entry(Some(p), r, reply);
        }
        if parent == INodeNo::ROOT && name == snapdir::CTL_NAME {
            return Self::snap_entry(None, self.snaps.getattr(Node::Ctl), reply);
        }
        let r = name_of(name).and_then(|n| self.store.lookup(self.object(parent), n).map_err(err));
        match r {
            Ok((obj, dn)) => self.entry(obj, &dn, reply),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if snapdir::is_read_only(ino.0) {
            return;
        }
        let obj = self.object(ino);
        self.nodes.forget(obj, nlookup);
        self.settle(obj);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(n) = Node::of(ino.0) {
            return match self.snaps.getattr(n) {
                Ok(attr) => reply.attr(&snapdir::TTL, &attr),
                Err(e) => reply.error(e),
            };
        }
        match self.dnode(self.object(ino)) {
            Ok(dn) => reply.attr(&TTL, &file_attr(ino, &dn)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: time_of(atime),
            mtime: time_of(mtime),
            ctime: ctime.map(from_system_time),
            // A new owner always; a new size when the caller is not root (the kernel's
            // FATTR_KILL_SUIDGID, which fuser does not pass on, says "lacks CAP_FSETID").
            kill_suidgid: uid.is_some() || gid.is_some() || (size.is_some() && req.uid() != 0),
        };
        match self.set_attr(ino, set) {
            Ok(dn) => reply.attr(&TTL, &file_attr(ino, &dn)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let target = match Node::of(ino.0) {
            Some(n) => self.snaps.readlink(n),
            None => self.store.read_link(self.object(ino)).map_err(err),
        };
        match target {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => ObjectKind::File,
            libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK => ObjectKind::Special,
            _ => return reply.error(Errno::EINVAL),
        };
        let mode = if mode & libc::S_IFMT == 0 {
            mode | libc::S_IFREG
        } else {
            mode
        };
        match self.make(req, parent, name, (kind, mode, u64::from(rdev)), None) {
            Ok((obj, dn)) => self.entry(obj, &dn, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mode = (mode & 0o7777) | libc::S_IFDIR;
        match self.make(req, parent, name, (ObjectKind::Directory, mode, 0), None) {
            Ok((obj, dn)) => self.entry(obj, &dn, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Self::writable(&[parent])
            .and_then(|()| name_of(name))
            .and_then(|n| {
                self.store
                    .remove_name(self.object(parent), n, false)
                    .map_err(err)
            });
        match r {
            Ok(u) => {
                self.unlinked(u);
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Self::writable(&[parent])
            .and_then(|()| name_of(name))
            .and_then(|n| {
                self.store
                    .remove_name(self.object(parent), n, true)
                    .map_err(err)
            });
        match r {
            Ok(u) => {
                self.unlinked(u);
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        if target.len() >= 4096 {
            return reply.error(Errno::ENAMETOOLONG);
        }
        let mode = libc::S_IFLNK | 0o777;
        match self.make(
            req,
            parent,
            link_name,
            (ObjectKind::Symlink, mode, 0),
            Some(target),
        ) {
            Ok((obj, dn)) => self.entry(obj, &dn, reply),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else if flags.is_empty() {
            RenameMode::Replace
        } else {
            return reply.error(Errno::EINVAL); // RENAME_WHITEOUT: overlayfs only
        };
        let r = name_of(name).and_then(|from| {
            Self::writable(&[parent, newparent])?;
            let to = name_of(newname)?;
            self.store
                .rename(self.object(parent), from, self.object(newparent), to, mode)
                .map_err(err)
        });
        match r {
            Ok(replaced) => {
                if let Some(u) = replaced {
                    self.unlinked(u);
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let obj = self.object(ino);
        let r = Self::writable(&[ino, newparent])
            .and_then(|()| name_of(newname))
            .and_then(|n| self.store.link(obj, self.object(newparent), n).map_err(err));
        match r {
            Ok(dn) => self.entry(obj, &dn, reply),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if let Some(n) = Node::of(ino.0) {
            return match self.snaps.getattr(n) {
                Ok(_) if (flags.0 & libc::O_ACCMODE) != libc::O_RDONLY => reply.error(Errno::EROFS),
                Ok(a) if a.kind == fuser::FileType::Directory => reply.error(Errno::EISDIR),
                Ok(_) => reply.opened(
                    FileHandle(self.nodes.new_handle()),
                    FopenFlags::FOPEN_KEEP_CACHE,
                ),
                Err(e) => reply.error(e),
            };
        }
        let obj = self.object(ino);
        match self.dnode(obj) {
            Ok(dn) if dn.kind == ObjectKind::Directory => reply.error(Errno::EISDIR),
            Ok(_) => {
                if self.options.readonly && (flags.0 & libc::O_ACCMODE) != libc::O_RDONLY {
                    return reply.error(Errno::EROFS);
                }
                self.nodes.opened(obj);
                // Every change to a file goes through this mount, and the kernel sees its own
                // writes: its cached pages stay valid from one open to the next.
                reply.opened(
                    FileHandle(self.nodes.new_handle()),
                    FopenFlags::FOPEN_KEEP_CACHE,
                )
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Some(n) = Node::of(ino.0) {
            return match self.snaps.read(n, offset, size) {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e),
            };
        }
        thread_local! {
            static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        READ_BUF.with_borrow_mut(
            |buf| match self.read_at(self.object(ino), offset, size, buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(e),
            },
        )
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.write_at(self.object(ino), offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do at close (the kernel wrote its cached pages back before asking, and
        // byte-range locks are its own): ENOSYS tells it to stop sending FLUSH, one round
        // trip fewer per close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if snapdir::is_read_only(ino.0) {
            return reply.ok();
        }
        let obj = self.object(ino);
        self.nodes.closed(obj);
        self.settle(obj);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.commit() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let listing = match Node::of(ino.0) {
            Some(n) => self.snaps.list(n),
            None => self
                .store
                .read_dir(self.object(ino))
                .map_err(err)
                .map(|mut l| {
                    if ino == INodeNo::ROOT && self.options.snapdir_visible {
                        l.push((
                            snapdir::CTL_NAME.into(),
                            snapdir::CTL_INO,
                            ObjectKind::Directory,
                        ));
                    }
                    l
                }),
        };
        match listing {
            Ok(listing) => {
                let fh = self.nodes.new_handle();
                self.nodes.keep_listing(fh, listing);
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let done = self.nodes.with_listing(fh.0, |listing| {
            let Some(listing) = listing else {
                return Err(Errno::EBADF);
            };
            // Offsets: 1 is ".", 2 is "..", 2 + i + 1 the i-th entry of the listing.
            let specials = [(".", ino), ("..", ino)];
            for (i, (name, ino)) in specials.iter().enumerate().skip(offset as usize) {
                if reply.add(*ino, i as u64 + 1, fuser::FileType::Directory, name) {
                    return Ok(());
                }
            }
            let start = (offset as usize).saturating_sub(2);
            for (i, (name, obj, kind)) in listing.iter().enumerate().skip(start) {
                if reply.add(self.ino(*obj), i as u64 + 3, kind_type(*kind), name) {
                    break;
                }
            }
            Ok(())
        });
        match done {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.nodes.drop_listing(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.commit() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const BSIZE: u64 = 4096;
        // As `zfs list` shows the dataset: its AVAIL (quotas and others' reservations
        // counted) beside what the pool holds.
        let usage = self.store.space();
        let avail = self.store.dataset_avail(self.dataset);
        let total = (usage.used + avail) / BSIZE;
        let free = avail / BSIZE;
        // Objects are not preallocated: report as many free inodes as free blocks.
        reply.statfs(
            total,
            free,
            free,
            total,
            free,
            BSIZE as u32,
            255,
            BSIZE as u32,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if !self.options.xattr {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if let Err(e) = Self::writable(&[ino]) {
            return reply.error(e);
        }
        let mode = match flags {
            0 => SetMode::Any,
            libc::XATTR_CREATE => SetMode::Create,
            libc::XATTR_REPLACE => SetMode::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        let r = name_of(name).and_then(|n| {
            self.store
                .set_xattr(self.object(ino), n, Some(value), mode)
                .map_err(err)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if !self.options.xattr {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if snapdir::is_read_only(ino.0) {
            return reply.error(Errno::ENODATA); // (a snapshot's attributes are not shown)
        }
        match name_of(name).and_then(|n| self.store.get_xattr(self.object(ino), n).map_err(err)) {
            Ok(v) => Self::xattr_reply(v, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if !self.options.xattr || snapdir::is_read_only(ino.0) {
            return Self::xattr_reply(Vec::new(), size, reply);
        }
        match self.store.list_xattrs(self.object(ino)) {
            Ok(names) => {
                let mut out = Vec::new();
                for n in names {
                    out.extend_from_slice(n.as_bytes());
                    out.push(0);
                }
                Self::xattr_reply(out, size, reply)
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !self.options.xattr {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if let Err(e) = Self::writable(&[ino]) {
            return reply.error(e);
        }
        let r = name_of(name).and_then(|n| {
            self.store
                .set_xattr(self.object(ino), n, None, SetMode::Any)
                .map_err(err)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok(); // (default_permissions: the kernel checked)
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mode = (mode & 0o7777) | libc::S_IFREG;
        match self.make(req, parent, name, (ObjectKind::File, mode, 0), None) {
            Ok((obj, dn)) => {
                self.nodes.looked_up(obj);
                self.nodes.opened(obj);
                let fh = FileHandle(self.nodes.new_handle());
                reply.created(
                    &TTL,
                    &file_attr(self.ino(obj), &dn),
                    Generation(0),
                    fh,
                    FopenFlags::FOPEN_KEEP_CACHE,
                )
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let obj = self.object(ino);
        let r = (|| -> Result<()> {
            let dn = self.dnode(obj)?;
            // (As a write: the kernel leaves set-user-ID to us, FUSE_HANDLE_KILLPRIV_V2.)
            if req.uid() != 0 && dn.mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
                self.set_attr(ino, KILL_SUIDGID)?;
            }
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
            match mode & !libc::FALLOC_FL_KEEP_SIZE {
                // Copy-on-write cannot reserve blocks in place: extending the size is what
                // an allocation can honestly promise (ENOSPC comes at write time).
                0 if !keep_size && end > dn.size => {
                    self.set_attr(
                        ino,
                        SetAttr {
                            size: Some(end),
                            ..SetAttr::default()
                        },
                    )?;
                }
                0 => {}
                libc::FALLOC_FL_PUNCH_HOLE if keep_size => {
                    self.store
                        .punch(&self.resolved(obj, &dn), offset, length)
                        .map_err(err)?;
                }
                _ => return Err(Errno::EOPNOTSUPP),
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.seek(self.object(ino), offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }
}
