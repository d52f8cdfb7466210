//! FITRIM (Linux: ext4_trim_fs in fs/ext4/mballoc.c; ext3_trim_fs in
//! fs/ext3/balloc.c before ext3 was retired): the free blocks of a range
//! are discarded on the device ([`crate::device::BlockDevice::discard`]),
//! so that an image file gives their space back to the host and an SSD
//! may erase them.
//!
//! Only blocks free in the *committed* bitmap are discarded. A block freed
//! by a transaction that has not committed is clear in the bitmap buffer
//! but still pending ([`crate::journal::Journal::is_pending_free`]): a
//! crash before that commit brings back the file that owned it, with its
//! contents, so discarding it would lose them. The bitmap buffer is read
//! under the group's lock, which allocation and freeing also take, and a
//! block is cleared and made pending under that same lock, so the scan
//! sees no half-freed block, and nothing can allocate a block of the group
//! while its runs are being discarded.

use super::{Filesystem, FsError, Result};
use crate::format::{BlockNo, GroupNo};

impl Filesystem {
    /// Discards the free runs of at least `min_len` bytes among the blocks
    /// in the `len` bytes from `start` (byte offsets into the filesystem,
    /// as `struct fstrim_range` gives them), and returns how many bytes it
    /// discarded. EINVAL for a range that starts past the end or is
    /// shorter than a block, or a `min_len` longer than a group (as ext4);
    /// EOPNOTSUPP when the device cannot discard; EROFS when read-only.
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> Result<u64> {
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        let bs = self.block_size as u64;
        let (first_data, blocks, per_group) = {
            let sb = self.sb.lock();
            (
                sb.s_first_data_block as u64,
                sb.s_blocks_count as u64,
                sb.s_blocks_per_group as u64,
            )
        };
        let min_blocks = (min_len / bs).max(1);
        let first = (start / bs).max(first_data);
        if start / bs >= blocks || len < bs || min_blocks > per_group {
            return Err(FsError::Invalid("trim range"));
        }
        let last = (start / bs).saturating_add(len / bs - 1).min(blocks - 1);
        let mut trimmed = 0u64;
        let mut b = first;
        while b <= last {
            let (g, off, in_group) = {
                let sb = self.sb.lock();
                let (g, off) = sb.block_group(BlockNo(b as u32));
                (g, off as u64, sb.blocks_in_group(g) as u64)
            };
            let to = (off + (last - b)).min(in_group - 1);
            trimmed += self.trim_group(g, off as u32, to as u32, min_blocks as u32)?;
            b += to - off + 1;
        }
        Ok(trimmed * bs)
    }

    /// Discards the runs of at least `min` blocks free and committed among
    /// bits `from..=to` of group `g`; returns how many blocks.
    fn trim_group(&self, g: GroupNo, from: u32, to: u32, min: u32) -> Result<u64> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        if desc.bg_free_blocks_count == 0 {
            return Ok(0);
        }
        let first = self.sb.lock().group_first_block(g).0;
        let buf = self.cache.get(desc.block_bitmap())?;
        let map = buf.read();
        let free = |bit: u32| {
            !super::balloc::test_bit(&map, bit) && !self.journal.is_pending_free(first + bit)
        };
        let bs = self.block_size as u64;
        let mut done = 0u64;
        let mut bit = from;
        while bit <= to {
            if !free(bit) {
                bit += 1;
                continue;
            }
            let run = bit;
            while bit <= to && free(bit) {
                bit += 1;
            }
            let n = bit - run;
            if n >= min {
                self.dev
                    .discard((first + run) as u64 * bs, n as u64 * bs)
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::Unsupported => FsError::NotSupported,
                        _ => FsError::Io(e),
                    })?;
                done += n as u64;
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::device::MemoryDevice;
    use crate::format::{BlockNo, InodeNo};
    use crate::fs::namei::Caller;
    use crate::fs::{Filesystem, FsError, MountConfig};
    use crate::testing::{memory_fs, on_device};

    const ROOT: InodeNo = InodeNo(2);
    const ME: Caller = Caller { uid: 0, gid: 0 };

    fn mounted() -> (Arc<MemoryDevice>, Arc<Filesystem>) {
        memory_fs(8 << 20, &MountConfig::default())
    }

    fn blocks_of(fs: &Filesystem, ino: InodeNo) -> Vec<u32> {
        (0..64u32)
            .filter_map(|l| fs.bmap(ino, l).unwrap())
            .map(|b| b.0)
            .collect()
    }

    fn block_is_zero(mem: &MemoryDevice, b: u32) -> bool {
        on_device(mem, BlockNo(b)).iter().all(|&x| x == 0)
    }

    /// Blocks freed by an uncommitted transaction keep their contents; once
    /// the free has committed they are discarded (zeroed on a memory
    /// device), and live files are never touched.
    #[test]
    fn only_committed_frees_are_discarded() {
        let (mem, fs) = mounted();
        let (keep, _) = fs.mknod(ROOT, b"keep", 0o100644, 0, ME).unwrap();
        let (gone, _) = fs.mknod(ROOT, b"gone", 0o100644, 0, ME).unwrap();
        fs.write(keep, 0, &[0x5a; 20 * 1024], true).unwrap();
        fs.write(gone, 0, &[0xa5; 20 * 1024], true).unwrap();
        fs.sync().unwrap();
        let kept = blocks_of(&fs, keep);
        let freed = blocks_of(&fs, gone);
        assert_eq!((kept.len(), freed.len()), (20, 20));
        fs.unlink(ROOT, b"gone").unwrap();
        let whole = fs.superblock().s_blocks_count as u64 * 1024;
        fs.trim(0, whole, 0).unwrap();
        assert!(
            freed.iter().all(|&b| !block_is_zero(&mem, b)),
            "a free not yet committed was discarded"
        );
        fs.sync().unwrap();
        let n = fs.trim(0, whole, 0).unwrap();
        assert!(n >= 20 * 1024, "trimmed {n} bytes");
        assert!(freed.iter().all(|&b| block_is_zero(&mem, b)));
        assert!(kept.iter().all(|&b| !block_is_zero(&mem, b)));
        assert_eq!(fs.read(keep, 0, 20 * 1024).unwrap(), vec![0x5a; 20 * 1024]);
        // A minimum longer than any free run trims nothing; bad ranges are
        // refused.
        assert!(matches!(fs.trim(whole, 1024, 0), Err(FsError::Invalid(_))));
        assert!(matches!(fs.trim(0, 100, 0), Err(FsError::Invalid(_))));
        fs.unmount().unwrap();
    }
}
