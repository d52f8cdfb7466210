//! POSIX ACLs in their two byte formats, and the kernel's rules on them
//! (Linux: fs/posix_acl.c, fs/ext4/acl.c, include/uapi/linux/posix_acl_xattr.h).
//!
//! - The **xattr format** is what getxattr/setxattr of
//!   `system.posix_acl_access` and `system.posix_acl_default` carry between
//!   the kernel and userspace (and so over FUSE): `posix_acl_xattr_header`
//!   (`a_version` = 2) and 8-byte entries `{e_tag, e_perm, e_id}`.
//! - The **ext3 format** is what the xattr entries of name index 2 and 3
//!   hold on disk: `ext3_acl_header` (`a_version` = 1), then 4-byte short
//!   entries `{e_tag, e_perm}` for USER_OBJ, GROUP_OBJ, MASK and OTHER and
//!   8-byte entries `{e_tag, e_perm, e_id}` for named users and groups.
//!
//! Both convert to and from [`Acl`]; the rules the kernel applies to an
//! ACL (`posix_acl_valid`, `posix_acl_equiv_mode`, `posix_acl_chmod`,
//! `posix_acl_create`'s masking) are methods on it. All little-endian.

use super::bytes::{le16, le32, put_le16, put_le32};
use super::FormatError;

/// `POSIX_ACL_XATTR_VERSION`.
pub const POSIX_ACL_XATTR_VERSION: u32 = 0x0002;
/// `EXT3_ACL_VERSION` (ext4's `EXT4_ACL_VERSION`).
pub const EXT3_ACL_VERSION: u32 = 0x0001;
/// `ACL_UNDEFINED_ID`: the `e_id` the kernel writes for unnamed entries.
pub const ACL_UNDEFINED_ID: u32 = u32::MAX;

/// `e_tag` values.
pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;

/// `e_perm` bits.
pub const ACL_READ: u16 = 0x04;
pub const ACL_WRITE: u16 = 0x02;
pub const ACL_EXECUTE: u16 = 0x01;

/// Sizes of `posix_acl_xattr_header`/`_entry`, `ext3_acl_header`,
/// `ext3_acl_entry_short` and `ext3_acl_entry`.
const XATTR_HEADER: usize = 4;
const XATTR_ENTRY: usize = 8;
const DISK_HEADER: usize = 4;
const DISK_SHORT: usize = 4;
const DISK_FULL: usize = 8;

const XATTR: &str = "posix_acl_xattr";
const DISK: &str = "ext3_acl";
const ACL: &str = "posix_acl";

/// The permission bits of a mode (S_IRWXUGO).
const S_IRWXUGO: u16 = 0o777;
const S_ISGID: u16 = 0o2000;

/// One ACL entry. `e_id` is a uid for ACL_USER, a gid for ACL_GROUP, and
/// [`ACL_UNDEFINED_ID`] for every other tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub e_tag: u16,
    pub e_perm: u16,
    pub e_id: u32,
}

impl AclEntry {
    pub fn new(e_tag: u16, e_perm: u16, e_id: u32) -> AclEntry {
        let named = matches!(e_tag, ACL_USER | ACL_GROUP);
        AclEntry {
            e_tag,
            e_perm,
            e_id: if named { e_id } else { ACL_UNDEFINED_ID },
        }
    }
}

/// Which of an inode's two ACLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclType {
    /// `system.posix_acl_access`, name index 2: who may do what.
    Access,
    /// `system.posix_acl_default`, name index 3 (directories only): what
    /// new children inherit.
    Default,
}

impl AclType {
    /// The full xattr name.
    pub fn name(self) -> &'static [u8] {
        match self {
            AclType::Access => b"system.posix_acl_access",
            AclType::Default => b"system.posix_acl_default",
        }
    }

    /// The ext3 xattr name index (the name suffix is empty).
    pub fn name_index(self) -> u8 {
        match self {
            AclType::Access => super::xattr::EXT2_XATTR_INDEX_POSIX_ACL_ACCESS,
            AclType::Default => super::xattr::EXT2_XATTR_INDEX_POSIX_ACL_DEFAULT,
        }
    }

    /// The ACL a full xattr name stands for, if it is one of the two.
    pub fn of_name(name: &[u8]) -> Option<AclType> {
        [AclType::Access, AclType::Default]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// A POSIX ACL: its entries in the order they were given (a valid ACL is
/// in the kernel's order; see [`Acl::valid`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<AclEntry>,
}

