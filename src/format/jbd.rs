//! JBD/JBD2 journal blocks (big-endian): the journal superblock, descriptor
//! blocks and their tags, commit and revoke blocks, and data-block escaping.
//!
//! We write the ext3-era format: 32-bit block numbers and no checksums, with
//! the revoke feature as the only incompatible one.

use super::bytes::{self, be16, be32, be64, put_be16, put_be32, put_be64, put_bytes};
use super::FormatError;

pub const JBD2_MAGIC_NUMBER: u32 = 0xC03B_3998;

pub const JBD2_DESCRIPTOR_BLOCK: u32 = 1;
pub const JBD2_COMMIT_BLOCK: u32 = 2;
pub const JBD2_SUPERBLOCK_V1: u32 = 3;
pub const JBD2_SUPERBLOCK_V2: u32 = 4;
pub const JBD2_REVOKE_BLOCK: u32 = 5;

pub const JBD2_FEATURE_COMPAT_CHECKSUM: u32 = 0x1;
pub const JBD2_FEATURE_INCOMPAT_REVOKE: u32 = 0x1;
pub const JBD2_FEATURE_INCOMPAT_64BIT: u32 = 0x2;
pub const JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
pub const JBD2_FEATURE_INCOMPAT_CSUM_V2: u32 = 0x8;
pub const JBD2_FEATURE_INCOMPAT_CSUM_V3: u32 = 0x10;
pub const JBD2_FEATURE_INCOMPAT_FAST_COMMIT: u32 = 0x20;
/// Incompatible features this implementation can replay and write.
pub const SUPPORTED_INCOMPAT: u32 = JBD2_FEATURE_INCOMPAT_REVOKE;

pub const JBD2_FLAG_ESCAPE: u16 = 0x1;
pub const JBD2_FLAG_SAME_UUID: u16 = 0x2;
pub const JBD2_FLAG_DELETED: u16 = 0x4;
pub const JBD2_FLAG_LAST_TAG: u16 = 0x8;

/// `JBD2_USERS_MAX`: filesystems that can share one journal.
pub const JBD2_USERS_MAX: u32 = 48;
pub const JOURNAL_HEADER_LEN: usize = 12;
pub const JOURNAL_SUPERBLOCK_LEN: usize = 1024;
/// Bytes of a tag without 64bit or checksum features.
pub const TAG_LEN: usize = 8;
pub const UUID_LEN: usize = 16;
const REVOKE_HEADER_LEN: usize = 16;
const COMMIT_LEN: usize = 0x3C;

/// mke2fs's default journal size, in blocks, for a filesystem of `blocks`
/// blocks (ext2fs_default_journal_size); e2fsck recreates a journal of
/// this size.
pub fn default_journal_blocks(blocks: u64) -> u32 {
    match blocks {
        b if b < 32768 => 1024,
        b if b < 256 * 1024 => 4096,
        b if b < 512 * 1024 => 8192,
        b if b < 4096 * 1024 => 16384,
        b if b < 8192 * 1024 => 32768,
        b if b < 16384 * 1024 => 65536,
        b if b < 32768 * 1024 => 131072,
        _ => 262144,
    }
}

/// `journal_header_t`, the first 12 bytes of every metadata block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalHeader {
    pub h_blocktype: u32,
    pub h_sequence: u32,
}

impl JournalHeader {
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        bytes::need("journal header", buf, JOURNAL_HEADER_LEN)?;
        let magic = be32(buf, 0);
        if magic != JBD2_MAGIC_NUMBER {
            return Err(FormatError::BadMagic {
                structure: "journal header",
                found: magic,
                expected: JBD2_MAGIC_NUMBER,
            });
        }
        Ok(JournalHeader {
            h_blocktype: be32(buf, 4),
            h_sequence: be32(buf, 8),
        })
    }

    /// Writes the header; `buf` must hold at least 12 bytes.
    pub fn write(&self, buf: &mut [u8]) -> Result<(), FormatError> {
        bytes::need("journal header", buf, JOURNAL_HEADER_LEN)?;
        put_be32(buf, 0, JBD2_MAGIC_NUMBER);
        put_be32(buf, 4, self.h_blocktype);
        put_be32(buf, 8, self.h_sequence);
        Ok(())
    }
}

