//! The bodies of the fuzz targets, one function per target, shared by
//! fuzz/fuzz_targets/*.rs (which include this file by path) and by
//! tests/robust_fuzz.rs, which runs the seed corpus and every kept crash
//! input through them. Each must return for any input: a panic is a bug.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use jbdfs::device::{BlockDevice, MemoryDevice};
use jbdfs::format::superblock::{self as sbm, feature, Superblock};
use jbdfs::format::{dirent, group_desc, indirect, inode, jbd, xattr};

use crate::walk;

/// nbd_client: the NBD client's wire parsing over a server's bytes: the
/// handshake (export "disk"), then simple replies while cookies 1-8 are in
/// flight, each a read of `cookie * 512` bytes; and, independently, the
/// input as an NBD URI, which must print as a URI that parses back to it.
pub fn nbd_client(data: &[u8]) {
    use jbdfs::device::nbd::{proto, NbdUri};
    use std::io::{Read, Write};

    /// A server that says `input` and hears anything.
    struct Server<'a>(&'a [u8]);
    impl Read for Server<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for Server<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(u) = NbdUri::parse(text) {
            let again = NbdUri::parse(&u.to_string()).expect("a printed URI parses");
            assert_eq!(again, u, "URI round trip");
        }
    }
    // As a plain client, and as a TLS client does: greeting, STARTTLS,
    // GO, then replies. TLS only decrypts; the same parsers read what the
    // server sent, so the same bytes stand for the decrypted stream.
    replies(Server(data), |s| proto::handshake(s, "disk"));
    replies(Server(data), |s| {
        let no_zeroes = proto::greet(s)?;
        proto::starttls(s)?;
        proto::go(s, "disk", no_zeroes)
    });
}

/// The handshake `negotiate` makes, then up to 64 replies, on `server`.
fn replies<S: std::io::Read + std::io::Write>(
    mut server: S,
    negotiate: impl FnOnce(&mut S) -> std::io::Result<jbdfs::device::nbd::ExportInfo>,
) {
    use jbdfs::device::nbd::proto;
    let Ok(info) = negotiate(&mut server) else {
        return;
    };
    assert!(info.min_block.is_power_of_two() && info.min_block <= 65536);
    assert!(info.max_payload >= info.min_block && info.max_payload <= 1 << 25);
    assert_eq!(info.size % info.min_block as u64, 0);
    for _ in 0..64 {
        let known = |c: u64| (1..=8).contains(&c).then(|| c as usize * 512);
        match proto::read_reply(&mut server, known) {
            Ok((cookie, Ok(d))) => assert_eq!(d.len(), cookie as usize * 512),
            Ok((_, Err(e))) => assert!(proto::errno(e) > 0),
            Err(_) => return,
        }
    }
}

/// format_parsers: every parser over the same bytes, and a round trip
/// through the serializer wherever a parse succeeds.
pub fn format_parsers(data: &[u8]) {
    if let Ok(sb) = Superblock::parse(data) {
        let again = Superblock::parse(&sb.to_bytes()).expect("a serialized superblock parses");
        assert!(again == sb, "superblock round trip");
        let _ = (sb.group_count(), sb.gdt_blocks(), sb.inode_table_blocks());
    }
    if let Ok(d) = group_desc::GroupDesc::parse(data) {
        assert_eq!(group_desc::GroupDesc::parse(&d.to_bytes()).unwrap(), d);
    }
    let _ = group_desc::parse_table(data, (data.len() / 32) as u32);
    if let Ok(i) = inode::Inode::parse(data) {
        let again = inode::Inode::parse(&i.to_bytes()).expect("a serialized inode parses");
        assert_eq!(again.i_block, i.i_block);
        let _ = (i.xattr_area().len(), i.rdev(), i.is_fast_symlink(1024));
    }
    for inodes in [None, Some(1 << 16)] {
        for e in dirent::iter_block(data, inodes) {
            if e.is_err() {
                break;
            }
        }
    }
    let _ = dirent::parse_dx_root(data);
    let _ = dirent::parse_dx_node(data);
    for version in 0..6 {
        let _ = dirent::dx_hash(data, version, &[1, 2, 3, 4]);
    }
    if let Ok(b) = xattr::parse_block(data) {
        let _ = b;
    }
    let _ = xattr::parse_ibody(data);
    let _ = xattr::split_name(data);
    let _ = jbd::JournalHeader::parse(data);
    let _ = jbd::JournalSuperblock::parse(data);
    let _ = jbd::parse_descriptor(data);
    let _ = jbd::parse_revoke(data);
    let _ = jbd::CommitBlock::parse(data);
    if data.len() >= 8 {
        let logical = u64::from_le_bytes(data[..8].try_into().unwrap());
        for bs in [1024, 2048, 4096, 65536] {
            let _ = indirect::block_to_path(bs, logical);
        }
        let _ = indirect::get_ptr(data, (logical % 2048) as u32);
        let _ = indirect::ptrs(data).count();
    }
}

