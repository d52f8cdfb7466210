//! Extended attributes as ext3 stores them: in an xattr block (shared by
//! reference count) or in the spare space after a large inode's fixed part.
//!
//! Values in external inodes (ea_inode) are not supported, and no checksums
//! are written (ext3 has no metadata_csum).

use super::bytes::{self, le16, le32, put_bytes, put_le16, put_le32};
use super::FormatError;

pub const EXT2_XATTR_MAGIC: u32 = 0xEA02_0000;
/// Size of `struct ext2_xattr_header`.
pub const XATTR_HEADER_LEN: usize = 32;
/// Size of the in-inode header (just `h_magic`).
pub const XATTR_IBODY_HEADER_LEN: usize = 4;
/// Size of `struct ext2_xattr_entry` before the name.
pub const XATTR_ENTRY_LEN: usize = 16;

pub const EXT2_XATTR_INDEX_USER: u8 = 1;
pub const EXT2_XATTR_INDEX_POSIX_ACL_ACCESS: u8 = 2;
pub const EXT2_XATTR_INDEX_POSIX_ACL_DEFAULT: u8 = 3;
pub const EXT2_XATTR_INDEX_TRUSTED: u8 = 4;
pub const EXT2_XATTR_INDEX_SECURITY: u8 = 6;
pub const EXT2_XATTR_INDEX_SYSTEM: u8 = 7;

const NAME_HASH_SHIFT: u32 = 5;
const VALUE_HASH_SHIFT: u32 = 16;
const BLOCK_HASH_SHIFT: u32 = 16;

const BLOCK: &str = "xattr block";
const IBODY: &str = "in-inode xattrs";
const ENTRY: &str = "xattr entry";

/// Prefixes by name index. POSIX ACLs are whole names: their entries have
/// an empty suffix.
const PREFIXES: &[(u8, &[u8])] = &[
    (
        EXT2_XATTR_INDEX_POSIX_ACL_ACCESS,
        b"system.posix_acl_access",
    ),
    (
        EXT2_XATTR_INDEX_POSIX_ACL_DEFAULT,
        b"system.posix_acl_default",
    ),
    (EXT2_XATTR_INDEX_USER, b"user."),
    (EXT2_XATTR_INDEX_TRUSTED, b"trusted."),
    (EXT2_XATTR_INDEX_SECURITY, b"security."),
    (EXT2_XATTR_INDEX_SYSTEM, b"system."),
];

/// Whether a name index is one of the two POSIX ACLs.
pub fn is_acl(index: u8) -> bool {
    matches!(
        index,
        EXT2_XATTR_INDEX_POSIX_ACL_ACCESS | EXT2_XATTR_INDEX_POSIX_ACL_DEFAULT
    )
}

/// `EXT2_XATTR_LEN`: bytes of an entry with this name, padded to 4.
pub const fn entry_len(name_len: usize) -> usize {
    (XATTR_ENTRY_LEN + name_len + 3) & !3
}

/// `EXT2_XATTR_SIZE`: bytes a value takes, padded to 4.
pub const fn value_len(size: usize) -> usize {
    (size + 3) & !3
}

/// One attribute: `name` is the suffix after the index's prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xattr {
    pub name_index: u8,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

impl Xattr {
    /// Splits a full name ("user.foo") into index and suffix.
    pub fn from_full_name(full: &[u8], value: Vec<u8>) -> Result<Self, FormatError> {
        let (name_index, name) = split_name(full).ok_or_else(|| {
            FormatError::bad_field(ENTRY, "e_name", full.len() as u64, "unknown name prefix")
        })?;
        Ok(Xattr {
            name_index,
            name: name.to_vec(),
            value,
        })
    }

    /// The full name, or `None` for a name index we have no prefix for.
    pub fn full_name(&self) -> Option<Vec<u8>> {
        let (_, prefix) = PREFIXES.iter().find(|(i, _)| *i == self.name_index)?;
        Some([*prefix, &self.name[..]].concat())
    }

