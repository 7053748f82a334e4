//! Hashed directories ("DIR2"): extendible hashing over 16 KiB blocks, for directories
//! that outgrew one DIR1 block (`crate::dir`). Each operation reads at most the header, one
//! pointer-table block and one leaf (a split also writes one new leaf and the table blocks
//! of the slots it moves); a txg sync writes only the blocks that changed.
//!
//! ```text
//!  directory object, 16 KiB blocks:
//!
//!   block 0        blocks 1 ..= 16                         blocks 17 .. next_block-1
//!  +----------+   +-----------------------------------+   +--------+--------+-- - -+
//!  | header   |   | pointer table: 65536 slots, u32   |   | leaf   | leaf   |      |
//!  | "DIR2"   |   | slot s -> block id of its leaf    |-->| d, p,  | d, p,  | ...  |
//!  | entries  |   | (4096 slots per block; slot s is  |   | names  | names  |      |
//!  | leaves   |   |  at block 1 + s/4096, byte        |   +--------+--------+-- - -+
//!  | next_blk |   |  4 * (s mod 4096))                |   every block from 17 on is a
//!  +----------+   +-----------------------------------+   leaf (leaves are never freed)
//!
//!  hash(name) = first 8 bytes, little-endian, of BLAKE3(name's UTF-8 bytes)   (forever)
//!
//!      bit 63                 48 47                                          0
//!      +---------------------+--------------------------------------------+
//!      | slot (16 bits)      | rest                                       |
//!      +---------------------+--------------------------------------------+
//!      |<- prefix of a leaf of depth d: the top d bits (0 <= d <= 16) ->|
//!
//!  a leaf of depth d and prefix p owns the 2^(16-d) consecutive slots
//!  p * 2^(16-d) .. (p+1) * 2^(16-d) - 1, and holds every name whose hash starts with p.
//!
//!  split of a full leaf L (depth d -> d+1; the new leaf N is block next_block):
//!
//!    slots  |<------------- owned by L (depth d, prefix p) ------------->|
//!    after  |<-- L: depth d+1, prefix 2p -->|<-- N: depth d+1, prefix 2p+1 -->|
//!    names whose hash bit (63-d) is 0 stay in L, the others move to N; the second half
//!    of the slots is rewritten to point to N (at most 8 table blocks, one past depth 3).
//! ```
//!
//! Entries inside a leaf are sorted by (hash, name bytes), so a lookup is a binary search
//! and a split is a cut of the list in two. A full leaf at depth 16 cannot split: inserting
//! into it is refused (`StoreError::DirectoryFull`, ENOSPC) — about 60 names of 255 bytes or
//! 700 of 12 bytes whose hashes share their top 16 bits, which random names reach only
//! past some millions of entries (docs/format.md). Leaves emptied by removals stay (no
//! merging); so does the DIR2 format of a directory emptied again.
//!
//! Every decoder checks what it reads and returns a `DecodeError`; nothing read from a disk
//! can make it panic. `HashedDir` is the directory in memory: the header, the table blocks
//! and the leaves it read, the changed ones marked dirty until the sync takes them.

use std::collections::HashMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::dir::{entry_kind, DirEntry, DIR_BLOCK};
use crate::error::StoreError;

const HEADER_MAGIC: u32 = u32::from_le_bytes(*b"DIR2");
const LEAF_MAGIC: u32 = u32::from_le_bytes(*b"DLF2");
/// Version of the DIR2 format.
pub const VERSION: u32 = 1;
/// Hash function id in the header: 1 = the first 8 bytes of BLAKE3, little-endian.
pub const HASH_BLAKE3_64: u32 = 1;
/// Bits of the hash that index the pointer table.
pub const TABLE_BITS: u32 = 16;
pub const TABLE_SLOTS: usize = 1 << TABLE_BITS;
/// Slots per table block (u32 each).
pub const SLOTS_PER_BLOCK: usize = DIR_BLOCK / 4;
/// Table blocks (blocks 1 ..= 16).
pub const TABLE_BLOCKS: u64 = (TABLE_SLOTS / SLOTS_PER_BLOCK) as u64;
/// The first leaf block.
pub const FIRST_LEAF: u64 = 1 + TABLE_BLOCKS;
/// Most leaves (each owns at least one slot).
pub const MAX_LEAVES: u64 = TABLE_SLOTS as u64;
/// Deepest leaf: its prefix is a whole slot.
pub const MAX_DEPTH: u8 = TABLE_BITS as u8;
/// Longest name (its length is one byte).
pub const MAX_NAME: usize = 255;
/// Bytes of a leaf's header.
pub const LEAF_HEADER: usize = 16;
/// Most entries a leaf can hold (names of one byte).
pub const MAX_LEAF_ENTRIES: usize = (DIR_BLOCK - LEAF_HEADER) / 11;
/// Clean leaves a directory keeps in memory; past it they are dropped (re-read on use).
pub const MAX_CACHED_LEAVES: usize = 1024;

