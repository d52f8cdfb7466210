#!/usr/bin/env bash
# A corpus of damaged ext3 images, and the check of fsck.jbdfs against it.
#
# What is left here since issue 20 (the test kit): the damage that needs
# e2fsprogs to make (debugfs's bitmap, superblock, group descriptor,
# directory, link, journal-writer and xattr commands, htree indexes built by
# e2fsck -D, ACLs, the resize inode) on mke2fs's bases, and the agreement
# table over it. The damage to one inode (the sif-* recipes but
# sif-bad-fifo, and clri-*: links, block pointers, sizes, i_blocks, dtime,
# modes, flags, fast symlinks, file_acl, extra_isize, the journal inode)
# and the images that cannot be repaired in place (truncated, not ext3)
# moved to Rust, to the test
# named_inode_damage_is_judged_as_e2fsck_judges_it_and_repaired in
# daemon/tests/robust_damage.rs, which checks each the way this script did
# (on a jbdfs base and an mke2fs base). fsck/tests/images.rs runs this script on two
# bases in cargo test; scripts/test.sh does not run it otherwise.
#
#   scripts/fsck-corpus.sh make  DIR [BASES]   build the corpus in DIR
#   scripts/fsck-corpus.sh check DIR           run the checks, print a table
#   scripts/fsck-corpus.sh all   DIR [BASES]   both (the default)
#
# BASES is a comma-separated subset of: 1k,2k,4k,jbdfs (default: all).
# Clean images come from mke2fs -t ext3 (and from jbdfs's mkfs), populated
# with debugfs (directories, small and indirect-mapped files, symlinks, a
# fifo, a hard link, an extended attribute); each damage is made with
# debugfs (sif, clri, freeb, setb, freei, seti, ssv, set_bg, unlink, link,
# kill_file, jo/jw/jc) or by poking bytes with dd; the htree-* images add
# a directory that e2fsck -D indexes, then damage its index. For each image:
#   - fsck-jbdfs -fn and e2fsck -fn agree on clean (0) against damaged;
#   - fsck-jbdfs -fn changes no byte;
#   - fsck-jbdfs -fy exits 1 (or 0 where e2fsck -fy does too: replaying
#     the journal and processing the orphan list alone do not count as
#     fixing, for either), e2fsck -fn then finds the image clean, and a
#     second fsck-jbdfs -fn exits 0;
#   - nothing panics (exit 101), hangs (timeout) or grows the image.
# It also reports how often fsck-jbdfs -fp exits as e2fsck -fp does (preen
# fixes only what e2fsck's preen fixes, and otherwise stops with exit 4).
# STRICTER lists damage that fsck.jbdfs reports and e2fsck 1.47 does not,
# where the Linux kernel agrees with fsck.jbdfs: a journal superblock with
# s_first = 0 ("JBD2: Invalid start block of journal: 0", mount fails).
# Those count as disagreements in the rate but not as failures.
# Environment: FSCK (the fsck-jbdfs binary), MKFS (mkfs-jbdfs), TIMEOUT.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FSCK="${FSCK:-$JBDFS_ROOT/target/release/fsck-jbdfs}"
MKFS="${MKFS:-$(dirname "$FSCK")/mkfs-jbdfs}"
TIMEOUT="${TIMEOUT:-60}"
STRICTER="jsb-first"
export LC_ALL=C

dbg() { # dbg IMG CMD...: run debugfs -w commands on IMG
    local img="$1"; shift
    printf '%s\n' "$@" | debugfs -w -f - "$img" >/dev/null 2>&1
}
dq() { # dq IMG CMD: one read-only debugfs command's output
    debugfs -R "$2" "$1" 2>/dev/null
}
bmap() { dq "$1" "bmap $2 $3" | tail -1; }
ino_of() { dq "$1" "stat $2" | sed -n 's/^Inode: \([0-9]*\).*/\1/p' | head -1; }
bsize() { dumpe2fs -h "$1" 2>/dev/null | sed -n 's/^Block size: *//p'; }
itable() { # itable IMG GROUP: first block of the group's inode table
    dumpe2fs "$1" 2>/dev/null | awk -v g="$2" '
        /^Group [0-9]+:/ { cur = $2 + 0 }
        /Inode table at/ && cur == g { split($4, a, "-"); print a[1]; exit }'
}
free_block() { # a free block near the end of group 0
    dumpe2fs "$1" 2>/dev/null | sed -n 's/^  Free blocks: \([0-9][0-9]*\).*/\1/p' | head -1
}
poke() { # poke IMG OFFSET HEXBYTES: write bytes at a byte offset
    local img="$1" off="$2" hex="$3"
    printf "$(echo "$hex" | sed 's/../\\x&/g')" |
        dd of="$img" bs=1 seek="$off" conv=notrunc status=none
}
le32() { printf '%02x%02x%02x%02x' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)); }
le16() { printf '%02x%02x' $(($1 & 255)) $((($1 >> 8) & 255)); }
be32() { printf '%08x' "$1"; }