    /// The kernel's order for block entries: index, name length, name.
    fn sort_key(&self) -> (u8, usize, &[u8]) {
        (self.name_index, self.name.len(), &self.name)
    }
}

/// Index and suffix of a full attribute name, if it has a known prefix and
/// (except for the POSIX ACL names) a non-empty suffix.
pub fn split_name(full: &[u8]) -> Option<(u8, &[u8])> {
    PREFIXES.iter().find_map(|&(index, prefix)| {
        let rest = full.strip_prefix(prefix)?;
        let ok = if is_acl(index) {
            rest.is_empty()
        } else {
            !rest.is_empty()
        };
        ok.then_some((index, rest))
    })
}

/// A parsed xattr block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XattrBlock {
    pub h_refcount: u32,
    pub h_hash: u32,
    pub entries: Vec<Xattr>,
}

/// An entry's header as read, before its value is resolved.
struct RawEntry {
    name_index: u8,
    name: Vec<u8>,
    value_offs: usize,
    value_size: usize,
    e_hash: u32,
}

/// Offsets of `struct ext2_xattr_header`'s fields.
const H_MAGIC: usize = 0x00;
const H_REFCOUNT: usize = 0x04;
const H_BLOCKS: usize = 0x08;
const H_HASH: usize = 0x0C;

/// `h_magic` of an xattr block, read in place.
pub fn h_magic(block: &[u8]) -> Result<u32, FormatError> {
    bytes::need(BLOCK, block, XATTR_HEADER_LEN)?;
    Ok(le32(block, H_MAGIC))
}

/// `h_refcount` of an xattr block (the inodes sharing it), read in place.
pub fn h_refcount(block: &[u8]) -> Result<u32, FormatError> {
    bytes::need(BLOCK, block, XATTR_HEADER_LEN)?;
    Ok(le32(block, H_REFCOUNT))
}

/// Rewrites `h_refcount` of an xattr block in place.
pub fn set_h_refcount(block: &mut [u8], refs: u32) -> Result<(), FormatError> {
    bytes::need(BLOCK, block, XATTR_HEADER_LEN)?;
    put_le32(block, H_REFCOUNT, refs);
    Ok(())
}

/// `h_hash` of an xattr block (the hash its sharing is looked up by),
/// read in place.
pub fn h_hash(block: &[u8]) -> Result<u32, FormatError> {
    bytes::need(BLOCK, block, XATTR_HEADER_LEN)?;
    Ok(le32(block, H_HASH))
}

/// Whether two xattr blocks hold the same attributes: every byte equal but
/// `h_refcount`'s, as blocks are compared before they are shared.
pub fn same_but_refcount(a: &[u8], b: &[u8]) -> bool {
    let rest = H_REFCOUNT + 4;
    a.get(..H_REFCOUNT) == b.get(..H_REFCOUNT) && a.get(rest..) == b.get(rest..)
}

/// Parses and validates an xattr block (`ext4_xattr_check_block`).
pub fn parse_block(block: &[u8]) -> Result<XattrBlock, FormatError> {
    bytes::need(BLOCK, block, XATTR_HEADER_LEN + 4)?;
    let magic = le32(block, H_MAGIC);
    if magic != EXT2_XATTR_MAGIC {
        return Err(FormatError::BadMagic {
            structure: BLOCK,
            found: magic,
            expected: EXT2_XATTR_MAGIC,
        });
    }
    let h_blocks = le32(block, H_BLOCKS);
    if h_blocks != 1 {
        return Err(FormatError::bad_field(
            BLOCK,
            "h_blocks",
            h_blocks,
            "must be 1",
        ));
    }
    Ok(XattrBlock {
        h_refcount: le32(block, H_REFCOUNT),
        h_hash: le32(block, H_HASH),
        entries: parse_entries(block, XATTR_HEADER_LEN, 0)?,
    })
}