/// The hash of a name that places it in the table: the first 8 bytes of BLAKE3 of its
/// UTF-8 bytes, little-endian. Stored directories depend on it: it never changes.
pub fn name_hash(name: &str) -> u64 {
    let h = blake3::hash(name.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// A name hash function (`name_hash`; tests use weaker ones to force collisions).
pub type HashFn = fn(&str) -> u64;

/// Bytes one entry takes in a leaf.
pub fn leaf_entry_len(name: &str) -> usize {
    1 + name.len() + 8 + 1
}

/// The table slot of a hash (its top 16 bits).
pub fn slot_of(hash: u64) -> usize {
    (hash >> (64 - TABLE_BITS)) as usize
}

/// The top `depth` bits of a hash.
pub fn prefix_of(hash: u64, depth: u8) -> u32 {
    if depth == 0 {
        0
    } else {
        (hash >> (64 - u32::from(depth))) as u32
    }
}

/// The slots a leaf of `depth` and `prefix` owns.
pub fn slots_of(depth: u8, prefix: u32) -> std::ops::Range<usize> {
    let span = 1usize << (TABLE_BITS - u32::from(depth.min(MAX_DEPTH)));
    let first = prefix as usize * span;
    first..first + span
}

/// Whether an object's first bytes are a DIR2 header.
pub fn is_dir2(first: &[u8]) -> bool {
    first.len() >= 4 && first[..4] == *b"DIR2"
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && !name.contains('/')
}

// ---- block 0: the header ---------------------------------------------------------------

/// The header (block 0).
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 4 | magic "DIR2" |
/// | 4 | 4 | version (1) |
/// | 8 | 4 | hash function (1: BLAKE3, first 8 bytes LE) |
/// | 12 | 4 | table bits (16) |
/// | 16 | 4 | block size (16384) |
/// | 20 | 4 | table blocks (16, blocks 1 ..= 16) |
/// | 24 | 8 | entries |
/// | 32 | 8 | leaves (= next block − 17) |
/// | 40 | 8 | next block (first never used; leaves are blocks 17 .. next block − 1) |
/// | 48 | … | zeros |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub entries: u64,
    pub leaves: u64,
    pub next_block: u64,
}

impl Header {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(HEADER_MAGIC)
            .u32(VERSION)
            .u32(HASH_BLAKE3_64)
            .u32(TABLE_BITS)
            .u32(DIR_BLOCK as u32)
            .u32(TABLE_BLOCKS as u32)
            .u64(self.entries)
            .u64(self.leaves)
            .u64(self.next_block);
        w.buf.resize(DIR_BLOCK, 0);
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<Header, DecodeError> {
        let mut r = Reader::new(buf, "DIR2 directory header");
        r.magic(&HEADER_MAGIC.to_le_bytes())?;
        r.version(VERSION, VERSION)?;
        let expect = |r: &mut Reader, what: &str, want: u32| -> Result<(), DecodeError> {
            let v = r.u32()?;
            if v != want {
                return Err(r.err(format!("{what} {v}, expected {want}")));
            }
            Ok(())
        };
        expect(&mut r, "hash function", HASH_BLAKE3_64)?;
        expect(&mut r, "table bits", TABLE_BITS)?;
        expect(&mut r, "block size", DIR_BLOCK as u32)?;
        expect(&mut r, "table blocks", TABLE_BLOCKS as u32)?;
        let h = Header {
            entries: r.u64()?,
            leaves: r.u64()?,
            next_block: r.u64()?,
        };
        if h.leaves == 0
            || h.leaves > MAX_LEAVES
            || h.next_block.checked_sub(FIRST_LEAF) != Some(h.leaves)
        {
            return Err(r.err(format!(
                "{} leaves with next block {}",
                h.leaves, h.next_block
            )));
        }
        if h.entries > h.leaves * MAX_LEAF_ENTRIES as u64 {
            return Err(r.err(format!("{} entries in {} leaves", h.entries, h.leaves)));
        }
        Ok(h)
    }
}

// ---- blocks 1 ..= 16: the pointer table ------------------------------------------------

/// One table block: `SLOTS_PER_BLOCK` leaf block ids, u32 each.
pub fn encode_table(slots: &[u32]) -> Vec<u8> {
    let mut w = Writer::new();
    for &s in slots {
        w.u32(s);
    }
    w.buf.resize(DIR_BLOCK, 0);
    w.buf
}

/// Decodes a table block; every id must name a leaf below `next_block`.
pub fn decode_table(buf: &[u8], next_block: u64) -> Result<Vec<u32>, DecodeError> {
    let mut r = Reader::new(buf, "DIR2 pointer table");
    let mut slots = Vec::with_capacity(SLOTS_PER_BLOCK);
    for i in 0..SLOTS_PER_BLOCK {
        let id = r.u32()?;
        if u64::from(id) < FIRST_LEAF || u64::from(id) >= next_block {
            return Err(r.err(format!(
                "slot {i} points to block {id}, not a leaf (leaves are {FIRST_LEAF}..{next_block})"
            )));
        }
        slots.push(id);
    }
    Ok(slots)
}

// ---- blocks 17 ..: leaves --------------------------------------------------------------

/// One name in a leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafEntry {
    pub hash: u64,
    pub name: String,
    pub entry: DirEntry,
}