populate() { # populate IMG: a small tree that exercises every pass
    local img="$1" tmp
    tmp="$(mktemp -d)"
    printf 'hello\n' >"$tmp/small"
    head -c 40000 /dev/urandom >"$tmp/mid"
    head -c 1200000 /dev/urandom >"$tmp/big"
    head -c 300 /dev/zero | tr '\0' 'x' >"$tmp/target"
    dbg "$img" "mkdir d1" "mkdir d1/sub" "mkdir d2" \
        "write $tmp/small f1" "write $tmp/mid f2" "write $tmp/big big" \
        "write $tmp/small d1/f3" "write $tmp/small d1/sub/f4" "write $tmp/mid d2/f5" \
        "symlink fastlink /some/where" "symlink slowlink $(cat "$tmp/target")" \
        "mknod fifo p" "ea_set f2 user.note hello-world" \
        "ln f1 d2/f1-hardlink" "sif f1 links_count 2"
    for i in $(seq 1 40); do echo "write $tmp/small d2/n$i"; done | debugfs -w -f - "$img" >/dev/null 2>&1
    rm -rf "$tmp"
}

make_base() { # make_base KIND OUT
    local kind="$1" out="$2"
    rm -f "$out"
    case "$kind" in
        1k) mke2fs -q -F -t ext3 -b 1024 -I 128 -g 4096 "$out" 16M ;;
        2k) mke2fs -q -F -t ext3 -b 2048 -I 256 -g 8192 "$out" 32M ;;
        4k) mke2fs -q -F -t ext3 -b 4096 -I 256 -g 8192 "$out" 64M ;;
        jbdfs) truncate -s 32M "$out" && "$MKFS" -q -b 1024 -I 256 "$out" >/dev/null ;;
    esac || return 1
    populate "$out"
    e2fsck -fn "$out" >/dev/null 2>&1 || { warn "base $kind is not clean"; return 1; }
}

# damage NAME BASE OUT: make one damaged copy. The list is the corpus.
DAMAGES="sif-bad-fifo freeb setb freei seti ssv-free-blocks ssv-free-inodes ssv-orphan
ssv-orphan-deleted ssv-magic ssv-inodes-count ssv-state-error set_bg-free-blocks
set_bg-free-inodes set_bg-dirs set_bg-block-bitmap set_bg-inode-bitmap set_bg-inode-table
unlink-file unlink-dir link-extra kill_file kill_file-dir dir-rec_len dir-bad-inode
dir-no-dot dir-no-dotdot dir-garbage ind-garbage ea-refcount bitmap-padding jsb-magic
jsb-first jsb-blocksize journal-pending journal-bad-commit journal-bad-tag htree-indexed
htree-hash-order htree-bad-limit htree-bad-count htree-bad-block htree-leaf-swap
htree-hash-version htree-depth htree-incompat htree-no-dir-index acl-set acl-value
acl-on-block resize-clri resize-dind resize-dind-garbage"

