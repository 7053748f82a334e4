//! Inode operations for mounted file systems (`cairn-fuse`): objects named by id, as a
//! kernel names them, with the POSIX rules for links, renames, link counts and times.
//!
//! ```text
//!  dataset root directory (object R, nlink 2 + subdirectories)
//!    ├─ "a.txt" ─► object 7  File     nlink 2  ◄─ "hard" (a second name, same object)
//!    ├─ "sub"   ─► object 9  Directory nlink 2
//!    ├─ "ln"    ─► object 11 Symlink  (data: the target)
//!    └─ "fifo"  ─► object 12 Special  (mode says FIFO / socket / char / block, rdev)
//! ```
//! Invariants kept here:
//! - a directory's nlink is 2 + its subdirectories; a file's is its number of names;
//! - an object whose nlink reaches 0 is *orphaned*, not freed: the caller (which knows
//!   whether the object is still open) frees it with `free_orphan`;
//! - every change sets the ctime of what changed, and the mtime of a directory whose
//!   entries changed (POSIX.1-2017, "File Times Update").
//!
//! Names are UTF-8 (a limit listed in the README); at most `NAME_MAX` bytes.

use crate::core::{now_ns, State, StoreCore};
use crate::dataset::DatasetKind;
use crate::dir::DirEntry;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::intent_format::{LoggedCreate, LoggedRename};
use crate::intent_names::{dir_marks, NamespaceIntent};
use crate::intent_state::IntentOp;
use crate::object_io::{install_object, take_object_id};
use crate::props::size_property;

pub use crate::dir::NAME_MAX;
/// File-type bits of a mode.
pub const S_IFMT: u32 = 0o170000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFLNK: u32 = 0o120000;
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o0010;

pub use crate::dnode::NewNode;

/// Attributes to change; `None` leaves one as it is. Times are ns since the epoch.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<u64>,
    pub mtime: Option<u64>,
    pub ctime: Option<u64>,
    /// Clears set-user-ID, and set-group-ID when group-execute is set (what Linux does
    /// when a file changes owner, or is written or truncated by a caller without
    /// CAP_FSETID); after `mode`. Directories keep theirs.
    pub kill_suidgid: bool,
}

pub use crate::dir::RenameMode;

/// A name whose object lost a link: the caller frees it with `free_orphan` once it is no
/// longer open, when `nlink` is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unlinked {
    pub object: u64,
    pub nlink: u32,
}

fn check_name(name: &str) -> Result<(), StoreError> {
    if name.len() > NAME_MAX {
        return Err(StoreError::NameTooLong(name.into()));
    }
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(StoreError::BadName(
            name.into(),
            "not a valid file name".into(),
        ));
    }
    Ok(())
}

impl StoreCore {
    /// (dataset id, root directory object) of a file-system dataset.
    pub fn fs_root(&self, dataset: &str) -> Result<(u32, u64), StoreError> {
        let st = self.lock();
        let ds = st
            .datasets
            .by_name(dataset)
            .ok_or_else(|| StoreError::NoSuchDataset(dataset.into()))?;
        if ds.kind != DatasetKind::Filesystem {
            return Err(StoreError::WrongKind(
                dataset.into(),
                "volume",
                "volumes are served over NBD (`cairn serve`), not mounted",
            ));
        }
        Ok((ds.id, ds.object))
    }

    /// The object named `name` in directory `dir`, and its dnode.
    pub fn lookup(&self, dir: u64, name: &str) -> Result<(u64, Dnode), StoreError> {
        if name.len() > NAME_MAX {
            return Err(StoreError::NameTooLong(name.into()));
        }
        let mut st = self.lock();
        let e = self.entry_locked(&mut st, dir, name)?;
        Ok((e.object, self.object_mut(&mut st, e.object)?.dnode))
    }

    fn entry_locked(&self, st: &mut State, dir: u64, name: &str) -> Result<DirEntry, StoreError> {
        if self.object_mut(st, dir)?.dnode.kind != ObjectKind::Directory {
            return Err(StoreError::NotADirectory(format!("object {dir}")));
        }
        self.dir_lookup(st, dir, name)?
            .ok_or_else(|| StoreError::NotFound(name.into()))
    }

