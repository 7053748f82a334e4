//! A volume's snapshot as a read-only NBD export (`POOL/VOL@SNAP`), for `cairn serve`:
//! clients read the volume as it was; every write, trim or zeroing is refused (the export
//! is flagged read-only, so well-behaved clients do not try).

use std::io;
use std::sync::Arc;

use cairn_nbd::BlockExport;
use cairn_objset::dnode::ObjectKind;
use cairn_objset::snapshot_read::SnapshotView;
use cairn_objset::Store;

struct SnapshotVolumeExport {
    store: Arc<Store>,
    view: SnapshotView,
    size: u64,
    block_size: u32,
}

/// The export for `POOL/VOL@SNAP`, if that names a snapshot of a volume.
pub(crate) fn open(store: &Arc<Store>, full: &str) -> Option<Arc<dyn BlockExport>> {
    let view = store.snapshot_view(full).ok()?;
    let dnode = store.snapshot_dnode(&view, view.root).ok()?;
    if dnode.kind != ObjectKind::Volume {
        return None;
    }
    Some(Arc::new(SnapshotVolumeExport {
        store: store.clone(),
        view,
        size: dnode.size,
        block_size: dnode.block_size,
    }))
}

fn refused() -> io::Error {
    io::Error::from_raw_os_error(libc::EPERM)
}

impl BlockExport for SnapshotVolumeExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_only(&self) -> bool {
        true
    }
    fn preferred_block_size(&self) -> u32 {
        self.block_size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self
            .store
            .snapshot_read(&self.view, self.view.root, offset, buf)
            .map_err(|e| io::Error::other(e.to_string()))?;
        buf[n..].fill(0);
        Ok(())
    }
    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(refused())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64) -> io::Result<()> {
        Err(refused())
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool) -> io::Result<()> {
        Err(refused())
    }
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>> {
        // Reported as allocated, data throughout (true for reading; holes are not told).
        let len = len.min(self.size.saturating_sub(offset));
        let mut out = Vec::new();
        let mut left = len;
        while left > 0 {
            let n = left.min(u64::from(u32::MAX) & !0xfff);
            out.push((n as u32, 0));
            left -= n;
        }
        Ok(out)
    }
}