/// Parses the in-inode area: the bytes from 128 + i_extra_isize to the end
/// of the inode. No magic means no attributes.
pub fn parse_ibody(area: &[u8]) -> Result<Vec<Xattr>, FormatError> {
    if area.len() < XATTR_IBODY_HEADER_LEN || le32(area, 0) != EXT2_XATTR_MAGIC {
        return Ok(Vec::new());
    }
    bytes::need(IBODY, area, XATTR_IBODY_HEADER_LEN + 4)?;
    let first = XATTR_IBODY_HEADER_LEN;
    parse_entries(area, first, first)
}

/// Reads the entry table starting at `first`; value offsets count from
/// `value_base`.
fn parse_entries(buf: &[u8], first: usize, value_base: usize) -> Result<Vec<Xattr>, FormatError> {
    let (raw, table_end) = read_table(buf, first)?;
    raw.into_iter()
        .map(|e| resolve_value(buf, e, value_base, table_end))
        .collect()
}

/// Walks entries up to the 4-byte zero terminator; returns them and the
/// offset just past the terminator.
fn read_table(buf: &[u8], first: usize) -> Result<(Vec<RawEntry>, usize), FormatError> {
    let mut off = first;
    let mut out = Vec::new();
    loop {
        let word = buf.get(off..off + 4).ok_or_else(|| {
            FormatError::bad_field(ENTRY, "e_name_len", off as u64, "no end-of-entries marker")
        })?;
        if le32(word, 0) == 0 {
            return Ok((out, off + 4));
        }
        let (entry, next) = read_entry(buf, off)?;
        out.push(entry);
        off = next;
    }
}

fn read_entry(buf: &[u8], off: usize) -> Result<(RawEntry, usize), FormatError> {
    let bad = |field, value: u64, reason| FormatError::bad_field(ENTRY, field, value, reason);
    let e: &[u8; XATTR_ENTRY_LEN] = buf
        .get(off..)
        .and_then(|b| b.first_chunk())
        .ok_or_else(|| bad("e_name_len", off as u64, "entry crosses the end"))?;
    let name_len = usize::from(e[0]);
    let next = off + entry_len(name_len);
    // The next entry (or terminator) must start before the end.
    if next + 4 > buf.len() {
        return Err(bad("e_name_len", name_len as u64, "entry crosses the end"));
    }
    let inum = le32(e, 4);
    if inum != 0 {
        return Err(bad(
            "e_value_inum",
            inum.into(),
            "ea_inode values are not supported",
        ));
    }
    let name_index = e[1];
    let name = buf
        .get(off + XATTR_ENTRY_LEN..off + XATTR_ENTRY_LEN + name_len)
        .unwrap_or(&[]);
    check_name(name_index, name)?;
    let raw = RawEntry {
        name_index,
        name: name.to_vec(),
        value_offs: le16(e, 2).into(),
        value_size: le32(e, 8) as usize,
        e_hash: le32(e, 12),
    };
    Ok((raw, next))
}

fn check_name(index: u8, name: &[u8]) -> Result<(), FormatError> {
    if index == 0 {
        return Err(FormatError::bad_field(
            ENTRY,
            "e_name_index",
            0u8,
            "no such index",
        ));
    }
    if name.is_empty() && !is_acl(index) {
        return Err(FormatError::bad_field(
            ENTRY,
            "e_name_len",
            0u8,
            "empty name",
        ));
    }
    Ok(())
}

/// Checks a value lies after the entry table, is aligned, and fits with
/// its padding; then copies it out.
fn resolve_value(
    buf: &[u8],
    e: RawEntry,
    value_base: usize,
    table_end: usize,
) -> Result<Xattr, FormatError> {
    let bad = |field, value: u64, reason| FormatError::bad_field(ENTRY, field, value, reason);
    let mut value = Vec::new();
    if e.value_size != 0 {
        let start = value_base + e.value_offs;
        if e.value_offs % 4 != 0 {
            return Err(bad(
                "e_value_offs",
                e.value_offs as u64,
                "value not 4-byte aligned",
            ));
        }
        if start < table_end {
            return Err(bad(
                "e_value_offs",
                e.value_offs as u64,
                "value overlaps the entries",
            ));
        }
        let end = start
            .checked_add(value_len(e.value_size))
            .filter(|&end| end <= buf.len());
        let end = end.ok_or_else(|| bad("e_value_size", e.value_size as u64, "value past end"))?;
        value = buf.get(start..end).unwrap_or(&[]).to_vec();
        value.truncate(e.value_size);
    }
    Ok(Xattr {
        name_index: e.name_index,
        name: e.name,
        value,
    })
}