    /// The entries of a directory, in name order (a snapshot: later changes do not move
    /// the positions of a listing already taken).
    pub fn read_dir(&self, dir: u64) -> Result<Vec<(String, u64, ObjectKind)>, StoreError> {
        let mut st = self.lock();
        if self.object_mut(&mut st, dir)?.dnode.kind != ObjectKind::Directory {
            return Err(StoreError::NotADirectory(format!("object {dir}")));
        }
        Ok(self
            .dir_list(&mut st, dir)?
            .into_iter()
            .map(|(n, e)| (n, e.object, e.kind))
            .collect())
    }

    /// Creates a file, directory, symlink (`target`) or special node named `name` in `dir`.
    /// The intent log records it (a CREATE record), so an fsync after it needs no txg sync.
    pub fn make_node(
        &self,
        dir: u64,
        name: &str,
        new: NewNode,
        target: Option<&[u8]>,
    ) -> Result<(u64, Dnode), StoreError> {
        check_name(name)?;
        let mut st = self.lock();
        let marks = dir_marks(&st, &[dir]);
        let (id, dn) = self.make_node_locked(&mut st, dir, name, new, target, None)?;
        let create = LoggedCreate {
            parent: dir,
            kind: new.kind,
            mode: new.mode,
            uid: new.uid,
            gid: new.gid,
            rdev: new.rdev,
            name: name.to_string(),
            target: target.unwrap_or_default().to_vec(),
        };
        let intent = NamespaceIntent {
            dataset: dn.dataset,
            object: id,
            kind: new.kind,
            op: IntentOp::Create(Box::new(create)),
        };
        self.log_namespace(st, marks, intent)?;
        Ok((id, dn))
    }

    /// `make_node` under the lock; `id`: the id the node must have (log replay), else a
    /// new one.
    pub(crate) fn make_node_locked(
        &self,
        st: &mut State,
        dir: u64,
        name: &str,
        new: NewNode,
        target: Option<&[u8]>,
        id: Option<u64>,
    ) -> Result<(u64, Dnode), StoreError> {
        let dataset = self.writable_dir(st, dir)?;
        if self.dir_lookup(st, dir, name)?.is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        let block_size = match new.kind {
            ObjectKind::File => size_property(&st.datasets, dataset, "recordsize"),
            ObjectKind::Directory => 16 << 10,
            _ => 4096,
        };
        // (Not at replay: its txg holds only what the crashed one held, and cannot sync
        // part-way to make room.)
        if let Some(t) = target.filter(|_| id.is_none()) {
            self.reserve_space(st, t.len() as u64)?;
        }
        let id = match id {
            Some(id) => {
                self.claim_object_id(st, id)?;
                id
            }
            None => take_object_id(st),
        };
        install_object(st, id, new.kind, dataset, block_size);
        {
            let dn = &mut self.object_mut(st, id)?.dnode;
            dn.mode = new.mode;
            dn.uid = new.uid;
            dn.gid = new.gid;
            dn.rdev = new.rdev;
            dn.nlink = if new.kind == ObjectKind::Directory {
                2
            } else {
                1
            };
        }
        let entry = DirEntry {
            object: id,
            kind: new.kind,
        };
        let named = match target {
            Some(t) => self.write_locked(st, id, 0, t),
            None => Ok(()),
        }
        .and_then(|()| self.dir_insert(st, dir, name, entry));
        if let Err(e) = named {
            // (A full DIR2 leaf, or a damaged directory: nothing names the new object.)
            self.free_object_locked(st, id)?;
            return Err(e);
        }
        if new.kind == ObjectKind::Directory {
            self.object_mut(st, dir)?.dnode.nlink += 1;
        }
        self.touch_changed(st, dir)?;
        Ok((id, self.object_mut(st, id)?.dnode))
    }

    /// Gives object `obj` one more name: `name` in `dir` (not for directories). Logged (a
    /// LINK record).
    pub fn link(&self, obj: u64, dir: u64, name: &str) -> Result<Dnode, StoreError> {
        check_name(name)?;
        let mut st = self.lock();
        let marks = dir_marks(&st, &[dir]);
        let dn = self.link_locked(&mut st, obj, dir, name)?;
        let intent = NamespaceIntent {
            dataset: dn.dataset,
            object: obj,
            kind: dn.kind,
            op: IntentOp::Link {
                dir,
                name: name.into(),
            },
        };
        self.log_namespace(st, marks, intent)?;
        Ok(dn)
    }

