// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The other direction: trees that Linux wrote on `mke2fs -t ext3` images
//! (dir_index and resize_inode on) read back identically through jbdfs, and
//! stay clean for e2fsck after jbdfs changes their large directories.

use jbdfs_testkit as common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

fn content(i: usize) -> Vec<u8> {
    format!("entry {i} ").repeat(i % 50 + 1).into_bytes()
}

/// Writes, through Linux, a directory big enough to be indexed.
fn linux_tree(image: &Path, files: usize) -> BTreeMap<String, Vec<u8>> {
    let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = LoopMount::mount(image).unwrap_or_else(|o| panic!("{}", o.describe()));
    let dir = m.path().join("big");
    std::fs::create_dir(&dir).unwrap();
    let mut expect = BTreeMap::new();
    for i in 0..files {
        let name = format!("file-with-a-longish-name-{i:05}");
        std::fs::write(dir.join(&name), content(i)).unwrap();
        expect.insert(name, content(i));
    }
    m.umount().expect_ok();
    expect
}

#[test]
fn htree_directory_from_linux_reads_back_and_stays_clean() {
    jbdfs_testkit::require!(loop);
    for bs in ["1024", "4096"] {
        let img = TempImage::sparse("linux-htree", 64 << 20);
        run(
            "mke2fs",
            ["-q", "-F", "-t", "ext3", "-b", bs, img.path_str()],
        )
        .expect_ok();
        let expect = linux_tree(&img.path, 3000);
        let htree = debugfs(&img.path, "htree big");
        assert!(
            htree.stdout.contains("Root node dump"),
            "Linux made no htree: {}",
            htree.describe()
        );

        let fs = mount_file(&img.path);
        let (big, _) = fs.lookup(ROOT, b"big").unwrap();
        let listed = fs.readdir(big, 0, usize::MAX).unwrap();
        assert_eq!(listed.len(), expect.len() + 2, "readdir sees every name");
        for (name, data) in &expect {
            let (ino, inode) = fs.lookup(big, name.as_bytes()).unwrap();
            assert_eq!(inode.i_size as usize, data.len());
            assert_eq!(&fs.read(ino, 0, data.len() as u32).unwrap(), data, "{name}");
        }
        // Change the indexed directory: remove a third, add new names.
        for i in (0..3000).step_by(3) {
            fs.unlink(big, format!("file-with-a-longish-name-{i:05}").as_bytes())
                .unwrap();
        }
        for i in 0..1000 {
            let (f, _) = fs
                .mknod(big, format!("jbdfs-{i}").as_bytes(), 0o100644, 0, ME)
                .unwrap();
            fs.write(f, 0, &content(i), true).unwrap();
        }
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(
            &img.path,
            &format!("a Linux htree directory changed by jbdfs ({bs}-byte blocks)"),
        );

        // And Linux reads what jbdfs left.
        let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut m = LoopMount::mount(&img.path).unwrap_or_else(|o| panic!("{}", o.describe()));
        let names = std::fs::read_dir(m.path().join("big")).unwrap().count();
        assert_eq!(names, 2000 + 1000);
        assert_eq!(
            std::fs::read(m.path().join("big/jbdfs-7")).unwrap(),
            content(7)
        );
        m.umount().expect_ok();
    }
}
