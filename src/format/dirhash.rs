//! The directory name hashes (Linux: fs/ext4/hash.c): legacy, half-MD4
//! and TEA, in their signed and unsigned-char variants. An htree index
//! orders names by these values, so they must match the kernel's bit for
//! bit, or a name Linux indexed is looked for in the wrong leaf.

use super::FormatError;

pub const DX_HASH_LEGACY: u8 = 0;
pub const DX_HASH_HALF_MD4: u8 = 1;
pub const DX_HASH_TEA: u8 = 2;
pub const DX_HASH_LEGACY_UNSIGNED: u8 = 3;
pub const DX_HASH_HALF_MD4_UNSIGNED: u8 = 4;
pub const DX_HASH_TEA_UNSIGNED: u8 = 5;
/// `EXT2_HASH_SIPHASH`: only for encrypted casefolded directories (ext4).
pub const DX_HASH_SIPHASH: u8 = 6;

/// `EXT2_HTREE_EOF_32BIT`: the hash that marks the end of a readdir.
pub const EXT2_HTREE_EOF_32BIT: u32 = 0x7fff_ffff;

/// Seed used when `s_hash_seed` is all zeroes.
pub const DX_DEFAULT_SEED: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// The version the kernel hashes with: an on-disk signed version is bumped
/// to its unsigned twin when the superblock has EXT2_FLAGS_UNSIGNED_HASH.
pub fn effective_hash_version(on_disk: u8, unsigned_hash: bool) -> u8 {
    if unsigned_hash && on_disk <= DX_HASH_TEA {
        on_disk + 3
    } else {
        on_disk
    }
}

/// `ext4fs_dirhash`: (hash, minor_hash) of `name`. `seed` is s_hash_seed
/// as four little-endian words.
pub fn dx_hash(name: &[u8], hash_version: u8, seed: &[u32; 4]) -> Result<(u32, u32), FormatError> {
    let mut buf = if seed.iter().all(|&w| w == 0) {
        DX_DEFAULT_SEED
    } else {
        *seed
    };
    let unsigned = hash_version >= DX_HASH_LEGACY_UNSIGNED;
    let (hash, minor) = match hash_version {
        DX_HASH_LEGACY | DX_HASH_LEGACY_UNSIGNED => (dx_hack_hash(name, unsigned), 0),
        DX_HASH_HALF_MD4 | DX_HASH_HALF_MD4_UNSIGNED => {
            for_chunks(name, 32, unsigned, |w| half_md4_transform(&mut buf, w));
            (buf[1], buf[2])
        }
        DX_HASH_TEA | DX_HASH_TEA_UNSIGNED => {
            for_chunks(name, 16, unsigned, |w| tea_transform(&mut buf, w));
            (buf[0], buf[1])
        }
        v => {
            return Err(FormatError::bad_field(
                "dirent",
                "hash_version",
                v,
                "unknown directory hash",
            ))
        }
    };
    Ok((fix_hash(hash), minor))
}

/// Feeds `name` to a transform `step` bytes at a time.
fn for_chunks(name: &[u8], step: usize, unsigned: bool, mut f: impl FnMut(&[u32; 8])) {
    let mut rest = name;
    while !rest.is_empty() {
        f(&str2hashbuf(rest, step, unsigned));
        rest = rest.get(step..).unwrap_or(&[]);
    }
}

fn fix_hash(hash: u32) -> u32 {
    let hash = hash & !1;
    if hash == EXT2_HTREE_EOF_32BIT << 1 {
        (EXT2_HTREE_EOF_32BIT - 1) << 1
    } else {
        hash
    }
}

/// A name byte as C's `char` (signed) or `unsigned char` would widen it.
fn widen(c: u8, unsigned: bool) -> u32 {
    if unsigned {
        c.into()
    } else {
        c as i8 as i32 as u32
    }
}

fn dx_hack_hash(name: &[u8], unsigned: bool) -> u32 {
    let (mut hash0, mut hash1) = (0x12a3_fe2du32, 0x37ab_e8f9u32);
    for &c in name {
        let mut hash = hash1.wrapping_add(hash0 ^ widen(c, unsigned).wrapping_mul(7_152_373));
        if hash & 0x8000_0000 != 0 {
            hash = hash.wrapping_sub(0x7fff_ffff);
        }
        hash1 = hash0;
        hash0 = hash;
    }
    hash0 << 1
}

/// Packs the first `num_bytes` of `rest` into words, padding with a pattern
/// made from the length of all of `rest` (not just the bytes used).
fn str2hashbuf(rest: &[u8], num_bytes: usize, unsigned: bool) -> [u32; 8] {
    let msg = rest.get(..num_bytes).unwrap_or(rest);
    let len32 = rest.len() as u32;
    let mut pad = len32 | (len32 << 8);
    pad |= pad << 16;
    let mut out = [pad; 8];
    let mut val = pad;
    for (i, &c) in msg.iter().enumerate() {
        val = widen(c, unsigned).wrapping_add(val << 8);
        if i % 4 == 3 {
            if let Some(o) = out.get_mut(i / 4) {
                *o = val;
            }
            val = pad;
        }
    }
    if msg.len() % 4 != 0 {
        if let Some(o) = out.get_mut(msg.len() / 4) {
            *o = val;
        }
    }
    out
}