damage() {
    local name="$1" base="$2" out="$3" bs b ino t
    cp --sparse=always "$base" "$out"
    bs="$(bsize "$out")"
    case "$name" in
        sif-bad-fifo) dbg "$out" "sif fifo flags 0x80000" ;;
        freeb) dbg "$out" "freeb $(bmap "$out" f2 0)" ;;
        setb) dbg "$out" "setb $(free_block "$out")" ;;
        freei) dbg "$out" "freei d1/f3" ;;
        seti) dbg "$out" "seti <$(( $(ino_of "$out" big) + 50 ))>" ;;
        ssv-free-blocks) dbg "$out" "ssv free_blocks_count 17" ;;
        ssv-free-inodes) dbg "$out" "ssv free_inodes_count 3" ;;
        ssv-orphan) dbg "$out" "ssv last_orphan $(ino_of "$out" big)" "sif big size 5000" ;;
        ssv-orphan-deleted) dbg "$out" "unlink d2/f5" "sif d2/n1 links_count 1" \
            "ssv last_orphan $(ino_of "$out" d2/f5)" "sif <$(ino_of "$out" d2/f5)> links_count 0" ;;
        ssv-magic) poke "$out" $((1024 + 56)) "0000" ;;
        ssv-inodes-count) dbg "$out" "ssv inodes_count 12345" ;;
        ssv-state-error) dbg "$out" "ssv state 3" ;;
        set_bg-free-blocks) dbg "$out" "set_bg 0 free_blocks_count 1" ;;
        set_bg-free-inodes) dbg "$out" "set_bg 0 free_inodes_count 2" ;;
        set_bg-dirs) dbg "$out" "set_bg 0 used_dirs_count 9" ;;
        set_bg-block-bitmap) dbg "$out" "set_bg 1 block_bitmap 0" ;;
        set_bg-inode-bitmap) dbg "$out" "set_bg 1 inode_bitmap $(itable "$out" 1)" ;;
        set_bg-inode-table) dbg "$out" "set_bg 1 inode_table 0" ;;
        unlink-file) dbg "$out" "unlink d1/f3" ;;
        unlink-dir) dbg "$out" "unlink d1" ;;
        link-extra) dbg "$out" "link d1/f3 d2/f3-again" ;;
        kill_file) dbg "$out" "kill_file d1/f3" ;;
        kill_file-dir) dbg "$out" "kill_file d1/sub" ;;
        dir-rec_len) b="$(bmap "$out" d1 0)"; poke "$out" $((b * bs + 24 + 4)) "$(le16 5)" ;;
        dir-bad-inode) b="$(bmap "$out" d1 0)"; poke "$out" $((b * bs + 24)) "$(le32 99999999)" ;;
        dir-no-dot) b="$(bmap "$out" d1 0)"; poke "$out" $((b * bs)) "$(le32 0)" ;;
        dir-no-dotdot) b="$(bmap "$out" d1 0)"; poke "$out" $((b * bs + 12 + 8)) "2e78" ;;
        dir-garbage) b="$(bmap "$out" d2 0)"
            head -c 200 /dev/urandom | dd of="$out" bs=1 seek=$((b * bs + 100)) conv=notrunc status=none ;;
        ind-garbage) b="$(dq "$out" "stat big" | grep -o '(IND):[0-9]*' | head -1 | cut -d: -f2)"
            head -c 64 /dev/urandom | dd of="$out" bs=1 seek=$((b * bs + 16)) conv=notrunc status=none ;;
        ea-refcount) b="$(dq "$out" "stat f2" | sed -n 's/.*File ACL: \([0-9]*\).*/\1/p')"
            [ -n "$b" ] && [ "$b" != 0 ] || return 2
            poke "$out" $((b * bs + 4)) "$(le32 7)" ;;
        bitmap-padding) b="$(dumpe2fs "$out" 2>/dev/null | sed -n 's/.*Block bitmap at \([0-9]*\).*/\1/p' | tail -1)"
            poke "$out" $((b * bs + bs - 1)) "00" ;;
        jsb-magic) b="$(bmap "$out" '<8>' 0)"; poke "$out" $((b * bs)) "00000000" ;;
        jsb-first) b="$(bmap "$out" '<8>' 0)"; poke "$out" $((b * bs + 20)) "$(be32 0)" ;;
        jsb-blocksize) b="$(bmap "$out" '<8>' 0)"; poke "$out" $((b * bs + 12)) "$(be32 512)" ;;
        journal-pending|journal-bad-commit|journal-bad-tag)
            journal_damage "$name" "$out" "$bs" ;;
        htree-*) htree_damage "$name" "$out" "$bs" ;;
        acl-*) acl_damage "$name" "$out" "$bs" ;;
        resize-*) dumpe2fs -h "$out" 2>/dev/null | grep -q '^Filesystem features:.*resize_inode' || return 2
            case "$name" in
                resize-clri) dbg "$out" "clri <7>" ;;
                resize-dind) dbg "$out" "sif <7> block[DIND] 0" ;;
                resize-dind-garbage) b="$(dq "$out" "stat <7>" | grep -o '(DIND):[0-9]*' | head -1 | cut -d: -f2)"
                    [ -n "$b" ] || return 2
                    head -c 64 /dev/urandom | dd of="$out" bs=1 seek=$((b * bs + 8)) conv=notrunc status=none ;;
            esac ;;
        *) return 2 ;;
    esac
}

