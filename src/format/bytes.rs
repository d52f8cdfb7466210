//! Fixed-offset integer access for on-disk structures.
//!
//! Parsers call [`need`] once for the whole structure, after which the fixed
//! offsets used with these helpers are in bounds by construction. Offsets that
//! come from disk contents must never be passed here unchecked.

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

fn array<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[off..off + N]);
    out
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
    buf[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub fn put_le32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_le64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn put_be16(buf: &mut [u8], off: usize, v: u16) {
    buf[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

pub fn put_be32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

pub fn put_be64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Copies a fixed-size byte field.
pub fn bytes<const N: usize>(buf: &[u8], off: usize) -> [u8; N] {
    array(buf, off)
}

pub fn put_bytes(buf: &mut [u8], off: usize, v: &[u8]) {
    buf[off..off + v.len()].copy_from_slice(v);
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
    fn short_buffer_is_an_error() {
        assert!(need("x", &[0u8; 3], 4).is_err());
        assert!(need("x", &[0u8; 4], 4).is_ok());
    }
}