    /// `link` under the lock.
    pub(crate) fn link_locked(
        &self,
        st: &mut State,
        obj: u64,
        dir: u64,
        name: &str,
    ) -> Result<Dnode, StoreError> {
        self.writable_dir(st, dir)?;
        let dn = self.object_mut(st, obj)?.dnode;
        if dn.kind == ObjectKind::Directory {
            return Err(StoreError::NotPermitted("hard links to directories".into()));
        }
        if dn.nlink == 0 {
            return Err(StoreError::NotFound(format!("object {obj} (removed)")));
        }
        if self.dir_lookup(st, dir, name)?.is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        let entry = DirEntry {
            object: obj,
            kind: dn.kind,
        };
        self.dir_insert(st, dir, name, entry)?;
        self.touch_changed(st, dir)?;
        let o = self.object_mut(st, obj)?;
        o.dnode.nlink = o.dnode.nlink.saturating_add(1);
        o.dnode.ctime_ns = now_ns();
        o.dnode_dirty = true;
        Ok(o.dnode)
    }

    /// Removes the name `name` from `dir`: a non-directory (`rmdir` false) or an empty
    /// directory (`rmdir` true). Logged (a REMOVE record).
    pub fn remove_name(&self, dir: u64, name: &str, rmdir: bool) -> Result<Unlinked, StoreError> {
        if name.len() > NAME_MAX {
            return Err(StoreError::NameTooLong(name.into()));
        }
        let mut st = self.lock();
        let marks = dir_marks(&st, &[dir]);
        let (left, dataset, kind) = self.remove_name_locked(&mut st, dir, name, rmdir)?;
        let intent = NamespaceIntent {
            dataset,
            object: left.object,
            kind,
            op: IntentOp::Remove {
                dir,
                name: name.into(),
                rmdir,
            },
        };
        self.log_namespace(st, marks, intent)?;
        Ok(left)
    }

    /// `remove_name` under the lock; also returns the dataset and the kind of what lost
    /// its name.
    pub(crate) fn remove_name_locked(
        &self,
        st: &mut State,
        dir: u64,
        name: &str,
        rmdir: bool,
    ) -> Result<(Unlinked, u32, ObjectKind), StoreError> {
        let dataset = self.writable_dir(st, dir)?;
        let e = self.entry_locked(st, dir, name)?;
        match (e.kind == ObjectKind::Directory, rmdir) {
            (true, false) => return Err(StoreError::IsADirectory(name.into())),
            (false, true) => return Err(StoreError::NotADirectory(name.into())),
            (true, true) => {
                if !self.dir_is_empty(st, e.object)? {
                    return Err(StoreError::NotEmpty(name.into()));
                }
            }
            (false, false) => {}
        }
        self.dir_remove(st, dir, name)?;
        self.touch_changed(st, dir)?;
        let left = self.drop_link(st, e)?;
        if e.kind == ObjectKind::Directory {
            // (Never below 2: directories made by `cairn mkdir` before it counted links
            // left their parent one short, and a directory with no links is a dead one.)
            let p = self.object_mut(st, dir)?;
            p.dnode.nlink = p.dnode.nlink.saturating_sub(1).max(2);
        }
        Ok((left, dataset, e.kind))
    }

    /// One name of `e.object` is gone: its link count goes down (a directory's to 0).
    fn drop_link(&self, st: &mut State, e: DirEntry) -> Result<Unlinked, StoreError> {
        let o = self.object_mut(st, e.object)?;
        o.dnode.nlink = if e.kind == ObjectKind::Directory {
            0
        } else {
            o.dnode.nlink.saturating_sub(1)
        };
        o.dnode.ctime_ns = now_ns();
        o.dnode_dirty = true;
        let (nlink, dataset) = (o.dnode.nlink, o.dnode.dataset);
        if nlink == 0 && e.kind != ObjectKind::Directory {
            // Until it is freed (at its last close, or at the next open after a crash).
            crate::unlinked::note_unlinked(st, dataset, e.object, true);
        }
        Ok(Unlinked {
            object: e.object,
            nlink,
        })
    }