/// Parses a header and checks it is of the expected type.
fn expect_header(
    structure: &'static str,
    buf: &[u8],
    blocktype: u32,
) -> Result<JournalHeader, FormatError> {
    let h = JournalHeader::parse(buf)?;
    if h.h_blocktype != blocktype {
        return Err(FormatError::bad_field(
            structure,
            "h_blocktype",
            h.h_blocktype,
            "unexpected block type",
        ));
    }
    Ok(h)
}

fn new_block(block_size: usize, blocktype: u32, sequence: u32) -> Result<Vec<u8>, FormatError> {
    check_block_size(block_size)?;
    let mut block = vec![0u8; block_size];
    JournalHeader {
        h_blocktype: blocktype,
        h_sequence: sequence,
    }
    .write(&mut block)?;
    Ok(block)
}

fn check_block_size(block_size: usize) -> Result<(), FormatError> {
    if block_size.is_power_of_two() && (1024..=65536).contains(&block_size) {
        Ok(())
    } else {
        Err(FormatError::bad_field(
            "journal",
            "block size",
            block_size as u64,
            "must be a power of two in 1024..=65536",
        ))
    }
}

// ---------------------------------------------------------------------------
// Superblock
// ---------------------------------------------------------------------------

/// `journal_superblock_t`. The raw 1024 bytes are kept so that fields we do
/// not model (s_padding, s_users beyond the typed view, ...) survive a
/// parse/serialize round trip. The v2 fields are only meaningful (and only
/// written) when `h_blocktype` is [`JBD2_SUPERBLOCK_V2`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalSuperblock {
    pub h_blocktype: u32,
    pub h_sequence: u32,
    pub s_blocksize: u32,
    pub s_maxlen: u32,
    pub s_first: u32,
    pub s_sequence: u32,
    pub s_start: u32,
    pub s_errno: i32,
    pub s_feature_compat: u32,
    pub s_feature_incompat: u32,
    pub s_feature_ro_compat: u32,
    pub s_uuid: [u8; 16],
    pub s_nr_users: u32,
    pub s_dynsuper: u32,
    pub s_max_transaction: u32,
    pub s_max_trans_data: u32,
    pub s_checksum_type: u8,
    pub s_checksum: u32,
    raw: Box<[u8; JOURNAL_SUPERBLOCK_LEN]>,
}

const SB: &str = "journal superblock";