/// A 4 MiB jbdfs image with 1 KiB blocks, a small tree and a 1024-block
/// journal, made once per process.
pub fn base_image() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let opts = jbdfs::mkfs::MkfsOptions {
            block_size: Some(1024),
            journal_mib: Some(1),
            ..Default::default()
        };
        let size = walk::SPARSE_DEVICE as u64;
        let mem = Arc::new(MemoryDevice::new(size).unwrap());
        let g = jbdfs::mkfs::plan(&opts, size).unwrap();
        jbdfs::mkfs::format(
            &*mem,
            &opts,
            &g,
            jbdfs::mkfs::Zeroed::All,
            &mut jbdfs::util::Progress::quiet(),
        )
        .unwrap();
        let dev: Arc<dyn BlockDevice> = mem.clone();
        let fs = jbdfs::fs::Filesystem::mount(dev, &Default::default()).unwrap();
        let who = jbdfs::fs::namei::Caller { uid: 0, gid: 0 };
        let root = jbdfs::format::InodeNo(2);
        let (d, _) = fs.mkdir(root, b"d", 0o755, who).unwrap();
        for i in 0..6u8 {
            let (f, _) = fs.mknod(d, &[b'f', b'0' + i], 0o100644, 0, who).unwrap();
            fs.write(f, 0, &vec![i; 700 * i as usize * i as usize], true)
                .unwrap();
        }
        fs.unmount().unwrap();
        mem.snapshot()
    })
}

/// The disk block of each journal block of the base image.
fn base_journal() -> &'static [u32] {
    static MAP: OnceLock<Vec<u32>> = OnceLock::new();
    MAP.get_or_init(|| {
        let img = base_image();
        let dev = MemoryDevice::from_vec(img.to_vec());
        let sb = jbdfs::fs::mount::read_superblock(&dev).unwrap();
        jbdfs::journal::jmap::JournalMap::load(&dev, &sb)
            .unwrap()
            .blocks()
            .to_vec()
    })
}

/// journal_recovery: the input is a big-endian sequence number and then
/// journal blocks, written over the base image's journal from journal
/// block 1 on; the journal superblock says the log starts there with that
/// sequence, and the filesystem needs recovery. Recovery runs; if it
/// succeeds, the result is mounted and walked.
pub fn journal_recovery(input: &[u8]) {
    let mut img = base_image().to_vec();
    let map = base_journal();
    let bs = 1024usize;
    let Some((seq, data)) = input.split_first_chunk::<4>() else {
        return;
    };
    let seq = u32::from_be_bytes(*seq);
    let jsb_at = map[0] as usize * bs;
    let mut jsb = jbd::JournalSuperblock::parse(&img[jsb_at..jsb_at + bs]).unwrap();
    jsb.s_start = jsb.s_first;
    jsb.s_sequence = seq;
    let raw = jsb.to_bytes();
    img[jsb_at..jsb_at + raw.len()].copy_from_slice(&raw);
    for (i, chunk) in data.chunks(bs).enumerate() {
        let Some(&block) = map.get(1 + i) else { break };
        let at = block as usize * bs;
        img[at..at + chunk.len()].copy_from_slice(chunk);
    }
    set_needs_recovery(&mut img);
    let dev = MemoryDevice::from_vec(img);
    let opts = jbdfs::journal::recovery::RecoverOptions { write: true };
    if jbdfs::journal::recovery::recover(&dev, opts).is_ok() {
        let _ = walk::mount_and_walk(dev.snapshot(), false);
    }
}

fn set_needs_recovery(img: &mut [u8]) {
    let at = sbm::SUPERBLOCK_OFFSET as usize;
    if let Ok(mut sb) = Superblock::parse(&img[at..at + sbm::SUPERBLOCK_SIZE]) {
        sb.s_feature_incompat |= feature::INCOMPAT_RECOVER;
        img[at..at + sbm::SUPERBLOCK_SIZE].copy_from_slice(&sb.to_bytes());
    }
}

/// mount_walk: the input is a sparse image (walk::sparse_image); mount it,
/// walk it with writes, unmount.
pub fn mount_walk(data: &[u8]) {
    let _ = walk::mount_and_walk(walk::sparse_image(data), true);
}

/// fsck_image: the input is a sparse image; check it read-only, then
/// with repairs, then check the repaired image again.
pub fn fsck_image(data: &[u8]) {
    use jbdfs::fsck::{check, FsckOptions, Mode};
    let dev = MemoryDevice::from_vec(walk::sparse_image(data));
    for mode in [Mode::No, Mode::Yes, Mode::No] {
        // Field by field: the fsck options are still growing.
        #[allow(clippy::field_reassign_with_default)]
        let opts = {
            let mut o = FsckOptions::default();
            o.mode = mode;
            o.force = true;
            o
        };
        let _ = check(&dev, &opts);
    }
}
