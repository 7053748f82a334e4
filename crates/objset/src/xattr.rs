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
use crate::intent_format::LoggedXattr;
use crate::intent_names::{dir_marks, NamespaceIntent};
use crate::intent_state::{attrs_logged, IntentOp};
use crate::object_io::{install_object, load_object_bytes, take_object_id};

const XATTR_MAGIC: u32 = 0x3154_4158; // "XAT1"
pub use crate::dir::{XATTR_NAME_MAX as MAX_NAME, XATTR_SIZE_MAX as MAX_VALUE};
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
    /// Logged (an XATTR record) for the objects whose attributes are (files, directories,
    /// symbolic links, special files); anything else's makes the next log commit a sync.
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
        self.check_writable_dataset(&st, dn.dataset)?;
        if !attrs_logged(dn.kind) {
            st.log.unlogged.insert(dn.dataset);
        }
        let marks = dir_marks(&st, &[]);
        let holder = self.set_xattr_locked(&mut st, obj, name, (value, mode), None)?;
        if !attrs_logged(dn.kind) {
            return Ok(());
        }
        let xattr = LoggedXattr {
            holder,
            name: name.into(),
            value: value.map(<[u8]>::to_vec),
        };
        let intent = NamespaceIntent {
            dataset: dn.dataset,
            object: obj,
            kind: dn.kind,
            op: IntentOp::Xattr(Box::new(xattr)),
        };
        self.log_namespace(st, marks, intent)
    }

    /// `set_xattr` under the lock; returns the object keeping `obj`'s attributes. A new
    /// one gets the id `replay_holder` (log replay: the id it had when logged) or a new
    /// id; space is checked only outside a replay (its txg cannot sync part-way).
    fn set_xattr_locked(
        &self,
        st: &mut State,
        obj: u64,
        name: &str,
        (value, mode): (Option<&[u8]>, SetMode),
        replay_holder: Option<u64>,
    ) -> Result<u64, StoreError> {
        let dn = self.object_mut(st, obj)?.dnode;
        let mut map = self.xattrs_locked(st, obj)?;
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
        if replay_holder.is_none() {
            self.reserve_space(st, bytes.len() as u64)?;
        }
        let holder = match (dn.xattr, replay_holder) {
            (0, Some(id)) => {
                self.claim_object_id(st, id)?;
                install_object(st, id, ObjectKind::Xattrs, dn.dataset, 4096);
                id
            }
            (0, None) => {
                let id = take_object_id(st);
                install_object(st, id, ObjectKind::Xattrs, dn.dataset, 4096);
                id
            }
            (h, _) => h,
        };
        self.truncate_locked(st, holder, 0)?;
        self.write_locked(st, holder, 0, &bytes)?;
        let o = self.object_mut(st, obj)?;
        o.dnode.xattr = holder;
        o.dnode.ctime_ns = now_ns();
        o.dnode_dirty = true;
        Ok(holder)
    }

    /// Log replay: sets or removes the attribute an XATTR record logged. False: the
    /// object is gone (freed later in the chain's txg), or the attribute to remove is
    /// not there.
    pub(crate) fn replay_xattr(&self, id: u64, x: &LoggedXattr) -> Result<bool, StoreError> {
        if self.live_dnode(id).is_none() {
            return Ok(false);
        }
        let mut st = self.lock();
        let change = (x.value.as_deref(), SetMode::Any);
        match self.set_xattr_locked(&mut st, id, &x.name, change, Some(x.holder)) {
            Ok(_) => Ok(true),
            Err(StoreError::NoAttribute(_)) => Ok(false),
            Err(e) => Err(StoreError::corrupt_object(
                "intent log",
                id,
                format!("its XATTR record ({:?}) does not replay: {e}", x.name),
            )),
        }
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