impl JournalSuperblock {
    /// A fresh v2 superblock for an empty internal journal of `maxlen`
    /// blocks, as mke2fs makes it: log from block 1, one user, `uuid` being
    /// the filesystem's UUID and s_users[] left zero.
    pub fn new(block_size: u32, maxlen: u32, uuid: [u8; 16]) -> Result<Self, FormatError> {
        let raw = Box::new([0u8; JOURNAL_SUPERBLOCK_LEN]);
        let sb = JournalSuperblock {
            h_blocktype: JBD2_SUPERBLOCK_V2,
            h_sequence: 0,
            s_blocksize: block_size,
            s_maxlen: maxlen,
            s_first: 1,
            s_sequence: 1,
            s_start: 0,
            s_errno: 0,
            s_feature_compat: 0,
            s_feature_incompat: 0,
            s_feature_ro_compat: 0,
            s_uuid: uuid,
            s_nr_users: 1,
            s_dynsuper: 0,
            s_max_transaction: 0,
            s_max_trans_data: 0,
            s_checksum_type: 0,
            s_checksum: 0,
            raw,
        };
        sb.validate()?;
        Ok(sb)
    }

    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        bytes::need(SB, buf, JOURNAL_SUPERBLOCK_LEN)?;
        let h = JournalHeader::parse(buf)?;
        let raw = Box::new(bytes::array_at::<JOURNAL_SUPERBLOCK_LEN>(SB, buf, 0)?);
        let sb = JournalSuperblock {
            h_blocktype: h.h_blocktype,
            h_sequence: h.h_sequence,
            s_blocksize: be32(buf, 0xC),
            s_maxlen: be32(buf, 0x10),
            s_first: be32(buf, 0x14),
            s_sequence: be32(buf, 0x18),
            s_start: be32(buf, 0x1C),
            s_errno: be32(buf, 0x20) as i32,
            s_feature_compat: be32(buf, 0x24),
            s_feature_incompat: be32(buf, 0x28),
            s_feature_ro_compat: be32(buf, 0x2C),
            s_uuid: bytes::bytes(buf, 0x30),
            s_nr_users: be32(buf, 0x40),
            s_dynsuper: be32(buf, 0x44),
            s_max_transaction: be32(buf, 0x48),
            s_max_trans_data: be32(buf, 0x4C),
            s_checksum_type: bytes::byte(buf, 0x50),
            s_checksum: be32(buf, 0xFC),
            raw,
        };
        sb.validate()?;
        Ok(sb)
    }

    /// Checks what `journal_get_superblock` and `journal_reset` rely on.
    pub fn validate(&self) -> Result<(), FormatError> {
        let bad = |field, value: u32, reason| Err(FormatError::bad_field(SB, field, value, reason));
        if !matches!(self.h_blocktype, JBD2_SUPERBLOCK_V1 | JBD2_SUPERBLOCK_V2) {
            return bad("h_blocktype", self.h_blocktype, "not a journal superblock");
        }
        if check_block_size(self.s_blocksize as usize).is_err() {
            return bad("s_blocksize", self.s_blocksize, "not a valid block size");
        }
        if self.s_first == 0 || self.s_first >= self.s_maxlen {
            return bad("s_first", self.s_first, "must be in 1..s_maxlen");
        }
        if self.s_start != 0 && (self.s_start < self.s_first || self.s_start >= self.s_maxlen) {
            return bad("s_start", self.s_start, "outside the log area");
        }
        if self.is_v2() && self.s_nr_users > JBD2_USERS_MAX {
            return bad("s_nr_users", self.s_nr_users, "more than 48 users");
        }
        Ok(())
    }

    pub fn is_v2(&self) -> bool {
        self.h_blocktype == JBD2_SUPERBLOCK_V2
    }

    /// Incompatible features set that we cannot handle (v1 has none).
    pub fn unsupported_incompat(&self) -> u32 {
        if self.is_v2() {
            self.s_feature_incompat & !SUPPORTED_INCOMPAT
        } else {
            0
        }
    }

    /// Fails, naming the feature bits, if the journal uses an incompatible
    /// feature we do not support, or any read-only-compatible one (none are
    /// defined, so any bit means a newer format).
    pub fn check_features(&self) -> Result<(), FormatError> {
        let incompat = self.unsupported_incompat();
        if incompat != 0 {
            return Err(FormatError::bad_field(
                SB,
                "s_feature_incompat",
                incompat,
                "unsupported incompatible journal features",
            ));
        }
        if self.is_v2() && self.s_feature_ro_compat != 0 {
            return Err(FormatError::bad_field(
                SB,
                "s_feature_ro_compat",
                self.s_feature_ro_compat,
                "unsupported read-only journal features",
            ));
        }
        Ok(())
    }

    /// The s_users[] table (16-byte filesystem UUIDs), as stored.
    pub fn s_users(&self) -> &[u8] {
        let len = UUID_LEN * JBD2_USERS_MAX as usize;
        self.raw.get(0x100..0x100 + len).unwrap_or(&[])
    }

    /// The 1024 bytes, with the typed fields written over the raw copy.
    pub fn to_bytes(&self) -> [u8; JOURNAL_SUPERBLOCK_LEN] {
        let mut b = *self.raw;
        put_be32(&mut b, 0, JBD2_MAGIC_NUMBER);
        put_be32(&mut b, 4, self.h_blocktype);
        put_be32(&mut b, 8, self.h_sequence);
        put_be32(&mut b, 0xC, self.s_blocksize);
        put_be32(&mut b, 0x10, self.s_maxlen);
        put_be32(&mut b, 0x14, self.s_first);
        put_be32(&mut b, 0x18, self.s_sequence);
        put_be32(&mut b, 0x1C, self.s_start);
        put_be32(&mut b, 0x20, self.s_errno as u32);
        if self.is_v2() {
            self.write_v2(&mut b);
        }
        b
    }

    fn write_v2(&self, b: &mut [u8]) {
        put_be32(b, 0x24, self.s_feature_compat);
        put_be32(b, 0x28, self.s_feature_incompat);
        put_be32(b, 0x2C, self.s_feature_ro_compat);
        put_bytes(b, 0x30, &self.s_uuid);
        put_be32(b, 0x40, self.s_nr_users);
        put_be32(b, 0x44, self.s_dynsuper);
        put_be32(b, 0x48, self.s_max_transaction);
        put_be32(b, 0x4C, self.s_max_trans_data);
        bytes::put_byte(b, 0x50, self.s_checksum_type);
        put_be32(b, 0xFC, self.s_checksum);
    }
}