    /// Frees an object no name leads to any more (nlink 0); a no-op otherwise. The free
    /// does not block the log: a replay repeats it (`free_nameless_locked`).
    pub fn free_orphan(&self, obj: u64) -> Result<(), StoreError> {
        let mut st = self.lock();
        let o = match self.object_mut(&mut st, obj) {
            Ok(o) => o,
            Err(_) => return Ok(()),
        };
        if o.dnode.nlink != 0 || o.dnode.kind == ObjectKind::Free || o.freeing {
            return Ok(());
        }
        self.free_nameless_locked(&mut st, obj)
    }

    /// Gives back the data of an object no name leads to (nlink 0) while its dnode waits
    /// for `free_orphan`; a no-op otherwise.
    pub fn drop_orphan_data(&self, obj: u64) -> Result<(), StoreError> {
        let mut st = self.lock();
        let dn = self.object_mut(&mut st, obj)?.dnode;
        if dn.nlink != 0 || dn.kind != ObjectKind::File || dn.size == 0 {
            return Ok(());
        }
        self.truncate_locked(&mut st, obj, 0)
    }

    /// Renames `from_dir/from` to `to_dir/to` (renameat2: replace, no-replace, exchange).
    /// Returns the object that lost its name when an existing target was replaced. Logged
    /// (a RENAME record).
    pub fn rename(
        &self,
        from_dir: u64,
        from: &str,
        to_dir: u64,
        to: &str,
        mode: RenameMode,
    ) -> Result<Option<Unlinked>, StoreError> {
        check_name(from)?;
        check_name(to)?;
        let mut st = self.lock();
        let marks = dir_marks(&st, &[from_dir, to_dir]);
        let src = self.entry_locked(&mut st, from_dir, from)?;
        let other = self.dir_lookup(&mut st, to_dir, to)?.map(|e| e.object);
        let replaced = self.rename_locked(&mut st, from_dir, from, to_dir, to, mode)?;
        let dataset = self.object_mut(&mut st, from_dir)?.dnode.dataset;
        let rename = LoggedRename {
            from_dir,
            from: from.to_string(),
            to_dir,
            to: to.to_string(),
            mode,
        };
        let intent = NamespaceIntent {
            dataset,
            object: src.object,
            kind: src.kind,
            op: IntentOp::Rename {
                rename: Box::new(rename),
                other,
            },
        };
        self.log_namespace(st, marks, intent)?;
        Ok(replaced)
    }

    /// `rename` under the lock.
    pub(crate) fn rename_locked(
        &self,
        st: &mut State,
        from_dir: u64,
        from: &str,
        to_dir: u64,
        to: &str,
        mode: RenameMode,
    ) -> Result<Option<Unlinked>, StoreError> {
        self.writable_dir(st, from_dir)?;
        self.writable_dir(st, to_dir)?;
        let src = self.entry_locked(st, from_dir, from)?;
        let dst = self.dir_lookup(st, to_dir, to)?;
        match (mode, dst) {
            (RenameMode::Exchange, None) => return Err(StoreError::NotFound(to.into())),
            (RenameMode::Exchange, Some(d)) => {
                self.exchange_locked(st, (from_dir, from, src), (to_dir, to, d))?;
                return Ok(None);
            }
            (RenameMode::NoReplace, Some(_)) => return Err(StoreError::Exists(to.into())),
            _ => {}
        }
        if dst.is_some_and(|d| d.object == src.object) {
            return Ok(None); // two names of one object: POSIX says nothing happens
        }
        if let Some(d) = dst {
            self.check_replaceable(st, src, d, to)?;
        }
        // The new name first: when it cannot be added (a full DIR2 leaf), nothing changed.
        self.dir_insert(st, to_dir, to, src)?;
        self.dir_remove(st, from_dir, from)?;
        let replaced = match dst {
            Some(d) => Some(self.drop_link(st, d)?),
            None => None,
        };
        let src_is_dir = src.kind == ObjectKind::Directory;
        let dst_was_dir = dst.is_some_and(|d| d.kind == ObjectKind::Directory);
        self.adjust_parent_links(st, from_dir, to_dir, src_is_dir, dst_was_dir)?;
        self.touch_changed(st, from_dir)?;
        self.touch_changed(st, to_dir)?;
        let o = self.object_mut(st, src.object)?;
        o.dnode.ctime_ns = now_ns();
        o.dnode_dirty = true;
        Ok(replaced)
    }

