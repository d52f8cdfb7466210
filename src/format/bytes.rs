//! Fixed-offset integer access for on-disk structures.
//!
//! Parsers call [`need`] once for the whole structure, after which the fixed
//! offsets used with these helpers are in bounds by construction. Offsets that
//! come from disk contents must never be passed here unchecked.
//!
//! The helpers cannot panic all the same: a field that does not lie inside
//! `buf` reads as zeros and is not written, so a caller's slip over a corrupt
//! structure gives a wrong value that its checks refuse, not a crash of the
//! daemon. Where a caller needs to know, [`get`] and [`array_at`] say so.

use super::FormatError;

/// Checks that `buf` holds at least `need` bytes of `structure`.
pub fn need(structure: &'static str, buf: &[u8], need: usize) -> Result<(), FormatError> {
    if buf.len() < need {
        Err(FormatError::Short {
            structure,
            len: buf.len(),
            need,
        })
    } else {
        Ok(())
    }
}

/// The `N` bytes at `off`, or `None` when they do not all lie inside `buf`.
pub fn get<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    buf.get(off..)?.first_chunk::<N>().copied()
}

/// The `N` bytes at `off` of `structure`, or `Short` when `buf` ends first.
pub fn array_at<const N: usize>(
    structure: &'static str,
    buf: &[u8],
    off: usize,
) -> Result<[u8; N], FormatError> {
    get(buf, off).ok_or(FormatError::Short {
        structure,
        len: buf.len(),
        need: off.saturating_add(N),
    })
}

fn array<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    get(buf, off).unwrap_or([0; N])
}

fn put<const N: usize>(buf: &mut [u8], off: usize, v: [u8; N]) {
    if let Some(field) = buf.get_mut(off..).and_then(|b| b.first_chunk_mut::<N>()) {
        *field = v;
    }
}

pub fn byte(buf: &[u8], off: usize) -> u8 {
    buf.get(off).copied().unwrap_or(0)
}

pub fn put_byte(buf: &mut [u8], off: usize, v: u8) {
    if let Some(b) = buf.get_mut(off) {
        *b = v;
    }
}

pub fn le16(buf: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(array(buf, off))
}

pub fn le32(buf: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(array(buf, off))
}

pub fn le64(buf: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(array(buf, off))
}

pub fn be16(buf: &[u8], off: usize) -> u16 {
    u16::from_be_bytes(array(buf, off))
}

pub fn be32(buf: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(array(buf, off))
}

pub fn be64(buf: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(array(buf, off))
}

pub fn put_le16(buf: &mut [u8], off: usize, v: u16) {
    put(buf, off, v.to_le_bytes());
}

pub fn put_le32(buf: &mut [u8], off: usize, v: u32) {
    put(buf, off, v.to_le_bytes());
}

pub fn put_le64(buf: &mut [u8], off: usize, v: u64) {
    put(buf, off, v.to_le_bytes());
}

pub fn put_be16(buf: &mut [u8], off: usize, v: u16) {
    put(buf, off, v.to_be_bytes());
}

pub fn put_be32(buf: &mut [u8], off: usize, v: u32) {
    put(buf, off, v.to_be_bytes());
}

pub fn put_be64(buf: &mut [u8], off: usize, v: u64) {
    put(buf, off, v.to_be_bytes());
}

/// Copies a fixed-size byte field.
pub fn bytes<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    array(buf, off)
}

pub fn put_bytes(buf: &mut [u8], off: usize, v: &[u8]) {
    if let Some(field) = buf.get_mut(off..).and_then(|b| b.get_mut(..v.len())) {
        field.copy_from_slice(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endianness_round_trips() {
        let mut b = [0u8; 16];
        put_le32(&mut b, 0, 0x1234_5678);
        put_be32(&mut b, 4, 0x1234_5678);
        put_le64(&mut b, 8, 0x0102_0304_0506_0708);
        assert_eq!(b[0], 0x78);
        assert_eq!(b[4], 0x12);
        assert_eq!(le32(&b, 0), 0x1234_5678);
        assert_eq!(be32(&b, 4), 0x1234_5678);
        assert_eq!(le64(&b, 8), 0x0102_0304_0506_0708);
        put_le16(&mut b, 0, 0xabcd);
        put_be16(&mut b, 2, 0xabcd);
        assert_eq!(le16(&b, 0), 0xabcd);
        assert_eq!(be16(&b, 2), 0xabcd);
    }

    #[test]
    fn fields_past_the_end_read_as_zero_and_are_not_written() {
        let mut b = [0xffu8; 6];
        assert_eq!(le32(&b, 4), 0);
        assert_eq!(be64(&b, usize::MAX), 0);
        assert_eq!(get::<4>(&b, 3), None);
        assert!(array_at::<4>("x", &b, 3).is_err());
        put_le32(&mut b, 4, 0);
        put_bytes(&mut b, 5, &[0, 0]);
        assert_eq!(b, [0xff; 6]);
    }

    #[test]
    fn short_buffer_is_an_error() {
        assert!(need("x", &[0u8; 3], 4).is_err());
        assert!(need("x", &[0u8; 4], 4).is_ok());
    }
}