// ---------------------------------------------------------------------------
// Descriptor blocks
// ---------------------------------------------------------------------------

/// One `journal_block_tag_t`: the final location of the next logged block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalTag {
    pub t_blocknr: u32,
    pub t_flags: u16,
    /// Present when the tag lacks JBD2_FLAG_SAME_UUID.
    pub uuid: Option<[u8; 16]>,
}

/// A block to log: where it belongs, and whether its copy in the journal
/// was escaped (its first word was the magic number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedBlock {
    pub blocknr: u32,
    pub escaped: bool,
}

/// Tags one descriptor block can hold: the first carries a UUID.
pub fn descriptor_capacity(block_size: usize) -> usize {
    let room = block_size.saturating_sub(JOURNAL_HEADER_LEN);
    if room < TAG_LEN + UUID_LEN {
        0
    } else {
        1 + (room - TAG_LEN - UUID_LEN) / TAG_LEN
    }
}

/// Builds a descriptor block for as many of `blocks` as fit; returns it and
/// how many it describes (at least one unless `blocks` is empty).
pub fn build_descriptor(
    block_size: usize,
    sequence: u32,
    uuid: &[u8; 16],
    blocks: &[LoggedBlock],
) -> Result<(Vec<u8>, usize), FormatError> {
    let mut block = new_block(block_size, JBD2_DESCRIPTOR_BLOCK, sequence)?;
    let n = blocks.len().min(descriptor_capacity(block_size));
    let mut off = JOURNAL_HEADER_LEN;
    for (i, b) in blocks.iter().take(n).enumerate() {
        let mut flags = if b.escaped { JBD2_FLAG_ESCAPE } else { 0 };
        if i > 0 {
            flags |= JBD2_FLAG_SAME_UUID;
        }
        if i + 1 == n {
            flags |= JBD2_FLAG_LAST_TAG;
        }
        put_be32(&mut block, off, b.blocknr);
        put_be16(&mut block, off + 6, flags);
        off += TAG_LEN;
        if i == 0 {
            put_bytes(&mut block, off, uuid);
            off += UUID_LEN;
        }
    }
    Ok((block, n))
}

/// The tags of a descriptor block, stopping at JBD2_FLAG_LAST_TAG or when
/// the next tag would not fit (as `count_tags` does).
pub fn parse_descriptor(block: &[u8]) -> Result<(JournalHeader, Vec<JournalTag>), FormatError> {
    let h = expect_header("descriptor block", block, JBD2_DESCRIPTOR_BLOCK)?;
    let mut tags = Vec::new();
    let mut off = JOURNAL_HEADER_LEN;
    while let Some(t) = block.get(off..off + TAG_LEN) {
        let t_flags = be16(t, 6);
        off += TAG_LEN;
        let uuid = if t_flags & JBD2_FLAG_SAME_UUID == 0 {
            off += UUID_LEN;
            Some(tag_uuid(block, off - UUID_LEN)?)
        } else {
            None
        };
        tags.push(JournalTag {
            t_blocknr: be32(t, 0),
            t_flags,
            uuid,
        });
        if t_flags & JBD2_FLAG_LAST_TAG != 0 {
            break;
        }
    }
    Ok((h, tags))
}

fn tag_uuid(block: &[u8], off: usize) -> Result<[u8; 16], FormatError> {
    let u = block.get(off..off + UUID_LEN).ok_or_else(|| {
        FormatError::bad_field(
            "descriptor block",
            "t_flags",
            0u32,
            "tag UUID crosses the block end",
        )
    })?;
    Ok(bytes::bytes(u, 0))
}

// ---------------------------------------------------------------------------
// Commit blocks
// ---------------------------------------------------------------------------

/// `struct commit_header`. Checksum fields are parsed for inspection; we
/// always write them as zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitBlock {
    pub h_sequence: u32,
    pub h_chksum_type: u8,
    pub h_chksum_size: u8,
    pub h_chksum0: u32,
    pub h_commit_sec: u64,
    pub h_commit_nsec: u32,
}