    /// A directory replaces only an empty directory; a non-directory only a non-directory.
    fn check_replaceable(
        &self,
        st: &mut State,
        src: DirEntry,
        dst: DirEntry,
        to: &str,
    ) -> Result<(), StoreError> {
        let (s, d) = (
            src.kind == ObjectKind::Directory,
            dst.kind == ObjectKind::Directory,
        );
        match (s, d) {
            (true, false) => Err(StoreError::NotADirectory(to.into())),
            (false, true) => Err(StoreError::IsADirectory(to.into())),
            (true, true) if !self.dir_is_empty(st, dst.object)? => {
                Err(StoreError::NotEmpty(to.into()))
            }
            _ => Ok(()),
        }
    }

    /// Link counts of the parents after a rename moved a directory (its ".." changed) or
    /// replaced one.
    fn adjust_parent_links(
        &self,
        st: &mut State,
        from_dir: u64,
        to_dir: u64,
        src_is_dir: bool,
        dst_was_dir: bool,
    ) -> Result<(), StoreError> {
        if src_is_dir && from_dir != to_dir {
            let f = self.object_mut(st, from_dir)?;
            f.dnode.nlink = f.dnode.nlink.saturating_sub(1).max(2);
            let t = self.object_mut(st, to_dir)?;
            t.dnode.nlink = t.dnode.nlink.saturating_add(1);
        }
        if dst_was_dir {
            let t = self.object_mut(st, to_dir)?;
            t.dnode.nlink = t.dnode.nlink.saturating_sub(1).max(2);
        }
        Ok(())
    }

    fn exchange_locked(
        &self,
        st: &mut State,
        a: (u64, &str, DirEntry),
        b: (u64, &str, DirEntry),
    ) -> Result<(), StoreError> {
        // (Both names exist: replacing an entry never needs room.)
        self.dir_insert(st, a.0, a.1, b.2)?;
        self.dir_insert(st, b.0, b.1, a.2)?;
        let (a_dir, b_dir) = (
            a.2.kind == ObjectKind::Directory,
            b.2.kind == ObjectKind::Directory,
        );
        if a.0 != b.0 && a_dir != b_dir {
            // One directory changed parents: the parent it left has one link fewer.
            let (left, joined) = if a_dir { (a.0, b.0) } else { (b.0, a.0) };
            let l = self.object_mut(st, left)?;
            l.dnode.nlink = l.dnode.nlink.saturating_sub(1).max(2);
            let j = self.object_mut(st, joined)?;
            j.dnode.nlink = j.dnode.nlink.saturating_add(1);
        }
        for dir in [a.0, b.0] {
            self.touch_changed(st, dir)?;
        }
        let now = now_ns();
        for obj in [a.2.object, b.2.object] {
            let o = self.object_mut(st, obj)?;
            o.dnode.ctime_ns = now;
            o.dnode_dirty = true;
        }
        Ok(())
    }

    /// Changes attributes; a size change truncates or extends (with zeros). The ctime is
    /// set to now (or to `ctime`), as every attribute change does. The change of a file,
    /// directory, symbolic link or special file is logged (an fsync after it stays on the
    /// intent log); anything else's makes the next log commit sync the txg.
    pub fn set_attr(&self, obj: u64, set: SetAttr) -> Result<Dnode, StoreError> {
        let mut st = self.lock();
        let dn = self.set_attr_locked(&mut st, obj, &set)?;
        if !crate::intent_state::attrs_logged(dn.kind) {
            st.log.unlogged.insert(dn.dataset);
            return Ok(dn);
        }
        let policy = self.log_policy(&st, dn.dataset);
        drop(st);
        let target = crate::fs::Resolved {
            dataset: dn.dataset,
            object: obj,
            kind: dn.kind,
        };
        if let Some(size) = set.size.filter(|_| dn.kind == ObjectKind::File) {
            let op = crate::intent_state::IntentOp::Truncate { size };
            self.note_intent(policy, target.clone(), op)?;
        }
        self.note_intent(policy, target, crate::intent_state::IntentOp::Attr)?;
        Ok(dn)
    }