# A POSIX access ACL (a named user and a mask, in the xattr format debugfs
# converts to ext3's) on d1/f3, in its own xattr block: acl-set leaves it
# whole (clean), acl-value damages its value in the block (a hash
# mismatch), acl-on-block points a second file at the block without
# counting it (a refcount of 1 for two owners).
acl_damage() {
    local name="$1" out="$2" bs="$3" tmp b
    tmp="$(mktemp)"
    printf '\x02\x00\x00\x00\x01\x00\x06\x00\xff\xff\xff\xff\x02\x00\x04\x00\xe8\x03\x00\x00\x04\x00\x04\x00\xff\xff\xff\xff\x10\x00\x04\x00\xff\xff\xff\xff\x20\x00\x00\x00\xff\xff\xff\xff' >"$tmp"
    dbg "$out" "ea_set -f $tmp d1/f3 system.posix_acl_access"
    rm -f "$tmp"
    [ "$name" = acl-set ] && return 0
    # With room in the inode (256-byte inodes) the ACL stays there.
    b="$(dq "$out" "stat d1/f3" | sed -n 's/.*File ACL: \([0-9]*\).*/\1/p')"
    [ -n "$b" ] && [ "$b" != 0 ] || return 2
    case "$name" in
        acl-value) poke "$out" $((b * bs + bs - 28)) "07" ;;
        acl-on-block) dbg "$out" "sif d1/sub/f4 file_acl $b" ;;
    esac
}

# A transaction logged with debugfs's journal writer: a copy of a free
# block's own (zero) contents, so the image is consistent whether or not
# the log is replayed (e2fsck -n checks it unreplayed, fsck.jbdfs -n as if
# replayed), then optionally damaged.
journal_damage() {
    local name="$1" out="$2" bs="$3" tmp jb j0 free
    tmp="$(mktemp)"
    free="$(free_block "$out")"
    dd if="$out" of="$tmp" bs="$bs" skip="$free" count=1 status=none
    dbg "$out" "jo" "jw -b $free $tmp" "jc"
    rm -f "$tmp"
    j0="$(bmap "$out" '<8>' 0)"
    case "$name" in
        journal-bad-commit) # the commit block follows the descriptor and one data block
            jb="$(bmap "$out" '<8>' 3)"; poke "$out" $((jb * bs)) "00000000" ;;
        journal-bad-tag) # the first tag's home block: outside the filesystem
            jb="$(bmap "$out" '<8>' 1)"; poke "$out" $((jb * bs + 12)) "$(be32 4000000000)" ;;
    esac
    : "$j0"
}

# An indexed directory h (400 names; e2fsck -D builds its index), then
# damage to its root block: dx_root_info at +24, the countlimit at +32,
# entry i's hash and block at +32+8i and +36+8i.
htree_damage() {
    local name="$1" out="$2" bs="$3" r e1 e2
    { echo "mkdir h"; for i in $(seq 1 400); do echo "write /dev/null h/an-indexed-name-$i"; done; } |
        debugfs -w -f - "$out" >/dev/null 2>&1
    e2fsck -fyD "$out" >/dev/null 2>&1
    dq "$out" "stat h" | grep -q 'Flags: 0x1000' || return 1
    r=$(( $(bmap "$out" h 0) * bs ))
    case "$name" in
        htree-indexed) ;;
        htree-hash-order) poke "$out" $((r + 48)) "$(le32 16)" ;;
        htree-bad-limit) poke "$out" $((r + 32)) "$(le16 511)" ;;
        htree-bad-count) poke "$out" $((r + 34)) "$(le16 $(( (bs - 32) / 8 + 3 )))" ;;
        htree-bad-block) poke "$out" $((r + 44)) "$(le32 60000)" ;;
        htree-leaf-swap)
            e1=$(od -An -tu4 -j $((r + 44)) -N 4 "$out" | tr -d ' ')
            e2=$(od -An -tu4 -j $((r + 52)) -N 4 "$out" | tr -d ' ')
            poke "$out" $((r + 44)) "$(le32 "$e2")"; poke "$out" $((r + 52)) "$(le32 "$e1")" ;;
        htree-hash-version) poke "$out" $((r + 28)) "f0" ;;
        htree-depth) poke "$out" $((r + 30)) "08" ;;
        htree-incompat) poke "$out" $((r + 31)) "01" ;;
        htree-no-dir-index) dbg "$out" "feature -dir_index" ;;
    esac
}

