//! Explicit little-endian encoding helpers for on-disk structures. The reader checks every
//! length, so decoding damaged metadata returns an error and never panics.

/// What kind of damage a decoder found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeKind {
    /// The bytes end (or a count or length says they should go on) before the structure.
    Truncated,
    /// A field holds a value the structure cannot have (a bad magic, kind, size, UTF-8…).
    BadValue,
}

/// Why bytes could not be decoded: what, where (the byte offset in the decoded buffer at
/// which the decoder stopped) and which kind of damage.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt {what}: {why}")]
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
}