impl CommitBlock {
    pub fn new(h_sequence: u32, h_commit_sec: u64, h_commit_nsec: u32) -> Self {
        CommitBlock {
            h_sequence,
            h_chksum_type: 0,
            h_chksum_size: 0,
            h_chksum0: 0,
            h_commit_sec,
            h_commit_nsec,
        }
    }

    pub fn parse(block: &[u8]) -> Result<Self, FormatError> {
        bytes::need("commit block", block, COMMIT_LEN)?;
        let h = expect_header("commit block", block, JBD2_COMMIT_BLOCK)?;
        Ok(CommitBlock {
            h_sequence: h.h_sequence,
            h_chksum_type: bytes::byte(block, 0xC),
            h_chksum_size: bytes::byte(block, 0xD),
            h_chksum0: be32(block, 0x10),
            h_commit_sec: be64(block, 0x30),
            h_commit_nsec: be32(block, 0x38),
        })
    }

    pub fn build(&self, block_size: usize) -> Result<Vec<u8>, FormatError> {
        let mut block = new_block(block_size, JBD2_COMMIT_BLOCK, self.h_sequence)?;
        put_be64(&mut block, 0x30, self.h_commit_sec);
        put_be32(&mut block, 0x38, self.h_commit_nsec);
        Ok(block)
    }
}

// ---------------------------------------------------------------------------
// Revoke blocks
// ---------------------------------------------------------------------------

/// Block numbers one revoke block can hold (32-bit records).
pub fn revoke_capacity(block_size: usize) -> usize {
    block_size.saturating_sub(REVOKE_HEADER_LEN) / 4
}

/// Builds a revoke block for as many of `blocks` as fit; returns it and how
/// many it holds.
pub fn build_revoke(
    block_size: usize,
    sequence: u32,
    blocks: &[u32],
) -> Result<(Vec<u8>, usize), FormatError> {
    let mut block = new_block(block_size, JBD2_REVOKE_BLOCK, sequence)?;
    let n = blocks.len().min(revoke_capacity(block_size));
    for (i, &b) in blocks.iter().take(n).enumerate() {
        put_be32(&mut block, REVOKE_HEADER_LEN + 4 * i, b);
    }
    put_be32(&mut block, 0xC, (REVOKE_HEADER_LEN + 4 * n) as u32);
    Ok((block, n))
}

/// A revoke block's header and revoked block numbers.
pub fn parse_revoke(block: &[u8]) -> Result<(JournalHeader, Vec<u32>), FormatError> {
    bytes::need("revoke block", block, REVOKE_HEADER_LEN)?;
    let h = expect_header("revoke block", block, JBD2_REVOKE_BLOCK)?;
    let r_count = be32(block, 0xC);
    let used = r_count as usize;
    if used < REVOKE_HEADER_LEN || used > block.len() || (used - REVOKE_HEADER_LEN) % 4 != 0 {
        return Err(FormatError::bad_field(
            "revoke block",
            "r_count",
            r_count,
            "must cover the header, fit the block, and hold whole records",
        ));
    }
    let records = block.get(REVOKE_HEADER_LEN..used).unwrap_or(&[]);
    Ok((h, records.chunks_exact(4).map(|c| be32(c, 0)).collect()))
}

// ---------------------------------------------------------------------------
// Escaping
// ---------------------------------------------------------------------------

/// A data block whose first word is the journal magic would be mistaken for
/// a metadata block on replay, so it must be logged escaped.
pub fn needs_escape(block: &[u8]) -> bool {
    block.len() >= 4 && be32(block, 0) == JBD2_MAGIC_NUMBER
}

/// Zeroes the first word (the caller sets JBD2_FLAG_ESCAPE on the tag).
pub fn escape(block: &mut [u8]) {
    if let Some(w) = block.get_mut(..4) {
        w.fill(0);
    }
}

