//! `cairn diff POOL/DS@A [POOL/DS@B | POOL/DS]`: what changed between a snapshot and a
//! later snapshot or the live dataset, in `zfs diff`'s form.
//!
//! ```text
//!  A: /a.txt (obj 9)  /d/ (obj 12)  /old (obj 14)         B: /a.txt (9, new mtime)
//!                                                            /d/ (12)  /new (14)  /b (20)
//!  → M /a.txt        (same object, its dnode changed)
//!    R /old -> /new  (same object, another path)
//!    + /b            (only in B)
//!    (and M for a directory whose entries changed, as its dnode did)
//! ```
//! Objects are matched by id: a dataset with snapshots never reuses one. Both trees are
//! walked whole, so the time grows with the number of files (ZFS reads its changed-object
//! list instead; here the override lists would allow the same: see README limits).

use std::collections::BTreeMap;

use crate::core::StoreCore;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::snapshot_read::SnapshotView;

/// One line of `diff`: `M`, `+`, `-` or `R`, the path, and for `R` the new path.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiffEntry {
    pub change: char,
    pub path: String,
    pub new_path: Option<String>,
    /// file, directory, symlink or special.
    pub kind: String,
}

/// A tree to walk: a snapshot, or the live dataset.
enum Side {
    Snapshot(SnapshotView),
    Live { root: u64 },
}

/// Every object reachable in a tree: id → (first path found, dnode).
type Objects = BTreeMap<u64, (String, Dnode)>;

impl StoreCore {
    /// Changes from snapshot `from` (`POOL/DS@A`) to `to` (a later snapshot of the same
    /// dataset, or the dataset itself), sorted by path.
    pub fn diff(&self, from: &str, to: &str) -> Result<Vec<DiffEntry>, StoreError> {
        let a = self.snapshot_view(from)?;
        let (ds, _) = from.split_once('@').expect("a snapshot view has an @");
        let b = if to.contains('@') {
            let v = self.snapshot_view(to)?;
            if v.dataset != a.dataset || v.txg < a.txg {
                return Err(StoreError::BadName(
                    to.into(),
                    format!("give a later snapshot of {ds}, or {ds} itself"),
                ));
            }
            Side::Snapshot(v)
        } else if to == ds {
            let root = self
                .datasets()
                .by_id(a.dataset)
                .map_or(a.root, |d| d.object);
            Side::Live { root }
        } else {
            return Err(StoreError::BadName(
                to.into(),
                format!("compare with a snapshot of {ds} or with {ds} itself"),
            ));
        };
        let to_root = match &b {
            Side::Snapshot(v) => v.root,
            Side::Live { root } => *root,
        };
        let mut before = self.walk(&Side::Snapshot(a.clone()))?;
        let after = self.walk(&b)?;
        if to_root == a.root {
            return Ok(compare(&before, &after, false));
        }
        // `from` came by `promote`: its objects are named by the dataset's clone map.
        let (map, gone) = self
            .promoted_map(&a, to_root)
            .map_err(|_| crate::clone_send::promoted_apart(from, to))?;
        // (Objects gone before the map's snapshot get ids of their own: removed.)
        before = before
            .into_iter()
            .filter_map(|(id, v)| match map.get(&id) {
                Some(&ours) => Some((ours, v)),
                None => {
                    (gone.binary_search(&id).is_ok()).then(|| (crate::clone_send::gone_id(id), v))
                }
            })
            .collect();
        Ok(compare(&before, &after, true))
    }

    fn side_dnode(&self, side: &Side, id: u64) -> Result<Dnode, StoreError> {
        match side {
            Side::Snapshot(v) => self.snapshot_dnode(v, id),
            Side::Live { .. } => self.dnode(id),
        }
    }

    fn side_list(&self, side: &Side, dir: u64) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(match side {
            Side::Snapshot(v) => self
                .snapshot_read_dir(v, dir)?
                .into_iter()
                .map(|(n, e)| (n, e.object))
                .collect(),
            Side::Live { .. } => self
                .read_dir(dir)?
                .into_iter()
                .map(|(n, id, _)| (n, id))
                .collect(),
        })
    }

    /// Every object of a tree with the first path that reaches it (breadth first, names in
    /// order, so the choice among hard links is stable).
    fn walk(&self, side: &Side) -> Result<Objects, StoreError> {
        let root = match side {
            Side::Snapshot(v) => v.root,
            Side::Live { root } => *root,
        };
        let mut out = Objects::new();
        out.insert(root, ("/".to_string(), self.side_dnode(side, root)?));
        let mut queue = vec![(root, String::new())];
        while let Some((dir, prefix)) = queue.pop() {
            for (name, id) in self.side_list(side, dir)? {
                if out.contains_key(&id) {
                    continue;
                }
                let path = format!("{prefix}/{name}");
                let dn = self.side_dnode(side, id)?;
                if dn.kind == ObjectKind::Directory {
                    queue.push((id, path.clone()));
                }
                out.insert(id, (path, dn));
            }
        }
        Ok(out)
    }
}

fn kind_of(dn: &Dnode) -> &'static str {
    match dn.kind {
        ObjectKind::Directory => "directory",
        ObjectKind::Symlink => "symlink",
        ObjectKind::Special => "special",
        _ => "file",
    }
}

/// What changed in content or attributes (times, mode, owner, links, size, data).
fn changed(a: &Dnode, b: &Dnode) -> bool {
    (
        a.size,
        a.mtime_ns,
        a.ctime_ns,
        a.mode,
        a.uid,
        a.gid,
        a.nlink,
        a.root.birth,
        a.xattr,
    ) != (
        b.size,
        b.mtime_ns,
        b.ctime_ns,
        b.mode,
        b.uid,
        b.gid,
        b.nlink,
        b.root.birth,
        b.xattr,
    )
}

/// `copied_dirs`: the after side's directories are copies (a clone's), whose blocks and
/// size differ from the originals' whatever happened: they count as changed only by their
/// attributes (an entry added, removed or renamed sets a directory's mtime and ctime).
fn compare(before: &Objects, after: &Objects, copied_dirs: bool) -> Vec<DiffEntry> {
    let differs = |a: &Dnode, b: &Dnode| match copied_dirs && a.kind == ObjectKind::Directory {
        true => {
            (a.mtime_ns, a.ctime_ns, a.mode, a.uid, a.gid)
                != (b.mtime_ns, b.ctime_ns, b.mode, b.uid, b.gid)
        }
        false => changed(a, b),
    };
    let mut out = Vec::new();
    for (id, (path, dn)) in before {
        let entry = |change, path: &str, new_path| DiffEntry {
            change,
            path: path.to_string(),
            new_path,
            kind: kind_of(dn).to_string(),
        };
        match after.get(id) {
            None => out.push(entry('-', path, None)),
            Some((p2, _)) if p2 != path => out.push(entry('R', path, Some(p2.clone()))),
            Some((_, d2)) if differs(dn, d2) => out.push(entry('M', path, None)),
            Some(_) => {}
        }
    }
    for (id, (path, dn)) in after {
        if !before.contains_key(id) {
            out.push(DiffEntry {
                change: '+',
                path: path.clone(),
                new_path: None,
                kind: kind_of(dn).to_string(),
            });
        }
    }
    out.sort_by(|x, y| x.path.cmp(&y.path).then(x.change.cmp(&y.change)));
    out
}
