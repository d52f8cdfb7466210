// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! jbdfs's on-disk parsers against e2fsprogs: images made by mke2fs and
//! populated by debugfs are parsed with `jbdfs::format`, and every field is
//! compared with what dumpe2fs and debugfs print for the same image.

use jbdfs_testkit as common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;

use common::*;
use jbdfs::format::group_desc::{self, GroupDesc};
use jbdfs::format::inode::{Inode, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use jbdfs::format::superblock::{feature, Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

const LONG_TARGET_LEN: usize = 130;
/// 2020-01-01 12:00:00 UTC, as `set_inode_field ... 20200101120000` sets it.
const MTIME_2020: i64 = 1_577_880_000;
/// 2021-01-01 12:00:00 UTC.
const ATIME_2021: i64 = 1_609_502_400;

struct Image {
    img: TempImage,
    // Kept alive for the image's lifetime: debugfs reads it while writing.
    _big: TempImage,
    big_len: usize,
}

/// mke2fs then debugfs: a directory, a small file with set times and
/// owner, a file with an indirect (and for 1 KiB blocks a long) map, a fast
/// and a slow symlink.
fn populated(tag: &str, mke2fs_args: &[&str]) -> Image {
    let img = TempImage::sparse(tag, 64 << 20);
    let mut args: Vec<&OsStr> = ["-q", "-F", "-t", "ext3"].iter().map(OsStr::new).collect();
    args.extend(mke2fs_args.iter().map(OsStr::new));
    args.push(img.path.as_os_str());
    args.push(OsStr::new("64M"));
    run("mke2fs", args).expect_ok();

    let big = TempImage::new(&format!("{tag}-big"));
    let big_len = 300_000;
    let data: Vec<u8> = (0..big_len).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(&big.path, &data).unwrap();
    let long_target = format!("/{}", "t".repeat(LONG_TARGET_LEN - 1));
    let cmds = [
        "mkdir d".to_string(),
        "mkdir d/sub".to_string(),
        "write /etc/passwd f".to_string(),
        format!("write {} d/big", big.path_str()),
        "symlink s /a/target".to_string(),
        format!("symlink long {long_target}"),
        "set_inode_field f mtime 20200101120000".to_string(),
        "set_inode_field f atime 20210101120000".to_string(),
        "set_inode_field f uid 1000".to_string(),
        "set_inode_field f gid 100".to_string(),
        "set_inode_field f mode 0100640".to_string(),
    ];
    let cmdfile = TempImage::new(&format!("{tag}-cmds"));
    std::fs::write(&cmdfile.path, cmds.join("\n") + "\n").unwrap();
    let o = run(
        "debugfs",
        [
            OsStr::new("-w"),
            OsStr::new("-f"),
            cmdfile.path.as_os_str(),
            img.path.as_os_str(),
        ],
    )
    .expect_ok();
    // debugfs exits 0 even when a request fails; it reports on stderr.
    for bad in ["File not found", "Could not", "error", "Error"] {
        assert!(
            !o.stderr.contains(bad) && !o.stdout.contains(bad),
            "debugfs reported a failure:\n{}",
            o.describe()
        );
    }
    assert_e2fsck_clean(&img.path, "the populated mke2fs image");
    Image {
        img,
        _big: big,
        big_len,
    }
}

fn read_superblock(path: &Path) -> Superblock {
    let buf = read_bytes(path, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE);
    Superblock::parse(&buf).unwrap_or_else(|e| panic!("Superblock::parse: {e}"))
}

fn read_descs(path: &Path, sb: &Superblock) -> Vec<GroupDesc> {
    let bs = sb.block_size() as u64;
    let table = (sb.s_first_data_block as u64 + 1) * bs;
    let buf = read_bytes(path, table, (sb.gdt_blocks() as u64 * bs) as usize);
    group_desc::parse_table(&buf, sb.group_count())
        .unwrap_or_else(|e| panic!("group_desc::parse_table: {e}"))
}

/// Reads inode `ino` straight from its inode table.
fn read_inode(path: &Path, sb: &Superblock, descs: &[GroupDesc], ino: u32) -> Inode {
    let (group, index) = sb.inode_group(ino);
    let table = descs[group.0 as usize].bg_inode_table as u64;
    let isz = sb.inode_size() as u64;
    let off = table * sb.block_size() as u64 + index as u64 * isz;
    let buf = read_bytes(path, off, isz as usize);
    Inode::parse(&buf).unwrap_or_else(|e| panic!("Inode::parse(<{ino}>): {e}"))
}

fn hash_name(v: u8) -> &'static str {
    match v {
        0 => "legacy",
        1 => "half_md4",
        2 => "tea",
        3 => "legacy_unsigned",
        4 => "half_md4_unsigned",
        5 => "tea_unsigned",
        _ => "unknown",
    }
}

fn check_superblock(path: &Path, sb: &Superblock) {
    let h = dumpe2fs_header(path);
    let mut diffs = Vec::new();
    let mut num = |key: &str, ours: u64| {
        let theirs = h.num(key);
        if theirs != ours {
            diffs.push(format!("{key}: dumpe2fs {theirs}, jbdfs {ours}"));
        }
    };
    num("Inode count", sb.s_inodes_count.into());
    num("Block count", sb.s_blocks_count.into());
    num("Reserved block count", sb.s_r_blocks_count.into());
    num("Free blocks", sb.s_free_blocks_count.into());
    num("Free inodes", sb.s_free_inodes_count.into());
    num("First block", sb.s_first_data_block.into());
    num("Block size", sb.block_size().into());
    num("Blocks per group", sb.s_blocks_per_group.into());
    num("Inodes per group", sb.s_inodes_per_group.into());
    num("Inode blocks per group", sb.inode_table_blocks().into());
    num("Inode size", sb.inode_size().into());
    num("First inode", sb.first_ino().into());
    num("Journal inode", sb.s_journal_inum.into());
    num("Mount count", sb.s_mnt_count.into());
    if sb.inode_size() > 128 {
        num("Required extra isize", sb.s_min_extra_isize.into());
        num("Desired extra isize", sb.s_want_extra_isize.into());
    }
    if h.get("Reserved GDT blocks").is_some() {
        num("Reserved GDT blocks", sb.s_reserved_gdt_blocks.into());
    } else if sb.s_reserved_gdt_blocks != 0 {
        diffs.push(format!(
            "Reserved GDT blocks: absent from dumpe2fs, jbdfs {}",
            sb.s_reserved_gdt_blocks
        ));
    }
    let mut text = |key: &str, ours: String| {
        let theirs = h.field(key);
        if theirs != ours {
            diffs.push(format!("{key}: dumpe2fs '{theirs}', jbdfs '{ours}'"));
        }
    };
    text("Filesystem UUID", jbdfs::util::format_uuid(&sb.s_uuid));
    let label = sb.volume_name();
    text(
        "Filesystem volume name",
        if label.is_empty() {
            "<none>".into()
        } else {
            label
        },
    );
    text("Filesystem magic number", format!("0x{:04X}", sb.s_magic));
    text(
        "Default directory hash",
        hash_name(sb.s_def_hash_version).into(),
    );
    text("Maximum mount count", sb.s_max_mnt_count.to_string());
    let ours: BTreeSet<String> = [
        (feature::Kind::Compat, sb.s_feature_compat),
        (feature::Kind::Incompat, sb.s_feature_incompat),
        (feature::Kind::RoCompat, sb.s_feature_ro_compat),
    ]
    .into_iter()
    .flat_map(|(k, m)| feature::names(k, m))
    .collect();
    let theirs = h.features();
    if ours != theirs {
        diffs.push(format!(
            "Filesystem features: dumpe2fs {theirs:?}, jbdfs {ours:?}"
        ));
    }
    assert!(
        diffs.is_empty(),
        "superblock fields differ from dumpe2fs -h:\n{}",
        diffs.join("\n")
    );
}

fn check_groups(path: &Path, sb: &Superblock, descs: &[GroupDesc]) {
    let groups = dumpe2fs_groups(path);
    assert_eq!(groups.len(), descs.len(), "group count");
    let itb = sb.inode_table_blocks();
    for (d, g) in descs.iter().zip(&groups) {
        let ours = DumpGroup {
            group: g.group,
            block_bitmap: d.bg_block_bitmap,
            inode_bitmap: d.bg_inode_bitmap,
            inode_table: (d.bg_inode_table, d.bg_inode_table + itb - 1),
            free_blocks: d.bg_free_blocks_count.into(),
            free_inodes: d.bg_free_inodes_count.into(),
            directories: d.bg_used_dirs_count.into(),
        };
        assert_eq!(&ours, g, "group {} descriptor vs dumpe2fs", g.group);
    }
    let free: u64 = descs.iter().map(|d| d.bg_free_blocks_count as u64).sum();
    assert_eq!(free, sb.s_free_blocks_count as u64, "sum of free blocks");
}

/// The inode number debugfs gives `path`.
fn inode_number(path: &Path, name: &str) -> u32 {
    let o = debugfs(path, &format!("stat {name}")).expect_ok();
    let st = parse_stat(&o.stdout);
    st.get("Inode")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no inode number for {name}:\n{}", o.describe()))
}

/// Every block of an inode's map, pre-order (indirect blocks before the
/// blocks they map), as `debugfs blocks` lists them.
fn map_blocks(path: &Path, sb: &Superblock, inode: &Inode) -> Vec<u32> {
    fn walk(path: &Path, bs: u32, block: u32, depth: u32, out: &mut Vec<u32>) {
        if block == 0 {
            return;
        }
        out.push(block);
        if depth == 0 {
            return;
        }
        let buf = read_bytes(path, block as u64 * bs as u64, bs as usize);
        for p in buf.chunks(4) {
            let p = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            walk(path, bs, p, depth - 1, out);
        }
    }
    let bs = sb.block_size();
    let mut out = Vec::new();
    for &b in &inode.i_block[..12] {
        if b != 0 {
            out.push(b);
        }
    }
    for depth in 1..=3 {
        walk(
            path,
            bs,
            inode.i_block[11 + depth as usize],
            depth,
            &mut out,
        );
    }
    out
}

fn type_name(mode: u16) -> &'static str {
    match mode & S_IFMT {
        S_IFREG => "regular",
        S_IFDIR => "directory",
        S_IFLNK => "symlink",
        _ => "other",
    }
}

