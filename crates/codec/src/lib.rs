//! Explicit little-endian encoding helpers for every on-disk structure of cairn, from the
//! label and block pointer up to directories and streams. The reader checks every length,
//! so decoding damaged metadata returns a `DecodeError` (what, at which byte, which kind of
//! damage) and never panics.
//!
//! Versions: a structure newer than this code is not damage. A magic ending in a digit
//! (`"DIR1"`, `"DLF2"`, `"CAIRNOS1"`) carries its structure's version in that digit, and a
//! version field carries it in a number; `Reader::magic` and `Reader::version` return
//! `DecodeKind::NewerVersion` for a higher one, which callers report as "upgrade cairn",
//! never as corruption (docs/format.md).

/// What kind of problem a decoder found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeKind {
    /// The bytes end (or a count or length says they should go on) before the structure.
    Truncated,
    /// A field holds a value the structure cannot have (a bad magic, kind, size, UTF-8…).
    BadValue,
    /// The structure is a newer version than this code reads (a magic with a higher digit,
    /// a higher version field): not damage, the pool needs a newer cairn.
    NewerVersion,
}

/// Why bytes could not be decoded: what, where (the byte offset in the decoded buffer at
/// which the decoder stopped) and which kind of problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct DecodeError {
    pub what: &'static str,
    pub offset: usize,
    pub kind: DecodeKind,
    pub why: String,
}

impl DecodeError {
    /// A field at `offset` of `what` holds an impossible value.
    pub fn bad_value(what: &'static str, offset: usize, why: impl Into<String>) -> DecodeError {
        DecodeError {
            what,
            offset,
            kind: DecodeKind::BadValue,
            why: why.into(),
        }
    }

    /// `what` ends at `offset`, before its structure does.
    pub fn truncated(what: &'static str, offset: usize, why: impl Into<String>) -> DecodeError {
        DecodeError {
            what,
            offset,
            kind: DecodeKind::Truncated,
            why: why.into(),
        }
    }

    /// The magic or version at `offset` of `what` is newer than this code reads; `why`
    /// names both ("version 3; this cairn reads 2").
    pub fn newer_version(what: &'static str, offset: usize, why: impl Into<String>) -> DecodeError {
        DecodeError {
            what,
            offset,
            kind: DecodeKind::NewerVersion,
            why: why.into(),
        }
    }

    /// Whether this is a newer version rather than damage ("upgrade cairn").
    pub fn is_newer_version(&self) -> bool {
        self.kind == DecodeKind::NewerVersion
    }

    /// The same problem seen from a structure that holds the one decoded at byte `base` of
    /// its own buffer (a block pointer inside a dnode): the outer `what`, the offset in the
    /// outer buffer, the inner structure named in `why`, the kind kept.
    pub fn within(self, what: &'static str, base: usize) -> DecodeError {
        if self.what == what {
            return DecodeError {
                offset: base.saturating_add(self.offset),
                ..self
            };
        }
        DecodeError {
            what,
            offset: base.saturating_add(self.offset),
            kind: self.kind,
            why: format!("{}: {}", self.what, self.why),
        }
    }

    fn describe(&self) -> String {
        match self.kind {
            DecodeKind::NewerVersion => format!(
                "{} ({}) is newer than this cairn understands: upgrade cairn",
                self.what, self.why
            ),
            DecodeKind::Truncated | DecodeKind::BadValue => {
                format!("corrupt {}: {}", self.what, self.why)
            }
        }
    }
}

/// Whether `found` is a newer version of the magic `want`: `want` ends in a digit (its
/// version), and `found` has the same bytes before it and a higher digit ("DIR3" for
/// "DIR1"). A magic without a final digit has no newer versions.
pub fn is_newer_magic(found: &[u8], want: &[u8]) -> bool {
    let (Some((&f, f_family)), Some((&w, w_family))) = (found.split_last(), want.split_last())
    else {
        return false;
    };
    f_family == w_family && w.is_ascii_digit() && f.is_ascii_digit() && f > w
}

/// Bytes of a magic for messages: `"DIR1"`, with anything not printable escaped.
fn show_magic(b: &[u8]) -> String {
    format!("\"{}\"", b.escape_ascii())
}

pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer { buf: Vec::new() }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Bytes as they are (no length before them).
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, what }
    }
    /// A bad value found at the current position.
    pub fn err(&self, why: impl Into<String>) -> DecodeError {
        DecodeError::bad_value(self.what, self.pos, why)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                DecodeError::truncated(
                    self.what,
                    self.pos,
                    format!("truncated at byte {}", self.pos),
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// The next `n` bytes (a length known from elsewhere).
    pub fn fixed(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        self.take(n)
    }
    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> Result<String, DecodeError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("string is not UTF-8"))
    }
    /// Whether every byte has been read (an optional trailing section is absent).
    pub fn is_at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }
    /// A count of items that each need at least `min_item` bytes (guards allocations).
    pub fn count(&mut self, min_item: usize) -> Result<usize, DecodeError> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item.max(1) as u64) > left {
            return Err(DecodeError::truncated(
                self.what,
                self.pos,
                format!("count {n} exceeds the data"),
            ));
        }
        Ok(n as usize)
    }
    /// A magic: `want` exactly. A newer version of it (`is_newer_magic`: the same family
    /// with a higher final digit) is `DecodeKind::NewerVersion`; anything else a bad value.
    pub fn magic(&mut self, want: &[u8]) -> Result<(), DecodeError> {
        let at = self.pos;
        let found = self.take(want.len())?;
        if found == want {
            return Ok(());
        }
        let shown = (show_magic(found), show_magic(want));
        if is_newer_magic(found, want) {
            return Err(DecodeError::newer_version(
                self.what,
                at,
                format!("magic {}; this cairn reads {}", shown.0, shown.1),
            ));
        }
        Err(DecodeError::bad_value(
            self.what,
            at,
            format!("bad magic {} (expected {})", shown.0, shown.1),
        ))
    }
    /// A u32 version field this code reads from `oldest` to `newest`: above is
    /// `DecodeKind::NewerVersion`, below a bad value.
    pub fn version(&mut self, oldest: u32, newest: u32) -> Result<u32, DecodeError> {
        let at = self.pos;
        let v = self.u32()?;
        let reads = if oldest == newest {
            format!("{newest}")
        } else {
            format!("{oldest} to {newest}")
        };
        if v > newest {
            return Err(DecodeError::newer_version(
                self.what,
                at,
                format!("version {v}; this cairn reads {reads}"),
            ));
        }
        if v < oldest {
            return Err(DecodeError::bad_value(
                self.what,
                at,
                format!("version {v} (this cairn reads {reads})"),
            ));
        }
        Ok(v)
    }
    /// Decodes the next `n` bytes with `decode` (a structure held inside this one, like a
    /// block pointer in a dnode); its errors are seen from here (`DecodeError::within`).
    pub fn nested<T>(
        &mut self,
        n: usize,
        decode: impl FnOnce(&'a [u8]) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        let at = self.pos;
        let bytes = self.take(n)?;
        decode(bytes).map_err(|e| e.within(self.what, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_where_and_what_kind() {
        let mut w = Writer::new();
        w.u32(7).u64(1000);
        let mut r = Reader::new(&w.buf, "test record");
        assert_eq!(r.u32().unwrap(), 7);
        let e = r.count(16).unwrap_err();
        assert_eq!((e.offset, e.kind), (12, DecodeKind::Truncated));
        let mut r = Reader::new(&w.buf[..6], "test record");
        r.u32().unwrap();
        let e = r.u64().unwrap_err();
        assert_eq!((e.offset, e.kind), (4, DecodeKind::Truncated));
        assert_eq!(e.to_string(), "corrupt test record: truncated at byte 4");
        let e = Reader::new(&[], "x").err("bad magic");
        assert_eq!((e.offset, e.kind), (0, DecodeKind::BadValue));
    }

    #[test]
    fn a_higher_magic_digit_is_a_newer_version_not_damage() {
        let read = |bytes: &[u8], want: &[u8]| Reader::new(bytes, "thing").magic(want);
        assert_eq!(read(b"DIR1", b"DIR1"), Ok(()));
        let e = read(b"DIR3", b"DIR1").unwrap_err();
        assert_eq!((e.offset, e.kind), (0, DecodeKind::NewerVersion));
        assert_eq!(
            e.to_string(),
            "thing (magic \"DIR3\"; this cairn reads \"DIR1\") is newer than this cairn \
             understands: upgrade cairn"
        );
        assert!(e.is_newer_version());
        let e = read(b"CAIRNOS2", b"CAIRNOS1").unwrap_err();
        assert_eq!(e.kind, DecodeKind::NewerVersion);
        // A lower digit, another family, a non-digit or a magic without a digit: damage.
        for (found, want) in [
            (&b"DLF1"[..], &b"DLF2"[..]),
            (b"DIX2", b"DIR1"),
            (b"DIRx", b"DIR1"),
            (b"ELOH", b"ELOG"),
            (b"\0\0\0\0", b"DIR1"),
        ] {
            let e = read(found, want).unwrap_err();
            assert_eq!(e.kind, DecodeKind::BadValue, "{e}");
            assert!(e.to_string().starts_with("corrupt thing: bad magic"), "{e}");
        }
        assert_eq!(
            read(b"DI", b"DIR1").unwrap_err().kind,
            DecodeKind::Truncated
        );
    }

    #[test]
    fn version_fields_above_the_code_are_newer_below_are_damage() {
        let mut w = Writer::new();
        w.u32(2).u32(3).u32(0);
        let mut r = Reader::new(&w.buf, "space map");
        assert_eq!(r.version(2, 2), Ok(2));
        let e = r.version(2, 2).unwrap_err();
        assert_eq!((e.offset, e.kind), (4, DecodeKind::NewerVersion));
        assert_eq!(e.why, "version 3; this cairn reads 2");
        let e = r.version(1, 2).unwrap_err();
        assert_eq!((e.offset, e.kind), (8, DecodeKind::BadValue));
        assert_eq!(
            e.to_string(),
            "corrupt space map: version 0 (this cairn reads 1 to 2)"
        );
    }

    #[test]
    fn nested_errors_name_both_structures_and_keep_the_kind() {
        let inner = |b: &[u8]| -> Result<u8, DecodeError> {
            let mut r = Reader::new(b, "block pointer");
            r.u8()?;
            r.magic(b"BP1")?;
            Ok(0)
        };
        let mut w = Writer::new();
        w.u64(0).u8(9).raw(b"BP2");
        let mut r = Reader::new(&w.buf, "dnode");
        r.u64().unwrap();
        let e = r.nested(4, inner).unwrap_err();
        assert_eq!(
            (e.what, e.offset, e.kind),
            ("dnode", 9, DecodeKind::NewerVersion)
        );
        assert!(e.why.starts_with("block pointer: magic"), "{}", e.why);
        let mut r = Reader::new(&w.buf[..10], "dnode");
        r.u64().unwrap();
        assert_eq!(r.nested(4, inner).unwrap_err().kind, DecodeKind::Truncated);
        // Seen from a structure of the same name: only the offset moves.
        let e = DecodeError::bad_value("dnode", 3, "kind 9").within("dnode", 256);
        assert_eq!((e.offset, e.why.as_str()), (259, "kind 9"));
    }

    #[test]
    fn no_input_makes_the_reader_panic() {
        // Every prefix of a buffer, every read: errors only.
        let mut w = Writer::new();
        w.raw(b"DIR1")
            .u32(1)
            .u64(u64::MAX)
            .str("name")
            .bytes(&[1, 2, 3]);
        for cut in 0..=w.buf.len() {
            let mut r = Reader::new(&w.buf[..cut], "x");
            let _ = r.magic(b"DIR1");
            let _ = r.version(1, 1);
            let _ = r.count(1);
            let _ = r.str();
            let _ = r.bytes();
            let _ = r.fixed(usize::MAX);
            let _ = r.nested(usize::MAX, |_| Ok(()));
            let _ = (
                r.u8(),
                r.u16(),
                r.u32(),
                r.u64(),
                r.position(),
                r.is_at_end(),
            );
        }
    }
}