/// `ext2_xattr_hash_entry`: name bytes (as unsigned char, like current
/// kernels and e2fsprogs) then the value as padded little-endian words.
pub fn hash_entry(name: &[u8], value: &[u8]) -> u32 {
    let mut hash = 0u32;
    for &c in name {
        hash = hash.rotate_left(NAME_HASH_SHIFT) ^ u32::from(c);
    }
    for chunk in value.chunks(4) {
        let mut word = [0u8; 4];
        for (w, c) in word.iter_mut().zip(chunk) {
            *w = *c;
        }
        hash = hash.rotate_left(VALUE_HASH_SHIFT) ^ u32::from_le_bytes(word);
    }
    hash
}

/// `ext2_xattr_hash_entry_signed`: the hash old kernels computed with the
/// name bytes as signed chars; e2fsck accepts either.
pub fn hash_entry_signed(name: &[u8], value: &[u8]) -> u32 {
    let mut hash = 0u32;
    for &c in name {
        hash = hash.rotate_left(NAME_HASH_SHIFT) ^ (c as i8 as i32 as u32);
    }
    for chunk in value.chunks(4) {
        let mut word = [0u8; 4];
        for (w, c) in word.iter_mut().zip(chunk) {
            *w = *c;
        }
        hash = hash.rotate_left(VALUE_HASH_SHIFT) ^ u32::from_le_bytes(word);
    }
    hash
}

/// The first in-inode entry whose stored `e_hash` is neither zero (older
/// kernels left it so) nor the hash of its name and value, as e2fsck's
/// `check_ea_in_inode` finds it. `None` when every hash is right or the
/// table does not parse (a different problem).
pub fn ibody_bad_hash(area: &[u8]) -> Option<u32> {
    if area.len() < XATTR_IBODY_HEADER_LEN + 4 || le32(area, 0) != EXT2_XATTR_MAGIC {
        return None;
    }
    let first = XATTR_IBODY_HEADER_LEN;
    first_bad_hash(area, first, first, true)
}

/// [`ibody_bad_hash`] for an xattr block, whose entries must all carry
/// their hash (e2fsck's `check_ext_attr`). The block must parse.
pub fn block_bad_hash(block: &[u8]) -> Option<u32> {
    first_bad_hash(block, XATTR_HEADER_LEN, 0, false)
}

fn first_bad_hash(buf: &[u8], first: usize, value_base: usize, zero_ok: bool) -> Option<u32> {
    let (raw, table_end) = read_table(buf, first).ok()?;
    for e in raw {
        let stored = e.e_hash;
        let x = resolve_value(buf, e, value_base, table_end).ok()?;
        let name = x.name.as_slice();
        let ok = (zero_ok && stored == 0)
            || stored == hash_entry(name, &x.value)
            || stored == hash_entry_signed(name, &x.value);
        if !ok {
            return Some(stored);
        }
    }
    None
}

/// `ext2_xattr_rehash`: the block hash over entry hashes in table order,
/// or 0 if any entry hash is 0.
pub fn block_hash(entry_hashes: &[u32]) -> u32 {
    let mut hash = 0u32;
    for &h in entry_hashes {
        if h == 0 {
            return 0;
        }
        hash = hash.rotate_left(BLOCK_HASH_SHIFT) ^ h;
    }
    hash
}