/// Restores the magic in a block logged with JBD2_FLAG_ESCAPE.
pub fn unescape(block: &mut [u8]) {
    if block.len() >= 4 {
        put_be32(block, 0, JBD2_MAGIC_NUMBER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::rng::Rng;

    const UUID: [u8; 16] = [7; 16];

    #[test]
    fn superblock_round_trips_including_unknown_bytes() {
        let mut sb = JournalSuperblock::new(4096, 1024, UUID).unwrap();
        sb.s_feature_incompat = JBD2_FEATURE_INCOMPAT_REVOKE;
        sb.s_errno = -5;
        let mut b = sb.to_bytes();
        b[0x200] = 0xAB;
        let parsed = JournalSuperblock::parse(&b).unwrap();
        assert_eq!(parsed.to_bytes(), b);
        assert_eq!(
            (parsed.s_errno, parsed.s_maxlen, parsed.s_uuid),
            (-5, 1024, UUID)
        );
        assert!(parsed.check_features().is_ok());
    }

    #[test]
    fn superblock_rejects_bad_fields() {
        let good = JournalSuperblock::new(1024, 100, UUID).unwrap().to_bytes();
        for (off, val) in [
            (0usize, 0u32),
            (4, 2),
            (0xC, 1000),
            (0x14, 0),
            (0x14, 100),
            (0x1C, 200),
        ] {
            let mut b = good;
            put_be32(&mut b, off, val);
            assert!(JournalSuperblock::parse(&b).is_err(), "offset {off:#x}");
        }
        assert!(JournalSuperblock::parse(&good[..1023]).is_err());
    }

    #[test]
    fn unsupported_features_are_named() {
        let mut sb = JournalSuperblock::new(4096, 1024, UUID).unwrap();
        sb.s_feature_incompat = JBD2_FEATURE_INCOMPAT_REVOKE | JBD2_FEATURE_INCOMPAT_CSUM_V3;
        assert_eq!(sb.unsupported_incompat(), JBD2_FEATURE_INCOMPAT_CSUM_V3);
        let err = sb.check_features().unwrap_err();
        assert!(matches!(err, FormatError::BadField { value: 0x10, .. }));
        sb.h_blocktype = JBD2_SUPERBLOCK_V1;
        assert_eq!(sb.unsupported_incompat(), 0);
        // v1 superblocks do not carry the v2 fields.
        let v1 = JournalSuperblock::parse(&sb.to_bytes()).unwrap();
        assert_eq!(v1.s_feature_incompat, 0);
    }

    #[test]
    fn descriptor_fills_and_parses_back() {
        let blocks: Vec<LoggedBlock> = (0..1000)
            .map(|i| LoggedBlock {
                blocknr: 100 + i,
                escaped: i % 7 == 0,
            })
            .collect();
        let (block, n) = build_descriptor(1024, 9, &UUID, &blocks).unwrap();
        assert_eq!(n, descriptor_capacity(1024));
        assert_eq!(n, 1 + (1024 - 12 - 24) / 8);
        let (h, tags) = parse_descriptor(&block).unwrap();
        assert_eq!(
            (h.h_blocktype, h.h_sequence, tags.len()),
            (JBD2_DESCRIPTOR_BLOCK, 9, n)
        );
        assert_eq!(tags[0].uuid, Some(UUID));
        for (t, b) in tags.iter().zip(&blocks) {
            assert_eq!(t.t_blocknr, b.blocknr);
            assert_eq!(t.t_flags & JBD2_FLAG_ESCAPE != 0, b.escaped);
        }
        assert!(tags[1..].iter().all(|t| t.uuid.is_none()));
        assert_eq!(
            tags.iter()
                .filter(|t| t.t_flags & JBD2_FLAG_LAST_TAG != 0)
                .count(),
            1
        );
        assert!(tags[n - 1].t_flags & JBD2_FLAG_LAST_TAG != 0);
        let (small, m) = build_descriptor(4096, 1, &UUID, &blocks[..3]).unwrap();
        assert_eq!((m, parse_descriptor(&small).unwrap().1.len()), (3, 3));
    }

    /// 64 KiB blocks: 8,186 tags in a descriptor and 16,380 revoke records
    /// (r_count, a byte count, is 65,536 when full).
    #[test]
    fn descriptors_and_revokes_fill_64k_blocks() {
        const BS: usize = 65536;
        let blocks: Vec<LoggedBlock> = (0..9000)
            .map(|i| LoggedBlock {
                blocknr: 5000 + i,
                escaped: i % 1000 == 3,
            })
            .collect();
        let (block, n) = build_descriptor(BS, 4, &UUID, &blocks).unwrap();
        assert_eq!((block.len(), n), (65536, descriptor_capacity(BS)));
        assert_eq!(n, 1 + (65536 - 12 - 24) / 8);
        let (_, tags) = parse_descriptor(&block).unwrap();
        assert_eq!(tags.len(), n);
        assert_eq!(tags[n - 1].t_blocknr, 5000 + n as u32 - 1);
        assert!(tags[1003].t_flags & JBD2_FLAG_ESCAPE != 0);

        let list: Vec<u32> = (1..=20_000).collect();
        let (block, n) = build_revoke(BS, 6, &list).unwrap();
        assert_eq!(n, (65536 - 16) / 4);
        assert_eq!(parse_revoke(&block).unwrap().1, list[..n]);
        let jsb = JournalSuperblock::new(BS as u32, 1024, UUID).unwrap();
        let back = JournalSuperblock::parse(&jsb.to_bytes()).unwrap();
        assert_eq!((back.s_blocksize, back.s_maxlen), (65536, 1024));
    }

    #[test]
    fn descriptor_without_last_tag_stops_at_block_end() {
        let mut block = new_block(1024, JBD2_DESCRIPTOR_BLOCK, 1).unwrap();
        let mut off = 12;
        while off + 8 <= 1024 {
            put_be16(&mut block, off + 6, JBD2_FLAG_SAME_UUID);
            off += 8;
        }
        assert_eq!(parse_descriptor(&block).unwrap().1.len(), (1024 - 12) / 8);
        put_be16(&mut block, off - 8 + 6, 0);
        assert!(parse_descriptor(&block).is_err());
    }

    #[test]
    fn commit_round_trips() {
        let c = CommitBlock::new(77, 1_700_000_000, 123_456_789);
        let block = c.build(2048).unwrap();
        assert_eq!(CommitBlock::parse(&block).unwrap(), c);
        assert!(CommitBlock::parse(&block[..0x30]).is_err());
        assert!(parse_revoke(&block).is_err());
    }

    #[test]
    fn revoke_round_trips_and_validates_r_count() {
        let list: Vec<u32> = (1..=300).collect();
        let (block, n) = build_revoke(1024, 5, &list).unwrap();
        assert_eq!(n, (1024 - 16) / 4);
        let (h, got) = parse_revoke(&block).unwrap();
        assert_eq!((h.h_sequence, &got[..]), (5, &list[..n]));
        for bad in [12u32, 1028, 18] {
            let mut b = block.clone();
            put_be32(&mut b, 0xC, bad);
            assert!(parse_revoke(&b).is_err(), "r_count {bad}");
        }
        let (empty, _) = build_revoke(1024, 5, &[]).unwrap();
        assert!(parse_revoke(&empty).unwrap().1.is_empty());
    }

    #[test]
    fn escaping_round_trips() {
        let mut b = vec![0u8; 1024];
        put_be32(&mut b, 0, JBD2_MAGIC_NUMBER);
        b[4] = 9;
        assert!(needs_escape(&b));
        escape(&mut b);
        assert!(!needs_escape(&b));
        unescape(&mut b);
        assert!(needs_escape(&b) && b[4] == 9);
        assert!(!needs_escape(&b[..3]));
    }

    #[test]
    fn random_and_truncated_blocks_never_panic() {
        let mut rng = Rng::new(0x1234_5678_9abc_def1);
        let templates = [
            JournalSuperblock::new(1024, 64, UUID)
                .unwrap()
                .to_bytes()
                .to_vec(),
            build_descriptor(
                1024,
                1,
                &UUID,
                &[LoggedBlock {
                    blocknr: 3,
                    escaped: false,
                }; 5],
            )
            .unwrap()
            .0,
            CommitBlock::new(1, 2, 3).build(1024).unwrap(),
            build_revoke(1024, 1, &[1, 2, 3]).unwrap().0,
        ];
        for round in 0..4000 {
            let mut b = templates[round % 4].clone();
            b.truncate((rng.next() % 1100) as usize);
            for _ in 0..(rng.next() % 4) {
                if !b.is_empty() {
                    let i = (rng.next() as usize) % b.len();
                    b[i] = rng.next() as u8;
                }
            }
            let _ = JournalSuperblock::parse(&b).map(|s| (s.to_bytes(), s.check_features()));
            let _ = parse_descriptor(&b);
            let _ = CommitBlock::parse(&b);
            let _ = parse_revoke(&b);
            let _ = needs_escape(&b);
            escape(&mut b);
            unescape(&mut b);
        }
    }
}