fn tea_transform(buf: &mut [u32; 4], input: &[u32; 8]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d, ..] = *input;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add(
            (b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b),
        );
        b1 = b1.wrapping_add(
            (b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

fn half_md4_transform(buf: &mut [u32; 4], x: &[u32; 8]) {
    const K2: u32 = 0x5A82_7999;
    const K3: u32 = 0x6ED9_EBA1;
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    // Each round updates one word from the other three, rotating which
    // one: (a, b, c, d) -> (d, a, b, c) after every step, so after a round's
    // eight steps the words are back in place.
    let mut s = *buf;
    let round =
        |s: &mut [u32; 4], fun: &dyn Fn(u32, u32, u32) -> u32, k: u32, steps: [(u32, u32); 8]| {
            let [mut a, mut b, mut c, mut d] = *s;
            for (xv, rot) in steps {
                let v = a
                    .wrapping_add(fun(b, c, d))
                    .wrapping_add(xv.wrapping_add(k));
                (a, b, c, d) = (d, v.rotate_left(rot), b, c);
            }
            *s = [a, b, c, d];
        };
    round(
        &mut s,
        &f,
        0,
        [
            (x[0], 3),
            (x[1], 7),
            (x[2], 11),
            (x[3], 19),
            (x[4], 3),
            (x[5], 7),
            (x[6], 11),
            (x[7], 19),
        ],
    );
    round(
        &mut s,
        &g,
        K2,
        [
            (x[1], 3),
            (x[3], 5),
            (x[5], 9),
            (x[7], 13),
            (x[0], 3),
            (x[2], 5),
            (x[4], 9),
            (x[6], 13),
        ],
    );
    round(
        &mut s,
        &h,
        K3,
        [
            (x[3], 3),
            (x[7], 9),
            (x[2], 11),
            (x[6], 15),
            (x[1], 3),
            (x[5], 9),
            (x[0], 11),
            (x[4], 15),
        ],
    );
    for (dst, v) in buf.iter_mut().zip(s) {
        *dst = dst.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: [u32; 4] = [0xbfc9_2537, 0x6048_f371, 0x1ad4_d0b4, 0x1a9a_e134];
    const LONG: &[u8] = b"caf\xc3\xa9_long_name_with_more_than_thirty_two_bytes_x";
    const ALNUM: &[u8] =
        b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";

    /// (name, hash_version, seed, hash, minor_hash)
    type HashCase<'a> = (&'a [u8], u8, &'a [u32; 4], u32, u32);

    /// Values printed by e2fsprogs 1.47 `debugfs -R "dx_hash -h H [-s S] NAME"`.
    #[test]
    fn hashes_match_debugfs() {
        let zero = [0u32; 4];
        let cases: &[HashCase] = &[
            (b"name3", DX_HASH_LEGACY, &zero, 0xa7fc_f5ce, 0),
            (LONG, DX_HASH_LEGACY, &zero, 0x8fd6_63c4, 0),
            (ALNUM, DX_HASH_LEGACY, &zero, 0xe078_7e10, 0),
            (b"name3", DX_HASH_HALF_MD4, &SEED, 0x0d69_2bb8, 0xd40c_2bbc),
            (b"name3", DX_HASH_HALF_MD4, &zero, 0x6689_95ec, 0x6e06_ab07),
            (LONG, DX_HASH_HALF_MD4, &SEED, 0x69f8_c304, 0x0553_dbf3),
            (LONG, DX_HASH_HALF_MD4, &zero, 0x5370_36f6, 0xf50b_cddc),
            (ALNUM, DX_HASH_HALF_MD4, &SEED, 0xb065_ed7a, 0x77ad_86f8),
            (ALNUM, DX_HASH_HALF_MD4, &zero, 0x201f_dc7c, 0xcd81_d85b),
            (b"name3", DX_HASH_TEA, &SEED, 0xb295_2034, 0x71d0_e50d),
            (b"name3", DX_HASH_TEA, &zero, 0xeafa_1730, 0xc378_4348),
            (LONG, DX_HASH_TEA, &SEED, 0xa4b9_6f0a, 0x6e30_c9e9),
            (LONG, DX_HASH_TEA, &zero, 0x1159_3df6, 0xa8f7_02a4),
            (ALNUM, DX_HASH_TEA, &SEED, 0x3c92_5f08, 0x0066_6736),
            (ALNUM, DX_HASH_TEA, &zero, 0xfa94_0220, 0xc032_b74f),
            (LONG, DX_HASH_LEGACY_UNSIGNED, &zero, 0xbda9_d258, 0),
            (
                LONG,
                DX_HASH_HALF_MD4_UNSIGNED,
                &zero,
                0xa72f_8112,
                0xd36b_b104,
            ),
            (LONG, DX_HASH_TEA_UNSIGNED, &zero, 0x38da_6168, 0x9faf_03c2),
        ];
        for &(name, v, seed, hash, minor) in cases {
            let got = dx_hash(name, v, seed).unwrap();
            assert_eq!(got, (hash, minor), "{} v{v}", String::from_utf8_lossy(name));
        }
        assert!(dx_hash(b"x", 6, &zero).is_err());
    }

    #[test]
    fn hash_low_bit_clear_and_eof_avoided() {
        assert_eq!(fix_hash(0xffff_ffff), 0xffff_fffc);
        assert_eq!(fix_hash(0xffff_fffe), 0xffff_fffc);
        assert_eq!(fix_hash(0x1235), 0x1234);
        assert_eq!(
            effective_hash_version(DX_HASH_TEA, true),
            DX_HASH_TEA_UNSIGNED
        );
        assert_eq!(effective_hash_version(DX_HASH_TEA, false), DX_HASH_TEA);
    }
}