fn known_tag(structure: &'static str, tag: u16) -> Result<bool, FormatError> {
    match tag {
        ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => Ok(false),
        ACL_USER | ACL_GROUP => Ok(true),
        t => Err(FormatError::bad_field(structure, "e_tag", t, "unknown tag")),
    }
}

impl Acl {
    /// The three-entry ACL a mode's permission bits stand for.
    pub fn from_mode(mode: u16) -> Acl {
        Acl {
            entries: vec![
                AclEntry::new(ACL_USER_OBJ, (mode >> 6) & 7, 0),
                AclEntry::new(ACL_GROUP_OBJ, (mode >> 3) & 7, 0),
                AclEntry::new(ACL_OTHER, mode & 7, 0),
            ],
        }
    }

    /// Parses the xattr format (`posix_acl_from_xattr`): `None` for an
    /// ACL of no entries, which the kernel takes as "remove it".
    pub fn from_xattr(value: &[u8]) -> Result<Option<Acl>, FormatError> {
        super::bytes::need(XATTR, value, XATTR_HEADER)?;
        let version = le32(value, 0);
        if version != POSIX_ACL_XATTR_VERSION {
            return Err(FormatError::bad_field(
                XATTR,
                "a_version",
                version,
                "not version 2",
            ));
        }
        let body = value.get(XATTR_HEADER..).unwrap_or(&[]);
        if body.len() % XATTR_ENTRY != 0 {
            return Err(FormatError::bad_field(
                XATTR,
                "size",
                value.len() as u64,
                "not a whole number of entries",
            ));
        }
        let mut entries = Vec::with_capacity(body.len() / XATTR_ENTRY);
        for e in body.chunks_exact(XATTR_ENTRY) {
            let (tag, perm, id) = (le16(e, 0), le16(e, 2), le32(e, 4));
            if known_tag(XATTR, tag)? && id == ACL_UNDEFINED_ID {
                return Err(FormatError::bad_field(
                    XATTR,
                    "e_id",
                    id,
                    "a named entry needs a valid id",
                ));
            }
            entries.push(AclEntry::new(tag, perm, id));
        }
        Ok((!entries.is_empty()).then_some(Acl { entries }))
    }