/// Bytes `list` needs: the entry table with terminator, plus the values.
pub fn space_needed(list: &[Xattr]) -> usize {
    list.iter()
        .map(|x| entry_len(x.name.len()) + value_len(x.value.len()))
        .sum::<usize>()
        + 4
}

fn check_list(list: &[Xattr]) -> Result<(), FormatError> {
    for x in list {
        check_name(x.name_index, &x.name)?;
        if x.name.len() > 255 {
            let n = x.name.len() as u64;
            return Err(FormatError::bad_field(
                ENTRY,
                "e_name_len",
                n,
                "longer than 255",
            ));
        }
    }
    let mut keys: Vec<_> = list.iter().map(Xattr::sort_key).collect();
    keys.sort();
    if keys.iter().zip(keys.iter().skip(1)).any(|(a, b)| a == b) {
        return Err(FormatError::bad_field(
            ENTRY,
            "e_name",
            0u8,
            "duplicate name",
        ));
    }
    Ok(())
}

/// Writes entries (sorted as the kernel keeps block entries) from `first`
/// and values down from the end of `buf`; returns the entry hashes, or
/// `None` if they do not fit. In-inode entries get hash 0 (`hashed` false),
/// as the kernel and e2fsprogs leave them, since nothing shares them.
fn write_entries(
    buf: &mut [u8],
    first: usize,
    value_base: usize,
    list: &[Xattr],
    hashed: bool,
) -> Option<Vec<u32>> {
    if first + space_needed(list) > buf.len() {
        return None;
    }
    let mut sorted: Vec<&Xattr> = list.iter().collect();
    sorted.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    let (mut off, mut value_end) = (first, buf.len());
    let mut hashes = Vec::with_capacity(sorted.len());
    for x in sorted {
        let offs = if x.value.is_empty() {
            0
        } else {
            value_end -= value_len(x.value.len());
            put_bytes(buf, value_end, &x.value);
            value_end - value_base
        };
        let hash = if hashed {
            hash_entry(&x.name, &x.value)
        } else {
            0
        };
        write_entry(buf, off, x, u16::try_from(offs).ok()?, hash);
        hashes.push(hash);
        off += entry_len(x.name.len());
    }
    Some(hashes)
}

fn write_entry(buf: &mut [u8], off: usize, x: &Xattr, value_offs: u16, hash: u32) {
    bytes::put_byte(buf, off, x.name.len() as u8);
    bytes::put_byte(buf, off + 1, x.name_index);
    put_le16(buf, off + 2, value_offs);
    put_le32(buf, off + 4, 0);
    put_le32(buf, off + 8, x.value.len() as u32);
    put_le32(buf, off + 12, hash);
    put_bytes(buf, off + XATTR_ENTRY_LEN, &x.name);
}

/// Serializes an xattr block with `h_refcount` users. `Ok(None)` means the
/// list does not fit in one block.
pub fn build_block(
    block_size: usize,
    h_refcount: u32,
    list: &[Xattr],
) -> Result<Option<Vec<u8>>, FormatError> {
    check_list(list)?;
    if !(XATTR_HEADER_LEN + 4..=65536).contains(&block_size) {
        let n = block_size as u64;
        return Err(FormatError::bad_field(BLOCK, "block size", n, "unusable"));
    }
    let mut block = vec![0u8; block_size];
    let Some(hashes) = write_entries(&mut block, XATTR_HEADER_LEN, 0, list, true) else {
        return Ok(None);
    };
    put_le32(&mut block, H_MAGIC, EXT2_XATTR_MAGIC);
    put_le32(&mut block, H_REFCOUNT, h_refcount);
    put_le32(&mut block, H_BLOCKS, 1);
    put_le32(&mut block, H_HASH, block_hash(&hashes));
    Ok(Some(block))
}