cmd_make() {
    local dir="$1" bases="${2:-1k,2k,4k,jbdfs}" kind name rc
    mkdir -p "$dir"
    for kind in ${bases//,/ }; do
        make_base "$kind" "$dir/base-$kind.img" || { warn "cannot make base $kind"; continue; }
        cp --sparse=always "$dir/base-$kind.img" "$dir/$kind-clean.img"
        for name in $DAMAGES; do
            damage "$name" "$dir/base-$kind.img" "$dir/$kind-$name.img"
            rc=$?
            [ $rc -eq 0 ] || { rm -f "$dir/$kind-$name.img"; [ $rc -eq 2 ] || warn "$kind-$name: damage failed"; }
        done
        rm -f "$dir/base-$kind.img"
    done
}

run_fsck() { # run_fsck ARGS IMG: exit status, 124 on timeout
    timeout "$TIMEOUT" "$FSCK" "$@" >/dev/null 2>&1
}

cmd_check() {
    local dir="$1" img n=0 agree=0 ok=0 preen_agree=0 failures=""
    printf '%-32s %5s %5s %6s %5s %5s %5s %5s\n' image e2fsck ours agree fy after again ok
    for img in "$dir"/*.img; do
        local name e ours sum1 sum2 size1 size2 fy after again verdict fatal=0 good=1
        name="$(basename "$img" .img)"
        local work="$img.work"
        cp --sparse=always "$img" "$work"
        e2fsck -fn "$work" >/dev/null 2>&1; e=$?
        sum1="$(md5sum <"$work")"; size1="$(stat -c %s "$work")"
        run_fsck -fn "$work"; ours=$?
        sum2="$(md5sum <"$work")"
        local same=$(( (e == 0) == (ours == 0) ))
        [ "$sum1" = "$sum2" ] || { good=0; verdict="-n wrote"; }
        local ep op
        cp --sparse=always "$img" "$work.p"
        e2fsck -fp "$work.p" >/dev/null 2>&1; ep=$?
        cp --sparse=always "$img" "$work.p"
        run_fsck -fp "$work.p"; op=$?
        rm -f "$work.p"
        [ $ep = $op ] && preen_agree=$((preen_agree + 1))
        local ey
        cp --sparse=always "$img" "$work.p"
        e2fsck -fy "$work.p" >/dev/null 2>&1; ey=$?
        rm -f "$work.p"
        run_fsck -fy "$work"; fy=$?
        size2="$(stat -c %s "$work")"
        [ "$size1" = "$size2" ] || { good=0; verdict="grew"; }
        if [ $fatal = 1 ]; then
            after=-; again=-
            [ $fy = 8 ] || good=0
            [ "$(md5sum <"$work")" = "$sum1" ] || good=0
        else
            e2fsck -fn "$work" >"$work.after" 2>&1; after=$?
            run_fsck -fn "$work"; again=$?
            case "$name" in
                *-clean) [ $fy = 0 ] || good=0 ;;
                *) if [ $fy != 1 ] && ! { [ $ey = 0 ] && [ $fy = 0 ]; }; then good=0; fi ;;
            esac
            [ $after = 0 ] && [ $again = 0 ] || good=0
        fi
        for s in $ours $fy $again; do
            case "$s" in 101|124|134|139) good=0 ;; esac
        done
        n=$((n + 1)); agree=$((agree + same)); ok=$((ok + good))
        local excused=0
        case " $STRICTER " in *" ${name#*-} "*) [ $ours != 0 ] && excused=1 ;; esac
        { [ $same = 1 ] || [ $excused = 1 ]; } && [ $good = 1 ] || failures="$failures $name"
        printf '%-32s %5s %5s %6s %5s %5s %5s %5s\n' "$name" $e $ours \
            "$([ $same = 1 ] && echo yes || echo NO)" $fy $after $again \
            "$([ $good = 1 ] && echo yes || echo NO)"
        rm -f "$work" "$work.after"
    done
    [ "$n" -gt 0 ] || die "no images in $dir"
    printf '\nagreement (clean vs damaged, -fn): %d/%d (%d.%d%%)\n' "$agree" "$n" \
        $((agree * 100 / n)) $((agree * 1000 / n % 10))
    printf 'repair checks passed: %d/%d\n' "$ok" "$n"
    printf 'preen (-fp) exit status equal to e2fsck -fp: %d/%d\n' "$preen_agree" "$n"
    [ -z "$failures" ] || printf 'failures:%s\n' "$failures"
    [ -z "$failures" ]
}

main() {
    local cmd="${1:-all}" dir="${2:-/tmp/fsck-corpus}"
    [ -x "$FSCK" ] || die "no fsck binary at $FSCK (cargo build --release -p fsck-jbdfs)"
    case "$cmd" in
        make) cmd_make "$dir" "${3:-}" ;;
        check) cmd_check "$dir" ;;
        all) cmd_make "$dir" "${3:-}" && cmd_check "$dir" ;;
        *) die "usage: $0 [make|check|all] DIR [BASES]" ;;
    esac
}
main "$@"