    /// The xattr format (`posix_acl_to_xattr`): unnamed entries carry
    /// `ACL_UNDEFINED_ID`, as the kernel's do.
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut out = vec![0u8; XATTR_HEADER + XATTR_ENTRY * self.entries.len()];
        put_le32(&mut out, 0, POSIX_ACL_XATTR_VERSION);
        for (i, e) in self.entries.iter().enumerate() {
            let at = XATTR_HEADER + i * XATTR_ENTRY;
            put_le16(&mut out, at, e.e_tag);
            put_le16(&mut out, at + 2, e.e_perm);
            let id = match e.e_tag {
                ACL_USER | ACL_GROUP => e.e_id,
                _ => ACL_UNDEFINED_ID,
            };
            put_le32(&mut out, at + 4, id);
        }
        out
    }

    /// Parses ext3's on-disk format (`ext4_acl_from_disk`, with the size
    /// check of `ext4_acl_count`): `None` for a header alone.
    pub fn from_disk(value: &[u8]) -> Result<Option<Acl>, FormatError> {
        super::bytes::need(DISK, value, DISK_HEADER)?;
        let version = le32(value, 0);
        if version != EXT3_ACL_VERSION {
            return Err(FormatError::bad_field(
                DISK,
                "a_version",
                version,
                "not version 1",
            ));
        }
        // ext4_acl_count: up to four short entries, or exactly four and
        // the rest full ones.
        let body = value.len() - DISK_HEADER;
        let whole = match body.checked_sub(4 * DISK_SHORT) {
            None => body % DISK_SHORT == 0,
            Some(rest) => rest % DISK_FULL == 0,
        };
        if !whole {
            return Err(FormatError::bad_field(
                DISK,
                "size",
                value.len() as u64,
                "not a whole number of entries",
            ));
        }
        let mut entries = Vec::new();
        let mut at = DISK_HEADER;
        while at < value.len() {
            super::bytes::need(DISK, value, at + DISK_SHORT)?;
            let (tag, perm) = (le16(value, at), le16(value, at + 2));
            if known_tag(DISK, tag)? {
                super::bytes::need(DISK, value, at + DISK_FULL)?;
                entries.push(AclEntry::new(tag, perm, le32(value, at + 4)));
                at += DISK_FULL;
            } else {
                entries.push(AclEntry::new(tag, perm, 0));
                at += DISK_SHORT;
            }
        }
        Ok((!entries.is_empty()).then_some(Acl { entries }))
    }

    /// ext3's on-disk format (`ext4_acl_to_disk`).
    pub fn to_disk(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DISK_HEADER + DISK_FULL * self.entries.len());
        out.extend_from_slice(&EXT3_ACL_VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.e_tag.to_le_bytes());
            out.extend_from_slice(&e.e_perm.to_le_bytes());
            if matches!(e.e_tag, ACL_USER | ACL_GROUP) {
                out.extend_from_slice(&e.e_id.to_le_bytes());
            }
        }
        out
    }

    /// `posix_acl_valid`: permissions within rwx, entries in the order
    /// USER_OBJ, USER..., GROUP_OBJ, GROUP..., MASK, OTHER, each required
    /// one present once, and a MASK whenever there are named entries.
    pub fn valid(&self) -> Result<(), FormatError> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let bad = |e: &AclEntry, why| Err(FormatError::bad_field(ACL, "e_tag", e.e_tag, why));
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.e_perm & !(ACL_READ | ACL_WRITE | ACL_EXECUTE) != 0 {
                return Err(FormatError::bad_field(
                    ACL,
                    "e_perm",
                    e.e_perm,
                    "bits beyond rwx",
                ));
            }
            match e.e_tag {
                ACL_USER_OBJ if state == State::UserObj => state = State::User,
                ACL_USER if state == State::User => {
                    if e.e_id == ACL_UNDEFINED_ID {
                        return bad(e, "a named user without an id");
                    }
                    needs_mask = true;
                }
                ACL_GROUP_OBJ if state == State::User => state = State::Group,
                ACL_GROUP if state == State::Group => {
                    if e.e_id == ACL_UNDEFINED_ID {
                        return bad(e, "a named group without an id");
                    }
                    needs_mask = true;
                }
                ACL_MASK if state == State::Group => state = State::Other,
                ACL_OTHER if state == State::Other || (state == State::Group && !needs_mask) => {
                    state = State::Done
                }
                ACL_USER_OBJ | ACL_USER | ACL_GROUP_OBJ | ACL_GROUP | ACL_MASK | ACL_OTHER => {
                    return bad(e, "out of order, repeated, or a mask missing")
                }
                _ => return bad(e, "unknown tag"),
            }
        }
        if state == State::Done {
            Ok(())
        } else {
            Err(FormatError::bad_field(
                ACL,
                "entries",
                self.entries.len() as u64,
                "a required entry is missing",
            ))
        }
    }

    /// `posix_acl_equiv_mode`: `mode` with its permission bits as the ACL
    /// has them (the mask standing for the group bits), and whether the
    /// ACL says no more than those bits (no named entries, no mask).
    pub fn equiv_mode(&self, mode: u16) -> (u16, bool) {
        let mut bits = 0u16;
        let mut equiv = true;
        for e in &self.entries {
            let p = e.e_perm & 7;
            match e.e_tag {
                ACL_USER_OBJ => bits |= p << 6,
                ACL_GROUP_OBJ => bits |= p << 3,
                ACL_OTHER => bits |= p,
                ACL_MASK => {
                    bits = (bits & !0o070) | (p << 3);
                    equiv = false;
                }
                _ => equiv = false,
            }
        }
        ((mode & !S_IRWXUGO) | bits, equiv)
    }

    /// `posix_acl_update_mode`, for setting an access ACL: the inode's new
    /// mode, and whether the ACL must still be stored (false when the mode
    /// says it all). The setgid bit goes unless the setter is in the
    /// file's group or may keep it (`keep_sgid`).
    pub fn update_mode(&self, mode: u16, keep_sgid: bool) -> (u16, bool) {
        let (mut mode, equiv) = self.equiv_mode(mode);
        if !keep_sgid {
            mode &= !S_ISGID;
        }
        (mode, !equiv)
    }

    /// `posix_acl_chmod` (`__posix_acl_chmod`): the owner, group-class
    /// (the mask if there is one, else the owning group) and other entries
    /// take the new mode's bits.
    pub fn chmod(&mut self, mode: u16) -> Result<(), FormatError> {
        let (mut user, mut group, mut mask, mut other) = (None, None, None, None);
        for (i, e) in self.entries.iter().enumerate() {
            match e.e_tag {
                ACL_USER_OBJ => user = Some(i),
                ACL_GROUP_OBJ => group = Some(i),
                ACL_MASK => mask = Some(i),
                ACL_OTHER => other = Some(i),
                ACL_USER | ACL_GROUP => {}
                t => return Err(FormatError::bad_field(ACL, "e_tag", t, "unknown tag")),
            }
        }
        let missing =
            || FormatError::bad_field(ACL, "entries", 0u64, "a required entry is missing");
        let user = user.ok_or_else(missing)?;
        let other = other.ok_or_else(missing)?;
        let group = mask.or(group).ok_or_else(missing)?;
        for (i, perm) in [(user, mode >> 6), (group, mode >> 3), (other, mode)] {
            if let Some(e) = self.entries.get_mut(i) {
                e.e_perm = perm & 7;
            }
        }
        Ok(())
    }

    /// `posix_acl_create_masq`: a default ACL becoming a new inode's
    /// access ACL. The owner, group-class and other entries are masked by
    /// the create mode and the mode's bits by them; returns the new mode
    /// and whether the ACL says more than the mode (and must be stored).
    pub fn create_masq(&mut self, mode: u16) -> Result<(u16, bool), FormatError> {
        let mut m = mode;
        let (mut group, mut mask) = (None, None);
        let mut not_equiv = false;
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.e_tag {
                ACL_USER_OBJ => {
                    e.e_perm &= (m >> 6) | !7;
                    m &= (e.e_perm << 6) | !0o700;
                }
                ACL_USER | ACL_GROUP => not_equiv = true,
                ACL_GROUP_OBJ => group = Some(i),
                ACL_OTHER => {
                    e.e_perm &= m | !7;
                    m &= e.e_perm | !0o007;
                }
                ACL_MASK => {
                    mask = Some(i);
                    not_equiv = true;
                }
                t => return Err(FormatError::bad_field(ACL, "e_tag", t, "unknown tag")),
            }
        }
        let Some(e) = mask.or(group).and_then(|g| self.entries.get_mut(g)) else {
            return Err(FormatError::bad_field(
                ACL,
                "entries",
                0u64,
                "no owning-group entry",
            ));
        };
        e.e_perm &= (m >> 3) | !7;
        m &= (e.e_perm << 3) | !0o070;
        Ok(((mode & !S_IRWXUGO) | (m & S_IRWXUGO), not_equiv))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // Made by Linux 6.18 on an ext3 loop mount:
    //   setfacl -m u:daemon:rw,g:bin:r,u:nobody:x f
    //   setfacl -m d:u:daemon:rwx,d:g:bin:rx d
    // the xattr bytes from getxattr(2) on that mount, the disk bytes from
    // `debugfs -R "ea_get -r -x FILE NAME"` on the unmounted image.
    const F_XATTR: &str = "0200000001000600ffffffff020006000100000002000100feff0000\
                           04000400ffffffff080004000200000010000700ffffffff20000400ffffffff";
    const F_DISK: &str = "0100000001000600020006000100000002000100feff0000\
                          0400040008000400020000001000070020000400";
    const D_XATTR: &str = "0200000001000700ffffffff020007000100000004000500ffffffff\
                           080005000200000010000700ffffffff20000500ffffffff";
    const D_DISK: &str = "010000000100070002000700010000000400050008000500\
                          020000001000070020000500";

    #[test]
    fn the_kernels_bytes_convert_both_ways() {
        for (x, d) in [(F_XATTR, F_DISK), (D_XATTR, D_DISK)] {
            let (x, d) = (hex(x), hex(d));
            let from_x = Acl::from_xattr(&x).unwrap().unwrap();
            let from_d = Acl::from_disk(&d).unwrap().unwrap();
            assert_eq!(from_x, from_d);
            from_x.valid().unwrap();
            assert_eq!(from_x.to_disk(), d);
            assert_eq!(from_d.to_xattr(), x);
        }
        let f = Acl::from_disk(&hex(F_DISK)).unwrap().unwrap();
        assert_eq!(f.entries.len(), 7);
        assert_eq!(f.entries[1], AclEntry::new(ACL_USER, 6, 1));
        assert_eq!(f.entries[2], AclEntry::new(ACL_USER, 1, 65534));
        assert_eq!(f.entries[4], AclEntry::new(ACL_GROUP, 4, 2));
    }

    #[test]
    fn empty_acls_are_none_and_bad_sizes_refused() {
        assert_eq!(Acl::from_xattr(&hex("02000000")).unwrap(), None);
        assert_eq!(Acl::from_disk(&hex("01000000")).unwrap(), None);
        assert!(Acl::from_xattr(&hex("01000000")).is_err());
        assert!(Acl::from_disk(&hex("02000000")).is_err());
        assert!(Acl::from_xattr(&hex("0200000001000600")).is_err());
        assert!(Acl::from_xattr(&[]).is_err());
        // Six bytes of body: neither short entries nor four plus full ones.
        assert!(Acl::from_disk(&hex("01000000010006000400")).is_err());
        // A named entry cut short.
        assert!(Acl::from_disk(&hex("0100000002000600")).is_err());
        // Unknown tag.
        assert!(Acl::from_disk(&hex("0100000040000600")).is_err());
        assert!(Acl::from_xattr(&hex("0200000040000600ffffffff")).is_err());
        // A named user without an id.
        assert!(Acl::from_xattr(&hex("0200000002000600ffffffff")).is_err());
    }

    #[test]
    fn random_bytes_never_panic_and_round_trip_when_parsed() {
        let mut seed = 0x1234_5678u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for _ in 0..20_000 {
            let len = (next() % 48) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 4 && next() % 2 == 0 {
                v[..4].copy_from_slice(&1u32.to_le_bytes());
            }
            if let Ok(Some(acl)) = Acl::from_disk(&v) {
                assert_eq!(acl.to_disk(), v);
            }
            if len >= 4 {
                v[..4].copy_from_slice(&2u32.to_le_bytes());
            }
            if let Ok(Some(acl)) = Acl::from_xattr(&v) {
                assert_eq!(Acl::from_xattr(&acl.to_xattr()).unwrap().unwrap(), acl);
            }
        }
    }

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl {
            entries: entries
                .iter()
                .map(|&(t, p, i)| AclEntry::new(t, p, i))
                .collect(),
        }
    }

    #[test]
    fn validity_is_the_kernels() {
        let ok = [
            acl(&[
                (ACL_USER_OBJ, 6, 0),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_OTHER, 4, 0),
            ]),
            acl(&[
                (ACL_USER_OBJ, 6, 0),
                (ACL_USER, 6, 1),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_GROUP, 4, 2),
                (ACL_MASK, 6, 0),
                (ACL_OTHER, 4, 0),
            ]),
            // A mask without named entries is allowed.
            acl(&[
                (ACL_USER_OBJ, 6, 0),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_MASK, 4, 0),
                (ACL_OTHER, 4, 0),
            ]),
        ];
        for a in &ok {
            a.valid().unwrap();
        }
        let bad = [
            // No mask with a named user.
            acl(&[
                (ACL_USER_OBJ, 6, 0),
                (ACL_USER, 6, 1),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_OTHER, 4, 0),
            ]),
            // Missing other.
            acl(&[(ACL_USER_OBJ, 6, 0), (ACL_GROUP_OBJ, 4, 0)]),
            // Out of order.
            acl(&[
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_USER_OBJ, 6, 0),
                (ACL_OTHER, 4, 0),
            ]),
            // Repeated owner.
            acl(&[
                (ACL_USER_OBJ, 6, 0),
                (ACL_USER_OBJ, 6, 0),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_OTHER, 4, 0),
            ]),
            // Bits beyond rwx.
            acl(&[
                (ACL_USER_OBJ, 8, 0),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_OTHER, 4, 0),
            ]),
            // Entries after other.
            acl(&[
                (ACL_USER_OBJ, 6, 0),
                (ACL_GROUP_OBJ, 4, 0),
                (ACL_OTHER, 4, 0),
                (ACL_OTHER, 4, 0),
            ]),
            acl(&[]),
        ];
        for a in &bad {
            assert!(a.valid().is_err(), "{a:?}");
        }
    }

    #[test]
    fn mode_and_acl_stay_in_step() {
        let min = Acl::from_mode(0o640);
        assert_eq!(min.equiv_mode(0o100777), (0o100640, true));
        let mut full = acl(&[
            (ACL_USER_OBJ, 7, 0),
            (ACL_USER, 6, 1),
            (ACL_GROUP_OBJ, 4, 0),
            (ACL_MASK, 5, 0),
            (ACL_OTHER, 0, 0),
        ]);
        // The mask stands for the group bits.
        assert_eq!(full.equiv_mode(0o100000), (0o100750, false));
        assert_eq!(full.update_mode(0o102000, false), (0o100750, true));
        assert_eq!(full.update_mode(0o102000, true), (0o102750, true));
        // chmod sets the mask, not the owning group, when there is one.
        full.chmod(0o604).unwrap();
        assert_eq!(full.entries[0].e_perm, 6);
        assert_eq!(full.entries[2].e_perm, 4);
        assert_eq!(full.entries[3].e_perm, 0);
        assert_eq!(full.entries[4].e_perm, 4);
        let mut plain = Acl::from_mode(0o777);
        plain.chmod(0o751).unwrap();
        assert_eq!(plain, Acl::from_mode(0o751));
        assert!(acl(&[(ACL_USER_OBJ, 7, 0)]).chmod(0o700).is_err());
    }

    #[test]
    fn inheritance_masks_both_ways() {
        // default: u::rwx u:1:rwx g::r-x m::rwx o::r-x, created 0666.
        let mut d = acl(&[
            (ACL_USER_OBJ, 7, 0),
            (ACL_USER, 7, 1),
            (ACL_GROUP_OBJ, 5, 0),
            (ACL_MASK, 7, 0),
            (ACL_OTHER, 5, 0),
        ]);
        let (mode, keep) = d.create_masq(0o100666).unwrap();
        assert_eq!(mode, 0o100664);
        assert!(keep);
        assert_eq!(
            d.entries.iter().map(|e| e.e_perm).collect::<Vec<_>>(),
            vec![6, 7, 5, 6, 4]
        );
        // A minimal default ACL gives just a mode, as a umask would.
        let mut m = Acl::from_mode(0o750);
        assert_eq!(m.create_masq(0o040777).unwrap(), (0o040750, false));
        assert!(acl(&[(ACL_USER_OBJ, 7, 0), (ACL_OTHER, 7, 0)])
            .create_masq(0o666)
            .is_err());
    }

    #[test]
    fn names_and_indexes() {
        assert_eq!(
            AclType::of_name(b"system.posix_acl_access"),
            Some(AclType::Access)
        );
        assert_eq!(
            AclType::of_name(b"system.posix_acl_default"),
            Some(AclType::Default)
        );
        assert_eq!(AclType::of_name(b"system.posix_acl"), None);
        for t in [AclType::Access, AclType::Default] {
            let (index, rest) = super::super::xattr::split_name(t.name()).unwrap();
            assert_eq!((index, rest), (t.name_index(), &b""[..]));
        }
    }
}