/// A leaf block.
///
/// ```text
///  magic u32 "DLF2" | depth u8 | zero u8 | count u16 | prefix u32 | reserved u32 (zero)
///  count × (name length u8 | name (UTF-8, 1..=255 bytes, no '/') | object u64 | kind u8)
///  zeros to the end of the block
/// ```
/// Entries are sorted by (hash, name bytes), strictly; every hash starts with the prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub depth: u8,
    pub prefix: u32,
    entries: Vec<LeafEntry>,
    /// Encoded bytes (header included).
    bytes: usize,
}

impl Leaf {
    pub fn new(depth: u8, prefix: u32) -> Leaf {
        Leaf {
            depth,
            prefix,
            entries: Vec::new(),
            bytes: LEAF_HEADER,
        }
    }

    pub fn entries(&self) -> &[LeafEntry] {
        &self.entries
    }

    /// Encoded bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether names of this hash belong here.
    pub fn covers(&self, hash: u64) -> bool {
        prefix_of(hash, self.depth) == self.prefix
    }

    fn find(&self, hash: u64, name: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|e| (e.hash, e.name.as_bytes()).cmp(&(hash, name.as_bytes())))
    }

    fn set_entries(&mut self, entries: Vec<LeafEntry>) {
        self.bytes = LEAF_HEADER
            + entries
                .iter()
                .map(|e| leaf_entry_len(&e.name))
                .sum::<usize>();
        self.entries = entries;
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(LEAF_MAGIC)
            .u8(self.depth)
            .u8(0)
            .u16(self.entries.len() as u16)
            .u32(self.prefix)
            .u32(0);
        for e in &self.entries {
            w.u8(e.name.len() as u8)
                .raw(e.name.as_bytes())
                .u64(e.entry.object)
                .u8(e.entry.kind as u8);
        }
        debug_assert_eq!(w.buf.len(), self.bytes);
        w.buf.resize(DIR_BLOCK, 0);
        w.buf
    }

    /// Decodes a leaf whose names are placed by `name_hash`.
    pub fn decode(buf: &[u8]) -> Result<Leaf, DecodeError> {
        Leaf::decode_with(buf, name_hash)
    }

    pub fn decode_with(buf: &[u8], hash: HashFn) -> Result<Leaf, DecodeError> {
        let mut r = Reader::new(buf, "DIR2 directory leaf");
        r.magic(&LEAF_MAGIC.to_le_bytes())?;
        let depth = r.u8()?;
        let _zero = r.u8()?;
        let count = r.u16()? as usize;
        let prefix = r.u32()?;
        let _reserved = r.u32()?;
        if depth > MAX_DEPTH {
            return Err(r.err(format!("depth {depth} (at most {MAX_DEPTH})")));
        }
        if u64::from(prefix) >> depth != 0 {
            return Err(r.err(format!("prefix {prefix:#x} longer than depth {depth}")));
        }
        if count > MAX_LEAF_ENTRIES {
            return Err(r.err(format!("{count} entries")));
        }
        let mut leaf = Leaf::new(depth, prefix);
        leaf.entries.reserve(count);
        for _ in 0..count {
            let len = r.u8()? as usize;
            let raw = r.fixed(len)?;
            let name = std::str::from_utf8(raw)
                .map_err(|_| r.err("name is not UTF-8"))?
                .to_string();
            let object = r.u64()?;
            let k = r.u8()?;
            let kind = entry_kind(k).ok_or_else(|| r.err(format!("entry kind {k}")))?;
            if !valid_name(&name) {
                return Err(r.err(format!("bad entry name {name:?}")));
            }
            let h = hash(&name);
            if !leaf.covers(h) {
                return Err(r.err(format!(
                    "{name:?} (hash {h:#018x}) is not under prefix {prefix:#x}/{depth}"
                )));
            }
            if let Some(last) = leaf.entries.last() {
                if (last.hash, last.name.as_bytes()) >= (h, name.as_bytes()) {
                    return Err(r.err(format!("{name:?} out of order")));
                }
            }
            leaf.entries.push(LeafEntry {
                hash: h,
                name,
                entry: DirEntry { object, kind },
            });
        }
        leaf.bytes = r.position();
        if leaf.bytes > DIR_BLOCK {
            return Err(r.err(format!("{} bytes of entries", leaf.bytes)));
        }
        Ok(leaf)
    }
}

// ---- the directory in memory -----------------------------------------------------------

/// Where a `HashedDir` reads the blocks it does not hold (the directory object).
pub(crate) trait BlockSource {
    /// `count` blocks from block `first` on: `count × DIR_BLOCK` bytes.
    fn read_blocks(&mut self, first: u64, count: usize) -> Result<Vec<u8>, StoreError>;
}

/// A source with no blocks: a directory being built in memory holds all of its own.
struct NoBlocks(u64);

impl BlockSource for NoBlocks {
    fn read_blocks(&mut self, first: u64, _count: usize) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::corrupt_object(
            "directory",
            self.0,
            format!("block {first} read while converting it"),
        ))
    }
}

#[derive(Clone)]
struct TableBlock {
    slots: Vec<u32>,
    dirty: bool,
}

#[derive(Clone)]
struct CachedLeaf {
    leaf: Leaf,
    dirty: bool,
}

