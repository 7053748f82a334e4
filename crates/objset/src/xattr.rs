//! Extended attributes: each object's names and values in one small object of kind
//! `Xattrs`, named by the `xattr` field of its dnode and rewritten whole on a change.
//!
//! ```text
//!  magic u32 "XAT1" | count u64 | (name str, value bytes)…   sorted by name
//! ```
//! Samba keeps DOS attributes (`user.DOSATTRIB`) and Windows ACLs (`security.NTACL`) here,
//! the kernel keeps POSIX ACLs (`system.posix_acl_access`, `..._default`). Limits as
//! Linux's: names up to 255 bytes, values up to 64 KiB; `MAX_TOTAL` per object.

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::core::{now_ns, State, StoreCore};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::object_io::load_object_bytes;

const XATTR_MAGIC: u32 = 0x3154_4158; // "XAT1"
pub const MAX_NAME: usize = 255;
pub const MAX_VALUE: usize = 64 << 10;
/// All names and values of one object, encoded.
pub const MAX_TOTAL: usize = 1 << 20;

/// How `set_xattr` treats an existing attribute (setxattr's XATTR_CREATE / _REPLACE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetMode {
    Any,
    Create,
    Replace,
}

fn encode(map: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut w = Writer::new();
    w.u32(XATTR_MAGIC).u64(map.len() as u64);
    for (k, v) in map {
        w.str(k).bytes(v);
    }
    w.buf
}

pub fn decode(buf: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, DecodeError> {
    let mut map = BTreeMap::new();
    if buf.is_empty() {
        return Ok(map);
    }
    let mut r = Reader::new(buf, "extended attributes");
    r.magic(&XATTR_MAGIC.to_le_bytes())?;
    for _ in 0..r.count(8)? {
        let name = r.str()?;
        let value = r.bytes()?.to_vec();
        if name.is_empty() || name.len() > MAX_NAME || value.len() > MAX_VALUE {
            return Err(r.err(format!("attribute {name:?} of {} bytes", value.len())));
        }
        map.insert(name, value);
    }
    Ok(map)
}

impl StoreCore {
    fn xattrs_locked(
        &self,
        st: &mut State,
        obj: u64,
    ) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        let holder = self.object_mut(st, obj)?.dnode.xattr;
        if holder == 0 {
            return Ok(BTreeMap::new());
        }
        let bytes = load_object_bytes(self.pool(), st, holder)?;
        decode(&bytes).map_err(|e| StoreError::corrupt_object("extended attributes", obj, e))
    }

    /// The value of attribute `name` of object `obj`.
    pub fn get_xattr(&self, obj: u64, name: &str) -> Result<Vec<u8>, StoreError> {
        let mut st = self.lock();
        self.xattrs_locked(&mut st, obj)?
            .remove(name)
            .ok_or_else(|| StoreError::NoAttribute(name.into()))
    }

    /// The attribute names of object `obj`, sorted.
    pub fn list_xattrs(&self, obj: u64) -> Result<Vec<String>, StoreError> {
        let mut st = self.lock();
        Ok(self.xattrs_locked(&mut st, obj)?.into_keys().collect())
    }

    /// Sets (`Some`) or removes (`None`) attribute `name`; the object's ctime changes.
    pub fn set_xattr(
        &self,
        obj: u64,
        name: &str,
        value: Option<&[u8]>,
        mode: SetMode,
    ) -> Result<(), StoreError> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(StoreError::NameTooLong(name.into()));
        }
        let mut st = self.lock();
        let dn = self.object_mut(&mut st, obj)?.dnode;
        st.log.unlogged.insert(dn.dataset);
        self.check_writable_dataset(&st, dn.dataset)?;
        let mut map = self.xattrs_locked(&mut st, obj)?;
        let exists = map.contains_key(name);
        match (value, mode, exists) {
            (None, _, false) | (Some(_), SetMode::Replace, false) => {
                return Err(StoreError::NoAttribute(name.into()))
            }
            (Some(_), SetMode::Create, true) => return Err(StoreError::Exists(name.into())),
            (Some(v), _, _) if v.len() > MAX_VALUE => {
                return Err(StoreError::AttributesFull(MAX_VALUE))
            }
            (Some(v), _, _) => {
                map.insert(name.into(), v.to_vec());
            }
            (None, _, true) => {
                map.remove(name);
            }
        }
        let bytes = encode(&map);
        if bytes.len() > MAX_TOTAL {
            return Err(StoreError::AttributesFull(MAX_TOTAL));
        }
        self.reserve_space(&mut st, bytes.len() as u64)?;
        let holder = match dn.xattr {
            0 => self.create_object_locked(&mut st, ObjectKind::Xattrs, dn.dataset, 4096)?,
            h => h,
        };
        self.truncate_locked(&mut st, holder, 0)?;
        self.write_locked(&mut st, holder, 0, &bytes)?;
        let o = self.object_mut(&mut st, obj)?;
        o.dnode.xattr = holder;
        o.dnode.ctime_ns = now_ns();
        o.dnode_dirty = true;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The encoding of these attributes (for other modules' tests).
    pub(crate) fn encoded(attrs: &[(&str, &[u8])]) -> Vec<u8> {
        encode(
            &attrs
                .iter()
                .map(|&(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
        )
    }

    #[test]
    fn round_trip() {
        let mut m = BTreeMap::new();
        m.insert("user.DOSATTRIB".to_string(), vec![0, 1, 2]);
        m.insert("system.posix_acl_access".to_string(), vec![]);
        assert_eq!(decode(&encode(&m)).unwrap(), m);
        assert!(decode(&[9, 9, 9, 9, 0]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }
    }
}
