//! Errors of the object store; messages say what to do.

use cairn_pool::PoolError;

use crate::codec::DecodeError;

/// Metadata that does not decode, or decodes to something impossible: which structure,
/// of which object (when it belongs to one), and why.
#[derive(Debug, thiserror::Error)]
pub struct Corruption {
    /// The structure being read: "root block", "dnode", "indirect block", "directory", …
    pub what: &'static str,
    /// The object the structure belongs to, if any.
    pub object: Option<u64>,
    #[source]
    pub source: CorruptionCause,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what)?;
        if let Some(id) = self.object {
            write!(f, " of object {id}")?;
        }
        match &self.source {
            // "root block: truncated at byte 8", not "root block: corrupt root block: …".
            CorruptionCause::Decode(e) if e.what == self.what => write!(f, ": {}", e.why),
            cause => write!(f, ": {cause}"),
        }
    }
}

/// Why metadata is corrupt.
#[derive(Debug, thiserror::Error)]
pub enum CorruptionCause {
    /// Its bytes do not decode (where and why: `DecodeError`; a block pointer in it too).
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// It decodes, but contradicts itself or what points to it.
    #[error("{0}")]
    Inconsistent(String),
}

impl From<String> for CorruptionCause {
    fn from(why: String) -> CorruptionCause {
        CorruptionCause::Inconsistent(why)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Pool(PoolError),
    /// Corrupt metadata, typed (`Corruption`): what, of which object, and why.
    #[error("corrupt metadata: {0}")]
    CorruptMetadata(Box<Corruption>),
    #[error("{0} is newer than this cairn understands: upgrade cairn to open this pool")]
    NewerFormat(String),
    #[error("not a valid send stream: {0}; nothing was received")]
    BadStream(String),
    #[error("the receive stopped ({why}); what arrived is kept: {resume}")]
    ReceiveKept { why: String, resume: String },
    #[error("pool '{0}' is being scrubbed already; `cairn scrub -p {0}` pauses it, `cairn scrub -s {0}` cancels it")]
    ScrubRunning(String),
    #[error("object {0} is too large to address")]
    TooLarge(u64),
    #[error("dataset '{0}' does not exist; see `cairn dataset list`")]
    NoSuchDataset(String),
    #[error("dataset '{0}' already exists")]
    DatasetExists(String),
    #[error("'{0}': no such file or directory")]
    NotFound(String),
    #[error("'{0}' is not a directory")]
    NotADirectory(String),
    #[error("'{0}' is a directory")]
    IsADirectory(String),
    #[error("'{0}' already exists")]
    Exists(String),
    #[error("directory '{0}' is not empty")]
    NotEmpty(String),
    #[error("out of space in pool '{0}': delete data or add a vdev")]
    NoSpace(String),
    #[error("dataset '{0}' is read-only (readonly=on); `cairn set readonly=off {0}` to write")]
    ReadOnly(String),
    #[error("bad property: {0}")]
    BadProperty(String),
    #[error("'{0}' is a {1}; {2}")]
    WrongKind(String, &'static str, &'static str),
    #[error("name '{0}' is longer than 255 bytes")]
    NameTooLong(String),
    #[error("{0} (rename some of these names, or spread them over directories)")]
    DirectoryFull(String),
    #[error("not permitted: {0}")]
    NotPermitted(String),
    #[error("no extended attribute '{0}'")]
    NoAttribute(String),
    #[error("extended attributes of one file are limited to {0} bytes in all")]
    AttributesFull(usize),
    #[error("dataset '{dataset}' is over its {property} ({limit} bytes): delete files, or raise it (`cairn set {property}=SIZE {dataset}`)")]
    QuotaExceeded {
        dataset: String,
        property: String,
        limit: u64,
    },
    #[error("invalid name '{0}': {1}")]
    BadName(String, String),
    #[error("{path}: {source}")]
    LocalIo {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read '{0}': its data is damaged beyond the pool's redundancy (see `cairn status -v`)")]
    DataLost(String),
    #[error("offset {offset} + {len} is past the end of volume '{name}' ({size} bytes)")]
    PastEnd {
        name: String,
        offset: u64,
        len: u64,
        size: u64,
    },
}

impl StoreError {
    /// Corrupt metadata `what` (not of one object); a structure newer than this code
    /// (`DecodeKind::NewerVersion`) is `NewerFormat` instead: "upgrade cairn", not corrupt.
    pub fn corrupt(what: &'static str, cause: impl Into<CorruptionCause>) -> StoreError {
        StoreError::metadata(what, None, cause.into())
    }

    /// Corrupt metadata `what` of object `object` (or, as for `corrupt`, a newer format).
    pub fn corrupt_object(
        what: &'static str,
        object: u64,
        cause: impl Into<CorruptionCause>,
    ) -> StoreError {
        StoreError::metadata(what, Some(object), cause.into())
    }

    fn metadata(what: &'static str, object: Option<u64>, cause: CorruptionCause) -> StoreError {
        match cause {
            CorruptionCause::Decode(e) if e.is_newer_version() => {
                let of = object
                    .map(|id| format!(" of object {id}"))
                    .unwrap_or_default();
                let inner = if e.what == what {
                    String::new()
                } else {
                    format!("{} ", e.what)
                };
                StoreError::NewerFormat(format!("{what}{of} ({inner}{})", e.why))
            }
            source => StoreError::CorruptMetadata(Box::new(Corruption {
                what,
                object,
                source,
            })),
        }
    }

    /// Whether this is corrupt metadata.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::CorruptMetadata(_))
    }

    /// Whether this error means data could not be read back correctly.
    pub fn is_data_loss(&self) -> bool {
        matches!(self, StoreError::Pool(PoolError::Vdev(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_metadata_says_what_of_which_object_and_why() {
        let e = StoreError::corrupt_object(
            "directory",
            7,
            DecodeError::truncated("directory", 3, "truncated at byte 3"),
        );
        assert_eq!(
            e.to_string(),
            "corrupt metadata: directory of object 7: truncated at byte 3"
        );
        assert!(e.is_corrupt());
        let StoreError::CorruptMetadata(c) = e else {
            panic!("typed")
        };
        assert_eq!((c.what, c.object), ("directory", Some(7)));
        assert!(matches!(c.source, CorruptionCause::Decode(_)));
    }

    #[test]
    fn a_damaged_root_block_is_typed_corrupt_metadata() {
        let e = crate::root::RootBlock::decode(&[0u8; 64])
            .err()
            .expect("bad magic");
        assert_eq!(
            e.to_string(),
            "corrupt metadata: root block: bad magic \"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\" (expected \"CAIRNOS1\")"
        );
        assert!(matches!(
            e,
            StoreError::CorruptMetadata(ref c) if c.what == "root block" && c.object.is_none()
        ));
    }

    #[test]
    fn a_newer_version_is_not_corrupt_but_asks_for_an_upgrade() {
        let newer = DecodeError::newer_version("DIR2 directory leaf", 0, "magic \"DLF3\"");
        let e = StoreError::corrupt_object("directory", 7, newer);
        assert!(!e.is_corrupt());
        assert_eq!(
            e.to_string(),
            "directory of object 7 (DIR2 directory leaf magic \"DLF3\") is newer than this cairn \
             understands: upgrade cairn to open this pool"
        );
        let newer = DecodeError::newer_version("space map", 4, "version 3; this cairn reads 2");
        assert_eq!(
            StoreError::corrupt("space map", newer).to_string(),
            "space map (version 3; this cairn reads 2) is newer than this cairn understands: \
             upgrade cairn to open this pool"
        );
    }

    /// Each structure whose magic ends in a digit, encoded by this code, with that digit
    /// raised by one (`at` is the digit's byte).
    fn bumped(mut bytes: Vec<u8>, at: usize) -> Vec<u8> {
        assert!(bytes[at].is_ascii_digit(), "byte {at} is a version digit");
        bytes[at] += 1;
        bytes
    }

    #[test]
    fn a_raised_magic_digit_is_a_newer_version_in_every_decoder() {
        use crate::codec::DecodeKind;
        use crate::dataset::DatasetTable;
        use crate::dir::Directory;
        use crate::dir2::{Header, Leaf};

        let xattrs = crate::xattr::tests::encoded(&[("user.a", b"1")]);
        let table = DatasetTable::default().encode();
        let mut with_snapshots = DatasetTable::default();
        with_snapshots.snapshots.heads.insert(3, 90);
        let with_snapshots = with_snapshots.encode();
        let header = Header {
            entries: 0,
            leaves: 1,
            next_block: 18,
        }
        .encode();
        let unit = |r: Result<(), DecodeError>| r.err().map(|e| e.kind);
        let cases: Vec<(&str, Option<DecodeKind>)> = vec![
            (
                "XAT1",
                unit(crate::xattr::decode(&bumped(xattrs, 3)).map(drop)),
            ),
            (
                "DIR1",
                unit(Directory::decode(&bumped(Directory::default().encode(), 3)).map(drop)),
            ),
            (
                "DIR2",
                unit(Header::decode(&bumped(header.clone(), 3)).map(drop)),
            ),
            (
                "DLF2",
                unit(Leaf::decode(&bumped(Leaf::new(0, 0).encode(), 3)).map(drop)),
            ),
            (
                "DST1",
                unit(DatasetTable::decode(&bumped(table.clone(), 3)).map(drop)),
            ),
            (
                "POL1",
                unit(DatasetTable::decode(&bumped(table, 15)).map(drop)),
            ),
            (
                // (SNP2 is the section with roots, `crate::promote`: SNP3 is newer.)
                "SNP1",
                unit(DatasetTable::decode(&bumped(bumped(with_snapshots, 27), 27)).map(drop)),
            ),
        ];
        for (magic, kind) in cases {
            assert_eq!(kind, Some(DecodeKind::NewerVersion), "{magic}");
        }
        // A version field above the code's, too.
        let mut v2 = header;
        v2[4] = 2;
        let e = Header::decode(&v2).unwrap_err();
        assert_eq!((e.offset, e.kind), (4, DecodeKind::NewerVersion));
    }

    #[test]
    fn a_raised_magic_digit_on_disk_asks_for_an_upgrade_not_a_repair() {
        use crate::xattr::SetMode;
        use cairn_pool::{CreateOptions, Home, Pool};

        let dir = tempfile::tempdir().unwrap();
        let leaf = dir.path().join("d0");
        std::fs::File::create(&leaf)
            .unwrap()
            .set_len(256 << 20)
            .unwrap();
        let home = Home::at(dir.path().join("home"));
        let leaves = [leaf.display().to_string()];
        Pool::create(&home, "tank", &leaves, CreateOptions::default()).unwrap();
        let store = crate::Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
        let f = store.create_file("tank/d/f", true).unwrap();
        store
            .set_xattr(f, "user.a", Some(b"1"), SetMode::Any)
            .unwrap();
        store.sync().unwrap();
        let d = store.resolve("tank/d").unwrap().object;
        // What a newer cairn might write: "XAT2" attributes, a "DIR3" directory.
        {
            let mut st = store.lock();
            let holder = store.object_mut(&mut st, f).unwrap().dnode.xattr;
            store.write_locked(&mut st, holder, 3, b"2").unwrap();
            store.write_locked(&mut st, d, 3, b"3").unwrap();
        }
        store.sync().unwrap();
        let store = crate::Store::open(store.close().unwrap()).unwrap();
        let e = store.get_xattr(f, "user.a").unwrap_err();
        assert!(matches!(e, StoreError::NewerFormat(_)), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "extended attributes of object {f} (magic \"XAT2\"; this cairn reads \"XAT1\") \
                 is newer than this cairn understands: upgrade cairn to open this pool"
            )
        );
        let e = store.resolve("tank/d/f").unwrap_err();
        assert!(matches!(e, StoreError::NewerFormat(_)), "{e}");
        assert!(e.to_string().contains("\"DIR3\""), "{e}");
    }
}