/// A DIR2 directory in the open txg: its header, and the table blocks and leaves it has
/// read (clean) or changed (dirty, written at the next sync by `take_dirty`).
#[derive(Clone)]
pub(crate) struct HashedDir {
    id: u64,
    hash: HashFn,
    header: Header,
    header_dirty: bool,
    /// Table block index (0..16, object block 1 + index) → its slots.
    table: HashMap<u64, TableBlock>,
    /// Leaf block id → leaf.
    leaves: HashMap<u64, CachedLeaf>,
    /// Built from a DIR1 directory: every block is in memory and the object is rewritten
    /// whole (truncated first) at the next sync.
    rewrite_all: bool,
}

/// Blocks to write for a directory at a sync.
pub(crate) struct DirtyBlocks {
    /// Truncate the object to nothing first (a conversion from DIR1).
    pub rewrite_all: bool,
    /// (block id, `DIR_BLOCK` bytes), by block id.
    pub blocks: Vec<(u64, Vec<u8>)>,
}

fn corrupt(id: u64, e: DecodeError) -> StoreError {
    StoreError::corrupt_object("directory", id, e)
}

impl HashedDir {
    /// The directory whose header block (block 0) is `block0`.
    pub fn open(id: u64, block0: &[u8], hash: HashFn) -> Result<HashedDir, StoreError> {
        let header = Header::decode(block0).map_err(|e| corrupt(id, e))?;
        Ok(HashedDir {
            id,
            hash,
            header,
            header_dirty: false,
            table: HashMap::new(),
            leaves: HashMap::new(),
            rewrite_all: false,
        })
    }

    /// A new DIR2 directory holding `entries` (the conversion of a DIR1 directory).
    pub fn from_entries(
        id: u64,
        hash: HashFn,
        entries: impl IntoIterator<Item = (String, DirEntry)>,
    ) -> Result<HashedDir, StoreError> {
        let mut d = HashedDir {
            id,
            hash,
            header: Header {
                entries: 0,
                leaves: 1,
                next_block: FIRST_LEAF + 1,
            },
            header_dirty: true,
            table: (0..TABLE_BLOCKS)
                .map(|k| {
                    let slots = vec![FIRST_LEAF as u32; SLOTS_PER_BLOCK];
                    (k, TableBlock { slots, dirty: true })
                })
                .collect(),
            leaves: HashMap::from([(
                FIRST_LEAF,
                CachedLeaf {
                    leaf: Leaf::new(0, 0),
                    dirty: true,
                },
            )]),
            rewrite_all: true,
        };
        let mut none = NoBlocks(id);
        for (name, e) in entries {
            d.insert(&mut none, &name, e)?;
        }
        Ok(d)
    }

    pub fn len(&self) -> u64 {
        self.header.entries
    }

    pub fn header(&self) -> Header {
        self.header
    }

    pub fn is_dirty(&self) -> bool {
        self.header_dirty
            || self.table.values().any(|t| t.dirty)
            || self.leaves.values().any(|l| l.dirty)
    }

    /// Blocks the next sync writes for this directory.
    pub fn dirty_blocks(&self) -> usize {
        usize::from(self.header_dirty)
            + self.table.values().filter(|t| t.dirty).count()
            + self.leaves.values().filter(|l| l.dirty).count()
    }

    /// Leaves held in memory.
    pub fn cached_leaves(&self) -> usize {
        self.leaves.len()
    }

    /// Entries held in memory (a measure of the memory it takes).
    pub fn cached_entries(&self) -> usize {
        self.leaves.values().map(|l| l.leaf.entries.len()).sum()
    }

    /// Drops every clean leaf and table block (they are read again when needed).
    pub fn drop_clean(&mut self) {
        self.leaves.retain(|_, l| l.dirty);
        self.table.retain(|_, t| t.dirty);
    }

    fn table_block(
        &mut self,
        src: &mut dyn BlockSource,
        k: u64,
    ) -> Result<&mut TableBlock, StoreError> {
        if !self.table.contains_key(&k) {
            let buf = src.read_blocks(1 + k, 1)?;
            let slots =
                decode_table(&buf, self.header.next_block).map_err(|e| corrupt(self.id, e))?;
            self.table.insert(
                k,
                TableBlock {
                    slots,
                    dirty: false,
                },
            );
        }
        Ok(self.table.get_mut(&k).expect("inserted"))
    }

    fn slot(&mut self, src: &mut dyn BlockSource, slot: usize) -> Result<u64, StoreError> {
        let tb = self.table_block(src, (slot / SLOTS_PER_BLOCK) as u64)?;
        Ok(u64::from(tb.slots[slot % SLOTS_PER_BLOCK]))
    }

    fn load_leaf(&mut self, src: &mut dyn BlockSource, blkid: u64) -> Result<(), StoreError> {
        if self.leaves.contains_key(&blkid) {
            return Ok(());
        }
        if self.leaves.len() >= MAX_CACHED_LEAVES {
            self.leaves.retain(|_, l| l.dirty);
        }
        let buf = src.read_blocks(blkid, 1)?;
        let leaf = Leaf::decode_with(&buf, self.hash).map_err(|e| {
            corrupt(
                self.id,
                DecodeError {
                    why: format!("block {blkid}: {}", e.why),
                    ..e
                },
            )
        })?;
        self.leaves.insert(blkid, CachedLeaf { leaf, dirty: false });
        Ok(())
    }

