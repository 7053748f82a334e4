//! Object-id maps kept in an object of a dataset: the *receive map* (the sender's ids →
//! ours, `crate::receive`) and the *clone map* (the origin snapshot's ids → the clone's,
//! `crate::clone`). Both say which object of one id space stands for which of another,
//! since object ids are pool-wide and a copy never keeps them.
//!
//! ```text
//!  magic u32 ("RCVM" or "CLNM") | n u64 | n × (from id u64, to id u64)   ascending from ids
//!  m u64 | m × (our owner id u64, sender id of its xattr object u64)     (receive map only:
//!                         owners whose xattr object has not arrived yet; 0 in a clone map)
//! ```

use std::collections::HashMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::core::StoreCore;
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::fs::Resolved;
use crate::snapshot_read::SnapshotView;

pub(crate) const RECEIVE_MAGIC: u32 = 0x4d56_4352; // "RCVM"
pub(crate) const CLONE_MAGIC: u32 = 0x4d4e_4c43; // "CLNM"
const MAP_BLOCK: u32 = 128 << 10;
/// A map object larger than this is damage (16 bytes per object: a billion objects).
const MAX_MAP_BYTES: u64 = 16 << 30;

/// One id space → another, with the xattr links a partial receive still owes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IdMap {
    pub ids: HashMap<u64, u64>,
    pub xattr_links: Vec<(u64, u64)>,
}

impl StoreCore {
    /// The map in object `object` of dataset `dataset`, as it is now or (`at`) as a
    /// snapshot of the dataset holds it.
    pub(crate) fn read_id_map(
        &self,
        dataset: u32,
        object: u64,
        magic: u32,
        at: Option<&SnapshotView>,
    ) -> Result<IdMap, StoreError> {
        let r = Resolved {
            dataset,
            object,
            kind: ObjectKind::File,
        };
        let size = match at {
            Some(v) => self.snapshot_dnode(v, object)?.size,
            None => self.object_dnode(&r)?.size,
        };
        if size > MAX_MAP_BYTES {
            return Err(StoreError::corrupt_object(
                "id map",
                object,
                format!("{size} bytes"),
            ));
        }
        let mut bytes = vec![0u8; size as usize];
        let n = match at {
            Some(v) => self.snapshot_read(v, object, 0, &mut bytes)?,
            None => self.read(&r, 0, &mut bytes)?,
        };
        decode_map(&bytes[..n], magic).map_err(|e| StoreError::corrupt_object("id map", object, e))
    }

    /// Writes `map` into object `object` of `dataset` (a new object when `None`); returns
    /// the object.
    pub(crate) fn write_id_map(
        &self,
        dataset: u32,
        object: Option<u64>,
        magic: u32,
        map: &IdMap,
    ) -> Result<u64, StoreError> {
        let object = match object {
            Some(o) => o,
            None => {
                let mut st = self.lock();
                self.create_object_locked(&mut st, ObjectKind::File, dataset, MAP_BLOCK)?
            }
        };
        let bytes = encode_map(map, magic);
        let r = Resolved {
            dataset,
            object,
            kind: ObjectKind::File,
        };
        self.write_unchecked(&r, 0, &bytes)?;
        let mut st = self.lock();
        self.truncate_locked(&mut st, object, bytes.len() as u64)?;
        Ok(object)
    }
}

pub(crate) fn encode_map(map: &IdMap, magic: u32) -> Vec<u8> {
    let mut pairs: Vec<(u64, u64)> = map.ids.iter().map(|(&s, &o)| (s, o)).collect();
    pairs.sort_unstable();
    let mut w = Writer::new();
    w.u32(magic).u64(pairs.len() as u64);
    for (s, o) in pairs {
        w.u64(s).u64(o);
    }
    w.u64(map.xattr_links.len() as u64);
    for &(owner, src) in &map.xattr_links {
        w.u64(owner).u64(src);
    }
    w.buf
}

pub(crate) fn decode_map(bytes: &[u8], magic: u32) -> Result<IdMap, DecodeError> {
    let mut r = Reader::new(bytes, "id map");
    r.magic(&magic.to_le_bytes())?;
    let n = r.count(16)?;
    let mut map = IdMap::default();
    for _ in 0..n {
        let (s, o) = (r.u64()?, r.u64()?);
        map.ids.insert(s, o);
    }
    let m = r.count(16)?;
    for _ in 0..m {
        map.xattr_links.push((r.u64()?, r.u64()?));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_map_reads_back(
            ids in proptest::collection::hash_map(any::<u64>(), any::<u64>(), 0..50),
            xattr_links in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
        ) {
            let map = IdMap { ids, xattr_links };
            prop_assert_eq!(decode_map(&encode_map(&map, RECEIVE_MAGIC), RECEIVE_MAGIC).unwrap(), map);
        }

        #[test]
        fn any_bytes_decode_to_a_map_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_map(&bytes, RECEIVE_MAGIC);
        }
    }

    #[test]
    fn a_clone_map_is_not_read_as_a_receive_map() {
        let bytes = encode_map(&IdMap::default(), CLONE_MAGIC);
        assert!(decode_map(&bytes, RECEIVE_MAGIC).is_err());
    }
}
