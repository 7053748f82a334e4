//! Directories: a sorted map from names to objects, stored as the directory object's data.
//!
//! ```text
//!  magic u32 "DIR1" | count u64 | (name str, object u64, kind u8)…
//! ```

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::dnode::ObjectKind;

const DIR_MAGIC: u32 = 0x3152_4944; // "DIR1"

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub object: u64,
    pub kind: ObjectKind,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    pub entries: BTreeMap<String, DirEntry>,
}

impl Directory {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(DIR_MAGIC).u64(self.entries.len() as u64);
        for (name, e) in &self.entries {
            w.str(name).u64(e.object).u8(e.kind as u8);
        }
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<Directory, DecodeError> {
        let mut r = Reader::new(buf, "directory");
        if buf.is_empty() {
            return Ok(Directory::default());
        }
        if r.u32()? != DIR_MAGIC {
            return Err(r.err("bad magic"));
        }
        let n = r.count(13)?;
        let mut entries = BTreeMap::new();
        for _ in 0..n {
            let name = r.str()?;
            let object = r.u64()?;
            let kind = match r.u8()? {
                1 => ObjectKind::File,
                2 => ObjectKind::Directory,
                5 => ObjectKind::Symlink,
                6 => ObjectKind::Special,
                k => return Err(r.err(format!("entry kind {k}"))),
            };
            if name.is_empty() || name.contains('/') {
                return Err(r.err(format!("bad entry name {name:?}")));
            }
            entries.insert(name, DirEntry { object, kind });
        }
        Ok(Directory { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut d = Directory::default();
        d.entries.insert(
            "a.txt".into(),
            DirEntry {
                object: 5,
                kind: ObjectKind::File,
            },
        );
        d.entries.insert(
            "sub".into(),
            DirEntry {
                object: 9,
                kind: ObjectKind::Directory,
            },
        );
        assert_eq!(Directory::decode(&d.encode()).unwrap(), d);
        assert!(Directory::decode(&[1, 2, 3]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = Directory::decode(&bytes);
        }
    }
}
