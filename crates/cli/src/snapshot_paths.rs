//! Paths into snapshots, `POOL/DS@NAME/PATH`, as cat, get and ls read them.

use std::io::Write;
use std::path::Path;

use cairn_objset::dnode::ObjectKind;
use cairn_objset::fs::kind_name;
use cairn_objset::snapshot_read::SnapshotView;
use cairn_objset::{ListEntry, Store};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `POOL/DS@NAME/PATH` → the snapshot and PATH's components.
fn split_path(path: &str) -> Result<(String, Vec<&str>), String> {
    let (ds, rest) = path.split_once('@').ok_or("not a snapshot path")?;
    let (snap, inner) = rest.split_once('/').unwrap_or((rest, ""));
    let parts = inner.split('/').filter(|p| !p.is_empty()).collect();
    Ok((format!("{ds}@{snap}"), parts))
}

fn resolve(
    store: &Store,
    path: &str,
) -> Result<(SnapshotView, u64, cairn_objset::dnode::Dnode), String> {
    let (name, parts) = split_path(path)?;
    let view = store.snapshot_view(&name).map_err(err)?;
    let (id, dnode) = store.snapshot_resolve(&view, &parts).map_err(err)?;
    Ok((view, id, dnode))
}

/// `cairn ls POOL/DS@NAME[/DIR]`.
pub fn list_dir(store: &Store, path: &str) -> Result<Vec<ListEntry>, String> {
    let (view, id, dnode) = resolve(store, path)?;
    if dnode.kind != ObjectKind::Directory {
        return Err(format!("'{path}' is not a directory"));
    }
    let mut out = Vec::new();
    for (name, e) in store.snapshot_read_dir(&view, id).map_err(err)? {
        let size = store.snapshot_dnode(&view, e.object).map_err(err)?.size;
        out.push(ListEntry {
            name,
            kind: kind_name(e.kind).to_string(),
            size,
            object: e.object,
        });
    }
    Ok(out)
}

/// `cairn get|cat POOL/DS@NAME/PATH`: copies a file (or a volume) out of a snapshot.
pub fn copy_out(store: &Store, src: &str, dest: &Path) -> Result<(), String> {
    let (view, id, dnode) = resolve(store, src)?;
    if dnode.kind == ObjectKind::Directory {
        return Err(format!("'{src}' is a directory; `cairn ls {src}` lists it"));
    }
    let mut out: Box<dyn Write> = if dest.as_os_str() == "-" {
        // The client's standard output when the command runs in a service (not the
        // service's own, where the data went before and the client got nothing).
        crate::served::stdout()
    } else {
        Box::new(std::fs::File::create(dest).map_err(|e| format!("{}: {e}", dest.display()))?)
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < dnode.size {
        let n = store
            .snapshot_read(&view, id, offset, &mut buf)
            .map_err(err)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("{}: {e}", dest.display()))?;
        offset += n as u64;
    }
    out.flush().map_err(err)
}