    /// The block of the leaf that holds names of `hash` (loaded), checked against the table.
    fn find_leaf(&mut self, src: &mut dyn BlockSource, hash: u64) -> Result<u64, StoreError> {
        let slot = slot_of(hash);
        let blkid = self.slot(src, slot)?;
        self.load_leaf(src, blkid)?;
        let leaf = &self.leaves[&blkid].leaf;
        if !leaf.covers(hash) {
            return Err(StoreError::corrupt_object(
                "directory",
                self.id,
                format!(
                    "table slot {slot} points to leaf {blkid} of prefix {:#x}/{}",
                    leaf.prefix, leaf.depth
                ),
            ));
        }
        Ok(blkid)
    }

    pub fn lookup(
        &mut self,
        src: &mut dyn BlockSource,
        name: &str,
    ) -> Result<Option<DirEntry>, StoreError> {
        if !valid_name(name) {
            return Ok(None);
        }
        let hash = (self.hash)(name);
        let blkid = self.find_leaf(src, hash)?;
        let leaf = &self.leaves[&blkid].leaf;
        Ok(leaf.find(hash, name).ok().map(|i| leaf.entries[i].entry))
    }

    /// Adds or replaces `name`; returns the entry it replaced.
    pub fn insert(
        &mut self,
        src: &mut dyn BlockSource,
        name: &str,
        entry: DirEntry,
    ) -> Result<Option<DirEntry>, StoreError> {
        if name.len() > MAX_NAME {
            return Err(StoreError::NameTooLong(name.into()));
        }
        if !valid_name(name) {
            return Err(StoreError::BadName(
                name.into(),
                "not a valid file name".into(),
            ));
        }
        let hash = (self.hash)(name);
        // Each round either inserts or splits the leaf one level deeper: at most 17 rounds.
        loop {
            let blkid = self.find_leaf(src, hash)?;
            let cl = self.leaves.get_mut(&blkid).expect("loaded");
            match cl.leaf.find(hash, name) {
                Ok(i) => {
                    cl.dirty = true;
                    return Ok(Some(std::mem::replace(
                        &mut cl.leaf.entries[i].entry,
                        entry,
                    )));
                }
                Err(i) if cl.leaf.bytes + leaf_entry_len(name) <= DIR_BLOCK => {
                    cl.leaf.entries.insert(
                        i,
                        LeafEntry {
                            hash,
                            name: name.to_string(),
                            entry,
                        },
                    );
                    cl.leaf.bytes += leaf_entry_len(name);
                    cl.dirty = true;
                    self.header.entries += 1;
                    self.header_dirty = true;
                    return Ok(None);
                }
                Err(_) => self.split(src, blkid, name)?,
            }
        }
    }

    /// Splits the full leaf at `blkid` in two (one level deeper).
    fn split(
        &mut self,
        src: &mut dyn BlockSource,
        blkid: u64,
        adding: &str,
    ) -> Result<(), StoreError> {
        let id = self.id;
        let (depth, prefix) = {
            let l = &self.leaves[&blkid].leaf;
            (l.depth, l.prefix)
        };
        if depth >= MAX_DEPTH {
            return Err(StoreError::DirectoryFull(format!(
                "directory object {id}: no room for {adding:?}: its leaf (block {blkid}) is full of names whose hashes share their top {MAX_DEPTH} bits and cannot split further"
            )));
        }
        if self.header.leaves >= MAX_LEAVES {
            return Err(StoreError::corrupt_object(
                "directory",
                id,
                format!("{} leaves and one more needed", self.header.leaves),
            ));
        }
        let new_prefix = (prefix << 1) | 1;
        let moved_slots = slots_of(depth + 1, new_prefix);
        // Read every table block the split rewrites before changing anything.
        let first_k = (moved_slots.start / SLOTS_PER_BLOCK) as u64;
        let last_k = ((moved_slots.end - 1) / SLOTS_PER_BLOCK) as u64;
        for k in first_k..=last_k {
            let tb = self.table_block(src, k)?;
            let base = k as usize * SLOTS_PER_BLOCK;
            let range = moved_slots.start.max(base) - base
                ..moved_slots.end.min(base + SLOTS_PER_BLOCK) - base;
            if let Some(bad) = tb.slots[range].iter().find(|&&s| u64::from(s) != blkid) {
                return Err(StoreError::corrupt_object(
                    "directory",
                    id,
                    format!(
                        "a slot of leaf {blkid} (prefix {prefix:#x}/{depth}) points to block {bad}"
                    ),
                ));
            }
        }
        let new_id = self.header.next_block;
        self.header.next_block += 1;
        self.header.leaves += 1;
        self.header_dirty = true;
        let cl = self.leaves.get_mut(&blkid).expect("loaded");
        // Sorted by hash, the names with bit (63 - depth) set come last.
        let bit = 63 - u32::from(depth);
        let cut = cl
            .leaf
            .entries
            .partition_point(|e| (e.hash >> bit) & 1 == 0);
        let moved = cl.leaf.entries.split_off(cut);
        let kept = std::mem::take(&mut cl.leaf.entries);
        cl.leaf.set_entries(kept);
        cl.leaf.depth = depth + 1;
        cl.leaf.prefix = prefix << 1;
        cl.dirty = true;
        let mut new_leaf = Leaf::new(depth + 1, new_prefix);
        new_leaf.set_entries(moved);
        self.leaves.insert(
            new_id,
            CachedLeaf {
                leaf: new_leaf,
                dirty: true,
            },
        );
        for k in first_k..=last_k {
            let tb = self.table.get_mut(&k).expect("read above");
            let base = k as usize * SLOTS_PER_BLOCK;
            let range = moved_slots.start.max(base) - base
                ..moved_slots.end.min(base + SLOTS_PER_BLOCK) - base;
            tb.slots[range].fill(new_id as u32);
            tb.dirty = true;
        }
        Ok(())
    }