    fn set_attr_locked(
        &self,
        st: &mut State,
        obj: u64,
        set: &SetAttr,
    ) -> Result<Dnode, StoreError> {
        let dn = self.object_mut(st, obj)?.dnode;
        self.check_writable_dataset(st, dn.dataset)?;
        if let Some(size) = set.size {
            if dn.kind != ObjectKind::File {
                return Err(StoreError::IsADirectory(format!("object {obj}")));
            }
            if size > dn.size {
                self.reserve_space(st, 0)?;
            }
            self.truncate_locked(st, obj, size)?;
            if set.mtime.is_none() {
                self.touch_changed(st, obj)?;
            }
        }
        let now = now_ns();
        let o = self.object_mut(st, obj)?;
        let d = &mut o.dnode;
        if let Some(mode) = set.mode {
            d.mode = (d.mode & S_IFMT) | (mode & !S_IFMT);
        }
        if set.kill_suidgid && d.kind != ObjectKind::Directory {
            d.mode &= !S_ISUID;
            if d.mode & S_IXGRP != 0 {
                d.mode &= !S_ISGID;
            }
        }
        d.uid = set.uid.unwrap_or(d.uid);
        d.gid = set.gid.unwrap_or(d.gid);
        d.atime_ns = set.atime.unwrap_or(d.atime_ns);
        d.mtime_ns = set.mtime.unwrap_or(d.mtime_ns);
        d.ctime_ns = set.ctime.unwrap_or(now);
        o.dnode_dirty = true;
        Ok(o.dnode)
    }

    /// Log replay: an object's attributes as an ATTR record logged them.
    pub(crate) fn set_logged_attrs(
        &self,
        obj: u64,
        a: &crate::intent_format::LoggedAttrs,
    ) -> Result<(), StoreError> {
        let mut st = self.lock();
        let o = self.object_mut(&mut st, obj)?;
        let d = &mut o.dnode;
        d.mode = (d.mode & S_IFMT) | (a.mode & !S_IFMT);
        (d.uid, d.gid) = (a.uid, a.gid);
        (d.atime_ns, d.mtime_ns, d.ctime_ns) = (a.atime_ns, a.mtime_ns, a.ctime_ns);
        o.dnode_dirty = true;
        Ok(())
    }

    /// Sets the access time only (a read under atime=on or relatime): no ctime change.
    pub fn touch_atime(&self, obj: u64, atime: u64) -> Result<(), StoreError> {
        let mut st = self.lock();
        let o = self.object_mut(&mut st, obj)?;
        o.dnode.atime_ns = atime;
        o.dnode_dirty = true;
        Ok(())
    }

    /// The target of a symbolic link.
    pub fn read_link(&self, obj: u64) -> Result<Vec<u8>, StoreError> {
        let mut st = self.lock();
        let dn = self.object_mut(&mut st, obj)?.dnode;
        if dn.kind != ObjectKind::Symlink {
            return Err(StoreError::WrongKind(
                format!("object {obj}"),
                crate::fs::kind_name(dn.kind),
                "only a symbolic link has a target",
            ));
        }
        crate::object_io::load_object_bytes(self.pool(), &mut st, obj)
    }

    /// The dataset of a directory that may change (read-only and kind checked).
    fn writable_dir(&self, st: &mut State, dir: u64) -> Result<u32, StoreError> {
        let dn = self.object_mut(st, dir)?.dnode;
        if dn.kind != ObjectKind::Directory {
            return Err(StoreError::NotADirectory(format!("object {dir}")));
        }
        if dn.nlink == 0 {
            return Err(StoreError::NotFound(format!("directory {dir} (removed)")));
        }
        self.check_writable_dataset(st, dn.dataset)?;
        Ok(dn.dataset)
    }

    pub(crate) fn check_writable_dataset(
        &self,
        st: &State,
        dataset: u32,
    ) -> Result<(), StoreError> {
        if st.datasets.property(dataset, "readonly").0 == "on" {
            let name = st
                .datasets
                .by_id(dataset)
                .map(|d| d.name.clone())
                .unwrap_or_default();
            return Err(StoreError::ReadOnly(name));
        }
        Ok(())
    }
}
