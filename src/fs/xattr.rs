//! Extended attributes (Linux: fs/ext3/xattr.c): external attribute blocks
//! are shared between inodes with identical attributes and refcounted in
//! their header.

use super::inode::InodeState;
use super::{Filesystem, Result};
use crate::format::{BlockNo, InodeNo};
use crate::journal::Handle;

/// `h_magic` of an xattr block.
const EXT2_XATTR_MAGIC: u32 = 0xEA02_0000;

impl Filesystem {
    /// Drops `st`'s reference to its attribute block, freeing the block
    /// when it was the last one.
    pub(crate) fn xattr_release_block(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
    ) -> Result<()> {
        let block = st.disk.i_file_acl;
        st.disk.i_file_acl = 0;
        let b = match self.check_block_ptr(ino, block) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(
                    inode = ino.0,
                    block,
                    "ignoring a corrupt xattr block pointer: {e}"
                );
                return Ok(());
            }
        };
        let sectors = (self.block_size / 512) as u64;
        st.disk.i_blocks = st.disk.i_blocks.saturating_sub(sectors);
        let buf = self.cache.get(b)?;
        let (magic, refs) = {
            let d = buf.read();
            (
                u32::from_le_bytes([d[0], d[1], d[2], d[3]]),
                u32::from_le_bytes([d[4], d[5], d[6], d[7]]),
            )
        };
        if magic != EXT2_XATTR_MAGIC {
            tracing::error!(
                inode = ino.0,
                block,
                "xattr block has a bad magic; not freeing it"
            );
            return Ok(());
        }
        if refs <= 1 {
            return self.free_blocks(h, BlockNo(block), 1);
        }
        h.get_write_access(&buf)?;
        buf.write()[4..8].copy_from_slice(&(refs - 1).to_le_bytes());
        h.dirty_metadata(&buf)?;
        Ok(())
    }
}