/// Compares inode `<ino>` as jbdfs parses it with `debugfs stat`.
fn check_inode(path: &Path, sb: &Superblock, descs: &[GroupDesc], ino: u32) -> Inode {
    let inode = read_inode(path, sb, descs, ino);
    let o = debugfs(path, &format!("stat <{ino}>")).expect_ok();
    let st = parse_stat(&o.stdout);
    let get = |k: &str| -> &str {
        st.get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("debugfs stat <{ino}> has no '{k}':\n{}", o.stdout))
    };
    let mut diffs = Vec::new();
    let mut cmp = |what: &str, theirs: String, ours: String| {
        if theirs != ours {
            diffs.push(format!("{what}: debugfs '{theirs}', jbdfs '{ours}'"));
        }
    };
    cmp("Type", get("Type").into(), type_name(inode.i_mode).into());
    cmp(
        "Mode",
        get("Mode").into(),
        format!("{:04o}", inode.i_mode & 0o7777),
    );
    cmp(
        "Links",
        get("Links").into(),
        inode.i_links_count.to_string(),
    );
    cmp("Size", get("Size").into(), inode.i_size.to_string());
    cmp(
        "Blockcount",
        get("Blockcount").into(),
        inode.i_blocks.to_string(),
    );
    cmp("User", get("User").into(), inode.i_uid.to_string());
    cmp("Group", get("Group").into(), inode.i_gid.to_string());
    cmp(
        "Flags",
        get("Flags").into(),
        format!("0x{:x}", inode.i_flags),
    );
    cmp(
        "Generation",
        get("Generation").into(),
        inode.i_generation.to_string(),
    );
    cmp("File ACL", get("ACL").into(), inode.i_file_acl.to_string());
    let mut times = vec![
        ("ctime", inode.i_ctime),
        ("atime", inode.i_atime),
        ("mtime", inode.i_mtime),
    ];
    if sb.inode_size() > 128 {
        times.push(("crtime", inode.i_crtime));
        cmp(
            "Size of extra inode fields",
            get("Size of extra inode fields").into(),
            inode.i_extra_isize.to_string(),
        );
    }
    for (name, t) in times {
        let (sec, nsec) = parse_debugfs_time(get(name));
        cmp(
            name,
            format!("{sec}.{nsec:09}"),
            format!("{}.{:09}", t.sec, t.nsec),
        );
    }
    if inode.is_symlink() && inode.is_fast_symlink(sb.block_size()) {
        let bytes = inode.i_block_bytes();
        let target = String::from_utf8_lossy(&bytes[..inode.i_size as usize]).into_owned();
        cmp("Fast link dest", get("Fast link dest").into(), target);
    } else {
        let theirs = debugfs_blocks(path, ino);
        let ours = map_blocks(path, sb, &inode);
        let direct = theirs.len().min(12);
        cmp(
            "direct blocks",
            format!("{:?}", &theirs[..direct]),
            format!("{:?}", &inode.i_block[..direct]),
        );
        if theirs != ours {
            diffs.push(format!(
                "block map ({} vs {} blocks): debugfs {:?}..., jbdfs {:?}...",
                theirs.len(),
                ours.len(),
                &theirs[..theirs.len().min(20)],
                &ours[..ours.len().min(20)]
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "inode <{ino}> differs from debugfs stat:\n{}\n--- debugfs ---\n{}",
        diffs.join("\n"),
        o.stdout
    );
    inode
}

fn check_image(image: &Image, label: &str) {
    let path = &image.img.path;
    let sb = read_superblock(path);
    assert_eq!(sb.volume_name(), label);
    check_superblock(path, &sb);
    let descs = read_descs(path, &sb);
    check_groups(path, &sb, &descs);

    let root = check_inode(path, &sb, &descs, 2);
    assert!(root.is_dir());
    assert_eq!(root.i_links_count, 4, "root: ., .., lost+found, d");

    let journal = check_inode(path, &sb, &descs, sb.s_journal_inum);
    assert!(journal.is_reg());
    assert_eq!(
        &sb.s_jnl_blocks[..15],
        &journal.i_block[..],
        "s_jnl_blocks backs up the journal's i_block"
    );
    assert_eq!(
        ((sb.s_jnl_blocks[15] as u64) << 32) | sb.s_jnl_blocks[16] as u64,
        journal.i_size,
        "s_jnl_blocks[15..17] back up the journal's size"
    );

    let f = check_inode(path, &sb, &descs, inode_number(path, "f"));
    assert_eq!(f.i_mtime.sec, MTIME_2020);
    assert_eq!(f.i_atime.sec, ATIME_2021);
    assert_eq!((f.i_uid, f.i_gid), (1000, 100));
    assert_eq!(f.i_mode, S_IFREG | 0o640);
    assert_eq!(
        f.i_size,
        std::fs::metadata("/etc/passwd").unwrap().len(),
        "f is a copy of /etc/passwd"
    );

    let d = check_inode(path, &sb, &descs, inode_number(path, "d"));
    assert!(d.is_dir());
    assert_eq!(d.i_links_count, 3, "d: its entry, ., sub's ..");
    check_inode(path, &sb, &descs, inode_number(path, "d/sub"));

    let big = check_inode(path, &sb, &descs, inode_number(path, "d/big"));
    assert_eq!(big.i_size, image.big_len as u64);
    assert_ne!(big.i_block[12], 0, "d/big needs an indirect block");

    let s = check_inode(path, &sb, &descs, inode_number(path, "s"));
    assert!(s.is_symlink() && s.is_fast_symlink(sb.block_size()));
    assert_eq!(&s.i_block_bytes()[..9], b"/a/target");

    let long = check_inode(path, &sb, &descs, inode_number(path, "long"));
    assert!(long.is_symlink() && !long.is_fast_symlink(sb.block_size()));
    assert_eq!(long.i_size, LONG_TARGET_LEN as u64);
}

#[test]
fn mke2fs_4k_blocks_256_byte_inodes_parse_like_e2fsprogs() {
    let image = populated("fmt4k", &["-b", "4096", "-L", "jbdfs-4k"]);
    check_image(&image, "jbdfs-4k");
}

#[test]
fn mke2fs_1k_blocks_128_byte_inodes_parse_like_e2fsprogs() {
    let image = populated("fmt1k", &["-b", "1024", "-I", "128"]);
    let sb = read_superblock(&image.img.path);
    let journal = read_inode(
        &image.img.path,
        &sb,
        &read_descs(&image.img.path, &sb),
        sb.s_journal_inum,
    );
    assert_ne!(
        journal.i_block[13], 0,
        "a 4096-block journal in 1 KiB blocks needs a double-indirect block"
    );
    check_image(&image, "");
}

#[test]
fn jbdfs_image_parses_like_e2fsprogs() {
    // The same comparisons on a filesystem jbdfs made itself.
    let img = TempImage::new("fmt-jbdfs");
    let req = jbdfs::mkfs::Request {
        options: jbdfs::mkfs::MkfsOptions {
            block_size: Some(2048),
            label: "ours".into(),
            ..Default::default()
        },
        size: Some(64 << 20),
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(&img.path, &req).unwrap();
    let sb = read_superblock(&img.path);
    check_superblock(&img.path, &sb);
    let descs = read_descs(&img.path, &sb);
    check_groups(&img.path, &sb, &descs);
    check_inode(&img.path, &sb, &descs, 2);
    check_inode(&img.path, &sb, &descs, 8);
    check_inode(&img.path, &sb, &descs, 11);
}