/// Serializes the in-inode area of `area_len` bytes (inode size - 128 -
/// i_extra_isize). An empty list gives an all-zero area (no magic), as the
/// kernel leaves it. `Ok(None)` means the list does not fit.
pub fn build_ibody(area_len: usize, list: &[Xattr]) -> Result<Option<Vec<u8>>, FormatError> {
    check_list(list)?;
    let mut area = vec![0u8; area_len];
    if list.is_empty() {
        return Ok(Some(area));
    }
    let first = XATTR_IBODY_HEADER_LEN;
    if area_len < first + 4 || write_entries(&mut area, first, first, list, false).is_none() {
        return Ok(None);
    }
    put_le32(&mut area, 0, EXT2_XATTR_MAGIC);
    Ok(Some(area))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::rng::Rng;

    fn x(full: &str, value: &[u8]) -> Xattr {
        Xattr::from_full_name(full.as_bytes(), value.to_vec()).unwrap()
    }

    fn sample() -> Vec<Xattr> {
        vec![
            x("user.zeta", b"last"),
            x("user.a", b"hello world"),
            x("trusted.t", b""),
            x("security.selinux", b"system_u:object_r:etc_t:s0\0"),
            x("system.posix_acl_access", &[2, 0, 0, 0, 1, 0, 6, 0]),
            x("user.bb", &[0xff; 100]),
        ]
    }

    fn sorted(mut v: Vec<Xattr>) -> Vec<Xattr> {
        v.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        v
    }

    #[test]
    fn header_fields_in_place() {
        let mut b = build_block(1024, 3, &sample()).unwrap().unwrap();
        let parsed = parse_block(&b).unwrap();
        assert_eq!(h_magic(&b).unwrap(), EXT2_XATTR_MAGIC);
        assert_eq!(h_refcount(&b).unwrap(), 3);
        assert_eq!(h_hash(&b).unwrap(), parsed.h_hash);
        let before = b.clone();
        set_h_refcount(&mut b, 9).unwrap();
        assert_eq!(parse_block(&b).unwrap().h_refcount, 9);
        assert!(same_but_refcount(&b, &before));
        b[40] ^= 1;
        assert!(!same_but_refcount(&b, &before));
        assert!(!same_but_refcount(&before[..512], &before));
        assert!(h_refcount(&b[..31]).is_err());
        assert!(set_h_refcount(&mut b[..31], 1).is_err());
    }

    #[test]
    fn names_split_and_join() {
        assert_eq!(split_name(b"user.foo"), Some((1, &b"foo"[..])));
        assert_eq!(split_name(b"system.posix_acl_access"), Some((2, &b""[..])));
        assert_eq!(split_name(b"system.posix_acl_default"), Some((3, &b""[..])));
        assert_eq!(split_name(b"system.data"), Some((7, &b"data"[..])));
        assert_eq!(split_name(b"security.ima"), Some((6, &b"ima"[..])));
        assert_eq!(split_name(b"user."), None);
        assert_eq!(split_name(b"other.x"), None);
        assert_eq!(x("trusted.t", b"").full_name().unwrap(), b"trusted.t");
        let acl = x("system.posix_acl_default", b"v");
        assert_eq!(acl.full_name().unwrap(), b"system.posix_acl_default");
    }

    #[test]
    fn block_round_trips_sorted() {
        let block = build_block(1024, 1, &sample()).unwrap().unwrap();
        let parsed = parse_block(&block).unwrap();
        assert_eq!(parsed.h_refcount, 1);
        assert_eq!(parsed.entries, sorted(sample()));
        let hashes: Vec<u32> = parsed
            .entries
            .iter()
            .map(|e| hash_entry(&e.name, &e.value))
            .collect();
        assert_eq!(parsed.h_hash, block_hash(&hashes));
        assert_ne!(parsed.h_hash, 0);
        // Entry hashes are stored in table order.
        assert_eq!(le32(&block, XATTR_HEADER_LEN + 12), hashes[0]);
    }

    #[test]
    fn ibody_round_trips() {
        let list = vec![x("user.a", b"1"), x("user.b", b"")];
        let area = build_ibody(96, &list).unwrap().unwrap();
        assert_eq!(le32(&area, 0), EXT2_XATTR_MAGIC);
        assert_eq!(le32(&area, 4 + 12), 0, "in-inode entries are not hashed");
        assert_eq!(parse_ibody(&area).unwrap(), list);
        assert!(parse_ibody(&[0u8; 96]).unwrap().is_empty());
        assert_eq!(build_ibody(96, &[]).unwrap().unwrap(), vec![0u8; 96]);
    }

    #[test]
    fn too_big_is_reported_not_an_error() {
        let big = vec![x("user.big", &[1u8; 1000])];
        assert_eq!(build_block(1024, 1, &big).unwrap(), None);
        assert_eq!(build_ibody(32, &big).unwrap(), None);
        let exact = 1024 - XATTR_HEADER_LEN - entry_len(3) - 4;
        assert!(build_block(1024, 1, &[x("user.abc", &vec![7; exact])])
            .unwrap()
            .is_some());
        assert!(build_block(1024, 1, &[x("user.abc", &vec![7; exact + 1])])
            .unwrap()
            .is_none());
    }

    #[test]
    fn invalid_lists_are_errors() {
        let dup = vec![x("user.a", b"1"), x("user.a", b"2")];
        assert!(build_block(1024, 1, &dup).is_err());
        let empty = Xattr {
            name_index: 1,
            name: vec![],
            value: vec![],
        };
        assert!(build_block(1024, 1, &[empty]).is_err());
        let long = Xattr {
            name_index: 1,
            name: vec![b'a'; 256],
            value: vec![],
        };
        assert!(build_block(4096, 1, &[long]).is_err());
    }

    #[test]
    fn hash_entry_known_values() {
        // By hand: ((0 rol 5) ^ 'a') rol 16 ^ le32("xy\0\0").
        assert_eq!(hash_entry(b"a", b""), 0x61);
        assert_eq!(hash_entry(b"a", b"xy"), (0x61u32 << 16) ^ 0x7978);
        assert_eq!(block_hash(&[1, 0, 3]), 0);
        assert_eq!(block_hash(&[1, 2]), (1u32 << 16) ^ 2);
    }

    #[test]
    fn corrupt_blocks_are_rejected() {
        let good = build_block(1024, 1, &sample()).unwrap().unwrap();
        let first = XATTR_HEADER_LEN;
        let cases: &[(usize, &[u8])] = &[
            (0, &[0, 0, 0, 0]),         // magic
            (8, &[2, 0, 0, 0]),         // h_blocks
            (first + 2, &[2, 0]),       // misaligned e_value_offs
            (first + 2, &[32, 0]),      // value over the entries
            (first + 4, &[1, 0, 0, 0]), // e_value_inum
            (first + 8, &[0, 8, 0, 0]), // value past the end
            (first + 1, &[0]),          // name index 0
        ];
        for (off, bytes) in cases {
            let mut b = good.clone();
            b[*off..off + bytes.len()].copy_from_slice(bytes);
            assert!(parse_block(&b).is_err(), "offset {off}");
        }
        assert!(parse_block(&good[..XATTR_HEADER_LEN + 8]).is_err());
    }

    #[test]
    fn random_and_truncated_input_never_panics() {
        let mut rng = Rng::new(0xdead_beef_cafe_f00d);
        let good = build_block(1024, 1, &sample()).unwrap().unwrap();
        let ibody = build_ibody(160, &sample()[..3]).unwrap().unwrap();
        for round in 0..5000 {
            let mut b = if round % 2 == 0 {
                good.clone()
            } else {
                ibody.clone()
            };
            b.truncate((rng.next() % 1100) as usize);
            for _ in 0..(rng.next() % 5) {
                if !b.is_empty() {
                    let i = (rng.next() as usize) % b.len();
                    b[i] = rng.next() as u8;
                }
            }
            if let Ok(p) = parse_block(&b) {
                let _ = build_block(1024, p.h_refcount, &p.entries);
            }
            if let Ok(list) = parse_ibody(&b) {
                let _ = build_ibody(b.len(), &list);
            }
        }
    }
}