    /// Removes `name`; returns its entry.
    pub fn remove(
        &mut self,
        src: &mut dyn BlockSource,
        name: &str,
    ) -> Result<Option<DirEntry>, StoreError> {
        if !valid_name(name) {
            return Ok(None);
        }
        let hash = (self.hash)(name);
        let blkid = self.find_leaf(src, hash)?;
        let cl = self.leaves.get_mut(&blkid).expect("loaded");
        let Ok(i) = cl.leaf.find(hash, name) else {
            return Ok(None);
        };
        let e = cl.leaf.entries.remove(i);
        cl.leaf.bytes -= leaf_entry_len(&e.name);
        cl.dirty = true;
        self.header.entries = self.header.entries.saturating_sub(1);
        self.header_dirty = true;
        Ok(Some(e.entry))
    }

    /// Every entry, sorted by name. Leaves not in memory are read in runs and not kept.
    pub fn list(&self, src: &mut dyn BlockSource) -> Result<Vec<(String, DirEntry)>, StoreError> {
        const RUN: u64 = 64;
        let mut out: Vec<(String, DirEntry)> =
            Vec::with_capacity(self.header.entries.min(1 << 24) as usize);
        let end = self.header.next_block;
        let mut b = FIRST_LEAF;
        while b < end {
            if let Some(cl) = self.leaves.get(&b) {
                out.extend(cl.leaf.entries.iter().map(|e| (e.name.clone(), e.entry)));
                b += 1;
                continue;
            }
            let mut n = 1;
            while n < RUN && b + n < end && !self.leaves.contains_key(&(b + n)) {
                n += 1;
            }
            let buf = src.read_blocks(b, n as usize)?;
            for (i, block) in buf.chunks(DIR_BLOCK).enumerate() {
                let leaf = Leaf::decode_with(block, self.hash).map_err(|e| {
                    corrupt(
                        self.id,
                        DecodeError {
                            why: format!("block {}: {}", b + i as u64, e.why),
                            ..e
                        },
                    )
                })?;
                out.extend(leaf.entries.into_iter().map(|e| (e.name, e.entry)));
            }
            b += n;
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The changed blocks, encoded; they are clean afterwards.
    pub fn take_dirty(&mut self) -> DirtyBlocks {
        let rewrite_all = std::mem::take(&mut self.rewrite_all);
        let mut blocks = Vec::new();
        if std::mem::take(&mut self.header_dirty) {
            blocks.push((0, self.header.encode()));
        }
        for (&k, tb) in self.table.iter_mut().filter(|(_, t)| t.dirty) {
            tb.dirty = false;
            blocks.push((1 + k, encode_table(&tb.slots)));
        }
        for (&b, cl) in self.leaves.iter_mut().filter(|(_, l)| l.dirty) {
            cl.dirty = false;
            blocks.push((b, cl.leaf.encode()));
        }
        blocks.sort_unstable_by_key(|b| b.0);
        debug_assert!(
            !rewrite_all || blocks.len() as u64 == self.header.next_block,
            "a converted directory has every block in memory"
        );
        DirtyBlocks {
            rewrite_all,
            blocks,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::dnode::ObjectKind;

    /// The blocks of a directory object, in memory.
    #[derive(Default, Clone)]
    struct Mem(HashMap<u64, Vec<u8>>);

    impl BlockSource for Mem {
        fn read_blocks(&mut self, first: u64, count: usize) -> Result<Vec<u8>, StoreError> {
            let mut out = Vec::new();
            for b in first..first + count as u64 {
                out.extend_from_slice(
                    self.0
                        .get(&b)
                        .ok_or_else(|| StoreError::corrupt("directory", format!("no block {b}")))?,
                );
            }
            Ok(out)
        }
    }

    impl Mem {
        fn apply(&mut self, d: DirtyBlocks) {
            if d.rewrite_all {
                self.0.clear();
            }
            for (b, data) in d.blocks {
                assert_eq!(data.len(), DIR_BLOCK);
                self.0.insert(b, data);
            }
        }
    }

    fn file(object: u64) -> DirEntry {
        DirEntry {
            object,
            kind: ObjectKind::File,
        }
    }

    fn long_name(i: usize) -> String {
        format!("{i:08}-{}", "x".repeat(200))
    }

    #[test]
    fn header_table_and_leaf_round_trip() {
        let h = Header {
            entries: 5,
            leaves: 3,
            next_block: FIRST_LEAF + 3,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        assert!(is_dir2(&h.encode()));
        let slots: Vec<u32> = (0..SLOTS_PER_BLOCK as u32).map(|i| 17 + i % 3).collect();
        assert_eq!(decode_table(&encode_table(&slots), 20).unwrap(), slots);
        assert!(decode_table(&encode_table(&slots), 19).is_err());
        let mut leaf = Leaf::new(0, 0);
        let mut entries: Vec<LeafEntry> = ["a", "b", "ça", "d"]
            .iter()
            .enumerate()
            .map(|(i, n)| LeafEntry {
                hash: name_hash(n),
                name: n.to_string(),
                entry: file(i as u64 + 10),
            })
            .collect();
        entries.sort_by(|a, b| (a.hash, &a.name).cmp(&(b.hash, &b.name)));
        leaf.set_entries(entries);
        let back = Leaf::decode(&leaf.encode()).unwrap();
        assert_eq!(back, leaf);
        // The hash is BLAKE3's first 8 bytes, little-endian: pinned, it may never change.
        // BLAKE3("") = af1349b9f5f9a1a6…, BLAKE3("abc") = 6437b3ac38465133… (the BLAKE3
        // test vectors): the first 8 bytes, read little-endian.
        assert_eq!(name_hash(""), 0xa6a1_f9f5_b949_13af);
        assert_eq!(name_hash("abc"), 0x3351_4638_acb3_3764);
    }

    #[test]
    fn splits_lookups_removals_and_reopen() {
        let mut d = HashedDir::from_entries(7, name_hash, Vec::new()).unwrap();
        let mut mem = Mem::default();
        let mut model = BTreeMap::new();
        for i in 0..3000 {
            let n = long_name(i);
            assert_eq!(d.insert(&mut mem, &n, file(i as u64)).unwrap(), None);
            model.insert(n, file(i as u64));
        }
        assert!(d.header().leaves > 10, "{:?}", d.header());
        mem.apply(d.take_dirty());
        let mut d = HashedDir::open(7, &mem.0[&0], name_hash).unwrap();
        assert_eq!(d.len(), 3000);
        for i in (0..3000).step_by(7) {
            assert_eq!(
                d.lookup(&mut mem, &long_name(i)).unwrap(),
                Some(file(i as u64))
            );
        }
        assert_eq!(d.lookup(&mut mem, "absent").unwrap(), None);
        for i in (0..3000).step_by(2) {
            assert_eq!(
                d.remove(&mut mem, &long_name(i)).unwrap(),
                Some(file(i as u64))
            );
            model.remove(&long_name(i));
        }
        // Only the changed blocks are written.
        assert!(d.dirty_blocks() as u64 <= d.header().next_block);
        mem.apply(d.take_dirty());
        let d = HashedDir::open(7, &mem.0[&0], name_hash).unwrap();
        let listed: BTreeMap<String, DirEntry> = d.list(&mut mem).unwrap().into_iter().collect();
        assert_eq!(listed, model);
        assert_eq!(d.len(), 1500);
    }

    #[test]
    fn one_insert_dirties_few_blocks() {
        let mut d = HashedDir::from_entries(7, name_hash, Vec::new()).unwrap();
        let mut mem = Mem::default();
        for i in 0..5000 {
            d.insert(&mut mem, &long_name(i), file(1)).unwrap();
        }
        mem.apply(d.take_dirty());
        let mut d = HashedDir::open(7, &mem.0[&0], name_hash).unwrap();
        d.insert(&mut mem, "one more", file(2)).unwrap();
        // Header and one leaf (a split would add a leaf and a table block or two).
        assert!(d.dirty_blocks() <= 4, "{}", d.dirty_blocks());
        assert!(d.cached_leaves() <= 2);
    }

    /// Hashes that agree on their top 16 bits: every name lands in one slot.
    fn colliding(name: &str) -> u64 {
        0xabcd_0000_0000_0000 | (name_hash(name) >> 16)
    }

    #[test]
    fn names_sharing_a_slot_fill_it_then_get_no_space() {
        let mut d = HashedDir::from_entries(7, colliding, Vec::new()).unwrap();
        let mut mem = Mem::default();
        let mut n = 0;
        let err = loop {
            match d.insert(&mut mem, &long_name(n), file(n as u64)) {
                Ok(None) => n += 1,
                Ok(Some(_)) => panic!("names are distinct"),
                Err(e) => break e,
            }
            assert!(n < 10_000, "the slot never filled");
        };
        assert!(matches!(err, StoreError::DirectoryFull(_)), "{err}");
        assert!(n > 50, "{n}");
        // Everything inserted is still there, in a directory that writes and reopens.
        mem.apply(d.take_dirty());
        let mut d = HashedDir::open(7, &mem.0[&0], colliding).unwrap();
        assert_eq!(d.len(), n as u64);
        for i in 0..n {
            assert_eq!(
                d.lookup(&mut mem, &long_name(i)).unwrap(),
                Some(file(i as u64))
            );
        }
        // A name of another slot still fits; removing one makes room again.
        assert!(d.remove(&mut mem, &long_name(0)).unwrap().is_some());
        d.insert(&mut mem, &long_name(n), file(1)).unwrap();
    }

    #[test]
    fn equal_hashes_are_told_apart_by_name() {
        fn constant(_: &str) -> u64 {
            42
        }
        let mut d = HashedDir::from_entries(7, constant, Vec::new()).unwrap();
        let mut mem = Mem::default();
        for i in 0..50 {
            d.insert(&mut mem, &format!("n{i}"), file(i)).unwrap();
        }
        for i in 0..50 {
            assert_eq!(d.lookup(&mut mem, &format!("n{i}")).unwrap(), Some(file(i)));
        }
        assert_eq!(d.lookup(&mut mem, "n50").unwrap(), None);
    }

    #[test]
    fn damaged_table_is_an_error() {
        let mut d = HashedDir::from_entries(7, name_hash, Vec::new()).unwrap();
        let mut mem = Mem::default();
        for i in 0..2000 {
            d.insert(&mut mem, &long_name(i), file(1)).unwrap();
        }
        mem.apply(d.take_dirty());
        // Point every slot of table block 3 at the first leaf: lookups there must notice.
        let first_leaf = FIRST_LEAF as u32;
        mem.0
            .insert(4, encode_table(&vec![first_leaf; SLOTS_PER_BLOCK]));
        let mut d = HashedDir::open(7, &mem.0[&0], name_hash).unwrap();
        let mut errors = 0;
        for i in 0..2000 {
            match d.lookup(&mut mem, &long_name(i)) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a name went missing without an error"),
                Err(e) if e.is_corrupt() => errors += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(errors > 0);
    }

    proptest::proptest! {
        #[test]
        fn header_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100)) {
            let _ = Header::decode(&bytes);
            let mut with_magic = b"DIR2".to_vec();
            with_magic.extend_from_slice(&bytes);
            if let Ok(h) = Header::decode(&with_magic) {
                proptest::prop_assert_eq!(Header::decode(&h.encode()), Ok(h));
            }
        }

        #[test]
        fn table_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), next in 0u64..100) {
            let _ = decode_table(&bytes, next);
        }

        #[test]
        fn leaf_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = Leaf::decode(&bytes);
            let mut with_magic = b"DLF2".to_vec();
            with_magic.extend_from_slice(&bytes);
            if let Ok(leaf) = Leaf::decode(&with_magic) {
                // What decodes re-encodes to the same leaf (as the fuzz target checks).
                proptest::prop_assert_eq!(Leaf::decode(&leaf.encode()), Ok(leaf));
            }
        }

        #[test]
        fn damaged_leaf_decode_never_panics(
            flips in proptest::collection::vec((0usize..600, proptest::prelude::any::<u8>()), 1..8),
            cut in 0usize..DIR_BLOCK,
        ) {
            let mut leaf = Leaf::new(0, 0);
            let mut entries: Vec<LeafEntry> = (0..40)
                .map(|i| {
                    let name = format!("name{i}");
                    LeafEntry { hash: name_hash(&name), name, entry: file(i) }
                })
                .collect();
            entries.sort_by(|a, b| (a.hash, &a.name).cmp(&(b.hash, &b.name)));
            leaf.set_entries(entries);
            let mut buf = leaf.encode();
            for (at, v) in flips {
                buf[at] ^= v;
            }
            let _ = Leaf::decode(&buf[..cut.max(1)]);
            let _ = Leaf::decode(&buf);
        }

    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Random inserts and removals against a map, with a weak hash (64 distinct slots)
        /// so that leaves split deep; written and reopened now and then.
        #[test]
        fn model(ops in proptest::collection::vec((0u8..10, 0usize..1500), 1..2500)) {
            fn weak(name: &str) -> u64 {
                name_hash(name) & 0xfc00_ffff_ffff_ffff
            }
            let mut d = HashedDir::from_entries(9, weak, Vec::new()).unwrap();
            let mut mem = Mem::default();
            let mut model: BTreeMap<String, DirEntry> = BTreeMap::new();
            for (op, i) in ops {
                let name = format!("{i}-{}", "y".repeat(i % 120));
                match op {
                    0..=4 => {
                        let r = d.insert(&mut mem, &name, file(i as u64));
                        match r {
                            Ok(old) => proptest::prop_assert_eq!(old, model.insert(name, file(i as u64))),
                            Err(StoreError::DirectoryFull(_)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    5..=7 => proptest::prop_assert_eq!(d.remove(&mut mem, &name).unwrap(), model.remove(&name)),
                    8 => proptest::prop_assert_eq!(d.lookup(&mut mem, &name).unwrap(), model.get(&name).copied()),
                    _ => {
                        mem.apply(d.take_dirty());
                        d = HashedDir::open(9, &mem.0[&0], weak).unwrap();
                    }
                }
                proptest::prop_assert_eq!(d.len(), model.len() as u64);
            }
            mem.apply(d.take_dirty());
            let d = HashedDir::open(9, &mem.0[&0], weak).unwrap();
            let listed: BTreeMap<String, DirEntry> = d.list(&mut mem).unwrap().into_iter().collect();
            proptest::prop_assert_eq!(listed, model);
        }
    }
}
